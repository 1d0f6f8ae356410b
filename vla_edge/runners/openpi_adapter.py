"""Mapping between vla_edge's ``Observation``/``ActionChunk`` and openpi's LIBERO-style keys.

Request (client -> server), one msgpack map:

==============================  ===========================  ==========================
openpi key                      vla_edge field               wire type
==============================  ===========================  ==========================
``observation/image``           ``images["agentview"]``      ``uint8 [H, W, 3]`` (RGB)
``observation/wrist_image``     ``images["wrist"]``          ``uint8 [H, W, 3]`` (RGB)
``observation/<cam>_image``     ``images[<cam>]`` (others)   ``uint8 [H, W, 3]`` (RGB)
``observation/state``           ``state``                    float ``[A]``
``prompt``                      ``instruction``              str
``observation/timestamp``       ``stamp_s`` (client clock)   float (optional)
``vla_edge/noise``              ``noise``                    float ``[H, W]`` (optional)
``vla_edge/prefix_actions``     ``prefix_actions``           float ``[H, A]`` (optional)
``vla_edge/prefix_len``         ``prefix_len``               int (optional, default 0)
``vla_edge/request_id``         request counter              int (optional, echoed)
==============================  ===========================  ==========================

Images are treated as openpi's LIBERO policy treats them: any size up to
``MAX_IMAGE_SIDE_PX`` a side is fitted to the policy's input with openpi's
``resize_with_pad`` (aspect kept, centred on black; see
:mod:`vla_edge.runners.image_resize`), so openpi's LIBERO client, which sends
224x224, is served by a 64x64 policy unchanged (a runner that fits images
itself, as its manifest says, gets them at their own size: SmolVLA's padding
is on the top and left); channels-first (``[3, H, W]``)
is transposed; float pixels in [0, 1] become ``uint8(255 * x)``. Any other
channel count or dtype, NaN or inf, or an empty image is refused by name.
The ``vla_edge/*`` keys are extensions an openpi server ignores.

``vla_edge/noise`` has the model's width ``W`` (π0's padded 32;
``RunnerSpec.noise_dim``). ``observation/state`` must be the policy's own state,
and what comes back depends on the served runner (:mod:`vla_edge.runners.openpi_server`):

* joint targets (a policy reading the robot's joints: the bundled model, an
  import with ``--state-space joint_position``): the state is the joint positions
  in ``joint_names`` order, ``A = len(joint_names)``; openpi LIBERO's 8-D
  end-effector state is refused by name (this policy does not read it);
* the policy's own units (a :class:`~vla_edge.runners.base.NativeSpec`, e.g.
  ``--state-space eef_pose``): the state is ``NativeSpec.state_names`` (LIBERO's
  eef position 3 + axis-angle 3 + gripper qpos 2), the actions the policy's
  ``[H, NativeSpec.action_dim]``; no executed prefix.

Response (server -> client): ``actions`` float ``[H, A]`` in the runner's own
float dtype, so a remote chunk equals the local one bit for bit (joint targets in
``joint_names`` order, or the policy's own actions; step ``i`` for
``t_obs + i * dt_action_s``),
``server_timing`` (``infer_ms``, ``decode_ms``, ``queue_ms``, ``prev_total_ms``,
``stages_ms``), ``server_recv_time_s`` / ``server_time_s`` (server wall clock
when the request arrived / the reply left, for NTP-style clock-offset
estimation), ``t_obs_s`` and ``request_id`` echoed from the request.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vla_edge.core.errors import InvalidObservationError, RemoteServerError
from vla_edge.core.types import ActionChunk, Observation
from vla_edge.runners.base import NativeSpec, RunnerSpec
from vla_edge.runners.image_resize import MAX_IMAGE_SIDE_PX, resize_with_pad

KEY_STATE = "observation/state"
KEY_PROMPT = "prompt"
KEY_TIMESTAMP = "observation/timestamp"
KEY_NOISE = "vla_edge/noise"
KEY_PREFIX_ACTIONS = "vla_edge/prefix_actions"
KEY_PREFIX_LEN = "vla_edge/prefix_len"
KEY_REQUEST_ID = "vla_edge/request_id"

DEFAULT_CAMERA_KEYS: dict[str, str] = {
    "agentview": "observation/image",
    "wrist": "observation/wrist_image",
}

MAX_PROMPT_CHARS = 4096

LIBERO_EEF_STATE_DIM = 8
"""Length of the state openpi's LIBERO client sends (eef pos 3 + axis-angle 3 + gripper 2)."""


def camera_key(camera: str, camera_keys: dict[str, str] | None = None) -> str:
    """The openpi key that carries ``camera``'s image."""
    keys = DEFAULT_CAMERA_KEYS if camera_keys is None else camera_keys
    return keys.get(camera, f"observation/{camera}_image")


@dataclass
class InferRequest:
    """A decoded, validated request: what ``Runner.infer`` takes, plus the echo fields."""

    observation: Observation
    noise: np.ndarray | None = None
    prefix_actions: np.ndarray | None = None
    prefix_len: int = 0
    request_id: int | None = None
    client_stamp_s: float | None = None
    extras: dict[str, Any] = field(default_factory=dict)


def _float_array(values: np.ndarray) -> np.ndarray:
    """``values`` in its own float dtype (float64 for anything else): no rounding on the wire."""
    array = np.asarray(values)
    return array if array.dtype.kind == "f" else array.astype(np.float64)


def observation_to_request(
    obs: Observation,
    noise: np.ndarray | None = None,
    prefix_actions: np.ndarray | None = None,
    prefix_len: int = 0,
    request_id: int | None = None,
    camera_keys: dict[str, str] | None = None,
    cameras: tuple[str, ...] | None = None,
) -> dict[str, Any]:
    """Build the openpi request map for ``obs`` (see the module table).

    Args:
        cameras: send only these cameras (``None``: every image in ``obs``).
    """
    names = list(obs.images) if cameras is None else list(cameras)
    request: dict[str, Any] = {
        camera_key(name, camera_keys): np.ascontiguousarray(obs.images[name], dtype=np.uint8)
        for name in names
    }
    request[KEY_STATE] = np.asarray(obs.state, dtype=np.float64)
    request[KEY_PROMPT] = str(obs.instruction)
    request[KEY_TIMESTAMP] = float(obs.stamp_s)
    if noise is not None:
        request[KEY_NOISE] = _float_array(noise)
    if prefix_actions is not None:
        request[KEY_PREFIX_ACTIONS] = _float_array(prefix_actions)
        request[KEY_PREFIX_LEN] = int(prefix_len)
    if request_id is not None:
        request[KEY_REQUEST_ID] = int(request_id)
    return request


def _image(request: dict[str, Any], key: str, spec: RunnerSpec) -> np.ndarray:
    """``request[key]`` as a fresh ``uint8 [H, W, 3]`` image.

    What openpi's LIBERO policy does to a camera image: float pixels in [0, 1]
    become ``uint8(255 * x)``, channels-first is transposed, and any other size
    is fitted to ``[spec.image_height, spec.image_width]`` with
    :func:`~vla_edge.runners.image_resize.resize_with_pad`, unless the runner
    fits images itself (``spec.fits_images``: its manifest's own resize, e.g.
    SmolVLA's ``pad_top_left``), which then gets the image at its own size.
    """
    if key not in request:
        raise InvalidObservationError(
            f"{key} is missing: the policy needs cameras {list(spec.cameras)}"
        )
    image = request[key]
    if not isinstance(image, np.ndarray):
        raise InvalidObservationError(
            f"{key} is {type(image).__name__}: must be a uint8 array [H, W, 3]"
        )
    if image.dtype != np.uint8 and image.dtype.kind != "f":
        raise InvalidObservationError(
            f"{key} dtype = {image.dtype}: must be uint8 (0..255) or float (0..1)"
        )
    if image.ndim == 3 and image.shape[0] == 3 and image.shape[2] != 3:
        image = image.transpose(1, 2, 0)  # [3, H, W] -> [H, W, 3]
    if image.ndim != 3 or image.shape[2] != 3:
        raise InvalidObservationError(
            f"{key} shape = {list(image.shape)}: must be [H, W, 3] (RGB) or [3, H, W]"
        )
    height, width = image.shape[:2]
    if not (1 <= height <= MAX_IMAGE_SIDE_PX and 1 <= width <= MAX_IMAGE_SIDE_PX):
        raise InvalidObservationError(
            f"{key} shape = {list(image.shape)}: height and width must be in "
            f"[1, {MAX_IMAGE_SIDE_PX}] px"
        )
    if image.dtype.kind == "f":
        if not np.all(np.isfinite(image)):
            raise InvalidObservationError(f"{key} holds NaN or inf: pixels must be finite")
        lo, hi = float(image.min()), float(image.max())
        if lo < 0.0 or hi > 1.0:
            raise InvalidObservationError(
                f"{key} float pixels span [{lo:g}, {hi:g}]: must be in [0, 1] "
                "(or send uint8 0..255)"
            )
        image = (image * 255).astype(np.uint8)  # openpi's convert_to_uint8: truncation
    if spec.fits_images:
        return np.array(image, dtype=np.uint8, copy=True)
    resized = resize_with_pad(image, spec.image_height, spec.image_width)
    return np.array(resized, dtype=np.uint8, copy=True)


def _matrix(request: dict[str, Any], key: str, expected: tuple[int, int]) -> np.ndarray | None:
    if key not in request:
        return None
    value = request[key]
    if not isinstance(value, np.ndarray) or value.dtype.kind != "f" or value.shape != expected:
        shape = list(value.shape) if isinstance(value, np.ndarray) else type(value).__name__
        raise InvalidObservationError(f"{key} = {shape}: must be a float array {list(expected)}")
    if not np.all(np.isfinite(value)):
        raise InvalidObservationError(f"{key} holds NaN or inf: must be finite")
    return np.array(value, copy=True)


def _optional_int(request: dict[str, Any], key: str, lo: int, hi: int) -> int | None:
    if key not in request:
        return None
    value = request[key]
    if isinstance(value, np.integer):
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise InvalidObservationError(f"{key} = {value!r}: must be an integer in [{lo}, {hi}]")
    return value


def _state(request: dict[str, Any], spec: RunnerSpec, native: NativeSpec | None) -> np.ndarray:
    """``observation/state``: the joints (``native`` None) or the policy's own state."""
    if KEY_STATE not in request:
        raise InvalidObservationError(f"{KEY_STATE} is missing: must be a float array [A]")
    state = request[KEY_STATE]
    if isinstance(state, list):
        state = np.asarray(state) if all(isinstance(v, int | float) for v in state) else None
    if not isinstance(state, np.ndarray) or state.dtype.kind not in "fiu":
        raise InvalidObservationError(
            f"{KEY_STATE} is {type(request[KEY_STATE]).__name__}: must be a numeric array [A]"
        )
    if native is not None and state.shape != (native.state_dim,):
        raise InvalidObservationError(
            f"{KEY_STATE} shape = {list(state.shape)}: must be [{native.state_dim}], the "
            f"policy's {native.state_space} state ({', '.join(native.state_names)})"
        )
    if native is None and state.shape != (spec.action_dim,):
        hint = ""
        if state.shape == (LIBERO_EEF_STATE_DIM,):
            hint = (
                "; an 8-D state is openpi LIBERO's end-effector state (eef position 3 + "
                "axis-angle 3 + gripper qpos 2), which this policy does not read: send the "
                "joint positions, or serve a policy imported with --state-space eef_pose"
            )
        raise InvalidObservationError(
            f"{KEY_STATE} shape = {list(state.shape)}: must be [{spec.action_dim}] "
            f"({', '.join(spec.joint_names)}){hint}"
        )
    if not np.all(np.isfinite(state)):
        raise InvalidObservationError(f"{KEY_STATE} = {state.tolist()}: must be finite")
    return state


def request_to_observation(
    request: Any,
    spec: RunnerSpec,
    now_s: float,
    camera_keys: dict[str, str] | None = None,
    native: NativeSpec | None = None,
) -> InferRequest:
    """Validate an openpi request map against ``spec`` and turn it into an :class:`InferRequest`.

    Camera images of any size are fitted to ``spec``'s with openpi's
    ``resize_with_pad`` (see the module docstring).

    Args:
        request: the decoded message.
        spec: what the served runner consumes.
        now_s: stamp to use when the request carries no ``observation/timestamp``.
        camera_keys: camera name -> openpi key overrides.
        native: the policy's own state and actions when it is served in its units:
            ``observation/state`` is then that state, and no prefix is taken.

    Raises:
        InvalidObservationError: a missing key or a value of the wrong type, dtype,
            shape or a non-finite number; the message names key, value and bound.
    """
    if not isinstance(request, dict):
        raise InvalidObservationError(
            f"request is {type(request).__name__}: must be a map of openpi keys"
        )
    bad_keys = [k for k in request if not isinstance(k, str)]
    if bad_keys:
        raise InvalidObservationError(f"request key = {bad_keys[0]!r}: keys must be strings")
    images = {name: _image(request, camera_key(name, camera_keys), spec) for name in spec.cameras}

    state = _state(request, spec, native)

    prompt = request.get(KEY_PROMPT, "")
    if not isinstance(prompt, str) or len(prompt) > MAX_PROMPT_CHARS:
        shown = f"{len(prompt)} chars" if isinstance(prompt, str) else type(prompt).__name__
        raise InvalidObservationError(
            f"{KEY_PROMPT} = {shown}: must be a string of at most {MAX_PROMPT_CHARS} chars"
        )

    client_stamp_s = None
    if KEY_TIMESTAMP in request:
        stamp = request[KEY_TIMESTAMP]
        if isinstance(stamp, bool) or not isinstance(stamp, int | float | np.number):
            raise InvalidObservationError(f"{KEY_TIMESTAMP} = {stamp!r}: must be a number (s)")
        if not math.isfinite(float(stamp)):
            raise InvalidObservationError(f"{KEY_TIMESTAMP} = {stamp!r}: must be finite")
        client_stamp_s = float(stamp)

    noise = _matrix(request, KEY_NOISE, (spec.chunk_horizon, spec.noise_dim))
    if native is not None and (KEY_PREFIX_ACTIONS in request or KEY_PREFIX_LEN in request):
        raise InvalidObservationError(
            f"{KEY_PREFIX_ACTIONS} / {KEY_PREFIX_LEN}: the policy is served in its own units "
            f"({native.state_space} state), which take no executed prefix; leave them out"
        )
    prefix_actions = _matrix(request, KEY_PREFIX_ACTIONS, (spec.chunk_horizon, spec.action_dim))
    prefix_len = _optional_int(request, KEY_PREFIX_LEN, 0, spec.chunk_horizon) or 0
    if prefix_len > 0 and prefix_actions is None:
        raise InvalidObservationError(
            f"{KEY_PREFIX_LEN} = {prefix_len}: needs {KEY_PREFIX_ACTIONS} as well"
        )
    request_id = _optional_int(request, KEY_REQUEST_ID, 0, 2**63 - 1)

    obs = Observation(
        stamp_s=now_s if client_stamp_s is None else client_stamp_s,
        images=images,
        state=np.array(state, dtype=np.float64, copy=True),
        instruction=prompt,
    )
    return InferRequest(
        observation=obs,
        noise=noise,
        prefix_actions=prefix_actions,
        prefix_len=prefix_len,
        request_id=request_id,
        client_stamp_s=client_stamp_s,
    )


def chunk_to_response(chunk: ActionChunk, request: InferRequest) -> dict[str, Any]:
    """The reply map for ``chunk`` (timing fields are added by the server)."""
    return actions_to_response(chunk.positions, request)


def actions_to_response(actions: np.ndarray, request: InferRequest) -> dict[str, Any]:
    """The reply map for ``actions`` ``[H, A]`` (timing fields are added by the server)."""
    values = np.asarray(actions)
    if values.dtype.kind != "f":
        values = values.astype(np.float64)
    response: dict[str, Any] = {"actions": values}  # runner's float dtype: exact parity
    if request.client_stamp_s is not None:
        response["t_obs_s"] = request.client_stamp_s
    if request.request_id is not None:
        response["request_id"] = request.request_id
    return response


def response_to_actions(response: Any, spec: RunnerSpec) -> np.ndarray:
    """Validate a reply's ``actions`` against ``spec``; return a float64 ``[H, A]`` copy.

    Raises:
        RemoteServerError: the reply is not a map, lacks ``actions``, its shape
            differs from ``[chunk_horizon, action_dim]``, or it holds NaN or inf.
    """
    if not isinstance(response, dict):
        raise RemoteServerError(f"reply is {type(response).__name__}: must be a map")
    if "actions" not in response:
        raise RemoteServerError(f"reply has no 'actions' (keys: {sorted(map(str, response))})")
    actions = response["actions"]
    expected = (spec.chunk_horizon, spec.action_dim)
    if not isinstance(actions, np.ndarray) or actions.dtype.kind not in "fiu":
        raise RemoteServerError(
            f"actions is {type(actions).__name__}: must be a numeric array {list(expected)}"
        )
    if actions.shape != expected:
        raise RemoteServerError(
            f"actions shape = {list(actions.shape)}: must be {list(expected)} "
            "[chunk_horizon, action_dim]"
        )
    positions = np.array(actions, dtype=np.float64, copy=True)
    if not np.all(np.isfinite(positions)):
        bad = int(positions.size - np.count_nonzero(np.isfinite(positions)))
        raise RemoteServerError(
            f"actions hold {bad} non-finite value(s) (NaN or inf): joint targets must be finite"
        )
    return positions
