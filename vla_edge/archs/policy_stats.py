"""A policy directory's normalisation: its statistics, made and checked (``policy.yaml``).

Each part (``state``, ``actions``) has its kind (``mean_std``: ``mean``, ``std``;
``quantile``: ``q01``, ``q99``), the section its epsilon and ``delta_actions``
(:mod:`vla_edge.archs.policy_dir` describes the file).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from vla_edge.archs.normalisation import are_flags
from vla_edge.core.errors import (
    NormStatsError,
)

SECTION_STATS = {"mean_std": ("mean", "std"), "quantile": ("q01", "q99")}
"""Each normalisation kind's statistics (low, high)."""


def stat_vector(values: Any, where: str) -> list[float]:
    """A finite, non-empty list of statistics (``where`` names it in errors)."""
    try:
        arr = np.asarray(values, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise NormStatsError(f"{where} is not a list of numbers: {exc}") from exc
    if arr.size == 0:
        raise NormStatsError(f"{where} is empty")
    bad = np.flatnonzero(~np.isfinite(arr))
    if bad.size:
        raise NormStatsError(
            f"{where}[{int(bad[0])}] = {arr[bad[0]]} is not finite ({bad.size} such values)"
        )
    return [float(v) for v in arr]


def check_part(part: Mapping[str, Any], epsilon: float, where: str) -> None:
    """One part (``state`` / ``actions``) of a section: finite, equal lengths, width > 0."""
    kind = part.get("kind")
    if kind not in SECTION_STATS:
        raise NormStatsError(f"{where}.kind = {kind!r}, expected one of {tuple(SECTION_STATS)}")
    lo_name, hi_name = SECTION_STATS[kind]
    lo = np.asarray(stat_vector(part.get(lo_name), f"{where}.{lo_name}"))
    hi = np.asarray(stat_vector(part.get(hi_name), f"{where}.{hi_name}"))
    if lo.shape != hi.shape:
        raise NormStatsError(
            f"{where}: {lo_name} has {lo.size} values and {hi_name} {hi.size}: one per dimension"
        )
    width = hi + epsilon if kind == "mean_std" else hi - lo + epsilon
    bad = np.flatnonzero(width <= 0.0)
    if bad.size:
        what = f"{hi_name} + epsilon" if kind == "mean_std" else f"{hi_name} - {lo_name} + epsilon"
        i = int(bad[0])
        raise NormStatsError(
            f"{where}[{i}]: {what} = {width[i]} must be > 0 (a negative width; "
            f"{bad.size} such dimensions)"
        )
    _check_bounds(part, lo.size, where)


def _check_bounds(part: Mapping[str, Any], n: int, where: str) -> None:
    """A part's optional ``clip`` and ``low`` / ``high``.

    ``clip``: ``n`` booleans; ``low`` / ``high``: ``n`` finite values each, ``low <= high``.
    """
    if "clip" in part:
        clip = part["clip"]
        if not are_flags(clip, n):
            raise NormStatsError(
                f"{where}.clip = {clip!r}: expected {n} booleans (one per statistic: true clips "
                "that dimension of the normalised value to [-1, 1])"
            )
    if ("low" in part) != ("high" in part):
        given, missing = ("low", "high") if "low" in part else ("high", "low")
        raise NormStatsError(f"{where}: {given} without {missing} (the bounds come in pairs)")
    if "low" in part:
        low = np.asarray(stat_vector(part.get("low"), f"{where}.low"))
        high = np.asarray(stat_vector(part.get("high"), f"{where}.high"))
        if low.size != n or high.size != n:
            raise NormStatsError(
                f"{where}: low has {low.size} values and high {high.size}: expected {n}, one "
                "per statistic"
            )
        bad = np.flatnonzero(low > high)
        if bad.size:
            i = int(bad[0])
            raise NormStatsError(f"{where}[{i}]: low = {low[i]} > high = {high[i]}")


def make_normalisation(
    state: dict[str, Any],
    actions: dict[str, Any],
    epsilon: float,
    delta_actions: Sequence[int] | Sequence[bool] | None,
    source: str,
) -> dict[str, Any]:
    """A validated ``normalisation`` section.

    ``kind`` is the parts' common kind, or ``per_part`` when the state and the actions
    are normalised differently (each part always names its own ``kind``).
    """
    for name, part in (("state", state), ("actions", actions)):
        check_part(part, epsilon, f"{source}: {name}")
    n_actions = len(actions[SECTION_STATS[actions["kind"]][0]])
    if delta_actions is None:
        mask = [False] * n_actions
    elif all(isinstance(d, bool) for d in delta_actions):
        mask = [bool(d) for d in delta_actions][:n_actions]
        mask += [False] * (n_actions - len(mask))
    else:
        bad = [i for i in delta_actions if not 0 <= int(i) < n_actions]
        if bad:
            raise NormStatsError(
                f"delta_actions = {list(delta_actions)}: {bad} outside the {n_actions} "
                "action dimensions of the statistics"
            )
        mask = [i in set(delta_actions) for i in range(n_actions)]
    kind = state["kind"] if state["kind"] == actions["kind"] else "per_part"
    return {
        "kind": kind,
        "epsilon": float(epsilon),
        "state": state,
        "actions": actions,
        "delta_actions": mask,
    }


def check_normalisation(section: Any, source: str) -> None:
    """Validate a ``normalisation`` section (finite statistics, every width > 0)."""
    if not isinstance(section, Mapping):
        raise NormStatsError(f"{source}: normalisation must be a mapping")
    epsilon = section.get("epsilon")
    if (
        isinstance(epsilon, bool)
        or not isinstance(epsilon, int | float)
        or not math.isfinite(epsilon)
        or epsilon < 0
    ):
        raise NormStatsError(f"{source}: normalisation.epsilon = {epsilon!r}, expected >= 0")
    kinds = set()
    for part in ("state", "actions"):
        raw = section.get(part)
        if not isinstance(raw, Mapping):
            raise NormStatsError(f"{source}: normalisation.{part} is missing")
        check_part(raw, float(epsilon), f"{source}: normalisation.{part}")
        kinds.add(raw["kind"])
    actions = section["actions"]
    n_actions = len(actions[SECTION_STATS[actions["kind"]][0]])
    delta = section.get("delta_actions")
    if not are_flags(delta, n_actions):
        raise NormStatsError(
            f"{source}: normalisation.delta_actions = {delta!r}, expected {n_actions} booleans "
            "(one per action statistic)"
        )
    expected = kinds.pop() if len(kinds) == 1 else "per_part"
    if section.get("kind") != expected:
        raise NormStatsError(
            f"{source}: normalisation.kind = {section.get('kind')!r}, expected {expected!r} "
            "(the parts' kind)"
        )
