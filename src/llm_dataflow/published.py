"""The model against the world: published GPU measurements beside the package's bounds.

No GPU is needed to check the book's GPU-scale claims against reality: the field publishes
measurements together with their settings.  ``data/published_measurements.csv`` holds such
numbers (each found in its primary source: a README at a pinned commit, a paper's table or
section, an MLPerf result file, a maintainer's statement in an issue thread), and
:func:`published_measurements` puts beside each one what the package predicts **from the row's
setting** — never a typed number:

* a **time** row (a latency, or the time per token that a published tokens/s implies) gets the
  package's *lower bound* on that time (:mod:`llm_dataflow.roofline` for decode/prefill steps,
  :func:`~llm_dataflow.gemm.gemm_traffic` with the chip's peaks for one GEMM,
  :func:`~llm_dataflow.core.collectives.collective_time` for a collective), and ``efficiency =
  bound / measured``;
* a **rate** row (``bandwidth`` in B/s, ``flops`` in FLOP/s) gets the *peak* of the part
  (:class:`~llm_dataflow.core.hardware.HardwareSpec` HBM bandwidth or dense peak FLOP/s, a
  :class:`~llm_dataflow.core.hardware.LinkSpec`'s per-direction bandwidth), and ``efficiency =
  measured / peak``.

A published measurement can never beat a lower bound: ``efficiency <= 1`` for every row is the
book's strongest check on itself (``tests/test_published.py``).  Where a row does beat its bound,
:data:`KNOWN_MODEL_GAPS` names it and says why (the package's model, not the row, is wrong there).

Columns of the CSV (one row per published number):

==============  ==========================================================================
``id``          short unique name
``chapter``     the chapter whose topic the row checks (``"03"`` … ``"08"``)
``system``      software and version (or commit) that produced the number
``model``       the model as published (empty for kernel or link measurements)
``preset``      the package's model preset with the same shapes (empty if none is needed)
``gpu``         the package's hardware preset (:func:`~llm_dataflow.core.hardware.hardware`)
``n_gpus``      GPUs the published number covers
``precision``   the precision as published
``weights``     the package's weight format for the bound (:data:`~llm_dataflow.core.formats.WEIGHT_FORMATS`,
                ``int4-g<N>`` for INT4 with group size N, ``+kvfp8`` for an FP8 KV cache)
``batch``       sequences decoded together (empty: not published — the bound lets it grow
                without limit, which only lowers the bound)
``prompt_len``  prompt tokens (ISL); ``output_len`` output tokens (OSL); ``context`` cached
                tokens each decode step attends to (the smallest the setting allows)
``metric``      what was published; ``value`` and ``unit`` exactly as published
``kind``        ``time``, ``bandwidth`` or ``flops``
``measured``    the value in SI units (s per token of the whole system, s, B/s, FLOP/s)
``bound``       which package bound applies (:data:`BOUND_METHODS`)
``params``      ``key=value;…`` settings the bound needs (GEMM shape, dtype, link, …)
``source``      URL or arXiv id with table / figure / section
``notes``       the setting in the book's words
``evidence``    ``measured``: a published run (a README's or paper's table, a log, a result file,
                a service's published averages); ``stated``: a maintainer's or vendor's stated
                expectation ("you should reach ~480 GB/s", nccl-tests issue #212) with no
                published run behind it.  Ranges of what systems *reach* use measured rows only
                (:data:`EVIDENCE`)
==============  ==========================================================================

Units: s, B/s, FLOP/s; GB = 1e9 B.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from .core.accounting import decode_step_bytes, prefill_flops, weight_bytes_read
from .core.collectives import collective_bytes_per_rank, collective_time
from .core.config import model_config
from .core.hardware import HardwareSpec, as_hardware, hardware, link
from .core.coverage import read_published_rows, row_precision
from .core.roofline import decode_step_bounds, prefill_bounds
from .core.units import dtype_bytes, require_nonnegative, require_positive
from .gemm import gemm_traffic

__all__ = ["PublishedMeasurement", "published_measurements", "published_table", "BOUND_METHODS",
           "CHAPTER_TOPICS", "EVIDENCE", "KNOWN_MODEL_GAPS", "SYSTEM_KINDS", "KIND_EXCEPTIONS", "efficiency_range", "UNUSED_CANDIDATES", "aggregate_hardware",
           "to_si"]

#: The chapter each row checks, by number, with a short topic name for tables and figures.
CHAPTER_TOPICS: dict[str, str] = {
    "03": "03 MoE layer",
    "04": "04 Inside the chip",
    "05": "05 Decode roofline",
    "06": "06 Attention",
    "07": "07 Many GPUs",
    "08": "08 Optimisation map",
}

#: Bound methods, with what each computes (time methods give a lower bound in s; rate methods a
#: peak in B/s or FLOP/s).
BOUND_METHODS: dict[str, str] = {
    "decode": "time per token: roofline.decode_step_bounds on n_gpus summed (batch B, context), "
              "step time / B; no batch published: the B -> infinity limit (weights amortised)",
    "serving": "time per output token of whole requests (prompt + output): total FLOPs (prefill_bounds + "
               "every decode step) / peak vs decode bytes / bandwidth, on n_gpus summed",
    "prefill_tokens": "time per prompt token of a prefill fleet: the matmul FLOPs of every prompt token not "
                      "served from a KV-cache hit / peak, on n_gpus summed",
    "gemm": "time of one GEMM: max(2MNK / peak, compulsory bytes / HBM bandwidth) (gemm.gemm_traffic; the "
            "output [M, N] in params out_dtype when given)",
    "all_to_all": "time of an expert-parallel dispatch/combine: collectives.collective_time('all_to_all') "
                  "with the link's per-direction bandwidth and no latency term",
    "hbm": "peak: HardwareSpec.hbm_bandwidth (B/s)",
    "flops": "peak: HardwareSpec.flops(dtype) (FLOP/s, dense)",
    "link": "peak: LinkSpec.bandwidth_per_direction (B/s); for an all-reduce busbw with params "
            "algorithm=ring|nvls|…, the algorithm's peak algbw × the ring factor 2(N−1)/N that busbw applies; "
            "with counts_own=1 (a figure that also counts the 1/N of the bytes a rank routes to itself, "
            "which never cross the link) the peak × N/(N−1)",
}
_TIME_METHODS = ("decode", "serving", "prefill_tokens", "gemm", "all_to_all")
_RATE_METHODS = ("hbm", "flops", "link")
_KINDS = ("time", "bandwidth", "flops")
#: The values of the ``evidence`` column, with what each means.
EVIDENCE: dict[str, str] = {
    "measured": "a published run: a table, a log, a result file or a service's published averages",
    "stated": "a maintainer's or vendor's stated expectation, with no published run behind it",
}

#: Rows that beat their bound because the *package's* model is wrong for them, by id, with the
#: reason.  The test keeps them out of the assertion (a named xfail) until the model is fixed.
KNOWN_MODEL_GAPS: dict[str, str] = {}

#: Candidate numbers looked at and left out, with the reason (so that nobody re-adds them blindly).
UNUSED_CANDIDATES: tuple = (
    {"candidate": "DeepEP V1 internode normal kernels, 'RDMA bottleneck bandwidth' 43-58 GB/s (EP16-64)",
     "source": "github.com/deepseek-ai/DeepEP docs/legacy.md; tests/test_internode.py",
     "reason": "the test counts tokens sent to every node including the sender's own (rdma_idx), so "
               "the figure is a logical bandwidth: EP32's 58 GB/s is above the 50 GB/s a CX7 NIC carries"},
    {"candidate": "DeepEP low-latency kernels after 2025-06 (EP8 dispatch 77 us, 98 GB/s 'RDMA')",
     "source": "DeepEP README commit de8cfca",
     "reason": "these kernels now send intra-node traffic over NVLink, so time and 'RDMA bandwidth' mix "
               "two links; the book keeps the pure-RDMA figures of the first release"},
    {"candidate": "DeepEP V2 'logical bandwidth' (90 GB/s EP 8x2 RDMA)",
     "source": "DeepEP README (V2)", "reason": "contains local-rank traffic, by the README's own note"},
    {"candidate": "PagedAttention throughput and memory waste (arXiv:2309.06180)",
     "source": "arXiv:2309.06180 Figures 2, 12-17",
     "reason": "throughputs are plotted, not tabulated; the waste figures are percentages, not times or rates"},
    {"candidate": "H800 NVLink 400 GB/s (bidirectional)", "source": "secondary summaries only",
     "reason": "no NVIDIA datasheet in our sources; the book uses DeepSeek's stated 160 GB/s maximum"},
    {"candidate": "MLPerf Llama-2-70B mean prompt length", "source": "mlcommons/inference",
     "reason": "not found in a primary source; the MLPerf rows use the per-token bound with no prompt "
               "and no context (it can only be lower than the true bound)"},
    # MoE under tensor parallelism (issue 27): looked at for more covering rows, left out
    {"candidate": "Mixtral-8x7B on A100-80GB at TP 2 and TP 4, '~10-11 TPS' (vLLM @d537c62 with MegaBlocks)",
     "source": "github.com/vllm-project/vllm/issues/2069 (description, 2023-12-12)",
     "reason": "an approximate figure from a bug report on a pre-release MoE path; batch and lengths not "
               "stated in the part read"},
    {"candidate": "DeepSeek-V3 single sequence 'order 13 tokens/sec' on 8 x H200 (SGLang, 2025-01)",
     "source": "github.com/sgl-project/sglang/issues/3196 (description)",
     "reason": "an order of magnitude for long generations, not a measured figure with its setting"},
    {"candidate": "DeepSeek-V3 'for bs=1 SGLang outputs around 26 tok/s' (bench_serving, max-concurrency 1)",
     "source": "github.com/vllm-project/vllm/issues/11539 (comment of 2025-01-10)",
     "reason": "the GPU and the TP degree are not named in the part read; a ShareGPT run mixes prefill "
               "into the output rate"},
)


@dataclass(frozen=True)
class PublishedMeasurement:
    """One published number beside the package's bound.

    Attributes: the CSV columns (see the module docstring; ``batch``, ``prompt_len``,
    ``output_len``, ``context`` are ``None`` when not published), plus:
        topic: ``CHAPTER_TOPICS[chapter]``.
        predicted_bound: the package's lower bound on the time (s) for ``kind == "time"``, or the
            peak rate (B/s or FLOP/s) for rates — computed from the setting.
        efficiency: ``predicted_bound / measured`` (time) or ``measured / predicted_bound``
            (rates); 1.0 means the measurement sits on the roof.  For a ``stated`` row the
            "measurement" is the stated expectation.
        binds: what sets the bound: ``"memory"``, ``"compute"``, ``"link"`` or ``"peak"``.
        known_gap: the :data:`KNOWN_MODEL_GAPS` reason when the package's model is known not to
            apply to this row, else ``""``.
    """

    id: str
    chapter: str
    system: str
    model: str
    preset: str
    gpu: str
    n_gpus: int
    precision: str
    weights: str
    batch: int | None
    prompt_len: int | None
    output_len: int | None
    context: int | None
    metric: str
    value: float
    unit: str
    kind: str
    measured: float
    bound: str
    params: dict
    source: str
    notes: str
    evidence: str
    topic: str
    predicted_bound: float
    efficiency: float
    binds: str
    known_gap: str = ""

    @property
    def is_measured(self) -> bool:
        """True for a published run (``evidence == "measured"``), False for a stated expectation."""
        return self.evidence == "measured"

    @property
    def beats_bound(self) -> bool:
        """True when the measurement is faster than the lower bound (or above the peak)."""
        return self.efficiency > 1.0


# --------------------------------------------------------------------------------------------
# settings → package objects
# --------------------------------------------------------------------------------------------
def aggregate_hardware(hw: HardwareSpec | str, n_gpus: int) -> HardwareSpec:
    """``n_gpus`` copies of ``hw`` as one device: bandwidth and every peak FLOP/s times ``n_gpus``.

    A step spread over N GPUs can finish no sooner than its bytes over N × bandwidth and its
    FLOPs over N × peak, whatever the split: perfect balance and free communication, so the
    result is still a lower bound.

    Raises:
        ValueError: ``hw`` neither a hardware preset name nor a HardwareSpec, ``n_gpus`` not an
            integer >= 1 (bools refused), or so many GPUs that a total overflows a float.
    """
    hw = as_hardware(hw)
    if isinstance(n_gpus, bool) or not isinstance(n_gpus, int) or n_gpus < 1:
        raise ValueError(f"n_gpus={n_gpus!r} is not allowed; it must be an integer >= 1")
    if n_gpus == 1:
        return hw
    try:
        totals = [n_gpus * hw.hbm_bandwidth, n_gpus * hw.memory_bytes] + [n_gpus * v for v in hw.peak_flops.values()]
    except OverflowError:       # an int beyond a float's range
        totals = [math.inf]
    if not all(math.isfinite(x) for x in totals):
        raise ValueError(f"n_gpus={n_gpus!r} is not allowed: the aggregate bandwidth overflows a float")
    return dataclasses.replace(hw, name=f"{n_gpus}x{hw.name}", hbm_bandwidth=n_gpus * hw.hbm_bandwidth,
                               memory_bytes=n_gpus * hw.memory_bytes,
                               peak_flops={k: n_gpus * v for k, v in hw.peak_flops.items()})


# the CSV reader and the ``weights`` column's parser live in the core, where ``plan`` uses them too
_plan = row_precision
_read_rows = read_published_rows


def to_si(value: float, unit: str, kind: str, *, n_gpus: int = 1, params: dict | None = None) -> float:
    """A published number in SI units.

    * ``time``: ``tokens/s`` (the whole system's tokens/s) → s per token ``1/value``;
      ``tokens/s/GPU`` → ``1/(value·n_gpus)``; ``tokens/s/node`` → ``1/value`` (``n_gpus`` is the
      node); ``us`` → ``value·1e-6`` s; ``TFLOP/s`` of one GEMM (``params`` M, N, K) →
      ``2·M·N·K / (value·1e12)`` s.
    * ``bandwidth``: ``GB/s`` → ``value·1e9`` B/s.
    * ``flops``: ``TFLOP/s`` → ``value·1e12``, ``PFLOP/s`` → ``value·1e15`` FLOP/s.

    Raises:
        ValueError: ``value`` not a positive finite number, ``n_gpus`` not a positive integer, a
            ``unit`` that does not fit the ``kind``, a GEMM row whose ``params`` lack M, N, K as
            non-negative integers, or a result that overflows a float.
    """
    require_positive("value", value, integer=False)
    require_positive("n_gpus", n_gpus)
    if params is not None and not isinstance(params, dict):
        raise ValueError(f"params={params!r} is not allowed; give a dict (M, N, K for a GEMM) or None")
    try:
        out = _to_si(value, unit, kind, n_gpus, params)
    except OverflowError:
        out = math.inf
    if not math.isfinite(out):
        raise ValueError(f"value={value!r} {unit} is not allowed: in SI units it overflows a float")
    return out


def _to_si(value, unit, kind, n_gpus, params) -> float:
    if kind == "time":
        if unit == "tokens/s":
            return 1.0 / value
        if unit == "tokens/s/GPU":
            return 1.0 / (value * n_gpus)
        if unit == "tokens/s/node":
            return 1.0 / value
        if unit == "us":
            return value * 1e-6
        if unit == "TFLOP/s":
            p = params or {}
            if not all(k in p for k in ("M", "N", "K")):
                raise ValueError(f"a GEMM time from TFLOP/s needs params M, N, K; got {p!r}")
            for k in ("M", "N", "K"):
                require_nonnegative(f"params[{k!r}]", p[k])
            return 2 * p["M"] * p["N"] * p["K"] / (value * 1e12)
    elif kind == "bandwidth" and unit == "GB/s":
        return value * 1e9
    elif kind == "flops" and unit in ("TFLOP/s", "PFLOP/s"):
        return value * (1e12 if unit == "TFLOP/s" else 1e15)
    raise ValueError(f"unit={unit!r} is not allowed for kind={kind!r}")


# --------------------------------------------------------------------------------------------
# bounds
# --------------------------------------------------------------------------------------------
def _per_token_decode(cfg, hw, batch, context, plan):
    """(s per token, binds) of decode: step bound / B, or the B → ∞ limit."""
    if batch:
        b = decode_step_bounds(cfg, hw, batch, context, plan)
        return b.time_s / batch, b.bound
    b = decode_step_bounds(cfg, hw, 1, context, plan)
    # B → ∞: FLOPs per token stay; bytes per token lose the weights (read once for the batch)
    kv = decode_step_bytes(cfg, 1, context, plan) - weight_bytes_read(cfg, plan, 1)
    memory = kv / hw.hbm_bandwidth
    return max(b.compute_s, memory), ("compute" if b.compute_s > memory else "memory")


def _serving(cfg, hw, batch, prompt_len, output_len, plan):
    """(s per output token, binds) over whole requests: every request runs a prefill of
    ``prompt_len`` tokens and ``output_len`` decode steps at contexts prompt_len … prompt_len +
    output_len − 1, ``batch`` requests at a time (None: no limit).  Total time ≥ max(total
    FLOPs / peak, total decode bytes / bandwidth).  FLOPs and KV bytes grow linearly with the
    context (full attention), so the sum over decode steps is exact from the two end steps."""
    B = batch or 1
    first, last = prompt_len, prompt_len + output_len - 1
    d0 = decode_step_bounds(cfg, hw, B, first, plan)
    d1 = decode_step_bounds(cfg, hw, B, last, plan)
    p = prefill_bounds(cfg, hw, prompt_len, B, plan)
    flops = p.flops + output_len * (d0.flops + d1.flops) / 2
    nbytes = output_len * (d0.nbytes + d1.nbytes) / 2
    if not batch:  # no batch limit: the weights' share of each step goes to zero
        nbytes -= output_len * weight_bytes_read(cfg, plan, 1)
    compute, memory = flops / d0.peak_flops, nbytes / hw.hbm_bandwidth
    tokens = output_len * B
    return max(compute, memory) / tokens, ("compute" if compute > memory else "memory")


def _prefill_tokens(cfg, hw, plan, cached_fraction):
    """(s per prompt token, "compute"): the prompt tokens not served from a KV-cache hit each need
    their matmuls (no LM head: only a prompt's last position gets logits) and attention over at
    least themselves: ``prefill_flops(cfg, 1) − 2·V·D``."""
    per_token = prefill_flops(cfg, 1) - 2 * cfg.vocab_size * cfg.d_model
    peak = prefill_bounds(cfg, hw, 1, 1, plan).peak_flops
    return (1.0 - cached_fraction) * per_token / peak, "compute"


def _gemm(hw, p):
    """Seconds of one GEMM: its FLOPs at the ``dtype`` peak against its compulsory bytes at the HBM
    bandwidth, the inputs in ``dtype`` and the output ``[M, N]`` in ``out_dtype`` (default
    ``dtype``; DeepGEMM's FP8 GEMMs write BF16)."""
    t = gemm_traffic(p["M"], p["N"], p["K"], p["M"], p["N"], p["K"], p["dtype"])
    out = p.get("out_dtype", p["dtype"])
    nbytes = t.compulsory_bytes + p["M"] * p["N"] * (dtype_bytes(out) - dtype_bytes(p["dtype"]))
    compute, memory = t.flops / hw.flops(p["dtype"]), nbytes / hw.hbm_bandwidth
    return max(compute, memory), ("compute" if compute > memory else "memory")


def _all_to_all(cfg, n_ranks, p):
    """Seconds of one dispatch or combine: each rank's send buffer is ``tokens × k`` copies of a
    D-vector (``elem`` bytes per element, plus one FP32 scale per ``scale_group`` elements when
    given — DeepEP's FP8 dispatch), of which the (N−1)/N not bound for the rank itself cross
    the link (``collective_time('all_to_all')``, latency term 0)."""
    per_copy = cfg.d_model * dtype_bytes(p["elem"])
    if "scale_group" in p:
        per_copy += math.ceil(cfg.d_model / p["scale_group"]) * 4
    nbytes = p["tokens"] * cfg.n_experts_per_token * per_copy
    lk = dataclasses.replace(link(p["link"]), latency_s=0.0)
    return collective_time("all_to_all", nbytes, n_ranks, lk), "link"


def _bound(r: dict) -> tuple[float, str]:
    method, p = r["bound"], r["params"]
    if method in _RATE_METHODS:
        if method == "hbm":
            return hardware(r["gpu"]).hbm_bandwidth, "peak"
        if method == "flops":
            return hardware(r["gpu"]).flops(p["dtype"]), "peak"
        beta = link(p["link"]).bandwidth_per_direction
        if "algorithm" in p:
            # an all-reduce "busbw" (nccl-tests: algbw × 2(N−1)/N, the ring's factor): its peak is
            # the algorithm's fastest algbw, nbytes / (bytes per rank / β), times that factor —
            # β for the ring, β·2(N−1)/N for NVLS, whose ranks send nbytes, not 2(N−1)/N·nbytes
            n = r["n_gpus"]
            per_rank = collective_bytes_per_rank("all_reduce", 1.0, n, p["algorithm"])
            return beta / per_rank * 2 * (n - 1) / n, "peak"
        if p.get("counts_own"):
            # the published rate divides every byte a rank receives, its own share included (1/N
            # under uniform routing), by the time; only (N−1)/N of them crossed the link
            n = r["n_gpus"]
            return beta * n / (n - 1), "peak"
        return beta, "peak"
    cfg = model_config(r["preset"]) if r["preset"] else None
    hw = aggregate_hardware(r["gpu"], r["n_gpus"])
    if method == "gemm":
        return _gemm(hw, p)
    if method == "all_to_all":
        return _all_to_all(cfg, r["n_gpus"], p)
    plan = _plan(r["weights"])
    if method == "decode":
        return _per_token_decode(cfg, hw, r["batch"], r["context"] or 0, plan)
    if method == "serving":
        return _serving(cfg, hw, r["batch"], r["prompt_len"], r["output_len"], plan)
    if method == "prefill_tokens":
        return _prefill_tokens(cfg, hw, plan, float(p.get("cached_fraction", 0.0)))
    raise ValueError(f"bound={method!r} is not allowed; allowed: {', '.join(BOUND_METHODS)}")


def _check_row(r: dict) -> None:
    where = f"row {r['id']!r}"
    if r["kind"] not in _KINDS:
        raise ValueError(f"{where}: kind={r['kind']!r} is not allowed; allowed: {', '.join(_KINDS)}")
    if r["bound"] not in BOUND_METHODS:
        raise ValueError(f"{where}: bound={r['bound']!r} is not allowed; allowed: {', '.join(BOUND_METHODS)}")
    if (r["kind"] == "time") != (r["bound"] in _TIME_METHODS):
        raise ValueError(f"{where}: a {r['kind']} row cannot use bound={r['bound']!r}")
    if r["chapter"] not in CHAPTER_TOPICS:
        raise ValueError(f"{where}: chapter={r['chapter']!r} is not allowed; allowed: {', '.join(CHAPTER_TOPICS)}")
    if not r["source"].strip():
        raise ValueError(f"{where}: source is empty; every row needs one")
    if r.get("evidence") not in EVIDENCE:
        raise ValueError(f"{where}: evidence={r.get('evidence')!r} is not allowed; allowed: {', '.join(EVIDENCE)}")


def published_measurements(chapter: str | None = None) -> list[PublishedMeasurement]:
    """Every row of ``data/published_measurements.csv`` with the package's bound beside it.

    Args:
        chapter: keep only rows of this chapter (``"03"`` … ``"08"``); ``None`` = all.

    Returns:
        :class:`PublishedMeasurement` records in file order; ``predicted_bound`` and
        ``efficiency`` are computed here from each row's setting (:data:`BOUND_METHODS`).

    Raises:
        ValueError: a malformed row (unknown kind, bound, chapter, preset, format; an empty
            source; a ``measured`` that is not ``value`` in SI units), or an unknown ``chapter``.
    """
    if chapter is not None and chapter not in CHAPTER_TOPICS:
        raise ValueError(f"chapter={chapter!r} is not allowed; allowed: {', '.join(CHAPTER_TOPICS)}")
    out = []
    for r in _read_rows():
        _check_row(r)
        si = to_si(r["value"], r["unit"], r["kind"], n_gpus=r["n_gpus"], params=r["params"])
        if not math.isclose(si, r["measured"], rel_tol=1e-6):
            raise ValueError(f"row {r['id']!r}: measured={r['measured']!r} is not value={r['value']} "
                             f"{r['unit']} in SI units ({si!r})")
        bound, binds = _bound(r)
        eff = bound / r["measured"] if r["kind"] == "time" else r["measured"] / bound
        out.append(PublishedMeasurement(**r, topic=CHAPTER_TOPICS[r["chapter"]], predicted_bound=bound,
                                        efficiency=eff, binds=binds, known_gap=KNOWN_MODEL_GAPS.get(r["id"], "")))
    if chapter is not None:
        out = [m for m in out if m.chapter == chapter]
    return out


def published_table(rows: list[PublishedMeasurement] | None = None):
    """A pandas DataFrame of the rows for display: id, topic, system, model, GPU × count,
    precision, metric as published, measured, bound, efficiency, what binds, evidence.

    Measured and bound are shown in the row's unit family (ms or µs per token/step, GB/s,
    TFLOP/s), formatted as strings; ``efficiency`` stays a float (3 decimals).
    """
    import pandas as pd

    rows = published_measurements() if rows is None else rows

    def show(x, kind):
        if kind == "bandwidth":
            return f"{x / 1e9:,.0f} GB/s"
        if kind == "flops":
            return f"{x / 1e12:,.0f} TFLOP/s"
        return f"{x * 1e3:.3g} ms" if x >= 1e-3 else f"{x * 1e6:.3g} µs"

    return pd.DataFrame([{
        "id": m.id, "topic": m.topic, "system": m.system.split(" (")[0], "model": m.model or "—",
        "GPUs": f"{m.n_gpus}× {m.gpu}", "precision": m.precision,
        "published": f"{m.value:g} {m.unit}", "measured": show(m.measured, m.kind),
        "bound / peak": show(m.predicted_bound, m.kind), "efficiency": round(m.efficiency, 3),
        "binds": m.binds, "evidence": m.evidence} for m in rows])


#: Kinds of system whose efficiencies appendix 09 states as ranges, each with the rows it takes
#: (a test on a :class:`PublishedMeasurement`).  Only measured rows enter a range
#: (:func:`efficiency_range`); stated expectations and known model gaps never do.
SYSTEM_KINDS: dict[str, str] = {
    "tuned kernels and links": "a kernel or link tuned for its chip: the rows of chapters 04, 06 and 07 "
                               "that are not gpt-fast decode rows, less KIND_EXCEPTIONS",
    "single-GPU decode": "batch-1 decode of a dense model on one GPU, in any weight format: chapter 05's time "
                         "rows (gpt-fast)",
    "tensor-parallel decode": "batch-1 decode of a dense model under tensor parallelism, in any weight format: "
                              "gpt-fast's time rows on more than one GPU (chapters 07 and 08)",
    "MoE tensor-parallel decode": "batch-1 decode of a mixture of experts under tensor parallelism, in any "
                                  "weight format: chapter 03's time rows on more than one GPU",
    "serving systems": "whole serving systems whose bound charges the work they report: chapter 08's rows "
                       "that are not gpt-fast decode rows, less KIND_EXCEPTIONS",
}
#: Rows kept out of the kind they would otherwise fall in, with the reason the appendix gives.
KIND_EXCEPTIONS: dict[str, str] = {
    "deepgemm-64x2112x7168": "the smallest GEMM: at a few microseconds a kernel's fixed start-up cost weighs most",
    "fa2-h100-fwd-bwd": "code written for an older chip (FlashAttention-2 uses none of Hopper's features), and a "
                        "forward and backward pass",
    "fa2-gpt3-2.7b-8k-no-flash": "a whole training run, not a kernel, and without FlashAttention: the baseline "
                                 "the kernel improves on",
    "fa2-gpt3-2.7b-8k-flash2": "a whole training run (FlashAttention-2's Table 1), not a kernel",
    "mlperf41-h100x8-llama2-70b-99.9": "MLPerf Offline reports output tokens only, so its bound charges no prompt: "
                                       "looser than the other serving rows' bounds",
    "mlperf41-h200x8-llama2-70b-99": "MLPerf Offline reports output tokens only, so its bound charges no prompt: "
                                     "looser than the other serving rows' bounds",
    "mlperf41-b200x1-llama2-70b-99": "MLPerf Offline reports output tokens only, so its bound charges no prompt: "
                                     "looser than the other serving rows' bounds",
}


def _in_kind(kind: str, m: PublishedMeasurement) -> bool:
    if m.id in KIND_EXCEPTIONS:
        return False
    gpt_fast = m.id.startswith("gptfast")
    if kind == "tuned kernels and links":
        return m.chapter in ("04", "06", "07") and not gpt_fast
    if kind == "single-GPU decode":
        return m.chapter == "05" and m.kind == "time"
    if kind == "tensor-parallel decode":
        return m.chapter in ("07", "08") and gpt_fast and m.kind == "time" and m.n_gpus > 1
    if kind == "MoE tensor-parallel decode":
        return m.chapter == "03" and m.kind == "time" and m.n_gpus > 1
    return m.chapter == "08" and not gpt_fast          # "serving systems"


def efficiency_range(kind: str, rows: list[PublishedMeasurement] | None = None) -> tuple[float, float, list[str]]:
    """The lowest and highest efficiency of one kind of system, over **measured** rows only.

    Args:
        kind: a key of :data:`SYSTEM_KINDS`.
        rows: the rows to look in (default: every row of :func:`published_measurements`).

    Returns:
        ``(lowest, highest, ids)``: efficiencies as fractions (1 = on the roof) and the ids of the
        rows taken.  Rows whose ``evidence`` is ``"stated"`` and rows with a known model gap are
        left out, so an expectation never widens what systems are said to *reach*.

    Raises:
        ValueError: an unknown ``kind``; no measured row of that kind in ``rows``.
    """
    if kind not in SYSTEM_KINDS:
        raise ValueError(f"kind={kind!r} is not allowed; allowed: {', '.join(SYSTEM_KINDS)}")
    rows = published_measurements() if rows is None else rows
    taken = [m for m in rows if m.is_measured and not m.known_gap and _in_kind(kind, m)]
    if not taken:
        raise ValueError(f"no measured row of kind={kind!r} among the {len(rows)} rows given")
    effs = [m.efficiency for m in taken]
    return min(effs), max(effs), [m.id for m in taken]

