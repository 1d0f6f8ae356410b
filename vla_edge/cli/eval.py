"""``vla-edge eval``: closed-loop evaluation of a policy on the tabletop suite.

In virtual time (the default: :mod:`vla_edge.sim.episodes` runs the episodes through the
controller and safety cores), through the real ROS 2 graph in real time (``--graph``:
:mod:`vla_edge.bench.graph_eval`), or two results side by side (``--compare A B``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from vla_edge.config.models import DEFAULT_NOISE_SCALE
from vla_edge.core.errors import ConfigError, VlaEdgeError
from vla_edge.sim.episodes import (
    Episode,
    EvalJob,
    ResultsStore,
    add_pool_arguments,
    check_policies,
    open_store,
    pool_from_args,
    run_episodes,
    summarize_records,
)
from vla_edge.sim.evaluator import EvalSettings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``vla-edge eval``."""
    parser.add_argument(
        "--policy", default="expert", help="expert | bundled | CKPT.pt | EXPORT_DIR | ws://…"
    )
    parser.add_argument(
        "--suite",
        default="tabletop",
        choices=["tabletop", "tabletop_long", "tabletop_switch"],
        help="single tasks, long-horizon sequences, or instruction switches",
    )
    parser.add_argument(
        "--episodes", type=int, default=50, help="init states per task (ids 0..N-1)"
    )
    parser.add_argument("--tasks", nargs="*", default=None, help="subset of tasks (default: all)")
    parser.add_argument("--list-tasks", action="store_true", help="print one task name per line")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="simulated inference delay")
    parser.add_argument(
        "--max-chunk-age-s",
        type=float,
        default=None,
        help="override the controller's max_chunk_age_s (recorded in the JSON); default: the "
        "configured bound, so a longer delay makes every chunk stale, as on the robot",
    )
    parser.add_argument(
        "--merge", default=None, choices=["replace", "weighted", "ensemble", "prefix"]
    )
    parser.add_argument("--scheme", default="async", choices=["async", "sync", "lerobot"])
    parser.add_argument("--replan-steps", type=int, default=5, help="sync scheme: steps per chunk")
    parser.add_argument("--instructions", default="canonical", choices=["canonical", "paraphrase"])
    parser.add_argument(
        "--sequencer",
        action="store_true",
        help="long-horizon tasks: one sub-task's instruction at a time, the next when it succeeds",
    )
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
    parser.add_argument(
        "--device",
        default="cpu",
        help="where a torch checkpoint or a torch export runs: cpu, cuda or cuda:N "
        "(bfloat16 weights and CUDA graphs on a GPU)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--controller-config", default=None, help="controller YAML")
    parser.add_argument("--safety-config", default=None, help="safety YAML")
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument("--video", default=None, help="write one MP4 per episode into this dir")
    parser.add_argument("--quiet", action="store_true")
    add_pool_arguments(
        parser,
        "processes running the episodes (the CPUs of a local Ray instance); results "
        "do not depend on the split",
        "run each episode as a Ray task: on the cluster at ADDRESS ('auto', host:port, "
        "ray://...) or, without one, on a local instance of --workers CPUs",
    )
    parser.add_argument(
        "--store",
        default=None,
        help="append each finished episode here (JSON lines; default: the --json path with "
        ".episodes.jsonl)",
    )
    parser.add_argument(
        "--resume", action="store_true", help="skip the episodes the store already holds"
    )
    parser.add_argument(
        "--graph",
        action="store_true",
        help="run the same episodes through the real ROS 2 graph (vla-edge launch's processes, "
        "real time, DDS), homing the arm between them; the JSON adds the graph's figures",
    )
    parser.add_argument(
        "--log-dir",
        type=Path,
        default=Path("out/eval_graph/logs"),
        help="with --graph: each node's log",
    )
    parser.add_argument(
        "--compare",
        nargs=2,
        metavar=("A.json[,A2.json...]", "B.json[,B2.json...]"),
        default=None,
        help="print two evaluation JSONs (virtual time or --graph) side by side per task, "
        "with Wilson intervals and B's rate minus A's with its 95 %% interval; a side of "
        "several comma-separated JSONs (runs of the same episodes) is pooled; runs nothing",
    )


def job_from_args(args: argparse.Namespace) -> EvalJob:
    """The evaluation configuration the options describe (validated)."""
    merge = args.merge
    if merge is None:
        merge = (
            EvalJob(policy=args.policy, controller_config=args.controller_config).configs()[0].merge
        )
    job = EvalJob(
        policy=args.policy,
        settings=EvalSettings(
            delay_s=args.delay_ms / 1e3,
            merge=merge,
            scheme=args.scheme,
            replan_steps=args.replan_steps,
            instructions=args.instructions,
            noise_scale=args.noise_scale,
            sequencer=args.sequencer,
            max_chunk_age_s=args.max_chunk_age_s,
        ),
        suite=args.suite,
        seed=args.seed,
        image_size=args.image_size,
        flow_steps=args.flow_steps,
        threads=args.threads,
        device=args.device,
        controller_config=args.controller_config,
        safety_config=args.safety_config,
    )
    job.configs()
    return job


def store_path(args: argparse.Namespace) -> Path | None:
    """``--store``, else the JSON's name with ``.episodes.jsonl``, else none."""
    if args.store:
        return Path(args.store)
    if args.json:
        return Path(args.json).with_suffix(".episodes.jsonl")
    return None


def run(args: argparse.Namespace) -> int:
    """Run the evaluation and print / write the JSON."""
    from vla_edge.sim.tasks import check_task, list_tasks

    if args.compare:
        return compare_files(*args.compare)
    if args.list_tasks:
        for name in list_tasks(args.suite):
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
    job = job_from_args(args)
    names = args.tasks or list_tasks(args.suite)
    for name in names:
        check_task(args.suite, name, 0)
    if args.graph:
        return run_graph(args, job, names)
    path = store_path(args)
    if args.resume and path is None:
        raise ConfigError("--resume needs the store: pass --store or --json")
    if args.video and args.ray is not None:
        raise ConfigError("--video writes where each episode runs: not with --ray")
    store = open_store(path, args.resume) if path else ResultsStore(None)
    # a bad policy is a named error before any episode runs
    check_policies([job], keep=args.workers == 1 and args.ray is None)
    pool = pool_from_args(args)
    episodes = [Episode(job, name, i) for name in names for i in range(args.episodes)]
    started = time.perf_counter()
    try:
        records = run_episodes(episodes, store, pool, video_dir=args.video, quiet=args.quiet)
    except VlaEdgeError:
        if path is not None:
            print(f"vla-edge eval: {len(store)} episodes kept in {path}", file=sys.stderr)
        raise
    finally:
        pool.close()
    result = summarize_records(job, names, args.episodes, records)
    result["settings"]["pool"] = pool.name
    result["settings"]["store"] = str(path) if path else None
    result["settings"]["workers"] = args.workers
    result["wall_time_s"] = time.perf_counter() - started
    write_result(args, result)
    return 0


def write_result(args: argparse.Namespace, result: dict[str, Any]) -> None:
    """Print the JSON and write it to ``--json``."""
    text = json.dumps(result, indent=2)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text + "\n")
    print(text)


def run_graph(args: argparse.Namespace, job: EvalJob, names: list[str]) -> int:
    """``--graph``: the episodes through the real graph (see :mod:`vla_edge.bench.graph_eval`)."""
    from vla_edge.bench.graph_eval import run_graph_eval

    for flag, value in (("--video", args.video), ("--ray", args.ray), ("--resume", args.resume)):
        if value:
            raise ConfigError(f"{flag} is for virtual time; --graph runs one graph in real time")
    started = time.perf_counter()
    announce = (lambda _: None) if args.quiet else (lambda line: print(line, flush=True))
    result = run_graph_eval(job, names, args.episodes, args.log_dir, announce=announce)
    result["wall_time_s"] = time.perf_counter() - started
    write_result(args, result)
    return 0 if result["complete"] else 1


def compare_files(side_a: str, side_b: str) -> int:
    """``--compare``: two sides side by side per task (a Markdown table).

    A side is one evaluation JSON, or several separated by commas, pooled.
    """
    from vla_edge.bench.graph_eval import compare, compare_table, pool

    sides, labels = [], []
    for side in (side_a, side_b):
        paths = [p for p in side.split(",") if p]
        if not paths:
            raise ConfigError(f"--compare {side!r}: no evaluation JSON named")
        runs = [_read_eval(path) for path in paths]
        sides.append(runs[0] if len(runs) == 1 else pool(runs))
        labels.append(_label(runs, paths))
    print(compare_table(compare(*sides), *labels))
    return 0


def _read_eval(path: str) -> dict[str, Any]:
    try:
        run = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--compare {path}: not an evaluation JSON ({exc})") from exc
    if not isinstance(run, dict) or "tasks" not in run:
        raise ConfigError(f"--compare {path}: not an evaluation JSON (no 'tasks')")
    return run


def _label(runs: list[dict[str, Any]], paths: list[str]) -> str:
    kinds = {run.get("settings", {}).get("virtual_time", True) for run in runs}
    kind = "mixed" if len(kinds) > 1 else ("virtual time" if kinds.pop() else "graph")
    if len(paths) == 1:
        return f"{Path(paths[0]).name} ({kind})"
    return f"{len(paths)} runs pooled ({kind})"
