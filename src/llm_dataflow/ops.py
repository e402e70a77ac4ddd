"""Per-operator ledger of one decoder layer: FLOPs and bytes per operator, prefill vs decode (chapter 03).

:func:`op_ledger` runs one layer of the real :class:`~llm_dataflow.model.Decoder` operator by
operator (the same weights and the same building blocks ``rms_norm``, ``apply_rope``, …; a test
checks that its output equals the layer's), and records for each operator

* ``flops_counted`` — FLOPs counted by ``torch.utils.flop_counter.FlopCounterMode`` while the
  operator runs.  That counter only knows matmul-class ops (``mm``, ``bmm``, ``addmm``, conv,
  GPU attention kernels); elementwise work (norms, RoPE, SiLU, residual adds) counts 0 — and CPU
  ``scaled_dot_product_attention`` counts 0 too, which is why the ledger computes attention with
  explicit matmuls;
* ``bytes_read`` / ``bytes_written`` — *modelled* from the sizes of the tensors each kernel of the
  operator takes and returns (weights included): every kernel reads each input once and writes
  each output once.  Nothing here is timed, and caches are ignored (a re-read that hits a CPU
  cache or a GPU's L2 is still counted).  One convention throughout: **one kernel per matmul**,
  so an input that feeds two matmuls (the normalised x into ``gate_proj`` and ``up_proj``, dense
  or expert) is read twice.  Attention runs as the *unfused* (eager) sequence that
  transformers' ``eager_attention_forward`` runs — ``QKᵀ``, scale, mask, softmax in FP32, ``PV``
  — and its row counts the ``[B, H, T, S]`` scores and probabilities each of those kernels writes
  and reads back (:func:`attention_traffic`); a fused kernel's traffic is
  ``attention_traffic(..., kernel="fused")``;
* ``flops_analytic`` / ``bytes_analytic`` — the closed-form count of :func:`analytic_op_costs`
  (formulas in its docstring).  Matmul FLOPs: ``2·M·N·K`` (one multiply + one add per term).

Shapes: B batch, T new tokens per row, C tokens already in the KV cache (decode context),
S = C + T keys attended, D d_model, H/H_kv heads, d_h head_dim, F d_ff, E experts, k per token.

Prefill and decode are *regions*, not definitions: a matmul's intensity depends on N = B·T, the
tokens that share one read of its weights, whichever phase supplies them (:func:`op_regions`,
:func:`matmul_ridge_tokens`).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from .core.accounting import expected_experts_hit
from .core.config import ModelConfig, model_config, tensor_specs
from .core.hardware import HARDWARE, hardware, ridge_point
from .linear_kernels import linear
from .model import Decoder, apply_rope, check_supported, rms_norm, route
from .core.units import check_dtype, dtype_bits, fmt_bytes, fmt_si, require_nonnegative, require_positive

__all__ = ["op_ledger", "analytic_op_costs", "attention_traffic", "ledger_totals", "ledger_view", "layer_costs",
           "op_regions", "matmul_ridge_tokens", "attention_floors", "PHASES", "ATTENTION_KERNELS", "MATMUL_OPS"]

PHASES = ("prefill", "decode")

#: How attention's bytes are counted: ``"eager"`` (the ledger's unfused sequence) or ``"fused"``.
ATTENTION_KERNELS = ("eager", "eager-hf", "fused")

#: Operators of a layer that are weight matmuls (the rows :func:`op_regions` groups as "matmuls").
MATMUL_OPS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "router",
              "experts (routed)", "shared_expert")

_ELEM = {torch.float32: 4, torch.float16: 2, torch.bfloat16: 2, torch.float64: 8}


def _shape_args(cfg, batch, seq_len, phase, context_len):
    if not isinstance(cfg, ModelConfig):
        raise ValueError(f"cfg={cfg!r} is not a ModelConfig")
    require_positive("batch", batch)
    if phase not in PHASES:
        raise ValueError(f"phase={phase!r} is not allowed; allowed: {', '.join(PHASES)}")
    if phase == "decode":
        require_nonnegative("context_len", context_len)
        return 1, context_len  # T = 1 new token after C cached ones
    require_positive("seq_len", seq_len)
    return seq_len, 0


def attention_traffic(batch: int, n_heads: int, n_kv_heads: int, head_dim: int, seq_len: int, keys: int,
                      elem_bytes: int = 4, kernel: str = "eager") -> list[tuple[str, int, int]]:
    """Modelled HBM traffic of one layer's attention, kernel by kernel: ``[(kernel, bytes read,
    bytes written)]`` (bytes from tensor sizes; each kernel reads each input once and writes its
    output once).

    Shapes: B = ``batch``, H/H_kv heads, d_h, T = ``seq_len`` queries, S = ``keys`` keys; element
    size e = ``elem_bytes``; q and out are ``B·H·T·d_h`` elements, K and V ``B·H_kv·S·d_h`` each,
    the scores ``N_s = B·H·T·S``.

    * ``"eager"`` — the sequence of transformers' ``eager_attention_forward`` (Llama;
      ``transformers/models/llama/modeling_llama.py``) as :func:`op_ledger` runs it, with GQA
      folded so K/V are not repeated: ``QKᵀ`` (reads q, K; writes N_s·e), scale (N_s·e each way),
      mask (reads N_s·e and the ``[T, S]`` boolean mask, 1 B each, built once per forward and
      broadcast over B and H; writes N_s·e), then, when e ≠ 4, a cast to FP32 (reads N_s·e,
      writes 4·N_s), softmax in FP32 (4·N_s each way), a cast back (reads 4·N_s, writes N_s·e),
      and ``PV`` (reads N_s·e and V, writes out).  About 32 bytes per score element in FP32 and
      in BF16 alike.  A simplification of transformers' path: ``"eager-hf"`` adds what it leaves out.
    * ``"eager-hf"`` — transformers' ``eager_attention_forward`` as it runs: ``"eager"`` plus
      ``repeat_kv`` (reads K and V, writes them expanded to H heads: ``2·kv·H/H_kv``), ``QKᵀ`` and
      ``PV`` reading the expanded K and V, an additive mask in the scores' dtype (``B·T·S·e``
      read instead of ``T·S`` bytes: transformers builds ``[B, 1, T, S]``), and the output's
      ``transpose(1, 2).contiguous()`` copy (reads and writes out).  bench-llama, T = S = 128,
      FP32: 12,910,592 B against ``"eager"``'s 9,715,712 B and ``"fused"``'s 1,310,720 B.
    * ``"fused"`` — one kernel that keeps scores on chip (FlashAttention, Dao et al. 2022,
      arXiv:2205.14135): q, K, V read once, out written once.  This is the floor.  FlashAttention's
      Algorithm 1 loads each K/V block once and, in its inner loop, re-reads Q and re-reads and
      re-writes O once per K/V block; FlashAttention-2 (Dao 2023, arXiv:2307.08691) swaps the
      loops and streams K/V once per block of queries.  Either way its Theorem 2 counts
      Θ(N²d²/M) HBM accesses for SRAM of M elements, and only caches (a GPU's L2) bring the
      re-reads back to about once.

    Raises:
        ValueError: a size < 1 (``keys`` < ``seq_len``), an unknown ``kernel``.
    """
    for name, v in (("batch", batch), ("n_heads", n_heads), ("n_kv_heads", n_kv_heads), ("head_dim", head_dim),
                    ("seq_len", seq_len), ("keys", keys), ("elem_bytes", elem_bytes)):
        require_positive(name, v)
    if keys < seq_len:
        raise ValueError(f"keys={keys} < seq_len={seq_len}: the queries are the last T of S keys")
    if kernel not in ATTENTION_KERNELS:
        raise ValueError(f"kernel={kernel!r} is not allowed; allowed: {', '.join(ATTENTION_KERNELS)}")
    e = elem_bytes
    q = batch * n_heads * seq_len * head_dim * e    # q in, and out (same size)
    kv = batch * n_kv_heads * keys * head_dim * e   # K, and V (same size)
    if kernel == "fused":
        return [("fused attention (q, K, V in; out)", q + 2 * kv, q)]
    ns = batch * n_heads * seq_len * keys           # score elements
    hf = kernel == "eager-hf"
    kv_used = kv * n_heads // n_kv_heads if hf else kv   # K and V as QKᵀ and PV read them
    mask = batch * seq_len * keys * e if hf else seq_len * keys
    out = [("repeat_kv (K, V → H heads)", 2 * kv, 2 * kv_used)] if hf else []
    out += [("QKᵀ → scores", q + kv_used, ns * e),
            ("scale", ns * e, ns * e),
            ("mask", ns * e + mask, ns * e)]
    if e != 4:
        out.append(("cast scores → FP32", ns * e, ns * 4))
    out.append(("softmax (FP32)", ns * 4, ns * 4))
    if e != 4:
        out.append(("cast probabilities back", ns * 4, ns * e))
    out.append(("P·V → out", ns * e + kv_used, q))
    if hf:
        out.append(("out.transpose(1, 2).contiguous()", q, q))
    return out


def analytic_op_costs(cfg: ModelConfig, batch: int, seq_len: int, phase: str = "prefill",
                      context_len: int = 0, elem_bytes: int = 4, layer: int = 0,
                      active_experts: int | None = None, attention: str = "eager") -> dict[str, tuple[int, int]]:
    """Closed-form ``{operator: (FLOPs, bytes)}`` for one layer (``layer`` picks dense vs MoE).

    With ``N = B·T`` tokens (T = ``seq_len`` in prefill, 1 in decode), ``S = C + T``, ``e`` =
    ``elem_bytes``:

    * linear ``[N, in] → [N, out]``: FLOPs ``2·N·in·out``; bytes ``(N·in + in·out + N·out)·e``
      (activations in, weight, activations out; biases add ``out·e``).
    * RMSNorm: FLOPs ``4·N·D`` (square, mean, scale, weight); bytes ``(2·N·D + D)·e``.
    * RoPE on q and k: FLOPs ``3·N·(H+H_kv)·d_h``; bytes read ``N·(H+H_kv)·d_h + 2·T·d_h``
      (q, k and the cos/sin rows), written ``N·(H+H_kv)·d_h``.
    * KV-cache write: ``2·N·H_kv·d_h`` elements read and written, 0 FLOPs.
    * attention: FLOPs ``4·B·H·T·S·d_h`` (QKᵀ and PV, masked entries included, as dense kernels
      compute them; scale, mask and softmax not counted); bytes the sum of
      :func:`attention_traffic` for ``attention`` = ``"eager"`` (default: what :func:`op_ledger`
      runs, scores and probabilities written and read back) or ``"fused"`` (q, K, V, out only).
    * residual add: FLOPs ``N·D``; bytes ``3·N·D·e``.  SiLU·mul ``silu(g)·u``: FLOPs ``6·N·F``
      (sigmoid = negate, exp, add, divide, an exp counted as 1 FLOP: 4; then ×g and ×u: 2),
      bytes ``3·N·F·e``.
    * dense MLP: ``gate_proj``, ``up_proj``, ``down_proj`` are three linears as above (one kernel
      per matmul: x is read by ``gate_proj`` and again by ``up_proj``).
    * MoE: router ``2·N·D·E``; routed experts ``N·k·(6·D·F_e + 6·F_e + 2·D)`` FLOPs (matmuls,
      SiLU·mul, weighted sum) and the weights of the ``active_experts`` that receive at least one
      token (``3·D·F_e·e`` each; default :func:`~llm_dataflow.core.accounting.expected_experts_hit`
      ``E·(1 − (1 − k/E)^N)``, the expectation under *uniform* routing — the same assumption as
      ``weight_bytes_read``; a real, skewed router hits fewer, and a float results), plus per
      routed copy of a token ``(3·D + 6·F_e)·e`` (x read by the gate and the up matmul, y
      written; gate, up and act each written and read once: one kernel per matmul, as dense);
      the shared expert likewise with all N tokens: ``(3·N·D + 3·D·F_s + 6·N·F_s)·e``.

    Sources: the matmul count is the standard ``2·m·n·k`` (Kaplan et al. 2020, arXiv:2001.08361,
    Table 1 uses ``2·N_params`` per token).  Attention counts what a dense kernel does:
    ``2·n_ctx·d_attn`` per token and layer for QKᵀ and the same again for PV; Kaplan et al.'s
    Table 1 charges ``2·n_layer·n_ctx·d_attn`` per token for the two together, half of this.

    Raises:
        ValueError: bad phase / sizes / ``attention`` (named).
    """
    T, C = _shape_args(cfg, batch, seq_len, phase, context_len)
    check_supported(cfg)
    if attention not in ATTENTION_KERNELS:
        raise ValueError(f"attention={attention!r} is not allowed; allowed: {', '.join(ATTENTION_KERNELS)}")
    B, D, H, Hkv, dh, e = batch, cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, elem_bytes
    N, S = B * T, C + T

    def lin(n_in, n_out, bias=False):
        return 2 * N * n_in * n_out, (N * n_in + n_in * n_out + N * n_out + (n_out if bias else 0)) * e

    norm = (4 * N * D, (2 * N * D + D) * e)
    add = (N * D, 3 * N * D * e)
    out = {"input_layernorm": norm,
           "q_proj": lin(D, H * dh, cfg.attention_bias),
           "k_proj": lin(D, Hkv * dh, cfg.attention_bias),
           "v_proj": lin(D, Hkv * dh, cfg.attention_bias)}
    if cfg.qk_norm:
        out["q_norm+k_norm"] = (4 * N * (H + Hkv) * dh, (2 * N * (H + Hkv) * dh + 2 * dh) * e)
    out["rope"] = (3 * N * (H + Hkv) * dh, (2 * N * (H + Hkv) * dh + 2 * T * dh) * e)
    out["kv_cache_write"] = (0, 4 * N * Hkv * dh * e)
    out["attention"] = (4 * B * H * T * S * dh,
                        sum(r + w for _, r, w in attention_traffic(B, H, Hkv, dh, T, S, e, attention)))
    out["o_proj"] = lin(H * dh, D, cfg.attention_out_bias)
    out["residual_add_1"] = add
    out["post_attention_layernorm"] = norm
    if cfg.is_moe_layer(layer):
        E, k, Fe = cfg.n_routed_experts, cfg.n_experts_per_token, cfg.moe_d_ff
        # uniform routing: expected distinct experts hit by N tokens choosing k of E each
        n_act = expected_experts_hit(E, k, N) if active_experts is None else active_experts
        out["router"] = lin(D, E)
        out["experts (routed)"] = (N * k * (6 * D * Fe + 6 * Fe + 2 * D),
                                   (n_act * 3 * D * Fe + N * k * (3 * D + 6 * Fe)) * e)
        if cfg.n_shared_experts:
            Fs = cfg.shared_d_ff
            out["shared_expert"] = (6 * N * D * Fs + 6 * N * Fs, (3 * N * D + 3 * D * Fs + 6 * N * Fs) * e)
    else:
        Fd = cfg.d_ff
        out["gate_proj"] = lin(D, Fd, cfg.mlp_bias)
        out["up_proj"] = lin(D, Fd, cfg.mlp_bias)
        out["silu*mul"] = (6 * N * Fd, 3 * N * Fd * e)
        out["down_proj"] = lin(Fd, D, cfg.mlp_bias)
    out["residual_add_2"] = add
    return out


def _uniq_bytes(tensors) -> int:
    seen, total = set(), 0
    for t in tensors:
        key = (t.data_ptr(), t.shape, t.stride())
        if key not in seen:
            seen.add(key)
            total += t.numel() * t.element_size()
    return total


def op_ledger(cfg: ModelConfig, batch: int = 1, seq_len: int = 16, phase: str = "prefill",
              context_len: int = 0, dtype: torch.dtype = torch.float32, layer: int = 0,
              model: Decoder | None = None, seed: int = 0, return_output: bool = False):
    """Run one layer operator by operator and tabulate FLOPs and bytes per operator.

    Args:
        cfg: model config (any config the :class:`Decoder` supports).
        batch: B.  seq_len: T in prefill (ignored in decode, where T = 1).
        phase: ``"prefill"`` (T new tokens, no history) or ``"decode"`` (1 new token per row
            after ``context_len`` cached ones; the cache holds seeded random K/V).
        dtype: compute dtype.  layer: which layer of the model (dense or MoE).  Attention runs
            unfused (module docstring); its kernels' traffic is in ``frame.attrs["attention_kernels"]``.
        model: a :class:`Decoder` to take the weights from (default: ``Decoder(cfg)`` seeded).
        seed: seeds the input hidden states and the cached K/V.
        return_output: also return the layer output ``[B, T, D]`` (tests compare it with the
            layer's own forward).

    Returns:
        ``pandas.DataFrame`` with one row per operator and columns ``op, kind, flops_counted,
        flops_analytic, bytes_read, bytes_written, bytes, bytes_analytic, intensity``
        (FLOP/B, counted FLOPs over counted bytes; analytic FLOPs where the counter sees none);
        with ``return_output`` a tuple ``(frame, output, input, cache)``.

    Raises:
        ValueError: bad phase or sizes (named), ``layer`` out of range.
    """
    import pandas as pd

    T, C = _shape_args(cfg, batch, seq_len, phase, context_len)
    if not isinstance(layer, int) or not 0 <= layer < cfg.n_layers:
        raise ValueError(f"layer={layer!r} is out of range; allowed 0..{cfg.n_layers - 1}")
    if cfg.attention_sinks or cfg.swiglu_limit is not None:
        raise ValueError(f"cfg.attention_sinks={cfg.attention_sinks} is not allowed here: the ledger's ops do not "
                         "include gpt-oss's sinks and clamped experts; allowed: the Decoder's other configs")
    if model is None:
        torch.manual_seed(seed)
        model = Decoder(cfg, dtype=dtype)
    cfg, dtype = model.cfg, model.dtype
    dev = model.device
    lay = model.model.layers[layer]
    at = lay.self_attn
    B, D, H, Hkv, dh = batch, cfg.d_model, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    g = torch.Generator(device="cpu").manual_seed(seed)
    x = torch.randn(B, T, D, generator=g, dtype=torch.float32).to(dev, dtype)
    cache = model.new_cache(B, C + T)
    if C:
        for li in range(cfg.n_layers):
            cache.k[li][:, :, :C] = torch.randn(B, Hkv, C, dh, generator=g).to(dev, dtype)
            cache.v[li][:, :, :C] = torch.randn(B, Hkv, C, dh, generator=g).to(dev, dtype)
        cache.lengths.fill_(C)
    S = C + T
    cos, sin = model.rope_cos[C:S], model.rope_sin[C:S]  # [T, d_h]
    rows = []

    def run(name, kind, fn, inputs):
        with FlopCounterMode(display=False) as fc:
            y = fn()
        outs = y if isinstance(y, tuple) else (y,)
        rows.append(dict(op=name, kind=kind, flops_counted=int(fc.get_total_flops()),
                         bytes_read=_uniq_bytes(inputs), bytes_written=_uniq_bytes(outs)))
        return y

    def lin(name, t, mod, kind="matmul"):
        ins = [t, mod.weight] + ([mod.bias] if mod.bias is not None else [])
        return run(name, kind, lambda: linear(t, mod.weight, mod.bias), ins)

    eps = cfg.norm_eps
    xn = run("input_layernorm", "norm", lambda: rms_norm(x, lay.input_layernorm.weight, eps),
             [x, lay.input_layernorm.weight])
    q = lin("q_proj", xn, at.q_proj).view(B, T, H, dh)
    k = lin("k_proj", xn, at.k_proj).view(B, T, Hkv, dh)
    v = lin("v_proj", xn, at.v_proj).view(B, T, Hkv, dh)
    if cfg.qk_norm:
        q, k = run("q_norm+k_norm", "norm",
                   lambda: (rms_norm(q, at.q_norm.weight, eps), rms_norm(k, at.k_norm.weight, eps)),
                   [q, k, at.q_norm.weight, at.k_norm.weight])
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # views [B, H|H_kv, T, d_h]
    q, k = run("rope", "elementwise", lambda: (apply_rope(qt, cos, sin), apply_rope(kt, cos, sin)),
               [qt, kt, cos, sin])
    K, V = run("kv_cache_write", "memory", lambda: cache.update(layer, k, vt), [k, vt])
    rows[-1]["bytes_written"] = rows[-1]["bytes_read"]  # the views returned are not new writes

    # the causal (and sliding-window) mask [T, S]: built once per forward, as transformers'
    # create_causal_mask does, and read by every layer's attention
    pos = torch.arange(C, S, device=dev)[:, None]
    key = torch.arange(S, device=dev)[None]
    blocked = key > pos
    if cfg.layer_type(layer) == "sliding_attention" and cfg.sliding_window is not None:
        blocked |= key <= pos - cfg.sliding_window
    kernels = []  # (kernel, bytes read, bytes written) as the unfused sequence runs

    def kern(name, fn, inputs):
        y = fn()
        kernels.append((name, _uniq_bytes(inputs), _uniq_bytes([y])))
        return y

    def attend():
        # unfused, as transformers' eager attention: every step writes [B, H, T, S] to memory and
        # the next reads it back.  GQA folded (a group's H/H_kv query heads share one K/V head's
        # rows, K/V never repeated); explicit matmuls so FlopCounterMode sees them.
        rep = H // Hkv
        qg = q.reshape(B, Hkv, rep * T, dh)
        s = kern("QKᵀ → scores", lambda: qg @ K.transpose(-1, -2), [qg, K])  # [B, H_kv, rep·T, S]
        s = kern("scale", lambda: s * dh ** -0.5, [s])
        s = kern("mask", lambda: s.view(B, Hkv, rep, T, S).masked_fill(blocked, float("-inf"))
                 .view(B, Hkv, rep * T, S), [s, blocked])
        if s.dtype != torch.float32:  # softmax in FP32: torch casts first, then casts back
            s = kern("cast scores → FP32", lambda: s.float(), [s])
        s = kern("softmax (FP32)", lambda: s.softmax(-1), [s])
        if dtype != torch.float32:
            s = kern("cast probabilities back", lambda: s.to(dtype), [s])
        return kern("P·V → out", lambda: s @ V, [s, V]).reshape(B, H, T, dh)

    o = run("attention", "attention", attend, [q, K, V])
    rows[-1]["bytes_read"], rows[-1]["bytes_written"] = (sum(r for _, r, _ in kernels),
                                                         sum(w for _, _, w in kernels))
    o = o.transpose(1, 2).reshape(B, T, H * dh)
    ao = lin("o_proj", o, at.o_proj)
    a = run("residual_add_1", "elementwise", lambda: x + ao, [x, ao])
    an = run("post_attention_layernorm", "norm", lambda: rms_norm(a, lay.post_attention_layernorm.weight, eps),
             [a, lay.post_attention_layernorm.weight])
    mlp = lay.mlp
    active = None
    if cfg.is_moe_layer(layer):
        flat = an.reshape(-1, D)
        logits_w = mlp.gate.weight
        idx, wts = route(flat, logits_w, cfg.n_experts_per_token, cfg.norm_topk_prob)
        # the router row: its matmul (route() also does softmax/top-k, a few ops on [N, E])
        run("router", "matmul", lambda: F.linear(flat, logits_w), [flat, logits_w])
        used = sorted(set(idx.flatten().tolist()))
        active = len(used)

        traffic = {"r": 0, "w": 0}

        def swiglu_counted(t, ex):
            # an unfused SwiGLU, one kernel per matmul (as the dense rows): x read by the gate and
            # again by the up matmul; gate, up, act and down outputs written, then read
            gt = linear(t, ex.gate_proj.weight)
            ut = linear(t, ex.up_proj.weight)
            ht = F.silu(gt) * ut
            yt = linear(ht, ex.down_proj.weight)
            traffic["r"] += _uniq_bytes([t, gt, ut, ht]) + _uniq_bytes([t])
            traffic["w"] += _uniq_bytes([gt, ut, ht, yt])
            return yt

        def experts():
            y = torch.zeros_like(flat)
            for e in used:
                tok, slot = (idx == e).nonzero(as_tuple=True)
                y.index_add_(0, tok, swiglu_counted(flat[tok], mlp.experts[e]) * wts[tok, slot, None])
            return y

        wts_in = [p for e in used for p in (mlp.experts[e].gate_proj.weight, mlp.experts[e].up_proj.weight,
                                            mlp.experts[e].down_proj.weight)]
        y = run("experts (routed)", "matmul", experts, wts_in)
        rows[-1]["bytes_read"] += traffic["r"]  # weights of the used experts + per-slot activations
        rows[-1]["bytes_written"] = traffic["w"]
        if mlp.shared_experts is not None:
            se = mlp.shared_experts
            traffic["r"] = traffic["w"] = 0
            ys = run("shared_expert", "matmul", lambda: swiglu_counted(flat, se),
                     [se.gate_proj.weight, se.up_proj.weight, se.down_proj.weight])
            rows[-1]["bytes_read"] += traffic["r"]
            rows[-1]["bytes_written"] = traffic["w"]
            y = y + ys
        m = y.reshape(B, T, D)
    else:
        gp = lin("gate_proj", an, mlp.gate_proj)
        up = lin("up_proj", an, mlp.up_proj)
        act = run("silu*mul", "elementwise", lambda: F.silu(gp) * up, [gp, up])
        m = lin("down_proj", act, mlp.down_proj)
    out = run("residual_add_2", "elementwise", lambda: a + m, [a, m])

    ana = analytic_op_costs(cfg, B, T, phase, C, out.element_size(), layer, active)
    for r in rows:
        f, b = ana[r["op"]]
        r["flops_analytic"] = f
        r["bytes"] = r["bytes_read"] + r["bytes_written"]
        r["bytes_analytic"] = b
        fl = r["flops_counted"] or f
        r["intensity"] = fl / r["bytes"] if r["bytes"] else float("nan")
    cols = ["op", "kind", "flops_counted", "flops_analytic", "bytes_read", "bytes_written", "bytes",
            "bytes_analytic", "intensity"]
    frame = pd.DataFrame(rows)[cols]
    frame.attrs["attention_kernels"] = kernels
    if return_output:
        return frame, out, x, cache
    return frame


def ledger_totals(frame) -> dict:
    """Totals of a ledger: ``{"flops": analytic FLOPs, "flops_counted", "bytes", "intensity"}``
    (FLOP, bytes, FLOP/B), plus the operator with the most bytes and the one with the most FLOPs."""
    fl = int(frame["flops_analytic"].sum())
    by = int(frame["bytes"].sum())
    return {"flops": fl, "flops_counted": int(frame["flops_counted"].sum()), "bytes": by,
            "intensity": fl / by, "top_bytes": frame.loc[frame["bytes"].idxmax(), "op"],
            "top_flops": frame.loc[frame["flops_analytic"].idxmax(), "op"]}


def ledger_view(frame):
    """The ledger of :func:`op_ledger` as chapter 03 shows it: one row per operator (indexed by
    ``op``), its kind, FLOPs counted and by formula in SI units (``"268 MFLOP"``; ``"0"`` where the
    counter sees none), the modelled bytes in decimal units (``"5.24 MB"``) and the intensity
    (FLOP/B, two decimals).  The exact integers stay in ``frame``; tests compare those.

    Raises:
        ValueError: ``frame`` lacks a column of :func:`op_ledger`'s.
    """
    import pandas as pd

    need = ("op", "kind", "flops_counted", "flops_analytic", "bytes", "intensity")
    missing = [c for c in need if c not in getattr(frame, "columns", ())]
    if missing:
        raise ValueError(f"frame lacks the columns {missing}; give a frame of op_ledger")
    fl = lambda v: fmt_si(v, "FLOP") if v else "0"   # noqa: E731
    return pd.DataFrame({"kind": list(frame["kind"]),
                         "FLOPs (counted)": [fl(v) for v in frame["flops_counted"]],
                         "FLOPs (formula)": [fl(v) for v in frame["flops_analytic"]],
                         "bytes (modelled)": [fmt_bytes(v) for v in frame["bytes"]],
                         "FLOP/B (modelled)": [round(float(v), 2) for v in frame["intensity"]]},
                        index=pd.Index(list(frame["op"]), name="op"))


def layer_costs(model: str = "Llama-3-8B", phase: str = "decode", batch: int = 1, tokens: int = 1024,
                dtype: str = "bf16") -> dict:
    """Analytic (*modelled*) FLOPs and bytes of one layer of a preset, for the chapter's calculator.

    ``tokens`` is the prompt length T in prefill and the cached context C in decode (one new
    token per row).  Attention is counted as a fused kernel (``attention="fused"`` of
    :func:`analytic_op_costs`: q, K, V read once, out written once), as serving engines run it;
    the unfused ledger of the chapter writes and re-reads its scores (:func:`attention_traffic`).  For MoE presets the layer is the first MoE layer, with
    :func:`~llm_dataflow.core.accounting.expected_experts_hit` experts read (uniform routing, as
    ``weight_bytes_read`` assumes).  Returns display strings and numbers: FLOPs, bytes, arithmetic
    intensity (FLOP/B), the share of bytes that are weights, and the operators with most bytes
    and most FLOPs (from :func:`analytic_op_costs`).  The first two rows say what ``tokens`` meant:
    ``T`` (new tokens per row: the prompt in prefill, 1 in decode) and ``C`` (tokens already in the
    cache: 0 in prefill, ``tokens`` in decode), the letters of ``book/notation.md``.

    Raises:
        ValueError: unknown preset, phase or dtype, an unsupported architecture (MLA, GeGLU, …),
            ``batch`` < 1, ``tokens`` < 1 in prefill or < 0 in decode.
    """
    cfg = model_config(model)
    check_dtype(dtype)
    require_positive("batch", batch)
    seq, ctx = _layer_tokens(phase, tokens)
    e = dtype_bits(dtype) // 8
    layer = _first_moe_layer(cfg)
    c = analytic_op_costs(cfg, batch, seq, phase, ctx, e, layer, attention="fused")
    fl = sum(v[0] for v in c.values())
    by = sum(v[1] for v in c.values())
    hit = (expected_experts_hit(cfg.n_routed_experts, cfg.n_experts_per_token, batch * seq) / cfg.n_routed_experts
           if cfg.is_moe_layer(layer) else 1.0)  # share of routed experts read (uniform routing)
    w = sum(t.numel * (hit if t.expert is not None else 1.0) for t in tensor_specs(cfg) if t.layer == layer) * e
    return {"T (new tokens per row)": seq, "C (tokens already cached)": ctx,
            "FLOPs per layer": fmt_si(fl, "FLOP"), "bytes per layer": fmt_bytes(by),
            "intensity (FLOP/B)": round(fl / by, 2), "weight share of bytes": f"{100 * min(w, by) / by:.1f} %",
            "most bytes": max(c, key=lambda k: c[k][1]), "most FLOPs": max(c, key=lambda k: c[k][0])}


def _first_moe_layer(cfg: ModelConfig) -> int:
    return next((i for i in range(cfg.n_layers) if cfg.is_moe_layer(i)), 0)


def _hardware_spec(name):
    """The preset ``name`` (ValueError naming ``hardware`` for anything else, a list included)."""
    if not isinstance(name, str):
        raise ValueError(f"hardware={name!r} is not allowed; it must be a preset name: {', '.join(HARDWARE)}")
    return hardware(name)


def _layer_tokens(phase, tokens) -> tuple[int, int]:
    """``(seq_len, context_len)`` of a calculator's ``tokens``: T in prefill, C in decode (named errors)."""
    if phase not in PHASES:
        raise ValueError(f"phase={phase!r} is not allowed; allowed: {', '.join(PHASES)}")
    if phase == "prefill":
        return require_positive("tokens", tokens), 0
    return 1, require_nonnegative("tokens", tokens)


def op_regions(model: str = "Llama-3-8B", phase: str = "prefill", batch: int = 1, tokens: int = 128,
               hardware: str = "H100-SXM", dtype: str = "bf16") -> dict:
    """Which side of ``hardware``'s ridge each kind of operator of one layer falls on (*modelled*).

    Groups the rows of :func:`analytic_op_costs` (``attention="fused"``) into the weight matmuls
    (:data:`MATMUL_OPS`), attention, and the rest (norms, RoPE, residual adds, SiLU·mul, the KV
    write), and compares each group's arithmetic intensity (FLOP/B) with
    :func:`~llm_dataflow.core.hardware.ridge_point` for ``dtype``.  ``tokens`` is T in prefill and the
    cached context C in decode, as in :func:`layer_costs`; MoE presets use their first MoE layer.

    The whole layer is grouped too: its intensity is :func:`layer_costs`'s, and its verdict is the
    step's.  The two can differ: a decode batch of 512 at 1,024 cached tokens puts Llama-3-8B's
    matmuls past the H100's ridge (429.4 FLOP/B), while the KV reads, 84 % of the layer's bytes,
    keep the layer at 83.5 FLOP/B, memory-bound.

    Returns:
        ``{"phase", "batch", "tokens", "matmuls (FLOP/B)", "attention (FLOP/B)", "other (FLOP/B)",
        "layer (FLOP/B)", "ridge (FLOP/B)", "matmuls", "attention", "layer"}``, the last three
        ``"memory-bound"`` or ``"compute-bound"`` (intensity below / at or above the ridge).

    Raises:
        ValueError: unknown preset, hardware or dtype; a dtype without a peak on ``hardware``;
            an unsupported architecture (MLA); bad sizes.
    """

    cfg = model_config(model)
    check_dtype(dtype)
    ridge = ridge_point(_hardware_spec(hardware), dtype)
    require_positive("batch", batch)
    seq, ctx = _layer_tokens(phase, tokens)
    c = analytic_op_costs(cfg, batch, seq, phase, ctx, dtype_bits(dtype) // 8, _first_moe_layer(cfg),
                          attention="fused")
    groups = {"matmuls": [k for k in c if k in MATMUL_OPS], "attention": ["attention"],
              "other": [k for k in c if k not in MATMUL_OPS and k != "attention"], "layer": list(c)}
    out = {"phase": phase, "batch": batch, "tokens": tokens}
    for g, names in groups.items():
        fl, by = sum(c[k][0] for k in names), sum(c[k][1] for k in names)
        out[f"{g} (FLOP/B)"] = round(fl / by, 1)
    out["ridge (FLOP/B)"] = round(ridge, 1)
    for g in ("matmuls", "attention", "layer"):
        out[g] = "compute-bound" if out[f"{g} (FLOP/B)"] >= ridge else "memory-bound"
    return out


def attention_floors(model: str = "Llama-3-8B", tokens: int = 8192, hardware: str = "H100-SXM",
                     dtype: str = "bf16") -> dict:
    """The time floors of one layer's attention in a prefill of ``tokens`` tokens at batch 1, eager
    against fused (*modelled*: chapter 03's attention diagram and section 3).

    Bytes: :func:`attention_traffic` for ``"eager"`` (every ``[B, H, T, S]`` intermediate written
    and read back) and ``"fused"`` (q, K, V in, the output out: a floor; FlashAttention re-reads K
    and V once per block of queries).  FLOPs: ``4·H·T²·d_h`` for QKᵀ and PV with the masked half
    included, as :func:`analytic_op_costs` counts them; a causal kernel that skips fully masked
    tiles does about half.  Each floor divides by ``hardware``'s HBM bandwidth or its ``dtype``
    peak.  The fused kernel's floor is its larger one: at 8,192 tokens of Llama-3-8B on an H100,
    167.77 MB take ≥ 50.1 µs but 1.10 TFLOP take ≥ 1.11 ms, so it is compute-bound, and fusion
    turns a ≥ 20.6 ms memory-bound sequence into a ≥ 1.11 ms compute-bound kernel (about 19×, not
    the 411× of the bytes).

    Returns:
        ``{"eager bytes", "fused bytes", "bytes ratio", "flops", "eager HBM time (s)",
        "fused HBM time (s)", "compute time (s)", "causal compute time (s)", "fused bound",
        "time ratio"}``: ints for bytes and FLOPs, seconds as floats, ``"fused bound"`` is
        ``"compute-bound"`` or ``"memory-bound"``, ``"time ratio"`` the eager HBM floor over the
        fused kernel's binding floor (masked half included).

    Raises:
        ValueError: unknown preset, hardware or dtype, a dtype without a peak on ``hardware``, an
            unsupported architecture, ``tokens`` < 1.
    """
    cfg = model_config(model)
    check_dtype(dtype)
    require_positive("tokens", tokens)
    spec = _hardware_spec(hardware)
    if dtype not in spec.peak_flops:
        raise ValueError(f"dtype={dtype!r} is not allowed on {spec.name}: no published peak; "
                         f"allowed: {', '.join(spec.peak_flops)}")
    e = dtype_bits(dtype) // 8
    eager, fused = (sum(r + w for _, r, w in attention_traffic(1, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim,
                                                               tokens, tokens, e, k)) for k in ("eager", "fused"))
    flops = analytic_op_costs(cfg, 1, tokens, "prefill", 0, e, attention="fused")["attention"][0]
    bw, peak = spec.hbm_bandwidth, spec.peak_flops[dtype]
    t_e, t_f, t_c = eager / bw, fused / bw, flops / peak
    return {"eager bytes": eager, "fused bytes": fused, "bytes ratio": eager / fused, "flops": flops,
            "eager HBM time (s)": t_e, "fused HBM time (s)": t_f, "compute time (s)": t_c,
            "causal compute time (s)": t_c / 2, "fused bound": "compute-bound" if t_c >= t_f else "memory-bound",
            "time ratio": t_e / max(t_c, t_f)}


def matmul_ridge_tokens(model: str = "Llama-3-8B", hardware: str = "H100-SXM", dtype: str = "bf16",
                        max_tokens: int = 2**20) -> int:
    """The fewest tokens N per weight read at which one layer's weight matmuls reach ``hardware``'s
    ridge point (*modelled*, :func:`analytic_op_costs`).

    A weight matmul's intensity depends only on N, the rows that share one read of its weights:
    ``N = B·T`` in prefill, ``N = B`` in a decode step.  So the same N is where a prefill of N
    prompt tokens (batch 1) and a decode step of batch N reach the ridge with their matmuls —
    attention aside.  For an MoE layer each expert sees about ``N·k/E`` of the tokens, so N is
    larger (uniform routing, :func:`~llm_dataflow.core.accounting.expected_experts_hit`).

    Raises:
        ValueError: unknown preset/hardware/dtype, an unsupported architecture, or no N up to
            ``max_tokens`` reaches the ridge.
    """

    cfg = model_config(model)
    check_dtype(dtype)
    require_positive("max_tokens", max_tokens)
    ridge, e, layer = ridge_point(_hardware_spec(hardware), dtype), dtype_bits(dtype) // 8, _first_moe_layer(cfg)

    def reaches(n: int) -> bool:
        c = analytic_op_costs(cfg, n, 1, "decode", 0, e, layer, attention="fused")
        fl = sum(c[k][0] for k in c if k in MATMUL_OPS)
        return fl >= ridge * sum(c[k][1] for k in c if k in MATMUL_OPS)

    if not reaches(max_tokens):
        raise ValueError(f"max_tokens={max_tokens}: the matmuls of {model} stay below the {hardware} ridge")
    lo, hi = 1, max_tokens   # intensity grows with N: bisect for the first N that reaches the ridge
    while lo < hi:
        mid = (lo + hi) // 2
        if reaches(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo
