"""KV room as a serving engine counts it: vLLM's ``gpu_memory_utilization`` (and SGLang's
``mem_fraction_static``) applied to the memory the runtime reports, less the weights, the
activation peak of the engine's profiling forward, the memory outside torch's allocator and
(vLLM from 0.21) the CUDA graph pool — :func:`engine_memory`, the serving view of the one memory
fit (:func:`~llm_dataflow.core.fit.memory_fit`; the engines' rules and their logged figures are
in :mod:`llm_dataflow.core.engines`).

vLLM's rule.  V1 ``vllm/v1/worker/gpu_worker.py``, ``Worker.determine_available_memory``
(vllm-project/vllm at 0012cf69 and 001cabc1, read for this module)::

    peak_memory = torch.cuda.memory_stats()["allocated_bytes.all.peak"]   # weights + activations
    non_torch_allocations = (total - free) - torch allocated                # NCCL, custom all-reduce
    available_kv_cache_memory = total_gpu_memory * gpu_memory_utilization - peak_memory - non_torch
                                - cudagraph_memory_estimate_applied         # from 0.21 by default

after a profiling forward (``profile_run``) of ``max_num_batched_tokens`` tokens; the V0 worker
(``vllm/worker/worker.py``, ``determine_num_available_blocks``) has since PR #2031 taken
``peak = init_free - free`` after that forward.  A multi-GPU engine takes the minimum over ranks.
PR #10511 logs the terms separately (``total_gpu_memory``, ``model weights take``,
``non_torch_memory``, ``PyTorch activation peak memory``, ``available_kv_cache_memory``).
SGLang's (``profile_max_num_token``, ``python/sglang/srt/model_executor/model_runner.py``; in
v0.5.8 ``model_runner_kv_cache_mixin.py``)::

    rest_memory = available_gpu_memory - total_gpu_memory * (1 - mem_fraction_static)

with ``total_gpu_memory`` the free memory before loading and ``available_gpu_memory`` the free
memory after it (minimum over ranks).
"""
from __future__ import annotations

from .engines import (GPU_MEMORY_UTILIZATION, NON_TORCH_BYTES_PCIE, VLLM_BLOCK_SIZE, VLLM_MAX_NUM_BATCHED_TOKENS,
                      VLLM_MAX_NUM_SEQS, non_torch_estimate)
from .fit import MemoryFit, memory_fit

# (the engines' defaults it imports, GPU_MEMORY_UTILIZATION, VLLM_*, NON_TORCH_BYTES_PCIE, are
# exported by core.engines, where they are defined)
__all__ = ["EngineMemory", "engine_memory", "non_torch_bytes"]

#: The serving view's result: the one :class:`~llm_dataflow.core.fit.MemoryFit` (its ``total``,
#: ``budget``, ``kv_bytes``, ``kv_tokens``, ``max_concurrency``, ``terms()``, ``reason``).
EngineMemory = MemoryFit


def non_torch_bytes(tp: int, hw, engine=None) -> float:
    """Approximate memory outside torch's allocator on one vLLM rank at TP degree ``tp`` on ``hw``
    (B): :func:`~llm_dataflow.core.engines.non_torch_estimate`'s figure (its source says which
    logs it rests on).

    Raises:
        ValueError: ``tp`` not a positive integer; ``hw`` neither a preset name nor a HardwareSpec;
            an unknown engine.
    """
    return non_torch_estimate(tp, hw, engine).bytes


def engine_memory(cfg, hw, dtype="bf16", *, tp: int = 1, pp: int = 1, ep: int = 1, kv_dtype: str | None = None,
                  batch: int = 1, context: int = 0, engine="vllm", engine_version: str | None = None,
                  gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION,
                  mem_fraction_static: float | None = None,
                  max_num_batched_tokens: int = VLLM_MAX_NUM_BATCHED_TOKENS,
                  max_num_seqs: int = VLLM_MAX_NUM_SEQS, block_size: int = VLLM_BLOCK_SIZE,
                  non_torch: float | None = None, enforce_eager: bool = False,
                  cuda_graph_bytes: float | None = None, allow_long_context: bool = False) -> EngineMemory:
    """The KV room of one deployment as vLLM counts it (SGLang's when ``engine="sglang"`` or
    ``mem_fraction_static`` is given), on the busiest GPU of a ``tp × pp`` layout:
    :func:`~llm_dataflow.core.fit.memory_fit` with the same arguments.

    Raises:
        ValueError: what :func:`~llm_dataflow.core.fit.memory_fit` rejects, naming the argument.
    """
    return memory_fit(cfg, hw, dtype, batch=batch, context=context, tp=tp, pp=pp, ep=ep, kv_dtype=kv_dtype,
                      engine=engine, engine_version=engine_version, gpu_memory_utilization=gpu_memory_utilization,
                      mem_fraction_static=mem_fraction_static, max_num_batched_tokens=max_num_batched_tokens,
                      max_num_seqs=max_num_seqs, block_size=block_size, non_torch=non_torch,
                      enforce_eager=enforce_eager, cuda_graph_bytes=cuda_graph_bytes,
                      allow_long_context=allow_long_context)
