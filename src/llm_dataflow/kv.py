"""KV cache, the views and the measurement (chapter 06): the calculator's table and what the
cache buys in time.  The byte counts themselves are arithmetic in :mod:`llm_dataflow.core.kv`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from .core.config import ModelConfig, model_config, require_model_config
from .core.fit import memory_fit
from .core.formats import KV_DTYPES
from .core.kv import kv_bytes_per_token, kv_cache_bytes, state_bytes_per_sequence, state_dtype_for
from .core.units import GB, GiB, check_dtype, no_overflow, require_nonnegative, require_positive
from .measure import progress, time_calls, torch_threads

__all__ = ["kv_cache_report", "CacheSpeedup", "kv_cache_speedup"]


@no_overflow('context', 'batch')
def kv_cache_report(model: str | ModelConfig, context: int, batch: int = 1, kv_dtype: str = "bf16") -> dict:
    """A small table for the chapter-06 calculator widget (``ldf.calculator``).

    Returns a dict: attention kind, KV bytes per token, total KV bytes in B, GB (1e9) and GiB
    (2**30), and whether ``context`` exceeds ``max_position_embeddings`` (computed anyway); for a
    model with linear-attention layers (Qwen3-Next) also the fixed state each sequence holds,
    which the total includes; and what vLLM (0.21) sets aside per sequence, layer group by layer
    group (a sliding layer ``window − 1 + 8,192`` tokens and a block), with vLLM's maximum
    concurrency for ``context`` tokens per sequence on one H200 beside BF16 weights
    (:func:`~llm_dataflow.core.fit.memory_fit`, ``plan``'s convention; a fraction where the last
    sequence only partly fits).

    Raises:
        ValueError: ``model`` neither a preset name nor a ModelConfig, ``context`` not a
            non-negative integer, ``batch`` not a positive integer, unknown ``kv_dtype``
            (each message names the argument).
            Counts (``context``, ``batch``) so large that a result overflows a float: a
            ValueError naming them.
    """
    cfg = require_model_config(model_config(model) if isinstance(model, str) else model, "model")
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
    state = state_bytes_per_sequence(cfg, state_dtype_for(kv_dtype))
    return {
        "attention": cfg.attention_kind,
        "layer types": ", ".join(windows) + (f" (window {cfg.sliding_window:,})" if cfg.sliding_window else "")
        + (f" (chunk {cfg.attention_chunk_size:,})" if "chunked_attention" in windows else ""),
        "KV bytes per token (all layers)": kv_bytes_per_token(cfg, kv_dtype),
        **({"state bytes per sequence (linear attention)": state} if state else {}),
        "KV cache bytes": total,
        "KV cache GB (1e9 B)": round(total / GB, 3),
        "KV cache GiB (2^30 B)": round(total / GiB, 3),
        "beyond max_position_embeddings": beyond,
        **_engine_rows(cfg, context, kv_dtype),
    }


def _engine_rows(cfg: ModelConfig, context: int, kv_dtype: str) -> dict:
    """vLLM's tokens per sequence by layer group and its maximum concurrency on one H200 (``plan``'s
    numbers): ``"32 full-attention layers × 1,024 tokens"``; the concurrency is vLLM's "Maximum
    concurrency for N tokens per request" (a fraction where the last sequence only partly fits)."""
    if not context:
        return {"vLLM sets aside per sequence": "no context"}
    fit = memory_fit(cfg, "H200", "bf16", kv_dtype=kv_dtype, context=context, allow_long_context=True)
    held = "; ".join(f"{g['layers']} {_GROUP_NAMES.get(g['kind'], g['kind'])} layers × "
                     f"{g['tokens_per_sequence']:,} tokens"
                     for g in fit.layout.groups if g["kind"] != "linear_attention")
    conc = fit.max_concurrency
    return {"vLLM sets aside per sequence": held,
            "maximum concurrency on one H200 (vLLM, BF16 weights)": "weights do not fit" if not fit.kv_tokens
            else round(conc, 2)}


#: How the chapter-06 calculator names a layer group (``cfg.layer_type``'s kinds).
_GROUP_NAMES = {"full_attention": "full-attention", "sliding_attention": "sliding-window",
                "chunked_attention": "chunked-attention"}


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
