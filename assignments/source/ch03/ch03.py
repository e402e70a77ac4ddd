"""Assignment 03 — one decoder layer (the spec; see tools/grading/spec.py)."""
import llm_dataflow as ldf

TITLE = "Assignment 03 — one decoder layer"

INTRO = """\
Chapter 03 built a Pre-Norm decoder layer: RMSNorm, attention with grouped-query heads, a SwiGLU
MLP, and counted each operator's FLOPs and bytes. Here you write two of its operators, count a
layer's parameters from a `config.json`, count the FLOPs of a decode token, and count the bytes
the MLP moves with and without fusion.

**How to work.** Replace each `raise NotImplementedError()` with your code and run the test
cell under it: those are the *public* tests, and they check the same types and tolerances as
grading does. Grading reruns them and adds hidden tests on other shapes and configs. Each
question says what it returns. Your operators may compute in FP32, as the chapter's decoder does:
arrays are checked to `rtol=1e-5`. «points_line»

«run_all»
"""

SETUP = """\
import math
import numpy as np
import llm_dataflow as ldf
from llm_dataflow.checks import expect_int, expect_close, expect_array, expect_equal, expect_raises
"""

_MODELS = ("Llama-2-7B", "Llama-3-8B", "Mistral-7B-v0.1", "Qwen2.5-7B", "Phi-3-mini", "Llama-3.1-70B")


def params(rng):
    if rng is None:
        p = dict(model="Llama-2-7B", gqa_model="Llama-3-8B", mlp_model="Llama-3-8B", prompt=2048, hseed=21)
    else:
        p = dict(model=rng.choice(_MODELS), gqa_model=rng.choice(("Llama-3-8B", "Llama-3.1-70B", "Mistral-7B-v0.1")),
                 mlp_model=rng.choice(_MODELS), prompt=rng.choice((512, 1024, 4096)), hseed=rng.randrange(10**6))
    c = ldf.model_config(p["model"])
    p.update(flops=2 * ldf.matmul_params(c), flops_all=2 * ldf.param_count(c))
    g = ldf.model_config(p["gqa_model"])
    p.update(g_D=g.d_model, g_H=g.n_heads, g_KV=g.n_kv_heads, g_F=g.d_ff,
             g_params=sum(t.numel for t in ldf.tensor_specs(g) if ".layers.0." in t.name))
    m = ldf.model_config(p["mlp_model"])
    p.update(m_D=m.d_model, m_F=m.d_ff)
    return p


Q1 = dict(
    id="q1", title="RMSNorm", points=(1, 1),
    returns="a NumPy array of `x`'s shape.",
    prose="""\
Write `rmsnorm(x, weight, eps=1e-5)` for `x` of shape `[..., D]` and `weight` `[D]`:
$y = x / \\sqrt{\\operatorname{mean}(x^2) + \\varepsilon} \\cdot w$, the mean over the last axis
(Zhang & Sennrich 2019). No mean subtraction; $\\varepsilon$ is inside the square root.""",
    answer="""\
def rmsnorm(x, weight, eps=1e-5):
    ### BEGIN SOLUTION
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight
    ### END SOLUTION""",
    names=("rmsnorm",),
    public="""\
x = np.array([[3.0, 4.0], [1.0, 1.0]])
w = np.array([1.0, 2.0])
want = x / np.sqrt((x ** 2).mean(-1, keepdims=True) + 0.5) * w           # a large eps: its place matters
expect_array(rmsnorm(x, w, eps=0.5), want, "rmsnorm(x, w, eps=0.5)", rtol=1e-5,
             hints=[(x / (np.sqrt((x ** 2).mean(-1, keepdims=True)) + 0.5) * w, "ε goes inside the square root"),
                    ((x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 0.5) * w,
                     "that is LayerNorm: RMSNorm does not subtract the mean"),
                    (x / np.sqrt((x ** 2).mean(-1, keepdims=True) + 0.5), "the result is scaled by weight")])""",
    hidden="""\
_rng = np.random.default_rng(«hseed»)
_x = _rng.normal(size=(3, 5, 7)) + 2.0       # non-zero mean: LayerNorm would differ
_w = _rng.normal(size=7)
for _eps in (1e-5, 0.5, 3.0):
    _want = _x / np.sqrt((_x ** 2).mean(-1, keepdims=True) + _eps) * _w
    expect_array(rmsnorm(_x, _w, eps=_eps), _want, f"rmsnorm(x [3, 5, 7], eps={_eps})", rtol=1e-5, atol=1e-6)
_x1 = _rng.normal(size=(«hseed» % 5 + 2, 64)).astype(np.float32)
expect_array(rmsnorm(_x1, np.ones(64, np.float32)), _x1 / np.sqrt((_x1.astype(np.float64) ** 2).mean(-1, keepdims=True) + 1e-5),
             "rmsnorm(FP32 x, default eps)", rtol=1e-5, atol=1e-6)""",
    alternative="""\
def rmsnorm(x, weight, eps=1e-5):
    x32 = np.asarray(x, dtype=np.float32)
    ms = np.einsum("...d,...d->...", x32, x32)[..., None] / x32.shape[-1]
    return (x32 * (1.0 / np.sqrt(ms + np.float32(eps)))) * np.asarray(weight, dtype=np.float32)""",
    mistakes=[("""\
def rmsnorm(x, weight, eps=1e-5):
    return x / (np.sqrt(np.mean(x * x, axis=-1, keepdims=True)) + eps) * weight""", "inside the square root")],
)

Q2 = dict(
    id="q2", title="parameters of one Llama layer from `config.json`", points=(1, 2),
    returns="an `int`: parameters of one decoder layer.",
    prose="""\
Write `layer_params(config)` for a Llama-style `config.json` dict (`hidden_size`,
`num_attention_heads`, `num_key_value_heads`, optional `head_dim` — absent means
`hidden_size // num_attention_heads` —, `intermediate_size`). Count one decoder layer exactly:
the q, k, v and o projections (no biases; with grouped-query attention k and v have only
`num_key_value_heads × head_dim` outputs), the SwiGLU MLP (gate, up and down) and the two RMSNorm
weight vectors.""",
    answer="""\
def layer_params(config):
    ### BEGIN SOLUTION
    d, h = config["hidden_size"], config["num_attention_heads"]
    kv = config.get("num_key_value_heads") or h
    dh = config.get("head_dim") or d // h
    f = config["intermediate_size"]
    attn = d * h * dh + 2 * d * kv * dh + h * dh * d
    return int(attn + 3 * d * f + 2 * d)
    ### END SOLUTION""",
    names=("layer_params",),
    public="""\
cfg = {"hidden_size": «g_D», "num_attention_heads": «g_H», "num_key_value_heads": «g_KV», "intermediate_size": «g_F»}
expect_int(layer_params(cfg), «g_params», "layer_params(«gqa_model», GQA «g_H»:«g_KV»)",
           hints={«g_params» + 2 * «g_D» * «g_D» * (1 - «g_KV» / «g_H»): "k and v have num_key_value_heads × head_dim outputs (GQA)",
                  «g_params» - 2 * «g_D»: "the two RMSNorm weight vectors are parameters too"})""",
    hidden="""\
def _ldf_layer(cfg):
    return sum(t.numel for t in ldf.tensor_specs(cfg) if ".layers.0." in t.name)
for _name in ("Llama-2-7B", "Llama-3.1-70B", "Mistral-7B-v0.1", "Phi-3-mini", "tiny-llama"):
    _c = ldf.model_config(_name)
    _hf = {"hidden_size": _c.d_model, "num_attention_heads": _c.n_heads, "num_key_value_heads": _c.n_kv_heads,
           "head_dim": _c.head_dim, "intermediate_size": _c.d_ff}
    expect_int(layer_params(_hf), _ldf_layer(_c), f"layer_params({_name})")
_odd = ldf.ModelConfig(n_layers=1, d_model=96, n_heads=6, n_kv_heads=2, head_dim=24, d_ff=200, vocab_size=10)
expect_int(layer_params({"hidden_size": 96, "num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": 24,
                         "intermediate_size": 200}), _ldf_layer(_odd), "layer_params(head_dim 24 != 96 / 6)")
expect_int(layer_params({"hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 100}),
           4 * 64 * 64 + 3 * 64 * 100 + 2 * 64, "layer_params(MHA config without num_key_value_heads)")""",
    alternative="""\
def layer_params(config):
    D = config["hidden_size"]
    H = config["num_attention_heads"]
    Hkv = config.get("num_key_value_heads", H)
    dh = config.get("head_dim", D // H)
    shapes = [(H * dh, D), (Hkv * dh, D), (Hkv * dh, D), (D, H * dh),
              (config["intermediate_size"], D), (config["intermediate_size"], D), (D, config["intermediate_size"]), (D,), (D,)]
    return sum(np.prod(s, dtype=np.int64) for s in shapes)""",
    mistakes=[("""\
def layer_params(config):
    d, h = config["hidden_size"], config["num_attention_heads"]
    return 4 * d * d + 3 * d * config["intermediate_size"] + 2 * d""", "GQA")],
)

Q3 = dict(
    id="q3", title="FLOPs of one decode token", points=(1, 1),
    returns="an `int`: FLOPs, exactly.",
    prose="""\
A matrix–vector product with a weight of $n$ elements costs $2n$ FLOPs (a multiply and an add
per weight). Count the FLOPs of the matrix products of decoding one token of «model»: every
projection of every layer and the LM head. The input embedding is a gather (no FLOPs) and the
norm weights multiply elementwise; leave out attention over the context. Store it in
`flops_per_token`.""",
    answer="""\
### BEGIN SOLUTION
_c = ldf.model_config("«model»")
flops_per_token = 2 * sum(t.numel for t in ldf.tensor_specs(_c)      # every matrix (biases have no in_features)
                          if t.in_features is not None and t.role not in ("embedding", "norm"))
### END SOLUTION""",
    names=("flops_per_token",),
    public="""\
expect_int(flops_per_token, flops_per_token, "flops_per_token (an integer: its value is checked when graded)")
assert flops_per_token < «flops_all», (
    f"flops_per_token = {flops_per_token:,}: that is at least 2 × every parameter; the embedding table is a gather")""",
    hidden="""\
_c = ldf.model_config("«model»")
expect_int(flops_per_token, 2 * ldf.matmul_params(_c), "flops_per_token («model»)",
           hints={2 * (ldf.matmul_params(_c) - _c.vocab_size * _c.d_model): "the LM head is a matrix product too"})""",
    alternative="""\
_c = ldf.model_config("«model»")
_L, _D, _H, _K, _dh, _F, _V = _c.n_layers, _c.d_model, _c.n_heads, _c.n_kv_heads, _c.head_dim, _c.d_ff, _c.vocab_size
flops_per_token = 2 * (_L * (_D * _H * _dh * 2 + 2 * _D * _K * _dh + 3 * _D * _F) + _V * _D)""",
    mistakes=[("""\
flops_per_token = 2 * ldf.param_count(ldf.model_config("«model»"))""", "embedding table is a gather")],
)

Q4 = dict(
    id="q4", title="the SwiGLU MLP", points=(1, 1),
    returns="a NumPy array `[..., D]`.",
    prose="""\
Write `swiglu_mlp(x, w_gate, w_up, w_down)` with Hugging Face weight layouts: `w_gate` and
`w_up` are `[F, D]`, `w_down` is `[D, F]`, `x` is `[..., D]`:
$y = (\\operatorname{silu}(x W_g^\\top) \\odot x W_u^\\top) W_d^\\top$ with
$\\operatorname{silu}(z) = z / (1 + e^{-z})$ applied to the **gate**.""",
    answer="""\
def swiglu_mlp(x, w_gate, w_up, w_down):
    ### BEGIN SOLUTION
    g = x @ w_gate.T
    return (g / (1 + np.exp(-g)) * (x @ w_up.T)) @ w_down.T
    ### END SOLUTION""",
    names=("swiglu_mlp",),
    public="""\
rng = np.random.default_rng(0)
x, wg, wu, wd = rng.normal(size=(2, 4)), rng.normal(size=(6, 4)), rng.normal(size=(6, 4)), rng.normal(size=(4, 6))
g = x @ wg.T
u = x @ wu.T
expect_array(swiglu_mlp(x, wg, wu, wd), (g / (1 + np.exp(-g)) * u) @ wd.T, "swiglu_mlp(x [2, 4], D=4, F=6)",
             rtol=1e-5, atol=1e-6,
             hints=[((u / (1 + np.exp(-u)) * g) @ wd.T, "SiLU goes on the gate branch, x W_gᵀ, not on the up branch"),
                    ((1 / (1 + np.exp(-g)) * u) @ wd.T, "SiLU(z) is z·sigmoid(z), not sigmoid(z)")])""",
    hidden="""\
_rng = np.random.default_rng(«hseed»)
_D, _F = 6, 10
_x = _rng.normal(size=(2, 3, _D))
_wg, _wu, _wd = _rng.normal(size=(_F, _D)), _rng.normal(size=(_F, _D)), _rng.normal(size=(_D, _F))
_g = np.einsum("btd,fd->btf", _x, _wg)
_want = np.einsum("btf,df->btd", _g * (1 / (1 + np.exp(-_g))) * np.einsum("btd,fd->btf", _x, _wu), _wd)
expect_array(swiglu_mlp(_x, _wg, _wu, _wd), _want, "swiglu_mlp(x [2, 3, 6], F=10)", rtol=1e-5, atol=1e-5)
_x32 = _rng.normal(size=(5, 16)).astype(np.float32) * 4
_w = [_rng.normal(size=s).astype(np.float32) / 4 for s in ((40, 16), (40, 16), (16, 40))]
_g = _x32.astype(np.float64) @ _w[0].T
_want = (_g / (1 + np.exp(-_g)) * (_x32.astype(np.float64) @ _w[1].T)) @ _w[2].T
expect_array(swiglu_mlp(_x32, *_w), _want, "swiglu_mlp(FP32 x [5, 16], F=40)", rtol=1e-4, atol=1e-4)""",
    alternative="""\
def swiglu_mlp(x, w_gate, w_up, w_down):
    x = np.asarray(x, dtype=np.float32)
    gate = np.einsum("...d,fd->...f", x, w_gate.astype(np.float32))
    up = np.einsum("...d,fd->...f", x, w_up.astype(np.float32))
    act = gate * (0.5 * (1.0 + np.tanh(0.5 * gate)))      # sigmoid written with tanh
    return np.einsum("...f,df->...d", act * up, w_down.astype(np.float32))""",
    mistakes=[("""\
def swiglu_mlp(x, w_gate, w_up, w_down):
    u = x @ w_up.T
    return (u / (1 + np.exp(-u)) * (x @ w_gate.T)) @ w_down.T     # silu on the wrong branch""", "gate branch")],
)

Q5 = dict(
    id="q5", title="bytes the MLP moves, with and without fusion", points=(1, 2),
    returns="an `int`: bytes (B).",
    prose="""\
Count the bytes one SwiGLU MLP moves between memory and the chip for `n_tokens` tokens, with
`d_model` = D, `d_ff` = F and `elem_bytes` bytes per element, under the chapter's convention:
every kernel reads each of its inputs once and writes each output once (weights included).

* **Unfused** (`fused=False`), one kernel per operation, as the chapter's ledger runs them:
  `gate_proj` (reads x and $W_g$, writes g), `up_proj` (reads x again and $W_u$, writes u), the
  SiLU-and-multiply (reads g and u, writes h), `down_proj` (reads h and $W_d$, writes y).
* **Fused** (`fused=True`): one kernel computes gate, up, SiLU and multiply — it reads x once,
  $W_g$ and $W_u$, and writes only h — then `down_proj` as before.

Write `mlp_bytes(d_model, d_ff, n_tokens, elem_bytes=2, fused=False)`. Then look at what it says
for «mlp_model» at decode (1 token) and at a prefill of «prompt» tokens: fusion saves almost
nothing where the weights dominate, and a lot where the activations do.""",
    answer="""\
def mlp_bytes(d_model, d_ff, n_tokens, elem_bytes=2, fused=False):
    ### BEGIN SOLUTION
    D, F, N = d_model, d_ff, n_tokens
    weights = 3 * D * F
    if fused:
        acts = N * D + N * F + (N * F + N * D)            # x in, h out; down: h in, y out
    else:
        acts = 2 * (N * D + N * F) + 3 * N * F + (N * F + N * D)
    return int((weights + acts) * elem_bytes)
    ### END SOLUTION""",
    names=("mlp_bytes",),
    public="""\
D, F, N = «m_D», «m_F», «prompt»                                      # «mlp_model», a prefill of «prompt» tokens
expect_int(mlp_bytes(D, F, N), (3 * D * F + 3 * N * D + 6 * N * F) * 2, "mlp_bytes(«mlp_model», «prompt» tokens, unfused)",
           hints={(3 * D * F + 2 * N * D + 2 * N * F) * 2: "that is the fused count: unfused, x is read twice (gate_proj "
                                                           "and up_proj) and g and u are written and read back"})
expect_int(mlp_bytes(D, F, 1, fused=True), (3 * D * F + 2 * D + 2 * F) * 2, "mlp_bytes(«mlp_model», 1 token, fused)")""",
    hidden="""\
import random as _random
_r = _random.Random(«hseed»)
for _ in range(12):
    _D, _F, _N, _e = _r.randrange(1, 9000), _r.randrange(1, 30000), _r.randrange(1, 70000), _r.choice((1, 2, 4))
    expect_int(mlp_bytes(_D, _F, _N, _e), (3 * _D * _F + 3 * _N * _D + 6 * _N * _F) * _e, f"mlp_bytes({_D}, {_F}, {_N}, {_e})")
    expect_int(mlp_bytes(_D, _F, _N, _e, fused=True), (3 * _D * _F + 2 * _N * _D + 2 * _N * _F) * _e,
               f"mlp_bytes({_D}, {_F}, {_N}, {_e}, fused=True)",
               hints={(3 * _D * _F + 3 * _N * _D + 6 * _N * _F) * _e: "fused=True must change the count"})""",
    alternative="""\
def mlp_bytes(d_model, d_ff, n_tokens, elem_bytes=2, fused=False):
    x, g, h, y = (n_tokens * d for d in (d_model, d_ff, d_ff, d_model))
    w = d_model * d_ff
    if fused:
        kernels = [(x + 2 * w, h), (h + w, y)]
    else:
        kernels = [(x + w, g), (x + w, g), (2 * g, h), (h + w, y)]   # gate, up, act-mul, down
    return sum(r + wr for r, wr in kernels) * elem_bytes""",
    mistakes=[("""\
def mlp_bytes(d_model, d_ff, n_tokens, elem_bytes=2, fused=False):
    return (3 * d_model * d_ff + 2 * n_tokens * d_model + 2 * n_tokens * d_ff) * elem_bytes""", "x is read twice")],
)

QUESTIONS = [Q1, Q2, Q3, Q4, Q5]
