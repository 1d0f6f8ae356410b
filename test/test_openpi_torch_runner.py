"""The real TorchRunner (tiny untrained model) served over openpi's protocol.

A remote chunk must equal the local chunk bit for bit when both get the same
noise: that is what makes a server usable as the parity oracle.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from openpi_client import image_tools
from openpi_client.websocket_client_policy import WebsocketClientPolicy
from openpi_fixtures import free_port, make_observation, wait_listening
from policy_synthetic import tiny_config

from vla_edge.archs.bundled.model import VlaPolicy, save_checkpoint
from vla_edge.archs.bundled.normalize import NormStats
from vla_edge.bench.remote_latency import bench_remote
from vla_edge.core.types import Observation
from vla_edge.runners.base import Runner
from vla_edge.runners.factory import make_runner
from vla_edge.runners.image_resize import resize_with_pad
from vla_edge.runners.openpi_adapter import observation_to_request
from vla_edge.runners.openpi_server import PolicyServer
from vla_edge.runners.remote import RemoteRunner
from vla_edge.runners.torch_runner import TorchRunner

pytestmark = pytest.mark.filterwarnings("ignore:connect\\(\\) must be used:DeprecationWarning")

ROOT = Path(__file__).resolve().parents[1]


def _policy() -> VlaPolicy:
    torch.manual_seed(0)
    policy = VlaPolicy(tiny_config())
    policy.set_stats(NormStats(np.zeros(7), np.ones(7), np.zeros(7), np.array([0.1] * 6 + [0.02])))
    return policy


@pytest.fixture(scope="module")
def torch_runner() -> TorchRunner:
    torch.set_num_threads(1)
    return TorchRunner(_policy(), seed=0)


def test_remote_chunk_equals_local_torch_chunk_for_the_same_noise(torch_runner) -> None:
    rng = np.random.default_rng(0)
    with PolicyServer(torch_runner, port=0) as server:
        remote = RemoteRunner(server.url, timeout_s=5.0)
        assert remote.spec == torch_runner.spec
        for seed in range(3):
            obs = make_observation(seed=seed, stamp_s=10.0 + seed, spec=torch_runner.spec)
            noise = rng.standard_normal((10, 7)).astype(np.float32)
            prefix = rng.uniform(-0.3, 0.3, (10, 7))
            got = remote.infer(obs, noise=noise, prefix_actions=prefix, prefix_len=2)
            want = torch_runner.infer(obs, noise=noise, prefix_actions=prefix, prefix_len=2)
            np.testing.assert_array_equal(got.positions, want.positions)
            assert got.t_obs_s == want.t_obs_s == 10.0 + seed
            for stage in ("vision_encoder", "fusion", "action_head"):
                assert got.timings_ms[f"server/{stage}"] >= 0.0
        remote.close()


def test_openpi_client_gets_torch_runner_actions(torch_runner) -> None:
    obs = make_observation(seed=4, spec=torch_runner.spec)
    with PolicyServer(torch_runner, port=0) as server:
        client = WebsocketClientPolicy(host="127.0.0.1", port=server.port)
        reply = client.infer(observation_to_request(obs))
        client._ws.close()
    actions = reply["actions"]
    assert actions.shape == (10, 7) and np.all(np.isfinite(actions))
    assert reply["server_timing"]["stages_ms"].keys() >= {"vision_encoder", "action_head"}


@pytest.fixture(scope="module")
def bundled_runner() -> Runner:
    torch.set_num_threads(1)
    return make_runner("bundled", threads=1)


def _libero_camera(seed: int) -> np.ndarray:
    """What openpi's LIBERO example sends: a 256^2 frame rotated 180 deg, fitted to 224^2."""
    frame = np.random.default_rng(seed).integers(0, 256, (256, 256, 3), dtype=np.uint8)
    frame = np.ascontiguousarray(frame[::-1, ::-1])
    return image_tools.convert_to_uint8(image_tools.resize_with_pad(frame, 224, 224))


def test_openpi_libero_client_224_images_are_served_by_the_bundled_64_model(
    bundled_runner,
) -> None:
    spec = bundled_runner.spec
    assert (spec.image_height, spec.image_width) == (64, 64)
    rng = np.random.default_rng(3)
    element = {
        "observation/image": _libero_camera(1),
        "observation/wrist_image": _libero_camera(2),
        "observation/state": rng.uniform(-0.3, 0.3, spec.action_dim),
        "prompt": "put the red block in the bowl",
    }
    noise = rng.standard_normal((spec.chunk_horizon, spec.action_dim)).astype(np.float32)
    with PolicyServer(bundled_runner, port=0) as server:
        client = WebsocketClientPolicy(host="127.0.0.1", port=server.port)
        meta = client.get_server_metadata()
        assert (meta["image_height"], meta["image_resize"]) == (64, "resize_with_pad")
        reply = client.infer(dict(element, **{"vla_edge/noise": noise}))
        plain = client.infer(element)  # exactly the LIBERO keys, nothing else
        libero_state = dict(element, **{"observation/state": np.zeros(8)})
        with pytest.raises(RuntimeError, match=r"observation/state shape = \[8\].*end-effector"):
            client.infer(libero_state)
        client._ws.close()
    assert plain["actions"].shape == (spec.chunk_horizon, spec.action_dim)
    assert np.all(np.isfinite(plain["actions"]))
    local = bundled_runner.infer(
        Observation(
            stamp_s=0.0,
            images={
                "agentview": resize_with_pad(element["observation/image"], 64, 64),
                "wrist": resize_with_pad(element["observation/wrist_image"], 64, 64),
            },
            state=element["observation/state"],
            instruction=element["prompt"],
        ),
        noise=noise,
    )
    np.testing.assert_array_equal(reply["actions"], local.positions)


def test_bench_remote_with_torch_runner(torch_runner) -> None:
    entry = bench_remote(torch_runner, n_requests=20, warmup=2, quant="fp32", threads=1)
    assert entry["stages"]["server/action_head"]["p50_ms"] > 0.0
    assert entry["end_to_end"]["p50_ms"] >= entry["stages"]["server_infer"]["p50_ms"]


def _healthz_status(port: int) -> int | None:
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1.0)
    try:
        conn.request("GET", "/healthz")
        return conn.getresponse().status
    except OSError:
        return None
    finally:
        conn.close()


@pytest.mark.slow
def test_vla_edge_serve_cli_serves_a_checkpoint_until_sigterm(tmp_path) -> None:
    save_checkpoint(tmp_path / "policy.pt", _policy())
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    log_path = tmp_path / "serve.log"
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "vla_edge.cli", "serve", "--policy", str(tmp_path / "policy.pt")]
        + ["--port", str(port), "--api-key", "k", "--threads", "1"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_listening(port, timeout_s=60.0)
        deadline = time.monotonic() + 90.0
        while _healthz_status(port) != 200:
            assert proc.poll() is None, log_path.read_text()[-2000:]
            assert time.monotonic() < deadline, "policy not loaded within 90 s"
            time.sleep(0.1)
        client = WebsocketClientPolicy(host="127.0.0.1", port=port, api_key="k")
        assert client.get_server_metadata()["policy"] == str(tmp_path / "policy.pt")
        obs = make_observation(seed=1)
        assert client.infer(observation_to_request(obs))["actions"].shape == (10, 7)
        client._ws.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10.0) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5.0)
        log.close()
