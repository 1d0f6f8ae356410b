"""The input and output checks every runner shares (numpy only, no model)."""

from __future__ import annotations

import numpy as np
import pytest

from vla_edge.archs.bundled.normalize import ActionCodec, NormStats
from vla_edge.archs.bundled.tokenizer import InstructionTokenizer
from vla_edge.core.errors import InvalidObservationError, NonFiniteChunkError
from vla_edge.core.types import Observation
from vla_edge.runners.base import RunnerSpec
from vla_edge.runners.preprocess import (
    check_noise,
    check_prefix,
    decode_chunk,
    prefix_inputs,
    state_input,
    validate_observation,
)

H, A = 10, 7
SPEC = RunnerSpec(
    joint_names=tuple(f"j{i}" for i in range(A)),
    chunk_horizon=H,
    dt_action_s=0.1,
    cameras=("agentview", "wrist"),
    image_height=8,
    image_width=8,
)
CODEC = ActionCodec(NormStats.identity(A), [True] * 6 + [False])


def _obs(**changes: object) -> Observation:
    fields: dict[str, object] = dict(
        stamp_s=1.0,
        images={cam: np.zeros((8, 8, 3), np.uint8) for cam in SPEC.cameras},
        state=np.zeros(A),
        instruction="put the red block in the bowl",
    )
    fields.update(changes)
    return Observation(**fields)


@pytest.mark.parametrize(
    ("prefix_len", "words"),
    [
        (1.5, r"prefix_len = 1.5 \(float\), expected an int"),
        (None, r"prefix_len = None \(NoneType\), expected an int"),
        (float("nan"), r"prefix_len = nan \(float\), expected an int"),
        (True, r"prefix_len = True \(bool\), expected an int"),
        ("2", r"prefix_len = '2' \(str\), expected an int"),
    ],
)
def test_non_integer_prefix_len_is_refused_by_name(prefix_len, words) -> None:
    with pytest.raises(InvalidObservationError, match=words):
        check_prefix(np.zeros((H, A)), prefix_len, H, A)


def test_numpy_integer_prefix_len_is_passed_on_as_an_int() -> None:
    prefix = np.arange(H * A, dtype=np.float64).reshape(H, A)
    d, rows = check_prefix(prefix, np.int64(3), H, A)
    assert type(d) is int and d == 3
    np.testing.assert_array_equal(rows, prefix[:3])
    assert check_prefix(None, 0, H, A) == (0, None)


@pytest.mark.parametrize(
    ("prefix", "words"),
    [
        (np.full((H, A), "a"), "prefix_actions dtype = <U1, expected a float dtype"),
        (np.zeros((H, A), np.int64), "prefix_actions dtype = int64, expected a float dtype"),
        (np.zeros((H, A), np.complex128), "prefix_actions dtype = complex128"),
        ([[0.0] * A, [0.0]], "prefix_actions cannot be read as an array"),
    ],
)
def test_prefix_of_a_wrong_dtype_is_refused_by_name(prefix, words) -> None:
    with pytest.raises(InvalidObservationError, match=words):
        check_prefix(prefix, 2, H, A)


@pytest.mark.parametrize(
    ("noise", "words"),
    [
        (np.full((H, A), "a"), "noise dtype = <U1, expected a float dtype"),
        (np.zeros((H, A), np.int64), "noise dtype = int64, expected a float dtype"),
        (np.zeros((H, A), bool), "noise dtype = bool, expected a float dtype"),
        (np.zeros((H, A), np.complex64), "noise dtype = complex64"),
        (np.full((H, A), 1e39), r"noise holds a non-finite value \(in float32"),
    ],
)
def test_noise_of_a_wrong_dtype_or_beyond_float32_is_refused(noise, words) -> None:
    with pytest.raises(InvalidObservationError, match=words):
        check_noise(noise, H, A)


def test_valid_noise_is_cast_to_float32_unchanged() -> None:
    noise = np.random.default_rng(0).standard_normal((H, A))
    got = check_noise(noise, H, A)
    assert got.shape == (1, H, A) and got.dtype == np.float32
    np.testing.assert_array_equal(got[0], noise.astype(np.float32))


@pytest.mark.parametrize(
    ("state", "words"),
    [
        (np.array(["a"] * A), "state dtype = <U1, expected a real number dtype"),
        (np.zeros(A, np.complex128) + 1j, "state dtype = complex128"),
        (np.array([None] * A), "state dtype = object"),
        (np.ones(A, bool), "state dtype = bool"),
        (np.full(A, 1e39), "overflows float32"),
    ],
)
def test_state_of_a_wrong_dtype_or_beyond_float32_is_refused(state, words) -> None:
    with pytest.raises(InvalidObservationError, match=words):
        validate_observation(_obs(state=state), SPEC)


def test_integer_and_float32_states_are_accepted() -> None:
    validate_observation(_obs(state=np.arange(A)), SPEC)
    validate_observation(_obs(state=np.zeros(A, np.float32)), SPEC)


def test_non_string_image_key_is_refused_by_name() -> None:
    images = {**_obs().images, 1: np.zeros((8, 8, 3), np.uint8)}
    with pytest.raises(InvalidObservationError, match=r"images key = 1 \(int\): camera names"):
        validate_observation(_obs(images=images), SPEC)


@pytest.mark.parametrize(
    ("instruction", "words"),
    [
        (5, r"instruction = 5 must be a str, got int"),
        (None, r"instruction = None must be a str, got NoneType"),
        ("\u200b", "is empty"),
        ("\x00\x00", "is empty"),
        ("\ufeff", "is empty"),
    ],
)
def test_instruction_without_a_visible_character_is_refused(instruction, words) -> None:
    with pytest.raises(InvalidObservationError, match=words):
        validate_observation(_obs(instruction=instruction), SPEC)


@pytest.mark.parametrize("instruction", ["\u200b", "\x00\x00", "\ufeff", "\u0301"])
def test_tokenizer_refuses_an_instruction_empty_after_normalisation(instruction) -> None:
    with pytest.raises(InvalidObservationError, match="empty once normalised by the tokenizer"):
        InstructionTokenizer(16).encode(instruction)


def test_state_overflowing_float32_once_normalised_is_refused() -> None:
    tight = ActionCodec(
        NormStats(np.zeros(A), np.full(A, 1e-3), np.zeros(A), np.ones(A)), [True] * A
    )
    with pytest.raises(InvalidObservationError, match="state = .* not finite once normalised"):
        state_input(tight, np.full(A, 1e37))


def test_prefix_overflowing_float32_once_normalised_is_refused() -> None:
    prefix = np.full((H, A), 1e39)
    with pytest.raises(InvalidObservationError, match=r"prefix_actions\[:2\] is not finite"):
        prefix_inputs(CODEC, prefix, 2, np.zeros(A), H)


def test_non_finite_model_output_is_refused_even_where_the_clip_would_hide_it() -> None:
    stats = NormStats(
        np.zeros(A), np.ones(A), np.zeros(A), np.ones(A), np.full(A, -1.0), np.full(A, 1.0)
    )
    codec = ActionCodec(stats, [True] * A)
    out = np.zeros((1, H, A), np.float32)
    out[0, 4, 2] = np.inf  # decode would clip it to action_high
    with pytest.raises(NonFiniteChunkError, match="holds 1 non-finite value"):
        decode_chunk(codec, out, np.zeros(A), None, 0)
    out[0, 4, 2] = np.nan
    with pytest.raises(NonFiniteChunkError, match="non-finite"):
        decode_chunk(codec, out, np.zeros(A), None, 0)


@pytest.mark.parametrize(
    ("stamp", "words"),
    [
        (float("nan"), r"stamp_s = nan: must be finite"),
        (float("inf"), r"stamp_s = inf: must be finite"),
        (None, r"stamp_s = None \(NoneType\): must be a number"),
        ("1.0", r"stamp_s = '1.0' \(str\): must be a number"),
        (True, r"stamp_s = True \(bool\): must be a number"),
    ],
)
def test_a_stamp_that_is_not_a_finite_number_is_refused_by_name(stamp, words) -> None:
    with pytest.raises(InvalidObservationError, match=words):
        validate_observation(_obs(stamp_s=stamp), SPEC)


def test_integer_and_numpy_stamps_are_accepted() -> None:
    for stamp in (3, np.float32(2.5), np.int64(7), 0.0):
        validate_observation(_obs(stamp_s=stamp), SPEC)
