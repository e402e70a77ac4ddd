"""The book's one decoder: a Pre-Norm Transformer built from ``ModelConfig`` (chapter 03).

Every later chapter runs this model.  One layer computes (Pre-Norm residual stream)::

    A_l     = X_l + Attn(Norm(X_l))          # token mixing: rows of X exchange information
    X_{l+1} = A_l + MLP(Norm(A_l))           # channel mixing: each row on its own

with RMSNorm (Zhang & Sennrich 2019, arXiv:1910.07467), rotary position embedding (Su et al.
2021, arXiv:2104.09864, in the "rotate half" layout of Hugging Face ``LlamaForCausalLM``),
grouped-query attention (Ainslie et al. 2023, arXiv:2305.13245; MHA and MQA as special cases),
a SwiGLU MLP (Shazeer 2020, arXiv:2002.05202) and, for MoE configs, a top-k routed block
(softmax router as in Mixtral / Qwen3-MoE, optional DeepSeek-style shared expert).

Shapes use ``book/notation.md``: B batch, T new tokens, S keys attended, D d_model, H heads,
H_kv kv heads, d_h head_dim, F d_ff, V vocab, L layers, E experts, k experts per token.

``Decoder.state_dict()`` keys equal ``[t.name for t in tensor_specs(cfg)]`` (Hugging Face
names), so a real checkpoint loads with ``load_state_dict``.  The decoder is inference-only:
parameters have ``requires_grad=False``.

Cache protocol (what ``Decoder.forward`` calls; chapter 06's paged cache implements the same):

* ``cache.batch`` (B) and ``cache.max_len`` (positions per row; the decoder refuses to pass it).
* ``cache.lengths`` — CPU ``LongTensor[B]``, tokens stored per row (rows may differ).
* ``cache.update(layer, k_new, v_new)`` — writes ``[B, H_kv, T, d_h]`` at positions
  ``lengths[b] … lengths[b]+T-1`` of row ``b`` and returns K, V ``[B, H_kv, S, d_h]`` with
  ``S = max(lengths) + T``; key index ``j`` *is* absolute position ``j``.  Entries beyond a row's
  own ``lengths[b] + T`` are stale and the decoder masks them (key ``j`` is visible to a query at
  position ``p`` iff ``j <= p`` and, with a sliding window W, ``j > p - W``).
* ``cache.advance(T)`` — after the last layer, every row's length grows by ``T``.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .core.config import ModelConfig
from .core.units import require_positive
from .linear_kernels import Linear, linear
from .tokenization import check_token_ids

__all__ = [
    "Decoder", "DecoderLayer", "KVCache", "rms_norm", "rope_cos_sin", "apply_rope",
    "attention_reference", "swiglu", "route", "StepContext", "row_range",
]


# --- functional building blocks ---------------------------------------------------------------
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm over the last dimension: ``weight * x / sqrt(mean(x²) + eps)``.

    Shapes: ``x [..., D]``, ``weight [D]`` → ``[..., D]``.  Statistics are taken in FP32 and the
    normalised value is cast back to ``x.dtype`` before the weight multiply, exactly as Hugging
    Face ``LlamaRMSNorm`` does (Zhang & Sennrich 2019, arXiv:1910.07467).

    Raises:
        ValueError: ``weight`` does not match the last dimension of ``x``, or ``eps`` <= 0.
    """
    if weight.shape != x.shape[-1:]:
        raise ValueError(f"weight.shape={tuple(weight.shape)} must equal x.shape[-1:]={tuple(x.shape[-1:])}")
    if not eps > 0:
        raise ValueError(f"eps={eps!r} is not allowed; it must be > 0")
    xf = x.float()
    # a fused kernel reads x once (the row stays on chip for the mean of squares and the scale) and
    # writes it once: numel reads + numel writes (+ D weights), what ops.analytic_op_costs counts
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return weight * xf.to(x.dtype)


_LLAMA3_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


def _rope_type(rope_scaling: dict | None) -> str:
    """``rope_scaling``'s type: ``"default"`` for ``None``; older config.json files say ``"type"``."""
    if rope_scaling is None:
        return "default"
    if not isinstance(rope_scaling, dict):
        raise ValueError(f"rope_scaling={rope_scaling!r} is not allowed; give a dict (config.json's) or None")
    return rope_scaling.get("rope_type", rope_scaling.get("type", "default"))


def _check_rope_scaling(rope_scaling: dict | None) -> None:
    """Raise ``ValueError`` unless ``rope_scaling`` is ``None``, ``"default"`` or a complete ``"llama3"``."""
    rt = _rope_type(rope_scaling)
    if rt == "default":
        return
    if rt != "llama3":
        raise ValueError(f"rope_scaling={rope_scaling!r} has rope_type={rt!r}, which the Decoder does not "
                         "implement; allowed: None / 'default' (plain RoPE) or 'llama3'")
    missing = [k for k in _LLAMA3_KEYS if k not in rope_scaling]
    if missing:
        raise ValueError(f"rope_scaling={rope_scaling!r} (rope_type 'llama3') lacks {missing}; it needs "
                         f"{list(_LLAMA3_KEYS)}")
    if not rope_scaling["high_freq_factor"] > rope_scaling["low_freq_factor"] > 0:
        raise ValueError(f"rope_scaling={rope_scaling!r}: llama3 needs high_freq_factor > low_freq_factor > 0")
    if not rope_scaling["factor"] > 0 or not rope_scaling["original_max_position_embeddings"] > 0:
        raise ValueError(f"rope_scaling={rope_scaling!r}: factor and original_max_position_embeddings must be > 0")


def _inv_freq(head_dim: int, theta: float, device=None, rope_scaling: dict | None = None) -> torch.Tensor:
    # RoFormer eq. 15: θ_i = theta^(-2i/d_h), i = 0 … d_h/2-1; computed as HF does (int64 → fp32)
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float() / head_dim))
    _check_rope_scaling(rope_scaling)
    if _rope_type(rope_scaling) == "default":
        return inv
    # Llama 3.1 ("llama3"), exactly as transformers' modeling_rope_utils._compute_llama3_parameters:
    # wavelengths shorter than L_orig/high_freq_factor keep θ_i, longer than L_orig/low_freq_factor
    # are divided by `factor`, and the band between is interpolated smoothly.
    rs = rope_scaling
    factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old_len = rs["original_max_position_embeddings"]
    low_freq_wavelen, high_freq_wavelen = old_len / lo, old_len / hi
    wavelen = 2 * math.pi / inv
    inv_l = torch.where(wavelen > low_freq_wavelen, inv / factor, inv)
    smooth = (old_len / wavelen - lo) / (hi - lo)
    smoothed = (1 - smooth) * inv_l / factor + smooth * inv_l
    medium = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    return torch.where(medium, smoothed, inv_l)


def rope_cos_sin(positions: torch.Tensor, head_dim: int, theta: float,
                 rope_scaling: dict | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Cosine and sine tables of rotary position embedding for integer ``positions``.

    Shapes: ``positions [...]`` (any shape, integer) → ``cos, sin [..., d_h]`` in FP32, each the
    angles ``p·θ_i`` (``θ_i = theta^(-2i/d_h)``) repeated twice (``cat(f, f)``), the layout of
    Hugging Face ``LlamaRotaryEmbedding`` (Su et al. 2021, arXiv:2104.09864, eq. 15).

    ``rope_scaling`` is ``ModelConfig.rope_scaling`` (config.json's dict).  ``None`` or
    ``rope_type "default"``: plain RoPE.  ``"llama3"`` (Llama 3.1/3.2/3.3): the frequencies are
    rescaled as transformers' ``_compute_llama3_parameters`` does (``factor``, ``low_freq_factor``,
    ``high_freq_factor``, ``original_max_position_embeddings``; attention factor 1).

    Raises:
        ValueError: ``head_dim`` odd or not positive, ``theta`` <= 0, or ``rope_scaling`` of a
            type other than default/llama3 (named with its ``rope_type``) or missing llama3 keys.
    """
    if not isinstance(head_dim, int) or head_dim <= 0 or head_dim % 2:
        raise ValueError(f"head_dim={head_dim!r} is not allowed; RoPE rotates channel pairs, so it must be "
                         "a positive even integer")
    if not theta > 0:
        raise ValueError(f"theta={theta!r} is not allowed; it must be > 0")
    freqs = positions.to(torch.float32)[..., None] * _inv_freq(head_dim, theta, positions.device, rope_scaling)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` by the position angles: ``x·cos + rotate_half(x)·sin``.

    Shapes: ``x [B, H, T, d_h]``; ``cos, sin [T, d_h]`` (one position row for the batch) or
    ``[B, T, d_h]`` (per-row positions, ragged batches).  Tables are cast to ``x.dtype``
    (Hugging Face ``apply_rotary_pos_emb``).  Returns ``[B, H, T, d_h]``.

    Raises:
        ValueError: the tables' last two dims do not match ``x``'s ``(T, d_h)``.
    """
    if cos.shape[-2:] != x.shape[-2:] or sin.shape != cos.shape:
        raise ValueError(f"cos/sin shape {tuple(cos.shape)} must end with x's (T, d_h)={tuple(x.shape[-2:])}")
    if cos.dim() == 3:  # [B, T, d_h] → [B, 1, T, d_h] to broadcast over heads
        cos, sin = cos[:, None], sin[:, None]
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    return x * cos + _rotate_half(x) * sin


def attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = True,
                        window: int | None = None) -> torch.Tensor:
    """Naive attention ``softmax(Q Kᵀ / √d_h) V`` with GQA by repeating K/V heads.

    Shapes: ``q [B, H, T, d_h]``, ``k, v [B, H_kv, S, d_h]`` with ``H % H_kv == 0`` and ``S >= T``
    → ``[B, H, T, d_h]``.  Query ``t`` sits at absolute position ``S - T + t`` (the new tokens are
    the last ``T`` of ``S``); ``causal`` lets it see keys ``j <= S - T + t``; ``window`` W also
    requires ``j > S - T + t - W`` (Mistral's sliding window, arXiv:2310.06825).  Materialises the
    ``[B, H, T, S]`` score matrix (that is the point of a reference).  Softmax in FP32.

    Raises:
        ValueError: incompatible shapes, or ``window`` not a positive integer.
    """
    B, H, T, dh = q.shape
    if k.dim() != 4 or k.shape != v.shape or k.shape[0] != B or k.shape[3] != dh:
        raise ValueError(f"k {tuple(k.shape)} / v {tuple(v.shape)} must be [B={B}, H_kv, S, d_h={dh}]")
    Hkv, S = k.shape[1], k.shape[2]
    if H % Hkv:
        raise ValueError(f"q has H={H} heads, not a multiple of H_kv={Hkv}")
    if S < T:
        raise ValueError(f"S={S} keys < T={T} queries; the queries must be the last T positions")
    if window is not None and (not isinstance(window, int) or window <= 0):
        raise ValueError(f"window={window!r} is not allowed; it must be a positive integer or None")
    rep = H // Hkv
    k = k.repeat_interleave(rep, dim=1)  # [B, H, S, d_h]: query head h uses kv head h // rep
    v = v.repeat_interleave(rep, dim=1)
    scores = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(dh)  # [B, H, T, S]
    qpos = torch.arange(S - T, S, device=q.device)[:, None]
    kpos = torch.arange(S, device=q.device)[None, :]
    allowed = torch.ones(T, S, dtype=torch.bool, device=q.device)
    if causal:
        allowed &= kpos <= qpos
    if window is not None:
        allowed &= kpos > qpos - window
    scores = scores.masked_fill(~allowed, float("-inf"))
    return (scores.softmax(-1) @ v.float()).to(q.dtype)


def swiglu(x: torch.Tensor, w_gate: torch.Tensor, w_up: torch.Tensor, w_down: torch.Tensor) -> torch.Tensor:
    """SwiGLU MLP ``down(silu(x W_gateᵀ) ⊙ x W_upᵀ)`` (Shazeer 2020, arXiv:2002.05202).

    Shapes: ``x [..., D]``, ``w_gate, w_up [F, D]``, ``w_down [D, F]`` (``nn.Linear`` layout
    ``[out, in]``) → ``[..., D]``.  FLOPs: ``6·D·F`` per token (three matmuls).

    Raises:
        ValueError: weight shapes do not fit ``x``.
    """
    D = x.shape[-1]
    if w_gate.shape != w_up.shape or w_gate.shape[1] != D or w_down.shape != (D, w_gate.shape[0]):
        raise ValueError(f"w_gate {tuple(w_gate.shape)}, w_up {tuple(w_up.shape)} must be [F, D={D}] and "
                         f"w_down {tuple(w_down.shape)} must be [D, F]")
    return linear(F.silu(linear(x, w_gate)) * linear(x, w_up), w_down)


def route(x: torch.Tensor, gate_weight: torch.Tensor, k: int, norm_topk_prob: bool = True,
          bias: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Top-k MoE router: softmax over the E router logits, keep the k largest.

    Shapes: ``x [N, D]``, ``gate_weight [E, D]``, ``bias [E]`` or None (gpt-oss's router has
    one) → ``(indices [N, k] int64, weights [N, k])``.
    Probabilities are computed in FP32 (Hugging Face ``Qwen3MoeTopKRouter``); with
    ``norm_topk_prob`` the k kept weights are renormalised to sum to 1 (Mixtral's and gpt-oss's
    "softmax over the top-k logits" is the same thing).  Weights are returned in ``x.dtype``.

    Raises:
        ValueError: ``k`` not in ``1..E`` or shapes that do not fit.
    """
    E = gate_weight.shape[0]
    if gate_weight.dim() != 2 or gate_weight.shape[1] != x.shape[-1]:
        raise ValueError(f"gate_weight {tuple(gate_weight.shape)} must be [E, D={x.shape[-1]}]")
    if not isinstance(k, int) or not 1 <= k <= E:
        raise ValueError(f"k={k!r} is not allowed; it must be an integer in 1..E={E}")
    probs = F.linear(x, gate_weight, bias).softmax(dim=-1, dtype=torch.float32)  # [N, E]
    weights, idx = torch.topk(probs, k, dim=-1)
    if norm_topk_prob:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return idx, weights.to(x.dtype)


# --- KV cache ---------------------------------------------------------------------------------
def row_range(index, batch: int) -> tuple[int, int]:
    """``(first, stop)`` rows of a cache of ``batch`` rows selected by ``index`` (an int or a
    contiguous slice); shared by every cache's ``rows()``.

    Raises:
        ValueError: a non-contiguous selection or rows out of range.
    """
    if isinstance(index, int):
        if not 0 <= index < batch:
            raise ValueError(f"row={index} is out of range; allowed 0..{batch - 1}")
        index = slice(index, index + 1)
    if not isinstance(index, slice) or index.step not in (None, 1):
        raise ValueError(f"rows={index!r} is not allowed; give an int or a contiguous slice")
    r0, r1, _ = index.indices(batch)
    if r1 <= r0:
        raise ValueError(f"rows={index!r} selects no row of a batch of {batch}")
    return r0, r1


class KVCache:
    """Preallocated contiguous KV cache: per layer K and V ``[B, H_kv, max_len, d_h]``.

    One allocation of ``2·L·B·H_kv·max_len·d_h`` elements made up front; decoding writes into it
    in place (no per-step reallocation).  ``lengths`` (CPU ``LongTensor[B]``) holds the tokens
    stored per row; rows may differ (ragged batches for continuous batching, chapter 08).

    Ragged decode: rows of different lengths decode together with ``T = 1``: row ``b``'s new key
    goes to position ``lengths[b]`` and its query sees keys ``0 … lengths[b]`` only (the decoder
    masks by position).  To (re)fill row ``r`` with a new request: ``cache.reset(r)`` then
    ``model(prompt[1, T], cache.rows(r))`` — ``rows`` returns a cache over a contiguous range of
    rows that *shares storage and lengths* with this one, so the prefill lands in row ``r``.
    Every forward advances every row of the cache it is given; reset idle rows.

    Under ``torch.inference_mode`` a cache *created* inside the mode holds inference tensors and
    can only be written inside it; create it outside (or use it inside only), as
    :meth:`Decoder.generate` does.

    Args:
        cfg: the model config (``n_layers``, ``n_kv_heads``, ``head_dim``).
        batch: B rows.  max_len: positions per row.  dtype/device: of the storage.

    Attributes:
        k, v: lists of L tensors ``[B, H_kv, max_len, d_h]`` (views of one allocation).
        nbytes: allocated bytes (int).  bytes_used: bytes of tokens actually stored.

    Raises:
        ValueError: ``batch`` or ``max_len`` not a positive integer.
    """

    def __init__(self, cfg: ModelConfig, batch: int, max_len: int, dtype: torch.dtype = torch.float32,
                 device=None, *, _storage=None):
        require_positive("batch", batch)
        require_positive("max_len", max_len)
        self.cfg, self.batch, self.max_len = cfg, batch, max_len
        if _storage is None:
            # [L, 2, B, H_kv, max_len, d_h]: 2·L·B·H_kv·max_len·d_h·elem bytes, allocated once
            buf = torch.zeros(cfg.n_layers, 2, batch, cfg.n_kv_heads, max_len, cfg.head_dim,
                              dtype=dtype, device=device)
            self._buf = buf
            self.k = [buf[i, 0] for i in range(cfg.n_layers)]
            self.v = [buf[i, 1] for i in range(cfg.n_layers)]
            self.lengths = torch.zeros(batch, dtype=torch.int64)
        else:
            self._buf, self.k, self.v, self.lengths = _storage
        self.dtype, self.device = self.k[0].dtype, self.k[0].device

    # -- bookkeeping --
    @property
    def nbytes(self) -> int:
        """Allocated bytes of K and V (all layers, all rows, ``max_len`` positions)."""
        return sum(t.numel() * t.element_size() for t in self.k + self.v)

    @property
    def bytes_per_token(self) -> int:
        """Bytes one stored token costs across all layers: ``2·L·H_kv·d_h·elem``."""
        return 2 * self.cfg.n_layers * self.cfg.n_kv_heads * self.cfg.head_dim * self.k[0].element_size()

    @property
    def bytes_used(self) -> int:
        """Bytes of the tokens actually stored (``sum(lengths) · bytes_per_token``)."""
        return int(self.lengths.sum()) * self.bytes_per_token

    def rows(self, index) -> "KVCache":
        """A cache over rows ``index`` (an int or a step-1 slice) sharing storage and lengths.

        Raises:
            ValueError: a non-contiguous selection or rows out of range.
        """
        r0, r1 = row_range(index, self.batch)
        k = [t[r0:r1] for t in self.k]
        v = [t[r0:r1] for t in self.v]
        return KVCache(self.cfg, r1 - r0, self.max_len, _storage=(self._buf, k, v, self.lengths[r0:r1]))

    def reset(self, row: int | None = None) -> None:
        """Forget the tokens of ``row`` (all rows when ``None``); storage is reused, not zeroed."""
        if row is None:
            self.lengths.zero_()
        else:
            if not isinstance(row, int) or not 0 <= row < self.batch:
                raise ValueError(f"row={row!r} is out of range; allowed 0..{self.batch - 1}")
            self.lengths[row] = 0

    # -- the protocol the decoder uses --
    def update(self, layer: int, k_new: torch.Tensor, v_new: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write ``k_new, v_new [B, H_kv, T, d_h]`` at each row's next positions; return K, V views.

        Returns ``[B, H_kv, S, d_h]`` views with ``S = max(lengths) + T`` (no copy).  Does not
        change ``lengths``; :meth:`advance` does, once per forward.

        Raises:
            ValueError: wrong shape, or a row would pass ``max_len``.
        """
        B, Hkv, T, dh = k_new.shape
        if (B, Hkv, dh) != (self.batch, self.cfg.n_kv_heads, self.cfg.head_dim) or v_new.shape != k_new.shape:
            raise ValueError(f"k_new/v_new {tuple(k_new.shape)} must be [B={self.batch}, "
                             f"H_kv={self.cfg.n_kv_heads}, T, d_h={self.cfg.head_dim}]")
        lens = self.lengths.tolist()
        lo, hi = min(lens), max(lens)
        if hi + T > self.max_len:
            raise ValueError(f"writing T={T} tokens after {hi} stored passes max_len={self.max_len}")
        kc, vc = self.k[layer], self.v[layer]
        if lo == hi:  # all rows equally long: one strided copy, B·H_kv·T·d_h elements each
            kc[:, :, hi:hi + T].copy_(k_new)
            vc[:, :, hi:hi + T].copy_(v_new)
        else:  # ragged rows: scatter row b's T tokens to positions lengths[b] + t
            pos = self.lengths.to(kc.device)[:, None] + torch.arange(T, device=kc.device)  # [B, T]
            bi = torch.arange(B, device=kc.device)[:, None].expand(B, T)
            # advanced indices around a slice put [B, T] first: values are [B, T, H_kv, d_h]
            kc[bi, :, pos] = k_new.transpose(1, 2)
            vc[bi, :, pos] = v_new.transpose(1, 2)
        return kc[:, :, :hi + T], vc[:, :, :hi + T]

    def advance(self, n_tokens: int) -> None:
        """Grow every row's stored length by ``n_tokens`` (called once per forward)."""
        self.lengths += n_tokens


# --- modules ----------------------------------------------------------------------------------
class RMSNorm(nn.Module):
    """RMSNorm module with a ``weight [D]`` (see :func:`rms_norm`)."""

    def __init__(self, size: int, eps: float, dtype=None, device=None):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size, dtype=dtype, device=device))
        self.eps = eps

    def forward(self, x):
        return rms_norm(x, self.weight, self.eps)


class SwiGLU(nn.Module):
    """``gate_proj, up_proj [F, D]``, ``down_proj [D, F]`` (Hugging Face ``LlamaMLP`` names).

    ``limit`` (gpt-oss's ``swiglu_limit``, with ``alpha``): the clamped form of transformers'
    ``GptOssExperts``: ``down((clamp(u, ±limit) + 1) ⊙ g·σ(alpha·g))``, ``g = min(gate, limit)``."""

    def __init__(self, d: int, f: int, bias: bool, dtype=None, device=None, limit=None, alpha=None):
        super().__init__()
        kw = dict(bias=bias, dtype=dtype, device=device)
        self.gate_proj = Linear(d, f, **kw)
        self.up_proj = Linear(d, f, **kw)
        self.down_proj = Linear(f, d, **kw)
        self.limit, self.alpha = limit, alpha

    def forward(self, x):
        if self.limit is None:
            return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))
        g, u = self.gate_proj(x).clamp(max=self.limit), self.up_proj(x).clamp(-self.limit, self.limit)
        return self.down_proj((u + 1) * g * torch.sigmoid(self.alpha * g))


class Router(nn.Module):
    """``gate.weight [E, D]``: the router's linear layer (see :func:`route`)."""

    def __init__(self, d: int, e: int, dtype=None, device=None, bias: bool = False):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(e, d, dtype=dtype, device=device))
        self.bias = nn.Parameter(torch.empty(e, dtype=dtype, device=device)) if bias else None


class MoE(nn.Module):
    """Routed experts (+ optional shared expert): ``y = Σ_{e∈topk(x)} w_e·Expert_e(x) + Shared(x)``.

    Stores E experts but computes only the k routed per token (plus the shared expert, which
    every token uses, DeepSeek-V3 style: added without a gate, arXiv:2412.19437 eq. 12).
    ``last_counts`` holds the tokens routed to each expert by the latest forward (``LongTensor[E]``).
    """

    def __init__(self, cfg: ModelConfig, dtype=None, device=None):
        super().__init__()
        self.k, self.norm_topk_prob = cfg.n_experts_per_token, cfg.norm_topk_prob
        self.router_name = "router" if cfg.model_type == "gpt_oss" else "gate"   # tensor_specs' names
        self.add_module(self.router_name, Router(cfg.d_model, cfg.n_routed_experts, dtype, device,
                                                 cfg.router_linear_bias))
        self.experts = nn.ModuleList(SwiGLU(cfg.d_model, cfg.moe_d_ff, cfg.mlp_bias, dtype, device,
                                            cfg.swiglu_limit, cfg.swiglu_alpha) for _ in range(cfg.n_routed_experts))
        self.shared_experts = (SwiGLU(cfg.d_model, cfg.shared_d_ff, cfg.mlp_bias, dtype, device)
                               if cfg.n_shared_experts else None)
        self.last_counts = None

    @property
    def router_module(self) -> Router:
        """The router, whatever transformers names it (``gate``; gpt-oss: ``router``)."""
        return getattr(self, self.router_name)

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])  # [N, D], N = B·T
        r = self.router_module
        idx, w = route(x, r.weight, self.k, self.norm_topk_prob, r.bias)  # [N, k] each
        flat = idx.flatten()
        counts = torch.bincount(flat, minlength=len(self.experts))
        self.last_counts = counts
        order = flat.argsort(stable=True)  # token-slots grouped by expert
        tok = order // self.k  # token row of each slot
        wsorted = w.flatten()[order]
        y = torch.zeros_like(x)
        start = 0
        for e, c in enumerate(counts.tolist()):  # loop over experts that got tokens only
            if c == 0:
                continue
            rows = tok[start:start + c]
            y.index_add_(0, rows, self.experts[e](x[rows]) * wsorted[start:start + c, None])
            start += c
        if self.shared_experts is not None:
            y = y + self.shared_experts(x)
        return y.reshape(shape)


class StepContext:
    """What one forward shares across layers: positions, RoPE tables and masks.

    Attributes:
        T: new tokens per row.  S: keys attended (``max(lengths) + T``).
        cos, sin: ``[T, d_h]`` (uniform rows) or ``[B, T, d_h]`` (ragged rows), model dtype.
        masks: per layer type, a bool mask ``[B|1, 1, T, S]`` (True = attend) or ``None``
            when plain causal attention (``causal=True``) or no mask at all applies.
    """

    def __init__(self, T, S, cos, sin, masks, causal):
        self.T, self.S, self.cos, self.sin, self.masks, self.causal = T, S, cos, sin, masks, causal


class Attention(nn.Module):
    """Grouped-query self-attention with RoPE (Hugging Face ``LlamaAttention`` names)."""

    def __init__(self, cfg: ModelConfig, layer: int, dtype=None, device=None):
        super().__init__()
        H, Hkv, dh, D = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.d_model
        self.layer, self.H, self.Hkv, self.dh = layer, H, Hkv, dh
        self.layer_type = cfg.layer_type(layer)
        kw = dict(dtype=dtype, device=device)
        self.q_proj = Linear(D, H * dh, bias=cfg.attention_bias, **kw)
        self.k_proj = Linear(D, Hkv * dh, bias=cfg.attention_bias, **kw)
        self.v_proj = Linear(D, Hkv * dh, bias=cfg.attention_bias, **kw)
        self.o_proj = Linear(H * dh, D, bias=cfg.attention_out_bias, **kw)
        # gpt-oss: one learned logit per head in the softmax's denominator (attends to nothing)
        self.sinks = nn.Parameter(torch.empty(H, dtype=dtype, device=device)) if cfg.attention_sinks else None
        if cfg.qk_norm:  # Qwen3: RMSNorm over d_h on each head of q and k, before RoPE
            self.q_norm = RMSNorm(dh, cfg.norm_eps, dtype, device)
            self.k_norm = RMSNorm(dh, cfg.norm_eps, dtype, device)
        else:
            self.q_norm = self.k_norm = None

    def forward(self, x, ctx: StepContext, cache=None):
        B, T, _ = x.shape
        H, Hkv, dh = self.H, self.Hkv, self.dh
        q = self.q_proj(x).view(B, T, H, dh)
        k = self.k_proj(x).view(B, T, Hkv, dh)
        v = self.v_proj(x).view(B, T, Hkv, dh).transpose(1, 2)  # [B, H_kv, T, d_h]
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q = apply_rope(q.transpose(1, 2), ctx.cos, ctx.sin)  # [B, H, T, d_h]
        k = apply_rope(k.transpose(1, 2), ctx.cos, ctx.sin)  # [B, H_kv, T, d_h]
        if cache is not None:
            k, v = cache.update(self.layer, k, v)  # [B, H_kv, S, d_h] views of the cache
        mask = ctx.masks.get(self.layer_type)
        if self.sinks is not None:  # the sink as one more key: value 0, logit sinks[h] (a float mask column)
            S = k.shape[2]
            if mask is None:
                mask = (torch.arange(S, device=x.device) <= torch.arange(S - T, S, device=x.device)[:, None])[None, None]
            sink = self.sinks.to(q.dtype).view(1, H, 1, 1).expand(mask.shape[0], H, T, 1)
            mask = torch.cat([torch.zeros((), dtype=q.dtype, device=x.device).masked_fill(~mask, float("-inf"))
                              .expand(mask.shape[0], H, T, S), sink], -1)
            k, v = (torch.cat([t, t.new_zeros(B, Hkv, 1, dh)], 2) for t in (k, v))
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=H != Hkv)
        elif T == 1:
            # decode: fold the H/H_kv query heads of a group into one axis so each kv head's K and V
            # are read once and never repeated; plain matmuls (CPU SDPA has a high fixed cost per
            # call and is slow on strided cache views).  Reads 2·B·H_kv·S·d_h cache elements.
            qg = q.reshape(B, Hkv, H // Hkv, dh)
            s = (qg @ k.transpose(-1, -2)) * (dh ** -0.5)  # [B, H_kv, H/H_kv, S]
            if mask is not None:  # [B|1, 1, 1, S] broadcasts over kv heads and the group
                s = s.masked_fill(~mask, float("-inf"))
            o = (s.softmax(-1, dtype=torch.float32).to(q.dtype) @ v).reshape(B, H, 1, dh)
        else:
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=ctx.causal and mask is None,
                                               enable_gqa=H != Hkv)
        return self.o_proj(o.transpose(1, 2).reshape(B, T, H * dh))


class DecoderLayer(nn.Module):
    """One Pre-Norm layer: ``A = X + Attn(Norm(X))``, ``X' = A + MLP(Norm(A))``."""

    def __init__(self, cfg: ModelConfig, layer: int, dtype=None, device=None):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.d_model, cfg.norm_eps, dtype, device)
        self.self_attn = Attention(cfg, layer, dtype, device)
        self.post_attention_layernorm = RMSNorm(cfg.d_model, cfg.norm_eps, dtype, device)
        self.mlp = (MoE(cfg, dtype, device) if cfg.is_moe_layer(layer)
                    else SwiGLU(cfg.d_model, cfg.d_ff, cfg.mlp_bias, dtype, device))

    def forward(self, x: torch.Tensor, ctx: StepContext, cache=None) -> torch.Tensor:
        """``x [B, T, D]`` → ``[B, T, D]``."""
        a = x + self.self_attn(self.input_layernorm(x), ctx, cache)  # token mixing
        return a + self.mlp(self.post_attention_layernorm(a))  # channel mixing


class _Model(nn.Module):
    def __init__(self, cfg, dtype, device):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.d_model, dtype=dtype, device=device)
        self.layers = nn.ModuleList(DecoderLayer(cfg, i, dtype, device) for i in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps, dtype, device)


_NOT_RUN = ("gemma3_text", "llama4_text", "qwen3_next")


def check_supported(cfg: ModelConfig) -> None:
    """Raise ``ValueError`` naming the first field of ``cfg`` this decoder does not implement."""
    if not isinstance(cfg, ModelConfig):
        raise ValueError(f"cfg={cfg!r} is not a ModelConfig")
    checks = (  # (field, value, supported?, what is allowed)
        ("model_type", cfg.model_type, cfg.model_type not in _NOT_RUN,
         "not " + ", ".join(_NOT_RUN) + " (Gemma 3's norms and local RoPE, chunked and NoPE layers, "
         "Gated DeltaNet linear attention are not implemented)"),
        ("kv_lora_rank", cfg.kv_lora_rank, cfg.kv_lora_rank is None,
         "None (multi-head latent attention is not implemented)"),
        ("norm", cfg.norm, cfg.norm == "rmsnorm", "'rmsnorm'"), ("position", cfg.position, cfg.position == "rope", "'rope'"),
        ("mlp", cfg.mlp, cfg.mlp == "swiglu", "'swiglu'"), ("norms_per_layer", cfg.norms_per_layer, cfg.norms_per_layer == 2, "2 (Pre-Norm)"),
        ("router_bias", cfg.router_bias, not cfg.router_bias,
         "False (DeepSeek-V3's biased sigmoid router is not implemented)"),
        ("shared_expert_gate", cfg.shared_expert_gate, not cfg.shared_expert_gate,
         "False (Qwen-MoE's sigmoid-gated shared expert is not implemented)"),
        ("unmodelled", cfg.unmodelled, not cfg.unmodelled,
         "None (these config.json settings change the forward pass and are not implemented)"),
    )
    for field, value, ok, allowed in checks:
        if not ok:
            raise ValueError(f"{field}={value!r} is not supported by Decoder (model_type={cfg.model_type!r}); "
                             f"allowed: {allowed}")


class Decoder(nn.Module):
    """Decoder-only Transformer for llama-like configs (Llama, Mistral, Qwen2/3, Mixtral, Qwen3-MoE, gpt-oss).

    ``Decoder(cfg, dtype, device)`` builds ``model.embed_tokens``, ``model.layers[i]``,
    ``model.norm`` and ``lm_head`` (``None`` when ``cfg.tie_embeddings``: logits then use the
    embedding table).  Weights are random (normal, std 0.02, from torch's global RNG — seed it);
    norms start at 1.  Load real weights with ``load_state_dict``.

    Raises:
        ValueError: an unsupported config field (MLA, LayerNorm, learned positions, GeGLU/GELU,
            Gemma-2's four norms, DeepSeek's router bias, a ``rope_scaling`` type other than
            default / ``"llama3"``, any ``cfg.unmodelled`` setting), named; and today's families
            by ``model_type``: gemma3_text (Gemma's norms, GeGLU, a second RoPE base for the
            sliding layers), llama4_text (chunked attention, NoPE layers, sigmoid routing) and
            qwen3_next (Gated DeltaNet linear attention: no KV cache, a recurrent state the
            decoder does not implement).  Their bytes and FLOPs are counted by the core all the
            same.  gpt_oss runs (attention sinks, biased router, clamped SwiGLU experts) with
            plain RoPE; its checkpoints' YaRN ``rope_scaling`` is refused like any type but llama3.
    """

    def __init__(self, cfg: ModelConfig, dtype: torch.dtype = torch.float32, device=None):
        super().__init__()
        check_supported(cfg)
        _check_rope_scaling(cfg.rope_scaling)  # never silently fall back to plain RoPE
        self.cfg = cfg
        self.model = _Model(cfg, dtype, device)
        self.lm_head = (None if cfg.tie_embeddings
                        else Linear(cfg.d_model, cfg.vocab_size, bias=False, dtype=dtype, device=device))
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("norm.weight"):
                    continue
                if name.endswith(".bias"):
                    p.zero_()
                else:
                    p.normal_(0.0, 0.02)
        self.requires_grad_(False)
        n0 = cfg.max_position_embeddings or 2048
        self._set_rope_table(n0, device)

    # -- properties --
    @property
    def dtype(self) -> torch.dtype:
        return self.model.embed_tokens.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.model.embed_tokens.weight.device

    @property
    def output_weight(self) -> torch.Tensor:
        """``[V, D]``: ``lm_head.weight``, or the embedding table when tied."""
        return self.model.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

    def _set_rope_table(self, n: int, device=None):
        pos = torch.arange(n, device=device or self.device)
        cos, sin = rope_cos_sin(pos, self.cfg.head_dim, self.cfg.rope_theta, self.cfg.rope_scaling)  # FP32 [n, d_h]
        self.register_buffer("rope_cos", cos.to(self.dtype), persistent=False)
        self.register_buffer("rope_sin", sin.to(self.dtype), persistent=False)

    def new_cache(self, batch: int, max_len: int) -> KVCache:
        """An empty :class:`KVCache` in the model's dtype and device."""
        return KVCache(self.cfg, batch, max_len, self.dtype, self.device)

    # -- the forward pass, in three public steps (offload.py streams the middle one) --
    def prepare(self, input_ids: torch.Tensor, cache=None, *,
                check_ids: bool = True) -> tuple[torch.Tensor, StepContext]:
        """Embed ``input_ids [B, T]`` and build the :class:`StepContext` → ``(h [B, T, D], ctx)``.

        Raises:
            ValueError: ``input_ids`` not a 2-D int32/int64 tensor or, with ``check_ids`` (one host sync), holding
                an ID outside ``[0, V)`` (named with its ``[b, t]`` and V), a batch not the cache's, a cache overflow.
        """
        if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
            raise ValueError(f"input_ids must be an integer tensor [B, T]; got {input_ids!r:.60}")
        if check_ids or input_ids.dtype not in (torch.int64, torch.int32):
            check_token_ids(input_ids, self.cfg.vocab_size)  # dtype, then every ID in [0, V)
        B, T = input_ids.shape
        dev = input_ids.device
        if cache is None:
            lens = [0] * B
        else:
            if cache.batch != B:
                raise ValueError(f"input_ids has B={B} rows but the cache has batch={cache.batch}")
            lens = cache.lengths.tolist()
            if max(lens) + T > cache.max_len:
                raise ValueError(f"{max(lens)} stored + T={T} new tokens pass the cache's max_len={cache.max_len}")
        lo, hi = min(lens), max(lens)
        S = hi + T
        if S > self.rope_cos.shape[0]:
            self._set_rope_table(max(S, 2 * self.rope_cos.shape[0]))
        windows = {}
        for lt in set(self.cfg.layer_type(i) for i in range(self.cfg.n_layers)):
            windows[lt] = self.cfg.sliding_window if lt == "sliding_attention" else None
        masks, causal = {}, False
        if lo == hi:  # uniform rows: RoPE tables are slices (views), no gather
            cos, sin = self.rope_cos[hi:S], self.rope_sin[hi:S]
            for lt, w in windows.items():
                if w is None or S <= w:
                    if T == 1:
                        masks[lt] = None  # one query sees all S keys
                    elif hi == 0:
                        masks[lt] = None
                        causal = True  # square causal mask: SDPA's is_causal (top-left == bottom-right)
                    else:
                        masks[lt] = self._mask(torch.full((1,), hi, device=dev), T, S, None)
                else:
                    masks[lt] = self._mask(torch.full((1,), hi, device=dev), T, S, w)
        else:  # ragged rows: per-row positions lengths[b] + t
            start = torch.tensor(lens, device=dev)
            pos = start[:, None] + torch.arange(T, device=dev)
            cos, sin = self.rope_cos[pos], self.rope_sin[pos]  # [B, T, d_h]
            for lt, w in windows.items():
                masks[lt] = self._mask(start, T, S, w)
        if causal and any(m is not None for m in masks.values()):
            # mixed layer types with a square prompt: give the full layers an explicit mask too
            for lt, m in masks.items():
                if m is None:
                    masks[lt] = self._mask(torch.zeros(1, dtype=torch.int64, device=dev), T, S, None)
            causal = False
        h = self.model.embed_tokens(input_ids)
        return h, StepContext(T, S, cos, sin, masks, causal)

    @staticmethod
    def _mask(start: torch.Tensor, T: int, S: int, window: int | None) -> torch.Tensor:
        # [B|1, 1, T, S] bool: query at position p = start + t sees keys j <= p (and j > p - W)
        dev = start.device
        p = start[:, None] + torch.arange(T, device=dev)  # [B, T]
        j = torch.arange(S, device=dev)
        m = j[None, None, :] <= p[:, :, None]
        if window is not None:
            m &= j[None, None, :] > p[:, :, None] - window
        return m[:, None]

    def finish(self, h: torch.Tensor, last_only: bool = False) -> torch.Tensor:
        """Final norm and LM head: ``h [B, T, D]`` → logits ``[B, T, V]`` (``[B, 1, V]`` with ``last_only``)."""
        if last_only:
            h = h[:, -1:]
        return linear(self.model.norm(h), self.output_weight)

    def forward(self, input_ids: torch.Tensor, cache=None, *, last_only: bool = False,
                check_ids: bool = True) -> torch.Tensor:
        """Logits for ``input_ids [B, T]`` → ``[B, T, V]`` (``[B, 1, V]`` with ``last_only``).

        Without a cache, positions are ``0 … T-1``.  With one, positions continue from each
        row's stored length, K/V are written into it and its lengths advance by ``T``: prefill is
        a forward over the prompt with an empty cache, decode a forward over ``[B, 1]``.
        ``check_ids=False`` skips the ID check, for a loop feeding back its own argmax (in ``[0, V)``).

        Raises:
            ValueError: see :meth:`prepare`.
        """
        h, ctx = self.prepare(input_ids, cache, check_ids=check_ids)
        for layer in self.model.layers:
            h = layer(h, ctx, cache)
        if cache is not None:
            cache.advance(ctx.T)
        return self.finish(h, last_only)

    @torch.inference_mode()
    def generate(self, input_ids: torch.Tensor, max_new_tokens: int, use_cache: bool = True) -> torch.Tensor:
        """Greedy decoding: ``input_ids [B, T]`` → ``[B, T + max_new_tokens]``.

        ``use_cache=True``: one prefill, then one ``[B, 1]`` forward per token against a
        preallocated :class:`KVCache`.  ``use_cache=False`` recomputes the whole history each step
        (the quadratic baseline of chapter 06).

        Raises:
            ValueError: ``max_new_tokens`` < 0; ``input_ids`` as :meth:`prepare` refuses them.
        """
        if not isinstance(max_new_tokens, int) or max_new_tokens < 0:
            raise ValueError(f"max_new_tokens={max_new_tokens!r} is not allowed; it must be an integer >= 0")
        if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
            raise ValueError(f"input_ids must be an integer tensor [B, T]; got {input_ids!r:.60}")
        check_token_ids(input_ids, self.cfg.vocab_size)  # once: the steps feed back argmax IDs, in [0, V)
        out = torch.empty(input_ids.shape[0], input_ids.shape[1] + max_new_tokens, dtype=input_ids.dtype,
                          device=input_ids.device)
        T0 = input_ids.shape[1]
        out[:, :T0] = input_ids
        if max_new_tokens == 0:
            return out
        cache = self.new_cache(input_ids.shape[0], T0 + max_new_tokens) if use_cache else None
        nxt = self(input_ids, cache, last_only=True, check_ids=False)[:, -1].argmax(-1)
        for t in range(max_new_tokens):
            out[:, T0 + t] = nxt
            if t == max_new_tokens - 1:
                break
            if use_cache:
                logits = self(out[:, T0 + t:T0 + t + 1], cache, check_ids=False)
            else:
                logits = self(out[:, :T0 + t + 1], last_only=True, check_ids=False)
            nxt = logits[:, -1].argmax(-1)
        return out
