"""A ``vllm serve …`` or ``python -m sglang.launch_server …`` command line read as the engine reads
it: its own flag names (dashes or underscores, ``--flag=value``, short aliases), and each setting
it leaves out filled with the engine's default for that version, with the source of the default.
Standard library only (it runs in the browser through Pyodide).

What is read (:data:`ENGINE_FLAGS`): the settings that decide where a GPU's bytes go — the parallel
degrees, the context, the memory share, the batch limits, the KV dtype, CUDA graphs, the weight
format.  Every other flag is kept as given (``EngineCommand.other``), never guessed at.

Defaults (:func:`engine_defaults`), each with its source:

* vLLM ``gpu_memory_utilization`` 0.9, ``block_size`` 16, ``max_num_seqs`` 256 (vLLM's engine
  arguments; ``EngineArgs`` in ``vllm/engine/arg_utils.py``);
* vLLM V1 (0.8 on) ``max_num_batched_tokens`` / ``max_num_seqs`` for ``vllm serve``: 8,192 / 1,024
  on a GPU of 70 GiB or more that is not an A100, else 2,048 / 256
  (``EngineArgs.get_batch_defaults``; the A100 exception is vllm-project/vllm PR #17885); V0:
  ``max(max_model_len, 2048)`` without chunked prefill;
* SGLang 0.3-0.4 ``mem_fraction_static`` 0.88 / 0.87 / 0.85 / 0.81 / 0.79 at TP 1 / 2 / 4 / 8 / 16
  and ``chunked_prefill_size`` 2,048 on a GPU under 25,000 MB, else 8,192 (``ServerArgs.__post_init__``
  in ``python/sglang/srt/server_args.py``; a SGLang 0.4.3.post4 log on 4 x L4 prints 0.85 and
  2,048 for a command that sets neither: ``tests/data/logs/sglang-0.4.3-qwq-32b-4xl4.log``).

A setting the engine would derive from the model (``max_model_len`` from
``max_position_embeddings``) stays ``None`` here: :mod:`llm_dataflow.core.explain` fills it from the
model's config.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

__all__ = ["ENGINE_FLAGS", "ENGINE_SWITCHES", "FlagSpec", "EngineCommand", "Setting", "parse_command", "engine_defaults",
           "find_command"]


@dataclass(frozen=True)
class FlagSpec:
    """One engine flag the book reads.

    Attributes:
        engine: ``"vllm"`` or ``"sglang"``.
        name: the setting's name as the engine stores it (``tensor_parallel_size``).
        flags: the spellings the engine's parser accepts (``--tensor-parallel-size``, ``-tp``).
        kind: ``"int"``, ``"hint"`` (an integer vLLM also reads with a suffix: ``32K`` = 32,768,
            ``32k`` = 32,000; vLLM ``engine/arg_utils.py`` ``human_readable_int``), ``"float"``,
            ``"str"`` or ``"bool"`` (a switch: present means True).
    """

    engine: str
    name: str
    flags: tuple
    kind: str


def _f(engine, name, kind, *flags):
    return FlagSpec(engine, name, tuple(flags) or ("--" + name.replace("_", "-"),), kind)


#: The flags read, per engine.  vLLM accepts underscores for dashes (its ``FlexibleArgumentParser``),
#: so ``--tensor_parallel_size`` is read too; SGLang's spellings are its ``add_cli_args`` ones.
ENGINE_FLAGS = (
    _f("vllm", "model", "str", "--model"),
    _f("vllm", "tensor_parallel_size", "int", "--tensor-parallel-size", "-tp"),
    _f("vllm", "pipeline_parallel_size", "int", "--pipeline-parallel-size", "-pp"),
    _f("vllm", "data_parallel_size", "int", "--data-parallel-size", "-dp"),
    _f("vllm", "enable_expert_parallel", "bool", "--enable-expert-parallel"),
    _f("vllm", "max_model_len", "hint"),
    _f("vllm", "gpu_memory_utilization", "float"),
    _f("vllm", "max_num_batched_tokens", "int"),
    _f("vllm", "max_num_seqs", "int"),
    _f("vllm", "kv_cache_dtype", "str"),
    _f("vllm", "enforce_eager", "bool"),
    _f("vllm", "quantization", "str", "--quantization", "-q"),
    _f("vllm", "dtype", "str"),
    _f("vllm", "block_size", "int"),
    _f("vllm", "swap_space", "float"),
    _f("vllm", "cpu_offload_gb", "float"),
    _f("vllm", "enable_chunked_prefill", "bool"),
    _f("vllm", "max_seq_len_to_capture", "int"),
    _f("sglang", "model_path", "str", "--model-path", "--model"),
    _f("sglang", "tp_size", "int", "--tp-size", "--tp", "--tensor-parallel-size"),
    _f("sglang", "dp_size", "int", "--dp-size", "--dp", "--data-parallel-size"),
    _f("sglang", "ep_size", "int", "--ep-size", "--ep", "--expert-parallel-size"),
    _f("sglang", "enable_ep_moe", "bool"),
    _f("sglang", "mem_fraction_static", "float"),
    _f("sglang", "context_length", "int"),
    _f("sglang", "max_running_requests", "int"),
    _f("sglang", "max_total_tokens", "int"),
    _f("sglang", "chunked_prefill_size", "int"),
    _f("sglang", "max_prefill_tokens", "int"),
    _f("sglang", "kv_cache_dtype", "str"),
    _f("sglang", "quantization", "str"),
    _f("sglang", "dtype", "str"),
    _f("sglang", "disable_cuda_graph", "bool"),
    _f("sglang", "cuda_graph_max_bs", "int"),
    _f("sglang", "page_size", "int"),
)
_BY_FLAG = {(s.engine, f): s for s in ENGINE_FLAGS for f in s.flags}
#: Switches of either engine that take no value (so that the word after one is not read as its
#: value: ``vllm serve --trust-remote-code MODEL``).
ENGINE_SWITCHES = frozenset((
    "--trust-remote-code", "--enable-prefix-caching", "--no-enable-prefix-caching", "--disable-log-requests",
    "--disable-log-stats", "--enable-auto-tool-choice", "--enable-sleep-mode", "--disable-custom-all-reduce",
    "--enable-metrics", "--enable-p2p-check", "--disable-radix-cache", "--enable-torch-compile",
    "--enable-dp-attention", "--disable-overlap-schedule", "--enable-mixed-chunk", "--skip-tokenizer-init",
    "--enable-lora", "--disable-frontend-multiprocessing", "--enable-reasoning", "--no-enable-chunked-prefill",
    "--async-scheduling", "--disable-cuda-graph-padding", "--enable-nan-detection", "--is-embedding",
))
#: A switch vLLM also accepts negated (``--no-enforce-eager``; argparse's BooleanOptionalAction).
_NEGATED = {(s.engine, "--no-" + s.flags[0][2:]): s for s in ENGINE_FLAGS if s.kind == "bool"}


@dataclass(frozen=True)
class Setting:
    """One setting of a run and where its value comes from.

    Attributes:
        value: the value (None: derived from the model, see the module docstring).
        origin: ``"command"`` (the command line), ``"log"`` (the engine printed it), or
            ``"default"`` (the engine's default for that version).
        source: for a default, the rule and its source; for the others, the text it was read from.
    """

    value: object
    origin: str
    source: str


@dataclass
class EngineCommand:
    """A command line read as its engine reads it.

    Attributes:
        engine: ``"vllm"`` or ``"sglang"``.
        text: the command as given (continuation lines joined).
        model: the model argument (a Hugging Face id or a path), or None.
        settings: name → value for every flag of :data:`ENGINE_FLAGS` the command gives.
        other: the other flags as given (name → value or True).
        env: ``NAME=value`` assignments before the command (``VLLM_USE_V1=1``).
        version: the version a container tag names (``vllm/vllm-openai:v0.10.1``), else None.
    """

    engine: str
    text: str
    model: str | None
    settings: dict = field(default_factory=dict)
    other: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)
    version: str | None = None


_ENV = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_IMAGE = re.compile(r"^(?:[\w.\-]+/)?(vllm-openai|vllm|sglang)(?::v?([0-9][\w.\-]*))?$")
_VLLM_MODULES = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server")
_SGLANG_MODULES = ("sglang.launch_server",)


def _engine_start(tokens: list) -> tuple | None:
    """``(engine, index of the first argument, version from an image tag)`` or None."""
    for i, t in enumerate(tokens):
        base = t.rsplit("/", 1)[-1]
        if base == "vllm" and i + 1 < len(tokens) and tokens[i + 1] == "serve":
            return "vllm", i + 2, None
        if base == "sglang" and i + 1 < len(tokens) and tokens[i + 1] == "serve":
            return "sglang", i + 2, None
        if t == "-m" and i + 1 < len(tokens):
            if tokens[i + 1] in _VLLM_MODULES:
                return "vllm", i + 2, None
            if tokens[i + 1] in _SGLANG_MODULES:
                return "sglang", i + 2, None
        m = _IMAGE.match(t)
        if m and i > 0 and m.group(1).startswith("vllm") and "/" in t:
            return "vllm", i + 1, m.group(2)
    return None


def _convert(spec: FlagSpec, raw, where: str):
    if spec.kind == "bool":
        if raw is True:
            return True
        low = str(raw).lower()
        if low in ("true", "1", "yes"):
            return True
        if low in ("false", "0", "no"):
            return False
        raise ValueError(f"{spec.name}={raw!r} ({where}) is not allowed; a switch takes no value, or true/false")
    if spec.kind == "str":
        return str(raw)
    if spec.kind == "hint":
        m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgKMG])", str(raw).strip())
        if m and m.group(2).islower():                      # decimal multipliers, decimals allowed
            return int(float(m.group(1)) * 1000 ** "kmg".index(m.group(2)) * 1000)
        if m and "." not in m.group(1):                      # binary multipliers, whole numbers only
            return int(m.group(1)) * 1024 ** ("KMG".index(m.group(2)) + 1)
    try:
        return int(raw) if spec.kind in ("int", "hint") else float(raw)
    except (TypeError, ValueError):
        kind = "an integer" if spec.kind in ("int", "hint") else "a number"
        extra = (" (a suffix such as 32k is not read here)" if spec.kind == "int" else
                 " (or one with a suffix: 32k = 32,000, 32K = 32,768)" if spec.kind == "hint" else "")
        raise ValueError(f"{spec.name}={raw!r} ({where}) is not allowed; give {kind}{extra}") from None


def parse_command(text: str) -> EngineCommand:
    """Read one engine command line (continuation backslashes, a leading ``$``, ``NAME=value``
    assignments, ``docker run … vllm/vllm-openai:TAG …`` and comment lines allowed).

    Recognised: ``vllm serve MODEL``, ``python -m vllm.entrypoints.openai.api_server --model M``,
    a ``vllm/vllm-openai`` image's arguments, ``python -m sglang.launch_server --model-path M``
    and ``sglang serve``.  The flags of :data:`ENGINE_FLAGS` are converted to their kinds; the others are
    kept as given in ``other``.

    Raises:
        ValueError: no engine invocation in the text (the message says what it expected); a
            quoted string left open; a flag of :data:`ENGINE_FLAGS` with a value of the wrong kind.
    """
    if not isinstance(text, str):
        raise ValueError(f"command={text!r} is not allowed; give the command line as text")
    lines = [ln.strip() for ln in text.replace("\\\r\n", " ").replace("\\\n", " ").splitlines()]
    joined = " ".join(ln[1:].strip() if ln.startswith("$") else ln for ln in lines if ln and not ln.startswith("#"))
    try:
        tokens = shlex.split(joined, comments=False, posix=True)
    except ValueError as exc:
        raise ValueError(f"command line not read: {exc} (a quote left open?)") from None
    start = _engine_start(tokens)
    if start is None:
        raise ValueError("no engine command found: expected 'vllm serve MODEL …', 'python -m "
                         "vllm.entrypoints.openai.api_server --model MODEL …' or 'python -m "
                         "sglang.launch_server --model-path MODEL …'")
    engine, i, version = start
    env = {}
    for t in tokens[:i]:
        if _ENV.match(t):
            k, v = t.split("=", 1)
            env[k] = v
    cmd = EngineCommand(engine, joined, None, env=env, version=version)
    args = tokens[i:]
    if engine == "vllm" and args and not args[0].startswith("-"):
        cmd.model = args[0]
        args = args[1:]
    j = 0
    while j < len(args):
        tok = args[j]
        if not tok.startswith("-") or tok == "-":
            if engine == "vllm" and cmd.model is None and "model" not in cmd.settings:
                cmd.model = tok         # vllm serve's MODEL after its flags
            j += 1
            continue
        name, eq, val = tok.partition("=")
        key = name if engine == "sglang" or not name.startswith("--") else "--" + name[2:].replace("_", "-")
        spec = _BY_FLAG.get((engine, key))
        negated = _NEGATED.get((engine, key))
        takes_value = spec is not None and spec.kind != "bool"
        if eq:
            raw = val
        elif (takes_value or (spec is None and negated is None and key not in ENGINE_SWITCHES)) and j + 1 < len(args) \
                and not (args[j + 1].startswith("-") and not re.fullmatch(r"-?[0-9.]+", args[j + 1])):
            raw = args[j + 1]
            j += 1
        else:
            raw = True
        j += 1
        if negated is not None:
            cmd.settings[negated.name] = False
        elif spec is None:
            cmd.other[key.lstrip("-").replace("-", "_")] = raw
        elif takes_value and raw is True:
            raise ValueError(f"{spec.name}: the flag {name} has no value")
        else:
            cmd.settings[spec.name] = _convert(spec, raw, name)
    for key in ("model", "model_path"):
        if key in cmd.settings and cmd.model is None:
            cmd.model = cmd.settings[key]
    return cmd


def find_command(text: str) -> EngineCommand | None:
    """The first engine command line in ``text`` (a pasted log may quote it, also after a
    ``#``), or None.  A continued command (lines ending in ``\\``) is read whole."""
    if not isinstance(text, str):
        return None
    lines = text.splitlines()
    for k, line in enumerate(lines):
        s = line.strip().lstrip("#$ ").strip()
        if not re.search(r"(?:^|[\s/])(?:vllm serve|sglang serve)\b|-m\s+(?:vllm\.entrypoints|sglang\.launch_server)"
                         r"|vllm/vllm-openai", s):
            continue
        if "(" in s[:1] and "pid=" in s[:40] or "] " in s[:40]:   # a log line mentioning a command, not one
            continue
        m = re.search(r"(?:[\w=,.:/-]+=\S*\s+)*(?:\S*python[\d.]*\s+-m\s|\S*vllm serve|\S*sglang serve|docker run)", s)
        if m:
            s = s[m.start():]                         # a caption before the command: '# vLLM (vllm serve …)'
        if s.startswith("(") and s.endswith(")"):
            s = s[1:-1]
        elif s.endswith(")") and s.count(")") > s.count("("):
            s = s[:-1]
        block = [s]
        while block[-1].endswith("\\") and k + 1 < len(lines):
            k += 1
            block.append(lines[k].strip())
        try:
            return parse_command("\n".join(block))
        except ValueError:
            continue
    return None


_V = re.compile(r"v?(\d+)\.(\d+)")


def _version_tuple(version) -> tuple | None:
    m = _V.match(str(version)) if version else None
    return (int(m.group(1)), int(m.group(2))) if m else None


def engine_defaults(engine: str, version=None, *, gpu_memory_gib: float | None = None,
                    gpu_name: str | None = None, tp: int = 1, max_model_len: int | None = None) -> dict:
    """The engine's default for each setting a command may leave out (name → :class:`Setting`).

    ``version`` (``"0.10.1"``; None: the newest behaviour modelled), ``gpu_memory_gib`` (the
    device's total, GiB) and ``gpu_name`` decide vLLM V1's batch defaults; ``tp`` SGLang's
    memory fraction; ``max_model_len`` vLLM V0's batched tokens.  A default that needs what is
    not given is left out, never guessed.

    Raises:
        ValueError: an unknown engine; ``tp`` not a positive integer; a ``version`` that is not
            ``MAJOR.MINOR[.PATCH]``; ``gpu_memory_gib`` not a positive number; ``gpu_name`` not
            text; ``max_model_len`` not a positive integer (each may be None).
    """
    if not isinstance(engine, str) or engine not in ("vllm", "sglang"):
        raise ValueError(f"engine={engine!r} is not allowed; allowed: vllm, sglang")
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise ValueError(f"tp={tp!r} is not allowed; give a positive integer")
    if version is not None and (not isinstance(version, str) or _version_tuple(version) is None):
        raise ValueError(f"version={version!r} is not allowed; give MAJOR.MINOR[.PATCH] such as 0.10.1, or None")
    if gpu_memory_gib is not None and (isinstance(gpu_memory_gib, bool) or not isinstance(gpu_memory_gib, (int, float))
                                       or not 0 < gpu_memory_gib < float("inf")):
        raise ValueError(f"gpu_memory_gib={gpu_memory_gib!r} is not allowed; give the GPU's total in GiB (> 0), or None")
    if gpu_name is not None and not isinstance(gpu_name, str):
        raise ValueError(f"gpu_name={gpu_name!r} is not allowed; give the device's name as text, or None")
    if max_model_len is not None and (isinstance(max_model_len, bool) or not isinstance(max_model_len, int)
                                      or max_model_len < 1):
        raise ValueError(f"max_model_len={max_model_len!r} is not allowed; give a positive integer, or None")
    v = _version_tuple(version)
    out = {}
    args = "vLLM's engine arguments (EngineArgs, vllm/engine/arg_utils.py)"
    if engine == "vllm":
        out["tensor_parallel_size"] = Setting(1, "default", args)
        out["pipeline_parallel_size"] = Setting(1, "default", args)
        out["data_parallel_size"] = Setting(1, "default", args)
        out["enable_expert_parallel"] = Setting(False, "default", args)
        out["gpu_memory_utilization"] = Setting(0.9, "default", args + ": 0.9")
        out["kv_cache_dtype"] = Setting("auto", "default", args + ": auto, the model's dtype")
        out["enforce_eager"] = Setting(False, "default", args + ": CUDA graphs on")
        out["block_size"] = Setting(16, "default", args + ": 16 tokens per block on CUDA")
        out["max_model_len"] = Setting(max_model_len, "default", "the model's max_position_embeddings")
        v1 = v is None or v >= (0, 8)
        if v1:
            if gpu_memory_gib is not None:
                big = gpu_memory_gib >= 70 and "a100" not in (gpu_name or "").lower()
                rule = ("EngineArgs.get_batch_defaults (vllm serve): 8,192 tokens and 1,024 sequences on a GPU of "
                        "70 GiB or more that is not an A100 (vllm-project/vllm PR #17885), else 2,048 and 256")
                out["max_num_batched_tokens"] = Setting(8192 if big else 2048, "default", rule)
                out["max_num_seqs"] = Setting(1024 if big else 256, "default", rule)
        else:
            out["max_num_seqs"] = Setting(256, "default", args + ": 256")
            if max_model_len is not None:
                out["max_num_batched_tokens"] = Setting(
                    max(max_model_len, 2048), "default",
                    "V0 SchedulerConfig without chunked prefill: max(max_model_len, 2048)")
        return out
    src = ("ServerArgs.__post_init__ (python/sglang/srt/server_args.py, 0.3-0.4): mem_fraction_static 0.88, "
           "0.87, 0.85, 0.81, 0.79 from TP 1, 2, 4, 8, 16")
    if v is None or v < (0, 5):
        frac = 0.79 if tp >= 16 else 0.81 if tp >= 8 else 0.85 if tp >= 4 else 0.87 if tp >= 2 else 0.88
        out["mem_fraction_static"] = Setting(frac, "default", src)
        if gpu_memory_gib is not None:
            small = gpu_memory_gib * 2**30 / 2**20 < 25_000
            out["chunked_prefill_size"] = Setting(2048 if small else 8192, "default",
                                                  "ServerArgs.__post_init__ (0.4): 2,048 on a GPU under 25,000 MB, else 8,192")
    out["tp_size"] = Setting(1, "default", "SGLang's ServerArgs: 1")
    out["dp_size"] = Setting(1, "default", "SGLang's ServerArgs: 1")
    out["ep_size"] = Setting(1, "default", "SGLang's ServerArgs: 1")
    out["kv_cache_dtype"] = Setting("auto", "default", "SGLang's ServerArgs: auto, the model's dtype")
    out["disable_cuda_graph"] = Setting(False, "default", "SGLang's ServerArgs: CUDA graphs on")
    out["context_length"] = Setting(max_model_len, "default", "the model's max_position_embeddings")
    return out
