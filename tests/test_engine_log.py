"""Reading vLLM and SGLang command lines and startup logs (``core/engine_args.py``,
``core/engine_log.py``): every stored log's real format, interleaved ranks, truncated logs, several
starts in one paste, and the bad inputs (empty, binary, another engine's log, a 50 MB log), each
with a clear message within a second and never a traceback.

The logs are in ``tests/data/logs/``, each with its address in ``tests/data/README.md``.
"""
import pathlib
import time

import pytest

from llm_dataflow.core.engine_args import engine_defaults, find_command, parse_command
from llm_dataflow.core.engine_log import MAX_BYTES, read_engine_text

GiB = 2**30
LOGS = pathlib.Path(__file__).resolve().parent / "data" / "logs"


def read(name):
    return read_engine_text((LOGS / name).read_bytes())


def gib(run, name):
    return round(run.figure(name).value / GiB, 4)


# --- command lines ------------------------------------------------------------------------------
def test_vllm_serve_flags_dashes_underscores_and_equals():
    cmd = parse_command("CUDA_VISIBLE_DEVICES=0,1 VLLM_USE_V1=1 vllm serve meta-llama/Llama-3.1-8B-Instruct \\\n"
                        "  --tensor_parallel_size 2 --gpu-memory-utilization=0.95 --max-model-len 32768 \\\n"
                        "  --kv-cache-dtype fp8 --enforce-eager --enable-expert-parallel -q awq --max-num-seqs 64")
    assert cmd.engine == "vllm" and cmd.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert cmd.settings == {"tensor_parallel_size": 2, "gpu_memory_utilization": 0.95, "max_model_len": 32768,
                            "kv_cache_dtype": "fp8", "enforce_eager": True, "enable_expert_parallel": True,
                            "quantization": "awq", "max_num_seqs": 64}
    assert cmd.env == {"CUDA_VISIBLE_DEVICES": "0,1", "VLLM_USE_V1": "1"}


def test_max_model_len_with_vllms_suffixes():
    # vLLM reads --max-model-len with engine/arg_utils.py's human_readable_int: k, m, g decimal
    # (decimals allowed), K, M, G binary (whole numbers only); tim-roethig/ai-platform's 8 x L40S
    # command passes '--max-model-len 32K' and its log says "Using max model len 32768"
    got = {v: parse_command(f"vllm serve m --max-model-len {v}").settings["max_model_len"]
           for v in ("32K", "32k", "25.6k", "1M", "131072")}
    assert got == {"32K": 32768, "32k": 32000, "25.6k": 25600, "1M": 1048576, "131072": 131072}


def test_vllm_model_after_its_switches_and_the_api_server_module():
    # vllm-project/vllm issue #13061's command: switches first, the model last
    cmd = parse_command("vllm serve --trust-remote-code --tensor_parallel_size 2 --gpu_memory_utilization=0.98  "
                        "/root/autodl-tmp/deepseek-ai/DeepSeek-R1-Distill-Qwen-14B")
    assert cmd.model.endswith("DeepSeek-R1-Distill-Qwen-14B") and cmd.settings["tensor_parallel_size"] == 2
    cmd = parse_command("python -m vllm.entrypoints.openai.api_server --model data/Qwen1.5-14B-Chat --host 0.0.0.0 "
                        "--port 30005 --dtype half --gpu-memory-utilization 0.95")
    assert cmd.model == "data/Qwen1.5-14B-Chat" and cmd.settings["dtype"] == "half"
    assert cmd.other["port"] == "30005"


def test_docker_image_tag_gives_the_version():
    cmd = parse_command("docker run --gpus all vllm/vllm-openai:v0.10.1 --model openai/gpt-oss-120b --no-enforce-eager")
    assert (cmd.engine, cmd.version, cmd.model, cmd.settings["enforce_eager"]) == ("vllm", "0.10.1", "openai/gpt-oss-120b", False)


def test_sglang_launch_server_aliases():
    cmd = parse_command("python3 -m sglang.launch_server --model /path/to/Qwen3-235B-A22B-FP8 --tp 4 --trust-remote-code "
                        "--host 0.0.0.0 --port 8000 --mem-fraction-static 0.93")
    assert cmd.engine == "sglang" and cmd.model == "/path/to/Qwen3-235B-A22B-FP8"
    assert cmd.settings["tp_size"] == 4 and cmd.settings["mem_fraction_static"] == 0.93


@pytest.mark.parametrize("text, message", [
    ("ls -la /models", "no engine command found: expected 'vllm serve MODEL"),
    ("vllm serve m --max-model-len 32x", "max_model_len='32x' (--max-model-len) is not allowed; give an integer"),
    ("vllm serve m --max-model-len 1.5K", "or one with a suffix: 32k = 32,000, 32K = 32,768"),
    ("vllm serve m --max-num-seqs 1k", "max_num_seqs='1k' (--max-num-seqs) is not allowed; give an integer"),
    ("vllm serve m --gpu-memory-utilization high", "gpu_memory_utilization='high'"),
    ("vllm serve m --max-num-seqs", "max_num_seqs: the flag --max-num-seqs has no value"),
    ("vllm serve 'm --tp 2", "a quote left open"),
])
def test_bad_command_lines_say_what_is_wrong(text, message):
    with pytest.raises(ValueError, match=None) as exc:
        parse_command(text)
    assert message in str(exc.value)


def test_engine_defaults_per_version_and_gpu():
    h100 = engine_defaults("vllm", "0.10.1", gpu_memory_gib=79.19, gpu_name="NVIDIA H100 80GB HBM3")
    a100 = engine_defaults("vllm", "0.10.1", gpu_memory_gib=79.25, gpu_name="NVIDIA A100-SXM4-80GB")
    assert (h100["max_num_batched_tokens"].value, h100["max_num_seqs"].value) == (8192, 1024)
    assert (a100["max_num_batched_tokens"].value, a100["max_num_seqs"].value) == (2048, 256)
    assert "PR #17885" in a100["max_num_seqs"].source
    v0 = engine_defaults("vllm", "0.6.4", max_model_len=20000)
    assert v0["max_num_batched_tokens"].value == 20000 and v0["gpu_memory_utilization"].value == 0.9
    # SGLang 0.4: the fraction by TP, the chunk by GPU memory (the QwQ log prints both: 0.85, 2,048)
    sg = engine_defaults("sglang", "0.4.3", tp=4, gpu_memory_gib=22.05)
    assert (sg["mem_fraction_static"].value, sg["chunked_prefill_size"].value) == (0.85, 2048)
    assert engine_defaults("sglang", "0.4", tp=8)["mem_fraction_static"].value == 0.81
    with pytest.raises(ValueError, match="engine='tgi' is not allowed"):
        engine_defaults("tgi")


def test_command_inside_a_log_is_found():
    text = (LOGS / "sglang-0.4.3-qwq-32b-4xl4.log").read_text()
    cmd = find_command(text)
    assert cmd.engine == "sglang" and cmd.settings["tp_size"] == 4


# --- the logs' formats ----------------------------------------------------------------------------
def test_vllm_v0_blocks_format_ranks_and_a_capture_cut_short():
    lg = read("vllm-issue-7593-gemma2-9b-8xl4-graph-oom.log")
    assert (lg.engine, lg.era, len(lg.runs)) == ("vllm", "vllm-v0", 1)
    run = lg.runs[0]
    assert len(run.ranks) == 7                         # the driver and six worker processes in the excerpt
    assert gib(run, "weights") == 2.3463 and run.figure("gpu_blocks").value == 22982
    assert run.figure("cpu_blocks").value == 6241
    assert run.error is None and run.stage == "KV cache sized"


def test_vllm_064_memory_profiling_results_and_two_runs_in_one_paste():
    lg = read("vllm-issue-10517-llama31-8b-rtx3090.log") if (LOGS / "vllm-issue-10517-llama31-8b-rtx3090.log").exists() \
        else pytest.skip("issue 42's log not merged yet")
    ok, bad = lg.runs
    assert gib(ok, "total_memory") == 23.58 and gib(ok, "peak_torch") == 17.06 and ok.figure("gpu_blocks").value == 1952
    assert bad.error.kind == "max_seq_len" and bad.error.numbers == {"max_model_len": 29000, "kv_tokens": 23648}


def test_vllm_065_comma_form_and_the_pr12126_one_line_form():
    run = read("vllm-pr10909-bamba-h100-0.6.5.log").runs[0]
    assert gib(run, "total_memory") == 79.15 and gib(run, "kv_memory") == 34.78     # the rank with less room
    assert run.figure("gpu_memory_utilization").value == 0.9 and run.figure("max_concurrency").value == 2967.89
    run = read("vllm-pr12126-llama32-11b-vision-h100.log").runs[0]
    assert (gib(run, "budget"), gib(run, "weights"), gib(run, "non_torch"), gib(run, "activations"),
            gib(run, "kv_memory")) == (71.29, 19.86, 0.16, 36.63, 14.65)
    assert run.figure("gpu_blocks").value == 6001


def test_vllm_v1_lines_and_the_kv_short_failure():
    lg = read("vllm-issue-25350-fp8-kv-v1.log")
    assert lg.era == "vllm-v1"
    run = lg.runs[0]
    assert gib(run, "kv_memory") == 10.55 and run.figure("kv_tokens").value == 230528
    assert run.figure("concurrency_tokens").value == 100000 and run.figure("max_concurrency").value == 2.31
    assert run.error.kind == "kv_short"
    assert run.error.numbers["max_model_len"] == 221000 and run.error.numbers["estimated_max_len"] == 122080
    assert run.error.numbers["available"] == pytest.approx(5.59 * GiB)
    # both of PR #13596's forms: '# GPU blocks: N' (0.7) and 'GPU KV cache size: N tokens' (0.8 on)
    run = read("vllm-pr13596-v1-kv-size-format.log").runs[0]
    assert run.figure("gpu_blocks").value == 127626 and run.figure("kv_tokens").value == 2042016


def test_vllm_019_debug_lines_and_the_sampler_oom():
    lg = read("vllm-0.19-gpt-oss-20b-h100-sampler-oom-excerpt.log")
    assert (lg.version, lg.era, lg.model) == ("0.19.0", "vllm-v1", "openai/gpt-oss-20b")
    run = lg.runs[0]
    assert (gib(run, "total_memory"), gib(run, "budget"), gib(run, "weights"), gib(run, "activations"),
            gib(run, "non_torch"), gib(run, "cuda_graph"), gib(run, "kv_memory")) == (
        79.19, 75.23, 13.64, 2.87, 0.25, 1.84, 58.47)
    assert gib(run, "cuda_graph_estimate") == 1.3
    assert run.settings["max_num_seqs"].value == 1024 and run.settings["quantization"].value == "mxfp4"
    # the OOM line comes first, the RuntimeError naming the sampler after it: the cause is the latter
    assert run.error.kind == "oom_sampler"
    assert run.error.numbers["max_num_seqs"] == 1024 and run.error.numbers["tried"] == 786 * 2**20
    assert run.error.numbers["free"] == pytest.approx(552.5 * 2**20)


def test_negative_kv_memory_and_engine_core_prefixes():
    run = read("vllm-issue-23278-gpt-oss-120b-h100-0.10.1-start.log").runs[0]
    assert list(run.ranks) == ["EngineCore_0"] and gib(run, "kv_memory") == -2.14
    assert gib(run, "weights") == 65.9651 and run.error.kind == "failed"
    run = read("vllm-issue-27508-gpt-oss-120b-h100-traceback.log").runs[0]
    assert run.error.kind == "no_cache_memory"
    lg = read("vllm-0.15.1-llama31-8b-a100-40gb-eager.log")
    assert lg.version == "0.15.1" and lg.runs[0].settings["enforce_eager"].value is True


def test_sglang_interleaved_tp_ranks_and_server_args():
    lg = read("sglang-0.4.3-qwq-32b-4xl4.log")
    assert (lg.engine, lg.era, lg.model, len(lg.runs)) == ("sglang", "sglang", "/home/model/Qwen/QwQ-32B", 1)
    run = lg.runs[0]
    assert sorted(run.ranks) == ["TP0", "TP1", "TP2", "TP3"]
    assert (gib(run, "free_before_load"), gib(run, "weights"), gib(run, "free_after_load"), gib(run, "k_size"),
            gib(run, "cuda_graph"), gib(run, "dist_init")) == (21.63, 15.54, 6.09, 1.42, 0.93, 0.13)
    assert run.figure("max_total_num_tokens").value == 46611 and run.figure("context_len").value == 131072
    assert run.settings["mem_fraction_static"].value == 0.85 and run.settings["mem_fraction_static"].origin == "log"
    assert run.settings["chunked_prefill_size"].value == 2048 and run.settings["tp_size"].value == 4


def test_sglang_pool_of_a_b200_and_tp8_weights_of_mlcommons():
    run = read("sglang-pr11830-b200-pool.log").runs[0]
    assert run.figure("max_total_num_tokens").value == 2243474 and gib(run, "cuda_graph") == 1.44
    run = read("vllm-mlcommons-2267-llama31-8b-tp8.log").runs[0]
    assert len(run.ranks) == 7 and gib(run, "weights") == 1.9028
    assert run.figure("concurrency_tokens").value == 131072


def test_ansi_colours_and_every_rank_prefix():
    text = ("\x1b[1;36m(VllmWorkerProcess pid=1786)\x1b[0;0m INFO 02-11 model_runner.py:1115] Loading model weights took 13.9476 GB\n"
            "[1;36m(VllmWorkerProcess pid=1787)[0;0m INFO 02-11 model_runner.py:1115] Loading model weights took 13.9476 GB\n"
            "(Worker_TP1 pid=148) INFO 05-14 [gpu_worker.py:460] Available KV cache memory: 15.72 GiB\n"
            "(VllmWorker rank=3 pid=1090) INFO 06-05 [gpu_worker.py:1] Available KV cache memory: 15.70 GiB\n"
            "(RayWorkerWrapper pid=5121, ip=10.0.0.2) INFO 08-01 model_runner.py:1] Loading model weights took 13.9476 GB\n"
            "(Worker_PP1_TP0 pid=77) INFO 05-14 [gpu_worker.py:460] Available KV cache memory: 15.71 GiB\n")
    run = read_engine_text(text).runs[0]
    assert sorted(run.ranks) == ["PP1 TP0", "TP1", "pid 1786", "pid 1787", "pid 5121@10.0.0.2", "rank 3"]
    assert gib(run, "kv_memory") == 15.70


def test_per_worker_kv_reports_and_the_free_memory_summary_are_one_start():
    # vLLM 0.10.2 at TP 8 with EP: the engine core prints "GPU KV cache size" and "Maximum
    # concurrency" once per worker (eight, 237,344 to 238,256 tokens) and sizes the cache by the
    # least; after the graphs each worker prints 0.10.2's "Free memory on device" summary
    lg = read("vllm-0.10.2-qwen3-235b-fp8-8xl40s-ep8-excerpt.log")
    assert (lg.version, lg.era, len(lg.runs)) == ("0.10.2", "vllm-v1", 1)
    run = lg.runs[0]
    assert {f"TP{i} EP{i}" for i in range(8)} <= set(run.ranks)          # '(Worker_TP3_EP3 pid=…)'
    assert run.figure("kv_tokens").value == 237344 and run.figure("max_concurrency").value == 7.24
    assert (gib(run, "weights"), gib(run, "kv_memory"), gib(run, "total_memory"), gib(run, "budget"),
            gib(run, "activations"), gib(run, "non_torch"), gib(run, "cuda_graph")) == (
        27.7183, 10.64, 44.42, 39.98, 1.4, 0.21, 3.45)
    assert run.settings["enable_expert_parallel"].value is True and run.settings["max_num_batched_tokens"].value == 2048
    assert lg.command.settings["max_model_len"] == 32768                   # '--max-model-len 32K'


def test_ray_workers_on_several_nodes_and_deduplicated_lines():
    # vLLM 0.10.1.1 over Ray on four A100 nodes: '(EngineCore_0 pid=…) (RayWorkerWrapper pid=345,
    # ip=…)', one pid on two nodes, and Ray's "[repeated 3x across cluster]" lines: one start
    lg = read("vllm-0.10.1.1-gpt-oss-120b-4xa100-80gb-ray-excerpt.log")
    assert (lg.version, lg.model, len(lg.runs)) == ("0.10.1.1", "gpt-oss-120b", 1)
    run = lg.runs[0]
    assert {"pid 345@10.42.11.243", "pid 345@10.42.9.225", "pid 343@10.42.9.224", "pid 1273"} <= set(run.ranks)
    assert (gib(run, "weights"), gib(run, "kv_memory"), gib(run, "cuda_graph")) == (17.2217, 45.32, 1.88)
    assert run.figure("kv_tokens").value == 2640144 and run.settings["quantization"].value == "mxfp4"


def test_a_version_command_pasted_before_the_log_and_a_banner_version():
    lg = read("vllm-0.10.2-qwen3-30b-a3b-fp8-2xl40s-ep2-excerpt.log")     # 'vllm --version' then '0.10.2'
    assert lg.version == "0.10.2" and lg.command.settings["enable_expert_parallel"] is True
    lg = read("vllm-0.16.0-llama3-70b-awq-2xl40s.log")                    # the 0.16 banner's 'version 0.16.0'
    assert (lg.version, lg.runs[0].settings["quantization"].value) == ("0.16.0", "awq_marlin")
    assert gib(lg.runs[0], "weights") == 18.55 and gib(lg.runs[0], "cuda_graph") == 1.22


def test_an_oom_during_graph_capture_is_named_as_such():
    text = ((LOGS / "vllm-issue-7593-gemma2-9b-8xl4-graph-oom.log").read_text() + "`\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of "
            "21.96 GiB of which 3.06 MiB is free.\n")
    err = read_engine_text(text).runs[0].error
    assert err.kind == "oom_capture" and err.numbers["tried"] == 20 * 2**20
    assert err.numbers["total"] == pytest.approx(21.96 * GiB)


def test_a_truncated_log_says_where_it_stops():
    text = (LOGS / "sglang-0.4.3-qwq-32b-4xl4.log").read_text()
    cut = text[: text.index("KV Cache is allocated") - 30]
    lg = read_engine_text(cut)
    assert lg.runs[0].stage == "weights loaded"
    assert any("stops after line" in n and "KV Cache is allocated" in n for n in lg.notes)
    assert any("no line end" in n for n in lg.notes)


# --- bad inputs: a clear message within a second ----------------------------------------------------
@pytest.mark.parametrize("data, message", [
    ("", "nothing to read: the input is empty"),
    ("  \n\t\n", "nothing to read: the input is empty"),
    (b"\x7fELF\x02\x01\x01\x00\x00\x00" + bytes(range(256)) * 40, "this is not text (a binary file"),
    (bytes(range(128, 256)) * 200, "this is not text"),
    ("llama_model_loader: loaded meta data with 42 key-value pairs\nllm_load_tensors: offloaded 49/49 layers to GPU\n",
     "this looks like a llama.cpp log (line 1"),
    ("2024-01-01T00:00:00Z INFO text_generation_launcher: Args { model_id: \"x\" }\n", "Hugging Face TGI log"),
    ("hello, why does my server not start?\n", "no vLLM or SGLang line found in 1 lines"),
])
def test_bad_input_gets_a_clear_message(data, message):
    t = time.perf_counter()
    with pytest.raises(ValueError) as exc:
        read_engine_text(data)
    assert message in str(exc.value)
    assert "Expected" in str(exc.value) or "expected" in str(exc.value) or "Paste" in str(exc.value)
    assert time.perf_counter() - t < 1.0


def test_a_50_mb_log_is_read_in_part_within_a_second():
    head = (LOGS / "sglang-0.4.3-qwq-32b-4xl4.log").read_bytes()
    line = (b"[2025-03-08 12:29:30 TP0] Decode batch. #running-req: 12, #token: 4011, token usage: 0.09, "
            b"gen throughput (token/s): 151.20, #queue-req: 0\n")
    data = head + line * (50_000_000 // len(line))
    t = time.perf_counter()
    lg = read_engine_text(data)
    assert time.perf_counter() - t < 1.0
    assert lg.runs[0].figure("max_total_num_tokens").value == 46611
    assert lg.notes[0].startswith(f"read the first {MAX_BYTES:,} bytes of {len(data):,}")
