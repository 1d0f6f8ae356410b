"""``VlaPolicy``: the four stages, the normalisation statistics, and the checkpoint format.

Stages (each its own ``nn.Module``, exported separately):

1. ``language_encoder`` — frozen all-MiniLM-L6-v2 (weights from the installed
   package, never stored in a checkpoint), ``[1, L]`` ids + mask -> ``[1, 384]``;
2. ``vision_encoder`` — ``[n_cams, 3, h, w]`` in [0, 1] -> ``[n_cams, T_v, D]``;
3. ``fusion`` — visual tokens, language ``[1, 384]``, normalised state ``[1, A]``
   -> context ``[1, T_c, D]``;
4. ``action_head`` — context, noise ``[1, H, A]``, prefix ``[1, H, A]``, prefix
   mask ``[1, H]`` -> normalised chunk ``[1, H, A]``.

Action representation: the joint dimensions (``delta_actions`` true in the
config, by default the six arm joints) are predicted relative to the current
measured state; the gripper is absolute. Then every dimension is standardised
with the training data's statistics. :class:`ActionCodec` applies exactly this
transform for every backend; the checkpoint stores ``delta_actions`` in its
model config and the statistics as ``norm_stats``.

Checkpoint: one ``.pt`` file written with ``torch.save`` holding only tensors
and JSON-able values (no pickled classes), read with ``weights_only=True``::

    {"format": "vla_edge.policy.v1", "model_config": {...}, "norm_stats": {...},
     "stages": {"vision_encoder": state_dict, "fusion": ..., "action_head": ...},
     "source_hash": sha256 of the policy source files, "weights_sha256": ...,
     "train_config": {...} | None, "step": int, "optimizer": state_dict | None,
     "meta": {...}}
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from vla_edge.archs.bundled.action_head import ActionHead
from vla_edge.archs.bundled.config import (
    PolicyConfig,
    policy_config_from_dict,
    train_config_from_dict,
)
from vla_edge.archs.bundled.fusion import Fusion
from vla_edge.archs.bundled.normalize import ActionCodec, NormStats
from vla_edge.archs.bundled.vision import VisionEncoder
from vla_edge.core.errors import CheckpointError, ConfigError, RemovedFeatureError

CHECKPOINT_FORMAT = "vla_edge.policy.v1"
STAGE_NAMES = ("language_encoder", "vision_encoder", "fusion", "action_head")
TRAINED_STAGES = ("vision_encoder", "fusion", "action_head")
_SOURCE_FILES = (
    "config.py",
    "layers.py",
    "tokenizer.py",
    "language.py",
    "vision.py",
    "fusion.py",
    "action_head.py",
    "normalize.py",
    "model.py",
)


def source_hash() -> str:
    """sha256 of the policy's model source files (detects code drift from a checkpoint)."""
    digest = hashlib.sha256()
    folder = Path(__file__).resolve().parent
    for name in _SOURCE_FILES:
        digest.update(name.encode())
        digest.update((folder / name).read_bytes())
    return digest.hexdigest()


def weights_hash(stages: dict[str, dict[str, torch.Tensor]]) -> str:
    """sha256 over stage names, parameter names, shapes and float32 bytes."""
    digest = hashlib.sha256()
    for stage in sorted(stages):
        for name in sorted(stages[stage]):
            tensor = stages[stage][name].detach().cpu().contiguous()
            digest.update(f"{stage}.{name}:{tuple(tensor.shape)}:{tensor.dtype}".encode())
            digest.update(tensor.numpy().tobytes())
    return digest.hexdigest()


class VlaPolicy(nn.Module):
    """The four stages plus normalisation statistics.

    Args:
        config: shapes and sizes.
        stats: normalisation statistics (identity when ``None``: untrained).
        load_language: load the frozen MiniLM now (needed for inference from
            text; training uses precomputed embeddings and skips it).
    """

    def __init__(
        self, config: PolicyConfig, stats: NormStats | None = None, load_language: bool = False
    ) -> None:
        super().__init__()
        self.config = config
        self.stats = stats if stats is not None else NormStats.identity(config.action_dim)
        self.codec = ActionCodec(self.stats, config.delta_actions)
        self.vision_encoder = VisionEncoder(config)
        self.fusion = Fusion(config)
        self.action_head = ActionHead(config)
        self.language_encoder: nn.Module | None = None
        self.checkpoint_info: dict[str, Any] = {}
        if load_language:
            self.ensure_language_encoder()

    def ensure_language_encoder(self) -> nn.Module:
        """Load the frozen MiniLM stage on first use and return it."""
        if self.language_encoder is None:
            from vla_edge.archs.bundled.language import LanguageEncoder

            self.language_encoder = LanguageEncoder()
        return self.language_encoder

    def set_stats(self, stats: NormStats) -> None:
        """Replace the normalisation statistics (after computing them from data)."""
        self.stats = stats
        self.codec = ActionCodec(stats, self.config.delta_actions)

    def context(
        self, images: torch.Tensor, lang: torch.Tensor, state_norm: torch.Tensor
    ) -> torch.Tensor:
        """Stages 2 and 3: ``images [B*n_cams, 3, h, w]`` -> context ``[B, T_c, D]``."""
        return self.fusion(self.vision_encoder(images), lang, state_norm)

    def stage_state_dicts(self) -> dict[str, dict[str, torch.Tensor]]:
        """State dicts of the trained stages (not the frozen language encoder)."""
        return {
            name: {k: v.detach().clone() for k, v in getattr(self, name).state_dict().items()}
            for name in TRAINED_STAGES
        }

    def parameter_counts(self) -> dict[str, int]:
        """Parameters per stage (the language encoder only when loaded)."""
        counts = {
            name: sum(p.numel() for p in getattr(self, name).parameters())
            for name in TRAINED_STAGES
        }
        if self.language_encoder is not None:
            counts["language_encoder"] = sum(p.numel() for p in self.language_encoder.parameters())
        return counts


def save_checkpoint(
    path: str | Path,
    policy: VlaPolicy,
    *,
    train_config: dict[str, Any] | None = None,
    step: int = 0,
    optimizer_state: dict[str, Any] | None = None,
    meta: dict[str, Any] | None = None,
    train_modules: dict[str, dict[str, torch.Tensor]] | None = None,
) -> str:
    """Write ``policy`` (and optional training state) atomically; return the weights hash."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    stages = policy.stage_state_dicts()
    digest = weights_hash(stages)
    payload = {
        "format": CHECKPOINT_FORMAT,
        "model_config": policy.config.model_dump(mode="json"),
        "norm_stats": policy.stats.to_dict(),
        "stages": stages,
        "source_hash": source_hash(),
        "weights_sha256": digest,
        "train_config": train_config,
        "step": int(step),
        "optimizer": optimizer_state,
        "meta": meta or {},
        "train_modules": train_modules,
    }
    tmp = path.with_name(path.name + ".tmp")
    torch.save(payload, tmp)
    tmp.replace(path)
    return digest


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint's raw dictionary with ``weights_only=True``.

    Raises:
        CheckpointError: the file is missing, unreadable, or lacks a field.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {path}: file not found")
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unpickling failure means a bad file
        raise CheckpointError(f"checkpoint {path}: not a readable checkpoint: {exc}") from exc
    if not isinstance(payload, dict):
        raise CheckpointError(f"checkpoint {path}: top level is {type(payload).__name__}, not dict")
    fmt = payload.get("format")
    if fmt != CHECKPOINT_FORMAT:
        raise CheckpointError(
            f"checkpoint {path}: format = {fmt!r}, expected {CHECKPOINT_FORMAT!r}"
        )
    for key in ("model_config", "norm_stats", "stages"):
        if key not in payload:
            raise CheckpointError(f"checkpoint {path}: field {key} is missing")
    return payload


def checkpoint_configs(
    payload: dict[str, Any], path: str | Path
) -> tuple[PolicyConfig, dict[str, Any] | None]:
    """A raw checkpoint's model config and training config, removed fields dropped.

    A field of a removed feature that holds the value the code now hard-wires is
    dropped (:func:`vla_edge.archs.bundled.config.drop_removed_fields`), so checkpoints
    written before the removal load unchanged.

    Raises:
        RemovedFeatureError: the checkpoint was made with a removed feature (the
            field, its value and the only accepted value are named).
        CheckpointError: a config is not a mapping, or the model config does not validate.
    """
    source = f"checkpoint {path}"
    train_config = payload.get("train_config")
    try:
        config = policy_config_from_dict(payload["model_config"], source)
        if train_config is not None:
            train_config = train_config_from_dict(train_config, source)
    except RemovedFeatureError:
        raise
    except ConfigError as exc:
        raise CheckpointError(str(exc)) from exc
    return config, train_config


def checkpoint_stats(payload: dict[str, Any], action_dim: int, path: str | Path) -> NormStats:
    """A raw checkpoint's normalisation statistics (``payload`` from :func:`read_checkpoint`).

    Raises:
        CheckpointError: ``norm_stats`` is not a dict, or a field is missing, of the
            wrong length, non-finite or (a std) not positive.
    """
    stored = payload["norm_stats"]
    if not isinstance(stored, dict):
        raise CheckpointError(
            f"checkpoint {path}: field norm_stats is {type(stored).__name__}, expected a dict"
        )
    try:
        return NormStats.from_dict(stored, action_dim)
    except ConfigError as exc:
        raise CheckpointError(f"checkpoint {path}: {exc}") from exc


def checkpoint_train_modules(payload: dict[str, Any], path: str | Path) -> dict[str, Any]:
    """A raw checkpoint's training-only modules (probes, raw weights); ``{}`` if it keeps none.

    Raises:
        CheckpointError: ``train_modules`` or one of its entries is not a dict.
    """
    stored = payload.get("train_modules") or {}
    if not isinstance(stored, dict) or not all(isinstance(v, dict) for v in stored.values()):
        raise CheckpointError(
            f"checkpoint {path}: field train_modules is not a dict of state dicts"
        )
    return stored


def _checked_stages(payload: dict[str, Any], path: str | Path) -> dict[str, Any]:
    """The payload's ``stages``, checked: dicts of finite tensors whose hash matches the file's.

    Raises:
        CheckpointError: ``stages`` or a stage is not a dict of tensors, a trained
            stage is missing, a weight is NaN or inf, or the recomputed
            :func:`weights_hash` differs from a stored ``weights_sha256``.
    """
    stages = payload["stages"]
    if not isinstance(stages, dict):
        raise CheckpointError(
            f"checkpoint {path}: field stages is {type(stages).__name__}, expected a dict "
            f"of {list(TRAINED_STAGES)}"
        )
    for name in TRAINED_STAGES:
        if name not in stages:
            raise CheckpointError(f"checkpoint {path}: stage {name} is missing")
    for name, state in stages.items():
        if not isinstance(state, dict):
            raise CheckpointError(
                f"checkpoint {path}: stage {name} is {type(state).__name__}, expected a "
                "state dict (parameter name -> tensor)"
            )
        for key, tensor in state.items():
            if not isinstance(tensor, torch.Tensor):
                raise CheckpointError(
                    f"checkpoint {path}: stage {name} entry {key!r} is "
                    f"{type(tensor).__name__}, expected a tensor"
                )
            if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                raise CheckpointError(
                    f"checkpoint {path}: stage {name} weight {key} holds NaN or inf"
                )
    stored = payload.get("weights_sha256")
    if stored is not None:
        if not isinstance(stored, str):
            raise CheckpointError(
                f"checkpoint {path}: field weights_sha256 = {stored!r} "
                f"({type(stored).__name__}), expected a hex str"
            )
        try:
            actual = weights_hash(stages)
        except (TypeError, RuntimeError) as exc:  # e.g. a dtype numpy cannot hold
            raise CheckpointError(f"checkpoint {path}: weights cannot be hashed: {exc}") from exc
        if actual != stored:
            raise CheckpointError(
                f"checkpoint {path}: weights sha256 = {actual} differs from the stored "
                f"weights_sha256 = {stored}: the stages were changed after saving"
            )
    return stages


def load_checkpoint(path: str | Path, load_language: bool = False) -> VlaPolicy:
    """Rebuild a :class:`VlaPolicy` from a checkpoint (eval mode).

    The returned policy carries ``checkpoint_info``: source and weights hashes,
    step, train config and meta from the file.

    Raises:
        CheckpointError: bad file, a field of the wrong type, missing stage, a
            non-finite weight, weights whose sha256 differs from the stored
            ``weights_sha256``, or weights that do not fit the config.
        RemovedFeatureError: the checkpoint was made with a removed feature.
    """
    return policy_from_payload(read_checkpoint(path), path, load_language)


def policy_from_payload(
    payload: dict[str, Any], path: str | Path, load_language: bool = False
) -> VlaPolicy:
    """:func:`load_checkpoint` on a payload already read with :func:`read_checkpoint`."""
    step = payload.get("step", 0)
    if isinstance(step, bool) or not isinstance(step, int):
        raise CheckpointError(
            f"checkpoint {path}: field step = {step!r} ({type(step).__name__}), expected an int"
        )
    config, train_config = checkpoint_configs(payload, path)
    stats = checkpoint_stats(payload, config.action_dim, path)
    stages = _checked_stages(payload, path)
    policy = VlaPolicy(config, stats, load_language=load_language)
    for name in TRAINED_STAGES:
        try:
            getattr(policy, name).load_state_dict(stages[name])
        except RuntimeError as exc:
            raise CheckpointError(
                f"checkpoint {path}: stage {name} does not fit the model config: {exc}"
            ) from exc
    policy.eval()
    policy.checkpoint_info = {
        "path": str(path),
        "source_hash": payload.get("source_hash"),
        "weights_sha256": payload.get("weights_sha256"),
        "step": step,
        "train_config": train_config,
        "meta": payload.get("meta", {}),
        "source_matches": payload.get("source_hash") == source_hash(),
    }
    return policy


def sample_noise(generator: torch.Generator, horizon: int, action_dim: int) -> np.ndarray:
    """Standard-normal ``[H, A]`` float32 noise from ``generator`` (reproducible)."""
    return torch.randn(horizon, action_dim, generator=generator).numpy().astype(np.float32)
