"""Watchdog heartbeats and their mapping to stop categories."""

import pytest

from vla_edge.config import ControllerConfig
from vla_edge.control import Watchdog
from vla_edge.core import StopCategory, WatchdogError


def test_heartbeat_exactly_at_timeout_is_alive_and_one_ms_later_expired() -> None:
    watchdog = Watchdog({"chunk": (1.0, StopCategory.CAT2)})
    watchdog.beat("chunk", 10.0)
    assert watchdog.check(11.0) == StopCategory.NONE
    assert watchdog.expired(11.001) == ["chunk"]
    assert watchdog.check(11.001) == StopCategory.CAT2


def test_standard_heartbeats_map_to_the_design_categories() -> None:
    config = ControllerConfig(observation_timeout_s=0.55)
    watchdog = Watchdog.from_controller_config(config, start_s=0.0)
    assert watchdog.names == ["observation", "joint_state", "chunk", "control_loop"]
    for name in watchdog.names:
        watchdog.beat(name, 5.0)
    # Only the chunk heartbeat (1.0 s) survives 0.6 s; others are CAT1.
    watchdog.beat("chunk", 5.0)
    assert watchdog.check(5.0 + config.chunk_timeout_s * 0.6) == StopCategory.CAT1
    assert set(watchdog.expired(5.6)) == {"observation", "joint_state", "control_loop"}
    for name in ("observation", "joint_state", "control_loop"):
        watchdog.beat(name, 6.5)
    assert watchdog.expired(6.5) == ["chunk"]
    assert watchdog.check(6.5) == StopCategory.CAT2


def test_heartbeat_that_never_beat_is_expired_unless_started() -> None:
    assert Watchdog({"observation": (0.5, StopCategory.CAT1)}).check(0.0) == StopCategory.CAT1
    started = Watchdog({"observation": (0.5, StopCategory.CAT1)}, start_s=0.0)
    assert started.check(0.4) == StopCategory.NONE
    assert started.check(0.6) == StopCategory.CAT1


def test_unknown_heartbeat_is_refused_with_its_name() -> None:
    watchdog = Watchdog({"chunk": (1.0, StopCategory.CAT2)})
    with pytest.raises(WatchdogError, match="'camera' unknown"):
        watchdog.beat("camera", 0.0)


def test_non_positive_timeout_is_refused() -> None:
    with pytest.raises(WatchdogError, match="timeout_s = 0.0 must be > 0"):
        Watchdog({"chunk": (0.0, StopCategory.CAT2)})
