"""Turn a policy's raw action chunk into joint-position targets for the controller."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from vla_edge.actions.kinematics import Kinematics
from vla_edge.actions.rotations import to_matrix
from vla_edge.actions.space import NORM_RANGES, ActionSpace
from vla_edge.core.errors import (
    ActionSpaceError,
    EmptyChunkError,
    InvalidObservationError,
    JointMismatchError,
    NonFiniteChunkError,
    NonMonotonicChunkError,
)


class ActionAdapter:
    """One policy's action space on one robot: raw ``[H, policy_dim]`` -> ``[H, n_joints]``.

    Everything the robot cannot execute is refused here, at construction: more
    used dimensions than joints, a joint or gripper the robot lacks,
    ``eef_delta`` without kinematics. Joints the policy does not drive hold
    their start position.

    Args:
        space: the policy's declared action space.
        joint_names: the robot's joints, in the order of the controller's
            targets (revolute in rad, the gripper in m).
        kinematics: the arm's kinematics; needed for ``eef_delta``.
        gripper_joint: the robot's gripper joint, which the space's gripper
            mapping drives and which is never an arm joint (``None``: no gripper).
    """

    def __init__(
        self,
        space: ActionSpace,
        joint_names: Sequence[str],
        kinematics: Kinematics | None = None,
        gripper_joint: str | None = "gripper",
    ) -> None:
        self.space = space
        self.joint_names = tuple(joint_names)
        self.kinematics = kinematics
        names = self.joint_names
        if not names or len(set(names)) != len(names):
            raise ActionSpaceError(f"joint_names = {list(names)}: need unique names, at least one")
        self._gripper = gripper_joint if gripper_joint in names else None
        self._gripper_col: int | None = None
        if space.gripper is not None:
            if self._gripper is None:
                raise ActionSpaceError(
                    f"gripper.index = {space.gripper.index}: the robot has no gripper joint "
                    f"{gripper_joint!r} among {list(names)}"
                )
            self._gripper_col = names.index(self._gripper)
        if space.kind == "eef_delta":
            driven = self._eef_joints(kinematics)
        else:
            driven = self._joint_kind_joints()
        self._cols = np.array([names.index(j) for j in driven], dtype=np.intp)
        self._idx = np.array(space.indices, dtype=np.intp)
        if space.calibration is not None:
            self._calib_min = np.array([c.min_rad for c in space.calibration])
            self._calib_max = np.array([c.max_rad for c in space.calibration])
            self._calib_inverted = np.array([c.inverted for c in space.calibration])

    def _joint_kind_joints(self) -> tuple[str, ...]:
        space, names = self.space, self.joint_names
        n_used = len(space.indices)
        if space.joints is None:
            arm = tuple(j for j in names if j != self._gripper)
            if n_used > len(arm):
                raise ActionSpaceError(
                    f"indices = {list(space.indices)}: {n_used} dimensions for the robot's "
                    f"{len(arm)} joints {list(arm)}"
                )
            if n_used != len(arm):
                raise ActionSpaceError(
                    f"indices = {list(space.indices)}: {n_used} dimensions for the robot's "
                    f"{len(arm)} joints {list(arm)}; name the joints they drive in `joints` "
                    "(the others hold their start position)"
                )
            return arm
        missing = [j for j in space.joints if j not in names]
        if missing:
            raise ActionSpaceError(f"joints = {list(space.joints)}: {missing} not robot joints")
        if self._gripper in space.joints:
            raise ActionSpaceError(
                f"joints = {list(space.joints)}: {self._gripper!r} is the gripper, not an arm joint"
            )
        return space.joints

    def _eef_joints(self, kinematics: Kinematics | None) -> tuple[str, ...]:
        if kinematics is None:
            raise ActionSpaceError(
                "kind eef_delta needs the robot's kinematics (an MJCF or URDF with the "
                "end-effector site): none given"
            )
        missing = [j for j in kinematics.joint_names if j not in self.joint_names]
        if missing:
            raise ActionSpaceError(
                f"kinematics joints {missing}: not robot joints {list(self.joint_names)}"
            )
        if self._gripper in kinematics.joint_names:
            raise ActionSpaceError(
                f"gripper_joint = {self._gripper!r} is an arm joint of the kinematics"
            )
        return kinematics.joint_names

    @property
    def driven_joints(self) -> tuple[str, ...]:
        """The robot joints the policy moves (the gripper included when mapped)."""
        cols = [*self._cols.tolist(), *([] if self._gripper_col is None else [self._gripper_col])]
        return tuple(self.joint_names[c] for c in sorted(cols))

    def to_joint_positions(
        self, raw: np.ndarray, start_positions: np.ndarray, dt_action_s: float
    ) -> np.ndarray:
        """Joint-position targets ``[H, n_joints]`` for a raw chunk ``[H, policy_dim]``.

        Args:
            raw: the policy's output after its un-normalisation.
            start_positions: ``[n_joints]`` the robot's joints at the observation.
            dt_action_s: the time between two steps (integrates velocities).

        Raises:
            EmptyChunkError: no steps.
            JointMismatchError: ``raw`` is not ``[H, policy_dim]``.
            NonFiniteChunkError: NaN or inf in ``raw`` or in the targets made from it.
            NonMonotonicChunkError: ``dt_action_s`` is not positive.
            InvalidObservationError: ``start_positions`` is malformed or non-finite.
        """
        space = self.space
        raw = np.asarray(raw, dtype=np.float64)
        if raw.ndim != 2 or raw.shape[1] != space.policy_dim:
            raise JointMismatchError(
                f"raw chunk shape {raw.shape}: expected [H, policy_dim = {space.policy_dim}]"
            )
        if raw.shape[0] == 0:
            raise EmptyChunkError("raw chunk has no steps")
        bad = np.argwhere(~np.isfinite(raw))
        if bad.size:
            step, dim = (int(v) for v in bad[0])
            raise NonFiniteChunkError(
                f"raw chunk step {step} dimension {dim} = {raw[step, dim]}: "
                f"{len(bad)} non-finite values"
            )
        start = np.asarray(start_positions, dtype=np.float64)
        if start.shape != (len(self.joint_names),):
            raise InvalidObservationError(
                f"start_positions shape {start.shape}: expected ({len(self.joint_names)},) "
                f"for {list(self.joint_names)}"
            )
        if not np.all(np.isfinite(start)):
            raise InvalidObservationError(f"start_positions = {start.tolist()}: non-finite")
        if not math.isfinite(dt_action_s):
            raise NonFiniteChunkError(f"dt_action_s = {dt_action_s}: must be finite")
        if dt_action_s <= 0.0:
            raise NonMonotonicChunkError(f"dt_action_s = {dt_action_s}: must be > 0")

        out = np.tile(start, (raw.shape[0], 1))
        with np.errstate(over="ignore", invalid="ignore"):
            out[:, self._cols] = self._arm_targets(raw, start[self._cols], dt_action_s)
            if self._gripper_col is not None:
                out[:, self._gripper_col] = self._gripper_targets(raw)
        bad = np.argwhere(~np.isfinite(out))
        if bad.size:
            step, col = (int(v) for v in bad[0])
            raise NonFiniteChunkError(
                f"step {step} target of {self.joint_names[col]!r} = {out[step, col]} "
                f"(from finite raw values: overflow or a degenerate {space.kind} action)"
            )
        return out

    def _arm_targets(self, raw: np.ndarray, start: np.ndarray, dt_action_s: float) -> np.ndarray:
        space = self.space
        values = raw[:, self._idx]
        if space.kind == "joint_position":
            if space.units == "normalized":
                return self._denormalize(values)
            return values * space.unit_rad
        if space.kind == "joint_delta":
            return start + values * (space.scale * space.unit_rad)
        if space.kind == "joint_velocity":
            return start + dt_action_s * np.cumsum(values * (space.scale * space.unit_rad), axis=0)
        return self._eef_targets(values, start)

    def _denormalize(self, values: np.ndarray) -> np.ndarray:
        """LeRobot's ``_unnormalize``: clamp to the range, flip if inverted, map onto the joint."""
        lo, hi = NORM_RANGES[self.space.norm_mode]
        fraction = (np.clip(values, lo, hi) - lo) / (hi - lo)
        fraction = np.where(self._calib_inverted, 1.0 - fraction, fraction)
        return self._calib_min + fraction * (self._calib_max - self._calib_min)

    def _eef_targets(self, values: np.ndarray, start: np.ndarray) -> np.ndarray:
        space = self.space
        assert self.kinematics is not None and space.rotation is not None
        if space.input_limit is not None:
            values = np.clip(values, -space.input_limit, space.input_limit)
        delta_pos_m = values[:, :3] * space.position_scale_m
        rot = values[:, 3:]
        if space.rotation in ("axis_angle", "euler_xyz"):
            rot = rot * space.rotation_scale_rad
        delta_rot = to_matrix(rot, space.rotation)
        bad = np.flatnonzero(~np.all(np.isfinite(delta_rot), axis=(1, 2)))
        if bad.size:
            raise NonFiniteChunkError(
                f"step {int(bad[0])} rotation {rot[bad[0]].tolist()} ({space.rotation}) names "
                "no rotation (a zero quaternion or parallel rot6d rows)"
            )
        if not np.all(np.isfinite(delta_pos_m)):
            raise NonFiniteChunkError("eef position delta overflows (scaled raw values)")
        return self.kinematics.integrate_deltas(start, delta_pos_m, delta_rot, space.frame)

    def _gripper_targets(self, raw: np.ndarray) -> np.ndarray:
        g = self.space.gripper
        assert g is not None
        (lo, hi), (at_lo, at_hi) = g.policy_range, g.position_range_m
        fraction = (np.clip(raw[:, g.index], lo, hi) - lo) / (hi - lo)
        return at_lo + fraction * (at_hi - at_lo)
