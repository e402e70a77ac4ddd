"""Tests of llm_dataflow.batching: scheduler invariants, equality with solo decoding, metric definitions."""
import pytest
import torch

import llm_dataflow as ldf
from llm_dataflow.batching import Request, ServeResult


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return ldf.Decoder(ldf.model_config("tiny-llama"))


def test_workload_is_seeded_and_validated():
    a, b = ldf.make_workload(10, seed=3), ldf.make_workload(10, seed=3)
    assert [(r.arrival_s, r.output_len, r.prompt.tolist()) for r in a] == \
           [(r.arrival_s, r.output_len, r.prompt.tolist()) for r in b]
    assert all(x.arrival_s < y.arrival_s for x, y in zip(a, a[1:]))
    assert all(4 <= r.prompt_len <= 32 and 2 <= r.output_len <= 32 for r in a)
    with pytest.raises(ValueError, match="prompt_len"):
        ldf.make_workload(3, prompt_len=(5, 2))
    with pytest.raises(ValueError, match="rate_per_s"):
        ldf.make_workload(3, rate_per_s=0)


@pytest.mark.parametrize("serve", [ldf.serve_static, ldf.serve_continuous])
def test_invariants_and_equal_to_solo_decoding(model, serve):
    reqs = ldf.make_workload(14, rate_per_s=400.0, prompt_len=(3, 13), output_len=(1, 11), seed=1)
    res = serve(model, reqs, max_batch=4, clock=ldf.StepCost())
    ldf.check_schedule(res)  # no request lost or duplicated, every token produced once
    assert max(rows for _, rows, _, _ in res.timeline) <= 4
    assert all(useful <= rows for _, rows, useful, _ in res.timeline)
    for r in reqs:  # batching changes when a token is produced, never which token
        solo = model.generate(r.prompt[None], r.output_len)[0, r.prompt_len:].tolist()
        assert res.tokens[r.rid] == solo


def test_static_prefills_the_batch_in_one_padded_forward(model):
    g = torch.Generator().manual_seed(5)
    lens, outs = [3, 7, 2, 5, 4], [4, 1, 6, 3, 2]
    reqs = [Request(i, 0.0, torch.randint(0, 256, (p,), generator=g), n) for i, (p, n) in enumerate(zip(lens, outs))]
    cost = ldf.StepCost(fixed_s=1e-3, per_token_s=1e-4)
    res = ldf.serve_static(model, reqs, max_batch=4, clock=cost)
    ldf.check_schedule(res)
    prefills = [(t, rows) for t, rows, _, kind in res.timeline if kind == "prefill"]
    assert [rows for _, rows in prefills] == [4, 1]  # one prefill forward per batch
    t_pf = cost(4 * 7)  # B·T_max positions: the padded prefill of the first batch
    assert [res.token_times[i][0] for i in range(4)] == [pytest.approx(t_pf)] * 4  # same first-token time
    assert res.token_times[0][1] == pytest.approx(t_pf + cost(4))  # then one decode step of 4 rows
    for r in reqs:  # padding never changes a token
        assert res.tokens[r.rid] == model.generate(r.prompt[None], r.output_len)[0, r.prompt_len:].tolist()


def test_continuous_beats_static_on_the_cost_model(model):
    reqs = ldf.make_workload(16, rate_per_s=300.0, prompt_len=(3, 9), output_len=(1, 20), seed=2)
    m = {f.__name__: ldf.serving_metrics(f(model, reqs, 4, ldf.StepCost())) for f in
         (ldf.serve_static, ldf.serve_continuous)}
    assert m["serve_continuous"]["ttft_s_mean"] < m["serve_static"]["ttft_s_mean"]
    assert m["serve_continuous"]["throughput_tok_s"] > m["serve_static"]["throughput_tok_s"]
    assert m["serve_continuous"]["output_tokens"] == m["serve_static"]["output_tokens"] == \
        sum(r.output_len for r in reqs)


def test_metric_definitions_by_hand():
    reqs = [Request(0, 0.0, torch.tensor([1]), 3), Request(1, 1.0, torch.tensor([1]), 1)]
    res = ServeResult("static", reqs, tokens={0: [5, 6, 7], 1: [9]},
                      token_times={0: [0.5, 1.0, 2.0], 1: [3.0]},
                      events=[(0, 0), (0, 1), (0, 2), (1, 0)], measured=False)
    ldf.check_schedule(res)
    m = ldf.serving_metrics(res)
    assert m["ttft_s"] == [0.5, 2.0]                 # first token − arrival
    assert m["itl_s"] == [0.5, 1.0]                  # gaps between consecutive tokens
    assert m["tpot_s"] == [0.75]                     # (last − first) / (n − 1), n ≥ 2 only
    assert m["e2e_s"] == [2.0, 2.0]
    assert m["throughput_tok_s"] == pytest.approx(4 / 3.0)  # 4 tokens over 0 … 3 s
    assert m["ttft_s_p50"] == 0.5 and m["ttft_s_p99"] == 2.0


def test_check_schedule_catches_violations():
    reqs = [Request(0, 0.0, torch.tensor([1]), 2)]
    dup = ServeResult("x", reqs, tokens={0: [1, 1]}, token_times={0: [0.1, 0.2]}, events=[(0, 0), (0, 0)])
    with pytest.raises(AssertionError, match="twice"):
        ldf.check_schedule(dup)
    lost = ServeResult("x", reqs, tokens={}, token_times={}, events=[])
    with pytest.raises(AssertionError, match="lost"):
        ldf.check_schedule(lost)


def test_bad_scheduler_input(model):
    reqs = ldf.make_workload(2)
    with pytest.raises(ValueError, match="max_batch"):
        ldf.serve_continuous(model, reqs, max_batch=0)
    with pytest.raises(ValueError, match="clock"):
        ldf.serve_static(model, reqs, clock="cpu")
