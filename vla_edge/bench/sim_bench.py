"""``vla-edge bench sim``: env step + render cost per policy step, per resolution.

One policy step is what a closed-loop evaluation pays every ``dt_action_s``
(0.1 s): ten 100 Hz control ticks of physics (5 substeps of 2 ms each) plus one
render of every camera. The arm follows the scripted expert (its planning time
is timed separately and not included), so contacts and motion are realistic.

JSON::

    {"step_render_ms": {"128": {"p50": ..., "p90": ..., "mean": ...}, "224": {...}},
     "step_ms": {...}, "render_ms": {...}, "expert_ms": {...}, "settings": {...}}
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

from vla_edge.config.models import DEFAULT_DT_ACTION_S
from vla_edge.sim.env import TabletopEnv
from vla_edge.sim.tasks import get_task, list_tasks


def _summary(values_ms: list[float]) -> dict[str, float]:
    arr = np.asarray(values_ms, dtype=np.float64)
    return {
        "p50": float(np.percentile(arr, 50)),
        "p90": float(np.percentile(arr, 90)),
        "mean": float(arr.mean()),
        "n": int(arr.size),
    }


def measure(side_px: int, task: str, policy_steps: int, warmup_steps: int = 3) -> dict[str, dict]:
    """Time ``policy_steps`` policy steps at ``side_px`` x ``side_px``."""
    from vla_edge.sim.expert_runner import ExpertRunner

    env = TabletopEnv(image_height=side_px, image_width=side_px)
    runner = ExpertRunner(env)
    ticks = int(round(DEFAULT_DT_ACTION_S / env.control_dt_s))
    step_ms: list[float] = []
    render_ms: list[float] = []
    total_ms: list[float] = []
    expert_ms: list[float] = []
    init_id = 0
    obs = env.reset(task, init_id)
    done = 0
    while done < policy_steps + warmup_steps:
        if env.time_s >= get_task(task).budget_s or env.success():
            init_id = (init_id + 1) % 50
            obs = env.reset(task, init_id)
        t0 = time.perf_counter()
        chunk = runner.infer(obs)
        t1 = time.perf_counter()
        a0, a1 = chunk.positions[0], chunk.positions[1]
        for j in range(ticks):
            env.step(a0 + (j + 1) / ticks * (a1 - a0))
        t2 = time.perf_counter()
        obs = env.observe(render=True)
        t3 = time.perf_counter()
        if done >= warmup_steps:
            expert_ms.append((t1 - t0) * 1e3)
            step_ms.append((t2 - t1) * 1e3)
            render_ms.append((t3 - t2) * 1e3)
            total_ms.append((t3 - t1) * 1e3)
        done += 1
    env.close()
    return {
        "step_render_ms": _summary(total_ms),
        "step_ms": _summary(step_ms),
        "render_ms": _summary(render_ms),
        "expert_ms": _summary(expert_ms),
    }


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``vla-edge bench sim``."""
    parser.add_argument("--json", dest="json_out", type=Path, required=True, help="output file")
    parser.add_argument(
        "--sizes", type=int, nargs="+", default=[64, 128, 224], help="square image sizes (px)"
    )
    parser.add_argument("--steps", type=int, default=100, help="policy steps timed per size")
    parser.add_argument("--task", default=list_tasks()[0], help="task the expert performs")


def run(args: argparse.Namespace) -> int:
    """Entry point of ``vla-edge bench sim``."""
    if args.steps < 1:
        raise SystemExit(f"--steps = {args.steps}: must be >= 1")
    for side in args.sizes:
        if not 8 <= side <= 640:
            raise SystemExit(f"--sizes value {side}: must be in [8, 640] px")
    get_task(args.task)
    result: dict[str, dict] = {
        "step_render_ms": {},
        "step_ms": {},
        "render_ms": {},
        "expert_ms": {},
    }
    for side in args.sizes:
        per_size = measure(side, args.task, args.steps)
        for key, value in per_size.items():
            result[key][str(side)] = value
        print(
            f"{side}x{side}: step+render p50 {per_size['step_render_ms']['p50']:.2f} ms "
            f"(physics {per_size['step_ms']['p50']:.2f} ms, render "
            f"{per_size['render_ms']['p50']:.2f} ms, 2 cameras) "
            f"per {DEFAULT_DT_ACTION_S} s policy step"
        )
    result["settings"] = {
        "task": args.task,
        "steps": args.steps,
        "cameras": ["agentview", "wrist"],
        "control_ticks_per_step": 10,
        "physics_substeps_per_tick": 5,
        "mujoco_gl": os.environ.get("MUJOCO_GL", ""),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
    }
    args.json_out.parent.mkdir(parents=True, exist_ok=True)
    args.json_out.write_text(json.dumps(result, indent=2) + "\n")
    return 0
