"""GR00T N1.7 and N1.5 register here (no torch: every function is named, imported when used).

Two architectures from one folder, as the π0 folder registers π0 and π0.5: ``groot``
reads Isaac-GR00T's N1.7 checkpoint directory (Qwen3-VL backbone, :mod:`.model`) and
``groot_n15`` its N1.5 one (``experiment_cfg/metadata.json``, an Eagle 2.5 backbone,
:mod:`.n15_model`); :func:`detect` tells them apart.
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
N15_NAME = "groot_n15"
N15_MODEL_TYPE = "gr00t_n1_5"
"""``config.json`` ``model_type`` of N1.5 (``GR00T_N1_5Config``)."""
PROMPT_FORMAT = "groot"
"""Qwen3-VL's one-turn chat template around the instruction (:mod:`.prompt`)."""
N15_PROMPT_FORMAT = "groot_n15"
"""Eagle 2.5's chat template: system turn, images, instruction (:mod:`.n15_prompt`)."""


def detect(config_json: Mapping[str, Any], path: Path) -> str | None:
    """``groot`` for an Isaac-GR00T N1.7 checkpoint directory, ``groot_n15`` for an N1.5 one.

    N1.7: ``model_type`` Gr00tN1d7 / Gr00t, or every :data:`N17_FIELDS` with the processor
    files; N1.5: ``model_type`` gr00t_n1_5 or ``experiment_cfg/metadata.json`` (a
    directory without the statistics is then refused by name when read). LeRobot configs
    (``type``) are not GR00T.
    """
    if "type" in config_json:
        return None
    if config_json.get("model_type") in MODEL_TYPES:
        return NAME
    if all(f in config_json for f in N17_FIELDS) and all((path / f).is_file() for f in N17_FILES):
        return NAME
    if config_json.get("model_type") == N15_MODEL_TYPE or (path / N15_METADATA).is_file():
        return N15_NAME
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


def n15_facts(config: Any) -> PolicyFacts:
    """What a GR00T N1.5 policy directory states about ``config`` (attribute reads only).

    Images: SigLIP's [-1, 1] pixels (Eagle 2.5's processor: mean 0.5, std 0.5), after
    N1.5's evaluation transform, ``VideoCrop(scale=0.95)`` (in eval mode a centre crop
    keeping 0.95 of each side, no pad: NVIDIA/Isaac-GR00T ``gr00t/data/transform/video.py``
    @357f9827) then ``VideoResize`` to the model's side, as the centre-crop fit of
    :func:`.processor.image_fit` without letterbox; the prompt: :mod:`.n15_prompt`.
    """
    from vla_edge.archs.groot.processor import image_fit

    return PolicyFacts(
        chunk_horizon=config.action_horizon,
        action_dim=config.max_action_dim,
        vocab_size=config.text.vocab_size,
        max_token_len=config.max_token_len,
        image_slots=tuple(config.image_slots),
        image_size=config.vision.image_size,
        images={"pixel_range": [-1.0, 1.0], **image_fit(config)},
        prompt={"format": N15_PROMPT_FORMAT},
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
                "statistics.json and embodiment_id.json per embodiment tag (--embodiment)",
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
    Architecture(
        name=N15_NAME,
        title="GR00T N1.5 (NVIDIA Isaac-GR00T)",
        layouts=(
            Layout(
                "isaac_gr00t_n1d5",
                "N1.5: config.json model_type gr00t_n1_5 (backbone_cfg, action_head_cfg), "
                "model-*.safetensors with model.safetensors.index.json (or one "
                "model.safetensors), experiment_cfg/metadata.json with statistics per "
                "embodiment tag (--embodiment); Eagle 2.5 backbone (SigLIP, Qwen3)",
            ),
        ),
        config=f"{_GROOT}.n15_config:GrootN15Config",
        model=f"{_GROOT}.n15_model:GrootN15Model",
        stages=f"{_GROOT}.n15_stages:build_stages",
        read_checkpoint=f"{_GROOT}.n15_checkpoint:read_checkpoint",
        copy_weights=f"{_GROOT}.checkpoint:copy_weights",
        load_weights=f"{_GROOT}.n15_checkpoint:load_weights",
        detect=f"{_GROOT}.arch:detect",
        options=("architecture", "embodiment", "vision_heads", "action_horizon"),
        tokenizer="huggingface",
        prompts=(
            PromptFormat(
                N15_PROMPT_FORMAT,
                tokenizer="huggingface",
                encoder=f"{_GROOT}.prompt:GrootN15PromptTokenizer",
            ),
        ),
        export=f"{_GROOT}.n15_programs:EXPORT",
        upstream=f"{_GROOT}.n15_upstream:ISAAC_GROOT_N15",
        facts=n15_facts,
    ),
)
