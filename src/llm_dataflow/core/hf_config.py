"""Reading a Hugging Face ``config.json`` the way transformers 5.24 does: each type's class
defaults (:data:`HF_CONFIG_DEFAULTS`, tested against transformers), key aliases, per-type
conventions for biases, windows and RoPE, and the keys refused by name.
:meth:`llm_dataflow.core.config.ModelConfig.from_hf` is the entry point; this module imports
nothing of the package (the config module imports it).
"""
from __future__ import annotations

import math

__all__ = ["HF_CONFIG_DEFAULTS", "HF_CONFIG_ALIASES", "SUPPORTED_MODEL_TYPES"]
# also public, for config (not re-exported by ``ldf``): config_from_hf

#: Hugging Face ``model_type`` values the book reads.
SUPPORTED_MODEL_TYPES = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe", "gemma2",
                         "phi3", "gpt2", "deepseek_v3")


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
}
#: config.json keys transformers' ``attribute_map`` treats as the same setting: ``{type: {alias: key}}``.
HF_CONFIG_ALIASES = {
    "gpt2": {"hidden_size": "n_embd", "max_position_embeddings": "n_positions",
             "num_attention_heads": "n_head", "num_hidden_layers": "n_layer"},
    "mixtral": {"num_experts": "num_local_experts"},
    "qwen3_moe": {"num_local_experts": "num_experts"},  # transformers 5's to_dict() writes num_local_experts
    "deepseek_v3": {"num_local_experts": "n_routed_experts"},
}
#: ``rope_theta`` when config.json gives none (``default_theta`` of the config class; 10,000 otherwise).
_HF_DEFAULT_THETA = {"mixtral": 1e6}
_HF_CLASS = {"llama": "LlamaConfig", "mistral": "MistralConfig", "mixtral": "MixtralConfig",
             "qwen2": "Qwen2Config", "qwen3": "Qwen3Config", "qwen3_moe": "Qwen3MoeConfig",
             "gemma2": "Gemma2Config", "phi3": "Phi3Config", "gpt2": "GPT2Config",
             "deepseek_v3": "DeepseekV3Config"}
_SIZE_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "head_dim", "max_position_embeddings", "n_positions", "n_embd", "n_layer",
              "n_head", "n_inner", "moe_intermediate_size", "num_local_experts", "num_experts_per_tok",
              "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim",
              "sliding_window", "decoder_sparse_step", "original_max_position_embeddings")
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
    d = dict(rs or rp or {})
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
        partial = r.raw("partial_rotary_factor", 1.0)
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
    if mt in ("llama", "gemma2") and d % h:  # LlamaConfig/Gemma2Config.validate_architecture
        raise ValueError(f"config.json hidden_size={d} is not a multiple of num_attention_heads={h}; "
                         f"transformers' {_HF_CLASS[mt]} refuses it")
    n = r("num_hidden_layers")
    kv = r("num_key_value_heads")
    kv = h if kv is None else kv
    hd = r("head_dim") if mt != "deepseek_v3" else None  # DeepseekV3Config overwrites head_dim (set below)
    if hd is None or hd is _DERIVED:
        hd = d // h
    n_pos = r("max_position_embeddings")
    theta, rope_scaling, partial = _hf_rope(r, mt, n_pos)
    if partial != 1.0 and (mt == "phi3" or rope_scaling is not None):
        unmodelled["partial_rotary_factor"] = partial  # only phi3's and the scaled RoPE types read it
    kw.update(n_layers=n, d_model=d, n_heads=h, n_kv_heads=kv, head_dim=hd, d_ff=r("intermediate_size"),
              vocab_size=r("vocab_size"), tie_embeddings=r("tie_word_embeddings"), max_position_embeddings=n_pos,
              norm_eps=float(r("rms_norm_eps")), rope_theta=theta, rope_scaling=rope_scaling)
    act_key = "hidden_activation" if mt == "gemma2" else "hidden_act"
    act = r(act_key)
    if act != ("gelu_pytorch_tanh" if mt == "gemma2" else "silu") and not (mt != "gemma2" and act == "swish"):
        unmodelled[act_key] = act  # ACT2FN["swish"] is SiLU too

    # attention and MLP biases, as each type's modelling code wires them
    if mt in ("llama", "qwen3", "qwen3_moe", "gemma2"):
        kw["attention_bias"] = kw["attention_out_bias"] = r("attention_bias")
    elif mt == "qwen2":
        kw["attention_bias"], kw["attention_out_bias"] = True, False
    elif mt == "deepseek_v3":
        kw["attention_bias"] = kw["attention_out_bias"] = r("attention_bias")
    else:  # mistral, mixtral, phi3: no biases whatever the file says; vLLM's Llama code would read them
        for key in ("attention_bias", "mlp_bias"):
            if r.raw(key):
                _refuse(mt, key, r.raw(key), f"transformers' {_HF_CLASS[mt]} builds no biases and ignores it, "
                        "while vLLM reads it; remove it or fix model_type")
    if mt == "llama":
        kw["mlp_bias"] = r("mlp_bias")

    # attention windows
    lt_raw = r.raw("layer_types")
    sliding_lt = isinstance(lt_raw, (list, tuple)) and "sliding_attention" in lt_raw
    if mt in ("llama", "deepseek_v3"):
        if r.raw("sliding_window") is not None:
            _refuse(mt, "sliding_window", r.raw("sliding_window"),
                    f"transformers' {_HF_CLASS[mt]} ignores it (every layer attends to the whole context)")
    if mt in ("llama", "deepseek_v3", "mistral", "mixtral", "phi3") and sliding_lt:
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

    if mt in ("qwen3", "qwen3_moe"):
        kw["qk_norm"] = True
    if mt == "gemma2":
        kw.update(norms_per_layer=4, mlp="geglu")
        for key in ("attn_logit_softcapping", "final_logit_softcapping"):
            if r(key) is not None:
                unmodelled[key] = r(key)
        if r("query_pre_attn_scalar") != hd:  # scores scaled by query_pre_attn_scalar**-0.5, not head_dim**-0.5
            unmodelled["query_pre_attn_scalar"] = r("query_pre_attn_scalar")
        if r("use_bidirectional_attention"):
            unmodelled["use_bidirectional_attention"] = True
    if mt == "mixtral":
        kw.update(n_routed_experts=r("num_local_experts"), n_experts_per_token=r("num_experts_per_tok"),
                  moe_d_ff=kw["d_ff"])
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
    if r.defaulted:
        kw["notes"] = (f"config.json omits {', '.join(sorted(set(r.defaulted)))}: defaults of transformers' "
                       f"{_HF_CLASS[r.mt]} used")
    try:
        return cls(**kw)
    except ValueError as err:
        raise ValueError(f"config.json (model_type={r.mt!r}) gives an invalid model: {err}") from None
