"""The one list of the architectures this package runs, and the layouts each reads.

``vla-edge import --list`` prints it; ``vla-edge import`` finds a checkpoint's architecture
here (LeRobot's ``config.json`` ``type``, or an architecture's own ``detect``) and calls the
functions the entry names; :mod:`vla_edge.archs.policy_dir` validates a policy directory's
``config`` with the entry's config class and :attr:`Architecture.facts`.

Functions are named as ``"module:attribute"`` strings and imported when used
(:meth:`Architecture.resolve`), so listing or validating never imports torch, and a
caller resolves only what its layer may import (the bundled model's stages live in the
exporter).

Adding an architecture (GR00T N1.5 next) is one subpackage under ``vla_edge/archs/`` with a
config, a model, its stages and a ``checkpoint`` module (``read_checkpoint(path, options)
-> Checkpoint``, ``copy_weights(checkpoint, dst, metadata)``, ``load_weights``), its tests,
and one :class:`Architecture` entry in :data:`ARCHITECTURES`; runners, nodes, the controller
and the safety layer read the policy directory and the export manifest, never this list.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vla_edge.archs.common import CONFIG_NAME, read_config_json
from vla_edge.core.errors import CheckpointError, UnknownArchitectureError


@dataclass(frozen=True)
class Layout:
    """A published checkpoint layout an architecture reads."""

    name: str
    """``openpi``, ``lerobot`` or ``vla_edge``."""
    summary: str


@dataclass(frozen=True)
class PolicyFacts:
    """What a policy directory states about a config, whatever the architecture."""

    chunk_horizon: int
    action_dim: int
    """The model's (padded) action width."""
    vocab_size: int
    """Rows of the token embedding (the tokenizer's ids must stay below)."""
    max_token_len: int
    image_slots: tuple[str, ...]
    image_size: int
    """Square input side in pixels."""
    images: dict[str, Any]
    """``policy.yaml``'s ``images`` fields besides ``slots``, ``height`` and ``width``."""
    prompt: dict[str, Any]


@dataclass(frozen=True)
class Architecture:
    """One supported architecture: its layouts and the functions that read and build it."""

    name: str
    title: str
    layouts: tuple[Layout, ...]
    config: str
    """The config class (``module:Class``) that builds every size."""
    model: str
    """The torch model class."""
    stages: str
    """The function that splits a model into exportable stages."""
    read_checkpoint: str
    """``(path, options) -> Checkpoint``: header-checked, no tensor read (the bundled model:
    its loader)."""
    copy_weights: str | None = None
    """``(checkpoint, dst, metadata)``: the checked tensors under this package's names;
    ``None``: not imported (this package's own checkpoints are exported as they are)."""
    load_weights: str | None = None
    """``(policy_dir, model)``: a policy directory's weights into a model, strictly."""
    detect: str | None = None
    """``(config_json, path) -> name | None`` for layouts without LeRobot's ``type``."""
    lerobot_type: str | None = None
    """LeRobot's ``config.json`` ``type`` for this architecture."""
    options: tuple[str, ...] = ()
    """The :class:`~vla_edge.archs.common.ImportOptions` fields it reads."""
    tokenizer: str = "sentencepiece"
    """``sentencepiece`` (a model file) or ``huggingface`` (a tokenizer directory)."""
    facts: Callable[[Any], PolicyFacts] | None = field(default=None, repr=False)
    check: Callable[[Any], str | None] | None = field(default=None, repr=False)
    """A contradiction between the config and the name (``None``: consistent)."""

    @property
    def importable(self) -> bool:
        """Whether ``vla-edge import`` turns its checkpoints into a policy directory."""
        return self.copy_weights is not None

    def resolve(self, name: str) -> Any:
        """The object a ``module:attribute`` field names, imported now."""
        target = getattr(self, name)
        if target is None:
            raise UnknownArchitectureError(f"{self.name}: has no {name}")
        module, _, attribute = target.partition(":")
        return getattr(importlib.import_module(module), attribute)

    def config_class(self) -> Any:
        """The config class."""
        return self.resolve("config")

    def line(self) -> str:
        """One line of ``vla-edge import --list``."""
        layouts = "; ".join(f"{layout.name} ({layout.summary})" for layout in self.layouts)
        how = "" if self.importable else " [no import needed: vla-edge export reads it]"
        return f"{self.name:<8} {self.title}: {layouts}{how}"


# -- per-architecture facts (attribute reads only: no torch) -------------------------------


def _pi0_facts(config: Any) -> PolicyFacts:
    prompt = (
        {"format": "pi05_state", "state_bins": 256} if config.state_in_prompt else {"format": "pi0"}
    )
    return PolicyFacts(
        chunk_horizon=config.action_horizon,
        action_dim=config.action_dim,
        vocab_size=config.vocab_size,
        max_token_len=config.max_token_len,
        image_slots=tuple(config.image_slots),
        image_size=config.vision.image_size,
        images={"pixel_range": [-1.0, 1.0], "resize": "pad"},
        prompt=prompt,
    )


def _smolvla_facts(config: Any) -> PolicyFacts:
    return PolicyFacts(
        chunk_horizon=config.chunk_size,
        action_dim=config.action_dim,
        vocab_size=config.text.vocab_size,
        max_token_len=config.max_token_len,
        image_slots=tuple(config.image_slots),
        image_size=config.vision.image_size,
        # LeRobot's resize_with_pad: torch bilinear (no antialias) on [0, 1] floats, zeros
        # padded on the left and top, then * 2 - 1
        images={"pixel_range": [-1.0, 1.0], "resize": "pad_top_left", "resample": "bilinear"},
        prompt={"format": "smolvla"},
    )


def _pi05_flag(wanted: bool) -> Callable[[Any], str | None]:
    def check(config: Any) -> str | None:
        if config.pi05 != wanted:
            return f"config.pi05 = {config.pi05} contradicts {'pi05' if wanted else 'pi0'}"
        return None

    return check


_PI0 = "vla_edge.archs.pi0"
_PI0_LAYOUTS = (
    Layout("openpi", "converted PyTorch: model.safetensors, config.json, assets/*/norm_stats.json"),
    Layout("lerobot", "pretrained: config.json type {type}, model.safetensors, processor stats"),
)
_PI0_OPTIONS = (
    "architecture",
    "asset_id",
    "paligemma_variant",
    "expert_variant",
    "vision_heads",
    "action_horizon",
    "discrete_state_input",
    "delta_actions",
)


def _pi0_entry(name: str, title: str) -> Architecture:
    return Architecture(
        name=name,
        title=title,
        layouts=tuple(
            Layout(layout.name, layout.summary.format(type=name)) for layout in _PI0_LAYOUTS
        ),
        config=f"{_PI0}.config:Pi0Config",
        model=f"{_PI0}.model:Pi0Model",
        stages=f"{_PI0}.stages:build_stages",
        read_checkpoint=f"{_PI0}.checkpoint:read_checkpoint",
        copy_weights=f"{_PI0}.checkpoint:copy_weights",
        load_weights=f"{_PI0}.checkpoint:load_pi0_weights",
        detect=f"{_PI0}.checkpoint:detect",
        lerobot_type=name,
        options=_PI0_OPTIONS,
        tokenizer="sentencepiece",
        facts=_pi0_facts,
        check=_pi05_flag(name == "pi05"),
    )


ARCHITECTURES: dict[str, Architecture] = {
    arch.name: arch
    for arch in (
        Architecture(
            name="bundled",
            title="this package's VLA (MiniLM, ViT, fusion, flow head; vla-edge train)",
            layouts=(Layout("vla_edge", "vla-edge train's checkpoint .pt"),),
            config="vla_edge.policy.config:PolicyConfig",
            model="vla_edge.policy.model:VlaPolicy",
            stages="vla_edge.export.stages:policy_stages",
            read_checkpoint="vla_edge.policy.model:load_checkpoint",
            tokenizer="bundled",
        ),
        _pi0_entry("pi0", "π0 (Physical Intelligence, openpi)"),
        _pi0_entry("pi05", "π0.5 (Physical Intelligence, openpi)"),
        Architecture(
            name="smolvla",
            title="SmolVLA (Hugging Face, LeRobot)",
            layouts=(
                Layout(
                    "lerobot",
                    "pretrained: config.json type smolvla, model.safetensors, processor stats "
                    "or older in-weights stats",
                ),
            ),
            config="vla_edge.archs.smolvla.config:SmolVLAConfig",
            model="vla_edge.archs.smolvla.model:SmolVLAModel",
            stages="vla_edge.archs.smolvla.stages:build_stages",
            read_checkpoint="vla_edge.archs.smolvla.checkpoint:read_checkpoint",
            copy_weights="vla_edge.archs.smolvla.checkpoint:copy_weights",
            load_weights="vla_edge.archs.smolvla.checkpoint:load_smolvla_weights",
            lerobot_type="smolvla",
            options=(
                "architecture",
                "vision_heads",
                "text_heads",
                "action_horizon",
                "delta_actions",
            ),
            tokenizer="huggingface",
            facts=_smolvla_facts,
        ),
    )
}
"""Every supported architecture, by name."""


def get(name: str) -> Architecture:
    """The entry for ``name``.

    Raises:
        UnknownArchitectureError: not in :data:`ARCHITECTURES`.
    """
    if name not in ARCHITECTURES:
        raise UnknownArchitectureError(
            f"architecture = {name!r} is not one of {tuple(ARCHITECTURES)}"
        )
    return ARCHITECTURES[name]


def importable() -> tuple[str, ...]:
    """The architectures ``vla-edge import`` reads."""
    return tuple(name for name, arch in ARCHITECTURES.items() if arch.importable)


def listing() -> str:
    """``vla-edge import --list``: one line per architecture with its layouts."""
    return "\n".join(arch.line() for arch in ARCHITECTURES.values())


def find(path: str | Path, override: str | None = None) -> Architecture:
    """The architecture of a checkpoint directory (``override`` wins).

    LeRobot's ``config.json`` names it in ``type``; other layouts are recognised by each
    architecture's ``detect``.

    Raises:
        CheckpointError: not a directory, or ``config.json`` absent or unreadable.
        UnknownArchitectureError: an unknown ``type`` or ``override``, an architecture that
            is not imported, or a layout no architecture recognises.
    """
    path = Path(path)
    if override is not None:
        arch = get(override)
        if not arch.importable:
            raise UnknownArchitectureError(
                f"architecture = {override!r}: {arch.title} checkpoints need no import; "
                "pass them to vla-edge export"
            )
        if path.is_dir():
            read_config_json(path)
        return arch
    if path.is_file():
        raise CheckpointError(
            f"{path}: expected a checkpoint directory (a bundled .pt checkpoint needs no "
            "import: pass it to vla-edge export)"
        )
    config_json = read_config_json(path)
    lerobot = {a.lerobot_type: a for a in ARCHITECTURES.values() if a.lerobot_type}
    if "type" in config_json:
        kind = config_json["type"]
        if kind not in lerobot:
            raise UnknownArchitectureError(
                f"{path / CONFIG_NAME}: type = {kind!r} is not an architecture this package "
                f"builds (LeRobot types it reads: {', '.join(lerobot)}; see vla-edge import "
                "--list)"
            )
        return lerobot[kind]
    for arch in ARCHITECTURES.values():
        if arch.detect is not None and (name := arch.resolve("detect")(config_json, path)):
            return get(name)
    raise UnknownArchitectureError(
        f"{path / CONFIG_NAME}: neither a LeRobot config ('type': {' | '.join(lerobot)}) nor "
        "an openpi one (paligemma_variant, action_expert_variant, and an assets/ directory)"
    )


__all__ = [
    "ARCHITECTURES",
    "Architecture",
    "Layout",
    "PolicyFacts",
    "find",
    "get",
    "importable",
    "listing",
]
