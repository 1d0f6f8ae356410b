"""SmolVLA (Hugging Face, LeRobot) on stock ``transformers`` SmolVLM blocks, as three stages.

* :mod:`.config`: :class:`SmolVLAConfig` (``full``, ``tiny``).
* :mod:`.layers`: each place LeRobot's SmolVLA differs from stock transformers.
* :mod:`.model`: :class:`SmolVLAModel` (LeRobot's key layout; eager reference ``sample_actions``).
* :mod:`.stages`: ``vision_encoder``, ``fusion``, ``action_head`` and their tensor declarations.
* :mod:`.layout`: LeRobot checkpoint keys and the mapping onto the model.
* :mod:`.prompt`: LeRobot's prompt through a Hugging Face tokenizer (numpy, ``tokenizers``).
* :mod:`.processor`: the host side and the manifest's contract (no torch).
* :mod:`.programs`: the export hooks; :mod:`.xnnpack`: the ExecuTorch rewrite.
* :mod:`.bench`: the bench hooks and LeRobot's layout to write a model in.
* :mod:`.arch`: the registration (no torch).

The names below are imported when first used (PEP 562), so importing the folder's
``arch`` module to list the architectures imports no torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "SmolVLAConfig": "vla_edge.archs.smolvla.config",
    "SmolVLMTextSize": "vla_edge.archs.smolvla.config",
    "SmolVLMVisionSize": "vla_edge.archs.smolvla.config",
    "SmolVLAModel": "vla_edge.archs.smolvla.model",
    "count_parameters": "vla_edge.archs.smolvla.model",
    "SmolVLAStages": "vla_edge.archs.smolvla.stages",
    "build_stages": "vla_edge.archs.smolvla.stages",
    "run_stages": "vla_edge.archs.smolvla.stages",
}
"""Public name -> the module that defines it."""


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


__all__ = sorted(_EXPORTS)  # noqa: PLE0605
