"""Observation, action chunk and joint command: the data every layer passes on."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Observation:
    """What the policy sees at one instant.

    Attributes:
        stamp_s: time the observation was taken (seconds, the clock of the
            controller that will execute the chunk computed from it).
        images: camera name -> ``uint8`` image ``[H, W, 3]`` (RGB).
        state: proprioceptive state ``[A]``: joint positions (rad) then the
            gripper opening (m), in the order of the robot's joint names.
        instruction: the natural-language task instruction.
        image_stamps_s: camera name -> capture stamp of its image; ``stamp_s`` is
            never later than the oldest of them (empty when not known).
    """

    stamp_s: float
    images: dict[str, np.ndarray]
    state: np.ndarray
    instruction: str
    image_stamps_s: dict[str, float] = field(default_factory=dict)


@dataclass
class ActionChunk:
    """``H`` joint-position targets computed from the observation at ``t_obs_s``.

    Step ``i`` is the target for ``t_obs_s + i * dt_action_s``.

    Attributes:
        t_obs_s: stamp of the observation the chunk was computed from.
        dt_action_s: time between two steps.
        joint_names: names of the ``A`` action dimensions.
        positions: ``[H, A]`` targets (rad for joints, m for the gripper).
        timings_ms: per-stage wall time of the inference that produced it.
        time_from_start_s: optional explicit ``[H]`` offsets of each step from
            ``t_obs_s`` (as carried by ``JointTrajectory`` points); when
            ``None`` they are ``i * dt_action_s``.
    """

    t_obs_s: float
    dt_action_s: float
    joint_names: tuple[str, ...]
    positions: np.ndarray
    timings_ms: dict[str, float] = field(default_factory=dict)
    time_from_start_s: np.ndarray | None = None

    @property
    def horizon(self) -> int:
        """Number of steps ``H``."""
        return int(self.positions.shape[0]) if self.positions.ndim >= 1 else 0

    def step_times_s(self) -> np.ndarray:
        """Absolute target time of each step."""
        return self.t_obs_s + self.offsets_s()

    def offsets_s(self) -> np.ndarray:
        """Offset of each step from ``t_obs_s``."""
        if self.time_from_start_s is not None:
            return np.asarray(self.time_from_start_s, dtype=np.float64)
        return self.dt_action_s * np.arange(self.horizon, dtype=np.float64)


@dataclass
class JointCommand:
    """A joint-position command for one control instant."""

    stamp_s: float
    joint_names: tuple[str, ...]
    positions: np.ndarray
