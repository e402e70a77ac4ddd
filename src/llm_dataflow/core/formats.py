"""Weight formats and precision plans: the dtypes a deployment stores and computes in.

:class:`QuantSpec` describes a quantised weight layout and counts its exact bytes (values, scales,
zero points, tensor scales); :data:`WEIGHT_FORMATS` names the formats the book's calculators and
``python -m llm_dataflow plan`` offer; a :class:`PrecisionPlan` names the dtypes of one deployment
(weights, KV cache, activations, compute).  The byte and FLOP counts that use them live in
:mod:`llm_dataflow.core.accounting`.
"""
from __future__ import annotations

import dataclasses
import fnmatch
import functools
import math
import re
from dataclasses import dataclass

from .units import check_dtype, dtype_bits, require_nonnegative, require_positive

__all__ = ["QuantSpec", "PrecisionPlan", "precision_plan", "WEIGHT_FORMATS",
           "KV_DTYPES", "KV_QUANT_DTYPES", "MXFP4_MOE_BACKENDS"]
# also public, for the modules that take a dtype or a plan (not re-exported by ``ldf``): as_precision_plan

_FLOAT_DTYPES = ("fp32", "fp16", "bf16")
#: dtypes the KV cache may be stored in.
KV_DTYPES = ("fp32", "fp16", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2", "int8", "int4")
#: the ones that need scales (values are stored as ``x / scale``).
KV_QUANT_DTYPES = ("fp8", "fp8_e4m3", "fp8_e5m2", "int8", "int4")

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
        keep_modules: module names a checkpoint keeps in high precision (config.json's
            ``modules_to_not_convert``, ``ignore``, ``ignored_layers``): a plain name matches the
            module, its ancestors and any module ending in it (``"lm_head"``, ``"model.layers.0.mlp"``,
            ``"self_attn"``); ``*`` globs (``"model.layers.*.self_attn"``); ``"re:<regex>"`` matches
            from the start of the module name (compressed-tensors' convention).
        per_tensor: one scale per tensor (per-tensor FP8) instead of groups, blocks or channels.
        g_idx: int32 vectors of one entry per input channel stored with the tensor: 1 for GPTQ's
            group index ``g_idx`` (AutoGPTQ saves it whatever ``desc_act`` says), 2 once vLLM's
            Marlin kernel adds its ``g_idx_sort_indices`` for act-order: ``4·g_idx·in_features`` B.
        nested_group: scales are themselves quantised (bitsandbytes' double quantisation):
            one FP32 scale per ``nested_group`` group scales.
        per_tensor_bytes: further bytes every quantised tensor stores (a static FP32 input
            scale: 4; compressed-tensors' packed ``weight_shape``: 16; bitsandbytes' quant maps).
        source: where the spec comes from (e.g. ``"config.json quantization_config: gptq ..."``).
        engine_changes: how a serving engine's kernel changes the bytes after loading
            (:meth:`as_loaded`): ``"drop_zero_point"``, ``"drop_g_idx"``, ``"add_g_idx_sort"``,
            ``"mxfp4_moe"`` (vLLM's MXFP4 MoE backends: :data:`MXFP4_MOE_BACKENDS`).
        expert_padding: ``(I, H)``: the loaded routed experts' intermediate width per GPU is
            rounded up to a multiple of ``I`` and the hidden size to one of ``H`` (vLLM's MXFP4
            MoE kernels; ``None``: as stored).
        scale_copies: how many copies of the quantised experts' scales the engine holds (2 where
            vLLM's Triton backend keeps the loaded scales beside their swizzled copy).
        expert_bias_bits: bits of each routed expert's bias as loaded (32 where the kernel wants
            FP32 biases).
        loaded_backend: the engine's kernel this loaded layout is for (empty: as stored).
            vLLM's Marlin kernel (GPUs of compute capability 8.0 and later;
            ``vllm/model_executor/layers/quantization/kernels/mixed_precision/marlin.py``,
            ``MarlinLinearKernel.process_weights_after_loading``) replaces the zero points of a
            symmetric checkpoint and, without act-order, ``g_idx`` by empty tensors, and with
            act-order adds an int32 ``g_idx_sort_indices`` per input channel.

    Bytes of a quantised ``[out, in]`` weight: ``ceil(out·in·bits/8) + n_groups·scale_bytes
    (+ ceil(n_groups·bits/8) with zero points) (+ one tensor scale) (+ 4·g_idx·in)
    (+ 4·ceil(n_groups / nested_group)) + per_tensor_bytes``.

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
    keep_modules: tuple = ()
    per_tensor: bool = False
    g_idx: int = 0
    nested_group: int | None = None
    per_tensor_bytes: int = 0
    source: str = ""
    engine_changes: tuple = ()
    expert_padding: tuple | None = None
    scale_copies: int = 1
    expert_bias_bits: int = 16
    loaded_backend: str = ""

    def __post_init__(self):
        check_dtype(self.weight_dtype, ("int8", "int4", "fp8", "fp8_e4m3", "fp8_e5m2", "fp4"), "weight_dtype")
        check_dtype(self.scale_dtype, ("fp32", "fp16", "bf16", "fp8_e4m3", "e8m0", "int8"), "scale_dtype")
        if not isinstance(self.keep_modules, tuple) or not all(isinstance(m, str) for m in self.keep_modules):
            raise ValueError(f"keep_modules={self.keep_modules!r} must be a tuple of module names")
        _compiled(self.keep_modules)             # a bad re: pattern raises here, naming keep_modules
        if not isinstance(self.per_tensor, bool):
            raise ValueError(f"per_tensor={self.per_tensor!r} is not allowed; it must be True or False")
        require_nonnegative("g_idx", self.g_idx)
        if self.per_tensor and (self.group_size is not None or self.block_shape is not None):
            raise ValueError("per_tensor=True takes no group_size or block_shape")
        if self.nested_group is not None:
            require_positive("nested_group", self.nested_group)
        require_nonnegative("per_tensor_bytes", self.per_tensor_bytes)
        if self.expert_padding is not None:
            if (not isinstance(self.expert_padding, tuple) or len(self.expert_padding) != 2):
                raise ValueError(f"expert_padding={self.expert_padding!r} is not allowed; give (I, H) or None")
            for v in self.expert_padding:
                require_positive("expert_padding", v)
        require_positive("scale_copies", self.scale_copies)
        if self.expert_bias_bits not in (16, 32):
            raise ValueError(f"expert_bias_bits={self.expert_bias_bits!r} is not allowed; allowed: 16, 32")
        if not isinstance(self.engine_changes, tuple) or not set(self.engine_changes) <= set(_ENGINE_CHANGES):
            raise ValueError(f"engine_changes={self.engine_changes!r} is not allowed; allowed: a tuple of "
                             f"{', '.join(map(repr, _ENGINE_CHANGES))}")
        if not isinstance(self.source, str):
            raise ValueError(f"source={self.source!r} is not allowed; it must be a string")
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
        if self.per_tensor:
            return 1
        if self.block_shape is not None:
            br, bc = self.block_shape
            return math.ceil(n_out / br) * math.ceil(in_features / bc)
        g = self.group_size or in_features
        if in_features % g:
            raise ValueError(f"group_size={g} does not divide in_features={in_features}; choose a divisor")
        return n_out * (in_features // g)

    def tensor_parts(self, shape: tuple, in_features: int) -> dict:
        """Stored bytes of one quantised weight, part by part (B): ``"values"`` (the packed
        ``weight_dtype`` elements), ``"scales"`` (one per group, block, row or tensor),
        ``"zero_points"`` (packed like the values; 0 when symmetric), ``"g_idx"`` (int32 group
        indices, :attr:`g_idx`) and ``"other"`` (the second-level tensor scale, the nested scales
        of double quantisation and :attr:`per_tensor_bytes`).  They sum to :meth:`tensor_bytes`.

        Raises:
            ValueError: as :meth:`n_groups`.
        """
        bits = dtype_bits(self.weight_dtype)
        groups = self.n_groups(shape, in_features)
        other = self.per_tensor_bytes
        if self.tensor_scale_dtype is not None:
            other += dtype_bits(self.tensor_scale_dtype) // 8
        if self.nested_group is not None:
            other += 4 * math.ceil(groups / self.nested_group)
        return {"values": math.ceil(math.prod(shape) * bits / 8),
                "scales": groups * dtype_bits(self.scale_dtype) // 8,
                "zero_points": math.ceil(groups * bits / 8) if self.zero_point else 0,
                "g_idx": 4 * self.g_idx * in_features, "other": other}

    def tensor_bytes(self, shape: tuple, in_features: int) -> int:
        """Stored bytes of one quantised weight (values + scales + zero points + tensor scale):
        the sum of :meth:`tensor_parts`."""
        return sum(self.tensor_parts(shape, in_features).values())

    def as_loaded(self, architecture: str | None = None) -> "QuantSpec":
        """The spec of what a serving engine holds after loading: :attr:`engine_changes` applied
        (itself when there are none).

        ``architecture`` (a :class:`~llm_dataflow.core.hardware.HardwareSpec`'s, e.g.
        ``"Hopper"``): on Hopper vLLM runs GPTQ with its Machete kernel, not Marlin; Machete
        repacks only the values and scales, keeping the zero points and ``g_idx`` as loaded
        (plus its ``perm`` with act-order). vLLM ``kernels/mixed_precision/__init__.py``
        (``_POSSIBLE_KERNELS``: Machete before Marlin, Machete needs compute capability 9.0)
        and ``machete.py`` (``process_weights_after_loading``)."""
        if not self.engine_changes:
            return self
        ch = self.engine_changes
        if "mxfp4_moe" in ch:
            backend = MXFP4_MOE_BACKENDS.get(architecture)
            if backend is None:
                return dataclasses.replace(self, engine_changes=())
            name, pad, copies, bias_bits = backend
            return dataclasses.replace(self, expert_padding=pad, scale_copies=copies, expert_bias_bits=bias_bits,
                                       loaded_backend=name, engine_changes=())
        if architecture == "Hopper":
            return dataclasses.replace(self, g_idx=self.g_idx + ("add_g_idx_sort" in ch), engine_changes=())
        g = 0 if "drop_g_idx" in ch else self.g_idx + ("add_g_idx_sort" in ch)
        return dataclasses.replace(self, zero_point=self.zero_point and "drop_zero_point" not in ch, g_idx=g,
                                   engine_changes=())

    def keeps(self, name: str, role: str) -> bool:
        """Whether the checkpoint tensor ``name`` (Hugging Face naming, e.g.
        ``"model.layers.3.self_attn.q_proj.weight"``) of ``role`` stays unquantised: its role is
        in :attr:`keep`, or its module matches :attr:`keep_modules` (under its own name or the
        names other checkpoints give the same module: Mixtral's ``block_sparse_moe``, gpt-oss's
        ``mlp.router``)."""
        if role in self.keep:
            return True
        return bool(self.keep_modules) and _kept_module(name, self.keep_modules)

    @property
    def is_float(self) -> bool:
        """True for FP8 and FP4 formats (tensor cores multiply them directly)."""
        return self.weight_dtype.startswith("fp")


#: What :attr:`QuantSpec.engine_changes` may hold.
_ENGINE_CHANGES = ("drop_zero_point", "drop_g_idx", "add_g_idx_sort", "mxfp4_moe")
#: How vLLM holds an MXFP4 checkpoint's routed experts (gpt-oss) after loading, per GPU
#: architecture: ``{architecture: (backend, (I, H) padding, scale copies, expert bias bits)}``.
#: ``vllm/model_executor/layers/quantization/mxfp4.py`` (``Mxfp4MoEMethod.create_weights`` /
#: ``process_weights_after_loading``; ``mxfp4_round_up_hidden_size_and_intermediate_size`` in later
#: versions): Hopper runs the Triton kernels ("Using Triton backend" in vLLM 0.14.1's log,
#: vllm-project/vllm issue #33155): the intermediate size per GPU rounded to 64, the biases made
#: FP32, the weights swizzled in place but the loaded scales kept beside their swizzled copy
#: (``layer.w13_weight_scale`` is not freed); GPUs without FP4 (Ampere, Ada) run Marlin
#: ("Weight-only FP4 compression will be used leveraging the Marlin kernel"): ``n % 256 == 0``
#: and ``k % 128 == 0``, so the intermediate size is rounded to 128 and the hidden size to 256;
#: Blackwell runs FlashInfer's TRT-LLM kernels: both rounded to 256, FP32 biases.
MXFP4_MOE_BACKENDS = {
    "Hopper": ("vLLM Triton MXFP4 MoE", (64, 1), 2, 32),
    "Ampere": ("vLLM Marlin MXFP4 MoE (weight-only)", (128, 256), 1, 16),
    "Ada": ("vLLM Marlin MXFP4 MoE (weight-only)", (128, 256), 1, 16),
    "Blackwell": ("vLLM FlashInfer TRT-LLM MXFP4 MoE", (256, 256), 1, 32),
}
_ALIASES = ((".mlp.experts.", ".block_sparse_moe.experts."), (".gate_proj", ".w1"), (".up_proj", ".w3"),
            (".down_proj", ".w2"), (".mlp.gate", ".block_sparse_moe.gate"), (".mlp.gate", ".mlp.router"))


@functools.lru_cache(maxsize=64)
def _compiled(patterns: tuple) -> tuple:
    """A keep list as (plain names, their first components, one regex of the globs and ``re:``
    patterns or ``None``).

    Raises:
        ValueError: a ``re:`` pattern that is not a regular expression.
    """
    plain, alts = set(), []
    for pat in patterns:
        if pat.startswith("re:"):
            alts.append(f"(?:{pat[3:]}).*")                    # re.match: from the start of the name
            continue
        p = pat[:-len(".weight")] if pat.endswith(".weight") else pat
        if "*" in p or "?" in p or "[" in p:
            t = fnmatch.translate(p)                           # '(?s:<glob>)\\Z'
            alts.append(f"(?:{t[4:-3]})(?:\\..*)?")           # the module or an ancestor
        else:
            plain.add(p)
    try:
        rx = re.compile("(?s:" + "|".join(alts) + ")") if alts else None
    except re.error as err:
        raise ValueError(f"keep_modules={patterns!r} holds a pattern that is not a regular expression: {err}") from None
    return frozenset(plain), frozenset(p.split(".")[0] for p in plain), rx


@functools.lru_cache(maxsize=65536)
def _kept_module(name: str, patterns: tuple) -> bool:
    """``name``'s module (``name`` less ``.weight``/``.bias``) or one of its aliases matches a pattern:
    a plain name that is a run of whole components of the module (``"lm_head"``, ``"model.layers.0.mlp"``,
    ``"self_attn"``), a glob matching the module or an ancestor, or a ``re:`` regex matching from
    its start."""
    plain, heads, rx = _compiled(patterns)
    module = name.rsplit(".", 1)[0] if name.endswith((".weight", ".bias")) else name
    forms = {module}
    for a, b in _ALIASES:
        forms |= {f.replace(a, b) for f in forms if a in f}
    for f in forms:
        parts = f.split(".")
        for i, head in enumerate(parts):
            if head in heads and any(".".join(parts[i:j]) in plain for j in range(i + 1, len(parts) + 1)):
                return True
        if rx is not None and rx.fullmatch(f):
            return True
    return False


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


def as_precision_plan(dtype, kv_dtype=None, compute_dtype=None) -> PrecisionPlan:
    """``dtype`` (a weight-format name, a QuantSpec or a PrecisionPlan) as a PrecisionPlan, with
    ``kv_dtype`` / ``compute_dtype`` overriding its KV and compute dtypes when given (names are
    parsed once and cached: calculators ask for the same ones thousands of times).

    Raises:
        ValueError: an unknown format or dtype, or ``kv_dtype`` / ``compute_dtype`` not a name.
    """
    if isinstance(dtype, PrecisionPlan):
        p = dtype
    elif isinstance(dtype, str):
        p = _plan(dtype)          # cached: calculators parse the same names thousands of times
    else:
        p = precision_plan(dtype)  # a QuantSpec, or a bad value that raises ValueError
    if kv_dtype is not None and not isinstance(kv_dtype, str):
        raise ValueError(f"kv_dtype={kv_dtype!r} is not allowed; give a dtype name")
    if compute_dtype is not None and not isinstance(compute_dtype, str):
        raise ValueError(f"compute_dtype={compute_dtype!r} is not allowed; give a dtype name")
    if kv_dtype is not None or compute_dtype is not None:
        p = precision_plan(p, kv=kv_dtype, compute=compute_dtype)
    return p
