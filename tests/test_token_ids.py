"""Token IDs are checked once, at the boundary, before any embedding gather (issue 44, item 4).

Reference behaviour: vLLM refuses a prompt holding an ID outside the model's vocabulary before
scheduling it — "Token id {id} is out of vocabulary" (vllm-project/vllm, ``InputProcessor.
_validate_model_input``; PR #22471 bounds it by the model's vocab_size, PR #51795 adds negative
IDs) — and SGLang's tokenizer manager has the same check, ``_validate_input_ids_in_vocab``
(negative IDs in sgl-project/sglang PR #15963; a call on every request in PRs #31908 and #35903,
whose description gives the failure below on a GPU).  Without the check the book's decoder fails inside
``nn.Embedding`` with ``IndexError: index out of range in self`` (on a GPU, a device-side assert
that poisons the CUDA context).
"""
import pytest
import torch

import llm_dataflow as ldf
import llm_dataflow.generate as gen_mod
import llm_dataflow.model as model_mod

V = 256  # tiny-llama's vocabulary


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    return ldf.Decoder(ldf.model_config("tiny-llama"))


def test_without_the_check_torch_fails_inside_the_gather(tiny):
    """The failure the check replaces: the issue's inputs reach ``nn.Embedding``."""
    with pytest.raises(IndexError, match="index out of range"):
        tiny.model.embed_tokens(torch.tensor([[1, 2, V]]))
    with pytest.raises(IndexError, match="index out of range"):
        tiny.model.embed_tokens(torch.tensor([[1, 2, -1]]))


BAD = [  # (ids, the message's position and value, how many are outside)
    (torch.tensor([[1, 2, 256]]), "[0, 2]=256", 1),
    (torch.tensor([[5, 6, 7], [8, -1, -1]]), "[1, 1]=-1", 2),                    # a pad ID of -1
    (torch.tensor([[3, 4], [2**31 - 1, 0]], dtype=torch.int32), "[1, 0]=2147483647", 1),
]


@pytest.mark.parametrize("ids,where,count", BAD)
def test_every_decoder_entry_point_names_the_id_its_position_and_v(tiny, ids, where, count):
    entry_points = {
        "forward": lambda: tiny(ids),
        "forward with a cache": lambda: tiny(ids, tiny.new_cache(ids.shape[0], 8)),
        "prepare": lambda: tiny.prepare(ids),
        "generate": lambda: tiny.generate(ids, 2),
        "generate without cache": lambda: tiny.generate(ids, 0, use_cache=False),
        "greedy_decode": lambda: ldf.greedy_decode(tiny, ids, 2),
        "hf_greedy_decode": lambda: ldf.hf_greedy_decode(tiny, tiny.cfg, ids, 2),   # before the HF peer is built
    }
    more = "" if count == 1 else f"; {count} IDs in input_ids are outside it"
    for name, call in entry_points.items():
        with pytest.raises(ValueError) as err:
            call()
        assert str(err.value) == (f"input_ids{where} is out of vocabulary: token IDs must be in 0..{V - 1} "
                                  f"(vocab_size={V}){more}"), name


@pytest.mark.parametrize("ids,where,count", BAD)
def test_gather_and_its_byte_count_refuse_the_same_ids(ids, where, count):
    table = torch.zeros(V, 4)
    more = "" if count == 1 else f"; {count} IDs in ids are outside it"
    for call in (lambda: ldf.embedding_gather(ids, table), lambda: ldf.gather_bytes(ids, table)):
        with pytest.raises(ValueError) as err:
            call()
        assert str(err.value) == f"ids{where} is out of vocabulary: token IDs must be in 0..255 (vocab_size=256){more}"


def test_ids_tensor_checks_ids_and_pad_against_the_vocabulary():
    assert ldf.ids_tensor([[1, 2, 3], [4]], vocab_size=V).tolist() == [[1, 2, 3], [4, 0, 0]]
    with pytest.raises(ValueError, match=r"^ids\[1, 0\]=300 is out of vocabulary"):
        ldf.ids_tensor([[1, 2], [300]], vocab_size=V)
    with pytest.raises(ValueError, match=r"^batch_pad_id\[0\]=256 is out of vocabulary"):
        ldf.ids_tensor([[1, 2], [3]], batch_pad_id=V, vocab_size=V)
    with pytest.raises(ValueError, match=r"ids\[0, 1\]=True is not allowed; a token ID is an integer"):
        ldf.ids_tensor([[1, True]], vocab_size=V)
    with pytest.raises(ValueError, match=r"ids=\[\] is not allowed"):
        ldf.ids_tensor([])
    assert ldf.ids_tensor([[1, 300]]).tolist() == [[1, 300]]     # no vocabulary given: only the dtype's range


def test_check_token_ids_itself():
    ldf.check_token_ids(torch.tensor([[0, V - 1]]), V)              # the bounds are inside
    ldf.check_token_ids(torch.empty(2, 0, dtype=torch.long), V)     # nothing to check
    ldf.check_token_ids([[0, 1], [2]], V)                           # ragged lists
    with pytest.raises(ValueError, match=r"^input_ids\[1, 2\]=999 is out of vocabulary"):
        ldf.check_token_ids([[0, 1], [2, 3, 999]], V)
    with pytest.raises(ValueError, match=r"input_ids.dtype=torch.float32 is not allowed"):
        ldf.check_token_ids(torch.zeros(1, 2), V)
    with pytest.raises(ValueError, match=r"prompt\[2\]=-5 is out of vocabulary.*; 2 IDs in prompt"):
        ldf.check_token_ids([1, 2, -5, 300], V, "prompt")
    with pytest.raises(ValueError, match="vocab_size"):
        ldf.check_token_ids([1], 0)
    with pytest.raises(ValueError, match="give a tensor or a list"):
        ldf.check_token_ids("1 2 3", V)


def test_checked_once_at_the_boundary_not_per_step(tiny, monkeypatch):
    """``generate`` and ``greedy_decode`` check the prompt once; the steps feed back argmax IDs,
    in [0, V) by construction, without a check (and without its host sync on a GPU)."""
    calls = []
    real = ldf.check_token_ids

    def counting(ids, vocab_size, field="input_ids"):
        calls.append(tuple(ids.shape))
        return real(ids, vocab_size, field)

    monkeypatch.setattr(model_mod, "check_token_ids", counting)
    monkeypatch.setattr(gen_mod, "check_token_ids", counting)
    ids = torch.tensor([[1, 2, 3], [4, 5, 6]])
    for run in (lambda: tiny.generate(ids, 6), lambda: tiny.generate(ids, 6, use_cache=False),
                lambda: ldf.greedy_decode(tiny, ids, 6)):
        calls.clear()
        run()
        assert calls == [(2, 3)]
    calls.clear()
    tiny(ids)
    assert calls == [(2, 3)]                     # a plain forward is its own boundary


def test_valid_ids_give_the_same_tokens_as_before(tiny):
    """The check changes nothing for IDs in range: generate's output equals the loop without it."""
    ids = torch.tensor([[0, 255, 17]])
    out = tiny.generate(ids, 4)
    cache = tiny.new_cache(1, 7)
    nxt = tiny(ids, cache, last_only=True, check_ids=False)[:, -1].argmax(-1, keepdim=True)
    toks = [nxt]
    for _ in range(3):
        nxt = tiny(nxt, cache, check_ids=False)[:, -1].argmax(-1, keepdim=True)
        toks.append(nxt)
    assert torch.equal(out, torch.cat([ids] + toks, 1))
