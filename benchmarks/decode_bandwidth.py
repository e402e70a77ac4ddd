"""Batch-1 greedy decoding near the memory-bandwidth limit (chapter 05).

Usage (from the repository root)::

    python benchmarks/decode_bandwidth.py                 # bench-llama, FP32, 64 new tokens
    python benchmarks/decode_bandwidth.py --n-new 128 --repeat 5 --dtype bf16

Prints the model's bytes, the bytes one decode step must read, steps/s, the bandwidth achieved
(bytes per step × steps/s), the measured STREAM peak and their ratio (target ≥ 60 % on a CPU),
then times Hugging Face ``transformers`` greedy ``generate`` (with its KV cache) on the same
weights and prints the per-token time ratio (target: the book's loop at least as fast).

The default preset ``bench-llama`` (~62 M parameters, ~250 MB in FP32) is larger than a CPU's
last-level cache, so every step streams its weights from DRAM.  Run it on a quiet machine:
other processes sharing the cores or the memory bus lower both numbers.
"""
from __future__ import annotations

import argparse
import sys

import torch

import llm_dataflow as ldf

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="bench-llama")
    ap.add_argument("--dtype", default="fp32", choices=tuple(_DTYPES))
    ap.add_argument("--prompt-len", type=int, default=8)
    ap.add_argument("--n-new", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-hf", action="store_true", help="skip the transformers peer")
    args = ap.parse_args(argv)

    ldf.seed_all(0)
    dev = ldf.device()
    cfg = ldf.model_config(args.preset)
    print(ldf.describe_device(dev))
    model = ldf.Decoder(cfg, dtype=_DTYPES[args.dtype], device=dev)

    # the roof: best STREAM copy / triad, measured before and after the decode runs
    peak0 = max(ldf.stream_bandwidth(k, dev=dev) for k in ("copy", "triad"))
    r = ldf.decode_bandwidth(model, cfg, prompt_len=args.prompt_len, n_new=args.n_new, repeat=args.repeat,
                             peak_bandwidth=peak0)
    peak1 = max(ldf.stream_bandwidth(k, dev=dev) for k in ("copy", "triad"))
    peak = max(peak0, peak1)
    frac = r.achieved_bandwidth / peak

    print(f"model:                {cfg.name}, {ldf.param_count(cfg):,} parameters, {args.dtype}")
    print(f"model bytes:          {r.model_bytes:,} B ({ldf.fmt_bytes(r.model_bytes)}; "
          f"{ldf.fmt_bytes(r.model_bytes, binary=True)})")
    print(f"bytes read per step:  {r.bytes_per_step:,.0f} B (weights with the embedding as one gathered "
          "row, plus the KV cache)")
    print(f"steps/s:              {r.steps_per_s:.1f}  ({1e3 / r.steps_per_s:.2f} ms per token)")
    print(f"achieved bandwidth:   {r.achieved_bandwidth / ldf.GB:.1f} GB/s")
    print(f"measured peak:        {peak / ldf.GB:.1f} GB/s (best of STREAM copy/triad, before "
          f"{peak0 / ldf.GB:.1f}, after {peak1 / ldf.GB:.1f})")
    print(f"fraction of peak:     {frac:.0%}  (target >= 60%: {'met' if frac >= 0.6 else 'NOT met'})")

    if args.no_hf:
        return 0
    ids = r.run.tokens[:, :args.prompt_len]
    hf_tokens, hf_step = ldf.hf_greedy_decode(model, cfg, ids, args.n_new, repeat=args.repeat)
    ours = ldf.greedy_decode(model, ids, args.n_new)
    ratio = hf_step / (1 / r.steps_per_s)
    print(f"transformers generate: {hf_step * 1e3:.2f} ms per token (same tokens as ours: "
          f"{bool(torch.equal(hf_tokens, ours.tokens))})")
    print(f"per-token time ratio transformers / book: {ratio:.2f}x  (target >= 1: "
          f"{'met' if ratio >= 1 else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
