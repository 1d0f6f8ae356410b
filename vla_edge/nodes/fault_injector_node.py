"""Fault injector node: sits between a topic and its consumer and applies a scenario's fault.

The graph description remaps the producer's output to ``<topic>_raw``; this
node subscribes there and republishes on ``<topic>`` through the scenario's
:class:`~vla_edge.faults.injectors.Injector` (relative names, from
:mod:`vla_edge.nodes.graph`):

* camera faults: ``camera/<name>/image_raw_raw`` -> ``camera/<name>/image_raw``
* joint-state loss: ``joint_states_raw`` -> ``joint_states``
* chunk faults: ``action_chunk_raw`` -> ``action_chunk``
* e-stop: publishes ``estop`` at the fault start and calls ``safety/reset`` at its end.

Process crashes are done by whoever runs the graph (``vla-edge faults run --ros``);
this node only reports the episode clock for them.

The episode clock starts when the node *arms*: at the first chunk seen on
``action_chunk`` (the graph is up) when ``arm_on_first_chunk``, else when
``~/arm`` (``std_srvs/Trigger``) is called. Before that every message passes
through. Episode time runs on the steady clock (as the poll timer does), so a
step of the system clock does not move the fault window; ``armed_at_s`` is the
system-clock time of arming, for whoever lines recordings up with it.
``/diagnostics`` (``vla_edge/fault_injector``, 10 Hz) carries ``armed_at_s``
(system clock), ``active``, message counters and bad input (``bad_input.<cause>``:
frames that are not ``rgb8`` or whose data do not match their size; like
malformed chunks, they are passed on unchanged for the consumer to refuse).

Parameters are declared from :class:`FaultInjectorParams` (descriptors with
description, type and range) and validated at start-up; a bad one is a
:class:`~vla_edge.core.errors.ConfigError` naming it.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Bool
from std_srvs.srv import Trigger
from trajectory_msgs.msg import JointTrajectory

from vla_edge.config.loader import load_node_params
from vla_edge.config.models import FaultInjectorParams, SafetyConfig
from vla_edge.config.paths import config_path
from vla_edge.core.errors import InvalidObservationError, VlaEdgeError
from vla_edge.core.types import Observation
from vla_edge.faults.injectors import make_injector
from vla_edge.faults.scenario import (
    CHUNK_FAULTS,
    FaultScenario,
    camera_names,
    faults_dir,
    load_scenario,
)
from vla_edge.nodes import graph
from vla_edge.nodes.conversions import (
    S_PER_NS,
    array_to_image,
    chunk_to_trajectory,
    diagnostic_array,
    image_to_array,
    stamp_to_s,
    trajectory_to_chunk,
)
from vla_edge.nodes.lifecycle import run_node, steady_timer
from vla_edge.nodes.metrics import BadInputCounter
from vla_edge.nodes.params import declare_config

DIAGNOSTIC_NAME = "vla_edge/fault_injector"
NOT_ARMED_T_S = -1.0e9


class FaultInjectorNode(Node):
    """Republishes the topic a scenario corrupts, with the fault applied."""

    def __init__(self) -> None:
        super().__init__("fault_injector_node")
        self.params = declare_config(self, FaultInjectorParams)
        self.diagnostic_name = graph.diagnostic_name(self.get_namespace(), DIAGNOSTIC_NAME)
        self.arm_on_first_chunk = self.params.arm_on_first_chunk
        self.scenario = self._load_scenario(self.params.scenario)
        safety_file = self.params.safety_params_file or str(config_path("safety.yaml"))
        safety = load_node_params(safety_file, "safety_node", SafetyConfig)
        position_max = safety.limit_arrays().position_max.tolist()  # in its joint_names order
        self.injector = make_injector(self.scenario, position_max=position_max)
        self.dt_action_s = self.params.dt_action_s
        self.armed_at_s: float | None = None  # system clock, reported on /diagnostics
        self._armed_steady_s: float | None = None  # the episode clock's origin
        self.counters = {"in": 0, "out": 0, "estop_presses": 0, "resets": 0}
        self.bad_input = BadInputCounter(self.get_logger().warning)
        self._estop_down = False

        qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        image_qos = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)
        self.diag_pub = self.create_publisher(DiagnosticArray, graph.TOPIC_DIAGNOSTICS, 10)
        fault = self.scenario.fault
        self.chunk_pub = None
        if fault in CHUNK_FAULTS:
            self.chunk_pub = self.create_publisher(JointTrajectory, graph.TOPIC_ACTION_CHUNK, qos)
            self.create_subscription(
                JointTrajectory, graph.raw_topic(graph.TOPIC_ACTION_CHUNK), self._on_chunk, qos
            )
        self.create_subscription(
            JointTrajectory, graph.TOPIC_ACTION_CHUNK, self._on_chunk_seen, qos
        )
        self.create_service(Trigger, graph.PRIVATE_ARM, self._on_arm_service)
        self.image_pubs = {}
        for cam in camera_names(self.scenario):
            topic = graph.camera_topic(cam)
            self.image_pubs[cam] = self.create_publisher(Image, topic, image_qos)
            self.create_subscription(
                Image,
                graph.raw_topic(topic),
                lambda msg, cam=cam: self._on_image(cam, msg),
                image_qos,
            )
        self.joint_pub = None
        if fault == "joint_state_loss":
            self.joint_pub = self.create_publisher(JointState, graph.TOPIC_JOINT_STATES, qos)
            self.create_subscription(
                JointState, graph.raw_topic(graph.TOPIC_JOINT_STATES), self._on_joint_state, qos
            )
        self.estop_pub = None
        self.reset_client = None
        if fault == "estop":
            self.estop_pub = self.create_publisher(Bool, graph.TOPIC_ESTOP, qos)
            self.reset_client = self.create_client(Trigger, graph.SERVICE_SAFETY_RESET)
        steady_timer(self, 1.0 / self.params.poll_rate_hz, self._on_poll)
        steady_timer(self, 1.0 / self.params.diagnostics_rate_hz, self._publish_diagnostics)
        self.get_logger().info(
            f"scenario {self.scenario.name!r}: {fault} at {self.scenario.start_s} s for "
            f"{self.scenario.duration_s} s after the first chunk"
        )

    def _load_scenario(self, value: str) -> FaultScenario:
        if not value:
            raise VlaEdgeError("parameter scenario = '': give a scenario YAML path or name")
        if "/" in value or value.endswith(".yaml"):
            return load_scenario(Path(value))
        return load_scenario(faults_dir() / f"{value}.yaml")

    def _now_s(self) -> float:
        return self.get_clock().now().nanoseconds * S_PER_NS

    def episode_t_s(self) -> float:
        """Seconds since the node armed, on the steady clock (a large negative number before)."""
        if self._armed_steady_s is None:
            return NOT_ARMED_T_S
        return time.monotonic() - self._armed_steady_s

    def _arm(self, why: str) -> None:
        if self._armed_steady_s is None:
            self._armed_steady_s = time.monotonic()
            self.armed_at_s = self._now_s()
            self.get_logger().info(f"armed: {why}")

    def _on_chunk_seen(self, msg: JointTrajectory) -> None:
        del msg
        if self.arm_on_first_chunk:
            self._arm("chunks flow")

    def _on_arm_service(
        self, request: Trigger.Request, response: Trigger.Response
    ) -> Trigger.Response:
        del request
        self._arm("~/arm called")
        response.success = True
        response.message = f"armed at {self.armed_at_s}"
        return response

    def _on_image(self, camera: str, msg: Image) -> None:
        self.counters["in"] += 1
        try:  # at the frame's own size: resolution is the consumer's check
            image = image_to_array(msg, int(msg.height), int(msg.width))
        except InvalidObservationError as exc:  # passed on unchanged, the consumer refuses it
            self.bad_input.record(getattr(exc, "reason", "image"), f"{camera}: {exc}")
            self.image_pubs[camera].publish(msg)
            self.counters["out"] += 1
            return
        frame = Observation(stamp_to_s(msg.header.stamp), {camera: image}, np.zeros(0), "")
        self._publish_frames(self.injector.camera(frame, self.episode_t_s()), msg.header.frame_id)

    def _publish_frames(self, frames: list[Observation], frame_id: str = "") -> None:
        for frame in frames:
            for cam, image in frame.images.items():
                self.image_pubs[cam].publish(array_to_image(image, frame.stamp_s, frame_id))
                self.counters["out"] += 1

    def _on_joint_state(self, msg: JointState) -> None:
        self.counters["in"] += 1
        positions = np.asarray(msg.position, dtype=np.float64)
        if self.injector.joint_state(positions, self.episode_t_s()) is not None:
            assert self.joint_pub is not None
            self.joint_pub.publish(msg)
            self.counters["out"] += 1

    def _on_chunk(self, msg: JointTrajectory) -> None:
        self.counters["in"] += 1
        try:
            chunk = trajectory_to_chunk(msg, self.dt_action_s)
        except VlaEdgeError:
            chunk = None
        out = msg if chunk is None else self.injector.chunk(chunk, self.episode_t_s())
        if out is None:
            return
        assert self.chunk_pub is not None
        self.chunk_pub.publish(
            out if isinstance(out, JointTrajectory) else chunk_to_trajectory(out)
        )
        self.counters["out"] += 1

    # --- timers ---------------------------------------------------------------------------

    def _on_poll(self) -> None:
        t_s = self.episode_t_s()
        if self.image_pubs:
            self._publish_frames(self.injector.camera(None, t_s))
        if self.estop_pub is None:
            return
        pressed = self.injector.estop_pressed(t_s)
        if pressed and not self._estop_down:
            self.estop_pub.publish(Bool(data=True))
            self.counters["estop_presses"] += 1
            self.get_logger().warning("e-stop pressed")
        if not pressed and self._estop_down:
            self.estop_pub.publish(Bool(data=False))
            assert self.reset_client is not None
            self.reset_client.call_async(Trigger.Request())
            self.counters["resets"] += 1
            self.get_logger().info(
                f"e-stop released: {self.resolve_service_name(graph.SERVICE_SAFETY_RESET)} called"
            )
        self._estop_down = pressed

    def _publish_diagnostics(self) -> None:
        now_s = self._now_s()
        t_s = self.episode_t_s()
        status = DiagnosticStatus(name=self.diagnostic_name, hardware_id="vla_edge")
        status.level = DiagnosticStatus.OK
        status.message = f"{self.scenario.name}: {'armed' if self.armed_at_s else 'waiting'}"
        values = {
            "scenario": self.scenario.name,
            "fault": self.scenario.fault,
            "armed": int(self.armed_at_s is not None),
            "armed_at_s": repr(self.armed_at_s if self.armed_at_s is not None else float("nan")),
            "episode_t_s": f"{t_s:.3f}",
            "active": int(self.injector.active(t_s)),
            **{k: v for k, v in self.counters.items()},
            **self.bad_input.as_values(),
        }
        status.values = [KeyValue(key=k, value=str(v)) for k, v in values.items()]
        self.diag_pub.publish(diagnostic_array([status], now_s))


def main(args: list[str] | None = None) -> int:
    """Run the fault injector node until Ctrl-C or external shutdown."""
    return run_node(
        "fault_injector_node",
        FaultInjectorNode,
        args=args,
    )


if __name__ == "__main__":
    raise SystemExit(main())
