"""Tiled matrix multiply ``Y = X W`` and the bytes it moves between tiers (chapter 04).

A GEMM ``Y[M, N] = X[M, K] · W[K, N]`` does ``2·M·N·K`` FLOP (one multiply and one add per
term; e.g. Williams et al., "Roofline", CACM 2009) on ``M·K + K·N`` input elements, so every
input element is *used* ``N`` (for X) or ``M`` (for W) times.  Fast memory is far too small to
hold whole matrices, so kernels cut Y into ``block_m × block_n`` output tiles and walk K in steps
of ``block_k``: each step loads an X tile ``[block_m, block_k]`` and a W tile ``[block_k, block_n]``
from global memory into the tile working set (shared memory / registers on a GPU, L1/L2 on a
CPU), where every loaded element is reused ``block_n`` (X) or ``block_m`` (W) times.

:func:`tiled_matmul` is that kernel, written with torch tile by tile, and it *counts* the
elements it loads and stores.  :func:`gemm_traffic` is the closed-form model of the same counts:

* X is loaded once per column of output tiles:  ``M·K·⌈N/block_n⌉`` elements,
* W is loaded once per row of output tiles:     ``K·N·⌈M/block_m⌉`` elements,
* Y is stored once:                               ``M·N`` elements,

exactly, also when the tiles do not divide the matrix.  That is a convention about *bytes*: an
edge tile's loads are clipped, never padded (masked loads, as in Triton's ``tl.load(...,
mask=...)``, and the TMA fetch nothing outside the matrix).  *Time* is another matter: tensor-core
instructions have fixed shapes, so an edge tile still issues full-size MMAs, and a last wave of
tiles that does not fill the SMs leaves some idle (:func:`tile_waves`).
``block_k`` does not change the traffic, only the working-set size.

Shapes use M (rows of X and Y; tokens in a linear layer), K (reduction; D in a projection) and
N (columns of W and Y; e.g. F in an up-projection).  Bytes are bytes; FLOP are FLOP.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .core.hardware import HardwareSpec, arithmetic_intensity, hardware, ridge_point
from .core.units import check_dtype, dtype_bits, fmt_bytes, fmt_si, require_positive

__all__ = ["GemmTraffic", "tiled_matmul", "gemm_traffic", "gemm_tile_report", "tile_waves", "TORCH_DTYPE_NAMES",
           "ACCUMULATOR_BYTES"]

#: torch dtypes the kernel accepts, with the book's dtype names (``units.DTYPE_BITS``).
TORCH_DTYPE_NAMES: dict[torch.dtype, str] = {
    torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16",
}

#: The accumulator is fp32 (4 bytes) for every input dtype, as tensor-core MMA instructions do
#: for fp16/bf16/fp8 inputs (PTX ISA, "Warp-level Matrix Multiply-Accumulate Instructions").
ACCUMULATOR_BYTES = 4


@dataclass(frozen=True)
class GemmTraffic:
    """Global-memory traffic of one tiled GEMM ``Y[M, N] = X[M, K] · W[K, N]``.

    Counts are in *elements* (exact integers); byte properties multiply by the dtype width.
    The same record is produced by the kernel's counter (:func:`tiled_matmul`) and by the model
    (:func:`gemm_traffic`), so the two can be compared with ``==``.

    Attributes:
        M, N, K: GEMM shape.
        block_m, block_n, block_k: tile sizes.
        dtype: element dtype of X, W and Y (a name of ``units.DTYPE_BITS``).
        x_loads: X elements loaded from global memory (``M·K·⌈N/block_n⌉``).
        w_loads: W elements loaded from global memory (``K·N·⌈M/block_m⌉``).
        y_stores: Y elements stored to global memory (``M·N``).
        tiles: output tiles, ``⌈M/block_m⌉·⌈N/block_n⌉``.
        k_steps: K steps per output tile, ``⌈K/block_k⌉``.
    """

    M: int
    N: int
    K: int
    block_m: int
    block_n: int
    block_k: int
    dtype: str
    x_loads: int
    w_loads: int
    y_stores: int
    tiles: int
    k_steps: int

    @property
    def flops(self) -> int:
        """``2·M·N·K`` FLOP (a multiply and an add per term)."""
        return 2 * self.M * self.N * self.K

    @property
    def bytes_per_element(self) -> float:
        """Bytes per element of ``dtype`` (``int4`` → 0.5)."""
        return dtype_bits(self.dtype) / 8

    @property
    def loaded_bytes(self) -> float:
        """Bytes loaded from global memory into the tile working set (X and W tiles)."""
        return (self.x_loads + self.w_loads) * self.bytes_per_element

    @property
    def stored_bytes(self) -> float:
        """Bytes of Y written back to global memory."""
        return self.y_stores * self.bytes_per_element

    @property
    def global_bytes(self) -> float:
        """All global-memory traffic, loads plus stores (bytes)."""
        return self.loaded_bytes + self.stored_bytes

    @property
    def compulsory_bytes(self) -> float:
        """Bytes if each matrix crossed global memory exactly once: ``(M·K + K·N + M·N)·b``.
        A lower bound on DRAM traffic that a perfect cache (or one giant tile) would reach."""
        return (self.M * self.K + self.K * self.N + self.M * self.N) * self.bytes_per_element

    @property
    def operand_bytes(self) -> float:
        """Logical operand bytes: each of the ``M·N·K`` multiply-adds names one X and one W
        element, ``2·M·N·K·b`` bytes.  A count of operand *uses*, not bytes any memory serves: a
        tensor-core instruction fetches its operand tiles once and reuses them across its own
        multiply-adds (Hopper's ``wgmma`` m64n256k16 in bf16 fetches 10,240 B for 1,048,576 B of
        logical operand reads: ``gemm_traffic(64, 256, 16, 64, 256, 16, "bf16")``)."""
        return 2 * self.M * self.N * self.K * self.bytes_per_element

    @property
    def reuse(self) -> float:
        """Uses per loaded byte: logical operand bytes (:attr:`operand_bytes`) ÷ bytes loaded
        from global memory.  1.0 means no reuse (1×1×1 tiles); it approaches
        ``2/(1/block_n + 1/block_m)`` for large M, N."""
        return self.operand_bytes / self.loaded_bytes

    @property
    def arithmetic_intensity(self) -> float:
        """FLOP per global byte (loads + stores), via ``hardware.arithmetic_intensity``."""
        return arithmetic_intensity(self.flops, self.global_bytes)

    @property
    def compulsory_intensity(self) -> float:
        """FLOP per compulsory byte (each matrix once): the intensity with perfect caching."""
        return arithmetic_intensity(self.flops, self.compulsory_bytes)

    def bandwidth_at(self, flops_per_s: float) -> float:
        """B/s of global-memory traffic (tile loads + Y stores, :attr:`global_bytes`) this GEMM needs
        to run at ``flops_per_s``: ``global_bytes × flops_per_s / flops``.  Every tile load is a
        request that L2 (or, on a miss, HBM behind it) must serve, so this is the L2 → SM bandwidth
        the tiles need, whatever L2 saves HBM.  4096³ BF16 with 128 × 128 tiles at the H100's
        989.4 TFLOP/s: 2.18 GB × 989.4e12 / 137.4e9 ≈ 15.7 TB/s.

        Raises:
            ValueError: ``flops_per_s`` not a positive number.
        """
        require_positive("flops_per_s", flops_per_s, integer=False)
        return self.global_bytes * flops_per_s / self.flops

    @property
    def stage_bytes(self) -> float:
        """Bytes of one pipeline stage of input tiles, an X tile and a W tile in the input dtype:
        ``(bm·bk + bk·bn)·b``.  On a GPU these live in shared memory, one copy per stage of the
        load pipeline (the TMA or ``cp.async`` fills stage s + 1 while the tensor cores read
        stage s)."""
        bm, bn, bk = self.block_m, self.block_n, self.block_k
        return (bm * bk + bk * bn) * self.bytes_per_element

    @property
    def accumulator_bytes(self) -> int:
        """Bytes of the FP32 accumulator of one output tile, ``bm·bn·4``.  It does *not* live in
        shared memory: in registers on Ampere and Hopper (``mma.sync``/``wgmma``), in Tensor
        Memory on Blackwell (``tcgen05.mma``; PTX ISA)."""
        return self.block_m * self.block_n * ACCUMULATOR_BYTES

    @property
    def working_set_bytes(self) -> float:
        """On-chip bytes one output tile needs, all storage kinds together and single-buffered:
        :attr:`stage_bytes` + :attr:`accumulator_bytes`, ``(bm·bk + bk·bn)·b + bm·bn·4``.  The two
        parts live in different memories, so never compare this sum with one of them;
        :func:`gemm_tile_report` checks each part against its own capacity."""
        return self.stage_bytes + self.accumulator_bytes


def _check_blocks(block_m, block_n, block_k) -> None:
    require_positive("block_m", block_m)
    require_positive("block_n", block_n)
    require_positive("block_k", block_k)


def gemm_traffic(M: int, N: int, K: int, block_m: int, block_n: int, block_k: int,
                 dtype: str = "bf16") -> GemmTraffic:
    """The analytic traffic model of a tiled GEMM (see the module docstring for the formulas).

    Args:
        M, N, K: shape of ``Y[M, N] = X[M, K] · W[K, N]``.
        block_m, block_n, block_k: tile sizes (need not divide M, N, K).
        dtype: element dtype name (``"bf16"``, ``"fp8"``, ``"fp32"``, ...).

    Returns:
        A :class:`GemmTraffic`; equal (``==``) to the counter of :func:`tiled_matmul`.

    Raises:
        ValueError: a non-positive dimension or tile size, or an unknown dtype.
    """
    for f, v in (("M", M), ("N", N), ("K", K)):
        require_positive(f, v)
    _check_blocks(block_m, block_n, block_k)
    check_dtype(dtype)
    tm, tn, tk = math.ceil(M / block_m), math.ceil(N / block_n), math.ceil(K / block_k)
    return GemmTraffic(M=M, N=N, K=K, block_m=block_m, block_n=block_n, block_k=block_k,
                       dtype=dtype, x_loads=M * K * tn, w_loads=K * N * tm, y_stores=M * N,
                       tiles=tm * tn, k_steps=tk)


def tile_waves(M: int, N: int, block_m: int, block_n: int, n_sms: int) -> dict:
    """Tail waste of a tiled GEMM: what clipping the edge tiles' *bytes* does not save in *time*.

    Two effects, each modelled simply (one output tile per SM at a time, every tile taking the
    same time, as a non-persistent or a simple persistent kernel schedules them):

    * **waves**: ``tiles = ⌈M/b_m⌉·⌈N/b_n⌉`` output tiles run ``n_sms`` at a time, so
      ``⌈tiles / n_sms⌉`` waves; the last one leaves ``n_sms − last`` SMs idle.  4096² in
      128 × 128 tiles on an H100's 132 SMs: 1,024 tiles, 7.76 waves of work in 8, 3.0 % of the
      SM time idle.
    * **edge tiles**: an MMA instruction has a fixed shape, so a tile that sticks out of the
      matrix still computes its full ``b_m × b_n`` (for instructions as large as the tile; a
      kernel can pick a smaller last instruction).  The 257 × 321 output of chapter 04's teaching
      shape in 64 × 64 tiles computes 320 × 384 outputs, 67 % of them useful.  A ``wgmma`` needs
      64 rows per warpgroup, so an M = 16 GEMM uses a quarter of the MMA rows it issues.

    Returns:
        ``{"tiles", "waves", "waves of work", "last wave tiles", "idle share", "useful MMA share"}``:
        ints, ``tiles / n_sms`` (a float), and the two shares in 0..1 (idle SM time over all waves;
        useful outputs over the outputs the full-size tiles compute).

    Raises:
        ValueError: a non-positive size, tile side or ``n_sms``.
    """
    for f, v in (("M", M), ("N", N), ("block_m", block_m), ("block_n", block_n), ("n_sms", n_sms)):
        require_positive(f, v)
    tm, tn = math.ceil(M / block_m), math.ceil(N / block_n)
    tiles = tm * tn
    waves = math.ceil(tiles / n_sms)
    return {"tiles": tiles, "waves": waves, "waves of work": tiles / n_sms,
            "last wave tiles": tiles - (waves - 1) * n_sms, "idle share": 1 - tiles / (waves * n_sms),
            "useful MMA share": M * N / (tm * block_m * tn * block_n)}


def tiled_matmul(X: torch.Tensor, W: torch.Tensor, block_m: int = 64, block_n: int = 64,
                 block_k: int = 32) -> tuple[torch.Tensor, GemmTraffic]:
    """``Y = X @ W`` computed one output tile at a time, counting global loads and stores.

    A teaching kernel, not a fast one: a Python loop over tiles (on CPU it uses one torch thread
    while it runs, restoring the caller's setting).

    For each output tile ``Y[i:i+bm, j:j+bn]`` an fp32 accumulator starts at zero; for each K
    step the kernel "loads" the X tile ``X[i:i+bm, k:k+bk]`` and the W tile
    ``W[k:k+bk, j:j+bn]`` (slices clipped at the matrix edge; the counter adds their element
    counts) and accumulates their product; at the end the tile is cast to X's dtype and
    "stored" into Y (counted once).  The reference is ``torch.matmul``.

    Args:
        X: ``[M, K]`` fp32, fp16 or bf16.
        W: ``[K, N]``, same dtype and device as X.
        block_m, block_n, block_k: tile sizes (any positive integers).

    Returns:
        ``(Y, traffic)``: Y ``[M, N]`` in X's dtype; ``traffic`` a :class:`GemmTraffic` from the
        counter (equal to :func:`gemm_traffic` of the same arguments).

    Raises:
        ValueError: wrong ranks, mismatched K, dtypes or devices, an unsupported dtype, or a
            non-positive tile size.
    """
    _check_blocks(block_m, block_n, block_k)
    if X.dim() != 2 or W.dim() != 2:
        raise ValueError(f"X.shape={tuple(X.shape)}, W.shape={tuple(W.shape)} are not allowed; "
                         "both must be 2-D ([M, K] and [K, N])")
    if X.shape[1] != W.shape[0]:
        raise ValueError(f"W.shape[0]={W.shape[0]} does not match X.shape[1]={X.shape[1]} (K)")
    if X.dtype != W.dtype or X.dtype not in TORCH_DTYPE_NAMES:
        raise ValueError(f"X.dtype={X.dtype}, W.dtype={W.dtype} are not allowed; both must be one of "
                         f"{', '.join(str(d) for d in TORCH_DTYPE_NAMES)}")
    if X.device != W.device:
        raise ValueError(f"X.device={X.device} and W.device={W.device} differ; put both on one device")
    M, K = X.shape
    N = W.shape[1]
    Y = torch.empty(M, N, dtype=X.dtype, device=X.device)
    x_loads = w_loads = y_stores = tiles = 0
    k_steps = 0
    # Tile products are tiny; on a CPU, intra-op threads only add synchronisation (10-20× slower
    # on a loaded 2-core machine), so the loop runs on one thread and restores the setting.
    old_threads = torch.get_num_threads()
    if X.device.type == "cpu":
        torch.set_num_threads(1)
    try:
        for i in range(0, M, block_m):
            for j in range(0, N, block_n):
                tiles += 1
                acc = torch.zeros(min(block_m, M - i), min(block_n, N - j),  # fp32: 4 B per element
                                  dtype=torch.float32, device=X.device)
                k_steps = 0
                for k in range(0, K, block_k):
                    k_steps += 1
                    x_tile = X[i:i + block_m, k:k + block_k]   # read bm·bk elements (clipped)
                    w_tile = W[k:k + block_k, j:j + block_n]   # read bk·bn elements (clipped)
                    x_loads += x_tile.numel()
                    w_loads += w_tile.numel()
                    acc += x_tile.float() @ w_tile.float()     # bm·bn·bk multiply-adds, no traffic
                Y[i:i + block_m, j:j + block_n] = acc.to(X.dtype)  # write bm·bn elements once
                y_stores += acc.numel()
    finally:
        torch.set_num_threads(old_threads)
    traffic = GemmTraffic(M=M, N=N, K=K, block_m=block_m, block_n=block_n, block_k=block_k,
                          dtype=TORCH_DTYPE_NAMES[X.dtype], x_loads=x_loads, w_loads=w_loads,
                          y_stores=y_stores, tiles=tiles, k_steps=k_steps)
    return Y, traffic


def gemm_tile_report(M: int = 4096, N: int = 4096, K: int = 4096, dtype: str = "bf16",
                     block_m: int = 128, block_n: int = 128, block_k: int = 64,
                     hw: HardwareSpec | str = "H100-SXM", stages: int = 2) -> dict:
    """A calculator for chapter 04's widget: a tiled GEMM's global bytes and arithmetic
    intensity against the ridge point of ``hw`` (``hardware.ridge_point``), and whether its
    tiles fit on one SM — each part checked against the memory it really lives in.

    Two intensities bracket what the DRAM sees: ``tile`` counts every tile load as a DRAM read
    (no L2 reuse between tiles), ``compulsory`` counts each matrix once (perfect L2 reuse).  Real
    kernels land in between; Nsight Compute's ``dram__bytes_read.sum`` tells you where.  The
    perfect-L2 verdict is HBM's side only: L2 is not free bandwidth, it must still serve every tile
    load to the SMs.  The report gives that side as the L2 → SM bandwidth the tile loads need at the
    ``dtype`` peak (:meth:`GemmTraffic.bandwidth_at`; 15.7 TB/s for 4096³ BF16 with 128 × 128 tiles
    on an H100), to set beside an L2 bandwidth NVIDIA does not publish (``ledger.memory_tiers``).

    Capacity checks (one output tile per SM):

    * **input stages → shared memory**: ``stages × (bm·bk + bk·bn)·b`` against
      ``hw.smem_per_sm_bytes``; ``stages`` ≥ 2 lets the copy of the next K step overlap the
      math on this one (double buffering; CUTLASS's Hopper/Blackwell kernels use as many as fit).
      The report also gives the most stages that fit.
    * **FP32 accumulator → registers or TMEM**: ``bm·bn·4`` bytes.  Where ``hw`` has Tensor
      Memory (Blackwell, ``tmem_per_sm_bytes`` > 0) it must fit TMEM (≤); elsewhere (Ampere,
      Hopper) it lives in the register file (``registers_per_sm_bytes``, 64 K 32-bit registers
      per SM) and must leave room for operand fragments, addresses and indices, so it must be
      strictly smaller (CUDA C++ Programming Guide, technical specifications per compute
      capability; PTX ISA ``wgmma``/``tcgen05.mma``).  A 256-row Blackwell tile is computed by a
      pair of SMs (``tcgen05.mma.cta_group::2``), each holding half: the check here is per tile.

    Args:
        M, N, K, block_m, block_n, block_k, dtype: as in :func:`gemm_traffic`.
        hw: a :class:`HardwareSpec` or preset name.
        stages: pipeline depth of the input tiles in shared memory (integer ≥ 1).

    Returns:
        ``{name: value}`` (the same names whatever the arguments; FLOP and bytes as display strings
        in SI units, decimal GB for global memory, KiB for on-chip sizes — the exact integers are
        :func:`gemm_traffic`'s) — FLOP, global bytes (tile
        loads + stores), compulsory bytes, the two intensities (FLOP/B), reuse per loaded byte,
        the ridge point (FLOP/B), the verdict for each intensity (the perfect-L2 one for HBM's side
        only), the tile loads' bandwidth from L2 at the peak (TB/s; ``"n/a: HBM-bound, …"`` where
        the perfect-L2 verdict is memory-bound, since such a GEMM never runs at the peak: 997 TB/s
        for M = 1 would be a rate no kernel asks for); the output tiles, the waves they take on
        ``hw``'s SMs and the SM time idle in the last wave (:func:`tile_waves`); input bytes per stage, the
        pipeline stages, the shared memory they need, whether they fit and the most stages that
        fit; accumulator bytes, where it lives, its share of that storage and whether it fits.

    Raises:
        ValueError: as :func:`gemm_traffic`, an unknown preset, or ``stages`` not a positive
            integer.  A dtype without a published peak on ``hw`` gives ``"n/a"`` for the ridge
            and verdicts instead.
    """
    require_positive("stages", stages)
    if not isinstance(hw, (str, HardwareSpec)):
        raise ValueError(f"hw={hw!r} is not allowed; give a hardware preset name or a HardwareSpec")
    spec = hardware(hw) if isinstance(hw, str) else hw
    t = gemm_traffic(M, N, K, block_m, block_n, block_k, dtype)
    # A part without a published peak for dtype (A100 has no FP8 tensor cores; B200's
    # datasheet prints no FP32) gets an explicit "n/a", not a made-up ridge.
    ridge = ridge_point(spec, dtype) if dtype in spec.peak_flops else None

    def verdict(ai: float) -> str:
        if ridge is None:
            return f"n/a: no published {dtype} peak for {spec.name}"
        return "compute-bound" if ai >= ridge else "memory-bound"

    # The L2 side of the peak only means something where HBM's side lets the kernel reach the peak:
    # a GEMM that is memory-bound even with perfect L2 (a decode GEMV, M = 1) never runs there.
    if ridge is None:
        l2_at_peak = "n/a"
    elif t.compulsory_intensity < ridge:
        l2_at_peak = "n/a: HBM-bound, the peak is out of reach"
    else:
        l2_at_peak = round(t.bandwidth_at(spec.peak_flops[dtype]) / 1e12, 1)
    waves = tile_waves(M, N, block_m, block_n, spec.n_sms)
    smem = stages * t.stage_bytes                     # bytes of shared memory the input pipeline needs
    if spec.tmem_per_sm_bytes > 0:                    # Blackwell: tcgen05.mma accumulates in TMEM
        home, cap = "Tensor Memory (TMEM)", spec.tmem_per_sm_bytes
        acc_fits = t.accumulator_bytes <= cap
    else:                                             # Ampere/Hopper: mma.sync/wgmma accumulate in registers
        home, cap = "registers", spec.registers_per_sm_bytes
        acc_fits = t.accumulator_bytes < cap          # operands, addresses and indices need registers too
    return {
        "FLOP": fmt_si(t.flops, "FLOP"),
        "global bytes (tile loads + Y stores)": fmt_bytes(t.global_bytes),
        "compulsory bytes (each matrix once)": fmt_bytes(t.compulsory_bytes),
        "reuse (uses per loaded byte)": round(t.reuse, 2),
        "intensity, no L2 reuse (FLOP/B)": round(t.arithmetic_intensity, 1),
        "intensity, perfect L2 (FLOP/B)": round(t.compulsory_intensity, 1),
        "ridge point (FLOP/B)": round(ridge, 1) if ridge is not None else "n/a",
        "verdict, no L2 reuse": verdict(t.arithmetic_intensity),
        "verdict, perfect L2 (HBM side only)": verdict(t.compulsory_intensity),
        "tile loads from L2 at the peak (TB/s)": l2_at_peak,
        "output tiles": waves["tiles"],
        "waves of tiles on the SMs (one tile per SM)": waves["waves"],
        "SM time idle in the last wave": f"{waves['idle share']:.0%}",
        "input tiles per stage": fmt_bytes(t.stage_bytes, binary=True),
        "pipeline stages": stages,
        "shared memory, stages × input tiles": fmt_bytes(smem, binary=True),
        "stages fit shared memory per SM": "yes" if smem <= spec.smem_per_sm_bytes else "no",
        "most stages that fit": int(spec.smem_per_sm_bytes // t.stage_bytes),
        "fp32 accumulator": fmt_bytes(t.accumulator_bytes, binary=True),
        "accumulator lives in": home,
        "accumulator share of that storage": f"{t.accumulator_bytes / cap:.0%}",
        "accumulator fits": "yes" if acc_fits else "no",
    }
