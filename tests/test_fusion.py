"""Tests of fusion.py: fused and unfused (residual +) RMSNorm agree with the decoder's rms_norm, and
the counted bytes equal the closed form."""
import pytest
import torch

import llm_dataflow as ldf


@pytest.mark.parametrize("residual", [False, True])
def test_fused_equals_unfused_equals_reference_irregular(residual):
    torch.manual_seed(0)
    x = torch.randn(3, 37, 129)  # irregular: 111 rows, D = 129, blocks that do not divide
    r = torch.randn_like(x) if residual else None
    w = torch.randn(129)
    h = x + r if residual else x
    ref = ldf.rms_norm(h, w, 1e-6)
    rec = []
    unf = ldf.norm_unfused(x, w, 1e-6, r, record=rec)
    fus = ldf.norm_fused(x, w, 1e-6, r, block_rows=10)
    if residual:
        torch.testing.assert_close(unf[1], h)
        torch.testing.assert_close(fus[1], h)
        unf, fus = unf[0], fus[0]
    torch.testing.assert_close(unf, ref)
    torch.testing.assert_close(fus, ref)
    b = ldf.fusion_bytes(111, 129, 4, residual)
    assert sum(s["bytes_read"] + s["bytes_written"] for s in rec) == b["unfused"]
    assert len(rec) == b["kernels_unfused"]
    assert b["fused"] == (111 * 129 * (2 + 2 * residual) + 129) * 4
    assert b["ratio"] > 2


def test_benchmark_small_and_errors():
    r = ldf.fusion_benchmark(64, 96, residual=True, repeat=1, threads=1)
    assert r["max_abs_diff"] < 1e-5 and r["bytes_unfused"] > r["bytes_fused"] > 0
    assert r["t_unfused"] > 0 and r["t_fused"] > 0
    with pytest.raises(ValueError, match="w.shape"):
        ldf.norm_unfused(torch.zeros(2, 4), torch.zeros(3))
    with pytest.raises(ValueError, match="backend"):
        ldf.norm_fused(torch.zeros(2, 4), torch.zeros(4), backend="triton")
    with pytest.raises(ValueError, match="n_rows"):
        ldf.fusion_bytes(0, 4)


@pytest.mark.parametrize("residual", [False, True])
def test_preallocated_buffers_give_the_same_result_in_place(residual):
    torch.manual_seed(1)
    x = torch.randn(3, 37, 129)  # 111 rows, D = 129
    r = torch.randn_like(x) if residual else None
    w = torch.randn(129)
    ref = ldf.norm_unfused(x, w, 1e-6, r)
    b = ldf.norm_buffers(111, 129, residual)
    rec_fresh, rec_buf = [], []
    ldf.norm_unfused(x, w, 1e-6, r, record=rec_fresh)
    unf = ldf.norm_unfused(x, w, 1e-6, r, record=rec_buf, buffers=b)
    assert rec_buf == rec_fresh                                  # same kernels, same bytes
    out = unf[0] if residual else unf
    assert out.data_ptr() == b.out.data_ptr() and out.shape == x.shape   # written into the buffer
    b2 = ldf.norm_buffers(111, 129, residual)
    fus = ldf.norm_fused(x, w, 1e-6, r, block_rows=10, buffers=b2)     # 10 does not divide 111
    if residual:
        torch.testing.assert_close(unf[1], ref[1])
        torch.testing.assert_close(fus[1], ref[1])
        assert fus[1].data_ptr() == b2.h.data_ptr()
        unf, fus, ref = unf[0], fus[0], ref[0]
    torch.testing.assert_close(unf, ref)
    torch.testing.assert_close(fus, ref)
    # the blocked kernel with fresh outputs and the default (L2-sized) block
    fresh = ldf.norm_fused(x, w, 1e-6, r)
    torch.testing.assert_close(fresh[0] if residual else fresh, ref)


def test_bad_buffers():
    x, w = torch.zeros(4, 8), torch.ones(8)
    with pytest.raises(ValueError, match="buffers.out"):
        ldf.norm_unfused(x, w, buffers=ldf.norm_buffers(5, 8, False))
    with pytest.raises(ValueError, match="buffers.h"):
        ldf.norm_fused(x, w, residual=torch.zeros(4, 8), buffers=ldf.norm_buffers(4, 8, residual=False))
    with pytest.raises(ValueError, match="buffers.sq"):
        b = ldf.norm_buffers(4, 8, False)
        b.sq = torch.zeros(4, 8, dtype=torch.float64)
        ldf.norm_fused(x, w, buffers=b)
    with pytest.raises(ValueError, match="n_rows"):
        ldf.norm_buffers(0, 8)


def test_fused_block_rows_fill_the_l2():
    # 2 MiB L2 (this Intel kind), D = 1024 fp32: 6 live [rows, D] tensors
    assert ldf.fused_block_rows(1024, 4, True, l2_bytes=2 * 2**20) == 2 * 2**20 // (6 * 4096) == 85
    assert ldf.fused_block_rows(1024, 4, False, l2_bytes=2**20) == 2**20 // (5 * 4096) == 51
    assert ldf.fused_block_rows(10**6, 4, True, l2_bytes=2**20) == 1                  # at least one row
    assert ldf.fused_block_rows(1024) >= 1                                             # this machine's L2
    with pytest.raises(ValueError, match="l2_bytes"):
        ldf.fused_block_rows(1024, l2_bytes=0)
    with pytest.raises(ValueError, match="d"):
        ldf.fused_block_rows(0)


def test_benchmark_reports_four_interleaved_paths():
    r = ldf.fusion_benchmark(50, 70, residual=False, repeat=2, threads=1, block_rows=7)
    for k in ("unfused", "fused", "unfused_prealloc", "fused_prealloc"):
        assert r[f"t_{k}"] > 0
        assert r[f"faults_{k}"] is None or r[f"faults_{k}"] >= 0
    assert r["speedup"] > 0 and r["speedup_prealloc"] > 0 and r["block_rows"] == 7
    assert r["bytes_unfused"] == ldf.fusion_bytes(50, 70, 4, False)["unfused"]
    assert r["bytes_fused"] == ldf.fusion_bytes(50, 70, 4, False)["fused"]
    assert r["max_abs_diff"] < 1e-5
    with pytest.raises(ValueError, match="repeat"):
        ldf.fusion_benchmark(8, 8, repeat=0)
    some = ldf.fusion_benchmark(40, 24, repeat=1, paths=("unfused_prealloc", "fused_prealloc"))
    assert some["speedup_prealloc"] > 0 and some["max_abs_diff"] < 1e-5
    assert "t_unfused" not in some and "speedup" not in some and "gbps_fused" not in some
    for bad in ((), ("fused", "fused"), ("triton",)):
        with pytest.raises(ValueError, match="paths"):
            ldf.fusion_benchmark(8, 8, paths=bad)


def test_fusion_verdicts_words_and_errors():
    base = {"t_unfused": 0.1, "t_unfused_prealloc": 0.02}
    v = ldf.fusion_verdicts({**base, "speedup_prealloc": 0.6})
    assert v["prealloc"].startswith("the blocked kernel was slower") and v["allocation"].startswith("allocating fresh")
    assert v["fresh_over_prealloc"] == pytest.approx(5.0)
    assert ldf.fusion_verdicts({**base, "speedup_prealloc": 1.5})["prealloc"] == "fusion saved time here"
    same = ldf.fusion_verdicts({"t_unfused": 0.1, "t_unfused_prealloc": 0.1, "speedup_prealloc": 1.0})
    assert same["prealloc"] == "no clear difference here (within 10 %)" and same["allocation"] == "allocation cost little here"
    with pytest.raises(ValueError, match="speedup_prealloc"):
        ldf.fusion_verdicts(base)
    with pytest.raises(ValueError, match="margin=1"):
        ldf.fusion_verdicts({**base, "speedup_prealloc": 1.0}, margin=1)
