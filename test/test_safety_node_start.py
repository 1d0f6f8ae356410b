"""The safety node's first joint state: out of the limits it is counted, not fatal."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from sensor_msgs.msg import JointState

from vla_edge.config import SafetyConfig, load_node_params
from vla_edge.nodes.safety_node import SafetyNode

CONFIG = load_node_params(
    Path(__file__).resolve().parents[1] / "config" / "safety.yaml", "safety_node", SafetyConfig
)


class _Logger:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def warning(self, message: str) -> None:
        self.lines.append(message)

    info = warning


def _stub() -> SimpleNamespace:
    """The attributes ``SafetyNode._on_joint_state`` uses, without a ROS node."""
    logger = _Logger()
    stub = SimpleNamespace(
        config=CONFIG,
        joint_names=tuple(CONFIG.joint_names),
        supervisor=None,
        _estop_before_start=False,
        bad_input={},
        lock=threading.Condition(),
        get_logger=lambda: logger,
        _now_s=lambda: 1.0,
        logger=logger,
    )
    stub._bad = lambda cause, message: SafetyNode._bad(stub, cause, message)
    return stub


def _joint_state(positions: list[float]) -> JointState:
    msg = JointState()
    msg.name = list(CONFIG.joint_names)
    msg.position = positions
    return msg


def test_first_joint_state_outside_the_limits_is_counted_and_the_next_one_starts() -> None:
    stub = _stub()
    outside = [0.0] * 6 + [-0.001]  # gripper 1 mm below its range: more than the 1 % slack
    SafetyNode._on_joint_state(stub, _joint_state(outside))
    assert stub.supervisor is None  # nothing is driven from an out-of-limits start
    assert stub.bad_input == {"initial_out_of_limits": 1}
    assert "gripper" in stub.logger.lines[0]
    inside = [0.0] * 6 + [0.02]
    SafetyNode._on_joint_state(stub, _joint_state(inside))
    assert stub.supervisor is not None
    np.testing.assert_allclose(stub.supervisor.limiter.positions, inside)


def test_joint_state_naming_a_joint_twice_is_counted_and_ignored() -> None:
    stub = _stub()
    msg = _joint_state([0.0] * 6 + [0.02])
    msg.name = [*CONFIG.joint_names, "joint1"]
    msg.position = [0.0] * 6 + [0.02, 0.5]
    SafetyNode._on_joint_state(stub, msg)
    assert stub.supervisor is None
    assert stub.bad_input == {"duplicate_joints": 1}
