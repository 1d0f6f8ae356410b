"""Config models -> declared ROS parameters with descriptors, and back (no spinning but one).

Every field of a node's config is a parameter whose descriptor (what ``ros2
param describe`` prints) carries the field's description, its type and a range
from its bounds; values are validated by the model before they are declared.
"""

import math
import time
from pathlib import Path

import pytest
import rclpy
from rcl_interfaces.msg import ParameterType
from rcl_interfaces.srv import DescribeParameters
from rclpy.executors import SingleThreadedExecutor
from rclpy.parameter import Parameter

from vla_edge.config import load_node_params, model_to_ros_params
from vla_edge.config.models import (
    SAFETY_LIMIT_FIELDS,
    ControllerConfig,
    FaultInjectorParams,
    InferenceConfig,
    JointLimitsConfig,
    SafetyConfig,
    SimConfig,
)
from vla_edge.core.errors import ConfigError, FlatSafetyLimitsError
from vla_edge.nodes.params import (
    INT64_MAX,
    config_from_parameters,
    declare_config,
    parameter_dict,
)

ROOT = Path(__file__).resolve().parents[1]
SAFETY = load_node_params(ROOT / "config" / "safety.yaml", "safety_node", SafetyConfig)
# Valid values for the fields without a default (as rcl passes them: joints.<name>.<limit>).
REQUIRED = {SafetyConfig: model_to_ros_params(SAFETY)}
# The ROS type each Python annotation must get, written out independently of params.py.
EXPECTED_TYPES = {
    float: ParameterType.PARAMETER_DOUBLE,
    int: ParameterType.PARAMETER_INTEGER,
    bool: ParameterType.PARAMETER_BOOL,
    str: ParameterType.PARAMETER_STRING,
    list[float]: ParameterType.PARAMETER_DOUBLE_ARRAY,
    list[str]: ParameterType.PARAMETER_STRING_ARRAY,
}
NODE_MODELS = [ControllerConfig, SafetyConfig, InferenceConfig, SimConfig, FaultInjectorParams]


@pytest.fixture
def context():
    context = rclpy.Context()
    rclpy.init(context=context)
    yield context
    context.shutdown()


@pytest.fixture
def make_node(context):
    nodes = []

    def make(overrides=(), name="params_test"):
        node = rclpy.create_node(name, context=context, parameter_overrides=list(overrides))
        nodes.append(node)
        return node

    yield make
    for node in nodes:
        node.destroy_node()


def _overrides(values):
    return [Parameter(name, value=value) for name, value in values.items()]


def _expected_type(annotation):
    if getattr(annotation, "__origin__", None) is not None and annotation.__origin__ is not list:
        return ParameterType.PARAMETER_STRING  # a Literal of strings
    return EXPECTED_TYPES[annotation]


def test_file_values_override_defaults_and_arrays_become_lists(make_node):
    node = make_node(_overrides({"rate_hz": 200.0, "joint_names": ["a", "b"], "merge": "replace"}))
    config = declare_config(node, ControllerConfig)
    assert config.rate_hz == 200.0 and config.merge == "replace"
    assert config.joint_names == ["a", "b"]
    assert config.chunk_horizon == ControllerConfig().chunk_horizon  # default kept
    assert parameter_dict(node)["joint_names"] == ["a", "b"]
    assert node.get_parameter("chunk_horizon").value == ControllerConfig().chunk_horizon
    assert config_from_parameters(node, ControllerConfig) == config


def test_invalid_value_is_a_config_error_naming_node_field_value_and_bound(make_node):
    node = make_node(_overrides({"rate_hz": -1.0}))
    with pytest.raises(ConfigError, match=r"node params_test: rate_hz = -1.0.*gt=0.0"):
        declare_config(node, ControllerConfig)
    assert not node.has_parameter("rate_hz")  # refused before anything is declared


def test_unknown_parameter_is_refused(make_node):
    node = make_node(_overrides({"rate_hzz": 100.0}))
    with pytest.raises(ConfigError, match="rate_hzz"):
        declare_config(node, ControllerConfig)


def test_missing_required_safety_limits_are_refused(make_node):
    node = make_node(_overrides({"rate_hz": 100.0}))
    with pytest.raises(ConfigError, match="joints = .*Field required"):
        declare_config(node, SafetyConfig)


def _parameter_fields(model):
    """Every parameter ``model``'s node declares and the field it comes from.

    Written out independently of params.py: the safety node's ``joints`` is one
    parameter per joint of its shipped file and limit, ``joints.<name>.<limit>``.
    """
    fields = {name: f for name, f in model.model_fields.items() if name != "joints"}
    if model is SafetyConfig:
        for joint in SAFETY.joint_names:
            for limit in SAFETY_LIMIT_FIELDS:
                fields[f"joints.{joint}.{limit}"] = JointLimitsConfig.model_fields[limit]
    return fields


def _value(config, name):
    value = config
    for part in name.split("."):
        value = value[part] if isinstance(value, dict) else getattr(value, part)
    return value


def test_safety_limits_from_a_parameter_file_are_declared_per_joint(context):
    """``--params-file config/safety.yaml`` as ``ros2 run`` passes it: rcl flattens the
    ``joints`` mapping to ``joints.<name>.<limit>``; each is declared with its descriptor."""
    node = rclpy.create_node(
        "safety_node",
        context=context,
        cli_args=["--ros-args", "--params-file", str(ROOT / "config" / "safety.yaml")],
    )
    try:
        config = declare_config(node, SafetyConfig)
        assert config == SAFETY
        assert node.get_parameter("joints.gripper.position_max").value == 0.04
        assert node.get_parameter("joints.joint4.velocity_limit_per_s").value == 2.5
        descriptor = node.describe_parameter("joints.joint1.jerk_limit_per_s3")
        assert descriptor.description == "jerk limit [rad/s^3, m/s^3]"
        assert descriptor.additional_constraints == "0.0 < value" and descriptor.read_only
        (out_of_range,) = node.set_parameters([Parameter("joints.joint1.soft_margin", value=-0.1)])
        assert not out_of_range.successful
        assert "joints" not in parameter_dict(node)
        assert config_from_parameters(node, SafetyConfig) == config
    finally:
        node.destroy_node()


def test_old_parallel_lists_as_node_parameters_are_refused_with_the_per_joint_form(make_node):
    old = {"joint_names": ["a", "b"], "position_min": [-1.0, -2.0], "position_max": [1.0, 2.0]}
    node = make_node(_overrides(old))
    with pytest.raises(FlatSafetyLimitsError) as info:
        declare_config(node, SafetyConfig)
    message = str(info.value)
    assert message.startswith("node params_test: safety limits as parallel lists")
    assert "      b:\n        position_min: -2.0\n        position_max: 2.0\n" in message
    assert not node.has_parameter("position_min")  # refused before anything is declared


def test_integer_given_for_a_float_parameter_is_declared_as_a_float(make_node):
    """``rate_hz: 200`` in a file is an integer to rcl; the model makes it the float it is."""
    node = make_node(_overrides({"rate_hz": 200}))
    assert declare_config(node, ControllerConfig).rate_hz == 200.0
    param = node.get_parameter("rate_hz")
    assert param.type_ == Parameter.Type.DOUBLE and param.value == 200.0


@pytest.mark.parametrize("model", NODE_MODELS, ids=lambda model: model.__name__)
def test_every_field_is_declared_with_the_description_type_and_range_of_its_field(make_node, model):
    """What ``ros2 param describe`` shows is the pydantic field, bounds included."""
    node = make_node(_overrides(REQUIRED.get(model, {})))
    config = declare_config(node, model)
    declared = set(node.get_parameters_by_prefix("")) - {
        "use_sim_time",
        "start_type_description_service",
    }
    fields = _parameter_fields(model)
    assert declared == set(fields)
    for name, field in fields.items():
        descriptor = node.describe_parameter(name)
        assert descriptor.description == field.description, name
        assert descriptor.type == _expected_type(field.annotation), name
        assert descriptor.read_only, name
        bounds = {
            key: getattr(item, key)
            for item in field.metadata
            for key in ("ge", "gt", "le", "lt")
            if hasattr(item, key)
        }
        value = _value(config, name)
        if isinstance(value, list) and not value:  # typed, without a value
            assert node.get_parameters_by_prefix("")[name].type_ == Parameter.Type.NOT_SET
        else:
            assert node.get_parameter(name).value == pytest.approx(value), name
        if not bounds:
            assert not descriptor.floating_point_range and not descriptor.integer_range, name
            continue
        if descriptor.type == ParameterType.PARAMETER_DOUBLE:
            (rng,) = descriptor.floating_point_range
            low = bounds.get("ge", math.nextafter(bounds.get("gt", -math.inf), math.inf))
            high = bounds.get("le", math.nextafter(bounds.get("lt", math.inf), -math.inf))
            assert (rng.from_value, rng.to_value, rng.step) == (low, high, 0.0), name
            assert rng.from_value <= value <= rng.to_value, name
        else:
            (rng,) = descriptor.integer_range
            assert rng.from_value == bounds.get("ge", bounds.get("gt", -(2**63) - 1) + 1), name
            assert rng.to_value == bounds.get("le", bounds.get("lt", INT64_MAX + 1) - 1), name
            assert rng.from_value <= value <= rng.to_value, name
        # the bounds as written, for a reader of `ros2 param describe`
        for bound in bounds.values():
            assert str(bound) in descriptor.additional_constraints, name


def test_exclusive_bound_becomes_the_nearest_value_inside_it(make_node):
    """ROS ranges are inclusive: ``gt=0`` is ``from_value`` = the smallest double above 0,
    so rclpy refuses exactly what the model refuses."""
    node = make_node()
    declare_config(node, ControllerConfig)
    (rng,) = node.describe_parameter("rate_hz").floating_point_range
    assert rng.from_value > 0.0 and rng.from_value == math.nextafter(0.0, 1.0)
    assert rng.to_value == 2000.0
    constraints = node.describe_parameter("rate_hz").additional_constraints
    assert constraints == "0.0 < value <= 2000.0"
    merge = node.describe_parameter("merge").additional_constraints
    assert merge == "one of: replace, weighted, ensemble, prefix"
    assert "at least 1 entries" in node.describe_parameter("joint_names").additional_constraints


def test_one_sided_integer_bound_reaches_to_the_types_extreme(make_node):
    node = make_node()
    declare_config(node, SimConfig)
    (rng,) = node.describe_parameter("init_state_id").integer_range
    assert (rng.from_value, rng.to_value) == (0, INT64_MAX)


def test_only_the_run_time_parameters_are_writable_and_ranges_are_enforced(make_node):
    node = make_node()
    declare_config(node, SimConfig, run_time=("task", "init_state_id"))
    assert not node.describe_parameter("task").read_only
    (refused,) = node.set_parameters([Parameter("publish_rate_hz", value=20.0)])
    assert not refused.successful and "read-only" in refused.reason
    (accepted,) = node.set_parameters([Parameter("task", value="lift_red_block")])
    assert accepted.successful and node.get_parameter("task").value == "lift_red_block"
    (out_of_range,) = node.set_parameters([Parameter("init_state_id", value=-1)])
    assert not out_of_range.successful
    with pytest.raises(ValueError, match="not fields"):
        declare_config(make_node(name="other"), SimConfig, run_time=("tsak",))


def test_describe_parameters_service_answers_what_ros2_param_describe_prints(make_node, context):
    """The node's ``~/describe_parameters`` service, which ``ros2 param describe`` calls."""
    node = make_node(name="described")
    declare_config(node, ControllerConfig)
    probe = make_node(name="describe_probe")
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    executor.add_node(probe)
    client = probe.create_client(DescribeParameters, "/described/describe_parameters")
    deadline = time.monotonic() + 10.0
    while not client.service_is_ready() and time.monotonic() < deadline:
        executor.spin_once(timeout_sec=0.05)
    assert client.service_is_ready()
    future = client.call_async(DescribeParameters.Request(names=["max_chunk_age_s"]))
    executor.spin_until_future_complete(future, timeout_sec=10.0)
    (descriptor,) = future.result().descriptors
    field = ControllerConfig.model_fields["max_chunk_age_s"]
    assert descriptor.description == field.description and "[s]" in descriptor.description
    assert descriptor.type == ParameterType.PARAMETER_DOUBLE
    assert descriptor.floating_point_range[0].to_value == 10.0
    executor.shutdown()
