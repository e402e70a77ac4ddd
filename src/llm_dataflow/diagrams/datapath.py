"""Chapter 00's diagram: the data path of one request through the tiers of one GPU.

``ch00_datapath`` draws the tiers (storage, host DRAM, HBM, L2, the SM's shared memory and
registers, the tensor cores) as a column, and the four kinds of movement of chapter 00 with this
request's bytes and least times: Llama-2-7B in BF16, a 512-token prompt and 128 output tokens,
batch 1, on one H100 SXM.  Every number is computed here from the package's core and ledger
(:func:`~llm_dataflow.ledger.request_ledger`, :func:`~llm_dataflow.ledger.movement_times`, the
hardware presets), the same calls chapter 00's cells make; :func:`datapath_numbers` returns them
so the chapter's tests can pin what the diagram shows.
"""
from __future__ import annotations

from ..core.config import model_config
from ..core.units import fmt_bytes, fmt_si
from ..core.hardware import hardware, link
from ..ledger import movement_times, movement_totals, request_ledger
from .svg import PALETTE, Canvas, pick

__all__ = ["DIAGRAMS", "datapath_numbers", "REQUEST"]

#: The request chapter 00 follows: model, prompt and output tokens, batch, weight dtype, GPU.
REQUEST = {"model": "Llama-2-7B", "prompt_len": 512, "output_len": 128, "batch": 1, "dtype": "bf16",
           "hardware": "H100-SXM"}


def datapath_numbers(request: dict | None = None) -> dict:
    """The numbers :func:`draw` shows, for ``request`` (default :data:`REQUEST`).

    Returns:
        dict: ``bytes`` and ``seconds`` per kind of movement (:func:`movement_totals`,
        :func:`movement_times`: bytes over the path's bandwidth, a lower bound), ``load_bytes``
        (the weights copied once), ``step_bytes`` (weights one decode step reads) and
        ``step_s`` (that over HBM bandwidth), ``passes`` (prefill + decode steps),
        ``hbm_bandwidth``, ``host_link_bandwidth`` (per direction) and ``host_link``,
        ``hbm_bytes`` (HBM capacity), ``l2_bytes``.

    Raises:
        ValueError: as :func:`request_ledger` or :func:`~llm_dataflow.core.hardware.hardware`.
    """
    r = dict(REQUEST, **(request or {}))
    hw = hardware(r["hardware"])
    rows = request_ledger(model_config(r["model"]), r["prompt_len"], r["output_len"], r["batch"], r["dtype"])
    step = next(x for x in rows if x.phase == "decode" and x.item.startswith("weights"))
    load = next(x for x in rows if x.phase == "load")
    return {"bytes": movement_totals(rows), "seconds": movement_times(rows, hw),
            "load_bytes": load.total, "step_bytes": step.bytes_each, "step_s": step.bytes_each / hw.hbm_bandwidth,
            "passes": 1 + step.count, "hbm_bandwidth": hw.hbm_bandwidth,
            "host_link": hw.host_link, "host_link_bandwidth": link(hw.host_link).bandwidth_per_direction,
            "hbm_bytes": hw.memory_bytes, "l2_bytes": hw.l2_bytes}


def _badge(c: Canvas, x: float, y: float, n: str, colour: str) -> None:
    """A filled circle with the movement's number, centred at (x, y)."""
    c.path(f"M{x - 10},{y} a10,10 0 1,0 20,0 a10,10 0 1,0 -20,0", stroke=colour, fill=colour)
    c.text(x, y + 5, n, size=14, anchor="middle", weight="bold", fill="#ffffff")


def draw(lang: str) -> str:
    """The data path of chapter 00's request, in ``lang`` (``"en"`` or ``"zh_CN"``)."""
    n = datapath_numbers()
    b, s = n["bytes"], n["seconds"]
    t = lambda en, zh: pick(lang, en, zh)   # noqa: E731
    W, H = 420, 636
    c = Canvas(W, H, lang=lang, title=t(
        "The data path of one request through the tiers of one GPU, with its four kinds of movement",
        "一次请求穿过单块 GPU 各存储层级的数据路径，以及四类数据搬运"))
    ink, muted = PALETTE["text"], PALETTE["muted"]
    c.text(8, 20, t("One request on one H100:", "单块 H100 上的一次请求："), size=14, weight="bold")
    c.text(8, 38, t("Llama-2-7B, BF16, 512 + 128 tokens", "Llama-2-7B，BF16，512 + 128 个 token"), size=14,
           fill=muted)

    x0, w = 48, 170                       # the tier column
    cx = x0 + w / 2
    tiers = {   # name: (y, h, label, colour)
        "storage": (56, 44, t("storage\nNVMe, network FS", "存储\nNVMe、网络文件系统"), PALETTE["storage"]),
        "host": (140, 44, t("host DRAM\npage cache", "主机 DRAM\npage cache"), PALETTE["host"]),
        "hbm": (236, 48, f"HBM · {fmt_bytes(n['hbm_bytes'], digits=0)}\n{fmt_si(n['hbm_bandwidth'], 'B/s')}",
                PALETTE["hbm"]),
        "l2": (340, 44, t(f"L2 · {fmt_bytes(n['l2_bytes'], binary=True, digits=0)}\nshared by all SMs",
                          f"L2 · {fmt_bytes(n['l2_bytes'], binary=True, digits=0)}\n所有 SM 共享"), PALETTE["l2"]),
        "sm": (428, 44, t("SM: shared memory,\nregisters", "SM：shared memory、\n寄存器"), PALETTE["smem"]),
        "tc": (504, 34, t("tensor cores", "Tensor Core"), PALETTE["compute"]),
    }
    for y, h, label, colour in tiers.values():
        c.box(x0, y, w, h, label, size=14, stroke=colour, width=2)

    def bottom(k):
        return tiers[k][0] + tiers[k][1]

    def top(k):
        return tiers[k][0]

    # ① host → device: storage → page cache → (pinned buffer, DMA over PCIe) → HBM
    blue, orange = PALETTE["hbm"], PALETTE["accent"]
    c.line(cx, bottom("storage"), cx, top("host") - 2, stroke=PALETTE["host"], width=2, arrow="end")
    c.line(cx, bottom("host"), cx, top("hbm") - 2, stroke=PALETTE["host"], width=2, arrow="end")
    _badge(c, cx + 22, (bottom("host") + top("hbm")) / 2, "1", PALETTE["host"])
    # GPUDirect Storage: storage → HBM by DMA, around host DRAM
    gx = 26
    ys, yh = top("storage") + 22, top("hbm") + 24
    c.path(f"M{x0},{ys} L{gx},{ys} L{gx},{yh} L{x0 - 2},{yh}", stroke=PALETTE["storage"], width=2,
           dash="5 4", arrow="end")
    c.rect(gx - 17, 178, 34, 22, fill="#ffffff", stroke="#ffffff", width=0)
    c.text(gx, 194, "GDS", size=13, anchor="middle", fill=PALETTE["storage"], weight="bold")

    rx = 232                                # the annotation column
    c.text(rx, 114, t("① host ↔ device, PCIe", "① 主机 ↔ 设备，PCIe"), size=14, weight="bold",
           fill=PALETTE["host"])
    c.text(rx, 133, t(f"{fmt_bytes(n['load_bytes'])} of weights, once,", f"{fmt_bytes(n['load_bytes'])} 权重，一次，"),
           size=13)
    c.text(rx, 150, t(f"at {fmt_si(n['host_link_bandwidth'], 'B/s')}:",
                      f"{fmt_si(n['host_link_bandwidth'], 'B/s')}："), size=13)
    c.text(rx, 167, f"≥ {fmt_si(s['host↔device'], 's')}", size=13, weight="bold")
    c.text(rx, 186, t("GDS, where supported:", "GDS（条件满足时）："), size=13, fill=muted)
    c.text(rx, 203, t("storage → HBM, skips host", "存储 → HBM，绕过主机"), size=13, fill=muted)

    # ④ GPU ↔ GPU: HBM to another GPU over NVLink
    ox = 334
    c.box(ox, top("hbm"), W - 8 - ox, 48, t("other\nGPUs", "其他\nGPU"), size=13, stroke=PALETTE["link"],
          dash="4 3")
    ym = top("hbm") + 24
    c.line(x0 + w + 2, ym, ox - 2, ym, stroke=PALETTE["link"], width=2, arrow="both")
    c.text((x0 + w + ox) / 2, ym - 8, t("④ NVLink", "④ NVLink"), size=13, anchor="middle", weight="bold",
           fill=PALETTE["link"])
    c.text((x0 + w + ox) / 2, ym + 20, t(f"{fmt_bytes(b['GPU↔GPU'])}: one GPU", f"{fmt_bytes(b['GPU↔GPU'])}：单 GPU"),
           size=13, anchor="middle", fill=muted)

    # ② HBM → on-chip (down) and ③ on-chip → HBM (up), through L2
    dx, ux = cx - 26, cx + 26
    for ya, yb in ((bottom("hbm"), top("l2")), (bottom("l2"), top("sm"))):
        c.line(dx, ya + 1, dx, yb - 2, stroke=blue, width=2.5, arrow="end")
        c.line(ux, yb - 1, ux, ya + 2, stroke=orange, width=2, arrow="end")
    c.line(cx, bottom("sm"), cx, top("tc") - 2, stroke=PALETTE["smem"], width=2, arrow="end")
    _badge(c, dx - 18, (bottom("hbm") + top("l2")) / 2, "2", blue)
    _badge(c, ux + 18, (bottom("hbm") + top("l2")) / 2, "3", orange)

    c.text(rx, 316, t("② HBM → on-chip", "② HBM → 片上"), size=14, weight="bold", fill=blue)
    c.text(rx, 335, t(f"every pass, {n['passes']} in all:", f"每次前向，共 {n['passes']} 次："), size=13)
    c.text(rx, 352, t(f"{fmt_bytes(b['HBM→on-chip'])}, ≥ {fmt_si(s['HBM→on-chip'], 's')}",
                      f"{fmt_bytes(b['HBM→on-chip'])}，≥ {fmt_si(s['HBM→on-chip'], 's')}"), size=13, weight="bold")
    c.text(rx, 369, t(f"a decode step: {fmt_bytes(n['step_bytes'], digits=1)}", f"每个 Decode 步：{fmt_bytes(n['step_bytes'], digits=1)}"),
           size=13)
    c.text(rx, 386, t(f"÷ {fmt_si(n['hbm_bandwidth'], 'B/s')} ≥ {fmt_si(n['step_s'], 's', 2)}",
                      f"÷ {fmt_si(n['hbm_bandwidth'], 'B/s')} ≥ {fmt_si(n['step_s'], 's', 2)}"), size=13)

    c.text(rx, 420, t("③ on-chip → HBM", "③ 片上 → HBM"), size=14, weight="bold", fill=orange)
    c.text(rx, 439, t(f"{fmt_bytes(b['on-chip→HBM'])}: new K/V,", f"{fmt_bytes(b['on-chip→HBM'])}：新 K/V、"), size=13)
    c.text(rx, 456, t("hidden states, logits", "隐藏状态、logits"), size=13)
    c.text(rx, 473, f"≥ {fmt_si(s['on-chip→HBM'], 's')}", size=13, weight="bold")

    # the L2 note and the legend of the times
    c.text(8, 570, t("The next kernel usually reads small activations", "下一个 kernel 通常从 L2 读回小激活值，"),
           size=13, fill=ink)
    c.text(8, 587, t("back from L2, not from HBM.", "而不必从 HBM 读。"), size=13, fill=ink)
    c.text(8, 612, t("≥: bytes ÷ bandwidth, a lower bound (modelled)", "≥：字节数 ÷ 带宽，是下界（解析估算）"),
           size=13, fill=muted)
    return c.svg()


DIAGRAMS = {"ch00_datapath": draw}
