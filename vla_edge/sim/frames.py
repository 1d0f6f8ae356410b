"""Real observations for the benchmarks and the export's calibration.

* :func:`expert_observations`: rendered while the scripted expert drives each
  task — the parity benchmark's default inputs (evaluation init states) and
  the int8 calibration of the exported convolutions (training init states,
  like the demonstrations);
* :func:`recorded_observations`: taken from recorded demonstrations (HDF5);
* :func:`calibration_images`: either, as the vision encoder's input tensors
  (what ``export_checkpoint`` takes as its ``calibration_source``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from vla_edge.config.models import DEFAULT_DT_ACTION_S
from vla_edge.core.types import Observation
from vla_edge.sim.tasks import Split

if TYPE_CHECKING:
    import torch

    from vla_edge.archs.bundled.model import VlaPolicy

EXPERT_STEPS_PER_SAMPLE = 4
"""Action steps (``DEFAULT_DT_ACTION_S`` each) the expert drives between two kept observations."""


def expert_observations(
    cameras: list[str],
    image_hw: tuple[int, int],
    horizon: int,
    count: int,
    split: Split = "eval",
    first_init_state: int = 0,
) -> list[tuple[Observation, np.ndarray]]:
    """``count`` (observation, expert chunk from it), spread evenly over the tasks.

    Task ``t`` starts from ``split``'s init state ``first_init_state + t``; an observation
    is kept every :data:`EXPERT_STEPS_PER_SAMPLE` steps of the expert.
    """
    from vla_edge.sim.env import TabletopEnv
    from vla_edge.sim.expert_runner import ExpertRunner
    from vla_edge.sim.tasks import list_tasks

    env = TabletopEnv(image_hw[0], image_hw[1], cameras=cameras)
    expert = ExpertRunner(env, chunk_horizon=horizon)
    tasks = list_tasks()
    per_task = max(1, -(-count // len(tasks)))
    substeps = int(round(DEFAULT_DT_ACTION_S / env.control_dt_s))
    out: list[tuple[Observation, np.ndarray]] = []
    try:
        for t, task in enumerate(tasks):
            obs = env.reset(task, first_init_state + t, split=split)
            expert.expert.reset()
            for k in range(per_task * EXPERT_STEPS_PER_SAMPLE):
                chunk = expert.infer(obs)
                if k % EXPERT_STEPS_PER_SAMPLE == 0:
                    out.append((obs, chunk.positions.copy()))
                for _ in range(substeps):
                    env.step(chunk.positions[1])
                obs = env.observe(render=True)
    finally:
        env.close()
    return out[:count]


def recorded_observations(
    path: Path, cameras: list[str], image_hw: tuple[int, int], action_dim: int, count: int
) -> list[tuple[Observation, np.ndarray]]:
    """``count`` (observation, recorded action rows from it) spread over the episodes."""
    from vla_edge.archs.bundled.data import load_episodes

    episodes = load_episodes(path, cameras, image_hw, action_dim)
    steps = [(e, k) for e, ep in enumerate(episodes) for k in range(ep.length)]
    picks = np.linspace(0, len(steps) - 1, num=min(count, len(steps))).round().astype(int)
    out = []
    for i in picks:
        e, k = steps[int(i)]
        ep = episodes[e]
        obs = Observation(
            stamp_s=DEFAULT_DT_ACTION_S * k,
            images={cam: ep.images[cam][k] for cam in cameras},
            state=ep.state[k].astype(np.float64),
            instruction=ep.instruction,
        )
        out.append((obs, ep.actions[k:].astype(np.float64)))
    return out


def calibration_images(
    policy: VlaPolicy, frames: int, data: Path | None = None
) -> list[tuple[torch.Tensor]]:
    """``frames`` vision-encoder inputs, each holding every camera of one observation.

    From recorded demonstrations (``data``: HDF5 file or folder, spread evenly
    over its episodes) when given — the choice for a real camera — else
    rendered from the tabletop while the expert works, from training-split
    init states (the demonstrations' distribution), never the evaluation's.
    """
    import torch

    from vla_edge.runners.preprocess import images_to_nchw

    cfg = policy.config
    hw = (cfg.image_height, cfg.image_width)
    if data is not None:
        samples = recorded_observations(data, list(cfg.cameras), hw, cfg.action_dim, frames)
    else:
        samples = expert_observations(list(cfg.cameras), hw, cfg.chunk_horizon, frames, "train")
    return [
        (torch.from_numpy(images_to_nchw(obs.images, tuple(cfg.cameras))),) for obs, _ in samples
    ]
