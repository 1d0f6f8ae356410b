"""A policy's state space: the ``state_space`` schema, openpi LIBERO's 8-D end-effector
state computed from the tabletop arm's joints, checked against MuJoCo's own site pose and
finger positions."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from vla_edge.actions import Kinematics, StateAdapter, StateSpace
from vla_edge.actions.rotations import quat_wxyz_to_axis_angle
from vla_edge.actions.state import EEF_POSE_NAMES
from vla_edge.config.paths import scene_xml_path
from vla_edge.core.errors import ConfigError, InvalidObservationError, StateSpaceError
from vla_edge.sim.env import JOINT_NAMES, TabletopEnv
from vla_edge.sim.ik import ARM_JOINTS
from vla_edge.sim.tasks import HOME_ARM_QPOS_RAD

# -- the schema -------------------------------------------------------------------------------


def test_absent_state_space_is_joint_position_of_the_robots_width() -> None:
    space = StateSpace.from_dict(None)
    assert space.kind == "joint_position" and space.to_dict() == {"kind": "joint_position"}
    assert space.width(7) == 7 and space.names(JOINT_NAMES) == JOINT_NAMES
    eef = StateSpace.from_dict({"kind": "eef_pose"})
    assert eef.width(7) == 8 and eef.names(JOINT_NAMES) == EEF_POSE_NAMES
    assert eef.finger_qpos_per_opening == (0.5, 0.5) and eef.gripper_joint == "gripper"
    libero = {"kind": "eef_pose", "finger_qpos_per_opening": [0.5, -0.5]}
    assert StateSpace.from_dict(StateSpace.from_dict(libero).to_dict()).to_dict() == libero


@pytest.mark.parametrize(
    ("section", "words"),
    [
        ({"kind": "eef_position"}, r"state_space: kind = 'eef_position'"),
        ({"kind": "joint_position", "gripper_joint": "g"}, r"\['gripper_joint'\]: eef_pose"),
        (
            {"kind": "eef_pose", "finger_qpos_per_opening": [0.5, float("nan")]},
            r"finger_qpos_per_opening = \[0\.5, nan\]: must be finite",
        ),
        ({"kind": "eef_pose", "frame": "base"}, r"state_space: frame = 'base': Extra inputs"),
        ("eef_pose", "must be a mapping, got str"),
    ],
    ids=["unknown-kind", "eef-field-on-joints", "nan-finger", "unknown-field", "not-a-mapping"],
)
def test_a_bad_state_space_is_a_named_config_error(section, words) -> None:
    with pytest.raises(StateSpaceError, match=words) as info:
        StateSpace.from_dict(section)
    assert isinstance(info.value, ConfigError)


# -- openpi LIBERO's state from the tabletop arm's joints ------------------------------------


@pytest.fixture(scope="module")
def eef_pose() -> StateAdapter:
    kinematics = Kinematics.from_mjcf(scene_xml_path("tabletop"), ARM_JOINTS, "ee")
    return StateAdapter(StateSpace(kind="eef_pose"), JOINT_NAMES, kinematics)


CONFIGURATIONS = [
    [*HOME_ARM_QPOS_RAD, 0.04],
    [0.4, -0.3, 1.2, 0.8, -0.6, 2.5, 0.0],
    [-1.5, 0.9, -0.4, -2.0, 1.5, -2.9, 0.013],
    [2.7, -1.6, 2.4, 2.8, -1.9, 0.1, 0.031],
]


@pytest.mark.parametrize("joints", CONFIGURATIONS)
def test_eef_pose_state_is_mujocos_site_pose_and_finger_positions(eef_pose, joints) -> None:
    """Each configuration is put into the simulator as ``TabletopEnv`` puts a state (arm
    qpos, each finger half the opening); MuJoCo's own site pose and finger joints are the
    reference."""
    env = TabletopEnv()
    model, data = env.model, env.data
    for name, value in zip(ARM_JOINTS, joints[:6], strict=True):
        data.qpos[model.joint(name).qposadr[0]] = value
    for finger in ("finger_left", "finger_right"):
        data.qpos[model.joint(finger).qposadr[0]] = joints[6] / 2.0
    mujoco.mj_forward(model, data)
    np.testing.assert_allclose(env.state(), joints, atol=1e-12)  # the observed joint vector

    state = eef_pose.policy_state(env.state())
    site = model.site("ee").id
    assert state.shape == (8,)
    np.testing.assert_allclose(state[:3], data.site_xpos[site], atol=1e-12)
    rotvec = Rotation.from_matrix(data.site_xmat[site].reshape(3, 3)).as_rotvec()
    np.testing.assert_allclose(state[3:6], rotvec, atol=1e-9)
    assert np.linalg.norm(state[3:6]) <= np.pi
    fingers = [data.qpos[model.joint(f).qposadr[0]] for f in ("finger_left", "finger_right")]
    np.testing.assert_allclose(state[6:], fingers, atol=1e-12)


def test_finger_signs_follow_the_declared_mapping() -> None:
    kinematics = Kinematics.from_mjcf(scene_xml_path("tabletop"), ARM_JOINTS, "ee")
    space = StateSpace(kind="eef_pose", finger_qpos_per_opening=(0.5, -0.5))
    state = StateAdapter(space, JOINT_NAMES, kinematics).policy_state([*HOME_ARM_QPOS_RAD, 0.03])
    np.testing.assert_allclose(state[6:], [0.015, -0.015])


def test_axis_angle_is_robosuites_quat2axisangle_with_w_non_negative() -> None:
    rng = np.random.default_rng(0)
    quats = rng.normal(size=(200, 4))
    quats /= np.linalg.norm(quats, axis=1, keepdims=True)
    got = quat_wxyz_to_axis_angle(quats)
    for quat, rotvec in zip(quats, got, strict=True):
        w, xyz = (quat[0], quat[1:]) if quat[0] >= 0 else (-quat[0], -quat[1:])
        want = xyz * 2.0 * np.arccos(w) / np.sqrt(1.0 - w * w)  # robosuite's formula
        np.testing.assert_allclose(rotvec, want, atol=1e-9)
    np.testing.assert_allclose(quat_wxyz_to_axis_angle(np.array([1.0, 0, 0, 0])), 0.0)
    tiny = quat_wxyz_to_axis_angle(np.array([1.0, 1e-14, 0.0, 0.0]))
    np.testing.assert_allclose(tiny, [2e-14, 0.0, 0.0], rtol=1e-9)


@pytest.mark.parametrize(
    ("space", "joints", "arm", "words"),
    [
        (StateSpace(kind="eef_pose"), JOINT_NAMES, None, "needs the robot's kinematics"),
        (
            StateSpace(kind="eef_pose", gripper_joint="hand"),
            JOINT_NAMES,
            ARM_JOINTS,
            r"gripper_joint = 'hand': not a robot joint",
        ),
        (
            StateSpace(kind="eef_pose", gripper_joint="joint6"),
            JOINT_NAMES,
            ARM_JOINTS,
            r"gripper_joint = 'joint6' is an arm joint",
        ),
        (StateSpace(kind="eef_pose"), ("a", "b", "gripper"), ARM_JOINTS, "not robot joints"),
    ],
    ids=["no-kinematics", "no-such-gripper", "gripper-is-an-arm-joint", "arm-not-on-robot"],
)
def test_a_state_the_robot_cannot_observe_is_refused_at_construction(
    space, joints, arm, words
) -> None:
    kinematics = None
    if arm is not None:
        kinematics = Kinematics.from_mjcf(scene_xml_path("tabletop"), arm, "ee")
    with pytest.raises(StateSpaceError, match=words):
        StateAdapter(space, joints, kinematics)


def test_a_malformed_joint_vector_is_an_observation_error(eef_pose) -> None:
    with pytest.raises(InvalidObservationError, match="expected 7 finite values"):
        eef_pose.policy_state(np.zeros(8))
    with pytest.raises(InvalidObservationError, match="expected 7 finite values"):
        eef_pose.policy_state([np.nan] * 7)
