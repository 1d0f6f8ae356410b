"""launch/*.launch.py: valid Python, importable without launch_ros, agree with the graph."""

import ast
import importlib.util
import py_compile
from pathlib import Path

import pytest

from vla_edge.nodes import graph as g

ROOT = Path(__file__).resolve().parents[1]
LAUNCH_FILES = {"sim": ROOT / "launch" / "sim.launch.py", "hil": ROOT / "launch" / "hil.launch.py"}


def _load(profile):
    path = LAUNCH_FILES[profile]
    spec = importlib.util.spec_from_file_location(f"{profile}_launch", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("profile", g.PROFILES)
def test_launch_file_compiles(profile):
    py_compile.compile(str(LAUNCH_FILES[profile]), doraise=True)


@pytest.mark.parametrize("profile", g.PROFILES)
def test_launch_file_starts_the_graphs_executables_with_the_graphs_parameter_files(profile):
    module = _load(profile)
    assert module.PROFILE == profile
    nodes = module.node_arguments()
    assert [n["executable"] for n in nodes] == [s.executable for s in g.graph(profile)]
    assert [n["name"] for n in nodes] == [s.name for s in g.graph(profile)]
    for kwargs, spec in zip(nodes, g.graph(profile), strict=True):
        assert kwargs["package"] == "vla_edge"
        assert kwargs["parameters"][0] == str(spec.params_path())
        assert Path(kwargs["parameters"][0]).is_file()
        assert kwargs["remappings"] == list(spec.remappings)


def test_sim_launch_arguments_become_parameter_overrides():
    nodes = {
        n["name"]: n for n in _load("sim").node_arguments(task="lift_green_block", policy="expert")
    }
    assert nodes["sim_node"]["parameters"][-1] == {"task": "lift_green_block", "suite": "tabletop"}
    assert nodes["inference_node"]["parameters"][-1] == {"backend": "expert"}
    long = _load("sim").node_arguments(task="blue_on_plate_then_lift_green", sequencer=True)
    sim = next(n for n in long if n["name"] == "sim_node")
    assert sim["parameters"][-1] == {
        "task": "blue_on_plate_then_lift_green",
        "suite": "tabletop_long",
        "sequencer": True,
    }


def test_hil_launch_remaps_the_safety_output_to_ros2_control():
    nodes = {n["name"]: n for n in _load("hil").node_arguments()}
    assert "sim_node" not in nodes
    assert (g.TOPIC_JOINT_COMMANDS, g.HIL_COMMAND_TOPIC) in nodes["safety_node"]["remappings"]
    assert ("joint_commands", "forward_position_controller/commands") in nodes["safety_node"][
        "remappings"
    ]


@pytest.mark.parametrize("profile", g.PROFILES)
def test_without_launch_ros_the_launch_file_says_what_to_use_instead(profile):
    module = _load(profile)
    if module.HAVE_LAUNCH:
        description = module.generate_launch_description()
        assert description is not None
    else:
        with pytest.raises(RuntimeError, match=f"vla-edge launch {profile}"):
            module.generate_launch_description()


@pytest.mark.parametrize("profile", g.PROFILES)
def test_namespace_argument_moves_every_node_and_keeps_its_file_values(profile):
    """``namespace:=arm1``: every node in /arm1, with its file's section as a dictionary
    (rcl would not apply the file's ``<node>:`` section under a namespace)."""
    module = _load(profile)
    at_root = module.node_arguments()
    assert all("namespace" not in kwargs for kwargs in at_root)
    namespaced = module.node_arguments(namespace="arm1")
    for kwargs, root_kwargs, spec in zip(namespaced, at_root, g.graph(profile), strict=True):
        assert kwargs["namespace"] == "/arm1"
        assert kwargs["parameters"][0] == spec.file_parameters()
        assert kwargs["remappings"] == root_kwargs["remappings"]
        assert kwargs["name"] == root_kwargs["name"]


@pytest.mark.parametrize("profile", g.PROFILES)
def test_launch_file_declares_a_namespace_argument(profile):
    tree = ast.parse(LAUNCH_FILES[profile].read_text())
    declared = {
        call.args[0].value
        for call in ast.walk(tree)
        if isinstance(call, ast.Call)
        and getattr(call.func, "id", None) == "DeclareLaunchArgument"
        and call.args
        and isinstance(call.args[0], ast.Constant)
    }
    assert "namespace" in declared


def test_every_node_module_has_a_console_script_that_ros2_run_finds():
    """Each ``vla_edge/nodes/*_node.py`` is an executable of the package (``ros2 run``)."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    scripts = {
        node.value.split(" = ")[0]: node.value.split(" = ")[1]
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and " = " in node.value
    }
    modules = sorted(p.stem for p in (ROOT / "vla_edge" / "nodes").glob("*_node.py"))
    assert "fault_injector_node" in modules
    for module in modules:
        assert scripts.get(module) == f"vla_edge.nodes.{module}:main", module
