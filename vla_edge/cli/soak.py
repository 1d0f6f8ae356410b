"""``vla-edge soak``: the sim graph for hours, episodes back to back, mild faults; a JSON and a PNG.

The soak itself is :func:`vla_edge.bench.soak.run_soak` (what it does and what it
measures: :mod:`vla_edge.bench.soak`). This command turns the options into its
settings, lets Ctrl-C or SIGTERM end it early (the JSON is still written), and
prints the summary. Exit code 0 when every goal passed, 1 when one failed, 2 on
bad options, 130 when interrupted.
"""

from __future__ import annotations

import argparse
import signal
import threading
from pathlib import Path

from vla_edge.bench.soak import (
    DEFAULT_OUT,
    FAULT_KINDS,
    SoakSettings,
    make_settings,
    parse_faults,
    run_soak,
)
from vla_edge.bench.soak_report import summary_lines
from vla_edge.demo import inference_threads
from vla_edge.nodes.supervisor import STOP_TIMEOUT_S


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``vla-edge soak``."""
    parser.add_argument("--duration", type=float, default=3600.0, help="seconds (default 3600)")
    parser.add_argument("--window-s", type=float, default=300.0, help="statistics window")
    parser.add_argument(
        "--warmup-s", type=float, default=300.0, help="memory growth is fitted after this"
    )
    parser.add_argument("--sample-s", type=float, default=5.0, help="sampling period")
    parser.add_argument(
        "--policy",
        default=None,
        help="export dir | expert | checkpoint (default: the bundled model's ExecuTorch "
        "export, made in OUT/exports/ when missing)",
    )
    parser.add_argument(
        "--quant", default="fp32", help="recipe of the default export (config/quant_recipes.yaml)"
    )
    parser.add_argument(
        "--threads", type=int, default=None, help="inference threads (default: as vla-edge demo)"
    )
    parser.add_argument(
        "--faults",
        default=",".join(FAULT_KINDS),
        help=f"comma-separated kinds of {FAULT_KINDS}, or none",
    )
    parser.add_argument(
        "--fault-every-s", type=float, default=180.0, help="mean time between faults"
    )
    parser.add_argument(
        "--switch-probability", type=float, default=0.5, help="episodes with a switch"
    )
    parser.add_argument(
        "--recovery-s", type=float, default=3.0, help="a fault's window extends this far"
    )
    parser.add_argument(
        "--episode-s", type=float, default=None, help="cap on an episode (default: its budget)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the draws")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="soak.json, soak.png, logs")


def settings_from_args(args: argparse.Namespace) -> SoakSettings:
    """The validated settings of the command line.

    Raises:
        SoakSettingsError: an option out of range or inconsistent with another.
    """
    return make_settings(
        duration_s=args.duration,
        window_s=args.window_s,
        warmup_s=args.warmup_s,
        sample_s=args.sample_s,
        fault_every_s=args.fault_every_s,
        faults=parse_faults(args.faults),
        switch_probability=args.switch_probability,
        recovery_s=args.recovery_s,
        episode_s=args.episode_s,
        seed=args.seed,
    )


def run(args: argparse.Namespace) -> int:
    """Entry point of ``vla-edge soak``."""
    settings = settings_from_args(args)
    # an explicit --threads goes through as given (run_soak refuses one below 1)
    threads = inference_threads(None) if args.threads is None else args.threads
    stop = threading.Event()
    previous = {
        sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        result = run_soak(
            settings,
            args.policy,
            threads,
            args.out,
            quant=args.quant,
            announce=lambda s: print(s, flush=True),
            stop=stop,
        )
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    for line in summary_lines(result.report):
        print(line)
    print(f"wrote {result.json_path} and {result.png_path}")
    for name, sig in result.record.stop_escalations.items():
        print(f"node {name} did not stop within {STOP_TIMEOUT_S:.0f} s of SIGINT; sent {sig}")
    if result.record.interrupted:
        return 130
    return 0 if result.report["passed"] else 1
