"""``vla-edge train``: fit the policy to recorded demonstrations.

``vla-edge train --data DIR --out CKPT [--config YAML [--stage NAME]] [--steps N] [--resume]``;
the training is :func:`vla_edge.archs.bundled.train.train` (what it does: that module's docstring).
"""

from __future__ import annotations

import argparse

from vla_edge.archs.bundled.config import TrainFileConfig, load_train_file
from vla_edge.archs.bundled.train import train
from vla_edge.core.errors import ConfigError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``vla-edge train``."""
    parser.add_argument("--data", required=True, help="HDF5 file or folder of demonstrations")
    parser.add_argument("--out", required=True, help="checkpoint file to write (.pt)")
    parser.add_argument("--config", help="training YAML with 'model:' and 'train:' sections")
    parser.add_argument(
        "--stage", help="the stage of a recipe YAML (its 'stages:' entry overrides 'train:')"
    )
    parser.add_argument("--steps", type=int, help="override train.steps")
    parser.add_argument("--resume", action="store_true", help="continue from --out if it exists")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--init-from", help="start from this checkpoint's weights (fresh optimizer and schedule)"
    )


def run(args: argparse.Namespace) -> int:
    """Entry point of ``vla-edge train``."""
    if args.stage is not None and not args.config:
        raise ConfigError(f"--stage {args.stage} needs --config RECIPE.yaml")
    file_cfg = load_train_file(args.config, args.stage) if args.config else TrainFileConfig()
    if args.steps is not None:
        file_cfg.train.steps = args.steps
    summary = train(
        args.data,
        args.out,
        file_cfg,
        resume=args.resume,
        progress=not args.no_progress,
        init_from=args.init_from,
    )
    counts = summary["parameter_counts"]
    print(
        f"wrote {summary['checkpoint']} after {summary['steps']} steps in "
        f"{summary['wall_time_s']:.0f} s; parameters "
        + ", ".join(f"{k} {v}" for k, v in counts.items())
    )
    return 0
