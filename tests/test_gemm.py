"""Tests for llm_dataflow.gemm: the tiled kernel vs torch.matmul, and the counter vs the model."""
import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

import llm_dataflow as ldf
from llm_dataflow.gemm import gemm_traffic, gemm_tile_report, tiled_matmul


@pytest.mark.parametrize("M,N,K,bm,bn,bk", [
    (37, 53, 29, 16, 16, 8),     # irregular: no tile divides the matrix
    (64, 64, 64, 32, 32, 32),    # regular
    (1, 97, 33, 64, 32, 16),     # decode-like: one row, tile taller than the matrix
    (5, 7, 3, 1, 1, 1),          # untiled limit
])
def test_tiled_matmul_matches_torch_fp32(M, N, K, bm, bn, bk):
    torch.manual_seed(0)
    X, W = torch.randn(M, K), torch.randn(K, N)
    Y, t = tiled_matmul(X, W, bm, bn, bk)
    torch.testing.assert_close(Y, torch.matmul(X, W))
    assert t == gemm_traffic(M, N, K, bm, bn, bk, "fp32")


@pytest.mark.parametrize("dtype,name", [(torch.bfloat16, "bf16"), (torch.float16, "fp16")])
def test_tiled_matmul_half_precision(dtype, name):
    torch.manual_seed(0)
    X, W = torch.randn(45, 31, dtype=dtype), torch.randn(31, 70, dtype=dtype)
    Y, t = tiled_matmul(X, W, 16, 32, 8)
    assert Y.dtype == dtype
    # fp32 accumulation in both; only the final rounding to 16 bits may differ by one ulp
    ref = (X.float() @ W.float()).to(dtype)
    torch.testing.assert_close(Y, ref, atol=1e-2, rtol=1e-2)
    assert t.dtype == name and t == gemm_traffic(45, 70, 31, 16, 32, 8, name)


def test_counter_values_by_hand():
    # M=37, N=53, K=29, tiles 16x16x8: ceil(37/16)=3 row tiles, ceil(53/16)=4 column tiles
    t = gemm_traffic(37, 53, 29, 16, 16, 8, "bf16")
    assert t.x_loads == 37 * 29 * 4 and t.w_loads == 29 * 53 * 3 and t.y_stores == 37 * 53
    assert t.tiles == 12 and t.k_steps == 4
    assert t.global_bytes == 2 * (37 * 29 * 4 + 29 * 53 * 3 + 37 * 53)
    assert t.flops == 2 * 37 * 53 * 29


def test_block_k_does_not_change_traffic():
    a = gemm_traffic(300, 200, 100, 64, 32, 8)
    b = gemm_traffic(300, 200, 100, 64, 32, 64)
    assert (a.x_loads, a.w_loads, a.y_stores) == (b.x_loads, b.w_loads, b.y_stores)
    assert b.working_set_bytes > a.working_set_bytes


def test_untiled_reuse_is_one_and_large_tiles_approach_limit():
    assert gemm_traffic(64, 64, 64, 1, 1, 1).reuse == 1.0
    t = gemm_traffic(4096, 4096, 4096, 128, 256, 64, "bf16")
    assert t.reuse == pytest.approx(2 / (1 / 256 + 1 / 128))
    # no-L2-reuse intensity for 128x128 bf16 tiles: 2MNK / (2 (MK·N/128 + KN·M/128 + MN)) = 63.0
    u = gemm_traffic(4096, 4096, 4096, 128, 128, 64, "bf16")
    assert u.arithmetic_intensity == ldf.arithmetic_intensity(u.flops, u.global_bytes)
    assert round(u.arithmetic_intensity, 1) == 63.0
    assert u.compulsory_intensity == pytest.approx(2 * 4096**3 / (3 * 4096**2 * 2))


def test_working_set_and_dtype_bytes():
    t = gemm_traffic(10, 10, 10, 128, 128, 64, "fp8")
    assert t.stage_bytes == (128 * 64 + 64 * 128) * 1 and t.accumulator_bytes == 128 * 128 * 4
    assert t.working_set_bytes == t.stage_bytes + t.accumulator_bytes
    assert gemm_traffic(3, 3, 3, 2, 2, 2, "int4").bytes_per_element == 0.5


@settings(max_examples=40, deadline=None)
@given(M=st.integers(1, 40), N=st.integers(1, 40), K=st.integers(1, 40),
       bm=st.integers(1, 17), bn=st.integers(1, 17), bk=st.integers(1, 17))
def test_counter_equals_model_property(M, N, K, bm, bn, bk):
    torch.manual_seed(0)
    X, W = torch.randn(M, K), torch.randn(K, N)
    Y, t = tiled_matmul(X, W, bm, bn, bk)
    assert t == gemm_traffic(M, N, K, bm, bn, bk, "fp32")
    assert t.tiles == math.ceil(M / bm) * math.ceil(N / bn)
    torch.testing.assert_close(Y, X @ W)


def test_report_verdicts():
    r = gemm_tile_report(4096, 4096, 4096, "bf16", 128, 128, 64, "H100-SXM")
    assert r["ridge point (FLOP/B)"] == round(ldf.ridge_point("H100-SXM", "bf16"), 1) == 295.3
    assert r["verdict, no L2 reuse"] == "memory-bound"
    assert r["verdict, perfect L2 (HBM side only)"] == "compute-bound"
    # ... but L2 must still serve every tile load: 2.18 GB per 137.4 GFLOP at 989.4 TFLOP/s
    assert r["tile loads from L2 at the peak (TB/s)"] == 15.7
    t = gemm_traffic(4096, 4096, 4096, 128, 128, 64, "bf16")
    assert t.bandwidth_at(989.4e12) == pytest.approx(t.global_bytes / (t.flops / 989.4e12))
    assert (r["FLOP"], r["global bytes (tile loads + Y stores)"], r["compulsory bytes (each matrix once)"]) == \
        ("137 GFLOP", "2.18 GB", "100.66 MB")
    assert r["stages fit shared memory per SM"] == "yes" and r["accumulator fits"] == "yes"
    r = gemm_tile_report(1, 4096, 4096, "bf16", 128, 128, 64, "H100-SXM")  # decode: one token
    assert r["verdict, perfect L2 (HBM side only)"] == "memory-bound"
    # ... so it never runs at the peak: no L2 demand "at the peak" (it would print 997.4 TB/s)
    assert r["tile loads from L2 at the peak (TB/s)"] == "n/a: HBM-bound, the peak is out of reach"
    assert round(gemm_traffic(1, 4096, 4096, 128, 128, 64).bandwidth_at(989.4e12) / 1e12, 1) == 997.4
    # 32 tiles on 132 SMs: one wave, 76 % of the SM time idle
    assert (r["output tiles"], r["waves of tiles on the SMs (one tile per SM)"], r["SM time idle in the last wave"]) == \
        (32, 1, "76%")
    r = gemm_tile_report(16, 4096, 4096, "fp8", 128, 128, 64, "A100-80GB-SXM")
    assert r["ridge point (FLOP/B)"] == "n/a" and r["verdict, perfect L2 (HBM side only)"].startswith("n/a")
    assert r["tile loads from L2 at the peak (TB/s)"] == "n/a"
    with pytest.raises(ValueError, match="flops_per_s"):
        gemm_traffic(64, 64, 64, 16, 16, 16).bandwidth_at(0)


def test_report_checks_each_part_against_its_own_memory():
    # 256x256x64 BF16: 64 KiB of input tiles per stage (shared memory) and a 256 KiB FP32
    # accumulator (registers on Hopper, TMEM on Blackwell) -- never their 320 KiB sum against smem
    t = gemm_traffic(4096, 4096, 4096, 256, 256, 64, "bf16")
    assert t.stage_bytes == 64 * 1024 and t.accumulator_bytes == 256 * 1024
    assert t.working_set_bytes == 320 * 1024
    h = gemm_tile_report(4096, 4096, 4096, "bf16", 256, 256, 64, "H100-SXM", stages=3)
    assert h["input tiles per stage"] == "64.00 KiB"
    assert h["shared memory, stages × input tiles"] == "192.00 KiB"           # 3 × 64 KiB of 228 KiB
    assert h["stages fit shared memory per SM"] == "yes" and h["most stages that fit"] == 3
    assert h["accumulator lives in"] == "registers" and h["accumulator share of that storage"] == "100%"
    assert h["accumulator fits"] == "no"                                      # the whole register file
    assert gemm_tile_report(4096, 4096, 4096, "bf16", 256, 256, 64, "H100-SXM", stages=4)[
        "stages fit shared memory per SM"] == "no"                            # 256 KiB > 228 KiB
    b = gemm_tile_report(4096, 4096, 4096, "bf16", 256, 256, 64, "B200", stages=3)
    assert b["accumulator lives in"] == "Tensor Memory (TMEM)" and b["accumulator fits"] == "yes"
    assert b["accumulator share of that storage"] == "100%"                   # 128 lanes x 512 cols x 4 B
    # the chapter's Hopper tile: 128x256, 48 KiB per stage, 4 stages = 192 KiB; accumulator half the RF
    c = gemm_tile_report(8192, 8192, 8192, "bf16", 128, 256, 64, "H100-SXM", stages=4)
    assert c["shared memory, stages × input tiles"] == "192.00 KiB"           # 4 × 48 KiB
    assert c["stages fit shared memory per SM"] == "yes" and c["accumulator share of that storage"] == "50%"
    assert c["accumulator fits"] == "yes"
    a = gemm_tile_report(4096, 4096, 4096, "bf16", 256, 256, 64, "A100-80GB-SXM")
    assert a["most stages that fit"] == 2 and a["accumulator fits"] == "no"   # 164 KiB smem
    # the row names do not depend on the arguments (a calculator shows a fixed set of rows)
    assert list(gemm_tile_report(stages=5)) == list(h)
    with pytest.raises(ValueError, match="stages"):
        gemm_tile_report(stages=0)


@pytest.mark.parametrize("kwargs,field", [
    (dict(M=0, N=1, K=1, block_m=1, block_n=1, block_k=1), "M"),
    (dict(M=1, N=1, K=1, block_m=0, block_n=1, block_k=1), "block_m"),
    (dict(M=1, N=1, K=1, block_m=1, block_n=1, block_k=1.5), "block_k"),
    (dict(M=1, N=1, K=1, block_m=1, block_n=1, block_k=1, dtype="fp12"), "dtype"),
])
def test_model_bad_input(kwargs, field):
    with pytest.raises(ValueError, match=field):
        gemm_traffic(**kwargs)


def test_kernel_bad_input():
    X = torch.randn(4, 3)
    with pytest.raises(ValueError, match="K"):
        tiled_matmul(X, torch.randn(4, 5))
    with pytest.raises(ValueError, match="dtype"):
        tiled_matmul(X, torch.randn(3, 5, dtype=torch.float64))
    with pytest.raises(ValueError, match="2-D"):
        tiled_matmul(X[0], torch.randn(3, 5))
    with pytest.raises(ValueError, match="block_n"):
        tiled_matmul(X, torch.randn(3, 5), 2, -1, 2)
    with pytest.raises(ValueError, match="hardware"):
        gemm_tile_report(hw="Z100")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_tiled_matmul_cuda():
    torch.manual_seed(0)
    X, W = torch.randn(37, 29, device="cuda"), torch.randn(29, 53, device="cuda")
    Y, t = tiled_matmul(X, W, 16, 16, 8)
    torch.testing.assert_close(Y, X @ W, atol=1e-4, rtol=1e-4)  # TF32 may be on for X @ W
    assert t == gemm_traffic(37, 53, 29, 16, 16, 8, "fp32")


def test_kernel_restores_thread_setting():
    n = torch.get_num_threads()
    tiled_matmul(torch.randn(5, 4), torch.randn(4, 3), 2, 2, 2)
    assert torch.get_num_threads() == n


def test_logical_operand_reads_are_not_traffic():
    """Chapter 04 §3: the 4096³ bf16 GEMM's 2MNK·b logical operand reads at the H100's bf16 peak
    would need about 2 PB/s, 64× its shared-memory bandwidth; one Hopper wgmma m64n256k16
    fetches 10,240 B of operands for 1,048,576 B of logical operand reads."""
    t = ldf.gemm_traffic(4096, 4096, 4096, 128, 128, 64, "bf16")
    h100 = ldf.hardware("H100-SXM")
    smem = next(m.bandwidth for m in ldf.memory_tiers(h100.name) if m.tier.startswith("shared memory"))
    need = t.operand_bytes / (t.flops / h100.peak_flops["bf16"])
    assert f"{need / 1e15:.2f}" == "1.98" and round(need / smem) == 64 and f"{smem / 1e12:.1f}" == "30.9"
    mma = ldf.gemm_traffic(64, 256, 16, 64, 256, 16, "bf16")
    assert (mma.x_loads + mma.w_loads) * 2 == 10_240 and mma.operand_bytes == 1_048_576


def test_tile_waves():
    """Tail waste: the waves of output tiles on the SMs, and the MMA work of clipped edge tiles."""
    from llm_dataflow.gemm import tile_waves
    w = tile_waves(4096, 4096, 128, 128, 132)
    assert w == {"tiles": 1024, "waves": 8, "waves of work": 1024 / 132, "last wave tiles": 100,
                 "idle share": 1 - 1024 / 1056, "useful MMA share": 1.0}
    e = tile_waves(257, 321, 64, 64, 132)
    assert e["tiles"] == 5 * 6 and e["useful MMA share"] == 257 * 321 / (320 * 384)
    assert tile_waves(132, 64, 1, 64, 132)["idle share"] == 0.0           # exactly one full wave
    r = gemm_tile_report()
    assert (r["output tiles"], r["waves of tiles on the SMs (one tile per SM)"], r["SM time idle in the last wave"]) == \
        (1024, 8, "3%")
    for kw, field in ((dict(M=0), "M"), (dict(block_n=0), "block_n"), (dict(n_sms=0), "n_sms")):
        args = dict(M=8, N=8, block_m=4, block_n=4, n_sms=2) | kw
        with pytest.raises(ValueError, match=field):
            tile_waves(**args)
