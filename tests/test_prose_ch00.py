"""Chapter 00's prose, takeaways, diagram and alt text: every number they state, computed by the
package (issue 48: the roofline primer, the data-path diagram, the arithmetic in the open; issue 45:
the L2 hand-off, the critical batch 299 vs 334, the linear byte chart; the fix round's reviews:
prefill's memory-bound region, the context threshold of 85 tokens, the roofline figure, the
engine's budget in the calculator's fit line, the host round trip).

The solutions' numbers are in tests/test_exercise_answers.py (test_ch00_solutions,
test_ch00_prose_numbers); this file holds the rest.
"""
import json
import math
import pathlib
import re

import pytest

import llm_dataflow as ldf
from llm_dataflow.diagrams.datapath import REQUEST, datapath_numbers

ROOT = pathlib.Path(__file__).resolve().parents[1]
NB = ROOT / "notebooks" / "00_overview.ipynb"


@pytest.fixture(scope="module")
def cells():
    return json.loads(NB.read_text(encoding="utf-8"))["cells"]


@pytest.fixture(scope="module")
def markdown(cells):
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def test_roofline_primer():
    h = ldf.hardware("H100-SXM")
    # 989 TFLOP/s ÷ 3.35 TB/s ≈ 295 FLOP/B, "≈ 300"
    assert round(h.peak_flops["bf16"] / 1e12) == 989 and h.hbm_bandwidth == 3.35e12
    ridge = ldf.ridge_point("H100-SXM")
    assert round(ridge) == 295 and round(ridge, -2) == 300
    # 13.2 GB per decode step ÷ 3.35 TB/s ≈ 3.9 ms; 1 FLOP/B, "300 times below the ridge"
    dec = ldf.decode_step_bounds("Llama-2-7B", "H100-SXM", 1, 0)
    assert round(dec.nbytes / 1e9, 1) == 13.2 and round(dec.time_s * 1e3, 1) == 3.9 and dec.bound == "memory"
    assert round(dec.flops / dec.nbytes, 1) == 1.0 and round(ridge / (dec.flops / dec.nbytes), -2) == 300
    # a 512-token prompt does about 497 FLOP per byte: compute-bound
    pre = ldf.prefill_bounds("Llama-2-7B", "H100-SXM", 512)
    assert round(pre.flops / pre.nbytes) == 497 and pre.bound == "compute"
    # "about 512 FLOP per byte": 2 FLOP per weight per token × 512 tokens ÷ 2 B per weight
    assert 2 * 512 / 2 == 512
    # "NVIDIA's headline figure, 1,979, assumes ... 2:4": twice the dense peak
    assert round(2 * h.peak_flops["bf16"] / 1e12) == 1979
    # "Below about 300 tokens ... memory-bound too ...: 256 tokens do 250 FLOP/B"
    p256 = ldf.prefill_bounds("Llama-2-7B", "H100-SXM", 256)
    assert round(p256.flops / p256.nbytes) == 250 and p256.bound == "memory"
    assert ldf.prefill_bounds("Llama-2-7B", "H100-SXM", 300).bound == "memory"
    # the roofline figure's five passes: where each sits
    d256 = ldf.decode_step_bounds("Llama-2-7B", "H100-SXM", 256, 0)
    d256k = ldf.decode_step_bounds("Llama-2-7B", "H100-SXM", 256, 1024)
    assert d256.bound == d256k.bound == "memory" and round(d256.flops / d256.nbytes) == 253
    assert round(d256k.flops / d256k.nbytes, 1) == 23.3


def test_opening_answer():
    rows = ldf.request_ledger(ldf.model_config("Llama-2-7B"), 512, 128)
    t = ldf.movement_totals(rows)
    assert f"{t['HBM→on-chip'] / sum(t.values()):.0%}" == "99%"      # "99 % of all the bytes"
    assert round(t["HBM→on-chip"] / t["host↔device"]) == 128
    # "re-reading the weights alone is 97 %" (prefill's pass and the 127 decode steps)
    weights = sum(r.total for r in rows if r.movement == "HBM→on-chip" and r.item.startswith("weights"))
    assert f"{weights / sum(t.values()):.0%}" == "97%"
    step = next(r for r in rows if r.item == "weights (once per step)")
    assert round(step.bytes_each / 1e9, 1) == 13.2 and round(step.bytes_each / 3.35e12 * 1e3, 1) == 3.9
    # "Only with many long sequences does the KV cache ... take over: at 2,048 tokens of context,
    # from 13 sequences on" (and section 4's table prints it)
    cfg = ldf.model_config("Llama-2-7B")
    kv = ldf.kv_bytes_per_token(cfg)
    assert next(b for b in range(1, 100) if b * 2048 * kv >= ldf.weight_bytes_read(cfg, "bf16", b)) == 13


def test_tiers_and_l2_handoff():
    h = ldf.hardware("H100-SXM")
    cfg = ldf.model_config("Llama-2-7B")
    assert h.memory_bytes == 80e9 and h.n_sms == 132 and h.l2_bytes == 50 * 2**20
    # one token's hidden state 8 KiB, a 512-token prompt's 4 MiB, "far under L2's 50 MiB"
    assert cfg.d_model * 2 == 8 * 2**10 and 512 * cfg.d_model * 2 == 4 * 2**20
    assert 512 * cfg.d_model * 2 * 10 < h.l2_bytes
    # a sampled token's 4 bytes over PCIe: "a fraction of a nanosecond"
    assert 4 / ldf.link("PCIe-Gen5-x16").bandwidth_per_direction < 1e-9
    tiers = {t.tier: t for t in ldf.memory_tiers("H100-SXM")}
    sm = tiers["shared memory / L1"]
    assert ldf.fmt_bytes(sm.capacity_bytes) == "30.82 MB" and f"{sm.bandwidth / 1e12:.3g}" == "30.9"
    assert h.boost_clock_hz == 1.83e9
    # the tier table in MiB: shared memory 29.39 MiB, registers 33.00 MiB (256 KiB vs 228 KiB per SM)
    assert ldf.fmt_bytes(sm.capacity_bytes, binary=True) == "29.39 MiB"
    assert ldf.fmt_bytes(tiers["registers"].capacity_bytes, binary=True) == "33.00 MiB"
    assert (h.registers_per_sm_bytes, h.smem_per_sm_bytes) == (256 * 2**10, 228 * 2**10)
    # 32 banks × 4 B = 128 B per clock; 989.4 TFLOP/s ÷ (132 × 4,096 FLOP) = 1.83 GHz; × 132 SMs = 30.9 TB/s
    assert round(h.peak_flops["bf16"] / (h.n_sms * 4096) / 1e9, 2) == 1.83 and 4 * 1024 == 4096
    assert round(32 * 4 * h.n_sms * h.boost_clock_hz / 1e12, 1) == 30.9
    # the host round trip: expect microseconds, "at least ten thousand times" the 4 B's link time;
    # not timed without a GPU
    assert 1e-6 / (4 / ldf.link("PCIe-Gen5-x16").bandwidth_per_direction) > 1e4
    assert ldf.host_round_trip_seconds("cpu") is None


def test_ledger_section():
    cfg = ldf.model_config("Llama-2-7B")
    assert round(ldf.param_count(cfg) / 1e9, 2) == 6.74 and ldf.fmt_gb(ldf.weight_bytes(cfg)) == "13.48 GB"
    rows = ldf.request_ledger(cfg, 512, 128)
    by = {r.item: r for r in rows}
    w = by["weights (once per step)"]
    assert (w.count, round(w.bytes_each / 1e9, 2), ldf.fmt_bytes(w.total)) == (127, 13.21, "1.68 TB")
    assert ldf.fmt_bytes(by["KV history read (sum over the steps)"].total) == "38.29 GB"
    # by hand: 1.68 TB ÷ 3.35 TB/s ≈ 0.50 s; 13.48 GB ÷ 63 GB/s ≈ 0.21 s
    assert round(w.total / 3.35e12, 2) == 0.50
    assert round(ldf.weight_bytes(cfg) / ldf.link("PCIe-Gen5-x16").bandwidth_per_direction, 2) == 0.21
    times = ldf.movement_times(rows, "H100-SXM")
    assert [ldf.fmt_si(times[k], "s") for k in ldf.MOVEMENTS[:3]] == ["214 ms", "516 ms", "155 µs"]
    assert times["GPU↔GPU"] == 0.0
    # the figure: a linear axis (issue 48: the log axis made 128x look like 2.4x)
    assert ldf.fmt_bytes(ldf.movement_totals(rows)["on-chip→HBM"]) == "518.91 MB"
    # the takeaway: "at least 0.51 s of decode against 6.8 ms of prefill" (batch 1, the context grows)
    decode = sum(ldf.decode_step_bounds(cfg, "H100-SXM", 1, 512 + i - 1).time_s for i in range(1, 128))
    assert round(decode, 2) == 0.51 and round(ldf.prefill_bounds(cfg, "H100-SXM", 512).time_s * 1e3, 1) == 6.8
    # the box: counting the two host-DRAM passes of chapter 01's load path, 99.2 % → 97.7 %
    t = ldf.movement_totals(rows)
    assert f"{t['HBM→on-chip'] / (sum(t.values()) + 2 * t['host↔device']):.1%}" == "97.7%"


def test_context_threshold():
    """Section 4: "2P ÷ (S × 524,288 B)" with P = 6.61 billion weights read per step reaches the
    ridge at ≈ 85 tokens; the package's whole-step count: compute-bound at 84 tokens (41,077
    sequences), never from 85; the table's crossings at 2,048 tokens (13)."""
    cfg = ldf.model_config("Llama-2-7B")
    kv = ldf.kv_bytes_per_token(cfg)
    p = ldf.weight_bytes_read(cfg, "bf16", 1) / 2
    assert kv == 524_288 and round(kv / 1e6, 2) == 0.52 and round(p / 1e9, 2) == 6.61
    assert round(2 * p / 1e9, 1) == 13.2 and round(2 * p / (295 * kv)) == 85
    assert ldf.critical_batch(cfg, "H100-SXM", 84) == 41_077
    assert ldf.critical_batch(cfg, "H100-SXM", 85) == math.inf
    # the glossary's "critical batch" states the same threshold
    assert "85 tokens for Llama-2-7B" in (ROOT / "book" / "glossary.md").read_text(encoding="utf-8")


def test_critical_batch_figures_and_which_count_gives_which():
    """≈ 300 on the main line; the deeper box: 295.3 (ridge), 296 (weights only, whole
    sequences), 299 (the whole step: weight and KV bytes against every FLOP), 334 (chapter 03's
    operator count, which adds the matmuls' activation reads and writes), never at 128 tokens."""
    cfg = ldf.model_config("Llama-2-7B")
    assert math.ceil(2 * ldf.ridge_point("H100-SXM") / 2) == 296
    assert ldf.critical_batch(cfg, "H100-SXM") == 299
    assert ldf.matmul_ridge_tokens("Llama-2-7B", "H100-SXM") == 334
    assert ldf.critical_batch(cfg, "H100-SXM", 128) == math.inf


def test_calculator_takeaway_over_every_setting():
    """"With one output token, HBM → on-chip traffic is about half of the bytes; from 16 output
    tokens on, it is most of them in every setting here" (the calculator's options)."""
    one, more = [], []
    for m in ("Llama-2-7B", "Llama-3-8B", "Mistral-7B-v0.1", "Llama-3.1-70B", "Mixtral-8x7B"):
        for p in (512, 128, 2048, 8192):
            for b in (1, 8, 64):
                for o in (1, 16, 128, 1024):
                    share = float(ldf.ledger_summary(m, p, o, b)["HBM→on-chip share"].rstrip("%"))
                    (one if o == 1 else more).append(share)
    assert 45 < min(one) and max(one) <= 50.0
    assert min(more) > 80


def test_calculator_prose():
    """Section 5: Mixtral's 8 experts of which a token uses 2, its multiple 34.7 at batch 1 and
    126.6 at batch 64 (every expert read); vLLM's budget, 0.9 × 79.22 GiB, the KV room of
    116,272 tokens of which the request takes 640; Llama-3.1-70B's 131.42 GiB (141.1 GB) of
    weights above an H200's 0.9 × 139.81 GiB = 125.83 GiB."""
    mx = ldf.model_config("Mixtral-8x7B")
    assert (mx.n_routed_experts, mx.n_experts_per_token) == (8, 2)
    assert ldf.ledger_summary("Mixtral-8x7B", batch=1)["decode weight reads ÷ weights stored"] == 34.7
    assert ldf.ledger_summary("Mixtral-8x7B", batch=64)["decode weight reads ÷ weights stored"] == 126.6
    assert round(ldf.expected_experts_hit(8, 2, 64), 3) == 8.0
    fit = ldf.memory_fit("Llama-2-7B", "H100-SXM", "bf16", context=640, prompt_len=512)
    assert fit.fraction == 0.9 and round(fit.capacity / 2**30, 2) == 79.22
    assert fit.kv_tokens == 116_272 and fit.context == 640 and fit.fits
    assert ldf.ledger_summary("Llama-2-7B")["one H100-SXM"] == (
        "fits: 1 × 640 tokens (0.31 GiB) in 116,272 KV tokens "
        "(vLLM gpu_memory_utilization 0.9 × 79.22 GiB = 71.30 GiB per GPU)")
    w70 = ldf.memory_fit("Llama-3.1-70B", "H200", "bf16", context=640).weights
    assert round(w70 / 2**30, 2) == 131.42 and round(w70 / 1e9, 1) == 141.1
    h200 = ldf.memory_fit("Llama-3.1-70B", "H200", "bf16", context=640)
    assert round(h200.capacity / 2**30, 2) == 139.81 and round(h200.budget / 2**30, 2) == 125.83
    assert not h200.fits and h200.budget < w70


def test_diagram_numbers():
    n = datapath_numbers()
    assert REQUEST == {"model": "Llama-2-7B", "prompt_len": 512, "output_len": 128, "batch": 1,
                       "dtype": "bf16", "hardware": "H100-SXM"}
    assert ldf.fmt_bytes(n["load_bytes"]) == "13.48 GB" and ldf.fmt_si(n["seconds"]["host↔device"], "s") == "214 ms"
    assert ldf.fmt_bytes(n["bytes"]["HBM→on-chip"]) == "1.73 TB" and n["passes"] == 128
    assert ldf.fmt_si(n["seconds"]["HBM→on-chip"], "s") == "516 ms"
    assert ldf.fmt_bytes(n["step_bytes"], digits=1) == "13.2 GB" and ldf.fmt_si(n["step_s"], "s", 2) == "3.9 ms"
    assert ldf.fmt_bytes(n["bytes"]["on-chip→HBM"]) == "518.91 MB"
    assert ldf.fmt_si(n["seconds"]["on-chip→HBM"], "s") == "155 µs" and n["bytes"]["GPU↔GPU"] == 0
    assert ldf.fmt_si(n["host_link_bandwidth"], "B/s") == "63 GB/s"


def test_the_page_says_what_the_numbers_are(markdown, cells):
    # the alt text states the diagram's numbers
    alt = re.search(r"!\[([^\]]*)\]\(figures/ch00_datapath\.svg\)", markdown).group(1)
    for s in ("13.48 GB", "63 GB/s", "214 ms", "1.73 TB", "516 ms", "13.2 GB", "3.9 ms", "518.91 MB", "155 µs",
              "0 B", "where supported", "back from L2, not from HBM"):
        assert s in alt, s
    for s in ("85 tokens", "13 sequences", "116,272", "79.22 GiB", "125.83 GiB", "34.7", "126.6", "29.39 MiB",
              "4,096 dense BF16 FLOP", "1,979", "97.7 %", "0.51 s", "6.8 ms", "250 FLOP/B"):
        assert s in markdown, s
    assert "10 % runtime reserve" not in markdown and "runtime reserve" not in markdown
    # the rounded rule on the main line, the exact figures in the deeper box
    assert "≈ 300" in markdown and "299" in markdown and "334" in markdown and "295.3" in markdown
    assert "L2 is the tier through which consecutive kernels reuse data" in markdown
    assert "latency, not only bytes" in markdown
    # every section ends with a takeaway; the byte chart's axis is linear
    assert markdown.count(":::{admonition} Takeaway") >= 7
    chart = next("".join(c["source"]) for c in cells if "GB moved for one request" in "".join(c["source"]))
    assert "log" not in chart.split("set_xlabel")[0]
