"""Chapter 04's diagram: a tiled GEMM's reuse, and the tiers its tiles pass through.

``ch04_tiling``: ``Y[M, N] = X[M, K] · W[K, N]`` cut into ``b_m × b_n`` output tiles.  For one
output tile the kernel walks K: each step stages a ``b_m × b_k`` tile of X and a ``b_k × b_n``
tile of W in shared memory, where each X element is used ``b_n`` times and each W element
``b_m`` times; the FP32 accumulator stays in registers (Ampere, Hopper) or TMEM (data-centre
Blackwell).  Below, the three counts of chapter 04's section 3 for its 4096³ BF16 GEMM with
128 × 128 tiles, from :func:`llm_dataflow.gemm.gemm_traffic`: the operand bytes the
multiply-adds name, the tile loads that global memory serves (through L2), and the compulsory
bytes HBM must serve at least.
"""
from __future__ import annotations

from ..core.units import fmt_bytes
from ..gemm import gemm_traffic
from .svg import PALETTE, Canvas, pick

__all__ = ["DIAGRAMS", "draw_tiling", "TILING_EXAMPLE"]

#: The GEMM the diagram's numbers describe: ``(M, N, K, b_m, b_n, b_k, dtype)``, chapter 04's.
TILING_EXAMPLE = (4096, 4096, 4096, 128, 128, 64, "bf16")


def draw_tiling(lang: str = "en") -> str:
    """The SVG of ``ch04_tiling`` in ``lang`` (``"en"`` or ``"zh_CN"``).

    Raises:
        ValueError: an unknown ``lang``.
    """
    t = gemm_traffic(*TILING_EXAMPLE)
    M, N, K, bm, bn, bk, _ = TILING_EXAMPLE
    L = lambda en, zh: pick(lang, en, zh)   # noqa: E731
    W_, H_ = 440, 824
    c = Canvas(W_, H_, lang=lang, title=L("A tiled GEMM: each tile is loaded once and used many times",
                                          "分块 GEMM：每个 tile 只加载一次，却被使用许多次"))
    ink, muted, acc = PALETTE["text"], PALETTE["muted"], PALETTE["accent"]
    # the W tile gets its own hue, so that the legend tells it from the X tile (teal: 5:1 on white)
    wcol, wlight = "#00695c", "#d7efeb"
    c.text(20, 30, L("Load a tile once, use it many times", "tile 加载一次，使用多次"), size=17, weight="bold")

    # --- the three matrices: W on top, X on the left, Y below W --------------------------------
    xw, yx, wx, yw = 30, 190, 160, 70          # X's left edge, X's top, W's left edge, W's top
    xK, mM, nN, kK = 110, 170, 220, 100        # X width (K), X/Y height (M), W/Y width (N), W height (K)
    light = PALETTE["fill_light"]
    c.rect(wx, yw, nN, kK, fill=light, stroke=ink)                 # W [K, N]
    c.rect(xw, yx, xK, mM, fill=light, stroke=ink)                 # X [M, K]
    c.rect(wx, yx, nN, mM, fill=light, stroke=ink)                 # Y [M, N]
    c.text(wx + nN + 6, yw + 20, "W", size=16, weight="bold")
    c.text(wx + nN + 6, yw + 40, "[K, N]", size=14, fill=muted)
    c.text(xw, yx - 10, "X [M, K]", size=14, weight="bold")
    c.text(wx + nN + 6, yx + 20, "Y", size=16, weight="bold")
    c.text(wx + nN + 6, yx + 40, "[M, N]", size=14, fill=muted)
    # the strips one output tile needs, and the tiles of one K step
    ty, tx, th, tw = yx + 60, wx + 130, 34, 40                   # output tile's row (y) and column (x)
    c.rect(xw, ty, xK, th, fill="#fde7d9", stroke=acc, width=1)   # X row strip b_m × K
    c.rect(tx, yw, tw, kK, fill=wlight, stroke=wcol, width=1)     # W column strip K × b_n
    kx, ky = xw + 36, yw + 34                                      # this K step's tiles
    c.rect(kx, ty, 26, th, fill=acc, stroke=acc)                   # X tile b_m × b_k
    c.rect(tx, ky, tw, 22, fill=wcol, stroke=wcol)                 # W tile b_k × b_n
    c.rect(tx, ty, tw, th, fill=PALETTE["reg"], stroke=PALETTE["reg"])   # Y tile b_m × b_n
    c.line(kx + 26, ty + th / 2, tx - 4, ty + th / 2, stroke=acc, width=1.5, dash="4 3", arrow="end")
    c.line(tx + tw / 2, ky + 22, tx + tw / 2, ty - 4, stroke=wcol, width=1.5, dash="4 3", arrow="end")
    # legend of the tiles: one line each, below the matrices
    ly = yx + mM + 30
    legend = [(acc, L("X tile b_m × b_k: each element used b_n times", "X tile（b_m × b_k）：每个元素用 b_n 次")),
              (wcol, L("W tile b_k × b_n: each element used b_m times", "W tile（b_k × b_n）：每个元素用 b_m 次")),
              (PALETTE["reg"], L("Y tile b_m × b_n: the FP32 accumulator", "Y tile（b_m × b_n）：FP32 累加器"))]
    for i, (colour, label) in enumerate(legend):
        c.rect(20, ly + 24 * i - 12, 14, 14, fill=colour, stroke=colour, rx=2)
        c.text(42, ly + 24 * i, label, size=14)
    c.text(xw, yw + 16, L("walk K in", "沿 K 方向"), size=14, fill=muted)
    c.text(xw, yw + 34, L("steps of b_k", "每步 b_k"), size=14, fill=muted)

    # --- the tiers a tile passes through --------------------------------------------------------
    top = ly + 24 * 3 + 34
    c.text(20, top - 14, L("Where one K step's tiles travel", "一个 K 步的 tile 走哪条路"), size=15, weight="bold")
    tiers = [
        ("hbm", L("HBM (or GDDR): device memory", "HBM（或 GDDR）：显存")),
        ("l2", L("L2: serves every tile load", "L2：承接每一次 tile 加载")),
        ("smem", L("shared memory: X and W tiles, 2+ stages", "shared memory：X、W tile，至少 2 级流水")),
        ("reg", L("tensor cores; accumulator in registers / TMEM", "Tensor Core；累加器在寄存器 / TMEM")),
    ]
    bx, bw, bh, gap = 20, 400, 34, 22
    for i, (role, label) in enumerate(tiers):
        y = top + i * (bh + gap)
        c.box(bx, y, bw, bh, label, size=14, stroke=PALETTE[role], text_fill=PALETTE[role], width=2)
        if i:
            c.line(bx + 30, y - gap, bx + 30, y - 2, stroke=PALETTE[tiers[i - 1][0]], arrow="end")

    # --- the three counts -------------------------------------------------------------------------
    y0 = top + 4 * (bh + gap) + 12
    c.text(20, y0, L(f"{M}×{N}×{K} BF16, {bm}×{bn} tiles:", f"{M}×{N}×{K} BF16，{bm}×{bn} tile："),
           size=15, weight="bold")
    rows = [(L("operands the multiply-adds name", "乘加运算引用的操作数（逻辑）"), fmt_bytes(t.operand_bytes), ink),
            (L(f"tile loads (each reused {round(t.reuse)}×)", f"tile 加载（每字节复用 {round(t.reuse)} 次）"),
             fmt_bytes(t.global_bytes), PALETTE["l2"]),
            (L("HBM at least (each matrix once)", "HBM 至少（每个矩阵一次）"), fmt_bytes(t.compulsory_bytes),
             PALETTE["hbm"])]
    for i, (label, value, colour) in enumerate(rows):
        y = y0 + 28 + 24 * i
        c.text(20, y, label, size=14, fill=colour)
        c.text(420, y, value, size=14, anchor="end", weight="bold", fill=colour)
    return c.svg()


DIAGRAMS = {"ch04_tiling": draw_tiling}
