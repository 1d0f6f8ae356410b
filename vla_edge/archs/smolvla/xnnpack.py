"""SmolVLA's stages with only operators XNNPACK takes (same parameters, same maths).

:mod:`vla_edge.archs.smolvla.stages` is the readable reference; lowered to ExecuTorch
through the generic rewrite (:mod:`vla_edge.export.xnnpack_rewrites`) it split, at the
tiny size, into 5 XNNPACK calls in the vision encoder, 22 in fusion and 48 in the action
head, then ten unrolled Euler steps (5, 10 and 26 with two layers), with portable kernels
between them (the 4-D attention's and the
grouped-query repeat's ``expand``, RMSNorm's 3-D ``mean``, RoPE's ``split``, masks built
with comparisons, ``where`` and ``bitwise_and``, ``arange`` / ``full`` / ``pow`` in the
graph, ``select`` of one layer from the stacked cache). Each stage here is rewritten as
:mod:`vla_edge.archs.pi0.xnnpack` rewrites π0's, with the shared helpers of
:mod:`vla_edge.archs.xnnpack_blocks` (4-D-mean norms,
attention with the heads folded into a 3-D ``bmm`` batch, rotate-half RoPE on tables as
wide as the head, the cache stacked in concatenations of at most ``MAX_CAT_INPUTS``),
so each stage lowers to one XNNPACK call. SmolVLA's own parts:

* the vision tower (SmolVLM's SigLIP-style encoder) and the connector: its pixel shuffle
  as reshapes and permutes (:func:`pixel_shuffle`), then its projection;
* Llama RMSNorm ``w * x̂`` (π0's Gemma norm is ``(1 + w) * x̂``);
* LeRobot's RoPE, ``position / timescale`` with the timescale
  ``max_wavelength ** (2i / D)`` a constant computed at construction as the reference
  computes it, both halves side by side;
* masks in float arithmetic: ``allowed ∈ {0, 1}`` gives the additive mask
  ``(allowed - 1) * -MASKED_VALUE``, exactly the reference's
  ``where(allowed, 0, MASKED_VALUE)`` (:func:`additive_mask`, finite in half
  precision); the prefix's block mask (the state token starts a
  block of its own) and the action tokens' causal mask are constants;
* prefix positions ``cumsum(pad) - 1`` as ``pad @ triu(1) - 1``, the action tokens'
  ``sum(prefix_pad) + i`` as ``prefix_pad @ 1 + i`` (exact: integers below 2**24 in
  float32), once per chunk; the cross-attention layers' query positions are re-based to
  ``i`` whatever the prefix, so their RoPE tables are constants;
* the action head is one Euler step (the runner calls it K times): its flow time and
  time embedding are the one-hot ``step`` input times constant tables (``mm``); the
  cross-attention layers' projections of the backbone's cache are made at every call.

What stays outside XNNPACK, by design: the token-embedding lookup in ``fusion`` (a gather),
and in 8da4w the cast of its gathered int8 rows — see :data:`NOT_DELEGATED_WHY`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from vla_edge.archs.prefix_attention import attention_mask_2d
from vla_edge.archs.smolvla.config import SmolVLAConfig
from vla_edge.archs.smolvla.layers import prefix_block_starts, rope_tables, suffix_block_starts
from vla_edge.archs.smolvla.stages import (
    ACTION_PROJECTIONS,
    ActionHeadStep,
    FusionStage,
    VisionEncoderStage,
)
from vla_edge.archs.stage_io import on_flow_path
from vla_edge.archs.xnnpack_blocks import (
    additive_mask,
    folded_attention,
    rms_normed,
    rotate,
    split_heads,
    stack_layers,
    vision_features,
)

NOT_DELEGATED_WHY = {
    "aten_embedding_default": "token-embedding lookup (a gather): XNNPACK has no gather "
    "operator, and a one-hot matmul over SmolVLM2's 49 280-row table would cost "
    "49 280 x 960 multiply-adds per prompt token; 8da4w: the int8 rows and their scales, "
    "two lookups",
    "dim_order_ops__to_dim_order_copy_default": "8da4w: the int8 rows gathered from the "
    "token table cast to float32 before their scale (with the gather, outside XNNPACK)",
}
"""Why each operator left outside XNNPACK in these stages is there (recorded in the manifest)."""


def llama_rms_norm(norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A stock ``LlamaRMSNorm``, ``weight * x * rsqrt(mean(x²) + eps)``, with 4-D means."""
    return norm.weight * rms_normed(x, norm.variance_epsilon)


def attention_then_mlp(layer: nn.Module, x: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
    """A Llama layer after its attention: ``o_proj`` and residual, then norm, MLP and residual."""
    x = x + layer.self_attn.o_proj(attended)
    return x + layer.mlp(llama_rms_norm(layer.post_attention_layernorm, x))


def both_halves(table: torch.Tensor) -> torch.Tensor:
    """A RoPE table of ``D / 2`` columns side by side with itself: ``D`` columns."""
    return torch.cat([table, table], dim=-1)


def pixel_shuffle(x: torch.Tensor, factor: int) -> torch.Tensor:
    """The stock ``SmolVLMConnector.pixel_shuffle`` with reshapes (its views need contiguity).

    ``[n, side², C]`` → ``[n, (side / factor)², C * factor²]``: each token is a
    ``factor x factor`` block of patches, reshapes and permutes only.
    """
    n, seq, c = x.shape
    side = math.isqrt(seq)
    x = x.reshape(n, side, side // factor, c * factor).permute(0, 2, 1, 3)
    x = x.reshape(n, side // factor, side // factor, c * factor * factor).permute(0, 2, 1, 3)
    return x.reshape(n, seq // (factor * factor), c * factor * factor)


class LeRobotRope(nn.Module):
    """LeRobot's RoPE tables from float positions, the timescale a constant.

    ``position / max_wavelength ** ((2 / D) * i)``, the reference's
    :func:`~vla_edge.archs.smolvla.layers.rope_tables` with the timescale computed here
    as it computes it and repeated for the second half (:func:`rotate` takes both).
    """

    def __init__(self, head_dim: int, max_wavelength: float) -> None:
        super().__init__()
        exponents = (2.0 / head_dim) * torch.arange(head_dim // 2, dtype=torch.float32)
        timescale = both_halves(max_wavelength**exponents).reshape(1, 1, head_dim)
        self.register_buffer("timescale", timescale, persistent=False)

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Positions ``[B, S]`` (float) → cos, sin ``[B, 1, S, D]``."""
        b, s = positions.shape
        radians = positions.reshape(b, s, 1) / self.timescale
        d = radians.shape[-1]
        return radians.cos().reshape(b, 1, s, d), radians.sin().reshape(b, 1, s, d)


class XnnpackVisionEncoder(nn.Module):
    """:class:`VisionEncoderStage` (SmolVLM's vision tower and connector) for XNNPACK."""

    def __init__(self, stage: VisionEncoderStage) -> None:
        super().__init__()
        vm = stage.vision_model
        self.patch_embedding = vm.embeddings.patch_embedding
        # the table itself (added whole, never looked up), shared with the reference; not
        # its nn.Embedding, which an 8da4w export would turn into int8 rows
        self.position_embedding = stage.position_table()
        self.layers = vm.encoder.layers
        self.post_layernorm = vm.post_layernorm
        self.factor = stage.connector.scale_factor
        self.projection = stage.connector.modality_projection.proj
        attn = self.layers[0].self_attn
        self.heads, self.head_dim, self.scale = attn.num_heads, attn.head_dim, attn.scale
        self.token_scale = math.sqrt(self.projection.out_features)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Images ``[n, 3, H, W]`` in [-1, 1] → image tokens ``[n, T, width]``."""
        tokens = self.projection(pixel_shuffle(vision_features(self, images), self.factor))
        return tokens * self.token_scale


class XnnpackFusion(nn.Module):
    """:class:`FusionStage` (the prefix and the backbone's key/value cache) for XNNPACK."""

    def __init__(self, stage: FusionStage) -> None:
        super().__init__()
        c: SmolVLAConfig = stage.config
        t = c.text
        # Llama's table is a plain nn.Embedding (no scale inside); 8da4w replaces it
        self.embed_tokens = stage.text_model.embed_tokens
        self.layers = stage.text_model.layers
        self.state_proj = stage.state_proj
        self.heads, self.kv_heads, self.head_dim = t.num_heads, t.num_kv_heads, t.head_dim
        self.text_scale = math.sqrt(t.width)
        length = c.prefix_len
        self.register_buffer("slot_ones", torch.ones(1, c.vision.num_tokens), persistent=False)
        self.register_buffer("state_pad", torch.ones(1, 1), persistent=False)
        self.register_buffer("cumsum", torch.triu(torch.ones(length, length)), persistent=False)
        # big_vision's block mask of the prefix alone: nothing but the state sees the state
        blocks = attention_mask_2d(
            torch.ones(1, length, dtype=torch.bool), prefix_block_starts(length - 1)
        )
        self.register_buffer("blocks", blocks.float(), persistent=False)
        self.rope = LeRobotRope(t.head_dim, c.rope_max_wavelength)

    def _layer(
        self,
        layer: nn.Module,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        mask: torch.Tensor,
        keys_only: bool,
    ) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
        """:func:`~vla_edge.archs.smolvla.layers.vlm_layer`: ``(output or None, k, v)``."""
        h = llama_rms_norm(layer.input_layernorm, x)
        a = layer.self_attn
        k = rotate(split_heads(a.k_proj(h), self.kv_heads, self.head_dim), *rope)
        v = split_heads(a.v_proj(h), self.kv_heads, self.head_dim)
        if keys_only:
            return None, k, v
        q = rotate(split_heads(a.q_proj(h), self.heads, self.head_dim), *rope)
        attended = folded_attention(q, k, v, self.head_dim**-0.5, mask)
        return attention_then_mlp(layer, x, attended), k, v

    def forward(
        self,
        image_tokens: torch.Tensor,
        image_mask: torch.Tensor,
        token_ids: torch.Tensor,
        token_mask: torch.Tensor,
        state: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(prefix_keys, prefix_values, prefix_pad)``; the masks are 0/1 floats."""
        n, t, width = image_tokens.shape
        text = self.embed_tokens(token_ids) * self.text_scale
        state_token = self.state_proj(state).reshape(1, 1, width)
        embs = torch.cat([image_tokens.reshape(1, n * t, width), text, state_token], dim=1)
        slot_pad = (image_mask.reshape(n, 1) * self.slot_ones).reshape(1, n * t)
        pad = torch.cat([slot_pad, token_mask, self.state_pad], dim=1)
        length = pad.shape[1]
        rope = self.rope(torch.mm(pad, self.cumsum) - 1.0)
        allowed = pad.reshape(1, length, 1) * pad.reshape(1, 1, length) * self.blocks
        mask = additive_mask(allowed).reshape(1, 1, length, length)
        keys, values = [], []
        x: torch.Tensor | None = embs
        for i, layer in enumerate(self.layers):
            assert x is not None
            x, k, v = self._layer(layer, x, rope, mask, keys_only=i == len(self.layers) - 1)
            keys.append(k)
            values.append(v)
        return stack_layers(keys), stack_layers(values), pad


class XnnpackActionHead(nn.Module):
    """:class:`ActionHeadStep` (one Euler step of the expert) for XNNPACK."""

    def __init__(self, stage: ActionHeadStep) -> None:
        super().__init__()
        c: SmolVLAConfig = stage.config
        t = c.text
        self.expert = stage.expert
        for name in ACTION_PROJECTIONS:
            setattr(self, name, getattr(stage, name))
        self.cross = [c.is_cross_attention(i) for i in range(c.depth)]
        self.dt = float(stage.dt)
        # the step's time and embedding: one-hot [1, K] times these tables
        self.register_buffer("step_times", stage.step_times, persistent=False)
        self.register_buffer("time_embeddings", stage.time_embeddings, persistent=False)
        self.heads, self.kv_heads, self.head_dim = t.num_heads, t.num_kv_heads, t.head_dim
        horizon = c.chunk_size
        self.horizon = horizon
        self.rope = LeRobotRope(t.head_dim, c.rope_max_wavelength)
        # cross-attention queries sit at sum(prefix_pad) + i re-based to start at 0: at i
        cos, sin = rope_tables(
            torch.arange(horizon).reshape(1, horizon), t.head_dim, c.rope_max_wavelength
        )
        self.register_buffer("cross_cos", both_halves(cos), persistent=False)
        self.register_buffer("cross_sin", both_halves(sin), persistent=False)
        own = attention_mask_2d(
            torch.ones(1, horizon, dtype=torch.bool), suffix_block_starts(horizon)
        ).float()
        self.register_buffer("suffix_allowed", own, persistent=False)
        zeros = torch.zeros(1, horizon, c.prefix_len)
        self.register_buffer("prefix_zeros", zeros, persistent=False)
        self.register_buffer("count", torch.ones(c.prefix_len, 1), persistent=False)
        steps = torch.arange(horizon, dtype=torch.float32).reshape(1, horizon)
        self.register_buffer("steps", steps, persistent=False)
        # broadcasts the time embedding over the horizon (a multiplication, not an expand)
        self.register_buffer("over_horizon", torch.ones(1, horizon, 1), persistent=False)

    def _cross_kv(
        self, layer: nn.Module, keys: torch.Tensor, values: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:func:`~vla_edge.archs.smolvla.layers.cross_attention_kv`: heads flattened head-major."""
        b, heads, length, d = keys.shape
        a = layer.self_attn
        k = a.k_proj(keys.permute(0, 2, 1, 3).reshape(b, length, heads * d))
        v = a.v_proj(values.permute(0, 2, 1, 3).reshape(b, length, heads * d))
        return split_heads(k, heads, d), split_heads(v, heads, d)

    def _velocity(
        self,
        cache: list[tuple[torch.Tensor, torch.Tensor]],
        ropes: tuple[tuple[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]],
        masks: tuple[torch.Tensor, torch.Tensor],
        x_t: torch.Tensor,
        emb: torch.Tensor,
    ) -> torch.Tensor:
        """:meth:`~vla_edge.archs.smolvla.model.ActionParts.velocity` for time embedding ``emb``."""
        (self_rope, cross_rope), (self_mask, cross_mask) = ropes, masks
        fused = self.action_time_mlp_in(torch.cat([self.action_in_proj(x_t), emb], dim=2))
        x = self.action_time_mlp_out(F.silu(fused))
        scale = self.head_dim**-0.5
        for layer, (keys, values), cross in zip(self.expert.layers, cache, self.cross, strict=True):
            h = llama_rms_norm(layer.input_layernorm, x)
            a = layer.self_attn
            q = split_heads(a.q_proj(h), self.heads, self.head_dim)
            if cross:
                attended = folded_attention(rotate(q, *cross_rope), keys, values, scale, cross_mask)
            else:
                k = rotate(split_heads(a.k_proj(h), self.kv_heads, self.head_dim), *self_rope)
                v = split_heads(a.v_proj(h), self.kv_heads, self.head_dim)
                attended = folded_attention(
                    rotate(q, *self_rope),
                    torch.cat([keys, k], dim=2),
                    torch.cat([values, v], dim=2),
                    scale,
                    self_mask,
                )
            x = attention_then_mlp(layer, x, attended)
        return self.action_out_proj(llama_rms_norm(self.expert.norm, x))

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
        """Actions ``[1, H, action_dim]`` after one step, as :meth:`ActionHeadStep.forward`."""
        _, _, kv_heads, length, head_dim = prefix_keys.shape
        horizon = self.horizon
        cache = []
        for i, layer in enumerate(self.expert.layers):
            kv = (
                prefix_keys[i : i + 1].reshape(1, kv_heads, length, head_dim),
                prefix_values[i : i + 1].reshape(1, kv_heads, length, head_dim),
            )
            cache.append(self._cross_kv(layer, *kv) if self.cross[i] else kv)
        self_rope = self.rope(torch.mm(prefix_pad, self.count) + self.steps)
        from_prefix = additive_mask(prefix_pad.reshape(1, 1, length)) + self.prefix_zeros
        self_mask = torch.cat([from_prefix, additive_mask(self.suffix_allowed)], dim=2).reshape(
            1, 1, horizon, length + horizon
        )
        cross_mask = from_prefix.reshape(1, 1, horizon, length)
        ropes = (self_rope, (self.cross_cos, self.cross_sin))
        keep = prefix_mask.reshape(1, horizon, 1)
        free = 1.0 - keep
        t = torch.mm(step, self.step_times).reshape(1, 1, 1)
        emb = torch.mm(step, self.time_embeddings).reshape(1, 1, -1) * self.over_horizon
        x_t = on_flow_path(x_t, t, noise, prefix_actions, keep, free)
        v_t = self._velocity(cache, ropes, (self_mask, cross_mask), x_t, emb)
        x_t = x_t + self.dt * v_t
        return free * x_t + keep * prefix_actions


def xnnpack_stages(
    vision: VisionEncoderStage, fusion: FusionStage, head: ActionHeadStep
) -> dict[str, nn.Module]:
    """The three stages rewritten for XNNPACK, in eval mode, sharing the reference's weights."""
    return {
        "vision_encoder": XnnpackVisionEncoder(vision).eval(),
        "fusion": XnnpackFusion(fusion).eval(),
        "action_head": XnnpackActionHead(head).eval(),
    }
