"""FlashAttention-style tiled attention with an online softmax (chapter 06).

Same definition of attention as the naive ``softmax(Q Kᵀ/√d_h) V`` — fewer round trips to
memory.  The naive form writes the T×S score matrix and the T×S probability matrix to memory
and reads them back; the tiled form keeps, per query row, a running maximum ``m`` and a running
sum ``l`` of exponentials and rescales its output accumulator when the maximum grows
(Milakov & Gimelshein 2018, arXiv:1805.02867; Dao et al. 2022, "FlashAttention",
arXiv:2205.14135, Algorithm 1; Dao 2023, FlashAttention-2, arXiv:2307.08691, loop order
queries-outside / keys-inside as here).  Only a ``block_q × block_k`` tile of scores exists
at any time, so extra memory is O(T·d_h + block_q·block_k) instead of O(T·S).

Tiling also changes the FLOPs when a mask is known in advance: with ``causal=True`` the key loop
stops at the diagonal, so key blocks wholly in the future of a query block are never computed (and
blocks wholly outside a sliding window are skipped).  For a prompt attending to itself (T = S) with
n × n tiles that runs n(n+1)/2 of the n² score and PV tiles — close to half — where the naive form
computes every score and then masks (FLOPs counted with ``torch.utils.flop_counter``:
``tests/test_exercise_answers.py::test_ch06_solutions``).

The merge of two partial results over disjoint key sets (:func:`merge_attention_partials`) is
public: ring attention (chapter 07) merges the partials of key chunks held by other devices.

Shapes (``book/notation.md``): q ``[B, H, T, d_h]``, k/v ``[B, H_kv, S, d_h]`` with
``H % H_kv == 0`` (GQA/MQA: query head h uses KV head ``h // (H / H_kv)``).
"""
from __future__ import annotations

import math
import weakref

import torch

from .core.units import require_positive

__all__ = [
    "flash_attention", "attention_partial", "merge_attention_partials", "attention_hbm_accesses",
    "peak_memory_bytes",
]


def _check_qkv(q, k, v):
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"q, k, v must be 4-D [B, H, T, d_h] / [B, H_kv, S, d_h]; got shapes "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    B, H, T, d = q.shape
    if k.shape != v.shape or k.shape[0] != B or k.shape[3] != d:
        raise ValueError(f"k and v must both be [B={B}, H_kv, S, d_h={d}]; got {tuple(k.shape)} and {tuple(v.shape)}")
    if H % k.shape[1]:
        raise ValueError(f"n_heads={H} is not a multiple of n_kv_heads={k.shape[1]}")


def attention_partial(q, k, v, causal: bool = True, *, window: int | None = None, q_offset: int | None = None,
                      k_offset: int = 0, block_q: int = 64, block_k: int = 64):
    """Tiled attention of ``q`` over one set of keys, returning the partial ``(o, m, l)``.

    Args:
        q: ``[B, H, T, d_h]``; k, v: ``[B, H_kv, S, d_h]``.
        causal: mask keys at positions after the query's position.
        window: sliding window (tokens): query at position p sees keys at positions
            ``p - window < pos ≤ p`` (Mistral's rolling window; needs ``causal``).  A window larger
            than the context is allowed (it masks nothing).
        q_offset: absolute position of ``q[..., 0, :]``; default ``S - T`` (queries are the last
            T positions of the S keys: prefill when T = S, decode when T = 1).
        k_offset: absolute position of ``k[..., 0, :]`` (non-zero for a chunk of keys, as in ring
            attention).
        block_q, block_k: tile sizes (rows of Q, rows of K/V per tile).

    Returns:
        ``o [B, H, T, d_h]`` (normalised over these keys), ``m [B, H, T]`` (row max of the scaled
        scores ``q·k/√d_h``, ``-inf`` where every key is masked), ``l [B, H, T]`` (``Σ exp(s - m)``,
        0 where every key is masked; then ``o`` is 0).  fp32 statistics for half inputs.

    Raises:
        ValueError: bad shapes, non-positive blocks, ``window`` without ``causal`` or ``window < 1``.
    """
    _check_qkv(q, k, v)
    require_positive("block_q", block_q)
    require_positive("block_k", block_k)
    if window is not None:
        require_positive("window", window)
        if not causal:
            raise ValueError("window is only defined for causal attention; pass causal=True or window=None")
    B, H, T, d = q.shape
    H_kv, S = k.shape[1], k.shape[2]
    G = H // H_kv
    if q_offset is None:
        q_offset = S - T
    scale = 1.0 / math.sqrt(d)
    acc_dtype = torch.float32 if q.dtype in (torch.float16, torch.bfloat16) else q.dtype
    out = torch.zeros(B, H, T, d, dtype=q.dtype, device=q.device)            # T·d_h elements
    m_out = torch.full((B, H, T), -math.inf, dtype=acc_dtype, device=q.device)
    l_out = torch.zeros(B, H, T, dtype=acc_dtype, device=q.device)
    qg = q.view(B, H_kv, G, T, d)                                            # query heads grouped by KV head
    for i0 in range(0, T, block_q):
        i1 = min(T, i0 + block_q)
        qb = qg[..., i0:i1, :].to(acc_dtype) * scale                        # read block_q·d_h per head
        qpos = torch.arange(q_offset + i0, q_offset + i1, device=q.device)
        m = torch.full(qb.shape[:-1], -math.inf, dtype=acc_dtype, device=q.device)  # running max
        l = torch.zeros_like(m)                                                        # running sum
        acc = torch.zeros_like(qb)                                                     # unnormalised output
        for j0 in range(0, S, block_k):
            j1 = min(S, j0 + block_k)
            k_lo, k_hi = k_offset + j0, k_offset + j1 - 1
            if causal and k_lo > q_offset + i1 - 1:
                break                                        # this and later key blocks are all in the future
            if window is not None and k_hi <= q_offset + i0 - window:
                continue                                     # the whole block slid out of every row's window
            kb = k[:, :, None, j0:j1].to(acc_dtype)          # read block_k·d_h per KV head
            vb = v[:, :, None, j0:j1].to(acc_dtype)
            s = qb @ kb.transpose(-1, -2)                    # [B, H_kv, G, bq, bk]: the only score tile alive
            # only tiles that straddle the diagonal (or the window's edge) need a mask
            straddles = causal and (k_hi > q_offset + i0 or
                                    (window is not None and k_lo <= q_offset + i1 - 1 - window))
            if straddles:
                rel = qpos[:, None] - torch.arange(k_lo, k_hi + 1, device=q.device)[None, :]
                allowed = rel >= 0
                if window is not None:
                    allowed &= rel < window
                s = s.masked_fill(~allowed, -math.inf)
            m_new = torch.maximum(m, s.amax(-1))
            m_safe = torch.where(torch.isneginf(m_new), torch.zeros_like(m_new), m_new)  # rows with no key yet
            p = torch.exp(s - m_safe[..., None])
            alpha = torch.exp(m - m_safe)                    # rescale what was summed under the old max
            l = alpha * l + p.sum(-1)
            acc = acc * alpha[..., None] + p @ vb
            m = m_new
        o = torch.where(l[..., None] > 0, acc / l.clamp_min(torch.finfo(acc_dtype).tiny)[..., None],
                        torch.zeros_like(acc))
        out[:, :, i0:i1] = o.reshape(B, H, i1 - i0, d).to(q.dtype)          # write block_q·d_h per head
        m_out[:, :, i0:i1] = m.reshape(B, H, i1 - i0)
        l_out[:, :, i0:i1] = l.reshape(B, H, i1 - i0)
    return out, m_out, l_out


def flash_attention(q, k, v, causal: bool = True, *, window: int | None = None, block_q: int = 64,
                    block_k: int = 64, q_offset: int | None = None):
    """``softmax(Q Kᵀ/√d_h + mask) V`` computed tile by tile with an online softmax.

    Shapes: q ``[B, H, T, d_h]``, k/v ``[B, H_kv, S, d_h]`` → ``[B, H, T, d_h]``.  Causal masking
    aligns queries to the *end* of the keys unless ``q_offset`` is given (see
    :func:`attention_partial`).  Extra memory: O(B·H·T·d_h + B·H·block_q·block_k), never the
    T×S score matrix.  Exact (to floating-point rounding) against the naive reference
    (``ldf.attention_reference``); source: Dao et al. 2022, arXiv:2205.14135, Algorithm 1.

    Raises:
        ValueError: as :func:`attention_partial`.
    """
    return attention_partial(q, k, v, causal, window=window, q_offset=q_offset, block_q=block_q, block_k=block_k)[0]


def merge_attention_partials(o1, m1, l1, o2, m2, l2):
    """Merge two partial attentions of the same queries over disjoint key sets.

    Each partial is ``(o [..., T, d_h], m [..., T], l [..., T])`` as :func:`attention_partial`
    returns: ``o`` normalised over its own keys, ``m`` its row max, ``l = Σ exp(s - m)``.
    With ``m = max(m1, m2)`` and weights ``w_i = l_i·exp(m_i - m)``:
    ``o = (w1·o1 + w2·o2)/(w1 + w2)``, ``l = w1 + w2`` — exact, associative and commutative,
    so partials can be merged in any order (ring attention, chapter 07; split-K decode).
    Rows masked in both partials (``m = -inf``, ``l = 0``) give ``o = 0``.

    Returns:
        ``(o, m, l)`` of the union of the key sets.
    """
    m = torch.maximum(m1, m2)
    m_safe = torch.where(torch.isneginf(m), torch.zeros_like(m), m)
    w1 = l1 * torch.exp(m1 - m_safe)
    w2 = l2 * torch.exp(m2 - m_safe)
    l = w1 + w2
    denom = torch.where(l > 0, l, torch.ones_like(l))
    o = (w1[..., None] * o1.to(l.dtype) + w2[..., None] * o2.to(l.dtype)) / denom[..., None]
    return o.to(o1.dtype), m, l


def attention_hbm_accesses(N: int, d: int, M: int) -> dict:
    """HBM accesses (elements) of standard vs FlashAttention, from Dao et al. 2022
    (arXiv:2205.14135), Theorem 2 and Algorithms 0/1, for one head, sequence length N, head
    dimension d, on-chip memory M (elements).  Theorem 2 is stated for ``d ≤ M ≤ N·d``; outside
    that range it says nothing (``M > N·d`` holds all of Q, K, V on chip), so this raises there.

    Returns a dict:
        ``standard_theta = N·d + N²`` and ``flash_theta = N²·d²/M`` (Theorem 2, constants 1:
        an order of growth, not a count — below ``N = 4·M/d`` it falls under ``io_floor``);
        ``io_floor = 4·N·d`` (read Q, K, V and write O once: no exact attention does fewer);
        ``flash_theta_above_floor``: ``flash_theta >= io_floor``;
        ``standard_exact = 4·N·d + 4·N²`` (Algorithm 0: read Q, K; write S; read S; write P;
        read P, V; write O);
        ``flash_exact`` (Algorithm 1 as written: block sizes ``B_c = ⌈M/4d⌉``,
        ``B_r = min(B_c, d)``, ``T_c = ⌈N/B_c⌉`` outer passes; init writes ``N·d + 2N``, K and V
        read once ``2·N·d``, and per outer pass Q, O, ℓ, m read and O, ℓ, m written:
        ``T_c·(3·N·d + 4·N)``).

    Raises:
        ValueError: non-positive sizes, or ``M`` outside Theorem 2's range ``d ≤ M ≤ N·d``.
    """
    for f, val in (("N", N), ("d", d), ("M", M)):
        require_positive(f, val)
    if not d <= M <= N * d:
        raise ValueError(f"M={M} is outside Theorem 2's range d ≤ M ≤ N·d = {d}..{N * d} (N={N}, d={d}); "
                         "below d on-chip memory cannot hold one row, above N·d all of Q, K, V fit on chip")
    Bc = math.ceil(M / (4 * d))
    Tc = math.ceil(N / Bc)
    flash_theta = N * N * d * d / M
    return {
        "N": N, "d": d, "M": M,
        "standard_theta": N * d + N * N,
        "flash_theta": flash_theta,
        "io_floor": 4 * N * d,
        "flash_theta_above_floor": flash_theta >= 4 * N * d,
        "standard_exact": 4 * N * d + 4 * N * N,
        "flash_exact": (N * d + 2 * N) + 2 * N * d + Tc * (3 * N * d + 4 * N),
        "B_c": Bc, "B_r": min(Bc, d), "T_c": Tc,
    }


class _LiveTensorBytes(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the bytes of tensor storages created inside the mode that are alive at once."""

    def __init__(self):
        super().__init__()
        self.live = {}   # storage data_ptr -> [nbytes, live tensor objects referring to it]
        self.current = 0
        self.peak = 0

    def _release(self, key):
        entry = self.live.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            self.current -= entry[0]
            del self.live[key]

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {a.untyped_storage().data_ptr() for a in torch.utils._pytree.tree_leaves((args, kwargs))
                  if isinstance(a, torch.Tensor)}
        for t in torch.utils._pytree.tree_leaves(out):
            if not isinstance(t, torch.Tensor):
                continue
            st = t.untyped_storage()
            key = st.data_ptr()
            if key not in self.live:
                if key in inputs or st.nbytes() == 0:
                    continue                     # a view of a tensor made outside: not new memory
                self.live[key] = [st.nbytes(), 0]
                self.current += st.nbytes()
                self.peak = max(self.peak, self.current)
            self.live[key][1] += 1
            weakref.finalize(t, self._release, key)
        return out


def peak_memory_bytes(fn, dev: torch.device | str | None = None) -> int:
    """Measured peak of extra memory (bytes) that ``fn()`` allocates beyond what exists before.

    On CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``, minus the
    bytes allocated before the call.  On CPU (no allocator statistics in torch): every tensor
    storage created by an ATen operation inside ``fn`` is recorded when it is made and released
    when its last tensor object dies (a ``TorchDispatchMode``); the result is the largest sum
    alive at once.  Scratch buffers an ATen kernel frees internally are not seen on CPU.
    Run under ``torch.no_grad()`` (autograd would keep intermediates alive anyway).
    """
    dev = torch.device(dev) if dev is not None else None
    if dev is not None and dev.type == "cuda":
        torch.cuda.synchronize(dev)
        base = torch.cuda.memory_allocated(dev)
        torch.cuda.reset_peak_memory_stats(dev)
        with torch.no_grad():
            fn()
        torch.cuda.synchronize(dev)
        return int(torch.cuda.max_memory_allocated(dev) - base)
    mode = _LiveTensorBytes()
    with torch.no_grad(), mode:
        fn()
    return int(mode.peak)
