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
  (:func:`~vla_edge.archs.stage_io.flow_step_repeat`), exactly as N1.7's
  (:class:`~vla_edge.archs.groot.stages.ActionHeadStep`): the step picks its time and
  time features from constant float32 tables with the one-hot ``step``, and the rows under
  ``prefix_mask`` follow GR00T's flow path to ``prefix_actions``.

The embodiment's weight slice is fixed when the stages are built (``config.embodiment_id``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from vla_edge.archs.groot.layers import (
    euler_times,
    on_groot_flow_path,
    sinusoid,
    time_buckets,
    timestep_features,
)
from vla_edge.archs.groot.n15_model import (
    PROMPT_TABLES,
    ActionPartsN15,
    GrootN15Model,
    PrefixPartsN15,
    VisionPartsN15,
)
from vla_edge.archs.host import TensorSpec
from vla_edge.archs.stage_io import (
    StageSet,
    build_stage_set,
    declared_calls,
    default_executed_prefix,
    example_inputs,
    executed_prefix_masks,
    flow_calls,
    flow_step_repeat,
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
        for name in PROMPT_TABLES:
            self.register_buffer(name, getattr(model, name), persistent=False)

    def forward(
        self,
        image_tokens: torch.Tensor,
        image_mask: torch.Tensor,
        token_ids: torch.Tensor,
        token_mask: torch.Tensor,
        state: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(vl_tokens, vl_mask, state_tokens)``, float32."""
        outs = self.fuse(
            image_tokens, image_mask, token_ids, token_mask, state, self.config.embodiment_id
        )
        return tuple(o.to(torch.float32) for o in outs)  # type: ignore[return-value]


class ActionHeadStepN15(nn.Module, ActionPartsN15):
    """One Euler step: the fusion outputs, noise, executed prefix, ``x_t``, ``step`` → actions."""

    def __init__(self, model: GrootN15Model) -> None:
        super().__init__()
        c = model.config
        self.config = c
        self.dit = model.dit
        self.action_encoder = model.action_encoder
        self.action_decoder = model.action_decoder
        self.position_embedding = model.position_embedding
        self.future_tokens = model.future_tokens
        self.dt = 1.0 / c.flow_steps
        device = model.vlln.weight.device
        with torch.device("cpu"):
            times = torch.tensor(euler_times(c.flow_steps), dtype=torch.float32)
            buckets = torch.tensor(
                time_buckets(c.flow_steps, c.num_timestep_buckets), dtype=torch.float32
            )
            dit_times = timestep_features(buckets, c.timestep_channels)
            action_times = sinusoid(buckets, c.input_embedding_dim)
        self.register_buffer("step_times", times.reshape(-1, 1).to(device), persistent=False)
        self.register_buffer("dit_times", dit_times.to(device), persistent=False)
        self.register_buffer("action_times", action_times.to(device), persistent=False)

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
        keep, free = executed_prefix_masks(prefix_mask)
        step = step.to(torch.float32)
        t = torch.mm(step, self.step_times).reshape(1, 1, 1)
        x_t = on_groot_flow_path(x_t, t, noise, prefix_actions, keep, free)
        v_t = self.velocity(
            vl_tokens,
            vl_mask,
            state_tokens,
            x_t,
            torch.mm(step, self.dit_times),
            torch.mm(step, self.action_times),
            self.config.embodiment_id,
        )
        x_t = x_t + self.dt * v_t
        return free * x_t + keep * prefix_actions


@dataclass
class GrootN15Stages(StageSet):
    """The three stages of one N1.5 model, their example inputs and tensor declarations."""

    model: GrootN15Model
    vision_encoder: VisionEncoderN15
    fusion: FusionN15
    action_head: ActionHeadStepN15

    def _shapes(self) -> dict[str, tuple[int, ...]]:
        c = self.model.config
        v = c.vision
        return {
            "images": (c.n_slots, 3, v.image_size, v.image_size),
            "image_tokens": (c.n_slots, v.num_tokens, c.text.width),
            "vl_tokens": (1, c.prefix_len, c.backbone_width),
            "vl_mask": (1, c.prefix_len),
            "state_tokens": (1, 1, c.input_embedding_dim),
            "chunk": (1, c.action_horizon, c.max_action_dim),
        }

    def inputs(self) -> dict[str, list[TensorSpec]]:
        """Each stage's inputs, in the order its ``forward`` takes them."""
        c = self.model.config
        s = self._shapes()
        return {
            "vision_encoder": [TensorSpec("images", s["images"], "float32", "host:images")],
            "fusion": [
                TensorSpec(
                    "image_tokens",
                    s["image_tokens"],
                    "float32",
                    "stage:vision_encoder.image_tokens",
                ),
                TensorSpec("image_mask", (c.n_slots,), "float32", "host:image_mask"),
                TensorSpec("token_ids", (1, c.max_token_len), "int64", "host:token_ids"),
                TensorSpec("token_mask", (1, c.max_token_len), "float32", "host:token_mask"),
                TensorSpec("state", (1, c.max_state_dim), "float32", "host:state"),
            ],
            "action_head": [
                TensorSpec("vl_tokens", s["vl_tokens"], "float32", "stage:fusion.vl_tokens"),
                TensorSpec("vl_mask", s["vl_mask"], "float32", "stage:fusion.vl_mask"),
                TensorSpec(
                    "state_tokens", s["state_tokens"], "float32", "stage:fusion.state_tokens"
                ),
                TensorSpec("noise", s["chunk"], "float32", "host:noise"),
                TensorSpec("prefix_actions", s["chunk"], "float32", "host:prefix_actions"),
                TensorSpec("prefix_mask", (1, c.action_horizon), "float32", "host:prefix_mask"),
                TensorSpec("x_t", s["chunk"], "float32", "host:noise"),
                TensorSpec("step", (1, c.flow_steps), "float32", "repeat"),
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

    def repeats(self) -> dict[str, dict[str, object]]:
        """The action head's loop, as the manifest's ``stages.action_head.repeat``."""
        return flow_step_repeat(self.model.config.flow_steps)

    def example_inputs(self, seed: int = 0) -> dict[str, tuple[torch.Tensor, ...]]:
        """Random inputs of the declared shapes (last slot absent, half the prompt real)."""
        c = self.model.config
        return example_inputs(
            self.inputs(),
            vocab_size=c.text.vocab_size,
            n_slots=c.n_slots,
            tokens_per_slot=c.slot_len,
            max_token_len=c.max_token_len,
            horizon=c.action_horizon,
            seed=seed,
        )


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
