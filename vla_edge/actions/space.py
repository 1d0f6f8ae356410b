"""A policy's action space: what each of its output dimensions means.

Declared in a policy directory's config as the ``action_space`` section, e.g.
LIBERO π0 (end-effector deltas scaled as robosuite's OSC_POSE controller
scales them, gripper -1 open .. +1 closed)::

    action_space:
      kind: eef_delta
      policy_dim: 32          # the padded output width
      indices: [0, 1, 2, 3, 4, 5]
      frame: base
      rotation: axis_angle
      input_limit: 1.0
      position_scale_m: 0.05
      rotation_scale_rad: 0.5
      gripper: {index: 6, policy_range: [-1.0, 1.0], position_range_m: [0.04, 0.0]}

and a LeRobot arm whose joints are normalised to [-100, 100] by its calibration::

    action_space:
      kind: joint_position
      policy_dim: 6
      indices: [0, 1, 2, 3, 4]
      joints: [shoulder_pan, shoulder_lift, elbow_flex, wrist_flex, wrist_roll]
      units: normalized
      norm_mode: range_m100_100
      calibration: [{min_rad: -1.9, max_rad: 1.9}, ...]
      gripper: {index: 5, policy_range: [0.0, 100.0], position_range_m: [0.0, 0.04]}

Every kind's step ``i`` is the position command issued at ``t_obs + i * dt_action_s``:
a velocity or a delta at step ``i`` is applied over that step, as DROID's and
robosuite's controllers turn it into a position goal (current + v * dt).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from vla_edge.actions.rotations import ROTATION_DIMS, RotationFormat
from vla_edge.config.loader import format_validation_error, load_yaml_file
from vla_edge.core.errors import ActionSpaceError

ActionKind = Literal["joint_position", "joint_delta", "joint_velocity", "eef_delta"]
JointUnits = Literal["rad", "deg", "normalized"]
NormMode = Literal["range_m100_100", "range_0_100", "range_m1_1"]
EefFrame = Literal["base", "end_effector"]

NORM_RANGES: dict[str, tuple[float, float]] = {
    "range_m100_100": (-100.0, 100.0),  # LeRobot's MotorNormMode.RANGE_M100_100
    "range_0_100": (0.0, 100.0),  # LeRobot's MotorNormMode.RANGE_0_100
    "range_m1_1": (-1.0, 1.0),
}
"""Normalised value at a joint's calibrated ``min_rad`` and ``max_rad``."""

_EEF_FIELDS = ("frame", "rotation", "position_scale_m", "rotation_scale_rad", "input_limit")
SECTION = "action_space"


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class JointCalibration(_Frozen):
    """One joint's calibrated range: the normalised range's ends in the robot's radians.

    LeRobot's ``range_min`` / ``range_max`` (motor ticks) become ``min_rad`` /
    ``max_rad`` with :meth:`from_lerobot`; ``inverted`` is its ``drive_mode`` 1.
    """

    min_rad: float = Field(description="joint position at the low end of the normalised range")
    max_rad: float = Field(description="joint position at the high end of the normalised range")
    inverted: bool = Field(False, description="the normalised value runs from max_rad to min_rad")

    @model_validator(mode="after")
    def _check_range(self) -> JointCalibration:
        if not (math.isfinite(self.min_rad) and math.isfinite(self.max_rad)):
            raise ValueError(f"min_rad = {self.min_rad}, max_rad = {self.max_rad}: must be finite")
        if not self.min_rad < self.max_rad:
            raise ValueError(
                f"min_rad = {self.min_rad} must be below max_rad = {self.max_rad} "
                "(set inverted: true for a joint that runs the other way)"
            )
        return self

    @classmethod
    def from_lerobot(
        cls, range_min: int, range_max: int, drive_mode: int = 0, max_res: int = 4095
    ) -> JointCalibration:
        """From a LeRobot ``MotorCalibration``: radians about the middle of the range.

        Zero is the middle of the calibrated range, as LeRobot's DEGREES mode
        puts it (``(tick - mid) * 360 / max_res``), so a degree policy and a
        normalised one on the same arm agree on every joint's zero.
        """
        if range_min >= range_max:
            raise ActionSpaceError(
                f"LeRobot calibration range_min = {range_min}, range_max = {range_max}: "
                "min must be below max"
            )
        mid = (range_min + range_max) / 2.0
        per_tick_rad = 2.0 * math.pi / max_res
        return cls(
            min_rad=(range_min - mid) * per_tick_rad,
            max_rad=(range_max - mid) * per_tick_rad,
            inverted=bool(drive_mode),
        )


class GripperMapping(_Frozen):
    """The policy's gripper dimension, mapped linearly (and clamped) onto the robot's gripper.

    The robot names its gripper joint (:class:`~vla_edge.actions.ActionAdapter`'s
    ``gripper_joint``); without a mapping the gripper holds its start position.
    """

    index: int = Field(ge=0, description="the policy output dimension of the gripper")
    policy_range: tuple[float, float] = Field(
        (0.0, 1.0), description="policy values mapped to the two ends of position_range_m"
    )
    position_range_m: tuple[float, float] = Field(
        description="gripper position at policy_range[0] and at policy_range[1] (m)"
    )

    @model_validator(mode="after")
    def _check_ranges(self) -> GripperMapping:
        lo, hi = self.policy_range
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ValueError(f"policy_range = {list(self.policy_range)}: needs finite low < high")
        if not all(math.isfinite(v) for v in self.position_range_m):
            raise ValueError(f"position_range_m = {list(self.position_range_m)}: must be finite")
        return self


class ActionSpace(_Frozen):
    """What a policy's output dimensions mean; see the module docstring for examples."""

    kind: ActionKind = Field(description="joint_position, joint_delta, joint_velocity or eef_delta")
    policy_dim: int = Field(gt=0, le=4096, description="the policy's output width (padded)")
    indices: tuple[int, ...] = Field(
        min_length=1, description="the output dimensions used, in the order of the targets"
    )
    # joint kinds
    joints: tuple[str, ...] | None = Field(
        None,
        min_length=1,
        description="joint kinds: the robot joints the indices drive (default: every joint "
        "but the gripper); the others hold their start position",
    )
    units: JointUnits | None = Field(
        None,
        description="joint kinds: rad, deg or normalized (joint_position only); required for "
        "joint_position, rad by default for deltas (rad) and velocities (rad/s)",
    )
    norm_mode: NormMode | None = Field(None, description="units normalized: the value range")
    calibration: tuple[JointCalibration, ...] | None = Field(
        None, description="units normalized: one calibrated range per index"
    )
    scale: float = Field(
        1.0, gt=0.0, description="joint_delta / joint_velocity: factor on the raw values"
    )
    # eef_delta
    frame: EefFrame | None = Field(None, description="eef_delta: base or end_effector")
    rotation: RotationFormat | None = Field(None, description="eef_delta: the rotation's format")
    position_scale_m: float = Field(1.0, gt=0.0, description="eef_delta: metres per raw unit")
    rotation_scale_rad: float = Field(
        1.0, gt=0.0, description="eef_delta (axis_angle, euler_xyz): radians per raw unit"
    )
    input_limit: float | None = Field(
        None, gt=0.0, description="eef_delta: raw values clamped to ±input_limit before scaling"
    )
    gripper: GripperMapping | None = Field(
        None, description="the gripper dimension; without it the gripper holds"
    )

    def __init__(self, **data: Any) -> None:
        """Validate; a bad field is an :class:`ActionSpaceError` naming it, its value and bound."""
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise ActionSpaceError(format_validation_error(exc, SECTION)) from exc

    @model_validator(mode="after")
    def _check_kind(self) -> ActionSpace:
        used = list(self.indices)
        if len(set(used)) != len(used):
            raise ValueError(f"indices = {used}: each output dimension may be used once")
        for i in used:
            if not 0 <= i < self.policy_dim:
                raise ValueError(
                    f"indices = {used}: {i} is outside [0, policy_dim = {self.policy_dim})"
                )
        if self.gripper is not None:
            g = self.gripper.index
            if g >= self.policy_dim:
                raise ValueError(
                    f"gripper.index = {g} is outside [0, policy_dim = {self.policy_dim})"
                )
            if g in used:
                raise ValueError(f"gripper.index = {g} is also in indices = {used}")
        given = self.model_fields_set
        if self.kind == "eef_delta":
            self._check_eef(given)
        else:
            self._check_joint(given)
        return self

    def _check_eef(self, given: set[str]) -> None:
        wrong = sorted(given & {"joints", "units", "norm_mode", "calibration", "scale"})
        if wrong:
            raise ValueError(f"{wrong}: joint-kind fields, not for kind eef_delta")
        if self.frame is None or self.rotation is None:
            raise ValueError("kind eef_delta needs frame (base, end_effector) and rotation")
        need = 3 + ROTATION_DIMS[self.rotation]
        if len(self.indices) != need:
            raise ValueError(
                f"indices = {list(self.indices)}: eef_delta with rotation {self.rotation} uses "
                f"{need} dimensions (3 position + {need - 3} rotation), got {len(self.indices)}"
            )
        if "rotation_scale_rad" in given and self.rotation not in ("axis_angle", "euler_xyz"):
            raise ValueError(
                f"rotation_scale_rad applies to axis_angle and euler_xyz, not {self.rotation}"
            )

    def _check_joint(self, given: set[str]) -> None:
        wrong = sorted(given & set(_EEF_FIELDS))
        if wrong:
            raise ValueError(f"{wrong}: eef_delta fields, not for kind {self.kind}")
        if self.joints is not None:
            if len(self.joints) != len(self.indices):
                raise ValueError(
                    f"joints = {list(self.joints)} ({len(self.joints)}) and "
                    f"indices = {list(self.indices)} ({len(self.indices)}) must pair up one to one"
                )
            if len(set(self.joints)) != len(self.joints):
                raise ValueError(f"joints = {list(self.joints)}: each joint may be driven once")
        if self.kind == "joint_position":
            if self.units is None:
                raise ValueError("kind joint_position needs units: rad, deg or normalized")
            if "scale" in given:
                raise ValueError(
                    "scale applies to joint_delta and joint_velocity, not joint_position"
                )
        elif self.units == "normalized":
            raise ValueError(f"units normalized applies to joint_position, not {self.kind}")
        if self.units == "normalized":
            if self.norm_mode is None or self.calibration is None:
                raise ValueError("units normalized needs norm_mode and calibration")
            if len(self.calibration) != len(self.indices):
                raise ValueError(
                    f"calibration has {len(self.calibration)} ranges for "
                    f"{len(self.indices)} indices: one per index"
                )
        elif self.norm_mode is not None or self.calibration is not None:
            raise ValueError(
                f"norm_mode and calibration apply to units normalized, not {self.units}"
            )

    @property
    def unit_rad(self) -> float:
        """Radians per raw unit of a rad or deg joint kind."""
        return math.pi / 180.0 if self.units == "deg" else 1.0

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = SECTION) -> ActionSpace:
        """Validate an ``action_space`` mapping; errors name ``source``, the field and the value."""
        if not isinstance(data, Mapping):
            raise ActionSpaceError(f"{source}: must be a mapping, got {type(data).__name__}")
        try:
            return cls.model_validate(dict(data))  # runs __init__
        except ActionSpaceError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise ActionSpaceError(format_validation_error(exc.__cause__, source)) from exc
            raise

    def to_dict(self) -> dict[str, Any]:
        """Plain data (lists, not tuples) that :meth:`from_dict` reads back equal."""
        return self.model_dump(mode="json", exclude_none=True, exclude_defaults=True)


def load_action_space(path: str | Path) -> ActionSpace:
    """The ``action_space`` section of a policy config file (YAML or JSON)."""
    data = load_yaml_file(path)
    if SECTION not in data:
        raise ActionSpaceError(f"{path}: no '{SECTION}' section (found: {sorted(data)})")
    return ActionSpace.from_dict(data[SECTION], source=f"{path}: {SECTION}")
