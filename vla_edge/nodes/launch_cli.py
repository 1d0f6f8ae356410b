"""``vla-edge launch sim|hil``: start the graph as separate processes (rclpy from PyPI).

Every node of :func:`vla_edge.nodes.graph.graph` runs as its own process
(``python -m <module> --ros-args --params-file …``), exactly as
``launch/<profile>.launch.py`` starts them on a ROS 2 distribution.
``--namespace arm1`` starts the whole graph under ``/arm1`` (a second arm is a
second graph in another namespace). The command watches the processes, stops
them cleanly (SIGINT, then SIGTERM, then SIGKILL) at the end, and with
``--json`` writes the run's metrics, collected from the nodes' ``/diagnostics``::

    {"task", "success", "controller_period_jitter_ms": {"p50", "p99"},
     "chunk_age_ms": {"p50", "p95", "max"}, "max_chunk_age_s", "buffer_underruns",
     "rss_mb": {NODE: {"start", "end", "peak"}}, ...}

``peak`` is the largest resident size the node's processes reached over the run (the
kernel's ``VmHWM``, summed over the node's process and its children).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vla_edge.config.loader import load_node_params
from vla_edge.config.models import ControllerConfig, SimConfig
from vla_edge.core.errors import ConfigError, VlaEdgeError
from vla_edge.nodes.graph import (
    PROFILES,
    NodeSpec,
    diagnostic_name,
    graph,
    normalize_namespace,
    policy_parameters,
    sim_parameters,
)
from vla_edge.nodes.process_group import stop_all
from vla_edge.sim.tasks import check_task, suite_of

STOP_TIMEOUT_S = 5.0
# log lines shown for a node that needed more than SIGINT: its threads' stacks fit
STOP_LOG_LINES = 120
DEFAULT_ENV = {
    "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST",
    "MUJOCO_GL": "egl",
    "PYOPENGL_PLATFORM": "egl",
    "PYTHONUNBUFFERED": "1",
}


# --------------------------------------------------------------------------- processes


@dataclass
class NodeProcess:
    """One running node."""

    spec: NodeSpec
    process: subprocess.Popen
    log_path: Path


@dataclass
class GraphProcesses:
    """The graph's node processes: start, watch, stop.

    Args:
        profile: ``sim`` or ``hil``.
        overrides: per node name, parameter overrides applied after the file.
        log_dir: each node's stdout+stderr goes to ``<log_dir>/<node>.log``.
        env: extra environment for the children (on top of this process's).
        namespace: the graph's namespace (``""``: the root).
    """

    profile: str
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    log_dir: Path = Path("out/launch")
    env: dict[str, str] = field(default_factory=dict)
    namespace: str = ""
    nodes: dict[str, NodeProcess] = field(default_factory=dict)
    stop_escalations: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.namespace = normalize_namespace(self.namespace)

    def command(self, spec: NodeSpec) -> list[str]:
        """The command line of ``spec``'s process."""
        return [
            sys.executable,
            "-m",
            spec.module,
            *spec.ros_args(overrides=self.overrides.get(spec.name)),
        ]

    def specs(self) -> tuple[NodeSpec, ...]:
        """The graph's nodes, in the graph's namespace."""
        return graph(self.profile, self.namespace)

    def start(self) -> None:
        """Start every node of the profile, in the graph's order."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        env = {**DEFAULT_ENV, **os.environ, **self.env}
        for spec in self.specs():
            log_path = self.log_dir / f"{spec.name}.log"
            log = log_path.open("w")
            process = subprocess.Popen(
                self.command(spec),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
            log.close()
            self.nodes[spec.name] = NodeProcess(spec, process, log_path)

    def exited(self) -> dict[str, int]:
        """Nodes that have exited, with their return codes."""
        return {
            name: node.process.returncode
            for name, node in self.nodes.items()
            if node.process.poll() is not None
        }

    def pid(self, name: str) -> int:
        """Process id of node ``name``."""
        return self.nodes[name].process.pid

    def signal(self, name: str, sig: int) -> None:
        """Send ``sig`` to node ``name`` (if still running)."""
        process = self.nodes[name].process
        if process.poll() is None:
            process.send_signal(sig)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> dict[str, int]:
        """Stop every node, upstream first: SIGINT, then SIGTERM, then SIGKILL.

        Returns:
            Return code per node. A node that did not stop within ``timeout_s``
            of a signal is named in ``stop_escalations`` with the last signal
            it was sent.
        """
        codes, escalations = stop_all(
            {name: node.process for name, node in self.nodes.items()}, timeout_s
        )
        self.stop_escalations.update(escalations)
        return codes

    def rss_mb(self) -> dict[str, float]:
        """Resident memory (MiB) of each running node, its child processes included."""
        return self._per_node_mb(lambda proc: proc.memory_info().rss)

    def peak_rss_mb(self) -> dict[str, float]:
        """Largest resident memory (MiB) each running node has reached, children included."""
        return self._per_node_mb(lambda proc: _vm_hwm_bytes(proc.pid))

    def _per_node_mb(self, read: Callable[[Any], float | None]) -> dict[str, float]:
        """``read(process)`` (bytes) summed over each running node's process and children.

        A node with a process that cannot be read is left out.
        """
        import psutil

        out: dict[str, float] = {}
        for name, node in self.nodes.items():
            try:
                proc = psutil.Process(node.process.pid)
                values = [read(p) for p in (proc, *proc.children(recursive=True))]
            except psutil.Error:
                continue
            if all(v is not None for v in values):
                out[name] = sum(values) / 2**20
        return out

    def log_tail(self, name: str, lines: int = 20) -> str:
        """Last lines of node ``name``'s log."""
        path = self.nodes[name].log_path
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def sim_task(profile: str, task: str | None) -> str | None:
    """The task the sim of ``profile`` resets to: ``task``, else ``config/sim.yaml``'s.

    Checked against the suite with the sim's initial state before any process
    starts; a profile without a sim keeps ``task`` as given (metrics only).

    Raises:
        UnknownTaskError: the task is not in the suite.
        InitStateOutOfRangeError: the sim's ``init_state_id`` is out of range.
        ConfigError: the sim's parameter file or its ``suite`` is invalid.
    """
    if profile != "sim":
        return task
    sim = load_node_params(graph("sim")[0].params_path(), "sim_node", SimConfig)
    if task is None:
        check_task(sim.suite, sim.task, sim.init_state_id)
        return sim.task
    check_task(suite_of(task), task, sim.init_state_id)
    return task


def overrides_for(
    profile: str,
    task: str | None,
    policy: str | None,
    threads: int | None = None,
    sequencer: bool = False,
    device: str | None = None,
) -> dict[str, dict[str, Any]]:
    """Parameter overrides implied by the options.

    ``--task`` sets the sim's task and its suite, ``--sequencer`` the sim's
    sequencer, ``--policy``, ``--threads`` and ``--device`` the inference node's.
    """
    overrides: dict[str, dict[str, Any]] = {}
    names = {spec.name for spec in graph(profile)}
    sim = sim_parameters(task, sequencer)
    if "sim_node" in names and sim:
        overrides["sim_node"] = sim
    if "inference_node" in names:
        inference: dict[str, Any] = policy_parameters(policy) if policy else {}
        if threads is not None:
            inference["threads"] = int(threads)
        if device is not None:
            inference["device"] = str(device)
        if inference:
            overrides["inference_node"] = inference
    return overrides


# --------------------------------------------------------------------------- monitor


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
        self.node.create_subscription(DiagnosticArray, g.TOPIC_DIAGNOSTICS, self._on_diag, 50)
        self.node.create_subscription(Bool, g.TOPIC_TASK_SUCCESS, self._on_success, latched)
        if record:
            from sensor_msgs.msg import JointState
            from std_msgs.msg import Float64MultiArray
            from trajectory_msgs.msg import JointTrajectory

            self.node.create_subscription(
                Float64MultiArray, g.TOPIC_JOINT_COMMANDS, self._on_command, 50
            )
            self.node.create_subscription(JointState, g.TOPIC_JOINT_STATES, self._on_joints, 50)
            self.node.create_subscription(JointTrajectory, g.TOPIC_ACTION_CHUNK, self._on_chunk, 10)
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(self.node)

    def elapsed_s(self) -> float:
        """Seconds since the monitor started."""
        return time.monotonic() - self._t0

    def _on_diag(self, msg: Any) -> None:
        from vla_edge.nodes.conversions import diagnostic_level_name, diagnostic_values

        with self.lock:
            for status in msg.status:
                name = self._own_status_name(status.name)
                if name is None:
                    continue
                self.statuses[name] = diagnostic_values(status)
                self.levels[name] = diagnostic_level_name(status)
                self.messages[name] = status.message

    def _own_status_name(self, name: str) -> str | None:
        """``name`` without this graph's namespace prefix; ``None`` for another graph's."""
        if not name.startswith(self._diagnostic_prefix):
            return None
        name = name.removeprefix(self._diagnostic_prefix)
        return name if name.startswith("vla_edge/") else None

    def _on_success(self, msg: Any) -> None:
        if msg.data and not self.success_seen:
            self.success_seen = True
            self.success_time_s = self.elapsed_s()

    def _on_command(self, msg: Any) -> None:
        rec = self.recording
        if rec is not None and len(rec.command) < self._max:
            rec.command_t_s.append(self.elapsed_s())
            rec.command.append(list(msg.data))

    def _on_joints(self, msg: Any) -> None:
        rec = self.recording
        if rec is not None and len(rec.measured) < self._max:
            if not rec.joint_names:
                rec.joint_names = list(msg.name)
            rec.measured_t_s.append(self.elapsed_s())
            rec.measured.append(list(msg.position))

    def _on_chunk(self, msg: Any) -> None:
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


# --------------------------------------------------------------------------- metrics


def _float(values: dict[str, str], key: str) -> float | None:
    try:
        return float(values[key])
    except (KeyError, ValueError):
        return None


def _vm_hwm_bytes(pid: int) -> float | None:
    """The ``VmHWM`` (peak resident set) of process ``pid`` in bytes; None when unreadable."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return float(line.split()[1]) * 1024.0  # the kernel writes kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def collect_metrics(
    monitor: Monitor,
    task: str | None,
    max_chunk_age_s: float,
    rss_start: dict[str, float],
    rss_end: dict[str, float],
    rss_peak: dict[str, float] | None = None,
) -> dict[str, Any]:
    """The output fields of ``--json`` from the latest diagnostics of each node."""
    ctrl = monitor.status("vla_edge/controller")
    infer = monitor.status("vla_edge/inference")
    safety = monitor.status("vla_edge/safety")
    stages = sorted({k.split(".")[1] for k in infer if k.startswith("stage_ms.")})
    rss = {
        name: {
            "start": rss_start.get(name),
            "end": rss_end.get(name),
            "peak": (rss_peak or {}).get(name),
        }
        for name in sorted(set(rss_start) | set(rss_end))
    }
    growth = {
        name: (v["end"] / v["start"] - 1.0) * 100.0
        for name, v in rss.items()
        if v["start"] and v["end"]
    }
    underruns = _float(ctrl, "buffer_underruns")
    return {
        "task": task,
        "success": bool(monitor.success_seen),
        "success_time_s": monitor.success_time_s,
        "controller_period_jitter_ms": {
            "p50": _float(ctrl, "period_jitter_ms_p50"),
            "p99": _float(ctrl, "period_jitter_ms_p99"),
            "max": _float(ctrl, "period_jitter_ms_max"),
        },
        "controller_period_ms": {
            "mean": _float(ctrl, "period_ms_mean"),
            "ticks": _float(ctrl, "period_ms_count"),
        },
        "chunk_age_ms": {
            "p50": _float(ctrl, "chunk_age_ms_p50"),
            "p95": _float(ctrl, "chunk_age_ms_p95"),
            "max": _float(ctrl, "chunk_age_ms_max"),
            "count": _float(ctrl, "chunk_age_ms_count"),
        },
        "max_chunk_age_s": max_chunk_age_s,
        "buffer_underruns": int(underruns) if underruns is not None else None,
        "chunks_accepted": _float(ctrl, "accepted"),
        "chunks_rejected": _float(ctrl, "rejected"),
        "chunks_rejected_stale": _float(ctrl, "rejected_stale"),
        "inference_stage_ms": {
            stage: {
                "p50": _float(infer, f"stage_ms.{stage}.p50"),
                "p95": _float(infer, f"stage_ms.{stage}.p95"),
            }
            for stage in stages
        },
        "safety": {
            "state": safety.get("state"),
            "reasons": safety.get("reasons"),
            "rejected_out_of_limits": _float(safety, "rejected_out_of_limits"),
            "rejected": _float(safety, "rejected"),
            "brake_ticks": _float(safety, "brake_ticks"),
            "limited_ticks": _float(safety, "limited_ticks"),
        },
        "rss_mb": rss,
        "rss_growth_pct": growth,
    }


def run_graph(
    profile: str,
    duration_s: float,
    task: str | None = None,
    policy: str | None = None,
    threads: int | None = None,
    stop_on_success: bool = False,
    settle_s: float = 1.0,
    record: bool = False,
    log_dir: Path = Path("out/launch"),
    announce: Any = print,
    namespace: str = "",
    sequencer: bool = False,
    device: str | None = None,
) -> tuple[dict[str, Any], Monitor | None, dict[str, int]]:
    """Start the graph, watch it for ``duration_s`` (or until success), stop it.

    Args:
        namespace: start the graph (and the monitor) under this namespace.

    Returns:
        ``(metrics, monitor, exit codes)``; the monitor is closed but keeps its
        recording.

    Raises:
        VlaEdgeError: a parameter file is invalid, or the sim task or initial
            state is not the suite's (:func:`sim_task`); nothing was started.
    """
    controller_file = next(s for s in graph(profile) if s.name == "controller_node")
    max_chunk_age_s = load_node_params(
        controller_file.params_path(), "controller_node", ControllerConfig
    ).max_chunk_age_s
    task = sim_task(profile, task)
    processes = GraphProcesses(
        profile,
        overrides_for(profile, task, policy, threads, sequencer, device),
        log_dir=log_dir,
        namespace=namespace,
    )
    monitor = Monitor(record=record, namespace=namespace)
    processes.start()
    announce(
        f"started {', '.join(f'{n} (pid {p.process.pid})' for n, p in processes.nodes.items())}; "
        f"logs in {log_dir}/"
    )
    rss_start: dict[str, float] = {}
    died: dict[str, int] = {}
    t_end = time.monotonic() + duration_s
    rss_end: dict[str, float] = {}
    rss_peak: dict[str, float] = {}
    try:
        _watch(processes, monitor, t_end, stop_on_success, settle_s, announce, rss_start, died)
        monitor.spin_for(1.2)  # one more diagnostics period
        rss_end = processes.rss_mb()
        rss_peak = processes.peak_rss_mb()
    finally:
        codes = processes.stop()
        monitor.close()
        for name, sig in processes.stop_escalations.items():
            announce(
                f"node {name} did not stop within {STOP_TIMEOUT_S:.0f} s of SIGINT; "
                f"sent {sig}; the end of its log (a SIGTERM writes every thread's stack "
                f"there):\n{processes.log_tail(name, lines=STOP_LOG_LINES)}"
            )
    metrics = collect_metrics(monitor, task, max_chunk_age_s, rss_start, rss_end, rss_peak)
    metrics.update(
        {
            "profile": profile,
            "namespace": processes.namespace or "/",
            "policy": policy,
            "threads": threads,
            "device": device,
            "duration_s": round(monitor.elapsed_s(), 3),
            "nodes_died": died,
            "exit_codes": codes,
            "stop_escalations": dict(processes.stop_escalations),
        }
    )
    return metrics, monitor, codes


def _watch(
    processes: GraphProcesses,
    monitor: Monitor,
    t_end: float,
    stop_on_success: bool,
    settle_s: float,
    announce: Any,
    rss_start: dict[str, float],
    died: dict[str, int],
) -> None:
    """Spin the monitor until ``t_end``, success (+ settle), a node's exit or Ctrl-C."""
    success_at: float | None = None
    try:
        while time.monotonic() < t_end:
            monitor.spin_for(0.1)
            if not rss_start and _float(monitor.status("vla_edge/controller"), "accepted"):
                rss_start.update(processes.rss_mb())  # the graph is up: chunks flow
                announce(f"graph up after {monitor.elapsed_s():.1f} s: chunks flow")
            died.update(processes.exited())
            if died:
                for name, code in died.items():
                    announce(f"node {name} exited with {code}:\n{processes.log_tail(name)}")
                break
            if stop_on_success and monitor.success_seen:
                if success_at is None:
                    success_at = time.monotonic()
                    announce(f"task success after {monitor.success_time_s:.1f} s")
                elif time.monotonic() - success_at >= settle_s:
                    break
    except KeyboardInterrupt:
        announce("interrupted: stopping the graph")


# --------------------------------------------------------------------------- command


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``vla-edge launch``."""
    parser.add_argument("profile", choices=PROFILES, help="which graph to start")
    parser.add_argument("--duration", type=float, default=None, help="stop after S seconds")
    parser.add_argument("--json", type=Path, default=None, help="write the run's metrics here")
    parser.add_argument(
        "--task", default=None, help="sim task of any suite (default: config/sim.yaml)"
    )
    parser.add_argument(
        "--sequencer",
        action="store_true",
        help="long-horizon task: the sim publishes one sub-task's instruction at a time",
    )
    parser.add_argument(
        "--policy", default=None, help="expert | bundled | checkpoint | export dir | ws://…"
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="inference threads (default: its config)"
    )
    parser.add_argument(
        "--device",
        default=None,
        help="inference node's device for a torch policy: cpu, cuda or cuda:N (default: its "
        "config)",
    )
    parser.add_argument(
        "--stop-on-success", action="store_true", help="stop 1 s after task_success"
    )
    parser.add_argument(
        "--namespace",
        default="",
        type=_namespace_argument,
        help="start the graph under this ROS namespace (e.g. arm1: topics /arm1/joint_states, …)",
    )
    parser.add_argument("--log-dir", type=Path, default=Path("out/launch"), help="node logs")


def _namespace_argument(value: str) -> str:
    try:
        return normalize_namespace(value)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def run(args: argparse.Namespace) -> int:
    """Entry point of ``vla-edge launch``."""
    duration_s = args.duration if args.duration is not None else float("inf")
    try:
        metrics, _, codes = run_graph(
            args.profile,
            duration_s,
            task=args.task,
            policy=args.policy,
            threads=args.threads,
            stop_on_success=args.stop_on_success,
            log_dir=args.log_dir,
            namespace=args.namespace,
            sequencer=args.sequencer,
            device=args.device,
        )
    except KeyboardInterrupt:
        return 130
    except VlaEdgeError as exc:
        print(f"vla-edge launch: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(metrics, indent=2))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(metrics, indent=2) + "\n")
    return 1 if metrics["nodes_died"] else 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m vla_edge.nodes.launch_cli``."""
    parser = argparse.ArgumentParser(prog="vla-edge launch", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
