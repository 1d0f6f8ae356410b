"""The places where openpi's π0 departs from stock ``transformers``, each written once.

openpi's PyTorch port runs on a patched transformers 4.53.2
(``src/openpi/models_pytorch/transformers_replace``). This package runs on stock
transformers 5.x, using its modules for the parameters (key names) and these
functions for the arithmetic, all plain ``Linear`` / ``matmul`` / ``softmax`` so
that ``torch.export`` lowers them without fused attention or cache objects:

* ``embed_language_tokens``: ``table[ids] * sqrt(width)``, once, in the prefix
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
* :func:`euler_times` (``dt = -1/K`` from ``t = 1``).

The prefix's attention (:func:`embed_language_tokens`, :func:`attention_mask_2d`,
:func:`prefix_positions`, :func:`additive_mask`, :func:`attention`) is shared with SmolVLA:
:mod:`vla_edge.archs.prefix_attention`, imported here under the same names.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from vla_edge.archs.prefix_attention import MASKED_VALUE as MASKED_VALUE
from vla_edge.archs.prefix_attention import additive_mask as additive_mask
from vla_edge.archs.prefix_attention import attention as attention
from vla_edge.archs.prefix_attention import attention_mask_2d as attention_mask_2d
from vla_edge.archs.prefix_attention import embed_language_tokens as embed_language_tokens
from vla_edge.archs.prefix_attention import prefix_positions as prefix_positions

TIME_MIN_PERIOD = 4e-3
TIME_MAX_PERIOD = 4.0


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


def suffix_positions(prefix_pad: torch.Tensor, suffix_len: int) -> torch.Tensor:
    """Suffix RoPE positions ``sum(prefix_pad) + cumsum(suffix_pad) - 1`` (no suffix padding)."""
    offset = prefix_pad.to(torch.int64).sum(dim=-1, keepdim=True)
    steps = torch.arange(suffix_len, dtype=torch.int64, device=prefix_pad.device)
    return offset + steps[None]


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
