"""Fault scenarios run in virtual time, in the closed loop the evaluator runs too.

:class:`FaultHarness` runs one scenario in :class:`~vla_edge.sim.closed_loop.ClosedLoop`
with the scenario's injector at the loop's seams (joint states, camera frames,
chunks, inference delay, process deaths, clock steps, the e-stop button) and
the cameras streaming at ``camera_period_s`` into the inference node's
observation slot, as in the ROS graph. Everything the metrics need is recorded
per tick in a :class:`Trace`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vla_edge.config.models import (
    DEFAULT_NOISE_SCALE,
    ControllerConfig,
    InferenceConfig,
    SafetyConfig,
)
from vla_edge.core.clock import TIME_EPS_S
from vla_edge.faults.injectors import CpuAffinityCap, Injector, make_injector
from vla_edge.faults.scenario import FaultScenario
from vla_edge.runners.base import Runner
from vla_edge.sim.closed_loop import ClosedLoop, LoopSettings

DEAD = -1  # watchdog severity recorded while the controller process is dead


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
        env, cfg, settings = self.env, self.controller_config, self.settings
        position_max = self.safety_config.limit_arrays(cfg.joint_names).position_max
        inj = injector or make_injector(scenario, position_max=position_max.tolist())
        trace = Trace(scenario, tuple(cfg.joint_names), float(env.control_dt_s))
        if isinstance(inj, CpuAffinityCap):
            reason = inj.unavailable_reason()
            trace.info["cgroup"] = inj.cgroup_cap_reason()
            if reason is not None:
                trace.skipped = reason
                return trace
        task = scenario.task or settings.task
        loop = ClosedLoop(
            env,
            self.runner,
            cfg,
            self.safety_config,
            LoopSettings(
                delay_s=settings.inference_delay_s,
                noise_scale=settings.noise_scale,
                cameras="streaming",
                camera_period_s=settings.camera_period_s,
                required_cameras=settings.required_cameras,
                inference=settings.inference,
            ),
            faults=inj,
        )
        rng = np.random.default_rng([settings.seed, settings.init_state_id])
        loop.reset(task, settings.init_state_id, rng)
        ticks = int(round(scenario.episode_s / float(env.control_dt_s)))
        next_success_s = 0.0
        nan_row = np.full(len(cfg.joint_names), np.nan)

        for _ in range(ticks):
            step = loop.tick()
            controller, safety = loop.controller, loop.safety
            trace.t_s.append(step.t_s)
            trace.clock_s.append(step.clock_s)
            trace.safe.append(step.safe.copy())
            trace.measured.append(step.measured)
            trace.commanded.append(
                np.asarray(step.command.positions, dtype=np.float64).copy()
                if step.command is not None
                else nan_row
            )
            trace.safety_severity.append(safety.state.severity)
            trace.watchdog_severity.append(
                controller.severity(step.clock_s) if controller is not None else DEAD
            )
            trace.holding.append(bool(controller.core.holding) if controller else True)
            trace.accepted.append(loop.accepted)
            trace.controller_rejected.append(loop.rejected)
            trace.safety_rejected.append(int(safety.counters.get("rejected", 0)))
            trace.safety_limited.append(int(safety.counters.get("limited_ticks", 0)))

            if env.time_s + TIME_EPS_S >= next_success_s:
                next_success_s += settings.success_check_period_s
                if not trace.success and env.success():
                    trace.success = True
                    trace.success_time_s = float(env.time_s)
                    if settings.stop_on_success:
                        break

        infer_wall_ms = loop.inference_wall_ms
        controller = loop.controller
        trace.info.update(
            {
                "task": task,
                "init_state_id": settings.init_state_id,
                "restarts": loop.restarts,
                "processes_alive_at_end": {
                    "sim": True,
                    "safety": True,
                    "inference": inj.alive("inference", env.time_s),
                    "controller": inj.alive("controller", env.time_s),
                },
                "inference_wall_ms_p50": float(np.median(infer_wall_ms)) if infer_wall_ms else None,
                "inference_refused": loop.runner_refused,
                "safety_counters": dict(loop.safety.counters),
                "camera_faults": loop.all_camera_faults(),
                "inference_clock_steps": loop.clock_steps,
                "controller_counters": dict(controller.core.counters) if controller else {},
            }
        )
        if isinstance(inj, CpuAffinityCap):
            trace.info["cpu_cap_slowdown"] = inj.slowdown
        return trace
