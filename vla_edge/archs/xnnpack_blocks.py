"""Blocks written with only the operators ExecuTorch's XNNPACK partitioner takes.

Shared by the architectures' XNNPACK rewrites (:mod:`vla_edge.archs.pi0.xnnpack`,
:mod:`vla_edge.archs.smolvla.xnnpack`): the reference's maths, with masks in float
arithmetic (:func:`additive_mask`), norms as 4-D means over the two innermost dims
(XNNPACK's global average pooling: :func:`rms_normed`, :func:`layer_norm`), attention with
the heads folded into a 3-D ``bmm`` batch (:func:`folded_attention`), rotate-half RoPE
(:func:`rotate`), per-layer tensors stacked with concatenations of at most
:data:`MAX_CAT_INPUTS` (:func:`stack_layers`), and a SigLIP-style vision tower
(:func:`vision_features`).
"""

from __future__ import annotations

import torch
from torch import nn

from vla_edge.archs.prefix_attention import MASKED_VALUE

MAX_CAT_INPUTS = 5
"""Most tensors one XNNPACK concatenation takes (ExecuTorch 1.5's ``CatConfig``)."""


def additive_mask(allowed: torch.Tensor) -> torch.Tensor:
    """0 where ``allowed`` is 1, the masked value where it is 0, in ``allowed``'s dtype.

    float32 masks with the reference's ``MASKED_VALUE``; a half-precision stage (the
    ``fp16`` recipe) with its dtype's lowest finite value, since ``MASKED_VALUE`` is
    ``-inf`` in fp16 and ``0 * inf`` would turn every allowed score into NaN.
    """
    masked = MASKED_VALUE if allowed.dtype == torch.float32 else torch.finfo(allowed.dtype).min
    return (allowed - 1.0) * -masked


def _mean_last(x: torch.Tensor) -> torch.Tensor:
    """Mean over the last dim as a 4-D mean (keepdim), for ``x`` ``[..., D]``."""
    shape = x.shape
    m = x.reshape(-1, 1, shape[-1], 1).mean(dim=(2, 3), keepdim=True)
    return m.reshape(*shape[:-1], 1)


def rms_normed(x: torch.Tensor, eps: float) -> torch.Tensor:
    """``x * rsqrt(mean(x²) + eps)`` over the last dim."""
    return x * torch.rsqrt(_mean_last(x * x) + eps)


def layer_norm(x: torch.Tensor, norm: nn.LayerNorm) -> torch.Tensor:
    """``nn.LayerNorm`` over the last dim with 4-D means."""
    centred = x - _mean_last(x)
    y = centred * torch.rsqrt(_mean_last(centred * centred) + norm.eps)
    return y * norm.weight + norm.bias


def split_heads(x: torch.Tensor, heads: int, head_dim: int) -> torch.Tensor:
    """``[B, S, heads * D]`` → ``[B, heads, S, D]``."""
    b, s, _ = x.shape
    return x.reshape(b, s, heads, head_dim).permute(0, 2, 1, 3)


def folded_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, mask: torch.Tensor | None
) -> torch.Tensor:
    """Grouped-query attention with 3-D ``bmm``.

    Args:
        q: ``[B, H, S, D]``; k, v: ``[B, Hkv, K, D]`` (query head ``h`` reads key head
            ``h // (H / Hkv)``, as ``repeat_kv`` orders them).
        mask: additive ``[B, 1, S, K]`` or ``None``.

    Returns:
        ``[B, S, H * D]``.
    """
    b, h, s, d = q.shape
    hkv, n_keys = k.shape[1], k.shape[2]
    groups = h // hkv
    qf = q.reshape(b * hkv, groups * s, d)
    kf = k.reshape(b * hkv, n_keys, d)
    vf = v.reshape(b * hkv, n_keys, d)
    scores = torch.bmm(qf, kf.transpose(1, 2)) * scale
    if mask is not None:
        scores = (scores.reshape(b, h, s, n_keys) + mask).reshape(b * hkv, groups * s, n_keys)
    out = torch.bmm(torch.softmax(scores, dim=-1), vf)
    return out.reshape(b, h, s, d).permute(0, 2, 1, 3).reshape(b, s, h * d)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE (rotate-half) of ``x`` ``[B, H, S, D]`` by tables ``[B, 1, S, D]``."""
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


def stack_layers(tensors: list[torch.Tensor]) -> torch.Tensor:
    """``torch.stack`` along a new dim 0, as concatenations of at most MAX_CAT_INPUTS."""
    parts = [t.reshape(1, *t.shape) for t in tensors]
    while len(parts) > 1:
        groups = [parts[i : i + MAX_CAT_INPUTS] for i in range(0, len(parts), MAX_CAT_INPUTS)]
        parts = [g[0] if len(g) == 1 else torch.cat(g, dim=0) for g in groups]
    return parts[0]


def vision_features(tower: nn.Module, images: torch.Tensor) -> torch.Tensor:
    """A SigLIP-style vision tower on XNNPACK's operators, to its final norm.

    Patches plus the position table, pre-norm attention and MLP layers, the last
    LayerNorm. ``tower`` holds ``patch_embedding``, ``position_embedding`` (the table),
    ``layers``, ``heads``, ``head_dim``, ``scale`` and ``post_layernorm``: π0's SigLIP and
    SmolVLA's SmolVLM tower (:mod:`vla_edge.archs.smolvla.xnnpack`).
    """
    patches = tower.patch_embedding(images)
    n, c = patches.shape[:2]
    x = patches.reshape(n, c, -1).permute(0, 2, 1) + tower.position_embedding
    for layer in tower.layers:
        h = layer_norm(x, layer.layer_norm1)
        a = layer.self_attn
        q, k, v = (
            split_heads(proj(h), tower.heads, tower.head_dim)
            for proj in (a.q_proj, a.k_proj, a.v_proj)
        )
        x = x + a.out_proj(folded_attention(q, k, v, tower.scale, None))
        x = x + layer.mlp(layer_norm(x, layer.layer_norm2))
    return layer_norm(x, tower.post_layernorm)
