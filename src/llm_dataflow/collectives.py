"""Collectives on real processes: :class:`CommCounter` wraps ``torch.distributed`` and counts
the bytes each rank hands to it; :func:`ring_all_reduce` is the book's own all-reduce from
``send``/``recv`` (reduce-scatter then all-gather around the ring), so its counted bytes *are*
the wire bytes.  What the collectives cost, as arithmetic (bytes per rank, the α–β time model,
the ``nbytes`` convention), is :mod:`llm_dataflow.core.collectives`.
"""
from __future__ import annotations

import time
from collections import defaultdict

import torch

from .core.collectives import COLLECTIVE_OPS, collective_bytes_per_rank
from .launch import rank_device

__all__ = ["CommCounter", "ring_all_reduce", "demo_collectives"]


class CommCounter:
    """Calls ``torch.distributed`` and counts the bytes this rank hands to it.

    Each method forwards to the ``torch.distributed`` call of the same name and adds the bytes
    of the tensor(s) given to it under ``handed[op]`` (bytes) and ``calls[op]`` (count), using
    the ``nbytes`` convention of this module: all_reduce and broadcast the buffer,
    all_gather the gathered output, reduce_scatter and all_to_all the input, send/recv the
    tensor.  ``wire_bytes()`` turns the handed bytes into the bytes a ring algorithm sends
    (:func:`collective_bytes_per_rank`); for ``send`` the handed bytes *are* the sent bytes.

    Args:
        group: a process group (``None`` = the default group).
    """

    def __init__(self, group=None):
        import torch.distributed as dist

        self.dist, self.group = dist, group
        self.handed: dict[str, int] = defaultdict(int)
        self.calls: dict[str, int] = defaultdict(int)

    @property
    def world_size(self) -> int:
        return self.dist.get_world_size(self.group)

    @property
    def rank(self) -> int:
        return self.dist.get_rank(self.group)

    def _count(self, op: str, t: torch.Tensor) -> None:
        self.handed[op] += t.numel() * t.element_size()
        self.calls[op] += 1

    def reset(self) -> None:
        """Zero the counters."""
        self.handed.clear()
        self.calls.clear()

    def all_reduce(self, t: torch.Tensor, op=None) -> torch.Tensor:
        """In-place sum (or ``op``) over ranks of ``t``; counts ``t.nbytes``."""
        self._count("all_reduce", t)
        self.dist.all_reduce(t, op=op or self.dist.ReduceOp.SUM, group=self.group)
        return t

    def all_gather(self, out: torch.Tensor, shard: torch.Tensor) -> torch.Tensor:
        """``out [N·n, …]`` ← every rank's ``shard [n, …]`` in rank order; counts ``out.nbytes``."""
        self._count("all_gather", out)
        fn = getattr(self.dist, "all_gather_single", None) or self.dist.all_gather_into_tensor
        fn(out, shard, group=self.group)
        return out

    def reduce_scatter(self, out: torch.Tensor, full: torch.Tensor) -> torch.Tensor:
        """``out [n, …]`` ← slice ``rank`` of the sum over ranks of ``full [N·n, …]``;
        counts ``full.nbytes``."""
        self._count("reduce_scatter", full)
        fn = getattr(self.dist, "reduce_scatter_single", None) or self.dist.reduce_scatter_tensor
        fn(out, full, group=self.group)
        return out

    def all_to_all(self, out: torch.Tensor, inp: torch.Tensor, out_splits=None, in_splits=None) -> torch.Tensor:
        """Rank r's slice j of ``inp`` lands as slice r of rank j's ``out`` (rows, optionally
        uneven ``*_splits``); counts ``inp.nbytes``."""
        self._count("all_to_all", inp)
        self.dist.all_to_all_single(out, inp, output_split_sizes=out_splits, input_split_sizes=in_splits,
                                    group=self.group)
        return out

    def broadcast(self, t: torch.Tensor, src: int = 0) -> torch.Tensor:
        """``t`` of rank ``src`` copied to every rank; counts ``t.nbytes``."""
        self._count("broadcast", t)
        self.dist.broadcast(t, src=src, group=self.group)
        return t

    def send(self, t: torch.Tensor, dst: int) -> None:
        """Blocking send to ``dst``; counts ``t.nbytes`` (sent bytes)."""
        self._count("send", t)
        self.dist.send(t, dst=dst, group=self.group)

    def recv(self, t: torch.Tensor, src: int) -> torch.Tensor:
        """Blocking receive into ``t`` from ``src``; counts ``t.nbytes`` (received bytes)."""
        self._count("recv", t)
        self.dist.recv(t, src=src, group=self.group)
        return t

    def isend(self, t: torch.Tensor, dst: int):
        """Non-blocking send (returns a work handle; call ``.wait()``); counts as ``send``."""
        self._count("send", t)
        return self.dist.isend(t, dst=dst, group=self.group)

    def irecv(self, t: torch.Tensor, src: int):
        """Non-blocking receive (returns a work handle); counts as ``recv``."""
        self._count("recv", t)
        return self.dist.irecv(t, src=src, group=self.group)

    def wire_bytes(self) -> dict:
        """Bytes this rank sends per op under the ring model (send: as counted)."""
        N = self.world_size
        out = {}
        for op, b in self.handed.items():
            if op in COLLECTIVE_OPS:
                out[op] = collective_bytes_per_rank(op, b, N)
            elif op == "send":
                out[op] = float(b)
        return out


def ring_all_reduce(t: torch.Tensor, comm: CommCounter | None = None) -> torch.Tensor:
    """Sum ``t`` over all ranks, in place, with the ring algorithm built from send/recv.

    The flattened buffer is cut into N chunks (``torch.tensor_split``: sizes differ by at most
    one element when N does not divide it).  Reduce-scatter: in step s = 0…N−2 rank r sends
    chunk (r−s) mod N to rank r+1 and adds the chunk (r−s−1) mod N it receives from rank r−1;
    after N−1 steps rank r holds the full sum of chunk (r+1) mod N.  All-gather: N−1 more steps
    pass the finished chunks around.  Each rank sends 2(N−1) chunks = 2(N−1)/N · nbytes
    (Patarasuk & Yuan 2009).  Sends are ``isend`` so that the ring cannot deadlock.

    Args:
        t: any shape, the same on every rank (the result overwrites it).
        comm: a :class:`CommCounter` that counts the sent bytes (one is made if ``None``).

    Returns:
        ``t`` (summed).
    """
    comm = comm or CommCounter()
    N, r = comm.world_size, comm.rank
    if N == 1:
        return t
    flat = t.view(-1) if t.is_contiguous() else t.reshape(-1)
    chunks = list(torch.tensor_split(flat, N))  # views into flat
    nxt, prv = (r + 1) % N, (r - 1) % N
    for s in range(N - 1):  # reduce-scatter
        send_c, recv_i = chunks[(r - s) % N], (r - s - 1) % N
        buf = torch.empty_like(chunks[recv_i])
        w = comm.isend(send_c.contiguous(), nxt)
        comm.recv(buf, prv)
        w.wait()
        chunks[recv_i].add_(buf)  # read 2 chunks, write 1
    for s in range(N - 1):  # all-gather: pass the reduced chunk on
        send_c, recv_i = chunks[(r + 1 - s) % N], (r - s) % N
        buf = torch.empty_like(chunks[recv_i])
        w = comm.isend(send_c.contiguous(), nxt)
        comm.recv(buf, prv)
        w.wait()
        chunks[recv_i].copy_(buf)
    if flat.data_ptr() != t.data_ptr():
        t.copy_(flat.view_as(t))
    return t


def demo_collectives(rank: int, world_size: int, numel: int = 1000, sizes=(1 << 10, 1 << 16, 1 << 20),
                     repeat: int = 5) -> dict:
    """Spawn target (see :func:`llm_dataflow.launch.run_distributed`): counted bytes and timings.

    Runs on every rank: (1) each library collective once on an fp32 buffer of ``numel``
    elements, counting handed bytes; (2) :func:`ring_all_reduce` on the same buffer, counting the
    bytes it sends and checking it against ``dist.all_reduce`` (``assert_close``);
    (3) median wall time of ``dist.all_reduce`` for each byte size in ``sizes``.

    Returns:
        ``{"rank", "world_size", "nbytes", "handed": {op: bytes}, "ring_sent": bytes,
        "ring_ok": True, "ring_max_err": float, "times": {nbytes: s}}``.
    """
    import torch.distributed as dist

    dev = rank_device()
    g = torch.Generator().manual_seed(1234 + rank)
    x = torch.randn(numel, generator=g).to(dev)
    N = world_size
    comm = CommCounter()
    y = x.clone()
    comm.all_reduce(y)
    m = -(-numel // N)  # shard rows for the gather/scatter ops (ceil)
    comm.all_gather(torch.empty(N * m, device=dev), x.new_zeros(m))
    comm.reduce_scatter(torch.empty(m, device=dev), x.new_zeros(N * m))
    comm.all_to_all(torch.empty(N * m, device=dev), x.new_zeros(N * m))
    comm.broadcast(x.clone(), src=0)
    handed = dict(comm.handed)
    ring = CommCounter()
    z = x.clone()
    ring_all_reduce(z, ring)
    torch.testing.assert_close(z, y, rtol=1e-5, atol=1e-5)
    times = {}
    for nb in sizes:
        buf = torch.ones(nb // 4, device=dev)
        dist.all_reduce(buf)  # warm-up
        ts = []
        for _ in range(repeat):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(buf)
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            ts.append(time.perf_counter() - t0)
        times[nb] = sorted(ts)[len(ts) // 2]
    return {"rank": rank, "world_size": N, "nbytes": x.numel() * x.element_size(), "handed": handed,
            "ring_sent": ring.handed["send"], "ring_ok": True,
            "ring_max_err": float((z - y).abs().max()), "times": times}
