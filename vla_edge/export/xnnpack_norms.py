"""LayerNorm and GroupNorm rewritten with ops XNNPACK takes (same parameters, same maths).

ExecuTorch 1.5's XNNPACK partitioner has no layer or group norm, so every
norm splits the graph into separate delegate calls with a portable kernel in
between. Written as a 4-D ``mean`` over the two innermost dims (XNNPACK's
global average pooling), ``sub``, ``mul``, ``rsqrt`` and ``add`` they are
delegated like the rest, which makes one XNNPACK call per stage and exports
faster. :func:`replace_norms` swaps them in on a copy of the module.
"""

from __future__ import annotations

import copy

import torch
from torch import nn


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


def replace_norms(module: nn.Module) -> tuple[nn.Module, int]:
    """A copy of ``module`` with every LayerNorm/GroupNorm rewritten; and how many."""
    rewritten = copy.deepcopy(module)
    count = 0
    for parent in list(rewritten.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.LayerNorm) and len(child.normalized_shape) == 1:
                setattr(parent, name, XnnpackLayerNorm(child))
                count += 1
            elif isinstance(child, nn.GroupNorm):
                setattr(parent, name, XnnpackGroupNorm(child))
                count += 1
    return rewritten, count
