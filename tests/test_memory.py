"""Tests for llm_dataflow.memory: cache-size parsing, the sweep's bookkeeping, tier grouping.

Bandwidth values depend on the machine and its load, so only their structure is tested here."""
import json

import pytest
import torch

import llm_dataflow as ldf
from llm_dataflow.memory import (CacheLevel, MountainPoint, available_memory_bytes, cache_levels,
                                 last_level_cache_bytes, memory_mountain, mountain_sizes, parse_cache_size,
                                 parse_lscpu_caches, past_last_level_bytes, tier_bandwidth)

# The two kinds of 2-core VM this book is checked on, and a VM told of its host's whole L3.
AMD = [CacheLevel("L1d", 1, "Data", 32 * 1024, "0", "sysfs"), CacheLevel("L1i", 1, "Instruction", 32 * 1024, "0", "sysfs"),
       CacheLevel("L2", 2, "Unified", 2**20, "0", "sysfs"), CacheLevel("L3", 3, "Unified", 32 * 2**20, "0-1", "sysfs")]
INTEL = [CacheLevel("L1d", 1, "Data", 48 * 1024, "0", "sysfs"), CacheLevel("L2", 2, "Unified", 2560 * 1024, "0", "sysfs"),
         CacheLevel("L3", 3, "Unified", 48 * 2**20, "0-1", "sysfs")]
BIG_L3 = INTEL[:2] + [CacheLevel("L3", 3, "Unified", 260 * 2**20, "0-1", "sysfs")]


@pytest.mark.parametrize("text,expected", [
    ("32K", 32 * 1024), ("1024K", 2**20), ("32M", 32 * 2**20), ("1 MiB", 2**20), ("512", 512),
    ("48 KiB", 48 * 1024),
])
def test_parse_cache_size(text, expected):
    assert parse_cache_size(text) == expected


@pytest.mark.parametrize("bad", ["", "big", "-3K", "K32"])
def test_parse_cache_size_bad(bad):
    with pytest.raises(ValueError, match="cache size"):
        parse_cache_size(bad)


def test_sysfs_tree(tmp_path):
    for i, (lvl, typ, size, shared) in enumerate([(1, "Data", "48K", "0"), (1, "Instruction", "32K", "0"),
                                                  (2, "Unified", "2048K", "0"), (3, "Unified", "36864K", "0-7")]):
        d = tmp_path / f"index{i}"
        d.mkdir()
        (d / "level").write_text(f"{lvl}\n")
        (d / "type").write_text(f"{typ}\n")
        (d / "size").write_text(f"{size}\n")
        (d / "shared_cpu_list").write_text(f"{shared}\n")
    cs = cache_levels(tmp_path)
    assert [c.name for c in cs] == ["L1d", "L1i", "L2", "L3"]
    assert cs[0].size_bytes == 48 * 1024 and cs[3].size_bytes == 36 * 2**20
    assert cs[3].shared_cpu_list == "0-7" and cs[0].source == "sysfs"


def test_lscpu_json():
    text = json.dumps({"caches": [
        {"name": "L1d", "one-size": "32K", "all-size": "64K", "type": "Data", "level": 1},
        {"name": "L3", "one-size": "32M", "all-size": "32M", "type": "Unified", "level": 3}]})
    cs = parse_lscpu_caches(text)
    assert [(c.name, c.size_bytes, c.source) for c in cs] == [("L1d", 32768, "lscpu"), ("L3", 2**25, "lscpu")]
    with pytest.raises(ValueError, match="lscpu"):
        parse_lscpu_caches("not json")


def test_this_machine_reports_caches():
    cs = cache_levels()
    # Linux with sysfs (the book's CI) reports at least an L1 data cache; elsewhere [] is allowed
    assert cs == [] or any(c.name == "L1d" and c.size_bytes >= 4096 for c in cs)


def test_mountain_sizes():
    s = mountain_sizes(4096, 65536, per_octave=2)
    assert s[0] == 4096 and s[-1] == 65536 and len(s) == 9
    assert all(x % 64 == 0 for x in s) and s == sorted(s)
    with pytest.raises(ValueError, match="hi"):
        mountain_sizes(4096, 1024)


@pytest.mark.parametrize("caches,llc", [(AMD, 32 * 2**20), (INTEL, 48 * 2**20), (BIG_L3, 260 * 2**20)])
def test_mountain_sizes_reach_dram_on_every_machine(caches, llc):
    """The default sweep goes to 4x the reported LLC, so tier_bandwidth finds a DRAM point on each kind."""
    assert last_level_cache_bytes(caches) == llc
    s = mountain_sizes(caches=caches)
    assert s[0] == 4096 and s == sorted(s) and all(x % 64 == 0 for x in s)
    assert llc in s and 2 * llc in s and s[-1] == 4 * llc
    # per-octave steps up to the LLC, one point per doubling past it
    assert [x for x in s if x > llc] == [2 * llc, 4 * llc]
    pts = [MountainPoint("read", x, x, 1.0, 1.0, 1.0, "cpu") for x in s]
    assert "DRAM" in tier_bandwidth(pts, caches)


def test_mountain_sizes_without_caches_and_bad_lo():
    s = mountain_sizes(caches=[])
    assert s[0] == 4096 and s[-1] == 128 * 2**20
    with pytest.raises(ValueError, match="lo"):
        mountain_sizes(64 * 2**20, caches=AMD)


def test_past_last_level_bytes():
    assert past_last_level_bytes(4, AMD) == 128 * 2**20
    assert past_last_level_bytes(1.5, INTEL) == 72 * 2**20
    assert past_last_level_bytes(4, [], minimum=2**20) == 2**20          # nothing reported: the floor
    assert past_last_level_bytes(1, AMD, minimum=2**30) == 2**30
    assert past_last_level_bytes(1 / 3, AMD) % 64 == 0                   # whole cache lines
    assert last_level_cache_bytes([AMD[1]]) == 0                        # instruction caches do not count
    with pytest.raises(ValueError, match="caches"):
        past_last_level_bytes(4, [])
    with pytest.raises(ValueError, match="factor"):
        past_last_level_bytes(0, AMD)
    with pytest.raises(ValueError, match="minimum"):
        past_last_level_bytes(4, AMD, minimum=-1)


def test_available_memory():
    avail = available_memory_bytes()
    assert avail is None or avail > 0


def test_memory_mountain_small_sweep():
    threads = torch.get_num_threads()
    pts = memory_mountain([4096, 65536], ops=("read", "copy"), dev="cpu", target_bytes=2**20, repeat=3,
                          min_time_s=0.0, show_progress=False)
    assert torch.get_num_threads() == threads          # restored
    assert [(p.op, p.working_set_bytes) for p in pts] == [("read", 4096), ("read", 65536),
                                                          ("copy", 4096), ("copy", 65536)]
    r = pts[0]
    assert r.bytes_moved == 256 * 4096                 # 2**20 / 4096 = 256 re-reads of 1024 fp32
    assert pts[2].bytes_moved == 256 * 2 * 2048        # 256 copies of 512 fp32 (2 KiB): read + write
    for p in pts:
        lo, hi = p.bandwidth_range
        assert 0 < lo <= p.bandwidth <= hi and p.device == "cpu"


@pytest.mark.parametrize("kwargs,field", [
    (dict(ops=("write",)), "ops"), (dict(sizes=[32]), "sizes"), (dict(repeat=0), "repeat"),
    (dict(threads=0), "threads"), (dict(min_time_s=-1), "min_time_s"), (dict(max_time_s=-1.0), "max_time_s"),
])
def test_memory_mountain_bad_input(kwargs, field):
    with pytest.raises(ValueError, match=field):
        memory_mountain(dev="cpu", show_progress=False, **kwargs)


@pytest.mark.skipif(available_memory_bytes() is None, reason="the OS reports no available memory")
def test_memory_mountain_refuses_sizes_beyond_memory():
    with pytest.raises(ValueError, match="sizes"):
        memory_mountain([2**60], dev="cpu", show_progress=False)


def test_tier_bandwidth_grouping():
    caches = [CacheLevel("L1d", 1, "Data", 32768, "0", "sysfs"),
              CacheLevel("L1i", 1, "Instruction", 32768, "0", "sysfs"),
              CacheLevel("L2", 2, "Unified", 2**20, "0", "sysfs")]
    def pt(size, bw):
        return MountainPoint("read", size, int(bw), 1.0, 1.0, 1.0, "cpu")
    pts = [pt(4096, 100), pt(16384, 120), pt(32768, 7), pt(65536, 50), pt(2**19, 60), pt(2**21, 1),
           pt(2**22, 10), pt(2**23, 20)]
    tb = tier_bandwidth(pts, caches)
    # L1d: sizes <= 16 KiB; L2: (32 KiB, 512 KiB]; DRAM: >= 4 MiB; transitions left out
    assert tb == {"L1d": 110, "L2": 55, "DRAM": 15}
    with pytest.raises(ValueError, match="op"):
        tier_bandwidth(pts, caches, op="write")


def test_dram_onset():
    def pt(size, bw):
        return MountainPoint("read", size, int(bw), 1.0, 1.0, 1.0, "cpu")
    # a dip at 8 MiB (a neighbour's burst) does not count: every point from the onset up must be slow
    pts = [pt(2**20, 100), pt(2**23, 9), pt(2**24, 40), pt(2**25, 12), pt(2**26, 11), pt(2**27, 10), pt(2**28, 10)]
    caches = [CacheLevel("L2", 2, "Unified", 2**20, "0", "sysfs"), CacheLevel("L3", 3, "Unified", 2**26, "0-1", "sysfs")]
    assert ldf.tier_bandwidth(pts, caches)["DRAM"] == 10
    assert ldf.dram_onset(pts, caches) == 2**25          # 12 <= 1.5 x 10; 40 is not
    assert ldf.dram_onset(pts, caches, tolerance=1.0) == 2**27
    noisy = pts[:-2] + [pt(2**28, 40), pt(2**29, 5)]      # the DRAM tier's own points always count
    assert ldf.dram_onset(noisy, caches, tolerance=1.0) == 2**25   # not 2**29: 40 > 22.5 at 2**28 still counts
    assert ldf.dram_onset(pts[:3], caches) is None         # no point 4x past the LLC: no DRAM tier
    with pytest.raises(ValueError, match="tolerance"):
        ldf.dram_onset(pts, caches, tolerance=0.5)


def test_call_overhead_positive():
    assert 0 < ldf.call_overhead("cpu", repeat=20) < 1e-2


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_memory_mountain_cuda():
    pts = memory_mountain([2**20, 2**28], ops=("read",), dev="cuda", repeat=3, show_progress=False)
    assert all(p.device == "cuda" and p.bandwidth > 0 for p in pts)


def test_time_calls_clocks():
    calls = []
    with ldf.torch_threads(1):
        ts = ldf.time_calls(lambda: calls.append(sum(range(20000))), repeat=4, warmup=2, dev="cpu")
        assert len(ts) == 4 and len(calls) == 6 and all(t > 0 for t in ts)      # thread CPU time
        assert len(ldf.time_calls(lambda: None, 2, 0, dev="cpu", clock="wall")) == 2
    with ldf.torch_threads(2):
        with pytest.raises(ValueError, match="clock"):
            ldf.time_calls(lambda: None, dev="cpu", clock="thread")            # would miss the 2nd thread
        assert len(ldf.time_calls(lambda: None, 1, 0, dev="cpu")) == 1          # auto: wall clock
    with pytest.raises(ValueError, match="clock"):
        ldf.time_calls(lambda: None, dev="cpu", clock="cpu")
    with pytest.raises(ValueError, match="repeat"):
        ldf.time_calls(lambda: None, repeat=0, dev="cpu")
    with pytest.raises(ValueError, match="warmup"):
        ldf.time_calls(lambda: None, warmup=-1, dev="cpu")
