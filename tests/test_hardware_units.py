"""Hardware presets, links, units and measurement helpers."""
import pytest

import llm_dataflow as ldf


def test_ridge_point_h100():
    # 989.4e12 FLOP/s (BF16 dense) / 3.35e12 B/s = 295.3 FLOP/B
    assert ldf.ridge_point("H100-SXM", "bf16") == pytest.approx(989.4e12 / 3.35e12)
    assert round(ldf.ridge_point(ldf.hardware("H100-SXM"))) == 295


def test_links_directions():
    nv4 = ldf.link("NVLink4")
    assert nv4.bandwidth_bidirectional == 900e9 and nv4.bandwidth_per_direction == 450e9
    pcie5 = ldf.link("PCIe-Gen5-x16")
    # 32 GT/s × 16 lanes × 128/130 / 8 bits = 63.0 GB/s per direction
    assert pcie5.bandwidth_per_direction == pytest.approx(63.015e9, rel=1e-4)
    assert ldf.link("InfiniBand-NDR").bandwidth_per_direction == 50e9


def test_every_preset_has_source():
    for hw in ldf.HARDWARE.values():
        assert hw.source and hw.hbm_bandwidth > 0 and "bf16" in hw.peak_flops
    for lk in ldf.LINKS.values():
        assert lk.source and lk.bandwidth_bidirectional == pytest.approx(2 * lk.bandwidth_per_direction)


def test_bad_hardware_input():
    with pytest.raises(ValueError, match="hardware='TPU'"):
        ldf.hardware("TPU")
    with pytest.raises(ValueError, match="dtype='fp4' has no peak"):
        ldf.ridge_point("A100-80GB-SXM", "fp4")
    with pytest.raises(ValueError, match="nbytes=0"):
        ldf.arithmetic_intensity(10, 0)
    assert ldf.arithmetic_intensity(2 * 4096, 4096 * 2) == 1.0


def test_units_formatting():
    assert ldf.fmt_bytes(4000) == "4.00 KB"
    assert ldf.fmt_bytes(4096, binary=True) == "4.00 KiB"
    assert ldf.fmt_bytes(512) == "512 B"
    assert ldf.fmt_si(4.18e-3, "s") == "4.18 ms"
    assert ldf.fmt_measured(41.2345, "GB/s") == "41.2 GB/s (measured)"
    assert ldf.dtype_bytes("int4") == 0.5 and ldf.dtype_bits("bf16") == 16


def test_sanitizer_masks_measured_format():
    import configparser, pathlib, re
    cp = configparser.ConfigParser()
    cp.read(pathlib.Path(__file__).parent / "nbval_sanitize.cfg")
    sec = cp["measured"]
    out = re.sub(sec["regex"], sec["replace"], "read " + ldf.fmt_measured(41.2345, "GB/s") + " and "
                 + ldf.fmt_measured(1.5e-5, "s"))
    assert out == "read~MEASURED GB/s (measured) and~MEASURED s (measured)"  # before the whitespace rule
    derived = ldf.fmt_measured(989.2, "GB/s", modelled=True)
    assert derived == "989 GB/s (modelled from measured)"
    assert re.sub(sec["regex"], sec["replace"], "x " + derived) == "x~MEASURED GB/s (modelled from measured)"


def test_sanitizer_rules_are_linear_on_long_number_lists():
    """nbval applies every rule to every output twice; a calculator's static view holds
    comma-joined number runs of 100 KB and more.  A rule that retries inside such a run is
    quadratic: the measured rule once took 33 s on chapter 05's 283 KB output."""
    import configparser, pathlib, re, time
    cp = configparser.ConfigParser()
    cp.read(pathlib.Path(__file__).parent / "nbval_sanitize.cfg")
    run = ",".join(str(i) for i in range(20_000))          # 108,889 characters, no space
    text = run + " and " + ldf.fmt_measured(41.2345, "GB/s")
    for name in cp.sections():
        t0 = time.perf_counter()
        out = re.sub(cp[name]["regex"], cp[name]["replace"], text)
        assert time.perf_counter() - t0 < 1.0, name          # quadratic: minutes; linear: ms
        if name == "measured":
            assert out == run + " and~MEASURED GB/s (measured)"


def test_measure_helpers():
    assert ldf.device("cpu").type == "cpu"
    with pytest.raises(ValueError, match="device='tpu'"):
        ldf.device("tpu")
    assert ldf.time_fn(lambda: None, repeat=3) >= 0
    with pytest.raises(ValueError, match="repeat=0"):
        ldf.time_fn(lambda: None, repeat=0)
    assert "CPU" in ldf.describe_device(ldf.device("cpu"))


def test_torch_threads_and_seed_all():
    import pandas as pd
    import torch

    before = torch.get_num_threads()
    with ldf.torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before
    with pytest.raises(ValueError, match="n=0"):
        ldf.torch_threads(0)
    ldf.seed_all(0)
    a = torch.randn(3)
    ldf.seed_all(0)
    assert torch.equal(a, torch.randn(3))
    assert pd.get_option("display.width") == 100_000 and pd.get_option("display.max_colwidth") is None


def test_measured_mark_for_a_column_that_says_measured_once():
    """A table cell under a "(measured)" header carries only the mark: ``41.2 GB/s†``; the
    sanitizer masks it like the spelled-out form, and analytic numbers beside it stay exact."""
    import configparser, pathlib, re
    assert ldf.fmt_measured(41.2345, "GB/s", mark=True) == "41.2 GB/s" + ldf.MEASURED_MARK == "41.2 GB/s†"
    assert ldf.fmt_measured(0.8551, "", mark=True) == "0.855†"
    with pytest.raises(ValueError, match="mark=True with modelled=True"):
        ldf.fmt_measured(1.0, "s", mark=True, modelled=True)
    cp = configparser.ConfigParser()
    cp.read(pathlib.Path(__file__).parent / "nbval_sanitize.cfg", encoding="utf-8")
    sec = cp["measured-mark"]
    text = "| 4,096 | 41.2 GB/s† | 0.855† | 1,234 |"
    assert re.sub(sec["regex"], sec["replace"], text) == "| 4,096 | ~MEASURED GB/s† | ~MEASURED† | 1,234 |"
    # an analytic number right before a marked one stays exact (a unit never starts with a digit)
    assert re.sub(sec["regex"], sec["replace"], "4,096 41.2†") == "4,096 ~MEASURED†"
    run = ",".join(str(i) for i in range(20_000)) + " 3.5†"
    import time
    t0 = time.perf_counter()
    assert re.sub(sec["regex"], sec["replace"], run).endswith(",19999 ~MEASURED†")
    assert time.perf_counter() - t0 < 1.0
