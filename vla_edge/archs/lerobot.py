"""LeRobot's pretrained layout, the parts every LeRobot policy shares.

``PreTrainedPolicy.save_pretrained`` writes ``config.json`` (``"type": "pi0" | "pi05" |
"smolvla" | ...``, the ``input_features`` / ``output_features`` with their shapes) and
``model.safetensors``; the processor pipelines ``policy_preprocessor.json`` /
``policy_postprocessor.json`` name, per stateful step, a safetensors file (``state_file``)
holding the normaliser's statistics under ``"{feature}.{stat}"`` (``observation.state.mean``,
``action.q01``). Older checkpoints keep the statistics inside ``model.safetensors``
(``normalize_inputs.buffer_observation_state.mean``, ``unnormalize_outputs.buffer_action.std``;
LeRobot's ``processor/migrate_policy_normalization.py`` moves them out). Facts and sources:
``reference/vla-checkpoints.md`` section 3.

:func:`normalisation` turns either into the policy directory's ``normalisation`` section:
the normaliser's mode per feature (``MEAN_STD``, ``QUANTILES``; ``MIN_MAX`` and ``QUANTILE10``
are the quantile formula over min/max and q10/q90, recorded with their mode) and its ``eps``
(``1e-8``). LeRobot adds eps to the quantile width only when the width is 0 and leaves it out
of the mean/std inverse; at ``1e-8`` either difference is below float32's resolution, so the
section keeps openpi's formula.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vla_edge.archs.common import WEIGHTS_NAME, read_json, read_tensors
from vla_edge.archs.policy_stats import SECTION_STATS, make_normalisation, stat_vector
from vla_edge.core.errors import NormStatsError

PREPROCESSOR_NAME = "policy_preprocessor.json"
POSTPROCESSOR_NAME = "policy_postprocessor.json"
EPSILON = 1e-8
"""LeRobot's ``NormalizerProcessorStep.eps`` default."""
STATS_PREFIXES = ("normalize_inputs.", "normalize_targets.", "unnormalize_outputs.")
"""Older checkpoints' in-weights statistics (buffers, not model parameters)."""
IMAGES_PREFIX = "observation.images."

MODES = {
    # LeRobot NormalizationMode -> (section kind, low stat, high stat)
    "MEAN_STD": ("mean_std", "mean", "std"),
    "QUANTILES": ("quantile", "q01", "q99"),
    "MIN_MAX": ("quantile", "min", "max"),
    "QUANTILE10": ("quantile", "q10", "q90"),
}


def stats_keys(header: Mapping[str, Any]) -> list[str]:
    """The keys of ``header`` that are older checkpoints' statistics buffers."""
    return [k for k in header if k.startswith(STATS_PREFIXES)]


def feature_dim(config_json: Mapping[str, Any], feature: str) -> int | None:
    """The last dimension of ``feature``'s declared shape (input or output features)."""
    for group in ("input_features", "output_features"):
        spec = (config_json.get(group) or {}).get(feature)
        if isinstance(spec, Mapping) and spec.get("shape"):
            return int(spec["shape"][-1])
    return None


def visual_features(config_json: Mapping[str, Any]) -> list[str]:
    """The ``VISUAL`` input features, in ``config.json``'s order (``observation.images.*``)."""
    features = config_json.get("input_features") or {}
    return [
        key
        for key, spec in features.items()
        if isinstance(spec, Mapping) and spec.get("type") == "VISUAL"
    ]


def _part(
    stats: Mapping[str, np.ndarray], feature: str, mode: str, dim: int | None, where: str
) -> dict[str, Any]:
    if mode == "IDENTITY":
        if dim is None:
            raise NormStatsError(f"{where}: {feature} is IDENTITY but its dimension is unknown")
        return {"kind": "mean_std", "mean": [0.0] * dim, "std": [1.0] * dim, "mode": mode}
    if mode not in MODES:
        raise NormStatsError(
            f"{where}: {feature} normalisation mode {mode!r} is not one of {('IDENTITY', *MODES)}"
        )
    kind, lo_name, hi_name = MODES[mode]
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


def _step(path: Path, registry_name: str) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    data = read_json(path, path.name, NormStatsError)
    steps = data.get("steps") if isinstance(data, Mapping) else None
    if not isinstance(steps, list):
        raise NormStatsError(f"{path}: no 'steps' list")
    for step in steps:
        if isinstance(step, Mapping) and step.get("registry_name") == registry_name:
            return dict(step)
    return None


def _relative_mask(path: Path) -> list[bool] | None:
    """LeRobot's ``relative_actions_processor``: the dims predicted relative to the state."""
    step = _step(path, "relative_actions_processor")
    cfg = (step or {}).get("config") or {}
    if not cfg.get("enabled"):
        return None
    exclude = [str(n).lower() for n in cfg.get("exclude_joints") or [] if n]
    names = cfg.get("action_names")
    if not exclude or names is None:
        return [True] * 4096
    return [not any(t == str(n).lower() or t in str(n).lower() for t in exclude) for n in names]


def _in_weights_stats(weights: Path, keys: Sequence[str]) -> dict[str, np.ndarray]:
    """Older checkpoints' buffers as ``"{feature}.{stat}"`` (the output un-normaliser's action)."""
    stats: dict[str, np.ndarray] = {}
    for key, value in read_tensors(weights, keys, NormStatsError).items():
        prefix = next(p for p in STATS_PREFIXES if key.startswith(p))
        name, _, stat = key[len(prefix) :].removeprefix("buffer_").rpartition(".")
        feature = f"{name.replace('_', '.')}.{stat}"
        # input normalisation for the state, output un-normalisation for the action
        if prefix == "normalize_targets." and feature in stats:
            continue
        stats[feature] = value
    return stats


def normalisation(
    path: Path,
    header_stats: Sequence[str],
    config_json: Mapping[str, Any],
    default_mode: str,
    delta_actions: Sequence[int] | None = None,
) -> tuple[dict[str, Any], str]:
    """The processors' statistics (or the older in-weights ones) → ``(section, file)``.

    Args:
        header_stats: the weights file's statistics keys (:func:`stats_keys`).
        default_mode: the policy's default mode for the state and the action
            (``MEAN_STD`` for π0 and SmolVLA, ``QUANTILES`` for π0.5).
        delta_actions: action dimensions predicted relative to the state; ``None``: from
            a ``relative_actions_processor`` step, if any.

    Raises:
        NormStatsError: no statistics, a missing statistic, a non-finite value or a width
            that is not positive.
    """
    pre_path, post_path = path / PREPROCESSOR_NAME, path / POSTPROCESSOR_NAME
    pre = _step(pre_path, "normalizer_processor")
    post = _step(post_path, "unnormalizer_processor")
    delta: Sequence[int] | Sequence[bool] | None = delta_actions
    if pre is not None or post is not None:
        parts = {}
        eps = EPSILON
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
                "STATE" if name == "state" else "ACTION", default_mode
            )
            eps = float(cfg.get("eps", eps))
            stats_file = path / str(step["state_file"])
            files.append(stats_file.name)
            if not stats_file.is_file():
                raise NormStatsError(f"{stats_file}: statistics file not found")
            parts[name] = _part(
                read_tensors(stats_file, None, NormStatsError),
                feature,
                mode,
                feature_dim(config_json, feature),
                str(stats_file),
            )
        if delta is None and pre_path.is_file():
            delta = _relative_mask(pre_path)
        section = make_normalisation(parts["state"], parts["actions"], eps, delta, str(path))
        return section, " ".join(dict.fromkeys(files))
    if header_stats:
        weights = path / WEIGHTS_NAME
        stats = _in_weights_stats(weights, header_stats)
        modes = config_json.get("normalization_mapping") or {}
        parts = {
            name: _part(
                stats,
                feature,
                modes.get(group, default_mode),
                feature_dim(config_json, feature),
                str(weights),
            )
            for name, feature, group in (
                ("state", "observation.state", "STATE"),
                ("actions", "action", "ACTION"),
            )
        }
        section = make_normalisation(parts["state"], parts["actions"], EPSILON, delta, str(weights))
        return section, WEIGHTS_NAME
    raise NormStatsError(
        f"{path}: no normalisation statistics: expected {PREPROCESSOR_NAME} / "
        f"{POSTPROCESSOR_NAME} naming a statistics file, or normalize_inputs.* keys in "
        f"{WEIGHTS_NAME} (older LeRobot checkpoints)"
    )


__all__ = [
    "EPSILON",
    "MODES",
    "POSTPROCESSOR_NAME",
    "PREPROCESSOR_NAME",
    "STATS_PREFIXES",
    "feature_dim",
    "normalisation",
    "stats_keys",
    "visual_features",
]
