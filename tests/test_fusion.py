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
