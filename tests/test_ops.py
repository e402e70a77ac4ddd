"""Tests of the per-operator ledger (ops.py): counted FLOPs and bytes equal the closed forms, and
the operator-by-operator run reproduces the decoder layer's own output."""
import pytest
import torch

import llm_dataflow as ldf

MATMUL_OPS = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "router", "attention"}


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-moe"])
@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_ledger_counts_match_formulas_and_layer_output(name, phase):
    cfg = ldf.model_config(name)
    torch.manual_seed(0)
    model = ldf.Decoder(cfg)
    frame, out, x, cache = ldf.op_ledger(cfg, batch=3, seq_len=7, phase=phase, context_len=5, model=model,
                                         return_output=True)
    # bytes counted from tensor sizes == closed form, for every operator
    assert (frame["bytes"] == frame["bytes_analytic"]).all(), frame
    mm = frame[frame["op"].isin(MATMUL_OPS)]
    assert (mm["flops_counted"] == mm["flops_analytic"]).all(), mm
    assert (frame[frame["kind"].isin(["norm", "elementwise", "memory"])]["flops_counted"] == 0).all()
    # the ledger ran the real layer: same output as DecoderLayer.forward on the same cache state
    T = 7 if phase == "prefill" else 1
    C = 0 if phase == "prefill" else 5
    ref_cache = model.new_cache(3, C + T)
    for li in range(cfg.n_layers):
        ref_cache.k[li].copy_(cache.k[li])
        ref_cache.v[li].copy_(cache.v[li])
    ref_cache.lengths.fill_(C)
    ids = torch.zeros(3, T, dtype=torch.long)
    _, ctx = model.prepare(ids, ref_cache)
    ref = model.model.layers[0](x, ctx, ref_cache)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-4)


def test_moe_expert_row_counts_routed_flops_only():
    cfg = ldf.model_config("tiny-moe")
    f = ldf.op_ledger(cfg, batch=2, seq_len=5)
    row = f.set_index("op").loc["experts (routed)"]
    N, k = 10, cfg.n_experts_per_token
    assert row["flops_counted"] == N * k * 6 * cfg.d_model * cfg.moe_d_ff  # k of E experts per token
    assert row["flops_counted"] < N * cfg.n_routed_experts * 6 * cfg.d_model * cfg.moe_d_ff


def test_decode_is_weight_bound_prefill_is_not():
    cfg = ldf.model_config("tiny-llama")
    dec = ldf.ledger_totals(ldf.op_ledger(cfg, batch=1, phase="decode", context_len=31))
    pre = ldf.ledger_totals(ldf.op_ledger(cfg, batch=1, seq_len=32))
    assert dec["intensity"] < 2 < pre["intensity"]
    assert pre["top_flops"] in ("gate_proj", "up_proj", "down_proj")


def test_analytic_costs_closed_form_and_errors():
    cfg = ldf.model_config("Llama-3-8B")
    c = ldf.analytic_op_costs(cfg, batch=1, seq_len=1, phase="decode", context_len=4095, elem_bytes=2)
    # decode q_proj: 2·D·D FLOPs, D·D weight bytes dominate
    assert c["q_proj"][0] == 2 * 4096 * 4096
    assert c["q_proj"][1] == (4096 + 4096 * 4096 + 4096) * 2
    assert c["attention"][0] == 4 * 32 * 4096 * 128
    with pytest.raises(ValueError, match="phase"):
        ldf.analytic_op_costs(cfg, 1, 1, phase="train")
    with pytest.raises(ValueError, match="batch"):
        ldf.op_ledger(ldf.model_config("tiny-llama"), batch=0)
    with pytest.raises(ValueError, match="layer"):
        ldf.op_ledger(ldf.model_config("tiny-llama"), layer=5)


def test_layer_costs_calculator():
    d = ldf.layer_costs("Llama-3-8B", "decode", 1, 1024, "bf16")
    assert d["most bytes"] == "gate_proj" and 0.9 < d["intensity (FLOP/B)"] < 1.1
    p = ldf.layer_costs("Llama-3-8B", "prefill", 1, 1024, "bf16")
    assert p["intensity (FLOP/B)"] > 100 * d["intensity (FLOP/B)"] / 2
    assert ldf.layer_costs("Qwen3-30B-A3B", "decode")["most bytes"] == "experts (routed)"
    with pytest.raises(ValueError, match="kv_lora_rank"):
        ldf.layer_costs("DeepSeek-V3")
    with pytest.raises(ValueError, match="model"):
        ldf.layer_costs("nope")


def test_moe_expert_bytes_use_expected_experts_hit_like_weight_bytes_read():
    cfg = ldf.model_config("Qwen3-30B-A3B")
    layer = next(i for i in range(cfg.n_layers) if cfg.is_moe_layer(i))
    E, k, D, Fe = cfg.n_routed_experts, cfg.n_experts_per_token, cfg.d_model, cfg.moe_d_ff
    for B in (1, 4, 64):
        c = ldf.analytic_op_costs(cfg, B, 1, "decode", 100, elem_bytes=2, layer=layer)
        hit = ldf.expected_experts_hit(E, k, B)
        assert hit < min(E, B * k) or B == 1  # collisions: fewer than N·k distinct experts
        # the same expert weight bytes the package's ledger (weight_bytes_read) charges per layer
        expert_w = sum(t.numel for t in ldf.tensor_specs(cfg) if t.layer == layer and t.role == "expert") * 2
        assert c["experts (routed)"][1] == pytest.approx(expert_w * hit / E + B * k * (3 * D + 6 * Fe) * 2)
    # one kernel per matmul everywhere: dense gate and up each read x, as the routed experts do
    d = ldf.analytic_op_costs(ldf.model_config("tiny-llama"), 2, 3, elem_bytes=4)
    N, cfgd = 6, ldf.model_config("tiny-llama")
    assert d["gate_proj"][1] == (N * cfgd.d_model + cfgd.d_model * cfgd.d_ff + N * cfgd.d_ff) * 4
    assert d["silu*mul"][0] == 6 * N * cfgd.d_ff  # sigmoid 4 + ×g + ×up


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("phase", ["prefill", "decode"])
def test_attention_row_counts_the_unfused_kernels_it_runs(dtype, phase):
    # the ledger's attention writes [B, H, T, S] scores and probabilities and reads them back;
    # kernel by kernel, the bytes counted from the tensors it made equal attention_traffic's
    cfg = ldf.model_config("tiny-llama").replace(sliding_window=4)
    torch.manual_seed(0)
    model = ldf.Decoder(cfg, dtype=dtype)
    f = ldf.op_ledger(cfg, batch=3, seq_len=7, phase=phase, context_len=5, model=model)
    T, S = (7, 7) if phase == "prefill" else (1, 6)
    e = 4 if dtype == torch.float32 else 2
    model_k = ldf.attention_traffic(3, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, T, S, e)
    assert f.attrs["attention_kernels"] == model_k
    row = f.set_index("op").loc["attention"]
    assert row["bytes"] == sum(r + w for _, r, w in model_k) == row["bytes_analytic"]
    # about 32 B per score element beyond q/K/V/out, in FP32 and in BF16 alike
    fused = ldf.attention_traffic(3, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, T, S, e, "fused")
    ns = 3 * cfg.n_heads * T * S
    assert row["bytes"] - sum(r + w for _, r, w in fused) == 32 * ns + T * S


def test_attention_traffic_closed_form_and_errors():
    # Llama-3-8B, one layer, prefill of 8192 tokens in BF16: unfused vs fused
    eager = sum(r + w for _, r, w in ldf.attention_traffic(1, 32, 8, 128, 8192, 8192, 2))
    fused = sum(r + w for _, r, w in ldf.attention_traffic(1, 32, 8, 128, 8192, 8192, 2, "fused"))
    assert fused == (2 * 32 + 2 * 8) * 8192 * 128 * 2 == 167_772_160
    assert eager == fused + 32 * 32 * 8192 * 8192 + 8192 * 8192 == 68_954_357_760
    c = ldf.analytic_op_costs(ldf.model_config("Llama-3-8B"), 1, 8192, elem_bytes=2, attention="fused")
    assert c["attention"][1] == fused
    with pytest.raises(ValueError, match="kernel"):
        ldf.attention_traffic(1, 4, 2, 8, 3, 3, 4, "flash")
    with pytest.raises(ValueError, match="keys=2"):
        ldf.attention_traffic(1, 4, 2, 8, 3, 2)
    with pytest.raises(ValueError, match="attention"):
        ldf.analytic_op_costs(ldf.model_config("tiny-llama"), 1, 4, attention="paged")


def test_prefill_and_decode_are_regions_not_definitions():
    # chapter 03: a 128-token prefill of Llama-3-8B in BF16 is below every ridge the chapter prints
    p = ldf.layer_costs("Llama-3-8B", "prefill", 1, 128)
    assert p["intensity (FLOP/B)"] == 115.7
    assert p["intensity (FLOP/B)"] < min(ldf.ridge_point(h) for h in ("A100-80GB-SXM", "H100-SXM", "B200"))
    r = ldf.op_regions("Llama-3-8B", "prefill", 1, 128)
    assert (r["matmuls (FLOP/B)"], r["attention (FLOP/B)"], r["ridge (FLOP/B)"]) == (122.1, 102.4, 295.3)
    assert r["matmuls"] == r["attention"] == "memory-bound"
    assert ldf.op_regions("Llama-3-8B", "prefill", 1, 1024)["matmuls"] == "compute-bound"
    # a large decode batch: the matmuls cross the ridge, attention (GQA, 4 FLOP/B) never does
    d = ldf.op_regions("Llama-3-8B", "decode", 512, 1024)
    assert (d["matmuls (FLOP/B)"], d["matmuls"]) == (429.4, "compute-bound")
    assert (d["attention (FLOP/B)"], d["attention"]) == (4.0, "memory-bound")
    # ... and the whole layer, KV reads 84 % of its bytes, stays memory-bound (issue 45 review #12)
    assert (d["layer (FLOP/B)"], d["layer"]) == (83.5, "memory-bound")
    assert d["layer (FLOP/B)"] == round(ldf.layer_costs("Llama-3-8B", "decode", 512, 1024)["intensity (FLOP/B)"], 1)
    assert list(d) == ["phase", "batch", "tokens", "matmuls (FLOP/B)", "attention (FLOP/B)", "other (FLOP/B)",
                       "layer (FLOP/B)", "ridge (FLOP/B)", "matmuls", "attention", "layer"]
    assert ldf.op_regions("Llama-3-8B", "decode", 64, 1024)["matmuls (FLOP/B)"] == 62.5
    # N = B·T rows per weight read decides the matmuls, whichever phase supplies them
    assert ldf.matmul_ridge_tokens("Llama-3-8B", "H100-SXM") == 333
    assert ldf.matmul_ridge_tokens("Llama-3-8B", "A100-80GB-SXM") == 163
    assert ldf.matmul_ridge_tokens("Mixtral-8x7B", "H100-SXM") == 1310   # each expert sees ~N·k/E
    n = ldf.matmul_ridge_tokens("Llama-3-8B")
    below, at = (ldf.op_regions("Llama-3-8B", "prefill", 1, t) for t in (n - 1, n))
    assert below["matmuls"] == "memory-bound" and at["matmuls"] == "compute-bound"
    assert ldf.op_regions("Llama-3-8B", "decode", n, 0)["matmuls"] == "compute-bound"
    # chapter 05's critical batch counts a whole step's weight bytes only: a little smaller
    assert ldf.critical_batch(ldf.model_config("Llama-3-8B"), "H100-SXM") == 297
    with pytest.raises(ValueError, match="max_tokens"):
        ldf.matmul_ridge_tokens("Llama-3-8B", max_tokens=8)


def test_attention_floors():
    """Eager vs fused attention: bytes from attention_traffic, FLOPs from analytic_op_costs, each
    floor at the preset's HBM bandwidth or dtype peak; the fused kernel is compute-bound at 8,192."""
    f = ldf.attention_floors("Llama-3-8B", 8192, "H100-SXM", "bf16")
    e8, f8 = (sum(r + w for _, r, w in ldf.attention_traffic(1, 32, 8, 128, 8192, 8192, 2, k)) for k in ("eager", "fused"))
    assert (f["eager bytes"], f["fused bytes"], f["bytes ratio"]) == (e8, f8, e8 / f8)
    c = ldf.analytic_op_costs(ldf.model_config("Llama-3-8B"), 1, 8192, elem_bytes=2, attention="fused")
    assert f["flops"] == c["attention"][0] == 4 * 32 * 8192 * 8192 * 128
    h = ldf.hardware("H100-SXM")
    assert f["compute time (s)"] == f["flops"] / h.peak_flops["bf16"] and f["fused HBM time (s)"] == f8 / h.hbm_bandwidth
    assert f["fused bound"] == "compute-bound" and f["time ratio"] == f["eager HBM time (s)"] / f["compute time (s)"]
    short = ldf.attention_floors("Llama-3-8B", 128)
    assert short["fused bound"] == "memory-bound" and short["time ratio"] == short["bytes ratio"]
    for kw, field in ((dict(tokens=0), "tokens"), (dict(hardware="Z100"), "hardware"), (dict(dtype="fp12"), "dtype"),
                      (dict(hardware="A100-80GB-SXM", dtype="fp8"), "dtype"), (dict(model="nope"), "model")):
        with pytest.raises(ValueError, match=field):
            ldf.attention_floors(**kw)


def test_calculators_name_bad_inputs():
    for fn, kw, field in ((ldf.op_regions, {"hardware": None}, "hardware"), (ldf.op_regions, {"hardware": []}, "hardware"),
                          (ldf.op_regions, {"tokens": None}, "tokens"), (ldf.op_regions, {"phase": "train"}, "phase"),
                          (ldf.matmul_ridge_tokens, {"hardware": None}, "hardware"),
                          (ldf.layer_costs, {"tokens": -1}, "tokens"), (ldf.layer_costs, {"batch": 0}, "batch")):
        with pytest.raises(ValueError, match=field):
            fn(**kw)
    assert ldf.layer_costs("Llama-3-8B", "decode", 1, 0)["most bytes"] == "gate_proj"   # an empty cache is allowed


def test_eager_hf_attention_counts_transformers_full_sequence():
    """Chapter 03: transformers' eager path for bench-llama at T = S = 128 in FP32 — repeat_kv
    (K, V read at 4 heads, written at 16), QKᵀ and PV reading the expanded K and V, an FP32
    [B, 1, T, S] mask, the output's contiguous() copy — against the ledger's folded sequence."""
    cfg = ldf.model_config("bench-llama")
    args = (1, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, 128, 128, 4)
    total = {k: sum(r + w for _, r, w in ldf.attention_traffic(*args, k)) for k in ldf.ATTENTION_KERNELS}
    assert total == {"eager": 9_715_712, "eager-hf": 12_910_592, "fused": 1_310_720}
    kv = 128 * 64 * 4 * cfg.n_kv_heads                      # one of K, V at H_kv heads
    extra = (2 * kv + 2 * 4 * kv) + 2 * 3 * kv + (128 * 128 * 4 - 128 * 128) + 2 * 16 * 128 * 64 * 4
    assert total["eager-hf"] - total["eager"] == extra      # repeat_kv, expanded reads, mask, copy
    assert round(total["eager-hf"] / total["fused"], 2) == 9.85
    assert round(total["eager"] / total["fused"], 1) == 7.4
    hf = dict((k, (r, w)) for k, r, w in ldf.attention_traffic(*args, "eager-hf"))
    assert hf["repeat_kv (K, V → H heads)"] == (2 * kv, 8 * kv)
