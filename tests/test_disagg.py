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


def test_transfer_is_sharded_by_tp_one_nic_per_gpu():
    # Llama-3.1-70B, 8,192 prompt tokens, BF16: 80 layers x 2 x 8 KV heads x 128 x 2 B per token
    cfg = ldf.model_config("Llama-3.1-70B")
    kv = ldf.kv_cache_bytes(cfg, 8192, 1, "bf16")
    assert kv == 80 * 2 * 8 * 128 * 2 * 8192 == 2_684_354_560
    lat, bw = ldf.link("InfiniBand-NDR").latency_s, ldf.link("InfiniBand-NDR").bandwidth_per_direction
    t8 = ldf.kv_transfer_time(cfg, 8192, "InfiniBand-NDR", tp=8)            # each GPU its 1/8 on its own NIC
    assert t8 == pytest.approx(lat + kv / 8 / bw) and round(t8 * 1e3, 1) == 6.7
    t1 = ldf.kv_transfer_time(cfg, 8192, "InfiniBand-NDR", tp=8, nics=1)   # everything through one port
    assert t1 == pytest.approx(lat + kv / bw) and round(t1 * 1e3, 1) == 53.7
    assert ldf.kv_transfer_time(cfg, 8192, "InfiniBand-NDR", tp=8, nics=2) == pytest.approx(lat + kv / 2 / bw)
    # TP 16 > 8 KV heads: replicas are not resent, 8 distinct shards on 8 of the 16 NICs
    assert ldf.kv_transfer_time(cfg, 8192, "InfiniBand-NDR", tp=16) == pytest.approx(t8)
    # MLA: the latent is replicated on every rank, one shard whatever the TP
    ds = ldf.model_config("DeepSeek-V3")
    assert ldf.kv_transfer_time(ds, 1024, "InfiniBand-NDR", tp=8) == pytest.approx(
        ldf.kv_transfer_time(ds, 1024, "InfiniBand-NDR"))
    rows = ldf.kv_transfer_table(cfg, 8192, links=("InfiniBand-NDR",), tp=8)
    assert rows[0]["transfer s"] == t8
    assert rows[0]["ideal prefill s"] == pytest.approx(ldf.prefill_flops(cfg, 8192) / (8 * 989.4e12))


def test_bad_input():
    with pytest.raises(ValueError, match="world_size"):
        ldf.disagg_worker(0, 3, "tiny-llama", 0, [1, 2], 2)
    with pytest.raises(ValueError, match="prompt_len"):
        ldf.kv_transfer_time("tiny-llama", 0, "NVLink4")
    with pytest.raises(ValueError, match="link"):
        ldf.kv_transfer_time("tiny-llama", 4, "carrier-pigeon")
    with pytest.raises(ValueError, match="nics"):
        ldf.kv_transfer_time("Llama-3.1-70B", 4, "NVLink4", tp=8, nics=0)
    with pytest.raises(ValueError):
        ldf.kv_transfer_time("Llama-3.1-70B", 4, "NVLink4", tp=3)           # 3 does not divide 64 heads
    with pytest.raises(ValueError, match="dtype"):
        ldf.run_disaggregated("tiny-llama", [1], 2, dtype="int3")
