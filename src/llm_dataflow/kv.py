"""KV-cache sizing: exact bytes for every attention variant (chapter 06).

Decode attends each new token to the keys and values of every earlier token; serving keeps
them in the **KV cache** instead of recomputing them.  Its size, per layer and token, is

* MHA / GQA / MQA: ``2 (K and V) × H_kv × d_h × bytes`` (Vaswani et al. 2017; GQA, Ainslie et
  al. 2023, arXiv:2305.13245; MQA, Shazeer 2019, arXiv:1911.02150).
* MLA (DeepSeek-V2, arXiv:2405.04434 §2.1.2; V3, arXiv:2412.19437): the compressed latent
  ``c_KV`` (``kv_lora_rank`` elements) plus the decoupled RoPE key ``k_R`` (``qk_rope_head_dim``
  elements, shared by all heads) — **no factor 2**: K and V are both re-expanded from the latent.
* Sliding-window layers hold ``min(seq_len, sliding_window)`` tokens (Mistral 7B,
  arXiv:2310.06825, rolling buffer); models that interleave local and global layers (Gemma 2,
  arXiv:2408.00118; ``cfg.layer_type(i)``) are summed layer by layer.
* Quantised KV (``"int8"``, ``"fp8"``/``"fp8_e4m3"``/``"fp8_e5m2"``, ``"int4"``) stores its scales
  too.  **Scale granularity chosen here: one scale per stored vector** — per token, per layer,
  per KV head, separately for K and for V (for MLA: one for the latent, one for the RoPE key),
  in ``scale_dtype`` (default FP16, 2 bytes).  For d_h = 128 in INT8 that is 2 bytes per 128,
  a 1.6 % overhead.  It is the finest common choice (KIVI, arXiv:2402.02750, quantises V per
  token); per-tensor scales (vLLM's FP8 ``k_scale``/``v_scale``, one per layer) cost
  ``2 × L × scale bytes`` in total and are listed by :func:`kv_scale_bytes_per_tensor`.

All byte counts are ``int`` (bytes; GB = 1e9, GiB = 2**30, never mixed).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .accounting import _no_overflow
from .config import ModelConfig, model_config
from .units import GB, GiB, check_dtype, dtype_bits, require_nonnegative, require_positive

__all__ = [
    "KV_DTYPES", "KV_QUANT_DTYPES", "kv_layer_bytes_per_token", "kv_bytes_per_token",
    "kv_tokens_held", "kv_cache_bytes", "kv_scale_bytes_per_tensor", "kv_cache_report",
    "CacheSpeedup", "kv_cache_speedup",
]

#: dtypes the KV cache may be stored in.
KV_DTYPES = ("fp32", "fp16", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2", "int8", "int4")
#: the ones that need scales (values are stored as ``x / scale``).
KV_QUANT_DTYPES = ("fp8", "fp8_e4m3", "fp8_e5m2", "int8", "int4")
_SCALE_DTYPES = ("fp32", "fp16", "bf16")


def _vector_bytes(n: int, dtype: str, scale_dtype: str) -> int:
    """Bytes of one stored vector of ``n`` elements (+ its scale when ``dtype`` is quantised)."""
    nbytes = math.ceil(n * dtype_bits(dtype) / 8)
    if dtype in KV_QUANT_DTYPES:
        nbytes += dtype_bits(scale_dtype) // 8
    return nbytes


def _check_cfg(cfg, field: str = "cfg") -> ModelConfig:
    if not isinstance(cfg, ModelConfig):
        raise ValueError(f"{field}={cfg!r} is not allowed; it must be a ModelConfig (see ldf.model_config)")
    return cfg


def _check_layer(cfg: ModelConfig, layer) -> int:
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < cfg.n_layers:
        raise ValueError(f"layer={layer!r} is not allowed; allowed: an integer in 0..{cfg.n_layers - 1}")
    return layer


def _check(cfg: ModelConfig, dtype: str, scale_dtype: str) -> None:
    _check_cfg(cfg)
    check_dtype(dtype, KV_DTYPES, "dtype")
    check_dtype(scale_dtype, _SCALE_DTYPES, "scale_dtype")


def kv_layer_bytes_per_token(cfg: ModelConfig, layer: int, dtype: str = "bf16", *,
                             scale_dtype: str = "fp16") -> int:
    """Bytes one token adds to layer ``layer``'s cache (int).

    MHA/GQA/MQA: ``2 × H_kv × (d_h × bytes [+ scale])``.  MLA: ``kv_lora_rank × bytes
    [+ scale] + qk_rope_head_dim × bytes [+ scale]`` (DeepSeek-V2 §2.1.2: cache ``c_KV`` and
    ``k_R``).  Every layer costs the same per token; windows change only how many tokens a layer
    holds (:func:`kv_tokens_held`).

    Raises:
        ValueError: ``cfg`` not a ModelConfig, ``layer`` not an integer in ``0..n_layers-1``,
            unknown ``dtype``/``scale_dtype``.
    """
    _check(cfg, dtype, scale_dtype)
    _check_layer(cfg, layer)
    if cfg.is_mla:
        return _vector_bytes(cfg.kv_lora_rank, dtype, scale_dtype) + _vector_bytes(cfg.qk_rope_head_dim, dtype, scale_dtype)
    return 2 * cfg.n_kv_heads * _vector_bytes(cfg.head_dim, dtype, scale_dtype)


def kv_bytes_per_token(cfg: ModelConfig, dtype: str = "bf16", *, scale_dtype: str = "fp16") -> int:
    """Bytes one token adds to the KV cache of one sequence, summed over all L layers (int).

    Dense attention: ``L × 2 × H_kv × d_h × bytes`` (e.g. Llama-3-8B in BF16:
    ``32 × 2 × 8 × 128 × 2 = 131,072`` B = 128 KiB).  MLA: ``L × (kv_lora_rank +
    qk_rope_head_dim) × bytes`` (DeepSeek-V3 in BF16: ``61 × 576 × 2 = 70,272`` B).  Quantised
    dtypes add one ``scale_dtype`` scale per stored vector (module docstring).

    This is the cost of a token *while* every layer still holds it; sliding-window layers stop
    growing after ``sliding_window`` tokens — use :func:`kv_cache_bytes` for a given length.

    Raises:
        ValueError: unknown ``dtype`` (allowed: :data:`KV_DTYPES`) or ``scale_dtype``.
    """
    _check(cfg, dtype, scale_dtype)
    return sum(kv_layer_bytes_per_token(cfg, i, dtype, scale_dtype=scale_dtype) for i in range(cfg.n_layers))


def kv_tokens_held(cfg: ModelConfig, layer: int, seq_len: int) -> int:
    """Tokens layer ``layer`` keeps after ``seq_len`` tokens: ``seq_len`` for full attention,
    ``min(seq_len, sliding_window)`` for a sliding-window layer (a window larger than the
    context is allowed: the layer then holds the whole context).

    Raises:
        ValueError: ``cfg`` not a ModelConfig, ``seq_len`` not a non-negative integer, ``layer``
            not an integer in ``0..n_layers-1``.
    """
    _check_cfg(cfg)
    require_nonnegative("seq_len", seq_len)
    _check_layer(cfg, layer)
    if cfg.layer_type(layer) == "sliding_attention":
        return min(seq_len, cfg.sliding_window)
    return seq_len


def kv_cache_bytes(cfg: ModelConfig, seq_len: int, batch: int = 1, dtype: str = "bf16", *,
                   scale_dtype: str = "fp16") -> int:
    """Bytes of the KV cache of ``batch`` sequences of ``seq_len`` tokens each (int).

    ``batch × Σ_layers kv_tokens_held(layer, seq_len) × kv_layer_bytes_per_token(layer)``.
    The seed example: 32 layers, 32,768 tokens, 8 KV heads, d_h = 128, BF16 →
    ``32 × 32768 × 2 × 8 × 128 × 2 = 4,294,967,296`` B = exactly 4 GiB per sequence.

    A ``seq_len`` beyond ``cfg.max_position_embeddings`` is computed, not rejected (the model
    was not trained for it; the bytes are still what it would take).  ``seq_len = 0`` gives 0.

    Raises:
        ValueError: ``seq_len < 0``, ``batch < 1``, unknown ``dtype``/``scale_dtype``.
    """
    _check(cfg, dtype, scale_dtype)
    require_nonnegative("seq_len", seq_len)
    require_positive("batch", batch)
    per_seq = sum(kv_tokens_held(cfg, i, seq_len) * kv_layer_bytes_per_token(cfg, i, dtype, scale_dtype=scale_dtype)
                  for i in range(cfg.n_layers))
    return batch * per_seq


def kv_scale_bytes_per_tensor(cfg: ModelConfig, scale_dtype: str = "fp32") -> int:
    """Bytes of per-tensor KV scales (one for K and one for V per layer, as vLLM's FP8 KV cache
    stores ``k_scale``/``v_scale``): ``2 × L × scale bytes`` — independent of length and batch.
    Shown for comparison with the per-vector scales :func:`kv_cache_bytes` counts.

    Raises:
        ValueError: ``cfg`` not a ModelConfig, unknown ``scale_dtype``.
    """
    _check_cfg(cfg)
    check_dtype(scale_dtype, _SCALE_DTYPES, "scale_dtype")
    return 2 * cfg.n_layers * dtype_bits(scale_dtype) // 8


@_no_overflow('context', 'batch')
def kv_cache_report(model: str | ModelConfig, context: int, batch: int = 1, kv_dtype: str = "bf16") -> dict:
    """A small table for the chapter-06 calculator widget (``ldf.calculator``).

    Returns a dict: attention kind, KV bytes per token, total KV bytes in B, GB (1e9) and GiB
    (2**30), and whether ``context`` exceeds ``max_position_embeddings`` (computed anyway).

    Raises:
        ValueError: ``model`` neither a preset name nor a ModelConfig, ``context`` not a
            non-negative integer, ``batch`` not a positive integer, unknown ``kv_dtype``
            (each message names the argument).
            Counts (``context``, ``batch``) so large that a result overflows a float: a
            ValueError naming them.
    """
    cfg = _check_cfg(model_config(model) if isinstance(model, str) else model, "model")
    require_nonnegative("context", context)
    require_positive("batch", batch)
    check_dtype(kv_dtype, KV_DTYPES, "kv_dtype")
    total = kv_cache_bytes(cfg, context, batch, kv_dtype)
    mpe = cfg.max_position_embeddings
    if mpe is None:
        beyond = "unknown (no max_position_embeddings)"
    elif context > mpe:
        beyond = f"YES: {context:,} > max_position_embeddings {mpe:,} (computed anyway)"
    else:
        beyond = f"no ({context:,} ≤ {mpe:,})"
    windows = sorted({cfg.layer_type(i) for i in range(cfg.n_layers)})
    return {
        "attention": cfg.attention_kind,
        "layer types": ", ".join(windows) + (f" (window {cfg.sliding_window:,})" if cfg.sliding_window else ""),
        "KV bytes per token (all layers)": kv_bytes_per_token(cfg, kv_dtype),
        "KV cache bytes": total,
        "KV cache GB (1e9 B)": round(total / GB, 3),
        "KV cache GiB (2^30 B)": round(total / GiB, 3),
        "beyond max_position_embeddings": beyond,
    }


# --------------------------------------------------------------------------------------------
# measuring what the cache buys (chapter 06): one decode step with the cache vs recomputing
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CacheSpeedup:
    """One measured position of :func:`kv_cache_speedup`.

    Attributes:
        position: ``t``, the tokens before the step (0-based position of the new token).
        cached_s: best (minimum) seconds of one decode step with the KV cache (a one-token
            forward whose attention reads the K/V of ``t + 1`` tokens per layer).
        recompute_s: best seconds of one forward over all ``t + 1`` tokens (no cache; logits of
            the last position only).
        speedup: ``recompute_s / cached_s``.
        rounds: rounds timed at this position (one call of each per round).
    """

    position: int
    cached_s: float
    recompute_s: float
    speedup: float
    rounds: int


def kv_cache_speedup(model, positions, *, min_rounds: int = 21, max_rounds: int = 201,
                     time_per_position_s: float = 0.3, threads: int | None = 1, seed: int = 0,
                     show_progress: bool = True) -> list[CacheSpeedup]:
    """Time one decode step with the KV cache against recomputing the history, at each position.

    For each ``t`` in ``positions``: prefill ``t`` seeded random tokens into a fresh cache, then
    time, in rounds, the step that appends token ``t`` (rolling the cache length back after each,
    so every round writes the same slot) and a cache-free forward over all ``t + 1`` tokens, in
    alternating order, after 3 warm-up rounds.  Rounds continue until ``time_per_position_s`` has
    passed, at least ``min_rounds`` and at most ``max_rounds``: short steps (small ``t``) get many
    rounds, because there one neighbour's burst is as long as the step itself.

    Each call is timed by :func:`llm_dataflow.measure.time_calls` — on one CPU thread, by that
    thread's CPU time — and each time is the *best* of its rounds, not the median: on a shared
    machine other processes only ever add time, and when more processes than cores are runnable
    the scheduler preempts a 10 ms forward far more often than a 1 ms step, which biases even a
    median of paired ratios (seen on a 2-core VM at load 10: wall-clock medians of 2 ms and 12 ms
    for the same forward in two runs).  The best of many rounds is what the computation itself
    costs (as ``generate.time_prefill``).

    Args:
        model: an ``ldf.Decoder`` (``model.cfg``, ``new_cache``, ``forward(ids, cache, last_only=)``).
        positions: positions ``t`` (ints ≥ 1, below ``model.cfg.max_position_embeddings``).
        threads: torch CPU threads while timing (restored afterwards); ``None`` keeps the setting.
            One thread keeps thread scheduling on a shared machine out of the ratio.
        show_progress: a progress bar over the positions (``measure.progress``).

    Returns:
        One :class:`CacheSpeedup` per position, in the order given.

    Raises:
        ValueError: a position < 1 or ≥ ``max_position_embeddings``; ``min_rounds`` < 1,
            ``max_rounds`` < ``min_rounds``, negative ``time_per_position_s``, ``threads`` < 1.
    """
    import time

    import torch

    from .measure import progress, torch_threads
    from .measure import time_calls

    cfg = model.cfg
    positions = list(positions)
    limit = cfg.max_position_embeddings
    for t in positions:
        if not isinstance(t, int) or t < 1 or (limit is not None and t >= limit):
            raise ValueError(f"positions contains {t!r}; each must be an integer >= 1 and < "
                             f"max_position_embeddings={limit}")
    require_positive("min_rounds", min_rounds)
    if not isinstance(max_rounds, int) or max_rounds < min_rounds:
        raise ValueError(f"max_rounds={max_rounds!r} is not allowed; it must be an integer >= min_rounds={min_rounds}")
    if not isinstance(time_per_position_s, (int, float)) or not time_per_position_s >= 0:
        raise ValueError(f"time_per_position_s={time_per_position_s!r} is not allowed; it must be >= 0 (s)")
    if threads is not None:
        require_positive("threads", threads)
    dev = next(model.parameters()).device
    g = torch.Generator().manual_seed(seed)
    history = torch.randint(0, cfg.vocab_size, (1, max(positions, default=0) + 1), generator=g).to(dev)

    def timed(fn):
        return time_calls(fn, 1, 0, dev=dev)[0]

    out: list[CacheSpeedup] = []
    ctx = torch_threads(threads) if threads is not None else torch_threads(torch.get_num_threads())
    with ctx, torch.inference_mode():
        for t in (progress(positions, desc="decode step timing") if show_progress else positions):
            cache = model.new_cache(1, t + 1)
            model(history[:, :t], cache)                  # prefill: positions 0 … t-1 cached
            nxt, full = history[:, t:t + 1], history[:, :t + 1]

            def cached(cache=cache, nxt=nxt):
                model(nxt, cache)                         # writes position t, reads K/V of t + 1 tokens
                cache.lengths.sub_(1)                     # roll back: the next round writes the same slot

            def recompute(full=full):
                model(full, last_only=True)               # all t + 1 tokens, no cache

            for _ in range(3):
                cached()
                recompute()
            tc, tr = [], []
            start = time.perf_counter()
            while len(tc) < max_rounds and (len(tc) < min_rounds or time.perf_counter() - start < time_per_position_s):
                if len(tc) % 2:
                    tr.append(timed(recompute))
                    tc.append(timed(cached))
                else:
                    tc.append(timed(cached))
                    tr.append(timed(recompute))
            out.append(CacheSpeedup(t, min(tc), min(tr), min(tr) / min(tc), len(tc)))
    return out
