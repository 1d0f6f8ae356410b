"""``load_checkpoint`` refuses malformed, non-finite or altered checkpoints by name."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import yaml
from policy_synthetic import tiny_config

from vla_edge.archs.bundled.config import (
    REMOVED_MODEL_FIELDS,
    REMOVED_TRAIN_FIELDS,
    load_train_file,
)
from vla_edge.archs.bundled.model import VlaPolicy, load_checkpoint, save_checkpoint, weights_hash
from vla_edge.core.errors import CheckpointError, ConfigError, RemovedFeatureError
from vla_edge.runners.factory import BUNDLED_CHECKPOINT, BUNDLED_DIR


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("ckpt") / "policy.pt"
    save_checkpoint(path, VlaPolicy(tiny_config()), step=7)
    return path


def _variant(saved: Path, tmp_path: Path, mutate: Callable[[dict], None]) -> Path:
    payload = torch.load(saved, weights_only=True)
    mutate(payload)
    path = tmp_path / "variant.pt"
    torch.save(payload, path)
    return path


def _nan_weight(payload: dict) -> None:
    head = payload["stages"]["action_head"]
    head["action_out.bias"] = torch.full_like(head["action_out.bias"], float("nan"))
    payload["weights_sha256"] = weights_hash(payload["stages"])  # a consistent file


def _edited_weight(payload: dict) -> None:
    head = payload["stages"]["action_head"]
    head["action_out.bias"] = head["action_out.bias"] + 1.0


@pytest.mark.parametrize(
    ("mutate", "words"),
    [
        (lambda p: p["stages"].__setitem__("fusion", [1, 2]), "stage fusion is list"),
        (lambda p: p.__setitem__("stages", ["vision_encoder"]), "field stages is list"),
        (lambda p: p.__setitem__("norm_stats", None), "field norm_stats is NoneType"),
        (lambda p: p.__setitem__("step", None), r"field step = None \(NoneType\)"),
        (lambda p: p.__setitem__("step", 1.5), r"field step = 1.5 \(float\)"),
        (
            lambda p: p["stages"]["fusion"].__setitem__("extra", [0.0]),
            "stage fusion entry 'extra' is list",
        ),
        (lambda p: p.__setitem__("weights_sha256", 5), "field weights_sha256 = 5"),
        (_nan_weight, "stage action_head weight action_out.bias holds NaN or inf"),
        (_edited_weight, "weights sha256 = [0-9a-f]{64} differs from the stored weights_sha256"),
    ],
)
def test_malformed_checkpoint_raises_checkpoint_error(saved, tmp_path, mutate, words) -> None:
    with pytest.raises(CheckpointError, match=words):
        load_checkpoint(_variant(saved, tmp_path, mutate))


def test_checkpoint_without_a_stored_hash_still_loads(saved, tmp_path) -> None:
    path = _variant(saved, tmp_path, lambda p: p.pop("weights_sha256"))
    assert load_checkpoint(path).checkpoint_info["step"] == 7


def test_saved_checkpoint_loads_with_its_hash_rechecked(saved) -> None:
    policy = load_checkpoint(saved)
    assert policy.checkpoint_info["weights_sha256"] == weights_hash(policy.stage_state_dicts())


@pytest.mark.skipif(not BUNDLED_CHECKPOINT.is_file(), reason="no bundled checkpoint")
def test_bundled_checkpoint_passes_the_load_checks() -> None:
    policy = load_checkpoint(BUNDLED_CHECKPOINT)
    assert policy.checkpoint_info["weights_sha256"] == weights_hash(policy.stage_state_dicts())


RECIPE = BUNDLED_DIR / "training_recipe.yaml"


@pytest.mark.skipif(not BUNDLED_CHECKPOINT.is_file(), reason="no bundled checkpoint")
def test_bundled_checkpoint_stores_the_config_of_the_recipes_final_stage() -> None:
    # its stored configs still hold removed fields, at the values that stayed
    policy = load_checkpoint(BUNDLED_CHECKPOINT)
    final = load_train_file(RECIPE, "final")
    assert policy.config == final.model
    assert policy.checkpoint_info["train_config"] == final.train.model_dump(mode="json")


def test_the_bundled_model_keeps_one_training_config_whose_stages_the_card_runs() -> None:
    assert [path.name for path in BUNDLED_DIR.glob("*.yaml")] == [RECIPE.name]
    stages = yaml.safe_load(RECIPE.read_text())["stages"]
    card = (BUNDLED_DIR / "README.md").read_text()
    assert set(re.findall(r"--stage (\w+)", card)) == set(stages)
    for stage in stages:
        cfg = load_train_file(RECIPE, stage)
        assert cfg.model == load_train_file(RECIPE, "final").model, stage


def test_a_recipe_needs_a_stage_and_a_stage_needs_a_recipe(tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"stage = None; expected one of \['final'"):
        load_train_file(RECIPE)
    with pytest.raises(ConfigError, match="stage = 'fine_tune'; expected one of"):
        load_train_file(RECIPE, "fine_tune")
    plain = tmp_path / "plain.yaml"
    plain.write_text("train:\n  steps: 10\n")
    assert load_train_file(plain).train.steps == 10
    with pytest.raises(ConfigError, match="no 'stages:' section"):
        load_train_file(plain, "final")
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  steps: 10\nstages:\n  a:\n    steps: -1\n")
    with pytest.raises(ConfigError, match="steps"):
        load_train_file(bad, "a")


# a value of each removed field that means its feature was used
USED_REMOVED_FEATURES = {
    ("train_config", "state_noise"): 0.2,
    ("train_config", "state_noise_rad"): 0.01,
    ("train_config", "heading_loss_weight"): 0.5,
    ("train_config", "instruction_rewordings"): {"lift the green block": ["raise it"]},
    ("train_config", "reword_probability"): 0.5,
    ("model_config", "vision_first_stride"): 4,
}
REMOVED_FIELDS = {
    **{("model_config", k): v for k, (v, _) in REMOVED_MODEL_FIELDS.items()},
    **{("train_config", k): v for k, (v, _) in REMOVED_TRAIN_FIELDS.items()},
}


def _with_field(section: str, field: str, value: object) -> Callable[[dict], None]:
    def mutate(payload: dict) -> None:
        payload[section] = {**(payload[section] or {"seed": 0}), field: value}

    return mutate


def test_every_removed_field_has_a_used_value_to_test() -> None:
    assert set(USED_REMOVED_FEATURES) == set(REMOVED_FIELDS)


@pytest.mark.parametrize(("section", "field"), sorted(REMOVED_FIELDS))
def test_a_removed_field_at_its_hard_wired_value_is_dropped_on_load(
    saved, tmp_path, section, field
) -> None:
    wired = REMOVED_FIELDS[(section, field)]
    policy = load_checkpoint(_variant(saved, tmp_path, _with_field(section, field, wired)))
    assert field not in policy.config.model_dump()
    assert field not in (policy.checkpoint_info["train_config"] or {})
    assert policy.checkpoint_info["weights_sha256"] == weights_hash(policy.stage_state_dicts())


@pytest.mark.parametrize(("section", "field"), sorted(USED_REMOVED_FEATURES))
def test_a_checkpoint_made_with_a_removed_feature_is_refused_naming_the_field(
    saved, tmp_path, section, field
) -> None:
    used = USED_REMOVED_FEATURES[(section, field)]
    path = _variant(saved, tmp_path, _with_field(section, field, used))
    with pytest.raises(RemovedFeatureError, match=rf"{section}: {field} = .* was removed"):
        load_checkpoint(path)
