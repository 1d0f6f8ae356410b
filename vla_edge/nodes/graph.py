"""THE description of the ROS 2 graph: nodes, executables, parameter files, remappings.

Both ``launch/*.launch.py`` (launch_ros, on ROS 2 distributions) and
``vla-edge launch`` (separate processes with the rclpy wheels from PyPI) are
built from :func:`graph`, so they start the same nodes with the same
parameter files. This module imports no ROS package.

Topics (standard messages only), as ``topic: type (publisher -> subscribers)``:

* ``/camera/<name>/image_raw``: ``sensor_msgs/Image`` rgb8 (sim/camera -> inference)
* ``/joint_states``: ``sensor_msgs/JointState`` (sim/robot -> all)
* ``/instruction``: ``std_msgs/String``, transient-local (sim/operator -> inference)
* ``/controller/plan``: ``trajectory_msgs/JointTrajectory`` (controller -> inference)
* ``/action_chunk``: ``trajectory_msgs/JointTrajectory`` (inference -> controller)
* ``/controller/command``: ``std_msgs/Float64MultiArray``, UNSAFE (controller -> safety)
* ``/joint_commands``: ``std_msgs/Float64MultiArray``, safe (safety -> sim/robot)
* ``/estop``: ``std_msgs/Bool`` (operator -> safety)
* ``/safety/reset``: ``std_srvs/Trigger`` service (operator -> safety)
* ``/sim_node/reset``: ``std_srvs/Trigger`` service (operator -> sim)
* ``/task_success``: ``std_msgs/Bool``, transient-local (sim -> monitor)
* ``/sim/state``: ``std_msgs/Float64MultiArray`` (sim -> inference running the expert)
* ``/diagnostics``: ``diagnostic_msgs/DiagnosticArray`` (every node -> monitor)

``/controller/plan`` is also the inference request: the controller publishes
it whenever its trigger (``infer_trigger``) asks for a chunk, carrying its
remaining plan with the ``prefix`` merge and no points with the others.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vla_edge.config.paths import share_dir
from vla_edge.core.errors import ConfigError

PROFILES = ("sim", "hil")

PACKAGE = "vla_edge"

# Topic and service names every node agrees on (the nodes use the same strings;
# the safety node keeps its own copies because it imports nothing but the safety core).
TOPIC_JOINT_STATES = "/joint_states"
TOPIC_INSTRUCTION = "/instruction"
TOPIC_ACTION_CHUNK = "/action_chunk"
TOPIC_CONTROLLER_PLAN = "/controller/plan"
TOPIC_CONTROLLER_COMMAND = "/controller/command"
TOPIC_JOINT_COMMANDS = "/joint_commands"
TOPIC_ESTOP = "/estop"
TOPIC_TASK_SUCCESS = "/task_success"
TOPIC_SIM_STATE = "/sim/state"
TOPIC_DIAGNOSTICS = "/diagnostics"
SERVICE_SAFETY_RESET = "/safety/reset"
SERVICE_SIM_RESET = "/sim_node/reset"
HIL_COMMAND_TOPIC = "/forward_position_controller/commands"


def camera_topic(camera: str) -> str:
    """``/camera/<camera>/image_raw``."""
    return f"/camera/{camera}/image_raw"


@dataclass(frozen=True)
class NodeSpec:
    """One node of the graph.

    Attributes:
        name: ROS node name (also the section of its parameter file).
        executable: console script installed in ``lib/vla_edge``.
        module: Python module whose ``main()`` the executable runs.
        params_file: parameter file relative to the share directory.
        remappings: ``(from, to)`` topic remappings.
        parameters: parameter overrides applied after the file.
    """

    name: str
    executable: str
    module: str
    params_file: str
    remappings: tuple[tuple[str, str], ...] = ()
    parameters: dict[str, Any] = field(default_factory=dict)

    def params_path(self, root: Path | None = None) -> Path:
        """Absolute path of the parameter file (source tree or ``share/vla_edge``)."""
        return (root if root is not None else share_dir()) / self.params_file

    def ros_args(
        self, root: Path | None = None, overrides: dict[str, Any] | None = None
    ) -> list[str]:
        """``--ros-args`` for a separate process: node name, params file, remaps, overrides."""
        args = ["--ros-args", "-r", f"__node:={self.name}"]
        args += ["--params-file", str(self.params_path(root))]
        for src, dst in self.remappings:
            args += ["-r", f"{src}:={dst}"]
        for key, value in {**self.parameters, **(overrides or {})}.items():
            args += ["-p", f"{key}:={_param_literal(value)}"]
        return args

    def launch_kwargs(self, root: Path | None = None) -> dict[str, Any]:
        """Keyword arguments for ``launch_ros.actions.Node``."""
        parameters: list[Any] = [str(self.params_path(root))]
        if self.parameters:
            parameters.append(dict(self.parameters))
        return {
            "package": PACKAGE,
            "executable": self.executable,
            "name": self.name,
            "parameters": parameters,
            "remappings": list(self.remappings),
            "output": "screen",
            "emulate_tty": True,
        }


def _param_literal(value: Any) -> str:
    """A ``-p key:=value`` literal (YAML syntax, which is what rcl parses)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_param_literal(v) for v in value) + "]"
    return repr(value)


SIM_NODE = NodeSpec("sim_node", "sim_node", "vla_edge.nodes.sim_node", "config/sim.yaml")
INFERENCE_NODE = NodeSpec(
    "inference_node", "inference_node", "vla_edge.nodes.inference_node", "config/inference.yaml"
)
CONTROLLER_NODE = NodeSpec(
    "controller_node", "controller_node", "vla_edge.nodes.controller_node", "config/controller.yaml"
)
SAFETY_NODE = NodeSpec(
    "safety_node", "safety_node", "vla_edge.nodes.safety_node", "config/safety.yaml"
)

HIL_PARAMS = "config/hil_jetson.yaml"


def graph(profile: str) -> tuple[NodeSpec, ...]:
    """The nodes of ``profile`` (``sim`` or ``hil``), in start order.

    * ``sim``: MuJoCo sim, inference, controller and safety, all on this machine.
    * ``hil``: inference, controller and safety against a ros2_control robot;
      ``/joint_states`` comes from the robot's joint_state_broadcaster and the
      safety output goes to ``/forward_position_controller/commands``.

    Raises:
        ConfigError: unknown profile.
    """
    if profile == "sim":
        return (SIM_NODE, SAFETY_NODE, CONTROLLER_NODE, INFERENCE_NODE)
    if profile == "hil":
        return (
            NodeSpec(
                SAFETY_NODE.name,
                SAFETY_NODE.executable,
                SAFETY_NODE.module,
                SAFETY_NODE.params_file,
                remappings=((TOPIC_JOINT_COMMANDS, HIL_COMMAND_TOPIC),),
            ),
            NodeSpec(
                CONTROLLER_NODE.name,
                CONTROLLER_NODE.executable,
                CONTROLLER_NODE.module,
                HIL_PARAMS,
            ),
            NodeSpec(
                INFERENCE_NODE.name,
                INFERENCE_NODE.executable,
                INFERENCE_NODE.module,
                HIL_PARAMS,
            ),
        )
    raise ConfigError(f"profile = {profile!r}: expected one of {PROFILES}")


def console_scripts() -> list[str]:
    """``setup.py`` console_scripts entries for every node executable."""
    specs = {spec.executable: spec for profile in PROFILES for spec in graph(profile)}
    return [f"{name} = {spec.module}:main" for name, spec in sorted(specs.items())]


def policy_parameters(policy: str) -> dict[str, Any]:
    """Inference-node parameter overrides for a ``--policy`` string.

    ``expert`` -> the scripted expert; ``ws://…`` -> a remote server; anything
    else (``bundled``, a checkpoint, an export directory) -> ``model_path``.
    """
    if policy == "expert":
        return {"backend": "expert"}
    if policy.startswith(("ws://", "wss://")):
        return {"backend": "remote", "remote_url": policy}
    path = Path(policy)
    backend = "torch"
    if path.is_dir() and (path / "manifest.json").is_file():
        try:
            backend = str(json.loads((path / "manifest.json").read_text()).get("backend", "onnx"))
        except ValueError:
            backend = "onnx"
    return {"backend": backend, "model_path": policy}


def policy_string(backend: str, model_path: str, remote_url: str) -> str:
    """The ``make_runner`` policy string an inference config names."""
    if backend == "expert":
        return "expert"
    if backend == "remote":
        return remote_url
    return model_path
