"""Tests of kv.kv_cache_speedup (chapter 06's measurement): its bookkeeping and input checks.
Timings depend on the machine, so only their structure is tested."""
import pytest
import torch

import llm_dataflow as ldf


def _toy():
    torch.manual_seed(0)
    cfg = ldf.model_config("tiny-llama").replace(max_position_embeddings=64)
    return ldf.Decoder(cfg)


def test_kv_cache_speedup_structure():
    dec = _toy()
    threads = torch.get_num_threads()
    res = ldf.kv_cache_speedup(dec, [5, 17], min_rounds=3, max_rounds=4, time_per_position_s=0.0,
                               show_progress=False)
    assert torch.get_num_threads() == threads                      # restored
    assert [r.position for r in res] == [5, 17]
    for r in res:
        assert r.rounds == 3 and 0 < r.cached_s and 0 < r.recompute_s
        assert r.speedup == pytest.approx(r.recompute_s / r.cached_s)
    # the cache is rolled back after every timed step: a decode from a fresh prefill still matches
    ids = torch.randint(0, dec.cfg.vocab_size, (1, 9))
    with torch.no_grad():
        c = dec.new_cache(1, 9)
        dec(ids[:, :8], c)
        torch.testing.assert_close(dec(ids[:, 8:], c)[:, -1], dec(ids, last_only=True)[:, -1])


@pytest.mark.parametrize("kwargs,field", [
    (dict(positions=[0]), "positions"), (dict(positions=[64]), "positions"), (dict(positions=[2.5]), "positions"),
    (dict(min_rounds=0), "min_rounds"), (dict(max_rounds=2, min_rounds=3), "max_rounds"),
    (dict(time_per_position_s=-1), "time_per_position_s"), (dict(threads=0), "threads"),
])
def test_kv_cache_speedup_bad_input(kwargs, field):
    args = dict(positions=[4])
    args.update(kwargs)
    with pytest.raises(ValueError, match=field):
        ldf.kv_cache_speedup(_toy(), args.pop("positions"), show_progress=False, **args)
