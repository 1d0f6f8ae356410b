"""π0 / π0.5 as one torch module whose state dict is openpi's converted PyTorch layout.

The module tree mirrors openpi's ``PI0Pytorch`` (``src/openpi/models_pytorch/pi0_pytorch.py``,
``gemma_pytorch.py``) so every checkpoint key is reachable by name::

    paligemma_with_expert.paligemma.model.vision_tower.vision_model.*   stock SiglipVisionModel
    paligemma_with_expert.paligemma.model.multi_modal_projector.linear  stock PaliGemma projector
    paligemma_with_expert.paligemma.model.language_model.*              stock GemmaModel (Gemma 2B)
    paligemma_with_expert.paligemma.lm_head                             tied to embed_tokens
    paligemma_with_expert.gemma_expert.model.{layers,norm}              stock GemmaDecoderLayers
    action_in_proj, action_out_proj, and π0: state_proj, action_time_mlp_{in,out}
                                       or π0.5: time_mlp_{in,out}

The one deliberate departure: openpi's expert is a ``GemmaForCausalLM`` whose
``lm_head`` (``[257152, 1024]``, 263 M parameters) no forward pass reads; it is
not built here (see :mod:`vla_edge.archs.pi0.layout`, which drops it on import).

The arithmetic is :mod:`vla_edge.archs.pi0.layers` (openpi's patched behaviour);
:meth:`Pi0Model.sample_actions` is the eager reference that the exported stages
(:mod:`vla_edge.archs.pi0.stages`) must equal.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn
from transformers import GemmaConfig, PaliGemmaConfig, SiglipVisionConfig
from transformers.models.gemma.modeling_gemma import GemmaDecoderLayer, GemmaModel, GemmaRMSNorm
from transformers.models.paligemma.modeling_paligemma import PaliGemmaMultiModalProjector
from transformers.models.siglip.modeling_siglip import SiglipVisionModel

from vla_edge.archs.common import count_parameters
from vla_edge.archs.pi0.config import GemmaSize, Pi0Config
from vla_edge.archs.pi0.layers import (
    AdaRMSNorm,
    additive_mask,
    attention_mask_2d,
    decoder_layer,
    embed_language_tokens,
    euler_times,
    prefix_positions,
    rms_norm,
    rope_cos_sin,
    sinusoidal_time_embedding,
    suffix_positions,
)
from vla_edge.archs.stage_io import collect_prefix_cache, image_prefix


def gemma_config(size: GemmaSize, config: Pi0Config) -> GemmaConfig:
    """A stock ``GemmaConfig`` for one of the two decoders (eager attention)."""
    hf = GemmaConfig(
        vocab_size=config.vocab_size,
        hidden_size=size.width,
        intermediate_size=size.mlp_dim,
        num_hidden_layers=size.depth,
        num_attention_heads=size.num_heads,
        num_key_value_heads=size.num_kv_heads,
        head_dim=size.head_dim,
        hidden_act="gelu_pytorch_tanh",
        rms_norm_eps=config.rms_norm_eps,
        rope_parameters={"rope_theta": config.rope_theta, "rope_type": "default"},
        attn_implementation="eager",
    )
    return hf


def siglip_config(config: Pi0Config) -> SiglipVisionConfig:
    """A stock ``SiglipVisionConfig`` (no pooling head, eager attention, tanh GELU)."""
    v = config.vision
    hf = SiglipVisionConfig(
        hidden_size=v.hidden,
        intermediate_size=v.mlp_dim,
        num_hidden_layers=v.depth,
        num_attention_heads=v.num_heads,
        patch_size=v.patch_size,
        image_size=v.image_size,
        hidden_act="gelu_pytorch_tanh",
        layer_norm_eps=1e-6,
        vision_use_head=False,
        attn_implementation="eager",
    )
    hf.projection_dim = config.projection_dim
    return hf


class VisionTower(nn.Module):
    """``vision_tower.vision_model``: transformers 4.x's SigLIP key level.

    Wraps 5.x's ``SiglipVisionModel``, which dropped the ``vision_model`` attribute.
    """

    def __init__(self, config: SiglipVisionConfig) -> None:
        super().__init__()
        self.vision_model = SiglipVisionModel(config)
        self.vision_model.config._attn_implementation = "eager"

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """SigLIP's last hidden state ``[N, tokens, hidden]`` for images ``[N, 3, H, W]``."""
        vm = self.vision_model
        conv = vm.embeddings.patch_embedding
        patches = conv(images.to(conv.weight.dtype)).flatten(2).transpose(1, 2)
        x = patches + vm.embeddings.position_embedding.weight[None]
        for layer in vm.encoder.layers:
            x = layer(x, attention_mask=None)
        return vm.post_layernorm(x)


class PaliGemmaInner(nn.Module):
    """``paligemma.model``: vision tower, projector and language model."""

    def __init__(self, config: Pi0Config) -> None:
        super().__init__()
        vision = siglip_config(config)
        text = gemma_config(config.paligemma, config)
        self.vision_tower = VisionTower(vision)
        self.multi_modal_projector = PaliGemmaMultiModalProjector(
            PaliGemmaConfig(
                vision_config=vision, text_config=text, projection_dim=config.projection_dim
            )
        )
        self.language_model = GemmaModel(text)
        self.language_model.config._attn_implementation = "eager"


class PaliGemma(nn.Module):
    """``paligemma``: the inner model and ``lm_head``.

    ``lm_head`` is tied to the token embedding, as in ``PaliGemmaForConditionalGeneration``;
    it costs no memory and no forward pass reads it.
    """

    def __init__(self, config: Pi0Config) -> None:
        super().__init__()
        self.model = PaliGemmaInner(config)
        table = self.model.language_model.embed_tokens.weight
        self.lm_head = nn.Linear(table.shape[1], table.shape[0], bias=False)
        self.lm_head.weight = table


class ExpertModel(nn.Module):
    """``gemma_expert.model``: stock Gemma decoder layers and final norm.

    No token embedding (openpi sets it to ``None``). π0.5 swaps every norm for
    :class:`AdaRMSNorm`.
    """

    def __init__(self, config: Pi0Config) -> None:
        super().__init__()
        hf = gemma_config(config.expert, config)
        width = config.expert.width
        self.layers = nn.ModuleList(GemmaDecoderLayer(hf, i) for i in range(config.expert.depth))
        if config.pi05:
            for layer in self.layers:
                layer.input_layernorm = AdaRMSNorm(width, width, config.rms_norm_eps)
                layer.post_attention_layernorm = AdaRMSNorm(width, width, config.rms_norm_eps)
            self.norm: nn.Module = AdaRMSNorm(width, width, config.rms_norm_eps)
        else:
            self.norm = GemmaRMSNorm(width, eps=config.rms_norm_eps)


class GemmaExpert(nn.Module):
    """``gemma_expert``: openpi's ``GemmaForCausalLM`` without its unread ``lm_head``."""

    def __init__(self, config: Pi0Config) -> None:
        super().__init__()
        self.model = ExpertModel(config)


class PaliGemmaWithExpert(nn.Module):
    """``paligemma_with_expert``: the VLM and the action expert."""

    def __init__(self, config: Pi0Config) -> None:
        super().__init__()
        self.paligemma = PaliGemma(config)
        self.gemma_expert = GemmaExpert(config)


class VisionParts:
    """Stage logic over ``vision_tower`` and ``multi_modal_projector`` (mixin)."""

    vision_tower: VisionTower
    multi_modal_projector: nn.Module

    def embed_images(self, images: torch.Tensor) -> torch.Tensor:
        """Image tokens ``[N, tokens, width]`` = projector(SigLIP(images)), images in [-1, 1].

        Not divided by ``sqrt(width)`` (openpi's patched ``get_image_features``).
        """
        return self.multi_modal_projector(self.vision_tower(images))


class PrefixParts:
    """Stage logic over PaliGemma's ``language_model`` (mixin; ``config`` is a Pi0Config)."""

    config: Pi0Config
    language_model: GemmaModel

    def embed_prefix(
        self,
        image_tokens: torch.Tensor,
        image_mask: torch.Tensor,
        token_ids: torch.Tensor,
        token_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Prefix embeddings ``[1, Lp, W]`` and the prefix pad mask bool ``[1, Lp]``.

        Every slot's image tokens, then the text; a masked slot pads out all its tokens.

        Args:
            image_tokens: ``[n_slots, T, W]``.
            image_mask: ``[n_slots]``, nonzero for a present slot.
            token_ids: int64 ``[1, L]``; token_mask: ``[1, L]``, nonzero for a real token.
        """
        images, slot_pad = image_prefix(image_tokens, image_mask)
        text = embed_language_tokens(self.language_model.embed_tokens.weight, token_ids)
        embs = torch.cat([images.to(text.dtype), text], dim=1)
        pad = torch.cat([slot_pad, token_mask != 0], dim=1)
        return embs, pad

    def prefix_cache(
        self, embs: torch.Tensor, pad: torch.Tensor
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """One bidirectional pass of the language model over the prefix.

        Positions are ``cumsum(pad) - 1``; a query sees every real prefix token.

        Returns:
            per layer, the post-RoPE keys and values ``[1, kv_heads, Lp, head_dim]``.
        """
        size = self.config.paligemma
        positions = prefix_positions(pad)
        cos, sin = rope_cos_sin(positions, size.head_dim, self.config.rope_theta)
        mask = additive_mask(attention_mask_2d(pad, torch.zeros_like(pad, dtype=torch.int64)))
        return collect_prefix_cache(
            self.language_model.layers,
            embs,
            lambda layer, x, keys_only: decoder_layer(
                layer,
                x,
                cos,
                sin,
                mask,
                head_dim=size.head_dim,
                eps=self.config.rms_norm_eps,
                keys_only=keys_only,
            ),
        )


class ActionParts:
    """Stage logic over the expert and the projections (mixin; ``config`` is a Pi0Config)."""

    config: Pi0Config
    expert: ExpertModel
    action_in_proj: nn.Linear
    action_out_proj: nn.Linear

    def embed_suffix(
        self, state: torch.Tensor, x_t: torch.Tensor, time_emb: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Suffix tokens ``[B, S, W]`` and π0.5's adaRMS condition (``None`` for π0).

        π0: ``[state_proj(state)]`` then ``action_time_mlp_out(silu(action_time_mlp_in(
        [action_in_proj(x_t), time_emb])))``; π0.5: ``action_in_proj(x_t)`` with condition
        ``silu(time_mlp_out(silu(time_mlp_in(time_emb))))``. The float32 inputs (state,
        ``x_t``, the time embedding ``[B, W]``) enter the projections in their weights' dtype.
        """
        dtype = self.action_in_proj.weight.dtype
        time_emb = time_emb.to(dtype)
        actions = self.action_in_proj(x_t.to(dtype))
        if self.config.pi05:
            cond = F.silu(self.time_mlp_out(F.silu(self.time_mlp_in(time_emb))))
            return actions, cond
        time_tokens = time_emb[:, None, :].expand_as(actions)
        fused = self.action_time_mlp_out(
            F.silu(self.action_time_mlp_in(torch.cat([actions, time_tokens], dim=2)))
        )
        return torch.cat([self.state_proj(state.to(dtype))[:, None, :], fused], dim=1), None

    def suffix_block_starts(self, device: torch.device | None = None) -> torch.Tensor:
        """Suffix block starts: π0 ``[1 (state), 1, 0, ..., 0]``; π0.5 ``[1, 0, ..., 0]``.

        Made on ``device`` (a fill, no host tensor).
        """
        suffix = self.config.suffix_len
        first_actions = suffix - self.config.action_horizon
        return (torch.arange(suffix, device=device) <= first_actions).to(torch.int64)

    def velocity(
        self,
        prefix_keys: list[torch.Tensor] | torch.Tensor,
        prefix_values: list[torch.Tensor] | torch.Tensor,
        prefix_pad: torch.Tensor,
        state: torch.Tensor,
        x_t: torch.Tensor,
        time_emb: torch.Tensor,
    ) -> torch.Tensor:
        """One denoise step: the flow velocity ``[B, H, action_dim]`` (float32).

        ``time_emb`` ``[B, W]`` is the flow time's embedding
        (:func:`~vla_edge.archs.pi0.layers.sinusoidal_time_embedding`). The expert attends
        to the read-only prefix cache (masked by ``prefix_pad``) and, within the suffix, by
        :meth:`suffix_block_starts`; suffix positions continue from ``sum(prefix_pad)``.
        The output projection runs in float32 whatever the weights' dtype.
        """
        size = self.config.expert
        embs, cond = self.embed_suffix(state, x_t, time_emb)
        batch, suffix_len, _ = embs.shape
        prefix_pad = prefix_pad != 0
        suffix_pad = torch.ones(batch, suffix_len, dtype=torch.bool, device=embs.device)
        suffix_2d = attention_mask_2d(suffix_pad, self.suffix_block_starts(embs.device))
        prefix_2d = prefix_pad[:, None, :].expand(batch, suffix_len, prefix_pad.shape[1])
        mask = additive_mask(torch.cat([prefix_2d, suffix_2d], dim=2))
        positions = suffix_positions(prefix_pad, suffix_len)
        cos, sin = rope_cos_sin(positions, size.head_dim, self.config.rope_theta)
        x: torch.Tensor | None = embs
        for i, layer in enumerate(self.expert.layers):
            assert x is not None
            x, _, _ = decoder_layer(
                layer,
                x,
                cos,
                sin,
                mask,
                head_dim=size.head_dim,
                eps=self.config.rms_norm_eps,
                cond=cond,
                prefix_kv=(prefix_keys[i], prefix_values[i]),
            )
        assert x is not None
        norm = self.expert.norm
        out = norm(x, cond)[0] if cond is not None else rms_norm(x, norm.weight, norm.eps)
        proj = self.action_out_proj
        return F.linear(
            out[:, -self.config.action_horizon :].float(), proj.weight.float(), proj.bias.float()
        )


class Pi0Model(nn.Module, VisionParts, PrefixParts, ActionParts):
    """π0 or π0.5 (``config.pi05``), float32, at any size of :class:`Pi0Config`."""

    def __init__(self, config: Pi0Config) -> None:
        super().__init__()
        self.config = config
        width = config.expert.width
        self.paligemma_with_expert = PaliGemmaWithExpert(config)
        self.action_in_proj = nn.Linear(config.action_dim, width)
        self.action_out_proj = nn.Linear(width, config.action_dim)
        if config.pi05:
            self.time_mlp_in = nn.Linear(width, width)
            self.time_mlp_out = nn.Linear(width, width)
        else:
            self.state_proj = nn.Linear(config.action_dim, width)
            self.action_time_mlp_in = nn.Linear(2 * width, width)
            self.action_time_mlp_out = nn.Linear(width, width)

    # -- the parts -------------------------------------------------------------------------

    @property
    def vision_tower(self) -> VisionTower:
        """SigLIP."""
        return self.paligemma_with_expert.paligemma.model.vision_tower

    @property
    def multi_modal_projector(self) -> nn.Module:
        """The image-token projector."""
        return self.paligemma_with_expert.paligemma.model.multi_modal_projector

    @property
    def language_model(self) -> GemmaModel:  # type: ignore[override]
        """PaliGemma's Gemma decoder."""
        return self.paligemma_with_expert.paligemma.model.language_model

    @property
    def expert(self) -> ExpertModel:  # type: ignore[override]
        """The action expert's decoder."""
        return self.paligemma_with_expert.gemma_expert.model

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
        """The eager reference, as openpi's ``sample_actions``.

        A prefix pass fills a per-layer key/value cache, then Euler steps from
        ``x = noise`` at ``t = 1`` with ``dt = -1/K`` while ``t >= -dt/2`` (the times of
        :func:`~vla_edge.archs.pi0.layers.euler_times`), each step reading (never updating)
        the cache. Every tensor is made on the inputs' device; ``x`` stays float32.

        Args:
            images: ``[n_slots, 3, H, W]`` in [-1, 1]; image_mask ``[n_slots]``.
            token_ids: int64 ``[1, L]``; token_mask ``[1, L]``.
            state: ``[1, action_dim]`` (read by π0 only); noise ``[1, H, action_dim]``.
            num_steps: Euler steps (default ``config.flow_steps``).

        Returns:
            actions ``[1, H, action_dim]``.
        """
        steps = num_steps or self.config.flow_steps
        embs, pad = self.embed_prefix(self.embed_images(images), image_mask, token_ids, token_mask)
        cache = list(zip(*self.prefix_cache(embs, pad), strict=True))
        keys = [k for k, _ in cache]
        values = [v for _, v in cache]
        dt = float(np.float32(-1.0 / steps))
        x_t = noise.float()
        width = self.config.expert.width
        for time in euler_times(steps):
            t = torch.full((x_t.shape[0],), time, dtype=torch.float32, device=x_t.device)
            v_t = self.velocity(keys, values, pad, state, x_t, sinusoidal_time_embedding(t, width))
            x_t = x_t + dt * v_t
        return x_t


__all__ = ["Pi0Model", "count_parameters", "gemma_config", "siglip_config"]
