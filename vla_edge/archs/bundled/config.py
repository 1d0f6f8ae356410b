"""Model and training configuration of the VLA policy (validated, JSON-able).

Both models serialise to plain JSON with ``model_dump(mode="json")``; a
checkpoint stores them that way so no Python class is ever pickled.

Fields of removed features (:data:`REMOVED_TRAIN_FIELDS`) may still appear in
older checkpoints and YAML files: :func:`drop_removed_fields` drops one that
holds the value the code now hard-wires and refuses one that does not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from vla_edge.config.loader import load_yaml_file, validate_params
from vla_edge.config.models import DEFAULT_DT_ACTION_S, DEFAULT_JOINT_NAMES, MAX_FLOW_STEPS
from vla_edge.core.errors import ConfigError, RemovedFeatureError

LANGUAGE_DIM = 384
"""Width of the all-MiniLM-L6-v2 sentence embedding."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class PolicyConfig(_Strict):
    """Shapes and sizes of the four stages; binding for every exporter and runner.

    ``delta_actions[j]`` true means dimension ``j`` of an action chunk is
    predicted relative to the current state (``action - state[j]``) before
    normalisation; false means absolute. Runners and exporters apply the same
    transform through :class:`vla_edge.archs.bundled.normalize.ActionCodec`.
    """

    joint_names: list[str] = Field(default_factory=lambda: list(DEFAULT_JOINT_NAMES), min_length=1)
    cameras: list[str] = Field(default_factory=lambda: ["agentview", "wrist"], min_length=1)
    image_height: int = Field(64, ge=16, le=1024)
    image_width: int = Field(64, ge=16, le=1024)
    chunk_horizon: int = Field(10, ge=1, le=256)
    dt_action_s: float = Field(DEFAULT_DT_ACTION_S, gt=0.0, le=1.0)
    flow_steps: int = Field(10, ge=1, le=MAX_FLOW_STEPS)
    max_prefix_len: int = Field(4, ge=0, le=255)
    delta_actions: list[bool] = Field(
        default_factory=lambda: [True, True, True, True, True, True, False]
    )
    max_instruction_tokens: int = Field(32, ge=4, le=256)
    d_model: int = Field(128, ge=8, le=1024)
    num_heads: int = Field(4, ge=1, le=32)
    mlp_ratio: int = Field(4, ge=1, le=8)
    vision_channels: list[int] = Field(default_factory=lambda: [32, 64, 128], min_length=1)
    vision_downsample: int = Field(16, ge=2, le=64)
    vision_keypoints: int = Field(0, ge=0, le=256)
    """Spatial-softmax keypoints per camera (0: grid tokens only); each adds one token."""
    fusion_layers: int = Field(2, ge=1, le=12)
    head_layers: int = Field(3, ge=1, le=12)

    @model_validator(mode="after")
    def _check_cross_fields(self) -> PolicyConfig:
        if self.d_model % self.num_heads != 0:
            raise ValueError(
                f"d_model={self.d_model} must be a multiple of num_heads={self.num_heads}"
            )
        if len(self.delta_actions) != len(self.joint_names):
            raise ValueError(
                f"delta_actions has {len(self.delta_actions)} entries, expected "
                f"{len(self.joint_names)} (one per joint name)"
            )
        if self.vision_downsample & (self.vision_downsample - 1):
            raise ValueError(f"vision_downsample={self.vision_downsample} must be a power of two")
        for name in ("image_height", "image_width"):
            size = getattr(self, name)
            if size % self.vision_downsample != 0:
                raise ValueError(
                    f"{name}={size} must be a multiple of vision_downsample="
                    f"{self.vision_downsample}"
                )
        if self.max_prefix_len >= self.chunk_horizon:
            raise ValueError(
                f"max_prefix_len={self.max_prefix_len} must be < chunk_horizon={self.chunk_horizon}"
            )
        if len(set(self.cameras)) != len(self.cameras):
            raise ValueError(f"cameras must be unique, got {self.cameras}")
        return self

    @property
    def action_dim(self) -> int:
        """``A``: number of action (and state) dimensions."""
        return len(self.joint_names)

    @property
    def tokens_per_camera(self) -> int:
        """``T_v``: visual tokens per camera (one per grid cell, plus one per keypoint)."""
        grid = (self.image_height // self.vision_downsample) * (
            self.image_width // self.vision_downsample
        )
        return grid + self.vision_keypoints

    @property
    def context_tokens(self) -> int:
        """``T_c``: visual tokens of all cameras plus one language and one state token."""
        return len(self.cameras) * self.tokens_per_camera + 2


class TrainConfig(_Strict):
    """Optimisation settings of ``vla-edge train``."""

    seed: int = 0
    steps: int = Field(6000, ge=1, le=10_000_000)
    batch_size: int = Field(64, ge=1, le=4096)
    flow_samples_per_obs: int = Field(4, ge=1, le=64)
    learning_rate: float = Field(3e-4, gt=0.0, le=1.0)
    min_learning_rate: float = Field(1e-5, ge=0.0, le=1.0)
    weight_decay: float = Field(1e-4, ge=0.0, le=1.0)
    warmup_steps: int = Field(200, ge=0)
    grad_clip_norm: float = Field(1.0, gt=0.0)
    val_episode_fraction: float = Field(0.05, ge=0.0, lt=1.0)
    val_every: int = Field(500, ge=1)
    val_batches: int = Field(8, ge=1)
    checkpoint_every: int = Field(500, ge=1)
    shift_pixels: int = Field(4, ge=0, le=32)
    num_threads: int = Field(2, ge=1, le=256)
    time_beta_alpha: float = Field(1.5, gt=0.0)
    time_beta_beta: float = Field(1.0, gt=0.0)
    layout_loss_weight: float = Field(0.0, ge=0.0)
    """Weight of the auxiliary loss that regresses the scene layout from the visual tokens."""
    goal_loss_weight: float = Field(0.0, ge=0.0)
    """Weight of the auxiliary loss that regresses the instructed object's and its
    destination's positions from the fused context (language-conditioned)."""
    layout_loss_steps: int = Field(20, ge=1)
    """Only samples at steps ``k < layout_loss_steps`` (objects not yet moved) get any
    of the probe losses."""
    probe_warmup_steps: int = Field(0, ge=0)
    """Steps at the start of the run (counted in ``steps``) in which only the probes
    learn, at ``probe_warmup_learning_rate``, and the policy's weights are held: for
    an ``--init-from`` source that keeps no probes, so that new probes start fitted
    instead of sending their large early gradients into trained features. The
    learning-rate schedule starts after them."""
    probe_warmup_learning_rate: float = Field(1e-3, gt=0.0, le=1.0)
    """Learning rate of the probes during ``probe_warmup_steps`` (constant)."""
    init_norm_stats: Literal["source", "data"] = "source"
    """With ``--init-from``: keep the source checkpoint's normalisation statistics
    (``source``: its weights were trained on that scale) or compute them from
    ``--data`` (``data``: the weights then meet inputs and targets on a shifted
    scale). Without ``--init-from`` they always come from the data."""
    ema_decay: float = Field(0.0, ge=0.0, lt=1.0)
    """Decay of an exponential moving average of the weights (0: off). When on, the
    checkpoint's policy (and the validation loss) is the average; the raw weights
    travel with it for ``--resume``. The effective decay ramps up as
    ``min(ema_decay, (1 + s) / (10 + s))`` over the run's steps ``s``."""

    @model_validator(mode="after")
    def _check_probe_warmup(self) -> TrainConfig:
        if self.probe_warmup_steps == 0:
            return self
        if self.probe_warmup_steps >= self.steps:
            raise ValueError(
                f"probe_warmup_steps = {self.probe_warmup_steps} leaves no step of "
                f"steps = {self.steps} to train the policy"
            )
        if not (self.layout_loss_weight or self.goal_loss_weight):
            raise ValueError(
                f"probe_warmup_steps = {self.probe_warmup_steps} needs a probe: "
                "layout_loss_weight or goal_loss_weight > 0"
            )
        return self


class TrainFileConfig(_Strict):
    """A training YAML: ``model:`` and ``train:`` sections, both optional."""

    model: PolicyConfig = Field(default_factory=PolicyConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)


REMOVED_TRAIN_FIELDS: dict[str, tuple[Any, str]] = {
    "state_noise": (0.0, "noise on the measured state in training"),
    "state_noise_rad": (0.0, "noise on the measured state in training (its first name)"),
    "heading_loss_weight": (0.0, "the block-heading probe"),
    "instruction_rewordings": ({}, "training-time instruction rewording"),
    "reword_probability": (0.0, "training-time instruction rewording"),
}
"""``train:`` fields of removed features -> (the value the code hard-wires, the feature)."""

REMOVED_MODEL_FIELDS: dict[str, tuple[Any, str]] = {
    "vision_first_stride": (2, "the stride-4 first conv (`vla-edge widen`)"),
}
"""``model:`` fields of removed features -> (the value the code hard-wires, the feature)."""


def drop_removed_fields(
    data: dict[str, Any], removed: dict[str, tuple[Any, str]], source: str
) -> dict[str, Any]:
    """``data`` without the ``removed`` fields that hold the value the code hard-wires.

    Raises:
        RemovedFeatureError: a removed field holds another value: whatever wrote
            ``data`` used a feature this code no longer has.
    """
    kept = dict(data)
    for name, (wired, feature) in removed.items():
        if name in kept and kept.pop(name) != wired:
            raise RemovedFeatureError(
                f"{source}: {name} = {data[name]!r}: {feature} was removed; only "
                f"{name} = {wired!r} (or no {name}) is accepted"
            )
    return kept


def load_train_file(path: str | Path, stage: str | None = None) -> TrainFileConfig:
    """Load a training YAML; errors name the file, the field, the value and the bound.

    A recipe file has a ``stages:`` mapping besides ``model:`` and ``train:``:
    each stage's fields override ``train:``, and ``stage`` names the one to run.

    Raises:
        RemovedFeatureError: a section sets a removed field to another value than
            the hard-wired one.
        ConfigError: any other invalid field; a recipe without ``stage``, a
            ``stage`` the file does not have, or a ``stage`` for a file without stages.
    """
    data: dict[str, Any] = load_yaml_file(path)
    stages = data.pop("stages", None)
    if stages is not None or stage is not None:
        data["train"] = _stage_train(path, data.get("train") or {}, stages, stage)
    for section, removed in (("model", REMOVED_MODEL_FIELDS), ("train", REMOVED_TRAIN_FIELDS)):
        if isinstance(data.get(section), dict):
            data[section] = drop_removed_fields(data[section], removed, f"{path}: {section}")
    return validate_params(TrainFileConfig, data, str(path))


def _stage_train(path: str | Path, train: Any, stages: Any, stage: str | None) -> dict[str, Any]:
    """``train:`` with stage ``stage``'s fields over it."""
    if stages is None:
        raise ConfigError(f"{path}: stage = {stage!r}, but the file has no 'stages:' section")
    if not isinstance(stages, dict) or not all(isinstance(v, dict) for v in stages.values()):
        raise ConfigError(f"{path}: stages must map each stage name to its train fields")
    if stage not in stages:
        raise ConfigError(
            f"{path}: stage = {stage!r}; expected one of {sorted(stages)} (--stage NAME)"
        )
    if not isinstance(train, dict):
        raise ConfigError(f"{path}: train must be a mapping, got {type(train).__name__}")
    return {**train, **stages[stage]}


def policy_config_from_dict(data: dict[str, Any], source: str = "checkpoint") -> PolicyConfig:
    """Validate a stored model config (e.g. from a checkpoint), its removed fields dropped.

    Raises:
        RemovedFeatureError: a removed field holds another value than the hard-wired one.
        ConfigError: ``data`` is not a mapping, or a field is invalid.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: model config must be a mapping, got {type(data).__name__}")
    data = drop_removed_fields(data, REMOVED_MODEL_FIELDS, f"{source}: model_config")
    return validate_params(PolicyConfig, data, source)


def train_config_from_dict(data: dict[str, Any], source: str = "checkpoint") -> dict[str, Any]:
    """A stored training config (e.g. from a checkpoint) with its removed fields dropped.

    Only the removed fields are checked: a checkpoint's training config records
    how it was made and is not validated otherwise.

    Raises:
        RemovedFeatureError: a removed field holds another value than the hard-wired one.
        ConfigError: ``data`` is not a mapping.
    """
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: train config must be a mapping, got {type(data).__name__}")
    return drop_removed_fields(data, REMOVED_TRAIN_FIELDS, f"{source}: train_config")
