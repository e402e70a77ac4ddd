"""Tests for llm_dataflow.flash: tiled attention with online softmax, exact against naive."""
import math

import pytest
import torch

import llm_dataflow as ldf


def _qkv(B, H, Hkv, T, S, d, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, T, d, generator=g, dtype=dtype)
    k = torch.randn(B, Hkv, S, d, generator=g, dtype=dtype)
    v = torch.randn(B, Hkv, S, d, generator=g, dtype=dtype)
    return q, k, v


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("T,S", [(37, 37), (5, 53), (1, 29), (100, 100), (64, 64)])
def test_flash_matches_reference_irregular(causal, T, S):
    q, k, v = _qkv(2, 6, 3, T, S, 24)
    out = ldf.flash_attention(q, k, v, causal, block_q=16, block_k=13)
    torch.testing.assert_close(out, ldf.attention_reference(q, k, v, causal=causal))


@pytest.mark.parametrize("window", [1, 7, 1000])  # 1000 > context: allowed, masks nothing extra
def test_flash_sliding_window(window):
    q, k, v = _qkv(1, 4, 1, 45, 45, 16, seed=1)
    torch.testing.assert_close(ldf.flash_attention(q, k, v, True, window=window, block_q=8, block_k=11),
                               ldf.attention_reference(q, k, v, causal=True, window=window))


def test_flash_fp32_default_blocks():
    q, k, v = _qkv(1, 2, 2, 130, 130, 64, dtype=torch.float32, seed=2)
    torch.testing.assert_close(ldf.flash_attention(q, k, v), ldf.attention_reference(q, k, v),
                               atol=1e-5, rtol=1e-5)


def test_flash_bf16_statistics_in_fp32():
    q, k, v = _qkv(1, 2, 1, 33, 33, 32, dtype=torch.float32, seed=3)
    out = ldf.flash_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), block_k=8)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), ldf.attention_reference(q, k, v), atol=3e-2, rtol=3e-2)


def test_merge_of_partials_is_exact_in_any_order():
    q, k, v = _qkv(2, 4, 2, 9, 31, 8, seed=4)
    ref = ldf.attention_reference(q, k, v, causal=False)
    cuts = [0, 7, 19, 31]
    parts = [ldf.attention_partial(q, k[:, :, a:b], v[:, :, a:b], False) for a, b in zip(cuts, cuts[1:])]
    o, m, l = ldf.merge_attention_partials(*parts[0], *ldf.merge_attention_partials(*parts[1], *parts[2]))
    torch.testing.assert_close(o, ref)
    o2, _, l2 = ldf.merge_attention_partials(*ldf.merge_attention_partials(*parts[2], *parts[0]), *parts[1])
    torch.testing.assert_close(o2, ref)
    torch.testing.assert_close(l, l2)


def test_partial_with_offsets_for_causal_chunks():
    # ring-attention style: causal queries at positions 20..29, keys in two chunks with offsets
    q, k, v = _qkv(1, 2, 2, 10, 30, 8, seed=5)
    ref = ldf.attention_reference(q, k, v, causal=True)
    a = ldf.attention_partial(q, k[:, :, :12], v[:, :, :12], True, q_offset=20, k_offset=0)
    b = ldf.attention_partial(q, k[:, :, 12:], v[:, :, 12:], True, q_offset=20, k_offset=12)
    torch.testing.assert_close(ldf.merge_attention_partials(*a, *b)[0], ref)


def test_fully_masked_partial_merges_as_identity():
    q, k, v = _qkv(1, 1, 1, 4, 8, 8, seed=6)
    full = ldf.attention_partial(q, k, v, True, q_offset=10, k_offset=0)
    future = ldf.attention_partial(q, k, v, True, q_offset=0, k_offset=100)  # every key in the future
    assert torch.isneginf(future[1]).all() and (future[2] == 0).all() and (future[0] == 0).all()
    torch.testing.assert_close(ldf.merge_attention_partials(*full, *future)[0], full[0])


def test_peak_memory_tiled_is_far_below_naive():
    N = 1024
    q, k, v = _qkv(1, 1, 1, N, N, 64, dtype=torch.float32, seed=7)
    naive = ldf.peak_memory_bytes(lambda: ldf.attention_reference(q, k, v))
    tiled = ldf.peak_memory_bytes(lambda: ldf.flash_attention(q, k, v, block_q=128, block_k=128))
    assert naive >= 2 * N * N * 4           # at least the score and probability matrices
    assert tiled < naive / 4
    assert ldf.peak_memory_bytes(lambda: torch.empty(1000, dtype=torch.float32)) == 4000


def test_hbm_accesses_formulas():
    r = ldf.attention_hbm_accesses(4096, 64, 25_000)
    assert r["standard_theta"] == 4096 * 64 + 4096 ** 2
    assert math.isclose(r["flash_theta"], 4096 ** 2 * 64 ** 2 / 25_000)
    assert r["standard_exact"] == 4 * 4096 * 64 + 4 * 4096 ** 2
    Bc = math.ceil(25_000 / 256)
    Tc = math.ceil(4096 / Bc)
    assert r["flash_exact"] == 4096 * 64 + 2 * 4096 + 2 * 4096 * 64 + Tc * (3 * 4096 * 64 + 4 * 4096)
    assert r["flash_exact"] < r["standard_exact"]
    assert r["io_floor"] == 4 * 4096 * 64 and r["flash_theta_above_floor"]
    assert r["flash_exact"] >= r["io_floor"]
    with pytest.raises(ValueError, match="M=32 .*d ≤ M ≤ N·d"):
        ldf.attention_hbm_accesses(10, 64, 32)
    # Theorem 2 needs M ≤ N·d: a 1024-token head of d=64 fits 116,736 elements whole
    with pytest.raises(ValueError, match="M=116736 .*range"):
        ldf.attention_hbm_accesses(1024, 64, 116_736)
    # inside the range but short: Θ with constant 1 falls below the 4·N·d floor, and says so
    r = ldf.attention_hbm_accesses(1024, 128, 116_736)
    assert r["flash_theta"] < r["io_floor"] and not r["flash_theta_above_floor"]


def test_bad_input():
    q, k, v = _qkv(1, 3, 2, 4, 4, 8)
    with pytest.raises(ValueError, match="multiple"):
        ldf.flash_attention(q, k, v)
    q, k, v = _qkv(1, 2, 2, 4, 4, 8)
    with pytest.raises(ValueError, match="block_k"):
        ldf.flash_attention(q, k, v, block_k=0)
    with pytest.raises(ValueError, match="window"):
        ldf.flash_attention(q, k, v, causal=False, window=3)
    with pytest.raises(ValueError, match="window"):
        ldf.flash_attention(q, k, v, window=0)
