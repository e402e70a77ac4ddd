"""Chapter 00 ledger/tiers and chapter 01 loading: exact bytes, real files."""
import json
import os
import shutil

import pytest
import torch
from safetensors import safe_open

import llm_dataflow as ldf


def test_ledger_llama2_by_hand():
    cfg = ldf.model_config("Llama-2-7B")
    rows = ldf.request_ledger(cfg, prompt_len=512, output_len=128)
    by = {(r.phase, r.item): r for r in rows}
    # all weights but the embedding table, which is gathered: one 4096-wide row per token
    wb = (6_738_415_616 - 32000 * 4096) * 2 + 4096 * 2
    assert by[("decode", "weights (once per step)")].total == 127 * wb          # 127 decode steps
    assert by[("prefill", "weights (one pass for all prompt tokens)")].total == wb + 511 * 4096 * 2
    kv_tok = 32 * 32 * 128 * 2 * 2                                               # L × H_kv × d_h × (K,V) × 2 B
    assert kv_tok == 524_288
    assert by[("prefill", "KV written")].total == 512 * kv_tok
    # decode step i reads 512 + i − 1 tokens of history, i = 1..127
    assert by[("decode", "KV history read (sum over the steps)")].total == sum(512 + i - 1 for i in range(1, 128)) * kv_tok
    assert by[("prefill", "prompt token IDs (host → device)")].total == 512 * 4                  # INT32 IDs
    totals = ldf.movement_totals(rows)
    assert totals["GPU↔GPU"] == 0 and sum(totals.values()) == sum(r.total for r in rows)


def test_ledger_bad_input():
    cfg = ldf.model_config("tiny-llama")
    with pytest.raises(ValueError, match="prompt_len=0"):
        ldf.request_ledger(cfg, 0, 4)
    with pytest.raises(ValueError, match="id_dtype='int8'"):
        ldf.request_ledger(cfg, 4, 4, id_dtype="int8")


def test_memory_tiers_h100():
    tiers = {t.tier: t for t in ldf.memory_tiers("H100-SXM")}
    assert tiers["HBM"].bandwidth == 3.35e12 and tiers["HBM"].capacity_bytes == 80e9
    # 128 B/clock/SM × 132 SMs × 1.83 GHz (the clock the 989.4 TFLOP/s dense peak implies)
    assert tiers["shared memory / L1"].bandwidth == pytest.approx(128 * 132 * 1.83e9)
    assert "TMEM" in {t.tier for t in ldf.memory_tiers("B200")}
    assert "TMEM" not in tiers


def test_minilm_header_by_hand_matches_safe_open():
    path = ldf.minilm_checkpoint()
    n, tensors, meta = ldf.read_safetensors_header(path)
    raw = path.read_bytes()[:8]
    assert n == int.from_bytes(raw, "little")
    with safe_open(path, framework="pt") as f:
        assert set(f.keys()) == set(tensors)
        for name in ("embeddings.word_embeddings.weight", "encoder.layer.0.attention.self.query.weight"):
            t = f.get_tensor(name)
            assert list(t.shape) == tensors[name]["shape"]
            b, e = tensors[name]["data_offsets"]
            assert e - b == t.numel() * t.element_size()
    last_end = max(i["data_offsets"][1] for i in tensors.values())
    assert 8 + n + last_end == path.stat().st_size


def test_lazy_read_touches_only_its_pages(tmp_path):
    # A private copy: the page cache is per file, and under xdist another worker may be reading
    # the package's MiniLM file at the same moment (its pages would count as this read's).
    path = tmp_path / "model.safetensors"
    shutil.copyfile(ldf.minilm_checkpoint(), path)
    with open(path, "rb+") as f:
        os.fsync(f.fileno())    # written back, so the eviction before the read can drop its pages
    name = "embeddings.word_embeddings.weight"
    r = ldf.read_rows_lazily(path, name, slice(1000, 1010))
    with safe_open(path, framework="pt") as f:
        ref = f.get_slice(name)[1000:1010]
    torch.testing.assert_close(r.tensor, ref, rtol=0, atol=0)
    assert r.bytes_requested == 10 * 384 * 4
    assert r.pages_resident_after - r.pages_resident_before <= r.pages_expected
    with pytest.raises(ValueError, match="name='nope'"):
        ldf.read_rows_lazily(path, "nope", slice(0, 1))


def test_sharded_roundtrip(tmp_path):
    torch.manual_seed(0)
    cfg = ldf.model_config("tiny-llama")
    sd = {t.name: torch.randn(t.shape) for t in ldf.tensor_specs(cfg)}
    total = sum(v.numel() * 4 for v in sd.values())
    paths = ldf.write_sharded_checkpoint(sd, tmp_path, max_shard_bytes=total // 3)
    assert len(paths) >= 3 and paths[0].name.startswith("model-00001-of-")
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] == total and set(index["weight_map"]) == set(sd)
    loaded, shards = ldf.load_sharded_checkpoint(tmp_path, dtype=torch.bfloat16)
    assert set(loaded) == set(sd) and all(v.dtype == torch.bfloat16 for v in loaded.values())
    torch.testing.assert_close(loaded["lm_head.weight"], sd["lm_head.weight"].to(torch.bfloat16))
    info = ldf.inspect_checkpoint(tmp_path)
    assert info["params"] == ldf.param_count(cfg) and info["tensor_bytes"] == total
    with pytest.raises(ValueError, match="max_shard_bytes=0"):
        ldf.write_sharded_checkpoint(sd, tmp_path, 0)


def test_capacity_and_env(monkeypatch, tmp_path):
    row = ldf.capacity("Llama-2-7B", "bf16")
    assert row["weight bytes"] == 13_476_831_232 and row["GB (1e9)"] == 13.48 and row["GiB (2^30)"] == 12.55
    with pytest.raises(ValueError, match="fmt='fp12'"):
        ldf.capacity("Llama-2-7B", "fp12")
    monkeypatch.delenv("LDF_CHECKPOINT_DIR", raising=False)
    assert ldf.checkpoint_dir_from_env() is None
    monkeypatch.setenv("LDF_CHECKPOINT_DIR", str(tmp_path))
    assert ldf.checkpoint_dir_from_env() == tmp_path
    monkeypatch.setenv("LDF_CHECKPOINT_DIR", str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="LDF_CHECKPOINT_DIR"):
        ldf.checkpoint_dir_from_env()


def test_measure_load_path_runs():
    hops = ldf.measure_load_path(ldf.minilm_checkpoint(), memory_bandwidth=10e9)
    assert [h.hop.split(" (")[0] for h in hops][:3] == ["storage → page cache", "page cache → CPU tensors",
                                                        "dtype conversion → bfloat16"]
    assert all(h.seconds and h.seconds > 0 for h in hops[:3])
    assert hops[-1].seconds is None and hops[-1].model_bandwidth > 0
    # like with like: a STREAM copy figure counts read + write; the copy hop moves each payload
    # byte once each way (half the figure), FP32 → BF16 reads 4 B and writes 2 B (two thirds)
    copy, conv = hops[1], hops[2]
    assert copy.traffic_bytes == 2 * copy.nbytes and copy.model_bandwidth == pytest.approx(5e9)
    assert conv.nbytes == 90_852_864                      # MiniLM's F32 tensors (the I64 buffer stays)
    assert conv.traffic_bytes == conv.nbytes * 3 // 2 and conv.model_bandwidth == pytest.approx(10e9 * 2 / 3)
    assert hops[-1].nbytes == conv.nbytes // 2 + 4096     # BF16 weights + the I64 position_ids


def test_weight_bytes_read_moe_and_tied():
    mix = ldf.model_config("Mixtral-8x7B")
    expert = 3 * 4096 * 14336 * 2                                     # one expert, BF16
    dense_part = ldf.weight_bytes(mix) - 32 * 8 * expert - 32000 * 4096 * 2
    # batch 1: 2 of 8 experts per layer; the embedding gather reads one row
    assert ldf.weight_bytes_read(mix, "bf16", 1) == pytest.approx(dense_part + 32 * 2 * expert + 4096 * 2)
    # many tokens: every expert is hit (E·(1-(1-k/E)^n) → E)
    assert ldf.expected_experts_hit(8, 2, 1) == 2
    assert ldf.expected_experts_hit(8, 2, 512) == pytest.approx(8)
    gpt2 = ldf.model_config("GPT-2-small")                           # tied: the table is the LM head
    # the tied table is read whole; of the 1024-row position table only one row
    assert ldf.weight_bytes_read(gpt2, "bf16", 1) == pytest.approx(ldf.weight_bytes(gpt2) - 1023 * 768 * 2)
    with pytest.raises(ValueError, match="n_tokens=0"):
        ldf.weight_bytes_read(mix, "bf16", 0)


def test_reader_tiers_probe_sizes_and_ram():
    """Chapter 00: each cache is probed at half its size, the last level at most at 4× the level
    below (a VM may report the host's whole L3: 260 MiB on the 2-core EPYC guest)."""
    assert ldf.tier_probe_bytes([48 * 2**10, 2 * 2**20, 260 * 2**20]) == [24_576, 1_048_576, 8_388_608]
    assert ldf.tier_probe_bytes([32 * 2**10, 256 * 2**10, 6 * 2**20]) == [16_384, 131_072, 1_048_576]
    assert ldf.tier_probe_bytes([4096]) == [4096] and ldf.tier_probe_bytes([]) == []
    with pytest.raises(ValueError, match="cache size"):
        ldf.tier_probe_bytes([0])
    ram = ldf.physical_ram_bytes()
    assert ram is None or ram > 2**28


def test_page_cache_eviction_degrades_where_the_os_lacks_it(monkeypatch, tmp_path):
    """macOS and Windows have no posix_fadvise: eviction returns a reason instead of raising, and
    a lazy read carries it as its note (chapter 01 prints it)."""
    import os

    path = ldf.minilm_checkpoint()
    f = tmp_path / "x.bin"
    f.write_bytes(b"\0" * 8192)
    if hasattr(os, "posix_fadvise"):
        assert ldf.evict_from_page_cache(f) is None
    monkeypatch.delattr(os, "posix_fadvise", raising=False)
    reason = ldf.evict_from_page_cache(f)
    assert reason and "posix_fadvise" in reason
    r = ldf.read_rows_lazily(path, "embeddings.word_embeddings.weight", slice(0, 2))
    assert "posix_fadvise" in r.note and r.tensor.shape[0] == 2
