"""Run statistics and bad-input accounting used by the nodes."""

import numpy as np
import pytest

from vla_edge.nodes.metrics import BadInputCounter, Histogram, PeriodJitter


def test_histogram_percentiles_match_numpy_within_one_bin():
    rng = np.random.default_rng(1)
    values = rng.exponential(5.0, size=5000)
    hist = Histogram(0.01, 100.0)
    for v in values:
        hist.add(float(v))
    for q in (50, 95, 99):
        assert hist.percentile(q) == pytest.approx(np.percentile(values, q), abs=0.02)
    assert hist.max == pytest.approx(values.max())
    assert hist.count == 5000


def test_histogram_overflow_reports_the_exact_max_and_ignores_nan():
    hist = Histogram(1.0, 10.0)
    hist.add(float("nan"))
    for v in (1.0, 2.0, 500.0):
        hist.add(v)
    assert hist.count == 3
    assert hist.percentile(100) == 500.0
    assert hist.summary("x")["x_max"] == 500.0


def test_period_jitter_is_distance_from_the_nominal_period():
    jitter = PeriodJitter(0.01)
    assert jitter.tick(0.0) is None
    assert jitter.tick(0.010) == pytest.approx(0.0, abs=1e-9)
    assert jitter.tick(0.023) == pytest.approx(3.0)
    assert jitter.tick(0.030) == pytest.approx(3.0)
    assert jitter.jitter_ms.count == 3


def test_bad_input_is_logged_once_per_cause_and_every_occurrence_counted():
    logged = []
    counter = BadInputCounter(logged.append)
    assert counter.record("image_size", "64x48")
    assert not counter.record("image_size", "64x48")
    assert counter.record("missing_joints", "gripper")
    assert len(logged) == 2 and "image_size" in logged[0]
    assert counter.as_values() == {
        "bad_input.image_size": 2,
        "bad_input.missing_joints": 1,
        "bad_input.total": 3,
    }
