"""The one graph description: nodes, executables, parameter files, remappings."""

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from vla_edge.config import load_node_params
from vla_edge.config.loader import flatten_parameters, validate_params
from vla_edge.config.models import ControllerConfig, InferenceConfig, SafetyConfig, SimConfig
from vla_edge.core.errors import ConfigError
from vla_edge.nodes import graph as g

ROOT = Path(__file__).resolve().parents[1]
MODELS = {
    "sim_node": SimConfig,
    "inference_node": InferenceConfig,
    "controller_node": ControllerConfig,
    "safety_node": SafetyConfig,
}


def _setup_console_scripts():
    tree = ast.parse((ROOT / "setup.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == "console_scripts":
                    return [elt.value for elt in value.elts]
    raise AssertionError("no console_scripts in setup.py")


def test_sim_profile_has_all_four_nodes_and_hil_drops_the_simulator():
    assert [s.name for s in g.graph("sim")] == [
        "sim_node",
        "safety_node",
        "controller_node",
        "inference_node",
    ]
    assert {s.name for s in g.graph("hil")} == {"safety_node", "controller_node", "inference_node"}


def test_unknown_profile_is_a_config_error():
    with pytest.raises(ConfigError, match="profile = 'lab'"):
        g.graph("lab")


@pytest.mark.parametrize("profile", g.PROFILES)
def test_every_node_has_a_console_script_a_main_and_a_valid_parameter_file(profile):
    scripts = _setup_console_scripts()
    for spec in g.graph(profile):
        assert f"{spec.executable} = {spec.module}:main" in scripts
        assert callable(importlib.import_module(spec.module).main)
        config = load_node_params(spec.params_path(), spec.name, MODELS[spec.name])
        assert config is not None


def test_console_scripts_in_setup_match_the_graph():
    scripts = _setup_console_scripts()
    for entry in g.console_scripts():
        assert entry in scripts


def test_safety_keeps_its_own_parameter_file_in_both_profiles():
    for profile in g.PROFILES:
        safety = next(s for s in g.graph(profile) if s.name == "safety_node")
        assert safety.params_file == "config/safety.yaml"


def test_hil_safety_output_goes_to_the_forward_position_controller():
    safety = next(s for s in g.graph("hil") if s.name == "safety_node")
    assert ("joint_commands", "forward_position_controller/commands") in safety.remappings
    for spec in g.graph("hil"):
        if spec.name != "safety_node":
            assert spec.params_file == "config/hil_jetson.yaml"


def test_ros_args_carry_node_name_params_file_remaps_and_overrides():
    safety = next(s for s in g.graph("hil") if s.name == "safety_node")
    args = safety.ros_args(overrides={"rate_hz": 200.0, "estop_category": "cat0", "x": [1, 2]})
    assert args[:3] == ["--ros-args", "-r", "__node:=safety_node"]
    assert args[args.index("--params-file") + 1] == str(ROOT / "config" / "safety.yaml")
    assert "joint_commands:=forward_position_controller/commands" in args
    assert not any(arg.startswith("__ns:=") for arg in args)  # the root namespace
    assert "rate_hz:=200.0" in args and 'estop_category:="cat0"' in args and "x:=[1, 2]" in args


def test_policy_string_maps_to_inference_parameters(tmp_path):
    assert g.policy_parameters("expert") == {"backend": "expert"}
    assert g.policy_parameters("ws://h:8000") == {"backend": "remote", "remote_url": "ws://h:8000"}
    assert g.policy_parameters("bundled") == {"backend": "torch", "model_path": "bundled"}
    (tmp_path / "manifest.json").write_text(json.dumps({"backend": "executorch"}))
    assert g.policy_parameters(str(tmp_path))["backend"] == "executorch"
    assert g.policy_string("expert", "bundled", "ws://x") == "expert"
    assert g.policy_string("remote", "bundled", "ws://x") == "ws://x"
    assert g.policy_string("torch", "bundled", "ws://x") == "bundled"


def test_safety_node_imports_only_the_safety_core_core_config_and_ros():
    code = (
        "import sys, json; import vla_edge.nodes.safety_node; "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('vla_edge'))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    modules = json.loads(out.stdout.strip().splitlines()[-1])
    allowed = ("vla_edge.safety", "vla_edge.core", "vla_edge.config")
    extra = [
        m
        for m in modules
        if m
        not in (
            "vla_edge",
            "vla_edge.nodes",
            "vla_edge.nodes.safety_node",
            "vla_edge.nodes.lifecycle",
            "vla_edge.nodes.graph",  # the topic names (imports config and core only)
            "vla_edge.nodes.params",  # parameter declaration (imports config only)
        )
        and not m.startswith(allowed)
    ]
    assert extra == []
    assert "vla_edge.nodes.safety_node" in modules
    for forbidden in ("torch", "mujoco", "vla_edge.control", "vla_edge.runners"):
        assert forbidden not in out.stdout


# --- names and namespaces -------------------------------------------------------------


def _graph_names():
    """Every topic and service name the graph description defines."""
    names = {k: v for k, v in vars(g).items() if k.startswith(("TOPIC_", "SERVICE_"))}
    names["HIL_COMMAND_TOPIC"] = g.HIL_COMMAND_TOPIC
    names["camera_topic"] = g.camera_topic("wrist")
    return names


def test_every_topic_and_service_is_relative_except_diagnostics():
    names = _graph_names()
    assert len(names) >= 14
    absolute = {key: name for key, name in names.items() if name.startswith("/")}
    assert absolute == {"TOPIC_DIAGNOSTICS": "/diagnostics"}
    assert not any(name.startswith("~") for name in names.values())  # private names stay apart
    assert g.SERVICE_SIM_RESET == "sim_node/reset"  # the sim node's ~/reset, seen from its ns
    assert g.PRIVATE_RESET == "~/reset" and g.PRIVATE_ARM == "~/arm"


@pytest.mark.parametrize(
    ("given", "expected"),
    [("", ""), ("/", ""), ("arm1", "/arm1"), ("/arm1/", "/arm1"), ("lab/arm_2", "/lab/arm_2")],
)
def test_namespace_is_normalised_to_an_absolute_name(given, expected):
    assert g.normalize_namespace(given) == expected
    assert all(spec.namespace == expected for spec in g.graph("sim", given))


@pytest.mark.parametrize("bad", ["1arm", "arm-1", "arm1//x", "~arm", "arm 1"])
def test_invalid_namespace_is_a_config_error_naming_it(bad):
    with pytest.raises(ConfigError, match=f"namespace = {bad!r}"):
        g.graph("sim", bad)


@pytest.mark.parametrize("profile", g.PROFILES)
def test_namespaced_process_gets_the_namespace_and_its_file_values_as_parameters(profile):
    """rcl applies a file's ``<node>:`` section only at the root: under a namespace the
    section travels as ``-p`` values, so the node still gets every value of its file."""
    for spec, root_spec in zip(g.graph(profile, "arm1"), g.graph(profile), strict=True):
        args = spec.ros_args(overrides={"rate_hz": 200.0})
        assert args[:5] == ["--ros-args", "-r", f"__node:={spec.name}", "-r", "__ns:=/arm1"]
        assert "--params-file" not in args
        values = [args[i + 1] for i, arg in enumerate(args) if arg == "-p"]
        section = spec.file_parameters()
        assert section == root_spec.file_parameters() and section
        for key in flatten_parameters(section):  # a mapping as rcl reads it: joints.<name>.<limit>
            assert any(v.startswith(f"{key}:=") for v in values), (spec.name, key)
        # an override replaces the file's value (one -p per parameter)
        assert [v for v in values if v.startswith("rate_hz:=")] == ["rate_hz:=200.0"]
        remaps = [args[i + 1] for i, arg in enumerate(args) if arg == "-r"][2:]
        assert remaps == [f"{src}:={dst}" for src, dst in root_spec.remappings]


@pytest.mark.parametrize("profile", g.PROFILES)
def test_namespaced_file_values_parse_back_to_the_files_config(profile):
    """The ``-p`` literals of a namespaced node validate to the same config as its file."""
    for spec in g.graph(profile, "arm1"):
        args = spec.ros_args()
        values = [args[i + 1] for i, arg in enumerate(args) if arg == "-p"]
        parsed = {}
        for value in values:
            key, literal = value.split(":=", 1)
            parsed[key] = yaml.safe_load(literal)
        model = MODELS[spec.name]
        assert validate_params(model, parsed, spec.name) == load_node_params(
            spec.params_path(), spec.name, model
        )


def test_diagnostic_status_names_carry_the_namespace_only_under_one():
    assert g.diagnostic_name("", "vla_edge/safety") == "vla_edge/safety"
    assert g.diagnostic_name("/", "vla_edge/safety") == "vla_edge/safety"
    assert g.diagnostic_name("/arm1", "vla_edge/safety") == "arm1/vla_edge/safety"
    assert g.diagnostic_name("/lab/arm1", "vla_edge/safety") == "lab/arm1/vla_edge/safety"


def test_safety_parameter_table_has_a_row_per_limit_with_each_joints_value():
    """docs/NODES.md's generated table: ``joints.<joint>.<limit>``, as the node declares them."""
    from vla_edge.nodes.reference import parameters_table

    rows = parameters_table("safety_node").splitlines()
    (velocity,) = [r for r in rows if r.startswith("| `joints.<joint>.velocity_limit_per_s`")]
    assert (
        "`joint1: 2, joint2: 2, joint3: 2, joint4: 2.5, joint5: 2.5, joint6: 3, gripper: 0.2`"
        in (velocity)
    )
    assert "| (0, ∞) |" in velocity and "velocity limit [rad/s, m/s]" in velocity
    assert not [r for r in rows if r.startswith("| `joints` ")]
