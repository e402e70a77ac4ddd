"""Assignment 08 — the optimisation map (the spec; see tools/grading/spec.py)."""
import llm_dataflow as ldf

TITLE = "Assignment 08 — the optimisation map"

INTRO = """\
Chapter 08 changed one byte account at a time: fewer bits per weight, fewer target steps per
token, KV caches moved between machines. Here you pack INT4 values, quantise a weight group-wise,
count the bytes speculative decoding reads per generated token, and price moving a prompt's KV
cache from a prefill machine to a decode machine.

**How to work.** Replace each `raise NotImplementedError()` with your code and run the test
cell under it: those are the *public* tests, and they check the same types as grading does.
Grading reruns them and adds hidden tests on other inputs. Each question says what it returns.
«points_line»

«run_all»
"""

SETUP = """\
import math
import numpy as np
import llm_dataflow as ldf
from llm_dataflow.checks import expect_int, expect_close, expect_array, expect_equal, expect_raises
"""


def params(rng):
    if rng is None:
        p = dict(alpha=0.8, gamma=4, target="Llama-3.1-70B", draft="Llama-3-8B", kv_model="Llama-3-8B", prompt=8192,
                 link="InfiniBand-NDR", gpu="H100-SXM", hseed=17)
    else:
        p = dict(alpha=rng.choice((0.6, 0.7, 0.75, 0.85, 0.9)), gamma=rng.choice((2, 3, 5, 6)),
                 target=rng.choice(("Llama-3.1-70B", "Llama-2-70B")), draft="Llama-3-8B",
                 kv_model=rng.choice(("Llama-3-8B", "Qwen2.5-7B", "Llama-3.1-70B", "Llama-2-7B")),   # full-attention caches
                 prompt=rng.choice((2048, 4096, 16384)), link=rng.choice(("InfiniBand-NDR", "RoCE-400GbE", "PCIe-Gen5-x16")),
                 gpu=rng.choice(("H100-SXM", "H200", "B200")), hseed=rng.randrange(10**6))
        if p["target"] == "Llama-2-70B":
            p["draft"] = "Llama-2-7B"          # a draft must share the target's vocabulary
    t, d = ldf.model_config(p["target"]), ldf.model_config(p["draft"])
    e = ldf.expected_tokens_per_step(p["alpha"], p["gamma"])
    wt1, wtv, wd = (ldf.weight_bytes_read(t, "bf16", 1), ldf.weight_bytes_read(t, "bf16", p["gamma"] + 1),
                    ldf.weight_bytes_read(d, "bf16", 1))
    spec_b = (wtv + p["gamma"] * wd) / e
    k = ldf.model_config(p["kv_model"])
    xfer = ldf.kv_transfer_time(k, p["prompt"], p["link"])
    step = ldf.decode_step_bounds(k, p["gpu"], 1, p["prompt"]).time_s
    p.update(tokens=e, gb_per_token=spec_b / 1e9, speedup=wt1 / spec_b, plain_gb=wt1 / 1e9,
             kv_bytes=ldf.kv_cache_bytes(k, p["prompt"]), transfer_ms=xfer * 1e3, steps=xfer / step)
    return p


Q1 = dict(
    id="q1", title="packing INT4", points=(1, 2),
    returns="`pack_int4`: a `np.uint8` array of half the length; `unpack_int4`: a `np.uint8` array.",
    prose="""\
Write `pack_int4(values)` and `unpack_int4(packed)`. `values` is a 1-D integer array of even
length with entries in 0…15; pack two per byte, element `2i` in the **low** nibble and `2i+1` in
the high nibble of byte `i`. `unpack_int4` inverts it. `pack_int4` raises `ValueError` for an
odd length or a value outside 0…15.""",
    answer="""\
def pack_int4(values):
    ### BEGIN SOLUTION
    v = np.asarray(values)
    if v.ndim != 1 or v.size % 2:
        raise ValueError(f"values must be 1-D with an even length, got shape {v.shape}")
    if v.size and (v.min() < 0 or v.max() > 15):
        raise ValueError("values must be in 0..15")
    v = v.astype(np.uint8)
    return (v[0::2] | (v[1::2] << 4)).astype(np.uint8)
    ### END SOLUTION


def unpack_int4(packed):
    ### BEGIN SOLUTION
    p = np.asarray(packed, dtype=np.uint8)
    out = np.empty(p.size * 2, dtype=np.uint8)
    out[0::2], out[1::2] = p & 0x0F, p >> 4
    return out
    ### END SOLUTION""",
    names=("pack_int4", "unpack_int4"),
    public="""\
packed = pack_int4(np.array([1, 2, 3, 4]))
expect_array(packed, [0x21, 0x43], "pack_int4([1, 2, 3, 4])", dtype=np.uint8,
             hints=[([0x12, 0x34], "element 2i goes in the LOW nibble: byte i = v[2i] | v[2i+1] << 4")])
expect_array(unpack_int4(packed), [1, 2, 3, 4], "unpack_int4(pack_int4([1, 2, 3, 4]))", dtype=np.uint8)
expect_raises(ValueError, pack_int4, np.array([1, 2, 3]), what="pack_int4([1, 2, 3]) (odd length)")""",
    hidden="""\
_rng = np.random.default_rng(«hseed»)
_v = _rng.integers(0, 16, size=1000)
_p = pack_int4(_v)
expect_array(_p, (_v[0::2] + 16 * _v[1::2]).astype(np.uint8), "pack_int4(1000 random values)", dtype=np.uint8)
expect_array(unpack_int4(_p), _v, "unpack_int4(pack_int4(v))", dtype=np.uint8)
expect_array(pack_int4(np.array([15, 15])), [255], "pack_int4([15, 15])", dtype=np.uint8)
expect_array(pack_int4(np.array([0, 0], dtype=np.int64)), [0], "pack_int4([0, 0])", dtype=np.uint8)
for _bad in (np.array([1, 2, 3]), np.array([16, 0]), np.array([-1, 0])):
    expect_raises(ValueError, pack_int4, _bad, what=f"pack_int4({_bad.tolist()})")""",
    alternative="""\
def pack_int4(values):
    vals = [int(x) for x in values]
    if len(vals) % 2 or any(not 0 <= x <= 15 for x in vals):
        raise ValueError("need an even number of values in 0..15")
    return np.array([lo + 16 * hi for lo, hi in zip(vals[0::2], vals[1::2])], dtype=np.uint8)


def unpack_int4(packed):
    return np.array([n for b in np.asarray(packed).tolist() for n in (b % 16, b // 16)], dtype=np.uint8)""",
    mistakes=[("""\
def pack_int4(values):
    v = np.asarray(values)
    if v.size % 2 or v.min() < 0 or v.max() > 15:
        raise ValueError("bad values")
    return ((v[0::2] << 4) | v[1::2]).astype(np.uint8)        # high nibble first


def unpack_int4(packed):
    p = np.asarray(packed, dtype=np.uint8)
    return np.stack([p >> 4, p & 15], axis=1).reshape(-1).astype(np.uint8)""", "LOW nibble")],
)

Q2 = dict(
    id="q2", title="group-wise asymmetric INT4 quantisation", points=(1, 2),
    returns="a tuple `(q, scale, zero)`: `q` an integer array `[R, C]`, `scale` and `zero` arrays `[R, C // group_size]`.",
    prose="""\
Write `quantize_int4(w, group_size)` for a weight `w [R, C]` (float): split each row into groups
of `group_size` consecutive columns; per group, `scale = (max - min) / 15` (use 1.0 when
max = min), `zero = round(-min / scale)` clipped to 0…15, and
`q = clip(round(w / scale) + zero, 0, 15)`. Raise `ValueError` when `group_size` does not divide
`C`. Dequantisation is `(q - zero) * scale` (given below). Scales are checked to `rtol=1e-6`
(FP32 passes).""",
    setup="""\
def dequantize_int4(q, scale, zero, group_size):
    \"\"\"(q - zero) × scale, each group's scale and zero broadcast over its columns.\"\"\"
    return (np.asarray(q, dtype=np.float64) - np.repeat(zero, group_size, axis=1)) * np.repeat(scale, group_size, axis=1)""",
    answer="""\
def quantize_int4(w, group_size):
    ### BEGIN SOLUTION
    R, C = w.shape
    if group_size <= 0 or C % group_size:
        raise ValueError(f"group_size={group_size} does not divide C={C}")
    g = w.reshape(R, C // group_size, group_size)
    lo, hi = g.min(axis=-1), g.max(axis=-1)
    scale = np.where(hi > lo, (hi - lo) / 15, 1.0)
    zero = np.clip(np.round(-lo / scale), 0, 15)
    q = np.clip(np.round(g / scale[..., None]) + zero[..., None], 0, 15).astype(np.int64)
    return q.reshape(R, C), scale, zero
    ### END SOLUTION""",
    names=("quantize_int4",),
    public="""\
w = np.array([[0.0, 1.5, 3.0, 1.0, -2.0, 2.0, 0.5, 0.0]])
q, scale, zero = quantize_int4(w, 4)
expect_equal((np.shape(q), np.shape(scale), np.shape(zero)), ((1, 8), (1, 2), (1, 2)), "shapes of q, scale, zero")
expect_array(scale, [[0.2, 4 / 15]], "scale (one per group of 4)", rtol=1e-6,
             hints=[([[3 / 16, 0.25]], "15 steps span max − min: divide by 15, not 16"),
                    ([[5 / 15, 5 / 15]], "every group of group_size columns needs its own scale")])
expect_array(dequantize_int4(q, scale, zero, 4), w, "dequantize_int4(quantize_int4(w, 4)) (within one step)", atol=0.27)""",
    hidden="""\
_rng = np.random.default_rng(«hseed»)
_w = _rng.normal(size=(6, 96))
_w[:, :32] *= 100.0                  # groups with very different ranges need their own scales
for _g in (32, 16):
    _q, _s, _z = quantize_int4(_w, _g)
    expect_equal((np.shape(_q), np.shape(_s), np.shape(_z)), ((6, 96), (6, 96 // _g), (6, 96 // _g)), f"shapes (group {_g})")
    assert np.issubdtype(np.asarray(_q).dtype, np.integer), f"q must be an integer array, got dtype {np.asarray(_q).dtype}"
    assert np.asarray(_q).min() >= 0 and np.asarray(_q).max() <= 15, "q must be in 0..15"
    _span = _w.reshape(6, -1, _g)
    expect_array(_s, (_span.max(-1) - _span.min(-1)) / 15, f"scale (group {_g})", rtol=1e-6)
    _err = np.abs(dequantize_int4(_q, _s, _z, _g) - _w)
    _bound = np.repeat(np.asarray(_s, dtype=np.float64), _g, axis=1) * (1 + 1e-6)
    assert (_err <= _bound).all(), f"dequantised error exceeds one step (group {_g}): worst {float((_err / _bound).max()):.3f} steps"
_q, _s, _z = quantize_int4(np.full((2, 8), 0.25), 8)     # a constant group: scale 1.0
expect_array(_s, np.ones((2, 1)), "scale of a constant group")
expect_raises(ValueError, quantize_int4, _w, 40, what="quantize_int4(w [6, 96], 40)")""",
    alternative="""\
def quantize_int4(w, group_size):
    w = np.asarray(w, dtype=np.float32)
    R, C = w.shape
    if C % group_size != 0:
        raise ValueError("group_size must divide C")
    q = np.empty((R, C), dtype=np.int32)
    scale = np.empty((R, C // group_size), dtype=np.float32)
    zero = np.empty((R, C // group_size), dtype=np.float32)
    for r in range(R):
        for gi in range(C // group_size):
            grp = w[r, gi * group_size:(gi + 1) * group_size]
            s = (grp.max() - grp.min()) / 15 if grp.max() > grp.min() else np.float32(1.0)
            z = min(max(round(float(-grp.min() / s)), 0), 15)
            q[r, gi * group_size:(gi + 1) * group_size] = np.clip(np.rint(grp / s) + z, 0, 15)
            scale[r, gi], zero[r, gi] = s, z
    return q, scale, zero""",
    mistakes=[("""\
def quantize_int4(w, group_size):
    R, C = w.shape
    if C % group_size:
        raise ValueError("group_size")
    g = w.reshape(R, C // group_size, group_size)
    lo, hi = g.min(axis=-1), g.max(axis=-1)
    scale = np.where(hi > lo, (hi - lo) / 16, 1.0)
    zero = np.clip(np.round(-lo / scale), 0, 15)
    q = np.clip(np.round(g / scale[..., None]) + zero[..., None], 0, 15).astype(np.int64)
    return q.reshape(R, C), scale, zero""", "divide by 15")],
)

Q3 = dict(
    id="q3", title="bytes per token with speculative decoding", points=(1, 1),
    returns="three floats: `tokens_per_round`, `gb_per_token` (GB) and `speedup`, to 0.1 %.",
    prose="""\
Speculative decoding pairs «target» with the draft «draft» (same vocabulary), both BF16, at batch
1. In each round the draft proposes γ = «gamma» tokens (γ decode steps of the draft), then the
target verifies them in **one** forward over γ + 1 positions. If each draft token is accepted
independently with probability α = «alpha», a round yields on average
$(1 - \\alpha^{\\gamma+1}) / (1 - \\alpha)$ tokens (Leviathan et al. 2023). Store it in
`tokens_per_round`.

Count the weight bytes a round reads, as chapter 05 counts a forward: the target's verify
forward reads its weights once (`ldf.weight_bytes_read(target, "bf16", γ + 1)`: γ + 1 gathered
embedding rows), and each draft step reads the draft's once (`ldf.weight_bytes_read(draft, "bf16", 1)`).
Store the weight **GB read per generated token** in `gb_per_token`, and in `speedup` how many
times fewer bytes per token that is than plain decoding of the target (one step per token,
`ldf.weight_bytes_read(target, "bf16", 1)` each). While every step is memory-bound, that ratio
is the speed-up.""",
    answer="""\
### BEGIN SOLUTION
_t, _d = ldf.model_config("«target»"), ldf.model_config("«draft»")
tokens_per_round = (1 - «alpha» ** («gamma» + 1)) / (1 - «alpha»)
_round = ldf.weight_bytes_read(_t, "bf16", «gamma» + 1) + «gamma» * ldf.weight_bytes_read(_d, "bf16", 1)
gb_per_token = _round / tokens_per_round / 1e9
speedup = ldf.weight_bytes_read(_t, "bf16", 1) / (_round / tokens_per_round)
### END SOLUTION""",
    names=("tokens_per_round", "gb_per_token", "speedup"),
    public="""\
expect_close(tokens_per_round, «tokens:.6f», "tokens_per_round", rel=1e-6,
             hints={«tokens» - 1: "the target always adds its own token: 1 + α + … + α^γ"})
expect_close(gb_per_token, «gb_per_token:.4f», "gb_per_token", rel=0.05)           # 5 % here, 0.1 % when graded
expect_close(speedup, «plain_gb» / gb_per_token, "speedup (plain GB per token / gb_per_token)", rel=0.05)""",
    hidden="""\
_t, _d = ldf.model_config("«target»"), ldf.model_config("«draft»")
_e = ldf.expected_tokens_per_step(«alpha», «gamma»)
_round = ldf.weight_bytes_read(_t, "bf16", «gamma» + 1) + «gamma» * ldf.weight_bytes_read(_d, "bf16", 1)
expect_close(tokens_per_round, _e, "tokens_per_round", rel=1e-6)
expect_close(gb_per_token, _round / _e / 1e9, "gb_per_token", rel=1e-3,
             hints={(ldf.weight_bytes_read(_t, "bf16", «gamma» + 1) * («gamma» + 1) + «gamma» * ldf.weight_bytes_read(_d, "bf16", 1)) / _e / 1e9:
                    "the target verifies all γ + 1 positions in one forward: its weights are read once per round"})
expect_close(speedup, ldf.weight_bytes_read(_t, "bf16", 1) / (_round / _e), "speedup", rel=1e-3)""",
    alternative="""\
_a, _g = «alpha», «gamma»
tokens_per_round = sum(_a ** i for i in range(_g + 1))
_wt = sum(t.numel for t in ldf.tensor_specs(ldf.model_config("«target»")) if t.role != "embedding") * 2
_dc = ldf.model_config("«draft»")
_wd = sum(t.numel for t in ldf.tensor_specs(_dc) if t.role != "embedding") * 2 + _dc.d_model * 2
_tc = ldf.model_config("«target»")
_bytes = (_wt + (_g + 1) * _tc.d_model * 2 + _g * _wd) / tokens_per_round
gb_per_token = np.float32(_bytes / 1e9)
speedup = np.float32((_wt + _tc.d_model * 2) / _bytes)""",
    mistakes=[("""\
_t, _d = ldf.model_config("«target»"), ldf.model_config("«draft»")
tokens_per_round = «alpha» * (1 - «alpha» ** «gamma») / (1 - «alpha»)
gb_per_token = (ldf.weight_bytes(_t, "bf16") + «gamma» * ldf.weight_bytes(_d, "bf16")) / tokens_per_round / 1e9
speedup = ldf.weight_bytes(_t, "bf16") / 1e9 / gb_per_token""", "its own token")],
)

Q4 = dict(
    id="q4", title="moving the KV cache between prefill and decode machines", points=(1, 1),
    returns="`kv_bytes` (an `int`, bytes), `transfer_ms` (a float, milliseconds, to 0.1 %) and `decode_steps` (a float, to 0.1 %).",
    prose="""\
In a disaggregated deployment the prefill machine sends the prompt's KV cache to the decode
machine. For «kv_model» (`ldf.model_config`), a «prompt»-token prompt and a BF16 cache, store the
bytes sent in `kv_bytes`, and the transfer time over one «link» link
(`ldf.link("«link»")`: its per-direction bandwidth, plus its latency once) in milliseconds in
`transfer_ms`. How many decode steps of that sequence (batch 1, «prompt» tokens of context, the
lower bound `ldf.decode_step_bounds` gives on an «gpu») does the transfer last? Store it in
`decode_steps`.""",
    answer="""\
### BEGIN SOLUTION
_c, _ln = ldf.model_config("«kv_model»"), ldf.link("«link»")
kv_bytes = ldf.kv_cache_bytes(_c, «prompt»)
_s = _ln.latency_s + kv_bytes / _ln.bandwidth_per_direction
transfer_ms = _s * 1e3
decode_steps = _s / ldf.decode_step_bounds(_c, "«gpu»", 1, «prompt»).time_s
### END SOLUTION""",
    names=("kv_bytes", "transfer_ms", "decode_steps"),
    public="""\
expect_int(kv_bytes, «kv_bytes», "kv_bytes («kv_model», «prompt» tokens, BF16)")
expect_close(transfer_ms, «transfer_ms:.5f», "transfer_ms", rel=0.05,
             hints={«transfer_ms» * 8: "the link's bandwidth is in bytes per second already (not bits)"})
expect_close(decode_steps, transfer_ms / 1e3 / ldf.decode_step_bounds("«kv_model»", "«gpu»", 1, «prompt»).time_s,
             "decode_steps (from your transfer_ms)", rel=0.05)""",
    hidden="""\
_c = ldf.model_config("«kv_model»")
_s = ldf.kv_transfer_time(_c, «prompt», "«link»")
expect_int(kv_bytes, ldf.kv_cache_bytes(_c, «prompt»), "kv_bytes")
expect_close(transfer_ms, _s * 1e3, "transfer_ms", rel=1e-3)
expect_close(decode_steps, _s / ldf.decode_step_bounds(_c, "«gpu»", 1, «prompt»).time_s, "decode_steps", rel=1e-3)""",
    alternative="""\
_c = ldf.model_config("«kv_model»")
kv_bytes = np.int64(2) * _c.n_layers * _c.n_kv_heads * _c.head_dim * «prompt» * 2
transfer_ms = ldf.kv_transfer_time("«kv_model»", «prompt», "«link»") * 1000
decode_steps = transfer_ms / (1000 * ldf.decode_step_lower_bound("«kv_model»", "«gpu»", 1, «prompt»))""",
    mistakes=[("""\
_c, _ln = ldf.model_config("«kv_model»"), ldf.link("«link»")
kv_bytes = _c.n_layers * _c.n_kv_heads * _c.head_dim * «prompt» * 2
transfer_ms = kv_bytes / _ln.bandwidth_per_direction * 1e3
decode_steps = transfer_ms / 1e3 / ldf.decode_step_bounds(_c, "«gpu»", 1, «prompt»).time_s""", "kv_bytes")],
)

QUESTIONS = [Q1, Q2, Q3, Q4]
