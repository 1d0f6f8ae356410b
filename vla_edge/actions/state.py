"""A policy's state space: what its state input means, and how it is made from the robot's joints.

Declared in a policy directory's ``policy.yaml`` as the ``state_space`` section
(absent: ``{kind: joint_position}``, what every policy directory meant before it
existed) and copied into the export manifest, ``eef_pose`` with the robot's
kinematics. Two kinds:

``joint_position`` (``N = len(joint_names)`` dimensions)
    The robot's joint vector as the controller reports it: the arm joints in rad,
    then the gripper opening in m, in ``joint_names`` order.

``eef_pose`` (8 dimensions: openpi LIBERO's state, ``examples/libero/main.py``'s
``robot0_eef_pos + quat2axisangle(robot0_eef_quat) + robot0_gripper_qpos``)

    ====  ==============================  ====  ====================================
    dim   name                            unit  what
    ====  ==============================  ====  ====================================
    0-2   eef_x_m, eef_y_m, eef_z_m       m     the end-effector site's position in
                                                the robot's base frame (the MJCF's
                                                world frame)
    3-5   eef_rx_rad, eef_ry_rad,         rad   the site's orientation as a rotation
          eef_rz_rad                            vector, angle in [0, π]
                                                (:func:`quat_wxyz_to_axis_angle`)
    6-7   finger_left_m, finger_right_m   m     the two finger joints' positions
    ====  ==============================  ====  ====================================

    The fingers come from the robot's gripper joint, whose position is the
    opening in m: finger ``i`` = ``finger_qpos_per_opening[i] * opening``. The
    tabletop arm (``sim/tabletop/tabletop.xml``) drives the tendon
    ``finger_left + finger_right`` to the opening, an equality keeps the two
    fingers equal, and both slide joints open positively (``finger_right``'s
    axis is -y), so each finger is half the opening: ``[0.5, 0.5]``, the default.
    robosuite's Panda, whose data LIBERO's checkpoints learnt from, reports
    ``(q, -q)``; declare ``[0.5, -0.5]`` to feed such a checkpoint the signs it
    saw (its ``state`` statistics show them).

Example::

    state_space:
      kind: eef_pose
      gripper_joint: gripper              # the robot joint holding the opening (m)
      finger_qpos_per_opening: [0.5, 0.5]

:class:`StateAdapter` computes the policy's state from an observed joint vector
(forward kinematics of the end-effector site with :class:`Kinematics`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from vla_edge.actions.kinematics import Kinematics, matrix_to_quat
from vla_edge.actions.rotations import quat_wxyz_to_axis_angle
from vla_edge.config.loader import format_validation_error
from vla_edge.core.errors import InvalidObservationError, StateSpaceError

StateKind = Literal["joint_position", "eef_pose"]
STATE_KINDS: tuple[str, ...] = ("joint_position", "eef_pose")
EEF_POSE_NAMES = (
    "eef_x_m",
    "eef_y_m",
    "eef_z_m",
    "eef_rx_rad",
    "eef_ry_rad",
    "eef_rz_rad",
    "finger_left_m",
    "finger_right_m",
)
"""The ``eef_pose`` dimensions, in order."""
SECTION = "state_space"
_EEF_FIELDS = ("gripper_joint", "finger_qpos_per_opening")


class StateSpace(BaseModel):
    """What a policy's state input means; see the module docstring for the kinds."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: StateKind = Field(
        "joint_position", description="joint_position (the robot's joints) or eef_pose (8-D)"
    )
    gripper_joint: str = Field(
        "gripper",
        min_length=1,
        description="eef_pose: the robot joint whose position is the gripper opening (m)",
    )
    finger_qpos_per_opening: tuple[float, float] = Field(
        (0.5, 0.5),
        description="eef_pose: each finger joint's position per metre of gripper opening",
    )

    def __init__(self, **data: Any) -> None:
        """Validate; a bad field is a :class:`StateSpaceError` naming it, its value and bound."""
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise StateSpaceError(format_validation_error(exc, SECTION)) from exc

    @model_validator(mode="after")
    def _check_kind(self) -> StateSpace:
        if self.kind == "joint_position":
            wrong = sorted(self.model_fields_set & set(_EEF_FIELDS))
            if wrong:
                raise ValueError(f"{wrong}: eef_pose fields, not for kind joint_position")
        if not all(math.isfinite(c) for c in self.finger_qpos_per_opening):
            raise ValueError(
                f"finger_qpos_per_opening = {list(self.finger_qpos_per_opening)}: must be finite"
            )
        return self

    def width(self, n_joints: int) -> int:
        """The state's dimensions on a robot of ``n_joints`` joints."""
        return n_joints if self.kind == "joint_position" else len(EEF_POSE_NAMES)

    def names(self, joint_names: Sequence[str]) -> tuple[str, ...]:
        """Each state dimension's name (the joints' for ``joint_position``)."""
        return tuple(joint_names) if self.kind == "joint_position" else EEF_POSE_NAMES

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, source: str = SECTION) -> StateSpace:
        """Validate a ``state_space`` mapping (``None``: the default, ``joint_position``)."""
        if data is None:
            return cls()
        if not isinstance(data, Mapping):
            raise StateSpaceError(f"{source}: must be a mapping, got {type(data).__name__}")
        try:
            return cls.model_validate(dict(data))  # runs __init__
        except StateSpaceError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise StateSpaceError(format_validation_error(exc.__cause__, source)) from exc
            raise

    def to_dict(self) -> dict[str, Any]:
        """Plain data that :meth:`from_dict` reads back equal (the kind always written)."""
        return {"kind": self.kind, **self.model_dump(mode="json", exclude_defaults=True)}


class StateAdapter:
    """One policy's state space on one robot: the joint vector ``[N]`` -> the state ``[S]``.

    What the robot cannot observe is refused here, at construction: ``eef_pose``
    without kinematics, a kinematics joint or gripper joint the robot lacks, the
    gripper among the arm joints.

    Args:
        space: the policy's declared state space.
        joint_names: the robot's joints, in the order of the observed state.
        kinematics: the arm's kinematics of the end-effector site; needed for ``eef_pose``.
    """

    def __init__(
        self,
        space: StateSpace,
        joint_names: Sequence[str],
        kinematics: Kinematics | None = None,
    ) -> None:
        self.space = space
        self.joint_names = tuple(joint_names)
        self.kinematics = kinematics
        self.width = space.width(len(self.joint_names))
        self.names = space.names(self.joint_names)
        if space.kind == "joint_position":
            return
        if kinematics is None:
            raise StateSpaceError(
                "kind eef_pose needs the robot's kinematics (an MJCF or URDF with the "
                "end-effector site): none given"
            )
        missing = [j for j in kinematics.joint_names if j not in self.joint_names]
        if missing:
            raise StateSpaceError(
                f"kinematics joints {missing}: not robot joints {list(self.joint_names)}"
            )
        gripper = space.gripper_joint
        if gripper not in self.joint_names:
            raise StateSpaceError(
                f"gripper_joint = {gripper!r}: not a robot joint {list(self.joint_names)} "
                "(eef_pose reads the finger positions from it)"
            )
        if gripper in kinematics.joint_names:
            raise StateSpaceError(f"gripper_joint = {gripper!r} is an arm joint of the kinematics")
        self._arm = np.array([self.joint_names.index(j) for j in kinematics.joint_names])
        self._gripper = self.joint_names.index(gripper)
        self._fingers = np.asarray(space.finger_qpos_per_opening, dtype=np.float64)

    def policy_state(self, joint_positions: np.ndarray) -> np.ndarray:
        """The policy's state ``[S]`` (float64) for the robot's joints ``[N]``.

        Raises:
            InvalidObservationError: ``joint_positions`` is not ``[N]`` or not finite.
        """
        q = np.asarray(joint_positions, dtype=np.float64)
        if q.shape != (len(self.joint_names),) or not np.all(np.isfinite(q)):
            raise InvalidObservationError(
                f"joint state {q.tolist()}: expected {len(self.joint_names)} finite values for "
                f"{list(self.joint_names)}"
            )
        if self.space.kind == "joint_position":
            return q
        assert self.kinematics is not None
        pos_m, rot = self.kinematics.pose(q[self._arm])
        rotvec_rad = quat_wxyz_to_axis_angle(matrix_to_quat(rot))
        return np.concatenate([pos_m, rotvec_rad, self._fingers * q[self._gripper]])


__all__ = [
    "EEF_POSE_NAMES",
    "STATE_KINDS",
    "StateAdapter",
    "StateSpace",
]
