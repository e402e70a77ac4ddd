"""Chapter 06's table of today's attention families (issue 27, item 7) and the KV room that charges a
hybrid model's fixed state per sequence (item 4).

Each number the chapter prints is recounted here from the config fields, layer by layer; the KV
room of a model without linear-attention layers is pinned to what it was before the state was
charged (main at 639ac67).
"""
import json

import pytest

import llm_dataflow as ldf
from llm_dataflow.core.accounting import tensor_bytes
from llm_dataflow.core import plan as plan_mod
from llm_dataflow.core.fit import memory_fit
from llm_dataflow.core.serving import engine_memory

CONTEXTS = (1024, 8192, 131_072)


def gpt_oss():
    return ldf.ModelConfig.from_hf({"model_type": "gpt_oss"})      # transformers' GptOssConfig defaults


def qwen3_next():
    return ldf.ModelConfig.from_hf({"model_type": "qwen3_next"})   # transformers' Qwen3NextConfig defaults


def by_hand(cfg):
    """(KV B/token over every attention layer, bytes held per sequence at CONTEXTS, state B/sequence),
    from the config fields and the layer pattern counted here."""
    kinds = [cfg.layer_type(i) for i in range(cfg.n_layers)]
    if cfg.is_mla:
        per_layer = (cfg.kv_lora_rank + cfg.qk_rope_head_dim) * 2
    else:
        per_layer = 2 * cfg.n_kv_heads * cfg.head_dim * 2
    n_full, n_slide, n_lin = (kinds.count(k) for k in ("full_attention", "sliding_attention", "linear_attention"))
    assert n_full + n_slide + n_lin == cfg.n_layers
    state = 0
    if n_lin:
        nk, nv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
        dk, dv, k = cfg.linear_key_head_dim, cfg.linear_value_head_dim, cfg.linear_conv_kernel_dim
        state = n_lin * (nv * dv * dk + (k - 1) * (2 * nk * dk + nv * dv)) * 2
    held = tuple((n_full * n + n_slide * min(n, cfg.sliding_window or n)) * per_layer + state for n in CONTEXTS)
    return (n_full + n_slide) * per_layer, held, state


# what chapter 06's table prints (BF16, one sequence)
TABLE = {
    "Llama-3.1-70B": (327_680, (335_544_320, 2_684_354_560, 42_949_672_960), 0),
    "DeepSeek-V3": (70_272, (71_958_528, 575_668_224, 9_210_691_584), 0),
    "gpt_oss": (73_728, (42_467_328, 306_708_480, 4_836_556_800), 0),
    "qwen3_next": (24_576, (64_684_032, 240_844_800, 3_260_743_680), 39_518_208),
}
MODELS = {"Llama-3.1-70B": lambda: ldf.model_config("Llama-3.1-70B"),
          "DeepSeek-V3": lambda: ldf.model_config("DeepSeek-V3"), "gpt_oss": gpt_oss, "qwen3_next": qwen3_next}


@pytest.mark.parametrize("name", TABLE)
def test_chapter06_family_table(name):
    cfg = MODELS[name]()
    got = (ldf.kv_bytes_per_token(cfg), tuple(ldf.kv_cache_bytes(cfg, n) for n in CONTEXTS),
           ldf.state_bytes_per_sequence(cfg))
    assert got == by_hand(cfg) == TABLE[name]


def test_layer_patterns_as_the_chapter_describes_them():
    g, q = gpt_oss(), qwen3_next()
    assert [g.layer_type(i) for i in range(4)] == ["sliding_attention", "full_attention"] * 2
    assert (g.n_layers, g.sliding_window) == (36, 128)
    assert [q.layer_type(i) for i in range(4)] == ["linear_attention"] * 3 + ["full_attention"]
    assert q.n_layers == 48
    # past its windows, gpt-oss grows by its 18 full layers only; Qwen3-Next by its 12
    assert ldf.kv_cache_bytes(g, 10_001) - ldf.kv_cache_bytes(g, 10_000) == 18 * 2 * 8 * 64 * 2
    assert ldf.kv_cache_bytes(q, 10_001) - ldf.kv_cache_bytes(q, 10_000) == 12 * 2 * 2 * 256 * 2


def test_state_equals_the_kv_of_1608_tokens_and_is_rewritten_every_step():
    """The chapter's prose: Qwen3-Next's state is the KV of 1,608 tokens of its full layers, and a decode
    step reads and writes it whole whatever the context."""
    q = qwen3_next()
    state, per_tok = ldf.state_bytes_per_sequence(q), ldf.kv_bytes_per_token(q)
    assert state == 1608 * per_tok
    w = ldf.weight_bytes_read(q, "bf16", 1)
    for n in (1, 1024, 131_072):   # KV read + the new token's KV + the state read and written
        assert ldf.decode_step_bytes(q, 1, n) - w - (n + 1) * per_tok == 2 * state


# --- the KV room charges the state ------------------------------------------------------------------
Q_STATE = 36 * (32 * 128 * 128 + 3 * (2 * 16 * 128 + 32 * 128)) * 2   # 39,518,208 B, all TP ranks
Q_TOK = 12 * 2 * 2 * 256 * 2                                           # 24,576 B, both KV heads


def test_hybrid_concurrency_falls_by_exactly_the_state_share():
    """The room in vLLM's blocks of its 12 full-attention layers; each sequence takes its blocks and its
    state (issue 42: the room moved with the memory outside torch and the CUDA graph pool)."""
    q = qwen3_next()
    e = engine_memory(q, "H200", tp=2, batch=8, context=4096)
    state, per_tok = Q_STATE / 2, Q_TOK / 2         # tp 2: one of the 2 KV heads, half the state per GPU
    assert (e.state_per_sequence, e.kv_per_token) == (state, per_tok) == (19_759_104, 12_288)
    assert e.kv_tokens == 4_191_920                 # the room itself does not change with the state
    assert e.max_concurrency == pytest.approx(e.kv_tokens * per_tok / (4096 * per_tok + state), rel=1e-14)
    before = e.kv_tokens / 4096                     # without the state
    assert e.max_concurrency == pytest.approx(before * 4096 * per_tok / (4096 * per_tok + state), rel=1e-14)
    assert int(e.max_concurrency) == 734
    # batch × context tokens would fit at 735 sequences; with their state they do not
    fits = {b: engine_memory(q, "H200", tp=2, batch=b, context=4096).fits for b in (734, 735)}
    assert fits == {734: True, 735: False} and 735 * 4096 <= e.kv_tokens
    assert "the state of 8 sequences" in e.reason and e.reason.startswith("fits")
    assert engine_memory(q, "H200", tp=2).max_concurrency is None   # context 0: nothing asked


def test_state_splits_tp_ways_even_where_kv_heads_replicate():
    """vLLM divides the Gated DeltaNet state by the TP size; Qwen3-Next's 2 KV heads replicate at tp 4."""
    q = qwen3_next()
    f = memory_fit(q, "H200", batch=8, context=4096, tp=4)
    assert f.state_per_sequence == Q_STATE / 4 and f.kv_per_token == Q_TOK / 2
    assert f.kv == 8 * (4096 * Q_TOK / 2 + Q_STATE / 4) == 481_689_600
    f1 = memory_fit(q, "H200", batch=3, context=100)
    assert f1.kv == ldf.kv_cache_bytes(q, 100, batch=3) == 3 * (100 * Q_TOK + Q_STATE)
    assert memory_fit(q, "H200", batch=3, context=0).kv == 0
    # pp 2: the first stage (layers 0-23) holds 18 of the 36 linear layers
    f2 = memory_fit(q, "H200", batch=1, context=10, tp=2, pp=2)
    assert f2.state_per_sequence == Q_STATE / 2 / 2


# a model without a state: the room in tokens and the concurrency are blocks over blocks per sequence
# (issue 42 moved them from main at 639ac67's 439,472 / 978,528 / 6,816 / 383,792 tokens: the memory
# outside torch of vLLM V1's logs and the CUDA graph pool)
UNCHANGED = [("Llama-3-8B", 1, 443_392, 108.25), ("Llama-3-8B", 2, 986_064, 240.73828125),
             ("Llama-3.1-70B", 2, 9_824, 2.3984375), ("Mixtral-8x7B", 2, 391_328, 95.5390625)]


@pytest.mark.parametrize("model, tp, tokens, conc", UNCHANGED)
def test_models_without_state_are_unchanged(model, tp, tokens, conc):
    e = engine_memory(model, "H100-SXM", tp=tp, batch=8, context=4096)
    assert (e.kv_tokens, e.max_concurrency, e.state_per_sequence) == (tokens, conc, 0)
    assert e.fits == (e.demand_tokens <= e.kv_tokens) and "state" not in e.reason


def test_memory_fit_without_state_is_unchanged():
    for model, kv, per_tok in (("Llama-3-8B", 2_147_483_648.0, 65_536.0), ("Gemma-2-9B", 5_637_144_576.0, 172_032.0)):
        f = memory_fit(model, "H100-SXM", batch=8, context=4096, tp=2)
        assert (f.kv, f.kv_per_token, f.state_per_sequence) == (kv, per_tok, 0)


def test_plan_prints_the_state_per_sequence(tmp_path, capsys):
    from transformers import AutoConfig    # the whole config.json: plan refuses one that omits a size
    path = tmp_path / "config.json"
    path.write_text(json.dumps(AutoConfig.for_model("qwen3_next").to_dict()))
    args = ["plan", str(path), "--hardware", "H100-SXM", "--batch", "8", "--context", "4096", "--tp", "4"]
    assert plan_mod.main(args) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("state per sequence"))
    assert "39,518,208 B" in row and "per GPU 9.88 MB" in row
    assert plan_mod.main(args + ["--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert (r["state_bytes_per_sequence"], r["state_bytes_per_sequence_per_gpu"]) == (Q_STATE, Q_STATE / 4)
    assert r["max_concurrency"] == pytest.approx(r["kv_room_tokens"] * (Q_TOK / 2) / (4096 * Q_TOK / 2 + Q_STATE / 4),
                                                 rel=1e-14)
    assert plan_mod.main(["plan", "Llama-3-8B", "--hardware", "H100-SXM", "--batch", "8", "--context", "4096"]) == 0
    assert "state per sequence" not in capsys.readouterr().out
    r = plan_mod.plan_report("Llama-3-8B", "H100-SXM", batch=8, context=4096)
    assert (r["state_bytes_per_sequence"], r["state_bytes_per_sequence_per_gpu"]) == (0, 0)


def test_chapter06_exercise7_state_is_per_sequence_not_per_token():
    q = qwen3_next()
    short, long_ = ldf.kv_cache_bytes(q, 1024, batch=64), ldf.kv_cache_bytes(q, 16384, batch=4)
    assert short == 64 * (1024 * Q_TOK + Q_STATE) == 4_139_778_048
    assert long_ == 4 * (16384 * Q_TOK + Q_STATE) == 1_768_685_568
    assert 64 * 1024 * Q_TOK == 4 * 16384 * Q_TOK == 1_610_612_736
    llama = ldf.model_config("Llama-3.1-70B")
    assert ldf.kv_cache_bytes(llama, 1024, batch=64) == ldf.kv_cache_bytes(llama, 16384, batch=4)


def test_chapter06_decode_step_lines():
    """The chapter's lines: bytes moved per Qwen3-Next sequence and decode step, weights aside."""
    q = qwen3_next()
    w = ldf.weight_bytes_read(q, "bf16", 1)
    moved = [ldf.decode_step_bytes(q, 1, n) - w for n in CONTEXTS]
    assert moved == [(n + 1) * Q_TOK + 2 * Q_STATE for n in CONTEXTS] == [104_226_816, 280_387_584, 3_300_286_464]
    assert [ldf.param_count(gpt_oss()), ldf.param_count(q)] == [116_829_156_672, 79_674_391_296]


def test_plan_decode_bound_reads_the_state_split_tp_ways():
    """At tp 4 Qwen3-Next's 2 KV heads replicate (each rank reads half the KV), its state does not
    (each rank reads and rewrites a quarter)."""
    from llm_dataflow.core.roofline import decode_step_bounds
    q, b, n = qwen3_next(), 8, 4096
    hw = ldf.hardware("H100-SXM")
    r = plan_mod.plan_report(q, "H100-SXM", tp=4, batch=b, context=n, published=False)
    d = decode_step_bounds(q, hw, b, n, "bf16")
    kv_read_and_write = b * (n * Q_TOK + Q_STATE) + b * Q_TOK    # the state's rewrite is counted with the weights
    # the weights by each tensor's share (2 KV heads on 4 ranks: k/v projections halved, norms,
    # the router and the 1 x D shared-expert gate whole, the rest a quarter), the state's rewrite a quarter
    w_gpu = ldf.weight_bytes_read(q, "bf16", b, tp=4) + b * Q_STATE / 4
    kv_proj = sum(tensor_bytes(t, "bf16", None) for t in ldf.tensor_specs(q) if t.name.endswith(("k_proj.weight", "v_proj.weight")))
    whole = sum(tensor_bytes(t, "bf16", None) for t in ldf.tensor_specs(q)
                if t.role in ("norm", "router") or "shared_expert_gate" in t.name)
    assert kv_proj > 0 and whole > 0
    assert w_gpu - b * Q_STATE / 4 == pytest.approx(ldf.weight_bytes_read(q, "bf16", b) / 4 + kv_proj / 4 + whole * 3 / 4,
                                                    rel=1e-12)
    kv_gpu = b * (n + 1) * Q_TOK / 2 + b * Q_STATE / 4
    assert d.nbytes - kv_read_and_write - ldf.weight_bytes_read(q, "bf16", b) == b * Q_STATE
    one = decode_step_bounds(q, hw, b, n, "bf16", tp=4)
    assert one.nbytes == pytest.approx(w_gpu + kv_gpu, rel=1e-12) and one.compute_s > d.compute_s / 4
    assert r["decode_step_s"] == pytest.approx(max((w_gpu + kv_gpu) / hw.hbm_bandwidth, one.compute_s), rel=1e-12)
