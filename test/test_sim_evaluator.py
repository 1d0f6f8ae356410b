"""The closed-loop evaluator: real env, real controller and safety cores, virtual time."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from vla_edge.core.errors import ConfigError, NonFiniteChunkError
from vla_edge.core.types import ActionChunk, Observation
from vla_edge.runners.base import RunnerSpec
from vla_edge.sim.env import TabletopEnv
from vla_edge.sim.evaluator import EvalSettings, evaluate, wilson_interval
from vla_edge.sim.expert_runner import ExpertRunner
from vla_edge.sim.tasks import get_task

JOINTS = ("joint1", "joint2", "joint3", "joint4", "joint5", "joint6", "gripper")


class StandStillRunner:
    """A policy that always asks the arm to stay where it is: it can never succeed."""

    def __init__(self) -> None:
        self.spec = RunnerSpec(JOINTS, 10, 0.1, ("agentview", "wrist"), 32, 32)
        self.calls = 0
        self.noises: list[np.ndarray] = []

    def infer(self, obs: Observation, noise=None, prefix_actions=None, prefix_len=0):
        self.calls += 1
        self.noises.append(np.array(noise))
        positions = np.repeat(np.asarray(obs.state, dtype=np.float64)[None], 10, axis=0)
        return ActionChunk(obs.stamp_s, 0.1, JOINTS, positions)

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def env() -> TabletopEnv:
    return TabletopEnv(image_height=32, image_width=32)


def test_deliberately_failing_policy_scores_zero(env, configs):
    runner = StandStillRunner()
    task = get_task("lift_green_block")
    short = dataclasses.replace(task, budget_s=1.5)
    result = evaluate(
        env, lambda _env: runner, [short], 2, EvalSettings(), *configs, policy_name="still"
    )
    entry = result["tasks"]["lift_green_block"]
    assert entry["successes"] == 0
    assert entry["success_rate"] == 0.0
    assert entry["episodes"] == 2
    assert result["mean_success"] == 0.0
    assert entry["wilson_95"][0] == 0.0 and entry["wilson_95"][1] > 0.3
    assert runner.calls > 2  # it kept being asked for chunks


class NanOutputRunner(StandStillRunner):
    """A policy whose output is never finite: the runner refuses it by name."""

    def infer(self, obs: Observation, noise=None, prefix_actions=None, prefix_len=0):
        self.calls += 1
        raise NonFiniteChunkError("chunk positions hold NaN")


def test_runner_refusing_its_own_output_counts_as_a_rejected_chunk(env, configs):
    runner = NanOutputRunner()
    task = dataclasses.replace(get_task("lift_green_block"), budget_s=1.0)
    result = evaluate(
        env, lambda _env: runner, [task], 1, EvalSettings(), *configs, policy_name="nan"
    )
    assert result["tasks"]["lift_green_block"]["successes"] == 0
    assert result["safety"]["chunk_rejections"] == runner.calls > 1


class OutOfLimitsRunner(StandStillRunner):
    """Finite chunks the controller refuses on arrival: the gripper below its range."""

    def infer(self, obs: Observation, noise=None, prefix_actions=None, prefix_len=0):
        chunk = super().infer(obs, noise, prefix_actions, prefix_len)
        positions = chunk.positions.copy()
        positions[:, -1] = -0.01
        return dataclasses.replace(chunk, positions=positions)


def test_refused_chunks_at_delay_zero_are_asked_for_again_only_on_the_next_tick(env, configs):
    runner = OutOfLimitsRunner()
    task = dataclasses.replace(get_task("lift_green_block"), budget_s=0.5)
    result = evaluate(
        env, lambda _env: runner, [task], 1, EvalSettings(), *configs, policy_name="refused"
    )
    ticks = round(0.5 * configs[0].rate_hz)
    # every chunk refused, one request per 10 ms tick, and the episode ends on time
    assert result["safety"]["chunk_rejections"] == runner.calls == ticks
    assert result["tasks"]["lift_green_block"]["successes"] == 0


def test_expert_solves_a_task_through_controller_and_safety(env, configs):
    result = evaluate(
        env,
        ExpertRunner,
        [get_task("lift_green_block")],
        1,
        EvalSettings(delay_s=0.2, merge="prefix"),
        *configs,
        policy_name="expert",
    )
    assert result["tasks"]["lift_green_block"]["successes"] == 1
    assert result["safety"]["penetrating_contacts"] == 0
    assert result["settings"]["delay_ms"] == pytest.approx(200.0)
    assert result["settings"]["merge"] == "prefix"
    assert set(result) >= {"suite", "policy", "tasks", "mean_success", "safety", "settings"}


def test_sync_scheme_waits_for_each_chunk_and_is_slower(env, configs):
    times = {}
    for scheme in ("async", "sync"):
        result = evaluate(
            env,
            ExpertRunner,
            [get_task("lift_green_block")],
            1,
            EvalSettings(delay_s=0.3, merge="replace", scheme=scheme),
            *configs,
            policy_name="expert",
        )
        assert result["tasks"]["lift_green_block"]["successes"] == 1
        times[scheme] = result["tasks"]["lift_green_block"]["mean_completion_time_s"]
    assert times["sync"] > times["async"]


def test_wilson_interval_matches_known_values():
    lo, hi = wilson_interval(45, 50)
    assert lo == pytest.approx(0.7864, abs=1e-3)
    assert hi == pytest.approx(0.9565, abs=1e-3)
    assert wilson_interval(0, 0) == (0.0, 1.0)


def test_bad_settings_are_named():
    with pytest.raises(ConfigError, match="scheme"):
        EvalSettings(scheme="fastest")
    with pytest.raises(ConfigError, match="delay_s"):
        EvalSettings(delay_s=-1.0)
    with pytest.raises(ConfigError, match="instructions"):
        EvalSettings(instructions="french")
    with pytest.raises(ConfigError, match="noise_scale"):
        EvalSettings(noise_scale=-0.5)


def test_noise_scale_scales_the_start_noise_the_policy_gets(env, configs):
    short = dataclasses.replace(get_task("lift_green_block"), budget_s=0.6)
    seen = {}
    for scale in (1.0, 0.5, 0.0):
        runner = StandStillRunner()
        settings = EvalSettings(noise_scale=scale)
        result = evaluate(
            env, lambda _env, r=runner: r, [short], 1, settings, *configs, policy_name="s"
        )
        assert result["settings"]["noise_scale"] == scale
        seen[scale] = np.stack(runner.noises)
    assert seen[1.0].shape[0] >= 2 and seen[1.0].shape[1:] == (10, 7)
    assert 0.8 < seen[1.0].std() < 1.2
    np.testing.assert_allclose(seen[0.5], 0.5 * seen[1.0], rtol=1e-6)
    assert not seen[0.0].any()


@pytest.mark.slow
def test_eval_in_worker_processes_matches_one_process(tmp_path, capsys):
    from vla_edge.cli import main as cli_main

    common = ["eval", "--policy", "expert", "--episodes", "1", "--quiet", "--image-size", "32"]
    common += ["--tasks", "lift_green_block", "push_blue_block_to_target"]
    assert cli_main([*common, "--json", str(tmp_path / "one.json")]) == 0
    assert cli_main([*common, "--workers", "2", "--json", str(tmp_path / "two.json")]) == 0
    capsys.readouterr()
    import json

    one = json.loads((tmp_path / "one.json").read_text())
    two = json.loads((tmp_path / "two.json").read_text())
    assert list(two["tasks"]) == ["lift_green_block", "push_blue_block_to_target"]
    assert one["tasks"] == two["tasks"]
    assert one["safety"] == two["safety"]
    assert one["mean_success"] == two["mean_success"] == 1.0
    assert two["settings"]["workers"] == 2


def test_eval_rejects_zero_workers(capsys):
    from vla_edge.cli import main as cli_main

    assert cli_main(["eval", "--policy", "expert", "--workers", "0"]) == 2
    assert "--workers" in capsys.readouterr().err


def test_eval_flow_steps_sets_the_checkpoints_euler_steps_and_is_refused_elsewhere(capsys):
    from vla_edge.cli import main as cli_main
    from vla_edge.sim.episodes import env_and_runner

    assert cli_main(["eval", "--policy", "expert", "--flow-steps", "5"]) == 2
    assert "--flow-steps applies to a torch checkpoint" in capsys.readouterr().err
    assert cli_main(["eval", "--policy", "bundled", "--flow-steps", "0"]) == 2
    assert "--flow-steps = 0" in capsys.readouterr().err
    _, runner, _ = env_and_runner("bundled", None, threads=1, flow_steps=3)
    try:
        assert runner.policy.action_head.flow_steps == 3
    finally:
        runner.close()
