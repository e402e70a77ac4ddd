"""Every number chapter 08's prose states (notebooks/08_optimization_map.ipynb), computed by the package.

Section 1's W8A8 figures, the exercises and the fusion block size are pinned in
``tests/test_exercise_answers.py::test_ch08_solutions``; this file holds the rest: the arithmetic
worked by hand, the diagram's numbers, the calculator's opening setting and the takeaway lines.
"""
import pytest

import llm_dataflow as ldf
from llm_dataflow.diagrams.optimization_map import map_numbers


def test_section1_by_hand():
    # "Llama-3-8B stores 16.06 GB ... one embedding row ... the new token's K and V: 15.01 GB ... 15.01 GB ÷ 3.35 TB/s ≈ 4.48 ms"
    cfg = ldf.model_config("Llama-3-8B")
    assert round(ldf.weight_bytes(cfg, "bf16") / 1e9, 2) == 16.06
    b = ldf.decode_step_bounds(cfg, "H100-SXM", 1, 0)
    assert round(b.nbytes / 1e9, 2) == 15.01 and ldf.hardware("H100-SXM").hbm_bandwidth == 3.35e12
    assert round(b.time_s * 1e3, 2) == 4.48 and b.nbytes == (
        ldf.weight_bytes(cfg, "bf16") - (cfg.vocab_size - 1) * cfg.d_model * 2 + ldf.kv_bytes_per_token(cfg))
    # "INT4 ... the step reads 4.65 GB: at least 1.39 ms"
    b4 = ldf.decode_step_bounds(cfg, "H100-SXM", 1, 0, "int4")
    assert (round(b4.nbytes / 1e9, 2), round(b4.time_s * 1e3, 2)) == (4.65, 1.39)
    # the table's bound is the decode calculator's
    assert ldf.quant_report("Llama-3-8B", "int4", "H100-SXM")["decode step ≥ (ms)"] == pytest.approx(b4.time_s * 1e3)


def test_diagram_numbers():
    n = map_numbers()
    # the bytes a batch-1 decode step reads, as section 1 works them by hand
    assert (round(n["w_bf16"] / 1e9, 2), round(n["w_int4"] / 1e9, 2)) == (15.01, 4.65)
    assert (round(n["kv_bf16"] / 1e3, 1), round(n["kv_fp8"] / 1e3, 1)) == (131.1, 66.6)
    assert n["scores"] == 32 * 4096 * 4096 * 2 and round(n["scores"] / 1e9, 1) == 1.1
    assert n["kernels"] == 7 and n["bubble"] == 0.75 and "tokens_per_step" not in n


def test_speculative_by_hand_and_the_calculator_opening():
    # "(1 - 0.8^5)/0.2 = 3.36 tokens per target step, for 4 x 0.1 + 1 = 1.4 ... a speed-up of 2.40"
    assert round(ldf.expected_tokens_per_step(0.8, 4), 2) == 3.36 and round(4 * 0.1 + 1, 1) == 1.4
    assert round(ldf.speculative_speedup(0.8, 4, 0.1), 2) == 2.40
    # the calculator opens at its function's defaults (issue 47's nit): 0.8 / 4 / 0.1, and it pays
    import inspect
    d = {k: v.default for k, v in inspect.signature(ldf.speculative_calculator).parameters.items()}
    assert d == {"alpha": 0.8, "gamma": 4, "cost_ratio": 0.1}
    assert ldf.speculative_calculator()["pays?"] == "yes"
    # section 4's real pair: c ≈ 0.11, speed-up 1.6 at alpha 0.6 to 3.3 at 0.9 at the best gamma
    c = (ldf.decode_step_bounds("Llama-3-8B", "H100-SXM", 1, 0).nbytes
         / ldf.decode_step_bounds("Llama-3.1-70B", "H100-SXM", 1, 0).nbytes)
    assert round(c, 2) == 0.11
    assert (round(ldf.best_gamma(0.6, c)[1], 1), round(ldf.best_gamma(0.9, c)[1], 1)) == (1.6, 3.3)


def test_section2_kernels_and_byte_ratio():
    f = ldf.fusion_bytes(1024, 1024, 4, residual=True)
    assert (f["kernels_unfused"], f["kernels_fused"]) == (7, 1) and round(f["ratio"], 1) == 2.5


def test_section5_transfer_shares():
    # "Over NVLink the transfer is 1-3 % of the ideal prefill; over PCIe or the network, 14-27 %"
    rows = {r["link"]: r["transfer / prefill"] for r in ldf.kv_transfer_table("Llama-3-8B", 4096, "bf16", "H100-SXM")}
    nv = [v for k, v in rows.items() if k.startswith("NVLink")]
    other = [v for k, v in rows.items() if not k.startswith("NVLink")]
    assert (round(100 * min(nv)), round(100 * max(nv))) == (1, 3)
    assert (round(100 * min(other)), round(100 * max(other))) == (14, 27)


def test_alpha_estimator_by_hand():
    # "three steps at gamma = 4, with 4, 1 and 0 drafts accepted ... alpha = (4 + 1 + 0) / (4 + 2 + 1)
    # = 5/7 ≈ 0.71 ... 'accepted / proposed', here 5/12 ... position 1 was tested 3 times and
    # accepted twice, 0.67; position 2 once in two, 0.5"
    s = ldf.SpecStats(4, [4, 1, 0])
    assert s.alpha == 5 / 7 and round(s.alpha, 2) == 0.71 and round(5 / 12, 2) == 0.42
    by = ldf.acceptance_by_position([4, 1, 0], 4)
    assert (by[0][0], by[0][1], round(by[0][2], 2)) == (3, 2, 0.67) and (by[1][0], by[1][1], by[1][2]) == (2, 1, 0.5)


def test_fusion_tensor_bounds():
    # "at least 32 MiB and at most 64 MiB": the cell's sizing, on a machine reporting 260 MiB of L3
    # (the VM that ran the chapter), 32 MiB (a 2-core AMD EPYC) and 48 MiB (an Intel Xeon)
    from llm_dataflow.memory import CacheLevel
    MiB = ldf.MiB
    for l3, want in ((260 * MiB, 64 * MiB), (32 * MiB, 32 * MiB), (48 * MiB, 48 * MiB)):
        caches = [CacheLevel("L3", 3, "Unified", l3, "0-1", "test")]
        assert min(ldf.past_last_level_bytes(1, caches, minimum=32 * MiB), 64 * MiB) == want
    # the map's accounts: the figure's five panel names are the table's "account" values
    from llm_dataflow.diagrams.optimization_map import draw_map
    svg = draw_map("en")
    for acc in ("Weights read per token", "KV cache read per token", "Activations and intermediates",
                "Kernel launches (host overhead)", "Idle time and interference"):
        assert acc in svg
