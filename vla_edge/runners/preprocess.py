"""Numpy pre- and post-processing shared by every exported-program runner (no torch).

These functions do exactly what :class:`~vla_edge.runners.torch_runner.TorchRunner`
does around its four stages, in numpy, so the ONNX Runtime and ExecuTorch
runners feed their programs the same tensors as the reference:

* images: ``{camera: [h, w, 3] uint8}`` -> ``[n_slots, 3, h, w]`` float32 in
  the declared pixel range ([0, 1] or [-1, 1]), slots in the model's order, a
  slot without a camera black and masked (:func:`images_input`); with resize
  ``pad`` an image of any size is fitted first with openpi's
  ``resize_with_pad``, with ``pad_top_left`` with LeRobot SmolVLA's, with
  ``center_crop`` with Isaac-GR00T N1.7's evaluation transform
  (:mod:`vla_edge.runners.image_resize`), with ``stretch`` it must arrive at
  the model's size;
* state: the policy's state ``[S]`` (the robot's joints, or what its state space
  makes of them) -> normalised ``[1, S]`` float32 (:class:`ActionCodec`), which
  :func:`pad_last` pads with zeros to the model's width;
* noise: ``[H, A]`` or ``[1, H, A]`` float32, validated (or drawn);
* executed prefix: ``[>= d, A]`` absolute targets -> normalised ``[1, H, A]``
  plus mask ``[1, H]``;
* output: normalised ``[H, A]`` -> absolute joint targets, prefix rows copied
  verbatim; a chunk holding NaN or inf is refused.

The input checks (:func:`validate_observation`, :func:`check_noise`,
:func:`check_prefix`) need no model, so the remote runner applies them too.
"""

from __future__ import annotations

import unicodedata
from typing import Any

import numpy as np

from vla_edge.archs.bundled.normalize import ActionCodec
from vla_edge.core.errors import (
    InstructionRefusedError,
    InvalidObservationError,
    NonFiniteChunkError,
)
from vla_edge.core.types import Observation
from vla_edge.runners.base import RunnerSpec, start_noise
from vla_edge.runners.image_resize import (
    FIT_MODES,
    MAX_IMAGE_SIDE_PX,
    fit_center_crop,
    resize_with_pad,
    resize_with_pad_top_left,
)


def images_to_nchw(images: dict[Any, np.ndarray], cameras: tuple[Any, ...]) -> np.ndarray:
    """Stack validated ``uint8 [h, w, 3]`` images into ``[n_cams, 3, h, w]`` float32 in [0, 1]."""
    stacked = np.stack([images[cam] for cam in cameras])
    nchw = np.ascontiguousarray(stacked.transpose(0, 3, 1, 2)).astype(np.float32)
    return nchw / np.float32(255.0)


def images_input(
    images: dict[str, np.ndarray],
    slots: list[str | None],
    height: int,
    width: int,
    pixel_range: tuple[float, float] = (0.0, 1.0),
    resize: str = "stretch",
    crop_fraction: float = 1.0,
    letterbox: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """``[n_slots, 3, height, width]`` float32 images and the ``[n_slots]`` float32 mask.

    Args:
        images: validated ``uint8 [h, w, 3]`` images by camera name
            (:func:`validate_observation`).
        slots: the camera feeding each model image slot, ``None`` for none
            (a black uint8 image, as openpi's policy inputs give a missing
            camera — ``np.zeros_like`` of the base image, so -1 in [-1, 1] —
            with mask 0).
        height: the model's image height.
        width: the model's image width.
        pixel_range: ``(0, 1)``: ``x / 255``; ``(-1, 1)``: ``x / 255 * 2 - 1``.
        resize: ``pad``: each image goes through openpi's ``resize_with_pad``
            (untouched at the model's size); ``pad_top_left``: through LeRobot
            SmolVLA's, on ``x / 255`` floats (``resize_with_pad_top_left``);
            ``center_crop``: through Isaac-GR00T N1.7's evaluation transform
            (``fit_center_crop`` with ``crop_fraction`` and ``letterbox``);
            ``stretch``: images are already ``height x width``.

    Raises:
        InvalidObservationError: with ``center_crop`` and no ``letterbox``, a camera
            whose image is not square (named, with its size).
    """
    black = np.zeros((height, width, 3), dtype=np.uint8)
    frames = [black if camera is None else images[camera] for camera in slots]
    if resize == "center_crop":  # an empty slot is already black at the model's size
        for i, camera in enumerate(slots):
            if camera is None:
                continue
            try:
                frames[i] = fit_center_crop(frames[i], height, width, crop_fraction, letterbox)
            except InvalidObservationError as exc:
                raise InvalidObservationError(f"images[{camera!r}]: {exc}") from exc
    if resize == "pad_top_left":
        fitted = np.stack([resize_with_pad_top_left(frame, height, width) for frame in frames])
        nchw = np.ascontiguousarray(fitted.transpose(0, 3, 1, 2))
    else:
        if resize == "pad":
            frames = [resize_with_pad(frame, height, width) for frame in frames]
        nchw = images_to_nchw(dict(enumerate(frames)), tuple(range(len(frames))))
    if tuple(pixel_range) == (-1.0, 1.0):
        nchw = nchw * np.float32(2.0) - np.float32(1.0)
    mask = np.array([camera is not None for camera in slots], dtype=np.float32)
    return nchw, mask


def pad_last(array: np.ndarray, width: int) -> np.ndarray:
    """``array`` with its last axis zero-padded to ``width`` (itself when already that wide)."""
    missing = width - array.shape[-1]
    if missing <= 0:
        return array
    pad = [(0, 0)] * (array.ndim - 1) + [(0, missing)]
    return np.ascontiguousarray(np.pad(array, pad), dtype=array.dtype)


FLOAT32_MAX = float(np.finfo(np.float32).max)
"""Largest finite float32: every tensor a stage sees is float32."""


def _numeric_array(value: Any, field: str, kinds: str, expected: str) -> np.ndarray:
    """``value`` as an array whose ``dtype.kind`` is one of ``kinds``.

    Raises:
        InvalidObservationError: ``value`` is not an array of such a dtype.
    """
    try:
        arr = np.asarray(value)
    except (TypeError, ValueError) as exc:  # e.g. a ragged nested list
        raise InvalidObservationError(f"{field} cannot be read as an array: {exc}") from exc
    if arr.dtype.kind not in kinds:
        raise InvalidObservationError(f"{field} dtype = {arr.dtype}, expected {expected}")
    return arr


def state_input(codec: ActionCodec, state: np.ndarray) -> np.ndarray:
    """Normalised ``[1, S]`` float32 state (``S``: the codec's state statistics).

    Raises:
        InvalidObservationError: the normalised state overflows float32.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        normalised = codec.normalize_state(np.asarray(state, dtype=np.float64))
    if not np.all(np.isfinite(normalised)):
        raise InvalidObservationError(
            f"state = {np.asarray(state).tolist()} is not finite once normalised to float32: "
            f"|(state - mean) / std| must stay below {FLOAT32_MAX:.3g}"
        )
    return normalised[None, :]


def check_noise(noise: Any, horizon: int, action_dim: int) -> np.ndarray:
    """Validated explicit noise as ``[1, H, A]`` float32.

    Raises:
        InvalidObservationError: ``noise`` is not a float array, has the wrong
            shape, or holds a value that is not finite in float32.
    """
    arr = _numeric_array(noise, "noise", "f", "a float dtype (float32)")
    if arr.shape not in ((horizon, action_dim), (1, horizon, action_dim)):
        raise InvalidObservationError(
            f"noise shape = {arr.shape}, expected ({horizon}, {action_dim})"
        )
    with np.errstate(over="ignore"):
        arr = arr.astype(np.float32, copy=False)
    if not np.all(np.isfinite(arr)):
        raise InvalidObservationError(
            f"noise holds a non-finite value (in float32: |noise| must stay below "
            f"{FLOAT32_MAX:.3g})"
        )
    return np.ascontiguousarray(arr.reshape(1, horizon, action_dim))


def noise_input(
    noise: np.ndarray | None, horizon: int, action_dim: int, rng: np.random.Generator
) -> np.ndarray:
    """``[1, H, A]`` float32 flow-matching start: ``noise`` validated, or drawn from ``rng``.

    Raises:
        InvalidObservationError: see :func:`check_noise`.
    """
    if noise is None:
        return start_noise(rng, horizon, action_dim)[None]
    return check_noise(noise, horizon, action_dim)


def check_prefix(
    prefix_actions: Any, prefix_len: Any, horizon: int, action_dim: int
) -> tuple[int, np.ndarray | None]:
    """Validated ``(d, rows)``: ``d`` as an int and the binding rows ``[d, A]`` float64.

    ``rows`` is ``None`` when ``d == 0`` (``prefix_actions`` is then ignored).

    Raises:
        InvalidObservationError: ``prefix_len`` is not an integer in
            ``0 <= d < H``, or ``prefix_actions`` is missing, not a float array,
            too short, of the wrong width, or holds a non-finite value.
    """
    if isinstance(prefix_len, bool | np.bool_) or not isinstance(prefix_len, int | np.integer):
        raise InvalidObservationError(
            f"prefix_len = {prefix_len!r} ({type(prefix_len).__name__}), expected an int "
            f"with 0 <= prefix_len < {horizon}"
        )
    if not 0 <= prefix_len < horizon:
        raise InvalidObservationError(
            f"prefix_len = {prefix_len}, expected 0 <= prefix_len < {horizon}"
        )
    prefix_len = int(prefix_len)
    if prefix_len == 0:
        return 0, None
    if prefix_actions is None:
        raise InvalidObservationError(f"prefix_len = {prefix_len} but prefix_actions is None")
    arr = _numeric_array(prefix_actions, "prefix_actions", "f", "a float dtype")
    if arr.ndim != 2 or arr.shape[1] != action_dim or arr.shape[0] < prefix_len:
        raise InvalidObservationError(
            f"prefix_actions shape = {arr.shape}, expected (>= prefix_len={prefix_len}, "
            f"{action_dim})"
        )
    rows = arr[:prefix_len].astype(np.float64)
    if not np.all(np.isfinite(rows)):
        raise InvalidObservationError("prefix_actions holds a non-finite value")
    return prefix_len, rows


def prefix_inputs(
    codec: ActionCodec,
    prefix_actions: np.ndarray | None,
    prefix_len: int,
    state: np.ndarray,
    horizon: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Normalised prefix ``[1, H, A]`` and mask ``[1, H]`` (both float32).

    Raises:
        InvalidObservationError: see :func:`check_prefix`; also a prefix that is
            not finite once normalised to float32.
    """
    action_dim = codec.delta_mask.size
    prefix_len, rows = check_prefix(prefix_actions, prefix_len, horizon, action_dim)
    mask = np.zeros((1, horizon), dtype=np.float32)
    actions = np.zeros((1, horizon, action_dim), dtype=np.float32)
    if rows is None:
        return actions, mask
    padded = np.zeros((horizon, action_dim))
    padded[:prefix_len] = rows
    with np.errstate(over="ignore", invalid="ignore"):
        actions = codec.encode_actions(padded, np.asarray(state, dtype=np.float64))[None]
    if not np.all(np.isfinite(actions)):
        raise InvalidObservationError(
            f"prefix_actions[:{prefix_len}] is not finite once normalised to float32: "
            f"|(prefix - state - mean) / std| must stay below {FLOAT32_MAX:.3g}"
        )
    mask[0, :prefix_len] = 1.0
    return np.ascontiguousarray(actions, dtype=np.float32), mask


def decode_chunk(
    codec: ActionCodec,
    actions_norm: np.ndarray,
    state: np.ndarray,
    prefix_actions: np.ndarray | None,
    prefix_len: int,
) -> np.ndarray:
    """Absolute ``[H, A]`` float64 targets; the first ``prefix_len`` rows are the given prefix.

    ``prefix_len`` is the int :func:`check_prefix` returned.

    Raises:
        NonFiniteChunkError: the model's output or the decoded chunk holds NaN
            or inf (e.g. an input at the edge of float32, or broken weights).
    """
    arr = np.asarray(actions_norm)
    if not np.all(np.isfinite(arr)):
        bad = int(np.size(arr) - np.count_nonzero(np.isfinite(arr)))
        raise NonFiniteChunkError(
            f"the action head's output holds {bad} non-finite value(s) of {arr.size}: "
            "no chunk is returned (inputs out of range or broken weights)"
        )
    with np.errstate(over="ignore", invalid="ignore"):
        positions = codec.decode_actions(arr.reshape(arr.shape[-2:]), np.asarray(state, np.float64))
    if prefix_len > 0 and prefix_actions is not None:
        positions[:prefix_len] = np.asarray(prefix_actions, dtype=np.float64)[:prefix_len]
    if not np.all(np.isfinite(positions)):
        raise NonFiniteChunkError(
            f"the decoded chunk holds a non-finite joint target: {positions.tolist()}"
        )
    return positions


def validate_observation(
    obs: Observation, spec: RunnerSpec, resize: str = "stretch", state_dim: int | None = None
) -> None:
    """Raise :class:`InvalidObservationError` naming the field, value and bound.

    Shared by every backend (numpy only, so the ONNX / ExecuTorch runners stay
    free of torch). ``resize``: ``stretch`` wants every image at the spec's
    size; ``pad``, ``pad_top_left`` and ``center_crop`` (the runner fits them) take
    any ``[h, w, 3]`` with sides in ``[1, MAX_IMAGE_SIDE_PX]`` (``center_crop``
    refuses a non-square one without its letterbox when it fits it,
    :func:`images_input`). ``state_dim``: the state's width (default the spec's
    joints; a runner's native path takes the policy's own state).
    """
    if not isinstance(obs.images, dict):
        raise InvalidObservationError(f"images must be a dict, got {type(obs.images).__name__}")
    bad_keys = [k for k in obs.images if not isinstance(k, str)]
    if bad_keys:
        raise InvalidObservationError(
            f"images key = {bad_keys[0]!r} ({type(bad_keys[0]).__name__}): camera names "
            f"must be str, expected {sorted(spec.cameras)}"
        )
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
        if resize in FIT_MODES:
            if img.ndim != 3 or img.shape[2] != 3:
                raise InvalidObservationError(
                    f"images[{cam!r}] shape = {img.shape}, expected (height, width, 3) RGB"
                )
            if not all(1 <= side <= MAX_IMAGE_SIDE_PX for side in img.shape[:2]):
                raise InvalidObservationError(
                    f"images[{cam!r}] shape = {img.shape}: height and width must be in "
                    f"[1, {MAX_IMAGE_SIDE_PX}] px"
                )
        elif img.shape != shape:
            raise InvalidObservationError(
                f"images[{cam!r}] shape = {img.shape}, expected {shape} (height, width, RGB)"
            )
    state = _numeric_array(obs.state, "state", "fiu", "a real number dtype (float, int)")
    width = spec.action_dim if state_dim is None else state_dim
    if state.shape != (width,):
        raise InvalidObservationError(f"state shape = {state.shape}, expected ({width},)")
    state64 = state.astype(np.float64)
    if not np.all(np.isfinite(state64)):
        raise InvalidObservationError(f"state = {state.tolist()} holds a non-finite value")
    if np.any(np.abs(state64) > FLOAT32_MAX):
        raise InvalidObservationError(
            f"state = {state.tolist()} overflows float32: |state| must stay below {FLOAT32_MAX:.3g}"
        )
    validate_instruction(obs.instruction)
    validate_stamp(obs.stamp_s)


def validate_stamp(stamp_s: Any) -> None:
    """Raise :class:`InvalidObservationError` unless ``stamp_s`` is a finite real number.

    The stamp becomes the chunk's ``t_obs_s``, from which the controller times
    every step: a NaN would otherwise travel to it inside a valid-looking chunk.
    """
    if isinstance(stamp_s, bool | np.bool_) or not isinstance(
        stamp_s, int | float | np.integer | np.floating
    ):
        raise InvalidObservationError(
            f"stamp_s = {stamp_s!r} ({type(stamp_s).__name__}): must be a number (seconds)"
        )
    if not np.isfinite(stamp_s):
        raise InvalidObservationError(f"stamp_s = {stamp_s}: must be finite")


def validate_instruction(instruction: Any) -> None:
    """Raise :class:`InstructionRefusedError` unless ``instruction`` has a visible character.

    Control, format (zero-width), separator and combining characters alone are
    dropped by the tokenizer's normalisation and would leave no word to embed.
    """
    if not isinstance(instruction, str):
        raise InstructionRefusedError(
            f"instruction = {instruction!r} must be a str, got {type(instruction).__name__}"
        )
    if not instruction.strip():
        raise InstructionRefusedError(f"instruction = {instruction!r} is empty")
    if all(unicodedata.category(ch)[0] in "CZM" for ch in instruction):
        raise InstructionRefusedError(
            f"instruction = {instruction!r} is empty: it holds only control, zero-width, "
            "space or combining characters"
        )
