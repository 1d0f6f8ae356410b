"""Stage 4, ``action_head``: flow matching over an action chunk, with an executed prefix.

Convention (π0): ``x_tau = tau * actions + (1 - tau) * noise``; ``tau = 0`` is
pure noise, ``tau = 1`` the clean chunk; the network predicts the velocity
``actions - noise``. Inference integrates ``K`` Euler steps from ``tau = 0``
to ``1``; the loop is unrolled in ``forward`` (``K`` fixed at construction).

Prefix conditioning: the first ``d`` rows of the chunk may be known (the
steps that execute while inference runs). Those rows are held at their known
values with flow time 1 (clean) at every Euler step, and are excluded from
the training loss; training samples ``d`` at random in ``0..max_prefix_len``.

Any device, any weight dtype: the flow times and ``dt`` are Python numbers and
the time embedding's table is made on ``tau``'s device, so a forward makes no
tensor on the host (a CUDA graph captures all ``K`` steps). The Euler state,
the executed prefix and the flow times stay in the dtype of ``noise`` (float32
from the runners) and the time embedding is computed in float32; the network
reads them (and the context) in its weights' dtype and its velocity comes back
in the state's dtype, so the chunk leaves as ``noise`` came, whatever the
weights' dtype.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from vla_edge.archs.bundled.config import PolicyConfig
from vla_edge.archs.bundled.layers import CrossAttentionBlock, cast


def time_embedding(tau: torch.Tensor, dim: int) -> torch.Tensor:
    """Sinusoidal embedding ``[..., dim]`` of flow times ``tau [...]`` in [0, 1]."""
    half = dim // 2
    min_period, max_period = 4e-3, 4.0
    fraction = torch.arange(half, dtype=torch.float32, device=tau.device) / max(half - 1, 1)
    period = min_period * (max_period / min_period) ** fraction
    angles = tau.unsqueeze(-1) * (2.0 * math.pi / period)
    # in tau's precision (an fp16 export's), computed in fp32
    return torch.cat([torch.sin(angles), torch.cos(angles)], dim=-1).to(tau.dtype)


class ActionHead(nn.Module):
    """``(context, noise, prefix_actions, prefix_mask) -> actions_norm [B, H, A]``."""

    def __init__(self, config: PolicyConfig) -> None:
        super().__init__()
        d = config.d_model
        self.d_model = d
        self.horizon = config.chunk_horizon
        self.action_dim = config.action_dim
        self.flow_steps = config.flow_steps
        self.action_in = nn.Linear(config.action_dim, d)
        self.time_mix = nn.Sequential(nn.Linear(2 * d, d), nn.SiLU(), nn.Linear(d, d))
        self.position = nn.Parameter(torch.randn(1, config.chunk_horizon, d) * 0.02)
        self.context_norm = nn.LayerNorm(d)
        self.blocks = nn.ModuleList(
            CrossAttentionBlock(d, config.num_heads, config.mlp_ratio)
            for _ in range(config.head_layers)
        )
        self.norm = nn.LayerNorm(d)
        self.action_out = nn.Linear(d, config.action_dim)

    def context_keys_values(self, context: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Per-block cross-attention keys/values (weights' dtype); computed once per chunk."""
        ctx = self.context_norm(cast(context, self.position.dtype))
        return [block.context_keys_values(ctx) for block in self.blocks]

    def velocity(
        self,
        x: torch.Tensor,
        tau_tokens: torch.Tensor,
        context_kv: list[tuple[torch.Tensor, torch.Tensor]],
    ) -> torch.Tensor:
        """Predicted velocity ``[B, H, A]`` in ``x``'s dtype, per-row flow times ``[B, H]``."""
        dtype = self.position.dtype
        x_emb = self.action_in(cast(x, dtype))
        tau_emb = cast(time_embedding(tau_tokens, self.d_model), dtype)
        h = torch.cat([x_emb, tau_emb], dim=-1)
        h = self.time_mix(h) + self.position
        for block, (k, v) in zip(self.blocks, context_kv, strict=True):
            h = block(h, k, v)
        return cast(self.action_out(self.norm(h)), x.dtype)

    def forward(
        self,
        context: torch.Tensor,
        noise: torch.Tensor,
        prefix_actions: torch.Tensor,
        prefix_mask: torch.Tensor,
    ) -> torch.Tensor:
        """Integrate ``K`` Euler steps from ``noise``; prefix rows (mask 1) are held fixed.

        Args:
            context: ``[B, T_c, D]`` from the fusion stage.
            noise: ``[B, H, A]`` standard-normal start of the flow.
            prefix_actions: ``[B, H, A]`` normalised known rows (others ignored).
            prefix_mask: ``[B, H]`` float, 1 for a known row, 0 otherwise.

        Returns:
            The normalised chunk ``[B, H, A]`` in ``noise``'s dtype (float32 from the runners).
        """
        context_kv = self.context_keys_values(context)
        prefix_mask = cast(prefix_mask, noise.dtype)
        keep = prefix_mask.unsqueeze(-1)
        known = cast(prefix_actions, noise.dtype) * keep
        free = 1.0 - keep
        dt = 1.0 / self.flow_steps
        x = noise
        for step in range(self.flow_steps):
            tau = step * dt
            x = known + free * x
            tau_tokens = prefix_mask + (1.0 - prefix_mask) * tau
            x = x + dt * self.velocity(x, tau_tokens, context_kv)
        return known + free * x

    def flow_matching_loss(
        self,
        context: torch.Tensor,
        actions: torch.Tensor,
        noise: torch.Tensor,
        tau: torch.Tensor,
        prefix_len: torch.Tensor,
        draws_per_context: int = 1,
    ) -> torch.Tensor:
        """Mean squared velocity error over the rows after each sample's prefix.

        Args:
            context: ``[B, T_c, D]``.
            actions: ``[B * m, H, A]`` normalised target chunks, ``m`` consecutive
                draws (``draws_per_context``) per context.
            noise: ``[B * m, H, A]``.
            tau: ``[B * m]`` flow times in [0, 1].
            prefix_len: ``[B * m]`` int, number of known leading rows per sample.
            draws_per_context: ``m``; the context keys/values are computed once
                per context and shared by its draws.
        """
        rows = torch.arange(self.horizon, device=actions.device)
        prefix_mask = (rows.unsqueeze(0) < prefix_len.unsqueeze(1)).to(actions.dtype)
        keep = prefix_mask.unsqueeze(-1)
        t = tau.view(-1, 1, 1)
        x_tau = t * actions + (1.0 - t) * noise
        x_in = keep * actions + (1.0 - keep) * x_tau
        tau_tokens = prefix_mask + (1.0 - prefix_mask) * tau.view(-1, 1)
        context_kv = [
            (
                k.repeat_interleave(draws_per_context, dim=0),
                v.repeat_interleave(draws_per_context, dim=0),
            )
            for k, v in self.context_keys_values(context)
        ]
        pred = self.velocity(x_in, tau_tokens, context_kv)
        err = (pred - (actions - noise)) ** 2 * (1.0 - keep)
        return err.sum() / ((1.0 - keep).sum() * self.action_dim).clamp(min=1.0)
