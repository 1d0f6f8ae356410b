"""``manifest.json``: what an export directory holds and the contract its programs obey.

Written by the exporter, read and validated by the ONNX Runtime and ExecuTorch
runners. This module imports numpy and the standard library only, so a
torch-free runner can load it.

Layout (``MANIFEST_FORMAT``)::

    {"format": "vla_edge.export.v1", "backend": "onnx" | "executorch",
     "quant": "fp32" | "8da4w",
     "stages": {STAGE: {"file", "backend", "quant", "bytes", "sha256",
                        "inputs": [{"name", "shape", "dtype"}], "outputs": [...],
                        "delegation": {...} (ExecuTorch only)}},
     "joint_names", "delta_actions", "cameras", "image_height", "image_width",
     "chunk_horizon", "dt_action_s", "flow_steps", "max_prefix_len",
     "max_instruction_tokens", "language_dim", "d_model",
     "visual_tokens_per_camera", "context_tokens",
     "norm_stats": {"state_mean", "state_std", "action_mean", "action_std"},
     "tokenizer": {"file", "sha256"},
     "source": {"checkpoint", "checkpoint_sha256", "weights_sha256", "source_hash",
                "step", "trained"},
     "exporter": {"torch", "executorch", "onnx", "onnxruntime", ...},
     "model_config": {...}, "created_utc": ...}

Every stage's inputs and outputs follow from the top-level fields
(:func:`expected_stage_io`); :func:`load_manifest` refuses a manifest whose
stages disagree with them, and the runners refuse a program whose real
inputs disagree with the manifest, each time with a
:class:`ManifestMismatchError` naming the field.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vla_edge.core.errors import ConfigError, ManifestMismatchError
from vla_edge.policy.normalize import NormStats

MANIFEST_FORMAT = "vla_edge.export.v1"
MANIFEST_NAME = "manifest.json"
TOKENIZER_NAME = "tokenizer.json"
STAGE_NAMES = ("language_encoder", "vision_encoder", "fusion", "action_head")
BACKENDS = ("onnx", "executorch")
QUANTS = ("fp32", "8da4w")
STAGE_SUFFIX = {"onnx": ".onnx", "executorch": ".pte"}


@dataclass(frozen=True)
class TensorSpec:
    """Name, shape and dtype (numpy name) of one program input or output."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}


@dataclass(frozen=True)
class StageSpec:
    """One exported program."""

    name: str
    file: str
    backend: str
    quant: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]


@dataclass(frozen=True)
class Manifest:
    """A validated ``manifest.json`` and the directory it lives in."""

    directory: Path
    data: dict[str, Any]
    stages: dict[str, StageSpec]
    norm_stats: NormStats

    @property
    def backend(self) -> str:
        """Backend of the policy stages (``onnx`` or ``executorch``)."""
        return str(self.data["backend"])

    @property
    def quant(self) -> str:
        """Quantisation of the policy stages."""
        return str(self.data["quant"])

    def field(self, name: str) -> Any:
        """A top-level field."""
        return self.data[name]

    def stage_path(self, stage: str) -> Path:
        """Path of a stage's program file."""
        return self.directory / self.stages[stage].file

    @property
    def tokenizer_path(self) -> Path:
        """Path of the tokenizer file copied beside the programs."""
        return self.directory / self.data["tokenizer"]["file"]


def expected_stage_io(
    fields: dict[str, Any],
) -> dict[str, tuple[tuple[TensorSpec, ...], tuple[TensorSpec, ...]]]:
    """Inputs and outputs of every stage implied by the manifest's top-level fields."""
    n_cams = len(fields["cameras"])
    h, w = int(fields["image_height"]), int(fields["image_width"])
    t_v, d = int(fields["visual_tokens_per_camera"]), int(fields["d_model"])
    t_c = int(fields["context_tokens"])
    horizon, a = int(fields["chunk_horizon"]), len(fields["joint_names"])
    length, lang = int(fields["max_instruction_tokens"]), int(fields["language_dim"])
    f32, i64 = "float32", "int64"
    return {
        "language_encoder": (
            (
                TensorSpec("input_ids", (1, length), i64),
                TensorSpec("attention_mask", (1, length), i64),
            ),
            (TensorSpec("lang", (1, lang), f32),),
        ),
        "vision_encoder": (
            (TensorSpec("images", (n_cams, 3, h, w), f32),),
            (TensorSpec("visual_tokens", (n_cams, t_v, d), f32),),
        ),
        "fusion": (
            (
                TensorSpec("visual_tokens", (n_cams, t_v, d), f32),
                TensorSpec("lang", (1, lang), f32),
                TensorSpec("state_norm", (1, a), f32),
            ),
            (TensorSpec("context", (1, t_c, d), f32),),
        ),
        "action_head": (
            (
                TensorSpec("context", (1, t_c, d), f32),
                TensorSpec("noise", (1, horizon, a), f32),
                TensorSpec("prefix_actions", (1, horizon, a), f32),
                TensorSpec("prefix_mask", (1, horizon), f32),
            ),
            (TensorSpec("actions_norm", (1, horizon, a), f32),),
        ),
    }


# field -> (type, description) of the top-level fields every manifest must carry
_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "format": str,
    "backend": str,
    "quant": str,
    "stages": dict,
    "joint_names": list,
    "delta_actions": list,
    "cameras": list,
    "image_height": int,
    "image_width": int,
    "chunk_horizon": int,
    "dt_action_s": (int, float),
    "flow_steps": int,
    "max_prefix_len": int,
    "max_instruction_tokens": int,
    "language_dim": int,
    "d_model": int,
    "visual_tokens_per_camera": int,
    "context_tokens": int,
    "norm_stats": dict,
    "tokenizer": dict,
    "source": dict,
    "exporter": dict,
}

# which top-level fields each stage tensor's shape depends on (named in errors)
_SHAPE_FIELDS: dict[str, str] = {
    "input_ids": "max_instruction_tokens",
    "attention_mask": "max_instruction_tokens",
    "lang": "language_dim",
    "images": "cameras, image_height, image_width",
    "visual_tokens": "cameras, visual_tokens_per_camera, d_model",
    "state_norm": "joint_names",
    "context": "context_tokens, d_model",
    "noise": "chunk_horizon, joint_names",
    "prefix_actions": "chunk_horizon, joint_names",
    "prefix_mask": "chunk_horizon",
    "actions_norm": "chunk_horizon, joint_names",
}


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(directory: str | Path, data: dict[str, Any]) -> Path:
    """Validate ``data`` against the files in ``directory`` and write ``manifest.json``.

    Raises:
        ManifestMismatchError: ``data`` is inconsistent (see :func:`validate_manifest`).
    """
    directory = Path(directory)
    validate_manifest(directory, data)
    path = directory / MANIFEST_NAME
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    tmp.replace(path)
    return path


def load_manifest(directory: str | Path) -> Manifest:
    """Read and validate ``directory/manifest.json``.

    Raises:
        ManifestMismatchError: missing file, unreadable JSON, a missing or
            ill-typed field, or stage inputs/outputs that contradict the
            top-level fields; the message names the field.
    """
    directory = Path(directory)
    path = directory / MANIFEST_NAME
    if not path.is_file():
        raise ManifestMismatchError(f"{path}: manifest.json not found in export directory")
    try:
        data = json.loads(path.read_text())
    except ValueError as exc:
        raise ManifestMismatchError(f"{path}: not valid JSON: {exc}") from exc
    return validate_manifest(directory, data)


def validate_manifest(directory: Path, data: Any) -> Manifest:
    """Check fields, types, stage files and the stage I/O contract; build a :class:`Manifest`."""
    where = f"{directory / MANIFEST_NAME}"
    if not isinstance(data, dict):
        raise ManifestMismatchError(f"{where}: top level is {type(data).__name__}, expected object")
    for name, kind in _REQUIRED.items():
        if name not in data:
            raise ManifestMismatchError(f"{where}: field {name} is missing")
        value = data[name]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ManifestMismatchError(
                f"{where}: field {name} = {value!r} has type {type(value).__name__}, "
                f"expected {getattr(kind, '__name__', kind)}"
            )
    if data["format"] != MANIFEST_FORMAT:
        raise ManifestMismatchError(
            f"{where}: field format = {data['format']!r}, expected {MANIFEST_FORMAT!r}"
        )
    _check_choice(where, "backend", data["backend"], BACKENDS)
    _check_choice(where, "quant", data["quant"], QUANTS)
    _check_positive(where, data)
    a = len(data["joint_names"])
    if len(data["delta_actions"]) != a:
        raise ManifestMismatchError(
            f"{where}: field delta_actions has {len(data['delta_actions'])} entries, "
            f"expected {a} (one per joint_names entry)"
        )
    if len(set(data["cameras"])) != len(data["cameras"]) or not data["cameras"]:
        raise ManifestMismatchError(
            f"{where}: field cameras = {data['cameras']} must be non-empty and unique"
        )
    t_c = len(data["cameras"]) * data["visual_tokens_per_camera"] + 2
    if data["context_tokens"] != t_c:
        raise ManifestMismatchError(
            f"{where}: field context_tokens = {data['context_tokens']}, expected {t_c} "
            f"(cameras = {len(data['cameras'])} x visual_tokens_per_camera = "
            f"{data['visual_tokens_per_camera']} + 2)"
        )
    if data["max_prefix_len"] >= data["chunk_horizon"]:
        raise ManifestMismatchError(
            f"{where}: field max_prefix_len = {data['max_prefix_len']} must be < "
            f"chunk_horizon = {data['chunk_horizon']}"
        )
    try:
        stats = NormStats.from_dict(data["norm_stats"], a)
    except ConfigError as exc:
        raise ManifestMismatchError(f"{where}: field norm_stats: {exc}") from exc
    tok = data["tokenizer"].get("file")
    if not isinstance(tok, str) or not (directory / tok).is_file():
        raise ManifestMismatchError(
            f"{where}: field tokenizer.file = {tok!r}: no such file in {directory}"
        )
    stages = _validate_stages(where, directory, data)
    return Manifest(directory=directory, data=data, stages=stages, norm_stats=stats)


def _check_choice(where: str, name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ManifestMismatchError(f"{where}: field {name} = {value!r}, expected one of {allowed}")


def _check_positive(where: str, data: dict[str, Any]) -> None:
    for name in (
        "image_height",
        "image_width",
        "chunk_horizon",
        "flow_steps",
        "max_instruction_tokens",
        "language_dim",
        "d_model",
        "visual_tokens_per_camera",
        "dt_action_s",
    ):
        if not data[name] > 0:
            raise ManifestMismatchError(f"{where}: field {name} = {data[name]!r}, expected > 0")


def _tensor_specs(where: str, field: str, items: Any) -> tuple[TensorSpec, ...]:
    if not isinstance(items, list):
        raise ManifestMismatchError(f"{where}: field {field} must be a list of tensors")
    specs = []
    for i, item in enumerate(items):
        try:
            specs.append(
                TensorSpec(str(item["name"]), tuple(int(s) for s in item["shape"]), item["dtype"])
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ManifestMismatchError(
                f"{where}: field {field}[{i}] = {item!r} needs name, shape (ints) and dtype"
            ) from exc
    return tuple(specs)


def _validate_stages(where: str, directory: Path, data: dict[str, Any]) -> dict[str, StageSpec]:
    raw = data["stages"]
    if sorted(raw) != sorted(STAGE_NAMES):
        raise ManifestMismatchError(
            f"{where}: field stages has {sorted(raw)}, expected {sorted(STAGE_NAMES)}"
        )
    expected = expected_stage_io(data)
    stages = {}
    for name in STAGE_NAMES:
        entry = raw[name]
        prefix = f"stages.{name}"
        for key in ("file", "backend", "quant", "inputs", "outputs"):
            if key not in entry:
                raise ManifestMismatchError(f"{where}: field {prefix}.{key} is missing")
        _check_choice(where, f"{prefix}.backend", entry["backend"], BACKENDS)
        _check_choice(where, f"{prefix}.quant", entry["quant"], QUANTS)
        suffix = STAGE_SUFFIX[entry["backend"]]
        if not str(entry["file"]).endswith(suffix):
            raise ManifestMismatchError(
                f"{where}: field {prefix}.file = {entry['file']!r} does not end in {suffix!r} "
                f"(backend {entry['backend']})"
            )
        if not (directory / entry["file"]).is_file():
            raise ManifestMismatchError(
                f"{where}: field {prefix}.file = {entry['file']!r}: no such file in {directory}"
            )
        inputs = _tensor_specs(where, f"{prefix}.inputs", entry["inputs"])
        outputs = _tensor_specs(where, f"{prefix}.outputs", entry["outputs"])
        want_in, want_out = expected[name]
        _compare_specs(where, f"{prefix}.inputs", inputs, want_in)
        _compare_specs(where, f"{prefix}.outputs", outputs, want_out)
        stages[name] = StageSpec(
            name, str(entry["file"]), entry["backend"], entry["quant"], inputs, outputs
        )
    return stages


def _compare_specs(
    where: str, field: str, got: tuple[TensorSpec, ...], want: tuple[TensorSpec, ...]
) -> None:
    if [t.name for t in got] != [t.name for t in want]:
        raise ManifestMismatchError(
            f"{where}: field {field} names = {[t.name for t in got]}, "
            f"expected {[t.name for t in want]}"
        )
    for g, w in zip(got, want, strict=True):
        if g.dtype != w.dtype:
            raise ManifestMismatchError(
                f"{where}: field {field}.{g.name}.dtype = {g.dtype!r}, expected {w.dtype!r}"
            )
        if g.shape != w.shape:
            raise ManifestMismatchError(
                f"{where}: field {field}.{g.name}.shape = {list(g.shape)}, but the manifest's "
                f"{_SHAPE_FIELDS[g.name]} imply {list(w.shape)}"
            )


def check_program_io(
    manifest: Manifest,
    stage: str,
    inputs: list[tuple[tuple[int, ...], str]],
    outputs: list[tuple[tuple[int, ...], str]],
) -> None:
    """Refuse a program whose real input/output shapes and dtypes differ from the manifest.

    Args:
        manifest: the loaded manifest.
        stage: stage name.
        inputs: ``(shape, numpy dtype name)`` of each program input, in order.
        outputs: the same for each output.

    Raises:
        ManifestMismatchError: naming ``stages.<stage>.inputs.<name>.shape`` or
            ``.dtype``, the manifest's value and the program's.
    """
    spec = manifest.stages[stage]
    file = manifest.stage_path(stage).name
    for kind, declared, actual in (
        ("inputs", spec.inputs, inputs),
        ("outputs", spec.outputs, outputs),
    ):
        if len(declared) != len(actual):
            raise ManifestMismatchError(
                f"field stages.{stage}.{kind} lists {len(declared)} tensors, but program {file} "
                f"has {len(actual)}"
            )
        for tensor, (shape, dtype) in zip(declared, actual, strict=True):
            field = f"stages.{stage}.{kind}.{tensor.name}"
            if dtype != tensor.dtype:
                raise ManifestMismatchError(
                    f"field {field}.dtype = {tensor.dtype!r} in manifest.json, but program "
                    f"{file} has {dtype!r}"
                )
            if tuple(shape) != tensor.shape:
                raise ManifestMismatchError(
                    f"field {field}.shape = {list(tensor.shape)} in manifest.json, but program "
                    f"{file} has {list(shape)}"
                )


def check_expected_spec(manifest: Manifest, expected: Any) -> None:
    """Refuse an artifact that does not match what the caller asks for.

    Args:
        manifest: the loaded manifest.
        expected: a :class:`~vla_edge.runners.base.RunnerSpec` (or any object
            with the same attributes) describing the deployment.

    Raises:
        ManifestMismatchError: naming the first differing field, both values.
    """
    pairs = (
        ("joint_names", list(manifest.data["joint_names"]), list(expected.joint_names)),
        ("chunk_horizon", manifest.data["chunk_horizon"], int(expected.chunk_horizon)),
        ("cameras", list(manifest.data["cameras"]), list(expected.cameras)),
        ("image_height", manifest.data["image_height"], int(expected.image_height)),
        ("image_width", manifest.data["image_width"], int(expected.image_width)),
    )
    for name, have, want in pairs:
        if have != want:
            raise ManifestMismatchError(
                f"field {name} = {have} in {manifest.directory / MANIFEST_NAME}, expected {want}"
            )
    if not np.isclose(float(manifest.data["dt_action_s"]), float(expected.dt_action_s)):
        raise ManifestMismatchError(
            f"field dt_action_s = {manifest.data['dt_action_s']} in "
            f"{manifest.directory / MANIFEST_NAME}, expected {expected.dt_action_s}"
        )
