"""Chapter 05's diagrams: the roofline as an idea, and the matrix shapes of prefill and decode.

``ch05_roofline``: a roofline sketch (not a data plot): the attainable FLOP/s against the
arithmetic intensity — the memory slope (intensity × bandwidth), the compute roof (the peak), the
ridge between them, where a decode step at batch 1 and a long prefill sit, and the arrows that
batch and context move a decode step along.  Every number on it comes from the core:

* the ridge: :func:`~llm_dataflow.core.hardware.ridge_point` of an H100 SXM in BF16
  (989.4 TFLOP/s ÷ 3.35 TB/s ≈ 295 FLOP/byte; the chapter spells the unit out, so that the B of a
  batch never reads as a byte);
* the points' intensities: :func:`~llm_dataflow.core.roofline.decode_step_bounds` and
  :func:`~llm_dataflow.core.roofline.prefill_bounds` of Llama-3-8B in BF16 on that chip
  (decode at batch 1 and 64 with no context, batch 64 at 4,096 tokens of context; a
  2,048-token prefill).

``ch05_shapes``: one projection ``Y = X·W`` with ``W`` of shape ``[D × F]``, as prefill runs it
(``X`` is ``[T × D]``: every weight used by T rows) and as decode runs it (``X`` is ``[B × D]``), and
decode attention (each sequence's ``H / H_kv`` query heads of one KV group against that group's
cached keys, which the batch does not share).  Its numbers are Llama-3-8B's
(:func:`~llm_dataflow.core.config.model_config`): ``D``, ``F`` and the gate projection's bytes in
BF16, the heads and the attention intensity ``H / H_kv``.
"""
from __future__ import annotations

import math

from ..core.config import model_config
from ..core.hardware import hardware, ridge_point
from ..core.roofline import decode_step_bounds, prefill_bounds
from ..core.units import MB, dtype_bytes
from .svg import PALETTE, Canvas, pick, text_width

__all__ = ["DIAGRAMS", "draw_roofline", "draw_shapes", "roofline_points", "shape_numbers"]

MODEL, CHIP = "Llama-3-8B", "H100-SXM"
SIZE = 14          # px: 14 × 358 / 440 = 11.4 px on a 390 px phone


def roofline_points() -> dict[str, float]:
    """The intensities (FLOP/byte) and the ridge ``ch05_roofline`` draws: Llama-3-8B in BF16 on an
    H100 SXM.  Keys: ``ridge``, ``decode_b1`` (batch 1, no context), ``decode_b64`` (batch 64,
    no context), ``decode_b64_ctx`` (batch 64 at ``context`` tokens), ``prefill`` (one prompt of
    ``prompt`` tokens), and the two lengths ``context`` = 4,096 and ``prompt`` = 2,048."""
    ctx, prompt = 4096, 2048
    return {"ridge": ridge_point(hardware(CHIP), "bf16"),
            "decode_b1": decode_step_bounds(MODEL, CHIP, 1, 0).intensity,
            "decode_b64": decode_step_bounds(MODEL, CHIP, 64, 0).intensity,
            "decode_b64_ctx": decode_step_bounds(MODEL, CHIP, 64, ctx).intensity,
            "prefill": prefill_bounds(MODEL, CHIP, prompt).intensity,
            "context": ctx, "prompt": prompt}


def _text(c: Canvas, x: float, y: float, s: str, *, room: float, size: float = SIZE, **kw) -> None:
    """Free text whose widest line must fit ``room`` px (the canvas checks box labels only)."""
    w = max(text_width(t, size) for t in s.split("\n"))
    if w > room:
        raise ValueError(f"text {s!r} is about {w:.0f} px wide; {room:.0f} px are free")
    c.text(x, y, s, size=size, **kw)


def draw_roofline(lang: str) -> str:
    """The roofline sketch: slope, roof, ridge, decode and prefill, and what batch and context do.

    Raises:
        ValueError: ``lang`` not ``"en"`` or ``"zh_CN"``; a label too wide (a drawing bug).
    """
    p = lambda en, zh: pick(lang, en, zh)  # noqa: E731
    pts = roofline_points()
    W, H = 440, 456
    x0, x1 = 30, 426                      # the x axis: intensity 0.5 … 5,000 FLOP/byte, log scale
    lo, hi = math.log10(0.5), math.log10(5000)
    per_decade = (x1 - x0) / (hi - lo)    # the same px per decade on both axes: the slope is 45°
    y_axis = 372                          # the x axis's height; the slope starts there at I = 0.5

    def px(i: float) -> float:
        return x0 + (math.log10(i) - lo) * per_decade

    def py(i: float) -> float:            # attainable FLOP/s at intensity i, as a height
        return y_axis - (math.log10(min(i, pts["ridge"])) - lo) * per_decade

    ridge = pts["ridge"]
    c = Canvas(W, H, lang=lang, title=p(
        "The roofline: a memory slope, a compute roof and the ridge between them; decode at batch 1 "
        "sits far left on the slope, a long prefill on the roof",
        "屋顶线：带宽斜坡、算力屋顶和两者之间的脊点；batch 1 的 Decode 在斜坡最左侧，长 Prefill 在屋顶上"))
    # axes
    c.line(x0, y_axis, x1, y_axis, stroke=PALETTE["text"], width=1.5, arrow="end")
    c.line(x0, y_axis, x0, 40, stroke=PALETTE["text"], width=1.5, arrow="end")
    _text(c, x0 + 6, 34, p("attainable FLOP/s", "可达 FLOP/s"), room=220, fill=PALETTE["muted"])
    _text(c, x1, y_axis + 46, p("arithmetic intensity (FLOP/byte), log scale →", "算术强度（FLOP/byte），对数坐标 →"),
          room=x1 - x0, anchor="end", fill=PALETTE["muted"])
    # the two roofs
    c.line(px(0.5), py(0.5), px(ridge), py(ridge), stroke=PALETTE["hbm"], width=3.5)
    c.line(px(ridge), py(ridge), x1 - 4, py(ridge), stroke=PALETTE["compute"], width=3.5)
    _text(c, x1 - 4, py(ridge) - 12, p("compute roof: the peak FLOP/s", "算力屋顶：峰值 FLOP/s"),
          room=x1 - x0, anchor="end", fill=PALETTE["compute"], weight="bold")
    _text(c, x0 + 10, 120, p("memory slope:\nintensity ×\nbandwidth", "带宽斜坡：\n强度 ×\n带宽"),
          room=px(ridge) - x0 - 150, fill=PALETTE["hbm"], weight="bold")
    # the ridge
    c.line(px(ridge), py(ridge), px(ridge), y_axis, stroke=PALETTE["muted"], width=1.2, dash="5 4")
    _text(c, min(px(ridge), x1 - 150), y_axis + 22,
          p(f"ridge ≈ {ridge:.0f} FLOP/byte (H100, BF16)", f"脊点 ≈ {ridge:.0f} FLOP/byte（H100，BF16）"),
          room=2 * (x1 - min(px(ridge), x1 - 150)), anchor="middle", weight="bold")
    _text(c, px(ridge) - 8, y_axis - 10, p("memory-bound", "带宽受限"), room=px(ridge) - x0 - 12,
          anchor="end", fill=PALETTE["hbm"])
    _text(c, x1 - 2, y_axis - 10, p("compute-bound", "算力受限"), room=x1 - px(ridge) - 6, anchor="end",
          fill=PALETTE["compute"])

    # the points
    def dot(i, colour, r=6.5):
        c.path(f"M{px(i) - r},{py(i)} a{r},{r} 0 1,0 {2 * r},0 a{r},{r} 0 1,0 {-2 * r},0",
               fill=colour, stroke="#ffffff", width=1.5)

    b1, b64, bctx, pre = pts["decode_b1"], pts["decode_b64"], pts["decode_b64_ctx"], pts["prefill"]
    off = 13   # the batch arrow runs parallel to the slope, this far above-left of it
    c.line(px(b1) + 8 - off, py(b1) - 8 - off, px(b64) - 8 - off, py(b64) + 8 - off,
           stroke=PALETTE["accent"], width=2.2, arrow="end")
    # context: batch 64 pulled back left, below the slope, by the KV read
    c.path(f"M{px(b64) + 2},{py(b64) + 12} Q{px(b64) - 4},{py(bctx) + 30} {px(bctx) + 10},{py(bctx) + 8}",
           stroke=PALETTE["storage"], width=2.2, arrow="end", dash="6 4")
    for i, colour in ((b1, PALETTE["accent"]), (b64, PALETTE["accent"]), (bctx, PALETTE["storage"]),
                      (pre, PALETTE["compute"])):
        dot(i, colour)
    _text(c, px(b1) + 12, py(b1) + 5, p(f"decode, B = 1: ≈ {b1:.0f} FLOP/byte", f"Decode，B = 1：≈ {b1:.0f} FLOP/byte"),
          room=x1 - px(b1) - 12, fill=PALETTE["accent"], weight="bold")
    _text(c, px(b64) + 10, py(b64) + 5, p(f"B = 64:\n≈ {b64:.0f}", f"B = 64\n≈ {b64:.0f}"),
          room=px(ridge) - px(b64) - 14, fill=PALETTE["accent"], weight="bold")
    _text(c, x0 + 10, 204, p("batch ×B:\nintensity ≈ B", "batch ×B：\n强度 ≈ B"),
          room=110, fill=PALETTE["accent"], weight="bold")
    _text(c, px(bctx) - 30, py(bctx) + 44, p(f"+ {pts['context']:,} tokens of\ncontext (KV read):\n≈ {bctx:.0f} FLOP/byte",
                                               f"+ {pts['context']:,} 个 token\n的上下文（读 KV）：\n≈ {bctx:.0f} FLOP/byte"),
          room=px(ridge) - px(bctx) + 22, fill=PALETTE["storage"])
    _text(c, x1 - 2, py(pre) + 26, p(f"prefill,\nT = {pts['prompt']:,}:\n≈ {pre:,.0f}", f"Prefill，\nT = {pts['prompt']:,}：\n≈ {pre:,.0f}"),
          room=x1 - px(ridge) - 8, anchor="end", fill=PALETTE["compute"], weight="bold")
    _text(c, x0, H - 12, p(f"{MODEL}, BF16, H100 SXM; both axes log scale.",
                           f"{MODEL}，BF16，H100 SXM；两轴均为对数坐标。"),
          room=W - x0 - 6, fill=PALETTE["muted"], italic=True)
    return c.svg()


def shape_numbers() -> dict[str, float]:
    """What ``ch05_shapes`` prints, for Llama-3-8B in BF16: ``D`` (d_model), ``F`` (d_ff), the
    gate projection's bytes ``w_bytes`` = D·F·2, the query and KV heads ``H``, ``H_kv`` and
    the decode attention intensity ``H / H_kv`` (FLOP/byte)."""
    cfg = model_config(MODEL)
    return {"D": cfg.d_model, "F": cfg.d_ff, "w_bytes": cfg.d_model * cfg.d_ff * dtype_bytes("bf16"),
            "H": cfg.n_heads, "H_kv": cfg.n_kv_heads, "attn_intensity": cfg.n_heads / cfg.n_kv_heads}


def draw_shapes(lang: str) -> str:
    """Prefill ``[T × D]·[D × F]`` against decode ``[B × D]·[D × F]``, and decode attention.

    Raises:
        ValueError: ``lang`` not ``"en"`` or ``"zh_CN"``; a label too wide (a drawing bug).
    """
    p = lambda en, zh: pick(lang, en, zh)  # noqa: E731
    n = shape_numbers()
    W, S = 420, 13.5          # 13.5 × 358 / 420 = 11.5 px on a phone
    left = 16
    dx, fx = 52, 112          # px for D and for F
    c = Canvas(W, 620, lang=lang, title=p(
        "One projection as prefill runs it, [T × D] times [D × F], and as decode runs it, [B × D] times "
        "[D × F]; and decode attention, each sequence's query heads of one group against its own cached keys",
        "同一个投影在 Prefill 中是 [T × D] 乘 [D × F]，在 Decode 中是 [B × D] 乘 [D × F]；"
        "以及 Decode 的 attention：每个序列同一组的 query 头乘它自己缓存的 key"))

    def product(y, rows_px, rows, head, foot, colour):
        """X [rows × D] · W [D × F] = Y [rows × F], tops aligned at y + 26."""
        _text(c, left, y + 14, head, room=W - 2 * left, size=15, weight="bold")
        top = y + 30
        x = left
        c.box(x, top, dx, rows_px, "X" if rows_px >= 24 else "", size=S, fill="#fde9dc", stroke=PALETTE["accent"])
        _text(c, x + dx / 2, top + max(rows_px, dx) + 18, f"[{rows} × D]", room=dx + 30, size=S, anchor="middle")
        x += dx + 8
        mid = top + max(rows_px, dx) / 2 + 6         # the operators at the middle of the taller operand
        _text(c, x + 10, mid, "×", room=20, size=S + 2, anchor="middle", weight="bold")
        x += 20
        c.box(x, top, fx, dx, "W", size=S, fill="#e3ecf6", stroke=PALETTE["hbm"])
        _text(c, x + fx / 2, top + max(rows_px, dx) + 18, "[D × F]", room=fx, size=S, anchor="middle")
        x += fx + 8
        _text(c, x + 6, mid, "=", room=20, size=S + 2, anchor="middle", weight="bold")
        x += 20
        c.box(x, top, fx, rows_px, "Y" if rows_px >= 24 else "", size=S, fill="#fde9dc", stroke=PALETTE["accent"])
        _text(c, x + fx / 2, top + max(rows_px, dx) + 18, f"[{rows} × F]", room=fx, size=S, anchor="middle")
        fy = top + max(rows_px, dx) + 40
        _text(c, left, fy, foot, room=W - 2 * left, size=S, fill=colour)
        return fy

    y = product(6, 96, "T", p("Prefill: T prompt tokens in one pass", "Prefill：一次处理 prompt 的 T 个 token"),
                p("W read once, used by T rows: intensity ≈ T FLOP/byte\n(compute-bound from a few hundred tokens)",
                  "W 读一次，被 T 行复用：强度 ≈ T FLOP/byte\n（几百个 token 起即算力受限）"), PALETTE["compute"])
    c.line(left, y + 30, W - left, y + 30, stroke="#d0d0d0", width=1)
    y = product(y + 38, 10, "B", p("Decode: one new token for each of B sequences", "Decode：B 个序列各生成 1 个新 token"),
                p("W read once, used by B rows: intensity ≈ B FLOP/byte\n(at B = 1 a matrix–vector product, GEMV)",
                  "W 读一次，被 B 行复用：强度 ≈ B FLOP/byte\n（B = 1 时是矩阵–向量乘，即 GEMV）"), PALETTE["accent"])
    _text(c, left, y + 40, p(f"{MODEL}: D = {n['D']:,}, F = {n['F']:,}; its gate",
                             f"{MODEL}：D = {n['D']:,}，F = {n['F']:,}；gate 投影的 W"),
          room=W - 2 * left, size=S, fill=PALETTE["muted"])
    _text(c, left, y + 58, p(f"projection's W is {n['w_bytes'] / MB:.1f} MB in BF16, read once per step.",
                             f"在 BF16 下为 {n['w_bytes'] / MB:.1f} MB，每步只读一次。"),
          room=W - 2 * left, size=S, fill=PALETTE["muted"])
    y += 72
    c.line(left, y, W - left, y, stroke="#d0d0d0", width=1)
    # decode attention: per sequence, the H/H_kv query heads of one KV group against that group's K
    group = n["H"] // n["H_kv"]
    _text(c, left, y + 22, p("Decode attention: each sequence its own K, V", "Decode 的 attention：每个序列读自己的 K、V"),
          room=W - 2 * left, size=15, weight="bold")
    top = y + 38
    row = 6                                   # px per query head of the group
    for s_ in range(3):
        yy = top + s_ * (group * row + 14)
        c.rect(left, yy, 44, group * row, fill="#fde9dc", stroke=PALETTE["accent"], rx=1)
        for h in range(1, group):             # one row per query head
            c.line(left, yy + h * row, left + 44, yy + h * row, stroke=PALETTE["accent"], width=0.8)
        _text(c, left + 52, yy + group * row / 2 + 5, "·", room=14, size=S, weight="bold")
        c.rect(left + 66, yy + group * row / 2 - 9, 150, 18, fill="#efe6f5", stroke=PALETTE["smem"], rx=2)
        _text(c, left + 226, yy + group * row / 2 + 5, p(f"sequence {s_ + 1}", f"序列 {s_ + 1}"),
              room=W - left - 226 - 8, size=S, fill=PALETTE["muted"])
    foot = top + 3 * (group * row + 14) + 6
    _text(c, left + 22, foot, f"q [{group} × dₕ]", room=86, size=S, anchor="middle")
    _text(c, left + 141, foot, p("Kᵀ [dₕ × context]", "Kᵀ [dₕ × 上下文]"), room=170, size=S, anchor="middle")
    _text(c, left, foot + 26, p(f"{MODEL}: {group} query heads share one K, V head.",
                                f"{MODEL}：{group} 个 query 头共享一个 K、V 头。"),
          room=W - 2 * left, size=S, fill=PALETTE["smem"])
    _text(c, left, foot + 44, p(f"No reuse across the batch: ≈ H/H_kv = {n['attn_intensity']:.0f} FLOP/byte",
                                f"batch 内各序列之间没有复用：≈ H/H_kv = {n['attn_intensity']:.0f} FLOP/byte"),
          room=W - 2 * left, size=S, fill=PALETTE["smem"])
    _text(c, left, foot + 62, p("in BF16, whatever B.", "（BF16 下），与 B 无关。"),
          room=W - 2 * left, size=S, fill=PALETTE["smem"])
    c.height = foot + 76
    return c.svg()


DIAGRAMS = {"ch05_roofline": draw_roofline, "ch05_shapes": draw_shapes}
