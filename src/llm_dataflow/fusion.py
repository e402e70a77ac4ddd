"""Kernel fusion, shown on RMSNorm and "residual add + RMSNorm" (chapter 03).

Unfused, each elementwise step is its own kernel: it reads its inputs from main memory and
writes its output back, so a chain of ``s`` steps over an ``[N, D]`` tensor moves about
``s·2·N·D`` elements.  Fused, one kernel reads the inputs once, keeps every intermediate
on-chip (registers / shared memory on a GPU, L1/L2 on a CPU) and writes the outputs once.
Fusion changes *bytes moved* (and kernel launches), not the FLOPs.

:func:`norm_unfused` runs the steps one by one and records the bytes each moves.
:func:`norm_fused` computes the same result with every intermediate kept in cache: on a CPU it
processes blocks of rows small enough that a block's intermediates stay in the L2 cache (the
same idea a GPU kernel implements with one thread block per row); on a GPU it uses
``torch.compile`` (one generated kernel) when it works, else the same blocking.
:func:`fusion_bytes` gives both byte counts in closed form; :func:`fusion_benchmark` times both.
"""
from __future__ import annotations

import torch

from .measure import time_fn
from .units import require_positive

__all__ = ["norm_unfused", "norm_fused", "fusion_bytes", "fusion_benchmark", "UNFUSED_STEPS"]

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


def norm_unfused(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6, residual: torch.Tensor | None = None,
                 record: list | None = None):
    """(Residual add +) RMSNorm as separate kernels, each writing its intermediate to memory.

    Shapes: ``x, residual [..., D]``, ``w [D]``.  Returns ``out`` (``[..., D]``), or
    ``(out, h)`` with a residual (``h = x + residual`` is the new residual stream, which the next
    layer needs, so a fused kernel writes it too).  Computes in ``x.dtype``.  When ``record`` is a
    list, appends ``{"step", "bytes_read", "bytes_written"}`` per kernel, from tensor sizes.

    Raises:
        ValueError: mismatched shapes.
    """
    _check(x, w, residual)

    def log(step, ins, outs):
        if record is not None:
            record.append({"step": step, "bytes_read": sum(t.numel() * t.element_size() for t in ins),
                           "bytes_written": sum(t.numel() * t.element_size() for t in outs)})

    h = x
    if residual is not None:
        h = x + residual
        log("h = x + r", (x, residual), (h,))
    sq = h * h
    log("sq = h * h", (h,), (sq,))
    ms = sq.mean(-1, keepdim=True)
    log("ms = mean(sq, -1)", (sq,), (ms,))
    ms2 = ms + eps
    log("ms = ms + eps", (ms,), (ms2,))
    inv = torch.rsqrt(ms2)
    log("inv = rsqrt(ms)", (ms2,), (inv,))
    y = h * inv
    log("y = h * inv", (h, inv), (y,))
    out = y * w
    log("out = y * w", (y, w), (out,))
    return (out, h) if residual is not None else out


def _blocked(x2, w, eps, r2, block_rows):
    out = torch.empty_like(x2)
    h_out = torch.empty_like(x2) if r2 is not None else None
    for i in range(0, x2.shape[0], block_rows):
        xb = x2[i:i + block_rows]
        hb = xb if r2 is None else torch.add(xb, r2[i:i + block_rows], out=h_out[i:i + block_rows])
        # block_rows·D elements per intermediate: they stay in L2 until the block is done
        inv = torch.rsqrt((hb * hb).mean(-1, keepdim=True) + eps)
        torch.mul(hb * inv, w, out=out[i:i + block_rows])
    return out, h_out


_COMPILED = {}


def norm_fused(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6, residual: torch.Tensor | None = None,
               block_rows: int | None = None, backend: str = "auto"):
    """The same result as :func:`norm_unfused` with intermediates kept in cache.

    ``backend="blocked"``: rows are processed ``block_rows`` at a time (default: a block of
    ``≈256 KiB`` per intermediate, so the block's few intermediates fit a 1 MiB L2); main memory
    sees x (and the residual) read once and ``out`` (and ``h``) written once.
    ``backend="compile"``: ``torch.compile`` of :func:`norm_unfused` (Inductor emits one fused
    kernel).  ``"auto"``: compile on CUDA, blocked on CPU (compiling on a 2-core CPU takes longer
    than the lesson).

    Raises:
        ValueError: mismatched shapes, bad ``block_rows`` or ``backend``.
    """
    _check(x, w, residual)
    if backend not in ("auto", "blocked", "compile"):
        raise ValueError(f"backend={backend!r} is not allowed; allowed: 'auto', 'blocked', 'compile'")
    if backend == "auto":
        backend = "compile" if x.is_cuda else "blocked"
    if backend == "compile":
        key = residual is not None
        if key not in _COMPILED:
            _COMPILED[key] = torch.compile(norm_unfused, dynamic=False)
        return _COMPILED[key](x, w, eps, residual)
    D = x.shape[-1]
    if block_rows is None:
        block_rows = max(1, (256 * 1024) // (D * x.element_size()))
    require_positive("block_rows", block_rows)
    x2 = x.reshape(-1, D)
    r2 = residual.reshape(-1, D) if residual is not None else None
    out, h = _blocked(x2, w, eps, r2, block_rows)
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
        ValueError: non-positive sizes.
    """
    for f, v in (("n_rows", n_rows), ("d", d), ("elem_bytes", elem_bytes)):
        require_positive(f, v)
    N, D = n_rows, d
    unf = 2 * N * D + (N * D + N) + 2 * N + 2 * N + (2 * N * D + N) + (2 * N * D + D)
    fused = 2 * N * D + D
    if residual:
        unf += 3 * N * D
        fused += 2 * N * D
    return {"unfused": unf * elem_bytes, "fused": fused * elem_bytes, "ratio": unf / fused,
            "kernels_unfused": 6 + int(residual), "kernels_fused": 1}


def fusion_benchmark(n_rows: int = 4096, d: int = 2048, residual: bool = True, dtype=torch.float32,
                     device=None, repeat: int = 5, seed: int = 0, threads: int | None = None) -> dict:
    """Time unfused vs fused (residual add +) RMSNorm on ``[n_rows, d]`` and check they agree.

    Returns ``{"t_unfused", "t_fused" (s, median), "bytes_unfused", "bytes_fused" (counted from
    tensor sizes, equal to :func:`fusion_bytes`), "gbps_unfused", "gbps_fused" (bytes / time,
    B/s), "max_abs_diff"}``.  ``threads`` sets torch's CPU thread count for the timing (restored
    afterwards); ``threads=1`` compares the two on one core, which keeps a busy shared machine's
    thread scheduling out of the comparison.

    Raises:
        ValueError: non-positive sizes.
    """
    require_positive("n_rows", n_rows)
    require_positive("d", d)
    dev = torch.device(device) if device is not None else torch.device("cpu")
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_rows, d, generator=g).to(dev, dtype)
    r = torch.randn(n_rows, d, generator=g).to(dev, dtype) if residual else None
    w = torch.randn(d, generator=g).to(dev, dtype)
    rec: list = []
    ref = norm_unfused(x, w, 1e-6, r, record=rec)
    got = norm_fused(x, w, 1e-6, r)
    ref0, got0 = (ref[0], got[0]) if residual else (ref, got)
    b_unf = sum(s["bytes_read"] + s["bytes_written"] for s in rec)
    b_fus = fusion_bytes(n_rows, d, x.element_size(), residual)["fused"]
    old = torch.get_num_threads()
    if threads is not None:
        require_positive("threads", threads)
        torch.set_num_threads(threads)
    try:
        t_unf = time_fn(lambda: norm_unfused(x, w, 1e-6, r), repeat=repeat, dev=dev)
        t_fus = time_fn(lambda: norm_fused(x, w, 1e-6, r), repeat=repeat, dev=dev)
    finally:
        torch.set_num_threads(old)
    return {"t_unfused": t_unf, "t_fused": t_fus, "bytes_unfused": b_unf, "bytes_fused": b_fus,
            "gbps_unfused": b_unf / t_unf, "gbps_fused": b_fus / t_fus,
            "max_abs_diff": float((ref0 - got0).abs().max())}
