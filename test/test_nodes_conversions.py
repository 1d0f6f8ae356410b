"""Message <-> core conversions, without spinning a node."""

import math

import numpy as np
import pytest
from diagnostic_msgs.msg import DiagnosticStatus
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from vla_edge.core.errors import (
    CommandJointMismatchError,
    EmptyChunkError,
    InvalidObservationError,
    JointMismatchError,
)
from vla_edge.core.types import ActionChunk
from vla_edge.nodes.conversions import (
    MAX_INSTRUCTION_CHARS,
    DuplicateJointError,
    EmptyInstructionError,
    FutureStampError,
    ImageEncodingError,
    ImageLayoutError,
    ImageSizeError,
    InstructionTooLongError,
    MissingJointError,
    NonFiniteJointStateError,
    NonTextInstructionError,
    ZeroStampError,
    array_to_image,
    checked_stamp_s,
    chunk_to_trajectory,
    diagnostic_array,
    diagnostic_level_name,
    diagnostic_values,
    duration_to_s,
    image_to_array,
    instruction_from_text,
    joint_state_to_positions,
    multiarray_to_positions,
    positions_to_joint_state,
    positions_to_multiarray,
    s_to_duration,
    s_to_stamp,
    stamp_to_s,
    status_to_diagnostic,
    trajectory_to_chunk,
)

JOINTS = ("joint1", "joint2", "joint3", "joint4", "joint5", "joint6", "gripper")


def _image(h=4, w=5):
    rng = np.random.default_rng(0)
    return rng.integers(0, 255, size=(h, w, 3), dtype=np.uint8)


def test_stamp_round_trip_keeps_nanoseconds():
    t_s = 1_795_983_622.123456789
    stamp = s_to_stamp(t_s)
    assert 0 <= stamp.nanosec < 1_000_000_000
    assert abs(stamp_to_s(stamp) - t_s) < 1e-6
    assert duration_to_s(s_to_duration(0.3)) == pytest.approx(0.3)


def test_rgb8_image_round_trips_exactly():
    image = _image()
    msg = array_to_image(image, 12.5, frame_id="agentview")
    assert msg.encoding == "rgb8" and msg.step == 15 and msg.header.frame_id == "agentview"
    assert stamp_to_s(msg.header.stamp) == pytest.approx(12.5)
    np.testing.assert_array_equal(image_to_array(msg, 4, 5), image)


def test_padded_rows_are_cropped_using_step():
    image = _image()
    msg = array_to_image(image, 0.0)
    padded = np.zeros((4, 20), dtype=np.uint8)
    padded[:, :15] = image.reshape(4, 15)
    msg.step = 20
    msg.data = padded.tobytes()
    np.testing.assert_array_equal(image_to_array(msg, 4, 5), image)


def test_wrong_encoding_is_a_named_error():
    msg = array_to_image(_image(), 0.0)
    msg.encoding = "bgr8"
    with pytest.raises(ImageEncodingError, match="bgr8"):
        image_to_array(msg, 4, 5)
    assert ImageEncodingError.reason == "image_encoding"
    assert issubclass(ImageEncodingError, InvalidObservationError)


def test_wrong_size_is_a_named_error_naming_both_sizes():
    msg = array_to_image(_image(8, 8), 0.0)
    with pytest.raises(ImageSizeError, match=r"8x8.*expected 4x5"):
        image_to_array(msg, 4, 5)


def test_short_step_or_data_is_a_layout_error():
    msg = array_to_image(_image(), 0.0)
    msg.step = 10
    with pytest.raises(ImageLayoutError, match="step = 10"):
        image_to_array(msg, 4, 5)
    msg = array_to_image(_image(), 0.0)
    msg.data = bytes(10)
    with pytest.raises(ImageLayoutError, match="10 bytes"):
        image_to_array(msg, 4, 5)


def test_joint_state_is_read_by_name_in_the_requested_order():
    msg = JointState()
    msg.name = ["gripper", "extra", *reversed(JOINTS[:-1])]
    msg.position = [0.04, 9.0, 6.0, 5.0, 4.0, 3.0, 2.0, 1.0]
    out = joint_state_to_positions(msg, JOINTS)
    np.testing.assert_allclose(out, [1, 2, 3, 4, 5, 6, 0.04])


def test_missing_joint_is_a_named_error_listing_it():
    msg = positions_to_joint_state(JOINTS[:-1], np.zeros(6), 0.0)
    with pytest.raises(MissingJointError, match="gripper"):
        joint_state_to_positions(msg, JOINTS)
    msg = positions_to_joint_state(JOINTS, np.zeros(7), 0.0)
    msg.position = [0.0] * 6
    with pytest.raises(MissingJointError, match="6 entries for 7 names"):
        joint_state_to_positions(msg, JOINTS)


def test_non_finite_joint_state_is_a_named_error():
    values = np.zeros(7)
    values[2] = math.nan
    msg = positions_to_joint_state(JOINTS, values, 0.0)
    with pytest.raises(NonFiniteJointStateError, match="joint3"):
        joint_state_to_positions(msg, JOINTS)


def test_empty_instruction_is_a_named_error():
    assert instruction_from_text("  pick it up ") == "pick it up"
    with pytest.raises(EmptyInstructionError, match="non-whitespace"):
        instruction_from_text("   ")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("pick\x00up the block", "control characters"),
        ("\x1b[2Jlift", "control characters"),
        ("\u200b\u200b", "no visible character"),
        ("\u0301", "no visible character"),
    ],
)
def test_non_text_instruction_is_a_named_error(text: str, words: str) -> None:
    with pytest.raises(NonTextInstructionError, match=words):
        instruction_from_text(text)
    assert instruction_from_text("put it\tin the bowl") == "put it\tin the bowl"


def test_overlong_instruction_is_a_named_error():
    assert instruction_from_text("x" * MAX_INSTRUCTION_CHARS) == "x" * MAX_INSTRUCTION_CHARS
    with pytest.raises(InstructionTooLongError, match=f"at most {MAX_INSTRUCTION_CHARS}"):
        instruction_from_text("pick " * 10_000)


def test_joint_named_twice_is_a_named_error():
    msg = positions_to_joint_state(JOINTS, np.zeros(7), 0.0)
    msg.name = [*JOINTS, "joint2"]
    msg.position = [0.0] * 7 + [1.0]
    with pytest.raises(DuplicateJointError, match="joint2"):
        joint_state_to_positions(msg, JOINTS)
    msg.name = [*JOINTS, "extra", "extra"]  # a joint nobody reads may repeat
    msg.position = [0.0] * 9
    np.testing.assert_array_equal(joint_state_to_positions(msg, JOINTS), np.zeros(7))


def test_chunk_travels_stamped_with_observation_time_one_point_per_step():
    positions = np.arange(30, dtype=np.float64).reshape(10, 3) / 10.0
    chunk = ActionChunk(100.25, 0.1, ("a", "b", "c"), positions)
    msg = chunk_to_trajectory(chunk)
    assert stamp_to_s(msg.header.stamp) == pytest.approx(100.25)
    assert len(msg.points) == 10
    assert [duration_to_s(p.time_from_start) for p in msg.points] == pytest.approx(
        [0.1 * i for i in range(10)]
    )
    back = trajectory_to_chunk(msg, 0.1)
    assert back.t_obs_s == pytest.approx(100.25)
    assert back.joint_names == ("a", "b", "c")
    np.testing.assert_allclose(back.positions, positions)
    np.testing.assert_allclose(back.step_times_s(), chunk.step_times_s())


def test_trajectory_without_points_or_with_ragged_points_is_rejected():
    msg = JointTrajectory()
    msg.joint_names = ["a", "b"]
    with pytest.raises(EmptyChunkError):
        trajectory_to_chunk(msg, 0.1)
    msg.points = [JointTrajectoryPoint(positions=[0.0, 1.0]), JointTrajectoryPoint(positions=[0.0])]
    with pytest.raises(JointMismatchError, match=r"points\[1\]"):
        trajectory_to_chunk(msg, 0.1)


def test_command_array_has_one_value_per_joint():
    msg = positions_to_multiarray(np.arange(7.0))
    assert msg.layout.dim[0].size == 7
    np.testing.assert_allclose(multiarray_to_positions(msg, 7), np.arange(7.0))
    with pytest.raises(CommandJointMismatchError, match="6 values, expected 7"):
        multiarray_to_positions(Float64MultiArray(data=[0.0] * 6), 7)


def test_status_dict_becomes_diagnostic_with_flattened_values():
    status = status_to_diagnostic(
        "vla_edge/x",
        {"level": "WARN", "message": "holding", "a": 1, "b": 0.5, "values": {"c": "d"}},
    )
    assert diagnostic_level_name(status) == "WARN"
    assert status.message == "holding"
    assert diagnostic_values(status) == {"a": "1", "b": "0.5", "c": "d"}
    int_level = status_to_diagnostic("x", {"level": 2})
    assert int_level.level == DiagnosticStatus.ERROR
    array = diagnostic_array([status], 3.0)
    assert stamp_to_s(array.header.stamp) == pytest.approx(3.0) and len(array.status) == 1


def test_stamp_in_the_past_or_within_the_tolerance_is_accepted():
    now_s = 1000.0
    assert checked_stamp_s(s_to_stamp(999.5), now_s, 0.05) == pytest.approx(999.5)
    assert checked_stamp_s(s_to_stamp(1000.04), now_s, 0.05) == pytest.approx(1000.04)


def test_unset_stamp_is_a_named_error():
    with pytest.raises(ZeroStampError, match="header.stamp = 0.0"):
        checked_stamp_s(s_to_stamp(0.0), 1000.0, 0.05)
    assert ZeroStampError.reason == "zero_stamp"


def test_stamp_beyond_the_future_tolerance_is_a_named_error_naming_the_bound():
    with pytest.raises(FutureStampError, match="3600.000 s ahead.*at most 1.0 s"):
        checked_stamp_s(s_to_stamp(4600.0), 1000.0, 1.0)
    assert FutureStampError.reason == "future_stamp"
