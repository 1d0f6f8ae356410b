"""Write ``pi0_keys.json``: the state-dict keys and shapes of openpi's PyTorch π0 / π0.5.

Written from the published code, not from this package's model:

* ``examples/convert_jax_model_to_pytorch.py`` (openpi): every key the converter writes
  (``slice_paligemma_state_dict``, ``slice_gemma_state_dict``, the projection loop) and
  its shape, from the JAX parameter shapes (``src/openpi/models/gemma.py``: ``q_einsum``
  ``(heads, width, head_dim)``, ``kv_einsum`` ``(2, kv_heads, width, head_dim)``,
  ``attn_vec_einsum`` ``(heads, head_dim, width)``, ``gating_einsum`` ``(2, width, mlp)``,
  ``linear`` ``(mlp, width)``, adaRMS ``Dense_0`` ``(width, 3 * width)``; SigLIP So400m/14
  as the converter hard-codes it) through the converter's transposes and reshapes;
* ``src/openpi/models_pytorch/gemma_pytorch.py`` / ``pi0_pytorch.py``: the module tree,
  which adds the two ``lm_head`` weights the converter never writes (PaliGemma's tied to
  the token embedding; the expert's a ``GemmaForCausalLM`` head whose ``embed_tokens`` is
  set to ``None``);
* ``safetensors.torch.save_model`` (what the converter calls): of tied names it keeps the
  alphabetically first, ``paligemma.lm_head.weight``, and drops ``embed_tokens.weight``;
  LeRobot's loader copies it back (huggingface/lerobot ``modeling_pi0.py``
  ``_fix_pytorch_state_dict_keys``).

Run: ``python test/data/make_pi0_keys.py`` (writes ``test/data/pi0_keys.json``).
"""

from __future__ import annotations

import json
from pathlib import Path

OPENPI_COMMIT = "15a9616a00943ada6c20a0f158e3adb39df2ccac"
LEROBOT_COMMIT = "7427f31801f944f5ec9ce53cda02862ce7d1638b"
VOCAB = 257152
ACTION_DIM = 32
# gemma.get_config("gemma_2b") / ("gemma_300m")
PALIGEMMA = {"width": 2048, "depth": 18, "mlp": 16384, "heads": 8, "kv": 1, "head_dim": 256}
EXPERT = {"width": 1024, "depth": 18, "mlp": 4096, "heads": 8, "kv": 1, "head_dim": 256}
# the converter's PaliGemmaConfig.vision_config
SIGLIP = {"hidden": 1152, "depth": 27, "heads": 16, "mlp": 4304, "patch": 14, "image": 224}
PROJECTION_DIM = 2048

VIS = "paligemma_with_expert.paligemma.model.vision_tower.vision_model"
LM = "paligemma_with_expert.paligemma.model.language_model"
EXP = "paligemma_with_expert.gemma_expert.model"


def vision_keys() -> dict[str, list[int]]:
    """``slice_paligemma_state_dict``, image part."""
    h, m, p = SIGLIP["hidden"], SIGLIP["mlp"], SIGLIP["patch"]
    n_pos = (SIGLIP["image"] // p) ** 2
    keys = {
        # img/embedding/kernel (p, p, 3, h).transpose(3, 2, 0, 1)
        f"{VIS}.embeddings.patch_embedding.weight": [h, 3, p, p],
        f"{VIS}.embeddings.patch_embedding.bias": [h],
        # img/pos_embedding (1, n_pos, h).reshape(-1, h)
        f"{VIS}.embeddings.position_embedding.weight": [n_pos, h],
    }
    for i in range(SIGLIP["depth"]):
        layer = f"{VIS}.encoder.layers.{i}"
        for norm in ("layer_norm1", "layer_norm2"):
            keys[f"{layer}.{norm}.weight"] = [h]
            keys[f"{layer}.{norm}.bias"] = [h]
        # MlpBlock_0/Dense_0 kernel (h, m).T, Dense_1 (m, h).T
        keys[f"{layer}.mlp.fc1.weight"] = [m, h]
        keys[f"{layer}.mlp.fc1.bias"] = [m]
        keys[f"{layer}.mlp.fc2.weight"] = [h, m]
        keys[f"{layer}.mlp.fc2.bias"] = [h]
        # MultiHeadDotProductAttention_0/{key,value,query} kernel (h, heads, h/heads)
        # .reshape(-1, h).T; out kernel (heads, h/heads, h).reshape(-1, h).T
        for proj in ("k_proj", "v_proj", "q_proj", "out_proj"):
            keys[f"{layer}.self_attn.{proj}.weight"] = [h, h]
            keys[f"{layer}.self_attn.{proj}.bias"] = [h]
    keys[f"{VIS}.post_layernorm.weight"] = [h]
    keys[f"{VIS}.post_layernorm.bias"] = [h]
    # img/head kernel (h, projection_dim).T
    keys["paligemma_with_expert.paligemma.model.multi_modal_projector.linear.weight"] = [
        PROJECTION_DIM,
        h,
    ]
    keys["paligemma_with_expert.paligemma.model.multi_modal_projector.linear.bias"] = [
        PROJECTION_DIM
    ]
    return keys


def gemma_layer_keys(prefix: str, size: dict[str, int], adarms: bool) -> dict[str, list[int]]:
    """One decoder's layers: ``slice_paligemma_state_dict`` (LM) / ``slice_gemma_state_dict``."""
    w, m, heads, kv, hd = size["width"], size["mlp"], size["heads"], size["kv"], size["head_dim"]
    keys: dict[str, list[int]] = {}
    for i in range(size["depth"]):
        layer = f"{prefix}.layers.{i}"
        # q_einsum[i] (heads, w, hd).transpose(0, 2, 1).reshape(heads * hd, w)
        keys[f"{layer}.self_attn.q_proj.weight"] = [heads * hd, w]
        # kv_einsum[i, 0|1, 0] (w, hd).T
        keys[f"{layer}.self_attn.k_proj.weight"] = [kv * hd, w]
        keys[f"{layer}.self_attn.v_proj.weight"] = [kv * hd, w]
        # attn_vec_einsum[i] (heads, hd, w) -> (w, heads * hd)
        keys[f"{layer}.self_attn.o_proj.weight"] = [w, heads * hd]
        # gating_einsum[i, 0|1] (w, m).T; linear[i] (m, w).T
        keys[f"{layer}.mlp.gate_proj.weight"] = [m, w]
        keys[f"{layer}.mlp.up_proj.weight"] = [m, w]
        keys[f"{layer}.mlp.down_proj.weight"] = [w, m]
        for norm in ("input_layernorm", "post_attention_layernorm"):
            if adarms:
                # pre_{attention,ffw}_norm_1/Dense_0 kernel (w, 3w).T, bias (3w)
                keys[f"{layer}.{norm}.dense.weight"] = [3 * w, w]
                keys[f"{layer}.{norm}.dense.bias"] = [3 * w]
            else:
                keys[f"{layer}.{norm}.weight"] = [w]
    if adarms:
        keys[f"{prefix}.norm.dense.weight"] = [3 * w, w]
        keys[f"{prefix}.norm.dense.bias"] = [3 * w]
    else:
        keys[f"{prefix}.norm.weight"] = [w]
    return keys


def projection_keys(pi05: bool) -> dict[str, list[int]]:
    """``convert_pi0_checkpoint``'s projection loop (kernel (in, out).T) and ``PI0Pytorch``."""
    w = EXPERT["width"]
    shapes = {
        "action_in_proj": (ACTION_DIM, w),
        "action_out_proj": (w, ACTION_DIM),
    }
    if pi05:
        shapes |= {"time_mlp_in": (w, w), "time_mlp_out": (w, w)}
    else:
        shapes |= {
            "state_proj": (ACTION_DIM, w),
            "action_time_mlp_in": (2 * w, w),
            "action_time_mlp_out": (w, w),
        }
    keys: dict[str, list[int]] = {}
    for name, (fan_in, fan_out) in shapes.items():
        keys[f"{name}.weight"] = [fan_out, fan_in]
        keys[f"{name}.bias"] = [fan_out]
    return keys


def module_keys(pi05: bool) -> dict[str, list[int]]:
    """Every key of ``PI0Pytorch.state_dict()`` for π0 (``pi05=False``) or π0.5."""
    keys = vision_keys()
    # llm/embedder/input_embedding (vocab, width)
    keys[f"{LM}.embed_tokens.weight"] = [VOCAB, PALIGEMMA["width"]]
    keys |= gemma_layer_keys(LM, PALIGEMMA, adarms=False)
    keys |= gemma_layer_keys(EXP, EXPERT, adarms=pi05)
    # PaliGemmaForConditionalGeneration.lm_head (tied) and the expert's GemmaForCausalLM.lm_head
    keys["paligemma_with_expert.paligemma.lm_head.weight"] = [VOCAB, PALIGEMMA["width"]]
    keys["paligemma_with_expert.gemma_expert.lm_head.weight"] = [VOCAB, EXPERT["width"]]
    keys |= projection_keys(pi05)
    return dict(sorted(keys.items()))


def manifest() -> dict[str, object]:
    """The JSON document."""
    return {
        "source": {
            "repository": "Physical-Intelligence/openpi",
            "commit": OPENPI_COMMIT,
            "paths": [
                "examples/convert_jax_model_to_pytorch.py",
                "src/openpi/models_pytorch/gemma_pytorch.py",
                "src/openpi/models_pytorch/pi0_pytorch.py",
                "src/openpi/models/gemma.py",
            ],
            "also": {
                "repository": "huggingface/lerobot",
                "commit": LEROBOT_COMMIT,
                "path": "src/lerobot/policies/pi0/modeling_pi0.py",
                "what": "_fix_pytorch_state_dict_keys copies lm_head.weight to embed_tokens.weight",
            },
            "generator": "test/data/make_pi0_keys.py",
        },
        "description": (
            "Keys and shapes of openpi's PI0Pytorch.state_dict() at full size (gemma_2b + "
            "gemma_300m, SigLIP So400m/14 at 224, action_dim 32). The converted model.safetensors "
            "(safetensors.torch.save_model) holds these minus 'file_drops'. 'tied' names "
            "the key that shares storage with another; 'unused' names a key no forward pass reads."
        ),
        "tied": {
            "paligemma_with_expert.paligemma.lm_head.weight": f"{LM}.embed_tokens.weight",
        },
        "file_drops": [f"{LM}.embed_tokens.weight"],
        "unused": ["paligemma_with_expert.gemma_expert.lm_head.weight"],
        "pi0": module_keys(pi05=False),
        "pi05": module_keys(pi05=True),
    }


if __name__ == "__main__":
    out = Path(__file__).with_name("pi0_keys.json")
    out.write_text(json.dumps(manifest(), indent=1) + "\n")
    print(f"wrote {out}")
