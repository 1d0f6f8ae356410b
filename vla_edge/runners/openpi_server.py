"""Serve any ``Runner`` over openpi's websocket protocol (``vla-edge serve``).

The protocol is the one ``openpi_client.WebsocketClientPolicy`` speaks:

1. the client opens a websocket (optionally with ``Authorization: Api-Key K``);
2. the server sends one binary msgpack frame: the metadata map (joint names,
   ``action_horizon``, ``dt_action_s``, cameras, image size, limits); images
   of any other size are resized to it server-side as openpi does
   (``image_resize: "resize_with_pad"``), so clients need not know it;
3. per request the client sends one binary msgpack frame (the observation map,
   keys in :mod:`vla_edge.runners.openpi_adapter`) and the server answers with
   one binary frame (``actions`` + timing fields) or, on a bad request or a
   runner failure, one *text* frame naming the error; the connection stays
   open and the server keeps serving.

What ``observation/state`` and ``actions`` are depends on the policy (the
metadata's ``mode``, fixed by the runner: :func:`native_spec_of`):

* ``policy_native``: a policy whose state is not the robot's joints (a
  ``vla-edge import --state-space eef_pose`` export, openpi LIBERO's π0): the
  request's state is the policy's own (LIBERO's 8-D end-effector pose) and the
  reply's ``actions`` are the policy's own ``[H, A]``, un-normalised (LIBERO's
  end-effector delta 6 + gripper 1), what openpi's ``LiberoOutputs`` returns;
  the client executes them itself. The runner's ``infer_native`` does it all;
  the metadata adds ``state_space``, ``state_names`` and ``state_dim``, and
  ``action_dim`` is the reply's width.
* ``joint_targets``: every other policy, one reading the robot's joints (the
  bundled model, a ``joint_position``-state import with any action space): the
  state is the joint positions, the reply ``[H, N]`` joint-position targets
  through the policy's action space, as the local runner returns them. Kept as
  it was for action-space policies too: their state is the robot's joint vector
  either way, a reply of joint targets is what any robot client can execute
  without the policy's kinematics or units, and vla_edge's own client
  (:class:`~vla_edge.runners.remote.RemoteRunner`, ``policy:=ws://...``)
  relies on it to return the local chunk bit for bit. Its ``action_dim`` is
  ``len(joint_names)``; an openpi client of, say, a joint-velocity policy so
  gets the positions the velocities lead to, not the velocities.

``GET /healthz`` answers 200 once the policy is loaded (503 before). A frame
larger than ``max_message_bytes`` is never read: the connection is closed with
code 1009 (message too big), other connections are unaffected. Work is
bounded: at most ``max_connections`` connections, one request in flight per
connection, inference on one worker thread under a lock. The command's options are
:mod:`vla_edge.cli.serve`'s.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hmac
import http
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, cast

import websockets
import websockets.asyncio.server as ws_server

from vla_edge.core.errors import (
    InvalidObservationError,
    ProtocolError,
    VlaEdgeError,
)
from vla_edge.runners.base import NativeRunner, NativeSpec, Runner
from vla_edge.runners.image_resize import MAX_IMAGE_SIDE_PX
from vla_edge.runners.openpi_adapter import (
    KEY_PROMPT,
    KEY_STATE,
    KEY_TIMESTAMP,
    InferRequest,
    actions_to_response,
    camera_key,
    request_to_observation,
)
from vla_edge.runners.openpi_protocol import ProtocolLimits, pack, unpack

logger = logging.getLogger(__name__)

PROTOCOL_NAME = "openpi-msgpack-numpy"
PROTOCOL_VERSION = 1
HEALTH_PATH = "/healthz"
CLOSE_TRY_AGAIN_LATER = 1013
IMAGE_RESIZE = "resize_with_pad"
"""How images of another size are fitted: openpi's aspect-keeping, zero-padded resize."""
MODE_JOINT_TARGETS = "joint_targets"
MODE_POLICY_NATIVE = "policy_native"


def native_spec_of(runner: Runner) -> NativeSpec | None:
    """The runner's :class:`NativeSpec` when it is served in the policy's units, else None.

    That is when the policy's state is not the robot's joints: a client can send
    that state and execute the policy's own actions, but has no joint vector to
    give it (see the module docstring).
    """
    if isinstance(runner, NativeRunner) and runner.native_spec.state_space != "joint_position":
        return runner.native_spec
    return None


@dataclass
class ServerStats:
    """Counters of what the server saw (all since start)."""

    connections_open: int = 0
    connections_total: int = 0
    requests_ok: int = 0
    errors_protocol: int = 0
    errors_observation: int = 0
    errors_runner: int = 0
    rejected_auth: int = 0
    rejected_busy: int = 0


class PolicyServer:
    """openpi-compatible websocket server around one ``Runner``.

    Args:
        runner: the policy; ``None`` until :meth:`set_runner` (``/healthz`` is 503
            and connections are refused with 503 meanwhile).
        host: address to bind (127.0.0.1 unless the deployment needs otherwise).
        port: TCP port; 0 picks a free one (see :attr:`port` after start).
        api_key: when set, a websocket must carry ``Authorization: Api-Key <key>``.
        limits: decoding limits; ``limits.max_message_bytes`` is also the
            websocket frame limit.
        max_connections: most simultaneous websocket connections.
        camera_keys: camera name -> openpi key overrides.
        metadata: extra entries merged into the metadata sent on connect.
    """

    def __init__(
        self,
        runner: Runner | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 8000,
        api_key: str | None = None,
        limits: ProtocolLimits | None = None,
        max_connections: int = 8,
        camera_keys: dict[str, str] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections = {max_connections}: must be >= 1")
        self._runner = runner
        self.host = host
        self._port = port
        self._api_key = api_key or None
        self.limits = limits or ProtocolLimits()
        self.max_connections = max_connections
        self._camera_keys = camera_keys
        self._extra_metadata = dict(metadata or {})
        self.stats = ServerStats()
        self._lock = threading.Lock()
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._startup_error: BaseException | None = None

    # ------------------------------------------------------------------ state
    @property
    def runner(self) -> Runner | None:
        """The served runner (``None`` while loading)."""
        return self._runner

    def set_runner(self, runner: Runner) -> None:
        """Install the loaded runner; from now on ``/healthz`` answers 200."""
        self._runner = runner

    @property
    def mode(self) -> str:
        """``policy_native`` or ``joint_targets`` (see the module docstring)."""
        native = native_spec_of(self._runner) if self._runner is not None else None
        return MODE_JOINT_TARGETS if native is None else MODE_POLICY_NATIVE

    @property
    def loaded(self) -> bool:
        """Whether a runner is installed."""
        return self._runner is not None

    @property
    def port(self) -> int:
        """The bound port (the real one once started with ``port=0``)."""
        return self._port

    @property
    def url(self) -> str:
        """``ws://host:port`` of this server."""
        return f"ws://{self.host}:{self._port}"

    def metadata(self) -> dict[str, Any]:
        """The map sent to every client on connect."""
        if self._runner is None:
            raise RuntimeError("metadata() needs a loaded runner")
        spec = self._runner.spec
        meta: dict[str, Any] = {
            "server": "vla_edge",
            "protocol": PROTOCOL_NAME,
            "protocol_version": PROTOCOL_VERSION,
            "joint_names": list(spec.joint_names),
            "action_dim": spec.action_dim,
            "action_horizon": spec.chunk_horizon,
            "dt_action_s": spec.dt_action_s,
            "cameras": list(spec.cameras),
            "camera_keys": {c: camera_key(c, self._camera_keys) for c in spec.cameras},
            "state_key": KEY_STATE,
            "prompt_key": KEY_PROMPT,
            "timestamp_key": KEY_TIMESTAMP,
            "image_height": spec.image_height,
            "image_width": spec.image_width,
            "image_resize": IMAGE_RESIZE,
            "max_image_side_px": MAX_IMAGE_SIDE_PX,
            "supports_prefix": spec.supports_prefix,
            "max_message_bytes": self.limits.max_message_bytes,
            "mode": self.mode,
        }
        native = native_spec_of(self._runner)
        if native is not None:
            meta.update(
                state_space=native.state_space,
                state_names=list(native.state_names),
                state_dim=native.state_dim,
                action_dim=native.action_dim,
                supports_prefix=False,
            )
        meta.update(self._extra_metadata)
        return meta

    # ------------------------------------------------------------ handshake
    def _process_request(
        self, connection: ws_server.ServerConnection, request: ws_server.Request
    ) -> ws_server.Response | None:
        """Answer ``/healthz``; refuse unauthorised, early or excess connections."""
        path = request.path.split("?", 1)[0]
        if path == HEALTH_PATH:
            if self.loaded:
                return connection.respond(http.HTTPStatus.OK, "OK\n")
            return connection.respond(http.HTTPStatus.SERVICE_UNAVAILABLE, "loading\n")
        if self._api_key is not None:
            given = request.headers.get("Authorization", "")
            expected = f"Api-Key {self._api_key}"
            if not hmac.compare_digest(given.encode(), expected.encode()):
                self.stats.rejected_auth += 1
                return connection.respond(
                    http.HTTPStatus.UNAUTHORIZED,
                    "Authorization header must be 'Api-Key <key>' with the server's key\n",
                )
        if not self.loaded:
            return connection.respond(http.HTTPStatus.SERVICE_UNAVAILABLE, "policy is loading\n")
        if self.stats.connections_open >= self.max_connections:
            self.stats.rejected_busy += 1
            return connection.respond(
                http.HTTPStatus.SERVICE_UNAVAILABLE,
                f"connections = {self.stats.connections_open}: at max_connections = "
                f"{self.max_connections}\n",
            )
        return None

    # ------------------------------------------------------------- requests
    async def _handle(self, ws: ws_server.ServerConnection) -> None:
        """One connection: metadata, then one request at a time until it closes."""
        if self.stats.connections_open >= self.max_connections:
            self.stats.rejected_busy += 1
            await ws.close(CLOSE_TRY_AGAIN_LATER, f"at max_connections = {self.max_connections}")
            return
        self.stats.connections_open += 1
        self.stats.connections_total += 1
        try:
            await ws.send(pack(self.metadata()))
            prev_total_ms: float | None = None
            async for message in ws:
                t_start = time.perf_counter()
                reply = await self._answer(message, prev_total_ms)
                await ws.send(reply)
                prev_total_ms = (time.perf_counter() - t_start) * 1000.0
        except websockets.ConnectionClosed:
            pass
        finally:
            self.stats.connections_open -= 1

    async def _answer(self, message: str | bytes, prev_total_ms: float | None) -> bytes | str:
        """The reply frame for one request: msgpack actions, or a text error."""
        recv_time_s = time.time()
        t_start = time.perf_counter()
        runner = self._runner
        assert runner is not None  # connections are refused until loaded
        try:
            if isinstance(message, str):
                raise ProtocolError("frame is text: requests must be binary msgpack frames")
            decoded = unpack(message, self.limits)
            request = request_to_observation(
                decoded,
                runner.spec,
                now_s=recv_time_s,
                camera_keys=self._camera_keys,
                native=native_spec_of(runner),
            )
        except ProtocolError as exc:
            self.stats.errors_protocol += 1
            return f"{type(exc).__name__}: {exc}"
        except InvalidObservationError as exc:
            self.stats.errors_observation += 1
            return f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # whatever a request holds, it must not end the connection
            self.stats.errors_protocol += 1
            logger.exception("request could not be parsed")
            return f"ProtocolError: request could not be parsed: {type(exc).__name__}: {exc}"
        decode_ms = (time.perf_counter() - t_start) * 1000.0

        loop = asyncio.get_running_loop()
        assert self._executor is not None
        try:
            actions, stages_ms, queue_ms, infer_ms = await loop.run_in_executor(
                self._executor, self._infer, runner, request, time.perf_counter()
            )
        except InvalidObservationError as exc:
            self.stats.errors_observation += 1
            return f"{type(exc).__name__}: {exc}"
        except Exception as exc:  # a runner failure must not end the server
            self.stats.errors_runner += 1
            logger.exception("runner failed on a request")
            kind = type(exc).__name__ if isinstance(exc, VlaEdgeError) else "RunnerError"
            return f"{kind}: inference failed: {type(exc).__name__}: {exc}"

        try:
            reply = pack(
                self._response(
                    actions,
                    stages_ms,
                    request,
                    recv_time_s,
                    decode_ms,
                    queue_ms,
                    infer_ms,
                    prev_total_ms,
                )
            )
        except Exception as exc:  # e.g. a runner returning non-numeric timings
            self.stats.errors_runner += 1
            logger.exception("runner output cannot be sent")
            return f"RunnerError: runner output cannot be encoded: {type(exc).__name__}: {exc}"
        self.stats.requests_ok += 1
        return reply

    @staticmethod
    def _response(
        actions: Any,
        stages_ms: dict[str, float],
        request: InferRequest,
        recv_time_s: float,
        decode_ms: float,
        queue_ms: float,
        infer_ms: float,
        prev_total_ms: float | None,
    ) -> dict[str, Any]:
        """The reply map: actions, echoes and the timing fields."""
        response = actions_to_response(actions, request)
        timing: dict[str, Any] = {
            "infer_ms": infer_ms,
            "decode_ms": decode_ms,
            "queue_ms": queue_ms,
            "stages_ms": {str(k): float(v) for k, v in stages_ms.items()},
        }
        if prev_total_ms is not None:
            timing["prev_total_ms"] = prev_total_ms
        response["server_timing"] = timing
        response["server_recv_time_s"] = recv_time_s
        response["server_time_s"] = time.time()
        return response

    def _infer(
        self, runner: Runner, request: InferRequest, t_submit: float
    ) -> tuple[Any, dict[str, float], float, float]:
        """Run one inference under the lock (worker thread): actions, stage ms, queue, infer."""
        with self._lock:
            t_start = time.perf_counter()
            if native_spec_of(runner) is not None:
                native = cast(NativeRunner, runner).infer_native(
                    request.observation, noise=request.noise
                )
                actions, stages_ms = native.actions, native.timings_ms
            else:
                chunk = runner.infer(
                    request.observation,
                    noise=request.noise,
                    prefix_actions=request.prefix_actions,
                    prefix_len=request.prefix_len,
                )
                actions, stages_ms = chunk.positions, chunk.timings_ms
            t_end = time.perf_counter()
        return actions, stages_ms, (t_start - t_submit) * 1000.0, (t_end - t_start) * 1000.0

    # ------------------------------------------------------------ lifecycle
    async def _main(self, loader: Callable[[], Runner] | None = None) -> int:
        """Listen until stopped; with ``loader``, load the runner while already listening."""
        self._loop = asyncio.get_running_loop()
        self._stop_event = self._stop_event or asyncio.Event()
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="vla-edge-infer"
        )
        try:
            async with ws_server.serve(
                self._handle,
                self.host,
                self._port,
                process_request=self._process_request,
                compression=None,
                max_size=self.limits.max_message_bytes,
                max_queue=4,
            ) as server:
                self._port = int(next(iter(server.sockets)).getsockname()[1])
                self._ready.set()
                logger.info("serving on %s", self.url)
                if loader is not None:
                    try:
                        runner = await self._loop.run_in_executor(None, loader)
                    except Exception as exc:
                        logger.error("policy failed to load: %s: %s", type(exc).__name__, exc)
                        return 1
                    self.set_runner(runner)
                    logger.info("policy loaded; %s%s answers 200", self.url, HEALTH_PATH)
                await self._stop_event.wait()
            return 0
        except OSError as exc:
            self._startup_error = exc
            self._ready.set()
            return 1
        finally:
            self._executor.shutdown(wait=False, cancel_futures=True)

    def start(self, timeout_s: float = 10.0) -> PolicyServer:
        """Serve from a background thread; return once listening.

        Raises:
            OSError: the address could not be bound.
            TimeoutError: not listening within ``timeout_s``.
        """
        self._ready.clear()
        self._startup_error = None
        self._stop_event = None
        self._thread = threading.Thread(
            target=lambda: asyncio.run(self._main()), name="vla-edge-serve", daemon=True
        )
        self._thread.start()
        if not self._ready.wait(timeout_s):
            raise TimeoutError(f"server not listening within timeout_s = {timeout_s}")
        if self._startup_error is not None:
            raise self._startup_error
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Close all connections and stop serving (waits at most ``timeout_s``)."""
        loop, event = self._loop, self._stop_event
        if loop is not None and event is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # loop already closed
                pass
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def serve_forever(self, loader: Callable[[], Runner] | None = None) -> int:
        """Serve on the calling thread until SIGINT/SIGTERM; returns an exit code."""

        async def main() -> int:
            stop_event = self._stop_event = asyncio.Event()
            for sig in (signal.SIGINT, signal.SIGTERM):
                asyncio.get_running_loop().add_signal_handler(sig, stop_event.set)
            return await self._main(loader)

        code = asyncio.run(main())
        if self._startup_error is not None:
            print(f"cannot serve on {self.url}: {self._startup_error}", file=sys.stderr)
        return code

    def stats_dict(self) -> dict[str, int]:
        """The counters as a plain dict (for diagnostics)."""
        return asdict(self.stats)

    def __enter__(self) -> PolicyServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
