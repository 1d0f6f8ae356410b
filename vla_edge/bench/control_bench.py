"""``vla-edge bench control``: cost of one controller step and one safety step.

Steady state at the controller rate with a 7-D action: a chunk arrives every
``--chunk-period-s`` (0.1 s), computed from an observation ``--delay-s`` old,
and is merged with the configured strategy. Each tick times ``Controller.step`` and
``SafetySupervisor.filter`` with ``time.perf_counter_ns``; chunk arrivals
(``Controller.submit``) are timed separately.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

import vla_edge
from vla_edge.config import ControllerConfig, SafetyConfig, load_node_params
from vla_edge.control import Controller
from vla_edge.core import ActionChunk
from vla_edge.safety import SafetySupervisor

TARGET_P99_US = 200.0


def shipped_config_dir() -> Path:
    """``config/`` of the source tree, else ``<prefix>/share/vla_edge/config``."""
    source = Path(vla_edge.__file__).resolve().parents[1] / "config"
    if source.is_dir():
        return source
    return Path(sys.prefix) / "share" / "vla_edge" / "config"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``vla-edge bench control``."""
    config_dir = shipped_config_dir()
    parser.add_argument("--json", dest="json_out", type=Path, required=True, help="output file")
    parser.add_argument("--iterations", type=int, default=20000, help="control ticks to time")
    parser.add_argument("--warmup", type=int, default=500, help="untimed ticks first")
    parser.add_argument("--controller-config", type=Path, default=config_dir / "controller.yaml")
    parser.add_argument("--safety-config", type=Path, default=config_dir / "safety.yaml")
    parser.add_argument(
        "--merge", choices=["replace", "weighted", "ensemble", "prefix"], default=None
    )
    parser.add_argument("--chunk-period-s", type=float, default=0.1, help="time between chunks")
    parser.add_argument("--delay-s", type=float, default=0.05, help="inference delay (age)")


def _trajectory(times_s: np.ndarray, n_joints: int) -> np.ndarray:
    """A smooth reaching-like motion ``[len(times), n_joints]`` within the limits."""
    phase = np.linspace(0.0, 1.5, n_joints)
    out = 0.4 * np.sin(0.8 * times_s[:, None] + phase[None, :])
    out[:, -1] = 0.02 + 0.01 * np.sin(0.5 * times_s)
    return out


def _percentiles(samples_ns: list[int]) -> dict[str, float]:
    us = np.asarray(samples_ns, dtype=np.float64) / 1000.0
    return {
        "p50": float(np.percentile(us, 50)),
        "p90": float(np.percentile(us, 90)),
        "p99": float(np.percentile(us, 99)),
        "max": float(us.max()),
        "mean": float(us.mean()),
    }


def measure(
    controller_config: ControllerConfig,
    safety_config: SafetyConfig,
    iterations: int,
    warmup: int,
    chunk_period_s: float,
    delay_s: float,
) -> dict[str, object]:
    """Run the steady-state loop and return the timing record."""
    names = tuple(controller_config.joint_names)
    n = len(names)
    period_s = 1.0 / controller_config.rate_hz
    horizon = controller_config.chunk_horizon
    dt_s = controller_config.dt_action_s
    initial = _trajectory(np.zeros(1), n)[0]
    controller = Controller(controller_config, initial)
    supervisor = SafetySupervisor(safety_config, initial)
    ticks_per_chunk = max(1, round(chunk_period_s / period_s))
    controller_ns: list[int] = []
    safety_ns: list[int] = []
    total_ns: list[int] = []
    submit_ns: list[int] = []
    controller_cpu_ns: list[int] = []
    safety_cpu_ns: list[int] = []
    total_cpu_ns: list[int] = []
    clock = time.perf_counter_ns
    cpu_clock = time.thread_time_ns
    for k in range(warmup + iterations):
        now_s = k * period_s
        if k % ticks_per_chunk == 0:
            t_obs_s = max(0.0, now_s - delay_s)
            chunk = ActionChunk(
                t_obs_s, dt_s, names, _trajectory(t_obs_s + dt_s * np.arange(horizon), n)
            )
            t0 = clock()
            controller.submit(chunk, now_s)
            if k >= warmup:
                submit_ns.append(clock() - t0)
        supervisor.on_joint_state(supervisor.limiter.positions, now_s)
        c0 = cpu_clock()
        t0 = clock()
        command = controller.step(now_s)
        t1 = clock()
        c1 = cpu_clock()
        supervisor.filter(command, now_s)
        t2 = clock()
        c2 = cpu_clock()
        if k >= warmup:
            controller_ns.append(t1 - t0)
            safety_ns.append(t2 - t1)
            total_ns.append(t2 - t0)
            controller_cpu_ns.append(c1 - c0)
            safety_cpu_ns.append(c2 - c1)
            total_cpu_ns.append(c2 - c0)
    total = _percentiles(total_ns)
    return {
        "controller_step_us": _percentiles(controller_ns),
        "safety_step_us": _percentiles(safety_ns),
        "total_step_us": total,
        # CPU time of this thread: the same steps without time lost to preemption.
        "controller_step_cpu_us": _percentiles(controller_cpu_ns),
        "safety_step_cpu_us": _percentiles(safety_cpu_ns),
        "total_step_cpu_us": _percentiles(total_cpu_ns),
        "controller_submit_us": _percentiles(submit_ns),
        "target_total_p99_us": TARGET_P99_US,
        "meets_target": total["p99"] < TARGET_P99_US,
        "iterations": iterations,
        "action_dim": n,
        "rate_hz": controller_config.rate_hz,
        "merge": controller_config.merge,
        "interpolation": controller_config.interpolation,
        "chunk_period_s": chunk_period_s,
        "delay_s": delay_s,
        "safety_state": supervisor.state.value,
        "safety_limited_ticks": supervisor.counters["limited_ticks"],
        "chunks_rejected": controller.counters["rejected"],
    }


def machine_info() -> dict[str, object]:
    """The basics of the machine the numbers come from."""
    return {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "load_average_1_5_15": list(os.getloadavg()),
    }


def run(args: argparse.Namespace) -> int:
    """Run the benchmark and write the JSON."""
    controller_config = load_node_params(
        args.controller_config, "controller_node", ControllerConfig
    )
    if args.merge is not None:
        controller_config = controller_config.model_copy(update={"merge": args.merge})
    safety_config = load_node_params(args.safety_config, "safety_node", SafetyConfig)
    result = measure(
        controller_config,
        safety_config,
        args.iterations,
        args.warmup,
        args.chunk_period_s,
        args.delay_s,
    )
    result["machine"] = machine_info()
    args.json_out.parent.mkdir(parents=True, exist_ok=True)
    args.json_out.write_text(json.dumps(result, indent=2) + "\n")
    total = result["total_step_us"]
    cpu = result["total_step_cpu_us"]
    print(
        f"controller+safety step: p50 {total['p50']:.1f} us, p99 {total['p99']:.1f} us wall; "
        f"p50 {cpu['p50']:.1f} us, p99 {cpu['p99']:.1f} us CPU "
        f"(target p99 < {TARGET_P99_US:.0f} us) -> {args.json_out}"
    )
    return 0
