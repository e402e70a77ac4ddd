"""The book's decode loop (chapter 05): greedy generation with the KV cache, the bandwidth it
achieves against STREAM measured between its steps, a Hugging Face ``transformers`` peer on the
same weights, and timings of one prefill or one decode step.

The bytes a step must move come from :mod:`llm_dataflow.core.accounting`; the STREAM kernels and the
timing helpers from :mod:`llm_dataflow.measure`.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .core.accounting import decode_step_bytes, weight_bytes
from .core.config import ModelConfig
from .core.units import MiB, require_nonnegative, require_positive
from .linear_kernels import LINEAR_KERNELS, LINEAR_TUNE_ROUNDS, SPLIT_MAX_ROWS, linear_choice
from .measure import StreamKernel, TORCH_DTYPES, best_time, synchronize
from .tokenization import check_token_ids

__all__ = ["DecodeRun", "greedy_decode", "DecodeBandwidth", "decode_bandwidth", "hf_peer_model",
           "hf_greedy_decode", "time_prefill", "time_decode_step"]


@dataclass(frozen=True)
class DecodeRun:
    """One greedy generation.

    Attributes:
        tokens: LongTensor [B, T + n_new] (prompt then generated ids).
        prefill_s: wall time of the prefill (s).
        step_times: wall time of each decode step after the prefill (s; ``n_new − 1`` of them,
            the prefill produces the first new token).  Step ``i`` (1-based) attends
            ``T + i − 1`` cached positions plus its own.  On a GPU without ``before_step`` the
            steps are not synchronised one by one (the host queues ahead), so only their sum
            is the loop's wall time; with ``before_step`` each is synchronised.
    """

    tokens: torch.Tensor
    prefill_s: float
    step_times: tuple

    @property
    def n_steps(self) -> int:
        """Decode steps timed (``n_new − 1``)."""
        return len(self.step_times)

    @property
    def decode_s(self) -> float:
        """Total time of the decode steps (s)."""
        return math.fsum(self.step_times)

    @property
    def step_s(self) -> float:
        """Mean seconds per decode step (``nan`` when no step was timed)."""
        return self.decode_s / self.n_steps if self.n_steps else math.nan


@torch.inference_mode()
def greedy_decode(model, input_ids: torch.Tensor, max_new_tokens: int, *,
                  before_step: Callable[[], object] | None = None) -> DecodeRun:
    """The book's greedy decode loop: one prefill, then one ``forward`` of a single token per row
    per step with the KV cache; argmax picks the next token.  Nothing else runs per step — no
    logits processors, no stopping criteria, no Python-side bookkeeping beyond one slice
    assignment into a preallocated output — so on a batch-1 step the time is the weight read.
    The prompt's IDs are checked once, before the clock starts (a serving engine checks a request
    when it admits it); the steps feed back argmax IDs, in ``[0, V)`` by construction, unchecked.

    Args:
        model: an :class:`llm_dataflow.model.Decoder` (``forward(ids, cache)``, ``new_cache``).
        input_ids: LongTensor [B, T] on the model's device.
        max_new_tokens: n ≥ 1 tokens to generate.
        before_step: called before each decode step, outside its timed region (used by
            :func:`decode_bandwidth` to measure the machine's bandwidth right before each step).

    Returns:
        :class:`DecodeRun` with the tokens, the prefill time and every step's time.

    Raises:
        ValueError: ``max_new_tokens`` < 1, ``input_ids`` not a 2-D int32/int64 tensor, or an ID
            outside ``[0, V)`` (:func:`~llm_dataflow.tokenization.check_token_ids`).
    """
    require_positive("max_new_tokens", max_new_tokens)
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
        raise ValueError(f"input_ids={input_ids!r:.60} is not allowed; it must be a tensor [B, T]")
    check_token_ids(input_ids, model.cfg.vocab_size)
    B, T = input_ids.shape
    dev = input_ids.device
    out = torch.empty(B, T + max_new_tokens, dtype=torch.long, device=dev)
    out[:, :T] = input_ids
    cache = model.new_cache(B, T + max_new_tokens)
    synchronize(dev)
    t0 = time.perf_counter()
    logits = model(input_ids, cache, last_only=True, check_ids=False)  # prefill: [B, 1, V] (last position only)
    nxt = logits[:, -1].argmax(-1, keepdim=True)       # [B, 1]
    out[:, T:T + 1] = nxt
    synchronize(dev)
    prefill_s = time.perf_counter() - t0
    times = []
    t_prev = time.perf_counter()
    for i in range(1, max_new_tokens):
        if before_step is not None:
            before_step()
            synchronize(dev)
            t_prev = time.perf_counter()
        logits = model(nxt, cache, check_ids=False)    # decode: [B, 1, V]; reads every weight once
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        out[:, T + i:T + i + 1] = nxt
        if before_step is not None:
            synchronize(dev)  # a GPU step must finish before the next bandwidth pass
        t = time.perf_counter()
        times.append(t - t_prev)
        t_prev = t
    if times and before_step is None:
        # no per-step sync (a GPU queues steps ahead): the last step absorbs the wait, so the
        # times sum to the loop's wall time
        synchronize(dev)
        times[-1] += time.perf_counter() - t_prev
    return DecodeRun(out, prefill_s, tuple(times))


@dataclass(frozen=True)
class DecodeBandwidth:
    """Bandwidth achieved by batch-1 greedy decoding.

    Attributes:
        model_bytes: bytes of all stored weights in the run's dtype (B).
        bytes_per_step: mean over the timed steps of the bytes a step must read (B): weights
            with the embedding as one gathered row, plus the KV cache at that step's context,
            plus the new KV write (:func:`decode_step_bytes` with ``embedding="rows"``).
        steps_per_s: decode steps per second (measured: steps ÷ their summed time, median over
            the rounds).
        achieved_bandwidth: ``bytes_per_step × steps_per_s`` (B/s).
        peak_bandwidth: the bandwidth the loop is compared with (B/s).  Paired (no peak given):
            the STREAM throughput over the passes run between the steps — the bytes of each
            pair's faster kernel (copy or triad) summed, over their summed times, median over
            the rounds; or the value given.
        high_peak_bandwidth: the 90th percentile of the single STREAM passes (B/s): what the
            machine delivers in its better moments; or the value given.
        fraction: ``achieved_bandwidth ÷ peak_bandwidth``.
        fraction_of_high: ``achieved_bandwidth ÷ high_peak_bandwidth`` — the stricter figure.
        run: the last :class:`DecodeRun`.
    """

    model_bytes: int
    bytes_per_step: float
    steps_per_s: float
    achieved_bandwidth: float
    peak_bandwidth: float
    high_peak_bandwidth: float
    fraction: float
    fraction_of_high: float
    run: DecodeRun


_TORCH_TO_NAME = {v: k for k, v in TORCH_DTYPES.items()}


def _model_dtype_name(model) -> str:
    p = next(model.parameters())
    if p.dtype not in _TORCH_TO_NAME:
        raise ValueError(f"model dtype {p.dtype} is not allowed; allowed: float32, bfloat16, float16")
    return _TORCH_TO_NAME[p.dtype]


# Paired STREAM arrays: ≫ a CPU's 32 MiB L3 or a GPU's ~50 MB L2, small enough to stay allocated
# beside the model for the whole run.
_PAIRED_STREAM_BYTES = {"cpu": 64 * MiB, "cuda": 256 * MiB}


def decode_bandwidth(model, cfg: ModelConfig, *, prompt_len: int = 8, n_new: int = 32, repeat: int = 3,
                     peak_bandwidth: float | None = None, seed: int = 0,
                     stream_bytes: int | None = None) -> DecodeBandwidth:
    """Run :func:`greedy_decode` at batch 1 and report the bandwidth it achieves.

    The prompt is ``prompt_len`` seeded random ids; ``n_new`` tokens are generated in each of
    ``repeat`` rounds after a warm-up, which runs until :func:`llm_dataflow.linear` has chosen
    the kernel of every projection shape (:func:`~llm_dataflow.linear_kernels.linear_choice`).  Unless
    ``peak_bandwidth`` (B/s) is given, the peak is
    measured *paired*: right before every decode step one pass of STREAM copy and one of triad
    run (:func:`stream_bandwidth`'s kernels, arrays preallocated; ``stream_bytes`` each, by default
    64 MiB on a CPU and 256 MiB on a GPU: give more past a larger last-level cache,
    :func:`llm_dataflow.memory.past_last_level_bytes`), and the faster of the two is that step's
    STREAM interval.  Decode and
    STREAM are then measured the same way, as throughput over interleaved intervals::

        achieved = Σ step bytes / Σ step time      peak = Σ STREAM bytes / Σ STREAM time

    so on a shared machine, where the bandwidth other tenants leave drifts by 2× within
    seconds, both see the same conditions.  Each is the median over the rounds, and
    :attr:`DecodeBandwidth.fraction` is their ratio; :attr:`DecodeBandwidth.fraction_of_high`
    compares with the 90th percentile of single passes instead (a higher, stricter roof).
    STREAM counts the bytes named in its kernels, not write-allocate traffic (on a CPU without
    streaming stores copy moves 1.5× what it reports, triad 1.33×), while a decode step only
    reads; where the cores can saturate the bus, the fraction can pass 100 %.

    Raises:
        ValueError: ``prompt_len``/``repeat`` < 1, ``n_new`` < 2, ``peak_bandwidth`` <= 0,
            ``stream_bytes`` < 1, unsupported model dtype.
    """
    import statistics

    require_positive("prompt_len", prompt_len)
    require_positive("repeat", repeat)
    if not isinstance(n_new, int) or n_new < 2:
        raise ValueError(f"n_new={n_new!r} is not allowed; it must be an integer >= 2")
    if peak_bandwidth is not None:
        require_positive("peak_bandwidth", peak_bandwidth, integer=False)
    if stream_bytes is not None:
        require_positive("stream_bytes", stream_bytes)
    dev = next(model.parameters()).device
    dtype = _model_dtype_name(model)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, cfg.vocab_size, (1, prompt_len), generator=g).to(dev)
    # step i (1 … n_new − 1) reads prompt_len + i − 1 cached positions
    step_bytes = [decode_step_bytes(cfg, 1, prompt_len + i - 1, dtype, embedding="rows") for i in range(1, n_new)]
    nbytes = math.fsum(step_bytes) / len(step_bytes)
    passes = []  # (bytes, seconds) of each pair's faster STREAM pass
    before = None
    if peak_bandwidth is None:
        size = stream_bytes or _PAIRED_STREAM_BYTES.get(dev.type, 64 * MiB)
        kernels = [StreamKernel(k, size, dev) for k in ("copy", "triad")]
        before = lambda: passes.append(_faster_pass(kernels))  # noqa: E731
    greedy_decode(model, ids, 2)  # warm-up: allocator, thread pool
    _finish_linear_tuning(model, 1, lambda: greedy_decode(model, ids, n_new), n_new - 1)
    rates, peaks, singles, run = [], [], [], None
    for _ in range(repeat):
        del passes[:]
        run = greedy_decode(model, ids, n_new, before_step=before)
        rates.append(run.n_steps / run.decode_s)
        if peak_bandwidth is None:
            peaks.append(math.fsum(b for b, _ in passes) / math.fsum(t for _, t in passes))
            singles += [b / t for b, t in passes]
    steps_per_s = statistics.median(rates)
    achieved = nbytes * steps_per_s
    if peak_bandwidth is None:
        peak = statistics.median(peaks)
        high = statistics.quantiles(singles, n=10, method="inclusive")[-1] if len(singles) > 1 else singles[0]
    else:
        peak = high = peak_bandwidth
    return DecodeBandwidth(weight_bytes(cfg, dtype), nbytes, steps_per_s, achieved, peak, high,
                           achieved / peak, achieved / high, run)


def _linear_tuning_pending(model, rows: int) -> bool:
    """True while :func:`llm_dataflow.linear` is still timing its candidate kernels for one of
    ``model``'s projection shapes with ``rows`` rows of x (:func:`~llm_dataflow.linear_kernels.linear_choice`)."""
    shapes = {tuple(p.shape) for p in model.parameters() if p.dim() == 2}
    return any(c.kernel is None and c.rows == rows and (c.n_rows, c.n_cols) in shapes for c in linear_choice())


def _finish_linear_tuning(model, rows: int, step: Callable[[], object], calls_per_step: int = 1) -> None:
    """Call ``step()`` until :func:`llm_dataflow.linear` has chosen the kernel of every projection
    shape of ``model`` run with ``rows`` rows (it times its candidates on their first calls), so
    that the timings that follow time the chosen kernels.  ``step`` must already have run once
    (the keys exist after a first call).  At most enough calls for a projection called once per
    step (the LM head) to finish one tuning."""
    for _ in range(math.ceil(LINEAR_TUNE_ROUNDS * len(LINEAR_KERNELS) / calls_per_step) + 1):
        if not _linear_tuning_pending(model, rows):
            return
        step()


def _faster_pass(kernels) -> tuple[int, float]:
    """Run each STREAM kernel once; ``(bytes, seconds)`` of the faster."""
    best = None
    for k in kernels:
        bw = k()
        if best is None or bw > best[0]:
            best = (bw, k.nbytes)
    return best[1], best[1] / best[0]


def hf_peer_model(model, cfg: ModelConfig):
    """A Hugging Face ``transformers`` ``LlamaForCausalLM`` holding exactly ``model``'s weights
    (same dtype and device), for comparing decode loops on identical weights.  The Decoder's
    ``state_dict`` keys are the Hugging Face names, so the weights load one to one.

    Raises:
        ValueError: a config the Llama class cannot represent (MoE, biases, sliding window), or a
            state-dict mismatch.
    """
    from transformers import LlamaConfig, LlamaForCausalLM

    if (cfg.model_type not in ("llama", "mistral") or cfg.is_moe or cfg.attention_bias or cfg.sliding_window
            or cfg.rope_scaling):
        raise ValueError(f"model_type={cfg.model_type!r}: the Hugging Face peer is built for plain "
                         "Llama configs only (no MoE, bias, sliding window or rope_scaling)")
    hcfg = LlamaConfig(vocab_size=cfg.vocab_size, hidden_size=cfg.d_model, intermediate_size=cfg.d_ff,
                       num_hidden_layers=cfg.n_layers, num_attention_heads=cfg.n_heads,
                       num_key_value_heads=cfg.n_kv_heads, head_dim=cfg.head_dim,
                       max_position_embeddings=cfg.max_position_embeddings or 4096,
                       rms_norm_eps=cfg.norm_eps, rope_theta=cfg.rope_theta,
                       tie_word_embeddings=cfg.tie_embeddings, attention_bias=False,
                       bos_token_id=None, eos_token_id=None, pad_token_id=None)
    p = next(model.parameters())
    hf = LlamaForCausalLM(hcfg).to(dtype=p.dtype, device=p.device).eval()
    missing, unexpected = hf.load_state_dict(model.state_dict(), strict=False)
    missing = [k for k in missing if "rotary" not in k and not (cfg.tie_embeddings and k == "lm_head.weight")]
    if missing or unexpected:
        raise ValueError(f"state_dict mismatch with transformers: missing {missing}, unexpected {unexpected}")
    return hf


@torch.inference_mode()
def hf_greedy_decode(model, cfg: ModelConfig, input_ids: torch.Tensor, max_new_tokens: int,
                     *, repeat: int = 3, hf_model=None):
    """Time Hugging Face ``transformers`` greedy ``generate`` (its default dynamic KV cache) on
    the same weights as ``model``.

    A logits processor records the clock each time ``generate`` has produced the logits of a
    new token; the per-token time is ``(t_n − t_1) / (n − 1)`` — the n − 1 decode steps after
    the prefill, including everything ``generate`` does between forwards — so it compares with
    :attr:`DecodeRun.step_s`.  Median of ``repeat`` runs after one warm-up.

    Returns:
        ``(tokens LongTensor [B, T + n], seconds per token)``.

    Raises:
        ValueError: ``max_new_tokens`` < 2, an ID outside ``[0, V)`` (checked once, before any
            timing: :func:`~llm_dataflow.tokenization.check_token_ids`), or a config the Llama peer
            cannot represent.
    """
    import statistics

    from transformers import LogitsProcessor, LogitsProcessorList

    if not isinstance(max_new_tokens, int) or max_new_tokens < 2:
        raise ValueError(f"max_new_tokens={max_new_tokens!r} is not allowed; it must be an integer >= 2")
    check_token_ids(input_ids, cfg.vocab_size)
    require_positive("repeat", repeat)
    hf = hf_model or hf_peer_model(model, cfg)
    dev = input_ids.device
    stamps: list[float] = []

    class _Clock(LogitsProcessor):
        def __call__(self, ids, scores):
            synchronize(dev)
            stamps.append(time.perf_counter())
            return scores

    kw = dict(do_sample=False, use_cache=True, pad_token_id=0, eos_token_id=None,
              logits_processor=LogitsProcessorList([_Clock()]))
    hf.generate(input_ids, max_new_tokens=2, min_new_tokens=2, **kw)  # warm-up
    per_token, toks = [], None
    for _ in range(repeat):
        stamps.clear()
        toks = hf.generate(input_ids, max_new_tokens=max_new_tokens, min_new_tokens=max_new_tokens, **kw)
        per_token.append((stamps[-1] - stamps[0]) / (len(stamps) - 1))
    return toks, statistics.median(per_token)


# --------------------------------------------------------------------------------------------
# timing one prefill / one decode step (the notebook's measured points)
# --------------------------------------------------------------------------------------------
@torch.inference_mode()
def time_prefill(model, cfg: ModelConfig, prompt_len: int, batch: int = 1, *, repeat: int = 3,
                 seed: int = 0) -> float:
    """Best (minimum) seconds of one prefill ``forward`` of ``batch`` seeded random prompts of
    ``prompt_len`` tokens into a fresh cache (logits for all positions, as ``forward`` returns),
    over ``repeat`` runs after a warm-up that lasts until :func:`llm_dataflow.linear` has chosen
    its kernels for these shapes.  The minimum, not the median: on a shared machine other
    processes only ever add time, and the roofline compares against the best case.

    Raises:
        ValueError: ``prompt_len``/``batch``/``repeat`` < 1.
    """
    require_positive("prompt_len", prompt_len)
    require_positive("batch", batch)
    dev = next(model.parameters()).device
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, cfg.vocab_size, (batch, prompt_len), generator=g).to(dev)
    # IDs drawn in [0, V) here: the timed forward runs unchecked, as an engine's prefill runs
    # after admission checked the prompt
    step = lambda: model(ids, model.new_cache(batch, prompt_len), check_ids=False)  # noqa: E731
    step()
    _finish_linear_tuning(model, batch * prompt_len, step)
    return best_time(step, dev, repeat)


@torch.inference_mode()
def time_decode_step(model, cfg: ModelConfig, batch: int = 1, context_len: int = 1, *, repeat: int = 3,
                     seed: int = 0) -> float:
    """Best (minimum, as :func:`time_prefill`) seconds of one decode step (one token per row)
    with ``context_len`` positions already in every row's KV cache, over ``repeat`` steps after
    warm-up steps on a scratch cache, until :func:`llm_dataflow.linear` has chosen its kernels
    for these shapes.

    The cache is not filled by a prefill: its stored length is advanced to ``context_len``
    (``KVCache.advance``) over zero-initialised K/V — the step reads and multiplies the same
    bytes whatever the cached values are, and skipping the prefill keeps large batches cheap to
    set up.  Each timed step appends one position, so the context grows to
    ``context_len + repeat + 1`` (a few tokens more than stated; negligible for the bytes).

    Raises:
        ValueError: ``batch``/``repeat`` < 1, ``context_len`` < 0.
    """
    require_positive("batch", batch)
    require_nonnegative("context_len", context_len)
    require_positive("repeat", repeat)
    dev = next(model.parameters()).device
    g = torch.Generator().manual_seed(seed)
    tok = torch.randint(0, cfg.vocab_size, (batch, 1), generator=g).to(dev)
    if dev.type == "cpu" and batch <= SPLIT_MAX_ROWS:   # shapes ldf.linear may time its kernels on
        warm = model.new_cache(batch, context_len + LINEAR_TUNE_ROUNDS * len(LINEAR_KERNELS) + 2)
        if context_len:
            warm.advance(context_len)                    # a scratch cache for the warm-up steps
        model(tok, warm, check_ids=False)
        _finish_linear_tuning(model, batch, lambda: model(tok, warm, check_ids=False))
        del warm
    cache = model.new_cache(batch, context_len + repeat + 2)
    if context_len:
        cache.advance(context_len)
    return best_time(lambda: model(tok, cache, check_ids=False), dev, repeat)  # tok drawn in [0, V)
