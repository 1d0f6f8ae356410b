"""``RemoteRunner``: the ``Runner`` protocol over openpi's websocket protocol.

Works against ``vla-edge serve`` and against any openpi policy server
(``openpi_server.WebsocketPolicyServer``, openpi's ``serve_policy.py``) whose
policy takes LIBERO-style keys and returns ``actions [H, A]``.

Guarantees:

* every ``infer`` finishes within ``timeout_s`` (connect + send + receive): it
  returns a chunk or raises :class:`RemoteTimeoutError`,
  :class:`RemoteConnectionError` or :class:`RemoteServerError`; it never hangs;
* after a failure the connection is dropped (a late reply can never be taken
  for the next one) and reconnect attempts back off exponentially
  (``backoff_initial_s`` doubling up to ``backoff_max_s``); during back-off
  ``infer`` fails at once;
* the returned chunk's ``t_obs_s`` is the *local* observation stamp, so the
  controller's staleness check is correct across machines; the server clock's
  offset is measured NTP-style on every reply (``offset = ((t1 - t0) + (t2 - t3)) / 2``,
  keeping the sample with the smallest round trip of the last few) and reported
  by :attr:`clock_offset_s` and :meth:`diagnostics`.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

import numpy as np
import websockets
import websockets.sync.client as ws_client
from websockets.protocol import State

from vla_edge.core.errors import (
    ProtocolError,
    RemoteConnectionError,
    RemoteRunnerError,
    RemoteServerError,
    RemoteTimeoutError,
)
from vla_edge.core.types import ActionChunk, Observation
from vla_edge.runners.base import RunnerSpec
from vla_edge.runners.openpi_adapter import (
    KEY_PREFIX_LEN,
    observation_to_request,
    response_to_actions,
)
from vla_edge.runners.openpi_protocol import ProtocolLimits, pack, unpack
from vla_edge.runners.preprocess import check_noise, check_prefix, validate_observation

_CLOCK_SAMPLES = 8


def _check_mode(metadata: dict[str, Any]) -> None:
    """Refuse a server that replies with the policy's own actions, not joint targets."""
    mode = metadata.get("mode", "joint_targets")
    if mode != "joint_targets":
        raise RemoteRunnerError(
            f"server metadata mode = {mode!r} (state_space = {metadata.get('state_space')!r}): "
            "it takes the policy's own state and replies with the policy's own actions, "
            "while this runner sends joint positions and executes joint targets; run that "
            "export locally (--policy EXPORT_DIR)"
        )


def spec_from_metadata(metadata: dict[str, Any]) -> RunnerSpec:
    """Build a ``RunnerSpec`` from the metadata ``vla-edge serve`` sends.

    Raises:
        RemoteRunnerError: a field is missing or of the wrong type (servers that
            send no such metadata need an explicit ``spec``), or the server replies
            in the policy's own units (``mode`` ``policy_native``).
    """
    _check_mode(metadata)
    fields = {
        "joint_names": list,
        "action_horizon": int,
        "dt_action_s": float,
        "cameras": list,
        "image_height": int,
        "image_width": int,
    }
    for name, kind in fields.items():
        value = metadata.get(name)
        ok = isinstance(value, kind) or (kind is float and isinstance(value, int))
        if not ok or isinstance(value, bool):
            raise RemoteRunnerError(
                f"server metadata {name} = {value!r}: must be a {kind.__name__}; "
                "pass spec= for servers that do not describe their policy"
            )
    return RunnerSpec(
        joint_names=tuple(str(n) for n in metadata["joint_names"]),
        chunk_horizon=int(metadata["action_horizon"]),
        dt_action_s=float(metadata["dt_action_s"]),
        cameras=tuple(str(c) for c in metadata["cameras"]),
        image_height=int(metadata["image_height"]),
        image_width=int(metadata["image_width"]),
        supports_prefix=bool(metadata.get("supports_prefix", False)),
    )


def _check_metadata(spec: RunnerSpec, metadata: dict[str, Any]) -> None:
    """Refuse a server whose advertised policy differs from ``spec`` (fields it sends only)."""
    _check_mode(metadata)
    advertised = {
        "joint_names": list(spec.joint_names),
        "action_horizon": spec.chunk_horizon,
        "cameras": list(spec.cameras),
        "image_height": spec.image_height,
        "image_width": spec.image_width,
    }
    for name, expected in advertised.items():
        if name in metadata and metadata[name] != expected:
            raise RemoteRunnerError(
                f"server metadata {name} = {metadata[name]!r}: this runner expects {expected!r}"
            )
    dt_s = metadata.get("dt_action_s", spec.dt_action_s)
    if not isinstance(dt_s, float | int) or not np.isclose(dt_s, spec.dt_action_s):
        raise RemoteRunnerError(
            f"server metadata dt_action_s = {metadata['dt_action_s']!r}: this runner expects "
            f"{spec.dt_action_s!r}"
        )


class RemoteRunner:
    """A ``Runner`` whose policy runs in a (possibly remote) openpi-protocol server.

    Args:
        url: ``ws://host:port`` of the server.
        timeout_s: bound on each ``infer`` (and on the connect in the constructor).
        spec: what the remote policy consumes/produces; ``None`` reads it from the
            server's metadata (``vla-edge serve`` sends it), which connects now.
        api_key: sent as ``Authorization: Api-Key <key>``.
        limits: decoding limits for replies.
        backoff_initial_s: wait after the first failed connect before the next try.
        backoff_max_s: cap of the doubling back-off.
        camera_keys: camera name -> openpi key overrides.

    Raises:
        RemoteRunnerError: ``spec`` is ``None`` and the server cannot be reached
            or does not describe its policy.
    """

    def __init__(
        self,
        url: str = "ws://127.0.0.1:8000",
        timeout_s: float = 1.0,
        spec: RunnerSpec | None = None,
        api_key: str | None = None,
        limits: ProtocolLimits | None = None,
        backoff_initial_s: float = 0.05,
        backoff_max_s: float = 2.0,
        camera_keys: dict[str, str] | None = None,
    ) -> None:
        if not timeout_s > 0.0:
            raise ValueError(f"timeout_s = {timeout_s}: must be > 0")
        if not 0.0 < backoff_initial_s <= backoff_max_s:
            raise ValueError(
                f"backoff_initial_s = {backoff_initial_s}: must be in (0, backoff_max_s = "
                f"{backoff_max_s}]"
            )
        self.url = url
        self.timeout_s = float(timeout_s)
        self.backoff_initial_s = float(backoff_initial_s)
        self.backoff_max_s = float(backoff_max_s)
        self._api_key = api_key
        self._limits = limits or ProtocolLimits()
        self._camera_keys = camera_keys
        self._lock = threading.Lock()
        self._ws: ws_client.ClientConnection | None = None
        self._backoff_s = 0.0
        self._next_attempt_s = 0.0
        self._request_id = 0
        self._clock_samples: deque[tuple[float, float]] = deque(maxlen=_CLOCK_SAMPLES)
        self.server_metadata: dict[str, Any] = {}
        self.counters: dict[str, int] = {
            "requests": 0,
            "ok": 0,
            "timeouts": 0,
            "connection_errors": 0,
            "server_errors": 0,
            "connects": 0,
        }
        self.last_round_trip_ms: float | None = None
        self.last_error: str = ""
        if spec is None:
            with self._lock:
                self._connect(time.monotonic() + self.timeout_s)
                try:
                    spec = spec_from_metadata(self.server_metadata)
                except RemoteRunnerError:
                    self._drop()  # the constructor fails: nobody could close this socket
                    raise
        self.spec: RunnerSpec = spec

    @classmethod
    def from_config(cls, config: Any, spec: RunnerSpec | None = None) -> RemoteRunner:
        """Build from an ``InferenceConfig`` (``remote_url``, ``remote_timeout_s``)."""
        return cls(url=config.remote_url, timeout_s=config.remote_timeout_s, spec=spec)

    # --------------------------------------------------------------- clock
    @property
    def clock_offset_s(self) -> float | None:
        """Server clock minus local clock (s), from the best recent reply; ``None`` if unknown."""
        if not self._clock_samples:
            return None
        return min(self._clock_samples)[1]

    @property
    def connected(self) -> bool:
        """Whether a connection is open now."""
        return self._ws is not None and self._ws.state is State.OPEN

    def diagnostics(self) -> dict[str, float | int | str]:
        """Key/values for ``/diagnostics``."""
        offset = self.clock_offset_s
        diag: dict[str, float | int | str] = {
            "url": self.url,
            "connected": int(self.connected),
            "timeout_s": self.timeout_s,
            "backoff_s": self._backoff_s,
            "clock_offset_ms": float("nan") if offset is None else offset * 1000.0,
            "round_trip_ms": float("nan")
            if self.last_round_trip_ms is None
            else self.last_round_trip_ms,
            "last_error": self.last_error,
        }
        diag.update(self.counters)
        return diag

    def _record_clock(self, t0: float, t3: float, reply: dict[str, Any]) -> None:
        t2 = reply.get("server_time_s")
        if not isinstance(t2, float | int) or isinstance(t2, bool) or not np.isfinite(t2):
            return
        t1 = reply.get("server_recv_time_s", t2)
        if not isinstance(t1, float | int) or isinstance(t1, bool) or not np.isfinite(t1):
            t1 = t2
        delay_s = (t3 - t0) - (t2 - t1)
        offset_s = ((t1 - t0) + (t2 - t3)) / 2.0
        self._clock_samples.append((max(delay_s, 0.0), offset_s))

    # ----------------------------------------------------------- connection
    def _drop(self) -> None:
        ws, self._ws = self._ws, None
        if ws is not None:
            ws.close_socket()

    def _fail_connect(self, message: str) -> RemoteConnectionError:
        self._backoff_s = (
            self.backoff_initial_s
            if self._backoff_s == 0.0
            else min(2.0 * self._backoff_s, self.backoff_max_s)
        )
        self._next_attempt_s = time.monotonic() + self._backoff_s
        self.counters["connection_errors"] += 1
        self.last_error = message
        return RemoteConnectionError(f"{message} (next attempt in {self._backoff_s:.3f} s)")

    def _connect(self, deadline_s: float) -> ws_client.ClientConnection:
        """Open a connection and read the metadata, within ``deadline_s`` (monotonic)."""
        now_s = time.monotonic()
        if now_s < self._next_attempt_s:
            self.counters["connection_errors"] += 1
            raise RemoteConnectionError(
                f"{self.url}: reconnect back-off, next attempt in "
                f"{self._next_attempt_s - now_s:.3f} s (backoff_s = {self._backoff_s:.3f})"
            )
        remaining_s = max(deadline_s - now_s, 1e-3)
        headers = {"Authorization": f"Api-Key {self._api_key}"} if self._api_key else None
        try:
            ws = ws_client.connect(
                self.url,
                additional_headers=headers,
                open_timeout=remaining_s,
                close_timeout=min(0.2, self.timeout_s),
                compression=None,
                max_size=self._limits.max_message_bytes,
                max_queue=4,
                legacy=True,
            )
        except websockets.InvalidStatus as exc:
            status = exc.response.status_code
            raise self._fail_connect(
                f"{self.url}: server refused the connection: HTTP {status}"
            ) from exc
        except (TimeoutError, OSError, websockets.WebSocketException) as exc:
            raise self._fail_connect(
                f"{self.url}: cannot connect within timeout_s = {self.timeout_s}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        try:
            ws.socket.settimeout(self.timeout_s)  # bounds a blocked send as well
            first = ws.recv(timeout=max(deadline_s - time.monotonic(), 1e-3))
            metadata = unpack(first, self._limits) if isinstance(first, bytes) else first
            if not isinstance(metadata, dict):
                raise ProtocolError(f"metadata is {type(metadata).__name__}: must be a map")
        except (TimeoutError, websockets.ConnectionClosed, ProtocolError) as exc:
            ws.close_socket()
            raise self._fail_connect(
                f"{self.url}: no valid metadata within timeout_s = {self.timeout_s}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        if hasattr(self, "spec"):
            try:
                _check_metadata(self.spec, metadata)
            except RemoteRunnerError as exc:
                ws.close_socket()
                self._fail_connect(str(exc))  # back off: a wrong server stays wrong
                raise
        self.server_metadata = metadata
        self._ws = ws
        self._backoff_s = 0.0
        self._next_attempt_s = 0.0
        self.counters["connects"] += 1
        return ws

    # ---------------------------------------------------------------- infer
    def infer(
        self,
        obs: Observation,
        noise: np.ndarray | None = None,
        prefix_actions: np.ndarray | None = None,
        prefix_len: int = 0,
    ) -> ActionChunk:
        """Send ``obs`` to the server and return its chunk stamped with ``obs.stamp_s``.

        Raises:
            RemoteTimeoutError: no reply within ``timeout_s``.
            RemoteConnectionError: cannot connect (or in back-off), or the connection broke.
            RemoteServerError: the server replied with an error or a malformed reply
                (also actions holding NaN or inf).
            InvalidObservationError: ``obs``, ``noise`` or the prefix fail the checks
                every local runner applies (nothing is sent).
            ProtocolError: ``obs`` cannot be encoded.
        """
        with self._lock:
            return self._infer_locked(obs, noise, prefix_actions, prefix_len)

    def _infer_locked(
        self,
        obs: Observation,
        noise: np.ndarray | None,
        prefix_actions: np.ndarray | None,
        prefix_len: int,
    ) -> ActionChunk:
        t_start = time.perf_counter()
        deadline_s = time.monotonic() + self.timeout_s
        noise, prefix_actions, prefix_len = self._checked_inputs(
            obs, noise, prefix_actions, prefix_len
        )
        self.counters["requests"] += 1
        self._request_id += 1
        request_id = self._request_id
        request = observation_to_request(
            obs,
            noise,
            prefix_actions,
            prefix_len,
            request_id,
            self._camera_keys,
            cameras=self.spec.cameras,
        )
        request[KEY_PREFIX_LEN] = prefix_len  # always sent: the server never assumes one
        message = pack(request)
        encode_ms = (time.perf_counter() - t_start) * 1000.0
        limit = self.server_metadata.get("max_message_bytes")
        if isinstance(limit, int) and len(message) > limit:
            raise ProtocolError(
                f"request size = {len(message)} bytes: exceeds the server's "
                f"max_message_bytes = {limit}"
            )

        if not self.connected:
            self._drop()
            self._connect(deadline_s)
        ws = self._ws
        assert ws is not None
        t_send = time.perf_counter()
        t0 = time.time()
        try:
            ws.send(message)
            reply = ws.recv(timeout=max(deadline_s - time.monotonic(), 1e-3))
        except TimeoutError as exc:
            self._drop()
            self.counters["timeouts"] += 1
            self.last_error = f"no reply within timeout_s = {self.timeout_s}"
            raise RemoteTimeoutError(
                f"{self.url}: no reply within timeout_s = {self.timeout_s} "
                f"(request_id = {request_id})"
            ) from exc
        except (websockets.ConnectionClosed, OSError) as exc:
            code = getattr(getattr(exc, "rcvd", None), "code", None)
            self._drop()
            self.counters["connection_errors"] += 1
            self.last_error = f"connection closed: {exc}"
            hint = ""
            if code == 1009:
                hint = f" (message too big for the server; request size = {len(message)} bytes)"
            raise RemoteConnectionError(f"{self.url}: connection lost: {exc}{hint}") from exc
        t3 = time.time()
        round_trip_ms = (time.perf_counter() - t_send) * 1000.0

        if isinstance(reply, str):
            self.counters["server_errors"] += 1
            self.last_error = reply.splitlines()[0] if reply else "empty error"
            raise RemoteServerError(f"{self.url}: server error reply: {reply}")
        try:
            decoded = unpack(reply, self._limits)
            actions = response_to_actions(decoded, self.spec)
        except (ProtocolError, RemoteServerError) as exc:
            self._drop()
            self.counters["server_errors"] += 1
            self.last_error = str(exc)
            raise RemoteServerError(f"{self.url}: malformed reply: {exc}") from exc
        echoed = decoded.get("request_id")
        if echoed is not None and echoed != request_id:
            self._drop()
            self.counters["server_errors"] += 1
            raise RemoteServerError(
                f"{self.url}: reply request_id = {echoed!r}: expected {request_id}"
            )
        self._record_clock(t0, t3, decoded)
        self.last_round_trip_ms = round_trip_ms
        self.counters["ok"] += 1
        return ActionChunk(
            t_obs_s=float(obs.stamp_s),
            dt_action_s=self.spec.dt_action_s,
            joint_names=tuple(self.spec.joint_names),
            positions=actions,
            timings_ms=self._timings(decoded, encode_ms, round_trip_ms, t_start),
        )

    def _checked_inputs(
        self,
        obs: Observation,
        noise: np.ndarray | None,
        prefix_actions: np.ndarray | None,
        prefix_len: int,
    ) -> tuple[np.ndarray | None, np.ndarray | None, int]:
        """Check the inputs as a local runner would; return ``(noise, prefix, d)`` for the wire.

        ``noise`` becomes ``[H, A]`` float32; the prefix its ``d`` binding rows
        padded to ``[H, A]`` float64 (``None`` when ``d`` is 0).

        Raises:
            InvalidObservationError: see :func:`~vla_edge.runners.preprocess.validate_observation`,
                :func:`~vla_edge.runners.preprocess.check_noise` and
                :func:`~vla_edge.runners.preprocess.check_prefix`.
        """
        validate_observation(obs, self.spec)
        h, a = self.spec.chunk_horizon, self.spec.action_dim
        wire_noise = None if noise is None else check_noise(noise, h, a)[0]
        prefix_len, rows = check_prefix(prefix_actions, prefix_len, h, a)
        wire_prefix = None
        if rows is not None:
            wire_prefix = np.zeros((h, a))
            wire_prefix[:prefix_len] = rows
        return wire_noise, wire_prefix, prefix_len

    @staticmethod
    def _timings(
        reply: dict[str, Any], encode_ms: float, round_trip_ms: float, t_start: float
    ) -> dict[str, float]:
        timings = {"encode": encode_ms, "round_trip": round_trip_ms}
        server = reply.get("server_timing")
        if isinstance(server, dict):
            for key, value in server.items():
                if isinstance(value, float | int) and not isinstance(value, bool):
                    name = str(key).removesuffix("_ms")
                    timings[f"server_{name}"] = float(value)
            stages = server.get("stages_ms")
            if isinstance(stages, dict):
                for key, value in stages.items():
                    if isinstance(value, float | int) and not isinstance(value, bool):
                        timings[f"server/{key}"] = float(value)
            server_ms = sum(
                float(server.get(k, 0.0))
                for k in ("decode_ms", "queue_ms", "infer_ms")
                if isinstance(server.get(k), float | int)
            )
            timings["network"] = max(round_trip_ms - server_ms, 0.0)
        timings["total"] = (time.perf_counter() - t_start) * 1000.0
        return timings

    def close(self) -> None:
        """Close the connection (a later ``infer`` reconnects)."""
        with self._lock:
            if self._ws is not None:
                try:
                    self._ws.close()
                except Exception:  # closing a broken connection must not raise
                    pass
            self._ws = None

    def __enter__(self) -> RemoteRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
