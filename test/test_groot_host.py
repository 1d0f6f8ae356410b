"""GR00T N1.7's host side against the rules of Isaac-GR00T's ``Gr00tN1d7Processor`` (its
``StateActionProcessor`` and ``gr00t/data/utils.py``): the state clipped to [-1, 1] where
``clip_outliers`` says, an empty range read as 0, ``exclude_state``, the model's output
clipped before it is mapped back, the instruction's cleaning and the user turn's end.
Every expected value is worked out by hand in the test."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from vla_edge.archs.groot.checkpoint import check_single_step, n17_normalisation
from vla_edge.archs.groot.processor import (
    NO_BOUND,
    ZERO_SPAN,
    policy_normalisation,
    statistics_normalisation,
)
from vla_edge.archs.groot.prompt import CLOSING, GrootPromptTokenizer, groot_text
from vla_edge.archs.normalisation import codec_from_section
from vla_edge.core.errors import CheckpointError, ManifestMismatchError, NormStatsError

TAG = "libero_sim"


def quantile_section(**state_fields) -> dict:
    """Three state and three action dimensions, each ``q01 = 0``, ``q99 = 2``."""
    return {
        "kind": "quantile",
        "epsilon": 0.0,
        "state": {"q01": [0.0] * 3, "q99": [2.0] * 3, **state_fields},
        "actions": {"q01": [0.0] * 3, "q99": [2.0] * 3},
        "delta_actions": [False] * 3,
    }


def upstream_section(*, clip: bool = True, exclude_state: bool = False) -> dict:
    """What ``checkpoint.n17_normalisation`` reads: an ``arm`` group by min / max (its second
    dimension with an empty range) and a ``grip`` group by mean / std, in both parts."""
    arm_state = {"key": "arm", "kind": "min_max", "dim": 2, "min": [0.0, 1.0], "max": [2.0, 1.0]}
    arm_action = {"key": "arm", "kind": "min_max", "dim": 2, "min": [0.0, -1.0], "max": [2.0, 1.0]}
    grip = {"key": "grip", "kind": "mean_std", "dim": 1, "mean": [0.5], "std": [0.25]}
    return {
        "kind": "per_group",
        "clip": clip,
        "embodiment": TAG,
        "exclude_state": exclude_state,
        "relative_action_keys": [],
        "state": {"kind": "per_group", "groups": [arm_state, grip]},
        "actions": {"kind": "per_group", "groups": [arm_action, grip]},
    }


# -- the policy schema's state clip -------------------------------------------------------


def test_state_clip_clips_the_marked_dimensions_of_the_normalised_state() -> None:
    codec = codec_from_section(
        quantile_section(clip=[True, True, False]), state_dim=3, action_dim=3
    )
    # (x - 0) / 2 * 2 - 1: 3 -> 2 -> clipped to 1; -1 -> -2 -> -1; the third is not clipped
    got = codec.normalize_state(np.array([3.0, -1.0, 3.0]))
    np.testing.assert_array_equal(got, np.array([1.0, -1.0, 2.0], dtype=np.float32))


def test_a_section_without_state_clip_normalises_as_before() -> None:
    codec = codec_from_section(quantile_section(), state_dim=3, action_dim=3)
    got = codec.normalize_state(np.array([3.0, -1.0, 3.0]))
    np.testing.assert_array_equal(got, np.array([2.0, -2.0, 2.0], dtype=np.float32))


@pytest.mark.parametrize("clip", [True, [True, False], [1, 0, 1]])
def test_a_state_clip_that_is_not_one_boolean_per_dimension_is_refused(clip) -> None:
    with pytest.raises(ManifestMismatchError, match=r"normalisation\.state\.clip = .*3 booleans"):
        codec_from_section(quantile_section(clip=clip), state_dim=3, action_dim=3)


# -- GR00T's import writes upstream's rules -----------------------------------------------


def test_clip_outliers_marks_the_min_max_dimensions_and_an_empty_range_reads_zero() -> None:
    section = policy_normalisation(upstream_section(clip=True), "statistics.json")
    state = section["state"]
    assert state["q01"] == [0.0, -ZERO_SPAN, 0.25]  # grip: mean - std
    assert state["q99"] == [2.0, ZERO_SPAN, 0.75]  # grip: mean + std
    assert state["clip"] == [True, True, False]  # mean / std groups are never clipped
    codec = codec_from_section(section, state_dim=None, action_dim=None)
    # arm 0: 2 * 3 / 2 - 1 = 2 -> 1; arm 1: empty range -> 0; grip: (1.5 - 0.5) / 0.25 = 4
    got = codec.normalize_state(np.array([3.0, 5.0, 1.5]))
    np.testing.assert_array_equal(got, np.array([1.0, 0.0, 4.0], dtype=np.float32))


def test_without_clip_outliers_the_state_is_not_clipped() -> None:
    section = policy_normalisation(upstream_section(clip=False), "statistics.json")
    assert section["state"]["clip"] == [False, False, False]
    codec = codec_from_section(section, state_dim=None, action_dim=None)
    got = codec.normalize_state(np.array([3.0, 5.0, 1.5]))
    np.testing.assert_array_equal(got, np.array([2.0, 0.0, 4.0], dtype=np.float32))


@pytest.mark.parametrize("reading", [0.0, 1.0, -123.456, 1e6, 2.0**46])
def test_an_empty_range_reads_exactly_zero_for_any_physical_reading(reading) -> None:
    section = policy_normalisation(upstream_section(), "statistics.json")
    codec = codec_from_section(section, state_dim=None, action_dim=None)
    assert codec.normalize_state(np.array([1.0, reading, 0.5]))[1] == 0.0


def test_exclude_state_feeds_a_zero_state() -> None:
    section = policy_normalisation(upstream_section(exclude_state=True), "statistics.json")
    codec = codec_from_section(section, state_dim=None, action_dim=None)
    got = codec.normalize_state(np.array([3.0, 5.0, 1.5]))
    np.testing.assert_array_equal(got, np.zeros(3, dtype=np.float32))


def test_the_models_output_is_clipped_to_the_range_before_it_is_mapped_back() -> None:
    section = policy_normalisation(upstream_section(), "statistics.json")
    assert section["actions"]["low"] == [0.0, -1.0, -NO_BOUND]
    assert section["actions"]["high"] == [2.0, 1.0, NO_BOUND]
    codec = codec_from_section(section, state_dim=None, action_dim=None)
    # arm 0: 1.5 -> 1 -> (1 + 1) / 2 * 2 + 0 = 2; arm 1: (-0.5 + 1) / 2 * 2 - 1 = -0.5;
    # grip (mean / std, unclipped): 2 * 0.25 + 0.5 = 1
    got = codec.decode_actions(np.array([[[1.5, -0.5, 2.0]]]), np.zeros((1, 3)))
    np.testing.assert_allclose(got, [[[2.0, -0.5, 1.0]]], rtol=0, atol=1e-12)
    got = codec.decode_actions(np.array([[[-3.0, 4.0, -8.0]]]), np.zeros((1, 3)))
    np.testing.assert_allclose(got, [[[0.0, 1.0, -1.5]]], rtol=0, atol=1e-12)


def test_the_manifest_from_statistics_keeps_the_clip_and_frees_the_delta_dimensions() -> None:
    section = statistics_normalisation(None, upstream_section(), 2, [False, True])
    assert section["state"] == {
        "q01": [0.0, -ZERO_SPAN],
        "q99": [2.0, ZERO_SPAN],
        "clip": [True, True],
    }
    assert section["actions"]["low"] == [0.0, -NO_BOUND]  # dimension 1 adds the state
    assert section["actions"]["high"] == [2.0, NO_BOUND]
    codec = codec_from_section(section, state_dim=2, action_dim=2)
    np.testing.assert_array_equal(codec.normalize_state(np.array([3.0, 5.0])), [1.0, 0.0])
    # dimension 1: (0.5 + 1) / 2 * 2 - 1 = 0.5, plus the state's 10
    got = codec.decode_actions(np.array([[[1.5, 0.5]]]), np.array([[7.0, 10.0]]))
    np.testing.assert_allclose(got, [[[2.0, 10.5]]], rtol=0, atol=1e-12)


def write_statistics(root: Path, statistics: dict) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "statistics.json").write_text(json.dumps({TAG: statistics}))
    return root


def modality(state: dict | None = None) -> dict:
    return {
        TAG: {
            "state": {"modality_keys": ["arm"], **(state or {})},
            "action": {"modality_keys": ["arm"]},
        }
    }


def group_stats(**override) -> dict:
    base = {"min": [0.0], "max": [2.0], "mean": [1.0], "std": [0.5], "q01": [0.1], "q99": [1.9]}
    return {"arm": base | override}


def test_exclude_state_is_read_from_the_processor_and_from_the_state_config(tmp_path) -> None:
    root = write_statistics(tmp_path, {"state": group_stats(), "action": group_stats()})
    plain = {"modality_configs": modality()}
    assert n17_normalisation(root, TAG, plain)["exclude_state"] is False
    on_processor = {"modality_configs": modality(), "exclude_state": True}
    assert n17_normalisation(root, TAG, on_processor)["exclude_state"] is True
    on_state = {"modality_configs": modality({"exclude_state": True})}
    assert n17_normalisation(root, TAG, on_state)["exclude_state"] is True


def test_sin_cos_state_groups_are_refused_by_name(tmp_path) -> None:
    root = write_statistics(tmp_path, {"state": group_stats(), "action": group_stats()})
    processor = {
        "modality_configs": modality({"sin_cos_embedding_keys": ["arm"]}),
        "apply_sincos_state_encoding": True,
    }
    with pytest.raises(NormStatsError, match=r"apply_sincos_state_encoding.*\['arm'\]"):
        n17_normalisation(root, TAG, processor)


def test_per_step_statistics_are_refused_by_name(tmp_path) -> None:
    per_step = group_stats(min=[[0.0], [0.1]], max=[[2.0], [2.1]])
    root = write_statistics(tmp_path, {"state": group_stats(), "action": per_step})
    with pytest.raises(NormStatsError, match=r"action\.arm\.min holds one list per step"):
        n17_normalisation(root, TAG, {"modality_configs": modality()})


@pytest.mark.parametrize("modality", ["video", "state"])
def test_a_video_or_state_of_several_steps_is_refused_by_name(modality) -> None:
    one = {"delta_indices": [0], "modality_keys": ["arm"]}
    configs = {TAG: {"video": dict(one), "state": dict(one)}}
    check_single_step({"modality_configs": configs}, TAG, "processor_config.json")
    configs[TAG][modality]["delta_indices"] = [-1, 0]
    with pytest.raises(CheckpointError, match=rf"{modality}\.delta_indices = \[-1, 0\]"):
        check_single_step({"modality_configs": configs}, TAG, "processor_config.json")


# -- the instruction and the end of the user turn ----------------------------------------


@pytest.mark.parametrize(
    ("instruction", "cleaned"),
    [
        ("Pick up the black bowl, please!", "pick up the black bowl please"),
        ("put_it on plate #2 (now).", "put_it on plate 2 now"),  # \w keeps "_" and digits
        ("Put the mug\u2019s lid \u2014 on \u201ctop\u201d\u2026", "put the mugs lid  on top"),
        ("Caf\u00e9 AU LAIT", "caf\u00e9 au lait"),  # letters beyond ASCII are words
        ("  open the drawer.\n", "  open the drawer\n"),  # whitespace kept, not stripped
    ],
)
def test_the_instruction_is_cleaned_as_upstream_formalises_language(instruction, cleaned) -> None:
    assert groot_text(instruction) == cleaned


def write_tokenizer(root: Path) -> Path:
    """A byte-level word tokenizer: ``pick`` 0, ``Ġup`` 1, ``Ċ`` (a newline) 2, ``<unk>`` 3,
    then the special tokens ``<|endoftext|>`` 4 (the pad), ``<|im_start|>`` 5,
    ``<|im_end|>`` 6."""
    vocab = {"pick": 0, "Ġup": 1, "Ċ": 2, "<unk>": 3}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    root.mkdir(parents=True, exist_ok=True)
    tok.save(str(root / "tokenizer.json"))
    (root / "tokenizer_config.json").write_text(json.dumps({"pad_token": "<|endoftext|>"}))
    return root


def test_the_prompt_ends_the_user_turn_without_opening_the_assistants(tmp_path) -> None:
    assert CLOSING == "<|im_end|>\n"
    encoder = GrootPromptTokenizer(write_tokenizer(tmp_path / "tok"), 6)
    assert encoder.closing_ids == [6, 2]
    ids, mask = encoder.encode("Pick up!")
    assert ids.tolist() == [[0, 1, 6, 2, 4, 4]]
    assert mask.tolist() == [[True, True, True, True, False, False]]


@pytest.mark.parametrize(
    ("state_extra", "action_extra", "match"),
    [
        ({"clip": [True]}, {}, r"normalisation.state.clip = \[True\]: expected 2 booleans"),
        ({"clip": [1, 0]}, {}, r"normalisation.state.clip"),
        ({}, {"low": [0.0, 0.0]}, r"normalisation.actions: low without high"),
        ({}, {"low": [0.0], "high": [1.0]}, r"low has 1 values and high 1: expected 2"),
        ({}, {"low": [0.0, 2.0], "high": [1.0, 1.0]}, r"actions\[1\]: low = 2.0 > high = 1.0"),
    ],
)
def test_a_policy_dirs_malformed_clip_or_bounds_are_refused_by_name(
    state_extra, action_extra, match
) -> None:
    """``policy.yaml``'s section: ``state.clip`` one boolean per statistic, ``actions.low`` /
    ``high`` finite, one per statistic, ``low <= high``."""
    from vla_edge.archs.policy_stats import check_normalisation
    from vla_edge.core.errors import NormStatsError

    section = {
        "kind": "quantile",
        "epsilon": 0.0,
        "state": {"kind": "quantile", "q01": [-1.0, 0.0], "q99": [1.0, 2.0], **state_extra},
        "actions": {"kind": "quantile", "q01": [-1.0, 0.0], "q99": [1.0, 2.0], **action_extra},
        "delta_actions": [False, False],
    }
    with pytest.raises(NormStatsError, match=match):
        check_normalisation(section, "policy.yaml")
