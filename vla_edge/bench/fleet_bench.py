"""``vla-edge bench fleet``: the same episodes on local worker processes and on Ray.

``vla-edge bench fleet --policy bundled --episodes 10 --workers 2 --json OUT``

Runs every task's init states ``0 .. episodes - 1`` (60 episodes for the six tasks and
10) twice, side by side in one process: on ``--workers`` spawned processes (what
``vla-edge eval --workers`` does) and as Ray tasks on a local instance of as many CPUs
(``vla-edge eval --ray``), ``--rounds`` times in alternating order. Per pool: the wall
time (for Ray with and without starting the instance), and the two checks of the
issue: the Ray / local wall-time ratio, and the per-episode overhead of a Ray task
(the wall-time difference per episode, and the round trip of an empty task). The
per-episode outcomes of the two pools must be the same (the JSON says whether they
are).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

EMPTY_TASKS = 200
"""Empty Ray tasks timed for the round-trip overhead."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``vla-edge bench fleet``."""
    parser.add_argument("--policy", default="bundled")
    parser.add_argument("--episodes", type=int, default=10, help="init states per task")
    parser.add_argument("--tasks", nargs="*", default=None, help="default: all")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="policy threads per episode")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--json", type=Path, required=True)


def _outcomes(records: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        k: {f: v for f, v in r["result"].items() if f != "inference_ms"} for k, r in records.items()
    }


def _empty() -> None:
    return None


def run(args: argparse.Namespace) -> int:
    """Write the JSON."""
    import ray

    from vla_edge.bench.machine import machine_info
    from vla_edge.sim.episodes import (
        Episode,
        EvalJob,
        ProcessPool,
        RayPool,
        ResultsStore,
        run_episodes,
    )
    from vla_edge.sim.tasks import list_tasks

    job = EvalJob(policy=args.policy, threads=args.threads)
    tasks = args.tasks or list_tasks()
    episodes = [Episode(job, t, i) for t in tasks for i in range(args.episodes)]
    load_before = list(os.getloadavg())
    rows: list[dict[str, Any]] = []
    outcomes: dict[str, Any] = {}
    for round_index in range(args.rounds):
        order = ("local", "ray") if round_index % 2 == 0 else ("ray", "local")
        for name in order:
            print(f"round {round_index}: {name} ...", file=sys.stderr, flush=True)
            t0 = time.perf_counter()
            if name == "ray":
                pool: Any = RayPool(None, args.workers)
                started = time.perf_counter()
                overhead = None
                try:
                    records = run_episodes(episodes, ResultsStore(None), pool, quiet=True)
                    finished = time.perf_counter()
                    empty = ray.remote(num_cpus=1)(_empty)
                    ray.get([empty.remote() for _ in range(10)])  # warm
                    e0 = time.perf_counter()
                    ray.get([empty.remote() for _ in range(EMPTY_TASKS)])
                    overhead = (time.perf_counter() - e0) / EMPTY_TASKS * 1e3
                finally:
                    pool.close()
                row = {
                    "pool": "ray",
                    "wall_s": finished - started,
                    "wall_with_start_s": finished - t0,
                    "empty_task_ms": overhead,
                }
            else:
                pool = ProcessPool(args.workers)
                records = run_episodes(episodes, ResultsStore(None), pool, quiet=True)
                row = {"pool": "local", "wall_s": time.perf_counter() - t0}
            row.update(
                round=round_index,
                episodes=len(records),
                successes=sum(bool(r["result"]["success"]) for r in records.values()),
                episode_wall_s_mean=float(np.mean([r["wall_s"] for r in records.values()])),
            )
            rows.append(row)
            outcomes[name] = _outcomes(records)
            print(f"  {row['wall_s']:.1f} s", file=sys.stderr, flush=True)
    local = [r["wall_s"] for r in rows if r["pool"] == "local"]
    ray_rows = [r for r in rows if r["pool"] == "ray"]
    ray_wall = [r["wall_s"] for r in ray_rows]
    summary = {
        "ray_vs_local_wall": float(np.median(ray_wall) / np.median(local)),
        "ray_with_start_vs_local_wall": float(
            np.median([r["wall_with_start_s"] for r in ray_rows]) / np.median(local)
        ),
        "ray_overhead_per_episode_ms": float(
            (np.median(ray_wall) - np.median(local)) / len(episodes) * 1e3
        ),
        "empty_task_round_trip_ms": float(np.median([r["empty_task_ms"] for r in ray_rows])),
        "same_outcomes": outcomes.get("local") == outcomes.get("ray"),
        "goal_ray_vs_local_max": 1.15,
    }
    report = {
        "rows": rows,
        "summary": summary,
        "machine": machine_info(),
        "settings": {
            "command": " ".join(["vla-edge", *sys.argv[1:]]),
            "policy": args.policy,
            "tasks": tasks,
            "episodes_per_task": args.episodes,
            "workers": args.workers,
            "threads": args.threads,
            "rounds": args.rounds,
            "load_before": load_before,
            "load_after": list(os.getloadavg()),
        },
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 0
