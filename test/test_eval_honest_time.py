"""Honest virtual time: the evaluator runs the controller as configured and says so in its JSON.

The controller's ``max_chunk_age_s`` is the configured one (an override only by an
explicit setting, recorded), so a delay beyond it shows as chunks refused stale, as
in the graph; the JSON holds every controller and safety setting the episodes ran
with and the share of ticks the safety node limited.
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np
import pytest

from vla_edge.cli.eval import add_arguments, job_from_args
from vla_edge.core.errors import ConfigError
from vla_edge.core.types import ActionChunk, Observation
from vla_edge.runners.base import RunnerSpec
from vla_edge.sim.env import TabletopEnv
from vla_edge.sim.episodes import Episode, EvalJob, episode_key
from vla_edge.sim.evaluator import EvalSettings, controller_config_for, evaluate
from vla_edge.sim.tasks import get_task

JOINTS = ("joint1", "joint2", "joint3", "joint4", "joint5", "joint6", "gripper")


class NodRunner:
    """Chunks that nod joint 1 by a few centiradians around the observed state."""

    def __init__(self, horizon: int = 8) -> None:
        self.spec = RunnerSpec(JOINTS, horizon, 0.1, ("agentview", "wrist"), 32, 32)
        self.calls = 0

    def infer(self, obs: Observation, noise=None, prefix_actions=None, prefix_len=0):
        self.calls += 1
        horizon = self.spec.chunk_horizon
        positions = np.repeat(np.asarray(obs.state, dtype=np.float64)[None], horizon, axis=0)
        positions[:, 0] += 0.03 * np.sin(np.arange(horizon))
        return ActionChunk(obs.stamp_s, 0.1, JOINTS, positions)

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def env() -> TabletopEnv:
    return TabletopEnv(image_height=32, image_width=32)


def _short_task(budget_s: float = 1.0):
    return dataclasses.replace(get_task("lift_green_block"), budget_s=budget_s)


def test_the_evaluator_keeps_the_configured_chunk_age_bound(configs):
    controller, _ = configs
    cfg = controller_config_for(controller, EvalSettings(delay_s=0.8), 10, 0.1)
    assert cfg.max_chunk_age_s == controller.max_chunk_age_s == 0.5
    override = controller_config_for(
        controller, EvalSettings(delay_s=0.8, max_chunk_age_s=0.9), 10, 0.1
    )
    assert override.max_chunk_age_s == 0.9


def test_an_override_the_controller_cannot_run_with_is_a_named_error(configs):
    controller, _ = configs  # observation_timeout_s 1.0 must exceed the bound
    with pytest.raises(ConfigError, match="max_chunk_age_s = 2.0"):
        controller_config_for(controller, EvalSettings(max_chunk_age_s=2.0), 10, 0.1)
    with pytest.raises(ConfigError, match="max_chunk_age_s = 0.0"):
        EvalSettings(max_chunk_age_s=0.0)


def test_a_delay_beyond_the_bound_refuses_every_chunk_as_stale(env, configs):
    controller, safety = configs
    tight = controller.model_copy(update={"max_chunk_age_s": 0.15})
    runner = NodRunner()
    result = evaluate(
        env,
        lambda _env: runner,
        [_short_task()],
        1,
        EvalSettings(delay_s=0.2),
        tight,
        safety,
        policy_name="nod",
    )
    stale = result["safety"]["chunks_rejected_stale"]
    assert stale >= 3 and stale in (runner.calls, runner.calls - 1)  # the last may be in flight
    assert result["safety"]["chunks_rejected"] == stale == result["safety"]["chunk_rejections"]
    assert result["safety"]["chunks_accepted"] == 0
    assert result["tasks"]["lift_green_block"]["chunks_rejected_stale"] == stale
    assert result["settings"]["max_chunk_age_s"] == 0.15
    assert result["settings"]["max_chunk_age_override_s"] is None


def test_an_explicit_override_admits_them_and_is_recorded(env, configs):
    controller, safety = configs
    tight = controller.model_copy(update={"max_chunk_age_s": 0.15})
    result = evaluate(
        env,
        lambda _env: NodRunner(),
        [_short_task()],
        1,
        EvalSettings(delay_s=0.2, max_chunk_age_s=0.3),
        tight,
        safety,
        policy_name="nod",
    )
    assert result["safety"]["chunks_rejected_stale"] == 0
    assert result["safety"]["chunks_accepted"] >= 2
    assert result["settings"]["max_chunk_age_s"] == 0.3
    assert result["settings"]["max_chunk_age_override_s"] == 0.3
    assert result["settings"]["controller"]["max_chunk_age_s"] == 0.3


def test_the_json_holds_every_setting_the_episodes_ran_with_and_the_limited_share(env, configs):
    controller, safety = configs
    result = evaluate(
        env,
        lambda _env: NodRunner(horizon=8),
        [_short_task(0.8)],
        1,
        EvalSettings(delay_s=0.1, scheme="lerobot"),
        controller,
        safety,
        policy_name="nod",
    )
    ran = result["settings"]["controller"]
    assert set(ran) == set(type(controller).model_fields)
    # the scheme's and the policy's changes, the rest as configured
    assert (ran["merge"], ran["weighted_old_weight"], ran["bridge_duration_s"]) == (
        "weighted",
        0.3,
        0.0,
    )
    assert ran["chunk_horizon"] == 8 and ran["expected_inference_delay_s"] == 0.1
    assert ran["command_limit_margin"] == controller.command_limit_margin
    assert result["settings"]["safety"] == safety.model_dump(mode="json")
    sup = result["safety"]["supervisor"]
    assert result["safety"]["ticks"] == sup["ticks"] > 0
    assert result["safety"]["limited_ticks"] == sup["limited_ticks"]
    share = result["safety"]["limited_ticks_share"]
    assert share == pytest.approx(sup["limited_ticks"] / sup["ticks"])
    assert result["tasks"]["lift_green_block"]["limited_ticks_share"] == pytest.approx(share)
    # the command is shaped inside the limits: the safety node does not limit it
    assert share == 0.0


def test_the_cli_flag_overrides_the_bound_and_keys_only_when_given():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    plain = job_from_args(parser.parse_args(["--policy", "expert", "--delay-ms", "300"]))
    assert plain.settings.max_chunk_age_s is None
    assert "max_chunk_age_s" not in episode_key(Episode(plain, "lift_green_block", 0))
    given = job_from_args(parser.parse_args(["--policy", "expert", "--max-chunk-age-s", "0.4"]))
    assert given.settings.max_chunk_age_s == 0.4
    assert episode_key(Episode(given, "lift_green_block", 0))["max_chunk_age_s"] == 0.4
    assert isinstance(given, EvalJob)
