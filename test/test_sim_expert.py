"""Scripted expert: IK accuracy, chunk format, and one solved episode per task."""

import numpy as np
import pytest

from vla_edge.core.errors import InvalidObservationError
from vla_edge.core.types import Observation
from vla_edge.runners.base import Runner
from vla_edge.sim.collect import rollout_expert
from vla_edge.sim.env import JOINT_NAMES, TabletopEnv
from vla_edge.sim.expert import ScriptedExpert, hand_yaw_rad, nearest_equivalent
from vla_edge.sim.expert_runner import ExpertRunner
from vla_edge.sim.ik import ArmIK, quat_error, yaw_down_quat
from vla_edge.sim.tasks import BLOCK_HALF_M, HOME_ARM_QPOS_RAD, list_tasks


@pytest.fixture(scope="module")
def env():
    e = TabletopEnv(image_height=16, image_width=16)
    yield e
    e.close()


def test_ik_reaches_a_downward_pose_across_the_workspace(env):
    ik = ArmIK(env.model)
    for x, y, z, yaw in [(0.38, -0.2, 0.02, 0.5), (0.64, 0.2, 0.02, -0.7), (0.5, 0.0, 0.15, 1.2)]:
        q, err_m = ik.solve(np.array([x, y, z]), yaw_down_quat(yaw), HOME_ARM_QPOS_RAD)
        pos, quat = ik.forward(q)
        assert err_m < 1e-3
        np.testing.assert_allclose(pos, [x, y, z], atol=1e-3)
        assert np.linalg.norm(quat_error(yaw_down_quat(yaw), quat)) < 5e-3
        assert hand_yaw_rad(quat) == pytest.approx(yaw, abs=5e-3)
        assert np.all(q >= ik.lower_rad) and np.all(q <= ik.upper_rad)


def test_nearest_equivalent_angle_respects_the_period():
    assert nearest_equivalent(0.1, 1.5, np.pi / 2) == pytest.approx(0.1 + np.pi / 2)
    assert nearest_equivalent(0.1, -0.2, np.pi / 2) == pytest.approx(0.1)


def test_expert_runner_returns_a_chunk_stamped_with_the_observation(env):
    runner = ExpertRunner(env)
    assert isinstance(runner, Runner)
    obs = env.reset("pick_red_block_into_bowl", 0)
    chunk = runner.infer(obs)
    assert chunk.t_obs_s == obs.stamp_s == 0.0
    assert chunk.positions.shape == (10, 7)
    assert chunk.dt_action_s == 0.1
    assert chunk.joint_names == JOINT_NAMES
    assert "expert" in chunk.timings_ms
    # step 0 is the target at the observation time: where the arm already is
    np.testing.assert_allclose(chunk.positions[0, :6], obs.state[:6], atol=2e-3)
    # moderate joint speeds between steps
    speeds = np.abs(np.diff(chunk.positions[:, :6], axis=0)) / 0.1
    assert speeds.max() < 1.2


def test_expert_runner_rejects_a_malformed_state(env):
    runner = ExpertRunner(env)
    env.reset("pick_red_block_into_bowl", 0)
    bad = Observation(stamp_s=0.0, images={}, state=np.full(7, np.nan), instruction="x")
    with pytest.raises(InvalidObservationError, match="obs.state"):
        runner.infer(bad)
    short = Observation(stamp_s=0.0, images={}, state=np.zeros(6), instruction="x")
    with pytest.raises(InvalidObservationError, match="7 finite values"):
        runner.infer(short)


def test_consecutive_chunks_agree_on_the_shared_timeline(env):
    runner = ExpertRunner(env)
    obs = env.reset("put_blue_block_on_plate", 2)
    first = runner.infer(obs)
    for k in range(10):
        for _ in range(3):
            env.step(first.positions[min(k + 1, 9)])
    later = runner.infer(env.observe(render=False))
    # the later chunk starts 0.3 s in: its steps match the first chunk's steps 3..9
    assert later.t_obs_s == pytest.approx(0.3)
    np.testing.assert_allclose(later.positions[:7], first.positions[3:], atol=5e-3)


@pytest.mark.parametrize("task", list_tasks())
def test_expert_solves_one_episode_of_each_task_without_penetration(env, task):
    runner = ExpertRunner(env)
    episode = rollout_expert(env, runner, task, 0, split="eval", render=False)
    assert episode.success, task
    assert episode.penetrating_contacts == 0
    assert episode.max_joint_speed_rad_per_s < 1.5
    assert episode.duration_s < env.task.budget_s


@pytest.mark.parametrize("init_state_id", [15, 39, 3])
def test_push_turns_the_hand_at_most_a_quarter_turn_and_lands_clear_of_the_block(
    env, init_state_id
):
    # eval init states 15 and 39 push at about 90 degrees from the start heading,
    # 3 at about -69: the pads' side and the fingers' edges push alike
    env.reset("push_blue_block_to_target", init_state_id, split="eval")
    expert = ScriptedExpert(env)
    expert.reset()
    scene = env.scene_state()
    segments = {seg.label: seg for seg in expert.plan(scene)}
    _, start_quat = env.ee_pose()
    turn_rad = segments["push"].yaw1_rad - hand_yaw_rad(start_quat)
    assert abs(turn_rad) <= np.pi / 4.0 + 1e-9
    block_xy = scene.positions_m["blue_block"][:2]
    landing_m = np.linalg.norm(segments["descend"].pos1_m[:2] - block_xy)
    # block half-width + finger half-width + the clearance the policy's error needs
    assert landing_m >= BLOCK_HALF_M + 0.011 + 0.025
    episode = rollout_expert(
        env,
        ExpertRunner(env),
        "push_blue_block_to_target",
        init_state_id,
        split="eval",
        render=False,
    )
    assert episode.success
