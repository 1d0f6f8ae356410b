"""ROS parameters of a node -> the validated config model (no spinning)."""

import pytest
import rclpy
from rclpy.parameter import Parameter

from vla_edge.config.models import ControllerConfig, SafetyConfig
from vla_edge.core.errors import ConfigError
from vla_edge.nodes.params import config_from_parameters, parameter_dict


@pytest.fixture
def make_node():
    context = rclpy.Context()
    rclpy.init(context=context)
    nodes = []

    def make(overrides):
        node = rclpy.create_node(
            "params_test",
            context=context,
            parameter_overrides=overrides,
            automatically_declare_parameters_from_overrides=True,
        )
        nodes.append(node)
        return node

    yield make
    for node in nodes:
        node.destroy_node()
    context.shutdown()


def test_file_values_override_defaults_and_arrays_become_lists(make_node):
    node = make_node(
        [
            Parameter("rate_hz", value=200.0),
            Parameter("joint_names", value=["a", "b"]),
            Parameter("merge", value="replace"),
        ]
    )
    assert parameter_dict(node)["joint_names"] == ["a", "b"]
    config = config_from_parameters(node, ControllerConfig)
    assert config.rate_hz == 200.0 and config.merge == "replace"
    assert config.joint_names == ["a", "b"]
    assert config.chunk_horizon == ControllerConfig().chunk_horizon  # default kept


def test_invalid_value_is_a_config_error_naming_node_and_field(make_node):
    node = make_node([Parameter("rate_hz", value=-1.0)])
    with pytest.raises(ConfigError, match=r"node params_test: rate_hz = -1.0"):
        config_from_parameters(node, ControllerConfig)


def test_unknown_parameter_is_refused(make_node):
    node = make_node([Parameter("rate_hzz", value=100.0)])
    with pytest.raises(ConfigError, match="rate_hzz"):
        config_from_parameters(node, ControllerConfig)


def test_missing_required_safety_limits_are_refused(make_node):
    node = make_node([Parameter("rate_hz", value=100.0)])
    with pytest.raises(ConfigError, match="position_min"):
        config_from_parameters(node, SafetyConfig)
