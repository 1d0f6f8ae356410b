"""Round-trip latency and throughput of the openpi protocol (``--backend remote``).

:func:`bench_remote` serves a runner with :class:`PolicyServer` on 127.0.0.1
(or talks to an existing server at ``url``), drives it with a
:class:`RemoteRunner` and reports per-stage and end-to-end percentiles in the
entry shape the latency benchmark writes.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import psutil

from vla_edge.core.types import Observation
from vla_edge.runners.base import Runner, RunnerSpec
from vla_edge.runners.openpi_adapter import observation_to_request
from vla_edge.runners.openpi_protocol import pack
from vla_edge.runners.openpi_server import PolicyServer
from vla_edge.runners.remote import RemoteRunner


def _percentiles_ms(samples_ms: list[float]) -> dict[str, float]:
    values = np.asarray(samples_ms, dtype=np.float64)
    return {
        "p50_ms": float(np.percentile(values, 50)),
        "p95_ms": float(np.percentile(values, 95)),
        "mean_ms": float(values.mean()),
        "max_ms": float(values.max()),
    }


def synthetic_observation(
    spec: RunnerSpec, rng: np.random.Generator, stamp_s: float
) -> Observation:
    """Random images and state of ``spec``'s shapes (the payload of one request)."""
    shape = (spec.image_height, spec.image_width, 3)
    return Observation(
        stamp_s=stamp_s,
        images={c: rng.integers(0, 256, size=shape, dtype=np.uint8) for c in spec.cameras},
        state=rng.uniform(-0.5, 0.5, size=spec.action_dim),
        instruction="put the red block in the bowl",
    )


def bench_remote(
    runner: Runner | None = None,
    *,
    url: str | None = None,
    spec: RunnerSpec | None = None,
    n_requests: int = 200,
    warmup: int = 10,
    quant: str = "fp32",
    threads: int = 1,
    timeout_s: float = 5.0,
    api_key: str | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Measure round trips through the openpi protocol.

    Args:
        runner: the policy to serve in-process on 127.0.0.1 (a free port);
            ignored when ``url`` is given.
        url: an already running server to measure instead.
        spec: the remote policy's spec when ``url``'s server sends no metadata.
        n_requests: measured requests (sequential, one connection).
        warmup: unmeasured requests first.
        quant: label of the served model's quantisation (reported as is).
        threads: label of the served runner's thread count (reported as is).
        timeout_s: per-request bound (``RemoteRunner.timeout_s``).
        api_key: passed to both server and client.
        seed: seed of the synthetic observations.

    Returns:
        ``{"backend": "remote", "quant", "cameras", "threads", "stages": {name:
        {p50_ms, p95_ms, mean_ms, max_ms}}, "end_to_end": {...}, "throughput_hz",
        "rss_mb", "n_requests", "request_bytes", "clock_offset_ms", "url"}``;
        ``rss_mb`` is this process (client, and server when served in-process).
    """
    if n_requests < 1 or warmup < 0:
        raise ValueError(f"n_requests = {n_requests}, warmup = {warmup}: need >= 1 and >= 0")
    if url is None and runner is None:
        raise ValueError("bench_remote needs a runner to serve or the url of a server")
    server: PolicyServer | None = None
    if url is None:
        server = PolicyServer(runner, host="127.0.0.1", port=0, api_key=api_key).start()
        url = server.url
    client = RemoteRunner(url, timeout_s=timeout_s, spec=spec, api_key=api_key)
    try:
        rng = np.random.default_rng(seed)
        observations = [
            synthetic_observation(client.spec, rng, float(i)) for i in range(min(n_requests, 16))
        ]
        for i in range(warmup):
            client.infer(observations[i % len(observations)])
        stages: dict[str, list[float]] = {}
        end_to_end_ms: list[float] = []
        t_begin = time.perf_counter()
        for i in range(n_requests):
            obs = observations[i % len(observations)]
            t0 = time.perf_counter()
            chunk = client.infer(obs)
            end_to_end_ms.append((time.perf_counter() - t0) * 1000.0)
            for name, value in chunk.timings_ms.items():
                if name not in ("total", "server_prev_total"):
                    stages.setdefault(name, []).append(float(value))
        wall_s = time.perf_counter() - t_begin
        request_bytes = len(pack(observation_to_request(observations[0], request_id=1)))
        offset_s = client.clock_offset_s
        return {
            "backend": "remote",
            "quant": quant,
            "cameras": len(client.spec.cameras),
            "threads": threads,
            "stages": {name: _percentiles_ms(v) for name, v in sorted(stages.items())},
            "end_to_end": _percentiles_ms(end_to_end_ms),
            "throughput_hz": n_requests / wall_s,
            "rss_mb": psutil.Process().memory_info().rss / 2**20,
            "n_requests": n_requests,
            "request_bytes": request_bytes,
            "clock_offset_ms": None if offset_s is None else offset_s * 1000.0,
            "url": url,
        }
    finally:
        client.close()
        if server is not None:
            server.stop()
