"""π0 / π0.5 stages with only operators XNNPACK takes (same parameters, same maths).

:mod:`vla_edge.archs.pi0.stages` is the readable reference; lowered to ExecuTorch
as written, it splits into many XNNPACK calls with portable kernels between
(the tiny π0 action head: 38 delegate calls and 346 nodes outside XNNPACK) and
takes minutes to lower. ExecuTorch 1.5's XNNPACK partitioner takes none of:
integer tensors and casts, ``cumsum``, comparisons, ``where``, ``sum``,
``select``, ``expand`` / ``unsqueeze`` of an activation, a 3-D ``mean``,
``pow``, ``arange`` / ``full``. Each stage here is rewritten around that, with
the reference's parameters (shared, not copied):

* masks in float arithmetic: ``allowed ∈ {0, 1}`` gives the additive mask
  ``(allowed - 1) * -MASKED_VALUE``, exactly the reference's
  ``where(allowed, 0, MASKED_VALUE)`` (:func:`additive_mask`; in half precision
  the dtype's lowest finite value, since ``MASKED_VALUE`` is ``-inf`` there);
* RoPE positions as matmuls with constant 0/1 matrices: ``cumsum(pad) - 1`` is
  ``pad @ triu(1) - 1`` and ``sum(pad)`` is ``pad @ 1`` (exact: integers
  below 2**24 in float32);
* what depends only on constants is computed once at construction: the RoPE
  inverse frequencies, the suffix's own block mask and the time embedding's
  frequencies (the action head is one Euler step; its time is an input);
* what depends only on the prefix (positions, RoPE tables, the mask, each
  layer's slice of the cache) is computed once per chunk, not once per step;
* norms as 4-D means over the two innermost dims (XNNPACK's global average
  pooling), attention with heads folded into a 3-D ``bmm`` batch, the
  per-layer cache stacked with concatenations of at most
  :data:`MAX_CAT_INPUTS` tensors (XNNPACK's limit).

What stays outside XNNPACK, by design: the token-embedding lookup in
``fusion`` (a gather; XNNPACK has no gather, and a one-hot matmul over
PaliGemma's 257 152 rows would cost 25 GFLOP per prompt), and in 8da4w the
cast of its gathered int8 rows — see :data:`NOT_DELEGATED_WHY`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from vla_edge.archs.pi0.layers import AdaRMSNorm, attention_mask_2d
from vla_edge.archs.pi0.stages import (
    ACTION_PROJECTIONS,
    ActionHeadStep,
    FusionStage,
    VisionEncoderStage,
)
from vla_edge.archs.xnnpack_blocks import MAX_CAT_INPUTS as MAX_CAT_INPUTS
from vla_edge.archs.xnnpack_blocks import additive_mask as additive_mask
from vla_edge.archs.xnnpack_blocks import folded_attention as folded_attention
from vla_edge.archs.xnnpack_blocks import layer_norm as layer_norm
from vla_edge.archs.xnnpack_blocks import rms_normed as rms_normed
from vla_edge.archs.xnnpack_blocks import rotate as rotate
from vla_edge.archs.xnnpack_blocks import split_heads as split_heads
from vla_edge.archs.xnnpack_blocks import stack_layers as stack_layers
from vla_edge.archs.xnnpack_blocks import vision_features as vision_features

NOT_DELEGATED_WHY = {
    "aten_embedding_default": "token-embedding lookup (a gather): XNNPACK has no gather "
    "operator, and a one-hot matmul over the vocabulary would cost vocab x width x tokens "
    "multiply-adds per prompt",
    "dim_order_ops__to_dim_order_copy_default": "8da4w: the int8 rows gathered from the "
    "token table cast to float32 before their scale (with the gather, outside XNNPACK)",
}
"""Why each operator left outside XNNPACK in these stages is there (recorded in the manifest)."""


KEPT_FP32 = ("action_in_proj", "action_out_proj")
"""Projections an 8da4w export keeps in fp32: the flow's state into the expert and its
velocity out. Their int4 error enters every Euler step unattenuated (alone, int4
``action_out_proj`` moves a tiny π0.5's chunk by 5 % of its range; both fp32: 0.2 %), and
they are 2 x 32 x 1024 weights of the full-size 3.3 B."""


class KeptLinear(nn.Module):
    """A linear layer the 8da4w quantiser leaves in fp32 (XNNPACK runs an fp32 GEMM).

    The same parameters, but not an ``nn.Linear``, which is what the quantiser selects.
    """

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.weight = linear.weight
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x @ weight.T + bias``."""
        return F.linear(x, self.weight, self.bias)


class _Rope(nn.Module):
    """RoPE tables from float positions, the inverse frequencies precomputed."""

    def __init__(self, head_dim: int, theta: float) -> None:
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2).float() / head_dim))
        # [f, f]: the reference's cat([freqs, freqs]) folded into the constant
        both = torch.cat([inv_freq, inv_freq]).reshape(1, 1, head_dim)
        self.register_buffer("inv_freq", both, persistent=False)

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Positions ``[B, S]`` (float) → cos, sin ``[B, 1, S, D]``."""
        b, s = positions.shape
        emb = positions.reshape(b, s, 1) * self.inv_freq
        d = emb.shape[-1]
        return emb.cos().reshape(b, 1, s, d), emb.sin().reshape(b, 1, s, d)


class XnnpackVisionEncoder(nn.Module):
    """:class:`VisionEncoderStage` (SigLIP and the projector) for XNNPACK."""

    def __init__(self, stage: VisionEncoderStage) -> None:
        super().__init__()
        vm = stage.vision_tower.vision_model
        self.patch_embedding = vm.embeddings.patch_embedding
        # the table itself (added, never looked up), shared with the reference
        self.position_embedding = vm.embeddings.position_embedding.weight
        self.layers = vm.encoder.layers
        self.post_layernorm = vm.post_layernorm
        self.projector = stage.multi_modal_projector.linear
        attn = self.layers[0].self_attn
        self.heads, self.head_dim, self.scale = attn.num_heads, attn.head_dim, attn.scale

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Images ``[n, 3, H, W]`` in [-1, 1] → image tokens ``[n, T, width]``."""
        return self.projector(vision_features(self, images))


def _norm(
    i: int,
    module: nn.Module,
    x: torch.Tensor,
    eps: float,
    norm_cond: tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]] | None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Gemma RMSNorm ``x̂ * (1 + w)``, or adaRMS ``x̂ * (1 + scale) + shift`` and its gate."""
    normed = rms_normed(x, eps)
    if norm_cond is None:
        return normed * (1.0 + module.weight), None
    scale, shift, gate = (part[i] for part in norm_cond)
    return normed * (1.0 + scale) + shift, gate


def _decoder_block(
    layer: nn.Module,
    x: torch.Tensor,
    rope: tuple[torch.Tensor, torch.Tensor],
    mask: torch.Tensor,
    sizes: tuple[int, int, int, float],
    norm_cond: tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]] | None = None,
    prefix_kv: tuple[torch.Tensor, torch.Tensor] | None = None,
    keys_only: bool = False,
) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """One Gemma decoder layer (:func:`vla_edge.archs.pi0.layers.decoder_layer`'s maths).

    ``sizes``: ``(heads, kv_heads, head_dim, eps)``. ``norm_cond``: π0.5's adaRMS
    ``(scale, shift, gate)`` per norm (input, post-attention), ``None`` for plain RMSNorm.
    """
    heads, kv_heads, head_dim, eps = sizes
    cos, sin = rope
    h, gate = _norm(0, layer.input_layernorm, x, eps, norm_cond)
    a = layer.self_attn
    q = rotate(split_heads(a.q_proj(h), heads, head_dim), cos, sin)
    k = rotate(split_heads(a.k_proj(h), kv_heads, head_dim), cos, sin)
    v = split_heads(a.v_proj(h), kv_heads, head_dim)
    if keys_only:
        return None, k, v
    keys, values = (k, v)
    if prefix_kv is not None:
        keys = torch.cat([prefix_kv[0], k], dim=2)
        values = torch.cat([prefix_kv[1], v], dim=2)
    out = a.o_proj(folded_attention(q, keys, values, head_dim**-0.5, mask))
    x = x + (out if gate is None else out * gate)
    h, gate = _norm(1, layer.post_attention_layernorm, x, eps, norm_cond)
    out = layer.mlp(h)
    return x + (out if gate is None else out * gate), k, v


class XnnpackFusion(nn.Module):
    """:class:`FusionStage` (prefix embedding and the language model's cache) for XNNPACK."""

    def __init__(self, stage: FusionStage, n_slots: int, image_tokens: int) -> None:
        super().__init__()
        c = stage.config
        self.config = c
        self.language_model = stage.language_model
        # a plain lookup over the shared table (transformers 5.x's module would scale it)
        table = stage.language_model.embed_tokens.weight
        with torch.device("meta"):  # no second table, not even for a moment
            self.embed_tokens = nn.Embedding(table.shape[0], table.shape[1])
        self.embed_tokens.weight = table
        self.n_slots, self.image_tokens = n_slots, image_tokens
        length = n_slots * image_tokens + c.max_token_len
        self.register_buffer("slot_ones", torch.ones(1, image_tokens), persistent=False)
        self.register_buffer("cumsum", torch.triu(torch.ones(length, length)), persistent=False)
        self.rope = _Rope(c.paligemma.head_dim, c.rope_theta)
        e = c.paligemma
        self.sizes = (e.num_heads, e.num_kv_heads, e.head_dim, c.rms_norm_eps)

    def forward(
        self,
        image_tokens: torch.Tensor,
        image_mask: torch.Tensor,
        token_ids: torch.Tensor,
        token_mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(prefix_keys, prefix_values, prefix_pad)``; masks are 0/1 floats."""
        n, t, width = image_tokens.shape
        text = self.embed_tokens(token_ids) * math.sqrt(width)
        embs = torch.cat([image_tokens.reshape(1, n * t, width), text], dim=1)
        slot_pad = (image_mask.reshape(n, 1) * self.slot_ones).reshape(1, n * t)
        pad = torch.cat([slot_pad, token_mask], dim=1)
        length = pad.shape[1]
        rope = self.rope(torch.mm(pad, self.cumsum) - 1.0)
        allowed = pad.reshape(1, length, 1) * pad.reshape(1, 1, length)
        mask = additive_mask(allowed).reshape(1, 1, length, length)
        keys, values = [], []
        x: torch.Tensor | None = embs
        layers = self.language_model.layers
        for i, layer in enumerate(layers):
            assert x is not None
            x, k, v = _decoder_block(
                layer, x, rope, mask, self.sizes, keys_only=i == len(layers) - 1
            )
            keys.append(k)
            values.append(v)
        return stack_layers(keys), stack_layers(values), pad


class XnnpackActionHead(nn.Module):
    """:class:`ActionHeadStep` (one Euler step of the expert) for XNNPACK."""

    def __init__(self, stage: ActionHeadStep) -> None:
        super().__init__()
        c = stage.config
        self.config = c
        self.expert = stage.expert
        for name in ACTION_PROJECTIONS[c.pi05]:
            module = getattr(stage, name)
            setattr(self, name, KeptLinear(module) if name in KEPT_FP32 else module)
        self.pi05 = c.pi05
        self.dt = float(stage.dt)
        horizon = c.action_horizon
        suffix = c.suffix_len
        self.suffix = suffix
        e = c.expert
        self.sizes = (e.num_heads, e.num_kv_heads, e.head_dim, c.rms_norm_eps)
        self.rope = _Rope(e.head_dim, c.rope_theta)
        own = attention_mask_2d(
            torch.ones(1, suffix, dtype=torch.bool), stage.suffix_block_starts()
        ).float()
        self.register_buffer("suffix_allowed", own, persistent=False)
        self.register_buffer("prefix_zeros", torch.zeros(1, suffix, c.prefix_len), persistent=False)
        self.register_buffer("count", torch.ones(c.prefix_len, 1), persistent=False)
        self.register_buffer(
            "steps", torch.arange(suffix, dtype=torch.float32).reshape(1, suffix), persistent=False
        )
        # the step's flow time and time embedding: the stage's constant tables, picked by a
        # product with the one-hot step; ones that broadcast the embedding over the horizon
        # (a multiplication XNNPACK takes, not an expand)
        self.register_buffer("step_times", stage.step_times.clone(), persistent=False)
        self.register_buffer("time_embeddings", stage.time_embeddings.clone(), persistent=False)
        self.register_buffer("over_horizon", torch.ones(1, horizon, 1), persistent=False)

    def _condition(self, emb: torch.Tensor) -> torch.Tensor:
        """π0.5's adaRMS condition ``[1, W]`` from the time embedding ``[1, W]``."""
        return F.silu(self.time_mlp_out(F.silu(self.time_mlp_in(emb))))

    def _ada(self, norm: AdaRMSNorm, cond: torch.Tensor) -> list[torch.Tensor]:
        width = self.config.expert.width
        out = norm.dense(cond).reshape(1, 1, 3 * width)
        return [out[..., :width], out[..., width : 2 * width], out[..., 2 * width :]]

    def _velocity(
        self,
        cache: list[tuple[torch.Tensor, torch.Tensor]],
        rope: tuple[torch.Tensor, torch.Tensor],
        mask: torch.Tensor,
        state: torch.Tensor,
        x_t: torch.Tensor,
        emb: torch.Tensor,
    ) -> torch.Tensor:
        s, c = self, self.config
        width, horizon = c.expert.width, c.action_horizon
        actions = s.action_in_proj(x_t)
        cond = None
        if self.pi05:
            cond = self._condition(emb)
            x = actions
        else:
            emb = emb.reshape(1, 1, width) * self.over_horizon
            fused = s.action_time_mlp_out(
                F.silu(s.action_time_mlp_in(torch.cat([actions, emb], dim=2)))
            )
            x = torch.cat([s.state_proj(state).reshape(1, 1, width), fused], dim=1)
        for layer, kv in zip(s.expert.layers, cache, strict=True):
            norm_cond = None
            if cond is not None:
                parts = [
                    self._ada(layer.input_layernorm, cond),
                    self._ada(layer.post_attention_layernorm, cond),
                ]
                norm_cond = ([p[0] for p in parts], [p[1] for p in parts], [p[2] for p in parts])
            x, _, _ = _decoder_block(layer, x, rope, mask, self.sizes, norm_cond, prefix_kv=kv)
        normed = rms_normed(x, c.rms_norm_eps)
        if cond is not None:
            scale, shift, _ = self._ada(s.expert.norm, cond)
            out = normed * (1.0 + scale) + shift
        else:
            out = normed * (1.0 + s.expert.norm.weight)
        if self.suffix > horizon:  # π0: drop the state token (π0.5 has none: no no-op slice)
            out = out[:, self.suffix - horizon :]
        return s.action_out_proj(out)

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
        """Actions ``[1, H, action_dim]`` after one step, as :meth:`ActionHeadStep.forward`."""
        c = self.config
        depth, _, kv_heads, length, head_dim = prefix_keys.shape
        cache = [
            (
                prefix_keys[i : i + 1].reshape(1, kv_heads, length, head_dim),
                prefix_values[i : i + 1].reshape(1, kv_heads, length, head_dim),
            )
            for i in range(depth)
        ]
        rope = self.rope(torch.mm(prefix_pad, self.count) + self.steps)
        from_prefix = additive_mask(prefix_pad.reshape(1, 1, length)) + self.prefix_zeros
        mask = torch.cat([from_prefix, additive_mask(self.suffix_allowed)], dim=2).reshape(
            1, 1, self.suffix, length + self.suffix
        )
        keep = prefix_mask.reshape(1, c.action_horizon, 1)
        free = 1.0 - keep
        t = torch.mm(step, self.step_times).reshape(1, 1, 1)
        x_t = free * x_t + keep * (t * noise + (1.0 - t) * prefix_actions)
        v_t = self._velocity(cache, rope, mask, state, x_t, torch.mm(step, self.time_embeddings))
        x_t = x_t + self.dt * v_t
        return free * x_t + keep * prefix_actions


def xnnpack_stages(
    vision: VisionEncoderStage, fusion: FusionStage, head: ActionHeadStep
) -> dict[str, nn.Module]:
    """The three stages rewritten for XNNPACK, in eval mode, sharing the reference's weights."""
    c = fusion.config
    return {
        "vision_encoder": XnnpackVisionEncoder(vision).eval(),
        "fusion": XnnpackFusion(fusion, c.n_slots, c.vision.num_tokens).eval(),
        "action_head": XnnpackActionHead(head).eval(),
    }
