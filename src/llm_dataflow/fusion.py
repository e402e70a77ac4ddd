"""Kernel fusion, shown on RMSNorm and "residual add + RMSNorm" (chapters 03 and 08).

Unfused, each elementwise step is its own kernel: it reads its inputs from main memory and
writes its output back, so a chain of ``s`` steps over an ``[N, D]`` tensor moves about
``s·2·N·D`` elements.  Fused, one kernel reads the inputs once, keeps every intermediate
on-chip (registers / shared memory on a GPU, L1/L2 on a CPU) and writes the outputs once.
Fusion changes *bytes moved* (and kernel launches), not the FLOPs.

:func:`norm_unfused` runs the steps one by one and records the bytes each moves.
:func:`norm_fused` computes the same result with every intermediate kept in cache: on a CPU it
runs the *same* kernels on blocks of rows small enough that a block's intermediates stay in the
L2 cache the OS reports (the idea a GPU kernel implements with one thread block per row); on a
GPU it uses ``torch.compile`` (one generated kernel) when it works, else the same blocking.
Both take preallocated :class:`NormBuffers` (``norm_buffers``), so that a timing can leave out
what the byte count leaves out: allocating, and the operating system's zeroing of, fresh memory.
:func:`fusion_bytes` gives both byte counts in closed form; :func:`fusion_benchmark` times both,
with fresh and with preallocated outputs, interleaved.

What a CPU measurement shows depends on the sizes against the caches: where every ``[N, D]``
tensor fits the last-level cache, the unfused chain's "extra" bytes are cache traffic, not
DRAM traffic, and fusion buys little; size the tensors past the LLC
(:func:`llm_dataflow.memory.past_last_level_bytes`) to see the byte ratio at work.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass

import torch

from .measure import time_calls
from .memory import cache_levels
from .core.units import KiB, require_positive

__all__ = ["norm_unfused", "norm_fused", "NormBuffers", "norm_buffers", "fused_block_rows", "fusion_bytes",
           "fusion_benchmark", "fusion_verdicts", "UNFUSED_STEPS"]

#: The kernels of an unfused (residual add +) RMSNorm, each with the ``[N, D]``-sized tensors it
#: reads and writes (``"N"`` = one value per row, ``"w"`` = the ``[D]`` weight).
UNFUSED_STEPS = (
    ("h = x + r", ("ND", "ND"), ("ND",)),       # only with a residual
    ("sq = h * h", ("ND",), ("ND",)),
    ("ms = mean(sq, -1)", ("ND",), ("N",)),
    ("ms = ms + eps", ("N",), ("N",)),
    ("inv = rsqrt(ms)", ("N",), ("N",)),
    ("y = h * inv", ("ND", "N"), ("ND",)),
    ("out = y * w", ("ND", "w"), ("ND",)),
)


def _check(x, w, residual):
    if x.dim() < 1 or w.shape != x.shape[-1:]:
        raise ValueError(f"w.shape={tuple(w.shape)} must equal x.shape[-1:]={tuple(x.shape[-1:])}")
    if residual is not None and residual.shape != x.shape:
        raise ValueError(f"residual.shape={tuple(residual.shape)} must equal x.shape={tuple(x.shape)}")


@dataclass
class NormBuffers:
    """Preallocated outputs and intermediates of (residual add +) RMSNorm over ``[N, D]``.

    Attributes:
        out: ``[N, D]`` result.
        h: ``[N, D]`` new residual stream ``x + residual`` (``None`` without a residual).
        sq, y: ``[N, D]`` intermediates ``h²`` and ``h · rsqrt(mean + eps)`` of the unfused chain;
            :func:`norm_fused` uses their first rows as its per-block scratch.
        ms: ``[N, 1]`` per-row mean of squares, then its reciprocal square root.
    """

    out: torch.Tensor
    h: torch.Tensor | None
    sq: torch.Tensor
    y: torch.Tensor
    ms: torch.Tensor


def norm_buffers(n_rows: int, d: int, residual: bool = True, dtype=torch.float32, device=None) -> NormBuffers:
    """Allocate :class:`NormBuffers` for ``[n_rows, d]`` and write every byte once (a page the
    program has never written is not yet backed by memory: timing it would time the operating
    system mapping it in).

    Raises:
        ValueError: ``n_rows`` or ``d`` not a positive integer, ``residual`` not a bool.
    """
    require_positive("n_rows", n_rows)
    require_positive("d", d)
    _require_bool("residual", residual)

    def z(*shape):
        return torch.zeros(*shape, dtype=dtype, device=device)
    return NormBuffers(z(n_rows, d), z(n_rows, d) if residual else None, z(n_rows, d), z(n_rows, d), z(n_rows, 1))


def _check_buffers(b: NormBuffers, x2: torch.Tensor, residual) -> None:
    n, d = x2.shape
    for name in ("out", "sq", "y") + (("h",) if residual is not None else ()):
        t = getattr(b, name)
        if t is None or t.shape != (n, d) or t.dtype != x2.dtype or t.device != x2.device:
            got = None if t is None else (tuple(t.shape), t.dtype, str(t.device))
            raise ValueError(f"buffers.{name} is {got}; it must be a {(n, d)} {x2.dtype} tensor on {x2.device}")
    if b.ms.shape != (n, 1) or b.ms.dtype != x2.dtype or b.ms.device != x2.device:
        raise ValueError(f"buffers.ms has shape {tuple(b.ms.shape)}; it must be a {(n, 1)} {x2.dtype} tensor "
                         f"on {x2.device}")


def norm_unfused(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6, residual: torch.Tensor | None = None,
                 record: list | None = None, buffers: NormBuffers | None = None):
    """(Residual add +) RMSNorm as separate kernels, each writing its intermediate to memory.

    Shapes: ``x, residual [..., D]``, ``w [D]``.  Returns ``out`` (``[..., D]``), or
    ``(out, h)`` with a residual (``h = x + residual`` is the new residual stream, which the next
    layer needs, so a fused kernel writes it too).  Computes in ``x.dtype``.  When ``record`` is a
    list, appends ``{"step", "bytes_read", "bytes_written"}`` per kernel, from tensor sizes.
    With ``buffers`` (:func:`norm_buffers` for ``[N, D]``, ``N`` = rows of ``x``), every kernel
    writes into them (``out=``) instead of fresh tensors: the same kernels and bytes, no allocation;
    the results are views of ``buffers.out`` / ``buffers.h``.

    Raises:
        ValueError: mismatched shapes, or buffers of the wrong shape/dtype/device.
    """
    _check(x, w, residual)
    b = buffers
    if b is not None:
        x2 = x.reshape(-1, x.shape[-1])
        _check_buffers(b, x2, residual)

        def into(t):
            return t.view_as(x)
    else:
        def into(t):
            return None

    def log(step, ins, outs):
        if record is not None:
            record.append({"step": step, "bytes_read": sum(t.numel() * t.element_size() for t in ins),
                           "bytes_written": sum(t.numel() * t.element_size() for t in outs)})

    def op(fn, *args, out=None):
        return fn(*args) if out is None else fn(*args, out=out)

    h = x
    if residual is not None:
        h = op(torch.add, x, residual, out=into(b.h) if b else None)
        log("h = x + r", (x, residual), (h,))
    sq = op(torch.mul, h, h, out=into(b.sq) if b else None)
    log("sq = h * h", (h,), (sq,))
    ms_out = b.ms.view(*x.shape[:-1], 1) if b else None
    ms = sq.mean(-1, keepdim=True) if b is None else torch.mean(sq, -1, keepdim=True, out=ms_out)
    log("ms = mean(sq, -1)", (sq,), (ms,))
    ms2 = op(torch.add, ms, eps, out=ms_out)
    log("ms = ms + eps", (ms,), (ms2,))
    inv = op(torch.rsqrt, ms2, out=ms_out)
    log("inv = rsqrt(ms)", (ms2,), (inv,))
    y = op(torch.mul, h, inv, out=into(b.y) if b else None)
    log("y = h * inv", (h, inv), (y,))
    out = op(torch.mul, y, w, out=into(b.out) if b else None)
    log("out = y * w", (y, w), (out,))
    return (out, h) if residual is not None else out


def _require_bool(field: str, value) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{field}={value!r} is not allowed; it must be True or False")
    return value


def fused_block_rows(d: int, elem_bytes: int = 4, residual: bool = True, l2_bytes: int | None = None) -> int:
    """Rows per block of the blocked "fused" kernel: as many as fit one block's live tensors —
    x, residual, h, h², y and out, ``(5 + residual)·rows·D·elem_bytes`` bytes — in one core's L2
    cache.  The scratch tensors (h², y) are reused block after block and stay in L2; x, the
    residual, h and out stream through it.  Not smaller: every block costs seven PyTorch calls of
    about a microsecond each, and with half an L2 per block that overhead ate the gain (measured
    on the Intel kind, 1 thread, ``[66560, 1024]`` FP32: 21-row blocks 0.92×, 84-row blocks 1.32×
    the unfused chain's speed).  ``l2_bytes`` defaults to the L2 the OS reports
    (:func:`llm_dataflow.memory.cache_levels`), else 1 MiB (a common per-core L2).  At least 1.

    Raises:
        ValueError: ``d``, ``elem_bytes`` or ``l2_bytes`` not a positive integer, ``residual``
            not a bool.
    """
    require_positive("d", d)
    require_positive("elem_bytes", elem_bytes)
    _require_bool("residual", residual)
    if l2_bytes is None:
        l2 = [c.size_bytes for c in cache_levels() if c.level == 2 and c.type != "Instruction"]
        l2_bytes = l2[0] if l2 else 1024 * KiB
    require_positive("l2_bytes", l2_bytes)
    return max(1, l2_bytes // ((5 + int(residual)) * d * elem_bytes))


def _blocked(x2, w, eps, r2, block_rows, b: NormBuffers | None):
    n, d = x2.shape
    if b is None:   # fresh outputs, scratch for one block
        out = torch.empty_like(x2)
        h_out = torch.empty_like(x2) if r2 is not None else None
        sq, y, ms = (torch.empty(block_rows, d, dtype=x2.dtype, device=x2.device),
                     torch.empty(block_rows, d, dtype=x2.dtype, device=x2.device),
                     torch.empty(block_rows, 1, dtype=x2.dtype, device=x2.device))
    else:           # the buffers' first rows serve as the block's scratch
        out, h_out, sq, y, ms = b.out, b.h, b.sq, b.y, b.ms
    for i in range(0, n, block_rows):
        j = min(n, i + block_rows)
        k = j - i
        # the unfused chain's kernels, on block_rows·D elements each: they stay in L2 until the
        # block is done, so main memory sees x (and r) read once, out (and h) written once
        hb = x2[i:j] if r2 is None else torch.add(x2[i:j], r2[i:j], out=h_out[i:j])
        torch.mul(hb, hb, out=sq[:k])
        torch.mean(sq[:k], -1, keepdim=True, out=ms[:k])
        torch.add(ms[:k], eps, out=ms[:k])
        torch.rsqrt(ms[:k], out=ms[:k])
        torch.mul(hb, ms[:k], out=y[:k])
        torch.mul(y[:k], w, out=out[i:j])
    return out, h_out


_COMPILED = {}


def _norm_into(x, w, eps, residual, out, h):
    res = norm_unfused(x, w, eps, residual)
    if residual is not None:
        out.copy_(res[0])
        h.copy_(res[1])
    else:
        out.copy_(res)


def norm_fused(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6, residual: torch.Tensor | None = None,
               block_rows: int | None = None, backend: str = "auto", buffers: NormBuffers | None = None):
    """The same result as :func:`norm_unfused` with intermediates kept in cache.

    ``backend="blocked"``: the unfused chain's kernels run on ``block_rows`` rows at a time
    (default :func:`fused_block_rows`: a block's live tensors fill the L2 the OS reports);
    main memory sees x (and the residual) read once and ``out`` (and ``h``) written once.  It is
    still a Python loop of PyTorch calls, seven per block: their fixed cost (about a microsecond
    each on CPU) is what it pays for its smaller traffic.
    ``backend="compile"``: ``torch.compile`` of :func:`norm_unfused` (Inductor emits one fused
    kernel).  ``"auto"``: compile on CUDA, blocked on CPU (compiling on a 2-core CPU takes longer
    than the lesson).
    ``buffers`` (:func:`norm_buffers`): write ``out`` and ``h`` into them (and, blocked, use their
    first rows as the block's scratch) instead of allocating; the results are views of them.

    Raises:
        ValueError: mismatched shapes, bad ``block_rows``, ``backend`` or ``buffers``.
    """
    _check(x, w, residual)
    if backend not in ("auto", "blocked", "compile"):
        raise ValueError(f"backend={backend!r} is not allowed; allowed: 'auto', 'blocked', 'compile'")
    if backend == "auto":
        backend = "compile" if x.is_cuda else "blocked"
    D = x.shape[-1]
    x2 = x.reshape(-1, D)
    if buffers is not None:
        _check_buffers(buffers, x2, residual)
    if backend == "compile":
        key = (residual is not None, buffers is not None)
        if key not in _COMPILED:
            _COMPILED[key] = torch.compile(_norm_into if buffers is not None else norm_unfused, dynamic=False)
        if buffers is None:
            return _COMPILED[key](x, w, eps, residual)
        _COMPILED[key](x, w, eps, residual, buffers.out.view_as(x),
                       buffers.h.view_as(x) if residual is not None else None)
        out = buffers.out.view_as(x)
        return (out, buffers.h.view_as(x)) if residual is not None else out
    if block_rows is None:
        block_rows = fused_block_rows(D, x.element_size(), residual is not None)
    require_positive("block_rows", block_rows)
    if buffers is not None:
        block_rows = min(block_rows, x2.shape[0])
    r2 = residual.reshape(-1, D) if residual is not None else None
    out, h = _blocked(x2, w, eps, r2, block_rows, buffers)
    return (out.view_as(x), h.view_as(x)) if residual is not None else out.view_as(x)


def fusion_bytes(n_rows: int, d: int, elem_bytes: int = 4, residual: bool = False) -> dict:
    """Main-memory bytes of unfused vs fused (residual add +) RMSNorm over ``[N, D]``.

    Unfused (the kernels of :data:`UNFUSED_STEPS`): ``(x+r)``: 3·N·D; ``h²``: 2·N·D; ``mean``:
    N·D + N; ``+eps``: 2·N; ``rsqrt``: 2·N; ``h·inv``: 2·N·D + N; ``·w``: 2·N·D + D (elements,
    times ``elem_bytes``).  Fused: read x (and r) and w, write out (and h):
    ``(N·D·(2 + 2·residual) + D)·elem_bytes``.

    Returns:
        ``{"unfused": bytes, "fused": bytes, "ratio": unfused/fused, "kernels_unfused": int,
        "kernels_fused": 1}``.

    Raises:
        ValueError: ``n_rows``, ``d`` or ``elem_bytes`` not a positive integer, ``residual`` not
            a bool.
    """
    for f, v in (("n_rows", n_rows), ("d", d), ("elem_bytes", elem_bytes)):
        require_positive(f, v)
    _require_bool("residual", residual)
    N, D = n_rows, d
    unf = 2 * N * D + (N * D + N) + 2 * N + 2 * N + (2 * N * D + N) + (2 * N * D + D)
    fused = 2 * N * D + D
    if residual:
        unf += 3 * N * D
        fused += 2 * N * D
    return {"unfused": unf * elem_bytes, "fused": fused * elem_bytes, "ratio": unf / fused,
            "kernels_unfused": 6 + int(residual), "kernels_fused": 1}


def _minor_faults() -> int | None:
    try:
        import resource
    except ImportError:     # not Unix
        return None
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


#: The four timed paths of :func:`fusion_benchmark`: (key, fused?, preallocated?).
_PATHS = (("unfused", False, False), ("unfused_prealloc", False, True),
          ("fused", True, False), ("fused_prealloc", True, True))


def fusion_benchmark(n_rows: int = 4096, d: int = 2048, residual: bool = True, dtype=torch.float32,
                     device=None, repeat: int = 5, seed: int = 0, threads: int | None = None,
                     block_rows: int | None = None, paths: tuple[str, ...] | None = None) -> dict:
    """Time unfused vs fused (residual add +) RMSNorm on ``[n_rows, d]``, each with fresh and with
    preallocated outputs, and check that they agree.

    ``paths`` picks which of ``"unfused", "unfused_prealloc", "fused", "fused_prealloc"`` to time
    (default all four; ``"unfused"`` and ``"fused"`` always run once, untimed, for the check).
    They run interleaved — one call of each per round, the order rotating from round to
    round, ``repeat`` rounds after one warm-up round — so that a neighbour's burst on a shared
    machine falls on all of them alike; each time is the median over the rounds, and each speed-up
    the median of the per-round ratios.  Calls are timed by
    :func:`llm_dataflow.measure.time_calls`: with ``threads=1`` on CPU, by the thread's CPU time
    (page faults included, other processes' time slices not).

    Returns (keys of paths not timed are left out):
        ``{"t_unfused", "t_fused"`` (s, median; fresh outputs, as a caller without buffers gets),
        ``"t_unfused_prealloc", "t_fused_prealloc"`` (s, median; writing into :func:`norm_buffers`),
        ``"speedup", "speedup_prealloc"`` (median per-round ratio unfused / fused),
        ``"faults_unfused", "faults_fused", "faults_unfused_prealloc", "faults_fused_prealloc"``
        (minor page faults per call, ``resource.getrusage``; ``None`` where not reported),
        ``"bytes_unfused", "bytes_fused"`` (counted from tensor sizes, equal to
        :func:`fusion_bytes`), ``"gbps_unfused", "gbps_fused"`` (bytes / median time, fresh
        outputs, B/s), ``"block_rows"``, ``"max_abs_diff"}`` (fused vs unfused output).
        ``threads`` sets torch's CPU thread count for the timing (restored afterwards);
        ``threads=1`` compares the two on one core, which keeps a busy shared machine's thread
        scheduling out of the comparison.

    Raises:
        ValueError: non-positive sizes, ``repeat`` or ``threads``; an unknown or empty ``paths``.
    """
    allowed = tuple(k for k, _, _ in _PATHS)
    paths = allowed if paths is None else tuple(paths)
    if not paths or any(k not in allowed for k in paths) or len(set(paths)) != len(paths):
        raise ValueError(f"paths={paths!r} is not allowed; pick distinct names from {allowed}")
    require_positive("n_rows", n_rows)
    require_positive("d", d)
    require_positive("repeat", repeat)
    if threads is not None:
        require_positive("threads", threads)
    dev = torch.device(device) if device is not None else torch.device("cpu")
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_rows, d, generator=g).to(dev, dtype)
    r = torch.randn(n_rows, d, generator=g).to(dev, dtype) if residual else None
    w = torch.randn(d, generator=g).to(dev, dtype)
    if block_rows is None:
        block_rows = fused_block_rows(d, x.element_size(), residual)
    rec: list = []
    bufs = norm_buffers(n_rows, d, residual, dtype, dev)
    calls = {
        "unfused": lambda: norm_unfused(x, w, 1e-6, r),
        "unfused_prealloc": lambda: norm_unfused(x, w, 1e-6, r, buffers=bufs),
        "fused": lambda: norm_fused(x, w, 1e-6, r, block_rows=block_rows),
        "fused_prealloc": lambda: norm_fused(x, w, 1e-6, r, block_rows=block_rows, buffers=bufs),
    }
    warm = {"unfused": lambda: norm_unfused(x, w, 1e-6, r, record=rec)}   # counts the bytes once
    times: dict[str, list[float]] = {k: [] for k in paths}
    faults: dict[str, int | None] = {k: 0 for k in paths}
    old = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        for rnd in range(repeat + 1):                  # round 0 is the warm-up (and the check)
            keys = list(paths) if rnd else list(dict.fromkeys(paths + ("unfused", "fused")))
            keys = keys[rnd % len(keys):] + keys[:rnd % len(keys)]   # rotate: no path always first
            results = {}
            for k in keys:
                f0 = _minor_faults()
                box = []
                dt = time_calls(lambda: box.append((warm.get(k, calls[k]) if rnd == 0 else calls[k])()),
                                1, 0, dev=dev)[0]
                res = box.pop()
                f1 = _minor_faults()
                if rnd:
                    times[k].append(dt)
                    faults[k] = None if f0 is None or faults[k] is None else faults[k] + (f1 - f0)
                elif k in ("unfused", "fused"):
                    results[k] = res[0] if residual else res
                del res
            if rnd == 0:   # the warm-up round's outputs: fused must equal unfused
                max_abs_diff = float((results["unfused"] - results["fused"]).abs().max())
                del results
    finally:
        torch.set_num_threads(old)
    b_unf = sum(s["bytes_read"] + s["bytes_written"] for s in rec)
    b_fus = fusion_bytes(n_rows, d, x.element_size(), residual)["fused"]
    out = {"bytes_unfused": b_unf, "bytes_fused": b_fus, "block_rows": block_rows, "max_abs_diff": max_abs_diff}
    for k in paths:
        out[f"t_{k}"] = statistics.median(times[k])
        out[f"faults_{k}"] = None if faults[k] is None else faults[k] / repeat
    for key, (a, b) in (("speedup", ("unfused", "fused")), ("speedup_prealloc", ("unfused_prealloc", "fused_prealloc"))):
        if a in times and b in times:
            out[key] = statistics.median(x / y for x, y in zip(times[a], times[b]))
    if "unfused" in times:
        out["gbps_unfused"] = b_unf / out["t_unfused"]
    if "fused" in times:
        out["gbps_fused"] = b_fus / out["t_fused"]
    return out


def fusion_verdicts(result: dict, margin: float = 1.1) -> dict:
    """What a :func:`fusion_benchmark` result says on this machine, in words (chapters 03 and 08).

    ``prealloc``: fusion saved time, no clear difference, or the blocked kernel was slower — from
    ``speedup_prealloc`` (unfused / fused, both with preallocated outputs: bytes and calls only),
    against ``margin`` either way.  ``allocation``: whether fresh outputs cost the unfused chain
    time, from ``t_unfused / t_unfused_prealloc``.  Both are verdicts on measured, noisy times.

    Raises:
        ValueError: ``result`` lacks the preallocated and fresh timings (a benchmark run with
            ``paths`` that leave them out), or ``margin`` is not a number above 1.
    """
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not margin > 1:
        raise ValueError(f"margin={margin!r} is not allowed; allowed: a number above 1")
    missing = [k for k in ("speedup_prealloc", "t_unfused", "t_unfused_prealloc") if k not in result]
    if missing:
        raise ValueError(f"result lacks {', '.join(missing)}; run fusion_benchmark with its default paths")
    sp = result["speedup_prealloc"]
    alloc = result["t_unfused"] / result["t_unfused_prealloc"]
    return {
        "prealloc": ("fusion saved time here" if sp >= margin else
                     f"no clear difference here (within {round(100 * (margin - 1))} %)" if sp > 1 / margin else
                     "the blocked kernel was slower here: its per-block calls cost more than the bytes it saved"),
        "allocation": ("allocating fresh outputs cost time here" if alloc >= margin
                       else "allocation cost little here"),
        "fresh_over_prealloc": alloc,
    }
