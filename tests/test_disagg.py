"""Tests of llm_dataflow.disagg: two-process prefill/decode equals the single engine; KV bytes and link times."""
import pytest

import llm_dataflow as ldf


def test_disaggregated_equals_single_engine():
    prompt = [7, 3, 250, 11, 42, 9, 9, 100, 1, 64, 200]  # 11 tokens: an irregular length
    r = ldf.run_disaggregated("tiny-llama", prompt, 9, seed=5, timeout_s=120.0)
    assert r["tokens"] == ldf.single_engine("tiny-llama", 5, prompt, 9)
    cfg = ldf.model_config("tiny-llama")
    assert r["kv_bytes"] == r["decode"]["kv_bytes_received"] == ldf.kv_cache_bytes(cfg, 11, 1, "fp32") == r["kv_cache_bytes"]
    assert len(r["decode"]["itl_s"]) == 8


def test_transfer_time_alpha_beta():
    cfg = ldf.model_config("Llama-3-8B")
    nbytes = ldf.kv_cache_bytes(cfg, 4096, 1, "bf16")
    assert nbytes == 32 * 4096 * 2 * 8 * 128 * 2  # 512 MiB
    t = ldf.kv_transfer_time(cfg, 4096, "NVLink4", "bf16")
    assert t == pytest.approx(1e-6 + nbytes / 450e9)
    rows = ldf.kv_transfer_table("Llama-3-8B", 4096, links=("NVLink4", "InfiniBand-NDR"))
    assert [r["link"] for r in rows] == ["NVLink4", "InfiniBand-NDR"]
    assert rows[1]["transfer s"] > rows[0]["transfer s"]


def test_bad_input():
    with pytest.raises(ValueError, match="world_size"):
        ldf.disagg_worker(0, 3, "tiny-llama", 0, [1, 2], 2)
    with pytest.raises(ValueError, match="prompt_len"):
        ldf.kv_transfer_time("tiny-llama", 0, "NVLink4")
    with pytest.raises(ValueError, match="link"):
        ldf.kv_transfer_time("tiny-llama", 4, "carrier-pigeon")
    with pytest.raises(ValueError, match="dtype"):
        ldf.run_disaggregated("tiny-llama", [1], 2, dtype="int3")
