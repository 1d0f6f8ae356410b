"""Clock steps are detected between readings."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vla_edge.core.clock import BACKWARD_TOLERANCE_S, ClockStepDetector


def test_regular_readings_are_no_step():
    clock = ClockStepDetector(forward_threshold_s=0.5)
    assert [clock.step_s(t) for t in (10.0, 10.1, 10.1, 10.4, 10.9)] == [0.0] * 5
    assert clock.steps == 0


@given(
    step_s=st.one_of(st.floats(-1e5, -2 * BACKWARD_TOLERANCE_S), st.floats(0.51, 1e5)),
    onset_s=st.floats(0.0, 100.0),
)
def test_any_backward_step_and_any_forward_gap_above_the_threshold_is_a_step(step_s, onset_s):
    clock = ClockStepDetector(forward_threshold_s=0.5)
    clock.step_s(1000.0 + onset_s)
    assert clock.step_s(1000.0 + onset_s + step_s) == pytest.approx(step_s)
    assert clock.steps == 1
    assert clock.step_s(1000.0 + onset_s + step_s + 0.01) == 0.0  # re-anchored


def test_non_finite_reading_is_ignored():
    clock = ClockStepDetector(forward_threshold_s=0.5)
    clock.step_s(5.0)
    assert clock.step_s(float("nan")) == 0.0
    assert clock.step_s(5.1) == 0.0


def test_non_positive_threshold_is_refused():
    with pytest.raises(ValueError, match="forward_threshold_s"):
        ClockStepDetector(0.0)
