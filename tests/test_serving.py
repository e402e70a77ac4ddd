"""The serving engine's memory model (core/engines.py, core/fit.py): its conventions, its terms, its KV
layout per layer group, its start checks, and the issue-42 examples with their right numbers.

The engines' own logs are checked one by one in tests/test_engine_logs.py.
"""
import contextlib
import io
import json
import math
import pathlib

import pytest

import llm_dataflow as ldf
from llm_dataflow.core import engines
from llm_dataflow.core.plan import main

GiB = 2**30
DATA = pathlib.Path(__file__).resolve().parent / "data"
GPT_OSS_120B = DATA / "gpt-oss-120b"


def _main(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(["plan", *argv])
    return rc, out.getvalue(), err.getvalue()


def _json(*argv):
    rc, out, err = _main(*argv, "--json")
    assert rc == 0, err
    return json.loads(out)


# --- the engine and its version ---------------------------------------------------------------------
def test_engine_spec_and_what_each_version_does():
    assert ldf.engine_spec() == ldf.EngineSpec("vllm", (0, 21))
    assert ldf.engine_spec("vllm", "v0.7.3").vllm_v0 and not ldf.engine_spec("vllm", "0.8.5").vllm_v0
    assert not ldf.engine_spec("vllm", "0.8").hybrid_kv and ldf.engine_spec("vllm", "0.9").hybrid_kv
    assert ldf.engine_spec("vllm", "0.21").graphs_in_budget and not ldf.engine_spec("vllm", "0.20.2").graphs_in_budget
    assert ldf.engine_spec("sglang").label == "SGLang 0.5" and ldf.engine_spec("vllm", "0.10.1.post1").version == (0, 10, 1)
    assert any("hybrid KV-cache manager" in r for r in ldf.engine_spec("vllm", "0.10").rules())
    for bad, field in [(("trt",), "engine"), (("vllm", "latest"), "engine_version"), ((3,), "engine")]:
        with pytest.raises(ValueError, match=field):
            ldf.engine_spec(*bad)


def test_non_torch_from_the_logs_of_each_era():
    """V1 (vLLM 0.19.0 on H100s, llm-d-planner): 0.27 / 2.08 / 2.17 GiB at TP 1 / 2 / 4, the TP 4 figure
    beyond; V0 (0.6.4-0.7.3): 1.79 x (1 + log2 tp), i.e. 1.79, 3.58 and 7.16 at TP 1, 2, 8 as logged.
    The former default, 1.79 x tp, charged 14.32 GiB at TP 8."""
    est = lambda tp, hw="H100-SXM", v="0.21": ldf.non_torch_estimate(tp, hw, ldf.engine_spec("vllm", v))  # noqa: E731
    assert [round(est(tp).bytes / GiB, 2) for tp in (1, 2, 4, 8)] == [0.27, 2.08, 2.17, 2.17]
    assert "beyond the logs" in est(8).source and "logged" in est(2).source and "llm-d" in est(2).source
    assert round(est(3).bytes / GiB, 3) == round(2.08 + (2.17 - 2.08) * (math.log2(3) - 1), 3)   # interpolated
    assert [round(est(tp, v="0.7.3").bytes / GiB, 4) for tp in (1, 2, 4, 8)] == [1.79, 3.58, 5.37, 7.16]
    for name in ("L4", "L40S", "A10", "RTX-4090", "RTX-5090"):
        assert ldf.hardware(name).nvlink == "none" and est(8, name).bytes == ldf.NON_TORCH_BYTES_PCIE == 0.36 * GiB
    spec = "memory_gb=80,bandwidth_gbs=3350,bf16_tflops=989"
    assert est(2, ldf.custom_hardware(spec)).bytes == 2.08 * GiB          # unspecified: counted as NVLink
    assert est(2, ldf.custom_hardware(spec + ",nvlink=none")).bytes == 0.36 * GiB
    assert ldf.non_torch_bytes(4, "H100-SXM") == 2.17 * GiB
    with pytest.raises(ValueError, match="tp"):
        ldf.non_torch_estimate(0, "H200")
    with pytest.raises(ValueError, match="nvlink='PCIe-Gen4-x16' is not allowed; allowed: none, NVLink3"):
        ldf.custom_hardware(spec + ",nvlink=PCIe-Gen4-x16")
    # every logged figure carries its source
    assert all(r[5] and r[2] >= 1 and r[3] > 0 for r in ldf.NON_TORCH_LOGS)


def test_vllm_budget_and_terms():
    e = ldf.memory_fit("Llama-3-8B", "H100-SXM", engine_version="0.6.5", context=8192, batch=4)
    assert e.total == 79.22 * GiB and e.budget == 0.9 * e.total and e.reserve == e.total - e.budget
    assert e.non_torch == 1.79 * GiB and e.cuda_graphs == engines.VLLM_CUDA_GRAPH_BYTES and not e.graphs_in_budget
    assert e.kv_bytes == e.budget - e.weights - e.activations - e.non_torch
    terms = {t["name"]: t for t in e.terms()}
    assert list(terms) == ["weights", "activations", "non_torch", "cuda_graphs", "kv_asked", "kv_unmet", "kv_free",
                           "reserve"]
    assert terms["non_torch"]["estimate"] and terms["cuda_graphs"]["estimate"] and not terms["weights"]["estimate"]
    assert math.isclose(sum(t["bytes"] for t in terms.values()), e.total)   # graphs out of the reserve
    assert terms["reserve"]["bytes"] == e.reserve - e.cuda_graphs and terms["kv_unmet"]["bytes"] == 0
    new = ldf.memory_fit("Llama-3-8B", "H100-SXM", context=8192, batch=4)         # 0.21: graphs in the budget
    assert new.graphs_in_budget and new.kv_bytes == e.budget - new.weights - new.activations - new.non_torch - new.cuda_graphs
    assert math.isclose(sum(t["bytes"] for t in new.terms()), new.total)
    eager = ldf.memory_fit("Llama-3-8B", "H100-SXM", context=8192, batch=4, enforce_eager=True)
    assert eager.cuda_graphs == 0 and eager.kv_bytes == new.kv_bytes + new.cuda_graphs
    given = ldf.memory_fit("Llama-3-8B", "H100-SXM", non_torch=0.5 * GiB, cuda_graph_bytes=0.2 * GiB)
    assert not given.non_torch_estimated and given.cuda_graphs == 0.2 * GiB and given.cuda_graphs_source == "given"
    # more asked than the room holds: the terms exceed the total by exactly what does not fit
    big = ldf.memory_fit("Llama-3-8B", "H100-SXM", context=8192, batch=64)
    unmet = {t["name"]: t["bytes"] for t in big.terms()}["kv_unmet"]
    assert not big.fits and unmet > 0 and math.isclose(sum(t["bytes"] for t in big.terms()), big.total + unmet)
    over = ldf.memory_fit("Llama-2-70B", "L4")
    assert not over.fits and over.kv_tokens == 0 and "does not fit" in over.reason
    assert math.isclose(sum(t["bytes"] for t in over.terms()), over.total + over.over_budget)
    for kw, field in [({"gpu_memory_utilization": 1.5}, "gpu_memory_utilization"),
                      ({"max_num_batched_tokens": 0}, "max_num_batched_tokens"), ({"non_torch": -1}, "non_torch"),
                      ({"enforce_eager": 1}, "enforce_eager"), ({"engine": "sglang"}, "mem_fraction_static"),
                      ({"cuda_graph_bytes": float("inf")}, "cuda_graph_bytes")]:
        with pytest.raises(ValueError, match=field):
            ldf.memory_fit("Llama-3-8B", "H100-SXM", **kw)


def test_sglang_pool_as_sglang_computes_it():
    """``rest = free after loading − free before loading × (1 − mem_fraction_static)``: the pool is the
    fraction of what was free before the weights (the total less the CUDA context and, at TP > 1,
    torch.distributed's buffers: sglang PR #11716) less the weights; activations and graphs live in
    the rest."""
    s = ldf.memory_fit("Llama-3-8B", "H100-SXM", mem_fraction_static=0.88)
    assert s.engine.name == "sglang" and s.activations == 0 and s.cuda_graphs == 0
    assert s.non_torch == 0.51 * GiB and s.budget == 0.88 * (79.22 - 0.51) * GiB
    assert s.kv_bytes == s.budget - s.weights and "SGLang" in s.reason
    assert math.isclose(sum(t["bytes"] for t in s.terms()), s.total)
    t4 = ldf.memory_fit("Llama-3-8B", "H100-SXM", tp=4, engine="sglang", mem_fraction_static=0.9)
    assert t4.non_torch == (0.51 + 2.01) * GiB
    # the layout: one token in every layer; #tokens = the pool over the per-token bytes
    assert s.kv_tokens == int(s.kv_bytes // s.kv_per_token)


def test_kv_layout_per_layer_group():
    """vLLM's hybrid manager (kv_cache_utils.py, kv_cache_interface.py at 001cabc1): groups of g
    layers, the room in blocks of ``page × g``, each group's blocks per sequence by its rule."""
    full = [("full_attention", 18, 1024, None)]
    swa = [("sliding_attention", 18, 1024, 128)]
    room = 1000 * 16 * 1024 * 18                               # 1,000 blocks of 18 layers
    lay = engines.kv_layout(full + swa, room, 131072)            # gpt-oss: 18 sliding + 18 full layers
    assert (lay.units, lay.tokens) == (1000, 1000 // 2 * 16)
    assert lay.units_per_sequence == 131072 // 16 + (-(-(127 + 8192) // 16) + 1)   # 8,192 + 521 blocks
    assert lay.max_concurrency == 1000 / (8192 + 521)
    # one kind: one group of every layer; Mistral's 4,096-token window at 32,768 tokens: 12,288 tokens + 1 block
    m = engines.kv_layout([("sliding_attention", 32, 1024, 4096)], 1000 * 16 * 1024 * 32, 32768)
    assert (m.units, m.tokens, m.units_per_sequence) == (1000, 16000, 769)
    # Gemma 3's 5:1 pattern: groups of the fewest (10 full layers), the 52 sliding ones padded to 6 groups
    g3 = engines.kv_layout([("sliding_attention", 52, 1024, 1024), ("full_attention", 10, 1024, None)],
                           700 * 16 * 1024 * 10, 8192)
    assert g3.units == 700 and g3.tokens == 700 // 7 * 16 and "7 groups of 10 layers" in g3.rule
    # without the hybrid manager (V0; V1 0.8) a mixed model holds the whole context in every layer
    v0 = engines.kv_layout(full + swa, room, 131072, ldf.engine_spec("vllm", "0.7.3"))
    assert (v0.units, v0.tokens, v0.units_per_sequence) == (room // (16 * 1024 * 36), 500 * 16, 131072 // 16)
    assert v0.max_concurrency == (room // (16 * 1024 * 36)) / (131072 // 16)
    # SGLang's two pools: swa = 0.8 x full, swa x 18 + full x 18 = tokens x 36
    sg = engines.kv_layout(full + swa, 1_000_000 * 1024 * 36, 8192, ldf.engine_spec("sglang"))
    full_tokens = int(1_000_000 * 36 / (0.8 * 18 + 18))
    assert sg.tokens == full_tokens and sg.max_concurrency == pytest.approx(full_tokens / 8192)
    with pytest.raises(ValueError, match="room"):
        engines.kv_layout(full, -1, 0)
    with pytest.raises(ValueError, match="kinds"):
        engines.kv_layout([("linear_attention", 3, 0, None)], 1e9, 0)


# --- the issue's examples, with their right numbers -----------------------------------------------
def test_mistral_7b_window_in_the_fit():
    """Issue 42: "max concurrency 13.80 at 32,768 tokens" charged every layer the whole context; vLLM
    holds ``sliding_window − 1 + max_num_batched_tokens`` tokens per sliding layer (12,288 + 1
    block): about 37 sequences (by the window's bytes alone about 110)."""
    f = ldf.memory_fit("Mistral-7B-v0.1", "H100-SXM", batch=8, context=32768)
    assert f.layout.units_per_sequence == 769 and 36.5 < f.max_concurrency < 37.5 and f.fits
    assert 105 < f.kv_bytes / (4096 * f.kv_per_token) < 115          # by the window's bytes
    assert f.kv == 8 * 4096 * 131072                                  # the content: 4.29 GB
    r = _json("Mistral-7B-v0.1", "--hardware", "H100-SXM", "--context", "32768", "--batch", "8")
    assert r["max_concurrency"] == f.max_concurrency and r["kv_groups"][0]["tokens_per_sequence"] == 769 * 16


def test_gpt_oss_120b_window_groups_and_loaded_weights():
    """gpt-oss-120b at 131,072 tokens on one H200: on the room the old plan found, vLLM's hybrid
    manager holds 13.3 sequences where the plan said 7.09; with the weights as vLLM's Triton backend
    holds them (64.18 GiB, not 60.77) 12.7 (vLLM 0.20) and 12.4 (0.21, graphs in the budget)."""
    cfg = ldf.ModelConfig.from_hf(GPT_OSS_120B)
    kinds = [("sliding_attention", 18, 1024, 128), ("full_attention", 18, 1024, None)]   # 8 KV heads x 64 x 2 B
    old_room = 7.09 * 131072 * cfg.n_layers * 1024                   # the old plan's room: 7.09 sequences
    assert round(engines.kv_layout(kinds, old_room, 131072).max_concurrency, 1) == 13.3
    f20 = ldf.memory_fit(cfg, "H200", ldf.checkpoint_precision(cfg), context=131072, engine_version="0.20")
    assert round(f20.weights / GiB, 2) == 64.18 and round(f20.max_concurrency, 1) == 12.7
    assert ldf.memory_fit(cfg, "H200", ldf.checkpoint_precision(cfg), context=131072, batch=12,
                          engine_version="0.20").fits
    assert round(ldf.memory_fit(cfg, "H200", ldf.checkpoint_precision(cfg), context=131072).max_concurrency, 1) == 12.4


def test_gpt_oss_loaded_layout_per_gpu_generation():
    """vLLM's MXFP4 MoE backends (mxfp4.py): Hopper's Triton keeps the scales twice and FP32 biases
    (64.18 GiB; vLLM 0.14.1 logs 64.38, issue #33155); Ampere's Marlin pads the experts to 2,944 x
    3,072 (65.89 GiB); Blackwell's FlashInfer TRT-LLM pads both to 3,072 (68.66 GiB).  The files
    hold 60.77 GiB."""
    cfg = ldf.ModelConfig.from_hf(GPT_OSS_120B)
    p = ldf.checkpoint_precision(cfg)
    got = {hw: round(ldf.memory_fit(cfg, hw, p).weights / GiB, 2) for hw in ("H100-SXM", "A100-80GB-SXM", "B200")}
    assert got == {"H100-SXM": 64.18, "A100-80GB-SXM": 65.89, "B200": 68.66}
    assert round(ldf.weight_bytes(cfg, p) / GiB, 2) == 60.77
    custom = ldf.custom_hardware("memory_gb=80,bandwidth_gbs=3000,bf16_tflops=900")   # no architecture: as stored
    assert round(ldf.memory_fit(cfg, custom, p).weights / GiB, 2) == 60.77
    assert ldf.MXFP4_MOE_BACKENDS["Hopper"][0] == "vLLM Triton MXFP4 MoE"


def test_gemma2_windows_save_nothing_when_the_chunk_covers_the_context():
    """Gemma-2-9B at 8,192 tokens: by the window's bytes about 26 sequences, but vLLM keeps
    ``4,095 + max_num_batched_tokens`` tokens per sliding layer, the whole 8,192 (+1 block) at the
    default 8,192: 19.7; at 2,048 batched tokens 22.8."""
    f = ldf.memory_fit("Gemma-2-9B", "H100-SXM", context=8192)
    assert f.layout.units_per_sequence == 512 + 513 and round(f.max_concurrency, 1) == 19.7
    assert round(ldf.memory_fit("Gemma-2-9B", "H100-SXM", context=8192, max_num_batched_tokens=2048)
                 .max_concurrency, 1) == 22.8


def test_cuda_graphs_fail_where_eager_fits():
    """vLLM before 0.21 captures CUDA graphs after the KV cache, in what ``gpu_memory_utilization``
    leaves: at 0.97 of an RTX 4090 (0.71 GiB) the 1.04 GiB pool does not fit, eager does."""
    r = _json("Qwen2.5-7B", "--hardware", "RTX-4090", "--weights", "int4", "--context", "4096",
              "--gpu-memory-utilization", "0.97", "--engine-version", "0.20")
    assert not r["fits"] and r["fits_eager"] and "fits with --enforce-eager" in r["fit"]
    r = _json("Qwen2.5-7B", "--hardware", "RTX-4090", "--weights", "int4", "--context", "4096",
              "--gpu-memory-utilization", "0.97", "--engine-version", "0.20", "--enforce-eager")
    assert r["fits"] and r["cuda_graph_bytes_per_gpu"] == 0 and r["enforce_eager"]
    rc, out, _ = _main("Qwen2.5-7B", "--hardware", "RTX-4090", "--weights", "int4", "--context", "4096",
                       "--gpu-memory-utilization", "0.97", "--engine-version", "0.20")
    assert rc == 0 and "does not fit with CUDA graphs; fits with --enforce-eager" in out
    # from 0.21 the pool is in the budget: the largest batch that fits eager may not fit with graphs
    fit = lambda b, eager=False: ldf.memory_fit("Llama-3-8B", "RTX-4090", "int4", context=8192, batch=b,  # noqa: E731
                                                enforce_eager=eager)
    eager_max = max(b for b in range(1, 64) if fit(b, True).fits)
    assert fit(eager_max).graphs_in_budget and fit(eager_max).fits_eager and not fit(eager_max).fits
    assert fit(eager_max - 1).fits


def test_context_beyond_the_positions_is_refused():
    """Llama-2-7B has 4,096 positions: vLLM refuses max_model_len 131,072 unless
    VLLM_ALLOW_LONG_MAX_MODEL_LEN=1; the plan says so, in the table and in --json's warnings."""
    r = _json("Llama-2-7B", "--hardware", "H200", "--context", "131072")
    assert not r["fits"] and r["fit"].startswith("refused:") and r["max_model_len_limit"] == 4096
    assert any("4,096 positions" in w for w in r["warnings"])
    r = _json("Llama-2-7B", "--hardware", "H200", "--context", "131072", "--allow-long-context")
    assert r["fits"] and any("not trained for it" in w for w in r["warnings"])
    rc, out, err = _main("Llama-2-7B", "--hardware", "H200", "--context", "131072")
    assert rc == 0 and "warning" in out and "warning: a context of 131,072 tokens exceeds" in err
    # RoPE scaling stretches the positions as vLLM derives them
    assert ldf.max_model_len_limit(ldf.ModelConfig.from_hf(GPT_OSS_120B)) == 131072
    yarn = ldf.model_config("Qwen2.5-7B").replace(max_position_embeddings=32768, rope_scaling={
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768})
    assert ldf.max_model_len_limit(yarn) == 131072
    assert ldf.max_model_len_limit(ldf.model_config("Llama-3.1-70B")) == 131072


def test_missing_config_fields_are_refused_or_warned(tmp_path):
    """Deleting ``num_hidden_layers`` from a config.json used to plan another model (transformers'
    default); ``plan`` refuses it by name.  Other omitted keys are planned with transformers'
    defaults and listed in ``warnings``, which the web page shows."""
    src = json.loads((DATA / "Qwen2.5-7B-Instruct" / "config.json").read_text())
    for key in ("num_hidden_layers", "hidden_size", "vocab_size"):
        d = tmp_path / key
        d.mkdir()
        (d / "config.json").write_text(json.dumps({k: v for k, v in src.items() if k != key}))
        rc, _, err = _main(str(d), "--hardware", "H100-SXM")
        assert rc == 2 and f"config.json omits {key}" in err
    d = tmp_path / "rope"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({k: v for k, v in src.items() if k != "rope_theta"}))
    r = _json(str(d), "--hardware", "H100-SXM")
    assert any("omits rope_theta" in w for w in r["warnings"])
    assert _json(str(DATA / "Qwen2.5-7B-Instruct"), "--hardware", "H100-SXM")["warnings"] == []


def test_prefill_one_prompt_floor_beside_the_batch():
    """The README's ``Llama-3.1-70B --tp 8 --batch 16 --context 8192``: the batch's 16 prompts take
    ≥ 2.44 s; one 8,192-token prompt is bounded at 0.153 s, the floor of its TTFT."""
    r = _json("Llama-3.1-70B", "--hardware", "H100-SXM", "--tp", "8", "--batch", "16", "--context", "8192")
    assert round(r["prefill_s"], 2) == 2.44 and round(r["prefill_one_prompt_s"], 3) == 0.153
    rc, out, _ = _main("Llama-3.1-70B", "--hardware", "H100-SXM", "--tp", "8", "--batch", "16", "--context", "8192")
    assert "153 ms (compute-bound) for one prompt of 8,192 tokens: the floor of its TTFT" in out
    assert "to prefill all 16 prompts" in out


def test_published_range_matches_the_tp_degree():
    """At TP 8 on A100s the band comes from TP 8 rows only (gpt-fast measured 58.8 tokens/s for
    exactly this setting); the TP 2 row that put its top 43 % above is no longer used."""
    r = _json("Llama-3.1-70B", "--hardware", "A100-80GB-SXM", "--tp", "8")
    rows = {row["id"]: row for row in ldf.read_published_rows()}
    assert r["published_rows"] and all(rows[i]["n_gpus"] == 8 for i in r["published_rows"])
    lo, hi = r["published_tokens_per_s"]
    assert lo <= 58.8 <= hi < 1.06 * 58.8 and r["published_tp_matched"]
    assert "at TP 8" in r["published_note"]


def test_one_capacity_for_the_chapters_and_plan():
    """Chapter 05's calculator and ``plan`` give one capacity and one room for one setting (vLLM's
    convention: the runtime's 79.25 GiB of an A100-80GB, 0.9 of it, the engine's terms)."""
    calc = ldf.decode_calculator("Llama-2-7B", "A100-80GB-SXM", "bf16", 1, 4096)
    r = _json("Llama-2-7B", "--hardware", "A100-80GB-SXM", "--context", "4096")
    f = ldf.memory_fit("Llama-2-7B", "A100-80GB-SXM", context=4096)
    # the calculator's short rows are this fit's; its full line is plan's (fit.reason)
    assert f.reason == r["fit"] and "79.25 GiB" in r["fit"] and r["fit"].startswith("fits") and f.fits
    assert calc["memory (one GPU)"] == "fits" and calc["vLLM budget"] == "0.9 × 79.25 GiB = 71.33 GiB"
    assert calc["KV room (tokens)"] == r["kv_room_tokens"] == f.kv_tokens
    assert calc["KV room left (tokens)"] == f.kv_left_tokens
    assert f.capacity == r["runtime_memory_bytes"] == 79.25 * GiB


# --- the command ------------------------------------------------------------------------------------
def test_plan_cli_engine_options_and_json_keys():
    r = _json("Llama-3-8B", "--hardware", "H100-SXM")
    e = ldf.memory_fit("Llama-3-8B", "H100-SXM")
    assert r["kv_room_tokens"] == e.kv_tokens and r["memory_convention"] == "vLLM gpu_memory_utilization"
    assert r["runtime_memory_bytes"] == 79.22 * GiB and r["reserve_bytes_per_gpu"] == e.total - e.budget
    assert (r["engine"], r["engine_version"]) == ("vllm", "0.21") and r["cuda_graphs_in_budget"]
    assert r["non_torch_estimate"] and "llm-d" in r["non_torch_source"] and "not a bound" in r["kv_room_note"]
    assert [t["name"] for t in r["memory_terms"]][3] == "cuda_graphs" and r["kv_groups"][0]["layers"] == 32
    r = _json("Llama-3-8B", "--hardware", "memory_gb=24,bandwidth_gbs=936,bf16_tflops=71", "--context", "8192",
              "--gpu-memory-utilization", "0.95", "--max-num-batched-tokens", "2048", "--engine-version", "0.7.3")
    assert r["hardware"] == "custom" and r["memory_fraction"] == 0.95 and r["engine_version"] == "0.7.3"
    assert r["max_concurrency"] == (r["kv_room_tokens"] // 16) / (8192 // 16)
    rc, out, _ = _main("Llama-3-8B", "--hardware", "L4", "--mem-fraction-static", "0.85")
    assert rc == 0 and "SGLang mem_fraction_static = 0.85" in out and "KV room" in out
    for argv, field in [(("--gpu-memory-utilization", "1.2"), "--gpu-memory-utilization"),
                        (("--max-num-batched-tokens", "0"), "--max-num-batched-tokens"),
                        (("--non-torch-gib", "-1"), "--non-torch-gib"), (("--cuda-graph-gib", "-1"), "--cuda-graph-gib"),
                        (("--engine", "sglang"), "--mem-fraction-static"), (("--engine-version", "new"), "--engine-version"),
                        (("--max-num-seqs", "0"), "--max-num-seqs")]:
        rc, _, err = _main("Llama-3-8B", "--hardware", "H100-SXM", *argv)
        assert rc == 2 and field in err, argv
    rc, _, err = _main("Llama-3-8B", "--hardware", "memory_gb=24")
    assert rc == 2 and "--hardware" in err and "bandwidth_gbs" in err


def test_help_says_the_room_is_an_estimate():
    rc, out, _ = _main("--help")
    assert rc == 0 and "not a bound" in " ".join(out.split())
    for opt in ("--engine", "--engine-version", "--enforce-eager", "--cuda-graph-gib", "--allow-long-context",
                "--max-num-seqs"):
        assert opt in out


def test_readme_custom_gpu_example_is_the_commands_output():
    import re
    import shlex
    readme = (pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    cmd = re.search(r"python -m llm_dataflow (plan Llama-3-8B --context 8192 [^`]*?nvlink=none)\n", readme)
    args = shlex.split(cmd.group(1).replace("\\\n", " "))
    shown = re.search(r"```text\n(KV room[^\n]*)\n```", readme).group(1)
    rc, out, _ = _main(*args[1:])
    assert rc == 0 and shown in out.splitlines()


def test_deployment_presets_have_sources():
    for name, hw in ldf.DEPLOYMENT_HARDWARE.items():
        assert ldf.hardware(name) is hw and hw.source and hw.runtime_memory_source
        total, src = ldf.runtime_memory_bytes(hw)
        assert total > 0 and src == hw.runtime_memory_source
        assert hw.flops("bf16") > 0 and hw.hbm_bandwidth > 0
    for name in ("H100-SXM", "A100-80GB-SXM", "A100-40GB-SXM", "RTX-4090", "L40S", "H20", "A10", "RTX-5090"):
        assert "github.com" in ldf.hardware(name).runtime_memory_source
    assert ldf.runtime_memory_bytes("H100-SXM")[0] == 79.22 * GiB
    assert ldf.runtime_memory_bytes("L40S")[0] == 44.31 * GiB      # 48 GB on the datasheet: 44.70 GiB
    assert ldf.runtime_memory_bytes("H20")[0] == 95.00 * GiB       # "96 GB": 89.41 GiB if read as 1e9 B
    for name in ("L4", "H100-PCIe"):                               # no log naming the part was found
        assert ldf.runtime_memory_bytes(name) == (ldf.hardware(name).memory_bytes, ldf.hardware(name).runtime_memory_source)
        assert "datasheet" in ldf.hardware(name).runtime_memory_source


def test_custom_hardware_spec():
    hw = ldf.custom_hardware("name=RTX-3090,memory_gb=24,bandwidth_gbs=936,bf16_tflops=71,link=PCIe-Gen4-x16")
    assert (hw.name, hw.memory_bytes, hw.hbm_bandwidth, hw.flops("bf16")) == ("RTX-3090", 24e9, 936e9, 71e12)
    for bad, field in [("memory_gb=24,bf16_tflops=71", "bandwidth_gbs"), ("memory_gb=24,bandwidth_gbs=9", "peak"),
                       ("memory_gb=-1,bandwidth_gbs=9,bf16_tflops=1", "memory_gb"),
                       ("memory_gb=24,bandwidth_gbs=9,bf16_tflops=1,hbm=3", "hbm"),
                       ("memory_gb=24,bandwidth_gbs=9,bf16_tflops=1,link=wire", "link")]:
        with pytest.raises(ValueError, match=field):
            ldf.custom_hardware(bad)


def test_rtx3090_activation_peak_issue10517():
    """The profiling forward's activation peak at 20,000 and 29,000 tokens (vllm-project/vllm issue
    #10517, V0 0.6.4 without chunked prefill: a forward of max_model_len tokens), an independent
    check of the activation model: -2.0 % and -3.4 % of ``peak_torch − weights``."""
    hw = ldf.custom_hardware("name=RTX-3090,memory_gb=24,bandwidth_gbs=936,bf16_tflops=71,runtime_gib=23.58,nvlink=none")
    for tokens, peak in ((20000, 17.06), (29000, 17.98)):
        e = ldf.memory_fit("Llama-3-8B", hw, context=tokens, max_num_batched_tokens=tokens, engine_version="0.6.4")
        assert abs(e.activations / ((peak - 14.9888) * GiB) - 1) < 0.05


def test_moe_activation_peak_holds_the_fused_experts_workspace():
    """An MoE layer's workspace is vLLM's fused_experts buffers (fused_moe.py, fused_experts_impl):
    M·k·max(2F', D) for gate/up and the experts' D-wide outputs, beside M·k·F' for the activated
    half, with F' an expert's width on the GPU (F/tp, whole under EP).  The D-wide part is not
    split by TP: DeepSeek-V3 at tp 8 profiles 4.41 GiB for 32,000 tokens (the log: 6.37 GiB)."""
    cfg = ldf.model_config("DeepSeek-V3")
    k, D, V = cfg.n_experts_per_token, cfg.d_model, cfg.vocab_size
    f = cfg.moe_d_ff / 8
    per_token = 2 * D + k * (max(2 * f, D) + f)
    assert ldf.activation_bytes(cfg, 32000, "fp8", tp=8, logits_rows=256) == math.ceil(
        32000 * per_token * 2 + 256 * V * 4 / 8)
    e = ldf.memory_fit("DeepSeek-V3", "H200", "fp8", tp=8, gpu_memory_utilization=0.85, max_num_batched_tokens=32000)
    assert round(e.activations / GiB, 2) == 4.41 and round(e.budget / GiB, 2) == 118.84
    whole = 2 * D + k * (max(2 * cfg.moe_d_ff, D) + cfg.moe_d_ff)
    assert ldf.activation_bytes(cfg, 1000, "fp8", tp=1, ep=8, logits_rows=0) == math.ceil(1000 * whole * 2)
    c8 = ldf.model_config("Llama-3-8B")
    dense = ldf.memory_fit(c8, "H100-SXM", max_num_batched_tokens=8192).activations
    assert dense == math.ceil(8192 * (2 * c8.d_model + 3 * c8.d_ff) * 2 + 256 * c8.vocab_size * 4)
    assert round(dense / GiB, 2) == 0.9
    with pytest.raises(ValueError, match="ep"):
        ldf.activation_bytes(cfg, 10, ep=0)


def test_readme_quotes_the_engine_model():
    """The README's "Plan a deployment" numbers, each computed here."""
    import sys
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
    from test_engine_logs import LOGS, plan as plan_log
    readme = " ".join((pathlib.Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8").split())
    sg = plan_log(next(r for r in LOGS if r["id"] == "issue21348-qwen3-235b-fp8-sglang"))
    assert f"at 0.93 plans {sg.kv_tokens:,} tokens where SGLang logged 367,404" in readme
    m = ldf.memory_fit("Mistral-7B-v0.1", "H100-SXM", batch=8, context=32768)
    assert (f"holds {m.max_concurrency:.1f} sequences (every layer charged the whole context would give "
            f"{m.kv_tokens / 32768:.1f})") in readme
    g = ldf.ModelConfig.from_hf(GPT_OSS_120B)
    assert f"on an H200 {ldf.memory_fit(g, 'H200', ldf.checkpoint_precision(g), context=131072).max_concurrency:.1f}." \
        in readme
    p = ldf.checkpoint_precision(g)
    held = [f"{ldf.memory_fit(g, hw, p).weights / GiB:.2f}" for hw in ("H100-SXM", "A100-80GB-SXM", "B200")]
    assert (f"holds {ldf.weight_bytes(g, p) / GiB:.2f} GiB in its files and {held[0]} GiB on an H100" in readme
            and f"{held[1]} on an A100" in readme and f"{held[2]} on a B200" in readme)
    v1 = [f"{ldf.non_torch_estimate(tp, 'H100-SXM').bytes / GiB:.2f}" for tp in (1, 2, 4)]
    assert f"NVLink parts {v1[0]}, {v1[1]} and {v1[2]} GiB at TP 1, 2 and 4" in readme
    assert f"default {engines.VLLM_CUDA_GRAPH_BYTES / GiB:.2f} GiB" in readme


def test_chapter06_calculator_shows_the_plans_layout():
    """Chapter 06's calculator shows what ``plan`` computes: vLLM's tokens per sequence by layer kind and
    the sequences one H200 holds (Mistral-7B at 32,768 tokens: its 4,096-token window kept as 12,304)."""
    r = ldf.kv_cache_report("Mistral-7B-v0.1", 32768)
    p = _json("Mistral-7B-v0.1", "--hardware", "H200", "--context", "32768")
    assert r["vLLM sets aside per sequence"] == "32 sliding-window layers × 12,304 tokens" == \
        f"32 sliding-window layers × {p['kv_groups'][0]['tokens_per_sequence']:,} tokens"
    assert r["maximum concurrency on one H200 (vLLM, BF16 weights)"] == round(p["max_concurrency"], 2)
    assert ldf.kv_cache_report("DeepSeek-V3", 4096)["maximum concurrency on one H200 (vLLM, BF16 weights)"] == \
        "weights do not fit"
