"""Exportable stages with declared tensors, and the bundled :class:`VlaPolicy`'s four.

A :class:`StageProgram` is what the exporter needs of any architecture: a torch
module, example inputs, and the tensors it reads (each with its ``source``,
see :mod:`vla_edge.export.manifest`) and writes. The bundled model's stages
and the rest of its manifest contract (:func:`bundled_contract`) are built
here; another architecture supplies its own list and contract to
:func:`vla_edge.export.pipeline.export_architecture`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from vla_edge.export.manifest import TOKENIZER_NAME, StageRepeat, TensorSpec, stage_repeat
from vla_edge.export.normalisation import mean_std_section
from vla_edge.policy.config import LANGUAGE_DIM
from vla_edge.policy.model import VlaPolicy

if TYPE_CHECKING:
    from vla_edge.archs.stage_io import StageSet

EXAMPLE_INSTRUCTION = "put the red block in the bowl"
BUNDLED_STAGES = ("language_encoder", "vision_encoder", "fusion", "action_head")
"""The bundled model's stages in run order."""
BUNDLED_OUTPUT = "action_head.actions_norm"


@dataclass
class StageProgram:
    """One stage to export: its module, example inputs and the manifest's I/O specs.

    ``rate``: ``per_instruction`` (run once per new instruction and cached) or
    ``per_observation``; ``repeat``: the program is one call of a loop the runner
    drives (see :mod:`vla_edge.export.manifest`).
    """

    name: str
    module: nn.Module
    example_inputs: tuple[torch.Tensor, ...]
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    rate: str = "per_observation"
    repeat: StageRepeat | None = None

    @property
    def input_names(self) -> list[str]:
        """Names of the program inputs, in order."""
        return [t.name for t in self.inputs]

    @property
    def output_names(self) -> list[str]:
        """Names of the program outputs, in order."""
        return [t.name for t in self.outputs]


def stage_programs(
    stages: StageSet, modules: dict[str, nn.Module], examples: dict[str, tuple[torch.Tensor, ...]]
) -> list[StageProgram]:
    """An imported architecture's stages as programs, in run order, run per observation.

    Args:
        stages: its stage set, with ``inputs()`` and ``outputs()`` (declared tensors).
        modules: stage name → the module to export (the stage or its backend's rewrite).
        examples: stage name → example inputs.
    """
    inputs, outputs, repeats = stages.inputs(), stages.outputs(), stages.repeats()
    programs = []
    for name in stages.modules():
        declared_in = tuple(TensorSpec(t.name, t.shape, t.dtype, t.source) for t in inputs[name])
        declared_out = tuple(TensorSpec(t.name, t.shape, t.dtype) for t in outputs[name])
        repeat = repeats.get(name)
        programs.append(
            StageProgram(
                name,
                modules[name],
                examples[name],
                declared_in,
                declared_out,
                "per_observation",
                None if repeat is None else stage_repeat(repeat, declared_in, declared_out, name),
            )
        )
    return programs


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
    from vla_edge.policy.tokenizer import InstructionTokenizer

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


def policy_stages(policy: VlaPolicy, stage_names: tuple[str, ...]) -> list[StageProgram]:
    """The named stages of ``policy`` (``language_encoder`` loads MiniLM if needed)."""
    if "language_encoder" in stage_names:
        policy.ensure_language_encoder()
    policy.eval()
    io = bundled_stage_io(policy)
    examples = example_inputs(policy)
    return [
        StageProgram(
            name, getattr(policy, name), examples[name], io[name][1], io[name][2], io[name][0]
        )
        for name in stage_names
    ]
