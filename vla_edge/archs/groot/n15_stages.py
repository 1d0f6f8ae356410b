"""GR00T N1.5 split into the same three fixed-shape stages as N1.7.

Each stage is an ``nn.Module`` over tensors only, sharing the parameters of one
:class:`~vla_edge.archs.groot.n15_model.GrootN15Model`:

* ``vision_encoder``: images ``[n_slots, 3, S, S]`` in [-1, 1] → ``image_tokens``
  ``[n_slots, T, W]`` (SigLIP, the pixel shuffle and ``mlp1``; ``W`` the language model's
  width).
* ``fusion``: the image tokens, slot mask, token ids and mask, and the state →
  ``vl_tokens`` ``[1, L, W']`` (the cut language model after its final norm,
  ``eagle_linear``, ``vlln`` and the VL self-attention), ``vl_mask`` ``[1, L]`` (float
  0/1, the tokens that exist) and ``state_tokens`` ``[1, 1, E]``.
* ``action_head``: ONE Euler step, called K times through the manifest's ``repeat``
  (:func:`~vla_edge.archs.stage_io.flow_step_repeat`), N1.7's own step
  (:class:`~vla_edge.archs.groot.stages.EulerStep`): the step picks its time and
  time features from constant float32 tables with the one-hot ``step``, and the rows under
  ``prefix_mask`` follow GR00T's flow path to ``prefix_actions``.

The embodiment's weight slice is fixed when the stages are built (``config.embodiment_id``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from vla_edge.archs.groot.model import register_tables
from vla_edge.archs.groot.n15_model import (
    PROMPT_TABLES,
    ActionPartsN15,
    GrootN15Model,
    PrefixPartsN15,
    VisionPartsN15,
)
from vla_edge.archs.groot.stages import EulerStep, FlowStageSet
from vla_edge.archs.host import TensorSpec
from vla_edge.archs.stage_io import (
    build_stage_set,
    declared_calls,
    default_executed_prefix,
    flow_calls,
)


class VisionEncoderN15(nn.Module, VisionPartsN15):
    """images ``[n_slots, 3, S, S]`` → ``image_tokens`` ``[n_slots, T, W]``, float32."""

    def __init__(self, model: GrootN15Model) -> None:
        super().__init__()
        self.config = model.config
        self.siglip = model.siglip
        self.mlp1 = model.mlp1

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """SigLIP, the pixel shuffle and ``mlp1`` per slot."""
        return self.embed_images(images).to(torch.float32)


class FusionN15(nn.Module, PrefixPartsN15):
    """Image tokens, the prompt and the state → the DiT's context, its mask, the state token."""

    def __init__(self, model: GrootN15Model) -> None:
        super().__init__()
        self.config = model.config
        self.language_model = model.language_model
        self.backbone = model.backbone
        self.vlln = model.vlln
        self.vl_self_attention = model.vl_self_attention
        self.state_encoder = model.state_encoder
        register_tables(self, model, PROMPT_TABLES)

    def forward(
        self,
        image_tokens: torch.Tensor,
        image_mask: torch.Tensor,
        token_ids: torch.Tensor,
        token_mask: torch.Tensor,
        state: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(vl_tokens, vl_mask, state_tokens)``, float32."""
        outs = self.fuse(image_tokens, image_mask, token_ids, token_mask, state)
        return tuple(o.to(torch.float32) for o in outs)  # type: ignore[return-value]


class ActionHeadStepN15(EulerStep, ActionPartsN15):
    """One Euler step: the fusion outputs, noise, executed prefix, ``x_t``, ``step`` → actions."""

    def __init__(self, model: GrootN15Model) -> None:
        super().__init__(model, extra=("future_tokens",))

    def forward(
        self,
        vl_tokens: torch.Tensor,
        vl_mask: torch.Tensor,
        state_tokens: torch.Tensor,
        noise: torch.Tensor,
        prefix_actions: torch.Tensor,
        prefix_mask: torch.Tensor,
        x_t: torch.Tensor,
        step: torch.Tensor,
    ) -> torch.Tensor:
        """Actions ``[1, H, A]`` after Euler step ``step`` (one-hot) from ``x_t``."""
        context = (vl_tokens, vl_mask, state_tokens)
        return self.euler_step(context, noise, prefix_actions, prefix_mask, x_t, step)


@dataclass
class GrootN15Stages(FlowStageSet):
    """The three stages of one N1.5 model, their example inputs and tensor declarations."""

    model: GrootN15Model
    vision_encoder: VisionEncoderN15
    fusion: FusionN15
    action_head: ActionHeadStepN15

    def _shapes(self) -> dict[str, tuple[int, ...]]:
        c = self.model.config
        return {
            "image_tokens": (c.n_slots, c.vision.num_tokens, c.text.width),
            "vl_tokens": (1, c.prefix_len, c.backbone_width),
            "vl_mask": (1, c.prefix_len),
            "state_tokens": (1, 1, c.input_embedding_dim),
            "chunk": (1, c.action_horizon, c.max_action_dim),
        }

    def inputs(self) -> dict[str, list[TensorSpec]]:
        """Each stage's inputs, in the order its ``forward`` takes them."""
        s = self._shapes()
        return {
            "vision_encoder": [self.image_spec()],
            "fusion": [
                TensorSpec(
                    "image_tokens",
                    s["image_tokens"],
                    "float32",
                    "stage:vision_encoder.image_tokens",
                ),
                *self.prompt_specs(),
            ],
            "action_head": [
                TensorSpec("vl_tokens", s["vl_tokens"], "float32", "stage:fusion.vl_tokens"),
                TensorSpec("vl_mask", s["vl_mask"], "float32", "stage:fusion.vl_mask"),
                *self.step_specs(),
            ],
        }

    def outputs(self) -> dict[str, list[TensorSpec]]:
        """Each stage's outputs, in the order its ``forward`` returns them."""
        s = self._shapes()
        return {
            "vision_encoder": [TensorSpec("image_tokens", s["image_tokens"], "float32", "output")],
            "fusion": [
                TensorSpec("vl_tokens", s["vl_tokens"], "float32", "output"),
                TensorSpec("vl_mask", s["vl_mask"], "float32", "output"),
                TensorSpec("state_tokens", s["state_tokens"], "float32", "output"),
            ],
            "action_head": [TensorSpec("actions", s["chunk"], "float32", "output")],
        }


def build_stages(model: GrootN15Model) -> GrootN15Stages:
    """The three stages of ``model``, sharing its parameters (no copies)."""
    return build_stage_set(GrootN15Stages, model, VisionEncoderN15, FusionN15, ActionHeadStepN15)


@torch.no_grad()
def run_stages(
    stages: GrootN15Stages,
    images: torch.Tensor,
    image_mask: torch.Tensor,
    token_ids: torch.Tensor,
    token_mask: torch.Tensor,
    state: torch.Tensor,
    noise: torch.Tensor,
    prefix_actions: torch.Tensor | None = None,
    prefix_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Run the three stages in order, the action head K times, as a runner would."""
    tokens = stages.vision_encoder(images)
    fused = stages.fusion(tokens, image_mask, token_ids, token_mask, state)
    prefix_actions, prefix_mask = default_executed_prefix(noise, prefix_actions, prefix_mask)
    fixed = (*fused, noise, prefix_actions, prefix_mask)
    calls = declared_calls(stages, device=noise.device)
    return flow_calls(stages.action_head, fixed, noise, calls)


__all__ = ["GrootN15Stages", "build_stages", "run_stages"]
