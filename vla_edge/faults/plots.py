"""One PNG per scenario: joint trace with the fault window shaded, and the stop state."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from vla_edge.faults.harness import Trace
from vla_edge.faults.metrics import observed_severity


def plot_trace(trace: Trace, result: dict[str, Any], path: str | Path) -> Path:
    """Write the PNG of ``trace`` to ``path`` (matplotlib Agg); return the path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    s = trace.scenario
    fig, (ax_pos, ax_vel, ax_state) = plt.subplots(
        3, 1, figsize=(9, 7), sharex=True, gridspec_kw={"height_ratios": [3, 2, 1]}
    )
    verdict = {True: "PASS", False: "FAIL", None: "SKIPPED"}[result.get("passed")]
    fig.suptitle(f"{s.name} ({s.fault}): {verdict}")
    if trace.t_s:
        a = trace.arrays()
        t = a["t_s"]
        arm = slice(0, len(trace.joint_names) - 1)
        for i, name in enumerate(trace.joint_names[arm]):
            line = ax_pos.plot(t, a["safe"][:, i], lw=1.2, label=name)[0]
            ax_pos.plot(t, a["measured"][:, i], lw=0.6, ls="--", color=line.get_color())
        ax_pos.set_ylabel("position [rad]\n(solid: safe cmd, dashed: measured)")
        ax_pos.legend(loc="upper right", fontsize=7, ncol=3)
        v = np.vstack([np.zeros((1, a["safe"].shape[1])), np.diff(a["safe"], axis=0)]) / trace.dt_s
        for i, name in enumerate(trace.joint_names[arm]):
            ax_vel.plot(t, v[:, i], lw=1.0, label=name)
        ax_vel.set_ylabel("velocity [rad/s]")
        ax_state.step(t, observed_severity(a), where="post", color="k", lw=1.0)
        ax_state.set_yticks([-1, 0, 1, 2, 3], ["dead", "none", "cat2", "cat1", "cat0"])
        ax_state.set_ylabel("stop")
    else:
        ax_pos.text(0.5, 0.5, f"skipped: {trace.skipped}", ha="center", transform=ax_pos.transAxes)
    end_s = s.end_s if s.end_s is not None else (trace.t_s[-1] if trace.t_s else s.episode_s)
    for ax in (ax_pos, ax_vel, ax_state):
        ax.axvspan(s.start_s, end_s, color="tab:red", alpha=0.12, lw=0)
        ax.grid(alpha=0.3)
    ttd, tth = result.get("time_to_detect_ms"), result.get("time_to_halt_ms")
    if ttd is not None:
        ax_state.axvline(s.start_s + ttd / 1e3, color="tab:orange", lw=1, label="detected")
    if tth is not None:
        ax_state.axvline(s.start_s + tth / 1e3, color="tab:green", lw=1, label="halted")
    if ttd is not None or tth is not None:
        ax_state.legend(loc="upper right", fontsize=7)
    ax_state.set_xlabel("time [s] (fault window shaded)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
