"""One camera going stale and clock steps of any size, at any onset, in virtual time.

Property-style: onset, duration, camera set and step size are drawn, so the
responses do not depend on a fault starting at a particular time.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from vla_edge.config.loader import load_node_params
from vla_edge.config.models import ControllerConfig, InferenceConfig, SafetyConfig
from vla_edge.config.paths import config_path
from vla_edge.faults.harness import FaultHarness, HarnessSettings
from vla_edge.faults.metrics import score
from vla_edge.faults.scenario import FaultScenario

# closed-loop episodes drawn by hypothesis: the slow tier
pytestmark = pytest.mark.slow

pytest.importorskip("mujoco")

CAMS = ("agentview", "wrist")
PROPERTY = settings(
    max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture(scope="module")
def harness():
    from vla_edge.sim.env import TabletopEnv
    from vla_edge.sim.expert_runner import ExpertRunner

    env = TabletopEnv(image_height=32, image_width=32, cameras=list(CAMS))
    inference = load_node_params(config_path("inference.yaml"), "inference_node", InferenceConfig)
    yield FaultHarness(
        env,
        ExpertRunner(env),
        load_node_params(config_path("controller.yaml"), "controller_node", ControllerConfig),
        load_node_params(config_path("safety.yaml"), "safety_node", SafetyConfig),
        HarnessSettings(inference=inference),
    )
    env.close()


def _scenario(fault, start_s, duration_s, params, expected, episode_s=None):
    end_s = start_s + duration_s
    return FaultScenario.model_validate(
        {
            "name": "drawn",
            "fault": fault,
            "start_s": start_s,
            "duration_s": duration_s,
            "params": params,
            "episode_s": episode_s or end_s + 3.5,
            "expected": expected,
        }
    )


CAT1_RECOVER = {
    "stop_category": "cat1",
    "max_detect_s": 1.0,
    "max_halt_s": 1.5,
    "stays_halted": True,
    "must_recover": True,
}


@PROPERTY
@given(
    camera=st.sampled_from(CAMS),
    fault=st.sampled_from(["camera_drop", "camera_freeze"]),
    start_s=st.floats(0.6, 2.5),
    duration_s=st.floats(1.6, 2.5),
)
def test_one_camera_dropping_or_freezing_while_the_other_streams_is_a_named_category_1_stop(
    harness, camera, fault, start_s, duration_s
):
    scenario = _scenario(fault, start_s, duration_s, {"cameras": [camera]}, CAT1_RECOVER)
    trace = harness.run(scenario)
    result = score(trace, harness.safety_config)
    assert result["failures"] == [], result["failures"]
    assert result["limit_violations"] == 0
    faults = trace.info["camera_faults"]
    named = "lost" if fault == "camera_drop" else "frozen"
    other = next(c for c in CAMS if c != camera)
    assert faults[f"{camera}.{named}"] == 1
    assert all(n == 0 for key, n in faults.items() if key.startswith(other))


@PROPERTY
@given(
    camera=st.sampled_from(CAMS),
    offset_s=st.one_of(st.floats(-1.5, -0.45), st.floats(0.45, 0.9)),
    start_s=st.floats(0.6, 2.5),
)
def test_camera_stamps_disagreeing_beyond_the_bound_are_a_named_category_1_stop(
    harness, camera, offset_s, start_s
):
    params = {"cameras": [camera], "offset_s": offset_s}
    scenario = _scenario("camera_stamp_skew", start_s, 2.0, params, CAT1_RECOVER)
    trace = harness.run(scenario)
    result = score(trace, harness.safety_config)
    assert result["failures"] == [], result["failures"]
    assert trace.info["camera_faults"][f"{camera}.skewed"] >= 1


@PROPERTY
@given(start_s=st.floats(0.6, 2.0), duration_s=st.floats(1.0, 3.0))
def test_a_camera_the_policy_does_not_read_may_drop_without_a_stop(harness, start_s, duration_s):
    reads_agentview = dataclasses.replace(harness.settings, required_cameras=("agentview",))
    only_agentview = FaultHarness(
        harness.env,
        harness.runner,
        harness.controller_config,
        harness.safety_config,
        reads_agentview,
    )
    expected = {"stop_category": "none", "must_succeed": True}
    scenario = _scenario("camera_drop", start_s, duration_s, {"cameras": ["wrist"]}, expected, 7.0)
    trace = only_agentview.run(scenario)
    result = score(trace, harness.safety_config)
    assert result["failures"] == [], result["failures"]
    assert trace.info["camera_faults"]["wrist.lost"] == 1  # monitored, named, counted


@PROPERTY
@given(
    step_s=st.one_of(st.floats(-3600.0, -0.5), st.floats(0.5, 3600.0)),
    start_s=st.floats(0.6, 3.0),
)
@example(step_s=1.0, start_s=1.0)  # at the threshold: the slot sees 1.0 s plus its own gap
@example(step_s=0.5, start_s=1.0)  # well within it: a late reading
def test_recovery_after_a_clock_step_of_any_size_takes_as_long_as_after_a_small_one(
    harness, step_s, start_s
):
    expected = {
        "stop_category": "cat2" if step_s < 0 else "cat1",
        "also_accept": ["cat2"],
        "max_detect_s": 0.7,
        "must_recover": True,
        "recover_within_s": 3.0,
    }
    scenario = _scenario("clock_jump", start_s, 0.5, {"offset_s": step_s}, expected)
    trace = harness.run(scenario)
    result = score(trace, harness.safety_config)
    assert result["failures"] == [], result["failures"]
    assert result["recovered"] is True
    # within 1 s of the fault window's end whatever the size (the 2 s steps: 0 ms)
    assert result["time_to_recover_ms"] <= 1000.0
    # a forward gap within the threshold is a late reading, not a step (nothing to re-anchor);
    # the gap the slot sees is the step plus its normal one (up to a camera period), so a
    # step within that of the threshold may count either way
    threshold_s = harness.settings.inference.clock_step_threshold_s
    steps = trace.info["inference_clock_steps"]
    if step_s < 0 or step_s > threshold_s:
        assert steps == 1
    elif step_s <= threshold_s - harness.settings.camera_period_s:
        assert steps == 0
    else:
        assert steps in (0, 1)
