"""Static vs continuous (iteration-level) batching of a seeded workload on the book's decoder (chapter 08).

The account batching changes is **weight reuse per read**: one decode forward reads every weight
once, whether it serves 1 row or 32.  Static batching forms a batch, runs it until its *longest*
request finishes, and only then admits new requests; rows whose request has finished keep being
computed (padding) and new arrivals wait.  Continuous batching (Orca, Yu et al. 2022, OSDI,
"iteration-level scheduling") re-forms the batch at every decode iteration: a finished request
leaves at once, a waiting one is prefilled into the free row and joins the next decode step.

Both schedulers here run the real :class:`llm_dataflow.model.Decoder` with one preallocated
:class:`~llm_dataflow.model.KVCache` of ``max_batch`` rows (ragged rows decode together with T = 1;
``cache.reset(r)`` + a prefill into ``cache.rows(r)`` refills a row).  The clock is a virtual clock:
arrivals are on it, and each forward advances it by its **measured** wall time
(``clock="wall"``) or by a deterministic cost model (``clock=StepCost(...)``, used by the tests).

Metric definitions (per request r with arrival a_r and output-token times t_{r,1} < … < t_{r,n}):

* **TTFT** (time to first token) = t_{r,1} − a_r: queueing + prefill.
* **ITL** (inter-token latency) = t_{r,i+1} − t_{r,i}, every gap of every request (a distribution).
* **TPOT** (time per output token) = (t_{r,n} − t_{r,1}) / (n − 1), one value per request with
  n ≥ 2: the mean of its ITLs.
* **E2E latency** = t_{r,n} − a_r.
* **Throughput** = Σ_r n_r / (max_r t_{r,n} − min_r a_r), output tokens per second of the run.

A token's time is the end of the forward that produced it (the prefill forward yields token 1).
"""
from __future__ import annotations

import math
import random
import statistics
import time
from dataclasses import dataclass, field

import torch

from .core.config import MAX_DIM
from .core.units import require_positive

__all__ = [
    "Request", "make_workload", "MAX_WORKLOAD_REQUESTS", "MAX_WORKLOAD_TOKENS", "StepCost", "ServeResult", "serve_static", "serve_continuous",
    "serving_metrics", "check_schedule",
]


@dataclass
class Request:
    """One request: ``rid``, ``arrival_s`` (s), ``prompt`` (LongTensor ``[T]``), ``output_len`` (tokens ≥ 1)."""

    rid: int
    arrival_s: float
    prompt: torch.Tensor
    output_len: int

    @property
    def prompt_len(self) -> int:
        return int(self.prompt.numel())


#: Most requests :func:`make_workload` draws.
MAX_WORKLOAD_REQUESTS = 2**16
#: Most prompt tokens (``n_requests × prompt_len[1]``) :func:`make_workload` may draw.
MAX_WORKLOAD_TOKENS = 2**24


def make_workload(n_requests: int = 24, rate_per_s: float = 200.0, prompt_len: tuple = (4, 32),
                  output_len: tuple = (2, 32), vocab_size: int = 256, seed: int = 0) -> list:
    """A seeded workload: Poisson arrivals (exponential gaps of mean ``1/rate_per_s`` s), prompt and
    output lengths uniform over the inclusive ranges, prompt tokens uniform over the vocabulary.

    Returns:
        list of :class:`Request`, sorted by arrival, ``rid`` = 0 … n−1.

    Bounds: ``n_requests`` at most :data:`MAX_WORKLOAD_REQUESTS` (65,536) and
    ``n_requests × prompt_len[1]`` at most :data:`MAX_WORKLOAD_TOKENS` (2^24 prompt tokens,
    128 MiB of int64 ids); ``vocab_size`` at most :data:`~llm_dataflow.core.config.MAX_DIM`; ``seed``
    an integer torch's generator accepts (−2^63 … 2^64 − 1).

    Raises:
        ValueError: ``n_requests`` or ``vocab_size`` not a positive integer or above its bound,
            ``rate_per_s`` not a positive finite number (or so small that arrival times
            overflow a float), ``prompt_len``/``output_len`` not a ``(low, high)`` pair of
            positive integers with low <= high, too many prompt tokens, a bad ``seed``.
    """
    require_positive("n_requests", n_requests)
    if n_requests > MAX_WORKLOAD_REQUESTS:
        raise ValueError(f"n_requests={n_requests} is not allowed; at most MAX_WORKLOAD_REQUESTS="
                         f"{MAX_WORKLOAD_REQUESTS:,}")
    require_positive("rate_per_s", rate_per_s, integer=False)
    require_positive("vocab_size", vocab_size)
    if vocab_size > MAX_DIM:
        raise ValueError(f"vocab_size={vocab_size} is not allowed; at most MAX_DIM={MAX_DIM}")
    for name, pair in (("prompt_len", prompt_len), ("output_len", output_len)):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ValueError(f"{name}={pair!r} is not allowed; give a (low, high) pair of positive integers")
        lo, hi = pair
        require_positive(name, lo)
        require_positive(name, hi)
        if hi < lo:
            raise ValueError(f"{name}={(lo, hi)!r} is not allowed; give (low, high) with low <= high")
    if n_requests * prompt_len[1] > MAX_WORKLOAD_TOKENS:
        raise ValueError(f"n_requests={n_requests} × prompt_len high={prompt_len[1]} is not allowed; at most "
                         f"MAX_WORKLOAD_TOKENS={MAX_WORKLOAD_TOKENS:,} prompt tokens")
    if isinstance(seed, bool) or not isinstance(seed, int) or not -2**63 <= seed < 2**64:
        raise ValueError(f"seed={seed!r} is not allowed; it must be an integer in -2**63 .. 2**64 - 1")
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    t, reqs = 0.0, []
    for rid in range(n_requests):
        t += rng.expovariate(rate_per_s)
        if not math.isfinite(t):
            raise ValueError(f"rate_per_s={rate_per_s!r} is not allowed: arrival times overflow a float")
        p = rng.randint(*prompt_len)
        reqs.append(Request(rid, t, torch.randint(0, vocab_size, (p,), generator=gen), rng.randint(*output_len)))
    return reqs


@dataclass(frozen=True)
class StepCost:
    """Deterministic forward time: ``fixed_s + per_token_s × tokens`` (s), tokens = B·T of the forward.

    ``fixed_s`` stands for reading the weights (paid once per forward, however many rows), the
    per-token term for the work that grows with the batch.  Used instead of wall time for
    reproducible tests and analytic comparisons.
    """

    fixed_s: float = 2e-3
    per_token_s: float = 5e-5

    def __call__(self, n_tokens: int) -> float:
        return self.fixed_s + self.per_token_s * n_tokens


@dataclass
class ServeResult:
    """What a scheduler run produced.

    Attributes:
        policy: ``"static"`` or ``"continuous"``.
        requests: the workload.
        tokens: ``rid → list of generated token ids``.
        token_times: ``rid → list of times (s, virtual clock)``, one per generated token.
        events: ``(rid, index)`` of every token in production order (for invariant checks).
        timeline: ``(t_s, rows_computed, rows_useful, kind)`` per forward; ``kind`` is
            ``"prefill"`` or ``"decode"``.
        measured: True when the clock advanced by measured wall time.
    """

    policy: str
    requests: list
    tokens: dict = field(default_factory=dict)
    token_times: dict = field(default_factory=dict)
    events: list = field(default_factory=list)
    timeline: list = field(default_factory=list)
    measured: bool = True


class _Engine:
    """Runs forwards on the real decoder and keeps the virtual clock."""

    def __init__(self, model, requests, max_batch, clock):
        require_positive("max_batch", max_batch)
        if clock != "wall" and not callable(clock):
            raise ValueError(f"clock={clock!r} is not allowed; give 'wall' or a StepCost")
        self.model, self.clock_kind = model, clock
        # static batching keeps feeding finished rows until the longest output is done
        max_len = max(r.prompt_len for r in requests) + max(r.output_len for r in requests) + 1
        self.cache = model.new_cache(max_batch, max_len)
        self.now = 0.0

    def forward(self, ids: torch.Tensor, cache, n_tokens: int, last=None) -> torch.Tensor:
        """One forward; returns the greedy token at position ``last[b]`` of each row (the final
        position when ``last`` is None).  ``n_tokens`` = B·T positions computed (padding included)."""
        t0 = time.perf_counter()
        if last is None:
            nxt = self.model(ids, cache, last_only=True)[:, -1].argmax(-1)
        else:
            logits = self.model(ids, cache)  # [B, T, V]: each row's last real position differs
            nxt = logits[torch.arange(ids.shape[0]), last].argmax(-1)
        dt = time.perf_counter() - t0
        self.now += dt if self.clock_kind == "wall" else self.clock_kind(n_tokens)
        return nxt


def _record(res: ServeResult, rid: int, tok: int, now: float) -> None:
    res.tokens[rid].append(tok)
    res.token_times[rid].append(now)
    res.events.append((rid, len(res.tokens[rid]) - 1))


def _new_result(policy, requests, clock):
    if not isinstance(requests, (list, tuple)) or not all(isinstance(r, Request) for r in requests):
        raise ValueError(f"requests={requests!r:.80} is not allowed; give a list of Request (see make_workload)")
    for r in requests:
        require_positive("output_len", r.output_len)
    res = ServeResult(policy, list(requests), measured=clock == "wall")
    for r in requests:
        res.tokens[r.rid], res.token_times[r.rid] = [], []
    return res


@torch.inference_mode()
def serve_static(model, requests: list, max_batch: int = 8, clock="wall") -> ServeResult:
    """Static batching: when the engine is idle, take up to ``max_batch`` arrived requests (FIFO; if
    none has arrived, jump to the next arrival), prefill them **in one forward** — prompts
    right-padded to the batch's longest, ``[B, T_max]``, so every row gets its first token at the
    same time — then decode all rows together (ragged cache, T = 1) until the longest finishes.
    Two kinds of padding waste: the prefill computes ``B·T_max`` positions for ``Σ_b T_b`` useful
    ones, and finished rows keep being computed in decode (fed token 0, output discarded).  New
    arrivals wait for the whole batch.

    Args:
        model: a :class:`~llm_dataflow.model.Decoder`.  requests: from :func:`make_workload`.
        max_batch: rows of the batch (≥ 1).  clock: ``"wall"`` or a :class:`StepCost`.

    Raises:
        ValueError: ``requests`` not a list of Request, ``max_batch`` < 1, a bad ``clock`` or an
            ``output_len`` < 1.
    """
    res = _new_result("static", requests, clock)
    eng = _Engine(model, requests, max_batch, clock)
    queue = sorted(requests, key=lambda r: (r.arrival_s, r.rid))
    i = 0
    while i < len(queue):
        if queue[i].arrival_s > eng.now:
            eng.now = queue[i].arrival_s  # idle until the next arrival
        batch = []
        while i < len(queue) and len(batch) < max_batch and queue[i].arrival_s <= eng.now:
            batch.append(queue[i])
            i += 1
        B = len(batch)
        eng.cache.reset()
        # one prefill forward for the whole batch: prompts right-padded with token 0 to T_max.
        # Causal masking keeps every real position blind to the pads after it, so row b's logits
        # at position T_b − 1 are exactly its unpadded prefill's; the pads' K/V land beyond T_b and
        # are forgotten by setting lengths[b] = T_b (entries past a row's length are masked).
        # Cost: B·T_max positions computed for Σ T_b useful ones.
        lens = [r.prompt_len for r in batch]
        T_max = max(lens)
        ids = torch.zeros(B, T_max, dtype=batch[0].prompt.dtype)
        for row, r in enumerate(batch):
            ids[row, :r.prompt_len] = r.prompt
        rows = eng.cache.rows(slice(0, B))
        last = eng.forward(ids, rows, B * T_max, last=torch.tensor(lens) - 1).tolist()
        rows.lengths.copy_(torch.tensor(lens))
        for r, tok in zip(batch, last):
            _record(res, r.rid, tok, eng.now)
        res.timeline.append((eng.now, B, B, "prefill"))
        while any(len(res.tokens[r.rid]) < r.output_len for r in batch):
            live = [len(res.tokens[r.rid]) < r.output_len for r in batch]
            ids = torch.tensor([[t if ok else 0] for t, ok in zip(last, live)])
            nxt = eng.forward(ids, eng.cache.rows(slice(0, B)), B).tolist()
            for row, r in enumerate(batch):
                if live[row]:
                    _record(res, r.rid, nxt[row], eng.now)
                    last[row] = nxt[row]
            res.timeline.append((eng.now, B, sum(live), "decode"))
    return res


@torch.inference_mode()
def serve_continuous(model, requests: list, max_batch: int = 8, clock="wall") -> ServeResult:
    """Continuous (iteration-level) batching.  Each iteration: admit arrived requests (FIFO) into free
    rows — each is prefilled into its row (``cache.reset(r)``, a forward on ``cache.rows(r)``),
    which yields its first token; then one ragged decode forward (T = 1) over rows ``0 … h`` where
    h is the highest busy row (free rows below h are fed token 0 and reset afterwards); a request
    that has its last token frees its row at once.  If nothing is running, jump to the next arrival.

    Same arguments and errors as :func:`serve_static`.
    """
    res = _new_result("continuous", requests, clock)
    eng = _Engine(model, requests, max_batch, clock)
    queue = sorted(requests, key=lambda r: (r.arrival_s, r.rid))
    slots: list = [None] * max_batch  # row → request
    last: list = [0] * max_batch
    eng.cache.reset()
    i = 0

    def done(r):
        return len(res.tokens[r.rid]) >= r.output_len

    while i < len(queue) or any(s is not None for s in slots):
        if all(s is None for s in slots) and queue[i].arrival_s > eng.now:
            eng.now = queue[i].arrival_s
        # admit: prefill arrived requests into free rows
        while i < len(queue) and queue[i].arrival_s <= eng.now and None in slots:
            row = slots.index(None)
            r = queue[i]
            i += 1
            eng.cache.reset(row)
            tok = int(eng.forward(r.prompt[None], eng.cache.rows(row), r.prompt_len)[0])
            _record(res, r.rid, tok, eng.now)
            res.timeline.append((eng.now, 1, 1, "prefill"))
            if done(r):
                eng.cache.reset(row)
            else:
                slots[row], last[row] = r, tok
        busy = [k for k, s in enumerate(slots) if s is not None]
        if not busy:
            continue
        h = busy[-1] + 1
        ids = torch.tensor([[last[k] if slots[k] is not None else 0] for k in range(h)])
        nxt = eng.forward(ids, eng.cache.rows(slice(0, h)), h).tolist()
        for k in range(h):
            r = slots[k]
            if r is None:
                eng.cache.reset(k)  # a free row was advanced by the forward: forget it
                continue
            _record(res, r.rid, nxt[k], eng.now)
            last[k] = nxt[k]
            if done(r):
                slots[k] = None
                eng.cache.reset(k)
        res.timeline.append((eng.now, h, len(busy), "decode"))
    return res


def _pct(xs, q):
    if not xs:
        return math.nan
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, math.ceil(q / 100 * len(s)) - 1))]  # nearest-rank percentile


def serving_metrics(res: ServeResult) -> dict:
    """TTFT, ITL, TPOT, E2E and throughput of a run (definitions in the module docstring).

    Returns:
        dict with lists ``ttft_s``, ``itl_s``, ``tpot_s``, ``e2e_s`` (s), ``throughput_tok_s``
        (tokens/s), ``output_tokens`` and, for each list, ``<name>_p50`` / ``_p90`` / ``_p99``
        (nearest-rank percentiles) and ``<name>_mean``.

    Raises:
        ValueError: ``res`` not a :class:`ServeResult`, or one with no output token.
    """
    if not isinstance(res, ServeResult):
        raise ValueError(f"res={res!r:.80} is not allowed; give the ServeResult of serve_static/serve_continuous")
    if not any(res.token_times.values()):
        raise ValueError("res holds no output token; nothing to measure")
    arr = {r.rid: r.arrival_s for r in res.requests}
    ttft, itl, tpot, e2e = [], [], [], []
    for rid, ts in res.token_times.items():
        if not ts:
            continue
        ttft.append(ts[0] - arr[rid])
        e2e.append(ts[-1] - arr[rid])
        itl += [b - a for a, b in zip(ts, ts[1:])]
        if len(ts) >= 2:
            tpot.append((ts[-1] - ts[0]) / (len(ts) - 1))
    n_tok = sum(len(v) for v in res.tokens.values())
    span = max(t[-1] for t in res.token_times.values() if t) - min(arr.values())
    out = {"ttft_s": ttft, "itl_s": itl, "tpot_s": tpot, "e2e_s": e2e, "output_tokens": n_tok,
           "throughput_tok_s": n_tok / span if span > 0 else math.nan}
    for name in ("ttft_s", "itl_s", "tpot_s", "e2e_s"):
        xs = out[name]
        out[f"{name}_mean"] = statistics.fmean(xs) if xs else math.nan
        for q in (50, 90, 99):
            out[f"{name}_p{q}"] = _pct(xs, q)
    return out


def check_schedule(res: ServeResult) -> None:
    """Assert the scheduler invariants: every request served exactly once with exactly
    ``output_len`` tokens, every ``(rid, index)`` token produced once, token times non-decreasing
    per request and not before its arrival.

    Raises:
        ValueError: ``res`` not a :class:`ServeResult`.
        AssertionError: naming the first violated invariant.
    """
    if not isinstance(res, ServeResult):
        raise ValueError(f"res={res!r:.80} is not allowed; give the ServeResult of serve_static/serve_continuous")
    rids = [r.rid for r in res.requests]
    assert len(set(rids)) == len(rids), "duplicate request ids in the workload"
    assert set(res.tokens) == set(rids), "a request was lost or invented"
    assert len(res.events) == len(set(res.events)), "a token was produced twice"
    want = {(r.rid, k) for r in res.requests for k in range(r.output_len)}
    assert set(res.events) == want, "a token is missing or extra"
    for r in res.requests:
        ts = res.token_times[r.rid]
        assert len(res.tokens[r.rid]) == r.output_len == len(ts), f"request {r.rid}: wrong token count"
        assert ts[0] >= r.arrival_s, f"request {r.rid}: token before arrival"
        assert all(b >= a for a, b in zip(ts, ts[1:])), f"request {r.rid}: token times go backwards"
