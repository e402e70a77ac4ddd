"""Collective cost model, the byte-counting wrapper and the book's ring all-reduce."""
import pytest

import llm_dataflow as ldf


@pytest.mark.parametrize("N", [1, 2, 3, 8])
def test_ring_bytes_per_rank(N):
    nb = 1200.0
    f = ldf.collective_bytes_per_rank
    assert f("all_reduce", nb, N) == pytest.approx(2 * (N - 1) / N * nb)
    for op in ("all_gather", "reduce_scatter", "all_to_all"):
        assert f(op, nb, N) == pytest.approx((N - 1) / N * nb)
    assert f("broadcast", nb, N) == (nb if N > 1 else 0.0)
    # all-reduce = reduce-scatter + all-gather (Patarasuk & Yuan 2009)
    assert f("all_reduce", nb, N) == pytest.approx(f("reduce_scatter", nb, N) + f("all_gather", nb, N))


def test_time_model_uses_per_direction_bandwidth():
    nv = ldf.link("NVLink4")
    nb, N = 64e6, 8
    t = ldf.collective_time("all_reduce", nb, N, "NVLink4")
    # 2(N−1) latency terms + 2(N−1)/N·nbytes over 450 GB/s (not the 900 GB/s bidirectional figure)
    assert t == pytest.approx(14 * nv.latency_s + 2 * 7 / 8 * nb / 450e9)
    assert ldf.collective_time("all_gather", nb, N, nv) == pytest.approx(7 * nv.latency_s + 7 / 8 * nb / 450e9)
    assert ldf.p2p_time(1e9, "InfiniBand-NDR") == pytest.approx(5e-6 + 1e9 / 50e9)
    assert ldf.collective_steps("all_reduce", 4) == 6 and ldf.collective_steps("broadcast", 4) == 3
    # a slower link is slower for the same message
    assert ldf.collective_time("all_reduce", nb, N, "PCIe-Gen5-x16") > t


def test_bad_input():
    with pytest.raises(ValueError, match="op='allreduce'"):
        ldf.collective_bytes_per_rank("allreduce", 10, 2)
    with pytest.raises(ValueError, match="n_ranks=0"):
        ldf.collective_bytes_per_rank("all_reduce", 10, 0)
    with pytest.raises(ValueError, match="nbytes=-1"):
        ldf.collective_time("all_reduce", -1, 2)
    with pytest.raises(ValueError, match="link='NVLink9'"):
        ldf.collective_time("all_reduce", 10, 2, "NVLink9")


def test_counted_bytes_and_ring_all_reduce_on_3_ranks():
    numel = 1000  # not divisible by 3: uneven ring chunks of 334, 333, 333 elements
    N = 3
    res = ldf.run_distributed(ldf.demo_collectives, N, numel, (4096,), 1, backend="gloo", timeout_s=180)
    nb = numel * 4
    chunks = [334, 333, 333]
    for r, out in enumerate(res):
        # the ring all-reduce equals dist.all_reduce (assert_close inside every rank)
        assert out["ring_ok"] and out["ring_max_err"] < 1e-5
        assert out["handed"]["all_reduce"] == nb and out["handed"]["broadcast"] == nb
        # rank r sends chunks r, r-1 (reduce-scatter) and r+1, r (all-gather), mod N
        sent = sum(chunks[(r - s) % N] for s in range(N - 1)) + sum(chunks[(r + 1 - s) % N] for s in range(N - 1))
        assert out["ring_sent"] == sent * 4
        assert out["ring_sent"] == pytest.approx(ldf.collective_bytes_per_rank("all_reduce", nb, N), rel=0.01)
        assert out["times"][4096] > 0


def test_all_reduce_algorithms_small_and_large_messages():
    # decode at batch 1: one D-vector of Llama-3.1-70B (8192 x 2 B) over 8 NVLink4 ranks
    msg = 8192 * 2
    steps = {a: ldf.collective_steps("all_reduce", 8, a) for a in ldf.ALL_REDUCE_ALGORITHMS}
    assert steps == {"ring": 14, "tree": 6, "two_shot": 2, "one_shot": 1, "nvls": 2}
    t = {a: ldf.collective_time("all_reduce", msg, 8, "NVLink4", a) for a in ldf.ALL_REDUCE_ALGORITHMS}
    assert round(t["ring"] * 1e6, 1) == 14.1 and round(t["one_shot"] * 1e6, 2) == 1.25
    assert min(t, key=t.get) == "one_shot" and max(t, key=t.get) == "ring"      # the ring overstates it
    assert ldf.collective_bytes_per_rank("all_reduce", msg, 8, "tree") == ldf.collective_bytes_per_rank("all_reduce", msg, 8)
    # a 4096-token prefill (67 MB): bytes dominate; NVLS moves the least, one-shot the most
    big = {a: ldf.collective_time("all_reduce", 4096 * msg, 8, "NVLink4", a) for a in ldf.ALL_REDUCE_ALGORITHMS}
    assert min(big, key=big.get) == "nvls" and max(big, key=big.get) == "one_shot"
    assert ldf.collective_steps("all_reduce", 16, "tree") == 8 and ldf.collective_steps("all_reduce", 1, "tree") == 0
    with pytest.raises(ValueError, match="algorithm"):
        ldf.collective_time("all_gather", msg, 8, "NVLink4", "tree")


def test_ring_across_two_nodes():
    # TP = 16 over two 8-GPU nodes: 2 of the ring's 16 hops cross InfiniBand
    assert ldf.ring_hops(16, 8) == (14, 2) and ldf.ring_hops(8, 8) == (8, 0) and ldf.ring_hops(32, 8) == (28, 4)
    msg = 64 * 8192 * 2                                  # decode, batch 64, Llama-3.1-70B, BF16
    per_rank = ldf.collective_bytes_per_rank("all_reduce", msg, 16)
    ib, nv = ldf.link("InfiniBand-NDR"), ldf.link("NVLink4")
    one = ldf.two_tier_ring_time("all_reduce", msg, 16, 8)
    # the bandwidth term is the slowest hop's; of the 30 steps' chain of latencies, NCCL's model
    # (tuning.cc nInterSteps = 2·nodes for an all-reduce) charges 4 to InfiniBand, 26 to NVLink
    lat = 26 * nv.latency_s + 4 * ib.latency_s
    assert one == pytest.approx(lat + per_rank / ib.bandwidth_per_direction)
    assert one < ldf.collective_time("all_reduce", msg, 16, "InfiniBand-NDR")     # all hops on IB
    # eight rings, one per NIC: the bandwidth term shrinks 8x (still above NVLink's), latency does not
    eight = ldf.two_tier_ring_time("all_reduce", msg, 16, 8, rings=8)
    assert eight == pytest.approx(lat + per_rank / (8 * ib.bandwidth_per_direction))
    # an all-gather's chain crosses the network nodes − 1 times; an all-to-all's every step
    ag = ldf.two_tier_ring_time("all_gather", msg, 16, 8)
    assert ag == pytest.approx(14 * nv.latency_s + 1 * ib.latency_s
                               + ldf.collective_bytes_per_rank("all_gather", msg, 16) / ib.bandwidth_per_direction)
    a2a = ldf.two_tier_ring_time("all_to_all", msg, 16, 8)
    assert a2a == pytest.approx(15 * ib.latency_s
                                + ldf.collective_bytes_per_rank("all_to_all", msg, 16) / ib.bandwidth_per_direction)
    assert 8 * ib.bandwidth_per_direction < nv.bandwidth_per_direction
    assert ldf.two_tier_ring_time("all_reduce", msg, 8, 8) == ldf.collective_time("all_reduce", msg, 8, "NVLink4")
    with pytest.raises(ValueError, match="ranks_per_node"):
        ldf.ring_hops(12, 8)
    with pytest.raises(ValueError, match="rings"):
        ldf.two_tier_ring_time("all_reduce", msg, 16, 8, rings=9)
