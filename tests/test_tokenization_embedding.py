"""Chapter 02: real tokenizers, the chat template, ID bytes and the embedding gather."""
import pytest
import torch

import llm_dataflow as ldf


def test_minilm_wordpiece_special_ids():
    tok = ldf.minilm_tokenizer()
    enc = tok.encode("The KV cache grows.")
    assert enc.tokens[0] == "[CLS]" and enc.tokens[-1] == "[SEP]"
    assert enc.ids[0] == 101 and enc.ids[-1] == 102 and tok.get_vocab_size() == 30522
    assert len(enc.ids) == 7  # no padding to 128


def test_byte_bpe_roundtrip_and_specials():
    tok = ldf.train_byte_bpe(vocab_size=400)
    assert tok.get_vocab_size() == 400
    for i, s in enumerate(ldf.LLAMA3_SPECIAL_TOKENS):
        assert tok.token_to_id(s) == i
    text = "We hold these truths — naïve 🙂 ünïcödé"
    assert tok.decode(tok.encode(text).ids) == text          # byte-level: nothing is unknown
    assert len(tok.encode("Four score and seven years ago").ids) < len("Four score and seven years ago")
    with pytest.raises(ValueError, match="vocab_size=100"):
        ldf.train_byte_bpe(vocab_size=100)
    assert len(ldf.book_corpus().encode()) == 3115


def test_chat_template_exact_string():
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": " Hi! "}]
    text = ldf.render_chat(msgs)
    assert text == ("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                    "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
                    "<|start_header_id|>assistant<|end_header_id|>\n\n")
    tok = ldf.train_byte_bpe()
    _, ids = ldf.encode_chat(tok, msgs)
    assert ids[0] == tok.token_to_id("<|begin_of_text|>") and ids.count(tok.token_to_id("<|eot_id|>")) == 2
    with pytest.raises(ValueError, match="'tool'"):
        ldf.render_chat([{"role": "tool", "content": "x"}])


def test_ids_and_bytes():
    assert ldf.id_bytes(1000, "int32") == 4000 and ldf.id_bytes(1000, "int64") == 8000
    t = ldf.ids_tensor([[1, 2, 3], [4]], "int64")
    assert t.dtype == torch.int64 and t.tolist() == [[1, 2, 3], [4, 0, 0]]
    with pytest.raises(ValueError, match="does not fit int32"):
        ldf.ids_tensor([2**31], "int32")
    with pytest.raises(ValueError, match="dtype='int16'"):
        ldf.id_bytes(3, "int16")


def test_input_small_state_large():
    ids_b, state_b = ldf.input_vs_state(1000, 4096)
    assert ids_b == 1000 * 4 == 4_000                  # ≈ 4 KB of INT32 IDs
    assert state_b == 1000 * 4096 * 2 == 8_192_000     # ≈ 8.2 MB of BF16 hidden states per layer


@pytest.mark.parametrize("B,T,V,D", [(1, 1, 10, 4), (3, 17, 251, 33)])
def test_gather_matches_nn_embedding(B, T, V, D):
    g = torch.Generator().manual_seed(0)
    table = torch.randn(V, D, generator=g)
    ids = torch.randint(0, V, (B, T), generator=g, dtype=torch.int32)
    torch.testing.assert_close(ldf.embedding_gather(ids, table), ldf.embedding_reference(ids, table))
    b = ldf.gather_bytes(ids, table)
    assert b["rows read"] == B * T * D * 4 and b["ids"] == B * T * 4 and b["table"] == V * D * 4
    assert b["unique rows read"] == len(set(ids.flatten().tolist())) * D * 4


def test_gather_bad_ids():
    table = torch.zeros(5, 2)
    with pytest.raises(ValueError, match=r"ids\[0, 0\]=5 is out of vocabulary: token IDs must be in 0\.\.4 \(vocab_size=5\)"):
        ldf.embedding_gather(torch.tensor([[5]]), table)
    with pytest.raises(ValueError, match="ids.dtype"):
        ldf.embedding_gather(torch.tensor([[0.0]]), table)


def test_embedding_calc():
    out = ldf.embedding_calc("Llama-3-8B", 1000, 1)
    assert out["token IDs (bytes)"] == 4000 and out["hidden states per layer (MB)"] == 8.192
    # the share of the table: two significant figures below 10 %, whole numbers above, never "0.00%"
    share = {n: ldf.embedding_calc("Llama-3-8B", n, 1)["table read by the gather"] for n in (1, 128, 1000, 32768)}
    assert share == {1: "0.00078%", 128: "0.10%", 1000: "0.78%", 32768: "26%"}
    assert ldf.embedding_calc("Llama-3-8B", 32768, 64)["table read by the gather"] == "100%"


def test_h2d_on_cpu_is_none():
    assert ldf.host_to_device_seconds(torch.zeros(4), "cpu", pinned=True) is None


def test_ch02_prefill_cell_numbers():
    """Every number of chapter 02's assistant-prefill cell and its paragraph (issue 44, item 5;
    the cell sits in chapter 02, section 3, after the chat-template demo): 53 IDs for the generation prompt, 67 with
    the prefill left open (the same first 53, then 14), 68 closed (the last, 4, is <|eot_id|>),
    and both flags refused.  The flag is transformers' ``continue_final_message`` (PR #33198), also
    a field of vLLM's chat request (``vllm/entrypoints/openai/protocol.py``)."""
    bpe = ldf.train_byte_bpe(vocab_size=512)            # the chapter's tokenizer and messages
    messages = [{"role": "system", "content": "You are concise."},
                {"role": "user", "content": "Why is decode memory-bound?"}]
    _, ids = ldf.encode_chat(bpe, messages)
    prefill = messages + [{"role": "assistant", "content": "Each step reads every weight"}]
    _, open_ids = ldf.encode_chat(bpe, prefill, continue_final_message=True)
    _, closed_ids = ldf.encode_chat(bpe, prefill, add_generation_prompt=False)
    assert (len(ids), len(open_ids), len(closed_ids)) == (53, 67, 68)
    assert open_ids[:53] == ids and len(open_ids) - len(ids) == 14
    assert open_ids[53:] == [41, 69, 405, 490, 73, 84, 335, 402, 87, 309, 316, 93, 327, 331]
    assert closed_ids[:67] == open_ids and closed_ids[-1] == 4 == bpe.token_to_id("<|eot_id|>")
    with pytest.raises(ValueError, match="^continue_final_message and add_generation_prompt=True are not allowed "
                                         "together:"):
        ldf.encode_chat(bpe, prefill, add_generation_prompt=True, continue_final_message=True)
