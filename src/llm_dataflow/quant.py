"""Weight-only quantisation: INT8 per channel, INT4 group-wise, FP8 (E4M3) with block scales.

The account quantisation changes is **bytes per element**: a decode step reads every weight once,
so storing 4 bits instead of 16 cuts the bytes a step must move by up to 4×.  The layout here is
the one :class:`llm_dataflow.core.formats.QuantSpec` counts, byte for byte:

* values: ``ceil(out·in·bits/8)`` bytes (INT4 packed two per byte, low nibble first);
* scales: one per group in ``spec.scale_dtype`` (FP16 by default, FP32 for FP8 blocks);
* zero points (asymmetric only): one per group, ``weight_dtype`` bits each, packed (GPTQ/AWQ store
  INT4 zeros packed the same way).

A group is a tile of the ``[out, in]`` weight (nn.Linear layout): ``(1, group_size)`` for group-wise,
``(1, in)`` per output channel (``group_size=None``), ``(rows, cols)`` for ``block_shape`` (partial
edge tiles keep their own scale, as DeepSeek-V3's ``weight_block_size`` checkpoints do).

Speed is a different matter: the bytes only shrink on the wire if a kernel reads the low-bit values
and dequantises them in registers.  :class:`QuantLinear` dequantises the whole weight to FP32
before ``F.linear`` — correct, but it *adds* traffic (read low-bit, write FP32, read FP32 again).
``torch.ops.aten._weight_int8pack_mm`` is a CPU kernel that reads INT8 weights directly; the
notebook of chapter 08 times both.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from .core.accounting import weight_bytes
from .core.config import ModelConfig, model_config, tensor_specs
from .core.formats import QuantSpec, precision_plan
from .core.roofline import decode_step_bounds
from .core.units import GB, dtype_bits, require_positive

__all__ = [
    "QuantizedTensor", "QuantLinear", "pack_int4", "unpack_int4", "quantize_weight",
    "dequantize_weight", "quantize_decoder", "quantized_weight_bytes", "logit_error",
    "int8_weight_matmul", "QUANT_SCHEMES", "quant_spec", "quant_report",
]

_SCALE_TORCH = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
_FP8_TORCH = {"fp8": torch.float8_e4m3fn, "fp8_e4m3": torch.float8_e4m3fn, "fp8_e5m2": torch.float8_e5m2}


# --- 4-bit packing ---------------------------------------------------------------------------
def pack_int4(values: torch.Tensor) -> torch.Tensor:
    """Pack 4-bit codes two per byte.

    Args:
        values: integer tensor of any shape with every element in ``[0, 15]``; flattened in
            row-major order.

    Returns:
        uint8 ``[ceil(n / 2)]``: element ``2i`` in the low nibble of byte ``i``, element ``2i+1`` in
        the high nibble (an odd count leaves the last high nibble 0).  n elements → ceil(n/2) bytes.

    Raises:
        ValueError: a non-integer dtype or a value outside ``[0, 15]``.
    """
    if values.dtype.is_floating_point or values.dtype == torch.bool:
        raise ValueError(f"values.dtype={values.dtype} is not allowed; pack_int4 takes integer codes in [0, 15]")
    flat = values.reshape(-1).to(torch.int16)
    if flat.numel() and (int(flat.min()) < 0 or int(flat.max()) > 15):
        raise ValueError(f"values span [{int(flat.min())}, {int(flat.max())}]; 4-bit codes must lie in [0, 15]")
    if flat.numel() % 2:
        flat = torch.cat([flat, flat.new_zeros(1)])
    pairs = flat.view(-1, 2)
    return (pairs[:, 0] | (pairs[:, 1] << 4)).to(torch.uint8)


def unpack_int4(packed: torch.Tensor, n: int) -> torch.Tensor:
    """Inverse of :func:`pack_int4`: the first ``n`` 4-bit codes of ``packed`` as uint8 ``[n]``.

    Raises:
        ValueError: ``packed`` is not uint8, or holds fewer than ``n`` codes.
    """
    if packed.dtype != torch.uint8:
        raise ValueError(f"packed.dtype={packed.dtype} is not allowed; it must be torch.uint8")
    if not isinstance(n, int) or n < 0 or n > 2 * packed.numel():
        raise ValueError(f"n={n!r} is not allowed; packed holds at most {2 * packed.numel()} codes")
    p = packed.reshape(-1)
    out = torch.stack([p & 0x0F, p >> 4], dim=1).reshape(-1)  # low nibble first
    return out[:n].contiguous()


# --- one tensor --------------------------------------------------------------------------------
@dataclass
class QuantizedTensor:
    """A quantised ``[out, in]`` weight exactly as stored.

    Attributes:
        data: INT8 → int8 (symmetric) or uint8 (asymmetric) ``[out, in]``; INT4 → uint8
            ``[ceil(out·in/2)]`` packed codes; FP8 → ``torch.float8_e4m3fn`` / ``float8_e5m2``
            ``[out, in]``.
        scales: ``[n_row_tiles, n_col_tiles]`` in ``spec.scale_dtype``.
        zeros: packed zero points (uint8; INT4 → ``[ceil(n_groups/2)]``, INT8 → ``[n_groups]``) or None.
        shape: ``(out, in)``.
        tile: ``(rows, cols)`` of one group.
        spec: the :class:`QuantSpec` used.
    """

    data: torch.Tensor
    scales: torch.Tensor
    zeros: torch.Tensor | None
    shape: tuple
    tile: tuple
    spec: QuantSpec

    @property
    def nbytes(self) -> int:
        """Stored bytes: values + scales + zero points (equals ``spec.tensor_bytes(shape, in)``)."""
        n = self.data.numel() * self.data.element_size() + self.scales.numel() * self.scales.element_size()
        if self.zeros is not None:
            n += self.zeros.numel() * self.zeros.element_size()
        return n

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The ``[out, in]`` weight in ``dtype`` (see :func:`dequantize_weight`)."""
        return dequantize_weight(self, dtype)


def _tile(spec: QuantSpec, shape: tuple) -> tuple:
    out_f, in_f = shape
    if spec.block_shape is not None:
        return tuple(spec.block_shape)
    spec.n_groups(shape, in_f)  # raises ValueError when group_size does not divide in_features
    return (1, spec.group_size or in_f)


def _tiles_view(w: torch.Tensor, tile: tuple):
    """Zero-pad ``w [out, in]`` to whole tiles; return ``[R, tr, C, tc]`` view and the pad sizes."""
    out_f, in_f = w.shape
    tr, tc = tile
    R, C = math.ceil(out_f / tr), math.ceil(in_f / tc)
    pr, pc = R * tr - out_f, C * tc - in_f
    if pr or pc:
        w = F.pad(w, (0, pc, 0, pr))
    return w.view(R, tr, C, tc), (R, C)


def _scale_up(scale: torch.Tensor, sdt: torch.dtype) -> torch.Tensor:
    """Cast FP32 ``scale`` to ``sdt`` rounding *up*, so ``max|w| / scale`` never passes the largest
    code and no element is clamped beyond half a step; an all-zero tile gets scale 1."""
    s = scale.to(sdt)
    low = s.float() < scale
    s = torch.where(low, torch.nextafter(s, torch.full_like(s, float("inf"))), s)
    return torch.where(s.float() > 0, s, torch.ones_like(s))


def _expand(t: torch.Tensor, tile: tuple, shape: tuple) -> torch.Tensor:
    """Broadcast per-tile values ``[R, C]`` to the weight's ``[out, in]``."""
    tr, tc = tile
    R, C = t.shape
    full = t[:, None, :, None].expand(R, tr, C, tc).reshape(R * tr, C * tc)  # one write of out·in
    return full[: shape[0], : shape[1]]


def quantize_weight(w: torch.Tensor, spec: QuantSpec) -> QuantizedTensor:
    """Quantise a linear weight ``w [out, in]`` as ``spec`` says (round to nearest).

    Integer formats: symmetric (``zero_point=False``) uses ``scale = max|w| / qmax`` with
    qmax = 127 (INT8) or 7 (INT4), codes in ``[-qmax-1, qmax]``; asymmetric (``zero_point=True``)
    uses ``scale = (max − min) / (2^bits − 1)`` over a range widened to include 0 (so 0 is exact),
    ``zero = round(−min / scale)``, codes ``clamp(round(w/scale) + zero, 0, 2^bits − 1)``.
    FP8: ``scale = max|w| / fmax`` (E4M3 fmax = 448, E5M2 fmax = 57344; OCP FP8 spec v1.0), values
    ``(w / scale).to(float8)``.  Scales are rounded to ``spec.scale_dtype`` *before* the codes are
    computed (rounded up, so nothing clamps), so dequantisation with the stored scale is what was
    optimised and every integer element is within half a step: ``|w − ŵ| ≤ scale / 2``.

    Raises:
        ValueError: ``w`` not 2-D floating point; ``group_size`` not dividing ``in``; zero points
            asked for an FP8 format.
    """
    if w.dim() != 2 or not w.dtype.is_floating_point:
        raise ValueError(f"w has shape {tuple(w.shape)} and dtype {w.dtype}; a 2-D floating-point [out, in] weight is required")
    shape = tuple(w.shape)
    tile = _tile(spec, shape)
    wt, (R, C) = _tiles_view(w.detach().float(), tile)
    sdt = _SCALE_TORCH[spec.scale_dtype]
    if spec.weight_dtype in _FP8_TORCH:
        if spec.zero_point:
            raise ValueError(f"zero_point=True is not allowed with weight_dtype={spec.weight_dtype!r}; FP8 is symmetric")
        f8 = _FP8_TORCH[spec.weight_dtype]
        amax = wt.abs().amax(dim=(1, 3))  # [R, C]
        scale = _scale_up(amax / torch.finfo(f8).max, sdt)
        data = (w.float() / _expand(scale.float(), tile, shape)).to(f8)
        return QuantizedTensor(data, scale, None, shape, tile, spec)
    bits = dtype_bits(spec.weight_dtype)
    if spec.zero_point:
        qmax = 2 ** bits - 1
        lo = wt.amin(dim=(1, 3)).clamp(max=0.0)
        hi = wt.amax(dim=(1, 3)).clamp(min=0.0)
        scale = _scale_up((hi - lo) / qmax, sdt)
        s = scale.float()
        zero = torch.round(-lo / s).clamp(0, qmax)  # [R, C]
        q = torch.round(w.float() / _expand(s, tile, shape)) + _expand(zero, tile, shape)
        q = q.clamp(0, qmax).to(torch.uint8)
        zeros = zero.to(torch.uint8).reshape(-1)
        if bits == 4:
            zeros = pack_int4(zeros)
    else:
        qmax = 2 ** (bits - 1) - 1
        scale = _scale_up(wt.abs().amax(dim=(1, 3)) / qmax, sdt)
        q = torch.round(w.float() / _expand(scale.float(), tile, shape)).clamp(-qmax - 1, qmax)
        zeros = None
        q = (q + 8).to(torch.uint8) if bits == 4 else q.to(torch.int8)  # INT4: offset-8 nibbles
    data = pack_int4(q) if bits == 4 else q
    return QuantizedTensor(data, scale, zeros, shape, tile, spec)


def dequantize_weight(qt: QuantizedTensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Reconstruct ``[out, in]``: ``scale · (code − zero)`` (integer) or ``scale · value`` (FP8).

    Traffic of this reference (why it is slow): it reads the low-bit tensor and writes a full
    ``out·in·4``-byte FP32 weight that the matmul then reads again.
    """
    shape, tile, spec = qt.shape, qt.tile, qt.spec
    s = _expand(qt.scales.float(), tile, shape)
    if spec.weight_dtype in _FP8_TORCH:
        return (qt.data.float() * s).to(dtype)
    bits = dtype_bits(spec.weight_dtype)
    n = shape[0] * shape[1]
    q = unpack_int4(qt.data, n).view(shape).float() if bits == 4 else qt.data.float()
    if spec.zero_point:
        n_groups = qt.scales.numel()
        z = unpack_int4(qt.zeros, n_groups).float() if bits == 4 else qt.zeros.float()
        q = q - _expand(z.view(qt.scales.shape), tile, shape)
    elif bits == 4:
        q = q - 8
    return (q * s).to(dtype)


# --- a quantised decoder -------------------------------------------------------------------------
class QuantLinear(nn.Module):
    """A linear layer whose weight is stored quantised and dequantised on every call.

    ``forward(x [..., in]) -> [..., out]`` = ``F.linear(x, dequantize(W), bias)``.  Correct but not
    fast: see the module docstring.
    """

    def __init__(self, qt: QuantizedTensor, bias: torch.Tensor | None = None):
        super().__init__()
        self.qt = qt
        self.bias = None if bias is None else nn.Parameter(bias.detach().clone(), requires_grad=False)
        self.in_features, self.out_features = qt.shape[1], qt.shape[0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = dequantize_weight(self.qt, x.dtype)  # write out·in elements, read them back in the matmul
        return F.linear(x, w, self.bias)

    def extra_repr(self) -> str:
        s = self.qt.spec
        return f"in={self.in_features}, out={self.out_features}, {s.weight_dtype}, tile={self.qt.tile}"


def _quantizable(cfg: ModelConfig, spec: QuantSpec) -> dict:
    """Module name → TensorSpec of every weight ``spec`` quantises (role not in ``spec.keep``)."""
    return {t.name[: -len(".weight")]: t for t in tensor_specs(cfg)
            if t.in_features is not None and not spec.keeps(t.name, t.role) and t.name.endswith(".weight")}


def quantize_decoder(model: nn.Module, spec: QuantSpec) -> nn.Module:
    """A copy of ``model`` (a :class:`llm_dataflow.model.Decoder`) with every linear weight whose
    role is not in ``spec.keep`` replaced by a :class:`QuantLinear` (weight-only quantisation).

    Embeddings, norms, router and ``lm_head`` stay in the model's dtype by default, as
    ``weight_bytes(cfg, dtype, quant=spec)`` counts them.

    Raises:
        ValueError: ``group_size`` does not divide a weight's ``in_features`` (e.g. d_model or d_ff).
    """
    cfg = model.cfg
    q = copy.deepcopy(model)
    for name, t in _quantizable(cfg, spec).items():
        parent_name, _, child = name.rpartition(".")
        parent = q.get_submodule(parent_name)
        lin = getattr(parent, child)
        setattr(parent, child, QuantLinear(quantize_weight(lin.weight, spec), getattr(lin, "bias", None)))
    return q


def quantized_weight_bytes(model: nn.Module) -> int:
    """Bytes the (possibly quantised) ``model`` stores for the tensors ``tensor_specs(model.cfg)``
    lists: ``QuantizedTensor.nbytes`` for quantised weights, ``tensor.nbytes`` for the others.

    For ``quantize_decoder(Decoder(cfg, dtype), spec)`` this equals
    ``weight_bytes(cfg, <dtype name>, quant=spec)`` exactly (tested).
    """
    mods = dict(model.named_modules())
    params = dict(model.named_parameters(remove_duplicate=False))
    params.update(dict(model.named_buffers()))
    total = 0
    for t in tensor_specs(model.cfg):
        mod_name, _, leaf = t.name.rpartition(".")
        m = mods.get(mod_name)
        if isinstance(m, QuantLinear) and leaf == "weight":
            total += m.qt.nbytes
        else:
            p = params[t.name]
            total += p.numel() * p.element_size()
    return total


@torch.no_grad()
def logit_error(ref_logits: torch.Tensor, logits: torch.Tensor) -> dict:
    """Error of ``logits`` against ``ref_logits`` (both ``[B, T, V]``).

    Returns:
        dict: ``max_abs`` (max |Δ|), ``rel_l2`` (‖Δ‖₂ / ‖ref‖₂) and ``top1_agreement`` (fraction of
        the B·T positions whose argmax token agrees; teacher-forced, so one early disagreement does
        not cascade).

    Raises:
        ValueError: shapes differ.
    """
    if ref_logits.shape != logits.shape:
        raise ValueError(f"logits shape {tuple(logits.shape)} differs from ref_logits shape {tuple(ref_logits.shape)}")
    r, x = ref_logits.float(), logits.float()
    d = x - r
    return {"max_abs": float(d.abs().max()), "rel_l2": float(d.norm() / r.norm()),
            "top1_agreement": float((r.argmax(-1) == x.argmax(-1)).float().mean())}


def int8_weight_matmul(x: torch.Tensor, qt: QuantizedTensor) -> torch.Tensor:
    """``x [M, in] @ Wᵀ`` reading the INT8 weight directly with PyTorch's CPU kernel
    ``torch.ops.aten._weight_int8pack_mm`` (INT8 symmetric, per output channel only).

    Traffic: out·in bytes of weight (1 B/element) + out scales, instead of 4 B/element in FP32.

    Raises:
        ValueError: ``qt`` is not INT8 symmetric per channel, or ``x`` is not 2-D.
    """
    s = qt.spec
    if s.weight_dtype != "int8" or s.zero_point or qt.tile != (1, qt.shape[1]):
        raise ValueError("int8_weight_matmul needs QuantSpec.int8_per_channel() (symmetric, one scale per row); "
                         f"got weight_dtype={s.weight_dtype!r}, zero_point={s.zero_point}, tile={qt.tile}")
    if x.dim() != 2:
        raise ValueError(f"x has shape {tuple(x.shape)}; [M, in] is required")
    return torch.ops.aten._weight_int8pack_mm(x, qt.data, qt.scales.reshape(-1).to(x.dtype))


#: Named weight formats the chapter-08 kernels implement: ``name → QuantSpec factory(group_size)``.
QUANT_SCHEMES = ("bf16", "int8 per-channel", "int4 group-wise", "fp8 block")


def quant_spec(scheme: str, group_size: int = 128) -> QuantSpec | None:
    """The :class:`QuantSpec` of a named scheme (``None`` for ``"bf16"``); ``group_size`` is the INT4
    group and the FP8 block edge.

    Raises:
        ValueError: unknown scheme (allowed: :data:`QUANT_SCHEMES`) or a non-positive group size.
    """
    if not isinstance(scheme, str) or scheme not in QUANT_SCHEMES:
        raise ValueError(f"scheme={scheme!r} is not allowed; allowed: {', '.join(QUANT_SCHEMES)}")
    if scheme != "bf16" and scheme != "int8 per-channel":
        require_positive("group_size", group_size)
    return {"bf16": lambda: None, "int8 per-channel": QuantSpec.int8_per_channel,
            "int4 group-wise": lambda: QuantSpec.int4_groupwise(group_size),
            "fp8 block": lambda: QuantSpec.fp8_block(group_size)}[scheme]()


def quant_report(model: str = "Llama-3-8B", weights: str = "int4", hw: str = "H100-SXM") -> dict:
    """Chapter 08's calculator: a view of :mod:`llm_dataflow.core.accounting` for preset ``model`` with
    weights in format ``weights`` (:data:`~llm_dataflow.core.formats.WEIGHT_FORMATS`; unquantised
    roles in BF16, KV cache in BF16): weight bytes stored and their ratio to BF16, bits per
    quantised element (values + scales + zero points), the bytes a batch-1 decode step at
    context 0 reads (gathered embedding row, every other weight once) and its lower bound on
    ``hw`` — the same numbers chapter 05's ``decode_calculator`` shows for this setting,
    reachable only with a kernel that reads the low-bit data.

    Raises:
        ValueError: unknown preset, format or hardware.
    """
    cfg = model_config(model)
    plan = precision_plan(weights)
    spec = plan.quant
    try:
        nb = weight_bytes(cfg, plan)
    except ValueError as e:   # a group size that does not divide this model's input widths
        raise ValueError(f"weights={weights!r} does not fit model={model!r}: {e}") from None
    quantised = [t for t in tensor_specs(cfg) if spec is not None and t.in_features is not None
                 and not spec.keeps(t.name, t.role)]
    n_q = sum(t.numel for t in quantised)
    qb = sum(spec.tensor_bytes(t.shape, t.in_features) for t in quantised) if quantised else 0
    b = decode_step_bounds(cfg, hw, 1, 0, plan)
    return {"weight bytes stored": nb, "vs bf16": round(nb / weight_bytes(cfg, "bf16"), 4),
            "bits per quantised element": round(8 * qb / n_q, 4) if n_q else 16.0,
            "GB read per decode step": b.nbytes / GB,
            "decode step ≥ (ms)": b.time_s * 1e3}
