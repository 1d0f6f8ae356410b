"""Run a list of fault scenarios in virtual time and collect the ``faults run`` JSON."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from vla_edge.config.models import ControllerConfig, SafetyConfig
from vla_edge.faults.harness import FaultHarness, HarnessSettings
from vla_edge.faults.metrics import score
from vla_edge.faults.scenario import FaultScenario


def summarize(results: dict[str, dict[str, Any]], mode: str) -> dict[str, Any]:
    """``{"scenarios": …, "passed": N, "failed": M, "skipped": K, "mode": …}``."""
    passed = sum(1 for r in results.values() if r.get("passed") is True)
    failed = sum(1 for r in results.values() if r.get("passed") is False)
    skipped = sum(1 for r in results.values() if r.get("passed") is None)
    return {
        "scenarios": results,
        "passed": passed,
        "failed": failed,
        "skipped": skipped,
        "mode": mode,
    }


def run_suite(
    scenarios: Sequence[FaultScenario],
    controller_config: ControllerConfig,
    safety_config: SafetyConfig,
    settings: HarnessSettings | None = None,
    image_size: int = 32,
    cameras: Sequence[str] | None = None,
    plots_dir: str | Path | None = None,
    progress: Callable[[str, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run every scenario with the scripted expert in the virtual-time harness.

    Args:
        cameras: the cameras rendered (default: the sim graph's, every camera).

    Returns:
        The ``vla-edge faults run`` JSON dict.
    """
    from vla_edge.sim.env import CAMERAS, TabletopEnv
    from vla_edge.sim.expert_runner import ExpertRunner

    cameras = list(CAMERAS if cameras is None else cameras)
    env = TabletopEnv(image_height=image_size, image_width=image_size, cameras=cameras)
    runner = ExpertRunner(
        env,
        dt_action_s=controller_config.dt_action_s,
        chunk_horizon=controller_config.chunk_horizon,
    )
    harness = FaultHarness(env, runner, controller_config, safety_config, settings)
    results: dict[str, dict[str, Any]] = {}
    try:
        for scenario in scenarios:
            started = time.perf_counter()
            trace = harness.run(scenario)
            result = score(trace, safety_config)
            result["wall_s"] = time.perf_counter() - started
            if plots_dir is not None:
                from vla_edge.faults.plots import plot_trace

                result["plot"] = str(
                    plot_trace(trace, result, Path(plots_dir) / f"{scenario.name}.png")
                )
            results[scenario.name] = result
            if progress is not None:
                progress(scenario.name, result)
    finally:
        runner.close()
        env.close()
    out = summarize(results, "virtual_time")
    out["settings"] = {
        "task": harness.settings.task,
        "init_state_id": harness.settings.init_state_id,
        "inference_delay_s": harness.settings.inference_delay_s,
        "camera_period_s": harness.settings.camera_period_s,
        "image_size": image_size,
        "cameras": cameras,
        "required_cameras": list(harness.settings.required_cameras or cameras),
        "policy": "expert",
    }
    return out
