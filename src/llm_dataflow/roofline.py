"""Prefill vs decode on the roofline: analytic lower bounds, the reader's measured roofline, and
a batch-1 greedy decode loop that runs near the memory-bandwidth limit.

Three parts (chapter 05):

* **Counting** — FLOPs and bytes of one decode step (:func:`decode_step_flops`,
  :func:`decode_step_bytes`) and of one prefill (:func:`prefill_flops`, :func:`prefill_bytes`),
  from the checkpoint's tensor list (:func:`llm_dataflow.config.tensor_specs`) and the KV-cache
  formula of chapter 06 (:func:`llm_dataflow.kv.kv_cache_bytes`).
* **Bounds** — the roofline model (Williams, Waterman & Patterson, "Roofline", CACM 2009): a step
  can finish no sooner than ``max(FLOPs / peak FLOP/s, bytes / memory bandwidth)``
  (:func:`decode_step_lower_bound`, :func:`prefill_lower_bound`, the companions
  :func:`decode_step_bounds` / :func:`prefill_bounds` that return both terms and which binds, and
  :func:`critical_batch`).
* **Measurement** — STREAM-like copy / triad bandwidth (McCalpin, STREAM benchmark: copy moves
  2 arrays, triad 3) and matmul FLOP/s through torch (:func:`measure_roofline`), the book's own
  greedy decode loop (:func:`greedy_decode`, :func:`decode_bandwidth`) and a Hugging Face
  ``transformers`` peer on the same weights (:func:`hf_greedy_decode`).

Hardware arguments ``hw`` accept a preset name (``"H100-SXM"``), a
:class:`~llm_dataflow.hardware.HardwareSpec`, or a :class:`MeasuredRoofline` — anything with an
``hbm_bandwidth`` attribute (B/s) and a ``flops(dtype)`` method (FLOP/s).
"""
from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .config import ModelConfig, model_config, tensor_specs
from .hardware import HardwareSpec, hardware
from .units import GB, MiB, check_dtype, dtype_bits, require_nonnegative, require_positive

__all__ = [
    # counting
    "decode_weight_bytes", "decode_step_flops", "decode_step_bytes", "prefill_flops", "prefill_bytes",
    "matmul_params", "attention_flops_per_token",
    # bounds
    "StepBounds", "decode_step_bounds", "prefill_bounds", "decode_step_lower_bound",
    "prefill_lower_bound", "critical_batch", "decode_calculator", "batch_calculator",
    # measured roofline
    "MeasuredRoofline", "stream_bandwidth", "gemv_bandwidth", "matmul_flops", "cpu_supports_bf16", "measure_roofline",
    # decode loop
    "DecodeRun", "greedy_decode", "DecodeBandwidth", "decode_bandwidth", "hf_peer_model", "hf_greedy_decode",
    "time_prefill", "time_decode_step",
]

_EMBEDDING_MODES = ("table", "rows")


# --------------------------------------------------------------------------------------------
# argument helpers
# --------------------------------------------------------------------------------------------
def _cfg(cfg):
    """A ModelConfig, a preset name, or a bare parameter count (int/float > 0)."""
    if isinstance(cfg, ModelConfig):
        return cfg
    if isinstance(cfg, str):
        return model_config(cfg)
    if isinstance(cfg, (int, float)) and not isinstance(cfg, bool):
        require_positive("cfg (parameter count)", cfg, integer=False)
        return cfg
    raise ValueError(f"cfg={cfg!r} is not allowed; give a ModelConfig, a preset name or a parameter count")


def _hw(hw) -> "HardwareSpec | MeasuredRoofline":
    if isinstance(hw, str):
        return hardware(hw)
    if hasattr(hw, "hbm_bandwidth") and hasattr(hw, "flops"):
        return hw
    raise ValueError(f"hw={hw!r} is not allowed; give a hardware preset name, a HardwareSpec or a "
                     "MeasuredRoofline")


def _embedding_mode(embedding: str) -> str:
    if embedding not in _EMBEDDING_MODES:
        raise ValueError(f"embedding={embedding!r} is not allowed; allowed: {', '.join(_EMBEDDING_MODES)}")
    return embedding


def _spec_bytes(numel: int, bits: int) -> int:
    return math.ceil(numel * bits / 8)


def _kv():
    """Chapter 06's KV formulas (one formula, one place)."""
    from . import kv
    return kv


def _kv_bytes(cfg: ModelConfig, batch: int, tokens: int, dtype: str) -> int:
    """Bytes of the KV cache holding ``tokens`` positions for ``batch`` sequences (windows and
    MLA handled by :func:`llm_dataflow.kv.kv_cache_bytes`, which is ``batch ×`` one sequence's)."""
    if tokens == 0:
        return 0
    return batch * _kv_seq_bytes(cfg, tokens, dtype)


@functools.lru_cache(maxsize=4096)
def _kv_seq_bytes(cfg: ModelConfig, tokens: int, dtype: str) -> int:
    return int(_kv().kv_cache_bytes(cfg, seq_len=tokens, batch=1, dtype=dtype))


@functools.lru_cache(maxsize=1024)
def _kv_token_bytes(cfg: ModelConfig, dtype: str) -> int:
    """Bytes one new token adds to the KV cache, summed over layers (chapter 06's formula)."""
    return int(_kv().kv_bytes_per_token(cfg, dtype=dtype))


# --------------------------------------------------------------------------------------------
# counting: parameters, FLOPs, bytes
# --------------------------------------------------------------------------------------------
def matmul_params(cfg, *, active: bool = True) -> int:
    """Weights that take part in a matrix multiply for one token (multiply–adds per token).

    Counts every linear weight of :func:`~llm_dataflow.config.tensor_specs` (attention q/k/v/o,
    MLP, router, experts, ``lm_head``; the embedding table too when it is tied to the output
    layer).  The input embedding is a gather (no FLOPs) and is excluded; norms and biases are
    element-wise and excluded.  With ``active=True`` an MoE counts only the
    ``n_experts_per_token`` routed experts a token uses (plus shared experts).

    ``cfg`` may also be a bare parameter count (int): then every parameter is a matmul weight.

    Raises:
        ValueError: bad ``cfg``.
    """
    cfg = _cfg(cfg)
    if not isinstance(cfg, ModelConfig):
        return int(cfg)
    return _matmul_params(cfg, active)


@functools.lru_cache(maxsize=256)
def _matmul_params(cfg: ModelConfig, active: bool) -> int:
    n = 0
    for t in tensor_specs(cfg):
        if t.in_features is None:
            continue
        if active and t.role == "expert" and t.expert >= cfg.n_experts_per_token:
            continue
        n += t.numel
    if cfg.tie_embeddings:
        n += cfg.vocab_size * cfg.d_model  # the tied table is the lm_head matmul
    return n


def _attn_dims(cfg: ModelConfig) -> tuple[int, int]:
    """(d_qk, d_v) per head: head_dim for both, or MLA's (nope+rope, v_head_dim)."""
    if cfg.is_mla:
        return cfg.qk_nope_head_dim + cfg.qk_rope_head_dim, cfg.v_head_dim
    return cfg.head_dim, cfg.head_dim


def attention_flops_per_token(cfg: ModelConfig, attended: int) -> int:
    """FLOPs of the attention *score and mix* matmuls for one query token that attends to
    ``attended`` key positions in every full-attention layer (sliding layers attend to
    ``min(attended, sliding_window)``).

    Per layer: ``QKᵀ`` is ``2·H·d_qk·S`` and ``P·V`` is ``2·H·d_v·S`` FLOPs (S = attended keys;
    d_qk = d_v = d_h, or MLA's un-absorbed head sizes).  Softmax is not counted.  Source: the
    standard count (Kaplan et al. 2020, arXiv:2001.08361, Table 1 "Attention: QK logits /
    softmax over V"), written per layer.

    Raises:
        ValueError: ``attended`` negative.
    """
    require_nonnegative("attended", attended)
    d_qk, d_v = _attn_dims(cfg)
    total = 0
    for i in range(cfg.n_layers):
        s = attended
        if cfg.layer_type(i) == "sliding_attention":
            s = min(s, cfg.sliding_window)
        total += 2 * cfg.n_heads * (d_qk + d_v) * s
    return total


def _causal_attention_flops(cfg: ModelConfig, prompt_len: int) -> int:
    """Σ over query positions t = 1..T of attention FLOPs at t attended keys (the causal half;
    a sliding layer attends to min(t, W))."""
    d_qk, d_v = _attn_dims(cfg)
    T = prompt_len
    total = 0
    for i in range(cfg.n_layers):
        if cfg.layer_type(i) == "sliding_attention" and cfg.sliding_window < T:
            w = cfg.sliding_window
            keys = w * (w + 1) // 2 + (T - w) * w  # Σ_t min(t, W)
        else:
            keys = T * (T + 1) // 2                # Σ_t t
        total += 2 * cfg.n_heads * (d_qk + d_v) * keys
    return total


def decode_step_flops(cfg, batch: int = 1, context_len: int = 0) -> int:
    """FLOPs of one decode step: ``batch`` sequences each add one token after ``context_len``
    cached tokens.

    ``B · (2 · matmul_params(active) + attention_flops_per_token(cfg, context_len + 1))``: the
    new token attends to the ``context_len`` cached keys and to itself.  For a bare parameter
    count ``N``: ``2 · N · B`` (no attention: the shape is unknown, so ``context_len`` must be 0).

    Raises:
        ValueError: ``batch`` < 1, ``context_len`` < 0, or context with a bare parameter count.
    """
    cfg = _cfg(cfg)
    require_positive("batch", batch)
    require_nonnegative("context_len", context_len)
    if not isinstance(cfg, ModelConfig):
        _no_context(context_len)
        return 2 * int(cfg) * batch
    return batch * (2 * matmul_params(cfg) + attention_flops_per_token(cfg, context_len + 1))


def _no_context(context_len):
    if context_len:
        raise ValueError(f"context_len={context_len} needs a ModelConfig (its KV shape); with a bare "
                         "parameter count only context_len=0 (weights only) is allowed")


def _expected_distinct_experts(cfg: ModelConfig, tokens: int) -> float:
    """Expected number of distinct routed experts ``tokens`` tokens touch in one MoE layer when
    each picks ``k`` of ``E`` uniformly: ``E · (1 − (1 − k/E)^tokens)``."""
    E, k = cfg.n_routed_experts, cfg.n_experts_per_token
    return E * (1.0 - (1.0 - k / E) ** tokens)


def decode_weight_bytes(cfg, batch: int = 1, dtype: str = "bf16", *, embedding: str = "table",
                        tokens: int | None = None) -> float:
    """Weight bytes read from memory by one forward pass over ``tokens`` tokens (default:
    ``batch``, one decode step), each weight read once however many tokens use it.

    * dense weights: all of them, stored in ``dtype`` (``ceil(numel · bits / 8)`` per tensor);
    * MoE routed experts: the expected number of distinct experts the tokens touch per layer,
      ``E · (1 − (1 − k/E)^tokens)`` (independent uniform routing — real routers are skewed and
      touch fewer); at one token exactly k;
    * the input embedding: ``embedding="table"`` counts the whole table (the convention behind
      "7e9 × 2 B = 14 GB per step" and gpt-fast's "model bytes"); ``embedding="rows"`` counts
      only the ``tokens`` gathered rows — the strict minimum (a tied table is read whole anyway,
      by the ``lm_head``).

    For a bare parameter count ``N``: ``N · bytes(dtype)``.

    Returns:
        bytes (float, because the MoE expectation is fractional).

    Raises:
        ValueError: bad ``cfg``, ``batch``, ``dtype`` or ``embedding``.
    """
    cfg = _cfg(cfg)
    require_positive("batch", batch)
    check_dtype(dtype)
    _embedding_mode(embedding)
    bits = dtype_bits(dtype)
    tokens = batch if tokens is None else require_positive("tokens", tokens)
    if not isinstance(cfg, ModelConfig):
        return float(_spec_bytes(int(cfg), bits)) if float(cfg).is_integer() else cfg * bits / 8
    other, table, experts = _weight_parts(cfg, bits)
    total = float(other + table)
    if embedding == "rows" and not cfg.tie_embeddings:
        total += _spec_bytes(min(tokens, cfg.vocab_size) * cfg.d_model, bits) - table
    if experts:
        total += experts * _expected_distinct_experts(cfg, tokens)
    return total


@functools.lru_cache(maxsize=256)
def _weight_parts(cfg: ModelConfig, bits: int) -> tuple[int, int, int]:
    """(bytes of all non-expert tensors except the input embedding, input embedding bytes,
    bytes of one routed expert summed over the MoE layers) at ``bits`` per element."""
    other = table = experts = 0
    for t in tensor_specs(cfg):
        b = _spec_bytes(t.numel, bits)
        if t.role == "expert":
            experts += b if t.expert == 0 else 0
        elif t.role == "embedding":
            table += b
        else:
            other += b
    return other, table, experts


def decode_step_bytes(cfg, batch: int = 1, context_len: int = 0, dtype: str = "bf16", *,
                      kv_dtype: str | None = None, embedding: str = "table") -> float:
    """Bytes one decode step must move between memory and the chip (lower bound).

    Terms (and only these):

    1. weights, read once for the whole batch — :func:`decode_weight_bytes`;
    2. the KV cache read: every sequence's ``context_len`` cached positions in every layer
       (``kv_cache_bytes(cfg, seq_len=context_len, batch=batch, dtype=kv_dtype)``, chapter 06; windows and MLA
       included there);
    3. the KV write of the new token: ``batch · kv_bytes_per_token(cfg, kv_dtype)``.

    Not included: activations (a fused kernel keeps them on chip), logits, the token ids.
    ``kv_dtype`` defaults to ``dtype``.

    Raises:
        ValueError: ``batch`` < 1, ``context_len`` < 0, unknown dtype, context with a bare count.
    """
    cfg = _cfg(cfg)
    require_positive("batch", batch)
    require_nonnegative("context_len", context_len)
    check_dtype(dtype)
    kv_dtype = check_dtype(kv_dtype or dtype, field="kv_dtype")
    w = decode_weight_bytes(cfg, batch, dtype, embedding=embedding)
    if not isinstance(cfg, ModelConfig):
        _no_context(context_len)
        return w
    return w + _kv_bytes(cfg, batch, context_len, kv_dtype) + batch * _kv_token_bytes(cfg, kv_dtype)


def prefill_flops(cfg, prompt_len: int, batch: int = 1, *, all_logits: bool = False) -> int:
    """FLOPs of a prefill of ``batch`` prompts of ``prompt_len`` tokens from an empty cache.

    ``B · (2 · matmul_params_without_lm_head · T + 2 · V·D · T_out + causal attention)`` where
    ``T_out`` = 1 (only the last position's logits are needed to pick the next token, as
    serving engines do) or T with ``all_logits=True`` (what a plain ``forward`` returning
    logits ``[B, T, V]`` computes).  Causal attention counts the lower triangle: query t
    attends to t keys (``min(t, W)`` in a sliding layer) — a kernel that skips masked tiles
    does this much; a naive one computes the full T² and masks.  For a bare count ``N``:
    ``2 · N · T · B``.

    Raises:
        ValueError: ``prompt_len`` or ``batch`` < 1.
    """
    cfg = _cfg(cfg)
    require_positive("prompt_len", prompt_len)
    require_positive("batch", batch)
    if not isinstance(cfg, ModelConfig):
        return 2 * int(cfg) * prompt_len * batch
    head = cfg.vocab_size * cfg.d_model
    body = matmul_params(cfg) - head
    t_out = prompt_len if all_logits else 1
    return batch * (2 * body * prompt_len + 2 * head * t_out + _causal_attention_flops(cfg, prompt_len))


def prefill_bytes(cfg, prompt_len: int, batch: int = 1, dtype: str = "bf16", *,
                  kv_dtype: str | None = None, embedding: str = "table") -> float:
    """Bytes a prefill must move (lower bound): the weights read once
    (:func:`decode_weight_bytes` over ``B·T`` tokens — every MoE expert the tokens touch) plus
    the KV cache written for ``B·T`` positions (``kv_cache_bytes(cfg, seq_len=T, batch=B, dtype=kv_dtype)``).
    Not included: activations, attention scores (a flash kernel keeps them on chip), logits.

    Raises:
        ValueError: ``prompt_len`` or ``batch`` < 1, unknown dtype.
    """
    cfg = _cfg(cfg)
    require_positive("prompt_len", prompt_len)
    require_positive("batch", batch)
    check_dtype(dtype)
    kv_dtype = check_dtype(kv_dtype or dtype, field="kv_dtype")
    w = decode_weight_bytes(cfg, batch, dtype, embedding=embedding, tokens=batch * prompt_len)
    if not isinstance(cfg, ModelConfig):
        return w
    return w + _kv_bytes(cfg, batch, prompt_len, kv_dtype)


# --------------------------------------------------------------------------------------------
# bounds
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StepBounds:
    """Both roofline terms of one step and which one binds.

    Attributes:
        phase: ``"decode"`` or ``"prefill"``.
        flops: FLOPs of the step.
        nbytes: bytes moved (see the counting function for the terms).
        compute_s: ``flops / peak FLOP/s`` (s).
        memory_s: ``nbytes / bandwidth`` (s).
        tokens: tokens produced (decode: B) or processed (prefill: B·T).
        batch: B.
        peak_flops: FLOP/s used.
        bandwidth: B/s used.
    """

    phase: str
    flops: float
    nbytes: float
    compute_s: float
    memory_s: float
    tokens: int
    batch: int
    peak_flops: float
    bandwidth: float

    @property
    def time_s(self) -> float:
        """The lower bound: ``max(compute_s, memory_s)`` (s)."""
        return max(self.compute_s, self.memory_s)

    @property
    def bound(self) -> str:
        """``"memory"`` or ``"compute"`` — the larger term (ties go to memory)."""
        return "compute" if self.compute_s > self.memory_s else "memory"

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOP/B."""
        return self.flops / self.nbytes

    @property
    def bytes_per_token(self) -> float:
        """``nbytes / tokens`` (B)."""
        return self.nbytes / self.tokens

    @property
    def tokens_per_s(self) -> float:
        """Upper bound on throughput, ``tokens / time_s`` (token/s, all sequences together)."""
        return self.tokens / self.time_s


def _peak(hw, dtype: str, compute_dtype: str | None) -> float:
    cd = compute_dtype or dtype
    check_dtype(cd, field="compute_dtype")
    return hw.flops(cd)


def decode_step_bounds(cfg, hw, batch: int = 1, context_len: int = 0, dtype: str = "bf16", *,
                       compute_dtype: str | None = None, kv_dtype: str | None = None,
                       embedding: str = "table") -> StepBounds:
    """Both terms of the decode-step lower bound and which binds.

    ``compute_s = decode_step_flops / hw.flops(compute_dtype)``; ``memory_s =
    decode_step_bytes / hw.hbm_bandwidth``.  Byte terms: weights once per step + every
    sequence's KV read + the new tokens' KV write; FLOP terms: 2 per matmul weight per token +
    attention over ``context_len + 1`` keys.  ``compute_dtype`` defaults to ``dtype`` (give
    ``"bf16"`` for weight-only quantised ``"int4"`` weights).

    Raises:
        ValueError: ``batch`` < 1, ``context_len`` < 0, unknown hardware/dtype, or a dtype with no
            peak FLOP/s on ``hw``.
    """
    hw = _hw(hw)
    flops = decode_step_flops(cfg, batch, context_len)
    nbytes = decode_step_bytes(cfg, batch, context_len, dtype, kv_dtype=kv_dtype, embedding=embedding)
    peak = _peak(hw, dtype, compute_dtype)
    return StepBounds("decode", flops, nbytes, flops / peak, nbytes / hw.hbm_bandwidth, batch, batch,
                      peak, hw.hbm_bandwidth)


def prefill_bounds(cfg, hw, prompt_len: int, batch: int = 1, dtype: str = "bf16", *,
                   compute_dtype: str | None = None, kv_dtype: str | None = None,
                   embedding: str = "table", all_logits: bool = False) -> StepBounds:
    """Both terms of the prefill lower bound and which binds.

    ``compute_s = prefill_flops / hw.flops(compute_dtype)`` (matmuls for B·T tokens, causal
    attention, logits for the last position or all with ``all_logits``); ``memory_s =
    prefill_bytes / hw.hbm_bandwidth`` (weights once + KV written for B·T positions).

    Raises:
        ValueError: ``prompt_len`` or ``batch`` < 1, unknown hardware/dtype.
    """
    hw = _hw(hw)
    flops = prefill_flops(cfg, prompt_len, batch, all_logits=all_logits)
    nbytes = prefill_bytes(cfg, prompt_len, batch, dtype, kv_dtype=kv_dtype, embedding=embedding)
    peak = _peak(hw, dtype, compute_dtype)
    return StepBounds("prefill", flops, nbytes, flops / peak, nbytes / hw.hbm_bandwidth,
                      batch * prompt_len, batch, peak, hw.hbm_bandwidth)


def decode_step_lower_bound(cfg, hw, batch: int = 1, context_len: int = 0, dtype: str = "bf16",
                            **kw) -> float:
    """Seconds one decode step takes at least: ``max(bytes / bandwidth, FLOPs / peak)``.

    Includes: weights read once per step (all stored weights with ``embedding="table"``, the
    default), each sequence's KV cache read (``context_len`` positions) and the new tokens' KV
    write; FLOPs of every matmul for ``batch`` tokens plus attention over ``context_len + 1``
    keys.  Excludes activations, kernel launch and host overheads.  See
    :func:`decode_step_bounds` for keyword options.

    Example (the seed's numbers): a 7e9-parameter model in BF16 is 14 GB; on an H100 SXM
    (3.35 TB/s) ``decode_step_lower_bound(7e9, "H100-SXM")`` ≈ 4.18 ms ≈ 239 steps/s.

    Raises:
        ValueError: ``batch`` < 1, ``context_len`` < 0, unknown hardware or dtype.
    """
    return decode_step_bounds(cfg, hw, batch, context_len, dtype, **kw).time_s


def prefill_lower_bound(cfg, hw, prompt_len: int, batch: int = 1, dtype: str = "bf16", **kw) -> float:
    """Seconds a prefill of ``batch`` × ``prompt_len`` tokens takes at least:
    ``max(bytes / bandwidth, FLOPs / peak)``.

    Includes: FLOPs of every matmul for B·T tokens, causal attention (lower triangle), logits of
    the last position; bytes of the weights (read once) and of the KV cache written.  Excludes
    activations, attention-score traffic and host overheads.  See :func:`prefill_bounds`.

    Raises:
        ValueError: ``prompt_len`` or ``batch`` < 1, unknown hardware or dtype.
    """
    return prefill_bounds(cfg, hw, prompt_len, batch, dtype, **kw).time_s


def critical_batch(cfg, hw, context_len: int = 0, dtype: str = "bf16", *, max_batch: int = 2**20,
                   compute_dtype: str | None = None, kv_dtype: str | None = None,
                   embedding: str = "table") -> float:
    """The smallest batch B at which a decode step turns compute-bound (``compute_s >
    memory_s``), or ``math.inf`` if it never does up to ``max_batch`` (long contexts: the
    per-sequence KV read grows as fast as the FLOPs, so batching stops helping).

    Weights only (context 0, dense, bare count N): ``2·N·B / F = N·b / BW`` gives
    ``B* = b · F / (2 · BW)`` = bytes per weight × ridge point / 2 — for BF16 on an H100 SXM,
    ``2 · 989.4e12 / (2 · 3.35e12)`` ≈ 295.3, so B = 296.

    Keyword options as for :func:`decode_step_bounds`; the result agrees with its ``bound``.

    Returns:
        int batch, or ``math.inf``.

    Raises:
        ValueError: ``context_len`` < 0, unknown hardware or dtype.
    """
    require_positive("max_batch", max_batch)
    require_nonnegative("context_len", context_len)
    hw, cfg = _hw(hw), _cfg(cfg)
    peak, bw = _peak(hw, dtype, compute_dtype), hw.hbm_bandwidth
    # per-sequence terms, computed once: FLOPs f and KV bytes k are exactly linear in B
    # (decode_step_flops = B·f, decode_step_bytes = weights(B) + B·k); only the weights term
    # depends on B non-linearly (MoE experts touched, gathered embedding rows)
    f = decode_step_flops(cfg, 1, context_len)
    k = (decode_step_bytes(cfg, 1, context_len, dtype, kv_dtype=kv_dtype, embedding=embedding)
         - decode_weight_bytes(cfg, 1, dtype, embedding=embedding))

    def compute_bound(b):  # the test of StepBounds.bound, without recounting the model
        return b * f / peak > (decode_weight_bytes(cfg, b, dtype, embedding=embedding) + b * k) / bw

    if compute_bound(1):
        return 1
    hi = 1
    while not compute_bound(hi):
        if hi >= max_batch:
            return math.inf
        hi = min(hi * 2, max_batch)
    lo = hi // 2  # memory-bound at lo, compute-bound at hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if compute_bound(mid) else (mid, hi)
    return hi


# --------------------------------------------------------------------------------------------
# calculators (for ldf.calculator)
# --------------------------------------------------------------------------------------------
def _compute_dtype_for(hw, dtype: str) -> str:
    """The compute dtype a calculator uses: ``dtype`` if ``hw`` has a peak for it, else BF16
    (weight-only quantisation dequantises to BF16 before the matmul)."""
    try:
        hw.flops(dtype)
        return dtype
    except ValueError:
        return "bf16"


def decode_calculator(model: str = "Llama-2-7B", hardware_name: str = "H100-SXM", dtype: str = "bf16",
                      batch: int = 1, context: int = 0) -> dict:
    """Everything chapter 05's calculator shows for one setting, as a dict of named outputs.

    Keys: step time bound (ms), the memory and compute terms (ms), which resource binds,
    tokens/s per sequence and in total, bytes per generated token (GB), compute dtype used, the
    critical batch at this context, and the prefill bound of a ``context``-token prompt.  The KV
    cache is stored in BF16 unless ``dtype`` is FP32.

    Raises:
        ValueError: unknown model/hardware/dtype, ``batch`` < 1, ``context`` < 0.
    """
    hw = _hw(hardware_name)
    cd = _compute_dtype_for(hw, dtype)
    kvd = "fp32" if dtype == "fp32" else "bf16"
    b = decode_step_bounds(model, hw, batch, context, dtype, compute_dtype=cd, kv_dtype=kvd)
    out = {
        "decode step ≥ (ms)": b.time_s * 1e3,
        "memory term (ms)": b.memory_s * 1e3,
        "compute term (ms)": b.compute_s * 1e3,
        "binds": b.bound,
        "tokens/s per sequence ≤": 1.0 / b.time_s,
        "tokens/s total ≤": b.tokens_per_s,
        "GB read per token": b.bytes_per_token / GB,
        "compute dtype": cd,
        "critical batch": critical_batch(model, hw, context, dtype, compute_dtype=cd, kv_dtype=kvd),
    }
    if context:
        out["prefill of B × context tokens ≥ (ms)"] = prefill_lower_bound(model, hw, context, batch, dtype,
                                                                  compute_dtype=cd, kv_dtype=kvd) * 1e3
    return out


def batch_calculator(model: str = "Llama-2-7B", hardware_name: str = "H100-SXM", batch: int = 1,
                     context: int = 0) -> dict:
    """BF16 decode as the batch grows: bytes per token (falls as 1/B while memory binds), step
    time, tokens/s in total, the two terms, and which binds.

    Raises:
        ValueError: unknown model/hardware, ``batch`` < 1, ``context`` < 0.
    """
    b = decode_step_bounds(model, hardware_name, batch, context, "bf16")
    return {
        "GB read per token": b.bytes_per_token / GB,
        "weights' share of a token (GB)": decode_weight_bytes(model, batch, "bf16") / batch / GB,
        "step ≥ (ms)": b.time_s * 1e3,
        "memory term (ms)": b.memory_s * 1e3,
        "compute term (ms)": b.compute_s * 1e3,
        "tokens/s total ≤": b.tokens_per_s,
        "binds": b.bound,
    }


# --------------------------------------------------------------------------------------------
# the reader's roofline, measured
# --------------------------------------------------------------------------------------------
_TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


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
    from .measure import device
    return torch.device(dev) if dev is not None else device()


def _sync(dev: torch.device):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _best_time(fn, dev, repeat: int, warmup: int = 1) -> float:
    """Minimum wall time of ``fn()`` (s): the best case is the roof."""
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


class _StreamKernel:
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
    per array on a CPU (twice a 32 MiB last-level cache), 1 GiB on a GPU.  Best of ``repeat``
    passes after one warm-up pass, as STREAM reports its best rate.

    Raises:
        ValueError: unknown ``kind``, ``nbytes`` or ``repeat`` < 1.
    """
    if kind not in ("copy", "triad"):
        raise ValueError(f"kind={kind!r} is not allowed; allowed: 'copy', 'triad'")
    require_positive("repeat", repeat)
    dev = _dev(dev)
    k = _StreamKernel(kind, nbytes or _stream_default_nbytes(dev), dev)
    return max(k() for _ in range(repeat))


def gemv_bandwidth(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], n_rows: int, n_cols: int, *,
                   total_bytes: int = 256 * MiB, repeat: int = 3, seed: int = 0) -> float:
    """Weight bytes per second (B/s) of a batch-1 projection ``fn(x [1, K], W [N, K]) → [1, N]``
    on FP32 CPU tensors, with ``N = n_rows``, ``K = n_cols``.

    One matrix would stay in the last-level cache after its first call, so the function builds
    as many seeded copies of W as fill ``total_bytes`` (default 256 MiB, 8× a 32 MiB L3) and
    calls ``fn`` on each in turn — every call streams its W from DRAM, as in a decode step.
    Returns ``copies × N × K × 4`` bytes ÷ the best of ``repeat`` sweeps (after one warm-up).

    Raises:
        ValueError: ``n_rows``, ``n_cols``, ``total_bytes`` or ``repeat`` < 1.
    """
    for name, v in (("n_rows", n_rows), ("n_cols", n_cols), ("total_bytes", total_bytes), ("repeat", repeat)):
        require_positive(name, v)
    g = torch.Generator().manual_seed(seed)
    copies = max(2, total_bytes // (n_rows * n_cols * 4))
    ws = [torch.randn(n_rows, n_cols, generator=g) for _ in range(copies)]
    x = torch.randn(1, n_cols, generator=g)
    t = _best_time(lambda: [fn(x, w) for w in ws], torch.device("cpu"), repeat)
    return copies * n_rows * n_cols * 4 / t


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
    check_dtype(dtype, tuple(_TORCH_DTYPES))
    require_positive("repeat", repeat)
    dev = _dev(dev)
    n = n or (8192 if dev.type == "cuda" else 1024)
    require_positive("n", n)
    g = torch.Generator(device=dev).manual_seed(0)  # private stream: callers' random draws stay put
    a = torch.rand(n, n, device=dev, dtype=_TORCH_DTYPES[dtype], generator=g)
    b = torch.rand(n, n, device=dev, dtype=_TORCH_DTYPES[dtype], generator=g)
    t = _best_time(lambda: a @ b, dev, repeat)
    return 2 * n**3 / t


def measure_roofline(dev=None, *, quick: bool = True) -> MeasuredRoofline:
    """Measure this device's roofline: STREAM copy and triad bandwidth (the larger is the
    memory roof) and matmul FLOP/s in FP32 and — on a GPU, or a CPU with native BF16
    (:func:`cpu_supports_bf16`) — BF16.  ``quick=True`` takes about a second on a CPU.

    Returns:
        :class:`MeasuredRoofline`.
    """
    from .measure import describe_device

    dev = _dev(dev)
    r = 3 if quick else 10
    bw = {k: stream_bandwidth(k, dev=dev, repeat=r) for k in ("copy", "triad")}
    flops = {"fp32": matmul_flops("fp32", dev=dev, repeat=r)}
    if dev.type == "cuda" or cpu_supports_bf16():
        flops["bf16"] = matmul_flops("bf16", dev=dev, repeat=r)
    return MeasuredRoofline(describe_device(dev), max(bw.values()), flops, bw)


# --------------------------------------------------------------------------------------------
# the book's decode loop
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DecodeRun:
    """One greedy generation.

    Attributes:
        tokens: LongTensor [B, T + n_new] (prompt then generated ids).
        prefill_s: wall time of the prefill (s).
        step_times: wall time of each decode step after the prefill (s; ``n_new − 1`` of them,
            the prefill produces the first new token).  Step ``i`` (1-based) attends
            ``T + i − 1`` cached positions plus its own.  On a GPU without ``before_step`` the
            steps are not synchronised one by one (the host queues ahead), so only their sum
            is the loop's wall time; with ``before_step`` each is synchronised.
    """

    tokens: torch.Tensor
    prefill_s: float
    step_times: tuple

    @property
    def n_steps(self) -> int:
        """Decode steps timed (``n_new − 1``)."""
        return len(self.step_times)

    @property
    def decode_s(self) -> float:
        """Total time of the decode steps (s)."""
        return math.fsum(self.step_times)

    @property
    def step_s(self) -> float:
        """Mean seconds per decode step (``nan`` when no step was timed)."""
        return self.decode_s / self.n_steps if self.n_steps else math.nan


@torch.inference_mode()
def greedy_decode(model, input_ids: torch.Tensor, max_new_tokens: int, *,
                  before_step: Callable[[], object] | None = None) -> DecodeRun:
    """The book's greedy decode loop: one prefill, then one ``forward`` of a single token per row
    per step with the KV cache; argmax picks the next token.  Nothing else runs per step — no
    logits processors, no stopping criteria, no Python-side bookkeeping beyond one slice
    assignment into a preallocated output — so on a batch-1 step the time is the weight read.

    Args:
        model: an :class:`llm_dataflow.model.Decoder` (``forward(ids, cache)``, ``new_cache``).
        input_ids: LongTensor [B, T] on the model's device.
        max_new_tokens: n ≥ 1 tokens to generate.
        before_step: called before each decode step, outside its timed region (used by
            :func:`decode_bandwidth` to measure the machine's bandwidth right before each step).

    Returns:
        :class:`DecodeRun` with the tokens, the prefill time and every step's time.

    Raises:
        ValueError: ``max_new_tokens`` < 1 or ``input_ids`` not 2-D.
    """
    require_positive("max_new_tokens", max_new_tokens)
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids has shape {tuple(input_ids.shape)}; it must be [B, T]")
    B, T = input_ids.shape
    dev = input_ids.device
    out = torch.empty(B, T + max_new_tokens, dtype=torch.long, device=dev)
    out[:, :T] = input_ids
    cache = model.new_cache(B, T + max_new_tokens)
    _sync(dev)
    t0 = time.perf_counter()
    logits = model(input_ids, cache, last_only=True)   # prefill: [B, 1, V] (last position only)
    nxt = logits[:, -1].argmax(-1, keepdim=True)       # [B, 1]
    out[:, T:T + 1] = nxt
    _sync(dev)
    prefill_s = time.perf_counter() - t0
    times = []
    t_prev = time.perf_counter()
    for i in range(1, max_new_tokens):
        if before_step is not None:
            before_step()
            _sync(dev)
            t_prev = time.perf_counter()
        logits = model(nxt, cache)                     # decode: [B, 1, V]; reads every weight once
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        out[:, T + i:T + i + 1] = nxt
        if before_step is not None:
            _sync(dev)  # a GPU step must finish before the next bandwidth pass
        t = time.perf_counter()
        times.append(t - t_prev)
        t_prev = t
    if times and before_step is None:
        # no per-step sync (a GPU queues steps ahead): the last step absorbs the wait, so the
        # times sum to the loop's wall time
        _sync(dev)
        times[-1] += time.perf_counter() - t_prev
    return DecodeRun(out, prefill_s, tuple(times))


@dataclass(frozen=True)
class DecodeBandwidth:
    """Bandwidth achieved by batch-1 greedy decoding.

    Attributes:
        model_bytes: bytes of all stored weights in the run's dtype (B).
        bytes_per_step: mean over the timed steps of the bytes a step must read (B): weights
            with the embedding as one gathered row, plus the KV cache at that step's context,
            plus the new KV write (:func:`decode_step_bytes` with ``embedding="rows"``).
        steps_per_s: decode steps per second (measured: steps ÷ their summed time, median over
            the rounds).
        achieved_bandwidth: ``bytes_per_step × steps_per_s`` (B/s).
        peak_bandwidth: the bandwidth the loop is compared with (B/s).  Paired (no peak given):
            the STREAM throughput over the passes run between the steps — the bytes of each
            pair's faster kernel (copy or triad) summed, over their summed times, median over
            the rounds; or the value given.
        high_peak_bandwidth: the 90th percentile of the single STREAM passes (B/s): what the
            machine delivers in its better moments; or the value given.
        fraction: ``achieved_bandwidth ÷ peak_bandwidth``.
        fraction_of_high: ``achieved_bandwidth ÷ high_peak_bandwidth`` — the stricter figure.
        run: the last :class:`DecodeRun`.
    """

    model_bytes: int
    bytes_per_step: float
    steps_per_s: float
    achieved_bandwidth: float
    peak_bandwidth: float
    high_peak_bandwidth: float
    fraction: float
    fraction_of_high: float
    run: DecodeRun


_TORCH_TO_NAME = {v: k for k, v in _TORCH_DTYPES.items()}


def _model_dtype_name(model) -> str:
    p = next(model.parameters())
    if p.dtype not in _TORCH_TO_NAME:
        raise ValueError(f"model dtype {p.dtype} is not allowed; allowed: float32, bfloat16, float16")
    return _TORCH_TO_NAME[p.dtype]


# Paired STREAM arrays: ≫ a CPU's 32 MiB L3 or a GPU's ~50 MB L2, small enough to stay allocated
# beside the model for the whole run.
_PAIRED_STREAM_BYTES = {"cpu": 64 * MiB, "cuda": 256 * MiB}


def decode_bandwidth(model, cfg: ModelConfig, *, prompt_len: int = 8, n_new: int = 32, repeat: int = 3,
                     peak_bandwidth: float | None = None, seed: int = 0) -> DecodeBandwidth:
    """Run :func:`greedy_decode` at batch 1 and report the bandwidth it achieves.

    The prompt is ``prompt_len`` seeded random ids; ``n_new`` tokens are generated in each of
    ``repeat`` rounds after one warm-up.  Unless ``peak_bandwidth`` (B/s) is given, the peak is
    measured *paired*: right before every decode step one pass of STREAM copy and one of triad
    run (:func:`stream_bandwidth`'s kernels, arrays preallocated; 64 MiB each on a CPU,
    256 MiB on a GPU), and the faster of the two is that step's STREAM interval.  Decode and
    STREAM are then measured the same way, as throughput over interleaved intervals::

        achieved = Σ step bytes / Σ step time      peak = Σ STREAM bytes / Σ STREAM time

    so on a shared machine, where the bandwidth other tenants leave drifts by 2× within
    seconds, both see the same conditions.  Each is the median over the rounds, and
    :attr:`DecodeBandwidth.fraction` is their ratio; :attr:`DecodeBandwidth.fraction_of_high`
    compares with the 90th percentile of single passes instead (a higher, stricter roof).
    STREAM counts the bytes named in its kernels, not write-allocate traffic (on a CPU without
    streaming stores copy moves 1.5× what it reports, triad 1.33×), while a decode step only
    reads; where the cores can saturate the bus, the fraction can pass 100 %.

    Raises:
        ValueError: ``prompt_len``/``repeat`` < 1, ``n_new`` < 2, ``peak_bandwidth`` <= 0,
            unsupported model dtype.
    """
    import statistics

    from .config import weight_bytes

    require_positive("prompt_len", prompt_len)
    require_positive("repeat", repeat)
    if not isinstance(n_new, int) or n_new < 2:
        raise ValueError(f"n_new={n_new!r} is not allowed; it must be an integer >= 2")
    if peak_bandwidth is not None:
        require_positive("peak_bandwidth", peak_bandwidth, integer=False)
    dev = next(model.parameters()).device
    dtype = _model_dtype_name(model)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, cfg.vocab_size, (1, prompt_len), generator=g).to(dev)
    # step i (1 … n_new − 1) reads prompt_len + i − 1 cached positions
    step_bytes = [decode_step_bytes(cfg, 1, prompt_len + i - 1, dtype, embedding="rows") for i in range(1, n_new)]
    nbytes = math.fsum(step_bytes) / len(step_bytes)
    passes = []  # (bytes, seconds) of each pair's faster STREAM pass
    before = None
    if peak_bandwidth is None:
        kernels = [_StreamKernel(k, _PAIRED_STREAM_BYTES.get(dev.type, 64 * MiB), dev) for k in ("copy", "triad")]
        before = lambda: passes.append(_faster_pass(kernels))  # noqa: E731
    greedy_decode(model, ids, 2)  # warm-up: allocator, thread pool
    rates, peaks, singles, run = [], [], [], None
    for _ in range(repeat):
        del passes[:]
        run = greedy_decode(model, ids, n_new, before_step=before)
        rates.append(run.n_steps / run.decode_s)
        if peak_bandwidth is None:
            peaks.append(math.fsum(b for b, _ in passes) / math.fsum(t for _, t in passes))
            singles += [b / t for b, t in passes]
    steps_per_s = statistics.median(rates)
    achieved = nbytes * steps_per_s
    if peak_bandwidth is None:
        peak = statistics.median(peaks)
        high = statistics.quantiles(singles, n=10, method="inclusive")[-1] if len(singles) > 1 else singles[0]
    else:
        peak = high = peak_bandwidth
    return DecodeBandwidth(weight_bytes(cfg, dtype), nbytes, steps_per_s, achieved, peak, high,
                           achieved / peak, achieved / high, run)


def _faster_pass(kernels) -> tuple[int, float]:
    """Run each STREAM kernel once; ``(bytes, seconds)`` of the faster."""
    best = None
    for k in kernels:
        bw = k()
        if best is None or bw > best[0]:
            best = (bw, k.nbytes)
    return best[1], best[1] / best[0]


def hf_peer_model(model, cfg: ModelConfig):
    """A Hugging Face ``transformers`` ``LlamaForCausalLM`` holding exactly ``model``'s weights
    (same dtype and device), for comparing decode loops on identical weights.  The Decoder's
    ``state_dict`` keys are the Hugging Face names, so the weights load one to one.

    Raises:
        ValueError: a config the Llama class cannot represent (MoE, biases, sliding window), or a
            state-dict mismatch.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    if (cfg.model_type not in ("llama", "mistral") or cfg.is_moe or cfg.attention_bias or cfg.sliding_window
            or cfg.rope_scaling):
        raise ValueError(f"model_type={cfg.model_type!r}: the Hugging Face peer is built for plain "
                         "Llama configs only (no MoE, bias, sliding window or rope_scaling)")
    hcfg = LlamaConfig(vocab_size=cfg.vocab_size, hidden_size=cfg.d_model, intermediate_size=cfg.d_ff,
                       num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads,
                       num_key_value_heads=cfg.n_kv_heads, head_dim=cfg.head_dim,
                       max_position_embeddings=cfg.max_position_embeddings or 4096,
                       rms_norm_eps=cfg.norm_eps, rope_theta=cfg.rope_theta,
                       tie_word_embeddings=cfg.tie_embeddings, attention_bias=False,
                       bos_token_id=None, eos_token_id=None, pad_token_id=None)
    p = next(model.parameters())
    hf = LlamaForCausalLM(hcfg).to(dtype=p.dtype, device=p.device).eval()
    missing, unexpected = hf.load_state_dict(model.state_dict(), strict=False)
    missing = [k for k in missing if "rotary" not in k and not (cfg.tie_embeddings and k == "lm_head.weight")]
    if missing or unexpected:
        raise ValueError(f"state_dict mismatch with transformers: missing {missing}, unexpected {unexpected}")
    return hf


@torch.inference_mode()
def hf_greedy_decode(model, cfg: ModelConfig, input_ids: torch.Tensor, max_new_tokens: int,
                     *, repeat: int = 3, hf_model=None):
    """Time Hugging Face ``transformers`` greedy ``generate`` (its default dynamic KV cache) on
    the same weights as ``model``.

    A logits processor records the clock each time ``generate`` has produced the logits of a
    new token; the per-token time is ``(t_n − t_1) / (n − 1)`` — the n − 1 decode steps after
    the prefill, including everything ``generate`` does between forwards — so it compares with
    :attr:`DecodeRun.step_s`.  Median of ``repeat`` runs after one warm-up.

    Returns:
        ``(tokens LongTensor [B, T + n], seconds per token)``.

    Raises:
        ValueError: ``max_new_tokens`` < 2, or a config the Llama peer cannot represent.
    """
    import statistics

    from transformers import LogitsProcessor, LogitsProcessorList

    if not isinstance(max_new_tokens, int) or max_new_tokens < 2:
        raise ValueError(f"max_new_tokens={max_new_tokens!r} is not allowed; it must be an integer >= 2")
    require_positive("repeat", repeat)
    hf = hf_model or hf_peer_model(model, cfg)
    dev = input_ids.device
    stamps: list[float] = []

    class _Clock(LogitsProcessor):
        def __call__(self, ids, scores):
            _sync(dev)
            stamps.append(time.perf_counter())
            return scores

    kw = dict(do_sample=False, use_cache=True, pad_token_id=0, eos_token_id=None,
              logits_processor=LogitsProcessorList([_Clock()]))
    hf.generate(input_ids, max_new_tokens=2, min_new_tokens=2, **kw)  # warm-up
    per_token, toks = [], None
    for _ in range(repeat):
        stamps.clear()
        toks = hf.generate(input_ids, max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens, **kw)
        per_token.append((stamps[-1] - stamps[0]) / (len(stamps) - 1))
    return toks, statistics.median(per_token)


# --------------------------------------------------------------------------------------------
# timing one prefill / one decode step (the notebook's measured points)
# --------------------------------------------------------------------------------------------
@torch.inference_mode()
def time_prefill(model, cfg: ModelConfig, prompt_len: int, batch: int = 1, *, repeat: int = 3,
                 seed: int = 0) -> float:
    """Best (minimum) seconds of one prefill ``forward`` of ``batch`` seeded random prompts of
    ``prompt_len`` tokens into a fresh cache (logits for all positions, as ``forward`` returns),
    over ``repeat`` runs after one warm-up.  The minimum, not the median: on a shared machine
    other processes only ever add time, and the roofline compares against the best case.

    Raises:
        ValueError: ``prompt_len``/``batch``/``repeat`` < 1.
    """
    require_positive("prompt_len", prompt_len)
    require_positive("batch", batch)
    dev = next(model.parameters()).device
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, cfg.vocab_size, (batch, prompt_len), generator=g).to(dev)
    return _best_time(lambda: model(ids, model.new_cache(batch, prompt_len)), dev, repeat)


@torch.inference_mode()
def time_decode_step(model, cfg: ModelConfig, batch: int = 1, context_len: int = 1, *, repeat: int = 3,
                     seed: int = 0) -> float:
    """Best (minimum, as :func:`time_prefill`) seconds of one decode step (one token per row)
    with ``context_len`` positions already in every row's KV cache, over ``repeat`` steps after
    one warm-up step.

    The cache is not filled by a prefill: its stored length is advanced to ``context_len``
    (``KVCache.advance``) over zero-initialised K/V — the step reads and multiplies the same
    bytes whatever the cached values are, and skipping the prefill keeps large batches cheap to
    set up.  Each timed step appends one position, so the context grows to
    ``context_len + repeat + 1`` (a few tokens more than stated; negligible for the bytes).

    Raises:
        ValueError: ``batch``/``repeat`` < 1, ``context_len`` < 0.
    """
    require_positive("batch", batch)
    require_nonnegative("context_len", context_len)
    require_positive("repeat", repeat)
    dev = next(model.parameters()).device
    g = torch.Generator().manual_seed(seed)
    tok = torch.randint(0, cfg.vocab_size, (batch, 1), generator=g).to(dev)
    cache = model.new_cache(batch, context_len + repeat + 2)
    if context_len:
        cache.advance(context_len)
    return _best_time(lambda: model(tok, cache), dev, repeat)
