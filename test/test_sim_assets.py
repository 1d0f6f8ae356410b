"""The tabletop MJCF agrees with the configs and is found where it is installed."""

from pathlib import Path

import mujoco
import pytest

from vla_edge.config import paths
from vla_edge.config.loader import load_node_params
from vla_edge.config.models import SafetyConfig, SimConfig
from vla_edge.core.errors import AssetNotFoundError

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def model() -> mujoco.MjModel:
    return mujoco.MjModel.from_xml_path(str(paths.scene_xml_path("tabletop")))


@pytest.fixture(scope="module")
def safety() -> SafetyConfig:
    return load_node_params(REPO / "config" / "safety.yaml", "safety_node", SafetyConfig)


def test_arm_joint_ranges_equal_safety_position_limits(model, safety):
    for name in safety.joint_names[:6]:
        limits = safety.joints[name]
        lo, hi = model.joint(name).range
        assert (lo, hi) == (limits.position_min, limits.position_max), name
        act = model.actuator(name)
        assert tuple(act.ctrlrange) == (limits.position_min, limits.position_max)


def test_gripper_opening_range_equals_safety_limits(model, safety):
    assert safety.joint_names[6] == "gripper"
    lo, hi = model.tendon_range[model.tendon("gripper").id]
    gripper = safety.joints["gripper"]
    assert (lo, hi) == (gripper.position_min, gripper.position_max) == (0.0, 0.04)
    assert tuple(model.actuator("gripper").ctrlrange) == (0.0, 0.04)
    # each finger travels half the opening
    for finger in ("finger_left", "finger_right"):
        assert tuple(model.joint(finger).range) == (0.0, 0.02)


def test_physics_runs_at_500_hz_with_both_cameras(model):
    assert model.opt.timestep == pytest.approx(0.002)
    for cam in ("agentview", "wrist"):
        assert mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, cam) >= 0


def test_scene_holds_the_default_task_objects(model):
    sim = load_node_params(REPO / "config" / "sim.yaml", "sim_node", SimConfig)
    assert sim.task == "pick_red_block_into_bowl"
    for body in ("table", "red_block", "green_block", "blue_block", "bowl", "plate", "target"):
        assert mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, body) >= 0
    # actuators in action order: joint1..joint6 then gripper
    names = [model.actuator(i).name for i in range(model.nu)]
    assert names == ["joint1", "joint2", "joint3", "joint4", "joint5", "joint6", "gripper"]


def test_asset_dir_override_is_used(tmp_path, monkeypatch):
    (tmp_path / "tabletop").mkdir()
    xml = tmp_path / "tabletop" / "tabletop.xml"
    xml.write_text("<mujoco/>")
    monkeypatch.setenv(paths.ASSET_DIR_ENV, str(tmp_path))
    assert paths.scene_xml_path("tabletop") == xml


def test_unknown_suite_raises_asset_not_found():
    with pytest.raises(AssetNotFoundError, match="suite = 'no_such_suite'"):
        paths.scene_xml_path("no_such_suite")
