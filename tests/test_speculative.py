"""Tests of llm_dataflow.speculative: the Leviathan et al. formula and greedy equivalence."""
import math
import random

import pytest
import torch

import llm_dataflow as ldf


pytestmark = pytest.mark.usefixtures("one_thread")


def test_formula_values_and_limits():
    assert ldf.expected_tokens_per_step(0.0, 4) == 1.0
    assert ldf.expected_tokens_per_step(1.0, 4) == 5.0  # α → 1: γ + 1
    assert ldf.expected_tokens_per_step(0.5, 2) == pytest.approx(1.75)  # 1 + 0.5 + 0.25
    assert ldf.expected_tokens_per_step(1 - 1e-9, 3) == pytest.approx(4.0, rel=1e-6)
    assert ldf.speculative_speedup(0.8, 4, 0.0) == pytest.approx(ldf.expected_tokens_per_step(0.8, 4))
    assert ldf.speculative_speedup(0.0, 3, 0.1) < 1  # nothing accepted: the draft is pure cost
    g, s = ldf.best_gamma(0.8, 0.05)
    assert s == max(ldf.speculative_speedup(0.8, k, 0.05) for k in range(1, 17))


def test_formula_matches_bernoulli_simulation():
    rng = random.Random(0)
    alpha, gamma, n = 0.7, 4, 20000
    total = 0
    for _ in range(n):
        k = 0
        while k < gamma and rng.random() < alpha:
            k += 1
        total += k + 1
    assert total / n == pytest.approx(ldf.expected_tokens_per_step(alpha, gamma), rel=0.02)


@pytest.mark.parametrize("alpha,gamma", [(-0.1, 2), (1.1, 2), (math.nan, 2), (0.5, 0), (0.5, 1.5), (0.5, True)])
def test_bad_input(alpha, gamma):
    with pytest.raises(ValueError):
        ldf.expected_tokens_per_step(alpha, gamma)


def test_bad_generate_input():
    target, draft = ldf.make_speculative_pair(0.0)
    with pytest.raises(ValueError, match="gamma"):
        ldf.speculative_generate(target, draft, torch.zeros(1, 3, dtype=torch.long), 4, gamma=0)
    with pytest.raises(ValueError, match=r"\[1, T\]"):
        ldf.speculative_generate(target, draft, torch.zeros(2, 3, dtype=torch.long), 4)
    with pytest.raises(ValueError, match="cost_ratio"):
        ldf.speculative_speedup(0.5, 2, -1.0)


@pytest.mark.parametrize("noise,gamma", [(0.0, 4), (0.6, 3), (0.6, 1), (3.0, 2)])
def test_speculative_equals_target_greedy(noise, gamma):
    target, draft = ldf.make_speculative_pair(noise, seed=1)
    ids = torch.randint(0, 256, (1, 7), generator=torch.Generator().manual_seed(2))
    out, st = ldf.speculative_generate(target, draft, ids, 25, gamma)
    assert torch.equal(out, target.generate(ids, 25))
    assert all(0 <= n <= gamma for n in st.accepted)
    assert 1 + sum(n + 1 for n in st.accepted) >= 25  # prefill token + n_i + 1 per step
    assert st.target_forwards == st.steps + 1
    assert 0.0 <= st.alpha <= 1.0 and 1.0 <= st.tokens_per_step <= gamma + 1


def test_noise_controls_acceptance():
    ids = torch.randint(0, 256, (1, 7), generator=torch.Generator().manual_seed(3))
    alphas = []
    for noise in (0.0, 3.0):
        target, draft = ldf.make_speculative_pair(noise, seed=0)
        alphas.append(ldf.speculative_generate(target, draft, ids, 20, 3)[1].alpha)
    assert alphas[0] > 0.9 and alphas[1] < alphas[0]


def test_target_contains_draft():
    target, draft = ldf.make_speculative_pair(0.0, seed=4)
    assert target.cfg.name == "tiny-llama" and draft.cfg.name == "tiny-draft"
    ids = torch.randint(0, 256, (1, 16), generator=torch.Generator().manual_seed(5))
    agree = (target(ids).argmax(-1) == draft(ids).argmax(-1)).float().mean()
    assert agree >= 0.9  # equal but for the RMSNorm ε mismatch
    with pytest.raises(ValueError, match="noise"):
        ldf.build_target_from_draft(draft, "tiny-llama", noise=-1.0)
    with pytest.raises(ValueError):
        ldf.build_target_from_draft(target, "tiny-draft")  # target smaller than the draft


def test_accepted_count_pmf_and_positions():
    pmf = ldf.accepted_count_pmf(0.6, 3)
    assert pmf == pytest.approx([0.4, 0.24, 0.144, 0.216]) and sum(pmf) == pytest.approx(1.0)
    # mean of n + 1 under the pmf is the formula
    assert sum((k + 1) * p for k, p in enumerate(pmf)) == pytest.approx(ldf.expected_tokens_per_step(0.6, 3))
    # counts 0, 1, 3, 3 with γ = 3: position 1 tested 4× accepted 3×, 2: 3/2, 3: 2/2
    assert ldf.acceptance_by_position([0, 1, 3, 3], 3) == [(4, 3, 0.75), (3, 2, 2 / 3), (2, 2, 1.0)]
    rng = random.Random(1)  # i.i.d. Bernoulli steps: every position's rate ≈ α
    steps = []
    for _ in range(20000):
        k = 0
        while k < 3 and rng.random() < 0.6:
            k += 1
        steps.append(k)
    assert [r for _, _, r in ldf.acceptance_by_position(steps, 3)] == pytest.approx([0.6] * 3, abs=0.02)
    with pytest.raises(ValueError, match="accepted"):
        ldf.acceptance_by_position([4], 3)
    with pytest.raises(ValueError, match="verify_ratio"):
        ldf.speculative_speedup(0.5, 2, 0.1, verify_ratio=0.0)
    assert ldf.speculative_speedup(0.5, 2, 0.1, 2.0) == pytest.approx(1.75 / 2.2)


def test_timed_loops_parts_never_exceed_the_whole():
    target, draft = ldf.make_speculative_pair(0.3, seed=0)
    ids = torch.randint(0, 256, (1, 8), generator=torch.Generator().manual_seed(4))
    out, plain = ldf.timed_greedy_generate(target, ids, 20)
    assert torch.equal(out, target.generate(ids, 20))                       # the same loop as generate
    assert plain.part_n == {"prefill": 1, "decode": 19}
    assert 0 < plain.forward_s <= plain.wall_s and plain.other_s >= 0
    out, st = ldf.speculative_generate(target, draft, ids, 20, 3)
    sp = st.timing
    assert sp.wall_s == st.wall_s and sp.forward_s <= sp.wall_s
    assert sp.part_n["verify"] == st.steps and sp.part_n["target prefill"] == 1
    assert sp.part_n["draft"] + sp.part_n["draft prefill"] == st.draft_forwards
    tm = ldf.time_speculative(target, draft, ids, 20, 3, repeat=3)
    for t in (tm["plain"], tm["speculative"]):
        assert t.forward_s <= t.wall_s                                       # parts within their whole
    assert tm["speedup"] == tm["plain"].wall_s / tm["speculative"].wall_s
    assert tm["c"] == tm["speculative"].mean_s("draft") / tm["plain"].mean_s("decode") > 0
    assert tm["stats"].timing is tm["speculative"]
    with pytest.raises(ValueError, match="repeat"):
        ldf.time_speculative(target, draft, ids, 20, 3, repeat=0)
    with pytest.raises(ValueError, match="kind"):
        tm["plain"].mean_s("verify")
    with pytest.raises(ValueError, match="max_new_tokens"):
        ldf.time_speculative(target, draft, ids, 1, 3, repeat=1)
