"""Parameters of the vision tower of a multimodal checkpoint (standard library only).

``plan`` sizes the language model of a Gemma 3, Llama 4 or Mistral 3 checkpoint (its
``text_config``); the vision encoder and the projector that maps image features into the
language model's width are stored in the same checkpoint and loaded by a serving engine too,
so :func:`vision_param_count` reports them separately (``ModelConfig.vision_params``).

The counts enumerate the weights of transformers 5.24's classes — ``SiglipVisionModel`` +
``Gemma3MultiModalProjector``, ``Llama4VisionModel`` + ``Llama4MultiModalProjector``,
``PixtralVisionModel`` + ``Mistral3MultiModalProjector`` — and are tested against them
(``tests/test_families.py``, meta-device models).  Units: parameters (elements).
"""
from __future__ import annotations

from .units import require_positive

__all__ = ["VISION_MODEL_TYPES", "VISION_CONFIG_DEFAULTS", "vision_param_count"]

#: ``{vision model_type: {vision_config key: default}}``: the class defaults of transformers 5.24's
#: ``SiglipVisionConfig``, ``Llama4VisionConfig`` and ``PixtralVisionConfig`` for the keys counted.
VISION_CONFIG_DEFAULTS = {
    "siglip_vision_model": {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
                            "num_channels": 3, "image_size": 224, "patch_size": 16, "vision_use_head": True},
    "llama4_vision_model": {"hidden_size": 768, "intermediate_size": 5632, "num_hidden_layers": 34, "num_channels": 3,
               "image_size": 448, "patch_size": 14, "vision_output_dim": 7680, "projector_input_dim": 4096,
               "projector_output_dim": 4096},
    "pixtral": {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24, "num_attention_heads": 16,
                "num_channels": 3, "patch_size": 16, "head_dim": None},
}
#: ``vision_config`` transformers' ``Mistral3Config`` builds when config.json gives none
#: (``sub_configs_defaults``' ``init_kwargs``; the other two use the class defaults).
_ABSENT = {"pixtral": {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24,
                       "num_attention_heads": 16, "num_channels": 3, "patch_size": 14, "head_dim": 64}}
VISION_MODEL_TYPES = tuple(VISION_CONFIG_DEFAULTS)


def _get(vc: dict, key: str, defaults: dict):
    v = vc.get(key, defaults[key])
    if key == "vision_use_head":
        if not isinstance(v, bool):
            raise ValueError(f"config.json vision_config.{key}={v!r} is not allowed: it must be true or false")
        return v
    if key == "head_dim" and v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"config.json vision_config.{key}={v!r} is not allowed: it must be a positive integer")
    return v


def vision_param_count(model_type: str, vision_config: dict, text_hidden_size: int, outer: dict | None = None) -> int:
    """Parameters of the vision tower and its projector (int).

    Args:
        model_type: the vision config's type — ``"siglip_vision_model"`` (Gemma 3),
            ``"llama4_vision_model"`` (Llama 4) or ``"pixtral"`` (Mistral 3).
        vision_config: config.json's ``vision_config`` (``{}`` when absent: transformers' defaults).
        text_hidden_size: D of the language model (the projector's output width).
        outer: the whole config.json (Mistral 3's projector reads ``spatial_merge_size``,
            ``multimodal_projector_bias`` and ``vision_feature_layer`` there).

    Per layer (D_v vision width, F_v its MLP width): SigLIP and Llama 4 — q, k, v, o with biases
    ``4·(D_v² + D_v)``, MLP ``2·D_v·F_v + F_v + D_v``, two LayerNorms ``4·D_v``; Pixtral — q, k, v,
    o without biases, a SwiGLU ``3·D_v·F_v``, two RMSNorms ``2·D_v``.

    Raises:
        ValueError: an unknown ``model_type``; a size that is not a positive integer, named.
    """
    if not isinstance(model_type, str) or model_type not in VISION_CONFIG_DEFAULTS:
        raise ValueError(f"model_type={model_type!r} is not allowed; allowed: {', '.join(VISION_MODEL_TYPES)}")
    if not isinstance(vision_config, dict):
        raise ValueError(f"vision_config={vision_config!r} is not allowed: it must be an object")
    require_positive("text_hidden_size", text_hidden_size)
    if outer is not None and not isinstance(outer, dict):
        raise ValueError(f"outer={outer!r} is not allowed: give the config.json dict or None")
    outer = outer or {}
    defaults = VISION_CONFIG_DEFAULTS[model_type]
    if not vision_config and model_type in _ABSENT:
        defaults = _ABSENT[model_type]
    g = {k: _get(vision_config, k, defaults) for k in defaults}
    D, F, L, C, P = (g[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_channels",
                                     "patch_size"))
    T = text_hidden_size
    if model_type == "siglip_vision_model":
        n = D * C * P * P + D + (g["image_size"] // P) ** 2 * D           # patch conv + bias, positions
        n += L * (4 * (D * D + D) + 2 * D * F + F + D + 4 * D) + 2 * D    # layers, post_layernorm
        if g["vision_use_head"]:   # attention-pooling head: probe, in/out proj, LayerNorm, MLP
            n += D + 3 * D * D + 3 * D + D * D + D + 2 * D + 2 * D * F + F + D
        return n + D * T + D      # Gemma3MultiModalProjector: [D_v, D] projection + RMSNorm(D_v)
    if model_type == "llama4_vision_model":
        n = D * C * P * P + D + ((g["image_size"] // P) ** 2 + 1) * D + 4 * D   # patch, class, positions, 2 LN
        n += L * (4 * (D * D + D) + 2 * D * F + F + D + 4 * D)
        n += g["projector_input_dim"] * F + g["projector_output_dim"] ** 2      # vision_adapter (pixel shuffle MLP)
        return n + g["vision_output_dim"] * T                                   # linear_1, no bias
    hd = g["head_dim"] or D // g["num_attention_heads"]
    HD = g["num_attention_heads"] * hd
    n = D * C * P * P + D + L * (2 * D + 4 * D * HD + 3 * D * F)   # patch_conv (no bias), ln_pre, layers
    merge = outer.get("spatial_merge_size", 2)
    layers = outer.get("vision_feature_layer", -1)
    bias = outer.get("multimodal_projector_bias", False)
    if isinstance(merge, bool) or not isinstance(merge, int) or merge < 1:
        raise ValueError(f"config.json spatial_merge_size={merge!r} is not allowed: it must be a positive integer")
    if not isinstance(bias, bool):
        raise ValueError(f"config.json multimodal_projector_bias={bias!r} is not allowed: it must be true or false")
    if isinstance(layers, bool) or not isinstance(layers, (int, list, tuple)) or layers == []:
        raise ValueError(f"config.json vision_feature_layer={layers!r} is not allowed: give a layer index or a list")
    k = 1 if isinstance(layers, int) else len(layers)
    # Mistral3MultiModalProjector: RMSNorm(D_v), patch merger [D_v, D_v·s²], linear_1 [D, k·D_v], linear_2 [D, D]
    return n + D + D * D * merge * merge + T * k * D + T * T + (2 * T if bias else 0)
