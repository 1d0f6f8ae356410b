"""SmolVLA's bench hooks: each size at random, and LeRobot's layout to write it in.

:data:`BENCH` is what ``vla-edge bench latency|parity|loop --arch smolvla`` read (named by
:mod:`.arch`); :func:`write_smolvla_checkpoint` writes a model in LeRobot's pretrained
layout with its processors' statistics files, which ``vla-edge import`` reads back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from vla_edge.archs.architecture import BenchHooks
from vla_edge.archs.smolvla.config import IMAGE_SLOTS, SmolVLAConfig
from vla_edge.archs.smolvla.layout import LM_HEAD
from vla_edge.core.errors import ConfigError

SMOLVLM2 = "HuggingFaceTB/SmolVLM2-500M-Video-Instruct"
"""The backbone LeRobot's published SmolVLA names (``vlm_model_name``)."""
PRE_STATS = "policy_preprocessor_step_5_normalizer_processor.safetensors"
POST_STATS = "policy_postprocessor_step_0_unnormalizer_processor.safetensors"


def bench_config(size: str, cameras: int) -> SmolVLAConfig:
    """SmolVLA at ``size`` (``full``: the published one, ``small``: tiny), ``cameras`` slots.

    Raises:
        ConfigError: an unknown size or more cameras than slots.
    """
    builds = {"full": SmolVLAConfig.full, "small": SmolVLAConfig.tiny}
    if size not in builds:
        raise ConfigError(f"size = {size!r}, expected one of {tuple(builds)}")
    if not 1 <= cameras <= len(IMAGE_SLOTS):
        raise ConfigError(f"cameras = {cameras}: smolvla has {len(IMAGE_SLOTS)} image slots")
    return builds[size](image_slots=tuple(IMAGE_SLOTS[:cameras]))


def smolvla_config_json(
    config: Any, state_dim: int, action_dim: int, vlm_model_name: str = SMOLVLM2
) -> dict[str, Any]:
    """``config.json`` as LeRobot's ``SmolVLAPolicy.save_pretrained`` writes it."""
    visual = {"type": "VISUAL", "shape": [3, 480, 640]}
    return {
        "type": "smolvla",
        "vlm_model_name": vlm_model_name,
        "load_vlm_weights": False,
        "num_vlm_layers": config.num_vlm_layers,
        "num_expert_layers": -1,
        "expert_width_multiplier": config.expert_width_multiplier,
        "self_attn_every_n_layers": config.self_attn_every_n_layers,
        "attention_mode": "cross_attn",
        "chunk_size": config.chunk_size,
        "n_action_steps": config.chunk_size,
        "max_state_dim": config.state_dim,
        "max_action_dim": config.action_dim,
        "num_steps": config.flow_steps,
        "resize_imgs_with_padding": [config.vision.image_size] * 2,
        "tokenizer_max_length": config.max_token_len,
        "pad_language_to": "longest",
        "add_image_special_tokens": False,
        "empty_cameras": 0,
        "min_period": config.min_period,
        "max_period": config.max_period,
        "normalization_mapping": {"VISUAL": "IDENTITY", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"},
        "input_features": {
            "observation.state": {"type": "STATE", "shape": [state_dim]},
            **{slot: visual for slot in config.image_slots},
        },
        "output_features": {"action": {"type": "ACTION", "shape": [action_dim]}},
    }


def write_smolvla_checkpoint(
    out: Path, model: Any, stats: dict[str, np.ndarray], vlm_model_name: str = SMOLVLM2
) -> Path:
    """``model`` in LeRobot's pretrained layout, with the processors' statistics files.

    ``stats``: LeRobot's keys (``observation.state.mean``, ``action.std``, ...); the
    feature widths in ``config.json`` are theirs.
    """
    import torch
    from safetensors.numpy import save_file as save_numpy
    from safetensors.torch import save_file

    from vla_edge.archs.smolvla.layout import to_lerobot

    c = model.config
    out.mkdir(parents=True, exist_ok=True)
    tensors = to_lerobot({k: v.contiguous() for k, v in model.state_dict().items()})
    tensors[LM_HEAD] = torch.zeros(c.text.vocab_size, c.text.width)  # SmolVLM2's, unread
    save_file(tensors, str(out / "model.safetensors"))
    del tensors
    widths = (int(stats["observation.state.mean"].size), int(stats["action.mean"].size))
    config_json = smolvla_config_json(c, *widths, vlm_model_name=vlm_model_name)
    (out / "config.json").write_text(json.dumps(config_json, indent=1))
    save_numpy(stats, str(out / PRE_STATS))
    save_numpy({k: v for k, v in stats.items() if k.startswith("action.")}, str(out / POST_STATS))
    norm = {"eps": 1e-8, "features": {}, "norm_map": {"VISUAL": "IDENTITY"}}
    before = ["rename_observations", "to_batch", "smolvla_new_line", "tokenizer", "device"]
    steps = [{"registry_name": f"{name}_processor", "config": {}} for name in before]
    steps.append({"registry_name": "normalizer_processor", "config": norm, "state_file": PRE_STATS})
    unnormalize = {"registry_name": "unnormalizer_processor", "config": norm}
    pipelines = {
        "policy_preprocessor.json": {"name": "policy_preprocessor", "steps": steps},
        "policy_postprocessor.json": {
            "name": "policy_postprocessor",
            "steps": [{**unnormalize, "state_file": POST_STATS}],
        },
    }
    for name, pipeline in pipelines.items():
        (out / name).write_text(json.dumps(pipeline, indent=1))
    return out


def write_checkpoint(out: Path, model: Any, stats: dict[str, Any], size: str) -> Path:
    """``model`` in LeRobot's layout with ``stats`` (``size`` changes nothing)."""
    return write_smolvla_checkpoint(out, model, stats)


def import_options(name: str, size: str, config: Any) -> dict[str, Any]:
    """The published size's head counts follow from its widths; a small size's are given."""
    if size == "full":
        return {}
    return {"text_heads": config.text.num_heads, "vision_heads": config.vision.num_heads}


BENCH = BenchHooks(
    config=bench_config,
    default_cameras=(1, 2),
    loop_config=bench_config,
    write_checkpoint=write_checkpoint,
    import_options=import_options,
    unread_keys=(LM_HEAD,),
)
"""SmolVLA's bench hooks (:attr:`vla_edge.archs.architecture.Architecture.bench`)."""
