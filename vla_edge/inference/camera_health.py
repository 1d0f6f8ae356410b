"""Per-camera health: each camera's own heartbeat, freeze and stamp-skew conditions.

Every frame carries its own capture stamp. A camera is, at a given time:

* ``waiting`` — no frame yet (start-up);
* ``lost`` — no frame received for ``camera_timeout_s`` (the camera's heartbeat);
* ``frozen`` — frames still arrive, but either their stamp has not advanced for
  ``camera_timeout_s`` (a driver republishing its last frame), or their pixels
  have stayed identical for ``camera_freeze_s`` while the scene moved (a stuck
  sensor behind a driver that restamps). "The scene moved" means a joint moved
  more than :data:`SCENE_MOTION` since this camera's pixels last changed: a
  still scene seen by a noise-free (simulated) camera is not a freeze, and
  neither is a small motion that a low-resolution camera does not resolve
  (another camera's pixels changing is no evidence: the wrist camera sees
  motion that the scene camera does not);
* ``skewed`` — the newest stamps of the required cameras disagree by more than
  ``max_camera_skew_s``; the one whose stamp lies farthest from now (behind
  or ahead) is named;
* ``ok`` otherwise.

A required camera that is not ``ok`` blocks inference (no observation is
assembled from it), so the controller's buffer runs out into a hold and its
observation heartbeat ends in a category-1 stop, as when every camera is lost.
Each onset of a condition is counted per camera (``<camera>.<condition>``).
After a clock step every heartbeat is re-based on the new clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from vla_edge.config.models import InferenceConfig

OK = "ok"
WAITING = "waiting"
LOST = "lost"
FROZEN = "frozen"
SKEWED = "skewed"
CAMERA_FAULT_CONDITIONS = (LOST, FROZEN, SKEWED)
# Joint motion (rad for revolute joints, m for the gripper) that every camera of the
# arm sees: a camera whose pixels stay identical across it has frozen.
SCENE_MOTION = 0.1


@dataclass(frozen=True)
class CameraHealthLimits:
    """The bounds of the conditions (``config/inference.yaml``)."""

    timeout_s: float = 0.5
    freeze_s: float = 0.5
    max_skew_s: float = 0.3

    @classmethod
    def from_config(cls, config: InferenceConfig) -> CameraHealthLimits:
        """The limits of an inference node's configuration."""
        return cls(config.camera_timeout_s, config.camera_freeze_s, config.max_camera_skew_s)


@dataclass
class _Track:
    """What is known of one camera (receipt times are on the consumer's clock)."""

    stamp_s: float | None = None  # newest capture stamp
    image: np.ndarray | None = None  # pixels of the newest frame
    beat_s: float | None = None  # receipt of the newest frame with a newer stamp
    seen_s: float | None = None  # receipt of any frame
    still_since_s: float | None = None  # receipt of the first repeat of identical pixels
    still_joints: np.ndarray | None = None  # joint positions when the pixels stopped
    scene_moved: bool = False  # the scene moved since the pixels stopped changing
    condition: str = WAITING
    onsets: dict[str, int] = field(default_factory=dict)


class CameraHealth:
    """Tracks every camera's frames and gives each one's condition.

    Args:
        cameras: every camera received (each gets a heartbeat and diagnostics).
        required: the cameras the policy reads (a subset of ``cameras``); only
            these block inference and take part in the skew check.
        limits: the bounds of the conditions.
        start_s: the consumer's clock at start-up.
    """

    def __init__(
        self,
        cameras: Sequence[str],
        required: Sequence[str],
        limits: CameraHealthLimits,
        start_s: float,
    ) -> None:
        missing = [cam for cam in required if cam not in cameras]
        if missing:
            raise ValueError(f"required cameras {missing} are not among the cameras {cameras}")
        self.cameras = tuple(cameras)
        self.required = tuple(required)
        self.limits = limits
        self._tracks = {cam: _Track() for cam in self.cameras}
        self._start_s = start_s
        self._joints: np.ndarray | None = None

    # --- inputs ---------------------------------------------------------------------------

    def on_frame(self, camera: str, stamp_s: float, image: np.ndarray, now_s: float) -> bool:
        """A frame of ``camera`` arrived at ``now_s``; whether its stamp is newer (a beat)."""
        track = self._tracks[camera]
        track.seen_s = now_s
        newer = track.stamp_s is None or stamp_s > track.stamp_s
        if newer:
            track.stamp_s = stamp_s
            track.beat_s = now_s
        if track.image is not None and np.array_equal(track.image, image):
            if track.still_since_s is None:
                track.still_since_s = now_s
                track.still_joints = self._joints
                track.scene_moved = False
        else:
            track.still_since_s = None
        track.image = image
        return newer

    def on_joint_state(self, positions: np.ndarray) -> None:
        """The newest measured joint positions (motion that every camera should see)."""
        self._joints = np.asarray(positions, dtype=np.float64)
        for track in self._tracks.values():
            if track.still_since_s is None or track.scene_moved:
                continue
            if track.still_joints is None:
                track.still_joints = self._joints
            elif np.max(np.abs(self._joints - track.still_joints)) > SCENE_MOTION:
                track.scene_moved = True

    def rebase(self, now_s: float) -> None:
        """Re-anchor on a stepped clock: stamps and receipts of the old clock are forgotten.

        Each camera gets one timeout on the new clock to deliver a frame.
        """
        self._start_s = now_s
        for camera, track in self._tracks.items():
            self._tracks[camera] = _Track(condition=track.condition, onsets=track.onsets)

    # --- conditions -----------------------------------------------------------------------

    def update(self, now_s: float) -> dict[str, str]:
        """Every camera's condition at ``now_s``; each new onset of a fault is counted."""
        conditions = {cam: self._own_condition(cam, now_s) for cam in self.cameras}
        skewed = self._skewed_camera(conditions, now_s)
        if skewed is not None:
            conditions[skewed] = SKEWED
        for cam, condition in conditions.items():
            track = self._tracks[cam]
            if condition != track.condition and condition not in (OK, WAITING):
                track.onsets[condition] = track.onsets.get(condition, 0) + 1
            track.condition = condition
        return conditions

    def blocking(self, now_s: float) -> dict[str, str]:
        """The required cameras that are not ``ok`` and their conditions."""
        conditions = self.update(now_s)
        return {cam: conditions[cam] for cam in self.required if conditions[cam] != OK}

    def required_faults(self, now_s: float) -> dict[str, str]:
        """The required cameras in a fault condition (``lost``, ``frozen``, ``skewed``)."""
        blocking = self.blocking(now_s)
        return {cam: c for cam, c in blocking.items() if c in CAMERA_FAULT_CONDITIONS}

    def _own_condition(self, camera: str, now_s: float) -> str:
        track, timeout_s = self._tracks[camera], self.limits.timeout_s
        if track.seen_s is None:
            return LOST if now_s - self._start_s > timeout_s else WAITING
        if now_s - track.seen_s > timeout_s:
            return LOST
        assert track.beat_s is not None
        if now_s - track.beat_s > timeout_s:
            return FROZEN
        if (
            track.still_since_s is not None
            and track.scene_moved
            and now_s - track.still_since_s >= self.limits.freeze_s
        ):
            return FROZEN
        return OK

    def _skewed_camera(self, conditions: dict[str, str], now_s: float) -> str | None:
        stamps: dict[str, float] = {}
        for cam in self.required:
            stamp_s = self._tracks[cam].stamp_s
            if conditions[cam] == OK and stamp_s is not None:
                stamps[cam] = stamp_s
        if len(stamps) < 2 or max(stamps.values()) - min(stamps.values()) <= self.limits.max_skew_s:
            return None
        # the odd one out: the stamp farthest from now (a lagging clock or one running ahead)
        return max(stamps, key=lambda cam: abs(now_s - stamps[cam]))

    # --- reporting ------------------------------------------------------------------------

    def counters(self) -> dict[str, int]:
        """Onsets per camera and condition: ``{"<camera>.<condition>": n}``."""
        return {
            f"{cam}.{condition}": track.onsets.get(condition, 0)
            for cam, track in self._tracks.items()
            for condition in CAMERA_FAULT_CONDITIONS
        }

    def diagnostics(self, now_s: float) -> dict[str, object]:
        """``camera.<name>.{condition,required,age_ms,<condition>}`` for ``/diagnostics``.

        ``age_ms`` is the time since the camera's last heartbeat.
        """
        conditions = self.update(now_s)
        values: dict[str, object] = {}
        for cam, track in self._tracks.items():
            values[f"camera.{cam}.condition"] = conditions[cam]
            values[f"camera.{cam}.required"] = int(cam in self.required)
            values[f"camera.{cam}.age_ms"] = (
                "none" if track.beat_s is None else round((now_s - track.beat_s) * 1e3, 1)
            )
            for condition in CAMERA_FAULT_CONDITIONS:
                values[f"camera.{cam}.{condition}"] = track.onsets.get(condition, 0)
        return values
