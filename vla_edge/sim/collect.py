"""Record successful scripted-expert episodes in HDF5 (:func:`collect`; ``vla-edge collect``).

Layout (robomimic / LIBERO convention, see docs/INTERFACES.md)::

    data/demo_<i>/obs/agentview_image  [T, h, w, 3] uint8
    data/demo_<i>/obs/wrist_image      [T, h, w, 3] uint8
    data/demo_<i>/obs/state            [T, 7] float32  measured joints + gripper
    data/demo_<i>/actions              [T, 7] float32  target for time t_k
    attrs: instruction, task, init_state_id, seed, split, dt_action_s, success,
           perturb_scale (executed-noise scale; 0 for clean demonstrations),
           the training probes' targets (vla_edge.sim.dataset):
           layout_names [n + 1] str, layout_xy [n + 1, 2] float32 (every
           object's and the target's xy where the recording starts),
           goal_names [2] str, goal_xy [2, 2] float32 (the instructed object's
           and its destination's xy)

One observation and one action per policy step (``dt_action_s = 0.1``);
between policy steps the env runs at 100 Hz on targets linearly interpolated
between the expert's consecutive 0.1 s targets. Training episodes use the
``train`` initial states, disjoint from the 50 evaluation states, and record
the canonical instruction (paraphrases stay held out). With ``--perturb
SCALE`` the executed arm targets carry a smooth random offset
(:mod:`vla_edge.sim.perturb`) while the recorded actions stay the expert's
own targets, so the demonstrations show the way back to the expert's path.

``vla-edge collect --add-targets DIR`` stores the probe targets in files
recorded before they were part of the layout, in place
(:func:`vla_edge.sim.dataset.add_targets`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np
from tqdm import tqdm

from vla_edge.core.errors import ConfigError
from vla_edge.core.types import Observation
from vla_edge.runners.base import Runner
from vla_edge.sim.dataset import write_targets
from vla_edge.sim.env import CAMERAS, TabletopEnv
from vla_edge.sim.expert_runner import ExpertRunner
from vla_edge.sim.perturb import ExecutionPerturbation, segment_gate
from vla_edge.sim.probe_targets import episode_targets
from vla_edge.sim.tasks import SUITE, Split, get_task

DT_ACTION_S = 0.1
# a recovery episode's expert gets at least this long after the hand-over
RECOVERY_MIN_BUDGET_S = 15.0
# default range of the policy's share of a recovery episode (s)
HANDOVER_RANGE_S = (0.5, 8.0)
# stop recording once success has held this long (shows the release and retreat)
SUCCESS_HOLD_S = 1.0


@dataclass
class Episode:
    """One rolled-out episode (images only when rendered)."""

    task: str
    init_state_id: int
    split: str
    instruction: str
    success: bool
    images: dict[str, list[np.ndarray]] = field(default_factory=dict)
    states: list[np.ndarray] = field(default_factory=list)
    actions: list[np.ndarray] = field(default_factory=list)
    duration_s: float = 0.0
    wall_s: float = 0.0
    penetrating_contacts: int = 0
    max_joint_speed_rad_per_s: float = 0.0
    replans: int = 0
    handover_s: float | None = None
    """Recovery episodes: sim time at which the expert took over from the policy."""
    scene_xy: dict[str, np.ndarray] | None = None
    """Recovery episodes: xy of every object and of the target at the hand-over."""
    perturb_scale: float = 0.0
    """Scale of the executed-target noise (0: a clean demonstration)."""


def rollout_expert(
    env: TabletopEnv,
    runner: ExpertRunner,
    task: str,
    init_state_id: int,
    split: Split = "train",
    render: bool = True,
    success_hold_s: float = SUCCESS_HOLD_S,
    perturbation: ExecutionPerturbation | None = None,
) -> Episode:
    """Run the expert on one initial state at 100 Hz, observing every ``dt_action_s``.

    With ``perturbation`` the executed arm targets are offset by it (the recorded
    actions are the expert's own targets).
    """
    wall0 = time.perf_counter()
    obs = env.reset(task, init_state_id, split=split)
    episode = Episode(task, int(init_state_id), split, env.instruction, False)
    if perturbation is not None and perturbation.active:
        episode.perturb_scale = float(perturbation.scale)
    _record(
        env, runner, episode, obs, get_task(task).budget_s, render, success_hold_s, perturbation
    )
    episode.wall_s = time.perf_counter() - wall0
    return episode


def rollout_recovery(
    env: TabletopEnv,
    runner: ExpertRunner,
    policy: Runner,
    task: str,
    init_state_id: int,
    handover_s: float,
    replan_steps: int = 5,
    split: Split = "train",
    success_hold_s: float = SUCCESS_HOLD_S,
) -> Episode:
    """Let ``policy`` drive for ``handover_s``, then record the expert taking over.

    The policy runs unrecorded, one chunk every ``replan_steps`` policy steps
    (targets linearly interpolated at 100 Hz, as the expert's are). At the
    hand-over the expert plans from wherever the policy left the arm and the
    objects (:meth:`ScriptedExpert.take_over`), so the recorded episode starts
    in a state the policy itself reaches and shows the way back (re-grasps
    after a slip included). ``Episode.handover_s`` and ``Episode.scene_xy``
    (object and target xy at the hand-over) are set.
    """
    if replan_steps < 1:
        raise ValueError(f"replan_steps = {replan_steps}: must be >= 1")
    wall0 = time.perf_counter()
    obs = env.reset(task, init_state_id, split=split)
    lead_steps = int(round(handover_s / DT_ACTION_S))
    chunk, first = None, 0
    for k in range(lead_steps):
        if k > 0:
            obs = env.observe(render=True)
        if k % replan_steps == 0:
            chunk, first = policy.infer(obs), k
        i = min(k - first, chunk.horizon - 2)
        for _ in _steps_toward(env, chunk.positions[i], chunk.positions[i + 1]):
            pass
    episode = Episode(task, int(init_state_id), split, env.instruction, False)
    episode.handover_s = env.time_s
    scene = env.scene_state()
    episode.scene_xy = {name: scene.positions_m[name][:2].copy() for name in scene.positions_m}
    episode.scene_xy["target"] = scene.target_xy_m.copy()
    runner.expert.take_over()
    budget_s = max(get_task(task).budget_s - env.time_s, RECOVERY_MIN_BUDGET_S)
    _record(env, runner, episode, env.observe(render=True), budget_s, True, success_hold_s)
    episode.wall_s = time.perf_counter() - wall0
    return episode


def _steps_toward(env: TabletopEnv, a0: np.ndarray, a1: np.ndarray) -> Iterator[None]:
    """Step the env through one policy step, yielding after each 100 Hz tick.

    The targets are linearly interpolated from ``a0`` to ``a1``.
    """
    ticks = int(round(DT_ACTION_S / env.control_dt_s))
    for j in range(ticks):
        env.step(a0 + (j + 1) / ticks * (a1 - a0))
        yield


def _record(
    env: TabletopEnv,
    runner: ExpertRunner,
    episode: Episode,
    obs: Observation,
    budget_s: float,
    render: bool,
    success_hold_s: float,
    perturbation: ExecutionPerturbation | None = None,
) -> None:
    """Drive the expert from ``obs`` for up to ``budget_s``, appending to ``episode``.

    ``perturbation`` offsets what is executed, never what is recorded.
    """
    n_steps = int(round(budget_s / DT_ACTION_S))
    episode.images = {cam: [] for cam in env.cameras} if render else {}
    prev_q = env.state()[:6]
    success_since_s: float | None = None
    offset = np.zeros(len(env.joint_names))
    perturbed = perturbation is not None and perturbation.active
    for k in range(n_steps):
        if k > 0:
            obs = env.observe(render=render)
        chunk = runner.infer(obs)
        for cam in episode.images:
            episode.images[cam].append(obs.images[cam])
        episode.states.append(obs.state.astype(np.float32))
        episode.actions.append(chunk.positions[0].astype(np.float32))
        a0, a1 = chunk.positions[0] + offset, chunk.positions[1]
        if perturbed:
            label, progress = runner.expert.segment_at(env.time_s + DT_ACTION_S)
            offset = np.zeros_like(offset)
            offset[:6] = perturbation.step(segment_gate(label, progress))
            a1 = a1 + offset
        for _ in _steps_toward(env, a0, a1):
            q = env.state()[:6]
            speed = float(np.max(np.abs(q - prev_q))) / env.control_dt_s
            episode.max_joint_speed_rad_per_s = max(episode.max_joint_speed_rad_per_s, speed)
            prev_q = q
        if env.success():
            success_since_s = env.time_s if success_since_s is None else success_since_s
            if env.time_s - success_since_s >= success_hold_s - 1e-9:
                episode.success = True
                break
        else:
            success_since_s = None
    episode.duration_s = env.time_s
    episode.penetrating_contacts = env.penetrating_contacts()
    episode.replans = runner.expert.replans


def write_episode(group: h5py.Group, episode: Episode, seed: int) -> None:
    """Write one episode under ``group`` (``data/demo_<i>``), its probe targets included."""
    obs = group.create_group("obs")
    for cam, frames in episode.images.items():
        obs.create_dataset(
            f"{cam}_image",
            data=np.stack(frames),
            dtype=np.uint8,
            compression="gzip",
            compression_opts=4,
            chunks=(1, *frames[0].shape),
        )
    obs.create_dataset("state", data=np.stack(episode.states))
    group.create_dataset("actions", data=np.stack(episode.actions))
    group.attrs["instruction"] = episode.instruction
    group.attrs["task"] = episode.task
    group.attrs["init_state_id"] = episode.init_state_id
    group.attrs["split"] = episode.split
    group.attrs["seed"] = seed
    group.attrs["dt_action_s"] = DT_ACTION_S
    group.attrs["success"] = episode.success
    group.attrs["num_samples"] = len(episode.actions)
    group.attrs["perturb_scale"] = float(episode.perturb_scale)
    if episode.handover_s is not None:
        group.attrs["handover_s"] = episode.handover_s
    if episode.scene_xy is not None:
        group.attrs["scene_names"] = list(episode.scene_xy)
        group.attrs["scene_xy"] = np.stack(list(episode.scene_xy.values())).astype(np.float32)
    write_targets(
        group,
        episode_targets(episode.task, episode.init_state_id, episode.split, episode.scene_xy),
    )


def collect(
    out_dir: Path,
    tasks: list[str],
    episodes_per_task: int,
    image_size: int = 64,
    seed: int = 0,
    max_attempts_factor: int = 3,
    progress: bool = True,
    recover_with: str | None = None,
    handover_range_s: tuple[float, float] = HANDOVER_RANGE_S,
    threads: int = 1,
    perturb_scale: float = 0.0,
) -> dict[str, dict[str, float]]:
    """Record ``episodes_per_task`` successful expert episodes per task.

    Each task goes to ``out_dir/<task>.hdf5``. Training init-state ids start at
    ``seed * 10000`` so different seeds give disjoint layouts. With
    ``recover_with`` (a ``--policy`` string) every episode is a recovery
    episode (:func:`rollout_recovery`) whose hand-over time is drawn uniformly
    from ``handover_range_s``. With ``perturb_scale`` > 0 every expert
    episode is executed with :class:`ExecutionPerturbation` noise of that scale
    (not with ``recover_with``). Returns per-task statistics (successes,
    attempts, mean wall time).
    """
    for name in tasks:
        get_task(name)
    lo, hi = handover_range_s
    if not 0.0 <= lo <= hi:
        raise ConfigError(f"handover_range_s = {handover_range_s}: need 0 <= low <= high")
    if perturb_scale and recover_with is not None:
        raise ConfigError(
            f"perturb_scale = {perturb_scale} with recover_with: perturbation applies to "
            "expert demonstrations only"
        )
    # validates the scale before any episode runs
    ExecutionPerturbation(perturb_scale, np.random.default_rng(0), DT_ACTION_S)
    out_dir.mkdir(parents=True, exist_ok=True)
    env = TabletopEnv(image_height=image_size, image_width=image_size, split="train")
    runner = ExpertRunner(env)
    policy = None
    if recover_with is not None:
        from vla_edge.runners.factory import make_runner

        policy = make_runner(recover_with, env=env, threads=threads)
    rng = np.random.default_rng(seed)
    stats: dict[str, dict[str, float]] = {}
    bar = tqdm(total=episodes_per_task * len(tasks), disable=not progress, unit="demo")
    try:
        for name in tasks:
            path = out_dir / f"{name}.hdf5"
            kept = attempts = 0
            walls = []
            with h5py.File(path, "w") as f:
                data = f.create_group("data")
                data.attrs["suite"] = SUITE
                data.attrs["task"] = name
                data.attrs["cameras"] = list(env.cameras)
                data.attrs["joint_names"] = list(env.joint_names)
                data.attrs["image_size"] = image_size
                data.attrs["dt_action_s"] = DT_ACTION_S
                data.attrs["seed"] = seed
                if recover_with is not None:
                    data.attrs["recover_with"] = recover_with
                while (
                    kept < episodes_per_task and attempts < max_attempts_factor * episodes_per_task
                ):
                    init_id = seed * 10_000 + attempts
                    attempts += 1
                    bar.set_postfix_str(f"{name} #{init_id}")
                    if policy is None:
                        perturbation = None
                        if perturb_scale > 0.0:
                            noise_rng = np.random.default_rng((seed, init_id))
                            perturbation = ExecutionPerturbation(
                                perturb_scale, noise_rng, DT_ACTION_S
                            )
                        episode = rollout_expert(
                            env, runner, name, init_id, split="train", perturbation=perturbation
                        )
                    else:
                        handover_s = float(rng.uniform(lo, hi))
                        episode = rollout_recovery(env, runner, policy, name, init_id, handover_s)
                    walls.append(episode.wall_s)
                    if not episode.success:
                        continue
                    write_episode(data.create_group(f"demo_{kept}"), episode, seed)
                    kept += 1
                    bar.update(1)
                data.attrs["total"] = int(sum(int(g.attrs["num_samples"]) for g in data.values()))
            stats[name] = {
                "successes": kept,
                "attempts": attempts,
                "mean_wall_s": float(np.mean(walls)) if walls else 0.0,
            }
    finally:
        bar.close()
        if policy is not None:
            policy.close()
        env.close()
    return stats


__all__ = [
    "CAMERAS",
    "Episode",
    "collect",
    "rollout_expert",
    "rollout_recovery",
    "write_episode",
]
