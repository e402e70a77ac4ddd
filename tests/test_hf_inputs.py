"""``ModelConfig.from_hf`` reads a config.json as transformers does (issue 16, kind 3).

transformers (5.24, pinned in requirements.txt) is a test-only dependency: each test builds
transformers' own config class from the same dict and compares every field the package derives,
and builds the model on the meta device to compare parameter counts and bias tensors.
"""
import dataclasses
import typing

import pytest
import torch

import llm_dataflow as ldf
from llm_dataflow.core.hf_config import HF_CONFIG_ALIASES, HF_CONFIG_DEFAULTS, NESTED_MODEL_TYPES

transformers = pytest.importorskip("transformers")
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText  # noqa: E402

TOL = dict(rtol=1e-4, atol=1e-5)


def hf_config(d: dict):
    """transformers' config object for a config.json dict."""
    d = dict(d)
    return AutoConfig.for_model(d.pop("model_type"), **d)


def hf_view(hc) -> dict:
    """What transformers' config (and its modelling code) makes of each ModelConfig field."""
    mt = hc.model_type
    if mt == "gpt2":
        D, H = hc.n_embd, hc.n_head
        return dict(n_layers=hc.n_layer, d_model=D, n_heads=H, n_kv_heads=H, head_dim=D // H,
                    d_ff=hc.n_inner or 4 * D, vocab_size=hc.vocab_size, tie_embeddings=hc.tie_word_embeddings,
                    max_position_embeddings=hc.n_positions, norm_eps=hc.layer_norm_epsilon,
                    windows=[None] * hc.n_layer)
    if mt in NESTED_MODEL_TYPES:  # the language model, tied as the composite config says
        return dict(hf_view(hc.text_config), tie_embeddings=hc.tie_word_embeddings)
    D, H, L = hc.hidden_size, hc.num_attention_heads, hc.num_hidden_layers
    rp = dict(hc.rope_parameters)
    if mt == "gemma3_text":   # RoPE per layer type: the full layers' is the model's, the sliding ones' base
        rp = dict(hc.rope_parameters["full_attention"])
    out = dict(n_layers=L, d_model=D, n_heads=H, n_kv_heads=hc.num_key_value_heads,
               head_dim=hc.qk_head_dim if mt == "deepseek_v3" else (getattr(hc, "head_dim", None) or D // H),
               d_ff=hc.intermediate_size, vocab_size=hc.vocab_size, tie_embeddings=hc.tie_word_embeddings,
               max_position_embeddings=hc.max_position_embeddings, norm_eps=hc.rms_norm_eps,
               rope_theta=rp["rope_theta"],
               rope_scaling=None if rp.get("rope_type", "default") == "default" else
               {k: v for k, v in rp.items() if k not in ("rope_theta", "partial_rotary_factor")})
    # the attention window of each layer, as each modelling file computes it
    if mt in ("qwen2", "qwen3", "gemma2", "gemma3_text", "gpt_oss", "llama4_text", "qwen3_next", "qwen2_moe"):
        out["windows"] = [{"sliding_attention": hc.sliding_window if mt not in ("llama4_text", "qwen3_next") else None,
                           "chunked_attention": ("chunk", getattr(hc, "attention_chunk_size", None)),
                           "linear_attention": "linear"}.get(t) for t in hc.layer_types]
    else:
        out["windows"] = [getattr(hc, "sliding_window", None)] * L
    if mt == "gemma3_text":
        out["rope_local_theta"] = hc.rope_parameters["sliding_attention"]["rope_theta"]
    if mt == "llama4_text":  # Llama4TextMoe in hc.moe_layers, dense Llama4TextMLP (intermediate_size_mlp) elsewhere
        out.update(d_ff=hc.intermediate_size_mlp, n_routed_experts=hc.num_local_experts,
                   n_experts_per_token=hc.num_experts_per_tok, moe_d_ff=hc.intermediate_size, n_shared_experts=1,
                   shared_expert_d_ff=hc.intermediate_size, attention_chunk_size=hc.attention_chunk_size,
                   dense_layers=tuple(i for i in range(L) if i not in hc.moe_layers),
                   nope_layers=tuple(i for i in range(L) if not hc.no_rope_layers[i]))
    if mt == "gpt_oss":
        out.update(n_routed_experts=hc.num_local_experts, n_experts_per_token=hc.num_experts_per_tok,
                   moe_d_ff=hc.intermediate_size, attention_sinks=True, router_linear_bias=True,
                   swiglu_limit=hc.swiglu_limit, swiglu_alpha=hc.swiglu_alpha)
    if mt in ("qwen3_next", "qwen2_moe"):
        moe = [i not in hc.mlp_only_layers and hc.num_experts > 0 and (i + 1) % hc.decoder_sparse_step == 0
               for i in range(L)]
        out.update(n_routed_experts=hc.num_experts, n_experts_per_token=hc.num_experts_per_tok,
                   moe_d_ff=hc.moe_intermediate_size, norm_topk_prob=hc.norm_topk_prob,
                   shared_expert_d_ff=hc.shared_expert_intermediate_size,
                   dense_layers=tuple(i for i in range(L) if not moe[i]),
                   **({} if mt == "qwen2_moe" else {k: getattr(hc, k) for k in (
                       "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                       "linear_value_head_dim", "linear_conv_kernel_dim")}))
    if mt == "mixtral":
        out.update(n_routed_experts=hc.num_local_experts, n_experts_per_token=hc.num_experts_per_tok,
                   moe_d_ff=hc.intermediate_size)
    if mt == "qwen3_moe":
        moe = [i not in hc.mlp_only_layers and hc.num_local_experts > 0 and (i + 1) % hc.decoder_sparse_step == 0
               for i in range(L)]
        out.update(n_routed_experts=hc.num_local_experts, n_experts_per_token=hc.num_experts_per_tok,
                   moe_d_ff=hc.moe_intermediate_size, norm_topk_prob=hc.norm_topk_prob,
                   dense_layers=tuple(i for i in range(L) if not moe[i]))
    if mt == "glm4_moe":   # Glm4MoeDecoderLayer: dense below first_k_dense_replace, then Glm4MoeMoE
        out.update(n_routed_experts=hc.n_routed_experts, n_experts_per_token=hc.num_experts_per_tok,
                   n_shared_experts=hc.n_shared_experts, moe_d_ff=hc.moe_intermediate_size,
                   dense_layers=tuple(range(min(hc.first_k_dense_replace, L))), norm_topk_prob=hc.norm_topk_prob)
    if mt == "deepseek_v3":
        out.update(n_routed_experts=hc.n_routed_experts, n_experts_per_token=hc.num_experts_per_tok,
                   n_shared_experts=hc.n_shared_experts, moe_d_ff=hc.moe_intermediate_size,
                   dense_layers=tuple(range(min(hc.first_k_dense_replace, L))), kv_lora_rank=hc.kv_lora_rank,
                   q_lora_rank=hc.q_lora_rank, qk_rope_head_dim=hc.qk_rope_head_dim,
                   qk_nope_head_dim=hc.qk_nope_head_dim, v_head_dim=hc.v_head_dim, norm_topk_prob=hc.norm_topk_prob)
    return out


def ours_view(cfg: ldf.ModelConfig, keys) -> dict:
    out = {k: getattr(cfg, k) for k in keys if k != "windows"}
    out["windows"] = [{"sliding_attention": cfg.sliding_window, "chunked_attention": ("chunk", cfg.attention_chunk_size),
                       "linear_attention": "linear"}.get(cfg.layer_type(i)) for i in range(cfg.n_layers)]
    return out


def hf_meta_model(hc):
    with torch.device("meta"):
        if hc.model_type in NESTED_MODEL_TYPES:   # the whole checkpoint: language model + vision tower
            return AutoModelForImageTextToText.from_config(hc)
        return AutoModelForCausalLM.from_config(hc)


def stored_count(m) -> int:
    """What a checkpoint stores: parameters (tied ones once) + persistent buffers."""
    persistent = set(m.state_dict())
    return sum(p.numel() for p in m.parameters()) + sum(b.numel() for n, b in m.named_buffers() if n in persistent)


def assert_same_as_transformers(d: dict, model: bool = True) -> ldf.ModelConfig:
    """from_hf(d) and from_hf(transformers' to_dict() of d) agree with transformers on every field."""
    hc = hf_config(d)
    expect = hf_view(hc)
    cfg = ldf.ModelConfig.from_hf(d)
    assert ours_view(cfg, expect) == expect
    assert ldf.ModelConfig.from_hf(hc.to_dict()).replace(notes="", name="x") == cfg.replace(notes="", name="x")
    if model:
        m = hf_meta_model(hc)
        # what a checkpoint stores: parameters + persistent buffers (DeepSeek-V3's e_score_correction_bias)
        if d["model_type"] in NESTED_MODEL_TYPES:
            assert stored_count(m) == ldf.param_count(cfg) + cfg.vision_params
            lm = m.model.language_model if hasattr(m, "model") else m.language_model.model
            assert stored_count(lm) + (0 if cfg.tie_embeddings else cfg.vocab_size * cfg.d_model) == ldf.param_count(cfg)
            return cfg
        assert stored_count(m) == ldf.param_count(cfg)
        # transformers 5 fuses routed experts (gpt-oss: experts.gate_up_proj_bias): compare their biases by count
        hf_bias = {n for n, _ in m.named_parameters() if n.endswith(".bias") and ".experts." not in n}
        ours_bias = {t.name for t in ldf.tensor_specs(cfg) if t.name.endswith(".bias") and ".experts." not in t.name}
        assert sum(p.numel() for n, p in m.named_parameters() if ".experts." in n and n.endswith("bias")) == \
            sum(t.numel for t in ldf.tensor_specs(cfg) if ".experts." in t.name and t.name.endswith(".bias"))
        if d["model_type"] == "gpt2":
            ours_bias = {n.removeprefix("transformer.") for n in ours_bias}
            hf_bias = {n.removeprefix("transformer.") for n in hf_bias}
        assert hf_bias == ours_bias
    return cfg


# --- the defaults table is transformers' --------------------------------------------------------
@pytest.mark.parametrize("mt", ldf.SUPPORTED_MODEL_TYPES)
def test_defaults_table_is_transformers_config_class(mt):
    cls = type(AutoConfig.for_model(mt))
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key, (default, kind) in HF_CONFIG_DEFAULTS[mt].items():
        if default == "derived":   # not a field: the modelling code computes hidden_size // heads
            assert key not in fields, key
            continue
        f = fields[key]
        hf_default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        hf_default = getattr(hf_default, "default", hf_default)
        assert (key, default) == (key, hf_default)
        nullable = type(None) in typing.get_args(f.type)
        assert (key, kind.endswith("?")) == (key, nullable)
    aliases = {frozenset(p) for p in HF_CONFIG_ALIASES.get(mt, {}).items()}
    hf_aliases = {frozenset(p) for p in cls.attribute_map.items() if p[0] != "num_mtp_layers"}
    assert aliases == hf_aliases


# --- every supported model_type: defaults, then minimal dicts -----------------------------------
@pytest.mark.parametrize("mt", ldf.SUPPORTED_MODEL_TYPES)
def test_all_defaults_match_transformers(mt):
    """``{"model_type": mt}`` alone: every derived field is the config class's default."""
    cfg = assert_same_as_transformers({"model_type": mt}, model=False)
    assert "defaults of transformers'" in cfg.notes


SMALL = dict(hidden_size=64, num_attention_heads=4, num_hidden_layers=3, intermediate_size=96, vocab_size=128,
             max_position_embeddings=256)
SMALL8 = dict(SMALL, num_attention_heads=8)  # mistral/mixtral default to 8 KV heads
MINIMAL = {
    "llama": [dict(SMALL), dict(SMALL, num_key_value_heads=2, attention_bias=True, mlp_bias=True, head_dim=8),
              dict(SMALL, tie_word_embeddings=True, rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                                                    "low_freq_factor": 1.0, "high_freq_factor": 4.0}),
              dict(SMALL, rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 5e5})],
    "mistral": [dict(SMALL8), dict(SMALL8, sliding_window=None), dict(SMALL, num_key_value_heads=1, sliding_window=7)],
    "mixtral": [dict(SMALL8), dict(SMALL, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=1,
                                   sliding_window=16)],
    "qwen2": [dict(SMALL, num_key_value_heads=4),
              dict(SMALL, num_key_value_heads=2, use_sliding_window=True, sliding_window=4, max_window_layers=1),
              dict(SMALL, num_key_value_heads=2, use_sliding_window=True, sliding_window=4,
                   layer_types=["sliding_attention", "full_attention", "sliding_attention"]),
              dict(SMALL, num_key_value_heads=2, use_sliding_window=False, sliding_window=131072, max_window_layers=1)],
    "qwen3": [dict(SMALL, num_key_value_heads=4),
              dict(SMALL, num_key_value_heads=2, head_dim=16, attention_bias=True, use_sliding_window=True,
                   sliding_window=4, max_window_layers=2)],
    "qwen3_moe": [dict(SMALL, num_key_value_heads=2, moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2),
                  dict(SMALL, num_key_value_heads=2, moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2,
                       decoder_sparse_step=2, mlp_only_layers=[2], use_sliding_window=True, sliding_window=5,
                       norm_topk_prob=True, attention_bias=True)],
    "gemma2": [dict(SMALL, head_dim=16), dict(SMALL, head_dim=16, num_key_value_heads=2, attention_bias=True,
                                              sliding_window=8, query_pre_attn_scalar=16,
                                              layer_types=["full_attention"] * 2 + ["sliding_attention"])],
    "phi3": [dict(SMALL, pad_token_id=None), dict(SMALL, pad_token_id=None, num_key_value_heads=2, sliding_window=31)],
    "gpt2": [dict(n_embd=64, n_head=4, n_layer=2, n_positions=128, vocab_size=128),
             dict(n_embd=64, n_head=4, n_layer=2, n_positions=128, vocab_size=128, n_inner=100,
                  tie_word_embeddings=False)],
    "deepseek_v3": [dict(SMALL, num_key_value_heads=4, moe_intermediate_size=32, n_routed_experts=8,
                         num_experts_per_tok=2, n_group=2, topk_group=1, first_k_dense_replace=1, kv_lora_rank=16,
                         q_lora_rank=24, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16),
                    dict(SMALL, num_key_value_heads=4, moe_intermediate_size=32, n_routed_experts=8,
                         num_experts_per_tok=2, n_group=1, topk_group=1, first_k_dense_replace=0, kv_lora_rank=16,
                         q_lora_rank=None, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=12,
                         attention_bias=True, n_shared_experts=2)],
    "qwen2_moe": [dict(SMALL, num_key_value_heads=2, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2,
                       shared_expert_intermediate_size=48),
                  dict(SMALL, num_key_value_heads=4, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=1,
                       shared_expert_intermediate_size=40, decoder_sparse_step=2, mlp_only_layers=[0], qkv_bias=False,
                       use_sliding_window=True, sliding_window=8, max_window_layers=2, norm_topk_prob=True)],
    "granite": [dict(SMALL), dict(SMALL, num_key_value_heads=2, attention_bias=True, mlp_bias=True, head_dim=8,
                                  embedding_multiplier=12.0, residual_multiplier=0.22, attention_multiplier=0.0078125,
                                  logits_scaling=8.0)],
    "glm4_moe": [dict(SMALL, num_key_value_heads=2, moe_intermediate_size=32, n_routed_experts=8, num_experts_per_tok=2),
                 dict(SMALL, num_key_value_heads=2, head_dim=24, moe_intermediate_size=32, n_routed_experts=8,
                      num_experts_per_tok=2, n_shared_experts=2, first_k_dense_replace=2, attention_bias=True,
                      use_qk_norm=True, n_group=2, topk_group=1, routed_scaling_factor=2.5, partial_rotary_factor=0.25)],
}
# today's families (issue 27): tiny shapes of each layer pattern
LLAMA4 = dict(SMALL, num_hidden_layers=4, num_key_value_heads=2, head_dim=16, num_local_experts=4,
              num_experts_per_tok=1, intermediate_size_mlp=80, attention_chunk_size=8)
NEXT = dict(SMALL, num_hidden_layers=4, num_key_value_heads=2, head_dim=16, num_experts=4, num_experts_per_tok=2,
            moe_intermediate_size=32, shared_expert_intermediate_size=40, linear_num_key_heads=2,
            linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=12)
SIGLIP = dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=48, num_hidden_layers=2,
              num_attention_heads=2, image_size=32, patch_size=8)
MINIMAL.update({
    "gemma3_text": [dict(SMALL, head_dim=16, num_key_value_heads=2, sliding_window=8),
                    dict(SMALL, head_dim=16, sliding_window=4, sliding_window_pattern=2, rope_theta=5e5,
                         rope_local_base_freq=1e4, rope_scaling={"rope_type": "linear", "factor": 8.0},
                         query_pre_attn_scalar=16, attention_bias=True, tie_word_embeddings=False),
                    dict(SMALL, head_dim=16, sliding_window=5,
                         layer_types=["sliding_attention", "full_attention", "sliding_attention"])],
    "llama4_text": [dict(LLAMA4), dict(LLAMA4, interleave_moe_layer_step=2, no_rope_layers=[1, 0, 1, 1],
                                       use_qk_norm=False, attention_bias=True, tie_word_embeddings=True),
                    dict(LLAMA4, attention_chunk_size=None, moe_layers=[0, 3],
                         rope_scaling={"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0,
                                       "high_freq_factor": 1.0, "original_max_position_embeddings": 64})],
    "gpt_oss": [dict(SMALL, head_dim=16, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
                     sliding_window=4),
                dict(SMALL, head_dim=16, num_key_value_heads=1, num_local_experts=4, num_experts_per_tok=1,
                     sliding_window=6, attention_bias=False, rope_theta=1e4,
                     layer_types=["full_attention", "sliding_attention", "full_attention"])],
    "qwen3_next": [dict(NEXT), dict(NEXT, full_attention_interval=2, decoder_sparse_step=2, mlp_only_layers=[0],
                                    attention_bias=True, partial_rotary_factor=0.5, linear_conv_kernel_dim=3)],
    "gemma3": [dict(text_config=dict(SMALL, head_dim=16, sliding_window=8), vision_config=dict(SIGLIP)),
               dict(text_config=dict(SMALL, head_dim=16, sliding_window=8), tie_word_embeddings=False,
                    vision_config=dict(SIGLIP, vision_use_head=True))],
    "llama4": [dict(text_config=dict(LLAMA4, model_type="llama4_text"),
                    vision_config=dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=2,
                                       image_size=32, patch_size=8, vision_output_dim=40, projector_input_dim=24,
                                       projector_output_dim=24))],
    "mistral3": [dict(text_config=dict(SMALL8, model_type="mistral"),
                      vision_config=dict(model_type="pixtral", hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                         num_attention_heads=2, image_size=32, patch_size=8, head_dim=16)),
                 dict(text_config=dict(SMALL8, model_type="mistral"), tie_word_embeddings=False, spatial_merge_size=1,
                      multimodal_projector_bias=True, vision_feature_layer=[-1, -2],
                      vision_config=dict(model_type="pixtral", hidden_size=32, intermediate_size=48,
                                         num_hidden_layers=2, num_attention_heads=4))],
})
CASES = [(mt, i) for mt in ldf.SUPPORTED_MODEL_TYPES for i in range(len(MINIMAL[mt]))]


def test_every_supported_type_has_cases():
    assert set(MINIMAL) == set(ldf.SUPPORTED_MODEL_TYPES)


@pytest.mark.parametrize("mt,i", CASES)
def test_minimal_dicts_match_transformers(mt, i):
    assert_same_as_transformers(dict(MINIMAL[mt][i], model_type=mt))


# --- the issue's inputs, with their right values -------------------------------------------------
QWEN25_7B = {"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28,
             "num_key_value_heads": 4, "num_hidden_layers": 28, "vocab_size": 152064, "use_sliding_window": True,
             "sliding_window": 4096}


def test_issue_defaults():
    assert ldf.ModelConfig.from_hf(dict(SMALL, model_type="llama")).norm_eps == 1e-6
    assert ldf.ModelConfig.from_hf(dict(SMALL8, model_type="mixtral")).rope_theta == 1e6
    for mt in ("mistral", "mixtral"):
        assert ldf.ModelConfig.from_hf(dict(SMALL, hidden_size=512, num_attention_heads=16, model_type=mt)).n_kv_heads == 8
    cfg = ldf.ModelConfig.from_hf(QWEN25_7B)
    assert cfg.layer_types == ("full_attention",) * 28          # max_window_layers defaults to 28
    assert ldf.kv_cache_bytes(cfg, 32768) == 1_879_048_192      # 28 × 32768 × 2 × 4 × 128 × 2 B
    assert 28 * 32768 * 2 * 4 * 128 * 2 == 1_879_048_192
    assert_same_as_transformers(QWEN25_7B, model=False)


def test_qwen3_sliding_window_fields_are_read():
    d = dict(SMALL, model_type="qwen3", num_key_value_heads=2, head_dim=16, use_sliding_window=True, sliding_window=4,
             max_window_layers=1)
    cfg = ldf.ModelConfig.from_hf(d)
    assert cfg.layer_types == ("full_attention", "sliding_attention", "sliding_attention")
    # KV held at 100 tokens: one full layer (100 tokens) + two sliding layers (4 tokens each)
    per_tok = 2 * 2 * 16 * 2                                   # K and V × 2 KV heads × d_h 16 × 2 B
    assert ldf.kv_cache_bytes(cfg, 100) == (100 + 4 + 4) * per_tok
    moe = dict(d, model_type="qwen3_moe", moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2)
    del moe["max_window_layers"]
    assert ldf.ModelConfig.from_hf(moe).layer_type(0) == "sliding_attention"  # every layer, as transformers


def _decoder_vs_hf(d, T=11):
    """Our Decoder and transformers' model, same weights: logits agree; returns both."""
    hc = hf_config(d)
    cfg = ldf.ModelConfig.from_hf(d)
    torch.manual_seed(0)
    ours = ldf.Decoder(cfg).eval()
    hf = AutoModelForCausalLM.from_config(hc, attn_implementation="eager").eval()
    sd = ours.state_dict()
    if cfg.is_moe:  # transformers 5 fuses the experts: gate_up_proj [E, 2F, D], down_proj [E, D, F]
        for i in range(cfg.n_layers):
            if not cfg.is_moe_layer(i):
                continue
            p = f"model.layers.{i}.mlp.experts"
            E = cfg.n_routed_experts
            gu = torch.stack([torch.cat([sd.pop(f"{p}.{e}.gate_proj.weight"), sd.pop(f"{p}.{e}.up_proj.weight")])
                              for e in range(E)])
            sd[f"{p}.gate_up_proj"] = gu
            sd[f"{p}.down_proj"] = torch.stack([sd.pop(f"{p}.{e}.down_proj.weight") for e in range(E)])
    hf.load_state_dict(sd, strict=True)
    ids = torch.randint(0, cfg.vocab_size, (2, T), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        a, b = ours(ids), hf(ids).logits
    torch.testing.assert_close(a, b, **TOL)
    return cfg, ours, ids


@pytest.mark.parametrize("mt", ["qwen2", "qwen3", "qwen3_moe"])
def test_decoder_logits_follow_sliding_window_fields(mt):
    """A window of 4 on layers >= 1 (all layers for qwen3_moe) changes the logits at T = 11; the
    Decoder built from from_hf matches transformers, and ignoring the window would not."""
    d = dict(SMALL, model_type=mt, num_key_value_heads=2, use_sliding_window=True, sliding_window=4)
    if mt != "qwen3_moe":
        d["max_window_layers"] = 1
    else:
        d.update(moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2)
    cfg, ours, ids = _decoder_vs_hf(d)
    full = ldf.Decoder(cfg.replace(sliding_window=None, layer_types=None)).eval()
    full.load_state_dict(ours.state_dict())
    with torch.inference_mode():
        assert (full(ids) - ours(ids)).abs().max() > 1e-3


def test_decoder_logits_llama_attention_bias_on_o_proj():
    d = dict(SMALL, model_type="llama", num_key_value_heads=2, attention_bias=True, mlp_bias=True)
    cfg, ours, _ = _decoder_vs_hf(d)
    assert cfg.attention_out_bias and ours.model.layers[0].self_attn.o_proj.bias is not None


def test_decoder_logits_granite_at_llamas_scales():
    """Granite (issue 42, a family vLLM serves widely): Llama's layers with biases on q, k, v, o and the
    MLP, scaled by four multipliers (its attention scores by ``attention_multiplier``, not 1/sqrt(d_h)).
    With them at Llama's values the Decoder runs it and matches transformers' logits; any other value
    is kept in ``unmodelled`` and the Decoder refuses it."""
    d = dict(SMALL, model_type="granite", num_key_value_heads=2, attention_bias=True, mlp_bias=True,
             attention_multiplier=16 ** -0.5)
    cfg, ours, _ = _decoder_vs_hf(d)
    assert cfg.attention_out_bias and cfg.mlp_bias and cfg.unmodelled is None
    for key, v in (("embedding_multiplier", 12.0), ("attention_multiplier", 1.0)):
        c = ldf.ModelConfig.from_hf(dict(d, **{key: v}))
        assert c.unmodelled == {key: v}
        with pytest.raises(ValueError, match="unmodelled"):
            ldf.Decoder(c)


# --- refused, by name ----------------------------------------------------------------------------
@pytest.mark.parametrize("d, match", [
    (dict(SMALL, model_type="llama", sliding_window=4), "sliding_window=4 is refused"),
    (dict(SMALL, model_type="mistral", layer_types=["sliding_attention"] * 3), "layer_types="),
    (dict(SMALL, model_type="mistral", attention_bias=True), "attention_bias=True is refused"),
    (dict(SMALL, model_type="phi3", mlp_bias=True), "mlp_bias=True is refused"),
    (dict(SMALL, model_type="qwen3_moe", use_sliding_window=True, max_window_layers=2), "max_window_layers=2"),
    (dict(SMALL, model_type="deepseek_v3", moe_layer_freq=2), "moe_layer_freq=2"),
    (dict(model_type="gpt2", add_cross_attention=True), "add_cross_attention=True"),
    (dict(model_type="gpt2", n_embd=64, hidden_size=32), "hidden_size=32 and n_embd=64"),
    (dict(SMALL, model_type="qwen3_moe", num_experts=4, num_local_experts=8), "num_local_experts=8"),
    (dict(SMALL, model_type="qwen3", head_dim=None), "head_dim=None"),
    (dict(SMALL, model_type="llama", hidden_size=66), "hidden_size=66 is not a multiple"),
    (dict(SMALL, model_type="llama", rms_norm_eps="1e-6"), "rms_norm_eps='1e-6'"),
    (dict(SMALL, model_type="llama", num_hidden_layers=0), "num_hidden_layers=0"),
    (dict(SMALL, model_type="llama", rope_theta=-1.0), "rope_theta=-1.0"),
    (dict(SMALL, model_type="llama", rope_scaling="linear"), "rope_scaling='linear'"),
    (dict(SMALL, model_type="qwen2", num_key_value_heads=2, use_sliding_window=True,
          layer_types=["full_attention"]), "layer_types has 1 entries"),
    (dict(SMALL, model_type="bert"), "model_type='bert'"),
])
def test_refused_by_name(d, match):
    with pytest.raises(ValueError, match=match):
        ldf.ModelConfig.from_hf(d)


def test_unmodelled_settings_are_kept_and_refused_by_the_decoder():
    g = ldf.ModelConfig.from_hf({"model_type": "gemma2"})
    assert g.unmodelled == {"attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0}
    assert ldf.model_config("Gemma-2-9B").unmodelled == g.unmodelled
    cfg = ldf.ModelConfig.from_hf(dict(SMALL, model_type="llama", hidden_act="gelu"))
    assert cfg.unmodelled == {"hidden_act": "gelu"}
    assert ldf.param_count(cfg) == ldf.param_count(cfg.replace(unmodelled=None))  # no byte changes
    with pytest.raises(ValueError, match="unmodelled="):
        ldf.Decoder(cfg)
    ds = ldf.ModelConfig.from_hf({"model_type": "deepseek_v3"})
    assert ds.unmodelled == {"routed_scaling_factor": 2.5, "n_group": 8, "topk_group": 4, "rope_interleave": True}
    assert ldf.param_count(ds) == ldf.param_count(ldf.model_config("DeepSeek-V3"))
    assert ldf.ModelConfig.from_hf(dict(SMALL, model_type="llama", hidden_act="swish")).unmodelled is None


def test_deepseek_head_dim_from_to_dict_is_ignored():
    """transformers writes head_dim = qk_rope_head_dim (64) into to_dict(); the q·k width stays 192."""
    hc = AutoConfig.for_model("deepseek_v3")
    assert hc.to_dict()["head_dim"] == 64
    assert ldf.ModelConfig.from_hf(hc.to_dict()).head_dim == 192
