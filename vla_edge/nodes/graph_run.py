"""One run of the graph: start its processes, watch them, stop them, report the metrics.

:func:`run_graph` is what ``vla-edge launch sim|hil`` and ``vla-edge demo`` run:
the node processes of :class:`~vla_edge.nodes.supervisor.GraphProcesses`, watched
by a :class:`~vla_edge.nodes.monitor.Monitor` until a duration, the task's
success (with ``stop_on_success``), a node's exit or Ctrl-C, then stopped
cleanly. Its metrics (:func:`collect_metrics`, the ``--json`` of ``vla-edge
launch``) come from the nodes' ``/diagnostics``::

    {"task", "success", "controller_period_jitter_ms": {"p50", "p99"},
     "chunk_age_ms": {"p50", "p95", "max"}, "max_chunk_age_s", "buffer_underruns",
     "rss_mb": {NODE: {"start", "end", "peak"}}, ...}

``peak`` is the largest resident size the node's processes reached over the run (the
kernel's ``VmHWM``, summed over the node's process and its children).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from vla_edge.config.loader import load_node_params
from vla_edge.config.models import ControllerConfig, SimConfig
from vla_edge.nodes.graph import graph, policy_parameters, sim_parameters
from vla_edge.nodes.monitor import Monitor
from vla_edge.nodes.supervisor import STOP_TIMEOUT_S, GraphProcesses
from vla_edge.sim.tasks import check_task, suite_of

# log lines shown for a node that needed more than SIGINT: its threads' stacks fit
STOP_LOG_LINES = 120


def sim_task(profile: str, task: str | None) -> str | None:
    """The task the sim of ``profile`` resets to: ``task``, else ``config/sim.yaml``'s.

    Checked against the suite with the sim's initial state before any process
    starts; a profile without a sim keeps ``task`` as given (metrics only).

    Raises:
        UnknownTaskError: the task is not in the suite.
        InitStateOutOfRangeError: the sim's ``init_state_id`` is out of range.
        ConfigError: the sim's parameter file or its ``suite`` is invalid.
    """
    if profile != "sim":
        return task
    sim = load_node_params(graph("sim")[0].params_path(), "sim_node", SimConfig)
    if task is None:
        check_task(sim.suite, sim.task, sim.init_state_id)
        return sim.task
    check_task(suite_of(task), task, sim.init_state_id)
    return task


def overrides_for(
    profile: str,
    task: str | None,
    policy: str | None,
    threads: int | None = None,
    sequencer: bool = False,
    device: str | None = None,
) -> dict[str, dict[str, Any]]:
    """Parameter overrides implied by the options.

    ``--task`` sets the sim's task and its suite, ``--sequencer`` the sim's
    sequencer, ``--policy``, ``--threads`` and ``--device`` the inference node's.
    """
    overrides: dict[str, dict[str, Any]] = {}
    names = {spec.name for spec in graph(profile)}
    sim = sim_parameters(task, sequencer)
    if "sim_node" in names and sim:
        overrides["sim_node"] = sim
    if "inference_node" in names:
        inference: dict[str, Any] = policy_parameters(policy) if policy else {}
        if threads is not None:
            inference["threads"] = int(threads)
        if device is not None:
            inference["device"] = str(device)
        if inference:
            overrides["inference_node"] = inference
    return overrides


def _float(values: dict[str, str], key: str) -> float | None:
    try:
        return float(values[key])
    except (KeyError, ValueError):
        return None


def collect_metrics(
    monitor: Monitor,
    task: str | None,
    max_chunk_age_s: float,
    rss_start: dict[str, float],
    rss_end: dict[str, float],
    rss_peak: dict[str, float] | None = None,
) -> dict[str, Any]:
    """The output fields of ``--json`` from the latest diagnostics of each node."""
    ctrl = monitor.status("vla_edge/controller")
    infer = monitor.status("vla_edge/inference")
    safety = monitor.status("vla_edge/safety")
    stages = sorted({k.split(".")[1] for k in infer if k.startswith("stage_ms.")})
    rss = {
        name: {
            "start": rss_start.get(name),
            "end": rss_end.get(name),
            "peak": (rss_peak or {}).get(name),
        }
        for name in sorted(set(rss_start) | set(rss_end))
    }
    growth = {
        name: (v["end"] / v["start"] - 1.0) * 100.0
        for name, v in rss.items()
        if v["start"] and v["end"]
    }
    underruns = _float(ctrl, "buffer_underruns")
    return {
        "task": task,
        "success": bool(monitor.success_seen),
        "success_time_s": monitor.success_time_s,
        "controller_period_jitter_ms": {
            "p50": _float(ctrl, "period_jitter_ms_p50"),
            "p99": _float(ctrl, "period_jitter_ms_p99"),
            "max": _float(ctrl, "period_jitter_ms_max"),
        },
        "controller_period_ms": {
            "mean": _float(ctrl, "period_ms_mean"),
            "ticks": _float(ctrl, "period_ms_count"),
        },
        "chunk_age_ms": {
            "p50": _float(ctrl, "chunk_age_ms_p50"),
            "p95": _float(ctrl, "chunk_age_ms_p95"),
            "max": _float(ctrl, "chunk_age_ms_max"),
            "count": _float(ctrl, "chunk_age_ms_count"),
        },
        "max_chunk_age_s": max_chunk_age_s,
        "buffer_underruns": int(underruns) if underruns is not None else None,
        "chunks_accepted": _float(ctrl, "accepted"),
        "chunks_rejected": _float(ctrl, "rejected"),
        "chunks_rejected_stale": _float(ctrl, "rejected_stale"),
        "inference_stage_ms": {
            stage: {
                "p50": _float(infer, f"stage_ms.{stage}.p50"),
                "p95": _float(infer, f"stage_ms.{stage}.p95"),
            }
            for stage in stages
        },
        "safety": {
            "state": safety.get("state"),
            "reasons": safety.get("reasons"),
            "rejected_out_of_limits": _float(safety, "rejected_out_of_limits"),
            "rejected": _float(safety, "rejected"),
            "brake_ticks": _float(safety, "brake_ticks"),
            "limited_ticks": _float(safety, "limited_ticks"),
        },
        "rss_mb": rss,
        "rss_growth_pct": growth,
    }


def run_graph(
    profile: str,
    duration_s: float,
    task: str | None = None,
    policy: str | None = None,
    threads: int | None = None,
    stop_on_success: bool = False,
    settle_s: float = 1.0,
    record: bool = False,
    log_dir: Path = Path("out/launch"),
    announce: Any = print,
    namespace: str = "",
    sequencer: bool = False,
    device: str | None = None,
) -> tuple[dict[str, Any], Monitor | None, dict[str, int]]:
    """Start the graph, watch it for ``duration_s`` (or until success), stop it.

    Args:
        namespace: start the graph (and the monitor) under this namespace.

    Returns:
        ``(metrics, monitor, exit codes)``; the monitor is closed but keeps its
        recording.

    Raises:
        VlaEdgeError: a parameter file is invalid, or the sim task or initial
            state is not the suite's (:func:`sim_task`); nothing was started.
    """
    controller_file = next(s for s in graph(profile) if s.name == "controller_node")
    max_chunk_age_s = load_node_params(
        controller_file.params_path(), "controller_node", ControllerConfig
    ).max_chunk_age_s
    task = sim_task(profile, task)
    processes = GraphProcesses(
        profile,
        overrides_for(profile, task, policy, threads, sequencer, device),
        log_dir=log_dir,
        namespace=namespace,
    )
    monitor = Monitor(record=record, namespace=namespace)
    processes.start()
    announce(
        f"started {', '.join(f'{n} (pid {p.process.pid})' for n, p in processes.nodes.items())}; "
        f"logs in {log_dir}/"
    )
    rss_start: dict[str, float] = {}
    died: dict[str, int] = {}
    t_end = time.monotonic() + duration_s
    rss_end: dict[str, float] = {}
    rss_peak: dict[str, float] = {}
    try:
        _watch(processes, monitor, t_end, stop_on_success, settle_s, announce, rss_start, died)
        monitor.spin_for(1.2)  # one more diagnostics period
        rss_end = processes.rss_mb()
        rss_peak = processes.peak_rss_mb()
    finally:
        codes = processes.stop()
        monitor.close()
        for name, sig in processes.stop_escalations.items():
            announce(
                f"node {name} did not stop within {STOP_TIMEOUT_S:.0f} s of SIGINT; "
                f"sent {sig}; the end of its log (a SIGTERM writes every thread's stack "
                f"there):\n{processes.log_tail(name, lines=STOP_LOG_LINES)}"
            )
    metrics = collect_metrics(monitor, task, max_chunk_age_s, rss_start, rss_end, rss_peak)
    metrics.update(
        {
            "profile": profile,
            "namespace": processes.namespace or "/",
            "policy": policy,
            "threads": threads,
            "device": device,
            "duration_s": round(monitor.elapsed_s(), 3),
            "nodes_died": died,
            "exit_codes": codes,
            "stop_escalations": dict(processes.stop_escalations),
        }
    )
    return metrics, monitor, codes


def _watch(
    processes: GraphProcesses,
    monitor: Monitor,
    t_end: float,
    stop_on_success: bool,
    settle_s: float,
    announce: Any,
    rss_start: dict[str, float],
    died: dict[str, int],
) -> None:
    """Spin the monitor until ``t_end``, success (+ settle), a node's exit or Ctrl-C."""
    success_at: float | None = None
    try:
        while time.monotonic() < t_end:
            monitor.spin_for(0.1)
            if not rss_start and _float(monitor.status("vla_edge/controller"), "accepted"):
                rss_start.update(processes.rss_mb())  # the graph is up: chunks flow
                announce(f"graph up after {monitor.elapsed_s():.1f} s: chunks flow")
            died.update(processes.exited())
            if died:
                for name, code in died.items():
                    announce(f"node {name} exited with {code}:\n{processes.log_tail(name)}")
                break
            if stop_on_success and monitor.success_seen:
                if success_at is None:
                    success_at = time.monotonic()
                    announce(f"task success after {monitor.success_time_s:.1f} s")
                elif time.monotonic() - success_at >= settle_s:
                    break
    except KeyboardInterrupt:
        announce("interrupted: stopping the graph")
