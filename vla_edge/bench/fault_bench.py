"""Mild-fault benchmark: task success with a camera delay vs the fault-free run.

Closed loop in virtual time (the fault harness: inference delay, controller
with its watchdog, safety supervisor, MuJoCo), ``--episodes`` fixed initial
states of one task, once fault-free and once with every camera frame arriving
``--camera-delay-ms`` late. The acceptance of issue 7: success within
``--max-drop-points`` (10) points of the fault-free run.

    python -m vla_edge.bench.fault_bench --episodes 50 --json out/fault_bench.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from vla_edge.config.loader import load_node_params
from vla_edge.config.models import ControllerConfig, SafetyConfig
from vla_edge.config.paths import config_path
from vla_edge.faults.scenario import FaultScenario


def bench_scenario(name: str, delay_s: float, episode_s: float) -> FaultScenario:
    """Fault-free (``delay_s == 0``) or camera delay for the whole episode."""
    data: dict[str, Any] = {
        "name": name,
        "description": "fault-free" if delay_s == 0 else f"camera delay {delay_s * 1e3:.0f} ms",
        "fault": "none" if delay_s == 0 else "camera_delay",
        "start_s": 0.0,
        "params": {} if delay_s == 0 else {"delay_s": delay_s},
        "episode_s": episode_s,
        "expected": {"stop_category": "none", "task_may_succeed": True},
    }
    return FaultScenario.model_validate(data)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of the benchmark."""
    parser.add_argument(
        "--policy", default="expert", help="expert | bundled | CKPT.pt | EXPORT_DIR"
    )
    parser.add_argument("--task", default="lift_green_block")
    parser.add_argument("--episodes", type=int, default=50, help="init states 0..N-1")
    parser.add_argument("--camera-delay-ms", type=float, default=50.0)
    parser.add_argument("--inference-delay-ms", type=float, default=100.0)
    parser.add_argument("--max-drop-points", type=float, default=10.0)
    parser.add_argument("--image-size", type=int, default=None, help="expert only (default 32)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument("--quiet", action="store_true")


def run(args: argparse.Namespace) -> int:
    """Run both conditions; print and write the JSON; exit 1 if success dropped too much."""
    from vla_edge.faults.harness import FaultHarness, HarnessSettings
    from vla_edge.runners.factory import make_runner
    from vla_edge.sim.env import TabletopEnv
    from vla_edge.sim.evaluator import wilson_interval
    from vla_edge.sim.tasks import get_task

    controller_cfg = load_node_params(
        config_path("controller.yaml"), "controller_node", ControllerConfig
    )
    safety_cfg = load_node_params(config_path("safety.yaml"), "safety_node", SafetyConfig)
    task = get_task(args.task)
    if args.policy == "expert":
        side = args.image_size or 32
        env = TabletopEnv(image_height=side, image_width=side, cameras=["agentview"])
        runner = make_runner("expert", env=env)
    else:
        runner = make_runner(args.policy, threads=args.threads)
        spec = runner.spec
        env = TabletopEnv(
            image_height=spec.image_height, image_width=spec.image_width, cameras=spec.cameras
        )
    started = time.perf_counter()
    conditions: dict[str, Any] = {}
    delay_s = args.camera_delay_ms / 1e3
    for name, d in (("fault_free", 0.0), (f"camera_delay_{args.camera_delay_ms:g}ms", delay_s)):
        scenario = bench_scenario(name, d, task.budget_s)
        successes: list[bool] = []
        times: list[float] = []
        stops = 0
        for init_state_id in range(args.episodes):
            settings = HarnessSettings(
                task=task.name,
                init_state_id=init_state_id,
                inference_delay_s=args.inference_delay_ms / 1e3,
                stop_on_success=True,
                seed=args.seed,
            )
            harness = FaultHarness(env, runner, controller_cfg, safety_cfg, settings)
            trace = harness.run(scenario)
            successes.append(trace.success)
            if trace.success_time_s is not None:
                times.append(trace.success_time_s)
            stops += int(max(trace.safety_severity, default=0) > 0)
            if not args.quiet:
                print(
                    f"[{name} {init_state_id + 1}/{args.episodes}] "
                    f"{'success' if trace.success else 'failure'}",
                    file=sys.stderr,
                    flush=True,
                )
        k, n = sum(successes), len(successes)
        conditions[name] = {
            "success_rate": k / n if n else 0.0,
            "successes": k,
            "episodes": n,
            "wilson_95": list(wilson_interval(k, n)),
            "mean_success_time_s": float(np.mean(times)) if times else None,
            "episodes_with_safety_stop": stops,
        }
    runner.close()
    env.close()
    free, faulty = conditions.values()
    drop_points = (free["success_rate"] - faulty["success_rate"]) * 100.0
    result = {
        "task": task.name,
        "policy": args.policy,
        "episodes": args.episodes,
        "camera_delay_ms": args.camera_delay_ms,
        "inference_delay_ms": args.inference_delay_ms,
        "conditions": conditions,
        "success_drop_points": drop_points,
        "max_drop_points": args.max_drop_points,
        "within_bound": drop_points <= args.max_drop_points,
        "virtual_time": True,
        "wall_s": time.perf_counter() - started,
    }
    text = json.dumps(result, indent=2)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text + "\n")
    print(text)
    return 0 if result["within_bound"] else 1


def main(argv: list[str] | None = None) -> int:
    """``python -m vla_edge.bench.fault_bench``."""
    parser = argparse.ArgumentParser(prog="fault_bench", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
