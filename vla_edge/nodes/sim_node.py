"""Sim node: the MuJoCo tabletop stepped in real time, as a robot with cameras.

* steps the physics at the control rate (100 Hz, 5 substeps of 2 ms) on its
  own loop thread (``SCHED_FIFO`` where allowed, like a robot's hardware loop),
  catching up on late ticks so simulated time follows the wall clock;
* publishes ``camera/<name>/image_raw`` (rgb8) per camera at
  ``publish_rate_hz``, ``joint_states`` at ``joint_state_rate_hz``, the
  privileged ``sim/state`` with each camera frame (for the scripted expert),
  ``task_success`` (``std_msgs/Bool``) and the instruction on ``instruction``
  (transient-local); the names are relative (:mod:`vla_edge.nodes.graph`);
* takes the SAFE position command ``joint_commands`` (``Float64MultiArray``,
  as a ros2_control forward-command controller would);
* ``~/reset`` (``std_srvs/Trigger``) resets to the task and initial state
  named by the ``task`` / ``init_state_id`` parameters (the only writable
  ones: ``ros2 param set`` them, then reset). With ``home_on_reset`` (the
  default) it first homes the arm, as an operator would: it publishes the
  scene's initial arm pose (:func:`vla_edge.sim.tasks.initial_joint_positions`,
  where the evaluator starts) on ``home_pose`` (transient-local), waits until
  the subscribers have it, calls the controller's ``controller_node/home`` and
  waits for ``homed`` (``false`` when the homing starts, then ``true``) for at
  most ``home_timeout_s``; a refusal, a homing that ends short of the pose
  (``false`` again) or the timeout fails the reset with the reason.
  All of it awaits in the executor (an ``async`` callback in a callback group of
  its own), so commands keep arriving while the arm moves. Then it re-places
  the objects. The arm is never teleported (a real arm cannot jump), so the
  rest of the graph keeps a consistent view; the full initial state (arm
  included) is applied once at start. ``home_on_reset: false`` (a sim without
  a controller) re-places the objects only.

``suite``, ``task`` and ``init_state_id`` are checked by the sim
(:func:`vla_edge.sim.tasks.check_task`): at start a bad value stops the node
with the named error, on ``~/reset`` it refuses the request. If the initial
reset still fails, the node does not start (:class:`SimStartupError`).

All stamps are the node clock's time at which the state was observed.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.duration import Duration
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rclpy.task import Future
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Bool, Float64MultiArray, String
from std_srvs.srv import Trigger

from vla_edge.config.models import SimConfig
from vla_edge.core.clock import TIME_EPS_S
from vla_edge.core.errors import CommandJointMismatchError, ConfigError, VlaEdgeError
from vla_edge.nodes import graph
from vla_edge.nodes.conversions import (
    S_PER_NS,
    array_to_image,
    diagnostic_array,
    multiarray_to_positions,
    positions_to_joint_state,
    status_to_diagnostic,
)
from vla_edge.nodes.fixed_rate import FixedRateLoop, try_realtime_process
from vla_edge.nodes.lifecycle import run_node, steady_timer
from vla_edge.nodes.metrics import BadInputCounter
from vla_edge.nodes.params import declare_config
from vla_edge.nodes.sim_state import SimStateSnapshot, encode_sim_state
from vla_edge.sim.tasks import InstructionSchedule, check_task, initial_joint_positions

DIAGNOSTIC_NAME = "vla_edge/sim"
# Parameters read again on each ``~/reset`` (writable); the others are read at start.
RUN_TIME_PARAMETERS = ("task", "init_state_id")
# At most this many control periods are simulated in one callback to catch up.
MAX_CATCH_UP_STEPS = 10
RESET_TIMEOUT_S = 5.0
# The first reset also makes the renderer's GL context: allow it longer.
STARTUP_RESET_TIMEOUT_S = 30.0
# How long ~/reset waits for the controller's home service to be there (home_on_reset).
HOME_SERVICE_WAIT_S = 2.0
# Poll period of ~/reset's waits for the home pose's delivery and the home service.
HOME_POLL_S = 0.02


class SimStartupError(VlaEdgeError):
    """The initial reset of the scene failed or did not finish: the node cannot start."""


class _ResetRequest:
    """A reset to ``task`` / ``init_state_id`` asked of the loop thread, and its outcome."""

    def __init__(self, task: str, init_state_id: int, keep_arm: bool) -> None:
        self.task = task
        self.init_state_id = init_state_id
        self.keep_arm = keep_arm
        self.done = threading.Event()
        self.error: str | None = None


class _HomedWaiter:
    """The end of the homing a reset asked for, from ``homed``.

    The controller publishes ``false`` when it starts a homing, then ``true``
    (homed) or ``false`` again (aborted or failed). A ``true`` latched from an
    earlier homing comes before the first ``false`` and counts for nothing.
    """

    def __init__(self) -> None:
        self.future: Future[bool] = Future()
        self.saw_false = False

    def on_homed(self, homed: bool) -> None:
        if self.future.done():
            return
        if self.saw_false:
            self.future.set_result(homed)
        elif not homed:
            self.saw_false = True


class SimNode(Node):
    """Thin adapter around ``TabletopEnv``."""

    def __init__(self) -> None:
        super().__init__("sim_node")
        self.config = declare_config(self, SimConfig, run_time=RUN_TIME_PARAMETERS)
        self.diagnostic_name = graph.diagnostic_name(self.get_namespace(), DIAGNOSTIC_NAME)
        check_task(self.config.suite, self.config.task, self.config.init_state_id)
        from vla_edge.sim.env import PHYSICS_DT_S, TabletopEnv

        if abs(self.config.physics_hz - 1.0 / PHYSICS_DT_S) > 1e-6:
            raise ConfigError(
                f"physics_hz = {self.config.physics_hz}: the tabletop scene steps at "
                f"{1.0 / PHYSICS_DT_S:.0f} Hz"
            )
        self.env = TabletopEnv(
            image_height=self.config.image_height,
            image_width=self.config.image_width,
            cameras=self.config.cameras,
        )
        self.joint_names = tuple(self.env.joint_names)
        self.control_dt_s = float(self.env.control_dt_s)
        self.bad_input = BadInputCounter(self.get_logger().warning)
        self.episode = 0
        self.steps = 0
        self.late_steps = 0
        self.success = False
        self.schedule = InstructionSchedule(self.env.task, self.config.sequencer)
        self.instruction = ""
        self.instruction_changes = 0
        self.commands = 0
        self.targets: np.ndarray | None = None  # set by the first reset

        qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        latched = QoSProfile(
            depth=1,
            reliability=ReliabilityPolicy.RELIABLE,
            durability=DurabilityPolicy.TRANSIENT_LOCAL,
        )
        self.image_pubs = {
            cam: self.create_publisher(Image, graph.camera_topic(cam), qos)
            for cam in self.config.cameras
        }
        self.joint_pub = self.create_publisher(JointState, graph.TOPIC_JOINT_STATES, qos)
        self.state_pub = self.create_publisher(Float64MultiArray, graph.TOPIC_SIM_STATE, qos)
        self.success_pub = self.create_publisher(Bool, graph.TOPIC_TASK_SUCCESS, latched)
        self.instruction_pub = self.create_publisher(String, graph.TOPIC_INSTRUCTION, latched)
        self.diag_pub = self.create_publisher(DiagnosticArray, graph.TOPIC_DIAGNOSTICS, 10)
        self.create_subscription(
            Float64MultiArray, graph.TOPIC_JOINT_COMMANDS, self._on_command, qos
        )
        # ~/reset awaits the homing: its own callback group, so that the commands, the
        # controller's answer and homed keep coming in the default one meanwhile
        self.create_service(
            Trigger,
            graph.PRIVATE_RESET,
            self._on_reset_request,
            callback_group=MutuallyExclusiveCallbackGroup(),
        )
        self.home_pose_pub = self.create_publisher(JointState, graph.TOPIC_HOME_POSE, latched)
        homed_qos = QoSProfile(
            depth=10,  # a quick false, true pair is not coalesced into the true
            reliability=ReliabilityPolicy.RELIABLE,
            durability=DurabilityPolicy.TRANSIENT_LOCAL,
        )
        self.create_subscription(Bool, graph.TOPIC_HOMED, self._on_homed, homed_qos)
        self.home_client = self.create_client(Trigger, graph.SERVICE_CONTROLLER_HOME)
        self._homed_waiter: _HomedWaiter | None = None

        # The stepping loop (the robot's hardware loop) runs on its own thread;
        # ``self.lock`` serialises it with the callbacks that touch the env.
        self.lock = threading.Lock()
        self.loop_errors = 0
        # The renderer's GL context belongs to the thread that made it: every env call
        # that may render (reset included) runs on the loop thread.
        initial_reset = _ResetRequest(self.config.task, self.config.init_state_id, keep_arm=False)
        self._reset_request: _ResetRequest | None = initial_reset
        self._close_requested = threading.Event()
        self._closed = threading.Event()
        self._t0_wall_s = time.monotonic()
        self._next_joint_state_s = 0.0
        self._next_frame_s = 0.0
        steady_timer(self, graph.DIAGNOSTICS_PERIOD_S, self._publish_diagnostics)
        self.process_scheduler = try_realtime_process(max(0, self.config.realtime_priority - 1))
        self.loop = FixedRateLoop(
            1.0 / self.control_dt_s,
            self._on_tick,
            self._on_loop_error,
            realtime_priority=self.config.realtime_priority,
            name="sim_loop",
        )
        self.loop.start()
        self._await_initial_reset(initial_reset)

    def _await_initial_reset(self, reset: _ResetRequest) -> None:
        """Wait for the loop thread's first reset; stop the loop and raise if it failed.

        Raises:
            SimStartupError: the reset raised or did not finish in time.
        """
        if reset.done.wait(STARTUP_RESET_TIMEOUT_S) and reset.error is None:
            return
        why = reset.error or f"it did not finish within {STARTUP_RESET_TIMEOUT_S} s"
        self.close()
        raise SimStartupError(
            f"initial reset to task = {self.config.task!r}, init_state_id = "
            f"{self.config.init_state_id} failed: {why}"
        )

    def _now_s(self) -> float:
        return self.get_clock().now().nanoseconds * S_PER_NS

    # --- episode --------------------------------------------------------------------------

    def _reset_scene(self, reset: _ResetRequest) -> None:
        """Reset to the request's task and initial state (optionally keeping the arm)."""
        import mujoco

        task, init_state_id = reset.task, reset.init_state_id
        arm_qadr = self._arm_qpos_indices()
        arm_qpos = self.env.data.qpos[arm_qadr].copy()
        self.env.reset(task, init_state_id)
        if reset.keep_arm:
            self.env.data.qpos[arm_qadr] = arm_qpos
            self.env.data.qvel[:] = 0.0
            mujoco.mj_forward(self.env.model, self.env.data)
        self.targets = self.env.state()
        self.episode += 1
        self.success = False
        self.schedule = InstructionSchedule(self.env.task, self.config.sequencer)
        self.instruction = ""
        self._follow_task()
        self.success_pub.publish(Bool(data=False))
        self.get_logger().info(
            f"episode {self.episode}: task {task!r}, init state {init_state_id}: "
            f"{self.env.instruction!r}"
        )

    def _arm_qpos_indices(self) -> np.ndarray:
        """Addresses in ``qpos`` of the arm joints and the fingers."""
        model = self.env.model
        names = [*self.joint_names[:-1], "finger_left", "finger_right"]
        return np.array([int(model.joint(n).qposadr[0]) for n in names])

    async def _on_reset_request(
        self, request: Trigger.Request, response: Trigger.Response
    ) -> Trigger.Response:
        """``~/reset``: home the arm first (``home_on_reset``), then :meth:`_on_reset`."""
        if self.config.home_on_reset:
            task = str(self.get_parameter("task").value)
            init_state_id = int(self.get_parameter("init_state_id").value)
            try:
                check_task(self.config.suite, task, init_state_id)
            except VlaEdgeError:
                return self._on_reset(request, response)  # refuses and counts it
            why = await self._home_arm(task, init_state_id)
            if why is not None:
                response.success = False
                response.message = f"reset not done: {why}"
                self.get_logger().warning(response.message)
                return response
        return self._on_reset(request, response)

    async def _home_arm(self, task: str, init_state_id: int) -> str | None:
        """Home the arm to the initial pose of ``task`` #``init_state_id``; ``None``, or why not."""
        timeout_s = self.config.home_timeout_s
        deadline_s = time.monotonic() + timeout_s
        service = graph.SERVICE_CONTROLLER_HOME
        pose = initial_joint_positions(task, init_state_id)
        self.home_pose_pub.publish(positions_to_joint_state(self.joint_names, pose, self._now_s()))
        # the controller must hold the new pose before it is asked to home to it
        while not self.home_pose_pub.wait_for_all_acked(Duration(seconds=0)):
            if time.monotonic() > deadline_s:
                return (
                    f"the home pose on {graph.TOPIC_HOME_POSE} was not delivered in {timeout_s} s"
                )
            await self._sleep(HOME_POLL_S)
        service_deadline_s = min(deadline_s, time.monotonic() + HOME_SERVICE_WAIT_S)
        while not self.home_client.service_is_ready():
            if time.monotonic() > service_deadline_s:
                return (
                    f"no {service} service (no controller) within {HOME_SERVICE_WAIT_S} s; "
                    "home_on_reset: false resets a sim without a controller"
                )
            await self._sleep(HOME_POLL_S)
        waiter = _HomedWaiter()
        self._homed_waiter = waiter
        try:
            reply_future = self.home_client.call_async(Trigger.Request())
            if not await self._wait(reply_future, deadline_s - time.monotonic()):
                self.home_client.remove_pending_request(reply_future)
                return f"{service} did not answer within {timeout_s} s"
            reply = reply_future.result()
            if reply is None or not reply.success:
                return f"{service}: {'no reply' if reply is None else reply.message}"
            if not await self._wait(waiter.future, deadline_s - time.monotonic()):
                return (
                    f"HomingTimeout: no {graph.TOPIC_HOMED} from the controller within "
                    f"{timeout_s} s (home_timeout_s; its /diagnostics homing.last_result says why)"
                )
            if not waiter.future.result():
                return (
                    "HomingFailed: the controller's homing ended short of the home pose "
                    "(aborted or not settled: its /diagnostics homing.last_result says why)"
                )
        finally:
            self._homed_waiter = None
        self.get_logger().info(f"homed to the initial pose of {task!r} #{init_state_id}")
        return None

    def _on_homed(self, msg: Bool) -> None:
        waiter = self._homed_waiter
        if waiter is not None:
            waiter.on_homed(bool(msg.data))

    async def _sleep(self, seconds: float) -> None:
        """Let the executor run for ``seconds`` (from an ``async`` callback)."""
        await self._wait(Future(), seconds)

    async def _wait(self, future: Future[Any], timeout_s: float) -> bool:
        """Await ``future`` for at most ``timeout_s`` without blocking the executor; done?"""
        gate: Future[bool] = Future()

        def finish(done: bool) -> None:
            if not gate.done():
                gate.set_result(done)

        future.add_done_callback(lambda _: finish(True))
        timer = steady_timer(self, max(timeout_s, 1e-3), lambda: finish(False))
        try:
            return bool(await gate)
        finally:
            self.destroy_timer(timer)

    def _on_reset(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        """Reset to the ``task`` / ``init_state_id`` parameters; refuse a scene the sim lacks."""
        del request
        task = str(self.get_parameter("task").value)
        init_state_id = int(self.get_parameter("init_state_id").value)
        try:
            check_task(self.config.suite, task, init_state_id)
        except VlaEdgeError as exc:
            response.success = False
            response.message = f"{type(exc).__name__}: {exc}"
            self.bad_input.record("reset_parameters", response.message)
            return response
        reset = _ResetRequest(task, init_state_id, keep_arm=True)
        with self.lock:
            self._reset_request = reset
        if not reset.done.wait(RESET_TIMEOUT_S):
            response.success = False
            response.message = f"the sim loop did not reset within {RESET_TIMEOUT_S} s"
            return response
        if reset.error is not None:
            self.bad_input.record("reset_parameters", reset.error)
            response.success = False
            response.message = reset.error
            return response
        response.success = True
        response.message = f"episode {self.episode}: {self.env.instruction}"
        return response

    def _serve_reset_locked(self) -> None:
        """Perform a pending reset (on the loop thread)."""
        reset, self._reset_request = self._reset_request, None
        if reset is None:
            return
        try:
            self._reset_scene(reset)
        except VlaEdgeError as exc:
            reset.error = f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # the waiter learns of it; the loop counts it
            reset.error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            # no catch-up burst for the time the reset took
            self._t0_wall_s = time.monotonic() - self.steps * self.control_dt_s
            reset.done.set()

    # --- inputs ---------------------------------------------------------------------------

    def _on_command(self, msg: Float64MultiArray) -> None:
        try:
            targets = multiarray_to_positions(msg, len(self.joint_names))
        except CommandJointMismatchError as exc:
            self.bad_input.record("command_size", str(exc))
            return
        if not np.all(np.isfinite(targets)):
            self.bad_input.record("command_non_finite", f"targets = {targets.tolist()}")
            return
        with self.lock:
            self.targets = targets
            self.commands += 1

    # --- real-time stepping ---------------------------------------------------------------

    def _on_loop_error(self, exc: BaseException) -> None:
        if not self.context.ok():
            return  # publishing raced with shutdown
        self.loop_errors += 1
        if self.loop_errors == 1:
            self.get_logger().error(f"sim loop error: {exc!r} (logged once; counted)")

    def _on_tick(self) -> None:
        """Advance the physics to the wall clock (on the loop thread)."""
        if self._close_requested.is_set():
            if not self._closed.is_set():
                with self.lock:
                    self.env.close()
                self._closed.set()
            return
        if not self.context.ok():
            return
        with self.lock:
            self._serve_reset_locked()
            self._step_to_wall_clock()

    def _step_to_wall_clock(self) -> None:
        if self.targets is None:  # no scene yet (the initial reset failed)
            return
        due = int((time.monotonic() - self._t0_wall_s) / self.control_dt_s) - self.steps
        if due <= 0:
            return
        if due > MAX_CATCH_UP_STEPS:  # far behind (e.g. the process was paused): drop time
            self.late_steps += due - MAX_CATCH_UP_STEPS
            self._t0_wall_s += (due - MAX_CATCH_UP_STEPS) * self.control_dt_s
            due = MAX_CATCH_UP_STEPS
        for _ in range(due):
            self.env.step(self.targets)
            self.steps += 1
        now_s = self._now_s()
        sim_s = self.steps * self.control_dt_s
        if sim_s >= self._next_joint_state_s:
            self._next_joint_state_s = sim_s + 1.0 / self.config.joint_state_rate_hz - TIME_EPS_S
            self.joint_pub.publish(
                positions_to_joint_state(self.joint_names, self.env.state(), now_s)
            )
        if sim_s >= self._next_frame_s:
            self._next_frame_s = sim_s + 1.0 / self.config.publish_rate_hz - TIME_EPS_S
            self._publish_frame(now_s)

    def _publish_frame(self, stamp_s: float) -> None:
        """Images of every camera, the privileged state and success, all at ``stamp_s``."""
        data = self.env.data
        self.state_pub.publish(
            encode_sim_state(
                SimStateSnapshot(
                    task=self.env.task.name,
                    episode=self.episode,
                    init_state_id=self.env.init_state_id,
                    time_s=stamp_s,
                    qpos=data.qpos,
                    qvel=data.qvel,
                )
            )
        )
        for cam, pub in self.image_pubs.items():
            pub.publish(array_to_image(self.env.render(cam), stamp_s, frame_id=cam))
        success = bool(self.env.success())
        if success and not self.success:
            self.get_logger().info(f"task success after {self.steps * self.control_dt_s:.1f} s")
        self.success = self.success or success
        self.success_pub.publish(Bool(data=success))
        self._follow_task()

    def _follow_task(self) -> None:
        """Publish the instruction in force when it changes (a switch, the sequencer's next)."""
        self.schedule.advance(self.env.scene_state())
        active = self.schedule.active(self.env.time_s)
        if active.instruction != self.instruction:
            self.instruction_changes += int(bool(self.instruction))  # not the episode's first
            self.instruction = self.env.instruction = active.instruction
            self.instruction_pub.publish(String(data=self.instruction))
            self.get_logger().info(f"instruction: {self.instruction!r}")

    # --- diagnostics ----------------------------------------------------------------------

    def _publish_diagnostics(self) -> None:
        now_s = self._now_s()
        with self.lock:
            status = self._status()
        self.diag_pub.publish(
            diagnostic_array([status_to_diagnostic(self.diagnostic_name, status)], now_s)
        )

    def _status(self) -> dict[str, object]:
        return {
            "level": "OK",
            "message": f"episode {self.episode}: {self.env.task.name}",
            "task": self.env.task.name,
            "episode": self.episode,
            "sim_time_s": self.steps * self.control_dt_s,
            "late_steps_dropped": self.late_steps,
            "commands_received": self.commands,
            "success": int(self.success),
            "subtasks_done": self.schedule.done,
            "instruction_changes": self.instruction_changes,
            "penetrating_contacts": self.env.penetrating_contacts(),
            "loop_scheduler": self.loop.scheduler,
            "process_scheduler": self.process_scheduler,
            "loop_missed_deadlines": self.loop.missed_deadlines,
            "loop_errors": self.loop_errors,
            **self.bad_input.as_values(),
        }

    def close(self) -> None:
        """Release the renderer (on the loop thread that owns its context), stop the loop."""
        self._close_requested.set()
        self._closed.wait(RESET_TIMEOUT_S)
        self.loop.stop()


def main(args: list[str] | None = None) -> int:
    """Run the sim node until Ctrl-C or external shutdown."""
    return run_node(
        "sim_node",
        SimNode,
        cleanup=lambda node: node.close(),
        args=args,
    )


if __name__ == "__main__":
    raise SystemExit(main())
