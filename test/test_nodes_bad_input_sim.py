"""The sim node refuses a bad task or initial state at start-up and on ``~/reset``.

The check is the sim's (:func:`vla_edge.sim.tasks.check_task`). Start-up runs
the node's real entry point in this process with the bad value on the command
line (no spinning: the node stops before it builds the scene); the reset
service and the initial-reset handshake run on a stand-in holding just the
attributes they use.
"""

import threading
import time
from types import SimpleNamespace

import pytest
from std_srvs.srv import Trigger

from vla_edge.config.models import SimConfig
from vla_edge.core.errors import ConfigError, InitStateOutOfRangeError, UnknownTaskError
from vla_edge.nodes import sim_node
from vla_edge.nodes.metrics import BadInputCounter
from vla_edge.nodes.sim_node import SimNode, SimStartupError, _ResetRequest
from vla_edge.sim import env as sim_env
from vla_edge.sim.tasks import N_EVAL_INIT_STATES, check_task, list_tasks

DEFAULT_TASK = SimConfig().task

# --- the sim's check --------------------------------------------------------------------------


def test_every_task_of_the_suite_and_its_initial_states_are_accepted():
    for task in list_tasks():
        check_task("tabletop", task, 0)
        check_task("tabletop", task, N_EVAL_INIT_STATES - 1)


def test_unknown_task_is_a_named_error_listing_the_allowed_tasks():
    with pytest.raises(UnknownTaskError, match="task = 'pick_the_moon'.*allowed:.*pick_red_block"):
        check_task("tabletop", "pick_the_moon", 0)


@pytest.mark.parametrize("init_state_id", [-1, N_EVAL_INIT_STATES])
def test_init_state_id_outside_the_evaluation_states_is_a_named_error(init_state_id):
    with pytest.raises(
        InitStateOutOfRangeError,
        match=rf"init_state_id = {init_state_id}: out of range: .* 0\.\.{N_EVAL_INIT_STATES - 1}",
    ):
        check_task("tabletop", DEFAULT_TASK, init_state_id)


def test_unknown_suite_is_a_config_error():
    with pytest.raises(ConfigError, match="suite = 'libero'.*expected one of"):
        check_task("libero", DEFAULT_TASK, 0)


# --- start-up -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("parameter", "fatal"),
    [
        ("task:=pick_the_moon", "UnknownTaskError: task = 'pick_the_moon': not a tabletop task"),
        (
            f"init_state_id:={N_EVAL_INIT_STATES}",
            f"InitStateOutOfRangeError: init_state_id = {N_EVAL_INIT_STATES}: out of range",
        ),
        ("init_state_id:=-1", "ConfigError: node sim_node: init_state_id = -1"),  # pydantic ge=0
        ("suite:=libero", "ConfigError: suite = 'libero'"),
    ],
)
def test_bad_scene_parameter_stops_the_node_at_start_naming_the_field(
    parameter, fatal, monkeypatch, capfd
):
    def no_scene(**kwargs):
        raise AssertionError("the scene was built for a scene the sim does not have")

    monkeypatch.setattr(sim_env, "TabletopEnv", no_scene)
    code = sim_node.main(args=["sim_node", "--ros-args", "-p", parameter])
    assert code == 1
    assert f"[FATAL] sim_node: {fatal}" in capfd.readouterr().out


# --- ~/reset ------------------------------------------------------------------------------


def _node(reset_error=None, task=DEFAULT_TASK, init_state_id=0):
    closed = threading.Event()
    parameters = {"task": task, "init_state_id": init_state_id}

    def reset_scene(reset):
        if reset_error is not None:
            raise reset_error
        node.targets = "set"
        node.scenes.append((reset.task, reset.init_state_id, reset.keep_arm))
        node.episode += 1

    node = SimpleNamespace(
        config=SimConfig(),
        steps=0,
        control_dt_s=0.01,
        targets=None,
        episode=0,
        scenes=[],
        env=SimpleNamespace(instruction="pick up the red block and put it in the bowl"),
        lock=threading.Lock(),
        _reset_request=None,
        bad_input=BadInputCounter(lambda message: None),
        get_parameter=lambda name: SimpleNamespace(value=parameters[name]),
        _reset_scene=reset_scene,
        close=closed.set,
        closed=closed,
    )
    return node


@pytest.mark.parametrize(
    ("task", "init_state_id", "error"),
    [
        ("pick_the_moon", 0, "UnknownTaskError: task = 'pick_the_moon'"),
        (
            DEFAULT_TASK,
            N_EVAL_INIT_STATES,
            f"InitStateOutOfRangeError: init_state_id = {N_EVAL_INIT_STATES}",
        ),
    ],
)
def test_reset_to_a_scene_the_sim_lacks_is_refused_and_counted(task, init_state_id, error):
    node = _node(task=task, init_state_id=init_state_id)
    response = SimNode._on_reset(node, Trigger.Request(), Trigger.Response())
    assert not response.success and response.message.startswith(error)
    assert node.bad_input.counts == {"reset_parameters": 1}
    assert node._reset_request is None  # the loop thread was not asked; the scene runs on


def test_reset_to_the_parameters_scene_keeps_the_arm():
    node = _node(task="lift_green_block", init_state_id=7)

    def loop_thread():  # what the loop thread does on its next tick
        deadline = time.monotonic() + sim_node.RESET_TIMEOUT_S
        while node._reset_request is None and time.monotonic() < deadline:
            time.sleep(0.001)
        with node.lock:
            SimNode._serve_reset_locked(node)

    loop = threading.Thread(target=loop_thread)
    loop.start()
    response = SimNode._on_reset(node, Trigger.Request(), Trigger.Response())
    loop.join()
    assert response.success, response.message
    assert node.scenes == [("lift_green_block", 7, True)]
    assert node.bad_input.counts == {}


# --- the initial reset --------------------------------------------------------------------


def _serve_then_await(node):
    reset = _ResetRequest(DEFAULT_TASK, 0, keep_arm=False)
    node._reset_request = reset
    SimNode._serve_reset_locked(node)  # what the loop thread does on its first tick
    SimNode._await_initial_reset(node, reset)


def test_initial_reset_that_succeeds_starts_the_node():
    node = _node()
    _serve_then_await(node)
    assert node.targets == "set" and not node.closed.is_set()
    assert node.scenes == [(DEFAULT_TASK, 0, False)]


def test_initial_reset_that_fails_stops_the_node_with_a_named_error():
    node = _node(UnknownTaskError("task = 'x' is not in suite 'tabletop'"))
    with pytest.raises(SimStartupError, match="initial reset .* failed: UnknownTaskError"):
        _serve_then_await(node)
    assert node.closed.is_set()  # the loop and the renderer are released


def test_initial_reset_that_crashes_is_reported_to_the_waiter_too():
    node = _node(RuntimeError("no GL context"))
    reset = _ResetRequest(DEFAULT_TASK, 0, keep_arm=False)
    node._reset_request = reset
    with pytest.raises(RuntimeError):  # the loop thread counts it as a loop error
        SimNode._serve_reset_locked(node)
    with pytest.raises(SimStartupError, match="RuntimeError: no GL context"):
        SimNode._await_initial_reset(node, reset)


def test_initial_reset_that_never_finishes_is_a_named_error(monkeypatch):
    monkeypatch.setattr(sim_node, "STARTUP_RESET_TIMEOUT_S", 0.01)
    node = _node()
    with pytest.raises(SimStartupError, match="did not finish within 0.01 s"):
        SimNode._await_initial_reset(node, _ResetRequest(DEFAULT_TASK, 0, keep_arm=False))
    assert node.closed.is_set()
