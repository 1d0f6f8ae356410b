"""Launch the hardware-in-the-loop graph: inference, controller and safety.

For a real arm under ros2_control (see ``docs/HIL.md``): ``joint_states``
comes from the robot's ``joint_state_broadcaster``, cameras publish
``camera/<name>/image_raw``, and the safety node's output is remapped to
``forward_position_controller/commands``. The names are relative: with
``namespace:=arm1`` they resolve under ``/arm1``, where that arm's
ros2_control runs. Built from the graph description in
``vla_edge.nodes.graph`` (profile ``hil``)::

    ros2 launch vla_edge hil.launch.py policy:=/path/to/export_dir
    ros2 launch vla_edge hil.launch.py policy:=/path/to/export_dir namespace:=arm1
"""

from __future__ import annotations

from typing import Any

from vla_edge.nodes.graph import graph, policy_parameters

PROFILE = "hil"

try:  # launch / launch_ros exist on ROS 2 distributions, not on PyPI
    from launch.actions import DeclareLaunchArgument, OpaqueFunction
    from launch.substitutions import LaunchConfiguration
    from launch_ros.actions import Node

    from launch import LaunchDescription

    HAVE_LAUNCH = True
except ImportError:  # pragma: no cover - depends on the machine
    HAVE_LAUNCH = False


def node_arguments(policy: str | None = None, namespace: str = "") -> list[dict[str, Any]]:
    """``launch_ros.actions.Node`` keyword arguments for every node of the profile."""
    out = []
    for spec in graph(PROFILE, namespace):
        kwargs = spec.launch_kwargs()
        if spec.name == "inference_node" and policy:
            kwargs["parameters"] = [*kwargs["parameters"], policy_parameters(policy)]
        out.append(kwargs)
    return out


def _nodes(context: Any) -> list[Any]:
    policy = LaunchConfiguration("policy").perform(context)
    namespace = LaunchConfiguration("namespace").perform(context)
    return [Node(**kwargs) for kwargs in node_arguments(policy or None, namespace)]


def generate_launch_description() -> Any:
    """The launch description (needs ``launch`` and ``launch_ros``)."""
    if not HAVE_LAUNCH:
        raise RuntimeError(
            "launch and launch_ros are not installed (they ship with ROS 2 distributions, "
            "not on PyPI): use `vla-edge launch hil` instead"
        )
    return LaunchDescription(
        [
            DeclareLaunchArgument(
                "policy",
                default_value="",
                description="export dir | checkpoint | ws://host:port (hil_jetson.yaml default)",
            ),
            DeclareLaunchArgument(
                "namespace",
                default_value="",
                description="namespace of the arm's graph (e.g. arm1)",
            ),
            OpaqueFunction(function=_nodes),
        ]
    )
