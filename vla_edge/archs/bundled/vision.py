"""Stage 2, ``vision_encoder``: a small convolutional encoder trained from scratch.

``images [N, 3, h, w] float32 in [0, 1] -> visual tokens [N, T_v, D]`` where
``N`` is a multiple of the number of cameras (cameras in config order, one
observation after another) and ``T_v = (h / s) * (w / s) + K`` for the total
stride ``s = vision_downsample`` and ``K = vision_keypoints``. Each camera adds
its own learned position embedding, so the tokens say which camera and which
cell (or keypoint) they come from.

Keypoints (``K > 0``): a spatial softmax over the stride-8 feature map (the
robomimic / Levine et al. readout). Each of ``K`` learned channels becomes a
probability map; its expected image coordinate ``(x, y)`` in [-1, 1] and the
feature vector it attends to make one token. A coarse grid cell covers many
pixels; the expected coordinate locates a small object to a fraction of one.
Plain ``softmax``, ``linear`` and 3-D ``bmm`` only, so the stage still lowers to XNNPACK.

Weights in any dtype: the images are cast to the weights' dtype after scaling
and the tokens leave in the images' dtype (float32 from the runners, as the
manifest declares them). The keypoint softmax and coordinate readout run in the
dtype of the coordinate table, a buffer: float32 when the stage is placed with
:func:`~vla_edge.runners.torch_device.place_module`, whatever the weights' dtype.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from vla_edge.archs.bundled.config import PolicyConfig
from vla_edge.archs.bundled.layers import cast


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


KEYPOINT_STRIDE = 8
"""Stride of the feature map the keypoints are read from (or the trunk's, if smaller)."""


def pixel_coordinates(height: int, width: int) -> torch.Tensor:
    """``[height * width, 2]`` cell-centre ``(x, y)`` in [-1, 1], row-major."""
    ys = (torch.arange(height, dtype=torch.float32) + 0.5) / height * 2.0 - 1.0
    xs = (torch.arange(width, dtype=torch.float32) + 0.5) / width * 2.0 - 1.0
    grid_y, grid_x = torch.meshgrid(ys, xs, indexing="ij")
    return torch.stack([grid_x.reshape(-1), grid_y.reshape(-1)], dim=-1)


class SpatialSoftmaxKeypoints(nn.Module):
    """``features [N, C, h, w] -> tokens [N, K, D]`` (expected coordinate + attended feature)."""

    def __init__(self, channels: int, keypoints: int, d_model: int, height: int, width: int):
        super().__init__()
        self.logits = nn.Conv2d(channels, keypoints, 1)
        self.log_temperature = nn.Parameter(torch.zeros(1))
        coords_t = pixel_coordinates(height, width).t().contiguous()
        self.register_buffer("coords_t", coords_t, persistent=False)
        self.xy_proj = nn.Linear(2, d_model)
        self.feature_proj = nn.Linear(channels, d_model)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """Keypoint tokens of each image (softmax and coordinates in ``coords_t``'s dtype)."""
        precise = self.coords_t.dtype
        logits = cast(self.logits(features).flatten(2), precise)
        attention = torch.softmax(logits * torch.exp(cast(self.log_temperature, precise)), dim=-1)
        xy = F.linear(attention, self.coords_t)  # a batched matmul would add expand_copy
        attended = torch.bmm(cast(attention, features.dtype), features.flatten(2).transpose(1, 2))
        return self.xy_proj(cast(xy, features.dtype)) + self.feature_proj(attended)


class VisionEncoder(nn.Module):
    """Shared conv trunk for all cameras plus per-camera position embeddings."""

    def __init__(self, config: PolicyConfig) -> None:
        super().__init__()
        self.num_cameras = len(config.cameras)
        self.tokens_per_camera = config.tokens_per_camera
        self.d_model = config.d_model
        n_stages = int(math.log2(config.vision_downsample))  # one stride-2 conv each
        layers: list[nn.Module] = []
        c_in = 3
        kp_stage = min(int(math.log2(KEYPOINT_STRIDE)), n_stages) - 1
        self._keypoint_tap = -1
        for i in range(n_stages):
            c_out = config.vision_channels[min(i, len(config.vision_channels) - 1)]
            if i == 0:
                conv = nn.Conv2d(c_in, c_out, 5, stride=2, padding=2)
            else:
                conv = nn.Conv2d(c_in, c_out, 3, stride=2, padding=1)
            layers += [
                conv,
                _norm(c_out),
                nn.ReLU(),
            ]
            if i >= 2:
                layers.append(ResidualConvBlock(c_out))
            c_in = c_out
            if i == kp_stage:
                self._keypoint_tap = len(layers) - 1
                kp_channels, kp_stride = c_out, 2 ** (i + 1)
        self.trunk = nn.Sequential(*layers)
        self.keypoints: SpatialSoftmaxKeypoints | None = None
        if config.vision_keypoints > 0:
            self.keypoints = SpatialSoftmaxKeypoints(
                kp_channels,
                config.vision_keypoints,
                config.d_model,
                config.image_height // kp_stride,
                config.image_width // kp_stride,
            )
        self.project = nn.Conv2d(c_in, config.d_model, 1)
        self.position = nn.Parameter(
            torch.randn(self.num_cameras, self.tokens_per_camera, config.d_model) * 0.02
        )

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """``[N, 3, h, w]`` in [0, 1] -> ``[N, T_v, D]``."""
        x = cast((images - 0.5) * 4.0, self.position.dtype)
        tapped = x
        for index, layer in enumerate(self.trunk):
            x = layer(x)
            if index == self._keypoint_tap:
                tapped = x
        tokens = self.project(x).flatten(2).transpose(1, 2)
        if self.keypoints is not None:
            tokens = torch.cat([tokens, self.keypoints(tapped)], dim=1)
        tokens = tokens.reshape(-1, self.num_cameras, self.tokens_per_camera, self.d_model)
        tokens = tokens + self.position
        return cast(tokens.reshape(-1, self.tokens_per_camera, self.d_model), images.dtype)
