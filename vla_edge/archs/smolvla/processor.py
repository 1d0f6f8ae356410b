r"""SmolVLA's host side, as LeRobot's inference pipeline does it: the manifest's contract.

LeRobot: ``src/lerobot/policies/smolvla/modeling_smolvla.py`` and ``processor_smolvla.py``.

* ``host.images``: the checkpoint's slots (LeRobot's feature names,
  ``observation.images.*``) fed by robot cameras or ``null`` (a black image, masked: the
  ``-1`` image and zero mask LeRobot gives a missing camera), ``resize: pad_top_left``
  with ``resample: bilinear`` (LeRobot's ``resize_with_pad``: torch bilinear on [0, 1]
  floats, zeros on the left and top), then ``* 2 - 1`` (``pixel_range [-1, 1]``);
* ``host.token_ids``: a Hugging Face tokenizer directory (SmolVLM2's), copied beside the
  programs as ``tokenizer/``, prompt ``smolvla`` (the task with ``"\n"`` appended,
  truncated to and right-padded to ``tokenizer_max_length``); ``token_mask`` float 0/1;
* ``host.state`` / ``noise`` / ``prefix_*`` at the padded widths (``max_state_dim``,
  ``max_action_dim``: 32): the robot's ``N`` dimensions first, zeros after (LeRobot's
  ``pad_vector``);
* ``normalisation``: LeRobot's ``MEAN_STD`` (SmolVLA's default ``normalization_mapping``)
  with LeRobot's epsilon, :data:`NORM_EPSILON`, cut to the robot's ``N`` dimensions (a
  policy directory's: each part at its state or action space's width);
* ``output``: ``action_head.actions`` ``[1, chunk_size, 32]``, the first ``N`` decoded
  (a policy directory's: as many as it has action statistics).

Departures from LeRobot, each named once:

* The prompt is always padded to ``tokenizer_max_length`` (the program's fixed shape);
  LeRobot's default ``pad_language_to="longest"`` does not pad a batch of one. Padded
  slots are masked out of attention and do not advance the positions, so the actions are
  the same.
* LeRobot un-normalises ``MEAN_STD`` actions as ``x * std + mean``, the manifest's codec as
  ``x * (std + eps) + mean``: with ``eps = 1e-8`` the two differ by ``1e-8 * |x|``.
* The runners tokenize with the ``tokenizers`` library (no torch at run time), not
  ``transformers``' ``AutoTokenizer``; :func:`check_prompt_tokens` refuses, at export,
  a tokenizer directory for which the two disagree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vla_edge.archs import host
from vla_edge.archs.normalisation import codec_from_section
from vla_edge.core.errors import ConfigError, ManifestMismatchError, TokenizerMismatchError

ARCHITECTURE = "smolvla"
OUTPUT = "action_head.actions"
TOKENIZER_DIR = "tokenizer"
"""Where the Hugging Face tokenizer directory's files go, beside the programs."""
PROMPT = "smolvla"
NORM_EPSILON = 1e-8
"""LeRobot's epsilon: ``_NormalizationMixin.eps = 1e-8`` (``processor/normalize_processor.py``,
``(x - mean) / (std + eps)``); the pretrained SmolVLA processors save ``"eps": 1e-8``.
openpi's π0 uses 1e-6."""
STATE_KEYS = ("observation.state", "state")
ACTION_KEYS = ("action", "actions")
"""LeRobot's feature names of the statistics (``observation.state.mean``, ``action.std``),
or this package's part names."""
PROBE_PROMPTS = (
    "pick up the red block and put it in the bowl",
    "  Put_the cube\nin the BOWL ",
    "already ends with a newline\n",
    "stack " * 200,
    "déplace le cube à gauche ✓",
)
"""Prompts on which the runner's tokenizer must equal ``transformers``' (one is past any
``tokenizer_max_length``, so the truncation is compared too)."""


def image_slots(config: Any, camera_map: Mapping[str, str | None]) -> list[dict[str, Any]]:
    """``[{"name": slot, "camera": robot camera or None}]`` in the checkpoint's slot order.

    Raises:
        CameraMapError: ``camera_map`` names a slot the model lacks, maps no camera, or
            maps one camera twice.
    """
    return host.image_slots(config.image_slots, camera_map)


def _stat(stats: Mapping[str, Any], names: Sequence[str], stat: str, n: int) -> list[float]:
    """``stats[<name>.<stat>]`` or ``stats[<name>][<stat>]``, cut to ``n`` values."""
    for name in names:
        value = stats.get(f"{name}.{stat}")
        if value is None and isinstance(stats.get(name), Mapping):
            value = stats[name].get(stat)
        if value is not None:
            values = np.asarray(value, dtype=np.float64).ravel()
            if values.size < n:
                raise ConfigError(
                    f"normalisation statistic {name}.{stat} has {values.size} values, expected "
                    f">= {n} (one per joint_names entry)"
                )
            return values[:n].tolist()
    raise ConfigError(f"normalisation statistic {names[0]}.{stat} is missing (MEAN_STD needs it)")


def lerobot_normalisation(
    stats: Mapping[str, Any], n: int, delta_actions: Sequence[bool] | None = None
) -> dict[str, Any]:
    """The manifest's ``normalisation`` (``mean_std``, LeRobot's epsilon) from LeRobot statistics.

    Args:
        stats: the normaliser's state, ``{"observation.state.mean": [...],
            "action.std": [...], ...}`` (the processors' safetensors keys), or nested
            ``{"state": {"mean", "std"}, "actions": {...}}``; cut to ``n`` dimensions.
        n: the robot's dimensions (``len(joint_names)``).
        delta_actions: per dimension, actions relative to the state (default none).

    Raises:
        ConfigError: a statistic is missing or shorter than ``n``.
    """
    delta = [False] * n if delta_actions is None else [bool(d) for d in delta_actions]
    if len(delta) != n:
        raise ConfigError(f"delta_actions has {len(delta)} entries, expected {n}")
    return {
        "kind": "mean_std",
        "epsilon": NORM_EPSILON,
        "state": {s: _stat(stats, STATE_KEYS, s, n) for s in ("mean", "std")},
        "actions": {s: _stat(stats, ACTION_KEYS, s, n) for s in ("mean", "std")},
        "delta_actions": delta,
    }


def smolvla_contract(
    config: Any,
    *,
    joint_names: Sequence[str],
    camera_map: Mapping[str, str | None],
    dt_action_s: float,
    normalisation: Mapping[str, Any],
    source: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The manifest's fields besides the stages and the exporter (see the module docstring).

    Args:
        normalisation: the manifest's section, each part at its own width
            (:func:`lerobot_normalisation`: the robot's ``N`` dimensions, or a policy
            directory's ``manifest_normalisation()``); checked against the joints and
            the spaces when the manifest is written.

    Raises:
        CameraMapError: a bad camera map.
        ConfigError: more joints than the model's action width, or a bad normalisation.
    """
    n = len(joint_names)
    if not 0 < n <= min(config.action_dim, config.state_dim):
        raise ConfigError(
            f"joint_names has {n} entries, expected 1 to min(action_dim, state_dim) = "
            f"{min(config.action_dim, config.state_dim)}"
        )
    slots = image_slots(config, camera_map)
    try:
        codec_from_section(dict(normalisation), state_dim=None, action_dim=None)
    except ManifestMismatchError as exc:
        raise ConfigError(f"normalisation: {exc}") from exc
    return host.prefix_flow_contract(
        config,
        architecture=ARCHITECTURE,
        stage_order=host.STAGE_NAMES,
        output=OUTPUT,
        slots=slots,
        images={"resize": "pad_top_left", "resample": "bilinear"},
        tokenizer={"kind": "huggingface", "file": TOKENIZER_DIR},
        prompt=PROMPT,
        state_dim=config.state_dim,
        chunk_horizon=config.chunk_size,
        normalisation=normalisation,
        joint_names=joint_names,
        dt_action_s=dt_action_s,
        source=source,
    )


def statistics_normalisation(
    config: Any, stats: Mapping[str, Any], n: int, delta_actions: Sequence[bool] | None
) -> dict[str, Any]:
    """The manifest's ``normalisation`` from LeRobot statistics (SmolVLA's ``MEAN_STD``)."""
    return lerobot_normalisation(stats, n, delta_actions)


def tokenizer_files(directory: str | Path) -> dict[str, Path]:
    """The files of a Hugging Face tokenizer directory that are copied, by export path.

    Each is copied as ``tokenizer/<name>`` beside the programs.

    Raises:
        TokenizerMismatchError: not a directory holding ``tokenizer.json``.
    """
    from vla_edge.archs.policy_tokenizer import HF_TOKENIZER_FILES

    directory = Path(directory)
    if not (directory / host.HF_TOKENIZER_JSON).is_file():
        what = (
            "is a file"
            if directory.is_file()
            else "has no tokenizer.json"
            if directory.is_dir()
            else "not found"
        )
        raise TokenizerMismatchError(
            f"tokenizer = {str(directory)!r}: {what}; expected a Hugging Face tokenizer "
            f"directory with {host.HF_TOKENIZER_JSON} (SmolVLM2's; nothing is fetched)"
        )
    return {
        f"{TOKENIZER_DIR}/{name}": directory / name
        for name in HF_TOKENIZER_FILES
        if (directory / name).is_file()
    }


def check_tokenizer(directory: Path, config: Any) -> None:
    """:func:`check_prompt_tokens` at the config's ``max_token_len``."""
    check_prompt_tokens(directory, config.max_token_len)


def check_prompt_tokens(directory: str | Path, max_len: int) -> None:
    r"""Refuse a tokenizer directory for which the runner's tokens differ from LeRobot's.

    LeRobot tokenizes with ``transformers``: ``AutoTokenizer.from_pretrained(dir)(task +
    "\n", max_length=L, truncation=True, padding=..., padding_side="right")``; the
    runners use :class:`~vla_edge.archs.smolvla.prompt.SmolVLAPromptTokenizer` (``tokenizers``
    only). Both encode :data:`PROBE_PROMPTS` (padded to ``L`` on both sides here).

    Raises:
        TokenizerMismatchError: the directory has no pad token, or a probe's ids or mask
            differ (the message names the prompt and both id lists).
    """
    from transformers import AutoTokenizer

    from vla_edge.archs.smolvla.prompt import SmolVLAPromptTokenizer, smolvla_text

    directory = Path(directory)
    try:
        ours = SmolVLAPromptTokenizer(directory, max_len)
    except ManifestMismatchError as exc:
        raise TokenizerMismatchError(f"tokenizer = {str(directory)!r}: {exc}") from exc
    reference = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    for prompt in PROBE_PROMPTS:
        want = reference(
            smolvla_text(prompt),
            max_length=max_len,
            truncation=True,
            padding="max_length",
            padding_side="right",
        )
        ids, mask = ours.encode(prompt)
        if ids[0].tolist() != list(want["input_ids"]) or mask[0].astype(int).tolist() != list(
            want["attention_mask"]
        ):
            raise TokenizerMismatchError(
                f"tokenizer = {str(directory)!r}: prompt {prompt!r} tokenizes to "
                f"{ids[0].tolist()} (mask {int(mask.sum())} tokens) in the runner but to "
                f"{list(want['input_ids'])} (mask {sum(want['attention_mask'])} tokens) with "
                "transformers' AutoTokenizer; this tokenizer cannot be run without transformers"
            )
