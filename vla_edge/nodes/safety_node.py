"""Safety node: the independent last stage before the robot.

A separate process with its own parameter file (``config/safety.yaml``). It
imports only the safety core, ``vla_edge.core``, ``vla_edge.config``, rclpy,
standard messages and the ROS-free graph names, parameter declaration and
``main()`` of ``vla_edge.nodes`` (a test checks this), so that it keeps holding
the robot whatever happens upstream; its few message helpers are therefore local.

Topic names are relative (:mod:`vla_edge.nodes.graph`):

* ``controller/command`` (``Float64MultiArray``, the unsafe command) and
  ``joint_states`` in;
* ``joint_commands`` (``Float64MultiArray``) out from a loop thread
  (``SCHED_FIFO`` where allowed) clocked by the incoming commands: the filtered
  command on each one, or the supervisor's hold at ``rate_hz`` when they stop;
* ``estop`` (``std_msgs/Bool``, ``true`` latches), ``safety/reset``
  (``std_srvs/Trigger``; never resumes motion by itself);
* ``/diagnostics``: the supervisor's status and counters plus bad-input counts.

Nothing is published before the first joint state: the limiter starts from
the measured positions.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np
from builtin_interfaces.msg import Time
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_msgs.msg import Bool, Float64MultiArray, MultiArrayDimension
from std_srvs.srv import Trigger

from vla_edge.config.models import SafetyConfig
from vla_edge.core.errors import InvalidCommandError
from vla_edge.core.types import JointCommand
from vla_edge.nodes import graph
from vla_edge.nodes.lifecycle import run_node, steady_timer
from vla_edge.nodes.params import declare_config
from vla_edge.safety.supervisor import SafetySupervisor

_S_PER_NS = 1e-9  # nodes.conversions.S_PER_NS, local like the other message helpers

DIAGNOSTIC_NAME = "vla_edge/safety"
_LEVELS = (
    DiagnosticStatus.OK,
    DiagnosticStatus.WARN,
    DiagnosticStatus.ERROR,
    DiagnosticStatus.STALE,
)


class SafetyNode(Node):
    """Thin adapter around :class:`SafetySupervisor`."""

    def __init__(self) -> None:
        super().__init__("safety_node")
        self.config = declare_config(self, SafetyConfig)
        self.diagnostic_name = graph.diagnostic_name(self.get_namespace(), DIAGNOSTIC_NAME)
        self.joint_names = tuple(self.config.joint_names)
        self.supervisor: SafetySupervisor | None = None
        self._pending: JointCommand | None = None
        self._estop_before_start = False
        self.bad_input: dict[str, int] = {}
        self.published = 0
        self.lock = threading.Condition()

        qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        self.command_pub = self.create_publisher(Float64MultiArray, graph.TOPIC_JOINT_COMMANDS, qos)
        self.diag_pub = self.create_publisher(DiagnosticArray, graph.TOPIC_DIAGNOSTICS, 10)
        self.create_subscription(
            Float64MultiArray, graph.TOPIC_CONTROLLER_COMMAND, self._on_command, qos
        )
        self.create_subscription(JointState, graph.TOPIC_JOINT_STATES, self._on_joint_state, qos)
        self.create_subscription(Bool, graph.TOPIC_ESTOP, self._on_estop, qos)
        self.create_service(Trigger, graph.SERVICE_SAFETY_RESET, self._on_reset)
        steady_timer(self, graph.DIAGNOSTICS_PERIOD_S, self._publish_diagnostics)
        # The output loop runs on its own thread (SCHED_FIFO where allowed) so that no
        # callback delays a tick; ``self.lock`` serialises it with them.
        self.scheduler = "not started"
        self.missed_deadlines = 0
        self.loop_errors = 0
        # callbacks and DDS threads one step below the loop, so input is never starved
        self.process_scheduler = _try_realtime_process(max(0, self.config.realtime_priority - 1))
        self._stop = threading.Event()
        self._loop = threading.Thread(target=self._run_loop, name="safety_loop", daemon=True)
        self._loop.start()
        self.get_logger().info(
            f"safety at {self.config.rate_hz} Hz, e-stop {self.config.estop_category}, "
            f"command_timeout_s={self.config.command_timeout_s}"
        )

    def _now_s(self) -> float:
        return self.get_clock().now().nanoseconds * _S_PER_NS

    def _bad(self, cause: str, message: str) -> None:
        """Count bad input; log each cause once."""
        if cause not in self.bad_input:
            self.get_logger().warning(
                f"bad input ({cause}): {message} (logged once; counted on /diagnostics)"
            )
        self.bad_input[cause] = self.bad_input.get(cause, 0) + 1

    # --- inputs ---------------------------------------------------------------------------

    def _on_joint_state(self, msg: JointState) -> None:
        names = list(msg.name)
        if len(msg.position) != len(names):
            self._bad("missing_joints", f"{len(msg.position)} positions for {len(names)} names")
            return
        index = {name: i for i, name in enumerate(names)}
        missing = [j for j in self.joint_names if j not in index]
        if missing:
            self._bad("missing_joints", f"joints {missing} missing from JointState (has {names})")
            return
        twice = [j for j in self.joint_names if names.count(j) > 1]
        if twice:
            self._bad("duplicate_joints", f"joints {twice} named more than once ({names})")
            return
        positions = np.array([msg.position[index[j]] for j in self.joint_names], dtype=np.float64)
        if not np.all(np.isfinite(positions)):
            self._bad("non_finite_joint_state", f"positions = {positions.tolist()}")
            return
        with self.lock:
            now_s = self._now_s()
            if self.supervisor is None:
                try:
                    self.supervisor = SafetySupervisor(self.config, initial_positions=positions)
                except InvalidCommandError as exc:
                    # no output until a joint state inside the limits arrives
                    self._bad("initial_out_of_limits", str(exc))
                    return
                if self._estop_before_start:
                    self.supervisor.estop(now_s)
                self.get_logger().info(f"first joint state: holding at {np.round(positions, 3)}")
            self.supervisor.on_joint_state(positions, now_s)

    def _on_command(self, msg: Float64MultiArray) -> None:
        data = np.asarray(msg.data, dtype=np.float64)
        if data.shape != (len(self.joint_names),):
            # still handed to the supervisor, which rejects and counts it (joint_mismatch)
            self._bad("command_size", f"{data.size} values, expected {len(self.joint_names)}")
        with self.lock:
            self._pending = JointCommand(self._now_s(), self.joint_names, data)
            self.lock.notify()

    def _on_estop(self, msg: Bool) -> None:
        if not msg.data:
            return  # releasing the button does not clear the latch: /safety/reset does
        with self.lock:
            now_s = self._now_s()
            if self.supervisor is None:
                self._estop_before_start = True
            else:
                self.supervisor.estop(now_s)
        self.get_logger().warning(
            f"E-STOP pressed: latched until {self.resolve_service_name(graph.SERVICE_SAFETY_RESET)}"
        )

    def _on_reset(self, request: Trigger.Request, response: Trigger.Response) -> Trigger.Response:
        del request
        with self.lock:
            if self.supervisor is None:
                self._estop_before_start = False
                response.success = True
                response.message = "no joint state yet: e-stop cleared"
                return response
            cleared = self.supervisor.reset(self._now_s())
        response.success = True
        response.message = (
            "e-stop cleared; motion resumes only on a command stamped after this reset"
            if cleared
            else "e-stop was not latched"
        )
        self.get_logger().info(f"reset: {response.message}")
        return response

    # --- the safety loop ------------------------------------------------------------------

    def _run_loop(self) -> None:
        """Tick on each new command, or on a deadline when commands stop.

        Clocked by the command stream (the controller's fixed-rate loop), the
        output follows each command within a fraction of a millisecond and two
        unsynchronised 100 Hz loops never alias (0 or 2 commands per tick).
        At most one tick per half period; without a command for 1.5 periods the
        loop ticks at ``rate_hz`` on its own (the supervisor's hold).
        """
        self.scheduler = _try_realtime_priority(self.config.realtime_priority)
        period_s = 1.0 / self.config.rate_hz
        last_s = time.monotonic()
        commanded = False
        while not self._stop.is_set():
            deadline_s = last_s + (1.5 if commanded else 1.0) * period_s
            with self.lock:
                self.lock.wait_for(
                    lambda: self._pending is not None or self._stop.is_set(),
                    max(0.0, deadline_s - time.monotonic()),
                )
                commanded = self._pending is not None
            if self._stop.is_set():
                return
            now_s = time.monotonic()
            if now_s - last_s < 0.5 * period_s:  # a burst: keep the output rate bounded
                time.sleep(0.5 * period_s - (now_s - last_s))
            elif now_s - deadline_s >= period_s:
                self.missed_deadlines += 1
            last_s = time.monotonic()
            try:
                self._on_tick()
            except Exception as exc:  # noqa: BLE001 - the safety loop must never die
                if self.context.ok():
                    self.loop_errors += 1
                    if self.loop_errors == 1:
                        self.get_logger().error(f"safety loop error: {exc!r} (logged once)")

    def stop_loop(self) -> None:
        """Stop the output loop thread."""
        self._stop.set()
        with self.lock:
            self.lock.notify()
        self._loop.join(timeout=2.0)

    def _on_tick(self) -> None:
        with self.lock:
            supervisor = self.supervisor
            if supervisor is None:
                return
            now_s = self._now_s()
            command, self._pending = self._pending, None
            safe = supervisor.hold(now_s) if command is None else supervisor.filter(command, now_s)
        out = Float64MultiArray()
        out.layout.dim = [MultiArrayDimension(label="joints", size=safe.size, stride=safe.size)]
        out.data = np.asarray(safe, dtype=np.float64).tolist()
        if not self.context.ok():
            return
        self.command_pub.publish(out)
        self.published += 1

    # --- diagnostics ----------------------------------------------------------------------

    def _publish_diagnostics(self) -> None:
        now_s = self._now_s()
        status = DiagnosticStatus(name=self.diagnostic_name, hardware_id="vla_edge")
        values: dict[str, object] = {
            "published": self.published,
            "rate_hz": self.config.rate_hz,
            "loop_scheduler": self.scheduler,
            "process_scheduler": self.process_scheduler,
            "loop_missed_deadlines": self.missed_deadlines,
            "loop_errors": self.loop_errors,
        }
        values.update({f"bad_input.{k}": v for k, v in sorted(self.bad_input.items())})
        values["bad_input.total"] = sum(self.bad_input.values())
        with self.lock:
            report = None if self.supervisor is None else self.supervisor.status()
        if report is None:
            status.level = DiagnosticStatus.WARN
            status.message = "waiting for the first joint state (publishing nothing)"
        else:
            level = int(report.get("level", 2))  # type: ignore[call-overload]
            status.level = _LEVELS[level] if 0 <= level <= 3 else DiagnosticStatus.ERROR
            status.message = str(report.get("message", ""))
            values.update(report.get("values", {}))  # type: ignore[arg-type]
        status.values = [KeyValue(key=k, value=_text(v)) for k, v in values.items()]
        ns = int(now_s * 1e9)
        array_msg = DiagnosticArray(status=[status])
        array_msg.header.stamp = Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)
        self.diag_pub.publish(array_msg)


def _try_realtime_priority(priority: int) -> str:
    """``SCHED_FIFO`` for the calling thread; says which scheduler it runs under."""
    if priority <= 0 or not hasattr(os, "sched_setscheduler"):
        return "default scheduler"
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except OSError as exc:
        return f"default scheduler (SCHED_FIFO refused: {exc})"
    return f"SCHED_FIFO {priority}"


def _try_realtime_process(priority: int) -> str:
    """``SCHED_FIFO`` for every thread of this process (executor, DDS); says what happened."""
    if priority <= 0 or not hasattr(os, "sched_setscheduler"):
        return "default scheduler"
    done = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setscheduler(int(tid), os.SCHED_FIFO, os.sched_param(priority))
            done += 1
        except ProcessLookupError:
            continue
        except OSError as exc:
            return f"default scheduler (SCHED_FIFO refused: {exc})"
    return f"SCHED_FIFO {priority} ({done} threads)"


def _text(value: object) -> str:
    if isinstance(value, float):
        return repr(value)
    return str(getattr(value, "value", value))


def main(args: list[str] | None = None) -> int:
    """Run the safety node until Ctrl-C or external shutdown."""
    return run_node(
        "safety_node",
        SafetyNode,
        cleanup=lambda node: node.stop_loop(),
        args=args,
        fast_gil_switch=True,
    )


if __name__ == "__main__":
    raise SystemExit(main())
