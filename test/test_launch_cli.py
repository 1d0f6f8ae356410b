"""``vla-edge launch`` and ``vla-edge demo`` as a user runs them: real processes, real DDS."""

import dataclasses
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from ros_test_domain import DomainLease

from vla_edge import cli
from vla_edge.cli.launch import add_arguments
from vla_edge.core.errors import UnknownTaskError
from vla_edge.nodes import graph as g
from vla_edge.nodes.graph import graph
from vla_edge.nodes.graph_run import overrides_for, sim_task
from vla_edge.nodes.monitor import Monitor
from vla_edge.nodes.supervisor import GraphProcesses, NodeProcess

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def ros_env():
    lease = DomainLease()
    try:
        yield lease.env()
    finally:
        lease.release()


def test_task_and_policy_become_parameter_overrides():
    overrides = overrides_for("sim", "lift_green_block", "expert")
    assert overrides == {
        "sim_node": {"task": "lift_green_block", "suite": "tabletop"},
        "inference_node": {"backend": "expert"},
    }
    assert "sim_node" not in overrides_for("hil", "lift_green_block", None)
    long = overrides_for("sim", "blue_on_plate_then_lift_green", None, sequencer=True)
    assert long["sim_node"] == {
        "task": "blue_on_plate_then_lift_green",
        "suite": "tabletop_long",
        "sequencer": True,
    }
    assert overrides_for("sim", None, None, threads=1) == {"inference_node": {"threads": 1}}


def test_sim_task_is_the_parameter_files_unless_given_and_is_checked_against_the_suite():
    assert sim_task("sim", None) == "pick_red_block_into_bowl"  # config/sim.yaml
    assert sim_task("sim", "lift_green_block") == "lift_green_block"
    assert sim_task("hil", "lift_red_block") == "lift_red_block"  # no sim: for the metrics only
    with pytest.raises(UnknownTaskError, match="task = 'pick_the_moon'.*allowed:.*lift_green"):
        sim_task("sim", "pick_the_moon")


@pytest.mark.parametrize(
    "argv",
    [
        ["launch", "sim", "--task", "pick_the_moon"],
        ["demo", "--task", "pick_the_moon", "--policy", "expert"],
    ],
    ids=["launch", "demo"],
)
def test_unknown_task_is_refused_before_any_node_starts(argv, tmp_path, monkeypatch, capsys):
    def start(self):
        raise AssertionError("the graph was started for a task the sim does not have")

    monkeypatch.setattr(GraphProcesses, "start", start)
    assert cli.main([*argv, "--out" if argv[0] == "demo" else "--log-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"vla-edge {argv[0]}: UnknownTaskError: task = 'pick_the_moon'" in err
    assert "allowed:" in err


def test_each_node_runs_as_its_own_process_with_its_parameter_file():
    processes = GraphProcesses("hil", overrides_for("hil", None, "expert"))
    commands = {spec.name: processes.command(spec) for spec in graph("hil")}
    assert commands["safety_node"][:3] == [sys.executable, "-m", "vla_edge.nodes.safety_node"]
    assert "--params-file" in commands["inference_node"]
    assert 'backend:="expert"' in commands["inference_node"]
    assert str(ROOT / "config" / "hil_jetson.yaml") in commands["controller_node"]


def test_namespace_option_starts_every_node_under_the_namespace():
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["sim", "--namespace", "arm1"])
    assert args.namespace == "/arm1"
    with pytest.raises(SystemExit):
        parser.parse_args(["sim", "--namespace", "1arm"])
    processes = GraphProcesses("sim", overrides_for("sim", None, "expert"), namespace="arm1")
    assert processes.namespace == "/arm1"
    for spec in processes.specs():
        command = processes.command(spec)
        assert command[command.index("__ns:=/arm1") - 1] == "-r", spec.name
    root = GraphProcesses("sim")
    assert all(spec.namespace == "" for spec in root.specs())


def _status(name: str):
    from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue

    return DiagnosticArray(
        status=[DiagnosticStatus(name=name, values=[KeyValue(key="who", value=name)])]
    )


def test_monitor_keeps_only_its_own_graphs_diagnostics_under_their_plain_names():
    """/diagnostics is shared by every graph: the monitor of /arm1 reads arm1's statuses."""
    arm1 = Monitor(namespace="arm1")
    root = Monitor()
    try:
        assert arm1.node.get_namespace() == "/arm1"
        for name in ("arm1/vla_edge/controller", "arm2/vla_edge/controller", "vla_edge/safety"):
            arm1.on_diagnostics(_status(name))
            root.on_diagnostics(_status(name))
        assert arm1.statuses == {"vla_edge/controller": {"who": "arm1/vla_edge/controller"}}
        assert root.statuses == {"vla_edge/safety": {"who": "vla_edge/safety"}}
    finally:
        root.close()
        arm1.close()  # the first monitor initialised rclpy and shuts it down


def test_stop_escalates_to_sigterm_and_names_the_node_that_ignored_sigint(tmp_path):
    spec = graph("sim")[0]
    processes = GraphProcesses("sim", log_dir=tmp_path)
    log_path = tmp_path / f"{spec.name}.log"
    ignores_sigint = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [sys.executable, "-c", ignores_sigint], stdout=log, start_new_session=True
        )
    processes.nodes[spec.name] = NodeProcess(spec, process, log_path)
    deadline = time.monotonic() + 30.0
    while "ready" not in log_path.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    codes = processes.stop(timeout_s=1.0)
    assert codes == {spec.name: -signal.SIGTERM}
    assert processes.stop_escalations == {spec.name: "SIGTERM"}


@pytest.mark.ros
def test_launch_sim_writes_the_metrics_json(tmp_path, ros_env):
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
        env=ros_env,
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
    # a count of holds after an empty buffer: with the scripted expert a chunk arrives
    # in milliseconds, so more than one in 12 s is a defect; one is a 0.5 s stall of
    # the whole 2-core machine (seen once in CI), which the controller handled as
    # designed (it held); `make demo` reports the count of its own run
    assert isinstance(metrics["buffer_underruns"], int)
    assert 0 <= metrics["buffer_underruns"] <= 1
    assert set(metrics["rss_mb"]) == {
        "sim_node",
        "inference_node",
        "controller_node",
        "safety_node",
    }
    for node in metrics["rss_mb"].values():
        assert node["start"] > 10.0 and node["end"] > 10.0
        assert node["peak"] >= max(node["start"], node["end"]) - 1.0  # VmHWM, in MiB
    # a node that needed SIGTERM or SIGKILL: the launcher printed its log's end
    # with every thread's stack (written on SIGTERM)
    assert metrics["exit_codes"] == {
        "sim_node": 0,
        "safety_node": 0,
        "controller_node": 0,
        "inference_node": 0,
    }, result.stdout[-8000:]


@pytest.mark.ros
def test_demo_reports_and_plots(tmp_path, ros_env):
    result = subprocess.run(
        [sys.executable, "-m", "vla_edge.cli", "demo", "--duration", "15", "--out", str(tmp_path)],
        env=ros_env,
        capture_output=True,
        text=True,
        timeout=150,
    )
    report = result.stdout + result.stderr
    assert result.returncode == 0, report[-3000:]
    for line in (
        "success:",
        "chunk age p50 / p95:",
        "controller period jitter:",
        "inference per-stage p50:",
    ):
        assert line in result.stdout
    metrics = json.loads((tmp_path / "demo.json").read_text())
    assert f"success:                    {metrics['success']}" in result.stdout
    png = (tmp_path / "joints.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    if metrics["fallback"]:
        assert "FALLING BACK TO THE SCRIPTED EXPERT" in result.stderr


@pytest.mark.ros
def test_hil_graph_drives_a_ros2_control_style_robot(tmp_path, ros_env):
    """The sim node stands in for the robot: it listens on the forward controller's topic."""
    env = ros_env
    log = (tmp_path / "robot.log").open("w")
    robot = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vla_edge.nodes.sim_node",
            "--ros-args",
            "--params-file",
            str(ROOT / "config" / "sim.yaml"),
            "-r",
            f"{g.TOPIC_JOINT_COMMANDS}:={g.HIL_COMMAND_TOPIC}",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    out = tmp_path / "hil.json"
    try:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "vla_edge.cli",
                "launch",
                "hil",
                "--policy",
                "expert",
                "--duration",
                "14",
                "--json",
                str(out),
                "--log-dir",
                str(tmp_path / "logs"),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        robot.send_signal(signal.SIGINT)
        try:
            robot.wait(timeout=10)
        except subprocess.TimeoutExpired:
            robot.kill()
            robot.wait(timeout=10)
        log.close()
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    metrics = json.loads(out.read_text())
    assert set(metrics["rss_mb"]) == {"inference_node", "controller_node", "safety_node"}
    assert metrics["chunks_accepted"] >= 3 and metrics["chunks_rejected"] == 0
    assert metrics["safety"]["state"] == "none"
    assert metrics["success"], "the robot should complete the task through the HIL graph"
    assert robot.returncode == 0


@pytest.mark.ros
def test_launch_sim_runs_a_learned_policy_through_the_torch_runner(tmp_path, ros_env):
    """An untrained tiny checkpoint at the sim's resolution: every stage runs in the graph."""
    import torch
    from policy_synthetic import tiny_config

    from vla_edge.archs.bundled.model import VlaPolicy, save_checkpoint

    torch.manual_seed(0)
    checkpoint = tmp_path / "tiny64.pt"
    policy = VlaPolicy(tiny_config(image_height=64, image_width=64, flow_steps=2))
    # untrained outputs are noise: clip them inside the joint limits (as trained
    # checkpoints do with their demonstrated range) so the controller accepts them
    policy.set_stats(
        dataclasses.replace(
            policy.stats,
            action_low=np.array([-1.0] * 6 + [0.005]),
            action_high=np.array([1.0] * 6 + [0.035]),
        )
    )
    save_checkpoint(checkpoint, policy)
    out = tmp_path / "run.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "vla_edge.cli",
            "launch",
            "sim",
            "--policy",
            str(checkpoint),
            "--threads",
            "1",
            "--duration",
            "15",
            "--json",
            str(out),
            "--log-dir",
            str(tmp_path / "logs"),
        ],
        env=ros_env,
        capture_output=True,
        text=True,
        timeout=150,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    metrics = json.loads(out.read_text())
    assert metrics["chunks_accepted"] >= 5
    stages = metrics["inference_stage_ms"]
    for stage in ("language_encoder", "vision_encoder", "fusion", "action_head", "wall"):
        assert stages[stage]["p50"] > 0.0
    assert metrics["threads"] == 1
    failed = {name: code for name, code in metrics["exit_codes"].items() if code != 0}
    assert not failed, {
        name: (code, (tmp_path / "logs" / f"{name}.log").read_text(errors="replace")[-2000:])
        for name, code in failed.items()
    }
