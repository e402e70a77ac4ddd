"""One accounting model: every chapter's view of a setting reports the same bytes and times;
memory fit; MoE and MLA on the roofline; FP4 formats; the one parallel-degree check; `plan`."""
import json
import math
import subprocess
import sys

import pytest
import torch

import llm_dataflow as ldf
from llm_dataflow import parallel as P

MODELS = ["Llama-2-7B", "Llama-3-8B", "Llama-3.1-70B", "Mixtral-8x7B", "Qwen3-30B-A3B", "DeepSeek-V3", "Gemma-2-9B"]
FORMATS = ["bf16", "int8", "int4", "int4-zp", "fp8", "nvfp4", "mxfp4"]
HW = ["H100-SXM", "B200"]


# --- every chapter's view of one setting --------------------------------------------------------
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("hw", HW)
def test_every_view_reports_the_same_numbers(model, fmt, hw):
    cfg = ldf.model_config(model)
    plan = ldf.precision_plan(fmt)
    stored = ldf.weight_bytes(cfg, fmt)
    bound = ldf.decode_step_lower_bound(cfg, hw, 1, 0, fmt)
    # weights stored: ch01 capacity, ch08 quant report, ch00 ledger's load row, `plan`, memory fit
    assert ldf.capacity(model, fmt, hw)["weight bytes"] == stored
    q = ldf.quant_report(model, fmt, hw)
    assert q["weight bytes stored"] == stored
    load = ldf.request_ledger(cfg, 64, 2, 1, fmt)[0]
    assert load.total == stored
    r = ldf.plan_report(cfg, hw, weights=fmt)
    assert r["weight_bytes"] == stored
    assert ldf.memory_fit(cfg, hw, fmt).weights == stored
    # the decode step at batch 1, context 0: ch05 calculator, ch08 quant report, ch07 at tp = pp = 1, plan
    assert ldf.decode_calculator(model, hw, fmt, 1, 0)["decode step ≥ (ms)"] == bound * 1e3
    assert q["decode step ≥ (ms)"] == bound * 1e3
    assert q["GB read per decode step"] * 1e9 == pytest.approx(ldf.decode_step_bytes(cfg, 1, 0, fmt), rel=1e-15)
    assert ldf.parallel_step_time(model, hw, 1, 1, "NVLink4", 1, fmt)["compute per step (s)"] == pytest.approx(
        bound, rel=1e-12)
    assert r["decode_step_s"] == bound
    # the KV cache in the plan's dtype: ch06 report, ledger, plan — BF16 whatever the weights
    kvd = plan.kv_dtype
    assert kvd == "bf16"
    kv = ldf.kv_cache_bytes(cfg, 4096, 2, kvd)
    assert ldf.kv_cache_report(model, 4096, 2, kvd)["KV cache bytes"] == kv == ldf.kv_bytes(cfg, 4096, 2, plan)
    rows = {row.item: row for row in ldf.request_ledger(cfg, 4096, 2, 2, fmt)}
    assert rows["KV written"].total == kv
    assert ldf.plan_report(cfg, hw, batch=2, context=4096, weights=fmt)["kv_bytes"] == kv
    # weights read per decode step: the ledger row is the accounting's read count
    assert rows["weights (once per step)"].bytes_each == round(ldf.weight_bytes_read(cfg, fmt, 2))


def test_batch_calculator_is_the_same_bound():
    for b in (1, 8, 512):
        r = ldf.batch_calculator("Mixtral-8x7B", "H100-SXM", b, 1024)
        assert r["step ≥ (ms)"] == ldf.decode_step_lower_bound("Mixtral-8x7B", "H100-SXM", b, 1024) * 1e3


def test_kv_read_over_steps_closed_form():
    # the ledger's decode KV read equals the sum of chapter 06's formula over the steps,
    # for full layers, sliding windows (Gemma-2, a tiny window) and MLA
    for cfg in (ldf.model_config("Llama-2-7B"), ldf.model_config("Gemma-2-9B"), ldf.model_config("DeepSeek-V3"),
                ldf.model_config("tiny-llama").replace(sliding_window=5)):
        for P, n in ((0, 1), (3, 10), (512, 127), (4090, 20)):
            expect = 2 * sum(ldf.kv_cache_bytes(cfg, P + i - 1, 1, "fp8") for i in range(1, n + 1))
            assert ldf.kv_read_over_steps(cfg, P, n, 2, "fp8") == expect


# --- precision plans -----------------------------------------------------------------------------
def test_kv_cache_does_not_follow_the_weights():
    cfg = ldf.model_config("Llama-3-8B")
    kv_tok = 32 * 2 * 8 * 128 * 2       # BF16: 131,072 B per token
    for fmt in ("bf16", "int8", "int4", "fp8", "nvfp4"):
        b = ldf.decode_step_bounds(cfg, "H100-SXM", 1, 1000, fmt)
        assert b.nbytes == pytest.approx(ldf.weight_bytes_read(cfg, fmt, 1) + 1001 * kv_tok)
    # asked for, the cache is quantised: FP8 with one FP16 scale per K and per V vector (chapter 06)
    b8 = ldf.decode_step_bounds(cfg, "H100-SXM", 1, 1000, "int4", kv_dtype="fp8")
    assert b8.nbytes == pytest.approx(ldf.weight_bytes_read(cfg, "int4", 1) + 1001 * ldf.kv_bytes_per_token(cfg, "fp8"))
    assert ldf.precision_plan("fp32").kv_dtype == "fp32"
    assert ldf.precision_plan("int4", kv="fp8").kv_dtype == "fp8"
    with pytest.raises(ValueError, match="'int3' is not a weight format"):
        ldf.precision_plan("int3")
    with pytest.raises(ValueError, match="kv"):
        ldf.PrecisionPlan("bf16", kv="fp12")


def test_compute_dtype_follows_the_chip():
    # weight-only INT4/INT8 multiply in BF16; FP8 and FP4 weights use the chip's peak for them
    assert ldf.precision_plan("int4").compute_dtype(ldf.hardware("H100-SXM")) == "bf16"
    assert ldf.precision_plan("int8").compute_dtype(ldf.hardware("H100-SXM")) == "bf16"
    assert ldf.precision_plan("fp8").compute_dtype(ldf.hardware("H100-SXM")) == "fp8"
    assert ldf.precision_plan("fp8").compute_dtype(ldf.hardware("A100-80GB-SXM")) == "bf16"
    assert ldf.precision_plan("nvfp4").compute_dtype(ldf.hardware("B200")) == "fp4"
    assert ldf.precision_plan("nvfp4").compute_dtype(ldf.hardware("H100-SXM")) == "bf16"


# --- FP4 -----------------------------------------------------------------------------------------
def test_fp4_formats_exact_bytes():
    shape = (4096, 4096)
    n = 4096 * 4096
    # NVFP4: 4-bit E2M1 values + one FP8 E4M3 scale per 16 + one FP32 per tensor
    assert ldf.QuantSpec.nvfp4().tensor_bytes(shape, 4096) == n // 2 + n // 16 + 4
    # MXFP4: 4-bit E2M1 values + one E8M0 scale per 32
    assert ldf.QuantSpec.mxfp4().tensor_bytes(shape, 4096) == n // 2 + n // 32
    with pytest.raises(ValueError, match="group_size=16 does not divide in_features=40"):
        ldf.QuantSpec.nvfp4().tensor_bytes((8, 40), 40)


def test_fp4_decode_on_b200():
    cfg = ldf.model_config("Llama-3-8B")
    b = ldf.decode_step_bounds(cfg, "B200", 1, 0, "fp4")
    # the quantised linear layers run at B200's dense FP4 peak, the BF16 LM head and attention at BF16's
    q = 2 * ldf.accounting.quantised_matmul_params(cfg, ldf.QuantSpec.nvfp4())
    assert q == 2 * (ldf.matmul_params(cfg) - 128256 * 4096)
    assert b.compute_s == pytest.approx(q / 9e15 + (b.flops - q) / 2.25e15, rel=1e-12)
    assert b.nbytes == ldf.decode_step_bytes(cfg, 1, 0, "nvfp4")
    assert ldf.decode_step_lower_bound("Llama-3-8B", "B200", 1, 0, "fp4") == b.time_s
    assert ldf.decode_calculator("Llama-3-8B", "B200", "fp4", 1, 0)["compute / KV dtype"] == "fp4 / bf16"


# --- memory fit -----------------------------------------------------------------------------------
def test_memory_fit_verdicts():
    """One convention for every calculator: vLLM's (the runtime's total, 0.9 of it, the engine's terms)."""
    fit = ldf.memory_fit("Llama-3.1-70B", "H100-SXM", "bf16")
    assert not fit.fits and fit.reason.startswith("does not fit: weights 131.42 GiB")
    # the calculator shows the verdict's head and the same fit's budget (chapter 05's short rows)
    calc = ldf.decode_calculator("Llama-3.1-70B", "H100-SXM", "bf16")
    assert calc["memory (one GPU)"] == "does not fit: the weights and the engine's other terms exceed its budget"
    assert calc["vLLM budget"] == f"0.9 × 79.22 GiB = {fit.budget / 2**30:,.2f} GiB" and f"{fit.budget / 2**30:,.2f} GiB" in fit.reason
    two = ldf.memory_fit("Llama-3.1-70B", "H100-SXM", "bf16", tp=2)
    assert two.fits and two.weights == pytest.approx(fit.weights / 2, rel=1e-3)
    # KV room by hand: Llama-3-8B, BF16, one H100 (79.22 GiB as the runtime reports it)
    cfg = ldf.model_config("Llama-3-8B")
    f = ldf.memory_fit(cfg, "H100-SXM", "bf16")
    act = ldf.activation_bytes(cfg, 8192, "bf16", logits_rows=256)
    assert f.activations == act and f.capacity == 79.22 * 2**30 and f.reserve == f.capacity - 0.9 * f.capacity
    room = 0.9 * f.capacity - 16_060_522_496 - act - f.non_torch - f.cuda_graphs
    assert f.kv_bytes == room and f.kv == 0 and f.kv_tokens == int(room // (16 * 131_072)) * 16
    # a batch whose cache does not fit says so, with the bytes
    big = ldf.memory_fit(cfg, "H100-SXM", "bf16", batch=64, context=8192)
    assert not big.fits and "KV" in big.reason and big.kv == 64 * 8192 * 131_072
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        ldf.memory_fit(cfg, "H100-SXM", gpu_memory_utilization=1.5)


def test_memory_fit_pipeline_stages_and_replicated_kv():
    cfg = ldf.model_config("Llama-3.1-70B")   # 64 query heads, 8 KV heads
    f8 = ldf.memory_fit(cfg, "H100-SXM", "bf16", batch=4, context=4096, tp=8)
    f16 = ldf.memory_fit(cfg, "H100-SXM", "bf16", batch=4, context=4096, tp=16)
    # beyond 8 ranks every rank holds a replica of one KV head: the KV per GPU stops shrinking
    assert f16.kv == f8.kv == ldf.kv_bytes(cfg, 4096, 4) / 8
    pp = ldf.memory_fit(cfg, "H100-SXM", "bf16", pp=2)
    assert pp.weights < f8.weights * 8 / 2 * 1.01 and pp.weights > ldf.weight_bytes(cfg) / 2 * 0.99


# --- the one degree check -------------------------------------------------------------------------
def test_check_parallel():
    cfg = ldf.model_config("Llama-3.1-70B")
    with pytest.raises(ValueError, match="tp=3 does not divide n_heads=64"):
        ldf.check_parallel(cfg, tp=3)
    with pytest.raises(ValueError, match="tp=3"):
        ldf.tp_bytes_per_token_per_layer(cfg, 3)
    with pytest.raises(ValueError, match="tp=3"):
        ldf.parallel_step_time("Llama-3.1-70B", tp=3)
    with pytest.raises(ValueError, match="pp=81"):
        ldf.check_parallel(cfg, pp=81)
    with pytest.raises(ValueError, match="needs an MoE"):
        ldf.check_parallel(cfg, ep=2)
    with pytest.raises(ValueError, match="ep=3 does not divide n_routed_experts=8"):
        ldf.check_parallel("Mixtral-8x7B", ep=3)
    assert ldf.valid_tp_degrees(cfg, 64) == [1, 2, 4, 8, 16, 32, 64]
    # 12 heads over 4 KV heads: 6 ranks would split KV heads unevenly
    odd = ldf.model_config("tiny-llama").replace(n_heads=12, n_kv_heads=4, d_ff=192)
    assert ldf.valid_tp_degrees(odd, 12) == [1, 2, 4, 12]


@torch.inference_mode()
def test_tp_beyond_kv_heads_replicates_and_matches_the_model():
    # tiny-llama has 4 query heads over 2 KV heads; TP = 4 gives each rank one query head and a
    # replica of its KV head.  Every layer's attention and MLP partial outputs, summed over the
    # ranks (the all-reduce), equal the full layer's, and the layers chain to the full logits.
    cfg = ldf.model_config("tiny-llama")
    n = 4
    full = P.build_decoder(cfg, 0)
    shards = [P.shard_decoder_tp(P.build_decoder(cfg, 0), r, n) for r in range(n)]
    for r, s in enumerate(shards):
        at = s.model.layers[0].self_attn
        assert s.tp_cfg.n_kv_heads == 1 and (at.H, at.Hkv) == (1, 1)
        kv_head = r // 2    # query head r uses KV head r // (H / H_kv)
        torch.testing.assert_close(at.k_proj.weight, full.model.layers[0].self_attn.k_proj.weight[16 * kv_head:16 * (kv_head + 1)])
    ids = P.demo_inputs(cfg.vocab_size, 2, 7)
    h, ctx = full.prepare(ids, None)
    for i, layer in enumerate(full.model.layers):
        x = layer.input_layernorm(h)
        a = sum(s.model.layers[i].self_attn(x, ctx, None) for s in shards)   # all-reduce of partials
        torch.testing.assert_close(a, layer.self_attn(x, ctx, None))
        h = h + a
        y = layer.post_attention_layernorm(h)
        m = sum(s.model.layers[i].mlp(y) for s in shards)
        torch.testing.assert_close(m, layer.mlp(y))
        h = h + m
    torch.testing.assert_close(full.finish(h), full(ids))


# --- MoE and MLA on the roofline -------------------------------------------------------------------
def test_moe_critical_batch_scales_with_total_over_active():
    ridge_half = 989.4e12 / 3.35e12             # B* of a dense BF16 model ≈ 295
    for model in ("Mixtral-8x7B", "Qwen3-30B-A3B", "DeepSeek-V3"):
        cfg = ldf.model_config(model)
        ratio = ldf.param_count(cfg) / ldf.param_count(cfg, active=True)
        b = ldf.critical_batch(cfg, "H100-SXM")
        # more than the dense B*, and within a factor of two of ridge × total/active
        assert b > 2 * ridge_half and 0.5 < b / (ridge_half * ratio) < 2, (model, b, ratio)
    assert ldf.critical_batch("Llama-2-7B", "H100-SXM") < 1.05 * ridge_half


def test_mla_decode_flops_absorbed_by_default():
    cfg = ldf.model_config("DeepSeek-V3")
    L = cfg.n_layers
    # absorbed: scores over 512 + 64 latent dims, mix over 512: 2 · 128 · (576 + 512) per key per layer
    assert ldf.attention_flops_per_token(cfg, 1) == L * 278_528
    # un-absorbed (prefill kernels): 2 · 128 · (192 + 128)
    assert ldf.attention_flops_per_token(cfg, 1, mla="naive") == L * 81_920
    per_key = ldf.decode_step_flops(cfg, 1, 1000) - ldf.decode_step_flops(cfg, 1, 999)
    assert per_key == L * 278_528
    # MLA decode intensity against the latent it reads: ≈ 242 FLOP per KV byte (BF16, 576 elements)
    assert 278_528 / (576 * 2) == pytest.approx(241.8, abs=0.1)
    # prefill uses the un-absorbed form
    assert ldf.prefill_flops(cfg, 8) - ldf.prefill_flops(cfg, 8, mla="absorbed") < 0
    with pytest.raises(ValueError, match="mla='fused'"):
        ldf.attention_flops_per_token(cfg, 1, mla="fused")


def test_mla_decode_turns_compute_bound_at_long_context():
    # the latent KV read per sequence costs 576·2 B per key for 278,528 FLOPs: ≈ 242 FLOP/B,
    # below H100's BF16 ridge of 295: memory-bound at any batch on H100, compute-bound on H20-like
    # chips with a lower ridge.  Batching still amortises the weights: B* exists at long context.
    b = ldf.critical_batch("DeepSeek-V3", "H100-SXM", context_len=32768, max_batch=2**16)
    assert b == math.inf or b > 0


# --- `plan` ----------------------------------------------------------------------------------------
REAL_CONFIGS = {
    "Llama-3.1-8B": {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
                     "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
                     "vocab_size": 128256, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05,
                     "rope_theta": 500000.0, "tie_word_embeddings": False, "attention_bias": False,
                     "mlp_bias": False, "head_dim": 128,
                     "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                      "original_max_position_embeddings": 8192, "rope_type": "llama3"}},
    "Mixtral-8x7B": {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336,
                     "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
                     "vocab_size": 32000, "max_position_embeddings": 32768, "rms_norm_eps": 1e-05,
                     "rope_theta": 1000000.0, "tie_word_embeddings": False, "num_local_experts": 8,
                     "num_experts_per_tok": 2, "sliding_window": None},
    "Qwen3-30B-A3B": {"model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144,
                      "moe_intermediate_size": 768, "num_attention_heads": 32, "num_key_value_heads": 4,
                      "head_dim": 128, "num_hidden_layers": 48, "vocab_size": 151936, "num_experts": 128,
                      "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
                      "norm_topk_prob": True, "max_position_embeddings": 40960, "rms_norm_eps": 1e-06,
                      "rope_theta": 1000000.0, "tie_word_embeddings": False, "use_sliding_window": False,
                      "sliding_window": None, "max_window_layers": 48, "attention_bias": False},
    "DeepSeek-V3": {"model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
                    "moe_intermediate_size": 2048, "num_attention_heads": 128, "num_key_value_heads": 128,
                    "num_hidden_layers": 61, "vocab_size": 129280, "n_routed_experts": 256,
                    "n_shared_experts": 1, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
                    "moe_layer_freq": 1, "kv_lora_rank": 512, "q_lora_rank": 1536, "qk_nope_head_dim": 128,
                    "qk_rope_head_dim": 64, "v_head_dim": 128, "max_position_embeddings": 163840,
                    "rms_norm_eps": 1e-06, "rope_theta": 10000, "tie_word_embeddings": False},
    "Gemma-2-9B": {"model_type": "gemma2", "hidden_size": 3584, "intermediate_size": 14336,
                   "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 256, "num_hidden_layers": 42,
                   "vocab_size": 256000, "sliding_window": 4096, "query_pre_attn_scalar": 256,
                   "final_logit_softcapping": 30.0, "attn_logit_softcapping": 50.0, "rms_norm_eps": 1e-06,
                   "rope_theta": 10000.0, "max_position_embeddings": 8192, "tie_word_embeddings": True},
}
# published parameter counts (model cards): the configs above reproduce them exactly
PUBLISHED = {"Llama-3.1-8B": 8_030_261_248, "Mixtral-8x7B": 46_702_792_704, "Qwen3-30B-A3B": 30_532_122_624,
             "DeepSeek-V3": 671_026_419_200, "Gemma-2-9B": 9_241_705_984}


def _plan_cli(*args):
    return subprocess.run([sys.executable, "-m", "llm_dataflow", "plan", *args], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("name", list(REAL_CONFIGS))
def test_plan_on_real_configs(name, tmp_path):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(REAL_CONFIGS[name]))
    cfg = ldf.load_model_arg(str(folder))
    assert ldf.param_count(cfg) == PUBLISHED[name]
    r = ldf.plan_report(cfg, "H200", batch=8, context=4096, weights="fp8")
    assert r["weight_bytes"] == ldf.weight_bytes(cfg, "fp8")
    assert r["kv_bytes"] == ldf.kv_cache_bytes(cfg, 4096, 8, "bf16")
    assert r["decode_step_s"] == ldf.decode_step_lower_bound(cfg, "H200", 8, 4096, "fp8")
    assert r["fits"] == ldf.engine_memory(cfg, "H200", "fp8", batch=8, context=4096).fits


def test_plan_cli_json_and_errors(tmp_path):
    out = _plan_cli("Llama-3-8B", "--hardware", "H100-SXM", "--weights", "int4", "--json")
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    cfg = ldf.model_config("Llama-3-8B")
    assert r["weight_bytes"] == ldf.weight_bytes(cfg, quant=ldf.QuantSpec("int4", group_size=128))
    for key in ("weight_bytes", "kv_bytes", "fits", "decode_step_s", "binds", "critical_batch"):
        assert key in r
    assert r["kv_dtype"] == "bf16" and r["binds"] == "memory" and r["fits"] is True
    table = _plan_cli("Mixtral-8x7B", "--hardware", "H100-SXM", "--tp", "2", "--batch", "4", "--context", "2048",
                      "--plot", str(tmp_path / "p.svg"))
    assert table.returncode == 0 and "critical batch" in table.stdout and (tmp_path / "p.svg").stat().st_size > 0
    bad = _plan_cli("Llama-3-8B", "--hardware", "H100-SXM", "--tp", "3")
    assert bad.returncode == 2 and "--tp" in bad.stderr and "n_heads=32" in bad.stderr
    assert _plan_cli("Llama-3-8B", "--hardware", "H300").returncode == 2
    assert "--weights" in _plan_cli("Llama-3-8B", "--hardware", "H100-SXM", "--weights", "int3").stderr
    missing = tmp_path / "none" / "config.json"
    m = _plan_cli(str(missing), "--hardware", "H100-SXM")
    assert m.returncode == 2 and str(missing) in m.stderr
    broken = tmp_path / "config.json"
    broken.write_text(json.dumps({"model_type": "bert", "hidden_size": 64}))
    b = _plan_cli(str(broken), "--hardware", "H100-SXM")
    assert b.returncode == 2 and str(broken) in b.stderr and "model_type='bert'" in b.stderr
    broken.write_text("{not json")
    assert "not valid JSON" in _plan_cli(str(broken), "--hardware", "H100-SXM").stderr
