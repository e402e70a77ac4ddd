"""Tests of offload.py: streamed layers give the resident logits; per-layer table is consistent."""
import pytest
import torch

import llm_dataflow as ldf


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-moe"])
def test_streamed_equals_resident_and_table(name):
    r = ldf.offload_run(name, batch=2, seq_len=5, repeat=1)
    assert r["max_abs_diff"] == 0.0
    t = r["layers"]
    cfg = ldf.model_config(name)
    assert list(t["layer"]) == list(range(cfg.n_layers))
    m = ldf.Decoder(cfg)
    assert list(t["bytes"]) == [ldf.layer_nbytes(m, i) for i in range(cfg.n_layers)]
    # the layers plus the resident parts are the whole model
    resident = sum(p.numel() * 4 for n, p in m.named_parameters() if ".layers." not in n)
    assert t["bytes"].sum() + resident == ldf.weight_bytes(cfg, "fp32")
    bw = ldf.link("PCIe-Gen5-x16").bandwidth_per_direction
    assert t["transfer_analytic_s"].tolist() == pytest.approx((t["bytes"] / bw).tolist())
    assert (t["transfer_s"] > 0).all() and (t["compute_s"] > 0).all()
    assert r["model_overlap"] <= r["model_serial"]
    # the models are whole forwards: the measured time outside the layers (embedding, final
    # norm, LM head) plus the layers' sums, so they compare with the walls (issue 45, ch01)
    assert r["non_layer_s"] > 0 and r["non_layer_resident_s"] > 0
    assert r["model_serial"] == pytest.approx(r["non_layer_s"] + t["transfer_s"].sum() + t["compute_s"].sum())
    assert r["model_serial_layers"] == pytest.approx(t["transfer_s"].sum() + t["compute_s"].sum())
    assert r["model_overlap"] == pytest.approx(r["non_layer_s"] + r["model_overlap_layers"])
    # overlap hides the shorter of copy and compute, never the compute of a layer
    assert r["model_overlap"] >= r["non_layer_s"] + t["compute_s"].sum() - 1e-12
    if not torch.cuda.is_available():
        assert r["wall_overlap"] is None and not r["pinned"]


def test_errors():
    with pytest.raises(ValueError, match="layer"):
        ldf.layer_nbytes(ldf.Decoder(ldf.model_config("tiny-draft")), 1)
    with pytest.raises(ValueError, match="link"):
        ldf.offload_run("tiny-draft", link="USB")
    with pytest.raises(ValueError, match="seq_len"):
        ldf.offload_table("tiny-draft", seq_len=0)
