"""Start N cooperating processes (one per "GPU") and collect what each returns.

Every multi-process lesson (chapter 07's parallelism, chapter 08's prefill/decode
disaggregation) runs the *same* code two ways:

* from Python, a notebook or a test: ``run_distributed(target, world_size, *args)`` starts
  ``world_size`` processes (:func:`start_method` says how), gives each a ``torch.distributed``
  process group (gloo on CPU, NCCL on CUDA), calls ``target(rank, world_size, *args)`` in each
  and returns the list of their return values;
* from a shell, on one or many GPUs: ``torchrun --nproc-per-node N -m llm_dataflow.launch DEMO``
  (torchrun sets ``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/``MASTER_PORT``; this module then only
  initialises the group and calls the demo).  Without torchrun,
  ``python -m llm_dataflow.launch DEMO --nproc N`` starts the processes itself.
  ``python -m llm_dataflow.launch --list`` names the demos; ``DEMO`` may also be any
  ``package.module:function``.

Rules for a target: it is a *module-level* function of an importable module (a rank imports
it by name; a function defined in a notebook or in ``__main__`` cannot be unpickled
there), it takes ``(rank, world_size, *args)``, and it returns something picklable.  Tensors
in the return value are moved to CPU before they are sent back.  Use :func:`rank_device` for
the device a rank should compute on (``cuda:<local rank>`` under NCCL, else CPU).

The process group uses ``MASTER_ADDR=127.0.0.1`` and a free TCP port chosen by the OS.  On
error in any rank, or when ``timeout_s`` passes, every child is killed and the parent raises;
on return no rank is left (Python's own helpers, the ``resource_tracker`` and on Linux the fork
server, are shared by every run of a session, are not ranks, and exit with the interpreter).
"""
from __future__ import annotations

import argparse
import datetime
import importlib
import os
import pickle
import socket
import sys
import time
import traceback

import torch
from .core.units import require_positive

# the demo targets (hello, demo_fail, demo_sleep) and main() stay under ldf.launch.*
__all__ = ["run_distributed", "rank_device", "pick_backend", "free_port", "start_method", "DEMOS"]

#: Demo targets runnable as ``python -m llm_dataflow.launch NAME`` (or under torchrun).
#: Each is ``"module:function"`` taking ``(rank, world_size)`` and returning a picklable summary.
DEMOS: dict[str, str] = {
    "hello": "llm_dataflow.launch:hello",
    "collectives": "llm_dataflow.collectives:demo_collectives",
    "tensor_parallel": "llm_dataflow.parallel:demo_tensor_parallel",
    "pipeline_parallel": "llm_dataflow.parallel:demo_pipeline_parallel",
    "expert_parallel": "llm_dataflow.parallel:demo_expert_parallel",
    "context_parallel": "llm_dataflow.parallel:demo_context_parallel",
}


def pick_backend(world_size: int | None = None) -> str:
    """``"nccl"`` when CUDA is available with at least ``world_size`` GPUs, else ``"gloo"``.

    NCCL needs one GPU per rank; gloo runs anywhere (CPU tensors).  ``LDF_DEVICE=cpu`` (the test
    suite sets it, so saved CPU outputs are what is checked) forces gloo.
    """
    if os.environ.get("LDF_DEVICE") == "cpu":
        return "gloo"
    if torch.cuda.is_available() and torch.distributed.is_nccl_available():
        if world_size is None or torch.cuda.device_count() >= world_size:
            return "nccl"
    return "gloo"


def start_method() -> str:
    """How :func:`run_distributed` starts its ranks: ``"forkserver"`` on Linux, else ``"spawn"``.

    A spawned rank is a fresh interpreter that imports torch again (seconds per rank).  Under
    ``"forkserver"`` one helper process per session imports torch and this module once, and
    each rank is forked from it: measured on 2 cores, the tests of ``launch``, ``parallel`` and
    ``collectives`` (6 runs, 15 ranks) took 105.7 CPU-s spawned and 50.1 forked.  Not on macOS,
    where forking a process that has loaded system frameworks is unsafe (Python's own default
    there is spawn), nor on Windows, which has spawn only.  Either way a rank's ``os.environ`` is
    the caller's at the call (:func:`run_distributed` hands it over); what torch read from the
    environment while it was imported is the fork server's, from when that started.
    """
    return "forkserver" if sys.platform.startswith("linux") else "spawn"


def _context():
    import torch.multiprocessing as tmp

    ctx = tmp.get_context(start_method())
    if ctx.get_start_method() == "forkserver":
        # what every rank needs, imported once in the fork server (read when it starts)
        ctx.set_forkserver_preload(["torch", "torch.distributed", "llm_dataflow.launch"])
    return ctx


def rank_device() -> torch.device:
    """The device this rank should put its tensors on: ``cuda:LOCAL_RANK`` when the process
    group uses NCCL, else CPU (gloo).  Outside a process group: ``cpu``."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_backend() == "nccl":
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", dist.get_rank())))
    return torch.device("cpu")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that the OS reports free right now (bind to port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hello(rank: int, world_size: int) -> dict:
    """Smallest demo: every rank all-reduces its rank number; returns ``{rank, sum, backend}``.
    The sum is ``world_size·(world_size−1)/2`` on every rank."""
    import torch.distributed as dist

    t = torch.tensor([float(rank)], device=rank_device())
    dist.all_reduce(t)
    return {"rank": rank, "sum": float(t.item()), "backend": dist.get_backend()}


def demo_fail(rank: int, world_size: int, bad_rank: int = 1) -> int:
    """Rank ``bad_rank`` raises ``ValueError``; the others wait in a barrier that never completes.
    Shows (and tests) that :func:`run_distributed` kills every rank and re-raises."""
    import torch.distributed as dist

    if rank == bad_rank:
        raise ValueError(f"rank {rank} fails on purpose")
    dist.barrier()
    return rank


def demo_sleep(rank: int, world_size: int, seconds: float = 30.0) -> int:
    """Sleep ``seconds`` and return the rank (for timeout tests)."""
    time.sleep(seconds)
    return rank


def _to_cpu(obj):
    """Copy tensors (also inside lists, tuples and dicts) to CPU so the parent can unpickle them
    without touching a GPU."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)) and type(obj) in (list, tuple):
        return type(obj)(_to_cpu(v) for v in obj)
    return obj


def _child(rank, world_size, port, backend, timeout_s, threads, environ, target, args, conn):
    """Body of one rank: set up the group, call the target, send back the result."""
    import torch.distributed as dist

    # the caller's environment now, not the fork server's from when it started
    os.environ.clear()
    os.environ.update(environ)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank))
    if backend == "gloo" and sys.platform.startswith("linux"):
        # bind gloo to loopback: a container whose hostname does not resolve would otherwise make
        # every rank print a fallback warning
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    status, payload = "ok", None
    try:
        if backend == "nccl":
            torch.cuda.set_device(rank % torch.cuda.device_count())
        else:
            torch.set_num_threads(threads)  # N ranks share the cores: no oversubscription
        dist.init_process_group(backend, rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=max(timeout_s, 1.0)))
        try:
            payload = _to_cpu(target(rank, world_size, *args))
        finally:
            dist.destroy_process_group()
        data = pickle.dumps((status, payload))  # by value: no shared-memory handles to the child
    except BaseException:  # noqa: BLE001 - everything goes back to the parent
        data = pickle.dumps(("error", f"rank {rank}:\n{traceback.format_exc()}"))
    try:
        conn.send_bytes(data)
    finally:
        conn.close()


def _check_target(target):
    if not callable(target):
        raise ValueError(f"target={target!r} is not allowed; it must be a module-level function")
    mod, qual = getattr(target, "__module__", None), getattr(target, "__qualname__", "")
    if mod in (None, "__main__") or "<locals>" in qual or "<lambda>" in qual:
        raise ValueError(f"target={mod}.{qual} is not allowed; each rank imports the target by "
                         "name, so it must be a module-level function of an importable module "
                         "(e.g. llm_dataflow.parallel.demo_tensor_parallel), not one defined in a "
                         "notebook, in __main__ or inside another function")


def _stop(procs) -> None:
    """Terminate, then kill, every child that is still alive, and reap all of them."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + 2.0
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()


def run_distributed(target, world_size: int, *args, backend: str | None = None,
                    timeout_s: float = 60.0) -> list:
    """Run ``target(rank, world_size, *args)`` in ``world_size`` processes (started as
    :func:`start_method` says) that share a ``torch.distributed`` process group; return their
    results in rank order.

    Args:
        target: a module-level function of an importable module (see the module docstring).
        world_size: number of ranks N (processes), ≥ 1.
        *args: extra arguments, pickled to every rank (keep them small: ints, strings, configs).
        backend: ``"gloo"`` (CPU tensors) or ``"nccl"`` (one CUDA GPU per rank); ``None`` picks
            with :func:`pick_backend`.
        timeout_s: wall-clock limit (s) for the whole run, process start-up included; also the
            process group's own collective timeout.

    Returns:
        ``[result of rank 0, …, result of rank N−1]``; tensors arrive on CPU.

    Raises:
        ValueError: bad ``world_size``, ``backend``, ``timeout_s`` or a target a rank cannot
            import (a lambda, a nested or ``__main__`` function).
        RuntimeError: a rank raised (the message holds its traceback) or died without a result.
        TimeoutError: not every rank finished within ``timeout_s``.
        In every case all children are gone when the call returns or raises.
    """
    import multiprocessing.connection as mpc

    require_positive("world_size", world_size)
    require_positive("timeout_s", timeout_s, integer=False)
    _check_target(target)
    backend = backend or pick_backend(world_size)
    if backend not in ("gloo", "nccl"):
        raise ValueError(f"backend={backend!r} is not allowed; allowed: 'gloo', 'nccl', None")
    if backend == "nccl" and (not torch.cuda.is_available() or torch.cuda.device_count() < world_size):
        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        raise ValueError(f"backend='nccl' needs one CUDA GPU per rank: world_size={world_size}, "
                         f"GPUs visible={n}")
    threads = max(1, (os.cpu_count() or 1) // world_size)
    ctx = _context()
    port = free_port()
    procs, conns = [], []
    deadline = time.monotonic() + timeout_s
    try:
        for rank in range(world_size):
            recv_end, send_end = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_child, name=f"ldf-rank{rank}",
                            args=(rank, world_size, port, backend, timeout_s, threads, dict(os.environ),
                                  target, args, send_end), daemon=True)
            p.start()
            send_end.close()  # the child holds the only writer: EOF when it dies
            procs.append(p)
            conns.append(recv_end)
        results: list = [None] * world_size
        errors: dict[int, str] = {}
        pending = set(range(world_size))
        grace_end = None  # after the first error, wait briefly for the others' reports
        while pending:
            now = time.monotonic()
            if grace_end is not None and now >= grace_end:
                break
            remaining = deadline - now
            if remaining <= 0:
                if errors:
                    break
                raise TimeoutError(f"run_distributed({target.__qualname__}, world_size={world_size}): "
                                   f"ranks {sorted(pending)} did not finish within timeout_s={timeout_s}")
            wait_s = remaining if grace_end is None else min(remaining, grace_end - now)
            mpc.wait([conns[r] for r in pending] + [procs[r].sentinel for r in pending], wait_s)
            for r in sorted(pending):
                if conns[r].poll():
                    try:
                        status, payload = pickle.loads(conns[r].recv_bytes())
                    except EOFError:
                        procs[r].join(1.0)
                        status, payload = "error", f"rank {r} died without a result (exit code {procs[r].exitcode})"
                elif not procs[r].is_alive():
                    status, payload = "error", f"rank {r} died without a result (exit code {procs[r].exitcode})"
                else:
                    continue
                pending.discard(r)
                if status == "ok":
                    results[r] = payload
                else:
                    errors[r] = payload
                    if grace_end is None:
                        grace_end = time.monotonic() + 2.0
        if errors:
            # a rank that fails makes its peers fail too ("connection reset"): show every report
            raise RuntimeError(f"{target.__qualname__} failed in {len(errors)} of {world_size} "
                               "ranks:\n" + "\n".join(errors[r] for r in sorted(errors)))
        for p in procs:
            p.join(max(0.1, deadline - time.monotonic()))
        return results
    finally:
        _stop(procs)
        for c in conns:
            c.close()


def _summary(obj):
    """Printable form of a result: tensors as ``tensor(shape, dtype)``, containers recursively."""
    if isinstance(obj, torch.Tensor):
        return f"tensor{tuple(obj.shape)} {str(obj.dtype).replace('torch.', '')}"
    if isinstance(obj, dict):
        return {k: _summary(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_summary(v) for v in obj) if type(obj) in (list, tuple) else obj
    return obj


def _resolve(name: str):
    spec = DEMOS.get(name, name)
    if ":" not in spec:
        raise ValueError(f"demo={name!r} is not allowed; allowed: {', '.join(DEMOS)} or 'module:function'")
    mod, fn = spec.split(":", 1)
    return getattr(importlib.import_module(mod), fn)


def main(argv: list[str] | None = None) -> int:
    """Command line: ``python -m llm_dataflow.launch DEMO [--nproc N] [--backend gloo|nccl]``.

    Under ``torchrun`` (``RANK`` and ``WORLD_SIZE`` set) each process joins the group torchrun
    describes and runs the demo once; rank 0 prints every rank's result.  Otherwise the demo runs
    on ``--nproc`` ranks through :func:`run_distributed`.
    """
    ap = argparse.ArgumentParser(prog="python -m llm_dataflow.launch", description=main.__doc__)
    ap.add_argument("demo", nargs="?", help=f"one of {', '.join(DEMOS)}, or module:function")
    ap.add_argument("--nproc", type=int, default=2, help="ranks to start when not under torchrun")
    ap.add_argument("--backend", default=None, help="gloo or nccl (default: nccl if enough GPUs)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds")
    ap.add_argument("--list", action="store_true", help="list the demos and exit")
    a = ap.parse_args(argv)
    if a.list or not a.demo:
        for k, v in DEMOS.items():
            print(f"{k:20s} {v}")
        return 0
    target = _resolve(a.demo)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # started by torchrun
        import torch.distributed as dist

        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        backend = a.backend or pick_backend()
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=a.timeout))
        try:
            out = _to_cpu(target(rank, world))
            gathered = [None] * world
            dist.all_gather_object(gathered, out)
        finally:
            dist.destroy_process_group()
        if rank == 0:
            for r, res in enumerate(gathered):
                print(f"rank {r}: {_summary(res)}")
        return 0
    for r, res in enumerate(run_distributed(target, a.nproc, backend=a.backend, timeout_s=a.timeout)):
        print(f"rank {r}: {_summary(res)}")
    return 0


if __name__ == "__main__":
    # ``python -m llm_dataflow.launch``: runpy warns once that the package already imported this
    # module (harmless).  Run the package's copy, and stop spawned ranks (macOS, Windows) from
    # re-running this file as their ``__main__`` (they import the target by name instead).
    _main_mod = sys.modules["__main__"]
    _main_mod.__spec__ = None
    if hasattr(_main_mod, "__file__"):
        del _main_mod.__file__
    from llm_dataflow.launch import main as _main

    sys.exit(_main())
