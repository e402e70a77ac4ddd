"""Appendix 09's diagram: where published measurements sit against the book's bound.

``ch09_bounds``: one bar per kind of system, from 0 to the bound (an efficiency of 1, the roof).
The filled part of each bar is the range the **measured** rows of that kind reach
(:func:`~llm_dataflow.published.efficiency_range`), and the line under it names what the bound
leaves out, as the appendix's sources and readings give it.  A last row marks the stated
expectations (rows whose ``evidence`` is ``"stated"``) as hollow diamonds: they stay out of every
range.  Every number comes from :func:`~llm_dataflow.published.published_measurements`.
"""
from __future__ import annotations

from ..published import efficiency_range, published_measurements
from .svg import PALETTE, Canvas, pick, text_width

__all__ = ["DIAGRAMS", "draw_bounds"]

W = 400          # px: 13 px text shows at 11.6 px in a 390 px phone's column
PAD = 14
SIZE = 13
X0, X1 = PAD + 4, W - PAD - 22        # the axis: efficiency 0 at X0, 1 (the bound) at X1


def _x(eff: float) -> float:
    return X0 + eff * (X1 - X0)


def _line(c: Canvas, x: float, y: float, s: str, *, room: float, size: float = SIZE, **kw) -> None:
    w = text_width(s, size)
    if w > room:
        raise ValueError(f"text {s!r} is about {w:.0f} px wide; {room:.0f} px are free")
    c.text(x, y, s, size=size, **kw)


def _diamond(c: Canvas, x: float, y: float, r: float = 6.5) -> None:
    c.path(f"M{x:.1f},{y - r:.1f} L{x + r:.1f},{y:.1f} L{x:.1f},{y + r:.1f} L{x - r:.1f},{y:.1f} Z",
           stroke=PALETTE["accent"], fill="#ffffff", width=2)


def draw_bounds(lang: str) -> str:
    """Measured efficiency ranges per kind of system against the bound, and the stated expectations.

    Raises:
        ValueError: ``lang`` not ``"en"`` or ``"zh_CN"``; a label too wide (a drawing bug).
    """
    rows = published_measurements()
    p = lambda en, zh: pick(lang, en, zh)  # noqa: E731
    kinds = [
        ("tuned kernels and links", p("Kernels and links tuned for their chip", "为芯片调优的 kernel 与链路"),
         p("left out: start-up, clocks, protocol overhead", "未计入：启动开销、降频、协议开销")),
        ("single-GPU decode", p("Batch-1 decode on one GPU", "单 GPU、batch 1 的 Decode"),
         p("left out: a chain of kernels ramping up and down", "未计入：一串 kernel 的启动与收尾")),
        ("tensor-parallel decode", p("Dense tensor-parallel decode, batch 1", "batch 1 的稠密模型张量并行 Decode"),
         p("left out: all-reduce latency, launches, LM head", "未计入：all-reduce 延迟、启动、LM head")),
        ("MoE tensor-parallel decode", p("Mixture of experts under TP, batch 1", "batch 1 的 MoE 张量并行 Decode"),
         p("left out: many small kernels per layer", "未计入：每层许多小 kernel 的开销")),
        ("serving systems", p("Whole serving systems", "完整的推理服务系统"),
         p("left out: scheduling, load balance, idle time", "未计入：调度、负载均衡、空闲时间")),
    ]
    stated = [m for m in rows if not m.is_measured]
    row_h, top = 66, 70
    H = top + len(kinds) * row_h + 80 + PAD
    c = Canvas(W, H, lang=lang, title=p(
        "Published measurements against the book's bound: the range each kind of system reaches, "
        "what the bound leaves out, and the stated expectations kept apart",
        "公开实测与本书下界的对照：每类系统达到的区间、下界未计入的部分，以及单列的预期值"))
    room = W - 2 * PAD
    _line(c, PAD, PAD + 16, p("How close measured runs come to the bound", "实测离下界有多近"),
          room=room, size=15, weight="bold")
    # the axis: 0, 50 %, the bound
    ya = top - 14
    for eff, lab in ((0.0, "0"), (0.5, "50%"), (1.0, p("bound", "下界"))):
        anchor = "start" if eff == 0 else "middle"
        c.text(_x(eff), ya, lab, size=SIZE, anchor=anchor, fill=PALETTE["muted"])
    c.line(_x(1.0), ya + 4, _x(1.0), top + len(kinds) * row_h + 36, stroke=PALETTE["text"], width=1.5,
           dash="5 4")
    y = top
    for kind, label, left_out in kinds:
        lo, hi, _ = efficiency_range(kind, rows)
        _line(c, PAD, y + 12, label, room=room, weight="bold")
        by = y + 20
        c.rect(_x(0), by, _x(1) - _x(0), 16, fill=PALETTE["fill_light"], stroke="#b0b0b0", width=1, rx=2)
        c.rect(_x(lo), by, _x(hi) - _x(lo), 16, fill=PALETTE["hbm"], stroke=PALETTE["hbm"], width=1, rx=2)
        rng = f"{round(100 * lo)}–{round(100 * hi)}%"
        if _x(lo) - _x(0) > text_width(rng, SIZE) + 8:   # the range's label left of its bar
            c.text(_x(lo) - 5, by + 13, rng, size=SIZE, anchor="end", weight="bold", fill=PALETTE["hbm"])
        else:
            c.text(_x(hi) + 5, by + 13, rng, size=SIZE, weight="bold", fill=PALETTE["hbm"])
        _line(c, PAD, by + 33, left_out, room=room, fill=PALETTE["muted"], italic=True)
        y += row_h
    # the stated expectations, apart
    _line(c, PAD, y + 12, p("Stated expectations, not runs", "给出的预期值，并非实测"), room=room, weight="bold",
          fill=PALETTE["accent"])
    dy = y + 28
    c.line(_x(0), dy, _x(1), dy, stroke="#b0b0b0", width=1)
    for m in stated:
        _diamond(c, _x(m.efficiency), dy)
    effs = sorted(round(100 * m.efficiency) for m in stated)
    _line(c, PAD, dy + 24, p(f"NCCL's and NVIDIA's figures at {', '.join(map(str, effs))}%: kept out",
                             f"NCCL 与 NVIDIA 给出的 {'、'.join(map(str, effs))}%：不计入区间"),
          room=room, fill=PALETTE["muted"], italic=True)
    _line(c, PAD, dy + 48, p("Plan with a matching row, never the bound alone.",
                             "规划时用同类实测行，不要只看下界。"),
          room=room, fill=PALETTE["text"], weight="bold")
    return c.svg()


DIAGRAMS = {"ch09_bounds": draw_bounds}
