"""Tests of the decoder (model.py): building blocks, Hugging Face equivalence, KV cache, ragged decode.

Tolerances: FP32 on CPU.  Our decoder and transformers' run the same operations in the same
order, so logits agree to ``atol=1e-5, rtol=1e-4`` (observed: exactly equal for Llama); the
greedy continuations must be identical.
"""
import math
import warnings

import pytest
import torch
import torch.nn.functional as F

import llm_dataflow as ldf

TOL = dict(atol=1e-5, rtol=1e-4)
warnings.filterwarnings("ignore")


# --- building blocks ------------------------------------------------------------------------
def test_rms_norm_matches_formula_irregular_shape():
    torch.manual_seed(0)
    x = torch.randn(3, 7, 37)
    w = torch.randn(37)
    ref = w * x / torch.sqrt((x * x).mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(ldf.rms_norm(x, w, 1e-6), ref)
    with pytest.raises(ValueError, match="weight.shape"):
        ldf.rms_norm(x, torch.ones(36), 1e-6)
    with pytest.raises(ValueError, match="eps"):
        ldf.rms_norm(x, w, 0.0)


def test_rope_is_a_rotation_of_channel_pairs():
    """Reference: channel pairs (i, i + d_h/2) rotated by angle p·θ_i, as complex multiplication."""
    torch.manual_seed(1)
    B, H, T, dh, theta = 3, 5, 9, 14, 500.0
    x = torch.randn(B, H, T, dh, dtype=torch.float64)
    pos = torch.arange(T) + 4
    cos, sin = ldf.rope_cos_sin(pos, dh, theta)
    assert cos.shape == (T, dh)
    got = ldf.apply_rope(x, cos.double(), sin.double())
    i = torch.arange(dh // 2, dtype=torch.float64)
    ang = pos.double()[:, None] * theta ** (-2 * i / dh)  # [T, d_h/2]
    z = torch.complex(x[..., : dh // 2], x[..., dh // 2:]) * torch.exp(1j * ang)
    torch.testing.assert_close(got, torch.cat([z.real, z.imag], -1), atol=1e-5, rtol=1e-5)  # FP32 tables
    # rotation keeps norms; relative position only: <R(p)q, R(s)k> depends on p - s
    torch.testing.assert_close(got.norm(dim=-1), x.norm(dim=-1))
    with pytest.raises(ValueError, match="head_dim"):
        ldf.rope_cos_sin(pos, 15, theta)
    with pytest.raises(ValueError, match="cos/sin"):
        ldf.apply_rope(x, cos[:3].double(), sin[:3].double())


def test_apply_rope_per_row_positions():
    torch.manual_seed(2)
    x = torch.randn(3, 2, 1, 8)
    pos = torch.tensor([[5], [0], [11]])
    cos, sin = ldf.rope_cos_sin(pos, 8, 10000.0)  # [B, T, d_h]
    got = ldf.apply_rope(x, cos, sin)
    for b in range(3):
        c, s = ldf.rope_cos_sin(pos[b], 8, 10000.0)
        torch.testing.assert_close(got[b:b + 1], ldf.apply_rope(x[b:b + 1], c, s))


@pytest.mark.parametrize("H,Hkv", [(6, 6), (6, 2), (6, 1)])  # MHA, GQA, MQA
def test_attention_reference_vs_sdpa(H, Hkv):
    torch.manual_seed(3)
    B, T, S, dh = 3, 5, 13, 8
    q = torch.randn(B, H, T, dh)
    k, v = torch.randn(B, Hkv, S, dh), torch.randn(B, Hkv, S, dh)
    rep = H // Hkv
    kk, vv = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
    p = torch.arange(S - T, S)[:, None]
    j = torch.arange(S)[None]
    torch.testing.assert_close(ldf.attention_reference(q, k, v, causal=True),
                               F.scaled_dot_product_attention(q, kk, vv, attn_mask=j <= p), **TOL)
    torch.testing.assert_close(ldf.attention_reference(q, k, v, causal=True, window=4),
                               F.scaled_dot_product_attention(q, kk, vv, attn_mask=(j <= p) & (j > p - 4)), **TOL)
    torch.testing.assert_close(ldf.attention_reference(q, k, v, causal=False),
                               F.scaled_dot_product_attention(q, kk, vv), **TOL)
    with pytest.raises(ValueError, match="H_kv"):
        ldf.attention_reference(q, k[:, :1].expand(B, 4, S, dh) if H == 6 else k, v[:, :1].expand(B, 4, S, dh), True)


def test_swiglu_and_route():
    torch.manual_seed(4)
    x = torch.randn(7, 12)
    wg, wu, wd = torch.randn(20, 12), torch.randn(20, 12), torch.randn(12, 20)
    ref = (torch.sigmoid(x @ wg.T) * (x @ wg.T) * (x @ wu.T)) @ wd.T
    torch.testing.assert_close(ldf.swiglu(x, wg, wu, wd), ref, **TOL)
    with pytest.raises(ValueError, match="w_down"):
        ldf.swiglu(x, wg, wu, wd.T)
    gw = torch.randn(5, 12)
    idx, w = ldf.route(x, gw, 2, norm_topk_prob=True)
    p = (x @ gw.T).softmax(-1)
    top = p.topk(2, -1)
    assert torch.equal(idx, top.indices)
    torch.testing.assert_close(w, top.values / top.values.sum(-1, keepdim=True))
    torch.testing.assert_close(ldf.route(x, gw, 2, norm_topk_prob=False)[1], top.values)
    with pytest.raises(ValueError, match="k=6"):
        ldf.route(x, gw, 6)


# --- structure: names, counts, bad configs --------------------------------------------------
@pytest.mark.parametrize("name", ["tiny-llama", "tiny-moe", "tiny-draft"])
def test_state_dict_matches_tensor_specs(name):
    cfg = ldf.model_config(name)
    m = ldf.Decoder(cfg)
    sd = m.state_dict()
    specs = ldf.tensor_specs(cfg)
    assert list(sd) == [t.name for t in specs] or sorted(sd) == sorted(t.name for t in specs)
    assert all(tuple(sd[t.name].shape) == t.shape for t in specs)
    assert sum(v.numel() for v in sd.values()) == ldf.param_count(cfg)


def test_tied_embeddings_have_no_lm_head():
    cfg = ldf.model_config("tiny-llama").replace(tie_embeddings=True)
    m = ldf.Decoder(cfg)
    assert m.lm_head is None and "lm_head.weight" not in m.state_dict()
    assert sorted(m.state_dict()) == sorted(t.name for t in ldf.tensor_specs(cfg))


def test_bad_configs_raise_naming_the_field():
    base = ldf.model_config("tiny-llama")
    with pytest.raises(ValueError, match="n_heads=5"):
        base.replace(n_heads=5)
    with pytest.raises(ValueError, match="head_dim=15"):
        base.replace(head_dim=15)
    for preset, field in [("GPT-2-small", "norm"), ("DeepSeek-V3", "kv_lora_rank"), ("Gemma-2-9B", "mlp")]:
        with pytest.raises(ValueError, match=field):
            ldf.Decoder(ldf.model_config(preset))


# --- Hugging Face equivalence ---------------------------------------------------------------
def _compare_with_hf(cfg, hf_model, sd_to_hf=lambda sd: sd, B=3, T=7, new=6):
    torch.manual_seed(10)
    ours = ldf.Decoder(cfg).eval()
    hf_model.load_state_dict(sd_to_hf(ours.state_dict()), strict=True)
    hf_model.eval()
    ids = torch.randint(0, cfg.vocab_size, (B, T))
    with torch.inference_mode():
        torch.testing.assert_close(ours(ids), hf_model(ids).logits, **TOL)
        g_hf = hf_model.generate(ids, max_new_tokens=new, do_sample=False, attention_mask=torch.ones_like(ids))
    assert torch.equal(ours.generate(ids, new), g_hf)
    assert torch.equal(ours.generate(ids, new, use_cache=False), g_hf)
    return ours


def test_matches_hf_llama():
    from transformers import LlamaConfig, LlamaForCausalLM
    hc = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                     rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False)
    cfg = ldf.ModelConfig.from_hf(hc.to_dict())
    assert cfg.replace(name="x", source="", max_position_embeddings=256) == \
        ldf.model_config("tiny-llama").replace(name="x", source="")
    _compare_with_hf(cfg, LlamaForCausalLM(hc))


LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 32}


def test_matches_hf_llama3_rope_scaling_beyond_original_context():
    # Llama 3.1's rope_scaling scaled down: original context 32, factor 8; positions 0..79 pass 32
    from transformers import LlamaConfig, LlamaForCausalLM
    hc = LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                     rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False,
                     rope_scaling=dict(LLAMA3_SCALING))
    cfg = ldf.ModelConfig.from_hf(hc.to_dict())
    assert cfg.rope_scaling["rope_type"] == "llama3" and cfg.rope_scaling["factor"] == 8.0
    hf = LlamaForCausalLM(hc).eval()
    torch.manual_seed(11)
    ours = ldf.Decoder(cfg).eval()
    hf.load_state_dict(ours.state_dict(), strict=True)
    ids = torch.randint(0, cfg.vocab_size, (2, 80))
    with torch.inference_mode():
        torch.testing.assert_close(ours(ids), hf(ids).logits, **TOL)
    # the scaling changes the result there: plain RoPE differs beyond the original context
    plain = ldf.Decoder(cfg.replace(rope_scaling=None)).eval()
    plain.load_state_dict(ours.state_dict())
    with torch.inference_mode():
        assert not torch.allclose(plain(ids)[:, 40:], ours(ids)[:, 40:], **TOL)
    # inverse frequencies equal transformers' own function
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    inv_hf, att = ROPE_INIT_FUNCTIONS["llama3"](hc, "cpu")
    assert att == 1.0
    from llm_dataflow.model import _inv_freq
    torch.testing.assert_close(_inv_freq(16, 10000.0, None, LLAMA3_SCALING), inv_hf, atol=0, rtol=0)


@pytest.mark.parametrize("scaling, match", [
    ({"rope_type": "yarn", "factor": 4.0}, "rope_type='yarn'"),
    ({"type": "linear", "factor": 2.0}, "rope_type='linear'"),
    ({"rope_type": "llama3", "factor": 8.0}, "lacks"),
])
def test_unsupported_rope_scaling_raises(scaling, match):
    cfg = ldf.model_config("tiny-llama").replace(rope_scaling=scaling)
    with pytest.raises(ValueError, match="rope_scaling") as ei:
        ldf.Decoder(cfg)
    assert match in str(ei.value)
    with pytest.raises(ValueError, match=match):
        ldf.rope_cos_sin(torch.arange(4), 8, 10000.0, scaling)


def _fuse_experts(sd, cfg):
    """Our (and the on-disk checkpoint's) per-expert tensors → transformers 5's fused 3-D layout:
    ``experts.gate_up_proj [E, 2F, D]`` (gate rows first) and ``experts.down_proj [E, D, F]``."""
    out = {}
    for k, v in sd.items():
        if ".mlp.experts." not in k:
            out[k] = v
    for i in range(cfg.n_layers):
        if not cfg.is_moe_layer(i):
            continue
        p = f"model.layers.{i}.mlp.experts"
        E = cfg.n_routed_experts
        out[f"{p}.gate_up_proj"] = torch.stack([torch.cat([sd[f"{p}.{e}.gate_proj.weight"],
                                                           sd[f"{p}.{e}.up_proj.weight"]]) for e in range(E)])
        out[f"{p}.down_proj"] = torch.stack([sd[f"{p}.{e}.down_proj.weight"] for e in range(E)])
    return out


@pytest.mark.parametrize("norm_topk", [True, False])
def test_matches_hf_qwen3_moe(norm_topk):
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
    hc = Qwen3MoeConfig(vocab_size=256, hidden_size=64, intermediate_size=160, moe_intermediate_size=64,
                        num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                        num_experts=8, num_experts_per_tok=2, max_position_embeddings=256,
                        norm_topk_prob=norm_topk, mlp_only_layers=[1])
    d = hc.to_dict()
    # transformers 5 writes num_local_experts; the hub's config.json (what from_hf reads) says num_experts
    d.setdefault("num_experts", d.get("num_local_experts"))
    cfg = ldf.ModelConfig.from_hf(d)
    assert cfg.is_moe and cfg.qk_norm and cfg.dense_layers == (1,)
    ours = _compare_with_hf(cfg, Qwen3MoeForCausalLM(hc), lambda sd: _fuse_experts(sd, cfg))
    assert sum(v.numel() for v in ours.state_dict().values()) == ldf.param_count(cfg)


def test_matches_hf_mistral_sliding_window():
    from transformers import MistralConfig, MistralForCausalLM
    hc = MistralConfig(vocab_size=128, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=1, head_dim=8, sliding_window=4,
                       max_position_embeddings=64)
    cfg = ldf.ModelConfig.from_hf(hc.to_dict())
    assert cfg.sliding_window == 4 and cfg.attention_kind == "MQA"
    # T=9 > window: the window mask matters in prefill and in decode
    _compare_with_hf(cfg, MistralForCausalLM(hc), T=9, new=5)


# --- MoE block ------------------------------------------------------------------------------
def test_moe_block_matches_dense_reference_with_shared_expert():
    torch.manual_seed(5)
    cfg = ldf.model_config("tiny-moe")
    m = ldf.Decoder(cfg)
    moe = m.model.layers[0].mlp
    x = torch.randn(3, 5, cfg.d_model)
    got = moe(x)
    xf = x.reshape(-1, cfg.d_model)
    idx, w = ldf.route(xf, moe.gate.weight, cfg.n_experts_per_token, cfg.norm_topk_prob)
    ref = torch.zeros_like(xf)
    for n in range(xf.shape[0]):
        for s in range(cfg.n_experts_per_token):
            e = moe.experts[int(idx[n, s])]
            ref[n] += w[n, s] * ldf.swiglu(xf[n], e.gate_proj.weight, e.up_proj.weight, e.down_proj.weight)
    se = moe.shared_experts
    ref += ldf.swiglu(xf, se.gate_proj.weight, se.up_proj.weight, se.down_proj.weight)
    torch.testing.assert_close(got, ref.reshape_as(x), **TOL)
    assert int(moe.last_counts.sum()) == 15 * cfg.n_experts_per_token
    assert ldf.param_count(cfg, active=True) < ldf.param_count(cfg)


# --- KV cache -------------------------------------------------------------------------------
def test_cache_prefill_chunked_and_decode_match_full_forward():
    torch.manual_seed(6)
    cfg = ldf.model_config("tiny-llama")
    m = ldf.Decoder(cfg)
    ids = torch.randint(0, 256, (3, 11))
    full = m(ids)
    cache = m.new_cache(3, 16)
    ptr = cache._buf.data_ptr()
    with torch.inference_mode():
        a = m(ids[:, :5], cache)      # prefill
        b = m(ids[:, 5:8], cache)     # chunked prefill after a non-empty cache
        c = [m(ids[:, t:t + 1], cache) for t in range(8, 11)]  # decode
    torch.testing.assert_close(torch.cat([a, b] + c, 1), full, **TOL)
    assert cache._buf.data_ptr() == ptr  # written in place, no reallocation
    assert cache.lengths.tolist() == [11, 11, 11]
    per_tok = 2 * cfg.n_layers * cfg.n_kv_heads * cfg.head_dim * 4
    assert cache.nbytes == 3 * 16 * per_tok and cache.bytes_used == 3 * 11 * per_tok
    with pytest.raises(ValueError, match="max_len"):
        m(ids[:, :6], cache)


def test_ragged_batched_decode_matches_each_row_alone():
    """Rows of different lengths (5, 2, 8) decode together with T=1, and a row is refilled."""
    torch.manual_seed(7)
    cfg = ldf.model_config("tiny-moe").replace(sliding_window=4)  # window also exercised
    m = ldf.Decoder(cfg)
    lens = [5, 2, 8]
    prompts = [torch.randint(0, 256, (1, n)) for n in lens]
    cache = m.new_cache(3, 16)
    with torch.inference_mode():
        for r, p in enumerate(prompts):
            cache.reset(r)
            m(p, cache.rows(r))
        assert cache.lengths.tolist() == lens
        nxt = torch.randint(0, 256, (3, 1))
        got = m(nxt, cache)[:, -1]
        for r in range(3):
            alone = m(torch.cat([prompts[r], nxt[r:r + 1]], 1))[:, -1]
            torch.testing.assert_close(got[r:r + 1], alone, **TOL)
        # refill row 1 with a new 3-token request while rows 0 and 2 keep their history
        new = torch.randint(0, 256, (1, 3))
        cache.reset(1)
        m(new, cache.rows(1))
        assert cache.lengths.tolist() == [6, 3, 9]
        nxt2 = torch.randint(0, 256, (3, 1))
        got2 = m(nxt2, cache)[:, -1]
        hist = [torch.cat([prompts[0], nxt[0:1]], 1), new, torch.cat([prompts[2], nxt[2:3]], 1)]
        for r in range(3):
            torch.testing.assert_close(got2[r:r + 1], m(torch.cat([hist[r], nxt2[r:r + 1]], 1))[:, -1], **TOL)


def test_cache_argument_checks():
    cfg = ldf.model_config("tiny-llama")
    with pytest.raises(ValueError, match="max_len"):
        ldf.KVCache(cfg, 2, 0)
    c = ldf.KVCache(cfg, 2, 8)
    with pytest.raises(ValueError, match="row"):
        c.rows(2)
    with pytest.raises(ValueError, match="k_new"):
        c.update(0, torch.zeros(2, 3, 1, 16), torch.zeros(2, 3, 1, 16))
    m = ldf.Decoder(cfg)
    with pytest.raises(ValueError, match="batch"):
        m(torch.zeros(3, 2, dtype=torch.long), c)
    with pytest.raises(ValueError, match="max_new_tokens"):
        m.generate(torch.zeros(1, 2, dtype=torch.long), -1)


def test_bf16_decoder_runs_and_tracks_fp32():
    torch.manual_seed(8)
    cfg = ldf.model_config("tiny-llama")
    m32 = ldf.Decoder(cfg)
    m16 = ldf.Decoder(cfg, dtype=torch.bfloat16)
    m16.load_state_dict({k: v.bfloat16() for k, v in m32.state_dict().items()})
    ids = torch.randint(0, 256, (2, 9))
    out = m16.generate(ids, 3)
    assert out.shape == (2, 12)
    torch.testing.assert_close(m16(ids).float(), m32(ids), atol=5e-2, rtol=5e-2)


# --- the decode projection: every candidate kernel equals F.linear -----------------------------
# (the choice between them: tests/test_linear_autotune.py)
@pytest.mark.parametrize("kernel", ldf.LINEAR_KERNELS)
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("M", [1, 3, 16, 17])          # 17 rows: past SPLIT_MAX_ROWS, plain F.linear
@pytest.mark.parametrize("N", [1, 2, 37, 256])          # N < P and N % P != 0 included
def test_linear_matches_f_linear(kernel, threads, M, N):
    g = torch.Generator().manual_seed(N * 100 + M)
    x = torch.randn(1, M, 40, generator=g)
    w = torch.randn(N, 40, generator=g)
    b = torch.randn(N, generator=g)
    with ldf.torch_threads(threads), ldf.linear_kernel(kernel):
        torch.testing.assert_close(ldf.linear(x, w, b), F.linear(x, w, b))
        torch.testing.assert_close(ldf.linear(x[0], w), F.linear(x[0], w))
        assert torch.get_num_threads() == threads   # "one-thread" restores the count


@pytest.mark.parametrize("kernel", ldf.LINEAR_KERNELS)
def test_linear_falls_back_where_the_kernels_do_not_apply(kernel):
    g = torch.Generator().manual_seed(5)
    x = torch.randn(2, 1, 24, generator=g)
    w = torch.randn(30, 24, generator=g)
    with ldf.torch_threads(2), ldf.linear_kernel(kernel):
        # BF16 (oneDNN already spreads it) and a non-contiguous weight take F.linear
        torch.testing.assert_close(ldf.linear(x.bfloat16(), w.bfloat16()), F.linear(x.bfloat16(), w.bfloat16()))
        wt = torch.randn(24, 30, generator=g).t()
        torch.testing.assert_close(ldf.linear(x, wt), F.linear(x, wt))
        b64 = torch.randn(30, dtype=torch.float64, generator=g)   # F.linear refuses mixed dtypes too
        with pytest.raises(RuntimeError):
            ldf.linear(x, w, b64)
        with pytest.raises(ValueError, match="in_features"):
            ldf.linear(x, torch.randn(30, 25))


@pytest.mark.parametrize("kernel", ldf.LINEAR_KERNELS)
def test_decoder_projections_use_ldf_linear(kernel):
    torch.manual_seed(0)
    m = ldf.Decoder(ldf.model_config("tiny-llama"))
    at, mlp = m.model.layers[0].self_attn, m.model.layers[0].mlp
    assert all(type(lin) is ldf.Linear for lin in (at.q_proj, at.k_proj, at.v_proj, at.o_proj,
                                                    mlp.gate_proj, mlp.up_proj, mlp.down_proj, m.lm_head))
    ids = torch.randint(0, 256, (1, 5))
    with ldf.torch_threads(2), ldf.linear_kernel(kernel):
        ours = m(ids)
        step = m.generate(ids, 4)
    with ldf.torch_threads(1), ldf.linear_kernel("F.linear"):
        plain = m(ids)
        plain_step = m.generate(ids, 4)
    torch.testing.assert_close(ours, plain)
    assert torch.equal(step, plain_step)
