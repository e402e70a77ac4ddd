"""Chapter 02's prose numbers (issue 48's rewrite, issue 45's errata), each recomputed from the package.

The opening's answers, the PCIe arithmetic worked by hand, the template's overhead, the state's
real bulk (issue 45: weights, the KV cache per layer, each layer's workspace) and the
predict-then-check exercises.  ``tests/test_exercise_answers.py`` pins the older ones.
"""
import json
import pathlib

import llm_dataflow as ldf

NB = pathlib.Path(__file__).resolve().parents[1] / "notebooks" / "02_input_embedding.ipynb"
C8 = ldf.model_config("Llama-3-8B")


def test_opening_and_gather_diagram():
    calc = ldf.embedding_calc("Llama-3-8B", 1000, 1)
    assert ldf.fmt_bytes(ldf.id_bytes(1000, "int32")) == "4.00 KB"
    assert ldf.fmt_bytes(ldf.input_vs_state(1000, C8.d_model)[1]) == "8.19 MB"
    assert ldf.fmt_bytes(C8.vocab_size * C8.d_model * 2) == "1.05 GB" and calc["table read by the gather"] == "0.78%"
    assert calc["state / IDs"] == "2,048×" and C8.d_model // 2 == 2048
    assert ldf.fmt_bytes(C8.d_model * 2) == "8.19 KB"             # one row of the table


def test_template_overhead():
    msgs = [{"role": "system", "content": "You are concise."}, {"role": "user", "content": "Why is decode memory-bound?"}]
    text, ids = ldf.encode_chat(ldf.train_byte_bpe(), msgs)
    assert len("You are concise.") + len("Why is decode memory-bound?") == 43
    assert (len(text.encode()), len(ids)) == (213, 53)


def test_pcie_by_hand():
    ids = ldf.id_bytes(128_000, "int32")
    g5, g4 = (ldf.link(f"PCIe-Gen{g}-x16").bandwidth_per_direction for g in (5, 4))
    assert ids == 512_000 and round(g5 / 1e9) == 63 and round(g4 / 1e9, 1) == 31.5
    assert (round(ids / g5 * 1e6, 1), round(ids / g4 * 1e6, 1)) == (8.1, 16.3)
    assert C8.vocab_size == 128_256 and 524_288 // 4096 == 128    # the gather's tables grow 128-fold


def test_state_bulk():
    n = 1000
    assert ldf.fmt_bytes(ldf.weight_bytes(C8)) == "16.06 GB"
    assert ldf.fmt_bytes(ldf.kv_cache_bytes(C8, n)) == "131.07 MB"
    assert ldf.fmt_bytes(ldf.kv_cache_bytes(C8, n) // C8.n_layers) == "4.10 MB"
    assert round(ldf.activation_bytes(C8, n, logits_rows=1) / 1e6) == 103     # "about 100 MB"
    assert C8.n_heads * n * n * 4 == 128_000_000                              # 128 MB of FP32 scores
    assert round(ldf.weight_bytes(C8) / ldf.id_bytes(n, "int32") / 1e6) == 4  # a four-millionth
    # the figure's range: 1.5 MB (GPT-2-small) to 16.4 MB (Llama-3.1-70B)
    mb = {m: ldf.embedding_calc(m, 1000, 1)["hidden states per layer (MB)"]
          for m in ("GPT-2-small", "Llama-2-7B", "Llama-3-8B", "Llama-3.1-70B", "DeepSeek-V3")}
    assert round(min(mb.values()), 1) == 1.5 and round(max(mb.values()), 1) == 16.4
    assert max(mb, key=mb.get) == "Llama-3.1-70B"


def test_exercise2_predict_then_check():
    wp, bpe = ldf.minilm_tokenizer(), ldf.train_byte_bpe()
    assert wp.encode("government").tokens[1:-1] == ["government"]
    assert wp.encode("unalienable").tokens[1:-1] == ["una", "##lie", "##nable"]
    assert bpe.encode("government").tokens == ["g", "overnment"]
    assert bpe.encode("unalienable").tokens == ["u", "n", "al", "ien", "ab", "le"]
    corpus = ldf.book_corpus()
    assert corpus.lower().count("overnment") == 6 and corpus.count("unalienable") == 1
    assert wp.get_vocab_size() == 30_522


def test_the_prose_states_these_numbers():
    md = " ".join("".join(c["source"]) for c in json.loads(NB.read_text(encoding="utf-8"))["cells"]
                  if c["cell_type"] == "markdown")
    for s in ("4 KB", "8.19 MB", "1.05 GB", "2,048 times", "3,115-byte", "43 bytes", "213 bytes", "53 IDs",
              "128,256", "512,000 B", "63 GB/s", "8.1 µs", "31.5 GB/s", "16.3 µs", "128-fold", "16.06 GB",
              "131 MB", "4.10 MB", "100 MB", "128 MB", "four-millionth", "1.5 MB", "16.4 MB", "0.650", "0.355",
              "0.202", "950", "0.57", "six times", "524,288", "1.07 GB", "30,522"):
        assert s in md, s
