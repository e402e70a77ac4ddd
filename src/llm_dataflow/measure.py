"""The one device helper and the timing tools every chapter's measurements use.

CPU first: ``device()`` returns CUDA when a GPU is present (and ``LDF_DEVICE`` does not say
otherwise), else CPU.  Timings synchronise the device, take the median of several repeats
after warm-up, and are printed through :func:`llm_dataflow.units.fmt_measured`.
"""
from __future__ import annotations

import os
import statistics
import time

import torch

__all__ = ["device", "describe_device", "synchronize", "time_fn", "progress", "cpu_threads", "seed_all",
           "host_to_device_seconds", "torch_threads"]


def device(prefer: str | None = None) -> torch.device:
    """The device lessons run on: ``cuda`` if available, else ``cpu``.

    ``prefer`` (or the environment variable ``LDF_DEVICE``) may force ``"cpu"`` or ``"cuda"``.

    Raises:
        ValueError: ``prefer`` is not ``"cpu"``/``"cuda"``, or ``"cuda"`` is asked for without a GPU.
    """
    choice = prefer or os.environ.get("LDF_DEVICE")
    if choice is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if choice not in ("cpu", "cuda"):
        raise ValueError(f"device={choice!r} is not allowed; allowed: 'cpu', 'cuda'")
    if choice == "cuda" and not torch.cuda.is_available():
        raise ValueError("device='cuda' was requested but torch sees no CUDA GPU")
    return torch.device(choice)


def describe_device(dev: torch.device | None = None) -> str:
    """One line naming the device a notebook measures on (GPU name, or CPU thread count)."""
    dev = dev or device()
    if dev.type == "cuda":
        return f"CUDA GPU: {torch.cuda.get_device_name(dev)}"
    return f"CPU ({torch.get_num_threads()} torch threads)"


def cpu_threads() -> int:
    """torch's intra-op thread count on CPU."""
    return torch.get_num_threads()


class torch_threads:
    """Context manager running torch CPU ops with ``n`` intra-op threads, restoring the old count.

    Raises:
        ValueError: ``n`` not a positive integer.
    """

    def __init__(self, n: int):
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ValueError(f"n={n!r} is not allowed; it must be a positive integer")
        self.n = n

    def __enter__(self):
        self.old = torch.get_num_threads()
        torch.set_num_threads(self.n)
        return self

    def __exit__(self, *exc):
        torch.set_num_threads(self.old)
        return False


def synchronize(dev: torch.device | str | None = None) -> None:
    """Wait for queued GPU work (a no-op on CPU), so timers measure finished work."""
    dev = torch.device(dev) if dev is not None else device()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def time_fn(fn, *, repeat: int = 5, warmup: int = 1, dev: torch.device | str | None = None) -> float:
    """Median wall time of ``fn()`` in seconds over ``repeat`` runs after ``warmup`` runs.

    Raises:
        ValueError: ``repeat`` < 1 or ``warmup`` < 0.
    """
    if not isinstance(repeat, int) or repeat < 1:
        raise ValueError(f"repeat={repeat!r} is not allowed; it must be an integer >= 1")
    if not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup={warmup!r} is not allowed; it must be an integer >= 0")
    for _ in range(warmup):
        fn()
    synchronize(dev)
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        synchronize(dev)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def progress(iterable=None, *, desc: str = "", total: int | None = None, leave: bool = False):
    """A tqdm progress bar for measurement loops (notebook widget in Jupyter, text elsewhere).

    ``leave=False`` removes the bar when done, so saved outputs hold no timing text.
    """
    from tqdm.auto import tqdm

    return tqdm(iterable, desc=desc, total=total, leave=leave)


def seed_all(seed: int = 0) -> None:
    """Seed torch and Python's ``random``, and make printed tables reproducible.

    Every notebook calls this first.  Besides seeding, it sets pandas to print tables unwrapped
    and untruncated: otherwise a table's text re-wraps whenever a measured value's width changes,
    and the saved output would not compare equal under nbval's sanitizer.
    """
    import random

    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas is a dependency
        return
    pd.set_option("display.width", 100_000, "display.max_columns", None, "display.max_colwidth", None)


def host_to_device_seconds(tensors, dev: torch.device | str, pinned: bool, repeat: int = 5) -> float | None:
    """Median seconds to copy ``tensors`` (a tensor or an iterable of tensors) from host memory to
    ``dev``, from pageable memory (``pinned=False``: the driver stages through its own pinned
    buffer) or from page-locked memory (``pinned=True``: DMA straight from the source, issued
    ``non_blocking``).  Returns ``None`` when ``dev`` is the CPU: there is no host → device hop.

    Raises:
        ValueError: ``repeat`` < 1.
    """
    if not isinstance(repeat, int) or repeat < 1:
        raise ValueError(f"repeat={repeat!r} is not allowed; it must be an integer >= 1")
    dev = torch.device(dev)
    if dev.type == "cpu":
        return None
    ts = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
    src = [t.pin_memory() if pinned else t for t in ts]
    return time_fn(lambda: [t.to(dev, non_blocking=pinned) for t in src], repeat=repeat, warmup=1, dev=dev)
