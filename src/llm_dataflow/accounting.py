"""The one accounting model: every byte and FLOP a chapter's calculator shows comes from here.

One setting — a model (:class:`~llm_dataflow.config.ModelConfig`), a :class:`PrecisionPlan`
(weights as a dtype or a :class:`QuantSpec`, the KV-cache dtype, the activation and compute
dtypes), a batch, a context and a parallel layout — gives one set of numbers, whichever chapter
asks:

* **weights** — bytes stored (:func:`weight_bytes`) and bytes one forward pass must read
  (:func:`weight_bytes_read`: MoE experts the tokens are expected to touch, embedding rows
  gathered or the table, scales and zero points of quantised formats);
* **KV cache** — :func:`kv_bytes` (chapter 06's formula, :func:`llm_dataflow.kv.kv_cache_bytes`,
  in the plan's KV dtype: BF16 unless asked otherwise, whatever the weights are);
* **activations** — :func:`activation_bytes`, the workspace peak of one forward pass;
* **collectives** — :func:`tp_bytes_per_token_per_layer`, :func:`ep_bytes_per_token`;
* **FLOPs and step bytes** — :func:`decode_step_flops`, :func:`decode_step_bytes`,
  :func:`prefill_flops`, :func:`prefill_bytes`, which the roofline bounds
  (:mod:`llm_dataflow.roofline`) divide by a chip's peaks;
* **fit** — :func:`check_parallel` (the one TP/PP/EP degree check) and :func:`memory_fit`
  (weights + KV + activations + a stated runtime reserve against one GPU's capacity).

Units: bytes (B), FLOPs; GB = 1e9 B.  Shapes use ``book/notation.md``'s letters.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from .config import ModelConfig, model_config, tensor_specs
from .units import GB, check_dtype, dtype_bits, dtype_bytes, require_nonnegative, require_positive

__all__ = [
    # formats and plans
    "QuantSpec", "PrecisionPlan", "precision_plan", "WEIGHT_FORMATS",
    # bytes
    "weight_bytes", "weight_bytes_read", "layer_weight_bytes", "expected_experts_hit", "kv_bytes", "kv_read_over_steps", "activation_bytes",
    "tp_bytes_per_token_per_layer", "ep_bytes_per_token",
    # FLOPs and step totals
    "matmul_params", "attention_flops_per_token", "decode_step_flops", "decode_step_bytes",
    "prefill_flops", "prefill_bytes", "MLA_FORMS",
    # layout and fit
    "check_parallel", "valid_tp_degrees", "MemoryFit", "memory_fit", "RUNTIME_RESERVE_FRACTION",
]

_FLOAT_DTYPES = ("fp32", "fp16", "bf16")
_EMBEDDING_MODES = ("rows", "table")
#: MLA attention forms: ``"absorbed"`` (decode kernels that read only the latent, e.g. FlashMLA)
#: and ``"naive"`` (K and V up-projected per head; prefill kernels).
MLA_FORMS = ("absorbed", "naive")
#: Share of a GPU's memory a serving engine leaves for its runtime by default: vLLM's
#: ``gpu_memory_utilization`` defaults to 0.9 (vLLM docs, "Engine Arguments"), and the other
#: 10 % holds the CUDA context, NCCL buffers, CUDA graphs and allocator slack.
RUNTIME_RESERVE_FRACTION = 0.10


# =============================================================================================
# weight formats
# =============================================================================================
@dataclass(frozen=True)
class QuantSpec:
    """How linear weights are stored when quantised.

    Attributes:
        weight_dtype: ``"int8"``, ``"int4"``, ``"fp8"`` / ``"fp8_e4m3"`` / ``"fp8_e5m2"`` (8 bits)
            or ``"fp4"`` (E2M1, 4 bits).
        group_size: elements along the input dimension sharing one scale (``None`` = per output
            channel: one scale per row).  Must divide each quantised tensor's ``in_features``.
        block_shape: ``(rows, cols)`` 2-D blocks sharing one scale (FP8 block scaling as in
            DeepSeek-V3's ``weight_block_size: [128, 128]``); partial edge blocks get a scale too.
        scale_dtype: dtype of the group/block scales (``"fp32"``, ``"fp16"``, ``"bf16"``,
            ``"fp8_e4m3"`` as NVFP4 uses, ``"e8m0"`` as the OCP MX formats use).
        zero_point: asymmetric quantisation stores one zero point per group, packed in
            ``weight_dtype`` bits (as GPTQ/AWQ pack INT4 zeros).
        tensor_scale_dtype: a second-level scale, one per tensor (NVFP4: FP32), or ``None``.
        keep: roles left in the plan's unquantised dtype (default: embeddings, lm_head, norms,
            router, biases).

    Bytes of a quantised ``[out, in]`` weight: ``ceil(out·in·bits/8) + n_groups·scale_bytes
    (+ ceil(n_groups·bits/8) with zero points) (+ one tensor scale)``.

    Raises:
        ValueError: unknown dtypes, non-positive group size, both group and block given.
    """

    weight_dtype: str
    group_size: int | None = None
    block_shape: tuple | None = None
    scale_dtype: str = "fp16"
    zero_point: bool = False
    keep: tuple = ("embedding", "position_embedding", "lm_head", "norm", "router", "bias")
    tensor_scale_dtype: str | None = None

    def __post_init__(self):
        check_dtype(self.weight_dtype, ("int8", "int4", "fp8", "fp8_e4m3", "fp8_e5m2", "fp4"), "weight_dtype")
        check_dtype(self.scale_dtype, ("fp32", "fp16", "bf16", "fp8_e4m3", "e8m0"), "scale_dtype")
        if self.tensor_scale_dtype is not None:
            check_dtype(self.tensor_scale_dtype, ("fp32", "fp16", "bf16"), "tensor_scale_dtype")
        if self.group_size is not None:
            require_positive("group_size", self.group_size)
        if self.block_shape is not None:
            if self.group_size is not None:
                raise ValueError("give either group_size or block_shape, not both")
            if len(self.block_shape) != 2:
                raise ValueError(f"block_shape={self.block_shape!r} must be (rows, cols)")
            for v in self.block_shape:
                require_positive("block_shape", v)
        if not isinstance(self.keep, tuple):
            raise ValueError(f"keep={self.keep!r} must be a tuple of role names")

    @classmethod
    def int8_per_channel(cls, scale_dtype: str = "fp16") -> "QuantSpec":
        """INT8 symmetric, one scale per output channel (LLM.int8-style weight storage)."""
        return cls("int8", None, None, scale_dtype, False)

    @classmethod
    def int4_groupwise(cls, group_size: int = 128, scale_dtype: str = "fp16", zero_point: bool = True) -> "QuantSpec":
        """INT4 asymmetric, one scale and one 4-bit zero point per ``group_size`` inputs (GPTQ/AWQ layout)."""
        return cls("int4", group_size, None, scale_dtype, zero_point)

    @classmethod
    def fp8_block(cls, block: int = 128, scale_dtype: str = "fp32") -> "QuantSpec":
        """FP8 (E4M3) with one FP32 scale per ``block × block`` tile (DeepSeek-V3 checkpoint layout)."""
        return cls("fp8_e4m3", None, (block, block), scale_dtype, False)

    @classmethod
    def nvfp4(cls) -> "QuantSpec":
        """NVFP4: E2M1 values, one FP8 E4M3 scale per 16 consecutive elements and one FP32 scale
        per tensor — 4.5 bits per element plus 4 B per tensor.  Source: NVIDIA Technical Blog,
        "Introducing NVFP4 for Efficient and Accurate Low-Precision Inference" (2025)."""
        return cls("fp4", 16, None, "fp8_e4m3", False, tensor_scale_dtype="fp32")

    @classmethod
    def mxfp4(cls) -> "QuantSpec":
        """MXFP4: E2M1 values with one shared E8M0 (power-of-two) scale per block of 32 —
        4.25 bits per element.  Source: OCP Microscaling Formats (MX) Specification v1.0 (2023),
        §5 (block size 32, E8M0 scale) and §5.3.3 (FP4 E2M1 elements)."""
        return cls("fp4", 32, None, "e8m0", False)

    def n_groups(self, shape: tuple, in_features: int) -> int:
        """Number of scales for a weight of ``shape`` whose input dimension is ``in_features``.

        Raises:
            ValueError: ``group_size`` does not divide ``in_features``.
        """
        numel = math.prod(shape)
        n_out = numel // in_features
        if self.block_shape is not None:
            br, bc = self.block_shape
            return math.ceil(n_out / br) * math.ceil(in_features / bc)
        g = self.group_size or in_features
        if in_features % g:
            raise ValueError(f"group_size={g} does not divide in_features={in_features}; choose a divisor")
        return n_out * (in_features // g)

    def tensor_bytes(self, shape: tuple, in_features: int) -> int:
        """Stored bytes of one quantised weight (values + scales + zero points + tensor scale)."""
        bits = dtype_bits(self.weight_dtype)
        groups = self.n_groups(shape, in_features)
        nbytes = math.ceil(math.prod(shape) * bits / 8) + groups * dtype_bits(self.scale_dtype) // 8
        if self.zero_point:
            nbytes += math.ceil(groups * bits / 8)
        if self.tensor_scale_dtype is not None:
            nbytes += dtype_bits(self.tensor_scale_dtype) // 8
        return nbytes

    @property
    def is_float(self) -> bool:
        """True for FP8 and FP4 formats (tensor cores multiply them directly)."""
        return self.weight_dtype.startswith("fp")


#: Weight formats by name (``plan --weights NAME``, the calculators): ``None`` = unquantised.
#: ``int4`` is symmetric group-128 with FP16 scales (the format ``QuantSpec("int4", group_size=128)``
#: describes); ``int4-zp`` adds GPTQ/AWQ's 4-bit zero points.
WEIGHT_FORMATS: dict = {
    "fp32": None, "bf16": None, "fp16": None,
    "int8": QuantSpec.int8_per_channel(),
    "int4": QuantSpec("int4", group_size=128),
    "int4-zp": QuantSpec.int4_groupwise(128),
    "fp8": QuantSpec.fp8_block(128),
    "nvfp4": QuantSpec.nvfp4(),
    "fp4": QuantSpec.nvfp4(),
    "mxfp4": QuantSpec.mxfp4(),
}


@dataclass(frozen=True)
class PrecisionPlan:
    """The dtypes of one deployment.

    Attributes:
        weights: dtype of every unquantised weight (``"fp32"``, ``"fp16"``, ``"bf16"``); with
            ``quant``, the dtype of the roles ``quant.keep`` leaves unquantised.
        quant: the linear weights' :class:`QuantSpec`, or ``None``.
        kv: KV-cache dtype; default the activation dtype (BF16 for quantised weights — weight-only
            quantisation leaves the cache alone).
        activations: activation dtype; default ``weights``.
        compute: dtype of the matmul arithmetic (whose peak FLOP/s bounds compute); default
            :meth:`compute_dtype`.
        name: a label (the format name it was built from).

    Raises:
        ValueError: unknown dtypes.
    """

    weights: str = "bf16"
    quant: QuantSpec | None = None
    kv: str | None = None
    activations: str | None = None
    compute: str | None = None
    name: str = ""

    def __post_init__(self):
        check_dtype(self.weights, _FLOAT_DTYPES, "weights")
        if self.quant is not None and not isinstance(self.quant, QuantSpec):
            raise ValueError(f"quant={self.quant!r} is not allowed; give a QuantSpec or None")
        if self.activations is not None:
            check_dtype(self.activations, _FLOAT_DTYPES, "activations")
        if self.kv is not None:
            from .kv import KV_DTYPES
            check_dtype(self.kv, KV_DTYPES, "kv")
        if self.compute is not None:
            check_dtype(self.compute, field="compute")

    @property
    def activation_dtype(self) -> str:
        """Activation dtype in effect."""
        return self.activations or self.weights

    @property
    def kv_dtype(self) -> str:
        """KV-cache dtype in effect."""
        return self.kv or self.activation_dtype

    def compute_dtype(self, hw=None) -> str:
        """The dtype whose peak FLOP/s bounds the matmuls on ``hw``.

        ``compute`` when given; else, for FP8/FP4 weights on a chip with a peak for that format,
        the format itself (activations quantised on the fly, as FP8 W8A8 and NVFP4 W4A4 kernels
        do); else the activation dtype (weight-only INT8/INT4 kernels dequantise to BF16 before
        the tensor-core multiply).
        """
        if self.compute:
            return self.compute
        if self.quant is not None and self.quant.is_float and hw is not None:
            fmt = "fp8" if self.quant.weight_dtype.startswith("fp8") else "fp4"
            try:
                hw.flops(fmt)
                return fmt
            except ValueError:
                pass
        return self.activation_dtype

    @property
    def label(self) -> str:
        """Short name: the format name, or the weight dtype."""
        return self.name or (self.weights if self.quant is None else f"{self.quant.weight_dtype} weights")


def precision_plan(weights="bf16", *, kv: str | None = None, activations: str | None = None,
                   compute: str | None = None) -> PrecisionPlan:
    """A :class:`PrecisionPlan` from a weight-format name (:data:`WEIGHT_FORMATS`), a
    :class:`QuantSpec` (unquantised roles in BF16) or a plan (returned with the overrides applied).

    Raises:
        ValueError: unknown format name or dtype.
    """
    if isinstance(weights, PrecisionPlan):
        p = weights
        return PrecisionPlan(p.weights, p.quant, kv or p.kv, activations or p.activations,
                             compute or p.compute, p.name)
    if isinstance(weights, QuantSpec):
        return PrecisionPlan("bf16", weights, kv, activations, compute)
    if not isinstance(weights, str) or weights not in WEIGHT_FORMATS:
        raise ValueError(f"weights (dtype)={weights!r} is not a weight format; allowed: "
                         f"{', '.join(WEIGHT_FORMATS)}, a QuantSpec or a PrecisionPlan")
    q = WEIGHT_FORMATS[weights]
    return PrecisionPlan(weights if q is None else "bf16", q, kv, activations, compute, weights)


@functools.lru_cache(maxsize=256)
def _plan(dtype) -> PrecisionPlan:
    return precision_plan(dtype)


def _as_plan(dtype, kv_dtype=None, compute_dtype=None) -> PrecisionPlan:
    p = dtype if isinstance(dtype, PrecisionPlan) else _plan(dtype)
    if kv_dtype is not None or compute_dtype is not None:
        p = precision_plan(p, kv=kv_dtype, compute=compute_dtype)
    return p


def _cfg(cfg):
    """A ModelConfig, a preset name, or a bare parameter count (int/float > 0)."""
    if isinstance(cfg, ModelConfig):
        return cfg
    if isinstance(cfg, str):
        return model_config(cfg)
    if isinstance(cfg, (int, float)) and not isinstance(cfg, bool):
        require_positive("cfg (parameter count)", cfg, integer=False)
        if not math.isfinite(cfg):
            raise ValueError(f"cfg={cfg!r} is not allowed; a parameter count must be finite")
        return cfg
    raise ValueError(f"cfg={cfg!r} is not allowed; give a ModelConfig, a preset name or a parameter count")


def _model(cfg) -> ModelConfig:
    c = _cfg(cfg)
    if not isinstance(c, ModelConfig):
        raise ValueError(f"cfg={cfg!r} is not allowed here; give a ModelConfig or a preset name")
    return c


# =============================================================================================
# weight bytes
# =============================================================================================
def _tensor_bytes(t, dtype: str, quant: QuantSpec | None) -> int:
    if quant is not None and t.in_features is not None and t.role not in quant.keep:
        return quant.tensor_bytes(t.shape, t.in_features)
    return math.ceil(t.numel * dtype_bits(dtype) / 8)


@functools.lru_cache(maxsize=4096)
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
    cfg = _model(cfg)
    if quant is not None and not isinstance(quant, QuantSpec):
        raise ValueError(f"quant={quant!r} is not allowed; give a QuantSpec or None")
    p = _as_plan(dtype)
    q = quant if quant is not None else p.quant
    return sum(_tensor_bytes(t, p.weights, q) for t in tensor_specs(cfg))


def layer_weight_bytes(cfg, dtype="bf16") -> int:
    """Bytes of the decoder layers' weights only (B): :func:`weight_bytes` less the embedding
    tables, the final norm and the output head — what layer-by-layer offload streams to the GPU
    each forward pass while those stay resident (chapter 01).

    Raises:
        ValueError: as :func:`weight_bytes`.
    """
    cfg = _model(cfg)
    p = _as_plan(dtype)
    return sum(_tensor_bytes(t, p.weights, p.quant) for t in tensor_specs(cfg) if t.layer is not None)


def expected_experts_hit(n_experts: int, k: int, n_tokens: int) -> float:
    """Expected number of distinct experts that ``n_tokens`` tokens route to, each choosing ``k``
    of ``n_experts`` uniformly: ``E · (1 − (1 − k/E)^n_tokens)`` (a balanced router; real routers
    are skewed, which hits fewer).

    Raises:
        ValueError: non-positive sizes or ``k > n_experts``.
    """
    require_positive("n_experts", n_experts)
    require_positive("k", k)
    require_positive("n_tokens", n_tokens)
    if k > n_experts:
        raise ValueError(f"k={k} is more than n_experts={n_experts}")
    return n_experts * (1 - (1 - k / n_experts) ** n_tokens)


@functools.lru_cache(maxsize=1024)
def _weight_parts(cfg: ModelConfig, p: PrecisionPlan) -> tuple:
    """(bytes of every tensor except gathered tables and routed experts, [(rows, bytes) of each
    gathered table], bytes of one routed expert summed over the MoE layers)."""
    other, experts, tables = 0, 0, []
    for t in tensor_specs(cfg):
        b = _tensor_bytes(t, p.weights, p.quant)
        if t.role == "expert":
            experts += b if t.expert == 0 else 0
        elif (t.role == "embedding" and not cfg.tie_embeddings) or t.role == "position_embedding":
            tables.append((t.shape[0], b))
        else:
            other += b
    return other, tuple(tables), experts


def weight_bytes_read(cfg, dtype="bf16", n_tokens: int = 1, quant: QuantSpec | None = None, *,
                      embedding: str = "rows") -> float:
    """Bytes of weights one forward pass over ``n_tokens`` tokens must read from memory (B),
    each weight read once however many tokens use it.

    * dense weights: all of them, as stored (:func:`weight_bytes`'s per-tensor bytes, scales
      and zero points included);
    * MoE routed experts: :func:`expected_experts_hit` per MoE layer (uniform routing; at one
      token exactly k) — hence a float;
    * gathered tables (the input embedding unless tied, learned position tables):
      ``embedding="rows"`` (default) reads only the ``min(n_tokens, V)`` gathered rows — the
      strict minimum; ``embedding="table"`` counts the whole table (gpt-fast's "model bytes"
      convention).  A tied table is read whole anyway, as the ``lm_head``.

    ``cfg`` may be a bare parameter count ``N``: ``N · bytes`` per element of the format (no
    tensor list, so no scales and nothing kept in high precision).

    Raises:
        ValueError: ``n_tokens`` < 1, unknown dtype/format or ``embedding``, a group size that
            does not divide.
    """
    cfg = _cfg(cfg)
    require_positive("n_tokens", n_tokens)
    if embedding not in _EMBEDDING_MODES:
        raise ValueError(f"embedding={embedding!r} is not allowed; allowed: {', '.join(_EMBEDDING_MODES)}")
    if quant is not None and not isinstance(quant, QuantSpec):
        raise ValueError(f"quant={quant!r} is not allowed; give a QuantSpec or None")
    p = _as_plan(dtype)
    if quant is not None:
        p = PrecisionPlan(p.weights, quant, p.kv, p.activations, p.compute)
    if not isinstance(cfg, ModelConfig):
        # no tensor list: every parameter at the format's element width, no scales
        return cfg * dtype_bits(p.weights if p.quant is None else p.quant.weight_dtype) / 8
    other, tables, expert = _weight_parts(cfg, p)
    total = float(other)
    for rows, b in tables:
        total += b if embedding == "table" else b * min(n_tokens, rows) / rows
    if expert:
        total += expert * expected_experts_hit(cfg.n_routed_experts, cfg.n_experts_per_token, n_tokens)
    return total


# =============================================================================================
# KV, activations, collectives
# =============================================================================================
def kv_bytes(cfg, seq_len: int, batch: int = 1, kv_dtype="bf16") -> int:
    """KV-cache bytes of ``batch`` sequences of ``seq_len`` tokens (B): chapter 06's
    :func:`llm_dataflow.kv.kv_cache_bytes` (sliding windows and MLA's latent included).
    ``kv_dtype`` is a KV dtype name or a :class:`PrecisionPlan` (its KV dtype).

    Raises:
        ValueError: ``seq_len`` < 0, ``batch`` < 1, unknown dtype.
    """
    from .kv import KV_DTYPES
    cfg = _model(cfg)
    require_nonnegative("seq_len", seq_len)
    require_positive("batch", batch)
    kvd = kv_dtype.kv_dtype if isinstance(kv_dtype, PrecisionPlan) else check_dtype(kv_dtype, KV_DTYPES, "kv_dtype")
    return batch * _kv_seq(cfg, seq_len, kvd) if seq_len else 0


@functools.lru_cache(maxsize=8192)
def _kv_seq(cfg: ModelConfig, seq_len: int, kvd: str) -> int:
    from .kv import kv_cache_bytes
    return int(kv_cache_bytes(cfg, seq_len, 1, kvd))


@functools.lru_cache(maxsize=1024)
def _kv_token(cfg: ModelConfig, kvd: str) -> int:
    from .kv import kv_bytes_per_token
    return int(kv_bytes_per_token(cfg, kvd))


def kv_read_over_steps(cfg, context_len: int, steps: int, batch: int = 1, kv_dtype="bf16") -> int:
    """KV bytes read by ``steps`` decode steps that start at ``context_len`` cached tokens (B):
    ``Σ_{i=1..steps} kv_bytes(cfg, context_len + i − 1, batch)``, in closed form per layer
    (a full layer holds ``n`` tokens, a sliding one ``min(n, W)``), so long generations cost no
    loop over steps.

    Raises:
        ValueError: negative ``context_len`` or ``steps``, ``batch`` < 1, unknown dtype.
    """
    from .kv import KV_DTYPES, kv_layer_bytes_per_token
    cfg = _model(cfg)
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
        total += held * kv_layer_bytes_per_token(cfg, i, kvd)
    return batch * total


def activation_bytes(cfg, tokens: int, dtype="bf16", *, tp: int = 1, logits_rows: int | None = None) -> int:
    """Modelled workspace peak of one forward pass over ``tokens`` tokens on one GPU (B).

    The live activations inside one layer at its widest point, in the activation dtype: the
    residual stream and its normalised copy (``2·D`` per token, replicated under TP) plus the
    wider of the attention projections' outputs (``q + k + v`` widths) and the MLP's
    ``gate + up + activated`` (``3·F``; an MoE layer's routed tokens at ``k·F_e`` plus the
    shared expert), both split ``tp`` ways; plus FP32 logits for ``logits_rows`` rows (default
    ``tokens``; a prefill needs only the last position's), split ``tp`` ways (vocab-parallel
    head).  Attention scores are not counted (a fused kernel keeps them on chip).  A serving
    engine measures this peak instead: vLLM profiles a dummy forward of its largest batch.

    Raises:
        ValueError: ``tokens`` < 1, ``tp`` < 1, unknown dtype.
    """
    cfg = _model(cfg)
    require_positive("tokens", tokens)
    require_positive("tp", tp)
    rows = tokens if logits_rows is None else require_nonnegative("logits_rows", logits_rows)
    elem = dtype_bytes(_as_plan(dtype).activation_dtype)
    if cfg.is_mla:
        qkv = cfg.n_heads * (cfg.qk_nope_head_dim + cfg.qk_rope_head_dim) + cfg.kv_lora_rank + cfg.qk_rope_head_dim
    else:
        qkv = (cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim
    widths = [cfg.d_ff] if (not cfg.is_moe or cfg.dense_layers) else []
    if cfg.is_moe:
        widths.append(cfg.n_experts_per_token * cfg.moe_d_ff + cfg.shared_d_ff)
    wide = max(qkv, 3 * max(widths))
    per_token = 2 * cfg.d_model * elem + wide * elem / tp
    return math.ceil(tokens * per_token + rows * cfg.vocab_size * 4 / tp)


def tp_bytes_per_token_per_layer(cfg, n_ranks: int, dtype="bf16") -> dict:
    """Tensor-parallel communication per token per layer (Megatron-LM, arXiv:1909.08053 §3).

    Two all-reduces per layer, each of one ``D``-vector per token in the activation dtype:
    ``handed = 2·D·elem`` bytes (what a rank gives ``all_reduce``) and, with ring all-reduce,
    ``sent = 2·2(N−1)/N·D·elem`` bytes leaving each rank.

    Returns:
        ``{"handed": bytes, "sent_per_rank": bytes, "all_reduces": 2}``.

    Raises:
        ValueError: unknown preset or dtype, a degree :func:`check_parallel` rejects.
    """
    from .collectives import collective_bytes_per_rank

    cfg = _model(cfg)
    check_parallel(cfg, tp=n_ranks)
    handed = 2 * cfg.d_model * dtype_bytes(_as_plan(dtype).activation_dtype)
    return {"handed": handed, "sent_per_rank": 2 * collective_bytes_per_rank("all_reduce", handed / 2, n_ranks),
            "all_reduces": 2}


def ep_bytes_per_token(cfg, n_ranks: int, dtype="bf16") -> dict:
    """Expected expert-parallel traffic per token per MoE layer with uniform routing: each of
    the k slots of a token goes to a remote rank with probability ``(N−1)/N``; dispatch and
    combine each move one ``D``-vector per remote slot (GShard, arXiv:2006.16668 §2).

    Returns ``{"dispatch": k·(N−1)/N·D·elem, "combine": same, "total": 2×}`` (bytes).

    Raises:
        ValueError: dense config, a degree :func:`check_parallel` rejects, unknown dtype.
    """
    cfg = _model(cfg)
    check_parallel(cfg, ep=n_ranks)
    one = cfg.n_experts_per_token * (n_ranks - 1) / n_ranks * cfg.d_model * dtype_bytes(
        _as_plan(dtype).activation_dtype)
    return {"dispatch": one, "combine": one, "total": 2 * one}


# =============================================================================================
# FLOPs and the bytes of one step
# =============================================================================================
def matmul_params(cfg, *, active: bool = True) -> int:
    """Weights that take part in a matrix multiply for one token (multiply–adds per token).

    Counts every linear weight of :func:`~llm_dataflow.config.tensor_specs` (attention, MLP,
    router, experts, ``lm_head``; the embedding table too when it is tied to the output layer).
    The input embedding is a gather (no FLOPs); norms and biases are element-wise.  With
    ``active=True`` an MoE counts only the ``n_experts_per_token`` routed experts a token uses.
    ``cfg`` may also be a bare parameter count: then every parameter is a matmul weight.

    Raises:
        ValueError: bad ``cfg``.
    """
    cfg = _cfg(cfg)
    if not isinstance(cfg, ModelConfig):
        return int(cfg)
    return _matmul_params(cfg, bool(active))


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
    Table 1, written per layer.

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
    cfg = _model(cfg)
    require_nonnegative("attended", attended)
    w = _attn_width(cfg, mla)
    total = 0
    for i in range(cfg.n_layers):
        s = attended
        if cfg.layer_type(i) == "sliding_attention":
            s = min(s, cfg.sliding_window)
        total += 2 * cfg.n_heads * w * s
    return total


def _causal_attention_flops(cfg: ModelConfig, prompt_len: int, mla: str) -> int:
    """Σ over query positions t = 1..T of attention FLOPs at t attended keys (a sliding layer
    attends to min(t, W))."""
    w_attn = _attn_width(cfg, mla)
    T = prompt_len
    total = 0
    for i in range(cfg.n_layers):
        if cfg.layer_type(i) == "sliding_attention" and cfg.sliding_window < T:
            w = cfg.sliding_window
            keys = w * (w + 1) // 2 + (T - w) * w  # Σ_t min(t, W)
        else:
            keys = T * (T + 1) // 2                # Σ_t t
        total += 2 * cfg.n_heads * w_attn * keys
    return total


def _no_context(context_len):
    if context_len:
        raise ValueError(f"context_len={context_len} needs a ModelConfig (its KV shape); with a bare "
                         "parameter count only context_len=0 (weights only) is allowed")


def decode_step_flops(cfg, batch: int = 1, context_len: int = 0, *, mla: str = "absorbed") -> int:
    """FLOPs of one decode step: ``batch`` sequences each add one token after ``context_len``
    cached tokens.

    ``B · (2 · matmul_params(active) + attention_flops_per_token(cfg, context_len + 1, mla))``:
    the new token attends to the cached keys and to itself.  For a bare parameter count ``N``:
    ``2 · N · B`` (no attention, so ``context_len`` must be 0).

    Raises:
        ValueError: ``batch`` < 1, ``context_len`` < 0, context with a bare count, unknown ``mla``.
    """
    cfg = _cfg(cfg)
    require_positive("batch", batch)
    require_nonnegative("context_len", context_len)
    if not isinstance(cfg, ModelConfig):
        _no_context(context_len)
        return 2 * int(cfg) * batch
    return batch * (2 * matmul_params(cfg) + attention_flops_per_token(cfg, context_len + 1, mla=mla))


def decode_step_bytes(cfg, batch: int = 1, context_len: int = 0, dtype="bf16", *,
                      kv_dtype: str | None = None, embedding: str = "rows") -> float:
    """Bytes one decode step must move between memory and the chip (lower bound).

    ``dtype`` is a weight-format name (:data:`WEIGHT_FORMATS`) or a :class:`PrecisionPlan`.
    Terms (and only these):

    1. weights, read once for the whole batch — :func:`weight_bytes_read` over ``batch`` tokens;
    2. the KV cache read: every sequence's ``context_len`` cached positions in every layer
       (:func:`kv_bytes` in the plan's KV dtype — BF16 for quantised weights unless
       ``kv_dtype`` says otherwise);
    3. the KV write of the new token: ``batch · kv_bytes_per_token``.

    Not included: activations (a fused kernel keeps them on chip), logits, the token ids.

    Raises:
        ValueError: ``batch`` < 1, ``context_len`` < 0, unknown dtype, context with a bare count.
    """
    cfg = _cfg(cfg)
    require_positive("batch", batch)
    require_nonnegative("context_len", context_len)
    p = _as_plan(dtype, kv_dtype)
    w = weight_bytes_read(cfg, p, batch, embedding=embedding)
    if not isinstance(cfg, ModelConfig):
        _no_context(context_len)
        return w
    kvd = p.kv_dtype
    return w + batch * (_kv_seq(cfg, context_len, kvd) if context_len else 0) + batch * _kv_token(cfg, kvd)


def prefill_flops(cfg, prompt_len: int, batch: int = 1, *, all_logits: bool = False, mla: str = "naive") -> int:
    """FLOPs of a prefill of ``batch`` prompts of ``prompt_len`` tokens from an empty cache.

    ``B · (2 · matmul_params_without_lm_head · T + 2 · V·D · T_out + causal attention)`` where
    ``T_out`` = 1 (only the last position's logits pick the next token, as serving engines do)
    or T with ``all_logits=True``.  Causal attention counts the lower triangle (query t attends
    to t keys, ``min(t, W)`` in a sliding layer), as a kernel that skips masked tiles does.
    MLA prefill defaults to the un-absorbed form (``mla="naive"``), which prefill kernels run.
    For a bare count ``N``: ``2 · N · T · B``.

    Raises:
        ValueError: ``prompt_len`` or ``batch`` < 1, unknown ``mla``.
    """
    cfg = _cfg(cfg)
    require_positive("prompt_len", prompt_len)
    require_positive("batch", batch)
    if not isinstance(cfg, ModelConfig):
        return 2 * int(cfg) * prompt_len * batch
    head = cfg.vocab_size * cfg.d_model
    body = matmul_params(cfg) - head
    t_out = prompt_len if all_logits else 1
    return batch * (2 * body * prompt_len + 2 * head * t_out + _causal_attention_flops(cfg, prompt_len, mla))


def prefill_bytes(cfg, prompt_len: int, batch: int = 1, dtype="bf16", *,
                  kv_dtype: str | None = None, embedding: str = "rows") -> float:
    """Bytes a prefill must move (lower bound): the weights read once (:func:`weight_bytes_read`
    over ``B·T`` tokens — every MoE expert the tokens touch) plus the KV cache written for
    ``B·T`` positions.  Not included: activations, attention scores (a flash kernel keeps them
    on chip), logits.

    Raises:
        ValueError: ``prompt_len`` or ``batch`` < 1, unknown dtype.
    """
    cfg = _cfg(cfg)
    require_positive("prompt_len", prompt_len)
    require_positive("batch", batch)
    p = _as_plan(dtype, kv_dtype)
    w = weight_bytes_read(cfg, p, batch * prompt_len, embedding=embedding)
    if not isinstance(cfg, ModelConfig):
        return w
    return w + batch * _kv_seq(cfg, prompt_len, p.kv_dtype)


# =============================================================================================
# parallel layout and memory fit
# =============================================================================================
def check_parallel(cfg, tp: int = 1, pp: int = 1, ep: int = 1) -> None:
    """The one check of tensor-, pipeline- and expert-parallel degrees (used by every function
    and calculator that splits a model).

    * TP must divide ``n_heads`` (each rank runs whole query heads) and the MLP/expert widths
      it splits (``d_ff``, ``moe_d_ff``, the shared expert's F).  KV heads: TP ≤ ``n_kv_heads``
      must divide them; TP > ``n_kv_heads`` must be a multiple of them, and each rank then holds
      a replica of one KV head (vLLM's rule, ``QKVParallelLinear``).  MLA's latent is shared by
      all heads and replicated on every rank.
    * PP must be ≤ ``n_layers``.
    * EP must divide ``n_routed_experts`` (an MoE only).

    Raises:
        ValueError: naming the degree, its value and the field it must fit.
    """
    cfg = _model(cfg)
    for f, v in (("tp", tp), ("pp", pp), ("ep", ep)):
        require_positive(f, v)
    dims = [("n_heads", cfg.n_heads)]
    if not cfg.is_moe or cfg.dense_layers:
        dims.append(("d_ff", cfg.d_ff))
    if cfg.is_moe:
        dims.append(("moe_d_ff", cfg.moe_d_ff))
        if cfg.n_shared_experts:
            dims.append(("shared_d_ff", cfg.shared_d_ff))
    for name, val in dims:
        if val % tp:
            raise ValueError(f"tensor parallel degree tp={tp} does not divide {name}={val}; "
                             f"allowed: divisors of {name}")
    if not cfg.is_mla:
        kv = cfg.n_kv_heads
        if (tp <= kv and kv % tp) or (tp > kv and tp % kv):
            raise ValueError(f"tensor parallel degree tp={tp} does not fit n_kv_heads={kv}; allowed: a divisor "
                             f"of {kv}, or a multiple of it (each rank then holds a replica of one KV head)")
    if pp > cfg.n_layers:
        raise ValueError(f"pipeline parallel degree pp={pp} is more than n_layers={cfg.n_layers}")
    if ep > 1:
        if not cfg.is_moe:
            raise ValueError(f"expert parallel degree ep={ep} needs an MoE model; {cfg.name} is dense")
        if cfg.n_routed_experts % ep:
            raise ValueError(f"expert parallel degree ep={ep} does not divide n_routed_experts="
                             f"{cfg.n_routed_experts}; allowed: divisors of n_routed_experts")


def valid_tp_degrees(cfg, max_degree: int = 64) -> list[int]:
    """Every TP degree ≤ ``max_degree`` that :func:`check_parallel` accepts (calculators offer
    only these)."""
    cfg = _model(cfg)
    out = []
    for t in range(1, max_degree + 1):
        try:
            check_parallel(cfg, tp=t)
        except ValueError:
            continue
        out.append(t)
    return out


def _kv_heads_per_rank(cfg: ModelConfig, tp: int) -> float:
    """Fraction of one sequence's KV a TP rank stores: ``max(n_kv_heads/tp, 1)/n_kv_heads``
    (replicated heads when tp > n_kv_heads); 1 for MLA (latent replicated)."""
    if cfg.is_mla:
        return 1.0
    return max(cfg.n_kv_heads // tp, 1) / cfg.n_kv_heads


@functools.lru_cache(maxsize=2048)
def _stage_weights(cfg: ModelConfig, p: PrecisionPlan, tp: int, pp: int) -> tuple[float, tuple]:
    """(bytes of the heaviest pipeline stage on one TP rank, the stages' layer ranges)."""
    from .parallel import layer_partition
    stages = layer_partition(cfg.n_layers, pp)
    per = [0.0] * pp
    stage_of = {}
    for s, (lo, hi) in enumerate(stages):
        for i in range(lo, hi):
            stage_of[i] = s
    kv_rep = _kv_heads_per_rank(cfg, tp) * cfg.n_kv_heads if not cfg.is_mla else None
    for t in tensor_specs(cfg):
        b = _tensor_bytes(t, p.weights, p.quant)
        if t.layer is None:                      # embedding on the first stage, head/final norm on the last
            s = 0 if t.role in ("embedding", "position_embedding") else pp - 1
        else:
            s = stage_of[t.layer]
        if t.role in ("norm", "router") or (t.role == "bias" and t.shape[0] == cfg.d_model):
            share = 1.0                          # replicated
        elif kv_rep is not None and any(k in t.name for k in ("k_proj", "v_proj")):
            share = kv_rep / cfg.n_kv_heads      # whole (possibly replicated) KV heads
        elif cfg.is_mla and "kv_a_proj" in t.name:
            share = 1.0
        else:
            share = 1.0 / tp                     # column/row-parallel, vocab-parallel tables
        per[s] += b * share
        if cfg.tie_embeddings and t.role == "embedding" and pp > 1:
            per[pp - 1] += b * share             # a tied head is a copy on the last stage
    return max(per), tuple(stages)


@dataclass(frozen=True)
class MemoryFit:
    """Whether one deployment fits, per GPU (all bytes per GPU, B).

    Attributes:
        capacity: the GPU's memory (datasheet, GB = 1e9 B).
        weights: weights on the busiest GPU (heaviest pipeline stage, this TP rank's shards).
        kv: KV cache of ``batch`` sequences at ``context`` tokens on that GPU.
        activations: :func:`activation_bytes` workspace for the largest forward pass.
        reserve: ``reserve_fraction × capacity`` kept for the runtime.
        kv_per_token: KV bytes one more token adds on that GPU.
        tp, pp, ep: the layout.
    """

    capacity: float
    weights: float
    kv: float
    activations: float
    reserve: float
    kv_per_token: float
    tp: int
    pp: int
    ep: int

    @property
    def used(self) -> float:
        """weights + KV + activations + reserve (B)."""
        return self.weights + self.kv + self.activations + self.reserve

    @property
    def fits(self) -> bool:
        """True when :attr:`used` ≤ :attr:`capacity`."""
        return self.used <= self.capacity

    @property
    def kv_room_bytes(self) -> float:
        """Bytes left for more KV after this batch's cache (negative when it does not fit)."""
        return self.capacity - self.used

    @property
    def kv_room_tokens(self) -> int:
        """Tokens whose KV still fits beside this batch (0 when none or it does not fit)."""
        return max(0, math.floor(self.kv_room_bytes / self.kv_per_token))

    @property
    def reason(self) -> str:
        """One line: ``"fits"``, or what exceeds the capacity."""
        gb = lambda x: f"{x / GB:,.1f} GB"  # noqa: E731
        if self.fits:
            return f"fits: {gb(self.used)} of {gb(self.capacity)} per GPU"
        if self.weights + self.reserve > self.capacity:
            return (f"does not fit: weights need {gb(self.weights)} per GPU, more than {gb(self.capacity)} "
                    f"less the {gb(self.reserve)} runtime reserve")
        return (f"does not fit: weights {gb(self.weights)} + KV {gb(self.kv)} + activations "
                f"{gb(self.activations)} + reserve {gb(self.reserve)} = {gb(self.used)} > {gb(self.capacity)}")


def memory_fit(cfg, hw, dtype="bf16", *, batch: int = 1, context: int = 0, prompt_len: int | None = None,
               tp: int = 1, pp: int = 1, ep: int = 1, kv_dtype: str | None = None,
               reserve_fraction: float = RUNTIME_RESERVE_FRACTION) -> MemoryFit:
    """Memory needed on the busiest GPU of a ``tp × pp`` deployment against its capacity.

    * weights: each tensor's stored bytes (:func:`weight_bytes`' per-tensor count) split as
      Megatron-style TP splits them — attention heads, MLP/expert widths and the vocabulary
      ``tp`` ways, norms and routers replicated, KV projections by whole KV heads (replicated
      when ``tp > n_kv_heads``) — and layers over ``pp`` stages (:func:`layer_partition`; the
      embedding on the first stage, the head on the last); the heaviest stage counts.  Expert
      parallelism (``ep``) places whole experts instead of slicing them: the same bytes per GPU
      with balanced placement, so it changes no total here.
    * KV: ``batch`` sequences of ``context`` tokens in the plan's KV dtype, for this stage's
      layers, this rank's KV heads (MLA's latent on every rank).
    * activations: :func:`activation_bytes` for the largest forward pass: a prefill of
      ``batch × prompt_len`` tokens (default ``context``), or one decode step.
    * reserve: ``reserve_fraction`` of capacity (default 10 %, vLLM's default
      ``gpu_memory_utilization = 0.9``).

    Raises:
        ValueError: unknown model/hardware/dtype, a layout :func:`check_parallel` rejects,
            ``batch`` < 1, ``context`` < 0, ``reserve_fraction`` outside [0, 1).
    """
    from .hardware import HardwareSpec, hardware
    cfg = _model(cfg)
    hw = hardware(hw) if isinstance(hw, str) else hw
    if not isinstance(hw, HardwareSpec):
        raise ValueError(f"hw={hw!r} is not allowed; give a hardware preset name or a HardwareSpec")
    check_parallel(cfg, tp, pp, ep)
    require_positive("batch", batch)
    require_nonnegative("context", context)
    if not isinstance(reserve_fraction, (int, float)) or not 0 <= reserve_fraction < 1:
        raise ValueError(f"reserve_fraction={reserve_fraction!r} is not allowed; allowed: 0 <= x < 1")
    p = _as_plan(dtype, kv_dtype)
    weights, stages = _stage_weights(cfg, p, tp, pp)
    lo, hi = max(stages, key=lambda r: r[1] - r[0])
    layer_share = (hi - lo) / cfg.n_layers
    head_share = _kv_heads_per_rank(cfg, tp)
    kv = kv_bytes(cfg, context, batch, p) * layer_share * head_share
    per_tok = _kv_token(cfg, p.kv_dtype) * layer_share * head_share
    prompt = context if prompt_len is None else require_nonnegative("prompt_len", prompt_len)
    act = activation_bytes(cfg, batch * max(prompt, 1), p, tp=tp, logits_rows=batch)
    return MemoryFit(hw.memory_bytes, weights, kv, act, reserve_fraction * hw.memory_bytes, per_tok, tp, pp, ep)
