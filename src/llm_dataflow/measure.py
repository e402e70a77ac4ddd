"""The one device helper, the timing tools every chapter's measurements use, and the reader's
measured roofline (STREAM bandwidth, matmul FLOP/s).

CPU first: ``device()`` returns CUDA when a GPU is present (and ``LDF_DEVICE`` does not say
otherwise), else CPU.  Timings synchronise the device, take the median of several repeats
after warm-up, and are printed through :func:`llm_dataflow.core.units.fmt_measured`.
"""
from __future__ import annotations

import math
import os
import platform
import secrets
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch

from .core.units import MiB, check_dtype, measured_count, require_positive

__all__ = ["device", "describe_device", "synchronize", "time_fn", "time_calls", "progress", "cpu_threads", "seed_all",
           "host_to_device_seconds", "torch_threads", "run_stamp", "stamp_measuring_cells", "RUN_STAMP_RE", "RUN_ID",
           # the measured roofline (chapter 05)
           "MeasuredRoofline", "stream_bandwidth", "gemv_bandwidth", "gemv_bandwidths", "matmul_flops",
           "cpu_supports_bf16", "measure_roofline", "best_time"]


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
    """Median wall time of ``fn()`` in seconds over ``repeat`` runs after ``warmup`` runs
    (:func:`time_calls` with the wall clock).

    Raises:
        ValueError: ``repeat`` < 1 or ``warmup`` < 0.
    """
    return statistics.median(time_calls(fn, repeat, warmup, dev=dev, clock="wall"))


def time_calls(fn, repeat: int = 5, warmup: int = 1, *, dev: torch.device | str | None = None,
               clock: str = "auto") -> list[float]:
    """Seconds of each of ``repeat`` calls of ``fn()`` after ``warmup`` untimed calls.

    ``clock="thread"``: the calling thread's CPU time (``time.thread_time``, user + system; Linux
    ``CLOCK_THREAD_CPUTIME_ID``).  For work that runs on the calling thread alone — torch on CPU
    with one intra-op thread — it is the time the work took, stalls on memory and page faults
    included, *without* the time the scheduler gave the core to other processes.  On a shared
    2-core machine with ten runnable processes, a 10 ms forward's wall time tripled while its CPU
    time stayed put (measured on the Intel kind).  ``clock="wall"``: ``time.perf_counter`` around
    the call, with a GPU synchronisation.  ``"auto"``: ``"thread"`` on CPU when torch runs one
    intra-op thread, else ``"wall"``.

    Raises:
        ValueError: ``repeat`` < 1, ``warmup`` < 0, an unknown ``clock``, or ``clock="thread"``
            with a GPU device or more than one torch thread (other threads' work would be missed).
    """
    require_positive("repeat", repeat)
    if not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup={warmup!r} is not allowed; it must be an integer >= 0")
    if clock not in ("auto", "thread", "wall"):
        raise ValueError(f"clock={clock!r} is not allowed; allowed: 'auto', 'thread', 'wall'")
    dev = torch.device(dev) if dev is not None else device()
    single = dev.type == "cpu" and torch.get_num_threads() == 1
    if clock == "auto":
        clock = "thread" if single else "wall"
    if clock == "thread" and not single:
        raise ValueError(f"clock='thread' is not allowed on {dev} with {torch.get_num_threads()} torch threads; "
                         "it needs a CPU device and torch.set_num_threads(1)")
    for _ in range(warmup):
        fn()
    synchronize(dev)
    out = []
    for _ in range(repeat):
        if clock == "thread":
            t0 = time.thread_time()
            fn()
            out.append(time.thread_time() - t0)
        else:
            t0 = time.perf_counter()
            fn()
            synchronize(dev)
            out.append(time.perf_counter() - t0)
    return out


def progress(iterable=None, *, desc: str = "", total: int | None = None, leave: bool = False):
    """A progress bar for measurement loops: ``for x in progress(xs, desc="timing"): ...``.

    In a Jupyter kernel with ipywidgets it shows a bar (``IntProgress`` + a ``k/n`` label) and,
    when the loop ends, replaces it in place (a display update) with one line of text,
    ``"<desc>: <n> steps"``, so a saved notebook and the web page show what was measured rather
    than a frozen "0%" bar or a blank gap where a closed widget was.  The text is the bar's own
    plain-text fallback from the start, so strict nbval (which sees the first display) and the
    saved output agree; it holds no timing.  Elsewhere (a script, pytest) it is a text tqdm bar
    on stderr, removed when done unless ``leave=True``.

    Args:
        iterable: what to loop over (``None``: call ``update(k)`` yourself, with ``total``).
        desc: what is being measured, e.g. ``"memory mountain"``.
        total: number of steps (default ``len(iterable)`` when it has one).
        leave: text bar only: keep it on stderr when done.

    Returns:
        An iterable with ``update(k=1)`` and ``close()`` (also a context manager).
    """
    if total is None and iterable is not None:
        try:
            total = len(iterable)
        except TypeError:
            total = None
    if _widget_kernel():
        return _NotebookProgress(iterable, desc, total)
    from tqdm import tqdm

    return tqdm(iterable, desc=desc, total=total, leave=leave)


def _widget_kernel() -> bool:
    """True inside an IPython kernel (JupyterLab, nbclient, nbval) where ipywidgets imports."""
    try:
        from IPython import get_ipython
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    ip = get_ipython()
    return ip is not None and getattr(ip, "kernel", None) is not None


class _NotebookProgress:
    """The notebook bar of :func:`progress`; its display ends as one line of plain text."""

    def __init__(self, iterable, desc: str, total: int | None):
        import ipywidgets as w
        from IPython.display import display

        self.iterable, self.total, self.n, self._closed = iterable, total, 0, False
        what = f"{total} steps" if total is not None else ""
        self.text = ": ".join(x for x in (desc, what) if x) or "done"
        self.bar = w.IntProgress(value=0, min=0, max=max(total or 1, 1), description=desc,
                                 style={"description_width": "initial"})
        self.label = w.Label(self._count())
        self.box = w.HBox([self.bar, self.label])
        bundle = dict(self.box._repr_mimebundle_())
        bundle["text/plain"] = self.text
        self.handle = display(bundle, raw=True, display_id=True)

    def _count(self) -> str:
        return f"{self.n}/{self.total}" if self.total is not None else str(self.n)

    def update(self, k: int = 1) -> None:
        self.n += k
        self.bar.value = min(self.n, self.bar.max)
        self.label.value = self._count()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.handle.update({"text/plain": self.text}, raw=True)
        for wd in (self.box, self.bar, self.label):
            wd.close()

    def __iter__(self):
        try:
            for x in self.iterable:
                yield x
                self.update()
        finally:
            self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


#: This process's run id: made once per kernel, so every measurement a notebook prints in one
#: execution carries the same stamp (``tests/test_notebook_hygiene.py`` checks the saved outputs).
RUN_ID = secrets.token_hex(3)
#: What :func:`run_stamp` prints, as a regular expression (``tests/nbval_sanitize.cfg`` masks it).
RUN_STAMP_RE = r"\[run [0-9a-f]{6} · [^\]\n]*\]"
_MACHINE: list[str] = []


def _machine() -> str:
    """The processor's name as the OS reports it (``/proc/cpuinfo`` on Linux, ``platform``
    elsewhere), at most 40 characters; ``"unknown CPU"`` if the OS says nothing."""
    if not _MACHINE:
        name = ""
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                name = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
        except OSError:   # macOS, Windows: no /proc
            pass
        name = name or platform.processor() or platform.machine() or "unknown CPU"
        _MACHINE.append(" ".join(name.replace("·", " ").replace("]", ")").split())[:40])
    return _MACHINE[0]


def run_stamp(dev: torch.device | None = None) -> str:
    """A short stamp naming this run and machine, e.g. ``[run 3f9a1c · AMD EPYC · 2 CPUs]`` (the
    processor and its logical CPUs, ``os.cpu_count``; ``[run … · NVIDIA H100 80GB HBM3]`` on a
    GPU).  The id (:data:`RUN_ID`) is made once per process, so two outputs with the same stamp
    come from one kernel on one machine.  Nothing in it changes within a run (a notebook may
    change torch's thread count between cells; ``describe_device`` prints that)."""
    dev = dev or device()
    where = (torch.cuda.get_device_name(dev) if dev.type == "cuda"
             else f"{_machine()} · {os.cpu_count() or '?'} CPUs")
    return f"[run {RUN_ID} · {where}]"


_STAMPED: set[int] = set()


def stamp_measuring_cells() -> bool:
    """Inside IPython, print :func:`run_stamp` under every cell that printed a measured value
    (one that called :func:`llm_dataflow.core.units.fmt_measured`).  Registers once per shell;
    :func:`seed_all` calls it.  Returns False outside IPython (a script: nothing to stamp)."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    ip = get_ipython()
    if ip is None:
        return False
    if id(ip) in _STAMPED:
        return True
    before = [measured_count()]

    def pre_run_cell(info=None):
        before[0] = measured_count()

    def post_run_cell(result=None):
        if measured_count() != before[0]:
            print(run_stamp())

    ip.events.register("pre_run_cell", pre_run_cell)
    ip.events.register("post_run_cell", post_run_cell)
    _STAMPED.add(id(ip))
    return True


def seed_all(seed: int = 0) -> None:
    """Seed torch and Python's ``random``, and make printed tables reproducible.

    Every notebook calls this first.  Inside IPython it also turns on the run stamp
    (:func:`stamp_measuring_cells`): every cell that prints a measured value ends with one line
    naming the run and the machine.  Besides seeding, it sets pandas to print tables unwrapped
    and untruncated: otherwise a table's text re-wraps whenever a measured value's width changes,
    and the saved output would not compare equal under nbval's sanitizer.
    """
    import random

    random.seed(seed)
    torch.manual_seed(seed)
    stamp_measuring_cells()
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


# --------------------------------------------------------------------------------------------
# the reader's roofline, measured
# --------------------------------------------------------------------------------------------
TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class MeasuredRoofline:
    """The roofline of the reader's own device, measured.  Quacks like a HardwareSpec for the
    bound functions: ``hbm_bandwidth`` and ``flops(dtype)``.

    Attributes:
        name: what was measured (device description).
        hbm_bandwidth: the best STREAM-like bandwidth measured (B/s) — DRAM on a CPU, HBM on a GPU.
        peak_flops: best matmul FLOP/s per dtype measured (``"fp32"``, and ``"bf16"`` where
            supported).
        bandwidths: each kernel's bandwidth (``"copy"``, ``"triad"``), B/s.
    """

    name: str
    hbm_bandwidth: float
    peak_flops: dict
    bandwidths: dict = field(default_factory=dict)

    def flops(self, dtype: str) -> float:
        """Measured matmul FLOP/s for ``dtype``.

        Raises:
            ValueError: ``dtype`` was not measured.
        """
        if dtype not in self.peak_flops:
            raise ValueError(f"dtype={dtype!r} has no measured peak on {self.name}; "
                             f"allowed: {', '.join(self.peak_flops)}")
        return self.peak_flops[dtype]

    def ridge(self, dtype: str = "fp32") -> float:
        """Ridge point, FLOP/B: measured FLOP/s ÷ measured bandwidth."""
        return self.flops(dtype) / self.hbm_bandwidth


def _dev(dev) -> torch.device:
    return torch.device(dev) if dev is not None else device()


def _sync(dev: torch.device):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def best_time(fn, dev, repeat: int, warmup: int = 1) -> float:
    """Minimum wall time of ``fn()`` (s) over ``repeat`` runs after ``warmup``: the best case is
    the roof (on a shared machine other processes only ever add time).

    Raises:
        ValueError: ``repeat`` < 1.
    """
    require_positive("repeat", repeat)
    for _ in range(warmup):
        fn()
    _sync(dev)
    best = math.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        _sync(dev)
        best = min(best, time.perf_counter() - t0)
    return best


class StreamKernel:
    """Preallocated STREAM arrays (``nbytes`` each, FP32) and one kernel; ``()`` runs one pass
    and returns its bandwidth (B/s) in McCalpin's convention (copy counts 2 arrays, triad 3)."""

    def __init__(self, kind: str, nbytes: int, dev: torch.device):
        if kind not in ("copy", "triad"):
            raise ValueError(f"kind={kind!r} is not allowed; allowed: 'copy', 'triad'")
        require_positive("nbytes", nbytes)
        n = nbytes // 4
        self.dev, self.nbytes = dev, (2 if kind == "copy" else 3) * n * 4
        a, b = torch.empty(n, device=dev), torch.rand(n, device=dev)
        if kind == "copy":
            self.fn = lambda: a.copy_(b)
        else:
            c = torch.rand(n, device=dev)
            self.fn = lambda: torch.add(b, c, alpha=3.0, out=a)
        self.fn()  # first touch: page faults are not bandwidth
        _sync(dev)

    def __call__(self) -> float:
        t0 = time.perf_counter()
        self.fn()
        _sync(self.dev)
        return self.nbytes / (time.perf_counter() - t0)


def _stream_default_nbytes(dev: torch.device) -> int:
    return 2**30 if dev.type == "cuda" else 64 * MiB


def stream_bandwidth(kind: str = "copy", nbytes: int | None = None, dev=None, repeat: int = 5) -> float:
    """Memory bandwidth (B/s) of a STREAM-like kernel on FP32 arrays of ``nbytes`` each.

    ``"copy"``: ``a[:] = b`` counts 2 arrays moved; ``"triad"``: ``a[:] = b + s·c`` counts 3
    (McCalpin's STREAM convention: write-allocate traffic is not counted).  Default size: 64 MiB
    per array on a CPU (twice a 32 MiB last-level cache), 1 GiB on a GPU.  On a CPU whose
    last-level cache is larger (a server part, or a VM that reports its host's 260 MiB), arrays of
    64 MiB can be served by that cache: give ``nbytes`` past it
    (:func:`llm_dataflow.memory.past_last_level_bytes`, as chapter 05 does).  Best of ``repeat``
    passes after one warm-up pass, as STREAM reports its best rate.

    Raises:
        ValueError: unknown ``kind``, ``nbytes`` or ``repeat`` < 1.
    """
    if kind not in ("copy", "triad"):
        raise ValueError(f"kind={kind!r} is not allowed; allowed: 'copy', 'triad'")
    require_positive("repeat", repeat)
    dev = _dev(dev)
    k = StreamKernel(kind, nbytes or _stream_default_nbytes(dev), dev)
    return max(k() for _ in range(repeat))


def gemv_bandwidth(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], n_rows: int, n_cols: int, *,
                   total_bytes: int = 256 * MiB, repeat: int = 3, seed: int = 0) -> float:
    """Weight bytes per second (B/s) of a batch-1 projection ``fn(x [1, K], W [N, K]) → [1, N]``
    on FP32 CPU tensors, with ``N = n_rows``, ``K = n_cols``.

    One matrix would stay in the last-level cache after its first call, so the function builds
    as many seeded copies of W as fill ``total_bytes`` (default 256 MiB, 8× a 32 MiB L3; give more
    on a CPU with a larger last-level cache, :func:`llm_dataflow.memory.past_last_level_bytes`) and
    calls ``fn`` on each in turn — every call streams its W from DRAM, as in a decode step.
    Returns ``copies × N × K × 4`` bytes ÷ the best of ``repeat`` sweeps (after one warm-up).
    :func:`gemv_bandwidths` measures several kernels and STREAM triad at the same moments.

    Raises:
        ValueError: ``n_rows``, ``n_cols``, ``total_bytes`` or ``repeat`` < 1.
    """
    return gemv_bandwidths({"fn": fn}, n_rows, n_cols, total_bytes=total_bytes, repeat=repeat, seed=seed,
                           triad=False)["fn"]


def gemv_bandwidths(fns: Mapping[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]], n_rows: int,
                    n_cols: int, *, total_bytes: int = 256 * MiB, repeat: int = 3, seed: int = 0,
                    triad: bool = True, stream_bytes: int = 64 * MiB) -> dict[str, float]:
    """:func:`gemv_bandwidth` of several kernels, and STREAM triad, measured at the same moments.

    Each of ``repeat`` rounds (after one warm-up round) runs one sweep of every kernel in
    ``fns`` over the same seeded copies of W ``[N, K]`` (``N = n_rows``, ``K = n_cols``, FP32,
    ``total_bytes`` in all), then, with ``triad=True``, one STREAM triad pass on arrays of
    ``stream_bytes`` each (default 64 MiB; past the last-level cache, as ``total_bytes``):
    on a shared machine, where the bandwidth other programs leave drifts within seconds, the
    kernels are compared with each other and with the machine's bandwidth under the same load,
    not each at its own moment.

    Returns:
        ``{name: B/s}`` for every name in ``fns`` (weight bytes ÷ the best sweep) and, with
        ``triad=True``, ``"STREAM triad"`` (the best pass, McCalpin's count of 3 arrays).

    Raises:
        ValueError: ``fns`` empty or naming ``"STREAM triad"``; ``n_rows``, ``n_cols``,
            ``total_bytes``, ``repeat`` or ``stream_bytes`` < 1.
    """
    for name, v in (("n_rows", n_rows), ("n_cols", n_cols), ("total_bytes", total_bytes), ("repeat", repeat),
                    ("stream_bytes", stream_bytes)):
        require_positive(name, v)
    if not fns or "STREAM triad" in fns:
        raise ValueError(f"fns={list(fns)} is not allowed; it must name at least one kernel, not 'STREAM triad'")
    cpu = torch.device("cpu")
    g = torch.Generator().manual_seed(seed)
    copies = max(2, total_bytes // (n_rows * n_cols * 4))
    ws = [torch.randn(n_rows, n_cols, generator=g) for _ in range(copies)]
    x = torch.randn(1, n_cols, generator=g)
    nbytes = copies * n_rows * n_cols * 4
    stream = StreamKernel("triad", stream_bytes, cpu) if triad else None
    best = {name: 0.0 for name in fns}
    best_triad = 0.0
    for r in range(repeat + 1):               # round 0 warms up (allocator, thread pool, tuning)
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for w in ws:
                fn(x, w)
            if r:
                best[name] = max(best[name], nbytes / (time.perf_counter() - t0))
        if stream is not None:
            bw = stream()
            if r:
                best_triad = max(best_triad, bw)
    if stream is not None:
        best["STREAM triad"] = best_triad
    return best


def cpu_supports_bf16() -> bool:
    """True when this x86 CPU has native BF16 dot products (``avx512_bf16`` or ``amx_bf16`` in
    ``/proc/cpuinfo``); elsewhere False."""
    try:
        with open("/proc/cpuinfo") as fh:
            flags = fh.read()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def matmul_flops(dtype: str = "fp32", n: int | None = None, dev=None, repeat: int = 3) -> float:
    """Matmul throughput (FLOP/s) of an ``n × n @ n × n`` product in ``dtype``: ``2·n³`` FLOPs
    over the best of ``repeat`` times.  Default n: 1024 on a CPU, 8192 on a GPU (large enough for
    tensor cores to reach their plateau; TF32 stays off for fp32).

    Raises:
        ValueError: dtype not one of fp32/bf16/fp16, ``n`` or ``repeat`` < 1.
    """
    check_dtype(dtype, tuple(TORCH_DTYPES))
    require_positive("repeat", repeat)
    dev = _dev(dev)
    n = n or (8192 if dev.type == "cuda" else 1024)
    require_positive("n", n)
    g = torch.Generator(device=dev).manual_seed(0)  # private stream: callers' random draws stay put
    a = torch.rand(n, n, device=dev, dtype=TORCH_DTYPES[dtype], generator=g)
    b = torch.rand(n, n, device=dev, dtype=TORCH_DTYPES[dtype], generator=g)
    t = best_time(lambda: a @ b, dev, repeat)
    return 2 * n**3 / t


def measure_roofline(dev=None, *, quick: bool = True, stream_bytes: int | None = None) -> MeasuredRoofline:
    """Measure this device's roofline: STREAM copy and triad bandwidth (the larger is the
    memory roof) and matmul FLOP/s in FP32 and — on a GPU, or a CPU with native BF16
    (:func:`cpu_supports_bf16`) — BF16.  ``quick=True`` takes about a second on a CPU with the
    default arrays.

    Args:
        stream_bytes: bytes of each STREAM array (default :func:`stream_bandwidth`'s: 64 MiB on a
            CPU, which a larger last-level cache can serve; chapter 05 passes
            :func:`llm_dataflow.memory.past_last_level_bytes`).

    Returns:
        :class:`MeasuredRoofline`.

    Raises:
        ValueError: ``stream_bytes`` < 1.
    """
    dev = _dev(dev)
    r = 3 if quick else 10
    bw = {k: stream_bandwidth(k, stream_bytes, dev=dev, repeat=r) for k in ("copy", "triad")}
    flops = {"fp32": matmul_flops("fp32", dev=dev, repeat=r)}
    if dev.type == "cuda" or cpu_supports_bf16():
        flops["bf16"] = matmul_flops("bf16", dev=dev, repeat=r)
    return MeasuredRoofline(describe_device(dev), max(bw.values()), flops, bw)
