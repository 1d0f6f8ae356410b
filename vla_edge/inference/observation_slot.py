"""The inference node's input: only the newest observation, never a queue.

Callbacks (any thread) overwrite the newest image per camera, instruction,
controller plan and simulator snapshot (joint states keep one second of
history, so the observation pairs the frames with the state measured closest
to their capture time); the worker thread waits until a request is pending and
an observation newer than the last one it used is complete, then takes a
consistent snapshot. Old observations are dropped, so a slow policy never works
on a backlog.

Every image keeps its own capture stamp. An observation is stamped with its
OLDEST part (the oldest image of the policy's cameras, or the joint state paired
with them), so its age is never less than that of the stalest input. No
observation is assembled while a camera the policy reads is not healthy
(:mod:`vla_edge.inference.camera_health`: lost, frozen or skewed).

"Newer" compares stamps. A stamp the slot could never move past is refused:
one more than ``max_future_s`` ahead of the clock would otherwise become the
last used stamp and hold back every correctly stamped frame until the clock
caught up with it. For the same reason the slot re-anchors when its clock steps
(:class:`~vla_edge.core.clock.ClockStepDetector`): stamps, heartbeats and the
last used stamp of the old clock are forgotten, and inference resumes on the
first complete observation of the new clock.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vla_edge.core.clock import ClockStepDetector
from vla_edge.core.errors import ConfigError
from vla_edge.core.types import ActionChunk, Observation
from vla_edge.inference.camera_health import CameraHealth, CameraHealthLimits

# Joint states kept to pair with a frame (1 s at 100 Hz).
STATE_HISTORY = 100
# Defaults of the node's parameters (InferenceConfig) for callers without a config.
DEFAULT_MAX_FUTURE_S = 1.0
DEFAULT_CLOCK_STEP_THRESHOLD_S = 1.0


def required_cameras(policy_cameras: Sequence[str], received: Sequence[str]) -> tuple[str, ...]:
    """The cameras an observation needs: the policy's own (its checkpoint or manifest).

    A policy that reads no image (the scripted expert, which plans from the
    simulator's state) stands in for a vision policy: every received camera.
    A received camera the policy does not read is monitored but may drop.
    """
    return tuple(policy_cameras) if policy_cameras else tuple(received)


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
        cameras: every camera received (each is monitored).
        required: the cameras the policy reads (default: all of ``cameras``);
            an observation holds exactly these.
        clock: the consumer's clock (seconds, the clock the stamps are on).
        limits: the camera-health bounds.
        max_future_s: how far ahead of ``clock`` a stamp may lie.
        clock_step_threshold_s: forward gap between two readings of ``clock``
            that counts as a step.
        chunk_transit_s: after a chunk goes out, requests stamped less than this
            later are dropped too: the controller made them before that chunk
            reached it (delivery, then its next tick). 0 where delivery and merge
            are one step (virtual time).
    """

    def __init__(
        self,
        cameras: Sequence[str],
        required: Sequence[str] | None = None,
        clock: Callable[[], float] = time.time,
        limits: CameraHealthLimits | None = None,
        max_future_s: float = DEFAULT_MAX_FUTURE_S,
        clock_step_threshold_s: float = DEFAULT_CLOCK_STEP_THRESHOLD_S,
        chunk_transit_s: float = 0.0,
    ) -> None:
        if not 0.0 <= chunk_transit_s < float("inf"):
            raise ConfigError(f"chunk_transit_s = {chunk_transit_s}: expected a finite value >= 0")
        self.cameras = tuple(cameras)
        self.chunk_transit_s = float(chunk_transit_s)
        self.required = tuple(self.cameras if required is None else required)
        self._clock = clock
        self.max_future_s = max_future_s
        self._cond = threading.Condition()
        self._clock_steps = ClockStepDetector(clock_step_threshold_s)
        start_s = clock()
        self._clock_steps.step_s(start_s)
        self.health = CameraHealth(
            self.cameras, self.required, limits or CameraHealthLimits(), start_s
        )
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
        self.future_stamps = 0

    @property
    def clock_steps(self) -> int:
        """Clock steps the slot re-anchored on."""
        return self._clock_steps.steps

    def _now_locked(self) -> float:
        """Read the clock; re-anchor after a step; count camera conditions that set in."""
        now_s = self._clock()
        if self._clock_steps.step_s(now_s) != 0.0:
            self._images.clear()
            self._states.clear()
            self._last_used_stamp_s = float("-inf")
            self._ignore_before_s = float("-inf")
            self.health.rebase(now_s)
        self.health.update(now_s)
        return now_s

    def _from_future_locked(self, stamp_s: float, now_s: float) -> bool:
        if stamp_s - now_s > self.max_future_s:
            self.future_stamps += 1
            return True
        return False

    # --- writers (subscription callbacks) -------------------------------------------------

    def put_image(self, camera: str, stamp_s: float, image: np.ndarray) -> None:
        """Newest frame of ``camera`` (an unread older frame is dropped)."""
        with self._cond:
            now_s = self._now_locked()
            if camera not in self.health.cameras or self._from_future_locked(stamp_s, now_s):
                return
            self.health.on_frame(camera, stamp_s, image, now_s)
            previous = self._images.get(camera)
            if previous is not None and previous[0] > self._last_used_stamp_s:
                self.dropped_frames += 1
            self._images[camera] = (stamp_s, image)
            self._cond.notify_all()

    def put_state(self, stamp_s: float, positions: np.ndarray) -> None:
        """Measured joint positions at ``stamp_s`` (a short history is kept)."""
        with self._cond:
            now_s = self._now_locked()
            if self._from_future_locked(stamp_s, now_s):
                return
            self.health.on_joint_state(positions)
            self._states.append((stamp_s, positions))
            self._cond.notify_all()

    def _state_at_locked(self, stamp_s: float) -> tuple[float, np.ndarray]:
        """The joint state measured closest to ``stamp_s`` (the frames' capture time).

        On a tie the newest state wins (``min`` keeps the first minimum, and the
        history is scanned newest first).
        """
        return min(reversed(self._states), key=lambda item: abs(item[0] - stamp_s))

    def put_instruction(self, instruction: str) -> None:
        """The current instruction (already validated as non-empty)."""
        with self._cond:
            self._instruction = instruction
            self._cond.notify_all()

    def restore_instruction(self, refused: str, previous: str) -> bool:
        """Put ``previous`` back if ``refused`` is still the current instruction.

        Returns:
            Whether it was put back (a newer instruction stays).
        """
        with self._cond:
            if self._instruction != refused:
                return False
            self._instruction = previous
            return True

    def put_extra(self, extra: Any) -> None:
        """Backend-specific side input (the simulator snapshot for the expert)."""
        with self._cond:
            self._extra = extra
            self._cond.notify_all()

    def request(self, plan: ActionChunk | None, plan_stamp_s: float) -> None:
        """A chunk is wanted; ``plan`` is the controller's remaining plan (None while holding)."""
        with self._cond:
            self._now_locked()
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
        """Stamp of the complete observation (its oldest part), or None."""
        with self._cond:
            self._now_locked()
            return self._stamp_locked()

    def camera_conditions(self) -> dict[str, str]:
        """Every camera's condition now (``ok``, ``waiting``, ``lost``, ``frozen``, ``skewed``)."""
        with self._cond:
            return self.health.update(self._now_locked())

    def camera_faults(self) -> dict[str, str]:
        """The policy's cameras that are lost, frozen or skewed now, with their condition."""
        with self._cond:
            return self.health.required_faults(self._now_locked())

    def camera_diagnostics(self) -> dict[str, object]:
        """Per-camera values for ``/diagnostics`` (see :meth:`CameraHealth.diagnostics`)."""
        with self._cond:
            return self.health.diagnostics(self._now_locked())

    def _stamp_locked(self) -> float | None:
        if not self._states or self._instruction is None or not self.required:
            return None
        if any(cam not in self._images for cam in self.required):
            return None
        image_s = min(self._images[cam][0] for cam in self.required)
        return min(image_s, self._state_at_locked(image_s)[0])

    def _ready_locked(self) -> bool:
        now_s = self._now_locked()
        stamp = self._stamp_locked()
        return (
            self._requested
            and stamp is not None
            and stamp > self._last_used_stamp_s
            and not self.health.blocking(now_s)
        )

    def take(self, timeout_s: float) -> InferenceInput | None:
        """Wait up to ``timeout_s`` for a request and a new complete, healthy observation.

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
            image_s = min(self._images[cam][0] for cam in self.required)
            obs = Observation(
                stamp_s=stamp,
                images={cam: self._images[cam][1] for cam in self.required},
                state=self._state_at_locked(image_s)[1].copy(),
                instruction=self._instruction,
                image_stamps_s={cam: self._images[cam][0] for cam in self.required},
            )
            return InferenceInput(obs, self._plan, self._plan_stamp_s, self._extra)

    def mark_published(self, publish_s: float) -> None:
        """A chunk went out at ``publish_s``: requests made before it could arrive are stale.

        The controller asked for them before it could have merged that chunk
        (stamped before ``publish_s + chunk_transit_s``), so they are dropped,
        pending or still in flight, instead of causing an extra inference. A
        controller that still needs a chunk after merging asks again on its next
        tick.
        """
        with self._cond:
            self._now_locked()
            self._ignore_before_s = publish_s + self.chunk_transit_s
            if self._requested and (self._plan_stamp_s or float("-inf")) < self._ignore_before_s:
                self._requested = False
