"""A virtual-time closed loop that mirrors the ROS graph, with fault injection points.

One tick of ``env.control_dt_s`` (100 Hz) runs, in the order of the graph:

1. **sim**: measures the joints (``/joint_states``) and, every
   ``camera_period_s``, captures one frame per camera stamped with the system
   clock (``/camera/<name>/image_raw``); each passes through the injector on its own.
2. **inference** (``nodes/inference_node.py``; alive unless crashed): the
   node's own :class:`~vla_edge.inference.observation_slot.ObservationSlot`
   keeps the newest frame per camera (with its health) and the joint states;
   the controller's request (``/controller/plan``) is put in the slot, and when
   no chunk is in flight and the slot has a new, healthy observation it runs
   the runner; the chunk is delivered ``inference_delay_s`` (virtual) later,
   through the injector (``/action_chunk``). With the ``prefix`` merge it
   passes the controller's remaining plan as the executed prefix
   (``inference/prefix.py``), as the node does.
3. **controller** (``nodes/controller_node.py``; alive unless crashed,
   respawned fresh): see :class:`_ControllerProcess`.
4. **safety**: a :class:`~vla_edge.safety.supervisor.SafetySupervisor` with its
   own watchdogs filters the command (``filter``) or holds (``hold``) and
   handles e-stop and reset (``/estop``, ``/safety/reset``).
5. **env** steps with the safe command.

The system clock is the simulated time plus the injector's clock step, so a
clock jump moves every stamp and every ``now`` together; the timers of the sim
and of the injector run on simulated (episode) time, as the nodes' rate loops
run on a steady clock. Everything the metrics need is recorded per tick in a
:class:`Trace`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vla_edge.config.models import (
    DEFAULT_NOISE_SCALE,
    ControllerConfig,
    InferenceConfig,
    SafetyConfig,
)
from vla_edge.control.controller import Controller
from vla_edge.control.supervision import accept_chunk, joint_states_lost, supervised_step
from vla_edge.control.watchdog import Watchdog
from vla_edge.core.clock import TIME_EPS_S
from vla_edge.core.errors import ChunkRejectedError
from vla_edge.core.stop import StopCategory
from vla_edge.core.types import ActionChunk, JointCommand, Observation
from vla_edge.faults.injectors import CpuAffinityCap, Injector, make_injector
from vla_edge.faults.scenario import FaultScenario
from vla_edge.inference.camera_health import CameraHealthLimits
from vla_edge.inference.observation_slot import ObservationSlot, required_cameras
from vla_edge.inference.prefix import prefix_from_plan
from vla_edge.runners.base import Runner, start_noise

DEAD = -1  # watchdog severity recorded while the controller process is dead


class _SystemClock:
    """The harness's system clock, read by the components that keep their own time."""

    def __init__(self) -> None:
        self.now_s = 0.0

    def __call__(self) -> float:
        return self.now_s


def _add_counts(total: dict[str, int], counts: dict[str, int]) -> dict[str, int]:
    """``total += counts`` key by key; returns ``total``."""
    for key, n in counts.items():
        total[key] = total.get(key, 0) + n
    return total


@dataclass
class HarnessSettings:
    """How the closed loop runs (the same for every scenario of a suite).

    Attributes:
        task: default task (a scenario may name its own).
        init_state_id: fixed initial state of the task.
        inference_delay_s: virtual duration of one inference.
        camera_period_s: time between two camera frames (``publish_rate_hz``).
        success_check_period_s: how often the task predicate is evaluated.
        stop_on_success: end the episode when the task succeeds (benchmarks).
        seed: seed of the flow-matching noise passed to learned runners.
        noise_scale: standard deviation of that noise.
        required_cameras: the cameras the policy reads (``None``: the runner's
            cameras, or every rendered camera when the runner reads none, as the
            scripted expert standing in for a vision policy).
        inference: the inference node's parameters (camera health, clock steps).
    """

    task: str = "lift_green_block"
    init_state_id: int = 0
    inference_delay_s: float = 0.1
    camera_period_s: float = 0.1
    success_check_period_s: float = 0.1
    stop_on_success: bool = False
    seed: int = 0
    noise_scale: float = DEFAULT_NOISE_SCALE
    required_cameras: tuple[str, ...] | None = None
    inference: InferenceConfig = field(default_factory=InferenceConfig)


@dataclass
class Trace:
    """Per-tick record of one run (episode time ``t_s`` is simulated time)."""

    scenario: FaultScenario
    joint_names: tuple[str, ...]
    dt_s: float
    t_s: list[float] = field(default_factory=list)
    clock_s: list[float] = field(default_factory=list)
    safe: list[np.ndarray] = field(default_factory=list)
    measured: list[np.ndarray] = field(default_factory=list)
    commanded: list[np.ndarray] = field(default_factory=list)
    safety_severity: list[int] = field(default_factory=list)
    watchdog_severity: list[int] = field(default_factory=list)
    holding: list[bool] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    controller_rejected: list[int] = field(default_factory=list)
    safety_rejected: list[int] = field(default_factory=list)
    safety_limited: list[int] = field(default_factory=list)
    complete: list[bool] = field(default_factory=list)
    success: bool = False
    success_time_s: float | None = None
    skipped: str | None = None
    info: dict[str, Any] = field(default_factory=dict)

    def arrays(self) -> dict[str, np.ndarray]:
        """The trace as numpy arrays."""
        return {
            "t_s": np.asarray(self.t_s),
            "clock_s": np.asarray(self.clock_s),
            "safe": np.asarray(self.safe).reshape(-1, len(self.joint_names)),
            "measured": np.asarray(self.measured).reshape(-1, len(self.joint_names)),
            "commanded": np.asarray(self.commanded).reshape(-1, len(self.joint_names)),
            "safety_severity": np.asarray(self.safety_severity, dtype=int),
            "watchdog_severity": np.asarray(self.watchdog_severity, dtype=int),
            "holding": np.asarray(self.holding, dtype=bool),
            "accepted": np.asarray(self.accepted, dtype=int),
            "controller_rejected": np.asarray(self.controller_rejected, dtype=int),
            "safety_rejected": np.asarray(self.safety_rejected, dtype=int),
            "safety_limited": np.asarray(self.safety_limited, dtype=int),
            "complete": (
                np.asarray(self.complete, dtype=bool)
                if self.complete
                else np.ones(len(self.t_s), dtype=bool)
            ),
        }


class _ControllerProcess:
    """The controller node (``nodes/controller_node.py``) in virtual time.

    Like the node: the controller starts at the measured position; chunks are
    refused while joint states are lost; an accepted chunk beats ``chunk`` and
    ``observation`` (stamped with the chunk's observation time); every tick
    steps the controller and publishes the command (the buffer running out is
    a controlled hold); a new chunk is requested when the trigger asks and
    joint states are fresh. The watchdog's category is reported (diagnostics),
    the stop itself comes from the hold and from the safety layer.
    """

    def __init__(self, config: ControllerConfig, positions: np.ndarray, now_s: float) -> None:
        self.config = config
        self.core = Controller(config, initial_positions=positions)
        self.watchdog = Watchdog.from_controller_config(config, start_s=now_s)
        self.accepted = 0
        self.rejected = 0

    def joint_states_lost(self, now_s: float) -> bool:
        """Whether the ``joint_state`` heartbeat has expired."""
        return joint_states_lost(self.watchdog, now_s)

    def on_chunk(self, chunk: ActionChunk, now_s: float) -> bool:
        """Submit ``chunk``; True if accepted."""
        if self.joint_states_lost(now_s):
            self.rejected += 1
            return False
        try:
            accept_chunk(self.core, self.watchdog, chunk, now_s)
        except ChunkRejectedError:
            self.rejected += 1
            return False
        self.accepted += 1
        return True

    def wants_chunk(self, now_s: float) -> bool:
        """The inference request (``/controller/plan``)."""
        return self.core.needs_inference(now_s) and not self.joint_states_lost(now_s)

    def tick(self, now_s: float, measured: np.ndarray | None) -> JointCommand:
        """The command published this tick (the node beats ``control_loop`` first)."""
        self.watchdog.beat("control_loop", now_s)
        return supervised_step(self.core, self.watchdog, now_s, measured)

    def severity(self, now_s: float) -> int:
        """Watchdog category, at least CAT2 while the buffer is empty (holding)."""
        category = self.watchdog.check(now_s)
        if self.core.holding:
            category = StopCategory.most_severe(category, StopCategory.CAT2)
        return category.severity


class FaultHarness:
    """Runs scenarios in virtual time against a simulator, a runner and the real cores.

    Args:
        env: the simulator (``Env`` protocol plus ``success()`` and ``time_s``).
        runner: the policy (the scripted expert for the fault suite).
        controller_config: controller parameters (``config/controller.yaml``).
        safety_config: safety parameters (``config/safety.yaml``).
        settings: loop settings.
    """

    def __init__(
        self,
        env: Any,
        runner: Runner,
        controller_config: ControllerConfig,
        safety_config: SafetyConfig,
        settings: HarnessSettings | None = None,
    ) -> None:
        self.env = env
        self.runner = runner
        self.controller_config = controller_config
        self.safety_config = safety_config
        self.settings = settings or HarnessSettings()

    def run(self, scenario: FaultScenario, injector: Injector | None = None) -> Trace:
        """Run one episode of ``scenario`` and return its trace."""
        from vla_edge.safety.supervisor import SafetySupervisor

        inj = injector or make_injector(scenario, position_max=self.safety_config.position_max)
        env, cfg, settings = self.env, self.controller_config, self.settings
        trace = Trace(scenario, tuple(cfg.joint_names), float(env.control_dt_s))
        if isinstance(inj, CpuAffinityCap):
            reason = inj.unavailable_reason()
            trace.info["cgroup"] = inj.cgroup_cap_reason()
            if reason is not None:
                trace.skipped = reason
                return trace
        task = scenario.task or settings.task
        obs0 = env.reset(task, settings.init_state_id)
        instruction = obs0.instruction
        dt_s = float(env.control_dt_s)
        ticks = int(round(scenario.episode_s / dt_s))

        safety = SafetySupervisor(self.safety_config, initial_positions=obs0.state.copy())
        controller: _ControllerProcess | None = _ControllerProcess(cfg, obs0.state.copy(), 0.0)
        system_clock = _SystemClock()
        slot: ObservationSlot | None = self._slot(system_clock, instruction)
        last_js: np.ndarray | None = obs0.state.copy()
        pending: tuple[float, ActionChunk] | None = None
        next_frame_s = 0.0
        next_success_s = 0.0
        estop_was_pressed = False
        infer_wall_ms: list[float] = []
        restarts = {"inference": 0, "controller": 0}
        was_alive = {"inference": True, "controller": True}
        camera_faults: dict[str, int] = {}
        nan_row = np.full(len(cfg.joint_names), np.nan)
        rng = np.random.default_rng([settings.seed, settings.init_state_id])
        accepted_total = rejected_total = 0

        for _ in range(ticks):
            t = env.time_s
            clock = system_clock.now_s = t + inj.clock_offset_s(t)

            # 1. sim: joint state and one frame per camera
            measured = env.state()
            js = inj.joint_state(measured.copy(), t)
            delivered = inj.camera(None, t)
            if t + TIME_EPS_S >= next_frame_s:
                next_frame_s += settings.camera_period_s
                captured = env.observe(render=True)
                for cam, image in captured.images.items():
                    frame = Observation(clock, {cam: image}, measured.copy(), instruction)
                    delivered.extend(inj.camera(frame, t))

            # e-stop button (operator) and reset service
            pressed = inj.estop_pressed(t)
            if pressed and not estop_was_pressed:
                safety.estop(clock)
            if not pressed and estop_was_pressed:
                safety.reset(clock)
            estop_was_pressed = pressed
            if js is not None:
                safety.on_joint_state(js, clock)
                last_js = js

            # process deaths and respawns
            alive = {p: inj.alive(p, t) for p in ("inference", "controller")}
            for p in alive:
                if alive[p] and not was_alive[p]:
                    restarts[p] += 1
            if not alive["inference"]:
                if slot is not None:
                    _add_counts(camera_faults, slot.health.counters())
                pending, slot = None, None
            elif slot is None:
                slot = self._slot(system_clock, instruction)
            if not alive["controller"]:
                controller = None
            elif controller is None:
                start = last_js if last_js is not None else safety.limiter.positions
                controller = _ControllerProcess(cfg, start.copy(), clock)
            was_alive = alive

            # 2. inference node inputs; the controller's joint-state heartbeat
            if slot is not None:
                for frame in delivered:
                    for cam, image in frame.images.items():
                        slot.put_image(cam, frame.stamp_s, image)
                if js is not None:
                    slot.put_state(clock, js)
            if controller is not None and js is not None:
                controller.watchdog.beat("joint_state", clock)

            # chunk arrival
            if pending is not None and t + TIME_EPS_S >= pending[0]:
                chunk = inj.chunk(pending[1], t)
                pending = None
                if slot is not None:
                    slot.mark_published(clock)
                if chunk is not None and controller is not None:
                    if controller.on_chunk(chunk, clock):
                        accepted_total += 1
                    else:
                        rejected_total += 1

            # the controller's request; inference on a new, healthy observation
            spec = self.runner.spec
            if slot is not None and controller is not None and controller.wants_chunk(clock):
                plan = controller.core.prefix_plan(clock) if spec.supports_prefix else None
                slot.request(plan, clock)
            item = slot.take(0.0) if slot is not None and pending is None else None
            if item is not None:
                obs = item.observation
                prefix, prefix_len = None, 0
                if spec.supports_prefix:
                    prefix, prefix_len = prefix_from_plan(
                        item.plan,
                        obs.stamp_s,
                        spec.chunk_horizon,
                        spec.dt_action_s,
                        clock,
                        settings.inference_delay_s,
                    )
                noise = start_noise(rng, spec.chunk_horizon, spec.action_dim, settings.noise_scale)
                chunk, delay_s, wall_ms = self._infer(inj, obs, t, noise, prefix, prefix_len)
                infer_wall_ms.append(wall_ms)
                pending = (t + delay_s, chunk)

            # 3. controller tick
            command = controller.tick(clock, last_js) if controller is not None else None

            # 4. safety, 5. env
            safe = safety.filter(command, clock) if command is not None else safety.hold(clock)
            env.step(safe)

            trace.t_s.append(t)
            trace.clock_s.append(clock)
            trace.safe.append(np.asarray(safe, dtype=np.float64).copy())
            trace.measured.append(measured)
            trace.commanded.append(
                np.asarray(command.positions, dtype=np.float64).copy()
                if command is not None
                else nan_row
            )
            trace.safety_severity.append(safety.state.severity)
            trace.watchdog_severity.append(
                controller.severity(clock) if controller is not None else DEAD
            )
            trace.holding.append(bool(controller.core.holding) if controller else True)
            trace.accepted.append(accepted_total)
            trace.controller_rejected.append(rejected_total)
            trace.safety_rejected.append(int(safety.counters.get("rejected", 0)))
            trace.safety_limited.append(int(safety.counters.get("limited_ticks", 0)))

            if env.time_s + TIME_EPS_S >= next_success_s:
                next_success_s += settings.success_check_period_s
                if not trace.success and env.success():
                    trace.success = True
                    trace.success_time_s = float(env.time_s)
                    if settings.stop_on_success:
                        break

        trace.info.update(
            {
                "task": task,
                "init_state_id": settings.init_state_id,
                "restarts": restarts,
                "processes_alive_at_end": {
                    "sim": True,
                    "safety": True,
                    "inference": inj.alive("inference", env.time_s),
                    "controller": inj.alive("controller", env.time_s),
                },
                "inference_wall_ms_p50": float(np.median(infer_wall_ms)) if infer_wall_ms else None,
                "safety_counters": dict(safety.counters),
                "camera_faults": _add_counts(
                    camera_faults, slot.health.counters() if slot is not None else {}
                ),
                "inference_clock_steps": slot.clock_steps if slot is not None else 0,
                "controller_counters": dict(controller.core.counters) if controller else {},
            }
        )
        if isinstance(inj, CpuAffinityCap):
            trace.info["cpu_cap_slowdown"] = inj.slowdown
        return trace

    def _slot(self, clock: Callable[[], float], instruction: str) -> ObservationSlot:
        """A fresh inference node's observation slot (at start and on a respawn)."""
        cfg = self.settings.inference
        cameras = tuple(self.env.cameras)
        required = self.settings.required_cameras or required_cameras(
            self.runner.spec.cameras, cameras
        )
        slot = ObservationSlot(
            cameras,
            required=required,
            clock=clock,
            limits=CameraHealthLimits.from_config(cfg),
            clock_step_threshold_s=cfg.clock_step_threshold_s,
        )
        slot.put_instruction(instruction)
        return slot

    def _infer(
        self,
        inj: Injector,
        obs: Observation,
        t_s: float,
        noise: np.ndarray,
        prefix: np.ndarray | None,
        prefix_len: int,
    ) -> tuple[ActionChunk, float, float]:
        """Run the runner (under a CPU cap when the fault asks).

        Returns:
            ``(chunk, virtual delay_s, wall ms)``.
        """
        if isinstance(inj, CpuAffinityCap):
            with inj.pinned(t_s) as capped:
                start = time.perf_counter()
                chunk = self.runner.infer(obs, noise, prefix, prefix_len)
                wall_s = time.perf_counter() - start
            inj.record_wall_s(wall_s, capped)
        else:
            start = time.perf_counter()
            chunk = self.runner.infer(obs, noise, prefix, prefix_len)
            wall_s = time.perf_counter() - start
        delay_s = inj.inference_delay_s(self.settings.inference_delay_s, t_s)
        return chunk, delay_s, wall_s * 1e3
