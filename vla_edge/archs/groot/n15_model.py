"""GR00T N1.5 as one torch module whose state dict is upstream's checkpoint layout.

Upstream read (NVIDIA/Isaac-GR00T at the N1.5 release; facts in ``reference/groot.md``):
``gr00t/model/gr00t_n1.py`` (``GR00T_N1_5``: ``backbone`` then ``action_head``), the
Eagle 2.5 backbone (``gr00t/model/backbone/eagle_backbone.py``, ``eagle2_hg_model/
modeling_eagle2_5_vl.py`` @c395eca8), ``flow_matching_action_head.py`` @04c7ee10 and
``cross_attention_dit.py`` @c395eca8. The module tree mirrors theirs, so every key is
reachable by name::

    backbone.eagle_model.vision_model.vision_model.*   stock SiglipVisionModel (no pooling head)
    backbone.eagle_model.mlp1.0 | mlp1.{0,1,3}         Linear | LayerNorm, Linear, (GELU), Linear
    backbone.eagle_model.language_model.model.*        stock Qwen3Model cut to select_layer layers
    backbone.eagle_model.language_model.lm_head        not built (unread)
    backbone.eagle_linear                              Linear, only with project_to_dim
    action_head.model.*                                the DiT (:class:`CrossAttentionDiT`)
    action_head.{state_encoder,action_encoder,action_decoder,future_tokens,vlln,
                 vl_self_attention,position_embedding}

Where N1.5 differs from N1.7 (:mod:`vla_edge.archs.groot.model`), each written once here:

* :func:`pixel_shuffle`: the SigLIP patches folded 2x2 into one token (``downsample_ratio``
  0.5, when ``use_pixel_shuffle``), channels ordered (row offset, column offset,
  channel), then ``mlp1`` (:func:`projector`).
* :func:`text_positions`: plain 1-D RoPE positions, counting only the real tokens.
* The language model's output is read *after* its final norm: upstream reads
  ``hidden_states[select_layer]`` of a model cut to ``select_layer`` layers, the last
  entry, which the stock model writes after the norm (N1.7 reads before it).
* :class:`CrossAttentionDiT`: every even block (every block without interleaving)
  cross-attends to *all* the backbone's tokens (N1.7 alternates text and image tokens).
* ``future_tokens``: learned tokens between the state token and the action tokens.

Shared with N1.7, written once: the per-embodiment encoders, the time features, the
transformer block, the VL self-attention, the Euler schedule and the prompt's slot tables
(:mod:`.layers`); the action head's common modules (:class:`~.model.FlowActionHead`), the
prompt's embedding and the state token (:class:`~.model.PromptParts`), the action tokens in
and the velocity out (:class:`~.model.ActionTokens`), and the eager reference
:meth:`~.model.FlowModel.sample_actions`.

Fixed shapes at batch 1: absent image slots and pad tokens are masked out as keys
everywhere and take no position, which is upstream's computation on the sequence without
them (upstream has no pads at batch 1).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import Qwen3Config, SiglipVisionConfig
from transformers.models.qwen3.modeling_qwen3 import Qwen3Model
from transformers.models.siglip.modeling_siglip import SiglipVisionModel

from vla_edge.archs.groot.layers import (
    BasicTransformerBlock,
    TimestepEncoder,
    causal_pad_mask,
    key_mask,
    modulate_out,
    slot_layout,
)
from vla_edge.archs.groot.model import (
    ActionTokens,
    FlowActionHead,
    FlowModel,
    PromptParts,
    register_tables,
)
from vla_edge.archs.groot.n15_config import GrootN15Config, SiglipSize

# -- what differs from N1.7 ------------------------------------------------------------------


def pixel_shuffle(x: torch.Tensor, vision: SiglipSize) -> torch.Tensor:
    """SigLIP tokens ``[n, grid², D]`` → image tokens ``[n, (grid / s)², s² D]``.

    Token ``(i, j)`` of the ``grid / s`` square holds patches ``(s i + q, s j + p)`` for
    ``q, p < s``, channels ordered ``(q, p, d)``; the tokens go row-major.
    """
    n, _, dim = x.shape
    s = vision.shuffle
    if s == 1:
        return x
    g = vision.grid // s
    x = x.reshape(n, g, s, g, s, dim).permute(0, 1, 3, 2, 4, 5)
    return x.reshape(n, g * g, s * s * dim)


def text_positions(pad: torch.Tensor) -> torch.Tensor:
    """1-D RoPE positions ``[1, L]`` (float): each real token's index among the real tokens."""
    return (torch.cumsum(pad, dim=-1) - 1.0).clamp(min=0.0)


def projector(config: GrootN15Config) -> nn.Sequential:
    """``mlp1``: one ``Linear``, or ``LayerNorm, Linear, GELU, Linear`` (exact GELU)."""
    width, out = config.vision.shuffled_dim, config.text.width
    if config.projector_layers == 1:
        return nn.Sequential(nn.Linear(width, out))
    return nn.Sequential(nn.LayerNorm(width), nn.Linear(width, out), nn.GELU(), nn.Linear(out, out))


class CrossAttentionDiT(nn.Module):
    """N1.5's velocity network: blocks that cross-attend to the backbone's tokens.

    With ``interleave_self_attention`` the odd blocks attend to the DiT's own tokens
    instead (their keys and values from the DiT's width).
    """

    def __init__(self, config: GrootN15Config) -> None:
        super().__init__()
        d = config.dit
        self.interleave = config.interleave_self_attention
        self.timestep_encoder = TimestepEncoder(config.timestep_channels, d.width)
        self.transformer_blocks = nn.ModuleList(
            [
                BasicTransformerBlock(
                    d.width,
                    d.num_heads,
                    d.head_dim,
                    context_dim=None if self.self_attends(i) else config.backbone_width,
                    ada_norm=True,
                )
                for i in range(d.depth)
            ]
        )
        self.norm_out = nn.LayerNorm(d.width, eps=1e-6, elementwise_affine=False)
        self.proj_out_1 = nn.Linear(d.width, 2 * d.width)
        self.proj_out_2 = nn.Linear(d.width, config.hidden_size)

    def self_attends(self, index: int) -> bool:
        """Whether block ``index`` attends to the DiT's own tokens."""
        return self.interleave and index % 2 == 1

    def forward(
        self, tokens: torch.Tensor, context: torch.Tensor, temb: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """``tokens`` ``[B, S, D]`` → ``[B, S, hidden_size]``; ``mask``: additive, the context's."""
        for i, block in enumerate(self.transformer_blocks):
            if self.self_attends(i):
                tokens = block(tokens, temb)
            else:
                tokens = block(tokens, temb, context, mask)
        return self.proj_out_2(modulate_out(self.norm_out, self.proj_out_1, tokens, temb))


# -- the module tree -----------------------------------------------------------------------------


def siglip_config(config: GrootN15Config) -> SiglipVisionConfig:
    """A stock ``SiglipVisionConfig`` (eager attention, no pooling head)."""
    v = config.vision
    return SiglipVisionConfig(
        hidden_size=v.hidden,
        intermediate_size=v.mlp_dim,
        num_hidden_layers=v.depth,
        num_attention_heads=v.num_heads,
        num_channels=3,
        image_size=v.image_size,
        patch_size=v.patch_size,
        hidden_act="gelu_pytorch_tanh",
        layer_norm_eps=v.layer_norm_eps,
        vision_use_head=False,
        attn_implementation="eager",
    )


def qwen3_config(config: GrootN15Config) -> Qwen3Config:
    """A stock ``Qwen3Config`` for the language model (eager, ``select_layer`` layers)."""
    t = config.text
    return Qwen3Config(
        vocab_size=t.vocab_size,
        hidden_size=t.width,
        intermediate_size=t.mlp_dim,
        num_hidden_layers=t.depth,
        num_attention_heads=t.num_heads,
        num_key_value_heads=t.num_kv_heads,
        head_dim=t.head_dim,
        hidden_act="silu",
        rms_norm_eps=t.rms_norm_eps,
        attention_bias=False,
        tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": t.rope_theta},
        attn_implementation="eager",
    )


class _Holder(nn.Module):
    """A module whose one child sits under upstream's attribute name."""

    def __init__(self, name: str, child: nn.Module) -> None:
        super().__init__()
        self.add_module(name, child)


class EagleModel(nn.Module):
    """Upstream's ``Eagle2_5_VLForConditionalGeneration`` without its unread ``lm_head``."""

    def __init__(self, config: GrootN15Config) -> None:
        super().__init__()
        self.vision_model = _Holder("vision_model", SiglipVisionModel(siglip_config(config)))
        self.mlp1 = projector(config)
        self.language_model = _Holder("model", Qwen3Model(qwen3_config(config)))


class EagleBackbone(nn.Module):
    """Upstream's N1.5 ``EagleBackbone``: ``eagle_model`` and, when projected, ``eagle_linear``."""

    def __init__(self, config: GrootN15Config) -> None:
        super().__init__()
        self.eagle_model = EagleModel(config)
        if config.project_to_dim is not None:
            self.eagle_linear = nn.Linear(config.text.width, config.project_to_dim)

    def project(self, x: torch.Tensor) -> torch.Tensor:
        """``eagle_linear`` (an identity when upstream builds none)."""
        linear = getattr(self, "eagle_linear", None)
        return x if linear is None else linear(x)


class ActionHeadN15(FlowActionHead):
    """Upstream's N1.5 ``FlowmatchingActionHead`` modules (``action_head.*``)."""

    def __init__(self, config: GrootN15Config) -> None:
        super().__init__(config, CrossAttentionDiT(config), config.backbone_width)
        self.future_tokens = nn.Embedding(config.num_future_tokens, config.input_embedding_dim)


def prompt_tables(config: GrootN15Config) -> dict[str, torch.Tensor]:
    """The prompt layout's constant tables (:func:`~.layers.slot_layout`, N1.5's tokens)."""
    c = config
    return slot_layout(c, c.image_start_id, c.image_end_id, c.slot_label_ids)


PROMPT_TABLES = ("layout_ids", "image_rows", "slot_rows")


class VisionPartsN15:
    """SigLIP, pixel shuffle and ``mlp1`` (mixin; needs ``config``, ``siglip``, ``mlp1``)."""

    config: GrootN15Config
    siglip: nn.Module
    mlp1: nn.Module

    def embed_images(self, images: torch.Tensor) -> torch.Tensor:
        """Images ``[n, 3, S, S]`` in [-1, 1] → image tokens ``[n, T, W]`` (``W``: the LM's)."""
        dtype = self.siglip.embeddings.patch_embedding.weight.dtype
        patches = self.siglip(pixel_values=images.to(dtype)).last_hidden_state
        return self.mlp1(pixel_shuffle(patches, self.config.vision))


class PrefixPartsN15(PromptParts):
    """The language model, projection, ``vlln`` and VL self-attention (mixin).

    Needs what :class:`~.model.PromptParts` needs, ``backbone``, ``vlln`` and
    ``vl_self_attention``.
    """

    config: GrootN15Config
    backbone: EagleBackbone
    vlln: nn.Module
    vl_self_attention: nn.Module

    def backbone_features(
        self,
        image_tokens: torch.Tensor,
        image_mask: torch.Tensor,
        token_ids: torch.Tensor,
        token_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The backbone's features ``[1, L, backbone_width]`` and the pad ``[1, L]``.

        The cut language model after its final norm, through ``eagle_linear``.
        """
        lm = self.language_model
        x, pad = self.embed_prompt(image_tokens, image_mask, token_ids, token_mask)
        cos_sin = lm.rotary_emb(x, text_positions(pad))
        mask = causal_pad_mask(pad, x.dtype)
        for layer in lm.layers:
            x = layer(x, attention_mask=mask, position_embeddings=cos_sin)
        return self.backbone.project(lm.norm(x)), pad

    def fuse(
        self,
        image_tokens: torch.Tensor,
        image_mask: torch.Tensor,
        token_ids: torch.Tensor,
        token_mask: torch.Tensor,
        state: torch.Tensor,
        embodiment: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(vl_tokens [1, L, W], vl_mask [1, L], state_tokens [1, 1, E])``.

        ``vl_tokens``: the backbone's features through ``vlln`` and the VL self-attention
        (pad keys masked); ``vl_mask``: float 0/1, the tokens that exist; ``embodiment``:
        as :meth:`~.model.PromptParts.state_token`.
        """
        x, pad = self.backbone_features(image_tokens, image_mask, token_ids, token_mask)
        x = self.vl_self_attention(self.vlln(x), key_mask(pad, x.dtype))
        return x, pad, self.state_token(state, embodiment)


class ActionPartsN15(ActionTokens):
    """N1.5's velocity of the flow (mixin; needs ``dit``, the encoders, decoder, tables)."""

    dit: CrossAttentionDiT
    future_tokens: nn.Embedding

    def velocity(
        self,
        vl_tokens: torch.Tensor,
        vl_mask: torch.Tensor,
        state_tokens: torch.Tensor,
        x_t: torch.Tensor,
        dit_time: torch.Tensor,
        action_time: torch.Tensor,
        embodiment: int,
    ) -> torch.Tensor:
        """The predicted velocity ``[1, H, A]`` (float32) at actions ``x_t``.

        The DiT reads ``[state token, future tokens, action tokens + positions]``.
        """
        dtype = self.position_embedding.weight.dtype
        a = self.action_tokens(x_t, action_time, embodiment)
        future = self.future_tokens.weight[None].expand(a.shape[0], -1, -1)
        tokens = torch.cat([state_tokens.to(dtype), future, a], dim=1)
        temb = self.dit.timestep_encoder(dit_time)
        out = self.dit(tokens, vl_tokens.to(dtype), temb, key_mask(vl_mask, dtype))
        return self.decode_velocity(out, x_t.shape[1], embodiment)


class GrootN15Model(FlowModel, VisionPartsN15, PrefixPartsN15, ActionPartsN15):
    """GR00T N1.5: upstream's module tree, our fixed-shape forward (module docstring)."""

    def __init__(self, config: GrootN15Config) -> None:
        super().__init__()
        self.config = config
        self.backbone = EagleBackbone(config)
        self.action_head = ActionHeadN15(config)
        device = self.action_head.vlln.weight.device
        with torch.device("cpu"):
            tables = prompt_tables(config)
        register_tables(self, {k: v.to(device) for k, v in tables.items()}, PROMPT_TABLES)

    @property
    def siglip(self) -> nn.Module:  # type: ignore[override]
        """The stock SiglipVisionModel."""
        return self.backbone.eagle_model.vision_model.vision_model

    @property
    def mlp1(self) -> nn.Module:  # type: ignore[override]
        """The projector from the shuffled patches into the language model."""
        return self.backbone.eagle_model.mlp1

    @property
    def language_model(self) -> nn.Module:  # type: ignore[override]
        """The stock Qwen3Model (cut to ``select_layer`` layers)."""
        return self.backbone.eagle_model.language_model.model

    @property
    def future_tokens(self) -> nn.Embedding:  # type: ignore[override]
        """The learned tokens between the state and the actions."""
        return self.action_head.future_tokens


__all__ = [
    "ActionHeadN15",
    "CrossAttentionDiT",
    "EagleBackbone",
    "GrootN15Model",
    "pixel_shuffle",
    "projector",
    "qwen3_config",
    "siglip_config",
    "text_positions",
]
