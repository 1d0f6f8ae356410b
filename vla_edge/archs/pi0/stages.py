"""π0 / π0.5 split into three fixed-shape stages: ``vision_encoder``, ``fusion``, ``action_head``.

Each stage is an ``nn.Module`` over tensors only (no cache objects, no data-dependent
control flow), sharing the parameters of one :class:`~vla_edge.archs.pi0.model.Pi0Model`,
so ``torch.export.export(stage, inputs, strict=False)`` traces it:

* ``vision_encoder``: images ``[n_slots, 3, 224, 224]`` in [-1, 1] → ``image_tokens``.
* ``fusion``: image tokens, slot mask, token ids and mask → the language model's per-layer
  post-RoPE key/value cache ``prefix_keys`` / ``prefix_values``
  ``[depth, 1, kv_heads, L_prefix, head_dim]`` and ``prefix_pad`` ``[1, L_prefix]``.
* ``action_head``: ONE Euler step of the flow: the cache, state, explicit noise, an executed
  prefix, the actions so far ``x_t`` and the ``step`` (one-hot ``[1, K]``) → the actions
  after the step. The runner calls it K times (:meth:`Pi0Stages.repeats`, the manifest's
  ``repeat``): ``step`` the identity's rows, ``x_t`` the noise first and then the previous
  call's ``actions``; :func:`head_actions` does the same in torch. The step's flow time
  (:func:`~vla_edge.archs.pi0.layers.euler_times`) and its time embedding (float64 as
  openpi's, :func:`~vla_edge.archs.pi0.layers.time_embedding_table`) are constant tables
  picked by ``mm(step, table)``, which is exact: no float64 and no host tensor runs inside
  the program. Lowering the K
  steps unrolled in one program takes memory growing with K² (out of memory at full size
  here); one step does not. Executed-prefix inpainting: before each step the rows under
  ``prefix_mask`` are set to the flow path ``t * noise + (1 - t) * prefix_actions``, and the
  output rows under the mask equal ``prefix_actions``; an all-zero mask gives exactly
  :meth:`Pi0Model.sample_actions`.

:func:`build_stages` returns them with example inputs and each tensor's declaration
(name, shape, dtype, source), ``source`` being ``host:<name>`` for what the host feeds or
``stage:<stage>.<output>`` for an earlier stage's output.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from vla_edge.archs.host import TensorSpec
from vla_edge.archs.pi0.layers import euler_times, time_embedding_table
from vla_edge.archs.pi0.model import ActionParts, Pi0Model, PrefixParts, VisionParts
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
    on_flow_path,
    stacked_cache,
)

ACTION_PROJECTIONS = {
    False: (
        "action_in_proj",
        "action_out_proj",
        "state_proj",
        "action_time_mlp_in",
        "action_time_mlp_out",
    ),
    True: ("action_in_proj", "action_out_proj", "time_mlp_in", "time_mlp_out"),
}
"""The action head's projections (π0, π0.5)."""


class VisionEncoderStage(nn.Module, VisionParts):
    """images ``[n_slots, 3, H, W]`` → image tokens ``[n_slots, tokens, width]``.

    Holds only SigLIP and the projector (the model's own modules, not copies).
    """

    def __init__(self, model: Pi0Model) -> None:
        super().__init__()
        self.vision_tower = model.vision_tower
        self.multi_modal_projector = model.multi_modal_projector

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """SigLIP and the projector, per slot."""
        return self.embed_images(images)


class FusionStage(nn.Module, PrefixParts):
    """Image tokens and the prompt → the prefix key/value cache and its pad mask.

    Holds only PaliGemma's language model (token table and decoder layers).
    """

    def __init__(self, model: Pi0Model) -> None:
        super().__init__()
        self.config = model.config
        self.language_model = model.language_model

    def forward(
        self,
        image_tokens: torch.Tensor,
        image_mask: torch.Tensor,
        token_ids: torch.Tensor,
        token_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Returns ``(prefix_keys, prefix_values, prefix_pad)`` (``prefix_pad`` float 0/1)."""
        embs, pad = self.embed_prefix(image_tokens, image_mask, token_ids, token_mask)
        return stacked_cache(*self.prefix_cache(embs, pad), pad)


class ActionHeadStep(nn.Module, ActionParts):
    """One Euler step: the prefix cache, state, noise, executed prefix, ``x_t``, ``step`` → actions.

    Holds only the action expert and the state/action/time projections, and two float32
    constants made on the model's device: the K flow times ``step_times`` ``[K, 1]`` and
    their time embeddings ``time_embeddings`` ``[K, W]``.
    """

    def __init__(self, model: Pi0Model) -> None:
        super().__init__()
        self.config = model.config
        self.expert = model.expert
        for name in ACTION_PROJECTIONS[model.config.pi05]:
            setattr(self, name, getattr(model, name))
        self.times = euler_times(model.config.flow_steps)
        self.dt = -1.0 / model.config.flow_steps
        device = model.action_in_proj.weight.device
        table = time_embedding_table(self.times, model.config.expert.width)
        times = torch.tensor(self.times, dtype=torch.float32).reshape(-1, 1)
        self.register_buffer("time_embeddings", table.to(device), persistent=False)
        self.register_buffer("step_times", times.to(device), persistent=False)

    def forward(
        self,
        prefix_keys: torch.Tensor,
        prefix_values: torch.Tensor,
        prefix_pad: torch.Tensor,
        state: torch.Tensor,
        noise: torch.Tensor,
        prefix_actions: torch.Tensor,
        prefix_mask: torch.Tensor,
        x_t: torch.Tensor,
        step: torch.Tensor,
    ) -> torch.Tensor:
        """Actions ``[1, H, action_dim]`` (float32) after the Euler step ``step`` from ``x_t``.

        Rows under ``prefix_mask`` equal ``prefix_actions`` (the next step puts them back
        on the flow path first, so after the last step they are the executed prefix).
        """
        keep, free = executed_prefix_masks(prefix_mask)
        t = torch.mm(step, self.step_times).reshape(1, 1, 1)
        x_t = on_flow_path(x_t.float(), t, noise, prefix_actions, keep, free)
        time_emb = torch.mm(step, self.time_embeddings).expand(x_t.shape[0], -1)
        v_t = self.velocity(prefix_keys, prefix_values, prefix_pad, state, x_t, time_emb)
        x_t = x_t + self.dt * v_t
        return free * x_t + keep * prefix_actions


@dataclass
class Pi0Stages(StageSet):
    """The three stages of one model, their example inputs and tensor declarations."""

    model: Pi0Model
    vision_encoder: VisionEncoderStage
    fusion: FusionStage
    action_head: ActionHeadStep

    def inputs(self) -> dict[str, list[TensorSpec]]:
        """Each stage's inputs, in the order its ``forward`` takes them."""
        c = self.model.config
        v = c.vision
        e = c.paligemma
        cache = (e.depth, 1, e.num_kv_heads, c.prefix_len, e.head_dim)
        chunk = (1, c.action_horizon, c.action_dim)
        return {
            "vision_encoder": [
                TensorSpec(
                    "images", (c.n_slots, 3, v.image_size, v.image_size), "float32", "host:images"
                ),
            ],
            "fusion": [
                TensorSpec(
                    "image_tokens",
                    (c.n_slots, v.num_tokens, e.width),
                    "float32",
                    "stage:vision_encoder.image_tokens",
                ),
                TensorSpec("image_mask", (c.n_slots,), "float32", "host:image_mask"),
                TensorSpec("token_ids", (1, c.max_token_len), "int64", "host:token_ids"),
                TensorSpec("token_mask", (1, c.max_token_len), "float32", "host:token_mask"),
            ],
            "action_head": [
                TensorSpec("prefix_keys", cache, "float32", "stage:fusion.prefix_keys"),
                TensorSpec("prefix_values", cache, "float32", "stage:fusion.prefix_values"),
                TensorSpec("prefix_pad", (1, c.prefix_len), "float32", "stage:fusion.prefix_pad"),
                TensorSpec("state", (1, c.action_dim), "float32", "host:state"),
                TensorSpec("noise", chunk, "float32", "host:noise"),
                TensorSpec("prefix_actions", chunk, "float32", "host:prefix_actions"),
                TensorSpec("prefix_mask", (1, c.action_horizon), "float32", "host:prefix_mask"),
                TensorSpec("x_t", chunk, "float32", "host:noise"),
                TensorSpec("step", (1, c.flow_steps), "float32", "repeat"),
            ],
        }

    def repeats(self) -> dict[str, dict[str, object]]:
        """The action head's loop, as the manifest's ``stages.action_head.repeat``."""
        return flow_step_repeat(len(self.action_head.times))

    def outputs(self) -> dict[str, list[TensorSpec]]:
        """Each stage's outputs, in the order its ``forward`` returns them."""
        c = self.model.config
        e = c.paligemma
        cache = (e.depth, 1, e.num_kv_heads, c.prefix_len, e.head_dim)
        return {
            "vision_encoder": [
                TensorSpec(
                    "image_tokens", (c.n_slots, c.vision.num_tokens, e.width), "float32", "output"
                ),
            ],
            "fusion": [
                TensorSpec("prefix_keys", cache, "float32", "output"),
                TensorSpec("prefix_values", cache, "float32", "output"),
                TensorSpec("prefix_pad", (1, c.prefix_len), "float32", "output"),
            ],
            "action_head": [
                TensorSpec("actions", (1, c.action_horizon, c.action_dim), "float32", "output"),
            ],
        }

    def example_inputs(self, seed: int = 0) -> dict[str, tuple[torch.Tensor, ...]]:
        """Example inputs for every stage (random, of the declared shapes and dtypes).

        The image mask marks the last slot absent (π0's usual single-arm case) and the
        prompt fills half the token slots, so masks are exercised when tracing.
        """
        c = self.model.config
        return example_inputs(
            self.inputs(),
            vocab_size=c.vocab_size,
            n_slots=c.n_slots,
            tokens_per_slot=c.vision.num_tokens,
            max_token_len=c.max_token_len,
            horizon=c.action_horizon,
            seed=seed,
        )


def build_stages(model: Pi0Model) -> Pi0Stages:
    """The three stages of ``model``, sharing its parameters (no copies)."""
    return build_stage_set(Pi0Stages, model, VisionEncoderStage, FusionStage, ActionHeadStep)


@torch.no_grad()
def run_stages(
    stages: Pi0Stages,
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
    tokens = stages.vision_encoder(images)
    keys, values, pad = stages.fusion(tokens, image_mask, token_ids, token_mask)
    prefix_actions, prefix_mask = default_executed_prefix(noise, prefix_actions, prefix_mask)
    return head_actions(stages, keys, values, pad, state, noise, prefix_actions, prefix_mask)


@torch.no_grad()
def head_actions(
    stages: Pi0Stages,
    prefix_keys: torch.Tensor,
    prefix_values: torch.Tensor,
    prefix_pad: torch.Tensor,
    state: torch.Tensor,
    noise: torch.Tensor,
    prefix_actions: torch.Tensor,
    prefix_mask: torch.Tensor,
) -> torch.Tensor:
    """The action head's K calls, as a runner makes them (:func:`.stage_io.flow_calls`)."""
    fixed = (prefix_keys, prefix_values, prefix_pad, state, noise, prefix_actions, prefix_mask)
    calls = declared_calls(stages, device=noise.device)
    return flow_calls(stages.action_head, fixed, noise, calls)
