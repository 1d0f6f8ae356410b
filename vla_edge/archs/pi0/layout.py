"""Checkpoint key layouts of π0 / π0.5: openpi's converted PyTorch files and LeRobot's.

:class:`~vla_edge.archs.pi0.model.Pi0Model`'s state dict *is* openpi's ``PI0Pytorch``
layout, with two documented differences handled here:

* **tied** — ``paligemma.lm_head.weight`` shares storage with the token embedding.
  ``safetensors.torch.save_model`` (openpi's converter, LeRobot's ``save_pretrained``)
  keeps the alphabetically first name, so a file has ``lm_head.weight`` and no
  ``...embed_tokens.weight``; :func:`from_openpi` copies it back.
* **unused** — the expert's ``lm_head.weight`` (``[257152, 1024]``): openpi's expert is a
  ``GemmaForCausalLM`` whose head no forward pass reads. Not built here; dropped on import.

LeRobot's ``PI0Policy`` / ``PI05Policy`` prefix every key with ``model.``; its loader
(``_fix_pytorch_state_dict_keys``) renames ``time_mlp_*`` ↔ ``action_time_mlp_*`` to the
variant's name and skips plain expert norm weights under adaRMS. :func:`lerobot_to_openpi`
and :func:`openpi_to_lerobot` map between the two.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import torch

from vla_edge.archs.common import KeyReport, compare_keys
from vla_edge.archs.pi0.config import Pi0Config
from vla_edge.archs.pi0.model import Pi0Model

EMBED_TOKENS = "paligemma_with_expert.paligemma.model.language_model.embed_tokens.weight"
TIED = {"paligemma_with_expert.paligemma.lm_head.weight": EMBED_TOKENS}
"""Key → the key whose storage it shares."""
FILE_DROPS = (EMBED_TOKENS,)
"""Module keys ``save_model`` leaves out of a file (their tied twin is written)."""
UNUSED = ("paligemma_with_expert.gemma_expert.lm_head.weight",)
"""Keys openpi's module and files hold but no forward pass reads (not built here)."""
LEROBOT_PREFIX = "model."

__all__ = [
    "EMBED_TOKENS",
    "FILE_DROPS",
    "LEROBOT_PREFIX",
    "TIED",
    "UNUSED",
    "KeyReport",
    "compare_keys",
    "from_openpi",
    "lerobot_file_shapes",
    "lerobot_to_openpi",
    "model_shapes",
    "openpi_file_shapes",
    "openpi_module_shapes",
    "openpi_to_lerobot",
]

_EXPERT_PLAIN_NORM = re.compile(
    r"paligemma_with_expert\.gemma_expert\.model\."
    r"(layers\.\d+\.(input_layernorm|post_attention_layernorm)|norm)\.weight$"
)


def model_shapes(config: Pi0Config) -> dict[str, tuple[int, ...]]:
    """This package's state-dict keys and shapes for ``config`` (built on the meta device)."""
    with torch.device("meta"):
        model = Pi0Model(config)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def openpi_module_shapes(config: Pi0Config) -> dict[str, tuple[int, ...]]:
    """Openpi's ``PI0Pytorch.state_dict()`` keys and shapes: ours plus :data:`UNUSED`."""
    shapes = model_shapes(config)
    shapes[UNUSED[0]] = (config.vocab_size, config.expert.width)
    return dict(sorted(shapes.items()))


def openpi_file_shapes(config: Pi0Config) -> dict[str, tuple[int, ...]]:
    """Keys and shapes of openpi's converted ``model.safetensors``.

    That is the module's minus :data:`FILE_DROPS`.
    """
    return {k: s for k, s in openpi_module_shapes(config).items() if k not in FILE_DROPS}


def lerobot_file_shapes(config: Pi0Config) -> dict[str, tuple[int, ...]]:
    """Keys and shapes of a LeRobot ``PI0Policy`` / ``PI05Policy`` ``model.safetensors``."""
    return {LEROBOT_PREFIX + k: s for k, s in openpi_file_shapes(config).items()}


def from_openpi(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """An openpi state dict (module or file) → this package's keys.

    The tied embedding is filled from ``lm_head.weight`` when the file dropped it;
    :data:`UNUSED` keys are dropped.
    """
    out = {k: v for k, v in state_dict.items() if k not in UNUSED}
    for key, twin in TIED.items():
        if twin not in out and key in out:
            out[twin] = out[key]
        if key not in out and twin in out:
            out[key] = out[twin]
    return out


def lerobot_to_openpi(
    state_dict: Mapping[str, torch.Tensor], pi05: bool
) -> dict[str, torch.Tensor]:
    """LeRobot's keys → openpi's, as LeRobot's own loader resolves them.

    Strips the ``model.`` prefix; names the time MLP after the variant (π0
    ``action_time_mlp_*``, π0.5 ``time_mlp_*``); under π0.5's adaRMS drops plain expert
    norm weights (LeRobot skips them too).
    """
    out: dict[str, torch.Tensor] = {}
    for key, value in state_dict.items():
        name = key.removeprefix(LEROBOT_PREFIX)
        if pi05:
            if _EXPERT_PLAIN_NORM.match(name):
                continue
            if name.startswith("action_time_mlp_"):
                name = name.removeprefix("action_")
        elif name.startswith("time_mlp_"):
            name = "action_" + name
        out[name] = value
    return out


def openpi_to_lerobot(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Openpi's keys → LeRobot's (every key under ``model.``)."""
    return {LEROBOT_PREFIX + k: v for k, v in state_dict.items()}
