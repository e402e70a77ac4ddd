"""Tests for llm_dataflow.chips and the roofline helpers it uses from hardware.py."""
import pytest

import llm_dataflow as ldf
from llm_dataflow.core.chips import GENERATIONS, PROFILER_METRICS, TMA_VS_TMEM, generation, generations_table


def test_ridge_point_h100_bf16():
    # H100 SXM dense BF16 989.4e12 FLOP/s ÷ 3.35e12 B/s HBM3 = 295.34 FLOP/B (datasheet numbers)
    hw = ldf.hardware("H100-SXM")
    assert hw.flops("bf16") == 989.4e12 and hw.hbm_bandwidth == 3.35e12
    assert ldf.ridge_point(hw, "bf16") == pytest.approx(989.4e12 / 3.35e12)
    assert ldf.ridge_point("H100-SXM", "bf16") == pytest.approx(295.34, abs=0.01)
    assert round(ldf.ridge_point("H100-SXM")) == 295


def test_ridge_point_other_parts():
    assert ldf.ridge_point("A100-80GB-SXM", "bf16") == pytest.approx(312e12 / 2039e9)   # ≈ 153
    assert ldf.ridge_point("H200", "bf16") == pytest.approx(989.4e12 / 4.8e12)          # ≈ 206
    with pytest.raises(ValueError, match="fp8"):
        ldf.ridge_point("A100-80GB-SXM", "fp8")                                       # no FP8 tensor cores


def test_arithmetic_intensity():
    # a bf16 GEMV (decode, M=1): 2·N·K FLOP over ≈ N·K·2 bytes of weights → ≈ 1 FLOP/B
    N = K = 4096
    assert ldf.arithmetic_intensity(2 * N * K, 2 * (N * K + K + N)) == pytest.approx(1.0, rel=1e-3)
    assert ldf.arithmetic_intensity(0, 1) == 0
    with pytest.raises(ValueError, match="nbytes"):
        ldf.arithmetic_intensity(1.0, 0)
    with pytest.raises(ValueError, match="flops"):
        ldf.arithmetic_intensity(-1.0, 1)


def test_rows_read_capacities_from_presets():
    for g in GENERATIONS.values():
        hw = ldf.hardware(g.preset)
        assert hw.architecture == g.architecture
        assert g.smem_per_sm_bytes == hw.smem_per_sm_bytes
        assert g.registers_per_sm_bytes == hw.registers_per_sm_bytes == 256 * 1024  # 64K × 32-bit
        assert g.l2_bytes == hw.l2_bytes and g.hbm_bandwidth == hw.hbm_bandwidth
        assert "Programming Guide" in g.sources and "PTX ISA" in g.sources


def test_placement_facts():
    amp, hop, bw = generation("Ampere"), generation("Hopper"), generation("Blackwell")
    assert amp.mma_instruction.startswith("mma.sync") and "ldmatrix" in amp.shared_to_operands
    assert amp.accumulator.startswith("registers") and amp.b_operand.startswith("registers")
    assert hop.mma_instruction.startswith("wgmma") and hop.b_operand.startswith("shared")
    assert hop.accumulator.startswith("registers") and "cp.async.bulk.tensor" in hop.global_to_shared
    assert bw.mma_instruction.startswith("tcgen05.mma") and "TMEM" in bw.accumulator
    # TMA (a copy unit in each SM, not CUDA's host-transfer "copy engine") and TMEM (a memory) differ
    assert TMA_VS_TMEM["TMA (Tensor Memory Accelerator)"].startswith("a copy unit in each SM")
    assert "copy engine" not in TMA_VS_TMEM["TMA (Tensor Memory Accelerator)"]
    assert (amp.has_tma, hop.has_tma, bw.has_tma) == (False, True, True)
    assert (amp.has_tmem, hop.has_tmem, bw.has_tmem) == (False, False, True)
    assert bw.tmem_per_sm_bytes == 128 * 512 * 4                 # lanes × columns × 32 bit
    assert set(TMA_VS_TMEM) == {"TMA (Tensor Memory Accelerator)", "TMEM (Tensor Memory)"}


def test_generations_table():
    rows = generations_table("bf16")
    assert [r["architecture"] for r in rows] == ["Ampere", "Hopper", "Blackwell"]
    hop = rows[1]
    assert hop["ridge bf16 (FLOP/B)"] == "295" and hop["shared memory / SM"] == "228 KiB"
    assert hop["L2"] == "50 MiB" and hop["HBM"] == "3,350 GB/s" and hop["global → shared"] == "TMA"
    # B200: the preset's own note says the L2 size is not in NVIDIA's datasheet (issue 45's NIT #35)
    assert rows[2]["L2"] == "not in NVIDIA's datasheet" and rows[2]["TMEM / SM"] == "256 KiB"
    assert "not in NVIDIA's datasheet" in ldf.hardware("B200").notes
    # a batch-1 GEMV stages nothing: global -> registers on every generation
    assert {r["batch-1 GEMV weights"] for r in rows} == {"global → registers"}
    with pytest.raises(ValueError, match="fp8"):
        generations_table("fp8")   # A100 publishes no FP8 peak


def test_generation_bad_name():
    with pytest.raises(ValueError, match="Volta"):
        generation("Volta")


def test_profiler_metrics_table():
    names = " ".join(m["metric"] for m in PROFILER_METRICS)
    assert "dram__bytes_read.sum" in names and "lts__t_sector_hit_rate.pct" in names
    assert all(set(m) == {"metric", "shows", "source code cannot tell"} for m in PROFILER_METRICS)


def test_on_chip_names_across_vendors():
    roles = [r["role"] for r in ldf.ON_CHIP_NAMES]
    assert roles[1] == "programmable on-chip scratchpad"
    scratch = ldf.ON_CHIP_NAMES[1]
    assert (scratch["NVIDIA"], scratch["AMD"], scratch["Intel"]) == (
        "shared memory", "LDS (local data share)", "SLM (shared local memory)")
    assert all(set(r) == {"role", "NVIDIA", "AMD", "Intel"} for r in ldf.ON_CHIP_NAMES)
    assert "carveout" in ldf.ON_CHIP_NAMES[2]["NVIDIA"]


def test_h100_l2_measured_is_kept_apart_and_cited():
    """Chapter 04 sets the L2 demand of its tiles beside the one published measurement of an H100's
    L2 bandwidth (NVIDIA publishes none): about 5.5 TB/s on an H100 PCIe."""
    m = ldf.H100_L2_MEASURED
    assert m["bandwidth"] == 5.5e12 and "PCIe" in m["device"] and "114 SMs" in m["device"]
    assert "Chips and Cheese" in m["source"] and "scaling-book" in m["source"]
    assert ldf.hardware("H100-SXM").extra == {}          # the presets hold datasheet numbers only
