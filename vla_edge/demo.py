"""What ``vla-edge demo`` (:mod:`vla_edge.cli.demo`) chooses, plots and reports.

The policy it runs (:func:`choose_policy`: the bundled model, else the scripted expert
with the reason), the inference threads (:func:`inference_threads`), the joints plot
(:func:`plot_joints`: commanded (safe) vs measured joints with chunk arrivals marked) and
the printed report (:func:`summary_lines`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

DEFAULT_DURATION_S = 90.0
DEFAULT_OUT = Path("out/demo")


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
