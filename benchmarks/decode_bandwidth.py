"""Batch-1 greedy decoding near the memory-bandwidth limit (chapter 05).

Usage (from the repository root)::

    python benchmarks/decode_bandwidth.py                 # bench-tinyllama, FP32, 64 new tokens
    python benchmarks/decode_bandwidth.py --preset bench-llama --n-new 128 --repeat 5

Prints the model's bytes, the bytes one decode step must read, steps/s, the bandwidth achieved
(bytes per step × steps/s), the measured STREAM bandwidth and their ratio (target ≥ 60 % on a
CPU), then times Hugging Face ``transformers`` greedy ``generate`` (with its KV cache) on the
same weights and prints the per-token time ratio (target: the book's loop at least as fast).

The bandwidth is measured *paired*: one STREAM copy and one triad pass right before every decode
step, and both sides are throughput over their interleaved intervals (Σ bytes ÷ Σ time), so they
see the same machine — on a shared machine the bandwidth other tenants leave drifts by 2× within
seconds.  The stricter ratio, achieved ÷ the 90th percentile of single STREAM passes, is printed
as well.  Run it on a quiet machine: a core busy elsewhere slows kernels on several threads most,
because each waits for its slowest thread (``ldf.linear`` may then choose one thread).

The ``transformers`` peer runs its projections through ``nn.Linear`` (``F.linear``), so the
per-token ratio includes the kernel difference as well as the loop's.

The default preset ``bench-tinyllama`` (TinyLlama-1.1B's matrix shapes, 4 of its 22 layers,
~307 M parameters, ~1.2 GB in FP32) is far larger than a CPU's last-level cache, so every step
streams its weights from DRAM.  ``bench-llama`` (~250 MB, the chapter's model) has matrices of
1–34 MB, where the fixed cost of each of the ~30 calls per step shows.

The book's projections (:func:`llm_dataflow.linear`) choose their kernel per shape by timing the
candidates (``F.linear``, the rows split over the threads, ``F.linear`` on one thread) on their
first calls; the benchmark prints the CPU model and the kernel chosen for each projection shape
(``LDF_LINEAR=F.linear`` or another kernel name forces one).  ``--compare-kernels`` also measures
every candidate on every projection shape beside STREAM triad at the same moments
(:func:`llm_dataflow.gemv_bandwidths`); ``--busy-core`` keeps one core busy with a spinning
Python process for the whole run, as a browser or a notebook would.
"""
from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys

import torch

import llm_dataflow as ldf

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="bench-tinyllama")
    ap.add_argument("--dtype", default="fp32", choices=tuple(_DTYPES))
    ap.add_argument("--prompt-len", type=int, default=8)
    ap.add_argument("--n-new", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-hf", action="store_true", help="skip the transformers peer")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch intra-op threads (default: torch's choice); the STREAM peak is measured "
                         "with the same count")
    ap.add_argument("--compare-kernels", action="store_true",
                    help="also measure every ldf.linear candidate on each projection shape beside STREAM triad")
    ap.add_argument("--busy-core", action="store_true",
                    help="keep one core busy with a spinning Python process during the whole run")
    args = ap.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(ldf.require_positive("threads", args.threads))
    spinner = None
    if args.busy_core:
        spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        return _run(args)
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (Linux), else ``platform.processor()``."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def projection_names(model) -> dict:
    """``{(N, K): "q_proj, o_proj"}``: the decoder's projections of each weight shape."""
    names: dict = {}
    for name, mod in model.named_modules():
        if isinstance(mod, ldf.Linear):
            short = name.rsplit(".", 1)[-1]
            names.setdefault(tuple(mod.weight.shape), [])
            if short not in names[tuple(mod.weight.shape)]:
                names[tuple(mod.weight.shape)].append(short)
    names.setdefault(tuple(model.output_weight.shape), ["lm_head (tied)"])
    return {shape: ", ".join(v) for shape, v in names.items()}


def print_choices(model, threads: int) -> None:
    """The kernel ldf.linear chose for each of the model's batch-1 projection shapes."""
    names = projection_names(model)
    forced = ldf.linear_kernels.forced_kernel()
    if forced is not None:
        print(f"ldf.linear kernel:    {forced} for every projection (forced by LDF_LINEAR)")
        return
    print(f"ldf.linear kernel per projection shape (time / F.linear's: median of the latest "
          f"{ldf.linear_kernels.LINEAR_TUNE_ROUNDS} paired rounds):")
    for c in ldf.linear_choice():
        if c.rows == 1 and (c.n_rows, c.n_cols) in names and c.threads == threads:
            print(f"  {names[(c.n_rows, c.n_cols)]:<20} {c.describe()}")
    untimed = [n for shape, n in names.items()
               if not any((c.n_rows, c.n_cols) == shape and c.rows == 1 for c in ldf.linear_choice())]
    if untimed:
        print(f"  {', '.join(untimed)}: F.linear, untimed (weights under "
              f"{ldf.linear_kernels.LINEAR_TUNE_MIN_BYTES:,} B, one thread, a GPU or not FP32)")


def _run(args) -> int:
    ldf.seed_all(0)
    dev = ldf.device()
    cfg = ldf.model_config(args.preset)
    threads = torch.get_num_threads()
    print(f"CPU model:            {cpu_model()}")
    print(ldf.describe_device(dev) + (" + one core kept busy by a spinning process" if args.busy_core else ""))
    model = ldf.Decoder(cfg, dtype=_DTYPES[args.dtype], device=dev)

    if args.compare_kernels:
        print("GEMV [1 x K] @ W [N x K]^T streamed from DRAM, each candidate beside STREAM triad at the same "
              "moments (GB/s, best of 3 interleaved rounds):")
        for (N, K), name in projection_names(model).items():
            bw = ldf.gemv_bandwidths(ldf.linear_candidates(), N, K, total_bytes=512 * ldf.MiB)
            print(f"  {name:<22} W [{N} x {K}]: " + "  ".join(f"{k} {v / ldf.GB:.1f}" for k, v in bw.items()))

    # a STREAM copy + triad pass right before every decode step: peak and step see the same load
    r = ldf.decode_bandwidth(model, cfg, prompt_len=args.prompt_len, n_new=args.n_new, repeat=args.repeat)

    print(f"model:                {cfg.name}, {ldf.param_count(cfg):,} parameters, {args.dtype}")
    print(f"model bytes:          {r.model_bytes:,} B ({ldf.fmt_bytes(r.model_bytes)}; "
          f"{ldf.fmt_bytes(r.model_bytes, binary=True)})")
    print(f"bytes read per step:  {r.bytes_per_step:,.0f} B (weights with the embedding as one gathered "
          "row, plus the KV cache)")
    print(f"steps/s:              {r.steps_per_s:.1f}  ({1e3 / r.steps_per_s:.2f} ms per token)")
    print(f"achieved bandwidth:   {r.achieved_bandwidth / ldf.GB:.1f} GB/s")
    print(f"measured bandwidth:   {r.peak_bandwidth / ldf.GB:.1f} GB/s (STREAM copy/triad, one pass of each "
          "before every step: bytes over time of the faster, like the steps)")
    print(f"fraction:             {r.fraction:.0%}  (achieved / measured, median of {args.repeat} rounds; "
          f"target >= 60%: {'met' if r.fraction >= 0.6 else 'NOT met'})")
    print(f"stricter fraction:    {r.fraction_of_high:.0%}  (achieved / {r.high_peak_bandwidth / ldf.GB:.1f} GB/s, "
          "the 90th percentile of single STREAM passes)")
    print_choices(model, threads)

    if args.no_hf:
        return 0
    # the peer: transformers generate on the same weights, rounds interleaved with ours
    ids = r.run.tokens[:, :args.prompt_len]
    hf = ldf.hf_peer_model(model, cfg)
    ours_s, hf_s, ratios, same = [], [], [], True
    for _ in range(args.repeat):
        run = ldf.greedy_decode(model, ids, args.n_new)
        toks, t_hf = ldf.hf_greedy_decode(model, cfg, ids, args.n_new, repeat=1, hf_model=hf)
        same &= bool(torch.equal(toks, run.tokens))
        ours_s.append(run.step_s)
        hf_s.append(t_hf)
        ratios.append(t_hf / run.step_s)
    ratio = statistics.median(ratios)
    print(f"book's loop:           {statistics.median(ours_s) * 1e3:.2f} ms per token")
    print(f"transformers generate: {statistics.median(hf_s) * 1e3:.2f} ms per token (same tokens: {same})")
    print(f"per-token time ratio transformers / book: {ratio:.2f}x  (median over {args.repeat} rounds; "
          f"target >= 1: {'met' if ratio >= 1 else 'NOT met'})")
    if any(c.switches for c in ldf.linear_choice()):
        print("the load changed during the run; the final choices:")
        print_choices(model, threads)
    return 0



if __name__ == "__main__":
    sys.exit(main())
