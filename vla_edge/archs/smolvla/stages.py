"""SmolVLA split into three fixed-shape stages: ``vision_encoder``, ``fusion``, ``action_head``.

Each stage is an ``nn.Module`` over tensors only (no cache objects, no data-dependent
control flow), sharing the parameters of one
:class:`~vla_edge.archs.smolvla.model.SmolVLAModel`, so
``torch.export.export(stage, inputs, strict=False)`` traces it:

* ``vision_encoder``: images ``[n_slots, 3, 512, 512]`` in [-1, 1] → ``image_tokens``
  ``[n_slots, 64, 960]`` (pixel-shuffled, projected, scaled by ``sqrt(960)``).
* ``fusion``: image tokens, slot mask, token ids and mask, and the state → the backbone's
  per-layer post-RoPE key/value cache ``prefix_keys`` / ``prefix_values``
  ``[num_vlm_layers, 1, kv_heads, L_prefix, head_dim]`` and ``prefix_pad`` ``[1, L_prefix]``
  (the state is the prefix's last token, so fusion reads it, not the action head).
* ``action_head``: ONE Euler step of the flow: the cache, explicit noise, an executed
  prefix, the actions so far ``x_t`` and the ``step`` (one-hot ``[1, K]``) → the actions
  after the step. The runner calls it K times (:meth:`SmolVLAStages.repeats`, the
  manifest's ``repeat``), as π0's: ``step`` row ``k`` of the identity, ``x_t`` the noise
  first and then the previous call's ``actions``; :func:`head_actions` does the same in
  torch. The step selects its flow time and time embedding from constant tables (by a
  product with the one-hot row, which is exact), so the embedding keeps LeRobot's float64
  arithmetic and the program holds no float64. Lowering the K steps unrolled took
  memory and time growing with K (full size: 7 to 17 min and 8 to 21 GiB per recipe);
  one step does not. The cost: the cross-attention layers' projections of the cache
  are made at every call, not once per chunk (about 2 % of the head's FLOPs).
  Executed-prefix inpainting as π0's action head: before each step the rows under
  ``prefix_mask`` are set to the flow path ``t * noise + (1 - t) * prefix_actions``, and
  the output rows under the mask equal ``prefix_actions``; an all-zero mask gives exactly
  :meth:`SmolVLAModel.sample_actions`.

:func:`build_stages` returns them with example inputs and each tensor's declaration
(:class:`~vla_edge.archs.host.TensorSpec`: name, shape, dtype, source; ``source`` is
``host:<name>`` or ``stage:<stage>.<output>``).

Every stage, and :func:`run_stages` / :func:`head_actions` around them, makes its tensors on
its inputs' device (no host tensor inside a call, so each stage can be captured as a CUDA
graph) and takes and returns its declared float32 tensors whatever the weights' dtype
(:func:`~vla_edge.runners.torch_device.place_module`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from vla_edge.archs.host import TensorSpec
from vla_edge.archs.smolvla.layers import flow_times, time_embedding
from vla_edge.archs.smolvla.model import ActionParts, PrefixParts, SmolVLAModel, VisionParts
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

ACTION_PROJECTIONS = (
    "action_in_proj",
    "action_out_proj",
    "action_time_mlp_in",
    "action_time_mlp_out",
)
"""The action head's projections (``state_proj`` belongs to fusion)."""


class VisionEncoderStage(nn.Module, VisionParts):
    """images ``[n_slots, 3, H, W]`` → image tokens ``[n_slots, tokens, width]``.

    Holds only the vision encoder and the connector (the model's own modules, not copies).
    """

    def __init__(self, model: SmolVLAModel) -> None:
        super().__init__()
        self.vision_model = model.vision_model
        self.connector = model.connector

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Vision encoder, pixel shuffle, projection and ``* sqrt(width)``, per slot."""
        return self.embed_images(images)


class FusionStage(nn.Module, PrefixParts):
    """Image tokens, the prompt and the state → the prefix key/value cache and its pad mask.

    Holds only the backbone's text model (token table, kept layers, unread final norm)
    and ``state_proj``.
    """

    def __init__(self, model: SmolVLAModel) -> None:
        super().__init__()
        self.config = model.config
        self.text_model = model.text_model
        self.state_proj = model.state_proj

    def forward(
        self,
        image_tokens: torch.Tensor,
        image_mask: torch.Tensor,
        token_ids: torch.Tensor,
        token_mask: torch.Tensor,
        state: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Returns ``(prefix_keys, prefix_values, prefix_pad)``, float32 (``prefix_pad`` 0/1)."""
        embs, pad = self.embed_prefix(image_tokens, image_mask, token_ids, token_mask, state)
        keys, values, pad = stacked_cache(*self.prefix_cache(embs, pad), pad)
        return keys.to(torch.float32), values.to(torch.float32), pad


class ActionHeadStep(nn.Module, ActionParts):
    """One Euler step: the prefix cache, noise, executed prefix, ``x_t`` and ``step`` → actions.

    Holds only the action expert and the action/time projections. The K flow times
    (``step_times`` ``[K, 1]``) and their time embeddings (``time_embeddings`` ``[K, W]``,
    float64 arithmetic as LeRobot's) are constants computed here once, on the host, and kept
    as float32 buffers on the model's device (``module.to`` moves them; a weight dtype from
    ``place_module`` leaves them float32).
    """

    def __init__(self, model: SmolVLAModel) -> None:
        super().__init__()
        self.config = model.config
        self.expert = model.expert
        for name in ACTION_PROJECTIONS:
            setattr(self, name, getattr(model, name))
        c = model.config
        self.dt = -1.0 / c.flow_steps
        device = model.action_in_proj.weight.device
        times = torch.tensor(flow_times(c.flow_steps), dtype=torch.float32, device="cpu")
        table = time_embedding(times, c.expert_width, c.min_period, c.max_period)
        self.register_buffer("time_embeddings", table.to(device), persistent=False)
        self.register_buffer("step_times", times.reshape(-1, 1).to(device), persistent=False)

    def forward(
        self,
        prefix_keys: torch.Tensor,
        prefix_values: torch.Tensor,
        prefix_pad: torch.Tensor,
        noise: torch.Tensor,
        prefix_actions: torch.Tensor,
        prefix_mask: torch.Tensor,
        x_t: torch.Tensor,
        step: torch.Tensor,
    ) -> torch.Tensor:
        """Actions ``[1, H, action_dim]`` after the Euler step ``step`` (one-hot) from ``x_t``.

        Rows under ``prefix_mask`` equal ``prefix_actions`` (the next step puts them back
        on the flow path first, so after the last step they are the executed prefix). The
        step's time and embedding are picked from the tables in float32.
        """
        keep, free = executed_prefix_masks(prefix_mask)
        step = step.to(torch.float32)
        t = torch.mm(step, self.step_times).reshape(1, 1, 1)
        x_t = on_flow_path(x_t, t, noise, prefix_actions, keep, free)
        time_emb = torch.mm(step, self.time_embeddings).expand(noise.shape[0], -1)
        kv = self.expert_kv(prefix_keys, prefix_values)
        v_t = self.velocity(kv, prefix_pad, x_t, time_emb)
        x_t = x_t + self.dt * v_t
        return free * x_t + keep * prefix_actions


@dataclass
class SmolVLAStages(StageSet):
    """The three stages of one model, their example inputs and tensor declarations."""

    model: SmolVLAModel
    vision_encoder: VisionEncoderStage
    fusion: FusionStage
    action_head: ActionHeadStep

    def _cache_shape(self) -> tuple[int, ...]:
        c = self.model.config
        t = c.text
        return (c.depth, 1, t.num_kv_heads, c.prefix_len, t.head_dim)

    def inputs(self) -> dict[str, list[TensorSpec]]:
        """Each stage's inputs, in the order its ``forward`` takes them."""
        c = self.model.config
        v = c.vision
        cache = self._cache_shape()
        chunk = (1, c.chunk_size, c.action_dim)
        return {
            "vision_encoder": [
                TensorSpec(
                    "images", (c.n_slots, 3, v.image_size, v.image_size), "float32", "host:images"
                ),
            ],
            "fusion": [
                TensorSpec(
                    "image_tokens",
                    (c.n_slots, v.num_tokens, c.text.width),
                    "float32",
                    "stage:vision_encoder.image_tokens",
                ),
                TensorSpec("image_mask", (c.n_slots,), "float32", "host:image_mask"),
                TensorSpec("token_ids", (1, c.max_token_len), "int64", "host:token_ids"),
                TensorSpec("token_mask", (1, c.max_token_len), "float32", "host:token_mask"),
                TensorSpec("state", (1, c.state_dim), "float32", "host:state"),
            ],
            "action_head": [
                TensorSpec("prefix_keys", cache, "float32", "stage:fusion.prefix_keys"),
                TensorSpec("prefix_values", cache, "float32", "stage:fusion.prefix_values"),
                TensorSpec("prefix_pad", (1, c.prefix_len), "float32", "stage:fusion.prefix_pad"),
                TensorSpec("noise", chunk, "float32", "host:noise"),
                TensorSpec("prefix_actions", chunk, "float32", "host:prefix_actions"),
                TensorSpec("prefix_mask", (1, c.chunk_size), "float32", "host:prefix_mask"),
                TensorSpec("x_t", chunk, "float32", "host:noise"),
                TensorSpec("step", (1, c.flow_steps), "float32", "repeat"),
            ],
        }

    def repeats(self) -> dict[str, dict[str, object]]:
        """The action head's loop, as the manifest's ``stages.action_head.repeat``."""
        return flow_step_repeat(self.model.config.flow_steps)

    def outputs(self) -> dict[str, list[TensorSpec]]:
        """Each stage's outputs, in the order its ``forward`` returns them."""
        c = self.model.config
        cache = self._cache_shape()
        return {
            "vision_encoder": [
                TensorSpec(
                    "image_tokens",
                    (c.n_slots, c.vision.num_tokens, c.text.width),
                    "float32",
                    "output",
                ),
            ],
            "fusion": [
                TensorSpec("prefix_keys", cache, "float32", "output"),
                TensorSpec("prefix_values", cache, "float32", "output"),
                TensorSpec("prefix_pad", (1, c.prefix_len), "float32", "output"),
            ],
            "action_head": [
                TensorSpec("actions", (1, c.chunk_size, c.action_dim), "float32", "output"),
            ],
        }

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
            tokens_per_slot=c.vision.num_tokens,
            max_token_len=c.max_token_len,
            horizon=c.chunk_size,
            trailing_prefix_tokens=1,
            seed=seed,
        )


def build_stages(model: SmolVLAModel) -> SmolVLAStages:
    """The three stages of ``model``, sharing its parameters (no copies)."""
    return build_stage_set(SmolVLAStages, model, VisionEncoderStage, FusionStage, ActionHeadStep)


@torch.no_grad()
def run_stages(
    stages: SmolVLAStages,
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
    keys, values, pad = stages.fusion(tokens, image_mask, token_ids, token_mask, state)
    prefix_actions, prefix_mask = default_executed_prefix(noise, prefix_actions, prefix_mask)
    return head_actions(stages, keys, values, pad, noise, prefix_actions, prefix_mask)


@torch.no_grad()
def head_actions(
    stages: SmolVLAStages,
    prefix_keys: torch.Tensor,
    prefix_values: torch.Tensor,
    prefix_pad: torch.Tensor,
    noise: torch.Tensor,
    prefix_actions: torch.Tensor,
    prefix_mask: torch.Tensor,
) -> torch.Tensor:
    """The action head's K calls, as a runner makes them (:func:`.stage_io.flow_calls`)."""
    fixed = (prefix_keys, prefix_values, prefix_pad, noise, prefix_actions, prefix_mask)
    calls = declared_calls(stages, device=noise.device)
    return flow_calls(stages.action_head, fixed, noise, calls)
