"""Launch the simulated graph: MuJoCo sim, inference, controller and safety.

Built from the graph description in ``vla_edge.nodes.graph`` (the same one
``vla-edge launch sim`` uses), so both start the same executables with the
same parameter files. Topic names are relative, so ``namespace:=arm1`` moves
the whole graph under ``/arm1`` (a second arm: a second launch, another
namespace). Usage on a ROS 2 distribution::

    ros2 launch vla_edge sim.launch.py task:=pick_red_block_into_bowl policy:=bundled
    ros2 launch vla_edge sim.launch.py task:=red_in_bowl_then_blue_on_plate sequencer:=true
    ros2 launch vla_edge sim.launch.py namespace:=arm1
"""

from __future__ import annotations

from typing import Any

from vla_edge.nodes.graph import graph, policy_parameters, sim_parameters

PROFILE = "sim"

try:  # launch / launch_ros exist on ROS 2 distributions, not on PyPI
    from launch.actions import DeclareLaunchArgument, OpaqueFunction
    from launch.substitutions import LaunchConfiguration
    from launch_ros.actions import Node

    from launch import LaunchDescription

    HAVE_LAUNCH = True
except ImportError:  # pragma: no cover - depends on the machine
    HAVE_LAUNCH = False


def node_arguments(
    task: str | None = None,
    policy: str | None = None,
    namespace: str = "",
    sequencer: bool = False,
) -> list[dict[str, Any]]:
    """``launch_ros.actions.Node`` keyword arguments for every node of the profile.

    ``task`` may be of any suite (the sim's ``suite`` follows it).
    """
    out = []
    for spec in graph(PROFILE, namespace):
        kwargs = spec.launch_kwargs()
        overrides: dict[str, Any] = {}
        if spec.name == "sim_node":
            overrides.update(sim_parameters(task, sequencer))
        if spec.name == "inference_node" and policy:
            overrides.update(policy_parameters(policy))
        if overrides:
            kwargs["parameters"] = [*kwargs["parameters"], overrides]
        out.append(kwargs)
    return out


def _nodes(context: Any) -> list[Any]:
    task = LaunchConfiguration("task").perform(context)
    policy = LaunchConfiguration("policy").perform(context)
    namespace = LaunchConfiguration("namespace").perform(context)
    sequencer = LaunchConfiguration("sequencer").perform(context).lower() == "true"
    arguments = node_arguments(task or None, policy or None, namespace, sequencer)
    return [Node(**kwargs) for kwargs in arguments]


def generate_launch_description() -> Any:
    """The launch description (needs ``launch`` and ``launch_ros``)."""
    if not HAVE_LAUNCH:
        raise RuntimeError(
            "launch and launch_ros are not installed (they ship with ROS 2 distributions, "
            "not on PyPI): use `vla-edge launch sim` instead"
        )
    return LaunchDescription(
        [
            DeclareLaunchArgument("task", default_value="", description="task (sim.yaml default)"),
            DeclareLaunchArgument(
                "policy", default_value="", description="expert | bundled | checkpoint | export dir"
            ),
            DeclareLaunchArgument(
                "namespace", default_value="", description="namespace of the graph (e.g. arm1)"
            ),
            DeclareLaunchArgument(
                "sequencer",
                default_value="false",
                description="long-horizon task: one sub-task's instruction at a time",
            ),
            OpaqueFunction(function=_nodes),
        ]
    )
