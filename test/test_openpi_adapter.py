"""Mapping between Observation/ActionChunk and openpi's LIBERO-style keys."""

from __future__ import annotations

import numpy as np
import pytest
from openpi_fixtures import SPEC, make_observation

from vla_edge.actions.state import EEF_POSE_NAMES
from vla_edge.core.errors import InvalidObservationError, RemoteServerError
from vla_edge.core.types import ActionChunk
from vla_edge.runners.base import NativeSpec
from vla_edge.runners.image_resize import resize_with_pad
from vla_edge.runners.openpi_adapter import (
    InferRequest,
    camera_key,
    chunk_to_response,
    observation_to_request,
    request_to_observation,
    response_to_actions,
)
from vla_edge.runners.openpi_protocol import pack, unpack


def _request(**changes: object) -> dict:
    request = observation_to_request(make_observation(seed=3, stamp_s=12.5))
    request.update(changes)
    return request


def test_request_uses_libero_style_keys() -> None:
    obs = make_observation(seed=1, stamp_s=7.25)
    request = observation_to_request(obs, request_id=9)
    assert set(request) == {
        "observation/image",
        "observation/wrist_image",
        "observation/state",
        "prompt",
        "observation/timestamp",
        "vla_edge/request_id",
    }
    np.testing.assert_array_equal(request["observation/image"], obs.images["agentview"])
    np.testing.assert_array_equal(request["observation/wrist_image"], obs.images["wrist"])
    assert request["prompt"] == obs.instruction
    assert request["observation/timestamp"] == 7.25


def test_other_cameras_map_to_observation_name_image() -> None:
    assert camera_key("left") == "observation/left_image"
    assert camera_key("agentview", {"agentview": "observation/exterior_image_1_left"}) == (
        "observation/exterior_image_1_left"
    )


def test_observation_survives_the_wire_unchanged() -> None:
    obs = make_observation(seed=2, stamp_s=3.5)
    rng = np.random.default_rng(0)
    noise = rng.standard_normal((10, 7)).astype(np.float32)
    prefix = rng.standard_normal((10, 7)).astype(np.float32)
    wire = pack(observation_to_request(obs, noise, prefix, 3, request_id=4))
    parsed = request_to_observation(unpack(wire), SPEC, now_s=99.0)
    assert parsed.observation.stamp_s == 3.5
    assert parsed.observation.instruction == obs.instruction
    for cam in SPEC.cameras:
        np.testing.assert_array_equal(parsed.observation.images[cam], obs.images[cam])
        assert parsed.observation.images[cam].flags.writeable
    np.testing.assert_array_equal(parsed.observation.state, obs.state)
    np.testing.assert_array_equal(parsed.noise, noise)
    np.testing.assert_array_equal(parsed.prefix_actions, prefix)
    assert (parsed.prefix_len, parsed.request_id, parsed.client_stamp_s) == (3, 4, 3.5)


def test_request_without_timestamp_is_stamped_with_server_time() -> None:
    request = _request()
    del request["observation/timestamp"]
    parsed = request_to_observation(request, SPEC, now_s=42.0)
    assert parsed.observation.stamp_s == 42.0
    assert parsed.client_stamp_s is None


def test_images_of_another_size_are_resized_with_pad_like_openpi() -> None:
    rng = np.random.default_rng(5)
    wide = rng.integers(0, 256, (48, 96, 3), dtype=np.uint8)  # 2:1 -> 16 rows of 32
    parsed = request_to_observation(_request(**{"observation/image": wide}), SPEC, now_s=0.0)
    image = parsed.observation.images["agentview"]
    assert image.shape == (32, 32, 3) and image.dtype == np.uint8
    np.testing.assert_array_equal(image, resize_with_pad(wide, 32, 32))
    assert not image[:8].any() and not image[24:].any()  # black bars top and bottom
    assert image[8:24].any()


def test_a_runner_that_fits_images_itself_gets_them_at_their_own_size() -> None:
    """SmolVLA's manifest pads on the top and left: the server must not fit them first."""
    import dataclasses

    rng = np.random.default_rng(6)
    wide = rng.integers(0, 256, (48, 96, 3), dtype=np.uint8)
    spec = dataclasses.replace(SPEC, fits_images=True)
    parsed = request_to_observation(_request(**{"observation/image": wide}), spec, now_s=0.0)
    np.testing.assert_array_equal(parsed.observation.images["agentview"], wide)


def test_float_images_in_unit_range_become_uint8_like_openpi() -> None:
    pixels = np.linspace(0.0, 1.0, 32 * 32 * 3, dtype=np.float32).reshape(32, 32, 3)
    parsed = request_to_observation(_request(**{"observation/image": pixels}), SPEC, now_s=0.0)
    np.testing.assert_array_equal(
        parsed.observation.images["agentview"], (pixels * 255).astype(np.uint8)
    )


def test_channels_first_images_of_another_size_are_transposed_then_resized() -> None:
    hwc = np.random.default_rng(6).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    request = _request(**{"observation/image": np.ascontiguousarray(hwc.transpose(2, 0, 1))})
    parsed = request_to_observation(request, SPEC, now_s=0.0)
    np.testing.assert_array_equal(
        parsed.observation.images["agentview"], resize_with_pad(hwc, 32, 32)
    )


def test_channels_first_images_are_transposed() -> None:
    request = _request()
    hwc = request["observation/image"]
    request["observation/image"] = np.ascontiguousarray(hwc.transpose(2, 0, 1))
    parsed = request_to_observation(request, SPEC, now_s=0.0)
    np.testing.assert_array_equal(parsed.observation.images["agentview"], hwc)


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"observation/wrist_image": None}, "observation/wrist_image is NoneType"),
        ({"observation/image": np.full((32, 32, 3), np.nan)}, "observation/image holds NaN or inf"),
        ({"observation/image": np.full((8, 8, 3), 2.0)}, r"float pixels span \[2, 2\]"),
        ({"observation/image": np.zeros((8, 8, 3), np.int64)}, "dtype = int64: must be uint8"),
        ({"observation/image": np.zeros((8, 8, 3), bool)}, "dtype = bool: must be uint8"),
        ({"observation/image": np.zeros((8, 8, 4), np.uint8)}, r"shape = \[8, 8, 4\]"),
        ({"observation/image": np.zeros((8, 8, 1), np.uint8)}, r"shape = \[8, 8, 1\]"),
        ({"observation/image": np.zeros((8, 8), np.uint8)}, r"shape = \[8, 8\]: must be"),
        ({"observation/image": np.zeros((0, 8, 3), np.uint8)}, r"\[0, 8, 3\]: height and width"),
        ({"observation/image": np.zeros((4097, 1, 3), np.uint8)}, r"must be in \[1, 4096\] px"),
        ({"observation/state": np.zeros(8)}, r"\[8\]: must be \[7\].*end-effector state"),
        ({"observation/state": np.zeros(6)}, r"observation/state shape = \[6\]: must be \[7\]"),
        ({"observation/state": np.array([np.nan] * 7)}, "observation/state .*must be finite"),
        ({"observation/state": "zeros"}, "observation/state is str"),
        ({"prompt": 5}, "prompt = int: must be a string"),
        ({"prompt": "x" * 5000}, "prompt = 5000 chars"),
        ({"observation/timestamp": float("nan")}, "observation/timestamp = nan: must be finite"),
        ({"observation/timestamp": "now"}, "observation/timestamp = 'now': must be a number"),
        ({"vla_edge/noise": np.zeros((3, 7), np.float32)}, r"vla_edge/noise = \[3, 7\]"),
        ({"vla_edge/noise": np.full((10, 7), np.inf, np.float32)}, "NaN or inf"),
        ({"vla_edge/prefix_len": 2}, "vla_edge/prefix_len = 2: needs vla_edge/prefix_actions"),
        ({"vla_edge/prefix_len": 11}, r"must be an integer in \[0, 10\]"),
        ({"vla_edge/request_id": -1}, "vla_edge/request_id = -1"),
    ],
)
def test_bad_request_fields_raise_invalid_observation(changes: dict, words: str) -> None:
    with pytest.raises(InvalidObservationError, match=words):
        request_to_observation(_request(**changes), SPEC, now_s=0.0)


LIBERO = NativeSpec("eef_pose", EEF_POSE_NAMES, 7)
"""openpi LIBERO's policy in its own units: the 8-D end-effector state, 7 actions."""


def test_a_policy_served_in_its_own_units_takes_its_own_state_and_no_prefix() -> None:
    state = np.linspace(-0.3, 0.3, 8)
    parsed = request_to_observation(
        _request(**{"observation/state": state}), SPEC, now_s=0.0, native=LIBERO
    )
    np.testing.assert_array_equal(parsed.observation.state, state)
    words = r"shape = \[7\]: must be \[8\], the policy's eef_pose state \(eef_x_m, .*_right_m\)"
    with pytest.raises(InvalidObservationError, match=words):
        request_to_observation(_request(), SPEC, now_s=0.0, native=LIBERO)
    prefix = {"observation/state": state, "vla_edge/prefix_actions": np.zeros((10, 7))}
    with pytest.raises(InvalidObservationError, match="take no executed prefix"):
        request_to_observation(_request(**prefix), SPEC, now_s=0.0, native=LIBERO)


def test_missing_camera_and_state_are_named() -> None:
    request = _request()
    del request["observation/wrist_image"]
    with pytest.raises(InvalidObservationError, match="observation/wrist_image is missing"):
        request_to_observation(request, SPEC, now_s=0.0)
    request = _request()
    del request["observation/state"]
    with pytest.raises(InvalidObservationError, match="observation/state is missing"):
        request_to_observation(request, SPEC, now_s=0.0)


@pytest.mark.parametrize("payload", [[1, 2, 3], "obs", 5, None])
def test_non_map_request_is_refused(payload: object) -> None:
    with pytest.raises(InvalidObservationError, match="must be a map of openpi keys"):
        request_to_observation(payload, SPEC, now_s=0.0)


def test_non_string_key_is_refused() -> None:
    request = _request()
    request[b"observation/state"] = np.zeros(7)
    with pytest.raises(InvalidObservationError, match="keys must be strings"):
        request_to_observation(request, SPEC, now_s=0.0)


def test_response_carries_actions_and_echoes() -> None:
    positions = np.arange(70, dtype=np.float64).reshape(10, 7)
    chunk = ActionChunk(1.0, 0.1, SPEC.joint_names, positions)
    request = InferRequest(make_observation(), request_id=5, client_stamp_s=1.0)
    response = chunk_to_response(chunk, request)
    assert response["request_id"] == 5 and response["t_obs_s"] == 1.0
    np.testing.assert_array_equal(response_to_actions(unpack(pack(response)), SPEC), positions)


@pytest.mark.parametrize(
    ("reply", "words"),
    [
        ("error", "reply is str: must be a map"),
        ({"action": np.zeros((10, 7))}, "reply has no 'actions'"),
        ({"actions": [[0.0] * 7] * 10}, "actions is list"),
        ({"actions": np.zeros((50, 8))}, r"actions shape = \[50, 8\]: must be \[10, 7\]"),
    ],
)
def test_malformed_reply_raises_remote_server_error(reply: object, words: str) -> None:
    with pytest.raises(RemoteServerError, match=words):
        response_to_actions(reply, SPEC)
