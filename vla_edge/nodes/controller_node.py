"""Controller node: a fixed-rate loop stepping the control core.

The loop runs on its own thread with absolute deadlines (and ``SCHED_FIFO``
where allowed, see :mod:`vla_edge.nodes.fixed_rate`), so subscription
callbacks never delay a control tick; a lock serialises it with them.

Subscribes ``action_chunk`` (``JointTrajectory`` stamped with the observation
time) and ``joint_states``; publishes the UNSAFE command on
``controller/command`` (the safety node filters it), an inference request on
``controller/plan`` whenever its trigger asks for a new chunk (its remaining
plan with the ``prefix`` merge, the executed prefix the next chunk is
conditioned on; an empty trajectory otherwise), and ``/diagnostics``: chunk age, buffer depth,
rejections, loop period jitter, watchdog. The status goes out once a second and
at once when the watchdog's stop category changes, so a stop shorter than the
period still shows.

Nothing is commanded before the first joint state: the controller starts from
the measured positions.

Homing (:mod:`vla_edge.control.homing`): ``~/home`` (``std_srvs/Trigger``)
starts a minimum-jerk trajectory from the last command to the pose last
received on ``home_pose`` (``sensor_msgs/JointState`` by name, transient-local),
else to ``home_positions``, keeping ``home_limit_margin`` of the safety node's
limits; it answers at once (the trajectory's duration) and goes out on
``controller/command`` through the safety node like any command. While it runs,
and until the arm is within ``home_tolerance`` of the pose, the chunk buffer is
dropped, chunks are refused (counted in ``homing.chunks_refused``) and no
inference is requested; then the controller holds at the pose and ``homed``
(``std_msgs/Bool``, transient-local) turns true, until the next accepted chunk.
``homed: false`` goes out when a homing starts and again when one ends short of
the pose (aborted, or not within the tolerance in ``home_settle_timeout_s``), so
a caller that asked sees ``false`` then ``true`` or ``false``.
Refused (``success: false`` and why) before the first joint state, while the
watchdog finds the joint states (or the control loop) lost, while the safety
node holds a category-1/0 stop (``estop`` at once; its ``/diagnostics`` status,
once a second) and without a home pose. Joint states lost or a safety stop
during the move abort it with a jerk-limited stop
(:mod:`vla_edge.control.jerk_stop`). An expired ``chunk`` or ``observation``
heartbeat does not refuse homing: the policy is idle, which is when one homes.
``/diagnostics`` carries ``homing`` (idle / moving / done),
``homing.remaining_s`` and ``homing.last_result``.
"""

from __future__ import annotations

import threading
import time
from collections import deque

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, Float64MultiArray
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory

from vla_edge.config.models import ControllerConfig
from vla_edge.control.controller import Controller
from vla_edge.control.homing import (
    HomePoseError,
    Homing,
    HomingError,
    HomingPhase,
    MotionState,
    SafetyStopView,
    check_home_pose,
    homing_limits_for,
)
from vla_edge.control.shaping import command_limits_for, load_safety_config
from vla_edge.control.supervision import accept_chunk, joint_states_lost, supervised_step
from vla_edge.control.watchdog import Watchdog
from vla_edge.core.errors import ChunkRejectedError, InvalidObservationError
from vla_edge.core.stop import StopCategory
from vla_edge.core.types import JointCommand
from vla_edge.nodes import graph
from vla_edge.nodes.conversions import (
    S_PER_NS,
    chunk_to_trajectory,
    diagnostic_array,
    diagnostic_values,
    joint_state_to_positions,
    positions_to_multiarray,
    s_to_stamp,
    stamp_to_s,
    status_to_diagnostic,
    trajectory_to_chunk,
)
from vla_edge.nodes.fixed_rate import FixedRateLoop, try_realtime_process
from vla_edge.nodes.lifecycle import run_node, steady_timer
from vla_edge.nodes.metrics import BadInputCounter, Histogram, PeriodJitter
from vla_edge.nodes.params import declare_config
from vla_edge.nodes.safety_node import DIAGNOSTIC_NAME as SAFETY_DIAGNOSTIC_NAME

DIAGNOSTIC_NAME = "vla_edge/controller"
# How long shutdown waits for the control loop to finish its tick.
LOOP_STOP_TIMEOUT_S = 2.0
# How often the watchdog's category is compared with the last published one; a
# change is published at once (as diagnostic_updater's force_update would).
STOP_CHANGE_POLL_S = 0.05
# The safety node's status comes once a DIAGNOSTICS_PERIOD_S; this many periods without
# one and the controller takes the safety node for silent (homing refused).
SAFETY_STATUS_PERIODS = 3.0
# Heartbeats whose expiry refuses (and aborts) homing: the homing needs the measured
# positions and the loop; the chunk and observation heartbeats are the policy's.
HOMING_HEARTBEATS = ("joint_state", "control_loop")


class ControllerNode(Node):
    """Thin adapter: ROS messages in, :class:`Controller` in the middle, commands out."""

    def __init__(self) -> None:
        super().__init__("controller_node")
        self.config = declare_config(self, ControllerConfig)
        self.diagnostic_name = graph.diagnostic_name(self.get_namespace(), DIAGNOSTIC_NAME)
        self.joint_names = tuple(self.config.joint_names)
        self.controller: Controller | None = None
        self.watchdog = Watchdog.from_controller_config(self.config, start_s=self._now_s())
        self.measured: np.ndarray | None = None
        self.bad_input = BadInputCounter(self.get_logger().warning)
        self._logged_rejections: set[str] = set()
        self.jitter = PeriodJitter(1.0 / self.config.rate_hz)
        self.chunk_age_ms = Histogram(1.0, 5000.0)
        self.underruns = 0
        self.loop_errors = 0
        # The control loop runs on its own thread; callbacks and the loop share the core.
        self.lock = threading.Lock()
        self._was_holding = True
        self._accepted_once = False
        self._published_category = StopCategory.NONE.value
        # the command keeps inside the safety node's limits (command_limit_margin of them)
        safety = load_safety_config(self.config)  # read once, for both bounds
        self.command_limits = (
            command_limits_for(self.config, safety) if self.config.command_limit_margin else None
        )
        self.homing = Homing(
            homing_limits_for(self.config, safety),
            1.0 / self.config.rate_hz,
            self.joint_names,
            self.config.home_tolerance,
            self.config.home_settle_timeout_s,
        )
        self.safety_stop = SafetyStopView(SAFETY_STATUS_PERIODS * graph.DIAGNOSTICS_PERIOD_S)
        self._safety_status_name = graph.diagnostic_name(
            self.get_namespace(), SAFETY_DIAGNOSTIC_NAME
        )
        self._home_pose: np.ndarray | None = None  # the last one received on home_pose
        self._recent_commands: deque[np.ndarray] = deque(maxlen=3)  # where a homing starts
        self._published_homed: bool | None = None
        self._published_homing = HomingPhase.IDLE.value
        self._published_refusing = False

        qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        latched = QoSProfile(
            depth=1,
            reliability=ReliabilityPolicy.RELIABLE,
            durability=DurabilityPolicy.TRANSIENT_LOCAL,
        )
        self.command_pub = self.create_publisher(
            Float64MultiArray, graph.TOPIC_CONTROLLER_COMMAND, qos
        )
        self.plan_pub = self.create_publisher(JointTrajectory, graph.TOPIC_CONTROLLER_PLAN, qos)
        self.diag_pub = self.create_publisher(DiagnosticArray, graph.TOPIC_DIAGNOSTICS, 10)
        self.create_subscription(JointState, graph.TOPIC_JOINT_STATES, self._on_joint_state, qos)
        self.create_subscription(JointTrajectory, graph.TOPIC_ACTION_CHUNK, self._on_chunk, qos)
        self.homed_pub = self.create_publisher(Bool, graph.TOPIC_HOMED, latched)
        self.create_subscription(JointState, graph.TOPIC_HOME_POSE, self._on_home_pose, latched)
        self.create_subscription(Bool, graph.TOPIC_ESTOP, self._on_estop, qos)
        self.create_subscription(
            DiagnosticArray, graph.TOPIC_DIAGNOSTICS, self._on_diagnostics, qos
        )
        self.create_service(Trigger, graph.PRIVATE_HOME, self._on_home)
        with self.lock:
            self._publish_homed_locked()
        steady_timer(self, graph.DIAGNOSTICS_PERIOD_S, self._publish_diagnostics)
        steady_timer(self, STOP_CHANGE_POLL_S, self._publish_on_stop_change)
        # callbacks and DDS threads one step below the loop, so input is never starved
        self.process_scheduler = try_realtime_process(max(0, self.config.realtime_priority - 1))
        self.loop = FixedRateLoop(
            self.config.rate_hz,
            self._on_tick,
            self._on_loop_error,
            realtime_priority=self.config.realtime_priority,
            name="control_loop",
        )
        self.loop.start()
        self.get_logger().info(
            f"controller at {self.config.rate_hz} Hz, merge={self.config.merge}, "
            f"trigger={self.config.infer_trigger}, max_chunk_age_s={self.config.max_chunk_age_s}"
        )

    def _now_s(self) -> float:
        return self.get_clock().now().nanoseconds * S_PER_NS

    # --- inputs ---------------------------------------------------------------------------

    def _on_joint_state(self, msg: JointState) -> None:
        try:
            positions = joint_state_to_positions(msg, self.joint_names)
        except InvalidObservationError as exc:
            self.bad_input.record(getattr(exc, "reason", type(exc).__name__), str(exc))
            return
        with self.lock:
            now_s = self._now_s()
            self.measured = positions
            self.watchdog.beat("joint_state", now_s)
            if self.controller is None:
                self.controller = self._new_controller(positions)
                self.get_logger().info(f"first joint state: holding at {np.round(positions, 3)}")

    def _on_chunk(self, msg: JointTrajectory) -> None:
        try:
            chunk = trajectory_to_chunk(msg, self.config.dt_action_s)
        except ChunkRejectedError as exc:
            self.bad_input.record(f"chunk_{exc.reason}", str(exc))
            return
        with self.lock:
            now_s = self._now_s()
            if self.controller is None:
                self.bad_input.record("chunk_before_joint_state", "chunk before any joint state")
                return
            if joint_states_lost(self.watchdog, now_s):
                self.bad_input.record("chunk_without_joint_state", "joint states lost: refused")
                return
            if not self.homing.accepts_chunks:
                self.homing.refuse_chunk()  # counted on /diagnostics: homing.chunks_refused
                return
            try:
                accept_chunk(self.controller, self.watchdog, chunk, now_s)
            except ChunkRejectedError as exc:  # counted by the controller core
                if exc.reason not in self._logged_rejections:
                    self._logged_rejections.add(exc.reason)
                    self.get_logger().warning(
                        f"chunk rejected ({exc.reason}): {exc} (logged once; counted on "
                        "/diagnostics)"
                    )
                return
            # only accepted chunks: one stamped 0 or from the future would swamp the metric
            self.chunk_age_ms.add((now_s - chunk.t_obs_s) * 1e3)
            self._accepted_once = True
            if self.homing.homed:  # the next episode begins: the arm leaves home
                self.homing.leave_home()
                self._publish_homed_locked()

    def _on_home_pose(self, msg: JointState) -> None:
        try:
            positions = joint_state_to_positions(msg, self.joint_names)
            positions = check_home_pose(positions, self.joint_names, self.homing.limits.home)
        except (InvalidObservationError, HomePoseError) as exc:
            reason = str(getattr(exc, "reason", type(exc).__name__))
            cause = reason if reason.startswith("home_pose") else f"home_pose_{reason}"
            self.bad_input.record(cause, str(exc))
            return
        with self.lock:
            changed = self._home_pose is None or not np.array_equal(self._home_pose, positions)
            self._home_pose = positions
        if changed:
            self.get_logger().info(
                f"home pose from {graph.TOPIC_HOME_POSE}: {np.round(positions, 4)}"
            )

    def _on_estop(self, msg: Bool) -> None:
        if msg.data:  # the safety node latches; its status says when the latch is cleared
            with self.lock:
                self.safety_stop.on_estop(self._now_s())

    def _on_diagnostics(self, msg: DiagnosticArray) -> None:
        for status in msg.status:
            if status.name != self._safety_status_name:
                continue
            values = diagnostic_values(status)
            if "state" not in values:  # no joint state yet: the safety node holds nothing
                continue
            with self.lock:
                self.safety_stop.on_status(
                    values["state"],
                    values.get("reasons", ""),
                    values.get("estop_latched") == "1",
                    stamp_to_s(msg.header.stamp),
                    self._now_s(),
                )

    # --- homing ---------------------------------------------------------------------------

    def _on_home(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        """Start homing (answers at once; ``homed`` says when the arm is there)."""
        del request
        with self.lock:
            now_s = self._now_s()
            why = self._homing_refusal_locked(now_s)
            source, pose = self._home_target_locked()
            if why is None and pose is None:
                why = (
                    f"no home pose: home_positions is empty and none came on "
                    f"{graph.TOPIC_HOME_POSE}"
                )
            trajectory = None
            if why is None:
                try:
                    start = MotionState.from_commands(self._recent_commands, self.homing.period_s)
                    trajectory = self.homing.start(start, pose, now_s)
                except HomingError as exc:
                    why = f"{type(exc).__name__}: {exc}"
            if trajectory is None:
                self.homing.refuse(str(why))
                response.success = False
                response.message = f"home refused: {why}"
            else:
                assert self.controller is not None
                self.controller.buffer.clear()  # the plan is void; a fresh core takes over
                self._publish_homed_locked(force=True)  # false, also if it was already
                response.success = True
                response.message = (
                    f"homing to the {source} pose {np.round(trajectory.goal, 4).tolist()} in "
                    f"{trajectory.duration_s:.2f} s"
                )
        if response.success:  # one call site per severity (rclpy's logger insists)
            self.get_logger().info(response.message)
        else:
            self.get_logger().warning(response.message)
        return response

    def _home_target_locked(self) -> tuple[str, np.ndarray | None]:
        """The pose ``~/home`` moves to and where it comes from."""
        if self._home_pose is not None:
            return graph.TOPIC_HOME_POSE, self._home_pose.copy()
        if self.config.home_positions:
            return "home_positions", np.asarray(self.config.home_positions, dtype=np.float64)
        return "", None

    def _homing_refusal_locked(self, now_s: float) -> str | None:
        """Why a homing may not start (or go on) now; ``None``: it may."""
        if self.controller is None:
            return "no joint state yet: the arm's position is unknown"
        expired = [name for name in self.watchdog.expired(now_s) if name in HOMING_HEARTBEATS]
        if expired:
            return f"watchdog: {', '.join(expired)} expired (category 1 stop)"
        return self.safety_stop.stop_reason(now_s)

    def _homing_step_locked(self, now_s: float) -> JointCommand:
        """The homing trajectory's sample for this tick (an abort turns it into a stop)."""
        why = self._homing_refusal_locked(now_s)
        if why is not None and self.homing.phase == HomingPhase.MOVING:
            self.homing.abort(
                why, MotionState.from_commands(self._recent_commands, self.homing.period_s)
            )
            self.get_logger().warning(f"homing {self.homing.last_result}")
            self._publish_homed_locked(force=True)  # false again: ended short of home
        positions = self.homing.next_command(now_s)
        if positions is None:  # aborted without a stop inside the limits: hold here
            positions = self._recent_commands[-1].copy()
        if not self.homing.following:
            self._hand_over_locked(positions)
        return JointCommand(now_s, self.joint_names, positions)

    def _hand_over_locked(self, positions: np.ndarray) -> None:
        """The trajectory has ended at ``positions``: a fresh controller core holds there.

        The old core's plan is void (its buffer was dropped when homing began);
        its counters go on in the new one.
        """
        assert self.controller is not None
        counters = self.controller.counters
        self.controller = self._new_controller(positions)
        self.controller.counters = counters
        self._was_holding = True

    def _new_controller(self, positions: np.ndarray) -> Controller:
        """A controller core holding at ``positions``."""
        return Controller(self.config, initial_positions=positions, limits=self.command_limits)

    def _update_homing_locked(self, now_s: float) -> None:
        """After the trajectory: settle (``done``) or abort; publish ``homed`` if it changed."""
        if self.homing.phase == HomingPhase.MOVING and not self.homing.following:
            why = self._homing_refusal_locked(now_s)
            if why is not None:
                self.homing.abort(why, MotionState.at_rest(self._recent_commands[-1]))
                self.get_logger().warning(f"homing {self.homing.last_result}")
                self._publish_homed_locked(force=True)  # false again: ended short of home
        phase = self.homing.phase
        self.homing.update(self.measured, now_s)
        if phase != self.homing.phase and self.homing.homed:
            self.get_logger().info(f"homing {self.homing.last_result}")
        elif phase != self.homing.phase:  # failed: not within home_tolerance in time
            self.get_logger().warning(f"homing {self.homing.last_result}")
            self._publish_homed_locked(force=True)  # false again: ended short of home
        self._publish_homed_locked()

    def _publish_homed_locked(self, force: bool = False) -> None:
        """Publish ``homed`` when it changed (or when ``force``)."""
        homed = self.homing.homed
        if (force or homed != self._published_homed) and self.context.ok():
            self.homed_pub.publish(Bool(data=homed))
            self._published_homed = homed

    # --- the control loop -----------------------------------------------------------------

    def _on_tick(self) -> None:
        """One control period (on the loop thread)."""
        with self.lock:
            self.jitter.tick(time.monotonic())
            now_s = self._now_s()
            self.watchdog.beat("control_loop", now_s)
            controller = self.controller
            if controller is None:
                return
            plan = None
            if self.homing.following:
                command = self._homing_step_locked(now_s)
            else:
                command = supervised_step(controller, self.watchdog, now_s, self.measured)
                holding = controller.holding
                if holding and not self._was_holding and self._accepted_once:
                    self.underruns += 1
                self._was_holding = holding
                if (
                    self.homing.accepts_chunks
                    and controller.needs_inference(now_s)
                    and not joint_states_lost(self.watchdog, now_s)
                ):
                    plan = self._plan_message(controller, now_s)
            self._recent_commands.append(np.array(command.positions, dtype=np.float64))
            self._update_homing_locked(now_s)
        if not self.context.ok():  # shutting down: the publishers are gone
            return
        self.command_pub.publish(positions_to_multiarray(command.positions))
        if plan is not None:
            self.plan_pub.publish(plan)

    def _on_loop_error(self, exc: BaseException) -> None:
        if not self.context.ok():
            return  # publishing raced with shutdown
        self.loop_errors += 1
        if self.loop_errors == 1:
            self.get_logger().error(
                f"control loop error ({type(exc).__name__}): {exc} (logged once; counted)"
            )

    def _plan_message(self, controller: Controller, now_s: float) -> JointTrajectory:
        return plan_request(controller, now_s, self.joint_names)

    # --- diagnostics ----------------------------------------------------------------------

    def status(self, now_s: float) -> dict[str, object]:
        """Status dict for ``/diagnostics``.

        The lock (which the control loop takes every tick) is held only to read the
        state and copy the histograms; their percentiles and bins are formatted after
        it is released. Formatting them under the lock took milliseconds once the bins
        had filled, once a second: the loop's p99 jitter grew with the run.
        """
        with self.lock:
            status = self._status_locked(now_s)
            histograms = {
                "period_jitter_ms": self.jitter.jitter_ms.copy(),
                "period_ms": self.jitter.period_ms.copy(),
                "chunk_age_ms": self.chunk_age_ms.copy(),
            }
        for prefix, histogram in histograms.items():
            status.update(histogram.summary(prefix))
        return status

    def _status_locked(self, now_s: float) -> dict[str, object]:
        expired = self.watchdog.expired(now_s)
        category = self.watchdog.check(now_s)
        values: dict[str, object] = {
            "rate_hz": self.config.rate_hz,
            "max_chunk_age_s": self.config.max_chunk_age_s,
            "watchdog_category": category.value,
            "watchdog_expired": ",".join(expired),
            "buffer_underruns": self.underruns,
            "loop_scheduler": self.loop.scheduler,
            "process_scheduler": self.process_scheduler,
            "loop_missed_deadlines": self.loop.missed_deadlines,
            "loop_errors": self.loop_errors,
            **self.bad_input.as_values(),
            **self.homing.status(),
            # why ~/home would be refused now ("" when it would start)
            "homing.refusal": self._homing_refusal_locked(now_s) or "",
        }
        if self.controller is None:
            return {"level": "WARN", "message": "waiting for the first joint state", **values}
        values.update(self.controller.diagnostics(now_s))
        if self.homing.following or self.homing.phase == HomingPhase.MOVING:
            level = "OK"
            message = (
                f"homing: {self.homing.remaining_s():.1f} s left"
                if self.homing.following
                else "homing: waiting for the arm to reach the home pose"
            )
        elif category == StopCategory.CAT1:
            level, message = "ERROR", f"watchdog expired: {', '.join(expired)}"
        elif self.controller.holding:
            level, message = "WARN", "holding (no buffered chunk)"
        else:
            level, message = "OK", "following chunks"
        return {"level": level, "message": message, **values}

    def _publish_diagnostics(self) -> None:
        now_s = self._now_s()
        status = self.status(now_s)
        self._published_category = str(status["watchdog_category"])
        self._published_homing = str(status["homing"])
        self._published_refusing = bool(status["homing.refusal"])
        self.diag_pub.publish(
            diagnostic_array([status_to_diagnostic(self.diagnostic_name, status)], now_s)
        )

    def _publish_on_stop_change(self) -> None:
        """Publish the status now if the watchdog's category or the homing phase changed.

        Or whether ``~/home`` would be refused. At one status a second, a stop that began
        and cleared between two of them (a camera back after a second) would never appear
        on ``/diagnostics``.
        """
        with self.lock:
            now_s = self._now_s()
            category = self.watchdog.check(now_s)
            phase = self.homing.phase.value
            refusing = self._homing_refusal_locked(now_s) is not None
        if (
            category.value != self._published_category
            or phase != self._published_homing
            or refusing != self._published_refusing
        ):
            self._publish_diagnostics()

    def close(self) -> None:
        """Stop the control loop; say so if its thread is still inside a tick."""
        if not self.loop.stop(timeout_s=LOOP_STOP_TIMEOUT_S):
            self.get_logger().warning(
                f"control loop thread still running {LOOP_STOP_TIMEOUT_S} s after stop "
                f"(ticks {self.loop.ticks}); destroying the node anyway"
            )


def plan_request(controller: Controller, now_s: float, joint_names: list[str]) -> JointTrajectory:
    """The inference request: :meth:`Controller.prefix_plan`, or an empty trajectory.

    The empty request (other merges, or holding) is stamped ``now_s``.
    """
    plan = controller.prefix_plan(now_s)
    if plan is None:
        empty = JointTrajectory()
        empty.header.stamp = s_to_stamp(now_s)
        empty.joint_names = list(joint_names)
        return empty
    return chunk_to_trajectory(plan)


def main(args: list[str] | None = None) -> int:
    """Run the controller node until Ctrl-C or external shutdown."""
    return run_node(
        "controller_node",
        ControllerNode,
        cleanup=ControllerNode.close,
        args=args,
        fast_gil_switch=True,
    )


if __name__ == "__main__":
    raise SystemExit(main())
