"""Chapter 01's diagram: the load path of a model's weights into one GPU, and offload.

``ch01_loadpath`` draws the default route (storage → page cache → CPU tensors → pinned bounce
buffer → DMA over PCIe → HBM), GPUDirect Storage's bypass, and offload's streaming, with the
chapter's numbers for Llama-3-8B in BF16 on one H100 SXM: the weight bytes, their least time over
PCIe, and one decoder layer's copy over PCIe against its read from HBM (drawn to a linear scale,
so the gap shows as it is).  Every number comes from the core (:func:`~llm_dataflow.core.
accounting.weight_bytes`, :func:`~llm_dataflow.core.accounting.layer_weight_bytes`, the hardware
and link presets); :func:`loadpath_numbers` returns them for the chapter's tests.  Storage has no
number: its speed is the reader's drive's, which the chapter measures.
"""
from __future__ import annotations

from ..core.accounting import layer_weight_bytes, weight_bytes
from ..core.config import model_config
from ..core.hardware import hardware, link
from ..core.units import fmt_bytes, fmt_si
from .svg import PALETTE, Canvas, pick

__all__ = ["DIAGRAMS", "loadpath_numbers", "LOAD"]

#: What chapter 01's diagram loads: model, weight format, GPU.
LOAD = {"model": "Llama-3-8B", "dtype": "bf16", "hardware": "H100-SXM"}


def loadpath_numbers(load: dict | None = None) -> dict:
    """The numbers :func:`draw` shows, for ``load`` (default :data:`LOAD`).

    Returns:
        dict: ``weight_bytes`` (stored, B), ``link`` and ``link_bandwidth`` (the GPU's host link,
        per direction, B/s), ``load_s`` (weight bytes over it: a lower bound, s),
        ``layer_bytes`` (one decoder layer, B: :func:`layer_weight_bytes` ÷ layers),
        ``layer_pcie_s`` and ``layer_hbm_s`` (that layer over the host link and over HBM, s),
        ``ratio`` (HBM over host-link bandwidth), ``hbm_bandwidth`` and ``hbm_bytes``.

    Raises:
        ValueError: as :func:`~llm_dataflow.core.accounting.weight_bytes` or the presets.
    """
    r = dict(LOAD, **(load or {}))
    cfg, hw = model_config(r["model"]), hardware(r["hardware"])
    lk = link(hw.host_link)
    wb = weight_bytes(cfg, r["dtype"])
    layer = layer_weight_bytes(cfg, r["dtype"]) / cfg.n_layers
    return {"weight_bytes": wb, "link": lk.name, "link_bandwidth": lk.bandwidth_per_direction,
            "load_s": wb / lk.bandwidth_per_direction, "layer_bytes": layer,
            "layer_pcie_s": layer / lk.bandwidth_per_direction, "layer_hbm_s": layer / hw.hbm_bandwidth,
            "ratio": hw.hbm_bandwidth / lk.bandwidth_per_direction,
            "hbm_bandwidth": hw.hbm_bandwidth, "hbm_bytes": hw.memory_bytes}


def draw(lang: str) -> str:
    """The load path of chapter 01, in ``lang`` (``"en"`` or ``"zh_CN"``)."""
    n = loadpath_numbers()
    t = lambda en, zh: pick(lang, en, zh)   # noqa: E731
    W, H = 420, 640
    c = Canvas(W, H, lang=lang, title=t(
        "The load path of a model's weights into one GPU, GPUDirect Storage's bypass, and offload",
        "模型权重加载到单块 GPU 的路径、GPUDirect Storage 的旁路，以及卸载（offload）"))
    muted, host, hbm = PALETTE["muted"], PALETTE["host"], PALETTE["hbm"]
    wb = fmt_bytes(n["weight_bytes"])
    c.text(8, 20, t(f"Loading Llama-3-8B (BF16, {wb})", f"加载 Llama-3-8B（BF16，{wb}）"), size=14, weight="bold")
    c.text(8, 38, t("into one H100", "到单块 H100"), size=14, fill=muted)

    x0, w = 48, 180
    cx = x0 + w / 2
    boxes = {   # name: (y, h, label, colour)
        "storage": (54, 44, t("storage\nNVMe, network FS", "存储\nNVMe、网络文件系统"), PALETTE["storage"]),
        "cache": (134, 44, t("page cache\nhost DRAM", "page cache\n主机 DRAM"), host),
        "pinned": (214, 44, t("pinned bounce buffer\nhost DRAM", "锁页中转缓冲\n主机 DRAM"), host),
        "hbm": (310, 48, f"HBM · {fmt_bytes(n['hbm_bytes'], digits=0)}\n{fmt_si(n['hbm_bandwidth'], 'B/s')}", hbm),
    }
    for y, h, label, colour in boxes.values():
        c.box(x0, y, w, h, label, size=14, stroke=colour, width=2)
    order = list(boxes)
    rx = 242
    notes = [
        (t("read: your drive's speed", "读取：取决于你的存储设备"), None),
        (t("CPU: copy into tensors,", "CPU：拷入张量、"), t("convert the dtype", "转换数据类型")),
        (t(f"DMA over PCIe, {fmt_si(n['link_bandwidth'], 'B/s')}:", f"经 PCIe 做 DMA，{fmt_si(n['link_bandwidth'], 'B/s')}："),
         f"{wb} ≥ {fmt_si(n['load_s'], 's')}"),
    ]
    for (a, b), (note1, note2) in zip(zip(order, order[1:]), notes):
        ya, yb = boxes[a][0] + boxes[a][1], boxes[b][0]
        c.line(cx, ya, cx, yb - 2, stroke=host if b != "hbm" else hbm, width=2, arrow="end")
        ym = (ya + yb) / 2
        c.text(rx, ym + (0 if note2 else 5), note1, size=13)
        if note2:
            c.text(rx, ym + 17, note2, size=13, weight="bold" if "≥" in note2 else "normal")
    # GPUDirect Storage: storage → HBM by DMA, no bounce buffer
    gx = 26
    ys, yh = boxes["storage"][0] + 22, boxes["hbm"][0] + 24
    c.path(f"M{x0},{ys} L{gx},{ys} L{gx},{yh} L{x0 - 2},{yh}", stroke=PALETTE["storage"], width=2, dash="5 4",
           arrow="end")
    c.rect(gx - 17, 186, 34, 22, fill="#ffffff", stroke="#ffffff", width=0)
    c.text(gx, 202, "GDS", size=13, anchor="middle", weight="bold", fill=PALETTE["storage"])
    c.text(8, 386, t("GDS: storage → HBM by DMA, no bounce", "GDS：存储 → HBM 直接 DMA，"), size=13,
           fill=PALETTE["storage"])
    c.text(8, 403, t("buffer, where its conditions hold", "不经中转缓冲（条件满足时）"), size=13, fill=PALETTE["storage"])

    # offload: the layers stay in pinned host memory and cross PCIe on every forward pass
    y0 = 440
    c.line(8, y0 - 12, W - 8, y0 - 12, stroke="#d0d0d0", width=1)
    c.text(8, y0 + 8, t("Offload: layers stay in host DRAM", "卸载（offload）：各层留在主机 DRAM，"), size=14, weight="bold")
    c.text(8, y0 + 26, t("and cross PCIe on every pass", "每次前向都要经 PCIe 送入"), size=14, weight="bold")
    lb = fmt_bytes(n["layer_bytes"], digits=0)
    c.text(8, y0 + 50, t(f"one layer ({lb}), to scale:", f"一层（{lb}），按比例绘制："), size=13, fill=muted)
    bar_w = W - 16 - 8
    scale = bar_w / n["layer_pcie_s"]
    for i, (label, sec, colour) in enumerate(((t("over PCIe", "经 PCIe"), n["layer_pcie_s"], host),
                                              (t("resident, read from HBM", "驻留时从 HBM 读"), n["layer_hbm_s"], hbm))):
        y = y0 + 62 + i * 52
        c.rect(8, y, max(2.0, sec * scale), 18, fill=colour, stroke=colour, width=1, rx=2)
        c.text(8, y + 36, f"{label}{t(': ', '：')}{fmt_si(sec, 's')}", size=13, weight="bold", fill=colour)
    c.text(8, y0 + 182, t(f"{n['ratio']:.0f}× slower: decode runs at the link's speed",
                          f"用时是后者的 {n['ratio']:.0f} 倍：Decode 受限于链路速度"), size=13)
    return c.svg()


DIAGRAMS = {"ch01_loadpath": draw}
