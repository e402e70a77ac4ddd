"""Assignment 05 — prefill and decode on the roofline (the spec; see tools/grading/spec.py)."""
import llm_dataflow as ldf

TITLE = "Assignment 05 — prefill and decode on the roofline"

INTRO = """\
Chapter 05 bounded a step from below by the bytes it must move and the FLOPs it must do, with
one accounting model (`llm_dataflow.core.accounting`) that every calculator and `plan` share.
Here you apply it to «model» on an «gpu», write the decode bound yourself, find when batching
stops helping once every sequence brings its own KV cache, and find where a prefill turns
compute-bound.

**How to work.** Replace each `raise NotImplementedError()` with your code and run the test
cell under it: those are the *public* tests, and they check the same types as grading does.
Grading reruns them and adds hidden tests on other inputs and tighter tolerances. Each question
says what it returns. «points_line»

«run_all»
"""

SETUP = """\
import math
import llm_dataflow as ldf
from llm_dataflow.checks import expect_int, expect_close, expect_array, expect_equal, expect_raises
"""

_MODELS = ("Llama-2-7B", "Llama-3-8B", "Mistral-7B-v0.1", "Qwen2.5-7B")   # full attention up to their prompts
_GPUS = ("A100-80GB-SXM", "H100-SXM", "H200", "B200")


def _t_cross(c, hw) -> int:
    t = 1
    while ldf.prefill_bounds(c, hw, t).bound != "compute":
        t += 1
    return t


def params(rng):
    if rng is None:
        p = dict(model="Llama-3-8B", gpu="H100-SXM", prompt=2048, hseed=11)
    else:
        p = dict(model=rng.choice(_MODELS), gpu=rng.choice(_GPUS), prompt=rng.choice((1024, 3000, 4096)),
                 hseed=rng.randrange(10**6))
    c, hw = ldf.model_config(p["model"]), ldf.hardware(p["gpu"])
    assert ldf.memory_fit(c, hw).fits, p       # every version's model fits its GPU in BF16
    d = ldf.decode_step_bounds(c, hw, 1, 0)
    pre = ldf.prefill_bounds(c, hw, p["prompt"])
    p.update(bw=hw.hbm_bandwidth, peak=hw.flops("bf16"), step_ms=d.time_s * 1e3, table_ms=(d.nbytes + (c.vocab_size - 1) * c.d_model * 2) / hw.hbm_bandwidth * 1e3,
             prefill_ms=pre.time_s * 1e3, naive_prefill_ms=2 * ldf.param_count(c) * p["prompt"] / hw.flops("bf16") * 1e3,
             t_cross=_t_cross(c, hw), b_star=int(ldf.critical_batch(7e9, hw)))
    return p


Q1 = dict(
    id="q1", title="a decode step's lower bound", points=(1, 1),
    returns="`step_ms` (a float, milliseconds, to 0.1 %) and `binds` (the string \"memory\" or \"compute\").",
    prose="""\
«model» in BF16 fits on one «gpu». At batch 1 with an empty cache, a decode step must at least
move its bytes at the full HBM bandwidth, and at least do its FLOPs at the full BF16 peak; its
lower bound is the larger of the two times. Count as chapter 05 does:

* bytes: every stored weight once, except the input embedding table, of which only the one
  gathered row; plus the K and V the new token writes (`ldf.kv_bytes_per_token`);
* FLOPs: 2 per weight of every matrix product (every projection and the LM head), plus the
  attention of the one new token over itself.

Store the bound in `step_ms` and which term binds in `binds`. (The package computes it too:
check yourself with `ldf.decode_step_bounds` once you have counted.)""",
    answer="""\
### BEGIN SOLUTION
_b = ldf.decode_step_bounds("«model»", "«gpu»", batch=1, context_len=0)
step_ms = _b.time_s * 1e3
binds = _b.bound
### END SOLUTION""",
    names=("step_ms", "binds"),
    public="""\
expect_close(step_ms, «step_ms:.4f», "step_ms («model», «gpu», batch 1)", rel=0.05,    # 5 % here, 0.1 % when graded
             hints={«table_ms»: "only one row of the embedding table is read, not the whole table"})
expect_equal(binds, "memory", "binds")""",
    hidden="""\
_b = ldf.decode_step_bounds("«model»", "«gpu»", 1, 0)
expect_close(step_ms, _b.time_s * 1e3, "step_ms", rel=1e-3,
             hints={«table_ms»: "only one row of the embedding table is read, not the whole table"})""",
    alternative="""\
_c, _hw = ldf.model_config("«model»"), ldf.hardware("«gpu»")
_bytes = sum(t.numel * 2 for t in ldf.tensor_specs(_c) if t.role != "embedding") + _c.d_model * 2 + ldf.kv_bytes_per_token(_c)
_flops = 2 * ldf.matmul_params(_c) + ldf.attention_flops_per_token(_c, 1)
_t = max(_bytes / _hw.hbm_bandwidth, _flops / _hw.flops("bf16"))
step_ms = 1e3 * _t
binds = "memory" if _bytes / _hw.hbm_bandwidth >= _flops / _hw.flops("bf16") else "compute\"""",
    mistakes=[("""\
_c, _hw = ldf.model_config("«model»"), ldf.hardware("«gpu»")
step_ms = ldf.weight_bytes(_c, "bf16") / _hw.hbm_bandwidth * 1e3
binds = "memory\"""", "embedding table")],
)

Q2 = dict(
    id="q2", title="the decode-step bound of a batch", points=(1, 2),
    returns="a dict: `\"memory_s\"`, `\"compute_s\"`, `\"bound_s\"` (floats, seconds) and `\"binding\"` (\"memory\" or \"compute\").",
    prose="""\
Write `decode_step_bound(weight_bytes, kv_bytes_per_token, context_len, batch, flops_per_token,
hbm_bandwidth, peak_flops)` for a batch of `batch` sequences that each hold `context_len` cached
tokens and add one:

* `"memory_s"`: the weights read once for the whole batch, plus, for every sequence, its cached
  K and V read (`context_len` tokens) and its new token's K and V written — over `hbm_bandwidth`;
* `"compute_s"`: `batch × flops_per_token` over `peak_flops`;
* `"bound_s"`: the larger; `"binding"`: which one is larger (`"memory"` on a tie).

Raise `ValueError` for `batch < 1` or `context_len < 0`.""",
    answer="""\
def decode_step_bound(weight_bytes, kv_bytes_per_token, context_len, batch, flops_per_token,
                      hbm_bandwidth, peak_flops):
    ### BEGIN SOLUTION
    if batch < 1:
        raise ValueError(f"batch={batch} must be >= 1")
    if context_len < 0:
        raise ValueError(f"context_len={context_len} must be >= 0")
    mem = (weight_bytes + batch * (context_len + 1) * kv_bytes_per_token) / hbm_bandwidth
    comp = batch * flops_per_token / peak_flops
    return {"memory_s": mem, "compute_s": comp, "bound_s": max(mem, comp),
            "binding": "memory" if mem >= comp else "compute"}
    ### END SOLUTION""",
    names=("decode_step_bound",),
    public="""\
r = decode_step_bound(100.0, 1.0, 10, 2, 5.0, 10.0, 1.0)
expect_close(r["memory_s"], (100 + 2 * 11 * 1) / 10, "decode_step_bound(100, 1, 10, 2, 5, 10, 1)['memory_s']",
             hints={(100 + 10) / 10: "every sequence reads its own KV cache: multiply by batch",
                    (2 * 100 + 2 * 11) / 10: "the weights are read once per step, not once per sequence",
                    (100 + 2 * 10) / 10: "each sequence also writes its new token's K and V"})
expect_close(r["compute_s"], 10.0, "decode_step_bound(...)['compute_s']")
expect_close(r["bound_s"], 12.2, "decode_step_bound(...)['bound_s']")
expect_equal(r["binding"], "memory", "decode_step_bound(...)['binding']")
expect_equal(decode_step_bound(10.0, 0.0, 0, 2, 5.0, 1.0, 1.0)["binding"], "memory", "binding on a tie")""",
    hidden="""\
for _name, _gpu in (("«model»", "«gpu»"), ("Llama-3.1-70B", "B200"), ("Qwen2.5-7B", "A100-80GB-SXM")):
    _c, _h = ldf.model_config(_name), ldf.hardware(_gpu)
    _w, _kv = ldf.weight_bytes_read(_c, "bf16", 1), ldf.kv_bytes_per_token(_c)
    for _b, _ctx in [(1, 0), (8, 4096), (512, 1000), (2048, 0)]:
        _got = decode_step_bound(_w, _kv, _ctx, _b, 2 * ldf.matmul_params(_c), _h.hbm_bandwidth, _h.flops("bf16"))
        _m = (_w + _b * (_ctx + 1) * _kv) / _h.hbm_bandwidth
        _f = _b * 2 * ldf.matmul_params(_c) / _h.flops("bf16")
        expect_close(_got["memory_s"], _m, f"memory_s ({_name}, batch {_b}, context {_ctx})", rel=1e-6)
        expect_close(_got["compute_s"], _f, f"compute_s ({_name}, batch {_b}, context {_ctx})", rel=1e-6)
        expect_close(_got["bound_s"], max(_m, _f), f"bound_s ({_name}, batch {_b}, context {_ctx})", rel=1e-6)
        expect_equal(_got["binding"], "memory" if _m >= _f else "compute", f"binding ({_name}, batch {_b}, context {_ctx})")
for _bad in [(1, 1, 0, 0, 1, 1, 1), (1, 1, -1, 1, 1, 1, 1)]:
    expect_raises(ValueError, decode_step_bound, *_bad, what=f"decode_step_bound{_bad}")""",
    alternative="""\
import numpy as np

def decode_step_bound(weight_bytes, kv_bytes_per_token, context_len, batch, flops_per_token,
                      hbm_bandwidth, peak_flops):
    if batch <= 0 or context_len < 0:
        raise ValueError("batch must be >= 1 and context_len >= 0")
    kv = np.float32(batch) * (np.float32(context_len) + 1) * np.float32(kv_bytes_per_token)
    t = {"memory_s": (np.float32(weight_bytes) + kv) / np.float32(hbm_bandwidth),
         "compute_s": np.float32(batch) * np.float32(flops_per_token) / np.float32(peak_flops)}
    t["bound_s"] = max(t.values())
    t["binding"] = "compute" if t["compute_s"] > t["memory_s"] else "memory"
    return t""",
    mistakes=[("""\
def decode_step_bound(weight_bytes, kv_bytes_per_token, context_len, batch, flops_per_token,
                      hbm_bandwidth, peak_flops):
    if batch < 1 or context_len < 0:
        raise ValueError("bad input")
    mem = (weight_bytes + context_len * kv_bytes_per_token) / hbm_bandwidth
    comp = batch * flops_per_token / peak_flops
    return {"memory_s": mem, "compute_s": comp, "bound_s": max(mem, comp), "binding": "memory" if mem >= comp else "compute"}""",
               "multiply by batch")],
)

Q3 = dict(
    id="q3", title="when does batching stop helping?", points=(1, 1),
    returns="an `int` (a batch size), or `None`.",
    prose="""\
A decode step of $B$ sequences reads the weights once (`weight_bytes`) and each sequence's KV
traffic (`kv_bytes_per_seq`: its cache read and its new token's K and V written), and does
$B \\times$ `flops_per_seq` FLOPs. Write `critical_batch(weight_bytes, kv_bytes_per_seq,
flops_per_seq, hbm_bandwidth, peak_flops, max_batch=2**20)`: the smallest integer $B \\ge 1$ at
which the step is **compute-bound** (compute time strictly longer than memory time), or `None`
if no $B \\le$ `max_batch` is. Without KV traffic the answer is the chapter's critical batch;
with it, each added sequence brings its own bytes as well as its FLOPs — think before you
loop.""",
    answer="""\
def critical_batch(weight_bytes, kv_bytes_per_seq, flops_per_seq, hbm_bandwidth, peak_flops, max_batch=2**20):
    ### BEGIN SOLUTION
    from fractions import Fraction
    W, k, f = Fraction(weight_bytes), Fraction(kv_bytes_per_seq), Fraction(flops_per_seq)
    bw, peak = Fraction(hbm_bandwidth), Fraction(peak_flops)
    gain = f / peak - k / bw                  # seconds of compute minus memory each sequence adds
    if gain <= 0:
        return None                           # the KV traffic grows as fast as the FLOPs
    b = max(1, math.floor(W / bw / gain) + 1)  # smallest B with B * gain > W / bw
    return int(b) if b <= max_batch else None
    ### END SOLUTION""",
    names=("critical_batch",),
    public="""\
h = ldf.hardware("H100-SXM")
expect_int(critical_batch(14e9, 0, 14e9, h.hbm_bandwidth, h.flops("bf16")), 296,
           "critical_batch(7e9 BF16 weights, no KV, H100 SXM) (the chapter's 296)")
expect_equal(critical_batch(15.0e9, 134.4e6, 15.0e9, h.hbm_bandwidth, h.flops("bf16")), None,
             "critical_batch with 134 MB of KV traffic per sequence (Llama-3-8B at a 1024-token context: never compute-bound)")
expect_int(critical_batch(10.0, 1.0, 4.0, 1.0, 2.0), 11, "critical_batch(10, 1, 4, 1, 2)")""",
    hidden="""\
import random as _random
from fractions import Fraction as _Fr
def _ref(W, k, f, bw, peak, mx=2**20):
    gain = _Fr(f) / _Fr(peak) - _Fr(k) / _Fr(bw)
    if gain <= 0:
        return None
    b = max(1, math.floor(_Fr(W) / _Fr(bw) / gain) + 1)
    return b if b <= mx else None
_r = _random.Random(«hseed»)
_h = ldf.hardware("«gpu»")
for _name in ("«model»", "Llama-3.1-70B", "Qwen2.5-7B"):
    _c = ldf.model_config(_name)
    _w, _kvt, _f = ldf.weight_bytes_read(_c, "bf16", 1), ldf.kv_bytes_per_token(_c), 2 * ldf.matmul_params(_c)
    for _ctx in (0, 64, 256, 4096):
        _args = (_w, _kvt * (_ctx + 1), _f, _h.hbm_bandwidth, _h.flops("bf16"))
        _want = _ref(*_args)
        _got = critical_batch(*_args)
        if _want is None:
            expect_equal(_got, None, f"critical_batch({_name}, context {_ctx}, «gpu»)")
        else:
            expect_int(_got, _want, f"critical_batch({_name}, context {_ctx}, «gpu»)")
for _ in range(30):
    _args = (_r.randrange(1, 10**6), _r.randrange(0, 100), _r.randrange(1, 10**4), _r.randrange(1, 100), _r.randrange(1, 10**4))
    _want, _got = _ref(*_args, mx=10**6), critical_batch(*_args, max_batch=10**6)
    if _want is None:
        expect_equal(_got, None, f"critical_batch{_args}")
    else:
        expect_int(_got, _want, f"critical_batch{_args}")
expect_equal(critical_batch(10**9, 0, 1, 1, 1, max_batch=100), None, "critical_batch(...) beyond max_batch")""",
    alternative="""\
def critical_batch(weight_bytes, kv_bytes_per_seq, flops_per_seq, hbm_bandwidth, peak_flops, max_batch=2**20):
    # cross-multiplied, so that integers stay exact: B*f*bw > (W + B*k)*peak
    if flops_per_seq * hbm_bandwidth <= kv_bytes_per_seq * peak_flops:
        return None
    lo, hi = 1, max_batch                      # bisection on the first compute-bound batch
    def compute_bound(B):
        return B * flops_per_seq * hbm_bandwidth > (weight_bytes + B * kv_bytes_per_seq) * peak_flops
    if not compute_bound(hi):
        return None
    while lo < hi:
        mid = (lo + hi) // 2
        if compute_bound(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo""",
    mistakes=[("""\
def critical_batch(weight_bytes, kv_bytes_per_seq, flops_per_seq, hbm_bandwidth, peak_flops, max_batch=2**20):
    return math.ceil(weight_bytes * peak_flops / (flops_per_seq * hbm_bandwidth))     # KV ignored""", "never compute-bound")],
)

Q4 = dict(
    id="q4", title="the prefill bound, and where prefill turns compute-bound", points=(1, 1),
    returns="`prefill_ms` (a float, milliseconds, to 0.1 %) and `t_cross` (an `int`, tokens).",
    prose="""\
A prefill of `T` prompt tokens of «model» on an «gpu», counted as chapter 05 counts it:

* FLOPs: 2 per weight of every projection for each of the `T` tokens; the LM head only for the
  **last** position (only its logits pick the next token); and causal attention: in each layer,
  query `t` (1 … `T`) attends to `t` keys at `4 × n_heads × head_dim` FLOPs per key (scores and
  mix);
* bytes: the weights read once (only the `T` gathered rows of the embedding table, at most all
  of it) plus the K and V written for all `T` tokens.

Store the lower bound for `T` = «prompt» in `prefill_ms`, and in `t_cross` the smallest `T` whose
prefill is compute-bound (compute time strictly longer than memory time). The rule of thumb
`2 × param_count × T` FLOPs is not the count asked for here.""",
    answer="""\
### BEGIN SOLUTION
prefill_ms = ldf.prefill_bounds("«model»", "«gpu»", «prompt»).time_s * 1e3
t_cross = 1
while ldf.prefill_bounds("«model»", "«gpu»", t_cross).bound != "compute":
    t_cross += 1
### END SOLUTION""",
    names=("prefill_ms", "t_cross"),
    public="""\
expect_close(prefill_ms, «prefill_ms:.4f», "prefill_ms («model», «gpu», «prompt» tokens)", rel=0.05,   # 5 % here
             hints={«naive_prefill_ms»: "2 × param_count × T counts the embedding gather and an LM head at every position"})
expect_int(t_cross, t_cross, "t_cross (an integer: its value is checked when graded)")""",
    hidden="""\
_b = ldf.prefill_bounds("«model»", "«gpu»", «prompt»)
expect_close(prefill_ms, _b.time_s * 1e3, "prefill_ms", rel=1e-3,
             hints={«naive_prefill_ms»: "2 × param_count × T counts the embedding gather and an LM head at every position"})
_t = 1
while ldf.prefill_bounds("«model»", "«gpu»", _t).bound != "compute":
    _t += 1
expect_int(t_cross, _t, "t_cross")""",
    alternative="""\
_c, _hw = ldf.model_config("«model»"), ldf.hardware("«gpu»")
_head = _c.vocab_size * _c.d_model
_body = ldf.matmul_params(_c) - _head
_kvt = ldf.kv_bytes_per_token(_c)
_w_no_table = sum(t.numel * 2 for t in ldf.tensor_specs(_c) if t.role != "embedding")

def _times(T):
    flops = 2 * _body * T + 2 * _head + _c.n_layers * 4 * _c.n_heads * _c.head_dim * T * (T + 1) // 2
    nbytes = _w_no_table + min(T, _c.vocab_size) * _c.d_model * 2 + T * _kvt
    return flops / _hw.flops("bf16"), nbytes / _hw.hbm_bandwidth

prefill_ms = 1e3 * max(_times(«prompt»))
t_cross = next(T for T in range(1, 10**6) if _times(T)[0] > _times(T)[1])""",
    mistakes=[("""\
_c, _hw = ldf.model_config("«model»"), ldf.hardware("«gpu»")
prefill_ms = 2 * ldf.param_count(_c) * «prompt» / _hw.flops("bf16") * 1e3
t_cross = math.ceil(ldf.ridge_point("«gpu»", "bf16"))""", "LM head at every position")],
)

QUESTIONS = [Q1, Q2, Q3, Q4]
