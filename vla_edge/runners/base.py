"""The seam between the control side and any policy backend."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, TypeVar, runtime_checkable

import numpy as np

from vla_edge.config.models import DEFAULT_NOISE_SCALE
from vla_edge.core.types import ActionChunk, Observation


def start_noise(
    rng: np.random.Generator, horizon: int, action_dim: int, scale: float = DEFAULT_NOISE_SCALE
) -> np.ndarray:
    """``[horizon, action_dim]`` float32: ``scale`` × standard normal draws from ``rng``.

    Every caller that passes noise to ``Runner.infer`` draws it here; the draws
    consumed from ``rng`` do not depend on ``scale``.
    """
    return (rng.standard_normal((horizon, action_dim)) * scale).astype(np.float32)


@dataclass(frozen=True)
class RunnerSpec:
    """What a runner consumes and produces.

    Attributes:
        joint_names: names of the ``A`` action dimensions (joints then gripper).
        chunk_horizon: ``H`` steps per chunk.
        dt_action_s: time between two steps of a chunk.
        cameras: camera names the runner expects, in order.
        image_height: expected image height in pixels.
        image_width: expected image width in pixels.
        supports_prefix: whether ``infer`` honours ``prefix_actions``.
        model_action_dim: width of the model's actions when it is padded past
            the robot's ``A`` (π0: 32); ``None`` when it is ``A``.
        fits_images: whether ``infer`` fits images of any size to
            ``image_height x image_width`` itself (openpi's resize_with_pad);
            otherwise they must arrive at that size.
    """

    joint_names: tuple[str, ...]
    chunk_horizon: int
    dt_action_s: float
    cameras: tuple[str, ...]
    image_height: int
    image_width: int
    supports_prefix: bool = False
    model_action_dim: int | None = None
    fits_images: bool = False

    @property
    def action_dim(self) -> int:
        """``A``."""
        return len(self.joint_names)

    @property
    def noise_dim(self) -> int:
        """Width of the flow-matching noise ``infer`` takes: the model's action width."""
        return self.model_action_dim if self.model_action_dim is not None else self.action_dim


@dataclass(frozen=True)
class NativeSpec:
    """The policy's own input and output, which a runner's native path takes and returns.

    A runner whose policy reads a state other than the robot's joints (openpi
    LIBERO's end-effector pose) has one (:meth:`ExportedRunner.infer_native
    <vla_edge.runners.exported.ExportedRunner.infer_native>`): the state in, the
    un-normalised actions out, both in the policy's units.

    Attributes:
        state_space: the state space's kind (``eef_pose``).
        state_names: each state dimension's name, in order.
        action_dim: the width of the policy's own actions (openpi LIBERO: 7).
    """

    state_space: str
    state_names: tuple[str, ...]
    action_dim: int

    @property
    def state_dim(self) -> int:
        """``S``."""
        return len(self.state_names)


@dataclass
class PolicyChunk:
    """``H`` steps of a policy's own actions, computed from the observation at ``t_obs_s``.

    Attributes:
        t_obs_s: stamp of the observation it was computed from.
        dt_action_s: time between two steps.
        actions: ``[H, A]`` float64, un-normalised: the policy's units (openpi LIBERO:
            end-effector delta 6 and gripper 1), not joint targets.
        timings_ms: per-stage wall time of the inference that produced it.
    """

    t_obs_s: float
    dt_action_s: float
    actions: np.ndarray
    timings_ms: dict[str, float] = field(default_factory=dict)


@runtime_checkable
class Runner(Protocol):
    """Turns an observation into an action chunk stamped with the observation time."""

    spec: RunnerSpec

    def infer(
        self,
        obs: Observation,
        noise: np.ndarray | None = None,
        prefix_actions: np.ndarray | None = None,
        prefix_len: int = 0,
    ) -> ActionChunk:
        """Compute a chunk from ``obs``.

        Args:
            obs: the observation; the chunk's ``t_obs_s`` is ``obs.stamp_s``.
            noise: optional explicit ``[H, A]`` flow-matching noise (parity runs).
            prefix_actions: optional ``[H, A]`` actions that will execute while
                this inference runs; the first ``prefix_len`` rows are binding.
            prefix_len: number of binding prefix rows (0 = none).

        Returns:
            The chunk, with ``timings_ms`` filled per stage.

        Raises:
            InvalidObservationError: wrong cameras, image size, dtype or non-finite state.
        """
        ...

    def close(self) -> None:
        """Release resources."""
        ...


@runtime_checkable
class NativeRunner(Runner, Protocol):
    """A ``Runner`` that also runs the policy in its own units (state in, actions out)."""

    native_spec: NativeSpec

    def infer_native(self, obs: Observation, noise: np.ndarray | None = None) -> PolicyChunk:
        """The policy's own actions for ``obs``, whose state is the policy's own state.

        Raises:
            InvalidObservationError: a bad image or instruction, or a state that is not
                ``native_spec.state_dim`` finite numbers.
        """
        ...


# Distinct instructions whose embeddings a runner keeps; beyond it the oldest is
# dropped (clients of a server could otherwise grow its memory without bound).
MAX_CACHED_INSTRUCTIONS = 256

_V = TypeVar("_V")


def cache_put(cache: dict[str, _V], key: str, value: _V) -> None:
    """``cache[key] = value``, dropping the oldest entry when the cache is full."""
    if key not in cache and len(cache) >= MAX_CACHED_INSTRUCTIONS:
        del cache[next(iter(cache))]
    cache[key] = value
