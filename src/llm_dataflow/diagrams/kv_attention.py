"""Chapter 06's diagrams: what one token caches, how FlashAttention tiles, how a block table shares.

``ch06_kv_shapes``: the K/V one token leaves in one layer's cache under multi-head attention
(Llama-2-7B), grouped-query attention (Llama-3-8B), multi-head latent attention (DeepSeek-V3) and a
sliding window (Mistral-7B-v0.1), drawn to scale (bar length ∝ bytes), with the bytes per token
per layer and per token in all layers from :func:`~llm_dataflow.core.kv.kv_layer_bytes_per_token`
and :func:`~llm_dataflow.core.kv.kv_bytes_per_token`, and the window's cap from
:func:`~llm_dataflow.core.kv.kv_cache_bytes` (BF16).

``ch06_flash_tiling``: FlashAttention-2's loop (Dao 2023, §3.1; the 2022 paper's Algorithm 1 ran
K/V in the outer loop and kept O, ℓ and m in HBM): a tile of Q stays on chip while tiles of K and
V stream past it, once per Q tile (``N / block_q`` times in all); the running max, running sum and
output accumulator live on chip; only Q, K, V and O are in HBM, never the N × N scores S or the
probabilities P.  Its numbers: the tile sizes are :func:`~llm_dataflow.flash.flash_attention`'s
defaults, and the S (and, as large, P) it never writes are Llama-3-8B's at 4,096 tokens (all query
heads of one layer, BF16).

``ch06_block_table``: two sequences sharing a prompt's blocks, and a write that copies.  The
block ids and reference counts are those of a real :class:`~llm_dataflow.paged.PagedKVCache`
run: a 10-token prompt in blocks of 4 tokens, forked, then one token written by the second row
(:func:`block_table_states`).
"""
from __future__ import annotations

import inspect

import torch

from ..core.config import model_config
from ..core.kv import kv_bytes_per_token, kv_cache_bytes, kv_layer_bytes_per_token
from ..core.units import GiB, dtype_bytes
from ..flash import flash_attention
from ..paged import PagedKVCache
from .svg import PALETTE, Canvas, pick, text_width

__all__ = ["DIAGRAMS", "draw_kv_shapes", "draw_flash_tiling", "draw_block_table", "kv_shape_numbers",
           "flash_numbers", "block_table_states"]

K_FILL, V_FILL = "#dbe7f5", "#f6e3d4"   # light fills for K and V (strokes: hbm blue, accent orange)


def _text(c: Canvas, x: float, y: float, s: str, *, room: float, size: float, **kw) -> None:
    """Free text whose widest line must fit ``room`` px (the canvas checks box labels only)."""
    w = max(text_width(t, size) for t in s.split("\n"))
    if w > room:
        raise ValueError(f"text {s!r} is about {w:.0f} px wide; {room:.0f} px are free")
    c.text(x, y, s, size=size, **kw)


# --------------------------------------------------------------------------------------------
# ch06_kv_shapes
# --------------------------------------------------------------------------------------------
KV_MODELS = (("MHA", "Llama-2-7B"), ("GQA", "Llama-3-8B"), ("MLA", "DeepSeek-V3"), ("sliding", "Mistral-7B-v0.1"))


def kv_shape_numbers() -> list[dict]:
    """One dict per row of ``ch06_kv_shapes`` (BF16): ``kind``, ``model``, ``layers``, ``kv_heads``,
    ``head_dim``, ``per_layer`` (B per token in one layer), ``per_token`` (B per token in all
    layers), and for MLA ``latent``/``rope`` (elements), for the window ``window`` (tokens) and
    ``cap`` (B one sequence holds at most)."""
    rows = []
    for kind, name in KV_MODELS:
        cfg = model_config(name)
        r = {"kind": kind, "model": name, "layers": cfg.n_layers, "kv_heads": cfg.n_kv_heads,
             "head_dim": cfg.head_dim, "per_layer": kv_layer_bytes_per_token(cfg, 0, "bf16"),
             "per_token": kv_bytes_per_token(cfg, "bf16")}
        if cfg.attention_kind == "MLA":
            r.update(latent=cfg.kv_lora_rank, rope=cfg.qk_rope_head_dim)
        if cfg.sliding_window:
            r.update(window=cfg.sliding_window, cap=kv_cache_bytes(cfg, 4 * cfg.sliding_window))
        rows.append(r)
    return rows


def draw_kv_shapes(lang: str) -> str:
    """What one token caches per layer under MHA, GQA, MLA and a sliding window, to scale.

    Raises:
        ValueError: ``lang`` not ``"en"`` or ``"zh_CN"``; a label too wide (a drawing bug).
    """
    p = lambda en, zh: pick(lang, en, zh)  # noqa: E731
    rows = kv_shape_numbers()
    W, S, left = 420, 13.5, 16
    room = W - 2 * left
    scale = room / max(r["per_layer"] for r in rows)      # px per byte: the longest bar fills the row
    row_h = 104
    c = Canvas(W, 40 + row_h * len(rows) + 58, lang=lang, title=p(
        "The K and V one token caches in one layer under MHA, GQA, MLA and a sliding window, drawn to "
        "scale, with bytes per token",
        "MHA、GQA、MLA 与滑动窗口下，一个 token 在一层中缓存的 K、V，按比例绘制，并标出每 token 字节数"))
    _text(c, left, 22, p("One token, one layer, BF16 (bar length ∝ bytes)", "一个 token、一层、BF16（条长 ∝ 字节数）"),
          room=room, size=15, weight="bold")
    y = 40
    for r in rows:
        kind = {"MHA": p("multi-head (MHA)", "多头（MHA）"), "GQA": p("grouped-query (GQA)", "分组查询（GQA）"),
                "MLA": p("latent (MLA)", "潜向量（MLA）"), "sliding": p("sliding window", "滑动窗口")}[r["kind"]]
        _text(c, left, y + 14, f"{kind} · {r['model']}", room=room, size=S, weight="bold")
        by, bh = y + 24, 22
        if r["kind"] == "MLA":
            wl = r["latent"] * 2 * scale
            wr = r["rope"] * 2 * scale
            c.rect(left, by, wl, bh, fill="#efe6f5", stroke=PALETTE["smem"], rx=2)
            c.rect(left + wl, by, wr, bh, fill="#f3d9d9", stroke=PALETTE["reg"], rx=1)
            shape = p(f"latent c_KV [{r['latent']}] + RoPE key [{r['rope']}], shared by all heads",
                      f"潜向量 c_KV [{r['latent']}] + RoPE key [{r['rope']}]，所有头共享")
        else:
            per_head = r["head_dim"] * 2 * scale          # px of one head's K (or V) vector
            for h in range(r["kv_heads"]):
                c.rect(left + h * per_head, by, per_head, bh, fill=K_FILL, stroke=PALETTE["hbm"], rx=0, width=0.8)
                c.rect(left + (r["kv_heads"] + h) * per_head, by, per_head, bh, fill=V_FILL,
                       stroke=PALETTE["accent"], rx=0, width=0.8)
            shape = p(f"K [{r['kv_heads']} × {r['head_dim']}] + V [{r['kv_heads']} × {r['head_dim']}]",
                      f"K [{r['kv_heads']} × {r['head_dim']}] + V [{r['kv_heads']} × {r['head_dim']}]")
            if r["kind"] == "GQA" or r["kind"] == "sliding":
                shape += p(" (KV heads)", "（KV 头）")
        _text(c, left, by + bh + 18, shape, room=room, size=S)
        line = p(f"{r['per_layer']:,} B per layer; × {r['layers']} layers = {r['per_token']:,} B per token",
                 f"每层 {r['per_layer']:,} B；× {r['layers']} 层 = 每 token {r['per_token']:,} B")
        _text(c, left, by + bh + 36, line, room=room, size=S, fill=PALETTE["muted"])
        if r["kind"] == "sliding":
            _text(c, left, by + bh + 54,
                  p(f"only the last {r['window']:,} tokens kept: ≤ {r['cap'] / GiB:.1f} GiB a sequence",
                    f"每层只保留最近 {r['window']:,} 个 token：每序列 ≤ {r['cap'] / GiB:.1f} GiB"),
                  room=room, size=S, fill=PALETTE["accent"])
        y += row_h
    # legend
    y += 6
    c.rect(left, y + 2, 14, 12, fill=K_FILL, stroke=PALETTE["hbm"], rx=0)
    _text(c, left + 20, y + 13, p("one K head", "一个 K 头"), room=100, size=S)
    c.rect(left + 130, y + 2, 14, 12, fill=V_FILL, stroke=PALETTE["accent"], rx=0)
    _text(c, left + 150, y + 13, p("one V head", "一个 V 头"), room=100, size=S)
    y += 22
    c.rect(left, y + 2, 14, 12, fill="#efe6f5", stroke=PALETTE["smem"], rx=0)
    _text(c, left + 20, y + 13, p("MLA latent", "MLA 潜向量"), room=100, size=S)
    c.rect(left + 130, y + 2, 14, 12, fill="#f3d9d9", stroke=PALETTE["reg"], rx=0)
    _text(c, left + 150, y + 13, p("MLA RoPE key", "MLA 的 RoPE key"), room=150, size=S)
    return c.svg()


# --------------------------------------------------------------------------------------------
# ch06_flash_tiling
# --------------------------------------------------------------------------------------------
def flash_numbers() -> dict[str, float]:
    """What ``ch06_flash_tiling`` prints: ``block_q``, ``block_k`` (the defaults of
    :func:`~llm_dataflow.flash.flash_attention`), and Llama-3-8B's scores at ``n`` = 4,096 tokens:
    ``scores_bytes`` = H × N × N × 2 (one layer, all query heads, BF16), with ``heads``."""
    sig = inspect.signature(flash_attention).parameters
    cfg, n = model_config("Llama-3-8B"), 4096
    return {"block_q": sig["block_q"].default, "block_k": sig["block_k"].default, "n": n,
            "heads": cfg.n_heads, "scores_bytes": cfg.n_heads * n * n * dtype_bytes("bf16")}


def draw_flash_tiling(lang: str) -> str:
    """FlashAttention's tiling: Q tile on chip, K/V tiles streamed, running statistics on chip.

    Raises:
        ValueError: ``lang`` not ``"en"`` or ``"zh_CN"``; a label too wide (a drawing bug).
    """
    p = lambda en, zh: pick(lang, en, zh)  # noqa: E731
    n = flash_numbers()
    W, S, left = 420, 13.5, 14
    c = Canvas(W, 520, lang=lang, title=p(
        "FlashAttention-2's tiling: a tile of Q stays on chip while tiles of K and V stream past it, once "
        "per Q tile; the running max, running sum and output live on chip; the N by N scores never reach HBM",
        "FlashAttention-2 的分块：Q 的一个 tile 留在片上，K、V 的 tile 依次流过，每个 Q tile 一遍；"
        "当前最大值、累计和与输出都在片上；N × N 的分数矩阵从不写入 HBM"))
    # HBM band
    c.rect(left, 10, W - 2 * left, 118, fill=PALETTE["fill_light"], stroke=PALETTE["hbm"], width=1.8)
    _text(c, left + 10, 30, p("HBM", "HBM"), room=80, size=15, weight="bold", fill=PALETTE["hbm"])
    bw, gap = 78, 16
    xs = [left + 12 + i * (bw + gap) for i in range(4)]
    for x, name, fill, stroke in zip(xs, ("Q", "K", "V", "O"), ("#ffffff", K_FILL, V_FILL, "#ffffff"),
                                     (PALETTE["text"], PALETTE["hbm"], PALETTE["accent"], PALETTE["text"])):
        c.box(x, 42, bw, 74, f"{name}\n[N × d]", size=S, fill=fill, stroke=stroke)
        # tile stripes: the first tile of each, where the loop reads or writes
        c.rect(x + 3, 45, bw - 6, 12, fill="none", stroke=PALETTE["reg"] if name != "O" else PALETTE["text"],
               width=1.6, rx=1, dash="4 2")
    # on-chip box: row 1 under Q, K/V and O; row 2 the statistics and the score tile
    cy = 190
    c.rect(left, cy, W - 2 * left, 224, fill="#ffffff", stroke=PALETTE["smem"], width=2)
    ty = cy + 14
    q_tile, kv_tile, acc = (left + 12, 100), (left + 130, 116), (left + 262, 122)
    c.box(q_tile[0], ty, q_tile[1], 40, f"Q tile\n[{n['block_q']} × d]", size=S, fill="#ffffff", stroke=PALETTE["reg"])
    c.box(kv_tile[0], ty, kv_tile[1], 40, p(f"K, V tiles\n[{n['block_k']} × d]", f"K、V tile\n[{n['block_k']} × d]"),
          size=S, fill=K_FILL, stroke=PALETTE["hbm"])
    c.box(acc[0], ty, acc[1], 40, p("O_i accumulator\n× e^(m − m′)", "O_i 累加器\n× e^(m − m′)"), size=S,
          fill="#ffffff", stroke=PALETTE["smem"])
    c.box(q_tile[0], ty + 56, 140, 44, p("running max m\nrunning sum ℓ", "当前最大值 m\n累计和 ℓ"), size=S,
          fill="#ffffff", stroke=PALETTE["smem"])
    c.box(left + 170, ty + 56, 124, 44, f"S tile\n[{n['block_q']} × {n['block_k']}]", size=S,
          fill="#fff4e0", stroke=PALETTE["host"])
    _text(c, q_tile[0], ty + 126, p("for each K, V tile j: S = Q_i K_jᵀ, then update", "对每个 K、V tile j：S = Q_i K_jᵀ，再更新"),
          room=W - 2 * left - 24, size=S)
    _text(c, q_tile[0], ty + 144, p("m, ℓ and O_i; at the end write O_i ÷ ℓ once.", "m、ℓ 与 O_i；最后把 O_i ÷ ℓ 写回一次。"),
          room=W - 2 * left - 24, size=S)
    _text(c, q_tile[0], ty + 162, p(f"All of K and V stream past each Q tile: N/{n['block_q']} passes.",
                                    f"每个 Q tile 都要流过全部 K、V：共 N/{n['block_q']} 遍。"),
          room=W - 2 * left - 24, size=S, fill=PALETTE["hbm"])
    _text(c, q_tile[0], cy + 212, p("on chip: shared memory and registers of one SM",
                                    "片上：一个 SM 的 shared memory 与寄存器"),
          room=W - 2 * left - 24, size=S, weight="bold", fill=PALETTE["smem"])
    # arrows: Q once, K/V streamed, O written once
    qc, kc, ac = q_tile[0] + q_tile[1] / 2, kv_tile[0] + kv_tile[1] / 2, acc[0] + acc[1] / 2
    c.line(xs[0] + bw / 2, 117, qc, ty - 2, stroke=PALETTE["reg"], width=2, arrow="end")
    _text(c, xs[0] + bw / 2 - 6, 160, p("once", "读一次"), room=xs[0] + bw / 2 - left - 8, size=S,
          anchor="end", fill=PALETTE["reg"])
    c.line(xs[1] + bw / 2, 117, kc - 14, ty - 2, stroke=PALETTE["hbm"], width=2.4, arrow="end", dash="6 3")
    c.line(xs[2] + bw / 2, 117, kc + 14, ty - 2, stroke=PALETTE["accent"], width=2.4, arrow="end", dash="6 3")
    _text(c, xs[2] + bw / 2 + 8, 150, p("streamed,\ntile by tile", "逐 tile\n流入"), room=ac - xs[2] - bw / 2 - 8,
          size=S, fill=PALETTE["hbm"])
    c.line(ac, ty - 2, xs[3] + bw / 2, 118, stroke=PALETTE["text"], width=2, arrow="end")
    _text(c, xs[3] + bw / 2 + 8, 160, p("once", "写一次"), room=W - left - xs[3] - bw / 2 - 10, size=S)
    # what is never written
    ny = cy + 240
    c.rect(left, ny, W - 2 * left, 66, fill="#ffffff", stroke=PALETTE["muted"], width=1.5, dash="6 4")
    c.line(left + 8, ny + 8, left + 62, ny + 58, stroke=PALETTE["reg"], width=2.2)
    c.line(left + 62, ny + 8, left + 8, ny + 58, stroke=PALETTE["reg"], width=2.2)
    _text(c, left + 74, ny + 22, p("S, P [N × N]: never written to HBM", "S、P [N × N]：从不写入 HBM"),
          room=W - 2 * left - 80, size=S, weight="bold")
    _text(c, left + 74, ny + 40, p(f"Llama-3-8B, N = {n['n']:,}: each is {n['heads']} heads",
                                   f"Llama-3-8B，N = {n['n']:,}：各为 {n['heads']} 个头"),
          room=W - 2 * left - 80, size=S, fill=PALETTE["muted"])
    _text(c, left + 74, ny + 58, p(f"× N² × 2 B = {n['scores_bytes'] / GiB:.0f} GiB per layer, in prefill",
                                   f"× N² × 2 B = 每层 {n['scores_bytes'] / GiB:.0f} GiB（Prefill 时）"),
          room=W - 2 * left - 80, size=S, fill=PALETTE["muted"])
    return c.svg()


# --------------------------------------------------------------------------------------------
# ch06_block_table
# --------------------------------------------------------------------------------------------
def block_table_states(prompt: int = 10, block_size: int = 4, num_blocks: int = 6) -> list[dict]:
    """Run a :class:`~llm_dataflow.paged.PagedKVCache` of two rows (the ``tiny-llama`` shapes, zero
    K/V): prefill ``prompt`` tokens into row A, fork row B from it, then write one token into
    row B.  Returns two states, each ``{"tables": [A's, B's], "ref": reference counts,
    "lengths": [A's, B's]}``: after the fork, and after B's write (copy-on-write)."""
    cfg = model_config("tiny-llama")
    pc = PagedKVCache(cfg, batch=2, num_blocks=num_blocks, block_size=block_size)

    def write(view, n):
        z = torch.zeros(1, cfg.n_kv_heads, n, cfg.head_dim)
        for layer in range(cfg.n_layers):
            view.update(layer, z, z)
        view.advance(n)

    def state():
        return {"tables": [list(t) for t in pc.block_tables], "ref": list(pc.allocator.ref),
                "lengths": [int(x) for x in pc.lengths]}

    write(pc.rows(0), prompt)
    pc.fork(0, 1)
    out = [state()]
    write(pc.rows(1), 1)
    out.append(state())
    return out


def draw_block_table(lang: str) -> str:
    """Two sequences sharing a prompt's blocks through their block tables, and a copy-on-write.

    Raises:
        ValueError: ``lang`` not ``"en"`` or ``"zh_CN"``; a label too wide (a drawing bug).
    """
    p = lambda en, zh: pick(lang, en, zh)  # noqa: E731
    bs, prompt = 4, 10
    states = block_table_states(prompt, bs)
    W, S, left = 420, 13.5, 14
    nblk = len(states[0]["ref"])
    pw, pg = 58, 6                                   # a physical block's width and the gap
    px0 = (W - (nblk * pw + (nblk - 1) * pg)) / 2
    panel_h = 236
    c = Canvas(W, 2 * panel_h + 64, lang=lang, title=p(
        "Two sequences share a prompt's KV blocks through their block tables; when one writes into a "
        "shared block, that block is copied first",
        "两个序列通过各自的 block table 共享 prompt 的 KV block；其中一个要写入共享 block 时，先复制该 block"))
    heads = (p(f"1  A: a {prompt}-token prompt in blocks of {bs}; B forks",
               f"1  A：{prompt} 个 token 的 prompt，每 block {bs} 槽；B fork 自 A"),
             p("2  B writes a token: the shared last block is copied",
               "2  B 写入一个 token：先复制共享的最后一块"))
    colours = (PALETTE["accent"], PALETTE["smem"])
    y0 = 14
    for k, st in enumerate(states):
        _text(c, left, y0 + 14, heads[k], room=W - 2 * left, size=S, weight="bold")
        ty = y0 + 34
        # the two block tables
        table_x = (left + 10, W / 2 + 20)
        for r, (name, tab) in enumerate(zip(("A", "B"), st["tables"])):
            x = table_x[r]
            _text(c, x, ty + 20, p(f"{name}'s table", f"{name} 的 block table"), room=W / 2 - 40, size=S,
                  fill=colours[r], weight="bold")
            for i, b in enumerate(tab):
                c.box(x + i * 34, ty + 30, 30, 26, str(b), size=S, stroke=colours[r], fill="#ffffff",
                      weight="bold")
        # the physical pool
        py = ty + 118
        filled = {}
        for r, tab in enumerate(st["tables"]):
            for i, b in enumerate(tab):
                filled[b] = max(filled.get(b, 0), min(bs, st["lengths"][r] - i * bs))
        for b in range(nblk):
            x = px0 + b * (pw + pg)
            copied = k == 1 and b not in states[0]["tables"][1] and b in st["tables"][1]
            c.rect(x, py, pw, 30, fill="#ffffff", stroke=PALETTE["accent"] if copied else PALETTE["hbm"],
                   width=2.4 if copied else 1.5)
            for s in range(bs):
                if s < filled.get(b, 0):
                    c.rect(x + 3 + s * (pw - 6) / bs, py + 4, (pw - 6) / bs - 2, 22,
                           fill="#f6e3d4" if copied and s == filled[b] - 1 else K_FILL, stroke="none", rx=1)
            _text(c, x + pw / 2, py + 48, f"#{b}", room=pw, size=S, anchor="middle", weight="bold")
            ref = st["ref"][b]
            _text(c, x + pw / 2, py + 66, p(f"ref {ref}", f"引用 {ref}") if ref else p("free", "空闲"), room=pw + 4,
                  size=S, anchor="middle", fill=PALETTE["muted"])
            if copied:
                old = [o for o in states[0]["tables"][1] if o not in st["tables"][1]][0]
                _text(c, x + pw / 2, py + 84, p(f"copy of #{old}", f"#{old} 的副本"), room=pw + pg + 30, size=S,
                      anchor="middle", fill=PALETTE["accent"], weight="bold")
        # pointers: table entries to blocks
        for r, tab in enumerate(st["tables"]):
            for i, b in enumerate(tab):
                x1 = table_x[r] + i * 34 + 15
                x2 = px0 + b * (pw + pg) + pw / 2 + (r * 2 - 1) * 8
                c.line(x1, ty + 56, x2, py - 2, stroke=colours[r], width=1.4, arrow="end")
        y0 += panel_h
        if k == 0:
            c.line(left, y0 - 4, W - left, y0 - 4, stroke="#d0d0d0", width=1)
    _text(c, left, y0 + 22, p("Physical blocks of 4 token slots. Blue: a token's K and V;\norange: the token B "
                              "wrote. Full blocks stay shared.",
                              "物理 block 每块 4 个槽位。蓝色：一个 token 的 K、V；\n橙色：B 新写入的 token。"
                              "写满的 block 仍共享。"),
          room=W - 2 * left, size=S, fill=PALETTE["muted"], italic=True)
    return c.svg()


DIAGRAMS = {"ch06_kv_shapes": draw_kv_shapes, "ch06_flash_tiling": draw_flash_tiling,
            "ch06_block_table": draw_block_table}
