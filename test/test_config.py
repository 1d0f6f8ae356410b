"""Shipped configs load; a bad field fails at load naming file, field, value and bound."""

from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from vla_edge.config import (
    ControllerConfig,
    InferenceConfig,
    SafetyConfig,
    SimConfig,
    load_node_params,
    load_yaml_file,
    model_to_ros_params,
)
from vla_edge.config.loader import validate_params
from vla_edge.config.models import SAFETY_LIMIT_FIELDS, FaultInjectorParams, JointLimitsConfig
from vla_edge.core import ConfigError
from vla_edge.core.errors import DuplicateKeyError, FlatSafetyLimitsError, MissingJointLimitsError
from vla_edge.sim.tasks import check_task

CONFIG_DIR = Path(__file__).resolve().parents[1] / "config"
MODELS = {
    "controller_node": ControllerConfig,
    "safety_node": SafetyConfig,
    "inference_node": InferenceConfig,
    "sim_node": SimConfig,
}


def test_every_shipped_config_file_loads_into_its_model() -> None:
    files = sorted(CONFIG_DIR.glob("*.yaml"))
    assert {f.name for f in files} >= {
        "controller.yaml",
        "safety.yaml",
        "inference.yaml",
        "sim.yaml",
    }
    validated = 0
    for path in files:
        data = load_yaml_file(path)
        for node_name in data:
            if node_name in MODELS:
                config = load_node_params(path, node_name, MODELS[node_name])
                assert model_to_ros_params(config)
                validated += 1
    assert validated >= 4


def test_shipped_safety_limits_cover_every_joint() -> None:
    config = load_node_params(CONFIG_DIR / "safety.yaml", "safety_node", SafetyConfig)
    assert list(config.joints) == config.joint_names and len(config.joint_names) == 7
    controller = load_node_params(
        CONFIG_DIR / "controller.yaml", "controller_node", ControllerConfig
    )
    assert controller.joint_names == config.joint_names


# config/safety.yaml's seven parallel lists before the limits were keyed per joint.
SHIPPED_PARALLEL_LISTS = {
    "position_min": [-2.9, -1.8, -2.6, -2.9, -2.0, -3.0, 0.0],
    "position_max": [2.9, 1.8, 2.6, 2.9, 2.0, 3.0, 0.04],
    "soft_margin": [0.05, 0.05, 0.05, 0.05, 0.05, 0.05, 0.0],
    "velocity_limit_per_s": [2.0, 2.0, 2.0, 2.5, 2.5, 3.0, 0.2],
    "acceleration_limit_per_s2": [10.0, 10.0, 10.0, 12.0, 12.0, 15.0, 2.0],
    "deceleration_limit_per_s2": [12.0, 12.0, 12.0, 15.0, 15.0, 18.0, 2.5],
    "jerk_limit_per_s3": [300.0, 300.0, 300.0, 400.0, 400.0, 500.0, 60.0],
}


def test_shipped_per_joint_limits_give_the_arrays_the_parallel_lists_gave() -> None:
    config = load_node_params(CONFIG_DIR / "safety.yaml", "safety_node", SafetyConfig)
    arrays = config.limit_arrays()
    assert arrays.joint_names == tuple(config.joint_names)
    for name, values in SHIPPED_PARALLEL_LISTS.items():
        assert getattr(arrays, name).dtype == np.float64
        assert getattr(arrays, name).tolist() == values, name
    lists = SHIPPED_PARALLEL_LISTS
    np.testing.assert_array_equal(
        arrays.soft_min, np.add(lists["position_min"], lists["soft_margin"])
    )
    np.testing.assert_array_equal(
        arrays.soft_max, np.subtract(lists["position_max"], lists["soft_margin"])
    )


def joint_block(name: str, **overrides: str) -> str:
    fields = {
        "position_min": "-1.0",
        "position_max": "1.0",
        "soft_margin": "0.1",
        "velocity_limit_per_s": "1.0",
        "acceleration_limit_per_s2": "5.0",
        "deceleration_limit_per_s2": "6.0",
        "jerk_limit_per_s3": "100.0",
    }
    fields.update(overrides)
    return f"      {name}:\n" + "".join(f"        {k}: {v}\n" for k, v in fields.items())


def safety_text(joint_names: str = "[a, b]", joints: str | None = None) -> str:
    if joints is None:
        joints = joint_block("a") + joint_block("b")
    return (
        "safety_node:\n  ros__parameters:\n"
        f"    joint_names: {joint_names}\n    rate_hz: 100.0\n    joints:\n{joints}"
    )


def test_tiny_safety_config_loads(tmp_path: Path) -> None:
    config = load_node_params(write(tmp_path, safety_text()), "safety_node", SafetyConfig)
    assert config.joint_names == ["a", "b"]
    assert config.joints["b"].deceleration_limit_per_s2 == 6.0


def test_limit_arrays_follow_the_order_asked_for_not_the_files(tmp_path: Path) -> None:
    joints = joint_block("b", velocity_limit_per_s="2.0") + joint_block("a")
    config = load_node_params(
        write(tmp_path, safety_text(joints=joints)), "safety_node", SafetyConfig
    )
    assert config.limit_arrays().velocity_limit_per_s.tolist() == [1.0, 2.0]  # joint_names
    reordered = config.limit_arrays(["b", "a"])
    assert reordered.joint_names == ("b", "a")
    assert reordered.velocity_limit_per_s.tolist() == [2.0, 1.0]
    np.testing.assert_allclose(reordered.soft_max, [0.9, 0.9])


def test_limits_of_a_joint_the_config_lacks_are_a_named_error(tmp_path: Path) -> None:
    config = load_node_params(write(tmp_path, safety_text()), "safety_node", SafetyConfig)
    with pytest.raises(
        MissingJointLimitsError, match=r"joints \['c'\] have no limits.*add joints\.c to"
    ):
        config.limit_arrays(["a", "c"])


def test_old_parallel_lists_are_refused_with_the_per_joint_form_of_the_same_file(
    tmp_path: Path,
) -> None:
    body = "".join(f"    {k}: {v}\n" for k, v in SHIPPED_PARALLEL_LISTS.items())
    old = (
        "safety_node:\n  ros__parameters:\n"
        "    joint_names: [joint1, joint2, joint3, joint4, joint5, joint6, gripper]\n" + body
    )
    path = write(tmp_path, old)
    with pytest.raises(FlatSafetyLimitsError) as info:
        load_node_params(path, "safety_node", SafetyConfig)
    message = str(info.value)
    assert str(path) in message and "keyed per joint" in message
    assert "      gripper:\n        position_min: 0.0\n        position_max: 0.04\n" in message
    # pasted in place of the lists, the block gives the very same limits
    block = message.split("Replace the lists with:\n", 1)[1]
    new = old.replace(body, block + "\n")
    pasted = load_node_params(write(tmp_path, new), "safety_node", SafetyConfig)
    for name, values in SHIPPED_PARALLEL_LISTS.items():
        assert getattr(pasted.limit_arrays(), name).tolist() == values, name


def test_one_old_list_among_per_joint_limits_is_refused_too(tmp_path: Path) -> None:
    text = safety_text() + "    soft_margin: [0.1, 0.2]\n"
    with pytest.raises(FlatSafetyLimitsError, match=r"parallel lists \(soft_margin\)") as info:
        load_node_params(write(tmp_path, text), "safety_node", SafetyConfig)
    block = str(info.value).split("Move the lists' values into the entries of joints:\n")[1]
    assert yaml.safe_load(block) == {
        "joints": {"a": {"soft_margin": 0.1}, "b": {"soft_margin": 0.2}}
    }


def test_a_joint_named_twice_is_refused_naming_it_and_its_lines(tmp_path: Path) -> None:
    path = write(tmp_path, safety_text(joints=joint_block("a") + joint_block("a")))
    with pytest.raises(DuplicateKeyError, match=r"key 'a' appears twice.*first on line 6"):
        load_node_params(path, "safety_node", SafetyConfig)


def test_a_joint_without_limits_is_refused_naming_it(tmp_path: Path) -> None:
    path = write(tmp_path, safety_text(joints=joint_block("a")))
    with pytest.raises(
        ConfigError,
        match=r"joints has no entry for \['b'\] of joint_names.*add joints\.b, each with",
    ):
        load_node_params(path, "safety_node", SafetyConfig)


def test_limits_of_a_joint_not_in_joint_names_are_refused(tmp_path: Path) -> None:
    joints = joint_block("a") + joint_block("b") + joint_block("c")
    path = write(tmp_path, safety_text(joints=joints))
    with pytest.raises(ConfigError, match=r"joints\.c: not in joint_names \['a', 'b'\]"):
        load_node_params(path, "safety_node", SafetyConfig)


def test_a_limit_missing_from_a_joint_is_refused_naming_joint_and_limit(tmp_path: Path) -> None:
    joints = joint_block("a") + joint_block("b").replace("        jerk_limit_per_s3: 100.0\n", "")
    path = write(tmp_path, safety_text(joints=joints))
    with pytest.raises(ConfigError, match=r"joints\.b\.jerk_limit_per_s3 = .*Field required"):
        load_node_params(path, "safety_node", SafetyConfig)


def test_soft_margins_wider_than_the_range_are_refused(tmp_path: Path) -> None:
    path = write(
        tmp_path, safety_text(joints=joint_block("a") + joint_block("b", soft_margin="1.5"))
    )
    with pytest.raises(
        ConfigError,
        match=r"joints\.b = .*position_max - position_min = 1\.0 - \(-1\.0\) = 2\.0 must exceed "
        r"2 \* soft_margin = 3\.0",
    ):
        load_node_params(path, "safety_node", SafetyConfig)


def test_non_positive_jerk_limit_is_refused_naming_joint_value_and_bound(tmp_path: Path) -> None:
    path = write(
        tmp_path, safety_text(joints=joint_block("a") + joint_block("b", jerk_limit_per_s3="0.0"))
    )
    with pytest.raises(
        ConfigError, match=r"joints\.b\.jerk_limit_per_s3 = 0\.0: .*\(bound: gt=0\.0\)"
    ):
        load_node_params(path, "safety_node", SafetyConfig)


def test_non_finite_position_limit_is_refused(tmp_path: Path) -> None:
    path = write(
        tmp_path, safety_text(joints=joint_block("a", position_max=".inf") + joint_block("b"))
    )
    with pytest.raises(ConfigError, match=r"joints\.a\.position_max = inf"):
        load_node_params(path, "safety_node", SafetyConfig)


def test_dotted_limit_names_as_rcl_reads_them_load_like_nested_ones(tmp_path: Path) -> None:
    nested = load_node_params(write(tmp_path, safety_text()), "safety_node", SafetyConfig)
    flat = model_to_ros_params(nested)
    assert flat["joints.b.deceleration_limit_per_s2"] == 6.0 and "joints" not in flat
    body = "".join(f"    {k}: {v}\n" for k, v in flat.items()).replace("'", "")
    path = tmp_path / "flat.yaml"
    path.write_text("safety_node:\n  ros__parameters:\n" + body)
    assert load_node_params(path, "safety_node", SafetyConfig) == nested


def test_shipped_sim_task_and_initial_state_are_the_suites() -> None:
    sim = load_node_params(CONFIG_DIR / "sim.yaml", "sim_node", SimConfig)
    check_task(sim.suite, sim.task, sim.init_state_id)  # what the sim node checks at start


def test_sim_config_leaves_the_suite_check_to_the_sim_and_keeps_its_bounds() -> None:
    # the task list and the initial states are the sim's (vla_edge.sim.tasks.check_task)
    assert SimConfig(task="not_a_task_yet", init_state_id=10_000).task == "not_a_task_yet"
    with pytest.raises(ValueError, match="greater than or equal to 0"):
        SimConfig(init_state_id=-1)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(text)
    return path


def test_out_of_bound_field_names_file_field_value_and_bound(tmp_path: Path) -> None:
    path = write(tmp_path, "controller_node:\n  ros__parameters:\n    rate_hz: -5.0\n")
    with pytest.raises(ConfigError) as info:
        load_node_params(path, "controller_node", ControllerConfig)
    message = str(info.value)
    assert str(path) in message
    assert "rate_hz = -5.0" in message
    assert "gt=0.0" in message


def test_unknown_field_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "controller_node:\n  ros__parameters:\n    rate_hzz: 100.0\n")
    with pytest.raises(ConfigError, match="rate_hzz = 100.0: Extra inputs are not permitted"):
        load_node_params(path, "controller_node", ControllerConfig)


def test_action_period_shorter_than_control_period_is_refused(tmp_path: Path) -> None:
    text = "controller_node:\n  ros__parameters:\n    rate_hz: 50.0\n    dt_action_s: 0.01\n"
    path = write(tmp_path, text)
    with pytest.raises(ConfigError, match=r"dt_action_s=0.01 must be >= the control period"):
        load_node_params(path, "controller_node", ControllerConfig)


def test_missing_node_section_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "other_node:\n  ros__parameters: {}\n")
    with pytest.raises(ConfigError, match="no 'safety_node: ros__parameters:' section"):
        load_node_params(path, "safety_node", SafetyConfig)


def test_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="config file not found"):
        load_node_params(tmp_path / "nope.yaml", "safety_node", SafetyConfig)


def test_noise_scale_is_bounded_and_scales_the_same_draws(tmp_path: Path) -> None:
    import numpy as np

    from vla_edge.config.models import DEFAULT_NOISE_SCALE
    from vla_edge.runners.base import start_noise

    shipped = load_node_params(CONFIG_DIR / "inference.yaml", "inference_node", InferenceConfig)
    assert shipped.noise_scale == DEFAULT_NOISE_SCALE
    path = write(tmp_path, "inference_node:\n  ros__parameters:\n    noise_scale: -1.0\n")
    with pytest.raises(ConfigError, match="noise_scale = -1.0"):
        load_node_params(path, "inference_node", InferenceConfig)
    full = start_noise(np.random.default_rng(4), 10, 7, 1.0)
    half = start_noise(np.random.default_rng(4), 10, 7, 0.5)
    assert full.dtype == half.dtype == np.float32 and full.shape == (10, 7)
    np.testing.assert_allclose(half, 0.5 * full, rtol=1e-6)
    assert not start_noise(np.random.default_rng(4), 10, 7, 0.0).any()


def test_flow_steps_defaults_to_the_models_own_and_is_bounded(tmp_path: Path) -> None:
    # 0 = keep the checkpoint's / export's K (the inference node passes None to make_runner)
    for name in ("inference.yaml", "hil_jetson.yaml"):
        shipped = load_node_params(CONFIG_DIR / name, "inference_node", InferenceConfig)
        assert shipped.flow_steps == 0, name
    path = write(tmp_path, "inference_node:\n  ros__parameters:\n    flow_steps: 101\n")
    with pytest.raises(ConfigError, match="flow_steps = 101"):
        load_node_params(path, "inference_node", InferenceConfig)


def test_runner_flow_steps_maps_zero_to_the_models_own() -> None:
    assert InferenceConfig().runner_flow_steps is None
    assert InferenceConfig(flow_steps=5).runner_flow_steps == 5


# Unit each name suffix implies (CONVENTIONS: the unit is part of the name); the
# description says it again, because `ros2 param describe` shows the description.
SUFFIX_UNITS = {"_s": "[s]", "_hz": "[Hz]", "_per_s": "/s", "_per_s2": "/s^2", "_per_s3": "/s^3"}


@pytest.mark.parametrize(
    "model",
    [
        ControllerConfig,
        SafetyConfig,
        JointLimitsConfig,
        InferenceConfig,
        SimConfig,
        FaultInjectorParams,
    ],
    ids=lambda model: model.__name__,
)
def test_every_node_config_field_has_a_one_line_description_with_its_unit(model) -> None:
    for name, field in model.model_fields.items():
        description = field.description or ""
        assert description.strip(), f"{model.__name__}.{name}: no description"
        assert "\n" not in description and len(description) <= 90, (name, description)
        suffixes = [suffix for suffix in SUFFIX_UNITS if name.endswith(suffix)]
        if suffixes:  # the longest suffix names the unit (_per_s, not _s)
            unit = SUFFIX_UNITS[max(suffixes, key=len)]
            assert unit in description, (name, description, unit)


_finite = st.floats(-10.0, 10.0, allow_nan=False)
_positive = st.floats(1e-9, 1e9, allow_nan=False)  # 1e-05 is a string to YAML: 1.0e-05


@st.composite
def parallel_lists(draw):
    """Valid limits of 1-4 joints, as the seven lists of the old form."""
    n = draw(st.integers(1, 4))
    lows = draw(st.lists(_finite, min_size=n, max_size=n))
    spans = draw(st.lists(st.floats(0.1, 10.0), min_size=n, max_size=n))
    margins = [draw(st.floats(0.0, 0.49 * span)) for span in spans]
    lists = {
        "position_min": lows,
        "position_max": [lo + span for lo, span in zip(lows, spans, strict=True)],
        "soft_margin": margins,
    }
    for name in SAFETY_LIMIT_FIELDS[3:]:
        lists[name] = draw(st.lists(_positive, min_size=n, max_size=n))
    return [f"j{i}" for i in range(n)], lists


@settings(max_examples=50, deadline=None)
@given(parallel_lists(), st.randoms(use_true_random=False))
def test_any_old_file_is_refused_with_a_block_that_loads_to_its_limits(case, rng) -> None:
    """For any valid old-form limits, the block in the refusal gives the same arrays,
    and :meth:`limit_arrays` in any joint order is the same permutation of them."""
    names, lists = case
    old = {"joint_names": names, **lists}
    with pytest.raises(FlatSafetyLimitsError) as info:
        validate_params(SafetyConfig, old, "case")
    block = str(info.value).split("Replace the lists with:\n", 1)[1]
    joints = yaml.safe_load(block)["joints"]
    assert all(isinstance(v, int | float) for joint in joints.values() for v in joint.values())
    config = validate_params(SafetyConfig, {"joint_names": names, "joints": joints}, "case")
    order = list(names)
    rng.shuffle(order)
    arrays = config.limit_arrays(order)
    for name, values in lists.items():
        assert getattr(config.limit_arrays(), name).tolist() == values, name
        expected = [values[names.index(joint)] for joint in order]
        assert getattr(arrays, name).tolist() == expected, name


def test_nested_and_dotted_limits_merge_and_a_limit_given_both_ways_is_refused() -> None:
    params = {
        "joint_names": ["a"],
        "joints": {"a": {"position_min": -1.0, "position_max": 1.0, "soft_margin": 0.0}},
        **{f"joints.a.{name}": 1.0 for name in SAFETY_LIMIT_FIELDS[3:]},
    }
    config = validate_params(SafetyConfig, params, "mixed")
    assert config.limit_arrays().jerk_limit_per_s3.tolist() == [1.0]
    assert "joints.a.velocity_limit_per_s" in params  # the caller's dict is left as it was
    with pytest.raises(ConfigError, match=r"mixed: joints\.a\.position_min: given twice"):
        validate_params(SafetyConfig, {**params, "joints.a.position_min": -2.0}, "mixed")
    with pytest.raises(ConfigError, match=r"joints = \{\}: .*at least 1 item"):
        validate_params(SafetyConfig, {"joints": {}}, "empty")
