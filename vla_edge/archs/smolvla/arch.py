"""SmolVLA registers here (no torch: every function is named, imported when used)."""

from __future__ import annotations

from typing import Any

from vla_edge.archs.architecture import Architecture, Layout, PolicyFacts, PromptFormat

_SMOLVLA = "vla_edge.archs.smolvla"


def facts(config: Any) -> PolicyFacts:
    """What a SmolVLA policy directory states about ``config`` (attribute reads only)."""
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


ARCHITECTURES = (
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
        config=f"{_SMOLVLA}.config:SmolVLAConfig",
        model=f"{_SMOLVLA}.model:SmolVLAModel",
        stages=f"{_SMOLVLA}.stages:build_stages",
        read_checkpoint=f"{_SMOLVLA}.checkpoint:read_checkpoint",
        copy_weights=f"{_SMOLVLA}.checkpoint:copy_weights",
        load_weights=f"{_SMOLVLA}.checkpoint:load_smolvla_weights",
        lerobot_type="smolvla",
        options=(
            "architecture",
            "vision_heads",
            "text_heads",
            "action_horizon",
            "delta_actions",
        ),
        tokenizer="huggingface",
        prompts=(
            PromptFormat(
                "smolvla",
                tokenizer="huggingface",
                encoder=f"{_SMOLVLA}.prompt:SmolVLAPromptTokenizer",
                implied=True,
            ),
        ),
        export=f"{_SMOLVLA}.programs:EXPORT",
        bench=f"{_SMOLVLA}.bench:BENCH",
        upstream=f"{_SMOLVLA}.upstream:LEROBOT",
        facts=facts,
    ),
)
