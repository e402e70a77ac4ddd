"""Many GPUs: tensor, pipeline, expert and context parallelism on real ``torch.distributed`` ranks.

Each form cuts a different axis of the work and pays for it with a different communication
pattern (shapes in ``book/notation.md``: B batch, T sequence, D d_model, H heads, H_kv kv heads,
d_h head_dim, F d_ff, L layers, E experts, k experts per token, N ranks):

* **Tensor parallel** (Megatron-LM, Shoeybi et al. 2019, arXiv:1909.08053 §3): inside each
  layer, the attention heads and the MLP's F columns are split over N ranks.  ``q/k/v_proj``
  and ``gate/up_proj`` are *column-parallel* (each rank computes H/N heads, F/N channels);
  ``o_proj`` and ``down_proj`` are *row-parallel* (each rank multiplies its slice and produces
  a partial sum ``[B, T, D]``), so one all-reduce of ``B·T·D`` elements closes each block:
  two all-reduces per layer.
* **Pipeline parallel** (GPipe, Huang et al. 2019, arXiv:1811.06965): rank s holds a
  contiguous stage of layers and passes the hidden state ``[b, T, D]`` of each micro-batch to
  rank s+1 with ``send``/``recv``.  With S stages and M micro-batches a forward takes
  ``M + S − 1`` stage-slots, of which ``S − 1`` are fill/drain bubble per stage.
* **Expert parallel** (GShard, Lepikhin et al. 2020, arXiv:2006.16668; Switch, Fedus et al.
  2021, arXiv:2101.03961): rank r holds experts ``r·E/N … (r+1)·E/N − 1``; each rank routes its
  own tokens, an all-to-all dispatches every (token, expert) slot to the expert's rank, the
  experts run, a second all-to-all brings the results back, and the k outputs are combined.
* **Context parallel** (ring attention, Liu et al. 2023, arXiv:2310.01889): the sequence is
  split over ranks; each rank keeps its queries and passes its K/V block around the ring,
  merging partial attentions with the online softmax (chapter 06's
  :func:`llm_dataflow.flash.merge_attention_partials`).

The spawn targets ``demo_*`` run each form on the book's tiny presets and are what the notebook,
the tests and ``python -m llm_dataflow.launch`` / ``torchrun`` start.  The arithmetic of these
layouts (the degree checks, layer partitions, pipeline timelines and the bytes each form moves)
is :mod:`llm_dataflow.core.parallel`; this module runs them on ranks and holds chapter 07's
calculator (:func:`parallel_step_time`) and figures.
"""
from __future__ import annotations

import math
import time

import torch
from torch import nn

from .collectives import CommCounter, demo_collectives
from .core.accounting import decode_step_flops, kv_bytes, weight_bytes_read
from .core.collectives import collective_time, p2p_time
from .core.config import ModelConfig, model_config
from .core.fit import memory_fit
from .core.formats import as_precision_plan
from .core.hardware import hardware as _hardware, link as _lk
from .core.kv import kv_token_bytes
from .core.parallel import (check_ep_degree, check_parallel, check_tp_degree, kv_heads_per_rank,
                            layer_partition)
from .core.units import GB, dtype_bytes, no_overflow, require_positive
from .flash import attention_partial, merge_attention_partials
from .launch import rank_device
from .measure import seed_all
from .model import Decoder, KVCache, route

__all__ = [
    "shard_decoder_tp", "tp_forward", "tp_generate", "tp_layer_forward",
    "pipeline_forward", "plot_pipeline_timeline",
    "shard_moe_ep", "ep_moe_forward",
    "ring_attention",
    "parallel_step_time", "plot_topology",
    "demo_tensor_parallel", "demo_pipeline_parallel", "demo_expert_parallel", "demo_context_parallel",
    "demo_all", "build_decoder", "demo_inputs",
]


# --- shared helpers ----------------------------------------------------------------------------
def build_decoder(cfg: ModelConfig | str, seed: int = 0, dtype: torch.dtype = torch.float32, device=None):
    """The single-process :class:`~llm_dataflow.model.Decoder` every rank (and the reference)
    starts from: built on CPU after ``seed_all(seed)`` (so every process gets the same random
    weights), then moved to ``device``."""
    cfg = model_config(cfg) if isinstance(cfg, str) else cfg
    seed_all(seed)
    return Decoder(cfg, dtype=dtype).to(device or "cpu")


def demo_inputs(vocab_size: int, batch: int, seq: int, seed: int = 1) -> torch.Tensor:
    """Seeded token ids ``[B, T]`` (int64) shared by the ranks and the reference.

    Raises:
        ValueError: ``vocab_size``, ``batch`` or ``seq`` not a positive integer, ``seed`` not an
            integer.
    """
    for f, v in (("vocab_size", vocab_size), ("batch", batch), ("seq", seq)):
        require_positive(f, v)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed={seed!r} is not allowed; it must be an integer")
    g = torch.Generator().manual_seed(seed)
    return torch.randint(vocab_size, (batch, seq), generator=g)


# --- tensor parallel ---------------------------------------------------------------------------
def _slice_linear(lin: nn.Linear, dim: int, lo: int, hi: int, keep_bias: bool) -> nn.Linear:
    """A new Linear holding rows (``dim=0``: output features, column-parallel) or columns
    (``dim=1``: input features, row-parallel) ``lo:hi`` of ``lin``.  A row-parallel layer keeps
    its bias on one rank only (``keep_bias``), since the partial outputs are summed."""
    w = lin.weight.detach()
    w = w[lo:hi] if dim == 0 else w[:, lo:hi]
    b = lin.bias
    if b is not None:
        b = b.detach()[lo:hi] if dim == 0 else (b.detach() if keep_bias else torch.zeros_like(b))
    new = type(lin)(w.shape[1], w.shape[0], bias=b is not None, dtype=w.dtype, device=w.device)
    with torch.no_grad():
        new.weight.copy_(w)
        if b is not None:
            new.bias.copy_(b)
    return new.requires_grad_(False)


def _shard_swiglu(mlp, rank: int, n: int) -> None:
    F_ = mlp.gate_proj.out_features
    lo, hi = rank * F_ // n, (rank + 1) * F_ // n
    mlp.gate_proj = _slice_linear(mlp.gate_proj, 0, lo, hi, True)   # column-parallel [F/N, D]
    mlp.up_proj = _slice_linear(mlp.up_proj, 0, lo, hi, True)       # column-parallel [F/N, D]
    mlp.down_proj = _slice_linear(mlp.down_proj, 1, lo, hi, rank == 0)  # row-parallel [D, F/N]


def shard_decoder_tp(decoder, rank: int, n_ranks: int):
    """Cut a full :class:`~llm_dataflow.model.Decoder` down, in place, to rank ``rank``'s tensor-
    parallel shard and return it.

    Per layer: ``q_proj`` keeps heads ``rank·H/N …`` (rows ``[H/N·d_h, D]``), ``k_proj``/``v_proj``
    the matching ``H_kv/N`` KV heads (query head h uses KV head ``h // (H/H_kv)``, so contiguous
    shards stay consistent) — or, when N > H_kv, a replica of the one KV head its query heads use
    (KV head ``rank // (N/H_kv)``; vLLM replicates KV heads the same way), ``o_proj`` the matching input columns ``[D, H/N·d_h]``; the SwiGLU
    MLP (and every MoE expert and the shared expert) keeps F/N channels of ``gate/up_proj``
    (rows) and ``down_proj`` (columns).  Norms, router, embedding and LM head stay replicated.
    Biases of row-parallel layers live on rank 0 only.  Weight bytes per rank for the layers:
    1/N of the full model's.

    Raises:
        ValueError: ``n_ranks`` does not divide a split dimension (:func:`check_tp_degree`) or
            ``rank`` is out of range.
    """
    cfg = decoder.cfg
    check_tp_degree(cfg, n_ranks)
    if cfg.attention_sinks:
        raise ValueError("cfg.attention_sinks=True is not allowed here: this TP split does not shard gpt-oss's "
                         "per-head sinks; allowed: configs without attention sinks")
    if not isinstance(rank, int) or not 0 <= rank < n_ranks:
        raise ValueError(f"rank={rank!r} is not allowed; allowed: 0..{n_ranks - 1}")
    H, Hkv, dh = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    hq = H // n_ranks
    # first KV head of this rank and how many: a contiguous 1/N share, or one replicated head
    k0, hk = (rank * (Hkv // n_ranks), Hkv // n_ranks) if n_ranks <= Hkv else (rank // (n_ranks // Hkv), 1)
    for layer in decoder.model.layers:
        at = layer.self_attn
        at.q_proj = _slice_linear(at.q_proj, 0, rank * hq * dh, (rank + 1) * hq * dh, True)
        at.k_proj = _slice_linear(at.k_proj, 0, k0 * dh, (k0 + hk) * dh, True)
        at.v_proj = _slice_linear(at.v_proj, 0, k0 * dh, (k0 + hk) * dh, True)
        at.o_proj = _slice_linear(at.o_proj, 1, rank * hq * dh, (rank + 1) * hq * dh, rank == 0)
        at.H, at.Hkv = hq, hk
        mlp = layer.mlp
        if hasattr(mlp, "experts"):  # MoE: every expert (and the shared one) split like a SwiGLU
            for ex in mlp.experts:
                _shard_swiglu(ex, rank, n_ranks)
            if mlp.shared_experts is not None:
                _shard_swiglu(mlp.shared_experts, rank, n_ranks)
        else:
            _shard_swiglu(mlp, rank, n_ranks)
    decoder.tp_rank, decoder.tp_size = rank, n_ranks
    # the KV cache of a TP rank holds its H_kv/N heads only (one replicated head when N > H_kv)
    decoder.tp_cfg = cfg.replace(n_heads=hq, n_kv_heads=hk)
    return decoder


def tp_layer_forward(layer, h: torch.Tensor, ctx, comm: CommCounter, cache=None) -> torch.Tensor:
    """One tensor-parallel layer: ``h [B, T, D]`` (replicated) → ``[B, T, D]`` (replicated).

    ``a = h + all_reduce(o_proj_shard(attn_shard(norm(h))))``;
    ``out = a + all_reduce(down_shard(mlp_shard(norm(a))))``: two all-reduces of
    ``B·T·D`` elements, the only communication of the layer.
    """
    a = layer.self_attn(layer.input_layernorm(h), ctx, cache)  # partial sum over this rank's heads
    comm.all_reduce(a)  # B·T·D·elem bytes handed
    h = h + a
    m = layer.mlp(layer.post_attention_layernorm(h))  # partial sum over this rank's F/N channels
    comm.all_reduce(m)
    return h + m


@torch.inference_mode()
def tp_forward(decoder, input_ids: torch.Tensor, comm: CommCounter, cache=None) -> torch.Tensor:
    """Logits ``[B, T, V]`` of a decoder sharded by :func:`shard_decoder_tp` (every rank gets
    the full logits; the LM head is replicated).  ``cache``: a ``KVCache`` built with
    ``decoder.tp_cfg`` (this rank's H_kv/N heads), or ``None``."""
    h, ctx = decoder.prepare(input_ids, cache)
    for layer in decoder.model.layers:
        h = tp_layer_forward(layer, h, ctx, comm, cache)
    if cache is not None:
        cache.advance(ctx.T)
    return decoder.finish(h)


@torch.inference_mode()
def tp_generate(decoder, input_ids: torch.Tensor, max_new_tokens: int, comm: CommCounter) -> dict:
    """Greedy decoding with a tensor-parallel decoder and a per-rank KV cache (H_kv/N heads).

    Returns ``{"tokens": [B, T+max_new_tokens], "decode_handed": bytes handed to all-reduce
    during the decode steps only, "decode_steps": int}``.

    Raises:
        ValueError: ``max_new_tokens`` < 1.
    """
    require_positive("max_new_tokens", max_new_tokens)
    B, T0 = input_ids.shape
    cache = KVCache(decoder.tp_cfg, B, T0 + max_new_tokens, decoder.dtype, decoder.device)
    out = [input_ids]
    nxt = tp_forward(decoder, input_ids, comm, cache)[:, -1].argmax(-1, keepdim=True)
    before = comm.handed["all_reduce"]
    for t in range(max_new_tokens):
        out.append(nxt)
        if t == max_new_tokens - 1:
            break
        nxt = tp_forward(decoder, nxt, comm, cache)[:, -1].argmax(-1, keepdim=True)
    return {"tokens": torch.cat(out, 1), "decode_handed": comm.handed["all_reduce"] - before,
            "decode_steps": max_new_tokens - 1}


# --- pipeline parallel -------------------------------------------------------------------------
@torch.inference_mode()
def pipeline_forward(decoder, input_ids: torch.Tensor, n_microbatches: int, comm: CommCounter,
                     t0: float | None = None) -> dict:
    """GPipe-style forward of one pipeline stage (this rank = stage ``comm.rank`` of
    ``comm.world_size``) over ``n_microbatches`` slices of the batch.

    Stage 0 embeds; every stage runs its layers (:func:`layer_partition`); stage s sends the
    hidden state ``[b, T, D]`` of each micro-batch to stage s+1 (``send``) and stage s+1
    ``recv``s it, so stage s computes micro-batch m+1 while stage s+1 computes m; the last stage applies the final norm
    and LM head.  Every stage calls ``decoder.prepare`` for the positions and masks (its
    embedding output is used by stage 0 only).

    Returns:
        ``{"logits": [B, T, V] on the last stage (None elsewhere), "events": [{"stage",
        "microbatch", "start", "end"} (s, relative to t0)], "layers": (start, end)}``.

    Raises:
        ValueError: ``n_microbatches`` not in ``1..B``.
    """
    B, T = input_ids.shape
    if not isinstance(n_microbatches, int) or not 1 <= n_microbatches <= B:
        raise ValueError(f"n_microbatches={n_microbatches!r} is not allowed; allowed: 1..B={B}")
    S, s = comm.world_size, comm.rank
    lo, hi = layer_partition(decoder.cfg.n_layers, S)[s]
    t0 = time.perf_counter() if t0 is None else t0
    events, outs = [], []
    for m, mb in enumerate(torch.tensor_split(input_ids, n_microbatches, dim=0)):
        h, ctx = decoder.prepare(mb)
        if s > 0:
            h = torch.empty_like(h)
            comm.recv(h, s - 1)  # b·T·D·elem bytes from the previous stage
        start = time.perf_counter()
        for i in range(lo, hi):
            h = decoder.model.layers[i](h, ctx)
        if s == S - 1:
            outs.append(decoder.finish(h))
        events.append({"stage": s, "microbatch": m, "start": start - t0, "end": time.perf_counter() - t0})
        if s < S - 1:
            # blocking send: returns once stage s+1 has taken the message.  (An ``isend`` left
            # pending would let this stage run ahead, but gloo moves such a message only when
            # its work is waited on, which serialises the pipeline on CPU.)
            comm.send(h.contiguous(), s + 1)  # b·T·D·elem bytes
    return {"logits": torch.cat(outs, 0) if outs else None, "events": events, "layers": (lo, hi)}


def plot_pipeline_timeline(events: list[dict], ax=None, title: str = "", unit: str = "ms", scale: float = 1e3):
    """Gantt chart of pipeline ``events`` (as :func:`pipeline_forward` / :func:`pipeline_schedule`
    return): one row per stage, one coloured bar per micro-batch, numbered where the bar is wide
    enough for its number (at least ~2.5 % of the time span per digit); gaps are bubbles.  Text
    sizes come from the book's style (:func:`llm_dataflow.figures.use_book_style`); without
    ``ax`` the figure is 6.4 in wide.  Returns the matplotlib ``Axes``."""
    import matplotlib.pyplot as plt

    n_stages = 1 + max(e["stage"] for e in events)
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 1.2 + 0.4 * n_stages))
    cmap = plt.get_cmap("tab10")
    span = max(e["end"] for e in events) - min(e["start"] for e in events)
    for e in events:
        ax.barh(e["stage"], (e["end"] - e["start"]) * scale, left=e["start"] * scale, height=0.7,
                color=cmap(e["microbatch"] % 10), edgecolor="black", linewidth=0.5)
        label = str(e["microbatch"])
        # a digit at 11 pt is ~0.1 in: 2.5 % of a >= 4 in wide axes
        if span > 0 and (e["end"] - e["start"]) / span >= 0.025 * len(label):
            ax.text((e["start"] + e["end"]) / 2 * scale, e["stage"], label, ha="center", va="center")
    ax.set_yticks(range(n_stages))
    ax.set_yticklabels([f"stage {s}" for s in range(n_stages)])
    ax.invert_yaxis()
    ax.set_xlabel(f"time ({unit})")
    if title:
        ax.set_title(title)
    return ax


# --- expert parallel ---------------------------------------------------------------------------
def shard_moe_ep(moe, rank: int, n_ranks: int, cfg: ModelConfig | None = None):
    """Keep only experts ``rank·E/N … (rank+1)·E/N − 1`` of an MoE block (the others are
    replaced by ``None`` so their weights are freed); router and shared expert stay replicated.
    Returns the block, with ``ep_rank``/``ep_size`` set.

    Raises:
        ValueError: ``n_ranks`` does not divide E, or ``rank`` out of range.
    """
    E = len(moe.experts)
    if cfg is not None:
        check_ep_degree(cfg, n_ranks)
    elif E % n_ranks:
        raise ValueError(f"expert parallel degree n_ranks={n_ranks} does not divide n_routed_experts={E}")
    if not isinstance(rank, int) or not 0 <= rank < n_ranks:
        raise ValueError(f"rank={rank!r} is not allowed; allowed: 0..{n_ranks - 1}")
    el = E // n_ranks
    moe.local_experts = {e: moe.experts[e] for e in range(rank * el, (rank + 1) * el)}
    moe.n_experts, moe.ep_rank, moe.ep_size = E, rank, n_ranks
    return moe


@torch.inference_mode()
def ep_moe_forward(moe, x: torch.Tensor, comm: CommCounter) -> tuple[torch.Tensor, dict]:
    """Expert-parallel MoE block on this rank's tokens ``x [n, D]`` → ``([n, D], stats)``.

    1. route: top-k experts and weights per token (:func:`llm_dataflow.model.route`);
    2. sort the ``n·k`` (token, expert) slots by expert — experts of rank j are contiguous;
    3. all-to-all the per-expert slot counts (``[N, E/N]`` int64: tiny), then all-to-all the
       token rows ``[n·k, D]`` (dispatch);
    4. run each local expert on the rows it received;
    5. all-to-all the expert outputs back (combine) and sum ``weight·output`` per token
       (plus the shared expert, computed locally).

    ``stats``: ``slots_to_rank`` (list[N], rows this rank dispatched to each rank),
    ``rows_received`` (rows its experts computed), ``dispatch_bytes`` / ``combine_bytes``
    (handed to all-to-all, bytes, including the slice that stays local) and ``remote_bytes``
    (bytes this rank sends to other ranks: dispatch rows for remote experts plus combine rows
    going back to remote tokens).
    """

    import torch.distributed as dist

    N = comm.world_size
    E = moe.n_experts
    el = E // N
    n, D = x.shape
    r = moe.router_module
    idx, w = route(x, r.weight, moe.k, moe.norm_topk_prob, r.bias)      # [n, k] each
    flat = idx.flatten()                                                # slot j = token j // k
    order = flat.argsort(stable=True)                                   # slots grouped by expert
    tok = order // moe.k
    per_expert = torch.bincount(flat, minlength=E)                      # [E] slots per expert
    recv_per_expert = torch.empty_like(per_expert)
    dist.all_to_all_single(recv_per_expert, per_expert)                 # metadata: N·(E/N)·8 bytes
    send_split = per_expert.view(N, el).sum(1).tolist()                 # rows to each rank
    recv_counts = recv_per_expert.view(N, el)                           # [source, local expert]
    recv_split = recv_counts.sum(1).tolist()
    send_x = x[tok]                                                     # [n·k, D]: gather, n·k·D·elem
    recv_x = x.new_empty(sum(recv_split), D)
    comm.all_to_all(recv_x, send_x, recv_split, send_split)             # dispatch
    # rows from source j arrive sorted by local expert: expert id of every received row
    eid = torch.arange(el).repeat(N).repeat_interleave(recv_counts.flatten().cpu()).to(x.device)
    y = torch.empty_like(recv_x)
    for e_local in range(el):
        rows = (eid == e_local).nonzero().squeeze(1)
        if rows.numel():
            y[rows] = moe.local_experts[comm.rank * el + e_local](recv_x[rows])
    back = torch.empty_like(send_x)
    comm.all_to_all(back, y, send_split, recv_split)                    # combine
    out = torch.zeros_like(x)
    out.index_add_(0, tok, back * w.flatten()[order][:, None])          # Σ_k weight·expert output
    if moe.shared_experts is not None:
        out = out + moe.shared_experts(x)
    elem = x.element_size()
    remote = (sum(send_split) - send_split[comm.rank] + sum(recv_split) - recv_split[comm.rank]) * D * elem
    return out, {"slots_to_rank": send_split, "rows_received": int(sum(recv_split)),
                 "dispatch_bytes": int(send_x.numel() * elem), "combine_bytes": int(y.numel() * elem),
                 "remote_bytes": int(remote)}


# --- context parallel --------------------------------------------------------------------------
@torch.inference_mode()
def ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, comm: CommCounter,
                   causal: bool = True) -> torch.Tensor:
    """Exact attention over a sequence split into contiguous chunks, one per rank.

    This rank holds queries and keys/values of its chunk: ``q [B, H, T_r, d_h]``,
    ``k, v [B, H_kv, T_r, d_h]`` (chunks may differ in length; rank r's chunk starts where rank
    r−1's ends).  In N steps every K/V block visits every rank: at each step a rank computes the
    partial attention of its queries over the block it holds (chapter 06's
    :func:`~llm_dataflow.flash.attention_partial` with the block's absolute ``k_offset``),
    merges it into its running ``(o, m, l)`` (:func:`~llm_dataflow.flash.merge_attention_partials`)
    and, meanwhile, passes the block to rank r+1 (``isend``/``irecv`` of one ``[2, B, H_kv, T_j, d_h]``
    tensor).  With ``causal``, blocks that lie wholly in this rank's future are passed on
    without being computed (the source of ring attention's load imbalance; zig-zag sharding
    fixes it).  Source: Liu et al. 2023, arXiv:2310.01889.

    Returns:
        ``[B, H, T_r, d_h]``: this rank's rows of ``softmax(QKᵀ/√d_h) V`` over the full sequence.
    """

    import torch.distributed as dist

    N, r = comm.world_size, comm.rank
    lens = torch.tensor([q.shape[2]], dtype=torch.int64, device=q.device)
    all_lens = torch.empty(N, dtype=torch.int64, device=q.device)
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    gather(all_lens, lens)  # metadata: N·8 bytes, not counted
    sizes = all_lens.tolist()
    offs = [sum(sizes[:j]) for j in range(N)]
    B, Hkv, _, dh = k.shape
    kv = torch.stack([k, v])                              # [2, B, H_kv, T_r, d_h]
    src = r
    o = m = l = None
    q_last = offs[r] + sizes[r] - 1
    for step in range(N):
        if step < N - 1:                                  # start passing the block on first
            nxt_src = (src - 1) % N
            buf = kv.new_empty(2, B, Hkv, sizes[nxt_src], dh)
            reqs = [comm.isend(kv, (r + 1) % N), comm.irecv(buf, (r - 1) % N)]
        if not (causal and offs[src] > q_last):           # skip blocks wholly in the future
            part = attention_partial(q, kv[0], kv[1], causal, q_offset=offs[r], k_offset=offs[src])
            o, m, l = part if o is None else merge_attention_partials(o, m, l, *part)
        if step < N - 1:
            for req in reqs:
                req.wait()
            kv, src = buf, nxt_src
    return o


# --- topology and the communication-vs-compute calculator ---------------------------------------
@no_overflow('batch', 'context')
def parallel_step_time(model: str = "Llama-3.1-70B", hardware: str = "H100-SXM", tp: int = 8, pp: int = 1,
                       link: str = "NVLink4", batch: int = 1, dtype: str = "bf16", pp_link: str | None = None,
                       context: int = 0, algorithm: str = "ring") -> dict:
    """One decode step (one new token for each of ``batch`` sequences at ``context`` cached
    tokens) on ``tp × pp`` GPUs: compute time vs communication time, analytically — a view of
    :mod:`llm_dataflow.core.accounting`.

    Model (all times in s):

    * compute per stage = the roofline of this GPU's share of the step:
      ``max(bytes_gpu/HBM_bw, FLOPs/(tp·pp)/peak)``, where ``bytes_gpu`` is the weights read
      (:func:`~llm_dataflow.core.accounting.weight_bytes_read` — MoE experts the batch is expected to
      touch — over ``tp·pp``) plus this GPU's KV read and write (its stage's layers, its KV heads:
      replicated when ``tp > n_kv_heads``) and FLOPs are
      :func:`~llm_dataflow.core.accounting.decode_step_flops`; at ``tp = pp = 1`` this is exactly
      :func:`~llm_dataflow.core.roofline.decode_step_lower_bound`.  Launch overheads are left out;
    * TP communication per stage = ``2·(L/pp)`` all-reduces of ``B·D·elem`` bytes over ``tp``
      ranks (:func:`~llm_dataflow.core.collectives.collective_time` on ``link`` with ``algorithm``:
      the α–β ring by default, or ``"nvls"``, ``"one_shot"``, ``"two_shot"``); it sits between
      dependent matmuls, so it adds to the step unless other work overlaps it;
    * PP communication = ``pp − 1`` sends of ``B·D·elem`` bytes (:func:`p2p_time`) over
      ``pp_link`` (default: ``link``);
    * a step crosses all ``pp`` stages one after another.

    Overlap needs independent work.  An all-reduce sits between two dependent matmuls of the
    same tokens, so the usual way to hide it is a second micro-batch: split the batch in two,
    and one half computes while the other communicates.  Each half still reads all of this GPU's
    weights, so where reading the weights binds the step, the two halves take about twice the
    compute.  ``step, two micro-batches at best (s)`` is the bound of that schedule, ``max(compute
    of both halves, communication of both halves)`` (``batch ≥ 2``; at batch 1 there is nothing to
    split, and it is the one-batch step): it beats ``step, nothing overlapped`` only once
    compute grows with the batch.  Other ways overlap inside one batch
    (a collective matmul that splits the dependent matmul into chunks; a GEMM that reduces its
    output tiles as they finish); for a latency-bound message they save little, and they are not
    modelled.  At ``batch = 1`` there is no second micro-batch: the communication is counted as
    added to the step.

    Returns:
        dict: ``GPUs``, ``weights per GPU (GB)``, the memory-fit verdict
        (:func:`~llm_dataflow.core.fit.memory_fit`: vLLM's convention at the package's default
        engine version, :data:`~llm_dataflow.core.engines.DEFAULT_ENGINE_VERSIONS`),
        ``all-reduce message (bytes)``, compute / TP / PP / total communication time per step and
        per token (s), ``comm / compute``, ``step, nothing overlapped (s)`` (compute +
        communication), ``step, two micro-batches at best (s)`` (at batch 1, with nothing to
        split, the one-batch step) and a ``verdict``: ``"no communication"``, ``"adds to the step: at batch 1 no second
        micro-batch can hide it"``, ``"two micro-batches could hide it"`` (their bound beats the
        serial step), ``"adds to the step: two micro-batches re-read the weights and take
        longer"`` or ``"communication-bound"`` (``comm / compute ≥ 1``).

    Raises:
        ValueError: unknown preset, a layout :func:`~llm_dataflow.core.parallel.check_parallel`
            rejects, ``batch`` not positive, ``context`` negative.
            Counts (``batch``, ``context``) so large that a result overflows a float: a
            ValueError naming them.
    """
    cfg = model_config(model)
    hw = _hardware(hardware)
    check_parallel(cfg, tp=tp, pp=pp)
    require_positive("batch", batch)
    plan = as_precision_plan(dtype)
    fit = memory_fit(cfg, hw, plan, batch=batch, context=context, tp=tp, pp=pp)
    elem = dtype_bytes(plan.activation_dtype)
    n_gpu = tp * pp
    kv_share = kv_heads_per_rank(cfg, tp) / pp

    def times(b: int) -> tuple[float, float, float]:
        """(compute, TP all-reduces, PP sends) of one step of ``b`` sequences (s)."""
        kv_gpu = (kv_bytes(cfg, context, b, plan) + b * kv_token_bytes(cfg, plan.kv_dtype)) * kv_share
        t_mem = (weight_bytes_read(cfg, plan, b) / n_gpu + kv_gpu) / hw.hbm_bandwidth
        t_flop = decode_step_flops(cfg, b, context) / n_gpu / hw.flops(plan.compute_dtype(hw))
        msg_b = b * cfg.d_model * elem
        t_tp = 2 * cfg.n_layers * collective_time("all_reduce", msg_b, tp, link, algorithm) if tp > 1 else 0.0
        t_pp = (pp - 1) * p2p_time(msg_b, pp_link or link) if pp > 1 else 0.0
        return pp * max(t_mem, t_flop), t_tp, t_pp

    compute, t_tp, t_pp = times(batch)
    msg = batch * cfg.d_model * elem
    comm = t_tp + t_pp
    ratio = comm / compute
    serial = compute + comm
    # Two micro-batches: the GPU computes both halves (each reads every weight of this GPU) and the
    # links carry both halves' messages; neither can go faster than that, whatever the overlap.
    two = serial                          # batch 1: nothing to split, the one-batch step
    if batch > 1:
        halves = [times(h) for h in (batch - batch // 2, batch // 2)]
        two = max(sum(h[0] for h in halves), sum(h[1] + h[2] for h in halves))
    verdict = ("no communication" if comm == 0 else
               "adds to the step: at batch 1 no second micro-batch can hide it" if batch == 1 else
               "communication-bound" if ratio >= 1 else
               "two micro-batches could hide it" if two < serial else
               "adds to the step: two micro-batches re-read the weights and take longer")
    return {
        "GPUs": n_gpu,
        "weights per GPU (GB)": fit.weights / GB,
        "memory per GPU": fit.reason,
        "all-reduce message (bytes)": int(msg),
        "compute per step (s)": compute,
        "TP all-reduce per step (s)": t_tp,
        "PP send per step (s)": t_pp,
        "communication per step (s)": comm,
        "compute per token (s)": compute / batch,
        "communication per token (s)": comm / batch,
        "comm / compute": ratio,
        "step, nothing overlapped (s)": serial,
        "step, two micro-batches at best (s)": two,
        "verdict": verdict,
    }


def plot_topology(ax=None):
    """Figure: two 4-GPU nodes.  Inside a node GPUs talk through NVLink/NVSwitch (or only PCIe);
    across nodes the path is GPU → PCIe switch → NIC → InfiniBand/RoCE fabric → NIC → GPU.
    With GPUDirect RDMA the NIC reads GPU memory directly (green); without it the data bounces
    through a buffer in host memory (red, dashed: two extra PCIe crossings and a staging copy).
    Per-direction bandwidths come from :data:`~llm_dataflow.core.hardware.LINKS`.

    Drawn in inches (data units = inches, equal aspect) for a 6.4 × 4.6 in axes, the size it
    creates without ``ax``; its text sizes come from the book's style
    (:func:`llm_dataflow.figures.use_book_style`).  Returns the Axes."""
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import FancyBboxPatch


    W, H = 6.4, 4.5
    if ax is None:
        fig = plt.figure(figsize=(W, H))
        ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, W)
    ax.set_ylim(0, H)
    ax.set_aspect("equal")
    ax.axis("off")

    def box(x, y, w, h, text, color):
        ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02", fc=color, ec="black", lw=0.8))
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", linespacing=1.1)

    def line(x0, y0, x1, y1, arrow=False, **kw):
        kw = {"color": "gray", "lw": 1.2, **kw}
        if arrow:
            ax.annotate("", xy=(x1, y1), xytext=(x0, y0), arrowprops=dict(arrowstyle="->", **kw))
        else:
            ax.plot([x0, x1], [y0, y1], **kw)

    nv = _lk("NVLink4").bandwidth_per_direction
    pcie = _lk("PCIe-Gen5-x16").bandwidth_per_direction
    ib = _lk("InfiniBand-NDR").bandwidth_per_direction
    node_w, gap = 2.55, 1.2                      # inches: two nodes, the fabric switch between
    y_nic, y_pcie, y_gpu, y_nvs, bh = 0.8, 1.7, 2.55, 3.4, 0.5   # bottom of each row; box height
    gpu_w, slot = 0.5, node_w / 4
    rdma = dict(color="green", lw=2.5)
    bounce = dict(color="red", lw=1.8, ls="--")
    nodes = (0.02, 0.02 + node_w + gap)
    for n, x0 in enumerate(nodes):
        ax.add_patch(FancyBboxPatch((x0, y_nic - 0.15), node_w, 3.75, boxstyle="round,pad=0.02",
                                    fc="#f7f7f7", ec="gray"))
        ax.text(x0 + node_w / 2, 4.18, f"node {n}", ha="center", va="center", weight="bold")
        box(x0 + 0.1, y_nvs, node_w - 0.2, bh, f"NVSwitch (NVLink4)\n{nv / 1e9:.0f} GB/s/dir per GPU", "#cde7c8")
        pcie_mid = [x0 + node_w / 4, x0 + 3 * node_w / 4]
        for g in range(4):
            gx = x0 + g * slot + slot / 2
            box(gx - gpu_w / 2, y_gpu, gpu_w, bh, f"GPU\n{4 * n + g}", "#b9d3ee")
            line(gx, y_gpu + bh, gx, y_nvs, color="tab:purple", lw=2)
            style = rdma if (n, g) == (0, 3) else bounce if (n, g) == (0, 1) else {}
            line(gx, y_gpu, pcie_mid[g // 2], y_pcie + bh, **style)
        nic_side = 1 if n == 0 else 0                 # NICs face the fabric switch
        for p in range(2):
            box(pcie_mid[p] - node_w / 4 + 0.06, y_pcie, node_w / 2 - 0.12, bh,
                f"PCIe switch\n{pcie / 1e9:.0f} GB/s/dir", "#eeeeee")
            style = {} if n else (rdma if p == 1 else bounce)
            line(pcie_mid[p], y_pcie, pcie_mid[p], y_nic + bh, arrow=bool(style), **style)
            box(pcie_mid[p] - node_w / 4 + 0.06, y_nic, node_w / 2 - 0.12, bh,
                "NIC" if p == nic_side else "CPU + host\nmemory", "#fde4b0" if p == nic_side else "#f4cccc")
    # the staging copy: host memory → NIC (node 0)
    line(nodes[0] + node_w / 2 - 0.06, y_nic + 0.12, nodes[0] + node_w / 2 + 0.06, y_nic + 0.12, arrow=True,
         **{**bounce, "ls": "-"})
    sx = nodes[0] + node_w + 0.08
    box(sx, y_nic - 0.15, gap - 0.16, 0.8, f"IB / RoCE\nswitch\n{ib / 1e9:.0f} GB/s/dir", "#fff2cc")
    line(nodes[0] + node_w - 0.06, y_nic + bh / 2, sx, y_nic + bh / 2, color="darkorange", lw=2)
    line(sx + gap - 0.16, y_nic + bh / 2, nodes[1] + 0.06, y_nic + bh / 2, color="darkorange", lw=2)
    ax.legend(handles=[Line2D([], [], label="GPUDirect RDMA path", **rdma),
                       Line2D([], [], label="without it: via host memory", **bounce),
                       Line2D([], [], color="tab:purple", lw=2, label="NVLink"),
                       Line2D([], [], color="darkorange", lw=2, label="network (IB / RoCE)")],
              loc="lower center", bbox_to_anchor=(W / 2, 0.0), bbox_transform=ax.transData, ncol=2,
              frameon=False, borderaxespad=0.0, handlelength=1.8, columnspacing=1.2)
    return ax


# --- spawn targets -----------------------------------------------------------------------------
def demo_tensor_parallel(rank: int, world_size: int, model: str = "tiny-llama", batch: int = 2, seq: int = 11,
                         new_tokens: int = 4, seed: int = 0) -> dict:
    """Spawn target: shard ``model`` (preset name or ModelConfig) over the ranks, run a prefill
    forward and a greedy generation with per-rank KV caches.

    Returns ``{"logits" [B, T, V], "tokens" [B, T+new_tokens], "handed": {op: bytes} of the
    prefill, "decode_handed": bytes, "decode_steps", "layer_param_bytes": this rank's layer
    weights}``.
    """

    dev = rank_device()
    dec = build_decoder(model, seed, device=dev)
    shard_decoder_tp(dec, rank, world_size)
    ids = demo_inputs(dec.cfg.vocab_size, batch, seq).to(dev)
    comm = CommCounter()
    logits = tp_forward(dec, ids, comm)
    handed = dict(comm.handed)
    gen = tp_generate(dec, ids, new_tokens, CommCounter())
    layer_bytes = sum(p.numel() * p.element_size() for p in dec.model.layers.parameters())
    return {"logits": logits, "tokens": gen["tokens"], "handed": handed, "decode_handed": gen["decode_handed"],
            "decode_steps": gen["decode_steps"], "layer_param_bytes": layer_bytes}


def demo_pipeline_parallel(rank: int, world_size: int, model: str | ModelConfig = "tiny-llama", batch: int = 4,
                           seq: int = 9, microbatches=(1, 4), seed: int = 0, repeat: int = 1) -> dict:
    """Spawn target: one pipeline stage per rank; forward the same batch with each number of
    micro-batches in ``microbatches``.  Returns ``{"logits": {M: [B, T, V] (last stage) or
    None}, "events": {M: [...]}, "layers": (start, end), "sent_bytes": int}`` (timings of the
    fastest of ``repeat`` runs, in s after a ``t0`` that rank 0 broadcasts after a barrier:
    ``time.perf_counter`` is the system-wide monotonic clock on Linux, so on one machine the
    ranks' events share one time axis; across machines the axis is only as good as the barrier)."""
    import torch.distributed as dist


    dev = rank_device()
    dec = build_decoder(model, seed, device=dev)
    ids = demo_inputs(dec.cfg.vocab_size, batch, seq).to(dev)
    comm = CommCounter()
    logits, events = {}, {}
    for M in microbatches:
        best = math.inf
        for _ in range(repeat):
            dist.barrier()
            t0 = torch.tensor([time.perf_counter()], dtype=torch.float64, device=dev)
            dist.broadcast(t0, src=0)  # one time origin for every rank (not counted: 8 bytes)
            res = pipeline_forward(dec, ids, M, comm, t0=float(t0.item()))
            span = torch.tensor([max(e["end"] for e in res["events"])], dtype=torch.float64, device=dev)
            dist.all_reduce(span, op=dist.ReduceOp.MAX)  # every rank makes the same choice
            if span.item() < best:  # keep the fastest run: the least disturbed by other processes
                best = span.item()
                logits[M], events[M] = res["logits"], res["events"]
    return {"logits": logits, "events": events, "layers": res["layers"], "sent_bytes": comm.handed.get("send", 0)}


def demo_expert_parallel(rank: int, world_size: int, model: str = "tiny-moe", n_tokens: int = 37,
                         seed: int = 0) -> dict:
    """Spawn target: layer 0's MoE block of ``model`` with experts spread over the ranks; the
    ``n_tokens`` rows of a seeded ``[n_tokens, D]`` input are split over ranks (contiguous,
    ``tensor_split``).  Returns ``{"y": this rank's [n_r, D] output, **stats}`` of
    :func:`ep_moe_forward`."""

    dev = rank_device()
    dec = build_decoder(model, seed, device=dev)
    check_ep_degree(dec.cfg, world_size)
    moe = shard_moe_ep(dec.model.layers[0].mlp, rank, world_size, dec.cfg)
    g = torch.Generator().manual_seed(seed + 7)
    x = torch.randn(n_tokens, dec.cfg.d_model, generator=g).to(dev)
    x_local = torch.tensor_split(x, world_size)[rank]
    y, stats = ep_moe_forward(moe, x_local, CommCounter())
    return {"y": y, **stats}


def demo_context_parallel(rank: int, world_size: int, batch: int = 1, n_heads: int = 4, n_kv_heads: int = 2,
                          seq: int = 37, head_dim: int = 16, causal: bool = True, seed: int = 3) -> dict:
    """Spawn target: ring attention over a seeded ``q [B, H, T, d_h]``, ``k, v [B, H_kv, T, d_h]``
    split along T (``tensor_split``: irregular lengths allowed).  Returns ``{"out": this rank's
    [B, H, T_r, d_h], "sent_bytes": bytes}``."""

    dev = rank_device()
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, n_heads, seq, head_dim, generator=g)
    k = torch.randn(batch, n_kv_heads, seq, head_dim, generator=g)
    v = torch.randn(batch, n_kv_heads, seq, head_dim, generator=g)
    part = [torch.tensor_split(t, world_size, dim=2)[rank].contiguous().to(dev) for t in (q, k, v)]
    comm = CommCounter()
    out = ring_attention(*part, comm, causal=causal)
    return {"out": out, "sent_bytes": comm.handed.get("send", 0)}


def demo_all(rank: int, world_size: int, forms: dict | None = None) -> dict:
    """Spawn target that runs several demos in one set of processes (starting a set of ranks takes
    seconds, most where each rank imports torch afresh: :func:`llm_dataflow.launch.start_method`).
    ``forms``: ``{name: kwargs}`` with names ``"collectives"``, ``"tensor_parallel"``,
    ``"pipeline_parallel"``, ``"expert_parallel"``, ``"context_parallel"``, each optionally
    followed by ``#suffix`` to run a form twice (``"tensor_parallel#moe"``); default: all with
    their defaults.  Returns ``{name: result}``.

    Raises:
        ValueError: an unknown form name.
    """
    table = {"collectives": demo_collectives, "tensor_parallel": demo_tensor_parallel,
             "pipeline_parallel": demo_pipeline_parallel, "expert_parallel": demo_expert_parallel,
             "context_parallel": demo_context_parallel}
    forms = forms if forms is not None else {k: {} for k in table}
    bad = [k for k in forms if k.split("#")[0] not in table]
    if bad:
        raise ValueError(f"forms contains {bad[0]!r}; allowed: {', '.join(table)} (a '#suffix' may "
                         "follow a name to run the same form twice)")
    return {k: table[k.split("#")[0]](rank, world_size, **(kw or {})) for k, kw in forms.items()}
