"""Every number chapter 05's prose and diagrams state, computed by the package (issue 48: "every
number you write in prose is computed by the package and pinned by a test").

Sections: the opening, 1 (ridge), 2 (decode at batch 1 by hand), 3 (intensity ≈ B, the reconciled
thresholds box, attention ≈ H/H_kv, the KV read and its threshold S*, the MoE and MLA boxes), 4
(prefill, chunk budgets, the effective ridge), 5 (calculators and vLLM's budget), 6 (the CPU
measurement's fixed settings, and the folded decode-loop box).  The exercises are in
``tests/test_exercise_answers.py::test_ch05_solutions``.
"""
import inspect
import math

import pytest

import llm_dataflow as ldf
from llm_dataflow.core.roofline import critical_batch_per_kernel
from llm_dataflow.diagrams import prefill_decode

H100 = "H100-SXM"
CHIPS = ("A100-80GB-SXM", "H100-SXM", "H200", "B200")


def _first_prefill_compute(model, hw, dtype="bf16", hi=65536):
    """The fewest prompt tokens T at which one prompt's prefill is compute-bound (bisection:
    the prefill intensity grows with T)."""
    lo = 1
    while lo < hi:
        mid = (lo + hi) // 2
        if ldf.prefill_bounds(model, hw, mid, 1, dtype).bound == "compute":
            hi = mid
        else:
            lo = mid + 1
    return lo


def test_opening_and_section_1_ridge():
    # "989 TFLOP/s ÷ 3.35 TB/s ≈ 295 FLOP/B ... about 300 FLOPs per byte on an H100"
    h = ldf.hardware(H100)
    assert (h.flops("bf16"), h.hbm_bandwidth) == (989.4e12, 3.35e12)
    assert round(ldf.ridge_point(h, "bf16"), 1) == 295.3 and round(ldf.ridge_point(h, "bf16"), -2) == 300
    # "about 4 ms for a model of 7 billion parameters in BF16"
    assert round(ldf.decode_step_lower_bound(7e9, H100) * 1e3) == 4


def test_section_2_decode_by_hand():
    # 7e9 × 2 B = 14 GB; 14 GB ÷ 3.35 TB/s ≈ 4.2 ms; 14 GFLOP ÷ 989 TFLOP/s ≈ 14 µs
    b = ldf.decode_step_bounds(7e9, H100)
    assert ldf.weight_bytes_read(7e9, "bf16") == 14e9 and b.flops == 14e9
    assert round(b.memory_s * 1e3, 1) == 4.2 and round(b.memory_s * 1e3, 2) == 4.18
    assert round(b.compute_s * 1e6) == 14
    # "the byte term is 300 times the FLOP term"; "at most about 239 tokens per second";
    # "the tensor cores idle more than 99 % of the time"
    assert round(b.memory_s / b.compute_s, -2) == 300 and int(1 / b.time_s) == 239
    assert b.compute_s / b.time_s < 0.01
    # Llama-2-7B: 13.2 GB per step, ≈ 3.9 ms (3.94 printed), intensity 1.00, memory-bound
    l2 = ldf.decode_step_bounds("Llama-2-7B", H100)
    assert round(l2.nbytes / 1e9, 1) == 13.2 and round(l2.time_s * 1e3, 1) == 3.9
    assert round(l2.time_s * 1e3, 2) == 3.94 and round(l2.intensity, 2) == 1.0 and l2.bound == "memory"


def test_section_3_intensity_is_batch():
    # B* = b/2 · π/β ≈ 295 for BF16 on an H100; batch 8: 1.75 GB per token instead of 14 GB
    assert ldf.critical_batch(7e9, H100) == math.ceil(2 / 2 * ldf.ridge_point(H100, "bf16")) == 296
    b8 = ldf.decode_step_bounds(7e9, H100, batch=8)
    assert round(b8.bytes_per_token / 1e9, 2) == 1.75 and b8.bound == "memory"
    # "about 150 sequences on an A100, 200 on an H200 and 300 on an H100 or B200"
    got = {hw: ldf.critical_batch(7e9, hw) for hw in CHIPS}
    assert got == {"A100-80GB-SXM": 154, "H100-SXM": 296, "H200": 207, "B200": 282}
    assert [round(got[hw], -2) for hw in ("H100-SXM", "B200")] == [300, 300]
    assert round(got["A100-80GB-SXM"], -1) == 150 and round(got["H200"], -2) == 200


def test_section_3_thresholds_reconciled():
    """The deeper box 'one threshold, counted six ways': each figure with the model that gives it."""
    assert round(ldf.ridge_point(H100, "bf16"), 1) == 295.3
    assert ldf.critical_batch(7e9, H100) == 296
    assert ldf.critical_batch("Llama-3.1-70B", H100) == 296
    assert ldf.critical_batch("Llama-3-8B", H100) == 297
    assert ldf.critical_batch("Llama-2-7B", H100) == 299
    # Llama-2-7B's MHA writes 4 times more K and V per new token
    kv2, kv3 = (ldf.kv_bytes_per_token(ldf.model_config(m)) for m in ("Llama-2-7B", "Llama-3-8B"))
    assert (kv2, kv3) == (524_288, 131_072) and kv2 == 4 * kv3
    assert _first_prefill_compute("Llama-3-8B", H100) == 317
    assert ldf.matmul_ridge_tokens("Llama-3-8B", H100) == 333
    assert ldf.matmul_ridge_tokens("Llama-2-7B", H100) == 334
    # each count lands above 295
    for v in (296, 297, 299, 317, 333, 334):
        assert v > ldf.ridge_point(H100, "bf16")


def test_section_3_attention_intensity_and_kv_read():
    # I_attn = H / H_kv in BF16: Llama-2-7B 32/32 = 1, Llama-3-8B 32/8 = 4
    for name, heads, want in (("Llama-2-7B", (32, 32), 1), ("Llama-3-8B", (32, 8), 4)):
        cfg = ldf.model_config(name)
        per_key = ldf.attention_flops_per_token(cfg, 1) / cfg.n_layers
        kv = ldf.kv_bytes_per_token(cfg) / cfg.n_layers
        assert (cfg.n_heads, cfg.n_kv_heads) == heads
        assert per_key == 4 * cfg.n_heads * cfg.head_dim and kv == 2 * cfg.n_kv_heads * cfg.head_dim * 2
        assert per_key / kv == want == cfg.n_heads / cfg.n_kv_heads
    # the figure's caption: 33.6 MB of KV per sequence at context 256
    assert round(256 * 131_072 / 1e6, 1) == 33.6
    # critical batch against context: 297, 440 at 128 tokens, 854, 117,856 at 391, never from 392
    cb = [ldf.critical_batch("Llama-3-8B", H100, c) for c in (0, 128, 256, 391, 392, 1024, 4096)]
    assert cb == [297, 440, 854, 117_856, math.inf, math.inf, math.inf]
    never = next(c for c in range(0, 4096) if ldf.critical_batch("Llama-3-8B", H100, c) == math.inf)
    assert never == 392 and round(never, -2) == 400


def test_section_3_kv_bound_threshold_by_hand():
    """S* = (F0 − r (k + e)) / (r k − 4 H L d_h): the context from which no batch makes the step
    compute-bound, derived in the prose and checked by the cell against critical_batch."""
    cfg = ldf.model_config("Llama-3-8B")
    r = ldf.ridge_point(H100, "bf16")
    F0 = ldf.decode_step_flops(cfg, 1, 0)
    a = ldf.attention_flops_per_token(cfg, 1)
    k = ldf.kv_bytes_per_token(cfg)
    e = cfg.d_model * 2
    assert round(F0 / 1e9, 2) == 15.01 and a == 4 * 32 * 32 * 128 == 524_288
    assert (k, e, k + e) == (131_072, 8_192, 139_264) and round(r, 1) == 295.3
    # the per-sequence bytes the formula names are the package's: KV of S + 1 tokens and one row
    assert ldf.decode_step_bytes(cfg, 1, 100) - ldf.weight_bytes_read(cfg, "bf16", 1) == 101 * k
    assert ldf.weight_bytes_read(cfg, "bf16", 2) - ldf.weight_bytes_read(cfg, "bf16", 1) == e
    s_star = (F0 - r * (k + e)) / (r * k - a)
    assert round(s_star) == 392 and 391 < s_star < 392
    # the figure and the prose: the batch total levels off at β ÷ a sequence's KV at 4,096 tokens
    assert round(4096 * 131_072 / 1e6) == 537 and round(3.35e12 / (4096 * 131_072), -1) == 6240
    big = ldf.decode_step_bounds(cfg, H100, 4096, 4096)
    assert big.bound == "memory" and round(big.tokens_per_s, -2) == 6200
    # the star of the bottom panel at context 0 and 256: the critical batches 297 and 854
    for ctx, cb in ((0, 297), (256, 854)):
        assert ldf.decode_step_bounds(cfg, H100, cb, ctx).bound == "compute"
        assert ldf.decode_step_bounds(cfg, H100, cb - 1, ctx).bound == "memory"


def test_section_3_moe_box():
    # 102 of 256 experts at batch 16, 252 at batch 128 (uniform routing, k = 8)
    assert [round(ldf.expected_experts_hit(256, 8, b)) for b in (16, 128)] == [102, 252]
    # blended 5,405, routed experts 9,451, attention and dense part 296; 565 at 4,096 tokens (MLA)
    k = critical_batch_per_kernel("DeepSeek-V3", H100)
    assert (k.blended, k.routed_experts, k.dense_part) == (5405, 9451, 296)
    assert round(k.closed_form) == 9451 and abs(k.routed_experts - k.closed_form) <= 1
    assert critical_batch_per_kernel("DeepSeek-V3", H100, 4096).dense_part == 565
    # GQA: the dense part never turns compute-bound from a few hundred tokens of context on
    assert critical_batch_per_kernel("Mixtral-8x7B", H100, 1024).dense_part == math.inf
    # the exact search lands within one sequence of the closed form for every MoE preset
    for m in ("Mixtral-8x7B", "Qwen3-30B-A3B", "DeepSeek-V3"):
        for hw in (H100, "H200"):
            kk = critical_batch_per_kernel(m, hw)
            assert abs(kk.routed_experts - kk.closed_form) <= 1


def test_section_3_mla_box():
    ds = ldf.model_config("DeepSeek-V3")
    assert (ds.kv_lora_rank, ds.qk_rope_head_dim) == (512, 64)
    per_key = ldf.attention_flops_per_token(ds, 1) // ds.n_layers
    naive = ldf.attention_flops_per_token(ds, 1, mla="naive") // ds.n_layers
    kv = ldf.kv_bytes_per_token(ds) // ds.n_layers
    assert per_key == 2 * 128 * (576 + 512) == 278_528 and kv == 576 * 2 == 1152
    assert naive == 2 * 128 * (192 + 128) == 81_920
    assert round(per_key / kv, 1) == 241.8 and round(per_key / kv) == 242
    assert round(2 * per_key / kv) == 484 > ldf.ridge_point(H100, "bf16")
    assert round(ldf.ridge_point("H200", "bf16")) == 206 < per_key / kv < ldf.ridge_point(H100, "bf16")
    assert ldf.critical_batch(ds, H100, 32768) == math.inf
    # H200: longer contexts lower the critical batch (3,772 > 3,308 > 1,779)
    h200 = [ldf.critical_batch(ds, "H200", c) for c in (0, 4096, 32768)]
    assert h200 == [3772, 3308, 1779]
    # FlashMLA: FP8 cache 656 B against 1,152 (deepseek-ai/FlashMLA README @9241ae3); ~865 TFLOP/s at
    # ~1,600 MHz against 3.35 TB/s (docs/20250422-new-kernel-deep-dive.md); 673 GB of FP8 weights
    assert round(1152 / 656, 2) == 1.76 and round(865e12 / 3.35e12) == 258
    assert round(ldf.weight_bytes(ds, "fp8") / 1e9) == 673


def test_section_4_prefill_and_chunks():
    # crossings: 317 on an H100, 165 on an A100; each a little above its ridge; 2,048 tokens compute-bound
    cross = {hw: _first_prefill_compute("Llama-3-8B", hw, hi=4096) for hw in CHIPS}
    assert cross == {"A100-80GB-SXM": 165, "H100-SXM": 317, "H200": 222, "B200": 302}
    for hw in CHIPS:
        assert ldf.ridge_point(hw, "bf16") < cross[hw] < 1.1 * ldf.ridge_point(hw, "bf16")
        assert ldf.prefill_bounds("Llama-3-8B", hw, 2048).bound == "compute"
    # chunk budgets (vLLM's defaults, 2,048 to 16,384 tokens per step: vllm/engine/arg_utils.py,
    # EngineArgs.get_batch_defaults: 2,048 or 8,192 for the API server, 8,192 or 16,384 for the
    # LLM class): dense models compute-bound at every budget; Qwen3-30B-A3B memory-bound at
    # 2,048; DeepSeek-V3 memory-bound at 2,048 and 4,096; both in BF16 and in FP8 (issue 45)
    binds = {(m, dt): [ldf.prefill_bounds(m, H100, T, 1, dt).bound for T in (2048, 4096, 8192, 16384)]
             for m in ("Llama-3-8B", "Llama-3.1-70B", "Qwen3-30B-A3B", "DeepSeek-V3") for dt in ("bf16", "fp8")}
    c, m_ = "compute", "memory"
    for dt in ("bf16", "fp8"):
        assert binds[("Llama-3-8B", dt)] == binds[("Llama-3.1-70B", dt)] == [c, c, c, c]
        assert binds[("Qwen3-30B-A3B", dt)] == [m_, c, c, c]
        assert binds[("DeepSeek-V3", dt)] == [m_, m_, c, c]
    # the routed-expert GEMMs of DeepSeek-V3 in BF16: about 9,451 tokens (B*·E/k)
    assert critical_batch_per_kernel("DeepSeek-V3", H100).routed_experts == 9451


def test_section_5_calculators():
    """vLLM 0.21's budget as the chapter states it: 0.9 × 79.22 GiB = 71.30 GiB on an H100, less
    the weights, an 8,192-token profiling forward, the memory outside PyTorch and the CUDA graphs,
    the rest in 16-token blocks; Llama-3.1-70B's 131.4 GiB exceed it on an A100, H100 and H200."""
    from llm_dataflow.core import engines
    GiB = 2**30
    f = ldf.memory_fit("Llama-3-8B", H100)
    assert (f.engine.name, f.engine.version, f.fraction) == ("vllm", (0, 21), 0.9)
    assert round(f.capacity / GiB, 2) == 79.22 and round(f.budget / GiB, 2) == 71.30
    assert f.max_num_batched_tokens == engines.VLLM_MAX_NUM_BATCHED_TOKENS == 8192
    assert f.block_size == engines.VLLM_BLOCK_SIZE == 16 and f.graphs_in_budget
    assert f.kv_bytes == f.budget - f.weights - f.activations - f.non_torch - f.cuda_graphs
    w = ldf.weight_bytes(ldf.model_config("Llama-3.1-70B"), "bf16")
    assert round(w / GiB, 1) == 131.4
    budgets = {hw: ldf.memory_fit("Llama-3.1-70B", hw).budget / GiB for hw in ("A100-80GB-SXM", H100, "H200")}
    assert all(round(budgets[hw]) == 71 for hw in ("A100-80GB-SXM", H100))
    assert round(ldf.memory_fit("Llama-3.1-70B", "H200").capacity / GiB, 1) == 139.8
    assert round(budgets["H200"], 1) == 125.8 and w / GiB > budgets["H200"]
    assert not any(ldf.memory_fit("Llama-3.1-70B", hw).fits for hw in ("A100-80GB-SXM", H100, "H200"))
    # the calculator's rows are that fit's (tests/test_roofline.py checks every row)
    r = ldf.decode_calculator("Llama-2-7B", "A100-80GB-SXM", "bf16", 1, 0)
    assert r["memory (one GPU)"] == "fits" and r["KV room (tokens)"] == ldf.memory_fit("Llama-2-7B", "A100-80GB-SXM").kv_tokens
    # int4: 4 bits and one FP16 scale per 128 weights
    q = ldf.precision_plan("int4").quant
    assert q.group_size == 128


def test_section_4_effective_ridge():
    # "70 % of the bandwidth but 40 % of the FLOP/s": 0.4 × 989 ÷ (0.7 × 3.35) ≈ 169 FLOP/byte
    h = ldf.hardware(H100)
    assert round(0.4 * h.flops("bf16") / (0.7 * h.hbm_bandwidth)) == 169


def test_section_6_fixed_settings():
    # bench-llama: 4 layers, D = 1024, 16:4 GQA, about 62 M parameters, about 250 MB in FP32
    cfg = ldf.model_config("bench-llama")
    assert (cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.n_kv_heads) == (4, 1024, 16, 4)
    assert round(ldf.param_count(cfg) / 1e6) == 62 and round(ldf.weight_bytes(cfg, "fp32") / 1e6, -1) == 250
    # STREAM arrays as large as the last-level cache, at least 64 MiB (the CPU default); GEMV
    # copies of at least 256 MiB, twice the cache; the decode loop's paired STREAM the same
    from llm_dataflow import measure
    assert "64 MiB" in inspect.getdoc(measure.stream_bandwidth)
    assert inspect.signature(measure.gemv_bandwidths).parameters["total_bytes"].default == 256 * ldf.MiB
    for fn in (ldf.measure_roofline, ldf.gemv_bandwidths, ldf.decode_bandwidth):
        assert "stream_bytes" in inspect.signature(fn).parameters
    llc = ldf.last_level_cache_bytes()
    big = ldf.past_last_level_bytes(1, minimum=64 * ldf.MiB)
    assert big >= max(llc, 64 * ldf.MiB) and big % 64 == 0
    assert ldf.past_last_level_bytes(2, minimum=256 * ldf.MiB) >= max(2 * llc, 256 * ldf.MiB)
    # ldf.linear: seven rounds, a 5 % margin; write-allocate: copy 3/2, triad 4/3
    from llm_dataflow import linear_kernels
    assert linear_kernels.LINEAR_TUNE_ROUNDS == 7 and linear_kernels.LINEAR_MARGIN == 0.05
    assert (round(3 / 2, 2), round(4 / 3, 2)) == (1.5, 1.33)


def test_diagram_numbers():
    pts = prefill_decode.roofline_points()
    assert round(pts["ridge"]) == 295 and (pts["context"], pts["prompt"]) == (4096, 2048)
    assert [round(pts[k]) for k in ("decode_b1", "decode_b64", "decode_b64_ctx", "prefill")] == [1, 64, 22, 1941]
    assert pts["decode_b1"] < pts["decode_b64_ctx"] < pts["decode_b64"] < pts["ridge"] < pts["prefill"]
    n = prefill_decode.shape_numbers()
    assert (n["D"], n["F"], round(n["w_bytes"] / 1e6, 1), n["attn_intensity"]) == (4096, 14336, 117.4, 4)
    assert (n["H"], n["H_kv"], n["H"] // n["H_kv"]) == (32, 8, 4)   # q [4 × d_h] per KV group


@pytest.mark.parametrize("lang", ["en", "zh_CN"])
def test_diagrams_draw(lang):
    for draw in prefill_decode.DIAGRAMS.values():
        assert draw(lang).startswith("<svg")
