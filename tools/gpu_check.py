"""The book's GPU check: measure a CUDA machine and compare it with the presets and the bounds.

    python tools/gpu_check.py              # on a CUDA machine: measure, write artifacts/gpu/
    python tools/gpu_check.py --dry-run    # list what it would do, run nothing
    make gpu-check ARGS=--dry-run          # the same through make

Steps (under 8 minutes on one GPU; each step's failure is recorded and the next one runs):

1. the device: ``torch.cuda.get_device_name`` → the matching hardware preset (H100, H200, A100,
   B200, H800; an unknown name is reported and datasheet comparisons are skipped);
2. HBM bandwidth: STREAM copy and triad on 1 GiB FP32 arrays (``ldf.stream_bandwidth``) against
   the preset's ``hbm_bandwidth``;
3. BF16 matmul peak: an 8192³ matmul (``ldf.matmul_flops``) against the preset's dense BF16 peak;
4. the decode-bandwidth benchmark (``benchmarks/decode_bandwidth.py --no-hf``): time per token
   against the package's ``decode_step_lower_bound`` on the preset, bandwidth against the datasheet;
5. with two or more GPUs, an NCCL all-reduce sweep (1 MiB … 1 GiB, ``ldf.demo_collectives`` on
   every GPU): bus bandwidth against the preset's NVLink per direction and the time against the
   package's ring bound (``ldf.collective_time`` without the latency term);
6. every notebook executed with ``LDF_DEVICE=cuda`` (outputs are *not* compared: a GPU prints
   other numbers than the CPU outputs the notebooks store), each in a fresh kernel, in memory —
   no notebook file is written.

Reports: ``artifacts/gpu/gpu_check.json`` (every number) and ``artifacts/gpu/gpu_check.md``.
Without CUDA the tool says so, prints the plan and exits 0.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import pathlib
import platform
import re
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = ROOT / "artifacts" / "gpu"
BUDGET_S = 8 * 60           # the whole check on one GPU
NOTEBOOK_TIMEOUT_S = 150    # one notebook (they take < 60 s on 2 CPU cores)
SWEEP_BYTES = tuple(1 << k for k in range(20, 31, 2))   # 1 MiB … 1 GiB, ×4

# torch.cuda.get_device_name() substrings → hardware preset.  Order matters: the first match wins,
# and PCIe / NVL parts (other bandwidths and clocks than the SXM presets) are refused by name.
_NAME_RULES = (
    (("PCIE",), None), (("NVL",), None),
    (("H800",), "H800-SXM"),
    (("H200",), "H200"),
    (("H100",), "H100-SXM"),
    (("A100", "80GB"), "A100-80GB-SXM"),
    (("B200",), "B200"),
)


def preset_for(device_name: str) -> tuple[str | None, str]:
    """(hardware preset name or None, a sentence saying why) for a CUDA device name such as
    ``"NVIDIA H100 80GB HBM3"``.  PCIe and NVL variants and parts without a preset give None."""
    up = device_name.upper().replace("-", " ")
    for needles, preset in _NAME_RULES:
        if all(n in up for n in needles):
            if preset is None:
                return None, (f"{device_name!r} is a PCIe/NVL part; the book's presets are SXM parts, so "
                              "datasheet comparisons are skipped")
            return preset, f"{device_name!r} matches the preset {preset!r}"
    return None, (f"no hardware preset for {device_name!r} (presets: H100-SXM, H200, A100-80GB-SXM, B200, "
                  "H800-SXM); datasheet comparisons are skipped")


def plan(n_gpus: int | None, device_name: str | None) -> list[str]:
    """The steps the check runs, one line each (what ``--dry-run`` prints)."""
    notebooks = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    dev = (f"{n_gpus} x {device_name}" if n_gpus else "no CUDA device on this machine")
    preset = preset_for(device_name)[1] if device_name else "preset chosen from torch.cuda.get_device_name()"
    sweep = f"{SWEEP_BYTES[0] >> 20} MiB … {SWEEP_BYTES[-1] >> 30} GiB"
    return [
        f"1. device: {dev}; {preset}",
        "2. HBM bandwidth: STREAM copy and triad, 1 GiB FP32 arrays, best of 10 -> vs the preset's HBM bandwidth",
        "3. BF16 matmul peak: 8192 x 8192 x 8192, best of 5 -> vs the preset's dense BF16 peak",
        "4. decode benchmark: benchmarks/decode_bandwidth.py --no-hf (bench-tinyllama, FP32, batch 1) "
        "-> vs ldf.decode_step_lower_bound on the preset",
        f"5. NCCL all-reduce sweep {sweep} on every GPU (only with 2 or more GPUs) -> busbw vs NVLink per "
        "direction, time vs ldf.collective_time (ring, no latency term)",
        f"6. execute {len(notebooks)} notebooks with LDF_DEVICE=cuda, outputs not compared, "
        f"<= {NOTEBOOK_TIMEOUT_S} s each: {', '.join(notebooks)}",
        f"reports: {(OUT / 'gpu_check.json').relative_to(ROOT)}, {(OUT / 'gpu_check.md').relative_to(ROOT)}",
        f"time budget: {BUDGET_S // 60} minutes on one GPU (notebooks left when it runs out are reported as skipped)",
    ]


# --------------------------------------------------------------------------------------------
# steps (each returns a dict for the JSON report; errors are caught by the caller)
# --------------------------------------------------------------------------------------------
def _ratio(measured, reference):
    return None if (measured is None or not reference) else measured / reference


def step_stream(ldf, hw):
    out = {}
    for kind in ("copy", "triad"):
        bw = ldf.stream_bandwidth(kind, dev="cuda", repeat=10)
        out[kind] = {"measured_Bps": bw, "datasheet_Bps": hw.hbm_bandwidth if hw else None,
                     "fraction_of_datasheet": _ratio(bw, hw.hbm_bandwidth if hw else None)}
    return out


def step_matmul(ldf, hw):
    f = ldf.matmul_flops("bf16", n=8192, dev="cuda", repeat=5)
    peak = hw.flops("bf16") if hw else None
    return {"measured_FLOPps": f, "datasheet_FLOPps": peak, "fraction_of_datasheet": _ratio(f, peak)}


_BENCH_FIELDS = {
    "steps_per_s": r"steps/s:\s+([\d.]+)",
    "bytes_per_step": r"bytes read per step:\s+([\d,]+) B",
    "achieved_GBps": r"achieved bandwidth:\s+([\d.]+) GB/s",
    "stream_GBps": r"measured bandwidth:\s+([\d.]+) GB/s",
}


def parse_decode_benchmark(text: str) -> dict:
    """The numbers ``benchmarks/decode_bandwidth.py`` prints (steps/s, bytes per step, achieved and
    STREAM bandwidth in GB/s); a line it did not print is missing from the result."""
    out = {}
    for key, rx in _BENCH_FIELDS.items():
        m = re.search(rx, text)
        if m:
            out[key] = float(m.group(1).replace(",", ""))
    return out


def step_decode(ldf, hw, env, timeout_s):
    cmd = [sys.executable, str(ROOT / "benchmarks" / "decode_bandwidth.py"), "--no-hf", "--repeat", "3"]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s)
    if r.returncode:
        raise RuntimeError(f"decode_bandwidth.py exited {r.returncode}: {r.stderr[-2000:]}")
    out = parse_decode_benchmark(r.stdout)
    out["stdout_tail"] = r.stdout[-3000:]
    if hw and "steps_per_s" in out:
        bound = ldf.decode_step_lower_bound("bench-tinyllama", hw, 1, 8, "fp32")
        out["time_per_token_s"] = 1.0 / out["steps_per_s"]
        out["package_bound_s"] = bound
        out["efficiency_vs_bound"] = bound * out["steps_per_s"]
        out["achieved_fraction_of_datasheet"] = out.get("achieved_GBps", 0) * 1e9 / hw.hbm_bandwidth
    return out


def step_allreduce(ldf, hw, n_gpus, timeout_s):
    res = ldf.run_distributed(ldf.demo_collectives, n_gpus, 1000, SWEEP_BYTES, 5, backend="nccl",
                              timeout_s=timeout_s)
    times = {int(k): max(r["times"][k] for r in res) for k in res[0]["times"]}   # the slowest rank
    lk = None
    if hw:
        lk = dataclasses.replace(ldf.link(hw.nvlink), latency_s=0.0)
    rows = []
    for nbytes, t in sorted(times.items()):
        algbw = nbytes / t
        busbw = algbw * 2 * (n_gpus - 1) / n_gpus          # nccl-tests' factor for all-reduce
        row = {"bytes": nbytes, "time_s": t, "algbw_Bps": algbw, "busbw_Bps": busbw}
        if lk:
            bound = ldf.collective_time("all_reduce", nbytes, n_gpus, lk)
            row.update(link=lk.name, link_per_direction_Bps=lk.bandwidth_per_direction,
                       busbw_fraction_of_link=busbw / lk.bandwidth_per_direction,
                       ring_bound_s=bound, efficiency_vs_ring_bound=bound / t)
        rows.append(row)
    return {"n_gpus": n_gpus, "sweep": rows,
            "note": "NCCL's default all-reduce on NVSwitch systems (NVLink SHARP) can beat the ring bound; "
                    "see ldf.KNOWN_MODEL_GAPS"}


def step_notebooks(env, deadline):
    import nbformat
    from nbclient import NotebookClient

    out = []
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        left = deadline - time.monotonic()
        if left < 30:
            out.append({"notebook": path.name, "status": "skipped (time budget)"})
            continue
        nb = nbformat.read(path, as_version=4)
        client = NotebookClient(nb, timeout=int(min(NOTEBOOK_TIMEOUT_S, left)), kernel_name="python3",
                                resources={"metadata": {"path": str(path.parent)}})
        t0 = time.perf_counter()
        old = dict(os.environ)
        os.environ.update(env)     # the kernel inherits this process's environment
        try:
            client.execute()
            status = "ok"
        except Exception as e:     # noqa: BLE001 — record and go on with the next notebook
            status = f"failed: {type(e).__name__}: {str(e).strip().splitlines()[-1][:300] if str(e).strip() else ''}"
        finally:
            os.environ.clear()
            os.environ.update(old)
        out.append({"notebook": path.name, "status": status, "seconds": round(time.perf_counter() - t0, 1)})
    return out


# --------------------------------------------------------------------------------------------
# reports
# --------------------------------------------------------------------------------------------
def _gb(x):
    return "—" if x is None else f"{x / 1e9:,.1f} GB/s"


def _pct(x):
    return "—" if x is None else f"{100 * x:.0f} %"


def markdown(report: dict) -> str:
    """The Markdown report of a ``report`` dict (the JSON's content)."""
    d = report["device"]
    lines = ["# GPU check", "", f"- date: {report['date']}", f"- device: {d.get('count', 0)} x {d.get('name')}",
             f"- preset: {d.get('preset') or 'none'} ({d.get('preset_reason', '')})",
             f"- torch {report.get('torch')}, CUDA {report.get('cuda')}; total {report.get('seconds', 0):.0f} s", ""]
    steps = report["steps"]
    s = steps.get("stream", {})
    lines += ["## HBM bandwidth (STREAM)", "", "| kernel | measured | datasheet | fraction |", "|---|---|---|---|"]
    if "error" in s:
        lines.append(f"| error | {s['error']} | | |")
    for k in ("copy", "triad"):
        if k in s:
            lines.append(f"| {k} | {_gb(s[k]['measured_Bps'])} | {_gb(s[k]['datasheet_Bps'])} | "
                         f"{_pct(s[k]['fraction_of_datasheet'])} |")
    m = steps.get("matmul", {})
    lines += ["", "## BF16 matmul", ""]
    if "error" in m:
        lines.append(f"error: {m['error']}")
    elif m:
        peak = m["datasheet_FLOPps"]
        lines.append(f"{m['measured_FLOPps'] / 1e12:,.0f} TFLOP/s measured; datasheet dense BF16 "
                     f"{'—' if peak is None else f'{peak / 1e12:,.0f} TFLOP/s'}; fraction "
                     f"{_pct(m['fraction_of_datasheet'])}")
    dec = steps.get("decode", {})
    lines += ["", "## Decode benchmark (bench-tinyllama, FP32, batch 1)", ""]
    if "error" in dec:
        lines.append(f"error: {dec['error']}")
    elif dec:
        lines.append(f"- steps/s: {dec.get('steps_per_s')}; achieved {dec.get('achieved_GBps')} GB/s; STREAM "
                     f"beside it {dec.get('stream_GBps')} GB/s")
        if "package_bound_s" in dec:
            lines.append(f"- time per token {dec['time_per_token_s'] * 1e3:.3f} ms vs the package's bound "
                         f"{dec['package_bound_s'] * 1e3:.3f} ms: efficiency {_pct(dec['efficiency_vs_bound'])}; "
                         f"achieved bandwidth {_pct(dec['achieved_fraction_of_datasheet'])} of the datasheet")
    ar = steps.get("allreduce", {})
    lines += ["", "## NCCL all-reduce", ""]
    if "error" in ar:
        lines.append(f"error: {ar['error']}")
    elif "skipped" in ar:
        lines.append(ar["skipped"])
    elif ar:
        lines += ["| bytes | time | algbw | busbw | busbw / link | ring bound / time |", "|---|---|---|---|---|---|"]
        for r in ar["sweep"]:
            lines.append(f"| {r['bytes']:,} | {r['time_s'] * 1e6:,.0f} µs | {_gb(r['algbw_Bps'])} | "
                         f"{_gb(r['busbw_Bps'])} | {_pct(r.get('busbw_fraction_of_link'))} | "
                         f"{_pct(r.get('efficiency_vs_ring_bound'))} |")
        lines += ["", ar["note"]]
    nbs = steps.get("notebooks", [])
    lines += ["", "## Notebooks with LDF_DEVICE=cuda (executed, outputs not compared)", ""]
    if isinstance(nbs, dict) and "error" in nbs:
        lines.append(f"error: {nbs['error']}")
    else:
        lines += ["| notebook | status | seconds |", "|---|---|---|"]
        lines += [f"| {n['notebook']} | {n['status']} | {n.get('seconds', '')} |" for n in nbs]
    return "\n".join(lines) + "\n"


def write_reports(report: dict, out: pathlib.Path = OUT) -> tuple[pathlib.Path, pathlib.Path]:
    """Write ``gpu_check.json`` and ``gpu_check.md`` under ``out``; return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    j, m = out / "gpu_check.json", out / "gpu_check.md"
    j.write_text(json.dumps(report, indent=1, default=str) + "\n")
    m.write_text(markdown(report))
    return j, m


# --------------------------------------------------------------------------------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="list what the check would do and run nothing")
    ap.add_argument("--skip-notebooks", action="store_true", help="measure only (steps 1-5)")
    args = ap.parse_args(argv)

    import torch

    cuda = torch.cuda.is_available()
    n = torch.cuda.device_count() if cuda else 0
    name = torch.cuda.get_device_name(0) if cuda else None
    if args.dry_run or not cuda:
        if not cuda:
            print("No CUDA device (torch.cuda.is_available() is False): nothing is measured on this machine. "
                  "On a CUDA machine the check would run:")
        else:
            print("Dry run: nothing is measured. The check would run:")
        for line in plan(n, name):
            print("  " + line)
        return 0

    import llm_dataflow as ldf

    t_start = time.monotonic()
    deadline = t_start + BUDGET_S
    preset, why = preset_for(name)
    hw = ldf.hardware(preset) if preset else None
    print(f"GPU check on {n} x {name}: {why}", flush=True)
    env = {"LDF_DEVICE": "cuda", "PYTHONPATH": str(ROOT / "src")}
    report = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "host": platform.node(), "torch": torch.__version__, "cuda": torch.version.cuda,
              "device": {"name": name, "count": n, "preset": preset, "preset_reason": why,
                         "datasheet": dataclasses.asdict(hw) if hw else None},
              "steps": {}}
    steps = [("stream", lambda: step_stream(ldf, hw)), ("matmul", lambda: step_matmul(ldf, hw)),
             ("decode", lambda: step_decode(ldf, hw, {**os.environ, **env}, timeout_s=180))]
    if n >= 2:
        steps.append(("allreduce", lambda: step_allreduce(ldf, hw, n, timeout_s=180)))
    else:
        report["steps"]["allreduce"] = {"skipped": "one GPU: the NCCL all-reduce sweep needs two or more"}
    if not args.skip_notebooks:
        steps.append(("notebooks", lambda: step_notebooks(env, deadline)))
    for key, fn in steps:
        t0 = time.perf_counter()
        print(f"[{key}] ...", flush=True)
        try:
            report["steps"][key] = fn()
        except Exception as e:     # noqa: BLE001 — a failed step is a result; the next one still runs
            report["steps"][key] = {"error": f"{type(e).__name__}: {e}"[:2000]}
        print(f"[{key}] done in {time.perf_counter() - t0:.1f} s", flush=True)
    report["seconds"] = time.monotonic() - t_start
    j, m = write_reports(report)
    print(markdown(report))
    print(f"reports: {j.relative_to(ROOT)}, {m.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
