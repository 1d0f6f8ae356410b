"""Homing over real DDS: the controller's ``~/home`` and the sim's reset that waits for it.

Two small graphs, each on a ROS domain of its own:

* safety + controller processes, with this process as the robot (it echoes each
  safe command as the measured joint state): ``~/home`` is refused before the
  first joint state, under an e-stop and with joint states lost; it moves the
  arm through the real safety node without the safety node limiting a single
  tick (its ``limited_ticks`` stays put), reports ``homed``, refuses chunks
  while it runs and hands back to the chunks afterwards;
* sim + safety + controller: ``sim_node/reset`` homes the arm to the scene's
  initial pose (the evaluator's) before it re-places the objects, and fails
  with the reason when the controller refuses.
"""

import contextlib
import dataclasses
import os
import threading
import time

import numpy as np
import pytest
from ros_test_domain import DomainLease
from test_nodes_ros_graph import Probe, _num, wait_for

from vla_edge.config import load_node_params
from vla_edge.config.models import ControllerConfig, SafetyConfig
from vla_edge.core.types import ActionChunk
from vla_edge.nodes import graph as g
from vla_edge.nodes.supervisor import GraphProcesses
from vla_edge.sim.tasks import initial_joint_positions

pytestmark = pytest.mark.ros

CONTROLLER = load_node_params(g.CONTROLLER_NODE.params_path(), "controller_node", ControllerConfig)
SAFETY = load_node_params(g.SAFETY_NODE.params_path(), "safety_node", SafetyConfig)
NAMES = tuple(CONTROLLER.joint_names)
PERIOD_S = 1.0 / CONTROLLER.rate_hz
HOME = np.array(CONTROLLER.home_positions)
START = HOME + np.array([0.3, -0.2, -0.3, 0.2, 0.25, -0.3, -0.02])
TASK = "lift_green_block"
UP_TIMEOUT_S = 60.0


@dataclasses.dataclass
class SomeNodes(GraphProcesses):
    """The sim graph's processes, only those named."""

    only: tuple[str, ...] = ()

    def specs(self):
        return tuple(spec for spec in super().specs() if spec.name in self.only)


class HomingProbe(Probe):
    """The graph probe, plus: ``homed``, ``~/home``, ``home_pose``, joint states, chunks,
    and (when ``robot_on``) a robot that echoes each safe command as its joint state."""

    def __init__(self) -> None:
        super().__init__()
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import JointState
        from std_msgs.msg import Bool, Float64MultiArray
        from std_srvs.srv import Trigger
        from trajectory_msgs.msg import JointTrajectory

        latched = QoSProfile(
            depth=10,
            reliability=ReliabilityPolicy.RELIABLE,
            durability=DurabilityPolicy.TRANSIENT_LOCAL,
        )
        n = self.node
        self.homed: list[tuple[float, bool]] = []
        self.measured: list[tuple[float, np.ndarray]] = []
        n.create_subscription(Bool, g.TOPIC_HOMED, self._on_homed, latched)
        n.create_subscription(JointState, g.TOPIC_JOINT_STATES, self._on_joint_state, 100)
        n.create_subscription(Float64MultiArray, g.TOPIC_JOINT_COMMANDS, self._on_safe, 100)
        self.home = n.create_client(Trigger, g.SERVICE_CONTROLLER_HOME)
        self.home_pose_pub = n.create_publisher(JointState, g.TOPIC_HOME_POSE, latched)
        self.chunk_pub = n.create_publisher(JointTrajectory, g.TOPIC_ACTION_CHUNK, 10)
        self.robot_on = False
        self.robot = START.copy()
        self._robot_thread = threading.Thread(target=self._run_robot, daemon=True)
        self._robot_thread.start()

    def _on_homed(self, msg) -> None:
        with self.lock:
            self.homed.append((time.monotonic(), bool(msg.data)))

    def _on_joint_state(self, msg) -> None:
        if not self.robot_on:  # the sim's, not our own echo
            with self.lock:
                self.measured.append((time.monotonic(), np.asarray(msg.position, dtype=float)))

    def _on_safe(self, msg) -> None:
        with self.lock:
            self.robot = np.asarray(msg.data, dtype=float)

    def _run_robot(self) -> None:
        from sensor_msgs.msg import JointState

        while self.context.ok():
            if self.robot_on:
                with self.lock:
                    positions = self.robot.copy()
                stamp_ns = self.node.get_clock().now().nanoseconds
                msg = JointState(name=list(NAMES), position=positions.tolist())
                msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp_ns, 1_000_000_000)
                with contextlib.suppress(Exception):  # shutting down
                    self.joint_pub.publish(msg)
            time.sleep(PERIOD_S)

    def homed_since(self, t0: float) -> bool:
        with self.lock:
            return any(t >= t0 and value for t, value in self.homed)

    def last_homed(self) -> bool | None:
        with self.lock:
            return self.homed[-1][1] if self.homed else None

    def publish_home_pose(self, positions: np.ndarray) -> None:
        from sensor_msgs.msg import JointState

        self.home_pose_pub.publish(JointState(name=list(NAMES), position=list(positions)))

    def publish_chunk(self, positions: np.ndarray) -> None:
        from vla_edge.nodes.conversions import chunk_to_trajectory

        now_s = self.node.get_clock().now().nanoseconds * 1e-9
        self.chunk_pub.publish(
            chunk_to_trajectory(ActionChunk(now_s, CONTROLLER.dt_action_s, NAMES, positions))
        )

    def latest_measured(self) -> np.ndarray | None:
        with self.lock:
            return self.measured[-1][1].copy() if self.measured else None


@contextlib.contextmanager
def some_nodes(only, log_dir, overrides=None):
    """The named nodes of the sim graph and a homing probe, on a ROS domain of their own."""
    lease = DomainLease()
    saved = {k: os.environ.get(k) for k in ("ROS_DOMAIN_ID", "ROS_AUTOMATIC_DISCOVERY_RANGE")}
    os.environ["ROS_DOMAIN_ID"] = str(lease.domain)
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    processes = SomeNodes("sim", overrides or {}, log_dir=log_dir, only=tuple(only))
    probe = HomingProbe()
    processes.start()
    try:
        yield processes, probe
    finally:
        processes.stop()
        probe.close()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        lease.release()


def _logs(processes) -> str:
    return "\n".join(f"--- {name}\n{processes.log_tail(name, 40)}" for name in processes.nodes)


def _call(probe, client, timeout_s: float = 5.0):
    return probe.call(client, timeout_s=timeout_s)


def _home_until_accepted(probe, timeout_s: float = 4.0):
    """Call ``~/home`` until it is accepted (the safety node's status comes once a second)."""
    deadline = time.monotonic() + timeout_s
    while True:
        reply = _call(probe, probe.home)
        if reply.success or time.monotonic() > deadline:
            return reply
        time.sleep(0.25)


# --- the controller, with this process as the robot ----------------------------------------


@pytest.fixture(scope="module")
def arm(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("homing_logs")
    with some_nodes(("safety_node", "controller_node"), log_dir) as (processes, probe):
        assert probe.home.wait_for_service(timeout_sec=UP_TIMEOUT_S), _logs(processes)
        yield processes, probe


def test_home_before_the_first_joint_state_is_refused(arm):
    processes, probe = arm
    reply = _call(probe, probe.home)
    assert not reply.success and "no joint state yet" in reply.message, reply.message
    probe.robot_on = True  # from here on the robot reports where it is
    assert wait_for(lambda: probe.status("vla_edge/safety").get("state") == "none", 10.0), _logs(
        processes
    )


def _safety_counters_after(probe, t0: float) -> dict[str, str]:
    """The safety node's first status stamped after ``t0`` (monotonic, this process)."""
    stamp0 = probe.node.get_clock().now().nanoseconds * 1e-9 + (t0 - time.monotonic())
    assert wait_for(lambda: _num(probe.status("vla_edge/safety"), "_stamp_s") > stamp0, 3.0)
    return probe.status("vla_edge/safety")


def test_homing_goes_through_the_safety_node_without_a_limited_tick_and_reports_homed(arm):
    processes, probe = arm
    before = _safety_counters_after(probe, time.monotonic())
    t0 = time.monotonic()
    reply = _home_until_accepted(probe)
    assert reply.success and "home_positions pose" in reply.message, reply.message
    assert wait_for(lambda: probe.homed_since(t0), 15.0), _logs(processes)
    assert np.max(np.abs(probe.robot - HOME)) <= CONTROLLER.home_tolerance
    after = _safety_counters_after(probe, time.monotonic())
    # the safety node passed every homing command as it was
    assert _num(after, "limited_ticks") == _num(before, "limited_ticks"), (before, after)
    assert _num(after, "brake_ticks") == _num(before, "brake_ticks")
    assert after.get("state") == "none"
    # the commanded steps keep the margin of the velocity limit
    _, commands = probe.series(probe.unsafe, t0)
    steps = np.abs(np.diff(commands, axis=0)).max(axis=0)
    bound = (
        CONTROLLER.home_limit_margin
        * SAFETY.limit_arrays(CONTROLLER.joint_names).velocity_limit_per_s
        * PERIOD_S
    )
    assert np.all(steps <= bound * (1 + 1e-6)), steps / bound
    assert np.abs(commands[-1] - HOME).max() <= 1e-9  # exactly home
    ctrl = wait_for(lambda: probe.status("vla_edge/controller").get("homing") == "done", 3.0)
    assert ctrl, probe.status("vla_edge/controller")


def test_chunks_are_refused_while_homing_and_taken_again_once_homed(arm):
    processes, probe = arm
    target = HOME + np.array([-0.2, 0.1, 0.2, -0.1, -0.1, 0.2, -0.01])
    probe.publish_home_pose(target)
    time.sleep(0.3)  # latched: the controller has it long before the call below
    t0 = time.monotonic()
    reply = _home_until_accepted(probe)
    assert reply.success and "home_pose pose" in reply.message, reply.message
    time.sleep(0.2)
    chunk = np.repeat(target[None, :], CONTROLLER.chunk_horizon, axis=0)
    probe.publish_chunk(chunk)  # while the arm moves: refused
    assert wait_for(lambda: probe.homed_since(t0), 15.0), _logs(processes)
    assert np.max(np.abs(probe.robot - target)) <= CONTROLLER.home_tolerance
    status = wait_for(
        lambda: _num(probe.status("vla_edge/controller"), "homing.chunks_refused") >= 1, 3.0
    )
    assert status, probe.status("vla_edge/controller")
    # homed: the next chunk is taken, and the arm has left home
    probe.publish_chunk(chunk)
    assert wait_for(lambda: probe.last_homed() is False, 3.0), probe.homed[-3:]
    assert wait_for(lambda: probe.status("vla_edge/controller").get("homing") == "idle", 3.0)


def test_home_is_refused_under_an_estop_and_an_estop_aborts_a_homing(arm):
    processes, probe = arm
    from std_msgs.msg import Bool

    probe.publish_home_pose(START)
    time.sleep(0.3)
    reply = _home_until_accepted(probe)
    assert reply.success, reply.message
    time.sleep(0.3)  # well into the move
    probe.estop_pub.publish(Bool(data=True))
    assert wait_for(
        lambda: (
            probe.status("vla_edge/controller")
            .get("homing.last_result", "")
            .startswith("aborted: the e-stop")
        ),
        3.0,
    ), probe.status("vla_edge/controller")
    reply = _call(probe, probe.home)
    assert not reply.success and "e-stop" in reply.message, reply.message
    probe.estop_pub.publish(Bool(data=False))
    reply = _call(probe, probe.safety_reset)
    assert reply.success, reply.message
    # the controller learns of the reset from the safety node's next status
    reply = _home_until_accepted(probe)
    assert reply.success, reply.message
    assert wait_for(lambda: probe.status("vla_edge/controller").get("homing") == "done", 15.0)
    assert not processes.exited(), _logs(processes)


def test_home_is_refused_while_the_joint_states_are_lost(arm):
    processes, probe = arm
    probe.robot_on = False
    try:
        time.sleep(3 * CONTROLLER.joint_state_timeout_s)
        reply = _call(probe, probe.home)
        assert not reply.success and "joint_state expired" in reply.message, reply.message
    finally:
        probe.robot_on = True
    assert not processes.exited(), _logs(processes)


# --- the sim's reset ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sim_arm(tmp_path_factory):
    log_dir = tmp_path_factory.mktemp("sim_homing_logs")
    overrides = {"sim_node": {**g.sim_parameters(TASK)}}
    only = ("sim_node", "safety_node", "controller_node")
    with some_nodes(only, log_dir, overrides) as (processes, probe):
        up = wait_for(
            lambda: probe.latest_measured() is not None and len(probe.unsafe) > 10,
            UP_TIMEOUT_S,
        )
        assert up, _logs(processes)
        yield processes, probe


def _set_init_state(probe, init_state_id: int) -> None:
    from rcl_interfaces.srv import SetParameters
    from rclpy.parameter import Parameter

    client = probe.node.create_client(SetParameters, "sim_node/set_parameters")
    assert client.wait_for_service(timeout_sec=5.0)
    request = SetParameters.Request()
    request.parameters = [
        Parameter("init_state_id", Parameter.Type.INTEGER, init_state_id).to_parameter_msg()
    ]
    future = client.call_async(request)
    assert wait_for(future.done, 5.0) and all(r.successful for r in future.result().results)


def test_the_sim_reset_homes_the_arm_to_the_scenes_initial_pose_first(sim_arm):
    processes, probe = sim_arm
    start = initial_joint_positions(TASK, 0)
    assert np.max(np.abs(probe.latest_measured() - start)) < 0.02  # at its initial state
    # move the arm away, as an episode does
    away = start + np.array([0.25, -0.15, 0.2, 0.1, -0.2, 0.3, -0.02])
    probe.publish_chunk(np.linspace(start, away, CONTROLLER.chunk_horizon))
    assert wait_for(lambda: np.max(np.abs(probe.latest_measured() - start)) > 0.2, 5.0)
    time.sleep(1.5)
    _set_init_state(probe, 3)
    t0 = time.monotonic()
    reply = _call(probe, probe.sim_reset, timeout_s=20.0)
    took_s = time.monotonic() - t0
    assert reply.success, f"{reply.message}\n{_logs(processes)}"
    assert probe.homed_since(t0)  # the reset waited for homed
    home = initial_joint_positions(TASK, 3)
    assert not np.allclose(home, start)
    assert np.max(np.abs(probe.latest_measured() - home)) <= CONTROLLER.home_tolerance
    assert took_s > 0.3, took_s  # a move, not a teleport
    sim = wait_for(lambda: _num(probe.status("vla_edge/sim"), "episode") >= 2, 3.0)
    assert sim, probe.status("vla_edge/sim")


def test_the_sim_reset_fails_with_the_reason_when_the_controller_refuses(sim_arm):
    processes, probe = sim_arm
    from std_msgs.msg import Bool

    episode = _num(probe.status("vla_edge/sim"), "episode")
    probe.estop_pub.publish(Bool(data=True))
    try:
        reply = _call(probe, probe.sim_reset, timeout_s=20.0)
        assert not reply.success, reply.message
        assert "controller_node/home" in reply.message and "e-stop" in reply.message
    finally:
        probe.estop_pub.publish(Bool(data=False))
        assert _call(probe, probe.safety_reset).success
    time.sleep(1.2)
    assert _num(probe.status("vla_edge/sim"), "episode") == episode  # no scene reset
    assert not processes.exited(), _logs(processes)


def test_an_estop_during_the_resets_homing_fails_the_reset_at_once(sim_arm):
    processes, probe = sim_arm
    from std_msgs.msg import Bool
    from std_srvs.srv import Trigger

    time.sleep(1.5)  # the controller has seen the last e-stop cleared
    here = probe.latest_measured()
    away = here + np.array([-0.3, 0.2, -0.2, -0.1, 0.25, -0.3, -0.02])
    probe.publish_chunk(np.linspace(here, away, CONTROLLER.chunk_horizon))
    assert wait_for(lambda: np.max(np.abs(probe.latest_measured() - here)) > 0.2, 5.0)
    time.sleep(1.5)
    episode = _num(probe.status("vla_edge/sim"), "episode")
    future = probe.sim_reset.call_async(Trigger.Request())
    try:
        moving = wait_for(
            lambda: probe.status("vla_edge/controller").get("homing") == "moving", 5.0
        )
        assert moving, probe.status("vla_edge/controller")
        probe.estop_pub.publish(Bool(data=True))
        t_estop = time.monotonic()
        assert wait_for(future.done, 5.0), "the reset did not end with the aborted homing"
        assert time.monotonic() - t_estop < 3.0  # not the sim's home_timeout_s
        reply = future.result()
        assert not reply.success and "HomingFailed" in reply.message, reply.message
    finally:
        probe.estop_pub.publish(Bool(data=False))
        assert _call(probe, probe.safety_reset).success
    assert _num(probe.status("vla_edge/sim"), "episode") == episode  # no scene reset
    assert "aborted: the e-stop" in probe.status("vla_edge/controller").get(
        "homing.last_result", ""
    )
    assert not processes.exited(), _logs(processes)
