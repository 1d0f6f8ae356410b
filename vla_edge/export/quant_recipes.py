"""Quantisation recipes: how each stage of an ExecuTorch export is quantised.

``vla-edge export --backend executorch --quant NAME`` takes a named recipe from
``config/quant_recipes.yaml`` (or from the user's own file, ``--quant-recipes``).
A recipe gives every stage a :class:`StageQuant` — a scheme for its ``Linear``
layers, the precision of its token tables and convolutions, and which layers
the scheme touches — and may override it per stage. The manifest records the
recipe's name (``quant``) and every stage's resolved settings
(``quant_recipe``), so a program says how it was made.

Schemes (all run by XNNPACK in ExecuTorch 1.5):

* ``fp32``: no quantisation.
* ``fp16``: the whole stage in half precision, weights and arithmetic; its
  float inputs and outputs stay fp32 (two casts at the boundary).
* ``8da8w``: ``Linear`` with int8 dynamic activations (per token) and int8
  weights per output channel.
* ``8da4w``: ``Linear`` with int8 dynamic activations and int4 weights in groups
  of ``group_size`` input features (a layer whose input width is not a multiple
  of it stays fp32).
* ``int8wo``: ``Linear`` weights stored int8 per output channel and widened to
  fp32 inside the program, fp32 arithmetic. XNNPACK has no weight-only int8
  GEMM in ExecuTorch 1.5 (torchao's weight-only layers are taken by its
  partitioner and computed wrongly), so the widening runs outside the delegate
  on every call: a smaller program, not a faster one.

``embeddings: int8`` stores token tables as int8 rows with one scale per row;
``convs: int8`` makes convolutions static int8, with activation ranges observed
on ``calibration_frames`` frames.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from vla_edge.core.errors import ConfigError

RECIPES_FILE = "quant_recipes.yaml"

Scheme = Literal["fp32", "fp16", "8da8w", "8da4w", "int8wo"]  # = manifest.QUANTS
Precision = Literal["fp32", "int8"]


class StageQuant(BaseModel):
    """One stage's quantisation: what its ``Linear``, ``Embedding`` and ``Conv2d`` layers become.

    ``layers`` / ``keep_fp32``: ``fnmatch`` patterns of module paths inside the
    stage (``blocks.0.attn.q``); a layer is quantised when it matches a
    ``layers`` pattern and no ``keep_fp32`` pattern. They select ``Linear``
    and ``Conv2d`` layers alike; token tables follow ``embeddings`` alone.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    scheme: Scheme = "fp32"
    group_size: int = Field(32, ge=16, le=1024, description="8da4w: input features per scale")
    embeddings: Precision = "fp32"
    convs: Precision = "fp32"
    layers: tuple[str, ...] = ("*",)
    keep_fp32: tuple[str, ...] = ()

    @field_validator("group_size")
    @classmethod
    def _power_of_two(cls, value: int) -> int:
        if value & (value - 1):
            raise ValueError(f"group_size = {value}: expected a power of two (16 ... 1024)")
        return value

    @model_validator(mode="after")
    def _fp16_alone(self) -> StageQuant:
        if self.scheme == "fp16" and (
            "int8" in (self.embeddings, self.convs) or self.layers != ("*",) or self.keep_fp32
        ):
            raise ValueError(
                "scheme fp16 runs the whole stage in half precision: embeddings and convs "
                "must be fp32 with it, and layers / keep_fp32 left out"
            )
        return self

    def selects(self, path: str) -> bool:
        """Whether the layer at module path ``path`` is quantised by this stage's settings."""
        return any(fnmatch.fnmatchcase(path, p) for p in self.layers) and not any(
            fnmatch.fnmatchcase(path, p) for p in self.keep_fp32
        )

    @property
    def is_fp32(self) -> bool:
        """Nothing in the stage is quantised."""
        return self.scheme == "fp32" and self.embeddings == "fp32" and self.convs == "fp32"

    def summary(self) -> dict[str, Any]:
        """The settings as the manifest records them (defaults included)."""
        data = self.model_dump(mode="json")
        data["layers"], data["keep_fp32"] = list(self.layers), list(self.keep_fp32)
        return data


class StageOverride(BaseModel):
    """A recipe's settings for one stage; the fields left out are the recipe's own."""

    model_config = ConfigDict(extra="forbid")

    scheme: Scheme | None = None
    group_size: int | None = None
    embeddings: Precision | None = None
    convs: Precision | None = None
    layers: tuple[str, ...] | None = None
    keep_fp32: tuple[str, ...] | None = None


class QuantRecipe(BaseModel):
    """A named recipe: the settings of every stage, per-stage overrides, calibration."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    description: str = ""
    scheme: Scheme = "fp32"
    group_size: int = 32
    embeddings: Precision = "fp32"
    convs: Precision = "fp32"
    layers: tuple[str, ...] = ("*",)
    keep_fp32: tuple[str, ...] = ()
    calibration_frames: int = Field(
        24, ge=0, le=4096, description="frames observed for int8 convolutions (0: keep fp32)"
    )
    stages: dict[str, StageOverride] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _stages_valid(self) -> QuantRecipe:
        self.stage("*")  # the defaults form a valid StageQuant
        for name in self.stages:
            self.stage(name)
        return self

    def stage(self, name: str) -> StageQuant:
        """The resolved settings of stage ``name``.

        Raises:
            ValueError: the merged settings are invalid (pydantic reports it).
        """
        base = {k: getattr(self, k) for k in StageQuant.model_fields}
        override = self.stages.get(name)
        if override is not None:
            base.update(override.model_dump(exclude_none=True))
        return StageQuant(**base)

    def check_stages(self, names: tuple[str, ...] | list[str]) -> None:
        """Refuse a ``stages:`` entry naming a stage the architecture does not have.

        Raises:
            ConfigError: naming the stage and the architecture's stages.
        """
        unknown = sorted(set(self.stages) - set(names))
        if unknown:
            raise ConfigError(
                f"quant recipe {self.name!r}: field stages.{unknown[0]} names no stage of this "
                f"architecture (its stages: {', '.join(names)})"
            )

    @property
    def is_fp32(self) -> bool:
        """No stage is quantised (the only recipe ONNX exports take)."""
        return self.stage("*").is_fp32 and all(self.stage(n).is_fp32 for n in self.stages)

    def stage_settings(
        self, names: Sequence[str], overrides: Mapping[str, StageQuant] | None = None
    ) -> dict[str, StageQuant]:
        """Each of ``names``' settings: its ``overrides`` entry, else the recipe's."""
        return {name: (overrides or {}).get(name) or self.stage(name) for name in names}

    def manifest_section(
        self, stage_names: Sequence[str], overrides: Mapping[str, StageQuant] | None = None
    ) -> dict[str, Any]:
        """``quant_recipe`` of the manifest: the name, description and each stage's settings."""
        settings = self.stage_settings(stage_names, overrides)
        return {
            "name": self.name,
            "description": self.description,
            "calibration_frames": self.calibration_frames,
            "stages": {name: value.summary() for name, value in settings.items()},
        }


def _recipes_path(path: str | Path | None) -> Path:
    if path is not None:
        return Path(path)
    from vla_edge.config.paths import config_path

    return config_path(RECIPES_FILE)


def load_recipes(path: str | Path | None = None) -> dict[str, QuantRecipe]:
    """Every recipe of a recipes file (default: the package's ``config/quant_recipes.yaml``).

    Raises:
        ConfigError: the file is missing or not YAML, has no ``recipes:`` mapping,
            or a recipe is invalid (the message names the recipe and the field).
    """
    from vla_edge.config.loader import load_yaml_file

    file = _recipes_path(path)
    data = load_yaml_file(file)
    raw = data.get("recipes")
    if not isinstance(raw, Mapping) or not raw:
        raise ConfigError(f"{file}: field recipes must be a non-empty mapping of name -> recipe")
    recipes = {}
    for name, fields in raw.items():
        if not isinstance(fields, Mapping):
            raise ConfigError(f"{file}: field recipes.{name} must be a mapping")
        try:
            recipes[str(name)] = QuantRecipe(name=str(name), **fields)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            field = f"recipes.{name}.{where}" if where else f"recipes.{name}"
            raise ConfigError(f"{file}: field {field}: {first['msg']}") from exc
    return recipes


def resolve_recipe(quant: str | QuantRecipe, path: str | Path | None = None) -> QuantRecipe:
    """The recipe named ``quant`` (a :class:`QuantRecipe` is returned as it is).

    Raises:
        ConfigError: no recipe of that name (the message lists the names and the file).
    """
    if isinstance(quant, QuantRecipe):
        return quant
    recipes = load_recipes(path)
    if quant not in recipes:
        raise ConfigError(
            f"quant = {quant!r}: no such recipe in {_recipes_path(path)} "
            f"(recipes: {', '.join(recipes)})"
        )
    return recipes[quant]


def stage_quant(stage_name: str, quant: str | StageQuant) -> StageQuant:
    """A :class:`StageQuant` as it is; a recipe name as that recipe's ``stage_name`` settings."""
    if isinstance(quant, StageQuant):
        return quant
    return resolve_recipe(quant).stage(stage_name)
