"""The controller under its watchdog: the rules the node and the fault harness share."""

from __future__ import annotations

import numpy as np
import pytest

from vla_edge.config.models import ControllerConfig
from vla_edge.control.controller import Controller
from vla_edge.control.supervision import accept_chunk, joint_states_lost, supervised_step
from vla_edge.control.watchdog import Watchdog
from vla_edge.core.errors import StaleChunkError
from vla_edge.core.types import ActionChunk

JOINTS = ("j0", "j1")


def _setup() -> tuple[ControllerConfig, Controller, Watchdog]:
    config = ControllerConfig(joint_names=list(JOINTS), merge="replace", bridge_duration_s=0.0)
    return config, Controller(config, np.zeros(2)), Watchdog.from_controller_config(config, 0.0)


def _chunk(t_obs_s: float, horizon: int = 10) -> ActionChunk:
    steps = np.arange(horizon, dtype=np.float64)
    return ActionChunk(t_obs_s, 0.1, JOINTS, np.stack([0.05 * steps, np.zeros(horizon)], axis=1))


def test_accepted_chunk_beats_chunk_now_and_observation_at_its_stamp():
    _, controller, watchdog = _setup()
    accept_chunk(controller, watchdog, _chunk(0.3), 0.4)
    assert watchdog.age_s("chunk", 0.4) == pytest.approx(0.0)
    assert watchdog.age_s("observation", 0.4) == pytest.approx(0.1)


def test_rejected_chunk_beats_nothing():
    config, controller, watchdog = _setup()
    with pytest.raises(StaleChunkError):
        accept_chunk(controller, watchdog, _chunk(0.0), config.max_chunk_age_s + 0.1)
    assert watchdog.age_s("chunk", 1.0) == pytest.approx(1.0)


def test_chunks_are_refused_once_joint_states_are_lost():
    config, _, watchdog = _setup()
    watchdog.beat("joint_state", 1.0)
    assert not joint_states_lost(watchdog, 1.0 + 0.5 * config.joint_state_timeout_s)
    assert joint_states_lost(watchdog, 1.0 + config.joint_state_timeout_s + 1e-3)


def test_category_1_expiry_stops_the_plan():
    config, controller, watchdog = _setup()
    accept_chunk(controller, watchdog, _chunk(0.0, horizon=20), 0.0)  # a plan for 1.9 s
    stops = []
    for k in range(111):  # joint states and the loop stay alive; no new observation
        now_s = k * 0.01
        watchdog.beat("joint_state", now_s)
        watchdog.beat("control_loop", now_s)
        supervised_step(controller, watchdog, now_s, None)
        stops.append(controller.counters["stops"])
    # the observation (stamped 0.0) outlives its 1.0 s timeout on the tick after 1.0 s
    assert stops[100] == 0
    assert stops[101] == 1
    assert controller.counters["stops"] == 1
    assert controller.holding


def test_clock_jump_rebases_the_heartbeats():
    _, controller, watchdog = _setup()
    for k in range(5):
        supervised_step(controller, watchdog, 10.0 + k * 0.01, None)
    supervised_step(controller, watchdog, 5.0, None)  # clock stepped back 5 s
    assert controller.clock_jumped
    assert watchdog.age_s("chunk", 5.0) == pytest.approx(0.0)


def test_forward_clock_jump_holds_without_a_watchdog_stop():
    config, controller, watchdog = _setup()
    accept_chunk(controller, watchdog, _chunk(0.0), 0.0)
    for k in range(5):
        supervised_step(controller, watchdog, k * 0.01, None)
    jump_s = 0.04 + config.clock_jump_threshold_s + 5.0  # every heartbeat looks expired
    supervised_step(controller, watchdog, jump_s, None)
    assert controller.counters["clock_jumps"] == 1
    assert controller.counters["stops"] == 0  # the jump's own hold, no spurious stop
    assert controller.holding
    assert watchdog.age_s("chunk", jump_s) == pytest.approx(0.0)


def test_non_finite_clock_leaves_the_heartbeats_alone():
    _, controller, watchdog = _setup()
    supervised_step(controller, watchdog, 10.0, None)
    supervised_step(controller, watchdog, 5.0, None)  # a jump: heartbeats re-based at 5.0
    supervised_step(controller, watchdog, float("nan"), None)
    assert not controller.clock_jumped
    assert watchdog.age_s("chunk", 5.5) == pytest.approx(0.5)
