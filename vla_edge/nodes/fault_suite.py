"""The ROS-level fault suite: the real graph as separate processes, plus the fault injector.

It lives with the nodes because it starts their processes and records their
topics with rclpy; the scenarios, injectors, scoring and summary it uses are the
ROS-free ones of :mod:`vla_edge.faults`.

For each scenario the sim graph (``vla_edge.nodes.graph``) starts with the
producer of the corrupted topic remapped to ``<topic>_raw`` and
``fault_injector_node`` republishing it with the fault applied; e-stop goes
through ``estop`` and ``safety/reset``; a crash is a ``SIGKILL`` of the node's
process at the fault start and a respawn at its end; a CPU cap pins every
thread of the inference process to fewer cores. A recorder node takes
``joint_commands`` (the safety output, one message per safety tick),
``joint_states``, ``controller/command`` and ``/diagnostics``; the samples
become a :class:`~vla_edge.faults.harness.Trace` scored like the virtual-time
runs, with the state sampling of ``/diagnostics`` (1 Hz) as detection slack.
Topic names are the graph description's (relative; the suite runs in the root
namespace).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vla_edge.config.models import SafetyConfig
from vla_edge.core.stop import StopCategory
from vla_edge.faults.harness import DEAD, Trace
from vla_edge.faults.injectors import CpuAffinityCap
from vla_edge.faults.metrics import score
from vla_edge.faults.scenario import CHUNK_FAULTS, FaultScenario, camera_names
from vla_edge.faults.suite import summarize
from vla_edge.inference.camera_health import CAMERA_FAULT_CONDITIONS
from vla_edge.nodes import graph as g
from vla_edge.nodes.conversions import S_PER_NS
from vla_edge.nodes.graph import NodeSpec
from vla_edge.nodes.process_group import stop_all

FAULT_INJECTOR_NODE = NodeSpec(
    "fault_injector_node",
    "fault_injector_node",
    "vla_edge.nodes.fault_injector_node",
    "config/faults/fault_injector_node.yaml",
)
# The injector's private ``~/arm``, as the recorder (same namespace) names it.
SERVICE_FAULT_INJECTOR_ARM = g.private_in_namespace(FAULT_INJECTOR_NODE.name, g.PRIVATE_ARM)
ARM_TIMEOUT_S = 90.0
CRASH_TARGETS = {"inference_crash": "inference_node", "controller_crash": "controller_node"}
CPU_CAP_TARGET = "inference_node"
# Faults the real graph offers no injection point for (the nodes would need a hook).
ROS_UNSUPPORTED = {
    "inference_slowdown": "the inference node has no throttling hook (use cpu_cap for a real cap)",
    "clock_jump": "the system clock of the machine cannot be stepped by a test",
}
_SEVERITY = {c.value: c.severity for c in StopCategory}


def fault_graph(scenario: FaultScenario, task: str, policy: str = "expert") -> list[NodeSpec]:
    """The sim graph with the scenario's topic routed through the fault injector."""
    remaps: dict[str, list[tuple[str, str]]] = {}
    for cam in camera_names(scenario):
        topic = g.camera_topic(cam)
        remaps.setdefault("sim_node", []).append((topic, g.raw_topic(topic)))
    if scenario.fault == "joint_state_loss":
        remaps.setdefault("sim_node", []).append(
            (g.TOPIC_JOINT_STATES, g.raw_topic(g.TOPIC_JOINT_STATES))
        )
    if scenario.fault in CHUNK_FAULTS:
        remaps.setdefault("inference_node", []).append(
            (g.TOPIC_ACTION_CHUNK, g.raw_topic(g.TOPIC_ACTION_CHUNK))
        )
    overrides: dict[str, dict[str, Any]] = {
        "sim_node": {"task": task},
        "inference_node": g.policy_parameters(policy),
    }
    specs = []
    for spec in g.graph("sim"):
        specs.append(
            dataclasses.replace(
                spec,
                remappings=tuple(spec.remappings) + tuple(remaps.get(spec.name, ())),
                parameters={**spec.parameters, **overrides.get(spec.name, {})},
            )
        )
    specs.append(
        dataclasses.replace(
            FAULT_INJECTOR_NODE,
            parameters={"scenario": scenario.name, "arm_on_first_chunk": False},
        )
    )
    return specs


@dataclass
class FaultGraphProcesses:
    """The graph's processes: start, kill one, respawn it, stop all (SIGINT, TERM, KILL)."""

    specs: list[NodeSpec]
    log_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    killed: dict[str, int] = field(default_factory=dict)
    stop_escalations: dict[str, str] = field(default_factory=dict)

    def _spawn(self, spec: NodeSpec, mode: str = "w") -> None:
        import sys

        self.log_dir.mkdir(parents=True, exist_ok=True)
        env = {
            "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST",
            "MUJOCO_GL": "egl",
            "PYOPENGL_PLATFORM": "egl",
            "PYTHONUNBUFFERED": "1",
            **os.environ,
            **self.env,
        }
        with (self.log_dir / f"{spec.name}.log").open(mode) as log:
            self.processes[spec.name] = subprocess.Popen(
                [sys.executable, "-m", spec.module, *spec.ros_args()],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )

    def start(self) -> None:
        """Start every node."""
        for spec in self.specs:
            self._spawn(spec)

    def kill(self, name: str) -> None:
        """``SIGKILL`` node ``name`` (a crash)."""
        process = self.processes[name]
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=10.0)
        self.killed[name] = self.killed.get(name, 0) + 1

    def set_affinity(self, name: str, cpus: set[int]) -> None:
        """Pin every thread of node ``name``'s process to ``cpus``."""
        pid = self.processes[name].pid
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                os.sched_setaffinity(int(tid), cpus)
            except ProcessLookupError:
                continue  # the thread ended meanwhile

    def respawn(self, name: str) -> None:
        """Start node ``name`` again (its log is appended to)."""
        self._spawn(next(s for s in self.specs if s.name == name), mode="a")

    def exited(self) -> dict[str, int]:
        """Nodes whose process has exited, with return codes."""
        return {n: p.returncode for n, p in self.processes.items() if p.poll() is not None}

    def stop(self, timeout_s: float = 5.0) -> dict[str, int]:
        """Stop every node (SIGINT, then SIGTERM, then SIGKILL); return codes.

        A node that needed SIGTERM or SIGKILL is named in ``stop_escalations``.
        """
        codes, escalations = stop_all(self.processes, timeout_s)
        self.stop_escalations.update(escalations)
        return codes

    def log_tail(self, name: str, lines: int = 15) -> str:
        """The last lines of a node's log."""
        path = self.log_dir / f"{name}.log"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


class Recorder:
    """An rclpy node recording the streams a fault run is scored on (system-clock seconds)."""

    def __init__(self, joint_states_topic: str) -> None:
        import rclpy
        from diagnostic_msgs.msg import DiagnosticArray
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import JointState
        from std_msgs.msg import Bool, Float64MultiArray

        self._rclpy = rclpy
        self._own_context = not rclpy.ok()
        if self._own_context:
            rclpy.init()
        self.node = rclpy.create_node("vla_edge_fault_recorder")
        self.lock = threading.Lock()
        self.safe: list[tuple[float, np.ndarray]] = []
        self.raw: list[tuple[float, np.ndarray]] = []
        self.measured: list[tuple[float, np.ndarray]] = []
        self.diag: list[tuple[float, str, str, dict[str, str]]] = []
        self.joint_names: list[str] = []
        qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        self.node.create_subscription(
            Float64MultiArray, g.TOPIC_JOINT_COMMANDS, self._stream(self.safe), qos
        )
        self.node.create_subscription(
            Float64MultiArray, g.TOPIC_CONTROLLER_COMMAND, self._stream(self.raw), qos
        )
        self.node.create_subscription(JointState, joint_states_topic, self._on_joints, qos)
        self.node.create_subscription(DiagnosticArray, g.TOPIC_DIAGNOSTICS, self._on_diag, 100)
        latched = QoSProfile(
            depth=1,
            reliability=ReliabilityPolicy.RELIABLE,
            durability=DurabilityPolicy.TRANSIENT_LOCAL,
        )
        self.success_at_s: float | None = None
        self.node.create_subscription(Bool, g.TOPIC_TASK_SUCCESS, self._on_success, latched)
        self.executor = SingleThreadedExecutor()
        self.executor.add_node(self.node)

    def now_s(self) -> float:
        """System-clock seconds (the graph's clock)."""
        return self.node.get_clock().now().nanoseconds * S_PER_NS

    def _stream(self, out: list[tuple[float, np.ndarray]]) -> Callable[[Any], None]:
        def callback(msg: Any) -> None:
            out.append((self.now_s(), np.asarray(msg.data, dtype=np.float64)))

        return callback

    def _on_joints(self, msg: Any) -> None:
        if not self.joint_names:
            self.joint_names = list(msg.name)
        self.measured.append((self.now_s(), np.asarray(msg.position, dtype=np.float64)))

    def _on_success(self, msg: Any) -> None:
        if msg.data and self.success_at_s is None:
            self.success_at_s = self.now_s()

    def _on_diag(self, msg: Any) -> None:
        now = self.now_s()
        for status in msg.status:
            values = {kv.key: kv.value for kv in status.values}
            self.diag.append((now, status.name, status.message, values))

    def latest(self, name: str) -> dict[str, str]:
        """The newest key/values of diagnostic status ``name``."""
        for _, n, _, values in reversed(self.diag):
            if n == name:
                return values
        return {}

    def spin_for(self, duration_s: float) -> None:
        """Process callbacks for ``duration_s``."""
        end = time.monotonic() + duration_s
        while time.monotonic() < end:
            self.executor.spin_once(timeout_sec=max(0.0, min(0.02, end - time.monotonic())))

    def close(self) -> None:
        """Destroy the node (shut rclpy down if this recorder initialised it)."""
        self.executor.remove_node(self.node)
        self.node.destroy_node()
        if self._own_context and self._rclpy.ok():
            self._rclpy.shutdown()


def build_trace(
    scenario: FaultScenario,
    rec: Recorder,
    armed_at_s: float,
    joint_names: Sequence[str],
    rate_hz: float,
    dead_windows: dict[str, list[tuple[float, float]]],
) -> Trace:
    """Resample the recorded streams onto the safety output's ticks (episode time)."""
    trace = Trace(scenario, tuple(joint_names), 1.0 / rate_hz)
    n = len(joint_names)
    meas_t = np.array([t for t, _ in rec.measured])
    raw_t = np.array([t for t, _ in rec.raw])
    diags = sorted(rec.diag, key=lambda d: d[0])
    diag_t = {
        name: np.array([d[0] for d in diags if d[1] == name])
        for name in ("vla_edge/controller", "vla_edge/safety")
    }
    diag_v = {
        name: [d[3] for d in diags if d[1] == name]
        for name in ("vla_edge/controller", "vla_edge/safety")
    }
    nan_row = np.full(n, np.nan)

    def at(times: np.ndarray, values: list[Any], t: float, default: Any) -> Any:
        i = int(np.searchsorted(times, t, side="right")) - 1
        return values[i] if i >= 0 else default

    def num(values: dict[str, str], key: str, default: float = 0.0) -> float:
        try:
            return float(values.get(key, default))
        except ValueError:
            return default

    controller_dead = dead_windows.get("controller_node", [])
    lossy = lossy_intervals(rec)
    last_count = {"accepted": 0, "rejected": 0}
    offset = {"accepted": 0, "rejected": 0}
    for t_abs, safe in rec.safe:
        if safe.shape != (n,):
            continue
        t = t_abs - armed_at_s
        if t < 0.0 or t > scenario.episode_s:
            continue
        measured = at(meas_t, [m for _, m in rec.measured], t_abs, nan_row)
        raw_i = int(np.searchsorted(raw_t, t_abs, side="right")) - 1
        fresh_raw = raw_i >= 0 and t_abs - raw_t[raw_i] <= 2.0 / rate_hz
        ctrl = at(diag_t["vla_edge/controller"], diag_v["vla_edge/controller"], t_abs, {})
        safety = at(diag_t["vla_edge/safety"], diag_v["vla_edge/safety"], t_abs, {})
        dead = any(a <= t_abs < b for a, b in controller_dead)
        trace.t_s.append(t)
        trace.clock_s.append(t_abs)
        trace.safe.append(safe)
        trace.measured.append(measured if measured.shape == (n,) else nan_row)
        trace.commanded.append(rec.raw[raw_i][1] if fresh_raw else nan_row)
        trace.safety_severity.append(_SEVERITY.get(safety.get("state", "none"), 0))
        trace.watchdog_severity.append(
            DEAD if dead else _SEVERITY.get(ctrl.get("watchdog_category", "none"), 0)
        )
        trace.holding.append(bool(num(ctrl, "holding", 1.0)) or dead)
        # a respawned controller counts from zero: keep the totals monotonic
        for key, series in (("accepted", trace.accepted), ("rejected", trace.controller_rejected)):
            value = int(num(ctrl, key))
            if value < last_count[key]:
                offset[key] += last_count[key]
            last_count[key] = value
            series.append(value + offset[key])
        trace.safety_rejected.append(int(num(safety, "rejected")))
        trace.safety_limited.append(int(num(safety, "limited_ticks")))
        trace.complete.append(not any(a - 0.05 <= t_abs <= b + 0.05 for a, b in lossy))
    trace.info["samples_lost"] = int(sum(lost for *_, lost in lossy_intervals(rec, spans=False)))
    return trace


def lossy_intervals(rec: Recorder, spans: bool = True) -> list[Any]:
    """Intervals between two safety diagnostics where fewer outputs arrived than were published.

    The safety node counts its published outputs (``published`` on
    ``/diagnostics``); a recorder starved of CPU can lose samples (reliable QoS
    keeps a bounded history), and finite differences across a lost sample are
    meaningless. A difference of one is the boundary jitter of the count.

    Returns:
        ``[(t0, t1)]`` (or ``[(t0, t1, lost)]`` when ``spans`` is false).
    """
    pubs = [
        (t, int(float(v.get("published", "nan"))))
        for t, name, _, v in rec.diag
        if name == "vla_edge/safety" and v.get("published", "").replace(".", "", 1).isdigit()
    ]
    received = np.array([t for t, _ in rec.safe])
    out: list[Any] = []
    for (t0, p0), (t1, p1) in zip(pubs, pubs[1:], strict=False):
        got = int(np.count_nonzero((received > t0) & (received <= t1)))
        lost = (p1 - p0) - got
        if lost > 1:
            out.append((t0, t1) if spans else (t0, t1, lost))
    return out


def run_ros_scenario(
    scenario: FaultScenario,
    safety_config: SafetyConfig,
    task: str,
    log_dir: Path,
    policy: str = "expert",
) -> tuple[Trace, dict[str, Any]]:
    """Run one scenario on the real graph; return its trace and the process record."""
    specs = fault_graph(scenario, task, policy)
    procs = FaultGraphProcesses(specs, log_dir)
    joint_topic = (
        g.raw_topic(g.TOPIC_JOINT_STATES)
        if scenario.fault == "joint_state_loss"
        else g.TOPIC_JOINT_STATES
    )
    rec = Recorder(joint_topic)
    target = CRASH_TARGETS.get(scenario.fault)
    dead_windows: dict[str, list[tuple[float, float]]] = {}
    record: dict[str, Any] = {"log_dir": str(log_dir)}
    if scenario.fault in ROS_UNSUPPORTED:
        trace = Trace(scenario, tuple(safety_config.joint_names), 1.0 / safety_config.rate_hz)
        trace.skipped = f"not injectable on the real graph: {ROS_UNSUPPORTED[scenario.fault]}"
        return trace, record
    cap: CpuAffinityCap | None = None
    if scenario.fault == "cpu_cap":
        cap = CpuAffinityCap(scenario)
        reason = cap.unavailable_reason()
        if reason is not None:
            trace = Trace(scenario, tuple(safety_config.joint_names), 1.0 / safety_config.rate_hz)
            trace.skipped = reason
            return trace, record
        allowed = os.sched_getaffinity(0)
    capped = False
    procs.start()
    try:
        armed_at_s = _wait_armed(rec, procs)
        killed_at = None
        while rec.now_s() - armed_at_s < scenario.episode_s:
            rec.spin_for(0.05)
            t = rec.now_s() - armed_at_s
            if cap is not None and capped != cap.active(t):
                capped = cap.active(t)
                cpus = set(sorted(allowed)[: cap.cpus]) if capped else allowed
                procs.set_affinity(CPU_CAP_TARGET, cpus)
                record.setdefault("affinity", []).append((round(t, 3), sorted(cpus)))
            if target and killed_at is None and t >= scenario.start_s:
                procs.kill(target)
                killed_at = rec.now_s()
            if target and killed_at is not None and scenario.end_s is not None:
                respawn = scenario.typed_params().respawn  # type: ignore[attr-defined]
                if respawn and t >= scenario.end_s and target not in dead_windows:
                    procs.respawn(target)
                    dead_windows[target] = [(killed_at, rec.now_s())]
            died = {n: c for n, c in procs.exited().items() if n != target or killed_at is None}
            if died:
                record["died"] = {n: procs.log_tail(n) for n in died}
                break
        if target and killed_at is not None and target not in dead_windows:
            dead_windows[target] = [(killed_at, float("inf"))]
        rec.spin_for(0.2)
    finally:
        codes = procs.stop()
        rec.close()
    record["exit_codes"] = codes
    record["killed"] = procs.killed
    joint_names = rec.joint_names[: len(safety_config.joint_names)] or list(
        safety_config.joint_names
    )
    trace = build_trace(scenario, rec, armed_at_s, joint_names, safety_config.rate_hz, dead_windows)
    if rec.success_at_s is not None and rec.success_at_s - armed_at_s <= scenario.episode_s:
        trace.success = True
        trace.success_time_s = rec.success_at_s - armed_at_s
    alive_at_end = {name.removesuffix("_node"): codes.get(name) == 0 for name in procs.processes}
    if target and not scenario.typed_params().respawn:  # type: ignore[attr-defined]
        alive_at_end[target.removesuffix("_node")] = False
    trace.info.update(
        {
            "task": task,
            "mode": "ros",
            "processes_alive_at_end": alive_at_end,
            "exit_codes": codes,
            "samples": len(trace.t_s),
            "restarts": {k.removesuffix("_node"): v for k, v in procs.killed.items()},
            "safety_status": rec.latest("vla_edge/safety"),
            "controller_status": rec.latest("vla_edge/controller"),
            "camera_faults": camera_fault_counts(rec.latest("vla_edge/inference")),
        }
    )
    if "died" in record:
        trace.info["died"] = record["died"]
    if procs.stop_escalations:
        # A node that ignored SIGINT: which signal ended it, and how its log ends.
        trace.info["stop_escalations"] = {
            name: {"signal": sig, "log_tail": procs.log_tail(name)}
            for name, sig in procs.stop_escalations.items()
        }
    if "affinity" in record:
        trace.info["inference_affinity"] = record["affinity"]
        trace.info["cgroup"] = CpuAffinityCap.cgroup_cap_reason()
    return trace, record


def camera_fault_counts(inference_status: dict[str, str]) -> dict[str, int]:
    """``{"<camera>.<condition>": onsets}`` from the inference node's diagnostics.

    The same keys as the harness's ``camera_faults`` (``camera.<name>.<condition>``
    on ``/diagnostics``; cumulative, so the newest status holds the run's counts).
    """
    counts: dict[str, int] = {}
    for key, value in inference_status.items():
        parts = key.split(".")
        if len(parts) == 3 and parts[0] == "camera" and parts[2] in CAMERA_FAULT_CONDITIONS:
            counts[f"{parts[1]}.{parts[2]}"] = int(value)
    return counts


def _wait_armed(rec: Recorder, procs: FaultGraphProcesses) -> float:
    """Arm the fault injector once every recorded stream flows; return ``armed_at_s``.

    Discovery between a fresh graph's participants takes a moment: the episode
    clock starts only when the recorder receives the safety output, the
    controller command, the joint states and the controller's and injector's
    diagnostics.
    """
    from std_srvs.srv import Trigger

    client = rec.node.create_client(Trigger, SERVICE_FAULT_INJECTOR_ARM)
    deadline = time.monotonic() + ARM_TIMEOUT_S
    future = None
    while time.monotonic() < deadline:
        rec.spin_for(0.1)
        values = rec.latest("vla_edge/fault_injector")
        if values.get("armed") == "1":
            return float(values["armed_at_s"])
        recent = rec.now_s() - 0.5
        flowing = (
            all(stream and stream[-1][0] >= recent for stream in (rec.safe, rec.raw, rec.measured))
            and rec.latest("vla_edge/controller").get("accepted", "0") not in ("0", "0.0")
            and values
        )
        if flowing and future is None and client.service_is_ready():
            future = client.call_async(Trigger.Request())
        exited = procs.exited()
        if exited:
            name = next(iter(exited))
            raise RuntimeError(
                f"node {name} exited with {exited[name]} before the graph came up:\n"
                f"{procs.log_tail(name)}"
            )
    raise TimeoutError(f"the graph did not come up (no chunk) within {ARM_TIMEOUT_S} s")


def run_ros_suite(
    scenarios: Sequence[FaultScenario],
    safety_config: SafetyConfig,
    task: str = "lift_green_block",
    plots_dir: str | Path | None = None,
    progress: Callable[[str, dict[str, Any]], None] | None = None,
    log_dir: str | Path = "out/faults_ros",
    policy: str = "expert",
) -> dict[str, Any]:
    """Run every scenario on the real graph; return the ``faults run`` JSON dict."""
    results: dict[str, dict[str, Any]] = {}
    for scenario in scenarios:
        started = time.perf_counter()
        trace, record = run_ros_scenario(
            scenario, safety_config, scenario.task or task, Path(log_dir) / scenario.name, policy
        )
        result = score(trace, safety_config, state_slack_s=g.DIAGNOSTICS_PERIOD_S)
        if "died" in record:
            result["passed"] = False
            result["failures"].append(f"nodes died: {sorted(record['died'])}")
        result["wall_s"] = time.perf_counter() - started
        result["log_dir"] = record["log_dir"]
        if plots_dir is not None:
            from vla_edge.faults.plots import plot_trace

            path = Path(plots_dir) / f"{scenario.name}_ros.png"
            result["plot"] = str(plot_trace(trace, result, path))
        results[scenario.name] = result
        if progress is not None:
            progress(scenario.name, result)
    out = summarize(results, "ros")
    out["settings"] = {
        "task": task,
        "policy": policy,
        "state_slack_s": g.DIAGNOSTICS_PERIOD_S,
        "ros_domain_id": os.environ.get("ROS_DOMAIN_ID"),
    }
    return out
