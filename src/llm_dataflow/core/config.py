"""Model configurations: the shapes every calculator and the decoder are built from.

``ModelConfig`` uses the field's standard names (``n_layers, d_model, n_heads, n_kv_heads,
head_dim, d_ff, vocab_size``).  ``ModelConfig.from_hf`` reads a Hugging Face ``config.json``;
``model_config(name)`` returns a preset whose ``source`` names the config it was copied from.

Parameter counting is done by enumerating the checkpoint's tensors (:func:`tensor_specs`,
Hugging Face tensor names), so ``param_count`` and ``weight_bytes`` count exactly what a
checkpoint stores.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
from dataclasses import dataclass, field

from .formats import QuantSpec
from .hf_config import SUPPORTED_MODEL_TYPES, config_from_hf
from .quantization import quant_spec_from_config
from .units import require_nonnegative, require_positive

__all__ = [
    "ModelConfig", "model_config", "MODEL_PRESETS", "TensorSpec", "tensor_specs",
    "param_count",
    "MAX_LAYERS", "MAX_EXPERTS", "MAX_DIM", "MAX_PARAM_COUNT",
]
# also public, for the modules that take a model argument (not re-exported by ``ldf``):
# require_model_config, as_model_config, as_model_or_count

_NORMS = ("rmsnorm", "layernorm")
_MLPS = ("swiglu", "geglu", "gelu")
_POSITIONS = ("rope", "learned")
_LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention", "linear_attention")
_LINEAR_FIELDS = ("linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
                  "linear_conv_kernel_dim")
#: Upper bounds a :class:`ModelConfig` accepts.  Far above any published model (Llama 3.1 405B has
#: 126 layers and d_model 16,384; Kimi K2 384 routed experts; Gemma 2 a 256,000-token vocabulary),
#: they keep every calculator that enumerates a checkpoint's tensors (:func:`tensor_specs`) fast and
#: every byte count finite as a float.
MAX_LAYERS, MAX_EXPERTS, MAX_DIM = 1024, 1024, 2**32
#: At most this many (layer, routed expert) pairs: DeepSeek-V3 has 61 × 256 = 15,616.
_MAX_LAYER_EXPERTS = 2**16


@dataclass(frozen=True)
class ModelConfig:
    """Shapes and options of a decoder-only Transformer.

    Notation (``book/notation.md``): L = ``n_layers``, D = ``d_model``, H = ``n_heads``,
    H_kv = ``n_kv_heads``, d_h = ``head_dim``, F = ``d_ff``, V = ``vocab_size``.

    MoE fields: ``n_routed_experts`` E (0 = dense), ``n_experts_per_token`` k,
    ``n_shared_experts``, ``moe_d_ff`` (each routed expert's F), ``shared_expert_d_ff``
    (the shared expert's total F; default ``n_shared_experts × moe_d_ff``), ``dense_layers``
    (layer indices that keep a dense MLP), ``router_bias`` (DeepSeek-V3's score-correction bias).

    MLA fields (DeepSeek-V2/V3, arXiv:2405.04434): ``kv_lora_rank``, ``q_lora_rank``,
    ``qk_rope_head_dim``, ``qk_nope_head_dim``, ``v_head_dim``.

    ``rope_scaling`` is kept exactly as ``config.json`` gives it (``None`` = plain RoPE); the
    decoder implements what it supports and rejects the rest by name.

    Attention window: ``sliding_window`` (tokens) and ``layer_types`` (one of
    ``"full_attention"`` / ``"sliding_attention"`` / ``"chunked_attention"`` /
    ``"linear_attention"`` per layer; ``None`` = every layer sliding when ``sliding_window`` is
    set, else every layer full).  A chunked layer (Llama 4, ``attention_chunk_size`` C tokens)
    attends only within its own C-token chunk; a linear-attention layer (Qwen3-Next's Gated
    DeltaNet, arXiv:2412.06464) keeps no KV cache but a fixed-size state per sequence, sized by
    ``linear_num_key_heads``, ``linear_num_value_heads``, ``linear_key_head_dim``,
    ``linear_value_head_dim`` and ``linear_conv_kernel_dim`` (config.json's names).

    Today's families: ``nope_layers`` (layer indices that apply no RoPE: Llama 4's global
    layers), ``rope_local_theta`` (Gemma 3: the RoPE base of its sliding layers),
    ``attention_sinks`` (gpt-oss: one learned logit per head and layer in the softmax's
    denominator, H parameters per layer), ``attn_output_gate`` (Qwen3-Next: q_proj also emits a
    sigmoid gate for the attention output, so it is 2·H·d_h wide), ``router_linear_bias``
    (gpt-oss: the router linear has a bias), ``shared_expert_gate`` (Qwen3-Next: a [1, D]
    sigmoid gate on the shared expert), ``swiglu_limit`` / ``swiglu_alpha`` (gpt-oss's experts:
    ``(clamp(up, ±limit) + 1) · g·σ(alpha·g)`` with ``g = min(gate, limit)``; no byte changes).

    ``vision_params``: for a multimodal checkpoint whose config.json nests the language model in
    ``text_config``, the parameters of the vision tower and its projector into the language
    model (counted by :func:`llm_dataflow.core.vision.vision_param_count`); they are *not* in
    :func:`param_count`, which counts the language model that ``plan`` sizes.

    ``quantization``: the checkpoint's weight format (a :class:`~llm_dataflow.core.formats.QuantSpec`
    read from ``quantization_config`` by :func:`~llm_dataflow.core.quantization.quant_spec_from_config`),
    ``None`` for an unquantised checkpoint; ``plan`` sizes the weights in it unless told otherwise.

    ``hf_defaulted``: the ``config.json`` keys :meth:`from_hf` found absent and filled with
    transformers' class defaults (``plan`` refuses a config that omits a shape it sizes, and
    shows the others as warnings); ``()`` for a preset.

    ``unmodelled``: ``{config.json key: value}`` for settings that change the forward pass but no
    byte or FLOP count (e.g. Gemma 2's ``attn_logit_softcapping``); ``None`` when there are none.
    Calculators ignore them; :class:`~llm_dataflow.model.Decoder` refuses a config that has any.

    Sizes are bounded by :data:`MAX_LAYERS`, :data:`MAX_EXPERTS` (and at most 65,536 layer ×
    routed-expert pairs) and :data:`MAX_DIM`.

    Raises:
        ValueError: on construction, for any field outside its allowed range, naming it.
    """

    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_ff: int
    vocab_size: int
    name: str = "custom"
    model_type: str = "llama"
    tie_embeddings: bool = False
    max_position_embeddings: int | None = None
    attention_bias: bool = False      # biases on q, k, v projections
    attention_out_bias: bool = False  # bias on the output projection
    mlp_bias: bool = False
    norm: str = "rmsnorm"
    norm_eps: float = 1e-5
    norms_per_layer: int = 2          # Gemma-2 has 4 (pre/post attention, pre/post MLP)
    qk_norm: bool = False             # Qwen3: RMSNorm over head_dim on q and k
    mlp: str = "swiglu"
    position: str = "rope"
    rope_theta: float = 10000.0
    # config.json's rope_scaling, e.g. Llama 3.1's {"rope_type": "llama3", ...}; not part of the hash
    rope_scaling: dict | None = field(default=None, hash=False)
    n_routed_experts: int = 0
    n_experts_per_token: int = 0
    n_shared_experts: int = 0
    moe_d_ff: int | None = None
    shared_expert_d_ff: int | None = None
    dense_layers: tuple = ()
    router_bias: bool = False
    norm_topk_prob: bool = True
    kv_lora_rank: int | None = None
    q_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    qk_nope_head_dim: int | None = None
    v_head_dim: int | None = None
    sliding_window: int | None = None
    layer_types: tuple | None = None
    attention_chunk_size: int | None = None
    nope_layers: tuple = ()
    rope_local_theta: float | None = None
    attention_sinks: bool = False
    attn_output_gate: bool = False
    router_linear_bias: bool = False
    shared_expert_gate: bool = False
    swiglu_limit: float | None = None
    swiglu_alpha: float | None = None
    linear_num_key_heads: int | None = None
    linear_num_value_heads: int | None = None
    linear_key_head_dim: int | None = None
    linear_value_head_dim: int | None = None
    linear_conv_kernel_dim: int | None = None
    vision_params: int | None = None
    # config.json settings that change the forward pass but no byte/FLOP count; not part of the hash
    unmodelled: dict | None = field(default=None, hash=False)
    # the checkpoint's weight format, from config.json's quantization_config (None: unquantised)
    quantization: QuantSpec | None = None
    # config.json keys that were absent and filled with transformers' defaults (not part of the hash)
    hf_defaulted: tuple = field(default=(), compare=False, hash=False)
    source: str = ""
    published_params: int | None = None
    published_active_params: int | None = None
    published_precision: int | None = None
    notes: str = ""

    def __post_init__(self):
        for f in ("n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ff", "vocab_size",
                  "norms_per_layer"):
            require_positive(f, getattr(self, f))
            if getattr(self, f) > MAX_DIM:
                raise ValueError(f"{f}={getattr(self, f)} is not allowed; at most MAX_DIM={MAX_DIM}")
        if self.n_layers > MAX_LAYERS:
            raise ValueError(f"n_layers={self.n_layers} is not allowed; at most MAX_LAYERS={MAX_LAYERS}")
        for f in ("name", "source", "notes"):
            if not isinstance(getattr(self, f), str):
                raise ValueError(f"{f}={getattr(self, f)!r} is not allowed; it must be a string")
        if self.model_type not in SUPPORTED_MODEL_TYPES:
            raise ValueError(f"model_type={self.model_type!r} is not allowed; allowed: "
                             f"{', '.join(SUPPORTED_MODEL_TYPES)}")
        for f in ("tie_embeddings", "attention_bias", "attention_out_bias", "mlp_bias", "qk_norm",
                  "router_bias", "norm_topk_prob", "attention_sinks", "attn_output_gate", "router_linear_bias",
                  "shared_expert_gate"):
            if not isinstance(getattr(self, f), bool):
                raise ValueError(f"{f}={getattr(self, f)!r} is not allowed; it must be True or False")
        require_positive("norm_eps", self.norm_eps, integer=False)
        require_positive("rope_theta", self.rope_theta, integer=False)
        for f in ("rope_local_theta", "swiglu_limit", "swiglu_alpha"):
            if getattr(self, f) is not None:
                require_positive(f, getattr(self, f), integer=False)
        if self.rope_scaling is not None and not isinstance(self.rope_scaling, dict):
            raise ValueError(f"rope_scaling={self.rope_scaling!r} is not allowed; give config.json's dict or None")
        if self.unmodelled is not None and not isinstance(self.unmodelled, dict):
            raise ValueError(f"unmodelled={self.unmodelled!r} is not allowed; give a dict or None")
        if self.quantization is not None and not isinstance(self.quantization, QuantSpec):
            raise ValueError(f"quantization={self.quantization!r} is not allowed; give a QuantSpec or None")
        if self.unmodelled == {}:
            object.__setattr__(self, "unmodelled", None)
        for f in ("published_params", "published_active_params", "published_precision", "vision_params"):
            if getattr(self, f) is not None:
                require_positive(f, getattr(self, f))
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads={self.n_heads} is not a multiple of n_kv_heads={self.n_kv_heads}; "
                             "grouped-query attention needs n_heads % n_kv_heads == 0")
        if self.norm not in _NORMS:
            raise ValueError(f"norm={self.norm!r} is not allowed; allowed: {', '.join(_NORMS)}")
        if self.mlp not in _MLPS:
            raise ValueError(f"mlp={self.mlp!r} is not allowed; allowed: {', '.join(_MLPS)}")
        if self.position not in _POSITIONS:
            raise ValueError(f"position={self.position!r} is not allowed; allowed: {', '.join(_POSITIONS)}")
        if self.position == "rope" and not self.is_mla and self.head_dim % 2:
            raise ValueError(f"head_dim={self.head_dim} is odd; rotary position embedding rotates pairs "
                             "of channels, so head_dim must be even")
        for f in ("max_position_embeddings", "sliding_window", "moe_d_ff", "shared_expert_d_ff", "kv_lora_rank",
                  "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "attention_chunk_size",
                  *_LINEAR_FIELDS):
            v = getattr(self, f)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 < v <= MAX_DIM):
                raise ValueError(f"{f}={v!r} is not allowed; it must be None or an integer in 1..MAX_DIM={MAX_DIM}")
        if self.layer_types is not None:
            if not isinstance(self.layer_types, (tuple, list)):
                raise ValueError(f"layer_types={self.layer_types!r} is not allowed; give one type per layer or None")
            object.__setattr__(self, "layer_types", tuple(self.layer_types))
            if len(self.layer_types) != self.n_layers:
                raise ValueError(f"layer_types has {len(self.layer_types)} entries; it must have "
                                 f"n_layers={self.n_layers}")
            bad = [t for t in self.layer_types if t not in _LAYER_TYPES]
            if bad:
                raise ValueError(f"layer_types contains {bad[0]!r}; allowed: {', '.join(_LAYER_TYPES)}")
            for lt, f in (("sliding_attention", "sliding_window"), ("chunked_attention", "attention_chunk_size"),
                          ("linear_attention", "linear_num_value_heads")):
                if lt in self.layer_types and getattr(self, f) is None:
                    raise ValueError(f"layer_types names {lt} layers but {f} is None")
            if "linear_attention" in self.layer_types:
                for f in _LINEAR_FIELDS:
                    require_positive(f, getattr(self, f))
        for f in ("nope_layers", "dense_layers"):
            v = getattr(self, f)
            if not isinstance(v, (tuple, list)):
                raise ValueError(f"{f}={v!r} is not allowed; give a tuple of layer indices")
            object.__setattr__(self, f, tuple(v))
        bad = [i for i in self.nope_layers if not (isinstance(i, int) and 0 <= i < self.n_layers)]
        if bad:
            raise ValueError(f"nope_layers contains {bad[0]!r}; allowed: layer indices 0..{self.n_layers - 1}")
        require_nonnegative("n_routed_experts", self.n_routed_experts)
        require_nonnegative("n_experts_per_token", self.n_experts_per_token)
        require_nonnegative("n_shared_experts", self.n_shared_experts)
        if self.n_routed_experts or self.n_experts_per_token:
            require_positive("n_routed_experts", self.n_routed_experts)
            require_positive("n_experts_per_token", self.n_experts_per_token)
            if self.n_routed_experts > MAX_EXPERTS:
                raise ValueError(f"n_routed_experts={self.n_routed_experts} is not allowed; at most "
                                 f"MAX_EXPERTS={MAX_EXPERTS}")
            if self.n_layers * self.n_routed_experts > _MAX_LAYER_EXPERTS:
                raise ValueError(f"n_layers × n_routed_experts = {self.n_layers} × {self.n_routed_experts} is not "
                                 f"allowed; at most {_MAX_LAYER_EXPERTS:,} (layer, expert) pairs")
            if self.n_experts_per_token > self.n_routed_experts:
                raise ValueError(f"n_experts_per_token={self.n_experts_per_token} is more than "
                                 f"n_routed_experts={self.n_routed_experts}; a token can be routed to "
                                 "at most every expert")
            require_positive("moe_d_ff", self.moe_d_ff)
            if self.n_shared_experts < 0:
                raise ValueError(f"n_shared_experts={self.n_shared_experts} must be >= 0")
            bad = [i for i in self.dense_layers if not (isinstance(i, int) and 0 <= i < self.n_layers)]
            if bad:
                raise ValueError(f"dense_layers contains {bad[0]!r}; allowed: layer indices 0..{self.n_layers - 1}")
        mla = (self.kv_lora_rank, self.qk_rope_head_dim, self.qk_nope_head_dim, self.v_head_dim)
        if any(v is not None for v in mla):
            for f in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):
                require_positive(f, getattr(self, f))
            if self.q_lora_rank is not None:
                require_positive("q_lora_rank", self.q_lora_rank)
            if self.qk_rope_head_dim % 2:
                raise ValueError(f"qk_rope_head_dim={self.qk_rope_head_dim} is odd; RoPE needs an even size")

    # --- derived views ---------------------------------------------------------------------
    @property
    def is_moe(self) -> bool:
        """True when the config has routed experts."""
        return self.n_routed_experts > 0

    @property
    def is_mla(self) -> bool:
        """True for multi-head latent attention (DeepSeek-V2/V3)."""
        return self.kv_lora_rank is not None

    @property
    def attention_kind(self) -> str:
        """``"MHA"``, ``"GQA"``, ``"MQA"`` or ``"MLA"``."""
        if self.is_mla:
            return "MLA"
        if self.n_kv_heads == self.n_heads:
            return "MHA"
        return "MQA" if self.n_kv_heads == 1 else "GQA"

    def is_moe_layer(self, layer: int) -> bool:
        """Whether layer ``layer`` (0-based) uses the MoE block."""
        return self.is_moe and layer not in self.dense_layers

    def layer_type(self, layer: int) -> str:
        """``"full_attention"``, ``"sliding_attention"``, ``"chunked_attention"`` or
        ``"linear_attention"`` for layer ``layer`` (0-based)."""
        if self.layer_types is not None:
            return self.layer_types[layer]
        return "sliding_attention" if self.sliding_window is not None else "full_attention"

    @property
    def shared_d_ff(self) -> int:
        """Total d_ff of the shared expert(s) (0 when there is none)."""
        if not self.n_shared_experts:
            return 0
        return self.shared_expert_d_ff if self.shared_expert_d_ff is not None else self.n_shared_experts * self.moe_d_ff

    def replace(self, **changes) -> "ModelConfig":
        """A copy with ``changes`` applied (validated again)."""
        return dataclasses.replace(self, **changes)

    # --- Hugging Face config.json ----------------------------------------------------------
    @classmethod
    def from_hf(cls, config, name: str | None = None) -> "ModelConfig":
        """Build a config from a Hugging Face ``config.json`` (a dict, or a path to the file or
        to a folder holding it), reading it the way transformers 5.24 does.

        Supported ``model_type``: llama, mistral, mixtral, qwen2, qwen3, qwen3_moe, gemma2, phi3,
        gpt2, deepseek_v3; today's families gemma3_text, llama4_text, gpt_oss, qwen3_next, glm4_moe
        (GLM-4.5/4.6: dense layers below ``first_k_dense_replace``, then routed experts behind a
        biased sigmoid router with one shared expert), qwen2_moe (Qwen1.5/Qwen2-MoE: a sigmoid-gated
        shared expert, q/k/v biases from ``qkv_bias``), granite (Llama's layers with four
        multipliers, kept in ``unmodelled``); and the
        multimodal gemma3, llama4, mistral3, whose language model is read from ``text_config``
        (the outer ``tie_word_embeddings`` decides the tying, as in transformers) and whose vision
        tower + projector are counted into ``vision_params`` (not into :func:`param_count`).

        * **Today's families** (as transformers 5.24's classes fill them): gemma3_text — every
          ``sliding_window_pattern``-th layer (default 6) full, the others sliding; QK norm, four
          norms per layer, GeGLU; ``rope_theta``/``rope_scaling`` for the full layers and
          ``rope_local_base_freq`` for the sliding ones (or ``rope_parameters`` per layer type).
          llama4_text — MoE in ``moe_layers`` (default every ``interleave_moe_layer_step``-th
          layer) with one shared expert, dense layers of ``intermediate_size_mlp``; layers with
          RoPE are chunked (``attention_chunk_size``), the ``no_rope_layers`` zeros are global
          NoPE layers (``nope_layers``).  gpt_oss — every layer MoE, biases on q/k/v/o, router
          and experts, attention sinks, every other layer sliding (``layer_types``), YaRN RoPE
          when config.json gives none.  qwen3_next — Gated DeltaNet layers with one full-
          attention layer every ``full_attention_interval`` (default 4), gated q_proj, QK norm,
          Qwen3-MoE's layer rule with a gated shared expert, ``partial_rotary_factor`` 0.25.
          ``quantization_config`` is not read here (the weight format is read elsewhere).

        * **Omitted keys** take the default of transformers' config class for that type
          (:data:`llm_dataflow.core.hf_config.HF_CONFIG_DEFAULTS`, copied from ``transformers/models/<type>/
          configuration_<type>.py`` and tested against it): e.g. llama ``rms_norm_eps`` 1e-6,
          mixtral ``rope_theta`` 1e6, mistral/mixtral ``num_key_value_heads`` 8, qwen2
          ``max_window_layers`` 28, qwen3 ``head_dim`` 128.  ``cfg.notes`` lists the defaults
          used.  A ``null`` is allowed only where the class allows ``None``.
        * **Per-type conventions of transformers' modelling code**: attention biases on q, k, v
          *and* o from ``attention_bias`` (llama, qwen3, qwen3_moe, gemma2); always on q, k, v and
          never on o (qwen2); none (mistral, mixtral, phi3); on ``q_a_proj``,
          ``kv_a_proj_with_mqa`` and ``o_proj`` (deepseek_v3).  ``mlp_bias``: llama only.
          Sliding windows: every layer (mistral, mixtral, phi3, and qwen3_moe when
          ``use_sliding_window``); per layer from ``layer_types``, else layers
          ``>= max_window_layers`` when ``use_sliding_window`` (qwen2, qwen3); ``layer_types``,
          else every other layer (gemma2).  RoPE: ``rope_scaling`` wins over ``rope_parameters``;
          ``rope_theta`` from that dict, else the top-level key, else the class default;
          llama3/yarn/longrope get ``original_max_position_embeddings`` as transformers fills it.
          deepseek_v3: ``head_dim`` here is ``qk_nope_head_dim + qk_rope_head_dim`` (the q·k
          width; transformers overwrites its own ``head_dim`` with ``qk_rope_head_dim``).
        * **Settings that change the forward pass but no byte or FLOP count** (Gemma-2's logit
          soft-capping and ``query_pre_attn_scalar``, DeepSeek-V3's grouped routing and
          ``routed_scaling_factor``, an activation other than the type's own, a partial rotary
          factor) are kept in ``cfg.unmodelled``; :class:`~llm_dataflow.model.Decoder` refuses a
          config that has any.
        * **The checkpoint's weight format**: ``quantization_config`` (also ``compression_config``,
          or inside ``text_config``) becomes ``cfg.quantization``
          (:func:`~llm_dataflow.core.quantization.quant_spec_from_config`: FP8 block/tensor/channel,
          fbgemm_fp8, compressed-tensors, GPTQ, AWQ, MXFP4, bitsandbytes; others refused by name).
        * **Keys transformers' class ignores but other readers honour** are refused rather than
          guessed: a sliding window or sliding ``layer_types`` on llama / deepseek_v3, sliding
          ``layer_types`` on mistral / mixtral / phi3, ``attention_bias`` or ``mlp_bias`` true on
          mistral / mixtral / phi3 (vLLM reads these through its Llama code), qwen3_moe
          ``max_window_layers`` / ``layer_types`` with ``use_sliding_window`` (transformers slides
          every layer, Qwen2-style readers only some), deepseek_v3 ``moe_layer_freq`` != 1, gpt2
          ``add_cross_attention``.

        Raises:
            ValueError: unsupported ``model_type``; a key of the wrong JSON type, ``null`` where
                the class forbids it, or out of range; an alias given twice with different
                values; one of the refused keys above — each naming the config.json key.
        """
        if isinstance(config, (str, os.PathLike)):
            path = os.fspath(config)
            if os.path.isdir(path):
                path = os.path.join(path, "config.json")
            if not os.path.isfile(path):
                raise ValueError(f"config={os.fspath(config)!r} is not allowed: no config.json there")
            try:
                with open(path, encoding="utf-8") as fh:
                    config = json.load(fh)
            except (UnicodeDecodeError, json.JSONDecodeError) as err:
                raise ValueError(f"config={path!r} is not valid JSON: {err}") from None
        if not isinstance(config, dict):
            raise ValueError(f"config={config!r} is not allowed; give a config.json dict or a path to one")
        cfg = config_from_hf(cls, config, name)
        text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
        qc = config.get("quantization_config", config.get("compression_config", text.get("quantization_config")))
        if qc is None:      # MLX (mlx_lm) writes its block as "quantization": {"group_size", "bits"}
            qc = config.get("quantization")
        if qc is None:
            return cfg
        q = quant_spec_from_config(qc, config.get("torch_dtype", config.get("dtype")))
        return cfg.replace(quantization=q)


# --- checkpoint tensors ---------------------------------------------------------------------
@dataclass(frozen=True)
class TensorSpec:
    """One tensor of a checkpoint.

    Attributes:
        name: Hugging Face tensor name (Llama naming for llama-like families; GPT-2 naming for gpt2;
            MoE experts as ``mlp.experts.{e}.{gate,up,down}_proj`` like Qwen3-MoE / DeepSeek — Mixtral's
            own checkpoints say ``block_sparse_moe.experts.{e}.w1/w3/w2``, same shapes).
        shape: tensor shape as stored.
        role: ``embedding``, ``position_embedding``, ``lm_head``, ``norm``, ``attn``, ``mlp``,
            ``router``, ``expert``, ``shared_expert`` or ``bias``.
        in_features: the reduction (input) dimension for a linear weight, else ``None``.
        layer: 0-based layer index or ``None``.
        expert: routed expert index or ``None``.
    """

    name: str
    shape: tuple
    role: str
    in_features: int | None = None
    layer: int | None = None
    expert: int | None = None

    @property
    def numel(self) -> int:
        """Number of elements."""
        return math.prod(self.shape)


def _linear(out: list, name: str, n_out: int, n_in: int, role: str, layer, bias: bool, expert=None):
    out.append(TensorSpec(f"{name}.weight", (n_out, n_in), role, n_in, layer, expert))
    if bias:
        out.append(TensorSpec(f"{name}.bias", (n_out,), "bias", None, layer, expert))


def _mlp(out: list, p: str, d: int, f: int, cfg: ModelConfig, role: str, layer, expert=None):
    gated = cfg.mlp in ("swiglu", "geglu")
    if gated:
        _linear(out, f"{p}.gate_proj", f, d, role, layer, cfg.mlp_bias, expert)
    _linear(out, f"{p}.up_proj", f, d, role, layer, cfg.mlp_bias, expert)
    _linear(out, f"{p}.down_proj", d, f, role, layer, cfg.mlp_bias, expert)


def tensor_specs(cfg: ModelConfig) -> list[TensorSpec]:
    """Every tensor a checkpoint of ``cfg`` stores, with Hugging Face names and shapes.

    GPT-2 uses its own names and Conv1D layout ``[in, out]``.  Phi-3 checkpoints fuse q/k/v and
    gate/up into one tensor each; they are listed unfused here (same element count).  Routed
    experts are listed one by one (``experts.{e}.{gate,up,down}_proj``) where transformers 5 fuses
    them into ``experts.gate_up_proj [E, D, 2F]`` / ``down_proj`` (Llama 4, gpt-oss, Qwen3-Next):
    same elements, and the per-expert split is what active-parameter counts need.  gpt-oss's
    expert biases (``gate_up_proj_bias [E, 2F]``, ``down_proj_bias [E, D]``) are listed as the
    per-expert ``gate/up/down_proj.bias`` (``cfg.mlp_bias``), its attention sinks as
    ``self_attn.sinks [H]`` (role ``bias``).  A linear-attention layer lists transformers'
    ``linear_attn.*`` tensors (the depthwise ``conv1d.weight [conv_dim, 1, K]`` has role ``attn``
    and no ``in_features``: it is not a matmul).

    Raises:
        ValueError: ``cfg`` is not a :class:`ModelConfig`.
    """
    _require_config(cfg)
    return list(_tensor_specs(cfg))


def require_model_config(cfg, field: str = "cfg") -> ModelConfig:
    """``cfg`` itself if it is a :class:`ModelConfig`.

    Raises:
        ValueError: anything else, naming ``field``.
    """
    if not isinstance(cfg, ModelConfig):
        raise ValueError(f"{field}={cfg!r} is not allowed; it must be a ModelConfig (see ldf.model_config)")
    return cfg


def _require_config(cfg) -> None:
    if not isinstance(cfg, ModelConfig):
        raise ValueError(f"cfg={cfg!r} is not allowed; give a ModelConfig (see model_config / ModelConfig.from_hf)")


#: (MLP module, router, shared expert) names where transformers' class differs from Qwen3-MoE's.
_MOE_NAMES = {"llama4_text": ("feed_forward", "router", "shared_expert"), "gpt_oss": ("mlp", "router", "shared_experts"),
              "qwen3_next": ("mlp", "gate", "shared_expert"), "qwen2_moe": ("mlp", "gate", "shared_expert")}


@functools.lru_cache(maxsize=256)  # calculators evaluate whole grids of presets
def _tensor_specs(cfg: ModelConfig) -> tuple:
    out: list[TensorSpec] = []
    D, V = cfg.d_model, cfg.vocab_size
    if cfg.model_type == "gpt2":
        out.append(TensorSpec("transformer.wte.weight", (V, D), "embedding"))
        out.append(TensorSpec("transformer.wpe.weight", (cfg.max_position_embeddings, D), "position_embedding"))
        for i in range(cfg.n_layers):
            p = f"transformer.h.{i}"
            for ln in ("ln_1", "ln_2"):
                out += [TensorSpec(f"{p}.{ln}.weight", (D,), "norm", None, i),
                        TensorSpec(f"{p}.{ln}.bias", (D,), "norm", None, i)]
            for nm, n_in, n_out, role in (("attn.c_attn", D, 3 * D, "attn"), ("attn.c_proj", D, D, "attn"),
                                          ("mlp.c_fc", D, cfg.d_ff, "mlp"), ("mlp.c_proj", cfg.d_ff, D, "mlp")):
                out += [TensorSpec(f"{p}.{nm}.weight", (n_in, n_out), role, n_in, i),
                        TensorSpec(f"{p}.{nm}.bias", (n_out,), "bias", None, i)]
        out += [TensorSpec("transformer.ln_f.weight", (D,), "norm"),
                TensorSpec("transformer.ln_f.bias", (D,), "norm")]
        if not cfg.tie_embeddings:
            out.append(TensorSpec("lm_head.weight", (V, D), "lm_head", D))
        return tuple(out)

    def norm(name, size, layer):
        out.append(TensorSpec(f"{name}.weight", (size,), "norm", None, layer))
        if cfg.norm == "layernorm":
            out.append(TensorSpec(f"{name}.bias", (size,), "norm", None, layer))

    out.append(TensorSpec("model.embed_tokens.weight", (V, D), "embedding"))
    H, KV, hd = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    names = _MOE_NAMES.get(cfg.model_type, ("mlp", "gate", "shared_experts"))
    for i in range(cfg.n_layers):
        p = f"model.layers.{i}"
        norm(f"{p}.input_layernorm", D, i)
        a = f"{p}.self_attn"
        if cfg.is_mla:
            qk = cfg.qk_nope_head_dim + cfg.qk_rope_head_dim
            # transformers' DeepseekV3Attention: attention_bias puts biases on q_a_proj,
            # kv_a_proj_with_mqa and o_proj only
            if cfg.q_lora_rank is not None:
                _linear(out, f"{a}.q_a_proj", cfg.q_lora_rank, D, "attn", i, cfg.attention_bias)
                norm(f"{a}.q_a_layernorm", cfg.q_lora_rank, i)
                _linear(out, f"{a}.q_b_proj", H * qk, cfg.q_lora_rank, "attn", i, False)
            else:
                _linear(out, f"{a}.q_proj", H * qk, D, "attn", i, False)
            _linear(out, f"{a}.kv_a_proj_with_mqa", cfg.kv_lora_rank + cfg.qk_rope_head_dim, D, "attn", i,
                    cfg.attention_bias)
            norm(f"{a}.kv_a_layernorm", cfg.kv_lora_rank, i)
            _linear(out, f"{a}.kv_b_proj", H * (cfg.qk_nope_head_dim + cfg.v_head_dim), cfg.kv_lora_rank,
                    "attn", i, False)
            _linear(out, f"{a}.o_proj", D, H * cfg.v_head_dim, "attn", i, cfg.attention_out_bias)
        elif cfg.layer_type(i) == "linear_attention":   # Gated DeltaNet (transformers' Qwen3NextGatedDeltaNet)
            a, nk, nv = f"{p}.linear_attn", cfg.linear_num_key_heads, cfg.linear_num_value_heads
            dk, dv = cfg.linear_key_head_dim, cfg.linear_value_head_dim
            out += [TensorSpec(f"{a}.dt_bias", (nv,), "bias", None, i), TensorSpec(f"{a}.A_log", (nv,), "bias", None, i),
                    TensorSpec(f"{a}.conv1d.weight", (2 * nk * dk + nv * dv, 1, cfg.linear_conv_kernel_dim), "attn",
                               None, i)]
            _linear(out, f"{a}.in_proj_qkvz", 2 * nk * dk + 2 * nv * dv, D, "attn", i, False)
            _linear(out, f"{a}.in_proj_ba", 2 * nv, D, "attn", i, False)
            norm(f"{a}.norm", dv, i)
            _linear(out, f"{a}.out_proj", D, nv * dv, "attn", i, False)
        else:
            if cfg.attention_sinks:   # gpt-oss: one learned logit per head
                out.append(TensorSpec(f"{a}.sinks", (H,), "bias", None, i))
            _linear(out, f"{a}.q_proj", H * hd * (2 if cfg.attn_output_gate else 1), D, "attn", i, cfg.attention_bias)
            _linear(out, f"{a}.k_proj", KV * hd, D, "attn", i, cfg.attention_bias)
            _linear(out, f"{a}.v_proj", KV * hd, D, "attn", i, cfg.attention_bias)
            _linear(out, f"{a}.o_proj", D, H * hd, "attn", i, cfg.attention_out_bias)
            if cfg.qk_norm:
                norm(f"{a}.q_norm", hd, i)
                norm(f"{a}.k_norm", hd, i)
        norm(f"{p}.post_attention_layernorm", D, i)
        if cfg.norms_per_layer == 4:
            norm(f"{p}.pre_feedforward_layernorm", D, i)
            norm(f"{p}.post_feedforward_layernorm", D, i)
        m = f"{p}.{names[0]}"
        if cfg.is_moe_layer(i):
            E = cfg.n_routed_experts
            out.append(TensorSpec(f"{m}.{names[1]}.weight", (E, D), "router", D, i))
            if cfg.router_linear_bias:   # gpt-oss; replicated like the router (not a TP-split "bias")
                out.append(TensorSpec(f"{m}.{names[1]}.bias", (E,), "router", None, i))
            if cfg.router_bias:
                out.append(TensorSpec(f"{m}.{names[1]}.e_score_correction_bias", (E,), "router", None, i))
            for e in range(E):
                _mlp(out, f"{m}.experts.{e}", D, cfg.moe_d_ff, cfg, "expert", i, e)
            if cfg.n_shared_experts:
                _mlp(out, f"{m}.{names[2]}", D, cfg.shared_d_ff, cfg, "shared_expert", i)
            if cfg.shared_expert_gate:
                out.append(TensorSpec(f"{m}.shared_expert_gate.weight", (1, D), "shared_expert", D, i))
        else:
            _mlp(out, m, D, cfg.d_ff, cfg, "mlp", i)
    norm("model.norm", D, None)
    if not cfg.tie_embeddings:
        out.append(TensorSpec("lm_head.weight", (V, D), "lm_head", D))
    return tuple(out)


def param_count(cfg: ModelConfig, active: bool = False) -> int:
    """Exact parameter count of ``cfg`` (tied embeddings counted once).

    ``active=True`` counts, for an MoE, only the ``n_experts_per_token`` routed experts a token
    uses (plus everything else: attention, router, shared experts, embeddings, lm_head).  For a
    dense model it equals the total.

    Vendors' headline counts (``cfg.published_params``) agree with this to their printed precision;
    the presets' docstrings/notes explain any gap.

    Raises:
        ValueError: ``cfg`` is not a :class:`ModelConfig` or ``active`` not a bool.
    """
    _require_config(cfg)
    if not isinstance(active, bool):
        raise ValueError(f"active={active!r} is not allowed; it must be True or False")
    return _param_count(cfg, active)


@functools.lru_cache(maxsize=1024)  # calculators evaluate whole grids of presets
def _param_count(cfg: ModelConfig, active: bool) -> int:
    total = 0
    for t in _tensor_specs(cfg):
        if active and t.expert is not None and t.expert >= cfg.n_experts_per_token:  # weights and biases
            continue
        total += t.numel
    return total


# --- presets --------------------------------------------------------------------------------
def _hf(path):
    return f"Hugging Face {path}/config.json"


MODEL_PRESETS: dict[str, ModelConfig] = {}


def _add(cfg: ModelConfig):
    MODEL_PRESETS[cfg.name] = cfg


_add(ModelConfig(name="GPT-2-small", model_type="gpt2", n_layers=12, d_model=768, n_heads=12, n_kv_heads=12,
                 head_dim=64, d_ff=3072, vocab_size=50257, tie_embeddings=True, max_position_embeddings=1024,
                 attention_bias=True, attention_out_bias=True, mlp_bias=True, norm="layernorm", mlp="gelu",
                 position="learned", source=_hf("openai-community/gpt2"), published_params=124_000_000,
                 published_precision=1_000_000,
                 notes="Hugging Face's model card says 124M. The GPT-2 paper's Table 2 says 117M; that "
                       "figure is known to have been miscounted, and the released checkpoint holds "
                       "124,439,808 parameters."))
_add(ModelConfig(name="Llama-2-7B", model_type="llama", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=32,
                 head_dim=128, d_ff=11008, vocab_size=32000, max_position_embeddings=4096,
                 source=_hf("meta-llama/Llama-2-7b-hf") + "; Touvron et al. 2023, arXiv:2307.09288",
                 published_params=6_738_415_616, published_precision=1))
_add(ModelConfig(name="Llama-3-8B", model_type="llama", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8,
                 head_dim=128, d_ff=14336, vocab_size=128256, max_position_embeddings=8192, rope_theta=500000.0,
                 source=_hf("meta-llama/Meta-Llama-3-8B"), published_params=8_030_000_000,
                 published_precision=10_000_000))
_add(ModelConfig(name="Llama-3.1-70B", model_type="llama", n_layers=80, d_model=8192, n_heads=64, n_kv_heads=8,
                 head_dim=128, d_ff=28672, vocab_size=128256, max_position_embeddings=131072,
                 rope_theta=500000.0, rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                    "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
                 source=_hf("meta-llama/Llama-3.1-70B"), published_params=70_600_000_000,
                 published_precision=100_000_000))
_add(ModelConfig(name="Llama-2-70B", model_type="llama", n_layers=80, d_model=8192, n_heads=64, n_kv_heads=8,
                 head_dim=128, d_ff=28672, vocab_size=32000, max_position_embeddings=4096,
                 source=_hf("meta-llama/Llama-2-70b-hf") + "; Touvron et al. 2023, arXiv:2307.09288 (GQA with 8 "
                        "KV heads in the 70B model)",
                 notes="Meta names it 70B; these shapes hold 68,976,648,192 parameters. Used by the published "
                       "measurements (gpt-fast, TensorRT-LLM, MLPerf Inference)."))
_add(ModelConfig(name="Mistral-7B-v0.1", model_type="mistral", n_layers=32, d_model=4096, n_heads=32,
                 n_kv_heads=8, head_dim=128, d_ff=14336, vocab_size=32000, max_position_embeddings=32768,
                 sliding_window=4096, source=_hf("mistralai/Mistral-7B-v0.1") + "; Jiang et al. 2023, arXiv:2310.06825",
                 published_params=7_240_000_000, published_precision=10_000_000))
_add(ModelConfig(name="Mixtral-8x7B", model_type="mixtral", n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8,
                 head_dim=128, d_ff=14336, vocab_size=32000, max_position_embeddings=32768, rope_theta=1e6,
                 n_routed_experts=8, n_experts_per_token=2, moe_d_ff=14336,
                 source=_hf("mistralai/Mixtral-8x7B-v0.1") + "; Mistral AI, 'Mixtral of experts' (2023): "
                        "46.7B total, 12.9B used per token",
                 published_params=46_700_000_000, published_active_params=12_900_000_000,
                 published_precision=100_000_000))
_add(ModelConfig(name="Qwen2.5-7B", model_type="qwen2", n_layers=28, d_model=3584, n_heads=28, n_kv_heads=4,
                 head_dim=128, d_ff=18944, vocab_size=152064, max_position_embeddings=131072, rope_theta=1e6,
                 norm_eps=1e-6, attention_bias=True, source=_hf("Qwen/Qwen2.5-7B") + "; model card: 7.61B",
                 published_params=7_610_000_000, published_precision=10_000_000))
_add(ModelConfig(name="Qwen3-30B-A3B", model_type="qwen3_moe", n_layers=48, d_model=2048, n_heads=32,
                 n_kv_heads=4, head_dim=128, d_ff=6144, vocab_size=151936, max_position_embeddings=40960,
                 rope_theta=1e6, norm_eps=1e-6, qk_norm=True, n_routed_experts=128, n_experts_per_token=8,
                 moe_d_ff=768, source=_hf("Qwen/Qwen3-30B-A3B") + "; model card: 30.5B total, 3.3B activated",
                 published_params=30_500_000_000, published_active_params=3_300_000_000,
                 published_precision=100_000_000))
_add(ModelConfig(name="DeepSeek-V3", model_type="deepseek_v3", n_layers=61, d_model=7168, n_heads=128,
                 n_kv_heads=128, head_dim=192, d_ff=18432, vocab_size=129280, max_position_embeddings=163840,
                 n_routed_experts=256, n_experts_per_token=8, n_shared_experts=1, moe_d_ff=2048,
                 dense_layers=(0, 1, 2), router_bias=True, kv_lora_rank=512, q_lora_rank=1536,
                 qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128, norm_eps=1e-6,
                 source=_hf("deepseek-ai/DeepSeek-V3") + "; DeepSeek-V3 Technical Report, arXiv:2412.19437: "
                        "671B total, 37B activated",
                 published_params=671_000_000_000, published_active_params=37_000_000_000,
                 published_precision=1_000_000_000,
                 notes="Counts exclude the multi-token-prediction module (the checkpoint's extra 14B, "
                       "layer 61), as the report's 671B does. Active count here is 37.55B because it "
                       "includes the 0.93B input embedding table; without it (a gather, not a matmul) "
                       "it is 36.63B. Either way the report's '37B' is within 0.6B."))
_add(ModelConfig(name="Phi-3-mini", model_type="phi3", n_layers=32, d_model=3072, n_heads=32, n_kv_heads=32,
                 head_dim=96, d_ff=8192, vocab_size=32064, max_position_embeddings=4096, sliding_window=2047,
                 source=_hf("microsoft/Phi-3-mini-4k-instruct") + "; Abdin et al. 2024, arXiv:2404.14219: 3.8B",
                 published_params=3_800_000_000, published_precision=100_000_000))
_add(ModelConfig(name="Gemma-2-9B", model_type="gemma2", n_layers=42, d_model=3584, n_heads=16, n_kv_heads=8,
                 head_dim=256, d_ff=14336, vocab_size=256000, tie_embeddings=True, max_position_embeddings=8192,
                 norm_eps=1e-6, norms_per_layer=4, mlp="geglu", sliding_window=4096,
                 unmodelled={"attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0},
                 layer_types=tuple("sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(42)),
                 source=_hf("google/gemma-2-9b") + "; Gemma Team 2024, arXiv:2408.00118 Table 2: "
                        "8,324,201,984 non-embedding parameters",
                 published_params=9_000_000_000, published_precision=1_000_000_000,
                 notes="The paper's non-embedding count (8,324,201,984) matches exactly; its embedding "
                       "count (917,962,752) is for a 256,128-row table, the released vocabulary has 256,000."))
# Tiny presets for CPU lessons: small enough for notebooks, shaped like the real ones.
_add(ModelConfig(name="tiny-llama", model_type="llama", n_layers=2, d_model=64, n_heads=4, n_kv_heads=2,
                 head_dim=16, d_ff=160, vocab_size=256, max_position_embeddings=256,
                 source="this book: a Llama-shaped toy (GQA 4:2) for CPU lessons"))
_add(ModelConfig(name="tiny-moe", model_type="qwen3_moe", n_layers=2, d_model=64, n_heads=4, n_kv_heads=2,
                 head_dim=16, d_ff=160, vocab_size=256, max_position_embeddings=256, n_routed_experts=8,
                 n_experts_per_token=2, n_shared_experts=1, moe_d_ff=64, norm_eps=1e-6,
                 source="this book: a toy MoE — Qwen3-MoE routing (softmax top-2 of 8, renormalised) "
                        "with a DeepSeek-style ungated shared expert and no q/k norm, so it matches no "
                        "single Hugging Face class; the decoder runs it as configured"))
_add(ModelConfig(name="tiny-draft", model_type="llama", n_layers=1, d_model=32, n_heads=2, n_kv_heads=1,
                 head_dim=16, d_ff=64, vocab_size=256, max_position_embeddings=256,
                 source="this book: a draft model sharing tiny-llama's vocabulary, for speculative decoding"))
_add(ModelConfig(name="bench-llama", model_type="llama", n_layers=4, d_model=1024, n_heads=16, n_kv_heads=4,
                 head_dim=64, d_ff=2816, vocab_size=8192, max_position_embeddings=2048,
                 source="this book: ~62M parameters (~250 MB in FP32), larger than a CPU's last-level "
                        "cache, for the bandwidth-bound decode loop"))
_add(ModelConfig(name="bench-tinyllama", model_type="llama", n_layers=4, d_model=2048, n_heads=32, n_kv_heads=4,
                 head_dim=64, d_ff=5632, vocab_size=32000, max_position_embeddings=2048,
                 source=_hf("TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T") + " shapes (hidden_size "
                        "2048, intermediate_size 5632, 32 heads, 4 kv heads, vocab 32000) with 4 of its 22 "
                        "layers: ~307M parameters (~1.23 GB in FP32), real-model matrix shapes for "
                        "benchmarks/decode_bandwidth.py"))


def model_config(name: str) -> ModelConfig:
    """Return the preset ``name`` (see :data:`MODEL_PRESETS`; each stores its ``source``).

    Raises:
        ValueError: unknown name; the message lists the presets.
    """
    if not isinstance(name, str) or name not in MODEL_PRESETS:
        raise ValueError(f"model={name!r} is not a preset; allowed: {', '.join(MODEL_PRESETS)}")
    return MODEL_PRESETS[name]


# --- the model argument of the calculators ---------------------------------------------------
#: The largest bare parameter count the calculators accept (``cfg`` given as a number): 1e18,
#: a million times the largest published model (about 1e12 parameters, Kimi K2's 1.04e12), so
#: that FLOP and byte counts built from it stay far inside a float's range.
MAX_PARAM_COUNT = 1e18


def as_model_or_count(cfg):
    """``cfg`` as the calculators take it: a ModelConfig, a preset name (looked up), or a bare
    parameter count (int/float in (0, :data:`MAX_PARAM_COUNT`], returned as given).

    Raises:
        ValueError: an unknown preset, a count out of range, anything else (naming ``cfg``).
    """
    if isinstance(cfg, ModelConfig):
        return cfg
    if isinstance(cfg, str):
        return model_config(cfg)
    if isinstance(cfg, (int, float)) and not isinstance(cfg, bool):
        require_positive("cfg (parameter count)", cfg, integer=False)
        if not cfg <= MAX_PARAM_COUNT:
            raise ValueError(f"cfg={cfg!r} is not allowed; a parameter count must be at most "
                             f"MAX_PARAM_COUNT={MAX_PARAM_COUNT:g}")
        return cfg
    raise ValueError(f"cfg={cfg!r} is not allowed; give a ModelConfig, a preset name or a parameter count")


def as_model_config(cfg) -> ModelConfig:
    """``cfg`` as a ModelConfig: a ModelConfig, or a preset name looked up.

    Raises:
        ValueError: an unknown preset, a bare parameter count, anything else (naming ``cfg``).
    """
    c = as_model_or_count(cfg)
    if not isinstance(c, ModelConfig):
        raise ValueError(f"cfg={cfg!r} is not allowed here; give a ModelConfig or a preset name")
    return c
