"""``vla-edge faults``: run the fault-injection suite and write the JSON (and PNGs).

The suite runs in virtual time (:func:`vla_edge.faults.suite.run_suite`) or, with
``--ros``, on the real graph (:func:`vla_edge.nodes.fault_suite.run_ros_suite`, imported
only then); :mod:`vla_edge.faults` stays ROS-free.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from vla_edge.config.loader import load_node_params
from vla_edge.config.models import ControllerConfig, InferenceConfig, SafetyConfig
from vla_edge.config.paths import config_path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``vla-edge faults run`` and ``vla-edge faults list``."""
    sub = parser.add_subparsers(dest="faults_command", required=True)
    run_p = sub.add_parser("run", help="run a suite of fault scenarios")
    run_p.add_argument("--suite", default=None, help="suite in config/faults/suites.yaml")
    run_p.add_argument("--scenarios", nargs="*", default=None, help="run exactly these scenarios")
    run_p.add_argument(
        "--ros", action="store_true", help="run the ROS-level subset with real processes"
    )
    run_p.add_argument("--json", required=True, help="write the results here")
    run_p.add_argument("--plots", default=None, help="write one PNG per scenario into this dir")
    run_p.add_argument("--scenario-dir", default=None, help="directory of scenario YAMLs")
    run_p.add_argument("--task", default="lift_green_block")
    run_p.add_argument("--init-state", type=int, default=0)
    run_p.add_argument("--image-size", type=int, default=32, help="square render size (px)")
    run_p.add_argument("--controller-config", default=None, help="controller YAML")
    run_p.add_argument("--safety-config", default=None, help="safety YAML")
    run_p.add_argument("--quiet", action="store_true")
    list_p = sub.add_parser("list", help="list scenarios and suites")
    list_p.add_argument("--scenario-dir", default=None)


def _line(name: str, r: dict[str, Any]) -> str:
    verdict = {True: "PASS", False: "FAIL", None: "SKIP"}[r.get("passed")]
    ttd, tth = r.get("time_to_detect_ms"), r.get("time_to_halt_ms")
    text = (
        f"{verdict} {name:24s} detect={'-' if ttd is None else f'{ttd:.0f}ms'} "
        f"halt={'-' if tth is None else f'{tth:.0f}ms'} violations={r.get('limit_violations')} "
        f"recovered={r.get('recovered')}"
    )
    if r.get("failures"):
        text += " | " + "; ".join(r["failures"])
    if r.get("skipped"):
        text += f" | skipped: {r['skipped']}"
    return text


def run(args: argparse.Namespace) -> int:
    """Run the suite; exit 0 when nothing failed, 1 otherwise."""
    from vla_edge.faults.scenario import load_all, load_suite, suite_names

    if args.faults_command == "list":
        for name, s in load_all(args.scenario_dir).items():
            print(f"{name:24s} {s.fault:20s} {'ros ' if s.ros else ''}{s.description}")
        for suite, members in suite_names(args.scenario_dir).items():
            print(f"suite {suite}: {' '.join(members)}")
        return 0

    suite = args.suite or ("ros" if args.ros else "default")
    scenarios = load_suite(suite, args.scenarios, args.scenario_dir)
    controller_cfg = load_node_params(
        args.controller_config or config_path("controller.yaml"),
        "controller_node",
        ControllerConfig,
    )
    safety_path = args.safety_config or config_path("safety.yaml")
    safety_cfg = load_node_params(safety_path, "safety_node", SafetyConfig)

    def progress(name: str, result: dict[str, Any]) -> None:
        if not args.quiet:
            print(_line(name, result), file=sys.stderr, flush=True)

    if args.ros:
        from vla_edge.nodes.fault_suite import run_ros_suite

        result = run_ros_suite(
            scenarios,
            safety_cfg,
            task=args.task,
            plots_dir=args.plots,
            progress=progress,
        )
    else:
        from vla_edge.faults.harness import HarnessSettings
        from vla_edge.faults.suite import run_suite

        result = run_suite(
            scenarios,
            controller_cfg,
            safety_cfg,
            HarnessSettings(
                task=args.task,
                init_state_id=args.init_state,
                inference=load_node_params(
                    config_path("inference.yaml"), "inference_node", InferenceConfig
                ),
            ),
            image_size=args.image_size,
            plots_dir=args.plots,
            progress=progress,
        )
    result["suite"] = suite
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(
        f"{result['passed']} passed, {result['failed']} failed, {result['skipped']} skipped "
        f"-> {out}",
        file=sys.stderr,
    )
    return 0 if result["failed"] == 0 else 1
