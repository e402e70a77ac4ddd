"""Today's families (issue 27, item 2): Gemma 3, Llama 4, gpt-oss, Mistral 3 (nested text_config) and
the hybrid Qwen3-Next — parameters equal transformers' at full size, KV and state bytes follow each
layer pattern (by hand), ``plan`` runs on each config.json, and the Decoder refuses what it cannot run.

Field-by-field reading on tiny configs: tests/test_hf_inputs.py (every supported model_type).
transformers (5.24) is a test-only dependency: it builds the config classes and meta-device models.
"""
import json

import pytest

import llm_dataflow as ldf
from llm_dataflow.core import plan as plan_mod
from llm_dataflow.core.accounting import prefill_flops

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText  # noqa: E402

FAMILIES = ("gemma3_text", "llama4_text", "gpt_oss", "qwen3_next", "glm4_moe", "qwen2_moe", "granite")
# the Decoder refuses these: by model_type, or by what it does not implement (glm4_moe's biased sigmoid
# router, qwen2_moe's gated shared expert, granite's multipliers; at Llama's scales granite runs:
# tests/test_hf_inputs.py)
NOT_RUN = ("gemma3_text", "llama4_text", "qwen3_next", "glm4_moe", "qwen2_moe", "granite")
NESTED = ("gemma3", "llama4", "mistral3")


def stored(m) -> int:
    persistent = set(m.state_dict())
    return sum(p.numel() for p in m.parameters()) + sum(b.numel() for n, b in m.named_buffers() if n in persistent)


# --- full-size parameter counts: transformers' classes at their defaults, on the meta device ---------
FULL = {"gemma3_text": 2_628_658_432, "llama4_text": 107_769_861_120, "gpt_oss": 116_829_156_672,
        "qwen3_next": 79_674_391_296, "glm4_moe": 103_481_206_400, "qwen2_moe": 14_315_784_192,
        "granite": 6_738_415_616}


@pytest.mark.parametrize("mt", FAMILIES)
def test_full_size_counts_equal_transformers(mt):
    cfg = ldf.ModelConfig.from_hf({"model_type": mt})
    with torch.device("meta"):
        m = AutoModelForCausalLM.from_config(AutoConfig.for_model(mt))
    assert stored(m) == ldf.param_count(cfg) == FULL[mt]


VISION = {"gemma3": (2_628_658_432, 94_654_464), "llama4": (107_769_861_120, 455_178_240),
          "mistral3": (22_901_314_560, 438_958_080)}


@pytest.mark.parametrize("mt", NESTED)
def test_nested_language_model_and_vision_tower_equal_transformers(mt):
    cfg = ldf.ModelConfig.from_hf({"model_type": mt})
    with torch.device("meta"):
        m = AutoModelForImageTextToText.from_config(AutoConfig.for_model(mt))
    assert (ldf.param_count(cfg), cfg.vision_params) == VISION[mt]
    assert stored(m) == ldf.param_count(cfg) + cfg.vision_params
    assert f"{cfg.vision_params:,} parameters" in cfg.notes


def test_active_counts_by_hand():
    """Active parameters: the k routed experts a token uses, plus everything else."""
    g = ldf.ModelConfig.from_hf({"model_type": "gpt_oss"})   # 36 layers, 128 experts, k 4, F = D = 2880
    expert = 3 * 2880 * 2880 + 2 * 2880 + 2880               # gate, up, down + their biases
    assert ldf.param_count(g) - ldf.param_count(g, active=True) == 36 * (128 - 4) * expert
    l4 = ldf.ModelConfig.from_hf({"model_type": "llama4_text"})  # 48 MoE layers, 16 experts, k 1, F 8192
    assert ldf.param_count(l4) - ldf.param_count(l4, active=True) == 48 * 15 * 3 * 5120 * 8192


# --- KV and state bytes follow the layer pattern ------------------------------------------------------
def test_gemma3_five_local_one_global():
    cfg = ldf.ModelConfig.from_hf({"model_type": "gemma3_text"})   # 26 layers, window 4096, 4 KV heads × 256
    full = [i for i in range(26) if cfg.layer_type(i) == "full_attention"]
    assert full == [5, 11, 17, 23] and cfg.rope_local_theta == 10000.0 and cfg.rope_theta == 1e6
    per_tok = 2 * 4 * 256 * 2
    assert ldf.kv_cache_bytes(cfg, 32768) == (4 * 32768 + 22 * 4096) * per_tok == 905_969_664
    assert ldf.kv_cache_bytes(cfg, 1000) == 26 * 1000 * per_tok   # below the window every layer holds all


def test_gpt_oss_alternating_128_token_windows():
    cfg = ldf.ModelConfig.from_hf({"model_type": "gpt_oss"})       # 36 layers, 8 KV heads × 64
    assert cfg.layer_types[:4] == ("sliding_attention", "full_attention") * 2 and cfg.sliding_window == 128
    per_tok = 2 * 8 * 64 * 2
    assert ldf.kv_cache_bytes(cfg, 100_000) == (18 * 100_000 + 18 * 128) * per_tok == 3_691_118_592
    assert cfg.attention_sinks and cfg.router_linear_bias and cfg.mlp_bias and cfg.attention_out_bias


def test_llama4_chunked_layers_and_nope_globals():
    cfg = ldf.ModelConfig.from_hf({"model_type": "llama4_text"})   # 48 layers, chunks of 8192, 8 KV heads × 128
    assert cfg.nope_layers == tuple(range(3, 48, 4))               # every 4th layer: global, no RoPE
    assert all(cfg.layer_type(i) == ("full_attention" if i in cfg.nope_layers else "chunked_attention")
               for i in range(48))
    per_tok = 2 * 8 * 128 * 2
    # 20,000 tokens: a chunked layer holds the 20,000 − 2 × 8192 = 3,616 tokens of the current chunk
    assert [ldf.kv_tokens_held(cfg, 0, n) for n in (0, 1, 8192, 8193, 20_000)] == [0, 1, 8192, 1, 3616]
    assert ldf.kv_cache_bytes(cfg, 20_000) == (12 * 20_000 + 36 * 3616) * per_tok
    assert cfg.n_shared_experts == 1 and cfg.dense_layers == () and cfg.d_ff == 16384 and cfg.moe_d_ff == 8192


def test_qwen3_next_state_is_fixed_per_sequence():
    cfg = ldf.ModelConfig.from_hf({"model_type": "qwen3_next"})
    lin = [i for i in range(48) if cfg.layer_type(i) == "linear_attention"]
    assert len(lin) == 36 and cfg.layer_type(3) == "full_attention"
    state = 36 * (32 * 128 * 128 + 3 * (2 * 16 * 128 + 32 * 128)) * 2   # recurrent state + conv window, BF16
    assert ldf.state_bytes_per_sequence(cfg) == state == 39_518_208
    per_tok = 12 * 2 * 2 * 256 * 2                                      # only the 12 full layers grow
    assert ldf.kv_bytes_per_token(cfg) == per_tok == 24_576
    for n in (1, 4096, 262_144):
        assert ldf.kv_cache_bytes(cfg, n, batch=3) == 3 * (n * per_tok + state)
    assert ldf.kv_cache_bytes(cfg, 0) == 0
    assert ldf.kv_layer_bytes_per_token(cfg, 0) == 0 and ldf.kv_tokens_held(cfg, 0, 500) == 0
    # the state is in the model's dtype, not a quantised KV dtype; fp32 KV → fp32 state
    assert ldf.kv_cache_bytes(cfg, 10, dtype="fp8") - 10 * ldf.kv_bytes_per_token(cfg, "fp8") == state
    assert ldf.kv_cache_bytes(cfg, 10, dtype="fp32") == 10 * 2 * per_tok + 2 * state
    assert ldf.kv_bytes(cfg, 4096) == 4096 * per_tok + state             # the accounting's view agrees


@pytest.mark.parametrize("mt", FAMILIES)
def test_closed_forms_equal_the_loops(mt):
    """kv_read_over_steps and the prefill's causal attention FLOPs, in closed form, equal step-by-step sums."""
    d = {"model_type": mt}
    if mt == "llama4_text":
        d["attention_chunk_size"] = 16
    if mt in ("gemma3_text", "gpt_oss"):
        d["sliding_window"] = 16
    cfg = ldf.ModelConfig.from_hf(d)
    for P, n in ((0, 40), (5, 1), (15, 18), (33, 50)):
        loop = sum(ldf.kv_bytes(cfg, P + i) for i in range(n))
        assert ldf.kv_read_over_steps(cfg, P, n) == loop, (P, n)
    T, head = 45, cfg.vocab_size * cfg.d_model
    causal = prefill_flops(cfg, T) - 2 * (ldf.matmul_params(cfg) - head) * T - 2 * head
    assert causal == sum(ldf.attention_flops_per_token(cfg, t, mla="naive") for t in range(1, T + 1)) > 0


def test_linear_attention_flops_do_not_grow_with_context():
    cfg = ldf.ModelConfig.from_hf({"model_type": "qwen3_next"})
    per = 6 * 32 * 128 * 128                                 # S·k, the rank-1 update, S·q per value head
    full = lambda s: 12 * 2 * 16 * (2 * 256) * s             # noqa: E731  12 full layers, H 16, d_h 256
    for s in (1, 1000, 100_000):
        assert ldf.attention_flops_per_token(cfg, s) == 36 * per + full(s)


def test_decode_step_rewrites_the_state():
    cfg = ldf.ModelConfig.from_hf({"model_type": "qwen3_next"})
    state = ldf.state_bytes_per_sequence(cfg)
    w = ldf.weight_bytes_read(cfg, "bf16", 2)
    assert ldf.decode_step_bytes(cfg, 2, 100) == w + 2 * (100 * 24_576 + state) + 2 * (24_576 + state)


# --- config.json reading: what is refused, what is kept ----------------------------------------------
@pytest.mark.parametrize("d, match", [
    ({"model_type": "llama4_text", "layer_types": ["sliding_attention"] * 48}, "layer_types contains 'sliding"),
    ({"model_type": "llama4_text", "no_rope_layers": [1, 2] * 24}, "no_rope_layers="),
    ({"model_type": "llama4_text", "attention_chunk_size": None, "layer_types": ["chunked_attention"] * 48},
     "attention_chunk_size is None"),
    ({"model_type": "qwen3_next", "layer_types": ["sliding_attention"] * 48}, "layer_types contains"),
    ({"model_type": "qwen3_next", "full_attention_interval": 0}, "full_attention_interval=0"),
    ({"model_type": "gemma3_text", "sliding_window_pattern": "6"}, "sliding_window_pattern='6'"),
    ({"model_type": "gemma3_text", "use_bidirectional_attention": True}, "use_bidirectional_attention=True is refused"),
    ({"model_type": "gemma3_text", "rope_parameters": {"rope_theta": 1e4}}, "per layer type"),
    ({"model_type": "gemma3", "text_config": {"model_type": "llama"}}, "text_config.model_type='llama'"),
    ({"model_type": "mistral3", "text_config": {"model_type": "gemma3_text"}}, "allowed: mistral"),
    ({"model_type": "llama4", "vision_config": {"model_type": "pixtral"}}, "vision_config.model_type='pixtral'"),
    ({"model_type": "mistral3", "vision_config": {"hidden_size": -4}}, "vision_config.hidden_size=-4"),
    ({"model_type": "gpt_oss", "num_experts": 8, "num_local_experts": 4}, "num_experts=8 and num_local_experts=4"),
])
def test_refused_by_name(d, match):
    with pytest.raises(ValueError, match=match):
        ldf.ModelConfig.from_hf(d)


def test_forward_only_settings_are_kept_as_unmodelled():
    g = ldf.ModelConfig.from_hf({"model_type": "gpt_oss"})
    assert g.unmodelled is None and (g.swiglu_limit, g.swiglu_alpha) == (7.0, 1.702)
    assert ldf.ModelConfig.from_hf({"model_type": "llama4_text"}).unmodelled == {"use_qk_norm": True,
                                                                                "attn_temperature_tuning": True}
    assert ldf.ModelConfig.from_hf({"model_type": "qwen3_next"}).unmodelled == {"partial_rotary_factor": 0.25}
    g = ldf.ModelConfig.from_hf({"model_type": "gemma3_text", "rope_scaling": {"rope_type": "linear", "factor": 8.0}})
    assert g.rope_scaling == {"rope_type": "linear", "factor": 8.0} and g.rope_local_theta == 10000.0


def test_quantization_config_is_left_to_the_format_reader():
    """This reader sizes the architecture; quantization_config is read elsewhere (issue 27 item 1)."""
    d = {"model_type": "gpt_oss", "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": [
        "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens", "lm_head"]}}
    assert ldf.param_count(ldf.ModelConfig.from_hf(d)) == FULL["gpt_oss"]


@pytest.mark.parametrize("mt", NOT_RUN)
def test_decoder_refuses_what_it_cannot_run(mt):
    cfg = ldf.ModelConfig.from_hf({"model_type": mt})
    with pytest.raises(ValueError, match=f"is not supported by Decoder.*{mt}|model_type='{mt}' is not supported"
                                         "|unmodelled"):
        ldf.model.check_supported(cfg)


# --- plan runs on each config.json -------------------------------------------------------------------
@pytest.mark.parametrize("mt", FAMILIES + NESTED)
def test_plan_runs_on_each_family(mt, tmp_path, capsys):
    folder = tmp_path / f"{mt}-model"
    folder.mkdir()
    # transformers' whole config.json of the type (plan refuses a config that omits a size it plans)
    full = {k: v for k, v in AutoConfig.for_model(mt).to_dict().items() if k != "quantization_config"}
    (folder / "config.json").write_text(json.dumps({**full, "quantization_config": {"quant_method": "fp8"}}))
    assert plan_mod.main(["plan", str(folder / "config.json"), "--hardware", "H100-SXM", "--context", "8192"]) == 0
    out = capsys.readouterr().out
    cfg = ldf.ModelConfig.from_hf(folder)
    assert f"{ldf.param_count(cfg):,} total" in out
    assert ("vision tower" in out) == (mt in NESTED)
    assert plan_mod.main(["plan", str(folder), "--hardware", "H100-SXM", "--context", "8192", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["kv_bytes"] == ldf.kv_bytes(cfg, 8192) and r["vision_params"] == cfg.vision_params


# --- gpt-oss runs in the book's Decoder: logits equal transformers' ------------------------------------
def _gpt_oss_to_hf(sd: dict, cfg) -> dict:
    """Our per-expert tensors (the checkpoint's unfused view) → transformers' GptOssExperts: ``gate_up_proj
    [E, D, 2F]`` with gate and up *interleaved* (columns 0::2 and 1::2), ``down_proj [E, F, D]``, biases alike."""
    out = {k: v for k, v in sd.items() if ".mlp.experts." not in k}
    for i in range(cfg.n_layers):
        p = f"model.layers.{i}.mlp.experts"
        E = range(cfg.n_routed_experts)
        w = lambda e, n, t="weight": sd[f"{p}.{e}.{n}_proj.{t}"]  # noqa: E731
        out[f"{p}.gate_up_proj"] = torch.stack([torch.stack([w(e, "gate").T, w(e, "up").T], -1).flatten(-2) for e in E])
        out[f"{p}.gate_up_proj_bias"] = torch.stack([torch.stack([w(e, "gate", "bias"), w(e, "up", "bias")], -1)
                                                     .flatten() for e in E])
        out[f"{p}.down_proj"] = torch.stack([w(e, "down").T for e in E])
        out[f"{p}.down_proj_bias"] = torch.stack([w(e, "down", "bias") for e in E])
    return out


def test_gpt_oss_decoder_matches_transformers():
    """Sinks, the 4-token window on every other layer, biases everywhere, the biased router and the clamped
    SwiGLU (limit 0.05, so the clamp bites): prefill logits, cached decode and greedy tokens equal transformers'
    (eager attention: sinks need the logits).  RoPE is plain here: the Decoder refuses gpt-oss's YaRN."""
    from transformers import GptOssConfig, GptOssForCausalLM
    hc = GptOssConfig(vocab_size=128, hidden_size=64, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=4,
                      max_position_embeddings=256, swiglu_limit=0.05, rope_parameters={"rope_type": "default",
                                                                                      "rope_theta": 10000.0})
    cfg = ldf.ModelConfig.from_hf(hc.to_dict())
    assert cfg.attention_sinks and cfg.layer_type(0) == "sliding_attention" and cfg.rope_scaling is None
    torch.manual_seed(0)
    ours = ldf.Decoder(cfg).eval()
    with torch.no_grad():   # random biases, sinks and norms: every term must agree, not just the zero ones
        for n, p in ours.named_parameters():
            if n.endswith((".bias", "sinks", "norm.weight")):
                p.copy_(torch.randn_like(p) * 0.5 + (1.0 if n.endswith("norm.weight") else 0.0))
    sd = ours.state_dict()
    assert sorted(sd) == sorted(t.name for t in ldf.tensor_specs(cfg))
    assert sum(v.numel() for v in sd.values()) == ldf.param_count(cfg)
    hf = GptOssForCausalLM._from_config(hc, attn_implementation="eager").eval()
    hf.load_state_dict(_gpt_oss_to_hf(sd, cfg), strict=True)
    ids = torch.randint(0, 128, (2, 11), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        a, b = ours(ids), hf(ids).logits
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
        cache = ours.new_cache(2, 16)
        steps = [ours(ids[:, :7], cache)] + [ours(ids[:, t:t + 1], cache) for t in range(7, 11)]
        torch.testing.assert_close(torch.cat(steps, 1), a, rtol=1e-4, atol=1e-5)
        g_hf = hf.generate(ids, max_new_tokens=5, do_sample=False, attention_mask=torch.ones_like(ids))
    assert torch.equal(ours.generate(ids, 5), g_hf)
    # the sinks matter: without them the logits move
    no_sink = ldf.Decoder(cfg.replace(attention_sinks=False)).eval()
    no_sink.load_state_dict({k: v for k, v in sd.items() if not k.endswith("sinks")})
    with torch.inference_mode():
        assert (no_sink(ids) - a).abs().max() > 1e-3


def test_chapter06_report_shows_the_state_of_a_hybrid():
    q = ldf.ModelConfig.from_hf({"model_type": "qwen3_next"})
    r = ldf.kv_cache_report(q, 8192, 2)
    assert r["state bytes per sequence (linear attention)"] == 39_518_208
    assert r["KV cache bytes"] == 2 * (8192 * 24_576 + 39_518_208)
    assert "state bytes per sequence (linear attention)" not in ldf.kv_cache_report("Gemma-2-9B", 8192)
    assert ldf.kv_cache_report(ldf.ModelConfig.from_hf({"model_type": "llama4_text"}), 10)["layer types"] == \
        "chunked_attention, full_attention (chunk 8,192)"
