"""The process launcher: results in rank order, errors and timeouts kill every child."""
import multiprocessing
import os
import sys

import pytest

import llm_dataflow as ldf
from llm_dataflow import launch


def read_env(rank: int, world_size: int, name: str) -> str | None:
    """Rank target: the environment variable ``name`` as the rank sees it."""
    return os.environ.get(name)


def _live_ranks():
    """Live (non-zombie) ranks of this test process: its spawned children (``spawn_main``), and
    the children of its fork server (Linux, ``ldf.start_method() == "forkserver"``; forked from
    the server, a rank shows the server's command line). Python's shared helpers, the
    resource_tracker and the fork server itself, are not ranks; nor are the other processes a
    test worker runs (browsers, kernels)."""
    procs = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        procs[pid] = (stat[1], stat[0], cmd)
    me = str(os.getpid())
    servers = {pid for pid, (ppid, _, cmd) in procs.items() if ppid == me and "forkserver" in cmd}
    return [int(pid) for pid, (ppid, state, cmd) in procs.items()
            if state != "Z" and ((ppid == me and "spawn_main" in cmd) or ppid in servers)]


def _assert_no_children():
    assert multiprocessing.active_children() == []
    assert _live_ranks() == []


def test_hello_results_in_rank_order():
    res = ldf.run_distributed(launch.hello, 2, backend="gloo", timeout_s=120)
    assert [r["rank"] for r in res] == [0, 1]
    assert all(r["sum"] == 1.0 and r["backend"] == "gloo" for r in res)  # 0 + 1 on every rank
    _assert_no_children()


def test_error_in_one_rank_kills_all_and_raises():
    with pytest.raises(RuntimeError, match="rank 1 fails on purpose"):
        ldf.run_distributed(launch.demo_fail, 2, backend="gloo", timeout_s=120)
    _assert_no_children()


def test_timeout_kills_all():
    with pytest.raises(TimeoutError, match="timeout_s=0.5"):
        ldf.run_distributed(launch.demo_sleep, 2, 60.0, backend="gloo", timeout_s=0.5)
    _assert_no_children()


def test_ranks_are_forked_on_linux_and_spawned_elsewhere():
    assert ldf.start_method() == ("forkserver" if sys.platform.startswith("linux") else "spawn")


def test_ranks_see_the_callers_environment_now(monkeypatch):
    """A fork server keeps the environment it started with; a rank gets the caller's at the call."""
    ldf.run_distributed(launch.hello, 2, backend="gloo", timeout_s=120)     # the server is running
    monkeypatch.setenv("LDF_TEST_RANK_ENV", "set after the first run")
    res = ldf.run_distributed(read_env, 2, "LDF_TEST_RANK_ENV", backend="gloo", timeout_s=120)
    assert res == ["set after the first run"] * 2
    _assert_no_children()


def test_bad_input():
    with pytest.raises(ValueError, match="world_size=0"):
        ldf.run_distributed(launch.hello, 0)
    with pytest.raises(ValueError, match="module-level"):
        ldf.run_distributed(lambda r, n: r, 2)
    with pytest.raises(ValueError, match="backend='mpi'"):
        ldf.run_distributed(launch.hello, 2, backend="mpi")
    with pytest.raises(ValueError, match="timeout_s"):
        ldf.run_distributed(launch.hello, 2, timeout_s=0)
    with pytest.raises(ValueError, match="demo='nope'"):
        launch._resolve("nope")


def test_cli_lists_demos(capsys):
    assert launch.main(["--list"]) == 0
    out = capsys.readouterr().out
    for name in launch.DEMOS:
        assert name in out
    for spec in launch.DEMOS.values():  # every registered demo resolves to a function
        assert callable(launch._resolve(spec))


def test_free_port_and_backend():
    assert 0 < ldf.free_port() < 65536
    assert ldf.pick_backend(10**6) == "gloo"  # never a million GPUs
    assert ldf.rank_device().type == "cpu"  # outside a process group
