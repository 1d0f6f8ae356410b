"""GR00T N1.7 as one torch module whose state dict is upstream's checkpoint layout.

Upstream: NVIDIA/Isaac-GR00T ``gr00t/model/gr00t_n1d7/gr00t_n1d7.py`` @2d1e82fe
(``Gr00tN1d7``, ``Gr00tN1d7ActionHead``), ``gr00t/model/modules/qwen3_backbone.py``
@1a332159 (``Qwen3Backbone``), ``gr00t/model/modules/dit.py`` @2ea60d6d. The module tree
mirrors theirs, so every checkpoint key is reachable by name::

    backbone.model.model.visual.*               stock Qwen3VLVisionModel (24 blocks, deepstack)
    backbone.model.model.language_model.*       stock Qwen3VLTextModel cut to select_layer layers
    backbone.model.lm_head                      not built (see below)
    action_head.model.*                         AlternateVLDiT (time encoder, blocks, proj_out)
    action_head.{state_encoder,action_decoder}  CategorySpecificMLP (layer1/layer2 .W .b)
    action_head.action_encoder                  MultiEmbodimentActionEncoder (W1, W2, W3)
    action_head.vlln, action_head.vl_self_attention, action_head.position_embedding

The one deliberate departure: upstream's backbone is a ``Qwen3VLForConditionalGeneration``
whose ``lm_head`` (tied to the token table, ``[151936, 2048]``) no action is computed
from; it is not built here (:mod:`vla_edge.archs.groot.layout` drops it on import). The
language model's final norm is built (the checkpoint holds it) and never read.

The arithmetic is :mod:`vla_edge.archs.groot.layers`; :meth:`GrootModel.sample_actions` is
the eager reference that the stages (:mod:`vla_edge.archs.groot.stages`) must equal.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import nn
from transformers.models.qwen3_vl import Qwen3VLConfig
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLModel

from vla_edge.archs.common import count_parameters
from vla_edge.archs.groot.config import FlowHeadConfig, GrootConfig
from vla_edge.archs.groot.layers import (
    AlternateVLDiT,
    CategorySpecificMLP,
    MultiEmbodimentActionEncoder,
    SelfAttentionTransformer,
    causal_pad_mask,
    deepstack_inject,
    key_mask,
    mrope_positions,
    patchify,
    sinusoid,
    slot_layout,
    time_buckets,
    timestep_features,
    vision_block,
    vision_tables,
)


def qwen3_vl_config(config: GrootConfig) -> Qwen3VLConfig:
    """A stock ``Qwen3VLConfig`` for the backbone (eager attention, ``select_layer`` layers)."""
    v, t = config.vision, config.text
    return Qwen3VLConfig(
        vision_config={
            "depth": v.depth,
            "hidden_size": v.hidden,
            "hidden_act": "gelu_pytorch_tanh",
            "intermediate_size": v.mlp_dim,
            "num_heads": v.num_heads,
            "in_channels": 3,
            "patch_size": v.patch_size,
            "spatial_merge_size": v.spatial_merge_size,
            "temporal_patch_size": v.temporal_patch_size,
            "out_hidden_size": t.width,
            "num_position_embeddings": v.num_position_embeddings,
            "deepstack_visual_indexes": list(v.deepstack_layers),
            "rope_parameters": {"rope_type": "axial", "rope_theta": v.rope_theta},
        },
        text_config={
            "vocab_size": t.vocab_size,
            "hidden_size": t.width,
            "intermediate_size": t.mlp_dim,
            "num_hidden_layers": t.depth,
            "num_attention_heads": t.num_heads,
            "num_key_value_heads": t.num_kv_heads,
            "head_dim": t.head_dim,
            "hidden_act": "silu",
            "rms_norm_eps": t.rms_norm_eps,
            "attention_bias": False,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": t.rope_theta,
                "mrope_section": list(t.mrope_section),
                "mrope_interleaved": True,
            },
        },
        image_token_id=config.image_token_id,
        vision_start_token_id=config.vision_start_id,
        vision_end_token_id=config.vision_end_id,
        attn_implementation="eager",
    )


class Qwen3VLHolder(nn.Module):
    """Upstream's ``Qwen3VLForConditionalGeneration`` without its unread ``lm_head``."""

    def __init__(self, config: GrootConfig) -> None:
        super().__init__()
        self.model = Qwen3VLModel(qwen3_vl_config(config))


class Backbone(nn.Module):
    """Upstream's ``Qwen3Backbone`` (``backbone.model.model.{visual,language_model}``)."""

    def __init__(self, config: GrootConfig) -> None:
        super().__init__()
        self.model = Qwen3VLHolder(config)


class FlowActionHead(nn.Module):
    """The action head's modules every GR00T version has, under upstream's names.

    ``model`` is the version's DiT; ``vlln`` and the VL self-attention run at ``vl_width``,
    the width of the tokens the DiT attends to.
    """

    def __init__(self, config: FlowHeadConfig, dit: nn.Module, vl_width: int) -> None:
        super().__init__()
        c = config
        width = c.input_embedding_dim
        self.model = dit
        self.state_encoder = CategorySpecificMLP(
            c.max_num_embodiments, c.max_state_dim, c.hidden_size, width
        )
        self.action_encoder = MultiEmbodimentActionEncoder(
            c.max_action_dim, width, c.max_num_embodiments
        )
        self.action_decoder = CategorySpecificMLP(
            c.max_num_embodiments, c.hidden_size, c.hidden_size, c.max_action_dim
        )
        self.vlln = nn.LayerNorm(vl_width)
        s = c.vl_self_attention
        self.vl_self_attention = SelfAttentionTransformer(s.depth, s.num_heads, s.head_dim)
        self.position_embedding = nn.Embedding(c.max_seq_len, width)


class ActionHead(FlowActionHead):
    """Upstream's ``Gr00tN1d7ActionHead`` modules (``action_head.*``)."""

    def __init__(self, config: GrootConfig) -> None:
        super().__init__(config, AlternateVLDiT(config), config.text.width)


def _host_tables(config: GrootConfig, device: torch.device) -> dict[str, torch.Tensor]:
    """The constant tables of the vision grid and the prompt layout, on ``device``.

    Made on the host (transformers' grid helpers read their sizes there) once at build
    time, then moved; on ``meta`` they are shapes only. Made outside any fake-tensor mode
    (the FLOP count builds the model under one), whose tensors have no values to size the
    grid's ``repeat_interleave`` with.
    """
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    with unset_fake_temporarily(), torch.device("cpu"):
        indices, weights, positions = vision_tables(config.vision)
        layout = slot_layout(config, config.vision_start_id, config.vision_end_id)
    tables = {
        "interp_indices": indices,
        "interp_weights": weights,
        "rope_positions": positions,
        **layout,
    }
    return {name: value.to(device) for name, value in tables.items()}


def register_tables(
    module: nn.Module, tables: Mapping[str, torch.Tensor] | nn.Module, names: tuple[str, ...]
) -> None:
    """``names`` of ``tables`` as non-persistent buffers of ``module`` (moved by ``.to``).

    ``tables``: a mapping, or a module whose buffers of those names are shared.
    """
    for name in names:
        value = tables[name] if isinstance(tables, Mapping) else getattr(tables, name)
        module.register_buffer(name, value, persistent=False)


VISION_TABLES = ("interp_indices", "interp_weights", "rope_positions")
PREFIX_TABLES = ("layout_ids", "image_rows", "slot_rows", "is_image")


class VisionParts:
    """The vision tower's pass (mixin; needs ``config``, ``visual`` and the vision tables)."""

    config: GrootConfig
    visual: nn.Module
    interp_indices: torch.Tensor
    interp_weights: torch.Tensor
    rope_positions: torch.Tensor

    def embed_images(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Images ``[n, 3, H, W]`` in [-1, 1] → ``(image_tokens, deepstack)``.

        ``image_tokens`` ``[n, T, W]``, ``deepstack`` ``[k, n, T, W]``.

        ``T`` merged tokens per image, ``W`` the language model's width, ``k`` deepstack
        taps (each the output of vision block ``deepstack_layers[j]`` through its merger).
        """
        v = self.config.vision
        visual = self.visual
        dtype = visual.patch_embed.proj.weight.dtype
        patches = patchify(images.to(dtype), v)
        n, count, _ = patches.shape
        x = visual.patch_embed(patches.reshape(n * count, v.patch_dim)).reshape(n, count, -1)
        table = visual.pos_embed(self.interp_indices) * self.interp_weights[:, :, None]
        x = x + table.sum(1).to(x.dtype)[None]
        cos, sin = visual.rotary_pos_emb(x, self.rope_positions)
        taps = []
        for i, block in enumerate(visual.blocks):
            x = vision_block(block, x, cos, sin)
            if i in v.deepstack_layers:
                merger = visual.deepstack_merger_list[v.deepstack_layers.index(i)]
                taps.append(merger(x.reshape(n * count, -1)).reshape(n, v.num_tokens, -1))
        tokens = visual.merger(x.reshape(n * count, -1)).reshape(n, v.num_tokens, -1)
        deepstack = torch.stack(taps) if taps else tokens.new_zeros(0, *tokens.shape)
        return tokens, deepstack


class PromptParts:
    """The prompt's embedding and pad, and the state token (mixin of every version's fusion).

    Needs ``config``, ``language_model``, ``state_encoder`` and the layout tables
    ``layout_ids``, ``image_rows``, ``slot_rows`` (:func:`~.layers.slot_layout`).
    """

    config: FlowHeadConfig
    language_model: nn.Module
    state_encoder: nn.Module
    layout_ids: torch.Tensor
    image_rows: torch.Tensor
    slot_rows: torch.Tensor

    def sequence_pad(self, image_mask: torch.Tensor, token_mask: torch.Tensor) -> torch.Tensor:
        """``[1, L]`` float: 1 at the tokens that exist (present slots, real host tokens)."""
        present = torch.cat([(image_mask != 0).to(torch.float32), image_mask.new_ones(1)])
        fixed = torch.matmul(present[None].to(self.slot_rows.dtype), self.slot_rows)
        return torch.cat([fixed.to(torch.float32), token_mask.to(torch.float32)], dim=1)

    def embed_prompt(
        self,
        image_tokens: torch.Tensor,
        image_mask: torch.Tensor,
        token_ids: torch.Tensor,
        token_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The prompt's embeddings ``[1, L, W]`` and its pad ``[1, L]`` (:meth:`sequence_pad`).

        The image pads are replaced by the image tokens.
        """
        ids = torch.cat([self.layout_ids[None], token_ids], dim=1)
        x = self.language_model.embed_tokens(ids)
        n_image = self.image_rows.shape[0]
        x = x.index_copy(1, self.image_rows, image_tokens.reshape(1, n_image, -1).to(x.dtype))
        return x, self.sequence_pad(image_mask, token_mask)

    def state_token(self, state: torch.Tensor, embodiment: int | None = None) -> torch.Tensor:
        """The state ``[1, S]`` through the per-embodiment encoder: ``[1, 1, E]``.

        ``embodiment``: the weight slice, ``config.embodiment_id`` when ``None``.
        """
        e = self.config.embodiment_id if embodiment is None else embodiment
        weight = self.state_encoder.layer1.W
        return self.state_encoder(state[:, None, :].to(weight.dtype), e)


class PrefixParts(PromptParts):
    """N1.7's language model, VL self-attention and state encoder (mixin).

    Needs what :class:`PromptParts` needs, ``vlln``, ``vl_self_attention`` and the
    ``is_image`` table.
    """

    config: GrootConfig
    vlln: nn.Module
    vl_self_attention: nn.Module
    is_image: torch.Tensor

    def language_features(
        self,
        image_tokens: torch.Tensor,
        deepstack: torch.Tensor,
        image_mask: torch.Tensor,
        token_ids: torch.Tensor,
        token_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The cut language model's last hidden states ``[1, L, W]`` (no final norm), and the pad.

        The prompt layout (lead tokens, each slot wrapped in vision start/end, host tokens)
        is embedded, the image pads replaced by the image tokens, and the decoder layers
        run with M-RoPE positions, deepstack after the first layers.
        """
        lm = self.language_model
        x, pad = self.embed_prompt(image_tokens, image_mask, token_ids, token_mask)
        n_image = self.image_rows.shape[0]
        positions = mrope_positions(self.config, image_mask, token_mask)
        cos_sin = lm.rotary_emb(x, positions)
        mask = causal_pad_mask(pad, x.dtype)
        for i, layer in enumerate(lm.layers):
            x = layer(x, position_embeddings=cos_sin, attention_mask=mask)
            if i < deepstack.shape[0]:
                x = deepstack_inject(x, deepstack[i].reshape(n_image, -1), self.image_rows)
        return x, pad

    def fuse(
        self,
        image_tokens: torch.Tensor,
        deepstack: torch.Tensor,
        image_mask: torch.Tensor,
        token_ids: torch.Tensor,
        token_mask: torch.Tensor,
        state: torch.Tensor,
        embodiment: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(vl_tokens [1, L, W], text_mask [1, L], image_mask [1, L], state_tokens [1, 1, E])``.

        ``vl_tokens``: the language model's output through ``vlln`` and the VL
        self-attention (pad tokens masked as keys); the masks are float 0/1: the real
        non-image tokens and the real image tokens (the DiT's two cross-attention targets).
        ``embodiment``: as :meth:`~PromptParts.state_token`.
        """
        x, pad = self.language_features(image_tokens, deepstack, image_mask, token_ids, token_mask)
        x = self.vl_self_attention(self.vlln(x), key_mask(pad, x.dtype))
        image_seq = pad * self.is_image[None].to(pad.dtype)
        text_seq = pad - image_seq
        return x, text_seq, image_seq, self.state_token(state, embodiment)


class ActionTokens:
    """The DiT's action tokens in and the velocity out, every version alike (mixin).

    Needs ``action_encoder``, ``action_decoder`` and ``position_embedding``.
    """

    action_encoder: MultiEmbodimentActionEncoder
    action_decoder: CategorySpecificMLP
    position_embedding: nn.Embedding

    def action_tokens(
        self, x_t: torch.Tensor, action_time: torch.Tensor, embodiment: int
    ) -> torch.Tensor:
        """Actions ``x_t`` ``[1, H, A]`` → their tokens ``[1, H, E]``, with positions."""
        dtype = self.position_embedding.weight.dtype
        a = self.action_encoder(x_t.to(dtype), action_time, embodiment)
        return a + self.position_embedding.weight[: x_t.shape[1]][None]

    def decode_velocity(self, out: torch.Tensor, horizon: int, embodiment: int) -> torch.Tensor:
        """The DiT's output ``[1, S, hidden_size]`` → the velocity ``[1, H, A]`` (float32).

        Read at the last ``horizon`` tokens.
        """
        pred = self.action_decoder(out, embodiment)
        return pred[:, -horizon:].to(torch.float32)


class ActionParts(ActionTokens):
    """N1.7's velocity of the flow (mixin; needs ``config``, ``dit``, the encoders, decoder)."""

    config: GrootConfig
    dit: AlternateVLDiT

    def velocity(
        self,
        vl_tokens: torch.Tensor,
        text_mask: torch.Tensor,
        image_mask: torch.Tensor,
        state_tokens: torch.Tensor,
        x_t: torch.Tensor,
        dit_time: torch.Tensor,
        action_time: torch.Tensor,
        embodiment: int,
    ) -> torch.Tensor:
        """The predicted velocity ``[1, H, A]`` (float32) at actions ``x_t``.

        Args:
            dit_time: ``[1, timestep_channels]`` :func:`~.layers.timestep_features` of the bucket.
            action_time: ``[1, E]`` :func:`~.layers.sinusoid` of the bucket.
        """
        dtype = self.position_embedding.weight.dtype
        a = self.action_tokens(x_t, action_time, embodiment)
        tokens = torch.cat([state_tokens.to(dtype), a], dim=1)
        temb = self.dit.timestep_encoder(dit_time)
        out = self.dit(
            tokens,
            vl_tokens.to(dtype),
            temb,
            key_mask(text_mask, dtype),
            key_mask(image_mask, dtype),
        )
        return self.decode_velocity(out, x_t.shape[1], embodiment)


class FlowModel(nn.Module):
    """What every GR00T version's whole model shares.

    Its action head's modules by name, and the eager reference :meth:`sample_actions` that
    the stages must equal. Each version sets ``config`` and ``action_head`` (a
    :class:`FlowActionHead`) and mixes in ``embed_images`` (the vision encoder's outputs:
    one tensor or a tuple), ``fuse`` (the fusion's outputs) and ``velocity`` (which takes
    the fusion's outputs first).
    """

    config: FlowHeadConfig
    action_head: FlowActionHead
    embed_images: Callable[..., torch.Tensor | tuple[torch.Tensor, ...]]
    fuse: Callable[..., tuple[torch.Tensor, ...]]
    velocity: Callable[..., torch.Tensor]

    @property
    def dit(self) -> nn.Module:
        """The DiT."""
        return self.action_head.model

    @property
    def vlln(self) -> nn.LayerNorm:
        """The layer norm before the VL self-attention."""
        return self.action_head.vlln

    @property
    def vl_self_attention(self) -> SelfAttentionTransformer:
        """The VL self-attention."""
        return self.action_head.vl_self_attention

    @property
    def state_encoder(self) -> CategorySpecificMLP:
        """The per-embodiment state encoder."""
        return self.action_head.state_encoder

    @property
    def action_encoder(self) -> MultiEmbodimentActionEncoder:
        """The per-embodiment action encoder."""
        return self.action_head.action_encoder

    @property
    def action_decoder(self) -> CategorySpecificMLP:
        """The per-embodiment action decoder."""
        return self.action_head.action_decoder

    @property
    def position_embedding(self) -> nn.Embedding:
        """The action tokens' position table."""
        return self.action_head.position_embedding

    @torch.no_grad()
    def sample_actions(
        self,
        images: torch.Tensor,
        image_mask: torch.Tensor,
        token_ids: torch.Tensor,
        token_mask: torch.Tensor,
        state: torch.Tensor,
        noise: torch.Tensor,
        embodiment: int | None = None,
    ) -> torch.Tensor:
        """The eager reference: backbone, then K Euler steps from the noise (``t = 0``) to 1.

        Step ``k`` is at ``t = k / K`` with time bucket ``int(t * num_timestep_buckets)``;
        ``x <- x + v / K``. ``embodiment`` overrides ``config.embodiment_id``.
        """
        c = self.config
        e = c.embodiment_id if embodiment is None else embodiment
        vision = self.embed_images(images)
        vision = (vision,) if isinstance(vision, torch.Tensor) else vision
        context = self.fuse(*vision, image_mask, token_ids, token_mask, state, e)
        x_t = noise.to(torch.float32)
        dt = 1.0 / c.flow_steps
        for bucket in time_buckets(c.flow_steps, c.num_timestep_buckets):
            b = torch.full((1,), float(bucket), device=noise.device)
            times = (timestep_features(b, c.timestep_channels), sinusoid(b, c.input_embedding_dim))
            x_t = x_t + dt * self.velocity(*context, x_t, *times, e)
        return x_t


class GrootModel(FlowModel, VisionParts, PrefixParts, ActionParts):
    """GR00T N1.7: upstream's module tree, our fixed-shape forward (see the module docstring)."""

    def __init__(self, config: GrootConfig) -> None:
        super().__init__()
        self.config = config
        self.backbone = Backbone(config)
        self.action_head = ActionHead(config)
        device = self.action_head.vlln.weight.device
        tables = _host_tables(config, device)
        register_tables(self, tables, VISION_TABLES + PREFIX_TABLES)

    @property
    def visual(self) -> nn.Module:  # type: ignore[override]
        """The stock Qwen3-VL vision tower."""
        return self.backbone.model.model.visual

    @property
    def language_model(self) -> nn.Module:  # type: ignore[override]
        """The stock Qwen3-VL language model (cut to ``select_layer`` layers)."""
        return self.backbone.model.model.language_model


__all__ = [
    "ActionHead",
    "Backbone",
    "FlowActionHead",
    "FlowModel",
    "GrootModel",
    "PromptParts",
    "count_parameters",
    "qwen3_vl_config",
]
