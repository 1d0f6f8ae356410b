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
import os
import sys
from pathlib import Path
from typing import Any

DEFAULT_DURATION_S = 90.0
DEFAULT_OUT = Path("out/demo")


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


def choose_policy(requested: str) -> tuple[str, str | None]:
    """The policy to run and, when it had to fall back, why."""
    if requested != "bundled":
        return requested, None
    from vla_edge.runners.factory import BUNDLED_CHECKPOINT

    if BUNDLED_CHECKPOINT.is_file():
        return "bundled", None
    return "expert", f"the bundled model {BUNDLED_CHECKPOINT} does not exist yet"


def inference_threads(requested: int | None) -> int:
    """Threads for the runner: ``requested``, else the config's, leaving one core free.

    The simulator and the controller/safety loops share the machine with the
    policy; an oversubscribed torch thread pool stalls for whole scheduler
    slices (seconds of p95 latency on a loaded two-core machine), so the demo
    never gives the policy every core.
    """
    if requested is not None:
        return max(1, requested)
    from vla_edge.config.loader import load_node_params
    from vla_edge.config.models import InferenceConfig
    from vla_edge.nodes.graph import INFERENCE_NODE

    configured = load_node_params(
        INFERENCE_NODE.params_path(), INFERENCE_NODE.name, InferenceConfig
    ).threads
    return max(1, min(configured, (os.cpu_count() or 2) - 1))


def plot_joints(recording: Any, path: Path, title: str) -> None:
    """Commanded vs measured joint positions, one panel per joint, chunk arrivals marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    names = recording.joint_names or [f"joint{i + 1}" for i in range(7)]
    commanded = np.asarray(recording.command, dtype=float)
    measured = np.asarray(recording.measured, dtype=float)
    n = max(commanded.shape[1] if commanded.ndim == 2 else 0, len(names))
    fig, axes = plt.subplots(n, 1, figsize=(10, 1.6 * n + 1), sharex=True)
    axes = np.atleast_1d(axes)
    for j, ax in enumerate(axes):
        for t_s in recording.chunk_arrival_t_s:
            ax.axvline(t_s, color="0.85", linewidth=0.6, zorder=0)
        if measured.ndim == 2 and j < measured.shape[1]:
            ax.plot(recording.measured_t_s, measured[:, j], label="measured", linewidth=1.0)
        if commanded.ndim == 2 and j < commanded.shape[1]:
            ax.plot(
                recording.command_t_s,
                commanded[:, j],
                label="commanded (safe)",
                linewidth=1.0,
                linestyle="--",
            )
        unit = "m" if names[j] == "gripper" else "rad"
        ax.set_ylabel(f"{names[j] if j < len(names) else j}\n[{unit}]", fontsize=8)
    axes[0].legend(loc="upper right", fontsize=8)
    axes[0].set_title(f"{title} (grey lines: chunk arrivals)")
    axes[-1].set_xlabel("time since start [s]")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _ms(value: Any, digits: int = 1) -> str:
    """A millisecond figure as it is read (``n/a`` when it was not measured)."""
    return "n/a" if value is None else f"{float(value):.{digits}f}"


def summary_lines(metrics: dict[str, Any]) -> list[str]:
    """The human-readable report (figures rounded as they are read; the JSON keeps them)."""
    jitter = {k: _ms(v, 2) for k, v in metrics["controller_period_jitter_ms"].items()}
    age = {k: _ms(v) for k, v in metrics["chunk_age_ms"].items()}
    stages = ", ".join(
        f"{stage} {v['p50']:.1f} ms"
        for stage, v in metrics["inference_stage_ms"].items()
        if v.get("p50") is not None
    )
    return [
        f"task:                       {metrics['task']}",
        f"policy:                     {metrics['policy']} ({metrics.get('threads')} threads)",
        f"success:                    {metrics['success']}"
        + (f" (after {metrics['success_time_s']:.1f} s)" if metrics["success"] else ""),
        f"chunk age p50 / p95:        {age['p50']} / {age['p95']} ms (max {age['max']})",
        f"controller period jitter:   p50 {jitter['p50']} ms, p99 {jitter['p99']} ms",
        f"inference per-stage p50:    {stages or 'n/a'}",
        f"buffer underruns:           {metrics['buffer_underruns']}",
    ]


def run(args: argparse.Namespace) -> int:
    """Entry point of ``vla-edge demo``."""
    from vla_edge.core.errors import VlaEdgeError
    from vla_edge.nodes.launch_cli import run_graph

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
