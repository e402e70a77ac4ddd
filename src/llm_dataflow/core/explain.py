"""``python -m llm_dataflow explain FILE_OR_-``: a vLLM or SGLang command line or startup log,
planned with the same core ``plan`` uses (:func:`~llm_dataflow.core.fit.memory_fit`), and
reconciled term by term: the engine's figure, the book's, the difference, one line of why, and the
chapter that teaches the term; then, for a failed start or a tight fit, what to change, each option
computed by the same core with what it costs.  Standard library only (it runs in the browser).

Tolerances are the planner tests' (``tests/test_engine_logs.py``): 5 % for weights, 10 % for the KV
room (GiB, tokens, blocks, concurrency).  A difference beyond them is named as such, with the term
that explains it when the log prints the other terms (the largest gap among weights, activations,
memory outside torch, CUDA graphs and the device total), never hidden.  The terms outside those
tolerances (activations, memory outside torch, CUDA graphs) are the book's estimates built on
other logs (:data:`~llm_dataflow.core.engines.ESTIMATE_NOTE`): their differences are shown, not
judged.

Where the log and the command line disagree, the log wins (it is what ran); where neither gives a
setting, the engine's default for that version is used and said (:mod:`.engine_args`).  The model
comes from ``config`` (a preset, a ``config.json`` or a folder) or from the name in the log when
that is a preset or a local folder; the GPU from ``hardware`` (a preset or a custom spec).  Neither
is ever fetched or guessed: without them the message says what to give.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, field, replace

from .config import MODEL_PRESETS, ModelConfig
from .engine_args import Setting, engine_defaults
from .engine_log import MAX_BYTES, EngineLog, read_engine_text
from .engines import ESTIMATE_NOTE, SGLANG_DIST_INIT_BYTES, sglang_preload_bytes
from .fit import memory_fit
from .hardware import runtime_memory_bytes
from .parallel import check_parallel
from .plan import PLAN_HARDWARE, hardware_arg, load_model_arg
from .plan import main as plan_main
from .quantization import checkpoint_precision
from .units import GiB, MiB

__all__ = ["EXPLAIN_TOLERANCE", "EXPLAIN_CHAPTERS", "ExplainRow", "ExplainChange", "Explanation", "explain",
           "explain_text", "sampler_warmup_bytes"]   # and main(argv), the command

#: The planner tests' tolerances (fraction): weights 5 %, the KV room 10 %.
EXPLAIN_TOLERANCE = {"weights": 0.05, "kv_memory": 0.10, "kv_tokens": 0.10, "gpu_blocks": 0.10,
             "max_total_num_tokens": 0.10, "max_concurrency": 0.10, "kv_pool": 0.10}
#: The chapter that teaches each term.
EXPLAIN_CHAPTERS = {"total_memory": "01", "budget": "01", "weights": "01", "activations": "05", "non_torch": "07",
            "dist_init": "07", "free_before_load": "07", "cuda_graph": "05", "kv_memory": "06", "kv_pool": "06",
            "gpu_blocks": "06", "kv_tokens": "06", "max_total_num_tokens": "06", "max_concurrency": "06",
            "sampler": "05"}
_LABELS = {"total_memory": "device total (GiB)", "budget": "budget (GiB)", "weights": "weights (GiB)",
           "activations": "activation peak (GiB)", "non_torch": "outside torch (GiB)",
           "dist_init": "torch.distributed (GiB)", "free_before_load": "free before load (GiB)",
           "cuda_graph": "CUDA graphs (GiB)", "kv_memory": "KV cache (GiB)", "kv_pool": "KV pool K+V (GiB)",
           "gpu_blocks": "KV blocks", "kv_tokens": "KV tokens", "max_total_num_tokens": "KV pool tokens",
           "max_concurrency": "max concurrency (x)", "sampler": "sampler warm-up (MiB)"}
_WHY = {
    "total_memory": "what torch.cuda.mem_get_info reports, less than the datasheet's GB",
    "budget": "the engine's share: total x gpu_memory_utilization",
    "weights": "each rank's shards of the stored weights as the engine holds them after loading",
    "activations": "peak of the profiling forward over max_num_batched_tokens tokens",
    "non_torch": "CUDA context, NCCL and custom all-reduce buffers: an estimate from other logs",
    "dist_init": "NCCL and custom all-reduce buffers set up before loading",
    "free_before_load": "total less the CUDA context and torch.distributed",
    "cuda_graph": "the CUDA graph pool: an estimate from other logs",
    "kv_memory": "what is left of the budget for the cache",
    "kv_pool": "mem_fraction_static x (free before load) - weights, in K and V",
    "gpu_blocks": "the room in blocks of block_size tokens",
    "kv_tokens": "the room in tokens, by the engine's layout of layer groups",
    "max_total_num_tokens": "the pool over one token's K and V in every layer",
    "max_concurrency": "sequences of max_model_len tokens the room holds",
    "sampler": ("FP32 probabilities of max_num_seqs dummy requests over the vocabulary (vLLM's "
                "_dummy_sampler_run), allocated after the graphs, outside the budget"),
}
_KV_TERMS = ("kv_memory", "kv_tokens", "gpu_blocks", "max_concurrency", "max_total_num_tokens", "kv_pool")


@dataclass(frozen=True)
class ExplainRow:
    """One term of the reconciliation.

    Attributes:
        term: a key of :data:`EXPLAIN_CHAPTERS`.
        engine: the engine's figure (GiB for memory, else the count).
        book: the book's figure in the same unit (None: not modelled).
        diff: ``(book - engine) / engine`` (None when either is missing or the engine's is 0).
        tolerance: the planner tests' tolerance for the term (None: not judged).
        within: whether ``|diff| <= tolerance`` (None: not judged).
        why: one line: what the term is, and for a difference beyond the tolerance its cause.
        chapter: the chapter that teaches it.
        line: the log line the engine's figure came from.
    """

    term: str
    engine: float
    book: float | None
    diff: float | None
    tolerance: float | None
    within: bool | None
    why: str
    chapter: str
    line: int


@dataclass(frozen=True)
class ExplainChange:
    """One setting that would change the outcome, computed by the same core.

    Attributes:
        flag: the engine flag and value (``--max-model-len 23632``).
        result: what it gives, in the book's terms.
        cost: what it costs (context, memory, speed bound).
        works: whether the book's fit says the engine starts with it.
    """

    flag: str
    result: str
    cost: str
    works: bool


@dataclass
class Explanation:
    """One run explained: the deployment, the table, the verdict and what to change."""

    engine: str
    version: str
    version_note: str
    model: str
    hardware: str
    tp: int
    ep: int
    settings: dict
    rows: list
    error: object
    verdict: str
    changes: list = field(default_factory=list)
    notes: list = field(default_factory=list)
    fit: object = None

    def to_dict(self) -> dict:
        """A JSON-ready dict (``explain --json``)."""
        return {"engine": self.engine, "version": self.version, "version_note": self.version_note,
                "model": self.model, "hardware": self.hardware, "tp": self.tp, "ep": self.ep,
                "settings": {k: {"value": v.value, "origin": v.origin, "source": v.source}
                             for k, v in self.settings.items()},
                "rows": [r.__dict__ for r in self.rows],
                "error": None if self.error is None else {"kind": self.error.kind, "line": self.error.line,
                                                          "text": self.error.text, "numbers": self.error.numbers},
                "verdict": self.verdict, "changes": [c.__dict__ for c in self.changes], "notes": self.notes,
                "estimate_note": ESTIMATE_NOTE, "printed": self.parts()}

    def parts(self) -> dict:
        """The printed table's pieces, unwrapped: ``head`` (the run's line, the version's note,
        the settings), ``cells`` (each term's row as printed: label, engine, book, diff, ch, ok,
        why) and ``tail`` (the error, the book's verdict, what to change with each cost, the
        notes).  :meth:`table` prints them; ``explain --json`` carries them for the web page."""
        eng = "vLLM" if self.engine == "vllm" else "SGLang"
        head = [f"{eng} {self.version}, {self.model} on {self.hardware}, TP {self.tp}"
                + (f", EP {self.ep}" if self.ep > 1 else ""), f"  ({self.version_note})"]
        shown = [k for k in ("max_model_len", "gpu_memory_utilization", "mem_fraction_static",
                             "max_num_batched_tokens", "max_num_seqs", "kv_cache_dtype", "enforce_eager")
                 if k in self.settings and self.settings[k].value is not None]
        for k in shown:
            s = self.settings[k]
            head.append(f"  {k} = {s.value} ({s.origin})")
        cells = []
        for r in self.rows:
            fmt = (lambda v: "-" if v is None else f"{v:,.2f}") if "(" in _LABELS[r.term] else \
                (lambda v: "-" if v is None else f"{v:,.0f}")
            cells.append({"term": r.term, "label": _LABELS[r.term], "engine": fmt(r.engine), "book": fmt(r.book),
                          "diff": "-" if r.diff is None else f"{100 * r.diff:+.1f}%", "ch": r.chapter,
                          "ok": "" if r.within is None else ("yes" if r.within else "NO"), "why": r.why})
        tail = []
        if self.error is not None:
            tail.append(f"error (line {self.error.line}): {self.error.text[:240]}")
        tail.append(f"book: {self.verdict}")
        if self.changes:
            tail.append("what to change:")
            for c in self.changes:
                tail.append(f"  {'+' if c.works else '-'} {c.flag}: {c.result}")
                tail.append(f"      cost: {c.cost}")
        for n in self.notes:
            tail.append(f"note: {n}")
        return {"head": head, "cells": cells, "tail": tail}

    def table(self) -> str:
        """The text ``explain`` prints: at most 84 characters a line, a term's reason under it."""
        p = self.parts()
        out = list(p["head"])
        if p["cells"]:
            out.append(f"{'term':<24}{'engine':>11}{'book':>11}{'diff':>9}  ch  ok")
        else:
            out.append("no figures of the engine to compare: a command line, or a log that stops before them")
        for c in p["cells"]:
            out.append(f"{c['label']:<24}{c['engine']:>11}{c['book']:>11}{c['diff']:>9}  {c['ch']}  {c['ok']}")
            out.append(f"    {c['why']}")
        out += p["tail"]
        return "\n".join(_wrap(line) for line in out)


def _wrap(line: str, width: int = 84) -> str:
    if len(line) <= width:
        return line
    lead = len(line) - len(line.lstrip())
    indent = " " * (lead + 2)
    words, lines, cur = line.lstrip().split(" "), [], " " * lead
    for w in words:
        if cur.strip() and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = indent + w
        else:
            cur = f"{cur} {w}" if cur.strip() else cur + w
    lines.append(cur)
    return "\n".join(lines)


# --- the deployment a log describes ---------------------------------------------------------------
def _model(config, log: EngineLog) -> ModelConfig:
    if isinstance(config, ModelConfig):
        return config
    if isinstance(config, dict):
        base = (log.model or "").rstrip("/").rsplit("/", 1)[-1] or None
        return ModelConfig.from_hf(config, name=base)
    if config is not None:
        return load_model_arg(config)
    name = log.model
    if name:
        base = name.rstrip("/").rsplit("/", 1)[-1]
        for preset in MODEL_PRESETS:
            if preset.lower() == base.lower():
                return load_model_arg(preset)
        if os.path.isdir(name) or os.path.isfile(name):
            return load_model_arg(name)
    raise ValueError(f"model: the {'log names ' + repr(name) if name else 'input names no model'}, which is "
                     f"neither a preset nor a local folder here; give --config with a config.json, a folder "
                     f"holding one, or a preset ({', '.join(p for p in MODEL_PRESETS if not p.startswith(('tiny', 'bench')))})"
                     "; the network is never used")


def _version(log: EngineLog) -> tuple:
    if log.version:
        return log.version, "printed in the log" if log.era != "command" else "the container tag"
    text = " ".join(f.text for run in log.runs for r in run.ranks.values() for f in r.values())
    if log.engine == "sglang":
        return "0.4", "version not printed; read as 0.4 from the log's format"
    if log.era == "vllm-v0":
        if "total_gpu_memory (" in text:
            return "0.7", "version not printed; read as 0.7 from PR #12126's one-line profiling form"
        if "Memory profiling results" in text:
            return "0.6.4", "version not printed; read as 0.6.4 from its 'Memory profiling results' line"
        return "0.5", "version not printed; read as 0.5 from its '# GPU blocks' form"
    if "Estimated CUDA graph memory" in text or "CUDA graph memory profiling" in text:
        return "0.21", "version not printed; read as 0.21: graph memory is profiled before the cache"
    if log.era == "command":
        return "0.21", "version not given; vLLM 0.21 assumed (a vllm/vllm-openai:TAG image names it)"
    return "0.10", "version not printed; read as 0.10 from its V1 lines"


def _kv_dtype(value) -> str | None:
    if value in (None, "auto", "None"):
        return None
    v = str(value).lower()
    if v.startswith("fp8"):
        return "fp8"
    if v in ("bfloat16", "bf16", "torch.bfloat16"):
        return "bf16"
    if v in ("float16", "half", "fp16", "torch.float16"):
        return "fp16"
    raise ValueError(f"kv_cache_dtype={value!r} is not read here; allowed: auto, fp8, fp8_e4m3, fp8_e5m2, bf16, fp16")


def _settings(log: EngineLog, run, cfg, hw, version) -> dict:
    engine = log.engine
    given = {}
    if log.command is not None and log.command.engine == engine:
        for k, v in log.command.settings.items():
            given[k] = ("command", v, log.command.text[:120])
    if run is not None:
        for k, s in run.settings.items():
            given[k] = ("log", s.value, s.source)
        f = run.figure("concurrency_tokens")
        if f is not None:
            given["max_model_len"] = ("log", int(f.value), f.text[:120])
        f = run.figure("context_len")
        if f is not None:
            given.setdefault("context_length", ("log", int(f.value), f.text[:120]))
        f = run.figure("gpu_memory_utilization")
        if f is not None:
            given["gpu_memory_utilization"] = ("log", f.value, f.text[:120])
        if run.error is not None and "max_model_len" in run.error.numbers:
            given["max_model_len"] = ("log", int(run.error.numbers["max_model_len"]), run.error.text[:120])
    tp_key = "tensor_parallel_size" if engine == "vllm" else "tp_size"
    tp = int(given.get(tp_key, (None, 1))[1] or 1)
    total, _ = runtime_memory_bytes(hw)
    mml = given.get("max_model_len", (None, None))[1] or _limit(cfg)
    defaults = engine_defaults(engine, version, gpu_memory_gib=total / GiB, gpu_name=hw.name, tp=tp,
                               max_model_len=mml)
    out = dict(defaults)
    for k, (origin, v, src) in given.items():
        out[k] = Setting(v, origin, src)
    if engine == "vllm" and "max_num_batched_tokens" not in out and _vt(version) < (0, 8) \
            and out.get("max_model_len") and out["max_model_len"].value:
        out["max_num_batched_tokens"] = Setting(max(out["max_model_len"].value, 2048), "default",
                                                "V0 SchedulerConfig: max(max_model_len, 2048)")
    return out


def _vt(version) -> tuple:
    return tuple(int(x) for x in str(version).split(".")[:2] if x.isdigit())


def _limit(cfg) -> int | None:
    return getattr(cfg, "max_position_embeddings", None)


def _fit(cfg, hw, log, s, version, **over):
    engine = log.engine
    v = lambda k, d=None: s[k].value if k in s and s[k].value is not None else d  # noqa: E731
    tp = int(v("tensor_parallel_size" if engine == "vllm" else "tp_size", 1))
    pp = int(v("pipeline_parallel_size", 1)) if engine == "vllm" else 1
    dp = int(v("data_parallel_size" if engine == "vllm" else "dp_size", 1))
    if engine == "vllm":
        ep = tp * dp if v("enable_expert_parallel", False) and cfg.n_routed_experts else 1
    else:
        ep = int(v("ep_size", 1)) if cfg.n_routed_experts else 1
        if v("enable_ep_moe", False) and cfg.n_routed_experts:
            ep = tp
    context = int(v("max_model_len", 0) or 0) if engine == "vllm" else int(v("context_length", 0) or 0)
    kw = dict(tp=tp, pp=pp, ep=ep, context=context, batch=1, kv_dtype=_kv_dtype(v("kv_cache_dtype")),
              engine=engine, engine_version=version, allow_long_context=True)
    if engine == "vllm":
        kw.update(gpu_memory_utilization=float(v("gpu_memory_utilization", 0.9)),
                  max_num_batched_tokens=int(v("max_num_batched_tokens", 8192)),
                  max_num_seqs=int(v("max_num_seqs", 256)), block_size=int(v("block_size", 16)),
                  enforce_eager=bool(v("enforce_eager", False)))
    else:
        kw.update(mem_fraction_static=float(v("mem_fraction_static", 0.88)),
                  enforce_eager=bool(v("disable_cuda_graph", False)))
    kw.update(over)
    if kw["tp"] * kw["pp"] > 1 or kw["ep"] > 1:
        check_parallel(cfg, kw["tp"], kw["pp"], kw["ep"])
    return memory_fit(cfg, hw, _weights(cfg, s), **kw), kw


def _weights(cfg, s):
    q = s.get("quantization")
    if cfg.quantization is not None or q is None or q.value in (None, "None"):
        return checkpoint_precision(cfg)
    if str(q.value).lower() == "fp8":
        return "fp8"
    raise ValueError(f"quantization={q.value!r}: the config has no quantization_config; give --config with "
                     "the quantised checkpoint's config.json (its format decides the bytes)")


# --- the rows ------------------------------------------------------------------------------------
def sampler_warmup_bytes(vocab_size: int, max_num_seqs: int) -> int:
    """Bytes of the FP32 probabilities vLLM V1 allocates when it warms up its sampler with
    ``max_num_seqs`` dummy requests (``_dummy_sampler_run`` → ``random_sample``'s
    ``torch.empty_like(probs)``; shape ``[max_num_seqs, V]``, 4 B each), after the CUDA graphs and
    outside the budget: gpt-oss-20b (V = 201,088) at 1,024 sequences 823,656,448 B, the 786.00 MiB
    its 0.19.0 log tried to allocate (torch rounds to 2 MiB).

    Raises:
        ValueError: ``vocab_size`` or ``max_num_seqs`` not a positive integer.
    """
    for name, v in (("vocab_size", vocab_size), ("max_num_seqs", max_num_seqs)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name}={v!r} is not allowed; give a positive integer")
    return 4 * vocab_size * max_num_seqs

def _row(term, engine_value, book_value, line, why=None):
    diff = None if book_value is None or not engine_value else (book_value - engine_value) / engine_value
    tol = EXPLAIN_TOLERANCE.get(term)
    within = None if tol is None or diff is None else abs(diff) <= tol + 1e-12
    return ExplainRow(term, engine_value, book_value, diff, tol, within, why or _WHY[term], EXPLAIN_CHAPTERS[term], line)


def _rows(log, run, fit, total_preset, cfg) -> list:
    g = lambda name: run.figure(name)  # noqa: E731
    rows = []
    if log.engine == "vllm":
        book = {"total_memory": total_preset / GiB, "budget": fit.budget / GiB, "weights": fit.weights / GiB,
                "activations": fit.activations / GiB, "non_torch": fit.non_torch / GiB,
                "cuda_graph": fit.cuda_graphs / GiB, "kv_memory": fit.kv_bytes / GiB,
                "gpu_blocks": fit.kv_tokens / fit.block_size, "kv_tokens": fit.kv_tokens,
                "max_concurrency": fit.max_concurrency}
        logged = {}
        for name in ("total_memory", "budget", "weights", "activations", "non_torch", "cuda_graph", "kv_memory"):
            f = g(name)
            if f is not None:
                logged[name] = (f.value / GiB, f.line)
        if "activations" not in logged and g("peak_torch") is not None and g("weights") is not None:
            logged["activations"] = ((g("peak_torch").value - g("weights").value) / GiB, g("peak_torch").line)
        for name in ("gpu_blocks", "kv_tokens", "max_concurrency"):
            f = g(name)
            if f is not None:
                logged[name] = (f.value, f.line)
        if "kv_tokens" not in logged and run.error is not None and run.error.kind == "max_seq_len":
            logged["kv_tokens"] = (run.error.numbers["kv_tokens"], run.error.line)
        if run.error is not None and run.error.kind == "kv_short":
            logged.setdefault("kv_memory", (run.error.numbers["available"] / GiB, run.error.line))
        if run.error is not None and run.error.kind == "oom_sampler" and "tried" in run.error.numbers:
            n = run.error.numbers["max_num_seqs"]
            logged["sampler"] = (run.error.numbers["tried"] / MiB, run.error.line)
            book["sampler"] = sampler_warmup_bytes(cfg.vocab_size, n) / MiB
        for name in ("total_memory", "budget", "weights", "activations", "non_torch", "cuda_graph",
                     "kv_memory", "gpu_blocks", "kv_tokens", "max_concurrency", "sampler"):
            if name in logged:
                rows.append(_row(name, logged[name][0], book[name], logged[name][1]))
        return _causes(rows, logged, fit)
    pre = sglang_preload_bytes(fit.tp).bytes
    book = {"weights": fit.weights / GiB, "dist_init": (SGLANG_DIST_INIT_BYTES if fit.tp > 1 else 0.0) / GiB,
            "free_before_load": (total_preset - pre) / GiB, "cuda_graph": None,
            "max_total_num_tokens": fit.kv_tokens, "kv_pool": fit.kv_bytes / GiB}
    logged = {}
    for name in ("weights", "dist_init", "free_before_load", "cuda_graph", "max_total_num_tokens"):
        f = g(name)
        if f is not None:
            logged[name] = (f.value / GiB if name != "max_total_num_tokens" else f.value, f.line)
    if g("k_size") is not None:
        logged["kv_pool"] = ((g("k_size").value + g("v_size").value) / GiB, g("k_size").line)
    for name in ("free_before_load", "dist_init", "weights", "kv_pool", "max_total_num_tokens", "cuda_graph"):
        if name in logged:
            why = None
            if name == "cuda_graph":
                why = "SGLang captures its graphs in the 1 - mem_fraction_static share: not in the pool's sum"
            rows.append(_row(name, logged[name][0], book[name], logged[name][1], why))
    return _causes(rows, logged, fit)


_CAUSE = {
    "total_memory": "the device total the log prints differs from the preset's",
    "weights": "the weights the engine holds differ from the stored bytes the book counts",
    "activations": "the profiling forward's peak differs from the book's model of it (chapter 05)",
    "non_torch": "this run kept more outside torch than the logs the estimate comes from",
    "cuda_graph": "this run's CUDA graph pool differs from the estimate",
    "dist_init": "torch.distributed took a different amount than SGLang's logged 2.01 GiB",
    "free_before_load": "what was allocated before loading differs from the book's estimate",
}


def _causes(rows, logged, fit) -> list:
    """Rewrite the ``why`` of a KV row beyond its tolerance with the one term that explains it."""
    gaps = {}
    for r in rows:
        if r.term == "cuda_graph" and not fit.graphs_in_budget:
            continue                                         # captured after the cache is sized: not in its room
        if r.term in _CAUSE and r.book is not None:
            sign = -1 if r.term in ("total_memory", "free_before_load") else 1
            gaps[r.term] = sign * (r.book - r.engine)      # GiB the book takes from the room beyond the log
    out = []
    for r in rows:
        if r.term in _KV_TERMS and r.within is False:
            tol = f"beyond the {100 * r.tolerance:.0f} % tolerance"
            if r.term in ("kv_memory", "kv_pool"):
                gap = r.book - r.engine                      # GiB more room in the book
            else:
                gap = (r.book - r.engine) / r.book * fit.kv_bytes / GiB if r.book else 0.0
            named = {t: g for t, g in gaps.items() if abs(g) >= 0.05}
            if named:
                term, gib = max(named.items(), key=lambda kv: abs(kv[1]))
            if named and gib * gap < 0 and abs(gib) >= 0.5 * abs(gap):
                why = (f"{tol}: {_CAUSE[term]} ({_LABELS[term].split(' (')[0]} {gib:+.2f} GiB in the book, "
                       f"of a {gap:+.2f} GiB gap in the room)")
            elif named or gaps:
                have = ", ".join(_LABELS[t].split(" (")[0] for t in gaps)
                why = (f"{tol}: the terms the log prints ({have}) explain less than half of the {gap:+.2f} GiB "
                       "gap; the rest is in terms it does not print (activations, outside torch, the device "
                       "total, the engine's layout)")
            else:
                why = (f"{tol}: {gap:+.2f} GiB more room in the book, and the log prints no other term to say "
                       "which (weights, activations, outside torch)")
            r = replace(r, why=why)
        elif r.term == "weights" and r.within is False:
            r = replace(r, why=f"beyond the 5 % tolerance: {_CAUSE['weights']}")
        out.append(r)
    return out


# --- what to change -------------------------------------------------------------------------------
def _starts(fit) -> bool:
    conc = fit.max_concurrency
    return fit.fits and (conc is None or conc >= 1)


def _changes(cfg, hw, log, s, version, fit, run, notes) -> list:
    """What to change, each option by the same core; appends its calibration line to ``notes``."""
    eng = log.engine
    out = []
    given = {}
    if eng == "vllm" and run is not None:
        for name, key in (("non_torch", "non_torch"), ("cuda_graph", "cuda_graph_bytes")):
            f = run.figure(name)
            if f is not None:
                given[key] = f.value
    ctx = fit.context

    v0_batch = eng == "vllm" and _vt(version) < (0, 8) and s.get("max_num_batched_tokens") is not None \
        and s["max_num_batched_tokens"].origin == "default"

    def attempt(**over):
        if v0_batch and "context" in over:          # V0 profiles max(max_model_len, 2048) tokens
            over.setdefault("max_num_batched_tokens", max(over["context"], 2048))
        try:
            f, _ = _fit(cfg, hw, log, s, version, **{**given, **over})
            return f
        except ValueError:
            return None

    # Calibrated to the log: where the engine printed its KV room, each option is the book's room for
    # that option moved by the gap between the two (the terms the book does not see stay as they ran).
    base = attempt() or fit
    logged = run.figure("kv_memory") if run is not None and eng == "vllm" else None
    if logged is None and run is not None and run.error is not None and "available" in run.error.numbers:
        logged_kv = run.error.numbers["available"]
    else:
        logged_kv = logged.value if logged is not None else None
    delta = 0.0 if logged_kv is None else logged_kv - (base.kv_bytes - base.over_budget)

    def room(f):
        return f.kv_bytes - f.over_budget + delta

    def starts(f):
        seq = f.sequence_bytes
        return (not f.refused and f.graphs_fit and room(f) > 0 and (not seq or room(f) >= seq)
                and (eng != "sglang" or _starts(f)))

    def kv_gib(f):
        r = max(room(f), 0.0)
        conc = f", {r / f.sequence_bytes:.2f} sequences of {f.context:,}" if f.sequence_bytes else ""
        return f"{r / GiB:,.2f} GiB of KV{conc}"

    kind = run.error.kind if run is not None and run.error is not None else None
    outside = kind in ("oom", "oom_capture", "oom_sampler")    # failed outside the budget, not for KV room
    tight = fit.max_concurrency is not None and fit.max_concurrency < 1.5
    kv_problem = not outside and (kind is not None or not starts(base) or tight)
    if delta and kv_problem:
        notes.append(f"what to change starts from the log's KV room, {abs(delta) / GiB:,.2f} GiB "
                     f"{'less' if delta < 0 else 'more'} than the book's: each option moves it as the book computes")
    if eng == "vllm" and ctx and kv_problem and not starts(base):
        lo, hi = 0, ctx
        while lo < hi:
            mid = (lo + hi + 1) // 2
            f = attempt(context=mid)
            if f is not None and starts(f):
                lo = mid
            else:
                hi = mid - 1
        if 0 < lo < ctx:
            out.append(ExplainChange(f"--max-model-len {lo}", f"the largest context one sequence can hold "
                                     f"({kv_gib(attempt(context=lo))})",
                                     f"prompts and outputs past {lo:,} tokens are refused ({ctx - lo:,} fewer)", True))
        u0 = fit.fraction
        for step in range(1, 100):
            u = round(u0 + 0.01 * step, 2)
            if u > 0.99:
                break
            f = attempt(gpu_memory_utilization=u)
            if f is not None and starts(f):
                out.append(ExplainChange(f"--gpu-memory-utilization {u:.2f}", f"max_model_len {ctx:,} fits ({kv_gib(f)})",
                                         f"leaves {(1 - u) * fit.capacity / GiB:,.2f} GiB outside the engine"
                                         + ("" if f.graphs_in_budget else ", where CUDA graphs are captured"), True))
                break
    if kv_problem and fit.kv_per_token and (s.get("kv_cache_dtype") is None
                                            or _kv_dtype(s["kv_cache_dtype"].value) != "fp8"):
        f = attempt(kv_dtype="fp8")
        if f is not None:
            res = kv_gib(f)
            out.append(ExplainChange("--kv-cache-dtype fp8", res, "K and V rounded to FP8 (chapter 08): half the KV bytes "
                              "a token reads", starts(f)))
    tp = fit.tp
    if kv_problem and tp * 2 <= 8:
        f = attempt(tp=tp * 2, ep=fit.ep * 2 if fit.ep > 1 else 1)
        if f is not None:
            flag = ("--tensor-parallel-size" if eng == "vllm" else "--tp") + f" {tp * 2}"
            out.append(ExplainChange(flag, kv_gib(f) + " per GPU", f"{tp} more GPU{'s' if tp > 1 else ''}; an all-reduce per layer over "
                              f"{tp * 2} GPUs (chapter 07)", starts(f)))
    if kv_problem and cfg.n_routed_experts and fit.ep == 1 and tp > 1:
        f = attempt(ep=tp)
        if f is not None:
            flag = "--enable-expert-parallel" if eng == "vllm" else f"--ep-size {tp}"
            out.append(ExplainChange(flag, kv_gib(f) + " per GPU", "whole experts per GPU: all-to-all traffic and "
                              "uneven expert load (chapter 07)", starts(f)))
    capture = kind == "oom_capture"
    if eng == "vllm" and (capture or not fit.graphs_fit or (fit.graphs_in_budget and not starts(base))):
        f = attempt(enforce_eager=True)
        if f is not None:
            out.append(ExplainChange("--enforce-eager", kv_gib(f) + "; no CUDA graph pool",
                              "every decode step launches its kernels one by one: launch overhead at small "
                              "batches (chapter 05)", starts(f)))
        if capture and not fit.graphs_in_budget:
            graphs = given.get("cuda_graph_bytes", fit.cuda_graphs)
            u = int(100 * (1 - (graphs + 0.5 * GiB) / fit.capacity)) / 100
            if u < fit.fraction:
                f = attempt(gpu_memory_utilization=u)
                if f is not None:
                    out.append(ExplainChange(f"--gpu-memory-utilization {u:.2f}",
                                      f"{(1 - u) * fit.capacity / GiB:,.2f} GiB outside the budget for the graph "
                                      f"pool ({graphs / GiB:,.2f} GiB estimated) and 0.5 GiB of slack; {kv_gib(f)}",
                                      "a smaller KV cache", starts(f)))
        seqs = s.get("max_num_seqs")
        n = int(seqs.value) if seqs is not None and seqs.value else 256
        if capture and n > 32:
            out.append(ExplainChange(f"--max-num-seqs {n // 4}", "CUDA graphs are captured for batch sizes up to "
                              "max_num_seqs: fewer, smaller graphs",
                              f"at most {n // 4} sequences per step", True))
    if run is not None and run.error is not None and run.error.kind == "oom_sampler" and "free" in run.error.numbers:
        n = int(run.error.numbers["max_num_seqs"])
        per_seq = sampler_warmup_bytes(cfg.vocab_size, 1)
        free = run.error.numbers["free"]
        fit_n = int(free // per_seq) // 8 * 8
        if 0 < fit_n < n:
            out.append(ExplainChange(f"--max-num-seqs {fit_n}",
                                     f"the sampler warm-up takes {fit_n * per_seq / MiB:,.0f} MiB, within the "
                                     f"{free / MiB:,.1f} MiB the log found free",
                                     f"at most {fit_n:,} sequences in a decode step (not {n:,})", True))
        short = run.error.numbers["tried"] - free
        step = max(1, -(-int(short * 100) // int(fit.capacity)))
        u = round(fit.fraction - step / 100, 2)
        f = attempt(gpu_memory_utilization=u)
        if f is not None:
            out.append(ExplainChange(f"--gpu-memory-utilization {u:.2f}",
                                     f"{step / 100 * fit.capacity / GiB:,.2f} GiB more outside the budget for the "
                                     f"{short / MiB:,.0f} MiB the warm-up lacked; {kv_gib(f)}",
                                     "a smaller KV cache", starts(f)))
        graphs = run.figure("cuda_graph")
        if graphs is not None and graphs.value >= short:
            out.append(ExplainChange("--enforce-eager", f"frees the {graphs.value / GiB:,.2f} GiB graph pool the "
                                     "warm-up ran beside", "every decode step launches its kernels one by one: "
                                     "launch overhead at small batches (chapter 05)", True))
    if eng == "sglang" and not starts(base):
        for step in range(1, 20):
            u = round(fit.fraction + 0.01 * step, 2)
            if u > 0.97:
                break
            f = attempt(mem_fraction_static=u)
            if f is not None and starts(f):
                out.append(ExplainChange(f"--mem-fraction-static {u:.2f}", kv_gib(f),
                                  f"less room outside the pool for activations and CUDA graphs", True))
                break
    return out


# --- the entry points ------------------------------------------------------------------------------
def explain(source, *, config=None, hardware=None) -> list:
    """Explain every run of ``source`` (an :class:`~llm_dataflow.core.engine_log.EngineLog`, or the
    text or bytes of a command line or startup log): a list of :class:`Explanation`, one per run
    (one for a command line alone).

    ``config``: a preset name, a ``config.json`` path or folder, a dict or a ModelConfig (default:
    the model the log names, when it is a preset or a local folder).  ``hardware``: a preset name,
    a custom spec or a HardwareSpec (required: a log does not name its GPU).  A log's own device
    total, when printed, replaces the preset's for the plan (the first row compares the two).

    Raises:
        ValueError: what :func:`~llm_dataflow.core.engine_log.read_engine_text` raises; no model
            or no hardware (saying what to give); a deployment the core refuses (its message).
    """
    log = source if isinstance(source, EngineLog) else read_engine_text(source)
    cfg = _model(config, log)
    if hardware is None:
        total = next((r.figure("total_memory") for r in log.runs if r.figure("total_memory")), None)
        hint = f" (the log's device total is {total.value / GiB:.2f} GiB)" if total else ""
        raise ValueError(f"hardware: a log does not name its GPU{hint}; give --hardware with a preset "
                         f"({', '.join(PLAN_HARDWARE)}) or a custom spec 'name=..,memory_gb=..,bandwidth_gbs=..,"
                         f"bf16_tflops=..,runtime_gib=..'")
    hw0 = hardware_arg(hardware)
    version, vnote = _version(log)
    out = []
    for run in (log.runs or [None]):
        if run is not None and run.engine is not None and run.engine != log.engine:
            continue                                    # a second engine's lines in one paste
        notes = list(log.notes)
        total_preset, _ = runtime_memory_bytes(hw0)
        hw = hw0
        f = run.figure("total_memory") if run is not None else None
        if f is not None and abs(f.value - total_preset) > 0.005 * GiB:
            hw = replace(hw0, runtime_memory_bytes=f.value, runtime_memory_source="the log's total_gpu_memory")
            notes.append(f"planned on the log's device total, {f.value / GiB:.2f} GiB (the preset's is "
                         f"{total_preset / GiB:.2f})")
        s = _settings(log, run, cfg, hw, version)
        fit, kw = _fit(cfg, hw, log, s, version)
        rows = _rows(log, run, fit, total_preset, cfg) if run is not None else []
        err = run.error if run is not None else None
        verdict = fit.reason
        if fit.warnings:
            notes.extend(fit.warnings)
        tight = fit.max_concurrency is not None and fit.max_concurrency < 1.5
        changes = (_changes(cfg, hw, log, s, version, fit, run, notes) if (err is not None or not _starts(fit) or tight)
                   else [])
        out.append(Explanation(log.engine, version, vnote, cfg.name, hw0.name, kw["tp"], kw["ep"], s, rows, err,
                               verdict, changes, notes, fit))
    return out


def explain_text(source, **kw) -> str:
    """:func:`explain`'s tables, one run after another, as ``explain`` prints them."""
    parts = explain(source, **kw)
    return "\n\n".join((f"run {i + 1} of {len(parts)}\n" if len(parts) > 1 else "") + e.table()
                       for i, e in enumerate(parts))


def _read_source(path: str) -> tuple:
    if path == "-":
        data = sys.stdin.buffer.read(MAX_BYTES + 1) if hasattr(sys.stdin, "buffer") else sys.stdin.read(MAX_BYTES + 1)
        rest = len(data)
        while True:
            chunk = sys.stdin.buffer.read(1 << 20) if hasattr(sys.stdin, "buffer") else ""
            if not chunk:
                break
            rest += len(chunk)
        return data, rest
    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such file (give a log or a command line in a file, or - for standard input)")
    with open(path, "rb") as fh:
        data = fh.read(MAX_BYTES + 1)
    return data, os.path.getsize(path)


def main(argv: list | None = None) -> int:
    """``python -m llm_dataflow``: ``explain FILE_OR_-`` here, every other command to ``plan``'s
    entry point.  Prints the table (or ``--json``) and returns 0; a bad input prints one line on
    stderr naming what was expected and returns 2 (never a traceback, never ``SystemExit``)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] != "explain":
        return plan_main(argv)
    p = build_parser()
    try:
        args = p.parse_args(argv[1:])
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 0
    try:
        data, total = _read_source(args.source)
        log = read_engine_text(data, total=total)
        res = explain(log, config=args.config, hardware=args.hardware)
    except ValueError as e:
        print(f"python -m llm_dataflow explain: {e}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([e.to_dict() for e in res], indent=1))
    else:
        print("\n\n".join((f"run {i + 1} of {len(res)}\n" if len(res) > 1 else "") + e.table()
                          for i, e in enumerate(res)))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``explain`` sub-command's parser (the planner page reads its options from it)."""
    p = argparse.ArgumentParser(prog="python -m llm_dataflow explain",
                                description="Reconcile a vLLM or SGLang command line or startup log with the "
                                            "book's accounting, term by term, and say what to change. The KV room "
                                            "is " + ESTIMATE_NOTE + ".")
    p.add_argument("source", metavar="FILE_OR_-", help="a log or command line in a file, or - for standard input")
    p.add_argument("--config", metavar="PATH_OR_FOLDER_OR_PRESET", default=None,
                   help="the model: a config.json, a folder holding one, or a preset (default: the name in the log, "
                        "when it is a preset or a local folder); never fetched")
    p.add_argument("--hardware", metavar="GPU", default=None,
                   help="the GPU: a preset or a custom spec (a log does not name it)")
    p.add_argument("--json", action="store_true", help="print a JSON list, one object per run")
    return p
