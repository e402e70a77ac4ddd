"""Published decode measurements as ``plan`` uses them: which rows cover a deployment.

``data/published_measurements.csv`` holds numbers the field has published with their settings
(:mod:`llm_dataflow.published` puts the package's bound beside each; appendix 09 reads them).
This module reads that file with the standard library alone and says which of its rows
**cover** a deployment, so that ``plan`` can turn its bound into the range those rows imply
(:func:`llm_dataflow.core.plan.published_range`) — and say so when none does, rather than
borrow the efficiency of another kind of system.

**Covers** (:data:`COVERS`, one rule for every deployment).  A row covers a deployment when
all of these hold:

1. the row is a decode time (``bound == "decode"``) with its batch published and a model preset;
2. the same kind of model: the row's preset is a mixture of experts exactly when the
   deployment's model is; and for a mixture of experts, the same model's shapes (layers,
   ``d_model``, attention heads and MLA ranks, routed, active and shared experts, expert width),
   because MoE rows differ by model far more than dense ones: at batch 1 and TP 8, gpt-fast's
   Mixtral-8x7B reaches 36 % of its bound and SGLang's DeepSeek-V3 3-11 % (appendix 09), so a
   band from another MoE would not transfer (a DeepSeek-R1 ``config.json`` has DeepSeek-V3's
   shapes and is covered by its rows);
3. the same layout: tensor parallel over several GPUs (``n_gpus > 1``; every such decode row
   with its batch published is tensor parallel, none expert parallel) exactly when the deployment's ``tp > 1``, and no
   expert parallelism (``ep == 1``: no row covers an expert-parallel deployment yet);
4. the same GPU class: the row's GPU has the deployment's architecture (Ampere, Hopper,
   Blackwell; a custom GPU matches none);
5. the same weight element: the same width in bits and the same kind (float or integer) —
   BF16 and FP16 match, FP8 and FP8-E4M3 match, INT4 does not match FP4;
6. the same batch.

Neither the TP degree nor the context is part of this rule.  But appendix 09 shows the
efficiency falling as the degree grows, so :func:`~llm_dataflow.core.plan.published_range` then
keeps only the covering rows at the deployment's TP degree when any exist, and otherwise says
that the band spans the rows' degrees.  The decode rows are short contexts (at most a few
hundred tokens), so the range is meant for such contexts (``plan`` prints the rows' ids and
contexts).  Weight formats
the row gives beyond :data:`~llm_dataflow.core.formats.WEIGHT_FORMATS` (``int4-g32``) cover
nothing here, because ``plan`` must compute the row's bound with the row's own format.
"""
from __future__ import annotations

import csv
import functools
import re
from importlib import resources

from .config import MODEL_PRESETS, ModelConfig, as_model_config, model_config
from .formats import WEIGHT_FORMATS, PrecisionPlan, QuantSpec, precision_plan
from .hardware import HardwareSpec, as_hardware, hardware
from .units import dtype_bits, require_positive

__all__ = ["PUBLISHED_CSV", "COVERS", "read_published_rows", "row_precision", "covering_rows"]

#: The data file, relative to the ``llm_dataflow`` package.
PUBLISHED_CSV = "data/published_measurements.csv"
#: The rule, in one line (the module docstring gives it in full).
COVERS = ("a published decode row with its batch covers a deployment of the same kind of model (dense, "
          "or an MoE of the same shapes), the same layout (tensor parallel or one GPU), the same GPU architecture, the same "
          "weight element (bits, float or integer) and the same batch")


def _params(text: str) -> dict:
    out = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        k, sep, v = part.partition("=")
        if not sep:
            raise ValueError(f"params entry {part!r} is not key=value")
        out[k.strip()] = int(v) if re.fullmatch(r"-?\d+", v.strip()) else v.strip()
    return out


def _int_or_none(s: str):
    s = s.strip()
    return int(s) if s else None


@functools.lru_cache(maxsize=1)
def _rows() -> tuple:
    text = resources.files("llm_dataflow").joinpath(PUBLISHED_CSV).read_text("utf-8")
    rows = []
    for raw in csv.DictReader(line for line in text.splitlines() if not line.startswith("#")):
        r = {k: (v or "").strip() for k, v in raw.items()}
        r["n_gpus"] = int(r["n_gpus"])
        for k in ("batch", "prompt_len", "output_len", "context"):
            r[k] = _int_or_none(r[k])
        r["value"], r["measured"] = float(r["value"]), float(r["measured"])
        r["params"] = _params(r["params"])
        rows.append(r)
    return tuple(rows)


def read_published_rows() -> list[dict]:
    """The rows of ``data/published_measurements.csv`` as dicts (fresh copies), in file order.

    Keys are the CSV's columns (:mod:`llm_dataflow.published` describes them); ``n_gpus`` is an
    int, ``batch``, ``prompt_len``, ``output_len`` and ``context`` ints or ``None`` (not
    published), ``value`` and ``measured`` floats (``measured`` in SI units: s per token of the
    whole system for a decode row), ``params`` a dict.

    Raises:
        ValueError: a ``params`` entry that is not ``key=value``.
        FileNotFoundError: the data file is not installed beside the package.
    """
    return [{**r, "params": dict(r["params"])} for r in _rows()]


def row_precision(weights: str) -> PrecisionPlan:
    """A PrecisionPlan from a row's ``weights`` column: a WEIGHT_FORMATS name or ``int4-g<N>``
    (INT4, group N, FP16 scales and 4-bit zero points, as gpt-fast's groupwise INT4 stores them
    at least), optionally with ``+kvfp8`` (an FP8 KV cache).

    Raises:
        ValueError: any other value, naming ``weights`` and what is allowed.
    """
    if not isinstance(weights, str):
        raise ValueError(f"weights={weights!r} is not allowed; give a weight format name, int4-g<N>, "
                         "optionally with '+kvfp8'")
    name, _, kv = weights.partition("+")
    if kv not in ("", "kvfp8"):
        raise ValueError(f"weights={weights!r}: the suffix must be '+kvfp8' or nothing")
    m = re.fullmatch(r"int4-g(\d+)", name)
    if m:
        base = QuantSpec("int4", group_size=int(m.group(1)), scale_dtype="fp16", zero_point=True)
    elif name in WEIGHT_FORMATS:
        base = name
    else:
        raise ValueError(f"weights={weights!r} is not allowed; give a weight format "
                         f"({', '.join(WEIGHT_FORMATS)}) or int4-g<N>, optionally with '+kvfp8'")
    return precision_plan(base, kv="fp8" if kv else None)


def _element(plan: PrecisionPlan) -> tuple:
    """(bits, is float) of the linear weights' element."""
    if plan.quant is None:
        return dtype_bits(plan.weights), True
    return dtype_bits(plan.quant.weight_dtype), plan.quant.is_float


def _kind(cfg: ModelConfig) -> tuple:
    """Rule 2's key: ("dense",) for a dense model; for a mixture of experts its shapes."""
    if not cfg.is_moe:
        return ("dense",)
    return ("moe", cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.kv_lora_rank,
            cfg.q_lora_rank, cfg.n_routed_experts, cfg.n_experts_per_token, cfg.n_shared_experts, cfg.moe_d_ff)


def covering_rows(cfg: ModelConfig, hw: HardwareSpec, *, tp: int, batch: int, weights="bf16",
                  ep: int = 1) -> list[dict]:
    """The published rows that cover a deployment (:data:`COVERS`; the module docstring gives the
    rule), as :func:`read_published_rows` gives them.

    Args:
        cfg: the deployment's model (a ModelConfig or a preset name).
        hw: its GPU (a :class:`~llm_dataflow.core.hardware.HardwareSpec` or a preset name).
        tp: its tensor-parallel degree; ``batch``: sequences per decode step; ``ep``: its
            expert-parallel degree (the rows have none, so ``ep > 1`` is covered by no row).
        weights: its weight format (a WEIGHT_FORMATS name or a PrecisionPlan).

    Raises:
        ValueError: an unknown model, GPU or ``weights``; ``tp``, ``batch`` or ``ep`` not a positive
            integer.
    """
    cfg, hw = as_model_config(cfg), as_hardware(hw)
    require_positive("tp", tp)
    require_positive("batch", batch)
    if require_positive("ep", ep) > 1:
        return []
    if not isinstance(weights, (str, PrecisionPlan)):
        raise ValueError(f"weights={weights!r} is not allowed; give a weight format name or a PrecisionPlan")
    plan = weights if isinstance(weights, PrecisionPlan) else precision_plan(weights)
    want = (_kind(cfg), tp > 1, hw.architecture, _element(plan), batch)
    out = []
    for r in read_published_rows():
        if (r["bound"] != "decode" or r["batch"] is None or r["preset"] not in MODEL_PRESETS
                or r["weights"].partition("+")[0] not in WEIGHT_FORMATS):
            continue
        got = (_kind(model_config(r["preset"])), r["n_gpus"] > 1, hardware(r["gpu"]).architecture,
               _element(row_precision(r["weights"])), r["batch"])
        if got == want:
            out.append(r)
    return out
