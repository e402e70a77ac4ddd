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
