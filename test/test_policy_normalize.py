import numpy as np
import pytest

from vla_edge.archs.bundled.normalize import ActionCodec, NormStats, compute_stats
from vla_edge.core.errors import ConfigError

DELTA = [True] * 6 + [False]


def _data(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    states = rng.normal(size=(50, 7))
    chunks = states[:, None, :] + rng.normal(scale=0.1, size=(50, 10, 7))
    chunks[..., 6] = rng.choice([0.0, 0.04], size=(50, 10))
    return states, chunks


def test_encoded_actions_decode_back_to_the_absolute_chunk() -> None:
    states, chunks = _data()
    codec = ActionCodec(compute_stats(states, chunks, DELTA), DELTA)
    encoded = codec.encode_actions(chunks, states)
    inside = np.clip(chunks, codec.stats.action_low, codec.stats.action_high)
    np.testing.assert_allclose(codec.decode_actions(encoded, states), inside, atol=1e-5)
    np.testing.assert_allclose(
        codec.decode_actions(encoded, states)[..., :6], chunks[..., :6], atol=1e-5
    )


def test_encoded_training_actions_are_standardised() -> None:
    states, chunks = _data()
    codec = ActionCodec(compute_stats(states, chunks, DELTA), DELTA)
    encoded = codec.encode_actions(chunks, states).reshape(-1, 7)
    np.testing.assert_allclose(encoded.mean(axis=0), 0.0, atol=1e-4)
    np.testing.assert_allclose(encoded.std(axis=0), 1.0, atol=1e-3)


def test_delta_dimensions_are_relative_to_the_state_and_gripper_is_absolute() -> None:
    codec = ActionCodec(NormStats.identity(7), DELTA)
    state = np.arange(7.0)
    chunk = np.tile(state + 1.0, (10, 1))
    rel = codec.encode_actions(chunk, state)
    np.testing.assert_allclose(rel[:, :6], 1.0)
    np.testing.assert_allclose(rel[:, 6], 7.0)


def test_constant_dimension_gets_the_minimum_std_not_zero() -> None:
    states, chunks = _data()
    states[:, 3] = 0.5
    stats = compute_stats(states, chunks, DELTA)
    assert stats.state_std[3] > 0.0


def test_stats_survive_the_json_round_trip() -> None:
    states, chunks = _data()
    stats = compute_stats(states, chunks, DELTA)
    again = NormStats.from_dict(stats.to_dict(), 7)
    np.testing.assert_array_equal(again.action_std, stats.action_std)


def test_stats_with_wrong_length_are_refused_naming_the_field() -> None:
    bad = NormStats.identity(7).to_dict()
    bad["action_std"] = [1.0] * 6
    with pytest.raises(ConfigError, match=r"action_std has shape \(6,\), expected \(7,\)"):
        NormStats.from_dict(bad, 7)


def test_stats_with_non_positive_std_are_refused() -> None:
    bad = NormStats.identity(7).to_dict()
    bad["state_std"][2] = 0.0
    with pytest.raises(ConfigError, match="state_std .* must be > 0"):
        NormStats.from_dict(bad, 7)


def test_decoded_actions_are_clipped_to_the_demonstrated_range() -> None:
    states, chunks = _data()
    stats = compute_stats(states, chunks, DELTA)
    assert stats.action_low[6] == pytest.approx(0.0032)
    assert stats.action_high[6] == pytest.approx(0.0368)
    width = chunks[..., 0].max() - chunks[..., 0].min()
    assert stats.action_high[0] == pytest.approx(chunks[..., 0].max() + 0.05 * width)
    codec = ActionCodec(stats, DELTA)
    wild = np.full((10, 7), 50.0, dtype=np.float32)
    decoded = codec.decode_actions(wild, states[0])
    np.testing.assert_array_equal(decoded[:, 6], stats.action_high[6])
    np.testing.assert_array_equal(decoded[:, 0], stats.action_high[0])


def test_stats_with_inverted_clip_range_are_refused() -> None:
    states, chunks = _data()
    bad = compute_stats(states, chunks, DELTA).to_dict()
    bad["action_low"][1], bad["action_high"][1] = 1.0, -1.0
    with pytest.raises(ConfigError, match="action_low = .* must be <= action_high"):
        NormStats.from_dict(bad, 7)
