"""Perturbed demonstrations: the arm is pushed off the expert's path, the labels are not."""

import h5py
import numpy as np
import pytest

from vla_edge.cli import main
from vla_edge.core.errors import ConfigError
from vla_edge.sim.collect import collect, rollout_expert
from vla_edge.sim.env import TabletopEnv
from vla_edge.sim.expert_runner import ExpertRunner
from vla_edge.sim.perturb import DEFAULT_STD_RAD, ExecutionPerturbation, segment_gate


@pytest.fixture(scope="module")
def env():
    e = TabletopEnv(image_height=16, image_width=16, split="train")
    yield e
    e.close()


def test_offset_has_the_configured_stationary_std():
    p = ExecutionPerturbation(1.0, np.random.default_rng(0))
    offsets = np.array([p.step(1.0) for _ in range(20_000)])
    np.testing.assert_allclose(offsets.std(axis=0), DEFAULT_STD_RAD, rtol=0.1)
    # smooth: consecutive offsets are strongly correlated (tau 0.5 s, steps of 0.1 s)
    a, b = offsets[:-1, 0], offsets[1:, 0]
    assert np.corrcoef(a, b)[0, 1] > 0.75


def test_gate_is_zero_where_precision_is_the_task():
    assert segment_gate("close", 0.5) == 0.0
    assert segment_gate("push", 0.1) == 0.0
    assert segment_gate("descend", 1.0) == 0.0
    assert segment_gate("descend", 0.0) == 1.0
    assert segment_gate("approach", 0.3) == 1.0
    assert segment_gate("lift", 0.25) == pytest.approx(0.25)
    p = ExecutionPerturbation(1.0, np.random.default_rng(1))
    p.step(1.0)
    assert np.all(p.step(0.0) == 0.0)


@pytest.mark.parametrize("scale", [-0.1, 4.5, float("nan")])
def test_bad_scale_is_a_named_error(scale):
    with pytest.raises(ConfigError, match="perturbation scale"):
        ExecutionPerturbation(scale, np.random.default_rng(0))


def test_unknown_segment_label_is_a_named_error():
    with pytest.raises(ConfigError, match="segment label 'juggle'"):
        segment_gate("juggle", 0.5)


def test_perturbed_episode_leaves_the_path_and_records_the_expert_targets(env):
    runner = ExpertRunner(env)
    clean = rollout_expert(env, runner, "lift_green_block", 7, render=False)
    noisy = rollout_expert(
        env,
        runner,
        "lift_green_block",
        7,
        render=False,
        perturbation=ExecutionPerturbation(1.0, np.random.default_rng(3)),
    )
    assert clean.success and noisy.success
    assert clean.perturb_scale == 0.0 and noisy.perturb_scale == 1.0
    # the measured arm is further from the recorded targets than on the clean run ...
    lag_clean = np.abs(np.array(clean.states)[1:, :6] - np.array(clean.actions)[:-1, :6])
    lag_noisy = np.abs(np.array(noisy.states)[1:, :6] - np.array(noisy.actions)[:-1, :6])
    assert lag_noisy.max() > 2.0 * lag_clean.max()
    # ... while the recorded targets are the expert's: the same plan at the start
    first = np.array(noisy.actions)[0]
    np.testing.assert_allclose(first[:6], np.array(clean.actions)[0, :6], atol=1e-6)


def test_collect_records_the_perturbation_scale(tmp_path):
    stats = collect(
        tmp_path, ["lift_green_block"], 1, image_size=16, seed=4, progress=False, perturb_scale=0.5
    )
    assert stats["lift_green_block"]["successes"] == 1
    with h5py.File(tmp_path / "lift_green_block.hdf5", "r") as f:
        assert f["data/demo_0"].attrs["perturb_scale"] == 0.5


def test_collect_refuses_perturbation_of_recovery_episodes(tmp_path):
    with pytest.raises(SystemExit, match="perturbation applies to expert demonstrations only"):
        main(
            [
                "collect", "--episodes-per-task", "1", "--out", str(tmp_path / "r"),
                "--tasks", "lift_green_block", "--recover-with", "bundled", "--perturb", "1",
                "--no-progress",
            ]
        )  # fmt: skip
