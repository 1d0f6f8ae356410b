import numpy as np
import pytest
import torch
from policy_synthetic import tiny_config

from vla_edge.core.errors import InvalidObservationError
from vla_edge.core.types import Observation
from vla_edge.policy.model import VlaPolicy, save_checkpoint
from vla_edge.policy.normalize import NormStats
from vla_edge.runners.base import Runner
from vla_edge.runners.torch_runner import TorchRunner

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def runner() -> TorchRunner:
    torch.manual_seed(0)
    policy = VlaPolicy(tiny_config())
    policy.set_stats(NormStats(np.zeros(7), np.ones(7), np.zeros(7), np.array([0.1] * 6 + [0.02])))
    return TorchRunner(policy, seed=0)


def _obs(**changes: object) -> Observation:
    rng = np.random.default_rng(1)
    fields: dict[str, object] = dict(
        stamp_s=12.5,
        images={
            "agentview": rng.integers(0, 255, (32, 32, 3), dtype=np.uint8),
            "wrist": rng.integers(0, 255, (32, 32, 3), dtype=np.uint8),
        },
        state=np.array([0.1, -0.2, 0.3, 0.0, 0.5, -0.1, 0.02]),
        instruction="put the red block in the bowl",
    )
    fields.update(changes)
    return Observation(**fields)


def test_runner_implements_the_runner_protocol(runner) -> None:
    assert isinstance(runner, Runner)
    assert runner.spec.cameras == ("agentview", "wrist")
    assert runner.spec.chunk_horizon == 10 and runner.spec.action_dim == 7
    assert runner.spec.supports_prefix


def test_chunk_is_stamped_with_the_observation_time_and_timed_per_stage(runner) -> None:
    chunk = runner.infer(_obs())
    assert chunk.t_obs_s == 12.5
    assert chunk.positions.shape == (10, 7)
    assert np.all(np.isfinite(chunk.positions))
    assert chunk.dt_action_s == pytest.approx(0.1)
    assert chunk.joint_names[-1] == "gripper"
    assert set(chunk.timings_ms) == {"language_encoder", "vision_encoder", "fusion", "action_head"}
    assert all(v >= 0.0 for v in chunk.timings_ms.values())


def test_language_embedding_is_computed_once_per_instruction(runner) -> None:
    obs = _obs(instruction="lift the green block")
    first = runner.infer(obs)
    second = runner.infer(obs)
    assert first.timings_ms["language_encoder"] > 0.0
    assert second.timings_ms["language_encoder"] == 0.0


def test_same_explicit_noise_gives_identical_chunks(runner) -> None:
    noise = np.random.default_rng(5).standard_normal((10, 7)).astype(np.float32)
    a = runner.infer(_obs(), noise=noise).positions
    b = runner.infer(_obs(), noise=noise).positions
    c = runner.infer(_obs(), noise=noise + 1.0).positions
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)


def test_runners_with_the_same_seed_draw_the_same_noise() -> None:
    torch.manual_seed(0)
    policy = VlaPolicy(tiny_config())
    a = TorchRunner(policy, seed=7).infer(_obs()).positions
    b = TorchRunner(policy, seed=7).infer(_obs()).positions
    np.testing.assert_array_equal(a, b)


def test_prefix_rows_are_returned_unchanged(runner) -> None:
    prefix = np.tile(np.array([0.2, -0.1, 0.3, 0.1, 0.4, 0.0, 0.04]), (10, 1))
    chunk = runner.infer(_obs(), prefix_actions=prefix, prefix_len=3)
    np.testing.assert_allclose(chunk.positions[:3], prefix[:3], atol=1e-9)


def test_runner_loads_a_checkpoint_file(tmp_path) -> None:
    torch.manual_seed(0)
    policy = VlaPolicy(tiny_config())
    save_checkpoint(tmp_path / "p.pt", policy)
    noise = np.zeros((10, 7), dtype=np.float32)
    a = TorchRunner(tmp_path / "p.pt").infer(_obs(), noise=noise).positions
    b = TorchRunner(policy).infer(_obs(), noise=noise).positions
    np.testing.assert_allclose(a, b, atol=1e-6)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"images": {"agentview": np.zeros((32, 32, 3), np.uint8)}},
            "cameras \\['agentview'\\] \\(1\\)",
        ),
        (
            {
                "images": {
                    "agentview": np.zeros((32, 32, 3), np.uint8),
                    "top": np.zeros((32, 32, 3), np.uint8),
                }
            },
            "expected \\['agentview', 'wrist'\\]",
        ),
        (
            {
                "images": {
                    "agentview": np.zeros((64, 64, 3), np.uint8),
                    "wrist": np.zeros((32, 32, 3), np.uint8),
                }
            },
            "images\\['agentview'\\] shape = \\(64, 64, 3\\), expected \\(32, 32, 3\\)",
        ),
        (
            {
                "images": {
                    "agentview": np.zeros((32, 32, 3), np.float32),
                    "wrist": np.zeros((32, 32, 3), np.uint8),
                }
            },
            "dtype = float32, expected uint8",
        ),
        ({"state": np.array([0.0, np.nan, 0, 0, 0, 0, 0])}, "state = .* non-finite"),
        ({"state": np.zeros(6)}, "state shape = \\(6,\\), expected \\(7,\\)"),
        ({"instruction": ""}, "instruction = '' is empty"),
        ({"instruction": "put the \U0001f916 away"}, "unknown token"),
    ],
)
def test_bad_observation_raises_invalid_observation_error(runner, changes, message) -> None:
    with pytest.raises(InvalidObservationError, match=message):
        runner.infer(_obs(**changes))


def test_wrong_noise_shape_is_refused(runner) -> None:
    with pytest.raises(
        InvalidObservationError, match="noise shape = \\(10, 6\\), expected \\(10, 7\\)"
    ):
        runner.infer(_obs(), noise=np.zeros((10, 6), np.float32))


def test_prefix_longer_than_the_chunk_is_refused(runner) -> None:
    with pytest.raises(
        InvalidObservationError, match="prefix_len = 10, expected 0 <= prefix_len < 10"
    ):
        runner.infer(_obs(), prefix_actions=np.zeros((10, 7)), prefix_len=10)
