"""THE description of the ROS 2 graph: nodes, executables, parameter files, remappings.

Both ``launch/*.launch.py`` (launch_ros, on ROS 2 distributions) and
``vla-edge launch`` (separate processes with the rclpy wheels from PyPI) are
built from :func:`graph`, so they start the same nodes with the same
parameter files. This module imports no ROS package.

Topics (standard messages only), as ``topic: type (publisher -> subscribers)``.
The names are relative, so a namespace (``graph(profile, namespace="/arm1")``,
``vla-edge launch --namespace``, ``ros2 launch … namespace:=arm1``) or a remap
moves the whole graph: two arms, two graphs. Only ``/diagnostics`` is absolute,
by ROS convention (one aggregator for the machine; under a namespace the status
names carry it, see :func:`diagnostic_name`).

* ``camera/<name>/image_raw``: ``sensor_msgs/Image`` rgb8 (sim/camera -> inference)
* ``joint_states``: ``sensor_msgs/JointState`` (sim/robot -> all)
* ``instruction``: ``std_msgs/String``, transient-local (sim/operator -> inference)
* ``controller/plan``: ``trajectory_msgs/JointTrajectory`` (controller -> inference)
* ``action_chunk``: ``trajectory_msgs/JointTrajectory`` (inference -> controller)
* ``controller/command``: ``std_msgs/Float64MultiArray``, UNSAFE (controller -> safety)
* ``joint_commands``: ``std_msgs/Float64MultiArray``, safe (safety -> sim/robot)
* ``estop``: ``std_msgs/Bool`` (operator -> safety, controller)
* ``safety/reset``: ``std_srvs/Trigger`` service (operator -> safety)
* ``sim_node/reset``: ``std_srvs/Trigger`` service, the sim node's ``~/reset`` (operator -> sim)
* ``controller_node/home``: ``std_srvs/Trigger`` service, the controller's ``~/home`` (operator,
  sim -> controller)
* ``home_pose``: ``sensor_msgs/JointState``, transient-local (sim/operator -> controller)
* ``homed``: ``std_msgs/Bool``, transient-local (controller -> sim/operator)
* ``task_success``: ``std_msgs/Bool``, transient-local (sim -> monitor)
* ``sim/state``: ``std_msgs/Float64MultiArray`` (sim -> inference running the expert)
* ``/diagnostics``: ``diagnostic_msgs/DiagnosticArray`` (every node -> monitor; the
  safety node's status also -> controller, which refuses to home under its stop)

``controller/plan`` is also the inference request: the controller publishes
it whenever its trigger (``infer_trigger``) asks for a chunk, carrying its
remaining plan with the ``prefix`` merge and no points with the others.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vla_edge.config.loader import flatten_parameters, load_yaml_file
from vla_edge.config.paths import share_dir
from vla_edge.core.errors import ConfigError

PROFILES = ("sim", "hil")

PACKAGE = "vla_edge"

# Topic and service names every node and tool agrees on; no node keeps its own copy.
# Relative (resolved in the node's namespace) except /diagnostics.
TOPIC_JOINT_STATES = "joint_states"
TOPIC_INSTRUCTION = "instruction"
TOPIC_ACTION_CHUNK = "action_chunk"
TOPIC_CONTROLLER_PLAN = "controller/plan"
TOPIC_CONTROLLER_COMMAND = "controller/command"
TOPIC_JOINT_COMMANDS = "joint_commands"
TOPIC_ESTOP = "estop"
TOPIC_TASK_SUCCESS = "task_success"
TOPIC_SIM_STATE = "sim/state"
TOPIC_HOME_POSE = "home_pose"
TOPIC_HOMED = "homed"
TOPIC_DIAGNOSTICS = "/diagnostics"
DIAGNOSTICS_PERIOD_S = 1.0
"""Every node publishes its ``/diagnostics`` status this often (the fault suite's
state-sampling slack)."""
SERVICE_SAFETY_RESET = "safety/reset"
# Private services (``~/name``); another node of the namespace calls them by
# private_in_namespace(node, name), e.g. SERVICE_SIM_RESET (``sim_node/reset``).
PRIVATE_RESET = "~/reset"
PRIVATE_ARM = "~/arm"
PRIVATE_HOME = "~/home"
# ros2_control's forward command controller, in the robot's (the graph's) namespace.
HIL_COMMAND_TOPIC = "forward_position_controller/commands"
# The fault injector sits between a producer remapped to ``<topic>_raw`` and the consumer.
RAW_SUFFIX = "_raw"

_NAMESPACE_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def camera_topic(camera: str) -> str:
    """``camera/<camera>/image_raw``."""
    return f"camera/{camera}/image_raw"


def private_in_namespace(node_name: str, private_name: str) -> str:
    """``~/<name>`` of node ``node_name`` as the other nodes of its namespace name it."""
    return f"{node_name}/{private_name.removeprefix('~/')}"


def raw_topic(topic: str) -> str:
    """Where the producer of ``topic`` publishes when the fault injector republishes it."""
    return topic + RAW_SUFFIX


def normalize_namespace(namespace: str) -> str:
    """``arm1`` or ``/arm1/`` -> ``/arm1``; ``""`` or ``/`` -> ``""`` (the root namespace).

    Raises:
        ConfigError: a token is not a valid ROS name token.
    """
    stripped = namespace.strip().strip("/")
    if not stripped:
        return ""
    if not all(_NAMESPACE_TOKEN.fullmatch(token) for token in stripped.split("/")):
        raise ConfigError(
            f"namespace = {namespace!r}: tokens must match [A-Za-z_][A-Za-z0-9_]* "
            "separated by single '/'"
        )
    return "/" + stripped


def diagnostic_name(namespace: str, name: str) -> str:
    """A node's ``/diagnostics`` status name: ``name``, prefixed by its namespace if any.

    ``/diagnostics`` is shared by every graph on the machine: under ``/arm1``
    the controller reports ``arm1/vla_edge/controller``, at the root
    ``vla_edge/controller``.
    """
    namespace = normalize_namespace(namespace)
    return f"{namespace.strip('/')}/{name}" if namespace else name


@dataclass(frozen=True)
class NodeSpec:
    """One node of the graph.

    Attributes:
        name: ROS node name (also the section of its parameter file).
        executable: console script installed in ``lib/vla_edge``.
        module: Python module whose ``main()`` the executable runs.
        params_file: parameter file relative to the share directory.
        remappings: ``(from, to)`` topic remappings (relative names: they
            apply in the node's namespace).
        parameters: parameter overrides applied after the file.
        namespace: the node's namespace (``/arm1``; ``""``: the root).
    """

    name: str
    executable: str
    module: str
    params_file: str
    remappings: tuple[tuple[str, str], ...] = ()
    parameters: dict[str, Any] = field(default_factory=dict)
    namespace: str = ""

    def params_path(self, root: Path | None = None) -> Path:
        """Absolute path of the parameter file (source tree or ``share/vla_edge``)."""
        return (root if root is not None else share_dir()) / self.params_file

    def file_parameters(self, root: Path | None = None) -> dict[str, Any]:
        """The node's ``ros__parameters`` section of its parameter file, as written.

        Raises:
            ConfigError: the file is missing or has no section for the node.
        """
        path = self.params_path(root)
        data = load_yaml_file(path)
        section = data.get(self.name, data.get("/**"))
        if not isinstance(section, dict) or not isinstance(section.get("ros__parameters"), dict):
            raise ConfigError(f"{path}: no '{self.name}: ros__parameters:' section")
        return dict(section["ros__parameters"])

    def ros_args(
        self, root: Path | None = None, overrides: dict[str, Any] | None = None
    ) -> list[str]:
        """``--ros-args`` for a separate process: name, namespace, parameters, remaps, overrides.

        rcl applies a parameter file's ``<node>:`` section only to that node in
        the root namespace, so under a namespace the section's values are
        passed as ``-p`` instead of ``--params-file``.
        """
        args = ["--ros-args", "-r", f"__node:={self.name}"]
        parameters = {**self.parameters, **(overrides or {})}
        if self.namespace:
            args += ["-r", f"__ns:={self.namespace}"]
            parameters = {**self.file_parameters(root), **parameters}
        else:
            args += ["--params-file", str(self.params_path(root))]
        for src, dst in self.remappings:
            args += ["-r", f"{src}:={dst}"]
        for key, value in flatten_parameters(parameters).items():  # joints.<name>.<limit>
            args += ["-p", f"{key}:={_param_literal(value)}"]
        return args

    def launch_kwargs(self, root: Path | None = None) -> dict[str, Any]:
        """Keyword arguments for ``launch_ros.actions.Node``.

        Under a namespace the file's section is passed as a dictionary (see
        :meth:`ros_args`); launch_ros writes it for every node name.
        """
        parameters: list[Any] = (
            [self.file_parameters(root)] if self.namespace else [str(self.params_path(root))]
        )
        if self.parameters:
            parameters.append(dict(self.parameters))
        kwargs = {
            "package": PACKAGE,
            "executable": self.executable,
            "name": self.name,
            "parameters": parameters,
            "remappings": list(self.remappings),
            "output": "screen",
            "emulate_tty": True,
        }
        if self.namespace:
            kwargs["namespace"] = self.namespace
        return kwargs


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
SERVICE_SIM_RESET = private_in_namespace(SIM_NODE.name, PRIVATE_RESET)
SERVICE_CONTROLLER_HOME = private_in_namespace(CONTROLLER_NODE.name, PRIVATE_HOME)


def graph(profile: str, namespace: str = "") -> tuple[NodeSpec, ...]:
    """The nodes of ``profile`` (``sim`` or ``hil``), in start order, in ``namespace``.

    * ``sim``: MuJoCo sim, inference, controller and safety, all on this machine.
    * ``hil``: inference, controller and safety against a ros2_control robot;
      ``joint_states`` comes from the robot's joint_state_broadcaster and the
      safety output goes to ``forward_position_controller/commands`` (both in
      the graph's namespace, where the robot's controllers run).

    Raises:
        ConfigError: unknown profile or invalid namespace.
    """
    namespace = normalize_namespace(namespace)
    return tuple(dataclasses.replace(spec, namespace=namespace) for spec in _profile_nodes(profile))


def _profile_nodes(profile: str) -> tuple[NodeSpec, ...]:
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


def sim_parameters(task: str | None, sequencer: bool = False) -> dict[str, Any]:
    """Sim-node parameter overrides for ``--task`` (any suite: its suite too) and ``--sequencer``.

    Raises:
        UnknownTaskError: ``task`` is in no suite.
    """
    from vla_edge.sim.tasks import suite_of

    overrides: dict[str, Any] = {"task": task, "suite": suite_of(task)} if task else {}
    if sequencer:
        overrides["sequencer"] = True
    return overrides


def policy_string(backend: str, model_path: str, remote_url: str) -> str:
    """The ``make_runner`` policy string an inference config names."""
    if backend == "expert":
        return "expert"
    if backend == "remote":
        return remote_url
    return model_path


@dataclass(frozen=True)
class QoS:
    """A topic's quality of service as the nodes create it (history: keep last ``depth``)."""

    depth: int
    reliable: bool = True
    transient_local: bool = False

    def __str__(self) -> str:
        reliability = "reliable" if self.reliable else "best effort"
        durability = ", transient local" if self.transient_local else ""
        return f"{reliability}{durability}, depth {self.depth}"


QOS_STREAM = QoS(10)  # joint states, chunks, commands, plans, diagnostics
QOS_NEWEST_IMAGE = QoS(1)  # the inference node keeps only the newest frame
QOS_LATCHED = QoS(1, transient_local=True)  # a late subscriber gets the last value
QOS_LATCHED_EVENTS = QoS(10, transient_local=True)  # latched, and no change coalesced


@dataclass(frozen=True)
class Port:
    """One topic or service of a node, as the node creates it.

    Attributes:
        node: the node's name.
        role: ``publishes``, ``subscribes``, ``serves`` or ``calls``.
        name: relative name (``<camera>`` stands for each configured camera).
        type: message or service type.
        qos: for topics; ``None`` for services.
        meaning: one line for the reference.
        when: the condition under which the node has it ("" = always).
    """

    node: str
    role: str
    name: str
    type: str
    qos: QoS | None
    meaning: str
    when: str = ""


CAMERA_PLACEHOLDER = "<camera>"
_IMAGE = "sensor_msgs/msg/Image"
_JOINT_STATE = "sensor_msgs/msg/JointState"
_TRAJECTORY = "trajectory_msgs/msg/JointTrajectory"
_ARRAY = "std_msgs/msg/Float64MultiArray"
_DIAGNOSTICS = "diagnostic_msgs/msg/DiagnosticArray"
_TRIGGER = "std_srvs/srv/Trigger"
_BOOL = "std_msgs/msg/Bool"


def _diagnostics(node: str) -> Port:
    return Port(node, "publishes", TOPIC_DIAGNOSTICS, _DIAGNOSTICS, QOS_STREAM, "status, counters")


# Every topic and service of the sim graph's nodes (the ``hil`` profile remaps the
# safety output; the fault injector's ports depend on its scenario). A test builds
# each node and checks its names, types and QoS against this table; the README's
# node reference and graph picture are generated from it.
PORTS: tuple[Port, ...] = (
    Port("sim_node", "publishes", f"camera/{CAMERA_PLACEHOLDER}/image_raw", _IMAGE, QOS_STREAM,
         "rgb8 frame of each camera at publish_rate_hz, stamped at capture"),
    Port("sim_node", "publishes", TOPIC_JOINT_STATES, _JOINT_STATE, QOS_STREAM,
         "measured joint positions (rad, gripper m) at joint_state_rate_hz"),
    Port("sim_node", "publishes", TOPIC_INSTRUCTION, "std_msgs/msg/String", QOS_LATCHED,
         "the instruction in force (new at a switch or the sequencer's next sub-task)"),
    Port("sim_node", "publishes", TOPIC_TASK_SUCCESS, "std_msgs/msg/Bool", QOS_LATCHED,
         "whether the task's success predicate holds"),
    Port("sim_node", "publishes", TOPIC_SIM_STATE, _ARRAY, QOS_STREAM,
         "object poses for the scripted expert's shadow scene"),
    _diagnostics("sim_node"),
    Port("sim_node", "subscribes", TOPIC_JOINT_COMMANDS, _ARRAY, QOS_STREAM,
         "safe joint-position command (the safety node's output)"),
    Port("sim_node", "serves", SERVICE_SIM_RESET, _TRIGGER, None,
         "reset to task / init_state_id (the node's ~/reset); with home_on_reset it first "
         "homes the arm to the scene's initial pose through controller_node/home"),
    Port("sim_node", "publishes", TOPIC_HOME_POSE, _JOINT_STATE, QOS_LATCHED,
         "the initial arm pose of the scene a reset goes to (home_on_reset)"),
    Port("sim_node", "subscribes", TOPIC_HOMED, _BOOL, QOS_LATCHED_EVENTS,
         "the controller's homed; a reset waits for it (home_on_reset)"),
    Port("inference_node", "subscribes", f"camera/{CAMERA_PLACEHOLDER}/image_raw", _IMAGE,
         QOS_NEWEST_IMAGE, "each configured camera; only the newest frame is kept"),
    Port("inference_node", "subscribes", TOPIC_JOINT_STATES, _JOINT_STATE, QOS_STREAM,
         "the state paired with the frames"),
    Port("inference_node", "subscribes", TOPIC_INSTRUCTION, "std_msgs/msg/String", QOS_LATCHED,
         "the instruction; the next chunk uses it (a bad one is counted and ignored)"),
    Port("inference_node", "subscribes", TOPIC_CONTROLLER_PLAN, _TRAJECTORY, QOS_STREAM,
         "the controller's request; its points are the executed prefix"),
    Port("inference_node", "subscribes", TOPIC_SIM_STATE, _ARRAY, QOS_STREAM,
         "the simulator's state", when="backend: expert"),
    Port("inference_node", "publishes", TOPIC_ACTION_CHUNK, _TRAJECTORY, QOS_STREAM,
         "chunk stamped with its observation's time, one point per step"),
    _diagnostics("inference_node"),
    Port("controller_node", "subscribes", TOPIC_JOINT_STATES, _JOINT_STATE, QOS_STREAM,
         "measured positions; start point and joint-state heartbeat"),
    Port("controller_node", "subscribes", TOPIC_ACTION_CHUNK, _TRAJECTORY, QOS_STREAM,
         "chunks, checked on arrival (shape, finite, age, order)"),
    Port("controller_node", "publishes", TOPIC_CONTROLLER_COMMAND, _ARRAY, QOS_STREAM,
         "UNSAFE joint-position command at rate_hz (the safety node filters it)"),
    Port("controller_node", "publishes", TOPIC_CONTROLLER_PLAN, _TRAJECTORY, QOS_STREAM,
         "inference request when the trigger asks; remaining plan with the prefix merge"),
    Port("controller_node", "serves", SERVICE_CONTROLLER_HOME, _TRIGGER, None,
         "move to the home pose (limited minimum-jerk trajectory); refused under a stop"),
    Port("controller_node", "subscribes", TOPIC_HOME_POSE, _JOINT_STATE, QOS_LATCHED,
         "the pose ~/home moves to (else home_positions)"),
    Port("controller_node", "publishes", TOPIC_HOMED, _BOOL, QOS_LATCHED,
         "true once the arm is within home_tolerance of the home pose, until a chunk moves it"),
    Port("controller_node", "subscribes", TOPIC_ESTOP, _BOOL, QOS_STREAM,
         "a press refuses (and aborts) homing until the safety node reports the latch cleared"),
    Port("controller_node", "subscribes", TOPIC_DIAGNOSTICS, _DIAGNOSTICS, QOS_STREAM,
         "the safety node's status: homing is refused under its category-1/0 stop"),
    _diagnostics("controller_node"),
    Port("safety_node", "subscribes", TOPIC_CONTROLLER_COMMAND, _ARRAY, QOS_STREAM,
         "the command to filter"),
    Port("safety_node", "subscribes", TOPIC_JOINT_STATES, _JOINT_STATE, QOS_STREAM,
         "measured positions; tracking check and joint-state heartbeat"),
    Port("safety_node", "subscribes", TOPIC_ESTOP, "std_msgs/msg/Bool", QOS_STREAM,
         "true latches the e-stop"),
    Port("safety_node", "publishes", TOPIC_JOINT_COMMANDS, _ARRAY, QOS_STREAM,
         "limited joint-position command to the robot (hil: forward_position_controller/commands)"),
    _diagnostics("safety_node"),
    Port("safety_node", "serves", SERVICE_SAFETY_RESET, _TRIGGER, None,
         "clears a released e-stop or a latched stop; never resumes motion by itself"),
)  # fmt: skip


def node_ports(
    node: str, cameras: tuple[str, ...] = (), conditions: tuple[str, ...] = ()
) -> list[Port]:
    """The ports of ``node``, ``<camera>`` expanded, those with an unmet ``when`` left out."""
    out: list[Port] = []
    for port in PORTS:
        if port.node != node or (port.when and port.when not in conditions):
            continue
        if CAMERA_PLACEHOLDER in port.name:
            out += [
                dataclasses.replace(port, name=port.name.replace(CAMERA_PLACEHOLDER, cam))
                for cam in cameras
            ]
        else:
            out.append(port)
    return out
