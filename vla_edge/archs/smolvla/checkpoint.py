"""Read a SmolVLA checkpoint (LeRobot's layout): header check, sizes, statistics, weights.

LeRobot's ``SmolVLAPolicy.save_pretrained`` writes (``reference/vla-checkpoints.md`` §3):

* ``config.json``: ``"type": "smolvla"``, ``vlm_model_name``, ``num_vlm_layers``,
  ``expert_width_multiplier``, ``self_attn_every_n_layers``, ``attention_mode``,
  ``num_expert_layers``, ``chunk_size``, ``max_state_dim``, ``max_action_dim``,
  ``num_steps``, ``resize_imgs_with_padding``, ``tokenizer_max_length``,
  ``min_period`` / ``max_period``, ``empty_cameras``, ``add_image_special_tokens``, and the
  ``input_features`` (``observation.images.*`` are the image slots, in order) and
  ``output_features``;
* ``model.safetensors``: every key under ``model.`` (:mod:`~vla_edge.archs.smolvla.layout`),
  plus, in older checkpoints, the normaliser's buffers (``normalize_inputs.*``, ...), which
  are statistics, not weights: they are read as such and left out of the policy's weights;
* the processors' statistics files (:mod:`vla_edge.archs.lerobot`; SmolVLA: ``MEAN_STD``).

:func:`read_checkpoint` reads only the header and the JSON files. The sizes the file leaves
out of ``config.json`` come from the header: the text width and vocabulary from the token
table, the MLP widths, the vision encoder's patch, position table and depth, the pixel
shuffle from the connector's input width. Head counts are not in any shape: the published
widths fix them (SmolVLM2: 960 → 15 text heads of 64, 768 → 12 vision heads), other widths
need ``--text-heads`` / ``--vision-heads``. Every key and shape is then compared with the
config's layout before a tensor is read (:class:`~vla_edge.core.errors.CheckpointKeysError`).

Settings this package does not build are refused by name rather than run differently:
``attention_mode`` other than ``cross_attn``, ``num_expert_layers`` other than the backbone's,
``add_image_special_tokens``, and a ``resize_imgs_with_padding`` other than the vision
encoder's square input.
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
    layer_count,
    load_state_strictly,
    policy_weights_path,
    read_config_json,
    read_header,
    weights_dtypes,
)
from vla_edge.archs.common import (
    copy_weights as copy_weights,
)
from vla_edge.archs.smolvla.config import SmolVLAConfig, SmolVLMTextSize, SmolVLMVisionSize
from vla_edge.archs.smolvla.layout import LEROBOT_PREFIX, LM_HEAD, from_lerobot, model_shapes
from vla_edge.core.errors import (
    CheckpointError,
    CheckpointKeysError,
    ConfigError,
    UnknownArchitectureError,
)

ARCHITECTURE = "smolvla"
LAYOUT = "lerobot"
DEFAULT_MODE = "MEAN_STD"
"""LeRobot SmolVLA's ``normalization_mapping`` for the state and the action."""

KNOWN_BACKBONES = {
    "HuggingFaceTB/SmolVLM2-500M-Video-Instruct": SmolVLMTextSize.smolvlm2_500m().depth,
}
"""``vlm_model_name`` → the published text depth (before ``num_vlm_layers`` truncation)."""
TEXT_HEADS_BY_WIDTH = {960: 15}
"""SmolVLM text attention heads for a width (SmolVLM2-500M)."""
VISION_HEADS_BY_WIDTH = {768: 12}
"""SmolVLM vision attention heads for a width (SmolVLM2-500M's encoder)."""

_VLM = LEROBOT_PREFIX + "vlm_with_expert.vlm.model."
_TEXT = _VLM + "text_model."
_VISION = _VLM + "vision_model."
_CONNECTOR = _VLM + "connector.modality_projection.proj.weight"


def _sizes_error(message: str) -> CheckpointError:
    return CheckpointError(f"{WEIGHTS_NAME}: {message}")


def _text_size(
    shapes: Mapping[str, tuple[int, ...]],
    config_json: Mapping[str, Any],
    num_vlm_layers: int,
    heads: int | None,
) -> SmolVLMTextSize | None:
    """The backbone's text sizes from the header (``None``: keys absent, the check names them)."""
    table = shapes.get(_TEXT + "embed_tokens.weight")
    gate = shapes.get(_TEXT + "layers.0.mlp.gate_proj.weight")
    q = shapes.get(_TEXT + "layers.0.self_attn.q_proj.weight")
    k = shapes.get(_TEXT + "layers.0.self_attn.k_proj.weight")
    if not (table and gate and q and k) or len(table) != 2:
        return None
    vocab, width = table
    if heads is None:
        heads = TEXT_HEADS_BY_WIDTH.get(width)
        if heads is None:
            raise _sizes_error(
                f"the text width {width} does not fix its number of attention heads (known "
                f"widths: {sorted(TEXT_HEADS_BY_WIDTH)}); pass --text-heads"
            )
    if q[0] % heads:
        raise _sizes_error(f"q_proj has {q[0]} rows, not a multiple of {heads} heads")
    head_dim = q[0] // heads
    if k[0] % head_dim:
        raise _sizes_error(f"k_proj has {k[0]} rows, not a multiple of the head size {head_dim}")
    published = KNOWN_BACKBONES.get(str(config_json.get("vlm_model_name")), 0)
    try:
        return SmolVLMTextSize(
            width=width,
            depth=max(published, num_vlm_layers),
            mlp_dim=gate[0],
            num_heads=heads,
            num_kv_heads=k[0] // head_dim,
            head_dim=head_dim,
            vocab_size=vocab,
        )
    except ConfigError as exc:
        raise _sizes_error(f"the text sizes are not a valid SmolVLM: {exc}") from exc


def _vision_size(
    shapes: Mapping[str, tuple[int, ...]], heads: int | None
) -> SmolVLMVisionSize | None:
    """The vision encoder's and the pixel shuffle's sizes from the header."""
    patch = shapes.get(_VISION + "embeddings.patch_embedding.weight")
    table = shapes.get(_VISION + "embeddings.position_embedding.weight")
    fc1 = shapes.get(_VISION + "encoder.layers.0.mlp.fc1.weight")
    proj = shapes.get(_CONNECTOR)
    depth = layer_count(shapes, _VISION + "encoder.layers.")
    if not (patch and table and fc1 and proj and depth) or len(patch) != 4 or len(proj) != 2:
        return None
    hidden, patch_size, n_patches = patch[0], patch[2], table[0]
    side = math.isqrt(n_patches)
    if side * side != n_patches:
        raise _sizes_error(
            f"the vision position table has {n_patches} rows, not a square number of patches"
        )
    shuffle = proj[1] // hidden if proj[1] % hidden == 0 else 0
    factor = math.isqrt(shuffle)
    if factor < 1 or factor * factor != shuffle:
        raise _sizes_error(
            f"the connector reads {proj[1]} features, not the vision width {hidden} times a "
            "square pixel-shuffle factor"
        )
    if heads is None:
        heads = VISION_HEADS_BY_WIDTH.get(hidden)
        if heads is None:
            raise _sizes_error(
                f"the vision width {hidden} does not fix its number of attention heads (known "
                f"widths: {sorted(VISION_HEADS_BY_WIDTH)}); pass --vision-heads"
            )
    try:
        return SmolVLMVisionSize(
            hidden=hidden,
            depth=depth,
            num_heads=heads,
            mlp_dim=fc1[0],
            patch_size=patch_size,
            image_size=side * patch_size,
            scale_factor=factor,
        )
    except ConfigError as exc:
        raise _sizes_error(f"the vision sizes are not a valid SmolVLM encoder: {exc}") from exc


def image_slots(config_json: Mapping[str, Any]) -> tuple[str, ...]:
    """LeRobot's image slots: the ``VISUAL`` input features, then ``empty_cameras`` blanks.

    The names stay LeRobot's (``observation.images.top``); LeRobot fills an empty camera
    with a masked image.
    """
    slots = lerobot.visual_features(config_json)
    empty = int(config_json.get("empty_cameras") or 0)
    slots += [f"{lerobot.IMAGES_PREFIX}empty_camera_{i}" for i in range(empty)]
    return tuple(slots)


def _refuse_unsupported(config_json: Mapping[str, Any], num_vlm_layers: int, where: Path) -> None:
    mode = config_json.get("attention_mode", "cross_attn")
    if mode != "cross_attn":
        raise CheckpointError(
            f"{where}: attention_mode = {mode!r}: only LeRobot's default 'cross_attn' is built"
        )
    expert_layers = config_json.get("num_expert_layers", -1)
    if expert_layers is not None and expert_layers > 0 and expert_layers != num_vlm_layers:
        raise CheckpointError(
            f"{where}: num_expert_layers = {expert_layers} differs from num_vlm_layers = "
            f"{num_vlm_layers}: only an expert as deep as the backbone is built"
        )
    if config_json.get("add_image_special_tokens"):
        raise CheckpointError(
            f"{where}: add_image_special_tokens = true: the image special tokens are not built "
            "(LeRobot's default is false)"
        )


def _check_resize(config_json: Mapping[str, Any], image_size: int, where: Path) -> None:
    resize = config_json.get("resize_imgs_with_padding")
    if resize is None:
        return
    if not isinstance(resize, list | tuple) or [int(v) for v in resize] != [image_size] * 2:
        raise CheckpointError(
            f"{where}: resize_imgs_with_padding = {resize!r} but the vision encoder's input "
            f"is {image_size}x{image_size} (its position table in {WEIGHTS_NAME})"
        )


def infer_config(
    shapes: Mapping[str, tuple[int, ...]],
    config_json: Mapping[str, Any],
    options: ImportOptions,
    where: Path = Path(CONFIG_NAME),
) -> SmolVLAConfig:
    """The :class:`SmolVLAConfig` a checkpoint describes (``shapes``: the file's keys).

    Sizes the header cannot give (a key absent) stay at the full size, so the key check
    names what is missing.
    """
    num_vlm_layers = config_json.get("num_vlm_layers") or layer_count(shapes, _TEXT + "layers.")
    num_vlm_layers = int(num_vlm_layers or 16)
    _refuse_unsupported(config_json, num_vlm_layers, where)
    fields: dict[str, Any] = {"num_vlm_layers": num_vlm_layers}
    text = _text_size(shapes, config_json, num_vlm_layers, options.text_heads)
    if text is not None:
        fields["text"] = text
    vision = _vision_size(shapes, options.vision_heads)
    if vision is not None:
        fields["vision"] = vision
        _check_resize(config_json, vision.image_size, where)
    for ours, theirs in (
        ("expert_width_multiplier", "expert_width_multiplier"),
        ("self_attn_every_n_layers", "self_attn_every_n_layers"),
        ("chunk_size", "chunk_size"),
        ("state_dim", "max_state_dim"),
        ("action_dim", "max_action_dim"),
        ("flow_steps", "num_steps"),
        ("max_token_len", "tokenizer_max_length"),
        ("min_period", "min_period"),
        ("max_period", "max_period"),
    ):
        if config_json.get(theirs) is not None:
            fields[ours] = config_json[theirs]
    if options.action_horizon is not None:
        fields["chunk_size"] = options.action_horizon
    slots = image_slots(config_json)
    if slots:
        fields["image_slots"] = slots
    try:
        return SmolVLAConfig(**fields)
    except ConfigError as exc:
        raise CheckpointError(
            f"{where} and {WEIGHTS_NAME} describe no valid SmolVLA model: {exc}"
        ) from exc


def expected_shapes(
    config: SmolVLAConfig, present: Mapping[str, Any] | None = None
) -> dict[str, tuple[int, ...]]:
    """The file's keys and shapes for ``config``: ours under ``model.``.

    SmolVLM2's unread ``lm_head`` is expected at its shape when ``present`` holds it and may
    be absent.
    """
    shapes = {LEROBOT_PREFIX + k: s for k, s in model_shapes(config).items()}
    if present is not None and LM_HEAD in present:
        shapes[LM_HEAD] = (config.text.vocab_size, config.text.width)
    return shapes


def read_checkpoint(path: str | Path, options: ImportOptions | None = None) -> Checkpoint:
    """Check a SmolVLA checkpoint directory without reading a tensor (the module docstring).

    Raises:
        CheckpointError: ``config.json`` or the weights absent or unreadable, a setting
            this package does not build, or a size the files do not fix (the message names
            the option to pass).
        UnknownArchitectureError: ``config.json``'s ``type`` is not ``smolvla``.
        CheckpointKeysError: missing, unexpected or mis-shaped keys.
        NormStatsError: statistics absent, unreadable, non-finite or of negative width.
    """
    options = options or ImportOptions()
    path = Path(path)
    config_json = read_config_json(path)
    kind = config_json.get("type")
    if kind != ARCHITECTURE and options.architecture != ARCHITECTURE:
        raise UnknownArchitectureError(
            f"{path / CONFIG_NAME}: type = {kind!r}, expected {ARCHITECTURE!r} (LeRobot's layout)"
        )
    weights_path = path / WEIGHTS_NAME
    header = read_header(weights_path)
    stats_keys = lerobot.stats_keys(header)
    shapes = {k: v[0] for k, v in header.items() if k not in stats_keys}
    config = infer_config(shapes, config_json, options, path / CONFIG_NAME)
    report = compare_keys(shapes, expected_shapes(config, shapes))
    if not report.ok:
        raise CheckpointKeysError(format_key_report(report, str(weights_path)))
    key_map = {k: LEROBOT_PREFIX + k for k in model_shapes(config)}
    section, stats_file = lerobot.normalisation(
        path, stats_keys, config_json, DEFAULT_MODE, options.delta_actions
    )
    return Checkpoint(
        path=path,
        layout=LAYOUT,
        architecture=ARCHITECTURE,
        config=config,
        normalisation=section,
        weights_path=weights_path,
        key_map=key_map,
        weights_dtypes=weights_dtypes(header, list(key_map.values())),
        stats_file=stats_file,
        config_json=config_json,
        action_feature_dim=lerobot.feature_dim(config_json, "action"),
    )


def load_smolvla_weights(policy_dir: Any, model: torch.nn.Module) -> None:
    """Load a policy directory's weights into ``model`` (a :class:`SmolVLAModel`), strictly.

    ``policy_dir`` is a :class:`~vla_edge.archs.policy_dir.PolicyDir`, a policy directory's
    path or its ``model.safetensors``; the header is checked against ``model``'s state dict
    before a tensor is read; tensors are cast to each parameter's dtype. A LeRobot file
    (keys under ``model.``) is read too.

    Raises:
        CheckpointKeysError: a missing, unexpected or mis-shaped key.
    """
    from safetensors.torch import load_file

    weights_path = policy_weights_path(policy_dir)
    header = {k: v[0] for k, v in read_header(weights_path).items()}
    lerobot_file = any(k.startswith(LEROBOT_PREFIX) for k in header)
    if lerobot_file:
        header = {
            k.removeprefix(LEROBOT_PREFIX): s
            for k, s in header.items()
            if k.startswith(LEROBOT_PREFIX) and k != LM_HEAD
        }
    target = model.state_dict()
    report = compare_keys(header, {k: tuple(v.shape) for k, v in target.items()})
    if not report.ok:
        raise CheckpointKeysError(format_key_report(report, str(weights_path)))
    tensors = load_file(str(weights_path))
    if lerobot_file:
        tensors = from_lerobot(tensors)
    tensors = {k: v.to(target[k].dtype) for k, v in tensors.items()}
    load_state_strictly(model, tensors, str(weights_path))


__all__ = [
    "ARCHITECTURE",
    "copy_weights",
    "expected_shapes",
    "image_slots",
    "infer_config",
    "load_smolvla_weights",
    "read_checkpoint",
]
