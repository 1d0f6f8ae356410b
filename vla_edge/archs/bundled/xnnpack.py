"""The bundled model's attention with its heads folded into a 3-D ``bmm`` batch, for XNNPACK.

ExecuTorch 1.5's XNNPACK partitioner does not take the ``expand`` that a 4-D ``matmul``
decomposes into, so each of :class:`~vla_edge.archs.bundled.layers.Attention`'s matmuls would split
a stage into separate delegate calls with a portable kernel in between (the action head:
123 XNNPACK calls per chunk). :class:`XnnpackAttention` computes the same with the heads
folded into the batch; :data:`ATTENTION_REWRITE` is what the bundled export hooks hand the
ExecuTorch pass (:func:`vla_edge.export.xnnpack_rewrites.rewrite_for_xnnpack`), which swaps
it in on a copy of each stage, next to its generic norm rewrite, after the torch reference
the program is checked against was taken.
"""

from __future__ import annotations

import torch
from torch import nn

from vla_edge.archs.bundled.layers import Attention


class XnnpackAttention(nn.Module):
    """:class:`~vla_edge.archs.bundled.layers.Attention` with heads folded into a 3-D ``bmm`` batch.

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


ATTENTION_REWRITE: tuple[type[nn.Module], type[nn.Module]] = (Attention, XnnpackAttention)
"""``(the model's attention class, its XNNPACK rewrite built from one instance)``."""
