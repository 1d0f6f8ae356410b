"""``vla-edge launch sim|hil``: start the graph as separate processes (rclpy from PyPI).

Every node runs as its own process, as ``launch/<profile>.launch.py`` starts
them on a ROS 2 distribution (:func:`vla_edge.nodes.graph_run.run_graph`).
``--namespace arm1`` starts the whole graph under ``/arm1`` (a second arm is a
second graph in another namespace). The command watches the processes, stops
them cleanly (SIGINT, then SIGTERM, then SIGKILL) at the end, prints the run's
metrics (collected from the nodes' ``/diagnostics``) and with ``--json`` writes
them to a file. Exit code 1 when a node died, 2 on a bad option or parameter file,
130 when interrupted.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from vla_edge.core.errors import ConfigError, VlaEdgeError
from vla_edge.nodes.graph import PROFILES, normalize_namespace
from vla_edge.nodes.graph_run import run_graph


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``vla-edge launch``."""
    parser.add_argument("profile", choices=PROFILES, help="which graph to start")
    parser.add_argument("--duration", type=float, default=None, help="stop after S seconds")
    parser.add_argument("--json", type=Path, default=None, help="write the run's metrics here")
    parser.add_argument(
        "--task", default=None, help="sim task of any suite (default: config/sim.yaml)"
    )
    parser.add_argument(
        "--sequencer",
        action="store_true",
        help="long-horizon task: the sim publishes one sub-task's instruction at a time",
    )
    parser.add_argument(
        "--policy", default=None, help="expert | bundled | checkpoint | export dir | ws://…"
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="inference threads (default: its config)"
    )
    parser.add_argument(
        "--device",
        default=None,
        help="inference node's device for a torch policy: cpu, cuda or cuda:N (default: its "
        "config)",
    )
    parser.add_argument(
        "--stop-on-success", action="store_true", help="stop 1 s after task_success"
    )
    parser.add_argument(
        "--namespace",
        default="",
        type=namespace_argument,
        help="start the graph under this ROS namespace (e.g. arm1: topics /arm1/joint_states, …)",
    )
    parser.add_argument("--log-dir", type=Path, default=Path("out/launch"), help="node logs")


def namespace_argument(value: str) -> str:
    """``--namespace``: the normalised namespace, or argparse's error naming the rule."""
    try:
        return normalize_namespace(value)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def run(args: argparse.Namespace) -> int:
    """Entry point of ``vla-edge launch``."""
    duration_s = args.duration if args.duration is not None else float("inf")
    try:
        metrics, _, _ = run_graph(
            args.profile,
            duration_s,
            task=args.task,
            policy=args.policy,
            threads=args.threads,
            stop_on_success=args.stop_on_success,
            log_dir=args.log_dir,
            namespace=args.namespace,
            sequencer=args.sequencer,
            device=args.device,
        )
    except KeyboardInterrupt:
        return 130
    except VlaEdgeError as exc:
        print(f"vla-edge launch: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(metrics, indent=2))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(metrics, indent=2) + "\n")
    return 1 if metrics["nodes_died"] else 0
