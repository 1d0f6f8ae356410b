"""The VLM-prefix attention every imported architecture shares (π0, π0.5, SmolVLA).

Each is the reference's arithmetic written once, in plain ``matmul`` / ``softmax`` so
``torch.export`` lowers it without fused attention:

* :func:`embed_language_tokens`: ``table[ids] * sqrt(width)`` (openpi's ``embed_prefix``,
  SmolVLA's ``embed_language_tokens``);
* :func:`attention_mask_2d`: big_vision's cumulative-sum block convention
  (``make_att_2d_masks``), :func:`prefix_positions` (``cumsum(pad) - 1``);
* :func:`additive_mask` with :data:`MASKED_VALUE` (finite, so a fully masked row stays
  finite), :func:`attention`: eager grouped-query attention with an additive mask.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F  # noqa: N812

MASKED_VALUE = -2.3819763e38
"""Additive attention-mask value for a masked key (openpi ``_prepare_attention_masks_4d``)."""


def embed_language_tokens(table: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """Language embeddings as openpi's ``embed_prefix``: ``table[ids] * sqrt(width)``.

    Args:
        table: the embedding weight ``[vocab, width]`` (a plain lookup, not the stock
            module, whose forward in transformers 5.x already multiplies by sqrt(width)).
        token_ids: int64 ``[B, L]``.
    """
    width = table.shape[-1]
    return F.embedding(token_ids, table) * math.sqrt(width)


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
