"""The places where openpi's π0 departs from stock ``transformers``, each written once.

openpi's PyTorch port runs on a patched transformers 4.53.2
(``src/openpi/models_pytorch/transformers_replace``). This package runs on stock
transformers 5.x, using its modules for the parameters (key names) and these
functions for the arithmetic, all plain ``Linear`` / ``matmul`` / ``softmax`` so
that ``torch.export`` lowers them without fused attention or cache objects:

* :func:`embed_language_tokens`: ``table[ids] * sqrt(width)``, once, in the prefix
  (the patch removes the scaling from ``GemmaModel``; transformers 5.x moved it into
  ``GemmaTextScaledWordEmbedding``, so calling that module *and* scaling would
  scale twice).
* image features are ``projector(siglip(x))``, not divided by ``sqrt(width)``
  (stock 4.x ``PaliGemmaModel.get_image_features`` divides; the patch and 5.x do not).
* :func:`attend_with_prefix`: the expert's attention reads the prefix's post-RoPE
  keys/values, concatenated in front of its own, and never writes them back.
* :class:`AdaRMSNorm` and :func:`gated_residual`: π0.5's adaptive RMSNorm
  (``Linear(W, 3W)`` → scale, shift, gate) and the gated residual ``x + y * gate``.
* :func:`rms_norm`: π0's plain Gemma RMSNorm ``x * rsqrt(mean(x²) + eps) * (1 + w)``
  with the variance in float32, eps 1e-6.
* :func:`sinusoidal_time_embedding`: ``[sin, cos]`` with periods 4e-3 … 4.0, in float64 as
  openpi computes it (its ``get_safe_dtype`` keeps float64 on the CPU and on CUDA), then
  cast to float32; :func:`time_embedding_table` holds it for each of the K flow times, so a
  program picks a row and runs no float64.
* :func:`attention_mask_2d` (big_vision's cumulative-sum block convention),
  :func:`additive_mask` (masked value ``-2.3819763e38``, finite so a fully masked
  row stays finite), :func:`euler_times` (``dt = -1/K`` from ``t = 1``).
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

MASKED_VALUE = -2.3819763e38
"""Additive attention-mask value for a masked key (openpi ``_prepare_attention_masks_4d``)."""

TIME_MIN_PERIOD = 4e-3
TIME_MAX_PERIOD = 4.0


def embed_language_tokens(table: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """Language embeddings as openpi's ``embed_prefix``: ``table[ids] * sqrt(width)``.

    Args:
        table: the embedding weight ``[vocab, width]`` (a plain lookup, not the stock
            module, whose forward in transformers 5.x already multiplies by sqrt(width)).
        token_ids: int64 ``[B, L]``.
    """
    width = table.shape[-1]
    return F.embedding(token_ids, table) * math.sqrt(width)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Gemma RMSNorm: ``x * rsqrt(mean(x²) + eps) * (1 + weight)``, variance in float32."""
    var = torch.mean(torch.square(x.float()), dim=-1, keepdim=True)
    out = x * torch.rsqrt(var + eps)
    return (out * (1.0 + weight.float())).to(x.dtype)


class AdaRMSNorm(nn.Module):
    """π0.5's adaptive RMSNorm: ``dense(cond)`` → scale, shift, gate.

    Returns ``(x̂ * (1 + scale) + shift, gate)``; the caller adds the sub-layer's output
    with :func:`gated_residual`. The parameter is ``dense`` (``Linear(cond_dim, 3 * dim)``),
    which is the key name openpi's converter writes (``...layernorm.dense.{weight,bias}``).
    """

    def __init__(self, dim: int, cond_dim: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.dense = nn.Linear(cond_dim, 3 * dim)
        nn.init.zeros_(self.dense.weight)

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Normalise ``x`` ``[B, S, D]`` under ``cond`` ``[B, cond_dim]``; returns (out, gate)."""
        var = torch.mean(torch.square(x.float()), dim=-1, keepdim=True)
        normed = x * torch.rsqrt(var + self.eps)
        scale, shift, gate = self.dense(cond)[:, None, :].chunk(3, dim=-1)
        out = normed * (1.0 + scale.float()) + shift.float()
        return out.to(x.dtype), gate.to(x.dtype)


def gated_residual(x: torch.Tensor, y: torch.Tensor, gate: torch.Tensor | None) -> torch.Tensor:
    """``x + y`` (π0, and the language model), or ``x + y * gate`` under adaRMS (π0.5 expert)."""
    return x + y if gate is None else x + y * gate


def sinusoidal_time_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """``[sin(2π t / p), cos(2π t / p)]`` for periods ``p`` log-spaced over [4e-3, 4.0].

    Float64 arithmetic, float32 result: openpi's ``create_sinusoidal_pos_embedding`` asks
    for float64 and keeps it on the CPU and CUDA, then casts to the time's float32 (a
    float32 computation differs by up to 1.3e-4 at ``t = 1``).

    Args:
        t: ``[B]`` flow times (on any device).
        dim: output width (even).
    """
    angle = time_frequencies(dim, t.device, torch.float64)[None, :] * t[:, None].to(torch.float64)
    return torch.cat([torch.sin(angle), torch.cos(angle)], dim=1).to(torch.float32)


def time_frequencies(
    dim: int, device: torch.device | str | None = None, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """``2π / p`` ``[dim // 2]`` of :func:`sinusoidal_time_embedding`."""
    fraction = torch.linspace(0.0, 1.0, dim // 2, dtype=dtype, device=device)
    period = TIME_MIN_PERIOD * (TIME_MAX_PERIOD / TIME_MIN_PERIOD) ** fraction
    return 1.0 / period * 2 * math.pi


def time_embedding_table(times: list[float], dim: int) -> torch.Tensor:
    """:func:`sinusoidal_time_embedding` of each flow time, float32 ``[K, dim]`` (a constant)."""
    return sinusoidal_time_embedding(torch.tensor(times, dtype=torch.float32), dim)


def rope_cos_sin(
    positions: torch.Tensor, head_dim: int, theta: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE tables ``[B, S, head_dim]`` for float positions ``[B, S]`` (Gemma's layout)."""
    inv_freq = 1.0 / (
        theta
        ** (
            torch.arange(0, head_dim, 2, dtype=torch.int64, device=positions.device).float()
            / head_dim
        )
    )
    freqs = positions.float()[..., None] * inv_freq
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos(), emb.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` ``[B, H, S, D]`` by the tables ``[B, S, D]`` (rotate-half convention)."""
    cos, sin = cos[:, None], sin[:, None]
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return (x * cos + rotated * sin).to(x.dtype)


def attention_mask_2d(pad: torch.Tensor, block_starts: torch.Tensor) -> torch.Tensor:
    """Boolean attention mask by big_vision's ``make_att_2d_masks`` convention.

    Query i sees key j iff both are real tokens and
    ``cumsum(block_starts)[j] <= cumsum(block_starts)[i]``.

    Args:
        pad: bool ``[B, N]``, true for a real token.
        block_starts: int ``[B, N]`` or ``[N]``, 1 where a token starts a new causal block.

    Returns:
        bool ``[B, N, N]`` (query, key).
    """
    if block_starts.ndim == 1:
        block_starts = block_starts[None].expand(pad.shape[0], -1)
    cum = torch.cumsum(block_starts, dim=1)
    causal = cum[:, None, :] <= cum[:, :, None]
    both = pad[:, None, :] & pad[:, :, None]
    return causal & both


def prefix_positions(pad: torch.Tensor) -> torch.Tensor:
    """Prefix RoPE positions ``cumsum(pad) - 1`` (padded tokens do not advance the position)."""
    return torch.cumsum(pad.to(torch.int64), dim=1) - 1


def suffix_positions(prefix_pad: torch.Tensor, suffix_len: int) -> torch.Tensor:
    """Suffix RoPE positions ``sum(prefix_pad) + cumsum(suffix_pad) - 1`` (no suffix padding)."""
    offset = prefix_pad.to(torch.int64).sum(dim=-1, keepdim=True)
    steps = torch.arange(suffix_len, dtype=torch.int64, device=prefix_pad.device)
    return offset + steps[None]


def additive_mask(allowed: torch.Tensor) -> torch.Tensor:
    """Bool ``[B, Q, K]`` → float ``[B, 1, Q, K]``: 0 where allowed, ``MASKED_VALUE`` elsewhere."""
    return torch.where(allowed[:, None], 0.0, MASKED_VALUE)


def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scaling: float
) -> torch.Tensor:
    """Eager grouped-query attention with an additive mask; plain matmul and softmax.

    Args:
        q: ``[B, H, Q, D]``; k, v: ``[B, Hkv, K, D]`` (H a multiple of Hkv).
        mask: additive ``[B, 1, Q, K]``.

    Returns:
        ``[B, Q, H * D]``.
    """
    b, h, s, d = q.shape
    groups = h // k.shape[1]
    if groups > 1:
        k = k[:, :, None].expand(-1, -1, groups, -1, -1).reshape(b, h, k.shape[2], d)
        v = v[:, :, None].expand(-1, -1, groups, -1, -1).reshape(b, h, v.shape[2], d)
    scores = torch.matmul(q, k.transpose(2, 3)) * scaling + mask
    weights = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    out = torch.matmul(weights, v)
    return out.transpose(1, 2).reshape(b, s, h * d)


def project_qkv(
    self_attn: nn.Module, x: torch.Tensor, head_dim: int, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Query, key and value ``[B, heads, S, head_dim]`` of a Gemma attention block, post-RoPE."""
    b, s, _ = x.shape
    q = self_attn.q_proj(x).view(b, s, -1, head_dim).transpose(1, 2)
    k = self_attn.k_proj(x).view(b, s, -1, head_dim).transpose(1, 2)
    v = self_attn.v_proj(x).view(b, s, -1, head_dim).transpose(1, 2)
    return apply_rope(q, cos, sin), apply_rope(k, cos, sin), v


def _norm(
    norm: nn.Module, x: torch.Tensor, cond: torch.Tensor | None, eps: float
) -> tuple[torch.Tensor, torch.Tensor | None]:
    if isinstance(norm, AdaRMSNorm):
        if cond is None:
            raise ValueError("an adaRMS layer needs its condition")
        return norm(x, cond)
    return rms_norm(x, norm.weight, eps), None


def decoder_layer(
    layer: nn.Module,
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    mask: torch.Tensor,
    *,
    head_dim: int,
    eps: float,
    cond: torch.Tensor | None = None,
    prefix_kv: tuple[torch.Tensor, torch.Tensor] | None = None,
    keys_only: bool = False,
) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """One Gemma decoder layer (a stock ``GemmaDecoderLayer``'s weights) the reference way.

    Args:
        layer: has ``input_layernorm``, ``self_attn.{q,k,v,o}_proj``,
            ``post_attention_layernorm`` and ``mlp``; the norms are Gemma RMSNorms or
            :class:`AdaRMSNorm` (then ``cond`` is required and residuals are gated).
        x: hidden states ``[B, S, W]``.
        cos, sin: RoPE tables of the layer's own tokens.
        mask: additive ``[B, 1, S, K]`` over the keys attended (prefix keys first).
        prefix_kv: read-only post-RoPE keys/values ``[B, Hkv, Lp, D]`` put in front of this
            layer's own; they are never updated (openpi's patched ``GemmaAttention``
            with ``use_cache=False``).
        keys_only: return after computing this layer's keys/values (the last prefix layer
            needs nothing else).

    Returns:
        ``(output or None, keys, values)``: the keys/values of this layer's own tokens.
    """
    h, gate = _norm(layer.input_layernorm, x, cond, eps)
    q, k, v = project_qkv(layer.self_attn, h, head_dim, cos, sin)
    if keys_only:
        return None, k, v
    keys, values = (k, v) if prefix_kv is None else attend_with_prefix(prefix_kv, k, v)
    attn = attention(q, keys, values, mask, head_dim**-0.5)
    x = gated_residual(x, layer.self_attn.o_proj(attn), gate)
    h, gate = _norm(layer.post_attention_layernorm, x, cond, eps)
    x = gated_residual(x, layer.mlp(h), gate)
    return x, k, v


def attend_with_prefix(
    prefix_kv: tuple[torch.Tensor, torch.Tensor], k: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Keys and values the expert attends over: the cached prefix's, then its own.

    Returns new tensors: the cache is read, never written.
    """
    return torch.cat([prefix_kv[0], k], dim=2), torch.cat([prefix_kv[1], v], dim=2)


def euler_times(num_steps: int) -> list[float]:
    """Flow times visited by openpi's Euler loop.

    ``t = 1``, then ``t += dt`` in float32 while ``t >= -dt/2``, ``dt = -1/num_steps``
    (so exactly ``num_steps`` times).
    """
    dt = np.float32(-1.0 / num_steps)
    t = np.float32(1.0)
    times: list[float] = []
    while t >= -dt / np.float32(2.0):
        times.append(float(t))
        t = np.float32(t + dt)
    return times
