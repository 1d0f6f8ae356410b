"""The ``vla-edge`` command.

Each subcommand lives in its own module exposing ``add_arguments(parser)`` and
``run(args) -> int`` (``vla_edge/cli/<command>.py``: argument parsing, printing and
wiring; the logic it calls stays in its layer); this file only wires them together and
imports a module when its subcommand is used, so ``vla-edge launch`` never pays for torch.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module, help)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("vla_edge.cli.demo", "closed-loop demo with the bundled model"),
    "collect": ("vla_edge.cli.collect", "record expert demonstrations (HDF5)"),
    "eval": ("vla_edge.cli.eval", "closed-loop evaluation, in virtual time or through the graph"),
    "sweep": ("vla_edge.cli.sweep", "a matrix of evaluations, locally or on Ray"),
    "train": ("vla_edge.cli.train", "train the VLA policy"),
    "import": (
        "vla_edge.cli.import_policy",
        "import a π0 / π0.5 / SmolVLA checkpoint as a policy directory",
    ),
    "export": (
        "vla_edge.cli.export",
        "export a checkpoint or policy directory to ONNX / ExecuTorch / torch",
    ),
    "launch": ("vla_edge.cli.launch", "start the ROS 2 graph (rclpy from PyPI)"),
    "faults": ("vla_edge.cli.faults", "run the fault-injection suite"),
    "soak": (
        "vla_edge.cli.soak",
        "hours of the sim graph: episodes, instruction switches, mild faults; memory, jitter",
    ),
    "serve": ("vla_edge.cli.serve", "serve a policy over the openpi protocol"),
}

BENCHES: dict[str, tuple[str, str]] = {
    "control": ("vla_edge.bench.control_bench", "controller + safety step cost"),
    "sim": ("vla_edge.bench.sim_bench", "env step + render cost"),
    "parity": ("vla_edge.bench.parity", "backend parity against the torch reference"),
    "latency": ("vla_edge.bench.latency", "per-stage and end-to-end latency per backend"),
    "faults": ("vla_edge.bench.fault_bench", "task success under a mild camera delay"),
    "loop": ("vla_edge.bench.arch_loop", "a random-weight imported model in the closed loop"),
    "quant": ("vla_edge.bench.quant_bench", "quantisation sensitivity per stage and layer group"),
    "fleet": ("vla_edge.bench.fleet_bench", "the same episodes on local processes and on Ray"),
    "upstream": (
        "vla_edge.bench.upstream",
        "our import against upstream's own code (--source PATH)",
    ),
}


def _add_lazy(sub: argparse._SubParsersAction, name: str, module: str, help_text: str) -> None:
    parser = sub.add_parser(name, help=help_text, description=help_text)
    parser.set_defaults(_module=module)
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("vla_edge"):
            parser.set_defaults(_missing=f"'{name}' is not available: {exc}")
            return
        raise
    mod.add_arguments(parser)


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    """Build the parser, importing only the module of the subcommand in ``argv``."""
    parser = argparse.ArgumentParser(prog="vla-edge", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    wanted = argv[0] if argv else None
    for name, (module, help_text) in COMMANDS.items():
        if name == wanted:
            _add_lazy(sub, name, module, help_text)
        else:
            sub.add_parser(name, help=help_text)
    bench = sub.add_parser("bench", help="benchmarks writing JSON")
    bench_sub = bench.add_subparsers(dest="bench", required=True)
    wanted_bench = argv[1] if wanted == "bench" and len(argv) > 1 else None
    for name, (module, help_text) in BENCHES.items():
        if name == wanted_bench:
            _add_lazy(bench_sub, name, module, help_text)
        else:
            bench_sub.add_parser(name, help=help_text)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``vla-edge``.

    Run as the command (``argv`` from ``sys.argv``), a named error of the
    package (:class:`~vla_edge.core.errors.VlaEdgeError`: a bad option, file,
    checkpoint or export) is one line on stderr and exit code 2, not a
    traceback; called with ``argv`` (tests, scripts) it propagates.
    """
    as_command = argv is None
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    missing = getattr(args, "_missing", None)
    if missing:
        print(missing, file=sys.stderr)
        return 2
    module = importlib.import_module(args._module)
    if not as_command:
        return int(module.run(args) or 0)
    from vla_edge.core.errors import VlaEdgeError

    try:
        return int(module.run(args) or 0)
    except VlaEdgeError as exc:
        print(f"vla-edge {argv[0]}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
