"""The fault injector as a ROS node, and the ROS-level fault subset on the real graph."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from vla_edge.faults.scenario import load_suite
from vla_edge.nodes.fault_suite import FAULT_INJECTOR_NODE, fault_graph

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = {s.name: s for s in load_suite("default")}


def _env(offset: int) -> dict[str, str]:
    env = dict(os.environ)
    env["ROS_DOMAIN_ID"] = str(10 + (os.getpid() + offset) % 90)
    env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    env.setdefault("MUJOCO_GL", "egl")
    env["PYTHONUNBUFFERED"] = "1"
    return env


def test_camera_fault_remaps_the_sim_cameras_to_raw_topics():
    specs = {s.name: s for s in fault_graph(SCENARIOS["camera_drop"], "lift_green_block")}
    # relative names: the remap applies in the graph's namespace
    assert ("camera/agentview/image_raw", "camera/agentview/image_raw_raw") in specs[
        "sim_node"
    ].remappings
    assert ("camera/wrist/image_raw", "camera/wrist/image_raw_raw") in specs["sim_node"].remappings
    assert specs["inference_node"].remappings == ()
    assert specs[FAULT_INJECTOR_NODE.name].parameters["scenario"] == "camera_drop"
    assert specs["inference_node"].parameters["backend"] == "expert"


def test_chunk_fault_remaps_the_inference_output_and_estop_remaps_nothing():
    specs = {s.name: s for s in fault_graph(SCENARIOS["chunk_nan"], "lift_green_block")}
    assert specs["inference_node"].remappings == (("action_chunk", "action_chunk_raw"),)
    assert specs["sim_node"].remappings == ()
    estop = {s.name: s for s in fault_graph(SCENARIOS["estop_reset"], "lift_green_block")}
    assert all(s.remappings == () for s in estop.values())


def test_the_injector_node_is_started_with_its_parameter_file():
    spec = next(s for s in fault_graph(SCENARIOS["chunk_nan"], "x") if "fault" in s.name)
    args = spec.ros_args()
    assert str(ROOT / "config" / "faults" / "fault_injector_node.yaml") in args
    assert "arm_on_first_chunk:=false" in args


@pytest.mark.ros
def test_graph_stop_kills_a_node_that_ignores_sigint_and_sigterm_and_reports_it(tmp_path):
    from vla_edge.nodes.fault_suite import FaultGraphProcesses

    spec = fault_graph(SCENARIOS["camera_drop"], "lift_green_block")[0]
    procs = FaultGraphProcesses([spec], tmp_path)
    log_path = tmp_path / f"{spec.name}.log"
    stubborn = (
        "import signal, time\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('still here', flush=True)\n"
        "time.sleep(60)\n"
    )
    with log_path.open("w") as log:
        procs.processes[spec.name] = subprocess.Popen(
            [sys.executable, "-c", stubborn], stdout=log, start_new_session=True
        )
    deadline = time.monotonic() + 30.0
    while "still here" not in log_path.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    codes = procs.stop(timeout_s=0.5)
    assert codes == {spec.name: -9}
    assert procs.stop_escalations == {spec.name: "SIGKILL"}
    assert "still here" in procs.log_tail(spec.name)


@pytest.mark.ros
def test_injector_node_relays_frames_and_drops_them_in_the_fault_window(tmp_path, monkeypatch):
    """camera_drop: frames pass through before the window, none inside it, again after."""
    env = _env(31)
    monkeypatch.setenv("ROS_DOMAIN_ID", env["ROS_DOMAIN_ID"])
    monkeypatch.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import Image
    from std_srvs.srv import Trigger

    from vla_edge.nodes.conversions import array_to_image, stamp_to_s

    log = (tmp_path / "injector.log").open("w")
    node_proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "vla_edge.nodes.fault_injector_node",
            "--ros-args",
            "--params-file",
            str(ROOT / "config" / "faults" / "fault_injector_node.yaml"),
            "-p",
            "scenario:=camera_drop",
            "-p",
            "arm_on_first_chunk:=false",
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    context = rclpy.Context()
    rclpy.init(context=context)
    try:
        node = rclpy.create_node("fault_relay_probe", context=context)
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        qos = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)
        pub = node.create_publisher(Image, "/camera/agentview/image_raw_raw", qos)
        received: list[tuple[float, float]] = []
        node.create_subscription(
            Image,
            "/camera/agentview/image_raw",
            lambda m: received.append((time.monotonic(), stamp_to_s(m.header.stamp))),
            qos,
        )
        client = node.create_client(Trigger, "/fault_injector_node/arm")
        image = np.zeros((8, 8, 3), dtype=np.uint8)

        def pump(duration_s: float) -> None:
            end = time.monotonic() + duration_s
            while time.monotonic() < end:
                pub.publish(array_to_image(image, time.time()))
                stop = time.monotonic() + 0.05
                while time.monotonic() < stop:
                    executor.spin_once(timeout_sec=0.01)

        deadline = time.monotonic() + 30.0
        while not received and time.monotonic() < deadline:
            pump(0.2)
        assert received, "frames never passed through the unarmed injector"
        assert client.wait_for_service(timeout_sec=10.0)
        future = client.call_async(Trigger.Request())
        executor.spin_until_future_complete(future, timeout_sec=10.0)
        armed_at = time.monotonic()
        assert future.result().success
        scenario = SCENARIOS["camera_drop"]
        pump(scenario.end_s + 1.0)
        rel = np.array([t - armed_at for t, _ in received])
        inside = (rel > scenario.start_s + 0.15) & (rel < scenario.end_s - 0.15)
        assert not inside.any(), f"{inside.sum()} frames delivered during the drop"
        assert (rel > scenario.end_s + 0.2).sum() >= 5, "frames did not resume after the window"
        assert ((rel > 0.1) & (rel < scenario.start_s - 0.1)).sum() >= 5
    finally:
        rclpy.shutdown(context=context)
        node_proc.send_signal(2)
        try:
            assert node_proc.wait(timeout=10) == 0
        finally:
            if node_proc.poll() is None:
                node_proc.kill()
            log.close()


@pytest.mark.ros
@pytest.mark.slow
def test_ros_subset_camera_drops_inference_crash_estop_nan_chunk_passes(tmp_path):
    """The ROS-level subset on the real graph: each scenario passes, zero limit violations."""
    out = tmp_path / "faults_ros.json"
    plots = tmp_path / "plots"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "vla_edge.cli",
            "faults",
            "run",
            "--ros",
            "--json",
            str(out),
            "--plots",
            str(plots),
        ],
        env=_env(47),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert out.is_file(), proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert set(result["scenarios"]) == {
        "camera_drop",
        "camera_drop_wrist",
        "inference_crash",
        "estop_reset",
        "chunk_nan",
    }
    for name, r in result["scenarios"].items():
        assert r["failures"] == [], (name, r["failures"], proc.stderr[-2000:])
        assert r["limit_violations"] == 0
        assert r["detected"] is True
        assert r["recovered"] is True
        assert all(code == 0 for code in r["info"]["exit_codes"].values()), r["info"]
        assert (plots / f"{name}_ros.png").is_file()
    assert result["scenarios"]["inference_crash"]["info"]["restarts"] == {"inference": 1}
    one_camera = result["scenarios"]["camera_drop_wrist"]["info"]["camera_faults"]
    assert one_camera["wrist.lost"] >= 1, one_camera  # the inference node names the camera
    assert (result["passed"], result["failed"]) == (5, 0)
    assert proc.returncode == 0
