"""The ``Env`` seam: what the evaluator and the sim node need from a simulator."""

from __future__ import annotations

from typing import Protocol

import numpy as np

from vla_edge.core.types import Observation


class Env(Protocol):
    """A gymnasium-style robot environment driven by joint-position targets."""

    joint_names: tuple[str, ...]
    control_dt_s: float

    def reset(self, task: str, init_state_id: int) -> Observation:
        """Put the scene in the task's fixed initial state ``init_state_id``."""
        ...

    def step(self, joint_position_targets: np.ndarray) -> None:
        """Apply targets ``[A]`` for one control period and advance the physics."""
        ...

    def observe(self, render: bool = True) -> Observation:
        """Current observation; images only when ``render``."""
        ...

    def success(self) -> bool:
        """Whether the current task's success predicate holds."""
        ...

    @property
    def time_s(self) -> float:
        """Simulated time since reset."""
        ...
