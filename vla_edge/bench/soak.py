"""The soak: the sim graph for hours, episodes back to back, mild faults; a JSON and a PNG.

:func:`run_soak` is what ``vla-edge soak`` (:mod:`vla_edge.cli.soak`) runs. The
graph of ``vla-edge launch sim`` starts once (each node its own process) with an
edge program of the bundled model (by default its ExecuTorch export,
made in ``<out>/exports/`` when missing). Then, until ``--duration``:

* **episodes** back to back: a task of the ``tabletop`` suite and an initial
  state (0..49) drawn from a seeded generator, set on the sim node
  (``sim_node/set_parameters``) and applied by ``sim_node/reset``, which homes
  the arm to the scene's initial pose through the controller first (so never
  during an e-stop fault: the next episode waits until the controller has seen
  the e-stop cleared); the episode
  ends at ``task_success`` (plus a short settle) or at the task's time budget.
  In some episodes (``--switch-probability``) the instruction switches at a
  random time to another task's canonical one (published on ``instruction``);
* **mild faults** at random times (about every ``--fault-every-s``, the kinds
  in shuffled rounds): ``inference_crash`` (SIGKILL of the inference process,
  respawned 2 s later: a restart), ``inference_stall`` (SIGSTOP of the inference
  process for 0.3-1.2 s, then SIGCONT: a late chunk) and ``estop`` (``estop``
  pressed for 2 s, released, ``safety/reset`` called). A fault ends when the
  graph is back (the first chunk after the respawn or SIGCONT; the reset's
  reply); the next one comes after it, none in the last 10 s;
* **samples** every ``--sample-s``: each node's resident memory and CPU
  (psutil, children included), the newest ``/diagnostics`` of the controller,
  inference and safety nodes, the machine's CPU load, temperatures and clocks
  where it exposes them; every chunk's age at arrival; every increment of the
  controller's ``buffer_underruns``.

A node that exits on its own is recorded, respawned and counted as an
unexpected restart; the soak goes on. Ctrl-C (or SIGTERM) stops the graph and
still writes the JSON (``interrupted: true``). The figures
(:mod:`vla_edge.bench.soak_report`, whose ``DEFINITIONS`` are copied into the
JSON) are per ``--window-s`` window, and the goals are checked: memory growth
≤ 2 %/h after ``--warmup-s``, no buffer underrun outside a fault window
(+ ``--recovery-s``), controller jitter p99 ≤ 2 ms in every window, no
unexpected exit, every fault recovered.
"""

from __future__ import annotations

import glob
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from vla_edge.bench.soak_report import Episode, Fault, SoakRecord
from vla_edge.control.homing import refusing_stop
from vla_edge.core.errors import ConfigError, VlaEdgeError
from vla_edge.core.stop import StopCategory
from vla_edge.nodes import graph as g
from vla_edge.nodes.graph_run import overrides_for
from vla_edge.nodes.monitor import Monitor
from vla_edge.nodes.supervisor import GraphProcesses

FaultKind = Literal["inference_crash", "inference_stall", "estop"]
FAULT_KINDS: tuple[str, ...] = ("inference_crash", "inference_stall", "estop")
FAULT_TARGET = "inference_node"
RESPAWN_AFTER_S = 2.0  # as config/faults/inference_crash.yaml
STALL_S = (0.3, 1.2)
ESTOP_HOLD_S = 2.0
FAULT_GAP = (0.5, 1.5)  # the time between faults, in units of --fault-every-s
SWITCH_AT = (0.2, 0.6)  # when an instruction switches, as a fraction of the episode's budget
SUCCESS_SETTLE_S = 0.5
# a success published before the reset may still arrive after its reply
SUCCESS_AFTER_RESET_S = 0.3
STARTUP_TIMEOUT_S = 180.0
# no fault begins this close to the end, so that the last one is over before the graph stops
QUIET_END_S = 10.0
RECOVERY_TIMEOUT_S = 60.0
SERVICE_TIMEOUT_S = 10.0
RESET_RETRY_S = 2.0
# The reset homes the arm first, which the controller refuses while the safety node holds
# an e-stop, and until the safety node's next status (one a DIAGNOSTICS_PERIOD_S) shows
# it cleared: after an e-stop fault the next reset waits this long.
ESTOP_CLEAR_SETTLE_S = 1.5 * g.DIAGNOSTICS_PERIOD_S
N_INIT_STATES = 50
SPIN_S = 0.05
MIN_CPU_INTERVAL_S = 1.0
DEFAULT_OUT = Path("out/soak")

# /diagnostics values kept in each sample: {sample key: diagnostic key}
CONTROLLER_KEYS = {
    key: key
    for key in (
        "buffer_underruns",
        "period_jitter_ms_p50",
        "period_jitter_ms_p99",
        "period_jitter_ms_max",
        "period_jitter_ms_mean",
        "period_jitter_ms_count",
        "chunk_age_ms_p99",
        "accepted",
        "rejected",
        "rejected_stale",
        "holding",
        "loop_missed_deadlines",
    )
}
INFERENCE_KEYS = {
    "inferences": "inferences",
    "wall_ms_p50": "stage_ms.wall.p50",
    "wall_ms_p95": "stage_ms.wall.p95",
    "wall_ms_max": "stage_ms.wall.max",
    "expected_delay_s": "expected_delay_s",
    "errors_total": "errors.total",
    "dropped_frames": "dropped_frames",
    # requests dropped as made before the controller had the last chunk (chunk_transit_s)
    "stale_requests": "stale_requests",
}
SAFETY_KEYS = {
    "rejected": "rejected",
    "brake_ticks": "brake_ticks",
    "ticks": "ticks",
    "limited_ticks": "limited_ticks",
}
# histograms read at every sample: {name: (diagnostic status, node, key prefix)}
HISTOGRAMS = {
    "controller_jitter": ("vla_edge/controller", "controller_node", "period_jitter_ms_"),
    "inference_wall": ("vla_edge/inference", "inference_node", "stage_ms.wall."),
}


class SoakSettingsError(ConfigError):
    """An option of ``vla-edge soak`` is out of range or inconsistent with another."""


class SoakStartupError(VlaEdgeError):
    """The graph did not come up (no chunk) in time, or a node exited while starting."""


# ------------------------------------------------------------------ settings

_FLAGS = {
    "duration_s": "--duration",
    "window_s": "--window-s",
    "warmup_s": "--warmup-s",
    "sample_s": "--sample-s",
    "fault_every_s": "--fault-every-s",
    "faults": "--faults",
    "switch_probability": "--switch-probability",
    "recovery_s": "--recovery-s",
    "episode_s": "--episode-s",
    "seed": "--seed",
}


class SoakSettings(BaseModel):
    """How a soak runs (recorded in the JSON)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    duration_s: float = Field(gt=0.0, description="seconds of soak after the graph is up")
    window_s: float = Field(300.0, gt=0.0, description="length of a statistics window (s)")
    warmup_s: float = Field(
        300.0, ge=0.0, description="memory growth is fitted this long after a process starts (s)"
    )
    sample_s: float = Field(5.0, gt=0.0, le=60.0, description="sampling period (s)")
    fault_every_s: float = Field(180.0, gt=0.0, description="mean time between faults (s)")
    faults: tuple[FaultKind, ...] = Field(
        FAULT_KINDS, description="fault kinds, used in shuffled rounds (empty: none)"
    )
    switch_probability: float = Field(
        0.5, ge=0.0, le=1.0, description="share of episodes whose instruction switches"
    )
    recovery_s: float = Field(
        3.0, ge=0.0, le=60.0, description="a fault's window extends this long past its end (s)"
    )
    episode_s: float | None = Field(
        None, gt=0.0, description="cap on an episode's time (s; default: the task's budget)"
    )
    seed: int = Field(0, ge=0, description="seed of the episode and fault draws")


def make_settings(**values: Any) -> SoakSettings:
    """:class:`SoakSettings` from option values, with the cross-option checks.

    Raises:
        SoakSettingsError: names the option, its value and the bound.
    """
    try:
        settings = SoakSettings(**values)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            name = str(err["loc"][0]) if err.get("loc") else ""
            bound = ", ".join(f"{k} {v}" for k, v in (err.get("ctx") or {}).items() if k != "error")
            line = f"{_FLAGS.get(name, name)} = {err.get('input')!r}: {err['msg']}"
            lines.append(line + (f" ({bound})" if bound else ""))
        raise SoakSettingsError("; ".join(lines)) from None
    checks = (
        (settings.window_s <= settings.duration_s, "window_s", "duration_s", "at most"),
        (settings.warmup_s < settings.duration_s, "warmup_s", "duration_s", "less than"),
        (settings.sample_s <= settings.window_s, "sample_s", "window_s", "at most"),
    )
    for ok, name, other, relation in checks:
        if not ok:
            raise SoakSettingsError(
                f"{_FLAGS[name]} = {getattr(settings, name)}: must be {relation} "
                f"{_FLAGS[other]} = {getattr(settings, other)}"
            )
    return settings


def parse_faults(text: str) -> tuple[str, ...]:
    """``"inference_crash,estop"`` -> the kinds; ``""`` or ``"none"`` -> none.

    Raises:
        SoakSettingsError: a kind that is not one of :data:`FAULT_KINDS`.
    """
    kinds = tuple(k.strip() for k in text.split(",") if k.strip() and k.strip() != "none")
    unknown = [k for k in kinds if k not in FAULT_KINDS]
    if unknown:
        raise SoakSettingsError(
            f"--faults = {text!r}: unknown kind(s) {unknown}; expected some of {FAULT_KINDS}"
        )
    return kinds


# ------------------------------------------------------------------ plans (seeded)


@dataclass(frozen=True)
class EpisodeSpec:
    """One episode: the scene, its budget, and the instruction switch if any.

    Attributes:
        switch_at_s: seconds after the reset; ``None``: no switch.
        switch_instruction: the canonical instruction of ``switch_task``.
    """

    task: str
    init_state_id: int
    budget_s: float
    switch_at_s: float | None = None
    switch_task: str | None = None
    switch_instruction: str | None = None


class EpisodeSource(Protocol):
    """Where the soak takes its next episode from; ``None``: no more (the soak ends)."""

    def next(self) -> EpisodeSpec | None:
        """The next episode, or ``None``."""
        ...


class ListedEpisodes:
    """A fixed list of episodes, in order (graph evaluation: the evaluator's episodes)."""

    def __init__(self, specs: Sequence[EpisodeSpec]) -> None:
        self._specs = list(specs)

    def next(self) -> EpisodeSpec | None:
        """The next listed episode, ``None`` after the last."""
        return self._specs.pop(0) if self._specs else None


class EpisodePlan:
    """Episodes drawn from a seeded generator: task, initial state, switch."""

    def __init__(self, seed: int, switch_probability: float, episode_s: float | None) -> None:
        from vla_edge.sim.tasks import get_task, list_tasks

        self._rng = np.random.default_rng([seed, 0])
        self._tasks = [get_task(name) for name in list_tasks()]
        self.switch_probability = switch_probability
        self.episode_s = episode_s

    def next(self) -> EpisodeSpec:
        """The next episode."""
        task = self._tasks[int(self._rng.integers(len(self._tasks)))]
        init_state_id = int(self._rng.integers(N_INIT_STATES))
        budget_s = task.budget_s if self.episode_s is None else min(task.budget_s, self.episode_s)
        if self._rng.random() >= self.switch_probability:
            return EpisodeSpec(task.name, init_state_id, budget_s)
        others = [t for t in self._tasks if t.name != task.name]
        other = others[int(self._rng.integers(len(others)))]
        at_s = float(self._rng.uniform(*SWITCH_AT)) * budget_s
        return EpisodeSpec(task.name, init_state_id, budget_s, at_s, other.name, other.instruction)


class FaultPlan:
    """When the next fault comes and of which kind: seeded, the kinds in shuffled rounds."""

    def __init__(self, kinds: Sequence[str], every_s: float, seed: int) -> None:
        self.kinds = tuple(kinds)
        self.every_s = every_s
        self._rng = np.random.default_rng([seed, 1])
        self._round: list[str] = []

    def gap_s(self) -> float:
        """Seconds from the end of a fault (or the start) to the next one."""
        return float(self._rng.uniform(*FAULT_GAP)) * self.every_s

    def kind(self) -> str:
        """The next kind: every kind once per round, in a fresh order each round."""
        if not self._round:
            self._round = [self.kinds[i] for i in self._rng.permutation(len(self.kinds))]
        return self._round.pop(0)

    def stall_s(self) -> float:
        """How long an ``inference_stall`` keeps the process stopped."""
        return float(self._rng.uniform(*STALL_S))


# ------------------------------------------------------------------ the machine


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def temperatures_c() -> dict[str, float] | None:
    """Each thermal zone's temperature (``type``: °C), else psutil's hwmon sensors; ``None``: none.

    Thermal zones are what a Jetson exposes (``cpu-thermal``, ``gpu-thermal``,
    ``tj-thermal``, ...); a PC without them may still have hwmon chips (``coretemp``).
    """
    out: dict[str, float] = {}
    for zone in sorted(glob.glob("/sys/class/thermal/thermal_zone*")):
        temp = _read(f"{zone}/temp")
        if temp and temp.lstrip("-").isdigit():
            out[_read(f"{zone}/type") or Path(zone).name] = round(int(temp) / 1e3, 1)
    if out:
        return out
    import psutil

    sensors = getattr(psutil, "sensors_temperatures", dict)()
    for chip, entries in sorted(sensors.items()):
        for i, entry in enumerate(entries):
            out[f"{chip}/{entry.label or i}"] = round(float(entry.current), 1)
    return out or None


def cpu_freq_mhz() -> dict[str, Any] | None:
    """Current CPU clock over the cores (min/mean/max) and where it was read; ``None``: nowhere."""
    sysfs = sorted(glob.glob("/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_cur_freq"))
    values = [int(v) / 1e3 for v in (_read(p) for p in sysfs) if v and v.isdigit()]
    source = "cpufreq"
    if not values:
        source = "cpuinfo"
        values = [
            float(line.split(":", 1)[1])
            for line in (_read("/proc/cpuinfo") or "").splitlines()
            if line.lower().startswith("cpu mhz")
        ]
    if not values:
        return None
    return {
        "min": round(min(values), 0),
        "mean": round(float(np.mean(values)), 0),
        "max": round(max(values), 0),
        "source": source,
    }


def devfreq_mhz() -> dict[str, float] | None:
    """Current clock of each ``/sys/class/devfreq`` device (a Jetson's GPU, EMC); ``None``: none."""
    out = {}
    for device in sorted(glob.glob("/sys/class/devfreq/*")):
        value = _read(f"{device}/cur_freq")
        if value and value.isdigit():
            out[Path(device).name] = round(int(value) / 1e6, 1)
    return out or None


def machine() -> dict[str, Any]:
    """What the numbers were measured on (the benchmarks' record of the machine)."""
    from vla_edge.bench.latency import machine_info

    return machine_info()


# ------------------------------------------------------------------ processes


@dataclass
class SoakGraph(GraphProcesses):
    """The graph's processes, plus what the soak does to them: kill, pause, respawn, measure."""

    expected_exit: set[str] = field(default_factory=set)
    _procs: dict[int, Any] = field(default_factory=dict, init=False, repr=False)
    _cpu_s: dict[int, tuple[float, float]] = field(default_factory=dict, init=False, repr=False)

    def kill(self, name: str) -> None:
        """SIGKILL node ``name`` (a crash the soak causes)."""
        self.expected_exit.add(name)
        process = self.nodes[name].process
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10.0)

    def pause(self, name: str) -> None:
        """SIGSTOP node ``name``'s process group."""
        os.killpg(self.pid(name), signal.SIGSTOP)

    def resume(self, name: str) -> None:
        """SIGCONT node ``name``'s process group."""
        try:
            os.killpg(self.pid(name), signal.SIGCONT)
        except ProcessLookupError:
            pass  # it died meanwhile: the exit check finds it

    def respawn(self, name: str) -> int:
        """Start node ``name`` again (its log is appended to); returns the new pid."""
        import subprocess

        node = self.nodes[name]
        env = self.child_env()
        with node.log_path.open("a") as log:
            log.write(f"\n--- vla-edge soak: respawned at {time.strftime('%H:%M:%S')} ---\n")
            log.flush()
            node.process = subprocess.Popen(
                self.command(node.spec),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        self.expected_exit.discard(name)
        return node.process.pid

    def usage(self) -> dict[str, tuple[int, float, float | None]]:
        """``(pid, rss_mb, cpu_pct)`` of each running node, its children included.

        ``cpu_pct`` is the CPU time since the previous measurement of the same
        pid over the wall time between them (100: one core); ``None`` the first
        time and within :data:`MIN_CPU_INTERVAL_S` of the previous one (CPU times
        tick in 10 ms).
        """
        import psutil

        now = time.monotonic()
        out: dict[str, tuple[int, float, float | None]] = {}
        for name, node in self.nodes.items():
            pid = node.process.pid
            if node.process.poll() is not None:
                continue
            try:
                proc = self._procs.setdefault(pid, psutil.Process(pid))
                rss = proc.memory_info().rss
                times = proc.cpu_times()
                cpu_s = times.user + times.system
                for child in proc.children(recursive=True):
                    rss += child.memory_info().rss
                    child_times = child.cpu_times()
                    cpu_s += child_times.user + child_times.system
            except psutil.Error:
                continue
            previous = self._cpu_s.get(pid)
            pct = None
            if previous is None:
                self._cpu_s[pid] = (now, cpu_s)
            elif now - previous[0] >= MIN_CPU_INTERVAL_S:
                pct = (cpu_s - previous[1]) / (now - previous[0]) * 100.0
                self._cpu_s[pid] = (now, cpu_s)
            out[name] = (pid, rss / 2**20, pct)
        return out


# ------------------------------------------------------------------ ROS side


def _histogram(
    values: Mapping[str, str], usage: tuple[Any, ...] | None, prefix: str
) -> tuple[int | None, str, float] | None:
    """``(pid, bins, bin width)`` of one published histogram; ``None`` if not there yet."""
    try:
        bins, width = values[f"{prefix}bins"], float(values[f"{prefix}bin_width"])
    except (KeyError, ValueError):
        return None
    return (usage[0] if usage else None, bins, width)


def _holds_no_stop(state: str) -> bool:
    """Whether a safety status ``state`` is a known one below a category-1 stop."""
    known = state in {c.value for c in StopCategory}  # an unknown one is not known clear
    return known and refusing_stop(state) is None


def _subset(values: Mapping[str, str], keys: Mapping[str, str]) -> dict[str, Any]:
    """``{sample key: float}`` of the diagnostic ``values`` (absent or non-numeric: ``None``)."""
    out: dict[str, Any] = {}
    for name, key in keys.items():
        try:
            out[name] = round(float(values[key]), 4)
        except (KeyError, ValueError):
            out[name] = None
    return out


class SoakMonitor(Monitor):
    """The launch monitor plus chunk ages, underrun readings and success times.

    It also holds the instruction and e-stop publishers and the clients of the
    sim's and the safety node's services. Times are ``time.monotonic()`` seconds.
    """

    def __init__(self, namespace: str = "") -> None:
        super().__init__(record=False, namespace=namespace)
        from rcl_interfaces.srv import SetParameters
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from std_msgs.msg import Bool, String
        from std_srvs.srv import Trigger
        from trajectory_msgs.msg import JointTrajectory

        self.chunk_ages: list[tuple[float, float]] = []  # (monotonic s, age ms)
        self.underrun_readings: list[tuple[float, float]] = []
        self.last_success_s: float | None = None
        # when the latest safety status came, if it held no stop the controller refuses
        # homing under (``None``: none yet, or the latest holds a cat1 / cat0 stop)
        self.safety_clear_s: float | None = None
        latched = QoSProfile(
            depth=1,
            reliability=ReliabilityPolicy.RELIABLE,
            durability=DurabilityPolicy.TRANSIENT_LOCAL,
        )
        qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        self.node.create_subscription(
            JointTrajectory, g.TOPIC_ACTION_CHUNK, self._on_chunk_age, qos
        )
        self.instruction_pub = self.node.create_publisher(String, g.TOPIC_INSTRUCTION, latched)
        self.estop_pub = self.node.create_publisher(Bool, g.TOPIC_ESTOP, qos)
        self.sim_parameters = self.node.create_client(
            SetParameters, g.private_in_namespace(g.SIM_NODE.name, "~/set_parameters")
        )
        self.sim_reset = self.node.create_client(Trigger, g.SERVICE_SIM_RESET)
        self.safety_reset = self.node.create_client(Trigger, g.SERVICE_SAFETY_RESET)

    def on_diagnostics(self, msg: Any) -> None:
        """The launch monitor's statuses, plus each reading of the controller's underruns."""
        super().on_diagnostics(msg)
        now = time.monotonic()
        for status in msg.status:
            name = self.own_status_name(status.name)
            if name == "vla_edge/controller":
                value = _subset({kv.key: kv.value for kv in status.values}, CONTROLLER_KEYS)
                if value["buffer_underruns"] is not None:
                    self.underrun_readings.append((now, value["buffer_underruns"]))
            elif name == "vla_edge/safety":
                state = {kv.key: kv.value for kv in status.values}.get("state")
                if state is not None:
                    self.safety_clear_s = now if _holds_no_stop(state) else None

    def on_task_success(self, msg: Any) -> None:
        """The launch monitor's first success, plus the time of the latest one."""
        super().on_task_success(msg)
        if msg.data:
            self.last_success_s = time.monotonic()

    def _on_chunk_age(self, msg: Any) -> None:
        from vla_edge.nodes.conversions import S_PER_NS, stamp_to_s

        now_s = self.node.get_clock().now().nanoseconds * S_PER_NS
        self.chunk_ages.append((time.monotonic(), (now_s - stamp_to_s(msg.header.stamp)) * 1e3))

    def call(self, client: Any, request: Any, timeout_s: float = SERVICE_TIMEOUT_S) -> Any:
        """Call a service and spin until its reply; ``None`` on timeout or no server."""
        deadline = time.monotonic() + timeout_s
        while not client.service_is_ready():
            if time.monotonic() > deadline:
                return None
            self.spin_for(SPIN_S)
        future = client.call_async(request)
        while not future.done():
            if time.monotonic() > deadline:
                client.remove_pending_request(future)
                return None
            self.executor.spin_once(timeout_sec=SPIN_S)
        return future.result()

    def reset_sim(self, task: str, init_state_id: int) -> str | None:
        """Set the sim's ``task`` / ``init_state_id`` and reset it; ``None`` or why it failed."""
        from rcl_interfaces.srv import SetParameters
        from rclpy.parameter import Parameter
        from std_srvs.srv import Trigger

        request = SetParameters.Request()
        request.parameters = [
            Parameter("task", Parameter.Type.STRING, task).to_parameter_msg(),
            Parameter("init_state_id", Parameter.Type.INTEGER, init_state_id).to_parameter_msg(),
        ]
        reply = self.call(self.sim_parameters, request)
        if reply is None:
            return "sim_node/set_parameters did not answer"
        refused = [r.reason for r in reply.results if not r.successful]
        if refused:
            return f"sim_node refused the parameters: {refused}"
        reply = self.call(self.sim_reset, Trigger.Request())
        if reply is None:
            return f"{g.SERVICE_SIM_RESET} did not answer"
        return None if reply.success else reply.message

    def publish_instruction(self, text: str) -> None:
        """Publish ``text`` on ``instruction`` (transient-local)."""
        from std_msgs.msg import String

        self.instruction_pub.publish(String(data=text))

    def press_estop(self, pressed: bool) -> None:
        """Publish ``estop``."""
        from std_msgs.msg import Bool

        self.estop_pub.publish(Bool(data=pressed))

    def reset_safety(self) -> tuple[bool, str]:
        """Call ``safety/reset``; whether it succeeded, and its reply (or why not)."""
        from std_srvs.srv import Trigger

        reply = self.call(self.safety_reset, Trigger.Request())
        if reply is None:
            return False, f"{g.SERVICE_SAFETY_RESET} did not answer"
        return bool(reply.success), str(reply.message)


# ------------------------------------------------------------------ the run


class Soak:
    """Runs the graph, the episodes, the faults and the sampling; returns a :class:`SoakRecord`.

    Args:
        settings: the validated options.
        policy: the inference node's policy string (an export directory, ``expert``, ...).
        threads: inference threads.
        log_dir: each node's log.
        announce: where progress lines go.
        stop: set (by a signal handler) to end the soak early; it is checked
            between steps, so no exception lands inside an rclpy call.
    """

    def __init__(
        self,
        settings: SoakSettings,
        policy: str,
        threads: int | None,
        log_dir: Path,
        announce: Callable[[str], None] = print,
        stop: threading.Event | None = None,
        episodes: EpisodeSource | None = None,
        device: str | None = None,
    ) -> None:
        self.settings = settings
        self.announce = announce
        self.stop = stop if stop is not None else threading.Event()
        self.episodes: EpisodeSource = episodes or EpisodePlan(
            settings.seed, settings.switch_probability, settings.episode_s
        )
        self.fault_plan = FaultPlan(settings.faults, settings.fault_every_s, settings.seed)
        first = self.episodes.next()
        if first is None:
            raise SoakSettingsError("episodes: the list is empty")
        self.first = first
        self.exhausted = False
        overrides = overrides_for("sim", first.task, policy, threads, device=device)
        self.graph = SoakGraph("sim", overrides, log_dir=log_dir)
        self.record = SoakRecord()
        self.monitor: SoakMonitor | None = None
        self.t_up: float | None = None
        self.episode: Episode | None = None
        self.spec: EpisodeSpec | None = None
        self.instruction: str | None = None
        self.fault: Fault | None = None
        self.next_fault_s = self.fault_plan.gap_s() if settings.faults else float("inf")
        self.next_reset_s = 0.0
        # the episode to reset to (kept until a reset succeeds); the first one is the
        # task the sim starts with
        self.spec_pending: EpisodeSpec | None = self.first
        self._chunks_seen_at_undo = 0
        self._estop_cleared_s: float | None = None

    def now_s(self) -> float:
        """Seconds since the graph came up."""
        assert self.t_up is not None
        return time.monotonic() - self.t_up

    # --- the loop -------------------------------------------------------------------------

    def run(self) -> SoakRecord:
        """Start the graph, soak for the duration (or until :attr:`stop`), stop it."""
        import psutil
        import rclpy
        from rclpy.executors import ExternalShutdownException
        from rclpy.signals import SignalHandlerOptions

        t_start = time.monotonic()
        psutil.cpu_percent(interval=None)  # the machine's CPU share is measured from here
        psutil.cpu_times_percent(interval=None)  # and the time a hypervisor took (steal)
        # rclpy's own handlers would shut the context down under a running call
        rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
        self.monitor = SoakMonitor()
        self.graph.start()
        self.announce(
            "started "
            + ", ".join(f"{n} (pid {p.process.pid})" for n, p in self.graph.nodes.items())
            + f"; logs in {self.graph.log_dir}/"
        )
        try:
            if self._wait_up(t_start):
                self.record.startup_s = round(time.monotonic() - t_start, 2)
                self.announce(f"graph up after {self.record.startup_s:.1f} s: soaking")
            next_sample_s = 0.0
            while (
                not self.stop.is_set()
                and not self.exhausted
                and self.now_s() < self.settings.duration_s
            ):
                self.monitor.spin_for(SPIN_S)
                self._check_exits()
                self._step_fault()
                self._step_episode()
                if self.now_s() >= next_sample_s:
                    self._sample()
                    next_sample_s += self.settings.sample_s
        except (KeyboardInterrupt, ExternalShutdownException):
            self.stop.set()
        finally:
            if self.stop.is_set():
                self.record.interrupted = True
                self.announce("interrupted: stopping the graph, writing what was recorded")
            self._finish()
            rclpy.try_shutdown()
        return self.record

    def _wait_up(self, t_start: float) -> bool:
        """Spin until the graph is up (``True``) or a stop (``False``).

        Up: a chunk came, and then a safety status without a category-1 / 0 stop. The
        safety node starts in one (no command, no joint state yet) and the controller
        refuses homing, so the first reset, until a status says it has cleared.

        Raises:
            SoakStartupError: a node exited, or the graph was not up in time.
        """
        assert self.monitor is not None
        while not self._graph_up():
            if self.stop.is_set():
                return False
            self.monitor.spin_for(0.1)
            exited = self.graph.exited()
            if exited:
                name = next(iter(exited))
                raise SoakStartupError(
                    f"node {name} exited with {exited[name]} before the graph came up:\n"
                    f"{self.graph.log_tail(name)}"
                )
            if time.monotonic() - t_start > STARTUP_TIMEOUT_S:
                if not self.monitor.chunk_ages:
                    raise SoakStartupError(
                        f"no chunk within {STARTUP_TIMEOUT_S:.0f} s of starting the graph; "
                        f"the inference node's log ends:\n{self.graph.log_tail(FAULT_TARGET)}"
                    )
                raise SoakStartupError(
                    f"the safety node still held a stop {STARTUP_TIMEOUT_S:.0f} s after "
                    f"starting the graph ({self.monitor.status('vla_edge/safety')}); its log "
                    f"ends:\n{self.graph.log_tail(g.SAFETY_NODE.name)}"
                )
        self.t_up = self.monitor.chunk_ages[0][0]
        return True

    def _graph_up(self) -> bool:
        """A chunk came, and a safety status without a stop after it."""
        assert self.monitor is not None
        clear_s = self.monitor.safety_clear_s
        return (
            bool(self.monitor.chunk_ages)
            and clear_s is not None
            and clear_s > self.monitor.chunk_ages[0][0]
        )

    def _finish(self) -> None:
        """Undo a fault in progress, take a last sample, stop the graph, close the monitor."""
        fault = self.fault
        if fault is not None and fault.undone_s is None and fault.kind == "inference_stall":
            self.graph.resume(FAULT_TARGET)
        if self.t_up is not None:
            self.record.duration_s = round(self.now_s(), 3)
            if fault is not None:  # the soak ended inside it: neither recovered nor not
                fault.end_s, fault.recovered = self.record.duration_s, None
                fault.detail += "; the soak ended first"
                self.record.faults.append(fault)
            if self.episode is not None and self.episode.end is None:
                self._end_episode("soak_end")
            try:
                self._sample()
            except Exception as exc:  # noqa: BLE001 - the graph must still stop
                self.announce(f"last sample failed: {exc!r}")
        self.record.exit_codes = self.graph.stop()
        self.record.stop_escalations = dict(self.graph.stop_escalations)
        if self.monitor is not None:
            self.record.chunk_ages = self._relative(self.monitor.chunk_ages)
            self.record.underrun_readings = self._relative(self.monitor.underrun_readings)
            self.monitor.close()

    def _relative(self, rows: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
        origin = self.t_up if self.t_up is not None else 0.0
        return [(round(t - origin, 3), round(v, 3)) for t, v in rows]

    # --- node exits -----------------------------------------------------------------------

    def _check_exits(self) -> None:
        for name, code in self.graph.exited().items():
            if name in self.graph.expected_exit:
                continue
            t_s = round(self.now_s(), 3)
            tail = self.graph.log_tail(name)
            self.announce(f"node {name} exited with {code} at {t_s:.0f} s: respawning\n{tail}")
            self.record.unexpected_exits.append(
                {"t_s": t_s, "node": name, "returncode": code, "log_tail": tail}
            )
            pid = self.graph.respawn(name)
            self.record.restarts.append(
                {"t_s": t_s, "node": name, "cause": "unexpected", "pid": pid}
            )

    # --- faults ---------------------------------------------------------------------------

    def _step_fault(self) -> None:
        now = self.now_s()
        fault = self.fault
        if fault is None:
            if self.next_fault_s <= now <= self.settings.duration_s - QUIET_END_S:
                self._begin_fault(now)
            return
        if fault.undone_s is None:
            if now >= fault.undo_at_s:
                self._undo_fault(fault)
            return
        self._await_recovery(fault, now)

    def _begin_fault(self, now: float) -> None:
        kind = self.fault_plan.kind()
        assert self.monitor is not None
        now = round(now, 3)
        if kind == "inference_crash":
            self.graph.kill(FAULT_TARGET)
            fault = Fault(kind, now, now + RESPAWN_AFTER_S, detail="SIGKILL, respawn after 2 s")
        elif kind == "inference_stall":
            stall_s = self.fault_plan.stall_s()
            self.graph.pause(FAULT_TARGET)
            fault = Fault(kind, now, round(now + stall_s, 3), detail=f"SIGSTOP for {stall_s:.2f} s")
        else:
            self.monitor.press_estop(True)
            fault = Fault(kind, now, now + ESTOP_HOLD_S, detail=f"pressed for {ESTOP_HOLD_S} s")
        self.fault = fault
        self.announce(f"{now:7.1f} s  fault {kind}: {fault.detail}")

    def _undo_fault(self, fault: Fault) -> None:
        assert self.monitor is not None
        if fault.kind == "inference_crash":
            pid = self.graph.respawn(FAULT_TARGET)
            self.record.restarts.append(
                {
                    "t_s": round(self.now_s(), 3),
                    "node": FAULT_TARGET,
                    "cause": "injected",
                    "pid": pid,
                }
            )
        elif fault.kind == "inference_stall":
            self.graph.resume(FAULT_TARGET)
        else:
            self.monitor.press_estop(False)
        fault.undone_s = round(self.now_s(), 3)
        self._chunks_seen_at_undo = len(self.monitor.chunk_ages)
        if fault.kind == "estop":
            ok, reply = self.monitor.reset_safety()
            self._estop_cleared_s = self.now_s()
            self._end_fault(fault, self.now_s(), ok, f"reset: {reply}")

    def _await_recovery(self, fault: Fault, now: float) -> None:
        assert self.monitor is not None and self.t_up is not None
        ages = self.monitor.chunk_ages
        if len(ages) > self._chunks_seen_at_undo:
            self._end_fault(fault, ages[self._chunks_seen_at_undo][0] - self.t_up, True)
            if fault.kind == "inference_crash" and self.instruction is not None:
                # the new process took the latched instruction of the sim and of the soak in
                # either order: say again which one is in force
                self.monitor.publish_instruction(self.instruction)
        elif now - (fault.undone_s or now) > RECOVERY_TIMEOUT_S:
            self._end_fault(fault, now, False, f"no chunk within {RECOVERY_TIMEOUT_S:.0f} s")

    def _end_fault(self, fault: Fault, end_s: float, recovered: bool, why: str = "") -> None:
        fault.end_s = round(end_s, 3)
        fault.recovered = recovered
        if why:
            fault.detail += f"; {why}"
        self.record.faults.append(fault)
        self.fault = None
        self.next_fault_s = end_s + self.settings.recovery_s + self.fault_plan.gap_s()
        self.announce(
            f"{end_s:7.1f} s  fault {fault.kind} over "
            f"({'recovered' if recovered else 'NOT recovered'} after {end_s - fault.start_s:.1f} s)"
        )

    # --- episodes -------------------------------------------------------------------------

    def _step_episode(self) -> None:
        now = self.now_s()
        episode, spec = self.episode, self.spec
        if episode is None or episode.end is not None:
            if now >= self.next_reset_s and not self._estop_holds(now):
                self._start_episode()
            return
        assert self.monitor is not None and self.t_up is not None and spec is not None
        if (
            spec.switch_at_s is not None
            and episode.switched_t_s is None
            and now - episode.t_start_s >= spec.switch_at_s
        ):
            assert spec.switch_instruction is not None
            self.instruction = spec.switch_instruction
            self.monitor.publish_instruction(self.instruction)
            episode.switched_t_s = round(now, 3)
            self.announce(f"{now:7.1f} s  instruction -> {self.instruction!r}")
        success_s = self.monitor.last_success_s
        if (
            not episode.success
            and success_s is not None
            and success_s - self.t_up >= episode.t_start_s + SUCCESS_AFTER_RESET_S
        ):
            episode.success = True
            episode.success_t_s = round(success_s - self.t_up, 3)
        if episode.success and now >= episode.success_t_s + SUCCESS_SETTLE_S:
            self._end_episode("success")
        elif now - episode.t_start_s >= episode.budget_s:
            self._end_episode("budget")

    def _estop_holds(self, now: float) -> bool:
        """Whether an e-stop fault, or the status period after its reset, would refuse homing."""
        fault = self.fault
        if fault is not None and fault.kind == "estop" and fault.undone_s is None:
            return True
        cleared_s = self._estop_cleared_s
        return cleared_s is not None and now - cleared_s < ESTOP_CLEAR_SETTLE_S

    def _start_episode(self) -> None:
        assert self.monitor is not None
        spec = self.spec_pending or self.episodes.next()
        if spec is None:  # a listed plan has run its last episode
            self.exhausted = True
            return
        self.spec_pending = spec
        why = self.monitor.reset_sim(spec.task, spec.init_state_id)
        now = self.now_s()
        if why is not None:
            self.record.reset_failures.append({"t_s": round(now, 3), "why": why})
            self.announce(f"{now:7.1f} s  reset failed ({why}); again in {RESET_RETRY_S:.0f} s")
            self.next_reset_s = now + RESET_RETRY_S
            return
        self.spec_pending = None
        self.spec = spec
        task_instruction = _instruction(spec.task)
        self.instruction = task_instruction
        self.monitor.publish_instruction(task_instruction)
        self.episode = Episode(
            len(self.record.episodes) + 1,
            spec.task,
            spec.init_state_id,
            spec.budget_s,
            round(now, 3),
            spec.switch_task,
            None if spec.switch_at_s is None else round(spec.switch_at_s, 3),
        )
        self.record.episodes.append(self.episode)
        self.announce(
            f"{now:7.1f} s  episode {self.episode.index}: {spec.task} #{spec.init_state_id}"
            + (
                f", switch to {spec.switch_task} at +{spec.switch_at_s:.1f} s"
                if spec.switch_task
                else ""
            )
        )

    def _end_episode(self, why: str) -> None:
        assert self.episode is not None
        self.episode.end = why
        self.episode.t_end_s = round(self.now_s(), 3)
        self.next_reset_s = self.now_s()

    # --- samples --------------------------------------------------------------------------

    def _sample(self) -> None:
        import psutil

        assert self.monitor is not None
        usage = self.graph.usage()
        self.record.histograms.append(
            {
                "t_s": round(self.now_s(), 3),
                **{
                    name: _histogram(self.monitor.status(status), usage.get(node), key)
                    for name, (status, node, key) in HISTOGRAMS.items()
                },
            }
        )
        self.record.samples.append(
            {
                "t_s": round(self.now_s(), 3),
                "pid": {n: u[0] for n, u in usage.items()},
                "rss_mb": {n: round(u[1], 2) for n, u in usage.items()},
                "cpu_pct": {n: None if u[2] is None else round(u[2], 1) for n, u in usage.items()},
                "controller": _subset(self.monitor.status("vla_edge/controller"), CONTROLLER_KEYS),
                "inference": _subset(self.monitor.status("vla_edge/inference"), INFERENCE_KEYS),
                "safety": {
                    "state": self.monitor.status("vla_edge/safety").get("state"),
                    **_subset(self.monitor.status("vla_edge/safety"), SAFETY_KEYS),
                },
                "host": {
                    "cpu_pct": psutil.cpu_percent(interval=None),
                    "steal_pct": steal_pct(psutil.cpu_times_percent(interval=None)),
                    "load_1m": round(os.getloadavg()[0], 2),
                    "mem_available_mb": round(psutil.virtual_memory().available / 2**20, 0),
                    "temperature_c": temperatures_c(),
                    "cpu_freq_mhz": cpu_freq_mhz(),
                    "devfreq_mhz": devfreq_mhz(),
                },
            }
        )


def steal_pct(times: Any) -> float | None:
    """The share of CPU time a hypervisor gave to others (``None`` where not reported)."""
    value = getattr(times, "steal", None)
    return None if value is None else round(float(value), 1)


def _instruction(task: str) -> str:
    from vla_edge.sim.tasks import get_task

    return get_task(task).instruction


# ------------------------------------------------------------------ soak and report


@dataclass(frozen=True)
class SoakResult:
    """A finished soak: its report (the JSON's content), its record and the files written.

    Attributes:
        policy: the inference node's policy string the soak ran (an export directory, ...).
        json_path: ``<out>/soak.json``.
        png_path: ``<out>/soak.png``.
    """

    report: dict[str, Any]
    record: SoakRecord
    policy: str
    json_path: Path
    png_path: Path


def resolve_policy(policy: str | None, quant: str, out: Path) -> str:
    """``policy``, or the bundled model's ExecuTorch export (made under ``out`` when missing)."""
    if policy is not None:
        return policy
    from vla_edge.sim.sweep import ensure_export

    return ensure_export(out, "bundled", "executorch", quant, "vla-edge soak")


def run_soak(
    settings: SoakSettings,
    policy: str | None,
    threads: int | None,
    out: Path,
    quant: str = "fp32",
    announce: Callable[[str], None] = print,
    stop: threading.Event | None = None,
) -> SoakResult:
    """Soak the sim graph and write ``<out>/soak.json`` and ``<out>/soak.png``.

    Args:
        policy: the inference node's policy; ``None``: the bundled model's ExecuTorch
            export of recipe ``quant``, made under ``out`` when missing.
        threads: inference threads (``None``: the inference node's config).
        out: the soak's directory; the nodes' logs go to ``<out>/logs``.
        stop: set it (from a signal handler) to end the soak early; the JSON is
            still written, with ``interrupted: true``.

    Raises:
        SoakSettingsError: ``threads`` below 1.
        SoakStartupError: the graph did not come up.
    """
    from vla_edge.bench.soak_report import build_report, plot_soak, report_json

    if threads is not None and threads < 1:
        raise SoakSettingsError(f"--threads = {threads}: must be >= 1")
    out.mkdir(parents=True, exist_ok=True)
    policy = resolve_policy(policy, quant, out)
    log_dir = out / "logs"
    record = Soak(settings, policy, threads, log_dir, announce=announce, stop=stop).run()
    recorded_settings = {
        **settings.model_dump(mode="json"),
        "policy": policy,
        "threads": threads,
        "ros_domain_id": os.environ.get("ROS_DOMAIN_ID"),
        "log_dir": str(log_dir),
        "respawn_after_s": RESPAWN_AFTER_S,
        "stall_s": list(STALL_S),
        "estop_hold_s": ESTOP_HOLD_S,
    }
    report = build_report(record, recorded_settings, machine())
    json_path = out / "soak.json"
    json_path.write_text(report_json(report))
    png_path = plot_soak(report, out / "soak.png")
    return SoakResult(report, record, policy, json_path, png_path)
