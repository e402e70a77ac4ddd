"""Assignment 07 — collectives and parallelism (the spec; see tools/grading/spec.py)."""
import llm_dataflow as ldf

TITLE = "Assignment 07 — collectives and parallelism"

INTRO = """\
Chapter 07 split the decoder over ranks and paid for it in collectives. Here you implement the
ring all-reduce from point-to-point messages, work out the bytes each collective moves, and find
out whether tensor parallelism's all-reduces or each GPU's share of the weight read bind a decode
step of «model» on «tp» «gpu»s.

**How to work.** Replace each `raise NotImplementedError()` with your code and run the test
cell under it: those are the *public* tests, and they check the same types as grading does.
Grading reruns them and adds hidden tests on other inputs. Each question says what it returns.
«points_line»

«run_all»
"""

_RING_PROBE = '''
from collections import deque as _deque
class _CountingRing:               # the tests' own ring: counts what the function really sends
    def __init__(self, n):
        self.n, self.q, self.sent_elements, self.messages = n, {}, [0] * n, 0
    def send(self, src, dst, payload):
        if dst != (src + 1) % self.n:
            raise ValueError(f"rank {src} may only send to rank {(src + 1) % self.n}, not {dst}")
        self.q.setdefault((src, dst), _deque()).append([float(x) for x in payload])
        self.sent_elements[src] += len(payload)
        self.messages += 1
    def recv(self, dst, src):
        q = self.q.get((src, dst))
        if not q:
            raise RuntimeError(f"rank {dst} has no message waiting from rank {src}")
        return q.popleft()
_ring = _CountingRing(len(bufs))
_before = [list(b) for b in bufs]
_out = globals()[fn_name](bufs, _ring)
result = ([[float(x) for x in o] for o in _out], list(_ring.sent_elements), _ring.messages, bufs == _before)
'''

SETUP = '''\
import math
from collections import deque
import numpy as np
import llm_dataflow as ldf
from llm_dataflow.checks import expect_int, expect_close, expect_array, expect_equal, expect_raises, in_kernel


class Ring:
    """N ranks in a ring. Rank r may only send to rank (r + 1) % N. Messages queue in order.

    send(src, dst, payload) enqueues a copy of the list `payload`; recv(dst, src) dequeues the
    oldest message from src to dst. `sent_elements[r]` counts the elements rank r has sent.
    """

    def __init__(self, n):
        self.n = n
        self.queues = {(r, (r + 1) % n): deque() for r in range(n)}
        self.sent_elements = [0] * n

    def send(self, src, dst, payload):
        if dst != (src + 1) % self.n:
            raise ValueError(f"rank {src} may only send to rank {(src + 1) % self.n}, not {dst}")
        self.queues[(src, dst)].append(list(payload))
        self.sent_elements[src] += len(payload)

    def recv(self, dst, src):
        q = self.queues.get((src, dst))
        if not q:
            raise RuntimeError(f"rank {dst} has no message waiting from rank {src}")
        return q.popleft()


def run_ring(fn, bufs):
    """Run `fn(bufs, ring)` on a fresh counting ring: (outputs, elements each rank sent,
    messages sent, whether `bufs` came back unchanged)."""
    return in_kernel(_RING_PROBE, _what=f"{fn.__name__}(bufs, ring)", fn_name=fn.__name__, bufs=bufs)


_RING_PROBE = """«ring_probe»"""
'''


def params(rng):
    if rng is None:
        p = dict(model="Llama-3-8B", gpu="H100-SXM", link="NVLink4", tp=8, batch=32, hseed=99)
    else:
        p = dict(model=rng.choice(("Llama-3-8B", "Llama-3.1-70B", "Qwen2.5-7B", "Mistral-7B-v0.1")),
                 gpu=rng.choice(("H100-SXM", "H200", "A100-80GB-SXM")), link=rng.choice(("NVLink4", "NVLink3", "PCIe-Gen4-x16", "PCIe-Gen5-x16")),
                 tp=rng.choice((2, 4, 8)), batch=rng.choice((8, 32, 128, 256)), hseed=rng.randrange(10**6))
    c, hw, ln = ldf.model_config(p["model"]), ldf.hardware(p["gpu"]), ldf.link(p["link"])
    if c.n_kv_heads % p["tp"] or c.n_heads % p["tp"]:
        p["tp"] = 4 if c.n_kv_heads % 4 == 0 else 2
    t, B = p["tp"], p["batch"]
    ar = 2 * c.n_layers * ldf.collective_bytes_per_rank("all_reduce", B * c.d_model * 2, t) / ln.bandwidth_per_direction
    wr = ldf.weight_bytes_read(c, "bf16", B, tp=t) / hw.hbm_bandwidth
    p.update(ring_probe=_RING_PROBE, allreduce_us=ar * 1e6, weight_read_us=wr * 1e6, comm_bound=ar > wr,
             link_gbs=ln.bandwidth_per_direction / 1e9)
    return p


Q1 = dict(
    id="q1", title="a ring all-reduce from `send`/`recv`", points=(2, 2),
    returns="a list of N lists of floats (every rank's result).",
    prose="""\
Write `ring_all_reduce(buffers, ring)`: `buffers` is a list of N equal-length lists of floats
(rank r holds `buffers[r]`); return a list of N lists, each the element-wise sum of all buffers.
Move data only through `ring.send` / `ring.recv` (see `Ring` above), with the ring algorithm:
split each buffer into N chunks (chunk c holds the indices `np.array_split(range(len), N)[c]`),
then N−1 reduce-scatter steps (each rank sends one chunk to its right neighbour, which adds it
in) and N−1 all-gather steps (each rank forwards a finished chunk). Do not modify the input
lists. The tests run your function on a counting ring of their own (`run_ring`).""",
    answer="""\
def ring_all_reduce(buffers, ring):
    ### BEGIN SOLUTION
    n = len(buffers)
    data = [list(b) for b in buffers]
    chunks = [list(c) for c in np.array_split(np.arange(len(data[0])), n)]
    for step in range(n - 1):  # reduce-scatter: rank r sends chunk (r - step) mod n
        for r in range(n):
            c = (r - step) % n
            ring.send(r, (r + 1) % n, [data[r][i] for i in chunks[c]])
        for r in range(n):
            src = (r - 1) % n
            c = (src - step) % n
            for i, x in zip(chunks[c], ring.recv(r, src)):
                data[r][i] += x
    for step in range(n - 1):  # all-gather: rank r owns chunk (r + 1) mod n, forwards it
        for r in range(n):
            c = (r + 1 - step) % n
            ring.send(r, (r + 1) % n, [data[r][i] for i in chunks[c]])
        for r in range(n):
            src = (r - 1) % n
            c = (src + 1 - step) % n
            for i, x in zip(chunks[c], ring.recv(r, src)):
                data[r][i] = x
    return data
    ### END SOLUTION""",
    names=("ring_all_reduce",),
    public="""\
out, sent, messages, unchanged = run_ring(ring_all_reduce, [[1.0, 2.0, 3.0], [10.0, 20.0, 30.0], [100.0, 200.0, 300.0]])
expect_array(out, [[111.0, 222.0, 333.0]] * 3, "ring_all_reduce of 3 ranks: every rank's result")
expect_equal(unchanged, True, "the input lists are unchanged")
# 2 (N - 1) / N × 3 elements = 4 per rank
expect_array(sent, [4, 4, 4], "elements each rank sent (ring: 2 (N - 1) / N of the buffer)")""",
    hidden="""\
_rng = np.random.default_rng(«hseed»)
for _n, _len in [(4, 12), (5, 13), (2, 7), (7, 7), (3, 100)]:
    _bufs = [[float(x) for x in _rng.normal(size=_len)] for _ in range(_n)]
    _out, _sent, _msgs, _same = run_ring(ring_all_reduce, _bufs)
    expect_array(_out, [list(np.sum(np.array(_bufs), axis=0))] * _n, f"ring_all_reduce of {_n} ranks × {_len}", rtol=1e-5, atol=1e-6)
    expect_equal(_same, True, f"inputs unchanged ({_n} ranks)")
    expect_int(sum(_sent), 2 * (_n - 1) * _len, f"elements sent in all ({_n} ranks × {_len}): not a ring all-reduce?")
    expect_int(_msgs, 2 * (_n - 1) * _n, f"messages ({_n} ranks): 2 (N - 1) steps of N messages")
    if _len % _n == 0:
        expect_array(_sent, [2 * (_n - 1) * _len // _n] * _n, f"elements each rank sent ({_n} ranks × {_len})")""",
    alternative="""\
def ring_all_reduce(buffers, ring):
    n = len(buffers)
    acc = [np.array(b, dtype=np.float64) for b in buffers]          # copies: inputs untouched
    idx = np.array_split(np.arange(len(buffers[0])), n)
    # reduce-scatter, written with explicit send then receive phases per step
    for step in range(n - 1):
        outgoing = [(r, (r - step) % n) for r in range(n)]
        for r, c in outgoing:
            ring.send(r, (r + 1) % n, acc[r][idx[c]].tolist())
        for r, c in outgoing:
            dst = (r + 1) % n
            acc[dst][idx[c]] += np.array(ring.recv(dst, r))
    for step in range(n - 1):
        outgoing = [(r, (r + 1 - step) % n) for r in range(n)]
        for r, c in outgoing:
            ring.send(r, (r + 1) % n, acc[r][idx[c]].tolist())
        for r, c in outgoing:
            dst = (r + 1) % n
            acc[dst][idx[c]] = ring.recv(dst, r)
    return [a.astype(np.float32) for a in acc]""",
    mistakes=[("""\
def ring_all_reduce(buffers, ring):
    n = len(buffers)
    total = [sum(col) for col in zip(*buffers)]
    for r in range(n):                   # every rank sends its whole buffer around: 'works', but not a ring all-reduce
        ring.send(r, (r + 1) % n, buffers[r])
        ring.recv((r + 1) % n, r)
    return [list(total) for _ in range(n)]""", "elements each rank sent")],
)

Q2 = dict(
    id="q2", title="bytes each rank sends in a collective", points=(1, 1),
    returns="a float: bytes (B) one rank sends.",
    prose="""\
Write `collective_bytes_per_rank(op, nbytes, n_ranks)` for ring algorithms over N ranks, from
how each works (work the factors out; the chapter's table is the check):

* `"reduce_scatter"` (`nbytes` = each rank's full input): N−1 steps; in each a rank sends one
  of the N chunks of its input to its neighbour, which adds it to its own;
* `"all_gather"` (`nbytes` = the gathered output every rank ends with): N−1 steps; in each a
  rank forwards one of the N chunks;
* `"all_reduce"` (`nbytes` = the buffer every rank holds): a reduce-scatter, then an all-gather;
* `"all_to_all"` (`nbytes` = each rank's send buffer, split evenly over the N ranks): a rank
  keeps its own part and sends each other rank one.

Raise `ValueError` for any other `op` or for `n_ranks < 1`.""",
    answer="""\
def collective_bytes_per_rank(op, nbytes, n_ranks):
    ### BEGIN SOLUTION
    if not isinstance(n_ranks, int) or n_ranks < 1:
        raise ValueError(f"n_ranks={n_ranks!r} must be a positive integer")
    factors = {"all_reduce": 2.0, "all_gather": 1.0, "reduce_scatter": 1.0, "all_to_all": 1.0}
    if op not in factors:
        raise ValueError(f"op={op!r} is not allowed; allowed: {', '.join(factors)}")
    return factors[op] * (n_ranks - 1) / n_ranks * nbytes
    ### END SOLUTION""",
    names=("collective_bytes_per_rank",),
    public="""\
expect_close(collective_bytes_per_rank("all_reduce", 1000, 4), 1500.0, "collective_bytes_per_rank('all_reduce', 1000, 4)",
             hints={2000.0: "in the ring each rank sends (N - 1)/N of the buffer per phase, not all of it"})
expect_close(collective_bytes_per_rank("all_gather", 1000, 1), 0.0, "collective_bytes_per_rank('all_gather', 1000, 1)", abs=1e-9)
expect_raises(ValueError, collective_bytes_per_rank, "broadcast_all", 10, 2, what="collective_bytes_per_rank('broadcast_all', 10, 2)")""",
    hidden="""\
for _op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all"):
    for _n in (1, 2, 3, 16, «tp»):
        expect_close(collective_bytes_per_rank(_op, 1_234_567, _n), ldf.collective_bytes_per_rank(_op, 1_234_567, _n),
                     f"collective_bytes_per_rank({_op!r}, 1234567, {_n})", rel=1e-9, abs=1e-9)
expect_raises(ValueError, collective_bytes_per_rank, "all_reduce", 10, 0, what="collective_bytes_per_rank('all_reduce', 10, 0)")""",
    alternative="""\
def collective_bytes_per_rank(op, nbytes, n_ranks):
    if n_ranks < 1:
        raise ValueError("n_ranks")
    share = nbytes - nbytes / n_ranks                  # all but one chunk
    table = {"reduce_scatter": share, "all_gather": share, "all_to_all": share, "all_reduce": 2 * share}
    try:
        return table[op]
    except KeyError:
        raise ValueError(f"unknown op {op}") from None""",
    mistakes=[("""\
def collective_bytes_per_rank(op, nbytes, n_ranks):
    if op not in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all") or n_ranks < 1:
        raise ValueError(op)
    return (2.0 if op == "all_reduce" else 1.0) * nbytes""", "(N - 1)/N")],
)

Q3 = dict(
    id="q3", title="does tensor parallelism's communication bind?", points=(1, 1),
    returns="`allreduce_us` and `weight_read_us` (floats, microseconds, to 0.1 %) and `comm_bound` (a bool).",
    prose="""\
«model» decodes a batch of «batch» sequences («batch» tokens per step) with tensor parallelism
over «tp» «gpu»s linked by «link» (`ldf.link("«link»").bandwidth_per_direction`, B/s). Each
layer does two all-reduces (after attention and after the MLP) of the BF16 activations
`[tokens, d_model]`. With the ring all-reduce and no latency term, store in `allreduce_us` the
all-reduce time of one decode step through all layers. Each GPU reads 1/«tp» of the step's
weights (`ldf.weight_bytes_read(cfg, "bf16", «batch»)`, split «tp» ways; the few weights every GPU
keeps whole, the norms, change it by less than 0.1 %): store that read's time at the GPU's HBM
bandwidth in `weight_read_us`, and in `comm_bound` whether the all-reduces take longer than it
(if they do, and they are not overlapped with compute, communication binds the step).""",
    answer="""\
### BEGIN SOLUTION
_cfg = ldf.model_config("«model»")
_msg = «batch» * _cfg.d_model * 2                       # bytes of one all-reduce buffer
_per_rank = 2 * («tp» - 1) / «tp» * _msg                 # bytes each rank sends (ring)
allreduce_us = 2 * _cfg.n_layers * _per_rank / ldf.link("«link»").bandwidth_per_direction * 1e6
weight_read_us = ldf.weight_bytes_read(_cfg, "bf16", «batch») / «tp» / ldf.hardware("«gpu»").hbm_bandwidth * 1e6
comm_bound = allreduce_us > weight_read_us
### END SOLUTION""",
    names=("allreduce_us", "weight_read_us", "comm_bound"),
    public="""\
expect_close(allreduce_us, «allreduce_us:.4f», "allreduce_us", rel=0.05,               # 5 % here, 0.1 % when graded
             hints={«allreduce_us» / 2: "each layer does two all-reduces"})
expect_close(weight_read_us, «weight_read_us:.4f», "weight_read_us", rel=0.05,
             hints={«weight_read_us» * «tp»: "each GPU reads only its 1/«tp» of the weights"})
expect_equal(comm_bound, allreduce_us > weight_read_us, "comm_bound (allreduce_us > weight_read_us)")""",
    hidden="""\
_c = ldf.model_config("«model»")
_ar = 2 * _c.n_layers * ldf.collective_bytes_per_rank("all_reduce", «batch» * _c.d_model * 2, «tp») / ldf.link("«link»").bandwidth_per_direction
_wr = ldf.weight_bytes_read(_c, "bf16", «batch», tp=«tp») / ldf.hardware("«gpu»").hbm_bandwidth
expect_close(allreduce_us, _ar * 1e6, "allreduce_us", rel=1e-3,
             hints={_ar * 1e6 * «tp» / (2 * («tp» - 1)): "the ring sends 2 (N - 1)/N of the buffer per rank, not all of it"})
expect_close(weight_read_us, _wr * 1e6, "weight_read_us", rel=1e-3)
expect_equal(bool(comm_bound), _ar > _wr, "comm_bound")""",
    alternative="""\
_cfg = ldf.model_config("«model»")
_per_layer = 2 * ldf.collective_bytes_per_rank("all_reduce", «batch» * _cfg.d_model * 2, «tp»)
allreduce_us = np.float32(_cfg.n_layers * _per_layer / «link_gbs» / 1e9 * 1e6)
weight_read_us = np.float32(ldf.weight_bytes_read(_cfg, "bf16", «batch», tp=«tp») / ldf.hardware("«gpu»").hbm_bandwidth * 1e6)
comm_bound = np.bool_(allreduce_us > weight_read_us)""",
    mistakes=[("""\
_cfg = ldf.model_config("«model»")
allreduce_us = _cfg.n_layers * 2 * («tp» - 1) / «tp» * «batch» * _cfg.d_model * 2 / ldf.link("«link»").bandwidth_per_direction * 1e6
weight_read_us = ldf.weight_bytes_read(_cfg, "bf16", «batch») / ldf.hardware("«gpu»").hbm_bandwidth * 1e6
comm_bound = allreduce_us > weight_read_us""", "two all-reduces")],
)

Q4 = dict(
    id="q4", title="the pipeline bubble", points=(1, 1),
    returns="a float: the idle fraction (0 ≤ f < 1).",
    prose="""\
A GPipe-style pipeline of $p$ stages runs $m$ equal micro-batches; every stage takes the same
time per micro-batch. Write `bubble_fraction(p, m)`: the fraction of the stage-time slots in
which a stage is idle while the batch fills and drains the pipeline. Raise `ValueError` when
`p` or `m` is below 1.""",
    answer="""\
def bubble_fraction(p, m):
    ### BEGIN SOLUTION
    if p < 1 or m < 1:
        raise ValueError(f"p={p} and m={m} must both be >= 1")
    return (p - 1) / (m + p - 1)
    ### END SOLUTION""",
    names=("bubble_fraction",),
    public="""\
expect_close(bubble_fraction(1, 5), 0.0, "bubble_fraction(1, 5) (one stage has no bubble)", abs=1e-12)
expect_close(bubble_fraction(4, 8), 3 / 11, "bubble_fraction(4, 8)", rel=1e-9,
             hints={3 / 8: "count the slots of the whole timeline, m + p - 1 per stage"})""",
    hidden="""\
for _p, _m in [(4, 8), (8, 1), (2, 64), (16, 3), («tp», «batch»)]:
    _busy, _total = _p * _m, _p * (_m + _p - 1)
    expect_close(bubble_fraction(_p, _m), 1 - _busy / _total, f"bubble_fraction({_p}, {_m})", rel=1e-9, abs=1e-12)
expect_raises(ValueError, bubble_fraction, 0, 3, what="bubble_fraction(0, 3)")""",
    alternative="""\
def bubble_fraction(p, m):
    if min(p, m) < 1:
        raise ValueError("p and m must be >= 1")
    timeline = np.zeros((p, m + p - 1), dtype=bool)
    for s in range(p):
        timeline[s, s:s + m] = True            # stage s is busy from slot s on
    return float(1 - timeline.mean())""",
    mistakes=[("""\
def bubble_fraction(p, m):
    if p < 1 or m < 1:
        raise ValueError("p, m")
    return (p - 1) / m""", "whole timeline")],
)

QUESTIONS = [Q1, Q2, Q3, Q4]
