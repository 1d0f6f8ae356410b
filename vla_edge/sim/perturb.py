"""Perturbed execution of expert demonstrations (DART-style noise injection).

A policy trained on clean demonstrations only ever sees states on the
expert's own path; its small errors in closed loop take it to states no
demonstration shows, and nothing teaches it the way back. Injecting noise
into what is *executed* while recording what the expert *commands* fixes
that (Laskey et al., "DART: Noise Injection for Robust Imitation Learning",
2017): the arm wanders off the nominal path, the cameras and the joint state
show where it really is, and every recorded target is the expert's plan,
which pulls back to that path.

The offset is a per-joint Ornstein-Uhlenbeck process, advanced once per
action step, scaled by a gate that follows the expert's current plan
segment: full noise in free motion (approach, carry), fading to zero where
precision is the task (the last part of a descent, the close, the release,
the push itself) so that the demonstration still succeeds.
"""

from __future__ import annotations

import math

import numpy as np

from vla_edge.config.models import DEFAULT_DT_ACTION_S
from vla_edge.core.errors import ConfigError

DEFAULT_STD_RAD = (0.03, 0.03, 0.03, 0.01, 0.03, 0.2)
"""Stationary std of the executed offset per arm joint at scale 1 (rad): about
1.5 cm at the hand for the large joints, 11 degrees of hand heading (joint 6);
``scale`` multiplies it."""

DEFAULT_TAU_S = 0.5
"""Correlation time of the offset: it drifts like a policy's error, not like sensor noise."""

MAX_SCALE = 4.0

# gate per plan-segment label: "full" 1, "down" 1 - progress, "up" progress, "off" 0
_GATES = {
    "start": "up",
    "approach": "full",
    "descend": "down",
    "close": "off",
    "settle": "off",
    "lift": "up",
    "raise": "full",
    "carry": "full",
    "lower": "down",
    "open": "off",
    "retreat": "up",
    "push": "off",
    "hold": "full",
}


def segment_gate(label: str, progress: float) -> float:
    """Noise gate in [0, 1] for a plan segment ``label`` at ``progress`` in [0, 1].

    Raises:
        ConfigError: ``label`` is not a segment the expert plans.
    """
    kind = _GATES.get(label)
    if kind is None:
        raise ConfigError(f"segment label {label!r}: expected one of {sorted(_GATES)}")
    s = min(max(float(progress), 0.0), 1.0)
    return {"full": 1.0, "down": 1.0 - s, "up": s, "off": 0.0}[kind]


class ExecutionPerturbation:
    """Smooth per-joint offsets added to executed arm targets (never to recorded ones).

    Args:
        scale: multiplies :data:`DEFAULT_STD_RAD` (0: no perturbation).
        rng: the episode's random generator.
        dt_action_s: time between two calls of :meth:`step`.

    Raises:
        ConfigError: a scale outside ``[0, MAX_SCALE]`` or a non-positive time.
    """

    def __init__(
        self, scale: float, rng: np.random.Generator, dt_action_s: float = DEFAULT_DT_ACTION_S
    ) -> None:
        if not 0.0 <= scale <= MAX_SCALE:
            raise ConfigError(f"perturbation scale = {scale}: expected 0 <= scale <= {MAX_SCALE}")
        if not dt_action_s > 0.0:
            raise ConfigError(f"perturbation dt_action_s = {dt_action_s}: must be > 0")
        self.scale = float(scale)
        self.std_rad = self.scale * np.asarray(DEFAULT_STD_RAD, dtype=np.float64)
        self.rng = rng
        self.decay = math.exp(-dt_action_s / DEFAULT_TAU_S)
        self._state = np.zeros_like(self.std_rad)

    @property
    def active(self) -> bool:
        """Whether any joint is perturbed."""
        return bool(np.any(self.std_rad > 0.0))

    def step(self, gate: float) -> np.ndarray:
        """Advance one action step; return the offset ``[n_joints]`` to execute now."""
        shock = self.rng.standard_normal(self._state.shape)
        self._state = self.decay * self._state + math.sqrt(1.0 - self.decay**2) * shock
        return float(gate) * self.std_rad * self._state


__all__ = ["DEFAULT_STD_RAD", "DEFAULT_TAU_S", "ExecutionPerturbation", "segment_gate"]
