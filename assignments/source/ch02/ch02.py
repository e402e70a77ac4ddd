"""Assignment 02 — from token IDs to hidden states (the spec; see tools/grading/spec.py)."""
import llm_dataflow as ldf

TITLE = "Assignment 02 — from token IDs to hidden states"

INTRO = """\
Chapter 02 turned text into token IDs and gathered rows of the embedding table. Here you
implement the gather and count what it moves — which is far less than the table.

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
        p = dict(model="Llama-3-8B", prompt=512, batch=4, hseed=3)
    else:
        p = dict(model=rng.choice(("Llama-3-8B", "Qwen2.5-7B", "Mistral-7B-v0.1", "Llama-3.1-70B", "Gemma-2-9B")),
                 prompt=rng.choice((256, 512, 2048)), batch=rng.choice((2, 4, 8)), hseed=rng.randrange(10**6))
    c = ldf.model_config(p["model"])
    p.update(V=c.vocab_size, D=c.d_model, table=c.vocab_size * c.d_model * 2, tied=c.tie_embeddings)
    return p


Q1 = dict(
    id="q1", title="the embedding gather", points=(1, 2),
    returns="a NumPy array `[B, S, D]` in the table's dtype.",
    prose="""\
Write `embed(table, ids)`: `table` is `[V, D]`, `ids` an integer array `[B, S]`; return the
hidden states `[B, S, D]` (row `ids[b, s]` of the table at position `[b, s]`), in the table's
dtype. Read only the rows you need (no one-hot matrix product). Raise `ValueError` if an ID is
outside `0 … V-1` — NumPy would quietly read row `V-1` for the ID `-1`.""",
    answer="""\
def embed(table, ids):
    ### BEGIN SOLUTION
    ids = np.asarray(ids)
    if ids.size and (ids.min() < 0 or ids.max() >= table.shape[0]):
        raise ValueError(f"token IDs must be in 0..{table.shape[0] - 1}")
    return table[ids]
    ### END SOLUTION""",
    names=("embed",),
    public="""\
table = np.arange(12, dtype=np.float16).reshape(4, 3)   # V = 4, D = 3, in FP16
expect_array(embed(table, np.array([[1, 3]])), [[[3, 4, 5], [9, 10, 11]]], "embed(table, [[1, 3]])", dtype=np.float16)
expect_raises(ValueError, embed, table, np.array([[0, -1]]), what="embed(table, [[0, -1]])")""",
    hidden="""\
_rng = np.random.default_rng(«hseed»)
_table = _rng.normal(size=(101, 7)).astype(np.float16)
_ids = _rng.integers(0, 101, size=(3, 13))
expect_array(embed(_table, _ids), np.stack([[_table[i] for i in row] for row in _ids]), "embed(table [101, 7], ids [3, 13])",
             dtype=np.float16)
_t32 = _rng.normal(size=(50, 4)).astype(np.float32)
expect_array(embed(_t32, np.zeros((2, 0), dtype=np.int64)), np.zeros((2, 0, 4)), "embed(table, ids [2, 0])", dtype=np.float32)
for _bad in (np.array([[101]]), np.array([[0, -1]])):
    expect_raises(ValueError, embed, _table, _bad, what=f"embed(table [101, 7], {_bad.tolist()})")""",
    alternative="""\
def embed(table, ids):
    ids = np.asarray(ids, dtype=np.int64)
    V = table.shape[0]
    if np.any((ids < 0) | (ids >= V)):
        raise ValueError("id out of range")
    return np.take(table, ids.reshape(-1), axis=0).reshape(*ids.shape, table.shape[1])""",
    mistakes=[("""\
def embed(table, ids):
    one_hot = np.eye(table.shape[0])[ids]          # [B, S, V]
    return one_hot @ table""", "dtype")],
)

Q2 = dict(
    id="q2", title="what the gather reads and writes", points=(1, 1),
    returns="a dict `{\"read\": int, \"written\": int}` of bytes (B).",
    prose="""\
Write `embedding_traffic(ids, d_model, bytes_per_elem)` returning a dict with `"read"`: the bytes
of the table rows the gather reads (each distinct ID's row once: a row used by several tokens is
read once and kept on chip) and `"written"`: the bytes of the hidden states it writes (one row
per token, repeats included).""",
    answer="""\
def embedding_traffic(ids, d_model, bytes_per_elem):
    ### BEGIN SOLUTION
    ids = np.asarray(ids)
    return {"read": int(len(np.unique(ids)) * d_model * bytes_per_elem),
            "written": int(ids.size * d_model * bytes_per_elem)}
    ### END SOLUTION""",
    names=("embedding_traffic",),
    public="""\
got = embedding_traffic(np.array([[5, 5, 9]]), 4, 2)
expect_int(got["read"], 2 * 4 * 2, "embedding_traffic([[5, 5, 9]], 4, 2)['read'] (2 distinct rows)",
           hints={3 * 4 * 2: "a repeated ID's row is read once"})
expect_int(got["written"], 3 * 4 * 2, "embedding_traffic([[5, 5, 9]], 4, 2)['written'] (3 tokens)")""",
    hidden="""\
_rng = np.random.default_rng(«hseed»)
for _shape, _V in (((«batch», «prompt»), 50), ((1, 1), 10), ((3, 1000), 128256)):
    _ids = _rng.integers(0, _V, size=_shape)
    _got = embedding_traffic(_ids, «D», 2)
    expect_int(_got["read"], len(set(_ids.ravel().tolist())) * «D» * 2, f"embedding_traffic(ids {_shape}, «D», 2)['read']")
    expect_int(_got["written"], _ids.size * «D» * 2, f"embedding_traffic(ids {_shape}, «D», 2)['written']")""",
    alternative="""\
def embedding_traffic(ids, d_model, bytes_per_elem):
    flat = [int(i) for i in np.ravel(ids)]
    row = d_model * bytes_per_elem
    return dict(read=len(set(flat)) * row, written=len(flat) * row)""",
    mistakes=[("""\
def embedding_traffic(ids, d_model, bytes_per_elem):
    ids = np.asarray(ids)
    return {"read": ids.size * d_model * bytes_per_elem, "written": ids.size * d_model * bytes_per_elem}""",
               "read once")],
)

Q3 = dict(
    id="q3", title="how much of the table a batch touches", points=(1, 1),
    returns="`table_bytes` (an `int`, bytes) and `fraction_read` (a float, to 0.1 %).",
    prose="""\
«model»'s input embedding table is `[vocab_size, d_model]` in BF16 (`ldf.model_config("«model»")`).
Store its size in bytes in `table_bytes`. A prefill of «batch» prompts of «prompt» tokens each
reads each distinct row once. If every token ID were drawn uniformly at random from the
vocabulary, what fraction of the table would it read on average? Store it in `fraction_read`.
(With $n$ draws from $V$ values, each value is missed with probability $(1 - 1/V)^n$.)""",
    answer="""\
### BEGIN SOLUTION
_c = ldf.model_config("«model»")
table_bytes = _c.vocab_size * _c.d_model * 2
fraction_read = 1 - (1 - 1 / _c.vocab_size) ** («batch» * «prompt»)
### END SOLUTION""",
    names=("table_bytes", "fraction_read"),
    public="""\
expect_int(table_bytes, «table», "table_bytes («model»)")
assert 0 < fraction_read < «batch» * «prompt» / «V», (
    f"fraction_read = {fraction_read!r}: repeated IDs make it a little less than «batch» × «prompt» / vocab_size")""",
    hidden="""\
_V, _n = «V», «batch» * «prompt»
expect_close(fraction_read, 1 - (1 - 1 / _V) ** _n, "fraction_read", rel=1e-3,
             hints={_n / _V: "that counts every token's row, repeats included: a repeated row is read once"})""",
    alternative="""\
_c = ldf.model_config("«model»")
table_bytes = np.int64(_c.vocab_size) * _c.d_model * np.dtype(np.float16).itemsize
fraction_read = -np.expm1(«batch» * «prompt» * np.log1p(-1 / _c.vocab_size))""",
    mistakes=[("""\
_c = ldf.model_config("«model»")
table_bytes = _c.vocab_size * _c.d_model * 2
fraction_read = «batch» * «prompt» / _c.vocab_size""", "fraction_read")],
)

QUESTIONS = [Q1, Q2, Q3]
