"""Layers rewritten with ops XNNPACK takes (same parameters, same maths), for ExecuTorch.

ExecuTorch 1.5's XNNPACK partitioner takes neither layer/group norm nor the
``expand`` that a 4-D ``matmul`` decomposes into, so each of them splits a
stage into separate delegate calls with a portable kernel in between (the
bundled action head: 123 XNNPACK calls per chunk, and a 10-minute export).

* norms become a 4-D ``mean`` over the two innermost dims (XNNPACK's global
  average pooling), ``sub``, ``mul``, ``rsqrt`` and ``add``;
* attention folds the heads into the batch and uses 3-D ``bmm``.

:func:`rewrite_for_xnnpack` swaps them in on a copy of a stage; the exporter
then checks the lowered program against the original module.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from vla_edge.policy.layers import Attention


class XnnpackLayerNorm(nn.Module):
    """``nn.LayerNorm`` over the last dimension, as 4-D means."""

    def __init__(self, norm: nn.LayerNorm) -> None:
        super().__init__()
        if len(norm.normalized_shape) != 1:
            raise ValueError(f"normalized_shape = {norm.normalized_shape}, expected one dimension")
        self.eps = float(norm.eps)
        self.weight = norm.weight
        self.bias = norm.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise ``[..., D]`` over ``D``."""
        shape = x.shape
        x4 = x.reshape(-1, 1, shape[-1], 1)
        centred = x4 - x4.mean(dim=(2, 3), keepdim=True)
        var = (centred * centred).mean(dim=(2, 3), keepdim=True)
        y = (centred * torch.rsqrt(var + self.eps)).reshape(shape)
        if self.weight is not None:
            y = y * self.weight
        if self.bias is not None:
            y = y + self.bias
        return y


class XnnpackGroupNorm(nn.Module):
    """``nn.GroupNorm`` on ``[N, C, H, W]``, as 4-D means."""

    def __init__(self, norm: nn.GroupNorm) -> None:
        super().__init__()
        self.groups = int(norm.num_groups)
        self.eps = float(norm.eps)
        self.weight = norm.weight
        self.bias = norm.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Normalise each group of channels over channels and pixels."""
        n, c, h, w = x.shape
        g = x.reshape(n, self.groups, c // self.groups, h * w)
        centred = g - g.mean(dim=(2, 3), keepdim=True)
        var = (centred * centred).mean(dim=(2, 3), keepdim=True)
        y = (centred * torch.rsqrt(var + self.eps)).reshape(n, c, h, w)
        if self.weight is not None:
            y = y * self.weight.reshape(1, c, 1, 1)
        if self.bias is not None:
            y = y + self.bias.reshape(1, c, 1, 1)
        return y


class XnnpackAttention(nn.Module):
    """:class:`~vla_edge.policy.layers.Attention` with heads folded into a 3-D ``bmm`` batch.

    Keys and values from :meth:`keys_values` are ``[B * heads, T, D / heads]``;
    :meth:`attend` takes them in that layout (as the policy's blocks pass them on).
    """

    def __init__(self, attn: Attention) -> None:
        super().__init__()
        self.num_heads = attn.num_heads
        self.head_dim = attn.head_dim
        self.scale = attn.scale
        self.q, self.k, self.v, self.out = attn.q, attn.k, attn.v, attn.out

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, T, D] -> [B * heads, T, D / heads]``."""
        b, t, _ = x.shape
        x = x.reshape(b, t, self.num_heads, self.head_dim).transpose(1, 2)
        return x.reshape(b * self.num_heads, t, self.head_dim)

    def keys_values(self, source: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Projected, head-folded keys and values of ``source``."""
        return self.split_heads(self.k(source)), self.split_heads(self.v(source))

    def attend(self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Attention of ``x`` over head-folded ``k``, ``v``."""
        b, t, d = x.shape
        q = self.split_heads(self.q(x))
        weights = torch.softmax(torch.bmm(q, k.transpose(1, 2)) * self.scale, dim=-1)
        mixed = torch.bmm(weights, v).reshape(b, self.num_heads, t, self.head_dim)
        return self.out(mixed.transpose(1, 2).reshape(b, t, d))

    def forward(self, x: torch.Tensor, source: torch.Tensor) -> torch.Tensor:
        """Attention of ``x`` over ``source``."""
        k, v = self.keys_values(source)
        return self.attend(x, k, v)


def rewrite_for_xnnpack(
    module: nn.Module, in_place: bool = False
) -> tuple[nn.Module, dict[str, int]]:
    """``module`` with norms and attention rewritten (a copy unless ``in_place``); the counts."""
    rewritten = module if in_place else copy.deepcopy(module)
    counts = {"norms": 0, "attention": 0}
    for parent in list(rewritten.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.LayerNorm) and len(child.normalized_shape) == 1:
                setattr(parent, name, XnnpackLayerNorm(child))
                counts["norms"] += 1
            elif isinstance(child, nn.GroupNorm):
                setattr(parent, name, XnnpackGroupNorm(child))
                counts["norms"] += 1
            elif isinstance(child, Attention):
                setattr(parent, name, XnnpackAttention(child))
                counts["attention"] += 1
    return rewritten, counts
