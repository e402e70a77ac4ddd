"""Assignment 06 — attention and the KV cache (the spec; see tools/grading/spec.py)."""
import llm_dataflow as ldf

TITLE = "Assignment 06 — attention and the KV cache"

INTRO = """\
Chapter 06 sized the KV cache of every attention variant, merged partial softmax results the way
FlashAttention does, and read K/V through PagedAttention's block table. Here you write those
pieces yourself, from the definitions, on configs and shapes the chapter does not show.

**How to work.** Replace each `raise NotImplementedError()` with your code, then run the test
cell under it: those are the *public* tests, and they check the same types and tolerances as
grading does. When your instructor grades, the public tests run again, followed by *hidden* tests
on inputs you have not seen (other configs, shapes and splits). Each question says what it
returns; a test's message says what it expected and what it got. Do not rename the functions.
«points_line»

«run_all»
"""

SETUP = """\
import math
import numpy as np
import llm_dataflow as ldf
from llm_dataflow.checks import expect_int, expect_close, expect_array, expect_equal, expect_raises, in_kernel
"""

_GQA = ("Llama-3-8B", "Qwen2.5-7B", "Llama-3.1-70B", "Mistral-7B-v0.1")


def params(rng):
    """The book's version (``rng`` None) or a class's own (models, lengths, input seeds)."""
    if rng is None:
        p = dict(kv_model="Llama-3-8B", kv_seq=32768, win_model="Mistral-7B-v0.1", win_seq=8192, hseed=1234,
                 paged_seed=7, block_size=16, mla_layers=27, mla_rank=256, mla_rope=32)
    else:
        p = dict(kv_model=rng.choice(("Qwen2.5-7B", "Llama-3.1-70B", "Llama-3-8B")),
                 kv_seq=rng.choice((8192, 16384, 65536)), win_model=rng.choice(("Mistral-7B-v0.1", "Phi-3-mini")),
                 win_seq=rng.choice((6000, 10000, 12288)), hseed=rng.randrange(10**6),
                 paged_seed=rng.randrange(10**6), block_size=rng.choice((8, 16, 32)),
                 mla_layers=rng.choice((26, 27, 30)), mla_rank=rng.choice((256, 384)), mla_rope=rng.choice((32, 64)))
    c = ldf.model_config(p["kv_model"])
    p.update(kv_L=c.n_layers, kv_D=c.d_model, kv_H=c.n_heads, kv_KV=c.n_kv_heads,
             kv_want=ldf.kv_cache_bytes(c, p["kv_seq"]), kv_gib=ldf.kv_cache_bytes(c, p["kv_seq"]) / 2**30)
    w = ldf.model_config(p["win_model"])
    p.update(win_L=w.n_layers, win_D=w.d_model, win_H=w.n_heads, win_KV=w.n_kv_heads, win_W=w.sliding_window,
             win_want=ldf.kv_cache_bytes(w, p["win_seq"]))
    ds = ldf.model_config("DeepSeek-V3")
    p.update(ds_mla=ldf.kv_bytes_per_token(ds),
             ds_expanded=ds.n_layers * ds.n_heads * (ds.qk_nope_head_dim + ds.qk_rope_head_dim + ds.v_head_dim) * 2)
    return p


Q1 = dict(
    id="q1", title="KV cache bytes from a `config.json`", points=(1, 2),
    returns="an `int`: bytes (B) of the KV cache of `batch` sequences of `seq_len` tokens.",
    prose="""\
Write `kv_cache_bytes(config, seq_len, batch=1, bytes_per_elem=2)` for a dense model (MHA, GQA or
MQA, with or without sliding windows) described by a Hugging Face `config.json` dict.

* Every layer caches, for every token it keeps, one **key** and one **value** vector of `head_dim`
  elements for each KV head. The number of KV heads is `num_key_value_heads`; a config without it
  is MHA (as many KV heads as `num_attention_heads`). `head_dim` absent means
  `hidden_size // num_attention_heads`; present, it wins (Qwen3 and Gemma set it).
* A layer with a **sliding window** keeps only the last `sliding_window` tokens. If the config has
  `layer_types`, the layers listed as `"sliding_attention"` slide and the `"full_attention"` ones
  keep every token; without `layer_types`, a `sliding_window` that is not `None` applies to every
  layer (Mistral-7B-v0.1).

Raise `ValueError` for a negative `seq_len`. The chapter's Llama-3-8B case is a public test; the
hidden tests use other configs, windows, batches and element sizes.""",
    answer="""\
def kv_cache_bytes(config, seq_len, batch=1, bytes_per_elem=2):
    ### BEGIN SOLUTION
    if seq_len < 0:
        raise ValueError(f"seq_len={seq_len} must be >= 0")
    n_heads = config["num_attention_heads"]
    n_kv = config.get("num_key_value_heads") or n_heads
    head_dim = config.get("head_dim") or config["hidden_size"] // n_heads
    window = config.get("sliding_window")
    kinds = config.get("layer_types") or ["sliding_attention" if window else "full_attention"] * config["num_hidden_layers"]
    tokens = sum(min(seq_len, window) if kind == "sliding_attention" else seq_len for kind in kinds)
    return int(2 * n_kv * head_dim * tokens * batch * bytes_per_elem)
    ### END SOLUTION""",
    names=("kv_cache_bytes",),
    public="""\
cfg = {"hidden_size": «kv_D», "num_attention_heads": «kv_H», "num_key_value_heads": «kv_KV»,
       "num_hidden_layers": «kv_L»}                                     # «kv_model» (GQA)
expect_int(kv_cache_bytes(cfg, «kv_seq»), «kv_want», "kv_cache_bytes(«kv_model», «kv_seq»)  («kv_gib:.4g» GiB)",
           hints={«kv_want» * «kv_H» // «kv_KV»: "that is the MHA count: GQA stores num_key_value_heads heads"})
win = {"hidden_size": «win_D», "num_attention_heads": «win_H», "num_key_value_heads": «win_KV»,
       "num_hidden_layers": «win_L», "sliding_window": «win_W»}          # «win_model»
expect_int(kv_cache_bytes(win, «win_seq»), «win_want», "kv_cache_bytes(«win_model», «win_seq») with a «win_W»-token window",
           hints={«win_want» * «win_seq» // «win_W»: "the window was ignored: every layer keeps only sliding_window tokens"})
expect_raises(ValueError, kv_cache_bytes, cfg, -1, what="kv_cache_bytes(cfg, -1)")""",
    hidden="""\
import random as _random
def _hf(name):
    c = ldf.model_config(name)
    d = {"hidden_size": c.d_model, "num_attention_heads": c.n_heads, "num_key_value_heads": c.n_kv_heads,
         "head_dim": c.head_dim, "num_hidden_layers": c.n_layers}
    if c.sliding_window is not None:
        d["sliding_window"] = c.sliding_window
    if c.layer_types:
        d["layer_types"] = list(c.layer_types)
    return d, c
_r = _random.Random(«hseed»)
for _name in ("Llama-2-7B", "Llama-3.1-70B", "Qwen2.5-7B", "Gemma-2-9B", "Phi-3-mini", "Mistral-7B-v0.1"):
    _d, _c = _hf(_name)
    _s, _b = _r.choice((1, 2047, 4096, 5000, 40000)), _r.choice((1, 3))
    expect_int(kv_cache_bytes(_d, _s, batch=_b), ldf.kv_cache_bytes(_c, _s, _b), f"kv_cache_bytes({_name}, {_s}, batch={_b})")
    expect_int(kv_cache_bytes(_d, _s, batch=_b, bytes_per_elem=4), ldf.kv_cache_bytes(_c, _s, _b, "fp32"),
               f"kv_cache_bytes({_name}, {_s}, batch={_b}, bytes_per_elem=4)")
_mha = {"hidden_size": 768, "num_attention_heads": 12, "num_hidden_layers": 12}            # no num_key_value_heads
expect_int(kv_cache_bytes(_mha, 1000, batch=3), 2 * 12 * 12 * 64 * 1000 * 3 * 2, "kv_cache_bytes(MHA config without num_key_value_heads)")
_mqa = {"hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 1, "num_hidden_layers": 18}
expect_int(kv_cache_bytes(_mqa, 4097, batch=2, bytes_per_elem=1), 2 * 18 * 1 * 128 * 4097 * 2, "kv_cache_bytes(MQA config, 1-byte elements)")
_qwen3 = {"hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "num_hidden_layers": 48}
expect_int(kv_cache_bytes(_qwen3, 40960), 2 * 48 * 4 * 128 * 40960 * 2, "kv_cache_bytes(config whose head_dim != hidden_size / heads)",
           hints={2 * 48 * 4 * 64 * 40960 * 2: "head_dim is given in the config: use it, not hidden_size // heads"})
_mixed = dict(_qwen3, sliding_window=1024, layer_types=["sliding_attention", "full_attention"] * 24)
expect_int(kv_cache_bytes(_mixed, 5000), 2 * 4 * 128 * (24 * 1024 + 24 * 5000) * 2, "kv_cache_bytes(half the layers sliding)",
           hints={2 * 4 * 128 * 48 * 1024 * 2: "only the layers marked sliding_attention slide"})
expect_int(kv_cache_bytes(_qwen3, 0, batch=5), 0, "kv_cache_bytes(seq_len=0)")
expect_raises(ValueError, kv_cache_bytes, _mha, -1, what="kv_cache_bytes(seq_len=-1)")""",
    alternative="""\
import numpy as _np

def kv_cache_bytes(config, seq_len, batch=1, bytes_per_elem=2):
    if seq_len < 0:
        raise ValueError("negative seq_len")
    h = config["num_attention_heads"]
    kv = config.get("num_key_value_heads", h)
    dh = config.get("head_dim", config["hidden_size"] // h)
    L = config["num_hidden_layers"]
    w = config.get("sliding_window")
    if "layer_types" in config:
        slide = _np.array([t == "sliding_attention" for t in config["layer_types"]])
    else:
        slide = _np.full(L, w is not None)
    kept = _np.where(slide, _np.minimum(seq_len, w or 0), seq_len)
    return _np.int64(kept.sum()) * 2 * kv * dh * batch * bytes_per_elem    # a numpy.int64""",
    mistakes=[
        ("""\
def kv_cache_bytes(config, seq_len, batch=1, bytes_per_elem=2):
    if seq_len < 0:
        raise ValueError("seq_len")
    h = config["num_attention_heads"]
    d = config.get("head_dim") or config["hidden_size"] // h
    w = config.get("sliding_window")
    kept = min(seq_len, w) if w else seq_len
    return 2 * config["num_hidden_layers"] * h * d * kept * batch * bytes_per_elem""",
         "MHA count"),
    ],
)

Q2 = dict(
    id="q2", title="MLA: what the latent saves", points=(1, 1),
    returns="two `int`s: bytes (B) per token of the MLA cache, and of the per-head K and V it replaces.",
    prose="""\
DeepSeek-V2/V3's multi-head latent attention (arXiv:2405.04434) does not cache per-head keys and
values. Per layer and token it caches one compressed latent (`kv_lora_rank` elements) and one
decoupled RoPE key (`qk_rope_head_dim` elements) shared by all heads. From them the attention of
every head is rebuilt: a key of `qk_nope_head_dim + qk_rope_head_dim` elements and a value of
`v_head_dim` elements for each of the `num_attention_heads` heads — what an un-absorbed prefill
kernel materialises, and what a GQA-style cache of the same model would have to hold.

Write `mla_kv_bytes_per_token(config, bytes_per_elem=2)` (the latent cache) and
`expanded_kv_bytes_per_token(config, bytes_per_elem=2)` (the per-head K and V) for a
`deepseek_v3` `config.json` dict, both over all `num_hidden_layers` layers.""",
    answer="""\
def mla_kv_bytes_per_token(config, bytes_per_elem=2):
    ### BEGIN SOLUTION
    per_layer = config["kv_lora_rank"] + config["qk_rope_head_dim"]
    return int(config["num_hidden_layers"] * per_layer * bytes_per_elem)
    ### END SOLUTION


def expanded_kv_bytes_per_token(config, bytes_per_elem=2):
    ### BEGIN SOLUTION
    k = config["qk_nope_head_dim"] + config["qk_rope_head_dim"]
    per_layer = config["num_attention_heads"] * (k + config["v_head_dim"])
    return int(config["num_hidden_layers"] * per_layer * bytes_per_elem)
    ### END SOLUTION""",
    names=("mla_kv_bytes_per_token", "expanded_kv_bytes_per_token"),
    public="""\
deepseek_v3 = {"model_type": "deepseek_v3", "num_hidden_layers": 61, "hidden_size": 7168,
               "num_attention_heads": 128, "num_key_value_heads": 128, "kv_lora_rank": 512,
               "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128, "q_lora_rank": 1536}
expect_int(mla_kv_bytes_per_token(deepseek_v3), «ds_mla», "mla_kv_bytes_per_token(DeepSeek-V3)",
           hints={2 * «ds_mla»: "the latent is one vector, not a K and a V: no factor 2"})
expect_int(expanded_kv_bytes_per_token(deepseek_v3), «ds_expanded», "expanded_kv_bytes_per_token(DeepSeek-V3)")""",
    hidden="""\
_c = {"num_hidden_layers": «mla_layers», "hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 16,
      "kv_lora_rank": «mla_rank», "qk_rope_head_dim": «mla_rope», "qk_nope_head_dim": 96, "v_head_dim": 80}
expect_int(mla_kv_bytes_per_token(_c), «mla_layers» * («mla_rank» + «mla_rope») * 2, "mla_kv_bytes_per_token(a smaller MLA config)")
expect_int(mla_kv_bytes_per_token(_c, bytes_per_elem=1), «mla_layers» * («mla_rank» + «mla_rope»), "mla_kv_bytes_per_token(..., bytes_per_elem=1)")
expect_int(expanded_kv_bytes_per_token(_c), «mla_layers» * 16 * (96 + «mla_rope» + 80) * 2, "expanded_kv_bytes_per_token(a smaller MLA config)",
           hints={«mla_layers» * 16 * (96 + 80) * 2: "each head's key has qk_rope_head_dim elements too"})
_ds = ldf.model_config("DeepSeek-V3")
expect_int(mla_kv_bytes_per_token({"num_hidden_layers": _ds.n_layers, "kv_lora_rank": _ds.kv_lora_rank,
                                   "qk_rope_head_dim": _ds.qk_rope_head_dim}), ldf.kv_bytes_per_token(_ds),
           "mla_kv_bytes_per_token (as ldf.kv_bytes_per_token counts it)")""",
    alternative="""\
def mla_kv_bytes_per_token(config, bytes_per_elem=2):
    return sum([config["kv_lora_rank"] + config["qk_rope_head_dim"]] * config["num_hidden_layers"]) * bytes_per_elem


def expanded_kv_bytes_per_token(config, bytes_per_elem=2):
    L, H = config["num_hidden_layers"], config["num_attention_heads"]
    keys = L * H * (config["qk_nope_head_dim"] + config["qk_rope_head_dim"])
    values = L * H * config["v_head_dim"]
    return (keys + values) * bytes_per_elem""",
    mistakes=[
        ("""\
def mla_kv_bytes_per_token(config, bytes_per_elem=2):
    return 2 * config["num_hidden_layers"] * (config["kv_lora_rank"] + config["qk_rope_head_dim"]) * bytes_per_elem


def expanded_kv_bytes_per_token(config, bytes_per_elem=2):
    return 2 * config["num_hidden_layers"] * config["num_attention_heads"] * config["v_head_dim"] * bytes_per_elem""",
         "no factor 2"),
    ],
)

_DISABLE = '''
import sys, types
_blocked = ("flash_attention", "attention_partial", "merge_attention_partials", "attention_reference",
            "scaled_dot_product_attention")
def _refuse(*args, **kwargs):
    raise RuntimeError("the package's attention functions are disabled while attention_by_blocks is graded")
_saved = []
for _mod in [sys.modules.get(m) for m in ("llm_dataflow.flash", "llm_dataflow.model", "llm_dataflow")] + \\
        [sys.modules.get("torch.nn.functional")]:
    for _n in _blocked:
        _f = vars(_mod).get(_n) if _mod is not None else None     # (no module __getattr__: no imports)
        # one function can be bound under several names (llm_dataflow.flash.x is llm_dataflow.x):
        # save it once, or the second save would record the refusal and restore it
        if isinstance(_f, types.FunctionType) and not _f.__code__.co_freevars and all(_f is not g for g, _ in _saved):
            _saved.append((_f, _f.__code__))
            _f.__code__ = _refuse.__code__
class _Block:
    def find_spec(self, name, path=None, target=None):
        if name in ("llm_dataflow.flash", "llm_dataflow.model"):
            raise ImportError(f"{name} is disabled while attention_by_blocks is graded")
sys.meta_path.insert(0, _Block())
try:
    result = attention_by_blocks(q, k, v, block)
finally:
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Block)]
    for _f, _code in _saved:
        _f.__code__ = _code
'''

Q3 = dict(
    id="q3", title="attention over key blocks, with an online softmax", points=(1, 2),
    returns="a tuple `(o, lse)` of NumPy arrays: `o` is `[T, d_v]`, `lse` is `[T]` (float).",
    prose="""\
FlashAttention never holds the `[T, S]` score matrix: it walks the keys in blocks and keeps, for
each query row, the running maximum score $m$, the running sum $\\ell$ of $e^{s - m}$ over the
keys seen so far and an unnormalised output accumulator. When a block raises the maximum, what
was summed under the old maximum is rescaled.

Write `attention_by_blocks(q, k, v, block)` with NumPy for `q [T, d]`, `k [S, d]`, `v [S, d_v]`:
scores $s = q k^\\top / \\sqrt{d}$, output $o = \\operatorname{softmax}(s)\\,v$ (over all `S` keys,
no mask), processing the keys `block` rows at a time (the last block may be shorter) and never
forming more than a `[T, block]` tile of scores. Also return each row's log-sum-exp
$\\text{lse} = \\log \\sum_j e^{s_j}$ — what FlashAttention keeps for the backward pass. Scores can
be in the thousands: never add up raw exponentials. Raise `ValueError` for `block < 1`.
Write it yourself: the grader runs it with the package's attention functions disabled. Values
are checked to `rtol=1e-4`, `atol=1e-5` (FP32 arithmetic passes).""",
    answer="""\
def attention_by_blocks(q, k, v, block):
    ### BEGIN SOLUTION
    if block < 1:
        raise ValueError(f"block={block} must be >= 1")
    T, d = q.shape
    m = np.full(T, -np.inf)
    l = np.zeros(T)
    acc = np.zeros((T, v.shape[1]))
    for j in range(0, k.shape[0], block):
        s = q @ k[j:j + block].T / math.sqrt(d)        # [T, block]: the only scores held
        m_new = np.maximum(m, s.max(axis=1))
        scale = np.exp(m - m_new)                       # rescale what was summed under the old max
        p = np.exp(s - m_new[:, None])
        l = l * scale + p.sum(axis=1)
        acc = acc * scale[:, None] + p @ v[j:j + block]
        m = m_new
    return acc / l[:, None], m + np.log(l)
    ### END SOLUTION""",
    names=("attention_by_blocks",),
    public="""\
def reference(q, k, v):                     # the whole [T, S] score matrix at once (fine for a test)
    s = q @ k.T / math.sqrt(q.shape[1])
    lse = s.max(axis=1) + np.log(np.exp(s - s.max(axis=1, keepdims=True)).sum(axis=1))
    return np.exp(s - lse[:, None]) @ v, lse

rng = np.random.default_rng(0)
q, k, v = rng.normal(size=(3, 8)), rng.normal(size=(10, 8)), rng.normal(size=(10, 5))
k[6:] *= 3000.0                             # the last block's scores reach the thousands: e^s overflows
o, lse = attention_by_blocks(q, k, v, 4)    # blocks of 4, 4 and 2 keys
o_ref, lse_ref = reference(q, k, v)
expect_array(o, o_ref, "attention_by_blocks(q, k, v, 4)[0] (the output)", rtol=1e-4, atol=1e-5)
expect_array(lse, lse_ref, "attention_by_blocks(q, k, v, 4)[1] (the log-sum-exp)", rtol=1e-4)
expect_raises(ValueError, attention_by_blocks, q, k, v, 0, what="attention_by_blocks(q, k, v, 0)")""",
    hidden="""\
def _ref(q, k, v):
    s = q @ k.T / math.sqrt(q.shape[1])
    lse = s.max(axis=1) + np.log(np.exp(s - s.max(axis=1, keepdims=True)).sum(axis=1))
    return np.exp(s - lse[:, None]) @ v, lse
_rng = np.random.default_rng(«hseed»)
for _T, _S, _d, _dv, _blk, _scale in [(5, 37, 16, 8, 11, 3.0), (1, 2, 3, 4, 1, 1.0), (7, 64, 8, 6, 64, 20.0),
                                      (4, 30, 8, 3, 100, 50.0), (6, 129, 32, 16, 16, 300.0)]:
    _q, _k, _v = _rng.normal(size=(_T, _d)), _rng.normal(size=(_S, _d)) * _scale, _rng.normal(size=(_S, _dv))
    _o, _l = attention_by_blocks(_q, _k, _v, _blk)
    _oref, _lref = _ref(_q, _k, _v)
    expect_array(_o, _oref, f"attention_by_blocks(T={_T}, S={_S}, d={_d}, block={_blk})[0]", rtol=1e-4, atol=1e-5)
    expect_array(_l, _lref, f"attention_by_blocks(T={_T}, S={_S}, d={_d}, block={_blk})[1]", rtol=1e-4, atol=1e-6)
_q, _k, _v = _rng.normal(size=(4, 8)), _rng.normal(size=(40, 8)) * 5, _rng.normal(size=(40, 6))
_got = in_kernel(«disable!r», _what="attention_by_blocks(q, k, v, 7) with the package's attention disabled",
                 q=_q, k=_k, v=_v, block=7)
expect_array(_got[0], _ref(_q, _k, _v)[0], "attention_by_blocks with the package's attention functions disabled", rtol=1e-4, atol=1e-5)""",
    alternative="""\
def attention_by_blocks(q, k, v, block):
    # FP32 throughout, the max and sum kept as log-sum-exp, blocks split with array_split
    if not block >= 1:
        raise ValueError("block")
    q32, k32, v32 = (np.asarray(a, dtype=np.float32) for a in (q, k, v))
    lse = np.full(q32.shape[0], -np.inf, dtype=np.float32)
    out = np.zeros((q32.shape[0], v32.shape[1]), dtype=np.float32)
    n_blocks = -(-k32.shape[0] // block)
    for kb, vb in zip(np.array_split(k32, n_blocks), np.array_split(v32, n_blocks)):
        if len(kb) > block:                                    # array_split may even out sizes
            raise AssertionError("block too large")
        s = (q32 @ kb.T) / np.float32(np.sqrt(q32.shape[1]))
        blk_lse = np.logaddexp.reduce(s, axis=1)
        new = np.logaddexp(lse, blk_lse)
        out = out * np.exp(lse - new)[:, None] + np.exp(s - new[:, None]) @ vb
        lse = new
    return out, lse""",
    mistakes=[
        ("""\
def attention_by_blocks(q, k, v, block):
    if block < 1:
        raise ValueError("block")
    num = np.zeros((q.shape[0], v.shape[1]))
    den = np.zeros(q.shape[0])
    for j in range(0, k.shape[0], block):
        p = np.exp(q @ k[j:j + block].T / math.sqrt(q.shape[1]))   # raw exponentials
        num += p @ v[j:j + block]
        den += p.sum(axis=1)
    return num / den[:, None], np.log(den)""",
         "inf or NaN"),
    ],
)
Q3["hidden"] = Q3["hidden"].replace("«disable!r»", repr(_DISABLE))

Q4 = dict(
    id="q4", title="reading K through a block table", points=(1, 1),
    returns="a NumPy array `[seq_len, D]` of the pool's dtype.",
    prose="""\
PagedAttention stores a sequence's cache in fixed-size physical blocks of a shared pool
`pool [n_blocks, block_size, D]`. The sequence's block table lists the physical block that holds
its logical block 0, 1, 2, … Write `paged_gather(pool, block_table, seq_len)` returning the
sequence's first `seq_len` token rows as one contiguous `[seq_len, D]` array, in logical order
(the last block is usually only partly filled; the table may list more blocks than needed).
Raise `ValueError` when the table has too few blocks for `seq_len`.""",
    answer="""\
def paged_gather(pool, block_table, seq_len):
    ### BEGIN SOLUTION
    block_size = pool.shape[1]
    n_needed = -(-seq_len // block_size)
    if n_needed > len(block_table):
        raise ValueError(f"seq_len={seq_len} needs {n_needed} blocks; the table has {len(block_table)}")
    if seq_len == 0:
        return pool[:0, 0]
    rows = pool[np.asarray(block_table[:n_needed])].reshape(-1, pool.shape[2])
    return rows[:seq_len]
    ### END SOLUTION""",
    names=("paged_gather",),
    public="""\
pool = np.arange(5 * 4 * 2, dtype=np.float32).reshape(5, 4, 2)  # 5 blocks of 4 tokens, D = 2
got = paged_gather(pool, [3, 0, 4], 6)                          # 6 tokens: block 3, then half of block 0
expect_array(got, np.concatenate([pool[3], pool[0][:2]]), "paged_gather(pool, [3, 0, 4], 6)", dtype=np.float32)
expect_raises(ValueError, paged_gather, pool, [3], 5, what="paged_gather(pool, [3], 5) (5 tokens need 2 blocks)")""",
    hidden="""\
_rng = np.random.default_rng(«paged_seed»)
_bs = «block_size»
_pool = _rng.normal(size=(11, _bs, 6)).astype(np.float16)
_table = [int(i) for i in _rng.permutation(11)[:7]]
for _n in (1, _bs, _bs + 1, 5 * _bs + 3, 7 * _bs):
    _want = np.stack([_pool[_table[t // _bs], t % _bs] for t in range(_n)])
    expect_array(paged_gather(_pool, _table, _n), _want, f"paged_gather(pool, table, {_n}) with blocks of {_bs}", dtype=np.float16)
expect_raises(ValueError, paged_gather, _pool, _table, 7 * _bs + 1, what=f"paged_gather(pool, 7 blocks, {7 * _bs + 1} tokens)")""",
    alternative="""\
def paged_gather(pool, block_table, seq_len):
    bs = pool.shape[1]
    if len(block_table) * bs < seq_len:
        raise ValueError("block table too short")
    out = np.empty((seq_len, pool.shape[2]), dtype=pool.dtype)
    for t in range(seq_len):                      # one token at a time
        out[t] = pool[block_table[t // bs], t % bs]
    return out""",
    mistakes=[
        ("""\
def paged_gather(pool, block_table, seq_len):
    bs = pool.shape[1]
    n = seq_len // bs                      # whole blocks only: the tail is lost
    if n > len(block_table):
        raise ValueError("short table")
    return pool[np.asarray(block_table[:n], dtype=int)].reshape(-1, pool.shape[2])""",
         "paged_gather(pool, [3, 0, 4], 6)"),
    ],
)

QUESTIONS = [Q1, Q2, Q3, Q4]
