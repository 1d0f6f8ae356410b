"""Export a policy: one program per stage, the tokenizer, and ``manifest.json``.

:func:`export_policy` writes into ``out_dir``::

    language_encoder.{onnx|pte}  vision_encoder.*  fusion.*  action_head.*
    tokenizer.json               manifest.json

Each program is run once on the example inputs right after export and its
largest absolute difference from the torch stage is recorded in the manifest
(``stages.<name>.check_max_abs``), so a broken lowering shows at export time.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vla_edge.core.errors import ConfigError
from vla_edge.export.manifest import (
    BACKENDS,
    MANIFEST_FORMAT,
    QUANTS,
    STAGE_NAMES,
    STAGE_SUFFIX,
    TOKENIZER_NAME,
    file_sha256,
    load_manifest,
    write_manifest,
)
from vla_edge.export.stages import StageProgram, policy_stages, shape_fields
from vla_edge.policy.model import VlaPolicy

EXPORTER_REVISION = 3
"""Bumped when the exporter's output changes for the same model and package versions."""

LANGUAGE_EXPORTER_REVISION = 3
"""The same for the language program alone (a matching one may be reused).

3: 8da4w embedding tables as int8 rows. Manifests written before this field
existed say only ``revision`` (2, with or without the int8 rows); their
language program counts as revision 3 when it is fp32 or records int8
embeddings.
"""

CALIBRATION_FRAMES = 24
"""Observations (every camera of each) that calibrate the int8 convolutions of an 8da4w export."""

CalibrationSource = Callable[[VlaPolicy, int, Path | None], list[tuple[torch.Tensor]]]
"""``(policy, frames, data) -> frames`` vision-encoder inputs: where an 8da4w export's
calibration frames come from (the tabletop or recorded demonstrations:
:func:`vla_edge.sim.frames.calibration_images`; the export does not render them)."""

VERSION_PACKAGES = (
    "torch",
    "executorch",
    "torchao",
    "onnx",
    "onnxruntime",
    "onnxscript",
    "transformers",
    "tokenizers",
    "numpy",
)


def package_versions(names: tuple[str, ...] = VERSION_PACKAGES) -> dict[str, str | None]:
    """Installed version of each package (``None`` when absent)."""
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def _source_info(policy: VlaPolicy, checkpoint: Path | None) -> dict[str, Any]:
    info = policy.checkpoint_info or {}
    return {
        "checkpoint": str(checkpoint) if checkpoint is not None else None,
        "checkpoint_sha256": file_sha256(checkpoint) if checkpoint is not None else None,
        "weights_sha256": info.get("weights_sha256"),
        "source_hash": info.get("source_hash"),
        "step": info.get("step"),
        "trained": checkpoint is not None,
    }


def _run_program(backend: str, path: Path, inputs: tuple[torch.Tensor, ...]) -> np.ndarray:
    """Run a freshly written program once (export-time check)."""
    if backend == "onnx":
        import onnxruntime as ort

        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        feeds = {meta.name: t.numpy() for meta, t in zip(session.get_inputs(), inputs, strict=True)}
        return np.asarray(session.run(None, feeds)[0])
    from executorch.extension.pybindings.portable_lib import _load_for_executorch

    module = _load_for_executorch(str(path))
    return module.forward([t.contiguous() for t in inputs])[0].numpy()


def _export_stage(
    stage: StageProgram,
    backend: str,
    quant: str,
    out_dir: Path,
    calibration: list[tuple[torch.Tensor, ...]] | None = None,
) -> dict[str, Any]:
    path = out_dir / f"{stage.name}{STAGE_SUFFIX[backend]}"
    t0 = time.perf_counter()
    if backend == "onnx":
        from vla_edge.export.onnx_export import export_stage_onnx

        details = export_stage_onnx(stage, path)
    else:
        from vla_edge.export.executorch_export import export_stage_executorch

        details = export_stage_executorch(stage, path, quant, calibration)
    export_s = time.perf_counter() - t0
    with torch.inference_mode():
        reference = stage.module(*stage.example_inputs).numpy()
    got = _run_program(backend, path, stage.example_inputs)
    return {
        "file": path.name,
        "backend": backend,
        "quant": quant,
        "bytes": path.stat().st_size,
        "sha256": file_sha256(path),
        "inputs": [t.to_dict() for t in stage.inputs],
        "outputs": [t.to_dict() for t in stage.outputs],
        "export_s": round(export_s, 2),
        "check_max_abs": float(np.max(np.abs(got.astype(np.float64) - reference))),
        **details,
    }


def _language_revision(exporter: dict[str, Any], entry: dict[str, Any]) -> int | None:
    """The language exporter revision that wrote ``entry`` (see LANGUAGE_EXPORTER_REVISION)."""
    if "language_revision" in exporter:
        return int(exporter["language_revision"])
    if exporter.get("revision") != 2:
        return None
    return 3 if entry["quant"] == "fp32" or entry.get("int8_embeddings", 0) > 0 else 2


def _reuse_language(
    source_dir: Path, out_dir: Path, backend: str, quant: str, max_tokens: int
) -> dict[str, Any] | None:
    """Copy a matching language program from another export directory, if it has one."""
    try:
        other = load_manifest(source_dir)
    except Exception:  # noqa: BLE001 - any unusable directory just means "export afresh"
        return None
    entry = dict(other.data["stages"]["language_encoder"])
    if (
        entry["backend"] != backend
        or entry["quant"] != quant
        or other.data["max_instruction_tokens"] != max_tokens
        or other.data["exporter"].get("versions") != package_versions()
        or _language_revision(other.data["exporter"], entry) != LANGUAGE_EXPORTER_REVISION
    ):
        return None
    if source_dir.resolve() != out_dir.resolve():
        shutil.copyfile(source_dir / entry["file"], out_dir / entry["file"])
    entry["reused_from"] = str(source_dir)
    return entry


def export_policy(
    policy: VlaPolicy,
    out_dir: str | Path,
    backend: str,
    quant: str = "fp32",
    *,
    checkpoint: Path | None = None,
    language_backend: str | None = None,
    reuse_language_from: Path | None = None,
    calibration_frames: int = CALIBRATION_FRAMES,
    calibration_data: Path | None = None,
    calibration_source: CalibrationSource | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Export every stage of ``policy`` to ``out_dir`` and write the manifest.

    Args:
        policy: the policy (its ``action_head.flow_steps`` is the exported ``K``).
        out_dir: created if missing; existing stage files are overwritten.
        backend: ``onnx`` or ``executorch`` (the policy stages).
        quant: ``fp32``, or ``8da4w`` (ExecuTorch only).
        checkpoint: the checkpoint file the policy came from (hashed into the
            manifest); ``None`` marks the export as untrained weights.
        language_backend: backend of the language stage (default: ``backend``).
        reuse_language_from: an export directory whose language program may be
            copied instead of exported again when backend, quant, token length
            and exporter versions match.
        calibration_frames: 8da4w only: frames that calibrate the int8
            convolutions (0 keeps them fp32).
        calibration_data: demonstrations to take those frames from (default:
            render them from the tabletop); passed to ``calibration_source``.
        calibration_source: builds those frames; needed for 8da4w unless
            ``calibration_frames`` is 0.
        log: progress printer.

    Returns:
        The manifest's data.

    Raises:
        ConfigError: unknown backend or quantisation, 8da4w on ONNX, or 8da4w
            calibration without its source or data.
    """
    if backend not in BACKENDS:
        raise ConfigError(f"backend = {backend!r}, expected one of {BACKENDS}")
    if quant not in QUANTS:
        raise ConfigError(f"quant = {quant!r}, expected one of {QUANTS}")
    if backend == "onnx" and quant != "fp32":
        raise ConfigError(f"quant = {quant!r} with backend 'onnx': only 'fp32' is exported to ONNX")
    language_backend = language_backend or backend
    if language_backend not in BACKENDS:
        raise ConfigError(f"language_backend = {language_backend!r}, expected one of {BACKENDS}")
    if calibration_frames < 0:
        raise ConfigError(f"calibration_frames = {calibration_frames}, expected >= 0")
    if calibration_data is not None and not Path(calibration_data).exists():
        raise ConfigError(f"calibration_data = {str(calibration_data)!r}: no such file or folder")
    if quant == "8da4w" and calibration_frames and calibration_source is None:
        raise ConfigError(
            f"calibration_source = None with quant = '8da4w' and calibration_frames = "
            f"{calibration_frames}: pass vla_edge.sim.frames.calibration_images (or another "
            "source of frames), or calibration_frames = 0 to keep the convolutions fp32"
        )
    language_quant = quant if language_backend == "executorch" else "fp32"
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    policy.eval()
    cfg = policy.config
    stages_data: dict[str, Any] = {}
    reused = None
    if reuse_language_from is not None:
        reused = _reuse_language(
            Path(reuse_language_from),
            out_dir,
            language_backend,
            language_quant,
            cfg.max_instruction_tokens,
        )
    names = STAGE_NAMES if reused is None else STAGE_NAMES[1:]
    if reused is not None:
        stages_data["language_encoder"] = reused
        log(f"language_encoder: reused {reused['file']} from {reuse_language_from}")
    for stage in policy_stages(policy, names):
        stage_backend = language_backend if stage.name == "language_encoder" else backend
        stage_quant = language_quant if stage.name == "language_encoder" else quant
        calibration = None
        if stage.name == "vision_encoder" and stage_quant == "8da4w" and calibration_frames:
            calibration = calibration_source(policy, calibration_frames, calibration_data)
        entry = _export_stage(stage, stage_backend, stage_quant, out_dir, calibration)
        stages_data[stage.name] = entry
        line = (
            f"{stage.name}: {entry['file']} {entry['bytes'] / 2**20:.2f} MiB in "
            f"{entry['export_s']:.1f} s, max |program - torch| = {entry['check_max_abs']:.2e}"
        )
        if "delegation" in entry:
            d = entry["delegation"]
            line += (
                f"; XNNPACK: {d['delegated_nodes']} nodes delegated in "
                f"{d['delegated_subgraphs']} subgraphs, {d['non_delegated_nodes']} not "
                f"{sorted(d['non_delegated_ops'])}"
            )
        log(line)
    from vla_edge.policy.tokenizer import minilm_dir

    shutil.copyfile(minilm_dir() / TOKENIZER_NAME, out_dir / TOKENIZER_NAME)
    data: dict[str, Any] = {
        "format": MANIFEST_FORMAT,
        "backend": backend,
        "quant": quant,
        "stages": {name: stages_data[name] for name in STAGE_NAMES},
        **shape_fields(policy),
        "norm_stats": policy.stats.to_dict(),
        "tokenizer": {
            "file": TOKENIZER_NAME,
            "sha256": file_sha256(out_dir / TOKENIZER_NAME),
            "language_model": "sentence-transformers/all-MiniLM-L6-v2",
        },
        "source": _source_info(policy, checkpoint),
        "exporter": {
            "revision": EXPORTER_REVISION,
            "language_revision": LANGUAGE_EXPORTER_REVISION,
            "versions": package_versions(),
            "group_size_8da4w": 32,
        },
        "model_config": cfg.model_dump(mode="json"),
        "total_bytes": sum(int(s["bytes"]) for s in stages_data.values()),
        "created_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    write_manifest(out_dir, data)
    log(f"wrote {out_dir / 'manifest.json'} ({backend}, {quant})")
    return data
