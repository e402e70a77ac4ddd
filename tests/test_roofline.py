"""Tests for chapter 05: roofline bounds (hand arithmetic), measured roofline, decode loop."""
import math

import pytest
import torch

import llm_dataflow as ldf

H100 = "H100-SXM"
LLAMA2 = ldf.model_config("Llama-2-7B")


# --- the seed's numbers -------------------------------------------------------------------------
def test_seed_7b_bf16_on_h100():
    # 7e9 params × 2 B (BF16) = 14 GB read per step; H100 SXM HBM3: 3.35 TB/s
    t = ldf.decode_step_lower_bound(7e9, H100)
    assert t == pytest.approx(14e9 / 3.35e12, rel=1e-12)
    assert t == pytest.approx(4.179e-3, abs=1e-6)          # ≈ 4.18 ms
    assert round(1 / t) == 239                              # ≈ 239 steps/s
    b = ldf.decode_step_bounds(7e9, H100)
    assert b.bound == "memory"
    assert b.nbytes == 14e9
    assert b.flops == 2 * 7e9                               # 2 FLOPs per weight per token
    assert b.compute_s == pytest.approx(14e9 / 989.4e12)


def test_seed_batch8_amortises_weights():
    # batch 8 reads the 14 GB once for 8 positions: 14 / 8 = 1.75 GB per token
    b = ldf.decode_step_bounds(7e9, H100, batch=8)
    assert b.bytes_per_token == pytest.approx(1.75e9)
    assert b.memory_s == pytest.approx(14e9 / 3.35e12)     # same step time as batch 1
    assert b.tokens_per_s == pytest.approx(8 * 3.35e12 / 14e9)


def test_llama2_7b_bf16_h100_weights_only():
    # Llama-2-7B: 6,738,415,616 params (config.json shapes) × 2 B = 13,476,831,232 B
    n = 6_738_415_616
    assert ldf.param_count(LLAMA2) == n
    assert ldf.weight_bytes_read(LLAMA2, "bf16", 1, embedding="table") == 2 * n
    assert 2 * n / 3.35e12 == pytest.approx(4.0229e-3, abs=1e-7)  # every stored weight: ≈ 4.02 ms
    # a decode step gathers one embedding row (4096 × 2 B), not the 32000-row table
    step = 2 * n - 31_999 * 4096 * 2
    t = ldf.decode_step_lower_bound(LLAMA2, H100, batch=1, context_len=0)
    # the bound adds the new token's K/V write: 32 layers × 2 × 32 heads × 128 × 2 B = 524,288 B
    assert t == pytest.approx((step + 524_288) / 3.35e12, rel=1e-12)
    assert t == pytest.approx(3.945e-3, abs=5e-6)           # ≈ 3.94 ms
    b = ldf.decode_step_bounds(LLAMA2, H100)
    assert b.nbytes == step + 524_288
    assert ldf.decode_step_bounds(LLAMA2, H100, embedding="table").nbytes == 2 * n + 524_288
    assert b.bound == "memory"
    # FLOPs: matmul weights exclude the 32000×4096 embedding gather; attention over 1 key:
    # 32 layers × 2 × 32 heads × (128 + 128) × 1
    matmul = n - 32000 * 4096 - (32 * 2 + 1) * 4096          # minus embedding and the norm weights
    assert ldf.matmul_params(LLAMA2) == matmul
    assert b.flops == 2 * matmul + 32 * 2 * 32 * 256 * 1


def test_llama2_kv_term_at_context():
    # KV per token: 32 × 2 × 32 × 128 × 2 B = 524,288 B; 4096 tokens → 2 GiB per sequence
    kv_tok = 32 * 2 * 32 * 128 * 2
    b = ldf.decode_step_bounds(LLAMA2, H100, batch=2, context_len=4096)
    assert b.nbytes == 2 * 6_738_415_616 - 31_998 * 4096 * 2 + 2 * 4096 * kv_tok + 2 * kv_tok
    assert b.flops == 2 * (2 * ldf.matmul_params(LLAMA2) + 32 * 2 * 32 * 256 * 4097)


def test_embedding_rows_counts_gathered_rows():
    full = ldf.weight_bytes_read(LLAMA2, "bf16", 1, embedding="table")
    rows = ldf.weight_bytes_read(LLAMA2, "bf16", 1)
    assert full - rows == (32000 - 1) * 4096 * 2


def test_critical_batch_weights_only():
    # B* = bytes per weight × F / (2 · BW) = 2 × 989.4e12 / (2 × 3.35e12) = 295.3 → 296
    assert ldf.critical_batch(7e9, H100) == 296
    assert ldf.decode_step_bounds(7e9, H100, batch=295).bound == "memory"
    assert ldf.decode_step_bounds(7e9, H100, batch=296).bound == "compute"
    # FP8 on H100: 1 B per weight, 1978.9e12 FLOP/s → 1978.9 / (2 × 3.35) = 295.4 → 296
    assert ldf.critical_batch(7e9, H100, dtype="fp8") == 296


def test_critical_batch_never_with_long_mha_context():
    # MHA at 4096 tokens: each sequence adds 2 GiB of KV reads but only ~15.6 GFLOP, so the
    # memory term grows faster than the compute term: decode never turns compute-bound.
    assert ldf.critical_batch(LLAMA2, H100, context_len=4096, max_batch=4096) == math.inf


def test_prefill_flops_hand_count_tiny():
    cfg = ldf.model_config("tiny-llama")   # L=2, D=64, H=4, H_kv=2, d_h=16, F=160, V=256
    per_layer = 64 * 64 + 2 * (32 * 64) + 64 * 64 + 3 * 64 * 160  # q, k, v, o, gate/up/down
    T = 10
    attn = 2 * (2 * 4 * (16 + 16) * (T * (T + 1) // 2))             # 2 layers, causal Σt
    head = 256 * 64
    assert ldf.prefill_flops(cfg, T) == 2 * 2 * per_layer * T + 2 * head + attn
    assert ldf.prefill_flops(cfg, T, all_logits=True) == 2 * 2 * per_layer * T + 2 * head * T + attn
    assert ldf.prefill_flops(cfg, T, batch=3) == 3 * ldf.prefill_flops(cfg, T)


def test_prefill_bound_is_compute_bound_for_long_prompts():
    b = ldf.prefill_bounds(LLAMA2, H100, 2048)
    assert b.bound == "compute"
    assert ldf.prefill_lower_bound(LLAMA2, H100, 2048) == b.compute_s
    # bytes: weights once + KV written for 2048 positions
    assert b.nbytes == 2 * 6_738_415_616 - (32000 - 2048) * 4096 * 2 + 2048 * 32 * 2 * 32 * 128 * 2
    assert ldf.prefill_bounds(LLAMA2, H100, 1).bound == "memory"


def test_sliding_window_attention_flops():
    cfg = ldf.model_config("tiny-llama").replace(sliding_window=4)
    # every layer sliding: query t attends min(t, 4) keys; T = 6 → 1+2+3+4+4+4 = 18
    assert ldf.accounting._causal_attention_flops(cfg, 6, "naive") == 2 * (2 * 4 * 32 * 18)
    assert ldf.attention_flops_per_token(cfg, 100) == 2 * (2 * 4 * 32 * 4)


def test_moe_weight_bytes_batch1_reads_k_experts():
    cfg = ldf.model_config("tiny-moe")  # E = 8, k = 2, one shared expert, moe_d_ff = 64
    one_expert = 3 * 64 * 64 * 2        # gate, up, down [64, 64] in BF16
    b1 = ldf.weight_bytes_read(cfg, "bf16", 1, embedding="table")
    all_weights = ldf.weight_bytes(cfg, "bf16")
    assert b1 == pytest.approx(all_weights - 2 * (8 - 2) * one_expert)   # 2 layers, 6 idle experts
    big = ldf.weight_bytes_read(cfg, "bf16", 4096, embedding="table")
    assert big == pytest.approx(all_weights)                            # every expert touched


@pytest.mark.parametrize("kw", [dict(batch=0), dict(batch=-1), dict(context_len=-1), dict(batch=1.5),
                                dict(dtype="bf17")])
def test_bad_input_raises(kw):
    with pytest.raises(ValueError):
        ldf.decode_step_lower_bound(LLAMA2, H100, **kw)


def test_bad_input_prefill_and_hw():
    with pytest.raises(ValueError, match="prompt_len"):
        ldf.prefill_lower_bound(LLAMA2, H100, 0)
    with pytest.raises(ValueError, match="batch"):
        ldf.prefill_lower_bound(LLAMA2, H100, 8, batch=0)
    with pytest.raises(ValueError, match="hardware"):
        ldf.decode_step_lower_bound(LLAMA2, "H300")
    with pytest.raises(ValueError, match="context_len"):
        ldf.decode_step_lower_bound(7e9, H100, context_len=10)   # bare count: no KV shape
    with pytest.raises(ValueError, match="dtype='fp8' has no peak"):
        ldf.decode_step_lower_bound(LLAMA2, "A100-80GB-SXM", compute_dtype="fp8")  # A100: no FP8 peak
    with pytest.raises(ValueError, match="embedding"):
        ldf.weight_bytes_read(LLAMA2, "bf16", 1, embedding="none")


def test_calculators():
    r = ldf.decode_calculator("Llama-2-7B", "H100-SXM", "bf16", 1, 0)
    assert r["binds"] == "memory"
    assert r["decode step ≥ (ms)"] == ldf.decode_step_lower_bound("Llama-2-7B", "H100-SXM") * 1e3
    # A100 has no FP8 peak: the calculator computes in BF16 and says so; the KV cache stays BF16
    assert ldf.decode_calculator("Llama-3-8B", "A100-80GB-SXM", "fp8", 8, 1024)["compute / KV dtype"] == "bf16 / bf16"
    assert ldf.decode_calculator("Llama-3-8B", "H100-SXM", "fp8", 8, 1024)["compute / KV dtype"] == "fp8 / bf16"
    b1 = ldf.batch_calculator("Llama-2-7B", "H100-SXM", 1)
    b8 = ldf.batch_calculator("Llama-2-7B", "H100-SXM", 8)
    # 8 tokens share one read of the weights (and gather 8 embedding rows instead of 1)
    assert b8["weights' share of a token (GB)"] == ldf.weight_bytes_read("Llama-2-7B", "bf16", 8) / 8 / 1e9
    assert b8["weights' share of a token (GB)"] == pytest.approx(b1["weights' share of a token (GB)"] / 8, rel=1e-5)


def test_calculator_memory_rows_are_one_fit():
    """The memory rows of chapter 05's calculators come from one ``memory_fit``: a short verdict
    (its full line, ``fit.reason``, is one click away in the chapter), the budget, the room."""
    cases = {("Llama-2-7B", "A100-80GB-SXM", 1, 0): "fits",
             ("Llama-3.1-70B", "H200", 1, 0): "does not fit: the weights and the engine's other terms exceed its budget",
             ("Llama-2-7B", "H200", 1, 32768): "refused: the context exceeds the model's 4,096 positions",
             ("Llama-3-8B", "A100-80GB-SXM", 512, 4096): "does not fit: the batch's KV cache exceeds the room"}
    for (m, hw, b, c), verdict in cases.items():
        f = ldf.memory_fit(m, hw, "bf16", batch=b, context=c)
        for r in (ldf.decode_calculator(m, hw, "bf16", b, c), ldf.batch_calculator(m, hw, b, c)):
            assert r["memory (one GPU)"] == verdict
            assert r["vLLM budget"] == f"0.9 × {f.capacity / 2**30:,.2f} GiB = {f.budget / 2**30:,.2f} GiB"
            assert (r["KV room (tokens)"], r["KV room left (tokens)"]) == (f.kv_tokens, f.kv_left_tokens)
        assert f.reason.split(":")[0] == verdict.split(":")[0]
    # a batch whose KV fits only without the CUDA graph pool (vLLM 0.21 sizes the room after it)
    f = ldf.memory_fit("Llama-3-8B", "H100-SXM", "bf16", batch=1, context=0)
    per_seq = 131_072 * 4096
    b = int((f.kv_bytes + f.cuda_graphs) // per_seq)
    tight = ldf.memory_fit("Llama-3-8B", "H100-SXM", "bf16", batch=b, context=4096)
    assert tight.fits_eager and not tight.fits
    assert ldf.decode_calculator("Llama-3-8B", "H100-SXM", "bf16", b, 4096)["memory (one GPU)"].startswith(
        "fits only with --enforce-eager")


def _chapter_calculators(notebook: str) -> list[str]:
    """The static views of a chapter's calculators, built from the notebook's own cells: every code
    cell that calls ``ldf.calculator`` runs with that call building ``calculator_html`` instead."""
    import json
    import pathlib

    from llm_dataflow import live

    views = []

    class Ldf:
        def __getattr__(self, name):
            return getattr(ldf, name)

        def calculator(self, fn, controls, **kw):
            views.append(live.calculator_html(fn, controls, **kw))

    nb = json.loads((pathlib.Path(__file__).parents[1] / "notebooks" / notebook).read_text(encoding="utf-8"))
    scope = {"ldf": Ldf()}
    for cell in nb["cells"]:
        src = "".join(cell["source"])
        if cell["cell_type"] == "code" and "ldf.calculator(" in src:
            exec(compile(src, notebook, "exec"), scope)
    return views


@pytest.mark.parametrize("notebook", ["05_prefill_decode_roofline.ipynb", "06_attention_kv_cache.ipynb"])
def test_chapter_calculators_static_views_fit_the_budget(notebook):
    """Each calculator of chapters 05 and 06, on the grid its cell gives, has a static view within
    ``live.MAX_STATIC_BYTES`` (chapter 05's decode calculator was 488,959 B when its memory row
    carried ``fit.reason``; the short rows bring it to about 196,000)."""
    from llm_dataflow import live
    views = _chapter_calculators(notebook)
    assert views, f"{notebook} shows no calculator"
    for v in views:
        assert len(v.encode()) <= live.MAX_STATIC_BYTES


def test_exercise_numbers():
    # chapter 05 exercise 1: 70e9 × 2 B = 140 GB over 4.8 TB/s = 29.17 ms, ≈ 34 steps/s
    t = ldf.decode_step_lower_bound(70e9, "H200")
    assert t == pytest.approx(140e9 / 4.8e12) and round(t * 1e3, 1) == 29.2 and round(1 / t) == 34
    # exercise 3: Llama-3-8B weights (BF16) / KV bytes per token (32 × 2 × 8 × 128 × 2 = 131,072 B)
    w = ldf.weight_bytes(ldf.model_config("Llama-3-8B"), "bf16")
    assert ldf.kv_bytes_per_token(ldf.model_config("Llama-3-8B"), "bf16") == 131_072
    assert round(w / 1e9) == 16 and 122_000 < w / 131_072 < 123_000 and w / 131_072 / 64 < 2000
    # exercise 4: prefill of 16 tokens is memory-bound at ≈ 16 FLOP/B; 1024 tokens compute-bound
    b16 = ldf.prefill_bounds(LLAMA2, H100, 16)
    assert b16.bound == "memory" and round(b16.intensity) == 16
    assert ldf.prefill_bounds(LLAMA2, H100, 1024).bound == "compute"


# --- measured roofline -------------------------------------------------------------------------
def test_measured_roofline_small():
    cpu = torch.device("cpu")
    bw = ldf.stream_bandwidth("copy", nbytes=4 * 2**20, dev=cpu, repeat=2)
    tri = ldf.stream_bandwidth("triad", nbytes=4 * 2**20, dev=cpu, repeat=2)
    f = ldf.matmul_flops("fp32", n=128, dev=cpu, repeat=2)
    assert bw > 1e8 and tri > 1e8 and f > 1e7
    roof = ldf.MeasuredRoofline("test", 10e9, {"fp32": 100e9})
    assert roof.ridge("fp32") == pytest.approx(10.0)
    with pytest.raises(ValueError, match="bf16"):
        roof.flops("bf16")
    # a measured roofline works wherever a HardwareSpec does
    assert ldf.decode_step_lower_bound(1e6, roof, dtype="fp32") == pytest.approx(4e6 / 10e9)
    with pytest.raises(ValueError, match="kind"):
        ldf.stream_bandwidth("scale")


def test_gemv_bandwidth_counts_every_copy():
    seen = []
    def fn(x, w):
        seen.append(w.shape)
        return ldf.linear(x, w)
    bw = ldf.gemv_bandwidth(fn, 33, 16, total_bytes=33 * 16 * 4 * 5, repeat=2)
    assert bw > 0 and len(seen) == 5 * 3 and set(seen) == {(33, 16)}   # 5 copies × (warm-up + 2 sweeps)
    with pytest.raises(ValueError, match="n_rows"):
        ldf.gemv_bandwidth(fn, 0, 16)


# --- the decode loop ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    cfg = ldf.model_config("tiny-llama")
    return cfg, ldf.Decoder(cfg)


def test_greedy_decode_matches_reference_generate(tiny):
    cfg, m = tiny
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, cfg.vocab_size, (3, 7), generator=g)   # irregular batch and length
    calls = []
    run = ldf.greedy_decode(m, ids, 9, before_step=lambda: calls.append(1))
    torch.testing.assert_close(run.tokens, m.generate(ids, 9, use_cache=False))
    assert run.n_steps == 8 == len(calls) and run.decode_s > 0 and run.prefill_s > 0
    with pytest.raises(ValueError, match="max_new_tokens"):
        ldf.greedy_decode(m, ids, 0)


def test_decode_bandwidth_fields(tiny):
    cfg, m = tiny
    r = ldf.decode_bandwidth(m, cfg, prompt_len=5, n_new=4, repeat=1, peak_bandwidth=1e10)
    assert r.model_bytes == ldf.weight_bytes(cfg, "fp32")
    # steps 1..3 read 5, 6, 7 cached positions (prompt_len + i − 1): the mean is 6
    assert r.bytes_per_step == ldf.decode_step_bytes(cfg, 1, 6, "fp32", embedding="rows")
    assert r.achieved_bandwidth == pytest.approx(r.bytes_per_step * r.steps_per_s)
    assert r.fraction == pytest.approx(r.achieved_bandwidth / 1e10)
    assert r.peak_bandwidth == r.high_peak_bandwidth == 1e10 and r.fraction_of_high == r.fraction
    assert len(r.run.step_times) == r.run.n_steps == 3
    assert r.run.decode_s == pytest.approx(sum(r.run.step_times))
    # paired: one STREAM copy + triad pass before each of the 2 × 2 timed steps
    r2 = ldf.decode_bandwidth(m, cfg, prompt_len=5, n_new=3, repeat=2)
    assert r2.peak_bandwidth > 0 and r2.high_peak_bandwidth > 0
    assert r2.fraction == pytest.approx(r2.achieved_bandwidth / r2.peak_bandwidth)
    assert r2.fraction_of_high == pytest.approx(r2.achieved_bandwidth / r2.high_peak_bandwidth)
    with pytest.raises(ValueError, match="peak_bandwidth"):
        ldf.decode_bandwidth(m, cfg, peak_bandwidth=0.0)
    with pytest.raises(ValueError, match="n_new"):
        ldf.decode_bandwidth(m, cfg, n_new=1)


def test_hf_peer_generates_the_same_tokens(tiny):
    pytest.importorskip("transformers")
    cfg, m = tiny
    g = torch.Generator().manual_seed(2)
    ids = torch.randint(0, cfg.vocab_size, (1, 6), generator=g)
    toks, per_token = ldf.hf_greedy_decode(m, cfg, ids, 5, repeat=1)
    torch.testing.assert_close(toks, ldf.greedy_decode(m, ids, 5).tokens)
    assert per_token > 0


def test_time_points(tiny):
    cfg, m = tiny
    assert ldf.time_prefill(m, cfg, 9, batch=2, repeat=1) > 0
    assert ldf.time_decode_step(m, cfg, batch=3, context_len=5, repeat=2) > 0
