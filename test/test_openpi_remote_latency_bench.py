"""``bench_remote``: round-trip latency entries for ``vla-edge bench latency --backend remote``."""

from __future__ import annotations

import pytest
from openpi_fixtures import ImageStatePolicy

from vla_edge.bench.remote_latency import bench_remote
from vla_edge.runners.openpi_server import PolicyServer


def test_bench_remote_reports_latency_entry_against_a_localhost_server() -> None:
    entry = bench_remote(ImageStatePolicy(), n_requests=30, warmup=3, quant="fp32", threads=2)
    assert (entry["backend"], entry["quant"], entry["cameras"], entry["threads"]) == (
        "remote",
        "fp32",
        2,
        2,
    )
    e2e = entry["end_to_end"]
    assert 0.0 < e2e["p50_ms"] <= e2e["p95_ms"] <= e2e["max_ms"]
    for stage in ("encode", "round_trip", "server_infer", "server_decode", "network"):
        assert 0.0 <= entry["stages"][stage]["p50_ms"] <= entry["stages"][stage]["p95_ms"]
    assert entry["stages"]["round_trip"]["p50_ms"] <= e2e["p50_ms"]
    assert entry["throughput_hz"] > 0.0 and entry["rss_mb"] > 0.0
    assert entry["n_requests"] == 30 and entry["request_bytes"] > 2 * 32 * 32 * 3
    assert abs(entry["clock_offset_ms"]) < 50.0


def test_bench_remote_measures_an_existing_server_by_url() -> None:
    with PolicyServer(ImageStatePolicy(), port=0, api_key="k") as server:
        entry = bench_remote(url=server.url, api_key="k", n_requests=10, warmup=0)
        assert entry["url"] == server.url and server.stats.requests_ok == 10


def test_bench_remote_needs_a_runner_or_a_url() -> None:
    with pytest.raises(ValueError, match="needs a runner to serve or the url"):
        bench_remote(n_requests=5)
    with pytest.raises(ValueError, match="n_requests = 0"):
        bench_remote(ImageStatePolicy(), n_requests=0)
