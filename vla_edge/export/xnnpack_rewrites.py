"""Layers rewritten with ops XNNPACK takes (same parameters, same maths), for ExecuTorch.

ExecuTorch 1.5's XNNPACK partitioner takes neither layer/group norm nor the
``expand`` that a 4-D ``matmul`` decomposes into, so each of them splits a
stage into separate delegate calls with a portable kernel in between (the
bundled action head: 123 XNNPACK calls per chunk, and a 10-minute export).

* norms (``nn.LayerNorm`` over one dim, ``nn.GroupNorm``, any architecture's)
  become a 4-D ``mean`` over the two innermost dims (XNNPACK's global average
  pooling), ``sub``, ``mul``, ``rsqrt`` and ``add``;
* an architecture's own attention layer becomes the rewrite it registers
  (:attr:`vla_edge.archs.architecture.ExportHooks.xnnpack_attention`: heads
  folded into the batch, 3-D ``bmm``; the bundled model's is
  :mod:`vla_edge.archs.bundled.xnnpack`).

:func:`rewrite_for_xnnpack` swaps them in on a copy of a stage; the exporter
then checks the lowered program against the original module.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

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


AttentionRewrite = tuple[type[nn.Module], Callable[[nn.Module], nn.Module]]
"""``(attention class, rewrite)``: each instance of the class is replaced by ``rewrite(it)``."""


def rewrite_for_xnnpack(
    module: nn.Module, in_place: bool = False, attention: AttentionRewrite | None = None
) -> tuple[nn.Module, dict[str, int]]:
    """``module`` with norms and attention rewritten (a copy unless ``in_place``); the counts.

    Args:
        attention: the architecture's attention class and its rewrite; ``None``: attention
            is left as it is (an architecture whose stages are already written for XNNPACK).
    """
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
            elif attention is not None and isinstance(child, attention[0]):
                setattr(parent, name, attention[1](child))
                counts["attention"] += 1
    return rewritten, counts
