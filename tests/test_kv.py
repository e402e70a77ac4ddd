"""Tests for llm_dataflow.kv: KV-cache bytes for every attention variant."""
import pytest

import llm_dataflow as ldf
from llm_dataflow import ModelConfig


def _cfg(**kw):
    base = dict(n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8, head_dim=128, d_ff=14336,
                vocab_size=32000, max_position_embeddings=8192)
    base.update(kw)
    return ModelConfig(**base)


def test_seed_example_is_exactly_4_gib():
    cfg = _cfg()
    assert ldf.kv_cache_bytes(cfg, 32 * 1024, 1, "bf16") == 4 * ldf.GiB == 4_294_967_296
    assert ldf.kv_cache_bytes(ldf.model_config("Llama-3-8B"), 32768) == 4 * ldf.GiB


@pytest.mark.parametrize("n_kv,kind", [(32, "MHA"), (8, "GQA"), (1, "MQA")])
def test_dense_formula(n_kv, kind):
    cfg = _cfg(n_kv_heads=n_kv)
    assert cfg.attention_kind == kind
    assert ldf.kv_bytes_per_token(cfg, "bf16") == 32 * n_kv * 128 * 2 * 2
    assert ldf.kv_bytes_per_token(cfg, "fp32") == 32 * n_kv * 128 * 2 * 4
    assert ldf.kv_cache_bytes(cfg, 1000, batch=3, dtype="fp16") == 3 * 1000 * 32 * n_kv * 128 * 2 * 2


def test_llama2_mha_per_token_is_half_mib():
    # Llama-2-7B: 32 layers × 32 heads × 128 × 2 (K,V) × 2 B = 524,288 B per token
    assert ldf.kv_bytes_per_token(ldf.model_config("Llama-2-7B")) == 512 * ldf.KiB


def test_mla_latent_plus_rope_key_no_factor_two():
    cfg = ldf.model_config("DeepSeek-V3")
    assert ldf.kv_bytes_per_token(cfg) == 61 * (512 + 64) * 2 == 70_272
    assert ldf.kv_cache_bytes(cfg, 4096, 2) == 2 * 4096 * 70_272
    # quantised MLA: one scale for the latent and one for the RoPE key per layer and token
    assert ldf.kv_bytes_per_token(cfg, "fp8") == 61 * (512 + 2 + 64 + 2)


def test_sliding_window_min_and_window_larger_than_context():
    cfg = _cfg(sliding_window=4096)
    per_tok = ldf.kv_bytes_per_token(cfg)
    assert ldf.kv_cache_bytes(cfg, 1000) == 1000 * per_tok
    assert ldf.kv_cache_bytes(cfg, 4096) == ldf.kv_cache_bytes(cfg, 100_000) == 4096 * per_tok
    big = _cfg(sliding_window=1_000_000)  # window larger than any context: holds the context
    assert ldf.kv_cache_bytes(big, 5000) == 5000 * per_tok


def test_interleaved_local_global_layers():
    types = tuple("sliding_attention" if i % 2 == 0 else "full_attention" for i in range(32))
    cfg = _cfg(sliding_window=1024, layer_types=types)
    layer = 2 * 8 * 128 * 2
    assert ldf.kv_cache_bytes(cfg, 8192) == 16 * 8192 * layer + 16 * 1024 * layer
    assert ldf.kv_tokens_held(cfg, 0, 8192) == 1024 and ldf.kv_tokens_held(cfg, 1, 8192) == 8192
    g = ldf.model_config("Gemma-2-9B")  # 21 local (4096) + 21 global layers, 8 KV heads × 256
    assert ldf.kv_cache_bytes(g, 8192) == (21 * 8192 + 21 * 4096) * 2 * 8 * 256 * 2


def test_quantised_kv_with_per_vector_scales():
    cfg = _cfg()
    # INT8: 128 values + one FP16 scale per (token, layer, KV head, K|V)
    assert ldf.kv_bytes_per_token(cfg, "int8") == 32 * 2 * 8 * (128 + 2)
    assert ldf.kv_bytes_per_token(cfg, "fp8_e4m3", scale_dtype="fp32") == 32 * 2 * 8 * (128 + 4)
    assert ldf.kv_bytes_per_token(cfg, "int4") == 32 * 2 * 8 * (64 + 2)
    assert ldf.kv_scale_bytes_per_tensor(cfg, "fp32") == 2 * 32 * 4


def test_beyond_max_position_embeddings_is_computed():
    cfg = ldf.model_config("Llama-3-8B")
    assert ldf.kv_cache_bytes(cfg, 1_000_000) == 1_000_000 * 131_072
    rep = ldf.kv_cache_report("Llama-3-8B", 16384, 1, "bf16")
    assert rep["beyond max_position_embeddings"].startswith("YES")
    assert ldf.kv_cache_report("Llama-3-8B", 8192)["beyond max_position_embeddings"].startswith("no")
    assert rep["KV cache GiB (2^30 B)"] == 2.0


def test_zero_length_and_bad_input():
    cfg = _cfg()
    assert ldf.kv_cache_bytes(cfg, 0) == 0
    with pytest.raises(ValueError, match="seq_len"):
        ldf.kv_cache_bytes(cfg, -1)
    with pytest.raises(ValueError, match="batch"):
        ldf.kv_cache_bytes(cfg, 10, batch=0)
    with pytest.raises(ValueError, match="dtype"):
        ldf.kv_bytes_per_token(cfg, "fp64")
    with pytest.raises(ValueError, match="layer"):
        ldf.kv_layer_bytes_per_token(cfg, 32)


def test_kv_weight_crossover_counts_the_gathered_rows():
    """Chapter 06 §2: a decode step of batch b gathers b embedding rows, not the whole table, so
    the context at which Llama-3-8B's KV read equals its weight read is (weights read) /
    (131,072 B × b): 3,579 tokens at batch 32, not the 3,829 of the whole table."""
    import llm_dataflow as ldf

    cfg = ldf.model_config("Llama-3-8B")
    kv = ldf.kv_bytes_per_token(cfg)
    got = {b: round(ldf.weight_bytes_read(cfg, "bf16", b) / kv / b) for b in (1, 8, 32, 128)}
    assert got == {1: 114_516, 8: 14_315, 32: 3_579, 128: 895}
    assert round(ldf.weight_bytes(cfg, "bf16") / kv / 32) == 3_829
