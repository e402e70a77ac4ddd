"""Prefill vs decode on the roofline: lower bounds from the accounting model (chapter 05's
calculators, :mod:`llm_dataflow.roofline`, show them).

The roofline model (Williams, Waterman & Patterson, "Roofline", CACM 2009): a step can finish no
sooner than ``max(FLOPs / peak FLOP/s, bytes / memory bandwidth)``.  The FLOPs and bytes come
from :mod:`llm_dataflow.core.accounting` (one accounting model for every chapter); this module divides
them by a chip's peaks (:func:`decode_step_lower_bound`, :func:`prefill_lower_bound`, the
companions :func:`decode_step_bounds` / :func:`prefill_bounds` that return both terms and which
binds, and :func:`critical_batch`).

Hardware arguments ``hw`` accept a preset name (``"H100-SXM"``), a
:class:`~llm_dataflow.core.hardware.HardwareSpec`, or a :class:`~llm_dataflow.measure.MeasuredRoofline`
— anything with an ``hbm_bandwidth`` attribute (B/s) and a ``flops(dtype)`` method (FLOP/s).
Precision arguments ``dtype`` accept a weight-format name (``"bf16"``, ``"int4"``, ``"fp8"``,
``"fp4"``, … :data:`~llm_dataflow.core.formats.WEIGHT_FORMATS`) or a
:class:`~llm_dataflow.core.formats.PrecisionPlan`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .accounting import (decode_step_bytes, decode_step_flops, expected_experts_hit, prefill_bytes,
                         prefill_flops, quantised_matmul_params, tensor_bytes, weight_bytes_read)
from .config import ModelConfig, as_model_config, as_model_or_count, tensor_specs
from .formats import as_precision_plan
from .hardware import HardwareSpec, hardware
from .units import check_dtype, no_overflow, require_nonnegative, require_positive

__all__ = ["StepBounds", "decode_step_bounds", "prefill_bounds", "decode_step_lower_bound",
           "prefill_lower_bound", "critical_batch", "KernelCriticalBatch", "critical_batch_per_kernel"]
# also public, for the calculators (not re-exported by ``ldf``): as_roofline_hardware


def as_roofline_hardware(hw) -> "HardwareSpec":
    """``hw`` as the bounds take it: a preset name (looked up), a HardwareSpec, or anything with
    ``hbm_bandwidth`` and ``flops(dtype)`` (a ``MeasuredRoofline``), returned as given.

    Raises:
        ValueError: anything else, naming ``hw``.
    """
    if isinstance(hw, str):
        return hardware(hw)
    if hasattr(hw, "hbm_bandwidth") and hasattr(hw, "flops"):
        return hw
    raise ValueError(f"hw={hw!r} is not allowed; give a hardware preset name, a HardwareSpec or a "
                     "MeasuredRoofline")


# --------------------------------------------------------------------------------------------
# bounds
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class StepBounds:
    """Both roofline terms of one step and which one binds.

    Attributes:
        phase: ``"decode"`` or ``"prefill"``.
        flops: FLOPs of the step.
        nbytes: bytes moved (see the counting function for the terms).
        compute_s: ``flops / peak FLOP/s`` (s).
        memory_s: ``nbytes / bandwidth`` (s).
        tokens: tokens produced (decode: B) or processed (prefill: B·T).
        batch: B.
        peak_flops: the effective FLOP/s: ``flops / compute_s`` (one peak, or the mix of the
            quantised format's and the activation dtype's peaks, see ``_compute_s``).
        bandwidth: B/s used.
    """

    phase: str
    flops: float
    nbytes: float
    compute_s: float
    memory_s: float
    tokens: int
    batch: int
    peak_flops: float
    bandwidth: float

    @property
    def time_s(self) -> float:
        """The lower bound: ``max(compute_s, memory_s)`` (s)."""
        return max(self.compute_s, self.memory_s)

    @property
    def bound(self) -> str:
        """``"memory"`` or ``"compute"`` — the larger term (ties go to memory)."""
        return "compute" if self.compute_s > self.memory_s else "memory"

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, FLOP/B."""
        return self.flops / self.nbytes

    @property
    def bytes_per_token(self) -> float:
        """``nbytes / tokens`` (B)."""
        return self.nbytes / self.tokens

    @property
    def tokens_per_s(self) -> float:
        """Upper bound on throughput, ``tokens / time_s`` (token/s, all sequences together)."""
        return self.tokens / self.time_s


def _peak(hw, plan, compute_dtype: str | None) -> tuple[float, str]:
    cd = compute_dtype or plan.compute_dtype(hw)
    check_dtype(cd, field="compute_dtype")
    return hw.flops(cd), cd


def _compute_s(cfg, hw, plan, compute_dtype: str | None, flops: float, linear_tokens: int,
               tp: int = 1, ep: int = 1) -> tuple[float, float]:
    """``(seconds, effective FLOP/s)`` of ``flops`` on ``hw``.

    With FP8/FP4 weights that run at their own peak (:meth:`PrecisionPlan.compute_dtype`), only
    the quantised linear layers' FLOPs (``2 · linear_tokens`` per quantised weight) run there;
    attention over the KV cache and the matmuls the format keeps in high precision (LM head,
    router) run at the activation dtype's peak — FlashAttention-3 and FlashMLA compute
    attention in BF16 unless an FP8 attention kernel is chosen.  An explicit ``compute_dtype``
    prices every FLOP at its peak."""
    peak, cd = _peak(hw, plan, compute_dtype)
    act = plan.activation_dtype
    if compute_dtype is not None or plan.quant is None or cd == act or not isinstance(cfg, ModelConfig):
        return flops / peak, peak
    q = 2 * linear_tokens * quantised_matmul_params(cfg, plan.quant, tp, ep)
    seconds = q / peak + (flops - q) / hw.flops(act)
    return seconds, flops / seconds


def decode_step_bounds(cfg, hw, batch: int = 1, context_len: int = 0, dtype="bf16", *,
                       compute_dtype: str | None = None, kv_dtype: str | None = None,
                       embedding: str = "rows", mla: str = "absorbed", tp: int = 1, ep: int = 1) -> StepBounds:
    """Both terms of the decode-step lower bound and which binds.

    ``compute_s = decode_step_flops / hw.flops(compute dtype)``; ``memory_s =
    decode_step_bytes / hw.hbm_bandwidth``.  Byte terms: weights once per step (gathered
    embedding rows by default) + every sequence's KV read + the new tokens' KV write
    (:func:`~llm_dataflow.core.accounting.decode_step_bytes`); FLOP terms: 2 per matmul weight per
    token + attention over ``context_len + 1`` keys (MLA in the absorbed form by default).
    ``dtype`` is a weight format or :class:`~llm_dataflow.core.formats.PrecisionPlan`; the compute
    dtype defaults to the plan's (:meth:`PrecisionPlan.compute_dtype`: BF16 for weight-only
    INT8/INT4, FP8/FP4 where the chip has that peak), the KV dtype to the plan's.
    With ``tp``/``ep`` > 1: the bound of one GPU of that layout, whose FLOPs and bytes are its
    share (:func:`~llm_dataflow.core.accounting.decode_step_flops` and
    :func:`~llm_dataflow.core.accounting.decode_step_bytes` with ``tp``/``ep``; replicated
    weights whole), for ``batch`` sequences of its attention group; no communication time.

    Raises:
        ValueError: ``batch`` < 1, ``context_len`` < 0, unknown hardware/dtype, or a compute
            dtype with no peak FLOP/s on ``hw``; a layout
            :func:`~llm_dataflow.core.parallel.check_parallel` rejects.
            Counts (``batch``, ``context_len``) so large that a result overflows a float: a
            ValueError naming them.
    """
    hw = as_roofline_hardware(hw)
    plan = as_precision_plan(dtype, kv_dtype)
    cfg = as_model_or_count(cfg)
    flops = decode_step_flops(cfg, batch, context_len, mla=mla, tp=tp, ep=ep)
    nbytes = decode_step_bytes(cfg, batch, context_len, plan, embedding=embedding, tp=tp, ep=ep)
    compute_s, peak = _compute_s(cfg, hw, plan, compute_dtype, flops, batch, tp, ep)
    return StepBounds("decode", flops, nbytes, compute_s, nbytes / hw.hbm_bandwidth, batch, batch,
                      peak, hw.hbm_bandwidth)


@no_overflow('prompt_len', 'batch')
def prefill_bounds(cfg, hw, prompt_len: int, batch: int = 1, dtype="bf16", *,
                   compute_dtype: str | None = None, kv_dtype: str | None = None,
                   embedding: str = "rows", all_logits: bool = False, mla: str = "naive",
                   tp: int = 1, ep: int = 1) -> StepBounds:
    """Both terms of the prefill lower bound and which binds.

    ``compute_s = prefill_flops / hw.flops(compute dtype)`` (matmuls for B·T tokens, causal
    attention — MLA un-absorbed by default, as prefill kernels run it — logits for the last
    position or all with ``all_logits``); ``memory_s = prefill_bytes / hw.hbm_bandwidth``
    (weights once + KV written for B·T positions).  Precision and the ``tp``/``ep`` split (one
    GPU's share) as :func:`decode_step_bounds`.

    Raises:
        ValueError: ``prompt_len`` or ``batch`` < 1, unknown hardware/dtype, a layout
            :func:`~llm_dataflow.core.parallel.check_parallel` rejects.
            Counts (``prompt_len``, ``batch``) so large that a result overflows a float: a
            ValueError naming them.
    """
    hw = as_roofline_hardware(hw)
    plan = as_precision_plan(dtype, kv_dtype)
    cfg = as_model_or_count(cfg)
    flops = prefill_flops(cfg, prompt_len, batch, all_logits=all_logits, mla=mla, tp=tp, ep=ep)
    nbytes = prefill_bytes(cfg, prompt_len, batch, plan, embedding=embedding, tp=tp, ep=ep)
    compute_s, peak = _compute_s(cfg, hw, plan, compute_dtype, flops, batch * prompt_len, tp, ep)
    return StepBounds("prefill", flops, nbytes, compute_s, nbytes / hw.hbm_bandwidth,
                      batch * prompt_len, batch, peak, hw.hbm_bandwidth)


def decode_step_lower_bound(cfg, hw, batch: int = 1, context_len: int = 0, dtype: str = "bf16",
                            **kw) -> float:
    """Seconds one decode step takes at least: ``max(bytes / bandwidth, FLOPs / peak)``.

    Includes: weights read once per step (every stored weight but the embedding table, of
    which only the gathered rows; ``embedding="table"`` counts it whole), each sequence's KV cache read (``context_len`` positions) and the new tokens' KV
    write; FLOPs of every matmul for ``batch`` tokens plus attention over ``context_len + 1``
    keys.  Excludes activations, kernel launch and host overheads.  See
    :func:`decode_step_bounds` for keyword options.

    Example (the seed's numbers): a 7e9-parameter model in BF16 is 14 GB; on an H100 SXM
    (3.35 TB/s) ``decode_step_lower_bound(7e9, "H100-SXM")`` ≈ 4.18 ms ≈ 239 steps/s.

    Raises:
        ValueError: ``batch`` < 1, ``context_len`` < 0, unknown hardware or dtype.
    """
    return decode_step_bounds(cfg, hw, batch, context_len, dtype, **kw).time_s


def prefill_lower_bound(cfg, hw, prompt_len: int, batch: int = 1, dtype: str = "bf16", **kw) -> float:
    """Seconds a prefill of ``batch`` × ``prompt_len`` tokens takes at least:
    ``max(bytes / bandwidth, FLOPs / peak)``.

    Includes: FLOPs of every matmul for B·T tokens, causal attention (lower triangle), logits of
    the last position; bytes of the weights (read once) and of the KV cache written.  Excludes
    activations, attention-score traffic and host overheads.  See :func:`prefill_bounds`.

    Raises:
        ValueError: ``prompt_len`` or ``batch`` < 1, unknown hardware or dtype.
    """
    return prefill_bounds(cfg, hw, prompt_len, batch, dtype, **kw).time_s


@no_overflow('context_len', 'max_batch', finite=False)   # math.inf: never compute-bound
def critical_batch(cfg, hw, context_len: int = 0, dtype="bf16", *, max_batch: int = 2**20,
                   compute_dtype: str | None = None, kv_dtype: str | None = None,
                   embedding: str = "rows", mla: str = "absorbed", tp: int = 1, ep: int = 1) -> float:
    """The smallest batch B at which a decode step turns compute-bound (``compute_s >
    memory_s``), or ``math.inf`` if it never does up to ``max_batch`` (long contexts: the
    per-sequence KV read grows as fast as the FLOPs, so batching stops helping).

    Weights only (context 0, dense, bare count N): ``2·N·B / F = N·b / BW`` gives
    ``B* = b · F / (2 · BW)`` = bytes per weight × ridge point / 2 — for BF16 on an H100 SXM,
    ``2 · 989.4e12 / (2 · 3.35e12)`` ≈ 295.3, so B = 296.

    Keyword options as for :func:`decode_step_bounds`; the result agrees with its ``bound``.
    With ``tp``/``ep`` > 1 the step is one GPU's share (:func:`decode_step_bounds` with
    ``tp``/``ep``) and B counts the sequences of one attention group: a replicated MLA latent or
    KV head is read whole on every GPU while its FLOPs are split, so such a layout may never
    turn compute-bound at a long context.

    Returns:
        int batch, or ``math.inf``.

    Raises:
        ValueError: ``context_len`` < 0, unknown hardware or dtype, a layout
            :func:`~llm_dataflow.core.parallel.check_parallel` rejects.
            Counts (``context_len``, ``max_batch``) so large that a result overflows a float: a
            ValueError naming them.
    """
    require_positive("max_batch", max_batch)
    require_nonnegative("context_len", context_len)
    hw, cfg = as_roofline_hardware(hw), as_model_or_count(cfg)
    plan = as_precision_plan(dtype, kv_dtype)
    bw = hw.hbm_bandwidth
    # per-sequence terms, computed once: FLOPs f and KV bytes k are exactly linear in B
    # (decode_step_flops = B·f, decode_step_bytes = weights(B) + B·k); only the weights term
    # depends on B non-linearly (MoE experts touched, gathered embedding rows)
    f = decode_step_flops(cfg, 1, context_len, mla=mla, tp=tp, ep=ep)
    c1 = _compute_s(cfg, hw, plan, compute_dtype, f, 1, tp, ep)[0]   # compute seconds per sequence (linear in B)
    k = (decode_step_bytes(cfg, 1, context_len, plan, embedding=embedding, tp=tp, ep=ep)
         - weight_bytes_read(cfg, plan, 1, embedding=embedding, tp=tp, ep=ep))

    def compute_bound(b):  # the test of StepBounds.bound, without recounting the model
        return b * c1 > (weight_bytes_read(cfg, plan, b, embedding=embedding, tp=tp, ep=ep) + b * k) / bw

    return _first_batch(compute_bound, max_batch)


def _first_batch(compute_bound, max_batch: int) -> float:
    """The smallest B in [1, max_batch] with ``compute_bound(B)`` (monotone in B), or ``math.inf``:
    doubling, then bisection."""
    if compute_bound(1):
        return 1
    hi = 1
    while not compute_bound(hi):
        if hi >= max_batch:
            return math.inf
        hi = min(hi * 2, max_batch)
    lo = hi // 2  # memory-bound at lo, compute-bound at hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if compute_bound(mid) else (mid, hi)
    return hi


# --------------------------------------------------------------------------------------------
# the critical batch per kernel (MoE)
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class KernelCriticalBatch:
    """The decode critical batch of one step, blended and per kernel group (sequences).

    A step's kernels do not turn compute-bound together.  The routed-expert GEMMs of an MoE see
    only the tokens routed to each expert, ``B·k/E`` on average once every expert is hit, so they
    cross the ridge only from about ``ridge_batch × E / k`` sequences; the rest of the step
    (attention and its KV read, dense and shared-expert MLPs, router, LM head) sees all B.

    Attributes:
        blended: :func:`critical_batch` — the whole step's FLOPs against its bytes.
        dense_part: the same test on every kernel but the routed experts (their weights, the KV
            traffic, their FLOPs); ``math.inf`` when the KV read keeps them memory-bound.
        routed_experts: the same test on the routed-expert GEMMs alone: FLOPs ``2·k·P_e·B``
            against bytes ``expected_experts_hit(E, k, B) × bytes of one expert`` (every MoE
            layer); ``None`` for a dense model.
        ridge_batch: ``b · F / (2 · BW)``: the batch at which a weight of ``b`` bytes run at the
            experts' peak F (FLOP/s) turns compute-bound when every token uses it (bytes per
            weight × ridge point / 2); ``None`` for a dense model.
        experts_over_k: ``E / k``; ``None`` for a dense model.
    """

    blended: float
    dense_part: float
    routed_experts: float | None
    ridge_batch: float | None
    experts_over_k: float | None

    @property
    def closed_form(self) -> float | None:
        """``ridge_batch × E / k``: the routed experts' critical batch when the batch reaches every
        expert.  The search (:attr:`routed_experts`) counts the experts hit,
        ``expected_experts_hit(E, k, B)``, and lands at or within one sequence of it wherever every
        expert is hit at that batch, as for every MoE preset (``tests/test_moe_planning.py``)."""
        return None if self.ridge_batch is None else self.ridge_batch * self.experts_over_k


@no_overflow('context_len', 'max_batch', finite=False)
def critical_batch_per_kernel(cfg, hw, context_len: int = 0, dtype="bf16", *, max_batch: int = 2**20,
                              compute_dtype: str | None = None, kv_dtype: str | None = None,
                              embedding: str = "rows", mla: str = "absorbed", tp: int = 1,
                              ep: int = 1) -> KernelCriticalBatch:
    """The decode critical batch of each kernel group beside the blended one (:class:`KernelCriticalBatch`).

    The blended figure (:func:`critical_batch`) sums a step's bytes and FLOPs, which averages the
    routed-expert GEMMs — most of an MoE's bytes — with kernels that see every token.  Here the
    step is split in two, each part tested as :func:`critical_batch` tests the whole (same
    counts: :func:`~llm_dataflow.core.accounting.weight_bytes_read`, the compute seconds of
    :func:`decode_step_bounds`): the routed experts, and everything else.  The parts' FLOPs and
    bytes add up to the step's.  Compute runs at the plan's peaks: the experts' FLOPs at the
    quantised format's peak when the format quantises them (FP8 on Hopper), else at the
    activation dtype's.

    DeepSeek-V3 on an H100 SXM in BF16 at context 0: blended 5,405, dense part 296, routed
    experts 9,451 ≈ ``295.3 × 256 / 8`` (``tests/test_roofline.py`` pins these).

    With ``tp``/``ep`` > 1, each part is one GPU's share (as :func:`critical_batch`) and every
    figure counts the sequences of one attention group.  The routed experts' figure does not
    move under TP (each GPU holds and multiplies ``1/tp`` of every expert); under EP a GPU's
    ``E/ep`` experts see the tokens of all ``dp = ep/tp`` groups, so it is ``1/dp`` of the
    single-GPU figure per group.

    Raises:
        ValueError: ``cfg`` not a ModelConfig or preset name (the split needs the tensor list),
            ``context_len`` < 0, ``max_batch`` < 1, unknown hardware or dtype, a layout
            :func:`~llm_dataflow.core.parallel.check_parallel` rejects.
    """
    require_positive("max_batch", max_batch)
    require_nonnegative("context_len", context_len)
    hw, cfg = as_roofline_hardware(hw), as_model_config(cfg)
    plan = as_precision_plan(dtype, kv_dtype)
    blended = critical_batch(cfg, hw, context_len, plan, max_batch=max_batch, compute_dtype=compute_dtype,
                             embedding=embedding, mla=mla, tp=tp, ep=ep)
    bw = hw.hbm_bandwidth
    f = decode_step_flops(cfg, 1, context_len, mla=mla, tp=tp, ep=ep)
    c1 = _compute_s(cfg, hw, plan, compute_dtype, f, 1, tp, ep)[0]   # s per sequence, one GPU's step
    k_bytes = (decode_step_bytes(cfg, 1, context_len, plan, embedding=embedding, tp=tp, ep=ep)
               - weight_bytes_read(cfg, plan, 1, embedding=embedding, tp=tp, ep=ep))   # KV bytes per sequence
    if not cfg.is_moe:
        return KernelCriticalBatch(blended, blended, None, None, None)
    expert = [t for t in tensor_specs(cfg) if t.role == "expert" and t.expert == 0]
    e_params = sum(t.numel for t in expert)                          # one expert, every MoE layer
    e_bytes = sum(tensor_bytes(t, plan.weights, plan.quant) for t in expert)
    E, k = cfg.n_routed_experts, cfg.n_experts_per_token
    dp = ep // tp if ep > 1 else 1
    # one GPU: 1/tp of every expert (TP), or E/ep whole experts hit by the tokens of dp groups (EP)
    split = ep if ep > 1 else tp
    peak = hw.flops(compute_dtype or plan.compute_dtype(hw))
    if compute_dtype is None and plan.quant is not None and "expert" in plan.quant.keep:
        peak = hw.flops(plan.activation_dtype)
    e_c1 = 2 * k * e_params / tp / peak                              # expert compute s per sequence, one GPU

    def e_read(b):
        return e_bytes / split * expected_experts_hit(E, k, b * dp)

    def experts_bound(b):
        return b * e_c1 > e_read(b) / bw

    def rest_bound(b):
        rest_bytes = weight_bytes_read(cfg, plan, b, embedding=embedding, tp=tp, ep=ep) - e_read(b)
        return b * (c1 - e_c1) > (rest_bytes + b * k_bytes) / bw

    return KernelCriticalBatch(blended, _first_batch(rest_bound, max_batch), _first_batch(experts_bound, max_batch),
                               e_bytes / e_params * peak / (2 * bw), E / k)
