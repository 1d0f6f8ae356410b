"""Numpy pre- and post-processing shared by every exported-program runner (no torch).

These functions do exactly what :class:`~vla_edge.runners.torch_runner.TorchRunner`
does around its four stages, in numpy, so the ONNX Runtime and ExecuTorch
runners feed their programs the same tensors as the reference:

* images: ``{camera: [h, w, 3] uint8}`` -> ``[n_cams, 3, h, w]`` float32 in
  [0, 1], cameras in the model's order;
* state: ``[A]`` -> normalised ``[1, A]`` float32 (:class:`ActionCodec`);
* noise: ``[H, A]`` or ``[1, H, A]`` float32, validated (or drawn);
* executed prefix: ``[>= d, A]`` absolute targets -> normalised ``[1, H, A]``
  plus mask ``[1, H]``;
* output: normalised ``[H, A]`` -> absolute joint targets, prefix rows copied
  verbatim.
"""

from __future__ import annotations

import numpy as np

from vla_edge.core.errors import InvalidObservationError
from vla_edge.core.types import Observation
from vla_edge.policy.normalize import ActionCodec
from vla_edge.runners.base import RunnerSpec, start_noise


def images_to_nchw(images: dict[str, np.ndarray], cameras: tuple[str, ...]) -> np.ndarray:
    """Stack validated ``uint8 [h, w, 3]`` images into ``[n_cams, 3, h, w]`` float32 in [0, 1]."""
    stacked = np.stack([images[cam] for cam in cameras])
    nchw = np.ascontiguousarray(stacked.transpose(0, 3, 1, 2)).astype(np.float32)
    return nchw / np.float32(255.0)


def state_input(codec: ActionCodec, state: np.ndarray) -> np.ndarray:
    """Normalised ``[1, A]`` float32 state."""
    return codec.normalize_state(np.asarray(state, dtype=np.float64))[None, :]


def noise_input(
    noise: np.ndarray | None, horizon: int, action_dim: int, rng: np.random.Generator
) -> np.ndarray:
    """``[1, H, A]`` float32 flow-matching start: ``noise`` validated, or drawn from ``rng``.

    Raises:
        InvalidObservationError: ``noise`` has the wrong shape or a non-finite value.
    """
    if noise is None:
        return start_noise(rng, horizon, action_dim)[None]
    arr = np.asarray(noise, dtype=np.float32)
    if arr.shape not in ((horizon, action_dim), (1, horizon, action_dim)):
        raise InvalidObservationError(
            f"noise shape = {arr.shape}, expected ({horizon}, {action_dim})"
        )
    if not np.all(np.isfinite(arr)):
        raise InvalidObservationError("noise holds a non-finite value")
    return np.ascontiguousarray(arr.reshape(1, horizon, action_dim))


def prefix_inputs(
    codec: ActionCodec,
    prefix_actions: np.ndarray | None,
    prefix_len: int,
    state: np.ndarray,
    horizon: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Normalised prefix ``[1, H, A]`` and mask ``[1, H]`` (both float32).

    Raises:
        InvalidObservationError: ``prefix_len`` outside ``0 <= d < H``, missing
            or malformed ``prefix_actions``, or a non-finite prefix value.
    """
    action_dim = codec.delta_mask.size
    if not 0 <= int(prefix_len) < horizon:
        raise InvalidObservationError(
            f"prefix_len = {prefix_len}, expected 0 <= prefix_len < {horizon}"
        )
    prefix_len = int(prefix_len)
    mask = np.zeros((1, horizon), dtype=np.float32)
    actions = np.zeros((1, horizon, action_dim), dtype=np.float32)
    if prefix_len == 0:
        return actions, mask
    if prefix_actions is None:
        raise InvalidObservationError(f"prefix_len = {prefix_len} but prefix_actions is None")
    arr = np.asarray(prefix_actions, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[1] != action_dim or arr.shape[0] < prefix_len:
        raise InvalidObservationError(
            f"prefix_actions shape = {arr.shape}, expected (>= prefix_len={prefix_len}, "
            f"{action_dim})"
        )
    rows = arr[:prefix_len]
    if not np.all(np.isfinite(rows)):
        raise InvalidObservationError("prefix_actions holds a non-finite value")
    padded = np.zeros((horizon, action_dim))
    padded[:prefix_len] = rows
    actions = codec.encode_actions(padded, np.asarray(state, dtype=np.float64))[None]
    mask[0, :prefix_len] = 1.0
    return np.ascontiguousarray(actions, dtype=np.float32), mask


def decode_chunk(
    codec: ActionCodec,
    actions_norm: np.ndarray,
    state: np.ndarray,
    prefix_actions: np.ndarray | None,
    prefix_len: int,
) -> np.ndarray:
    """Absolute ``[H, A]`` float64 targets; the first ``prefix_len`` rows are the given prefix."""
    arr = np.asarray(actions_norm)
    positions = codec.decode_actions(arr.reshape(arr.shape[-2:]), np.asarray(state, np.float64))
    if prefix_len > 0 and prefix_actions is not None:
        positions[:prefix_len] = np.asarray(prefix_actions, dtype=np.float64)[:prefix_len]
    return positions


def validate_observation(obs: Observation, spec: RunnerSpec) -> None:
    """Raise :class:`InvalidObservationError` naming the field, value and bound.

    Shared by every backend (numpy only, so the ONNX / ExecuTorch runners stay
    free of torch).
    """
    if not isinstance(obs.images, dict):
        raise InvalidObservationError(f"images must be a dict, got {type(obs.images).__name__}")
    got, want = sorted(obs.images), sorted(spec.cameras)
    if got != want:
        raise InvalidObservationError(
            f"images has cameras {got} ({len(got)}), expected {want} ({len(want)})"
        )
    shape = (spec.image_height, spec.image_width, 3)
    for cam in spec.cameras:
        img = obs.images[cam]
        if not isinstance(img, np.ndarray):
            raise InvalidObservationError(
                f"images[{cam!r}] must be a numpy array, got {type(img).__name__}"
            )
        if img.dtype != np.uint8:
            raise InvalidObservationError(f"images[{cam!r}] dtype = {img.dtype}, expected uint8")
        if img.shape != shape:
            raise InvalidObservationError(
                f"images[{cam!r}] shape = {img.shape}, expected {shape} (height, width, RGB)"
            )
    state = np.asarray(obs.state)
    if state.shape != (spec.action_dim,):
        raise InvalidObservationError(f"state shape = {state.shape}, expected ({spec.action_dim},)")
    if not np.all(np.isfinite(state.astype(np.float64))):
        raise InvalidObservationError(f"state = {state.tolist()} holds a non-finite value")
    if not isinstance(obs.instruction, str) or not obs.instruction.strip():
        raise InvalidObservationError(f"instruction = {obs.instruction!r} is empty")
