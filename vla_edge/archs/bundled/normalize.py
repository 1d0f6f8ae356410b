"""State and action normalisation shared by training, runners and exporters (numpy only).

The exported stages see only normalised tensors; every backend turns an
observation's state and an executed prefix into that space, and the model's
output back into joint targets, with the same :class:`ActionCodec`. It imports
neither torch nor anything heavy, so edge runners can use it as is.

Action representation: for each dimension ``j`` with ``delta_actions[j]`` the
chunk is taken relative to the current state (``a[:, j] - state[j]``), then
every dimension is standardised with the statistics of the training data:
``(x - mean) / std``. Decoded absolute targets are clipped to
``[action_low, action_high]``: the range of the demonstrated targets, widened
by ``RANGE_MARGIN`` of its width on the delta (joint) dimensions and narrowed
by ``ABSOLUTE_INSET`` of its width on the absolute ones. The gripper's
demonstrated 0 and 0.04 m are also its hard limits: a Catmull-Rom (cubic)
interpolation of a step between them overshoots by up to 4/27 of half the step
(7.4 %), and a command a hair outside a hard limit is refused downstream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from vla_edge.core.errors import ConfigError

MIN_STD = 1e-3
"""Lower bound on a standard deviation, so a constant dimension does not blow up."""

RANGE_MARGIN = 0.05
"""Fraction of the demonstrated range added on each side of a delta dimension's clip range."""

ABSOLUTE_INSET = 0.08
"""Fraction of the demonstrated range an absolute dimension's clip range is narrowed by."""


@dataclass(frozen=True)
class NormStats:
    """Mean and standard deviation of the state and of the (delta) actions, per dimension."""

    state_mean: np.ndarray
    state_std: np.ndarray
    action_mean: np.ndarray
    action_std: np.ndarray
    action_low: np.ndarray | None = None
    action_high: np.ndarray | None = None

    def to_dict(self) -> dict[str, list[float]]:
        """JSON-able form (stored in checkpoints and ``manifest.json``)."""
        out = {
            "state_mean": [float(v) for v in self.state_mean],
            "state_std": [float(v) for v in self.state_std],
            "action_mean": [float(v) for v in self.action_mean],
            "action_std": [float(v) for v in self.action_std],
        }
        if self.action_low is not None and self.action_high is not None:
            out["action_low"] = [float(v) for v in self.action_low]
            out["action_high"] = [float(v) for v in self.action_high]
        return out

    @staticmethod
    def from_dict(data: dict[str, Any], action_dim: int) -> NormStats:
        """Validate and build from :meth:`to_dict` output.

        Raises:
            ConfigError: a field is missing, has the wrong length, is non-finite
                or a std is not positive.
        """
        arrays = {}
        for name in ("state_mean", "state_std", "action_mean", "action_std"):
            if name not in data:
                raise ConfigError(f"normalisation stats: field {name} is missing")
            arr = np.asarray(data[name], dtype=np.float64)
            if arr.shape != (action_dim,):
                raise ConfigError(
                    f"normalisation stats: {name} has shape {arr.shape}, expected ({action_dim},)"
                )
            if not np.all(np.isfinite(arr)):
                raise ConfigError(f"normalisation stats: {name} = {arr.tolist()} is not finite")
            if name.endswith("_std") and np.any(arr <= 0.0):
                raise ConfigError(f"normalisation stats: {name} = {arr.tolist()} must be > 0")
            arrays[name] = arr
        if "action_low" in data or "action_high" in data:
            for name in ("action_low", "action_high"):
                arr = np.asarray(data.get(name, []), dtype=np.float64)
                if arr.shape != (action_dim,) or not np.all(np.isfinite(arr)):
                    raise ConfigError(
                        f"normalisation stats: {name} = {arr.tolist()} must hold "
                        f"{action_dim} finite values"
                    )
                arrays[name] = arr
            if np.any(arrays["action_low"] > arrays["action_high"]):
                raise ConfigError(
                    f"normalisation stats: action_low = {arrays['action_low'].tolist()} must be "
                    f"<= action_high = {arrays['action_high'].tolist()}"
                )
        return NormStats(**arrays)

    @staticmethod
    def identity(action_dim: int) -> NormStats:
        """Zero mean, unit std (an untrained model)."""
        zeros, ones = np.zeros(action_dim), np.ones(action_dim)
        return NormStats(zeros, ones, zeros.copy(), ones.copy())


class ActionCodec:
    """Maps states and absolute action chunks to the model's normalised space and back."""

    def __init__(self, stats: NormStats, delta_actions: list[bool] | np.ndarray) -> None:
        self.stats = stats
        self.delta_mask = np.asarray(delta_actions, dtype=bool)
        if self.delta_mask.shape != stats.state_mean.shape:
            raise ConfigError(
                f"delta_actions has {self.delta_mask.size} entries, expected "
                f"{stats.state_mean.size} (the action dimension)"
            )

    def normalize_state(self, state: np.ndarray) -> np.ndarray:
        """``[..., A]`` state -> normalised state (float32)."""
        out = (np.asarray(state, dtype=np.float64) - self.stats.state_mean) / self.stats.state_std
        return out.astype(np.float32)

    def encode_actions(self, actions: np.ndarray, state: np.ndarray) -> np.ndarray:
        """Absolute chunk ``[..., H, A]`` with state ``[..., A]`` -> normalised chunk (float32)."""
        rel = self.to_relative(actions, state)
        return ((rel - self.stats.action_mean) / self.stats.action_std).astype(np.float32)

    def decode_actions(self, actions_norm: np.ndarray, state: np.ndarray) -> np.ndarray:
        """Normalised chunk ``[..., H, A]`` with state ``[..., A]`` -> absolute chunk (float64)."""
        rel = np.asarray(actions_norm, dtype=np.float64) * self.stats.action_std
        rel = rel + self.stats.action_mean
        offset = np.where(self.delta_mask, np.asarray(state, dtype=np.float64), 0.0)
        actions = rel + offset[..., None, :]
        if self.stats.action_low is not None and self.stats.action_high is not None:
            actions = np.clip(actions, self.stats.action_low, self.stats.action_high)
        return actions

    def to_relative(self, actions: np.ndarray, state: np.ndarray) -> np.ndarray:
        """Subtract the state from the delta dimensions of a chunk ``[..., H, A]``."""
        offset = np.where(self.delta_mask, np.asarray(state, dtype=np.float64), 0.0)
        return np.asarray(actions, dtype=np.float64) - offset[..., None, :]


def compute_stats(
    states: np.ndarray, chunks: np.ndarray, delta_actions: list[bool] | np.ndarray
) -> NormStats:
    """Statistics of states ``[N, A]`` and their action chunks ``[N, H, A]``."""
    mask = np.asarray(delta_actions, dtype=bool)
    states = np.asarray(states, dtype=np.float64)
    offset = np.where(mask, states, 0.0)
    absolute = np.asarray(chunks, dtype=np.float64).reshape(-1, states.shape[-1])
    rel = np.asarray(chunks, dtype=np.float64) - offset[:, None, :]
    rel = rel.reshape(-1, rel.shape[-1])
    low, high = absolute.min(axis=0), absolute.max(axis=0)
    margin = np.where(mask, RANGE_MARGIN, -ABSOLUTE_INSET) * (high - low)
    return NormStats(
        state_mean=states.mean(axis=0),
        state_std=np.maximum(states.std(axis=0), MIN_STD),
        action_mean=rel.mean(axis=0),
        action_std=np.maximum(rel.std(axis=0), MIN_STD),
        action_low=low - margin,
        action_high=high + margin,
    )
