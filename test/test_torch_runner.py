import numpy as np
import pytest
import torch
from policy_synthetic import tiny_config

from vla_edge.archs.bundled.model import VlaPolicy, save_checkpoint
from vla_edge.archs.bundled.normalize import NormStats
from vla_edge.core.errors import ConfigError, InvalidObservationError, NonFiniteChunkError
from vla_edge.core.types import Observation
from vla_edge.runners import base
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


def test_language_cache_keeps_at_most_its_bound_dropping_the_oldest(runner, monkeypatch) -> None:
    monkeypatch.setattr(base, "MAX_CACHED_INSTRUCTIONS", 2)
    runner.close()
    for text in ("pick it up", "put it down", "lift it"):
        runner.language_embedding(text)
    assert list(runner._lang_cache) == ["put it down", "lift it"]


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


def test_state_beyond_float32_gives_a_named_error_not_a_nan_chunk(runner) -> None:
    with pytest.raises(InvalidObservationError, match="state = .* overflows float32"):
        runner.infer(_obs(state=np.full(7, 1e39)))


def test_prefix_beyond_float32_gives_a_named_error_not_a_nan_chunk(runner) -> None:
    with pytest.raises(InvalidObservationError, match=r"prefix_actions\[:2\] is not finite"):
        runner.infer(_obs(), prefix_actions=np.full((10, 7), 1e39), prefix_len=2)


@pytest.mark.parametrize("prefix_len", [1.5, None, float("nan"), True])
def test_non_integer_prefix_len_is_refused(runner, prefix_len) -> None:
    with pytest.raises(InvalidObservationError, match="expected an int"):
        runner.infer(_obs(), prefix_actions=np.zeros((10, 7)), prefix_len=prefix_len)


def test_numpy_integer_prefix_len_gives_the_same_chunk_as_an_int(runner) -> None:
    noise = np.zeros((10, 7), np.float32)
    prefix = np.full((10, 7), 0.1)
    a = runner.infer(_obs(), noise=noise, prefix_actions=prefix, prefix_len=np.int64(2))
    b = runner.infer(_obs(), noise=noise, prefix_actions=prefix, prefix_len=2)
    np.testing.assert_array_equal(a.positions, b.positions)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"noise": np.full((10, 7), "a")}, "noise dtype = <U1"),
        ({"noise": np.ones((10, 7), np.int64)}, "noise dtype = int64"),
        ({"noise": np.ones((10, 7), bool)}, "noise dtype = bool"),
        ({"prefix_actions": np.full((10, 7), "a"), "prefix_len": 2}, "prefix_actions dtype"),
    ],
)
def test_noise_and_prefix_of_a_wrong_dtype_are_refused(runner, kwargs, words) -> None:
    with pytest.raises(InvalidObservationError, match=words):
        runner.infer(_obs(), **kwargs)


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"state": np.array(["a"] * 7)}, "state dtype = <U1"),
        ({"state": np.zeros(7, np.complex128) + 1j}, "state dtype = complex128"),
        ({"instruction": "\u200b"}, "is empty"),
        ({"instruction": "\x00\x00"}, "is empty"),
        ({"instruction": "\ufeff"}, "is empty"),
        ({"instruction": "\u0301"}, "is empty"),
    ],
)
def test_state_dtype_and_invisible_instructions_are_refused(runner, changes, words) -> None:
    with pytest.raises(InvalidObservationError, match=words):
        runner.infer(_obs(**changes))


def test_non_string_image_key_is_refused(runner) -> None:
    images = {**_obs().images, 1: np.zeros((32, 32, 3), np.uint8)}
    with pytest.raises(InvalidObservationError, match="images key = 1"):
        runner.infer(_obs(images=images))


def test_policy_producing_nan_raises_non_finite_chunk_error() -> None:
    policy = VlaPolicy(tiny_config())
    with torch.no_grad():
        policy.action_head.action_out.bias.fill_(float("nan"))
    with pytest.raises(NonFiniteChunkError, match="non-finite"):
        TorchRunner(policy).infer(_obs())


@pytest.mark.parametrize("flow_steps", [0, -1, 101, 2.5, True, "4"])
def test_flow_steps_outside_one_to_max_is_refused_at_construction(flow_steps) -> None:
    with pytest.raises(ConfigError, match=f"flow_steps = {flow_steps!r}"):
        TorchRunner(VlaPolicy(tiny_config()), flow_steps=flow_steps)


def test_runners_sharing_a_policy_keep_their_own_flow_steps() -> None:
    torch.manual_seed(0)
    policy = VlaPolicy(tiny_config())  # K = 4
    noise = np.random.default_rng(2).standard_normal((10, 7)).astype(np.float32)
    alone = TorchRunner(policy, flow_steps=8).infer(_obs(), noise=noise).positions
    eight = TorchRunner(policy, flow_steps=8)
    two = TorchRunner(policy, flow_steps=2)
    default = TorchRunner(policy)
    assert (eight.flow_steps, two.flow_steps, default.flow_steps) == (8, 2, 4)
    assert policy.action_head.flow_steps == 4
    np.testing.assert_array_equal(eight.infer(_obs(), noise=noise).positions, alone)
    assert not np.allclose(two.infer(_obs(), noise=noise).positions, alone)
    same_k = TorchRunner(policy, flow_steps=4).infer(_obs(), noise=noise).positions
    np.testing.assert_array_equal(default.infer(_obs(), noise=noise).positions, same_k)


def test_flow_steps_of_a_runner_loaded_from_a_file_is_its_policys(tmp_path) -> None:
    save_checkpoint(tmp_path / "p.pt", VlaPolicy(tiny_config()))
    runner = TorchRunner(tmp_path / "p.pt", flow_steps=3)
    assert runner.flow_steps == 3 and runner.policy.action_head.flow_steps == 3
