"""Forward and damped-least-squares inverse kinematics of an arm's end-effector site (MuJoCo).

The pose is that of an MJCF site in the model's world frame, which is the
robot's base frame in a robot MJCF (the tabletop arm's base sits at the origin).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import mujoco
import numpy as np

from vla_edge.core.errors import ActionSpaceError, AssetNotFoundError, ConfigError


def quat_error(target: np.ndarray, current: np.ndarray) -> np.ndarray:
    """Rotation vector (world frame) taking ``current`` to ``target``."""
    inv = np.empty(4)
    mujoco.mju_negQuat(inv, current)
    err = np.empty(4)
    mujoco.mju_mulQuat(err, target, inv)
    if err[0] < 0.0:
        err = -err
    vel = np.empty(3)
    mujoco.mju_quat2Vel(vel, err, 1.0)
    return vel


def matrix_to_quat(rot: np.ndarray) -> np.ndarray:
    """Quaternion ``(w, x, y, z)`` of a rotation matrix ``[3, 3]``."""
    quat = np.empty(4)
    mujoco.mju_mat2Quat(quat, np.ascontiguousarray(rot, dtype=np.float64).reshape(9))
    return quat


class Kinematics:
    """Kinematics of one site over a chain of 1-DoF joints, on a private kinematic state.

    Args:
        model: the robot (or scene) model; only read.
        joint_names: the arm's hinge or slide joints, in target order.
        site: the end-effector site.
        limit_margin_rad: keep IK solutions this far inside the joint ranges
            (a joint without a range is unbounded).
    """

    def __init__(
        self,
        model: mujoco.MjModel,
        joint_names: Sequence[str],
        site: str,
        limit_margin_rad: float = 0.0,
    ) -> None:
        self._model = model
        self._data = mujoco.MjData(model)
        self.joint_names = tuple(joint_names)
        self.site = site
        try:
            self._site_id = model.site(site).id
        except KeyError as exc:
            raise ActionSpaceError(f"site = {site!r}: not in the robot model") from exc
        joints = []
        for name in self.joint_names:
            try:
                joint = model.joint(name)
            except KeyError as exc:
                raise ActionSpaceError(f"joint {name!r}: not in the robot model") from exc
            if int(joint.type[0]) not in (mujoco.mjtJoint.mjJNT_HINGE, mujoco.mjtJoint.mjJNT_SLIDE):
                raise ActionSpaceError(f"joint {name!r}: not a hinge or slide joint")
            joints.append(joint)
        self._qadr = np.array([int(j.qposadr[0]) for j in joints])
        self._dadr = np.array([int(j.dofadr[0]) for j in joints])
        limited = np.array([bool(model.jnt_limited[j.id]) for j in joints])[:, None]
        ranges = np.where(limited, np.array([j.range for j in joints]), [[-np.inf, np.inf]])
        self.lower_rad = ranges[:, 0] + limit_margin_rad
        self.upper_rad = ranges[:, 1] - limit_margin_rad
        narrow = np.flatnonzero(self.lower_rad > self.upper_rad)
        if narrow.size:
            raise ActionSpaceError(
                f"limit_margin_rad = {limit_margin_rad}: leaves no range for joint "
                f"{self.joint_names[narrow[0]]!r}"
            )
        self._jacp = np.zeros((3, model.nv))
        self._jacr = np.zeros((3, model.nv))

    @classmethod
    def from_mjcf(
        cls,
        path: str | Path,
        joint_names: Sequence[str],
        site: str,
        limit_margin_rad: float = 0.0,
    ) -> Kinematics:
        """Load the robot's MJCF (a URDF loads too: MuJoCo compiles both)."""
        path = Path(path)
        if not path.is_file():
            raise AssetNotFoundError(f"robot model {path}: file not found")
        try:
            model = mujoco.MjModel.from_xml_path(str(path))
        except ValueError as exc:
            raise ConfigError(f"robot model {path}: MuJoCo cannot load it: {exc}") from exc
        return cls(model, joint_names, site, limit_margin_rad)

    @property
    def n_joints(self) -> int:
        """Number of arm joints."""
        return len(self.joint_names)

    def forward(self, q_rad: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Site position (m) and orientation quaternion for arm joints ``q_rad``."""
        self._data.qpos[self._qadr] = q_rad
        mujoco.mj_kinematics(self._model, self._data)
        pos = self._data.site_xpos[self._site_id].copy()
        quat = np.empty(4)
        mujoco.mju_mat2Quat(quat, self._data.site_xmat[self._site_id])
        return pos, quat

    def pose(self, q_rad: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Site position (m) and rotation matrix ``[3, 3]`` for arm joints ``q_rad``."""
        self._data.qpos[self._qadr] = q_rad
        mujoco.mj_kinematics(self._model, self._data)
        pos = self._data.site_xpos[self._site_id].copy()
        return pos, self._data.site_xmat[self._site_id].reshape(3, 3).copy()

    def solve(
        self,
        target_pos_m: np.ndarray,
        target_quat: np.ndarray,
        q_seed_rad: np.ndarray,
        max_iters: int = 60,
        tol_m: float = 2e-4,
        tol_rad: float = 2e-3,
        damping: float = 0.02,
        rot_weight_m: float = 0.2,
    ) -> tuple[np.ndarray, float]:
        """Joint positions reaching the pose, starting from ``q_seed_rad``.

        Args:
            target_pos_m: ``[3]`` site position.
            target_quat: ``[4]`` site orientation.
            q_seed_rad: ``[n]`` start of the iteration (the solution stays on its branch).
            max_iters: iteration cap.
            tol_m: position tolerance.
            tol_rad: orientation tolerance.
            damping: the DLS damping factor (m).
            rot_weight_m: lever arm weighting orientation against position.

        Returns:
            The solution ``[n]``, inside the joint ranges, and its remaining position error (m).
        """
        q = np.clip(np.asarray(q_seed_rad, dtype=np.float64).copy(), self.lower_rad, self.upper_rad)
        pos_err_m = np.inf
        for _ in range(max_iters):
            pos, quat = self.forward(q)
            e_pos = target_pos_m - pos
            e_rot = quat_error(target_quat, quat)
            pos_err_m = float(np.linalg.norm(e_pos))
            if pos_err_m < tol_m and float(np.linalg.norm(e_rot)) < tol_rad:
                break
            mujoco.mj_comPos(self._model, self._data)
            mujoco.mj_jacSite(self._model, self._data, self._jacp, self._jacr, self._site_id)
            jac = np.vstack([self._jacp[:, self._dadr], rot_weight_m * self._jacr[:, self._dadr]])
            err = np.concatenate([e_pos, rot_weight_m * e_rot])
            jjt = jac @ jac.T + damping**2 * np.eye(6)
            dq = jac.T @ np.linalg.solve(jjt, err)
            step = float(np.max(np.abs(dq)))
            if step > 0.2:
                dq *= 0.2 / step
            q = np.clip(q + dq, self.lower_rad, self.upper_rad)
        return q, pos_err_m

    def integrate_deltas(
        self,
        start_q_rad: np.ndarray,
        delta_pos_m: np.ndarray,
        delta_rot: np.ndarray,
        frame: Literal["base", "end_effector"],
        reach_tol_m: float = 1e-3,
        reach_tol_rad: float = 1e-2,
    ) -> np.ndarray:
        """Joint targets ``[H, n]`` for a chunk of end-effector deltas, step by step.

        Step ``i``'s delta moves the pose commanded at step ``i - 1`` (the start
        pose for step 0). Each step's IK starts from the previous solution, so
        the chunk stays on one branch. A pose out of reach ends at the joint
        ranges, never beyond, and the next delta then moves the pose reached
        instead (no wind-up: a reversed delta moves the arm back at once).

        Args:
            start_q_rad: ``[n]`` the arm's joints when the chunk starts.
            delta_pos_m: ``[H, 3]`` position deltas.
            delta_rot: ``[H, 3, 3]`` rotation deltas.
            frame: ``base``: both deltas in the base frame (``R' = dR R``);
                ``end_effector``: in the end-effector frame (``R' = R dR``).
            reach_tol_m: a step whose IK misses the pose by more is out of reach.
            reach_tol_rad: likewise for the orientation.
        """
        q = np.clip(np.asarray(start_q_rad, dtype=np.float64), self.lower_rad, self.upper_rad)
        pos, rot = self.pose(q)
        out = np.empty((len(delta_pos_m), self.n_joints))
        for i, (d_pos, d_rot) in enumerate(zip(delta_pos_m, delta_rot, strict=True)):
            if frame == "base":
                pos, rot = pos + d_pos, d_rot @ rot
            else:
                pos, rot = pos + rot @ d_pos, rot @ d_rot
            quat = matrix_to_quat(rot)
            q, err_m = self.solve(pos, quat, q, max_iters=100, tol_m=1e-5, tol_rad=1e-4)
            out[i] = q
            reached_pos, reached_quat = self.forward(q)
            if (
                err_m > reach_tol_m
                or np.linalg.norm(quat_error(quat, reached_quat)) > reach_tol_rad
            ):
                pos, rot = self.pose(q)
        return out
