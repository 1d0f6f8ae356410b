"""The places where LeRobot's SmolVLA departs from stock ``transformers``, each written once.

LeRobot's ``smolvlm_with_expert.py`` uses stock SmolVLM / Llama modules for the parameters
and its own arithmetic; so does this package, in plain ``Linear`` / ``matmul`` / ``softmax``
so that ``torch.export`` lowers it without fused attention or ``DynamicCache`` objects:

* :func:`rope_tables` / :func:`rotate`: LeRobot's ``apply_rope`` with ``max_wavelength``
  10000 (the backbone config's ``rope_theta`` is 100000 and goes unused), timescales
  ``10000 ** (2i / D)`` and the rotate-half layout, in float32.
* :func:`rebase_positions`: cross-attention layers rotate the expert's queries at positions
  re-based to start at 0; self-attention layers keep ``sum(prefix_pad) + i``.
* :func:`vlm_layer`: a backbone Llama layer over the prefix, returning its post-RoPE keys and
  values (the cache).
* :func:`cross_attention_kv`: a cross-attention expert layer's ``k_proj`` / ``v_proj`` are
  ``Linear(vlm_kv_heads * head_dim, expert_kv_heads * head_dim)`` applied to the backbone's
  cached (post-RoPE) keys and values, heads flattened head-major; no RoPE on the result.
* :func:`expert_layer`: self-attention layers attend over the cached prefix and their own
  keys/values (never written back, as LeRobot's ``past_key_values.crop(prefix_len)``);
  cross-attention layers attend over the projected prefix only.
* :func:`time_embedding`: LeRobot's ``create_sinusoidal_pos_embedding`` computed in float64
  (``get_safe_dtype(float64, device)``: float32 on MPS, which has none), then cast to float32.
* :func:`flow_times`: LeRobot's ``euler_integrate`` times ``1 + step * dt`` in float64, then
  float32 (openpi's loop accumulates ``t += dt`` in float32 instead).
* :func:`prefix_block_starts`: image and language tokens 0, the state token 1, so images and
  language never see the state; :func:`suffix_block_starts`: all 1, causal action tokens.

Any device, any weight dtype: every function here makes its tensors on its input's device
(nothing on the host inside a forward, so a stage can be captured as a CUDA graph), and
:func:`project` casts a float32 input to the dtype of the weights it enters, while RoPE, the
attention softmax and the time embedding stay in float32.

Shared with π0 (:mod:`vla_edge.archs.prefix_attention`): ``attention_mask_2d`` (big_vision's
``make_att_2d_masks``), ``prefix_positions`` (``cumsum(pad) - 1``), ``embed_language_tokens``
(``table[ids] * sqrt(width)``), ``additive_mask`` and ``attention``. LeRobot masks scores with
``torch.where(mask, scores, finfo(float32).min)``; the additive mask gives the same softmax
(a fully masked row is uniform either way) with one ``add`` that XNNPACK lowers.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from vla_edge.archs.prefix_attention import attention


def project(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``module(x)`` with ``x`` cast to the dtype of ``module.weight`` (a ``Linear`` or ``Conv``).

    Host inputs come in float32; weights may be placed in bfloat16 or float16.
    """
    return module(x.to(module.weight.dtype))


def rope_tables(
    positions: torch.Tensor, head_dim: int, max_wavelength: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """LeRobot's RoPE angles for integer positions ``[B, S]``: ``(cos, sin)`` ``[B, 1, S, D/2]``.

    ``radians = position / max_wavelength ** ((2 / D) * i)`` for ``i < D/2``, in float32.
    """
    d_half = head_dim // 2
    freq_exponents = (2.0 / head_dim) * torch.arange(
        d_half, dtype=torch.float32, device=positions.device
    )
    timescale = max_wavelength**freq_exponents
    radians = positions[..., None].to(torch.float32) / timescale[None, None, :]
    radians = radians[:, None]
    return torch.cos(radians), torch.sin(radians)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` ``[B, H, S, D]``: ``[x1 cos - x2 sin, x2 cos + x1 sin]`` (halves x1, x2)."""
    dtype = x.dtype
    x = x.to(torch.float32)
    x1, x2 = x.split(x.shape[-1] // 2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(dtype)


def rebase_positions(positions: torch.Tensor) -> torch.Tensor:
    """``positions - min(positions)`` per row: the expert's query positions in cross-attention."""
    return positions - torch.min(positions, dim=1, keepdim=True).values


def suffix_positions(prefix_pad: torch.Tensor, suffix_len: int) -> torch.Tensor:
    """Action-token positions ``sum(prefix_pad) + i`` (LeRobot's ``denoise_step``)."""
    offset = prefix_pad.to(torch.int64).sum(dim=-1, keepdim=True)
    return offset + torch.arange(suffix_len, dtype=torch.int64, device=prefix_pad.device)[None]


def prefix_block_starts(n_image_and_text: int, device: torch.device | None = None) -> torch.Tensor:
    """``[0] * (images + text) + [1]``: the state token starts a block of its own.

    Made by a comparison, not ``starts[-1] = 1``: Python item assignment into a CUDA tensor
    copies a host scalar over, which a CUDA graph cannot capture.
    """
    positions = torch.arange(n_image_and_text + 1, dtype=torch.int64, device=device)
    return (positions == n_image_and_text).to(torch.int64)


def suffix_block_starts(chunk_size: int, device: torch.device | None = None) -> torch.Tensor:
    """``[1] * chunk_size``: every action token its own block (causal among actions)."""
    return torch.ones(chunk_size, dtype=torch.int64, device=device)


def time_embedding(t: torch.Tensor, dim: int, min_period: float, max_period: float) -> torch.Tensor:
    """``[sin(2π t / p), cos(2π t / p)]`` for ``dim / 2`` periods log-spaced over [min, max].

    Float64 arithmetic on ``t``'s device (as LeRobot; float32 on MPS, which has no float64),
    float32 result.

    Args:
        t: ``[B]`` flow times.
        dim: output width (even).
    """
    wide = torch.float32 if t.device.type == "mps" else torch.float64
    fraction = torch.linspace(0.0, 1.0, dim // 2, dtype=wide, device=t.device)
    period = min_period * (max_period / min_period) ** fraction
    scaling = 1.0 / period * 2 * math.pi
    angle = t[..., None] * scaling
    return torch.cat([torch.sin(angle), torch.cos(angle)], dim=-1).to(torch.float32)


def flow_times(num_steps: int) -> list[float]:
    """The flow times LeRobot's ``euler_integrate`` visits: ``float32(1 + step * (-1/K))``."""
    dt = -1.0 / num_steps
    return [float(np.float32(1.0 + step * dt)) for step in range(num_steps)]


def _split_heads(x: torch.Tensor, head_dim: int) -> torch.Tensor:
    """``[B, S, H * D]`` → ``[B, H, S, D]``."""
    b, s, _ = x.shape
    return x.view(b, s, -1, head_dim).transpose(1, 2)


def _merge_heads(x: torch.Tensor) -> torch.Tensor:
    """``[B, H, S, D]`` → ``[B, S, H * D]`` (head-major, as LeRobot's ``reshape``)."""
    b, h, s, d = x.shape
    return x.transpose(1, 2).reshape(b, s, h * d)


def _mlp_block(layer: nn.Module, x: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
    """``o_proj`` and residual, then ``post_attention_layernorm``, MLP and residual."""
    x = x + layer.self_attn.o_proj(attn)
    return x + layer.mlp(layer.post_attention_layernorm(x))


def vlm_layer(
    layer: nn.Module,
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    mask: torch.Tensor,
    *,
    head_dim: int,
    keys_only: bool = False,
) -> tuple[torch.Tensor | None, torch.Tensor, torch.Tensor]:
    """One backbone layer (a stock ``LlamaDecoderLayer``'s weights) over the prefix.

    Args:
        layer: has ``input_layernorm``, ``self_attn.{q,k,v,o}_proj``,
            ``post_attention_layernorm`` and ``mlp`` (stock Llama RMSNorm and SwiGLU MLP).
        x: hidden states ``[B, S, W]``; cos, sin: :func:`rope_tables` of the prefix positions.
        mask: additive ``[B, 1, S, S]``.
        keys_only: return after the keys/values (the last layer needs nothing else).

    Returns:
        ``(output or None, keys, values)``, keys/values post-RoPE ``[B, kv_heads, S, D]``.
    """
    h = layer.input_layernorm(x)
    q = rotate(_split_heads(layer.self_attn.q_proj(h), head_dim), cos, sin)
    k = rotate(_split_heads(layer.self_attn.k_proj(h), head_dim), cos, sin)
    v = _split_heads(layer.self_attn.v_proj(h), head_dim)
    if keys_only:
        return None, k, v
    attn = attention(q, k, v, mask, head_dim**-0.5)
    return _mlp_block(layer, x, attn), k, v


def cross_attention_kv(
    layer: nn.Module, keys: torch.Tensor, values: torch.Tensor, head_dim: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """What a cross-attention expert layer attends over, ``[B, expert_kv_heads, L, D]``.

    Its ``k_proj`` / ``v_proj`` applied to the backbone's cached keys/values
    ``[B, vlm_kv_heads, L, D]`` (heads flattened head-major); no RoPE is applied to them.
    """
    k = layer.self_attn.k_proj(_merge_heads(keys))
    v = layer.self_attn.v_proj(_merge_heads(values))
    return _split_heads(k, head_dim), _split_heads(v, head_dim)


def expert_layer(
    layer: nn.Module,
    x: torch.Tensor,
    prefix_kv: tuple[torch.Tensor, torch.Tensor],
    *,
    cross: bool,
    self_rope: tuple[torch.Tensor, torch.Tensor],
    cross_rope: tuple[torch.Tensor, torch.Tensor],
    self_mask: torch.Tensor,
    cross_mask: torch.Tensor,
    head_dim: int,
) -> torch.Tensor:
    """One action-expert layer over the action tokens.

    Args:
        layer: a stock ``LlamaDecoderLayer`` (cross layers: ``k_proj`` / ``v_proj`` read the
            backbone's key/value width).
        x: hidden states ``[B, S, W_expert]``.
        prefix_kv: self-attention: the backbone's cached keys/values of this layer;
            cross-attention: :func:`cross_attention_kv` of them.
        cross: which kind of layer this is.
        self_rope: RoPE tables at ``sum(prefix_pad) + i``; cross_rope: at ``i``.
        self_mask: additive ``[B, 1, S, L + S]`` (prefix pad, then causal actions);
            cross_mask: ``[B, 1, S, L]`` (prefix pad).
    """
    h = layer.input_layernorm(x)
    q = _split_heads(layer.self_attn.q_proj(h), head_dim)
    if cross:
        q = rotate(q, *cross_rope)
        attn = attention(q, prefix_kv[0], prefix_kv[1], cross_mask, head_dim**-0.5)
    else:
        q = rotate(q, *self_rope)
        k = rotate(_split_heads(layer.self_attn.k_proj(h), head_dim), *self_rope)
        v = _split_heads(layer.self_attn.v_proj(h), head_dim)
        keys = torch.cat([prefix_kv[0], k], dim=2)
        values = torch.cat([prefix_kv[1], v], dim=2)
        attn = attention(q, keys, values, self_mask, head_dim**-0.5)
    return _mlp_block(layer, x, attn)
