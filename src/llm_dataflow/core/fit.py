"""Memory fit: whether a deployment fits each GPU, counted the way its serving engine counts it —
one convention for ``plan``, the web planner and every chapter's calculator.

The per-GPU bytes come from :mod:`llm_dataflow.core.accounting` split over the layout that
:mod:`llm_dataflow.core.parallel` checks; the budget, what the engine subtracts before its KV
cache and how the cache is laid out come from :mod:`llm_dataflow.core.engines` (vLLM's
``gpu_memory_utilization`` of the total the runtime reports, or SGLang's ``mem_fraction_static``).
"""
from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field

from .accounting import activation_bytes, kv_bytes, tensor_bytes
from .config import ModelConfig, as_model_config, tensor_specs
from .engines import (GPU_MEMORY_UTILIZATION, VLLM_BLOCK_SIZE, VLLM_MAX_NUM_BATCHED_TOKENS, VLLM_MAX_NUM_SEQS,
                      EngineSpec, Figure, KVLayout, cuda_graph_estimate, engine_spec, kv_layout, non_torch_estimate,
                      sglang_preload_bytes)
from .formats import PrecisionPlan, as_precision_plan
from .hardware import as_hardware, runtime_memory_bytes
from .kv import kv_layer_bytes_per_token, state_bytes_per_sequence, state_dtype_for
from .parallel import check_parallel, check_quant_shards, kv_heads_per_rank, layer_partition, tensor_shares
from .units import GiB, no_overflow, require_nonnegative, require_positive

__all__ = ["MemoryFit", "memory_fit", "RUNTIME_RESERVE_FRACTION", "MAX_BATCHED_TOKENS", "max_model_len_limit"]

#: The share of the runtime-reported total vLLM leaves outside its budget at its default
#: ``gpu_memory_utilization`` (0.9): ``1 − 0.9``.  Every calculator of the book uses the engine's
#: convention (:func:`memory_fit`); this name stays for the chapters that quote the 10 %.
RUNTIME_RESERVE_FRACTION = round(1 - GPU_MEMORY_UTILIZATION, 10)
#: Tokens of the engine's profiling forward (vLLM's ``max_num_batched_tokens`` default for
#: ``vllm serve`` on GPUs of 70 GiB or more): :data:`~llm_dataflow.core.engines.VLLM_MAX_NUM_BATCHED_TOKENS`.
MAX_BATCHED_TOKENS = VLLM_MAX_NUM_BATCHED_TOKENS

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
        if p.quant is not None and p.quant.loaded_backend and t.expert is not None:
            b, share = _loaded_expert_bytes(cfg, t, p, tp, ep, b, share)
        if t.layer is None:                      # embedding on the first stage, head/final norm on the last
            s = 0 if t.role in ("embedding", "position_embedding") else pp - 1
        else:
            s = stage_of[t.layer]
        per[s] += b * share
        if cfg.tie_embeddings and t.role == "embedding" and pp > 1:
            per[pp - 1] += b * share             # a tied head is a copy on the last stage
    return max(per), tuple(stages)



def _loaded_expert_bytes(cfg: ModelConfig, t, p: PrecisionPlan, tp: int, ep: int, stored: float, share: float):
    """(bytes, share) of one routed expert's tensor as an MXFP4 MoE backend holds it
    (:data:`~llm_dataflow.core.formats.MXFP4_MOE_BACKENDS`): the intermediate width per GPU and the
    hidden size padded, the scales held ``scale_copies`` times, the biases in ``expert_bias_bits``;
    the bytes are this GPU's slice, so the share keeps only the experts' count (``E/ep`` under EP)."""
    q = p.quant
    if t.role == "bias":
        return stored * q.expert_bias_bits / 16, share
    if t.in_features is None or q.keeps(t.name, t.role):
        return stored, share
    a_i, a_h = q.expert_padding
    split = tp if ep == 1 else 1
    up = lambda n, a: -(-n // a) * a  # noqa: E731
    inter, hidden = up(cfg.moe_d_ff // split, a_i), up(cfg.d_model, a_h)
    shape = (hidden, inter) if ".down_proj" in t.name else (inter, hidden)   # down_proj reads F, gate/up D
    parts = q.tensor_parts(shape, shape[1])
    return sum(parts.values()) + (q.scale_copies - 1) * parts["scales"], share * split


def max_model_len_limit(cfg: ModelConfig) -> int | None:
    """The longest context an engine accepts for ``cfg`` without an override (tokens), ``None``
    when the config gives no positions: ``max_position_embeddings``, or for a RoPE scaling that
    stretches the positions the scaled length — YaRN ``original_max_position_embeddings × factor``,
    ``linear``/``dynamic`` ``max_position_embeddings × factor`` (vLLM's
    ``_get_and_verify_max_len``; Llama 3's ``llama3`` and LongRoPE types already give the
    stretched length).  vLLM refuses a longer ``max_model_len`` unless
    ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1``; SGLang unless ``SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1``.

    Raises:
        ValueError: ``cfg`` neither a ModelConfig nor a preset name.
    """
    cfg = as_model_config(cfg)
    n = cfg.max_position_embeddings
    rs = cfg.rope_scaling or {}
    kind = rs.get("rope_type", rs.get("type"))
    factor = rs.get("factor")
    if n is None or not isinstance(factor, (int, float)) or isinstance(factor, bool) or factor <= 0:
        return n
    if kind == "yarn" and isinstance(rs.get("original_max_position_embeddings"), int):
        return max(n, int(rs["original_max_position_embeddings"] * factor))
    if kind in ("linear", "dynamic"):
        return int(n * factor)
    return n


@dataclass(frozen=True)
class MemoryFit:
    """One GPU's memory as the serving engine splits it, for one deployment (all B per GPU; the
    busiest GPU of the layout).  ``plan``, the web planner and the chapters' calculators all show
    this (:func:`memory_fit`).

    Attributes:
        capacity: the device's total as the runtime reports it (``torch.cuda.mem_get_info``;
            79.22 GiB on an "80 GB" H100; :func:`~llm_dataflow.core.hardware.runtime_memory_bytes`).
        total_source: where ``capacity`` comes from (a published log, or the datasheet, labelled).
        engine: the :class:`~llm_dataflow.core.engines.EngineSpec` whose convention is used.
        fraction: ``gpu_memory_utilization`` (vLLM) or ``mem_fraction_static`` (SGLang).
        budget: vLLM ``fraction × capacity``; SGLang ``fraction × (capacity − non_torch)``.
        reserve: ``capacity − budget`` (vLLM) or ``(1 − fraction) × (capacity − non_torch)``
            (SGLang): what the engine leaves alone (vLLM before 0.21 captures CUDA graphs in it).
        weights: weights on this GPU as loaded (heaviest pipeline stage, this rank's shards).
        activations: vLLM's profiling-forward peak (:func:`activation_bytes` of
            ``max_num_batched_tokens`` tokens); 0 for SGLang, whose activations live in the reserve.
        non_torch: vLLM: memory outside torch's allocator; SGLang: what is allocated before the
            weights load (CUDA context, torch.distributed).  ``non_torch_source`` says where it
            comes from, ``non_torch_estimated`` whether it is the default estimate.
        cuda_graphs: the CUDA graph pool (0 with ``enforce_eager`` and for SGLang);
            ``cuda_graphs_source`` its origin.  Inside the budget from vLLM 0.21, else out of the
            reserve.
        kv: the KV content of ``batch`` sequences of ``context`` tokens on this GPU (windows,
            MLA's latent and a hybrid's state included; chapter 06's bytes).
        kv_per_token: KV bytes one token adds in every attention layer of this GPU.
        state_per_sequence: a hybrid model's linear-attention state per sequence on this GPU.
        layout: the engine's :class:`~llm_dataflow.core.engines.KVLayout` of the room.
        batch, context, prompt, tp, pp, ep, block_size, max_num_batched_tokens: the setting.
        quant_rule: the quantisation check the layout passed (empty when unquantised).
        max_model_len_limit: :func:`max_model_len_limit` of the model (None: unknown).
        refused: why the engine would refuse to start (a context beyond the model's positions
            without ``allow_long_context``), else "".
        warnings: lines a reader must see (the context beyond the positions, ...).
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
    engine: EngineSpec = field(default_factory=lambda: engine_spec())
    fraction: float = GPU_MEMORY_UTILIZATION
    budget: float = 0.0
    total_source: str = ""
    non_torch: float = 0.0
    non_torch_source: str = ""
    non_torch_estimated: bool = True
    cuda_graphs: float = 0.0
    cuda_graphs_source: str = ""
    enforce_eager: bool = False
    layout: KVLayout | None = None
    batch: int = 1
    context: int = 0
    prompt: int = 0
    block_size: int = VLLM_BLOCK_SIZE
    max_num_batched_tokens: int = VLLM_MAX_NUM_BATCHED_TOKENS
    max_model_len_limit: int | None = None
    refused: str = ""
    warnings: tuple = ()

    # --- the room ------------------------------------------------------------------------------
    @property
    def total(self) -> float:
        """:attr:`capacity` (the name the engines' logs use: ``total_gpu_memory``)."""
        return self.capacity

    @property
    def convention(self) -> str:
        """``"vLLM gpu_memory_utilization"`` or ``"SGLang mem_fraction_static"``."""
        return "SGLang mem_fraction_static" if self.engine.name == "sglang" else "vLLM gpu_memory_utilization"

    @property
    def graphs_in_budget(self) -> bool:
        """Whether the CUDA graph pool is subtracted before the KV cache (vLLM from 0.21)."""
        return self.engine.graphs_in_budget

    def _room(self, graphs: bool = True) -> float:
        if self.engine.name == "sglang":     # its budget is a share of what was free before loading
            return self.budget - self.weights
        g = self.cuda_graphs if graphs and self.graphs_in_budget else 0.0
        return self.budget - self.weights - self.activations - self.non_torch - g

    @property
    def kv_bytes(self) -> float:
        """The KV room (B): the budget less weights, activations, memory outside torch and (from
        vLLM 0.21) the CUDA graph pool; 0 when that is negative."""
        return max(self._room(), 0.0)

    @property
    def kv_room_bytes(self) -> float:
        """:attr:`kv_bytes`."""
        return self.kv_bytes

    @property
    def over_budget(self) -> float:
        """How far the engine's own terms exceed its budget (B; 0 when they fit)."""
        return max(-self._room(), 0.0)

    @property
    def kv_tokens(self) -> int:
        """The room in tokens as the engine logs it (vLLM's "GPU KV cache size", SGLang's
        "#tokens"; whole blocks)."""
        return self.layout.tokens if self.layout is not None else 0

    @property
    def kv_room_tokens(self) -> int:
        """:attr:`kv_tokens`: the whole room, before any sequence takes from it."""
        return self.kv_tokens

    @property
    def kv_allocated(self) -> float:
        """KV bytes the engine sets aside for ``batch`` sequences of ``context`` tokens (B): its
        blocks per sequence (:attr:`layout`), more than :attr:`kv` where a window's blocks hold
        ``window − 1 + max_num_batched_tokens`` tokens or a block is partly full."""
        if self.layout is None or not self.context:
            return 0.0
        return self.batch * self.layout.units_per_sequence * self.layout.unit_bytes

    @property
    def kv_left_tokens(self) -> int:
        """Tokens left in the room beside the asked batch, in the engine's whole blocks at
        :attr:`kv_per_token` (:attr:`kv_tokens` at context 0; 0 when none is left)."""
        if self.layout is None or not self.kv_per_token:
            return 0
        whole = self.layout.units * self.layout.unit_bytes
        left = math.floor((whole - self.kv_allocated) / self.kv_per_token)
        return max(0, min(left, self.kv_tokens))

    @property
    def demand_tokens(self) -> int:
        """``batch × context``: the tokens the asked batch holds."""
        return self.batch * self.context

    @property
    def sequence_bytes(self) -> float:
        """Bytes one sequence of :attr:`context` tokens takes from the room (0 at context 0)."""
        if self.layout is None or not self.context:
            return 0.0
        return self.layout.units_per_sequence * self.layout.unit_bytes

    @property
    def max_concurrency(self) -> float | None:
        """Sequences of :attr:`context` tokens the room holds at once, by the engine's rule
        (vLLM's "Maximum concurrency"); ``None`` at context 0."""
        return None if self.layout is None else self.layout.max_concurrency

    # --- the verdict ---------------------------------------------------------------------------
    def _kv_fits(self, graphs: bool = True) -> bool:
        room = max(self._room(graphs), 0.0)
        if self.layout is None or room <= 0 or not self.layout.unit_bytes:
            return False
        units = int(room // self.layout.unit_bytes)
        if units <= 0:
            return False
        if not self.context:
            return True
        if self.batch * self.layout.units_per_sequence > units:
            return False
        cap = self.layout.sequences_cap
        return cap is None or self.batch <= cap

    @property
    def graphs_fit(self) -> bool:
        """Whether CUDA graph capture finds its pool: always when it is in the budget (vLLM from
        0.21), else when the reserve (``1 − gpu_memory_utilization`` of the total) holds it."""
        return self.graphs_in_budget or self.cuda_graphs <= self.reserve

    @property
    def fits(self) -> bool:
        """The engine starts (no :attr:`refused`), its budget holds the weights and its other
        terms, the KV room holds ``batch`` sequences of ``context`` tokens by its rule, and CUDA
        graph capture finds its pool."""
        return not self.refused and self._kv_fits() and self.graphs_fit

    @property
    def fits_eager(self) -> bool:
        """:attr:`fits` with ``--enforce-eager`` (no CUDA graphs), the rest unchanged."""
        return not self.refused and self._kv_fits(graphs=False)

    @property
    def used(self) -> float:
        """Everything the terms hold (B): weights, activations, memory outside torch, the CUDA
        graph pool, the KV the batch takes and the reserve (less the graphs it holds)."""
        return sum(t["bytes"] for t in self.terms())

    @property
    def kv_room_left_bytes(self) -> float:
        """Bytes left in the room beside the asked batch (negative when it does not fit)."""
        return self._room() - self.kv_allocated

    def terms(self, asked: float | None = None) -> list[dict]:
        """One GPU's memory term by term, as a bar draws it (B each, in this order): ``weights``,
        ``activations``, ``non_torch`` (SGLang: what was allocated before loading),
        ``cuda_graphs``, ``kv_asked`` (the asked batch's KV the room holds), ``kv_unmet`` (what
        it cannot hold), ``kv_free`` (room left), ``reserve`` (the share the engine leaves alone,
        less the CUDA graphs captured in it before vLLM 0.21).  ``estimate`` is True for the
        modelled terms (``non_torch``, ``cuda_graphs``, ``activations`` unless given or 0).
        They sum to :attr:`capacity` when the deployment fits, and exceed it by what does not
        fit (:attr:`over_budget`, ``kv_unmet``, graphs beyond the reserve).

        Args:
            asked: KV bytes the asked batch needs on this GPU; default :attr:`kv_allocated`.

        Raises:
            ValueError: ``asked`` negative or not finite.
        """
        if asked is None:
            asked = self.kv_allocated
        if isinstance(asked, bool) or not isinstance(asked, (int, float)) or not 0 <= asked < math.inf:
            raise ValueError(f"asked={asked!r} is not allowed; allowed: a finite number of bytes >= 0")
        held = min(asked, self.kv_bytes)
        reserve = self.reserve if self.graphs_in_budget else max(self.reserve - self.cuda_graphs, 0.0)
        parts = (("weights", self.weights, False), ("activations", self.activations, bool(self.activations)),
                 ("non_torch", self.non_torch, self.non_torch_estimated),
                 ("cuda_graphs", self.cuda_graphs, bool(self.cuda_graphs) and self.cuda_graphs_source != "given"),
                 ("kv_asked", held, False), ("kv_unmet", asked - held, False),
                 ("kv_free", self.kv_bytes - held, False), ("reserve", reserve, False))
        return [{"name": n, "bytes": float(b), "estimate": e} for n, b, e in parts]

    @property
    def reason(self) -> str:
        """One line naming the convention and what binds."""
        g = lambda x: f"{x / GiB:,.2f} GiB"  # noqa: E731
        head = (f"{self.convention} {self.fraction:g} × {g(self.capacity)}" if self.engine.name == "vllm" else
                f"{self.convention} {self.fraction:g} × ({g(self.capacity)} − {g(self.non_torch)} before loading)")
        tail = f" ({self.quant_rule})" if self.quant_rule else ""
        if self.refused:
            return f"refused: {self.refused}"
        if self.over_budget > 0 or not self.kv_tokens:
            graphs = f" + CUDA graphs {g(self.cuda_graphs)}" if self.graphs_in_budget and self.cuda_graphs else ""
            return (f"does not fit: weights {g(self.weights)} + activations {g(self.activations)} + non-torch "
                    f"{g(self.non_torch)}{graphs} exceed {head} = {g(self.budget)} per GPU{tail}")
        room = f"{self.kv_tokens:,} KV tokens ({head} = {g(self.budget)} per GPU)"
        if not self._kv_fits():
            return (f"does not fit: {self.batch:,} × {self.context:,} tokens take "
                    f"{g(self.kv_allocated)} of KV, the room holds {g(self.kv_bytes)}: {room}{tail}")
        if not self.graphs_fit:
            return (f"does not fit with CUDA graphs: their pool ({g(self.cuda_graphs)}) exceeds the "
                    f"{g(self.reserve)} left outside the budget; fits with --enforce-eager: {room}{tail}")
        state = (f" + the state of {self.batch:,} sequences ({g(self.batch * self.state_per_sequence)})"
                 if self.state_per_sequence and self.context else "")
        asked = (f"{self.batch:,} × {self.context:,} tokens{state} ({g(self.kv_allocated)}) in " if self.context
                 else "room for ")
        return f"fits: {asked}{room}{tail}"


def _check_fraction(name: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
        raise ValueError(f"{name}={v!r} is not allowed; allowed: 0 < x <= 1")
    return float(v)


def _given_bytes(name: str, v):
    if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < math.inf):
        raise ValueError(f"{name}={v!r} is not allowed; allowed: a finite number of bytes >= 0")
    return v


@no_overflow('batch', 'context', 'prompt_len')
def memory_fit(cfg, hw, dtype="bf16", *, batch: int = 1, context: int = 0, prompt_len: int | None = None,
               tp: int = 1, pp: int = 1, ep: int = 1, kv_dtype: str | None = None, engine="vllm",
               engine_version: str | None = None, gpu_memory_utilization: float = GPU_MEMORY_UTILIZATION,
               mem_fraction_static: float | None = None,
               max_num_batched_tokens: int = VLLM_MAX_NUM_BATCHED_TOKENS, max_num_seqs: int = VLLM_MAX_NUM_SEQS,
               block_size: int = VLLM_BLOCK_SIZE, non_torch: float | None = None, enforce_eager: bool = False,
               cuda_graph_bytes: float | None = None, allow_long_context: bool = False) -> MemoryFit:
    """Whether ``batch`` sequences of ``context`` tokens fit the busiest GPU of a ``tp × pp``
    (``× ep``) deployment, as its serving engine counts it (:class:`MemoryFit`).

    * total: :func:`~llm_dataflow.core.hardware.runtime_memory_bytes` (79.22 GiB on an 80 GB H100);
    * weights: each tensor's stored bytes split as Megatron-style TP splits them — heads, MLP and
      expert widths and the vocabulary ``tp`` ways, norms and routers replicated, KV projections
      by whole KV heads — over ``pp`` stages (:func:`layer_partition`; the heaviest counts); under
      expert parallelism (``ep`` > 1, a multiple of ``tp``) ``E/ep`` whole experts per GPU.  A
      quantised format's bytes are what the engine holds after loading
      (:meth:`~llm_dataflow.core.formats.QuantSpec.as_loaded` on this GPU's architecture).
    * vLLM (``engine="vllm"``; ``engine_version``, default 0.21): budget ``gpu_memory_utilization
      × total`` less the activation peak of a profiling forward of ``max_num_batched_tokens``
      tokens with logits for ``min(max_num_seqs, tokens)`` rows, the memory outside torch
      (``non_torch`` B, else :func:`~llm_dataflow.core.engines.non_torch_estimate`) and, from
      0.21, the CUDA graph pool (``cuda_graph_bytes`` B, else
      :func:`~llm_dataflow.core.engines.cuda_graph_estimate`; 0 with ``enforce_eager``); before
      0.21 the pool must fit in the ``1 − gpu_memory_utilization`` share.
    * SGLang (``engine="sglang"``, or ``mem_fraction_static`` given): pool ``mem_fraction_static ×
      (total − what is allocated before the weights load) − weights``
      (:func:`~llm_dataflow.core.engines.sglang_preload_bytes`, or ``non_torch`` B).
    * the KV: the room laid out by the engine's rule
      (:func:`~llm_dataflow.core.engines.kv_layout`): each layer group's blocks (windows, chunks,
      a hybrid's state); the content of the asked batch is :attr:`MemoryFit.kv` (chapter 06's
      bytes for this stage's layers and this rank's KV heads; MLA's latent on every rank).
    * the engine's start checks: a context (or prompt) beyond :func:`max_model_len_limit` is
      refused unless ``allow_long_context`` (vLLM's ``VLLM_ALLOW_LONG_MAX_MODEL_LEN=1``), and
      either way it is a warning.

    Every modelled term is an estimate built on logged figures
    (:data:`~llm_dataflow.core.engines.ESTIMATE_NOTE`).

    Raises:
        ValueError: unknown model, hardware, dtype or engine; a layout :func:`check_parallel`
            rejects; a TP degree that splits the format's blocks or groups
            (:func:`check_quant_shards`, naming vLLM's rule); ``batch`` < 1, ``context`` < 0;
            a fraction outside (0, 1]; ``max_num_batched_tokens``, ``max_num_seqs`` or
            ``block_size`` not a positive integer; ``non_torch`` or ``cuda_graph_bytes``
            negative; ``engine="sglang"`` without ``mem_fraction_static``; ``enforce_eager`` or
            ``allow_long_context`` not a bool.  Each message names the argument.
    """
    cfg = as_model_config(cfg)
    hw = as_hardware(hw)
    check_parallel(cfg, tp, pp, ep)
    require_positive("batch", batch)
    require_nonnegative("context", context)
    prompt = context if prompt_len is None else require_nonnegative("prompt_len", prompt_len)
    for name, v in (("max_num_batched_tokens", max_num_batched_tokens), ("max_num_seqs", max_num_seqs),
                    ("block_size", block_size)):
        require_positive(name, v)
    for name, v in (("enforce_eager", enforce_eager), ("allow_long_context", allow_long_context)):
        if not isinstance(v, bool):
            raise ValueError(f"{name}={v!r} is not allowed; it must be True or False")
    _given_bytes("non_torch", non_torch)
    _given_bytes("cuda_graph_bytes", cuda_graph_bytes)
    if mem_fraction_static is not None and engine == "vllm":
        engine = "sglang"                       # the SGLang convention, asked by its fraction
    spec = engine_spec(engine, engine_version)
    if spec.name == "sglang":
        if mem_fraction_static is None:
            raise ValueError("mem_fraction_static=None is not allowed for engine='sglang'; give the engine's "
                             "--mem-fraction-static (its default depends on the GPU and the TP degree)")
        frac = _check_fraction("mem_fraction_static", mem_fraction_static)
    else:
        frac = _check_fraction("gpu_memory_utilization", gpu_memory_utilization)
    p = as_precision_plan(dtype, kv_dtype)
    if p.quant is not None and spec.name != "vllm" and "mxfp4_moe" in p.quant.engine_changes:
        q = dataclasses.replace(p.quant, engine_changes=tuple(c for c in p.quant.engine_changes if c != "mxfp4_moe"))
        p = PrecisionPlan(p.weights, q, p.kv, p.activations, p.compute, p.name)     # vLLM's MXFP4 layout only
    check_quant_shards(cfg, p.quant, tp, ep)   # vLLM pads MXFP4 expert shards (mxfp4_moe): not refused
    rules = []
    if p.quant is not None and tp > 1 and "mxfp4_moe" in p.quant.engine_changes:
        rules.append(f"tp={tp}: vLLM pads each expert shard to its MXFP4 kernel's multiple")
    elif p.quant is not None and tp > 1 and (p.quant.block_shape is not None or p.quant.group_size is not None):
        rules.append(f"tp={tp} shards hold whole {p.quant.weight_dtype} "
                     + ("blocks" if p.quant.block_shape is not None else "groups") + ", vLLM's rule")
    if ep > 1:
        rules.append(f"ep={ep}: {cfg.n_routed_experts // ep} whole experts per GPU, ep = tp × dp")
    if p.quant is not None and p.quant.engine_changes:
        q = p.quant
        p = PrecisionPlan(p.weights, q.as_loaded(hw.architecture), p.kv, p.activations, p.compute, p.name)
    weights, stages = _stage_weights(cfg, p, tp, pp, ep)
    lo, hi = max(stages, key=lambda r: r[1] - r[0])
    layer_share = (hi - lo) / cfg.n_layers
    head_share = kv_heads_per_rank(cfg, tp)
    sdt = state_dtype_for(p.kv_dtype)
    state = _stage_state(cfg, sdt, lo, hi) / tp
    seq_state = state_bytes_per_sequence(cfg, sdt) if context else 0
    kv = (kv_bytes(cfg, context, batch, p) - batch * seq_state) * layer_share * head_share
    if context:
        kv += batch * state
    kinds = _layer_kinds(cfg, p.kv_dtype, lo, hi, head_share)
    per_tok = sum(n * b for _, n, b, _ in kinds)
    total, source = runtime_memory_bytes(hw)
    if spec.name == "sglang":
        pre = sglang_preload_bytes(tp) if non_torch is None else Figure(float(non_torch), "given", False)
        budget = frac * (total - pre.bytes)
        reserve = total - pre.bytes - budget
        act, nt, graphs = 0, pre, cuda_graph_estimate(spec, enforce_eager=enforce_eager)
        room = budget - weights
    else:
        nt = non_torch_estimate(tp, hw, spec) if non_torch is None else Figure(float(non_torch), "given", False)
        graphs = cuda_graph_estimate(spec, enforce_eager=enforce_eager, given=cuda_graph_bytes)
        budget = frac * total
        reserve = total - budget
        act = activation_bytes(cfg, max_num_batched_tokens, p, tp=tp, ep=ep,
                               logits_rows=min(max_num_seqs, max_num_batched_tokens))
        room = budget - weights - act - nt.bytes - (graphs.bytes if spec.graphs_in_budget else 0.0)
    layout = kv_layout(kinds, max(room, 0.0), context, spec, block_size=block_size,
                       max_num_batched_tokens=max_num_batched_tokens, state_per_sequence=state)
    limit = max_model_len_limit(cfg)
    longest = max(context, prompt)
    warnings, refused = [], ""
    if limit is not None and longest > limit:
        what = (f"a context of {longest:,} tokens exceeds {cfg.name}'s {limit:,} positions "
                f"(max_position_embeddings{'' if limit == cfg.max_position_embeddings else ' with its RoPE scaling'})")
        if allow_long_context:
            warnings.append(what + ": planned as asked (VLLM_ALLOW_LONG_MAX_MODEL_LEN=1); the model was not "
                                   "trained for it")
        else:
            refused = what + ("; vLLM refuses max_model_len beyond it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, "
                              "SGLang unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1 (--allow-long-context)")
            warnings.append(refused)
    return MemoryFit(total, weights, kv, act, reserve, per_tok, tp, pp, ep, "; ".join(rules), state,
                     engine=spec, fraction=frac, budget=budget, total_source=source, non_torch=nt.bytes,
                     non_torch_source=nt.source, non_torch_estimated=nt.estimate, cuda_graphs=graphs.bytes,
                     cuda_graphs_source=graphs.source, enforce_eager=enforce_eager, layout=layout, batch=batch,
                     context=context, prompt=prompt, block_size=block_size,
                     max_num_batched_tokens=max_num_batched_tokens, max_model_len_limit=limit, refused=refused,
                     warnings=tuple(warnings))


@functools.lru_cache(maxsize=1024)
def _layer_kinds(cfg: ModelConfig, kv_dtype: str, lo: int, hi: int, head_share: float) -> tuple:
    """``((kind, layers, KV bytes per token per layer on this GPU, window or chunk), ...)`` for
    layers ``lo..hi-1``, one entry per distinct kind (the engines' layer groups)."""
    counts: dict = {}
    for i in range(lo, hi):
        kind = cfg.layer_type(i)
        b = kv_layer_bytes_per_token(cfg, i, kv_dtype) * head_share
        w = (cfg.sliding_window if kind == "sliding_attention" else
             cfg.attention_chunk_size if kind == "chunked_attention" else None)
        counts[(kind, b, w)] = counts.get((kind, b, w), 0) + 1
    return tuple((k, n, b, w) for (k, b, w), n in counts.items())


def _stage_state(cfg: ModelConfig, dtype: str, lo: int, hi: int) -> float:
    """The linear-attention state of one sequence in layers ``lo..hi-1`` (B, all TP ranks)."""
    n_lin = sum(cfg.layer_type(i) == "linear_attention" for i in range(cfg.n_layers))
    if not n_lin:
        return 0.0
    in_stage = sum(cfg.layer_type(i) == "linear_attention" for i in range(lo, hi))
    return state_bytes_per_sequence(cfg, dtype) * in_stage / n_lin
