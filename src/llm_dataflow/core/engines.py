"""What a serving engine takes from a GPU before its KV cache, and how it lays the cache out,
per engine and version — vLLM (V0 and V1) and SGLang — each default figure with the public log
it was read from and each rule with the source it follows.  Standard library only.

Engine and version are an explicit parameter (:class:`EngineSpec`, :func:`engine_spec`):
what changes between versions, and from which version (:meth:`EngineSpec.rules`):

* **vLLM V0** (before 0.8.0, where V1 became the default engine): a model that mixes sliding and
  full layers (Gemma 2/3, gpt-oss) gets every layer's blocks for the whole context (V0's
  ``cache_config.sliding_window`` is set only when every layer slides); CUDA graphs are
  captured after the KV cache is sized, out of the ``1 − gpu_memory_utilization`` share.
* **vLLM V1 with the hybrid KV-cache manager** (from 0.9: the v0.9.0 API reference of
  ``vllm/v1/kv_cache_interface.py`` has ``SlidingWindowSpec`` and says sliding layers count as
  full "when hybrid allocator is disabled"; the v0.8.3 release notes add "native sliding window
  attention with the hybrid memory allocator"): each layer group's blocks follow its own rule
  (:func:`kv_layout`).  Read at vllm-project/vllm 001cabc1 (``vllm/v1/core/kv_cache_utils.py``,
  ``vllm/v1/kv_cache_interface.py``).
* **vLLM from 0.21**: CUDA graph memory is profiled before the KV cache is sized and subtracted
  from the budget (the 0.21+ log: "CUDA graph memory profiling is enabled (default since
  v0.21.0) ... To disable, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0"; gpustack/runner PR
  #251, vLLM 0.27.1; noonghunna/club-3090 issue #127).
* **SGLang** (``profile_max_num_token``; sglang v0.5.8 ``model_runner_kv_cache_mixin.py``)::

      rest_memory = available_gpu_memory - total_gpu_memory * (1 - mem_fraction_static)

  with ``total_gpu_memory`` the free memory before the weights load (after the CUDA context and
  torch.distributed are set up) and ``available_gpu_memory`` the free memory after: the pool is
  ``mem_fraction_static × (total − what was allocated before loading) − weights``
  (:func:`sglang_preload_bytes`).  A sliding-window hybrid gets two pools in the ratio
  ``swa_full_tokens_ratio`` (``set_num_token_hybrid``, ``model_runner.py``).

All figures are estimates built on logged numbers, not bounds: the memory outside torch has been
logged from 0.16 to 7.16 GiB per GPU, by version and TP degree (:data:`NON_TORCH_LOGS`).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from .hardware import as_hardware
from .units import GiB, require_positive

__all__ = ["ENGINES", "DEFAULT_ENGINE_VERSIONS", "EngineSpec", "engine_spec", "Figure", "NON_TORCH_LOGS",
           "NON_TORCH_BYTES_PCIE", "non_torch_estimate", "SGLANG_CUDA_CONTEXT_BYTES", "SGLANG_DIST_INIT_BYTES",
           "sglang_preload_bytes", "VLLM_CUDA_GRAPH_BYTES", "cuda_graph_estimate", "SGLANG_SWA_FULL_TOKENS_RATIO",
           "GPU_MEMORY_UTILIZATION", "VLLM_MAX_NUM_BATCHED_TOKENS", "VLLM_MAX_NUM_SEQS", "VLLM_BLOCK_SIZE",
           "KVLayout", "kv_layout", "ESTIMATE_NOTE"]

#: The engines whose memory conventions are modelled.
ENGINES = ("vllm", "sglang")
#: The version assumed when none is given: vLLM 0.21, the first release that profiles CUDA graph
#: memory before sizing the KV cache (later logs, 0.27.1, print the same), and SGLang 0.5
#: (``profile_max_num_token`` as in v0.5.8).
DEFAULT_ENGINE_VERSIONS = {"vllm": "0.21", "sglang": "0.5"}

#: vLLM's default ``gpu_memory_utilization`` (vLLM docs, "Engine Arguments", v0.6.4: "If
#: unspecified, will use the default value of 0.9").
GPU_MEMORY_UTILIZATION = 0.9
#: Tokens of vLLM's profiling forward: 8,192 is ``vllm serve``'s V1 default on GPUs of 70 GiB or
#: more (``vllm/engine/arg_utils.py``, ``get_batch_defaults``) and V0's ``max(max_model_len,
#: 2048)`` for an 8K-context model.  The engine's own value is what to pass.
VLLM_MAX_NUM_BATCHED_TOKENS = 8192
#: vLLM's default ``max_num_seqs`` (256): its profiling forward computes logits for that many rows.
VLLM_MAX_NUM_SEQS = 256
#: vLLM's default KV block size (tokens per block, CUDA).
VLLM_BLOCK_SIZE = 16
#: SGLang's default ``swa_full_tokens_ratio``: the sliding layers' pool holds this share of the
#: full layers' tokens (``server_args.py``; ``set_num_token_hybrid`` solves
#: ``swa × n_swa + full × n_full = tokens × L`` with ``swa = ratio × full``).
SGLANG_SWA_FULL_TOKENS_RATIO = 0.8
#: One line for every printed KV room: what kind of number it is.
ESTIMATE_NOTE = ("an estimate built on logged figures, not a bound: the memory outside torch has been logged from "
                 "0.16 to 7.16 GiB per GPU by version and TP degree, CUDA graph pools from 0.13 to 1.85 GiB; most "
                 "logs the tests check land within 10 %, a few far off for a cause not modelled (an engine of 2023, "
                 "MLA weight absorption, a KV connector): check your engine's startup log")

_PR10511 = "vllm-project/vllm PR #10511 (comment of 2024-12-13: vllm serve meta-llama/Meta-Llama-3-8B, H100 80GB)"
_R1 = ("a published deployment note of 2025-03-15 (vLLM 0.7.3, DeepSeek-R1 FP8 on 8 x H200; quoted in "
       "tests/test_serving.py)")
_LLMD = ("llm-d-incubation/llm-d-planner docs/accuracy/vllm-v0.19.0-accuracy-report.md at 2d557dca "
         "(vLLM 0.19.0, H100-80GB, 'Non-torch Constants' table: observed means)")
#: Memory outside torch's allocator per rank, as engines logged it (GiB): ``(era, interconnect,
#: tp, GiB, what ran, source)``.  ``era`` is ``"vllm-v0"`` (before 0.8) or ``"vllm-v1"``;
#: ``interconnect`` ``"nvlink"`` or ``"pcie"`` (a part without NVLink).  V1 counts the CUDA
#: context, NCCL and custom all-reduce buffers and what the profiling forward allocates outside
#: torch.
NON_TORCH_LOGS = (
    ("vllm-v0", "nvlink", 1, 1.79, "H100 80GB, vLLM 0.6.4, Meta-Llama-3-8B", _PR10511),
    ("vllm-v0", "nvlink", 2, 3.58, "H100 80GB, vLLM 0.6.4, Meta-Llama-3-8B -tp 2", _PR10511),
    ("vllm-v0", "nvlink", 8, 7.16, "H200 x 8, vLLM 0.7.3, DeepSeek-R1 FP8", _R1),
    ("vllm-v1", "nvlink", 1, 0.27, "H100 80GB, vLLM 0.19.0, mean of the TP 1 runs", _LLMD),
    ("vllm-v1", "nvlink", 2, 2.08, "H100 80GB, vLLM 0.19.0, mean of the TP 2 runs", _LLMD),
    ("vllm-v1", "nvlink", 4, 2.17, "H100 80GB, vLLM 0.19.0, mean of the TP 4 runs", _LLMD),
    ("vllm-v0", "pcie", 1, 0.16, "one L40S", "vllm-project/vllm issue #15196"),
    ("vllm-v0", "pcie", 1, 0.35, "one RTX 3090, Llama-3.1-8B-Instruct", "vllm-project/vllm issue #10517"),
    ("vllm-v0", "pcie", 1, 0.33, "one RTX 5090 (of a two-GPU run)", "vllm-project/vllm issue #14452"),
    ("vllm-v0", "pcie", 2, 0.25, "RTX 4090 x 2, DeepSeek-R1-Distill-Qwen-14B", "vllm-project/vllm issue #13061"),
    ("vllm-v0", "pcie", 2, 0.20, "2 x 23.58 GiB cards", "vllm-project/vllm PR #14447"),
    ("vllm-v0", "pcie", 8, 0.36, "L40S x 8, vLLM 0.6.6.post1 (no custom all-reduce beyond two PCIe GPUs)",
     "gnosia93/vlm-distillation's EC2 notes"),
)
#: Parts without NVLink (a preset whose ``nvlink`` is ``"none"``; a custom spec with
#: ``nvlink=none``): the largest PCIe figure of :data:`NON_TORCH_LOGS`, whatever the TP degree
#: (they log 0.16-0.36 GiB from TP 1 to TP 8: vLLM runs no custom all-reduce there).
NON_TORCH_BYTES_PCIE = 0.36 * GiB
#: SGLang: the CUDA context and torch's state before ``init_torch_distributed`` (GiB): an H200
#: reports 139.81 GiB, and sglang PR #11716's log (8 x H200, 2025-10-16) shows 137.29 GiB free
#: once torch.distributed (2.01 GiB) is set up: 139.81 − 137.29 − 2.01 = 0.51.
SGLANG_CUDA_CONTEXT_BYTES = 0.51 * GiB
#: SGLang's "Init torch distributed ends. mem usage=" per rank (NCCL, custom all-reduce): the
#: largest of sglang PR #11716's eight ranks (1.77-2.01 GB, SGLang's GB being GiB) at TP 8.  TP 1
#: sets up no peer: 0 (no log found; an estimate).
SGLANG_DIST_INIT_BYTES = 2.01 * GiB
#: vLLM's CUDA graph pool per GPU with the default capture sizes: the mean the llm-d-planner
#: sweep of vLLM 0.19.0 logged on H100s (0.51-1.85 GiB, mean 1.04; ``_LLMD``'s "CUDA Graph
#: Memory").  Smaller engines log less (0.13 GiB, a 1 GiB model on an H100, generative-computing/
#: mellea PR #416; 0.17-0.36 GiB on RTX 3090s, club-3090 issue #127 and gpustack/runner PR #251).
VLLM_CUDA_GRAPH_BYTES = 1.04 * GiB


@dataclass(frozen=True)
class Figure:
    """A modelled figure with where it comes from.

    Attributes:
        bytes: the figure (B).
        source: the logs or rule it comes from, in words.
        estimate: True unless the user gave it.
    """

    bytes: float
    source: str
    estimate: bool = True


@dataclass(frozen=True)
class EngineSpec:
    """A serving engine and its version.

    Attributes:
        name: ``"vllm"`` or ``"sglang"``.
        version: the version as a tuple of integers (``(0, 21)``, ``(0, 7, 3)``).
    """

    name: str
    version: tuple

    @property
    def label(self) -> str:
        """``"vLLM 0.21"``, ``"SGLang 0.5"``."""
        return f"{'vLLM' if self.name == 'vllm' else 'SGLang'} {'.'.join(map(str, self.version))}"

    @property
    def vllm_v0(self) -> bool:
        """vLLM before 0.8.0 (the V0 engine)."""
        return self.name == "vllm" and self.version < (0, 8)

    @property
    def hybrid_kv(self) -> bool:
        """Whether sliding and chunked layers keep only their own blocks in a model that mixes them
        with full layers: vLLM V1 from 0.9 (the hybrid KV-cache manager), SGLang (its SWA pool)."""
        return self.name == "sglang" or self.version >= (0, 9)

    @property
    def graphs_in_budget(self) -> bool:
        """vLLM from 0.21: CUDA graph memory is profiled and subtracted before the KV cache."""
        return self.name == "vllm" and self.version >= (0, 21)

    def rules(self) -> list:
        """What this engine version does, one line each (``plan --json``'s ``engine_rules``)."""
        if self.name == "sglang":
            return ["KV pool = mem_fraction_static x (total - CUDA context - torch.distributed buffers) - weights "
                    "(profile_max_num_token); activations and CUDA graphs live in the rest",
                    f"sliding-window hybrids: two pools, the sliding one swa_full_tokens_ratio = "
                    f"{SGLANG_SWA_FULL_TOKENS_RATIO} of the full one (set_num_token_hybrid)"]
        out = [("V0: " if self.vllm_v0 else "V1: ") + "KV room = gpu_memory_utilization x total - weights - "
               "activation peak of a profiling forward - memory outside torch"]
        out.append("hybrid KV-cache manager: each layer group holds its own blocks (sliding: window - 1 + "
                   "max_num_batched_tokens tokens + 1 block; chunked: chunk + max_num_batched_tokens)"
                   if self.hybrid_kv else
                   "no hybrid KV-cache manager: a model that mixes sliding and full layers holds the whole context "
                   "in every layer")
        out.append("CUDA graph memory profiled before the KV cache and subtracted from the budget"
                   if self.graphs_in_budget else
                   "CUDA graphs captured after the KV cache, out of the 1 - gpu_memory_utilization share")
        return out


_VERSION = re.compile(r"v?(\d{1,3})\.(\d{1,3})(?:\.(\d{1,4}))?(?:[.+\-_a-z0-9]*)?")


def engine_spec(engine="vllm", engine_version=None) -> EngineSpec:
    """The :class:`EngineSpec` of ``engine`` (``"vllm"`` or ``"sglang"``, or an EngineSpec returned
    as given) at ``engine_version`` (``"0.21"``, ``"v0.7.3"``, ``"0.10.1.post1"``; default
    :data:`DEFAULT_ENGINE_VERSIONS`).

    Raises:
        ValueError: an unknown engine, or a version that is not ``MAJOR.MINOR[.PATCH]``.
    """
    if isinstance(engine, EngineSpec):
        return engine
    if not isinstance(engine, str) or engine.lower() not in ENGINES:
        raise ValueError(f"engine={engine!r} is not allowed; allowed: {', '.join(ENGINES)}")
    engine = engine.lower()
    text = DEFAULT_ENGINE_VERSIONS[engine] if engine_version is None else engine_version
    m = _VERSION.fullmatch(text.strip().lower()) if isinstance(text, str) else None
    if m is None:
        raise ValueError(f"engine_version={engine_version!r} is not allowed; give MAJOR.MINOR[.PATCH], e.g. 0.21 "
                         "or 0.7.3")
    return EngineSpec(engine, tuple(int(g) for g in m.groups() if g is not None))


def _interpolate(points: dict, tp: int) -> float:
    """Linear in log2(tp) between the logged degrees, the end figure beyond them."""
    xs = sorted(points)
    if tp <= xs[0]:
        return points[xs[0]]
    if tp >= xs[-1]:
        return points[xs[-1]]
    for lo, hi in zip(xs, xs[1:]):
        if lo <= tp <= hi:
            t = (math.log2(tp) - math.log2(lo)) / (math.log2(hi) - math.log2(lo))
            return points[lo] + t * (points[hi] - points[lo])
    raise AssertionError("unreachable")


def non_torch_estimate(tp: int, hw, engine=None) -> Figure:
    """Memory outside torch's allocator on one vLLM rank at TP degree ``tp`` on ``hw`` (B), from
    :data:`NON_TORCH_LOGS`: on a part without NVLink (``hw.nvlink == "none"``) the largest PCIe
    figure, :data:`NON_TORCH_BYTES_PCIE`; otherwise the logs of the engine's era (V0 before 0.8,
    else V1), linear in log2(tp) between the logged degrees and the end figure beyond them (V0:
    1.79, 3.58 and 7.16 GiB at TP 1, 2, 8, i.e. ``1.79 × (1 + log2 tp)``; V1: 0.27, 2.08, 2.17 GiB
    at TP 1, 2, 4, and 2.17 beyond: no V1 log at TP 8 was found).  A custom GPU that does not say
    ``nvlink=none`` is counted as NVLink.

    Raises:
        ValueError: ``tp`` not a positive integer; ``hw`` neither a preset name nor a
            HardwareSpec; an unknown engine.
    """
    require_positive("tp", tp)
    hw = as_hardware(hw)
    spec = engine_spec("vllm" if engine is None else engine)
    if hw.nvlink == "none":
        return Figure(NON_TORCH_BYTES_PCIE, "the largest PCIe figure logged (0.16-0.36 GiB at TP 1-8, "
                                            "vLLM issues #15196, #10517, #13061, #14452, PR #14447)")
    era = "vllm-v0" if spec.vllm_v0 else "vllm-v1"
    logs = [r for r in NON_TORCH_LOGS if r[0] == era and r[1] == "nvlink"]
    points = {r[2]: r[3] for r in logs}
    gib = _interpolate(points, tp)
    at = ", ".join(f"TP {r[2]} {r[3]:.2f}" for r in logs)
    where = "logged" if tp in points else ("interpolated" if min(points) < tp < max(points) else
                                           f"beyond the logs (the TP {max(points)} figure)")
    return Figure(gib * GiB, f"{where}: {era} logs {at} GiB ({'; '.join(sorted({r[5] for r in logs}))})")


def sglang_preload_bytes(tp: int) -> Figure:
    """What SGLang finds allocated before its weights load, per rank (B): the CUDA context
    (:data:`SGLANG_CUDA_CONTEXT_BYTES`) and, at ``tp > 1``, torch.distributed's buffers
    (:data:`SGLANG_DIST_INIT_BYTES`).  The pool loses ``mem_fraction_static ×`` this.

    Raises:
        ValueError: ``tp`` not a positive integer.
    """
    require_positive("tp", tp)
    dist = SGLANG_DIST_INIT_BYTES if tp > 1 else 0.0
    return Figure(SGLANG_CUDA_CONTEXT_BYTES + dist,
                  "CUDA context 0.51 GiB" + (" + torch.distributed 2.01 GiB (sglang PR #11716, 8 x H200)"
                                             if tp > 1 else " (sglang PR #11716; TP 1 sets up no peer)"))


def cuda_graph_estimate(engine=None, *, enforce_eager: bool = False, given: float | None = None) -> Figure:
    """vLLM's CUDA graph pool on one GPU (B): 0 with ``enforce_eager``, ``given`` (B) when the
    user gives it, else :data:`VLLM_CUDA_GRAPH_BYTES`.  SGLang keeps its graphs in the
    ``1 − mem_fraction_static`` share: 0 here.

    Raises:
        ValueError: ``enforce_eager`` not a bool; ``given`` negative or not finite; an unknown engine.
    """
    spec = engine_spec("vllm" if engine is None else engine)
    if not isinstance(enforce_eager, bool):
        raise ValueError(f"enforce_eager={enforce_eager!r} is not allowed; it must be True or False")
    if given is not None and (isinstance(given, bool) or not isinstance(given, (int, float))
                              or not 0 <= given < math.inf):
        raise ValueError(f"cuda_graph_bytes={given!r} is not allowed; allowed: a finite number of bytes >= 0")
    if enforce_eager:
        return Figure(0.0, "--enforce-eager: no CUDA graphs", estimate=False)
    if spec.name == "sglang":
        return Figure(0.0, "SGLang keeps CUDA graphs in the 1 - mem_fraction_static share", estimate=False)
    if given is not None:
        return Figure(float(given), "given", estimate=False)
    return Figure(VLLM_CUDA_GRAPH_BYTES, "the mean graph pool of vLLM 0.19.0's H100 sweep, 1.04 GiB "
                                         "(0.51-1.85; llm-d-planner accuracy report at 2d557dca)")


# --- the KV cache's layout ------------------------------------------------------------------------
@dataclass(frozen=True)
class KVLayout:
    """How one GPU's KV room holds sequences of ``context`` tokens under an engine's rule.

    Attributes:
        rule: the engine's rule in words.
        unit_bytes: bytes of one allocation unit (vLLM: a block of every layer of one group, i.e.
            ``page × group size``; SGLang: one token in every layer).
        units: whole units the room holds.
        tokens: the room in tokens as the engine logs it (vLLM "GPU KV cache size"; SGLang
            "#tokens", the full layers' pool for a sliding-window hybrid).
        units_per_sequence: units one sequence of ``context`` tokens takes at most (0 at context 0).
        groups: one dict per kind of layer on this GPU: ``kind``, ``layers``,
            ``tokens_per_sequence`` (tokens each of its layers holds for one sequence, as
            allocated), ``bytes_per_sequence`` (those tokens' bytes over its layers).
        sequences_cap: for SGLang's two pools, the sequences the sliding pool admits (else None).
    """

    rule: str
    unit_bytes: float
    units: int
    tokens: int
    units_per_sequence: float
    groups: tuple
    sequences_cap: float | None = None

    @property
    def max_concurrency(self) -> float | None:
        """Sequences of ``context`` tokens the room holds at once (None at context 0)."""
        if not self.units_per_sequence:
            return None
        n = self.units / self.units_per_sequence
        return n if self.sequences_cap is None else min(n, self.sequences_cap)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def kv_layout(kinds, room: float, context: int, engine=None, *, block_size: int = VLLM_BLOCK_SIZE,
              max_num_batched_tokens: int = VLLM_MAX_NUM_BATCHED_TOKENS, state_per_sequence: float = 0.0,
              swa_full_tokens_ratio: float = SGLANG_SWA_FULL_TOKENS_RATIO) -> KVLayout:
    """The KV room ``room`` (B, one GPU) laid out as ``engine`` lays it out.

    ``kinds``: ``[(kind, layers, bytes_per_token_per_layer, window)]`` for the layers on this GPU
    (``kind`` a ``ModelConfig.layer_type``; ``window`` the sliding window or the chunk, else None;
    ``bytes_per_token_per_layer`` 0 for linear-attention layers, whose fixed state
    ``state_per_sequence`` (B) every sequence holds beside its KV).

    vLLM (V1's hybrid KV-cache manager, ``kv_cache_utils.py``): the layers are grouped by kind
    in groups of ``g`` layers (the fewest layers of a kind, or the most when no kind has 1.5 times
    as many: ``_get_kv_cache_groups_uniform_page_size``; one group of all layers when every
    layer is alike); the room holds ``room // (page × g)`` blocks (a page is ``block_size``
    tokens of one layer; a smaller page is stretched to the largest by more tokens per block);
    the log's "GPU KV cache size" is ``blocks // groups × block_size``; one sequence of ``c``
    tokens takes, per group, ``cdiv(c, bs)`` blocks (full), ``cdiv(min(W − 1 + max_num_batched_tokens,
    c), bs) + 1`` (sliding window W: ``SlidingWindowSpec.max_memory_usage_bytes``) or
    ``cdiv(min(C + max_num_batched_tokens, c), bs)`` (chunk C), and "Maximum concurrency" is the
    blocks over that sum (``get_max_concurrency_for_kv_cache_config``).  Without the hybrid
    manager (V0 before 0.8, V1 0.8) a model that mixes kinds holds the whole context in every
    layer; one whose every layer slides keeps its window.  A linear-attention state is charged
    as its bytes over a unit (vLLM pads it and the attention pages to one page size: approximate).

    vLLM's "GPU KV cache size" is read here as ``blocks // groups × block_size`` (001cabc1); later
    versions print ``max_concurrency × max_model_len`` instead (vllm-project/vllm issue #51041
    quotes ``_report_kv_cache_config``), which differs where a group's blocks do not grow with the
    context.

    SGLang: one token in every layer is the unit (``profile_max_num_token``'s ``cell_size``);
    a sliding-window hybrid splits ``tokens × L`` token-layers into a full pool of ``full`` and
    a sliding pool of ``ratio × full`` tokens per layer (``set_num_token_hybrid``); a sequence of
    ``c`` tokens takes ``c`` from the full pool and, as an estimate, ``min(c, W)`` from the
    sliding one (SGLang frees a sliding layer's tokens outside the window).  Chunked layers are
    counted as full (an estimate: SGLang sizes Llama 4's pools by its own ratio).

    Raises:
        ValueError: ``room`` negative or not finite; ``context``, ``block_size``,
            ``max_num_batched_tokens`` not valid counts; an unknown engine; no layer kinds.
    """
    spec = engine_spec("vllm" if engine is None else engine)
    if isinstance(room, bool) or not isinstance(room, (int, float)) or not 0 <= room < math.inf:
        raise ValueError(f"room={room!r} is not allowed; allowed: a finite number of bytes >= 0")
    require_positive("block_size", block_size)
    require_positive("max_num_batched_tokens", max_num_batched_tokens)
    if isinstance(context, bool) or not isinstance(context, int) or context < 0:
        raise ValueError(f"context={context!r} is not allowed; allowed: an integer >= 0")
    if not isinstance(kinds, (list, tuple)) or not all(
            isinstance(x, tuple) and len(x) == 4 and isinstance(x[0], str) and isinstance(x[1], int)
            and isinstance(x[2], (int, float)) and x[1] >= 0 and x[2] >= 0 and (x[3] is None or isinstance(x[3], int))
            for x in kinds):
        raise ValueError(f"kinds={kinds!r} is not allowed; give [(kind, layers, bytes per token per layer, window)]")
    if (isinstance(state_per_sequence, bool) or not isinstance(state_per_sequence, (int, float))
            or not 0 <= state_per_sequence < math.inf):
        raise ValueError(f"state_per_sequence={state_per_sequence!r} is not allowed; allowed: a finite number >= 0")
    if isinstance(swa_full_tokens_ratio, bool) or not isinstance(swa_full_tokens_ratio, (int, float)) or not (
            0 < swa_full_tokens_ratio < math.inf):
        raise ValueError(f"swa_full_tokens_ratio={swa_full_tokens_ratio!r} is not allowed; allowed: a number > 0")
    attn = [(k, n, b, w) for k, n, b, w in kinds if k != "linear_attention" and n and b]
    if any(k in ("sliding_attention", "chunked_attention") and (w is None or w < 1) for k, _, _, w in attn):
        raise ValueError(f"kinds={kinds!r} is not allowed; a sliding or chunked layer needs its window (>= 1)")
    if not attn:
        raise ValueError("kinds has no attention layer with KV bytes; a model without a KV cache is not planned here")
    mixed = len({(k, w) for k, _, _, w in attn}) > 1
    if not spec.hybrid_kv and mixed:    # every attention layer holds the whole context
        attn = [("full_attention", sum(n for _, n, _, _ in attn), max(b for _, _, b, _ in attn), None)]
        mixed = False
    if spec.name == "sglang":
        return _sglang_layout(attn, room, context, state_per_sequence, swa_full_tokens_ratio)
    page = max(b for _, _, b, _ in attn) * block_size
    counts = [n for _, n, _, _ in attn]
    g = sum(counts) if not mixed else min(counts)
    if mixed and max(counts) < 1.5 * g:
        g = max(counts)
    unit = page * g
    units = int(room // unit)
    n_groups = sum(_cdiv(n, g) for n in counts)
    per_seq, groups, bss = 0.0, [], []
    for kind, n, b, w in attn:
        bs = int(block_size * round(page / (b * block_size)))     # a smaller page holds more tokens
        bss.append(bs)
        if not context:
            blocks = 0
        elif kind == "sliding_attention":
            blocks = _cdiv(min(w - 1 + max_num_batched_tokens, context), bs) + 1
        elif kind == "chunked_attention":
            blocks = _cdiv(min(w + max_num_batched_tokens, context), bs)
        else:
            blocks = _cdiv(context, bs)
        per_seq += _cdiv(n, g) * blocks
        groups.append({"kind": kind, "layers": n, "tokens_per_sequence": blocks * bs,
                       "bytes_per_sequence": float(blocks * bs * b * n)})
    if state_per_sequence and context:
        per_seq += state_per_sequence / unit
        groups.append({"kind": "linear_attention", "layers": sum(n for k, n, _, _ in kinds if k == "linear_attention"),
                       "tokens_per_sequence": 0, "bytes_per_sequence": float(state_per_sequence)})
    rule = (f"{spec.label}: {n_groups} group{'s' * (n_groups > 1)} of {g} layers, blocks of {min(bss)} tokens"
            + ("" if spec.hybrid_kv or not any(k != "full_attention" for k, _, _, _ in kinds) else
               "; no hybrid KV-cache manager: every layer holds the whole context"))
    return KVLayout(rule, float(unit), units, units // n_groups * min(bss), per_seq, tuple(groups))


def _sglang_layout(attn, room, context, state, ratio) -> KVLayout:
    cell = sum(n * b for _, n, b, _ in attn)
    tokens = int(room // cell)
    swa = [(n, w) for k, n, _, w in attn if k == "sliding_attention"]
    full_layers = sum(n for k, n, _, _ in attn if k != "sliding_attention")
    groups = []
    if swa and full_layers and isinstance(ratio, (int, float)) and ratio > 0:
        n_swa, window = sum(n for n, _ in swa), max(w for _, w in swa)
        full = int(tokens * (n_swa + full_layers) / (ratio * n_swa + full_layers))
        swa_tokens = int(full * ratio)
        held = min(context, window)
        cap = swa_tokens / held if context else None
        for kind, n, b, _ in attn:
            t = held if kind == "sliding_attention" else context
            groups.append({"kind": kind, "layers": n, "tokens_per_sequence": t, "bytes_per_sequence": float(t * b * n)})
        per_seq = context / full * tokens if context else 0.0       # in units of `cell` over the full pool
        rule = (f"SGLang: full pool {full:,} tokens, sliding pool {swa_tokens:,} (swa_full_tokens_ratio {ratio:g})")
        per = per_seq + (state / cell if state and context else 0.0)
        return KVLayout(rule, float(cell), tokens, full, per, tuple(groups), cap)
    for kind, n, b, _ in attn:
        groups.append({"kind": kind, "layers": n, "tokens_per_sequence": context,
                       "bytes_per_sequence": float(context * b * n)})
    per = context + (state / cell if state and context else 0.0) if context else 0.0
    rule = "SGLang: one pool, a token in every layer" + (
        "; the sliding layers counted at the whole context (an estimate: no full layer to pool apart)" if swa else "")
    return KVLayout(rule, float(cell), tokens, tokens, per, tuple(groups))
