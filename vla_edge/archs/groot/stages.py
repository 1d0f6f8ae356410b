"""GR00T N1.7 split into three fixed-shape stages: ``vision_encoder``, ``fusion``, ``action_head``.

Each stage is an ``nn.Module`` over tensors only, sharing the parameters of one
:class:`~vla_edge.archs.groot.model.GrootModel`, so ``torch.export.export(stage, inputs,
strict=False)`` traces it:

* ``vision_encoder``: images ``[n_slots, 3, S, S]`` in [-1, 1] → ``image_tokens``
  ``[n_slots, T, W]`` (the 2x2 merger's output) and ``deepstack_tokens``
  ``[k, n_slots, T, W]`` (the k deepstack mergers' outputs), ``W`` the language model's width.
* ``fusion``: the image and deepstack tokens, slot mask, token ids and mask, and the state
  → ``vl_tokens`` ``[1, L, W]`` (the cut language model without its final norm, ``vlln``
  and the VL self-attention: the tokens the DiT attends to), ``vl_text_mask`` and
  ``vl_image_mask`` ``[1, L]`` (float 0/1: the DiT's two cross-attention targets), and
  ``state_tokens`` ``[1, 1, E]`` (the per-embodiment state encoder's output).
* ``action_head``: ONE Euler step of the flow: the fusion outputs, explicit noise, an
  executed prefix, the actions so far ``x_t`` and the ``step`` (one-hot ``[1, K]``) →
  the actions after the step. The runner calls it K = 4 times (:meth:`GrootStages.repeats`,
  the manifest's ``repeat``): ``step`` row ``k`` of the identity, ``x_t`` the noise
  first and then the previous call's ``actions``; :func:`head_actions` does the same in
  torch. Unlike π0 the flow runs from the noise at ``t = 0`` to the actions at ``t = 1``:
  step ``k`` is at ``t = k / K`` with the time bucket ``int(t * 1000)`` and adds ``v / K``.
  The step picks its time, its DiT time features and its action-encoder time features
  from constant float32 tables (a product with the one-hot row, which is exact).
  Executed-prefix inpainting on GR00T's flow path: before each step the rows under
  ``prefix_mask`` are set to ``(1 - t) * noise + t * prefix_actions``, and the output
  rows under the mask equal ``prefix_actions``; an all-zero mask gives exactly
  :meth:`GrootModel.sample_actions`.

The embodiment's weight slice is fixed when the stages are built (``config.embodiment_id``):
each per-embodiment encoder reads only ``W[e]``, ``b[e]``.

Every stage makes its tensors on its inputs' device (no host tensor inside a call) and
takes and returns its declared float32 tensors whatever the weights' dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from vla_edge.archs.groot.config import FlowHeadConfig
from vla_edge.archs.groot.layers import (
    euler_times,
    on_groot_flow_path,
    sinusoid,
    time_buckets,
    timestep_features,
)
from vla_edge.archs.groot.model import (
    PREFIX_TABLES,
    VISION_TABLES,
    ActionParts,
    FlowModel,
    GrootModel,
    PrefixParts,
    VisionParts,
    register_tables,
)
from vla_edge.archs.host import TensorSpec
from vla_edge.archs.stage_io import (
    HOST_INPUTS as HOST_INPUTS,
)
from vla_edge.archs.stage_io import (
    STAGE_NAMES as STAGE_NAMES,
)
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


class VisionEncoderStage(nn.Module, VisionParts):
    """images ``[n_slots, 3, S, S]`` → ``(image_tokens, deepstack_tokens)``, float32."""

    def __init__(self, model: GrootModel) -> None:
        super().__init__()
        self.config = model.config
        self.visual = model.visual
        register_tables(self, model, VISION_TABLES)

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The vision tower per slot: merged tokens and the deepstack taps."""
        tokens, deepstack = self.embed_images(images)
        return tokens.to(torch.float32), deepstack.to(torch.float32)


class FusionStage(nn.Module, PrefixParts):
    """Image tokens, the prompt and the state → the DiT's context, its masks, the state token.

    Holds the cut language model (token table, kept layers, unread final norm), ``vlln``,
    the VL self-attention and the state encoder.
    """

    def __init__(self, model: GrootModel) -> None:
        super().__init__()
        self.config = model.config
        self.language_model = model.language_model
        self.vlln = model.vlln
        self.vl_self_attention = model.vl_self_attention
        self.state_encoder = model.state_encoder
        register_tables(self, model, PREFIX_TABLES)

    def forward(
        self,
        image_tokens: torch.Tensor,
        deepstack_tokens: torch.Tensor,
        image_mask: torch.Tensor,
        token_ids: torch.Tensor,
        token_mask: torch.Tensor,
        state: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(vl_tokens, vl_text_mask, vl_image_mask, state_tokens)``, float32."""
        outs = self.fuse(image_tokens, deepstack_tokens, image_mask, token_ids, token_mask, state)
        return tuple(o.to(torch.float32) for o in outs)  # type: ignore[return-value]


class EulerStep(nn.Module):
    """One Euler step of GR00T's flow: every version's ``action_head`` stage (base).

    Holds the model's DiT, action encoder and decoder, position table and the ``extra``
    modules its ``velocity`` reads. The K flow times (``step_times`` ``[K, 1]``), the DiT's
    time features (``dit_times`` ``[K, timestep_channels]``) and the action encoder's
    (``action_times`` ``[K, E]``) are constants computed once on the host in float32 and
    kept as float32 buffers on the model's device.
    """

    config: FlowHeadConfig
    velocity: Callable[..., torch.Tensor]

    def __init__(self, model: FlowModel, extra: tuple[str, ...] = ()) -> None:
        super().__init__()
        c = model.config
        self.config = c
        for name in ("dit", "action_encoder", "action_decoder", "position_embedding", *extra):
            setattr(self, name, getattr(model, name))
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

    def euler_step(
        self,
        context: tuple[torch.Tensor, ...],
        noise: torch.Tensor,
        prefix_actions: torch.Tensor,
        prefix_mask: torch.Tensor,
        x_t: torch.Tensor,
        step: torch.Tensor,
    ) -> torch.Tensor:
        """Actions ``[1, H, A]`` after the Euler step ``step`` (one-hot) from ``x_t``.

        ``context``: the fusion's outputs, as ``velocity`` takes them. Rows under
        ``prefix_mask`` equal ``prefix_actions``.
        """
        keep, free = executed_prefix_masks(prefix_mask)
        step = step.to(torch.float32)
        t = torch.mm(step, self.step_times).reshape(1, 1, 1)
        x_t = on_groot_flow_path(x_t, t, noise, prefix_actions, keep, free)
        times = (torch.mm(step, self.dit_times), torch.mm(step, self.action_times))
        v_t = self.velocity(*context, x_t, *times, self.config.embodiment_id)
        x_t = x_t + self.dt * v_t
        return free * x_t + keep * prefix_actions


class ActionHeadStep(EulerStep, ActionParts):
    """N1.7's Euler step: the fusion outputs, noise, prefix, ``x_t``, ``step`` → actions."""

    def forward(
        self,
        vl_tokens: torch.Tensor,
        vl_text_mask: torch.Tensor,
        vl_image_mask: torch.Tensor,
        state_tokens: torch.Tensor,
        noise: torch.Tensor,
        prefix_actions: torch.Tensor,
        prefix_mask: torch.Tensor,
        x_t: torch.Tensor,
        step: torch.Tensor,
    ) -> torch.Tensor:
        """Actions ``[1, H, A]`` after the Euler step ``step`` (one-hot) from ``x_t``."""
        context = (vl_tokens, vl_text_mask, vl_image_mask, state_tokens)
        return self.euler_step(context, noise, prefix_actions, prefix_mask, x_t, step)


class FlowStageSet(StageSet):
    """What every GR00T version's stage set shares (mixin; needs ``model``).

    The declarations of the images, the host's prompt and state, and the action head's
    step; the action head's loop; the example inputs.
    """

    model: FlowModel
    inputs: Callable[[], dict[str, list[TensorSpec]]]

    def image_spec(self) -> TensorSpec:
        """The vision encoder's input."""
        c = self.model.config
        v = c.vision
        return TensorSpec(
            "images", (c.n_slots, 3, v.image_size, v.image_size), "float32", "host:images"
        )

    def prompt_specs(self) -> list[TensorSpec]:
        """The fusion's host inputs after the image tokens: slot mask, prompt, state."""
        c = self.model.config
        return [
            TensorSpec("image_mask", (c.n_slots,), "float32", "host:image_mask"),
            TensorSpec("token_ids", (1, c.max_token_len), "int64", "host:token_ids"),
            TensorSpec("token_mask", (1, c.max_token_len), "float32", "host:token_mask"),
            TensorSpec("state", (1, c.max_state_dim), "float32", "host:state"),
        ]

    def step_specs(self) -> list[TensorSpec]:
        """The action head's inputs from the state token on (noise, prefix, ``x_t``, step)."""
        c = self.model.config
        chunk = (1, c.action_horizon, c.max_action_dim)
        return [
            TensorSpec(
                "state_tokens",
                (1, 1, c.input_embedding_dim),
                "float32",
                "stage:fusion.state_tokens",
            ),
            TensorSpec("noise", chunk, "float32", "host:noise"),
            TensorSpec("prefix_actions", chunk, "float32", "host:prefix_actions"),
            TensorSpec("prefix_mask", (1, c.action_horizon), "float32", "host:prefix_mask"),
            TensorSpec("x_t", chunk, "float32", "host:noise"),
            TensorSpec("step", (1, c.flow_steps), "float32", "repeat"),
        ]

    def repeats(self) -> dict[str, dict[str, object]]:
        """The action head's loop, as the manifest's ``stages.action_head.repeat``."""
        return flow_step_repeat(self.model.config.flow_steps)

    def example_inputs(self, seed: int = 0) -> dict[str, tuple[torch.Tensor, ...]]:
        """Example inputs for every stage (random, of the declared shapes and dtypes).

        The image mask marks the last slot absent and the prompt fills half the token
        slots, so masks are exercised when tracing.
        """
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

    def chained_inputs(self, seed: int = 0) -> dict[str, tuple[torch.Tensor, ...]]:
        """Each stage's example inputs, chained: each reads its predecessor's real outputs.

        The executed-prefix mask covers the head's first two rows, so tracing sees it.
        Contiguous (ExecuTorch fixes each input's dim order from its example).
        """
        ex = self.example_inputs(seed)
        modules = self.modules()
        with torch.no_grad():
            vision = modules["vision_encoder"](*ex["vision_encoder"])
            vision = (vision,) if isinstance(vision, torch.Tensor) else tuple(vision)
            host = ex["fusion"][len(vision) :]
            fused = modules["fusion"](*vision, *host)
        noise, prefix_actions, prefix_mask, x_t, step = ex["action_head"][len(fused) :]
        prefix_mask = torch.zeros_like(prefix_mask)
        prefix_mask[0, : min(2, prefix_mask.shape[1] - 1)] = 1.0
        chained = {
            "vision_encoder": ex["vision_encoder"],
            "fusion": (*vision, *host),
            "action_head": (*fused, noise, prefix_actions, prefix_mask, x_t, step),
        }
        return {
            name: tuple(t.detach().contiguous().clone() for t in tensors)
            for name, tensors in chained.items()
        }


@dataclass
class GrootStages(FlowStageSet):
    """The three stages of one N1.7 model, their example inputs and tensor declarations."""

    model: GrootModel
    vision_encoder: VisionEncoderStage
    fusion: FusionStage
    action_head: ActionHeadStep

    def _shapes(self) -> dict[str, tuple[int, ...]]:
        c = self.model.config
        v = c.vision
        tokens = (c.n_slots, v.num_tokens, c.text.width)
        return {
            "image_tokens": tokens,
            "deepstack_tokens": (len(v.deepstack_layers), *tokens),
            "vl_tokens": (1, c.prefix_len, c.text.width),
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
                TensorSpec(
                    "deepstack_tokens",
                    s["deepstack_tokens"],
                    "float32",
                    "stage:vision_encoder.deepstack_tokens",
                ),
                *self.prompt_specs(),
            ],
            "action_head": [
                TensorSpec("vl_tokens", s["vl_tokens"], "float32", "stage:fusion.vl_tokens"),
                TensorSpec("vl_text_mask", s["vl_mask"], "float32", "stage:fusion.vl_text_mask"),
                TensorSpec("vl_image_mask", s["vl_mask"], "float32", "stage:fusion.vl_image_mask"),
                *self.step_specs(),
            ],
        }

    def outputs(self) -> dict[str, list[TensorSpec]]:
        """Each stage's outputs, in the order its ``forward`` returns them."""
        s = self._shapes()
        return {
            "vision_encoder": [
                TensorSpec("image_tokens", s["image_tokens"], "float32", "output"),
                TensorSpec("deepstack_tokens", s["deepstack_tokens"], "float32", "output"),
            ],
            "fusion": [
                TensorSpec("vl_tokens", s["vl_tokens"], "float32", "output"),
                TensorSpec("vl_text_mask", s["vl_mask"], "float32", "output"),
                TensorSpec("vl_image_mask", s["vl_mask"], "float32", "output"),
                TensorSpec("state_tokens", s["state_tokens"], "float32", "output"),
            ],
            "action_head": [TensorSpec("actions", s["chunk"], "float32", "output")],
        }


def build_stages(model: GrootModel) -> GrootStages:
    """The three stages of ``model``, sharing its parameters (no copies)."""
    return build_stage_set(GrootStages, model, VisionEncoderStage, FusionStage, ActionHeadStep)


@torch.no_grad()
def run_stages(
    stages: GrootStages,
    images: torch.Tensor,
    image_mask: torch.Tensor,
    token_ids: torch.Tensor,
    token_mask: torch.Tensor,
    state: torch.Tensor,
    noise: torch.Tensor,
    prefix_actions: torch.Tensor | None = None,
    prefix_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Run the three stages in order, as a runner would (no executed prefix by default)."""
    tokens, deepstack = stages.vision_encoder(images)
    fused = stages.fusion(tokens, deepstack, image_mask, token_ids, token_mask, state)
    prefix_actions, prefix_mask = default_executed_prefix(noise, prefix_actions, prefix_mask)
    return head_actions(stages, *fused, noise, prefix_actions, prefix_mask)


@torch.no_grad()
def head_actions(
    stages: GrootStages,
    vl_tokens: torch.Tensor,
    vl_text_mask: torch.Tensor,
    vl_image_mask: torch.Tensor,
    state_tokens: torch.Tensor,
    noise: torch.Tensor,
    prefix_actions: torch.Tensor,
    prefix_mask: torch.Tensor,
) -> torch.Tensor:
    """The action head's K calls, as a runner makes them (:func:`.stage_io.flow_calls`)."""
    fixed = (
        vl_tokens,
        vl_text_mask,
        vl_image_mask,
        state_tokens,
        noise,
        prefix_actions,
        prefix_mask,
    )
    calls = declared_calls(stages, device=noise.device)
    return flow_calls(stages.action_head, fixed, noise, calls)
