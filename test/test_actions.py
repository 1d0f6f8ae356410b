"""Action spaces: every kind and unit turned into joint-position targets, and every refusal."""

import math

import mujoco
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from vla_edge.actions import (
    ActionAdapter,
    ActionSpace,
    JointCalibration,
    Kinematics,
    load_action_space,
)
from vla_edge.actions.kinematics import matrix_to_quat, quat_error
from vla_edge.actions.rotations import ROTATION_DIMS, matrix_to_rot6d, to_matrix
from vla_edge.config.paths import share_dir
from vla_edge.core.errors import (
    ActionSpaceError,
    AssetNotFoundError,
    ConfigError,
    EmptyChunkError,
    InvalidObservationError,
    JointMismatchError,
    NonFiniteChunkError,
    NonMonotonicChunkError,
    VlaEdgeError,
)
from vla_edge.sim.tasks import HOME_ARM_QPOS_RAD

ARM = ("joint1", "joint2", "joint3", "joint4", "joint5", "joint6")
JOINTS = (*ARM, "gripper")
START = np.array([*HOME_ARM_QPOS_RAD, 0.03])
DT_S = 0.1
LIBERO_GRIPPER = {"index": 6, "policy_range": [-1.0, 1.0], "position_range_m": [0.04, 0.0]}
LIBERO = {
    "kind": "eef_delta",
    "policy_dim": 32,
    "indices": [0, 1, 2, 3, 4, 5],
    "frame": "base",
    "rotation": "axis_angle",
    "input_limit": 1.0,
    "position_scale_m": 0.05,
    "rotation_scale_rad": 0.5,
    "gripper": LIBERO_GRIPPER,
}


@pytest.fixture(scope="module")
def kin():
    return Kinematics.from_mjcf(share_dir() / "sim" / "tabletop" / "tabletop.xml", ARM, "ee")


def joint_space(**fields):
    return ActionSpace.from_dict({"policy_dim": 8, "indices": [0, 1, 2, 3, 4, 5], **fields})


def adapt(space, raw, start=START, kinematics=None, dt_s=DT_S):
    return ActionAdapter(space, JOINTS, kinematics).to_joint_positions(
        np.asarray(raw, dtype=np.float64), start, dt_s
    )


def raw_chunk(rows, width=8):
    rows = np.atleast_2d(np.asarray(rows, dtype=np.float64))
    out = np.zeros((rows.shape[0], width))
    out[:, : rows.shape[1]] = rows
    return out


# ------------------------------------------------------------- joint kinds


def test_joint_position_in_rad_reorders_the_used_dimensions():
    space = joint_space(kind="joint_position", units="rad", indices=[5, 4, 3, 2, 1, 0])
    raw = raw_chunk([[0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 9.0, 9.0]])
    out = adapt(space, raw)
    np.testing.assert_array_equal(out[0, :6], [0.5, 0.4, 0.3, 0.2, 0.1, 0.0])
    assert out[0, 6] == START[6]  # no gripper mapping: the gripper holds


def test_joint_position_in_degrees_becomes_radians():
    space = joint_space(kind="joint_position", units="deg")
    out = adapt(space, raw_chunk([[90.0, -45.0, 180.0, 0.0, 30.0, -90.0]]))
    np.testing.assert_allclose(
        out[0, :6], [math.pi / 2, -math.pi / 4, math.pi, 0, math.pi / 6, -math.pi / 2]
    )


@pytest.mark.parametrize(
    ("norm_mode", "values", "fractions"),
    [
        ("range_m100_100", [-100.0, -50.0, 0.0, 50.0, 100.0, 150.0], [0, 0.25, 0.5, 0.75, 1, 1]),
        ("range_0_100", [0.0, 25.0, 50.0, 75.0, 100.0, -20.0], [0, 0.25, 0.5, 0.75, 1, 0]),
        ("range_m1_1", [-1.0, -0.5, 0.0, 0.5, 1.0, 3.0], [0, 0.25, 0.5, 0.75, 1, 1]),
    ],
)
def test_normalized_joint_position_maps_onto_the_calibrated_range(norm_mode, values, fractions):
    calibration = [{"min_rad": -1.0 - k * 0.1, "max_rad": 2.0 + k * 0.1} for k in range(6)]
    space = joint_space(
        kind="joint_position", units="normalized", norm_mode=norm_mode, calibration=calibration
    )
    out = adapt(space, raw_chunk([values]))[0, :6]
    expected = [
        c["min_rad"] + f * (c["max_rad"] - c["min_rad"])
        for c, f in zip(calibration, fractions, strict=True)
    ]
    np.testing.assert_allclose(out, expected)


def test_an_inverted_joint_runs_from_max_to_min():
    calibration = [{"min_rad": -1.0, "max_rad": 1.0, "inverted": True}] * 6
    space = joint_space(
        kind="joint_position", units="normalized", norm_mode="range_0_100", calibration=calibration
    )
    out = adapt(space, raw_chunk([[0.0, 100.0, 25.0, 50.0, 75.0, 200.0]]))[0, :6]
    np.testing.assert_allclose(out, [1.0, -1.0, 0.5, 0.0, -0.5, -1.0])


@pytest.mark.parametrize("drive_mode", [0, 1])
def test_lerobot_calibration_agrees_with_lerobots_unnormalize_then_degrees(drive_mode):
    range_min, range_max, max_res = 1024, 3072, 4095
    calibration = JointCalibration.from_lerobot(range_min, range_max, drive_mode, max_res)
    space = ActionSpace(
        kind="joint_position",
        policy_dim=1,
        indices=(0,),
        joints=("joint1",),
        units="normalized",
        norm_mode="range_m100_100",
        calibration=(calibration,),
    )
    adapter = ActionAdapter(space, ("joint1",))
    for value in [-100.0, -37.5, 0.0, 62.5, 100.0]:
        # LeRobot's MotorsBus._unnormalize (RANGE_M100_100), without the int() truncation ...
        v = -value if drive_mode else value
        tick = (v + 100) / 200 * (range_max - range_min) + range_min
        # ... then its _normalize in DEGREES mode: degrees about the middle of the range
        degrees = (tick - (range_min + range_max) / 2) * 360 / max_res
        out = adapter.to_joint_positions(np.array([[value]]), np.zeros(1), DT_S)
        assert out[0, 0] == pytest.approx(math.radians(degrees), abs=1e-12)


@pytest.mark.parametrize(
    ("units", "scale", "unit_rad"), [("rad", 1.0, 1.0), ("deg", 2.0, math.pi / 180)]
)
def test_joint_delta_is_added_to_the_chunk_start_state(units, scale, unit_rad):
    space = joint_space(kind="joint_delta", units=units, scale=scale)
    deltas = np.array([[0.1, -0.2, 0.0, 0.3, 0.0, 0.05], [0.2, -0.4, 0.1, 0.0, 0.0, 0.05]])
    out = adapt(space, raw_chunk(deltas))
    # every step relative to the same start (openpi's AbsoluteActions), not cumulative
    np.testing.assert_allclose(out[:, :6], START[:6] + deltas * scale * unit_rad)
    np.testing.assert_array_equal(out[:, 6], START[6])


def test_joint_velocity_integrates_from_the_start_state_with_the_chunk_dt():
    space = joint_space(kind="joint_velocity")
    v = np.zeros((4, 6))
    v[:, 0] = [1.0, 2.0, -1.0, 0.0]
    v[:, 5] = [-0.5, -0.5, -0.5, -0.5]
    out = adapt(space, raw_chunk(v), dt_s=0.1)
    # step i is the command issued at t_i: start + dt * (v_0 + ... + v_i)
    np.testing.assert_allclose(out[:, 0], START[0] + np.array([0.1, 0.3, 0.2, 0.2]))
    np.testing.assert_allclose(out[:, 5], START[5] + np.array([-0.05, -0.1, -0.15, -0.2]))
    np.testing.assert_allclose(out[:, 1:5], np.tile(START[1:5], (4, 1)))


def test_droid_velocities_and_gripper_position():
    space = ActionSpace.from_dict(
        {
            "kind": "joint_velocity",
            "policy_dim": 32,
            "indices": [0, 1, 2, 3, 4, 5],
            "scale": 3.0,
            "gripper": {"index": 7, "policy_range": [0.0, 1.0], "position_range_m": [0.04, 0.0]},
        }
    )
    raw = np.zeros((2, 32))
    raw[:, 2] = 0.1
    raw[:, 7] = [0.0, 0.75]
    out = adapt(space, raw, dt_s=1 / 15)
    np.testing.assert_allclose(out[:, 2], START[2] + 0.3 / 15 * np.array([1, 2]))
    np.testing.assert_allclose(out[:, 6], [0.04, 0.01])


def test_gripper_maps_libero_open_close_onto_the_robot_range_and_clamps():
    space = joint_space(kind="joint_delta", gripper=LIBERO_GRIPPER)
    raw = raw_chunk(np.zeros((5, 6)))
    raw[:, 6] = [-1.0, 1.0, 0.0, 3.0, -7.0]
    out = adapt(space, raw)
    np.testing.assert_allclose(out[:, 6], [0.04, 0.0, 0.02, 0.0, 0.04])


def test_named_joints_are_driven_and_the_others_hold():
    space = ActionSpace.from_dict(
        {
            "kind": "joint_position",
            "policy_dim": 3,
            "indices": [2, 0],
            "joints": ["joint3", "joint1"],
            "units": "rad",
        }
    )
    adapter = ActionAdapter(space, JOINTS)
    out = adapter.to_joint_positions(np.array([[0.7, 9.0, -0.3]]), START, DT_S)
    expected = START.copy()
    expected[[2, 0]] = [-0.3, 0.7]
    np.testing.assert_array_equal(out[0], expected)
    assert adapter.driven_joints == ("joint1", "joint3")


# ------------------------------------------------------------ eef_delta


def _compose(start_pos, start_rot, deltas_pos, deltas_rot, frame):
    pos, rot = start_pos.copy(), start_rot.copy()
    for d_pos, d_rot in zip(deltas_pos, deltas_rot, strict=True):
        if frame == "base":
            pos, rot = pos + d_pos, d_rot @ rot
        else:
            pos, rot = pos + rot @ d_pos, rot @ d_rot
    return pos, rot


@pytest.mark.parametrize("frame", ["base", "end_effector"])
@pytest.mark.parametrize(
    ("d_pos_m", "d_rotvec_rad"),
    [
        ([0.01, 0.0, 0.0], [0.0, 0.0, 0.0]),
        ([0.0, -0.01, 0.005], [0.0, 0.0, 0.03]),
        ([-0.008, 0.006, -0.004], [0.02, -0.02, 0.01]),
    ],
)
def test_eef_delta_reaches_the_start_pose_plus_the_deltas(kin, frame, d_pos_m, d_rotvec_rad):
    space = ActionSpace.from_dict(
        {**LIBERO, "frame": frame, "position_scale_m": 1.0, "rotation_scale_rad": 1.0}
    )
    horizon = 8
    raw = np.zeros((horizon, 32))
    raw[:, :3], raw[:, 3:6], raw[:, 6] = d_pos_m, d_rotvec_rad, -1.0
    out = adapt(space, raw, kinematics=kin)
    start_pos, start_rot = kin.pose(START[:6])
    d_rot = to_matrix(np.array([d_rotvec_rad]), "axis_angle")[0]
    for i in (0, horizon // 2, horizon - 1):
        want_pos, want_rot = _compose(
            start_pos, start_rot, [d_pos_m] * (i + 1), [d_rot] * (i + 1), frame
        )
        pos, quat = kin.forward(out[i, :6])
        np.testing.assert_allclose(pos, want_pos, atol=1e-4)
        assert np.linalg.norm(quat_error(matrix_to_quat(want_rot), quat)) < 1e-3
    np.testing.assert_allclose(out[:, 6], 0.04)  # LIBERO -1: open


def test_eef_delta_scales_libero_actions_as_robosuites_osc(kin):
    raw = np.zeros((3, 32))
    raw[:, 0] = 0.2  # 0.2 * 0.05 m per step
    raw[:, 5] = 5.0  # clamped to 1, times 0.5 rad per step about z
    out = adapt(ActionSpace.from_dict(LIBERO), raw, kinematics=kin)
    start_pos, start_rot = kin.pose(START[:6])
    pos, rot = kin.pose(out[-1, :6])
    np.testing.assert_allclose(pos, start_pos + [0.03, 0.0, 0.0], atol=1e-4)
    want = to_matrix(np.array([[0.0, 0.0, 1.5]]), "axis_angle")[0] @ start_rot
    assert np.linalg.norm(quat_error(matrix_to_quat(want), matrix_to_quat(rot))) < 1e-3


def test_rotation_formats_describe_the_same_rotation():
    rotvec = np.array([0.3, -0.2, 0.5])
    mat = to_matrix(rotvec[None], "axis_angle")[0]
    quat = matrix_to_quat(mat)
    rpy = [
        math.atan2(mat[2, 1], mat[2, 2]),
        -math.asin(mat[2, 0]),
        math.atan2(mat[1, 0], mat[0, 0]),
    ]
    np.testing.assert_allclose(to_matrix(np.array([rpy]), "euler_xyz")[0], mat, atol=1e-12)
    np.testing.assert_allclose(to_matrix(quat[None] * 3.0, "quat_wxyz")[0], mat, atol=1e-12)
    np.testing.assert_allclose(to_matrix(matrix_to_rot6d(mat)[None], "rot6d")[0], mat, atol=1e-12)
    np.testing.assert_allclose(to_matrix(np.zeros((1, 0)), "none")[0], np.eye(3))
    # hand-computed: a quarter turn about z
    quarter = to_matrix(np.array([[0.0, 0.0, math.pi / 2]]), "axis_angle")[0]
    np.testing.assert_allclose(quarter, [[0, -1, 0], [1, 0, 0], [0, 0, 1]], atol=1e-12)
    np.testing.assert_array_equal(to_matrix(np.zeros((1, 3)), "axis_angle")[0], np.eye(3))


@pytest.mark.parametrize("rotation", ["euler_xyz", "quat_wxyz", "rot6d"])
def test_each_rotation_format_gives_the_axis_angle_targets(kin, rotation):
    rotvec = np.array([0.02, -0.01, 0.04])
    mat = to_matrix(rotvec[None], "axis_angle")[0]
    encoded = {
        "euler_xyz": [
            math.atan2(mat[2, 1], mat[2, 2]),
            -math.asin(mat[2, 0]),
            math.atan2(mat[1, 0], mat[0, 0]),
        ],
        "quat_wxyz": matrix_to_quat(mat),
        "rot6d": matrix_to_rot6d(mat),
    }[rotation]
    base = {"kind": "eef_delta", "policy_dim": 12, "frame": "end_effector"}
    reference = ActionSpace.from_dict({**base, "indices": list(range(6)), "rotation": "axis_angle"})
    n = 3 + ROTATION_DIMS[rotation]
    space = ActionSpace.from_dict({**base, "indices": list(range(n)), "rotation": rotation})
    raw_ref, raw = np.zeros((4, 12)), np.zeros((4, 12))
    raw_ref[:, :3] = raw[:, :3] = [0.005, 0.0, -0.005]
    raw_ref[:, 3:6], raw[:, 3:n] = rotvec, encoded
    np.testing.assert_allclose(
        adapt(space, raw, kinematics=kin), adapt(reference, raw_ref, kinematics=kin), atol=1e-6
    )


def test_unreachable_delta_saturates_inside_the_joint_ranges_without_nan(kin):
    space = ActionSpace.from_dict({**LIBERO, "input_limit": None, "position_scale_m": 1.0})
    raw = np.zeros((6, 32))
    raw[:5, 0] = 1.0  # a metre per step: far out of reach
    raw[5, 0] = -0.1  # then back: no wind-up, the arm comes back at once
    out = adapt(space, raw, kinematics=kin)
    assert np.all(np.isfinite(out))
    assert np.all(out[:, :6] >= kin.lower_rad) and np.all(out[:, :6] <= kin.upper_rad)
    reach = [kin.forward(q)[0][0] for q in out[:, :6]]
    assert reach[4] > kin.forward(START[:6])[0][0] + 0.2  # stretched out towards +x
    assert reach[5] < reach[4] - 0.05


def test_kinematics_respects_the_mjcf_joint_ranges(kin):
    model = mujoco.MjModel.from_xml_path(str(share_dir() / "sim" / "tabletop" / "tabletop.xml"))
    for k, name in enumerate(ARM):
        np.testing.assert_allclose([kin.lower_rad[k], kin.upper_rad[k]], model.joint(name).range)


# ------------------------------------------------------------ declarations

BAD_SPACES = [
    ({"kind": "joint_position", "policy_dim": 4, "indices": [0, 4], "units": "rad"}, "outside"),
    ({"kind": "joint_position", "policy_dim": 4, "indices": [1, 1], "units": "rad"}, "once"),
    ({"kind": "joint_position", "policy_dim": 4, "indices": [], "units": "rad"}, "indices"),
    ({"kind": "joint_position", "policy_dim": 0, "indices": [0], "units": "rad"}, "policy_dim"),
    ({"kind": "joint_position", "policy_dim": 4, "indices": [0]}, "needs units"),
    ({"kind": "joint_position", "policy_dim": 4, "indices": [0], "units": "furlong"}, "units"),
    ({"kind": "joint_torque", "policy_dim": 4, "indices": [0]}, "kind"),
    ({"kind": "joint_delta", "policy_dim": 4, "indices": [0], "colour": "red"}, "colour"),
    ({"kind": "joint_delta", "policy_dim": 4, "indices": [0], "units": "normalized"}, "normalized"),
    ({"kind": "joint_delta", "policy_dim": 4, "indices": [0], "scale": 0.0}, "scale"),
    (
        {"kind": "joint_position", "policy_dim": 4, "indices": [0], "units": "rad", "scale": 2},
        "scale",
    ),
    (
        {"kind": "joint_position", "policy_dim": 4, "indices": [0], "units": "normalized"},
        "norm_mode",
    ),
    (
        {
            "kind": "joint_position",
            "policy_dim": 4,
            "indices": [0, 1],
            "units": "normalized",
            "norm_mode": "range_0_100",
            "calibration": [{"min_rad": 0.0, "max_rad": 1.0}],
        },
        "one per index",
    ),
    (
        {
            "kind": "joint_position",
            "policy_dim": 4,
            "indices": [0],
            "units": "normalized",
            "norm_mode": "range_0_100",
            "calibration": [{"min_rad": 1.0, "max_rad": 1.0}],
        },
        "must be below",
    ),
    (
        {
            "kind": "joint_position",
            "policy_dim": 4,
            "indices": [0],
            "units": "deg",
            "norm_mode": "range_0_100",
        },
        "apply to units normalized",
    ),
    (
        {"kind": "joint_delta", "policy_dim": 4, "indices": [0, 1], "joints": ["joint1"]},
        "one to one",
    ),
    ({"kind": "joint_delta", "policy_dim": 4, "indices": [0], "frame": "base"}, "eef_delta fields"),
    ({**LIBERO, "units": "rad"}, "joint-kind fields"),
    ({**LIBERO, "frame": None}, "needs frame"),
    ({**LIBERO, "frame": "camera"}, "frame"),
    ({**LIBERO, "rotation": "rot6d"}, "uses 9 dimensions"),
    ({**LIBERO, "rotation": "quaternion"}, "rotation"),
    ({**LIBERO, "indices": [0, 1, 2, 3, 4, 5, 7, 8, 9], "rotation": "rot6d"}, "rotation_scale_rad"),
    ({**LIBERO, "gripper": {**LIBERO_GRIPPER, "index": 3}}, "also in indices"),
    ({**LIBERO, "gripper": {**LIBERO_GRIPPER, "index": 32}}, "gripper.index"),
    ({**LIBERO, "gripper": {**LIBERO_GRIPPER, "policy_range": [1.0, -1.0]}}, "policy_range"),
    ({**LIBERO, "gripper": {"index": 6}}, "position_range_m"),
]


@pytest.mark.parametrize(("data", "words"), BAD_SPACES)
def test_a_bad_declaration_is_an_action_space_error_naming_the_field(data, words):
    with pytest.raises(ActionSpaceError, match=words):
        ActionSpace.from_dict(data, source="policy/config.yaml: action_space")


def test_a_declaration_that_is_not_a_mapping_is_refused():
    with pytest.raises(ActionSpaceError, match="mapping"):
        ActionSpace.from_dict(["joint_position"])


def test_building_a_bad_space_in_code_is_the_same_named_error():
    with pytest.raises(ActionSpaceError, match="policy_dim"):
        ActionSpace(kind="joint_delta", policy_dim=2, indices=(0, 2))
    with pytest.raises(ActionSpaceError, match=r"gripper = .*policy_range = \[1.0, 1.0\]"):
        gripper = {"index": 1, "policy_range": [1.0, 1.0], "position_range_m": [0.0, 0.04]}
        ActionSpace(kind="joint_delta", policy_dim=2, indices=(0,), gripper=gripper)
    with pytest.raises(ActionSpaceError, match="range_min = 2048, range_max = 2048"):
        JointCalibration.from_lerobot(2048, 2048)


ROUND_TRIP = [
    LIBERO,
    {"kind": "joint_velocity", "policy_dim": 32, "indices": [0, 1, 2, 3, 4, 5], "scale": 3.0},
    {
        "kind": "joint_delta",
        "policy_dim": 8,
        "indices": [1, 0],
        "joints": ["joint2", "joint1"],
        "units": "deg",
    },
    {
        "kind": "joint_position",
        "policy_dim": 6,
        "indices": [0, 1, 2, 3, 4],
        "joints": ["shoulder_pan", "shoulder_lift", "elbow_flex", "wrist_flex", "wrist_roll"],
        "units": "normalized",
        "norm_mode": "range_m100_100",
        "calibration": [{"min_rad": -1.5, "max_rad": 1.5, "inverted": True}] * 5,
        "gripper": {
            "index": 5,
            "policy_range": [0, 100],
            "position_range_m": [0, 0.04],
        },
    },
    {
        **{k: v for k, v in LIBERO.items() if k != "rotation_scale_rad"},
        "indices": [0, 1, 2, 3, 4, 5, 7, 8, 9],
        "rotation": "rot6d",
        "frame": "end_effector",
    },
]


@pytest.mark.parametrize("data", ROUND_TRIP)
def test_to_dict_round_trips(data):
    space = ActionSpace.from_dict(data)
    again = ActionSpace.from_dict(space.to_dict())
    assert again == space
    assert again.to_dict() == space.to_dict()


def test_load_action_space_reads_the_policy_config_section(tmp_path):
    import yaml

    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"architecture": "pi0", "action_space": LIBERO}))
    assert load_action_space(path) == ActionSpace.from_dict(LIBERO)
    path.write_text(yaml.safe_dump({"architecture": "pi0"}))
    with pytest.raises(ActionSpaceError, match="no 'action_space' section"):
        load_action_space(path)
    path.write_text(yaml.safe_dump({"action_space": {**LIBERO, "frame": "camera"}}))
    with pytest.raises(ActionSpaceError, match=r"config.yaml: action_space: frame = 'camera'"):
        load_action_space(path)
    with pytest.raises(ConfigError, match="not found"):
        load_action_space(tmp_path / "missing.yaml")


# ------------------------------------------------------- what the robot cannot do


def test_more_used_dimensions_than_joints_is_refused():
    space = ActionSpace.from_dict(
        {
            "kind": "joint_position",
            "policy_dim": 8,
            "indices": list(range(7)),
            "units": "rad",
            "gripper": {"index": 7, "position_range_m": [0, 0.04]},
        }
    )
    with pytest.raises(ActionSpaceError, match="7 dimensions for the robot's 6 joints"):
        ActionAdapter(space, JOINTS)


def test_fewer_dimensions_than_joints_must_name_the_joints():
    space = ActionSpace.from_dict({"kind": "joint_delta", "policy_dim": 8, "indices": [0, 1, 2]})
    with pytest.raises(ActionSpaceError, match="name the joints they drive in `joints`"):
        ActionAdapter(space, JOINTS)


def test_eef_delta_without_kinematics_is_refused():
    with pytest.raises(ActionSpaceError, match="needs the robot's kinematics"):
        ActionAdapter(ActionSpace.from_dict(LIBERO), JOINTS)


GRIPPER_DELTA = {
    "kind": "joint_delta",
    "policy_dim": 2,
    "indices": [0],
    "joints": ["gripper"],
    "gripper": {"index": 1, "position_range_m": [0, 0.04]},
}


@pytest.mark.parametrize(
    ("data", "joints", "gripper_joint", "words"),
    [
        (LIBERO, ARM, "gripper", "no gripper joint 'gripper'"),
        (LIBERO, JOINTS, "hand", "no gripper joint 'hand'"),
        (LIBERO, ("joint1", "joint2", "gripper"), "gripper", "not robot joints"),
        (LIBERO, (*ARM, "gripper"), "joint6", "'joint6' is an arm joint"),
        (
            {"kind": "joint_delta", "policy_dim": 2, "indices": [0], "joints": ["elbow"]},
            JOINTS,
            "gripper",
            "elbow",
        ),
        (GRIPPER_DELTA, JOINTS, "gripper", "is the gripper, not an arm joint"),
        (
            {"kind": "joint_delta", "policy_dim": 8, "indices": [0]},
            ("joint1", "joint1"),
            None,
            "unique",
        ),
    ],
)
def test_an_action_space_the_robot_cannot_execute_is_refused(
    kin, data, joints, gripper_joint, words
):
    with pytest.raises(ActionSpaceError, match=words):
        ActionAdapter(ActionSpace.from_dict(data), joints, kin, gripper_joint=gripper_joint)


def test_a_robot_without_a_gripper_runs_an_arm_only_space():
    space = ActionSpace.from_dict(
        {"kind": "joint_delta", "policy_dim": 6, "indices": list(range(6))}
    )
    out = ActionAdapter(space, ARM, gripper_joint=None).to_joint_positions(
        np.full((1, 6), 0.1), START[:6], DT_S
    )
    np.testing.assert_allclose(out[0], START[:6] + 0.1)


def test_kinematics_refuses_a_missing_model_site_or_joint(tmp_path):
    mjcf = share_dir() / "sim" / "tabletop" / "tabletop.xml"
    with pytest.raises(AssetNotFoundError, match="not found"):
        Kinematics.from_mjcf(tmp_path / "robot.xml", ARM, "ee")
    with pytest.raises(ActionSpaceError, match="site = 'tool'"):
        Kinematics.from_mjcf(mjcf, ARM, "tool")
    with pytest.raises(ActionSpaceError, match="'elbow'"):
        Kinematics.from_mjcf(mjcf, ("joint1", "elbow"), "ee")
    with pytest.raises(ActionSpaceError, match="not a hinge or slide"):
        Kinematics.from_mjcf(mjcf, ("joint1", "red_block"), "ee")
    with pytest.raises(ActionSpaceError, match="leaves no range"):
        Kinematics.from_mjcf(mjcf, ARM, "ee", limit_margin_rad=2.0)


def test_a_tiny_two_joint_arm_without_ranges_is_unbounded(tmp_path):
    path = tmp_path / "arm.xml"
    path.write_text(
        """<mujoco><worldbody><body><joint name="a" axis="0 0 1"/><geom size="0.02"/>
        <body pos="0.3 0 0"><joint name="b" axis="0 0 1"/><geom size="0.02"/>
        <site name="tip" pos="0.2 0 0"/></body></body></worldbody></mujoco>"""
    )
    kin2 = Kinematics.from_mjcf(path, ("a", "b"), "tip")
    assert np.all(np.isinf(kin2.lower_rad)) and np.all(np.isinf(kin2.upper_rad))
    pos, _ = kin2.pose(np.array([math.pi / 2, 0.0]))
    np.testing.assert_allclose(pos, [0.0, 0.5, 0.0], atol=1e-12)


# --------------------------------------------------------------- bad chunks


@pytest.mark.parametrize(
    ("raw", "start", "dt_s", "error", "words"),
    [
        (np.zeros((3, 7)), START, DT_S, JointMismatchError, "policy_dim = 8"),
        (np.zeros(8), START, DT_S, JointMismatchError, "shape"),
        (np.zeros((0, 8)), START, DT_S, EmptyChunkError, "no steps"),
        (
            raw_chunk([[0, 0, math.nan, 0, 0, 0]] * 2),
            START,
            DT_S,
            NonFiniteChunkError,
            "step 0 dimension 2",
        ),
        (
            raw_chunk([[0, 0, 0, 0, 0, 0], [0, math.inf, 0, 0, 0, 0]]),
            START,
            DT_S,
            NonFiniteChunkError,
            "step 1",
        ),
        (np.zeros((2, 8)), START[:6], DT_S, InvalidObservationError, "start_positions shape"),
        (np.zeros((2, 8)), np.r_[START[:6], math.nan], DT_S, InvalidObservationError, "non-finite"),
        (np.zeros((2, 8)), START, 0.0, NonMonotonicChunkError, "dt_action_s = 0.0"),
        (np.zeros((2, 8)), START, math.nan, NonFiniteChunkError, "dt_action_s"),
        (raw_chunk([[1e308, 0, 0, 0, 0, 0]] * 3), START, 1.0, NonFiniteChunkError, "joint1"),
    ],
)
def test_a_bad_chunk_is_a_named_error(raw, start, dt_s, error, words):
    space = joint_space(kind="joint_velocity")
    with pytest.raises(error, match=words):
        adapt(space, raw, start=start, dt_s=dt_s)


@pytest.mark.parametrize(
    ("rotation", "zero"), [("quat_wxyz", [0, 0, 0, 0]), ("rot6d", [1, 0, 0, 2, 0, 0])]
)
def test_a_rotation_that_names_no_rotation_is_refused(kin, rotation, zero):
    n = 3 + ROTATION_DIMS[rotation]
    space = ActionSpace.from_dict(
        {
            "kind": "eef_delta",
            "policy_dim": n,
            "indices": list(range(n)),
            "frame": "base",
            "rotation": rotation,
        }
    )
    raw = np.zeros((2, n))
    raw[:, 3:] = zero
    with pytest.raises(NonFiniteChunkError, match=f"step 0 rotation .*{rotation}"):
        adapt(space, raw, kinematics=kin)


# ------------------------------------------------------------- properties

CALIBRATION = [
    {"min_rad": -2.0 + 0.3 * k, "max_rad": -1.0 + 0.5 * k, "inverted": k % 2 == 1} for k in range(6)
]
JOINT_SPACES = [
    {"kind": "joint_position", "units": "rad"},
    {"kind": "joint_position", "units": "deg"},
    *(
        {
            "kind": "joint_position",
            "units": "normalized",
            "norm_mode": mode,
            "calibration": CALIBRATION,
        }
        for mode in ("range_m100_100", "range_0_100", "range_m1_1")
    ),
    {"kind": "joint_delta", "units": "deg", "scale": 10.0},
    {"kind": "joint_velocity", "scale": 1e3},
]
ANY_FLOAT = st.floats(allow_nan=True, allow_infinity=True, width=64)


ADAPTERS = [
    ActionAdapter(
        joint_space(
            **fields,
            gripper={"index": 7, "policy_range": [-1, 1], "position_range_m": [0.04, 0.0]},
        ),
        JOINTS,
    )
    for fields in JOINT_SPACES
]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    which=st.integers(0, len(ADAPTERS) - 1),
    raw=hnp.arrays(np.float64, st.tuples(st.integers(0, 6), st.just(8)), elements=ANY_FLOAT),
    dt_s=st.floats(1e-3, 1.0),
)
def test_joint_kinds_never_output_a_non_finite_target(which, raw, dt_s):
    adapter = ADAPTERS[which]
    space = adapter.space
    try:
        out = adapter.to_joint_positions(raw, START, dt_s)
    except (NonFiniteChunkError, EmptyChunkError):
        assert raw.shape[0] == 0 or not np.all(np.isfinite(raw)) or space.kind != "joint_position"
        return
    assert np.all(np.isfinite(out))
    assert np.all((out[:, 6] >= 0.0) & (out[:, 6] <= 0.04))
    if space.units == "normalized":
        lo = np.array([c["min_rad"] for c in CALIBRATION])
        hi = np.array([c["max_rad"] for c in CALIBRATION])
        assert np.all((out[:, :6] >= lo) & (out[:, :6] <= hi))


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    raw=hnp.arrays(np.float64, (3, 32), elements=st.floats(-1e6, 1e6, width=64)),
    frame=st.sampled_from(["base", "end_effector"]),
)
def test_eef_delta_never_outputs_a_non_finite_or_out_of_range_target(kin, raw, frame):
    space = ActionSpace.from_dict({**LIBERO, "frame": frame, "input_limit": None})
    out = adapt(space, raw, kinematics=kin)
    assert np.all(np.isfinite(out))
    assert np.all(out[:, :6] >= kin.lower_rad) and np.all(out[:, :6] <= kin.upper_rad)


def test_every_adapter_error_is_a_vla_edge_error():
    for error in (
        ActionSpaceError,
        NonFiniteChunkError,
        JointMismatchError,
        InvalidObservationError,
    ):
        assert issubclass(error, VlaEdgeError)
    assert issubclass(ActionSpaceError, ConfigError)
