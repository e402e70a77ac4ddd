"""Chapter 00 — the map: memory tiers and the byte ledger of one request.

The ledger follows one request through a dense decoder on one GPU and counts, for each kind of
movement, how many bytes move and how often:

* host ↔ device (the PCIe link, both directions): weights once at load; prompt token IDs once;
  sampled IDs back each step;
* HBM → on-chip: weights read once per forward pass (prefill, then every decode step), the KV
  history read by attention;
* on-chip → HBM: new K/V written, the residual stream handed from layer to layer, logits (read
  back by the sampler).

Assumptions (stated so a reader can change them): attention reads each K/V byte once per
forward pass (an idealisation: FlashAttention-2 streams K/V once per block of queries, and
FlashAttention-1 reads K/V once but re-reads Q and O once per K/V block); the residual
stream between layers is written once and read once per layer (everything inside a layer fused,
which no engine fully achieves: QKV and MLP intermediates also round-trip memory), and those rows
are charged to HBM although a tensor this small (D elements per token) is usually read back from
L2 by the next kernel, so they are an upper bound on physical HBM traffic; logits are FP32
and only the last position's logits are produced in prefill; one GPU (no GPU↔GPU traffic).
Weights read per pass come from :func:`llm_dataflow.core.accounting.weight_bytes_read`: the embedding
table is gathered (only the rows of the pass's tokens), and an MoE reads only the experts its
tokens route to (uniform routing).
"""
from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass

import torch

from .core.accounting import kv_bytes, kv_read_over_steps, weight_bytes, weight_bytes_read
from .core.config import ModelConfig, as_model_config, model_config
from .core.fit import memory_fit
from .core.formats import as_precision_plan
from .core.hardware import HardwareSpec, hardware, link
from .core.kv import kv_token_bytes
from .core.units import GB, check_dtype, dtype_bits, no_overflow, require_positive
from .measure import device as default_device
from .memory import cache_levels, memory_mountain, past_last_level_bytes

__all__ = ["LedgerRow", "request_ledger", "movement_totals", "movement_times", "MemoryTier", "memory_tiers", "reader_tiers", "tier_probe_bytes", "physical_ram_bytes",
           "ledger_summary", "MOVEMENTS", "host_round_trip_seconds"]

#: The four kinds of movement of chapter 00.  ``"host↔device"`` is the PCIe link in both
#: directions: the weights and token IDs go in, the sampled token IDs come back.
MOVEMENTS = ("host↔device", "HBM→on-chip", "on-chip→HBM", "GPU↔GPU")


@dataclass(frozen=True)
class LedgerRow:
    """One line of the byte ledger.

    Attributes:
        phase: ``"load"``, ``"prefill"`` or ``"decode"``.
        movement: one of :data:`MOVEMENTS` (``"host↔device"`` is the PCIe link; ``item`` gives
            the direction, device → host for the sampled IDs).
        item: what moves.
        bytes_each: bytes per occurrence (for the decode steps' KV reads, the sum over all steps
            is given with ``count=1``, because each step reads one token more than the last; MoE expert reads are expected
            values, rounded to whole bytes).
        count: occurrences.
    """

    phase: str
    movement: str
    item: str
    bytes_each: int
    count: int

    @property
    def total(self) -> int:
        """``bytes_each × count`` (bytes)."""
        return self.bytes_each * self.count


@no_overflow('prompt_len', 'output_len', 'batch')
def request_ledger(cfg: ModelConfig, prompt_len: int, output_len: int, batch: int = 1, dtype="bf16",
                   kv_dtype: str | None = None, id_dtype: str = "int32") -> list[LedgerRow]:
    """The byte ledger of ``batch`` requests of ``prompt_len`` prompt tokens and ``output_len``
    generated tokens each, through ``cfg`` with weights in ``dtype`` (module docstring: assumptions).

    ``dtype`` is a weight format or :class:`~llm_dataflow.core.formats.PrecisionPlan`; every byte
    comes from :mod:`llm_dataflow.core.accounting` (weights stored and read per pass, KV in the plan's
    KV dtype, activations in its activation dtype).  The first generated token comes from
    prefill's last logits, so there are ``output_len − 1`` decode steps; decode step i
    (1-based) reads the K/V of ``prompt_len + i − 1`` earlier tokens (sliding windows and MLA
    honoured) and writes one token's K/V.

    Raises:
        ValueError: ``cfg`` neither a ModelConfig nor a preset name, ``prompt_len``/
            ``output_len``/``batch`` not a positive integer, unknown dtypes.
            Counts (``prompt_len``, ``output_len``, ``batch``) so large that a result overflows a float: a
            ValueError naming them.
    """

    cfg = as_model_config(cfg)
    require_positive("prompt_len", prompt_len)
    require_positive("output_len", output_len)
    require_positive("batch", batch)
    plan = as_precision_plan(dtype, kv_dtype)
    check_dtype(id_dtype, ("int32", "int64"), "id_dtype")
    wb = weight_bytes(cfg, plan)
    read_prefill = round(weight_bytes_read(cfg, plan, batch * prompt_len))
    read_step = round(weight_bytes_read(cfg, plan, batch))
    act = dtype_bits(plan.activation_dtype) // 8
    idb = dtype_bits(id_dtype) // 8
    kvd = plan.kv_dtype
    kv_tok = kv_token_bytes(cfg, kvd)
    L, D, V, B, P = cfg.n_layers, cfg.d_model, cfg.vocab_size, batch, prompt_len
    steps = output_len - 1
    kv_read_decode = kv_read_over_steps(cfg, P, steps, B, kvd)
    rows = [
        LedgerRow("load", "host↔device", "weights: storage → host DRAM → HBM", wb, 1),
        LedgerRow("prefill", "host↔device", "prompt token IDs (host → device)", B * P * idb, 1),
        LedgerRow("prefill", "HBM→on-chip", "weights (one pass for all prompt tokens)", read_prefill, 1),
        LedgerRow("prefill", "HBM→on-chip", "KV read by attention (ideal: once per pass)", kv_bytes(cfg, P, B, kvd), 1),
        LedgerRow("prefill", "on-chip→HBM", "KV written", kv_bytes(cfg, P, B, kvd), 1),
        LedgerRow("prefill", "on-chip→HBM", "hidden states written at each layer's end", L * B * P * D * act, 1),
        LedgerRow("prefill", "HBM→on-chip", "hidden states read by the next layer", L * B * P * D * act, 1),
        LedgerRow("prefill", "on-chip→HBM", "last-position logits (FP32)", B * V * 4, 1),
        LedgerRow("prefill", "HBM→on-chip", "logits read by the sampler", B * V * 4, 1),
        LedgerRow("prefill", "host↔device", "first sampled token ID (device → host)", B * idb, 1),
        LedgerRow("decode", "HBM→on-chip", "weights (once per step)", read_step, steps),
        LedgerRow("decode", "HBM→on-chip", "KV history read (sum over the steps)", kv_read_decode, 1),
        LedgerRow("decode", "on-chip→HBM", "KV of the new token", B * kv_tok, steps),
        LedgerRow("decode", "on-chip→HBM", "hidden states written at each layer's end", L * B * D * act, steps),
        LedgerRow("decode", "HBM→on-chip", "hidden states read by the next layer", L * B * D * act, steps),
        LedgerRow("decode", "on-chip→HBM", "logits (FP32)", B * V * 4, steps),
        LedgerRow("decode", "HBM→on-chip", "logits read by the sampler", B * V * 4, steps),
        LedgerRow("decode", "host↔device", "sampled token IDs (device → host)", B * idb, steps),
    ]
    return rows


def movement_totals(rows: list[LedgerRow]) -> dict:
    """Total bytes per movement kind (all of :data:`MOVEMENTS`, zero where nothing moved).

    Raises:
        ValueError: ``rows`` not a list or tuple of :class:`LedgerRow`.
    """
    if not isinstance(rows, (list, tuple)) or not all(isinstance(r, LedgerRow) for r in rows):
        raise ValueError(f"rows={rows!r} is not allowed; give a list of LedgerRow (see request_ledger)")
    out = {m: 0 for m in MOVEMENTS}
    for r in rows:
        out[r.movement] += r.total
    return out


def movement_times(rows: list[LedgerRow], hw: HardwareSpec | str) -> dict:
    """The least time (s) each kind of movement of :func:`request_ledger`'s rows takes on ``hw``:
    its bytes over the bandwidth of the path it uses, ``time = bytes / bandwidth``.

    * ``"host↔device"``: over ``hw``'s host link (PCIe, per direction; the sampled IDs that come
      back are counted at the same rate). A lower bound for the load row, whose storage read and
      host copies come first (chapter 01 times them).
    * ``"HBM→on-chip"`` and ``"on-chip→HBM"``: over HBM's datasheet bandwidth, one figure that
      reads and writes share; so the two together take at least their sum.
    * ``"GPU↔GPU"``: over ``hw``'s NVLink per direction (0 s when nothing moves; ``math.inf``
      if bytes moved on a part without NVLink).

    Only bandwidth is counted: kernel launches, latency and compute are left out, so each figure
    is a lower bound (modelled).

    Raises:
        ValueError: ``rows`` as for :func:`movement_totals`; ``hw`` neither a hardware preset name
            nor a HardwareSpec.
    """
    if isinstance(hw, str):
        hw = hardware(hw)
    if not isinstance(hw, HardwareSpec):
        raise ValueError(f"hw={hw!r} is not allowed; give a hardware preset name or a HardwareSpec")
    tot = movement_totals(rows)
    nv = None if hw.nvlink in (None, "", "none") else link(hw.nvlink).bandwidth_per_direction
    gpu = tot["GPU↔GPU"]
    return {"host↔device": tot["host↔device"] / link(hw.host_link).bandwidth_per_direction,
            "HBM→on-chip": tot["HBM→on-chip"] / hw.hbm_bandwidth,
            "on-chip→HBM": tot["on-chip→HBM"] / hw.hbm_bandwidth,
            "GPU↔GPU": 0.0 if gpu == 0 else (gpu / nv if nv else float("inf"))}


def host_round_trip_seconds(dev: torch.device | str | None = None, repeat: int = 50) -> float | None:
    """Median seconds of one host round trip on a GPU: launch a one-element kernel, then copy its
    4-byte INT32 result to the host with ``.item()``, which waits for the GPU to finish — what a
    decode loop that samples on the host pays once per step, before it can launch the next.
    ``None`` when ``dev`` (default :func:`~llm_dataflow.measure.device`) is the CPU: there is no
    host link to cross.

    It counts the launch, the wait and the device → host copy, not the relaunch of a whole step's
    kernels that an eager loop adds.  Expect microseconds: far above the 4 bytes' time on the
    link (4 B ÷ 63 GB/s ≈ 0.06 ns), which is bytes ÷ bandwidth, not the link's latency.

    Raises:
        ValueError: ``repeat`` not a positive integer.
    """
    require_positive("repeat", repeat)
    dev = default_device() if dev is None else torch.device(dev)
    if dev.type != "cuda":
        return None
    x = torch.zeros(1, dtype=torch.int32, device=dev)
    for _ in range(3):                       # warm-up: the kernel's first launch loads its module
        (x + 1).item()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        (x + 1).item()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


@dataclass(frozen=True)
class MemoryTier:
    """One tier of an accelerator's hierarchy.

    Attributes:
        tier: name.
        capacity_bytes: aggregate capacity over the chip (bytes), ``None`` for a link.
        bandwidth: B/s, ``None`` where no vendor figure exists.
        source: where the numbers come from (or how they are derived).
    """

    tier: str
    capacity_bytes: float | None
    bandwidth: float | None
    source: str


def memory_tiers(hw: HardwareSpec | str) -> list[MemoryTier]:
    """Capacity and bandwidth per tier of ``hw``, innermost first.

    Shared-memory capacity is the largest carveout of each SM's unified L1/shared-memory array
    (the rest stays L1 cache).  Its bandwidth is derived from the CUDA C++ Programming Guide (32
    banks × 4 bytes per clock per SM) × SMs × boost clock; register and L2 bandwidths are not
    published and are ``None``.  HBM's datasheet bandwidth is one figure that reads and writes
    share (each HBM channel has one data bus, JEDEC JESD238), not a per-direction figure.  The host
    link is the part's PCIe generation, per direction.

    Raises:
        ValueError: ``hw`` neither a known hardware name nor a HardwareSpec.
    """
    if isinstance(hw, str):
        hw = hardware(hw)
    if not isinstance(hw, HardwareSpec):
        raise ValueError(f"hw={hw!r} is not allowed; give a hardware preset name or a HardwareSpec")
    tiers = [MemoryTier("registers", hw.registers_per_sm_bytes * hw.n_sms, None,
                        f"{hw.registers_per_sm_bytes // 1024} KiB/SM × {hw.n_sms} SMs (whitepaper)")]
    if hw.tmem_per_sm_bytes:
        tiers.append(MemoryTier("TMEM", hw.tmem_per_sm_bytes * hw.n_sms, None,
                                f"{hw.tmem_per_sm_bytes // 1024} KiB/SM × {hw.n_sms} SMs (PTX ISA, tcgen05)"))
    tiers += [
        MemoryTier("shared memory / L1", hw.smem_per_sm_bytes * hw.n_sms, 128 * hw.n_sms * hw.boost_clock_hz,
                   f"{hw.smem_per_sm_bytes // 1024} KiB/SM (largest shared-memory carveout of the L1/shared "
                   f"array) × {hw.n_sms} SMs; 128 B/clock/SM × "
                   f"{hw.boost_clock_hz / 1e9:.3g} GHz (derived)"),
        MemoryTier("L2", hw.l2_bytes, None, "whitepaper" if hw.l2_bytes else "not published"),
        MemoryTier("HBM", hw.memory_bytes, hw.hbm_bandwidth, "datasheet (one figure, reads and writes share it)"),
    ]
    lk = link(hw.host_link)
    tiers.append(MemoryTier(f"host link ({lk.name})", None, lk.bandwidth_per_direction, lk.source))
    return tiers


def reader_tiers(dram_probe_bytes: int | None = None, show_progress: bool = False) -> list[MemoryTier]:
    """This machine's CPU tiers: each cache the OS reports (capacity per instance) and main
    memory (physical RAM), with read bandwidth *measured* on ONE thread (one core's figure, not
    the whole chip's) by :func:`llm_dataflow.memory.memory_mountain` at a working set inside each
    tier (:func:`tier_probe_bytes`) and at ``dram_probe_bytes`` for DRAM (default four times the
    reported last-level cache and at least 256 MiB, :func:`llm_dataflow.memory.past_last_level_bytes`).

    Bandwidths are measurements (B/s) — print them with ``fmt_measured``.  Physical RAM comes from
    ``os.sysconf`` where the OS has it, else ``psutil`` (Windows), else ``None``.

    Raises:
        ValueError: ``dram_probe_bytes`` not a positive integer.
    """

    if dram_probe_bytes is None:
        dram_probe_bytes = past_last_level_bytes(4, minimum=256 * 2**20)
    require_positive("dram_probe_bytes", dram_probe_bytes)
    caches = [c for c in cache_levels() if c.type in ("Data", "Unified")]
    probes = tier_probe_bytes([c.size_bytes for c in caches])
    pts = memory_mountain(sizes=probes + [dram_probe_bytes], ops=("read",), repeat=3, show_progress=show_progress)
    bw = {p.working_set_bytes: p.bandwidth for p in pts}
    tiers = [MemoryTier(f"CPU {c.name}", c.size_bytes, bw[n], f"OS ({c.source}); measured at {n:,} B, one thread")
             for c, n in zip(caches, probes)]
    tiers.append(MemoryTier("host DRAM", physical_ram_bytes(), bw[dram_probe_bytes],
                            f"OS; measured at {dram_probe_bytes:,} B, one thread"))
    return tiers


def tier_probe_bytes(cache_sizes: list[int]) -> list[int]:
    """The working set (bytes) at which :func:`reader_tiers` probes each cache, smallest level
    first: half of each level's reported size, but for the last level at most four times the
    level below it (and at least 4 KiB).  Why the cap: the OS may report the whole chip's (or on a
    VM the host's) last-level cache, of which one core reaches only its slice — AMD EPYC's L3 is
    split per CCD (32 MiB each), and a VM can report 260 MiB — so half the reported size can lie
    past what one core caches and measure DRAM instead.

    >>> tier_probe_bytes([48 * 2**10, 2 * 2**20, 260 * 2**20])
    [24576, 1048576, 8388608]

    Raises:
        ValueError: a size that is not a positive integer.
    """
    for n in cache_sizes:
        require_positive("cache size", n)
    out = [max(4096, n // 2) for n in cache_sizes]
    if len(cache_sizes) >= 2:
        out[-1] = max(4096, min(out[-1], 4 * cache_sizes[-2]))
    return out


def physical_ram_bytes() -> int | None:
    """Physical RAM in bytes: ``os.sysconf`` (Linux, macOS), else ``psutil`` (Windows), else None."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):   # Windows has no os.sysconf
        pass
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except Exception:   # noqa: BLE001 - no psutil, or it cannot tell: the capacity stays unknown
        return None


@no_overflow('prompt_len', 'output_len', 'batch')
def ledger_summary(model: str = "Llama-2-7B", prompt_len: int = 512, output_len: int = 128, batch: int = 1,
                   dtype: str = "bf16", hardware: str = "H100-SXM") -> dict:
    """Calculator view of :func:`request_ledger` for a preset: GB per movement kind (rounded to
    1e-6 GB, 1 kB, so that the calculator shows what the ledger's table shows), the share of
    all bytes that is HBM → on-chip traffic, the weight bytes the decode steps read as a multiple
    of the weight bytes stored (``output_len − 1`` steps, each reading every weight but the
    embedding table's unused rows, or for an MoE only the experts its tokens route to), and
    whether the request fits on one ``hardware`` GPU
    (:func:`~llm_dataflow.core.fit.memory_fit` at ``prompt_len + output_len`` tokens, in vLLM's
    convention), refused when those tokens exceed the model's positions, as the engine refuses
    (the bytes are still counted).

    Raises:
        ValueError: as :func:`request_ledger`, or an unknown preset or hardware.
            Counts (``prompt_len``, ``output_len``, ``batch``) so large that a result overflows a float: a
            ValueError naming them.
    """
    cfg = model_config(model)
    rows = request_ledger(cfg, prompt_len, output_len, batch, dtype)
    tot = movement_totals(rows)
    out = {f"{m} (GB)": round(v / GB, 6) for m, v in tot.items()}
    out["HBM→on-chip share"] = f"{tot['HBM→on-chip'] / sum(tot.values()):.1%}"
    stored = next(r.bytes_each for r in rows if r.phase == "load")
    step = next(r for r in rows if r.phase == "decode" and r.item.startswith("weights"))
    out["decode weight reads ÷ weights stored"] = round(step.bytes_each * step.count / stored, 1)
    fit = memory_fit(cfg, hardware, dtype, batch=batch, context=prompt_len + output_len, prompt_len=prompt_len)
    out[f"one {hardware}"] = fit.reason
    # beyond the model's positions the engine refuses to start (the reason says so); the bytes above
    # are counted all the same, as request_ledger does
    return out
