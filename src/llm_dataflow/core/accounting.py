"""The one accounting model: every byte and FLOP a chapter's calculator shows comes from here.

One setting — a model (:class:`~llm_dataflow.core.config.ModelConfig`), a :class:`PrecisionPlan`
(weights as a dtype or a :class:`QuantSpec`, the KV-cache dtype, the activation and compute
dtypes), a batch, a context and a parallel layout — gives one set of numbers, whichever chapter
asks:

* **weights** — bytes stored (:func:`weight_bytes`; part by part — values, scales, zero points,
  ``g_idx``, modules kept unquantised — :func:`weight_bytes_breakdown`) and bytes one forward pass must read
  (:func:`weight_bytes_read`: MoE experts the tokens are expected to touch, embedding rows
  gathered or the table, scales and zero points of quantised formats);
* **KV cache** — :func:`kv_bytes` (chapter 06's formula, :func:`llm_dataflow.core.kv.kv_cache_bytes`,
  in the plan's KV dtype: BF16 unless asked otherwise, whatever the weights are);
* **activations** — :func:`activation_bytes`, the workspace peak of one forward pass;
* **collectives** — the parallel arithmetic (:mod:`llm_dataflow.core.parallel`:
  ``tp_bytes_per_token_per_layer``, ``ep_bytes_per_token``) builds on these counts;
* **FLOPs and step bytes** — :func:`decode_step_flops`, :func:`decode_step_bytes`,
  :func:`prefill_flops`, :func:`prefill_bytes`, which the roofline bounds
  (:mod:`llm_dataflow.core.roofline`) divide by a chip's peaks;
* **formats** — :mod:`llm_dataflow.core.formats` (:class:`~llm_dataflow.core.formats.QuantSpec`,
  :class:`~llm_dataflow.core.formats.PrecisionPlan`) names the dtypes these counts use;
* **fit** — :mod:`llm_dataflow.core.parallel` holds the one TP/PP/EP degree check and
  :mod:`llm_dataflow.core.fit` the memory-fit verdict (weights + KV + activations + a stated
  runtime reserve against one GPU's capacity).

Units: bytes (B), FLOPs; GB = 1e9 B.  Shapes use ``book/notation.md``'s letters.
"""
from __future__ import annotations

import functools
import math

from .config import MAX_EXPERTS, ModelConfig, as_model_config, as_model_or_count, tensor_specs
from .formats import KV_DTYPES, PrecisionPlan, QuantSpec, as_precision_plan
from .kv import kv_cache_bytes, kv_layer_bytes_per_token, kv_token_bytes, state_bytes_per_sequence, state_dtype_for
from .parallel import kv_heads_per_rank, tensor_shares
from .units import check_dtype, dtype_bits, dtype_bytes, no_overflow, require_nonnegative, require_positive

__all__ = [
    # bytes
    "weight_bytes", "weight_bytes_breakdown", "weight_bytes_read", "layer_weight_bytes", "expected_experts_hit", "kv_bytes",
    "kv_read_over_steps", "activation_bytes",
    # FLOPs and step totals
    "matmul_params", "attention_flops_per_token", "decode_step_flops", "decode_step_bytes",
    "prefill_flops", "prefill_bytes", "MLA_FORMS",
]
# also public, for the modules above (not re-exported by ``ldf``): tensor_bytes, quantised_matmul_params

_EMBEDDING_MODES = ("rows", "table")
#: MLA attention forms: ``"absorbed"`` (decode kernels that read only the latent, e.g. FlashMLA)
#: and ``"naive"`` (K and V up-projected per head; prefill kernels).
MLA_FORMS = ("absorbed", "naive")


# =============================================================================================
# weight bytes
# =============================================================================================
def tensor_bytes(t, dtype: str, quant: QuantSpec | None) -> int:
    """Bytes stored for one checkpoint tensor ``t`` (a :class:`~llm_dataflow.core.config.TensorSpec`):
    in ``quant``'s format when it quantises ``t``'s role, else ``numel`` elements of ``dtype``."""
    if quant is not None and not quant.keeps(t.name, t.role):
        # an embedding table is a gather, not a matmul, but a format may quantise it by rows too (MLX)
        n_in = t.in_features if t.in_features is not None else (
            t.shape[-1] if t.role == "embedding" and len(t.shape) == 2 else None)
        if n_in is not None:
            return quant.tensor_bytes(t.shape, n_in)
    return math.ceil(t.numel * dtype_bits(dtype) / 8)


def weight_bytes(cfg: ModelConfig, dtype: str = "bf16", quant: QuantSpec | None = None) -> int:
    """Bytes of all weights of ``cfg`` as stored (int; tied embeddings once).

    ``dtype`` is the unquantised dtype, or a weight-format name / :class:`PrecisionPlan` (then
    ``quant`` comes from it).  With a quantisation, every 2-D weight whose role is not in
    ``quant.keep`` is stored as :meth:`QuantSpec.tensor_bytes` says; kept tensors stay in the
    plan's unquantised dtype.

    Raises:
        ValueError: unknown dtype or format, or a group size that does not divide a tensor's
            input dimension.
    """
    cfg = as_model_config(cfg)
    if quant is not None and not isinstance(quant, QuantSpec):
        raise ValueError(f"quant={quant!r} is not allowed; give a QuantSpec or None")
    p = as_precision_plan(dtype)
    return _weight_bytes(cfg, p.weights, quant if quant is not None else p.quant)


@functools.lru_cache(maxsize=4096)   # calculators evaluate whole grids of settings
def _weight_bytes(cfg: ModelConfig, dtype: str, quant: QuantSpec | None) -> int:
    return sum(tensor_bytes(t, dtype, quant) for t in tensor_specs(cfg))


def weight_bytes_breakdown(cfg, dtype="bf16", *, loaded: bool = False) -> dict:
    """What a checkpoint's files hold, part by part (B): :func:`weight_bytes` split into the
    quantised tensors' ``"values"``, ``"scales"``, ``"zero_points"``, ``"g_idx"`` and ``"other"``
    (:meth:`QuantSpec.tensor_parts`), the ``"kept"`` tensors stored in the plan's unquantised
    dtype (the roles in ``quant.keep`` — embeddings, lm_head, norms, routers, biases — the
    modules the checkpoint lists as not converted, 1-D tensors) and their ``"total"``;
    ``"quantised_params"`` and ``"kept_params"`` count the elements of each kind.

    ``dtype`` is a weight-format name, a :class:`QuantSpec` or a :class:`PrecisionPlan` (for an
    unquantised plan everything is ``"kept"``).  ``loaded=True`` counts what a serving engine
    holds after loading instead of the files, on a GPU other than Hopper
    (:meth:`QuantSpec.as_loaded`: vLLM's Marlin kernel drops a symmetric GPTQ checkpoint's zero
    points and, without act-order, its ``g_idx``; Hopper's Machete keeps them), as
    :func:`~llm_dataflow.core.fit.memory_fit` counts it there.

    Raises:
        ValueError: as :func:`weight_bytes`; ``loaded`` not a bool.
    """
    cfg = as_model_config(cfg)
    if not isinstance(loaded, bool):
        raise ValueError(f"loaded={loaded!r} is not allowed; it must be True or False")
    p = as_precision_plan(dtype)
    q = p.quant.as_loaded() if loaded and p.quant is not None else p.quant
    out = dict.fromkeys(("values", "scales", "zero_points", "g_idx", "other", "kept", "total",
                         "quantised_params", "kept_params"), 0)
    for t in tensor_specs(cfg):
        if q is not None and t.in_features is not None and not q.keeps(t.name, t.role):
            for k, v in q.tensor_parts(t.shape, t.in_features).items():
                out[k] += v
            out["quantised_params"] += t.numel
        else:
            out["kept"] += tensor_bytes(t, p.weights, None)
            out["kept_params"] += t.numel
    out["total"] = sum(out[k] for k in ("values", "scales", "zero_points", "g_idx", "other", "kept"))
    return out


def layer_weight_bytes(cfg, dtype="bf16") -> int:
    """Bytes of the decoder layers' weights only (B): :func:`weight_bytes` less the embedding
    tables, the final norm and the output head — what layer-by-layer offload streams to the GPU
    each forward pass while those stay resident (chapter 01).

    Raises:
        ValueError: as :func:`weight_bytes`.
    """
    cfg = as_model_config(cfg)
    p = as_precision_plan(dtype)
    return sum(tensor_bytes(t, p.weights, p.quant) for t in tensor_specs(cfg) if t.layer is not None)


def expected_experts_hit(n_experts: int, k: int, n_tokens: int) -> float:
    """Expected number of distinct experts that ``n_tokens`` tokens route to, each choosing ``k``
    of ``n_experts`` uniformly: ``E · (1 − (1 − k/E)^n_tokens)`` (a balanced router; real routers
    are skewed, which hits fewer).

    Raises:
        ValueError: ``n_experts``, ``k`` or ``n_tokens`` not a positive integer, ``n_experts``
            more than :data:`~llm_dataflow.core.config.MAX_EXPERTS` (1,024, the bound of every
            ModelConfig), ``k > n_experts``.
    """
    require_positive("n_experts", n_experts)
    if n_experts > MAX_EXPERTS:
        raise ValueError(f"n_experts={n_experts} is not allowed; at most MAX_EXPERTS={MAX_EXPERTS}")
    require_positive("k", k)
    require_positive("n_tokens", n_tokens)
    if k > n_experts:
        raise ValueError(f"k={k} is more than n_experts={n_experts}")
    # beyond a float's range the power is 0 (or 1 for a base of exactly 1): an infinite exponent
    exponent = n_tokens if n_tokens <= 1e308 else math.inf
    return n_experts * (1 - (1 - k / n_experts) ** exponent)


@functools.lru_cache(maxsize=1024)
def _weight_parts(cfg: ModelConfig, p: PrecisionPlan, tp: int = 1, ep: int = 1) -> tuple:
    """(bytes of every tensor except gathered tables and routed experts, [(rows, bytes) of each
    gathered table], bytes of one routed expert summed over the MoE layers), on one GPU of a
    ``tp × ep`` layout: each tensor times its :func:`~llm_dataflow.core.parallel.tensor_shares`
    share (all 1 at tp = ep = 1)."""
    other, experts, tables = 0, 0, []
    for t, share in zip(tensor_specs(cfg), tensor_shares(cfg, tp, ep)):
        b = tensor_bytes(t, p.weights, p.quant)
        if share != 1:
            b *= share                           # (whole tensors keep exact integer counts)
        if t.expert is not None:   # a routed expert's weights and biases
            experts += b if t.expert == 0 else 0
        elif (t.role == "embedding" and not cfg.tie_embeddings) or t.role == "position_embedding":
            tables.append((t.shape[0], b))
        else:
            other += b
    return other, tuple(tables), experts


@no_overflow('n_tokens')
def weight_bytes_read(cfg, dtype="bf16", n_tokens: int = 1, quant: QuantSpec | None = None, *,
                      embedding: str = "rows", tp: int = 1, ep: int = 1) -> float:
    """Bytes of weights one forward pass over ``n_tokens`` tokens must read from memory (B),
    each weight read once however many tokens use it; with ``tp``/``ep`` > 1, what one GPU of
    that layout reads.

    * dense weights: all of them, as stored (:func:`weight_bytes`'s per-tensor bytes, scales
      and zero points included);
    * MoE routed experts: :func:`expected_experts_hit` per MoE layer (uniform routing; at one
      token exactly k) — hence a float;
    * gathered tables (the input embedding unless tied, learned position tables):
      ``embedding="rows"`` (default) reads only the ``min(n_tokens, V)`` gathered rows — the
      strict minimum; ``embedding="table"`` counts the whole table (gpt-fast's "model bytes"
      convention).  A tied table is read whole anyway, as the ``lm_head``.

    * one GPU of a ``tp``-way tensor-parallel, ``ep``-way expert-parallel layout: each tensor
      times its share (:func:`~llm_dataflow.core.parallel.tensor_shares`, the memory fit's split:
      norms, routers, MLA's down-projections and KV heads beyond ``n_kv_heads`` whole on every
      GPU, the rest ``1/tp``).  Under ``ep > 1`` (``ep = tp × dp``) ``n_tokens`` are one attention
      group's, and the ``E/ep`` experts on a GPU are hit by the tokens of all ``dp`` groups:
      ``expected_experts_hit(E, k, n_tokens · dp) / ep`` whole experts.  DeepSeek-V3 in FP8 at
      ``tp = 8``, one token: 5.70 GB per GPU, against 4.71 GB for an eighth of everything.

    ``cfg`` may be a bare parameter count ``N``: ``N · bytes`` per element of the format (no
    tensor list, so no scales and nothing kept in high precision; ``tp`` and ``ep`` must be 1).

    Raises:
        ValueError: ``cfg`` not a ModelConfig, a preset name or a parameter count in
            (0, :data:`~llm_dataflow.core.config.MAX_PARAM_COUNT`]; ``n_tokens`` < 1, unknown dtype/format or
            ``embedding``, a group size that does not divide, a layout
            :func:`~llm_dataflow.core.parallel.check_parallel` rejects (or ``tp``/``ep`` > 1 with a
            bare count).
            Counts (``n_tokens``) so large that a result overflows a float: a
            ValueError naming them.
    """
    cfg = as_model_or_count(cfg)
    require_positive("n_tokens", n_tokens)
    if embedding not in _EMBEDDING_MODES:
        raise ValueError(f"embedding={embedding!r} is not allowed; allowed: {', '.join(_EMBEDDING_MODES)}")
    if quant is not None and not isinstance(quant, QuantSpec):
        raise ValueError(f"quant={quant!r} is not allowed; give a QuantSpec or None")
    p = as_precision_plan(dtype)
    if quant is not None:
        p = PrecisionPlan(p.weights, quant, p.kv, p.activations, p.compute)
    if not isinstance(cfg, ModelConfig):
        _whole_only(tp, ep)
        # no tensor list: every parameter at the format's element width, no scales
        return cfg * dtype_bits(p.weights if p.quant is None else p.quant.weight_dtype) / 8
    tensor_shares(cfg, tp, ep)                   # checks the layout
    other, tables, expert = _weight_parts(cfg, p, tp, ep)
    total = float(other)
    for rows, b in tables:
        total += b if embedding == "table" else b * min(n_tokens, rows) / rows
    if expert:
        dp = ep // tp if ep > 1 else 1
        total += expert * expected_experts_hit(cfg.n_routed_experts, cfg.n_experts_per_token, n_tokens * dp)
    return total


# =============================================================================================
# KV, activations, collectives
# =============================================================================================
def kv_bytes(cfg, seq_len: int, batch: int = 1, kv_dtype="bf16") -> int:
    """KV-cache bytes of ``batch`` sequences of ``seq_len`` tokens (B): chapter 06's
    :func:`llm_dataflow.core.kv.kv_cache_bytes` (sliding windows and MLA's latent included).
    ``kv_dtype`` is a KV dtype name or a :class:`PrecisionPlan` (its KV dtype).

    Raises:
        ValueError: ``seq_len`` < 0, ``batch`` < 1, unknown dtype.
    """
    cfg = as_model_config(cfg)
    require_nonnegative("seq_len", seq_len)
    require_positive("batch", batch)
    kvd = kv_dtype.kv_dtype if isinstance(kv_dtype, PrecisionPlan) else check_dtype(kv_dtype, KV_DTYPES, "kv_dtype")
    return batch * _kv_seq(cfg, seq_len, kvd) if seq_len else 0


@functools.lru_cache(maxsize=8192)
def _kv_seq(cfg: ModelConfig, seq_len: int, kvd: str) -> int:
    return int(kv_cache_bytes(cfg, seq_len, 1, kvd))


@no_overflow('context_len', 'steps', 'batch')
def kv_read_over_steps(cfg, context_len: int, steps: int, batch: int = 1, kv_dtype="bf16") -> int:
    """KV bytes read by ``steps`` decode steps that start at ``context_len`` cached tokens (B):
    ``Σ_{i=1..steps} kv_bytes(cfg, context_len + i − 1, batch)``, in closed form per layer
    (a full layer holds ``n`` tokens, a sliding one ``min(n, W)``, a chunked one
    ``((n − 1) mod C) + 1``; a linear-attention model's fixed state is read once per step that
    starts from a non-empty sequence), so long generations cost no loop over steps.

    Raises:
        ValueError: negative ``context_len`` or ``steps``, ``batch`` < 1, unknown dtype.
            Counts (``context_len``, ``steps``, ``batch``) so large that a result overflows a float: a
            ValueError naming them.
    """
    cfg = as_model_config(cfg)
    require_nonnegative("context_len", context_len)
    require_nonnegative("steps", steps)
    require_positive("batch", batch)
    kvd = kv_dtype.kv_dtype if isinstance(kv_dtype, PrecisionPlan) else check_dtype(kv_dtype, KV_DTYPES, "kv_dtype")
    P, n = context_len, steps
    full = n * P + n * (n - 1) // 2                      # Σ_{i=1..n} (P + i − 1)
    total = 0
    for i in range(cfg.n_layers):
        held = full
        if cfg.layer_type(i) == "sliding_attention":
            W = cfg.sliding_window
            below = max(0, min(n, W - P))                 # steps whose context is still < W
            held = below * P + below * (below - 1) // 2 + (n - below) * W
        elif cfg.layer_type(i) == "chunked_attention":
            held = _chunk_prefix(P + n - 1, cfg.attention_chunk_size) - _chunk_prefix(P - 1, cfg.attention_chunk_size)
        total += held * kv_layer_bytes_per_token(cfg, i, kvd)
    if n:   # the state of a linear-attention model, once per step whose sequence is not empty
        total += (n - (P == 0)) * state_bytes_per_sequence(cfg, state_dtype_for(kvd))
    return batch * total


def _chunk_prefix(m: int, C: int) -> int:
    """``Σ_{j=1..m} (((j − 1) mod C) + 1)``: the tokens a chunked layer holds, summed over lengths 1..m."""
    if m <= 0:
        return 0
    q, r = divmod(m, C)
    return q * C * (C + 1) // 2 + r * (r + 1) // 2


@no_overflow('tokens', 'logits_rows')
def activation_bytes(cfg, tokens: int, dtype="bf16", *, tp: int = 1, ep: int = 1,
                     logits_rows: int | None = None) -> int:
    """Modelled workspace peak of one forward pass over ``tokens`` tokens on one GPU (B).

    The live activations inside one layer at its widest point, in the activation dtype: the
    residual stream and its normalised copy (``2·D`` per token, replicated under TP) plus the
    widest of

    * the attention projections' outputs (``q + k + v`` widths) and a dense or shared-expert
      MLP's ``gate + up + activated`` (``3·F``), split ``tp`` ways;
    * an MoE layer's fused-experts workspace, ``k · (max(2·F_e', D) + F_e')`` per token with
      ``F_e'`` an expert's width on this GPU (``F_e/tp``; whole under ``ep > 1``): vLLM's
      Triton ``fused_experts`` holds ``intermediate_cache1`` (``M × k × 2F_e'``, gate and up)
      and ``intermediate_cache3`` (``M × k × D``, each expert's output before the weighted sum)
      in one buffer of ``M·k·max(2F_e', D)`` elements, beside ``intermediate_cache2``
      (``M·k × F_e'``) — ``vllm/model_executor/layers/fused_moe/fused_moe.py``,
      ``fused_experts_impl`` (vllm-project/vllm at 000d1458).  The ``D``-wide part is not
      split by TP, so for DeepSeek-V3 it is most of a forward's activations;

    plus FP32 logits for ``logits_rows`` rows (default ``tokens``; a prefill needs only the last
    position's), split ``tp`` ways (vocab-parallel head).  Attention scores are not counted (a
    fused kernel keeps them on chip).  A serving engine measures this peak instead: vLLM
    profiles a dummy forward of its largest batch.

    Raises:
        ValueError: ``tokens`` < 1, ``tp`` or ``ep`` < 1, unknown dtype.
            Counts (``tokens``, ``logits_rows``) so large that a result overflows a float: a
            ValueError naming them.
    """
    cfg = as_model_config(cfg)
    require_positive("tokens", tokens)
    require_positive("tp", tp)
    require_positive("ep", ep)
    rows = tokens if logits_rows is None else require_nonnegative("logits_rows", logits_rows)
    elem = dtype_bytes(as_precision_plan(dtype).activation_dtype)
    if cfg.is_mla:
        qkv = cfg.n_heads * (cfg.qk_nope_head_dim + cfg.qk_rope_head_dim) + cfg.kv_lora_rank + cfg.qk_rope_head_dim
    else:
        qkv = (cfg.n_heads * (2 if cfg.attn_output_gate else 1) + 2 * cfg.n_kv_heads) * cfg.head_dim
    widths = [cfg.d_ff] if (not cfg.is_moe or cfg.dense_layers) else []
    if cfg.is_moe and cfg.n_shared_experts:
        widths.append(cfg.shared_d_ff)
    wide = max([qkv] + [3 * w for w in widths]) / tp
    if cfg.is_moe:
        f_e = cfg.moe_d_ff if ep > 1 else cfg.moe_d_ff / tp
        wide = max(wide, cfg.n_experts_per_token * (max(2 * f_e, cfg.d_model) + f_e))
    per_token = 2 * cfg.d_model * elem + wide * elem
    return math.ceil(tokens * per_token + rows * cfg.vocab_size * 4 / tp)


# =============================================================================================
# FLOPs and the bytes of one step
# =============================================================================================
def matmul_params(cfg, *, active: bool = True, tp: int = 1, ep: int = 1) -> int | float:
    """Weights that take part in a matrix multiply for one token (multiply–adds per token).

    Counts every linear weight of :func:`~llm_dataflow.core.config.tensor_specs` (attention, MLP,
    router, experts, ``lm_head``; the embedding table too when it is tied to the output layer).
    The input embedding is a gather (no FLOPs); norms and biases are element-wise.  With
    ``active=True`` an MoE counts only the ``n_experts_per_token`` routed experts a token uses.
    ``cfg`` may also be a bare parameter count: then every parameter is a matmul weight.

    With ``tp``/``ep`` > 1: what one GPU of that layout multiplies per token of its attention
    group — each weight times its :func:`~llm_dataflow.core.parallel.tensor_shares` share, so a
    replicated weight (a router, MLA's down-projections, surplus KV heads) is multiplied whole
    on every GPU.  Under EP the ``E/ep`` experts on a GPU serve the tokens of all ``dp = ep/tp``
    groups: ``k/tp`` of an expert per token with uniform routing.  A float unless tp = ep = 1.

    Raises:
        ValueError: ``cfg`` not a ModelConfig, a preset name or a parameter count in
            (0, :data:`~llm_dataflow.core.config.MAX_PARAM_COUNT`]; a layout
            :func:`~llm_dataflow.core.parallel.check_parallel` rejects (or tp/ep > 1 with a
            bare count).
    """
    cfg = as_model_or_count(cfg)
    if not isinstance(cfg, ModelConfig):
        _whole_only(tp, ep)
        return int(cfg)
    tensor_shares(cfg, tp, ep)                   # checks the layout
    return _matmul_params(cfg, bool(active), None, tp, ep)


def _whole_only(tp, ep) -> None:
    if (tp, ep) != (1, 1):
        raise ValueError(f"tp={tp!r}, ep={ep!r} are not allowed with a bare parameter count; "
                         "allowed: tp = ep = 1 (give a model to split)")


@functools.lru_cache(maxsize=512)
def _matmul_params(cfg: ModelConfig, active: bool, quant: QuantSpec | None, tp: int, ep: int) -> int | float:
    """Matmul weights per token on one GPU (all of them at tp = ep = 1, an exact integer);
    with ``quant``, only those it quantises (active experts only)."""
    dp = ep // tp if ep > 1 else 1
    n = 0
    for t, share in zip(tensor_specs(cfg), tensor_shares(cfg, tp, ep)):
        if t.in_features is None or (quant is not None and quant.keeps(t.name, t.role)):
            continue
        if (active or quant is not None) and t.role == "expert" and t.expert >= cfg.n_experts_per_token:
            continue
        if t.role == "expert" and ep > 1:
            share *= dp                          # the experts here serve all dp groups' tokens
        n += t.numel if share == 1 else t.numel * share
    if cfg.tie_embeddings and quant is None:
        # the tied table is the lm_head matmul (vocab-parallel under TP)
        n += cfg.vocab_size * cfg.d_model if tp == 1 else cfg.vocab_size * cfg.d_model / tp
    return n


def quantised_matmul_params(cfg: ModelConfig, quant: QuantSpec, tp: int = 1, ep: int = 1) -> int | float:
    """Matmul weights one token multiplies in the *quantised* format (active experts only):
    every linear weight whose role ``quant.keep`` does not keep in high precision; with
    ``tp``/``ep``, on one GPU as :func:`matmul_params`."""
    return _matmul_params(cfg, True, quant, tp, ep)


def _attn_width(cfg: ModelConfig, mla: str) -> int:
    """``d_qk + d_v`` per head of the score and mix matmuls."""
    if mla not in MLA_FORMS:
        raise ValueError(f"mla={mla!r} is not allowed; allowed: {', '.join(MLA_FORMS)}")
    if not cfg.is_mla:
        return 2 * cfg.head_dim
    if mla == "absorbed":
        return (cfg.kv_lora_rank + cfg.qk_rope_head_dim) + cfg.kv_lora_rank
    return (cfg.qk_nope_head_dim + cfg.qk_rope_head_dim) + cfg.v_head_dim


def attention_flops_per_token(cfg, attended: int, *, mla: str = "absorbed") -> int:
    """FLOPs of the attention *score and mix* matmuls for one query token that attends to
    ``attended`` key positions in every full-attention layer (sliding layers attend to
    ``min(attended, sliding_window)``).

    Per layer: ``QKᵀ`` is ``2·H·d_qk·S`` and ``P·V`` is ``2·H·d_v·S`` FLOPs (S = attended keys,
    d_qk = d_v = d_h).  Softmax is not counted.  Source: Kaplan et al. 2020, arXiv:2001.08361,
    Table 1, written per layer.  A chunked layer attends to ``((attended − 1) mod C) + 1`` keys.
    A linear-attention layer (Gated DeltaNet, Yang et al. 2024, arXiv:2412.06464: ``S_t =
    α_t·S_{t−1}(I − β_t k_t k_tᵀ) + β_t v_t k_tᵀ``, ``o_t = S_t q_t``) costs ``6·H_v·d_k·d_v``
    whatever the context: per value head the products ``S·k``, the rank-1 update and ``S·q``,
    ``2·d_k·d_v`` each (the decay and the short convolution are element-wise, not counted).

    MLA (DeepSeek-V2/V3, arXiv:2405.04434 §2.1.2): ``mla="absorbed"`` (default) is the form a
    decode kernel that reads only the cached latent computes — W_UK folded into the query and
    W_UV applied after the mix, so scores run over ``kv_lora_rank + qk_rope_head_dim`` (576)
    and the mix over ``kv_lora_rank`` (512): DeepSeek-V3, H = 128: ``2·128·(576 + 512)`` =
    278,528 FLOPs per cached key per layer (FlashMLA's decode kernel, deepseek-ai/FlashMLA).
    ``mla="naive"`` is the un-absorbed form prefill kernels run on up-projected K and V:
    ``2·H·(192 + 128)`` = 81,920.

    Raises:
        ValueError: ``attended`` negative, unknown ``mla``.
    """
    cfg = as_model_config(cfg)
    require_nonnegative("attended", attended)
    w = _attn_width(cfg, mla)
    total = 0
    for i in range(cfg.n_layers):
        s, lt = attended, cfg.layer_type(i)
        if lt == "linear_attention":
            total += _linear_attention_flops(cfg)
            continue
        if lt == "sliding_attention":
            s = min(s, cfg.sliding_window)
        elif lt == "chunked_attention" and s:
            s = (s - 1) % cfg.attention_chunk_size + 1
        total += 2 * cfg.n_heads * w * s
    return total


def _linear_attention_flops(cfg: ModelConfig) -> int:
    """FLOPs of one token through one Gated DeltaNet layer's recurrence: ``6·H_v·d_k·d_v``."""
    return 6 * cfg.linear_num_value_heads * cfg.linear_key_head_dim * cfg.linear_value_head_dim


def _causal_attention_flops(cfg: ModelConfig, prompt_len: int, mla: str) -> int:
    """Σ over query positions t = 1..T of attention FLOPs at t attended keys (a sliding layer
    attends to min(t, W))."""
    w_attn = _attn_width(cfg, mla)
    T = prompt_len
    total = 0
    for i in range(cfg.n_layers):
        lt = cfg.layer_type(i)
        if lt == "linear_attention":
            total += T * _linear_attention_flops(cfg)  # the recurrence, once per token
            continue
        if lt == "sliding_attention" and cfg.sliding_window < T:
            w = cfg.sliding_window
            keys = w * (w + 1) // 2 + (T - w) * w  # Σ_t min(t, W)
        elif lt == "chunked_attention":
            keys = _chunk_prefix(T, cfg.attention_chunk_size)  # Σ_t ((t − 1) mod C) + 1
        else:
            keys = T * (T + 1) // 2                # Σ_t t
        total += 2 * cfg.n_heads * w_attn * keys
    return total


def _no_context(context_len):
    if context_len:
        raise ValueError(f"context_len={context_len} needs a ModelConfig (its KV shape); with a bare "
                         "parameter count only context_len=0 (weights only) is allowed")


def decode_step_flops(cfg, batch: int = 1, context_len: int = 0, *, mla: str = "absorbed",
                      tp: int = 1, ep: int = 1) -> int | float:
    """FLOPs of one decode step: ``batch`` sequences each add one token after ``context_len``
    cached tokens.

    ``B · (2 · matmul_params(active) + attention_flops_per_token(cfg, context_len + 1, mla))``:
    the new token attends to the cached keys and to itself.  For a bare parameter count ``N``:
    ``2 · N · B`` (no attention, so ``context_len`` must be 0).  With ``tp``/``ep`` > 1, one
    GPU's FLOPs for ``batch`` sequences of its attention group: :func:`matmul_params` of that
    layout (replicated weights whole) and ``1/tp`` of the attention (each rank runs
    ``n_heads/tp`` query heads).

    Raises:
        ValueError: ``cfg`` not a ModelConfig, a preset name or a parameter count in
            (0, :data:`~llm_dataflow.core.config.MAX_PARAM_COUNT`]; ``batch`` < 1, ``context_len`` < 0, context with a
            bare count, unknown ``mla``, a layout :func:`~llm_dataflow.core.parallel.check_parallel` rejects.
    """
    cfg = as_model_or_count(cfg)
    require_positive("batch", batch)
    require_nonnegative("context_len", context_len)
    if not isinstance(cfg, ModelConfig):
        _no_context(context_len)
        _whole_only(tp, ep)
        return 2 * int(cfg) * batch
    attn = attention_flops_per_token(cfg, context_len + 1, mla=mla)
    return batch * (2 * matmul_params(cfg, tp=tp, ep=ep) + (attn if tp == 1 else attn / tp))


@no_overflow('batch', 'context_len')
def decode_step_bytes(cfg, batch: int = 1, context_len: int = 0, dtype="bf16", *,
                      kv_dtype: str | None = None, embedding: str = "rows", tp: int = 1, ep: int = 1) -> float:
    """Bytes one decode step must move between memory and the chip (lower bound).

    ``dtype`` is a weight-format name (:data:`WEIGHT_FORMATS`) or a :class:`PrecisionPlan`.
    Terms (and only these):

    1. weights, read once for the whole batch — :func:`weight_bytes_read` over ``batch`` tokens;
    2. the KV cache read: every sequence's ``context_len`` cached positions in every layer
       (:func:`kv_bytes` in the plan's KV dtype — BF16 for quantised weights unless
       ``kv_dtype`` says otherwise);
    3. the KV write of the new token: ``batch · kv_bytes_per_token``, and for a model with
       linear-attention layers the rewrite of each sequence's state
       (:func:`~llm_dataflow.core.kv.state_bytes_per_sequence`; its read is in term 2).

    Not included: activations (a fused kernel keeps them on chip), logits, the token ids.

    With ``tp``/``ep`` > 1, what one GPU of that layout moves for ``batch`` sequences of its
    attention group: :func:`weight_bytes_read` of the layout, the KV of its heads
    (:func:`~llm_dataflow.core.parallel.kv_heads_per_rank`: whole heads, replicated when
    ``tp > n_kv_heads``; MLA's latent whole) and ``1/tp`` of a hybrid's state.

    Raises:
        ValueError: ``cfg`` not a ModelConfig, a preset name or a parameter count in
            (0, :data:`~llm_dataflow.core.config.MAX_PARAM_COUNT`]; ``batch`` < 1, ``context_len`` < 0, unknown dtype,
            context with a bare count, a layout :func:`~llm_dataflow.core.parallel.check_parallel` rejects.
            Counts (``batch``, ``context_len``) so large that a result overflows a float: a
            ValueError naming them.
    """
    cfg = as_model_or_count(cfg)
    require_positive("batch", batch)
    require_nonnegative("context_len", context_len)
    p = as_precision_plan(dtype, kv_dtype)
    w = weight_bytes_read(cfg, p, batch, embedding=embedding, tp=tp, ep=ep)
    if not isinstance(cfg, ModelConfig):
        _no_context(context_len)
        return w
    kvd = p.kv_dtype
    state = state_bytes_per_sequence(cfg, state_dtype_for(kvd))
    # per sequence: the cached KV read (its state included once the sequence is not empty),
    # the new token's KV written and the state rewritten
    kv = (_kv_seq(cfg, context_len, kvd) - state if context_len else 0) + kv_token_bytes(cfg, kvd)
    state_moved = (2 if context_len else 1) * state
    if tp == 1:
        return w + batch * (kv + state_moved)
    return w + batch * (kv * kv_heads_per_rank(cfg, tp) + state_moved / tp)


def prefill_flops(cfg, prompt_len: int, batch: int = 1, *, all_logits: bool = False, mla: str = "naive",
                  tp: int = 1, ep: int = 1) -> int | float:
    """FLOPs of a prefill of ``batch`` prompts of ``prompt_len`` tokens from an empty cache.

    ``B · (2 · matmul_params_without_lm_head · T + 2 · V·D · T_out + causal attention)`` where
    ``T_out`` = 1 (only the last position's logits pick the next token, as serving engines do)
    or T with ``all_logits=True``.  Causal attention counts the lower triangle (query t attends
    to t keys, ``min(t, W)`` in a sliding layer), as a kernel that skips masked tiles does.
    MLA prefill defaults to the un-absorbed form (``mla="naive"``), which prefill kernels run.
    For a bare count ``N``: ``2 · N · T · B``.  With ``tp``/``ep`` > 1, one GPU's FLOPs for
    ``batch`` prompts of its attention group, as :func:`decode_step_flops` splits them (the LM
    head is vocab-parallel, ``1/tp``).

    Raises:
        ValueError: ``cfg`` not a ModelConfig, a preset name or a parameter count in
            (0, :data:`~llm_dataflow.core.config.MAX_PARAM_COUNT`]; ``prompt_len`` or ``batch`` < 1, unknown ``mla``,
            a layout :func:`~llm_dataflow.core.parallel.check_parallel` rejects.
    """
    cfg = as_model_or_count(cfg)
    require_positive("prompt_len", prompt_len)
    require_positive("batch", batch)
    if not isinstance(cfg, ModelConfig):
        _whole_only(tp, ep)
        return 2 * int(cfg) * prompt_len * batch
    head = cfg.vocab_size * cfg.d_model
    t_out = prompt_len if all_logits else 1
    attn = _causal_attention_flops(cfg, prompt_len, mla)
    if tp == 1 and ep == 1:
        body = matmul_params(cfg) - head
        return batch * (2 * body * prompt_len + 2 * head * t_out + attn)
    body = matmul_params(cfg, tp=tp, ep=ep) - head / tp
    return batch * (2 * body * prompt_len + 2 * head / tp * t_out + attn / tp)


@no_overflow('prompt_len', 'batch')
def prefill_bytes(cfg, prompt_len: int, batch: int = 1, dtype="bf16", *,
                  kv_dtype: str | None = None, embedding: str = "rows", tp: int = 1, ep: int = 1) -> float:
    """Bytes a prefill must move (lower bound): the weights read once (:func:`weight_bytes_read`
    over ``B·T`` tokens — every MoE expert the tokens touch) plus the KV cache written for
    ``B·T`` positions.  Not included: activations, attention scores (a flash kernel keeps them
    on chip), logits.  With ``tp``/``ep`` > 1, one GPU's bytes for ``batch`` prompts of its
    attention group, split as :func:`decode_step_bytes` splits them.

    Raises:
        ValueError: ``cfg`` not a ModelConfig, a preset name or a parameter count in
            (0, :data:`~llm_dataflow.core.config.MAX_PARAM_COUNT`]; ``prompt_len`` or ``batch`` < 1, unknown dtype,
            a layout :func:`~llm_dataflow.core.parallel.check_parallel` rejects.
            Counts (``prompt_len``, ``batch``) so large that a result overflows a float: a
            ValueError naming them.
    """
    cfg = as_model_or_count(cfg)
    require_positive("prompt_len", prompt_len)
    require_positive("batch", batch)
    p = as_precision_plan(dtype, kv_dtype)
    w = weight_bytes_read(cfg, p, batch * prompt_len, embedding=embedding, tp=tp, ep=ep)
    if not isinstance(cfg, ModelConfig):
        return w
    if tp == 1:
        return w + batch * _kv_seq(cfg, prompt_len, p.kv_dtype)
    state = state_bytes_per_sequence(cfg, state_dtype_for(p.kv_dtype))
    return w + batch * ((_kv_seq(cfg, prompt_len, p.kv_dtype) - state) * kv_heads_per_rank(cfg, tp) + state / tp)
