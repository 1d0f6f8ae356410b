"""Recovery episodes: the expert takes over from a policy mid-episode and is recorded."""

import h5py
import numpy as np
import pytest

from vla_edge.archs.bundled.data import load_episodes
from vla_edge.cli import main
from vla_edge.core.types import ActionChunk
from vla_edge.runners.base import RunnerSpec
from vla_edge.sim.collect import rollout_recovery, write_episode
from vla_edge.sim.env import CAMERAS, JOINT_NAMES, TabletopEnv
from vla_edge.sim.expert import GRIP_CLOSED_CMD_M, GRIP_OPEN_CMD_M, PRE_GRASP_Z_M
from vla_edge.sim.expert_runner import ExpertRunner
from vla_edge.sim.tasks import OBJECTS


class _SwayRunner:
    """A small synthetic driving policy: turns the base joint steadily, whatever it sees.

    The recovery test needs a policy that leaves the arm somewhere the expert
    did not plan from; a trained policy's behaviour on one init state is not
    something a test should depend on.
    """

    STEP_RAD = 0.02

    def __init__(self, env):
        self.spec = RunnerSpec(
            JOINT_NAMES, 10, 0.1, tuple(env.cameras), env.image_height, env.image_width
        )

    def infer(self, obs, noise=None, prefix_actions=None, prefix_len=0):
        steps = np.arange(1, self.spec.chunk_horizon + 1)[:, None]
        positions = np.repeat(np.asarray(obs.state, dtype=np.float64)[None], len(steps), 0)
        positions[:, 0] += self.STEP_RAD * steps[:, 0]
        return ActionChunk(obs.stamp_s, self.spec.dt_action_s, JOINT_NAMES, positions)

    def close(self):
        pass


@pytest.fixture(scope="module")
def env():
    e = TabletopEnv(image_height=64, image_width=64, split="train")
    yield e
    e.close()


def _drive_expert_until_lifted(env, task, init_state_id):
    """Run the expert until the task's object is held 5 cm above its start."""
    runner = ExpertRunner(env)
    obs = env.reset(task, init_state_id, split="train")
    z0 = env.scene_state().positions_m[env.task.obj][2]
    for _ in range(200):
        chunk = runner.infer(obs)
        for j in range(10):
            env.step(chunk.positions[0] + (j + 1) / 10 * (chunk.positions[1] - chunk.positions[0]))
        obs = env.observe(render=False)
        if env.scene_state().positions_m[env.task.obj][2] > z0 + 0.05:
            return obs
    raise AssertionError("the expert never lifted the object")


def test_take_over_with_the_object_in_hand_carries_it_on(env):
    obs = _drive_expert_until_lifted(env, "pick_red_block_into_bowl", 3)
    fresh = ExpertRunner(env)
    fresh.expert.take_over()
    chunk = fresh.infer(obs)
    # the fingers never open: they squeeze from the measured opening to closed
    assert np.all(np.diff(chunk.positions[:, 6]) <= 1e-9)
    assert chunk.positions[0, 6] <= obs.state[6] + 1e-6
    for _ in range(200):
        for j in range(10):
            env.step(chunk.positions[0] + (j + 1) / 10 * (chunk.positions[1] - chunk.positions[0]))
        if env.success():
            break
        chunk = fresh.infer(env.observe(render=False))
    assert env.success()
    assert fresh.expert.replans == 0  # no re-grasp was needed

    # a plain reset at the same kind of state plans a new grasp: it opens the fingers
    obs = _drive_expert_until_lifted(env, "pick_red_block_into_bowl", 3)
    planner = ExpertRunner(env)
    planner.expert.reset()
    regrasp = planner.infer(obs)
    assert regrasp.positions[:, 6].max() > 0.5 * GRIP_OPEN_CMD_M


def test_take_over_starts_moving_at_once_while_reset_dwells(env):
    obs = env.reset("lift_green_block", 1, split="train")
    dwelling = ExpertRunner(env)
    dwelling.expert.reset()
    still = dwelling.infer(obs).positions
    np.testing.assert_allclose(still[1], still[0], atol=1e-6)
    moving = ExpertRunner(env)
    moving.expert.take_over()
    first = moving.infer(obs).positions
    assert np.max(np.abs(first[2] - first[0])) > 1e-3


def _drive_expert_until(env, task, init_state_id, reached):
    obs = env.reset(task, init_state_id, split="train")
    runner = ExpertRunner(env)
    for _ in range(100):
        chunk = runner.infer(obs)
        for j in range(10):
            env.step(chunk.positions[0] + (j + 1) / 10 * (chunk.positions[1] - chunk.positions[0]))
        obs = env.observe(render=False)
        ee, _ = env.ee_pose()
        if reached(ee, env.scene_state().positions_m[env.task.obj]):
            return obs, ee
    raise AssertionError("the expert never reached the state")


def test_take_over_at_the_approach_point_descends_without_a_pause(env):
    """A hand hovering where the approach ends goes straight on down.

    The approach's minimum duration would hold it there for 0.8 s: recorded, that
    pause teaches a policy to hover.
    """
    obs, _ = _drive_expert_until(
        env,
        "lift_green_block",
        2,
        lambda ee, obj: (
            np.linalg.norm(ee[:2] - obj[:2]) < 0.01 and abs(ee[2] - PRE_GRASP_Z_M) < 0.01
        ),
    )
    fresh = ExpertRunner(env)
    fresh.expert.take_over()
    fresh.infer(obs)
    approach, descend = fresh.expert.plan()[:2]
    assert (approach.label, descend.label) == ("approach", "descend")
    assert approach.t1_s - approach.t0_s <= 0.2 + 1e-9
    # a plain reset keeps the minimum durations
    fresh.expert.reset()
    fresh.infer(obs)
    first_move = [s for s in fresh.expert.plan() if s.label == "approach"][0]
    assert first_move.t1_s - first_move.t0_s >= 0.8 - 1e-9


def test_take_over_halfway_down_goes_on_down(env):
    """Taken over halfway down to the block, the hand does not climb back up first."""
    obs, ee = _drive_expert_until(
        env,
        "pick_green_block_into_bowl",
        4,
        lambda ee, obj: np.linalg.norm(ee[:2] - obj[:2]) < 0.005 and ee[2] < PRE_GRASP_Z_M - 0.03,
    )
    fresh = ExpertRunner(env)
    fresh.expert.take_over()
    fresh.infer(obs)
    approach, descend = fresh.expert.plan()[:2]
    assert approach.pos1_m[2] == pytest.approx(ee[2], abs=1e-6)
    assert descend.pos1_m[2] < approach.pos1_m[2]
    # a plain reset at the same state climbs to the approach height
    fresh.expert.reset()
    fresh.infer(obs)
    climb = [s for s in fresh.expert.plan() if s.label == "approach"][0]
    assert climb.pos1_m[2] == pytest.approx(PRE_GRASP_Z_M)


def test_take_over_of_a_moving_hand_starts_at_its_velocity(env):
    """The plan leaves the hand's pose at the hand's measured velocity and ends at rest."""
    obs, _ = _drive_expert_until(
        env, "put_blue_block_on_plate", 5, lambda ee, obj: np.linalg.norm(env.ee_velocity()) > 0.05
    )
    v = env.ee_velocity()
    fresh = ExpertRunner(env)
    fresh.expert.take_over()
    fresh.infer(obs)
    first = fresh.expert.plan()[0]
    dt = 1e-4
    p0 = first.sample(first.t0_s)[0]
    v0 = (first.sample(first.t0_s + dt)[0] - p0) / dt
    np.testing.assert_allclose(p0, env.ee_pose()[0], atol=1e-9)
    np.testing.assert_allclose(v0, v, atol=0.01 * np.linalg.norm(v))
    end = first.sample(first.t1_s)[0]
    v1 = (end - first.sample(first.t1_s - dt)[0]) / dt
    np.testing.assert_allclose(end, first.pos1_m, atol=1e-9)
    assert np.linalg.norm(v1) < 1e-3
    # a plain reset starts the same plan from rest
    fresh.expert.reset()
    fresh.infer(obs)
    rest = [s for s in fresh.expert.plan() if s.t1_s > s.t0_s + 1e-9][0]
    assert not np.any(rest.vel0_m_s)


def test_recovery_episode_starts_at_the_hand_over_and_reads_back_its_layout(env, tmp_path):
    policy = _SwayRunner(env)
    expert = ExpertRunner(env)
    start = env.reset("push_blue_block_to_target", 7, split="train").state.copy()
    episode = rollout_recovery(env, expert, policy, "push_blue_block_to_target", 7, handover_s=2.0)
    assert episode.success
    assert episode.handover_s == pytest.approx(2.0)
    # the expert took over where the policy left the arm, not at the init state
    assert episode.states[0][0] - start[0] > 0.1
    # the first recorded observation is the scene the policy left, not the init state
    assert set(episode.scene_xy) == {*OBJECTS, "target"}
    assert len(episode.actions) == len(episode.states) == len(episode.images[CAMERAS[0]])
    np.testing.assert_allclose(episode.actions[0][:6], episode.states[0][:6], atol=2e-3)

    path = tmp_path / "push_blue_block_to_target.hdf5"
    with h5py.File(path, "w") as f:
        write_episode(f.create_group("data").create_group("demo_0"), episode, seed=0)
    with h5py.File(path, "r") as f:
        assert f["data/demo_0"].attrs["handover_s"] == pytest.approx(2.0)
    (read,) = load_episodes(path, list(CAMERAS), (64, 64), 7)
    expected = np.concatenate([episode.scene_xy[name] for name in (*OBJECTS, "target")])
    np.testing.assert_allclose(read.layout_xy, expected, atol=1e-6)
    goal = np.concatenate([episode.scene_xy["blue_block"], episode.scene_xy["target"]])
    np.testing.assert_allclose(read.goal_xy, goal, atol=1e-6)


def test_collect_refuses_a_reversed_hand_over_range(tmp_path):
    with pytest.raises(SystemExit, match="handover_range_s"):
        main(
            [
                "collect", "--episodes-per-task", "1", "--out", str(tmp_path / "r"),
                "--tasks", "lift_green_block", "--recover-with", "bundled",
                "--handover-s", "3", "1", "--no-progress",
            ]
        )  # fmt: skip
    assert not (tmp_path / "r").exists()


def test_take_over_never_commands_an_opening_outside_the_command_range(env):
    # closed on nothing, the fingers squeeze past zero: the plan starts at the closed command
    env.reset("lift_green_block", 2, split="train")
    closed = np.concatenate([env.state()[:6], [-0.01]])
    for _ in range(100):
        env.step(closed)
    assert env.state()[6] < GRIP_CLOSED_CMD_M
    runner = ExpertRunner(env)
    runner.expert.take_over()
    chunk = runner.infer(env.observe(render=False))
    assert np.all(chunk.positions[:, 6] >= GRIP_CLOSED_CMD_M - 1e-12)
    assert np.all(chunk.positions[:, 6] <= GRIP_OPEN_CMD_M + 1e-12)
