"""Read a π0 / π0.5 checkpoint directory: header check, sizes, statistics, weights.

Two published layouts (facts and sources in ``reference/vla-checkpoints.md``):

* **openpi** (``examples/convert_jax_model_to_pytorch.py``): ``model.safetensors`` in
  ``PI0Pytorch``'s keys, ``config.json`` (``paligemma_variant``, ``action_expert_variant``,
  ``action_dim``, ``action_horizon``, ``precision``) and ``assets/<asset_id>/norm_stats.json``.
  π0 vs π0.5 is not in the files: openpi's converter looks for ``"pi05"`` in the checkpoint
  path; here the directory's own name is looked at (a parent called ``pi05_runs`` must not
  turn a π0 into a π0.5), and ``architecture=`` wins over both.
* **LeRobot** (``PreTrainedPolicy.save_pretrained``): ``config.json`` with ``"type": "pi0" |
  "pi05"``, ``model.safetensors`` with every key under ``model.``, and the normaliser's
  statistics in the safetensors file that ``policy_preprocessor.json`` /
  ``policy_postprocessor.json`` name (``state_file``; keys ``observation.state.mean``,
  ``action.q01``, ...). Older checkpoints keep them inside ``model.safetensors``
  (``normalize_inputs.buffer_observation_state.mean``, ``unnormalize_outputs.buffer_action.std``).

:func:`read_checkpoint` reads only the safetensors header
(``safe_open(...).get_slice(key).get_shape()``) and the small JSON files, derives the
:class:`Pi0Config` (Gemma sizes from the variant names, layer counts and the SigLIP size from
the header's keys and shapes), and checks every key and shape against that config before a
single tensor is read: a mismatch is a :class:`CheckpointKeysError` listing the missing,
unexpected and mis-shaped keys. :func:`copy_weights` then streams the tensors into a file under this
package's names (:func:`policy_file_shapes`), and :func:`load_pi0_weights` loads a policy
directory's weights strictly.

Normalisation (the ``normalisation`` section of the policy directory):

* openpi: π0 ``mean_std`` and π0.5 ``quantile`` (``use_quantile_norm = model_type != PI0``),
  epsilon ``1e-6``: ``(x - mean) / (std + eps)`` and ``(x - q01) / (q99 - q01 + eps) * 2 - 1``.
* LeRobot: the normaliser's mode per feature (``MEAN_STD``, ``QUANTILES``; ``MIN_MAX`` and
  ``QUANTILE10`` are the quantile formula over min/max and q10/q90, recorded with their mode),
  its ``eps`` (``1e-8``). LeRobot adds eps to the quantile width only when the width is 0 and
  leaves it out of the mean/std inverse; at ``1e-8`` either difference is below float32's
  resolution, so the section keeps openpi's formula.
"""

from __future__ import annotations

import json
import math
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError, safe_open

from vla_edge.archs.pi0.config import IMAGE_SLOTS, PALIGEMMA_VOCAB_SIZE, GemmaSize, Pi0Config
from vla_edge.archs.pi0.layout import (
    EMBED_TOKENS,
    TIED,
    UNUSED,
    KeyReport,
    compare_keys,
    from_openpi,
    lerobot_to_openpi,
    openpi_file_shapes,
)
from vla_edge.archs.policy_dir import SECTION_STATS, make_normalisation, stat_vector
from vla_edge.core.errors import (
    CheckpointError,
    CheckpointKeysError,
    ConfigError,
    NormStatsError,
    UnknownArchitectureError,
)

WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "config.json"
NORM_STATS_NAME = "norm_stats.json"
PREPROCESSOR_NAME = "policy_preprocessor.json"
POSTPROCESSOR_NAME = "policy_postprocessor.json"
LAYOUTS = ("openpi", "lerobot")
ARCHITECTURES = ("pi0", "pi05")

OPENPI_EPSILON = 1e-6
"""openpi's ``transforms.Normalize`` epsilon (mean/std and quantile alike)."""
LEROBOT_EPSILON = 1e-8
"""LeRobot's ``NormalizerProcessorStep.eps`` default."""

VARIANTS = {
    "gemma_2b": GemmaSize.gemma_2b,
    "gemma_2b_lora": GemmaSize.gemma_2b,
    "gemma_300m": GemmaSize.gemma_300m,
    "gemma_300m_lora": GemmaSize.gemma_300m,
    "dummy": GemmaSize.dummy,
}
"""openpi's ``gemma.get_config`` variant names; the depth is taken from the header's keys."""

SIGLIP_HEADS_BY_WIDTH = {1152: 16}
"""SigLIP heads for a hidden width (So400m/14, what openpi's converter hard-codes)."""

COPY_BLOCK_BYTES = 64 << 20
"""Bytes copied at a time when rewriting the weights (:func:`copy_weights`)."""
DTYPE_NAMES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64"}
"""safetensors dtype names → torch's."""

KEYS_SHOWN = 12
"""Keys listed per kind in a :class:`CheckpointKeysError` message (the counts are all given)."""

_LM = "paligemma_with_expert.paligemma.model.language_model.layers."
_EXPERT = "paligemma_with_expert.gemma_expert.model.layers."
_VISION = "paligemma_with_expert.paligemma.model.vision_tower.vision_model."
_LM_HEAD = "paligemma_with_expert.paligemma.lm_head.weight"
_LEROBOT_STATS_PREFIXES = ("normalize_inputs.", "normalize_targets.", "unnormalize_outputs.")
_MODES = {
    # LeRobot NormalizationMode -> (section kind, low stat, high stat)
    "MEAN_STD": ("mean_std", "mean", "std"),
    "QUANTILES": ("quantile", "q01", "q99"),
    "MIN_MAX": ("quantile", "min", "max"),
    "QUANTILE10": ("quantile", "q10", "q90"),
}
_LEROBOT_DEFAULT_MODES = {"pi0": "MEAN_STD", "pi05": "QUANTILES"}


@dataclass(frozen=True)
class ImportOptions:
    """What the user may say about a checkpoint where its files are silent or wrong.

    Every field left ``None`` is read from the checkpoint; a field the checkpoint
    cannot give is a :class:`CheckpointError` naming the option to pass.
    """

    architecture: str | None = None
    asset_id: str | None = None
    paligemma_variant: str | None = None
    expert_variant: str | None = None
    vision_heads: int | None = None
    action_horizon: int | None = None
    discrete_state_input: bool | None = None
    delta_actions: tuple[int, ...] | None = None
    """Action dimensions the model predicts relative to the state (openpi ``DeltaActions``)."""


@dataclass(frozen=True)
class Pi0Checkpoint:
    """A checked checkpoint: its config, statistics and where each tensor lives."""

    path: Path
    layout: str
    architecture: str
    config: Pi0Config
    normalisation: dict[str, Any]
    weights_path: Path
    key_map: dict[str, str]
    """This package's key (:func:`policy_file_shapes`) → the file's key."""
    weights_dtypes: tuple[str, ...]
    asset_id: str | None = None
    stats_file: str | None = None
    """The file the statistics came from, relative to :attr:`path`."""
    config_json: dict[str, Any] = field(default_factory=dict)


# -- layouts -------------------------------------------------------------------------------


def policy_file_shapes(config: Pi0Config) -> dict[str, tuple[int, ...]]:
    """Keys and shapes of a policy directory's ``model.safetensors``.

    openpi's file layout without the expert's unread ``lm_head``: the module's state
    dict minus the tied ``embed_tokens`` (its twin ``lm_head.weight`` is written).
    """
    return {k: s for k, s in openpi_file_shapes(config).items() if k not in UNUSED}


def format_key_report(report: KeyReport, source: str, limit: int = KEYS_SHOWN) -> str:
    """A :class:`CheckpointKeysError` message: counts of each kind, the first ``limit`` keys."""

    def listed(items: Sequence[str]) -> str:
        shown = ", ".join(items[:limit])
        more = len(items) - limit
        return shown + (f", ... and {more} more" if more > 0 else "")

    counts = (
        f"{len(report.missing)} missing, {len(report.unexpected)} unexpected, "
        f"{len(report.misshaped)} mis-shaped"
    )
    lines = [f"{source}: the keys do not fit ({counts})"]
    if report.missing:
        lines.append(f"  missing ({len(report.missing)}): {listed(report.missing)}")
    if report.unexpected:
        lines.append(f"  unexpected ({len(report.unexpected)}): {listed(report.unexpected)}")
    if report.misshaped:
        items = [f"{k} {list(found)} (expected {list(exp)})" for k, found, exp in report.misshaped]
        lines.append(f"  mis-shaped ({len(items)}): {listed(items)}")
    return "\n".join(lines)


# -- the header ----------------------------------------------------------------------------


def read_header(path: Path) -> dict[str, tuple[tuple[int, ...], str]]:
    """``key -> (shape, dtype)`` of a safetensors file, from its header only."""
    if not path.is_file():
        raise CheckpointError(f"{path}: weights file not found")
    try:
        with safe_open(str(path), framework="pt") as f:
            out = {}
            for key in f.keys():
                sl = f.get_slice(key)
                out[key] = (tuple(int(d) for d in sl.get_shape()), str(sl.get_dtype()))
            return out
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: not a readable safetensors file: {exc}") from exc


def _read_json(path: Path, what: str, error: type[CheckpointError] = CheckpointError) -> Any:
    if not path.is_file():
        raise error(f"{path}: {what} not found")
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise error(f"{path}: {what} is not readable JSON: {exc}") from exc


def _layer_count(shapes: Mapping[str, Any], prefix: str) -> int | None:
    pattern = re.compile(re.escape(prefix) + r"(\d+)\.")
    found = {int(m.group(1)) for k in shapes if (m := pattern.match(k))}
    return max(found) + 1 if found else None


def _gemma_size(variant: Any, depth: int | None, field_name: str, option: str) -> GemmaSize:
    if variant is None:
        raise CheckpointError(
            f"{CONFIG_NAME}: no {field_name}; pass {option} ({', '.join(VARIANTS)})"
        )
    if variant not in VARIANTS:
        raise CheckpointError(
            f"{CONFIG_NAME}: {field_name} = {variant!r} is not a known variant "
            f"({', '.join(VARIANTS)}); pass {option}"
        )
    size = VARIANTS[variant]()
    if depth is None:
        return size
    return GemmaSize(**{**size.model_dump(), "depth": depth})


def _vision_size(shapes: Mapping[str, tuple[int, ...]], heads: int | None) -> dict[str, Any]:
    """SigLIP's sizes from the header: patch embedding, position table, layers, MLP."""
    patch = shapes.get(_VISION + "embeddings.patch_embedding.weight")
    table = shapes.get(_VISION + "embeddings.position_embedding.weight")
    fc1 = shapes.get(_VISION + "encoder.layers.0.mlp.fc1.weight")
    depth = _layer_count(shapes, _VISION + "encoder.layers.")
    if patch is None or table is None or fc1 is None or depth is None or len(patch) != 4:
        return {}  # the key comparison against the default size names what is missing
    hidden, patch_size, n_tokens = patch[0], patch[2], table[0]
    side = math.isqrt(n_tokens)
    if side * side != n_tokens:
        raise CheckpointError(
            f"{WEIGHTS_NAME}: the SigLIP position table has {n_tokens} rows, not a square "
            "number of patches"
        )
    if heads is None:
        heads = SIGLIP_HEADS_BY_WIDTH.get(hidden)
        if heads is None:
            raise CheckpointError(
                f"{WEIGHTS_NAME}: the SigLIP width {hidden} does not fix its number of attention "
                f"heads (known widths: {sorted(SIGLIP_HEADS_BY_WIDTH)}); pass --vision-heads"
            )
    return {
        "hidden": hidden,
        "depth": depth,
        "num_heads": heads,
        "mlp_dim": fc1[0],
        "patch_size": patch_size,
        "image_size": side * patch_size,
    }


def _first(config_json: Mapping[str, Any], *names: str) -> Any:
    for name in names:
        if config_json.get(name) is not None:
            return config_json[name]
    return None


def _lerobot_image_slots(config_json: Mapping[str, Any]) -> tuple[str, ...]:
    """LeRobot's slots: the VISUAL input features in order, then ``empty_cameras`` blanks."""
    features = config_json.get("input_features") or {}
    slots = [
        key.removeprefix("observation.images.").removeprefix("observation.")
        for key, spec in features.items()
        if isinstance(spec, Mapping) and spec.get("type") == "VISUAL"
    ]
    slots += [f"empty_camera_{i}" for i in range(int(config_json.get("empty_cameras") or 0))]
    return tuple(slots) or IMAGE_SLOTS


def infer_config(
    shapes: Mapping[str, tuple[int, ...]],
    config_json: Mapping[str, Any],
    layout: str,
    architecture: str,
    options: ImportOptions,
) -> Pi0Config:
    """The :class:`Pi0Config` a checkpoint describes (``shapes`` in openpi's key names)."""
    pi05 = architecture == "pi05"
    pg = _gemma_size(
        options.paligemma_variant or config_json.get("paligemma_variant"),
        _layer_count(shapes, _LM),
        "paligemma_variant",
        "--paligemma-variant",
    )
    ex = _gemma_size(
        options.expert_variant or config_json.get("action_expert_variant"),
        _layer_count(shapes, _EXPERT),
        "action_expert_variant",
        "--expert-variant",
    )
    head = shapes.get(_LM_HEAD, shapes.get(EMBED_TOKENS))
    in_proj = shapes.get("action_in_proj.weight")
    action_dim = _first(config_json, "action_dim", "max_action_dim")
    if action_dim is None and in_proj is not None and len(in_proj) == 2:
        action_dim = in_proj[1]
    horizon = options.action_horizon or _first(config_json, "action_horizon", "chunk_size")
    if horizon is None:
        raise CheckpointError(
            f"{CONFIG_NAME}: no action_horizon (openpi) or chunk_size (LeRobot); "
            "pass --action-horizon"
        )
    max_tokens = _first(config_json, "max_token_len", "tokenizer_max_length")
    fields: dict[str, Any] = {
        "pi05": pi05,
        "paligemma": pg,
        "expert": ex,
        "projection_dim": pg.width,
        "vocab_size": head[0] if head else PALIGEMMA_VOCAB_SIZE,
        "action_dim": action_dim if action_dim is not None else 32,
        "action_horizon": horizon,
        "max_token_len": max_tokens if max_tokens is not None else (200 if pi05 else 48),
        "image_slots": _lerobot_image_slots(config_json) if layout == "lerobot" else IMAGE_SLOTS,
    }
    vision = _vision_size(shapes, options.vision_heads)
    if vision:
        fields["vision"] = vision
    steps = _first(config_json, "num_inference_steps", "num_steps")
    if steps is not None:
        fields["flow_steps"] = steps
    discrete = options.discrete_state_input
    if discrete is None:
        discrete = config_json.get("discrete_state_input")
    if discrete is not None and pi05:
        fields["discrete_state_input"] = bool(discrete)
    try:
        return Pi0Config(**fields)
    except ConfigError as exc:
        raise CheckpointError(
            f"{CONFIG_NAME} and {WEIGHTS_NAME} describe no valid {architecture} model: {exc}"
        ) from exc


def to_openpi_names(
    header: Mapping[str, Any], layout: str, pi05: bool
) -> tuple[dict[str, str], dict[str, str]]:
    """Map the file's keys to openpi's names.

    Returns:
        ``(openpi name -> file key, LeRobot in-weights statistic -> file key)``. The tied
        embedding is named ``lm_head.weight`` whichever twin the file holds.
    """
    stats = {k: k for k in header if layout == "lerobot" and k.startswith(_LEROBOT_STATS_PREFIXES)}
    weights = {k: k for k in header if k not in stats}
    if layout == "lerobot":
        weights = {new: old for new, old in lerobot_to_openpi(weights, pi05=pi05).items()}
    for key, twin in TIED.items():
        if twin in weights and (
            key not in weights or header[weights[key]] == header[weights[twin]]
        ):
            weights.setdefault(key, weights[twin])
            del weights[twin]
    return weights, stats


def check_keys(shapes: Mapping[str, tuple[int, ...]], config: Pi0Config, source: str) -> None:
    """Compare openpi-named ``shapes`` with ``config``'s file layout.

    The expert's unread ``lm_head`` may be absent. Raises :class:`CheckpointKeysError`;
    when the other architecture's keys fit, the message says to pass ``--architecture``.
    """

    def expected_for(cfg: Pi0Config) -> dict[str, tuple[int, ...]]:
        exp = openpi_file_shapes(cfg)
        return {k: s for k, s in exp.items() if k in shapes or k not in UNUSED}

    report = compare_keys(shapes, expected_for(config))
    if report.ok:
        return
    message = format_key_report(report, source)
    other = config.model_copy(update={"pi05": not config.pi05, "discrete_state_input": None})
    other_arch = "pi05" if other.pi05 else "pi0"
    other_report = compare_keys(shapes, expected_for(Pi0Config(**other.model_dump())))
    if len(other_report.missing) + len(other_report.unexpected) < len(report.missing) + len(
        report.unexpected
    ):
        message += f"\n  the keys are those of {other_arch}: pass --architecture {other_arch}"
    raise CheckpointKeysError(message)


# -- normalisation -------------------------------------------------------------------------


def _openpi_part(raw: Any, kind: str, where: str) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        raise NormStatsError(f"{where} is missing")
    lo_name, hi_name = SECTION_STATS[kind]
    out: dict[str, Any] = {"kind": kind}
    for name in (lo_name, hi_name):
        if raw.get(name) is None:
            raise NormStatsError(
                f"{where}.{name} is missing ({kind} normalisation needs {lo_name} and {hi_name})"
            )
        out[name] = stat_vector(raw[name], f"{where}.{name}")
    return out


def _find_asset(assets: Path, asset_id: str | None) -> tuple[str, Path]:
    if asset_id is not None:
        path = assets / asset_id / NORM_STATS_NAME
        if not path.is_file():
            raise NormStatsError(f"{path}: {NORM_STATS_NAME} not found (--asset-id {asset_id})")
        return asset_id, path
    found = sorted(assets.rglob(NORM_STATS_NAME)) if assets.is_dir() else []
    if not found:
        raise NormStatsError(
            f"{assets}/<asset_id>/{NORM_STATS_NAME}: not found (openpi keeps the "
            "normalisation statistics there)"
        )
    if len(found) > 1:
        ids = [str(p.parent.relative_to(assets)) for p in found]
        raise NormStatsError(
            f"{assets}: several assets hold {NORM_STATS_NAME} {ids}; pass --asset-id"
        )
    return str(found[0].parent.relative_to(assets)), found[0]


def openpi_normalisation(
    path: Path, pi05: bool, options: ImportOptions
) -> tuple[dict[str, Any], str, str]:
    """Openpi's ``assets/<asset_id>/norm_stats.json`` as ``(section, asset_id, file)``."""
    asset_id, file = _find_asset(path / "assets", options.asset_id)
    data = _read_json(file, NORM_STATS_NAME, NormStatsError)
    stats = data.get("norm_stats") if isinstance(data, Mapping) else None
    if not isinstance(stats, Mapping):
        raise NormStatsError(f"{file}: no 'norm_stats' object")
    kind = "quantile" if pi05 else "mean_std"
    parts = {
        name: _openpi_part(stats.get(name), kind, f"{file}: {name}")
        for name in ("state", "actions")
    }
    section = make_normalisation(
        parts["state"], parts["actions"], OPENPI_EPSILON, options.delta_actions, str(file)
    )
    return section, asset_id, str(file.relative_to(path))


def _lerobot_part(
    stats: Mapping[str, np.ndarray], feature: str, mode: str, dim: int | None, where: str
) -> dict[str, Any]:
    if mode == "IDENTITY":
        if dim is None:
            raise NormStatsError(f"{where}: {feature} is IDENTITY but its dimension is unknown")
        return {"kind": "mean_std", "mean": [0.0] * dim, "std": [1.0] * dim, "mode": mode}
    if mode not in _MODES:
        raise NormStatsError(
            f"{where}: {feature} normalisation mode {mode!r} is not one of {('IDENTITY', *_MODES)}"
        )
    kind, lo_name, hi_name = _MODES[mode]
    out: dict[str, Any] = {"kind": kind}
    section_lo, section_hi = SECTION_STATS[kind]
    for stat, name in ((lo_name, section_lo), (hi_name, section_hi)):
        key = f"{feature}.{stat}"
        if key not in stats:
            raise NormStatsError(
                f"{where}: {key} is missing ({mode} needs {lo_name} and {hi_name})"
            )
        out[name] = stat_vector(stats[key], f"{where}: {key}")
    if mode not in ("MEAN_STD", "QUANTILES"):
        out["mode"] = mode
    return out


def _read_stats_file(path: Path) -> dict[str, np.ndarray]:
    if not path.is_file():
        raise NormStatsError(f"{path}: statistics file not found")
    try:
        with safe_open(str(path), framework="numpy") as f:
            return {k: f.get_tensor(k) for k in f.keys()}
    except (SafetensorError, OSError, ValueError) as exc:
        raise NormStatsError(f"{path}: not a readable safetensors file: {exc}") from exc


def _normaliser_step(path: Path, registry_name: str) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    data = _read_json(path, path.name, NormStatsError)
    steps = data.get("steps") if isinstance(data, Mapping) else None
    if not isinstance(steps, list):
        raise NormStatsError(f"{path}: no 'steps' list")
    for step in steps:
        if isinstance(step, Mapping) and step.get("registry_name") == registry_name:
            return dict(step)
    return None


def _relative_mask(path: Path) -> list[bool] | None:
    """LeRobot's ``relative_actions_processor``: the dims predicted relative to the state."""
    step = _normaliser_step(path, "relative_actions_processor")
    cfg = (step or {}).get("config") or {}
    if not cfg.get("enabled"):
        return None
    exclude = [str(n).lower() for n in cfg.get("exclude_joints") or [] if n]
    names = cfg.get("action_names")
    if not exclude or names is None:
        return [True] * 4096
    return [not any(t == str(n).lower() or t in str(n).lower() for t in exclude) for n in names]


def _feature_dim(config_json: Mapping[str, Any], feature: str) -> int | None:
    for group in ("input_features", "output_features"):
        spec = (config_json.get(group) or {}).get(feature)
        if isinstance(spec, Mapping) and spec.get("shape"):
            return int(spec["shape"][-1])
    return None


def lerobot_normalisation(
    path: Path,
    header_stats: Mapping[str, str],
    config_json: Mapping[str, Any],
    architecture: str,
    options: ImportOptions,
) -> tuple[dict[str, Any], str]:
    """LeRobot's processor statistics (or the older in-weights ones) → ``(section, file)``."""
    pre_path, post_path = path / PREPROCESSOR_NAME, path / POSTPROCESSOR_NAME
    pre = _normaliser_step(pre_path, "normalizer_processor")
    post = _normaliser_step(post_path, "unnormalizer_processor")
    default = _LEROBOT_DEFAULT_MODES[architecture]
    delta: Sequence[int] | Sequence[bool] | None = options.delta_actions
    if pre is not None or post is not None:
        parts = {}
        eps = LEROBOT_EPSILON
        files = []
        for name, feature, step, json_path in (
            ("state", "observation.state", pre, pre_path),
            ("actions", "action", post or pre, post_path if post else pre_path),
        ):
            if step is None or not step.get("state_file"):
                raise NormStatsError(
                    f"{json_path}: no normalizer step with a state_file for {feature}"
                )
            cfg = step.get("config") or {}
            mode = (cfg.get("norm_map") or {}).get(
                "STATE" if name == "state" else "ACTION", default
            )
            eps = float(cfg.get("eps", eps))
            stats_file = path / str(step["state_file"])
            files.append(stats_file.name)
            parts[name] = _lerobot_part(
                _read_stats_file(stats_file),
                feature,
                mode,
                _feature_dim(config_json, feature),
                str(stats_file),
            )
        if delta is None and pre_path.is_file():
            delta = _relative_mask(pre_path)
        section = make_normalisation(parts["state"], parts["actions"], eps, delta, str(path))
        return section, " ".join(dict.fromkeys(files))
    if header_stats:
        weights = path / WEIGHTS_NAME
        with safe_open(str(weights), framework="numpy") as f:
            raw = {k: f.get_tensor(k) for k in header_stats}
        stats: dict[str, np.ndarray] = {}
        for key, value in raw.items():
            prefix = next(p for p in _LEROBOT_STATS_PREFIXES if key.startswith(p))
            name, _, stat = key[len(prefix) :].removeprefix("buffer_").rpartition(".")
            # input normalisation for the state, output un-normalisation for the action
            if prefix == "normalize_targets." and f"{name.replace('_', '.')}.{stat}" in stats:
                continue
            stats[f"{name.replace('_', '.')}.{stat}"] = value
        modes = config_json.get("normalization_mapping") or {}
        parts = {
            "state": _lerobot_part(
                stats,
                "observation.state",
                modes.get("STATE", default),
                _feature_dim(config_json, "observation.state"),
                str(weights),
            ),
            "actions": _lerobot_part(
                stats,
                "action",
                modes.get("ACTION", default),
                _feature_dim(config_json, "action"),
                str(weights),
            ),
        }
        section = make_normalisation(
            parts["state"], parts["actions"], LEROBOT_EPSILON, delta, str(weights)
        )
        return section, WEIGHTS_NAME
    raise NormStatsError(
        f"{path}: no normalisation statistics: expected {PREPROCESSOR_NAME} / "
        f"{POSTPROCESSOR_NAME} naming a statistics file, or normalize_inputs.* keys in "
        f"{WEIGHTS_NAME} (older LeRobot checkpoints)"
    )


# -- the whole checkpoint ------------------------------------------------------------------


def detect_layout(config_json: Mapping[str, Any], path: Path) -> str:
    """``lerobot`` when ``config.json`` has a ``type``, else ``openpi``."""
    if "type" in config_json:
        return "lerobot"
    if "paligemma_variant" in config_json or (path / "assets").is_dir():
        return "openpi"
    raise UnknownArchitectureError(
        f"{path / CONFIG_NAME}: neither a LeRobot config ('type': 'pi0' | 'pi05') nor an openpi "
        "one (paligemma_variant, action_expert_variant, and an assets/ directory)"
    )


def detect_architecture(
    config_json: Mapping[str, Any], layout: str, path: Path, override: str | None
) -> str:
    """``pi0`` or ``pi05``: the override, LeRobot's ``type``, or ``pi05`` in the directory name."""
    if override is not None:
        if override not in ARCHITECTURES:
            raise UnknownArchitectureError(
                f"architecture = {override!r} is not one of {ARCHITECTURES}"
            )
        return override
    if layout == "lerobot":
        kind = config_json.get("type")
        if kind not in ARCHITECTURES:
            raise UnknownArchitectureError(
                f"{path / CONFIG_NAME}: type = {kind!r} is not an architecture this package "
                f"builds {ARCHITECTURES}"
            )
        return str(kind)
    return "pi05" if "pi05" in path.name else "pi0"


def read_checkpoint(path: str | Path, options: ImportOptions | None = None) -> Pi0Checkpoint:
    """Check a checkpoint directory without reading a tensor (see the module docstring).

    Raises:
        CheckpointError: ``config.json`` or the weights absent or unreadable, or a size
            the files do not fix (the message names the option to pass).
        UnknownArchitectureError: neither π0 nor π0.5.
        CheckpointKeysError: missing, unexpected or mis-shaped keys.
        NormStatsError: statistics absent, unreadable, non-finite or of negative width.
    """
    options = options or ImportOptions()
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"{path}: checkpoint directory not found")
    config_json = _read_json(path / CONFIG_NAME, CONFIG_NAME)
    if not isinstance(config_json, dict):
        raise CheckpointError(f"{path / CONFIG_NAME}: top level must be an object")
    layout = detect_layout(config_json, path)
    architecture = detect_architecture(config_json, layout, path, options.architecture)
    weights_path = path / WEIGHTS_NAME
    header = read_header(weights_path)
    names, stats_keys = to_openpi_names(header, layout, architecture == "pi05")
    shapes = {k: header[v][0] for k, v in names.items()}
    config = infer_config(shapes, config_json, layout, architecture, options)
    names_note = (
        " (keys as openpi names them: LeRobot's 'model.' removed)" if layout == "lerobot" else ""
    )
    check_keys(shapes, config, f"{weights_path}{names_note}")
    key_map = {k: names[k] for k in policy_file_shapes(config)}
    if layout == "openpi":
        section, asset_id, stats_file = openpi_normalisation(path, config.pi05, options)
    else:
        asset_id = None
        section, stats_file = lerobot_normalisation(
            path, stats_keys, config_json, architecture, options
        )
    return Pi0Checkpoint(
        path=path,
        layout=layout,
        architecture=architecture,
        config=config,
        normalisation=section,
        weights_path=weights_path,
        key_map=key_map,
        weights_dtypes=tuple(
            sorted({DTYPE_NAMES.get(header[v][1], header[v][1]) for v in key_map.values()})
        ),
        asset_id=asset_id,
        stats_file=stats_file,
        config_json=config_json,
    )


def _raw_header(path: Path) -> tuple[dict[str, Any], int]:
    """A safetensors file's JSON header and where its data starts (plain JSON, no pickle)."""
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(length)), 8 + length


def copy_weights(
    checkpoint: Pi0Checkpoint, dst: Path, metadata: Mapping[str, str] | None = None
) -> None:
    """Write the checked tensors under this package's names to ``dst``, streaming.

    Each tensor's bytes are copied unchanged (same dtype, same byte order) in blocks of
    ``COPY_BLOCK_BYTES``, so a full-size checkpoint is rewritten without holding it in
    memory; the result is checked by reading its header back.
    """
    header, src_start = _raw_header(checkpoint.weights_path)
    entries: dict[str, Any] = {}
    spans = []
    offset = 0
    for ours in sorted(checkpoint.key_map):
        info = header[checkpoint.key_map[ours]]
        begin, end = (int(x) for x in info["data_offsets"])
        entries[ours] = {
            "dtype": info["dtype"],
            "shape": info["shape"],
            "data_offsets": [offset, offset + end - begin],
        }
        spans.append((src_start + begin, end - begin))
        offset += end - begin
    if metadata:
        entries["__metadata__"] = dict(metadata)
    text = json.dumps(entries, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(checkpoint.weights_path, "rb") as src, open(dst, "wb") as out:
        out.write(struct.pack("<Q", len(text)))
        out.write(text)
        for start, size in spans:
            src.seek(start)
            while size:
                block = src.read(min(size, COPY_BLOCK_BYTES))
                if not block:
                    raise CheckpointError(f"{checkpoint.weights_path}: truncated tensor data")
                out.write(block)
                size -= len(block)
    written = read_header(dst)
    if set(written) != set(checkpoint.key_map):
        raise CheckpointError(
            f"{dst}: written header lists {len(written)} tensors, not the checked ones"
        )


def load_pi0_weights(policy_dir: Any, model: torch.nn.Module) -> None:
    """Load a policy directory's weights into ``model`` (a :class:`Pi0Model`), strictly.

    ``policy_dir`` is a :class:`~vla_edge.archs.policy_dir.PolicyDir`, a policy directory's
    path or its ``model.safetensors``. The header is checked against
    :func:`policy_file_shapes` of ``model.config`` before a tensor is read; tensors are
    cast to each parameter's dtype.

    Raises:
        CheckpointKeysError: a missing, unexpected or mis-shaped key.
    """
    from safetensors.torch import load_file

    weights_path = Path(getattr(policy_dir, "weights_path", policy_dir))
    if weights_path.is_dir():
        weights_path = weights_path / WEIGHTS_NAME
    config: Pi0Config = model.config  # type: ignore[assignment]
    header = read_header(weights_path)
    report = compare_keys({k: v[0] for k, v in header.items()}, policy_file_shapes(config))
    if not report.ok:
        raise CheckpointKeysError(format_key_report(report, str(weights_path)))
    target = model.state_dict()
    tensors = from_openpi(load_file(str(weights_path)))
    tensors = {k: v.to(target[k].dtype) if k in target else v for k, v in tensors.items()}
    result = model.load_state_dict(tensors, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise CheckpointKeysError(
            format_key_report(
                KeyReport(tuple(result.missing_keys), tuple(result.unexpected_keys), ()),
                str(weights_path),
            )
        )
