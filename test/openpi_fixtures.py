"""Small deterministic policies and server helpers for the openpi protocol tests.

``ImageStatePolicy`` is a test fixture for the wire protocol (not a stand-in for
a named runner): a closed-form function of the images, state, noise and prefix,
so a test can compute the exact actions a server must return.

Run as a script it serves ``ImageStatePolicy`` with ``PolicyServer`` on
127.0.0.1 (used by the kill/restart tests)::

    python test/openpi_fixtures.py --port P [--delay-s D]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vla_edge.core.errors import InvalidObservationError  # noqa: E402
from vla_edge.core.types import ActionChunk, Observation  # noqa: E402
from vla_edge.runners.base import RunnerSpec  # noqa: E402

JOINTS = ("joint1", "joint2", "joint3", "joint4", "joint5", "joint6", "gripper")
SPEC = RunnerSpec(
    joint_names=JOINTS,
    chunk_horizon=10,
    dt_action_s=0.1,
    cameras=("agentview", "wrist"),
    image_height=32,
    image_width=32,
    supports_prefix=True,
)


def expected_actions(
    images: dict[str, np.ndarray],
    state: np.ndarray,
    noise: np.ndarray | None = None,
    prefix_actions: np.ndarray | None = None,
    prefix_len: int = 0,
    spec: RunnerSpec = SPEC,
) -> np.ndarray:
    """The policy's closed form: drift from ``state`` set by image brightness."""
    brightness = np.array([images[c].astype(np.float64).mean() / 255.0 for c in spec.cameras])
    direction = np.linspace(-1.0, 1.0, spec.action_dim) * (brightness[0] - 0.5)
    direction[-1] = 0.01 * brightness[-1]
    steps = np.arange(spec.chunk_horizon, dtype=np.float64)[:, None]
    positions = np.asarray(state, dtype=np.float64)[None, :] + 0.02 * steps * direction[None, :]
    if noise is not None:
        positions = positions + 0.001 * np.asarray(noise, dtype=np.float64)
    if prefix_actions is not None and prefix_len > 0:
        positions[:prefix_len] = np.asarray(prefix_actions, dtype=np.float64)[:prefix_len]
    return positions.astype(np.float32)


class ImageStatePolicy:
    """Deterministic ``Runner`` over ``SPEC`` (optionally slowed by ``delay_s``)."""

    def __init__(self, spec: RunnerSpec = SPEC, delay_s: float = 0.0) -> None:
        self.spec = spec
        self.delay_s = delay_s
        self.calls = 0

    def infer(
        self,
        obs: Observation,
        noise: np.ndarray | None = None,
        prefix_actions: np.ndarray | None = None,
        prefix_len: int = 0,
    ) -> ActionChunk:
        """Validate ``obs`` and return the closed-form chunk."""
        t0 = time.perf_counter()
        for cam in self.spec.cameras:
            image = obs.images.get(cam)
            shape = (self.spec.image_height, self.spec.image_width, 3)
            if image is None or image.shape != shape or image.dtype != np.uint8:
                raise InvalidObservationError(f"images[{cam!r}] must be uint8 {list(shape)}")
        if self.delay_s > 0.0:
            time.sleep(self.delay_s)
        positions = expected_actions(obs.images, obs.state, noise, prefix_actions, prefix_len)
        self.calls += 1
        return ActionChunk(
            t_obs_s=obs.stamp_s,
            dt_action_s=self.spec.dt_action_s,
            joint_names=self.spec.joint_names,
            positions=positions,
            timings_ms={"policy": (time.perf_counter() - t0) * 1000.0},
        )

    def close(self) -> None:
        """Nothing to release."""


class OpenpiDictPolicy:
    """The same closed form as an openpi ``BasePolicy`` (dict in, dict out)."""

    def __init__(self, fail_on_prompt: str | None = None) -> None:
        self.fail_on_prompt = fail_on_prompt

    def infer(self, obs: dict) -> dict:
        """LIBERO-style keys in, ``{"actions": [H, A]}`` out."""
        if self.fail_on_prompt is not None and obs.get("prompt") == self.fail_on_prompt:
            raise RuntimeError("policy failure requested by the test")
        images = {"agentview": obs["observation/image"], "wrist": obs["observation/wrist_image"]}
        return {"actions": expected_actions(images, obs["observation/state"])}

    def reset(self) -> None:
        """Stateless."""


def make_observation(seed: int = 0, stamp_s: float = 100.0, spec: RunnerSpec = SPEC) -> Observation:
    """A random but reproducible observation for ``spec``."""
    rng = np.random.default_rng(seed)
    shape = (spec.image_height, spec.image_width, 3)
    return Observation(
        stamp_s=stamp_s,
        images={c: rng.integers(0, 256, size=shape, dtype=np.uint8) for c in spec.cameras},
        state=rng.uniform(-0.5, 0.5, size=spec.action_dim),
        instruction="put the red block in the bowl",
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class OpenpiServerThread:
    """``openpi_server.WebsocketPolicyServer`` on 127.0.0.1 in a thread, stoppable."""

    def __init__(self, policy: object, port: int, metadata: dict | None = None) -> None:
        from openpi_server import WebsocketPolicyServer

        self.server = WebsocketPolicyServer(policy, host="127.0.0.1", port=port, metadata=metadata)
        self.port = port
        self._loop = asyncio.new_event_loop()
        self._task: asyncio.Task | None = None
        self._thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._task = self._loop.create_task(self.server.run())
        try:
            self._loop.run_until_complete(self._task)
        except (asyncio.CancelledError, Exception):
            pass
        finally:
            self._loop.close()

    def __enter__(self) -> OpenpiServerThread:
        self._thread.start()
        wait_listening(self.port)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._task is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._task.cancel)
        self._thread.join(5.0)


def wait_listening(port: int, timeout_s: float = 10.0) -> None:
    """Block until 127.0.0.1:``port`` accepts TCP connections (bounded)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port} within {timeout_s} s")


def _serve_main() -> int:
    from vla_edge.runners.openpi_server import PolicyServer

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--delay-s", type=float, default=0.0)
    args = parser.parse_args()
    server = PolicyServer(ImageStatePolicy(delay_s=args.delay_s), port=args.port)
    return server.serve_forever()


if __name__ == "__main__":
    sys.exit(_serve_main())
