"""Chapter 02's diagram: text → token IDs → the embedding gather.

``ch02_gather``: the tokenizer (on the CPU) turns text into token IDs ``[B, T]``; the IDs cross to
the device; the embedding reads row ``ids[b, t]`` of the table ``W_E [V, D]`` for each of them
and writes ``X [B, T, D]``.  Only the named rows are read — a repeated ID names the same row.
The numbers are chapter 02's example: a 1,000-token prompt of Llama-3-8B with INT32 IDs and a
BF16 table, from :func:`llm_dataflow.embedding.embedding_calc` and the preset's ``config.json``
widths (:func:`llm_dataflow.model_config`).
"""
from __future__ import annotations

from ..core.config import model_config
from ..core.units import fmt_bytes
from ..embedding import embedding_calc, input_vs_state
from .svg import PALETTE, Canvas, pick

__all__ = ["DIAGRAMS", "draw_gather", "GATHER_EXAMPLE"]

#: ``(model, prompt tokens)`` of the diagram's numbers: INT32 IDs, a BF16 table.
GATHER_EXAMPLE = ("Llama-3-8B", 1000)


def draw_gather(lang: str = "en") -> str:
    """The SVG of ``ch02_gather`` in ``lang`` (``"en"`` or ``"zh_CN"``).

    Raises:
        ValueError: an unknown ``lang``.
    """
    name, n = GATHER_EXAMPLE
    cfg = model_config(name)
    calc = embedding_calc(name, n, 1, "int32", "bf16")
    ids_b, rows_b = input_vs_state(n, cfg.d_model, "int32", "bf16")
    table_b = cfg.vocab_size * cfg.d_model * 2
    row_b = cfg.d_model * 2
    L = lambda en, zh: pick(lang, en, zh)   # noqa: E731
    ink, muted, acc, hbm, host = PALETTE["text"], PALETTE["muted"], PALETTE["accent"], PALETTE["hbm"], PALETTE["host"]
    W_, H_ = 440, 780
    c = Canvas(W_, H_, lang=lang, title=L("Text becomes token IDs; the embedding reads only the rows the IDs name",
                                          "文本变成 token ID；embedding 只读取 ID 指定的那些行"))
    c.text(20, 30, L("Text → token IDs → rows of a table", "文本 → token ID → 表中的行"), size=17, weight="bold")

    # text and tokenizer (host side)
    c.box(20, 52, 400, 34, L("text: UTF-8 bytes", "文本：UTF-8 字节"), size=14, stroke=host, text_fill=host)
    c.line(80, 86, 80, 122, arrow="end", stroke=host)
    c.text(90, 109, L("tokenizer + chat template, on the CPU", "分词器与对话模板，在 CPU 上运行"), size=14, fill=host)
    # the IDs: four cells, one repeated
    cells = ["id₀", "id₁", "id₂", "id₁"]
    x0, y0, cw, ch = 20, 124, 52, 32
    for i, s in enumerate(cells):
        c.box(x0 + i * cw, y0, cw, ch, s, size=16, stroke=ink)
    c.text(x0 + 4 * cw + 12, y0 + 14, L("IDs [B, T], INT32", "ID [B, T]，INT32"), size=14)
    c.text(x0 + 4 * cw + 12, y0 + 32, L("4 B each", "每个 4 B"), size=14, fill=muted)
    c.line(20, y0 + ch + 14, 420, y0 + ch + 14, stroke=PALETTE["link"], dash="6 4", width=1.5)
    c.text(420, y0 + ch + 34, L("to the device", "送到设备"), size=14, anchor="end", fill=PALETTE["link"])
    c.text(420, y0 + ch + 52, L("(PCIe on a GPU)", "（GPU 经 PCIe）"), size=14, anchor="end", fill=PALETTE["link"])

    # the table W_E [V, D] in device memory, with the rows the IDs name
    tx, ty, tw, th, nrow = 232, 262, 120, 300, 15
    rh = th / nrow
    c.rect(tx, ty, tw, th, fill=PALETTE["fill_light"], stroke=hbm, width=2)
    for r in range(1, nrow):
        c.line(tx, ty + r * rh, tx + tw, ty + r * rh, stroke="#c8d3e0", width=1)
    picked = {0: 2, 1: 7, 2: 11}          # id_j → the row it names (schematic)
    for j, r in picked.items():
        c.rect(tx, ty + r * rh, tw, rh, fill=acc, stroke=acc, width=1, rx=0)
    c.text(tx, ty - 30, L("W_E [V, D]", "W_E [V, D]"), size=15, fill=hbm, weight="bold")
    c.text(tx, ty - 10, L("in device memory", "在显存中"), size=14, fill=hbm)
    # arrows from each ID cell to its row
    for i, s in enumerate(cells):
        j = int(s[-1].translate(str.maketrans("₀₁₂", "012")))
        r = picked[j]
        sx = x0 + i * cw + cw / 2
        c.path(f"M {sx} {y0 + ch + 2} C {sx} {ty + r * rh + rh / 2} {sx} {ty + r * rh + rh / 2} {tx - 2} {ty + r * rh + rh / 2}",
               stroke=acc, width=1.5, arrow="end")
    c.text(tx + tw + 8, ty + 20, f"V = {cfg.vocab_size:,}", size=14, fill=hbm)
    c.text(tx + tw + 8, ty + 40, L("rows", "行"), size=14, fill=hbm)
    c.text(tx + tw + 8, ty + 74, L("a row:", "每行："), size=14, fill=muted)
    c.text(tx + tw + 8, ty + 94, f"D·2 B", size=14, fill=muted)
    c.text(tx + tw + 8, ty + 114, f"= {fmt_bytes(row_b)}", size=14, fill=muted)
    # beside the row id₁ names (both id₁ cells point at it), below where their arrows arrive
    twice_y = ty + picked[1] * rh + rh / 2
    c.text(20, twice_y + 28, L("id₁ twice:", "id₁ 出现两次："), size=14, fill=acc)
    c.text(20, twice_y + 46, L("the same row", "读的是同一行"), size=14, fill=acc)

    # the output X [B, T, D]
    oy = ty + th + 40
    c.line(tx + tw / 2, ty + th, tx + tw / 2, oy - 2, arrow="end", stroke=acc)
    c.text(tx + tw / 2 + 10, ty + th + 26, L("gather", "gather"), size=14, fill=acc)
    c.box(tx - 40, oy, tw + 80, 34, "X [B, T, D], BF16", size=14, stroke=ink)

    # the numbers of one 1,000-token prompt
    y = oy + 66
    c.text(20, y, L(f"A {n:,}-token prompt of {name}:", f"{name}，{n:,} token 的 prompt："), size=15, weight="bold")
    rows = [(L("token IDs", "token ID"), fmt_bytes(ids_b)),
            (L("rows read (at most)", "读取的行（至多）"), fmt_bytes(rows_b)),
            (L("the whole table", "整张表"), fmt_bytes(table_b)),
            (L("share of the table read", "表被读取的比例"), calc["table read by the gather"])]
    for i, (label, value) in enumerate(rows):
        c.text(20, y + 26 + 22 * i, label, size=14)
        c.text(420, y + 26 + 22 * i, value, size=14, anchor="end", weight="bold")
    return c.svg()


DIAGRAMS = {"ch02_gather": draw_gather}
