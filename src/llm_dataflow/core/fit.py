"""Memory fit: whether a deployment's weights, KV cache, activations and runtime reserve fit in
each GPU — counted with :mod:`llm_dataflow.core.accounting`, split over the layout that
:mod:`llm_dataflow.core.parallel` checks.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from .accounting import activation_bytes, kv_bytes, tensor_bytes
from .config import ModelConfig, as_model_config, tensor_specs
from .formats import PrecisionPlan, as_precision_plan
from .hardware import HardwareSpec, hardware
from .kv import kv_token_bytes, state_bytes_per_sequence, state_dtype_for
from .parallel import check_parallel, check_quant_shards, kv_heads_per_rank, layer_partition, tensor_shares
from .units import GB, no_overflow, require_nonnegative, require_positive

__all__ = ["MemoryFit", "memory_fit", "RUNTIME_RESERVE_FRACTION",
           "MAX_BATCHED_TOKENS"]

#: Share of a GPU's memory kept out of the plan for the runtime.  vLLM's ``gpu_memory_utilization``
#: defaults to 0.9 (vLLM docs, "Engine Arguments"); inside that 0.9 vLLM fits weights, its
#: profiled activation peak (communication buffers included) and the KV cache, so the other
#: 10 % covers what is not profiled: the CUDA context, CUDA graphs, allocator fragmentation.
#: (vLLM takes the share of the memory ``cudaMemGetInfo`` reports, a little more than the
#: datasheet's GB on an H100; the book uses the datasheet figure.)
#: The chapters' calculators keep this datasheet-capacity, fixed-reserve view; ``plan`` counts the
#: KV room as vLLM does instead (:mod:`llm_dataflow.core.serving`: the runtime-reported total,
#: the profiled activations and the memory outside torch's allocator).
RUNTIME_RESERVE_FRACTION = 0.10
#: Tokens in the largest forward pass whose activations memory_fit sizes: vLLM's chunked prefill
#: caps the tokens of one step at ``max_num_batched_tokens`` and profiles its activation peak at
#: that size; 8,192 is its default for the API server on GPUs of 70 GiB or more
#: (``vllm/engine/arg_utils.py``, ``get_batch_defaults``).
MAX_BATCHED_TOKENS = 8192

# =============================================================================================
# parallel layout and memory fit
# =============================================================================================
@functools.lru_cache(maxsize=2048)
def _stage_weights(cfg: ModelConfig, p: PrecisionPlan, tp: int, pp: int, ep: int = 1) -> tuple[float, tuple]:
    """(bytes of the heaviest pipeline stage on one TP rank, the stages' layer ranges); with
    ``ep > 1`` each rank holds ``1/ep`` of the routed experts, whole."""
    stages = layer_partition(cfg.n_layers, pp)
    per = [0.0] * pp
    stage_of = {}
    for s, (lo, hi) in enumerate(stages):
        for i in range(lo, hi):
            stage_of[i] = s
    # each tensor's share on one GPU (tensor_shares: replicated norms, routers, MLA down-projections
    # and surplus KV heads whole, E/ep whole experts under EP, the rest 1/tp)
    for t, share in zip(tensor_specs(cfg), tensor_shares(cfg, tp, ep)):
        b = tensor_bytes(t, p.weights, p.quant)
        if t.layer is None:                      # embedding on the first stage, head/final norm on the last
            s = 0 if t.role in ("embedding", "position_embedding") else pp - 1
        else:
            s = stage_of[t.layer]
        per[s] += b * share
        if cfg.tie_embeddings and t.role == "embedding" and pp > 1:
            per[pp - 1] += b * share             # a tied head is a copy on the last stage
    return max(per), tuple(stages)


@dataclass(frozen=True)
class MemoryFit:
    """Whether one deployment fits, per GPU (all bytes per GPU, B).

    Attributes:
        capacity: the GPU's memory (datasheet, GB = 1e9 B).
        weights: weights on the busiest GPU (heaviest pipeline stage, this TP rank's shards).
        kv: KV cache of ``batch`` sequences at ``context`` tokens on that GPU.
        activations: :func:`activation_bytes` workspace for the largest forward pass.
        reserve: ``reserve_fraction × capacity`` kept for the runtime.
        kv_per_token: KV bytes one more token adds on that GPU.
        tp, pp, ep: the layout.
        quant_rule: the quantisation check the layout passed (empty when unquantised).
        state_per_sequence: the fixed linear-attention state one sequence holds on that GPU,
            whatever its length (0 for a model without linear-attention layers); included in
            :attr:`kv` for each of the ``batch`` sequences.
    """

    capacity: float
    weights: float
    kv: float
    activations: float
    reserve: float
    kv_per_token: float
    tp: int
    pp: int
    ep: int
    quant_rule: str = ""
    state_per_sequence: float = 0.0

    @property
    def used(self) -> float:
        """weights + KV + activations + reserve (B)."""
        return self.weights + self.kv + self.activations + self.reserve

    @property
    def fits(self) -> bool:
        """True when :attr:`used` ≤ :attr:`capacity`."""
        return self.used <= self.capacity

    @property
    def kv_room_bytes(self) -> float:
        """Bytes left for more KV after this batch's cache (negative when it does not fit)."""
        return self.capacity - self.used

    @property
    def kv_room_tokens(self) -> int:
        """Tokens whose KV still fits beside this batch (0 when none or it does not fit)."""
        return max(0, math.floor(self.kv_room_bytes / self.kv_per_token))

    @property
    def reason(self) -> str:
        """One line: ``"fits"``, or what exceeds the capacity."""
        gb = lambda x: f"{x / GB:,.1f} GB"  # noqa: E731
        tail = f" ({self.quant_rule})" if self.quant_rule else ""
        if self.fits:
            return f"fits: {gb(self.used)} of {gb(self.capacity)} per GPU{tail}"
        if self.weights + self.reserve > self.capacity:
            return (f"does not fit: weights need {gb(self.weights)} per GPU, more than {gb(self.capacity)} "
                    f"less the {gb(self.reserve)} runtime reserve")
        return (f"does not fit: weights {gb(self.weights)} + KV {gb(self.kv)} + activations "
                f"{gb(self.activations)} + reserve {gb(self.reserve)} = {gb(self.used)} > {gb(self.capacity)}")


@no_overflow('batch', 'context', 'prompt_len')
def memory_fit(cfg, hw, dtype="bf16", *, batch: int = 1, context: int = 0, prompt_len: int | None = None,
               tp: int = 1, pp: int = 1, ep: int = 1, kv_dtype: str | None = None,
               reserve_fraction: float = RUNTIME_RESERVE_FRACTION,
               max_batched_tokens: int = MAX_BATCHED_TOKENS) -> MemoryFit:
    """Memory needed on the busiest GPU of a ``tp × pp`` deployment against its capacity.

    * weights: each tensor's stored bytes (:func:`weight_bytes`' per-tensor count) split as
      Megatron-style TP splits them — attention heads, MLP/expert widths and the vocabulary
      ``tp`` ways, norms and routers replicated, KV projections by whole KV heads (replicated
      when ``tp > n_kv_heads``) — and layers over ``pp`` stages (:func:`layer_partition`; the
      embedding on the first stage, the head on the last); the heaviest stage counts.  Expert
      parallelism (``ep`` > 1, a multiple of ``tp``: vLLM's EP group is its TP × DP ranks) places
      ``E/ep`` whole routed experts on each GPU instead of slicing every expert ``tp`` ways;
      attention, dense MLPs, shared experts and embeddings stay split ``tp`` ways (replicated over
      the ``ep/tp`` data-parallel groups).  DeepSeek-V3 in FP8 at ``tp=1, ep=8``: about 101 GB
      per GPU instead of 673 GB.  A quantised format's bytes are the ones the engine holds after
      loading (:meth:`~llm_dataflow.core.formats.QuantSpec.as_loaded`).
    * KV: ``batch`` sequences of ``context`` tokens in the plan's KV dtype, for this stage's
      layers, this rank's KV heads (MLA's latent on every rank); under EP with data-parallel
      attention, ``batch`` is the sequences of one attention group.  A hybrid model's
      linear-attention state (:func:`~llm_dataflow.core.kv.state_bytes_per_sequence`, in
      :func:`~llm_dataflow.core.kv.state_dtype_for` the KV dtype) is added once per sequence
      (when ``context`` > 0), for this stage's linear-attention layers, split ``tp`` ways: vLLM's
      ``MambaStateShapeCalculator.gated_delta_net_state_shape`` divides the convolution's channels
      and the value heads of the recurrent state by the TP size (they are never replicated, unlike
      KV heads when ``tp > n_kv_heads``).
    * activations: :func:`activation_bytes` for the largest forward pass: the prefill of
      ``batch × prompt_len`` tokens (default ``context``) in chunks of at most
      ``max_batched_tokens`` (:data:`MAX_BATCHED_TOKENS`, vLLM's chunked-prefill default), or one
      decode step.
    * reserve: ``reserve_fraction`` of capacity (default 10 %, vLLM's default
      ``gpu_memory_utilization = 0.9``).

    Raises:
        ValueError: unknown model/hardware/dtype, a layout :func:`check_parallel` rejects, a TP
            degree that splits the format's blocks or groups (:func:`check_quant_shards`, naming
            vLLM's rule),
            ``batch`` < 1, ``context`` < 0, ``reserve_fraction`` outside [0, 1).
            Counts (``batch``, ``context``, ``prompt_len``) so large that a result overflows a float: a
            ValueError naming them.
    """
    cfg = as_model_config(cfg)
    hw = hardware(hw) if isinstance(hw, str) else hw
    if not isinstance(hw, HardwareSpec):
        raise ValueError(f"hw={hw!r} is not allowed; give a hardware preset name or a HardwareSpec")
    check_parallel(cfg, tp, pp, ep)
    require_positive("batch", batch)
    require_nonnegative("context", context)
    if not isinstance(reserve_fraction, (int, float)) or not 0 <= reserve_fraction < 1:
        raise ValueError(f"reserve_fraction={reserve_fraction!r} is not allowed; allowed: 0 <= x < 1")
    p = as_precision_plan(dtype, kv_dtype)
    check_quant_shards(cfg, p.quant, tp, ep)
    rules = []
    if p.quant is not None and tp > 1 and (p.quant.block_shape is not None or p.quant.group_size is not None):
        rules.append(f"tp={tp} shards hold whole {p.quant.weight_dtype} "
                     + ("blocks" if p.quant.block_shape is not None else "groups") + ", vLLM's rule")
    if ep > 1:
        rules.append(f"ep={ep}: {cfg.n_routed_experts // ep} whole experts per GPU, ep = tp × dp")
    rule = "; ".join(rules)
    if p.quant is not None and p.quant.engine_changes:
        p = PrecisionPlan(p.weights, p.quant.as_loaded(hw.architecture), p.kv, p.activations, p.compute, p.name)
    weights, stages = _stage_weights(cfg, p, tp, pp, ep)
    lo, hi = max(stages, key=lambda r: r[1] - r[0])
    layer_share = (hi - lo) / cfg.n_layers
    head_share = kv_heads_per_rank(cfg, tp)
    state = _stage_state(cfg, state_dtype_for(p.kv_dtype), lo, hi) / tp
    seq_state = state_bytes_per_sequence(cfg, state_dtype_for(p.kv_dtype)) if context else 0
    kv = (kv_bytes(cfg, context, batch, p) - batch * seq_state) * layer_share * head_share
    if context:
        kv += batch * state
    per_tok = kv_token_bytes(cfg, p.kv_dtype) * layer_share * head_share
    prompt = context if prompt_len is None else require_nonnegative("prompt_len", prompt_len)
    require_positive("max_batched_tokens", max_batched_tokens)
    act = activation_bytes(cfg, max(min(batch * max(prompt, 1), max_batched_tokens), batch), p, tp=tp, ep=ep,
                           logits_rows=batch)
    return MemoryFit(hw.memory_bytes, weights, kv, act, reserve_fraction * hw.memory_bytes, per_tok, tp, pp, ep,
                     rule, state)


def _stage_state(cfg: ModelConfig, dtype: str, lo: int, hi: int) -> float:
    """The linear-attention state of one sequence in layers ``lo..hi-1`` (B, all TP ranks)."""
    n_lin = sum(cfg.layer_type(i) == "linear_attention" for i in range(cfg.n_layers))
    if not n_lin:
        return 0.0
    in_stage = sum(cfg.layer_type(i) == "linear_attention" for i in range(lo, hi))
    return state_bytes_per_sequence(cfg, dtype) * in_stage / n_lin
