"""Closed-loop evaluation in virtual time.

The evaluator runs the robot's own controller and safety cores against the
MuJoCo tabletop in the closed loop the fault harness runs too
(:mod:`vla_edge.sim.closed_loop`), without faults and with the scene rendered
when inference starts. Time is the simulator's: a chunk computed from the
observation taken at ``t`` is handed to the controller at ``t + delay_s``, so
results are deterministic and independent of this machine's speed, while the
chunk keeps the observation's stamp (its age on arrival is ``delay_s``).

Execution schemes compared side by side:

* ``async`` — ours: the controller requests inference per its trigger
  (``threshold`` or ``continuous``), merges with the configured strategy
  (``replace``, ``weighted``, ``ensemble``, ``prefix``), and the arm never
  waits for the policy.
* ``sync`` — openpi's ``ActionChunkBroker``: execute ``replan_steps`` actions
  of a chunk, then hold while the next one is computed; each chunk starts when
  it arrives.
* ``lerobot`` — LeRobot's async defaults: ``weighted`` merge with 0.3 old /
  0.7 new on overlapping steps, a new request when fewer than half a chunk
  remains.

The controller runs with its configured ``max_chunk_age_s``, as on the robot: a
delay longer than the bound makes every chunk arrive stale, and the controller
refuses it (counted as the graph counts it, ``chunks_rejected_stale``). Only
an explicit override (``EvalSettings.max_chunk_age_s``, ``vla-edge eval
--max-chunk-age-s``) changes the bound, and the JSON records it with every
controller and safety setting the episodes ran with, and the share of ticks in
which the safety node limited the command.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from vla_edge.config.models import DEFAULT_NOISE_SCALE, ControllerConfig, SafetyConfig
from vla_edge.core.errors import ConfigError
from vla_edge.runners.base import Runner
from vla_edge.sim.closed_loop import ClosedLoop, LoopSettings, SyncBroker
from vla_edge.sim.tasks import InstructionSchedule, Task, is_success, sub_tasks

SCHEMES = ("async", "sync", "lerobot")


@dataclass(frozen=True)
class EvalSettings:
    """How one evaluation is run (recorded in the JSON)."""

    delay_s: float = 0.0
    merge: str = "ensemble"
    scheme: str = "async"
    replan_steps: int = 5
    instructions: str = "canonical"
    noise_scale: float = DEFAULT_NOISE_SCALE
    """Standard deviation of the flow-matching start noise (1.0: as trained)."""
    sequencer: bool = False
    """Give a long-horizon task one sub-task's instruction at a time, the next when the
    previous one succeeds (the re-planning path); otherwise its whole instruction at once."""
    max_chunk_age_s: float | None = None
    """Override of the controller's ``max_chunk_age_s`` (``None``: the configured bound)."""
    success_check_period_s: float = 0.1
    settle_s: float = 0.3
    video_fps: float = 10.0

    def __post_init__(self) -> None:
        if self.scheme not in SCHEMES:
            raise ConfigError(f"scheme = {self.scheme!r}: expected one of {SCHEMES}")
        if not self.delay_s >= 0.0:
            raise ConfigError(f"delay_s = {self.delay_s}: must be >= 0")
        if self.instructions not in ("canonical", "paraphrase"):
            raise ConfigError(
                f"instructions = {self.instructions!r}: expected 'canonical' or 'paraphrase'"
            )
        if not 0.0 <= self.noise_scale <= 4.0:
            raise ConfigError(f"noise_scale = {self.noise_scale}: expected 0 <= noise_scale <= 4")
        if self.replan_steps < 1:
            raise ConfigError(f"replan_steps = {self.replan_steps}: must be >= 1")
        if self.max_chunk_age_s is not None and not self.max_chunk_age_s > 0.0:
            raise ConfigError(
                f"max_chunk_age_s = {self.max_chunk_age_s}: must be > 0 (None: as configured)"
            )


@dataclass
class EpisodeResult:
    """Outcome of one episode."""

    task: str
    init_state_id: int
    success: bool
    steps: int
    time_s: float
    chunks: int
    rejected: int
    hold_ticks: int
    penetrating_contacts: int
    max_boundary_velocity_jump: float
    instruction_changes: int = 0
    switch_boundary_velocity_jump: float = 0.0
    """Largest velocity change where the first chunk of a new instruction joined the motion."""
    subtasks_done: int = 0
    """Sub-tasks whose predicate holds at the end (1 for a single task that succeeded)."""
    safety_counters: dict[str, int] = field(default_factory=dict)
    controller_counters: dict[str, int] = field(default_factory=dict)
    inference_ms: list[float] = field(default_factory=list)
    chunk_horizon: int | None = None
    """The policy's chunk length (with ``dt_action_s``: the controller configuration it ran)."""
    dt_action_s: float | None = None


def wilson_interval(successes: int, n: int, z: float = 1.959963984540054) -> tuple[float, float]:
    """95 % Wilson score interval of a binomial proportion."""
    if n <= 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def difference_interval(
    successes_a: int, n_a: int, successes_b: int, n_b: int
) -> tuple[float, float]:
    """95 % interval of the difference of two success rates, ``rate_b - rate_a``.

    Newcombe's hybrid score interval: each side's distance to its Wilson bounds,
    combined in quadrature (it stays inside [-1, 1] and behaves near 0 and 1 %).

    Raises:
        ConfigError: a side without episodes.
    """
    if n_a <= 0 or n_b <= 0:
        raise ConfigError(f"a difference of rates needs episodes on both sides (n = {n_a}, {n_b})")
    rate_a, rate_b = successes_a / n_a, successes_b / n_b
    low_a, high_a = wilson_interval(successes_a, n_a)
    low_b, high_b = wilson_interval(successes_b, n_b)
    below = math.hypot(rate_b - low_b, high_a - rate_a)
    above = math.hypot(high_b - rate_b, rate_a - low_a)
    return (rate_b - rate_a - below, rate_b - rate_a + above)


def scheme_merge(settings: EvalSettings) -> str:
    """The merge strategy a scheme runs with (ours: the configured one)."""
    return {"async": settings.merge, "sync": "replace", "lerobot": "weighted"}[settings.scheme]


def controller_config_for(
    base: ControllerConfig, settings: EvalSettings, horizon: int, dt_action_s: float
) -> ControllerConfig:
    """The controller configuration a scheme implies (validated).

    ``max_chunk_age_s`` stays the configured one unless ``settings`` overrides it:
    a delay beyond it makes the chunks stale, as on the robot.

    Raises:
        ConfigError: the resulting configuration is invalid (e.g. an override of
            ``max_chunk_age_s`` not below ``observation_timeout_s``).
    """
    update: dict[str, Any] = {
        "chunk_horizon": horizon,
        "dt_action_s": dt_action_s,
        "expected_inference_delay_s": settings.delay_s,
    }
    if settings.max_chunk_age_s is not None:
        update["max_chunk_age_s"] = settings.max_chunk_age_s
    update["merge"] = scheme_merge(settings)
    if settings.scheme == "sync":
        update["bridge_duration_s"] = 0.0
    elif settings.scheme == "lerobot":
        update["weighted_old_weight"] = 0.3
        update["bridge_duration_s"] = 0.0  # LeRobot blends without a bridge
        update["infer_trigger"] = "threshold"
        update["threshold_fraction"] = 0.5
    try:
        return ControllerConfig.model_validate({**base.model_dump(), **update})
    except ValidationError as exc:
        changed = ", ".join(f"{k} = {v!r}" for k, v in update.items())
        raise ConfigError(f"controller configuration of the evaluation ({changed}): {exc}") from exc


def _boundary_jump(commands: list[np.ndarray], tick_index: int, period_s: float) -> float:
    """Largest per-joint change of commanded velocity across ``tick_index``."""
    if tick_index < 2 or tick_index + 1 > len(commands):
        return 0.0
    v_before = (commands[tick_index - 1] - commands[tick_index - 2]) / period_s
    v_after = (commands[tick_index] - commands[tick_index - 1]) / period_s
    return float(np.max(np.abs(v_after - v_before)))


def loop_settings_for(settings: EvalSettings) -> LoopSettings:
    """The closed loop of an evaluation: no faults, the scene rendered when inference starts."""
    return LoopSettings(
        delay_s=settings.delay_s,
        noise_scale=settings.noise_scale,
        cameras="on_request",
        broker=SyncBroker(settings.replan_steps) if settings.scheme == "sync" else None,
    )


def run_episode(
    env: Any,
    runner: Runner,
    task: Any,
    init_state_id: int,
    settings: EvalSettings,
    controller_base: ControllerConfig,
    safety_config: SafetyConfig,
    rng: np.random.Generator,
    video_frames: list[np.ndarray] | None = None,
) -> EpisodeResult:
    """Run one episode of ``task`` from ``init_state_id``; return its outcome.

    The instruction follows the task: a ``switch`` task's changes at its switch
    time, and with ``settings.sequencer`` a ``sequence``'s advances to the next
    sub-task when the current one holds (checked with the success predicate).
    """
    schedule = InstructionSchedule(task, settings.sequencer)
    instruction = _instruction(schedule.active(0.0), settings, init_state_id)
    spec = runner.spec
    cfg = controller_config_for(controller_base, settings, spec.chunk_horizon, spec.dt_action_s)
    period_s = 1.0 / cfg.rate_hz
    loop = ClosedLoop(env, runner, cfg, safety_config, loop_settings_for(settings))
    loop.reset(task.name, init_state_id, rng, instruction=instruction)

    hold_ticks = 0
    raw_commands: list[np.ndarray] = []
    boundary_jump = switch_jump = 0.0
    changes = 0
    awaiting_new_chunk = False
    budget_s = float(task.max_duration_s)
    success = False
    next_success_check_s = 0.0
    next_frame_s = 0.0
    last_arrival_tick: int | None = None
    switch_arrival_tick: int | None = None
    tick = 0
    while env.time_s < budget_s:
        wanted = _instruction(schedule.active(env.time_s), settings, init_state_id)
        if wanted != loop.instruction:
            loop.set_instruction(wanted)
            changes += 1
            awaiting_new_chunk = True
        step = loop.tick()
        if step.arrived:
            last_arrival_tick = tick
            if awaiting_new_chunk and step.arrived_instruction == loop.instruction:
                switch_arrival_tick, awaiting_new_chunk = tick, False
        command = step.command.positions if step.command is not None else step.safe
        raw_commands.append(np.asarray(command, dtype=np.float64).copy())
        if last_arrival_tick is not None and tick == last_arrival_tick + 1:
            jump = _boundary_jump(raw_commands, tick, period_s)
            boundary_jump = max(boundary_jump, jump)
            if switch_arrival_tick == last_arrival_tick:
                switch_jump = max(switch_jump, jump)
        if loop.controller is not None and loop.controller.core.holding:
            hold_ticks += 1
        tick += 1

        if video_frames is not None and env.time_s >= next_frame_s:
            from vla_edge.sim.video import tile_cameras

            video_frames.append(tile_cameras(env.observe(render=True).images))
            next_frame_s += 1.0 / settings.video_fps
        if env.time_s >= next_success_check_s:
            next_success_check_s += settings.success_check_period_s
            if env.success():
                success = True
                break
            schedule.advance(env.scene_state())

    controller = loop.controller
    return EpisodeResult(
        task=task.name,
        init_state_id=init_state_id,
        success=success,
        steps=int(round(env.time_s / spec.dt_action_s)),
        time_s=float(env.time_s),
        chunks=loop.accepted,
        rejected=loop.rejected + loop.runner_refused,
        hold_ticks=hold_ticks,
        penetrating_contacts=int(env.penetrating_contacts()),
        max_boundary_velocity_jump=boundary_jump,
        instruction_changes=changes,
        switch_boundary_velocity_jump=switch_jump,
        subtasks_done=sum(is_success(sub, env.scene_state()) for sub in sub_tasks(task)),
        safety_counters=dict(loop.safety.counters),
        controller_counters=dict(controller.core.counters) if controller is not None else {},
        inference_ms=loop.inference_wall_ms,
        chunk_horizon=int(spec.chunk_horizon),
        dt_action_s=float(spec.dt_action_s),
    )


def _instruction(task: Task, settings: EvalSettings, init_state_id: int) -> str:
    """``task``'s canonical instruction, or one of its paraphrases (by init state)."""
    if settings.instructions == "canonical":
        return task.instruction
    return task.paraphrases[init_state_id % len(task.paraphrases)]


def episode_rng(seed: int, task_name: str, init_state_id: int) -> np.random.Generator:
    """The noise generator of one episode.

    Its draws do not depend on which episodes ran before it or where (one process,
    worker processes, Ray tasks on other machines).
    """
    return np.random.default_rng((int(seed), zlib.crc32(task_name.encode()), int(init_state_id)))


def run_task(
    env: Any,
    runner: Runner,
    task: Any,
    episodes: int,
    settings: EvalSettings,
    controller_base: ControllerConfig,
    safety_config: SafetyConfig,
    seed: int = 0,
    video_dir: Path | None = None,
    progress: Callable[[EpisodeResult], None] | None = None,
) -> list[EpisodeResult]:
    """Init states ``0 .. episodes - 1`` of one task."""
    results = []
    for init_state_id in range(episodes):
        frames: list[np.ndarray] | None = [] if video_dir is not None else None
        result = run_episode(
            env,
            runner,
            task,
            init_state_id,
            settings,
            controller_base,
            safety_config,
            episode_rng(seed, task.name, init_state_id),
            video_frames=frames,
        )
        if video_dir is not None and frames:
            from vla_edge.sim.video import write_mp4

            tag = "success" if result.success else "failure"
            write_mp4(
                Path(video_dir) / f"{task.name}_{init_state_id:03d}_{tag}.mp4",
                frames,
                fps=settings.video_fps,
            )
        results.append(result)
        if progress is not None:
            progress(result)
    return results


def evaluate(
    env: Any,
    runner_for: Callable[[Any], Runner],
    tasks: Sequence[Any],
    episodes: int,
    settings: EvalSettings,
    controller_base: ControllerConfig,
    safety_config: SafetyConfig,
    policy_name: str,
    suite: str = "tabletop",
    seed: int = 0,
    video_dir: Path | None = None,
    progress: Callable[[EpisodeResult], None] | None = None,
) -> dict[str, Any]:
    """Evaluate ``episodes`` fixed init states per task; return the eval JSON dict.

    Args:
        runner_for: called with the env, returns the runner (the expert needs
            the env; learned policies ignore it).
    """
    runner = runner_for(env)
    by_task = {
        task.name: run_task(
            env,
            runner,
            task,
            episodes,
            settings,
            controller_base,
            safety_config,
            seed,
            video_dir,
            progress,
        )
        for task in tasks
    }
    runner.close()
    merge = scheme_merge(settings)
    return summarize(
        by_task,
        settings,
        controller_base,
        merge,
        policy_name,
        suite,
        seed,
        episodes,
        safety_config=safety_config,
    )


def summarize(
    by_task: dict[str, list[EpisodeResult]],
    settings: EvalSettings,
    controller_base: ControllerConfig,
    merge: str,
    policy_name: str,
    suite: str,
    seed: int,
    episodes: int,
    safety_config: SafetyConfig | None = None,
) -> dict[str, Any]:
    """The eval JSON dict of per-task episode results (tasks in ``by_task`` order).

    ``settings`` in it holds the full controller configuration the episodes ran
    with (``controller_base`` as the scheme changed it) and ``safety_config``;
    ``limited_ticks_share`` (overall and per task) is the share of control ticks
    in which the safety node changed the command (every episode is nominal: no
    fault is injected).
    """
    per_task: dict[str, Any] = {}
    all_results: list[EpisodeResult] = []
    for name, results in by_task.items():
        successes = sum(r.success for r in results)
        succeeded = [r for r in results if r.success]
        per_task[name] = {
            "success_rate": successes / len(results) if results else 0.0,
            "successes": successes,
            "episodes": len(results),
            "wilson_95": list(wilson_interval(successes, len(results))),
            "mean_steps": float(np.mean([r.steps for r in results])) if results else 0.0,
            "mean_completion_time_s": (
                float(np.mean([r.time_s for r in succeeded])) if succeeded else None
            ),
            "max_boundary_velocity_jump": max(
                (r.max_boundary_velocity_jump for r in results), default=0.0
            ),
            "penetrating_contacts": sum(r.penetrating_contacts for r in results),
            "mean_subtasks_done": (
                float(np.mean([r.subtasks_done for r in results])) if results else 0.0
            ),
            "max_switch_boundary_velocity_jump": max(
                (r.switch_boundary_velocity_jump for r in results), default=0.0
            ),
            "limited_ticks_share": limited_share(results),
            "chunks_rejected_stale": _controller_total(results, "rejected_stale"),
        }
        all_results.extend(results)
    safety_totals: dict[str, int] = {}
    controller_totals: dict[str, int] = {}
    for r in all_results:
        for k, v in r.safety_counters.items():
            safety_totals[k] = safety_totals.get(k, 0) + int(v)
        for k, v in r.controller_counters.items():
            controller_totals[k] = controller_totals.get(k, 0) + int(v)
    inference = [ms for r in all_results for ms in r.inference_ms]
    rates = [v["success_rate"] for v in per_task.values()]
    ran = ran_controller_config(all_results, settings, controller_base)
    return {
        "suite": suite,
        "policy": policy_name,
        "tasks": per_task,
        "mean_success": float(np.mean(rates)) if rates else 0.0,
        "safety": {
            "chunk_rejections": sum(r.rejected for r in all_results),
            "hold_ticks": sum(r.hold_ticks for r in all_results),
            "penetrating_contacts": sum(r.penetrating_contacts for r in all_results),
            "max_boundary_velocity_jump": max(
                (r.max_boundary_velocity_jump for r in all_results), default=0.0
            ),
            "limited_ticks": safety_totals.get("limited_ticks", 0),
            "ticks": safety_totals.get("ticks", 0),
            "limited_ticks_share": limited_share(all_results),
            "chunks_accepted": controller_totals.get("accepted", 0),
            "chunks_rejected": controller_totals.get("rejected", 0),
            "chunks_rejected_stale": controller_totals.get("rejected_stale", 0),
            "supervisor": safety_totals,
            "controller": controller_totals,
        },
        "inference_wall_ms": {
            "p50": float(np.percentile(inference, 50)) if inference else None,
            "p95": float(np.percentile(inference, 95)) if inference else None,
        },
        "settings": {
            "delay_ms": settings.delay_s * 1e3,
            "merge": merge,
            "scheme": settings.scheme,
            "replan_steps": settings.replan_steps if settings.scheme == "sync" else None,
            "instructions": settings.instructions,
            "sequencer": settings.sequencer,
            "noise_scale": settings.noise_scale,
            "episodes_per_task": episodes,
            "seed": seed,
            "controller_rate_hz": ran.rate_hz,
            "max_chunk_age_s": ran.max_chunk_age_s,
            "max_chunk_age_override_s": settings.max_chunk_age_s,
            "command_limit_margin": ran.command_limit_margin,
            "virtual_time": True,
            "controller": ran.model_dump(mode="json"),
            "safety": safety_config.model_dump(mode="json") if safety_config is not None else None,
        },
    }


def limited_share(results: Sequence[EpisodeResult]) -> float:
    """Share of control ticks in which the safety node changed the command."""
    ticks = sum(int(r.safety_counters.get("ticks", 0)) for r in results)
    limited = sum(int(r.safety_counters.get("limited_ticks", 0)) for r in results)
    return limited / ticks if ticks else 0.0


def _controller_total(results: Sequence[EpisodeResult], key: str) -> int:
    return sum(int(r.controller_counters.get(key, 0)) for r in results)


def ran_controller_config(
    results: Sequence[EpisodeResult], settings: EvalSettings, controller_base: ControllerConfig
) -> ControllerConfig:
    """The controller configuration the episodes ran with (the policy's chunk from a result)."""
    horizon, dt_s = controller_base.chunk_horizon, controller_base.dt_action_s
    for r in results:
        if r.chunk_horizon is not None and r.dt_action_s is not None:
            horizon, dt_s = r.chunk_horizon, r.dt_action_s
            break
    return controller_config_for(controller_base, settings, horizon, dt_s)
