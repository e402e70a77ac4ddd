"""Honest MoE planning (issue 27, item 6): the critical batch per kernel, the published
MoE-under-TP decode rows, and the range ``plan`` prints from the rows that cover a deployment."""
import json
import math

import pytest

import llm_dataflow as ldf
from llm_dataflow.core import coverage
from llm_dataflow.core.accounting import tensor_bytes
from llm_dataflow.core.plan import main, plan_report, published_range

#: (model, GPU) -> (blended, attention and dense part, routed experts): BF16, context 0.
PER_KERNEL = {
    ("DeepSeek-V3", "H100-SXM"): (5405, 296, 9451), ("DeepSeek-V3", "H200"): (3772, 207, 6597),
    ("Qwen3-30B-A3B", "H100-SXM"): (2949, 299, 4726), ("Qwen3-30B-A3B", "H200"): (2055, 208, 3299),
    ("Mixtral-8x7B", "H100-SXM"): (1081, 300, 1182), ("Mixtral-8x7B", "H200"): (754, 209, 825),
}


@pytest.mark.parametrize("model,hw", list(PER_KERNEL))
def test_critical_batch_per_kernel(model, hw):
    k = ldf.critical_batch_per_kernel(model, hw)
    assert (k.blended, k.dense_part, k.routed_experts) == PER_KERNEL[model, hw]
    assert k.blended == ldf.critical_batch(model, hw)
    cfg, spec = ldf.model_config(model), ldf.hardware(hw)
    # the experts' closed form: ridge batch b·F/(2·BW) times E/k; the search lands within one sequence
    ridge = 2 * spec.flops("bf16") / (2 * spec.hbm_bandwidth)
    assert k.ridge_batch == pytest.approx(ridge)
    assert k.experts_over_k == cfg.n_routed_experts / cfg.n_experts_per_token
    assert abs(k.routed_experts - k.closed_form) <= 1
    # the blended figure lies between its parts: it averages the kernels
    assert k.dense_part < k.blended < k.routed_experts


def test_deepseek_v3_issue_numbers():
    """Issue 27: the routed experts need about ridge × E / k ≈ 9,450 sequences on an H100 in BF16,
    where the blended figure says 5,405."""
    k = ldf.critical_batch_per_kernel("DeepSeek-V3", "H100-SXM")
    assert round(k.ridge_batch, 1) == 295.3 and k.experts_over_k == 32
    assert round(k.closed_form) == 9451 and k.blended == 5405


def test_per_kernel_parts_are_the_step():
    """At the routed experts' crossover the two parts' compute and memory terms add up to the
    whole step's (decode_step_bounds), so the split loses nothing."""
    cfg, hw = ldf.model_config("Mixtral-8x7B"), ldf.hardware("H100-SXM")
    b = 700
    step = ldf.decode_step_bounds(cfg, hw, b, 0)
    expert = [t for t in ldf.tensor_specs(cfg) if t.role == "expert" and t.expert == 0]
    e_bytes = sum(t.numel for t in expert) * 2 * ldf.expected_experts_hit(8, 2, b)
    e_flops = 2 * 2 * sum(t.numel for t in expert) * b
    rest_flops, rest_bytes = step.flops - e_flops, step.nbytes - e_bytes
    assert rest_flops > 0 and rest_bytes > 0
    # the dense part alone is compute-bound here (B > 300), the experts still memory-bound (B < 1,182)
    assert rest_flops / hw.flops("bf16") > rest_bytes / hw.hbm_bandwidth
    assert e_flops / hw.flops("bf16") < e_bytes / hw.hbm_bandwidth


def test_dense_model_has_one_kernel_group():
    k = ldf.critical_batch_per_kernel("Llama-3-8B", "H100-SXM")
    assert k.blended == k.dense_part == 297 and k.routed_experts is None and k.closed_form is None


def test_per_kernel_fp8_and_long_context():
    k = ldf.critical_batch_per_kernel("DeepSeek-V3", "H200", 0, "fp8")
    assert (k.blended, k.dense_part, k.routed_experts) == (3675, 207, 6598)
    # the KV read at 32K keeps the attention part memory-bound on an H100 (MLA's 242 FLOP/B < 295)
    long = ldf.critical_batch_per_kernel("DeepSeek-V3", "H100-SXM", 32768, max_batch=2**16)
    assert long.dense_part == math.inf and long.routed_experts == 9451
    with pytest.raises(ValueError, match="context_len"):
        ldf.critical_batch_per_kernel("DeepSeek-V3", "H100-SXM", -1)
    with pytest.raises(ValueError, match="cfg"):
        ldf.critical_batch_per_kernel(7e9, "H100-SXM")


# --- published rows and what covers a deployment ------------------------------------------------
ROWS = {r.id: r for r in ldf.published_measurements()}
SGLANG = ("sglang-pr2643-deepseek-v3-tp8-bs1", "sglang-issue15869-deepseek-v3-0324-tp8-bs1")


def test_sglang_rows_as_published():
    a, b = ROWS[SGLANG[0]], ROWS[SGLANG[1]]
    assert (a.value, a.unit, a.batch, a.n_gpus, a.gpu, a.weights) == (30.29, "tokens/s", 1, 8, "H200", "fp8")
    assert (b.value, b.unit, b.batch, b.n_gpus, b.gpu, b.weights) == (112.51, "tokens/s", 1, 8, "H200", "fp8")
    assert "sglang/pull/2643" in a.source and "30.29 token/s" in a.source
    assert "sglang/issues/15869" in b.source and "112.51" in b.source
    for r in (a, b):
        assert r.measured == pytest.approx(1 / r.value) and not r.beats_bound
    # appendix 09's section on MoE under TP states these efficiencies (bound on 8 GPUs summed)
    assert (round(100 * a.efficiency, 1), round(100 * b.efficiency, 1)) == (3.0, 11.0)


def test_covering_rule():
    ds, h200 = ldf.model_config("DeepSeek-V3"), ldf.hardware("H200")
    ids = lambda rows: [r["id"] for r in rows]  # noqa: E731
    assert ids(coverage.covering_rows(ds, h200, tp=8, batch=1, weights="fp8")) == list(SGLANG)
    # the same GPU class covers (Hopper), another weight element or batch or layout does not
    assert ids(coverage.covering_rows(ds, "H800-SXM", tp=8, batch=1, weights="fp8")) == list(SGLANG)
    assert coverage.covering_rows(ds, h200, tp=8, batch=1, weights="bf16") == []
    assert coverage.covering_rows(ds, h200, tp=8, batch=8, weights="fp8") == []
    assert coverage.covering_rows(ds, h200, tp=1, batch=1, weights="fp8") == []
    # a dense model under TP on Hopper in FP8: no row, even though MoE rows exist there
    assert coverage.covering_rows("Llama-3.1-70B", h200, tp=8, batch=1, weights="fp8") == []
    # Mixtral on A100s in BF16: gpt-fast's Mixtral rows at TP 2, 4 and 8 (the degree is not
    # matched); dense TP rows do not cover an MoE
    mixtral = ["gptfast-mixtral-bf16-tp2", "gptfast-mixtral-bf16-tp4", "gptfast-mixtral-bf16-tp8"]
    assert ids(coverage.covering_rows("Mixtral-8x7B", "A100-80GB-SXM", tp=8, batch=1, weights="bf16")) == mixtral
    # an MoE is covered only by rows of its own shapes: DeepSeek-V3's SGLang rows do not cover
    # Mixtral or Qwen3-30B-A3B on Hopper in FP8, and a DeepSeek-R1-shaped config is covered
    assert coverage.covering_rows("Mixtral-8x7B", "H100-SXM", tp=8, batch=1, weights="fp8") == []
    assert coverage.covering_rows("Qwen3-30B-A3B", "H100-SXM", tp=2, batch=1, weights="fp8") == []
    r1 = ldf.model_config("DeepSeek-V3").replace(name="DeepSeek-R1")
    assert ids(coverage.covering_rows(r1, h200, tp=8, batch=1, weights="fp8")) == list(SGLANG)
    # the rows are tensor parallel without expert parallelism: an EP deployment is covered by none
    assert coverage.covering_rows(ds, h200, tp=8, batch=1, weights="fp8", ep=8) == []
    with pytest.raises(ValueError, match="tp"):
        coverage.covering_rows(ds, h200, tp=0, batch=1, weights="fp8")
    with pytest.raises(ValueError, match="weights"):
        coverage.row_precision(3)


def test_plan_deepseek_v3_h200_tp8_fp8():
    r = plan_report("DeepSeek-V3", "H200", tp=8, weights="fp8")
    # MLA's down-projections and the routers whole on every GPU (parallel.tensor_shares), the rest 1/8
    assert round(r["decode_tokens_per_s"], 1) == 841.4
    # the critical batch of this layout (one GPU's share: the replicated down-projections add FLOPs),
    # against 3,675 / 207 / 6,598 for the whole model on one GPU; the routed experts' does not move
    assert (r["critical_batch"], r["critical_batch_dense_part"], r["critical_batch_routed_experts"]) == (3077, 208, 6598)
    one = plan_report("DeepSeek-V3", "H200", weights="fp8")
    assert (one["critical_batch"], one["critical_batch_dense_part"], one["critical_batch_routed_experts"]) == (3675, 207, 6598)
    assert r["published_rows"] == list(SGLANG)
    lo, hi = r["published_tokens_per_s"]
    elo, ehi = r["published_efficiency"]
    assert (round(lo, 1), round(hi, 1)) == (30.3, 112.6)
    assert (round(100 * elo, 1), round(100 * ehi, 1)) == (3.6, 13.4)
    # each row's efficiency is its tokens/s over plan's own bound for the row's setting
    own = plan_report("DeepSeek-V3", "H200", tp=8, context=51, prompt=0, weights="fp8", published=False)
    assert ehi == pytest.approx(112.51 / own["decode_tokens_per_s"])
    assert "published_note" not in own


def test_plan_says_when_no_row_covers():
    r = plan_report("Qwen3-30B-A3B", "H100-SXM", tp=2, weights="bf16")
    assert round(r["decode_tokens_per_s"], 1) == 1096.7      # appendix 09 prints it
    assert r["published_rows"] == [] and r["published_tokens_per_s"] is None
    assert r["published_note"].startswith("no published row covers an MoE with Qwen3-30B-A3B's shapes under TP on "
                                          "Hopper, bf16 weights, batch 1")
    with pytest.raises(ValueError, match="tokens_per_s"):
        published_range(ldf.model_config("Qwen3-30B-A3B"), "H100-SXM", tp=2, batch=1, weights="bf16",
                        tokens_per_s=0)


def test_plan_command_prints_the_range(capsys):
    assert main(["plan", "DeepSeek-V3", "--hardware", "H200", "--tp", "8", "--weights", "fp8"]) == 0
    out = capsys.readouterr().out
    assert "≤ 841.4 tokens/s" in out
    assert "published range       30.3–112.6 tokens/s: the bound × 3.6–13.4 % efficiency" in out
    assert "  routed experts      6,598 sequences" in out and "  attention, dense    208 sequences" in out
    assert main(["plan", "DeepSeek-V3", "--hardware", "H200", "--tp", "8", "--weights", "fp8", "--json"]) == 0
    j = json.loads(capsys.readouterr().out)
    assert j["published_rows"] == list(SGLANG) and j["critical_batch_routed_experts"] == 6598


def test_appendix_moe_under_tp_numbers():
    """The numbers appendix 09 (section 7, planning section, summary) states for MoE under TP."""
    r = plan_report("DeepSeek-V3", "H200", tp=8, weights="fp8")
    cfg, h200 = ldf.model_config("DeepSeek-V3"), ldf.hardware("H200")
    # the figure's bound: the eight GPUs summed, every weight split eight ways
    summed = ldf.decode_step_bounds(cfg, ldf.aggregate_hardware("H200", 8), 1, 0, "fp8")
    assert round(1 / summed.time_s) == 1019 and summed.bound == "memory"
    assert round(summed.nbytes / 8 / 1e9, 1) == 4.7                              # GB per GPU per step
    # what SGLang and vLLM keep whole on every GPU (MLA's q_a/kv_a projections, routers, norms)
    fp8 = ldf.precision_plan("fp8")
    whole = sum(tensor_bytes(t, fp8.weights, fp8.quant) for t in ldf.tensor_specs(cfg)
                if t.role in ("norm", "router") or "a_proj" in t.name or (t.role == "bias" and t.shape[0] == cfg.d_model))
    assert round(whole * 7 / 8 / 1e9, 1) == 1.0                                   # GB more per GPU
    per_gpu = ldf.weight_bytes_read(cfg, "fp8", 1, tp=8)
    # weight_bytes_read's docstring: 5.70 GB per GPU against 4.71 GB for an eighth of everything
    assert (round(per_gpu / 1e9, 2), round(ldf.weight_bytes_read(cfg, "fp8", 1) / 8 / 1e9, 2)) == (5.70, 4.71)
    assert per_gpu == pytest.approx(ldf.weight_bytes_read(cfg, "fp8", 1) / 8 + whole * 7 / 8, rel=1e-12)
    # plan counts them whole: 5.7 GB per GPU per step, <= 841 tokens/s, the reports at 3.6 and 13.4 %
    assert round(r["decode_step_s"] * h200.hbm_bandwidth / 1e9, 1) == 5.7 and r["binds"] == "memory"
    assert round(r["decode_tokens_per_s"]) == 841
    assert [round(100 * e, 1) for e in r["published_efficiency"]] == [3.6, 13.4]
    assert (cfg.n_layers, sum(map(cfg.is_moe_layer, range(cfg.n_layers)))) == (61, 58)
    assert (cfg.n_routed_experts, cfg.n_experts_per_token, cfg.n_shared_experts) == (256, 8, 1)
    e = [ROWS[i].efficiency for i in SGLANG]
    assert (round(100 * min(e)), round(100 * max(e))) == (3, 11)
    # the dense tensor-parallel band of section 9 (27–72 %) would have given 275–734 tokens/s
    tp = [ROWS[i].efficiency for i in ("gptfast-llama2-7b-tp8", "gptfast-llama2-70b-tp2", "gptfast-llama2-70b-tp8",
                                       "gptfast-llama31-70b-tp8")]
    lo, hi = round(100 * min(tp)), round(100 * max(tp))
    assert (lo, hi) == (27, 72)
    assert (round(lo / 100 / summed.time_s), round(hi / 100 / summed.time_s)) == (275, 734)
    assert ldf.COVERS.startswith("a published decode row with its batch covers")


def test_a_preset_names_no_checkpoint_format(capsys):
    # DeepSeek-V3's published checkpoint is FP8; its preset holds the shapes only, and plan says so
    # rather than calling it an unquantised checkpoint
    r = plan_report("DeepSeek-V3", "H200", ep=8)
    assert r["weights_source"] == "preset" and r["checkpoint_format"].startswith("none: a preset holds the shapes")
    assert plan_report("DeepSeek-V3", "H200", ep=8, weights="fp8")["weights_source"] == "override"
    # under EP the per-kernel rows say whose batch each figure is
    assert main(["plan", "DeepSeek-V3", "--hardware", "H200", "--ep", "8", "--weights", "fp8"]) == 0
    out = capsys.readouterr().out
    assert "  attention, dense    207 sequences per attention group" in out
    assert "  routed experts      825 sequences per attention group, 6,600 in all" in out
    assert "precision             weights fp8 (set by --weights; a preset names no format)" in out
    assert main(["plan", "DeepSeek-V3", "--hardware", "H200", "--ep", "8"]) == 0
    assert "precision             weights bf16 (a preset names no format; --weights sets one)" in capsys.readouterr().out


@pytest.mark.parametrize("model", ["Llama-2-7B", "Llama-3-8B", "Mixtral-8x7B", "DeepSeek-V3", "Qwen3-30B-A3B"])
def test_one_gpus_weight_reads_follow_the_memory_fits_split(model):
    """One GPU's weight reads (``weight_bytes_read`` with ``tp``/``ep``): at tp = ep = 1 the
    whole model's; under TP and EP the split of ``memory_fit`` (the same ``tensor_shares``): a read
    of everything (more tokens than the table has rows, every expert hit) is what one GPU holds."""
    cfg = ldf.model_config(model)
    every = 10**9      # every row gathered, every expert hit
    # one GPU of one: every stored byte, exactly (whole tensors keep integer counts)
    assert ldf.weight_bytes_read(cfg, "bf16", every, tp=1, ep=1) == ldf.weight_bytes(cfg, "bf16")
    tp = 2 if cfg.n_kv_heads % 2 == 0 else 1
    assert ldf.weight_bytes_read(cfg, "bf16", every, tp=tp) == pytest.approx(ldf.memory_fit(cfg, "H200", tp=tp).weights,
                                                                            rel=1e-9)
    if cfg.n_routed_experts:
        ep = 8 if cfg.n_routed_experts % 8 == 0 else 2
        assert ldf.weight_bytes_read(cfg, "bf16", every, ep=ep) == pytest.approx(ldf.memory_fit(cfg, "H200", ep=ep).weights,
                                                                                rel=1e-9)
    shares = ldf.tensor_shares(cfg, tp)
    assert len(shares) == len(ldf.tensor_specs(cfg)) and set(ldf.tensor_shares(cfg)) == {1.0}
    with pytest.raises(ValueError, match="tp"):
        ldf.weight_bytes_read(cfg, "bf16", 1, tp=0)
    with pytest.raises(ValueError, match="tp"):
        ldf.tensor_shares(cfg, tp=0)
    with pytest.raises(ValueError, match="tp=2"):
        ldf.weight_bytes_read(7_000_000_000, "bf16", 1, tp=2)


@pytest.mark.parametrize("model", ["Llama-2-7B", "Mixtral-8x7B", "DeepSeek-V3", "Qwen3-30B-A3B"])
def test_one_gpus_flops_and_bytes_follow_the_same_split(model):
    """One GPU's FLOPs (``matmul_params``, ``decode_step_flops``, ``prefill_flops`` with
    ``tp``/``ep``) multiply the weights it holds: replicated ones whole, the rest ``1/tp``,
    attention ``1/tp``; at tp = ep = 1 the whole model's, exactly."""
    cfg = ldf.model_config(model)
    whole = ldf.matmul_params(cfg)
    assert ldf.matmul_params(cfg, tp=1, ep=1) == whole and isinstance(whole, int)
    assert ldf.decode_step_flops(cfg, 4, 100, tp=1, ep=1) == ldf.decode_step_flops(cfg, 4, 100)
    assert ldf.prefill_flops(cfg, 300, 2, tp=1, ep=1) == ldf.prefill_flops(cfg, 300, 2)
    # the weights one GPU multiplies in full, summed by tensor name (independent of tensor_shares)
    tp = 8 if cfg.n_heads % 8 == 0 and cfg.n_kv_heads % 8 == 0 and model != "Qwen3-30B-A3B" else 2
    specs = ldf.tensor_specs(cfg)
    kept = sum(t.numel for t in specs if t.in_features is not None
               and (t.role == "router" or (cfg.is_mla and "a_proj" in t.name)))
    assert ldf.matmul_params(cfg, tp=tp) == pytest.approx((whole - kept) / tp + kept, rel=1e-12)
    attn = ldf.attention_flops_per_token(cfg, 101)
    assert ldf.decode_step_flops(cfg, 4, 100, tp=tp) == pytest.approx(
        4 * (2 * ((whole - kept) / tp + kept) + attn / tp), rel=1e-12)
    assert ldf.prefill_flops(cfg, 300, 2, tp=tp) == pytest.approx(
        (ldf.prefill_flops(cfg, 300, 2) - 2 * 300 * 2 * kept) / tp + 2 * 300 * 2 * kept, rel=1e-12)
    if cfg.n_routed_experts:
        # under EP a GPU's E/ep experts serve all dp = ep/tp groups: k/tp of an expert per token
        ep = 8 if cfg.n_routed_experts % 8 == 0 else 2
        assert ldf.matmul_params(cfg, ep=ep) == pytest.approx(whole, rel=1e-12)     # tp 1: attention whole
    # the bytes: at tp = ep = 1 the whole step's; under TP the shares plan's bound reads
    assert ldf.decode_step_bytes(cfg, 4, 100, "bf16", tp=1, ep=1) == ldf.decode_step_bytes(cfg, 4, 100, "bf16")
    assert ldf.prefill_bytes(cfg, 300, 2, "bf16", tp=1, ep=1) == ldf.prefill_bytes(cfg, 300, 2, "bf16")
    kv = ldf.kv_bytes(cfg, 100, 4) + 4 * ldf.kv_bytes_per_token(cfg)
    share = 1 if cfg.is_mla else max(cfg.n_kv_heads // tp, 1) / cfg.n_kv_heads
    assert ldf.decode_step_bytes(cfg, 4, 100, "bf16", tp=tp) == pytest.approx(
        ldf.weight_bytes_read(cfg, "bf16", 4, tp=tp) + kv * share, rel=1e-12)
    with pytest.raises(ValueError, match="tp"):
        ldf.matmul_params(cfg, tp=0)
    with pytest.raises(ValueError, match="tp=2"):
        ldf.prefill_flops(7_000_000_000, 10, tp=2)
    with pytest.raises(ValueError, match="tp=2"):
        ldf.decode_step_flops(7_000_000_000, 1, tp=2)


def test_plan_prefill_under_tp_is_one_gpus_share():
    """plan's prefill bound under TP: one GPU's FLOPs, MLA's down-projections and the routers whole
    (it was the whole prefill / tp: 23.82 ms for DeepSeek-V3 FP8 on 8 × H200, 4,096 tokens)."""
    r = plan_report("DeepSeek-V3", "H200", tp=8, weights="fp8", context=4096)
    one = ldf.prefill_bounds("DeepSeek-V3", "H200", 4096, 1, "fp8")
    assert round(one.time_s / 8 * 1e3, 2) == 23.82
    assert round(r["prefill_s"] * 1e3, 2) == 27.94 and r["prefill_binds"] == "compute"
    assert r["prefill_s"] == ldf.prefill_bounds("DeepSeek-V3", "H200", 4096, 1, "fp8", tp=8).time_s
    # a dense model whose KV heads split evenly: the whole / tp, to rounding
    d = plan_report("Llama-3.1-70B", "H100-SXM", tp=8, context=8192)
    assert d["prefill_s"] == pytest.approx(ldf.prefill_bounds("Llama-3.1-70B", "H100-SXM", 8192).time_s / 8, rel=1e-9)
    # decode at batch 256: compute 3.73 ms per step per GPU, not 3.47 (an eighth of the step's)
    big = ldf.decode_step_bounds("DeepSeek-V3", "H200", 256, 4096, "fp8", tp=8)
    assert (round(big.compute_s * 1e3, 2), round(ldf.decode_step_bounds("DeepSeek-V3", "H200", 256, 4096, "fp8")
                                                  .compute_s / 8 * 1e3, 2)) == (3.73, 3.47)


def test_ep_traffic_only_with_data_parallel_attention(capsys):
    """At dp = 1 (ep = tp) vLLM runs no all-to-all (``use_all2all_kernels = dp_size > 1 and
    use_ep``): TP's all-reduce combines the experts, so plan counts no EP traffic."""
    same = plan_report("DeepSeek-V3", "H200", tp=8, ep=8, weights="fp8", published=False)
    dp8 = plan_report("DeepSeek-V3", "H200", tp=1, ep=8, weights="fp8", published=False)
    assert (same["dp"], same["ep_bytes_per_token"]) == (1, 0) and same["tp_bytes_per_token"] > 0
    assert dp8["dp"] == 8 and round(dp8["ep_bytes_per_token"] / 1e6, 2) == 11.64
    assert main(["plan", "DeepSeek-V3", "--hardware", "H200", "--tp", "8", "--ep", "8", "--weights", "fp8"]) == 0
    assert "EP traffic per token  no all-to-all at dp = 1" in capsys.readouterr().out


def test_plot_draws_the_planned_layout(monkeypatch, tmp_path):
    """--plot draws one GPU's share of the step, as the table's decode row does."""
    pytest.importorskip("matplotlib")
    from llm_dataflow.core import plan as plan_mod
    seen = []
    real = plan_mod.decode_step_bounds

    def spy(*a, **kw):
        seen.append((a[2], kw.get("tp"), kw.get("ep")))
        return real(*a, **kw)
    monkeypatch.setattr(plan_mod, "decode_step_bounds", spy)
    assert main(["plan", "DeepSeek-V3", "--hardware", "H200", "--tp", "8", "--weights", "fp8",
                 "--plot", str(tmp_path / "p.png")]) == 0
    assert (tmp_path / "p.png").stat().st_size > 0
    assert seen and all(s[1:] == (8, 1) for s in seen) and {1, 2**14} <= {s[0] for s in seen}


def test_layout_rules_for_whole_experts_and_replicated_small_tensors():
    """Under EP the experts stay whole, so TP need not divide their width (vLLM's EP keeps
    moe_intermediate_size per expert); GPT-2's learned position table and Qwen3-Next-style 1 × D
    shared-expert gates are replicated on every rank (vLLM: ``nn.Embedding``, a 1-output gate)."""
    import dataclasses
    odd = dataclasses.replace(ldf.model_config("Qwen3-30B-A3B"), moe_d_ff=770)
    with pytest.raises(ValueError, match="moe_d_ff=770"):
        ldf.check_parallel(odd, tp=4)
    ldf.check_parallel(odd, tp=4, ep=4)
    assert ldf.memory_fit(odd, "H200", tp=4, ep=4).weights > 0
    gpt2 = ldf.model_config("GPT-2-small")
    shares = dict(zip((t.name for t in ldf.tensor_specs(gpt2)), ldf.tensor_shares(gpt2, tp=2)))
    assert shares["transformer.wpe.weight"] == 1.0 and shares["transformer.wte.weight"] == 0.5
