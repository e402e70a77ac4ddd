"""The numbers chapter 01 (a quantised checkpoint's bytes) and chapter 07 (expert parallelism in
the memory fit) print, each pinned and, where cheap, recounted independently from the config's
fields (llm_dataflow.core.accounting.weight_bytes_breakdown, QuantSpec.tensor_parts,
core.fit.memory_fit with ep=, core.serving.engine_memory, core.parallel.ep_bytes_per_token).
"""
import pytest

import llm_dataflow as ldf
from llm_dataflow.core.formats import QuantSpec

#: The quantization_config blocks chapter 01's table reads (the keys the quantisers write).
FP8_BLOCK = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]}
FP8_ROW = {"quant_method": "fbgemm_fp8", "modules_to_not_convert": ["lm_head"]}
GPTQ = {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True, "desc_act": False}
AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}
PARTS = ("values", "scales", "zero_points", "g_idx", "other", "kept")


def _llama70():
    return ldf.model_config("Llama-3.1-70B")


# --- QuantSpec.tensor_parts --------------------------------------------------------------------
@pytest.mark.parametrize("spec", [QuantSpec.fp8_block(), QuantSpec.int4_groupwise(128), QuantSpec.nvfp4(),
                                  QuantSpec.mxfp4(), QuantSpec.int8_per_channel(),
                                  ldf.quant_spec_from_config(GPTQ),
                                  ldf.quant_spec_from_config({"load_in_4bit": True,
                                                              "bnb_4bit_use_double_quant": True})])
@pytest.mark.parametrize("shape", [(1024, 4096), (576, 7168), (3, 256)])
def test_tensor_parts_sum_to_tensor_bytes(spec, shape):
    parts = spec.tensor_parts(shape, shape[1])
    assert set(parts) == {"values", "scales", "zero_points", "g_idx", "other"}
    assert sum(parts.values()) == spec.tensor_bytes(shape, shape[1])


def test_tensor_parts_by_hand():
    # a [1024, 4096] GPTQ weight: packed int4 values, one FP16 scale and one 4-bit zero per 128, int32 g_idx
    p = ldf.quant_spec_from_config(GPTQ).tensor_parts((1024, 4096), 4096)
    assert p == {"values": 1024 * 4096 // 2, "scales": 1024 * 32 * 2, "zero_points": 1024 * 32 // 2,
                 "g_idx": 4 * 4096, "other": 0}
    # NVFP4: the FP32 tensor scale is "other"
    assert QuantSpec.nvfp4().tensor_parts((16, 16), 16) == {"values": 128, "scales": 16, "zero_points": 0,
                                                            "g_idx": 0, "other": 4}


# --- weight_bytes_breakdown --------------------------------------------------------------------
@pytest.mark.parametrize("model", ["Llama-3.1-70B", "DeepSeek-V3", "Qwen3-30B-A3B", "Gemma-2-9B", "Mixtral-8x7B"])
@pytest.mark.parametrize("fmt", ["bf16", "fp8", "int4-zp", "nvfp4", "mxfp4"])
def test_breakdown_total_is_weight_bytes(model, fmt):
    b = ldf.weight_bytes_breakdown(model, fmt)
    assert b["total"] == sum(b[k] for k in PARTS) == ldf.weight_bytes(ldf.model_config(model), fmt)
    assert b["quantised_params"] + b["kept_params"] == ldf.param_count(ldf.model_config(model))


def test_breakdown_loaded_is_what_memory_fit_counts():
    """Marlin (vLLM's kernel for GPTQ on Ampere, Ada, Blackwell) is what ``loaded=True`` counts;
    on Hopper vLLM picks Machete, which keeps the zero points and g_idx (plus a perm with
    act-order): the stored bytes, and one more int32 per input channel of each matrix."""
    cfg = _llama70()
    for qc in (GPTQ, {**GPTQ, "desc_act": True}, {**GPTQ, "sym": False}):
        spec = ldf.quant_spec_from_config(qc)
        loaded = ldf.weight_bytes_breakdown(cfg, spec, loaded=True)["total"]
        assert ldf.memory_fit(cfg, "A100-80GB-SXM", spec).weights == loaded
        stored = ldf.weight_bytes_breakdown(cfg, spec)
        hopper = ldf.memory_fit(cfg, "H200", spec).weights
        perm = stored["g_idx"] if qc.get("desc_act") else 0      # one int32 per input channel, as g_idx
        assert hopper == stored["total"] + perm
    assert ldf.memory_fit(cfg, "H100-SXM", ldf.quant_spec_from_config(GPTQ)).weights == 39_792_689_152
    assert ldf.weight_bytes_breakdown(cfg, ldf.quant_spec_from_config(GPTQ), loaded=True)["total"] == 39_500_398_592


def test_breakdown_refuses_a_non_bool_loaded():
    with pytest.raises(ValueError, match="loaded=1"):
        ldf.weight_bytes_breakdown("Llama-3.1-70B", "fp8", loaded=1)


# --- chapter 01: Llama-3.1-70B's quantised checkpoints -----------------------------------------
def _independent_llama70():
    """(quantised params, kept params, FP8 block scales, row scales, groups of 128) from the config's fields."""
    c = _llama70()
    qdim, kvdim = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
    mats = [(qdim, c.d_model), (kvdim, c.d_model), (kvdim, c.d_model), (c.d_model, qdim),
            (c.d_ff, c.d_model), (c.d_ff, c.d_model), (c.d_model, c.d_ff)]           # [out, in] per layer
    quantised = c.n_layers * sum(o * i for o, i in mats)
    kept = 2 * c.vocab_size * c.d_model + (2 * c.n_layers + 1) * c.d_model            # embedding, head, norms
    blocks = c.n_layers * sum(-(-o // 128) * -(-i // 128) for o, i in mats)
    rows = c.n_layers * sum(o for o, _ in mats)
    groups = c.n_layers * sum(o * i // 128 for o, i in mats)
    in_channels = c.n_layers * sum(i for _, i in mats)
    return quantised, kept, blocks, rows, groups, in_channels


def test_ch01_table_recounted_from_config_fields():
    quantised, kept, blocks, rows, groups, in_ch = _independent_llama70()
    cfg = _llama70()
    assert (quantised, kept) == (68_451_041_280, 2_102_665_216)
    fp8 = ldf.weight_bytes_breakdown(cfg, ldf.quant_spec_from_config(FP8_BLOCK))
    assert fp8 == {"values": quantised, "scales": 4 * blocks, "zero_points": 0, "g_idx": 0, "other": 0,
                   "kept": 2 * kept, "total": quantised + 4 * blocks + 2 * kept,
                   "quantised_params": quantised, "kept_params": kept}
    row = ldf.weight_bytes_breakdown(cfg, ldf.quant_spec_from_config(FP8_ROW))
    assert (row["values"], row["scales"], row["kept"]) == (quantised, 4 * rows, 2 * kept)
    gptq = ldf.weight_bytes_breakdown(cfg, ldf.quant_spec_from_config(GPTQ))
    assert (gptq["values"], gptq["scales"], gptq["zero_points"], gptq["g_idx"]) == (
        quantised // 2, 2 * groups, groups // 2, 4 * in_ch)
    awq = ldf.weight_bytes_breakdown(cfg, ldf.quant_spec_from_config(AWQ))
    assert (awq["g_idx"], awq["zero_points"]) == (0, groups // 2)
    marlin = ldf.weight_bytes_breakdown(cfg, ldf.quant_spec_from_config(GPTQ), loaded=True)
    assert (marlin["zero_points"], marlin["g_idx"]) == (0, 0)
    assert gptq["total"] - marlin["total"] == groups // 2 + 4 * in_ch == 292_290_560   # "292 MB less"


def test_ch01_table_as_printed():
    cfg = _llama70()
    specs = {"BF16": "bf16", "FP8, 128 × 128 blocks": ldf.quant_spec_from_config(FP8_BLOCK),
             "FP8, per output row": ldf.quant_spec_from_config(FP8_ROW),
             "INT4 GPTQ, group 128": ldf.quant_spec_from_config(GPTQ),
             "INT4 AWQ, group 128": ldf.quant_spec_from_config(AWQ)}
    rows = {n: ldf.weight_bytes_breakdown(cfg, s) for n, s in specs.items()}
    rows["INT4 GPTQ as vLLM holds it"] = ldf.weight_bytes_breakdown(cfg, specs["INT4 GPTQ, group 128"], loaded=True)
    gb = lambda x: round(x / 1e9, 3)  # noqa: E731  (the parts table: GB, 3 decimals)
    totals = {n: (round(b["total"] / 1e9, 2), round(b["total"] / rows["BF16"]["total"], 4)) for n, b in rows.items()}
    assert totals == {"BF16": (141.11, 1.0), "FP8, 128 × 128 blocks": (72.67, 0.515),
                      "FP8, per output row": (72.68, 0.5151), "INT4 GPTQ, group 128": (39.79, 0.282),
                      "INT4 AWQ, group 128": (39.77, 0.2818), "INT4 GPTQ as vLLM holds it": (39.5, 0.2799)}
    parts = {n: (gb(b["values"]), gb(b["scales"]), gb(b["zero_points"]), gb(b["g_idx"]), gb(b["kept"]))
             for n, b in rows.items() if n != "BF16"}
    assert parts == {
        "FP8, 128 × 128 blocks": (68.451, 0.017, 0.0, 0.0, 4.205),
        "FP8, per output row": (68.451, 0.027, 0.0, 0.0, 4.205),
        "INT4 GPTQ, group 128": (34.226, 1.07, 0.267, 0.025, 4.205),
        "INT4 AWQ, group 128": (34.226, 1.07, 0.267, 0.0, 4.205),
        "INT4 GPTQ as vLLM holds it": (34.226, 1.07, 0.0, 0.0, 4.205),
    }
    assert round(rows["INT4 GPTQ, group 128"]["total"] - rows["INT4 GPTQ as vLLM holds it"]["total"]) == 292_290_560
    assert rows["FP8, 128 × 128 blocks"]["kept"] == 4_205_330_432 and round(4_205_330_432 / 1e9, 2) == 4.21   # "4.21 GB"
    # the printed line and the prose: 70,553,706,496 parameters, 70.55 GB at 1 B, 35.28 GB at 0.5 B;
    # INT4 scales are 1/32 of the INT4 values; the FP8 total equals chapter 01's capacity table and exercise 1
    n = ldf.param_count(cfg)
    assert n == 70_553_706_496 and ldf.fmt_gb(n) == "70.55 GB" and ldf.fmt_gb(n / 2) == "35.28 GB"
    assert rows["INT4 GPTQ, group 128"]["scales"] * 32 == rows["INT4 GPTQ, group 128"]["values"]
    assert rows["FP8, 128 × 128 blocks"]["total"] == ldf.weight_bytes(cfg, "fp8") == 72_673_083_392
    assert round(rows["INT4 GPTQ, group 128"]["scales"] / 1e9, 2) == 1.07
    assert round(rows["FP8, 128 × 128 blocks"]["kept_params"] / 1e9, 2) == 2.10
    assert cfg.vocab_size == 128_256   # "the embedding and the output head of a 128,256-token vocabulary"
    assert 2 * cfg.vocab_size * cfg.d_model / rows["FP8, 128 × 128 blocks"]["kept_params"] > 0.99


def test_ch01_exercise_5_act_order():
    cfg = _llama70()
    spec = ldf.quant_spec_from_config({**GPTQ, "desc_act": True})
    files, held = ldf.weight_bytes_breakdown(cfg, spec), ldf.weight_bytes_breakdown(cfg, spec, loaded=True)
    assert files["total"] == 39_792_689_152
    assert held["total"] == 39_550_205_952 and held["g_idx"] == 49_807_360 and held["zero_points"] == 0


# --- chapter 07: expert parallelism on H200s ---------------------------------------------------
def _row(model, tp, dp, ep):
    cfg = ldf.model_config(model)
    fit = ldf.memory_fit(cfg, "H200", "fp8", tp=tp, ep=ep)    # vLLM's convention (0.21: graphs in the budget)
    eng = ldf.engine_memory(cfg, "H200", "fp8", tp=tp, ep=ep)
    moe_layers = sum(map(cfg.is_moe_layer, range(cfg.n_layers)))
    a2a = ldf.ep_bytes_per_token(cfg, ep, "fp8")["total"] * moe_layers if ep > 1 and dp > 1 else 0
    return (round(fit.weights / 1e9, 2), round(eng.non_torch / 2**30, 2),
            round(eng.kv_bytes / 1e9, 2) if eng.fits else "does not fit",
            eng.kv_tokens, eng.kv_tokens * dp, round(a2a / 1e6, 2))


def test_ch07_tables_as_printed():
    """Issue 42 changed the memory outside torch at TP 8 from 1.79 x 8 = 14.32 GiB to vLLM V1's
    logged 2.17 GiB (beyond the TP 4 log) and put the CUDA graph pool (1.04 GiB) in the budget:
    DeepSeek-V3 at TP 8 474,816 -> 644,576 tokens, EP 8 3,502,848 -> 3,561,600; the ratio 7.38 -> 5.53."""
    assert {lay: _row("DeepSeek-V3", *lay) for lay in ((8, 1, 1), (1, 8, 1), (1, 8, 8))} == {
        # the package's default memory outside torch (issue 42: vLLM V1's logs, 0.27 GiB at TP 1,
        # 2.17 GiB from TP 4 on; the old default was 1.79 GiB x tp) and its KV-room model
        (8, 1, 1): (85.14, 2.17, 45.3, 644_576, 644_576, 0.0),
        (1, 8, 1): (673.15, 0.27, "does not fit", 0, 0, 0.0),
        (1, 8, 8): (100.84, 0.27, 31.29, 445_200, 3_561_600, 11.64),
    }
    assert {lay: _row("Qwen3-30B-A3B", *lay) for lay in ((2, 2, 1), (1, 4, 1), (4, 1, 4), (1, 4, 4))} == {
        (2, 2, 1): (15.6, 2.08, 115.69, 2_353_792, 4_707_584, 0.0),
        (1, 4, 1): (31.17, 0.27, 101.93, 1_036_928, 4_147_712, 0.0),
        (4, 1, 4): (7.81, 2.17, 123.37, 5_020_064, 5_020_064, 0.0),     # dp = 1: no all-to-all
        (1, 4, 4): (9.43, 0.27, 123.68, 1_258_160, 5_032_640, 2.36),
    }
    # as many copies as vLLM's all-gather backend (N - 1) for DeepSeek-V3, more for Qwen3 at N = 4
    ds, qw = ldf.model_config("DeepSeek-V3"), ldf.model_config("Qwen3-30B-A3B")
    assert ds.n_experts_per_token * 7 / 8 == 7 and qw.n_experts_per_token * 3 / 4 > 3


def test_ch07_headers():
    ds, qw = ldf.model_config("DeepSeek-V3"), ldf.model_config("Qwen3-30B-A3B")
    assert (ds.n_routed_experts, ds.n_experts_per_token, ds.n_layers) == (256, 8, 61)
    assert sum(map(ds.is_moe_layer, range(ds.n_layers))) == 58 and ds.dense_layers == (0, 1, 2)
    assert (qw.n_routed_experts, qw.n_experts_per_token, qw.n_layers) == (128, 8, 48)
    assert sum(map(qw.is_moe_layer, range(qw.n_layers))) == 48


def _expert_bytes_fp8(cfg):
    """One routed expert's stored FP8 bytes, all MoE layers, from the config's fields: gate, up
    [moe_d_ff, D] and down [D, moe_d_ff] at 1 B + one FP32 scale per 128 × 128 block."""
    D, F = cfg.d_model, cfg.moe_d_ff
    one = 3 * D * F + 4 * (2 * -(-F // 128) * -(-D // 128) + -(-D // 128) * -(-F // 128))
    return one * sum(map(cfg.is_moe_layer, range(cfg.n_layers)))


@pytest.mark.parametrize("model,tp,ep", [("DeepSeek-V3", 1, 8), ("Qwen3-30B-A3B", 1, 4), ("Qwen3-30B-A3B", 4, 4)])
def test_ch07_ep_weights_recounted(model, tp, ep):
    """Per GPU under EP = the non-expert weights split tp ways + E/ep whole experts (recounted)."""
    cfg = ldf.model_config(model)
    experts = cfg.n_routed_experts * _expert_bytes_fp8(cfg)
    whole = ldf.weight_bytes(cfg, "fp8")
    rest = whole - experts                                       # attention, dense, shared, router, tables
    fit = ldf.memory_fit(cfg, "H200", "fp8", tp=tp, ep=ep)
    assert fit.weights == pytest.approx(experts / ep + rest / tp, rel=5e-3)   # norms, routers: replicated, not /tp
    if tp == 1:   # nothing split by TP: exactly the rest plus E/ep experts
        assert fit.weights == pytest.approx(rest + cfg.n_routed_experts // ep * _expert_bytes_fp8(cfg), abs=1)
    assert "whole experts per GPU, ep = tp × dp" in fit.quant_rule


def test_ch07_deepseek_all_to_all_recounted():
    cfg = ldf.model_config("DeepSeek-V3")
    per_layer = 2 * cfg.n_experts_per_token * 7 / 8 * cfg.d_model * 2      # dispatch + combine, BF16
    assert ldf.ep_bytes_per_token(cfg, 8, "fp8")["total"] == per_layer == 200_704
    assert per_layer * 58 == 11_640_832


def test_ch07_fp8_block_refusal():
    with pytest.raises(ValueError) as err:
        ldf.memory_fit("Qwen3-30B-A3B", "H200", "fp8", tp=4)
    msg = str(err.value)
    assert msg.startswith("tensor parallel degree tp=4 splits the expert gate/up (moe_d_ff=768) into "
                          "192-wide shards, not a multiple of the weight format's 128×128 fp8_e4m3 block (128)")
    assert msg.endswith("or ep > 1 so that experts stay whole")
    assert ldf.memory_fit("Qwen3-30B-A3B", "H200", "fp8", tp=4, ep=4).fits
    # the prose: at tp = 4 the attention's shards are 1,024-wide (query) and 128-wide (key, value)
    qw = ldf.model_config("Qwen3-30B-A3B")
    assert (qw.n_heads * qw.head_dim // 4, qw.n_kv_heads * qw.head_dim // 4, qw.moe_d_ff // 4) == (1024, 128, 192)
