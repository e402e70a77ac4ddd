"""A vLLM or SGLang startup log (or a command line) read into a structured run: the engine, its
version and log format, the settings (command line, what the log prints, the engine's defaults),
each rank's logged figures with the line they came from, and the error the start ended in.
Standard library only (it runs in the browser through Pyodide).

Formats read (each pattern names the engine code that prints it):

* vLLM 0.2-0.5: ``# GPU blocks: N, # CPU blocks: M`` (``llm_engine.py``, later
  ``distributed_gpu_executor.py``), ``Loading model weights took X GB`` (``model_runner.py``);
* vLLM 0.6.4: ``Memory profiling results: total_gpu_memory=… peak_torch_memory=… non_torch_memory=…
  kv_cache_size=…`` (``worker.py``; the peak counts the weights), 0.6.5's ``duration=…, …`` form;
* vLLM 0.7-0.8 (PR #12126): ``the current vLLM instance can use total_gpu_memory (X) x
  gpu_memory_utilization (U) = Y`` and ``model weights take …; non_torch_memory takes …; PyTorch
  activation peak memory takes …; the rest of the memory reserved for KV Cache is …``;
  ``# cuda blocks: N``; ``Model loading took X GB and S seconds``;
* vLLM V1: ``Model loading took X GiB [memory] and …`` (``gpu_model_runner.py``), ``Available KV
  cache memory: X GiB`` (``gpu_worker.py``), ``GPU KV cache size: N tokens`` and ``Maximum
  concurrency for N tokens per request: Cx`` (``kv_cache_utils.py``), ``Graph capturing finished in
  S secs, took X GiB``, ``Estimated CUDA graph memory: X GiB total`` (0.21 on);
* SGLang: ``Init torch distributed ends. mem usage=``, ``Load weight begin. avail mem=``, ``Load
  weight end. … avail mem=…, mem usage=…``, ``KV Cache is allocated. #tokens: N, K size: …``,
  ``Memory pool end. avail mem=``, ``Capture cuda graph end. … mem usage=…``, ``max_total_num_tokens=…``,
  ``server_args=ServerArgs(…)``;
* failures: vLLM's ``No available memory for the cache blocks``, ``The model's max seq len (L) is
  larger than the maximum number of tokens that can be stored in KV cache (T)``, ``To serve at
  least one request with the model's max seq len (L), (X GiB KV cache is needed, which is larger
  than the available KV cache memory (Y GiB)``, a CUDA out-of-memory (during graph capture when a
  capture line precedes it); SGLang's ``Not enough memory`` / ``leave no GPU memory for the KV cache``.

Units: vLLM before V1 and SGLang print GiB and label them "GB" (vLLM's ``model_runner.py`` divides by
``float(2**30)``; SGLang's ``get_available_gpu_memory`` by ``1 << 30``): a "GB" figure of these
engines is read as GiB.  OOM messages are torch's (``MiB``/``GiB``).

Robustness: at most :data:`MAX_BYTES` are read (the rest is reported, not read); binary input,
an empty paste, another engine's log and a log with no line of these formats get a
``ValueError`` whose message says which line was expected.  Ranks' interleaved lines are told apart
by their prefixes: ``(VllmWorkerProcess pid=…)``, ``(Worker_TP1 pid=…)``, ``(VllmWorker rank=1
pid=…)``, ``(RayWorkerWrapper pid=…, ip=…)``, SGLang's ``[… TP0]``; a line without one belongs to
the driver (vLLM V0's rank 0) or the main process.
"""
from __future__ import annotations

import ast
import re
from bisect import bisect_right
from dataclasses import dataclass, field
from itertools import accumulate

from .engine_args import EngineCommand, Setting, find_command
from .units import GiB, MiB

__all__ = ["MAX_BYTES", "LogFigure", "LogError", "EngineRun", "EngineLog", "read_engine_text",
           "decode_input", "FIGURE_NAMES"]

#: The most bytes read from one input (a startup log is a few hundred kB at most; the rest of a
#: long server log is requests).
MAX_BYTES = 2_000_000

#: The most lines holding an anchor word that are parsed (a startup log has a few hundred; the cap
#: keeps a pathological input within a second).
MAX_ANCHORED = 2000

#: Figure names and what each is, for the reconciliation's rows.
FIGURE_NAMES = {
    "total_memory": "GPU memory as the engine sees it (torch.cuda.mem_get_info's total)",
    "gpu_memory_utilization": "vLLM's share of it (gpu_memory_utilization)",
    "budget": "total x gpu_memory_utilization",
    "weights": "weights after loading",
    "non_torch": "memory outside torch's allocator",
    "activations": "activation peak of the profiling forward",
    "peak_torch": "torch's peak during profiling (weights + activations)",
    "kv_memory": "KV cache memory",
    "gpu_blocks": "KV blocks",
    "cpu_blocks": "CPU swap blocks",
    "kv_tokens": "KV cache tokens",
    "max_concurrency": "sequences of max_model_len the cache holds",
    "concurrency_tokens": "tokens per request of that figure",
    "cuda_graph": "CUDA graph memory",
    "cuda_graph_estimate": "CUDA graph memory as profiled before the cache (vLLM 0.19 on)",
    "consumed": "weights + memory outside torch, as vLLM 0.31 prints them",
    "dist_init": "torch.distributed's buffers (SGLang)",
    "free_before_load": "free memory before the weights load (SGLang)",
    "free_after_load": "free memory after the weights load (SGLang)",
    "free_after_pool": "free memory after the KV pool (SGLang)",
    "k_size": "K cache (SGLang)",
    "v_size": "V cache (SGLang)",
    "max_total_num_tokens": "KV pool tokens (SGLang)",
    "max_running_requests": "running requests limit (SGLang)",
    "context_len": "context length (SGLang)",
}


@dataclass(frozen=True)
class LogFigure:
    """One figure the engine printed.

    Attributes:
        name: a key of :data:`FIGURE_NAMES`.
        value: bytes for memory, a count for blocks and tokens, a ratio otherwise.
        line: the line number (1-based) in the input.
        text: the line as printed (prefixes kept, at most 400 characters).
        rank: the rank it came from (``"TP1"``, ``"pid 1786"``, ``"driver"``).
    """

    name: str
    value: float
    line: int
    text: str
    rank: str


@dataclass(frozen=True)
class LogError:
    """The error a start ended in.

    Attributes:
        kind: ``"no_cache_memory"``, ``"max_seq_len"``, ``"kv_short"``, ``"oom_capture"``, ``"oom"``,
            ``"oom_sampler"`` (V1's sampler warm-up over ``max_num_seqs`` dummy requests, after the
            graphs), ``"failed"`` (vLLM V1's "EngineCore failed to start" with no cause in the lines read),
            ``"sglang_no_kv"``.
        line: the line number (1-based).
        text: the line.
        numbers: the figures the message holds (``max_model_len``, ``kv_tokens``, ``needed``,
            ``available`` (B), ``estimated_max_len``, ``tried`` (B), ``total`` (B), ``free`` (B)).
    """

    kind: str
    line: int
    text: str
    numbers: dict


@dataclass
class EngineRun:
    """One start of an engine as a log shows it.

    Attributes:
        ranks: rank → {figure name → :class:`LogFigure`} (the first of each on that rank).
        error: the error it ended in, or None.
        settings: name → :class:`~llm_dataflow.core.engine_args.Setting` printed by the engine
            (its config line, ``non-default args``, ``ServerArgs``).
        last_line: the number of the run's last line with a figure.
        stage: the last stage reached, in words.
        engine: the engine whose lines these are (``"vllm"``, ``"sglang"``; None before the first figure).
    """

    ranks: dict = field(default_factory=dict)
    error: LogError | None = None
    settings: dict = field(default_factory=dict)
    last_line: int = 0
    stage: str = ""
    engine: str | None = None

    def figure(self, name: str) -> LogFigure | None:
        """The figure ``name`` as the engine used it: vLLM sizes the cache by the rank with the
        least room, so memory room and blocks are the minimum over ranks; a weight or graph
        figure the maximum; otherwise the first rank's."""
        found = [r[name] for r in self.ranks.values() if name in r]
        if not found and name == "cuda_graph":
            return self.figure("cuda_graph_estimate")
        if not found:
            return None
        if name in ("kv_memory", "gpu_blocks", "kv_tokens", "max_total_num_tokens", "free_after_load",
                    "free_after_pool", "max_concurrency"):
            return min(found, key=lambda f: f.value)
        if name in ("weights", "cuda_graph", "cuda_graph_estimate", "activations", "non_torch", "peak_torch",
                    "dist_init"):
            return max(found, key=lambda f: f.value)
        return found[0]

    def names(self) -> list:
        """Every figure name any rank printed, in :data:`FIGURE_NAMES` order."""
        have = {n for r in self.ranks.values() for n in r}
        return [n for n in FIGURE_NAMES if n in have]


@dataclass
class EngineLog:
    """What an input held.

    Attributes:
        engine: ``"vllm"`` or ``"sglang"``.
        version: the version printed or named (``"0.10.1"``), else None.
        era: the log format's era (``"vllm-v0"``, ``"vllm-v1"``, ``"sglang"``) or ``"command"``.
        command: the command line found in the input, or None.
        runs: the starts the log shows (a paste of two runs gives two; a command alone none).
        notes: what the reader could not read, or read only in part, one sentence each.
        model: the model named (command, config line or ServerArgs), or None.
        bytes_read: bytes of the input read.
        lines: lines read.
    """

    engine: str
    version: str | None
    era: str
    command: EngineCommand | None
    runs: list
    notes: list
    model: str | None
    bytes_read: int
    lines: int


# --- input ------------------------------------------------------------------------------------
def decode_input(data, *, total: int | None = None) -> tuple:
    """``(text, notes)`` from ``data`` (bytes or str) capped at :data:`MAX_BYTES`; ``total`` is the
    whole input's size when the caller read only part of it.

    Raises:
        ValueError: empty input; binary input (NUL bytes, or mostly bytes that are not text).
    """
    notes = []
    if isinstance(data, str):
        raw = data.encode("utf-8", "surrogatepass")
    elif isinstance(data, (bytes, bytearray)):
        raw = bytes(data)
    else:
        raise ValueError(f"input of type {type(data).__name__} is not allowed; give text or bytes")
    size = total if total is not None else len(raw)
    if size > MAX_BYTES or len(raw) > MAX_BYTES:
        raw = raw[:MAX_BYTES]
        notes.append(f"read the first {MAX_BYTES:,} bytes of {size:,}; a startup log's memory lines come "
                     f"before that, the rest was not read")
    if not raw.strip():
        raise ValueError("nothing to read: the input is empty. Paste a 'vllm serve …' or 'python -m "
                         "sglang.launch_server …' command line, or the engine's startup log")
    head = raw[:65536]
    nul = head.count(b"\x00")
    if nul:
        raise ValueError(f"this is not text (a binary file: {nul:,} NUL bytes in its first "
                         f"{len(head):,}); expected a vLLM or SGLang command line or startup log")
    text = raw.decode("utf-8", "replace")
    bad = text[:65536].count("\ufffd")
    if bad > 0.1 * min(len(text), 65536):
        raise ValueError(f"this is not text ({bad:,} of its first {min(len(text), 65536):,} characters are not "
                         f"UTF-8); expected a vLLM or SGLang command line or startup log")
    return text, notes


# --- line prefixes ------------------------------------------------------------------------------
_ANSI = re.compile(r"(?:\x1b|\^\[)?\[[0-9;]{1,8}m")
_VLLM_PREFIX = re.compile(r"\((?P<who>[A-Za-z_]+?(?:_\d+)?)(?:[_ ](?P<tag>(?:DP\d+_?|PP\d+_?|TP\d+_?|EP\d+_?)+))?"
                          r"(?:\s+rank=(?P<rank>\d+))?\s+pid=(?P<pid>\d+)(?:,\s*ip=(?P<ip>[\d.:a-f]+))?\)")
_SGL_PREFIX = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?P<tags>(?: (?:DP|TP|EP|PP|CP)\d+)*)\]")
_OTHER_ENGINES = (
    ("llama.cpp", re.compile(r"llama_model_loader:|llm_load_tensors:|llama_kv_cache|load_tensors:|llama_new_context")),
    ("Ollama", re.compile(r"\bollama\b|msg=\"inference compute\"")),
    ("Hugging Face TGI", re.compile(r"text_generation_(?:launcher|router|server)")),
    ("TensorRT-LLM", re.compile(r"\[TensorRT-LLM\]|\[TRT-LLM\]")),
    ("LMDeploy", re.compile(r"lmdeploy|turbomind", re.I)),
    ("MLC LLM", re.compile(r"mlc_llm")),
)


def _rank(line: str) -> tuple:
    """``(rank, engine hint)`` of a line: the process that printed it."""
    m = _SGL_PREFIX.match(line)
    if m:
        tags = m.group("tags").split()
        return (" ".join(tags) if tags else "main"), "sglang"
    found = list(_VLLM_PREFIX.finditer(line[:200]))
    m = found[-1] if found else None          # nested prefixes: '(EngineCore_0 pid=…) (VllmWorker TP1 pid=…)'
    if m:
        who, tag, rank, pid = m.group("who"), m.group("tag"), m.group("rank"), m.group("pid")
        if tag:
            return tag.strip("_").replace("_", " "), "vllm"
        if rank is not None:
            return f"rank {rank}", "vllm"
        if who in ("APIServer", "ApiServer", "EngineCore") or who.startswith(("EngineCore_", "ApiServer_")):
            return who, "vllm"
        return f"pid {pid}" + (f"@{m.group('ip')}" if m.group("ip") else ""), "vllm"   # Ray: pids repeat across nodes
    return "driver", None


# --- patterns -----------------------------------------------------------------------------------
_NUM = r"([0-9]+(?:,[0-9]{3})*(?:\.[0-9]+)?)"


def _num(s: str) -> float:
    return float(s.replace(",", ""))


def _gib(s: str, unit: str = "GiB") -> float:
    unit = (unit or "GiB").strip()
    return _num(s) * (MiB if unit.startswith("M") else GiB)


#: (engine, stage, regex, handler) — the handler turns a match into {figure: value}.
_P = []


def _pat(engine, stage, regex, fn, split=True):
    _P.append((engine, stage, re.compile(regex), fn, split))


_pat("vllm", "weights loaded", r"Loading model weights took " + _NUM + r" ?(GiB|GB)",
     lambda m: {"weights": _gib(m.group(1))})
_pat("vllm", "weights loaded", r"Model loading took " + _NUM + r" ?(GiB|GB)",
     lambda m: {"weights": _gib(m.group(1))})
_pat("vllm", "profiled", r"the current vLLM instance can use total_gpu_memory \(" + _NUM + r" ?GiB\) x "
     r"gpu_memory_utilization \(" + _NUM + r"\) = " + _NUM + " ?GiB",
     lambda m: {"total_memory": _gib(m.group(1)), "gpu_memory_utilization": _num(m.group(2)),
                "budget": _gib(m.group(3))})
_pat("vllm", "profiled", r"model weights take " + _NUM + r" ?GiB; non_torch_memory takes " + _NUM +
     r" ?GiB; PyTorch activation peak memory takes " + _NUM + r" ?GiB; the rest of the memory reserved "
     r"for KV Cache is " + _NUM + " ?GiB",
     lambda m: {"weights": _gib(m.group(1)), "non_torch": _gib(m.group(2)), "activations": _gib(m.group(3)),
                "kv_memory": _gib(m.group(4))})


def _profiling(m):
    kv = dict(re.findall(r"(\w+)=([0-9]+(?:\.[0-9]+)?)", m.group(1)))
    out = {}
    for key, name in (("total_gpu_memory", "total_memory"), ("peak_torch_memory", "peak_torch"),
                      ("non_torch_memory", "non_torch"), ("kv_cache_size", "kv_memory")):
        if key in kv:
            out[name] = float(kv[key]) * GiB
    if "gpu_memory_utilization" in kv:
        out["gpu_memory_utilization"] = float(kv["gpu_memory_utilization"])
    return out


_pat("vllm", "profiled", r"Memory profiling results: (.*)", _profiling)
_pat("vllm", "KV cache sized", r"#? ?(?:GPU|cuda|CUDA) blocks: " + _NUM + r"(?:, # CPU blocks: " + _NUM + ")?",
     lambda m: {"gpu_blocks": _num(m.group(1)), **({"cpu_blocks": _num(m.group(2))} if m.group(2) else {})})
_pat("vllm", "KV cache sized", r"Available KV cache memory: (-?)" + _NUM + r" ?GiB",
     lambda m: {"kv_memory": -_gib(m.group(2)) if m.group(1) else _gib(m.group(2))})
_pat("vllm", "KV cache sized", r"GPU KV cache size: " + _NUM + r" tokens",
     lambda m: {"kv_tokens": _num(m.group(1))})
_pat("vllm", "KV cache sized", r"Maximum concurrency for " + _NUM + r" tokens per request: " + _NUM + "x",
     lambda m: {"concurrency_tokens": _num(m.group(1)), "max_concurrency": _num(m.group(2))})
_pat("vllm", "CUDA graphs captured", r"Graph capturing finished in " + _NUM + r" secs?, took " + _NUM + r" ?(GiB|GB)",
     lambda m: {"cuda_graph": _gib(m.group(2))})
_pat("vllm", "CUDA graphs profiled", r"Estimated CUDA graph memory: " + _NUM + r" ?GiB",
     lambda m: {"cuda_graph_estimate": _gib(m.group(1))})
_pat("vllm", "CUDA graphs captured", r"CUDA graph pool memory: " + _NUM + r" ?GiB \(actual\)",
     lambda m: {"cuda_graph": _gib(m.group(1))})
_pat("vllm", "started", r"worker init memory snapshot: .*total_memory=" + _NUM + r" ?GiB",
     lambda m: {"total_memory": _gib(m.group(1))})
_pat("vllm", "profiled", r"Total non KV cache memory: " + _NUM + r" ?GiB; torch peak memory increase: " + _NUM +
     r" ?GiB; non-torch forward increase memory: " + _NUM + r" ?GiB; weights memory: " + _NUM + " ?GiB",
     lambda m: {"activations": _gib(m.group(2)), "non_torch": _gib(m.group(3)), "weights": _gib(m.group(4))})


def _free_on_device(m):
    line = m.group(0)
    out = {"total_memory": _gib(m.group(2)), "gpu_memory_utilization": _num(m.group(3)), "budget": _gib(m.group(4))}
    for rx, name in ((r"Actual usage is " + _NUM + r" ?GiB for weight", "weights"),
                     (_NUM + r" ?GiB for peak activation", "activations"),
                     (_NUM + r" ?GiB for non-torch memory", "non_torch"),
                     (_NUM + r" ?GiB for CUDAGraph memory", "cuda_graph"),
                     (r"Actual usage is " + _NUM + r" ?GiB for consumed memory", "consumed")):
        f = re.search(rx, line)
        if f:
            out[name] = _gib(f.group(1))
    return out


_pat("vllm", "KV cache sized", r"Free memory on device \(" + _NUM + "/" + _NUM + r" ?GiB\) on startup\. Desired GPU memory "
     r"utilization is \(" + _NUM + ", " + _NUM + r" ?GiB\)\..*", _free_on_device, split=False)
_pat("sglang", "torch.distributed set up", r"Init torch distributed ends\. mem usage=" + _NUM + " ?GB",
     lambda m: {"dist_init": _gib(m.group(1))})
_pat("sglang", "loading weights", r"Load weight begin\. avail mem=" + _NUM + " ?GB",
     lambda m: {"free_before_load": _gib(m.group(1))})


def _load_end(m):
    line = m.group(0)
    out = {}
    a = re.search(r"avail mem=" + _NUM + " ?GB", line)
    u = re.search(r"mem usage=" + _NUM + " ?GB", line)
    if a:
        out["free_after_load"] = _gib(a.group(1))
    if u:
        out["weights"] = _gib(u.group(1))
    return out


_pat("sglang", "weights loaded", r"Load weight end\..*", _load_end)
_pat("sglang", "KV cache sized", r"KV Cache is allocated\. #tokens: " + _NUM +
     r", (?:K size: " + _NUM + r" ?GB, V size: " + _NUM + r" ?GB|KV size: " + _NUM + r" ?GB)",
     lambda m: {"max_total_num_tokens": _num(m.group(1)),
                **({"k_size": _gib(m.group(2)), "v_size": _gib(m.group(3))} if m.group(2) else
                   {"k_size": _gib(m.group(4)), "v_size": 0.0})})
_pat("sglang", "KV cache sized", r"Memory pool end\. avail mem=" + _NUM + " ?GB",
     lambda m: {"free_after_pool": _gib(m.group(1))})


def _capture_end(m):
    u = re.search(r"mem usage=" + _NUM + " ?GB", m.group(0))
    return {"cuda_graph": _gib(u.group(1))} if u else {}


_pat("sglang", "CUDA graphs captured", r"Capture cuda graph end\..*", _capture_end)


def _sgl_totals(m):
    kv = dict(re.findall(r"(\w+)=(-?[0-9.]+)", m.group(0)))
    out = {"max_total_num_tokens": float(kv["max_total_num_tokens"])}
    for k in ("max_running_requests", "context_len"):
        if k in kv:
            out[k] = float(kv[k])
    return out


_pat("sglang", "ready", r"max_total_num_tokens=[0-9]+.*", _sgl_totals)

_ERRORS = (
    ("vllm", "oom_sampler", re.compile(r"CUDA out of memory occurred when warming up sampler with (\d+) dummy requests"),
     lambda m: {"max_num_seqs": int(m.group(1))}),
    ("vllm", "no_cache_memory", re.compile(r"No available memory for the cache blocks"), lambda m: {}),
    ("vllm", "max_seq_len", re.compile(r"max seq len \(" + _NUM + r"\) is larger than the maximum number of "
                                       r"tokens that can be stored in KV cache \(" + _NUM + r"\)"),
     lambda m: {"max_model_len": _num(m.group(1)), "kv_tokens": _num(m.group(2))}),
    ("vllm", "kv_short", re.compile(r"To serve at least one request with the models?'s max seq len \(" + _NUM +
                                    r"\), \(" + _NUM + r" ?GiB KV cache is needed, which is larger than the available "
                                    r"KV cache memory \(" + _NUM + r" ?GiB\)(?:\. Based on the available memory, the "
                                    r"estimated maximum model length is " + _NUM + ")?"),
     lambda m: {"max_model_len": _num(m.group(1)), "needed": _gib(m.group(2)), "available": _gib(m.group(3)),
                **({"estimated_max_len": _num(m.group(4))} if m.group(4) else {})}),
    (None, "oom", re.compile(r"CUDA out of memory\. Tried to allocate " + _NUM + r" ?(MiB|GiB)\. GPU (\d+) has a total "
                             r"capacit?t?y of " + _NUM + r" ?(MiB|GiB) of which " + _NUM + r" ?(MiB|GiB|KiB) is free"),
     lambda m: {"tried": _gib(m.group(1), m.group(2)), "total": _gib(m.group(4), m.group(5)),
                "free": _num(m.group(6)) * (2**10 if m.group(7) == "KiB" else MiB if m.group(7) == "MiB" else GiB)}),
    (None, "oom", re.compile(r"CUDA error: out of memory|OutOfMemoryError|CUDA out of memory"), lambda m: {}),
    ("vllm", "failed", re.compile(r"EngineCore failed to start|Engine core initialization failed"), lambda m: {}),
    ("sglang", "sglang_no_kv", re.compile(r"Not enough memory\. Please try to increase --mem-fraction-static|leave no GPU "
                                          r"memory for the KV cache"), lambda m: {}),
)
#: Words every line read below holds one of (a cheap first test per line: plain substring tests,
#: which a long log's request lines fail fast).
_ANCHORS = ("took", "failed to start", "Defaulting", "Free memory on device", "memory snapshot", "non KV cache", "initialization failed", "rofiling", "blocks", "KV cache", "KV Cache", "oncurrency", "raph", "torch distributed",
            "Load weight", "Memory pool", "max_total_num_tokens", "max seq len", "memory", "Initializing",
            "non-default args", "server_args", "version", "max model len", "Chunked prefill", "out of memory",
            "OutOfMemory", "apturing", "apture", "model weights take", "total_gpu_memory")
#: A figure seen again on the same rank after the cache was sized starts another run.
_SPLIT = {"weights", "free_before_load", "dist_init", "total_memory", "peak_torch", "gpu_blocks", "kv_memory", "kv_tokens"}
#: vLLM V1's engine core reports the room of every worker's KV cache, one after another ("GPU KV
#: cache size" and "Maximum concurrency" once per worker since 0.10, e.g. eight times at TP 8),
#: and sizes the cache by the smallest (``kv_cache_utils.py``, ``get_kv_cache_configs`` then
#: ``unify``): such a block is one start, its figure the least of them.
_REPORTS = {"kv_tokens", "concurrency_tokens", "max_concurrency"}
#: Ray's log deduplication prints a worker's line again for the others ("… [repeated 3x across
#: cluster]"): the same start.
_RAY_REPEAT = re.compile(r"\[repeated \d+x across cluster\]")
#: How specific an error is: a later line of a more specific kind names the cause of a start that
#: failed (V1 prints "EngineCore failed to start" before the ValueError; an OOM before its RuntimeError).
_RANK = {"failed": 0, "oom": 1, "oom_capture": 2, "oom_sampler": 3, "no_cache_memory": 3, "kv_short": 3,
         "max_seq_len": 3, "sglang_no_kv": 3}
_CAPTURE = re.compile(r"[Cc]apturing (?:the model for )?(?:CUDA graph|cudagraph)|Capture cuda graph begin|capture_model"
                      r"|Capturing CUDA graph shapes|graph capture", re.I)
_VERSION = (
    re.compile(r"vLLM API server version v?(\d+\.\d+[\w.+\-]*)"),
    re.compile(r"Initializing an? (?:V1 )?LLM engine \(v(\d+\.\d+[\w.+\-]*)\)"),
    re.compile(r"\bversion (\d+\.\d+\.\d+[\w.+\-]*)$"),
)
#: ``vllm --version`` pasted before a log: its answer, a bare version line (after at most a few
#: lines such as "Automatically detected platform cuda.").
_VERSION_COMMAND = re.compile(r"vllm --version[ \t]*\r?\n(?:[^\n]{0,200}\n){0,3}?[ \t]*v?(\d+\.\d+\.\d+[\w.+\-]*)[ \t]*\r?$", re.M)
_CONFIG = re.compile(r"Initializing an? (?:V1 )?LLM engine(?: \(v[^)]*\))? with config: (.*)")
_NONDEFAULT = re.compile(r"non-default args: (\{.*\})")
_SERVER_ARGS = re.compile(r"server_args=ServerArgs\((.*)\)")
_LOG_SETTINGS = re.compile(r"Using max model len (\d+)|Chunked prefill is enabled with max_num_batched_tokens=(\d+)"
                           r"|Defaulting (max_num_seqs|max_num_batched_tokens) to (\d+)")


def _kv_pairs(body: str) -> dict:
    """``key=value, …`` or ``'key': value, …`` (a Python repr) → {key: value}, nested brackets and
    quotes respected; values read as Python literals where they are, else kept as text."""
    out, depth, quote, start = {}, 0, None, 0
    parts = []
    for i, ch in enumerate(body):
        if quote:
            if ch == quote and body[i - 1] != "\\":
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    parts.append(body[start:])
    for p in parts:
        m = re.match(r"\s*'?(\w+)'?\s*[:=]\s*(.*)$", p, re.S)
        if not m:
            continue
        raw = m.group(2).strip()
        try:
            val = ast.literal_eval(raw)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            val = raw
        out[m.group(1)] = val
    return out


#: The settings a vLLM config line / ``non-default args`` / SGLang ``ServerArgs`` name, mapped to
#: the command-line setting they are.
_LOGGED_SETTING = {
    "max_seq_len": "max_model_len", "max_model_len": "max_model_len",
    "tensor_parallel_size": "tensor_parallel_size", "pipeline_parallel_size": "pipeline_parallel_size",
    "data_parallel_size": "data_parallel_size", "enable_expert_parallel": "enable_expert_parallel",
    "gpu_memory_utilization": "gpu_memory_utilization", "max_num_batched_tokens": "max_num_batched_tokens",
    "max_num_seqs": "max_num_seqs", "kv_cache_dtype": "kv_cache_dtype", "enforce_eager": "enforce_eager",
    "quantization": "quantization", "dtype": "dtype", "block_size": "block_size",
    "tp_size": "tp_size", "dp_size": "dp_size", "ep_size": "ep_size", "enable_ep_moe": "enable_ep_moe",
    "mem_fraction_static": "mem_fraction_static", "context_length": "context_length",
    "max_running_requests": "max_running_requests", "max_total_tokens": "max_total_tokens",
    "chunked_prefill_size": "chunked_prefill_size", "max_prefill_tokens": "max_prefill_tokens",
    "disable_cuda_graph": "disable_cuda_graph", "cuda_graph_max_bs": "cuda_graph_max_bs",
    "page_size": "page_size",
}


def _settings_from(pairs: dict, text: str) -> tuple:
    out, model = {}, None
    for k, v in pairs.items():
        if k in _LOGGED_SETTING and v is not None and not (isinstance(v, str) and v in ("None", "")):
            if isinstance(v, str) and re.fullmatch(r"-?\d+", v):
                v = int(v)
            elif isinstance(v, str) and re.fullmatch(r"-?\d+\.\d*", v):
                v = float(v)
            elif v in ("True", "False"):
                v = v == "True"
            out[_LOGGED_SETTING[k]] = Setting(v, "log", text[:200])
        if k in ("model", "model_path", "model_tag") and isinstance(v, str) and model is None:
            model = v
    return out, model


_V1_MARKS = re.compile(r"gpu_model_runner\.py|gpu_worker\.py|kv_cache_utils\.py|EngineCore|Worker_(?:DP|PP|TP)"
                       r"|VllmWorker rank=|Available KV cache memory|GPU KV cache size|V1 LLM engine|VLLM_USE_V1=1")
_V0_MARKS = re.compile(r"(?<!gpu_)model_runner\.py|(?<!gpu_)worker\.py|distributed_gpu_executor|executor_base\.py"
                       r"|llm_engine\.py|VllmWorkerProcess|Memory profiling results|model weights take|VLLM_USE_V1=0")


def _era(engine: str, version, text: str, command) -> str:
    """``"sglang"``, ``"vllm-v0"`` or ``"vllm-v1"``: the engine's lines decide (V1's module names,
    prefixes and KV lines; V0's), then the version (V1 the default from vLLM 0.8.0)."""
    if engine == "sglang":
        return "sglang"
    v1 = len(_V1_MARKS.findall(text[:MAX_BYTES]))
    v0 = len(_V0_MARKS.findall(text[:MAX_BYTES]))
    if command is not None and command.env.get("VLLM_USE_V1") in ("0", "1"):
        return "vllm-v1" if command.env["VLLM_USE_V1"] == "1" else "vllm-v0"
    if v1 != v0:
        return "vllm-v1" if v1 > v0 else "vllm-v0"
    m = re.match(r"v?(\d+)\.(\d+)", version or "")
    if m:
        return "vllm-v1" if (int(m.group(1)), int(m.group(2))) >= (0, 8) else "vllm-v0"
    return "vllm-v1"


def _lines_holding(text: str, lines: list) -> tuple:
    """``(lines to parse, lines to keep)``: the 1-based numbers of the lines holding an anchor
    word, and of those naming an engine or a process (a command and its continuation lines).
    Found with ``str.find`` over the whole text (C speed: a long log's request lines are never
    visited one by one)."""
    ends = list(accumulate(len(ln) + 1 for ln in lines))   # approximate for \r\n: corrected below

    def numbers(words, cap):
        out = set()
        for w in words:
            i = text.find(w)
            while i != -1 and len(out) < cap:
                out.add(bisect_right(ends, i) + 1)
                i = text.find(w, i + 1)
        return out

    if "\r" in text[:65536]:                 # splitlines' ends differ from len + 1: map exactly
        ends = []
        pos = 0
        for ln in text.splitlines(keepends=True):
            pos += len(ln)
            ends.append(pos)
    parse = {n for n in numbers(_ANCHORS, 10 * MAX_ANCHORED) if n <= len(lines)}
    if len(parse) > MAX_ANCHORED:
        parse = set(sorted(parse)[:MAX_ANCHORED])
    keep = {n for n in numbers(("vllm", "sglang", "pid="), 2_000) if n <= len(lines)}
    for n in sorted(keep):
        while n <= len(lines) and lines[n - 1].rstrip().endswith("\\") and n + 1 <= len(lines):
            n += 1
            keep.add(n)
    return parse, keep - parse


# --- the reader ---------------------------------------------------------------------------------
def _clean(line: str) -> str:
    return _ANSI.sub("", line).rstrip("\r")


def read_engine_text(data, *, total: int | None = None) -> EngineLog:
    """Read ``data`` (a pasted command line or startup log, text or bytes) into an :class:`EngineLog`.

    A command line alone gives an EngineLog with no runs and ``era == "command"``.  Several starts
    in one paste (the same figure again on the same rank after the cache was sized) give several
    runs.  A log that stops early is read as far as it goes; the last run's ``stage`` says where.

    Raises:
        ValueError: empty or binary input; another engine's log (named); text with neither an
            engine command nor a line of the formats above (the message names the lines expected).
    """
    text, notes = decode_input(data, total=total)
    lines = text.splitlines()
    if text and not text.endswith(("\n", "\r")) and len(lines) > 1 and not notes:
        notes.append(f"the last line ({len(lines)}) has no line end: it may be cut off")
    votes = {"vllm": 0, "sglang": 0}
    runs = [EngineRun()]
    version = None
    model = None
    capture_at = None
    last_figs, last_rank = {"none"}, None    # the figures of the previous figure line, and its rank
    kept = []                           # the lines read: the era, the command and other engines are told from them
    parse, keep = _lines_holding(text, lines)
    if len(parse) == MAX_ANCHORED:
        notes.append(f"read the first {MAX_ANCHORED:,} lines that hold a memory word; the rest was not read")
    for no in sorted(parse | keep):
        raw = lines[no - 1][:20000]
        if no not in parse:
            kept.append(raw[:2000])     # a command line (and its continuation), or a process prefix
            continue
        line = _clean(raw)
        kept.append(line[:400])
        rank, hint = _rank(line)
        if hint:
            votes[hint] += 1
        run = runs[-1]
        if version is None:
            for rx in _VERSION:
                m = rx.search(line)
                if m and ("vLLM" in line or "LLM engine" in line or "api_utils" in line or "█" in line):
                    version = m.group(1)
                    votes["vllm"] += 3
                    break
        # the lines that print the engine's settings as key=value pairs: vLLM's config line and
        # its non-default args ("{...}": the braces stripped), SGLang's server args
        for rx, engine, strip in ((_CONFIG, "vllm", 0), (_NONDEFAULT, "vllm", 1), (_SERVER_ARGS, "sglang", 0)):
            m = rx.search(line)
            if m:
                pairs = m.group(1)[1:-1] if strip else m.group(1)
                got, mdl = _settings_from(_kv_pairs(pairs), line)
                run.settings.update(got)
                model = model or mdl
                votes[engine] += 3
        m = _LOG_SETTINGS.search(line)
        if m:
            if m.group(3):
                run.settings[m.group(3)] = Setting(int(m.group(4)), "log", line[:200])
            else:
                name = "max_model_len" if m.group(1) else "max_num_batched_tokens"
                run.settings[name] = Setting(int(m.group(1) or m.group(2)), "log", line[:200])
        if _CAPTURE.search(line):
            capture_at = no
        for engine, stage, rx, fn, split in _P:
            m = rx.search(line)
            if not m:
                continue
            figs = fn(m)
            if not figs:
                continue
            votes[engine] += 2
            ranks = run.ranks.setdefault(rank, {})
            report = set(figs) <= _REPORTS and last_figs <= _REPORTS and last_rank == rank
            again = split and not report and not _RAY_REPEAT.search(line) and any(
                k in ranks for k in figs if k in _SPLIT) and any(
                k in r for r in run.ranks.values() for k in ("kv_memory", "gpu_blocks", "kv_tokens", "max_total_num_tokens"))
            last_figs, last_rank = set(figs), rank
            if again or (run.engine is not None and run.engine != engine):
                run = EngineRun(settings=dict(run.settings) if not run.engine or run.engine == engine else {})
                runs.append(run)                                  # a second start, or the other engine's
                capture_at = None
                ranks = run.ranks.setdefault(rank, {})
            run.engine = engine
            for k, v in figs.items():
                if report and k in ranks and k != "concurrency_tokens" and v < ranks[k].value:
                    ranks[k] = LogFigure(k, v, no, line.strip()[:400], rank)     # another worker's, smaller
                ranks.setdefault(k, LogFigure(k, v, no, line.strip()[:400], rank))
            run.last_line, run.stage = no, stage
            break
        for engine, kind, rx, fn in _ERRORS:
            m = rx.search(line)
            if not m:
                continue
            if kind == "oom" and capture_at is not None:
                kind = "oom_capture"
            numbers = fn(m)
            cur = run.error
            if cur is None or _RANK[kind] > _RANK[cur.kind] or (kind == cur.kind and numbers and not cur.numbers):
                merged = {**(cur.numbers if cur is not None else {}), **numbers}
                run.error = LogError(kind, no, line.strip()[:400], merged)
                if engine:
                    votes[engine] += 2
            elif cur is not None and numbers and cur.kind != kind and kind.startswith("oom"):
                run.error = LogError(cur.kind, cur.line, cur.text, {**numbers, **cur.numbers})
            break
    runs = [r for r in runs if r.ranks or r.error or r.settings]
    if version is None and "vllm --version" in text:
        m = _VERSION_COMMAND.search(text)
        version = m.group(1) if m else None
    command = find_command("\n".join(kept))
    if command is not None:
        votes[command.engine] += 5
        model = model or command.model
        version = version or command.version
    if not runs and command is None:
        for name, rx in _OTHER_ENGINES:
            for no, line in enumerate(lines[:5000], 1):
                if rx.search(line):
                    raise ValueError(f"this looks like a {name} log (line {no}: {line.strip()[:80]!r}); explain reads "
                                     f"vLLM and SGLang only. Expected a line such as 'Available KV cache memory: … GiB' "
                                     f"(vLLM), 'KV Cache is allocated. #tokens: …' (SGLang) or a 'vllm serve …' command")
        first = next((ln.strip() for ln in lines if ln.strip()), "")
        raise ValueError(f"no vLLM or SGLang line found in {len(lines):,} lines (the first: {first[:80]!r}). Expected "
                         f"a 'vllm serve MODEL …' or 'python -m sglang.launch_server …' command, or a startup-log "
                         f"line such as 'Model loading took … GiB', 'Available KV cache memory: … GiB', '# GPU "
                         f"blocks: …', 'Memory profiling results: …' (vLLM) or 'Load weight end. … mem usage=… GB', "
                         f"'KV Cache is allocated. #tokens: …' (SGLang)")
    engine = "sglang" if votes["sglang"] > votes["vllm"] else "vllm"
    era = _era(engine, version, "\n".join(kept), command) if runs else "command"
    for run in runs:
        if run.error is None and run.stage and run.stage not in ("ready", "CUDA graphs captured", "KV cache sized"):
            notes.append(f"the log stops after line {run.last_line} ({run.stage}): no KV-cache line follows; "
                         f"expected {'KV Cache is allocated' if engine == 'sglang' else 'Available KV cache memory or # GPU blocks'} next")
    return EngineLog(engine, version, era, command, runs, notes, model, len(text.encode("utf-8")), len(lines))

