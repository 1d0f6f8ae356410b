"""The executed-prefix input of the ``prefix`` merge strategy, from the controller's plan.

The controller publishes its remaining plan (positions on the ``dt_action_s``
grid from the plan's stamp). A new chunk's step ``i`` is the target for
``t_obs + i * dt``; the steps that will already have executed when the chunk
lands (``t_obs + i * dt <= now + expected_delay``) are binding, so the policy
continues what the arm is doing instead of jumping.

The plan's columns become the policy's prefix input as they are, so a plan is
used only when its joint names equal the policy's, order included
(:func:`check_plan_joints`). At most ``H - 1`` rows are binding: the runners
refuse ``prefix_len == H`` (a chunk made only of the prefix).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from vla_edge.core.clock import TIME_EPS_S
from vla_edge.core.errors import JointMismatchError
from vla_edge.core.types import ActionChunk


def check_plan_joints(plan: ActionChunk, joint_names: Sequence[str]) -> None:
    """Refuse a plan whose joints are not the policy's ``joint_names``, in that order.

    Raises:
        JointMismatchError: the names differ, or are the same in another order.
    """
    if tuple(plan.joint_names) != tuple(joint_names):
        raise JointMismatchError(
            f"plan joint_names = {list(plan.joint_names)}, expected the policy's "
            f"{list(joint_names)} (same order)"
        )


def prefix_from_plan(
    plan: ActionChunk | None,
    t_obs_s: float,
    horizon: int,
    dt_action_s: float,
    now_s: float,
    expected_delay_s: float,
) -> tuple[np.ndarray | None, int]:
    """Resample ``plan`` onto the new chunk's grid and count its binding rows.

    Args:
        plan: the controller's remaining plan (``None`` or empty while holding).
        t_obs_s: stamp of the observation the new chunk is computed from.
        horizon: ``H`` of the new chunk.
        dt_action_s: step of the new chunk.
        now_s: when inference starts.
        expected_delay_s: expected inference latency.

    Returns:
        ``(prefix [H, A], prefix_len)``; ``(None, 0)`` without a usable plan.
        Rows past the plan's end repeat its last row; only rows inside the plan
        and due before ``now_s + expected_delay_s`` are binding, and at most
        ``horizon - 1`` of them.
    """
    if plan is None or plan.horizon == 0:
        return None, 0
    plan_times_s = plan.step_times_s()
    positions = np.asarray(plan.positions, dtype=np.float64)
    times_s = t_obs_s + dt_action_s * np.arange(horizon)
    prefix = np.empty((horizon, positions.shape[1]))
    for j in range(positions.shape[1]):
        prefix[:, j] = np.interp(times_s, plan_times_s, positions[:, j])
    due_s = now_s + max(expected_delay_s, 0.0)
    inside = times_s <= plan_times_s[-1] + TIME_EPS_S
    due = times_s <= due_s + TIME_EPS_S
    binding = inside & due
    prefix_len = int(np.argmin(binding)) if not np.all(binding) else horizon
    prefix_len = min(prefix_len, horizon - 1)  # the runners need 0 <= prefix_len < H
    if not math.isfinite(float(np.sum(prefix))):
        return None, 0
    return prefix, prefix_len
