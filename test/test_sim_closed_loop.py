"""The closed loop the evaluator and the fault harness share: delivery, requests, observations."""

from __future__ import annotations

import numpy as np
import pytest

from vla_edge.core.errors import ConfigError
from vla_edge.core.types import ActionChunk, Observation
from vla_edge.faults.harness import FaultHarness, HarnessSettings
from vla_edge.faults.scenario import load_all
from vla_edge.runners.base import RunnerSpec
from vla_edge.sim.closed_loop import (
    ClosedLoop,
    LoopSettings,
    NoDisturbances,
    OnRequestCamera,
    SyncBroker,
)
from vla_edge.sim.env import TabletopEnv
from vla_edge.sim.evaluator import EvalSettings, controller_config_for
from vla_edge.sim.expert_runner import ExpertRunner

JOINTS = ("joint1", "joint2", "joint3", "joint4", "joint5", "joint6", "gripper")


class RisingRunner:
    """Chunks that lift joint 1 by 0.01 rad per step from the observed state; records its calls."""

    def __init__(self) -> None:
        self.spec = RunnerSpec(JOINTS, 10, 0.1, ("agentview", "wrist"), 32, 32)
        self.stamps: list[float] = []

    def infer(self, obs: Observation, noise=None, prefix_actions=None, prefix_len=0):
        self.stamps.append(obs.stamp_s)
        positions = np.repeat(np.asarray(obs.state, dtype=np.float64)[None], 10, axis=0)
        positions[:, 0] += 0.01 * np.arange(10)
        return ActionChunk(obs.stamp_s, 0.1, JOINTS, positions)

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def env() -> TabletopEnv:
    return TabletopEnv(image_height=32, image_width=32)


def _loop(env, configs, settings: LoopSettings, runner=None) -> ClosedLoop:
    controller, safety = configs
    loop = ClosedLoop(env, runner or RisingRunner(), controller, safety, settings)
    loop.reset("lift_green_block", 0, np.random.default_rng(0))
    return loop


def test_a_chunk_without_delay_reaches_the_controller_on_the_tick_it_was_asked_for(env, configs):
    loop = _loop(env, configs, LoopSettings(delay_s=0.0))
    first = loop.tick()
    assert first.arrived and loop.accepted == 1
    assert first.command is not None and not loop.controller.core.holding


def test_a_delayed_chunk_arrives_once_its_virtual_inference_has_finished(env, configs):
    loop = _loop(env, configs, LoopSettings(delay_s=0.05))
    arrivals = [loop.tick().arrived for _ in range(8)]
    # asked for at t = 0, due at 0.05 s: the tick starting at 0.05 s (the sixth) delivers it
    assert arrivals.index(True) == 5
    assert loop.runner.stamps[0] == 0.0


def test_the_scene_is_rendered_only_for_a_request_made_on_the_same_tick(env):
    env.reset("lift_green_block", 0)
    camera = OnRequestCamera(env, "lift the green block")
    camera.request(None, 0.5)
    assert camera.take(0.51) is None
    assert camera.take(0.5) is None  # a request is answered once
    camera.request(None, 0.5)
    item = camera.take(0.5)
    assert item is not None and item.observation.stamp_s == 0.5
    assert set(item.observation.images) == set(env.cameras)


def test_the_sync_broker_starts_a_cut_chunk_when_it_arrives():
    chunk = ActionChunk(1.0, 0.1, JOINTS, np.zeros((10, 7)))
    cut = SyncBroker(replan_steps=5).on_arrival(chunk, 1.3)
    assert cut.t_obs_s == 1.3 and cut.positions.shape == (6, 7)
    with pytest.raises(ConfigError, match="replan_steps = 0"):
        SyncBroker(replan_steps=0)


def test_the_sync_broker_asks_again_only_when_the_buffer_has_run_out(env, configs):
    sync = controller_config_for(configs[0], EvalSettings(scheme="sync"), 10, 0.1)
    loop = _loop(env, (sync, configs[1]), LoopSettings(delay_s=0.0, broker=SyncBroker(3)))
    for _ in range(200):
        loop.tick()
    # each chunk runs its 3 steps of 0.1 s, then the next is asked for: 2 s hold 6 or 7
    gaps = np.diff(loop.runner.stamps)
    assert 6 <= loop.accepted <= 7 and len(loop.runner.stamps) == loop.accepted
    assert np.all(gaps >= 0.3 - 1e-9) and np.all(gaps <= 0.32)


def test_bad_loop_settings_are_named():
    with pytest.raises(ConfigError, match="cameras = 'usb'"):
        LoopSettings(cameras="usb")
    with pytest.raises(ConfigError, match="delay_s = -0.1"):
        LoopSettings(delay_s=-0.1)


def test_the_fault_harness_without_a_fault_is_the_closed_loop_without_disturbances(env, configs):
    controller, safety = configs
    runner = ExpertRunner(env)
    harness = FaultHarness(env, runner, controller, safety, HarnessSettings())
    scenario = load_all()["baseline"].model_copy(update={"episode_s": 1.0})
    trace = harness.run(scenario)

    settings = HarnessSettings()
    loop = ClosedLoop(
        env,
        runner,
        controller,
        safety,
        LoopSettings(
            delay_s=settings.inference_delay_s,
            noise_scale=settings.noise_scale,
            cameras="streaming",
            camera_period_s=settings.camera_period_s,
        ),
        faults=NoDisturbances(),
    )
    loop.reset(settings.task, settings.init_state_id, np.random.default_rng(0))
    safe = [loop.tick().safe for _ in range(len(trace.safe))]
    np.testing.assert_array_equal(np.asarray(safe), np.asarray(trace.safe))
    assert loop.accepted == trace.accepted[-1] > 0
