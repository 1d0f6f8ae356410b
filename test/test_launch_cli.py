"""``vla-edge launch`` and ``vla-edge demo`` as a user runs them: real processes, real DDS."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vla_edge.nodes.graph import graph
from vla_edge.nodes.launch_cli import GraphProcesses, overrides_for

ROOT = Path(__file__).resolve().parents[1]


def _env(offset: int) -> dict[str, str]:
    env = dict(os.environ)
    env["ROS_DOMAIN_ID"] = str(10 + (os.getpid() + offset) % 90)
    env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    env.setdefault("MUJOCO_GL", "egl")
    return env


def test_task_and_policy_become_parameter_overrides():
    overrides = overrides_for("sim", "lift_red_block", "expert")
    assert overrides == {
        "sim_node": {"task": "lift_red_block"},
        "inference_node": {"backend": "expert"},
    }
    assert "sim_node" not in overrides_for("hil", "lift_red_block", None)


def test_each_node_runs_as_its_own_process_with_its_parameter_file():
    processes = GraphProcesses("hil", overrides_for("hil", None, "expert"))
    commands = {spec.name: processes.command(spec) for spec in graph("hil")}
    assert commands["safety_node"][:3] == [sys.executable, "-m", "vla_edge.nodes.safety_node"]
    assert "--params-file" in commands["inference_node"]
    assert 'backend:="expert"' in commands["inference_node"]
    assert str(ROOT / "config" / "hil_jetson.yaml") in commands["controller_node"]


@pytest.mark.ros
def test_launch_sim_writes_the_metrics_json(tmp_path):
    out = tmp_path / "run.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "vla_edge.cli",
            "launch",
            "sim",
            "--policy",
            "expert",
            "--duration",
            "12",
            "--json",
            str(out),
            "--log-dir",
            str(tmp_path / "logs"),
        ],
        env=_env(1),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    metrics = json.loads(out.read_text())
    assert metrics["task"] == "pick_red_block_into_bowl"
    assert isinstance(metrics["success"], bool)
    assert metrics["controller_period_jitter_ms"]["p50"] is not None
    assert (
        metrics["controller_period_jitter_ms"]["p99"]
        >= metrics["controller_period_jitter_ms"]["p50"]
    )
    age = metrics["chunk_age_ms"]
    assert 0.0 < age["p50"] <= age["p95"] <= age["max"]
    assert age["max"] <= metrics["max_chunk_age_s"] * 1e3
    assert metrics["max_chunk_age_s"] == 0.5
    assert metrics["buffer_underruns"] == 0
    assert set(metrics["rss_mb"]) == {
        "sim_node",
        "inference_node",
        "controller_node",
        "safety_node",
    }
    for node in metrics["rss_mb"].values():
        assert node["start"] > 10.0 and node["end"] > 10.0
    assert metrics["exit_codes"] == {
        "sim_node": 0,
        "safety_node": 0,
        "controller_node": 0,
        "inference_node": 0,
    }


@pytest.mark.ros
def test_demo_reports_and_plots(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "vla_edge.cli", "demo", "--duration", "40", "--out", str(tmp_path)],
        env=_env(2),
        capture_output=True,
        text=True,
        timeout=150,
    )
    report = result.stdout + result.stderr
    assert result.returncode in (0, 3), report[-3000:]
    for line in (
        "success:",
        "chunk age p50 / p95:",
        "controller period jitter:",
        "inference per-stage p50:",
    ):
        assert line in result.stdout
    metrics = json.loads((tmp_path / "demo.json").read_text())
    assert metrics["success"] == (result.returncode == 0)
    png = (tmp_path / "joints.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    if metrics["fallback"]:
        assert "FALLING BACK TO THE SCRIPTED EXPERT" in result.stderr
