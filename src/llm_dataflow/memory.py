"""The reader's memory mountain: measured bandwidth vs working-set size (chapter 04).

Reading a buffer that fits in L1 is many times faster than reading one that spills to DRAM.
Sweeping the working-set size from a few KiB to well past the last-level cache (by default 4× the
size the OS reports, :func:`mountain_sizes`) and plotting bandwidth on log axes shows one plateau
per tier of the hierarchy — the "memory mountain" of
Bryant & O'Hallaron, *Computer Systems: A Programmer's Perspective*, 3rd ed., §6.6.1 (their
mountain also varies the stride; ours keeps stride 1 and varies the size).

How it measures (and what that costs in honesty):

* **read**: ``x.expand(reps, n).sum()`` — one torch call that sums the same ``n``-element buffer
  ``reps`` times (the expanded view has stride 0 along ``reps``, so the working set stays ``n``
  elements while the call runs long enough to time).  Bytes counted: ``reps · n · 4``.
* **copy**: ``dst.copy_(src)`` repeated in a Python loop; working set ``src + dst``; bytes
  counted ``2 ·`` buffer size per copy (read + write, the STREAM convention).  A CPU that
  write-allocates reads the destination line before writing it, so DRAM may move 3× — the
  counter does not see that.  Each call costs a fixed dispatch overhead (about a microsecond on
  CPU, several on GPU), which caps the copy curve at small sizes: that left edge measures
  Python + torch, not L1.
* Each point is timed ``repeat`` times after a warm-up (:func:`time_calls`: on one CPU thread,
  by that thread's CPU time, so that time the scheduler gives to other processes on a shared
  machine is not counted), more often where
  one call is short (until ``min_time_s`` of timed calls, at most ``10·repeat``: small sizes cost
  microseconds, and a neighbour's burst then hits one call of many, not the median) and only 3
  times where calls are long (DRAM sizes, once ``max_time_s`` has passed).  We keep the median and the spread.  Other processes sharing the cores and caches,
  frequency changes and the allocator's page placement move single points by tens of percent;
  plateaus are what to read.

Cache sizes come from the OS (:func:`cache_levels`): ``/sys/devices/system/cpu/cpu0/cache``
(Linux sysfs, ``Documentation/ABI/testing/sysfs-devices-system-cpu``), else ``lscpu``.  On a
virtual machine the OS reports one instance of the *host's* last-level cache as the hypervisor
describes it (per CCD on AMD EPYC, per socket on most Intel Xeons): a 2-vCPU guest may be told of
tens or hundreds of MiB that it shares with every other guest on that instance, so its measured
cliff can come well before the reported size.  That is why sizes are taken *past* the reported
last level (:func:`past_last_level_bytes`), never just up to it.
"""
from __future__ import annotations

import json
import math
import pathlib
import re
import statistics
import subprocess
import time
from dataclasses import dataclass

import torch

from .measure import device as _default_device
from .measure import progress, synchronize, time_calls
from .core.units import KiB, MiB, fmt_bytes, require_positive

__all__ = ["CacheLevel", "MountainPoint", "cache_levels", "parse_cache_size", "parse_lscpu_caches",
           "last_level_cache_bytes", "past_last_level_bytes", "available_memory_bytes",
           "mountain_sizes", "MAX_PER_OCTAVE", "MAX_WORKING_SET_BYTES", "memory_mountain", "call_overhead", "tier_bandwidth", "dram_onset",
           "plot_mountain"]

_SYSFS_CACHE = pathlib.Path("/sys/devices/system/cpu/cpu0/cache")


@dataclass(frozen=True)
class CacheLevel:
    """One CPU cache as the OS reports it.

    Attributes:
        name: ``"L1d"``, ``"L1i"``, ``"L2"``, ``"L3"`` ...
        level: 1, 2, 3 ...
        type: ``"Data"``, ``"Instruction"`` or ``"Unified"``.
        size_bytes: capacity of one instance, bytes (sysfs/lscpu "K" and "M" are KiB and MiB).
        shared_cpu_list: CPUs sharing this instance (e.g. ``"0-1"``), ``""`` if unknown.
        source: ``"sysfs"`` or ``"lscpu"``.
    """

    name: str
    level: int
    type: str
    size_bytes: int
    shared_cpu_list: str
    source: str


@dataclass(frozen=True)
class MountainPoint:
    """One measured point of the mountain.

    Attributes:
        op: ``"read"`` or ``"copy"``.
        working_set_bytes: bytes the loop touches (copy: source + destination).
        bytes_moved: bytes counted per timed call.
        median_s, best_s, worst_s: median, fastest and slowest of the timed calls (s).
        device: ``"cpu"`` or ``"cuda"``.
    """

    op: str
    working_set_bytes: int
    bytes_moved: int
    median_s: float
    best_s: float
    worst_s: float
    device: str

    @property
    def bandwidth(self) -> float:
        """Median bandwidth, B/s."""
        return self.bytes_moved / self.median_s

    @property
    def bandwidth_range(self) -> tuple[float, float]:
        """(slowest, fastest) bandwidth over the timed calls, B/s."""
        return self.bytes_moved / self.worst_s, self.bytes_moved / self.best_s


_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:i?B)?\s*$", re.IGNORECASE)


def parse_cache_size(text: str) -> int:
    """Bytes in an OS cache-size string: ``"32K"`` → 32768, ``"1 MiB"`` → 1048576, ``"512"`` → 512.

    sysfs and lscpu mean binary units (K = KiB = 1024 B).

    Raises:
        ValueError: ``text`` not a string, not a size, or a size too large for a float.
    """
    m = _SIZE_RE.match(text) if isinstance(text, str) else None
    if not m:
        raise ValueError(f"text={text!r} is not a cache size; expected e.g. '32K', '1M', '1 MiB'")
    scale = {"": 1, "K": KiB, "M": MiB, "G": 2**30, "T": 2**40}[m.group(2).upper()]
    size = float(m.group(1)) * scale
    if not math.isfinite(size):
        raise ValueError(f"text={text!r} is not allowed: the cache size overflows a float")
    return int(size)


def _name(level: int, ctype: str) -> str:
    return f"L{level}" + {"Data": "d", "Instruction": "i"}.get(ctype, "")


def parse_lscpu_caches(text: str) -> list[CacheLevel]:
    """Parse ``lscpu -C -J`` (JSON) output into :class:`CacheLevel` rows (``one-size`` column).

    Raises:
        ValueError: the text is not lscpu's cache JSON.
    """
    try:
        rows = json.loads(text)["caches"]
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"text is not `lscpu -C -J` output: {e}") from None
    out = []
    for r in rows:
        level = int(r["level"])
        ctype = r["type"]
        out.append(CacheLevel(_name(level, ctype), level, ctype, parse_cache_size(str(r["one-size"])), "",
                              "lscpu"))
    return out


def cache_levels(sysfs: pathlib.Path | str = _SYSFS_CACHE) -> list[CacheLevel]:
    """The caches of CPU 0 as the OS reports them, smallest level first.

    Reads ``sysfs`` (``/sys/devices/system/cpu/cpu0/cache/index*/{level,type,size,
    shared_cpu_list}``); if that is missing, runs ``lscpu -C -J``; if both fail returns ``[]``
    (e.g. macOS), and the mountain is drawn without cache lines.
    """
    root = pathlib.Path(sysfs)
    out: list[CacheLevel] = []
    for d in sorted(root.glob("index*")):
        try:
            level = int((d / "level").read_text())
            ctype = (d / "type").read_text().strip()
            size = parse_cache_size((d / "size").read_text().strip())
            shared = (d / "shared_cpu_list").read_text().strip() if (d / "shared_cpu_list").exists() else ""
        except (OSError, ValueError):
            continue
        out.append(CacheLevel(_name(level, ctype), level, ctype, size, shared, "sysfs"))
    if not out:
        try:
            text = subprocess.run(["lscpu", "-C", "-J"], capture_output=True, text=True, timeout=5,
                                  check=True).stdout
            out = parse_lscpu_caches(text)
        except (OSError, subprocess.SubprocessError, ValueError):
            out = []
    return sorted(out, key=lambda c: (c.level, c.type != "Data"))


def last_level_cache_bytes(caches: list[CacheLevel] | None = None) -> int:
    """Bytes of one instance of the last (highest-level) data or unified cache, 0 if none is known.

    ``caches`` defaults to :func:`cache_levels` (this machine, as the OS reports it).  On a
    virtual machine that is the host's cache, shared with other guests (see the module docstring).

    Raises:
        ValueError: ``caches`` neither None nor a list of :class:`CacheLevel`.
    """
    if caches is not None and (not isinstance(caches, (list, tuple))
                               or not all(isinstance(c, CacheLevel) for c in caches)):
        raise ValueError(f"caches={caches!r} is not allowed; give None or a list of CacheLevel")
    caches = cache_levels() if caches is None else caches
    levels = [c for c in caches if c.type != "Instruction"]
    if not levels:
        return 0
    top = max(c.level for c in levels)
    return max(c.size_bytes for c in levels if c.level == top)


def past_last_level_bytes(factor: float = 4.0, caches: list[CacheLevel] | None = None, *,
                          minimum: int = 0) -> int:
    """A working-set size well past the last-level cache: ``max(minimum, factor × LLC)`` bytes,
    rounded up to a multiple of 64 B (one cache line).  Sizes measurements so that DRAM, not a
    cache, serves them, on whatever machine runs them.

    Why a factor and not the LLC itself: a stream of exactly LLC bytes still hits partly (the
    replacement policy keeps some lines, and on a VM the reported LLC is shared); at 4× at most a
    quarter could stay resident in the best case.

    Args:
        factor: multiple of the LLC (> 0).
        caches: default :func:`cache_levels`.
        minimum: bytes to return at least (covers an OS that reports no caches).

    Raises:
        ValueError: ``factor`` not a positive finite number (or ``factor × LLC`` beyond a float),
            ``minimum`` not a non-negative integer, ``caches`` neither None nor a list of
            :class:`CacheLevel`, or no cache is known and ``minimum`` is 0.
    """
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or not 0 < factor < math.inf:
        raise ValueError(f"factor={factor!r} is not allowed; it must be a positive finite number")
    if isinstance(minimum, bool) or not isinstance(minimum, int) or minimum < 0:
        raise ValueError(f"minimum={minimum!r} is not allowed; it must be an integer >= 0 (bytes)")
    llc = last_level_cache_bytes(caches)
    scaled = factor * llc / 64
    if not math.isfinite(scaled):
        raise ValueError(f"factor={factor!r} is not allowed: factor × LLC overflows a float")
    size = max(minimum, math.ceil(scaled) * 64)
    if size == 0:
        raise ValueError("caches: the OS reports no cache sizes here; pass minimum= (bytes) to size "
                         "the measurement")
    return size


def available_memory_bytes() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` (Linux; bytes the kernel estimates can be allocated
    without swapping), or ``None`` where it is not reported."""
    try:
        for line in pathlib.Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * KiB          # the file's "kB" are KiB
    except (OSError, ValueError, IndexError):
        return None
    return None


#: Most sizes per factor of 2 that :func:`mountain_sizes` makes.
MAX_PER_OCTAVE = 64
#: Largest working set :func:`mountain_sizes` offers: 2^47 B = 128 TiB, the user-space virtual
#: address space of x86-64 Linux with 4-level page tables (kernel docs, x86_64/mm.rst).
MAX_WORKING_SET_BYTES = 2**47


def mountain_sizes(lo: int = 4 * KiB, hi: int | None = None, per_octave: int = 2, *,
                   caches: list[CacheLevel] | None = None) -> list[int]:
    """Working-set sizes (bytes), ascending, each a multiple of 64 bytes (a cache line).

    With ``hi`` given: ``lo`` to ``hi``, ``per_octave`` sizes per factor of 2.

    With ``hi=None`` (the default), sized from the caches the OS reports (``caches``, default
    :func:`cache_levels`): ``per_octave`` per factor of 2 from ``lo`` up to the last-level cache
    (LLC, :func:`last_level_cache_bytes`), then 2× and 4× the LLC — past it the curve is flat, and
    :func:`tier_bandwidth` takes DRAM from the points at least 4× the LLC (a point costs about a
    second there, so there is one).  That is 4 KiB … 128 MiB for a 32 MiB L3 and 4 KiB … 1040 MiB
    for a 260 MiB one.  Where no cache is reported: ``lo`` … 128 MiB, ``per_octave`` per factor of 2.

    Bounds: ``per_octave`` at most :data:`MAX_PER_OCTAVE` (64: finer steps than 2^(1/64), about
    1 %, are below a cache line at 4 KiB and below what a timed bandwidth resolves); ``hi`` at
    most :data:`MAX_WORKING_SET_BYTES` (2^47 B = 128 TiB, x86-64 Linux's user address space with
    4-level page tables: no buffer can be larger).

    Raises:
        ValueError: ``lo``, ``hi`` or ``per_octave`` not a positive integer or above its bound,
            ``hi < lo``, an LLC smaller than ``lo``, ``caches`` neither None nor a list of
            :class:`CacheLevel`.
    """
    require_positive("lo", lo)
    require_positive("per_octave", per_octave)
    if per_octave > MAX_PER_OCTAVE:
        raise ValueError(f"per_octave={per_octave} is not allowed; at most MAX_PER_OCTAVE={MAX_PER_OCTAVE}")
    if lo > MAX_WORKING_SET_BYTES:
        raise ValueError(f"lo={lo} is not allowed; at most MAX_WORKING_SET_BYTES={MAX_WORKING_SET_BYTES:,}")
    if caches is not None and (not isinstance(caches, (list, tuple))
                               or not all(isinstance(c, CacheLevel) for c in caches)):
        raise ValueError(f"caches={caches!r} is not allowed; give None or a list of CacheLevel")
    coarse: list[int] = []
    if hi is None:
        llc = last_level_cache_bytes(caches)
        if llc == 0:
            hi = 128 * MiB
        else:
            if llc < lo:
                raise ValueError(f"lo={lo} is not allowed; it must be <= the last-level cache, {llc} bytes")
            hi = llc
            coarse = [past_last_level_bytes(f, caches) for f in (2, 4)]
    require_positive("hi", hi)
    if hi > MAX_WORKING_SET_BYTES:
        raise ValueError(f"hi={hi} is not allowed; at most MAX_WORKING_SET_BYTES={MAX_WORKING_SET_BYTES:,}")
    if hi < lo:
        raise ValueError(f"hi={hi} is not allowed; it must be >= lo={lo}")
    n = int(math.floor(math.log2(hi / lo) * per_octave + 1e-9))
    fine = {max(64, int(round(lo * 2 ** (i / per_octave) / 64)) * 64) for i in range(n + 1)}
    if coarse:
        fine.add(math.ceil(hi / 64) * 64)                # the LLC itself
    return sorted(fine | set(coarse))


def _timed(fn, repeat: int, dev: torch.device, min_time_s: float, max_time_s: float
           ) -> tuple[float, float, float]:
    fn()  # warm-up: first touch, caches filled
    ts: list[float] = []
    while len(ts) < repeat:
        ts += time_calls(fn, 1, 0, dev=dev)
        if len(ts) >= 3 and sum(ts) >= max_time_s:      # long calls (DRAM sizes): 3 are enough
            break
    # short calls: more of them (up to 10·repeat), so one burst from a neighbour is one call of many
    while sum(ts) < min_time_s and len(ts) < 10 * repeat:
        ts += time_calls(fn, 1, 0, dev=dev)
    return statistics.median(ts), min(ts), max(ts)


def memory_mountain(sizes: list[int] | None = None, ops: tuple[str, ...] = ("read", "copy"), *,
                    dev: torch.device | str | None = None, target_bytes: int | None = None,
                    repeat: int = 5, min_time_s: float = 0.02, max_time_s: float = 0.3,
                    threads: int | None = 1,
                    show_progress: bool = True) -> list[MountainPoint]:
    """Measure read and/or copy bandwidth for each working-set size (see the module docstring).

    Args:
        sizes: working-set sizes in bytes (default :func:`mountain_sizes`: 4 KiB … 4× the
            last-level cache the OS reports, on CPU; 256 KiB … 2 GiB on a GPU, where L2 is tens
            of MB).
        ops: any of ``"read"``, ``"copy"``.
        dev: device (default ``measure.device()``).
        target_bytes: bytes each timed call moves at least (small buffers are re-read or re-copied
            until this much has moved), so a call lasts long enough to time.  Default 16 MiB on
            CPU, 1 GiB on GPU (a GPU reads 16 MiB from L2 in microseconds, about a launch).
        repeat: timed calls per point at least (median kept).
        min_time_s: keep timing a point (up to ``10·repeat`` calls) until its calls add up to
            this many seconds.
        max_time_s: stop timing a point after 3 calls (fewer than ``repeat``) once its calls add
            up to this many seconds: DRAM-sized points take a tenth of a second each and vary
            little.  ``min_time_s=0, max_time_s=inf`` times exactly ``repeat`` calls.
        threads: CPU threads for the sweep (default 1: one core, so L1/L2 are one core's caches;
            restored afterwards); ``None`` keeps torch's setting.  Ignored on GPU.
        show_progress: show a progress bar (``measure.progress``).

    Returns:
        One :class:`MountainPoint` per (op, size), ops in the order given, sizes ascending.

    Raises:
        ValueError: an unknown op, a size under 64 bytes, a size over half the memory the OS
            reports available (:func:`available_memory_bytes`; the sweep would swap or be
            killed), non-positive ``repeat`` / ``target_bytes`` / ``threads``, or negative
            ``min_time_s``.
    """
    dev = torch.device(dev) if dev is not None else _default_device()
    for op in ops:
        if op not in ("read", "copy"):
            raise ValueError(f"ops contains {op!r}; allowed: 'read', 'copy'")
    require_positive("repeat", repeat)
    for field, v in (("min_time_s", min_time_s), ("max_time_s", max_time_s)):
        if not isinstance(v, (int, float)) or not v >= 0:
            raise ValueError(f"{field}={v!r} is not allowed; it must be a number >= 0 (seconds)")
    if target_bytes is None:
        target_bytes = 16 * MiB if dev.type == "cpu" else 2**30
    require_positive("target_bytes", target_bytes)
    if threads is not None:
        require_positive("threads", threads)
    if sizes is None:
        sizes = mountain_sizes() if dev.type == "cpu" else mountain_sizes(256 * KiB, 2 * 2**30)
    for s in sizes:
        if not isinstance(s, int) or s < 64:
            raise ValueError(f"sizes contains {s!r}; each size must be an integer >= 64 bytes")
    avail = available_memory_bytes() if dev.type == "cpu" else None
    if avail is not None and max(sizes) > avail // 2:
        raise ValueError(f"sizes contains {max(sizes)} bytes, more than half of the {avail} bytes the OS "
                         f"reports available; pass smaller sizes")
    old_threads = torch.get_num_threads()
    if threads is not None and dev.type == "cpu":
        torch.set_num_threads(threads)
    points: list[MountainPoint] = []
    try:
        jobs = [(op, s) for op in ops for s in sorted(sizes)]
        it = progress(jobs, desc="memory mountain") if show_progress else jobs
        for op, size in it:
            if op == "read":
                n = size // 4                                  # fp32: 4 B per element
                x = torch.ones(n, device=dev)
                reps = max(1, math.ceil(target_bytes / (n * 4)))
                view = x.expand(reps, n)                       # stride 0: re-reads the same n elements

                def fn(view=view):
                    view.sum()
                moved = reps * n * 4                           # read reps·n·4 bytes, write 4
            else:
                n = size // 8                                  # src and dst, n fp32 each
                src = torch.ones(n, device=dev)
                dst = torch.empty(n, device=dev)
                reps = max(1, math.ceil(target_bytes / (2 * n * 4)))

                def fn(src=src, dst=dst, reps=reps):
                    for _ in range(reps):
                        dst.copy_(src)                         # read n·4 B, write n·4 B
                moved = reps * 2 * n * 4
            med, best, worst = _timed(fn, repeat, dev, min_time_s, max_time_s)
            points.append(MountainPoint(op, size, moved, med, best, worst, dev.type))
    finally:
        torch.set_num_threads(old_threads)
    return points


def call_overhead(dev: torch.device | str | None = None, repeat: int = 200) -> float:
    """Median seconds of one ``dst.copy_(src)`` on a single fp32 element: the fixed cost of a
    torch call (dispatch, and a kernel launch on GPU), which bounds small-size copy bandwidth.

    Raises:
        ValueError: ``repeat`` not positive.
    """
    require_positive("repeat", repeat)
    dev = torch.device(dev) if dev is not None else _default_device()
    src, dst = torch.ones(1, device=dev), torch.empty(1, device=dev)
    return statistics.median(time_calls(lambda: [dst.copy_(src) for _ in range(repeat)], 5, 1, dev=dev)) / repeat


def tier_bandwidth(points: list[MountainPoint], caches: list[CacheLevel], op: str = "read") -> dict[str, float]:
    """Median measured bandwidth (B/s) per tier: for each data/unified cache level, the points
    whose working set is above the previous level's size and at most half this one (clear of
    the transition); for ``"DRAM"`` the points at least 4× the last level.  Tiers without a point
    are left out.

    Raises:
        ValueError: ``op`` is not ``"read"`` or ``"copy"``.
    """
    if op not in ("read", "copy"):
        raise ValueError(f"op={op!r} is not allowed; allowed: 'read', 'copy'")
    pts = [p for p in points if p.op == op]
    levels = [c for c in caches if c.type != "Instruction"]
    out: dict[str, float] = {}
    prev = 0
    for c in levels:
        sel = [p.bandwidth for p in pts if prev < p.working_set_bytes <= c.size_bytes // 2]
        if sel:
            out[c.name] = statistics.median(sel)
        prev = c.size_bytes
    sel = [p.bandwidth for p in pts if p.working_set_bytes >= 4 * prev] if levels else []
    if sel:
        out["DRAM"] = statistics.median(sel)
    return out


def dram_onset(points: list[MountainPoint], caches: list[CacheLevel], op: str = "read",
               tolerance: float = 1.5) -> int | None:
    """The smallest measured working set (bytes) from which every larger point of ``op`` runs at
    DRAM speed — at most ``tolerance`` × the DRAM tier of :func:`tier_bandwidth`; the points of
    the DRAM tier itself (at least 4× the last level) always count — or ``None`` when the sweep
    has no DRAM tier.

    Compare it with :func:`last_level_cache_bytes`: on bare metal the onset sits near the LLC; on
    a virtual machine, whose OS reports a host LLC instance that other guests use too, it can
    come at a fraction of it.  A measured, noisy quantity (print it with ``fmt_measured``).

    Raises:
        ValueError: ``op`` unknown or ``tolerance`` < 1.
    """
    if not isinstance(tolerance, (int, float)) or not tolerance >= 1:
        raise ValueError(f"tolerance={tolerance!r} is not allowed; it must be a number >= 1")
    dram = tier_bandwidth(points, caches, op).get("DRAM")
    if dram is None:
        return None
    last = max(c.size_bytes for c in caches if c.type != "Instruction" and c.level == max(
        d.level for d in caches if d.type != "Instruction"))
    onset = None
    for p in sorted((p for p in points if p.op == op), key=lambda p: p.working_set_bytes, reverse=True):
        if p.working_set_bytes < 4 * last and p.bandwidth > tolerance * dram:
            break
        onset = p.working_set_bytes
    return onset


def plot_mountain(points: list[MountainPoint], caches: list[CacheLevel] | None = None, ax=None,
                  title: str = ""):
    """Plot measured bandwidth (GB/s, median line, min–max band) vs working set (bytes) on log
    axes, with a dashed vertical line at each data/unified cache size, named on the top edge
    (above the data).  Text sizes and the figure size (6.4 in wide) come from the book's style
    (:func:`llm_dataflow.figures.use_book_style`).  Returns the axes."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullLocator

    if ax is None:
        _, ax = plt.subplots()
    for op in dict.fromkeys(p.op for p in points):
        pts = [p for p in points if p.op == op]
        xs = [p.working_set_bytes for p in pts]
        ax.plot(xs, [p.bandwidth / 1e9 for p in pts], marker="o", ms=3, label=op)
        lo_hi = [p.bandwidth_range for p in pts]
        ax.fill_between(xs, [a / 1e9 for a, _ in lo_hi], [b / 1e9 for _, b in lo_hi], alpha=0.12)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    shown = [c for c in caches or [] if c.type != "Instruction"]
    for c in shown:
        ax.axvline(c.size_bytes, color="grey", ls="--", lw=1)
    if shown:   # cache names on a top axis: outside the plot, never over a curve
        top = ax.secondary_xaxis("top")
        top.set_xticks([c.size_bytes for c in shown],
                       [f"{c.name}\n{fmt_bytes(c.size_bytes, binary=True, digits=0)}" for c in shown])
        top.xaxis.set_minor_locator(NullLocator())
        top.tick_params(axis="x", length=0, colors="dimgrey")
    ax.set_xlabel("working set (bytes, log scale)")
    ax.set_ylabel("bandwidth (GB/s)")
    ax.set_title(title or f"memory mountain ({points[0].device if points else ''})")
    ax.legend(loc="best")   # the corner with the fewest points
    ax.grid(True, which="both", alpha=0.3)
    return ax
