"""π0 and π0.5 register here (no torch: every function is named, imported when used)."""

from __future__ import annotations

from typing import Any

from vla_edge.archs.architecture import Architecture, Layout, PolicyFacts, PromptFormat

_PI0 = "vla_edge.archs.pi0"
_LAYOUTS = (
    Layout("openpi", "converted PyTorch: model.safetensors, config.json, assets/*/norm_stats.json"),
    Layout("lerobot", "pretrained: config.json type {type}, model.safetensors, processor stats"),
)
_OPTIONS = (
    "architecture",
    "asset_id",
    "paligemma_variant",
    "expert_variant",
    "vision_heads",
    "action_horizon",
    "discrete_state_input",
    "delta_actions",
)

_ENCODER = f"{_PI0}.prompt:PaligemmaPromptTokenizer"
PROMPTS = (
    PromptFormat("pi0", tokenizer="sentencepiece", encoder=_ENCODER),
    PromptFormat("pi05_state", tokenizer="sentencepiece", encoder=_ENCODER, holds_state=True),
)
"""openpi's prompts (:mod:`.prompt`): ``pi0`` and π0.5's ``pi05_state``, which holds the
state; both entries register both (a config's ``state_in_prompt`` picks one)."""


def facts(config: Any) -> PolicyFacts:
    """What a π0 / π0.5 policy directory states about ``config`` (attribute reads only)."""
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


def check_pi0(config: Any) -> str | None:
    """``config.pi05`` set for a ``pi0`` policy (``None``: consistent)."""
    return f"config.pi05 = {config.pi05} contradicts pi0" if config.pi05 else None


def check_pi05(config: Any) -> str | None:
    """``config.pi05`` unset for a ``pi05`` policy (``None``: consistent)."""
    return None if config.pi05 else f"config.pi05 = {config.pi05} contradicts pi05"


def _entry(name: str, title: str) -> Architecture:
    return Architecture(
        name=name,
        title=title,
        layouts=tuple(Layout(layout.name, layout.summary.format(type=name)) for layout in _LAYOUTS),
        config=f"{_PI0}.config:Pi0Config",
        model=f"{_PI0}.model:Pi0Model",
        stages=f"{_PI0}.stages:build_stages",
        read_checkpoint=f"{_PI0}.checkpoint:read_checkpoint",
        copy_weights=f"{_PI0}.checkpoint:copy_weights",
        load_weights=f"{_PI0}.checkpoint:load_pi0_weights",
        detect=f"{_PI0}.checkpoint:detect",
        lerobot_type=name,
        options=_OPTIONS,
        tokenizer="sentencepiece",
        prompts=PROMPTS,
        export=f"{_PI0}.programs:EXPORT",
        bench=f"{_PI0}.bench:BENCH_{name.upper()}",
        upstream=f"{_PI0}.upstream:OPENPI",
        facts=facts,
        check=check_pi05 if name == "pi05" else check_pi0,
    )


ARCHITECTURES = (
    _entry("pi0", "π0 (Physical Intelligence, openpi)"),
    _entry("pi05", "π0.5 (Physical Intelligence, openpi)"),
)
