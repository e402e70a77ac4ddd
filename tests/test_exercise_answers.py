"""The numbers stated in the solutions of chapters 00–02 (so none is typed unchecked)."""
import pytest

import llm_dataflow as ldf


def test_ch00_solutions():
    cfg = ldf.model_config("Llama-2-7B")
    by = {r.item: r for r in ldf.request_ledger(cfg, 8192, 128)}
    assert by["KV history read (all steps)"].total == 549_655_674_880
    assert by["weights (once per step)"].total == 1_678_266_318_848
    by512 = {r.item: r for r in ldf.request_ledger(cfg, 512, 128)}
    assert round(by512["KV history read (all steps)"].total / 1e9, 1) == 38.3
    c8 = ldf.model_config("Llama-3-8B")
    kv = ldf.kv_bytes_per_token(c8)
    assert kv == 131_072
    crossing = next(b for b in range(1, 100) if b * 4096 * kv >= ldf.weight_bytes_read(c8, "bf16", b))
    assert crossing == 28 and round(ldf.weight_bytes_read(c8, "bf16", 28) / 1e9, 2) == 15.01
    assert 512 * 512 * 4 * 32 * 32 == 1_073_741_824


def test_ch01_solutions():
    row = ldf.capacity("Llama-3.1-70B", "fp8", "H200")
    assert row["weight bytes"] == 72_673_083_392 and row["GiB (2^30)"] == 67.68
    assert row["share of H200 memory"] == "51.5%"
    assert ldf.capacity("Llama-3.1-70B", "fp8", "H100-SXM")["share of H100-SXM memory"] == "90.8%"
    assert round(72_673_083_392 / 2 / 80e9 * 100, 1) == 45.4
    r = ldf.read_rows_lazily(ldf.minilm_checkpoint(), "encoder.layer.0.attention.self.query.weight", slice(0, 100))
    assert r.bytes_requested == 153_600 and r.byte_range == (48_877_208, 49_030_808) and r.pages_expected == 39
    wb = ldf.weight_bytes(ldf.model_config("Llama-2-7B"), "bf16")
    t = wb / ldf.link("PCIe-Gen4-x16").bandwidth_per_direction
    assert round(t, 3) == 0.428
    # offload streams the layers only: embedding, final norm and head stay resident
    layers = ldf.layer_weight_bytes(ldf.model_config("Llama-2-7B"), "bf16")
    assert layers == wb - 2 * 32000 * 4096 * 2 - 4096 * 2 == 12_952_535_040
    t_layers = layers / ldf.link("PCIe-Gen4-x16").bandwidth_per_direction
    assert round(t_layers, 3) == 0.411 and round(1 / t_layers, 2) == 2.43


def test_ch02_solutions():
    corpus = ldf.book_corpus()
    rates = [round(len(ldf.train_byte_bpe(vocab_size=v).encode(corpus).ids) / len(corpus.encode()), 3)
             for v in (300, 512, 1024)]
    assert rates == [0.650, 0.355, 0.202]
    assert ldf.minilm_tokenizer().encode("self-evident").tokens == ["[CLS]", "self", "-", "evident", "[SEP]"]
    assert ldf.train_byte_bpe().encode("self-evident").tokens == ["se", "l", "f", "-", "e", "vid", "ent"]
    assert len(ldf.train_byte_bpe().encode("The KV cache grows with every token").ids) == 20
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}, {"role": "assistant", "content": "A"}]
    assert ldf.render_chat(msgs, add_generation_prompt=False) == (
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_header_id|>user"
        "<|end_header_id|>\n\nU<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nA<|eot_id|>")
    assert ldf.id_bytes(64 * 2048, "int32") == 524_288
    assert ldf.input_vs_state(64 * 2048, 4096)[1] == 1_073_741_824
