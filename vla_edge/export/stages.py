"""The four exportable stages of a :class:`VlaPolicy` with example inputs and I/O names."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from vla_edge.export.manifest import TensorSpec, expected_stage_io
from vla_edge.policy.config import LANGUAGE_DIM
from vla_edge.policy.model import VlaPolicy

EXAMPLE_INSTRUCTION = "put the red block in the bowl"


@dataclass
class StageProgram:
    """One stage to export: its module, example inputs and the manifest's I/O specs."""

    name: str
    module: nn.Module
    example_inputs: tuple[torch.Tensor, ...]
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    @property
    def input_names(self) -> list[str]:
        """Names of the program inputs, in order."""
        return [t.name for t in self.inputs]

    @property
    def output_names(self) -> list[str]:
        """Names of the program outputs, in order."""
        return [t.name for t in self.outputs]


def shape_fields(policy: VlaPolicy) -> dict[str, object]:
    """The manifest's top-level shape fields for ``policy``."""
    cfg = policy.config
    return {
        "joint_names": list(cfg.joint_names),
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
    io = expected_stage_io(shape_fields(policy))
    examples = example_inputs(policy)
    return [
        StageProgram(name, getattr(policy, name), examples[name], io[name][0], io[name][1])
        for name in stage_names
    ]
