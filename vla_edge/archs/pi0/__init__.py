"""π0 and π0.5 (Physical Intelligence, openpi) on stock ``transformers`` blocks, as three stages.

* :mod:`.config`: :class:`Pi0Config` (``full_pi0``, ``full_pi05``, ``tiny``).
* :mod:`.layers`: each place openpi's patched transformers differs from stock.
* :mod:`.model`: :class:`Pi0Model` (openpi's key layout; eager reference ``sample_actions``).
* :mod:`.stages`: ``vision_encoder``, ``fusion``, ``action_head`` and their tensor declarations.
* :mod:`.layout`: openpi / LeRobot checkpoint keys and the mappings between them.
* :mod:`.prompt`: the host-side prompt and its tokenizer (π0.5's discretised state; no torch).
* :mod:`.processor`: the host side and the manifest's contract (no torch).
* :mod:`.programs`: the export hooks; :mod:`.xnnpack`: the ExecuTorch rewrite.
* :mod:`.bench`: the bench hooks and openpi's layout to write a model in.
* :mod:`.arch`: the registration (no torch).

The names below are imported when first used (PEP 562), so importing the folder's
``arch`` module to list the architectures imports no torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "GemmaSize": "vla_edge.archs.pi0.config",
    "Pi0Config": "vla_edge.archs.pi0.config",
    "SiglipSize": "vla_edge.archs.pi0.config",
    "Pi0Model": "vla_edge.archs.pi0.model",
    "count_parameters": "vla_edge.archs.pi0.model",
    "Pi0Stages": "vla_edge.archs.pi0.stages",
    "TensorSpec": "vla_edge.archs.pi0.stages",
    "build_stages": "vla_edge.archs.pi0.stages",
    "head_actions": "vla_edge.archs.pi0.stages",
    "run_stages": "vla_edge.archs.pi0.stages",
}
"""Public name -> the module that defines it."""


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


__all__ = sorted(_EXPORTS)  # noqa: PLE0605
