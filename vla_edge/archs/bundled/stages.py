"""The bundled model's export contract: its four stages' tensors, host side, example inputs.

The model itself is :class:`vla_edge.archs.bundled.model.VlaPolicy` (``vla-edge train``);
:func:`bundled_stage_io` declares each stage's tensors, :func:`bundled_contract` the rest
of its manifest, :func:`example_inputs` the inputs its programs are fixed to, and
:func:`bundled_stage_modules` its stages as one set (the registry's ``stages``), which
the generic exporter turns into programs (:func:`vla_edge.export.stages.stage_programs`,
through the hooks of :mod:`.programs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from vla_edge.archs.bundled.config import LANGUAGE_DIM
from vla_edge.archs.bundled.model import VlaPolicy
from vla_edge.archs.host import TOKENIZER_NAME, TensorSpec
from vla_edge.archs.normalisation import mean_std_section

EXAMPLE_INSTRUCTION = "put the red block in the bowl"
BUNDLED_STAGES = ("language_encoder", "vision_encoder", "fusion", "action_head")
"""The bundled model's stages in run order."""
BUNDLED_OUTPUT = "action_head.actions_norm"


@dataclass
class BundledStages:
    """The bundled model's stages: its own submodules, in run order."""

    policy: VlaPolicy

    def modules(self) -> dict[str, nn.Module]:
        """Stage name -> module (``language_encoder`` loads MiniLM if needed)."""
        if self.policy.language_encoder is None:
            self.policy.ensure_language_encoder()
        return {name: getattr(self.policy, name) for name in BUNDLED_STAGES}

    def inputs(self) -> dict[str, tuple[TensorSpec, ...]]:
        """Each stage's inputs with their sources, in the order its ``forward`` takes them."""
        return {name: io[1] for name, io in bundled_stage_io(self.policy).items()}

    def outputs(self) -> dict[str, tuple[TensorSpec, ...]]:
        """Each stage's outputs, in the order its ``forward`` returns them."""
        return {name: io[2] for name, io in bundled_stage_io(self.policy).items()}

    def rates(self) -> dict[str, str]:
        """Each stage's rate: the language stage per instruction, the others per observation."""
        return {name: io[0] for name, io in bundled_stage_io(self.policy).items()}

    def repeats(self) -> dict[str, dict[str, Any]]:
        """No stage is run as a loop of calls (the action head integrates its K steps)."""
        return {}


def bundled_stage_modules(policy: VlaPolicy) -> BundledStages:
    """The bundled model's stages (sharing its parameters)."""
    return BundledStages(policy)


def shape_fields(policy: VlaPolicy) -> dict[str, object]:
    """The bundled model's top-level deployment and shape fields."""
    cfg = policy.config
    return {
        "joint_names": list(cfg.joint_names),
        "action_dim": cfg.action_dim,
        "delta_actions": list(cfg.delta_actions),
        "cameras": list(cfg.cameras),
        "image_height": cfg.image_height,
        "image_width": cfg.image_width,
        "chunk_horizon": cfg.chunk_horizon,
        "dt_action_s": cfg.dt_action_s,
        "flow_steps": int(policy.action_head.flow_steps),
        "max_prefix_len": cfg.max_prefix_len,
        "max_instruction_tokens": cfg.max_instruction_tokens,
        "language_dim": LANGUAGE_DIM,
        "d_model": cfg.d_model,
        "visual_tokens_per_camera": cfg.tokens_per_camera,
        "context_tokens": cfg.context_tokens,
    }


def bundled_host(policy: VlaPolicy) -> dict[str, dict[str, Any]]:
    """The host tensors the bundled model reads (without the tokenizer's file hash)."""
    cfg = policy.config
    n_cams, h, a = len(cfg.cameras), cfg.chunk_horizon, cfg.action_dim
    length = cfg.max_instruction_tokens
    f32, i64 = "float32", "int64"
    return {
        "images": {
            "shape": [n_cams, 3, cfg.image_height, cfg.image_width],
            "dtype": f32,
            "slots": [{"name": cam, "camera": cam} for cam in cfg.cameras],
            "pixel_range": [0.0, 1.0],
            "resize": "stretch",
        },
        "token_ids": {
            "shape": [1, length],
            "dtype": i64,
            "tokenizer": {
                "kind": "wordpiece",
                "file": TOKENIZER_NAME,
                "language_model": "sentence-transformers/all-MiniLM-L6-v2",
            },
        },
        "token_mask": {"shape": [1, length], "dtype": i64},
        "state": {"shape": [1, a], "dtype": f32},
        "noise": {"shape": [1, h, a], "dtype": f32},
        "prefix_actions": {"shape": [1, h, a], "dtype": f32},
        "prefix_mask": {"shape": [1, h], "dtype": f32},
    }


def bundled_stage_io(
    policy: VlaPolicy,
) -> dict[str, tuple[str, tuple[TensorSpec, ...], tuple[TensorSpec, ...]]]:
    """``stage -> (rate, inputs with sources, outputs)`` of the bundled model."""
    cfg = policy.config
    n_cams, h, w = len(cfg.cameras), cfg.image_height, cfg.image_width
    t_v, d, t_c = cfg.tokens_per_camera, cfg.d_model, cfg.context_tokens
    horizon, a, length = cfg.chunk_horizon, cfg.action_dim, cfg.max_instruction_tokens
    f32, i64 = "float32", "int64"
    lang = TensorSpec("lang", (1, LANGUAGE_DIM), f32)
    visual = TensorSpec("visual_tokens", (n_cams, t_v, d), f32)
    context = TensorSpec("context", (1, t_c, d), f32)
    return {
        "language_encoder": (
            "per_instruction",
            (
                TensorSpec("input_ids", (1, length), i64, "host:token_ids"),
                TensorSpec("attention_mask", (1, length), i64, "host:token_mask"),
            ),
            (lang,),
        ),
        "vision_encoder": (
            "per_observation",
            (TensorSpec("images", (n_cams, 3, h, w), f32, "host:images"),),
            (visual,),
        ),
        "fusion": (
            "per_observation",
            (
                TensorSpec(visual.name, visual.shape, f32, "stage:vision_encoder.visual_tokens"),
                TensorSpec(lang.name, lang.shape, f32, "stage:language_encoder.lang"),
                TensorSpec("state_norm", (1, a), f32, "host:state"),
            ),
            (context,),
        ),
        "action_head": (
            "per_observation",
            (
                TensorSpec(context.name, context.shape, f32, "stage:fusion.context"),
                TensorSpec("noise", (1, horizon, a), f32, "host:noise"),
                TensorSpec("prefix_actions", (1, horizon, a), f32, "host:prefix_actions"),
                TensorSpec("prefix_mask", (1, horizon), f32, "host:prefix_mask"),
            ),
            (TensorSpec("actions_norm", (1, horizon, a), f32),),
        ),
    }


def bundled_contract(policy: VlaPolicy) -> dict[str, Any]:
    """The manifest fields of the bundled model besides its stages, source and exporter."""
    fields = shape_fields(policy)
    return {
        "architecture": "bundled",
        "output": BUNDLED_OUTPUT,
        "host": bundled_host(policy),
        "normalisation": mean_std_section(policy.stats.to_dict(), list(fields["delta_actions"])),
        **fields,
        "model_config": policy.config.model_dump(mode="json"),
    }


def example_inputs(policy: VlaPolicy, seed: int = 0) -> dict[str, tuple[torch.Tensor, ...]]:
    """Realistic example inputs of every stage (the shapes the programs are fixed to)."""
    from vla_edge.archs.bundled.tokenizer import InstructionTokenizer

    cfg = policy.config
    gen = torch.Generator().manual_seed(seed)
    ids, mask = InstructionTokenizer(cfg.max_instruction_tokens).encode(EXAMPLE_INSTRUCTION)
    n_cams, h, a = len(cfg.cameras), cfg.chunk_horizon, cfg.action_dim
    images = torch.rand(n_cams, 3, cfg.image_height, cfg.image_width, generator=gen)
    lang = torch.nn.functional.normalize(torch.randn(1, LANGUAGE_DIM, generator=gen), dim=-1)
    state = torch.randn(1, a, generator=gen)
    with torch.inference_mode():
        visual = policy.vision_encoder(images)
        context = policy.fusion(visual, lang, state)
    prefix_mask = torch.zeros(1, h)
    prefix_mask[0, : min(2, cfg.max_prefix_len)] = 1.0
    examples = {
        "language_encoder": (torch.from_numpy(ids), torch.from_numpy(mask)),
        "vision_encoder": (images,),
        "fusion": (visual, lang, state),
        "action_head": (
            context,
            torch.randn(1, h, a, generator=gen),
            torch.randn(1, h, a, generator=gen),
            prefix_mask,
        ),
    }
    # contiguous (row-major) like the numpy arrays the runners feed: ExecuTorch
    # fixes each input's dim order from the example's strides
    return {
        name: tuple(t.detach().contiguous().clone() for t in tensors)
        for name, tensors in examples.items()
    }
