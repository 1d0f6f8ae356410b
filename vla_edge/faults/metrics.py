"""Scoring a fault run: detection, halt, peaks, limit violations, recovery, pass/fail.

Definitions (all times from the fault start, in ms in the result):

* **detected** — the first tick at or after the fault start where the
  safety or controller state reflects a fault: a stop category (safety state,
  controller watchdog, or the controller holding because its buffer ran out),
  or a chunk / command rejection counted after the start. (The limiter shaping
  a command is normal operation, reported as ``limiter_ticks_after_fault``.)
* **halted** — the first tick from which the commanded (safety output) speed
  of every joint stays below ``HALT_FRACTION`` of its velocity limit for
  ``HALT_HOLD_S``; for scenarios that must stay halted, the tick from which it
  stays below until the fault clears (a pause of the plan is not a halt).
* **peaks** — largest |velocity|, |acceleration|, |jerk| of the safety output
  (finite differences at the control period) from the fault start to the end,
  also given as a fraction of the configured limits.
* **limit violations** — ticks where the safety output, or the measured
  position of a revolute joint, lies outside ``[position_min, position_max]``
  of ``config/safety.yaml`` (the measured finger opening is set by contacts
  and reported apart as ``measured_gripper_excursion_m``).
* **declared stop while moving** — ticks where a category-1 stop is declared
  (watchdog) while the controller still follows chunks and the safety layer
  is at ``none``: a false alarm on ``/diagnostics``.
* **recovered** — within ``recover_within_s`` after the fault clears, a tick
  with no stop anywhere, the controller executing (not holding) and at least
  one fresh chunk accepted after the fault cleared; ``time_to_recover_ms`` is
  from the fault's end to that tick.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vla_edge.config.models import SafetyConfig
from vla_edge.core.clock import TIME_EPS_S
from vla_edge.core.stop import StopCategory
from vla_edge.faults.harness import Trace

HALT_FRACTION = 0.01
HALT_HOLD_S = 0.1
MEASURED_TOLERANCE = 1e-3
LIMIT_TOLERANCE = 1e-6

_BY_SEVERITY = {c.severity: c for c in StopCategory}


def _first(mask: np.ndarray) -> int | None:
    idx = np.flatnonzero(mask)
    return int(idx[0]) if idx.size else None


def observed_severity(a: dict[str, np.ndarray]) -> np.ndarray:
    """Per tick: the most severe of the safety state and the controller's state."""
    return np.maximum(a["safety_severity"], a["watchdog_severity"])


def derivatives(positions: np.ndarray, dt_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Velocity, acceleration and jerk of a ``[T, A]`` trace by finite differences."""
    v = np.diff(positions, axis=0) / dt_s
    a = np.diff(v, axis=0) / dt_s
    j = np.diff(a, axis=0) / dt_s
    return v, a, j


def halt_index(
    speed_ratio: np.ndarray, from_index: int, hold_ticks: int, fraction: float = HALT_FRACTION
) -> int | None:
    """First tick ``>= from_index`` from which ``speed_ratio < fraction`` for ``hold_ticks``."""
    still = speed_ratio < fraction
    run = 0
    for i in range(from_index, len(still)):
        run = run + 1 if still[i] else 0
        if run >= hold_ticks:
            return i - hold_ticks + 1
    return None


def score(trace: Trace, safety: SafetyConfig, state_slack_s: float = 0.0) -> dict[str, Any]:
    """The result record of one scenario (the ``vla-edge faults run`` JSON entry).

    Args:
        state_slack_s: extra time allowed for detection and recovery when the
            states are sampled coarsely (``/diagnostics`` at 1 Hz in ROS runs).
    """
    s = trace.scenario
    exp = s.expected
    if trace.skipped is not None:
        return {
            "passed": None,
            "skipped": trace.skipped,
            "fault": s.fault,
            "detected": None,
            "time_to_detect_ms": None,
            "time_to_halt_ms": None,
            "peak_velocity": None,
            "peak_acceleration": None,
            "peak_jerk": None,
            "limit_violations": None,
            "recovered": None,
            "time_to_recover_ms": None,
            "failures": [],
            "info": trace.info,
        }
    a = trace.arrays()
    t = a["t_s"]
    dt = trace.dt_s
    n = len(t)
    start = int(np.searchsorted(t, s.start_s - TIME_EPS_S))
    end = n if s.end_s is None else int(np.searchsorted(t, s.end_s - TIME_EPS_S))
    severity = observed_severity(a)

    # detection
    reflect = severity > 0
    reflect |= a["controller_rejected"] > (a["controller_rejected"][start - 1] if start else 0)
    reflect |= a["safety_rejected"] > (a["safety_rejected"][start - 1] if start else 0)
    reflect[:start] = False
    detect_i = _first(reflect)
    detected = detect_i is not None
    time_to_detect_ms = None if detect_i is None else (t[detect_i] - s.start_s) * 1e3

    # a stop declared while the arm keeps following chunks and the safety layer is fine
    false_alarm = (
        (severity >= StopCategory.CAT1.severity) & ~a["holding"] & (a["safety_severity"] == 0)
    )
    false_alarm_ticks = int(np.count_nonzero(false_alarm[start:]))

    window_end = min(n, end + max(1, int(round(0.5 / dt)))) if s.end_s is not None else n
    worst_sev = int(severity[start:window_end].max()) if window_end > start else 0
    worst = _BY_SEVERITY[max(worst_sev, 0)]

    # derivatives of the safe output; ratios to the limits
    limits = safety.limit_arrays()  # the safety output's columns: its joint_names order
    vel_lim = limits.velocity_limit_per_s
    acc_lim = np.maximum(limits.acceleration_limit_per_s2, limits.deceleration_limit_per_s2)
    jerk_lim = limits.jerk_limit_per_s3
    v, acc, jerk = derivatives(a["safe"], dt)
    # finite differences only across consecutive ticks (a real-time recording may miss one)
    # (and only where no sample was lost: ``complete``)
    step_ok = (np.diff(t) <= 1.5 * dt) & a["complete"][1:] & a["complete"][:-1]
    v[~step_ok] = 0.0
    acc[~(step_ok[:-1] & step_ok[1:])] = 0.0
    jerk[~(step_ok[:-2] & step_ok[1:-1] & step_ok[2:])] = 0.0
    max_gap_ms = float(np.max(np.diff(t))) * 1e3 if n > 1 else 0.0
    v_after = v[max(start - 1, 0) :]
    a_after = acc[max(start - 2, 0) :]
    j_after = jerk[max(start - 3, 0) :]
    peak = lambda x: float(np.max(np.abs(x))) if x.size else 0.0  # noqa: E731
    ratio = lambda x, lim: float(np.max(np.abs(x) / lim)) if x.size else 0.0  # noqa: E731

    # halt (only meaningful when a stop is expected)
    speed_ratio = np.concatenate([[0.0], np.max(np.abs(v) / vel_lim, axis=1)])
    hold_ticks = max(1, int(round(HALT_HOLD_S / dt)))
    stop_expected = exp.stop_category != StopCategory.NONE
    if exp.stays_halted and end > start:
        # halted for good: still from this tick until the fault clears
        moving = np.flatnonzero(speed_ratio[start:end] >= HALT_FRACTION)
        first_still = start if moving.size == 0 else start + int(moving[-1]) + 1
        halt_i = first_still if end - first_still >= hold_ticks else None
        stayed = halt_i is not None
    else:
        halt_i = halt_index(speed_ratio, start, hold_ticks)
        stayed = True
    time_to_halt_ms = (
        (t[halt_i] - s.start_s) * 1e3 if halt_i is not None and stop_expected else None
    )

    # position limits (hard) on the output and on the measurement
    lo = limits.position_min
    hi = limits.position_max
    out_safe = np.any((a["safe"] < lo - LIMIT_TOLERANCE) | (a["safe"] > hi + LIMIT_TOLERANCE), 1)
    # measured: revolute joints only (the finger opening is set by contacts, not commanded)
    arm = slice(0, len(lo) - 1)
    meas = a["measured"][:, arm]
    out_meas = np.any(
        (meas < lo[arm] - MEASURED_TOLERANCE) | (meas > hi[arm] + MEASURED_TOLERANCE), 1
    )
    gripper_meas = a["measured"][:, -1]
    gripper_excursion = float(
        max(0.0, np.max(gripper_meas - hi[-1]), np.max(lo[-1] - gripper_meas))
    )
    limit_violations = int(np.count_nonzero(out_safe) + np.count_nonzero(out_meas))

    # recovery
    recovered: bool | None = None
    time_to_recover_ms: float | None = None
    if s.end_s is not None:
        stop_i = min(
            n, int(np.searchsorted(t, s.end_s + exp.recover_within_s + state_slack_s + TIME_EPS_S))
        )
        accepted_at_end = a["accepted"][end - 1] if end > 0 else 0
        ok = (
            (severity[end:stop_i] == 0)
            & ~a["holding"][end:stop_i]
            & (a["accepted"][end:stop_i] > accepted_at_end)
        )
        recovered = bool(np.any(ok)) if stop_i > end else False
        if recovered:
            time_to_recover_ms = (t[end + int(np.argmax(ok))] - s.end_s) * 1e3

    failures: list[str] = []
    if limit_violations:
        failures.append(f"limit_violations = {limit_violations} (bound: 0)")
    for name, x, lim in (
        ("velocity", v_after, vel_lim),
        ("acceleration", a_after, acc_lim),
        ("jerk", j_after, jerk_lim),
    ):
        r = ratio(x, lim)
        if r > 1.0 + 1e-6:
            failures.append(f"peak {name} = {r:.3f} x limit (bound: 1.0)")
    if not exp.accepts(worst):
        accepted = [exp.stop_category.value, *(c.value for c in exp.also_accept)]
        failures.append(f"worst stop category = {worst.value}, expected one of {accepted}")
    if stop_expected:
        if not detected:
            failures.append("fault not detected")
        elif (
            exp.max_detect_s is not None
            and time_to_detect_ms > (exp.max_detect_s + state_slack_s) * 1e3 + 1e-6
        ):
            failures.append(
                f"time_to_detect_ms = {time_to_detect_ms:.0f} exceeds max_detect_s = "
                f"{exp.max_detect_s} (+ state sampling slack {state_slack_s} s)"
            )
    if exp.max_halt_s is not None:
        if time_to_halt_ms is None:
            failures.append("arm did not halt")
        elif time_to_halt_ms > exp.max_halt_s * 1e3 + 1e-6:
            failures.append(
                f"time_to_halt_ms = {time_to_halt_ms:.0f} exceeds max_halt_s = {exp.max_halt_s}"
            )
    if exp.stays_halted and not stayed:
        failures.append("arm not standing still at the end of the fault window")
    if exp.must_recover and not recovered:
        failures.append(f"not recovered within recover_within_s = {exp.recover_within_s}")
    if exp.must_succeed and not trace.success:
        failures.append("task did not succeed (must_succeed)")
    killed = {"inference_crash": "inference", "controller_crash": "controller"}.get(s.fault)
    alive_at_end = trace.info.get("processes_alive_at_end", {})
    dead = [p for p, alive in alive_at_end.items() if not alive and p != killed]
    if dead:
        failures.append(f"processes dead at the end: {dead}")

    return {
        "passed": not failures,
        "fault": s.fault,
        "detected": detected,
        "time_to_detect_ms": time_to_detect_ms,
        "time_to_halt_ms": time_to_halt_ms,
        "peak_velocity": peak(v_after),
        "peak_acceleration": peak(a_after),
        "peak_jerk": peak(j_after),
        "peak_velocity_ratio": ratio(v_after, vel_lim),
        "peak_acceleration_ratio": ratio(a_after, acc_lim),
        "peak_jerk_ratio": ratio(j_after, jerk_lim),
        "peak_measured_velocity": peak(derivatives(a["measured"], dt)[0][max(start - 1, 0) :]),
        "limit_violations": limit_violations,
        "measured_gripper_excursion_m": gripper_excursion,
        "recovered": recovered,
        "time_to_recover_ms": time_to_recover_ms,
        "worst_stop_category": worst.value,
        "expected_stop_category": exp.stop_category.value,
        "declared_stop_while_moving_ticks": false_alarm_ticks,
        "max_sample_gap_ms": max_gap_ms,
        "limiter_ticks_after_fault": int(
            a["safety_limited"][-1] - (a["safety_limited"][start - 1] if start else 0)
        )
        if n
        else 0,
        "stayed_halted": stayed if exp.stays_halted else None,
        "task_success": trace.success,
        "success_time_s": trace.success_time_s,
        "failures": failures,
        "info": trace.info,
    }
