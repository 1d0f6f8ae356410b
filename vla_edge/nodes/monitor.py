"""The launch monitor: an in-process rclpy node that reads a running graph's health.

It keeps the newest ``/diagnostics`` status of each of its graph's nodes and
whether ``task_success`` was published, and (when asked) records the time series
the demo plots: safe commands, joint states and chunk arrivals.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from vla_edge.nodes.graph import diagnostic_name, normalize_namespace


@dataclass
class Recording:
    """Time series the demo plots (recorded only when asked)."""

    command_t_s: list[float] = field(default_factory=list)
    command: list[list[float]] = field(default_factory=list)
    measured_t_s: list[float] = field(default_factory=list)
    measured: list[list[float]] = field(default_factory=list)
    chunk_arrival_t_s: list[float] = field(default_factory=list)
    joint_names: list[str] = field(default_factory=list)


class Monitor:
    """An in-process rclpy node that listens to ``/diagnostics`` and ``task_success``.

    A subclass that reads more of a message extends :meth:`on_diagnostics` or
    :meth:`on_task_success` (the subscriptions' callbacks) and calls the parent's.

    Args:
        record: also record safe commands, joint states and chunk arrivals.
        record_max_samples: bound on each recorded series.
        namespace: the graph's namespace: the monitor's topics resolve in it, and
            of ``/diagnostics`` it keeps the statuses of that graph's nodes only
            (names without the namespace prefix, as at the root).
    """

    def __init__(
        self, record: bool = False, record_max_samples: int = 200_000, namespace: str = ""
    ) -> None:
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from std_msgs.msg import Bool

        from vla_edge.nodes import graph as g

        self._rclpy = rclpy
        self._own_context = not rclpy.ok()
        if self._own_context:
            rclpy.init()
        self.namespace = normalize_namespace(namespace)
        self._diagnostic_prefix = diagnostic_name(self.namespace, "")
        self.node = rclpy.create_node("vla_edge_launch_monitor", namespace=self.namespace or None)
        self.lock = threading.Lock()
        self.statuses: dict[str, dict[str, str]] = {}
        self.levels: dict[str, str] = {}
        self.messages: dict[str, str] = {}
        self.success_seen = False
        self.success_time_s: float | None = None
        self.recording = Recording() if record else None
        self._max = record_max_samples
        self._t0 = time.monotonic()
        latched = QoSProfile(
            depth=1,
            reliability=ReliabilityPolicy.RELIABLE,
            durability=DurabilityPolicy.TRANSIENT_LOCAL,
        )
        self.node.create_subscription(DiagnosticArray, g.TOPIC_DIAGNOSTICS, self.on_diagnostics, 50)
        self.node.create_subscription(Bool, g.TOPIC_TASK_SUCCESS, self.on_task_success, latched)
        if record:
            from sensor_msgs.msg import JointState
            from std_msgs.msg import Float64MultiArray
            from trajectory_msgs.msg import JointTrajectory

            self.node.create_subscription(
                Float64MultiArray, g.TOPIC_JOINT_COMMANDS, self._record_command, 50
            )
            self.node.create_subscription(JointState, g.TOPIC_JOINT_STATES, self._record_joints, 50)
            self.node.create_subscription(
                JointTrajectory, g.TOPIC_ACTION_CHUNK, self._record_chunk, 10
            )
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(self.node)

    def elapsed_s(self) -> float:
        """Seconds since the monitor started."""
        return time.monotonic() - self._t0

    def on_diagnostics(self, msg: Any) -> None:
        """Keep the newest status of each of this graph's nodes (a ``DiagnosticArray``)."""
        from vla_edge.nodes.conversions import diagnostic_level_name, diagnostic_values

        with self.lock:
            for status in msg.status:
                name = self.own_status_name(status.name)
                if name is None:
                    continue
                self.statuses[name] = diagnostic_values(status)
                self.levels[name] = diagnostic_level_name(status)
                self.messages[name] = status.message

    def own_status_name(self, name: str) -> str | None:
        """``name`` without this graph's namespace prefix; ``None`` for another graph's."""
        if not name.startswith(self._diagnostic_prefix):
            return None
        name = name.removeprefix(self._diagnostic_prefix)
        return name if name.startswith("vla_edge/") else None

    def on_task_success(self, msg: Any) -> None:
        """Note the first ``task_success`` (a ``Bool``) and when it came."""
        if msg.data and not self.success_seen:
            self.success_seen = True
            self.success_time_s = self.elapsed_s()

    def _record_command(self, msg: Any) -> None:
        rec = self.recording
        if rec is not None and len(rec.command) < self._max:
            rec.command_t_s.append(self.elapsed_s())
            rec.command.append(list(msg.data))

    def _record_joints(self, msg: Any) -> None:
        rec = self.recording
        if rec is not None and len(rec.measured) < self._max:
            if not rec.joint_names:
                rec.joint_names = list(msg.name)
            rec.measured_t_s.append(self.elapsed_s())
            rec.measured.append(list(msg.position))

    def _record_chunk(self, msg: Any) -> None:
        rec = self.recording
        if rec is not None and len(rec.chunk_arrival_t_s) < self._max:
            rec.chunk_arrival_t_s.append(self.elapsed_s())

    def spin_for(self, duration_s: float) -> None:
        """Process callbacks for ``duration_s``."""
        end = time.monotonic() + duration_s
        while time.monotonic() < end:
            self.executor.spin_once(timeout_sec=max(0.0, min(0.05, end - time.monotonic())))

    def status(self, name: str) -> dict[str, str]:
        """The latest key/values of diagnostic status ``name`` (empty if none yet)."""
        with self.lock:
            return dict(self.statuses.get(name, {}))

    def close(self) -> None:
        """Destroy the node (and shut rclpy down if the monitor initialised it)."""
        self.executor.remove_node(self.node)
        self.node.destroy_node()
        if self._own_context and self._rclpy.ok():
            self._rclpy.shutdown()
