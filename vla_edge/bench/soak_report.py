"""The soak's report: its records, then windows, memory growth, underruns, goals, JSON and PNG.

ROS-free: :mod:`vla_edge.bench.soak` records the run into a :class:`SoakRecord`
(samples every few seconds, each chunk's age at arrival, the controller's
underrun counts, the episodes and the injected faults); :func:`build_report`
turns it into the JSON's figures and :func:`plot_soak` into the PNG.

A *sample* is a dict (the JSON holds the samples as columns, :func:`sample_columns`)::

    {"t_s", "pid": {node: pid}, "rss_mb": {node: MiB}, "cpu_pct": {node: %},
     "controller": {diagnostic key: value}, "inference": {...}, "host": {...}}

Times are seconds since the graph came up (the first chunk).
"""

from __future__ import annotations

import datetime
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np

from vla_edge.nodes.metrics import bins_percentile, parse_bins

Sample = Mapping[str, Any]

# The goals of the soak (issue 34): memory growth after warm-up, no underrun outside
# an injected fault, controller jitter p99 in every window; and no node that dies on
# its own, no fault the graph does not recover from.
GOALS: dict[str, float] = {
    "memory_growth_pct_per_h_max": 2.0,
    "underruns_outside_faults_max": 0,
    "controller_jitter_p99_ms_max": 2.0,
    "unexpected_exits_max": 0,
    "unrecovered_faults_max": 0,
}

# What each figure of the JSON is (written into it).
DEFINITIONS: dict[str, str] = {
    "t_s": "seconds since the graph came up (the first chunk the soak received)",
    "samples": "one list per sampled value, named by its path (rss_mb.<node>, "
    "controller.<diagnostic key>, host.temperature_c.<sensor>, ...); null where a node was "
    "not running or a value was not there",
    "rss_mb": "resident memory of the node's process and its children (MiB, psutil)",
    "cpu_pct": "CPU time of the node's process and its children over the sample period "
    "(100 = one core)",
    "steal_pct": "host: the share of CPU time the hypervisor gave to other machines over the "
    "sample period (psutil's steal; null where the kernel does not report it); per window "
    "its mean",
    "memory_growth_pct_per_h": "least-squares slope of RSS over time, per node, on the samples "
    "taken at least warmup_s after the process (re)started, one intercept per process "
    "(a respawn starts a new line, same slope), divided by the mean fitted RSS; % per hour",
    "chunk_age_ms": "per chunk: its arrival time at the soak's subscriber on action_chunk minus "
    "its header stamp (the observation time), system clock; p50/p99/max over the chunks that "
    "arrived in the window",
    "inference_wall_ms": "wall time of one inference: p50/p99 of the window, from the inference "
    "node's histogram (stage_ms.wall.bins on /diagnostics, 0.1 ms bins) read at the window's "
    "edges and subtracted; max_since_node_start is the node's run-long maximum",
    "controller_jitter_ms": "period jitter |period - nominal period| of the controller loop: "
    "p99 of the window, from the controller's histogram (period_jitter_ms_bins, 0.01 ms bins) "
    "read at the window's edges and subtracted; mean_in_window exact from its count and mean; "
    "max_since_node_start its run-long maximum",
    "buffer_underruns": "the controller's buffer_underruns counter (a hold entered after a chunk "
    "ran out), counted per /diagnostics period; an increment whose period overlaps "
    "[fault start, fault end + recovery_s] is 'in_faults', any other 'outside_faults'",
    "memory_steps": "per node, the RSS changes between consecutive samples of one process "
    "after warm-up, summed over the sample periods that overlap [fault start, fault end + "
    "recovery_s] (in_faults_mb) and over the others (outside_faults_mb, and per hour of them "
    "as % of the mean RSS: outside_faults_pct_per_h)",
    "safety_limited_ticks": "share of the safety node's ticks in which its limiter changed the "
    "command, from its ticks and limited_ticks counters read at every sample; 'outside_faults' "
    "counts only the sample periods that do not overlap [fault start, fault end + recovery_s]",
    "fault end": "inference_crash: the first chunk after the respawn; inference_stall: the first "
    "chunk after SIGCONT; estop: the safety reset's reply",
    "restarts": "node processes started again: 'injected' after a crash the soak caused, "
    "'unexpected' after a node exited on its own",
    "temperature_c": "each /sys/class/thermal zone by its type (a Jetson's cpu-thermal, "
    "gpu-thermal, ...), else psutil's hwmon sensors by chip/label; null where there are none",
    "cpu_freq_mhz": "current CPU clock over the cores (min/mean/max) from "
    "/sys/devices/system/cpu/*/cpufreq (source 'cpufreq') or /proc/cpuinfo (source 'cpuinfo'); "
    "null where neither exists",
    "devfreq_mhz": "current clock of each /sys/class/devfreq device (the GPU and memory "
    "controller on a Jetson); null where none",
}


# ------------------------------------------------------------------ records


@dataclass
class Episode:
    """One episode as it ran (times in seconds since the graph came up)."""

    index: int
    task: str
    init_state_id: int
    budget_s: float
    t_start_s: float
    switch_task: str | None = None
    switch_at_s: float | None = None
    switched_t_s: float | None = None
    t_end_s: float | None = None
    success: bool = False
    success_t_s: float | None = None
    end: str | None = None


@dataclass
class Fault:
    """One injected fault (times in seconds since the graph came up).

    Attributes:
        undo_at_s: when the soak undoes the action (respawn, SIGCONT, e-stop release).
        undone_s: when it did.
        end_s: when the graph was back (see :data:`DEFINITIONS`).
        recovered: whether it came back in time (``vla_edge.bench.soak.RECOVERY_TIMEOUT_S``);
            ``None`` when the soak ended first.
    """

    kind: str
    start_s: float
    undo_at_s: float
    undone_s: float | None = None
    end_s: float | None = None
    recovered: bool | None = None
    detail: str = ""


@dataclass
class SoakRecord:
    """Everything a soak recorded, before the statistics."""

    samples: list[dict[str, Any]] = field(default_factory=list)
    episodes: list[Episode] = field(default_factory=list)
    faults: list[Fault] = field(default_factory=list)
    restarts: list[dict[str, Any]] = field(default_factory=list)
    unexpected_exits: list[dict[str, Any]] = field(default_factory=list)
    reset_failures: list[dict[str, Any]] = field(default_factory=list)
    chunk_ages: list[tuple[float, float]] = field(default_factory=list)
    histograms: list[dict[str, Any]] = field(default_factory=list)
    """Per sample: ``t_s`` and, per histogram name, ``(pid, bins text, bin width)`` as the
    node published them (kept out of the JSON: a window's histogram is the difference of
    the readings at its edges)."""
    underrun_readings: list[tuple[float, float]] = field(default_factory=list)
    startup_s: float | None = None
    duration_s: float = 0.0
    interrupted: bool = False
    exit_codes: dict[str, int] = field(default_factory=dict)
    stop_escalations: dict[str, str] = field(default_factory=dict)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100) as an observed value (nearest rank); ``None`` if empty."""
    if len(values) == 0:
        return None
    return float(np.percentile(np.asarray(values, dtype=np.float64), q, method="inverted_cdf"))


def _round(value: float | None, digits: int = 3) -> float | None:
    return None if value is None or not math.isfinite(value) else round(float(value), digits)


# ------------------------------------------------------------------ memory growth


@dataclass(frozen=True)
class Growth:
    """A node's memory growth after warm-up.

    Attributes:
        pct_per_h: slope / mean fitted RSS, in % per hour (``None``: too few samples).
        slope_mb_per_h: the pooled least-squares slope.
        mean_rss_mb: mean of the fitted samples.
        samples: how many samples were fitted.
        span_s: the fitted time, summed over the processes.
        processes: how many processes (pids) the samples came from.
    """

    pct_per_h: float | None
    slope_mb_per_h: float | None
    mean_rss_mb: float | None
    samples: int
    span_s: float
    processes: int

    def as_json(self) -> dict[str, Any]:
        """The JSON fields."""
        return {
            "pct_per_h": _round(self.pct_per_h),
            "slope_mb_per_h": _round(self.slope_mb_per_h),
            "mean_rss_mb": _round(self.mean_rss_mb, 1),
            "samples": self.samples,
            "span_s": round(self.span_s, 1),
            "processes": self.processes,
        }


def after_warmup(
    points: Sequence[tuple[float, float, int]], warmup_s: float
) -> list[tuple[float, float, int]]:
    """The ``(t_s, rss_mb, pid)`` samples at least ``warmup_s`` after their process's first.

    In time order; a respawned process warms up again.
    """
    first: dict[int, float] = {}
    kept = []
    for point in sorted(points):
        t_s, _, pid = point
        if t_s - first.setdefault(pid, t_s) >= warmup_s:
            kept.append(point)
    return kept


def memory_growth(points: Sequence[tuple[float, float, int]], warmup_s: float) -> Growth:
    """Growth of RSS after warm-up from ``(t_s, rss_mb, pid)`` samples of one node.

    Each process (pid) is fitted from ``warmup_s`` after its first sample
    (:func:`after_warmup`); the slope is shared and each process has its own intercept (a
    respawned process starts again from its base size, which is no growth).
    """
    groups: dict[int, list[tuple[float, float]]] = {}
    for t_s, rss_mb, pid in after_warmup(points, warmup_s):
        groups.setdefault(pid, []).append((t_s, rss_mb))
    num = den = 0.0
    kept: list[float] = []
    span_s = 0.0
    for rows in groups.values():
        t = np.array([r[0] for r in rows])
        y = np.array([r[1] for r in rows])
        num += float(np.sum((t - t.mean()) * (y - y.mean())))
        den += float(np.sum((t - t.mean()) ** 2))
        kept += y.tolist()
        span_s += float(t.max() - t.min())
    if den <= 0.0 or not kept:
        return Growth(None, None, None, len(kept), span_s, len(groups))
    slope_mb_per_h = num / den * 3600.0
    mean_mb = float(np.mean(kept))
    return Growth(
        slope_mb_per_h / mean_mb * 100.0, slope_mb_per_h, mean_mb, len(kept), span_s, len(groups)
    )


def node_points(samples: Sequence[Sample]) -> dict[str, list[tuple[float, float, int]]]:
    """Each node's ``(t_s, rss_mb, pid)`` samples, nodes in name order."""
    points: dict[str, list[tuple[float, float, int]]] = {}
    for sample in samples:
        for node, rss_mb in sample["rss_mb"].items():
            points.setdefault(node, []).append((sample["t_s"], rss_mb, sample["pid"][node]))
    return dict(sorted(points.items()))


def node_growth(samples: Sequence[Sample], warmup_s: float) -> dict[str, Growth]:
    """:func:`memory_growth` of every node that appears in ``samples``."""
    return {node: memory_growth(p, warmup_s) for node, p in node_points(samples).items()}


def memory_steps(
    samples: Sequence[Sample], spans: Sequence[tuple[float, float]], warmup_s: float
) -> dict[str, dict[str, Any]]:
    """Where each node's RSS grew after warm-up: in fault spans or outside them.

    A fault span is ``[start, end + recovery_s]``; a sample period is in one when it
    overlaps it (see DEFINITIONS).

    Per node: ``in_faults_mb`` and ``outside_faults_mb`` (the RSS changes between two
    consecutive samples of the same process, both at least ``warmup_s`` after it started,
    summed), ``outside_faults_s`` (the time those outside periods cover) and
    ``outside_faults_pct_per_h`` (the outside change per hour of it, divided by the mean
    RSS of the samples used; ``None`` without such a period).
    """
    sums: dict[str, dict[str, float]] = {}
    rss_seen: dict[str, list[float]] = {}
    for node, points in node_points(samples).items():
        kept = after_warmup(points, warmup_s)
        if not kept:
            continue
        rss_seen[node] = [rss_mb for _, rss_mb, _ in kept]
        per = sums[node] = {"in": 0.0, "out": 0.0, "out_s": 0.0}
        for before, (t_s, rss_mb, pid) in pairwise(kept):
            if before[2] != pid:  # a respawn starts again: no step
                continue
            if in_fault(before[0], t_s, spans):
                per["in"] += rss_mb - before[1]
            else:
                per["out"] += rss_mb - before[1]
                per["out_s"] += t_s - before[0]
    out: dict[str, dict[str, Any]] = {}
    for node, per in sorted(sums.items()):
        mean_mb = float(np.mean(rss_seen[node]))
        rate = per["out"] / per["out_s"] * 3600.0 / mean_mb * 100.0 if per["out_s"] > 0 else None
        out[node] = {
            "in_faults_mb": round(per["in"], 3),
            "outside_faults_mb": round(per["out"], 3),
            "outside_faults_s": round(per["out_s"], 1),
            "outside_faults_pct_per_h": _round(rate),
        }
    return out


# ------------------------------------------------------------------ underruns


@dataclass(frozen=True)
class UnderrunCount:
    """Underruns counted by the controller, split by the injected faults' windows.

    Attributes:
        in_faults: underruns whose counting period overlaps a fault window.
        outside_faults: every other one.
        outside: ``(t_from_s, t_to_s, count)`` of each increment outside a fault.
    """

    in_faults: int
    outside_faults: int
    outside: tuple[tuple[float, float, int], ...]


def in_fault(t_from_s: float, t_to_s: float, spans: Sequence[tuple[float, float]]) -> bool:
    """Whether ``(t_from_s, t_to_s]`` overlaps one of ``spans`` (closed intervals)."""
    return any(t_from_s <= end and t_to_s >= start for start, end in spans)


def classify_underruns(
    events: Sequence[tuple[float, float, int]],
    faults: Sequence[tuple[float, float]],
    recovery_s: float,
) -> UnderrunCount:
    """Split the controller's underrun increments into in-fault and outside-fault ones.

    Args:
        events: ``(t_from_s, t_to_s, count)``: ``count`` underruns happened in
            ``(t_from_s, t_to_s]`` (two consecutive ``/diagnostics`` of the controller).
        faults: ``(start_s, end_s)`` of each injected fault.
        recovery_s: each fault window is extended by this much after its end.
    """
    spans = [(start, end + recovery_s) for start, end in faults]
    inside = outside = 0
    out_events = []
    for t_from_s, t_to_s, count in events:
        if count <= 0:
            continue
        if in_fault(t_from_s, t_to_s, spans):
            inside += count
        else:
            outside += count
            out_events.append((t_from_s, t_to_s, count))
    return UnderrunCount(inside, outside, tuple(out_events))


def counter_increments(
    readings: Sequence[tuple[float, float]], t_start_s: float = 0.0
) -> list[tuple[float, float, int]]:
    """``(t_from_s, t_to_s, increment)`` of a cumulative counter read at ``(t_s, value)``.

    A value lower than the previous one is a restarted node counting from zero:
    its increment is the value itself. The first reading counts from
    ``t_start_s`` (the counter is zero when the node starts).
    """
    out: list[tuple[float, float, int]] = []
    last_t, last_value = t_start_s, 0.0
    for t_s, value in readings:
        increment = value - last_value if value >= last_value else value
        if increment > 0:
            out.append((last_t, t_s, int(round(increment))))
        last_t, last_value = t_s, value
    return out


def limited_ticks(
    samples: Sequence[Sample], spans: Sequence[tuple[float, float]]
) -> dict[str, Any]:
    """The safety node's limited-tick share, overall and outside faults (see DEFINITIONS).

    From its cumulative ``ticks`` and ``limited_ticks`` counters in each sample; a
    lower reading than the one before is a restarted node counting from zero.
    """
    totals = {"ticks": 0, "limited_ticks": 0, "ticks_outside_faults": 0}
    totals["limited_ticks_outside_faults"] = 0
    last: tuple[float, float, float] | None = None
    for sample in samples:
        safety = sample.get("safety") or {}
        ticks, limited = safety.get("ticks"), safety.get("limited_ticks")
        if ticks is None or limited is None:
            continue
        t_from, ticks_before, limited_before = last if last is not None else (0.0, 0.0, 0.0)
        restarted = ticks < ticks_before
        d_ticks = ticks if restarted else ticks - ticks_before
        d_limited = limited if restarted else limited - limited_before
        totals["ticks"] += int(round(d_ticks))
        totals["limited_ticks"] += int(round(d_limited))
        if not in_fault(t_from, sample["t_s"], spans):
            totals["ticks_outside_faults"] += int(round(d_ticks))
            totals["limited_ticks_outside_faults"] += int(round(d_limited))
        last = (sample["t_s"], ticks, limited)

    def share(limited: int, ticks: int) -> float | None:
        return limited / ticks if ticks else None

    return {
        "share": share(totals["limited_ticks"], totals["ticks"]),
        "share_outside_faults": share(
            totals["limited_ticks_outside_faults"], totals["ticks_outside_faults"]
        ),
        **totals,
    }


# ------------------------------------------------------------------ windows


def window_bounds(duration_s: float, window_s: float) -> list[tuple[float, float]]:
    """``[(start_s, end_s)]`` of consecutive windows; the last one may be shorter."""
    bounds = []
    start = 0.0
    while start < duration_s - 1e-9:
        bounds.append((start, min(start + window_s, duration_s)))
        start += window_s
    return bounds


def _in_window(t_s: float, start: float, end: float, last: bool) -> bool:
    """Whether ``t_s`` falls in ``[start, end)``; the last window also takes what follows it."""
    return start <= t_s and (t_s < end or last)


def _float(values: Mapping[str, Any] | None, key: str) -> float | None:
    if not values:
        return None
    try:
        value = float(values[key])
    except (KeyError, TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def jitter_mean_between(before: Sample | None, last: Sample) -> float | None:
    """Mean controller jitter of the ticks between two samples (exact, from count and mean).

    ``None`` when the controller restarted in between (its histogram began again)
    or counted no tick.
    """
    n1 = _float(last.get("controller"), "period_jitter_ms_count")
    m1 = _float(last.get("controller"), "period_jitter_ms_mean")
    if n1 is None or m1 is None:
        return None
    n0 = m0 = 0.0
    if before is not None:
        n0 = _float(before.get("controller"), "period_jitter_ms_count") or 0.0
        m0 = _float(before.get("controller"), "period_jitter_ms_mean") or 0.0
    if (
        n1 <= n0
        or before is not None
        and before["pid"].get("controller_node") != last["pid"].get("controller_node")
    ):
        return None
    return (n1 * m1 - n0 * m0) / (n1 - n0)


def window_percentiles(
    readings: Sequence[Mapping[str, Any]],
    name: str,
    start: float,
    end: float,
    last: bool,
    qs: Sequence[float],
) -> dict[str, float | None]:
    """``{"p<q>": value}`` of histogram ``name`` over one window, exact to its bin width.

    The window's histogram is the last reading in it minus the last one before
    it (the whole last reading when the node restarted in between).
    """
    empty: dict[str, float | None] = {f"p{q:g}": None for q in qs}
    inside = [r for r in readings if r.get(name) and _in_window(r["t_s"], start, end, last)]
    if not inside:
        return empty
    pid, text, width = inside[-1][name]
    before = [r for r in readings if r.get(name) and r["t_s"] < start]
    base = None
    if before and before[-1][name][0] == pid:
        base = parse_bins(before[-1][name][1])
    after = parse_bins(text)
    return {f"p{q:g}": _round(bins_percentile(after, base, float(width), q), 3) for q in qs}


def window_stats(
    bounds: Sequence[tuple[float, float]],
    samples: Sequence[Sample],
    chunk_ages: Sequence[tuple[float, float]],
    underrun_events: Sequence[tuple[float, float, int]],
    faults: Sequence[Mapping[str, Any]],
    recovery_s: float,
    restarts: Sequence[Mapping[str, Any]],
    episodes: Sequence[Mapping[str, Any]],
    histograms: Sequence[Mapping[str, Any]] = (),
) -> list[dict[str, Any]]:
    """Per window: chunk age, inference latency, controller jitter, underruns, restarts, host.

    Args:
        bounds: from :func:`window_bounds`.
        samples: the periodic samples, in time order.
        chunk_ages: ``(t_s, age_ms)`` of each chunk at arrival.
        underrun_events: from :func:`counter_increments` (attributed to the
            window holding the end of their period).
        faults: each with ``start_s`` and ``end_s``.
        recovery_s: margin after each fault's end.
        restarts: each with ``t_s``.
        episodes: each with ``t_start_s``, ``success``.
        histograms: the nodes' histogram readings (:attr:`SoakRecord.histograms`).
    """
    spans = [(f["start_s"], f["end_s"] + recovery_s) for f in faults]
    out = []
    for i, (start, end) in enumerate(bounds):
        last = i == len(bounds) - 1
        inside = [s for s in samples if _in_window(s["t_s"], start, end, last)]
        before = [s for s in samples if s["t_s"] < start]
        ages = [a for t, a in chunk_ages if _in_window(t, start, end, last)]
        events = [e for e in underrun_events if _in_window(e[1], start, end, last)]
        in_count = sum(n for a, b, n in events if in_fault(a, b, spans))
        eps = [e for e in episodes if _in_window(e["t_start_s"], start, end, last)]
        row: dict[str, Any] = {
            "t_start_s": round(start, 3),
            "t_end_s": round(end, 3),
            "samples": len(inside),
            "chunks": len(ages),
            "chunk_age_ms": {
                "p50": _round(percentile(ages, 50), 2),
                "p99": _round(percentile(ages, 99), 2),
                "max": _round(max(ages), 2) if ages else None,
            },
            "buffer_underruns": {
                "in_faults": in_count,
                "outside_faults": sum(n for *_, n in events) - in_count,
            },
            "faults": sum(1 for f in faults if _in_window(f["start_s"], start, end, last)),
            "restarts": sum(1 for r in restarts if _in_window(r["t_s"], start, end, last)),
            "episodes": len(eps),
            "successes": sum(1 for e in eps if e.get("success")),
        }
        if inside:
            final = inside[-1]
            ctrl, infer = final.get("controller"), final.get("inference")
            row["inference_wall_ms"] = {
                **window_percentiles(histograms, "inference_wall", start, end, last, (50, 99)),
                "max_since_node_start": _round(_float(infer, "wall_ms_max"), 2),
            }
            jitter = window_percentiles(histograms, "controller_jitter", start, end, last, (99,))
            row["controller_jitter_ms"] = {
                "p99": jitter["p99"],
                "max_since_node_start": _round(_float(ctrl, "period_jitter_ms_max"), 3),
                "mean_in_window": _round(
                    jitter_mean_between(before[-1] if before else None, final), 4
                ),
            }
            row["rss_mb_end"] = {n: round(v, 1) for n, v in final["rss_mb"].items()}
            row["cpu_pct_mean"] = _mean_per_node(inside, "cpu_pct")
            row["host"] = _host_window(inside)
        out.append(row)
    return out


def _mean_per_node(samples: Sequence[Sample], key: str) -> dict[str, float]:
    values: dict[str, list[float]] = {}
    for sample in samples:
        for node, value in sample.get(key, {}).items():
            if value is not None:
                values.setdefault(node, []).append(value)
    return {node: round(float(np.mean(v)), 1) for node, v in sorted(values.items())}


def _host_window(samples: Sequence[Sample]) -> dict[str, Any]:
    """The hottest sensor reading, the clock range and the mean machine CPU of a window."""
    temps = [
        t for s in samples for t in (s["host"].get("temperature_c") or {}).values() if t is not None
    ]
    freqs = [s["host"]["cpu_freq_mhz"] for s in samples if s["host"].get("cpu_freq_mhz")]
    cpu = [s["host"]["cpu_pct"] for s in samples if s["host"].get("cpu_pct") is not None]
    steal = [s["host"]["steal_pct"] for s in samples if s["host"].get("steal_pct") is not None]
    return {
        "temperature_c_max": _round(max(temps), 1) if temps else None,
        "cpu_freq_mhz_min": _round(min(f["min"] for f in freqs), 0) if freqs else None,
        "cpu_freq_mhz_max": _round(max(f["max"] for f in freqs), 0) if freqs else None,
        "cpu_pct_mean": _round(float(np.mean(cpu)), 1) if cpu else None,
        "steal_pct_mean": _round(float(np.mean(steal)), 1) if steal else None,
    }


# ------------------------------------------------------------------ goals


def evaluate_goals(
    growth: Mapping[str, Growth],
    windows: Sequence[Mapping[str, Any]],
    underruns_outside_faults: int,
    unexpected_exits: int,
    unrecovered_faults: int,
    limits: Mapping[str, float] = GOALS,
) -> dict[str, dict[str, Any]]:
    """Each goal's limit, measured value and verdict (``passed``: ``None`` when unmeasured).

    The memory goal is measured on the node that grows fastest; the jitter goal
    on the window whose p99 is highest.
    """
    rates = {n: g.pct_per_h for n, g in growth.items() if g.pct_per_h is not None}
    worst_node = max(rates, key=lambda n: rates[n]) if rates else None
    jitter = [
        (w["controller_jitter_ms"]["p99"], w["t_start_s"])
        for w in windows
        if w.get("controller_jitter_ms", {}).get("p99") is not None
    ]
    worst_jitter = max(jitter) if jitter else None

    def verdict(value: float | None, limit: float) -> bool | None:
        return None if value is None else bool(value <= limit)

    memory_limit = limits["memory_growth_pct_per_h_max"]
    jitter_limit = limits["controller_jitter_p99_ms_max"]
    return {
        "memory_growth_pct_per_h_max": {
            "limit": memory_limit,
            "value": _round(rates[worst_node]) if worst_node else None,
            "node": worst_node,
            "passed": verdict(rates[worst_node] if worst_node else None, memory_limit),
        },
        "underruns_outside_faults_max": {
            "limit": limits["underruns_outside_faults_max"],
            "value": underruns_outside_faults,
            "passed": underruns_outside_faults <= limits["underruns_outside_faults_max"],
        },
        "controller_jitter_p99_ms_max": {
            "limit": jitter_limit,
            "value": worst_jitter[0] if worst_jitter else None,
            "window_start_s": worst_jitter[1] if worst_jitter else None,
            "basis": "the p99 of every window (its own histogram)",
            "passed": verdict(worst_jitter[0] if worst_jitter else None, jitter_limit),
        },
        "unexpected_exits_max": {
            "limit": limits["unexpected_exits_max"],
            "value": unexpected_exits,
            "passed": unexpected_exits <= limits["unexpected_exits_max"],
        },
        "unrecovered_faults_max": {
            "limit": limits["unrecovered_faults_max"],
            "value": unrecovered_faults,
            "passed": unrecovered_faults <= limits["unrecovered_faults_max"],
        },
    }


# ------------------------------------------------------------------ the report


def build_report(
    record: SoakRecord, settings: Mapping[str, Any], machine: Mapping[str, Any]
) -> dict[str, Any]:
    """The JSON of a soak: settings, summary, goals, windows, and the raw records.

    Args:
        record: what the soak recorded.
        settings: the soak's settings as JSON (``duration_s``, ``window_s``,
            ``warmup_s``, ``recovery_s``, ``faults`` and whatever else is to be
            recorded with them).
        machine: what it ran on.
    """
    faults = [asdict(f) for f in record.faults]
    episodes = [asdict(e) for e in record.episodes]
    # an interrupted soak has windows up to where it stopped; the last window holds
    # the samples taken after the nominal end (the final one)
    # (a soak that ran out of listed episodes ended early too: graph evaluation)
    early = record.interrupted or record.duration_s < settings["duration_s"]
    duration_s = record.duration_s if early else settings["duration_s"]
    bounds = window_bounds(max(duration_s, 1e-3), settings["window_s"])
    increments = counter_increments(record.underrun_readings)
    underruns = classify_underruns(
        increments, [(f["start_s"], f["end_s"]) for f in faults], settings["recovery_s"]
    )
    windows = window_stats(
        bounds,
        record.samples,
        record.chunk_ages,
        increments,
        faults,
        settings["recovery_s"],
        record.restarts,
        episodes,
        record.histograms,
    )
    growth = node_growth(record.samples, settings["warmup_s"])
    fault_spans = [(f["start_s"], f["end_s"] + settings["recovery_s"]) for f in faults]
    unrecovered = sum(1 for f in record.faults if f.recovered is False)
    goals = evaluate_goals(
        growth, windows, underruns.outside_faults, len(record.unexpected_exits), unrecovered
    )
    ages = [a for _, a in record.chunk_ages]
    restarts: dict[str, dict[str, int]] = {}
    for r in record.restarts:
        per = restarts.setdefault(r["node"], {"injected": 0, "unexpected": 0})
        per[r["cause"]] += 1
    temps = [t for s in record.samples for t in (s["host"].get("temperature_c") or {}).values()]
    freqs = [s["host"]["cpu_freq_mhz"] for s in record.samples if s["host"].get("cpu_freq_mhz")]
    ended = [e for e in record.episodes if e.end in ("success", "budget")]
    summary = {
        "memory_growth": {n: gr.as_json() for n, gr in growth.items()},
        "buffer_underruns": {
            "in_faults": underruns.in_faults,
            "outside_faults": underruns.outside_faults,
            "outside_events": [list(e) for e in underruns.outside],
        },
        "chunk_age_ms": {
            "p50": percentile(ages, 50),
            "p99": percentile(ages, 99),
            "max": max(ages) if ages else None,
            "count": len(ages),
        },
        "episodes": {
            "count": len(record.episodes),
            "finished": len(ended),
            "successes": sum(e.success for e in ended),
            "with_switch": sum(e.switched_t_s is not None for e in record.episodes),
            "successes_without_switch": sum(e.success for e in ended if e.switched_t_s is None),
            "finished_without_switch": sum(1 for e in ended if e.switched_t_s is None),
            "reset_failures": len(record.reset_failures),
        },
        "safety_limited_ticks": limited_ticks(record.samples, fault_spans),
        "memory_steps": memory_steps(record.samples, fault_spans, settings["warmup_s"]),
        "faults": {k: sum(1 for f in record.faults if f.kind == k) for k in settings["faults"]},
        "restarts": restarts,
        "restarts_total": len(record.restarts),
        "unexpected_exits": len(record.unexpected_exits),
        "temperature_c_max": max(temps) if temps else None,
        "cpu_freq_mhz": {
            "min": min(f["min"] for f in freqs),
            "max": max(f["max"] for f in freqs),
            "source": freqs[0]["source"],
        }
        if freqs
        else None,
    }
    verdicts = [goal["passed"] for goal in goals.values()]
    return {
        "kind": "soak",
        "written_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "settings": dict(settings),
        "machine": dict(machine),
        "startup_s": record.startup_s,
        "duration_s": record.duration_s,
        "interrupted": record.interrupted,
        "passed": all(v is not False for v in verdicts) and not record.interrupted,
        "goals": goals,
        "summary": summary,
        "definitions": DEFINITIONS,
        "windows": windows,
        "episodes": episodes,
        "faults": faults,
        "restarts": record.restarts,
        "unexpected_exits": record.unexpected_exits,
        "reset_failures": record.reset_failures,
        "exit_codes": record.exit_codes,
        "stop_escalations": record.stop_escalations,
        "samples": sample_columns(record.samples),
    }


def summary_lines(report: Mapping[str, Any]) -> list[str]:
    """The human-readable end of a soak."""
    s = report["summary"]
    lines = [
        f"soak: {report['duration_s']:.0f} s, {s['episodes']['count']} episodes "
        f"({s['episodes']['successes']} successes of {s['episodes']['finished']} finished, "
        f"{s['episodes']['with_switch']} with a switch), {len(report['faults'])} faults, "
        f"{s['restarts_total']} restarts, {s['unexpected_exits']} unexpected exits",
        f"buffer underruns: {s['buffer_underruns']['in_faults']} in faults, "
        f"{s['buffer_underruns']['outside_faults']} outside",
    ]
    limited = s.get("safety_limited_ticks") or {}
    if limited.get("share") is not None:
        outside = limited.get("share_outside_faults")
        lines.append(
            f"safety node limited {100 * limited['share']:.2f} % of its ticks"
            + (f" ({100 * outside:.2f} % outside faults)" if outside is not None else "")
        )
    steps = s.get("memory_steps") or {}
    if steps:
        lines.append(
            "RSS change after warm-up, in / outside faults: "
            + ", ".join(
                f"{node.removesuffix('_node')} {m['in_faults_mb']:+.2f} / "
                f"{m['outside_faults_mb']:+.2f} MiB"
                for node, m in steps.items()
            )
        )
    for name, goal in report["goals"].items():
        verdict = {True: "pass", False: "FAIL", None: "not measured"}[goal["passed"]]
        lines.append(f"goal {name}: {goal['value']} (limit {goal['limit']}): {verdict}")
    return lines


# ------------------------------------------------------------------ the JSON file


def _flatten(row: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, Mapping):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def sample_columns(samples: Sequence[Sample]) -> dict[str, list[Any]]:
    """The samples as one list per value, named by its path (``rss_mb.sim_node``).

    A sample without a value (a node not running, a sensor the machine lacks)
    has ``None`` there. ``pandas.DataFrame(columns)`` reads it as it is.
    """
    flat = [_flatten(s) for s in samples]
    names = list(dict.fromkeys(name for row in flat for name in row))
    return {name: [row.get(name) for row in flat] for name in names}


def sample_rows(columns: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """:func:`sample_columns` back to one dict per sample, ``None`` values left out."""
    n = len(columns.get("t_s", ()))
    rows: list[dict[str, Any]] = [{} for _ in range(n)]
    for name, values in columns.items():
        *groups, leaf = name.split(".")
        for row, value in zip(rows, values, strict=True):
            if value is None:
                continue
            for group in groups:
                row = row.setdefault(group, {})
            row[leaf] = value
    for row in rows:
        for group in ("pid", "rss_mb", "cpu_pct", "host"):
            row.setdefault(group, {})
    return rows


def report_json(report: Mapping[str, Any]) -> str:
    """The report as JSON text, short enough for a results folder.

    Indented, but each sample column, and each item of a list of records
    (windows, episodes, faults, ...), on one line.
    """

    def compact(value: Any) -> str:
        return json.dumps(value, separators=(",", ":"))

    parts = []
    for key, value in report.items():
        if key == "samples":
            body = ",\n".join(f"  {json.dumps(k)}: {compact(v)}" for k, v in value.items())
            text = f"{{\n{body}\n }}" if body else "{}"
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            text = "[\n" + ",\n".join(f"  {compact(v)}" for v in value) + "\n ]"
        else:
            text = json.dumps(value, indent=1).replace("\n", "\n ")
        parts.append(f" {json.dumps(key)}: {text}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


# ------------------------------------------------------------------ plot


def _per_process(samples: Sequence[Sample], node: str) -> list[list[Sample]]:
    """The samples of ``node``, one list per process (a respawn starts a new line)."""
    runs: list[list[Sample]] = []
    for sample in samples:
        if node not in sample["rss_mb"]:
            continue
        if not runs or runs[-1][-1]["pid"][node] != sample["pid"][node]:
            runs.append([])
        runs[-1].append(sample)
    return runs


def plot_soak(report: Mapping[str, Any], path: Path) -> Path:
    """RSS and CPU per node over time, chunk age and inference p99/p95 and jitter p99 per window.

    Fault windows are shaded and restarts marked on every panel; the jitter
    panel draws the goal's limit.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples = sample_rows(report["samples"])
    windows = report["windows"]
    fig, axes = plt.subplots(4, 1, figsize=(11, 12), sharex=True)
    t = [s["t_s"] for s in samples]
    nodes = sorted({n for s in samples for n in s["rss_mb"]})
    for i, node in enumerate(nodes):
        color = f"C{i}"
        for j, rows in enumerate(_per_process(samples, node)):
            label = node if j == 0 else None
            t_s = [s["t_s"] for s in rows]
            rss = [s["rss_mb"][node] for s in rows]
            axes[0].plot(t_s, rss, color=color, label=label, linewidth=1.0)
            cpu = [(s["t_s"], s["cpu_pct"].get(node)) for s in rows]
            cpu = [r for r in cpu if r[1] is not None]
            axes[1].plot([r[0] for r in cpu], [r[1] for r in cpu], color=color, linewidth=0.8)
    growth = report["summary"]["memory_growth"]
    axes[0].set_ylabel("RSS [MiB]")
    axes[0].set_title(
        "resident memory per node; growth after warm-up: "
        + ", ".join(
            f"{n.removesuffix('_node')} {g['pct_per_h']:+.2f} %/h"
            for n, g in growth.items()
            if g["pct_per_h"] is not None
        ),
        fontsize=9,
    )
    if nodes:
        axes[0].legend(loc="upper left", fontsize=8)
    axes[1].set_ylabel("CPU [% of a core]")
    if t and samples[0]["host"].get("temperature_c"):
        twin = axes[1].twinx()
        temps = [max((s["host"].get("temperature_c") or {0: math.nan}).values()) for s in samples]
        twin.plot(t, temps, color="black", linewidth=0.8, linestyle=":", label="hottest sensor")
        twin.set_ylabel("temperature [°C]")
    mid = [(w["t_start_s"] + w["t_end_s"]) / 2 for w in windows]
    width = [(w["t_end_s"] - w["t_start_s"]) * 0.8 for w in windows]

    def series(key: str, sub: str) -> list[float]:
        return [math.nan if w.get(key, {}).get(sub) is None else w[key][sub] for w in windows]

    axes[2].plot(mid, series("chunk_age_ms", "p99"), "o-", label="chunk age p99 (window)")
    axes[2].plot(mid, series("chunk_age_ms", "p50"), "o--", label="chunk age p50 (window)")
    axes[2].plot(
        mid,
        series("inference_wall_ms", "p99"),
        "s:",
        label="inference wall p99 (window)",
    )
    axes[2].set_ylabel("ms")
    axes[2].legend(loc="upper left", fontsize=8)
    axes[3].bar(
        mid,
        series("controller_jitter_ms", "p99"),
        width=width,
        color="tab:blue",
        alpha=0.6,
        label="controller jitter p99 (window)",
    )
    axes[3].plot(mid, series("controller_jitter_ms", "mean_in_window"), "k.", label="mean (window)")
    limit = report["goals"]["controller_jitter_p99_ms_max"]["limit"]
    axes[3].axhline(limit, color="red", linestyle="--", linewidth=1.0, label=f"goal {limit} ms")
    axes[3].set_ylabel("jitter [ms]")
    axes[3].legend(loc="upper left", fontsize=8)
    axes[3].set_xlabel("time since the graph came up [s]")
    for ax in axes:
        for fault in report["faults"]:
            ax.axvspan(fault["start_s"], fault["end_s"], color="orange", alpha=0.25, lw=0)
        for restart in report["restarts"]:
            ax.axvline(restart["t_s"], color="red", linewidth=0.6, alpha=0.7)
    summary = report["summary"]
    fig.suptitle(
        f"soak {report['duration_s']:.0f} s, policy {report['settings'].get('policy')}: "
        f"{summary['episodes']['count']} episodes, {len(report['faults'])} faults (shaded), "
        f"{summary['restarts_total']} restarts (red lines), underruns outside faults "
        f"{summary['buffer_underruns']['outside_faults']}",
        fontsize=10,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
