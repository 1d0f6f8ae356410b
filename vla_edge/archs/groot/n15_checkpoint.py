"""Read a GR00T N1.5 checkpoint directory: header check, sizes, embodiment, statistics.

The layout (``isaac_gr00t_n1d5``; NVIDIA/Isaac-GR00T at the N1.5 release, what
``GR00T_N1_5.save_pretrained`` and the training script write):

* ``config.json``: ``model_type`` ``gr00t_n1_5``, ``backbone_cfg`` (``select_layer``,
  ``project_to_dim``) and ``action_head_cfg`` (``diffusion_model_cfg``,
  ``vl_self_attention_cfg``, ``hidden_size``, ``action_horizon``,
  ``num_inference_timesteps``, ...);
* the weights as ``model.safetensors`` or sharded ``model-*.safetensors`` with
  ``model.safetensors.index.json``, keys under ``backbone.eagle_model.`` (and
  ``backbone.eagle_linear.`` when projected) and ``action_head.``
  (:mod:`vla_edge.archs.groot.n15_model`);
* ``experiment_cfg/metadata.json``: ``{tag: {"statistics": {"state" | "action": {group:
  {min, max, mean, std, q01, q99}}}, "modalities": {...}}}``, read by
  :func:`~vla_edge.archs.groot.checkpoint.n15_normalisation`.

:func:`read_checkpoint` reads only the headers and the JSON files, derives the
:class:`GrootN15Config` (sizes from the shapes; attention heads from ``config.json`` or
``defaults``) and checks every key and shape before a tensor is read: a mismatch is a
:class:`~vla_edge.core.errors.CheckpointKeysError` listing the missing, unexpected and
mis-shaped keys. Upstream's files may also hold tensors no action reads
(:data:`UNUSED_PREFIXES`: the language model's ``lm_head``, a SigLIP pooling head); they
are accepted and not built. The tensors are copied and loaded by the N1.7 module's
streaming functions (:func:`~vla_edge.archs.groot.checkpoint.copy_weights`,
:func:`~vla_edge.archs.groot.checkpoint.load_checkpoint_weights`), which read only the
key map.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from vla_edge.archs.common import (
    WEIGHTS_NAME,
    Checkpoint,
    ImportOptions,
    compare_keys,
    format_key_report,
    layer_count,
    load_tensors_into,
    policy_weights_path,
    read_config_json,
    read_header,
    weights_dtypes,
)
from vla_edge.archs.groot.checkpoint import (
    INDEX_NAME,
    N15_METADATA,
    n15_normalisation,
    read_headers,
    weight_files,
)
from vla_edge.archs.groot.config import TransformerSize
from vla_edge.archs.groot.n15_config import GrootN15Config, Qwen3Size, SiglipSize
from vla_edge.archs.groot.n15_model import GrootN15Model
from vla_edge.archs.groot.processor import policy_normalisation
from vla_edge.core.errors import CheckpointError, CheckpointKeysError, ConfigError

LAYOUT = "isaac_gr00t_n1d5"
ARCHITECTURE = "groot_n15"
MODEL_TYPE = "gr00t_n1_5"
EAGLE_PREFIX = "backbone.eagle_model."
VISION_PREFIX = EAGLE_PREFIX + "vision_model.vision_model."
TEXT_PREFIX = EAGLE_PREFIX + "language_model.model."
HEAD_PREFIX = "action_head."
PROJECTION_KEY = "backbone.eagle_linear.weight"
UNUSED_PREFIXES = (EAGLE_PREFIX + "language_model.lm_head.", VISION_PREFIX + "head.")
"""Tensors upstream's files may hold that no action is computed from (not built)."""
VISION_HEADS_BY_WIDTH = {1152: 16}
"""SigLIP heads for a hidden width (SigLIP-400M); others: ``--vision-heads``."""


def model_shapes(config: GrootN15Config) -> dict[str, tuple[int, ...]]:
    """This package's state-dict keys and shapes for ``config`` (built on the meta device)."""
    with torch.device("meta"):
        model = GrootN15Model(config)
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def unused(key: str) -> bool:
    """Whether ``key`` is one of upstream's tensors that no action reads."""
    return key.startswith(UNUSED_PREFIXES)


def check_keys(shapes: Mapping[str, tuple[int, ...]], config: GrootN15Config, source: str) -> None:
    """Compare the file's keys and shapes with ``config``'s layout (unread tensors allowed).

    Raises:
        CheckpointKeysError: missing, unexpected or mis-shaped keys, each listed.
    """
    found = {k: s for k, s in shapes.items() if not unused(k)}
    report = compare_keys(found, model_shapes(config))
    if not report.ok:
        raise CheckpointKeysError(format_key_report(report, source))


# -- sizes -------------------------------------------------------------------------------------


def _shape(shapes: Mapping[str, tuple[int, ...]], key: str, rank: int) -> tuple[int, ...]:
    found = shapes.get(key)
    if found is None or len(found) != rank:
        raise CheckpointKeysError(
            f"{key}: {'missing' if found is None else f'shape {list(found)}'}; the N1.5 layout "
            f"needs it as a rank-{rank} tensor to size the model"
        )
    return tuple(found)


def _siglip(
    shapes: Mapping[str, tuple[int, ...]], base: SiglipSize, heads: int | None
) -> SiglipSize:
    patch = _shape(shapes, VISION_PREFIX + "embeddings.patch_embedding.weight", 4)
    table = _shape(shapes, VISION_PREFIX + "embeddings.position_embedding.weight", 2)
    fc1 = _shape(shapes, VISION_PREFIX + "encoder.layers.0.mlp.fc1.weight", 2)
    key = EAGLE_PREFIX + ("mlp1.1.weight" if projector_layers(shapes) == 2 else "mlp1.0.weight")
    projector = _shape(shapes, key, 2)
    hidden = patch[0]
    grid = math.isqrt(table[0])
    shuffle = math.isqrt(projector[1] // hidden) if projector[1] % hidden == 0 else 0
    if grid * grid != table[0] or shuffle * shuffle * hidden != projector[1]:
        raise CheckpointError(
            f"{VISION_PREFIX}embeddings.position_embedding.weight {list(table)} and "
            f"{key} {list(projector)}: not a square patch grid folded by a square pixel "
            f"shuffle of the vision width {hidden}"
        )
    if heads is None:
        heads = base.num_heads if hidden == base.hidden else VISION_HEADS_BY_WIDTH.get(hidden)
    if heads is None:
        raise CheckpointError(
            f"{VISION_PREFIX}embeddings.patch_embedding.weight: the vision width {hidden} does "
            f"not fix its attention heads (known widths: {sorted(VISION_HEADS_BY_WIDTH)}); "
            "pass --vision-heads"
        )
    return SiglipSize(
        hidden=hidden,
        depth=layer_count(shapes, VISION_PREFIX + "encoder.layers.") or 0,
        num_heads=heads,
        mlp_dim=fc1[0],
        patch_size=patch[2],
        image_size=grid * patch[2],
        layer_norm_eps=base.layer_norm_eps,
        shuffle=shuffle,
    )


def projector_layers(shapes: Mapping[str, tuple[int, ...]]) -> int:
    """2 when ``mlp1`` opens with a ``LayerNorm`` (a rank-1 ``mlp1.0.weight``), else 1."""
    first = shapes.get(EAGLE_PREFIX + "mlp1.0.weight")
    return 2 if first is not None and len(first) == 1 else 1


def _qwen3(shapes: Mapping[str, tuple[int, ...]], base: Qwen3Size) -> Qwen3Size:
    table = _shape(shapes, TEXT_PREFIX + "embed_tokens.weight", 2)
    layer = TEXT_PREFIX + "layers.0."
    gate = _shape(shapes, layer + "mlp.gate_proj.weight", 2)
    q = _shape(shapes, layer + "self_attn.q_proj.weight", 2)
    k = _shape(shapes, layer + "self_attn.k_proj.weight", 2)
    head_dim = _shape(shapes, layer + "self_attn.q_norm.weight", 1)[0]
    return Qwen3Size(
        width=table[1],
        depth=layer_count(shapes, TEXT_PREFIX + "layers.") or 0,
        mlp_dim=gate[0],
        num_heads=q[0] // head_dim,
        num_kv_heads=k[0] // head_dim,
        head_dim=head_dim,
        vocab_size=table[0],
        rope_theta=base.rope_theta,
        rms_norm_eps=base.rms_norm_eps,
    )


def _transformer(
    cfg: Any, base: TransformerSize, depth: int | None, name: str
) -> tuple[TransformerSize, Mapping[str, Any]]:
    """A transformer's sizes from its ``action_head_cfg`` entry, refusing what is not built.

    An absent ``positional_embeddings`` is upstream's class default, ``"sinusoidal"``.
    """
    if not isinstance(cfg, Mapping):
        raise CheckpointError(f"config.json: action_head_cfg.{name} is missing (an object)")
    positional = cfg.get("positional_embeddings", "sinusoidal")
    if positional not in (None, "none"):
        raise CheckpointError(
            f"config.json: action_head_cfg.{name}.positional_embeddings = {positional!r}; "
            "only None (the released N1.5's) is built"
        )
    if cfg.get("norm_type", "ada_norm") != "ada_norm" and name == "diffusion_model_cfg":
        raise CheckpointError(
            f"config.json: action_head_cfg.{name}.norm_type = {cfg['norm_type']!r}; only "
            "'ada_norm' (the released N1.5's) is built"
        )
    size = TransformerSize(
        depth=depth or int(cfg.get("num_layers", base.depth)),
        num_heads=int(cfg.get("num_attention_heads", base.num_heads)),
        head_dim=int(cfg.get("attention_head_dim", base.head_dim)),
    )
    return size, cfg


_BUILT_ONLY = {"use_vlln": True, "add_pos_embed": True}
"""``action_head_cfg`` flags built only at the released N1.5's value."""


def infer_config(
    shapes: Mapping[str, tuple[int, ...]],
    config_json: Mapping[str, Any],
    embodiment_id: int,
    options: ImportOptions,
    defaults: GrootN15Config,
) -> GrootN15Config:
    """The :class:`GrootN15Config` a checkpoint describes.

    Raises:
        CheckpointError: a flag not built, a size the files do not fix, or sizes that
            describe no valid N1.5 (the config's own check, named).
        CheckpointKeysError: a tensor needed to size the model is missing or of another rank.
    """
    head_cfg = config_json.get("action_head_cfg") or {}
    backbone_cfg = config_json.get("backbone_cfg") or {}
    for name, value in _BUILT_ONLY.items():
        if name in head_cfg and head_cfg[name] != value:
            raise CheckpointError(
                f"config.json: action_head_cfg.{name} = {head_cfg[name]!r}; only {value!r} "
                "(the released N1.5's) is built"
            )
    dit, dit_cfg = _transformer(
        head_cfg.get("diffusion_model_cfg"),
        defaults.dit,
        layer_count(shapes, HEAD_PREFIX + "model.transformer_blocks."),
        "diffusion_model_cfg",
    )
    vlsa, _ = _transformer(
        head_cfg.get("vl_self_attention_cfg"),
        defaults.vl_self_attention,
        layer_count(shapes, HEAD_PREFIX + "vl_self_attention.transformer_blocks."),
        "vl_self_attention_cfg",
    )
    text = _qwen3(shapes, defaults.text)
    select = backbone_cfg.get("select_layer")
    if select is not None and int(select) != text.depth:
        raise CheckpointError(
            f"config.json: backbone_cfg.select_layer = {select} but the weights hold "
            f"{text.depth} language-model layers"
        )
    projection = shapes.get(PROJECTION_KEY)
    state = _shape(shapes, HEAD_PREFIX + "state_encoder.layer1.W", 3)
    time_in = _shape(
        shapes, HEAD_PREFIX + "model.timestep_encoder.timestep_embedder.linear_1.weight", 2
    )

    def pick(name: str, default: Any) -> Any:
        return head_cfg[name] if head_cfg.get(name) is not None else default

    fields: dict[str, Any] = {
        **defaults.model_dump(),
        "vision": _siglip(shapes, defaults.vision, options.vision_heads),
        "text": text,
        "project_to_dim": projection[0] if projection else None,
        "projector_layers": projector_layers(shapes),
        "dit": dit,
        "vl_self_attention": vlsa,
        # upstream's DiT class default is False
        "interleave_self_attention": bool(dit_cfg.get("interleave_self_attention", False)),
        "hidden_size": _shape(shapes, HEAD_PREFIX + "model.proj_out_2.weight", 2)[0],
        "max_state_dim": state[1],
        "max_action_dim": _shape(shapes, HEAD_PREFIX + "action_encoder.W1.W", 3)[1],
        "action_horizon": options.action_horizon
        or pick("action_horizon", config_json.get("action_horizon", defaults.action_horizon)),
        "max_seq_len": _shape(shapes, HEAD_PREFIX + "position_embedding.weight", 2)[0],
        "num_future_tokens": _shape(shapes, HEAD_PREFIX + "future_tokens.weight", 2)[0],
        "max_num_embodiments": state[0],
        "flow_steps": pick("num_inference_timesteps", defaults.flow_steps),
        "num_timestep_buckets": pick("num_timestep_buckets", defaults.num_timestep_buckets),
        "timestep_channels": time_in[1],
        "embodiment_id": embodiment_id,
    }
    cross = dit_cfg.get("cross_attention_dim")
    width = fields["project_to_dim"] or text.width
    if cross is not None and int(cross) != width:
        raise CheckpointError(
            f"config.json: action_head_cfg.diffusion_model_cfg.cross_attention_dim = {cross} "
            f"but the backbone's features are {width} wide"
        )
    try:
        return GrootN15Config(**fields)
    except ConfigError as exc:
        raise CheckpointError(
            f"config.json and the weights describe no valid GR00T N1.5: {exc}"
        ) from exc


# -- the whole checkpoint --------------------------------------------------------------------


def read_checkpoint(
    path: str | Path,
    options: ImportOptions | None = None,
    embodiment: str | None = None,
    defaults: GrootN15Config | None = None,
) -> Checkpoint:
    """Check an N1.5 checkpoint directory without reading a tensor (module docstring).

    Args:
        embodiment: the embodiment tag (``--embodiment``); ``options.embodiment`` when the
            options carry one; else the checkpoint's only tag.
        defaults: what the files do not fix (heads of an unknown SigLIP width, RoPE base,
            the tokenizer's ids, ``max_token_len``, the image slots); full size by default.

    ``options.tokenizer`` (set by ``vla-edge import``): the prompt layout's ids come from
    that tokenizer directory (:func:`with_tokenizer_layout`).

    Raises:
        CheckpointError: ``config.json`` or the weights absent or unreadable, a flag not
            built, a size the files do not fix, an embodiment slice outside the encoders.
        UnknownEmbodimentError: the tag asked for is not in ``metadata.json`` (its tags listed).
        NormStatsError: ``metadata.json`` absent, or the tag's statistics missing or malformed.
        CheckpointKeysError: missing, unexpected or mis-shaped keys.
        TokenizerMismatchError: ``options.tokenizer`` numbers the layout otherwise.
    """
    options = options or ImportOptions()
    defaults = defaults or GrootN15Config.full_n15()
    embodiment = embodiment or getattr(options, "embodiment", None)
    path = Path(path)
    config_json = read_config_json(path)
    tag, slice_id, section = n15_normalisation(path, embodiment)
    files = weight_files(path)
    header = read_headers(path, files)
    shapes = {k: v[0] for k, v in header.items()}
    source = str(path / (INDEX_NAME if (path / INDEX_NAME).is_file() else WEIGHTS_NAME))
    max_slices = _shape(shapes, HEAD_PREFIX + "state_encoder.layer1.W", 3)[0]
    if slice_id >= max_slices:
        raise CheckpointError(
            f"{path / N15_METADATA}: embodiment {tag!r} uses weight slice {slice_id} but the "
            f"per-embodiment encoders in {source} hold {max_slices}"
        )
    config = infer_config(shapes, config_json, slice_id, options, defaults)
    check_keys(shapes, config, source)
    tokenizer = getattr(options, "tokenizer", None)
    if tokenizer is not None:
        config = with_tokenizer_layout(config, tokenizer)
    key_map = {k: k for k in model_shapes(config)}
    return Checkpoint(
        path=path,
        layout=LAYOUT,
        architecture=ARCHITECTURE,
        config=config,
        normalisation=policy_normalisation(section, N15_METADATA),
        weights_path=path / files[next(iter(key_map))],
        key_map=key_map,
        weights_dtypes=weights_dtypes(header, list(key_map)),
        asset_id=tag,
        stats_file=N15_METADATA,
        config_json={**config_json, "weight_files": dict(sorted(files.items()))},
    )


def with_tokenizer_layout(config: GrootN15Config, tokenizer: str | Path) -> GrootN15Config:
    """``config`` with the prompt layout's ids as ``tokenizer`` numbers them.

    :func:`vla_edge.archs.groot.n15_prompt.chat_layout`: the lead, the slot labels and
    ``<img>`` / ``</img>`` from the tokenizer, its ``<IMG_CONTEXT>`` checked against
    ``image_token_id``.

    Raises:
        TokenizerMismatchError: as ``chat_layout``, or ids past the embedding table.
    """
    from vla_edge.archs.groot.n15_prompt import chat_layout
    from vla_edge.core.errors import TokenizerMismatchError

    layout = chat_layout(tokenizer, config.n_slots, config.image_token_id)
    try:
        return GrootN15Config(**{**config.model_dump(), **layout})
    except ConfigError as exc:
        raise TokenizerMismatchError(
            f"tokenizer = {str(tokenizer)!r}: its chat layout does not fit the model: {exc}"
        ) from exc


def load_weights(
    policy_dir: Any, model: torch.nn.Module, only: torch.nn.Module | None = None
) -> None:
    """Load a policy directory's ``model.safetensors`` into a :class:`GrootN15Model`, strictly.

    Raises:
        CheckpointKeysError: a missing, unexpected or mis-shaped key (checked first).
    """
    weights_path = policy_weights_path(policy_dir)
    header = read_header(weights_path)
    report = compare_keys({k: v[0] for k, v in header.items()}, model_shapes(model.config))
    if not report.ok:
        raise CheckpointKeysError(format_key_report(report, str(weights_path)))
    load_tensors_into(model, weights_path, {k: k for k in header}, only)


__all__ = [
    "ARCHITECTURE",
    "LAYOUT",
    "UNUSED_PREFIXES",
    "check_keys",
    "infer_config",
    "load_weights",
    "model_shapes",
    "read_checkpoint",
    "with_tokenizer_layout",
]
