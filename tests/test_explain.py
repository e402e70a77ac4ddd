"""``explain``: the corpus of real logs reconciled term by term with the planner's tolerances (5 %
weights, 10 % KV room), or the one cause named; "what to change" for every failed start; the
command line's messages and the README's example.

Each row gives the log file (``tests/data/logs/``, address in ``tests/data/README.md``), the
model's config, the GPU, and what the reconciliation must show.  ``expect`` maps a term to
``True`` (within its tolerance), ``False`` (beyond it: the ``why`` must name the cause) or a
number (the book's figure, pinned).
"""
import importlib
import json
import pathlib
import subprocess
import sys
import time

import pytest

pytest.importorskip("llm_dataflow.core.engines", reason="explain plans with issue 42's engine model")

import llm_dataflow as ldf  # noqa: E402
from llm_dataflow.core.explain import explain, explain_text, main  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
LOGS = DATA / "logs"
RTX3090 = "name=RTX-3090,memory_gb=24,bandwidth_gbs=936,bf16_tflops=71,runtime_gib=23.58,nvlink=none"
FP8_BLOCK = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}


def qwen3_235b_a22b_fp8():
    """Qwen3-235B-A22B in its FP8 release, the shapes of THUDM/slime's
    ``scripts/models/qwen3-235B-A22B.sh`` (as ``tests/test_engine_logs.py`` builds it)."""
    return ldf.ModelConfig(name="Qwen3-235B-A22B-FP8", model_type="qwen3_moe", n_layers=94, d_model=4096, n_heads=64,
                           n_kv_heads=4, head_dim=128, d_ff=12288, vocab_size=151936, n_routed_experts=128,
                           n_experts_per_token=8, moe_d_ff=1536, qk_norm=True, norm_eps=1e-6, rope_theta=1e6,
                           max_position_embeddings=40960, quantization=ldf.quant_spec_from_config(FP8_BLOCK))


def gpt_oss_20b_mxfp4():
    """gpt-oss-20b's config.json (``tests/data/gpt-oss-20b``, a copy without its
    quantization_config) with the MXFP4 block gpt-oss-120b's config.json carries: the two
    checkpoints ship the same format (``quant_method`` mxfp4; the 0.19.0 log prints
    ``quantization=mxfp4``)."""
    d = json.loads((DATA / "gpt-oss-20b" / "config.json").read_text())
    d["quantization_config"] = json.loads((DATA / "gpt-oss-120b" / "config.json").read_text())["quantization_config"]
    return d


def llama31_405b_fp8_july():
    """Meta-Llama-3.1-405B-Instruct-FP8 as vLLM loaded it in July 2024 (16 KV heads), rebuilt from
    primary sources by ``tests/test_quantization.py`` (its docstring names them)."""
    return ldf.ModelConfig.from_hf(importlib.import_module("test_quantization")._llama31_405b_fp8(16))


def mixtral_gptq():
    """TheBloke/Mixtral-8x7B-v0.1-GPTQ: Mixtral-8x7B-v0.1's shapes (the preset) in the format of
    the checkpoint's own ``quantize_config.json`` (``tests/data``, byte for byte)."""
    qc = json.loads((DATA / "Mixtral-8x7B-v0.1-GPTQ" / "quantize_config.json").read_bytes())
    return ldf.model_config("Mixtral-8x7B").replace(quantization=ldf.quant_spec_from_config(dict(qc, quant_method="gptq")))


def qwen3_235b_2507_fp8():
    """Qwen3-235B-A22B-Instruct-2507-FP8: the 2507 release keeps Qwen3-235B-A22B's architecture
    (its log resolves ``Qwen3MoeForCausalLM`` and places 16 of 128 experts on each of 8 EP ranks;
    the shapes are slime's, as :func:`qwen3_235b_a22b_fp8`), with 262,144 positions (the run caps
    them at 32,768).  An inference from the log, not the checkpoint's config.json: the weights it
    logs (27.7183 GiB per rank) land within 0.3 % of these shapes."""
    return qwen3_235b_a22b_fp8().replace(name="Qwen3-235B-A22B-Instruct-2507-FP8", max_position_embeddings=262144)


def qwen3_30b_a3b_2507_fp8():
    """Qwen3-30B-A3B-Instruct-2507-FP8: the preset's shapes (Qwen/Qwen3-30B-A3B's config.json) in
    Qwen's FP8 format (128 x 128 blocks), 262,144 positions.  An assumption stated: the 2507
    release keeps the architecture; its log prints only the KV room, which depends on the layer
    count, the KV heads and the head size, and on the weights through the budget."""
    return ldf.model_config("Qwen3-30B-A3B").replace(name="Qwen3-30B-A3B-Instruct-2507-FP8", max_position_embeddings=262144,
                                                    quantization=ldf.quant_spec_from_config(FP8_BLOCK))


#: The block AutoAWQ writes with its documented recipe (casper-hansen/AutoAWQ ``examples/quantize.py``
#: at 18c5208d: ``{"zero_point": True, "q_group_size": 128, "w_bit": 4, "version": "GEMM"}``, saved
#: as ``quantization_config`` {bits 4, group_size 128, zero_point true, version gemm}).
AWQ_AUTOAWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}


def llama3_70b_awq():
    """TechxGenus/Meta-Llama-3-70B-Instruct-AWQ: Llama 3 70B's shapes (the Llama-3.1-70B preset:
    Meta's llama-models ``sku_list.py`` gives Llama 3 and 3.1 70B the same dimensions) with Llama
    3's 8,192 positions (the log: "Using max model len 8192"), in AutoAWQ's recipe
    (:data:`AWQ_AUTOAWQ`; the checkpoint's own block is not in this book's sources: an assumption
    stated, at group 64 the weights would be 0.5 % more)."""
    return ldf.model_config("Llama-3.1-70B").replace(name="Meta-Llama-3-70B-Instruct-AWQ", max_position_embeddings=8192,
                                                     quantization=ldf.quant_spec_from_config(AWQ_AUTOAWQ))


def _part(name, marker):
    """The lines of a two-engine file from ``marker`` on (its SGLang half)."""
    text = (LOGS / name).read_text()
    return text[text.index(marker):]


# id, source (file name or callable giving text), config, hardware, run index, expected
CORPUS = [
    dict(id="issue10517-rtx3090-20k-ok", file="vllm-issue-10517-llama31-8b-rtx3090.log",
         config=str(DATA / "Llama-3.1-8B-Instruct"), hw=RTX3090, run=0,
         expect={"weights": True, "kv_memory": True, "gpu_blocks": True, "max_concurrency": True}),
    dict(id="issue10517-rtx3090-29k-refused", file="vllm-issue-10517-llama31-8b-rtx3090.log",
         config=str(DATA / "Llama-3.1-8B-Instruct"), hw=RTX3090, run=1, error="max_seq_len",
         expect={"weights": True, "kv_memory": True, "kv_tokens": True, "max_concurrency": True}),
    dict(id="pr550-llama2-7b-h100", file="gateway-api-inference-extension-pr550-h100.log",
         config="Llama-2-7B", hw="H100-SXM", run=0,
         expect={"weights": True, "kv_memory": True, "gpu_blocks": True}),
    dict(id="issue33155-gpt-oss-120b-h100", file="vllm-issue-33155-gpt-oss-120b-h100.log",
         config=str(DATA / "gpt-oss-120b"), hw="H100-SXM", run=0, expect={"weights": True}),
    dict(id="issue27508-gpt-oss-120b-h100-failed", file="vllm-issue-27508-gpt-oss-120b-h100.log",
         config=str(DATA / "gpt-oss-120b"), hw="H100-SXM", run=0, error="failed",
         expect={"kv_memory": False}),
    dict(id="issue21348-qwen3-235b-fp8-4xh100-vllm", file="vllm-issue-21348-qwen3-235b-a22b-fp8-4xh100.log",
         config=qwen3_235b_a22b_fp8, hw="H100-SXM", run=0, settings={"tensor_parallel_size": 4},
         expect={"kv_memory": False, "kv_tokens": False}),
    dict(id="issue21348-qwen3-235b-fp8-4xh100-sglang",
         text=lambda: _part("vllm-issue-21348-qwen3-235b-a22b-fp8-4xh100.log", "# SGLang"),
         config=qwen3_235b_a22b_fp8, hw="H100-SXM", run=0, expect={"max_total_num_tokens": True}),
    dict(id="vllm019-gpt-oss-20b-h100-sampler-oom", file="vllm-0.19-gpt-oss-20b-h100-sampler-oom-excerpt.log",
         config=gpt_oss_20b_mxfp4, hw="H100-SXM", run=0, error="oom_sampler",
         expect={"weights": True, "kv_memory": True, "kv_tokens": True, "max_concurrency": True}),
    dict(id="vllm019-gemma-2-9b-it-h100", file="vllm-0.19-gemma-2-9b-it-h100-excerpt.log",
         config="Gemma-2-9B", hw="H100-SXM", run=0,
         expect={"weights": True, "kv_memory": True, "kv_tokens": True, "max_concurrency": True}),
    dict(id="vllm0151-llama31-8b-a100-40gb-eager", file="vllm-0.15.1-llama31-8b-a100-40gb-eager.log",
         config=str(DATA / "Llama-3.1-8B-Instruct"), hw="A100-40GB-SXM", run=0,
         expect={"weights": True, "kv_memory": True, "kv_tokens": True, "max_concurrency": True}),
    dict(id="issue23278-gpt-oss-120b-h100-0101-failed", file="vllm-issue-23278-gpt-oss-120b-h100-0.10.1-start.log",
         config=str(DATA / "gpt-oss-120b"), hw="H100-SXM", run=0, error="failed",
         expect={"weights": True, "kv_memory": False}),
    dict(id="issue6746-llama31-405b-fp8-8xh100", file="vllm-issue-6746-llama31-405b-fp8-8xh100-excerpt.log",
         config=llama31_405b_fp8_july, hw="H100-SXM", run=0, settings={"tensor_parallel_size": 8},
         expect={"weights": True}),
    dict(id="pr23066-mixtral-gptq-tp2-h100", file="vllm-pr23066-mixtral-gptq-tp2-excerpt.log",
         config=mixtral_gptq, hw="H100-SXM", run=0, settings={"tensor_parallel_size": 2},
         expect={"weights": True}),
    dict(id="issue7593-gemma2-9b-8xl4", file="vllm-issue-7593-gemma2-9b-8xl4-graph-oom.log",
         config="Gemma-2-9B", hw="L4", run=0, settings={"tensor_parallel_size": 8},
         # 2.3463 GiB logged per rank, 2.153 planned (-8.2 %): 0.19 GiB more on every rank, about one
         # eighth of the tied 256,000 x 3,584 embedding (0.21 GiB): vLLM 0.5.x's Gemma 2 holds it
         # apart from the logits head (an inference from the numbers; the thread does not say)
         expect={"weights": False}),
    # 8 x L40S, vLLM 0.10.2, TP 8 with --enable-expert-parallel (tim-roethig/ai-platform): the room is
    # 10.4 % short of the book's because the profiling forward peaked at 1.40 GiB where the book's
    # model of it gives 0.22 (chapter 05); CUDA graphs (3.45 GiB) are captured after the cache is sized
    dict(id="vllm0102-qwen3-235b-fp8-8xl40s-ep8", file="vllm-0.10.2-qwen3-235b-fp8-8xl40s-ep8-excerpt.log",
         config=qwen3_235b_2507_fp8, hw="L40S", run=0, ep=8,
         expect={"weights": True, "kv_memory": False, "kv_tokens": False, "max_concurrency": False},
         cause="the profiling forward's peak differs from the book's model of it"),
    dict(id="vllm0102-qwen3-30b-fp8-2xl40s-ep2", file="vllm-0.10.2-qwen3-30b-a3b-fp8-2xl40s-ep2-excerpt.log",
         config=qwen3_30b_a3b_2507_fp8, hw="L40S", run=0, ep=2,
         expect={"kv_memory": True, "kv_tokens": True, "max_concurrency": True}),
    dict(id="vllm0160-llama3-70b-awq-2xl40s", file="vllm-0.16.0-llama3-70b-awq-2xl40s.log",
         config=llama3_70b_awq, hw="L40S", run=0,
         expect={"weights": True, "kv_memory": True, "kv_tokens": True, "max_concurrency": True}),
    # MXFP4 experts at TP 4 on A100s over Ray: 2,880 / 4 = 720 inputs per shard, padded to 768 by
    # vLLM's Marlin MXFP4 kernel (the book holds the same layout: 17.22 GiB, the log 17.2217)
    dict(id="vllm01011-gpt-oss-120b-4xa100-80gb", file="vllm-0.10.1.1-gpt-oss-120b-4xa100-80gb-ray-excerpt.log",
         config=str(DATA / "gpt-oss-120b"), hw="A100-80GB-SXM", run=0,
         expect={"weights": True, "kv_memory": True, "kv_tokens": True, "max_concurrency": True}),
]


#: The stored logs explain does not reconcile, each with why (the parser still reads every one:
#: ``test_every_stored_log_is_read_or_refused_with_its_reason``).
NOT_RECONCILED = {
    "vllm-issue-13061-2x-rtx4090.log": "DeepSeek-R1-Distill-Qwen-14B's config.json is not in this book's sources (only "
                                       "GGUF metadata of its shapes, ollama/ollama issue #9245), and the excerpt names "
                                       "no vLLM version: at 131,072 tokens V0's chunked-prefill default decides the "
                                       "activation peak, so the room would be a guess",
    "vllm-issue-14452-rtx5090.log": "the stored lines do not name the model (the same post's engine line names "
                                    "/models/QwQ-32B-unsloth-bnb-4bit, bitsandbytes at PP 2, for a run at 60,000 "
                                    "tokens; neither QwQ-32B's config.json nor the checkpoint's quantization block is "
                                    "in this book's sources)",
    "mellea-pr416-h100.log": "the PR does not name the model",
    "gpustack-runner-pr251-cudagraph.log": "the excerpt names no model",
    "club-3090-issue127-cudagraph.log": "the excerpt names no model",
    "sglang-pr11716-8xh200-init.log": "the excerpt stops before the weights and names no model",
    "vllm-pr12569-llama31-70b-w8a8.log": "the checkpoint's compressed-tensors config.json is not in this book's sources",
    "vllm-issue-23278-gpt-oss-120b-h100-0.10.1.log": "settings only; the same post's figures are in "
                                                     "vllm-issue-23278-gpt-oss-120b-h100-0.10.1-start.log",
    "llm-d-planner-vllm-0.19.0-h100-excerpt.md": "a report's tables, not log lines (tests/test_engine_logs.py plans them)",
    "sglang-0.4.3-qwq-32b-4xl4.log": "QwQ-32B's config.json is not in this book's sources (the one quoted in "
                                     "vllm-project/vllm issue #17306 was edited by its poster)",
    "sglang-pr11830-b200-pool.log": "the comment does not name the model",
    "vllm-issue-11251-16gb-0.6.4.log": "the comment does not name the model",
    "vllm-issue-25350-fp8-kv-v1.log": "the issue does not name the model",
    "vllm-pr13596-v1-kv-size-format.log": "two format examples from a PR description, no deployment",
    "vllm-mlcommons-2267-llama31-8b-tp8.log": "the GPU is not named (weights alone: the explain test of TP 8 "
                                              "weights is the 405B FP8 row)",
    "vllm-pr10909-bamba-h100-0.6.5.log": "Bamba (Mamba2 layers) is a family the planner refuses",
    "vllm-pr12126-llama32-11b-vision-h100.log": "Llama-3.2-11B-Vision (mllama) is a family the planner refuses",
    "vllm-issue-27508-gpt-oss-120b-h100-traceback.log": "a traceback's end only (no figure)",
}


def test_every_stored_log_is_read_or_refused_with_its_reason():
    reconciled = {r["file"] for r in CORPUS if "file" in r} | {"vllm-issue-21348-qwen3-235b-a22b-fp8-4xh100.log"}
    for p in sorted(LOGS.iterdir()):
        assert (p.name in reconciled) != (p.name in NOT_RECONCILED), p.name
        if p.suffix == ".md":
            with pytest.raises(ValueError, match="no vLLM or SGLang line found"):
                ldf.read_engine_text(p.read_bytes())
        else:
            lg = ldf.read_engine_text(p.read_bytes())
            assert lg.runs or lg.command, p.name


def _explain(row):
    text = row["text"]() if "text" in row else (LOGS / row["file"]).read_text()
    cfg = row["config"]() if callable(row["config"]) else row["config"]
    if row.get("settings"):                     # what the post says beside the log (its command's flags)
        flags = " ".join(f"--{k.replace('_', '-')} {v}" for k, v in row["settings"].items())
        text = f"vllm serve model {flags}\n" + text
    return explain(text, config=cfg, hardware=row["hw"])


@pytest.mark.parametrize("row", CORPUS, ids=lambda r: r["id"])
def test_corpus_reconciled(row):
    ex = _explain(row)[row["run"]]
    rows = {r.term: r for r in ex.rows}
    for term, want in row["expect"].items():
        r = rows[term]
        if want is True:
            assert r.within, (row["id"], term, r.engine, r.book, r.diff)
        elif want is False:
            assert r.within is False and r.why.startswith("beyond the"), (row["id"], term, r.why)
    for r in ex.rows:                           # every judged term: within, or its cause named
        assert r.within is not False or r.why.startswith("beyond the"), (row["id"], r.term)
        if r.within is False and row.get("cause"):
            assert row["cause"] in r.why, (row["id"], r.term, r.why)
    if "ep" in row:                             # an expert-parallel start is planned as one
        assert ex.ep == row["ep"] and ex.ep > 1
    if row.get("error"):
        assert ex.error.kind == row["error"]
        assert ex.changes, "a failed start gets what to change"
        assert all(c.flag.startswith("--") and c.cost for c in ex.changes)


def test_expert_parallel_is_what_lets_the_fp8_checkpoint_load_on_8_l40s():
    """At TP 8 alone Qwen3-235B's experts (1,536 wide) split into 192-wide shards of 128 x 128 FP8
    blocks, which vLLM refuses (fp8.py); with --enable-expert-parallel each GPU holds 16 whole
    experts, and the book's weights per rank land on the log's 27.7183 GiB."""
    cfg = qwen3_235b_2507_fp8()
    p = ldf.checkpoint_precision(cfg)
    with pytest.raises(ValueError, match="192-wide shards.*or ep > 1 so that experts stay whole"):
        ldf.memory_fit(cfg, "L40S", p, tp=8, engine_version="0.10.2")
    ex = _explain(next(r for r in CORPUS if r["id"] == "vllm0102-qwen3-235b-fp8-8xl40s-ep8"))[0]
    assert (ex.tp, ex.ep, ex.settings["enable_expert_parallel"].value) == (8, 8, True)
    assert "ep=8: 16 whole experts per GPU" in ex.verdict
    rows = {r.term: r for r in ex.rows}
    assert (round(rows["weights"].engine, 2), round(rows["weights"].book, 2)) == (27.72, 27.65)
    # the CUDA graph pool (3.45 GiB) is captured after the cache is sized in 0.10.2: not the cause
    assert rows["cuda_graph"].engine == 3.45 and "CUDA graph" not in rows["kv_tokens"].why
    assert round(rows["activations"].engine - rows["activations"].book, 2) == 1.18


def test_mxfp4_experts_at_tp4_are_padded_as_vllm_pads_them():
    """gpt-oss-120b at TP 4: 2,880 / 4 = 720 inputs per expert shard, not a multiple of MXFP4's
    32-wide groups, yet vLLM 0.10.1.1 starts it on 4 x A100 (dennislee22/vLLM-benchmarking): its
    Marlin MXFP4 kernel pads each shard (to 768).  The book plans it with the same padding."""
    cfg = ldf.ModelConfig.from_hf(DATA / "gpt-oss-120b")
    f = ldf.memory_fit(cfg, "A100-80GB-SXM", ldf.checkpoint_precision(cfg), tp=4, gpu_memory_utilization=0.8,
                       max_num_batched_tokens=2048, context=16384, engine_version="0.10.1")
    assert round(f.weights / 2**30, 2) == 17.22 and "vLLM pads each expert shard" in f.reason


def test_refused_context_gets_the_largest_that_fits_and_the_utilisation_needed():
    ex = _explain(CORPUS[1])[1]
    flags = {c.flag.split()[0]: c for c in ex.changes}
    assert {"--max-model-len", "--gpu-memory-utilization", "--kv-cache-dtype"} <= set(flags)
    mml = int(flags["--max-model-len"].flag.split()[1].replace(",", ""))
    assert 23_648 <= mml < 29_000                    # the engine's room is 23,648 tokens; the book's 4.5 % more
    u = float(flags["--gpu-memory-utilization"].flag.split()[1])
    assert 0.9 < u <= 0.95


def test_sampler_oom_is_the_fp32_probabilities_of_max_num_seqs_requests():
    # vLLM 0.19.0's gpt-oss-20b start on an H100 failed after its graphs: the sampler's warm-up
    # (1,024 requests x 201,088 logits x 4 B = 785.5 MiB; torch asked 786.00) found 552.5 MiB free
    ex = _explain(CORPUS[7])[0]
    row = {r.term: r for r in ex.rows}["sampler"]
    assert (row.engine, round(row.book, 2)) == (786.0, 785.5)
    flags = [c.flag for c in ex.changes]
    assert flags == ["--max-num-seqs 720", "--gpu-memory-utilization 0.94", "--enforce-eager"]


def test_cli_json_and_bad_input(tmp_path, capsys):
    log = LOGS / "vllm-issue-10517-llama31-8b-rtx3090.log"
    assert main(["explain", str(log), "--config", str(DATA / "Llama-3.1-8B-Instruct"), "--hardware", RTX3090,
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out) == 2 and out[1]["error"]["kind"] == "max_seq_len" and out[1]["changes"]
    # "printed" holds the text's pieces unwrapped (the web page draws them): the same words
    text = explain_text(log.read_text(), config=str(DATA / "Llama-3.1-8B-Instruct"), hardware=RTX3090)
    words = [w for part in out for line in part["printed"]["head"] + part["printed"]["tail"] for w in line.split()]
    words += [w for part in out for c in part["printed"]["cells"] for k in ("label", "engine", "book", "diff", "why")
              for w in c[k].split()]
    assert all(w in text.split() for w in words)
    assert [c["engine"] for c in out[1]["printed"]["cells"]][-3:] == ["1,478", "23,648", "0.82"]
    for data, msg in [(b"", "nothing to read"), (b"\x00\x01\x02" * 100, "not text"),
                      (b"llama_model_loader: - kv 0\n", "llama.cpp"), (b"hello\n", "no vLLM or SGLang line")]:
        p = tmp_path / "in.log"
        p.write_bytes(data)
        t = time.perf_counter()
        assert main(["explain", str(p), "--hardware", "H100-SXM"]) == 2
        assert msg in capsys.readouterr().err and time.perf_counter() - t < 1.0
    assert main(["explain", str(log)]) == 2
    assert "give --config" in capsys.readouterr().err
    assert main(["explain", str(log), "--config", "Llama-3-8B"]) == 2
    assert "give --hardware" in capsys.readouterr().err


def test_cli_reads_standard_input_and_a_50_mb_log_within_a_second(tmp_path):
    big = tmp_path / "big.log"
    head = (LOGS / "gateway-api-inference-extension-pr550-h100.log").read_bytes()
    line = b"INFO 03-21 20:16:01 [metrics.py:455] Avg prompt throughput: 0.0 tokens/s, Running: 1 reqs\n"
    big.write_bytes(head + line * (50_000_000 // len(line)))
    t = time.perf_counter()
    res = explain(big.read_bytes()[:3_000_000], config="Llama-2-7B", hardware="H100-SXM")
    assert time.perf_counter() - t < 1.0 and res[0].rows
    proc = subprocess.run([sys.executable, "-m", "llm_dataflow", "explain", "-", "--config", "Llama-2-7B",
                           "--hardware", "H100-SXM"], input=big.read_bytes(), capture_output=True, timeout=60,
                          env={"PYTHONPATH": str(ROOT / "src"), "PATH": ""})
    assert proc.returncode == 0, proc.stderr
    assert b"read the first 2,000,000 bytes" in proc.stdout


def test_readme_shows_a_real_failed_start_explained():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    start = readme.index("<!-- explain-example -->")
    block = readme[start:].split("```")[3].removeprefix("text")   # the output block after the command
    got = explain_text((LOGS / "vllm-issue-10517-llama31-8b-rtx3090.log").read_text(),
                       config=str(DATA / "Llama-3.1-8B-Instruct"), hardware=RTX3090)
    run2 = got[got.index("run 2 of 2"):]
    assert block.strip() == run2.strip()


def test_chapter06_reads_the_10517_log_with_the_package_numbers():
    """Chapter 06's section 7 walks issue #10517's failed start line by line: its cell holds the
    log's lines verbatim (they are in the stored log), Llama-3-8B's shapes give the same table as
    the real Llama-3.1-8B-Instruct config.json, and every number its prose states is the one the
    package computes here."""
    nb = json.loads((ROOT / "notebooks" / "06_attention_kv_cache.ipynb").read_text(encoding="utf-8"))
    cells = ["".join(c["source"]) for c in nb["cells"]]
    start = next(i for i, c in enumerate(cells) if c.startswith("## 7. Reading an engine's startup log"))
    end = next(i for i, c in enumerate(cells) if c.startswith("## Summary"))
    code = next(c for c in cells[start:end] if "LOG = " in c)
    ns = {"ldf": ldf, "llama3": ldf.model_config("Llama-3-8B")}
    exec(code.replace("print(ex.table())", ""), ns)   # the cell's own lines: LOG, the config, the GPU
    assert ns["LOG"] in (LOGS / "vllm-issue-10517-llama31-8b-rtx3090.log").read_text(), "not the log as posted"
    ex = ns["ex"]
    real = explain(ns["LOG"], config=str(DATA / "Llama-3.1-8B-Instruct"), hardware=ns["rtx3090"])[0]
    assert ex.table() == real.table()
    prose = "\n".join(cells[start:end]).replace("\n   ", " ").replace("\n", " ")
    rows = {r.term: r for r in ex.rows}
    gib = lambda v: f"{v:.2f}"                                               # noqa: E731
    total, util = rows["total_memory"].engine, ex.settings["gpu_memory_utilization"].value
    w, act, nt, kv = (rows[k] for k in ("weights", "activations", "non_torch", "kv_memory"))
    peak = 17.98                                                             # the log's peak_torch_memory
    assert f"peak_torch_memory={peak}GiB" in ns["LOG"]
    params = ldf.param_count(ns["llama31"])
    flags = {c.flag.split()[0]: c for c in ex.changes}
    mml = int(flags["--max-model-len"].flag.split()[1])
    u = float(flags["--gpu-memory-utilization"].flag.split()[1])
    kv_at_mml = float(flags["--max-model-len"].result.split("(")[1].split(" GiB")[0])
    seq_bytes = ldf.kv_cache_bytes(ns["llama31"], 29_000, batch=1, dtype="bf16")
    blocks, tokens = int(rows["gpu_blocks"].engine), int(rows["kv_tokens"].engine)
    want = [
        f"{params / 1e9:.2f} billion parameters at 2 B each: {gib(w.book)} GiB, {abs(100 * w.diff):.1f} % less",
        f"{util:.2f} × {total} = {gib(util * total)} GiB",
        f"{peak} − {gib(w.engine)} = {gib(act.engine)} GiB; the book's estimate is {gib(act.book)} GiB",
        f"estimate it from other logs: {gib(nt.book)} GiB",
        f"{gib(util * total)} − {peak} − {gib(nt.engine)} = {gib(kv.engine)} GiB",
        f"{gib(kv.book)} GiB, {100 * kv.diff:.1f} % more",
        f"16 tokens at {ldf.kv_bytes_per_token(ns['llama31']) // 1024} KiB each",
        f"{blocks:,} × 16 = {tokens:,} tokens", f"{tokens:,} ÷ 29,000",
        f"29,000 tokens needs {ldf.fmt_gib(seq_bytes)}, more than its {gib(kv.book)} GiB of room",
        f"{gib(act.engine - act.book)} in the activation",
        f"--max-model-len {mml}", f"frees {gib(kv_at_mml - kv.engine)} GiB",
        f"to {u:.2f} adds {gib((u - util) * total)} GiB", f"leaves {gib((1 - u) * total)} GiB outside",
        f"holds {flags['--kv-cache-dtype'].result.split(', ')[1].split(' sequences')[0]} sequences of 29,000",
        f"holds {flags['--tensor-parallel-size'].result.split(', ')[1].split(' sequences')[0]} of them",
    ]
    for s in want:
        assert s in prose, s
    assert max(abs(r.diff) for r in ex.rows if r.diff is not None) < 0.05      # "within 5 %"
    assert "within 5 %" in prose
    assert f"{ldf.fmt_gib(seq_bytes)}" == "3.54 GiB" and 1 < util * total / 21.22 < 1.001
