"""GR00T N1.7 registers here (no torch: every function is named, imported when used).

The layout read is Isaac-GR00T's N1.7 checkpoint directory; N1.5's
(``experiment_cfg/metadata.json``, an Eagle 2.5 backbone) is recognised by :func:`detect`
so that ``vla-edge import`` refuses it by name
(:func:`vla_edge.archs.groot.checkpoint.read_checkpoint`), not as an unknown layout.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vla_edge.archs.architecture import Architecture, Layout, PolicyFacts, PromptFormat

_GROOT = "vla_edge.archs.groot"
NAME = "groot"
MODEL_TYPES = ("Gr00tN1d7", "Gr00t")
"""``config.json`` ``model_type`` of N1.7 (``Gr00tN1d7``; TensorRT Edge-LLM's notes say
``Gr00t``)."""
N17_FIELDS = ("select_layer", "diffusion_model_cfg", "vl_self_attention_cfg")
"""``config.json`` fields every N1.7 ``Gr00tN1d7Config`` writes."""
N17_FILES = ("processor_config.json", "embodiment_id.json")
N15_METADATA = "experiment_cfg/metadata.json"
PROMPT_FORMAT = "groot"
"""Qwen3-VL's one-turn chat template around the instruction (:mod:`.prompt`)."""


def detect(config_json: Mapping[str, Any], path: Path) -> str | None:
    """``groot`` for an Isaac-GR00T checkpoint directory (N1.7, or N1.5 to refuse by name).

    N1.7: ``model_type`` Gr00tN1d7 / Gr00t, or every :data:`N17_FIELDS` with the processor
    files; N1.5: ``experiment_cfg/metadata.json``. LeRobot configs (``type``) are not GR00T.
    """
    if "type" in config_json:
        return None
    if config_json.get("model_type") in MODEL_TYPES:
        return NAME
    if all(f in config_json for f in N17_FIELDS) and all((path / f).is_file() for f in N17_FILES):
        return NAME
    if (path / N15_METADATA).is_file():
        return NAME
    return None


def facts(config: Any) -> PolicyFacts:
    """What a GR00T policy directory states about ``config`` (attribute reads only)."""
    from vla_edge.archs.groot.processor import image_fit

    return PolicyFacts(
        chunk_horizon=config.action_horizon,
        action_dim=config.max_action_dim,
        vocab_size=config.text.vocab_size,
        max_token_len=config.max_token_len,
        image_slots=tuple(config.image_slots),
        image_size=config.vision.image_size,
        # Qwen3-VL's image processor: mean 0.5, std 0.5 on [0, 1] pixels, after upstream's
        # evaluation transform (processor.image_fit)
        images={"pixel_range": [-1.0, 1.0], **image_fit(config)},
        prompt={"format": PROMPT_FORMAT},
    )


ARCHITECTURES = (
    Architecture(
        name=NAME,
        title="GR00T N1.7 (NVIDIA Isaac-GR00T)",
        layouts=(
            Layout(
                "isaac_gr00t",
                "N1.7: config.json model_type Gr00tN1d7, model-*.safetensors with "
                "model.safetensors.index.json (or one model.safetensors), processor_config.json, "
                "statistics.json and embodiment_id.json per embodiment tag (--embodiment); "
                "N1.5 (experiment_cfg/metadata.json) refused: its Eagle 2.5 backbone is not built",
            ),
        ),
        config=f"{_GROOT}.config:GrootConfig",
        model=f"{_GROOT}.model:GrootModel",
        stages=f"{_GROOT}.stages:build_stages",
        read_checkpoint=f"{_GROOT}.checkpoint:read_checkpoint",
        copy_weights=f"{_GROOT}.checkpoint:copy_weights",
        load_weights=f"{_GROOT}.checkpoint:load_weights",
        detect=f"{_GROOT}.arch:detect",
        options=("architecture", "embodiment", "vision_heads", "action_horizon"),
        tokenizer="huggingface",
        prompts=(
            PromptFormat(
                PROMPT_FORMAT,
                tokenizer="huggingface",
                encoder=f"{_GROOT}.prompt:GrootPromptTokenizer",
            ),
        ),
        export=f"{_GROOT}.programs:EXPORT",
        bench=f"{_GROOT}.bench:BENCH",
        upstream=f"{_GROOT}.upstream:ISAAC_GROOT",
        facts=facts,
    ),
)
