"""Checkpoint key layout of SmolVLA: LeRobot's ``SmolVLAPolicy`` ``model.safetensors``.

:class:`~vla_edge.archs.smolvla.model.SmolVLAModel`'s state dict *is* LeRobot's
``VLAFlowMatching`` layout; a file prefixes every key with ``model.`` (``SmolVLAPolicy.model``)
and holds one key not built here:

* **unused** — ``model.vlm_with_expert.vlm.lm_head.weight`` (``[49280, 960]``): SmolVLM2's
  untied language-model head, which no forward pass of SmolVLA reads. Dropped on import.

The backbone's text layers beyond ``num_vlm_layers`` are not in a file: LeRobot slices them
off before the policy is ever saved. Older checkpoints also hold normalisation buffers
outside ``model.`` (``normalize_inputs.*``, ``normalize_targets.*``,
``unnormalize_outputs.*``); :func:`from_lerobot` leaves them out, for the importer to read.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from vla_edge.archs.common import KeyReport, compare_keys
from vla_edge.archs.smolvla.config import SmolVLAConfig
from vla_edge.archs.smolvla.model import SmolVLAModel

LEROBOT_PREFIX = "model."
LM_HEAD = "model.vlm_with_expert.vlm.lm_head.weight"
UNUSED = (LM_HEAD,)
"""File keys no forward pass reads (not built here)."""
NORMALIZATION_PREFIXES = ("normalize_inputs.", "normalize_targets.", "unnormalize_outputs.")
"""Older checkpoints' in-weights statistics (not model parameters)."""

__all__ = [
    "LEROBOT_PREFIX",
    "LM_HEAD",
    "NORMALIZATION_PREFIXES",
    "UNUSED",
    "KeyReport",
    "compare_keys",
    "from_lerobot",
    "lerobot_file_shapes",
    "model_shapes",
    "to_lerobot",
]


def model_shapes(config: SmolVLAConfig) -> dict[str, tuple[int, ...]]:
    """This package's state-dict keys and shapes for ``config`` (built on the meta device)."""
    with torch.device("meta"):
        model = SmolVLAModel(config)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def lerobot_file_shapes(config: SmolVLAConfig) -> dict[str, tuple[int, ...]]:
    """Keys and shapes of a LeRobot SmolVLA ``model.safetensors``.

    That is ours under ``model.``, plus :data:`UNUSED`.
    """
    shapes = {LEROBOT_PREFIX + k: s for k, s in model_shapes(config).items()}
    shapes[LM_HEAD] = (config.text.vocab_size, config.text.width)
    return dict(sorted(shapes.items()))


def from_lerobot(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """LeRobot file keys → this package's: strip ``model.``, drop :data:`UNUSED`.

    Keys outside ``model.`` (older checkpoints' normalisation buffers) are left out.
    """
    return {
        key.removeprefix(LEROBOT_PREFIX): value
        for key, value in state_dict.items()
        if key.startswith(LEROBOT_PREFIX) and key not in UNUSED
    }


def to_lerobot(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """This package's keys → LeRobot's (every key under ``model.``; no ``lm_head``)."""
    return {LEROBOT_PREFIX + k: v for k, v in state_dict.items()}
