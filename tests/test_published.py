"""Published GPU measurements against the package's bounds (llm_dataflow.published).

The strongest check the book has on itself: no published measurement may beat a lower bound
(time ≥ bound) or exceed a peak (rate ≤ peak).  A row the package's model is known not to cover
is listed in ``ldf.published.KNOWN_MODEL_GAPS`` and runs here as a named xfail.
"""
import csv
import math

import pytest

import llm_dataflow as ldf
from llm_dataflow import published as P

ROWS = P.published_measurements()


def test_enough_rows_and_topics():
    assert len(ROWS) >= 20
    assert len({r.chapter for r in ROWS}) >= 5
    assert len({r.id for r in ROWS}) == len(ROWS), "ids must be unique"


def test_every_row_has_source_setting_and_computed_bound():
    for r in ROWS:
        assert r.source.strip() and ("http" in r.source or "arXiv" in r.source), r.id
        assert r.kind in ("time", "bandwidth", "flops"), r.id
        assert r.gpu and r.n_gpus >= 1 and r.metric and r.unit, r.id
        assert math.isfinite(r.predicted_bound) and r.predicted_bound > 0, r.id
        assert math.isfinite(r.efficiency) and r.efficiency > 0, r.id
        if r.kind == "time":
            assert math.isclose(r.efficiency, r.predicted_bound / r.measured), r.id
        else:
            assert math.isclose(r.efficiency, r.measured / r.predicted_bound), r.id


def test_the_csv_holds_no_bound_column():
    """Bounds are computed by the package, never typed into the data file."""
    from importlib import resources
    text = resources.files("llm_dataflow").joinpath("data/published_measurements.csv").read_text("utf-8")
    header = next(csv.reader(line for line in text.splitlines() if not line.startswith("#")))
    assert not {"predicted_bound", "efficiency", "peak"} & set(header)


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_no_measurement_beats_its_bound(row):
    if row.id in P.KNOWN_MODEL_GAPS:
        assert row.known_gap
        pytest.xfail(f"known model gap ({row.id}): {P.KNOWN_MODEL_GAPS[row.id][:120]}")
    if row.kind == "time":
        assert row.measured >= row.predicted_bound, (row.id, row.measured, row.predicted_bound)
    else:
        assert row.measured <= row.predicted_bound, (row.id, row.measured, row.predicted_bound)


def test_known_gaps_really_beat_the_model():
    """A listed gap that no longer beats its bound should be removed from the list."""
    by_id = {r.id: r for r in ROWS}
    for gid in P.KNOWN_MODEL_GAPS:
        assert gid in by_id and by_id[gid].beats_bound, gid


def test_bounds_follow_the_package():
    by_id = {r.id: r for r in ROWS}
    # batch-1 BF16 decode: exactly roofline.decode_step_lower_bound at the row's setting
    r = by_id["gptfast-llama2-7b-bf16"]
    assert r.predicted_bound == ldf.decode_step_lower_bound("Llama-2-7B", "A100-80GB-SXM", 1, 5, "bf16")
    assert r.measured == pytest.approx(1 / 104.9)
    # rate rows: the datasheet peaks
    assert by_id["gptfast-llama2-7b-bf16-bw"].predicted_bound == ldf.hardware("A100-80GB-SXM").hbm_bandwidth
    assert by_id["fa3-h100-fp8"].predicted_bound == ldf.hardware("H100-SXM").flops("fp8")
    assert by_id["nccl-ib-ndr-per-nic"].predicted_bound == ldf.link("InfiniBand-NDR").bandwidth_per_direction
    # tensor parallel: N GPUs' bandwidth summed
    r8 = by_id["gptfast-llama2-70b-tp8"]
    assert r8.predicted_bound == pytest.approx(
        ldf.decode_step_lower_bound("Llama-2-70B", P.aggregate_hardware("A100-80GB-SXM", 8), 1, 5, "bf16"))
    # a GEMM: 2MNK / FP8 peak when compute-bound
    g = by_id["deepgemm-4096x7168x16384"]
    assert g.binds == "compute"
    assert g.predicted_bound == pytest.approx(2 * 4096 * 7168 * 16384 / ldf.hardware("H800-SXM").flops("fp8"))
    # the all-to-all: (N-1)/N of 128 tokens x 8 copies x (7168 + 56·4) bytes over 50 GB/s
    a = by_id["deepep-ll-dispatch-ep8"]
    assert a.predicted_bound == pytest.approx(7 / 8 * 128 * 8 * (7168 + 56 * 4) / 50e9)


def test_serving_bound_sums_every_step():
    """The 'serving' bound equals a brute-force sum over every decode step (small case)."""
    hw = "H200"
    plan = "fp8"
    B, isl, osl = 4, 16, 7
    flops = ldf.prefill_bounds("Llama-2-7B", hw, isl, B, plan).flops
    nbytes = 0.0
    for c in range(isl, isl + osl):
        s = ldf.decode_step_bounds("Llama-2-7B", hw, B, c, plan)
        flops += s.flops
        nbytes += s.nbytes
    spec = ldf.hardware(hw)
    want = max(flops / spec.flops("fp8"), nbytes / spec.hbm_bandwidth) / (B * osl)
    got, _ = P._serving(ldf.model_config("Llama-2-7B"), spec, B, isl, osl, P._plan("fp8"))
    assert got == pytest.approx(want, rel=1e-12)


def test_unbounded_batch_is_lower_than_any_batch():
    cfg, hw, plan = ldf.model_config("Llama-2-70B"), P.aggregate_hardware("H100-SXM", 8), P._plan("fp8+kvfp8")
    inf, _ = P._per_token_decode(cfg, hw, None, 512, plan)
    for b in (1, 64, 4096):
        assert inf <= P._per_token_decode(cfg, hw, b, 512, plan)[0]


def test_to_si_and_bad_input():
    assert P.to_si(2.0, "tokens/s/GPU", "time", n_gpus=2) == 0.25
    assert P.to_si(3, "GB/s", "bandwidth") == 3e9
    assert P.to_si(1.2, "PFLOP/s", "flops") == 1.2e15
    with pytest.raises(ValueError, match="unit='GB/s' is not allowed for kind='time'"):
        P.to_si(1, "GB/s", "time")
    with pytest.raises(ValueError, match="needs params M, N, K"):
        P.to_si(1, "TFLOP/s", "time")
    with pytest.raises(ValueError, match="chapter='99'"):
        P.published_measurements("99")
    with pytest.raises(ValueError, match="n_gpus=0"):
        P.aggregate_hardware("H100-SXM", 0)
    with pytest.raises(ValueError, match="weights='int3'"):
        P._plan("int3")


def test_filter_and_table():
    rows = ldf.published_measurements("06")
    assert rows and all(r.chapter == "06" for r in rows)
    t = ldf.published_table(rows)
    assert list(t["id"]) == [r.id for r in rows]
    assert set(t.columns) >= {"measured", "bound / peak", "efficiency", "binds"}


def test_reference_parts_stay_out_of_the_calculator_tables():
    assert "H800-SXM" not in ldf.HARDWARE and ldf.hardware("H800-SXM").nvlink == "NVLink4-H800"
    assert "NVLink4-H800" not in ldf.LINKS and ldf.link("NVLink4-H800").bandwidth_per_direction == 160e9
