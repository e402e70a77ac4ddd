"""Collectives and what they cost: bytes per rank, an α–β time model, and a counted ring.

Ring algorithms (Patarasuk & Yuan 2009, "Bandwidth optimal all-reduce algorithms for clusters
of workstations", JPDC 69(2); Thakur, Rabenseifner & Gropp 2005, "Optimization of collective
communication operations in MPICH", IJHPCA 19(1)) move a buffer split into N chunks around a
ring of N ranks; every rank sends and receives at the same time, so each link direction carries
one chunk per step.  NCCL's own test suite normalises measured times with exactly these factors
("bus bandwidth", NVIDIA nccl-tests ``doc/PERFORMANCE.md``: all-reduce 2(N−1)/N, all-gather and
reduce-scatter (N−1)/N, broadcast 1).

What ``nbytes`` means, per op (torch.distributed's names; N = ``n_ranks``):

=================  ==========================================  =============================
op                 ``nbytes`` is …                             bytes one rank sends (ring)
=================  ==========================================  =============================
``all_reduce``     the buffer on each rank (in = out size)     2·(N−1)/N · nbytes
``all_gather``     the gathered *output* (N shards of nbytes/N)  (N−1)/N · nbytes
``reduce_scatter`` the *input* on each rank (output nbytes/N)   (N−1)/N · nbytes
``all_to_all``     each rank's whole send buffer (N slices)     (N−1)/N · nbytes (own slice stays)
``broadcast``      the buffer the root sends                    nbytes (root; pipelined chain)
=================  ==========================================  =============================

The time model is latency + bytes / bandwidth with the **per-direction** bandwidth of the link
(``ldf.link(name).bandwidth_per_direction``; vendors often print the bidirectional total, twice
as large): ``t = steps·α + bytes_per_rank / β``.  ``α`` is the link preset's illustrative
``latency_s``; measure your own.

The ring is one algorithm among several, and for small all-reduces it is the slowest in latency:
``all_reduce`` also takes ``algorithm=`` (:data:`ALL_REDUCE_ALGORITHMS`) — NCCL's double binary
tree (logarithmic latency), the two-shot and one-shot kernels serving engines use for small
tensor-parallel all-reduces over NVLink/NVSwitch, and NVLink SHARP (NVLS), where the switch
reduces.  NCCL chooses per call from the message size, rank count and topology (``NCCL_ALGO``:
Ring, Tree, CollNet, NVLS, NVLSTree, PAT; NCCL User Guide, "Environment Variables").

A ring across nodes streams at the speed of its slowest hop: :func:`ring_hops` counts the hops
that cross the node boundary (2 of 16 for TP = 16 over two 8-GPU nodes) and
:func:`two_tier_ring_time` sets the bandwidth term by the slower link, with ``rings`` parallel
rings sharing the inter-node bandwidth of as many NICs; its latency term charges the network's α
only to the steps whose chain of dependent hops crosses the network (NCCL's own cost model).

On real processes, :class:`llm_dataflow.collectives.CommCounter` counts the bytes each rank
hands to ``torch.distributed``; this module is the arithmetic alone (no torch).
"""
from __future__ import annotations

import math

from .hardware import LinkSpec, as_link
from .units import require_nonnegative, require_positive

__all__ = [
    "COLLECTIVE_OPS", "ALL_REDUCE_ALGORITHMS", "collective_bytes_per_rank", "collective_steps", "collective_time",
    "p2p_time",
    "ring_hops", "two_tier_ring_time",
]

#: The collectives the cost model knows, in torch.distributed's spelling.
COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")
#: All-reduce algorithms the cost model knows (every other op: ``"ring"`` only).
#:
#: * ``"ring"`` — reduce-scatter then all-gather around a ring: ``2(N−1)/N·nbytes`` sent per rank
#:   in ``2(N−1)`` steps (Patarasuk & Yuan 2009).
#: * ``"two_shot"`` — the same bytes, but every rank exchanges with all peers at once over a
#:   full-bandwidth switch (reduce-scatter then all-gather by direct access): 2 steps.
#: * ``"one_shot"`` — every rank reads every peer's whole buffer and reduces locally:
#:   ``(N−1)·nbytes`` per rank in one step — fewer latencies, more bytes (TensorRT-LLM's and
#:   vLLM's custom small-message all-reduce).
#: * ``"nvls"`` — NVLink SHARP on NVSwitch (NCCL's default on H100 NVSwitch systems since 2.17):
#:   the switch reduces, each GPU sends its buffer once and receives the result once —
#:   ``nbytes`` each way per rank, 2 steps — an idealisation (multimem loads and multicast stores
#:   move a little more); NCCL enables it from 2.17 and picks it per message size (NCCL 2.17
#:   release notes; NCCL environment variables, ``NCCL_NVLS_ENABLE``).
#: * ``"tree"`` — NCCL's double binary tree: reduce up and broadcast down two complementary
#:   binary trees, pipelined: ``2⌈log2 N⌉`` steps and the ring's bytes (S. Jeaugey, "Massively
#:   Scale Your Deep Learning Training with NCCL 2.4", NVIDIA Technical Blog 2019: logarithmic
#:   latency at full bandwidth).  The tree spans *nodes*: inside a node each tree is a chain
#:   (NCCL ``src/graph/connect.cc``, ``connectTrees``: depth ``nRanks/nNodes − 1 + log2 nNodes``),
#:   so ``2⌈log2 N⌉`` prices N nodes of one rank each; within one node NCCL pays about the ring's
#:   latencies and picks ring or NVLS instead.
ALL_REDUCE_ALGORITHMS = ("ring", "two_shot", "one_shot", "nvls", "tree")


def _check(op: str, nbytes, n_ranks, algorithm: str = "ring") -> None:
    if op not in COLLECTIVE_OPS:
        raise ValueError(f"op={op!r} is not allowed; allowed: {', '.join(COLLECTIVE_OPS)}")
    require_nonnegative("nbytes", nbytes, integer=False)
    require_positive("n_ranks", n_ranks)
    allowed = ALL_REDUCE_ALGORITHMS if op == "all_reduce" else ("ring",)
    if algorithm not in allowed:
        raise ValueError(f"algorithm={algorithm!r} is not allowed for op={op!r}; allowed: {', '.join(allowed)}")


def collective_bytes_per_rank(op: str, nbytes: float, n_ranks: int, algorithm: str = "ring") -> float:
    """Bytes one rank sends (= receives) in ``algorithm`` (default the ring) of ``op``.

    Args:
        op: one of :data:`COLLECTIVE_OPS`.
        nbytes: the size the table in the module docstring defines for ``op`` (bytes).
        n_ranks: N ≥ 1 (N = 1 sends nothing).
        algorithm: one of :data:`ALL_REDUCE_ALGORITHMS` for ``all_reduce``; ``"ring"`` otherwise.

    Returns:
        all_reduce ``2(N−1)/N·nbytes`` (ring, two-shot, tree), ``(N−1)·nbytes`` (one-shot), ``nbytes``
        (NVLS); all_gather, reduce_scatter, all_to_all ``(N−1)/N·nbytes``; broadcast ``nbytes``
        (N > 1).  Source: Patarasuk & Yuan 2009; nccl-tests ``doc/PERFORMANCE.md`` bus-bandwidth
        factors (which assume the ring: an NVLS all-reduce's "busbw" can exceed the link).

    Raises:
        ValueError: unknown ``op`` or ``algorithm``, ``nbytes`` not a non-negative finite number,
            ``n_ranks`` not a positive integer, or a byte count too large for a float.
    """
    _check(op, nbytes, n_ranks, algorithm)
    try:
        out = _bytes_per_rank(op, nbytes, n_ranks, algorithm)
    except OverflowError:       # (N − 1)·nbytes with N beyond a float's range
        out = math.inf
    if not math.isfinite(out):
        raise ValueError(f"nbytes={nbytes!r} with n_ranks={n_ranks!r} is not allowed: the bytes per rank "
                         "overflow a float")
    return out


def _bytes_per_rank(op: str, nbytes: float, N: int, algorithm: str) -> float:
    if N == 1:
        return 0.0
    if op == "all_reduce" and algorithm == "nvls":
        return float(nbytes)            # to the switch once, the reduced result back once
    if op == "all_reduce" and algorithm == "one_shot":
        return (N - 1) * float(nbytes)  # every peer's whole buffer
    if op == "all_reduce":
        return 2 * (N - 1) / N * nbytes  # reduce-scatter + all-gather, each (N−1) chunks of nbytes/N
    if op == "broadcast":
        return float(nbytes)  # pipelined chain: every rank but the last forwards the whole buffer
    return (N - 1) / N * nbytes  # N−1 chunks of nbytes/N leave each rank


def collective_steps(op: str, n_ranks: int, algorithm: str = "ring") -> int:
    """Messages in sequence (latency terms α): ring all_reduce ``2(N−1)``, tree ``2⌈log2 N⌉``,
    two-shot and NVLS 2, one-shot 1; all_gather, reduce_scatter, all_to_all (pairwise exchange), broadcast (chain)
    ``N−1``.  N = 1: 0.

    Raises:
        ValueError: unknown ``op`` or ``algorithm``, bad ``n_ranks``.
    """
    _check(op, 0, n_ranks, algorithm)
    if n_ranks == 1:
        return 0
    if op == "all_reduce":
        return {"ring": 2 * (n_ranks - 1), "two_shot": 2, "nvls": 2, "one_shot": 1,
                "tree": 2 * math.ceil(math.log2(n_ranks))}[algorithm]
    return n_ranks - 1


def collective_time(op: str, nbytes: float, n_ranks: int, link: str | LinkSpec = "NVLink4",
                    algorithm: str = "ring") -> float:
    """α–β time (s) of ``op`` with ``algorithm`` when every rank's connection is ``link``.

    ``t = collective_steps(op, N, algorithm)·α + collective_bytes_per_rank(op, nbytes, N,
    algorithm) / β`` with α = ``link.latency_s`` (illustrative, see
    :class:`~llm_dataflow.core.hardware.LinkSpec`) and β = ``link.bandwidth_per_direction`` (B/s): a
    rank sends and receives at once, each on its own direction of the link.  For small messages
    the ring's ``2(N−1)`` latencies dominate and one-shot, two-shot or NVLS all-reduces are
    faster; for large ones NVLS halves the ring's bytes on 8 ranks (1 vs 1.75 × nbytes).

    Raises:
        ValueError: as :func:`collective_bytes_per_rank`, ``link`` neither a link preset name
            nor a LinkSpec, or a time too large for a float.
    """
    lk = as_link(link)
    per_rank = collective_bytes_per_rank(op, nbytes, n_ranks, algorithm)
    try:
        t = collective_steps(op, n_ranks, algorithm) * lk.latency_s + per_rank / lk.bandwidth_per_direction
    except OverflowError:       # 2(N − 1) steps with N beyond a float's range
        t = math.inf
    if not math.isfinite(t):
        raise ValueError(f"n_ranks={n_ranks!r} is not allowed: the time overflows a float")
    return t


def ring_hops(n_ranks: int, ranks_per_node: int) -> tuple[int, int]:
    """``(intra-node hops, inter-node hops)`` of a ring over ``n_ranks`` laid out node by node.

    A ring over ``n = n_ranks / ranks_per_node`` nodes leaves each node once and enters it once:
    ``n`` of its ``n_ranks`` hops cross the network (none for one node) — TP = 16 over two
    8-GPU nodes has 14 NVLink hops and 2 network hops.

    Raises:
        ValueError: non-positive counts, or ``ranks_per_node`` not dividing ``n_ranks``.
    """
    require_positive("n_ranks", n_ranks)
    require_positive("ranks_per_node", ranks_per_node)
    if n_ranks % ranks_per_node:
        raise ValueError(f"ranks_per_node={ranks_per_node} does not divide n_ranks={n_ranks}")
    nodes = n_ranks // ranks_per_node
    inter = nodes if nodes > 1 else 0
    return n_ranks - inter, inter


def two_tier_ring_time(op: str, nbytes: float, n_ranks: int, ranks_per_node: int,
                       intra_link: str | LinkSpec = "NVLink4", inter_link: str | LinkSpec = "InfiniBand-NDR",
                       rings: int = 1) -> float:
    """α–β time (s) of ring ``op`` over nodes of ``ranks_per_node`` GPUs: ``intra_link`` inside a
    node, ``inter_link`` between nodes.

    Every hop of the ring streams at once, so the bandwidth term is set by the slower link,
    although only :func:`ring_hops` ``[1]`` of the ``n_ranks`` hops cross the network.  The
    latency is a chain: a rank's step waits for its predecessor's previous step, not for every
    hop of the ring, so the ``steps`` α's in a row cross the network only a few times — NCCL's
    tuning model (NVIDIA/nccl ``src/graph/tuning.cc``, ``nInterSteps``) charged the network's α
    to ``2·nodes`` of an all-reduce's steps up to NCCL 2.23.3 (``2·(nodes − 1)`` from 2.23.4,
    commit 68b54236; this function keeps the older count), ``nodes − 1`` of an all-gather's or
    reduce-scatter's and ``nodes`` of a broadcast's, and the intra-node α to the rest; an
    all-to-all's pairwise exchange has pairs across the network in every step, which pays the
    larger α each time.  ``rings`` parallel rings (NCCL's channels), each leaving the node
    through its own NIC, carry ``1/rings`` of the buffer each, which divides the network's share
    of the bandwidth term by ``rings``; each GPU's NVLink still carries its whole share, and the
    latency term is not divided:

    ``t = (steps − s_inter)·α_intra + s_inter·α_inter + B·max(1/β_intra, 1/(rings·β_inter))``,
    B = :func:`collective_bytes_per_rank` (ring), ``s_inter`` the network steps above.  One node:
    exactly :func:`collective_time` on ``intra_link``.  ``rings`` may not exceed ``ranks_per_node`` (an HGX/DGX H100 node has one
    400 Gb/s NIC per GPU, eight per node: NVIDIA DGX H100 User Guide).

    Raises:
        ValueError: as :func:`ring_hops` and :func:`collective_time`; ``rings`` not in
            1 … ``ranks_per_node``; ``intra_link`` or ``inter_link`` neither a link preset name
            nor a LinkSpec (the message names which).
    """
    _, inter = ring_hops(n_ranks, ranks_per_node)
    require_positive("rings", rings)
    if rings > ranks_per_node:
        raise ValueError(f"rings={rings} is not allowed; at most ranks_per_node={ranks_per_node} "
                         "(one NIC per GPU)")
    a, b = as_link(intra_link, "intra_link"), as_link(inter_link, "inter_link")
    if inter == 0:
        return collective_time(op, nbytes, n_ranks, a)
    per_rank = collective_bytes_per_rank(op, nbytes, n_ranks)
    steps, nodes = collective_steps(op, n_ranks), n_ranks // ranks_per_node
    s_inter = min(steps, {"all_reduce": 2 * nodes, "all_gather": nodes - 1, "reduce_scatter": nodes - 1,
                          "broadcast": nodes}.get(op, steps))
    try:
        t = ((steps - s_inter) * a.latency_s + s_inter * b.latency_s
             + per_rank * max(1 / a.bandwidth_per_direction, 1 / (rings * b.bandwidth_per_direction)))
    except OverflowError:
        t = math.inf
    if not math.isfinite(t):
        raise ValueError(f"n_ranks={n_ranks!r} is not allowed: the time overflows a float")
    return t


def p2p_time(nbytes: float, link: str | LinkSpec = "NVLink4") -> float:
    """Time (s) of one point-to-point send of ``nbytes``: ``α + nbytes / β_per_direction``.

    Raises:
        ValueError: ``nbytes`` not a non-negative finite number, ``link`` neither a link preset
            name nor a LinkSpec.
    """
    require_nonnegative("nbytes", nbytes, integer=False)
    lk = as_link(link)
    return lk.latency_s + nbytes / lk.bandwidth_per_direction
