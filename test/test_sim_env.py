"""TabletopEnv: reset determinism, stepping, observations, bad input, contact counting."""

import numpy as np
import pytest

from vla_edge.core.errors import (
    ConfigError,
    InitStateOutOfRangeError,
    InvalidActionError,
    UnknownTaskError,
)
from vla_edge.sim.env import JOINT_NAMES, TabletopEnv
from vla_edge.sim.tasks import BLOCK_HALF_M, BOWL_FLOOR_TOP_M, OBJECTS


@pytest.fixture(scope="module")
def env():
    e = TabletopEnv(image_height=32, image_width=32)
    yield e
    e.close()


def test_same_init_state_gives_identical_poses_and_first_image(env):
    first = env.reset("stack_red_on_green", 3)
    poses = env.scene_state()
    for _ in range(20):
        env.step(env.state())
    second = env.reset("stack_red_on_green", 3)
    again = env.scene_state()
    for name in OBJECTS:
        np.testing.assert_array_equal(poses.positions_m[name], again.positions_m[name])
        np.testing.assert_array_equal(poses.quats[name], again.quats[name])
    for cam in ("agentview", "wrist"):
        np.testing.assert_array_equal(first.images[cam], second.images[cam])
    np.testing.assert_array_equal(first.state, second.state)
    assert second.stamp_s == 0.0


def test_different_init_states_look_different(env):
    a = env.reset("pick_red_block_into_bowl", 0).images["agentview"]
    b = env.reset("pick_red_block_into_bowl", 1).images["agentview"]
    assert np.abs(a.astype(int) - b.astype(int)).sum() > 0


def test_observation_has_both_cameras_state_and_instruction(env):
    obs = env.reset("lift_green_block", 0)
    assert set(obs.images) == {"agentview", "wrist"}
    for img in obs.images.values():
        assert img.shape == (32, 32, 3) and img.dtype == np.uint8
    assert obs.state.shape == (7,)
    assert obs.instruction == "lift the green block"
    assert 0.035 <= obs.state[6] <= 0.04
    assert env.observe(render=False).images == {}


def test_paraphrase_can_replace_the_instruction(env):
    obs = env.reset("lift_green_block", 0, instruction="raise the green block off the table")
    assert obs.instruction == "raise the green block off the table"


def test_step_advances_one_control_period_and_tracks_targets(env):
    env.reset("pick_red_block_into_bowl", 0)
    start = env.state()
    target = start.copy()
    target[0] += 0.1
    target[6] = 0.01
    for _ in range(100):
        env.step(target)
    assert env.time_s == pytest.approx(1.0)
    assert env.state()[0] == pytest.approx(target[0], abs=5e-3)
    assert env.state()[6] == pytest.approx(0.01, abs=2e-3)


@pytest.mark.parametrize(
    ("action", "words"),
    [
        (np.zeros(6), "shape = (6,)"),
        (np.zeros((7, 1)), "shape = (7, 1)"),
        (np.array([0, 0, np.nan, 0, 0, 0, 0.02]), "[2] (joint3) = nan"),
        (np.array([0, 0, 0, 0, 0, 0, np.inf]), "[6] (gripper) = inf"),
    ],
)
def test_bad_action_is_rejected_before_the_physics(env, action, words):
    env.reset("pick_red_block_into_bowl", 0)
    env.step(env.state())
    qpos = env.data.qpos.copy()
    with pytest.raises(InvalidActionError) as info:
        env.step(action)
    assert words in str(info.value)
    assert env.time_s == pytest.approx(0.01)
    np.testing.assert_array_equal(env.data.qpos, qpos)


def test_unknown_task_and_out_of_range_init_state_are_named_errors(env):
    env.reset("pick_red_block_into_bowl", 0)
    env.step(env.state())
    with pytest.raises(UnknownTaskError, match="task = 'juggle'"):
        env.reset("juggle", 0)
    with pytest.raises(InitStateOutOfRangeError, match="init_state_id = 50"):
        env.reset("pick_red_block_into_bowl", 50)
    assert env.time_s == pytest.approx(0.01)  # untouched


def test_success_follows_object_poses(env):
    env.reset("pick_red_block_into_bowl", 0)
    assert not env.success()
    bowl = env.scene_state().positions_m["bowl"]
    adr = env.model.joint("red_block").qposadr[0]
    env.data.qpos[adr : adr + 3] = [bowl[0], bowl[1], BOWL_FLOOR_TOP_M + BLOCK_HALF_M + 0.001]
    env.data.qpos[adr + 3 : adr + 7] = [1, 0, 0, 0]
    for _ in range(20):
        env.step(env.state())
    assert env.success()


def test_driving_the_arm_into_the_table_counts_penetrating_contacts(env):
    env.reset("lift_green_block", 0)
    for _ in range(30):
        env.step(env.state())
    assert env.penetrating_contacts() == 0
    # shoulder forward and elbow straight: the arm swings down through the table
    target = env.state()
    target[1], target[2] = 1.8, 0.3
    for _ in range(150):
        env.step(target)
    assert env.penetrating_contacts() > 0
    env.reset("lift_green_block", 0)
    assert env.penetrating_contacts() == 0


def test_joint_names_follow_the_interfaces():
    assert JOINT_NAMES == ("joint1", "joint2", "joint3", "joint4", "joint5", "joint6", "gripper")


@pytest.mark.parametrize("side", [128, 224])
def test_larger_resolutions_render(side):
    env = TabletopEnv(image_height=side, image_width=side, cameras=("wrist",))
    obs = env.reset("pick_red_block_into_bowl", 0)
    assert obs.images["wrist"].shape == (side, side, 3)
    assert obs.images["wrist"].std() > 5
    env.close()


def test_a_third_camera_sees_the_table_from_the_side():
    """``side`` (three-camera configurations) renders its own view; unknown names are refused."""
    env = TabletopEnv(image_height=32, image_width=32, cameras=("agentview", "wrist", "side"))
    try:
        obs = env.reset("stack_red_on_green", 0)
        assert set(obs.images) == {"agentview", "wrist", "side"}
        side = obs.images["side"].astype(int)
        assert side.std() > 5
        assert np.abs(side - obs.images["agentview"]).mean() > 5
    finally:
        env.close()
    with pytest.raises(ConfigError, match=r"'top'.*'agentview', 'side'"):
        TabletopEnv(image_height=32, image_width=32, cameras=("agentview", "top"))
