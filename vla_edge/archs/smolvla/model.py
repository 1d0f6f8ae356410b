"""SmolVLA as one torch module whose state dict is LeRobot's ``VLAFlowMatching`` layout.

The module tree mirrors LeRobot's ``VLAFlowMatching`` (``modeling_smolvla.py``) and
``SmolVLMWithExpertModel`` (``smolvlm_with_expert.py``), so every checkpoint key is reachable
by name (a LeRobot file adds ``model.`` in front; see :mod:`vla_edge.archs.smolvla.layout`)::

    vlm_with_expert.vlm.model.vision_model.*   stock SmolVLMVisionTransformer (SigLIP-style)
    vlm_with_expert.vlm.model.connector.*      stock SmolVLMConnector (pixel shuffle + Linear)
    vlm_with_expert.vlm.model.text_model.*     stock LlamaModel, first num_vlm_layers layers
    vlm_with_expert.lm_expert.{layers,norm}    stock LlamaDecoderLayers (cross-attention
                                               layers' k_proj/v_proj read the backbone's
                                               key/value width) and final RMSNorm
    state_proj, action_in_proj, action_out_proj, action_time_mlp_in, action_time_mlp_out

The one deliberate departure: SmolVLM2's ``lm_head`` (``[49280, 960]``, untied, 47 M
parameters) is in LeRobot's files but no forward pass reads it; it is not built here
(:mod:`~vla_edge.archs.smolvla.layout` drops it on import).

The arithmetic is :mod:`vla_edge.archs.smolvla.layers`; :meth:`SmolVLAModel.sample_actions`
is the eager reference that the exported stages (:mod:`~vla_edge.archs.smolvla.stages`) must
equal.

Every forward runs on the device of its inputs and makes no tensor on the host, and the
weights may be in any dtype (:func:`~vla_edge.runners.torch_device.place_module`): float32
inputs are cast where they enter a weight (:func:`~vla_edge.archs.smolvla.layers.project`),
norm statistics, RoPE, softmax, the time embedding and the Euler update stay in float32, and
what leaves a stage (image tokens, the key/value cache, the actions) is float32, as declared.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn
from transformers import LlamaConfig, SmolVLMConfig
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaModel, LlamaRMSNorm
from transformers.models.smolvlm.configuration_smolvlm import SmolVLMVisionConfig
from transformers.models.smolvlm.modeling_smolvlm import (
    SmolVLMConnector,
    SmolVLMModel,
    SmolVLMVisionTransformer,
)

from vla_edge.archs.common import count_parameters
from vla_edge.archs.prefix_attention import (
    additive_mask,
    attention_mask_2d,
    embed_language_tokens,
    prefix_positions,
)
from vla_edge.archs.smolvla.config import SmolVLAConfig
from vla_edge.archs.smolvla.layers import (
    cross_attention_kv,
    expert_layer,
    flow_times,
    prefix_block_starts,
    project,
    rebase_positions,
    rope_tables,
    suffix_block_starts,
    suffix_positions,
    time_embedding,
    vlm_layer,
)
from vla_edge.archs.stage_io import collect_prefix_cache, image_prefix


def text_config(config: SmolVLAConfig) -> LlamaConfig:
    """The backbone's stock ``LlamaConfig``, already truncated to ``num_vlm_layers``.

    ``rope_theta`` is the published 100000; LeRobot's own RoPE (10000) replaces it.
    """
    t = config.text
    return LlamaConfig(
        vocab_size=t.vocab_size,
        hidden_size=t.width,
        intermediate_size=t.mlp_dim,
        num_hidden_layers=config.num_vlm_layers,
        num_attention_heads=t.num_heads,
        num_key_value_heads=t.num_kv_heads,
        head_dim=t.head_dim,
        hidden_act="silu",
        rms_norm_eps=t.rms_norm_eps,
        attention_bias=False,
        mlp_bias=False,
        tie_word_embeddings=False,
        rope_parameters={"rope_theta": 100000.0, "rope_type": "default"},
        attn_implementation="eager",
    )


def expert_config(config: SmolVLAConfig) -> LlamaConfig:
    """The expert's ``LlamaConfig``: the backbone's with LeRobot's width and MLP size."""
    hf = text_config(config)
    hf.hidden_size = config.expert_width
    hf.intermediate_size = config.expert_mlp_dim
    return hf


def vision_config(config: SmolVLAConfig) -> SmolVLMVisionConfig:
    """A stock ``SmolVLMVisionConfig`` (eager attention, tanh GELU)."""
    v = config.vision
    return SmolVLMVisionConfig(
        hidden_size=v.hidden,
        intermediate_size=v.mlp_dim,
        num_hidden_layers=v.depth,
        num_attention_heads=v.num_heads,
        patch_size=v.patch_size,
        image_size=v.image_size,
        hidden_act="gelu_pytorch_tanh",
        layer_norm_eps=v.layer_norm_eps,
        attn_implementation="eager",
    )


def smolvlm_config(config: SmolVLAConfig) -> SmolVLMConfig:
    """A stock ``SmolVLMConfig`` of the truncated backbone."""
    hf = SmolVLMConfig(
        vision_config=vision_config(config).to_dict(),
        text_config=text_config(config).to_dict(),
        scale_factor=config.vision.scale_factor,
        tie_word_embeddings=False,
    )
    hf._attn_implementation = "eager"
    hf.vision_config._attn_implementation = "eager"
    hf.text_config._attn_implementation = "eager"
    return hf


class SmolVLM(nn.Module):
    """``vlm``: LeRobot's ``SmolVLMForConditionalGeneration`` without its unread ``lm_head``.

    ``model`` is a stock ``SmolVLMModel`` (``vision_model``, ``connector``, ``text_model``)
    whose text model has only the kept layers (LeRobot slices ``layers[:num_vlm_layers]``).
    """

    def __init__(self, config: SmolVLAConfig) -> None:
        super().__init__()
        self.model = SmolVLMModel(smolvlm_config(config))


class ExpertModel(nn.Module):
    """``lm_expert``: stock Llama decoder layers and final norm, no token embedding.

    In a cross-attention layer ``k_proj`` / ``v_proj`` are
    ``Linear(vlm_kv_heads * head_dim, expert_kv_heads * head_dim, bias=False)``.
    """

    def __init__(self, config: SmolVLAConfig) -> None:
        super().__init__()
        hf = expert_config(config)
        t = config.text
        self.layers = nn.ModuleList(LlamaDecoderLayer(hf, i) for i in range(config.depth))
        for i in config.cross_attention_layers:
            attn = self.layers[i].self_attn
            attn.k_proj = nn.Linear(t.num_kv_heads * t.head_dim, t.num_kv_heads * t.head_dim, False)
            attn.v_proj = nn.Linear(t.num_kv_heads * t.head_dim, t.num_kv_heads * t.head_dim, False)
        self.norm = LlamaRMSNorm(config.expert_width, eps=t.rms_norm_eps)


class SmolVLMWithExpert(nn.Module):
    """``vlm_with_expert``: the backbone and the action expert."""

    def __init__(self, config: SmolVLAConfig) -> None:
        super().__init__()
        self.vlm = SmolVLM(config)
        self.lm_expert = ExpertModel(config)


class VisionParts:
    """Stage logic over ``vision_model`` and ``connector`` (mixin)."""

    vision_model: SmolVLMVisionTransformer
    connector: SmolVLMConnector

    def position_table(self) -> torch.Tensor:
        """The patch position embeddings ``[patches, hidden]``, added whole to the patches."""
        return self.vision_model.embeddings.position_embedding.weight

    def embed_images(self, images: torch.Tensor) -> torch.Tensor:
        """Image tokens ``[N, tokens, W]`` = ``connector(vision(images)) * sqrt(W)``, float32.

        Images ``[N, 3, H, W]`` in [-1, 1]. Every patch is real (LeRobot passes no patch
        mask), so the positions are ``0 .. patches - 1`` and the stock embedding's
        bucketised position ids reduce to the embedding table itself.
        """
        vm = self.vision_model
        patches = project(vm.embeddings.patch_embedding, images).flatten(2).transpose(1, 2)
        x = patches + self.position_table()[None]
        for layer in vm.encoder.layers:
            x = layer(x, attention_mask=None)
        tokens = self.connector(vm.post_layernorm(x)).to(torch.float32)
        return tokens * math.sqrt(tokens.shape[-1])


class PrefixParts:
    """Stage logic over the backbone's ``text_model`` and ``state_proj`` (mixin)."""

    config: SmolVLAConfig
    text_model: LlamaModel
    state_proj: nn.Linear

    def embed_language(self, token_ids: torch.Tensor) -> torch.Tensor:
        """Token embeddings ``table[ids] * sqrt(W)`` ``[1, L, W]`` for int64 ``token_ids``."""
        return embed_language_tokens(self.text_model.embed_tokens.weight, token_ids)

    def embed_prefix(
        self,
        image_tokens: torch.Tensor,
        image_mask: torch.Tensor,
        token_ids: torch.Tensor,
        token_mask: torch.Tensor,
        state: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Prefix embeddings ``[1, Lp, W]`` and the prefix pad mask bool ``[1, Lp]``.

        Every slot's (scaled) image tokens, then ``table[ids] * sqrt(W)``, then
        ``state_proj(state)`` as one token; a masked slot pads out all its tokens.

        Args:
            image_tokens: ``[n_slots, T, W]``.
            image_mask: ``[n_slots]``, nonzero for a present slot.
            token_ids: int64 ``[1, L]``; token_mask: ``[1, L]``, nonzero for a real token.
            state: ``[1, state_dim]``.
        """
        text = self.embed_language(token_ids)
        images, slot_pad = image_prefix(image_tokens.to(text.dtype), image_mask)
        state_token = project(self.state_proj, state)[:, None, :]
        embs = torch.cat([images, text, state_token], dim=1)
        state_pad = torch.ones(1, 1, dtype=torch.bool, device=embs.device)
        return embs, torch.cat([slot_pad, token_mask != 0, state_pad], dim=1)

    def prefix_cache(
        self, embs: torch.Tensor, pad: torch.Tensor
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """One pass of the backbone over the prefix.

        Positions are ``cumsum(pad) - 1``; images and language attend to each other
        bidirectionally, the state token attends to all of them, none attend to the state.

        Returns:
            per layer, the post-RoPE keys and values ``[1, kv_heads, Lp, head_dim]``.
        """
        head_dim = self.config.text.head_dim
        cos, sin = rope_tables(prefix_positions(pad), head_dim, self.config.rope_max_wavelength)
        starts = prefix_block_starts(pad.shape[1] - 1, pad.device)
        mask = additive_mask(attention_mask_2d(pad, starts))
        return collect_prefix_cache(
            self.text_model.layers,
            embs,
            lambda layer, x, keys_only: vlm_layer(
                layer, x, cos, sin, mask, head_dim=head_dim, keys_only=keys_only
            ),
        )


class ActionParts:
    """Stage logic over the expert and the projections (mixin)."""

    config: SmolVLAConfig
    expert: ExpertModel
    action_in_proj: nn.Linear
    action_out_proj: nn.Linear
    action_time_mlp_in: nn.Linear
    action_time_mlp_out: nn.Linear

    def embed_suffix(self, x_t: torch.Tensor, time_emb: torch.Tensor) -> torch.Tensor:
        """Action tokens ``[B, H, W_expert]`` for ``time_emb`` ``[B, W_expert]``.

        ``action_time_mlp_out(silu(action_time_mlp_in([action_in_proj(x_t), time_emb])))``.
        """
        actions = project(self.action_in_proj, x_t)
        times = time_emb.to(actions.dtype)[:, None, :].expand_as(actions)
        fused = self.action_time_mlp_in(torch.cat([actions, times], dim=2))
        return self.action_time_mlp_out(F.silu(fused))

    def time_embedding(self, t: torch.Tensor) -> torch.Tensor:
        """:func:`~vla_edge.archs.smolvla.layers.time_embedding` at the expert width."""
        c = self.config
        return time_embedding(t, c.expert_width, c.min_period, c.max_period)

    def expert_kv(
        self,
        prefix_keys: list[torch.Tensor] | torch.Tensor,
        prefix_values: list[torch.Tensor] | torch.Tensor,
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per expert layer, the prefix keys/values it attends over.

        Self-attention layers read the backbone's cache as it is; cross-attention layers
        read :func:`cross_attention_kv` of it. The same for every flow step. The cache
        (float32 between stages) is read in the expert's weight dtype.
        """
        head_dim = self.config.text.head_dim
        out = []
        for i, layer in enumerate(self.expert.layers):
            dtype = layer.self_attn.q_proj.weight.dtype
            kv = (prefix_keys[i].to(dtype), prefix_values[i].to(dtype))
            if self.config.is_cross_attention(i):
                kv = cross_attention_kv(layer, kv[0], kv[1], head_dim)
            out.append(kv)
        return out

    def velocity(
        self,
        expert_kv: list[tuple[torch.Tensor, torch.Tensor]],
        prefix_pad: torch.Tensor,
        x_t: torch.Tensor,
        time_emb: torch.Tensor,
    ) -> torch.Tensor:
        """One denoise step: the flow velocity ``[B, H, action_dim]`` (float32).

        Action token ``i`` sees every real prefix token and action tokens ``<= i``;
        self-attention layers place it at ``sum(prefix_pad) + i``, cross-attention
        layers at ``i``.

        Args:
            expert_kv: :meth:`expert_kv` of the prefix cache.
            prefix_pad: ``[B, Lp]``, nonzero for a real prefix token.
            x_t: ``[B, H, action_dim]``; time_emb: :meth:`time_embedding` of ``t``.
        """
        c = self.config
        embs = self.embed_suffix(x_t, time_emb)
        batch, chunk, _ = embs.shape
        prefix_pad = prefix_pad != 0
        suffix_pad = torch.ones(batch, chunk, dtype=torch.bool, device=embs.device)
        suffix_2d = attention_mask_2d(suffix_pad, suffix_block_starts(chunk, embs.device))
        prefix_2d = prefix_pad[:, None, :].expand(batch, chunk, prefix_pad.shape[1])
        self_mask = additive_mask(torch.cat([prefix_2d, suffix_2d], dim=2))
        cross_mask = additive_mask(prefix_2d)
        positions = suffix_positions(prefix_pad, chunk)
        head_dim = c.text.head_dim
        self_rope = rope_tables(positions, head_dim, c.rope_max_wavelength)
        cross_rope = rope_tables(rebase_positions(positions), head_dim, c.rope_max_wavelength)
        x = embs
        for i, layer in enumerate(self.expert.layers):
            x = expert_layer(
                layer,
                x,
                expert_kv[i],
                cross=c.is_cross_attention(i),
                self_rope=self_rope,
                cross_rope=cross_rope,
                self_mask=self_mask,
                cross_mask=cross_mask,
                head_dim=head_dim,
            )
        out = self.expert.norm(x)
        return project(self.action_out_proj, out[:, -c.chunk_size :]).to(torch.float32)


class SmolVLAModel(nn.Module, VisionParts, PrefixParts, ActionParts):
    """SmolVLA (LeRobot's ``VLAFlowMatching``) at any size of :class:`SmolVLAConfig`.

    Built in float32; :func:`~vla_edge.runners.torch_device.place_module` may cast its
    weights to bfloat16 or float16 and move it to any device.
    """

    def __init__(self, config: SmolVLAConfig) -> None:
        super().__init__()
        self.config = config
        width, expert = config.text.width, config.expert_width
        self.vlm_with_expert = SmolVLMWithExpert(config)
        self.state_proj = nn.Linear(config.state_dim, width)
        self.action_in_proj = nn.Linear(config.action_dim, expert)
        self.action_out_proj = nn.Linear(expert, config.action_dim)
        self.action_time_mlp_in = nn.Linear(2 * expert, expert)
        self.action_time_mlp_out = nn.Linear(expert, expert)

    # -- the parts -------------------------------------------------------------------------

    @property
    def vision_model(self) -> SmolVLMVisionTransformer:  # type: ignore[override]
        """The SigLIP-style vision encoder."""
        return self.vlm_with_expert.vlm.model.vision_model

    @property
    def connector(self) -> SmolVLMConnector:  # type: ignore[override]
        """Pixel shuffle and projection to the text width."""
        return self.vlm_with_expert.vlm.model.connector

    @property
    def text_model(self) -> LlamaModel:  # type: ignore[override]
        """The backbone's (truncated) Llama decoder."""
        return self.vlm_with_expert.vlm.model.text_model

    @property
    def expert(self) -> ExpertModel:  # type: ignore[override]
        """The action expert's decoder."""
        return self.vlm_with_expert.lm_expert

    @torch.no_grad()
    def sample_actions(
        self,
        images: torch.Tensor,
        image_mask: torch.Tensor,
        token_ids: torch.Tensor,
        token_mask: torch.Tensor,
        state: torch.Tensor,
        noise: torch.Tensor,
        num_steps: int | None = None,
    ) -> torch.Tensor:
        """The eager reference, as LeRobot's ``VLAFlowMatching.sample_actions``.

        A prefix pass fills a per-layer key/value cache; then Euler steps from ``x = noise``
        at ``t = 1`` with ``dt = -1/K`` at ``t = 1 + step * dt``, each step reading (never
        updating) the cache. Runs on the inputs' device; the actions are float32.

        Args:
            images: ``[n_slots, 3, H, W]`` in [-1, 1]; image_mask ``[n_slots]``.
            token_ids: int64 ``[1, L]``; token_mask ``[1, L]``.
            state: ``[1, state_dim]``; noise ``[1, chunk_size, action_dim]``.
            num_steps: Euler steps (default ``config.flow_steps``).

        Returns:
            actions ``[1, chunk_size, action_dim]``.
        """
        steps = num_steps or self.config.flow_steps
        tokens = self.embed_images(images)
        embs, pad = self.embed_prefix(tokens, image_mask, token_ids, token_mask, state)
        keys, values = self.prefix_cache(embs, pad)
        dt = -1.0 / steps
        x_t = noise.to(torch.float32)
        for t in flow_times(steps):
            time = torch.full((x_t.shape[0],), t, dtype=torch.float32, device=x_t.device)
            v_t = self.velocity(self.expert_kv(keys, values), pad, x_t, self.time_embedding(time))
            x_t = x_t + dt * v_t
        return x_t


__all__ = [
    "SmolVLAModel",
    "count_parameters",
    "expert_config",
    "smolvlm_config",
    "text_config",
    "vision_config",
]
