"""Assignment 04 — tiles and the memory hierarchy (the spec; see tools/grading/spec.py)."""
import llm_dataflow as ldf

TITLE = "Assignment 04 — tiles and the memory hierarchy"

INTRO = """\
Chapter 04 cut a matrix multiply into tiles and counted the bytes each tile pulls from global
memory. Here you write a tiled GEMM with its load counter, the traffic formula it must match, and
place GEMMs against a «gpu»'s ridge point — including how large a tile must be before a GEMM
stops being bound by its global-memory traffic.

**How to work.** Replace each `raise NotImplementedError()` with your code and run the test
cell under it: those are the *public* tests, and they check the same types and tolerances as
grading does. Grading reruns them and adds hidden tests on shapes that do not divide the tiles.
Each question says what it returns. «points_line»

«run_all»
"""

SETUP = """\
import math
import numpy as np
import llm_dataflow as ldf
from llm_dataflow.checks import expect_int, expect_close, expect_array, expect_equal, expect_raises
"""


def _t_min(n: int, ridge: float) -> int:
    """Smallest square tile t whose tiled n³ GEMM (Q2's traffic, BF16) reaches ``ridge`` FLOP/B."""
    t = 1
    while 2 * n**3 / ((2 * -(-n // t) * n * n + n * n) * 2) < ridge:
        t += 1
    return t


def params(rng):
    if rng is None:
        p = dict(gpu="H100-SXM", gemv_n=4096, gemv_k=4096, n=4096, dtype="bf16", hseed=4)
    else:
        p = dict(gpu=rng.choice(("A100-80GB-SXM", "H100-SXM", "H200", "B200")), gemv_n=rng.choice((4096, 8192, 14336)),
                 gemv_k=rng.choice((4096, 5120, 8192)), n=rng.choice((4096, 8192)), dtype=rng.choice(("bf16", "fp8")),
                 hseed=rng.randrange(10**6))
        if p["gpu"] == "A100-80GB-SXM":
            p["dtype"] = "bf16"                      # an A100 has no FP8 peak
    r = ldf.ridge_point(p["gpu"], "bf16")
    N, K = p["gemv_n"], p["gemv_k"]
    b = 2 if p["dtype"] == "bf16" else 1
    p.update(ridge=r, gemv_ridge=ldf.ridge_point(p["gpu"], p["dtype"]), elem=b, DTYPE=p["dtype"].upper(),
             ai_gemv=2 * N * K / ((N * K + K + N) * b), t_min=_t_min(p["n"], r))
    return p


Q1 = dict(
    id="q1", title="a tiled matrix multiply that counts its loads", points=(1, 2),
    returns="a tuple `(C, loaded)`: `C` a NumPy array `[M, N]`, `loaded` an `int` (elements).",
    prose="""\
Write `tiled_matmul(A, B, bm, bn, bk)` for `A [M, K]`, `B [K, N]` that computes `C = A @ B`
tile by tile: for each `bm × bn` output tile, loop over the K dimension in steps of `bk`,
loading the `A` tile (`≤ bm × bk`) and the `B` tile (`≤ bk × bn`) and accumulating. Edge tiles
are smaller when a size does not divide. Return `(C, loaded)` where `loaded` is the number of
elements of A and B loaded into tiles in total. `C` is checked to `rtol=1e-5` (FP32 passes).""",
    answer="""\
def tiled_matmul(A, B, bm, bn, bk):
    ### BEGIN SOLUTION
    M, K = A.shape
    N = B.shape[1]
    C = np.zeros((M, N), dtype=np.result_type(A, B))
    loaded = 0
    for i in range(0, M, bm):
        for j in range(0, N, bn):
            acc = np.zeros((min(bm, M - i), min(bn, N - j)), dtype=C.dtype)
            for k in range(0, K, bk):
                a = A[i:i + bm, k:k + bk]
                b = B[k:k + bk, j:j + bn]
                loaded += a.size + b.size
                acc += a @ b
            C[i:i + bm, j:j + bn] = acc
    return C, int(loaded)
    ### END SOLUTION""",
    names=("tiled_matmul",),
    public="""\
A, B = np.arange(6.0).reshape(2, 3), np.arange(12.0).reshape(3, 4)
C, loaded = tiled_matmul(A, B, 2, 2, 3)
expect_array(C, A @ B, "tiled_matmul(A [2, 3], B [3, 4], 2, 2, 3)[0]", rtol=1e-5)
# A is read once per column of output tiles (2), B once per row of output tiles (1)
expect_int(loaded, 2 * 6 + 1 * 12, "tiled_matmul(A [2, 3], B [3, 4], 2, 2, 3)[1] (elements loaded)",
           hints={6 + 12: "A is loaded again for every column of output tiles"})""",
    hidden="""\
_rng = np.random.default_rng(«hseed»)
for _M, _N, _K, _bm, _bn, _bk in [(37, 29, 53, 8, 16, 10), (5, 64, 7, 16, 16, 16), (33, 1, 17, 4, 4, 4), (16, 16, 16, 16, 16, 16)]:
    _A, _B = _rng.normal(size=(_M, _K)), _rng.normal(size=(_K, _N))
    _C, _n = tiled_matmul(_A, _B, _bm, _bn, _bk)
    expect_array(_C, _A @ _B, f"tiled_matmul C for M={_M}, N={_N}, K={_K}, tiles {_bm}×{_bn}×{_bk}", rtol=1e-5, atol=1e-5)
    expect_int(_n, math.ceil(_N / _bn) * _M * _K + math.ceil(_M / _bm) * _K * _N,
               f"tiled_matmul loads for M={_M}, N={_N}, K={_K}, tiles {_bm}×{_bn}×{_bk}")""",
    alternative="""\
def tiled_matmul(A, B, bm, bn, bk):
    A32, B32 = A.astype(np.float32), B.astype(np.float32)
    M, K = A32.shape
    N = B32.shape[1]
    rows = [A32[i:i + bm] for i in range(0, M, bm)]
    C = np.empty((M, N), dtype=np.float32)
    loaded = np.int64(0)
    for j in range(0, N, bn):
        for ii, Ai in enumerate(rows):
            acc = np.zeros((Ai.shape[0], min(bn, N - j)), dtype=np.float32)
            for k in range(0, K, bk):
                a, b = Ai[:, k:k + bk], B32[k:k + bk, j:j + bn]
                acc += a @ b
                loaded += a.size + b.size
            C[ii * bm:ii * bm + Ai.shape[0], j:j + bn] = acc
    return C, loaded""",
    mistakes=[("""\
def tiled_matmul(A, B, bm, bn, bk):
    return A @ B, A.size + B.size          # every element loaded once: no tiles""", "loaded again")],
)

Q2 = dict(
    id="q2", title="global-memory traffic of a tiled GEMM", points=(1, 1),
    returns="an `int`: bytes (B).",
    prose="""\
Write `gemm_traffic_bytes(M, N, K, bm, bn, elem_bytes)`: the bytes a tiled GEMM like Q1's moves
between global memory and the tiles — every A element read once per column of output tiles,
every B element once per row of output tiles (edge tiles count as tiles), and C written once.""",
    answer="""\
def gemm_traffic_bytes(M, N, K, bm, bn, elem_bytes):
    ### BEGIN SOLUTION
    return int((math.ceil(N / bn) * M * K + math.ceil(M / bm) * K * N + M * N) * elem_bytes)
    ### END SOLUTION""",
    names=("gemm_traffic_bytes",),
    public="""\
expect_int(gemm_traffic_bytes(2, 4, 3, 2, 2, 2), (2 * 6 + 1 * 12 + 8) * 2, "gemm_traffic_bytes(2, 4, 3, 2, 2, 2)",
           hints={(2 * 6 + 1 * 12) * 2: "C is written once too"})
expect_int(gemm_traffic_bytes(5, 5, 1, 2, 2, 1), 3 * 5 + 3 * 5 + 25, "gemm_traffic_bytes(5, 5, 1, 2, 2, 1) (edge tiles)",
           hints={2 * 5 + 2 * 5 + 25: "an edge tile is a tile: 5 columns in tiles of 2 make 3 tile columns"})""",
    hidden="""\
_rng = np.random.default_rng(«hseed»)
for _ in range(25):
    _M, _N, _K = (int(v) for v in _rng.integers(1, 5000, size=3))
    _bm, _bn = (int(v) for v in _rng.integers(1, 300, size=2))
    _e = int(_rng.choice([1, 2, 4]))
    _want = (-(-_N // _bn) * _M * _K + -(-_M // _bm) * _K * _N + _M * _N) * _e
    expect_int(gemm_traffic_bytes(_M, _N, _K, _bm, _bn, _e), _want, f"gemm_traffic_bytes({_M}, {_N}, {_K}, {_bm}, {_bn}, {_e})")""",
    alternative="""\
def gemm_traffic_bytes(M, N, K, bm, bn, elem_bytes):
    col_tiles, row_tiles = -(-N // bn), -(-M // bm)
    return np.int64(elem_bytes) * (np.int64(M) * K * col_tiles + np.int64(K) * N * row_tiles + np.int64(M) * N)""",
    mistakes=[("""\
def gemm_traffic_bytes(M, N, K, bm, bn, elem_bytes):
    return int((N // bn * M * K + M // bm * K * N + M * N) * elem_bytes)""", "edge tile")],
)

Q3 = dict(
    id="q3", title="a decode GEMV against the ridge point", points=(1, 1),
    returns="`ai_gemv` and `ridge` (floats, FLOP/B, to 0.1 %) and `gemv_bound` (the string \"memory\" or \"compute\").",
    prose="""\
At batch 1, each projection of a decode step is a matrix–vector product. For a «DTYPE» weight
`[«gemv_n», «gemv_k»]` (N × K) multiplied in «DTYPE», count FLOPs = 2·N·K and bytes = the weight
plus the input vector (K elements) and the output vector (N elements), all «DTYPE»
(`ldf.dtype_bits("«dtype»") / 8` bytes each). Store the arithmetic intensity (FLOP/B) in `ai_gemv`,
the «gpu»'s «DTYPE» ridge point in `ridge` (`ldf.ridge_point("«gpu»", "«dtype»")`), and in
`gemv_bound` the string `"memory"` or `"compute"` saying which bound applies.""",
    answer="""\
### BEGIN SOLUTION
ai_gemv = 2 * «gemv_n» * «gemv_k» / ((«gemv_n» * «gemv_k» + «gemv_k» + «gemv_n») * ldf.dtype_bits("«dtype»") / 8)
ridge = ldf.ridge_point("«gpu»", "«dtype»")
gemv_bound = "memory" if ai_gemv < ridge else "compute"
### END SOLUTION""",
    names=("ai_gemv", "ridge", "gemv_bound"),
    public="""\
expect_close(ridge, «gemv_ridge:.4f», "ridge («gpu», «DTYPE»)", rel=1e-3)
expect_close(ai_gemv, «ai_gemv:.5f», "ai_gemv", rel=0.05,
             hints={«elem» * «ai_gemv:.8f»: "«DTYPE» is «elem» byte(s) per element: divide by the bytes, not the elements"})
assert gemv_bound in ("memory", "compute"), f"gemv_bound must be 'memory' or 'compute', got {gemv_bound!r}\"""",
    hidden="""\
_N, _K = «gemv_n», «gemv_k»
expect_close(ai_gemv, 2 * _N * _K / («elem» * (_N * _K + _N + _K)), "ai_gemv", rel=1e-3)
expect_close(ridge, ldf.ridge_point("«gpu»", "«dtype»"), "ridge", rel=1e-3)
expect_equal(gemv_bound, "memory", "gemv_bound")""",
    alternative="""\
_hw = ldf.hardware("«gpu»")
_bytes = np.float32(«elem») * («gemv_n» * «gemv_k» + «gemv_n» + «gemv_k»)
ai_gemv = np.float32(2 * «gemv_n» * «gemv_k») / _bytes
ridge = np.float32(_hw.flops("«dtype»") / _hw.hbm_bandwidth)
gemv_bound = ("compute", "memory")[int(ai_gemv < ridge)]""",
    mistakes=[("""\
ai_gemv = 2 * «gemv_n» * «gemv_k» / («gemv_n» * «gemv_k» + «gemv_k» + «gemv_n»)
ridge = ldf.ridge_point("«gpu»", "«dtype»")
gemv_bound = "compute" if ai_gemv < ridge else "memory\"""", "divide by the bytes")],
)

Q4 = dict(
    id="q4", title="how large a tile must be", points=(1, 1),
    returns="an `int`: the tile size (elements per side).",
    prose="""\
A square BF16 GEMM with M = N = K = «n» runs tiled with square output tiles `bm = bn = t`,
moving the bytes of your Q2 (edge tiles count as whole tiles). Its arithmetic intensity is
2·M·N·K FLOPs over those bytes. What is the **smallest** integer `t` for which that intensity
reaches the «gpu» BF16 ridge point (`ldf.ridge_point("«gpu»", "bf16")`)? Store it in `t_min`.
A closed form that ignores the edge tiles is off: count them.""",
    answer="""\
### BEGIN SOLUTION
_r = ldf.ridge_point("«gpu»", "bf16")
t_min = 1
while 2 * «n»**3 / gemm_traffic_bytes(«n», «n», «n», t_min, t_min, 2) < _r:
    t_min += 1
### END SOLUTION""",
    names=("t_min",),
    public="""\
expect_int(t_min, t_min, "t_min (an integer: its value is checked when graded)")
assert 1 < t_min <= «n», f"t_min = {t_min}: a tile of one element cannot reach the ridge, and none is larger than the matrix\"""",
    hidden="""\
_r = ldf.ridge_point("«gpu»", "bf16")
_t = 1
while 2 * «n»**3 / ((2 * -(-«n» // _t) * «n» * «n» + «n» * «n») * 2) < _r:
    _t += 1
_naive = math.ceil(2 * _r * «n» / («n» - _r))
expect_int(t_min, _t, "t_min", hints={_naive: "that closed form ignores the edge tiles: count ceil(n / t) tiles per side"})""",
    alternative="""\
_r = ldf.ridge_point("«gpu»", "bf16")
_ts = np.arange(1, «n» + 1)
_tiles = -(-«n» // _ts)
_ai = 2.0 * «n»**3 / ((2 * _tiles * «n»**2 + «n»**2) * 2.0)
t_min = _ts[np.argmax(_ai >= _r)]                   # a numpy.int64""",
    mistakes=[("""\
_r = ldf.ridge_point("«gpu»", "bf16")
t_min = math.ceil(2 * _r * «n» / («n» - _r))""", "edge tiles")],
)

QUESTIONS = [Q1, Q2, Q3, Q4]
