"""KV room as a serving engine counts it: vLLM's ``gpu_memory_utilization`` (and SGLang's
``mem_fraction_static``) applied to the memory the runtime reports, less the weights, the
activation peak of the engine's profiling forward and the memory outside torch's allocator.

vLLM's rule.  V1 ``vllm/v1/worker/gpu_worker.py``, ``Worker.determine_available_memory``
(vllm-project/vllm at 0012cf69, read for this module)::

    peak_memory = torch.cuda.memory_stats()["allocated_bytes.all.peak"]   # weights + activations
    non_torch_allocations = (total - free) - torch allocated                # NCCL, custom all-reduce
    available_kv_cache_memory = total_gpu_memory * gpu_memory_utilization - peak_memory - non_torch

after a profiling forward (``profile_run``) of ``max_num_batched_tokens`` tokens; the V0 worker
(``vllm/worker/worker.py``, ``determine_num_available_blocks``) has since PR #2031 taken
``peak = init_free - free`` after that forward and
``num_gpu_blocks = (total * gpu_memory_utilization - peak) // cache_block_size``; a multi-GPU
engine takes the minimum over ranks.  PR #10511 logs the terms separately (``total_gpu_memory``,
``model weights take``, ``non_torch_memory``, ``PyTorch activation peak memory``,
``available_kv_cache_memory``).  This module follows that convention.  SGLang's
(``profile_max_num_token``, ``python/sglang/srt/model_executor/model_runner.py``; in v0.5.8
``model_runner_kv_cache_mixin.py``, seen here only as quoted in public notes)::

    rest_memory = available_gpu_memory - total_gpu_memory * (1 - mem_fraction_static)

with ``total_gpu_memory`` the free memory before loading and ``available_gpu_memory`` the free
memory after it (minimum over ranks): the KV pool is ``mem_fraction_static ×`` (nearly) the
total less the weights and what else was allocated; the activations and CUDA graphs live in
the other ``1 − mem_fraction_static``.  Here: ``mem_fraction_static × total − weights −
non-torch``, the CUDA context left out (approximate).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from .accounting import activation_bytes
from .config import as_model_config
from .fit import memory_fit
from .formats import as_precision_plan
from .hardware import as_hardware, runtime_memory_bytes
from .units import GiB, require_positive

__all__ = ["EngineMemory", "engine_memory", "GPU_MEMORY_UTILIZATION", "VLLM_MAX_NUM_BATCHED_TOKENS",
           "VLLM_MAX_NUM_SEQS", "VLLM_BLOCK_SIZE", "NON_TORCH_BYTES_PER_RANK", "NON_TORCH_BYTES_PCIE",
           "non_torch_bytes"]

#: vLLM's default ``gpu_memory_utilization`` (vLLM docs, "Engine Arguments", v0.6.4: "If
#: unspecified, will use the default value of 0.9"; later releases print 0.92 in ``vllm serve``).
GPU_MEMORY_UTILIZATION = 0.9
#: Tokens of vLLM's profiling forward when chunked prefill is off: ``max(max_model_len, 2048)``
#: (``vllm/config.py`` ``SchedulerConfig``, v0.6.x); 8,192 is that for an 8K-context model and
#: the V1 default for ``vllm serve`` on GPUs of 70 GiB or more (``vllm/engine/arg_utils.py``,
#: ``get_batch_defaults``).  The engine's own value is what to pass.
VLLM_MAX_NUM_BATCHED_TOKENS = 8192
#: vLLM's default ``max_num_seqs`` (256): its profiling forward computes logits for that many rows.
VLLM_MAX_NUM_SEQS = 256
#: vLLM's default KV block size (tokens per block, CUDA).
VLLM_BLOCK_SIZE = 16
#: Memory outside torch's allocator per rank and per TP degree, approximate, for the parts logged
#: with NVLink (and any part not known to lack it): vLLM PR #10511's logs of ``vllm serve
#: meta-llama/Meta-Llama-3-8B`` on 80 GB H100s show ``non_torch_memory`` 1.79 GiB at TP 1 and
#: 3.58 GiB at TP 2 (NCCL, custom all-reduce buffers, the cuBLAS workspace).  Modelled as
#: 1.79 GiB × tp, at or above every vLLM log since 0.6 that this module was checked against but
#: one: H100s under vLLM 0.19 V1 log 3.6–3.7 GiB at TP 2 (up to 0.12 GiB more) and the same at
#: TP 4 (init + forward non-torch; llm-d-incubation/llm-d-planner's accuracy sweep at d3121e05);
#: H200s 7.16 at TP 8 (vLLM 0.7.3, DeepSeek-R1; ``tests/test_serving.py``); A100/A800s 0.34–2.10
#: at TP 4–8 (issue #16570 and public deployment notes).  It depends on the version and on whether
#: custom all-reduce runs; no rule the logs support was found.  v0.2.x measured far more: PR #2031
#: (A100-80GB, TP 4) moved Llama-2-70B from 31,615 to 20,865 blocks when it began counting this
#: memory, i.e. 13.1 GiB per rank (allocator fragmentation from NCCL's record_stream, issue
#: #2248).  Pass the figure your engine logs (``non_torch=``, ``plan --non-torch-gib``) where you
#: have it.
NON_TORCH_BYTES_PER_RANK = 1.79 * GiB
#: The same for parts without NVLink (presets whose ``nvlink`` is ``"none"``: L4, L40S, A10,
#: GeForce; a custom spec with ``nvlink=none``), per rank whatever the TP degree.  A grouping by
#: the parts logged, not a measured cause: at TP 1, with no all-reduce at all, H100s log 0.75–1.79
#: GiB and these cards 0.16 (one L40S, issue #15196) and 0.35 (one RTX 3090, issue #10517); with
#: TP the figure stays flat — 0.25 per rank at TP 2 on RTX 4090s (issue #13061), 0.20 on 23.58
#: GiB cards (PR #14447), 0.36 at TP 8 on L40Ss (vLLM 0.6.6.post1; gnosia93/vlm-distillation's
#: EC2 notes), where vLLM runs no custom all-reduce ("not supported on more than two PCIe-only
#: GPUs").  Modelled as the largest, 0.36 GiB.
NON_TORCH_BYTES_PCIE = 0.36 * GiB


def non_torch_bytes(tp: int, hw) -> float:
    """Approximate memory outside torch's allocator on one rank at TP degree ``tp`` on ``hw``
    (B): :data:`NON_TORCH_BYTES_PCIE` for a part without NVLink (``hw.nvlink == "none"``), else
    :data:`NON_TORCH_BYTES_PER_RANK` × ``tp``.

    Raises:
        ValueError: ``tp`` not a positive integer; ``hw`` neither a preset name nor a HardwareSpec.
    """
    require_positive("tp", tp)
    if as_hardware(hw).nvlink == "none":
        return NON_TORCH_BYTES_PCIE
    return NON_TORCH_BYTES_PER_RANK * tp


@dataclass(frozen=True)
class EngineMemory:
    """One GPU's memory as a serving engine splits it (all B per GPU; the busiest rank).

    Attributes:
        convention: ``"vLLM gpu_memory_utilization"`` or ``"SGLang mem_fraction_static"``.
        fraction: the fraction given (``gpu_memory_utilization`` or ``mem_fraction_static``).
        total: the device total the runtime reports (``torch.cuda.mem_get_info``).
        total_source: where ``total`` comes from (a published log, or the datasheet, labelled).
        budget: ``fraction × total``.
        weights: weights on this GPU.
        activations: the profiling forward's activation peak (``0`` in SGLang's convention,
            whose activations live outside the fraction).
        non_torch: memory outside torch's allocator (approximate, :func:`non_torch_bytes`).
        kv_bytes: ``budget − weights − activations − non_torch``, or 0 when that is negative.
        over_budget: how far ``weights + activations + non_torch`` exceed the budget (0 if not).
        kv_per_token: KV bytes of one token on this GPU.
        block_size: tokens per KV block.
        kv_tokens: whole blocks of ``kv_bytes`` × ``block_size`` (0 when negative).
        context: tokens per sequence for :attr:`max_concurrency` (0: not asked).
        demand_tokens: ``batch × context``, the tokens the asked batch holds.
        max_num_batched_tokens: tokens of the profiling forward.
        non_torch_estimated: True when ``non_torch`` is the approximate default, False when the
            engine's own figure was given.
        state_per_sequence: a hybrid model's fixed linear-attention state per sequence on this
            GPU (:attr:`MemoryFit.state_per_sequence <llm_dataflow.core.fit.MemoryFit>`: the
            state of the busiest pipeline stage's linear-attention layers ``/ tp``, the whole
            state ``/ tp`` at ``pp = 1``); 0 for a model without linear-attention layers.

    A hybrid model (Qwen3-Next's Gated DeltaNet layers) charges every sequence ``context ×
    kv_per_token + state_per_sequence`` bytes of the room: its state is held from its first
    token on, whatever its length.  vLLM's hybrid KV-cache manager gives each sequence's state
    pages of its own beside the attention blocks (and pads attention and state pages to one
    page size); the state bytes are charged here exactly, so the counts are approximate with
    respect to vLLM's page rounding.
    """

    convention: str
    fraction: float
    total: float
    total_source: str
    budget: float
    weights: float
    activations: float
    non_torch: float
    kv_bytes: float
    over_budget: float
    kv_per_token: float
    block_size: int
    kv_tokens: int
    context: int
    demand_tokens: int
    max_num_batched_tokens: int
    state_per_sequence: float = 0.0
    non_torch_estimated: bool = True

    @property
    def sequence_bytes(self) -> float:
        """Bytes one sequence of :attr:`context` tokens takes from the room on this GPU:
        ``context × kv_per_token + state_per_sequence`` (0 at context 0)."""
        return self.context * self.kv_per_token + self.state_per_sequence if self.context else 0.0

    @property
    def max_concurrency(self) -> float | None:
        """Sequences of :attr:`context` tokens the room holds at once (vLLM's "Maximum
        concurrency"), ``None`` at context 0: ``kv_tokens / context``, and for a hybrid model
        the bytes of those whole blocks over :attr:`sequence_bytes` (the state charged to
        every sequence)."""
        if not self.context:
            return None
        if not self.state_per_sequence:
            return self.kv_tokens / self.context
        return self.kv_tokens * self.kv_per_token / self.sequence_bytes

    @property
    def fits(self) -> bool:
        """The weights fit in the budget and the KV room holds ``batch × context`` tokens
        (for a hybrid model: ``batch`` × :attr:`sequence_bytes` within the whole blocks)."""
        if self.kv_tokens <= 0:
            return False
        if not self.state_per_sequence or not self.context:
            return self.demand_tokens <= self.kv_tokens
        return self.demand_tokens // self.context * self.sequence_bytes <= self.kv_tokens * self.kv_per_token

    def terms(self, asked: float) -> list[dict]:
        """One GPU's memory term by term, as a bar draws it (B each, in this order): ``weights``,
        ``activations``, ``non_torch`` (``estimate``: True unless the engine's figure was given),
        ``kv_asked`` (the KV of the asked batch that the room holds), ``kv_unmet`` (the asked KV
        the room cannot hold), ``kv_free`` (room left), ``reserve`` (the ``1 − fraction`` share the
        engine leaves alone).  They sum to :attr:`total` when the deployment fits, and exceed it
        by what does not fit (``kv_unmet`` plus :attr:`over_budget`) when not.

        Args:
            asked: KV bytes the asked batch needs on this GPU (``plan``'s ``kv_bytes_per_gpu``).

        Raises:
            ValueError: ``asked`` negative or not finite.
        """
        if isinstance(asked, bool) or not isinstance(asked, (int, float)) or not 0 <= asked < math.inf:
            raise ValueError(f"asked={asked!r} is not allowed; allowed: a finite number of bytes >= 0")
        held = min(asked, self.kv_bytes)
        parts = (("weights", self.weights), ("activations", self.activations), ("non_torch", self.non_torch),
                 ("kv_asked", held), ("kv_unmet", asked - held), ("kv_free", self.kv_bytes - held),
                 ("reserve", self.total - self.budget))
        return [{"name": n, "bytes": float(b), "estimate": n == "non_torch" and self.non_torch_estimated}
                for n, b in parts]

    @property
    def reason(self) -> str:
        """One line naming the convention and what binds."""
        g = lambda x: f"{x / GiB:,.2f} GiB"  # noqa: E731
        head = f"{self.convention} {self.fraction:g} × {g(self.total)}"
        if self.over_budget > 0 or self.kv_tokens == 0:
            return (f"does not fit: weights {g(self.weights)} + activations {g(self.activations)} + non-torch "
                    f"{g(self.non_torch)} exceed {head} = {g(self.budget)} per GPU")
        if self.state_per_sequence and self.context:   # a hybrid model: the state is charged too
            n = self.demand_tokens // self.context
            asked = f"{self.demand_tokens:,} tokens of KV + the state of {n:,} sequences ({g(n * self.state_per_sequence)})"
            verdict = "fits" if self.fits else "does not fit"
            return (f"{verdict}: {asked} in a room of {self.kv_tokens:,} KV tokens "
                    f"({g(self.kv_tokens * self.kv_per_token)}; {head} = {g(self.budget)} per GPU)")
        if not self.fits:
            return (f"does not fit: {self.demand_tokens:,} tokens of KV asked, {self.kv_tokens:,} fit "
                    f"({head} = {g(self.budget)} per GPU)")
        asked = f"{self.demand_tokens:,} of " if self.demand_tokens else "room for "
        return f"fits: {asked}{self.kv_tokens:,} KV tokens ({head} = {g(self.budget)} per GPU)"


def engine_memory(cfg, hw, dtype="bf16", *, tp: int = 1, pp: int = 1, ep: int = 1, kv_dtype: str | None = None,
                  batch: int = 1, context: int = 0,
                  gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION,
                  mem_fraction_static: float | None = None,
                  max_num_batched_tokens: int = VLLM_MAX_NUM_BATCHED_TOKENS,
                  max_num_seqs: int = VLLM_MAX_NUM_SEQS, block_size: int = VLLM_BLOCK_SIZE,
                  non_torch: float | None = None) -> EngineMemory:
    """The KV room of one deployment as vLLM counts it (SGLang's when ``mem_fraction_static``
    is given), on the busiest GPU of a ``tp × pp`` layout.

    * total: :func:`~llm_dataflow.core.hardware.runtime_memory_bytes` (79.22 GiB on an 80 GB
      H100, not the 80 GB label);
    * weights: :func:`~llm_dataflow.core.fit.memory_fit`'s per-GPU weights;
    * activations: :func:`~llm_dataflow.core.accounting.activation_bytes` of a forward of
      ``max_num_batched_tokens`` tokens with logits for ``min(max_num_seqs, tokens)`` rows —
      what vLLM profiles, whatever the workload (SGLang: 0, outside its fraction);
    * non-torch: ``non_torch`` if given (B), else :func:`non_torch_bytes` (approximate);
    * KV: the rest, in whole blocks of ``block_size`` tokens.

    Raises:
        ValueError: what :func:`memory_fit` rejects; a fraction outside (0, 1];
            ``max_num_batched_tokens``, ``max_num_seqs`` or ``block_size`` not a positive
            integer; ``non_torch`` negative.  Each message names the argument.
    """
    cfg = as_model_config(cfg)
    hw = as_hardware(hw)
    sglang = mem_fraction_static is not None
    frac = mem_fraction_static if sglang else gpu_memory_utilization
    name = "mem_fraction_static" if sglang else "gpu_memory_utilization"
    if isinstance(frac, bool) or not isinstance(frac, (int, float)) or not 0 < frac <= 1:
        raise ValueError(f"{name}={frac!r} is not allowed; allowed: 0 < x <= 1")
    require_positive("max_num_batched_tokens", max_num_batched_tokens)
    require_positive("max_num_seqs", max_num_seqs)
    require_positive("block_size", block_size)
    fit = memory_fit(cfg, hw, dtype, batch=batch, context=context, tp=tp, pp=pp, ep=ep, kv_dtype=kv_dtype,
                     reserve_fraction=0)
    given = non_torch
    if non_torch is None:
        non_torch = non_torch_bytes(tp, hw)
    elif isinstance(non_torch, bool) or not isinstance(non_torch, (int, float)) or not 0 <= non_torch < math.inf:
        raise ValueError(f"non_torch={non_torch!r} is not allowed; allowed: a finite number of bytes >= 0")
    act = 0 if sglang else activation_bytes(cfg, max_num_batched_tokens, as_precision_plan(dtype, kv_dtype), tp=tp,
                                            ep=ep, logits_rows=min(max_num_seqs, max_num_batched_tokens))
    total, source = runtime_memory_bytes(hw)
    budget = frac * total
    room = budget - fit.weights - act - non_torch
    per_block = fit.kv_per_token * block_size
    tokens = int(room // per_block) * block_size if room > 0 else 0
    return EngineMemory("SGLang mem_fraction_static" if sglang else "vLLM gpu_memory_utilization", frac, total,
                        source, budget, fit.weights, act, non_torch, max(room, 0.0), max(-room, 0.0),
                        fit.kv_per_token, block_size, tokens,
                        context, batch * context, max_num_batched_tokens, fit.state_per_sequence,
                        non_torch_estimated=given is None)
