"""``vla-edge eval --graph``: the evaluator's episodes through the real ROS 2 graph, in real time.

The graph of ``vla-edge launch sim`` starts once (each node its own process, DDS between
them, the policy at its real latency). The episodes are the evaluator's: each task of the
suite with initial states ``0..episodes-1``, in order, each with the task's canonical
instruction and time budget. Between two episodes ``sim_node/reset`` homes the arm to the
next initial state's pose through the controller and the safety node, then re-places the
objects (:mod:`vla_edge.bench.soak` runs them: no fault, no instruction switch).

The JSON has the virtual-time evaluator's fields where the graph measures the same thing
(``tasks.<task>.{successes, episodes, success_rate, wilson_95, mean_completion_time_s}``,
``mean_success``, the settings) and the graph's own figures under ``graph``: chunk ages at
arrival, chunks accepted / refused (stale), buffer underruns, the controller's period
jitter, the share of ticks the safety node limited, inference wall times, each episode as
it ran. :func:`compare` puts two evaluation JSONs (virtual time or graph) side by side per
task with their Wilson intervals and the difference of the rates with its 95 % interval;
:func:`pool` adds up several runs of the same episodes (noise seeds, graph runs) first.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vla_edge.sim.episodes import EvalJob
from vla_edge.sim.evaluator import difference_interval, wilson_interval

HOMING_ALLOWANCE_S = 20.0
"""Per episode, beyond its budget: the reset (homing, re-placing) and the settle after success."""
STARTUP_ALLOWANCE_S = 180.0


def graph_episodes(names: Sequence[str], episodes: int) -> list[Any]:
    """The evaluator's episodes, in its order: each task, initial states ``0..episodes-1``."""
    from vla_edge.bench.soak import EpisodeSpec
    from vla_edge.sim.tasks import get_task

    return [
        EpisodeSpec(name, init_state_id, get_task(name).budget_s)
        for name in names
        for init_state_id in range(episodes)
    ]


def run_graph_eval(
    job: EvalJob,
    names: Sequence[str],
    episodes: int,
    log_dir: Path,
    announce: Callable[[str], None] = print,
    stop: threading.Event | None = None,
) -> dict[str, Any]:
    """Run ``job``'s episodes in the graph; the evaluation JSON (see the module docstring).

    Raises:
        ConfigError: the job asks for what the graph does not run (another suite or
            scheme, instruction variants, a simulated delay, a merge other than the
            controller parameter file's).
        SoakStartupError: the graph did not come up.
    """
    from vla_edge.bench.soak import ListedEpisodes, Soak, machine, make_settings
    from vla_edge.bench.soak_report import build_report
    from vla_edge.core.errors import ConfigError

    settings = job.settings
    controller, _ = job.configs()
    asked = {
        "suite": (job.suite, "tabletop"),
        "scheme": (settings.scheme, "async"),
        "instructions": (settings.instructions, "canonical"),
        "delay_ms": (settings.delay_s * 1e3, 0.0),
        "merge": (settings.merge, controller.merge),
    }
    off = {name: got for name, (got, runs) in asked.items() if got != runs}
    if off:
        runs = ", ".join(f"{k} {v!r}" for k, (_, v) in asked.items())
        raise ConfigError(
            f"--graph runs what the graph runs: {runs} "
            f"(the merge of the controller's parameter file; the real inference latency, no "
            f"simulated delay); asked for {off}"
        )
    specs = graph_episodes(names, episodes)
    duration_s = sum(s.budget_s + HOMING_ALLOWANCE_S for s in specs) + STARTUP_ALLOWANCE_S
    soak_settings = make_settings(
        duration_s=duration_s,
        window_s=duration_s,
        warmup_s=0.0,
        faults=(),
        switch_probability=0.0,
        seed=job.seed,
    )
    soak = Soak(
        soak_settings,
        job.policy,
        job.threads,
        log_dir,
        announce=announce,
        stop=stop,
        episodes=ListedEpisodes(specs),
        device=job.device,
    )
    record = soak.run()
    recorded = {
        **soak_settings.model_dump(mode="json"),
        "policy": job.policy,
        "threads": job.threads,
        "device": job.device,
        "ros_domain_id": os.environ.get("ROS_DOMAIN_ID"),
        "log_dir": str(log_dir),
    }
    report = build_report(record, recorded, machine())
    return graph_eval_json(job, names, episodes, report, exhausted=soak.exhausted)


def graph_eval_json(
    job: EvalJob,
    names: Sequence[str],
    episodes: int,
    report: Mapping[str, Any],
    exhausted: bool = True,
) -> dict[str, Any]:
    """The evaluation JSON of a graph run from its soak report (see the module docstring)."""
    ran = [e for e in report["episodes"] if e["end"] in ("success", "budget")]
    per_task: dict[str, Any] = {}
    for name in names:
        done = [e for e in ran if e["task"] == name]
        successes = sum(bool(e["success"]) for e in done)
        times = [e["success_t_s"] - e["t_start_s"] for e in done if e["success"]]
        per_task[name] = {
            "success_rate": successes / len(done) if done else 0.0,
            "successes": successes,
            "episodes": len(done),
            "wilson_95": list(wilson_interval(successes, len(done))),
            "mean_completion_time_s": float(np.mean(times)) if times else None,
            "init_states": [e["init_state_id"] for e in done],
        }
    rates = [v["success_rate"] for v in per_task.values()]
    summary = report["summary"]
    final = _last_sample(report.get("samples") or {})
    jitter_p99 = [w.get("controller_jitter_ms", {}).get("p99") for w in report["windows"]]
    controller, safety = job.configs()
    return {
        "suite": job.suite,
        "policy": job.policy,
        "tasks": per_task,
        "mean_success": float(np.mean(rates)) if rates else 0.0,
        "complete": bool(exhausted) and not report["interrupted"],
        "graph": {
            "episodes": summary["episodes"],
            "reset_failures": report.get("reset_failures", []),
            "chunk_age_ms": summary["chunk_age_ms"],
            "chunks_accepted": final.get("controller.accepted"),
            "chunks_rejected": final.get("controller.rejected"),
            "chunks_rejected_stale": final.get("controller.rejected_stale"),
            "buffer_underruns": summary["buffer_underruns"]["outside_faults"],
            "controller_jitter_ms_p99_worst_window": max(
                (j for j in jitter_p99 if j is not None), default=None
            ),
            "safety_limited_ticks": summary["safety_limited_ticks"],
            "inference_wall_ms": {
                "p50": final.get("inference.wall_ms_p50"),
                "p95": final.get("inference.wall_ms_p95"),
            },
            "startup_s": report.get("startup_s"),
            "duration_s": report.get("duration_s"),
            "machine": report.get("machine"),
            "episodes_as_run": report["episodes"],
        },
        "settings": {
            "episodes_per_task": episodes,
            "seed": job.seed,
            "merge": controller.merge,
            "delay_ms": None,
            "virtual_time": False,
            "threads": job.threads,
            "device": job.device,
            "max_chunk_age_s": controller.max_chunk_age_s,
            "command_limit_margin": controller.command_limit_margin,
            "controller": controller.model_dump(mode="json"),
            "safety": safety.model_dump(mode="json"),
        },
    }


def _last_sample(columns: Mapping[str, Sequence[Any]]) -> dict[str, Any]:
    """The last non-missing value of each sampled column (``node.key`` names)."""
    out: dict[str, Any] = {}
    for name, values in columns.items():
        present = [v for v in values if v is not None]
        if present:
            out[name] = present[-1]
    return out


def pool(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Several evaluation JSONs as one: per task, the runs' successes and episodes added up.

    For runs of the same episodes (virtual time with other noise seeds, the graph run
    again): what :func:`compare` reads (``tasks.<task>.{successes, episodes}``, and
    ``settings.virtual_time`` when every run agrees on it).

    Raises:
        ConfigError: no runs.
    """
    from vla_edge.core.errors import ConfigError

    if not runs:
        raise ConfigError("pool: no evaluation runs")
    tasks: dict[str, dict[str, int]] = {}
    for run in runs:
        for name, task in run["tasks"].items():
            total = tasks.setdefault(name, {"successes": 0, "episodes": 0})
            total["successes"] += int(task["successes"])
            total["episodes"] += int(task["episodes"])
    kinds = {bool(run.get("settings", {}).get("virtual_time", True)) for run in runs}
    settings = {"virtual_time": kinds.pop()} if len(kinds) == 1 else {}
    return {"tasks": tasks, "settings": {**settings, "runs": len(runs)}}


def compare(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Two evaluation JSONs per task: successes, rates, Wilson intervals, whether they overlap.

    Tasks in ``a``'s order, then those only ``b`` has; an overall row last. Where both
    sides ran a task, ``difference`` is ``b``'s rate minus ``a``'s in points with its 95 %
    interval (:func:`~vla_edge.sim.evaluator.difference_interval`).
    """
    names = list(a["tasks"]) + [n for n in b["tasks"] if n not in a["tasks"]]
    rows = []
    totals = {"a": [0, 0], "b": [0, 0]}
    for name in names:
        row: dict[str, Any] = {"task": name}
        for key, run in (("a", a), ("b", b)):
            task = run["tasks"].get(name)
            if task is None:
                row[key] = None
                continue
            successes, n = int(task["successes"]), int(task["episodes"])
            totals[key][0] += successes
            totals[key][1] += n
            row[key] = _side(successes, n)
        row["overlap"] = _overlap(row["a"], row["b"])
        row["difference"] = _difference(row["a"], row["b"])
        rows.append(row)
    overall = {"task": "overall", "a": _side(*totals["a"]), "b": _side(*totals["b"])}
    overall["overlap"] = _overlap(overall["a"], overall["b"])
    overall["difference"] = _difference(overall["a"], overall["b"])
    rows.append(overall)
    return rows


def _side(successes: int, n: int) -> dict[str, Any]:
    return {
        "successes": successes,
        "episodes": n,
        "rate": successes / n if n else None,
        "wilson_95": list(wilson_interval(successes, n)),
    }


def _overlap(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool | None:
    if a is None or b is None:
        return None
    (lo_a, hi_a), (lo_b, hi_b) = a["wilson_95"], b["wilson_95"]
    return lo_a <= hi_b and lo_b <= hi_a


def _difference(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if a is None or b is None or not a["episodes"] or not b["episodes"]:
        return None
    low, high = difference_interval(a["successes"], a["episodes"], b["successes"], b["episodes"])
    return {
        "points": 100.0 * (b["rate"] - a["rate"]),
        "ci_95_points": [100.0 * low, 100.0 * high],
    }


def difference_cell(difference: Mapping[str, Any] | None) -> str:
    """A :func:`compare` row's difference: ``+6 (−2 to +14)`` points, or ``–``."""
    if difference is None:
        return "–"
    low, high = difference["ci_95_points"]
    return f"{difference['points']:+.0f} ({low:+.0f} to {high:+.0f})"


def side_cell(side: Mapping[str, Any] | None) -> str:
    """One side of a :func:`compare` row: ``9/10 (90 %, 60–98)`` (Wilson 95 %), or ``–``."""
    if side is None or not side["episodes"]:
        return "–"
    lo, hi = side["wilson_95"]
    return (
        f"{side['successes']}/{side['episodes']} ({100 * side['rate']:.0f} %, "
        f"{100 * lo:.0f}–{100 * hi:.0f})"
    )


def overlap_cell(overlap: bool | None) -> str:
    """A :func:`compare` row's ``overlap``: ``yes``, ``no`` or ``–`` (a side did not run)."""
    return {True: "yes", False: "no", None: "–"}[overlap]


def compare_table(rows: Sequence[Mapping[str, Any]], label_a: str, label_b: str) -> str:
    """:func:`compare`'s rows as a Markdown table (rates in %, Wilson 95 % intervals)."""
    lines = [
        f"| task | {label_a} | {label_b} | intervals overlap | second − first, points (95 %) |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row['task']} | {side_cell(row['a'])} | {side_cell(row['b'])} | "
            f"{overlap_cell(row['overlap'])} | "
            f"{difference_cell(row['difference'])} |"
        )
    return "\n".join(lines)
