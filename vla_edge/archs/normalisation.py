"""The manifest's ``normalisation`` section and the numpy codec it declares (no torch).

Each architecture brings its own formula and epsilon; the runners apply the one
the manifest declares, in float64, to the state and to the first dimensions of
the chunk, each part at its own width: the state at its state space's ``S``
(``N = len(joint_names)`` for joint positions, 8 for openpi LIBERO's end-effector
pose), the chunk at ``A`` (``N`` without an action space, the action space's width
with one):

* ``mean_std``: ``(x - mean) / (std + epsilon)``, inverse ``x * (std + epsilon) + mean``
  (the bundled model: epsilon 0; openpi's π0: 1e-6);
* ``quantile``: ``(x - q01) / (q99 - q01 + epsilon) * 2 - 1``, inverse
  ``(x + 1) / 2 * (q99 - q01 + epsilon) + q01`` (openpi's π0.5).

``delta_actions[j]`` makes dimension ``j`` of the chunk relative to state
dimension ``j`` before normalising (and absolute again after decoding), as
openpi's ``DeltaActions`` does, so ``j < S``; ``actions.low`` / ``actions.high``,
when given, clip the decoded absolute targets; ``state.clip``, when given, clips
dimension ``j`` of the normalised state to [-1, 1] where ``clip[j]`` is true
(GR00T's ``clip_outliers``; absent: no clip). Section::

    {"kind": "mean_std", "epsilon": 0.0,
     "state": {"mean": [S], "std": [S], "clip": [S bools]},
     "actions": {"mean": [A], "std": [A], "low": [A], "high": [A]},
     "delta_actions": [A bools]}

(``quantile``: ``q01`` and ``q99`` in place of ``mean`` and ``std``.)
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vla_edge.core.errors import ManifestMismatchError

NO_BOUND = float(np.finfo(np.float64).max)
"""``actions.low`` / ``actions.high`` of a dimension that is not bounded (finite, as the
schema wants)."""

NORMALISATION_KINDS = ("mean_std", "quantile")
_STAT_NAMES = {"mean_std": ("mean", "std"), "quantile": ("q01", "q99")}


class HostCodec:
    """States and absolute chunks to the model's normalised space and back (float64 maths).

    The same interface as :class:`vla_edge.archs.bundled.normalize.ActionCodec`, which
    it reproduces bit for bit for ``mean_std`` with ``epsilon = 0``.
    """

    def __init__(
        self,
        kind: str,
        epsilon: float,
        state: dict[str, np.ndarray],
        actions: dict[str, np.ndarray],
        delta_actions: np.ndarray,
        low: np.ndarray | None = None,
        high: np.ndarray | None = None,
        state_clip: np.ndarray | None = None,
    ) -> None:
        self.kind = kind
        self.epsilon = float(epsilon)
        self.state = state
        self.actions = actions
        self.delta_mask = np.asarray(delta_actions, dtype=bool)
        self.low, self.high = low, high
        self.state_clip = None if state_clip is None else np.asarray(state_clip, dtype=bool)

    def _forward(self, x: np.ndarray, stats: dict[str, np.ndarray]) -> np.ndarray:
        if self.kind == "mean_std":
            return (x - stats["mean"]) / (stats["std"] + self.epsilon)
        return (x - stats["q01"]) / (stats["q99"] - stats["q01"] + self.epsilon) * 2.0 - 1.0

    def _inverse(self, x: np.ndarray, stats: dict[str, np.ndarray]) -> np.ndarray:
        if self.kind == "mean_std":
            return x * (stats["std"] + self.epsilon) + stats["mean"]
        return (x + 1.0) / 2.0 * (stats["q99"] - stats["q01"] + self.epsilon) + stats["q01"]

    @property
    def state_dim(self) -> int:
        """``S``: the state statistics' width."""
        return int(next(iter(self.state.values())).size)

    @property
    def action_dim(self) -> int:
        """``A``: the action statistics' width."""
        return int(self.delta_mask.size)

    def _offset(self, state: np.ndarray) -> np.ndarray:
        """``[..., A]``: the state on the delta dimensions, 0 elsewhere.

        The state's first ``A`` dimensions (``S >= A``) or the state padded with zeros
        (``S < A``; :func:`codec_from_section` refuses a delta dimension ``>= S``).
        """
        state = np.asarray(state, dtype=np.float64)
        extra = state.shape[-1] - self.action_dim
        if extra > 0:
            state = state[..., : self.action_dim]
        elif extra < 0:
            state = np.concatenate([state, np.zeros((*state.shape[:-1], -extra))], axis=-1)
        return np.where(self.delta_mask, state, 0.0)

    def normalize_state(self, state: np.ndarray) -> np.ndarray:
        """``[..., S]`` state -> normalised state (float32), clipped where ``state.clip`` says."""
        normalised = self._forward(np.asarray(state, dtype=np.float64), self.state)
        if self.state_clip is not None:
            normalised = np.where(self.state_clip, np.clip(normalised, -1.0, 1.0), normalised)
        return normalised.astype(np.float32)

    def to_relative(self, actions: np.ndarray, state: np.ndarray) -> np.ndarray:
        """Subtract the state from the delta dimensions of a chunk ``[..., H, A]``."""
        return np.asarray(actions, dtype=np.float64) - self._offset(state)[..., None, :]

    def encode_actions(self, actions: np.ndarray, state: np.ndarray) -> np.ndarray:
        """Absolute chunk ``[..., H, A]`` with state ``[..., S]`` -> normalised chunk (float32)."""
        return self._forward(self.to_relative(actions, state), self.actions).astype(np.float32)

    def decode_actions(self, actions_norm: np.ndarray, state: np.ndarray) -> np.ndarray:
        """Normalised chunk ``[..., H, A]`` with state ``[..., S]`` -> absolute chunk (float64)."""
        rel = self._inverse(np.asarray(actions_norm, dtype=np.float64), self.actions)
        actions = rel + self._offset(state)[..., None, :]
        if self.low is not None and self.high is not None:
            actions = np.clip(actions, self.low, self.high)
        return actions


def _vector(section: dict[str, Any], field: str, key: str, n: int | None, why: str) -> np.ndarray:
    """``section[key]``: finite, ``n`` long (``None``: any non-empty length)."""
    if key not in section:
        raise ManifestMismatchError(f"field normalisation.{field}.{key} is missing")
    try:
        arr = np.asarray(section[key], dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ManifestMismatchError(
            f"field normalisation.{field}.{key} is not a list of numbers: {exc}"
        ) from exc
    if arr.ndim != 1 or arr.size == 0 or (n is not None and arr.shape != (n,)):
        expected = f"({n},)" if n is not None else "(S,) with S >= 1"
        raise ManifestMismatchError(
            f"field normalisation.{field}.{key} has shape {arr.shape}, expected {expected} ({why})"
        )
    if not np.all(np.isfinite(arr)):
        raise ManifestMismatchError(
            f"field normalisation.{field}.{key} = {arr.tolist()} is not finite"
        )
    return arr


def codec_from_section(section: Any, *, state_dim: int | None, action_dim: int | None) -> HostCodec:
    """Validate a manifest's ``normalisation`` section; each part at its own width.

    Args:
        state_dim: the state's ``S`` (``None``: the statistics' own length).
        action_dim: the chunk's ``A`` (``None``: the statistics' own length); every
            vector of a part, and ``delta_actions``, must have that part's length.

    Raises:
        ManifestMismatchError: naming the field (``normalisation.kind``,
            ``normalisation.state.std``, ...), its value and the bound.
    """
    if not isinstance(section, dict):
        raise ManifestMismatchError("field normalisation must be an object")
    kind = section.get("kind")
    if kind not in NORMALISATION_KINDS:
        raise ManifestMismatchError(
            f"field normalisation.kind = {kind!r}, expected one of {NORMALISATION_KINDS}"
        )
    epsilon = section.get("epsilon")
    if (
        isinstance(epsilon, bool)
        or not isinstance(epsilon, int | float)
        or not np.isfinite(epsilon)
        or epsilon < 0
    ):
        raise ManifestMismatchError(
            f"field normalisation.epsilon = {epsilon!r}, expected a finite number >= 0"
        )
    lo_name, hi_name = _STAT_NAMES[kind]
    stats: dict[str, dict[str, np.ndarray]] = {}
    widths = {"state": state_dim, "actions": action_dim}
    why = {
        "state": "one per state dimension: the joints, or the state space's",
        "actions": "one per action dimension: the joints, or the action space's",
    }
    for part in ("state", "actions"):
        raw = section.get(part)
        if not isinstance(raw, dict):
            raise ManifestMismatchError(f"field normalisation.{part} is missing")
        lo = _vector(raw, part, lo_name, widths[part], why[part])
        hi = _vector(raw, part, hi_name, lo.size, f"as long as {part}.{lo_name}")
        width = hi + epsilon if kind == "mean_std" else hi - lo + epsilon
        if np.any(width <= 0.0):
            what = (
                f"{hi_name} + epsilon" if kind == "mean_std" else f"{hi_name} - {lo_name} + epsilon"
            )
            raise ManifestMismatchError(
                f"field normalisation.{part}: {what} = {width.tolist()} must be > 0"
            )
        stats[part] = {lo_name: lo, hi_name: hi}
    n_state, n_actions = stats["state"][lo_name].size, stats["actions"][lo_name].size
    delta = section.get("delta_actions")
    if not are_flags(delta, n_actions):
        raise ManifestMismatchError(
            f"field normalisation.delta_actions = {delta!r}, expected {n_actions} booleans "
            "(one per action statistic)"
        )
    beyond = [j for j, d in enumerate(delta) if d and j >= n_state]
    if beyond:
        raise ManifestMismatchError(
            f"field normalisation.delta_actions: dimensions {beyond} are relative to the state, "
            f"which has {n_state} dimensions"
        )
    low = high = None
    actions = section["actions"]
    if "low" in actions or "high" in actions:
        why_clip = f"as long as actions.{lo_name}"
        low, high = (_vector(actions, "actions", k, n_actions, why_clip) for k in ("low", "high"))
        if np.any(low > high):
            raise ManifestMismatchError(
                f"field normalisation.actions.low = {low.tolist()} must be <= "
                f"actions.high = {high.tolist()}"
            )
    return HostCodec(
        kind,
        float(epsilon),
        stats["state"],
        stats["actions"],
        np.asarray(delta),
        low,
        high,
        _state_clip(section["state"], n_state),
    )


def are_flags(value: Any, n: int) -> bool:
    """Whether ``value`` is a list of ``n`` booleans (a section's per-dimension flags)."""
    return isinstance(value, list) and len(value) == n and all(isinstance(v, bool) for v in value)


def _state_clip(state: dict[str, Any], n_state: int) -> np.ndarray | None:
    """``state.clip``: ``n_state`` booleans, or ``None`` when the field is absent."""
    if "clip" not in state:
        return None
    clip = state["clip"]
    if not are_flags(clip, n_state):
        raise ManifestMismatchError(
            f"field normalisation.state.clip = {clip!r}, expected {n_state} booleans (one per "
            "state statistic: true clips that dimension of the normalised state to [-1, 1])"
        )
    return np.asarray(clip, dtype=bool)


def mean_std_section(
    stats: dict[str, list[float]], delta_actions: list[bool], epsilon: float = 0.0
) -> dict[str, Any]:
    """A ``mean_std`` section from the bundled model's ``NormStats.to_dict`` output."""
    actions: dict[str, Any] = {"mean": stats["action_mean"], "std": stats["action_std"]}
    if "action_low" in stats and "action_high" in stats:
        actions |= {"low": stats["action_low"], "high": stats["action_high"]}
    return {
        "kind": "mean_std",
        "epsilon": float(epsilon),
        "state": {"mean": stats["state_mean"], "std": stats["state_std"]},
        "actions": actions,
        "delta_actions": [bool(d) for d in delta_actions],
    }
