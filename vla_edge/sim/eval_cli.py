"""``vla-edge eval``: closed-loop evaluation of a policy on the tabletop suite."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from vla_edge.config.loader import load_node_params
from vla_edge.config.models import ControllerConfig, SafetyConfig
from vla_edge.config.paths import config_path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``vla-edge eval``."""
    parser.add_argument(
        "--policy", default="expert", help="expert | bundled | CKPT.pt | EXPORT_DIR | ws://…"
    )
    parser.add_argument("--suite", default="tabletop")
    parser.add_argument(
        "--episodes", type=int, default=50, help="init states per task (ids 0..N-1)"
    )
    parser.add_argument("--tasks", nargs="*", default=None, help="subset of tasks (default: all)")
    parser.add_argument("--list-tasks", action="store_true", help="print one task name per line")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="simulated inference delay")
    parser.add_argument(
        "--merge", default=None, choices=["replace", "weighted", "ensemble", "prefix"]
    )
    parser.add_argument("--scheme", default="async", choices=["async", "sync", "lerobot"])
    parser.add_argument("--replan-steps", type=int, default=5, help="sync scheme: steps per chunk")
    parser.add_argument("--instructions", default="canonical", choices=["canonical", "paraphrase"])
    parser.add_argument("--image-size", type=int, default=None, help="square render size (px)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--controller-config", default=None, help="controller YAML")
    parser.add_argument("--safety-config", default=None, help="safety YAML")
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument("--video", default=None, help="write one MP4 per episode into this dir")
    parser.add_argument("--quiet", action="store_true")


def run(args: argparse.Namespace) -> int:
    """Run the evaluation and print / write the JSON."""
    from vla_edge.runners.factory import make_runner
    from vla_edge.sim.env import TabletopEnv
    from vla_edge.sim.evaluator import EvalSettings, evaluate
    from vla_edge.sim.tasks import get_task, list_tasks

    if args.suite != "tabletop":
        print(f"unknown suite {args.suite!r}: expected 'tabletop'", file=sys.stderr)
        return 2
    if args.list_tasks:
        for name in list_tasks():
            print(name)
        return 0
    controller_cfg = load_node_params(
        args.controller_config or config_path("controller.yaml"),
        "controller_node",
        ControllerConfig,
    )
    safety_cfg = load_node_params(
        args.safety_config or config_path("safety.yaml"), "safety_node", SafetyConfig
    )
    names = args.tasks or list_tasks()
    tasks = [get_task(n) for n in names]
    settings = EvalSettings(
        delay_s=args.delay_ms / 1e3,
        merge=args.merge or controller_cfg.merge,
        scheme=args.scheme,
        replan_steps=args.replan_steps,
        instructions=args.instructions,
    )

    def runner_for(env: TabletopEnv):  # noqa: ANN202 - the Runner protocol
        return make_runner(args.policy, env=env, threads=args.threads)

    probe = None
    if args.image_size is None and args.policy != "expert":
        probe = make_runner(args.policy, threads=args.threads)
        size = (probe.spec.image_height, probe.spec.image_width)
        cameras = list(probe.spec.cameras)
    else:
        side = args.image_size or 64
        size = (side, side)
        cameras = ["agentview", "wrist"]
    env = TabletopEnv(image_height=size[0], image_width=size[1], cameras=cameras)
    if probe is not None:
        runner_obj = probe

        def runner_for(env: TabletopEnv):  # noqa: ANN202,F811
            return runner_obj

    started = time.perf_counter()
    total = len(tasks) * args.episodes
    done = [0]

    def progress(result) -> None:  # noqa: ANN001
        done[0] += 1
        if not args.quiet:
            print(
                f"[{done[0]}/{total}] {result.task} #{result.init_state_id}: "
                f"{'success' if result.success else 'failure'} in {result.time_s:.1f}s",
                file=sys.stderr,
                flush=True,
            )

    result = evaluate(
        env,
        runner_for,
        tasks,
        args.episodes,
        settings,
        controller_cfg,
        safety_cfg,
        policy_name=args.policy,
        suite=args.suite,
        seed=args.seed,
        video_dir=Path(args.video) if args.video else None,
        progress=progress,
    )
    result["settings"]["image_size"] = list(size)
    result["wall_time_s"] = time.perf_counter() - started
    text = json.dumps(result, indent=2)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text + "\n")
    print(text)
    return 0
