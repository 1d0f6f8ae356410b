"""π0 / π0.5's bench hooks: each size at random, and openpi's layout to write it in.

:data:`BENCH_PI0` and :data:`BENCH_PI05` are what ``vla-edge bench latency|parity|loop
--arch`` read (named by :mod:`.arch`); :func:`write_openpi_checkpoint` writes a model in
openpi's converted PyTorch layout, which ``vla-edge import`` reads back.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import numpy as np

from vla_edge.archs.architecture import BenchHooks
from vla_edge.archs.pi0.config import IMAGE_SLOTS, GemmaSize, Pi0Config
from vla_edge.archs.pi0.layout import UNUSED
from vla_edge.core.errors import ConfigError

OPENPI_ASSET_ID = "tabletop"
"""The asset directory of the openpi checkpoint's statistics."""
DEPTH_FIELDS = {
    "vision_encoder": ("vision",),
    "fusion": ("paligemma", "expert"),
    "action_head": ("paligemma", "expert"),
}
"""π0's layer counts that shrink one stage (the expert's depth equals the language
model's: it reads the per-layer cache)."""


def bench_config(size: str, cameras: int, *, pi05: bool) -> Pi0Config:
    """π0 / π0.5 at ``size`` (``full``: openpi's, ``small``: tiny) with ``cameras`` slots.

    Raises:
        ConfigError: an unknown size or more cameras than slots.
    """
    if size == "full":
        build: Any = Pi0Config.full_pi05 if pi05 else Pi0Config.full_pi0
    elif size == "small":
        build = functools.partial(Pi0Config.tiny, pi05=pi05)
    else:
        raise ConfigError(f"size = {size!r}, expected one of ('full', 'small')")
    if not 1 <= cameras <= len(IMAGE_SLOTS):
        name = "pi05" if pi05 else "pi0"
        raise ConfigError(f"cameras = {cameras}: {name} has {len(IMAGE_SLOTS)} image slots")
    return build(image_slots=tuple(IMAGE_SLOTS[:cameras]))


def loop_config(size: str, cameras: int, *, pi05: bool) -> Pi0Config:
    """The model at ``size`` as openpi's layout describes it.

    openpi's layout always has the three image slots (``cameras`` of them get a robot
    camera, the others are masked), and its ``config.json`` names the Gemma sizes by
    variant, so the small size takes openpi's ``dummy`` variant for both Gemmas.
    """
    if size == "full":
        return bench_config(size, len(IMAGE_SLOTS), pi05=pi05)
    return Pi0Config.tiny(pi05=pi05, expert=GemmaSize.dummy())


def openpi_statistics(stats: dict[str, np.ndarray]) -> dict[str, dict[str, list[float]]]:
    """:func:`home_statistics` as openpi's ``norm_stats.json`` parts: mean / std, q01 / q99.

    The quantiles (π0.5's normalisation) are two standard deviations either side.
    """
    parts = {}
    for part, key in (("state", "observation.state"), ("actions", "action")):
        mean, std = stats[f"{key}.mean"], stats[f"{key}.std"]
        parts[part] = {
            "mean": mean.tolist(),
            "std": std.tolist(),
            "q01": (mean - 2.0 * std).tolist(),
            "q99": (mean + 2.0 * std).tolist(),
        }
    return parts


def write_openpi_checkpoint(
    out: Path,
    model: Any,
    norm_stats: dict[str, dict[str, list[float]]],
    variants: tuple[str, str] = ("gemma_2b", "gemma_300m"),
    asset_id: str = OPENPI_ASSET_ID,
) -> Path:
    """``model`` (a Pi0Model) in openpi's converted PyTorch layout.

    ``model.safetensors`` (openpi's keys: the tied embedding dropped, the expert's unused
    ``lm_head`` written), ``config.json`` with the Gemma ``variants`` (PaliGemma's, the
    expert's), and ``assets/<asset_id>/norm_stats.json`` with ``norm_stats``
    (``{"state": {...}, "actions": {...}}``, each with ``mean``, ``std``, ``q01``, ``q99``).
    The tensors are written from the model's own memory (a full-size π0 is not copied).
    """
    import torch
    from safetensors.torch import save_file

    from vla_edge.archs.pi0.layout import FILE_DROPS

    c = model.config
    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.contiguous() for k, v in model.state_dict().items() if k not in FILE_DROPS}
    tensors[UNUSED[0]] = torch.zeros(c.vocab_size, c.expert.width)
    save_file(tensors, str(out / "model.safetensors"))
    del tensors
    config = {
        "action_dim": c.action_dim,
        "action_horizon": c.action_horizon,
        "max_token_len": c.max_token_len,
        "paligemma_variant": variants[0],
        "action_expert_variant": variants[1],
        "precision": "float32",
    }
    (out / "config.json").write_text(json.dumps(config, indent=1))
    assets = out / "assets" / asset_id
    assets.mkdir(parents=True, exist_ok=True)
    (assets / "norm_stats.json").write_text(json.dumps({"norm_stats": norm_stats}, indent=1))
    return out


def write_checkpoint(out: Path, model: Any, stats: dict[str, Any], size: str) -> Path:
    """``model`` in openpi's layout with LeRobot-keyed ``stats`` (as openpi's parts)."""
    variants = ("gemma_2b", "gemma_300m") if size == "full" else ("dummy", "dummy")
    return write_openpi_checkpoint(out, model, openpi_statistics(stats), variants)


def import_options(name: str, size: str, config: Any) -> dict[str, Any]:
    """What the import is told: the architecture, and a small size's vision heads."""
    heads = {} if size == "full" else {"vision_heads": config.vision.num_heads}
    return {"architecture": name, **heads}


def _hooks(pi05: bool) -> BenchHooks:
    return BenchHooks(
        config=functools.partial(bench_config, pi05=pi05),
        default_cameras=(1, 3),
        depth_fields=DEPTH_FIELDS,
        loop_config=functools.partial(loop_config, pi05=pi05),
        write_checkpoint=write_checkpoint,
        import_options=import_options,
        unread_keys=tuple(UNUSED),
    )


BENCH_PI0 = _hooks(pi05=False)
"""π0's bench hooks (:attr:`vla_edge.archs.architecture.Architecture.bench`)."""
BENCH_PI05 = _hooks(pi05=True)
"""π0.5's bench hooks."""
