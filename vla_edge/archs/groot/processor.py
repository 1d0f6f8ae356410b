"""GR00T's host side as a policy directory states it (no torch).

Upstream: NVIDIA/Isaac-GR00T ``Gr00tN1d7Processor`` (``StateActionProcessor``), read by
:func:`vla_edge.archs.groot.checkpoint.n17_normalisation` into its own section: per joint
group, ``2 * (x - lo) / max(hi - lo, 1e-8) - 1`` with ``(lo, hi)`` = ``(min, max)`` or
``(q01, q99)`` (``use_percentiles``), or ``(x - mean) / std`` for the groups under
``mean_std_embedding_keys``.

:func:`policy_normalisation` writes that section in the policy directory's schema
(:mod:`vla_edge.archs.normalisation`), whose ``quantile`` kind is the same affine map
``(x - q01) / (q99 - q01 + epsilon) * 2 - 1``. With ``epsilon = 0`` every upstream kind is
exactly one such map:

* ``min_max``: ``q01 = min``, ``q99 = max``;
* ``quantile``: ``q01``, ``q99`` as they are;
* ``mean_std``: ``q01 = mean - std``, ``q99 = mean + std``
  (``(x - mean + std) / (2 std) * 2 - 1 = (x - mean) / std``);
* upstream's range floor: where ``hi - lo < 1e-8``, ``q99 = q01 + 1e-8``.

Each part keeps its groups (``key``, upstream ``kind``, ``dim``) and the section its
``embodiment``, ``clip`` and ``relative_action_keys``, for the record.

Departures from upstream, each named once:

* ``clip_outliers``: upstream clips the normalised state to [-1, 1]; the policy
  directory's codec does not clip the state (a state outside the statistics' range reaches
  the model unclipped). The flag is kept as ``clip``.
* Relative action groups (``use_relative_action``, upstream's ``relative_action``
  statistics): ``delta_actions`` stays false; the robot executes them through the action
  space (``eef_delta`` for relative end-effector groups: ``vla-edge import --action-space``).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vla_edge.archs.groot import prompt as _prompt
from vla_edge.core.errors import NormStatsError

RANGE_FLOOR = 1e-8
"""Upstream's smallest normalisation range (``np.maximum(max - min, 1e-8)``)."""
POLICY_KIND = "quantile"
"""The policy directory's kind every GR00T group is written as (an affine map to [-1, 1])."""


def affine_bounds(group: Mapping[str, Any], where: str) -> tuple[list[float], list[float]]:
    """``(lo, hi)`` of one upstream group such that its map is ``2 (x - lo) / (hi - lo) - 1``.

    Raises:
        NormStatsError: an unknown kind.
    """
    kind = group.get("kind")
    if kind == "min_max":
        lo, hi = list(group["min"]), list(group["max"])
    elif kind == "quantile":
        lo, hi = list(group["q01"]), list(group["q99"])
    elif kind == "mean_std":
        lo = [m - s for m, s in zip(group["mean"], group["std"], strict=True)]
        hi = [m + s for m, s in zip(group["mean"], group["std"], strict=True)]
    else:
        raise NormStatsError(
            f"{where}: group {group.get('key')!r} kind = {kind!r}, expected min_max, quantile "
            "or mean_std"
        )
    hi = [h if h - low >= RANGE_FLOOR else low + RANGE_FLOOR for low, h in zip(lo, hi, strict=True)]
    return lo, hi


def policy_part(part: Mapping[str, Any], where: str) -> dict[str, Any]:
    """One upstream part (its ``groups``) as the policy directory's ``quantile`` part."""
    q01: list[float] = []
    q99: list[float] = []
    groups = []
    for group in part["groups"]:
        lo, hi = affine_bounds(group, where)
        q01 += lo
        q99 += hi
        groups.append({"key": group["key"], "kind": group["kind"], "dim": int(group["dim"])})
    return {"kind": POLICY_KIND, "q01": q01, "q99": q99, "groups": groups}


def policy_normalisation(section: Mapping[str, Any], where: str) -> dict[str, Any]:
    """An upstream section in the policy directory's schema (see the module docstring).

    Args:
        section: :func:`~vla_edge.archs.groot.checkpoint.n17_normalisation`'s.
        where: the file the statistics came from (named in errors).
    """
    state = policy_part(section["state"], f"{where}: state")
    actions = policy_part(section["actions"], f"{where}: actions")
    return {
        "kind": POLICY_KIND,
        "epsilon": 0.0,
        "state": state,
        "actions": actions,
        "delta_actions": [False] * len(actions["q01"]),
        "embodiment": section["embodiment"],
        "clip": bool(section["clip"]),
        "relative_action_keys": list(section.get("relative_action_keys") or []),
    }


# -- the manifest's contract ---------------------------------------------------------------

ARCHITECTURE = "groot"
OUTPUT = "action_head.actions"
TOKENIZER_DIR = "tokenizer"
"""Where the Hugging Face tokenizer directory's files go, beside the programs."""
PROMPT = _prompt.PROMPT
"""The instruction, then the chat template's closing (``<|im_end|>\\n<|im_start|>assistant\\n``),
right-padded to ``max_token_len``: registered by :mod:`.arch`, encoded by :mod:`.prompt`."""
STAGE_ORDER = ("vision_encoder", "fusion", "action_head")


def groot_contract(
    config: Any,
    *,
    joint_names: Any,
    camera_map: Mapping[str, str | None],
    dt_action_s: float,
    normalisation: Mapping[str, Any],
    source: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The manifest's fields besides the stages and the exporter.

    The host side is the VLM-prefix, flow-matching one of :func:`vla_edge.archs.host.
    prefix_flow_contract` at GR00T's widths (``max_state_dim``, ``max_action_dim``), with a
    Hugging Face tokenizer (Qwen3-VL's) and the :data:`PROMPT` format.

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
        architecture=ARCHITECTURE,
        stage_order=STAGE_ORDER,
        output=OUTPUT,
        slots=slots,
        images={"resize": "pad"},
        tokenizer={"kind": "huggingface", "file": TOKENIZER_DIR},
        prompt=PROMPT,
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
    for part in ("state", "actions"):
        if len(section[part]["q01"]) < n:
            raise NormStatsError(
                f"GR00T statistics: {part} has {len(section[part]['q01'])} dimensions, fewer "
                f"than the {n} joints"
            )
        section[part] = {k: section[part][k][:n] for k in ("q01", "q99")}
    mask = [False] * n if delta_actions is None else [bool(d) for d in delta_actions][:n]
    section["delta_actions"] = mask + [False] * (n - len(mask))
    return section


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
    "POLICY_KIND",
    "PROMPT",
    "RANGE_FLOOR",
    "affine_bounds",
    "groot_contract",
    "policy_normalisation",
    "policy_part",
    "statistics_normalisation",
    "tokenizer_files",
]


def chat_token_ids(config: Any) -> dict[str, tuple[str, int]]:
    """The chat layout's special tokens the model's config fixes: token -> (field, id).

    The fusion stage writes them itself (the template's opening, each image slot's vision
    start, end and image tokens); the host writes ``<|im_start|>`` again in the closing.
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
    :func:`chat_token_ids` the tokenizer has must carry the config's id (``<|im_start|>``
    must be there: the closing needs it), and every id the tokenizer can write must be a
    row of the embedding table.

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
