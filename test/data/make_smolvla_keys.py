"""Write ``smolvla_keys.json``: the keys and shapes of LeRobot's SmolVLA ``model.safetensors``.

Written from the published code and config, not from this package's model:

* huggingface/lerobot ``src/lerobot/policies/smolvla/smolvlm_with_expert.py``
  (``SmolVLMWithExpertModel``): ``vlm`` is ``SmolVLMForConditionalGeneration`` (``model`` +
  ``lm_head``) whose ``text_model.layers`` are sliced to the first ``num_vlm_layers``; the
  expert is ``AutoModel.from_config`` of a copy of the text config with
  ``hidden_size = int(960 * expert_width_multiplier)`` and
  ``intermediate_size = get_intermediate_size(hidden_size)``, ``num_hidden_layers`` the kept
  VLM layers, ``embed_tokens = None``; in cross-attention layers (``layer_idx %
  self_attn_every_n_layers != 0``) ``k_proj`` / ``v_proj`` are
  ``nn.Linear(vlm_kv_heads * head_dim, expert_kv_heads * head_dim, bias=attention_bias)``;
* ``src/lerobot/policies/smolvla/modeling_smolvla.py`` (``VLAFlowMatching``, saved under
  ``SmolVLAPolicy.model``, hence the ``model.`` prefix): ``state_proj``, ``action_in_proj``,
  ``action_out_proj``, ``action_time_mlp_in``, ``action_time_mlp_out``;
* ``src/lerobot/policies/smolvla/configuration_smolvla.py``: ``num_vlm_layers=16``,
  ``expert_width_multiplier=0.75``, ``self_attn_every_n_layers=2``, ``attention_mode=
  "cross_attn"``, ``num_expert_layers=-1``, ``max_state_dim=max_action_dim=32``;
* ``HuggingFaceTB/SmolVLM2-500M-Video-Instruct`` ``config.json`` (:data:`SMOLVLM2_CONFIG`,
  the fields that set shapes, as copied verbatim from the model card into a public test
  fixture); its ``vision_config`` leaves ``intermediate_size`` and ``num_hidden_layers`` at
  ``SmolVLMVisionConfig``'s defaults (3072, 12); ``tie_word_embeddings`` is false, so
  ``lm_head.weight`` is a tensor of its own in the file;
* transformers ``models/smolvlm/modeling_smolvlm.py`` (``SmolVLMVisionEmbeddings``: Conv2d
  patch embedding with bias and ``nn.Embedding(num_patches, hidden)``;
  ``SmolVLMVisionAttention`` q/k/v/out with bias; ``SmolVLMSimpleMLP.proj``:
  ``Linear(vision_hidden * scale_factor**2, text_hidden, bias=False)``) and
  ``models/llama/modeling_llama.py`` (no attention or MLP biases).

Cross-check (``CHECKPOINT``): the header of ``lerobot/smolvla_base``'s ``model.safetensors``
holds 500 tensors and 450,046,176 parameters (as listed, tensor by tensor, in a public
port's architecture notes for revision c83c3163); the manifest must match both.

Run: ``python test/data/make_smolvla_keys.py`` (writes ``test/data/smolvla_keys.json``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

LEROBOT_COMMIT = "7427f31801f944f5ec9ce53cda02862ce7d1638b"

SMOLVLM2_CONFIG = {
    "scale_factor": 4,
    "tie_word_embeddings": False,
    "text_config": {
        "head_dim": 64,
        "hidden_size": 960,
        "intermediate_size": 2560,
        "num_attention_heads": 15,
        "num_hidden_layers": 32,
        "num_key_value_heads": 5,
        "vocab_size": 49280,
    },
    "vision_config": {
        "hidden_size": 768,
        "image_size": 512,
        "num_attention_heads": 12,
        "patch_size": 16,
    },
}
"""Shape-setting fields of SmolVLM2-500M-Video-Instruct's ``config.json``."""
VISION_DEFAULTS = {"intermediate_size": 3072, "num_hidden_layers": 12}
"""``SmolVLMVisionConfig`` defaults the published ``vision_config`` does not override."""
SMOLVLA = {
    "num_vlm_layers": 16,
    "expert_width_multiplier": 0.75,
    "self_attn_every_n_layers": 2,
    "max_state_dim": 32,
    "max_action_dim": 32,
}
"""LeRobot ``SmolVLAConfig`` defaults (``lerobot/smolvla_base``)."""
CHECKPOINT = {
    "repository": "lerobot/smolvla_base",
    "revision": "c83c3163b8ca9b7e67c509fffd9121e66cb96205",
    "tensors": 500,
    "parameters": 450046176,
}

VLM = "model.vlm_with_expert.vlm"
VIS = f"{VLM}.model.vision_model"
TEXT = f"{VLM}.model.text_model"
EXP = "model.vlm_with_expert.lm_expert"


def get_intermediate_size(hidden_dim: int, ffn_dim_multiplier: int = 4, multiple_of: int = 256):
    """LeRobot's ``smolvlm_with_expert.get_intermediate_size``."""
    hidden_dim = int(2 * hidden_dim / 3)
    hidden_dim = int(ffn_dim_multiplier * hidden_dim)
    return multiple_of * ((hidden_dim + multiple_of - 1) // multiple_of)


def vision_keys() -> dict[str, list[int]]:
    """``SmolVLMVisionTransformer`` and ``SmolVLMConnector``."""
    v = {**VISION_DEFAULTS, **SMOLVLM2_CONFIG["vision_config"]}
    h, m, p = v["hidden_size"], v["intermediate_size"], v["patch_size"]
    keys = {
        f"{VIS}.embeddings.patch_embedding.weight": [h, 3, p, p],
        f"{VIS}.embeddings.patch_embedding.bias": [h],
        f"{VIS}.embeddings.position_embedding.weight": [(v["image_size"] // p) ** 2, h],
    }
    for i in range(v["num_hidden_layers"]):
        layer = f"{VIS}.encoder.layers.{i}"
        for proj in ("k_proj", "v_proj", "q_proj", "out_proj"):
            keys[f"{layer}.self_attn.{proj}.weight"] = [h, h]
            keys[f"{layer}.self_attn.{proj}.bias"] = [h]
        for norm in ("layer_norm1", "layer_norm2"):
            keys[f"{layer}.{norm}.weight"] = [h]
            keys[f"{layer}.{norm}.bias"] = [h]
        keys[f"{layer}.mlp.fc1.weight"] = [m, h]
        keys[f"{layer}.mlp.fc1.bias"] = [m]
        keys[f"{layer}.mlp.fc2.weight"] = [h, m]
        keys[f"{layer}.mlp.fc2.bias"] = [h]
    keys[f"{VIS}.post_layernorm.weight"] = [h]
    keys[f"{VIS}.post_layernorm.bias"] = [h]
    text_width = SMOLVLM2_CONFIG["text_config"]["hidden_size"]
    shuffle = SMOLVLM2_CONFIG["scale_factor"] ** 2
    keys[f"{VLM}.model.connector.modality_projection.proj.weight"] = [text_width, h * shuffle]
    return keys


def llama_layer_keys(
    prefix: str, width: int, mlp: int, depth: int, kv_in: dict[int, int]
) -> dict[str, list[int]]:
    """``LlamaDecoderLayer`` keys; ``kv_in[i]`` is layer i's ``k_proj`` / ``v_proj`` input."""
    t = SMOLVLM2_CONFIG["text_config"]
    q_dim = t["num_attention_heads"] * t["head_dim"]
    kv_dim = t["num_key_value_heads"] * t["head_dim"]
    keys: dict[str, list[int]] = {}
    for i in range(depth):
        layer = f"{prefix}.layers.{i}"
        keys[f"{layer}.self_attn.q_proj.weight"] = [q_dim, width]
        keys[f"{layer}.self_attn.k_proj.weight"] = [kv_dim, kv_in.get(i, width)]
        keys[f"{layer}.self_attn.v_proj.weight"] = [kv_dim, kv_in.get(i, width)]
        keys[f"{layer}.self_attn.o_proj.weight"] = [width, q_dim]
        keys[f"{layer}.mlp.gate_proj.weight"] = [mlp, width]
        keys[f"{layer}.mlp.up_proj.weight"] = [mlp, width]
        keys[f"{layer}.mlp.down_proj.weight"] = [width, mlp]
        keys[f"{layer}.input_layernorm.weight"] = [width]
        keys[f"{layer}.post_attention_layernorm.weight"] = [width]
    keys[f"{prefix}.norm.weight"] = [width]
    return keys


def file_keys() -> dict[str, list[int]]:
    """Every key of LeRobot's ``SmolVLAPolicy`` ``model.safetensors``."""
    t = SMOLVLM2_CONFIG["text_config"]
    width, depth = t["hidden_size"], SMOLVLA["num_vlm_layers"]
    expert = int(width * SMOLVLA["expert_width_multiplier"])
    n = SMOLVLA["self_attn_every_n_layers"]
    cross = {i: t["num_key_value_heads"] * t["head_dim"] for i in range(depth) if i % n != 0}
    keys = vision_keys()
    keys[f"{TEXT}.embed_tokens.weight"] = [t["vocab_size"], width]
    keys |= llama_layer_keys(TEXT, width, t["intermediate_size"], depth, {})
    keys[f"{VLM}.lm_head.weight"] = [t["vocab_size"], width]
    keys |= llama_layer_keys(EXP, expert, get_intermediate_size(expert), depth, cross)
    state, action = SMOLVLA["max_state_dim"], SMOLVLA["max_action_dim"]
    for name, (fan_in, fan_out) in {
        "state_proj": (state, width),
        "action_in_proj": (action, expert),
        "action_out_proj": (expert, action),
        "action_time_mlp_in": (2 * expert, expert),
        "action_time_mlp_out": (expert, expert),
    }.items():
        keys[f"model.{name}.weight"] = [fan_out, fan_in]
        keys[f"model.{name}.bias"] = [fan_out]
    return dict(sorted(keys.items()))


def manifest() -> dict[str, object]:
    """The JSON document."""
    keys = file_keys()
    parameters = sum(math.prod(s) for s in keys.values())
    if (len(keys), parameters) != (CHECKPOINT["tensors"], CHECKPOINT["parameters"]):
        raise SystemExit(f"{len(keys)} keys / {parameters} parameters disagree with {CHECKPOINT}")
    return {
        "source": {
            "repository": "huggingface/lerobot",
            "commit": LEROBOT_COMMIT,
            "paths": [
                "src/lerobot/policies/smolvla/smolvlm_with_expert.py",
                "src/lerobot/policies/smolvla/modeling_smolvla.py",
                "src/lerobot/policies/smolvla/configuration_smolvla.py",
            ],
            "backbone": {
                "model": "HuggingFaceTB/SmolVLM2-500M-Video-Instruct",
                "file": "config.json",
                "fields": SMOLVLM2_CONFIG,
                "vision_defaults": VISION_DEFAULTS,
            },
            "modules": [
                "transformers: src/transformers/models/smolvlm/modeling_smolvlm.py",
                "transformers: src/transformers/models/llama/modeling_llama.py",
            ],
            "checkpoint_check": CHECKPOINT,
            "generator": "test/data/make_smolvla_keys.py",
        },
        "description": (
            "Keys and shapes of LeRobot's SmolVLAPolicy model.safetensors at full size "
            "(SmolVLM2-500M truncated to 16 text layers, 720-wide expert, cross-attention in "
            "odd expert layers, state/action dim 32). 'unused' names a key no forward pass "
            "reads (SmolVLM2's untied lm_head)."
        ),
        "unused": [f"{VLM}.lm_head.weight"],
        "smolvla": keys,
    }


if __name__ == "__main__":
    out = Path(__file__).with_name("smolvla_keys.json")
    out.write_text(json.dumps(manifest(), indent=1) + "\n")
    print(f"wrote {out}")
