"""Parallel arithmetic: the one TP/PP/EP degree check, layer partitions, pipeline timelines
and the bytes that tensor, expert and context parallelism move (no torch; the ranks that run
these layouts are :mod:`llm_dataflow.parallel`).

Shapes use ``book/notation.md``'s letters (N ranks, S stages, M micro-batches); bytes are B.
"""
from __future__ import annotations

import functools
import math

from .collectives import collective_bytes_per_rank
from .config import MAX_LAYERS, ModelConfig, as_model_config, tensor_specs
from .formats import QuantSpec, as_precision_plan
from .units import dtype_bytes, no_overflow, require_nonnegative, require_positive

__all__ = [
    "check_parallel", "check_quant_shards", "valid_tp_degrees", "check_tp_degree", "check_ep_degree", "layer_partition", "pipeline_schedule", "pipeline_bubble_fraction",
    "MAX_PIPELINE_EVENTS", "tp_bytes_per_token_per_layer", "ep_bytes_per_token",
    "ring_attention_bytes_per_rank", "tensor_shares",
]
# also public, for fit, plan and the parallel runs (not re-exported by ``ldf``): check_degree,
# kv_heads_per_rank


# --- degrees -----------------------------------------------------------------------------------
def check_parallel(cfg, tp: int = 1, pp: int = 1, ep: int = 1) -> None:
    """The one check of tensor-, pipeline- and expert-parallel degrees (used by every function
    and calculator that splits a model).

    * TP must divide ``n_heads`` (each rank runs whole query heads) and the MLP/expert widths
      it splits (``d_ff``, ``moe_d_ff`` unless ``ep > 1`` keeps the experts whole, the shared
      expert's F).  KV heads: TP ≤ ``n_kv_heads``
      must divide them; TP > ``n_kv_heads`` must be a multiple of them, and each rank then holds
      a replica of one KV head (vLLM's rule, ``QKVParallelLinear``).  MLA's latent is shared by
      all heads and replicated on every rank.
    * PP must be ≤ ``n_layers``.
    * EP must divide ``n_routed_experts`` (an MoE only; vLLM also accepts an uneven split, its
      first ranks taking one expert more, which the accounting here does not model) and be a multiple of TP: vLLM's
      expert-parallel group is its TP × DP ranks (``--enable-expert-parallel``: EP size =
      TP size × DP size, attention split TP ways and replicated over the DP groups).

    The quantisation's blocks and groups are checked by :func:`check_quant_shards`.

    Raises:
        ValueError: naming the degree, its value and the field it must fit.
    """
    cfg = as_model_config(cfg)
    for f, v in (("tp", tp), ("pp", pp), ("ep", ep)):
        require_positive(f, v)
    dims = [("n_heads", cfg.n_heads)]
    if not cfg.is_moe or cfg.dense_layers:
        dims.append(("d_ff", cfg.d_ff))
    if cfg.is_moe:
        if ep == 1:                              # under EP each expert stays whole
            dims.append(("moe_d_ff", cfg.moe_d_ff))
        if cfg.n_shared_experts:
            dims.append(("shared_d_ff", cfg.shared_d_ff))
    for name, val in dims:
        if val % tp:
            raise ValueError(f"tensor parallel degree tp={tp} does not divide {name}={val}; "
                             f"allowed: divisors of {name}")
    if not cfg.is_mla:
        kv = cfg.n_kv_heads
        if (tp <= kv and kv % tp) or (tp > kv and tp % kv):
            raise ValueError(f"tensor parallel degree tp={tp} does not fit n_kv_heads={kv}; allowed: a divisor "
                             f"of {kv}, or a multiple of it (each rank then holds a replica of one KV head)")
    if pp > cfg.n_layers:
        raise ValueError(f"pipeline parallel degree pp={pp} is more than n_layers={cfg.n_layers}")
    if ep > 1:
        if not cfg.is_moe:
            raise ValueError(f"expert parallel degree ep={ep} needs an MoE model; {cfg.name} is dense")
        if cfg.n_routed_experts % ep:
            raise ValueError(f"expert parallel degree ep={ep} does not divide n_routed_experts="
                             f"{cfg.n_routed_experts}; allowed: divisors of n_routed_experts (an uneven split, "
                             "which vLLM accepts, is not modelled)")
        if ep % tp:
            raise ValueError(f"expert parallel degree ep={ep} is not a multiple of tp={tp}; allowed: ep = tp × dp "
                             "(vLLM's expert-parallel group is its TP × DP ranks)")


def _shards(cfg: ModelConfig, tp: int, ep: int) -> list:
    """(what, field, width, split axis) of every tensor-parallel split: ``"out"`` for a
    column-parallel layer (its output features split), ``"in"`` for a row-parallel one."""
    out = []
    if cfg.is_mla:
        qk = cfg.qk_nope_head_dim + cfg.qk_rope_head_dim
        out += [("q projection", "n_heads × qk_head_dim", cfg.n_heads * qk, "out"),
                ("kv_b projection", "n_heads × (qk_nope + v)", cfg.n_heads * (cfg.qk_nope_head_dim + cfg.v_head_dim),
                 "out"),
                ("o projection", "n_heads × v_head_dim", cfg.n_heads * cfg.v_head_dim, "in")]
    else:
        out += [("q projection", "n_heads × head_dim", cfg.n_heads * cfg.head_dim, "out"),
                ("o projection", "n_heads × head_dim", cfg.n_heads * cfg.head_dim, "in")]
        if tp <= cfg.n_kv_heads:
            out.append(("k/v projections", "n_kv_heads × head_dim", cfg.n_kv_heads * cfg.head_dim, "out"))
    if not cfg.is_moe or cfg.dense_layers:
        out += [("MLP gate/up", "d_ff", cfg.d_ff, "out"), ("MLP down", "d_ff", cfg.d_ff, "in")]
    if cfg.is_moe and ep == 1:
        out += [("expert gate/up", "moe_d_ff", cfg.moe_d_ff, "out"), ("expert down", "moe_d_ff", cfg.moe_d_ff, "in")]
    if cfg.n_shared_experts:
        out += [("shared expert gate/up", "shared_d_ff", cfg.shared_d_ff, "out"),
                ("shared expert down", "shared_d_ff", cfg.shared_d_ff, "in")]
    return out


def check_quant_shards(cfg, quant, tp: int = 1, ep: int = 1) -> None:
    """Refuse a TP degree whose shards split a quantisation block or group, as vLLM does.

    * FP8 blocks ``(block_n, block_k)``: every column-parallel shard's output width (each part
      of a merged q/k/v or gate/up weight) must be a multiple of ``block_n``, and under TP a
      row-parallel shard's input width a multiple of ``block_k``.  vLLM
      ``vllm/model_executor/layers/quantization/fp8.py`` (vllm-project/vllm at 0071b24b, read for
      this function): ``Fp8LinearMethod.create_weights`` raises "Weight output_partition_size =
      {n} is not divisible by weight quantization block_n = {block_n}." and "Weight
      input_size_per_partition = {k} is not divisible by weight quantization block_k =
      {block_k}."; ``Fp8MoEMethod.create_weights`` raises "The output_size of gate's and up's
      weight = {n} is not divisible by weight quantization block_n = {block_n}." and, at
      TP > 1, "The input_size of down's weight = {n} is not divisible by
      weight quantization block_k = {block_k}.".  E.g. Qwen3-30B-A3B-FP8 at TP 4: ``moe_d_ff``
      768 / 4 = 192-wide expert shards of 128-wide blocks.
    * Groups along the input (GPTQ, AWQ, compressed-tensors groups, MXFP4's 32, NVFP4's 16): a
      row-parallel shard's input width must be a multiple of the group (vLLM ``gptq.py`` /
      ``awq.py``: "The input size is not aligned with the quantized weight shape. This can be
      caused by too large tensor parallel size.").
    * Under expert parallelism (``ep > 1``) experts are placed whole, so their widths are not
      split (vLLM's fix for such layouts: ``--enable-expert-parallel``).
    * vLLM's MXFP4 MoE kernels pad each GPU's expert shard to their own multiple
      (``engine_changes`` holds ``"mxfp4_moe"``, :data:`~.formats.MXFP4_MOE_BACKENDS`), so routed
      experts are not checked there: gpt-oss-120b at TP 4 (2,880 / 4 = 720, padded to 768 by
      Marlin) loads 17.2217 GiB per A100 in dennislee22/vLLM-benchmarking's vLLM 0.10.1.1 log.

    Layers the checkpoint keeps in high precision are split like any BF16 layer and not checked
    (approximate: the check is per kind of layer, e.g. all experts, not per module name).

    Raises:
        ValueError: naming the layer, the field, the shard width, the block or group and the rule.
    """
    cfg = as_model_config(cfg)
    require_positive("tp", tp)
    require_positive("ep", ep)
    if quant is not None and not isinstance(quant, QuantSpec):
        raise ValueError(f"quant={quant!r} is not allowed; give a QuantSpec or None")
    if quant is None or tp == 1:              # an unsplit checkpoint holds whole blocks by construction
        return
    if quant.block_shape is not None:
        need = {"out": quant.block_shape[0], "in": quant.block_shape[1]}
        unit = f"{quant.block_shape[0]}×{quant.block_shape[1]} {quant.weight_dtype} block"
        rule = ("vLLM's rule (fp8.py, create_weights): each shard holds whole blocks, or it refuses with "
                "'... is not divisible by weight quantization block_n' (block_k for row-parallel shards)")
    elif quant.group_size is not None:
        need = {"in": quant.group_size}
        unit = f"{quant.weight_dtype} group of {quant.group_size} inputs"
        rule = ("vLLM gptq.py/awq.py: a row-parallel shard must hold whole groups (The input size is not aligned "
                "with the quantized weight shape)")
    else:
        return
    padded = "mxfp4_moe" in quant.engine_changes or quant.expert_padding is not None
    for what, field, width, axis in _shards(cfg, tp, ep):
        n = need.get(axis)
        if n is None or width % tp or (padded and what.startswith("expert")):
            continue
        shard = width // tp
        if shard % n:
            raise ValueError(
                f"tensor parallel degree tp={tp} splits the {what} ({field}={width}) into {shard}-wide shards, "
                f"not a multiple of the weight format's {unit} ({n}); {rule}. Allowed: a tp whose shards are "
                f"multiples of {n}" + (", or ep > 1 so that experts stay whole" if "expert" in what else ""))


def valid_tp_degrees(cfg, max_degree: int = 64) -> list[int]:
    """Every TP degree ≤ ``max_degree`` that :func:`check_parallel` accepts (calculators offer
    only these), ascending.  Only divisors of ``n_heads`` can pass, so the candidates are those
    (found in √n_heads steps, however large ``max_degree`` is).

    Raises:
        ValueError: bad ``cfg``, ``max_degree`` not a non-negative integer.
    """
    cfg = as_model_config(cfg)
    require_nonnegative("max_degree", max_degree)
    h = cfg.n_heads
    small = [d for d in range(1, math.isqrt(h) + 1) if h % d == 0]
    divisors = sorted(set(small) | {h // d for d in small})
    out = []
    for t in (d for d in divisors if d <= max_degree):
        try:
            check_parallel(cfg, tp=t)
        except ValueError:
            continue
        out.append(t)
    return out


def kv_heads_per_rank(cfg: ModelConfig, tp: int) -> float:
    """Fraction of one sequence's KV a TP rank stores: ``max(n_kv_heads/tp, 1)/n_kv_heads``
    (replicated heads when tp > n_kv_heads); 1 for MLA (latent replicated)."""
    if cfg.is_mla:
        return 1.0
    return max(cfg.n_kv_heads // tp, 1) / cfg.n_kv_heads


@functools.lru_cache(maxsize=256)
def _shares(cfg: ModelConfig, tp: int, ep: int) -> tuple:
    kv = kv_heads_per_rank(cfg, tp)
    out = []
    for t in tensor_specs(cfg):
        if (t.role in ("norm", "router", "position_embedding") or (t.role == "bias" and t.shape[0] == cfg.d_model)
                or "shared_expert_gate" in t.name):
            out.append(1.0)                      # replicated (vLLM: nn.Embedding wpe, the 1 × D gate)
        elif not cfg.is_mla and any(k in t.name for k in ("k_proj", "v_proj")):
            out.append(kv)                       # whole (possibly replicated) KV heads
        elif cfg.is_mla and ("kv_a_proj" in t.name or "q_a_proj" in t.name):
            out.append(1.0)                      # vLLM's fused_qkv_a_proj: disable_tp=True
        elif t.role == "expert" and ep > 1:
            out.append(1.0 / ep)                 # E/ep whole experts per GPU
        else:
            out.append(1.0 / tp)                 # column/row-parallel, vocab-parallel tables
    return tuple(out)


def tensor_shares(cfg, tp: int = 1, ep: int = 1) -> tuple[float, ...]:
    """The share of each tensor of :func:`~llm_dataflow.core.config.tensor_specs` (same order)
    that one GPU of a ``tp``-way tensor-parallel, ``ep``-way expert-parallel layout holds, and so
    reads in each forward pass: 1 for a replicated tensor, ``1/tp`` for a split one.

    * norms, routers, ``d_model``-wide biases, learned position tables (GPT-2's ``wpe``, an
      ``nn.Embedding`` in vLLM's ``gpt2.py``) and Qwen3-Next's 1 × D ``shared_expert_gate``:
      replicated (1);
    * GQA/MHA ``k_proj``/``v_proj``: whole KV heads, replicated when ``tp > n_kv_heads``
      (:func:`kv_heads_per_rank`);
    * MLA's ``q_a_proj`` and ``kv_a_proj_with_mqa``: replicated (1) — vLLM's
      ``fused_qkv_a_proj`` is a ``MergedColumnParallelLinear`` with ``disable_tp=True``
      (``vllm/model_executor/models/deepseek_v2.py``), SGLang's a ``ReplicatedLinear``;
    * routed experts under ``ep > 1``: ``1/ep`` (``E/ep`` whole experts per GPU);
    * everything else (column/row-parallel projections, experts sliced under TP, vocab-parallel
      embedding and LM head): ``1/tp``.

    The memory fit (:func:`~llm_dataflow.core.fit.memory_fit`), the weight reads of one GPU
    (:func:`~llm_dataflow.core.accounting.weight_bytes_read` with ``tp``/``ep``) and its FLOPs
    (:func:`~llm_dataflow.core.accounting.matmul_params` with ``tp``/``ep``) all use it.

    Raises:
        ValueError: unknown model, a layout :func:`check_parallel` rejects.
    """
    cfg = as_model_config(cfg)
    check_parallel(cfg, tp=tp, ep=ep)
    return _shares(cfg, tp, ep)


def check_degree(cfg: ModelConfig, field: str, value, degree: str) -> None:
    """:func:`~llm_dataflow.core.parallel.check_parallel` of one degree (``"tp"``, ``"pp"`` or ``"ep"``)
    passed as the parameter ``field``; its errors name ``field`` as well as the degree."""
    require_positive(field, value)
    try:
        check_parallel(cfg, **{degree: value})
    except ValueError as err:
        raise ValueError(f"{field}={value!r}: {err}") from None


def tp_bytes_per_token_per_layer(cfg, n_ranks: int, dtype="bf16") -> dict:
    """Tensor-parallel communication per token per layer (Megatron-LM, arXiv:1909.08053 §3).

    Two all-reduces per layer, each of one ``D``-vector per token in the activation dtype:
    ``handed = 2·D·elem`` bytes (what a rank gives ``all_reduce``) and, with ring all-reduce,
    ``sent = 2·2(N−1)/N·D·elem`` bytes leaving each rank.

    Returns:
        ``{"handed": bytes, "sent_per_rank": bytes, "all_reduces": 2}``.

    Raises:
        ValueError: unknown preset or dtype, ``n_ranks`` not a positive integer or a TP degree
            :func:`check_parallel` rejects (the message names ``n_ranks``).
    """
    cfg = as_model_config(cfg)
    check_degree(cfg, "n_ranks", n_ranks, "tp")
    handed = 2 * cfg.d_model * dtype_bytes(as_precision_plan(dtype).activation_dtype)
    return {"handed": handed, "sent_per_rank": 2 * collective_bytes_per_rank("all_reduce", handed / 2, n_ranks),
            "all_reduces": 2}


def ep_bytes_per_token(cfg, n_ranks: int, dtype="bf16") -> dict:
    """Expected expert-parallel traffic per token per MoE layer with uniform routing: each of
    the k slots of a token goes to a remote rank with probability ``(N−1)/N``; dispatch and
    combine each move one ``D``-vector per remote slot (GShard, arXiv:2006.16668 §2).

    Returns ``{"dispatch": k·(N−1)/N·D·elem, "combine": same, "total": 2×}`` (bytes).

    Raises:
        ValueError: dense config, ``n_ranks`` not a positive integer or an EP degree
            :func:`check_parallel` rejects (the message names ``n_ranks``), unknown dtype.
    """
    cfg = as_model_config(cfg)
    check_degree(cfg, "n_ranks", n_ranks, "ep")
    one = cfg.n_experts_per_token * (n_ranks - 1) / n_ranks * cfg.d_model * dtype_bytes(
        as_precision_plan(dtype).activation_dtype)
    return {"dispatch": one, "combine": one, "total": 2 * one}


def check_tp_degree(cfg: ModelConfig, n_ranks: int) -> None:
    """Raise ``ValueError`` unless ``n_ranks`` is a tensor-parallel degree
    :func:`~llm_dataflow.core.parallel.check_parallel` accepts for ``cfg`` (the one degree check).

    Raises:
        ValueError: ``cfg`` neither a ModelConfig nor a preset name; ``n_ranks`` not a positive
            integer or a TP degree ``check_parallel`` rejects (the message names ``n_ranks``,
            the degree ``tp`` and the field it must fit).
    """
    check_degree(as_model_config(cfg), "n_ranks", n_ranks, "tp")


def layer_partition(n_layers: int, n_stages: int) -> list[tuple[int, int]]:
    """Contiguous ``[start, end)`` layer ranges per stage, sizes differing by at most one
    (the first ``n_layers mod n_stages`` stages get the extra layer).

    Raises:
        ValueError: ``n_layers`` not an integer in ``1..MAX_LAYERS`` (1,024,
            :data:`~llm_dataflow.core.config.MAX_LAYERS`, the bound of every ModelConfig), ``n_stages``
            not in ``1..n_layers``.
    """
    require_positive("n_layers", n_layers)
    if n_layers > MAX_LAYERS:
        raise ValueError(f"n_layers={n_layers} is not allowed; at most MAX_LAYERS={MAX_LAYERS}")
    require_positive("n_stages", n_stages)
    if n_stages > n_layers:
        raise ValueError(f"n_stages={n_stages} is more than n_layers={n_layers}; allowed: 1..{n_layers}")
    base, extra = divmod(n_layers, n_stages)
    out, lo = [], 0
    for s in range(n_stages):
        hi = lo + base + (s < extra)
        out.append((lo, hi))
        lo = hi
    return out


#: The most (stage, micro-batch) events :func:`pipeline_schedule` lays out (a timeline figure
#: shows far fewer; GPipe, arXiv:1811.06965, ran up to 32 micro-batches on 8 stages).
MAX_PIPELINE_EVENTS = 2**16


def pipeline_schedule(n_stages: int, n_microbatches: int, t_stage: float = 1.0, t_comm: float = 0.0) -> list[dict]:
    """Analytic GPipe forward timeline: micro-batch m starts on stage s when stage s finished
    m−1 and stage s−1 finished m (plus the send ``t_comm``).

    Returns:
        ``[{"stage", "microbatch", "start", "end"}]`` (s, or units of ``t_stage``).  The last
        event ends at ``(M + S − 1)·t_stage + (S − 1)·t_comm``.

    Raises:
        ValueError: ``n_stages`` or ``n_microbatches`` not a positive integer, ``n_stages`` more
            than :data:`~llm_dataflow.core.config.MAX_LAYERS` (a stage holds at least one layer),
            ``n_stages · n_microbatches`` more than :data:`MAX_PIPELINE_EVENTS` (one event each);
            ``t_stage`` not a positive finite number, ``t_comm`` not a non-negative finite
            number, or an end time that overflows a float.
    """
    require_positive("n_stages", n_stages)
    require_positive("n_microbatches", n_microbatches)
    if n_stages > MAX_LAYERS:
        raise ValueError(f"n_stages={n_stages} is not allowed; at most MAX_LAYERS={MAX_LAYERS} "
                         "(a stage holds at least one layer)")
    if n_stages * n_microbatches > MAX_PIPELINE_EVENTS:
        raise ValueError(f"n_stages={n_stages} × n_microbatches={n_microbatches} is not allowed; at most "
                         f"MAX_PIPELINE_EVENTS={MAX_PIPELINE_EVENTS:,} events")
    require_positive("t_stage", t_stage, integer=False)
    require_nonnegative("t_comm", t_comm, integer=False)
    if not math.isfinite((n_microbatches + n_stages - 1) * t_stage + (n_stages - 1) * t_comm):
        raise ValueError(f"t_stage={t_stage!r}, t_comm={t_comm!r} are not allowed: the timeline's end "
                         "overflows a float")
    end = {}
    ev = []
    for m in range(n_microbatches):
        for s in range(n_stages):
            start = max(end.get((s, m - 1), 0.0), end[(s - 1, m)] + t_comm if s else 0.0)
            end[(s, m)] = start + t_stage
            ev.append({"stage": s, "microbatch": m, "start": start, "end": start + t_stage})
    return ev


def pipeline_bubble_fraction(n_stages: int, n_microbatches: int) -> float:
    """Idle fraction of each stage in a GPipe forward: ``(S − 1) / (M + S − 1)``
    (Huang et al. 2019, arXiv:1811.06965 §2.2).  One request (M = 1) on S stages: ``(S−1)/S``.

    Raises:
        ValueError: non-positive sizes.
    """
    require_positive("n_stages", n_stages)
    require_positive("n_microbatches", n_microbatches)
    return (n_stages - 1) / (n_microbatches + n_stages - 1)


def check_ep_degree(cfg: ModelConfig, n_ranks: int) -> None:
    """Raise ``ValueError`` unless ``n_ranks`` is an expert-parallel degree
    :func:`~llm_dataflow.core.parallel.check_parallel` accepts (an MoE whose E it divides).

    Raises:
        ValueError: ``cfg`` neither a ModelConfig nor a preset name; ``n_ranks`` not a positive
            integer; a dense ``cfg``; an EP degree ``check_parallel`` rejects (the message names
            ``n_ranks`` and ``n_routed_experts``).
    """
    cfg = as_model_config(cfg)
    require_positive("n_ranks", n_ranks)
    if not cfg.is_moe:
        raise ValueError(f"n_routed_experts={cfg.n_routed_experts} (model {cfg.name!r} is dense); "
                         "expert parallelism needs an MoE config")
    check_degree(cfg, "n_ranks", n_ranks, "ep")


@no_overflow('batch', 'seq', 'n_kv_heads', 'head_dim', 'n_ranks')
def ring_attention_bytes_per_rank(batch: int, seq: int, n_kv_heads: int, head_dim: int, n_ranks: int,
                                  dtype: str = "bf16") -> float:
    """Bytes each rank sends in :func:`ring_attention` (per layer): N−1 K/V blocks of
    ``2·B·H_kv·(T/N)·d_h`` elements = ``2·(N−1)/N·B·T·H_kv·d_h·elem`` (Liu et al. 2023,
    arXiv:2310.01889: the block transfer overlaps the block's compute when it is long enough).

    Raises:
        ValueError: non-positive sizes or unknown dtype.
            Counts (``batch``, ``seq``, ``n_kv_heads``, ``head_dim``, ``n_ranks``) so large
            that a result overflows a float: a ValueError naming them.
    """
    for f, v in (("batch", batch), ("seq", seq), ("n_kv_heads", n_kv_heads), ("head_dim", head_dim),
                 ("n_ranks", n_ranks)):
        require_positive(f, v)
    return 2 * (n_ranks - 1) / n_ranks * batch * seq * n_kv_heads * head_dim * dtype_bytes(dtype)
