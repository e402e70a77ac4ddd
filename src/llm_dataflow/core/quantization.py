"""The checkpoint's own weight format, read from ``config.json``'s ``quantization_config``.

A quantised checkpoint says how its files store the weights; :func:`quant_spec_from_config`
turns that block into a :class:`~llm_dataflow.core.formats.QuantSpec` whose byte count is what the
files hold — values, scales, zero points, group indices and the modules kept in high precision —
and :class:`~llm_dataflow.core.config.ModelConfig` carries it as ``cfg.quantization``.
:func:`checkpoint_precision` is the :class:`~llm_dataflow.core.formats.PrecisionPlan` that
``python -m llm_dataflow plan`` uses unless ``--weights`` overrides it.

Formats read (the key names are the ones the quantisers write and vLLM / transformers read):

======================  ===========================================================================
``quant_method``        stored per quantised ``[out, in]`` weight
======================  ===========================================================================
``fp8`` with            FP8 E4M3 values + one FP32 ``weight_scale_inv`` per 128 × 128 block
``weight_block_size``   (DeepSeek-V3, Qwen3-FP8); ``modules_to_not_convert`` / ``ignored_layers``
``fp8`` without it      FP8 + one FP32 scale per tensor (+ one FP32 input scale when
                        ``activation_scheme`` is ``static``)
``fbgemm_fp8``          FP8 + one FP32 scale per output channel (row-wise; Llama 3.1 FP8);
                        ``modules_to_not_convert``
``compressed-tensors``  ``config_groups[*].weights``: ``num_bits``, ``type`` (int/float),
                        ``strategy`` (tensor, channel, group, block), ``group_size``,
                        ``block_structure``, ``symmetric``; ``ignore`` (names or ``re:`` patterns);
                        packed INT4 adds a 16-byte ``weight_shape``; NVFP4 (4-bit float, groups
                        of 16) FP8 scales + an FP32 global scale; static input scales 4 B
``gptq``                ``bits`` (4, 8), ``group_size`` (−1 = per channel), ``desc_act``, ``sym``:
                        packed ``qweight``, FP16 ``scales``, packed ``qzeros`` (stored even when
                        symmetric) and an int32 ``g_idx`` per input channel (AutoGPTQ's layout)
``awq``                 ``bits``, ``group_size``, ``zero_point``: packed weights, FP16 scales,
                        packed zeros when ``zero_point``; ``modules_to_not_convert``
``mxfp4``               FP4 E2M1 + one E8M0 scale per 32 (gpt-oss: experts only, the rest listed
                        in ``modules_to_not_convert``)
MLX ``quantization``    ``bits`` (4, 8), ``group_size``: U32-packed weights, a 16-bit scale and a 16-bit
                        bias per group (embeddings and ``lm_head`` quantised too)
``bitsandbytes``        ``load_in_4bit``: 4-bit NF4/FP4 + one FP32 absmax per 64 (with
                        ``bnb_4bit_use_double_quant`` an 8-bit absmax and one FP32 per 256 of them)
                        + the 16-entry FP32 quant map (and the 256-entry nested one); the few
                        dozen bytes of packed JSON state per tensor are not counted;
                        ``load_in_8bit``: INT8 + one FP32 scale per row; ``llm_int8_skip_modules``
======================  ===========================================================================

Loaded bytes differ from stored bytes only where an engine drops or rebuilds a tensor after
loading: vLLM's Marlin kernel for GPTQ holds no zero points for a symmetric checkpoint, no
``g_idx`` without act-order and ``g_idx`` plus its sort indices with it
(:meth:`QuantSpec.as_loaded`), which the memory fit counts; per channel (``group_size`` −1)
act-order orders nothing and vLLM turns it off.  Sources: vLLM
``vllm/model_executor/layers/quantization/`` (``fp8.py``, ``fbgemm_fp8.py``, ``gptq.py``,
``gptq_marlin.py``, ``awq.py``, ``mxfp4.py``, ``bitsandbytes.py``, ``compressed_tensors/``) and
transformers ``src/transformers/utils/quantization_config.py``, read for this module.

Refused rather than guessed: an unknown ``quant_method``, bit widths no format here stores,
GPTQ's per-module ``dynamic`` overrides, and compressed-tensors checkpoints whose config groups
quantise weights differently.
"""
from __future__ import annotations

from .formats import PrecisionPlan, QuantSpec

__all__ = ["quant_spec_from_config", "checkpoint_precision", "QUANT_METHODS"]

#: The ``quant_method`` values :func:`quant_spec_from_config` reads.
QUANT_METHODS = ("fp8", "fbgemm_fp8", "compressed-tensors", "gptq", "awq", "mxfp4", "bitsandbytes")
_NO_LM_HEAD = ("embedding", "position_embedding", "norm", "router", "bias")


def _names(qc: dict, *keys) -> tuple:
    out = []
    for k in keys:
        v = qc.get(k)
        if v is None:
            continue
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise ValueError(f"quantization_config.{k}={v!r} is not allowed; give a list of module names")
        out += v
    return tuple(out)


def _int(qc: dict, key: str, default=None, allowed=None, where="quantization_config"):
    v = qc.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or (allowed is not None and v not in allowed):
        allow = ", ".join(map(str, allowed)) if allowed is not None else "an integer"
        raise ValueError(f"{where}.{key}={v!r} is not allowed; allowed: {allow}")
    return v


def _bool(qc: dict, key: str, default: bool, where="quantization_config") -> bool:
    v = qc.get(key, default)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise ValueError(f"{where}.{key}={v!r} is not allowed; it must be true or false")
    return v


def _dtype_name(torch_dtype) -> str:
    return {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}.get(torch_dtype, "bf16")


def quant_spec_from_config(quantization_config, torch_dtype: str | None = None) -> QuantSpec:
    """The :class:`QuantSpec` of a checkpoint from its ``quantization_config`` dict (see the
    module's table), ``source`` naming what was read.

    ``torch_dtype`` is config.json's ``torch_dtype`` (``"bfloat16"``, ``"float16"``): the dtype
    of compressed-tensors' channel/group scales when the config does not give ``scale_dtype``
    (an assumption: under 0.05 % of the bytes either way).

    Raises:
        ValueError: ``quantization_config`` not a dict; an unknown ``quant_method`` (the message lists
            :data:`QUANT_METHODS`); a key of the wrong type or a value no format here stores
            (naming ``quantization_config.<key>``, the value and what is allowed).
    """
    qc = quantization_config
    if not isinstance(qc, dict):
        raise ValueError(f"quantization_config={qc!r} is not allowed; give config.json's dict")
    method = qc.get("quant_method")
    if method is None and (qc.get("load_in_4bit") or qc.get("load_in_8bit")):
        method = "bitsandbytes"
    if method is None and "bits" in qc and "group_size" in qc:
        return _mlx(qc, torch_dtype)
    if method == "fp8":
        keep = _names(qc, "modules_to_not_convert", "ignored_layers")
        fmt = {"float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2"}.get(qc.get("fmt"), qc.get("fmt") or "e4m3")
        if fmt not in ("e4m3", "e5m2"):
            raise ValueError(f"quantization_config.fmt={qc.get('fmt')!r} is not allowed; allowed: e4m3, e5m2, "
                             "float8_e4m3fn, float8_e5m2")
        block = qc.get("weight_block_size")
        static = qc.get("activation_scheme", "dynamic") == "static"
        if block is not None:
            if (not isinstance(block, list) or len(block) != 2
                    or not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in block)):
                raise ValueError(f"quantization_config.weight_block_size={block!r} is not allowed; "
                                 "allowed: [block_n, block_k] of positive integers")
            return QuantSpec(f"fp8_{fmt}", None, tuple(block), "fp32", keep_modules=keep,
                             per_tensor_bytes=4 if static else 0,
                             source=f"fp8, {block[0]}×{block[1]} blocks, FP32 block scales")
        return QuantSpec(f"fp8_{fmt}", None, None, "fp32", keep_modules=keep, per_tensor=True,
                         per_tensor_bytes=4 if static else 0,
                         source="fp8, one FP32 scale per tensor" + (" + static input scale" if static else ""))
    if method == "fbgemm_fp8":
        return QuantSpec("fp8_e4m3", None, None, "fp32", keep_modules=_names(qc, "modules_to_not_convert"),
                         source="fbgemm_fp8, FP8 with one FP32 scale per output channel")
    if method == "mxfp4":
        m = QuantSpec.mxfp4()
        return QuantSpec(m.weight_dtype, m.group_size, None, m.scale_dtype,
                         keep_modules=_names(qc, "modules_to_not_convert"), engine_changes=("mxfp4_moe",),
                         source="mxfp4, FP4 E2M1 + one E8M0 scale per 32")
    if method in ("gptq", "awq"):
        bits = _int(qc, "bits", 4, (4, 8) if method == "gptq" else (4,))
        g = _int(qc, "group_size", 128)
        if g == -1 or g == 0:
            g = None
        elif g < 0:
            raise ValueError(f"quantization_config.group_size={g} is not allowed; allowed: -1 or a positive integer")
        keep = _names(qc, "modules_to_not_convert")
        if method == "gptq":
            if qc.get("dynamic"):
                raise ValueError(f"quantization_config.dynamic={qc['dynamic']!r} is not read here (per-module "
                                 "bit widths); allowed: none or {}")
            desc_act, sym = _bool(qc, "desc_act", False), _bool(qc, "sym", True)
            # vLLM's Marlin kernel: empty zero points when symmetric; g_idx empty without act-order,
            # else kept with its sort indices.  Per channel (group_size -1) there is one group per
            # row, so act-order orders nothing and vLLM turns it off (GPTQMarlinConfig, gptq_marlin.py:
            # "if desc_act and group_size == -1: ... desc_act = False", v0.10.1)
            act_order = desc_act and g is not None
            changes = (("drop_zero_point",) if sym else ()) + (("add_g_idx_sort",) if act_order else ("drop_g_idx",))
            role_keep = _NO_LM_HEAD if qc.get("lm_head") is True else QuantSpec.__dataclass_fields__["keep"].default
            return QuantSpec(f"int{bits}", g, None, "fp16", True, role_keep, keep_modules=keep, g_idx=1,
                             engine_changes=changes,
                             source=f"gptq, {bits}-bit, group {g or 'per channel'}, desc_act={desc_act}, sym={sym}")
        zp = _bool(qc, "zero_point", True)
        return QuantSpec(f"int{bits}", g, None, "fp16", zp, keep_modules=keep,
                         source=f"awq, {bits}-bit, group {g or 'per channel'}, zero_point={zp}")
    if method == "bitsandbytes":
        skip = _names(qc, "llm_int8_skip_modules")
        if qc.get("load_in_4bit"):
            double = _bool(qc, "bnb_4bit_use_double_quant", False)
            kind = qc.get("bnb_4bit_quant_type", "fp4")
            return QuantSpec("int4", 64, None, "int8" if double else "fp32", keep_modules=skip,
                             nested_group=256 if double else None,
                             per_tensor_bytes=64 + (1024 if double else 0),
                             source=f"bitsandbytes 4-bit {kind}, absmax per 64"
                                    + (", double-quantised" if double else ""))
        return QuantSpec("int8", None, None, "fp32", keep_modules=skip,
                         source="bitsandbytes 8-bit (LLM.int8), one FP32 scale per row")
    if method == "compressed-tensors":
        return _compressed_tensors(qc, torch_dtype)
    raise ValueError(f"quantization_config.quant_method={method!r} is not read here; allowed: "
                     f"{', '.join(QUANT_METHODS)}")


def _mlx(qc: dict, torch_dtype) -> QuantSpec:
    """MLX's affine quantisation (``mlx_lm``'s config.json ``quantization``: ``group_size``,
    ``bits``): each ``[out, in]`` Linear and Embedding weight packed into ``U32`` (``32 / bits``
    per element), one ``scales`` and one ``biases`` per group of ``group_size`` inputs in the
    model's dtype (16 bits each: counted here as one 32-bit scale per group, the same bytes);
    norms and biases stay unquantised.  Per-module overrides and other modes are refused."""
    where = "quantization"
    bits = _int(qc, "bits", None, (4, 8), where)
    g = _int(qc, "group_size", None, None, where)
    if g < 1:
        raise ValueError(f"{where}.group_size={g} is not allowed; it must be a positive integer")
    mode = qc.get("mode", "affine")
    if mode != "affine":
        raise ValueError(f"{where}.mode={mode!r} is not read here; allowed: affine (MLX's default)")
    extra = sorted(k for k in qc if k not in ("bits", "group_size", "mode"))
    if extra:
        raise ValueError(f"{where}.{extra[0]}={qc[extra[0]]!r} is not read here (MLX's per-module overrides); "
                         "allowed keys: bits, group_size, mode")
    half = "fp16" if _dtype_name(torch_dtype) == "fp16" else "bf16"
    return QuantSpec(f"int{bits}", g, None, "fp32", keep=("position_embedding", "norm", "bias"),
                     source=f"MLX affine {bits}-bit, group {g}: U32-packed weights, {half} scales and biases per group "
                            "(embeddings and heads quantised too)")


def _compressed_tensors(qc: dict, torch_dtype) -> QuantSpec:
    where = "quantization_config.config_groups"
    groups = qc.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise ValueError(f"{where}={groups!r} is not allowed; give the groups of a compressed-tensors config")
    args = []
    for name, grp in groups.items():
        if not isinstance(grp, dict) or not isinstance(grp.get("weights"), dict):
            raise ValueError(f"{where}.{name}.weights is missing; every group needs its weights' arguments")
        args.append((grp["weights"], grp.get("input_activations")))
    keys = ("num_bits", "type", "strategy", "group_size", "block_structure", "symmetric")
    if any(tuple(w.get(k) for k in keys) != tuple(args[0][0].get(k) for k in keys) for w, _ in args):
        raise ValueError(f"{where}: groups quantise weights differently; one weight format per checkpoint "
                         "is allowed here")
    w, act = args[0]
    wh = f"{where}.weights"
    bits = _int(w, "num_bits", None, (4, 8), wh)
    kind, strategy = w.get("type", "int"), w.get("strategy", "tensor")
    sym = _bool(w, "symmetric", True, wh)
    g = w.get("group_size")
    static = isinstance(act, dict) and act.get("dynamic") is False
    extra = 4 if static else 0
    scale = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16"}.get(w.get("scale_dtype"),
                                                                              _dtype_name(torch_dtype))
    keep = _names(qc, "ignore")
    src = f"compressed-tensors, {kind} {bits}-bit, {strategy}" + (f" {g}" if g else "")
    if kind == "float" and bits == 4:
        if g != 16:
            raise ValueError(f"{wh}.group_size={g!r} is not allowed for 4-bit floats; allowed: 16 (NVFP4)")
        return QuantSpec("fp4", 16, None, "fp8_e4m3", tensor_scale_dtype="fp32", keep_modules=keep,
                         per_tensor_bytes=extra, source=src + ", FP8 scales + FP32 global scale")
    if kind not in ("int", "float"):
        raise ValueError(f"{wh}.type={kind!r} is not allowed; allowed: int, float")
    dtype = "fp8_e4m3" if kind == "float" else f"int{bits}"
    if kind == "float" and bits != 8:
        raise ValueError(f"{wh}.num_bits={bits} is not allowed for floats; allowed: 8, 4")
    packed = 16 if dtype == "int4" else 0          # pack-quantized stores weight_shape (2 × int64)
    if strategy == "tensor":
        return QuantSpec(dtype, None, None, "fp32", not sym, keep_modules=keep, per_tensor=True,
                         per_tensor_bytes=extra + packed, source=src)
    if strategy == "channel":
        return QuantSpec(dtype, None, None, scale, not sym, keep_modules=keep, per_tensor_bytes=extra + packed,
                         source=src)
    if strategy == "group":
        g = _int(w, "group_size", None, None, wh)
        return QuantSpec(dtype, g, None, scale, not sym, keep_modules=keep, per_tensor_bytes=extra + packed,
                         source=src)
    if strategy == "block":
        b = w.get("block_structure")
        if not isinstance(b, list) or len(b) != 2:
            raise ValueError(f"{wh}.block_structure={b!r} is not allowed; allowed: [rows, cols]")
        return QuantSpec(dtype, None, tuple(b), "fp32", not sym, keep_modules=keep,
                         per_tensor_bytes=extra + packed, source=src)
    raise ValueError(f"{wh}.strategy={strategy!r} is not allowed; allowed: tensor, channel, group, block")


def checkpoint_precision(cfg, kv: str | None = None) -> PrecisionPlan:
    """The :class:`PrecisionPlan` of ``cfg``'s own checkpoint: its ``quantization`` (read from
    ``quantization_config``) with the rest in BF16, or plain BF16 when it has none; ``kv`` the
    KV-cache dtype (default BF16).  The name says where it came from.

    Raises:
        ValueError: ``cfg`` has no ``quantization`` attribute (not a ModelConfig); an unknown ``kv``.
    """
    if not hasattr(cfg, "quantization"):
        raise ValueError(f"cfg={cfg!r} is not allowed; give a ModelConfig")
    q = cfg.quantization
    if q is None:
        return PrecisionPlan("bf16", None, kv, name="bf16")
    return PrecisionPlan("bf16", q, kv, name=f"checkpoint ({q.source})" if q.source else "checkpoint")
