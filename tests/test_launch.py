"""The process launcher: results in rank order, errors and timeouts kill every child."""
import multiprocessing
import os

import pytest

import llm_dataflow as ldf
from llm_dataflow import launch


def _spawned_children():
    """Live (non-zombie) child processes of this test process started by multiprocessing spawn,
    except Python's shared resource_tracker."""
    out = []
    me = str(os.getpid())
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
        state, ppid = stat[0], stat[1]
        if ppid == me and state != "Z" and "spawn_main" in cmd and "resource_tracker" not in cmd:
            out.append(int(pid))
    return out


def _assert_no_children():
    assert multiprocessing.active_children() == []
    assert _spawned_children() == []


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
