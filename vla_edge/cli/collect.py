"""``vla-edge collect``: record successful scripted-expert episodes in HDF5.

``vla-edge collect --out DIR --episodes-per-task N [--tasks ...] [--recover-with P]
[--perturb S]`` records with :func:`vla_edge.sim.collect.collect` (the layout and the
options: its module docstring); ``--add-targets DIR`` stores the training probes'
targets in files recorded before they were part of the layout
(:func:`vla_edge.sim.dataset.add_targets`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from vla_edge.core.errors import ConfigError, DatasetError, UnknownTaskError
from vla_edge.sim.collect import HANDOVER_RANGE_S, collect
from vla_edge.sim.dataset import add_targets
from vla_edge.sim.tasks import SUITE, get_task, list_tasks


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``vla-edge collect``."""
    parser.add_argument("--suite", default=SUITE, choices=[SUITE], help="task suite")
    parser.add_argument(
        "--episodes-per-task", type=int, default=None, help="demos per task (required)"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="output folder (one HDF5 per task; required)"
    )
    parser.add_argument("--tasks", nargs="+", default=None, help="subset of tasks (default: all)")
    parser.add_argument("--image-size", type=int, default=64, help="square image size (pixels)")
    parser.add_argument("--seed", type=int, default=0, help="selects the training init states")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument(
        "--recover-with",
        default=None,
        metavar="POLICY",
        help="record recovery episodes: this policy (bundled | CKPT.pt | EXPORT_DIR) drives "
        "first, the expert takes over and is recorded",
    )
    parser.add_argument(
        "--handover-s",
        type=float,
        nargs=2,
        default=list(HANDOVER_RANGE_S),
        metavar=("LOW", "HIGH"),
        help="recovery episodes: range of the policy's share (s), drawn uniformly",
    )
    parser.add_argument("--threads", type=int, default=1, help="policy inference threads")
    parser.add_argument(
        "--perturb",
        type=float,
        default=0.0,
        metavar="SCALE",
        help="execute expert demonstrations with smooth joint noise of this scale "
        "(DART-style; the recorded actions stay the expert's; 0: off)",
    )
    parser.add_argument(
        "--add-targets",
        type=Path,
        default=None,
        metavar="DIR",
        help="record nothing: store the training probes' targets in the existing HDF5 "
        "files under DIR (or one file), in place, computed from their recorded init "
        "states or hand-over layouts (for files collected before targets were stored)",
    )


def _run_add_targets(args: argparse.Namespace) -> int:
    """``vla-edge collect --add-targets DIR``."""
    given = [
        option
        for option, value in (("--out", args.out), ("--episodes-per-task", args.episodes_per_task))
        if value is not None
    ]
    if given:
        raise SystemExit(f"--add-targets records nothing: drop {' and '.join(given)}")
    try:
        done = add_targets(args.add_targets)
    except DatasetError as exc:
        raise SystemExit(str(exc)) from None
    for path, count in done.items():
        print(f"{path}: probe targets stored in {count} episodes")
    return 0


def run(args: argparse.Namespace) -> int:
    """Entry point of ``vla-edge collect``."""
    if args.add_targets is not None:
        return _run_add_targets(args)
    for option, value in (("--episodes-per-task", args.episodes_per_task), ("--out", args.out)):
        if value is None:
            raise SystemExit(f"{option} is required (or --add-targets DIR)")
    if args.episodes_per_task < 1:
        raise SystemExit(f"--episodes-per-task = {args.episodes_per_task}: must be >= 1")
    if not 8 <= args.image_size <= 640:
        raise SystemExit(f"--image-size = {args.image_size}: must be in [8, 640]")
    tasks = args.tasks or list_tasks()
    try:
        for name in tasks:
            get_task(name)
    except UnknownTaskError as exc:
        raise SystemExit(str(exc)) from None
    try:
        stats = collect(
            args.out,
            tasks,
            args.episodes_per_task,
            args.image_size,
            args.seed,
            progress=not args.no_progress,
            recover_with=args.recover_with,
            handover_range_s=(args.handover_s[0], args.handover_s[1]),
            threads=args.threads,
            perturb_scale=args.perturb,
        )
    except ConfigError as exc:
        raise SystemExit(str(exc)) from None
    for name, row in stats.items():
        print(
            f"{name}: {int(row['successes'])}/{int(row['attempts'])} successful, "
            f"{row['mean_wall_s']:.1f} s per episode"
        )
    short = [n for n, r in stats.items() if r["successes"] < args.episodes_per_task]
    return 1 if short else 0
