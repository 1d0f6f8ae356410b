"""Action spaces: a policy's raw output turned into the controller's joint-position targets.

The controller and the safety node execute joint positions only (radians, the
gripper in metres). A policy may emit something else: LIBERO π0 end-effector
deltas and a gripper command, DROID joint velocities, a LeRobot arm joint
positions in degrees or in a calibrated normalised range. The policy directory
declares which (:class:`ActionSpace`, the ``action_space`` section of its
config), and an :class:`ActionAdapter` sits between the runner and the
controller::

    space = load_action_space(policy_dir / "config.yaml")     # or ActionSpace.from_dict(...)
    kin = Kinematics.from_mjcf(robot_mjcf, arm_joint_names, site="ee")  # eef_delta only
    adapter = ActionAdapter(space, controller_joint_names, kin)    # refuses what the robot can't do

    raw = ...  # the runner's un-normalised output [H, policy_dim], for observation `obs`
    positions = adapter.to_joint_positions(raw, obs.state, dt_action_s)
    chunk = ActionChunk(obs.stamp_s, dt_action_s, controller_joint_names, positions)

The chunk keeps the observation's stamp, so the controller's timing, merging
and limit checks see exactly what they see today. A raw chunk that cannot be
turned into finite targets raises a named error and never reaches the controller.

The other way, a :class:`StateSpace` (the ``state_space`` section) says what the
policy's state input is, and a :class:`StateAdapter` computes it from the robot's
joints: the joints themselves, or openpi LIBERO's 8-D end-effector pose
(:mod:`vla_edge.actions.state`).
"""

from vla_edge.actions.adapter import ActionAdapter
from vla_edge.actions.kinematics import Kinematics
from vla_edge.actions.space import (
    ActionSpace,
    GripperMapping,
    JointCalibration,
    load_action_space,
)
from vla_edge.actions.state import StateAdapter, StateSpace

__all__ = [
    "ActionAdapter",
    "ActionSpace",
    "GripperMapping",
    "JointCalibration",
    "Kinematics",
    "StateAdapter",
    "StateSpace",
    "load_action_space",
]
