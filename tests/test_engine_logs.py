"""Every public vLLM and SGLang startup log the planner is checked against, one row each.

Each row gives the deployment the log describes (model, GPU, TP degree, the engine and its version,
its settings), the figures the engine printed, and where they were read (``tests/data/logs/``, each
file verbatim with its address in ``tests/data/README.md``).  The plan of the same deployment
(:func:`llm_dataflow.memory_fit`, what ``plan`` prints) must land within 5 % of the logged weights
and 10 % of the logged KV room (tokens or GiB), or the row names the one cause not modelled
(a strict xfail, so that a fix shows up).  ``before`` records the plan's error before issue 42
(the package at the commit before it), for the record: it is not asserted.

Logs are V0 (``vllm/worker/worker.py``'s "Memory profiling" lines, vLLM 0.6-0.8), V1
(``gpu_worker.py``'s "Available KV cache memory", "GPU KV cache size") and SGLang ("KV Cache is
allocated. #tokens").  vLLM and SGLang print GiB; V0 and SGLang label them "GB".
"""
import pathlib

import pytest

import llm_dataflow as ldf

GiB = 2**30
DATA = pathlib.Path(__file__).resolve().parent / "data"
#: The checkpoint format of Qwen3's FP8 releases: 128 x 128 E4M3 blocks (vllm-project/vllm issue
#: #21348 names Qwen3-235B-A22B-FP8; the block size is Qwen's FP8 model cards').
FP8_BLOCK = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}
RTX3090 = "name=RTX-3090,memory_gb=24,bandwidth_gbs=936,bf16_tflops=71,runtime_gib=23.58,nvlink=none"


def qwen3_235b_a22b_fp8():
    """Qwen3-235B-A22B's shapes as THUDM/slime's ``scripts/models/qwen3-235B-A22B.sh`` gives them
    (94 layers, d_model 4,096, 64 query heads, 4 KV heads of 128, FFN 12,288, vocabulary 151,936,
    128 experts of 1,536, top 8, untied, QK norm), in the FP8 checkpoint's 128 x 128 blocks."""
    return ldf.ModelConfig(name="Qwen3-235B-A22B-FP8", model_type="qwen3_moe", n_layers=94, d_model=4096, n_heads=64,
                           n_kv_heads=4, head_dim=128, d_ff=12288, vocab_size=151936, n_routed_experts=128,
                           n_experts_per_token=8, moe_d_ff=1536, qk_norm=True, norm_eps=1e-6, rope_theta=1e6,
                           quantization=ldf.quant_spec_from_config(FP8_BLOCK))


MODELS = {"qwen3-235b-a22b-fp8": qwen3_235b_a22b_fp8,
          "gpt-oss-120b": lambda: ldf.ModelConfig.from_hf(DATA / "gpt-oss-120b"),
          "llama-3.1-8b-instruct": lambda: ldf.ModelConfig.from_hf(DATA / "Llama-3.1-8B-Instruct"),
          "qwen2.5-7b-instruct": lambda: ldf.ModelConfig.from_hf(DATA / "Qwen2.5-7B-Instruct")}

# row: id, log file (or the source quoted), deployment, logged figures, before (plan's error before
# issue 42, %), xfail (the one cause not modelled, or None)
LOGS = [
    dict(id="pr10511-llama3-8b-h100-tp1", src="vllm-project/vllm PR #10511 (comment of 2024-12-13)",
         model="Llama-3-8B", hw="H100-SXM", tp=1, engine="vllm", version="0.6.5", mnbt=8192,
         logged={"weights_gib": 14.96, "kv_gib": 53.29}, before={"weights_gib": -0.0, "kv_gib": +0.7}),
    dict(id="pr10511-llama3-8b-h100-tp2", src="vllm-project/vllm PR #10511 (comment of 2024-12-13)",
         model="Llama-3-8B", hw="H100-SXM", tp=2, engine="vllm", version="0.6.5", mnbt=8192,
         logged={"weights_gib": 7.48, "kv_gib": 71.29 - 7.48 - 3.58 - 1.26}, before={"weights_gib": -0.0, "kv_gib": +1.3}),
    dict(id="pr2031-llama2-7b-a100-tp1", src="vllm-project/vllm PR #2031 (2023-12-12, vLLM 0.2.x, benchmark_throughput)",
         model="Llama-2-7B", hw="A100-80GB-SXM", tp=1, engine="vllm", version="0.2.5", mnbt=4096,
         logged={"blocks": 7351}, before={"blocks": -1.4}),
    dict(id="pr2031-llama2-70b-a100-tp4", src="vllm-project/vllm PR #2031 (2023-12-12, vLLM 0.2.x, benchmark_throughput)",
         model="Llama-2-70B", hw="A100-80GB-SXM", tp=4, engine="vllm", version="0.2.5", mnbt=4096,
         logged={"blocks": 20865}, before={"blocks": +24.6},
         xfail="v0.2.x measured 13.1 GiB per rank outside torch at TP 4 (31,615 -> 20,865 blocks when PR #2031 "
               "began counting it): caching-allocator fragmentation from record_stream on NCCL inputs, removed by "
               "TORCH_NCCL_AVOID_RECORD_STREAMS=1 in vLLM 0.2.7 (issue #2248); an artefact of that software stack"),
    dict(id="pr17122-llama31-8b-l40s", src="vllm-project/vllm PR #17122 (2025-04-24, V1, one L40S)",
         model="Llama-3-8B", hw="L40S", tp=1, engine="vllm", version="0.8.5", mnbt=2048, context=32768,
         logged={"weights_gib": 14.9889, "tokens": 158_656}, before={"weights_gib": -0.2, "tokens": +25.2},
         xfail="the run's command is not in the thread: it set max_model_len (32,768, not the model's 131,072), "
               "so its gpu_memory_utilization and max_num_seqs are unknown (at 0.8 the plan is within 3 %)"),
    dict(id="issue10517-llama31-8b-rtx3090-20k", file="vllm-issue-10517-llama31-8b-rtx3090.log",
         model="Llama-3-8B", hw=RTX3090, tp=1, engine="vllm", version="0.6.4", mnbt=20000, context=20000,
         logged={"weights_gib": 14.9888, "blocks": 1952}, before={"weights_gib": -0.2, "blocks": +1.6}),
    dict(id="issue10517-llama31-8b-rtx3090-29k", file="vllm-issue-10517-llama31-8b-rtx3090.log",
         model="Llama-3-8B", hw=RTX3090, tp=1, engine="vllm", version="0.6.4", mnbt=29000, context=29000,
         logged={"weights_gib": 14.9888, "blocks": 1478, "refused": True}, before={"weights_gib": -0.2, "blocks": +4.5}),
    dict(id="pr550-llama2-7b-h100", file="gateway-api-inference-extension-pr550-h100.log",
         model="Llama-2-7B", hw="H100-SXM", tp=1, engine="vllm", version="0.8.1", mnbt=4096,
         logged={"weights_gib": 12.55, "kv_gib": 56.18, "blocks": 7191}, before={"weights_gib": +0.0, "kv_gib": +0.8, "blocks": +0.8}),
    dict(id="llmd-0.19-llama31-8b-tp1", file="llm-d-planner-vllm-0.19.0-h100-excerpt.md",
         model="llama-3.1-8b-instruct", hw="H100-SXM", tp=1, engine="vllm", version="0.19", gmu=0.95, mnbt=8192,
         logged={"weights_gib": 14.99, "kv_gib": 58.11, "tokens": 476_016}, before={"weights_gib": -0.2, "kv_gib": -0.9, "tokens": -0.9}),
    dict(id="llmd-0.19-llama31-8b-tp2", file="llm-d-planner-vllm-0.19.0-h100-excerpt.md",
         model="llama-3.1-8b-instruct", hw="H100-SXM", tp=2, engine="vllm", version="0.19", gmu=0.95, mnbt=8192,
         logged={"weights_gib": 7.51, "non_torch_gib": 2.07}, before={"weights_gib": -0.4, "non_torch_gib": +72.9}),
    dict(id="llmd-0.19-llama31-8b-tp4", file="llm-d-planner-vllm-0.19.0-h100-excerpt.md",
         model="llama-3.1-8b-instruct", hw="H100-SXM", tp=4, engine="vllm", version="0.19", gmu=0.95, mnbt=8192,
         logged={"weights_gib": 3.77, "non_torch_gib": 2.13}, before={"weights_gib": -0.8, "non_torch_gib": +236.2}),
    dict(id="llmd-0.19-qwen25-7b-tp1", file="llm-d-planner-vllm-0.19.0-h100-excerpt.md",
         model="qwen2.5-7b-instruct", hw="H100-SXM", tp=1, engine="vllm", version="0.19", gmu=0.95, mnbt=8192,
         logged={"weights_gib": 14.25, "kv_gib": 58.53, "tokens": 1_096_000}, before={"weights_gib": -0.5, "kv_gib": -0.6, "tokens": -0.6}),
    dict(id="issue21348-qwen3-235b-fp8-vllm", file="vllm-issue-21348-qwen3-235b-a22b-fp8-4xh100.log",
         model="qwen3-235b-a22b-fp8", hw="H100-SXM", tp=4, engine="vllm", version="0.10", mnbt=8192,
         logged={"kv_gib": 8.11, "tokens": 178_880}, before={"kv_gib": +2.4, "tokens": +3.6},
         xfail="7.4 GiB besides weights and activations left this run's budget at TP 4 (the excerpt has no "
               "non-torch line): the V1 0.19 logs put 2.2 GiB outside torch at TP 4; this run also served "
               "through LMCache's KV connector (--kv-transfer-config LMCacheConnectorV1), whose GPU buffers the "
               "plan does not model (the old 1.79 x tp default landed at +3.6 % by charging 7.16 GiB)"),
    dict(id="issue21348-qwen3-235b-fp8-sglang", file="vllm-issue-21348-qwen3-235b-a22b-fp8-4xh100.log",
         model="qwen3-235b-a22b-fp8", hw="H100-SXM", tp=4, engine="sglang", version="0.4", mfs=0.93,
         logged={"tokens": 367_404}, before={"tokens": -30.8}),
    dict(id="r1-h200-tp8", src="a published deployment note of 2025-03-15 (vLLM 0.7.3; quoted in tests/test_serving.py)",
         model="DeepSeek-V3", weights="fp8", hw="H200", tp=8, engine="vllm", version="0.7.3", gmu=0.85, mnbt=32000,
         logged={"weights_gib": 83.88, "kv_gib": 21.43}, before={"weights_gib": -5.5, "kv_gib": -2.9},
         xfail="vLLM 0.7.3 holds MLA's absorbed products W_Q_UK and W_UV_O beside q_b/kv_b/o_proj "
               "(VLLM_MLA_PERFORM_MATRIX_ABSORPTION), about 4.05 GiB in FP8 at TP 8: not modelled; with the "
               "activation peak the log shows (6.37 GiB, the plan 4.41) they are the KV room's whole gap "
               "(+6.55 GiB); the old default's 14.32 GiB outside torch hid both (-2.9 %)"),
    dict(id="issue33155-gpt-oss-120b-h100", file="vllm-issue-33155-gpt-oss-120b-h100.log",
         model="gpt-oss-120b", hw="H100-SXM", tp=1, engine="vllm", version="0.14.1", mnbt=8192,
         logged={"weights_gib": 64.38}, before={"weights_gib": -5.6}),
    dict(id="issue27508-gpt-oss-120b-h100", file="vllm-issue-27508-gpt-oss-120b-h100.log",
         model="gpt-oss-120b", hw="H100-SXM", tp=1, engine="vllm", version="0.11", gmu=0.95, mnbt=1024,
         logged={"kv_gib": 1.71}, before={"kv_gib": +627.1},
         xfail="the excerpt gives only the KV line; against the 64.38 GiB of weights issue #33155 logs, some "
               "8.5 GiB more left the budget in this run (no weight, activation or non-torch line to say which)"),
]


def _config(row):
    m = row["model"]
    return MODELS[m]() if m in MODELS else ldf.model_config(m)


def plan(row, **over):
    """The memory fit of the row's deployment, as ``plan`` computes it."""
    cfg = _config(row)
    hw = ldf.custom_hardware(row["hw"]) if "=" in row["hw"] else row["hw"]
    dtype = row.get("weights") or ldf.checkpoint_precision(cfg)
    kw = dict(tp=row["tp"], engine=row["engine"], engine_version=row["version"],
              context=row.get("context", 0), max_num_batched_tokens=row.get("mnbt", 8192))
    if row["engine"] == "sglang":
        kw["mem_fraction_static"] = row["mfs"]
    else:
        kw["gpu_memory_utilization"] = row.get("gmu", 0.9)
    kw.update(over)
    return ldf.memory_fit(cfg, hw, dtype, **kw)


def errors(row, fit) -> dict:
    """The plan's error against each logged figure (%)."""
    got = {"weights_gib": fit.weights / GiB, "kv_gib": fit.kv_bytes / GiB, "tokens": fit.kv_tokens,
           "blocks": fit.kv_tokens / fit.block_size, "non_torch_gib": fit.non_torch / GiB}
    return {k: 100 * (got[k] - v) / v for k, v in row["logged"].items() if k in got}


def _check(row):
    fit = plan(row)
    err = errors(row, fit)
    for k, e in err.items():
        tol = 5 if k == "weights_gib" else 10
        assert abs(e) < tol, (row["id"], k, round(e, 2))
    if row["logged"].get("refused"):
        assert fit.max_concurrency < 1 and not fit.fits   # vLLM: "max seq len ... larger than ... KV cache"


@pytest.mark.parametrize("row", [r for r in LOGS if not r.get("xfail")], ids=lambda r: r["id"])
def test_log_within_tolerance(row):
    _check(row)


@pytest.mark.parametrize("row", [pytest.param(r, marks=pytest.mark.xfail(strict=True, reason=r["xfail"]))
                                 for r in LOGS if r.get("xfail")], ids=lambda r: r["id"])
def test_log_with_a_named_cause(row):
    _check(row)


def test_every_log_file_is_listed_with_its_address():
    readme = (DATA / "README.md").read_text(encoding="utf-8")
    for p in sorted((DATA / "logs").iterdir()):
        assert f"logs/{p.name}" in readme, p.name
    for row in LOGS:
        assert row.get("file") or row.get("src"), row["id"]
        if row.get("file"):
            assert (DATA / "logs" / row["file"]).is_file(), row["file"]
