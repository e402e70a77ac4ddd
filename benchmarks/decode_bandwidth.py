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
as well.  Run it on a quiet machine: a core busy elsewhere slows the split matrix-vector products
most, because every block waits for its slowest thread.

The ``transformers`` peer runs its projections through ``nn.Linear`` (``F.linear``), so the
per-token ratio includes the kernel difference as well as the loop's.

The default preset ``bench-tinyllama`` (TinyLlama-1.1B's matrix shapes, 4 of its 22 layers,
~307 M parameters, ~1.2 GB in FP32) is far larger than a CPU's last-level cache, so every step
streams its weights from DRAM.  ``bench-llama`` (~250 MB, the chapter's model) has matrices of
1–34 MB, where the fixed cost of each of the ~30 calls per step shows.  The book's projections
(:func:`llm_dataflow.linear`) split each FP32 matrix-vector product over the CPU cores.
"""
from __future__ import annotations

import argparse
import statistics
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
    args = ap.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(ldf.require_positive("threads", args.threads))

    ldf.seed_all(0)
    dev = ldf.device()
    cfg = ldf.model_config(args.preset)
    print(ldf.describe_device(dev))
    model = ldf.Decoder(cfg, dtype=_DTYPES[args.dtype], device=dev)

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
    return 0


if __name__ == "__main__":
    sys.exit(main())
