"""Every fault scenario ends in its specified response, in virtual time (expert policy)."""

from __future__ import annotations

import json

import pytest

from vla_edge.config.loader import load_node_params
from vla_edge.config.models import InferenceConfig
from vla_edge.config.paths import config_path
from vla_edge.faults.harness import FaultHarness, HarnessSettings
from vla_edge.faults.metrics import score
from vla_edge.faults.plots import plot_trace
from vla_edge.faults.scenario import FaultScenario, load_suite

pytest.importorskip("mujoco")

SCENARIOS = load_suite("default")

PARAMS = list(SCENARIOS)


@pytest.fixture(scope="module")
def harness(configs) -> FaultHarness:
    from vla_edge.sim.env import TabletopEnv
    from vla_edge.sim.expert_runner import ExpertRunner

    env = TabletopEnv(image_height=32, image_width=32)  # every camera of the sim graph
    inference = load_node_params(config_path("inference.yaml"), "inference_node", InferenceConfig)
    yield FaultHarness(
        env, ExpertRunner(env), configs[0], configs[1], HarnessSettings(inference=inference)
    )
    env.close()


@pytest.mark.parametrize("scenario", PARAMS, ids=[s.name for s in SCENARIOS])
def test_scenario_ends_in_its_expected_response(scenario, harness, configs):
    trace = harness.run(scenario)
    result = score(trace, configs[1])
    if result["passed"] is None:
        pytest.skip(result["skipped"])
    assert result["failures"] == [], result["failures"]
    assert result["passed"] is True
    assert result["limit_violations"] == 0
    assert result["peak_velocity_ratio"] <= 1.0 + 1e-6
    if scenario.expected.stop_category.value != "none":
        assert result["detected"]
        assert result["time_to_detect_ms"] <= scenario.expected.max_detect_s * 1e3
    json.dumps(result, default=str)


def test_a_fault_the_system_does_not_survive_is_reported_as_failed(harness, configs):
    """A scenario whose expectation is wrong (a drop that must not stop) fails, naming why."""
    drop = next(s for s in SCENARIOS if s.name == "camera_drop")
    data = drop.model_dump(mode="json")
    data["expected"]["stop_category"] = "none"
    wrong = FaultScenario.model_validate(data)
    result = score(harness.run(wrong), configs[1])
    assert result["passed"] is False
    assert any("worst stop category = cat1" in f for f in result["failures"])


def test_estop_holds_the_arm_still_until_the_reset(harness, configs):
    scenario = next(s for s in SCENARIOS if s.name == "estop_reset")
    trace = harness.run(scenario)
    result = score(trace, configs[1])
    assert result["stayed_halted"] is True
    a = trace.arrays()
    during = (a["t_s"] >= scenario.start_s + 0.1) & (a["t_s"] < scenario.end_s)
    assert (a["safety_severity"][during] >= 2).all()


def test_plot_is_written_with_the_fault_window(harness, configs, tmp_path):
    scenario = next(s for s in SCENARIOS if s.name == "joint_state_loss")
    trace = harness.run(scenario)
    path = plot_trace(trace, score(trace, configs[1]), tmp_path / "x.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 10_000
