"""Chapter 04's prose numbers (issue 48's rewrite, issue 45's errata), each recomputed from the package.

Every number the chapter's markdown states — the worked 4096³ example, L2's side of "perfect L2",
the activations that meet in L2, the tile fits of the exercises — is pinned here, so a change in
the package that moves one fails a test instead of leaving the prose stale.
"""
import math

import pytest

import llm_dataflow as ldf

T = ldf.gemm_traffic(4096, 4096, 4096, 128, 128, 64, "bf16")
H100 = ldf.hardware("H100-SXM")
PEAK = H100.peak_flops["bf16"]


def test_section1_worked_by_hand():
    # 0.5 FLOP/B without reuse in BF16; 33.6 MB per matrix, 101 MB each matrix once
    assert ldf.arithmetic_intensity(2, 2 * 2) == 0.5
    assert round(4096 ** 2 * 2 / 1e6, 1) == 33.6 and round(T.compulsory_bytes / 1e6) == 101
    # X and W each loaded 4096/128 = 32 times: 2.15 GB, plus Y: 2.18 GB; 137 GFLOP; 63 FLOP/B
    assert 4096 // 128 == 32 and round(2 * 32 * 4096 ** 2 * 2 / 1e9, 2) == 2.15
    assert round(T.global_bytes / 1e9, 2) == 2.18 and round(T.flops / 1e9) == 137
    assert round(T.arithmetic_intensity) == 63 and round(T.arithmetic_intensity, 1) == 63.0
    # without tiles: 2,731 times the compulsory bytes
    one = ldf.gemm_traffic(4096, 4096, 4096, 1, 1, 64, "bf16")
    assert round(one.global_bytes / one.compulsory_bytes) == 2731 and one.arithmetic_intensity == pytest.approx(0.5, abs=1e-3)
    # the ridge: 989.4 TFLOP/s / 3.35 TB/s = 295.3, "about 300"
    assert PEAK == 989.4e12 and H100.hbm_bandwidth == 3.35e12
    assert round(ldf.ridge_point("H100-SXM", "bf16"), 1) == 295.3 and round(ldf.ridge_point("H100-SXM", "bf16"), -2) == 300
    # opening and diagram: 275 GB named, 2.18 GB loaded, at least 101 MB from HBM
    assert round(T.operand_bytes / 1e9) == 275 and ldf.fmt_bytes(T.operand_bytes) == "274.88 GB"
    assert ldf.fmt_bytes(T.compulsory_bytes) == "100.66 MB" and round(T.reuse) == 128


def test_section3_l2_side():
    # 137 GFLOP / 989.4 TFLOP/s = 0.139 ms; 2.18 GB in that time = 15.7 TB/s from L2
    assert round(T.flops / PEAK * 1e3, 3) == 0.139
    assert round(T.bandwidth_at(PEAK) / 1e12, 1) == 15.7 and round(T.bandwidth_at(PEAK) / 1e12) == 16
    t256 = ldf.gemm_traffic(4096, 4096, 4096, 256, 256, 64, "bf16")
    assert round(t256.bandwidth_at(PEAK) / 1e12, 1) == 8.0
    # the H100's L2 bandwidth is not published; about 5.5 TB/s was measured on an H100 PCIe, so
    # 15.7 TB/s is about three times it, 8.0 TB/s still above it, and 128x256 tiles about twice it
    l2 = next(m for m in ldf.memory_tiers("H100-SXM") if m.tier == "L2")
    assert l2.bandwidth is None and l2.capacity_bytes == 50 * 2**20
    seen = ldf.H100_L2_MEASURED["bandwidth"]
    assert seen == 5.5e12 and round(T.bandwidth_at(PEAK) / seen) == 3 and t256.bandwidth_at(PEAK) > seen
    t128x256 = ldf.gemm_traffic(4096, 4096, 4096, 128, 256, 64, "bf16")
    assert round(t128x256.bandwidth_at(PEAK) / 1e12, 1) == 11.8 and round(t128x256.bandwidth_at(PEAK) / seen) == 2
    assert ldf.fmt_bytes(t128x256.global_bytes) == "1.64 GB"
    # two 128x256 tiles sharing their W tile by multicast load what one 256x256 tile loads
    assert t128x256.x_loads == t256.x_loads and t128x256.w_loads == 2 * t256.w_loads
    # the calculator's rows at its initial setting
    r = ldf.gemm_tile_report()
    assert r["verdict, perfect L2 (HBM side only)"] == "compute-bound"
    assert r["tile loads from L2 at the peak (TB/s)"] == 15.7
    # at M = 1 the row says n/a: a GEMM memory-bound even with perfect L2 never runs at the peak
    assert ldf.gemm_tile_report(1)["tile loads from L2 at the peak (TB/s)"].startswith("n/a")


def test_section3_l2_between_kernels():
    decode, prefill = 64 * 4096 * 2, 8192 * 4096 * 2
    assert round(decode / 1e6, 2) == 0.52 and round(prefill / 1e6, 1) == 67.1
    l2 = H100.l2_bytes
    assert l2 == 50 * 2**20 and round(decode / l2, 2) == 0.01 and prefill > l2


def test_section4_tiles_and_exercises():
    # the 128x256 Hopper/Blackwell tile: 48 KiB per stage, 4 stages 192 KiB of 228; accumulator half
    t = ldf.gemm_traffic(8192, 8192, 8192, 128, 256, 64, "bf16")
    assert t.stage_bytes == 48 * 1024 and 4 * t.stage_bytes == 192 * 1024
    assert H100.smem_per_sm_bytes == 228 * 1024
    assert t.accumulator_bytes == H100.registers_per_sm_bytes // 2 == 128 * 1024
    assert ldf.hardware("B200").tmem_per_sm_bytes == 256 * 1024
    # one wgmma m64n256k16 fetches 10 KiB of operands for 1 MiB of logical reads
    mma = ldf.gemm_traffic(64, 256, 16, 64, 256, 16, "bf16")
    assert (mma.x_loads + mma.w_loads) * 2 == 10 * 1024 and mma.operand_bytes == 2**20
    # exercise 3: 256x256 halves the L2 demand (8.0 vs 15.7 TB/s); 3 stages fit, 4 do not
    r3 = ldf.gemm_tile_report(4096, 4096, 4096, "bf16", 256, 256, 64, "H100-SXM", stages=3)
    assert r3["tile loads from L2 at the peak (TB/s)"] == 8.0 and r3["stages fit shared memory per SM"] == "yes"
    assert r3["most stages that fit"] == 3 and r3["accumulator fits"] == "no"
    assert 256 * 256 * 4 // 4 // 256 == 256 > 255
    # exercise 5: a 128x128 accumulator is 64 KiB, 25 % of B200 TMEM, 128 registers per thread of 128
    r5 = ldf.gemm_tile_report(4096, 4096, 4096, "bf16", 128, 128, 64, "B200")
    assert r5["fp32 accumulator"] == "64.00 KiB" and r5["accumulator share of that storage"] == "25%"
    assert 128 * 128 * 4 // 128 == 512 and 512 // 4 == 128 <= 255
    # exercise 1: a decode GEMV, about 1 FLOP/B even with perfect caching
    d = ldf.gemm_traffic(1, 4096, 4096, 128, 128, 64, "bf16")
    assert round(d.compulsory_intensity, 1) == 1.0


def test_tail_waste():
    """Section 4: edge tiles and the last wave (review #26)."""
    w = ldf.tile_waves(4096, 4096, 128, 128, H100.n_sms)
    assert (w["tiles"], w["waves"], round(w["waves of work"], 2), round(100 * w["idle share"])) == (1024, 8, 7.76, 3)
    t = ldf.tile_waves(257, 321, 64, 64, H100.n_sms)
    assert (5 * 64, 6 * 64) == (320, 384) and round(100 * t["useful MMA share"]) == 67
    d = ldf.tile_waves(16, 4096, 64, 128, H100.n_sms)
    assert d["useful MMA share"] == 0.25 and d["tiles"] == 32 and round(d["tiles"] / H100.n_sms, 2) == 0.24
    # exercise 5: Llama-3-8B's up-projection at 4,096 tokens, 128x256 tiles, on an H100 and a B200
    h, b = (ldf.tile_waves(4096, 14336, 128, 256, n) for n in (132, 148))
    assert h["tiles"] == 32 * 56 == 1792 and ldf.hardware("B200").n_sms == 148
    assert (round(h["waves of work"], 2), h["waves"], round(100 * h["idle share"])) == (13.58, 14, 3)
    assert (round(b["waves of work"], 2), b["waves"], b["last wave tiles"], round(100 * b["idle share"])) == (12.11, 13, 16, 7)


def test_exercises_1_and_2():
    # exercise 1: 4096 M / (2M + 4096) reaches the ridge between 345 and 346 tokens
    assert ldf.gemm_tile_report(345)["verdict, perfect L2 (HBM side only)"] == "memory-bound"
    assert ldf.gemm_tile_report(346)["verdict, perfect L2 (HBM side only)"] == "compute-bound"
    ridge = ldf.ridge_point("H100-SXM", "bf16")
    assert round(ridge * 4096 / (4096 - 2 * ridge)) == 345
    # exercise 2: b_k = 128 leaves the bytes, doubles the stage, and 3 stages fit instead of 7
    a, b = ldf.gemm_tile_report(), ldf.gemm_tile_report(block_k=128)
    assert a["global bytes (tile loads + Y stores)"] == b["global bytes (tile loads + Y stores)"] == "2.18 GB"
    assert (a["input tiles per stage"], b["input tiles per stage"]) == ("32.00 KiB", "64.00 KiB")
    assert (a["most stages that fit"], b["most stages that fit"]) == (7, 3)
    # exercise 3: 128x256 tiles: 48 KiB per stage, 4 stages (192 KiB), accumulator 128 KiB = half the RF
    c = ldf.gemm_tile_report(block_m=128, block_n=256)
    assert (c["input tiles per stage"], c["most stages that fit"], c["accumulator share of that storage"]) == \
        ("48.00 KiB", 4, "50%")
    assert c["tile loads from L2 at the peak (TB/s)"] == 11.8 and 4 * 48 == 192


def test_chips_texts_carry_the_errata():
    # issue 45: TensorRT-LLM's GEMV keeps scales and zeros in registers; TMEM: tcgen05.st, sm_103
    assert "tcgen05.st" in ldf.TMA_VS_TMEM["TMEM (Tensor Memory)"]
    assert "sm_103" in ldf.TMA_VS_TMEM["TMEM (Tensor Memory)"]
    acc = next(r for r in ldf.ON_CHIP_NAMES if r["role"] == "tensor-core accumulator memory")
    assert acc["AMD"].startswith("—") and "registers" in acc["AMD"]
    import llm_dataflow.core.chips as chips
    assert "zeros_iterator.load(vec_zero, iter)" in chips.__doc__
    assert "shmem[CtaM * CtaN * Interleave * WarpNum]" in chips.__doc__
    assert "only the per-group scales" not in chips.__doc__


def test_the_prose_states_these_numbers():
    """The numbers pinned above are the ones the chapter's markdown writes (so the two stay linked)."""
    import json
    import pathlib
    nb = pathlib.Path(__file__).resolve().parents[1] / "notebooks" / "04_inside_the_chip.ipynb"
    md = " ".join("".join(c["source"]) for c in json.loads(nb.read_text(encoding="utf-8"))["cells"]
                  if c["cell_type"] == "markdown")
    for s in ("275 GB", "2.18 GB", "101 MB", "0.5 FLOP/B", "33.6 MB", "2.15 GB", "137 GFLOP", "63 FLOP/B",
              "2,731", "63.0 FLOP/B", "989.4 TFLOP/s ÷ 3.35 TB/s ≈ 300 FLOP/B", "295.3", "0.139 ms",
              "15.7 TB/s", "8.0 TB/s", "0.52 MB", "50 MiB", "67.1 MB", "64 KiB", "192 KiB", "228 KiB",
              "256 KiB", "25 %", "128 of the 255 registers", "10 KiB for 1 MiB", "5.5 TB/s", "about three times",
              "3 %", "67 %", "320 × 384", "257 × 321", "345", "346", "7 to 3", "32 KiB", "11.8 TB/s", "1.64 GB",
              "48 KiB", "1{,}792", "13.58", "12.11", "16 of 148", "7 %", "128 KiB", "32 MiB"):
        assert s in md, s
