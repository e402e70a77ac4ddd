"""Speculative decoding (chapter 08): a small draft proposes, the target verifies in one forward.

The account it changes is **weight reuse per read**.  A decode step of the target reads all of its
weights to produce one token; verifying γ draft tokens in one forward reads them once for up to
γ + 1 tokens.  With per-token acceptance rate α the expected number of tokens per target forward is

    E[tokens / step] = (1 − α^(γ+1)) / (1 − α)          (Leviathan et al. 2023, arXiv:2211.17192, eq. 1)

and the wall-time improvement, with c = draft forward time / target forward time, is
``E / (γ·c + 1)`` (their Theorem 3.8).

:func:`speculative_generate` is *greedy* speculative decoding: a draft token is accepted iff it equals
the target's argmax at that position; at the first mismatch the target's own argmax is emitted.  Every
emitted token is therefore the target's greedy token given the tokens before it, so the output equals
``target.generate`` exactly (tested; the only caveat is floating point: the target scores γ + 1
positions in one forward instead of one at a time, which could flip an exact tie).

Trained weights are not available, and two random models agree on ≈ 1/V of tokens.  To give the
draft something to agree with, :func:`build_target_from_draft` does what distillation does in reverse:
it takes a random ``tiny-draft`` decoder and builds a ``tiny-llama``-shaped target whose first
``d_model`` channels, first heads and first layer compute the draft exactly, plus random extra capacity
of scale ``noise``.  ``noise`` sets α: 0 gives near-total agreement, larger values less.
"""
from __future__ import annotations

import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from .core.config import ModelConfig, model_config
from .core.units import require_positive
from .model import Decoder

__all__ = [
    "expected_tokens_per_step", "speculative_speedup", "best_gamma", "speculative_calculator",
    "SpecStats", "speculative_generate", "build_target_from_draft", "make_speculative_pair",
    "accepted_count_pmf", "acceptance_by_position", "MAX_GAMMA_LIST", "LoopTiming", "timed_greedy_generate",
    "time_speculative",
]

#: Largest γ for the functions that return one entry per draft position (a pmf, per-position rates,
#: a search over γ): a list of γ + 1 numbers must fit in memory and time.  Published systems
#: draft at most a few dozen tokens per step (Leviathan et al. 2023 test γ ≤ 10).
MAX_GAMMA_LIST = 65_536


def _check_alpha_gamma(alpha, gamma, max_gamma: int | None = None, name: str = "gamma"):
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha) or not 0 <= alpha <= 1:
        raise ValueError(f"alpha={alpha!r} is not allowed; the acceptance rate must lie in [0, 1]")
    _check_gamma(gamma, max_gamma, name)


def _check_gamma(gamma, max_gamma: int | None = None, name: str = "gamma"):
    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 1:
        raise ValueError(f"{name}={gamma!r} is not allowed; the number of draft tokens must be an integer >= 1")
    if max_gamma is not None and gamma > max_gamma:
        raise ValueError(f"{name}={gamma!r} is not allowed; at most MAX_GAMMA_LIST={max_gamma:,} here (one list "
                         "entry per draft position)")


def expected_tokens_per_step(alpha: float, gamma: int) -> float:
    """Expected tokens produced per target forward with γ draft tokens and acceptance rate α.

    ``(1 − α^(γ+1)) / (1 − α)`` (Leviathan, Kalman & Matias 2023, "Fast Inference from
    Transformers via Speculative Decoding", arXiv:2211.17192, eq. (1)), assuming each draft token
    is accepted independently with probability α.  The limit α → 1 is γ + 1 (all γ drafts accepted
    plus the target's own token); α = 0 gives 1 (plain decoding).

    Raises:
        ValueError: ``alpha`` outside [0, 1] or ``gamma`` not an integer ≥ 1.
    """
    _check_alpha_gamma(alpha, gamma)
    if alpha == 1:
        return float(gamma + 1)
    return (1 - alpha ** (gamma + 1)) / (1 - alpha)


def speculative_speedup(alpha: float, gamma: int, cost_ratio: float, verify_ratio: float = 1.0) -> float:
    """Expected wall-time improvement of speculative over plain decoding.

    ``(1 − α^(γ+1)) / ((1 − α)(γ c + v))``, where c = ``cost_ratio`` = time of one draft forward /
    time of one target decode forward and v = ``verify_ratio`` = time of the target's (γ+1)-token
    verify forward / time of one target decode forward.  With v = 1 this is Leviathan et al. 2023,
    Theorem 3.8, which assumes verifying γ + 1 tokens costs one decode step (true while decode is
    memory-bound: the weights are read once either way); v > 1 charges a verify pass that costs
    more.  Scheduling overhead (Python, cache rollback) is not modelled.  Above 1 it pays.

    Raises:
        ValueError: bad ``alpha``/``gamma``, or ``cost_ratio`` negative or not finite, or
            ``verify_ratio`` not a finite number > 0.
    """
    _check_alpha_gamma(alpha, gamma)
    if isinstance(cost_ratio, bool) or not isinstance(cost_ratio, (int, float)) or not math.isfinite(cost_ratio) \
            or cost_ratio < 0:
        raise ValueError(f"cost_ratio={cost_ratio!r} is not allowed; it must be a finite number >= 0")
    if isinstance(verify_ratio, bool) or not isinstance(verify_ratio, (int, float)) \
            or not math.isfinite(verify_ratio) or verify_ratio <= 0:
        raise ValueError(f"verify_ratio={verify_ratio!r} is not allowed; it must be a finite number > 0")
    return expected_tokens_per_step(alpha, gamma) / (gamma * cost_ratio + verify_ratio)


def accepted_count_pmf(alpha: float, gamma: int) -> list:
    """P(n = k), k = 0 … γ, of the accepted drafts per step under the i.i.d. model of
    :func:`expected_tokens_per_step`: a truncated geometric, ``α^k (1 − α)`` for k < γ and ``α^γ``
    for k = γ (Leviathan et al. 2023, §3.1).  Sums to 1.

    Raises:
        ValueError: ``alpha`` outside [0, 1]; ``gamma`` not an integer in 1 … :data:`MAX_GAMMA_LIST`
            (the list has γ + 1 entries).
    """
    _check_alpha_gamma(alpha, gamma, MAX_GAMMA_LIST)
    return [alpha ** k * (1 - alpha) for k in range(gamma)] + [alpha ** gamma]


def acceptance_by_position(accepted: list, gamma: int) -> list:
    """Conditional acceptance rate of draft position i = 1 … γ: ``(tests_i, accepts_i, rate_i)``.

    Draft i is tested only if drafts 1 … i−1 were all accepted (n ≥ i − 1) and accepted if n ≥ i,
    so ``rate_i = #{n ≥ i} / #{n ≥ i − 1}`` (``None`` when never tested: the rate is undefined).
    The i.i.d. model behind the formula says every ``rate_i`` equals α; a trend with i shows
    dependence between positions — a check the pooled α (:attr:`SpecStats.alpha`) cannot make,
    since it is fitted to the same counts.

    Args:
        accepted: accepted drafts per step, each an integer in 0 … γ (e.g. :attr:`SpecStats.accepted`).

    Raises:
        ValueError: ``gamma`` not an integer in 1 … :data:`MAX_GAMMA_LIST`, ``accepted`` not a
            list of integers, or a count outside 0 … γ.
    """
    _check_gamma(gamma, MAX_GAMMA_LIST)
    if not isinstance(accepted, (list, tuple)):
        raise ValueError(f"accepted={accepted!r} is not allowed; give a list of accepted-draft counts")
    bad = [n for n in accepted if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= gamma]
    if bad:
        raise ValueError(f"accepted contains {bad[0]!r}; every count must be an integer in 0 … gamma={gamma}")
    at_least = [0] * (gamma + 2)  # at_least[j] = #{n >= j}, by a histogram and a suffix sum: O(γ + steps)
    for n in accepted:
        at_least[n] += 1
    for j in range(gamma - 1, -1, -1):
        at_least[j] += at_least[j + 1]
    return [(at_least[i - 1], at_least[i], at_least[i] / at_least[i - 1] if at_least[i - 1] else None)
            for i in range(1, gamma + 1)]


def best_gamma(alpha: float, cost_ratio: float, max_gamma: int = 16) -> tuple:
    """The γ in 1..``max_gamma`` maximising :func:`speculative_speedup`; returns ``(γ, speedup)``.

    Raises:
        ValueError: bad ``alpha`` or ``cost_ratio``; ``max_gamma`` not an integer in
            1 … :data:`MAX_GAMMA_LIST`.
    """
    _check_gamma(max_gamma, MAX_GAMMA_LIST, "max_gamma")
    speculative_speedup(alpha, 1, cost_ratio)  # validates alpha and cost_ratio once
    best = max(range(1, max_gamma + 1), key=lambda g: speculative_speedup(alpha, g, cost_ratio))
    return best, speculative_speedup(alpha, best, cost_ratio)


def speculative_calculator(alpha: float = 0.8, gamma: int = 4, cost_ratio: float = 0.1) -> dict:
    """Outputs for ``ldf.calculator``: expected tokens per target step, speed-up, best γ."""
    g, s = best_gamma(alpha, cost_ratio)
    sp = speculative_speedup(alpha, gamma, cost_ratio)
    return {"expected tokens per target step": round(expected_tokens_per_step(alpha, gamma), 3),
            "speed-up vs plain decoding": round(sp, 3),
            "pays?": "yes" if sp > 1 else "no",
            "best γ (1..16)": g, "speed-up at best γ": round(s, 3)}


# --- timing a generation loop and the forwards inside it ----------------------------------------
@dataclass
class LoopTiming:
    """Wall time of one generation loop and of the forwards inside it, read from one clock.

    Every part is an interval inside the loop's own interval, timed by the same clock
    (``time.perf_counter``, after ``torch.cuda.synchronize()`` on a CUDA device), so the parts sum
    to at most the whole: ``forward_s <= wall_s`` (tested).  What is left, :attr:`other_s`, is the
    loop's own work between forwards (Python, building inputs, argmax, comparing proposals, cache
    rollback).

    Attributes:
        wall_s: the whole loop, s.
        part_s: summed seconds per kind of forward (e.g. ``"prefill"``, ``"decode"``,
            ``"draft"``, ``"verify"``).
        part_n: forwards per kind.
    """

    wall_s: float = 0.0
    part_s: dict = field(default_factory=dict)
    part_n: dict = field(default_factory=dict)

    @property
    def forward_s(self) -> float:
        """Seconds spent inside forwards (all kinds), ≤ :attr:`wall_s`."""
        return sum(self.part_s.values())

    @property
    def other_s(self) -> float:
        """``wall_s − forward_s`` (≥ 0): the loop's own work between forwards."""
        return self.wall_s - self.forward_s

    def mean_s(self, kind: str) -> float:
        """Mean seconds of one forward of ``kind``.

        Raises:
            ValueError: no forward of that kind was timed.
        """
        if not self.part_n.get(kind):
            raise ValueError(f"kind={kind!r} is not allowed; timed kinds: {', '.join(self.part_n) or 'none'}")
        return self.part_s[kind] / self.part_n[kind]


class _Clock:
    """One clock for a loop and its parts; synchronises a CUDA device before every reading."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.timing = LoopTiming()

    def now(self) -> float:
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter()

    @contextmanager
    def part(self, kind: str):
        t = self.now()
        yield
        self.timing.part_s[kind] = self.timing.part_s.get(kind, 0.0) + self.now() - t
        self.timing.part_n[kind] = self.timing.part_n.get(kind, 0) + 1


@torch.inference_mode()
def timed_greedy_generate(model, input_ids: torch.Tensor, max_new_tokens: int) -> tuple[torch.Tensor, LoopTiming]:
    """Plain greedy decoding with a KV cache — the loop of ``Decoder.generate(use_cache=True)`` —
    timed the way :func:`speculative_generate` times itself: the whole loop and each forward
    (``"prefill"``, ``"decode"``) on one clock.

    Args:
        model: a :class:`llm_dataflow.model.Decoder`.  input_ids: ``[1, T]``.
        max_new_tokens: tokens to produce (≥ 1).

    Returns:
        ``(tokens [1, T + max_new_tokens], LoopTiming)``; tokens equal ``model.generate``'s (tested).

    Raises:
        ValueError: batch ≠ 1 or ``max_new_tokens`` < 1.
    """
    require_positive("max_new_tokens", max_new_tokens)
    if input_ids.dim() != 2 or input_ids.shape[0] != 1:
        raise ValueError(f"input_ids has shape {tuple(input_ids.shape)}; [1, T] (one sequence) is required")
    clock = _Clock(input_ids.device)
    t0 = clock.now()
    T0 = input_ids.shape[1]
    cache = model.new_cache(1, T0 + max_new_tokens)
    out = input_ids[0].tolist()
    with clock.part("prefill"):
        logits = model(input_ids, cache, last_only=True)
    out.append(int(logits[0, -1].argmax()))
    for _ in range(max_new_tokens - 1):
        step = torch.tensor([[out[-1]]], dtype=input_ids.dtype, device=input_ids.device)
        with clock.part("decode"):
            logits = model(step, cache)
        out.append(int(logits[0, -1].argmax()))
    clock.timing.wall_s = clock.now() - t0
    return torch.tensor([out], dtype=input_ids.dtype, device=input_ids.device), clock.timing


# --- greedy speculative decoding with KV caches --------------------------------------------------
@dataclass
class SpecStats:
    """What one :func:`speculative_generate` call measured.

    Attributes:
        gamma: draft tokens proposed per step (γ).
        accepted: accepted draft tokens n_i of each verify step (0 … γ).
        target_forwards: target forwards including the prefill.  draft_forwards: likewise for the draft.
        wall_s: wall time of the call, s.
        timing: the call's :class:`LoopTiming` — the whole and its forwards (``"target prefill"``,
            ``"draft prefill"``, ``"draft"``, ``"verify"``) on one clock.
    """

    gamma: int
    accepted: list = field(default_factory=list)
    target_forwards: int = 0
    draft_forwards: int = 0
    wall_s: float = 0.0
    timing: LoopTiming = field(default_factory=LoopTiming)

    @property
    def steps(self) -> int:
        """Verify steps (target forwards after the prefill)."""
        return len(self.accepted)

    @property
    def tokens_per_step(self) -> float:
        """Mean tokens emitted per verify step, ``mean(n_i + 1)`` (before the final truncation)."""
        return sum(n + 1 for n in self.accepted) / max(1, self.steps)

    @property
    def acceptance_fraction(self) -> float:
        """Accepted / proposed draft tokens, ``Σn_i / (γ·steps)``.  Biased low as an estimate of α:
        drafts after the first rejection are never tested."""
        return sum(self.accepted) / max(1, self.gamma * self.steps)

    @property
    def alpha(self) -> float:
        """Per-token acceptance rate α (maximum-likelihood under the i.i.d. model of the formula):
        accepted tests / all tests, where a step with n_i < γ tested n_i + 1 drafts and a step with
        n_i = γ tested γ.  ``Σn_i / (Σn_i + #{i: n_i < γ})``.

        Fitted to the same counts it is used to predict, so "tokens per step vs the formula at this
        α" is no independent test (for γ = 1 it is an identity); :func:`acceptance_by_position` and
        :func:`accepted_count_pmf` check the i.i.d. model itself."""
        acc = sum(self.accepted)
        rej = sum(1 for n in self.accepted if n < self.gamma)
        return acc / (acc + rej) if acc + rej else 0.0


@torch.inference_mode()
def speculative_generate(target, draft, input_ids: torch.Tensor, max_new_tokens: int, gamma: int = 4
                         ) -> tuple[torch.Tensor, SpecStats]:
    """Greedy speculative decoding of one sequence.

    Each step: the draft proposes d_1 … d_γ autoregressively (γ draft forwards of T = 1, or T = 2
    after a fully accepted step); the target runs one forward over ``[last, d_1 … d_γ]`` (T = γ + 1)
    and gives its argmax g_0 … g_γ; the longest prefix with d_{i+1} = g_i is accepted (n tokens) and
    g_n is appended — n + 1 tokens per target forward.  Both KV caches are rolled back by lowering
    ``cache.lengths`` (the rejected positions are simply overwritten later: no copy).

    Args:
        target, draft: :class:`llm_dataflow.model.Decoder` with the same ``vocab_size``.
        input_ids: ``[1, T]`` prompt.  max_new_tokens: tokens to produce (≥ 1).  gamma: γ ≥ 1.

    Returns:
        ``(tokens [1, T + max_new_tokens], SpecStats)``; tokens equal ``target.generate(input_ids,
        max_new_tokens)``.

    Raises:
        ValueError: batch ≠ 1, γ < 1, ``max_new_tokens`` < 1, or different vocabularies.
    """
    if isinstance(gamma, bool) or not isinstance(gamma, int) or gamma < 1:
        raise ValueError(f"gamma={gamma!r} is not allowed; the number of draft tokens must be an integer >= 1")
    require_positive("max_new_tokens", max_new_tokens)
    if input_ids.dim() != 2 or input_ids.shape[0] != 1:
        raise ValueError(f"input_ids has shape {tuple(input_ids.shape)}; [1, T] (one sequence) is required")
    if target.cfg.vocab_size != draft.cfg.vocab_size:
        raise ValueError(f"draft vocab_size={draft.cfg.vocab_size} differs from target vocab_size="
                         f"{target.cfg.vocab_size}; they must share the vocabulary")
    clock = _Clock(input_ids.device)
    t0 = clock.now()
    st = SpecStats(gamma)
    T0 = input_ids.shape[1]
    max_len = T0 + max_new_tokens + gamma + 2
    tc, dc = target.new_cache(1, max_len), draft.new_cache(1, max_len)
    out = input_ids[0].tolist()
    with clock.part("target prefill"):
        logits = target(input_ids, tc, last_only=True)
    last = int(logits[0, -1].argmax())  # prefill: the first token
    st.target_forwards += 1
    with clock.part("draft prefill"):
        draft(input_ids, dc, last_only=True)  # the draft's cache holds the prompt too
    st.draft_forwards += 1
    out.append(last)
    pending = [last]  # tokens not yet in the draft's cache (ends with `last`)
    while len(out) - T0 < max_new_tokens:
        # draft: γ proposals, one forward each (the first may feed 2 pending tokens)
        props = []
        feed = pending
        for _ in range(gamma):
            x = torch.tensor([feed], dtype=input_ids.dtype, device=input_ids.device)
            with clock.part("draft"):
                logits = draft(x, dc, last_only=True)
            st.draft_forwards += 1
            props.append(int(logits[0, -1].argmax()))
            feed = props[-1:]
        # target: one forward over [last, d_1 … d_γ], γ + 1 positions
        block = torch.tensor([[last] + props], dtype=input_ids.dtype, device=input_ids.device)
        with clock.part("verify"):
            logits = target(block, tc)
        g = logits[0].argmax(-1).tolist()  # g_i = target's greedy token after position i
        st.target_forwards += 1
        n = 0
        while n < gamma and props[n] == g[n]:
            n += 1
        st.accepted.append(n)
        out.extend(props[:n] + [g[n]])
        tc.lengths -= gamma - n  # keep last, d_1 … d_n; drop d_{n+1} … d_γ
        if n < gamma:
            dc.lengths -= gamma - 1 - n  # the draft cached last, d_1 … d_{γ-1}; keep last, d_1 … d_n
            pending = [g[n]]
        else:
            pending = [props[-1], g[n]]  # d_γ was proposed but never fed to the draft
        last = g[n]
    clock.timing.wall_s = st.wall_s = clock.now() - t0
    st.timing = clock.timing
    return torch.tensor([out[:T0 + max_new_tokens]], dtype=input_ids.dtype, device=input_ids.device), st


def time_speculative(target, draft, input_ids: torch.Tensor, max_new_tokens: int, gamma: int = 4,
                     repeat: int = 3) -> dict:
    """Plain greedy and speculative decoding of the same prompt, timed the same way.

    Both loops run ``repeat`` times, alternating (after one untimed warm-up of each), with the
    same clock and the same synchronisation (:class:`LoopTiming`); for each loop the run with the
    median wall time is kept *with its own parts*, so every part reported is part of the whole
    reported beside it.  The cost ratios of the speed-up formula come from those runs:
    ``c`` = mean draft forward / mean plain decode forward, ``v`` = mean verify forward (γ + 1
    tokens) / mean plain decode forward.

    Returns:
        ``{"plain": LoopTiming, "speculative": LoopTiming, "stats": SpecStats (of the kept
        speculative run), "c": float, "v": float, "speedup": plain wall / speculative wall}``.

    Raises:
        ValueError: as :func:`speculative_generate`, or ``repeat`` < 1.
    """
    require_positive("repeat", repeat)
    timed_greedy_generate(target, input_ids, max_new_tokens)              # warm-up, untimed
    speculative_generate(target, draft, input_ids, max_new_tokens, gamma)
    plains, specs = [], []
    for _ in range(repeat):
        plains.append(timed_greedy_generate(target, input_ids, max_new_tokens)[1])
        specs.append(speculative_generate(target, draft, input_ids, max_new_tokens, gamma)[1])
    plain = sorted(plains, key=lambda t: t.wall_s)[(repeat - 1) // 2]     # the median run, parts included
    st = sorted(specs, key=lambda s: s.wall_s)[(repeat - 1) // 2]
    spec = st.timing
    if "decode" not in plain.part_n or "draft" not in spec.part_n or "verify" not in spec.part_n:
        raise ValueError(f"max_new_tokens={max_new_tokens} is too small to time a decode step; give at least 2")
    step = plain.mean_s("decode")
    return {"plain": plain, "speculative": spec, "stats": st, "c": spec.mean_s("draft") / step,
            "v": spec.mean_s("verify") / step, "speedup": plain.wall_s / spec.wall_s}


# --- a draft/target pair that agrees --------------------------------------------------------------
@torch.no_grad()
def build_target_from_draft(draft, target_cfg: ModelConfig | str = "tiny-llama", noise: float = 0.0,
                            seed: int = 0):
    """A target :class:`Decoder` of ``target_cfg`` that contains ``draft`` exactly, plus noise.

    Construction (D_d, D_t the two d_model; the draft's channels are the target's first D_d):

    * embeddings, q/k/v/o, gate/up/down and lm_head: the draft's matrix in the top-left block, zeros
      elsewhere; target heads ``h < H_d`` are the draft's heads (same d_h and the same H/H_kv group
      size, so head h uses the same kv head);
    * RMSNorm weights × √(D_d/D_t): a vector zero beyond D_d has an RMS √(D_d/D_t) times smaller over
      D_t channels, so this restores the draft's normalised values (ε differs by D_t/D_d, a small
      mismatch);
    * layers beyond the draft's are zero (their residual branches add 0);
    * then every weight matrix gets ``noise × 0.02 × N(0, 1)`` (0.02: the decoder's init std).

    With ``noise = 0`` the target's logits equal the draft's up to that ε mismatch; ``noise`` lowers
    the acceptance rate α continuously.

    Raises:
        ValueError: vocabularies or d_h differ, a target dimension is smaller than the draft's, the
            H/H_kv group sizes differ, or ``noise`` < 0.
    """
    tcfg = model_config(target_cfg) if isinstance(target_cfg, str) else target_cfg
    dcfg = draft.cfg
    if not (isinstance(noise, (int, float)) and math.isfinite(noise) and noise >= 0):
        raise ValueError(f"noise={noise!r} is not allowed; it must be a finite number >= 0")
    if tcfg.vocab_size != dcfg.vocab_size or tcfg.head_dim != dcfg.head_dim:
        raise ValueError(f"target vocab_size/head_dim=({tcfg.vocab_size}, {tcfg.head_dim}) must equal the "
                         f"draft's ({dcfg.vocab_size}, {dcfg.head_dim})")
    for f in ("n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff"):
        if getattr(tcfg, f) < getattr(dcfg, f):
            raise ValueError(f"target {f}={getattr(tcfg, f)} is smaller than the draft's {getattr(dcfg, f)}")
    if tcfg.n_heads // tcfg.n_kv_heads != dcfg.n_heads // dcfg.n_kv_heads:
        raise ValueError("target and draft must have the same query heads per kv head (n_heads / n_kv_heads)")
    if tcfg.is_moe or dcfg.is_moe:
        raise ValueError("build_target_from_draft supports dense configs only (n_routed_experts=0)")
    g = torch.Generator().manual_seed(seed)
    target = Decoder(tcfg, dtype=draft.dtype)
    tsd, dsd = target.state_dict(), draft.state_dict()
    r = math.sqrt(dcfg.d_model / tcfg.d_model)
    for name, t in tsd.items():
        t.zero_()
        if name.endswith("norm.weight"):
            t.fill_(r)
        src = dsd.get(name)
        if src is None:
            continue
        if name.endswith("norm.weight"):
            t[: src.shape[0]] = src * r
        else:
            t[tuple(slice(0, s) for s in src.shape)] = src
    for name, t in tsd.items():
        if t.dim() == 2 and noise > 0:
            t += noise * 0.02 * torch.randn(t.shape, generator=g, dtype=t.dtype)
    target.load_state_dict(tsd)
    return target


def make_speculative_pair(noise: float = 0.0, seed: int = 0, draft_cfg: str = "tiny-draft",
                          target_cfg: str = "tiny-llama"):
    """``(target, draft)``: a random ``draft_cfg`` decoder (seeded) and
    :func:`build_target_from_draft` of it.  Both FP32 on CPU."""
    torch.manual_seed(seed)
    draft = Decoder(model_config(draft_cfg))
    return build_target_from_draft(draft, target_cfg, noise, seed + 1), draft
