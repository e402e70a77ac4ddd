"""Assignment 01 — model loading (the spec; see tools/grading/spec.py)."""
import llm_dataflow as ldf

TITLE = "Assignment 01 — model loading"

INTRO = """\
Chapter 01 read a real `.safetensors` header by hand, counted a model's bytes in GB and GiB,
asked what fits on a GPU, and priced quantised weights. This assignment asks you to do the same
for «model» and «gpu».

**How to work.** Replace each `raise NotImplementedError()` with your code and run the test
cell under it: those are the *public* tests, and they check the same types as grading does.
Grading reruns them and adds hidden tests on other inputs (other files, models and sizes) and
tighter tolerances. Each question says what it returns. GB = 10⁹ bytes, GiB = 2³⁰ bytes.
«points_line»

«run_all»
"""

SETUP = """\
import json
import math
import struct
import numpy as np
import llm_dataflow as ldf
from safetensors.numpy import save as save_safetensors
from llm_dataflow.checks import expect_int, expect_close, expect_array, expect_equal, expect_raises
"""

_MODELS = ("Llama-3.1-70B", "Llama-2-70B", "Llama-3-8B", "Qwen2.5-7B", "Mistral-7B-v0.1")
_GPUS = ("A100-80GB-SXM", "H100-SXM", "H200", "B200")


def params(rng):
    if rng is None:
        p = dict(model="Llama-3.1-70B", gpu="H100-SXM", q4_model="Llama-2-7B", group=128, hseed=3)
    else:
        p = dict(model=rng.choice(_MODELS), gpu=rng.choice(_GPUS), q4_model=rng.choice(("Llama-2-7B", "Llama-3-8B", "Mistral-7B-v0.1")),
                 group=rng.choice((64, 128)), hseed=rng.randrange(10**6))
    c = ldf.model_config(p["model"])
    b = ldf.weight_bytes(c, "bf16")
    p.update(bytes=b, gb=b / 1e9, gib=b / 2**30, mem_gb=ldf.hardware(p["gpu"]).memory_bytes / 1e9)
    q = ldf.QuantSpec.int4_groupwise(group_size=p["group"], scale_dtype="fp16", zero_point=True)
    qc = ldf.model_config(p["q4_model"])
    p.update(bits=4 + (16 + 4) / p["group"], q4_gb=ldf.weight_bytes_read(qc, "bf16", 1, quant=q) / 1e9,
             q4_naive=ldf.param_count(qc) * (4 + 20 / p["group"]) / 8 / 1e9)
    return p


Q1 = dict(
    id="q1", title="parse a safetensors header", points=(1, 2),
    returns="a dict `{name: {\"dtype\": str, \"shape\": list, \"nbytes\": int}}`, one entry per tensor.",
    prose="""\
A `.safetensors` file starts with an 8-byte **little-endian** unsigned integer $N$, then $N$
bytes of JSON mapping each tensor name to `{"dtype", "shape", "data_offsets": [begin, end]}`
(offsets into the data that follows the header), plus an optional `"__metadata__"` entry that is
not a tensor. Write `parse_header(raw)` taking the file's bytes and returning, for every tensor,
its dtype string, its shape as a list and its size in bytes — without the `safetensors` library
(the setup cell imports its `save` only to make test files).""",
    answer="""\
def parse_header(raw):
    ### BEGIN SOLUTION
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        out[name] = {"dtype": info["dtype"], "shape": list(info["shape"]), "nbytes": end - begin}
    return out
    ### END SOLUTION""",
    names=("parse_header",),
    public="""\
raw = save_safetensors({"w": np.zeros((2, 3), dtype=np.float32), "b": np.ones(5, dtype=np.int8)},
                       metadata={"format": "pt"})
got = parse_header(raw)
expect_equal(sorted(got), ["b", "w"], "parse_header(...) keys (\\"__metadata__\\" is not a tensor)")
expect_equal(got["w"]["dtype"], "F32", "parse_header(...)['w']['dtype']")
expect_equal(list(got["w"]["shape"]), [2, 3], "parse_header(...)['w']['shape']")
expect_int(got["w"]["nbytes"], 24, "parse_header(...)['w']['nbytes']")
expect_int(got["b"]["nbytes"], 5, "parse_header(...)['b']['nbytes'] (an I8 tensor of 5)")""",
    hidden="""\
_rng = np.random.default_rng(«hseed»)
_tensors = {"model.embed_tokens.weight": np.ones((17, 5), dtype=np.float16),
            "model.layers.0.mlp.up_proj.weight": np.ones((3, 7), dtype=np.int8),
            "scalar": np.array(3.0, dtype=np.float64), "empty": np.zeros((0, 4), dtype=np.float32),
            "lm_head.weight": _rng.normal(size=(int(_rng.integers(1, 50)), 6)).astype(np.float32)}
for _meta in ({"format": "pt", "note": "x" * 300}, None):
    _got = parse_header(save_safetensors(_tensors, metadata=_meta))
    expect_equal(sorted(_got), sorted(_tensors), "parse_header keys")
    for _k, _t in _tensors.items():
        expect_equal(list(_got[_k]["shape"]), list(_t.shape), f"shape of {_k}")
        expect_int(_got[_k]["nbytes"], _t.nbytes, f"nbytes of {_k}")
    expect_equal(_got["model.layers.0.mlp.up_proj.weight"]["dtype"], "I8", "dtype of an int8 tensor")
    expect_equal(_got["model.embed_tokens.weight"]["dtype"], "F16", "dtype of a float16 tensor")""",
    alternative="""\
def parse_header(raw):
    n = int(np.frombuffer(raw[:8], dtype="<u8")[0])
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    header.pop("__metadata__", None)
    return {k: dict(dtype=v["dtype"], shape=tuple(v["shape"]),
                    nbytes=np.int64(v["data_offsets"][1]) - v["data_offsets"][0]) for k, v in header.items()}""",
    mistakes=[("""\
def parse_header(raw):
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n])
    return {k: {"dtype": v.get("dtype"), "shape": v.get("shape"), "nbytes": 4 * math.prod(v.get("shape", []))}
            for k, v in header.items()}""", "__metadata__")],
)

Q2 = dict(
    id="q2", title="GB and GiB", points=(1, 1),
    returns="two floats: `size_gb` (GB) and `size_gib` (GiB), to 0.01 %.",
    prose="""\
How many bytes do the BF16 weights of «model» take, counted exactly
(`ldf.model_config("«model»")`, every tensor of `ldf.tensor_specs`)? Store the size in decimal
gigabytes in `size_gb` and in binary gibibytes in `size_gib`.""",
    answer="""\
### BEGIN SOLUTION
_b = ldf.weight_bytes(ldf.model_config("«model»"), "bf16")
size_gb, size_gib = _b / 1e9, _b / 2**30
### END SOLUTION""",
    names=("size_gb", "size_gib"),
    public="""\
expect_close(size_gb / size_gib, 2**30 / 1e9, "size_gb / size_gib (a GiB holds 1.0737 GB)", rel=1e-5,
             hints={1e9 / 2**30: "GB and GiB are swapped: a GiB is the larger unit, so there are fewer of them"})
expect_close(size_gb, «gb:.3f», "size_gb", rel=0.05)                     # 5 % here, 0.01 % when graded""",
    hidden="""\
_b = ldf.weight_bytes(ldf.model_config("«model»"), "bf16")
expect_close(size_gb, _b / 1e9, "size_gb", rel=1e-4)
expect_close(size_gib, _b / 2**30, "size_gib", rel=1e-4)""",
    alternative="""\
_cfg = ldf.model_config("«model»")
_n = sum(math.prod(t.shape) for t in ldf.tensor_specs(_cfg))
size_gb = np.float32(_n * 2 / 10**9)
size_gib = np.float32(_n * 2 / 1024**3)""",
    mistakes=[("""\
_b = ldf.weight_bytes(ldf.model_config("«model»"), "bf16")
size_gb, size_gib = _b / 2**30, _b / 1e9""", "swapped")],
)

Q3 = dict(
    id="q3", title="how many GPUs do the weights need?", points=(1, 2),
    returns="an `int`: the number of GPUs.",
    prose="""\
Write `min_gpus(weight_bytes, gpu_memory_bytes, usable_fraction=0.9)`: the smallest number of
GPUs $n$ such that the weights, split evenly, fit in `usable_fraction` of each GPU's memory
(`weight_bytes / n <= usable_fraction * gpu_memory_bytes`; exactly full counts as fitting).
Raise `ValueError` if a size is not positive or `usable_fraction` is outside (0, 1]. Then the
hidden tests ask it about «model» on «gpu» (`ldf.hardware("«gpu»").memory_bytes`).""",
    answer="""\
def min_gpus(weight_bytes, gpu_memory_bytes, usable_fraction=0.9):
    ### BEGIN SOLUTION
    if weight_bytes <= 0 or gpu_memory_bytes <= 0:
        raise ValueError("weight_bytes and gpu_memory_bytes must be positive")
    if not 0 < usable_fraction <= 1:
        raise ValueError(f"usable_fraction={usable_fraction} must be in (0, 1]")
    n = max(1, math.ceil(weight_bytes / (usable_fraction * gpu_memory_bytes)))
    while weight_bytes / n > usable_fraction * gpu_memory_bytes:  # guard against rounding
        n += 1
    while n > 1 and weight_bytes / (n - 1) <= usable_fraction * gpu_memory_bytes:
        n -= 1
    return int(n)
    ### END SOLUTION""",
    names=("min_gpus",),
    public="""\
expect_int(min_gpus(140e9, 80e9, 0.9), 2, "min_gpus(140e9, 80e9, 0.9)")
expect_int(min_gpus(120e9, 80e9, 0.5), 3, "min_gpus(120e9, 80e9, 0.5) (exactly 40 GB each: fits)",
           hints={4: "exactly full fits: weight_bytes / n <= usable_fraction * memory"})
expect_raises(ValueError, min_gpus, 1e9, 80e9, 0.0, what="min_gpus(1e9, 80e9, 0.0)")""",
    hidden="""\
expect_int(min_gpus(120e9 + 1, 80e9, 0.5), 4, "min_gpus(120e9 + 1, 80e9, 0.5) (one byte more)")
expect_int(min_gpus(1, 80e9), 1, "min_gpus(1, 80e9)")
expect_int(min_gpus(160e9, 80e9, 1.0), 2, "min_gpus(160e9, 80e9, 1.0) (exactly full)")
expect_int(min_gpus(10.0, 3.0, 1.0), 4, "min_gpus(10.0, 3.0, 1.0)")
_w, _m = ldf.weight_bytes(ldf.model_config("«model»"), "bf16"), ldf.hardware("«gpu»").memory_bytes
for _f in (0.9, 1.0, 0.5):
    expect_int(min_gpus(_w, _m, _f), math.ceil(_w / (_f * _m)), f"min_gpus(«model», «gpu», {_f})")
for _bad in [(0, 80e9, 0.9), (1e9, -1, 0.9), (1e9, 80e9, 1.5)]:
    expect_raises(ValueError, min_gpus, *_bad, what=f"min_gpus{_bad}")""",
    alternative="""\
def min_gpus(weight_bytes, gpu_memory_bytes, usable_fraction=0.9):
    if min(weight_bytes, gpu_memory_bytes) <= 0 or usable_fraction <= 0 or usable_fraction > 1:
        raise ValueError("bad input")
    n = np.int64(1)
    while weight_bytes > n * usable_fraction * gpu_memory_bytes:
        n += 1
    return n""",
    mistakes=[("""\
def min_gpus(weight_bytes, gpu_memory_bytes, usable_fraction=0.9):
    if weight_bytes <= 0 or gpu_memory_bytes <= 0 or not 0 < usable_fraction <= 1:
        raise ValueError("bad input")
    return int(weight_bytes // (usable_fraction * gpu_memory_bytes)) + 1""", "exactly full fits")],
)

Q4 = dict(
    id="q4", title="the real size of INT4 weights", points=(1, 1),
    returns="two floats: `bits_per_weight` (bits) and `int4_step_gb` (GB), to 0.1 %.",
    prose="""\
Group-wise INT4 (GPTQ/AWQ layout) stores each weight in 4 bits plus, for every group of «group»
consecutive inputs, one FP16 scale and one 4-bit zero point. Store in `bits_per_weight` the
storage per weight of that format, averaged over a large matrix.

Only the linear layers of the decoder blocks (q, k, v, o, gate, up, down projections) are stored
that way: the embedding table, the LM head and the norm weights stay in BF16. At batch 1 a decode
step of «q4_model» reads every stored weight once, except the embedding table, of which it gathers
one row. How many GB does it read? Store it in `int4_step_gb`.""",
    answer="""\
### BEGIN SOLUTION
bits_per_weight = 4 + (16 + 4) / «group»
_cfg = ldf.model_config("«q4_model»")
_bytes = 0
for _t in ldf.tensor_specs(_cfg):
    _n = math.prod(_t.shape)
    if _t.role == "embedding":
        _bytes += _cfg.d_model * 2                    # one gathered row
    elif _t.role in ("lm_head", "norm"):
        _bytes += _n * 2
    else:
        _bytes += _n * bits_per_weight / 8
int4_step_gb = _bytes / 1e9
### END SOLUTION""",
    names=("bits_per_weight", "int4_step_gb"),
    public="""\
expect_close(bits_per_weight, «bits», "bits_per_weight", rel=1e-9,
             hints={4 + 16 / «group»: "each group also stores a 4-bit zero point"})
expect_close(int4_step_gb, «q4_gb:.4f», "int4_step_gb", rel=0.05)        # 5 % here, 0.1 % when graded""",
    hidden="""\
_q = ldf.QuantSpec.int4_groupwise(group_size=«group», scale_dtype="fp16", zero_point=True)
_c = ldf.model_config("«q4_model»")
expect_close(int4_step_gb, ldf.weight_bytes_read(_c, "bf16", 1, quant=_q) / 1e9, "int4_step_gb", rel=1e-3,
             hints={«q4_naive»: "every parameter was counted at the INT4 rate: the LM head and norms stay BF16, "
                                "and only one embedding row is read"})""",
    alternative="""\
bits_per_weight = np.float32((«group» * 4 + 16 + 4) / «group»)
_cfg = ldf.model_config("«q4_model»")
_lin = sum(math.prod(t.shape) for t in ldf.tensor_specs(_cfg) if t.role not in ("embedding", "lm_head", "norm"))
_bf16 = sum(math.prod(t.shape) for t in ldf.tensor_specs(_cfg) if t.role in ("lm_head", "norm")) + _cfg.d_model
int4_step_gb = (_lin * float(bits_per_weight) / 8 + 2 * _bf16) / 1e9""",
    mistakes=[("""\
bits_per_weight = 4 + (16 + 4) / «group»
int4_step_gb = ldf.param_count(ldf.model_config("«q4_model»")) * bits_per_weight / 8 / 1e9""", "INT4 rate")],
)

QUESTIONS = [Q1, Q2, Q3, Q4]
