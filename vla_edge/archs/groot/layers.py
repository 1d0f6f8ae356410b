"""Each place GR00T N1.7 differs from stock ``transformers`` blocks, written once and named.

Upstream read: NVIDIA/Isaac-GR00T ``gr00t/model/gr00t_n1d7/gr00t_n1d7.py`` @2d1e82fe,
``gr00t/model/modules/dit.py`` @2ea60d6d, ``gr00t/model/modules/qwen3_backbone.py``
@1a332159, ``gr00t/model/action_head/flow_matching_action_head.py`` @04c7ee10 (N1.5,
the same per-embodiment encoders) and diffusers' ``Attention`` / ``FeedForward`` /
``Timesteps`` / ``TimestepEmbedding`` that upstream builds on. Written here on plain
torch, with upstream's module names so the checkpoint keys are reachable:

Backbone (stock Qwen3-VL modules, driven with fixed shapes):

* :func:`patchify`: an image to Qwen3-VL's flattened patches (the frame repeated over the
  temporal patch, patches in 2x2 merge-block order), as the stock image processor does.
* :func:`vision_block`: a stock ``Qwen3VLVisionBlock`` run on every slot at once (one
  attention per image, no ``cu_seqlens`` split on the host).
* :func:`mrope_positions`: the ``get_rope_index`` positions of our prompt layout computed
  from the masks (an absent slot or a pad token takes no position, as if removed).
* :func:`deepstack_inject`: vision features added to the image positions after the first
  language-model layers (``_deepstack_process``).
* :func:`causal_pad_mask`: the language model's causal mask with pad keys removed.
* The language model is cut to ``select_layer`` layers and its output is read *before*
  the final norm (upstream reads ``hidden_states[-1]``); the norm stays in the module
  tree, unread, because the checkpoint holds it.

Action head (upstream's own modules):

* :class:`CategorySpecificLinear`, :class:`CategorySpecificMLP`,
  :class:`MultiEmbodimentActionEncoder`: per-embodiment weight slices ``W[e]``, ``b[e]``.
* :func:`sinusoid` (the action encoder's time features) and :func:`timestep_features`
  (diffusers' ``Timesteps(flip_sin_to_cos=True, downscale_freq_shift=1)``).
* :class:`AdaLayerNorm` (``scale, shift`` order) and the DiT's output modulation
  (``shift, scale`` order, :func:`modulate_out`).
* :class:`BasicTransformerBlock`, :class:`AlternateVLDiT` (even blocks cross-attend,
  alternately to the text and to the image tokens; odd blocks self-attend),
  :class:`SelfAttentionTransformer` (the VL self-attention; pad keys masked here).
* :func:`time_buckets`, :func:`euler_times`: ``int(k / K * 1000)`` and ``t_k = k / K``,
  from noise (``t = 0``) to actions (``t = 1``), ``dt = 1 / K``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn
from transformers.models.qwen3_vl.modeling_qwen3_vl import rotate_half
from transformers.vision_utils import (
    get_vision_interpolation_indices_and_weights,
    get_vision_position_ids,
)

from vla_edge.archs.groot.config import FlowHeadConfig, GrootConfig, VisionSize

# -- backbone ----------------------------------------------------------------------------------


def patchify(images: torch.Tensor, vision: VisionSize) -> torch.Tensor:
    """Images ``[n, 3, H, W]`` → patches ``[n, grid², 3 * T * P * P]`` in merge-block order.

    One still image fills every frame of the temporal patch (the processor repeats it);
    patches go row-major over 2x2 blocks, then within each block.

    No intermediate has more than 6 dimensions (XNNPACK's limit: an 8-D permute does not
    run in an ExecuTorch program).
    """
    n, channels = images.shape[:2]
    p, m, t = vision.patch_size, vision.spatial_merge_size, vision.temporal_patch_size
    grid = vision.grid
    blocks = grid // m
    x = images.reshape(n, channels, grid, p, grid, p).permute(0, 2, 4, 1, 3, 5)  # n,G,G,C,P,P
    x = x.reshape(n * grid * grid, channels, 1, p * p).expand(-1, channels, t, p * p)
    x = x.reshape(n, blocks, m, blocks, m, vision.patch_dim)
    x = x.permute(0, 1, 3, 2, 4, 5)  # n, bh, bw, mh, mw, (C, T, P, P)
    return x.reshape(n, grid**2, vision.patch_dim)


def vision_tables(vision: VisionSize) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One image's constant vision tables on the host.

    Returns ``(interp_indices, interp_weights, rope_positions)``.

    The learned position table resampled to the patch grid (bilinear, corners aligned, as
    ``Qwen3VLVisionModel``) and each patch's ``(row, column)`` for the axial RoPE, both in
    merge-block order; made by transformers' own helpers for the one fixed grid.
    """
    grid = torch.tensor([[1, vision.grid, vision.grid]])
    indices, weights = get_vision_interpolation_indices_and_weights(
        grid,
        num_grid_per_side=round(vision.num_position_embeddings**0.5),
        mode="bilinear",
        align_corners=True,
        spatial_merge_size=vision.spatial_merge_size,
    )
    positions = get_vision_position_ids(grid, vision.spatial_merge_size)
    return indices, weights.to(torch.float32), positions


def rope_rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``x * cos + rotate_half(x) * sin`` in float32, back to ``x``'s dtype."""
    y = x.float()
    return (y * cos + rotate_half(y) * sin).to(x.dtype)


def vision_block(
    block: nn.Module, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
) -> torch.Tensor:
    """A stock ``Qwen3VLVisionBlock`` on ``x`` ``[n, N, D]``: full attention within each image.

    ``cos`` / ``sin`` ``[N, head_dim]`` (the same grid for every slot).
    """
    attn = block.attn
    n, length, dim = x.shape
    heads = attn.num_heads
    h = block.norm1(x)
    qkv = attn.qkv(h).reshape(n, length, 3, heads, dim // heads).permute(2, 0, 3, 1, 4)
    q, k, v = qkv.unbind(0)  # [n, heads, N, hd]
    q, k = rope_rotate(q, cos, sin), rope_rotate(k, cos, sin)
    scores = torch.matmul(q, k.transpose(-1, -2)) * attn.scaling
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    out = torch.matmul(probs, v).transpose(1, 2).reshape(n, length, dim)
    x = x + attn.proj(out)
    return x + block.mlp(block.norm2(x))


def slot_layout(
    config: FlowHeadConfig,
    start_id: int,
    end_id: int,
    labels: tuple[tuple[int, ...], ...] = (),
) -> dict[str, torch.Tensor]:
    """Constant tables of the prompt layout (host tensors, made once at build time).

    Each slot is its label (``labels[slot]``, none when ``labels`` is empty), ``start_id``,
    the image pads and ``end_id``: N1.7's ``<|vision_start|>`` / ``<|vision_end|>``
    without labels, N1.5's ``<image k>`` labels then ``<img>`` / ``</img>``.

    * ``layout_ids`` ``[L_fixed]``: the lead tokens and every slot's tokens (the host's tokens
      follow them);
    * ``image_rows`` ``[n_slots * T]``: the image tokens' places in the sequence;
    * ``slot_rows`` ``[n_slots + 1, L_fixed]``: row ``s`` marks slot ``s``'s tokens, the
      last row the lead tokens (so ``[present..., 1] @ slot_rows`` is the fixed part's
      pad mask);
    * ``is_image`` ``[L]``: 1 at the image tokens.
    """
    c = config
    n_image = c.vision.num_tokens
    ids: list[int] = list(c.lead_token_ids)
    rows: list[int] = []
    owner: list[int] = [c.n_slots] * c.lead_len
    for slot in range(c.n_slots):
        ids.extend(labels[slot] if labels else ())
        ids.append(start_id)
        rows.extend(range(len(ids), len(ids) + n_image))
        ids.extend([c.image_token_id] * n_image)
        ids.append(end_id)
        owner.extend([slot] * c.slot_len)
    slot_rows = F.one_hot(torch.tensor(owner), c.n_slots + 1).T.to(torch.float32)
    is_image = torch.zeros(c.prefix_len)
    is_image[torch.tensor(rows, dtype=torch.long)] = 1.0
    return {
        "layout_ids": torch.tensor(ids, dtype=torch.long),
        "image_rows": torch.tensor(rows, dtype=torch.long),
        "slot_rows": slot_rows,
        "is_image": is_image,
    }


def mrope_positions(
    config: GrootConfig, image_mask: torch.Tensor, token_mask: torch.Tensor
) -> torch.Tensor:
    """M-RoPE position ids ``[3, 1, L]`` (float) of our layout, as ``get_rope_index`` gives them.

    Text tokens take ``p, p, p`` and advance by one; a slot's ``<|vision_start|>`` is text,
    its image tokens take ``(p, p + row, p + column)`` and advance ``p`` by
    ``max(rows, columns)``, its ``<|vision_end|>`` is text again. An absent slot and the pad
    tokens take no position (they are masked out everywhere), so every real token has the
    position it would have if the absent ones were removed from the sequence.
    """
    c = config
    v = c.vision
    device = token_mask.device
    present = (image_mask != 0).to(torch.float32)  # [n_slots]
    span = float(v.merged_grid + 2)  # start, the image's max(h, w), end
    # each slot's first position: lead tokens, then the present slots before it
    before = torch.cumsum(present, dim=0) - present
    slot_start = c.lead_len + span * before  # [n_slots]
    g = v.merged_grid
    rr = torch.arange(g, device=device, dtype=torch.float32).repeat_interleave(g)
    cc = torch.arange(g, device=device, dtype=torch.float32).repeat(g)
    grid = torch.stack([torch.zeros_like(rr), rr, cc])  # [3, T]: time, row, column
    parts = [torch.arange(c.lead_len, device=device, dtype=torch.float32)[None].expand(3, -1)]
    for s in range(c.n_slots):
        start = slot_start[s].reshape(1, 1).expand(3, 1)
        parts += [start, grid + (start + 1.0), start + (1.0 + g)]
    text_start = c.lead_len + span * present.sum()
    text = text_start + torch.cumsum(token_mask[0].to(torch.float32), dim=0) - 1.0
    parts.append(text.clamp(min=0.0)[None].expand(3, -1))
    return torch.cat(parts, dim=1)[:, None, :]


def causal_pad_mask(real: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Additive mask ``[1, 1, L, L]``: a token sees the real tokens up to itself.

    A pad query row sees nothing real but itself is never read, so any finite row will do:
    it keeps its own key (no all-masked row, no NaN).
    """
    length = real.shape[-1]
    idx = torch.arange(length, device=real.device)
    causal = idx[None, :] <= idx[:, None]
    allowed = causal & ((real[0] != 0)[None, :] | (idx[None, :] == idx[:, None]))
    zero = torch.zeros(allowed.shape, dtype=dtype, device=real.device)
    return zero.masked_fill(~allowed, torch.finfo(dtype).min)[None, None]


def deepstack_inject(
    hidden: torch.Tensor, features: torch.Tensor, image_rows: torch.Tensor
) -> torch.Tensor:
    """``hidden`` ``[1, L, W]`` with ``features`` ``[n_image_tokens, W]`` added at ``image_rows``.

    Qwen3-VL's deepstack: after language-model layer ``i`` (``i`` below the number of
    deepstack taps), the ``i``-th vision tap's merged features are added to the hidden
    states of the image positions.
    """
    return hidden.index_add(1, image_rows, features[None].to(hidden.dtype))


# -- action head: per-embodiment modules ---------------------------------------------------------


class CategorySpecificLinear(nn.Module):
    """``x @ W[e] + b[e]``: one ``[in, out]`` weight slice per embodiment ``e``."""

    def __init__(self, num_categories: int, input_dim: int, output_dim: int) -> None:
        super().__init__()
        self.W = nn.Parameter(torch.empty(num_categories, input_dim, output_dim))
        self.b = nn.Parameter(torch.zeros(num_categories, output_dim))
        nn.init.normal_(self.W, std=0.02)

    def forward(self, x: torch.Tensor, embodiment: int) -> torch.Tensor:
        """``x`` ``[B, T, in]`` through embodiment ``embodiment``'s slice."""
        return torch.matmul(x, self.W[embodiment]) + self.b[embodiment]


class CategorySpecificMLP(nn.Module):
    """Two per-embodiment linears with a ReLU between (state encoder, action decoder)."""

    def __init__(self, num_categories: int, input_dim: int, hidden_dim: int, output_dim: int):
        super().__init__()
        self.layer1 = CategorySpecificLinear(num_categories, input_dim, hidden_dim)
        self.layer2 = CategorySpecificLinear(num_categories, hidden_dim, output_dim)

    def forward(self, x: torch.Tensor, embodiment: int) -> torch.Tensor:  # noqa: D102
        return self.layer2(F.relu(self.layer1(x, embodiment)), embodiment)


def sinusoid(time: torch.Tensor, dim: int) -> torch.Tensor:
    """The action encoder's time features ``[..., dim]`` (float32).

    ``sin(t f_i), cos(t f_i)`` with ``f_i = exp(-i ln(10000) / (dim / 2))``.
    """
    half = dim // 2
    exponent = -torch.arange(half, dtype=torch.float32, device=time.device) * (
        math.log(10000.0) / half
    )
    freqs = time.to(torch.float32)[..., None] * exponent.exp()
    return torch.cat([freqs.sin(), freqs.cos()], dim=-1)


class MultiEmbodimentActionEncoder(nn.Module):
    """Noisy actions and the time bucket → action tokens, per embodiment.

    ``W3(swish(W2([W1(a), sinusoid(bucket)])))``.
    """

    def __init__(self, action_dim: int, hidden_size: int, num_embodiments: int) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        self.W1 = CategorySpecificLinear(num_embodiments, action_dim, hidden_size)
        self.W2 = CategorySpecificLinear(num_embodiments, 2 * hidden_size, hidden_size)
        self.W3 = CategorySpecificLinear(num_embodiments, hidden_size, hidden_size)

    def forward(
        self, actions: torch.Tensor, time_features: torch.Tensor, embodiment: int
    ) -> torch.Tensor:
        """``actions`` ``[B, H, A]``, ``time_features`` ``[B, hidden]`` (:func:`sinusoid`)."""
        a = self.W1(actions, embodiment)
        tau = time_features[:, None, :].expand(-1, actions.shape[1], -1).to(a.dtype)
        x = self.W2(torch.cat([a, tau], dim=-1), embodiment)
        return self.W3(F.silu(x), embodiment)


# -- action head: the DiT and the VL self-attention ----------------------------------------------


def timestep_features(buckets: torch.Tensor, channels: int) -> torch.Tensor:
    """Diffusers' ``Timesteps(channels, flip_sin_to_cos=True, downscale_freq_shift=1)``.

    ``[cos(t f_i), sin(t f_i)]`` with ``f_i = exp(-ln(10000) i / (channels / 2 - 1))``
    (float32).
    """
    half = channels // 2
    exponent = -math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=buckets.device)
    freqs = buckets.to(torch.float32)[:, None] * torch.exp(exponent / (half - 1))[None]
    return torch.cat([freqs.cos(), freqs.sin()], dim=-1)


class TimestepEmbedding(nn.Module):
    """``linear_2(silu(linear_1(x)))`` (diffusers' ``TimestepEmbedding``)."""

    def __init__(self, in_channels: int, dim: int) -> None:
        super().__init__()
        self.linear_1 = nn.Linear(in_channels, dim)
        self.linear_2 = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.linear_2(F.silu(self.linear_1(x)))


class TimestepEncoder(nn.Module):
    """The DiT's time conditioning: sinusoidal features of the bucket through an MLP."""

    def __init__(self, channels: int, dim: int) -> None:
        super().__init__()
        self.channels = channels
        self.timestep_embedder = TimestepEmbedding(channels, dim)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """``features`` ``[B, channels]`` (:func:`timestep_features`) → ``temb`` ``[B, dim]``."""
        return self.timestep_embedder(features.to(self.timestep_embedder.linear_1.weight.dtype))


class AdaLayerNorm(nn.Module):
    """``LN(x) * (1 + scale) + shift`` with ``scale, shift = linear(silu(temb))`` (that order)."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.linear = nn.Linear(dim, 2 * dim)
        self.norm = nn.LayerNorm(dim, eps=eps, elementwise_affine=False)

    def forward(self, x: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:  # noqa: D102
        scale, shift = self.linear(F.silu(temb)).chunk(2, dim=1)
        return self.norm(x) * (1 + scale[:, None]) + shift[:, None]


def modulate_out(
    norm: nn.Module, proj: nn.Linear, x: torch.Tensor, temb: torch.Tensor
) -> torch.Tensor:
    """The DiT's output modulation: ``shift, scale = proj(silu(temb))`` (that order)."""
    shift, scale = proj(F.silu(temb)).chunk(2, dim=1)
    return norm(x) * (1 + scale[:, None]) + shift[:, None]


class Attention(nn.Module):
    """diffusers' ``Attention`` with biases: ``to_q``, ``to_k``, ``to_v``, ``to_out.0``."""

    def __init__(self, dim: int, heads: int, head_dim: int, context_dim: int | None = None):
        super().__init__()
        inner = heads * head_dim
        self.heads = heads
        self.head_dim = head_dim
        self.to_q = nn.Linear(dim, inner)
        self.to_k = nn.Linear(context_dim or dim, inner)
        self.to_v = nn.Linear(context_dim or dim, inner)
        self.to_out = nn.ModuleList([nn.Linear(inner, dim), nn.Dropout(0.0)])

    def forward(
        self, x: torch.Tensor, context: torch.Tensor | None = None, mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """``mask``: additive ``[B, 1, 1, S]`` over the keys, or none."""
        b, n, _ = x.shape
        src = x if context is None else context
        q = self.to_q(x).reshape(b, n, self.heads, self.head_dim).transpose(1, 2)
        k = self.to_k(src).reshape(b, -1, self.heads, self.head_dim).transpose(1, 2)
        v = self.to_v(src).reshape(b, -1, self.heads, self.head_dim).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.head_dim**-0.5
        if mask is not None:
            scores = scores + mask.to(scores.dtype)
        probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(b, n, -1)
        return self.to_out[0](out)


class FeedForward(nn.Module):
    """diffusers' ``FeedForward(activation_fn="gelu-approximate")``: ``net.0.proj``, ``net.2``."""

    def __init__(self, dim: int, mult: int = 4) -> None:
        super().__init__()
        proj = nn.Module()
        proj.proj = nn.Linear(dim, mult * dim)
        self.net = nn.ModuleList([proj, nn.Dropout(0.0), nn.Linear(mult * dim, dim)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.net[2](F.gelu(self.net[0].proj(x), approximate="tanh"))


class BasicTransformerBlock(nn.Module):
    """Upstream's block: (ada)norm, attention (self or cross), residual; norm, MLP, residual.

    ``ada_norm=True`` (the DiT): ``norm1`` is an :class:`AdaLayerNorm` of the time
    embedding and ``norm3`` has no affine; otherwise (the VL self-attention) both are
    affine layer norms.
    """

    def __init__(
        self, dim: int, heads: int, head_dim: int, context_dim: int | None, ada_norm: bool
    ) -> None:
        super().__init__()
        self.ada_norm = ada_norm
        self.norm1 = AdaLayerNorm(dim) if ada_norm else nn.LayerNorm(dim, eps=1e-5)
        self.attn1 = Attention(dim, heads, head_dim, context_dim)
        self.norm3 = nn.LayerNorm(dim, eps=1e-5, elementwise_affine=not ada_norm)
        self.ff = FeedForward(dim)

    def forward(
        self,
        x: torch.Tensor,
        temb: torch.Tensor | None = None,
        context: torch.Tensor | None = None,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """One block; ``mask`` additive over the keys (the context's, or ``x``'s own)."""
        h = self.norm1(x, temb) if self.ada_norm else self.norm1(x)
        x = x + self.attn1(h, context, mask)
        return x + self.ff(self.norm3(x))


def key_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Additive key mask ``[B, 1, 1, S]`` from ``allowed`` ``[B, S]`` (nonzero = attend)."""
    zero = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return zero.masked_fill(allowed == 0, torch.finfo(dtype).min)[:, None, None, :]


class AlternateVLDiT(nn.Module):
    """The flow's velocity network: 2N blocks, even ones cross-attend, odd ones self-attend.

    Cross-attention block ``i`` attends to the text tokens when ``i`` is a multiple of
    ``2 * attend_text_every_n_blocks``, to the image tokens otherwise.
    """

    def __init__(self, config: GrootConfig) -> None:
        super().__init__()
        d = config.dit
        self.attend_text_every_n_blocks = config.attend_text_every_n_blocks
        self.timestep_encoder = TimestepEncoder(config.timestep_channels, d.width)
        self.transformer_blocks = nn.ModuleList(
            [
                BasicTransformerBlock(
                    d.width,
                    d.num_heads,
                    d.head_dim,
                    context_dim=None if i % 2 else config.text.width,
                    ada_norm=True,
                )
                for i in range(d.depth)
            ]
        )
        self.norm_out = nn.LayerNorm(d.width, eps=1e-6, elementwise_affine=False)
        self.proj_out_1 = nn.Linear(d.width, 2 * d.width)
        self.proj_out_2 = nn.Linear(d.width, config.hidden_size)

    def attends_text(self, index: int) -> bool:
        """Whether cross-attention block ``index`` (even) attends to the text tokens."""
        return index % (2 * self.attend_text_every_n_blocks) == 0

    def forward(
        self,
        tokens: torch.Tensor,
        context: torch.Tensor,
        temb: torch.Tensor,
        text_mask: torch.Tensor,
        image_mask: torch.Tensor,
    ) -> torch.Tensor:
        """``tokens`` ``[B, 1 + H, D]`` → ``[B, 1 + H, hidden_size]``; masks additive."""
        for i, block in enumerate(self.transformer_blocks):
            if i % 2:
                tokens = block(tokens, temb)
            else:
                mask = text_mask if self.attends_text(i) else image_mask
                tokens = block(tokens, temb, context, mask)
        return self.proj_out_2(modulate_out(self.norm_out, self.proj_out_1, tokens, temb))


class SelfAttentionTransformer(nn.Module):
    """The VL self-attention over the backbone's tokens (affine layer norms, no time)."""

    def __init__(self, depth: int, heads: int, head_dim: int) -> None:
        super().__init__()
        width = heads * head_dim
        self.transformer_blocks = nn.ModuleList(
            [
                BasicTransformerBlock(width, heads, head_dim, None, ada_norm=False)
                for _ in range(depth)
            ]
        )

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """``mask``: additive over the keys; the pad tokens (upstream has none at batch 1)."""
        for block in self.transformer_blocks:
            x = block(x, mask=mask)
        return x


# -- the flow ------------------------------------------------------------------------------------


def euler_times(steps: int) -> list[float]:
    """The flow times ``k / K`` of the K Euler steps, noise (``t = 0``) towards actions."""
    return [k / float(steps) for k in range(steps)]


def time_buckets(steps: int, buckets: int = 1000) -> list[int]:
    """Each step's discrete time ``int(t_k * buckets)`` (``0, 250, 500, 750`` for K = 4)."""
    return [int(t * buckets) for t in euler_times(steps)]


def on_groot_flow_path(
    x_t: torch.Tensor,
    t: torch.Tensor,
    noise: torch.Tensor,
    prefix_actions: torch.Tensor,
    keep: torch.Tensor,
    free: torch.Tensor,
) -> torch.Tensor:
    """``x_t`` with the kept rows on GR00T's flow path ``(1 - t) * noise + t * prefix_actions``."""
    return free * x_t + keep * ((1.0 - t) * noise + t * prefix_actions)
