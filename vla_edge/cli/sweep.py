"""``vla-edge sweep SPEC.yaml --out OUT``: a matrix of evaluations in one results store.

The spec, the matrix and what is written to ``OUT``: :mod:`vla_edge.sim.sweep`'s docstring;
this command loads the spec, picks the pool (``--workers N``, ``--ray [ADDRESS]``), runs
:func:`~vla_edge.sim.sweep.run_sweep`, writes ``OUT/sweep.json`` and prints the summary.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from vla_edge.core.errors import ConfigError
from vla_edge.sim.episodes import add_pool_arguments, pool_from_args
from vla_edge.sim.sweep import load_spec, run_sweep


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the options of ``vla-edge sweep``."""
    parser.add_argument("spec", help="the sweep's YAML (see config/sweeps/)")
    parser.add_argument("--out", required=True, type=Path, help="results directory")
    add_pool_arguments(
        parser,
        "local processes (or Ray CPUs)",
        "run the episodes as Ray tasks: on the cluster at ADDRESS, or a local instance",
    )
    parser.add_argument("--resume", action="store_true", help="continue OUT/episodes.jsonl")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    """Run the sweep; write the store, the tables, the plots and ``sweep.json``."""
    started = time.perf_counter()
    if args.workers < 1:
        raise ConfigError(f"--workers = {args.workers}: must be >= 1")
    spec = load_spec(args.spec)
    result = run_sweep(
        spec,
        args.out,
        lambda: pool_from_args(args),
        resume=args.resume,
        quiet=args.quiet,
        keep_policies=args.workers == 1 and args.ray is None,
    )
    report = {
        **result,
        "workers": args.workers,
        "wall_s": round(time.perf_counter() - started, 1),
        "command": " ".join(["vla-edge", *sys.argv[1:]]),
    }
    (args.out / "sweep.json").write_text(json.dumps(report, indent=2) + "\n")
    print((args.out / "summary.md").read_text())
    return 0
