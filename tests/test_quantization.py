"""The checkpoint's own weight format (``quantization_config``), expert parallelism in the memory
fit, and the TP degrees that split a quantisation block or group (llm_dataflow.core.quantization,
.fit, .parallel, .plan).

Each ``quantization_config`` below is one a public source quotes, with that source; the byte
counts are worked by hand from the format's layout.
"""
import json
import math
import pathlib

import pytest

import llm_dataflow as ldf
from llm_dataflow.core.fit import memory_fit
from llm_dataflow.core.formats import QuantSpec
from llm_dataflow.core.parallel import check_parallel, check_quant_shards
from llm_dataflow.core.plan import main, plan_report
from llm_dataflow.core.quantization import checkpoint_precision, quant_spec_from_config

DATA = pathlib.Path(__file__).parent / "data"
GiB = 2**30

#: DeepSeek-V3's block, as sgl-project/sglang's benchmark/deepseek_v3/README.md quotes it
#: ("edit your config.json and remove the quantization_config block").
DEEPSEEK_V3_FP8 = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                   "weight_block_size": [128, 128]}
#: openai/gpt-oss-120b config.json's block, as a public note quotes it
#: (https://huggingface.co/openai/gpt-oss-120b/blob/main/config.json).
GPT_OSS_MXFP4 = {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                            "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"}
#: transformers tests/quantization/fbgemm_fp8/test_fbgemm_fp8.py, test_from_dict.
FBGEMM = {"modules_to_not_convert": ["lm_head.weight"], "quant_method": "fbgemm_fp8"}


# --- one tensor's stored bytes, by format ------------------------------------------------------
def test_fp8_block_bytes():
    q = quant_spec_from_config(DEEPSEEK_V3_FP8)
    assert q.block_shape == (128, 128) and q.weight_dtype == "fp8_e4m3" and q.scale_dtype == "fp32"
    # a [2048, 7168] expert: one byte per element + one FP32 scale per 128 × 128 block
    assert q.tensor_bytes((2048, 7168), 7168) == 2048 * 7168 + 16 * 56 * 4
    # a [576, 7168] kv_a projection: partial edge blocks get a scale too (ceil(576/128) = 5)
    assert q.tensor_bytes((576, 7168), 7168) == 576 * 7168 + 5 * 56 * 4


def test_fp8_fmt_spellings_and_null_lists():
    # MiniMax-M2's config.json writes fmt "float8_e4m3fn"; others write "modules_to_not_convert": null
    q = quant_spec_from_config({"activation_scheme": "dynamic", "fmt": "float8_e4m3fn", "quant_method": "fp8",
                                "weight_block_size": [128, 128], "modules_to_not_convert": ["gate", "lm_head"]})
    assert q.weight_dtype == "fp8_e4m3" and q.keeps("model.layers.1.mlp.gate.weight", "mlp")
    assert quant_spec_from_config({**DEEPSEEK_V3_FP8, "modules_to_not_convert": None}).keep_modules == ()
    with pytest.raises(ValueError, match="quantization_config.fmt='e3m4'"):
        quant_spec_from_config({**DEEPSEEK_V3_FP8, "fmt": "e3m4"})


def test_fp8_per_tensor_and_static_input_scale():
    q = quant_spec_from_config({"quant_method": "fp8", "activation_scheme": "static"})
    assert q.per_tensor and q.tensor_bytes((4096, 4096), 4096) == 4096 * 4096 + 4 + 4


def test_fbgemm_fp8_is_per_channel_and_keeps_lm_head():
    q = quant_spec_from_config(FBGEMM)
    assert q.tensor_bytes((1024, 4096), 4096) == 1024 * 4096 + 1024 * 4
    assert q.keeps("lm_head.weight", "lm_head") and not q.keeps("model.layers.0.mlp.up_proj.weight", "mlp")


def test_gptq_stores_zeros_and_g_idx_even_when_symmetric():
    # Qwen2.5 GPTQ-Int4's block as a public script copies it (bits 4, group 128, sym)
    q = quant_spec_from_config({"bits": 4, "group_size": 128, "quant_method": "gptq", "sym": True})
    out, inp = 1024, 4096
    groups = out * inp // 128
    stored = out * inp // 2 + groups * 2 + groups // 2 + 4 * inp   # qweight, fp16 scales, qzeros, g_idx
    assert q.tensor_bytes((out, inp), inp) == stored
    # vLLM's Marlin kernels for symmetric GPTQ without act-order hold neither qzeros nor g_idx
    assert q.as_loaded().tensor_bytes((out, inp), inp) == out * inp // 2 + groups * 2
    act = quant_spec_from_config({"bits": 4, "group_size": 128, "quant_method": "gptq", "sym": True,
                                  "desc_act": True})
    # with act-order Marlin keeps g_idx and adds its int32 sort indices
    assert act.as_loaded().tensor_bytes((out, inp), inp) == out * inp // 2 + groups * 2 + 8 * inp
    asym = quant_spec_from_config({"bits": 4, "group_size": 128, "quant_method": "gptq", "sym": False})
    assert asym.as_loaded().tensor_bytes((out, inp), inp) == out * inp // 2 + groups * 2 + groups // 2


def test_gptq_per_channel_and_bad_bits():
    q = quant_spec_from_config({"bits": 8, "group_size": -1, "quant_method": "gptq"})
    assert q.group_size is None and q.weight_dtype == "int8"
    with pytest.raises(ValueError, match=r"quantization_config.bits=3 .*allowed: 4, 8"):
        quant_spec_from_config({"bits": 3, "group_size": 128, "quant_method": "gptq"})


def test_gptq_per_module_overrides_are_refused():
    with pytest.raises(ValueError, match="quantization_config.dynamic="):
        quant_spec_from_config({"bits": 4, "group_size": 128, "quant_method": "gptq",
                                "dynamic": {"-:.*mlp.gate": {}}})


def test_awq_zero_points():
    q = quant_spec_from_config({"bits": 4, "group_size": 128, "quant_method": "awq", "version": "gemm",
                                "zero_point": True})
    groups = 1024 * 4096 // 128
    assert q.tensor_bytes((1024, 4096), 4096) == 1024 * 4096 // 2 + groups * 2 + groups // 2


def test_mxfp4_quantises_experts_only():
    q = quant_spec_from_config(GPT_OSS_MXFP4)
    assert q.tensor_bytes((2880, 2880), 2880) == 2880 * 2880 // 2 + 2880 * 2880 // 32   # 4.25 bits
    assert q.keeps("model.layers.5.self_attn.q_proj.weight", "attn")
    assert q.keeps("model.layers.5.mlp.gate.weight", "router")          # gpt-oss names it mlp.router
    assert q.keeps("model.embed_tokens.weight", "embedding")
    assert not q.keeps("model.layers.5.mlp.experts.3.down_proj.weight", "expert")


def test_bitsandbytes_4bit_double_quant_and_8bit():
    q = quant_spec_from_config({"load_in_4bit": True, "bnb_4bit_quant_type": "nf4",
                                "bnb_4bit_use_double_quant": True})
    n = 4096 * 4096
    blocks = n // 64
    assert q.tensor_bytes((4096, 4096), 4096) == n // 2 + blocks + 4 * math.ceil(blocks / 256) + 64 + 1024
    q8 = quant_spec_from_config({"quant_method": "bitsandbytes", "load_in_8bit": True,
                                 "llm_int8_skip_modules": ["lm_head"]})
    assert q8.tensor_bytes((1024, 4096), 4096) == 1024 * 4096 + 1024 * 4


def test_compressed_tensors_formats_and_ignore():
    def ct(weights, ignore=("lm_head",), act=None):
        g = {"targets": ["Linear"], "weights": weights}
        if act:
            g["input_activations"] = act
        return {"quant_method": "compressed-tensors", "format": "x", "ignore": list(ignore),
                "config_groups": {"group_0": g}}
    ch = quant_spec_from_config(ct({"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True}),
                                "bfloat16")
    assert ch.tensor_bytes((1024, 4096), 4096) == 1024 * 4096 + 1024 * 2
    st = quant_spec_from_config(ct({"num_bits": 8, "type": "float", "strategy": "tensor"},
                                   act={"num_bits": 8, "type": "float", "dynamic": False}))
    assert st.tensor_bytes((1024, 4096), 4096) == 1024 * 4096 + 4 + 4
    w4 = quant_spec_from_config(ct({"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128,
                                    "symmetric": True}), "float16")
    assert w4.tensor_bytes((1024, 4096), 4096) == 1024 * 4096 // 2 + 1024 * 32 * 2 + 16
    nv = quant_spec_from_config(ct({"num_bits": 4, "type": "float", "strategy": "tensor_group",
                                    "group_size": 16}))
    assert nv.tensor_bytes((1024, 4096), 4096) == 1024 * 4096 // 2 + 1024 * 256 + 4
    rx = quant_spec_from_config(ct({"num_bits": 8, "type": "float", "strategy": "channel"},
                                   ignore=("lm_head", "re:.*mlp.gate$")))
    assert rx.keeps("model.layers.2.mlp.gate.weight", "mlp") and not rx.keeps("model.layers.2.mlp.gate_proj.weight",
                                                                              "mlp")
    with pytest.raises(ValueError, match="config_groups.*differently"):
        quant_spec_from_config({"quant_method": "compressed-tensors", "config_groups": {
            "a": {"weights": {"num_bits": 8, "type": "float", "strategy": "channel"}},
            "b": {"weights": {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128}}}})


def test_unknown_method_is_refused_by_name():
    with pytest.raises(ValueError, match=r"quant_method='hqq'.*allowed: fp8, fbgemm_fp8"):
        quant_spec_from_config({"quant_method": "hqq"})


def test_module_patterns():
    q = QuantSpec("fp8_e4m3", block_shape=(128, 128), keep_modules=("model.layers.0.mlp", "re:.*k_proj$"))
    assert q.keeps("model.layers.0.mlp.down_proj.weight", "mlp")
    assert not q.keeps("model.layers.10.mlp.down_proj.weight", "mlp")
    assert q.keeps("model.layers.7.self_attn.k_proj.weight", "attn")
    # Mixtral's own module names reach the book's Qwen/DeepSeek-style expert names
    with pytest.raises(ValueError, match="keep_modules=.*not a regular expression"):
        QuantSpec("fp8_e4m3", keep_modules=("re:(",))
    mix = QuantSpec("int4", 128, keep_modules=("block_sparse_moe.experts.0.w2",))
    assert mix.keeps("model.layers.3.mlp.experts.0.down_proj.weight", "expert")
    assert not mix.keeps("model.layers.3.mlp.experts.1.down_proj.weight", "expert")


# --- the model config carries the format; plan uses it ----------------------------------------
def _llama8b(quant):
    cfg = json.loads((DATA / "Llama-3.1-8B-Instruct" / "config.json").read_text())
    if quant is not None:
        cfg["quantization_config"] = quant
    return ldf.ModelConfig.from_hf(cfg, name="Llama-3.1-8B-Instruct")


def test_from_hf_reads_quantization_config():
    plain, fp8 = _llama8b(None), _llama8b(DEEPSEEK_V3_FP8)
    assert plain.quantization is None and fp8.quantization == quant_spec_from_config(DEEPSEEK_V3_FP8)
    bf16 = ldf.weight_bytes(plain, "bf16")
    stored = ldf.weight_bytes(fp8, checkpoint_precision(fp8))
    # embeddings and lm_head stay BF16 (2 × 128,256 × 4,096 × 2 B); linears 1 B + block scales
    assert 0.5 * bf16 < stored < 0.6 * bf16
    assert checkpoint_precision(plain).quant is None


def test_plan_uses_the_checkpoint_and_says_when_overridden(tmp_path, capsys):
    d = tmp_path / "Llama-3.1-8B-Instruct-FP8"
    d.mkdir()
    cfg = json.loads((DATA / "Llama-3.1-8B-Instruct" / "config.json").read_text())
    cfg["quantization_config"] = DEEPSEEK_V3_FP8
    (d / "config.json").write_text(json.dumps(cfg))
    assert main(["plan", str(d), "--hardware", "H100-SXM", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["weights_source"] == "checkpoint" and "128×128 blocks" in r["checkpoint_format"]
    assert main(["plan", str(d), "--hardware", "H100-SXM", "--weights", "bf16"]) == 0
    out = capsys.readouterr().out
    assert "--weights overrides the checkpoint's format" in out and "128×128 blocks" in out
    assert main(["plan", str(d), "--hardware", "H100-SXM", "--weights", "bf16", "--json"]) == 0
    r2 = json.loads(capsys.readouterr().out)
    assert r2["weights_source"] == "override" and r2["weight_bytes"] > 1.7 * r["weight_bytes"]


# --- expert parallelism -----------------------------------------------------------------------
def test_ep_splits_experts_in_the_memory_fit():
    one = memory_fit("DeepSeek-V3", "H200", "fp8", tp=1)
    ep8 = memory_fit("DeepSeek-V3", "H200", "fp8", tp=1, ep=8)
    assert one.weights / 1e9 == pytest.approx(673.15, abs=0.01)
    # 58 MoE layers × 256 experts / 8 per GPU, plus everything else whole: about 101 GB
    assert ep8.weights / 1e9 == pytest.approx(100.84, abs=0.01) and "ep=8: 32 whole experts" in ep8.reason
    tp8 = memory_fit("DeepSeek-V3", "H200", "fp8", tp=8)
    assert tp8.weights < ep8.weights     # TP also slices attention and the dense layers


def test_ep_must_be_a_multiple_of_tp_and_divide_the_experts():
    with pytest.raises(ValueError, match=r"ep=4 is not a multiple of tp=8.*ep = tp × dp"):
        check_parallel("DeepSeek-V3", tp=8, ep=4)
    with pytest.raises(ValueError, match="ep=3 does not divide n_routed_experts=256"):
        check_parallel("DeepSeek-V3", tp=1, ep=3)
    with pytest.raises(ValueError, match="needs an MoE"):
        memory_fit("Llama-3-8B", "H100-SXM", tp=1, ep=2)


def test_tp_that_splits_fp8_blocks_is_refused_with_vllms_rule():
    # Qwen3-30B-A3B's shapes (preset from its config.json) with 128 × 128 FP8 blocks, the format
    # Qwen/Qwen3-30B-A3B-FP8 publishes: 768 / 4 = 192-wide expert shards
    q = ldf.model_config("Qwen3-30B-A3B").replace(quantization=quant_spec_from_config(DEEPSEEK_V3_FP8))
    with pytest.raises(ValueError, match=r"tp=4 splits the expert gate/up \(moe_d_ff=768\) into 192-wide shards.*"
                                         r"128×128 fp8_e4m3 block.*vLLM's rule \(fp8.py"):
        memory_fit(q, "H100-SXM", checkpoint_precision(q), tp=4)
    assert memory_fit(q, "H100-SXM", checkpoint_precision(q), tp=2).weights > 0          # 384 = 3 × 128
    ok = memory_fit(q, "H100-SXM", checkpoint_precision(q), tp=4, ep=4)               # experts whole
    assert "tp=4 shards hold whole fp8_e4m3 blocks" in ok.reason
    with pytest.raises(ValueError, match="tp=4 splits the expert gate/up"):
        plan_report(q, "H100-SXM", tp=4)
    check_quant_shards(q, None, tp=4)         # BF16: no blocks to split


def test_group_split_is_refused():
    # 4-bit groups along the input: Mixtral's expert down projection 14336 / 8 = 1792 = 14 × 128 passes
    # groups of 128, not groups of 512 (the o projection's 4096 / 8 = 512 does)
    cfg = ldf.model_config("Mixtral-8x7B")
    check_quant_shards(cfg, QuantSpec("int4", 128, zero_point=True), tp=8)
    with pytest.raises(ValueError, match=r"expert down \(moe_d_ff=14336\) into 1792-wide.*group of 512.*gptq.py"):
        check_quant_shards(cfg, QuantSpec("int4", 512), tp=8)
    check_quant_shards(cfg, QuantSpec("int4", 512), tp=8, ep=8)      # experts whole under EP


def test_plan_cli_ep(capsys):
    assert main(["plan", "DeepSeek-V3", "--hardware", "H200", "--ep", "8", "--weights", "fp8", "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["ep"] == 8 and r["dp"] == 8 and r["weight_bytes_per_gpu"] / 1e9 == pytest.approx(100.84, abs=0.01)
    # all-to-all: k = 8 slots × 7/8 remote × D = 7168 × 2 B, dispatch + combine, 58 MoE layers
    assert r["ep_bytes_per_token"] == pytest.approx(2 * 8 * 7 / 8 * 7168 * 2 * 58)
    assert main(["plan", "DeepSeek-V3", "--hardware", "H200", "--tp", "8", "--ep", "4"]) == 2
    assert "argument --ep: expert parallel degree ep=4 is not a multiple of tp=8" in capsys.readouterr().err


# --- the engines' logged weight memory ---------------------------------------------------------
# The three checkpoints' own config.json files are on Hugging Face only, out of this book's reach;
# each is rebuilt here from primary sources, named beside it, and the plan of the logged deployment
# must land within 5 % of the weight memory vLLM logged per GPU (vLLM <= 0.6 prints GiB as "GB").
def _weights_gib(cfg_dict, gpu, tp):
    cfg = ldf.ModelConfig.from_hf(cfg_dict)
    return memory_fit(cfg, gpu, checkpoint_precision(cfg), tp=tp).weights / GiB


def _llama31_405b_fp8(n_kv_heads):
    """meta-llama/Llama-3.1-405B-Instruct-FP8 as its makers describe it.

    Shapes: meta-llama/llama-models ``models/sku_list.py`` (364ed4ec), the FP8 instruct entry's
    ``arch_args`` (dim 16384, 126 layers, 128 heads, vocab 128,256, ffn_dim_multiplier 1.2,
    multiple_of 4096), the FFN width by ``FeedForward`` in ``models/llama3/model.py``, untied output.
    Format: Meta's ``fp8_mixed`` choice (llama-stack d73fed5c ``loader.py``: only ``feed_forward``
    w1/w2/w3 in FP8, first and last layers skipped), as Hugging Face's later conversion script for
    the base model writes it (huggingface/transformers PR #34884, ``quantize_fp8_llama.py``:
    ``FbgemmFp8Config`` with layers 0 and 125, ``lm_head`` and every ``self_attn`` kept in BF16,
    as module prefixes; the hub's config.json lists the same modules per projection, which vLLM
    matches by exact name)."""
    dim, multiple_of = 16384, 4096
    d_ff = int(1.2 * int(2 * 4 * dim / 3))
    d_ff = multiple_of * ((d_ff + multiple_of - 1) // multiple_of)           # 53,248
    keep = ["model.layers.0", "model.layers.125", "lm_head"] + [f"model.layers.{i}.self_attn" for i in range(1, 125)]
    return {"model_type": "llama", "hidden_size": dim, "num_hidden_layers": 126, "num_attention_heads": 128,
            "num_key_value_heads": n_kv_heads, "intermediate_size": d_ff, "vocab_size": 128256,
            "tie_word_embeddings": False,
            "quantization_config": {"quant_method": "fbgemm_fp8", "activation_scale_ub": 1200.0,
                                    "modules_to_not_convert": keep}}


def test_logged_weight_memory_llama31_405b_fp8_tp8():
    # vllm-project/vllm issue #6746 (2024-07-24, vLLM 0.5.3, 8 x H100): "Loading model weights took
    # 57.7520 GB" on every rank.  The checkpoint then held 16 KV heads (duplicated, as Meta's MP16
    # files do); Hugging Face re-uploaded it "with the correct number of kv heads" (8) later
    # (vllm-project/vllm issue #6689, a maintainer, 2024-08-16) — vLLM's loader checks shapes, so
    # the July files held 16.
    july = _weights_gib(_llama31_405b_fp8(16), "H100-SXM", 8)
    assert july == pytest.approx(57.7520, rel=0.05) and round(july, 2) == 57.71        # -0.07 %
    assert round(_weights_gib(_llama31_405b_fp8(8), "H100-SXM", 8), 2) == 56.73      # today's files
    bf16 = ldf.ModelConfig.from_hf({k: v for k, v in _llama31_405b_fp8(8).items() if k != "quantization_config"})
    assert round(memory_fit(bf16, "H100-SXM", checkpoint_precision(bf16), tp=8).weights / GiB, 1) == 94.5  # as BF16


#: Qwen's AutoGPTQ recipe (QwenLM/Qwen2.5 docs/source/quantization/gptq.md) at 4 bits.
QWEN_GPTQ_RECIPE = {"bits": 4, "group_size": 128, "damp_percent": 0.01, "desc_act": False, "static_groups": False,
                    "sym": True, "true_sequential": True, "model_name_or_path": None,
                    "model_file_base_name": "model", "quant_method": "gptq"}


def _qwen25_72b_gptq_int4(d_ff=29696):
    base = json.loads((DATA / "Qwen2.5-72B-Instruct" / "config.json").read_text(encoding="utf-8"))
    return dict(base, intermediate_size=d_ff, quantization_config=QWEN_GPTQ_RECIPE)


def _mixtral_gptq_gib():
    """TheBloke/Mixtral-8x7B-v0.1-GPTQ's weights per GPU at TP 2 on an H100 (GiB)."""
    qc = json.loads((DATA / "Mixtral-8x7B-v0.1-GPTQ" / "quantize_config.json").read_bytes())
    cfg = ldf.model_config("Mixtral-8x7B").replace(quantization=quant_spec_from_config(dict(qc, quant_method="gptq")))
    return memory_fit(cfg, "H100-SXM", checkpoint_precision(cfg), tp=2).weights / GiB


def test_logged_weight_memory_qwen25_72b_gptq_int4_tp1():
    """Qwen/Qwen2.5-72B-Instruct-GPTQ-Int4 on one H200: vLLM held 38.53 GiB (the log quoted in
    issue 27, which asked for this check; its thread is not in this book's sources).  On Hopper
    vLLM's Machete kernel keeps GPTQ's zero points and ``g_idx``, 0.28 GiB that Marlin (Ampere,
    Ada) frees: on an A100 the plan is 38.48.

    Shapes: ``tests/data/Qwen2.5-72B-Instruct/config.json``, the base model's config.json as
    transformers 4.44.2 printed it (vllm-project/vllm issue #8691).  Qwen's GPTQ checkpoints pad the
    FFN with zeros from 29,568 to 29,696 so that 128-wide groups split over 2, 4 or 8 GPUs
    (QwenLM/Qwen2.5 ``docs/source/quantization/gptq.md``, 4da996c: "modify the intermediate_size in
    config.json to 29696"; a Qwen maintainer in QwenLM/Qwen2 issue #578: "The GPTQ models released by
    us is made by padding the parameters with zeros").  Format: the same page's AutoGPTQ recipe
    (group_size 128, desc_act False, sym True) at 4 bits; lm_head and embeddings stay FP16."""
    padded = _weights_gib(_qwen25_72b_gptq_int4(), "H200", 1)
    assert padded == pytest.approx(38.53, rel=0.05) and round(padded, 2) == 38.76          # +0.6 %
    assert round(_weights_gib(_qwen25_72b_gptq_int4(29568), "H200", 1), 2) == 38.64   # unpadded: 0.12 GiB less
    assert round(_weights_gib(_qwen25_72b_gptq_int4(), "A100-80GB-SXM", 1), 2) == 38.48   # Marlin frees zp, g_idx
    base = {k: v for k, v in _qwen25_72b_gptq_int4(29568).items() if k != "quantization_config"}
    assert round(_weights_gib(base, "H200", 1), 1) == 135.4   # the same shapes read as BF16


def test_logged_weight_memory_mixtral_gptq_tp2():
    """TheBloke/Mixtral-8x7B-v0.1-GPTQ (main) at TP 2: vllm-project/vllm PR #23066 (vLLM 0.10.1 dev,
    gptq_marlin, H100 host): "Model loading took 11.0802 GiB" on each of TP0, TP1.

    Format: the checkpoint's own ``quantize_config.json`` (tests/data, byte for byte: 4 bits, one
    group per channel, desc_act true, sym; the values its config.json's ``quantization_config``
    carries).  Shapes: Mixtral-8x7B-v0.1's config.json (the preset), which the checkpoint keeps;
    the router and lm_head stay FP16 (``modules_in_block_to_quantize`` in its config.json:
    attention and experts only).  On Hopper the plan keeps every quantised weight's int32
    ``g_idx`` (Machete does for attention); vLLM's fused-MoE method frees the experts' without
    act-order, 32 layers × 8 experts × (4,096 + 4,096 + 7,168) × 4 B = 0.015 GiB this count holds
    and vLLM does not (11.066 without it, -0.13 %)."""
    assert len((DATA / "Mixtral-8x7B-v0.1-GPTQ" / "quantize_config.json").read_bytes()) == 185   # as listed
    got = _mixtral_gptq_gib()
    assert got == pytest.approx(11.0802, rel=0.05) and round(got, 3) == 11.081             # +0.01 %
    assert round(got - 32 * 8 * (4096 + 4096 + 7168) * 4 / GiB, 3) == 11.066      # without the experts' g_idx


def test_readme_quotes_the_logged_checkpoints():
    readme = " ".join((pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8").split())
    got = (_weights_gib(_llama31_405b_fp8(16), "H100-SXM", 8), _weights_gib(_qwen25_72b_gptq_int4(), "H200", 1),
           _mixtral_gptq_gib())
    assert (f"TP 8, {got[0]:.2f} GiB planned for 57.75 logged; Qwen2.5-72B-Instruct-GPTQ-Int4 on one H200, "
            f"{got[1]:.2f} for 38.53; Mixtral-8x7B-v0.1-GPTQ at TP 2, {got[2]:.2f} for 11.08") in readme


def test_gptq_act_order_is_moot_per_channel():
    # one group per row: vLLM turns desc_act off (GPTQMarlinConfig, gptq_marlin.py) and holds no g_idx
    per_channel = quant_spec_from_config({"quant_method": "gptq", "bits": 4, "group_size": -1, "desc_act": True})
    grouped = quant_spec_from_config({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": True})
    assert "drop_g_idx" in per_channel.engine_changes and "add_g_idx_sort" in grouped.engine_changes
    assert per_channel.as_loaded().g_idx == 0 and grouped.as_loaded().g_idx == 2


def test_fp8_llama_70b_fits_an_h200():
    # Llama-3.3-70B's shapes are Llama-3.1-70B's (preset from its config.json); FP8 per channel with
    # lm_head kept in BF16 — the layout of the public FP8 checkpoints (fbgemm_fp8 / compressed-tensors
    # channel).  vLLM loads such a checkpoint in 67.7 GiB (issue 27's log).
    cfg = ldf.model_config("Llama-3.1-70B").replace(quantization=quant_spec_from_config(FBGEMM))
    r = plan_report(cfg, "H200", context=8192)
    assert r["weights_source"] == "checkpoint" and r["fits"]
    assert r["weight_bytes_per_gpu"] / GiB == pytest.approx(67.7, rel=0.01)


def test_readme_examples_are_what_plan_prints(capsys):
    import re
    import shlex
    readme = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    for cmd in ("plan Qwen3-30B-A3B --hardware H100-SXM --tp 4 --weights fp8",
                "plan DeepSeek-V3 --hardware H200 --ep 8 --weights fp8 --context 4096 --batch 16"):
        block = re.search(re.escape(cmd) + r"\n```\n\n(?:prints, among its rows,\n\n)?```text\n(.*?)\n```", readme, re.S)
        assert block, cmd
        rc = main(shlex.split(cmd))
        got = capsys.readouterr()
        lines = (got.out + got.err).splitlines()
        assert rc in (0, 2) and all(line in lines for line in block.group(1).splitlines()), cmd


def test_ep_decode_bound_reads_a_share_of_the_experts_hit():
    # one GPU of DeepSeek-V3 in FP8 at tp 1, ep 8 (8 attention groups of batch 1): the non-expert
    # weights whole, 1/8 of the experts the 8 tokens hit (uniform routing), its own KV
    from llm_dataflow.core.accounting import expected_experts_hit, kv_bytes, tensor_bytes, weight_bytes_read
    from llm_dataflow.core.config import tensor_specs
    from llm_dataflow.core.kv import kv_token_bytes
    cfg = ldf.model_config("DeepSeek-V3")
    plan = ldf.precision_plan("fp8")
    r = plan_report(cfg, "H200", ep=8, weights="fp8", context=1024)
    one = sum(tensor_bytes(t, plan.weights, plan.quant) for t in tensor_specs(cfg) if t.role == "expert" and t.expert == 0)
    other = weight_bytes_read(cfg, plan, 1) - one * 8                   # batch 1 hits exactly k = 8 experts
    kv = kv_bytes(cfg, 1024, 1, plan) + kv_token_bytes(cfg, plan.kv_dtype)
    gpu = other + one * expected_experts_hit(256, 8, 8) / 8 + kv
    hw = ldf.hardware("H200")
    assert r["binds"] == "memory" and r["decode_step_s"] == pytest.approx(gpu / hw.hbm_bandwidth, rel=1e-12)
    assert r["decode_tokens_per_s"] == pytest.approx(8 / r["decode_step_s"])
