"""Each node's topics and services are those of the graph description's port table.

The README's node reference and graph picture are generated from
``vla_edge.nodes.graph.PORTS``; here each node is built in this process under a
namespace and its publishers, subscriptions and services (name, type, QoS) must
be exactly the table's, so the reference cannot drift from the code.
"""

from __future__ import annotations

import pytest
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from test_nodes_namespace import NS, ROS_BUILTIN_SERVICES, ROS_BUILTIN_TOPICS, _spec, started

from vla_edge.nodes import graph as g

ROLES = {"publishes": "publishers", "subscribes": "subscriptions", "serves": "services"}


def _type_name(cls: type) -> str:
    package, kind = cls.__module__.split(".")[:2]
    return f"{package}/{kind}/{cls.__name__}"


def _qos(profile: QoSProfile) -> str:
    return str(
        g.QoS(
            profile.depth,
            reliable=profile.reliability == ReliabilityPolicy.RELIABLE,
            transient_local=profile.durability == DurabilityPolicy.TRANSIENT_LOCAL,
        )
    )


def actual_ports(node: Node) -> set[tuple[str, str, str, str]]:
    """``(role, resolved name, type, qos)`` of every port of ``node``, ROS's own left out."""
    builtin = {f"{node.get_fully_qualified_name()}/{name}" for name in ROS_BUILTIN_SERVICES}
    ports = {
        ("publishes", p.topic_name, _type_name(p.msg_type), _qos(p.qos_profile))
        for p in node.publishers
        if p.topic_name not in ROS_BUILTIN_TOPICS
    }
    ports |= {
        ("subscribes", s.topic_name, _type_name(s.msg_type), _qos(s.qos_profile))
        for s in node.subscriptions
        if s.topic_name not in ROS_BUILTIN_TOPICS
    }
    for service in node.services:
        name = node.resolve_service_name(service.srv_name)
        if name not in builtin:
            ports.add(("serves", name, _type_name(service.srv_type), ""))
    return ports


def table_ports(node: Node, conditions: tuple[str, ...] = ()) -> set[tuple[str, str, str, str]]:
    cameras = tuple(getattr(node.config, "cameras", ()))
    return {
        (
            port.role,
            port.name if port.name.startswith("/") else f"{NS}/{port.name}",
            port.type,
            "" if port.qos is None else str(port.qos),
        )
        for port in g.node_ports(node.get_name(), cameras, conditions)
    }


def _sim():
    from vla_edge.nodes.sim_node import SimNode

    return _spec("sim", "sim_node"), SimNode, SimNode.close, ()


def _inference():
    from vla_edge.nodes.inference_node import InferenceNode

    spec = _spec("sim", "inference_node", **g.policy_parameters("expert"))
    return spec, InferenceNode, InferenceNode.close, ("backend: expert",)


def _controller():
    from vla_edge.nodes.controller_node import ControllerNode

    return _spec("sim", "controller_node"), ControllerNode, ControllerNode.close, ()


def _safety():
    from vla_edge.nodes.safety_node import SafetyNode

    return _spec("sim", "safety_node"), SafetyNode, SafetyNode.stop_loop, ()


@pytest.mark.parametrize(
    "build", [_sim, _inference, _controller, _safety], ids=lambda f: f.__name__[1:]
)
def test_node_ports_are_exactly_the_port_table(build):
    spec, make, close, conditions = build()
    with started(spec, make, close) as node:
        assert actual_ports(node) == table_ports(node, conditions)


def test_every_port_of_the_table_belongs_to_a_node_of_the_graph():
    names = {spec.name for spec in g.graph("sim")}
    assert {port.node for port in g.PORTS} == names
    assert all(port.role in ROLES for port in g.PORTS)
    assert all((port.qos is None) == (port.role == "serves") for port in g.PORTS)


def test_fault_injector_episode_time_does_not_move_with_a_system_clock_step(monkeypatch):
    import dataclasses
    import time

    from vla_edge.nodes.fault_injector_node import FaultInjectorNode
    from vla_edge.nodes.fault_suite import FAULT_INJECTOR_NODE

    spec = dataclasses.replace(FAULT_INJECTOR_NODE, parameters={"scenario": "camera_drop"})
    with started(spec, FaultInjectorNode) as node:
        node._arm("test")
        armed_at_s = node.armed_at_s
        before = node.episode_t_s()
        stepped = armed_at_s - 30.0  # the system clock steps 30 s back
        monkeypatch.setattr(node, "_now_s", lambda: stepped)
        time.sleep(0.05)
        after = node.episode_t_s()
        assert 0.05 <= after - before < 1.0
        assert node.armed_at_s == armed_at_s  # still the time of arming, for the recorder
