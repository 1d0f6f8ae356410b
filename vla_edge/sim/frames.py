"""Observations rendered while the scripted expert drives each task.

Used where a real camera frame is needed without recorded data: the parity
benchmark's default inputs (evaluation init states) and the int8 calibration
of the exported convolutions (training init states, like the demonstrations).
"""

from __future__ import annotations

import numpy as np

from vla_edge.core.types import Observation
from vla_edge.sim.tasks import Split

EXPERT_STEPS_PER_SAMPLE = 4
"""Action steps (0.1 s each) the expert drives between two kept observations."""


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
    from vla_edge.runners.expert import ExpertRunner
    from vla_edge.sim.env import TabletopEnv
    from vla_edge.sim.tasks import list_tasks

    env = TabletopEnv(image_hw[0], image_hw[1], cameras=cameras)
    expert = ExpertRunner(env, chunk_horizon=horizon)
    tasks = list_tasks()
    per_task = max(1, -(-count // len(tasks)))
    substeps = int(round(0.1 / env.control_dt_s))
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
