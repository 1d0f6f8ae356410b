"""Damped-least-squares inverse kinematics for the arm's end-effector site."""

from __future__ import annotations

from collections.abc import Sequence

import mujoco
import numpy as np

ARM_JOINTS = ("joint1", "joint2", "joint3", "joint4", "joint5", "joint6")


def yaw_down_quat(yaw_rad: float) -> np.ndarray:
    """Orientation (w, x, y, z) of a hand pointing straight down, turned by ``yaw_rad``.

    It is ``Rz(yaw) * Ry(pi)``: the approach axis (hand z) points along world -z.
    """
    half = yaw_rad / 2.0
    return np.array([0.0, -np.sin(half), np.cos(half), 0.0])


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


class ArmIK:
    """IK of the end-effector site on a private copy of the kinematic state.

    Args:
        model: the scene model (only read).
        site: end-effector site name.
        joint_names: the arm's hinge joints, in action order.
        limit_margin_rad: keep solutions this far inside the joint ranges.
    """

    def __init__(
        self,
        model: mujoco.MjModel,
        site: str = "ee",
        joint_names: Sequence[str] = ARM_JOINTS,
        limit_margin_rad: float = 0.06,
    ) -> None:
        self._model = model
        self._data = mujoco.MjData(model)
        self._site_id = model.site(site).id
        joints = [model.joint(name) for name in joint_names]
        self._qadr = np.array([int(j.qposadr[0]) for j in joints])
        self._dadr = np.array([int(j.dofadr[0]) for j in joints])
        ranges = np.array([j.range for j in joints])
        self.lower_rad = ranges[:, 0] + limit_margin_rad
        self.upper_rad = ranges[:, 1] - limit_margin_rad
        self._jacp = np.zeros((3, model.nv))
        self._jacr = np.zeros((3, model.nv))

    def forward(self, q_rad: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Site position (m) and orientation quaternion for arm joints ``q_rad``."""
        self._data.qpos[self._qadr] = q_rad
        mujoco.mj_kinematics(self._model, self._data)
        pos = self._data.site_xpos[self._site_id].copy()
        quat = np.empty(4)
        mujoco.mju_mat2Quat(quat, self._data.site_xmat[self._site_id])
        return pos, quat

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
            q_seed_rad: ``[6]`` start of the iteration (the solution stays on its branch).
            max_iters: iteration cap.
            tol_m: position tolerance.
            tol_rad: orientation tolerance.
            damping: the DLS damping factor (m).
            rot_weight_m: lever arm weighting orientation against position.

        Returns:
            The solution ``[6]`` and its remaining position error (m).
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
