"""Chapter 03's diagrams: one decoder layer with the shape of every tensor, and eager vs fused
attention.

``ch03_layer``: the Pre-Norm layer ``A = X + Attn(Norm(X))``, ``X' = A + MLP(Norm(A))`` as
:class:`llm_dataflow.model.Decoder` builds it — RMSNorm, the q/k/v projections, RoPE on q and k,
attention over the KV cache, the output projection, the residual add, RMSNorm, the SwiGLU MLP
(gate and up, SiLU·mul, down) and the second residual add.  Every tensor between two operators
carries its shape in the letters of ``book/notation.md`` (an edge that passes the same tensor on
shows it once) and the width of one real model (Llama-3-8B's
``config.json``, :func:`llm_dataflow.model_config`).

``ch03_attention``: which intermediate tensors make a round trip to HBM.  Eager attention (the
kernels of transformers' ``eager_attention_forward`` in BF16, :func:`llm_dataflow.ops.attention_traffic`
``kernel="eager"``) writes every ``[B, H, T, S]`` intermediate — scores, scaled, masked, cast to
FP32, probabilities, cast back — and the next kernel reads it back; a fused kernel keeps them on
chip and moves only q, K, V and the output.  The bytes are one Llama-3-8B layer's for a prefill
of 8,192 tokens at batch 1 (chapter 03's example); the times are floors, those bytes at the H100's
HBM bandwidth and the attention FLOPs at its BF16 peak (:func:`llm_dataflow.ops.attention_floors`):
the fused kernel's byte floor is not its time, its FLOPs are.
"""
from __future__ import annotations

from ..core.config import model_config
from ..core.hardware import hardware
from ..core.units import fmt_bytes, fmt_si
from ..ops import attention_floors, attention_traffic
from .svg import PALETTE, Canvas, pick

__all__ = ["DIAGRAMS", "draw_layer", "draw_attention", "LAYER_MODEL", "ATTENTION_EXAMPLE"]

#: The model whose widths ``ch03_layer`` prints beside the letters.
LAYER_MODEL = "Llama-3-8B"
#: ``(model, T, dtype bytes, hardware)`` of ``ch03_attention``: a BF16 prefill of 8,192 tokens, batch 1.
ATTENTION_EXAMPLE = ("Llama-3-8B", 8192, 2, "H100-SXM")


def draw_layer(lang: str = "en") -> str:
    """The SVG of ``ch03_layer`` in ``lang`` (``"en"`` or ``"zh_CN"``).

    Raises:
        ValueError: an unknown ``lang``.
    """
    cfg = model_config(LAYER_MODEL)
    D, H, Hkv, dh, F = cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.d_ff
    L = lambda en, zh: pick(lang, en, zh)   # noqa: E731
    ink, muted, hbm = PALETTE["text"], PALETTE["muted"], PALETTE["hbm"]
    W_, H_ = 440, 1010
    c = Canvas(W_, H_, lang=lang, title=L(f"One Pre-Norm decoder layer with the shape of every tensor ({LAYER_MODEL})",
                                          f"一个 Pre-Norm 解码器层及其每个张量的形状（{LAYER_MODEL}）"))
    c.text(20, 28, L("One decoder layer: the shape of every tensor", "一个解码器层：每个张量的形状"), size=17, weight="bold")
    c.text(20, 50, f"{LAYER_MODEL}: D = {D:,}, H = {H}, H_kv = {Hkv}, d_h = {dh}, F = {F:,}", size=14, fill=muted)

    cx, bw, bh = 250, 190, 32          # main column centre, box width and height
    res_x = 44                         # the residual stream's line

    def box(y, label, colour=ink, w=bw, x=None, fill="#ffffff"):
        x0 = cx - w / 2 if x is None else x
        c.box(x0, y, w, bh, label, size=14, stroke=colour, text_fill=colour, fill=fill, width=1.8)
        return y + bh

    def edge(y0, y1, label, x=cx):
        c.line(x, y0, x, y1 - 1, arrow="end")
        c.text(x + 10, (y0 + y1) / 2 + 5, label, size=14, fill=muted)

    def add(y):                         # a residual add: a circle with a plus
        r = 13
        c.path(f"M {cx - r} {y + r} A {r} {r} 0 1 0 {cx + r} {y + r} A {r} {r} 0 1 0 {cx - r} {y + r} Z",
               stroke=ink, fill="#ffffff", width=1.8)
        c.line(cx - 7, y + r, cx + 7, y + r, width=1.8)
        c.line(cx, y + r - 7, cx, y + r + 7, width=1.8)
        return y + 2 * r

    y = 72
    y = box(y, L("residual stream X_l", "残差主干 X_l"), colour=hbm, fill=PALETTE["fill_light"])
    top_res = y - bh / 2
    edge(y, y + 40, f"[B, T, D]  D = {D:,}")
    y = box(y + 40, "RMSNorm")
    # q, k, v side by side
    qx, kx, vx, sw = cx - 140, cx - 45, cx + 50, 90
    fan = y + 22
    c.line(cx, y, cx, fan)
    c.line(qx + sw / 2, fan, vx + sw / 2, fan)
    for x0 in (qx, kx, vx):
        c.line(x0 + sw / 2, fan, x0 + sw / 2, fan + 17, arrow="end")
    yq = fan + 18
    for x0, name in ((qx, "q_proj"), (kx, "k_proj"), (vx, "v_proj")):
        box(yq, name, x=x0, w=sw)
    y = yq + bh
    c.text(60, y + 22, "Q [B, T, H·d_h],  K, V [B, T, H_kv·d_h]", size=14, fill=muted)
    c.text(60, y + 42, f"H·d_h = {H}·{dh} = {H * dh:,};  H_kv·d_h = {Hkv}·{dh} = {Hkv * dh:,}", size=14, fill=muted)
    for x0 in (qx, kx, vx):
        c.line(x0 + sw / 2, y, x0 + sw / 2, y + 6)
    for x0 in (qx, kx):
        c.line(x0 + sw / 2, y + 50, x0 + sw / 2, y + 74, arrow="end")
    v_top = y + 50
    y = box(y + 75, L("RoPE on Q and K", "对 Q、K 做 RoPE"), w=sw * 2 + 5, x=qx)
    c.line(vx + sw / 2, v_top, vx + sw / 2, y + 39, arrow="end")
    c.line(qx + sw * 2 + 5, y - 6, vx + 14, y + 39, arrow="end")       # the rotated K goes into the cache too
    # KV cache beside attention
    edge(y, y + 40, "", x=cx - 47)
    ya = y + 40
    box(ya, L("attention", "attention"), x=qx, w=sw * 2 - 15, colour=PALETTE["reg"])
    c.line(vx, ya + bh / 2, qx + sw * 2 - 14, ya + bh / 2, arrow="end", stroke=hbm)
    box(ya, L("KV cache", "KV Cache"), x=vx, w=sw, colour=hbm, fill=PALETTE["fill_light"])
    c.text(vx - 2, ya + bh + 20, "[B, H_kv, S, d_h]", size=14, fill=hbm)
    c.text(vx - 2, ya + bh + 38, L("S = C + T keys", "S = C + T 个 key"), size=14, fill=hbm)
    c.text(qx, ya + bh + 20, L("softmax(QKᵀ/√d_h)·V", "softmax(QKᵀ/√d_h)·V"), size=14, fill=muted)
    y = ya + bh + 44
    edge(y, y + 40, f"[B, T, H·d_h] = {H * dh:,}", x=cx)
    y = box(y + 40, "o_proj")
    edge(y, y + 36, f"[B, T, D]")
    ya1 = y + 36
    y = add(ya1)
    mid_res = ya1 + 13
    c.text(cx + 22, ya1 + 19, L("residual add", "残差相加"), size=14, fill=muted)
    edge(y, y + 40, f"A_l [B, T, D]")
    y = box(y + 40, "RMSNorm")
    a_res = y + 20
    # gate and up side by side
    gx, ux, gw = cx - 100, cx + 5, 95
    fan = y + 20
    c.line(cx, y, cx, fan)
    c.line(gx + gw / 2, fan, ux + gw / 2, fan)
    for x0 in (gx, ux):
        c.line(x0 + gw / 2, fan, x0 + gw / 2, fan + 17, arrow="end")
    yg = fan + 18
    box(yg, "gate_proj", x=gx, w=gw)
    box(yg, "up_proj", x=ux, w=gw)
    y = yg + bh
    for x0 in (gx, ux):
        c.line(x0 + gw / 2, y, x0 + gw / 2, y + 40, arrow="end")
    c.text(ux + gw + 6, y + 25, f"[B, T, F]", size=14, fill=muted)
    c.text(ux + gw + 6, y + 43, f"F = {F:,}", size=14, fill=muted)
    y = box(y + 41, "SiLU(gate) ⊙ up", w=gw * 2 + 5, x=gx)
    edge(y, y + 40, f"[B, T, F]")
    y = box(y + 40, "down_proj")
    edge(y, y + 36, f"[B, T, D]")
    ya2 = y + 36
    y = add(ya2)
    end_res = ya2 + 13
    edge(y, y + 40, L("X_l+1 [B, T, D]: next layer", "X_l+1 [B, T, D]：下一层"))
    # the residual stream: X_l around the attention branch, A_l around the MLP branch
    c.line(cx - bw / 2, top_res, res_x, top_res, stroke=hbm, width=2)
    c.line(res_x, top_res, res_x, mid_res, stroke=hbm, width=2)
    c.line(res_x, mid_res, cx - 14, mid_res, stroke=hbm, width=2, arrow="end")
    c.line(cx - 14, a_res - 20 - bh - 40 + 40 + 0, cx - 14, a_res - 20 - bh - 40 + 40 + 0, stroke=hbm)
    c.line(cx, mid_res + 28, res_x, mid_res + 28, stroke=hbm, width=2)
    c.line(res_x, mid_res + 28, res_x, end_res, stroke=hbm, width=2)
    c.line(res_x, end_res, cx - 14, end_res, stroke=hbm, width=2, arrow="end")
    c.text(res_x + 6, (top_res + mid_res) / 2, "X_l", size=14, fill=hbm)
    c.text(res_x + 6, (mid_res + end_res) / 2 + 60, "A_l", size=14, fill=hbm)
    return c.svg()


def draw_attention(lang: str = "en") -> str:
    """The SVG of ``ch03_attention`` in ``lang`` (``"en"`` or ``"zh_CN"``).

    Raises:
        ValueError: an unknown ``lang``.
    """
    name, T, e, hw = ATTENTION_EXAMPLE
    cfg = model_config(name)
    eager = attention_traffic(1, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, T, T, e, "eager")
    fused = attention_traffic(1, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, T, T, e, "fused")
    floors = attention_floors(name, T, hw, {2: "bf16", 4: "fp32"}[e])
    e_tot, f_tot = floors["eager bytes"], floors["fused bytes"]
    spec = hardware(hw)
    bw = spec.hbm_bandwidth
    L = lambda en, zh: pick(lang, en, zh)   # noqa: E731
    ink, muted, hbm, red = PALETTE["text"], PALETTE["muted"], PALETTE["hbm"], PALETTE["reg"]
    names = {"QKᵀ → scores": ("QKᵀ", "S"), "scale": (L("scale", "缩放"), "S"), "mask": (L("mask", "掩码"), "S"),
             "cast scores → FP32": (L("cast to FP32", "转 FP32"), "S"),
             "softmax (FP32)": ("softmax", "P"), "cast probabilities back": (L("cast back", "转回 BF16"), "P"),
             "P·V → out": ("P·V", "O")}
    step = 62
    W_, H_ = 440, 170 + step * len(eager) + 238
    c = Canvas(W_, H_, lang=lang, title=L("Eager vs fused attention: which intermediate tensors make a round trip to HBM",
                                          "eager 与融合 attention：哪些中间张量要往返 HBM"))
    c.text(20, 28, L("Which tensors go to HBM and back?", "哪些张量要去 HBM 走一个来回？"), size=17, weight="bold")
    c.text(20, 50, L(f"one {name} layer, prefill T = {T:,}, BF16", f"{name} 的一层，Prefill T = {T:,}，BF16"),
           size=14, fill=muted)
    # column heads
    c.text(20, 84, L("eager: a kernel per step", "eager：每步一个 kernel"), size=15, weight="bold")
    c.text(290, 84, L("fused", "融合"), size=15, weight="bold")
    y = 100
    c.box(20, y, 120, 30, L("Q, K, V in HBM", "Q、K、V 在 HBM"), size=14, stroke=hbm, text_fill=hbm, fill=PALETTE["fill_light"])
    y += 30
    for i, (kern, _, written) in enumerate(eager):
        label, out = names[kern]
        c.line(80, y, 80, y + 20, arrow="end", stroke=hbm if i else hbm)
        c.box(20, y + 21, 120, 28, label, size=14, stroke=red, text_fill=red)
        y += 49
        last = i == len(eager) - 1
        colour = hbm
        c.line(80, y, 80, y + step - 49, stroke=colour, width=2, dash="" if last else "5 3")
        what = (L(f"{out} → HBM, {fmt_bytes(written)}", f"{out} → HBM，{fmt_bytes(written)}") if last else
                L(f"{out} ⇄ HBM, {fmt_bytes(written)} each way", f"{out} ⇄ HBM，每个方向 {fmt_bytes(written)}"))
        c.text(92, y + 19, what, size=14, fill=colour)
        y += step - 49
    # the fused column: one box spanning the eager kernels
    fx, fw = 290, 130
    f_in, f_out = fused[0][1], fused[0][2]
    c.box(fx, 100, fw, 30, L("Q, K, V in", "读 Q、K、V"), size=14, stroke=hbm, text_fill=hbm, fill=PALETTE["fill_light"])
    c.text(fx + fw / 2 + 8, 155, fmt_bytes(f_in), size=14, fill=hbm)
    c.line(fx + fw / 2, 130, fx + fw / 2, 170, arrow="end", stroke=hbm)
    top, bottom = 171, y - step + 30
    c.rect(fx, top, fw, bottom - top, stroke=red, width=1.8)
    lines = L("one kernel:\nS and P stay\non chip, one\ntile at a time\n(Flash-\nAttention)",
              "一个 kernel：\nS 和 P 逐 tile\n留在片上\n（Flash-\nAttention）")
    c.text(fx + fw / 2, top + 40, lines, size=14, anchor="middle", fill=red)
    # its arithmetic, which the byte floor leaves out
    c.line(fx + 12, bottom - 124, fx + fw - 12, bottom - 124, stroke=red, width=1)
    maths = L(f"its math:\n{fmt_si(floors['flops'], 'FLOP')}\n≥ {fmt_si(floors['compute time (s)'], 's')}\nat the\nBF16 peak",
              f"它的计算：\n{fmt_si(floors['flops'], 'FLOP')}\n按 BF16 峰值\n至少\n{fmt_si(floors['compute time (s)'], 's')}")
    c.text(fx + fw / 2, bottom - 100, maths, size=14, anchor="middle", fill=red)
    c.line(fx + fw / 2, bottom, fx + fw / 2, bottom + 30, arrow="end", stroke=hbm)
    c.text(fx, bottom + 50, L(f"O → HBM, {fmt_bytes(f_out)}", f"O → HBM，{fmt_bytes(f_out)}"), size=14, fill=hbm)
    # totals
    y = H_ - 166
    c.line(20, y - 22, 420, y - 22, stroke=muted, width=1)
    c.text(20, y, L(f"eager: {fmt_bytes(e_tot)} of HBM traffic, ≥ {fmt_si(floors['eager HBM time (s)'], 's')}",
                    f"eager：HBM 流量 {fmt_bytes(e_tot)}，至少 {fmt_si(floors['eager HBM time (s)'], 's')}"),
           size=15, weight="bold", fill=red)
    c.text(20, y + 24, L(f"fused: {fmt_bytes(f_tot)}, ≥ {fmt_si(floors['fused HBM time (s)'], 's')} of HBM time,",
                         f"融合：{fmt_bytes(f_tot)}，HBM 时间至少 {fmt_si(floors['fused HBM time (s)'], 's')}，"),
           size=15, weight="bold", fill=hbm)
    c.text(20, y + 48, L(f"but its math takes ≥ {fmt_si(floors['compute time (s)'], 's')}: {floors['fused bound']}",
                         f"但计算至少要 {fmt_si(floors['compute time (s)'], 's')}："
                         f"{ {'compute-bound': '算力受限', 'memory-bound': '带宽受限'}[floors['fused bound']] }"),
           size=15, weight="bold", fill=hbm)
    c.text(20, y + 72, L(f"up to {floors['bytes ratio']:.0f}× fewer bytes, about {floors['time ratio']:.0f}× less time",
                         f"字节数最多降为 1/{floors['bytes ratio']:.0f}，时间约为 1/{floors['time ratio']:.0f}"),
           size=15, weight="bold")
    c.text(20, y + 96, L(f"floors at the {hw}'s {bw / 1e12:.2f} TB/s and {spec.peak_flops['bf16'] / 1e12:.0f} TFLOP/s BF16",
                         f"下界按 {hw} 的 {bw / 1e12:.2f} TB/s 与 BF16 {spec.peak_flops['bf16'] / 1e12:.0f} TFLOP/s 计"),
           size=14, fill=muted)
    c.text(20, y + 118, L("S, P: [B, H, T, S] scores and probabilities;", "S、P：[B, H, T, S] 的分数与概率；"),
           size=14, fill=muted)
    c.text(20, y + 138, L("⇄: written to HBM, then read back", "⇄：写入 HBM，再读回"), size=14, fill=muted)
    return c.svg()


DIAGRAMS = {"ch03_layer": draw_layer, "ch03_attention": draw_attention}
