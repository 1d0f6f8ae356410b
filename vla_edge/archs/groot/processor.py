"""GR00T's host side as a policy directory states it (no torch).

Upstream: NVIDIA/Isaac-GR00T ``Gr00tN1d7Processor`` and its ``StateActionProcessor``
(``processing_gr00t_n1d7.py`` @c5437fa6 and @2d1e82fe,
``gr00t/data/state_action/state_action_processor.py`` @98a45fe6, ``gr00t/data/utils.py``
@066d1674), read by :func:`vla_edge.archs.groot.checkpoint.n17_normalisation` into its own
section. Per joint group, with ``(lo, hi)`` = ``(min, max)`` or ``(q01, q99)``
(``use_percentiles``):

* state: ``2 * (x - lo) / (hi - lo) - 1``, but 0 on a dimension whose range is empty
  (``np.isclose(hi, lo)``), then clipped to [-1, 1] when ``clip_outliers``; a group under
  ``mean_std_embedding_keys`` is ``(x - mean) / std``, never clipped; every dimension is 0
  when the processor or the embodiment's state config sets ``exclude_state``;
* actions out: ``(clip(a, -1, 1) + 1) / 2 * (hi - lo) + lo``, or ``a * std + mean``
  (unclipped) for a ``mean_std`` group; a relative group (``use_relative_action``) reads
  its ``relative_action`` statistics, and always their ``min`` / ``max``: upstream's
  ``use_percentiles`` picks ``q01`` / ``q99`` for the absolute groups only.

:func:`policy_normalisation` writes that section in the policy directory's schema
(:mod:`vla_edge.archs.normalisation`), whose ``quantile`` kind is the affine map
``(x - q01) / (q99 - q01 + epsilon) * 2 - 1``. With ``epsilon = 0`` every upstream kind is
exactly one such map:

* ``min_max``: ``q01 = min``, ``q99 = max``;
* ``quantile``: ``q01``, ``q99`` as they are;
* ``mean_std``: ``q01 = mean - std``, ``q99 = mean + std``
  (``(x - mean + std) / (2 std) * 2 - 1 = (x - mean) / std``);
* a state dimension upstream reads as 0 (empty range, ``exclude_state``):
  ``q01 = -ZERO_SPAN``, ``q99 = ZERO_SPAN`` (:data:`ZERO_SPAN`), a map that gives exactly
  0.0 in float64 for every reading below ``2**47`` in magnitude;
* an action dimension with ``hi - lo < 1e-8``: ``q99 = q01 + 1e-8`` (the schema wants a
  positive width; the decoded value moves by at most 1e-8).

``state.clip`` marks the dimensions upstream clips (the ``min_max`` / ``quantile`` groups
when ``clip_outliers``), and ``actions.low`` / ``actions.high`` bound the decoded value to
``[q01, q99]`` on those groups, which is upstream's clip of the model's output to [-1, 1]
(``mean_std`` groups: :data:`NO_BOUND`). Each part keeps its groups (``key``, upstream
``kind``, ``dim``) and the section its ``embodiment``, ``clip`` and
``relative_action_keys``, for the record.

Departures from upstream, each named once:

* Relative action groups (``use_relative_action``): ``delta_actions`` stays false, so the
  chunk holds what the model predicts relative to the state; the robot executes it
  through the action space (``eef_delta`` for relative end-effector groups: ``vla-edge
  import --action-space``), where upstream adds the state's last reading to a joint group
  (``JointActionChunk.to_absolute_chunking``) or composes the pose for an end-effector
  group. Per-step relative statistics (a ``[horizon, dim]`` list per statistic, as
  upstream's ``gr00t/data/stats.py`` writes them) are refused at import
  (:class:`~vla_edge.core.errors.NormStatsError`): the schema holds one value per
  dimension.
* Images: the programs take each camera through upstream's albumentations evaluation
  transform (``build_image_transformations_albumentations`` in ``image_augmentations.py``,
  called by ``Gr00tN1d7Processor`` at @2d1e82fe): ``host.images.resize = center_crop``,
  ``resample = cv2_area``, the processor config's crop fraction and ``letterbox = true``
  (:func:`image_fit`, :func:`vla_edge.archs.groot.checkpoint.image_fit_fields`,
  :func:`vla_edge.runners.image_resize.fit_center_crop`): pad to a square, shortest side
  to the model's, centre crop, resize again, each resize ``INTER_AREA``. At @2d1e82fe the
  processor hands the transform no ``letter_box_transform`` (it stores the key, unread)
  and the transform of that generation (as stored at @8cb8bd76) always begins with the
  pad; later versions (@1852a8c1) make the pad optional, read from that key, which is not
  followed here. The pixels are upstream's as far as the two OpenCV builds' ``INTER_AREA``
  agree (the runner's ``opencv-python-headless``, upstream's own), and Qwen3-VL's
  processor then leaves an ``image_target_size`` that is a multiple of 32 as it is. What
  still differs:

  - ``use_albumentations`` false (the processor's default): upstream's transform is
    torchvision's pad / ``Resize(image_target_size)`` / ``CenterCrop(image_crop_size)`` /
    ``Resize``, antialiased bilinear, crop offsets ``round((s - c) / 2)``; here the same
    crop ratio through ``INTER_AREA`` with offsets ``(s - c) // 2`` (the filter differs,
    the offset by up to one pixel);
  - ``shortest_image_edge`` other than the model's image side (albumentations) is refused
    at import (``CheckpointError``): upstream would feed images of that side;
  - a manifest with ``letterbox: false`` (as later upstream versions would want) refuses
    a non-square camera by name (``InvalidObservationError``) rather than pad it:
    upstream would hand Qwen3-VL that non-square image, which the square program cannot
    take.
* Chunk length: upstream returns the first ``len(delta_indices)`` steps of the
  embodiment's action config (``decode_action``), the rest of the model's
  ``action_horizon`` being steps it was trained to ignore (``action_mask``); the chunk
  here carries all ``action_horizon`` steps (the programs, the noise and the chunk share
  that length), so a checkpoint whose action ``delta_indices`` are fewer is refused at
  import (``checkpoint.check_action_steps``) rather than hand the controller untrained
  steps.
* ``apply_sincos_state_encoding`` with ``sin_cos_embedding_keys``, a ``mean_std`` group
  with a zero ``std`` (upstream passes the raw value), and a video or state of several
  steps (``delta_indices``) are refused at import.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vla_edge.archs.groot import prompt as _prompt
from vla_edge.archs.normalisation import NO_BOUND
from vla_edge.core.errors import NormStatsError

RANGE_FLOOR = 1e-8
"""The smallest action range written (the schema wants ``q99 - q01 > 0``)."""
ZERO_SPAN = 2.0**100
"""Half the range of a state dimension upstream reads as 0: ``(x + ZERO_SPAN) /
(2 ZERO_SPAN) * 2 - 1`` is exactly 0.0 in float64 whenever ``|x| < 2**47``."""
POLICY_KIND = "quantile"
"""The policy directory's kind every GR00T group is written as (an affine map to [-1, 1])."""


def affine_bounds(group: Mapping[str, Any], where: str) -> tuple[list[float], list[float]]:
    """``(lo, hi)`` of one upstream group such that its map is ``2 (x - lo) / (hi - lo) - 1``.

    The statistics as they are: :func:`policy_part` handles an empty range.

    Raises:
        NormStatsError: an unknown kind.
    """
    kind = group.get("kind")
    if kind == "min_max":
        return list(group["min"]), list(group["max"])
    if kind == "quantile":
        return list(group["q01"]), list(group["q99"])
    if kind == "mean_std":
        lo = [m - s for m, s in zip(group["mean"], group["std"], strict=True)]
        hi = [m + s for m, s in zip(group["mean"], group["std"], strict=True)]
        return lo, hi
    raise NormStatsError(
        f"{where}: group {group.get('key')!r} kind = {kind!r}, expected min_max, quantile "
        "or mean_std"
    )


def policy_part(
    part: Mapping[str, Any], where: str, *, state: bool, clip: bool, zero: bool = False
) -> dict[str, Any]:
    """One upstream part (its ``groups``) as the policy directory's ``quantile`` part.

    Args:
        state: the state part (``clip`` marks ``state.clip``; an empty range reads as 0),
            else the actions (``low`` / ``high`` bound the decoded value).
        clip: upstream's ``clip_outliers`` (state only; the actions always clip).
        zero: every dimension reads as 0 (upstream's ``exclude_state``; state only).
    """
    q01: list[float] = []
    q99: list[float] = []
    clipped: list[bool] = []
    groups = []
    for group in part["groups"]:
        lo, hi = (np.asarray(v, dtype=np.float64) for v in affine_bounds(group, where))
        affine = group["kind"] != "mean_std"
        if state:
            empty = np.full(lo.shape, True) if zero else affine & np.isclose(hi, lo)
            lo = np.where(empty, -ZERO_SPAN, lo)
            hi = np.where(empty, ZERO_SPAN, hi)
        else:
            hi = np.where(hi - lo < RANGE_FLOOR, lo + RANGE_FLOOR, hi)
        q01 += lo.tolist()
        q99 += hi.tolist()
        clipped += [affine and (clip if state else True)] * lo.size
        groups.append({"key": group["key"], "kind": group["kind"], "dim": int(group["dim"])})
    out: dict[str, Any] = {"kind": POLICY_KIND, "q01": q01, "q99": q99}
    if state:
        out["clip"] = clipped
    else:
        out["low"] = [lo if c else -NO_BOUND for lo, c in zip(q01, clipped, strict=True)]
        out["high"] = [hi if c else NO_BOUND for hi, c in zip(q99, clipped, strict=True)]
    out["groups"] = groups
    return out


def policy_normalisation(section: Mapping[str, Any], where: str) -> dict[str, Any]:
    """An upstream section in the policy directory's schema (see the module docstring).

    Args:
        section: :func:`~vla_edge.archs.groot.checkpoint.n17_normalisation`'s.
        where: the file the statistics came from (named in errors).
    """
    clip = bool(section["clip"])
    state = policy_part(
        section["state"],
        f"{where}: state",
        state=True,
        clip=clip,
        zero=bool(section.get("exclude_state")),
    )
    actions = policy_part(section["actions"], f"{where}: actions", state=False, clip=clip)
    return {
        "kind": POLICY_KIND,
        "epsilon": 0.0,
        "state": state,
        "actions": actions,
        "delta_actions": [False] * len(actions["q01"]),
        "embodiment": section["embodiment"],
        "clip": clip,
        "relative_action_keys": list(section.get("relative_action_keys") or []),
    }


# -- the manifest's contract ---------------------------------------------------------------

ARCHITECTURE = "groot"
OUTPUT = "action_head.actions"
TOKENIZER_DIR = "tokenizer"
"""Where the Hugging Face tokenizer directory's files go, beside the programs."""
PROMPT = _prompt.PROMPT
"""The instruction, then the end of the user turn (``<|im_end|>\\n``), right-padded to
``max_token_len``: registered by :mod:`.arch`, encoded by :mod:`.prompt`."""
STAGE_ORDER = ("vision_encoder", "fusion", "action_head")


def image_fit(config: Any) -> dict[str, Any]:
    """``host.images``' fitting fields for ``config``: upstream's evaluation transform.

    ``resize: center_crop`` with ``resample: cv2_area``, the config's
    ``image_crop_fraction`` and ``image_letterbox`` (true for an imported N1.7 checkpoint;
    N1.5's config has none: its ``VideoCrop`` pads nothing, so false)
    (:func:`vla_edge.runners.image_resize.fit_center_crop`).
    """
    return {
        "resize": "center_crop",
        "resample": "cv2_area",
        "crop_fraction": float(config.image_crop_fraction),
        "letterbox": bool(getattr(config, "image_letterbox", False)),
    }


def groot_contract(
    config: Any,
    *,
    joint_names: Any,
    camera_map: Mapping[str, str | None],
    dt_action_s: float,
    normalisation: Mapping[str, Any],
    source: dict[str, Any] | None = None,
    architecture: str = ARCHITECTURE,
    prompt: str = PROMPT,
) -> dict[str, Any]:
    """The manifest's fields besides the stages and the exporter.

    The host side is the VLM-prefix, flow-matching one of :func:`vla_edge.archs.host.
    prefix_flow_contract` at GR00T's widths (``max_state_dim``, ``max_action_dim``), with a
    Hugging Face tokenizer (Qwen3-VL's) and the :data:`PROMPT` format; N1.5
    (:mod:`.n15_programs`) passes its ``architecture`` and ``prompt`` (Eagle 2.5's).

    Raises:
        CameraMapError: a bad camera map.
        ConfigError: more joints than the model's action or state width, or a bad
            normalisation.
    """
    from types import SimpleNamespace

    from vla_edge.archs import host
    from vla_edge.archs.normalisation import codec_from_section
    from vla_edge.core.errors import ConfigError, ManifestMismatchError

    n = len(joint_names)
    if not 0 < n <= min(config.max_action_dim, config.max_state_dim):
        raise ConfigError(
            f"joint_names has {n} entries, expected 1 to min(max_action_dim, max_state_dim) = "
            f"{min(config.max_action_dim, config.max_state_dim)}"
        )
    slots = host.image_slots(config.image_slots, camera_map)
    try:
        codec_from_section(dict(normalisation), state_dim=None, action_dim=None)
    except ManifestMismatchError as exc:
        raise ConfigError(f"normalisation: {exc}") from exc
    view = SimpleNamespace(
        vision=config.vision,
        n_slots=config.n_slots,
        max_token_len=config.max_token_len,
        action_dim=config.max_action_dim,
        flow_steps=config.flow_steps,
        model_dump=config.model_dump,
    )
    return host.prefix_flow_contract(
        view,
        architecture=architecture,
        stage_order=STAGE_ORDER,
        output=OUTPUT,
        slots=slots,
        images=image_fit(config),
        tokenizer={"kind": "huggingface", "file": TOKENIZER_DIR},
        prompt=prompt,
        state_dim=config.max_state_dim,
        chunk_horizon=config.action_horizon,
        normalisation=normalisation,
        joint_names=joint_names,
        dt_action_s=dt_action_s,
        source=source,
    )


def statistics_normalisation(
    config: Any, stats: Mapping[str, Any], n: int, delta_actions: Any
) -> dict[str, Any]:
    """The manifest's ``normalisation`` from upstream statistics, cut to ``n`` dimensions.

    ``stats``: :func:`~vla_edge.archs.groot.checkpoint.n17_normalisation`'s section.

    Raises:
        NormStatsError: ``stats`` is not such a section, or narrower than ``n``.
    """
    if not isinstance(stats, Mapping) or "groups" not in (stats.get("state") or {}):
        raise NormStatsError(
            "GR00T statistics: expected the section read from a checkpoint's statistics.json "
            "(checkpoint.n17_normalisation), with state.groups and actions.groups"
        )
    section = policy_normalisation(stats, "statistics")
    kept = {"state": ("q01", "q99", "clip"), "actions": ("q01", "q99", "low", "high")}
    for part, fields in kept.items():
        if len(section[part]["q01"]) < n:
            raise NormStatsError(
                f"GR00T statistics: {part} has {len(section[part]['q01'])} dimensions, fewer "
                f"than the {n} joints"
            )
        section[part] = {k: section[part][k][:n] for k in fields}
    mask = [False] * n if delta_actions is None else [bool(d) for d in delta_actions][:n]
    mask += [False] * (n - len(mask))
    section["delta_actions"] = mask
    section["actions"] = unbounded_where(section["actions"], mask)
    return section


def unbounded_where(actions: Mapping[str, Any], delta: Sequence[bool]) -> dict[str, Any]:
    """``actions`` with ``low`` / ``high`` lifted to :data:`NO_BOUND` on the delta dimensions.

    Upstream bounds the model's relative output; the codec bounds the absolute target, after
    the state is added, where the relative range does not apply.
    """
    out = dict(actions)
    out["low"] = [-NO_BOUND if d else v for v, d in zip(actions["low"], delta, strict=True)]
    out["high"] = [NO_BOUND if d else v for v, d in zip(actions["high"], delta, strict=True)]
    return out


def tokenizer_files(directory: str | Path) -> dict[str, Path]:
    """A Hugging Face tokenizer directory's files, each as ``tokenizer/<name>``.

    Raises:
        TokenizerMismatchError: not a directory holding ``tokenizer.json`` (Qwen3-VL-2B's:
            N1.7 checkpoints ship none; nothing is fetched).
    """
    from vla_edge.archs import host
    from vla_edge.archs.policy_tokenizer import HF_TOKENIZER_FILES
    from vla_edge.core.errors import TokenizerMismatchError

    directory = Path(directory)
    if not (directory / host.HF_TOKENIZER_JSON).is_file():
        raise TokenizerMismatchError(
            f"tokenizer = {str(directory)!r}: no {host.HF_TOKENIZER_JSON}; expected Qwen3-VL-2B's "
            "Hugging Face tokenizer directory (GR00T N1.7 checkpoints ship none)"
        )
    return {
        f"{TOKENIZER_DIR}/{name}": directory / name
        for name in HF_TOKENIZER_FILES
        if (directory / name).is_file()
    }


__all__ = [
    "NO_BOUND",
    "POLICY_KIND",
    "PROMPT",
    "RANGE_FLOOR",
    "affine_bounds",
    "groot_contract",
    "image_fit",
    "policy_normalisation",
    "policy_part",
    "statistics_normalisation",
    "tokenizer_files",
    "unbounded_where",
    "ZERO_SPAN",
]


def chat_token_ids(config: Any) -> dict[str, tuple[str, int]]:
    """The chat layout's special tokens the model's config fixes: token -> (field, id).

    The fusion stage writes them itself (the template's opening, each image slot's vision
    start, end and image tokens).
    """
    return {
        "<|im_start|>": ("lead_token_ids[0]", int(config.lead_token_ids[0])),
        "<|vision_start|>": ("vision_start_id", int(config.vision_start_id)),
        "<|vision_end|>": ("vision_end_id", int(config.vision_end_id)),
        "<|image_pad|>": ("image_token_id", int(config.image_token_id)),
    }


def check_tokenizer(directory: Path, config: Any) -> None:
    """Refuse a tokenizer directory whose ids do not agree with the model's config.

    The host's tokens come from the tokenizer and the fusion stage's constant tokens from
    the config, so the two must number the chat layout alike: each special token of
    :func:`chat_token_ids` the tokenizer has must carry the config's id, and every id the
    tokenizer can write must be a row of the embedding table.

    Raises:
        TokenizerMismatchError: the prompt tokenizer refuses the directory (no
            ``tokenizer.json``, no pad token, a closing token absent, fewer slots than the
            closing), a special token's id differs from the config's, or an id is past the
            embedding table.
    """
    from tokenizers import Tokenizer

    from vla_edge.archs import host
    from vla_edge.core.errors import ManifestMismatchError, TokenizerMismatchError

    directory = Path(directory)
    where = f"tokenizer = {str(directory)!r}"
    try:
        _prompt.GrootPromptTokenizer(directory, config.max_token_len)
    except ManifestMismatchError as exc:
        raise TokenizerMismatchError(f"{where}: {exc}") from exc
    tokenizer = Tokenizer.from_file(str(directory / host.HF_TOKENIZER_JSON))
    for token, (field, expected) in chat_token_ids(config).items():
        found = tokenizer.token_to_id(token)
        if found is not None and found != expected:
            raise TokenizerMismatchError(
                f"{where}: {token} is id {found}, but the model's {field} = {expected}; pass "
                "the tokenizer the checkpoint was trained with (Qwen3-VL-2B's for N1.7)"
            )
    largest = max(tokenizer.get_vocab(with_added_tokens=True).values())
    if largest >= config.text.vocab_size:
        raise TokenizerMismatchError(
            f"{where}: token id {largest} is past the embedding table's "
            f"{config.text.vocab_size} rows (text.vocab_size)"
        )
