"""Pure conversions between ROS 2 standard messages and the core types.

No node, no spinning: every function takes a message (or core value) and
returns the other side, raising a named error for bad input. Times on the wire
are ``builtin_interfaces/Time`` stamps; in the cores they are float seconds of
the same (system) clock.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from builtin_interfaces.msg import Duration, Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float64MultiArray, MultiArrayDimension
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from vla_edge.core.errors import (
    CommandJointMismatchError,
    EmptyChunkError,
    InvalidObservationError,
    JointMismatchError,
    NonFiniteChunkError,
)
from vla_edge.core.types import ActionChunk

RGB8 = "rgb8"


class ImageEncodingError(InvalidObservationError):
    """An image's ``encoding`` is not ``rgb8``."""

    reason = "image_encoding"


class ImageSizeError(InvalidObservationError):
    """An image's ``height`` / ``width`` differ from the configured resolution."""

    reason = "image_size"


class ImageLayoutError(InvalidObservationError):
    """An image's ``step`` or data length do not match ``height x width x 3``."""

    reason = "image_layout"


class MissingJointError(InvalidObservationError):
    """A ``JointState`` lacks a joint the consumer needs (or its position)."""

    reason = "missing_joints"


class NonFiniteJointStateError(InvalidObservationError):
    """A ``JointState`` carries a NaN or inf position for a needed joint."""

    reason = "non_finite_joint_state"


class ZeroStampError(InvalidObservationError):
    """A message's ``header.stamp`` is 0 (or negative): the driver did not stamp it."""

    reason = "zero_stamp"


class FutureStampError(InvalidObservationError):
    """A message's ``header.stamp`` lies further ahead of the receiver's clock than allowed."""

    reason = "future_stamp"


class EmptyInstructionError(InvalidObservationError):
    """The instruction string is empty or only whitespace."""

    reason = "empty_instruction"


class NonTextInstructionError(InvalidObservationError):
    """An instruction with control characters, or no visible character at all."""

    reason = "non_text_instruction"


class InstructionTooLongError(InvalidObservationError):
    """The instruction is longer than :data:`MAX_INSTRUCTION_CHARS`."""

    reason = "instruction_too_long"


class DuplicateJointError(InvalidObservationError):
    """A joint the receiver needs is named more than once in a ``JointState``."""

    reason = "duplicate_joints"


# An instruction is a sentence; the encoder reads its first 32 tokens. Far longer
# text is a wrong topic or a mistake, refused before it is logged or encoded.
MAX_INSTRUCTION_CHARS = 1000


# --------------------------------------------------------------------------- time

S_PER_NS = 1e-9
"""Seconds per nanosecond (ROS times and durations count ``sec`` + ``nanosec``)."""


def stamp_to_s(stamp: Time) -> float:
    """``builtin_interfaces/Time`` -> float seconds."""
    return float(stamp.sec) + S_PER_NS * float(stamp.nanosec)


def checked_stamp_s(stamp: Time, now_s: float, max_future_s: float) -> float:
    """``stamp`` in float seconds, refused when unset or from the future.

    Args:
        stamp: a measurement's ``header.stamp``.
        now_s: the receiver's clock.
        max_future_s: how far ahead of ``now_s`` a stamp may lie (clock skew).

    Raises:
        ZeroStampError: the stamp is 0 or negative (an unstamped message).
        FutureStampError: the stamp is more than ``max_future_s`` ahead of ``now_s``.
    """
    stamp_s = stamp_to_s(stamp)
    if not stamp_s > 0.0:
        raise ZeroStampError(f"header.stamp = {stamp_s} s: must be > 0 (unstamped message?)")
    if stamp_s > now_s + max_future_s:
        raise FutureStampError(
            f"header.stamp = {stamp_s:.6f} s lies {stamp_s - now_s:.3f} s ahead of the clock "
            f"({now_s:.6f} s): at most {max_future_s} s allowed"
        )
    return stamp_s


def s_to_stamp(t_s: float) -> Time:
    """Float seconds (>= 0) -> ``builtin_interfaces/Time``."""
    ns = int(round(float(t_s) * 1e9))
    return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def duration_to_s(duration: Duration) -> float:
    """``builtin_interfaces/Duration`` -> float seconds."""
    return float(duration.sec) + S_PER_NS * float(duration.nanosec)


def s_to_duration(t_s: float) -> Duration:
    """Float seconds -> ``builtin_interfaces/Duration`` (``nanosec`` kept in [0, 1e9))."""
    ns = int(round(float(t_s) * 1e9))
    return Duration(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


# -------------------------------------------------------------------------- image


def image_to_array(msg: Image, expected_height: int, expected_width: int) -> np.ndarray:
    """``sensor_msgs/Image`` (rgb8) -> ``uint8 [H, W, 3]`` (a copy).

    Raises:
        ImageEncodingError: encoding other than ``rgb8``.
        ImageSizeError: height/width differ from the expected resolution.
        ImageLayoutError: ``step`` < ``width * 3`` or too little data.
    """
    if msg.encoding != RGB8:
        raise ImageEncodingError(f"encoding = {msg.encoding!r}, expected {RGB8!r}")
    height, width = int(msg.height), int(msg.width)
    if (height, width) != (expected_height, expected_width):
        raise ImageSizeError(
            f"height x width = {height}x{width}, expected {expected_height}x{expected_width}"
        )
    row_bytes = width * 3
    step = int(msg.step)
    if step < row_bytes:
        raise ImageLayoutError(f"step = {step}, expected >= width * 3 = {row_bytes}")
    data = np.frombuffer(msg.data, dtype=np.uint8)
    if data.size < step * height:
        raise ImageLayoutError(
            f"data has {data.size} bytes, expected step * height = {step * height}"
        )
    rows = data[: step * height].reshape(height, step)[:, :row_bytes]
    return rows.reshape(height, width, 3).copy()


def array_to_image(image: np.ndarray, stamp_s: float, frame_id: str = "") -> Image:
    """``uint8 [H, W, 3]`` RGB -> ``sensor_msgs/Image`` (rgb8, tightly packed)."""
    image = np.ascontiguousarray(image, dtype=np.uint8)
    if image.ndim != 3 or image.shape[2] != 3:
        raise InvalidObservationError(f"image has shape {image.shape}, expected [H, W, 3]")
    msg = Image()
    msg.header.stamp = s_to_stamp(stamp_s)
    msg.header.frame_id = frame_id
    msg.height, msg.width = int(image.shape[0]), int(image.shape[1])
    msg.encoding = RGB8
    msg.is_bigendian = 0
    msg.step = int(image.shape[1]) * 3
    msg.data = image.tobytes()
    return msg


# -------------------------------------------------------------------- joint state


def joint_state_to_positions(msg: JointState, joint_names: Sequence[str]) -> np.ndarray:
    """Positions of ``joint_names`` (in that order) from a ``JointState``, matched by name.

    Extra joints in the message are ignored (a robot publishes more than we use).

    Raises:
        MissingJointError: a needed joint is absent or has no position entry.
        NonFiniteJointStateError: a needed position is NaN or inf.
    """
    names = list(msg.name)
    positions = msg.position
    if len(positions) != len(names):
        raise MissingJointError(
            f"position has {len(positions)} entries for {len(names)} names: "
            "every named joint needs a position"
        )
    index = {name: i for i, name in enumerate(names)}
    missing = [name for name in joint_names if name not in index]
    if missing:
        raise MissingJointError(f"joints {missing} missing from JointState (has {names})")
    twice = [name for name in joint_names if names.count(name) > 1]
    if twice:
        raise DuplicateJointError(f"joints {twice} named more than once in JointState ({names})")
    out = np.array([positions[index[name]] for name in joint_names], dtype=np.float64)
    if not np.all(np.isfinite(out)):
        bad = joint_names[int(np.argmax(~np.isfinite(out)))]
        raise NonFiniteJointStateError(f"position of {bad} = {out[list(joint_names).index(bad)]}")
    return out


def positions_to_joint_state(
    joint_names: Sequence[str],
    positions: np.ndarray,
    stamp_s: float,
    velocities: np.ndarray | None = None,
) -> JointState:
    """Joint positions (and optional velocities) -> ``sensor_msgs/JointState``."""
    msg = JointState()
    msg.header.stamp = s_to_stamp(stamp_s)
    msg.name = list(joint_names)
    msg.position = [float(v) for v in positions]
    if velocities is not None:
        msg.velocity = [float(v) for v in velocities]
    return msg


# -------------------------------------------------------------------- instruction


def instruction_from_text(text: str) -> str:
    """The instruction, stripped.

    Raises:
        EmptyInstructionError: nothing but whitespace.
        InstructionTooLongError: more than :data:`MAX_INSTRUCTION_CHARS` characters.
        NonTextInstructionError: a control character (other than whitespace), or only
            invisible (zero-width, combining) characters.
    """
    stripped = text.strip()
    if not stripped:
        raise EmptyInstructionError(f"instruction = {text!r}: must contain non-whitespace text")
    control = sorted(
        {ch for ch in stripped if unicodedata.category(ch) == "Cc" and not ch.isspace()}
    )
    if control:
        raise NonTextInstructionError(
            f"instruction = {stripped[:40]!r}: holds control characters {control}; expected text"
        )
    if all(unicodedata.category(ch)[0] in "CZM" for ch in stripped):
        raise NonTextInstructionError(
            f"instruction = {stripped!r}: no visible character (only zero-width, space or "
            "combining characters)"
        )
    if len(stripped) > MAX_INSTRUCTION_CHARS:
        raise InstructionTooLongError(
            f"instruction of {len(stripped)} characters ({stripped[:40]!r}…): "
            f"at most {MAX_INSTRUCTION_CHARS}"
        )
    return stripped


# ----------------------------------------------------------------- action chunks


def chunk_to_trajectory(chunk: ActionChunk) -> JointTrajectory:
    """``ActionChunk`` -> ``JointTrajectory``: ``header.stamp = t_obs``, one point per step."""
    msg = JointTrajectory()
    msg.header.stamp = s_to_stamp(chunk.t_obs_s)
    msg.joint_names = list(chunk.joint_names)
    positions = np.asarray(chunk.positions, dtype=np.float64)
    for offset_s, row in zip(chunk.offsets_s(), positions, strict=True):
        point = JointTrajectoryPoint()
        point.positions = row.tolist()
        point.time_from_start = s_to_duration(float(offset_s))
        msg.points.append(point)
    return msg


def trajectory_to_chunk(msg: JointTrajectory, dt_action_s: float) -> ActionChunk:
    """``JointTrajectory`` -> ``ActionChunk`` with explicit ``time_from_start_s``.

    ``dt_action_s`` is the nominal step of the receiver; the step times come from
    the points. The controller core does the semantic checks (age, order, names).

    Raises:
        EmptyChunkError: no points.
        JointMismatchError: a point's position count differs from ``joint_names``.
        NonFiniteChunkError: the header stamp is not finite.
    """
    if len(msg.points) == 0:
        raise EmptyChunkError("JointTrajectory has 0 points: a chunk needs >= 1 step")
    n_joints = len(msg.joint_names)
    rows = []
    offsets_s = []
    for i, point in enumerate(msg.points):
        if len(point.positions) != n_joints:
            raise JointMismatchError(
                f"points[{i}].positions has {len(point.positions)} values, expected "
                f"{n_joints} (one per joint name)"
            )
        rows.append(np.asarray(point.positions, dtype=np.float64))
        offsets_s.append(duration_to_s(point.time_from_start))
    t_obs_s = stamp_to_s(msg.header.stamp)
    if not math.isfinite(t_obs_s):
        raise NonFiniteChunkError(f"header.stamp = {t_obs_s}: must be finite")
    return ActionChunk(
        t_obs_s=t_obs_s,
        dt_action_s=float(dt_action_s),
        joint_names=tuple(msg.joint_names),
        positions=np.stack(rows) if n_joints else np.zeros((len(rows), 0)),
        time_from_start_s=np.asarray(offsets_s, dtype=np.float64),
    )


# ------------------------------------------------------------------- commands


def positions_to_multiarray(positions: np.ndarray, label: str = "joints") -> Float64MultiArray:
    """Joint positions ``[A]`` -> ``Float64MultiArray`` (the forward-command convention)."""
    values = np.asarray(positions, dtype=np.float64).ravel()
    msg = Float64MultiArray()
    msg.layout.dim = [MultiArrayDimension(label=label, size=values.size, stride=values.size)]
    msg.data = values.tolist()
    return msg


def multiarray_to_positions(msg: Float64MultiArray, joint_count: int) -> np.ndarray:
    """``Float64MultiArray`` -> positions ``[A]``; finiteness is the safety core's check.

    Raises:
        CommandJointMismatchError: ``data`` does not hold exactly ``joint_count`` values.
    """
    data = np.asarray(msg.data, dtype=np.float64)
    if data.shape != (joint_count,):
        raise CommandJointMismatchError(
            f"data has {data.size} values, expected {joint_count} (one per joint)"
        )
    return data


# ---------------------------------------------------------------- diagnostics

_LEVELS = {
    "OK": DiagnosticStatus.OK,
    "WARN": DiagnosticStatus.WARN,
    "ERROR": DiagnosticStatus.ERROR,
    "STALE": DiagnosticStatus.STALE,
}
_LEVEL_NAMES = {value: key for key, value in _LEVELS.items()}


def _flatten(values: Mapping[str, Any], prefix: str = "") -> list[KeyValue]:
    out: list[KeyValue] = []
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.extend(_flatten(value, prefix=f"{name}."))
        elif isinstance(value, float):
            out.append(KeyValue(key=name, value=repr(value)))
        else:
            out.append(KeyValue(key=name, value=str(getattr(value, "value", value))))
    return out


def status_to_diagnostic(
    name: str, status: Mapping[str, Any], hardware_id: str = "vla_edge"
) -> DiagnosticStatus:
    """A status dict -> ``DiagnosticStatus``.

    ``status["level"]`` (``OK``/``WARN``/``ERROR``/``STALE``, default ``OK``) and
    ``status["message"]`` become the level and message (integer levels 0..3
    are accepted too); every other key becomes a
    ``KeyValue`` (nested mappings flattened to ``outer.inner``; a key named
    ``values`` is flattened without prefix).
    """
    level = status.get("level", "OK")
    if isinstance(level, int):  # IntEnum levels (0 OK .. 3 STALE)
        level_name = ("OK", "WARN", "ERROR", "STALE")[level] if 0 <= level <= 3 else "ERROR"
    else:
        level_name = str(level).upper()
    if level_name not in _LEVELS:
        level_name = "ERROR"
    msg = DiagnosticStatus()
    msg.name = name
    msg.hardware_id = hardware_id
    msg.level = _LEVELS[level_name]
    msg.message = str(status.get("message", ""))
    rest = {k: v for k, v in status.items() if k not in ("level", "message", "values")}
    values = status.get("values")
    msg.values = _flatten(rest) + (_flatten(values) if isinstance(values, Mapping) else [])
    return msg


def diagnostic_array(statuses: Sequence[DiagnosticStatus], stamp_s: float) -> DiagnosticArray:
    """Wrap statuses into a stamped ``DiagnosticArray``."""
    msg = DiagnosticArray()
    msg.header.stamp = s_to_stamp(stamp_s)
    msg.status = list(statuses)
    return msg


def diagnostic_level_name(status: DiagnosticStatus) -> str:
    """``OK`` / ``WARN`` / ``ERROR`` / ``STALE`` of a status."""
    return _LEVEL_NAMES.get(bytes(status.level), "ERROR")


def diagnostic_values(status: DiagnosticStatus) -> dict[str, str]:
    """The ``KeyValue`` pairs of a status as a dict."""
    return {kv.key: kv.value for kv in status.values}
