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
"""

from __future__ import annotations

import threading
import time

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import Float64MultiArray
from trajectory_msgs.msg import JointTrajectory

from vla_edge.config.models import ControllerConfig
from vla_edge.control.controller import Controller
from vla_edge.control.supervision import accept_chunk, joint_states_lost, supervised_step
from vla_edge.control.watchdog import Watchdog
from vla_edge.core.errors import ChunkRejectedError, InvalidObservationError
from vla_edge.core.stop import StopCategory
from vla_edge.nodes import graph
from vla_edge.nodes.conversions import (
    S_PER_NS,
    chunk_to_trajectory,
    diagnostic_array,
    joint_state_to_positions,
    positions_to_multiarray,
    s_to_stamp,
    status_to_diagnostic,
    trajectory_to_chunk,
)
from vla_edge.nodes.fixed_rate import FixedRateLoop, try_realtime_process
from vla_edge.nodes.lifecycle import run_node, steady_timer
from vla_edge.nodes.metrics import BadInputCounter, Histogram, PeriodJitter
from vla_edge.nodes.params import declare_config

DIAGNOSTIC_NAME = "vla_edge/controller"
# How long shutdown waits for the control loop to finish its tick.
LOOP_STOP_TIMEOUT_S = 2.0
# How often the watchdog's category is compared with the last published one; a
# change is published at once (as diagnostic_updater's force_update would).
STOP_CHANGE_POLL_S = 0.05


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

        qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        self.command_pub = self.create_publisher(
            Float64MultiArray, graph.TOPIC_CONTROLLER_COMMAND, qos
        )
        self.plan_pub = self.create_publisher(JointTrajectory, graph.TOPIC_CONTROLLER_PLAN, qos)
        self.diag_pub = self.create_publisher(DiagnosticArray, graph.TOPIC_DIAGNOSTICS, 10)
        self.create_subscription(JointState, graph.TOPIC_JOINT_STATES, self._on_joint_state, qos)
        self.create_subscription(JointTrajectory, graph.TOPIC_ACTION_CHUNK, self._on_chunk, qos)
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
                self.controller = Controller(self.config, initial_positions=positions)
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
            command = supervised_step(controller, self.watchdog, now_s, self.measured)
            holding = controller.holding
            if holding and not self._was_holding and self._accepted_once:
                self.underruns += 1
            self._was_holding = holding
            plan = None
            if controller.needs_inference(now_s) and not joint_states_lost(self.watchdog, now_s):
                plan = self._plan_message(controller, now_s)
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
        }
        if self.controller is None:
            return {"level": "WARN", "message": "waiting for the first joint state", **values}
        values.update(self.controller.diagnostics(now_s))
        if category == StopCategory.CAT1:
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
        self.diag_pub.publish(
            diagnostic_array([status_to_diagnostic(self.diagnostic_name, status)], now_s)
        )

    def _publish_on_stop_change(self) -> None:
        """Publish the status now if the watchdog's category differs from the last published.

        At one status a second, a stop that began and cleared between two of them
        (a camera back after a second) would never appear on ``/diagnostics``.
        """
        with self.lock:
            category = self.watchdog.check(self._now_s())
        if category.value != self._published_category:
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
