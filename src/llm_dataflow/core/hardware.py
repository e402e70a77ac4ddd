"""Hardware presets: GPUs (memory, bandwidth, peak FLOP/s, on-chip sizes) and links.

Every number carries its source.  Bandwidths state explicitly whether they are **per
direction** or **both directions together** (NVIDIA quotes NVLink as the bidirectional
total; the time to move a buffer one way uses the per-direction figure).  Peak FLOP/s are
*dense* tensor-core rates (datasheets also print 2:4-sparse rates, twice as large).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from .units import GB, TB, GiB, KiB, MiB, check_dtype, require_nonnegative, require_positive

__all__ = [
    "HardwareSpec", "LinkSpec", "hardware", "link", "HARDWARE", "LINKS",
    "REFERENCE_HARDWARE", "REFERENCE_LINKS", "DEPLOYMENT_HARDWARE", "arithmetic_intensity", "ridge_point",
    "runtime_memory_bytes", "custom_hardware",
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
        nvlink: the NVLink preset name of this part; ``"none"`` for a part without NVLink,
            ``"unspecified"`` for a custom spec that does not say.
        host_link: the host link preset name.
        architecture: ``"Ampere"``, ``"Hopper"`` or ``"Blackwell"``.
        source: datasheet / whitepaper citations.
        runtime_memory_bytes: the total a process sees (``torch.cuda.mem_get_info()[1]``, what vLLM
            logs as ``total_gpu_memory``), B; ``None`` where no published log was found (then
            :func:`runtime_memory_bytes` falls back to the datasheet figure and says so).
        runtime_memory_source: where ``runtime_memory_bytes`` was read.
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
    runtime_memory_bytes: float | None = None
    runtime_memory_source: str = ""

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
        nvlink="NVLink3", host_link="PCIe-Gen4-x16", source=_A100_SRC,
        runtime_memory_bytes=79.25 * GiB,
        runtime_memory_source="torch OOM message on an A100 80GB: '79.25 GiB total capacity' "
                              "(github.com/levihsu/OOTDiffusion/issues/235); nvidia-smi shows 81,920 MiB"),
    "H100-SXM": HardwareSpec(
        name="H100-SXM", architecture="Hopper", memory_bytes=80 * GB, hbm_bandwidth=3.35 * TB,
        peak_flops={"bf16": 989.4e12, "fp16": 989.4e12, "fp8": 1978.9e12, "tf32": 494.7e12,
                    "fp32": 67e12, "int8": 1978.9e12},
        n_sms=132, l2_bytes=50 * MiB, smem_per_sm_bytes=228 * KiB, registers_per_sm_bytes=256 * KiB,
        tmem_per_sm_bytes=0, boost_clock_hz=1.83e9, nvlink="NVLink4", host_link="PCIe-Gen5-x16",
        source=_H100_SRC, runtime_memory_bytes=79.22 * GiB,
        runtime_memory_source="vLLM memory-profiling log on an 80 GB H100: 'total_gpu_memory 79.22GiB' "
                              "(github.com/vllm-project/vllm/pull/10511, /pull/12126); nvidia-smi: 81,559 MiB"),
    "H200": HardwareSpec(
        name="H200", architecture="Hopper", memory_bytes=141 * GB, hbm_bandwidth=4.8 * TB,
        peak_flops={"bf16": 989.4e12, "fp16": 989.4e12, "fp8": 1978.9e12, "tf32": 494.7e12,
                    "fp32": 67e12, "int8": 1978.9e12},
        n_sms=132, l2_bytes=50 * MiB, smem_per_sm_bytes=228 * KiB, registers_per_sm_bytes=256 * KiB,
        tmem_per_sm_bytes=0, boost_clock_hz=1.83e9, nvlink="NVLink4", host_link="PCIe-Gen5-x16",
        source=_H200_SRC, runtime_memory_bytes=139.81 * GiB,
        runtime_memory_source="vLLM 0.7.3 memory-profiling log of DeepSeek-R1 on 8 × H200 (a published "
                              "deployment note, 2025-03-15): 'total_gpu_memory (139.81GiB)'; nvidia-smi: "
                              "143,771 MiB"),
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


# ---------------------------------------------------------------------------------------------
# Deployment parts: GPUs people serve on (``plan --hardware``).  Own table, like the reference
# parts, so the chapters' calculators (which offer HARDWARE) do not change.  Dense tensor peaks
# (datasheets print 2:4-sparse rates, twice as large); the Ada/Blackwell GeForce parts' BF16 is
# the FP32-accumulate rate.  runtime_memory_bytes only where a published log shows it.
# ---------------------------------------------------------------------------------------------
_AMPERE_GA10X = ("NVIDIA Ampere GA102 GPU Architecture whitepaper (100 KB max shared memory per SM, "
                 "256 KB register file per SM)")
_ADA = ("NVIDIA Ada Lovelace GPU Architecture whitepaper v2.1 (AD10x: 100 KB max shared memory per SM, "
        "256 KB register file per SM)")
_A100_40_SRC = ("NVIDIA A100 Tensor Core GPU datasheet (40GB SXM: HBM2 1,555 GB/s; BF16 312 TFLOPS dense); "
                "A100 architecture whitepaper (108 SMs, 40 MB L2, 164 KB smem/SM)")
_H100_PCIE_SRC = ("NVIDIA H100 Tensor Core GPU datasheet (H100 PCIe: 80 GB HBM2e, 2 TB/s; BF16 1,513 TFLOPS "
                  "sparse = 756 dense; FP8 3,026 sparse = 1,513 dense; TF32 378 dense; FP32 51; NVLink bridge "
                  "600 GB/s; PCIe Gen5); H100 whitepaper (114 SMs, 50 MB L2, 1,755 MHz boost)")
_H20_SRC = ("NVIDIA H20 product brief as reported by vendors' spec sheets (96 GB HBM3, 4.0 TB/s; BF16 148 "
            "TFLOPS, FP8 296, INT8 296, TF32 74, FP32 44; NVLink 900 GB/s; PCIe Gen5); Hopper SM as H100")
_L4_SRC = ("NVIDIA L4 Tensor Core GPU datasheet (24 GB GDDR6, 300 GB/s; BF16 242 TFLOPS sparse = 121 dense; "
           "FP8 485 sparse = 242.5 dense; TF32 60; FP32 30.3; PCIe Gen4 x16; no NVLink); " + _ADA +
           " (AD104 in L4: 58 SMs, 48 MB L2, 2,040 MHz boost)")
_L40S_SRC = ("NVIDIA L40S GPU datasheet (48 GB GDDR6, 864 GB/s; BF16 733 TFLOPS sparse = 366 dense; FP8 1,466 "
             "sparse = 733 dense; TF32 183; FP32 91.6; PCIe Gen4 x16; no NVLink); " + _ADA +
             " (AD102 in L40S: 142 SMs, 96 MB L2, 2,520 MHz boost)")
_A10_SRC = ("NVIDIA A10 Tensor Core GPU datasheet (24 GB GDDR6, 600 GB/s; BF16 250 TFLOPS sparse = 125 dense; "
            "TF32 62.5; FP32 31.2; INT8 250 dense; PCIe Gen4); " + _AMPERE_GA10X +
            " (GA102 in A10: 72 SMs, 6 MB L2, 1,695 MHz boost)")
_RTX4090_SRC = ("NVIDIA Ada Lovelace GPU Architecture whitepaper v2.1, Appendix A (GeForce RTX 4090: 24 GB "
                "GDDR6X, 1,008 GB/s; 128 SMs; 72 MB L2; 2,520 MHz boost; FP16/BF16 tensor with FP32 accumulate "
                "165.2 TFLOPS dense; FP8 with FP32 accumulate 330.3 dense; INT8 660.6 dense; TF32 82.6; FP32 "
                "82.6; no NVLink)")
_RTX5090_SRC = ("NVIDIA RTX Blackwell GPU Architecture whitepaper (GeForce RTX 5090: 32 GB GDDR7, 1,792 GB/s; "
                "170 SMs; 96 MB L2; 2,407 MHz boost; FP16/BF16 tensor with FP32 accumulate 209.5 TFLOPS dense; "
                "FP8 419 dense; FP4 838 dense; FP32 104.8; no NVLink; PCIe Gen5); CUDA C++ Programming Guide, "
                "compute capability 12.0: 100 KB max shared memory per SM")
_NO_RUNTIME = "no published runtime total found; the datasheet figure is used"


def _part(name, arch, mem, bw, peak, sms, l2, smem, clock, nvlink, host, src, runtime=None, runtime_src="",
          notes=""):
    return HardwareSpec(name=name, architecture=arch, memory_bytes=mem, hbm_bandwidth=bw, peak_flops=peak,
                        n_sms=sms, l2_bytes=l2, smem_per_sm_bytes=smem, registers_per_sm_bytes=256 * KiB,
                        tmem_per_sm_bytes=0, boost_clock_hz=clock, nvlink=nvlink, host_link=host, source=src,
                        notes=notes, runtime_memory_bytes=runtime,
                        runtime_memory_source=runtime_src or _NO_RUNTIME)


DEPLOYMENT_HARDWARE: dict[str, HardwareSpec] = {
    "A100-40GB-SXM": _part(
        "A100-40GB-SXM", "Ampere", 40 * GB, 1555 * GB,
        {"bf16": 312e12, "fp16": 312e12, "tf32": 156e12, "fp32": 19.5e12, "int8": 624e12},
        108, 40 * MiB, 164 * KiB, 1.41e9, "NVLink3", "PCIe-Gen4-x16", _A100_40_SRC, 39.50 * GiB,
        "torch OOM message on an A100 (40 GB): 'a total capacity of 39.50 GiB' "
        "(github.com/TianheWu/CoSeR/issues/10); nvidia-smi shows 40,960 MiB"),
    "H100-PCIe": _part(
        "H100-PCIe", "Hopper", 80 * GB, 2.0 * TB,
        {"bf16": 756e12, "fp16": 756e12, "fp8": 1513e12, "tf32": 378e12, "fp32": 51e12, "int8": 1513e12},
        114, 50 * MiB, 228 * KiB, 1.755e9, "NVLink4", "PCIe-Gen5-x16", _H100_PCIE_SRC,
        notes="NVLink here is the 600 GB/s bridge between pairs, not NVSwitch; the NVLink4 preset's 900 GB/s "
              "overstates it."),
    "H20": _part(
        "H20", "Hopper", 96 * GB, 4.0 * TB,
        {"bf16": 148e12, "fp16": 148e12, "fp8": 296e12, "tf32": 74e12, "fp32": 44e12, "int8": 296e12},
        78, 60 * MiB, 228 * KiB, 1.98e9, "NVLink4", "PCIe-Gen5-x16", _H20_SRC, 95.00 * GiB,
        "torch OOM message on an H20 ('H20 96G' in the report's title): 'a total capacity of 95.00 GiB' "
        "(github.com/modelscope/DiffSynth-Studio/issues/1238); the card's 96 GB are nearer 96 GiB",
        notes="NVIDIA publishes no H20 datasheet on its site; SM count, L2 and clock are indicative."),
    "L4": _part(
        "L4", "Ada", 24 * GB, 300 * GB,
        {"bf16": 121e12, "fp16": 121e12, "fp8": 242.5e12, "tf32": 60e12, "fp32": 30.3e12, "int8": 242.5e12},
        58, 48 * MiB, 100 * KiB, 2.04e9, "none", "PCIe-Gen4-x16", _L4_SRC),
    "L40S": _part(
        "L40S", "Ada", 48 * GB, 864 * GB,
        {"bf16": 366e12, "fp16": 366e12, "fp8": 733e12, "tf32": 183e12, "fp32": 91.6e12, "int8": 733e12},
        142, 96 * MiB, 100 * KiB, 2.52e9, "none", "PCIe-Gen4-x16", _L40S_SRC, 44.31 * GiB,
        "vLLM log on an L40S: 'the current vLLM instance can use total_gpu_memory (44.31GiB)' "
        "(github.com/vllm-project/vllm/issues/15196, with the NVIDIA_L40S MoE config path; the same report "
        "in github.com/gpustack/gpustack/issues/1457)"),
    "A10": _part(
        "A10", "Ampere", 24 * GB, 600 * GB,
        {"bf16": 125e12, "fp16": 125e12, "tf32": 62.5e12, "fp32": 31.2e12, "int8": 250e12},
        72, 6 * MiB, 100 * KiB, 1.695e9, "none", "PCIe-Gen4-x16", _A10_SRC, 22.18 * GiB,
        "torch OOM message on one A10 under vLLM: 'a total capacity of 22.18 GiB' "
        "(github.com/OpenBMB/MiniCPM-V/issues/640); AWS's A10G logs 21.99 GiB "
        "(github.com/vllm-project/vllm/issues/16199)",
        notes="AWS's A10G (G5 instances) is a GA102 variant with the same 24 GB and 600 GB/s; AWS publishes "
              "no tensor peak for it, so use this preset with that caveat."),
    "RTX-4090": _part(
        "RTX-4090", "Ada", 24 * GB, 1008 * GB,
        {"bf16": 165.2e12, "fp16": 165.2e12, "fp8": 330.3e12, "tf32": 82.6e12, "fp32": 82.6e12,
         "int8": 660.6e12},
        128, 72 * MiB, 100 * KiB, 2.52e9, "none", "PCIe-Gen4-x16", _RTX4090_SRC, 23.64 * GiB,
        "torch OOM message on an RTX 4090: 'a total capacty of 23.64 GiB' "
        "(github.com/3DTopia/Phidias-Diffusion/issues/8); nvidia-smi: 24,564 MiB "
        "(github.com/vllm-project/vllm/issues/7553)"),
    "RTX-5090": _part(
        "RTX-5090", "Blackwell", 32 * GB, 1792 * GB,
        {"bf16": 209.5e12, "fp16": 209.5e12, "fp8": 419e12, "fp4": 838e12, "fp32": 104.8e12},
        170, 96 * MiB, 100 * KiB, 2.407e9, "none", "PCIe-Gen5-x16", _RTX5090_SRC, 31.36 * GiB,
        "torch OOM message on an RTX 5090 ('GPU type: NVIDIA GeForce RTX 5090'): 'a total capacity of "
        "31.36 GiB' (github.com/hiyouga/LlamaFactory/issues/7798); 31.37 on another host "
        "(github.com/Wan-Video/Wan2.2/issues/51)"),
}

#: Fields of a custom ``--hardware`` spec: name → (HardwareSpec field, unit, multiplier).
_CUSTOM_FIELDS = {
    "memory_gb": ("memory_bytes", GB), "memory_gib": ("memory_bytes", GiB),
    "runtime_gib": ("runtime_memory_bytes", GiB),
    "bandwidth_gbs": ("hbm_bandwidth", GB),
    "bf16_tflops": ("bf16", 1e12), "fp16_tflops": ("fp16", 1e12), "fp8_tflops": ("fp8", 1e12),
    "fp4_tflops": ("fp4", 1e12), "int8_tops": ("int8", 1e12), "tf32_tflops": ("tf32", 1e12),
    "fp32_tflops": ("fp32", 1e12),
}


def custom_hardware(spec: str) -> HardwareSpec:
    """A HardwareSpec from ``"key=value,key=value"``: ``memory_gb`` (or ``memory_gib``),
    ``bandwidth_gbs`` and at least one peak (``bf16_tflops``, ``fp16_tflops``, ``fp8_tflops``,
    ``fp4_tflops``, ``int8_tops``, ``tf32_tflops``, ``fp32_tflops``; dense) are required;
    ``runtime_gib`` (the total ``torch.cuda.mem_get_info`` reports), ``link`` (a link preset,
    default ``PCIe-Gen4-x16``), ``nvlink`` (``none``, or an NVLink preset: ``NVLink3``,
    ``NVLink4``, ``NVLink5``; default ``unspecified``, which the serving engine's memory treats
    as NVLink) and ``name`` (default ``custom``) are optional.  Fields the book
    uses only in the chapters (SMs, L2, shared memory) are 0 / ``None``.

    Example: ``custom_hardware("name=RTX-3090,memory_gb=24,bandwidth_gbs=936,bf16_tflops=71")``.

    Raises:
        ValueError: naming the field: an unknown key, a value that is not a positive number, a
            missing required key, or an unknown link.
    """
    if not isinstance(spec, str) or "=" not in spec:
        raise ValueError(f"spec={spec!r} is neither a preset nor a custom hardware spec 'memory_gb=..,"
                         "bandwidth_gbs=..,bf16_tflops=..'")
    vals, peak, name, lk, nvl = {}, {}, "custom", "PCIe-Gen4-x16", "unspecified"
    for item in spec.split(","):
        key, sep, val = (x.strip() for x in item.partition("="))
        if not sep:
            raise ValueError(f"hardware spec: {item!r} is not key=value")
        if key == "name":
            name = val or name
            continue
        if key == "link":
            lk = as_link(val, "hardware spec link").name
            continue
        if key == "nvlink":
            if val != "none" and not (val.startswith("NVLink") and val in LINKS):
                raise ValueError(f"hardware spec: nvlink={val!r} is not allowed; allowed: none, "
                                 + ", ".join(k for k in LINKS if k.startswith("NVLink")))
            nvl = val
            continue
        if key not in _CUSTOM_FIELDS:
            raise ValueError(f"hardware spec: {key}={val!r} is not allowed; allowed keys: name, link, nvlink, "
                             f"{', '.join(_CUSTOM_FIELDS)}")
        try:
            x = float(val)
        except ValueError:
            x = float("nan")
        if not (math.isfinite(x) and x > 0):
            raise ValueError(f"hardware spec: {key}={val!r} is not allowed; it must be a positive number")
        target, mult = _CUSTOM_FIELDS[key]
        (vals if target in ("memory_bytes", "runtime_memory_bytes", "hbm_bandwidth") else peak)[target] = x * mult
    for need in ("memory_bytes", "hbm_bandwidth"):
        if need not in vals:
            raise ValueError(f"hardware spec: {'memory_gb' if need == 'memory_bytes' else 'bandwidth_gbs'} is "
                             "missing; a custom spec needs memory_gb, bandwidth_gbs and a peak")
    if not peak:
        raise ValueError("hardware spec: no peak given; add bf16_tflops (or fp16_tflops, fp8_tflops, ...)")
    return HardwareSpec(name=name, architecture="custom", memory_bytes=vals["memory_bytes"],
                        hbm_bandwidth=vals["hbm_bandwidth"], peak_flops=peak, n_sms=0, l2_bytes=None,
                        smem_per_sm_bytes=0, registers_per_sm_bytes=0, tmem_per_sm_bytes=0, boost_clock_hz=0.0,
                        nvlink=nvl, host_link=lk, source="given on the command line: " + spec,
                        runtime_memory_bytes=vals.get("runtime_memory_bytes"),
                        runtime_memory_source="given (runtime_gib)" if "runtime_memory_bytes" in vals
                        else _NO_RUNTIME)


def runtime_memory_bytes(hw) -> tuple[float, str]:
    """(the total memory a serving engine sees on ``hw``, B; where it comes from): the preset's
    published runtime total, else its datasheet figure, labelled as such.

    Raises:
        ValueError: ``hw`` neither a preset name nor a HardwareSpec.
    """
    hw = as_hardware(hw)
    if hw.runtime_memory_bytes:
        return hw.runtime_memory_bytes, hw.runtime_memory_source
    return hw.memory_bytes, hw.runtime_memory_source or _NO_RUNTIME


def _lookup(tables: tuple, name: str, what: str):
    for table in tables:
        if isinstance(name, str) and name in table:
            return table[name]
    allowed = ", ".join(k for t in tables for k in t)
    raise ValueError(f"{what}={name!r} is not a preset; allowed: {allowed}")


def hardware(name: str) -> HardwareSpec:
    """Return the accelerator preset ``name`` (one of :data:`HARDWARE`, of
    :data:`DEPLOYMENT_HARDWARE` (parts people serve on, for ``plan``), or of
    :data:`REFERENCE_HARDWARE`, the parts only the published measurements use).

    Raises:
        ValueError: ``name`` not a preset name (any non-string included); the message lists the
            presets.
    """
    return _lookup((HARDWARE, DEPLOYMENT_HARDWARE, REFERENCE_HARDWARE), name, "hardware")


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
