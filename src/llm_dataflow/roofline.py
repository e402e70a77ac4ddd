"""Chapter 05's calculators: the roofline bounds of :mod:`llm_dataflow.core.roofline` and the
memory fit of :mod:`llm_dataflow.core.fit`, as the named outputs ``ldf.calculator`` shows.
"""
from __future__ import annotations

import math

from .core.accounting import weight_bytes_read
from .core.config import ModelConfig, model_config
from .core.fit import memory_fit
from .core.formats import as_precision_plan
from .core.roofline import (as_roofline_hardware, critical_batch, decode_step_bounds,
                            prefill_lower_bound)
from .core.units import GB, GiB, no_overflow, require_nonnegative, require_positive

__all__ = ["decode_calculator", "batch_calculator"]


# --------------------------------------------------------------------------------------------
# calculators (for ldf.calculator)
# --------------------------------------------------------------------------------------------
def _batch_text(b: float) -> object:
    return "never compute-bound" if math.isinf(b) else b


def _memory_rows(fit) -> dict:
    """The memory rows of chapter 05's calculators, from one :class:`~llm_dataflow.core.fit.MemoryFit`:
    a short verdict (the few words of :attr:`~llm_dataflow.core.fit.MemoryFit.reason` that say what
    binds), the engine's budget, the KV room and what the batch leaves of it.

    The full line, ``fit.reason``, names every term with its bytes; it differs from setting to
    setting, and a static view of 4,800 settings that carried it was 488,959 bytes (over
    ``live.MAX_STATIC_BYTES``).  These rows take a handful of distinct strings and numbers that
    depend on fewer controls, so the view stays small, and every number is the same fit's.
    """
    if fit.refused:
        verdict = f"refused: the context exceeds the model's {fit.max_model_len_limit:,} positions"
    elif fit.over_budget > 0 or not fit.kv_tokens:
        verdict = "does not fit: the weights and the engine's other terms exceed its budget"
    elif not fit.fits_eager:
        verdict = "does not fit: the batch's KV cache exceeds the room"
    elif not fit.fits:
        verdict = "fits only with --enforce-eager: the CUDA graph pool takes room the KV cache needs"
    else:
        verdict = "fits"
    return {
        "memory (one GPU)": verdict,
        f"{'SGLang' if fit.engine.name == 'sglang' else 'vLLM'} budget": (f"{fit.fraction:g} × {fit.capacity / GiB:,.2f} GiB = "
                                      f"{fit.budget / GiB:,.2f} GiB"),
        "KV room (tokens)": fit.kv_tokens,
        "KV room left (tokens)": fit.kv_left_tokens,
    }


def _calculator_args(model, batch, context):
    """The ModelConfig of a calculator's ``model`` argument, after checking ``batch`` and
    ``context``: each error names the calculator's own parameter."""
    cfg = model_config(model) if isinstance(model, str) else model
    if not isinstance(cfg, ModelConfig):
        raise ValueError(f"model={model!r} is not allowed; give a preset name or a ModelConfig")
    require_positive("batch", batch)
    require_nonnegative("context", context)
    return cfg


@no_overflow('batch', 'context')
def decode_calculator(model: str = "Llama-2-7B", hardware_name: str = "H100-SXM", dtype: str = "bf16",
                      batch: int = 1, context: int = 0) -> dict:
    """Everything chapter 05's calculator shows for one setting on one GPU, as a dict of named
    outputs — a view of :mod:`llm_dataflow.core.accounting`.

    Keys: step time bound (ms), the memory and compute terms (ms), which resource binds,
    tokens/s per sequence and in total, bytes per generated token (GB), the compute and KV
    dtypes used (:class:`~llm_dataflow.core.formats.PrecisionPlan` defaults: BF16 KV cache for
    quantised weights), the critical batch at this context, the prefill bound of a
    ``context``-token prompt, and one GPU's memory as :func:`~llm_dataflow.core.fit.memory_fit`
    counts it (vLLM 0.21's convention, as ``plan`` counts it): a short verdict, the engine's
    budget (``0.9 × the runtime's total``), the KV room in tokens and what the batch leaves of
    it.  ``memory_fit(...).reason`` gives the same fit's full line.

    Raises:
        ValueError: ``model`` neither a preset name nor a ModelConfig, unknown
            ``hardware_name``/``dtype``, ``batch`` not a positive integer, ``context`` not a
            non-negative integer (each message names the argument).
            Counts (``batch``, ``context``) so large that a result overflows a float: a
            ValueError naming them.
    """
    model = _calculator_args(model, batch, context)
    hw = as_roofline_hardware(hardware_name)
    plan = as_precision_plan(dtype)
    cd = plan.compute_dtype(hw)
    b = decode_step_bounds(model, hw, batch, context, plan)
    fit = memory_fit(model, hw, plan, batch=batch, context=context)
    return {
        "decode step ≥ (ms)": b.time_s * 1e3,
        "memory term (ms)": b.memory_s * 1e3,
        "compute term (ms)": b.compute_s * 1e3,
        "binds": b.bound,
        "tokens/s per sequence ≤": 1.0 / b.time_s,
        "tokens/s total ≤": b.tokens_per_s,
        "GB read per token": b.bytes_per_token / GB,
        "compute / KV dtype": f"{cd} / {plan.kv_dtype}",
        "critical batch": _batch_text(critical_batch(model, hw, context, plan)),
        "prefill of B × context tokens ≥ (ms)": (prefill_lower_bound(model, hw, context, batch, plan) * 1e3
                                                 if context else "no prompt at context 0"),
        **_memory_rows(fit),
    }


@no_overflow('batch', 'context')
def batch_calculator(model: str = "Llama-2-7B", hardware_name: str = "H100-SXM", batch: int = 1,
                     context: int = 0) -> dict:
    """BF16 decode as the batch grows (a view of :mod:`llm_dataflow.core.accounting`): bytes per
    token (falls as 1/B while memory binds), step time, tokens/s in total, the two terms, which
    binds, and whether the batch's KV cache still fits on one GPU (the memory rows of
    :func:`decode_calculator`).

    Raises:
        ValueError: ``model`` neither a preset name nor a ModelConfig, unknown
            ``hardware_name``, ``batch`` not a positive integer, ``context`` not a non-negative
            integer (each message names the argument).
            Counts (``batch``, ``context``) so large that a result overflows a float: a
            ValueError naming them.
    """
    model = _calculator_args(model, batch, context)
    b = decode_step_bounds(model, hardware_name, batch, context, "bf16")
    fit = memory_fit(model, hardware_name, "bf16", batch=batch, context=context)
    return {
        "GB read per token": b.bytes_per_token / GB,
        "weights' share of a token (GB)": weight_bytes_read(model, "bf16", batch) / batch / GB,
        "step ≥ (ms)": b.time_s * 1e3,
        "memory term (ms)": b.memory_s * 1e3,
        "compute term (ms)": b.compute_s * 1e3,
        "tokens/s total ≤": b.tokens_per_s,
        "binds": b.bound,
        **_memory_rows(fit),
    }
