"""``vla-edge bench latency --device``: the device bench's JSON, run on the CPU at the small size.

The same code runs on a GPU (CUDA graphs, CUDA events); here it shows the JSON holds what a
reader needs (the machine, the measured peaks, per-stage and end-to-end percentiles, parity
against the CPU float32 reference, achieved rates) and that the variants really differ.
"""

from __future__ import annotations

import json

import pytest

from vla_edge.cli import main

pytestmark = pytest.mark.slow  # real models at the small size: seconds


def test_the_device_bench_writes_timings_parity_and_rates_per_variant(tmp_path) -> None:
    out = tmp_path / "device.json"
    argv = ["bench", "latency", "--device", "cpu", "--size", "small", "--arch", "bundled,pi0"]
    argv += ["--cameras", "pi0=1", "--runs", "2", "--warmup", "1", "--json", str(out)]
    assert main(argv) == 0
    report = json.loads(out.read_text())
    assert report["device"]["device"] == "cpu" and report["device"]["torch"]
    assert report["peaks"]["gemm_tflops"] > 0
    bundled, model = report["models"]
    assert (bundled["arch"], bundled["cameras"]) == ("bundled", 2)
    assert all(v["ok"] for v in bundled["variants"]) and len(bundled["variants"]) == 2
    assert (model["arch"], model["cameras"], model["size"]) == ("pi0", 1, "small")
    assert set(model["flops"]) == {"vision_encoder", "fusion", "action_head"}
    variants = {v["dtype"]: v for v in model["variants"]}
    assert set(variants) == {"float32", "bfloat16"} and all(v["ok"] for v in variants.values())
    for v in variants.values():
        assert v["end_to_end"]["n"] == 2 and v["stages"]["action_head"]["p50_ms"] > 0
        assert set(v["achieved"]) == {"vision_encoder", "fusion", "action_head"}
    # float32 on the CPU is the reference itself; bfloat16 weights differ, within 2 %
    assert variants["float32"]["parity_pct_of_range_max"] == 0.0
    assert 0.0 < variants["bfloat16"]["parity_pct_of_range_max"] <= 2.0
    assert variants["bfloat16"]["weight_bytes"] * 2 == variants["float32"]["weight_bytes"]


def test_the_device_bench_times_groot_through_its_bench_hooks(tmp_path) -> None:
    """GR00T takes the same device path (its stages, float32 and bfloat16 weights, parity
    against the CPU float32 reference) as the other imported architectures."""
    out = tmp_path / "groot.json"
    argv = ["bench", "latency", "--device", "cpu", "--size", "small", "--arch", "groot"]
    argv += ["--cameras", "1", "--runs", "2", "--warmup", "1", "--json", str(out)]
    assert main(argv) == 0
    (model,) = json.loads(out.read_text())["models"]
    assert (model["arch"], model["cameras"], model["size"]) == ("groot", 1, "small")
    variants = {v["dtype"]: v for v in model["variants"]}
    assert set(variants) == {"float32", "bfloat16"} and all(v["ok"] for v in variants.values())
    assert variants["float32"]["parity_pct_of_range_max"] == 0.0
    assert 0.0 < variants["bfloat16"]["parity_pct_of_range_max"] <= 2.0


def test_the_device_bench_refuses_a_gpu_this_machine_lacks(tmp_path, capsys) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    argv = ["bench", "latency", "--device", "cuda", "--json", str(tmp_path / "x.json")]
    assert main(argv) == 2
    assert "device = 'cuda': this torch build has no CUDA" in capsys.readouterr().err
