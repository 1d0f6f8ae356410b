"""Stage 2, ``vision_encoder``: a small convolutional encoder trained from scratch.

``images [N, 3, h, w] float32 in [0, 1] -> visual tokens [N, T_v, D]`` where
``N`` is a multiple of the number of cameras (cameras in config order, one
observation after another) and ``T_v = (h / s) * (w / s)`` for the total
stride ``s = vision_downsample``. Each camera adds its own learned position
embedding, so the tokens say which camera and which cell they come from.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from vla_edge.policy.config import PolicyConfig


def _norm(channels: int) -> nn.GroupNorm:
    return nn.GroupNorm(min(8, channels), channels)


class ResidualConvBlock(nn.Module):
    """conv3x3-norm-ReLU-conv3x3-norm plus identity, then ReLU."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.norm1 = _norm(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.norm2 = _norm(channels)
        self.act = nn.ReLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Same shape in and out."""
        h = self.act(self.norm1(self.conv1(x)))
        return self.act(x + self.norm2(self.conv2(h)))


class VisionEncoder(nn.Module):
    """Shared conv trunk for all cameras plus per-camera position embeddings."""

    def __init__(self, config: PolicyConfig) -> None:
        super().__init__()
        self.num_cameras = len(config.cameras)
        self.tokens_per_camera = config.tokens_per_camera
        self.d_model = config.d_model
        n_stages = int(math.log2(config.vision_downsample))
        layers: list[nn.Module] = []
        c_in = 3
        for i in range(n_stages):
            c_out = config.vision_channels[min(i, len(config.vision_channels) - 1)]
            kernel = 5 if i == 0 else 3
            layers += [
                nn.Conv2d(c_in, c_out, kernel, stride=2, padding=kernel // 2),
                _norm(c_out),
                nn.ReLU(),
            ]
            if i >= 2:
                layers.append(ResidualConvBlock(c_out))
            c_in = c_out
        self.trunk = nn.Sequential(*layers)
        self.project = nn.Conv2d(c_in, config.d_model, 1)
        self.position = nn.Parameter(
            torch.randn(self.num_cameras, self.tokens_per_camera, config.d_model) * 0.02
        )

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """``[N, 3, h, w]`` in [0, 1] -> ``[N, T_v, D]``."""
        x = (images - 0.5) * 4.0
        x = self.project(self.trunk(x))
        tokens = x.flatten(2).transpose(1, 2)
        tokens = tokens.reshape(-1, self.num_cameras, self.tokens_per_camera, self.d_model)
        tokens = tokens + self.position
        return tokens.reshape(-1, self.tokens_per_camera, self.d_model)
