"""Chapter 01's prose, takeaways, diagram and alt text: every number they state, computed by the
package (issue 48: the answer first, the load-path diagram, the arithmetic in the open; issue 45:
DeepSeek-V3's multi-token-prediction layer, MoE expert offload, the narrowest hop, the offload
models of whole forwards).

The quantised-checkpoint table is pinned in tests/test_ch01_ch07_numbers.py, the solutions in
tests/test_exercise_answers.py (test_ch01_solutions, test_ch01_prose_numbers), the offload
models in tests/test_offload.py.

Sources: DeepSeek-V3's checkpoint layout (one MTP module, ``model.layers.61``: an extra decoder
layer, ``enorm``, ``hnorm``, ``eh_proj`` and a ``shared_head`` with its norm and head; 685B on
Hugging Face = 671B main model + 14B MTP) from deepseek-ai/DeepSeek-V3 README_WEIGHTS.md and
README.md at commit 9b4e9788e4a3a731f7567338ed15d3ec549ce03b; vLLM's deepseek_mtp.py
(``_rewrite_spec_layer_name``) loads a ``model.layers.61.embed_tokens`` and ``shared_head`` from
the checkpoint, the copies counted here.  README_WEIGHTS.md's "11.5B unique parameters, excluding the
shared 0.9B Embedding and 0.9B output Head" is the MTP layer alone (11.507 B here).

Marlin on Turing: vllm-project/vllm PR #29901 ("[Kernel][Quantization][MoE] add marlin kernel
support for turing (sm75)", merged) and PR #34319 ("[Doc] Update Marlin support matrix for
Turing"); before it vLLM's Marlin kernels needed compute capability 8.0 (Ampere) or newer.
"""
import json
import pathlib
import re

import pytest

import llm_dataflow as ldf
from llm_dataflow.diagrams.loadpath import LOAD, loadpath_numbers

ROOT = pathlib.Path(__file__).resolve().parents[1]
NB = ROOT / "notebooks" / "01_model_loading.ipynb"
PCIE5 = ldf.link("PCIe-Gen5-x16").bandwidth_per_direction


@pytest.fixture(scope="module")
def markdown():
    cells = json.loads(NB.read_text(encoding="utf-8"))["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


def test_opening_answer_and_diagram():
    c8 = ldf.model_config("Llama-3-8B")
    wb = ldf.weight_bytes(c8, "bf16")
    assert ldf.fmt_gb(wb) == "16.06 GB" and round(PCIE5 / 1e9) == 63 and round(wb / PCIE5, 2) == 0.25
    n = loadpath_numbers()
    assert LOAD == {"model": "Llama-3-8B", "dtype": "bf16", "hardware": "H100-SXM"}
    assert n["weight_bytes"] == wb and ldf.fmt_si(n["load_s"], "s") == "255 ms"
    assert ldf.fmt_bytes(n["layer_bytes"], digits=0) == "436 MB" and n["layer_bytes"] == 436_224_000
    assert ldf.fmt_si(n["layer_pcie_s"], "s") == "6.92 ms" and ldf.fmt_si(n["layer_hbm_s"], "s") == "130 µs"
    assert round(n["ratio"]) == 53
    # by hand: 436 MB ÷ 63 GB/s ≈ 6.9 ms, 436 MB ÷ 3.35 TB/s ≈ 0.13 ms
    assert round(n["layer_bytes"] / PCIE5 * 1e3, 1) == 6.9 and round(n["layer_bytes"] / 3.35e12 * 1e3, 2) == 0.13


def test_capacity_section():
    assert 7e9 * 2 / 1e9 == 14.0 and round(7e9 * 2 / 2**30, 2) == 13.04
    fp8 = [ldf.capacity(m, "fp8")["bytes/parameter"]
           for m in ("Llama-2-7B", "Llama-3-8B", "Llama-3.1-70B", "Mixtral-8x7B", "DeepSeek-V3")]
    assert (f"{min(fp8):.3f}", f"{max(fp8):.3f}") == ("1.003", "1.131")     # "FP8 costs 1.003–1.131 bytes"
    c8 = ldf.model_config("Llama-3-8B")
    fits = [ldf.memory_fit(c8, "H100-SXM", "bf16", batch=b, context=8192).fits for b in (1, 8, 32, 54, 55, 64)]
    assert fits == [True, True, True, True, False, False]      # "54 ... fit, and 55 do not"


def test_engine_budget():
    """Section 1's budget as vLLM splits it (issue 42's convention): 0.9 × 79.22 GiB on an "80 GB"
    H100, less the weights, the activation peak of an 8,192-token test forward, 0.27 GiB outside
    torch and 1.04 GiB of CUDA graphs; the rest is the KV room (443,392 tokens for Llama-3-8B).
    The box: 81,559 MiB = 85.5e9 B in nvidia-smi, 79.22 GiB = 85.06e9 B as the runtime's total;
    the B200 counted at its label.  The engine box: 1.04 and 0.27 GiB."""
    fit = ldf.memory_fit("Llama-3-8B", "H100-SXM", "bf16", context=8192)
    g = lambda x: round(x / 2**30, 2)   # noqa: E731
    assert fit.fraction == ldf.GPU_MEMORY_UTILIZATION == 0.9 and g(fit.capacity) == 79.22
    assert fit.max_num_batched_tokens == ldf.VLLM_MAX_NUM_BATCHED_TOKENS == 8192
    assert (g(fit.budget), g(fit.weights), g(fit.activations), g(fit.non_torch), g(fit.cuda_graphs)) == (
        71.30, 14.96, 0.90, 0.27, 1.04)
    assert fit.kv_bytes == fit.budget - fit.weights - fit.activations - fit.non_torch - fit.cuda_graphs
    assert g(fit.kv_bytes) == 54.13 and fit.kv_tokens == 443_392 and int(fit.max_concurrency) == 54
    assert round(fit.capacity / 1e9, 2) == 85.06 and round(81_559 * 2**20 / 1e9, 1) == 85.5
    assert "datasheet" in ldf.memory_fit("Llama-3-8B", "B200").total_source
    # "within about 10 % of the logs the tests check"
    assert "within 10 %" in ldf.ESTIMATE_NOTE


def test_deepseek_v3_mtp_module():
    ds = ldf.model_config("DeepSeek-V3")
    specs = ldf.tensor_specs(ds)
    assert ds.n_layers == 61 and ds.is_moe_layer(60)          # layer 61 (the MTP layer) is built like layer 60
    layer = sum(t.numel for t in specs if t.layer == 60)
    own = layer + 2 * ds.d_model * ds.d_model + 3 * ds.d_model      # eh_proj [D, 2D]; enorm, hnorm, shared_head.norm
    copies = 2 * ds.vocab_size * ds.d_model                         # embed_tokens and shared_head.head stored again
    assert round(own / 1e9, 2) == 11.61 and round((own + copies) / 1e9, 2) == 13.46
    assert round(layer / 1e9, 2) == 11.51 and round(2 * ds.d_model**2 / 1e9, 2) == 0.10 and ds.d_model == 7168
    assert round(ds.vocab_size * ds.d_model / 1e9, 2) == 0.93 and 671 + 14 == 685
    assert round(ldf.param_count(ds) / 1e9, 2) == 671.03
    total = ldf.param_count(ds) + own + copies
    assert round(total / 1e9, 2) == 684.49
    # DeepSeek's "14B" and "685B" are these, rounded up; "11.5B unique" is the layer alone, rounded
    assert 13 < (own + copies) / 1e9 < 14 and 684 < total / 1e9 < 685 and round(layer / 1e9, 1) == 11.5


def test_offload_and_expert_offload():
    mx = ldf.model_config("Mixtral-8x7B")
    specs = ldf.tensor_specs(mx)
    experts = sum(t.numel for t in specs if t.role == "expert") * 2
    one = sum(t.numel for t in specs if t.role == "expert" and t.layer == 0 and t.expert == 0) * 2
    moe = sum(map(mx.is_moe_layer, range(mx.n_layers)))
    wb = ldf.weight_bytes(mx)
    assert (round(wb / 1e9, 2), round(experts / 1e9, 2), round((wb - experts) / 1e9, 2)) == (93.41, 90.19, 3.21)
    hit = {b: ldf.expected_experts_hit(8, 2, b) for b in (1, 8, 64)}
    assert hit[1] == 2 and round(hit[8], 1) == 7.2 and round(hit[64], 6) == 8
    assert round(hit[1] * one * moe / 1e9, 2) == 22.55 and round(hit[1] * one * moe / PCIE5, 2) == 0.36
    assert round(hit[8] * one * moe / 1e9, 2) == 81.16 and round(hit[64] * one * moe / 1e9, 2) == 90.19


def test_sharded_checkpoint_takeaway():
    cfg = ldf.model_config("tiny-llama")
    assert ldf.param_count(cfg) * 4 == 476_416 and ldf.param_count(cfg) * 2 == 238_208


def test_the_page_says_what_the_numbers_are(markdown):
    alt = re.search(r"!\[([^\]]*)\]\(figures/ch01_loadpath\.svg\)", markdown).group(1)
    for s in ("16.06 GB", "63 GB/s", "255 ms", "436 MB", "6.92 ms", "130 µs", "53 times"):
        assert s in alt, s
    for s in ("11.61 billion", "13.46 billion", "14 B", "685 B", "93.41 GB", "90.19 GB", "22.55 GB", "0.36 s",
              "81.16 GB", "6.9 ms", "0.13 ms", "1.003–1.131", "11.51 billion", "11.5B", "0.93 billion",
              "684.49 B", "79.22 GiB", "8,192 tokens", "1.04 GiB and 0.27 GiB", "22,000", "0.017 GB",
              "0.292 GB", "PR #29901", "with readahead off"):
        assert s in markdown, s
    assert "runtime reserve" not in markdown and "10 % runtime" not in markdown
    assert "the default of every framework" not in markdown and "a fast drive" not in markdown
    assert "tiered storage" in markdown and "capacity bought with" in markdown   # issue 45's source-text claim
    assert markdown.count(":::{admonition} Takeaway") >= 9
