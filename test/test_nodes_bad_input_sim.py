"""The sim node refuses a bad task or initial state at start-up (no ROS graph).

The parameters are checked by the node's config (:class:`SimConfig`); the
initial-reset handshake runs on a stand-in holding just the attributes it uses.
"""

import threading
from types import SimpleNamespace

import pytest

from vla_edge.config.loader import validate_params
from vla_edge.config.models import SimConfig
from vla_edge.core.errors import ConfigError, UnknownTaskError
from vla_edge.nodes import sim_node
from vla_edge.nodes.sim_node import SimNode, SimStartupError, _ResetRequest
from vla_edge.sim.tasks import N_EVAL_INIT_STATES, list_tasks


def _validate(**params):
    return validate_params(SimConfig, params, "node sim_node")


def test_every_task_of_the_suite_and_its_initial_states_are_accepted():
    for task in list_tasks():
        assert _validate(task=task, init_state_id=N_EVAL_INIT_STATES - 1).task == task


def test_unknown_task_is_a_config_error_listing_the_allowed_tasks():
    with pytest.raises(ConfigError, match="task = 'pick_the_moon'.*allowed:.*pick_red_block"):
        _validate(task="pick_the_moon")


@pytest.mark.parametrize("init_state_id", [-1, N_EVAL_INIT_STATES])
def test_init_state_id_outside_the_evaluation_states_is_a_config_error(init_state_id):
    with pytest.raises(ConfigError, match=f"init_state_id = {init_state_id}"):
        _validate(init_state_id=init_state_id)


def _node(reset_error=None):
    closed = threading.Event()

    def reset_scene(keep_arm):
        if reset_error is not None:
            raise reset_error
        node.targets = "set"

    node = SimpleNamespace(
        config=SimConfig(),
        steps=0,
        control_dt_s=0.01,
        targets=None,
        _reset_scene=reset_scene,
        close=closed.set,
        closed=closed,
    )
    return node


def _serve_then_await(node):
    reset = _ResetRequest(keep_arm=False)
    node._reset_request = reset
    SimNode._serve_reset_locked(node)  # what the loop thread does on its first tick
    SimNode._await_initial_reset(node, reset)


def test_initial_reset_that_succeeds_starts_the_node():
    node = _node()
    _serve_then_await(node)
    assert node.targets == "set" and not node.closed.is_set()


def test_initial_reset_that_fails_stops_the_node_with_a_named_error():
    node = _node(UnknownTaskError("task = 'x' is not in suite 'tabletop'"))
    with pytest.raises(SimStartupError, match="initial reset .* failed: UnknownTaskError"):
        _serve_then_await(node)
    assert node.closed.is_set()  # the loop and the renderer are released


def test_initial_reset_that_crashes_is_reported_to_the_waiter_too():
    node = _node(RuntimeError("no GL context"))
    reset = _ResetRequest(keep_arm=False)
    node._reset_request = reset
    with pytest.raises(RuntimeError):  # the loop thread counts it as a loop error
        SimNode._serve_reset_locked(node)
    with pytest.raises(SimStartupError, match="RuntimeError: no GL context"):
        SimNode._await_initial_reset(node, reset)


def test_initial_reset_that_never_finishes_is_a_named_error(monkeypatch):
    monkeypatch.setattr(sim_node, "STARTUP_RESET_TIMEOUT_S", 0.01)
    node = _node()
    with pytest.raises(SimStartupError, match="did not finish within 0.01 s"):
        SimNode._await_initial_reset(node, _ResetRequest(keep_arm=False))
    assert node.closed.is_set()
