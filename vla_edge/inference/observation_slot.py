"""The inference node's input: only the newest observation, never a queue.

Callbacks (any thread) overwrite the newest image per camera, instruction,
controller plan and simulator snapshot (joint states keep one second of
history, so the observation pairs the frames with the state measured closest
to their capture time); the worker thread waits
until a request is pending and an observation newer than the last one it used
is complete, then takes a consistent snapshot. Old observations are dropped,
so a slow policy never works on a backlog.

"Newer" compares stamps, so the caller must refuse stamps the slot could never
move past: unset (0) ones and ones from the future (see
:func:`vla_edge.nodes.conversions.checked_stamp_s`). A frame stamped ahead of
the clock would otherwise become the last used stamp and hold back every
correctly stamped frame until the clock caught up with it.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vla_edge.core.types import ActionChunk, Observation

# Joint states kept to pair with a frame (1 s at 100 Hz).
STATE_HISTORY = 100


@dataclass
class InferenceInput:
    """What the worker takes for one inference."""

    observation: Observation
    plan: ActionChunk | None
    plan_stamp_s: float | None
    extra: Any


class ObservationSlot:
    """Thread-safe newest-only store of the policy inputs.

    Args:
        cameras: the cameras an observation needs (all of them).
    """

    def __init__(self, cameras: Sequence[str]) -> None:
        self.cameras = tuple(cameras)
        self._cond = threading.Condition()
        self._images: dict[str, tuple[float, np.ndarray]] = {}
        self._states: deque[tuple[float, np.ndarray]] = deque(maxlen=STATE_HISTORY)
        self._instruction: str | None = None
        self._plan: ActionChunk | None = None
        self._plan_stamp_s: float | None = None
        self._extra: Any = None
        self._requested = False
        self._last_used_stamp_s = float("-inf")
        self._closed = False
        self._ignore_before_s = float("-inf")
        self.dropped_frames = 0
        self.stale_requests = 0

    # --- writers (subscription callbacks) -------------------------------------------------

    def put_image(self, camera: str, stamp_s: float, image: np.ndarray) -> None:
        """Newest frame of ``camera`` (an unread older frame is dropped)."""
        with self._cond:
            previous = self._images.get(camera)
            if previous is not None and previous[0] > self._last_used_stamp_s:
                self.dropped_frames += 1
            self._images[camera] = (stamp_s, image)
            self._cond.notify_all()

    def put_state(self, stamp_s: float, positions: np.ndarray) -> None:
        """Measured joint positions at ``stamp_s`` (a short history is kept)."""
        with self._cond:
            self._states.append((stamp_s, positions))
            self._cond.notify_all()

    def _state_at_locked(self, stamp_s: float) -> np.ndarray:
        """The joint state measured closest to ``stamp_s`` (the frames' capture time).

        On a tie the newest state wins (``min`` keeps the first minimum, and the
        history is scanned newest first).
        """
        return min(reversed(self._states), key=lambda item: abs(item[0] - stamp_s))[1]

    def put_instruction(self, instruction: str) -> None:
        """The current instruction (already validated as non-empty)."""
        with self._cond:
            self._instruction = instruction
            self._cond.notify_all()

    def put_extra(self, extra: Any) -> None:
        """Backend-specific side input (the simulator snapshot for the expert)."""
        with self._cond:
            self._extra = extra
            self._cond.notify_all()

    def request(self, plan: ActionChunk | None, plan_stamp_s: float) -> None:
        """A chunk is wanted; ``plan`` is the controller's remaining plan (None while holding)."""
        with self._cond:
            if plan_stamp_s < self._ignore_before_s:
                self.stale_requests += 1
                return
            self._plan = plan
            self._plan_stamp_s = plan_stamp_s
            self._requested = True
            self._cond.notify_all()

    def close(self) -> None:
        """Wake the worker for shutdown."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    # --- reader (the worker) --------------------------------------------------------------

    def observation_stamp_s(self) -> float | None:
        """Stamp of the complete observation (the oldest of its camera frames), or None."""
        with self._cond:
            return self._stamp_locked()

    def _stamp_locked(self) -> float | None:
        if not self._states or self._instruction is None:
            return None
        if any(cam not in self._images for cam in self.cameras):
            return None
        if not self.cameras:
            return None
        return min(self._images[cam][0] for cam in self.cameras)

    def _ready_locked(self) -> bool:
        stamp = self._stamp_locked()
        return self._requested and stamp is not None and stamp > self._last_used_stamp_s

    def take(self, timeout_s: float) -> InferenceInput | None:
        """Wait up to ``timeout_s`` for a request and a new complete observation.

        Returns:
            The snapshot (the request is consumed), or None on timeout / close.
        """
        with self._cond:
            if not self._cond.wait_for(lambda: self._closed or self._ready_locked(), timeout_s):
                return None
            if self._closed:
                return None
            stamp = self._stamp_locked()
            assert stamp is not None and self._instruction is not None
            self._requested = False
            self._last_used_stamp_s = stamp
            obs = Observation(
                stamp_s=stamp,
                images={cam: self._images[cam][1] for cam in self.cameras},
                state=self._state_at_locked(stamp).copy(),
                instruction=self._instruction,
            )
            return InferenceInput(obs, self._plan, self._plan_stamp_s, self._extra)

    def mark_published(self, publish_s: float) -> None:
        """A chunk went out at ``publish_s``: requests made before it are stale.

        The controller asked for them before it could have merged that chunk, so
        they are dropped (pending or still in flight) instead of causing an extra
        inference.
        """
        with self._cond:
            self._ignore_before_s = publish_s
            if self._requested and (self._plan_stamp_s or float("-inf")) < publish_s:
                self._requested = False
