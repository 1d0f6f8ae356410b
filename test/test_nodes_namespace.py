"""The graph under a namespace: every topic and service moves with it, /diagnostics does not.

Each node is built in this process (no spinning, no other process) with the
exact ``--ros-args`` the graph description gives its process under ``/arm1``
(``vla-edge launch --namespace arm1``); its publishers, subscriptions, services
and clients are then read back with their resolved names. Together they must be
the graph description's names, resolved in ``/arm1``, plus the absolute
``/diagnostics``, so nothing of one arm's graph can reach another's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import rclpy
from rclpy.node import Node

from vla_edge.config.models import ControllerConfig, SafetyConfig
from vla_edge.nodes import graph as g
from vla_edge.nodes.fault_suite import FAULT_INJECTOR_NODE
from vla_edge.nodes.graph import NodeSpec

NS = "/arm1"
# Every node has them; ROS's own names, absolute by design.
ROS_BUILTIN_TOPICS = {"/rosout", "/parameter_events"}
# rclpy's private services of every node (parameters, type descriptions).
ROS_BUILTIN_SERVICES = {
    "describe_parameters",
    "get_parameters",
    "get_parameter_types",
    "list_parameters",
    "set_parameters",
    "set_parameters_atomically",
    "get_type_description",
}


def _spec(profile: str, name: str, **parameters: Any) -> NodeSpec:
    spec = next(s for s in g.graph(profile, NS) if s.name == name)
    return dataclasses.replace(spec, parameters={**spec.parameters, **parameters})


@contextmanager
def started(
    spec: NodeSpec, make: Callable[[], Node], close: Callable[[Node], None] | None = None
) -> Iterator[Node]:
    """``make()`` under rclpy initialised with ``spec``'s process arguments."""
    rclpy.init(args=["node", *spec.ros_args()])
    node = None
    try:
        node = make()
        yield node
    finally:
        if node is not None:
            if close is not None:
                close(node)
            node.destroy_node()
        rclpy.shutdown()


def names(node: Node) -> dict[str, set[str]]:
    """The node's resolved topic and service names, ROS's own left out."""
    builtin = {f"{node.get_fully_qualified_name()}/{name}" for name in ROS_BUILTIN_SERVICES}
    return {
        "publishers": {p.topic_name for p in node.publishers} - ROS_BUILTIN_TOPICS,
        "subscriptions": {s.topic_name for s in node.subscriptions} - ROS_BUILTIN_TOPICS,
        # a service keeps the name it was given: resolve it as rcl did at creation
        "services": {node.resolve_service_name(s.srv_name) for s in node.services} - builtin,
        "clients": {node.resolve_service_name(c.srv_name) for c in node.clients},
    }


def ns(*relative: str) -> set[str]:
    """``relative`` names resolved in the namespace."""
    return {f"{NS}/{name}" for name in relative}


def assert_in_namespace(node: Node) -> None:
    """Every topic and service of ``node`` lies under the namespace except /diagnostics."""
    assert node.get_namespace() == NS
    for kind, resolved in names(node).items():
        outside = {n for n in resolved if not n.startswith(NS + "/")}
        assert outside <= {g.TOPIC_DIAGNOSTICS}, (node.get_name(), kind, outside)
    assert g.TOPIC_DIAGNOSTICS in names(node)["publishers"]
    assert node.resolve_topic_name(g.TOPIC_DIAGNOSTICS) == "/diagnostics"


def test_safety_node_resolves_its_topics_in_the_namespace():
    from vla_edge.nodes.safety_node import SafetyNode

    with started(_spec("sim", "safety_node"), SafetyNode, SafetyNode.stop_loop) as node:
        assert_in_namespace(node)
        assert names(node) == {
            "publishers": ns(g.TOPIC_JOINT_COMMANDS) | {"/diagnostics"},
            "subscriptions": ns(g.TOPIC_CONTROLLER_COMMAND, g.TOPIC_JOINT_STATES, g.TOPIC_ESTOP),
            "services": ns(g.SERVICE_SAFETY_RESET),
            "clients": set(),
        }
        # the parameter file's values reached the node under the namespace
        assert node.config == SafetyConfig.model_validate(
            _spec("sim", "safety_node").file_parameters()
        )
        assert node.diagnostic_name == "arm1/vla_edge/safety"


def test_hil_remap_of_the_safety_output_applies_in_the_namespace():
    from vla_edge.nodes.safety_node import SafetyNode

    with started(_spec("hil", "safety_node"), SafetyNode, SafetyNode.stop_loop) as node:
        assert_in_namespace(node)
        assert names(node)["publishers"] == ns(g.HIL_COMMAND_TOPIC) | {"/diagnostics"}


def test_controller_node_resolves_its_topics_in_the_namespace():
    from vla_edge.nodes.controller_node import ControllerNode

    spec = _spec("sim", "controller_node")
    with started(spec, ControllerNode, ControllerNode.close) as node:
        assert_in_namespace(node)
        assert names(node) == {
            "publishers": ns(g.TOPIC_CONTROLLER_COMMAND, g.TOPIC_CONTROLLER_PLAN, g.TOPIC_HOMED)
            | {"/diagnostics"},
            "subscriptions": ns(
                g.TOPIC_JOINT_STATES, g.TOPIC_ACTION_CHUNK, g.TOPIC_HOME_POSE, g.TOPIC_ESTOP
            )
            | {"/diagnostics"},  # the safety node's status (homing refused under its stop)
            "services": ns(g.SERVICE_CONTROLLER_HOME),
            "clients": set(),
        }
        assert node.config == ControllerConfig.model_validate(spec.file_parameters())
        # `ros2 param describe /arm1/controller_node rate_hz` says what the field says
        descriptor = node.describe_parameter("rate_hz")
        assert descriptor.description == ControllerConfig.model_fields["rate_hz"].description
        assert descriptor.floating_point_range[0].to_value == 2000.0


def test_inference_node_resolves_its_topics_in_the_namespace():
    from vla_edge.nodes.inference_node import InferenceNode

    spec = _spec("sim", "inference_node", **g.policy_parameters("expert"))
    with started(spec, InferenceNode, InferenceNode.close) as node:
        assert_in_namespace(node)
        cameras = [g.camera_topic(cam) for cam in node.config.cameras]
        assert names(node) == {
            "publishers": ns(g.TOPIC_ACTION_CHUNK) | {"/diagnostics"},
            "subscriptions": ns(
                *cameras,
                g.TOPIC_JOINT_STATES,
                g.TOPIC_INSTRUCTION,
                g.TOPIC_CONTROLLER_PLAN,
                g.TOPIC_SIM_STATE,  # the expert's shadow scene
            ),
            "services": set(),
            "clients": set(),
        }


def test_sim_node_resolves_its_topics_and_private_reset_in_the_namespace():
    from vla_edge.nodes.sim_node import SimNode

    with started(_spec("sim", "sim_node"), SimNode, SimNode.close) as node:
        assert_in_namespace(node)
        cameras = [g.camera_topic(cam) for cam in node.config.cameras]
        assert names(node) == {
            "publishers": ns(
                *cameras,
                g.TOPIC_JOINT_STATES,
                g.TOPIC_SIM_STATE,
                g.TOPIC_TASK_SUCCESS,
                g.TOPIC_INSTRUCTION,
                g.TOPIC_HOME_POSE,
            )
            | {"/diagnostics"},
            "subscriptions": ns(g.TOPIC_JOINT_COMMANDS, g.TOPIC_HOMED),
            # the private ~/reset, which the rest of the namespace calls sim_node/reset
            "services": ns(g.SERVICE_SIM_RESET),
            # the controller's ~/home, which a reset calls first (home_on_reset)
            "clients": ns(g.SERVICE_CONTROLLER_HOME),
        }


@pytest.mark.parametrize(
    ("scenario", "expected"),
    [
        (
            "camera_drop",
            {
                "publishers": ns(g.camera_topic("agentview"), g.camera_topic("wrist")),
                "subscriptions": ns(
                    g.raw_topic(g.camera_topic("agentview")),
                    g.raw_topic(g.camera_topic("wrist")),
                    g.TOPIC_ACTION_CHUNK,
                ),
                "clients": set(),
            },
        ),
        (
            "chunk_nan",
            {
                "publishers": ns(g.TOPIC_ACTION_CHUNK),
                "subscriptions": ns(g.raw_topic(g.TOPIC_ACTION_CHUNK), g.TOPIC_ACTION_CHUNK),
                "clients": set(),
            },
        ),
        (
            "estop_reset",
            {
                "publishers": ns(g.TOPIC_ESTOP),
                "subscriptions": ns(g.TOPIC_ACTION_CHUNK),
                "clients": ns(g.SERVICE_SAFETY_RESET),
            },
        ),
    ],
)
def test_fault_injector_resolves_its_raw_topics_in_the_namespace(scenario, expected):
    from vla_edge.nodes.fault_injector_node import FaultInjectorNode

    spec = dataclasses.replace(FAULT_INJECTOR_NODE, namespace=NS, parameters={"scenario": scenario})
    with started(spec, FaultInjectorNode) as node:
        assert_in_namespace(node)
        found = names(node)
        assert found["publishers"] == expected["publishers"] | {"/diagnostics"}
        assert found["subscriptions"] == expected["subscriptions"]
        assert found["clients"] == expected["clients"]
        assert found["services"] == ns(g.private_in_namespace(spec.name, g.PRIVATE_ARM))
