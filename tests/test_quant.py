"""Tests of llm_dataflow.quant: packing, round-trip bounds, exact stored bytes, the quantised decoder."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import llm_dataflow as ldf
from llm_dataflow.quant import pack_int4, quantize_weight, unpack_int4


pytestmark = pytest.mark.usefixtures("one_thread")


# --- packing -------------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 15), max_size=101))
def test_pack_unpack_roundtrip(codes):
    t = torch.tensor(codes, dtype=torch.uint8)
    packed = pack_int4(t)
    assert packed.dtype == torch.uint8 and packed.numel() == math.ceil(len(codes) / 2)
    assert unpack_int4(packed, len(codes)).tolist() == codes


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 7), st.integers(1, 9))
def test_pack_2d_is_row_major(rows, cols):
    g = torch.Generator().manual_seed(rows * 10 + cols)
    t = torch.randint(0, 16, (rows, cols), generator=g, dtype=torch.uint8)
    assert torch.equal(unpack_int4(pack_int4(t), rows * cols).view(rows, cols), t)


def test_pack_low_nibble_first():
    assert pack_int4(torch.tensor([1, 2, 15])).tolist() == [0x21, 0x0F]


def test_pack_rejects_bad_codes():
    with pytest.raises(ValueError, match=r"\[0, 15\]"):
        pack_int4(torch.tensor([0, 16]))
    with pytest.raises(ValueError):
        pack_int4(torch.tensor([-1, 3]))
    with pytest.raises(ValueError, match="integer"):
        pack_int4(torch.tensor([0.5]))
    with pytest.raises(ValueError):
        unpack_int4(torch.tensor([1], dtype=torch.uint8), 3)


# --- round-trip bounds ---------------------------------------------------------------------------
def _w(shape=(37, 48), seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g) * 0.02


@pytest.mark.parametrize("spec", [ldf.QuantSpec.int8_per_channel(), ldf.QuantSpec.int4_groupwise(16),
                                  ldf.QuantSpec.int4_groupwise(8, zero_point=False),
                                  ldf.QuantSpec("int8", 24, zero_point=True)])
def test_integer_roundtrip_within_half_step(spec):
    w = _w()
    qt = quantize_weight(w, spec)
    step = ldf.quant._expand(qt.scales.float(), qt.tile, qt.shape)
    err = (qt.dequantize() - w).abs()
    assert bool((err <= 0.5 * step * (1 + 1e-6)).all())  # round to nearest, scales rounded up: half a step


@pytest.mark.parametrize("spec", [ldf.QuantSpec.fp8_block(16), ldf.QuantSpec("fp8_e4m3", block_shape=(5, 7))])
def test_fp8_roundtrip_relative_bound(spec):
    w = _w()
    qt = quantize_weight(w, spec)
    assert qt.data.dtype == torch.float8_e4m3fn
    s = ldf.quant._expand(qt.scales.float(), qt.tile, qt.shape)
    # E4M3 has 3 mantissa bits: half an ulp is 2^-4 relative; subnormal spacing 2^-9 (OCP FP8 v1.0)
    assert bool(((qt.dequantize() - w).abs() <= 2 ** -4 * w.abs() + 2 ** -10 * s + 1e-9).all())


@pytest.mark.parametrize("spec", [ldf.QuantSpec.int8_per_channel(), ldf.QuantSpec.int4_groupwise(16),
                                  ldf.QuantSpec.int4_groupwise(48, scale_dtype="fp32"),
                                  ldf.QuantSpec.fp8_block(32), ldf.QuantSpec("int4", block_shape=(4, 20)),
                                  ldf.QuantSpec("fp8_e5m2", block_shape=(8, 24))])
def test_stored_bytes_match_quantspec(spec):
    w = _w((37, 48))  # odd out·in: INT4 packing ends with half a byte
    qt = quantize_weight(w, spec)
    assert qt.nbytes == spec.tensor_bytes((37, 48), 48)


def _naive_dequant(qt):
    """Element-by-element reference: scale · (code − zero) for each element's group."""
    out_f, in_f = qt.shape
    tr, tc = qt.tile
    C = math.ceil(in_f / tc)
    bits = ldf.dtype_bits(qt.spec.weight_dtype)
    codes = unpack_int4(qt.data, out_f * in_f).tolist() if bits == 4 else qt.data.flatten().tolist()
    n_groups = qt.scales.numel()
    zeros = None
    if qt.spec.zero_point:
        zeros = unpack_int4(qt.zeros, n_groups).tolist() if bits == 4 else qt.zeros.tolist()
    scales = qt.scales.float().flatten().tolist()
    w = torch.empty(out_f, in_f)
    for i in range(out_f):
        for j in range(in_f):
            gidx = (i // tr) * C + j // tc
            c = codes[i * in_f + j]
            z = zeros[gidx] if zeros is not None else (8 if bits == 4 else 0)
            w[i, j] = scales[gidx] * (c - z)
    return w


@pytest.mark.parametrize("spec", [ldf.QuantSpec.int4_groupwise(8), ldf.QuantSpec("int4", block_shape=(3, 10)),
                                  ldf.QuantSpec.int4_groupwise(12, zero_point=False),
                                  ldf.QuantSpec.int8_per_channel()])
def test_dequantize_matches_naive_reference(spec):
    w = _w((7, 24), seed=3)  # irregular: 7 rows, partial (3, 10) tiles
    qt = quantize_weight(w, spec)
    torch.testing.assert_close(qt.dequantize(), _naive_dequant(qt), rtol=0, atol=1e-7)


def test_int8_kernel_matches_reference():
    torch.manual_seed(0)
    w, x = _w((53, 40), seed=5), torch.randn(3, 40)
    qt = quantize_weight(w, ldf.QuantSpec.int8_per_channel())
    torch.testing.assert_close(ldf.int8_weight_matmul(x, qt), x @ qt.dequantize().T, rtol=1e-4, atol=1e-6)
    with pytest.raises(ValueError):
        ldf.int8_weight_matmul(x, quantize_weight(w, ldf.QuantSpec.int4_groupwise(8)))


# --- bad input -----------------------------------------------------------------------------------
def test_group_size_must_divide_in_features():
    with pytest.raises(ValueError, match="group_size=48 does not divide in_features=64"):
        quantize_weight(torch.zeros(8, 64), ldf.QuantSpec.int4_groupwise(48))
    m = ldf.Decoder(ldf.model_config("tiny-llama"))
    with pytest.raises(ValueError, match="group_size"):  # 48 does not divide d_model = 64
        ldf.quantize_decoder(m, ldf.QuantSpec.int4_groupwise(48))


def test_bad_weights_and_fp8_zero_point():
    with pytest.raises(ValueError, match="2-D"):
        quantize_weight(torch.zeros(4), ldf.QuantSpec.int8_per_channel())
    with pytest.raises(ValueError, match="zero_point"):
        quantize_weight(torch.zeros(4, 4), ldf.QuantSpec("fp8_e4m3", 4, zero_point=True))


# --- the quantised decoder -----------------------------------------------------------------------
SPECS = [ldf.QuantSpec.int8_per_channel(), ldf.QuantSpec.int4_groupwise(32), ldf.QuantSpec.fp8_block(32)]


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("dtype,name", [(torch.float32, "fp32"), (torch.bfloat16, "bf16")])
def test_decoder_bytes_equal_weight_bytes(spec, dtype, name):
    cfg = ldf.model_config("tiny-llama")
    torch.manual_seed(0)
    q = ldf.quantize_decoder(ldf.Decoder(cfg, dtype=dtype), spec)
    assert ldf.quantized_weight_bytes(q) == ldf.weight_bytes(cfg, name, quant=spec)


def test_quantized_decoder_runs_close_to_fp32():
    cfg = ldf.model_config("tiny-llama")
    torch.manual_seed(0)
    m = ldf.Decoder(cfg)
    ids = torch.randint(0, cfg.vocab_size, (2, 24))
    ref = m(ids)
    assert ldf.quantized_weight_bytes(m) == ldf.weight_bytes(cfg, "fp32")
    errs = {s.weight_dtype: ldf.logit_error(ref, ldf.quantize_decoder(m, s)(ids)) for s in SPECS}
    assert errs["int8"]["rel_l2"] < 0.01 and errs["int8"]["top1_agreement"] >= 0.9
    assert errs["int4"]["rel_l2"] < 0.1 and errs["fp8_e4m3"]["rel_l2"] < 0.1
    assert errs["int8"]["rel_l2"] < errs["int4"]["rel_l2"]
    with pytest.raises(ValueError, match="shape"):
        ldf.logit_error(ref, ref[:1])
