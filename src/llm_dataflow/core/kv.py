"""KV-cache sizing: exact bytes for every attention variant (chapter 06).

Decode attends each new token to the keys and values of every earlier token; serving keeps
them in the **KV cache** instead of recomputing them.  Its size, per layer and token, is

* MHA / GQA / MQA: ``2 (K and V) × H_kv × d_h × bytes`` (Vaswani et al. 2017; GQA, Ainslie et
  al. 2023, arXiv:2305.13245; MQA, Shazeer 2019, arXiv:1911.02150).
* MLA (DeepSeek-V2, arXiv:2405.04434 §2.1.2; V3, arXiv:2412.19437): the compressed latent
  ``c_KV`` (``kv_lora_rank`` elements) plus the decoupled RoPE key ``k_R`` (``qk_rope_head_dim``
  elements, shared by all heads) — **no factor 2**: K and V are both re-expanded from the latent.
* Sliding-window layers hold ``min(seq_len, sliding_window)`` tokens (Mistral 7B,
  arXiv:2310.06825, rolling buffer); models that interleave local and global layers (Gemma 2,
  arXiv:2408.00118; Gemma 3, arXiv:2503.19786, five local to one global; gpt-oss, 128-token
  windows on every other layer; ``cfg.layer_type(i)``) are summed layer by layer.
* Chunked-attention layers (Llama 4, ``attention_chunk_size`` C) attend only inside their own
  C-token chunk: after ``n`` tokens a layer holds the ``((n − 1) mod C) + 1`` tokens of the
  chunk the latest token is in — the keys that token attended to, as a sliding layer's
  ``min(n, W)`` are.  At most C, whatever the context.
* Linear-attention layers (Qwen3-Next's Gated DeltaNet, arXiv:2412.06464) keep **no KV cache**:
  each sequence holds a fixed-size state per layer instead, whatever its length — the recurrent
  state ``[H_v, d_v, d_k]`` and the short convolution's last ``K − 1`` inputs
  ``[K − 1, 2·H_k·d_k + H_v·d_v]`` (vLLM's ``MambaStateShapeCalculator.gated_delta_net_state_shape``).
  :func:`state_bytes_per_sequence` counts it; :func:`kv_cache_bytes` adds it to every sequence
  that holds at least one token.  Its dtype is the model's (vLLM's ``mamba_cache_dtype`` "auto"),
  not the KV dtype: BF16 unless ``state_dtype`` says otherwise.
* Quantised KV (``"int8"``, ``"fp8"``/``"fp8_e4m3"``/``"fp8_e5m2"``, ``"int4"``) stores its scales
  too.  **Scale granularity chosen here: one scale per stored vector** — per token, per layer,
  per KV head, separately for K and for V (for MLA: one for the latent, one for the RoPE key),
  in ``scale_dtype`` (default FP16, 2 bytes).  For d_h = 128 in INT8 that is 2 bytes per 128,
  a 1.6 % overhead.  It is the finest common choice (KIVI, arXiv:2402.02750, quantises V per
  token); per-tensor scales (vLLM's FP8 ``k_scale``/``v_scale``, one per layer) cost
  ``2 × L × scale bytes`` in total and are listed by :func:`kv_scale_bytes_per_tensor`.

All byte counts are ``int`` (bytes; GB = 1e9, GiB = 2**30, never mixed).
"""
from __future__ import annotations

import functools
import math

from .config import ModelConfig, require_model_config
from .formats import KV_DTYPES, KV_QUANT_DTYPES
from .units import check_dtype, dtype_bits, require_nonnegative, require_positive

__all__ = [
    "kv_layer_bytes_per_token", "kv_bytes_per_token",
    "kv_tokens_held", "kv_cache_bytes", "kv_scale_bytes_per_tensor", "state_bytes_per_sequence",
]
# also public, for fit, plan and the ledger (not re-exported by ``ldf``): kv_token_bytes, state_dtype_for

_SCALE_DTYPES = ("fp32", "fp16", "bf16")


def _vector_bytes(n: int, dtype: str, scale_dtype: str) -> int:
    """Bytes of one stored vector of ``n`` elements (+ its scale when ``dtype`` is quantised)."""
    nbytes = math.ceil(n * dtype_bits(dtype) / 8)
    if dtype in KV_QUANT_DTYPES:
        nbytes += dtype_bits(scale_dtype) // 8
    return nbytes


def _check_layer(cfg: ModelConfig, layer) -> int:
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < cfg.n_layers:
        raise ValueError(f"layer={layer!r} is not allowed; allowed: an integer in 0..{cfg.n_layers - 1}")
    return layer


def _check(cfg: ModelConfig, dtype: str, scale_dtype: str) -> None:
    require_model_config(cfg)
    check_dtype(dtype, KV_DTYPES, "dtype")
    check_dtype(scale_dtype, _SCALE_DTYPES, "scale_dtype")


def kv_layer_bytes_per_token(cfg: ModelConfig, layer: int, dtype: str = "bf16", *,
                             scale_dtype: str = "fp16") -> int:
    """Bytes one token adds to layer ``layer``'s cache (int).

    MHA/GQA/MQA: ``2 × H_kv × (d_h × bytes [+ scale])``.  MLA: ``kv_lora_rank × bytes
    [+ scale] + qk_rope_head_dim × bytes [+ scale]`` (DeepSeek-V2 §2.1.2: cache ``c_KV`` and
    ``k_R``).  Every layer costs the same per token; windows change only how many tokens a layer
    holds (:func:`kv_tokens_held`).  A linear-attention layer adds nothing (0).

    Raises:
        ValueError: ``cfg`` not a ModelConfig, ``layer`` not an integer in ``0..n_layers-1``,
            unknown ``dtype``/``scale_dtype``.
    """
    _check(cfg, dtype, scale_dtype)
    _check_layer(cfg, layer)
    if cfg.layer_type(layer) == "linear_attention":
        return 0   # a fixed state per sequence instead (state_bytes_per_sequence)
    if cfg.is_mla:
        return _vector_bytes(cfg.kv_lora_rank, dtype, scale_dtype) + _vector_bytes(cfg.qk_rope_head_dim, dtype, scale_dtype)
    return 2 * cfg.n_kv_heads * _vector_bytes(cfg.head_dim, dtype, scale_dtype)


def kv_bytes_per_token(cfg: ModelConfig, dtype: str = "bf16", *, scale_dtype: str = "fp16") -> int:
    """Bytes one token adds to the KV cache of one sequence, summed over all L layers (int).

    Dense attention: ``L × 2 × H_kv × d_h × bytes`` (e.g. Llama-3-8B in BF16:
    ``32 × 2 × 8 × 128 × 2 = 131,072`` B = 128 KiB).  MLA: ``L × (kv_lora_rank +
    qk_rope_head_dim) × bytes`` (DeepSeek-V3 in BF16: ``61 × 576 × 2 = 70,272`` B).  Quantised
    dtypes add one ``scale_dtype`` scale per stored vector (module docstring).

    This is the cost of a token *while* every layer still holds it; sliding-window layers stop
    growing after ``sliding_window`` tokens — use :func:`kv_cache_bytes` for a given length.

    Raises:
        ValueError: unknown ``dtype`` (allowed: :data:`KV_DTYPES`) or ``scale_dtype``.
    """
    _check(cfg, dtype, scale_dtype)
    return sum(kv_layer_bytes_per_token(cfg, i, dtype, scale_dtype=scale_dtype) for i in range(cfg.n_layers))


def kv_tokens_held(cfg: ModelConfig, layer: int, seq_len: int) -> int:
    """Tokens layer ``layer`` keeps after ``seq_len`` tokens: ``seq_len`` for full attention,
    ``min(seq_len, sliding_window)`` for a sliding-window layer (a window larger than the
    context is allowed: the layer then holds the whole context), ``((seq_len − 1) mod C) + 1``
    for a chunked layer of ``attention_chunk_size`` C (0 at ``seq_len`` 0), 0 for a
    linear-attention layer (its state does not grow with the sequence).

    Raises:
        ValueError: ``cfg`` not a ModelConfig, ``seq_len`` not a non-negative integer, ``layer``
            not an integer in ``0..n_layers-1``.
    """
    require_model_config(cfg)
    require_nonnegative("seq_len", seq_len)
    _check_layer(cfg, layer)
    lt = cfg.layer_type(layer)
    if lt == "sliding_attention":
        return min(seq_len, cfg.sliding_window)
    if lt == "chunked_attention":
        return (seq_len - 1) % cfg.attention_chunk_size + 1 if seq_len else 0
    return 0 if lt == "linear_attention" else seq_len


def kv_cache_bytes(cfg: ModelConfig, seq_len: int, batch: int = 1, dtype: str = "bf16", *,
                   scale_dtype: str = "fp16", state_dtype: str | None = None) -> int:
    """Bytes of the KV cache of ``batch`` sequences of ``seq_len`` tokens each (int).

    ``batch × (Σ_layers kv_tokens_held(layer, seq_len) × kv_layer_bytes_per_token(layer)
    + state)``, where ``state`` is :func:`state_bytes_per_sequence` in ``state_dtype`` (default:
    ``dtype`` when it is fp32/fp16/bf16, else BF16) for a model with linear-attention layers
    and ``seq_len > 0``, else 0.
    The seed example: 32 layers, 32,768 tokens, 8 KV heads, d_h = 128, BF16 →
    ``32 × 32768 × 2 × 8 × 128 × 2 = 4,294,967,296`` B = exactly 4 GiB per sequence.

    A ``seq_len`` beyond ``cfg.max_position_embeddings`` is computed, not rejected (the model
    was not trained for it; the bytes are still what it would take).  ``seq_len = 0`` gives 0.

    Raises:
        ValueError: ``seq_len < 0``, ``batch < 1``, unknown ``dtype``/``scale_dtype``.
    """
    _check(cfg, dtype, scale_dtype)
    require_nonnegative("seq_len", seq_len)
    require_positive("batch", batch)
    per_seq = sum(kv_tokens_held(cfg, i, seq_len) * kv_layer_bytes_per_token(cfg, i, dtype, scale_dtype=scale_dtype)
                  for i in range(cfg.n_layers))
    if seq_len:
        per_seq += state_bytes_per_sequence(cfg, _state_dtype(dtype, state_dtype))
    return batch * per_seq


def _state_dtype(kv_dtype: str, state_dtype: str | None) -> str:
    return state_dtype if state_dtype is not None else state_dtype_for(kv_dtype)


def state_dtype_for(kv_dtype: str) -> str:
    """The dtype of linear-attention states beside a KV cache in ``kv_dtype``: the KV dtype when
    it is fp32/fp16/bf16 (the model's dtype, vLLM's ``mamba_cache_dtype`` "auto"), BF16 beside a
    quantised KV cache (vLLM quantises no recurrent state)."""
    return kv_dtype if kv_dtype in _SCALE_DTYPES else "bf16"


def state_bytes_per_sequence(cfg: ModelConfig, dtype: str = "bf16") -> int:
    """Bytes of the fixed-size state one sequence keeps in the linear-attention layers (int; 0
    for a model without any): per Gated DeltaNet layer ``(H_v·d_v·d_k + (K − 1)·(2·H_k·d_k +
    H_v·d_v)) × bytes`` — the recurrent state and the convolution's last ``K − 1`` inputs
    (shapes of vLLM's ``gated_delta_net_state_shape``; H_k/H_v ``linear_num_key/value_heads``,
    d_k/d_v ``linear_key/value_head_dim``, K ``linear_conv_kernel_dim``).

    transformers' ``Qwen3NextConfig`` defaults (48 layers, 36 of them Gated DeltaNet with H_k 16,
    H_v 32, d_k = d_v = 128, K 4) in BF16: ``36 × (32·128·128 + 3·(2·16·128 + 32·128)) × 2 =
    39,518,208`` B ≈ 37.7 MiB per sequence from its first token on — as much as 1,608 tokens of
    the KV of its 12 full-attention layers (``12 × 2 × 2 × 256 × 2 = 24,576`` B per token).

    Raises:
        ValueError: ``cfg`` not a ModelConfig, ``dtype`` not fp32/fp16/bf16.
    """
    require_model_config(cfg)
    check_dtype(dtype, _SCALE_DTYPES, "dtype")
    return _state_bytes(cfg, dtype)


@functools.lru_cache(maxsize=1024)   # plan and the accounting ask for it at every step
def _state_bytes(cfg: ModelConfig, dtype: str) -> int:
    total = 0
    for i in range(cfg.n_layers):
        if cfg.layer_type(i) == "linear_attention":
            nk, nv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
            dk, dv = cfg.linear_key_head_dim, cfg.linear_value_head_dim
            total += nv * dv * dk + (cfg.linear_conv_kernel_dim - 1) * (2 * nk * dk + nv * dv)
    return total * dtype_bits(dtype) // 8


def kv_scale_bytes_per_tensor(cfg: ModelConfig, scale_dtype: str = "fp32") -> int:
    """Bytes of per-tensor KV scales (one for K and one for V per layer, as vLLM's FP8 KV cache
    stores ``k_scale``/``v_scale``): ``2 × L × scale bytes`` — independent of length and batch.
    Shown for comparison with the per-vector scales :func:`kv_cache_bytes` counts.

    Raises:
        ValueError: ``cfg`` not a ModelConfig, unknown ``scale_dtype``.
    """
    require_model_config(cfg)
    check_dtype(scale_dtype, _SCALE_DTYPES, "scale_dtype")
    return 2 * cfg.n_layers * dtype_bits(scale_dtype) // 8


@functools.lru_cache(maxsize=1024)
def kv_token_bytes(cfg: ModelConfig, kv_dtype: str) -> int:
    """:func:`kv_bytes_per_token` as an int, memoised (the per-token rate that the memory fit,
    ``plan`` and the ledger ask for again and again); ``kv_dtype`` a name in ``KV_DTYPES``.

    Raises:
        ValueError: as :func:`kv_bytes_per_token`.
    """
    return int(kv_bytes_per_token(cfg, kv_dtype))
