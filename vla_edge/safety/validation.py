"""Input validation of joint commands reaching the safety layer."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from vla_edge.core.errors import (
    CommandJointMismatchError,
    CommandOutOfLimitsError,
    NonFiniteCommandError,
    StaleCommandError,
)
from vla_edge.core.types import JointCommand


def validate_command(
    command: JointCommand,
    joint_names: Sequence[str],
    position_min: Sequence[float],
    position_max: Sequence[float],
    now_s: float,
    command_timeout_s: float,
    not_before_s: float | None = None,
) -> np.ndarray:
    """Check ``command`` and return its positions as float64 ``[A]``.

    Checks in order: joint names / dimension, non-finite stamp or position,
    position outside the hard limits, age above ``command_timeout_s`` (or a
    stamp more than that in the future), stamp before ``not_before_s`` (a
    command issued before the last reset).

    Raises:
        CommandJointMismatchError, NonFiniteCommandError, CommandOutOfLimitsError,
        StaleCommandError: the message names the field, the value and the bound.
    """
    expected = tuple(joint_names)
    if tuple(command.joint_names) != expected:
        raise CommandJointMismatchError(
            f"joint_names = {list(command.joint_names)}, expected {list(expected)}"
        )
    positions = np.asarray(command.positions, dtype=np.float64)
    if positions.shape != (len(expected),):
        raise CommandJointMismatchError(
            f"positions has shape {positions.shape}, expected ({len(expected)},)"
        )
    stamp_s = float(command.stamp_s)
    if not math.isfinite(stamp_s):
        raise NonFiniteCommandError(f"stamp_s = {stamp_s}: must be finite")
    for i, name in enumerate(expected):
        value = float(positions[i])
        if not math.isfinite(value):
            raise NonFiniteCommandError(f"positions[{name}] = {value}: must be finite")
        if value < position_min[i] or value > position_max[i]:
            raise CommandOutOfLimitsError(
                f"positions[{name}] = {value} outside [position_min, position_max] = "
                f"[{position_min[i]}, {position_max[i]}]"
            )
    age_s = now_s - stamp_s
    if age_s > command_timeout_s:
        raise StaleCommandError(
            f"command age = {age_s:.6f} s exceeds command_timeout_s = {command_timeout_s}"
        )
    if -age_s > command_timeout_s:
        raise StaleCommandError(
            f"stamp_s = {stamp_s} lies {-age_s:.6f} s after now_s = {now_s} "
            f"(bound: at most command_timeout_s = {command_timeout_s} ahead)"
        )
    if not_before_s is not None and stamp_s <= not_before_s:
        raise StaleCommandError(
            f"stamp_s = {stamp_s} is not after the reset at {not_before_s} "
            f"(bound: stamp_s > {not_before_s})"
        )
    return positions
