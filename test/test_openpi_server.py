"""``PolicyServer`` speaks openpi's protocol, survives bad input and enforces its limits."""

from __future__ import annotations

import argparse
import http.client
import threading
import time
import tracemalloc

import msgpack
import numpy as np
import pytest
import websockets
import websockets.sync.client as ws_client
from openpi_client.websocket_client_policy import WebsocketClientPolicy
from openpi_fixtures import SPEC, ImageStatePolicy, expected_actions, make_observation

from vla_edge.cli.serve import add_arguments
from vla_edge.core.errors import ProtocolError
from vla_edge.core.types import ActionChunk, Observation
from vla_edge.runners.openpi_adapter import observation_to_request
from vla_edge.runners.openpi_protocol import ProtocolLimits, pack, unpack
from vla_edge.runners.openpi_server import PolicyServer

# openpi_client connects without websockets' context manager; that is its business.
pytestmark = pytest.mark.filterwarnings("ignore:connect\\(\\) must be used:DeprecationWarning")


def _healthz(port: int) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2.0)
    try:
        conn.request("GET", "/healthz")
        return conn.getresponse().status
    finally:
        conn.close()


def _connect(server: PolicyServer, **kw: object) -> tuple[ws_client.ClientConnection, dict]:
    ws = ws_client.connect(
        server.url, open_timeout=2.0, close_timeout=0.5, max_size=None, legacy=True, **kw
    )
    return ws, unpack(ws.recv(timeout=2.0))


def test_openpi_client_gets_actions_and_metadata() -> None:
    with PolicyServer(ImageStatePolicy(), port=0) as server:
        client = WebsocketClientPolicy(host="127.0.0.1", port=server.port)
        meta = client.get_server_metadata()
        assert meta["joint_names"] == list(SPEC.joint_names)
        assert (meta["action_horizon"], meta["dt_action_s"]) == (10, 0.1)
        assert meta["cameras"] == ["agentview", "wrist"]
        assert (meta["image_height"], meta["image_width"]) == (32, 32)
        # a policy reading the joints: joint positions in, joint targets out
        assert (meta["mode"], meta["action_dim"]) == ("joint_targets", 7)
        assert "state_space" not in meta
        for seed in range(3):
            obs = make_observation(seed=seed, stamp_s=5.0 + seed)
            reply = client.infer(observation_to_request(obs))
            np.testing.assert_array_equal(reply["actions"], expected_actions(obs.images, obs.state))
            assert reply["t_obs_s"] == 5.0 + seed
            assert reply["server_timing"]["infer_ms"] >= 0.0
            assert "policy" in reply["server_timing"]["stages_ms"]
            assert reply["server_recv_time_s"] <= reply["server_time_s"]
        assert "prev_total_ms" in reply["server_timing"]
        client._ws.close()


def test_plain_libero_request_without_extensions_is_served() -> None:
    obs = make_observation(seed=4)
    request = {
        "observation/image": obs.images["agentview"],
        "observation/wrist_image": obs.images["wrist"],
        "observation/state": obs.state.astype(np.float32),
        "prompt": obs.instruction,
    }
    with PolicyServer(ImageStatePolicy(), port=0) as server:
        client = WebsocketClientPolicy(host="127.0.0.1", port=server.port)
        reply = client.infer(request)
        client._ws.close()
    expected = expected_actions(obs.images, obs.state.astype(np.float32))
    np.testing.assert_allclose(reply["actions"], expected, atol=1e-6)
    assert "t_obs_s" not in reply


def test_healthz_is_503_while_loading_and_200_once_loaded() -> None:
    server = PolicyServer(None, port=0).start()
    try:
        assert _healthz(server.port) == 503
        with pytest.raises(websockets.InvalidStatus, match="503"):
            WebsocketClientPolicy(host="127.0.0.1", port=server.port)
        server.set_runner(ImageStatePolicy())
        assert _healthz(server.port) == 200
        client = WebsocketClientPolicy(host="127.0.0.1", port=server.port)
        assert client.get_server_metadata()["action_horizon"] == 10
        client._ws.close()
    finally:
        server.stop()


def test_api_key_is_enforced_when_set() -> None:
    with PolicyServer(ImageStatePolicy(), port=0, api_key="s3cret") as server:
        with pytest.raises(websockets.InvalidStatus, match="401"):
            WebsocketClientPolicy(host="127.0.0.1", port=server.port)
        with pytest.raises(websockets.InvalidStatus, match="401"):
            WebsocketClientPolicy(host="127.0.0.1", port=server.port, api_key="wrong")
        assert _healthz(server.port) == 200
        client = WebsocketClientPolicy(host="127.0.0.1", port=server.port, api_key="s3cret")
        obs = make_observation()
        reply = client.infer(observation_to_request(obs))
        np.testing.assert_array_equal(reply["actions"], expected_actions(obs.images, obs.state))
        client._ws.close()
        assert server.stats.rejected_auth == 2


def _forged_array(dtype: str, shape: list[int], data: bytes) -> dict:
    return {b"__ndarray__": True, b"data": data, b"dtype": dtype, b"shape": shape}


def _bad_payloads() -> list[tuple[bytes | str, str]]:
    good = observation_to_request(make_observation(seed=1))
    good_bytes = pack(good)
    nan_image = dict(good, **{"observation/image": np.full((32, 32, 3), np.nan, np.float32)})
    bool_state = dict(good, **{"observation/state": np.zeros(7, dtype=bool)})
    rgba_image = dict(good, **{"observation/image": np.zeros((8, 8, 4), np.uint8)})
    tall_image = dict(good, **{"observation/image": np.zeros((5000, 1, 3), np.uint8)})
    huge = msgpack.packb(
        dict(
            {k: v for k, v in good.items() if not isinstance(v, np.ndarray)},
            **{"observation/image": _forged_array("|u1", [10**6, 10**6, 3], b"\x00" * 12)},
        ),
        default=lambda o: _forged_array(o.dtype.str, list(o.shape), o.tobytes()),
    )
    object_dtype = msgpack.packb({"observation/image": _forged_array("|O", [1], b"\x00" * 8)})
    return [
        (good_bytes[: len(good_bytes) // 2], "ProtocolError"),
        (good_bytes[:1], "ProtocolError"),
        (b"\xc1\xc1\xc1", "ProtocolError"),
        (pack(nan_image), "observation/image holds NaN or inf"),
        (pack(bool_state), "observation/state is ndarray: must be a numeric array"),
        (pack(dict(good, **{"observation/state": "x"})), "observation/state is str"),
        (huge, "max_array_elements"),
        (object_dtype, "array dtype = '|O'"),
        (pack([1, 2, 3]), "must be a map"),
        (pack("hello"), "must be a map"),
        (pack(None), "must be a map"),
        (msgpack.packb({"t": msgpack.Timestamp(1, 0)}), "ProtocolError"),
        ("a text frame", "frame is text"),
        (pack(rgba_image), "observation/image shape = [8, 8, 4]: must be [H, W, 3]"),
        (pack(tall_image), "observation/image shape = [5000, 1, 3]: height and width"),
    ]


def test_bad_requests_get_error_replies_and_the_connection_keeps_serving() -> None:
    with PolicyServer(ImageStatePolicy(), port=0) as server:
        ws, _ = _connect(server)
        for payload, words in _bad_payloads():
            ws.send(payload)
            reply = ws.recv(timeout=2.0)
            assert isinstance(reply, str), words
            assert words in reply
        obs = make_observation(seed=8)
        ws.send(pack(observation_to_request(obs)))
        reply = unpack(ws.recv(timeout=2.0))
        np.testing.assert_array_equal(reply["actions"], expected_actions(obs.images, obs.state))
        ws.close()
        assert server.stats.errors_protocol >= 6
        assert server.stats.errors_observation >= 6
        assert server.stats.requests_ok == 1


def test_openpi_client_sees_error_reply_as_runtime_error() -> None:
    with PolicyServer(ImageStatePolicy(), port=0) as server:
        client = WebsocketClientPolicy(host="127.0.0.1", port=server.port)
        request = observation_to_request(make_observation())
        del request["observation/state"]
        with pytest.raises(RuntimeError, match="observation/state is missing"):
            client.infer(request)
        client._ws.close()


def test_oversized_message_closes_only_that_connection_with_1009() -> None:
    limits = ProtocolLimits(max_message_bytes=64 * 1024)
    with PolicyServer(ImageStatePolicy(), port=0, limits=limits) as server:
        ws, meta = _connect(server)
        assert meta["max_message_bytes"] == 64 * 1024
        ws.send(pack({"observation/image": np.zeros(200 * 1024, np.uint8)}))
        with pytest.raises(websockets.ConnectionClosed) as caught:
            ws.recv(timeout=2.0)
        assert caught.value.rcvd is not None and caught.value.rcvd.code == 1009
        client = WebsocketClientPolicy(host="127.0.0.1", port=server.port)
        obs = make_observation(seed=2)
        reply = client.infer(observation_to_request(obs))
        np.testing.assert_array_equal(reply["actions"], expected_actions(obs.images, obs.state))
        client._ws.close()


def test_fuzzed_requests_keep_server_memory_bounded() -> None:
    limits = ProtocolLimits(max_message_bytes=256 * 1024)
    rng = np.random.default_rng(0)
    with PolicyServer(ImageStatePolicy(), port=0, limits=limits) as server:
        ws, _ = _connect(server)
        tracemalloc.start()
        try:
            for _ in range(40):
                for payload, _words in _bad_payloads():
                    ws.send(payload)
                    assert isinstance(ws.recv(timeout=2.0), str)
                ws.send(
                    rng.integers(
                        0, 256, size=int(rng.integers(1, 200_000)), dtype=np.uint8
                    ).tobytes()
                )
                ws.recv(timeout=2.0)
            _, peak_bytes = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        ws.close()
    assert peak_bytes < 8 * limits.max_message_bytes


class _FailingRunner(ImageStatePolicy):
    """Raises on every other call: a runner crash must not end the server."""

    def infer(self, obs: Observation, *args: object, **kw: object) -> ActionChunk:
        self.calls += 1
        if self.calls % 2 == 1:
            raise RuntimeError("out of device memory")
        return super().infer(obs, *args, **kw)


def test_runner_failure_gets_error_reply_and_server_keeps_serving() -> None:
    with PolicyServer(_FailingRunner(), port=0) as server:
        ws, _ = _connect(server)
        request = pack(observation_to_request(make_observation()))
        ws.send(request)
        reply = ws.recv(timeout=2.0)
        assert isinstance(reply, str) and "RunnerError" in reply and "out of device memory" in reply
        ws.send(request)
        assert unpack(ws.recv(timeout=2.0))["actions"].shape == (10, 7)
        ws.close()
        assert server.stats.errors_runner == 1


def test_connections_beyond_max_connections_are_refused_with_503() -> None:
    with PolicyServer(ImageStatePolicy(), port=0, max_connections=1) as server:
        first, _ = _connect(server)
        with pytest.raises(websockets.InvalidStatus, match="503"):
            _connect(server)
        first.close()
        deadline = time.monotonic() + 2.0
        while server.stats.connections_open and time.monotonic() < deadline:
            time.sleep(0.01)
        second, meta = _connect(server)
        assert meta["action_horizon"] == 10
        second.close()
        assert server.stats.rejected_busy == 1


def test_concurrent_clients_each_get_their_own_actions() -> None:
    errors: list[BaseException] = []

    def client_loop(server: PolicyServer, seed: int) -> None:
        try:
            client = WebsocketClientPolicy(host="127.0.0.1", port=server.port)
            for i in range(5):
                obs = make_observation(seed=100 * seed + i)
                reply = client.infer(observation_to_request(obs))
                np.testing.assert_array_equal(
                    reply["actions"], expected_actions(obs.images, obs.state)
                )
            client._ws.close()
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    with PolicyServer(ImageStatePolicy(delay_s=0.005), port=0) as server:
        threads = [threading.Thread(target=client_loop, args=(server, s)) for s in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(20.0)
        assert server.stats.requests_ok == 20
    assert not errors


def test_serve_cli_arguments_and_defaults() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--policy", "bundled"])
    assert (args.port, args.host, args.api_key) == (8000, "127.0.0.1", None)
    args = parser.parse_args(
        ["--policy", "p", "--port", "9001", "--api-key", "k", "--max-message-bytes", "1000"]
    )
    assert (args.port, args.api_key, args.max_message_bytes) == (9001, "k", 1000)


def test_binding_a_taken_port_raises_os_error() -> None:
    with PolicyServer(ImageStatePolicy(), port=0) as server:
        with pytest.raises(OSError):
            PolicyServer(ImageStatePolicy(), port=server.port).start()


def test_unencodable_runner_output_is_an_error_reply() -> None:
    class ComplexRunner(ImageStatePolicy):
        def infer(self, obs: Observation, *args: object, **kw: object) -> ActionChunk:
            chunk = super().infer(obs)
            chunk.timings_ms = {"policy": complex(1, 2)}  # type: ignore[dict-item]
            return chunk

    with PolicyServer(ComplexRunner(), port=0) as server:
        ws, _ = _connect(server)
        ws.send(pack(observation_to_request(make_observation())))
        reply = ws.recv(timeout=2.0)
        assert isinstance(reply, str) and "RunnerError" in reply
        ws.close()
    with pytest.raises(ProtocolError):
        pack({"x": complex(1, 2)})
