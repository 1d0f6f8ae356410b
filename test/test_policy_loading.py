"""A policy directory read for export (:mod:`vla_edge.archs.policy_loading`), on a toy.

The policy directory is a stand-in (the attributes the checks read) so each check is seen
alone; the toy model is three linear layers, one per stage.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from pydantic import BaseModel, Field, ValidationError
from torch import nn

from vla_edge.archs import policy_loading
from vla_edge.archs.policy_loading import (
    PolicyExpectations,
    checked_policy_dir,
    load_policy_model_with,
)
from vla_edge.archs.stage_io import StageSet
from vla_edge.core.errors import ConfigError


class ToyConfig(BaseModel):
    width: int = 3
    flow_steps: int = Field(10, gt=0)


class ToyModel(nn.Module):
    def __init__(self, config: ToyConfig) -> None:
        super().__init__()
        self.config = config
        self.vision = nn.Linear(config.width, config.width)
        self.fuse = nn.Linear(config.width, config.width)
        self.head = nn.Linear(config.width, config.width)


@dataclass
class ToyStages(StageSet):
    vision_encoder: nn.Module
    fusion: nn.Module
    action_head: nn.Module


def toy_stages(model: ToyModel) -> ToyStages:
    return ToyStages(model.vision, model.fuse, model.head)


TOY = PolicyExpectations(
    title="Toy",
    architectures=("toy", "toy2"),
    config_class=ToyConfig,
    prompt_format=lambda config: f"toy{config.width}",
    resize=("pad", "the toy's own"),
    needs_tokenizer_dir=True,
)


def toy_policy(**changes: Any) -> SimpleNamespace:
    """A stand-in policy directory that meets :data:`TOY`, with ``changes``."""
    fields = {
        "architecture": "toy",
        "config": ToyConfig(),
        "prompt": {"format": "toy3"},
        "images": {"resize": "pad"},
        "tokenizer": {"file": "tokenizer"},
        "tokenizer_dir": "tokenizer",
    }
    return SimpleNamespace(**{**fields, **changes})


@pytest.fixture
def policy_dir(monkeypatch: pytest.MonkeyPatch):
    """Makes the directory read the given stand-in; returns the paths read."""
    read: list[Any] = []

    def serve(policy: SimpleNamespace) -> list[Any]:
        def load(path: Any, verify_sha256: bool = False) -> SimpleNamespace:
            read.append(path)
            return policy

        monkeypatch.setattr(policy_loading, "load_policy_dir", load)
        return read

    return serve


class WeightLoader:
    """Records each call (the model is filled with ones, or the part ``only``)."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, nn.Module, nn.Module | None]] = []

    def __call__(self, policy: Any, model: nn.Module, only: nn.Module | None = None) -> None:
        self.calls.append((policy, model, only))
        with torch.no_grad():
            for p in (model if only is None else only).parameters():
                p.fill_(1.0)


def test_a_policy_that_meets_the_expectations_gives_its_config(policy_dir) -> None:
    policy = toy_policy()
    read = policy_dir(policy)
    got, config = checked_policy_dir("p", TOY)
    assert got is policy and config is policy.config
    assert read == ["p"]


def test_flow_steps_rebuild_the_config_through_its_class(policy_dir) -> None:
    policy_dir(toy_policy(config=ToyConfig(width=3, flow_steps=10)))
    _, config = checked_policy_dir("p", TOY, flow_steps=4)
    assert isinstance(config, ToyConfig)
    assert (config.flow_steps, config.width) == (4, 3)
    with pytest.raises(ValidationError, match="flow_steps"):
        checked_policy_dir("p", TOY, flow_steps=0)


def test_another_architecture_is_refused_naming_the_exporter_and_what_it_exports(
    policy_dir,
) -> None:
    policy_dir(toy_policy(architecture="pi0"))
    with pytest.raises(ConfigError) as info:
        checked_policy_dir("p", TOY)
    assert type(info.value) is ConfigError
    assert str(info.value).startswith(
        "p: architecture = 'pi0': the Toy exporter exports 'toy' and 'toy2' policy directories"
    )


def test_the_prompt_format_is_the_one_the_config_writes(policy_dir) -> None:
    policy_dir(toy_policy(config=ToyConfig(width=5)))
    with pytest.raises(ConfigError, match=r"prompt\.format = 'toy3', expected 'toy5'"):
        checked_policy_dir("p", TOY)
    fixed = PolicyExpectations("Toy", ("toy",), ToyConfig, prompt_format="toy3")
    assert checked_policy_dir("p", fixed)[1].width == 5


def test_an_image_resize_other_than_the_expected_is_refused_naming_whose_it_is(
    policy_dir,
) -> None:
    policy_dir(toy_policy(images={"resize": "pad_top_left"}))
    with pytest.raises(
        ConfigError, match=r"images\.resize = 'pad_top_left', expected 'pad' \(the toy's own\)"
    ):
        checked_policy_dir("p", TOY)
    unchecked = PolicyExpectations("Toy", ("toy",), ToyConfig, prompt_format="toy3")
    checked_policy_dir("p", unchecked)


def test_a_tokenizer_file_is_refused_where_a_tokenizer_dir_is_needed(policy_dir) -> None:
    policy_dir(toy_policy(tokenizer_dir=None))
    with pytest.raises(ConfigError, match="tokenizer = .*: Toy needs a tokenizer dir"):
        checked_policy_dir("p", TOY)


def test_the_whole_model_is_built_in_eval_mode_with_all_its_weights(policy_dir) -> None:
    policy = toy_policy()
    policy_dir(policy)
    loader = WeightLoader()
    got, model = load_policy_model_with("p", TOY, ToyModel, loader, flow_steps=2)
    assert got is policy and isinstance(model, ToyModel) and not model.training
    assert model.config.flow_steps == 2
    assert loader.calls == [(policy, model, None)]
    assert all(bool((p == 1.0).all()) for p in model.parameters())


def test_one_stage_reads_only_that_stages_weights(policy_dir) -> None:
    policy_dir(toy_policy())
    loader = WeightLoader()
    _, model = load_policy_model_with(
        "p", TOY, ToyModel, loader, stage="fusion", build_stages=toy_stages
    )
    ((_, loaded, only),) = loader.calls
    assert loaded is model and only is model.fuse
    assert not model.training


def test_an_unknown_stage_is_refused_before_the_directory_is_read(policy_dir) -> None:
    read = policy_dir(toy_policy())
    with pytest.raises(ConfigError, match=r"stage = 'decoder', expected one of \('vision_encoder'"):
        load_policy_model_with(
            "p", TOY, ToyModel, WeightLoader(), stage="decoder", build_stages=toy_stages
        )
    assert read == []


def test_a_stage_is_refused_by_an_architecture_that_loads_its_whole_model(policy_dir) -> None:
    read = policy_dir(toy_policy())
    loader = WeightLoader()
    with pytest.raises(ConfigError, match="stage = 'fusion': Toy loads its whole model"):
        load_policy_model_with("p", TOY, ToyModel, loader, stage="fusion")
    assert read == [] and loader.calls == []
