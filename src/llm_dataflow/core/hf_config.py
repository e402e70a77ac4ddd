"""Reading a Hugging Face ``config.json`` the way transformers 5.24 does: each type's class
defaults (:data:`HF_CONFIG_DEFAULTS`, tested against transformers), key aliases, per-type
conventions for biases, windows and RoPE, and the keys refused by name.
:meth:`llm_dataflow.core.config.ModelConfig.from_hf` is the entry point; this module imports
nothing of the package (the config module imports it).
"""
from __future__ import annotations

import math

from .vision import vision_param_count

__all__ = ["HF_CONFIG_DEFAULTS", "HF_CONFIG_ALIASES", "SUPPORTED_MODEL_TYPES", "NESTED_MODEL_TYPES"]
# also public, for config (not re-exported by ``ldf``): config_from_hf

#: Hugging Face ``model_type`` values the book reads.
SUPPORTED_MODEL_TYPES = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "gemma2",
                         "phi3", "gpt2", "deepseek_v3", "gemma3_text", "llama4_text", "gpt_oss", "qwen3_next",
                         "gemma3", "llama4", "mistral3", "glm4_moe", "qwen2_moe", "granite")
#: Multimodal types whose config.json nests the language model in ``text_config``:
#: ``{type: (text model_type when text_config gives none, vision model_type)}``.
NESTED_MODEL_TYPES = {"gemma3": ("gemma3_text", "siglip_vision_model"),
                      "llama4": ("llama4_text", "llama4_vision_model"), "mistral3": ("mistral", "pixtral")}


# --- Hugging Face config.json: transformers 5.24's defaults ---------------------------------------
_DERIVED = "derived"  # default computed by transformers when the key is absent (see config_from_hf)

_LLAMA_LIKE = {
    "hidden_act": ("silu", "str"), "rms_norm_eps": (1e-6, "float"), "tie_word_embeddings": (False, "bool"),
    "rope_parameters": (None, "dict?"),
}
#: ``{model_type: {config.json key: (default, JSON kind)}}`` — the default of transformers 5.24's
#: config class (``transformers/models/<type>/configuration_<type>.py``) for every key
#: :meth:`ModelConfig.from_hf` reads; kind ``int``/``float``/``bool``/``str``/``list``/``dict``, a
#: trailing ``?`` when the class allows ``null``; ``"derived"``: computed from other keys when absent.
HF_CONFIG_DEFAULTS: dict[str, dict[str, tuple]] = {
    "llama": {**_LLAMA_LIKE, "vocab_size": (32000, "int"), "hidden_size": (4096, "int"),
              "intermediate_size": (11008, "int"), "num_hidden_layers": (32, "int"),
              "num_attention_heads": (32, "int"), "num_key_value_heads": (None, "int?"),
              "max_position_embeddings": (2048, "int"), "attention_bias": (False, "bool"),
              "mlp_bias": (False, "bool"), "head_dim": (None, "int?")},
    "mistral": {**_LLAMA_LIKE, "vocab_size": (32000, "int"), "hidden_size": (4096, "int"),
                "intermediate_size": (14336, "int"), "num_hidden_layers": (32, "int"),
                "num_attention_heads": (32, "int"), "num_key_value_heads": (8, "int"),
                "head_dim": (None, "int?"), "max_position_embeddings": (131072, "int"),
                "sliding_window": (4096, "int?")},
    "mixtral": {**_LLAMA_LIKE, "vocab_size": (32000, "int"), "hidden_size": (4096, "int"),
                "intermediate_size": (14336, "int"), "num_hidden_layers": (32, "int"),
                "num_attention_heads": (32, "int"), "num_key_value_heads": (8, "int"),
                "head_dim": (None, "int?"), "max_position_embeddings": (131072, "int"),
                "rms_norm_eps": (1e-5, "float"), "sliding_window": (None, "int?"),
                "num_experts_per_tok": (2, "int"), "num_local_experts": (8, "int")},
    "qwen2": {**_LLAMA_LIKE, "vocab_size": (151936, "int"), "hidden_size": (4096, "int"),
              "intermediate_size": (22016, "int"), "num_hidden_layers": (32, "int"),
              "num_attention_heads": (32, "int"), "num_key_value_heads": (32, "int?"),
              "head_dim": (_DERIVED, "int"), "max_position_embeddings": (32768, "int"),
              "use_sliding_window": (False, "bool"), "sliding_window": (4096, "int?"),
              "max_window_layers": (28, "int"), "layer_types": (None, "list?")},
    "qwen3": {**_LLAMA_LIKE, "vocab_size": (151936, "int"), "hidden_size": (4096, "int"),
              "intermediate_size": (22016, "int"), "num_hidden_layers": (32, "int"),
              "num_attention_heads": (32, "int"), "num_key_value_heads": (32, "int?"),
              "head_dim": (128, "int"), "max_position_embeddings": (32768, "int"),
              "attention_bias": (False, "bool"), "use_sliding_window": (False, "bool"),
              "sliding_window": (4096, "int?"), "max_window_layers": (28, "int"),
              "layer_types": (None, "list?")},
    "qwen3_moe": {**_LLAMA_LIKE, "vocab_size": (151936, "int"), "hidden_size": (2048, "int"),
                  "intermediate_size": (6144, "int"), "num_hidden_layers": (24, "int"),
                  "num_attention_heads": (32, "int"), "num_key_value_heads": (4, "int"),
                  "head_dim": (_DERIVED, "int"), "max_position_embeddings": (32768, "int"),
                  "attention_bias": (False, "bool"), "use_sliding_window": (False, "bool"),
                  "sliding_window": (4096, "int?"), "decoder_sparse_step": (1, "int"),
                  "moe_intermediate_size": (768, "int"), "num_experts_per_tok": (8, "int"),
                  "num_experts": (128, "int"), "norm_topk_prob": (False, "bool"),
                  "mlp_only_layers": (None, "list?")},
    "gemma2": {"vocab_size": (256000, "int"), "hidden_size": (2304, "int"), "intermediate_size": (9216, "int"),
               "num_hidden_layers": (26, "int"), "num_attention_heads": (8, "int"),
               "num_key_value_heads": (4, "int"), "head_dim": (256, "int"),
               "hidden_activation": ("gelu_pytorch_tanh", "str"), "max_position_embeddings": (8192, "int"),
               "rms_norm_eps": (1e-6, "float"), "tie_word_embeddings": (True, "bool"),
               "rope_parameters": (None, "dict?"), "attention_bias": (False, "bool"),
               "query_pre_attn_scalar": (256, "float"), "sliding_window": (4096, "int?"),
               "layer_types": (None, "list?"), "final_logit_softcapping": (30.0, "float?"),
               "attn_logit_softcapping": (50.0, "float?"), "use_bidirectional_attention": (None, "bool?")},
    "phi3": {**_LLAMA_LIKE, "vocab_size": (32064, "int"), "hidden_size": (3072, "int"),
             "intermediate_size": (8192, "int"), "num_hidden_layers": (32, "int"),
             "num_attention_heads": (32, "int"), "num_key_value_heads": (None, "int?"),
             "head_dim": (_DERIVED, "int"), "max_position_embeddings": (4096, "int"),
             "original_max_position_embeddings": (4096, "int"), "rms_norm_eps": (1e-5, "float"),
             "sliding_window": (None, "int?")},
    "gpt2": {"vocab_size": (50257, "int"), "n_positions": (1024, "int"), "n_embd": (768, "int"),
             "n_layer": (12, "int"), "n_head": (12, "int"), "n_inner": (None, "int?"),
             "activation_function": ("gelu_new", "str"), "layer_norm_epsilon": (1e-5, "float"),
             "scale_attn_weights": (True, "bool"), "scale_attn_by_inverse_layer_idx": (False, "bool"),
             "add_cross_attention": (False, "bool"), "tie_word_embeddings": (True, "bool")},
    "deepseek_v3": {**_LLAMA_LIKE, "vocab_size": (129280, "int"), "hidden_size": (7168, "int"),
                    "intermediate_size": (18432, "int"), "moe_intermediate_size": (2048, "int"),
                    "num_hidden_layers": (61, "int"), "num_attention_heads": (128, "int"),
                    "num_key_value_heads": (128, "int?"), "n_shared_experts": (1, "int"),
                    "n_routed_experts": (256, "int"), "routed_scaling_factor": (2.5, "float"),
                    "kv_lora_rank": (512, "int"), "q_lora_rank": (1536, "int?"),
                    "qk_rope_head_dim": (64, "int"), "v_head_dim": (128, "int?"),
                    "qk_nope_head_dim": (128, "int"), "n_group": (8, "int?"), "topk_group": (4, "int?"),
                    "num_experts_per_tok": (8, "int?"), "first_k_dense_replace": (3, "int?"),
                    "norm_topk_prob": (True, "bool?"), "max_position_embeddings": (4096, "int"),
                    "rope_interleave": (True, "bool?"), "attention_bias": (False, "bool")},
    "gemma3_text": {"vocab_size": (262208, "int"), "hidden_size": (2304, "int"), "intermediate_size": (9216, "int"),
                    "num_hidden_layers": (26, "int"), "num_attention_heads": (8, "int"),
                    "num_key_value_heads": (4, "int"), "head_dim": (256, "int"),
                    "hidden_activation": ("gelu_pytorch_tanh", "str"), "max_position_embeddings": (131072, "int"),
                    "rms_norm_eps": (1e-6, "float"), "tie_word_embeddings": (True, "bool"),
                    "rope_parameters": (None, "dict?"), "attention_bias": (False, "bool"),
                    "query_pre_attn_scalar": (256, "float"), "sliding_window": (4096, "int?"),
                    "layer_types": (None, "list?"), "final_logit_softcapping": (None, "float?"),
                    "attn_logit_softcapping": (None, "float?"), "use_bidirectional_attention": (False, "bool?")},
    "llama4_text": {"vocab_size": (202048, "int"), "hidden_size": (5120, "int"), "intermediate_size": (8192, "int"),
                    "intermediate_size_mlp": (16384, "int"), "num_hidden_layers": (48, "int"),
                    "num_attention_heads": (40, "int"), "num_key_value_heads": (8, "int"), "head_dim": (128, "int"),
                    "hidden_act": ("silu", "str"), "max_position_embeddings": (131072, "int"),
                    "rms_norm_eps": (1e-5, "float"), "tie_word_embeddings": (False, "bool"),
                    "num_experts_per_tok": (1, "int"), "num_local_experts": (16, "int"), "moe_layers": (None, "list?"),
                    "interleave_moe_layer_step": (1, "int"), "use_qk_norm": (True, "bool"),
                    "rope_parameters": (None, "dict?"), "no_rope_layers": (None, "list?"),
                    "no_rope_layer_interval": (4, "int"), "attention_chunk_size": (8192, "int?"),
                    "layer_types": (None, "list?"), "attn_temperature_tuning": (True, "bool"),
                    "floor_scale": (8192, "int"), "attn_scale": (0.1, "float"), "attention_bias": (False, "bool")},
    "gpt_oss": {"num_hidden_layers": (36, "int"), "num_local_experts": (128, "int"), "vocab_size": (201088, "int"),
                "hidden_size": (2880, "int"), "intermediate_size": (2880, "int"), "head_dim": (64, "int"),
                "num_attention_heads": (64, "int"), "num_key_value_heads": (8, "int"), "sliding_window": (128, "int?"),
                "tie_word_embeddings": (False, "bool"), "hidden_act": ("silu", "str"),
                "max_position_embeddings": (131072, "int"), "rms_norm_eps": (1e-5, "float"),
                "rope_parameters": (None, "dict?"), "num_experts_per_tok": (4, "int"), "swiglu_alpha": (1.702, "float"),
                "swiglu_limit": (7.0, "float"), "layer_types": (None, "list?"), "attention_bias": (True, "bool")},
    "qwen3_next": {**_LLAMA_LIKE, "vocab_size": (151936, "int"), "hidden_size": (2048, "int"),
                   "intermediate_size": (5632, "int"), "num_hidden_layers": (48, "int"),
                   "num_attention_heads": (16, "int"), "num_key_value_heads": (2, "int"),
                   "max_position_embeddings": (32768, "int"), "attention_bias": (False, "bool"),
                   "head_dim": (256, "int"), "linear_conv_kernel_dim": (4, "int"), "linear_key_head_dim": (128, "int"),
                   "linear_value_head_dim": (128, "int"), "linear_num_key_heads": (16, "int"),
                   "linear_num_value_heads": (32, "int"), "decoder_sparse_step": (1, "int"),
                   "moe_intermediate_size": (512, "int"), "shared_expert_intermediate_size": (512, "int"),
                   "num_experts_per_tok": (10, "int"), "num_experts": (512, "int"), "norm_topk_prob": (True, "bool"),
                   "mlp_only_layers": (None, "list?"), "layer_types": (None, "list?")},
    "qwen2_moe": {**_LLAMA_LIKE, "vocab_size": (151936, "int"), "hidden_size": (2048, "int"),
                  "intermediate_size": (5632, "int"), "num_hidden_layers": (24, "int"),
                  "num_attention_heads": (16, "int"), "num_key_value_heads": (16, "int?"),
                  "head_dim": (_DERIVED, "int"), "max_position_embeddings": (32768, "int"),
                  "use_sliding_window": (False, "bool"), "sliding_window": (4096, "int?"),
                  "max_window_layers": (28, "int"), "decoder_sparse_step": (1, "int"),
                  "moe_intermediate_size": (1408, "int"), "shared_expert_intermediate_size": (5632, "int"),
                  "num_experts_per_tok": (4, "int"), "num_experts": (60, "int"), "norm_topk_prob": (False, "bool"),
                  "mlp_only_layers": (None, "list?"), "qkv_bias": (True, "bool"), "layer_types": (None, "list?")},
    "granite": {**_LLAMA_LIKE, "vocab_size": (32000, "int"), "hidden_size": (4096, "int"),
                "intermediate_size": (11008, "int"), "num_hidden_layers": (32, "int"),
                "num_attention_heads": (32, "int"), "num_key_value_heads": (None, "int?"),
                "head_dim": (_DERIVED, "int"), "max_position_embeddings": (2048, "int"),
                "attention_bias": (False, "bool"), "mlp_bias": (False, "bool"),
                "embedding_multiplier": (1.0, "float"), "logits_scaling": (1.0, "float"),
                "residual_multiplier": (1.0, "float"), "attention_multiplier": (1.0, "float")},
    "glm4_moe": {"vocab_size": (151552, "int"), "hidden_size": (4096, "int"), "intermediate_size": (10944, "int"),
                 "num_hidden_layers": (46, "int"), "num_attention_heads": (96, "int"),
                 "num_key_value_heads": (8, "int"), "head_dim": (_DERIVED, "int"), "hidden_act": ("silu", "str"),
                 "max_position_embeddings": (131072, "int"), "rms_norm_eps": (1e-5, "float"),
                 "tie_word_embeddings": (False, "bool"), "rope_parameters": (None, "dict?"),
                 "attention_bias": (False, "bool"), "moe_intermediate_size": (1408, "int"),
                 "num_experts_per_tok": (8, "int"), "n_shared_experts": (1, "int"), "n_routed_experts": (128, "int"),
                 "routed_scaling_factor": (1.0, "float"), "n_group": (1, "int"), "topk_group": (1, "int"),
                 "first_k_dense_replace": (1, "int"), "norm_topk_prob": (True, "bool"), "use_qk_norm": (False, "bool")},
    "gemma3": {"text_config": (None, "dict?"), "vision_config": (None, "dict?"), "tie_word_embeddings": (True, "bool?")},
    "llama4": {"text_config": (None, "dict?"), "vision_config": (None, "dict?"), "tie_word_embeddings": (False, "bool")},
    "mistral3": {"text_config": (None, "dict?"), "vision_config": (None, "dict?"), "tie_word_embeddings": (True, "bool"),
                 "multimodal_projector_bias": (False, "bool"), "spatial_merge_size": (2, "int")},
}
#: ``text_config`` transformers builds when a nested config.json gives none (``sub_configs_defaults``'
#: ``init_kwargs``; for gemma3 and llama4 the text class's own defaults).
HF_TEXT_CONFIG_DEFAULTS = {
    "mistral3": {"model_type": "mistral", "head_dim": 128, "hidden_act": "silu", "hidden_size": 5120,
                 "intermediate_size": 32768, "max_position_embeddings": 131072, "num_attention_heads": 32,
                 "num_hidden_layers": 40, "num_key_value_heads": 8, "rms_norm_eps": 1e-05, "rope_theta": 1e9,
                 "sliding_window": None, "vocab_size": 131072},
}
#: config.json keys transformers' ``attribute_map`` treats as the same setting: ``{type: {alias: key}}``.
HF_CONFIG_ALIASES = {
    "gpt2": {"hidden_size": "n_embd", "max_position_embeddings": "n_positions",
             "num_attention_heads": "n_head", "num_hidden_layers": "n_layer"},
    "mixtral": {"num_experts": "num_local_experts"},
    "qwen3_moe": {"num_local_experts": "num_experts"},  # transformers 5's to_dict() writes num_local_experts
    "deepseek_v3": {"num_local_experts": "n_routed_experts"},
    "glm4_moe": {"num_local_experts": "n_routed_experts"},
    "gpt_oss": {"num_experts": "num_local_experts"},
    # token ids of the image markers: read by no count here, listed so that both spellings are checked alike
    "gemma3": {"image_token_id": "image_token_index", "boi_token_id": "boi_token_index",
               "eoi_token_id": "eoi_token_index"},
    "llama4": {"image_token_id": "image_token_index", "boi_token_id": "boi_token_index",
               "eoi_token_id": "eoi_token_index"},
    "mistral3": {"image_token_id": "image_token_index"},
}
#: ``rope_theta`` when config.json gives none (``default_theta`` of the config class; 10,000 otherwise).
_HF_DEFAULT_THETA = {"mixtral": 1e6, "llama4_text": 5e5, "gpt_oss": 150000.0, "gemma3_text": 1e6}
#: RoPE transformers' class sets when config.json gives neither ``rope_scaling`` nor ``rope_parameters``.
_HF_DEFAULT_ROPE = {"gpt_oss": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0,
                                "truncate": False, "original_max_position_embeddings": 4096}}
#: ``partial_rotary_factor`` when config.json gives none (Qwen3NextConfig: 0.25).
_HF_DEFAULT_PARTIAL = {"qwen3_next": 0.25, "glm4_moe": 0.5}
_HF_CLASS = {"llama": "LlamaConfig", "mistral": "MistralConfig", "mixtral": "MixtralConfig",
             "qwen2": "Qwen2Config", "qwen3": "Qwen3Config", "qwen3_moe": "Qwen3MoeConfig",
             "gemma2": "Gemma2Config", "phi3": "Phi3Config", "gpt2": "GPT2Config",
             "deepseek_v3": "DeepseekV3Config", "gemma3_text": "Gemma3TextConfig", "llama4_text": "Llama4TextConfig",
             "gpt_oss": "GptOssConfig", "qwen3_next": "Qwen3NextConfig", "gemma3": "Gemma3Config",
             "llama4": "Llama4Config", "mistral3": "Mistral3Config", "glm4_moe": "Glm4MoeConfig",
             "qwen2_moe": "Qwen2MoeConfig", "granite": "GraniteConfig"}
_SIZE_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "head_dim", "max_position_embeddings", "n_positions", "n_embd", "n_layer",
              "n_head", "n_inner", "moe_intermediate_size", "num_local_experts", "num_experts_per_tok",
              "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
              "sliding_window", "decoder_sparse_step", "original_max_position_embeddings", "intermediate_size_mlp",
              "interleave_moe_layer_step", "no_rope_layer_interval", "attention_chunk_size", "linear_conv_kernel_dim",
              "linear_key_head_dim", "linear_value_head_dim", "linear_num_key_heads", "linear_num_value_heads",
              "shared_expert_intermediate_size", "spatial_merge_size")
_JSON_KINDS = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string",
               "list": "a list", "dict": "an object"}


def _json_kind_ok(value, kind: str) -> bool:
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "str":
        return isinstance(value, str)
    if kind == "list":
        return isinstance(value, (list, tuple))
    return isinstance(value, dict)


class _HFReader:
    """config.json values with transformers' defaults, type checks and aliases; remembers the defaults used."""

    def __init__(self, c: dict, mt: str):
        self.mt, self.table, self.defaulted = mt, HF_CONFIG_DEFAULTS[mt], []
        self.c = dict(c)
        for alias, key in HF_CONFIG_ALIASES.get(mt, {}).items():
            if alias in self.c:
                if key in self.c and self.c[key] != self.c[alias]:
                    raise ValueError(f"config.json (model_type={mt!r}) gives {alias}={self.c[alias]!r} and "
                                     f"{key}={self.c[key]!r}; transformers treats them as one setting, so they must agree")
                self.c[key] = self.c.pop(alias)

    def __contains__(self, key):
        return key in self.c

    def raw(self, key, default=None):
        return self.c.get(key, default)

    def __call__(self, key):
        default, kind = self.table[key]
        if key not in self.c:
            if default is not _DERIVED:
                self.defaulted.append(key)
            return default
        v = self.c[key]
        nullable = kind.endswith("?")
        base = kind.rstrip("?")
        if v is None:
            if nullable:
                return None
            raise ValueError(f"config.json {key}=None is not allowed for model_type={self.mt!r}: transformers' "
                             f"{_HF_CLASS[self.mt]} needs {_JSON_KINDS[base]}")
        if not _json_kind_ok(v, base):
            raise ValueError(f"config.json {key}={v!r} is not allowed for model_type={self.mt!r}: it must be "
                             f"{_JSON_KINDS[base]}{' or null' if nullable else ''}")
        if key in _SIZE_KEYS and not v > 0:
            raise ValueError(f"config.json {key}={v!r} is not allowed: it must be a positive integer")
        return v


def _hf_rope(r: _HFReader, mt: str, n_pos: int) -> tuple[float, dict | None, float]:
    """``(rope_theta, rope_scaling or None, partial_rotary_factor)`` as transformers 5.24's
    ``RotaryEmbeddingConfigMixin.convert_rope_params_to_dict`` / ``standardize_rope_params`` make them."""
    rs, rp = r.raw("rope_scaling"), r.raw("rope_parameters")
    for key, v in (("rope_scaling", rs), ("rope_parameters", rp)):
        if v is not None and not isinstance(v, dict):
            raise ValueError(f"config.json {key}={v!r} is not allowed: it must be an object or null")
    d = dict(rs or rp or _HF_DEFAULT_ROPE.get(mt, {}))
    if any(isinstance(v, dict) for v in d.values()):
        raise ValueError(f"config.json rope parameters {d!r} are nested per layer type; model_type={mt!r} "
                         "has one RoPE for every layer")
    theta = d.pop("rope_theta", None)
    if theta is None:
        if "rope_theta" not in r:
            r.defaulted.append("rope_theta")
        theta = r.raw("rope_theta", _HF_DEFAULT_THETA.get(mt, 10000.0))
    if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not math.isfinite(theta) or theta <= 0:
        raise ValueError(f"config.json rope_theta={theta!r} is not allowed: it must be a positive number")
    partial = d.pop("partial_rotary_factor", None)
    if partial is None:
        partial = r.raw("partial_rotary_factor", _HF_DEFAULT_PARTIAL.get(mt, 1.0))
    if isinstance(partial, bool) or not isinstance(partial, (int, float)) or not 0 < partial <= 1:
        raise ValueError(f"config.json partial_rotary_factor={partial!r} is not allowed: it must lie in (0, 1]")
    rope_type = d.get("rope_type", d.get("type", "default"))
    if mt == "phi3" and rope_type in ("su", "yarn"):
        rope_type = "longrope"  # Phi3Config.convert_rope_params_to_dict: backward-compatible names
    if rope_type == "default":
        return float(theta), None, float(partial)
    d["rope_type"] = rope_type
    if rope_type in ("llama3", "yarn", "longrope"):
        # standardize_rope_params: Phi-3's own original_max_position_embeddings field wins; other
        # types keep the dict's value, else max_position_embeddings
        if "original_max_position_embeddings" in r.table:
            d["original_max_position_embeddings"] = r("original_max_position_embeddings")
        else:
            d.setdefault("original_max_position_embeddings", n_pos)
    return float(theta), d, float(partial)


def _refuse(mt: str, key: str, value, why: str):
    raise ValueError(f"config.json {key}={value!r} is refused for model_type={mt!r}: {why}")


def config_from_hf(cls, c: dict, name):
    """Build ``cls`` (a :class:`~llm_dataflow.core.config.ModelConfig`) from a parsed Hugging Face
    ``config.json`` dict ``c``, named ``name`` (default: its ``_name_or_path`` or model type).
    :meth:`ModelConfig.from_hf` reads the file and calls this.

    Raises:
        ValueError: an unsupported ``model_type``, a key of the wrong kind, or a key this book
            refuses (each message names the key and its value).
    """
    mt = c.get("model_type")
    if mt not in SUPPORTED_MODEL_TYPES:
        raise ValueError(f"model_type={mt!r} is not supported; allowed: {', '.join(SUPPORTED_MODEL_TYPES)}")
    if name is not None and not isinstance(name, str):
        raise ValueError(f"name={name!r} is not allowed; give a string or None")
    r = _HFReader(c, mt)
    nm = name or (c.get("_name_or_path") if isinstance(c.get("_name_or_path"), str) else None) or mt
    if mt in NESTED_MODEL_TYPES:
        return _nested(cls, c, r, nm)
    unmodelled: dict = {}
    kw: dict = dict(name=nm, model_type=mt, source=f"config.json ({mt})")
    if mt == "gpt2":
        d, h = r("n_embd"), r("n_head")
        if r("add_cross_attention"):
            _refuse(mt, "add_cross_attention", True, "cross-attention adds weights a decoder-only model does not have")
        act = r("activation_function")
        if act != "gelu_new":
            unmodelled["activation_function"] = act
        if not r("scale_attn_weights"):
            unmodelled["scale_attn_weights"] = False
        if r("scale_attn_by_inverse_layer_idx"):
            unmodelled["scale_attn_by_inverse_layer_idx"] = True
        kw.update(n_layers=r("n_layer"), d_model=d, n_heads=h, n_kv_heads=h, head_dim=d // h,
                  d_ff=r("n_inner") or 4 * d, vocab_size=r("vocab_size"), tie_embeddings=r("tie_word_embeddings"),
                  max_position_embeddings=r("n_positions"), attention_bias=True, attention_out_bias=True,
                  mlp_bias=True, norm="layernorm", norm_eps=float(r("layer_norm_epsilon")), mlp="gelu",
                  position="learned")
        if d % h:
            raise ValueError(f"config.json n_embd={d} is not a multiple of n_head={h} (GPT-2 splits n_embd into heads)")
        return _finish(cls, kw, unmodelled, r)

    d, h = r("hidden_size"), r("num_attention_heads")
    if mt in ("llama", "gemma2", "gemma3_text") and d % h:  # LlamaConfig/Gemma2Config.validate_architecture
        raise ValueError(f"config.json hidden_size={d} is not a multiple of num_attention_heads={h}; "
                         f"transformers' {_HF_CLASS[mt]} refuses it")
    n = r("num_hidden_layers")
    kv = r("num_key_value_heads")
    kv = h if kv is None else kv
    hd = r("head_dim") if mt != "deepseek_v3" else None  # DeepseekV3Config overwrites head_dim (set below)
    if hd is None or hd is _DERIVED:
        hd = d // h
    n_pos = r("max_position_embeddings")
    if mt == "gemma3_text":
        theta, rope_scaling, partial = _gemma3_rope(r, n_pos, kw, unmodelled)
    else:
        theta, rope_scaling, partial = _hf_rope(r, mt, n_pos)
    if partial != 1.0 and (mt in ("phi3", "qwen3_next", "glm4_moe") or rope_scaling is not None):
        unmodelled["partial_rotary_factor"] = partial  # only phi3's and the scaled RoPE types read it
    kw.update(n_layers=n, d_model=d, n_heads=h, n_kv_heads=kv, head_dim=hd, d_ff=r("intermediate_size"),
              vocab_size=r("vocab_size"), tie_embeddings=r("tie_word_embeddings"), max_position_embeddings=n_pos,
              norm_eps=float(r("rms_norm_eps")), rope_theta=theta, rope_scaling=rope_scaling)
    gemma = mt in ("gemma2", "gemma3_text")
    act_key = "hidden_activation" if gemma else "hidden_act"
    act = r(act_key)
    if act != ("gelu_pytorch_tanh" if gemma else "silu") and not (not gemma and act == "swish"):
        unmodelled[act_key] = act  # ACT2FN["swish"] is SiLU too

    # attention and MLP biases, as each type's modelling code wires them
    if mt in ("llama", "qwen3", "qwen3_moe", "gemma2", "gemma3_text", "llama4_text", "gpt_oss", "qwen3_next",
              "granite"):
        kw["attention_bias"] = kw["attention_out_bias"] = r("attention_bias")
    elif mt == "qwen2_moe":   # Qwen2MoeAttention: q, k, v biases from qkv_bias, o_proj never
        kw["attention_bias"], kw["attention_out_bias"] = r("qkv_bias"), False
    elif mt == "qwen2":
        kw["attention_bias"], kw["attention_out_bias"] = True, False
    elif mt == "deepseek_v3":
        kw["attention_bias"] = kw["attention_out_bias"] = r("attention_bias")
    elif mt == "glm4_moe":   # Glm4MoeAttention: q, k, v biases from attention_bias, o_proj never
        kw["attention_bias"], kw["attention_out_bias"] = r("attention_bias"), False
    else:  # mistral, mixtral, phi3: no biases whatever the file says; vLLM's Llama code would read them
        for key in ("attention_bias", "mlp_bias"):
            if r.raw(key):
                _refuse(mt, key, r.raw(key), f"transformers' {_HF_CLASS[mt]} builds no biases and ignores it, "
                        "while vLLM reads it; remove it or fix model_type")
    if mt in ("llama", "granite"):
        kw["mlp_bias"] = r("mlp_bias")
    if mt == "granite":     # GraniteModel scales the embeddings, residuals and logits, and its attention
        for key in ("embedding_multiplier", "logits_scaling", "residual_multiplier"):   # scores by
            if r(key) != 1:                                                              # attention_multiplier,
                unmodelled[key] = r(key)                                                 # not 1/sqrt(head_dim)
        if r("attention_multiplier") != kw["head_dim"] ** -0.5:
            unmodelled["attention_multiplier"] = r("attention_multiplier")

    # attention windows
    lt_raw = r.raw("layer_types")
    sliding_lt = isinstance(lt_raw, (list, tuple)) and "sliding_attention" in lt_raw
    if mt in ("llama", "deepseek_v3", "glm4_moe", "granite"):
        if r.raw("sliding_window") is not None:
            _refuse(mt, "sliding_window", r.raw("sliding_window"),
                    f"transformers' {_HF_CLASS[mt]} ignores it (every layer attends to the whole context)")
    if mt in ("llama", "deepseek_v3", "mistral", "mixtral", "phi3", "glm4_moe", "granite") and sliding_lt:
        _refuse(mt, "layer_types", lt_raw, f"transformers' {_HF_CLASS[mt]} ignores per-layer types")
    if mt in ("mistral", "mixtral", "phi3"):
        kw["sliding_window"] = r("sliding_window")
    elif mt in ("qwen2", "qwen3"):
        sw = r("sliding_window") if r("use_sliding_window") else None
        lt = r("layer_types")
        mwl = r("max_window_layers")
        if mwl < 0:
            raise ValueError(f"config.json max_window_layers={mwl} is not allowed: it must be >= 0")
        if lt is None:
            lt = ["sliding_attention" if sw is not None and i >= mwl else "full_attention" for i in range(n)]
        if sw is None:  # a sliding layer without a window attends to everything
            lt = None
        kw.update(sliding_window=sw, layer_types=None if lt is None else tuple(lt))
    elif mt == "qwen2_moe":   # Qwen2MoeConfig: odd layers below max_window_layers slide when use_sliding_window
        lt = _layer_list(r, "layer_types", n, ("sliding_attention", "full_attention"))
        if r("use_sliding_window"):
            sw, mwl = r("sliding_window"), r("max_window_layers")
            lt = lt or ["sliding_attention" if (i + 1) % 2 and i < mwl else "full_attention" for i in range(n)]
            kw.update(sliding_window=sw, layer_types=None if sw is None else tuple(lt))
        else:   # type-checked only: Qwen2MoeConfig writes 0 here without use_sliding_window
            if r.raw("sliding_window") is not None and not isinstance(r.raw("sliding_window"), int):
                r("sliding_window")
            if lt is not None and "sliding_attention" in lt:
                _refuse(mt, "layer_types", lt, "transformers' Qwen2MoeConfig sets sliding_window to 0 without "
                        "use_sliding_window; give use_sliding_window or full layers")
    elif mt == "qwen3_moe":
        if r("use_sliding_window"):
            for key in ("max_window_layers", "layer_types"):
                if key in r:
                    _refuse(mt, key, r.raw(key), "transformers' Qwen3MoeConfig ignores it and slides every layer, "
                            "Qwen2-style readers slide only some layers; remove it or use_sliding_window")
            kw["sliding_window"] = r("sliding_window")
        else:
            r("sliding_window")  # type-checked, unused: transformers sets it to None
    elif mt == "gemma2":
        sw = r("sliding_window")
        lt = r("layer_types") or ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n)]
        kw.update(sliding_window=sw, layer_types=None if sw is None else tuple(lt))

    elif mt in ("gemma3_text", "gpt_oss", "llama4_text", "qwen3_next"):
        _family_layers(r, mt, n, kw)

    if mt in ("qwen3", "qwen3_moe", "gemma3_text", "qwen3_next"):
        kw["qk_norm"] = True
    if mt == "glm4_moe":
        kw["qk_norm"] = r("use_qk_norm")
        _glm4_moe(r, n, kw, unmodelled)
    if gemma:
        kw.update(norms_per_layer=4, mlp="geglu")
        for key in ("attn_logit_softcapping", "final_logit_softcapping"):
            if r(key) is not None:
                unmodelled[key] = r(key)
        if r("query_pre_attn_scalar") != hd:  # scores scaled by query_pre_attn_scalar**-0.5, not head_dim**-0.5
            unmodelled["query_pre_attn_scalar"] = r("query_pre_attn_scalar")
        if r("use_bidirectional_attention"):
            if mt == "gemma3_text":  # Gemma3TextConfig then halves sliding_window: an encoder setting
                _refuse(mt, "use_bidirectional_attention", True, "bidirectional attention makes an encoder "
                        "(EmbeddingGemma), not a decoder with a KV cache")
            unmodelled["use_bidirectional_attention"] = True
    if mt == "mixtral":
        kw.update(n_routed_experts=r("num_local_experts"), n_experts_per_token=r("num_experts_per_tok"),
                  moe_d_ff=kw["d_ff"])
    if mt in ("llama4_text", "gpt_oss", "qwen3_next", "qwen2_moe"):
        _family_moe(r, mt, n, kw, unmodelled)
    if mt == "qwen3_moe":
        step, only = r("decoder_sparse_step"), r("mlp_only_layers") or []
        if not all(isinstance(i, int) and not isinstance(i, bool) for i in only):
            raise ValueError(f"config.json mlp_only_layers={only!r} is not allowed: it must list layer indices")
        E = r("num_experts")
        if E > 0:  # modeling_qwen3_moe: MoE where layer not in mlp_only_layers and (layer + 1) % step == 0
            kw.update(n_routed_experts=E, n_experts_per_token=r("num_experts_per_tok"),
                      moe_d_ff=r("moe_intermediate_size"), norm_topk_prob=r("norm_topk_prob"),
                      dense_layers=tuple(i for i in range(n) if i in set(only) or (i + 1) % step))
    if mt == "deepseek_v3":
        if r.raw("moe_layer_freq", 1) != 1:
            _refuse(mt, "moe_layer_freq", r.raw("moe_layer_freq"), "transformers' DeepseekV3Config ignores it "
                    "(every layer from first_k_dense_replace on is MoE), DeepSeek's own code honours it")
        first = r("first_k_dense_replace")
        if first is None:
            raise ValueError("config.json first_k_dense_replace=None is not allowed for model_type='deepseek_v3': "
                             "transformers compares layer indices with it")
        k = r("num_experts_per_tok")
        if k is None:
            raise ValueError("config.json num_experts_per_tok=None is not allowed for model_type='deepseek_v3'")
        v_hd = r("v_head_dim")
        if v_hd is None:
            raise ValueError("config.json v_head_dim=None is not allowed for model_type='deepseek_v3'")
        kw.update(n_routed_experts=r("n_routed_experts"), n_experts_per_token=k,
                  n_shared_experts=r("n_shared_experts"), moe_d_ff=r("moe_intermediate_size"),
                  dense_layers=tuple(range(min(first, n))), router_bias=True, kv_lora_rank=r("kv_lora_rank"),
                  q_lora_rank=r("q_lora_rank"), qk_rope_head_dim=r("qk_rope_head_dim"),
                  qk_nope_head_dim=r("qk_nope_head_dim"), v_head_dim=v_hd,
                  norm_topk_prob=bool(r("norm_topk_prob")))
        kw["head_dim"] = kw["qk_nope_head_dim"] + kw["qk_rope_head_dim"]
        if r("routed_scaling_factor") != 1:
            unmodelled["routed_scaling_factor"] = r("routed_scaling_factor")
        ng, tg = r("n_group"), r("topk_group")
        if ng is not None and ng > 1:
            unmodelled.update(n_group=ng, topk_group=tg)
        if r("rope_interleave"):
            unmodelled["rope_interleave"] = True
    return _finish(cls, kw, unmodelled, r)


def _finish(cls, kw: dict, unmodelled: dict, r: _HFReader):
    kw["unmodelled"] = unmodelled or None
    kw["hf_defaulted"] = tuple(sorted(set(r.defaulted)))
    if r.defaulted:
        kw["notes"] = (f"config.json omits {', '.join(sorted(set(r.defaulted)))}: defaults of transformers' "
                       f"{_HF_CLASS[r.mt]} used")
    try:
        return cls(**kw)
    except ValueError as err:
        raise ValueError(f"config.json (model_type={r.mt!r}) gives an invalid model: {err}") from None


def _layer_list(r: _HFReader, key: str, n: int, allowed) -> list | None:
    """config.json's per-layer list ``key`` (``None`` when absent), each entry in ``allowed``."""
    v = r(key)
    if v is None:
        return None
    if len(v) != n:
        raise ValueError(f"config.json {key} has {len(v)} entries; it must have num_hidden_layers={n}")
    bad = [x for x in v if isinstance(x, bool) or x not in allowed]
    if bad:
        raise ValueError(f"config.json {key} contains {bad[0]!r}; allowed: {', '.join(map(repr, allowed))}")
    return list(v)


def _int_kwarg(r: _HFReader, key: str, default: int) -> int:
    """A key transformers reads from ``**kwargs`` (not a class field), e.g. ``sliding_window_pattern``."""
    v = r.raw(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"config.json {key}={v!r} is not allowed: it must be a positive integer")
    return v


def _family_layers(r: _HFReader, mt: str, n: int, kw: dict) -> None:
    """Per-layer attention of gemma3_text, gpt_oss, llama4_text and qwen3_next, as each config
    class's ``__post_init__`` fills ``layer_types`` when config.json gives none."""
    S, F, C, LIN = "sliding_attention", "full_attention", "chunked_attention", "linear_attention"
    if mt in ("gemma3_text", "gpt_oss"):
        sw = r("sliding_window")
        lt = _layer_list(r, "layer_types", n, (S, F))
        if lt is None:  # Gemma3TextConfig: sliding_window_pattern (default 6); GptOssConfig: every other layer
            every = _int_kwarg(r, "sliding_window_pattern", 6) if mt == "gemma3_text" else 2
            lt = [S if (i + 1) % every else F for i in range(n)]
        kw.update(sliding_window=sw, layer_types=None if sw is None else tuple(lt))
    elif mt == "llama4_text":
        chunk = r("attention_chunk_size")
        rope = r("no_rope_layers") or [int((i + 1) % r("no_rope_layer_interval") != 0) for i in range(n)]
        if len(rope) != n or any(x not in (0, 1) or isinstance(x, bool) for x in rope):
            raise ValueError(f"config.json no_rope_layers={rope!r} is not allowed: give 1 (RoPE) or 0 (NoPE) "
                             f"for each of the num_hidden_layers={n} layers")
        lt = _layer_list(r, "layer_types", n, (F, C)) or [C if x and chunk is not None else F for x in rope]
        kw.update(attention_chunk_size=chunk, layer_types=tuple(lt),
                  nope_layers=tuple(i for i in range(n) if not rope[i]))
    else:  # qwen3_next: Gated DeltaNet layers, one full-attention layer every full_attention_interval
        lt = _layer_list(r, "layer_types", n, (LIN, F))
        if lt is None:
            every = _int_kwarg(r, "full_attention_interval", 4)
            lt = [LIN if (i + 1) % every else F for i in range(n)]
        kw.update(layer_types=tuple(lt), **{k: r(k) for k in (
            "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
            "linear_conv_kernel_dim")})
        kw["attn_output_gate"] = True  # Qwen3NextAttention: q_proj is 2·H·d_h wide (query and its gate)


def _layer_indices(r: _HFReader, key: str, n: int) -> list:
    v = r(key) or []
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in v):
        raise ValueError(f"config.json {key}={v!r} is not allowed: it must list layer indices")
    return v


def _family_moe(r: _HFReader, mt: str, n: int, kw: dict, unmodelled: dict) -> None:
    """The MLP blocks of llama4_text, gpt_oss and qwen3_next, as transformers' modelling code builds them."""
    if mt == "llama4_text":  # Llama4TextMoe: routed experts of intermediate_size + one shared expert of the same
        step = r("interleave_moe_layer_step")
        moe = _layer_indices(r, "moe_layers", n) if r("moe_layers") is not None else list(range(step - 1, n, step))
        F = r("intermediate_size")
        kw.update(d_ff=r("intermediate_size_mlp"), n_routed_experts=r("num_local_experts"),
                  n_experts_per_token=r("num_experts_per_tok"), n_shared_experts=1, moe_d_ff=F,
                  shared_expert_d_ff=F, norm_topk_prob=False,
                  dense_layers=tuple(i for i in range(n) if i not in set(moe)))
        for key in ("use_qk_norm", "attn_temperature_tuning"):  # weight-free L2 q/k norm; scaled NoPE queries
            if r(key):
                unmodelled[key] = True
    elif mt == "gpt_oss":   # every layer MoE; biases on router and experts; clamped SwiGLU
        kw.update(n_routed_experts=r("num_local_experts"), n_experts_per_token=r("num_experts_per_tok"),
                  moe_d_ff=kw["d_ff"], mlp_bias=True, router_linear_bias=True, attention_sinks=True,
                  swiglu_limit=float(r("swiglu_limit")), swiglu_alpha=float(r("swiglu_alpha")))
    else:   # qwen3_next and qwen2_moe: Qwen-MoE's layer rule, a gated shared expert
        step, only = r("decoder_sparse_step"), set(_layer_indices(r, "mlp_only_layers", n))
        E = r("num_experts")
        if E > 0:
            kw.update(n_routed_experts=E, n_experts_per_token=r("num_experts_per_tok"),
                      moe_d_ff=r("moe_intermediate_size"), norm_topk_prob=r("norm_topk_prob"), n_shared_experts=1,
                      shared_expert_d_ff=r("shared_expert_intermediate_size"), shared_expert_gate=True,
                      dense_layers=tuple(i for i in range(n) if i in only or (i + 1) % step))


def _glm4_moe(r: _HFReader, n: int, kw: dict, unmodelled: dict) -> None:
    """GLM-4.5/4.6 (transformers' ``modeling_glm4_moe.py``): dense ``Glm4MoeMLP`` layers below
    ``first_k_dense_replace``, then ``Glm4MoeMoE``: ``n_routed_experts`` experts of
    ``moe_intermediate_size`` behind a sigmoid router with an ``e_score_correction_bias``, and one
    shared expert of ``n_shared_experts × moe_intermediate_size``.  The multi-token-prediction
    layers (``num_nextn_predict_layers``) are not built by transformers, nor loaded by vLLM unless
    it speculates with them: not counted."""
    first = r("first_k_dense_replace")
    kw.update(n_routed_experts=r("n_routed_experts"), n_experts_per_token=r("num_experts_per_tok"),
              n_shared_experts=r("n_shared_experts"), moe_d_ff=r("moe_intermediate_size"),
              dense_layers=tuple(range(min(first, n))), router_bias=True, norm_topk_prob=r("norm_topk_prob"))
    if r("routed_scaling_factor") != 1:
        unmodelled["routed_scaling_factor"] = r("routed_scaling_factor")
    ng, tg = r("n_group"), r("topk_group")
    if ng > 1:
        unmodelled.update(n_group=ng, topk_group=tg)


def _gemma3_rope(r: _HFReader, n_pos: int, kw: dict, unmodelled: dict) -> tuple:
    """Gemma3TextConfig.convert_rope_params_to_dict: ``rope_parameters`` nested per layer type
    (transformers 5's to_dict()) or the hub's flat keys — ``rope_theta`` and ``rope_scaling`` for
    the full layers, ``rope_local_base_freq`` for the sliding ones.  Sets ``kw["rope_local_theta"]``."""
    rp = r.raw("rope_parameters")
    if rp is not None and not (isinstance(rp, dict) and set(rp) <= {"full_attention", "sliding_attention"}
                               and all(isinstance(v, dict) or v is None for v in rp.values())):
        raise ValueError(f"config.json rope_parameters={rp!r} is not allowed for model_type='gemma3_text': "
                         "give it per layer type ({'full_attention': {...}, 'sliding_attention': {...}}) or null")
    rp = rp or {}
    full, local = dict(rp.get("full_attention") or {}), dict(rp.get("sliding_attention") or {})
    rs = r.raw("rope_scaling")
    if rs is not None and not isinstance(rs, dict):
        raise ValueError(f"config.json rope_scaling={rs!r} is not allowed: it must be an object or null")
    full.update(rs or {})
    if "rope_theta" not in full:
        if "rope_theta" not in r:
            r.defaulted.append("rope_theta")
        full["rope_theta"] = r.raw("rope_theta", _HF_DEFAULT_THETA["gemma3_text"])
    local.setdefault("rope_theta", r.raw("rope_local_base_freq", 10000.0))
    theta, scaling, partial = _hf_rope(_HFReader({"rope_parameters": full}, "gemma3_text"), "gemma3_text", n_pos)
    ltheta, lscaling, _ = _hf_rope(_HFReader({"rope_parameters": local}, "gemma3_text"), "gemma3_text", n_pos)
    kw["rope_local_theta"] = ltheta
    if lscaling is not None:
        unmodelled["rope_parameters.sliding_attention"] = lscaling
    return theta, scaling, partial


def _nested(cls, c: dict, r: _HFReader, nm: str):
    """A multimodal config.json: the language model from ``text_config`` (its ``model_type``, else
    :data:`NESTED_MODEL_TYPES`'s; absent: :data:`HF_TEXT_CONFIG_DEFAULTS`), tied as the *outer*
    ``tie_word_embeddings`` says (transformers ties on the composite config's flag), and the
    vision tower + projector counted into ``vision_params``."""
    mt = r.mt
    text_mt, vision_mt = NESTED_MODEL_TYPES[mt]
    tc = r("text_config")
    if tc is None:
        tc = dict(HF_TEXT_CONFIG_DEFAULTS.get(mt, {"model_type": text_mt}))
    tmt = tc.get("model_type", text_mt)
    if tmt != text_mt:
        raise ValueError(f"config.json text_config.model_type={tmt!r} is not allowed for model_type={mt!r}; "
                         f"allowed: {text_mt}")
    tie = r("tie_word_embeddings")
    text = config_from_hf(cls, {**tc, "model_type": tmt, "_name_or_path": nm,
                                **({} if tie is None else {"tie_word_embeddings": tie})}, None)
    vc = r("vision_config")
    if vc is not None and vc.get("model_type", vision_mt) != vision_mt:
        raise ValueError(f"config.json vision_config.model_type={vc['model_type']!r} is not allowed for "
                         f"model_type={mt!r}; allowed: {vision_mt}")
    vision = vision_param_count(vision_mt, {} if vc is None else vc, text.d_model, c)
    notes = [text.notes] if text.notes else []
    if r.defaulted:
        notes.append(f"config.json omits {', '.join(sorted(set(r.defaulted)))}: defaults of transformers' "
                     f"{_HF_CLASS[mt]} used")
    notes.append(f"vision tower and projector ({vision_mt}): {vision:,} parameters, not in the language model's count")
    return text.replace(vision_params=vision, source=f"config.json ({mt}: the language model of text_config)",
                        notes="; ".join(notes),
                        hf_defaulted=tuple(sorted({*(f"text_config.{k}" for k in text.hf_defaulted), *r.defaulted})))
