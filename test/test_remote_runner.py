"""``RemoteRunner``: the Runner protocol over openpi's protocol, bounded and self-healing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from openpi_fixtures import (
    SPEC,
    ImageStatePolicy,
    OpenpiDictPolicy,
    OpenpiServerThread,
    expected_actions,
    free_port,
    make_observation,
    wait_listening,
)

from vla_edge.core.errors import (
    InvalidObservationError,
    ProtocolError,
    RemoteConnectionError,
    RemoteRunnerError,
    RemoteServerError,
    RemoteTimeoutError,
)
from vla_edge.runners.base import Runner, RunnerSpec
from vla_edge.runners.openpi_protocol import ProtocolLimits
from vla_edge.runners.openpi_server import PolicyServer
from vla_edge.runners.remote import RemoteRunner, spec_from_metadata

FIXTURES = Path(__file__).with_name("openpi_fixtures.py")


def _metadata() -> dict:
    return {
        "joint_names": list(SPEC.joint_names),
        "action_horizon": SPEC.chunk_horizon,
        "dt_action_s": SPEC.dt_action_s,
        "cameras": list(SPEC.cameras),
        "image_height": SPEC.image_height,
        "image_width": SPEC.image_width,
    }


def test_remote_runner_gets_actions_from_the_openpi_server_package() -> None:
    with OpenpiServerThread(OpenpiDictPolicy(), free_port()) as server:
        runner = RemoteRunner(f"ws://127.0.0.1:{server.port}", timeout_s=2.0, spec=SPEC)
        assert isinstance(runner, Runner)
        for seed in range(3):
            obs = make_observation(seed=seed, stamp_s=50.0 + seed)
            chunk = runner.infer(obs)
            np.testing.assert_allclose(
                chunk.positions, expected_actions(obs.images, obs.state), atol=0
            )
            assert chunk.t_obs_s == 50.0 + seed
            assert chunk.joint_names == SPEC.joint_names and chunk.dt_action_s == 0.1
            assert chunk.timings_ms["server_infer"] >= 0.0
            assert chunk.timings_ms["round_trip"] > 0.0
        assert runner.clock_offset_s is None  # that server sends no clock fields
        runner.close()


def test_remote_runner_reads_its_spec_from_openpi_server_metadata() -> None:
    with OpenpiServerThread(OpenpiDictPolicy(), free_port(), metadata=_metadata()) as server:
        runner = RemoteRunner(f"ws://127.0.0.1:{server.port}", timeout_s=2.0)
        assert runner.spec == RunnerSpec(**{**SPEC.__dict__, "supports_prefix": False})
        obs = make_observation(seed=5)
        np.testing.assert_array_equal(
            runner.infer(obs).positions, expected_actions(obs.images, obs.state)
        )
        runner.close()


def test_openpi_server_error_then_reconnect() -> None:
    policy = OpenpiDictPolicy(fail_on_prompt="fail please")
    with OpenpiServerThread(policy, free_port()) as server:
        runner = RemoteRunner(f"ws://127.0.0.1:{server.port}", timeout_s=2.0, spec=SPEC)
        obs = make_observation(seed=1)
        failing = make_observation(seed=1)
        failing.instruction = "fail please"
        with pytest.raises(RemoteServerError, match="policy failure requested by the test"):
            runner.infer(failing)
        # openpi's server closes the connection after an error; the runner reconnects
        deadline = time.monotonic() + 3.0
        while True:
            try:
                chunk = runner.infer(obs)
                break
            except RemoteConnectionError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        np.testing.assert_array_equal(chunk.positions, expected_actions(obs.images, obs.state))
        runner.close()


def test_chunk_is_stamped_with_the_local_observation_time_and_offset_is_measured() -> None:
    with PolicyServer(ImageStatePolicy(), port=0) as server:
        runner = RemoteRunner(server.url, timeout_s=2.0)
        for i in range(5):
            chunk = runner.infer(make_observation(seed=i, stamp_s=1234.5 + i))
            assert chunk.t_obs_s == 1234.5 + i
        offset_s = runner.clock_offset_s
        assert offset_s is not None and abs(offset_s) < 0.05  # same clock on localhost
        diag = runner.diagnostics()
        assert diag["ok"] == 5 and diag["connected"] == 1
        assert abs(diag["clock_offset_ms"]) < 50.0 and diag["round_trip_ms"] > 0.0
        runner.close()


def test_noise_and_prefix_reach_the_served_runner() -> None:
    with PolicyServer(ImageStatePolicy(), port=0) as server:
        runner = RemoteRunner(server.url, timeout_s=2.0)
        assert runner.spec.supports_prefix
        obs = make_observation(seed=9)
        rng = np.random.default_rng(1)
        noise = rng.standard_normal((10, 7)).astype(np.float32)
        prefix = rng.standard_normal((10, 7)).astype(np.float32)
        chunk = runner.infer(obs, noise=noise, prefix_actions=prefix, prefix_len=4)
        expected = expected_actions(obs.images, obs.state, noise, prefix, 4)
        np.testing.assert_array_equal(chunk.positions, expected)
        assert "server/policy" in chunk.timings_ms and "network" in chunk.timings_ms
        runner.close()


def test_spec_that_differs_from_server_metadata_is_refused() -> None:
    other = RunnerSpec(**{**SPEC.__dict__, "image_height": 64, "image_width": 64})
    with PolicyServer(ImageStatePolicy(), port=0) as server:
        runner = RemoteRunner(server.url, timeout_s=2.0, spec=other)
        with pytest.raises(RemoteRunnerError, match=r"image_height = 32: this runner expects 64"):
            runner.infer(make_observation(spec=other))


def test_metadata_without_policy_description_needs_an_explicit_spec() -> None:
    with pytest.raises(RemoteRunnerError, match=r"joint_names = None: must be a list"):
        spec_from_metadata({})


class _RefusingPolicy(ImageStatePolicy):
    """Refuses the instruction ``"refuse"`` on the server side (the client cannot know)."""

    def infer(self, obs, noise=None, prefix_actions=None, prefix_len=0):  # noqa: ANN001, ANN201
        if obs.instruction == "refuse":
            raise InvalidObservationError("instruction 'refuse' is refused by the test policy")
        return super().infer(obs, noise, prefix_actions, prefix_len)


def test_server_error_reply_keeps_the_connection_usable() -> None:
    with PolicyServer(_RefusingPolicy(), port=0) as server:
        runner = RemoteRunner(server.url, timeout_s=2.0)
        bad = make_observation(seed=1)
        bad.instruction = "refuse"
        with pytest.raises(RemoteServerError, match=r"instruction 'refuse' is refused"):
            runner.infer(bad)
        assert runner.connected
        good = make_observation(seed=2)
        chunk = runner.infer(good)
        np.testing.assert_array_equal(chunk.positions, expected_actions(good.images, good.state))
        assert runner.counters["connects"] == 1
        runner.close()


def test_request_larger_than_server_limit_is_refused_before_sending() -> None:
    limits = ProtocolLimits(max_message_bytes=4096)
    with PolicyServer(ImageStatePolicy(), port=0, limits=limits) as server:
        runner = RemoteRunner(server.url, timeout_s=2.0)
        with pytest.raises(ProtocolError, match=r"request size = \d+ bytes.*max_message_bytes"):
            runner.infer(make_observation())
        runner.close()


def test_slow_server_raises_remote_timeout_within_the_timeout() -> None:
    with PolicyServer(ImageStatePolicy(delay_s=0.6), port=0) as server:
        runner = RemoteRunner(server.url, timeout_s=0.2)
        t0 = time.monotonic()
        with pytest.raises(RemoteTimeoutError, match=r"no reply within timeout_s = 0.2"):
            runner.infer(make_observation())
        assert time.monotonic() - t0 < 0.2 + 0.2
        assert not runner.connected  # a late reply can never be taken for the next one
        assert runner.counters["timeouts"] == 1
        runner.close()


def test_unreachable_server_raises_connection_error_and_backs_off() -> None:
    port = free_port()
    with pytest.raises(RemoteConnectionError, match="cannot connect"):
        RemoteRunner(f"ws://127.0.0.1:{port}", timeout_s=0.3)
    runner = RemoteRunner(f"ws://127.0.0.1:{port}", timeout_s=0.3, spec=SPEC, backoff_initial_s=0.2)
    obs = make_observation()
    with pytest.raises(RemoteConnectionError, match=r"next attempt in 0.200 s"):
        runner.infer(obs)
    t0 = time.monotonic()
    with pytest.raises(RemoteConnectionError, match="reconnect back-off"):
        runner.infer(obs)
    assert time.monotonic() - t0 < 0.05  # fails at once during back-off
    time.sleep(0.25)
    with pytest.raises(RemoteConnectionError, match=r"next attempt in 0.400 s"):
        runner.infer(obs)


def test_api_key_is_sent_and_a_wrong_one_is_refused() -> None:
    with PolicyServer(ImageStatePolicy(), port=0, api_key="k-123") as server:
        with pytest.raises(RemoteConnectionError, match="HTTP 401"):
            RemoteRunner(server.url, timeout_s=1.0, api_key="nope")
        runner = RemoteRunner(server.url, timeout_s=1.0, api_key="k-123")
        assert runner.infer(make_observation()).positions.shape == (10, 7)
        runner.close()


def test_server_stopped_then_restarted_on_the_same_port_is_reconnected() -> None:
    server = PolicyServer(ImageStatePolicy(), port=0).start()
    port = server.port
    runner = RemoteRunner(server.url, timeout_s=0.5, backoff_initial_s=0.05, backoff_max_s=0.2)
    obs = make_observation()
    assert runner.infer(obs).positions.shape == (10, 7)
    server.stop()
    t0 = time.monotonic()
    with pytest.raises((RemoteConnectionError, RemoteTimeoutError)):
        runner.infer(obs)
    assert time.monotonic() - t0 < 0.5 + 0.2
    server = PolicyServer(ImageStatePolicy(), port=port).start()
    try:
        chunk = _infer_until_ok(runner, obs, budget_s=3.0)
        np.testing.assert_array_equal(chunk.positions, expected_actions(obs.images, obs.state))
        assert runner.counters["connects"] == 2
    finally:
        runner.close()
        server.stop()


def _infer_until_ok(runner: RemoteRunner, obs: object, budget_s: float) -> object:
    deadline = time.monotonic() + budget_s
    while True:
        try:
            return runner.infer(obs)
        except RemoteRunnerError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _spawn_server(port: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, str(FIXTURES), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_listening(port, timeout_s=20.0)
    except TimeoutError:
        proc.kill()
        raise
    return proc


def test_killed_server_process_fails_within_timeout_then_runner_resumes_after_restart() -> None:
    port = free_port()
    proc = _spawn_server(port)
    try:
        runner = RemoteRunner(f"ws://127.0.0.1:{port}", timeout_s=0.5, backoff_max_s=0.2)
        obs = make_observation()
        for _ in range(5):
            assert runner.infer(obs).positions.shape == (10, 7)
        proc.send_signal(signal.SIGKILL)
        proc.wait(5.0)
        t0 = time.monotonic()
        with pytest.raises((RemoteConnectionError, RemoteTimeoutError)):
            runner.infer(obs)
        assert time.monotonic() - t0 < 0.5 + 0.2
        proc = _spawn_server(port)
        chunk = _infer_until_ok(runner, obs, budget_s=5.0)
        np.testing.assert_array_equal(chunk.positions, expected_actions(obs.images, obs.state))
        runner.close()
    finally:
        proc.kill()
        proc.wait(5.0)


def test_frozen_server_process_raises_timeout_not_a_hang() -> None:
    port = free_port()
    proc = _spawn_server(port)
    try:
        runner = RemoteRunner(f"ws://127.0.0.1:{port}", timeout_s=0.3, backoff_max_s=0.2)
        obs = make_observation()
        assert runner.infer(obs).positions.shape == (10, 7)
        os.kill(proc.pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            with pytest.raises(RemoteTimeoutError):
                runner.infer(obs)
            assert time.monotonic() - t0 < 0.3 + 0.2
            t0 = time.monotonic()
            with pytest.raises(RemoteConnectionError):  # the handshake cannot finish either
                runner.infer(obs)
            assert time.monotonic() - t0 < 0.3 + 0.2
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        chunk = _infer_until_ok(runner, obs, budget_s=5.0)
        np.testing.assert_array_equal(chunk.positions, expected_actions(obs.images, obs.state))
        runner.close()
    finally:
        proc.kill()
        proc.wait(5.0)


@pytest.mark.slow
def test_killed_server_mid_run_brings_controller_to_hold_and_restart_resumes() -> None:
    """Real-time loop: controller at 100 Hz, inference thread over RemoteRunner."""
    import queue
    import threading

    from vla_edge.config.models import ControllerConfig
    from vla_edge.control.controller import Controller
    from vla_edge.control.watchdog import Watchdog
    from vla_edge.core.stop import StopCategory

    config = ControllerConfig(merge="replace")
    port = free_port()
    proc = _spawn_server(port)
    runner = RemoteRunner(f"ws://127.0.0.1:{port}", timeout_s=0.3, backoff_max_s=0.2)
    controller = Controller(config, np.zeros(7))
    watchdog = Watchdog({"chunk": (config.chunk_timeout_s, StopCategory.CAT2)})
    chunks: queue.Queue = queue.Queue()
    wanted = threading.Event()
    stop = threading.Event()
    latest: dict[str, np.ndarray] = {"state": np.zeros(7)}
    failures: list[str] = []

    def inference_loop() -> None:
        while not stop.is_set():
            if not wanted.wait(0.01):
                continue
            wanted.clear()
            obs = make_observation(seed=0, stamp_s=time.monotonic())
            obs.state = latest["state"].copy()
            try:
                chunks.put(runner.infer(obs))
            except RemoteRunnerError as exc:
                failures.append(type(exc).__name__)
                time.sleep(0.02)

    worker = threading.Thread(target=inference_loop, daemon=True)
    worker.start()
    t0 = time.monotonic()
    events: dict[str, float] = {}
    commands: list[np.ndarray] = []
    try:
        while time.monotonic() - t0 < 12.0:
            now_s = time.monotonic()
            while not chunks.empty():
                controller.submit(chunks.get(), now_s)
                watchdog.beat("chunk", now_s)
                if "killed" in events and "restarted" in events and "resumed" not in events:
                    events["resumed"] = now_s
            command = controller.step(now_s)
            commands.append(command.positions.copy())
            latest["state"] = command.positions
            if controller.needs_inference(now_s):
                wanted.set()
            elapsed_s = now_s - t0
            if "killed" not in events and elapsed_s > 1.0:
                assert not controller.holding and controller.counters["accepted"] >= 2
                proc.kill()
                proc.wait(5.0)
                events["killed"] = now_s
            if "killed" in events and "hold" not in events and controller.holding:
                events["hold"] = now_s
            if "hold" in events and "cat2" not in events and watchdog.check(now_s).severity:
                events["cat2"] = now_s
            if "cat2" in events and "restarted" not in events:
                proc = _spawn_server(port)
                events["restarted"] = time.monotonic()
            if "resumed" in events and now_s - events["resumed"] > 0.3:
                break
            time.sleep(max(0.0, 0.01 - (time.monotonic() - now_s)))
    finally:
        stop.set()
        worker.join(2.0)
        runner.close()
        proc.kill()
        proc.wait(5.0)

    assert {"killed", "hold", "cat2", "restarted", "resumed"} <= set(events), events
    # the buffered chunk (< 1 s) runs out, then the hold starts: no waiting on the dead server
    assert events["hold"] - events["killed"] < 1.0 + 0.3
    assert set(failures) <= {"RemoteConnectionError", "RemoteTimeoutError"} and failures
    assert not controller.holding  # fresh chunks after the restart
    steps = np.abs(np.diff(np.asarray(commands), axis=0)).max()
    assert steps < 0.05  # no jump at the hold or at the resume


class _RecordingDictPolicy(OpenpiDictPolicy):
    """Keeps the keys of every request the openpi server hands it."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[dict] = []

    def infer(self, obs: dict) -> dict:
        """Record, then answer with the closed form."""
        self.requests.append(dict(obs))
        return super().infer(obs)


def _bad_inputs() -> list[tuple[str, dict, dict, str]]:
    f32 = {c: np.full((32, 32, 3), 0.5, np.float32) for c in SPEC.cameras}
    nan = {c: np.full((32, 32, 3), np.nan, np.float32) for c in SPEC.cameras}
    extra = {c: np.zeros((32, 32, 3), np.uint8) for c in (*SPEC.cameras, "top")}
    return [
        ("float image", {"images": f32}, {}, "dtype = float32, expected uint8"),
        ("NaN image", {"images": nan}, {}, "dtype = float32, expected uint8"),
        ("images list", {"images": [1]}, {}, "images must be a dict, got list"),
        ("non-str key", {"images": {**extra, 1: extra["top"]}}, {}, "images key = 1"),
        ("extra camera", {"images": extra}, {}, "expected \\['agentview', 'wrist'\\]"),
        ("instruction int", {"instruction": 5}, {}, "instruction = 5 must be a str"),
        ("instruction None", {"instruction": None}, {}, "must be a str, got NoneType"),
        ("zero width", {"instruction": "\u200b"}, {}, "is empty"),
        ("state NaN", {"state": np.full(7, np.nan)}, {}, "non-finite"),
        ("state 1e39", {"state": np.full(7, 1e39)}, {}, "overflows float32"),
        ("state str", {"state": np.array(["a"] * 7)}, {}, "state dtype = <U1"),
        ("prefix_len only", {}, {"prefix_len": 3}, "prefix_len = 3 but prefix_actions is None"),
        ("prefix_len 1.5", {}, {"prefix_len": 1.5, "prefix_actions": np.zeros((10, 7))}, "int"),
        ("noise int", {}, {"noise": np.zeros((10, 7), np.int64)}, "noise dtype = int64"),
        ("noise 1e39", {}, {"noise": np.full((10, 7), 1e39)}, "noise holds a non-finite"),
    ]


@pytest.mark.parametrize(
    ("changes", "kwargs", "words"),
    [case[1:] for case in _bad_inputs()],
    ids=[case[0] for case in _bad_inputs()],
)
def test_remote_runner_checks_inputs_like_a_local_runner_before_sending(
    changes, kwargs, words
) -> None:
    policy = ImageStatePolicy()
    with PolicyServer(policy, port=0) as server:
        runner = RemoteRunner(server.url, timeout_s=2.0)
        obs = make_observation(seed=3)
        for name, value in changes.items():
            setattr(obs, name, value)
        with pytest.raises(InvalidObservationError, match=words):
            runner.infer(obs, **kwargs)
        assert policy.calls == 0 and runner.counters["requests"] == 0
        runner.close()


def test_remote_runner_sends_the_specs_cameras_and_always_a_prefix_len() -> None:
    policy = _RecordingDictPolicy()
    with OpenpiServerThread(policy, free_port()) as server:
        runner = RemoteRunner(f"ws://127.0.0.1:{server.port}", timeout_s=2.0, spec=SPEC)
        obs = make_observation(seed=4)
        runner.infer(obs)
        prefix = np.full((3, 7), 0.25, np.float32)  # shorter than H: padded on the wire
        runner.infer(obs, prefix_actions=prefix, prefix_len=np.int64(2))
        runner.close()
    first, second = policy.requests
    images = {k for k in first if k.endswith("image")}
    assert images == {"observation/image", "observation/wrist_image"}
    assert first["vla_edge/prefix_len"] == 0 and "vla_edge/prefix_actions" not in first
    assert second["vla_edge/prefix_len"] == 2
    sent = second["vla_edge/prefix_actions"]
    assert sent.shape == (10, 7)
    np.testing.assert_array_equal(sent[:2], prefix[:2])


def test_remote_chunk_with_a_short_prefix_equals_the_local_one() -> None:
    local = ImageStatePolicy()
    with PolicyServer(ImageStatePolicy(), port=0) as server:
        runner = RemoteRunner(server.url, timeout_s=2.0)
        obs = make_observation(seed=6)
        noise = np.random.default_rng(2).standard_normal((1, 10, 7))  # float64, [1, H, A]
        prefix = np.random.default_rng(3).uniform(-0.3, 0.3, (3, 7))
        got = runner.infer(obs, noise=noise, prefix_actions=prefix, prefix_len=2).positions
        runner.close()
    want = local.infer(obs, noise[0].astype(np.float32), prefix, 2).positions
    np.testing.assert_array_equal(got, want)


class _NanPolicy(ImageStatePolicy):
    def infer(self, obs, noise=None, prefix_actions=None, prefix_len=0):  # noqa: ANN001, ANN201
        chunk = super().infer(obs, noise, prefix_actions, prefix_len)
        chunk.positions[3, 1] = np.nan
        return chunk


def test_reply_with_nan_actions_raises_remote_server_error() -> None:
    with PolicyServer(_NanPolicy(), port=0) as server:
        runner = RemoteRunner(server.url, timeout_s=2.0)
        with pytest.raises(RemoteServerError, match="actions hold 1 non-finite value"):
            runner.infer(make_observation())
        runner.close()


def test_constructor_closes_the_connection_when_the_metadata_is_bad() -> None:
    with PolicyServer(ImageStatePolicy(), port=0, metadata={"image_height": "bad"}) as server:
        with pytest.raises(RemoteRunnerError, match="server metadata image_height = 'bad'"):
            RemoteRunner(server.url, timeout_s=2.0)
        deadline = time.monotonic() + 2.0
        while server.stats.connections_open and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.stats.connections_open == 0
