"""The controller under its watchdog: the rules the controller node applies each callback.

ROS-free, so the controller node and the fault harness run the same rules:

* an accepted chunk beats ``chunk`` (now) and ``observation`` (the chunk's
  observation stamp: the freshest observation any chunk was computed from);
* chunks are refused while joint states are lost;
* each tick, a category-1 expiry stops the plan (velocity ramp to a hold) and
  a clock jump re-bases every heartbeat on the new clock.
"""

from __future__ import annotations

import numpy as np

from vla_edge.control.controller import Controller
from vla_edge.control.watchdog import Watchdog
from vla_edge.core.stop import StopCategory
from vla_edge.core.types import ActionChunk, JointCommand


def joint_states_lost(watchdog: Watchdog, now_s: float) -> bool:
    """Whether the ``joint_state`` heartbeat has expired (chunks are then refused)."""
    return "joint_state" in watchdog.expired(now_s)


def accept_chunk(
    controller: Controller, watchdog: Watchdog, chunk: ActionChunk, now_s: float
) -> None:
    """Submit ``chunk`` and beat ``chunk`` and ``observation``.

    Raises:
        ChunkRejectedError: from :meth:`Controller.submit` (no heartbeat then).
    """
    controller.submit(chunk, now_s)
    watchdog.beat("chunk", now_s)
    watchdog.beat("observation", chunk.t_obs_s)


def supervised_step(
    controller: Controller,
    watchdog: Watchdog,
    now_s: float,
    measured_positions: np.ndarray | None,
) -> JointCommand:
    """One control tick: stop on a category-1 expiry, step, re-base after a clock jump.

    A tick that jumps the clock (or whose clock is not finite) skips the
    watchdog: its heartbeats are on the old clock; the step holds instead.
    """
    if (
        not controller.is_clock_jump(now_s)
        and watchdog.check(now_s).severity >= StopCategory.CAT1.severity
    ):
        controller.stop(now_s)
    command = controller.step(now_s, measured_positions=measured_positions)
    if controller.clock_jumped:
        watchdog.restart(now_s)
    return command
