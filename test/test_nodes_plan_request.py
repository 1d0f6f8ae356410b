"""The controller's inference request carries its plan only for the ``prefix`` merge."""

import numpy as np
import pytest

from vla_edge.config.models import ControllerConfig
from vla_edge.control.controller import Controller
from vla_edge.core.types import ActionChunk
from vla_edge.inference.prefix import prefix_from_plan
from vla_edge.nodes.controller_node import plan_request
from vla_edge.nodes.conversions import stamp_to_s, trajectory_to_chunk
from vla_edge.sim.env import JOINT_NAMES

NAMES = list(JOINT_NAMES)


def _controller(merge: str) -> Controller:
    controller = Controller(ControllerConfig(merge=merge, interpolation="linear"), np.zeros(7))
    ramp = np.repeat((0.1 * np.arange(10))[:, None], 7, axis=1)
    controller.submit(ActionChunk(0.0, 0.1, tuple(NAMES), ramp), now_s=0.0)
    return controller


def test_prefix_merge_sends_the_remaining_plan():
    msg = plan_request(_controller("prefix"), 0.35, NAMES)
    plan = trajectory_to_chunk(msg, 0.1)
    assert plan.t_obs_s == pytest.approx(0.35)
    np.testing.assert_allclose(plan.positions[:, 0], 0.35 + 0.1 * np.arange(6), atol=1e-9)
    _, prefix_len = prefix_from_plan(plan, 0.35, 10, 0.1, 0.35, 0.2)
    assert prefix_len >= 2


@pytest.mark.parametrize("merge", ["ensemble", "replace", "weighted"])
def test_other_merges_ask_for_an_unconditioned_chunk(merge):
    msg = plan_request(_controller(merge), 0.35, NAMES)
    assert not msg.points
    assert list(msg.joint_names) == NAMES
    assert stamp_to_s(msg.header.stamp) == pytest.approx(0.35)


def test_holding_sends_an_empty_request_even_for_prefix():
    msg = plan_request(_controller("prefix"), 5.0, NAMES)  # plan ran out
    assert not msg.points
    assert stamp_to_s(msg.header.stamp) == pytest.approx(5.0)
