"""tools/gpu_check.py on a machine without (or regardless of) a GPU: the dry run, the plan, the
preset detection, the parsing of the decode benchmark and the reports."""
import importlib.util
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "tools" / "gpu_check.py")
gc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gc)


def _run(*args, env_extra=None):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", **(env_extra or {})}
    return subprocess.run([sys.executable, str(ROOT / "tools" / "gpu_check.py"), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)


def test_dry_run_lists_every_step_and_runs_nothing(tmp_path):
    before = sorted((ROOT / "artifacts" / "gpu").glob("*")) if (ROOT / "artifacts" / "gpu").exists() else []
    r = _run("--dry-run")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for needle in ("HBM bandwidth", "BF16 matmul", "decode_bandwidth.py", "NCCL all-reduce", "LDF_DEVICE=cuda",
                   "09_model_vs_world.ipynb", "artifacts/gpu/gpu_check.json", "artifacts/gpu/gpu_check.md"):
        assert needle in out, needle
    after = sorted((ROOT / "artifacts" / "gpu").glob("*")) if (ROOT / "artifacts" / "gpu").exists() else []
    assert before == after, "a dry run writes nothing"


def test_without_cuda_it_says_so_and_exits_0():
    r = _run()
    assert r.returncode == 0, r.stderr
    assert "No CUDA device" in r.stdout and "would run" in r.stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_passes_args():
    r = subprocess.run(["make", "-n", "gpu-check", "ARGS=--dry-run"], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert "tools/gpu_check.py --dry-run" in r.stdout


@pytest.mark.parametrize("name, preset", [
    ("NVIDIA H100 80GB HBM3", "H100-SXM"),
    ("NVIDIA H200", "H200"),
    ("NVIDIA A100-SXM4-80GB", "A100-80GB-SXM"),
    ("NVIDIA B200", "B200"),
    ("NVIDIA H800", "H800-SXM"),
    ("NVIDIA H100 PCIe", None),
    ("NVIDIA H100 NVL", None),
    ("NVIDIA A100-SXM4-40GB", None),
    ("NVIDIA GeForce RTX 4090", None),
])
def test_preset_detection(name, preset):
    got, why = gc.preset_for(name)
    assert got == preset
    assert name in why
    if preset:
        import llm_dataflow as ldf
        assert ldf.hardware(got).name == preset


def test_parse_decode_benchmark():
    text = ("model:                bench-tinyllama, 307,000,000 parameters, fp32\n"
            "bytes read per step:  1,229,324,288 B (weights with the embedding as one gathered row, plus the KV cache)\n"
            "steps/s:              1234.5  (0.81 ms per token)\n"
            "achieved bandwidth:   1517.6 GB/s\n"
            "measured bandwidth:   2900.1 GB/s (STREAM copy/triad, ...)\n")
    assert gc.parse_decode_benchmark(text) == {"steps_per_s": 1234.5, "bytes_per_step": 1229324288.0,
                                               "achieved_GBps": 1517.6, "stream_GBps": 2900.1}
    assert gc.parse_decode_benchmark("nothing") == {}


def test_reports_from_a_fake_run(tmp_path):
    report = {
        "date": "2026-01-01T00:00:00+00:00", "torch": "x", "cuda": "12.x", "seconds": 123.0,
        "device": {"name": "NVIDIA H100 80GB HBM3", "count": 2, "preset": "H100-SXM", "preset_reason": "match"},
        "steps": {
            "stream": {"copy": {"measured_Bps": 3.0e12, "datasheet_Bps": 3.35e12, "fraction_of_datasheet": 0.9},
                       "triad": {"measured_Bps": 3.1e12, "datasheet_Bps": 3.35e12, "fraction_of_datasheet": 0.93}},
            "matmul": {"measured_FLOPps": 7.0e14, "datasheet_FLOPps": 9.894e14, "fraction_of_datasheet": 0.71},
            "decode": {"error": "RuntimeError: boom"},
            "allreduce": {"n_gpus": 2, "note": "n", "sweep": [
                {"bytes": 1 << 20, "time_s": 1e-5, "algbw_Bps": 1e11, "busbw_Bps": 1e11,
                 "busbw_fraction_of_link": 0.22, "efficiency_vs_ring_bound": 0.2}]},
            "notebooks": [{"notebook": "00_overview.ipynb", "status": "ok", "seconds": 12.0},
                          {"notebook": "09_model_vs_world.ipynb", "status": "skipped (time budget)"}],
        }}
    j, m = gc.write_reports(report, tmp_path)
    assert json.loads(j.read_text())["device"]["preset"] == "H100-SXM"
    md = m.read_text()
    for needle in ("3,000.0 GB/s", "90 %", "700 TFLOP/s", "error: RuntimeError: boom", "1,048,576",
                   "00_overview.ipynb | ok", "skipped (time budget)"):
        assert needle in md, needle
