"""The tabletop arm's inverse kinematics: its joints, its hand site, the expert's hand orientation.

The damped-least-squares solver is :class:`vla_edge.actions.kinematics.Kinematics`
(the action adapter turns end-effector deltas into joint targets with it too);
:class:`ArmIK` is that solver with the tabletop arm's defaults.
"""

from __future__ import annotations

from collections.abc import Sequence

import mujoco
import numpy as np

from vla_edge.actions.kinematics import Kinematics, quat_error

__all__ = ["ARM_JOINTS", "ArmIK", "quat_error", "yaw_down_quat"]

ARM_JOINTS = ("joint1", "joint2", "joint3", "joint4", "joint5", "joint6")


def yaw_down_quat(yaw_rad: float) -> np.ndarray:
    """Orientation (w, x, y, z) of a hand pointing straight down, turned by ``yaw_rad``.

    It is ``Rz(yaw) * Ry(pi)``: the approach axis (hand z) points along world -z.
    """
    half = yaw_rad / 2.0
    return np.array([0.0, -np.sin(half), np.cos(half), 0.0])


class ArmIK(Kinematics):
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
        super().__init__(model, joint_names, site, limit_margin_rad)
