"""Hardware presets: GPUs (memory, bandwidth, peak FLOP/s, on-chip sizes) and links.

Every number carries its source.  Bandwidths state explicitly whether they are **per
direction** or **both directions together** (NVIDIA quotes NVLink as the bidirectional
total; the time to move a buffer one way uses the per-direction figure).  Peak FLOP/s are
*dense* tensor-core rates (datasheets also print 2:4-sparse rates, twice as large).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .units import GB, TB, KiB, MiB, check_dtype, require_nonnegative, require_positive

__all__ = [
    "HardwareSpec", "LinkSpec", "hardware", "link", "HARDWARE", "LINKS",
    "REFERENCE_HARDWARE", "REFERENCE_LINKS", "arithmetic_intensity", "ridge_point",
]


@dataclass(frozen=True)
class LinkSpec:
    """An interconnect between two devices (or device and host).

    Attributes:
        name: preset name.
        bandwidth_per_direction: bytes/s one way (B/s, GB = 1e9).
        bandwidth_bidirectional: bytes/s both ways together, as vendors often print it.
        latency_s: an *illustrative* per-message latency (s) for the α–β time model; not a
            datasheet number — measure your own.
        scope: ``"host-device"``, ``"intra-node"`` or ``"inter-node"``.
        source: where the bandwidth comes from.
    """

    name: str
    bandwidth_per_direction: float
    bandwidth_bidirectional: float
    latency_s: float
    scope: str
    source: str


@dataclass(frozen=True)
class HardwareSpec:
    """One accelerator.

    Attributes:
        name: preset name.
        memory_bytes: HBM capacity as the datasheet labels it, read as GB = 1e9 B.  The physical
            HBM is binary-sized and a process sees a different total (an "80 GB" H100 SXM reports
            81,559 MiB in ``nvidia-smi``, an A100 80GB 81,920 MiB), so treat shares of it as ±7 %.
        hbm_bandwidth: HBM bandwidth, B/s.
        peak_flops: dense peak FLOP/s per dtype (``"bf16"``, ``"fp16"``, ``"fp8"``, ``"tf32"``,
            ``"fp32"``, ``"int8"`` (OP/s)).
        n_sms: streaming multiprocessors.
        l2_bytes: L2 cache bytes, binary as ``cudaDeviceProp.l2CacheSize`` reports (40 MiB A100,
            50 MiB H100/H200; ``None`` where not published).
        smem_per_sm_bytes: maximum shared memory per SM, bytes.
        registers_per_sm_bytes: register file per SM, bytes.
        tmem_per_sm_bytes: Blackwell Tensor Memory per SM, bytes (0 before Blackwell).
        boost_clock_hz: the clock the dense tensor peak implies (Hopper: 989.4e12 FLOP/s ÷
            (132 SMs × 4096 FLOP/clock) = 1.83 GHz; the 1.98 GHz maximum boost applies to non-tensor
            work), Hz.
        nvlink: the NVLink preset name of this part.
        host_link: the host link preset name.
        architecture: ``"Ampere"``, ``"Hopper"`` or ``"Blackwell"``.
        source: datasheet / whitepaper citations.
    """

    name: str
    architecture: str
    memory_bytes: float
    hbm_bandwidth: float
    peak_flops: dict
    n_sms: int
    l2_bytes: float | None
    smem_per_sm_bytes: int
    registers_per_sm_bytes: int
    tmem_per_sm_bytes: int
    boost_clock_hz: float
    nvlink: str
    host_link: str
    source: str
    notes: str = ""
    extra: dict = field(default_factory=dict)

    def flops(self, dtype: str) -> float:
        """Dense peak FLOP/s for ``dtype``.

        Raises:
            ValueError: ``dtype`` has no published peak on this part.
        """
        if not isinstance(dtype, str) or dtype not in self.peak_flops:
            raise ValueError(f"dtype={dtype!r} has no peak FLOP/s for {self.name}; "
                             f"allowed: {', '.join(self.peak_flops)}")
        return self.peak_flops[dtype]


_A100_SRC = ("NVIDIA A100 Tensor Core GPU datasheet (80GB SXM: 2,039 GB/s; BF16 312 TFLOPS dense); "
             "NVIDIA A100 Tensor Core GPU Architecture whitepaper (108 SMs, 40 MB L2, 164 KB smem/SM, "
             "64K 32-bit registers/SM)")
_H100_SRC = ("NVIDIA H100 Tensor Core GPU datasheet (SXM: 80 GB, 3.35 TB/s; BF16 1,979 TFLOPS with "
             "sparsity = 989.4 dense; FP8 3,958 sparse = 1,979 dense); NVIDIA H100 Tensor Core GPU "
             "Architecture whitepaper (132 SMs, 50 MB L2, 228 KB smem/SM, 256 KB registers/SM, "
             "1,830 MHz boost implied by the dense tensor peak)")
_H200_SRC = ("NVIDIA H200 Tensor Core GPU datasheet (SXM: 141 GB HBM3e, 4.8 TB/s; same Hopper "
             "compute as H100 SXM: BF16 1,979 TFLOPS sparse = 989.4 dense)")
_B200_SRC = ("NVIDIA DGX B200 datasheet (8 GPUs: 1,440 GB, 64 TB/s HBM3e → 180 GB and 8 TB/s per GPU; "
             "FP8 72 PFLOPS and FP4 144 PFLOPS with sparsity → per GPU dense FP8 4.5, BF16 2.25 PFLOPS); "
             "NVLink 5 1.8 TB/s per GPU; PTX ISA 8.7 'Tensor Memory' (512 columns × 128 lanes × 32 bit "
             "= 256 KiB per SM)")

HARDWARE: dict[str, HardwareSpec] = {
    "A100-80GB-SXM": HardwareSpec(
        name="A100-80GB-SXM", architecture="Ampere", memory_bytes=80 * GB, hbm_bandwidth=2039 * GB,
        peak_flops={"bf16": 312e12, "fp16": 312e12, "tf32": 156e12, "fp32": 19.5e12, "int8": 624e12},
        n_sms=108, l2_bytes=40 * MiB, smem_per_sm_bytes=164 * KiB,
        registers_per_sm_bytes=256 * KiB, tmem_per_sm_bytes=0, boost_clock_hz=1.41e9,
        nvlink="NVLink3", host_link="PCIe-Gen4-x16", source=_A100_SRC),
    "H100-SXM": HardwareSpec(
        name="H100-SXM", architecture="Hopper", memory_bytes=80 * GB, hbm_bandwidth=3.35 * TB,
        peak_flops={"bf16": 989.4e12, "fp16": 989.4e12, "fp8": 1978.9e12, "tf32": 494.7e12,
                    "fp32": 67e12, "int8": 1978.9e12},
        n_sms=132, l2_bytes=50 * MiB, smem_per_sm_bytes=228 * KiB, registers_per_sm_bytes=256 * KiB,
        tmem_per_sm_bytes=0, boost_clock_hz=1.83e9, nvlink="NVLink4", host_link="PCIe-Gen5-x16",
        source=_H100_SRC),
    "H200": HardwareSpec(
        name="H200", architecture="Hopper", memory_bytes=141 * GB, hbm_bandwidth=4.8 * TB,
        peak_flops={"bf16": 989.4e12, "fp16": 989.4e12, "fp8": 1978.9e12, "tf32": 494.7e12,
                    "fp32": 67e12, "int8": 1978.9e12},
        n_sms=132, l2_bytes=50 * MiB, smem_per_sm_bytes=228 * KiB, registers_per_sm_bytes=256 * KiB,
        tmem_per_sm_bytes=0, boost_clock_hz=1.83e9, nvlink="NVLink4", host_link="PCIe-Gen5-x16",
        source=_H200_SRC),
    "B200": HardwareSpec(
        name="B200", architecture="Blackwell", memory_bytes=180 * GB, hbm_bandwidth=8 * TB,
        peak_flops={"bf16": 2.25e15, "fp16": 2.25e15, "fp8": 4.5e15, "fp4": 9e15, "tf32": 1.125e15,
                    "int8": 4.5e15},
        n_sms=148, l2_bytes=None, smem_per_sm_bytes=228 * KiB, registers_per_sm_bytes=256 * KiB,
        tmem_per_sm_bytes=256 * KiB, boost_clock_hz=1.965e9, nvlink="NVLink5", host_link="PCIe-Gen5-x16",
        source=_B200_SRC,
        notes="B200's L2 size and boost clock are not in NVIDIA's datasheet; l2_bytes is None and the "
              "clock is indicative. FP32 non-tensor peak is omitted for the same reason."),
}

_PCIE_SRC = "PCI-SIG: Gen4 16 GT/s, Gen5 32 GT/s per lane, 128b/130b encoding; 16 lanes per direction"
LINKS: dict[str, LinkSpec] = {
    "PCIe-Gen4-x16": LinkSpec("PCIe-Gen4-x16", 16e9 * 16 * 128 / 130 / 8, 2 * 16e9 * 16 * 128 / 130 / 8,
                              2e-6, "host-device", _PCIE_SRC),
    "PCIe-Gen5-x16": LinkSpec("PCIe-Gen5-x16", 32e9 * 16 * 128 / 130 / 8, 2 * 32e9 * 16 * 128 / 130 / 8,
                              2e-6, "host-device", _PCIE_SRC),
    "NVLink3": LinkSpec("NVLink3", 300 * GB, 600 * GB, 1e-6, "intra-node",
                        "NVIDIA A100 datasheet: NVLink 600 GB/s (bidirectional total per GPU)"),
    "NVLink4": LinkSpec("NVLink4", 450 * GB, 900 * GB, 1e-6, "intra-node",
                        "NVIDIA H100 datasheet: NVLink 900 GB/s (bidirectional total per GPU)"),
    "NVLink5": LinkSpec("NVLink5", 900 * GB, 1800 * GB, 1e-6, "intra-node",
                        "NVIDIA DGX B200 datasheet: NVLink 5, 1.8 TB/s per GPU (bidirectional total)"),
    "InfiniBand-NDR": LinkSpec("InfiniBand-NDR", 400e9 / 8, 2 * 400e9 / 8, 5e-6, "inter-node",
                               "NVIDIA ConnectX-7 / Quantum-2 NDR: 400 Gb/s per port per direction"),
    "RoCE-400GbE": LinkSpec("RoCE-400GbE", 400e9 / 8, 2 * 400e9 / 8, 5e-6, "inter-node",
                            "IEEE 802.3 400GBASE: 400 Gb/s per direction (RoCE v2 over Ethernet)"),
}


# ---------------------------------------------------------------------------------------------
# Reference parts: parts that appear only beside published measurements (``ldf.published``,
# the appendix "The model against the world").  They live in their own tables so that the
# chapters' calculators, which offer every entry of HARDWARE / LINKS, do not change.
# ``hardware()`` and ``link()`` find them too.
# ---------------------------------------------------------------------------------------------
_H800_SRC = ("DeepSeek FlashMLA, docs/20250422-new-kernel-deep-dive.md: 'An NVIDIA H800 SXM5 GPU has a peak "
             "memory bandwidth of 3.35 TB/s and peak FLOPs of 990 TFlops' (BF16 dense; 989 TFLOPS = 132 SMs "
             "x 4096 FLOP/clock x 1830 MHz, docs/20250929-hopper-fp8-sparse-deep-dive.md); the same GH100 die "
             "as H100 SXM, so FP8 dense = 2 x BF16 (NVIDIA H100 datasheet: 1,978.9 TFLOPS) and 80 GB HBM3")

REFERENCE_HARDWARE: dict[str, HardwareSpec] = {
    "H800-SXM": HardwareSpec(
        name="H800-SXM", architecture="Hopper", memory_bytes=80 * GB, hbm_bandwidth=3.35 * TB,
        peak_flops={"bf16": 989.4e12, "fp16": 989.4e12, "fp8": 1978.9e12, "tf32": 494.7e12,
                    "fp32": 67e12, "int8": 1978.9e12},
        n_sms=132, l2_bytes=50 * MiB, smem_per_sm_bytes=228 * KiB, registers_per_sm_bytes=256 * KiB,
        tmem_per_sm_bytes=0, boost_clock_hz=1.83e9, nvlink="NVLink4-H800", host_link="PCIe-Gen5-x16",
        source=_H800_SRC,
        notes="The export variant of H100 SXM that DeepSeek's published kernels and serving numbers use; "
              "only its NVLink differs from H100-SXM here. FlashMLA's deep dive adds that under load its "
              "clock throttled to ~1600 MHz, a practical BF16 peak of ~865 TFLOPS."),
}

REFERENCE_LINKS: dict[str, LinkSpec] = {
    # DeepSeek's stated NVLink maximum (per direction); NVIDIA's own H800 NVLink figure is not in
    # this book's sources, so this is a practical maximum, not a datasheet line rate.
    "NVLink4-H800": LinkSpec("NVLink4-H800", 160 * GB, 320 * GB, 1e-6, "intra-node",
                             "DeepEP README (legacy V1 performance): 'H800 (~160 GB/s NVLink maximum "
                             "bandwidth)'; DeepSeek-V3 Technical Report, arXiv:2412.19437 §3.2.2: NVLink "
                             "160 GB/s, IB 50 GB/s"),
}


def _lookup(tables: tuple, name: str, what: str):
    for table in tables:
        if isinstance(name, str) and name in table:
            return table[name]
    allowed = ", ".join(k for t in tables for k in t)
    raise ValueError(f"{what}={name!r} is not a preset; allowed: {allowed}")


def hardware(name: str) -> HardwareSpec:
    """Return the accelerator preset ``name`` (one of :data:`HARDWARE`, or of
    :data:`REFERENCE_HARDWARE`, the parts only the published measurements use).

    Raises:
        ValueError: ``name`` not a preset name (any non-string included); the message lists the
            presets.
    """
    return _lookup((HARDWARE, REFERENCE_HARDWARE), name, "hardware")


def link(name: str) -> LinkSpec:
    """Return the link preset ``name`` (one of :data:`LINKS` or :data:`REFERENCE_LINKS`).

    Raises:
        ValueError: ``name`` not a preset name (any non-string included); the message lists the
            presets.
    """
    return _lookup((LINKS, REFERENCE_LINKS), name, "link")


def as_link(lk, field: str = "link") -> LinkSpec:
    """``lk`` as a LinkSpec: a preset name is looked up, anything else but a LinkSpec is refused
    with a ValueError naming ``field``."""
    if isinstance(lk, LinkSpec):
        return lk
    return _lookup((LINKS, REFERENCE_LINKS), lk, field)


def as_hardware(hw, field: str = "hw") -> HardwareSpec:
    """``hw`` as a HardwareSpec: a preset name is looked up, anything else but a HardwareSpec is
    refused with a ValueError naming ``field``."""
    if isinstance(hw, str):
        return hardware(hw)
    if not isinstance(hw, HardwareSpec):
        raise ValueError(f"{field}={hw!r} is not allowed; give a hardware preset name or a HardwareSpec")
    return hw


def arithmetic_intensity(flops: float, nbytes: float) -> float:
    """FLOPs per byte moved (FLOP/B), the x axis of a roofline (Williams et al., CACM 2009).

    Raises:
        ValueError: ``flops`` not a non-negative finite number, ``nbytes`` not a positive finite
            number, or a ratio too large for a float.
    """
    require_nonnegative("flops", flops, integer=False)
    require_positive("nbytes", nbytes, integer=False)
    ratio = flops / nbytes
    if not math.isfinite(ratio):
        raise ValueError(f"flops={flops!r} / nbytes={nbytes!r} overflows a float")
    return ratio


def ridge_point(hw: HardwareSpec | str, dtype: str = "bf16") -> float:
    """Arithmetic intensity (FLOP/B) above which a kernel is compute-bound on ``hw``:
    dense peak FLOP/s for ``dtype`` ÷ HBM bandwidth.  H100 SXM BF16: 989.4e12 / 3.35e12 ≈ 295.

    Raises:
        ValueError: ``hw`` neither a hardware preset name nor a HardwareSpec, or a ``dtype``
            without a published peak.
    """
    hw = as_hardware(hw)
    check_dtype(dtype)
    return hw.flops(dtype) / hw.hbm_bandwidth
