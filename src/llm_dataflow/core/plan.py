"""``python -m llm_dataflow plan``: the accounting model applied to an engineer's own model.

One table for one deployment — parameters, weight bytes, KV bytes, whether it fits and the KV
room left, the decode-step bound and what binds, the prefill bound, the critical batch and the
tensor-parallel traffic per token — every number from :mod:`llm_dataflow.core.accounting`,
:mod:`llm_dataflow.core.fit` and :mod:`llm_dataflow.core.roofline`, so it equals what the
chapters' calculators show for the same setting.  ``--json`` prints the same as a JSON object.

    python -m llm_dataflow plan Llama-3.1-8B --hardware H100-SXM --weights int4 --context 8192
    python -m llm_dataflow plan path/to/config.json --hardware H200 --tp 2 --json

:func:`main` is the whole command: ``main(["plan", "Llama-2-7B", "--hardware", "H100-SXM",
"--json"])`` prints to stdout and returns the exit status; it imports only the standard library
(matplotlib only for ``--plot``), so the web planner runs it in the browser (Pyodide).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys

from .accounting import kv_bytes, weight_bytes
from .config import MODEL_PRESETS, ModelConfig, as_model_config, model_config, param_count
from .fit import memory_fit
from .formats import KV_DTYPES, WEIGHT_FORMATS, precision_plan
from .hf_config import HF_CONFIG_DEFAULTS
from .hardware import DEPLOYMENT_HARDWARE, HARDWARE, REFERENCE_HARDWARE, HardwareSpec, custom_hardware
from .hardware import hardware as hw_preset
from .kv import kv_token_bytes, state_bytes_per_sequence, state_dtype_for
from .parallel import check_parallel, ep_bytes_per_token, tp_bytes_per_token_per_layer
from .quantization import checkpoint_precision
from .engines import (DEFAULT_ENGINE_VERSIONS, ENGINES, ESTIMATE_NOTE, GPU_MEMORY_UTILIZATION,
                      VLLM_MAX_NUM_BATCHED_TOKENS, VLLM_MAX_NUM_SEQS, engine_spec)
from .roofline import critical_batch, critical_batch_per_kernel, decode_step_bounds, prefill_bounds
from .coverage import covering_rows, row_precision
from .units import fmt_bytes, fmt_gib, fmt_si, no_overflow, require_nonnegative, require_positive

__all__ = ["plan_report", "load_model_arg", "hardware_arg", "published_range", "config_warnings",
           "REQUIRED_CONFIG_KEYS"]   # and main(argv), the command

#: The presets ``--hardware`` offers.
PLAN_HARDWARE = (*HARDWARE, *DEPLOYMENT_HARDWARE, *REFERENCE_HARDWARE)


def hardware_arg(hardware) -> HardwareSpec:
    """A ``--hardware`` value: a preset name (:data:`PLAN_HARDWARE`), a custom spec
    ``"memory_gb=24,bandwidth_gbs=936,bf16_tflops=71"`` (:func:`~llm_dataflow.core.hardware.custom_hardware`)
    or a HardwareSpec.

    Raises:
        ValueError: naming the preset list, or the custom spec's faulty field.
    """
    if isinstance(hardware, HardwareSpec):
        return hardware
    if isinstance(hardware, str) and "=" in hardware:
        return custom_hardware(hardware)
    if not isinstance(hardware, str) or hardware not in PLAN_HARDWARE:
        raise ValueError(f"hardware={hardware!r} is not a preset; allowed: {', '.join(PLAN_HARDWARE)}, "
                         "or a custom spec "
                         "'name=..,memory_gb=..,bandwidth_gbs=..,bf16_tflops=..'")
    return hw_preset(hardware)


def load_model_arg(arg: str) -> ModelConfig:
    """A preset name, a ``config.json`` path, or a Hugging Face folder holding ``config.json``.

    Raises:
        ValueError: naming the file and what is wrong with it (missing, not JSON, an unsupported
            ``model_type`` or a missing field), the unknown preset, or an ``arg`` that is not a
            string.
    """
    if not isinstance(arg, str):
        raise ValueError(f"arg={arg!r} is not allowed; give a preset name, a config.json path or a folder")
    if arg in MODEL_PRESETS:
        return model_config(arg)
    if not (os.path.exists(arg) or arg.endswith(".json") or os.sep in arg):
        raise ValueError(f"model {arg!r} is neither a preset ({', '.join(MODEL_PRESETS)}) nor a config.json "
                         "path or a folder holding one")
    path = os.path.join(arg, "config.json") if os.path.isdir(arg) else arg
    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such file (give a config.json or a folder holding one)")
    try:
        with open(path) as fh:
            data = json.load(fh)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: the top level must be a JSON object, not {type(data).__name__}")
    try:
        cfg = ModelConfig.from_hf(data, name=os.path.basename(os.path.dirname(os.path.abspath(path))) or None)
    except (ValueError, TypeError, KeyError) as e:
        raise ValueError(f"{path}: {e}") from None
    missing = [k for k in cfg.hf_defaulted if k in REQUIRED_CONFIG_KEYS]
    if missing:
        raise ValueError(f"{path}: config.json omits {', '.join(missing)}; transformers would fill its "
                         f"{cfg.model_type} config class's default and size another model "
                         "(a missing num_hidden_layers plans a 32-layer Mistral-Nemo, 10.07 B parameters instead of "
                         "12.25 B). Allowed: a config.json that gives " + ", ".join(missing))
    return cfg


#: ``config.json`` keys that size a model: ``plan`` refuses a config that omits one (transformers
#: would fill its class default, and another model would be planned); other omitted keys are
#: planned with transformers' defaults and listed in ``warnings``.  A multimodal config's
#: ``text_config`` keys are warned about, not refused (the hub's Gemma 3 configs omit some).
REQUIRED_CONFIG_KEYS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size", "vocab_size",
                        "n_layer", "n_embd", "n_head", "num_local_experts", "num_experts", "n_routed_experts",
                        "moe_intermediate_size", "num_experts_per_tok")


def config_warnings(cfg: ModelConfig) -> list:
    """The lines a plan of ``cfg`` must show about its config.json: the keys it omitted that were
    filled with transformers' defaults (:attr:`ModelConfig.hf_defaulted`).

    Raises:
        ValueError: ``cfg`` neither a ModelConfig nor a preset name.
    """
    cfg = as_model_config(cfg)
    table = HF_CONFIG_DEFAULTS.get(cfg.model_type, {})
    # a key whose class default is None or derived (head_dim, layer_types, ...) is computed from the
    # others when absent, as the published configs of many models rely on: not worth a warning
    keys = [k for k in cfg.hf_defaulted
            if table.get(k.removeprefix("text_config."), (0,))[0] not in (None, "derived")]
    if not keys:
        return []
    return [f"config.json omits {', '.join(keys)}: planned with transformers' defaults for "
            f"model_type {cfg.model_type!r}; check that they are this model's"]


@no_overflow('batch', 'context', 'prompt')
def plan_report(cfg: ModelConfig, hardware: str, *, tp: int = 1, ep: int = 1, batch: int = 1, context: int = 0,
                prompt: int | None = None, weights: str | None = None, kv: str | None = None,
                gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION, mem_fraction_static: float | None = None,
                max_num_batched_tokens: int = VLLM_MAX_NUM_BATCHED_TOKENS, max_num_seqs: int = VLLM_MAX_NUM_SEQS,
                non_torch_gib: float | None = None, engine: str = "vllm", engine_version: str | None = None,
                enforce_eager: bool = False, cuda_graph_gib: float | None = None, allow_long_context: bool = False,
                published: bool = True) -> dict:
    """Everything ``plan`` prints, as a dict (bytes in B, times in s).

    ``weights=None`` (the default) sizes the weights in the checkpoint's own format
    (``cfg.quantization``, read from ``quantization_config``; BF16 when there is none); a format
    name overrides it, and the report says so (``weights_source``).  ``ep`` > 1 places the
    routed experts whole on ``ep`` GPUs (``ep = tp × dp``: attention split ``tp`` ways and
    replicated over ``ep/tp`` data-parallel groups, each decoding ``batch`` sequences).

    Keys: ``model``, ``hardware``, ``tp``, ``ep``, ``dp`` (``ep/tp`` attention groups under EP,
    else 1), ``batch``, ``context``, ``prompt``, ``weights`` (the format's label),
    ``weights_source`` (``"checkpoint"``, ``"preset"``: a preset, which names no format, sized in
    BF16, or ``"override"``), ``checkpoint_format`` (what config.json's ``quantization_config``
    says, ``"unquantised"``, or for a preset that it names none),
    ``kv_dtype``, ``compute_dtype``, ``params_total``, ``params_active``, ``vision_params`` (a
    multimodal checkpoint's vision tower and projector, else None), ``weight_bytes``
    (stored, whole model: what the files hold), ``weight_bytes_per_gpu`` (what one GPU holds after
    loading: its shards, less what the engine frees, e.g. symmetric GPTQ's zero points under Marlin), ``kv_bytes_per_token`` (whole model),
    ``kv_bytes`` (batch × context, whole model; a hybrid's state included), ``kv_bytes_per_gpu``,
    ``state_bytes_per_sequence`` (a hybrid model's fixed linear-attention state per sequence,
    whole model, in the state's dtype; 0 without linear-attention layers) and
    ``state_bytes_per_sequence_per_gpu`` (its share on one GPU, ``/ tp``), ``activation_bytes_per_gpu``,
    ``reserve_bytes_per_gpu``, ``fits``, ``fit``, ``kv_room_tokens``, the serving-engine memory
    (:func:`~llm_dataflow.core.serving.engine_memory`: ``memory_convention``, ``memory_fraction``,
    ``runtime_memory_bytes`` and ``runtime_memory_source``, ``memory_budget_bytes``,
    ``non_torch_bytes_per_gpu`` (approximate), ``max_num_batched_tokens``, ``kv_room_bytes_per_gpu``,
    ``max_concurrency`` at ``context``, ``memory_terms`` (one GPU's memory term by term,
    :meth:`~llm_dataflow.core.fit.MemoryFit.terms`: ``weights``, ``activations``, ``non_torch``,
    ``cuda_graphs``, ``kv_asked``, ``kv_unmet``, ``kv_free``, ``reserve``, each ``{name, bytes,
    estimate}``: what a bar of the device draws; they sum to ``runtime_memory_bytes`` when the
    deployment fits); ``fits``, ``fit``, ``kv_room_tokens`` (the engine's whole KV
    room as it logs it, whole blocks) and ``reserve_bytes_per_gpu`` (the ``1 − fraction`` share) follow
    it).  Issue 42 added: ``engine`` and ``engine_version`` (whose convention), ``engine_rules`` (what
    that version does, one line each), ``fits_eager`` (the verdict with ``--enforce-eager``),
    ``kv_left_tokens`` (room left beside the batch), ``kv_allocated_bytes_per_gpu`` (the KV the engine
    sets aside for the batch, by its blocks), ``non_torch_source`` and ``non_torch_estimate`` (where
    the figure comes from; False when given), ``cuda_graph_bytes_per_gpu``, ``cuda_graph_source``,
    ``cuda_graphs_in_budget`` (vLLM from 0.21), ``enforce_eager``, ``max_num_seqs``, ``kv_layout``
    (the engine's layout in words), ``kv_groups`` (per kind of layer: ``kind``, ``layers``,
    ``tokens_per_sequence``, ``bytes_per_sequence``), ``kv_room_note`` (that the room is an
    estimate, and how far off it can be), ``max_model_len_limit`` (the model's positions),
    ``warnings`` (config.json keys planned with defaults, a context beyond the positions: the page
    shows them), ``prefill_one_prompt_s`` and ``prefill_one_prompt_binds`` (one prompt's prefill
    bound, the floor of its TTFT; ``prefill_s`` is the whole batch's), ``published_tp_matched``
    (the band's rows have the deployment's TP degree); ``decode_step_s`` (lower
    bound on one GPU's share — the whole step at tp = 1: its weight reads are
    :func:`~llm_dataflow.core.accounting.weight_bytes_read` with ``tp``/``ep``, replicated tensors such as MLA's
    down-projections and the routers whole, the rest ``1/tp``; its FLOPs those of the same shares,
    attention ``1/tp``: :func:`~llm_dataflow.core.roofline.decode_step_bounds` with ``tp``/``ep``),
    ``binds``, ``decode_tokens_per_s``,
    ``prefill_s`` and ``prefill_binds`` (for ``prompt`` tokens, one GPU's share split the same
    way: :func:`~llm_dataflow.core.roofline.prefill_bounds` with ``tp``/``ep``; ``None`` at prompt 0),
    ``critical_batch`` (sequences of one attention group at which one GPU's step turns
    compute-bound, :func:`~llm_dataflow.core.roofline.critical_batch` with ``tp``/``ep``;
    ``None`` when never: under TP a replicated MLA latent or KV head is read whole on every GPU
    while its FLOPs are split), ``tp_bytes_per_token`` (bytes handed to
    all-reduce per token over all layers; 0 at tp = 1), ``ep_bytes_per_token`` (all-to-all
    dispatch + combine bytes per token over all MoE layers, uniform routing,
    :func:`~llm_dataflow.core.parallel.ep_bytes_per_token`; 0 at ep = 1, and 0 at dp = 1, where
    vLLM combines the experts in TP's all-reduce: ``FusedMoEParallelConfig.use_all2all_kernels``
    is ``dp_size > 1 and use_ep``, ``vllm/model_executor/layers/fused_moe/config.py``).  Under EP the decode
    bound is one GPU's share: the non-expert weights by their share, the experts the ``batch × dp``
    tokens hit ``/ep`` (balanced placement: the mean GPU; at small batches the GPU whose experts
    the router picks most reads more, and each layer waits for it), its KV; ``decode_tokens_per_s`` counts all
    ``batch × dp`` sequences.
    The critical batch per kernel
    (:func:`~llm_dataflow.core.roofline.critical_batch_per_kernel` of the layout, per attention group):
    ``critical_batch_dense_part`` and ``critical_batch_routed_experts`` (``None`` when never
    compute-bound, or for a dense model); with ``published`` (default), the range published rows
    imply (:func:`published_range`: ``published_rows``, ``published_efficiency``,
    ``published_tokens_per_s``, ``published_note``).

    Raises:
        ValueError: ``cfg`` neither a ModelConfig nor a preset name, ``hardware`` neither a preset
            (:data:`PLAN_HARDWARE`) nor a custom spec, unknown ``weights`` or ``kv``, a ``tp``
            :func:`check_parallel` rejects, ``batch`` not a positive integer, ``context`` or
            ``prompt`` not a non-negative integer (each message names the argument).
            Counts (``batch``, ``context``, ``prompt``) so large that a result overflows a float: a
            ValueError naming them.
    """
    cfg = as_model_config(cfg)
    hw = hardware_arg(hardware)
    check_parallel(cfg, tp=tp, ep=ep)
    require_positive("batch", batch)
    require_nonnegative("context", context)
    prompt = context if prompt is None else require_nonnegative("prompt", prompt)
    if kv is not None and (not isinstance(kv, str) or kv not in KV_DTYPES):
        raise ValueError(f"kv={kv!r} is not allowed; allowed: None or {', '.join(KV_DTYPES)}")
    # a preset holds a model's shapes, not a checkpoint: it names no format (DeepSeek-V3's
    # published checkpoint is FP8, its preset is not); a config.json without a
    # quantization_config is an unquantised checkpoint
    preset = cfg.quantization is None and MODEL_PRESETS.get(cfg.name) == cfg
    if weights is None:
        plan, source = checkpoint_precision(cfg, kv), "preset" if preset else "checkpoint"
    else:
        plan, source = precision_plan(weights, kv=kv), "override"
    warnings = config_warnings(cfg)
    fmt = ("none: a preset holds the shapes, not a checkpoint (the published checkpoint may be quantised; "
           "--weights sets its format)" if preset else
           "unquantised" if cfg.quantization is None else cfg.quantization.source or "quantised")
    for name, v in (("non_torch_gib", non_torch_gib), ("cuda_graph_gib", cuda_graph_gib)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < 1e6):
            raise ValueError(f"{name}={v!r} is not allowed; allowed: a number of GiB >= 0")
    fit = memory_fit(cfg, hw, plan, batch=batch, context=context, prompt_len=prompt, tp=tp, ep=ep, engine=engine,
                     engine_version=engine_version, gpu_memory_utilization=gpu_memory_utilization,
                     mem_fraction_static=mem_fraction_static, max_num_batched_tokens=max_num_batched_tokens,
                     max_num_seqs=max_num_seqs, non_torch=None if non_torch_gib is None else non_torch_gib * 2**30,
                     enforce_eager=enforce_eager,
                     cuda_graph_bytes=None if cuda_graph_gib is None else cuda_graph_gib * 2**30,
                     allow_long_context=allow_long_context)
    # the step bound of one GPU: its share of each weight (parallel.tensor_shares, the memory
    # fit's split: norms, routers, MLA down-projections and surplus KV heads whole, the rest 1/tp;
    # under EP its E/ep experts, hit by the tokens of all dp attention groups), of the KV heads
    # and of a hybrid's state, and the FLOPs of those shares
    d = decode_step_bounds(cfg, hw, batch, context, plan, tp=tp, ep=ep)
    dp = ep // tp if ep > 1 else 1
    step = d.time_s
    # at dp = 1 vLLM runs no all-to-all: each GPU's experts see every token and TP's all-reduce
    # (tp_bytes_per_token) combines them
    epb = (ep_bytes_per_token(cfg, ep, plan)["total"] * sum(map(cfg.is_moe_layer, range(cfg.n_layers)))
           if dp > 1 else 0)
    # the prefill of the batch's prompts, and one prompt alone: the floor of one request's TTFT
    pre = prefill_bounds(cfg, hw, prompt, batch, plan, tp=tp, ep=ep) if prompt else None
    one = prefill_bounds(cfg, hw, prompt, 1, plan, tp=tp, ep=ep) if prompt else None
    cb = critical_batch(cfg, hw, context, plan, tp=tp, ep=ep)
    tpb = tp_bytes_per_token_per_layer(cfg, tp, plan)["handed"] * cfg.n_layers if tp > 1 else 0
    lay = fit.layout
    return {
        "model": cfg.name, "hardware": hw.name, "tp": tp, "ep": ep, "dp": dp, "batch": batch, "context": context,
        "prompt": prompt, "weights": plan.label if weights is None else weights, "weights_source": source,
        "checkpoint_format": fmt, "kv_dtype": plan.kv_dtype, "compute_dtype": plan.compute_dtype(hw),
        "params_total": param_count(cfg), "params_active": param_count(cfg, active=True),
        "vision_params": cfg.vision_params,
        "weight_bytes": weight_bytes(cfg, plan), "weight_bytes_per_gpu": fit.weights,
        "kv_bytes_per_token": kv_token_bytes(cfg, plan.kv_dtype), "kv_bytes": kv_bytes(cfg, context, batch, plan),
        "kv_bytes_per_gpu": fit.kv, "kv_allocated_bytes_per_gpu": fit.kv_allocated,
        "state_bytes_per_sequence": state_bytes_per_sequence(cfg, state_dtype_for(plan.kv_dtype)),
        "state_bytes_per_sequence_per_gpu": fit.state_per_sequence, "activation_bytes_per_gpu": fit.activations,
        "reserve_bytes_per_gpu": fit.reserve, "fits": fit.fits, "fits_eager": fit.fits_eager, "fit": fit.reason,
        "kv_room_tokens": fit.kv_tokens, "kv_left_tokens": fit.kv_left_tokens,
        "memory_convention": fit.convention, "memory_fraction": fit.fraction,
        "engine": fit.engine.name, "engine_version": ".".join(map(str, fit.engine.version)),
        "engine_rules": fit.engine.rules(),
        "runtime_memory_bytes": fit.total, "runtime_memory_source": fit.total_source,
        "memory_budget_bytes": fit.budget, "non_torch_bytes_per_gpu": fit.non_torch,
        "non_torch_source": fit.non_torch_source, "non_torch_estimate": fit.non_torch_estimated,
        "cuda_graph_bytes_per_gpu": fit.cuda_graphs, "cuda_graph_source": fit.cuda_graphs_source,
        "cuda_graphs_in_budget": fit.graphs_in_budget, "enforce_eager": fit.enforce_eager,
        "max_num_batched_tokens": fit.max_num_batched_tokens, "max_num_seqs": max_num_seqs,
        "kv_room_bytes_per_gpu": fit.kv_bytes, "max_concurrency": fit.max_concurrency,
        "kv_layout": lay.rule, "kv_groups": [dict(g) for g in lay.groups], "kv_room_note": ESTIMATE_NOTE,
        "max_model_len_limit": fit.max_model_len_limit,
        "memory_terms": fit.terms(),
        "warnings": [*warnings, *fit.warnings],
        "decode_step_s": step,
        "binds": d.bound,
        "decode_tokens_per_s": batch * dp / step,
        "prefill_s": pre.time_s if pre else None, "prefill_binds": pre.bound if pre else None,
        "prefill_one_prompt_s": one.time_s if one else None, "prefill_one_prompt_binds": one.bound if one else None,
        "critical_batch": None if math.isinf(cb) else int(cb),
        "tp_bytes_per_token": tpb, "ep_bytes_per_token": epb,
        **_per_kernel(cfg, hw, context, plan, tp, ep),
        **(published_range(cfg, hw, tp=tp, ep=ep, batch=batch, weights=plan, tokens_per_s=batch * dp / step)
           if published else {}),
    }


def _per_kernel(cfg: ModelConfig, hw, context: int, plan, tp: int, ep: int) -> dict:
    """The critical batch per kernel group of the layout (per attention group), for :func:`plan_report`."""
    k = critical_batch_per_kernel(cfg, hw, context, plan, tp=tp, ep=ep)
    fin = lambda x: None if x is None or math.isinf(x) else int(x)  # noqa: E731
    return {"critical_batch_dense_part": fin(k.dense_part), "critical_batch_routed_experts": fin(k.routed_experts)}


def published_range(cfg: ModelConfig, hw: HardwareSpec, *, tp: int, batch: int, weights,
                    tokens_per_s: float, ep: int = 1) -> dict:
    """The decode throughput that published rows covering this deployment imply (token/s).

    Coverage is :data:`~llm_dataflow.core.coverage.COVERS` (:func:`~llm_dataflow.core.coverage.covering_rows`:
    same kind of model (dense, or an MoE of the same shapes), layout (TP or one GPU), GPU architecture, weight element
    and batch).  Each covering row's efficiency is its published tokens/s over the bound this
    same command computes for the row's own setting (its model, GPU, ``tp`` = its GPU count,
    batch, context, weights); the range is ``tokens_per_s`` (this deployment's bound) times the
    lowest and the highest of those efficiencies.  With no covering row the range is ``None``
    and the note says so: a band from another kind of system (dense, or one GPU) is not used.

    Returns:
        ``published_rows`` (ids), ``published_efficiency`` (``[min, max]`` or ``None``),
        ``published_tokens_per_s`` (``[low, high]`` or ``None``), ``published_note`` (one line).

    Raises:
        ValueError: what :func:`~llm_dataflow.core.coverage.covering_rows` rejects; ``tokens_per_s``
            not a positive number.
    """
    cfg, hw = as_model_config(cfg), hardware_arg(hw)
    require_positive("tokens_per_s", tokens_per_s, integer=False)
    rows = covering_rows(cfg, hw, tp=tp, batch=batch, weights=weights, ep=ep)   # checks tp, batch, weights
    if ep > 1 and not rows:
        kind_ep = f"MoE with expert parallel {ep} on {hw.architecture}"
        return {"published_rows": [], "published_efficiency": None, "published_tokens_per_s": None,
                "published_note": f"no published row covers {kind_ep}; no efficiency band applied"}
    model_kind = f"an MoE with {cfg.name}'s shapes" if cfg.is_moe else "dense"
    kind = (f"{model_kind} {'under TP' if tp > 1 else 'on one GPU'} on "
            f"{hw.architecture}, {weights.label if hasattr(weights, 'label') else weights} weights, batch {batch}")
    if not rows:
        return {"published_rows": [], "published_efficiency": None, "published_tokens_per_s": None,
                "published_note": f"no published row covers {kind}; no efficiency band applied "
                                  "(a band from another kind of system would not transfer)"}
    # the same TP degree when a row has it: efficiency falls as the degree grows (appendix 09), so a
    # band from another degree would not transfer; else the band spans the rows' degrees, said so
    same = [row for row in rows if row["n_gpus"] == tp]
    degrees = sorted({row["n_gpus"] for row in rows})
    if same:
        rows, span = same, (f" at TP {tp}" if tp > 1 else "")
    else:
        span = (f"; no row at TP {tp}: the band spans rows at TP {', '.join(map(str, degrees))}" if tp > 1 else "")
    eff = []
    for row in rows:
        p = row_precision(row["weights"])
        bound = plan_report(model_config(row["preset"]), row["gpu"], tp=row["n_gpus"], batch=row["batch"],
                            context=row["context"] or 0, prompt=0, weights=row["weights"].partition("+")[0],
                            kv=p.kv, published=False)["decode_tokens_per_s"]
        eff.append((1 / row["measured"]) / bound)
    lo, hi = min(eff), max(eff)
    ctx = sorted({row["context"] or 0 for row in rows})
    ctx = f"context {ctx[0]:,}" if len(ctx) == 1 else f"contexts {ctx[0]:,}–{ctx[-1]:,}"
    return {"published_rows": [row["id"] for row in rows], "published_efficiency": [lo, hi],
            "published_tokens_per_s": [lo * tokens_per_s, hi * tokens_per_s],
            "published_tp_matched": bool(same) or tp == 1,
            "published_note": f"{len(rows)} published row{'s' * (len(rows) > 1)} cover{'s' * (len(rows) == 1)} "
                              f"{kind}{span} ({ctx}): {', '.join(row['id'] for row in rows)}"}


def _per_kernel_rows(r: dict) -> list:
    if r["critical_batch_routed_experts"] is None and r["params_total"] == r["params_active"]:
        return []
    show = lambda x: "never compute-bound" if x is None else f"{x:,} sequences"  # noqa: E731
    if r["dp"] > 1:   # under EP the experts see the tokens of every attention group
        e = r["critical_batch_routed_experts"]
        return [("  attention, dense", show(r["critical_batch_dense_part"]) + " per attention group"),
                ("  routed experts", show(e) + (" per attention group" if e is None else
                                                f" per attention group, {e * r['dp']:,} in all (each expert "
                                                "sees B·k/E of all the groups' tokens)"))]
    return [("  attention, dense", show(r["critical_batch_dense_part"])),
            ("  routed experts", show(r["critical_batch_routed_experts"]) + " (each expert sees B·k/E tokens)")]


def _critical_row(r: dict) -> tuple:
    cb = r["critical_batch"]
    if r["tp"] == 1 and r["ep"] == 1:
        return ("critical batch", "never compute-bound" if cb is None else f"{cb:,} sequences")
    where = " per attention group" if r["dp"] > 1 else ""
    return ("critical batch", ("never compute-bound" if cb is None else f"{cb:,} sequences{where}")
            + " (one GPU's share of the step; replicated weights and KV whole)")


def _published_rows(r: dict) -> list:
    if "published_note" not in r:
        return []
    if r["published_tokens_per_s"] is None:
        return [("published range", r["published_note"])]
    (lo, hi), (elo, ehi) = r["published_tokens_per_s"], r["published_efficiency"]
    return [("published range", f"{lo:,.1f}–{hi:,.1f} tokens/s: the bound × {100 * elo:.1f}–{100 * ehi:.1f} % "
                                "efficiency of the covering published rows"),
            ("  rows", r["published_note"])]


def _engine_label(r: dict) -> str:
    return f"{'vLLM' if r['engine'] == 'vllm' else 'SGLang'} {r['engine_version']}"


def _engine_memory_row(r: dict) -> str:
    g = fmt_gib
    if r["engine"] == "sglang":
        return (f"{r['memory_convention']} = {r['memory_fraction']:g} of ({g(r['runtime_memory_bytes'])} − "
                f"{g(r['non_torch_bytes_per_gpu'])} allocated before loading, an estimate): pool "
                f"{g(r['memory_budget_bytes'])} = weights {g(r['weight_bytes_per_gpu'])} + KV; activations and CUDA "
                "graphs live in the rest")
    graphs = ("" if r["enforce_eager"] else
              f" + CUDA graphs ≈ {g(r['cuda_graph_bytes_per_gpu'])} (estimate)" if r["cuda_graphs_in_budget"] else
              f"; CUDA graphs ≈ {g(r['cuda_graph_bytes_per_gpu'])} (estimate) captured after, in the "
              f"{g(r['reserve_bytes_per_gpu'])} left")
    nt = "estimate" if r["non_torch_estimate"] else "given"
    return (f"{r['memory_convention']} = {r['memory_fraction']:g}: budget {g(r['memory_budget_bytes'])} = weights "
            f"{g(r['weight_bytes_per_gpu'])} + activations {g(r['activation_bytes_per_gpu'])} (a forward of "
            f"{r['max_num_batched_tokens']:,} tokens) + non-torch ≈ {g(r['non_torch_bytes_per_gpu'])} ({nt})"
            + (graphs if r["cuda_graphs_in_budget"] else "") + " + KV" + ("" if r["cuda_graphs_in_budget"] else graphs))


def _prefill_rows(r: dict) -> list:
    if r["prefill_s"] is None:
        return [("prefill ≥", "no prompt")]
    one = f"{fmt_si(r['prefill_one_prompt_s'], 's')} ({r['prefill_one_prompt_binds']}-bound)"
    if r["batch"] == 1:
        return [("prefill ≥", f"{one} for one prompt of {r['prompt']:,} tokens: the floor of its TTFT")]
    return [("prefill ≥", f"{one} for one prompt of {r['prompt']:,} tokens: the floor of its TTFT"),
            ("  whole batch", f"{fmt_si(r['prefill_s'], 's')} ({r['prefill_binds']}-bound) to prefill all "
                              f"{r['batch']:,} prompts (batch × {r['prompt']:,} tokens)")]


def _table(r: dict) -> str:
    b = lambda x: f"{fmt_bytes(x)} ({x:,.0f} B)"  # noqa: E731
    rows = [
        ("model", f"{r['model']} on {r['hardware']} × {r['tp']} (tensor parallel)" if r["ep"] == 1 else
         f"{r['model']} on {r['hardware']} × {r['ep']} (expert parallel {r['ep']}: tensor parallel {r['tp']} "
         f"× data parallel {r['dp']} for attention)"),
        ("setting", f"batch {r['batch']}" + (f" per attention group ({r['batch'] * r['dp']:,} in all)"
                                            if r["dp"] > 1 else "") + f", context {r['context']:,}, prompt {r['prompt']:,}"),
        ("checkpoint", r["checkpoint_format"]),
        ("precision", ("weights as the checkpoint stores them" if r["weights_source"] == "checkpoint" else
                       f"weights {r['weights']} (a preset names no format; --weights sets one)"
                       if r["weights_source"] == "preset" else
                       f"weights {r['weights']} (set by --weights; a preset names no format)"
                       if r["checkpoint_format"].startswith("none:") else
                       f"weights {r['weights']} (--weights overrides the checkpoint's format)")
         + f", KV cache {r['kv_dtype']}, compute {r['compute_dtype']}"),
        ("parameters", f"{r['params_total']:,} total, {r['params_active']:,} active per token"),
        *([("vision tower", f"{r['vision_params']:,} parameters beside the language model; "
                            "not in the plan (it sizes the language model)")] if r["vision_params"] else []),
        ("weight bytes", f"{b(r['weight_bytes'])} stored; per GPU {fmt_bytes(r['weight_bytes_per_gpu'])} as loaded"),
        ("KV bytes per token", b(r["kv_bytes_per_token"])),
        ("KV bytes at context", f"{b(r['kv_bytes'])}; per GPU {fmt_bytes(r['kv_bytes_per_gpu'])}"),
        *([("state per sequence", f"{b(r['state_bytes_per_sequence'])} of linear-attention state, whatever the "
                                  f"context; per GPU {fmt_bytes(r['state_bytes_per_sequence_per_gpu'])}, charged "
                                  "to every sequence beside its KV")] if r["state_bytes_per_sequence"] else []),
        ("device memory", f"{fmt_gib(r['runtime_memory_bytes'])} per GPU as the runtime reports it "
                          f"({r['runtime_memory_source']})"),
        ("engine", f"{_engine_label(r)}: " + "; ".join(r["engine_rules"][1:])),
        ("engine memory", _engine_memory_row(r)),
        ("memory", r["fit"]),
        ("KV room", f"{r['kv_room_tokens']:,} tokens ({fmt_gib(r['kv_room_bytes_per_gpu'])} per GPU), an estimate "
                    "built on logged figures, not a bound"
                    + ("" if r["max_concurrency"] is None else
                       f"; max concurrency {r['max_concurrency']:,.2f} at {r['context']:,} tokens")),
        ("  layout", r["kv_layout"] + "".join(
            f"; {g['kind'].replace('_attention', '')} x {g['layers']}: {g['tokens_per_sequence']:,} tokens per sequence"
            for g in r["kv_groups"] if g["kind"] != "linear_attention")),
        *([("  with graphs", "does not fit with CUDA graphs; fits with --enforce-eager")]
          if r["fits_eager"] and not r["fits"] else []),
        ("decode step ≥", f"{fmt_si(r['decode_step_s'], 's')} ({r['binds']}-bound), "
                          f"≤ {r['decode_tokens_per_s']:,.1f} tokens/s"),
        *_prefill_rows(r),
        _critical_row(r),
        *_per_kernel_rows(r),
        ("TP traffic per token", "none (tp = 1)" if not r["tp"] > 1 else f"{fmt_bytes(r['tp_bytes_per_token'])} "
                                 "handed to all-reduce over all layers"),
    ]
    if r["ep"] > 1:
        rows.append(("EP traffic per token", f"{fmt_bytes(r['ep_bytes_per_token'])} dispatched and combined "
                                             "(all-to-all) over all MoE layers, uniform routing" if r["dp"] > 1 else
                     "no all-to-all at dp = 1: every GPU's experts see every token, and TP's all-reduce "
                     "(above) combines them (vLLM)"))
    rows += _published_rows(r)
    rows += [("warning", w) for w in r["warnings"]]
    w = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{w}}  {v}" for k, v in rows)


def _plot(cfg: ModelConfig, args, path: str) -> None:
    # matplotlib is an optional dependency, imported only when --plot asks for a figure
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hw = hardware_arg(args.hardware)
    plan = checkpoint_precision(cfg, args.kv) if args.weights is None else precision_plan(args.weights, kv=args.kv)
    batches = [2**i for i in range(0, 15)]
    # one GPU's share of the step, as the table's decode row (the same layout)
    bounds = [decode_step_bounds(cfg, hw, b, args.context, plan, tp=args.tp, ep=args.ep) for b in batches]
    mem = [d.memory_s * 1e3 for d in bounds]
    comp = [d.compute_s * 1e3 for d in bounds]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.loglog(batches, mem, "-o", ms=3, label="memory term")
    ax.loglog(batches, comp, "-s", ms=3, label="compute term")
    dp = args.ep // args.tp if args.ep > 1 else 1
    ax.set_xlabel("batch B (sequences per decode step" + (", per attention group)" if dp > 1 else ")"))
    ax.set_ylabel("decode step lower bound (ms)" + (", one GPU" if args.tp > 1 or args.ep > 1 else ""))
    layout = f", TP {args.tp}" + (f", EP {args.ep}" if args.ep > 1 else "") if args.tp > 1 or args.ep > 1 else ""
    ax.set_title(f"{cfg.name}, {plan.label} weights, context {args.context:,}, {hw.name}{layout}", fontsize=10)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m llm_dataflow``: parse ``argv`` (default ``sys.argv[1:]``), print
    the table or ``--json`` to stdout, and return the exit status: 0, or 2 for bad input, after
    argparse's usage line and a message naming the argument on stderr (``--help``: 0).  It never
    raises ``SystemExit``, so a caller (the web planner in Pyodide) reads the status it returns.
    """
    try:
        return _run(argv)
    except SystemExit as e:           # argparse: --help (0) and bad input (2)
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)


def _run(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llm_dataflow",
                                     description="Executable lessons on how data moves through LLM inference.")
    sub = parser.add_subparsers(dest="command", required=True)
    # listed for --help only: ``python -m llm_dataflow explain …`` is taken by core.explain.main
    # before this parser sees it (core.explain imports this module, not the reverse)
    sub.add_parser("explain", help="reconcile a vLLM or SGLang startup log or command line with the plan "
                                   "(python -m llm_dataflow explain --help)", add_help=False)
    p = sub.add_parser("plan", help="bytes, fit and roofline bounds of one deployment",
                       description="Bytes, memory fit and roofline bounds of one deployment: the numbers the book's "
                                   "calculators show, in the serving engine's own convention (vLLM by default, "
                                   "--engine sglang). The KV room is " + ESTIMATE_NOTE + ".")
    p.add_argument("model", metavar="MODEL_OR_CONFIG",
                   help="a preset name, a config.json, or a Hugging Face folder holding config.json (a config.json "
                        "that omits a key sizing the model, e.g. num_hidden_layers, is refused; other omitted keys "
                        "are planned with transformers' defaults and listed as warnings)")
    p.add_argument("--hardware", required=True, metavar="GPU",
                   help=f"a GPU preset ({', '.join(PLAN_HARDWARE)}) or a custom spec "
                        "'name=X,memory_gb=24,bandwidth_gbs=936,bf16_tflops=71[,runtime_gib=..,link=..,nvlink=..]'")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree (default 1)")
    p.add_argument("--ep", type=int, default=1,
                   help="expert-parallel degree: routed experts placed whole on EP GPUs, attention split --tp "
                        "ways and replicated over ep/tp data-parallel groups (vLLM: ep = tp × dp; default 1)")
    p.add_argument("--batch", type=int, default=1, help="sequences per decode step (default 1)")
    p.add_argument("--context", type=int, default=0,
                   help="tokens already in each sequence's KV cache (default 0); beyond the model's positions "
                        "(max_position_embeddings, RoPE scaling included) the engine refuses to start")
    p.add_argument("--prompt", type=int, default=None,
                   help="prompt length for the prefill bounds (default: the context)")
    p.add_argument("--weights", default=None, choices=list(WEIGHT_FORMATS),
                   help="weight format, overriding the checkpoint's own (default: the format config.json's "
                        "quantization_config gives, else bf16)")
    p.add_argument("--kv", default=None, choices=list(KV_DTYPES), help="KV-cache dtype (default: bf16, fp32 for fp32)")
    p.add_argument("--engine", default="vllm", choices=list(ENGINES),
                   help="the serving engine whose memory convention is used (default vllm; --mem-fraction-static "
                        "alone also selects sglang)")
    p.add_argument("--engine-version", default=None, metavar="X.Y",
                   help=f"the engine's version (default: vllm {DEFAULT_ENGINE_VERSIONS['vllm']}, sglang "
                        f"{DEFAULT_ENGINE_VERSIONS['sglang']}): vLLM before 0.8 is V0; from 0.9 V1's hybrid KV-cache "
                        "manager gives sliding and chunked layers their own blocks; from 0.21 CUDA graph memory is "
                        "profiled and subtracted before the KV cache (vLLM's startup log)")
    p.add_argument("--gpu-memory-utilization", type=float, default=GPU_MEMORY_UTILIZATION,
                   help="vLLM's fraction of the device's total memory the engine may use (default 0.9, vLLM's)")
    p.add_argument("--mem-fraction-static", type=float, default=None,
                   help="SGLang's fraction of the memory free before loading that holds weights + KV pool "
                        "(default: none; required with --engine sglang, whose own default depends on the GPU)")
    p.add_argument("--max-num-batched-tokens", type=int, default=VLLM_MAX_NUM_BATCHED_TOKENS,
                   help=f"tokens of the engine's profiling forward and of one chunked-prefill step (default "
                        f"{VLLM_MAX_NUM_BATCHED_TOKENS:,}: vllm serve's V1 default on GPUs of 70 GiB or more; 2,048 "
                        "below; give your engine's value)")
    p.add_argument("--max-num-seqs", type=int, default=VLLM_MAX_NUM_SEQS,
                   help=f"sequences the engine schedules at once; its profiling forward computes their logits "
                        f"(default {VLLM_MAX_NUM_SEQS}, vLLM's)")
    p.add_argument("--non-torch-gib", type=float, default=None,
                   help="memory outside torch's allocator per GPU, GiB (default: an estimate from the engine "
                        "version's logs at this TP degree: vLLM V1 on NVLink 0.27 / 2.08 / 2.17 GiB at TP 1 / 2 / 4, "
                        "V0 1.79 x (1 + log2 tp), 0.36 without NVLink; SGLang the CUDA context 0.51 + 2.01 at "
                        "TP > 1; give your engine's logged figure)")
    p.add_argument("--enforce-eager", action="store_true",
                   help="no CUDA graphs (vLLM --enforce-eager; default: graphs captured)")
    p.add_argument("--cuda-graph-gib", type=float, default=None,
                   help="vLLM's CUDA graph pool per GPU, GiB (default 1.04, the mean of vLLM 0.19's logged pools, "
                        "0.51-1.85; inside the budget from 0.21, else out of the 1 - gpu_memory_utilization share)")
    p.add_argument("--allow-long-context", action="store_true",
                   help="plan a context beyond the model's positions anyway, as VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 "
                        "lets vLLM start (default: refused, as the engine refuses it)")
    p.add_argument("--json", action="store_true", help="print a JSON object instead of the table")
    p.add_argument("--plot", metavar="FILE", help="also save the decode bound against batch to FILE")
    args = parser.parse_args(argv)
    for name in ("tp", "ep", "batch", "max_num_batched_tokens", "max_num_seqs"):
        if getattr(args, name) < 1:
            parser.error(f"argument --{name.replace('_', '-')}: {getattr(args, name)} is not allowed; "
                         "it must be >= 1")
    for name in ("gpu_memory_utilization", "mem_fraction_static"):
        v = getattr(args, name)
        if v is not None and not 0 < v <= 1:
            parser.error(f"argument --{name.replace('_', '-')}: {v} is not allowed; allowed: 0 < x <= 1")
    for name in ("non_torch_gib", "cuda_graph_gib"):
        v = getattr(args, name)
        if v is not None and not 0 <= v < 1e6:
            parser.error(f"argument --{name.replace('_', '-')}: {v} is not allowed; it must be >= 0")
    engine = "sglang" if args.mem_fraction_static is not None else args.engine
    if engine == "sglang" and args.mem_fraction_static is None:
        parser.error("argument --mem-fraction-static: required with --engine sglang (SGLang's default depends on "
                     "the GPU and the TP degree; give the engine's value)")
    try:
        engine_spec(engine, args.engine_version)
    except ValueError as e:
        parser.error(f"argument --engine-version: {e}")
    try:
        hardware_arg(args.hardware)
    except ValueError as e:
        parser.error(f"argument --hardware: {e}")
    for name in ("context", "prompt"):
        v = getattr(args, name)
        if v is not None and v < 0:
            parser.error(f"argument --{name}: {v} is not allowed; it must be >= 0")
    try:
        cfg = load_model_arg(args.model)
    except ValueError as e:
        parser.error(f"argument MODEL_OR_CONFIG: {e}")
    try:
        r = plan_report(cfg, args.hardware, tp=args.tp, ep=args.ep, batch=args.batch, context=args.context,
                        prompt=args.prompt, weights=args.weights, kv=args.kv,
                        gpu_memory_utilization=args.gpu_memory_utilization,
                        mem_fraction_static=args.mem_fraction_static,
                        max_num_batched_tokens=args.max_num_batched_tokens, max_num_seqs=args.max_num_seqs,
                        non_torch_gib=args.non_torch_gib, engine=engine, engine_version=args.engine_version,
                        enforce_eager=args.enforce_eager, cuda_graph_gib=args.cuda_graph_gib,
                        allow_long_context=args.allow_long_context)
    except ValueError as e:
        msg = str(e)
        if msg.startswith("expert parallel degree ep="):
            msg = "argument --ep: " + msg
        parser.error(msg.replace("tensor parallel degree tp=", "argument --tp: "))
    for w in r["warnings"]:
        print(f"warning: {w}", file=sys.stderr)
    if args.json:
        print(json.dumps(r, indent=1))
    else:
        print(_table(r))
    if args.plot:
        _plot(cfg, args, args.plot)
        if not args.json:
            print(f"figure written to {args.plot}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
