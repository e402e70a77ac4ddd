"""Where a GEMM's tiles live on three NVIDIA generations (chapter 04).

There is no fixed ladder that every byte climbs.  Data enter an SM from global memory (HBM,
through L2) and end in the tensor cores or the CUDA cores, but *where they are staged on the way*
depends on the generation and on the kernel:

* **Ampere** (A100, sm_80): ``cp.async`` copies global → shared without passing through
  registers; ``ldmatrix`` loads shared → register fragments; ``mma.sync`` (one warp) reads A and
  B fragments *from registers* and accumulates into registers.  (Before ``cp.async``, and in
  kernels that do not use it, a tile goes global → registers → shared.)
* **Hopper** (H100/H200, sm_90a): the **TMA** (Tensor Memory Accelerator) copies whole tiles
  global ↔ shared in bulk (``cp.async.bulk.tensor``, one thread issues it, an ``mbarrier``
  signals arrival, optional multicast to a cluster) — no registers on the way; ``wgmma.mma_async``
  (a warpgroup of 4 warps) reads B *from shared memory* (A from shared memory or registers) and
  accumulates into registers.
* **Data-centre Blackwell** (B200/GB200, sm_100a; B300/GB300, sm_103a, has the same ``tcgen05`` and TMEM
  — PTX ISA, tcgen05 "Target ISA notes": sm_100a and the sm_100f family; the consumer RTX 50
  series, sm_120, has no ``tcgen05`` and no TMEM — its preset says ``tmem_per_sm_bytes = 0``): the
  TMA still feeds shared memory; ``tcgen05.mma`` (issued by one thread) reads B from shared memory,
  A from shared memory or **TMEM**, and keeps the accumulator in **Tensor Memory (TMEM)**, a 256 KiB
  per-SM store beside the tensor cores.  ``tcgen05.cp`` copies shared memory → TMEM,
  ``tcgen05.st`` registers → TMEM, and ``tcgen05.ld`` TMEM → registers (the epilogue reads the
  finished tile that way).
* **No reuse, nothing to stage for it** (:data:`DECODE_GEMV_PATH`): a batch-1 decode projection
  (a GEMV) uses each weight once.  TensorRT-LLM's weight-only batched GEMV loads the quantised
  weights, the per-group scales and the zero points alike, with vector loads from global memory
  straight into registers (``GMemIterator``: ``scales_iterator.load(vec_scale, iter)``,
  ``zeros_iterator.load(vec_zero, iter)``), dequantises and accumulates there, on every
  generation; its only shared memory is the epilogue's cross-warp reduction buffer,
  ``__shared__ float shmem[CtaM * CtaN * Interleave * WarpNum]``, where the warps add their
  partial sums (NVIDIA/TensorRT-LLM ``cpp/tensorrt_llm/kernels/weightOnlyBatchedGemv/kernel.h`` at
  6b57f8bb4b7d3fb279bfcc9729ff7e2de4df6576, after PR #5420 of 2025-06-30, launched with 0 bytes
  of dynamic shared memory; ``utility.h``, ``epilogue``).  A closed, unmerged pull request (#2213,
  2024) staged the scales and zero points in shared memory; main does not.  Other batch-1
  kernels stage the weights anyway, to pipeline asynchronous copies and hide latency (Marlin's
  quantised GEMM: ``cp.async`` into a 4-stage shared-memory ring).

TMA and TMEM are different things: the TMA is a *copy unit* in each SM (global ↔ shared; not
one of the "copy engines", CUDA's name for the DMA engines behind ``cudaMemcpyAsync``), TMEM is a
*memory* (tensor-core accumulators).  Hopper has the TMA and no TMEM; data-centre Blackwell
(sm_100, sm_103) has both.

The capacities (registers, shared memory, L2, TMEM per SM, HBM bandwidth) are not repeated here:
each row names a ``hardware`` preset and reads them from its :class:`~llm_dataflow.HardwareSpec`.
Sources: CUDA C++ Programming Guide (sections "Compute Capabilities" — technical specifications
per compute capability, "Asynchronous Data Copies", "Tensor Memory Accelerator"); PTX ISA 8.7
("Warp-level matrix instructions: mma, ldmatrix", "cp.async", "cp.async.bulk.tensor",
"Asynchronous warpgroup level matrix multiply-accumulate: wgmma", "TensorCore 5th Generation
Family Instructions: tcgen05", "Tensor Memory"); NVIDIA A100 Tensor Core GPU Architecture
whitepaper (2020), NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022), NVIDIA Blackwell
Architecture Technical Brief (2024).
"""
from __future__ import annotations

from dataclasses import dataclass

from .hardware import HardwareSpec, hardware, ridge_point
from .units import fmt_bytes

__all__ = ["ChipGeneration", "GENERATIONS", "generation", "generations_table", "PROFILER_METRICS",
           "TMA_VS_TMEM", "DECODE_GEMV_PATH", "ON_CHIP_NAMES", "H100_L2_MEASURED"]


@dataclass(frozen=True)
class ChipGeneration:
    """One NVIDIA generation: where a tensor-core GEMM keeps its tiles.

    Attributes:
        architecture: ``"Ampere"``, ``"Hopper"``, ``"Blackwell"``.
        preset: the ``hardware`` preset whose numbers the row shows (capacities are read from it).
        compute_capability: e.g. ``"8.0"``; the PTX target is ``sm_80``, ``sm_90a``, ``sm_100a``.
        mma_instruction: the tensor-core instruction (PTX mnemonic) and who issues it.
        global_to_shared: how tiles get from global into shared memory.
        shared_to_operands: how operand tiles get from shared memory to the tensor core.
        a_operand, b_operand: where the tensor core reads A and B from.
        accumulator: where the fp32 accumulator tile lives during the K loop.
        sources: citations for the placement facts of this row.
    """

    architecture: str
    preset: str
    compute_capability: str
    mma_instruction: str
    global_to_shared: str
    shared_to_operands: str
    a_operand: str
    b_operand: str
    accumulator: str
    sources: str

    @property
    def spec(self) -> HardwareSpec:
        """The preset's :class:`HardwareSpec` (the single source of the capacities)."""
        return hardware(self.preset)

    @property
    def registers_per_sm_bytes(self) -> int:
        """Register file per SM, bytes (from the preset)."""
        return self.spec.registers_per_sm_bytes

    @property
    def smem_per_sm_bytes(self) -> int:
        """Maximum shared memory per SM, bytes (from the preset)."""
        return self.spec.smem_per_sm_bytes

    @property
    def tmem_per_sm_bytes(self) -> int:
        """Tensor Memory per SM, bytes (0 before Blackwell; from the preset)."""
        return self.spec.tmem_per_sm_bytes

    @property
    def l2_bytes(self) -> float | None:
        """L2 bytes, ``None`` where the datasheet does not publish it (from the preset)."""
        return self.spec.l2_bytes

    @property
    def hbm_bandwidth(self) -> float:
        """HBM bandwidth, B/s (from the preset)."""
        return self.spec.hbm_bandwidth

    @property
    def has_tma(self) -> bool:
        """Whether the generation has the Tensor Memory Accelerator (a copy unit in each SM): sm_90+."""
        return self.architecture in ("Hopper", "Blackwell")

    @property
    def has_tmem(self) -> bool:
        """Whether the generation has Tensor Memory (accumulator storage): data-centre Blackwell
        (sm_100/sm_103), from the preset's ``tmem_per_sm_bytes`` (0 for the RTX 5090, sm_120)."""
        return self.tmem_per_sm_bytes > 0


_PG = "CUDA C++ Programming Guide, 'Compute Capabilities' (technical specifications table)"

GENERATIONS: dict[str, ChipGeneration] = {
    "Ampere": ChipGeneration(
        architecture="Ampere", preset="A100-80GB-SXM", compute_capability="8.0",
        mma_instruction="mma.sync.aligned (one warp, 32 threads)",
        global_to_shared="cp.async: per-thread async copy global → shared, bypassing registers",
        shared_to_operands="ldmatrix: shared → register fragments",
        a_operand="registers (per-thread fragments)",
        b_operand="registers (per-thread fragments)",
        accumulator="registers (per-thread fragments)",
        sources=(f"{_PG}; PTX ISA 8.7 'Warp-level matrix multiply-accumulate' (mma, ldmatrix), "
                 "'cp.async'; NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020), "
                 "'Asynchronous Copy'")),
    "Hopper": ChipGeneration(
        architecture="Hopper", preset="H100-SXM", compute_capability="9.0",
        mma_instruction="wgmma.mma_async (one warpgroup, 4 warps, 128 threads)",
        global_to_shared="TMA: cp.async.bulk.tensor, whole tiles global ↔ shared, one issuing "
                         "thread, mbarrier completion, optional cluster multicast",
        shared_to_operands="none for B (and A from shared): wgmma reads shared memory through "
                           "matrix descriptors",
        a_operand="shared memory (descriptor) or registers",
        b_operand="shared memory (descriptor)",
        accumulator="registers (spread over the warpgroup)",
        sources=(f"{_PG}; PTX ISA 8.7 'Asynchronous warpgroup level matrix multiply-accumulate' "
                 "(wgmma), 'cp.async.bulk.tensor'; CUDA C++ Programming Guide 'Tensor Memory "
                 "Accelerator'; NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022), 'Tensor Memory "
                 "Accelerator'")),
    "Blackwell": ChipGeneration(
        architecture="Blackwell", preset="B200", compute_capability="10.0",
        mma_instruction="tcgen05.mma (issued by one thread; cta_group::2 pairs two SMs)",
        global_to_shared="TMA: cp.async.bulk.tensor (as on Hopper)",
        shared_to_operands="tcgen05.mma reads shared memory through descriptors; tcgen05.cp copies "
                           "shared → TMEM; tcgen05.ld moves TMEM → registers for the epilogue",
        a_operand="shared memory or Tensor Memory (TMEM)",
        b_operand="shared memory",
        accumulator="Tensor Memory (TMEM): 128 lanes × 512 columns × 32 bit per SM",
        sources=(f"{_PG}; PTX ISA 8.7 'TensorCore 5th Generation Family Instructions' (tcgen05) "
                 "and 'Tensor Memory'; NVIDIA Blackwell Architecture Technical Brief (2024)")),
}

#: One sentence each, for the chapter: the two are unrelated except for the words in their names.
TMA_VS_TMEM: dict[str, str] = {
    "TMA (Tensor Memory Accelerator)": "a copy unit in each SM (Hopper and later): moves a whole "
    "tile between global and shared memory from one instruction (cp.async.bulk.tensor); holds no data",
    "TMEM (Tensor Memory)": "a 256 KiB per-SM memory (data-centre Blackwell: sm_100 B200/GB200, sm_103 "
    "B300/GB300): holds tensor-core accumulators (and optionally operand A) for tcgen05.mma; written by "
    "tcgen05.mma, tcgen05.cp (from shared memory) and tcgen05.st (from registers), read out by tcgen05.ld",
}

#: The H100's L2 bandwidth, which NVIDIA does not publish, as one microbenchmark measured it: about
#: 5.5 TB/s on an H100 *PCIe* (114 SMs enabled, 50 MB of L2, 350 W; the SXM part has 132 SMs and a
#: higher power limit, so it may reach somewhat more).  Chips and Cheese, "Nvidia's H100: Funny L2,
#: and Tons of Bandwidth" (2023-07-02,
#: https://chipsandcheese.com/p/nvidias-h100-funny-l2-and-tons-of-bandwidth), as quoted by
#: scaling-book's "How to Think About GPUs": "NVIDIA does not publish the L2 bandwidth for their
#: chips, but it's been measured to be about 5.5TB/s" (jax-ml/scaling-book ``gpus.md`` at
#: 1a55377affc9ee8f10b549f689ad57e813623a7e).  A measured figure, kept apart from the presets,
#: which hold datasheet numbers only.
H100_L2_MEASURED: dict = {
    "bandwidth": 5.5e12,
    "device": "H100 PCIe (114 SMs, 50 MB L2)",
    "source": "Chips and Cheese (2023), via scaling-book 'How to Think About GPUs' (jax-ml/scaling-book "
              "gpus.md @ 1a55377)",
}

#: Where TensorRT-LLM's batch-1 GEMV (a decode projection, M = 1) keeps its weights on every
#: generation: each weight is used once, so no tile is staged in shared memory (source: TensorRT-LLM
#: ``weightOnlyBatchedGemv/kernel.h``: GMemIterators load the weights, scales and zero points into
#: registers; the only shared memory is the epilogue's cross-warp reduction buffer — module
#: docstring).  Not every GEMV does this: Marlin stages the weights in shared memory to pipeline
#: its copies.
DECODE_GEMV_PATH = ("global → registers (TensorRT-LLM's weight-only GEMV: wide vector loads, each weight "
                    "used once, nothing staged in shared memory; Marlin stages them to pipeline its "
                    "copies); accumulate in registers")

#: NVIDIA's names for the on-chip storage of an SM and the nearest AMD (CDNA, ROCm docs "GPU
#: specifications" and "Compute unit") and Intel (Xe, oneAPI GPU Optimization Guide) terms.  Sizes
#: differ; the roles are close, not identical.  TMEM has no counterpart on either: CDNA's MFMA
#: instructions accumulate in AccVGPRs, which are vector registers (part of each SIMD's register
#: file, allocated per wavefront like the VGPRs), not a separate memory.
ON_CHIP_NAMES: list[dict[str, str]] = [
    {"role": "per-thread registers", "NVIDIA": "register file (64 K × 32-bit per SM)",
     "AMD": "VGPRs (and AccVGPRs for matrix accumulators)", "Intel": "GRF (general register file)"},
    {"role": "programmable on-chip scratchpad", "NVIDIA": "shared memory",
     "AMD": "LDS (local data share)", "Intel": "SLM (shared local memory)"},
    {"role": "per-SM cache of global memory", "NVIDIA": "L1 (same array as shared memory, split by a carveout)",
     "AMD": "vL1D (vector L1 cache)", "Intel": "L1 cache (shares storage with SLM)"},
    {"role": "tensor-core accumulator memory", "NVIDIA": "TMEM (data-centre Blackwell)",
     "AMD": "— (accumulators in AccVGPRs: registers)", "Intel": "— (accumulators in the GRF)"},
    {"role": "device-wide cache", "NVIDIA": "L2", "AMD": "L2 per XCD, Infinity Cache (MI300)",
     "Intel": "L2 / last-level cache"},
]

#: What Nsight Compute (``ncu``) measures that the kernel's source does not show.  Metric names
#: from the Nsight Compute CLI documentation ("nvprof transition guide", metric comparison table)
#: and the Kernel Profiling Guide ("Memory Workload Analysis", "Metrics Structure").
PROFILER_METRICS: list[dict[str, str]] = [
    {"metric": "dram__bytes_read.sum",
     "shows": "bytes actually read from HBM",
     "source code cannot tell": "how many tile loads hit in L2 instead: our counter's global loads "
                                "are an upper bound; this is the real DRAM traffic"},
    {"metric": "lts__t_sector_hit_rate.pct",
     "shows": "L2 hit rate over 32-byte sectors",
     "source code cannot tell": "whether concurrently running tiles share operands through L2 "
                                "(depends on launch order / rasterization, not on the loop nest)"},
    {"metric": "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum / "
               "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
     "shows": "32-byte sectors per global load request (coalescing) of plain loads; cp.async and "
              "TMA copies are counted elsewhere",
     "source code cannot tell": "whether a warp's 32 addresses fall into 4 sectors (coalesced) or 32 "
                                "(strided): same bytes in the source, up to 8× the transactions"},
    {"metric": "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum",
     "shows": "shared-memory bank conflicts of the LSU pipe's accesses (loads, stores, ldmatrix); "
              "wgmma and TMA traffic does not go through this pipe",
     "source code cannot tell": "that a tile layout serialises a warp's shared-memory reads "
                                "(32 banks of 4 bytes); swizzled layouts avoid it"},
    {"metric": "gpu__time_duration.sum, sm__throughput.avg.pct_of_peak_sustained_elapsed",
     "shows": "kernel time and how close to peak the SMs ran",
     "source code cannot tell": "whether the kernel is actually memory- or compute-bound once "
                                "caches, occupancy and clocks have had their say"},
]


def generation(name: str) -> ChipGeneration:
    """The row for ``"Ampere"``, ``"Hopper"`` or ``"Blackwell"``.

    Raises:
        ValueError: unknown name (any non-string included); the message lists the allowed ones.
    """
    if not isinstance(name, str) or name not in GENERATIONS:
        raise ValueError(f"generation={name!r} is not known; allowed: {', '.join(GENERATIONS)}")
    return GENERATIONS[name]


def generations_table(dtype: str = "bf16") -> list[dict[str, str]]:
    """The chapter's table, one dict per generation, capacities formatted from the presets
    (binary units for on-chip sizes, decimal GB/s for HBM) and the ``dtype`` ridge point
    (``hardware.ridge_point``, FLOP/B).  Feed it to ``pandas.DataFrame`` to display.

    Raises:
        ValueError: ``dtype`` unknown or without a published peak on one of the presets.
    """
    rows = []
    for g in GENERATIONS.values():
        rows.append({
            "architecture": g.architecture,
            "preset": g.preset,
            "registers / SM": fmt_bytes(g.registers_per_sm_bytes, binary=True, digits=0),
            "shared memory / SM": fmt_bytes(g.smem_per_sm_bytes, binary=True, digits=0),
            "TMEM / SM": fmt_bytes(g.tmem_per_sm_bytes, binary=True, digits=0) if g.has_tmem else "—",
            "L2": (fmt_bytes(g.l2_bytes, binary=True, digits=0) if g.l2_bytes is not None
                   else "not in NVIDIA's datasheet"),
            "HBM": f"{g.hbm_bandwidth / 1e9:,.0f} GB/s",
            f"ridge {dtype} (FLOP/B)": f"{ridge_point(g.spec, dtype):.0f}",
            "global → shared": "TMA" if g.has_tma else "cp.async",
            "MMA": g.mma_instruction.split(" ")[0],
            "A from": g.a_operand,
            "B from": g.b_operand,
            "accumulator in": g.accumulator.split(":")[0],
            "batch-1 GEMV weights": DECODE_GEMV_PATH.split(" (")[0],
        })
    return rows
