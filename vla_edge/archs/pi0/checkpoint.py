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
* LeRobot: the normaliser's mode per feature and its ``eps`` (``1e-8``), read by
  :mod:`vla_edge.archs.lerobot` (shared with SmolVLA); π0 defaults to ``MEAN_STD``, π0.5 to
  ``QUANTILES``.

The header reading, key report and streaming copy are :mod:`vla_edge.archs.common`'s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from vla_edge.archs import lerobot
from vla_edge.archs.common import (
    CONFIG_NAME,
    WEIGHTS_NAME,
    Checkpoint,
    ImportOptions,
    compare_keys,
    format_key_report,
    load_tensors_into,
    policy_weights_path,
    read_config_json,
    read_header,
    read_json,
    weights_dtypes,
)
from vla_edge.archs.common import (
    copy_weights as copy_weights,
)
from vla_edge.archs.common import layer_count as _layer_count
from vla_edge.archs.pi0.config import IMAGE_SLOTS, PALIGEMMA_VOCAB_SIZE, GemmaSize, Pi0Config
from vla_edge.archs.pi0.layout import (
    EMBED_TOKENS,
    TIED,
    UNUSED,
    from_openpi,
    lerobot_to_openpi,
    openpi_file_shapes,
)
from vla_edge.archs.policy_stats import SECTION_STATS, make_normalisation, stat_vector
from vla_edge.core.errors import (
    CheckpointError,
    CheckpointKeysError,
    ConfigError,
    NormStatsError,
    UnknownArchitectureError,
)

NORM_STATS_NAME = "norm_stats.json"
PREPROCESSOR_NAME = lerobot.PREPROCESSOR_NAME
POSTPROCESSOR_NAME = lerobot.POSTPROCESSOR_NAME
LAYOUTS = ("openpi", "lerobot")
ARCHITECTURES = ("pi0", "pi05")

OPENPI_EPSILON = 1e-6
"""openpi's ``transforms.Normalize`` epsilon (mean/std and quantile alike)."""
LEROBOT_EPSILON = lerobot.EPSILON
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

_LM = "paligemma_with_expert.paligemma.model.language_model.layers."
_EXPERT = "paligemma_with_expert.gemma_expert.model.layers."
_VISION = "paligemma_with_expert.paligemma.model.vision_tower.vision_model."
_LM_HEAD = "paligemma_with_expert.paligemma.lm_head.weight"
_LEROBOT_DEFAULT_MODES = {"pi0": "MEAN_STD", "pi05": "QUANTILES"}

Pi0Checkpoint = Checkpoint
"""A checked π0 / π0.5 checkpoint (``config`` is a :class:`Pi0Config`)."""


# -- layouts -------------------------------------------------------------------------------


def policy_file_shapes(config: Pi0Config) -> dict[str, tuple[int, ...]]:
    """Keys and shapes of a policy directory's ``model.safetensors``.

    openpi's file layout without the expert's unread ``lm_head``: the module's state
    dict minus the tied ``embed_tokens`` (its twin ``lm_head.weight`` is written).
    """
    return {k: s for k, s in openpi_file_shapes(config).items() if k not in UNUSED}


# -- the header ----------------------------------------------------------------------------


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


def _vocab_size(shapes: Mapping[str, tuple[int, ...]], paligemma: GemmaSize) -> int:
    """Rows of the token table: the expert's unread ``lm_head`` when the file keeps it.

    That twin of PaliGemma's table is never shrunk with it, so a shrunk PaliGemma table
    is reported on its own key, not the expert's. At PaliGemma's real size (Gemma 2B)
    the rows are openpi's fixed 257,152 (its config sets them; its loader refuses
    others); the small test sizes may have fewer.

    Raises:
        CheckpointError: a Gemma 2B checkpoint whose table has another number of rows.
    """
    expert_head = shapes.get(UNUSED[0])
    head = shapes.get(_LM_HEAD, shapes.get(EMBED_TOKENS))
    rows = (expert_head or head or (PALIGEMMA_VOCAB_SIZE,))[0]
    if paligemma.width == GemmaSize.gemma_2b().width and rows != PALIGEMMA_VOCAB_SIZE:
        raise CheckpointError(
            f"{_LM_HEAD} has {rows} rows, expected {PALIGEMMA_VOCAB_SIZE}: PaliGemma's "
            "token table (Gemma 2B) is fixed at that size in openpi and LeRobot, so the "
            "checkpoint's embedding was cut or is not PaliGemma's"
        )
    return rows


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
    vocab_size = _vocab_size(shapes, pg)
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
        "vocab_size": vocab_size,
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
    stats = {k: k for k in (lerobot.stats_keys(header) if layout == "lerobot" else [])}
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
    data = read_json(file, NORM_STATS_NAME, NormStatsError)
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


def lerobot_normalisation(
    path: Path,
    header_stats: Mapping[str, str],
    config_json: Mapping[str, Any],
    architecture: str,
    options: ImportOptions,
) -> tuple[dict[str, Any], str]:
    """LeRobot's processor statistics (or the older in-weights ones) → ``(section, file)``."""
    return lerobot.normalisation(
        path,
        list(header_stats),
        config_json,
        _LEROBOT_DEFAULT_MODES[architecture],
        options.delta_actions,
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


def detect(config_json: Mapping[str, Any], path: Path) -> str | None:
    """The registry's question for a ``config.json`` without LeRobot's ``type``.

    ``pi0`` or ``pi05`` (``pi05`` in the directory's own name) when it is openpi's layout
    (``paligemma_variant`` or an ``assets/`` directory), else ``None``.
    """
    if "type" in config_json:
        return None
    if "paligemma_variant" in config_json or (path / "assets").is_dir():
        return "pi05" if "pi05" in path.name else "pi0"
    return None


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
    config_json = read_config_json(path)
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
        weights_dtypes=weights_dtypes(header, list(key_map.values())),
        asset_id=asset_id,
        stats_file=stats_file,
        config_json=config_json,
        action_feature_dim=(
            lerobot.feature_dim(config_json, "action") if layout == "lerobot" else None
        ),
    )


def load_pi0_weights(
    policy_dir: Any, model: torch.nn.Module, only: torch.nn.Module | None = None
) -> None:
    """Load a policy directory's weights into ``model`` (a :class:`Pi0Model`), strictly.

    ``policy_dir`` is a :class:`~vla_edge.archs.policy_dir.PolicyDir`, a policy directory's
    path or its ``model.safetensors``. The header is checked against
    :func:`policy_file_shapes` of ``model.config`` before a tensor is read; tensors are
    read one at a time and cast to each parameter's dtype
    (:func:`~vla_edge.archs.common.load_tensors_into`). ``only``: a part of ``model`` (one
    stage); just its tensors are read.

    Raises:
        CheckpointKeysError: a missing, unexpected or mis-shaped key.
    """
    weights_path = policy_weights_path(policy_dir)
    config: Pi0Config = model.config  # type: ignore[assignment]
    header = read_header(weights_path)
    report = compare_keys({k: v[0] for k, v in header.items()}, policy_file_shapes(config))
    if not report.ok:
        raise CheckpointKeysError(format_key_report(report, str(weights_path)))
    # the file's key of each of ours: from_openpi's renaming applied to the names alone
    file_keys = from_openpi({key: key for key in header})
    load_tensors_into(model, weights_path, file_keys, only)
