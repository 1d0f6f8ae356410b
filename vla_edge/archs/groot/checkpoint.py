"""Read a GR00T checkpoint directory: header check, sizes, embodiment, statistics, weights.

Two published layouts (NVIDIA/Isaac-GR00T; facts and sources in ``reference/groot.md``):

* **N1.7** (``Gr00tN1d7.save_pretrained`` and ``Gr00tN1d7Processor.save_pretrained``,
  ``processing_gr00t_n1d7.py`` @1852a8c1): ``config.json`` (``model_type: Gr00tN1d7``,
  ``select_layer``, ``diffusion_model_cfg``, ``vl_self_attention_cfg``, ...), the weights
  as ``model.safetensors`` or sharded ``model-*.safetensors`` with
  ``model.safetensors.index.json`` (keys under ``backbone.model.model.`` and
  ``action_head.``), ``processor_config.json`` (``processor_kwargs``: ``modality_configs``
  per embodiment tag, ``use_percentiles``, ``use_mean_std``, ``clip_outliers``,
  ``image_target_size`` and the image transform's keys, :func:`image_fit_fields`),
  ``statistics.json`` (``{tag: {"state" | "action": {group:
  {min, max, mean, std, q01, q99}}}}``) and ``embodiment_id.json`` (``{tag: slice}``).
* **N1.5**: ``experiment_cfg/metadata.json`` keyed by embodiment tag (``{tag:
  {"statistics": {...}, "modalities": {...}}}``), an Eagle 2.5 backbone with other keys.
  Its embodiment and statistics are read here (:func:`n15_normalisation`); the rest by
  :mod:`vla_edge.archs.groot.n15_checkpoint` (architecture ``groot_n15``), and
  :func:`read_checkpoint` (N1.7's) refuses it by name.

:func:`read_checkpoint` reads only the safetensors headers (every shard the index names)
and the JSON files, derives the :class:`GrootConfig` (sizes from the header's shapes and
``config.json``; what neither fixes, such as the vision heads, the deepstack taps and the
tokenizer's ids, from ``defaults``), and checks every key and shape before a tensor is
read: a mismatch is a :class:`CheckpointKeysError` listing the missing, unexpected and
mis-shaped keys. Then :func:`copy_weights` streams the tensors, shard by shard, into one
file under this package's names, and :func:`load_weights` loads a policy directory's (or
the checkpoint's own) weights strictly.

Normalisation (upstream's ``StateActionProcessor``): per joint group, in the order the
embodiment's ``modality_configs`` list the groups, ``2 * (x - lo) / (hi - lo) - 1`` (0 where
``np.isclose(hi, lo)``), the state clipped to [-1, 1] when ``clip_outliers``, with
``(lo, hi)`` the ``q01``/``q99`` when ``use_percentiles`` and ``min``/``max`` otherwise; a
group named in the modality's ``mean_std_embedding_keys`` is ``(x - mean) / std`` instead.
:func:`n17_normalisation` reads it as upstream applies it; :func:`read_checkpoint` returns
it in the policy directory's schema (:func:`vla_edge.archs.groot.processor.
policy_normalisation`: each kind is the same affine map, written as ``quantile`` with
``epsilon`` 0, the clip as ``state.clip`` and ``actions.low`` / ``actions.high``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import torch

from vla_edge.archs.common import (
    COPY_BLOCK_BYTES,
    WEIGHTS_NAME,
    Checkpoint,
    ImportOptions,
    KeyReport,
    _raw_header,
    compare_keys,
    format_key_report,
    layer_count,
    load_tensors_into,
    policy_weights_path,
    read_config_json,
    read_header,
    read_json,
    weights_dtypes,
)
from vla_edge.archs.groot.config import GrootConfig, TextSize, TransformerSize, VisionSize
from vla_edge.archs.groot.layout import (
    ACTION_HEAD_PREFIX,
    TEXT_PREFIX,
    UNUSED,
    VISION_PREFIX,
    model_shapes,
    upstream_file_shapes,
)
from vla_edge.archs.groot.processor import RANGE_FLOOR, policy_normalisation
from vla_edge.core.errors import (
    CheckpointError,
    CheckpointKeysError,
    ConfigError,
    NormStatsError,
    UnknownArchitectureError,
)

INDEX_NAME = "model.safetensors.index.json"
PROCESSOR_NAME = "processor_config.json"
STATISTICS_NAME = "statistics.json"
EMBODIMENT_ID_NAME = "embodiment_id.json"
N15_METADATA = "experiment_cfg/metadata.json"
LAYOUTS = ("isaac_gr00t",)
"""The layout read here (N1.7); N1.5's is ``groot_n15``'s (:mod:`.n15_checkpoint`)."""
ARCHITECTURE = "groot"
MODEL_TYPE = "Gr00tN1d7"

VISION_HEADS_BY_WIDTH = {1024: 16, 1152: 16}
"""Qwen3-VL vision heads for a hidden width (Qwen3-VL-2B / -8B); others: ``--vision-heads``."""
N15_PROJECTOR_INDEX = {"gr1": 24, "oxe_droid": 17, "genie1_gripper": 26, "new_embodiment": 31}
"""N1.5's embodiment tag → weight slice (``gr00t/data/embodiment_tags.py`` @16a6d6e1,
``EMBODIMENT_TAG_MAPPING``; upstream has no slice for any other tag)."""
STAT_NAMES = {"min_max": ("min", "max"), "quantile": ("q01", "q99"), "mean_std": ("mean", "std")}
"""Each normalisation kind's statistics (low / centre, high / scale)."""

GrootCheckpoint = Checkpoint
"""A checked GR00T checkpoint (``config`` is a :class:`GrootConfig`)."""


class UnknownEmbodimentError(CheckpointError):
    """The embodiment tag asked for is not one the checkpoint has statistics and a slice for."""


# -- the weights' files --------------------------------------------------------------------


def weight_files(path: Path) -> dict[str, str]:
    """Each tensor's key → the file holding it (relative to ``path``).

    From the index or the single ``model.safetensors``; the index's entries are checked
    against each shard's header.

    Raises:
        CheckpointError: no weights, an unreadable index, a shard missing, or a key the
            index places in a shard that does not hold it.
    """
    index_path = path / INDEX_NAME
    if not index_path.is_file():
        single = path / WEIGHTS_NAME
        if not single.is_file():
            raise CheckpointError(
                f"{path}: neither {INDEX_NAME} (sharded weights) nor {WEIGHTS_NAME} found"
            )
        return {key: WEIGHTS_NAME for key in read_header(single)}
    index = read_json(index_path, INDEX_NAME)
    weight_map = index.get("weight_map") if isinstance(index, Mapping) else None
    if not isinstance(weight_map, Mapping) or not weight_map:
        raise CheckpointError(f"{index_path}: no 'weight_map' object")
    by_shard: dict[str, set[str]] = {}
    for key, shard in weight_map.items():
        by_shard.setdefault(str(shard), set()).add(str(key))
    for shard, keys in sorted(by_shard.items()):
        held = set(read_header(path / shard))
        absent = sorted(keys - held)
        if absent:
            raise CheckpointError(
                f"{path / shard}: {len(absent)} keys the index places here are not in the "
                f"file: {', '.join(absent[:5])}"
            )
    return {str(k): str(v) for k, v in weight_map.items()}


def read_headers(path: Path, files: Mapping[str, str]) -> dict[str, tuple[tuple[int, ...], str]]:
    """``key -> (shape, dtype)`` over every shard, for the keys ``files`` places there."""
    out: dict[str, tuple[tuple[int, ...], str]] = {}
    for shard in sorted(set(files.values())):
        header = read_header(path / shard)
        out.update({k: v for k, v in header.items() if files.get(k) == shard})
    return out


# -- sizes ---------------------------------------------------------------------------------


def _shape(shapes: Mapping[str, tuple[int, ...]], key: str, rank: int) -> tuple[int, ...] | None:
    found = shapes.get(key)
    return tuple(found) if found is not None and len(found) == rank else None


def _vision_size(
    shapes: Mapping[str, tuple[int, ...]], base: VisionSize, image_size: int, heads: int | None
) -> VisionSize:
    """The vision tower's sizes from the header; heads and taps from ``base`` or the table."""
    patch = _shape(shapes, VISION_PREFIX + "patch_embed.proj.weight", 5)
    table = _shape(shapes, VISION_PREFIX + "pos_embed.weight", 2)
    fc1 = _shape(shapes, VISION_PREFIX + "blocks.0.mlp.linear_fc1.weight", 2)
    depth = layer_count(shapes, VISION_PREFIX + "blocks.")
    if patch is None or table is None or fc1 is None or depth is None:
        return base.model_copy(update={"image_size": image_size})
    hidden = patch[0]
    if heads is None:
        heads = base.num_heads if hidden == base.hidden else VISION_HEADS_BY_WIDTH.get(hidden)
    if heads is None:
        raise CheckpointError(
            f"{VISION_PREFIX}patch_embed.proj.weight: the vision width {hidden} does not fix "
            f"its attention heads (known widths: {sorted(VISION_HEADS_BY_WIDTH)}); "
            "pass --vision-heads"
        )
    taps = layer_count(shapes, VISION_PREFIX + "deepstack_merger_list.") or 0
    if depth == base.depth and taps == len(base.deepstack_layers):
        deepstack = base.deepstack_layers
    else:  # Qwen3-VL-2B's spacing: after blocks depth / (n + 1) * k - 1
        deepstack = tuple(depth // (taps + 1) * k - 1 for k in range(1, taps + 1))
    fields = {
        "hidden": hidden,
        "depth": depth,
        "num_heads": heads,
        "mlp_dim": fc1[0],
        "temporal_patch_size": patch[2],
        "patch_size": patch[3],
        "num_position_embeddings": table[0],
        "image_size": image_size,
        "deepstack_layers": deepstack,
        "spatial_merge_size": base.spatial_merge_size,
        "rope_theta": base.rope_theta,
    }
    return VisionSize(**fields)


def _text_size(shapes: Mapping[str, tuple[int, ...]], base: TextSize) -> TextSize:
    """The language model's sizes from the header (heads from the q/k norms' width)."""
    table = _shape(shapes, TEXT_PREFIX + "embed_tokens.weight", 2)
    layer = TEXT_PREFIX + "layers.0."
    gate = _shape(shapes, layer + "mlp.gate_proj.weight", 2)
    q = _shape(shapes, layer + "self_attn.q_proj.weight", 2)
    k = _shape(shapes, layer + "self_attn.k_proj.weight", 2)
    q_norm = _shape(shapes, layer + "self_attn.q_norm.weight", 1)
    depth = layer_count(shapes, TEXT_PREFIX + "layers.")
    if None in (table, gate, q, k, q_norm) or depth is None:
        return base
    head_dim = q_norm[0]
    half = head_dim // 2
    if head_dim == base.head_dim:
        mrope = base.mrope_section
    else:  # Qwen3-VL's (24, 20, 20) of 64 scaled
        side = half * 20 // 64
        mrope = (half - 2 * side, side, side)
    return TextSize(
        width=table[1],
        depth=depth,
        mlp_dim=gate[0],
        num_heads=q[0] // head_dim,
        num_kv_heads=k[0] // head_dim,
        head_dim=head_dim,
        vocab_size=table[0],
        rope_theta=base.rope_theta,
        mrope_section=mrope,
        rms_norm_eps=base.rms_norm_eps,
    )


def _transformer(cfg: Any, base: TransformerSize, depth: int | None, name: str) -> TransformerSize:
    cfg = cfg if isinstance(cfg, Mapping) else {}
    if cfg.get("positional_embeddings") not in (None, "none"):
        raise CheckpointError(
            f"config.json: {name}.positional_embeddings = {cfg['positional_embeddings']!r}; "
            "only None (N1.7's) is built"
        )
    return TransformerSize(
        depth=depth or int(cfg.get("num_layers", base.depth)),
        num_heads=int(cfg.get("num_attention_heads", base.num_heads)),
        head_dim=int(cfg.get("attention_head_dim", base.head_dim)),
    )


_UNSUPPORTED = {
    "use_alternate_vl_dit": True,
    "add_pos_embed": True,
    "use_vlln": True,
    "state_history_length": 1,
}
"""``config.json`` flags this module builds only at N1.7's value."""


DEFAULT_CROP_FRACTION = 0.95
"""``Gr00tN1d7Processor``'s ``crop_fraction`` when its config does not set it."""
DEFAULT_SHORTEST_EDGE_PX = 256
"""``Gr00tN1d7Processor``'s ``shortest_image_edge`` when its config does not set it."""


def image_fit_fields(processor: Mapping[str, Any], image_size: int) -> dict[str, Any]:
    """``image_crop_fraction`` and ``image_letterbox`` from the processor's config.

    Upstream's evaluation transform (``processing_gr00t_n1d7.py``, ``image_augmentations.py``)
    keeps ``crop_fraction`` of each side, or ``image_crop_size[0] / image_target_size[0]``
    when ``crop_fraction`` is null; with ``use_albumentations`` false (torchvision's
    transform) the crop is ``image_crop_size`` out of ``image_target_size``, so that
    ratio is read first there. The letterbox is always on: the processor at the followed
    commit files ``letter_box_transform`` as a stored, unread key and both of its
    transforms begin with the pad to a square (later versions make it optional, read
    from that key; not followed here).

    Raises:
        CheckpointError: no crop fraction can be derived, it is outside (0, 1], or the
            albumentations transform resizes to a ``shortest_image_edge`` other than the
            model's ``image_size`` (the square the programs take).
    """
    albumentations = bool(processor.get("use_albumentations", False))
    crop = processor.get("image_crop_size")
    target = processor.get("image_target_size")
    ratio = float(crop[0]) / float(target[0]) if crop and target else None
    fraction = processor.get("crop_fraction", DEFAULT_CROP_FRACTION)
    if not albumentations and ratio is not None:
        fraction = ratio
    elif fraction is None:
        if ratio is None:
            raise CheckpointError(
                f"{PROCESSOR_NAME}: crop_fraction is null and image_crop_size / "
                f"image_target_size ({crop} / {target}) do not give one"
            )
        fraction = ratio
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
        raise CheckpointError(f"{PROCESSOR_NAME}: crop_fraction = {fraction!r}, expected a number")
    if not 0.0 < fraction <= 1.0:
        raise CheckpointError(
            f"{PROCESSOR_NAME}: crop fraction = {fraction} (crop_fraction or image_crop_size / "
            "image_target_size), expected a value in (0, 1]"
        )
    edge = processor.get("shortest_image_edge", DEFAULT_SHORTEST_EDGE_PX)
    if albumentations and edge is not None and int(edge) != image_size:
        raise CheckpointError(
            f"{PROCESSOR_NAME}: shortest_image_edge = {edge} px but the model's image side is "
            f"{image_size} px (image_target_size {target}): upstream would give the vision "
            "model images of that edge, not the square the programs are built for"
        )
    return {
        "image_crop_fraction": float(fraction),
        "image_letterbox": True,
    }


def infer_config(
    shapes: Mapping[str, tuple[int, ...]],
    config_json: Mapping[str, Any],
    processor: Mapping[str, Any],
    embodiment_id: int,
    options: ImportOptions,
    defaults: GrootConfig,
) -> GrootConfig:
    """The :class:`GrootConfig` a checkpoint describes."""
    for name, value in _UNSUPPORTED.items():
        if name in config_json and config_json[name] != value:
            raise CheckpointError(
                f"config.json: {name} = {config_json[name]!r}; only {value!r} (N1.7's) is built"
            )
    target = processor.get("image_target_size") or config_json.get("image_target_size")
    image_size = int(target[0]) if target else defaults.vision.image_size
    if target and int(target[0]) != int(target[-1]):
        raise CheckpointError(f"{PROCESSOR_NAME}: image_target_size {target} is not square")
    dit_depth = layer_count(shapes, ACTION_HEAD_PREFIX + "model.transformer_blocks.")
    vlsa_depth = layer_count(shapes, ACTION_HEAD_PREFIX + "vl_self_attention.transformer_blocks.")
    time_in = _shape(
        shapes, ACTION_HEAD_PREFIX + "model.timestep_encoder.timestep_embedder.linear_1.weight", 2
    )

    def pick(name: str, default: Any) -> Any:
        return config_json[name] if config_json.get(name) is not None else default

    fields: dict[str, Any] = {
        **defaults.model_dump(),
        "vision": _vision_size(shapes, defaults.vision, image_size, options.vision_heads),
        "text": _text_size(shapes, defaults.text),
        "dit": _transformer(
            config_json.get("diffusion_model_cfg"), defaults.dit, dit_depth, "diffusion_model_cfg"
        ),
        "vl_self_attention": _transformer(
            config_json.get("vl_self_attention_cfg"),
            defaults.vl_self_attention,
            vlsa_depth,
            "vl_self_attention_cfg",
        ),
        "hidden_size": pick("hidden_size", defaults.hidden_size),
        "max_state_dim": pick("max_state_dim", defaults.max_state_dim),
        "max_action_dim": pick("max_action_dim", defaults.max_action_dim),
        "action_horizon": options.action_horizon or pick("action_horizon", defaults.action_horizon),
        "max_seq_len": pick("max_seq_len", defaults.max_seq_len),
        "max_num_embodiments": pick("max_num_embodiments", defaults.max_num_embodiments),
        "attend_text_every_n_blocks": pick(
            "attend_text_every_n_blocks", defaults.attend_text_every_n_blocks
        ),
        "flow_steps": pick("num_inference_timesteps", defaults.flow_steps),
        "num_timestep_buckets": pick("num_timestep_buckets", defaults.num_timestep_buckets),
        "timestep_channels": (time_in or (0, defaults.timestep_channels))[1],
        "embodiment_id": embodiment_id,
    }
    slots = processor.get("image_slots")
    if slots:
        fields["image_slots"] = tuple(slots)
    fields.update(image_fit_fields(processor, image_size))
    if fields["text"].depth != config_json.get("select_layer", fields["text"].depth):
        raise CheckpointError(
            f"config.json: select_layer = {config_json['select_layer']} but the weights hold "
            f"{fields['text'].depth} language-model layers"
        )
    try:
        return GrootConfig(**fields)
    except ConfigError as exc:
        raise CheckpointError(
            f"config.json and the weights describe no valid GR00T: {exc}"
        ) from exc


def check_keys(shapes: Mapping[str, tuple[int, ...]], config: GrootConfig, source: str) -> None:
    """Compare the file's keys and shapes with ``config``'s layout (``lm_head`` optional).

    Raises:
        CheckpointKeysError: missing, unexpected or mis-shaped keys, each listed.
    """
    expected = {
        k: s for k, s in upstream_file_shapes(config).items() if k in shapes or k not in UNUSED
    }
    report = compare_keys(shapes, expected)
    if not report.ok:
        raise CheckpointKeysError(format_key_report(report, source))


# -- embodiment and normalisation ----------------------------------------------------------


def select_embodiment(available: Mapping[str, Any], embodiment: str | None, source: str) -> str:
    """The embodiment tag to import: ``embodiment``, or the only one the checkpoint has.

    Raises:
        UnknownEmbodimentError: a tag the checkpoint lacks, or none given among several;
            the message lists the tags it has.
    """
    tags = sorted(available)
    if embodiment is None:
        if len(tags) == 1:
            return tags[0]
        raise UnknownEmbodimentError(
            f"{source}: the checkpoint has statistics for {len(tags)} embodiments {tags}; "
            "pass --embodiment TAG"
        )
    if embodiment not in available:
        raise UnknownEmbodimentError(
            f"{source}: embodiment = {embodiment!r} is not in the checkpoint; it has {tags}"
        )
    return embodiment


def _vector(stats: Any, name: str, where: str) -> list[float]:
    if not isinstance(stats, Mapping) or stats.get(name) is None:
        raise NormStatsError(f"{where}.{name} is missing")
    values = stats[name]
    values = values if isinstance(values, list) else [values]
    if any(isinstance(v, list) for v in values):
        raise NormStatsError(
            f"{where}.{name} holds one list per step (per-step statistics, as upstream's "
            "relative_action statistics are written); the policy schema holds one value per "
            "dimension"
        )
    try:
        out = [float(v) for v in values]
    except (TypeError, ValueError) as exc:
        raise NormStatsError(f"{where}.{name} is not a list of numbers") from exc
    if not all(v == v and abs(v) != float("inf") for v in out):
        raise NormStatsError(f"{where}.{name} has a non-finite value")
    return out


def normalisation_part(
    stats: Any,
    keys: list[str],
    mean_std_keys: set[str],
    base_kind: str,
    where: str,
    min_max_keys: Collection[str] = (),
) -> dict[str, Any]:
    """One part (state or actions): each group's kind and statistics, in ``keys`` order.

    ``min_max_keys``: groups mapped by ``min``/``max`` whatever ``base_kind`` (upstream's
    relative action groups, whose ``relative_action`` statistics it reads that way even
    with ``use_percentiles``). A part whose groups all share a kind also carries the
    concatenated vectors under the kind's names (``min``/``max``, ``q01``/``q99`` or
    ``mean``/``std``).
    """
    if not isinstance(stats, Mapping):
        raise NormStatsError(f"{where} is missing")
    groups = []
    for key in keys:
        kind = (
            "mean_std" if key in mean_std_keys else "min_max" if key in min_max_keys else base_kind
        )
        lo_name, hi_name = STAT_NAMES[kind]
        lo = _vector(stats.get(key), lo_name, f"{where}.{key}")
        hi = _vector(stats.get(key), hi_name, f"{where}.{key}")
        if len(lo) != len(hi):
            raise NormStatsError(
                f"{where}.{key}: {lo_name} has {len(lo)} values, {hi_name} {len(hi)}"
            )
        if kind == "mean_std" and min(hi) <= 0.0:
            raise NormStatsError(f"{where}.{key}.std has a value <= 0 ({min(hi)})")
        groups.append({"key": key, "kind": kind, "dim": len(lo), lo_name: lo, hi_name: hi})
    kinds = {g["kind"] for g in groups}
    part: dict[str, Any] = {"kind": kinds.pop() if len(kinds) == 1 else "per_group"}
    part["groups"] = groups
    if part["kind"] != "per_group":
        for name in STAT_NAMES[part["kind"]]:
            part[name] = [v for g in groups for v in g[name]]
    return part


def _modality(
    processor: Mapping[str, Any], tag: str, part: str, source: str
) -> tuple[list[str], set[str]]:
    config = tag_modality(processor, tag, part)
    if not config.get("modality_keys"):
        raise NormStatsError(f"{source}: modality_configs.{tag}.{part}.modality_keys is missing")
    return list(config["modality_keys"]), set(config.get("mean_std_embedding_keys") or [])


def tag_modality(processor: Mapping[str, Any], tag: str, modality: str) -> Mapping[str, Any]:
    """``modality_configs.<tag>.<modality>`` of a processor's kwargs (empty when absent)."""
    configs = processor.get("modality_configs")
    found = (configs.get(tag) or {}).get(modality) if isinstance(configs, Mapping) else None
    return found if isinstance(found, Mapping) else {}


def relative_action_keys(processor: Mapping[str, Any], tag: str) -> list[str]:
    """The action groups predicted relative to the state, in ``modality_keys`` order.

    Those with ``use_relative_action`` set and an ``action_configs`` entry whose ``rep``
    is relative.
    """
    if not processor.get("use_relative_action"):
        return []
    action = tag_modality(processor, tag, "action")
    keys = list(action.get("modality_keys") or [])
    configs = action.get("action_configs") or []
    return [
        key
        for key, cfg in zip(keys, configs, strict=False)
        if isinstance(cfg, Mapping) and str(cfg.get("rep", "")).lower().endswith("relative")
    ]


def sincos_state_keys(processor: Mapping[str, Any], tag: str) -> list[str]:
    """The state groups upstream encodes as ``[sin, cos]`` (``apply_sincos_state_encoding``)."""
    if not processor.get("apply_sincos_state_encoding"):
        return []
    state = tag_modality(processor, tag, "state")
    return list(state.get("sin_cos_embedding_keys") or [])


def excludes_state(processor: Mapping[str, Any], tag: str) -> bool:
    """Upstream feeds a zero state: ``exclude_state`` on the processor or the state config."""
    state = tag_modality(processor, tag, "state")
    return bool(processor.get("exclude_state") or state.get("exclude_state"))


def check_single_step(processor: Mapping[str, Any], tag: str, source: str) -> None:
    """Refuse an embodiment whose video or state spans several steps.

    Upstream feeds every step (``T`` frames per camera, ``T`` state rows); the programs
    built here read one frame per camera slot and one state.

    Raises:
        CheckpointError: ``modality_configs.<tag>.video`` or ``.state`` lists more than one
            ``delta_indices`` entry.
    """
    for modality in ("video", "state"):
        steps = tag_modality(processor, tag, modality).get("delta_indices") or [0]
        if len(steps) > 1:
            raise CheckpointError(
                f"{source}: modality_configs.{tag}.{modality}.delta_indices = {list(steps)}: "
                f"upstream feeds {len(steps)} steps, the programs built here read one"
            )


def check_action_steps(
    processor: Mapping[str, Any], tag: str, action_horizon: int, source: str
) -> None:
    """Refuse an embodiment whose processor keeps fewer action steps than the model makes.

    Upstream's processor returns the first ``len(action.delta_indices)`` of the
    ``action_horizon`` steps the DiT denoises; the programs built here return all of
    them, so the steps past those (untrained for this embodiment) would reach the
    controller.

    Raises:
        CheckpointError: ``modality_configs.<tag>.action.delta_indices`` lists another
            number of steps than ``action_horizon``.
    """
    steps = tag_modality(processor, tag, "action").get("delta_indices")
    if steps is not None and len(steps) != action_horizon:
        raise CheckpointError(
            f"{source}: modality_configs.{tag}.action.delta_indices has {len(steps)} steps "
            f"and the model's action_horizon is {action_horizon}: upstream executes the first "
            f"{len(steps)}, the programs built here return all {action_horizon} (the rest "
            "untrained for this embodiment), so this import refuses it"
        )


def n17_normalisation(path: Path, tag: str, processor: Mapping[str, Any]) -> dict[str, Any]:
    """Embodiment ``tag``'s ``normalisation`` from ``statistics.json``, as the processor says.

    Relative action groups (:func:`relative_action_keys`) take their statistics from the
    tag's ``relative_action`` entry and their ``min``/``max`` (also with
    ``use_percentiles``), as upstream's ``StateActionProcessor`` does; the section lists them under
    ``relative_action_keys`` and records ``exclude_state``.

    Raises:
        NormStatsError: statistics absent or malformed, or sin/cos state groups (not built).
    """
    stats_path = path / STATISTICS_NAME
    statistics = read_json(stats_path, STATISTICS_NAME, NormStatsError)
    if not isinstance(statistics, Mapping) or not isinstance(statistics.get(tag), Mapping):
        raise NormStatsError(f"{stats_path}: no statistics for embodiment {tag!r}")
    sincos = sincos_state_keys(processor, tag)
    if sincos:
        raise NormStatsError(
            f"{path / PROCESSOR_NAME}: apply_sincos_state_encoding with "
            f"modality_configs.{tag}.state.sin_cos_embedding_keys = {sincos}: upstream feeds "
            "those groups as [sin, cos] (twice their width), which this import does not build"
        )
    kind = "quantile" if processor.get("use_percentiles") else "min_max"
    relative = relative_action_keys(processor, tag)
    parts = {}
    for part, name in (("state", "state"), ("action", "actions")):
        keys, mean_std = _modality(processor, tag, part, str(path / PROCESSOR_NAME))
        stats = dict(statistics[tag].get(part) or {})
        for key in relative if part == "action" else []:
            found = (statistics[tag].get("relative_action") or {}).get(key)
            if found is None:
                raise NormStatsError(
                    f"{stats_path}: {tag}.relative_action.{key} is missing (the processor "
                    "config declares the group relative)"
                )
            stats[key] = found
        parts[name] = normalisation_part(
            stats,
            keys,
            mean_std,
            kind,
            f"{stats_path}: {tag}.{part}",
            min_max_keys=relative if part == "action" else (),
        )
    section = _section(parts, tag, bool(processor.get("clip_outliers", True)))
    section["relative_action_keys"] = relative
    section["exclude_state"] = excludes_state(processor, tag)
    return section


def _section(parts: Mapping[str, dict[str, Any]], tag: str, clip: bool) -> dict[str, Any]:
    kinds = {p["kind"] for p in parts.values()}
    return {
        "kind": kinds.pop() if len(kinds) == 1 else "per_part",
        "range_floor": RANGE_FLOOR,
        "clip": clip,
        "embodiment": tag,
        **parts,
    }


def n15_normalisation(path: Path, embodiment: str | None) -> tuple[str, int, dict[str, Any]]:
    """N1.5's ``experiment_cfg/metadata.json``: ``(tag, weight slice, normalisation)``.

    The groups are the tag's ``modalities`` in file order; N1.5 keeps its per-group modes
    in the training data config, not the checkpoint, so min/max (its default) is used.

    Raises:
        UnknownEmbodimentError: the tag asked for is not in the file, none given among
            several, or a tag upstream maps to no weight slice (:data:`N15_PROJECTOR_INDEX`).
        NormStatsError: the file absent, or the tag's statistics missing or malformed.
    """
    meta_path = path / N15_METADATA
    metadata = read_json(meta_path, N15_METADATA, NormStatsError)
    if not isinstance(metadata, Mapping) or not metadata:
        raise NormStatsError(f"{meta_path}: no embodiment tags")
    tag = select_embodiment(metadata, embodiment, str(meta_path))
    if tag not in N15_PROJECTOR_INDEX:
        raise UnknownEmbodimentError(
            f"{meta_path}: embodiment = {tag!r} has no weight slice in N1.5's tag table "
            f"{sorted(N15_PROJECTOR_INDEX)} (upstream's EMBODIMENT_TAG_MAPPING)"
        )
    entry = metadata[tag]
    stats = entry.get("statistics") if isinstance(entry, Mapping) else None
    if not isinstance(stats, Mapping):
        raise NormStatsError(f"{meta_path}: {tag}.statistics is missing")
    parts = {}
    for part, name in (("state", "state"), ("action", "actions")):
        modalities = (entry.get("modalities") or {}).get(part) or stats.get(part) or {}
        parts[name] = normalisation_part(
            stats.get(part), list(modalities), set(), "min_max", f"{meta_path}: {tag}.{part}"
        )
    return tag, N15_PROJECTOR_INDEX[tag], _section(parts, tag, True)


# -- the whole checkpoint ------------------------------------------------------------------


def detect_layout(path: Path, config_json: Mapping[str, Any]) -> str:
    """The layout: ``isaac_gr00t`` (N1.7) or ``isaac_gr00t_n1d5``.

    N1.7: ``model_type`` Gr00tN1d7 or its processor files; N1.5:
    ``experiment_cfg/metadata.json``.
    """
    if config_json.get("model_type") == MODEL_TYPE or (path / PROCESSOR_NAME).is_file():
        return "isaac_gr00t"
    if (path / N15_METADATA).is_file():
        return "isaac_gr00t_n1d5"
    raise UnknownArchitectureError(
        f"{path}: neither a GR00T N1.7 checkpoint (config.json model_type {MODEL_TYPE!r}, "
        f"{PROCESSOR_NAME}) nor an N1.5 one ({N15_METADATA})"
    )


def read_checkpoint(
    path: str | Path,
    options: ImportOptions | None = None,
    embodiment: str | None = None,
    defaults: GrootConfig | None = None,
) -> GrootCheckpoint:
    """Check a checkpoint directory without reading a tensor (see the module docstring).

    Args:
        embodiment: the embodiment tag (``--embodiment``); ``options.embodiment`` when the
            options carry one; else the checkpoint's only tag.
        defaults: the sizes the files do not fix (vision heads and deepstack taps for an
            unknown width, RoPE bases, the tokenizer's ids, ``max_token_len``); full size
            N1.7 by default.

    Raises:
        CheckpointError: ``config.json`` or the weights absent or unreadable, a flag this
            module does not build, a size the files do not fix, or a video or state of
            several steps (:func:`check_single_step`).
        UnknownArchitectureError: not GR00T, or N1.5 (read as architecture ``groot_n15``).
        UnknownEmbodimentError: the tag asked for is not in the checkpoint.
        CheckpointKeysError: missing, unexpected or mis-shaped keys.
        NormStatsError: statistics absent, unreadable or non-finite.
    """
    options = options or ImportOptions()
    defaults = defaults or GrootConfig.full_n17()
    embodiment = embodiment or getattr(options, "embodiment", None)
    path = Path(path)
    config_json = read_config_json(path)
    layout = detect_layout(path, config_json)
    if layout == "isaac_gr00t_n1d5":
        tag, _, _ = n15_normalisation(path, embodiment)
        raise UnknownArchitectureError(
            f"{path}: a GR00T N1.5 checkpoint (embodiment {tag!r} found in {N15_METADATA}), "
            "not N1.7: its Eagle 2.5 backbone is architecture 'groot_n15' "
            "(vla_edge.archs.groot.n15_checkpoint), not 'groot' (N1.7's Qwen3-VL)"
        )
    processor_json = read_json(path / PROCESSOR_NAME, PROCESSOR_NAME)
    processor = dict(processor_json.get("processor_kwargs") or {})
    if not (path / STATISTICS_NAME).is_file():
        raise NormStatsError(
            f"{path / STATISTICS_NAME}: not found (N1.7 keeps the normalisation statistics "
            "there, keyed by embodiment tag)"
        )
    statistics = read_json(path / STATISTICS_NAME, STATISTICS_NAME, NormStatsError)
    ids = read_json(path / EMBODIMENT_ID_NAME, EMBODIMENT_ID_NAME)
    available = {t: ids[t] for t in statistics if isinstance(ids, Mapping) and t in ids}
    tag = select_embodiment(available, embodiment, str(path / STATISTICS_NAME))
    check_single_step(processor, tag, str(path / PROCESSOR_NAME))
    processor["image_slots"] = tag_modality(processor, tag, "video").get("modality_keys")
    files = weight_files(path)
    header = read_headers(path, files)
    shapes = {k: v[0] for k, v in header.items()}
    config = infer_config(shapes, config_json, processor, int(available[tag]), options, defaults)
    check_action_steps(processor, tag, config.action_horizon, str(path / PROCESSOR_NAME))
    check_keys(
        shapes, config, str(path / (INDEX_NAME if (path / INDEX_NAME).is_file() else WEIGHTS_NAME))
    )
    key_map = {k: k for k in model_shapes(config)}
    section = policy_normalisation(n17_normalisation(path, tag, processor), STATISTICS_NAME)
    return GrootCheckpoint(
        path=path,
        layout=layout,
        architecture=ARCHITECTURE,
        config=config,
        normalisation=section,
        weights_path=path / files[next(iter(key_map))],
        key_map=key_map,
        weights_dtypes=weights_dtypes(header, list(key_map)),
        asset_id=tag,
        stats_file=STATISTICS_NAME,
        config_json={**config_json, "weight_files": dict(sorted(files.items()))},
    )


def copy_weights(
    checkpoint: GrootCheckpoint, dst: Path, metadata: Mapping[str, str] | None = None
) -> None:
    """Write a checked checkpoint's tensors under this package's names to one file, streaming.

    Each tensor's bytes are copied unchanged from whichever shard holds it, a block of
    ``COPY_BLOCK_BYTES`` at a time; the result is checked by reading its header back.
    """
    import json
    import struct

    files = checkpoint.config_json["weight_files"]
    headers: dict[str, tuple[dict[str, Any], int]] = {}
    entries: dict[str, Any] = {}
    spans: list[tuple[str, int, int]] = []
    offset = 0
    for ours in sorted(checkpoint.key_map):
        theirs = checkpoint.key_map[ours]
        shard = files[theirs]
        if shard not in headers:
            headers[shard] = _raw_header(checkpoint.path / shard)
        info = headers[shard][0][theirs]
        begin, end = (int(x) for x in info["data_offsets"])
        size = end - begin
        entries[ours] = {
            "dtype": info["dtype"],
            "shape": info["shape"],
            "data_offsets": [offset, offset + size],
        }
        spans.append((shard, headers[shard][1] + begin, size))
        offset += size
    if metadata:
        entries["__metadata__"] = dict(metadata)
    text = json.dumps(entries, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(dst, "wb") as out:
        out.write(struct.pack("<Q", len(text)))
        out.write(text)
        for shard, start, size in spans:
            with open(checkpoint.path / shard, "rb") as src:
                src.seek(start)
                while size:
                    block = src.read(min(size, COPY_BLOCK_BYTES))
                    if not block:
                        raise CheckpointError(f"{checkpoint.path / shard}: truncated tensor data")
                    out.write(block)
                    size -= len(block)
    if set(read_header(dst)) != set(checkpoint.key_map):
        raise CheckpointError(f"{dst}: written header does not list the checked tensors")


def load_weights(
    policy_dir: Any, model: torch.nn.Module, only: torch.nn.Module | None = None
) -> None:
    """Load a policy directory's ``model.safetensors`` into a :class:`GrootModel`, strictly.

    The file is ours (:func:`copy_weights`); ``only``: one stage's part.

    Raises:
        CheckpointKeysError: a missing, unexpected or mis-shaped key (checked first).
    """
    weights_path = policy_weights_path(policy_dir)
    config: GrootConfig = model.config  # type: ignore[assignment]
    header = read_header(weights_path)
    report = compare_keys({k: v[0] for k, v in header.items()}, model_shapes(config))
    if not report.ok:
        raise CheckpointKeysError(format_key_report(report, str(weights_path)))
    load_tensors_into(model, weights_path, {k: k for k in header}, only)


def load_checkpoint_weights(checkpoint: GrootCheckpoint, model: torch.nn.Module) -> int:
    """Load a checked checkpoint's tensors straight from its shards, one at a time, strictly.

    Returns:
        How many tensors were read.
    """
    from safetensors import safe_open

    target = model.state_dict(keep_vars=True)
    report = KeyReport(
        missing=tuple(sorted(set(target) - set(checkpoint.key_map))),
        unexpected=tuple(sorted(set(checkpoint.key_map) - set(target))),
        misshaped=(),
    )
    if not report.ok:
        raise CheckpointKeysError(format_key_report(report, str(checkpoint.path)))
    files = checkpoint.config_json["weight_files"]
    by_shard: dict[str, list[str]] = {}
    for ours, theirs in checkpoint.key_map.items():
        by_shard.setdefault(files[theirs], []).append(ours)
    with torch.no_grad():
        for shard, keys in sorted(by_shard.items()):
            with safe_open(str(checkpoint.path / shard), framework="pt") as f:
                for key in keys:
                    value = f.get_tensor(checkpoint.key_map[key])
                    if tuple(value.shape) != tuple(target[key].shape):
                        raise CheckpointKeysError(
                            f"{checkpoint.path / shard}: {key} {list(value.shape)} "
                            f"(expected {list(target[key].shape)})"
                        )
                    target[key].copy_(value)
    return len(checkpoint.key_map)


__all__ = [
    "EMBODIMENT_ID_NAME",
    "GrootCheckpoint",
    "INDEX_NAME",
    "LAYOUTS",
    "PROCESSOR_NAME",
    "STATISTICS_NAME",
    "UnknownEmbodimentError",
    "copy_weights",
    "load_checkpoint_weights",
    "load_weights",
    "n15_normalisation",
    "n17_normalisation",
    "read_checkpoint",
    "select_embodiment",
]
