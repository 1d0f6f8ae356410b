"""``vla-edge eval``: closed-loop evaluation of a policy on the tabletop suite."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from vla_edge.config.loader import load_node_params
from vla_edge.config.models import DEFAULT_NOISE_SCALE, ControllerConfig, SafetyConfig
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
    parser.add_argument(
        "--noise-scale",
        type=float,
        default=DEFAULT_NOISE_SCALE,
        help="std of the flow-matching start noise (1.0: as trained; default %(default)s)",
    )
    parser.add_argument(
        "--flow-steps",
        type=int,
        default=None,
        help="Euler steps K of a torch checkpoint (default: the checkpoint's; exports fix K)",
    )
    parser.add_argument("--image-size", type=int, default=None, help="square render size (px)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--controller-config", default=None, help="controller YAML")
    parser.add_argument("--safety-config", default=None, help="safety YAML")
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument("--video", default=None, help="write one MP4 per episode into this dir")
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes, each running whole tasks (results do not depend on the split)",
    )


def _configs(args: argparse.Namespace) -> tuple[ControllerConfig, SafetyConfig]:
    controller_cfg = load_node_params(
        args.controller_config or config_path("controller.yaml"),
        "controller_node",
        ControllerConfig,
    )
    safety_cfg = load_node_params(
        args.safety_config or config_path("safety.yaml"), "safety_node", SafetyConfig
    )
    return controller_cfg, safety_cfg


def _settings(args: argparse.Namespace, controller_cfg: ControllerConfig):  # noqa: ANN202
    from vla_edge.sim.evaluator import EvalSettings

    return EvalSettings(
        delay_s=args.delay_ms / 1e3,
        merge=args.merge or controller_cfg.merge,
        scheme=args.scheme,
        replan_steps=args.replan_steps,
        instructions=args.instructions,
        noise_scale=args.noise_scale,
    )


def _env_and_runner(args: argparse.Namespace):  # noqa: ANN202 - (env, Runner, size)
    """The tabletop env at the policy's image size and the runner for it."""
    from vla_edge.runners.factory import make_runner
    from vla_edge.sim.env import TabletopEnv

    if args.image_size is None and args.policy != "expert":
        runner = make_runner(args.policy, threads=args.threads, flow_steps=args.flow_steps)
        size = (runner.spec.image_height, runner.spec.image_width)
        env = TabletopEnv(image_height=size[0], image_width=size[1], cameras=runner.spec.cameras)
        return env, runner, size
    side = args.image_size or 64
    env = TabletopEnv(image_height=side, image_width=side, cameras=["agentview", "wrist"])
    runner = make_runner(args.policy, env=env, threads=args.threads, flow_steps=args.flow_steps)
    return env, runner, (side, side)


def _progress_printer(args: argparse.Namespace, total: int):  # noqa: ANN202
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

    return progress


def _task_worker(args: argparse.Namespace, task_name: str) -> dict:
    """One worker process: every episode of one task (results as plain dicts)."""
    from dataclasses import asdict

    from vla_edge.sim.evaluator import controller_config_for, run_task
    from vla_edge.sim.tasks import get_task

    controller_cfg, safety_cfg = _configs(args)
    settings = _settings(args, controller_cfg)
    env, runner, size = _env_and_runner(args)
    try:
        results = run_task(
            env,
            runner,
            get_task(task_name),
            args.episodes,
            settings,
            controller_cfg,
            safety_cfg,
            args.seed,
            Path(args.video) if args.video else None,
            _progress_printer(args, args.episodes),
        )
        spec = runner.spec
        merge = controller_config_for(
            controller_cfg, settings, spec.chunk_horizon, spec.dt_action_s
        ).merge
    finally:
        runner.close()
    return {"results": [asdict(r) for r in results], "merge": merge, "size": list(size)}


def _evaluate_in_workers(args: argparse.Namespace, names: list[str]) -> tuple[dict, list[int]]:
    """Tasks spread over ``args.workers`` spawned processes; one eval JSON dict."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from vla_edge.sim.evaluator import EpisodeResult, summarize

    controller_cfg, _ = _configs(args)
    settings = _settings(args, controller_cfg)
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=args.workers, mp_context=context) as pool:
        futures = {name: pool.submit(_task_worker, args, name) for name in names}
        outputs = {name: future.result() for name, future in futures.items()}
    by_task = {name: [EpisodeResult(**r) for r in out["results"]] for name, out in outputs.items()}
    first = outputs[names[0]]
    result = summarize(
        by_task,
        settings,
        controller_cfg,
        first["merge"],
        args.policy,
        args.suite,
        args.seed,
        args.episodes,
    )
    return result, first["size"]


def run(args: argparse.Namespace) -> int:
    """Run the evaluation and print / write the JSON."""
    from vla_edge.sim.evaluator import evaluate
    from vla_edge.sim.tasks import get_task, list_tasks

    if args.suite != "tabletop":
        print(f"unknown suite {args.suite!r}: expected 'tabletop'", file=sys.stderr)
        return 2
    if args.list_tasks:
        for name in list_tasks():
            print(name)
        return 0
    if args.workers < 1:
        print(f"--workers = {args.workers}: must be >= 1", file=sys.stderr)
        return 2
    if args.flow_steps is not None:
        from vla_edge.config.models import MAX_FLOW_STEPS
        from vla_edge.runners.factory import resolve_policy_path

        if args.policy == "expert" or not resolve_policy_path(args.policy).is_file():
            print(
                f"--flow-steps applies to a torch checkpoint; {args.policy!r} fixes its own",
                file=sys.stderr,
            )
            return 2
        if not 1 <= args.flow_steps <= MAX_FLOW_STEPS:
            bound = f"expected 1 <= K <= {MAX_FLOW_STEPS}"
            print(f"--flow-steps = {args.flow_steps}: {bound}", file=sys.stderr)
            return 2
    controller_cfg, safety_cfg = _configs(args)
    names = args.tasks or list_tasks()
    tasks = [get_task(n) for n in names]
    settings = _settings(args, controller_cfg)
    started = time.perf_counter()
    if args.workers > 1 and len(tasks) > 1:
        result, size = _evaluate_in_workers(args, names)
    else:
        env, runner, size = _env_and_runner(args)
        result = evaluate(
            env,
            lambda _env: runner,
            tasks,
            args.episodes,
            settings,
            controller_cfg,
            safety_cfg,
            policy_name=args.policy,
            suite=args.suite,
            seed=args.seed,
            video_dir=Path(args.video) if args.video else None,
            progress=_progress_printer(args, len(tasks) * args.episodes),
        )
    result["settings"]["image_size"] = list(size)
    result["settings"]["workers"] = args.workers
    result["settings"]["flow_steps"] = args.flow_steps
    result["wall_time_s"] = time.perf_counter() - started
    text = json.dumps(result, indent=2)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text + "\n")
    print(text)
    return 0
