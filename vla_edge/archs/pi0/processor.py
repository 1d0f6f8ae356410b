r"""π0 / π0.5's host side, as openpi's inference pipeline does it: the manifest's contract.

openpi: ``src/openpi/transforms.py``, ``models/tokenizer.py``,
``models_pytorch/preprocessing_pytorch.py``. No torch here.

* ``host.images``: the checkpoint's slots (``base_0_rgb``, ``left_wrist_0_rgb``,
  ``right_wrist_0_rgb``) fed by robot cameras or ``null`` (a black image,
  masked), ``resize: pad`` (openpi's ``resize_with_pad``), pixels in [-1, 1];
* ``host.token_ids``: a SentencePiece tokenizer (PaliGemma's, copied beside the
  programs as ``tokenizer.model``) with prompt ``pi0`` (BOS + cleaned text +
  ``"\n"``) or ``pi05_state`` (π0.5: the discretised normalised state in the
  prompt, so the ids are made per observation), ``token_mask`` float 0/1;
* ``host.state`` / ``noise`` / ``prefix_*`` at the padded width (32): the
  robot's ``N`` dimensions first, zeros after (openpi's ``PadStatesAndActions``);
* ``normalisation``: π0 ``mean_std``, π0.5 ``quantile`` (openpi:
  ``use_quantile_norm = model_type != PI0``), epsilon 1e-6, the checkpoint's
  statistics cut to the robot's ``N`` dimensions (openpi slices them to the
  data's width); a policy directory's state at its state space's width and its
  actions at its action space's;
* ``output``: ``action_head.actions`` ``[1, H, 32]``, the first ``N`` decoded
  (a policy directory's: as many as it has action statistics).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vla_edge.archs import host
from vla_edge.core.errors import ConfigError

OUTPUT = "action_head.actions"
TOKENIZER_FILE = "tokenizer.model"
NORM_EPSILON = 1e-6
"""openpi's epsilon in both formulas (``transforms.Normalize``)."""
NORM_STATS = {"mean_std": ("mean", "std"), "quantile": ("q01", "q99")}


def architecture_name(config: Any) -> str:
    """``pi0`` or ``pi05``."""
    return "pi05" if config.pi05 else "pi0"


def prompt_format(config: Any) -> str:
    """``pi05_state`` when the state is written into the prompt (π0.5), else ``pi0``."""
    return "pi05_state" if config.state_in_prompt else "pi0"


def normalisation_kind(config: Any) -> str:
    """The reference's choice (openpi): z-score for π0, quantiles for π0.5."""
    return "quantile" if config.pi05 else "mean_std"


def normalisation_section(
    kind: str,
    norm_stats: Mapping[str, Mapping[str, Sequence[float]]],
    n: int,
    delta_actions: Sequence[bool] | None = None,
) -> dict[str, Any]:
    """The manifest's ``normalisation`` from openpi-style statistics.

    Args:
        kind: ``mean_std`` or ``quantile``.
        norm_stats: ``{"state": {...}, "actions": {...}}`` holding ``mean``/``std``
            or ``q01``/``q99`` (the inner dict of openpi's ``norm_stats.json``);
            longer vectors are cut to ``n``.
        n: the robot's dimensions (``len(joint_names)``).
        delta_actions: per dimension, actions relative to the state (default none).

    Raises:
        ConfigError: a statistic is missing or shorter than ``n``.
    """
    if kind not in NORM_STATS:
        raise ConfigError(f"normalisation kind = {kind!r}, expected one of {tuple(NORM_STATS)}")
    section: dict[str, Any] = {"kind": kind, "epsilon": NORM_EPSILON}
    for part in ("state", "actions"):
        stats = norm_stats.get(part)
        if not isinstance(stats, Mapping):
            raise ConfigError(f"norm_stats.{part} is missing")
        section[part] = {}
        for key in NORM_STATS[kind]:
            if key not in stats:
                raise ConfigError(f"norm_stats.{part}.{key} is missing ({kind} needs it)")
            values = np.asarray(stats[key], dtype=np.float64).ravel()
            if values.size < n:
                raise ConfigError(
                    f"norm_stats.{part}.{key} has {values.size} values, expected >= {n} "
                    "(one per joint_names entry)"
                )
            section[part][key] = values[:n].tolist()
    delta = [False] * n if delta_actions is None else [bool(d) for d in delta_actions]
    if len(delta) != n:
        raise ConfigError(f"delta_actions has {len(delta)} entries, expected {n}")
    section["delta_actions"] = delta
    return section


def image_slots(config: Any, camera_map: Mapping[str, str | None]) -> list[dict[str, Any]]:
    """``[{"name": slot, "camera": robot camera or None}]`` in the checkpoint's slot order.

    Raises:
        CameraMapError: (a :class:`ConfigError`) ``camera_map`` names a slot the model
            lacks, maps no camera, or maps one camera twice.
    """
    return host.image_slots(config.image_slots, camera_map)


def pi0_contract(
    config: Any,
    *,
    joint_names: Sequence[str],
    camera_map: Mapping[str, str | None],
    dt_action_s: float,
    norm_stats: Mapping[str, Mapping[str, Sequence[float]]] | None = None,
    delta_actions: Sequence[bool] | None = None,
    source: dict[str, Any] | None = None,
    normalisation: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The manifest's fields besides the stages and the exporter (see the module docstring).

    Args:
        norm_stats: openpi-style statistics (see :func:`normalisation_section`),
            normalised with the architecture's own kind and epsilon ...
        normalisation: ... or the manifest's section itself (a policy directory's).

    Raises:
        ConfigError: a bad camera map or statistics.
    """
    n = len(joint_names)
    if not 0 < n <= config.action_dim:
        raise ConfigError(
            f"joint_names has {n} entries, expected 1 to action_dim = {config.action_dim}"
        )
    if normalisation is None:
        normalisation = normalisation_section(
            normalisation_kind(config), norm_stats or {}, n, delta_actions
        )
    return host.prefix_flow_contract(
        config,
        architecture=architecture_name(config),
        stage_order=host.STAGE_NAMES,
        output=OUTPUT,
        slots=image_slots(config, camera_map),
        images={"resize": "pad"},
        tokenizer={"kind": "sentencepiece", "file": TOKENIZER_FILE},
        prompt=prompt_format(config),
        state_dim=config.action_dim,
        chunk_horizon=config.action_horizon,
        normalisation=normalisation,
        joint_names=joint_names,
        dt_action_s=dt_action_s,
        source=source,
    )


def statistics_normalisation(
    config: Any, norm_stats: Mapping[str, Any], n: int, delta_actions: Sequence[bool] | None
) -> dict[str, Any]:
    """The manifest's ``normalisation`` from openpi statistics, with π0's / π0.5's kind."""
    return normalisation_section(normalisation_kind(config), norm_stats, n, delta_actions)


def tokenizer_files(tokenizer: Path) -> dict[str, Path]:
    """``{"tokenizer.model": the SentencePiece model}`` (PaliGemma's).

    Raises:
        ConfigError: no such file.
    """
    tokenizer = Path(tokenizer)
    if not tokenizer.is_file():
        raise ConfigError(f"tokenizer = {str(tokenizer)!r}: no such file")
    return {TOKENIZER_FILE: tokenizer}
