"""The vision encoder's spatial-softmax keypoints: shapes, and that they locate a bright spot."""

import pytest
import torch
from policy_synthetic import tiny_config

from vla_edge.archs.bundled.config import PolicyConfig
from vla_edge.archs.bundled.vision import SpatialSoftmaxKeypoints, VisionEncoder, pixel_coordinates
from vla_edge.core.errors import ConfigError

torch.set_num_threads(1)


def test_pixel_coordinates_are_row_major_cell_centres_in_unit_box() -> None:
    coords = pixel_coordinates(2, 4)
    assert coords.shape == (8, 2)
    assert torch.allclose(coords[0], torch.tensor([-0.75, -0.5]))
    assert torch.allclose(coords[3], torch.tensor([0.75, -0.5]))
    assert torch.allclose(coords[7], torch.tensor([0.75, 0.5]))


def test_keypoint_follows_the_peak_of_its_channel() -> None:
    torch.manual_seed(0)
    kp = SpatialSoftmaxKeypoints(channels=3, keypoints=1, d_model=8, height=8, width=8)
    with torch.no_grad():
        kp.logits.weight.zero_()
        kp.logits.bias.zero_()
        kp.logits.weight[0, 1] = 50.0  # keypoint 0 looks at channel 1 only
    captured: list[torch.Tensor] = []

    def grab_xy(_module: torch.nn.Module, inputs: tuple[torch.Tensor, ...], _out: object) -> None:
        captured.append(inputs[0])

    kp.xy_proj.register_forward_hook(grab_xy)
    features = torch.zeros(2, 3, 8, 8)
    features[0, 1, 1, 6] = 1.0  # row 1, column 6
    features[1, 1, 5, 2] = 1.0  # row 5, column 2
    features[:, 0] = torch.rand(2, 8, 8)  # other channels do not matter
    kp(features)
    xy = captured[0]
    cell = 2.0 / 8
    expected = torch.tensor(
        [[[-1 + 6.5 * cell, -1 + 1.5 * cell]], [[-1 + 2.5 * cell, -1 + 5.5 * cell]]]
    )
    assert torch.allclose(xy, expected, atol=1e-3)


def test_encoder_appends_one_token_per_keypoint_per_camera() -> None:
    cfg = tiny_config(vision_keypoints=3)
    grid = (cfg.image_height // cfg.vision_downsample) * (cfg.image_width // cfg.vision_downsample)
    assert cfg.tokens_per_camera == grid + 3
    assert cfg.context_tokens == 2 * (grid + 3) + 2
    encoder = VisionEncoder(cfg)
    tokens = encoder(torch.rand(2 * len(cfg.cameras), 3, cfg.image_height, cfg.image_width))
    assert tokens.shape == (2 * len(cfg.cameras), grid + 3, cfg.d_model)


def test_keypoints_move_the_tokens_when_an_object_moves() -> None:
    torch.manual_seed(1)
    encoder = VisionEncoder(tiny_config(vision_keypoints=4)).eval()
    images = torch.full((2, 3, 32, 32), 0.3)
    moved = images.clone()
    images[:, 0, 4:7, 4:7] = 1.0
    moved[:, 0, 20:23, 24:27] = 1.0
    with torch.no_grad():
        a, b = encoder(images), encoder(moved)
    grid = 16
    assert not torch.allclose(a[:, grid:], b[:, grid:], atol=1e-4)


def test_negative_keypoint_count_is_a_config_error() -> None:
    with pytest.raises((ConfigError, ValueError), match="vision_keypoints"):
        PolicyConfig(vision_keypoints=-1)
