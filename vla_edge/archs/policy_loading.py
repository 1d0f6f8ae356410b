"""A policy directory read for export: the checks and the model loading every architecture shares.

An imported architecture's ``programs`` module states what is its own in one
:class:`PolicyExpectations` (the ``architecture`` values it exports, its config class, the
prompt format and image resize its processor writes, whether its tokenizer is a directory)
and its :class:`~vla_edge.archs.architecture.ExportHooks`' ``checked_policy`` and
``load_model`` are these two functions with its own model class and weight loader:

* :func:`checked_policy_dir`: the policy directory checked against the expectations, and
  its config with ``flow_steps`` applied;
* :func:`load_policy_model_with`: that, and the model filled with the directory's weights:
  all of them, or one stage's only where the architecture loads per stage (the rest of the
  model allocated but never written, so not resident).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from torch import nn

from vla_edge.archs.common import without_default_init
from vla_edge.archs.host import STAGE_NAMES
from vla_edge.archs.policy_dir import PolicyDir, load_policy_dir
from vla_edge.archs.stage_io import StageSet
from vla_edge.core.errors import ConfigError

ModelT = TypeVar("ModelT", bound=nn.Module)


@dataclass(frozen=True)
class PolicyExpectations:
    """What one architecture's exporter expects of a policy directory.

    Attributes:
        title: the architecture as the errors name it (``"SmolVLA"``).
        architectures: the ``architecture`` values it exports.
        config_class: its model config (pydantic), rebuilt (so validated) with ``flow_steps``.
        prompt_format: the ``prompt.format`` its processor writes: one name, or the name
            for a config.
        resize: the ``images.resize`` its processor applies and whose resize that is, e.g.
            ``("pad", "openpi")``; ``None``: not checked.
        needs_tokenizer_dir: whether the tokenizer must be a directory (a Hugging Face one).
    """

    title: str
    architectures: tuple[str, ...]
    config_class: type[Any]
    prompt_format: str | Callable[[Any], str]
    resize: tuple[str, str] | None = None
    needs_tokenizer_dir: bool = False

    def prompt_for(self, config: Any) -> str:
        """The ``prompt.format`` expected with ``config``."""
        if isinstance(self.prompt_format, str):
            return self.prompt_format
        return self.prompt_format(config)


def checked_policy_dir(
    path: str | Path,
    expected: PolicyExpectations,
    flow_steps: int | None = None,
    verify_sha256: bool = True,
) -> tuple[PolicyDir, Any]:
    """The policy directory at ``path`` and its model config (``flow_steps`` applied).

    Raises:
        ConfigError: the directory holds an architecture ``expected`` does not name, or its
            prompt format, image resize or tokenizer is not the expected one.
        PolicyDirError: (and its relatives) an invalid policy directory.
    """
    policy = load_policy_dir(path, verify_sha256=verify_sha256)
    if policy.architecture not in expected.architectures:
        names = " and ".join(repr(name) for name in expected.architectures)
        raise ConfigError(
            f"{path}: architecture = {policy.architecture!r}: the {expected.title} exporter "
            f"exports {names} policy directories (vla-edge export --policy picks the exporter "
            "by architecture)"
        )
    config = policy.config
    if flow_steps is not None:
        config = expected.config_class(**{**config.model_dump(), "flow_steps": int(flow_steps)})
    prompt = expected.prompt_for(config)
    if policy.prompt.get("format") != prompt:
        raise ConfigError(
            f"{path}: prompt.format = {policy.prompt.get('format')!r}, expected {prompt!r} "
            f"(the prompt {expected.title}'s processor writes for this config)"
        )
    if expected.resize is not None and policy.images.get("resize") != expected.resize[0]:
        resize, whose = expected.resize
        raise ConfigError(
            f"{path}: images.resize = {policy.images.get('resize')!r}, expected {resize!r} "
            f"({whose})"
        )
    if expected.needs_tokenizer_dir and policy.tokenizer_dir is None:
        raise ConfigError(
            f"{path}: tokenizer = {policy.tokenizer!r}: {expected.title} needs a tokenizer dir"
        )
    return policy, config


def load_policy_model_with(
    path: str | Path,
    expected: PolicyExpectations,
    model_class: Callable[[Any], ModelT],
    load_weights: Callable[..., None],
    flow_steps: int | None = None,
    stage: str | None = None,
    verify_sha256: bool = True,
    build_stages: Callable[[ModelT], StageSet] | None = None,
) -> tuple[PolicyDir, ModelT]:
    """The checked policy directory (:func:`checked_policy_dir`) and its model with its weights.

    The model is in eval mode.

    Args:
        model_class: builds the model from the config.
        load_weights: ``(policy, model)`` fills the model strictly; with ``only=module``,
            that part of it only.
        stage: only that stage's weights are read (``build_stages`` given); the rest of
            the model is built by :func:`~vla_edge.archs.common.without_default_init`.
        build_stages: the model's stages (sharing its parameters); ``None``: the
            architecture loads its whole model and refuses a ``stage``.

    Raises:
        ConfigError: as :func:`checked_policy_dir`; a stage that is unknown, or refused.
        PolicyDirError: (and its relatives) an invalid policy directory.
    """
    if stage is not None and build_stages is None:
        raise ConfigError(
            f"stage = {stage!r}: {expected.title} loads its whole model (no per-stage weights)"
        )
    if stage is not None and stage not in STAGE_NAMES:
        raise ConfigError(f"stage = {stage!r}, expected one of {STAGE_NAMES}")
    policy, config = checked_policy_dir(path, expected, flow_steps, verify_sha256)
    if stage is None:
        model = model_class(config).eval()
        load_weights(policy, model)
        return policy, model
    assert build_stages is not None
    with without_default_init():
        model = model_class(config).eval()
    load_weights(policy, model, only=build_stages(model).modules()[stage])
    return policy, model
