"""Shipped configs load; a bad field fails at load naming file, field, value and bound."""

from pathlib import Path

import pytest

from vla_edge.config import (
    ControllerConfig,
    InferenceConfig,
    SafetyConfig,
    SimConfig,
    load_node_params,
    load_yaml_file,
    model_to_ros_params,
)
from vla_edge.config.models import FaultInjectorParams
from vla_edge.core import ConfigError
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
    assert len(config.jerk_limit_per_s3) == len(config.joint_names) == 7
    controller = load_node_params(
        CONFIG_DIR / "controller.yaml", "controller_node", ControllerConfig
    )
    assert controller.joint_names == config.joint_names


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


def safety_text(**overrides: str) -> str:
    fields = {
        "joint_names": "[a, b]",
        "position_min": "[-1.0, -1.0]",
        "position_max": "[1.0, 1.0]",
        "soft_margin": "[0.1, 0.1]",
        "velocity_limit_per_s": "[1.0, 1.0]",
        "acceleration_limit_per_s2": "[5.0, 5.0]",
        "deceleration_limit_per_s2": "[5.0, 5.0]",
        "jerk_limit_per_s3": "[100.0, 100.0]",
    }
    fields.update(overrides)
    body = "".join(f"    {k}: {v}\n" for k, v in fields.items())
    return "safety_node:\n  ros__parameters:\n" + body


def test_tiny_safety_config_loads(tmp_path: Path) -> None:
    config = load_node_params(write(tmp_path, safety_text()), "safety_node", SafetyConfig)
    assert config.joint_names == ["a", "b"]


def test_per_joint_list_of_wrong_length_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, safety_text(velocity_limit_per_s="[1.0]"))
    with pytest.raises(ConfigError, match="velocity_limit_per_s has 1 entries, expected 2"):
        load_node_params(path, "safety_node", SafetyConfig)


def test_soft_margins_wider_than_the_range_are_refused(tmp_path: Path) -> None:
    path = write(tmp_path, safety_text(soft_margin="[0.1, 1.5]"))
    with pytest.raises(
        ConfigError, match=r"joint b: position_max - position_min = 2.0 must exceed"
    ):
        load_node_params(path, "safety_node", SafetyConfig)


def test_non_positive_jerk_limit_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, safety_text(jerk_limit_per_s3="[100.0, 0.0]"))
    with pytest.raises(ConfigError, match="jerk_limit_per_s3 must be positive, got 0.0"):
        load_node_params(path, "safety_node", SafetyConfig)


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
    [ControllerConfig, SafetyConfig, InferenceConfig, SimConfig, FaultInjectorParams],
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
