"""Assignment 00 — the byte ledger (the spec; see tools/grading/spec.py)."""
import llm_dataflow as ldf

TITLE = "Assignment 00 — the byte ledger"

INTRO = """\
Chapter 00 followed the bytes of one request through a model: the weights read on every decode
step, the KV cache written and read, the token IDs copied to the device. This assignment asks you
to keep those accounts yourself, for «model» on an «gpu».

**How to work.** Replace each `raise NotImplementedError()` with your code and run the test
cell under it: those are the *public* tests, and they check the same types as grading does.
When your instructor grades, the public tests run again, followed by *hidden* tests (tighter
tolerances, other inputs). Each question says what it returns and to what precision. Use the
package's presets (`ldf.model_config`, `ldf.hardware`) for model shapes and hardware numbers.
GB = 10⁹ bytes, GiB = 2³⁰ bytes. «points_line»

«run_all»
"""

SETUP = """\
import math
import llm_dataflow as ldf
from llm_dataflow.checks import expect_int, expect_close, expect_array, expect_equal, expect_raises
"""

_MODELS = ("Llama-2-7B", "Llama-3-8B", "Mistral-7B-v0.1", "Qwen2.5-7B")   # no window under 4,096 tokens
_GPUS = ("A100-80GB-SXM", "H100-SXM", "H200", "B200")


def params(rng):
    if rng is None:
        p = dict(model="Llama-2-7B", gpu="H100-SXM", prompt=1000, id_dtype="int32", hseed=5)
    else:
        p = dict(model=rng.choice(_MODELS), gpu=rng.choice(_GPUS), prompt=rng.choice((512, 1000, 3000, 4096)),
                 id_dtype=rng.choice(("int32", "int64")), hseed=rng.randrange(10**6))
    c, hw = ldf.model_config(p["model"]), ldf.hardware(p["gpu"])
    w1 = ldf.weight_bytes_read(c, "bf16", 1)
    p.update(w1_gb=w1 / 1e9, stored_gb=ldf.weight_bytes(c, "bf16") / 1e9, bw=hw.hbm_bandwidth,
             bw_tb=hw.hbm_bandwidth / 1e12, step_ms=w1 / hw.hbm_bandwidth * 1e3, D=c.d_model,
             id_bytes=4 if p["id_dtype"] == "int32" else 8, kv_tok=ldf.kv_bytes_per_token(c))
    p.update(ids_want=p["prompt"] * p["id_bytes"], hidden_want=p["prompt"] * c.d_model * 2,
             kv_want=p["prompt"] * p["kv_tok"])
    return p


Q1 = dict(
    id="q1", title="weights read per decode step", points=(1, 1),
    returns="a float: GB (10⁹ B), checked to 0.1 %.",
    prose="""\
Decoding one token at batch 1 reads every stored weight of «model» once from HBM (BF16, 2 bytes
per weight) — except the input embedding table: the step needs only the one row of the token it
embeds, so only that row is read (the LM head, a separate `[vocab_size, d_model]` matrix here, is
read whole). How many **GB** does the step read? Store it in `weights_gb`.
`ldf.model_config("«model»")` has the shapes; `ldf.tensor_specs(cfg)` lists every tensor.""",
    answer="""\
### BEGIN SOLUTION
_cfg = ldf.model_config("«model»")
_table = _cfg.vocab_size * _cfg.d_model * 2
weights_gb = (ldf.weight_bytes(_cfg, "bf16") - _table + _cfg.d_model * 2) / 1e9
### END SOLUTION""",
    names=("weights_gb",),
    public="""\
expect_close(weights_gb, «w1_gb:.4f», "weights_gb (GB)", rel=0.05)      # within 5 % here, 0.1 % when graded
assert weights_gb < «stored_gb:.6f», (
    f"weights_gb = {weights_gb}: the step gathers one row of the embedding table, not all «stored_gb:.3f» GB of stored weights")
""",
    hidden="""\
_c = ldf.model_config("«model»")
expect_close(weights_gb, ldf.weight_bytes_read(_c, "bf16", 1) / 1e9, "weights_gb (GB)", rel=1e-3,
             hints={ldf.weight_bytes(_c, "bf16") / 1e9: "the whole embedding table was counted: a decode step gathers one row"})""",
    alternative="""\
import numpy as np
_cfg = ldf.model_config("«model»")
_sizes = {t.name: np.prod(t.shape, dtype=np.int64) * 2 for t in ldf.tensor_specs(_cfg)}
_emb = [n for n in _sizes if "embed" in n]
weights_gb = np.float32((sum(_sizes.values()) - sum(_sizes[n] for n in _emb)) / 1e9 + _cfg.d_model * 2 / 1e9)""",
    mistakes=[("weights_gb = ldf.weight_bytes_read(ldf.model_config(\"«model»\"), \"bf16\", 1) / 2**30", "GiB where GB")],
)

Q2 = dict(
    id="q2", title="the bandwidth bound on decode", points=(1, 1),
    returns="two floats: `step_ms` (milliseconds) and `tokens_per_s` (tokens per second), to 0.1 %.",
    prose="""\
If reading the bytes of Q1 from HBM were the only cost, how long would each decode step take on
an «gpu» (`ldf.hardware("«gpu»").hbm_bandwidth`, in B/s), and how many tokens per second would
one sequence get? Store `step_ms` (milliseconds) and `tokens_per_s`. (Grading compares with your
own `weights_gb`, so a slip in Q1 is not charged twice.)""",
    answer="""\
### BEGIN SOLUTION
_t = weights_gb * 1e9 / ldf.hardware("«gpu»").hbm_bandwidth
step_ms = _t * 1e3
tokens_per_s = 1 / _t
### END SOLUTION""",
    names=("step_ms", "tokens_per_s", "weights_gb"),
    public="""\
expect_close(step_ms, weights_gb * 1e9 / «bw» * 1e3, "step_ms (from your weights_gb)", rel=0.05)  # 5 % here, 0.1 % graded
expect_close(step_ms * tokens_per_s, 1000.0, "step_ms × tokens_per_s (ms in a second)", rel=1e-6)""",
    hidden="""\
_bw = ldf.hardware("«gpu»").hbm_bandwidth
expect_close(step_ms, weights_gb * 1e9 / _bw * 1e3, "step_ms (from your weights_gb)", rel=1e-3)
expect_close(tokens_per_s, _bw / (weights_gb * 1e9), "tokens_per_s (from your weights_gb)", rel=1e-3)""",
    alternative="""\
step_ms = 1000.0 * weights_gb / («bw» / 1e9)
tokens_per_s = 1000.0 / step_ms""",
    mistakes=[("step_ms = weights_gb * 1e9 / ldf.hardware(\"«gpu»\").hbm_bandwidth\ntokens_per_s = 1 / step_ms", "1000× too small")],
)

Q3 = dict(
    id="q3", title="bytes one decode step of a batch moves", points=(1, 2),
    returns="an `int`: bytes (B).",
    prose="""\
Write `decode_step_bytes(weight_bytes, kv_bytes_per_token, context_lens)`: the bytes one decode
step moves between HBM and the chip for a batch of sequences whose cached context lengths are
the list `context_lens`:

* the weights (`weight_bytes`, already counting the gathered embedding rows) are read **once**,
  whatever the batch size: every sequence's token multiplies the same weights;
* each sequence reads its own cached K and V (`context_len × kv_bytes_per_token`);
* each sequence writes the K and V of its new token (`kv_bytes_per_token`).

Ignore activations. Raise `ValueError` if any context length is negative. An empty batch moves
nothing. The hidden tests compare with `ldf.decode_step_bytes` for real models.""",
    answer="""\
def decode_step_bytes(weight_bytes, kv_bytes_per_token, context_lens):
    ### BEGIN SOLUTION
    if any(c < 0 for c in context_lens):
        raise ValueError(f"context_lens={context_lens!r}: every length must be >= 0")
    if not context_lens:
        return 0
    return int(weight_bytes + kv_bytes_per_token * (sum(context_lens) + len(context_lens)))
    ### END SOLUTION""",
    names=("decode_step_bytes",),
    public="""\
expect_int(decode_step_bytes(1000, 10, [5, 7]), 1000 + 10 * (5 + 7) + 10 * 2,
           "decode_step_bytes(1000, 10, [5, 7])",
           hints={2 * 1000 + 10 * (5 + 7) + 10 * 2: "the weights are read once for the whole batch, not once per sequence",
                  1000 + 10 * (5 + 7): "each sequence also writes its new token's K and V"})
expect_raises(ValueError, decode_step_bytes, 10, 1, [3, -1], what="decode_step_bytes(10, 1, [3, -1])")""",
    hidden="""\
import random as _random
_r = _random.Random(«hseed»)
for _ in range(20):
    _w, _kv = _r.randrange(1, 10**11), _r.randrange(1, 10**6)
    _ctx = [_r.randrange(0, 10**5) for _ in range(_r.randrange(1, 65))]
    expect_int(decode_step_bytes(_w, _kv, _ctx), _w + _kv * (sum(_ctx) + len(_ctx)), f"decode_step_bytes(w, kv, {len(_ctx)} lengths)")
expect_int(decode_step_bytes(5, 3, []), 0, "decode_step_bytes(5, 3, [])")
for _name, _b, _s in (("«model»", 8, 4000), ("Llama-3.1-70B", 3, 100), ("Qwen2.5-7B", 64, 0)):
    _c = ldf.model_config(_name)
    _got = decode_step_bytes(ldf.weight_bytes_read(_c, "bf16", _b), ldf.kv_bytes_per_token(_c), [_s] * _b)
    expect_int(_got, int(ldf.decode_step_bytes(_c, _b, _s)), f"decode_step_bytes for {_name}, batch {_b}, context {_s}")
expect_raises(ValueError, decode_step_bytes, 10, 1, [-1], what="decode_step_bytes(10, 1, [-1])")""",
    alternative="""\
import numpy as np

def decode_step_bytes(weight_bytes, kv_bytes_per_token, context_lens):
    ctx = np.asarray(context_lens, dtype=np.int64)
    if (ctx < 0).any():
        raise ValueError("negative context length")
    if ctx.size == 0:
        return np.int64(0)
    return np.int64(weight_bytes) + np.int64(kv_bytes_per_token) * (ctx + 1).sum()""",
    mistakes=[("""\
def decode_step_bytes(weight_bytes, kv_bytes_per_token, context_lens):
    if min(context_lens, default=0) < 0:
        raise ValueError("negative")
    return sum(weight_bytes + kv_bytes_per_token * (c + 1) for c in context_lens)""",
               "read once for the whole batch")],
)

Q4 = dict(
    id="q4", title="input small, state large", points=(1, 1),
    returns="three `int`s: bytes (B).",
    prose="""\
A prompt of «prompt» tokens arrives on the GPU as «id_dtype» token IDs. After the embedding
gather each token is a BF16 vector of `d_model` elements (one layer's hidden states), and the
prefill writes the K and V of every prompt token in every layer to the KV cache. For «model»,
store the bytes of the IDs in `ids_bytes`, of one layer's hidden states in `hidden_bytes`, and of
the KV cache the prefill writes in `kv_written_bytes` (`ldf.kv_bytes_per_token` counts one
token's K and V over all layers, GQA included).""",
    answer="""\
### BEGIN SOLUTION
_cfg = ldf.model_config("«model»")
ids_bytes = «prompt» * «id_bytes»
hidden_bytes = «prompt» * _cfg.d_model * 2
kv_written_bytes = «prompt» * ldf.kv_bytes_per_token(_cfg)
### END SOLUTION""",
    names=("ids_bytes", "hidden_bytes", "kv_written_bytes"),
    public="""\
expect_int(ids_bytes, «ids_want», "ids_bytes («prompt» «id_dtype» IDs)")
expect_int(hidden_bytes, «hidden_want», "hidden_bytes",
           hints={«prompt» * «D» * 4: "BF16 is 2 bytes per element, not 4"})
expect_int(kv_written_bytes, kv_written_bytes, "kv_written_bytes (an integer: its value is checked when graded)")
""",
    hidden="""\
_c = ldf.model_config("«model»")
expect_int(kv_written_bytes, ldf.kv_cache_bytes(_c, «prompt»), "kv_written_bytes",
           hints={2 * «prompt» * _c.n_layers * _c.n_heads * _c.head_dim * 2: "that is MHA: «model» caches n_kv_heads heads"})
expect_int(hidden_bytes, «prompt» * _c.d_model * 2, "hidden_bytes")""",
    alternative="""\
import numpy as np
_cfg = ldf.model_config("«model»")
ids_bytes = np.zeros(«prompt», dtype=np.«id_dtype»).nbytes
hidden_bytes = np.int64(«prompt») * _cfg.d_model * np.dtype(np.float16).itemsize
kv_written_bytes = ldf.kv_cache_bytes(_cfg, «prompt»)""",
    mistakes=[("""\
_cfg = ldf.model_config("«model»")
ids_bytes = «prompt» * «id_bytes»
hidden_bytes = «prompt» * _cfg.d_model * 4
kv_written_bytes = «prompt» * 2 * _cfg.n_layers * _cfg.n_heads * _cfg.head_dim * 2""", "not 4")],
)

QUESTIONS = [Q1, Q2, Q3, Q4]
