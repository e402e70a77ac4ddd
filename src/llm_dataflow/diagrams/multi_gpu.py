"""Chapter 07's diagram: the four parallelisms as what each GPU holds and what crosses the link.

``ch07_parallelisms``: four panels, one per way of cutting the model over two GPUs (tensor,
pipeline, expert, context parallel).  Each panel shows what GPU 0 and GPU 1 hold and, on the arrow
between them, the message each cut sends per token, with one real model's bytes.  The bytes come
from the core's accounting, never typed:

* tensor parallel: :func:`~llm_dataflow.core.parallel.tp_bytes_per_token_per_layer` (two
  all-reduces of one ``D``-vector per token per layer; Llama-3.1-70B, BF16);
* pipeline parallel: one ``D``-vector per token per stage boundary (``D × 2`` bytes in BF16);
* expert parallel: :func:`~llm_dataflow.core.parallel.ep_bytes_per_token` (dispatch + combine
  per token per MoE layer under uniform routing; DeepSeek-V3 at N = 8, BF16 activations);
* context parallel: :func:`~llm_dataflow.core.kv.kv_layer_bytes_per_token` (the K and V of one
  token in one layer, which ring attention passes from GPU to GPU; Llama-3.1-70B, BF16).
"""
from __future__ import annotations

from ..core.config import model_config
from ..core.kv import kv_layer_bytes_per_token
from ..core.parallel import ep_bytes_per_token, tp_bytes_per_token_per_layer
from ..core.units import dtype_bytes
from .svg import PALETTE, Canvas, pick, text_width

__all__ = ["DIAGRAMS", "draw_parallelisms", "parallelism_bytes"]

W = 400          # px: 13 px text shows at 11.6 px in a 390 px phone's column
PAD = 14
BOX_W = 158
GAP = W - 2 * PAD - 2 * BOX_W     # the arrow's room between the two GPUs
SIZE = 13
BOX_H = 70
FOOT = 24


def parallelism_bytes() -> dict[str, float]:
    """The bytes each panel of ``ch07_parallelisms`` prints (B per token):

    ``tp``: handed to all-reduce per layer (2 × D × 2, Llama-3.1-70B, BF16);
    ``tp_one``: one of those two all-reduces; ``pp``: one D-vector per stage boundary
    (Llama-3.1-70B, BF16); ``ep``: dispatch + combine per MoE layer (DeepSeek-V3, N = 8,
    BF16); ``cp``: one token's K and V in one layer (Llama-3.1-70B, BF16).
    """
    llama, ds = model_config("Llama-3.1-70B"), model_config("DeepSeek-V3")
    tp = tp_bytes_per_token_per_layer(llama, 8, "bf16")
    return {"tp": tp["handed"], "tp_one": tp["handed"] / tp["all_reduces"],
            "pp": llama.d_model * dtype_bytes("bf16"),
            "ep": ep_bytes_per_token(ds, 8, "bf16")["total"],
            "cp": kv_layer_bytes_per_token(llama, 0, "bf16")}


def _kb(x: float) -> str:
    return f"{x / 1e3:.1f} KB"


def _line(c: Canvas, x: float, y: float, s: str, *, room: float, **kw) -> None:
    """Free text that must fit ``room`` px (the canvas checks box labels only)."""
    w = text_width(s, kw.get("size", SIZE))
    if w > room:
        raise ValueError(f"text {s!r} is about {w:.0f} px wide; {room:.0f} px are free")
    c.text(x, y, s, **kw)


def _gpu(c: Canvas, x: float, y: float, name: str, label: str) -> None:
    """A GPU box: its name in bold on the first line, what it holds below, centred."""
    lines = label.split("\n")
    widest = max(text_width(t, SIZE) for t in [name, *lines])
    if widest > BOX_W - 8:
        raise ValueError(f"label {label!r} is about {widest:.0f} px wide; the box is {BOX_W} px wide")
    c.rect(x, y, BOX_W, BOX_H, fill=PALETTE["fill_light"], stroke=PALETTE["hbm"])
    top = y + (BOX_H - SIZE * (1.25 * len(lines) + 1.0)) / 2 + 0.8 * SIZE
    c.text(x + BOX_W / 2, top, name, size=SIZE, anchor="middle", weight="bold", fill=PALETTE["hbm"])
    c.text(x + BOX_W / 2, top + 1.25 * SIZE, label, size=SIZE, anchor="middle")


def draw_parallelisms(lang: str) -> str:
    """The four parallelisms on two GPUs: what each holds, what crosses between them per token.

    Raises:
        ValueError: ``lang`` not ``"en"`` or ``"zh_CN"``; a label too wide (a drawing bug).
    """
    b = parallelism_bytes()
    p = lambda en, zh: pick(lang, en, zh)  # noqa: E731
    panels = [
        (p("1  Tensor parallel: cut inside every layer", "1  张量并行：每一层内部切开"),
         p("half the heads\nhalf the MLP columns\nof every layer", "一半的头\n一半的 MLP 列\n（每一层）"),
         p("the other half\nof the heads and\nMLP columns", "另一半的头\n和 MLP 列\n（每一层）"),
         "both",
         p("2 all-reduces per layer, D values per token each", "每层 2 次 all-reduce，每个 token 各 D 个值"),
         p(f"Llama-3.1-70B: 2 × {_kb(b['tp_one'])} per token per layer",
           f"Llama-3.1-70B：每 token 每层 2 × {_kb(b['tp_one'])}")),
        (p("2  Pipeline parallel: cut between layers", "2  流水线并行：在层与层之间切开"),
         p("layers 1 … L/2\n(stage 0)", "第 1 … L/2 层\n（阶段 0）"),
         p("layers L/2+1 … L\n(stage 1)", "第 L/2+1 … L 层\n（阶段 1）"),
         "end",
         p("1 send per stage boundary, D values per token", "每个阶段边界发送 1 次，每个 token D 个值"),
         p(f"Llama-3.1-70B: {_kb(b['pp'])} per token per boundary",
           f"Llama-3.1-70B：每 token 每个边界 {_kb(b['pp'])}")),
        (p("3  Expert parallel: cut the experts", "3  专家并行：把专家分散到各 GPU"),
         p("experts 1 … E/2\n+ attention", "专家 1 … E/2\n及 attention"),
         p("experts E/2+1 … E\n+ attention", "专家 E/2+1 … E\n及 attention"),
         "both",
         p("2 all-to-alls per MoE layer: k slots go out, come back",
           "每个 MoE 层 2 次 all-to-all：k 个槽位发出再收回"),
         p(f"DeepSeek-V3, 8 GPUs: {_kb(b['ep'])} per token per MoE layer",
           f"DeepSeek-V3，8 块 GPU：每 token 每个 MoE 层 {_kb(b['ep'])}")),
        (p("4  Context parallel: cut the sequence", "4  上下文并行：把序列切开"),
         p("tokens 1 … T/2\nwith their Q, K, V", "token 1 … T/2\n及其 Q、K、V"),
         p("tokens T/2+1 … T\nwith their Q, K, V", "token T/2+1 … T\n及其 Q、K、V"),
         "both",
         p("K/V blocks pass round the ring in every layer", "每一层的 K/V block 沿环传递"),
         p(f"Llama-3.1-70B: {_kb(b['cp'])} of K and V per token per layer",
           f"Llama-3.1-70B：每 token 每层 K、V 共 {_kb(b['cp'])}")),
    ]
    head_h, box_h, text_h, gap_h = 24, BOX_H, 40, 16
    panel_h = head_h + box_h + text_h
    H = PAD + len(panels) * panel_h + (len(panels) - 1) * gap_h + FOOT + PAD
    c = Canvas(W, H, lang=lang, title=p(
        "Four ways to split a model over two GPUs: what each GPU holds and what crosses between them",
        "把模型切到两块 GPU 上的四种方式：每块 GPU 持有什么，两者之间传什么"))
    room = W - 2 * PAD
    y = PAD
    for head, left, right, arrow, crosses, example in panels:
        _line(c, PAD, y + 15, head, room=room, size=14, weight="bold")
        by = y + head_h
        for i, (x, label) in enumerate(((PAD, left), (W - PAD - BOX_W, right))):
            _gpu(c, x, by, f"GPU {i}", label)
        ax0, ax1 = PAD + BOX_W + 6, W - PAD - BOX_W - 6
        c.line(ax0, by + box_h / 2, ax1, by + box_h / 2, stroke=PALETTE["accent"], width=2.5, arrow=arrow)
        _line(c, PAD, by + box_h + 17, crosses, room=room, size=SIZE, fill=PALETTE["accent"])
        _line(c, PAD, by + box_h + 34, example, room=room, size=SIZE, fill=PALETTE["muted"])
        y += panel_h + gap_h
        if y < H - PAD - FOOT:
            c.line(PAD, y - gap_h / 2, W - PAD, y - gap_h / 2, stroke="#d0d0d0", width=1)
    _line(c, PAD, H - PAD, p("Drawn for 2 GPUs, EP's bytes for 8; BF16, 2 B a value.",
                              "按 2 块 GPU 绘制，EP 字节数按 8 块计；BF16，每个值 2 B。"),
          room=room, size=SIZE, fill=PALETTE["muted"], italic=True)
    return c.svg()


DIAGRAMS = {"ch07_parallelisms": draw_parallelisms}
