"""``vla-edge demo`` (``make demo``): the sim graph with the bundled model on one task.

Starts the same processes as ``vla-edge launch sim`` (sim, safety, controller,
inference) for a bounded time, stops one second after the task succeeds, and
reports success, chunk age p50/p95, controller period jitter and the
inference per-stage p50. Writes ``<out>/demo.json`` and ``<out>/joints.png``:
commanded (safe) vs measured joints with chunk arrivals marked.

Until the bundled model file exists, the demo falls back to the scripted
expert and says so loudly.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from vla_edge.demo import (
    DEFAULT_DURATION_S,
    DEFAULT_OUT,
    choose_policy,
    inference_threads,
    plot_joints,
    summary_lines,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``vla-edge demo``."""
    parser.add_argument("--task", default=None, help="sim task (default: config/sim.yaml)")
    parser.add_argument(
        "--policy", default="bundled", help="bundled (default) | expert | checkpoint | export dir"
    )
    parser.add_argument(
        "--duration", type=float, default=DEFAULT_DURATION_S, help="upper bound in seconds"
    )
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output directory")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="inference threads (default: config/inference.yaml, at most cores - 1)",
    )


def run(args: argparse.Namespace) -> int:
    """Entry point of ``vla-edge demo``."""
    from vla_edge.core.errors import VlaEdgeError
    from vla_edge.nodes.graph_run import run_graph

    policy, fallback = choose_policy(args.policy)
    if fallback:
        banner = "!" * 78
        print(
            f"{banner}\n!!! FALLING BACK TO THE SCRIPTED EXPERT: {fallback}.\n"
            f"!!! This demo shows the ROS graph, not the learned policy.\n{banner}",
            file=sys.stderr,
            flush=True,
        )
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    try:
        metrics, monitor, _ = run_graph(
            "sim",
            args.duration,
            task=args.task,
            policy=policy,
            threads=inference_threads(args.threads),
            stop_on_success=True,
            record=True,
            log_dir=out / "logs",
        )
    except VlaEdgeError as exc:  # a bad --task or parameter file: nothing was started
        print(f"vla-edge demo: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    metrics["fallback"] = fallback
    plot_path = out / "joints.png"
    if monitor is not None and monitor.recording is not None and monitor.recording.command:
        plot_joints(monitor.recording, plot_path, f"{metrics['task']} — {policy}")
        metrics["plot"] = str(plot_path)
    (out / "demo.json").write_text(json.dumps(metrics, indent=2) + "\n")
    print("\n".join(summary_lines(metrics)))
    print(f"plot: {plot_path}   metrics: {out / 'demo.json'}   logs: {out / 'logs'}/")
    if metrics["nodes_died"]:
        print(f"nodes died: {metrics['nodes_died']}", file=sys.stderr)
        return 1
    return 0  # the demo ran; whether the task succeeded is in the report
