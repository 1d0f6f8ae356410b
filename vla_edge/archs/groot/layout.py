"""Checkpoint key layout of GR00T N1.7: upstream's ``save_pretrained`` files and ours.

:class:`~vla_edge.archs.groot.model.GrootModel`'s state dict *is* upstream's
``Gr00tN1d7.state_dict()`` (NVIDIA/Isaac-GR00T ``gr00t/model/gr00t_n1d7/gr00t_n1d7.py``
@2d1e82fe) with one documented difference handled here:

* **unused** — ``backbone.model.lm_head.weight`` (``[vocab, width]``): the backbone is a
  ``Qwen3VLForConditionalGeneration`` whose head is tied to the token table and read by
  no action computation. Published N1.7 files carry it (upstream's trainer clones it
  before saving, so the file has both names); a file without it is accepted too. Not
  built here; dropped on import.

Everything under ``backbone.model.model.`` (the Qwen3-VL vision tower and the language
model cut to ``select_layer`` layers, final norm included) and ``action_head.`` maps to
the same name. The N1.5 layout (Eagle 2.5 backbone, ``experiment_cfg/metadata.json``)
has other keys, read by :mod:`.n15_checkpoint`.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from vla_edge.archs.common import KeyReport, compare_keys
from vla_edge.archs.groot.config import GrootConfig
from vla_edge.archs.groot.model import GrootModel

LM_HEAD = "backbone.model.lm_head.weight"
UNUSED = (LM_HEAD,)
"""Keys upstream's files may hold that no forward pass here reads (not built)."""
BACKBONE_PREFIX = "backbone.model.model."
ACTION_HEAD_PREFIX = "action_head."
VISION_PREFIX = BACKBONE_PREFIX + "visual."
TEXT_PREFIX = BACKBONE_PREFIX + "language_model."

__all__ = [
    "ACTION_HEAD_PREFIX",
    "BACKBONE_PREFIX",
    "LM_HEAD",
    "UNUSED",
    "KeyReport",
    "compare_keys",
    "from_upstream",
    "model_shapes",
    "upstream_file_shapes",
]


def model_shapes(config: GrootConfig) -> dict[str, tuple[int, ...]]:
    """This package's state-dict keys and shapes for ``config`` (built on the meta device)."""
    with torch.device("meta"):
        model = GrootModel(config)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def upstream_file_shapes(config: GrootConfig) -> dict[str, tuple[int, ...]]:
    """Keys and shapes of upstream's files: ours plus the unread ``lm_head``."""
    shapes = model_shapes(config)
    shapes[LM_HEAD] = (config.text.vocab_size, config.text.width)
    return dict(sorted(shapes.items()))


def from_upstream(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """An upstream state dict (module or file) → this package's keys (:data:`UNUSED` dropped)."""
    return {k: v for k, v in state_dict.items() if k not in UNUSED}
