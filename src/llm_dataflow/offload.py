"""Weight offload: run the decoder with its layers resident vs streamed from host memory (chapter 01).

When the weights do not fit in device memory, a runtime can keep them in host memory and copy
each layer over the host link just before it runs (layer-by-layer offload, as in FlexGen,
Sheng et al. 2023, arXiv:2303.06865, and Hugging Face Accelerate's ``cpu_offload``).  The cost
model per layer is

    t_transfer(l) = layer_bytes(l) / link bandwidth (per direction)

and with two device-side buffers (double buffering) the copy of layer ``l+1`` overlaps the
compute of layer ``l``, so a forward takes about ``t_copy(0) + Σ_l max(t_compute(l), t_copy(l+1))``
instead of ``Σ_l (t_copy(l) + t_compute(l))``.

On a GPU, :func:`offload_run` keeps the layers in **pinned** host memory (page-locked, so the
DMA engine copies them asynchronously), issues the copies on a side CUDA stream and times copies
and compute with CUDA events.  On a CPU, "host" and "device" are the same DRAM: the streamed path
still copies every layer's weights into a device-side buffer before computing it (a real
``memcpy``, timed), but there is no separate copy engine to overlap with — the copy would compete
with the compute for the same cores and memory bandwidth — so the CPU run is serial and the
overlap is only modelled.  The embedding, final norm and LM head stay resident in both modes;
their time is measured too and added to both models, so a model and a wall time describe the
same whole forward (a layers-only sum under a whole-forward wall would look faster than the
resident run, which no streamed run can be).
"""
from __future__ import annotations

import copy
import time

import torch
from torch import nn

from .core.config import ModelConfig, model_config
from .core.hardware import link as get_link
from .core.units import require_positive
from .measure import device as default_device, synchronize
from .model import Decoder

__all__ = ["layer_nbytes", "offload_run", "offload_table"]


def layer_nbytes(model: Decoder, layer: int) -> int:
    """Bytes of layer ``layer``'s parameters (what one streamed layer moves over the link).

    Raises:
        ValueError: ``layer`` out of range.
    """
    n = len(model.model.layers)
    if not isinstance(layer, int) or not 0 <= layer < n:
        raise ValueError(f"layer={layer!r} is out of range; allowed 0..{n - 1}")
    return sum(p.numel() * p.element_size() for p in model.model.layers[layer].parameters())


def _skeleton(host: Decoder, dev) -> Decoder:
    """The resident part (embedding, final norm, LM head, RoPE tables) on ``dev``, no layers."""
    layers = host.model.layers
    host.model.layers = nn.ModuleList()
    try:
        skel = copy.deepcopy(host).to(dev)
    finally:
        host.model.layers = layers
    return skel


def _set_slot(slot, i, cfg):
    slot.self_attn.layer = i
    slot.self_attn.layer_type = cfg.layer_type(i)


class _Timer:
    """CUDA events on a GPU, perf_counter (after a sync) on a CPU; ``elapsed(a, b)`` in s."""

    def __init__(self, dev):
        self.cuda = dev.type == "cuda"
        self.dev = dev

    def mark(self, stream=None):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record(stream) if stream is not None else e.record()
            return e
        return time.perf_counter()

    def elapsed(self, a, b):
        return a.elapsed_time(b) / 1e3 if self.cuda else b - a


def _non_layer(timer, t_start, prepared, finishing, t_end):
    """Seconds outside the layers: embedding and context (``t_start``→``prepared``), final norm
    and LM head (``finishing``→``t_end``)."""
    return timer.elapsed(t_start, prepared) + timer.elapsed(finishing, t_end)


def _run_resident(model, ids, timer):
    comp = []
    t_start = timer.mark()
    h, ctx = model.prepare(ids)
    if not timer.cuda:
        synchronize(timer.dev)
    prepared = timer.mark()
    for layer in model.model.layers:
        a = timer.mark()
        h = layer(h, ctx)
        if not timer.cuda:
            synchronize(timer.dev)
        comp.append((a, timer.mark()))
    finishing = timer.mark()
    logits = model.finish(h)
    t_end = timer.mark()
    synchronize(timer.dev)
    return (logits, [timer.elapsed(a, b) for a, b in comp], timer.elapsed(t_start, t_end),
            _non_layer(timer, t_start, prepared, finishing, t_end))


def _run_streamed(skel, host_params, slots, cfg, ids, timer, overlap):
    L = len(host_params)
    cuda = timer.cuda
    copy_ev, comp_ev, freed = [None] * L, [None] * L, [None] * L
    copy_stream = torch.cuda.Stream(timer.dev) if cuda else None

    def issue_copy(i):
        slot = slots[(cfg.is_moe_layer(i), i % 2)]
        if cuda:
            with torch.cuda.stream(copy_stream):
                # the slot was last used by layer i-2; serial mode also waits for layer i-1
                for j in (i - 2,) if overlap else (i - 2, i - 1):
                    if j >= 0 and freed[j] is not None:
                        copy_stream.wait_event(freed[j])
                a = timer.mark(copy_stream)
                for d, s in zip(slot[1], host_params[i]):
                    d.copy_(s, non_blocking=True)  # pinned host → device, DMA on the copy stream
                copy_ev[i] = (a, timer.mark(copy_stream))
        else:
            a = timer.mark()
            for d, s in zip(slot[1], host_params[i]):
                d.copy_(s)  # host → "device" buffer: a memcpy within the same DRAM
            copy_ev[i] = (a, timer.mark())

    t_start = timer.mark()
    h, ctx = skel.prepare(ids)
    if not cuda:
        synchronize(timer.dev)
    prepared = timer.mark()
    issue_copy(0)
    for i in range(L):
        if overlap and cuda and i + 1 < L:
            issue_copy(i + 1)  # prefetch the next layer while this one computes
        slot = slots[(cfg.is_moe_layer(i), i % 2)]
        if cuda:
            torch.cuda.current_stream(timer.dev).wait_event(copy_ev[i][1])
        _set_slot(slot[0], i, cfg)
        a = timer.mark()
        h = slot[0](h, ctx)
        if not cuda:
            synchronize(timer.dev)
        b = timer.mark()
        comp_ev[i] = (a, b)
        freed[i] = b if cuda else None
        if not (overlap and cuda) and i + 1 < L:
            issue_copy(i + 1)
    finishing = timer.mark()
    logits = skel.finish(h)
    t_end = timer.mark()
    synchronize(timer.dev)
    return (logits, [timer.elapsed(*e) for e in copy_ev], [timer.elapsed(*e) for e in comp_ev],
            timer.elapsed(t_start, t_end), _non_layer(timer, t_start, prepared, finishing, t_end))


def offload_run(cfg: ModelConfig | str = "tiny-llama", batch: int = 1, seq_len: int = 32,
                link: str = "PCIe-Gen5-x16", dtype: torch.dtype = torch.float32, device=None,
                repeat: int = 3, seed: int = 0, model: Decoder | None = None) -> dict:
    """Run one prefill forward of ``[batch, seq_len]`` tokens resident, streamed serially and
    (on a GPU) streamed with copies overlapped with compute; time each layer.

    Args:
        cfg: a config or preset name (ignored when ``model`` is given).
        link: the host link preset for the analytic transfer time (:func:`llm_dataflow.link`).
        device: where compute runs (default :func:`llm_dataflow.device`).
        repeat: timed repetitions after one warm-up; per-layer and whole-forward times are the
            minimum over the repetitions (the run least disturbed by other processes: each
            layer is milliseconds or less, so one preemption would otherwise dominate).
        model: a host-side :class:`Decoder` (default: ``Decoder(cfg)`` seeded, on CPU).

    Returns:
        dict with ``"layers"`` (the per-layer table of :func:`offload_table`), ``"wall_resident"``,
        ``"wall_serial"``, ``"wall_overlap"`` (s, measured, best of ``repeat``; ``wall_overlap`` is ``None`` on CPU),
        ``"wall_resident_runs"`` and ``"wall_serial_runs"`` (every repetition's wall, s: their spread is
        this machine's timing noise, against which to read the walls' difference),
        ``"non_layer_s"`` (s, measured in the serial streamed run: embedding and context before the
        first layer, final norm and LM head after the last; ``"non_layer_resident_s"`` the same in
        the resident run), ``"model_serial"`` = non-layer + Σ(copy + compute) and
        ``"model_overlap"`` = non-layer + copy₀ + Σ max(compute_l, copy_{l+1}) from the measured
        times (s: whole forwards, comparable with the walls), ``"model_serial_layers"`` and
        ``"model_overlap_layers"`` (the same sums over the layers alone, s),
        ``"link_bandwidth"`` (B/s per direction),
        ``"copy_bandwidth"`` (measured bytes / copy time, B/s), ``"pinned"``, ``"overlapped"``
        (bools), ``"device"`` and ``"max_abs_diff"`` between resident and streamed logits.

    Raises:
        ValueError: bad sizes, unknown preset or link.
    """
    import pandas as pd

    require_positive("batch", batch)
    require_positive("seq_len", seq_len)
    require_positive("repeat", repeat)
    lk = get_link(link)
    if model is None:
        cfg = model_config(cfg) if isinstance(cfg, str) else cfg
        torch.manual_seed(seed)
        model = Decoder(cfg, dtype=dtype)
    cfg = model.cfg
    host = model.cpu()
    dev = torch.device(device) if device is not None else default_device()
    timer = _Timer(dev)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, cfg.vocab_size, (batch, seq_len), generator=g).to(dev)
    L = cfg.n_layers
    resident = copy.deepcopy(host).to(dev) if dev.type == "cuda" else host
    pinned = dev.type == "cuda"
    host_params = [[p.detach().pin_memory() if pinned else p.detach() for p in lay.parameters()]
                   for lay in host.model.layers]
    skel = _skeleton(host, dev)
    slots = {}
    for i in range(L):  # two device-side buffers per layer structure (dense / MoE)
        key = (cfg.is_moe_layer(i), i % 2)
        if key not in slots:
            m = copy.deepcopy(host.model.layers[i]).to(dev)
            slots[key] = (m, list(m.parameters()))
    nbytes = [layer_nbytes(host, i) for i in range(L)]

    res, ser, ovl = [], [], []
    with torch.inference_mode():
        for r in range(repeat + 1):  # first run warms up (allocations, kernel selection)
            res.append(_run_resident(resident, ids, timer))
            ser.append(_run_streamed(skel, host_params, slots, cfg, ids, timer, overlap=False))
            if dev.type == "cuda":
                ovl.append(_run_streamed(skel, host_params, slots, cfg, ids, timer, overlap=True))
    res, ser, ovl = res[1:], ser[1:], ovl[1:]
    med = min  # best of `repeat` (see the docstring)
    comp_res = [med(x[1][i] for x in res) for i in range(L)]
    copy_ser = [med(x[1][i] for x in ser) for i in range(L)]
    comp_ser = [med(x[2][i] for x in ser) for i in range(L)]
    rows = []
    for i in range(L):
        row = {"layer": i, "bytes": nbytes[i], "transfer_analytic_s": nbytes[i] / lk.bandwidth_per_direction,
               "transfer_s": copy_ser[i], "compute_s": comp_ser[i], "compute_resident_s": comp_res[i]}
        if ovl:
            row["transfer_overlap_s"] = med(x[1][i] for x in ovl)
            row["compute_overlap_s"] = med(x[2][i] for x in ovl)
        rows.append(row)
    frame = pd.DataFrame(rows)
    # the walls time the embedding, final norm and LM head too: the models add the streamed
    # run's own measured time outside the layers, so they describe the same whole forward
    non_layer = med(x[4] for x in ser)
    layers_serial = sum(copy_ser) + sum(comp_ser)
    layers_overlap = copy_ser[0] + sum(max(comp_ser[i], copy_ser[i + 1] if i + 1 < L else 0.0) for i in range(L))
    diff = float((res[-1][0].float() - ser[-1][0].float()).abs().max())
    if ovl:
        diff = max(diff, float((res[-1][0].float() - ovl[-1][0].float()).abs().max()))
    return {"layers": frame, "wall_resident": med(x[2] for x in res), "wall_serial": med(x[3] for x in ser),
            "wall_overlap": med(x[3] for x in ovl) if ovl else None,
            "wall_resident_runs": [x[2] for x in res], "wall_serial_runs": [x[3] for x in ser],
            "non_layer_s": non_layer, "non_layer_resident_s": med(x[3] for x in res),
            "model_serial": non_layer + layers_serial, "model_overlap": non_layer + layers_overlap,
            "model_serial_layers": layers_serial, "model_overlap_layers": layers_overlap,
            "link": lk.name, "link_bandwidth": lk.bandwidth_per_direction,
            "copy_bandwidth": sum(nbytes) / sum(copy_ser), "pinned": pinned, "overlapped": bool(ovl),
            "device": str(dev), "max_abs_diff": diff}


def offload_table(cfg: ModelConfig | str = "tiny-llama", batch: int = 1, seq_len: int = 32,
                  link: str = "PCIe-Gen5-x16", dtype: torch.dtype = torch.float32, device=None,
                  repeat: int = 3, seed: int = 0):
    """Per-layer table of :func:`offload_run` (``pandas.DataFrame``).

    Columns: ``layer``; ``bytes`` (the layer's parameters); ``transfer_analytic_s`` = bytes / link
    bandwidth per direction (s); ``transfer_s``, ``compute_s`` (measured, serial streamed run, s);
    ``compute_resident_s`` (measured, weights resident, s); on a GPU also ``transfer_overlap_s``,
    ``compute_overlap_s`` (the overlapped run).

    Raises:
        ValueError: see :func:`offload_run`.
    """
    return offload_run(cfg, batch, seq_len, link, dtype, device, repeat, seed)["layers"]
