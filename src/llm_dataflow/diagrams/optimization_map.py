"""Chapter 08's diagram: the optimisation map as the accounts of a step that each technique changes.

``ch08_map``: five accounts a decode or prefill step spends (the weights read per token, the KV
cache read per token, activations and intermediates, kernel launches, idle time and
interference), each with the techniques that change it and one example computed by the package.
Chapter 08's closing table names the same five accounts (its "account" column), beside the lever
each technique pulls:

* weights: the bytes a batch-1 decode step of Llama-3-8B reads at context 0, in BF16 and INT4
  (:func:`~llm_dataflow.core.roofline.decode_step_bounds`: every weight once, one embedding row,
  the new token's K and V);
* KV: :func:`~llm_dataflow.core.kv.kv_bytes_per_token` of Llama-3-8B in BF16 and FP8 (scales
  included);
* activations: the score matrix of one layer of a 4,096-token Llama-3-8B prefill in BF16,
  ``H · T² · 2`` bytes, which FlashAttention never stores;
* kernel launches (host overhead: each launch is a one-way command from the host, not a round
  trip): the kernels of an unfused residual add + RMSNorm
  (:func:`~llm_dataflow.fusion.fusion_bytes`), and batching, whose one step's launches serve every
  row.  Speculative decoding is not on this row: it cuts the *target's* steps per token but adds
  γ draft forwards per step, so its launches per token can grow;
* idle time and interference: continuous batching fills the rows a static batch leaves idle, and
  P/D disaggregation keeps prefills from running between a request's decode steps (the ITL tail);
  the example is the bubble of one request on four pipeline stages
  (:func:`~llm_dataflow.core.parallel.pipeline_bubble_fraction`).
"""
from __future__ import annotations

from ..core.config import model_config
from ..core.kv import kv_bytes_per_token
from ..core.parallel import pipeline_bubble_fraction
from ..core.roofline import decode_step_bounds
from ..fusion import fusion_bytes
from .svg import PALETTE, Canvas, pick, text_width

__all__ = ["DIAGRAMS", "draw_map", "map_numbers"]

W = 400          # px: 13 px text shows at 11.6 px in a 390 px phone's column
PAD = 14
SIZE = 13
PREFILL_T = 4096


def map_numbers() -> dict[str, float]:
    """The numbers ``ch08_map`` prints: ``w_bf16``, ``w_int4`` (B, what a batch-1 decode step of
    Llama-3-8B reads at context 0), ``kv_bf16``, ``kv_fp8`` (B per token, all layers), ``scores`` (B, one
    layer's BF16 score matrix of a 4,096-token prefill), ``kernels`` (unfused residual add +
    RMSNorm) and ``bubble`` (one request on 4 pipeline stages, a fraction)."""
    cfg = model_config("Llama-3-8B")
    return {"w_bf16": decode_step_bounds(cfg, "H100-SXM", 1, 0, "bf16").nbytes,
            "w_int4": decode_step_bounds(cfg, "H100-SXM", 1, 0, "int4").nbytes,
            "kv_bf16": kv_bytes_per_token(cfg, "bf16"), "kv_fp8": kv_bytes_per_token(cfg, "fp8"),
            "scores": cfg.n_heads * PREFILL_T * PREFILL_T * 2,
            "kernels": fusion_bytes(1, 1, 2, residual=True)["kernels_unfused"],
            "bubble": pipeline_bubble_fraction(4, 1)}


def _line(c: Canvas, x: float, y: float, s: str, *, room: float, size: float = SIZE, **kw) -> None:
    w = text_width(s, size)
    if w > room:
        raise ValueError(f"text {s!r} is about {w:.0f} px wide; {room:.0f} px are free")
    c.text(x, y, s, size=size, **kw)


def draw_map(lang: str) -> str:
    """Five accounts of a step, the techniques that change each, one computed example per account.

    Raises:
        ValueError: ``lang`` not ``"en"`` or ``"zh_CN"``; a label too wide (a drawing bug).
    """
    n = map_numbers()
    p = lambda en, zh: pick(lang, en, zh)  # noqa: E731
    gb = lambda x: f"{x / 1e9:.1f} GB"  # noqa: E731
    gb2 = lambda x: f"{x / 1e9:.2f} GB"  # noqa: E731
    kb = lambda x: f"{x / 1e3:.1f} KB"  # noqa: E731
    rows = [
        (p("Weights read per token", "每个 token 读取的权重"), PALETTE["hbm"],
         [p("quantisation: fewer bytes per weight", "量化：每个权重的字节更少"),
          p("batching, speculation: more tokens per read", "批处理、投机解码：每次读取服务更多 token"),
          p("parallelism: each GPU reads only its share", "并行：每块 GPU 只读自己那一份")],
         p(f"Llama-3-8B step: {gb2(n['w_bf16'])} in BF16, {gb2(n['w_int4'])} in INT4",
           f"Llama-3-8B 每步读取：BF16 {gb2(n['w_bf16'])}，INT4 {gb2(n['w_int4'])}")),
        (p("KV cache read per token", "每个 token 读取的 KV Cache"), PALETTE["smem"],
         [p("KV quantisation: fewer bytes per token", "KV 量化：每个 token 的字节更少"),
          p("paged KV: less memory reserved, same bytes read", "分页 KV：预留更少，读取字节不变")],
         p(f"Llama-3-8B: {kb(n['kv_bf16'])} per token in BF16, {kb(n['kv_fp8'])} in FP8",
           f"Llama-3-8B：每 token BF16 {kb(n['kv_bf16'])}，FP8 {kb(n['kv_fp8'])}")),
        (p("Activations and intermediates", "激活值与中间结果"), PALETTE["l2"],
         [p("fusion, FlashAttention: kept on chip", "融合、FlashAttention：留在片上"),
          p("W8A8, FP8: half the bytes, twice the FLOP roof", "W8A8、FP8：字节减半，算力屋顶翻倍")],
         p(f"{PREFILL_T:,}-token prefill: {gb(n['scores'])} of scores per layer",
           f"{PREFILL_T:,} token 的 Prefill：每层分数矩阵 {gb(n['scores'])}")),
        (p("Kernel launches (host overhead)", "kernel 启动（主机开销）"), PALETTE["host"],
         [p(f"fusion: {n['kernels']} kernel launches become 1", f"融合：{n['kernels']} 次 kernel 启动变为 1 次"),
          p("batching: one step's launches serve every row", "批处理：一步的 kernel 启动服务所有行")],
         p("each launch costs microseconds, whatever its bytes", "每次启动都要几微秒，与字节多少无关")),
        (p("Idle time and interference", "空闲与干扰"), PALETTE["compute"],
         [p("continuous batching: no row waits for a batch", "连续批处理：没有一行要等整批结束"),
          p("P/D disaggregation: no prefill between decodes", "P/D 分离：Decode 步之间不再插入 Prefill")],
         p(f"one request on 4 pipeline stages: {n['bubble']:.0%} idle",
           f"一个请求跑 4 级流水线：{n['bubble']:.0%} 的时间空闲")),
    ]
    head_h, line_h, gap_h, top = 26, 18, 12, 30
    heights = [head_h + (len(lines) + 1) * line_h + 6 for _, _, lines, _ in rows]
    H = PAD + top + sum(heights) + len(rows) * gap_h + 22 + PAD
    c = Canvas(W, H, lang=lang, title=p(
        "The optimisation map: five accounts of a step and the techniques that change each",
        "优化全景图：一步的五本账，以及改变每本账的技术"))
    room = W - 2 * PAD - 12
    _line(c, PAD, PAD + 16, p("What each optimisation changes", "每种优化改变的是哪本账"), room=W - 2 * PAD,
          size=15, weight="bold")
    y = PAD + top
    for (head, colour, lines, example), row_h in zip(rows, heights):
        c.rect(PAD, y, W - 2 * PAD, row_h, fill="#ffffff", stroke=colour, width=1.5)
        c.rect(PAD, y, W - 2 * PAD, head_h, fill=colour, stroke=colour, width=1.5)
        _line(c, PAD + 8, y + 18, head, room=room, size=14, weight="bold", fill="#ffffff")
        for i, s in enumerate(lines):
            _line(c, PAD + 8, y + head_h + 15 + i * line_h, s, room=room)
        _line(c, PAD + 8, y + head_h + 15 + len(lines) * line_h, example, room=room, fill=PALETTE["muted"],
              italic=True)
        y += row_h + gap_h
    _line(c, PAD, y + 12, p("A change saves time only where its account binds.",
                            "只有当它改变的那本账是瓶颈时，优化才省时间。"),
          room=W - 2 * PAD, fill=PALETTE["accent"], weight="bold")
    return c.svg()


DIAGRAMS = {"ch08_map": draw_map}
