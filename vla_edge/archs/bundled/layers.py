"""Transformer building blocks written with plain ``Linear``, ``matmul`` and ``softmax``.

No ``nn.MultiheadAttention``, no ``scaled_dot_product_attention`` and no
data-dependent control flow, so every stage exports with ``torch.export`` to
ONNX and lowers to XNNPACK.

Any device, any weight dtype (:func:`~vla_edge.runners.torch_device.place_module`):
nothing here makes a tensor, so a forward runs where its inputs are, and the
blocks compute in the dtype of their input (the stage's weight dtype, see
:func:`cast`) except for the attention softmax, which runs in float32. Layer and
group norms are the stock modules: their kernels keep the statistics in float32
for a bfloat16 or float16 input.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def cast(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``x`` in ``dtype``, or ``x`` itself when it already is (no cast in a traced graph).

    The stages cast where a float32 input enters a weight of another dtype and
    where the float32 arithmetic (softmax, Euler update) takes over again; with
    float32 weights every such cast is ``x`` itself, so the float32 programs
    stay as they were.
    """
    return x if x.dtype == dtype else x.to(dtype)


class Attention(nn.Module):
    """Multi-head attention of queries ``[B, Tq, D]`` over keys/values ``[B, Tk, D]``."""

    def __init__(self, d_model: int, num_heads: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.out = nn.Linear(d_model, d_model)

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, T, D] -> [B, heads, T, D/heads]``."""
        b, t, _ = x.shape
        return x.reshape(b, t, self.num_heads, self.head_dim).transpose(1, 2)

    def keys_values(self, source: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Projected, head-split keys and values of ``source`` (reusable across queries)."""
        return self.split_heads(self.k(source)), self.split_heads(self.v(source))

    def attend(self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Attention of ``x`` over precomputed head-split ``k``, ``v`` (softmax in float32)."""
        b, t, d = x.shape
        q = self.split_heads(self.q(x))
        scores = cast(torch.matmul(q, k.transpose(-2, -1)), torch.float32) * self.scale
        weights = cast(torch.softmax(scores, dim=-1), v.dtype)
        mixed = torch.matmul(weights, v).transpose(1, 2).reshape(b, t, d)
        return self.out(mixed)

    def forward(self, x: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
        """Attention of ``x`` over ``source``."""
        k, v = self.keys_values(source)
        return self.attend(x, k, v)


class Mlp(nn.Module):
    """Two-layer GELU feed-forward."""

    def __init__(self, d_model: int, ratio: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_model * ratio)
        self.act = nn.GELU(approximate="tanh")
        self.fc2 = nn.Linear(d_model * ratio, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, T, D] -> [B, T, D]``."""
        return self.fc2(self.act(self.fc1(x)))


class SelfAttentionBlock(nn.Module):
    """Pre-norm transformer encoder block."""

    def __init__(self, d_model: int, num_heads: int, mlp_ratio: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = Attention(d_model, num_heads)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = Mlp(d_model, mlp_ratio)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, T, D] -> [B, T, D]``."""
        h = self.norm1(x)
        x = x + self.attn(h, h)
        return x + self.mlp(self.norm2(x))


class CrossAttentionBlock(nn.Module):
    """Pre-norm decoder block: self-attention, cross-attention to a context, MLP."""

    def __init__(self, d_model: int, num_heads: int, mlp_ratio: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.self_attn = Attention(d_model, num_heads)
        self.norm2 = nn.LayerNorm(d_model)
        self.cross_attn = Attention(d_model, num_heads)
        self.norm3 = nn.LayerNorm(d_model)
        self.mlp = Mlp(d_model, mlp_ratio)

    def context_keys_values(self, context: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Cross-attention keys/values of the (already normalised) context."""
        return self.cross_attn.keys_values(context)

    def forward(self, x: torch.Tensor, ctx_k: torch.Tensor, ctx_v: torch.Tensor) -> torch.Tensor:
        """``x [B, T, D]`` attending to itself and to the context keys/values."""
        h = self.norm1(x)
        x = x + self.self_attn(h, h)
        x = x + self.cross_attn.attend(self.norm2(x), ctx_k, ctx_v)
        return x + self.mlp(self.norm3(x))
