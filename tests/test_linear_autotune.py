"""How ldf.linear chooses its kernel: the selection rule and the per-shape tuner, tested with
injected timings (no test here times anything; the benchmark measures).  That every candidate
computes F.linear's result: tests/test_model.py."""
import math
import types

import pytest
import torch
import torch.nn.functional as F

import llm_dataflow as ldf
from llm_dataflow import linear_kernels as M

KERNELS = ldf.LINEAR_KERNELS
R = M.LINEAR_TUNE_ROUNDS


@pytest.fixture(autouse=True)
def fresh_choices(monkeypatch):
    """Every test starts with no choice made and no kernel forced by the environment."""
    monkeypatch.delenv("LDF_LINEAR", raising=False)
    ldf.reset_linear_choice()
    yield
    ldf.reset_linear_choice()


def rounds_of(per_round):
    """R rounds from a function of the round index returning {kernel: seconds}."""
    return [per_round(r) for r in range(R)]


# --- the rule ---------------------------------------------------------------------------------
def test_a_tie_or_a_win_inside_the_margin_goes_to_f_linear():
    choice, ratios = ldf.choose_linear_kernel(rounds_of(lambda r: {"F.linear": 1.0, "split": 1.0, "one-thread": 2.0}))
    assert choice == "F.linear" and ratios == {"F.linear": 1.0, "one-thread": 2.0, "split": 1.0}
    choice, ratios = ldf.choose_linear_kernel(rounds_of(lambda r: {"F.linear": 1.0, "split": 0.96, "one-thread": 2.0}))
    assert choice == "F.linear" and ratios["split"] == pytest.approx(0.96)
    choice, _ = ldf.choose_linear_kernel(rounds_of(lambda r: {"F.linear": 1.0, "split": 0.94, "one-thread": 2.0}))
    assert choice == "split"


def test_the_clearly_fastest_kernel_wins():
    # AMD-like: F.linear on one core, the split ~2× faster; the fastest of two winners is taken
    choice, ratios = ldf.choose_linear_kernel(rounds_of(lambda r: {"F.linear": 2.0, "split": 1.0, "one-thread": 1.9}))
    assert choice == "split" and ratios["split"] == pytest.approx(0.5) and ratios["one-thread"] == pytest.approx(0.95)


def test_a_transient_load_does_not_fool_the_choice():
    # Intel-like: the split is 2× slower.  A burst in 3 of 7 rounds slows F.linear 5× (its threads
    # waited for a busy core): those rounds favour the split, the median of the ratios does not.
    def intel(r):
        slow = 5.0 if r in (1, 2, 4) else 1.0
        return {"F.linear": 1.0 * slow, "split": 2.0, "one-thread": 2.0}
    assert ldf.choose_linear_kernel(rounds_of(intel))[0] == "F.linear"

    # AMD-like: the split is truly faster; a burst that slows it 4× in 3 rounds does not hide it
    def amd(r):
        return {"F.linear": 2.0, "split": 1.0 * (4.0 if r in (0, 3, 6) else 1.0), "one-thread": 2.0}
    assert ldf.choose_linear_kernel(rounds_of(amd))[0] == "split"


def test_ratios_are_paired_within_a_round_so_drift_cancels():
    # the machine's bandwidth halves after round 3 (a neighbour started streaming): every kernel
    # takes 2× longer, the paired ratios stay exactly what they were
    def drift(r):
        s = 2.0 if r > 3 else 1.0
        return {"F.linear": 1.0 * s, "split": 0.8 * s, "one-thread": 1.5 * s}
    choice, ratios = ldf.choose_linear_kernel(rounds_of(drift))
    assert choice == "split"
    assert ratios["split"] == pytest.approx(0.8) and ratios["one-thread"] == pytest.approx(1.5)


def test_never_a_kernel_more_than_5_percent_slower_than_f_linear():
    """The rule never picks a kernel whose true time is ≥ 1.05× F.linear's, under 2 % jitter plus
    bursts of up to 10× on random kernels in up to 3 of the 7 rounds (seeded, 2,000 trials)."""
    g = torch.Generator().manual_seed(0)

    def u(lo, hi):
        return lo + (hi - lo) * torch.rand((), generator=g).item()

    for _ in range(2000):
        true = {"F.linear": 1.0, "split": u(1.05, 3.0), "one-thread": u(1.05, 3.0)}
        burst_rounds = torch.randperm(R, generator=g)[: int(torch.randint(0, 4, (), generator=g))].tolist()
        rounds = []
        for r in range(R):
            times = {k: t * math.exp(0.02 * torch.randn((), generator=g).item()) for k, t in true.items()}
            if r in burst_rounds:
                k = KERNELS[int(torch.randint(0, len(KERNELS), (), generator=g))]
                times[k] *= u(1.0, 10.0)
            rounds.append(times)
        assert ldf.choose_linear_kernel(rounds)[0] == "F.linear"


def test_choose_linear_kernel_rejects_bad_input():
    good = {"F.linear": 1.0, "split": 1.0}
    with pytest.raises(ValueError, match="rounds is empty"):
        ldf.choose_linear_kernel([])
    with pytest.raises(ValueError, match="reference='F.linear'"):
        ldf.choose_linear_kernel([{"split": 1.0}])
    with pytest.raises(ValueError, match=r"rounds\[1\]"):
        ldf.choose_linear_kernel([good, {"F.linear": 1.0}])
    with pytest.raises(ValueError, match="finite number > 0"):
        ldf.choose_linear_kernel([{"F.linear": 1.0, "split": 0.0}])
    with pytest.raises(ValueError, match="margin"):
        ldf.choose_linear_kernel([good], margin=1.0)


# --- the tuner: interleaved rounds, first back to back, then spaced; the choice follows them ------
def feed_rounds(tuner, times):
    """Run one tuning through ``tuner`` with fixed per-kernel times; return the call order."""
    order = []
    while tuner.choice is None:
        k = tuner.next_kernel()
        order.append(k)
        tuner.record(k, times[k])
    return order


def run_calls(tuner, times, n):
    """``n`` calls with fixed per-kernel times; returns {kernel: calls}."""
    count = dict.fromkeys(KERNELS, 0)
    for _ in range(n):
        k = tuner.next_kernel()
        count[k] += 1
        tuner.record(k, times[k])
    return count


def test_tuner_interleaves_every_kernel_in_rotating_order():
    t = M._LinearTuner()
    order = feed_rounds(t, {"F.linear": 1.0, "one-thread": 1.8, "split": 2.1})
    C = len(KERNELS)
    assert len(order) == R * C
    for r in range(R):
        rnd = order[r * C:(r + 1) * C]
        assert sorted(rnd) == sorted(KERNELS)       # each kernel once per round
        assert rnd[0] == KERNELS[r % C]             # no kernel always goes first
    assert t.choice == "F.linear" and t.n_rounds == R and t.switches == 0
    assert t.ratios["split"] == pytest.approx(2.1)


def test_later_rounds_back_off_to_cost_a_quarter_percent_on_a_steady_machine():
    t = M._LinearTuner()
    times = {"F.linear": 1.0, "one-thread": 2.0, "split": 30.0}   # a loser far slower than the winner
    feed_rounds(t, times)
    lo, hi = M.LINEAR_RECHECK_SPACING
    round_s = sum(times.values())
    spacings = []                                # the spacing after each round that agrees
    while len(spacings) < 7:
        n = t.n_rounds
        run_calls(t, times, 1)
        if t.n_rounds > n:
            spacings.append(t.spacing)
    assert spacings == [2 * lo, 4 * lo, 8 * lo, hi, hi, hi, hi]
    count = run_calls(t, times, 1_000_000)       # steady state: one round per hi × round_s
    extra = count["split"] * (round_s - times["F.linear"])
    assert count["split"] == pytest.approx(1_000_000 / (hi * round_s + len(KERNELS)), abs=1)
    assert extra / (count["F.linear"] * 1.0 + extra) <= 1 / hi
    assert t.choice == "F.linear" and t.switches == 0


def test_the_choice_follows_a_load_that_starts_after_it_was_made():
    t = M._LinearTuner()
    feed_rounds(t, {"F.linear": 1.0, "one-thread": 1.9, "split": 2.0})        # quiet: F.linear
    run_calls(t, {"F.linear": 1.0, "one-thread": 1.9, "split": 2.0}, 100_000)   # backed off to hi
    assert t.spacing == M.LINEAR_RECHECK_SPACING[1]
    busy = {"F.linear": 8.0, "one-thread": 2.0, "split": 12.0}                 # a core kept busy
    before = t.n_rounds
    while t.choice == "F.linear":
        run_calls(t, busy, 1)
        if t.n_rounds == before + 1:
            assert t.spacing == M.LINEAR_RECHECK_SPACING[0]   # a disagreeing round: look again soon
    assert t.n_rounds - before == R // 2 + 1        # the median of the latest 7 flips after 4 rounds
    assert t.choice == "one-thread" and t.switches == 1


def test_a_first_choice_fooled_by_a_load_is_corrected_once_it_is_gone():
    t = M._LinearTuner()
    feed_rounds(t, {"F.linear": 30.0, "one-thread": 1.0, "split": 40.0})      # a burst through all 7
    assert t.choice == "one-thread"
    quiet = {"F.linear": 1.0, "one-thread": 2.0, "split": 2.1}
    run_calls(t, quiet, 20_000)
    assert t.choice == "F.linear" and t.switches == 1 and t.ratios["one-thread"] == pytest.approx(2.0)


# --- ldf.linear end to end, with a fake clock ------------------------------------------------
@pytest.fixture
def fake_clock(monkeypatch):
    """Each kernel 'takes' cost[name] seconds of a fake clock; returns (cost, calls)."""
    clock = types.SimpleNamespace(now=0.0)
    monkeypatch.setattr(M, "time", types.SimpleNamespace(perf_counter=lambda: clock.now))
    cost = {"F.linear": 1.0, "one-thread": 1.6, "split": 0.5}
    calls = []
    for name, fn in list(M._KERNELS.items()):
        def timed(x, w, b, M, P, name=name, fn=fn):
            calls.append(name)
            clock.now += cost[name]
            return fn(x, w, b, M, P)
        monkeypatch.setitem(M._KERNELS, name, timed)
    return cost, calls


def test_linear_times_the_candidates_on_first_use_and_keeps_the_winner(fake_clock):
    cost, calls = fake_clock
    g = torch.Generator().manual_seed(1)
    w = torch.randn(517, 509, generator=g)      # 1.004 MiB (irregular): above LINEAR_TUNE_MIN_BYTES
    b = torch.randn(517, generator=g)
    x = torch.randn(1, 1, 509, generator=g)
    ref = F.linear(x, w, b)
    with ldf.torch_threads(2):
        for i in range(R * len(KERNELS)):
            (c,) = ldf.linear_choice() if i else (None,)
            assert c is None or c.kernel is None   # still timing
            # K = 509 terms summed in another order: rounding differs by more than F.linear's default atol
            torch.testing.assert_close(ldf.linear(x, w, b), ref, rtol=1e-5, atol=1e-4)
        assert sorted(calls) == sorted(KERNELS * R)
        (c,) = ldf.linear_choice()
        assert (c.n_rows, c.n_cols, c.rows, c.threads) == (517, 509, 1, 2)
        assert (c.kernel, c.rounds, c.switches) == ("split", R, 0)
        assert c.ratios == pytest.approx({"F.linear": 1.0, "one-thread": 1.6, "split": 0.5})
        del calls[:]
        for _ in range(5):
            ldf.linear(x, w, b)
        assert calls == ["split"] * 5
        assert torch.get_num_threads() == 2


def test_each_shape_rows_and_thread_count_is_chosen_separately(fake_clock):
    cost, calls = fake_clock
    g = torch.Generator().manual_seed(2)
    w1, w2 = torch.randn(512, 512, generator=g), torch.randn(256, 1024, generator=g)
    with ldf.torch_threads(2):
        for _ in range(R * len(KERNELS)):
            ldf.linear(torch.randn(1, 512, generator=g), w1)
            ldf.linear(torch.randn(3, 512, generator=g), w1)     # M = 3 rows: its own choice
        cost["split"] = 3.0                                        # this shape: the split loses
        for _ in range(R * len(KERNELS)):
            ldf.linear(torch.randn(1, 1024, generator=g), w2)
    with ldf.torch_threads(1):
        ldf.linear(torch.randn(1, 512, generator=g), w1)          # one thread: F.linear, untimed
    with ldf.torch_threads(2):
        ldf.linear(torch.randn(1, 64, generator=g), torch.randn(64, 64, generator=g))  # 16 KiB: untimed
    got = {(c.n_rows, c.n_cols, c.rows, c.threads): c.kernel for c in ldf.linear_choice()}
    assert got == {(256, 1024, 1, 2): "F.linear", (512, 512, 1, 2): "split", (512, 512, 3, 2): "split"}
    ldf.reset_linear_choice()
    assert ldf.linear_choice() == []


def test_a_kernel_can_be_forced_by_the_environment_or_a_context(fake_clock, monkeypatch):
    cost, calls = fake_clock
    g = torch.Generator().manual_seed(3)
    w, x = torch.randn(512, 512, generator=g), torch.randn(1, 512, generator=g)
    with ldf.torch_threads(2):
        monkeypatch.setenv("LDF_LINEAR", "one-thread")
        ldf.linear(x, w)
        with ldf.linear_kernel("split"):            # the context wins over the environment
            ldf.linear(x, w)
            with ldf.linear_kernel("F.linear"):
                ldf.linear(x, w)
            ldf.linear(x, w)
        assert calls == ["one-thread", "split", "F.linear", "split"] and ldf.linear_choice() == []
        with ldf.linear_kernel("auto"):              # measure and choose despite the environment
            ldf.linear(x, w)
        assert [c.kernel for c in ldf.linear_choice()] == [None]
        monkeypatch.setenv("LDF_LINEAR", "fastest")
        del calls[:]
        ldf.linear(x, w)                             # read once: still "one-thread"
        assert calls == ["one-thread"]
        ldf.reset_linear_choice()                    # ... until a reset reads it again
        with pytest.raises(ValueError, match="LDF_LINEAR='fastest'"):
            ldf.linear(x, w)
    with pytest.raises(ValueError, match="name='bmm'"):
        ldf.linear_kernel("bmm")


def test_choices_describe_themselves_with_masked_measured_numbers():
    c = ldf.LinearChoice(5632, 2048, 1, 2, "F.linear", {"F.linear": 1.0, "one-thread": 1.9, "split": 2.05}, 9, 0)
    assert c.describe() == ("W [5632 × 2048], 1 row, 2 threads: F.linear (time ÷ F.linear's: "
                            "one-thread 1.9 × (measured), split 2.05 × (measured))")
    c = ldf.LinearChoice(5632, 2048, 1, 2, "one-thread", {"F.linear": 1.0, "one-thread": 0.5, "split": 2.05}, 30, 2)
    assert c.describe().endswith("split 2.05 × (measured); changed 2× since first chosen)")
    c = ldf.LinearChoice(256, 2048, 3, 2, None, {}, 2, 0)
    assert c.describe() == "W [256 × 2048], 3 rows, 2 threads: still timing"


def test_the_candidates_measured_side_by_side_beside_triad(one_thread):
    fns = ldf.linear_candidates()
    assert list(fns) == list(KERNELS)
    g = torch.Generator().manual_seed(4)
    x, w, b = torch.randn(2, 40, generator=g), torch.randn(37, 40, generator=g), torch.randn(37, generator=g)
    for fn in fns.values():
        torch.testing.assert_close(fn(x, w, b), F.linear(x, w, b))
    bw = ldf.gemv_bandwidths(fns, 33, 16, total_bytes=33 * 16 * 4 * 3, repeat=1)
    assert list(bw) == [*KERNELS, "STREAM triad"] and all(v > 0 for v in bw.values())
    assert ldf.linear_choice() == []        # forced kernels are not timed for a choice
    with pytest.raises(ValueError, match="fns"):
        ldf.gemv_bandwidths({}, 33, 16)


def test_the_decode_timers_warm_up_until_every_projection_has_its_kernel():
    """decode_bandwidth, time_decode_step and time_prefill time the chosen kernels, not the
    candidates taking turns (real clock, but only the count of calls is asserted)."""
    torch.manual_seed(0)
    # 1–2 MiB projections (above LINEAR_TUNE_MIN_BYTES), 2 layers: a second of work on 2 cores
    cfg = ldf.model_config("tiny-llama").replace(d_model=512, n_heads=8, n_kv_heads=8, head_dim=64, d_ff=640,
                                                 vocab_size=640)
    m = ldf.Decoder(cfg)
    with ldf.torch_threads(2):
        ldf.decode_bandwidth(m, cfg, prompt_len=3, n_new=4, repeat=1, peak_bandwidth=1e10)
        decided = {(c.n_rows, c.n_cols): c.kernel for c in ldf.linear_choice() if c.rows == 1}
        assert set(decided) == {(512, 512), (640, 512), (512, 640)} and None not in decided.values()
        ldf.time_decode_step(m, cfg, batch=2, context_len=3, repeat=1)
        ldf.time_prefill(m, cfg, 5, repeat=1)
    assert all(c.kernel is not None for c in ldf.linear_choice() if c.rows in (2, 5))
    assert {c.rows for c in ldf.linear_choice()} == {1, 2, 3, 5}    # 3: decode_bandwidth's prefill
