"""GR00T N1.7 and N1.5 (NVIDIA Isaac-GR00T) on stock ``transformers`` blocks, as three stages.

Upstream read: NVIDIA/Isaac-GR00T, the N1.7 model and processor (commits named in each
module's docstring). Apache-2.0 code; each checkpoint's weight licence is its own.

* :mod:`.config`: :class:`GrootConfig` (``full_n17``, ``tiny``).
* :mod:`.layers`: each place GR00T differs from stock transformers (deepstack, M-RoPE
  positions, the cut language model, the DiT's alternation and time conditioning, the
  per-embodiment slices, the flow's direction and time buckets).
* :mod:`.model`: :class:`GrootModel` (upstream's key layout; eager ``sample_actions``).
* :mod:`.stages`: ``vision_encoder``, ``fusion``, ``action_head`` (one Euler step, K = 4).
* :mod:`.layout`: upstream's checkpoint keys and the mapping to ours.
* :mod:`.checkpoint`: reading an N1.7 checkpoint directory (and N1.5's statistics).
* N1.5 (architecture ``groot_n15``, an Eagle 2.5 backbone: SigLIP and Qwen3):
  :mod:`.n15_config` (:class:`GrootN15Config`: ``full_n15``, ``tiny``), :mod:`.n15_model`
  (:class:`GrootN15Model`, each departure from N1.7 named), :mod:`.n15_stages` (the same
  three stages), :mod:`.n15_checkpoint` (its checkpoint directory), :mod:`.n15_prompt`
  (Eagle 2.5's chat layout, the ``groot_n15`` prompt format; no torch),
  :mod:`.n15_programs` (its export hooks and policy directories).
* :mod:`.processor`: the host side: normalisation in the policy directory's schema (no torch).
* :mod:`.arch`: the registration (no torch).

The names below are imported when first used (PEP 562), so importing the folder's
``arch`` module to list the architectures imports no torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "GrootConfig": "vla_edge.archs.groot.config",
    "TextSize": "vla_edge.archs.groot.config",
    "TransformerSize": "vla_edge.archs.groot.config",
    "VisionSize": "vla_edge.archs.groot.config",
    "GrootModel": "vla_edge.archs.groot.model",
    "count_parameters": "vla_edge.archs.groot.model",
    "GrootStages": "vla_edge.archs.groot.stages",
    "build_stages": "vla_edge.archs.groot.stages",
    "head_actions": "vla_edge.archs.groot.stages",
    "run_stages": "vla_edge.archs.groot.stages",
    "GrootN15Config": "vla_edge.archs.groot.n15_config",
    "GrootN15Model": "vla_edge.archs.groot.n15_model",
}
"""Public name -> the module that defines it."""


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)


__all__ = sorted(_EXPORTS)  # noqa: PLE0605
