"""The controller node's chunk-age metric counts accepted chunks only (no ROS graph).

``_on_chunk`` runs on a stand-in holding just the attributes it uses, around
the real controller core and watchdog.
"""

import threading
from types import SimpleNamespace

import numpy as np

from vla_edge.config.models import ControllerConfig
from vla_edge.control.controller import Controller
from vla_edge.control.homing import Homing, load_homing_limits
from vla_edge.control.watchdog import Watchdog
from vla_edge.core.types import ActionChunk
from vla_edge.nodes.controller_node import ControllerNode
from vla_edge.nodes.conversions import chunk_to_trajectory
from vla_edge.nodes.metrics import BadInputCounter, Histogram

NOW_S = 1_700_000_000.0


def _node():
    config = ControllerConfig()
    watchdog = Watchdog.from_controller_config(config, start_s=NOW_S)
    watchdog.beat("joint_state", NOW_S)
    return SimpleNamespace(
        config=config,
        controller=Controller(config, initial_positions=np.zeros(len(config.joint_names))),
        watchdog=watchdog,
        bad_input=BadInputCounter(lambda _: None),
        lock=threading.Lock(),
        chunk_age_ms=Histogram(1.0, 5000.0),
        _logged_rejections=set(),
        _accepted_once=False,
        _now_s=lambda: NOW_S,
        get_logger=lambda: SimpleNamespace(warning=lambda _: None),
        homing=Homing(load_homing_limits(config), 0.01, config.joint_names, 0.02, 2.0),
    )


def _chunk_msg(node, t_obs_s):
    cfg = node.config
    positions = np.zeros((cfg.chunk_horizon, len(cfg.joint_names)))
    return chunk_to_trajectory(
        ActionChunk(t_obs_s, cfg.dt_action_s, tuple(cfg.joint_names), positions)
    )


def test_chunk_stamped_zero_is_rejected_and_leaves_the_age_metric_alone():
    node = _node()
    ControllerNode._on_chunk(node, _chunk_msg(node, 0.0))
    assert not node._accepted_once
    assert node.chunk_age_ms.count == 0 and node.chunk_age_ms.max == 0.0


def test_accepted_chunk_records_its_age():
    node = _node()
    ControllerNode._on_chunk(node, _chunk_msg(node, NOW_S - 0.05))
    assert node._accepted_once
    assert node.chunk_age_ms.count == 1
    assert abs(node.chunk_age_ms.max - 50.0) < 1e-3
