"""The export machinery every architecture shares: programs, their check, reuse, the manifest.

:func:`export_architecture` exports any architecture's stages (each a
:class:`~vla_edge.export.stages.StageProgram` with its declared tensors, one program per
stage: :func:`export_stage`), keeps those already exported (:func:`reuse_stage`) and
writes the v2 manifest from the architecture's contract. What an architecture's export
reads of it (its checkpoint or policy directory, its stages and contract) is in
:mod:`vla_edge.export.architecture`.

Each program is run once on the example inputs right after export and its
largest absolute difference from the torch stage is recorded in the manifest
(``stages.<name>.check_max_abs``), so a broken lowering shows at export time.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vla_edge.archs.host import TensorSpec
from vla_edge.core.errors import ConfigError
from vla_edge.export.manifest import (
    BACKENDS,
    MANIFEST_FORMAT,
    STAGE_SUFFIX,
    file_sha256,
    load_manifest,
    write_manifest,
)
from vla_edge.export.quant_recipes import QuantRecipe, StageQuant, resolve_recipe, stage_quant
from vla_edge.export.stages import StageProgram

EXPORTER_REVISION = 5
"""Bumped when the exporter's output changes for the same model and package versions.

4: manifest format v2 (the stages declare their tensors).
5: quantisation recipes (``quant`` names a recipe, ``quant_recipe`` records it).
"""

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


def check_backend_quant(backend: str, quant: str | QuantRecipe) -> QuantRecipe:
    """The recipe ``quant`` names; an unknown backend or recipe, or a quantised ONNX, is refused.

    Raises:
        ConfigError: naming the field.
    """
    if backend not in BACKENDS:
        raise ConfigError(f"backend = {backend!r}, expected one of {BACKENDS}")
    recipe = resolve_recipe(quant)
    if backend in ("onnx", "torch") and not recipe.is_fp32:
        raise ConfigError(
            f"quant = {recipe.name!r} with backend {backend!r}: only unquantised (fp32) "
            "recipes are exported to ONNX or torch (the torch runner casts the weights to "
            "its dtype when it loads them)"
        )
    return recipe


def exporter_section(**fields: Any) -> dict[str, Any]:
    """The manifest's ``exporter``: revision, package versions, ``fields``."""
    return {"revision": EXPORTER_REVISION, "versions": package_versions(), **fields}


def vision_calibration(
    recipe: QuantRecipe, images: list[torch.Tensor] | None
) -> dict[str, list[tuple[torch.Tensor, ...]]]:
    """Calibration inputs of the vision encoder's int8 convolutions (if the recipe has them)."""
    if recipe.stage("vision_encoder").convs != "int8" or not images:
        return {}
    return {"vision_encoder": [(img.contiguous(),) for img in images]}


def policy_dir_source(path: str | Path, policy: Any) -> dict[str, Any]:
    """The manifest's ``source`` of an export made from a policy directory."""
    return {
        "policy_dir": str(Path(path).resolve()),
        "weights_sha256": policy.weights.get("sha256"),
        "trained": True,
        "import": policy.source,
    }


def _as_outputs(value: Any) -> list[np.ndarray]:
    """A module's or program's output(s) as a list of numpy arrays."""
    items = list(value) if isinstance(value, list | tuple) else [value]
    return [np.asarray(t.numpy() if isinstance(t, torch.Tensor) else t) for t in items]


def _run_program(backend: str, path: Path, inputs: tuple[torch.Tensor, ...]) -> list[np.ndarray]:
    """Run a freshly written program once (export-time check); every output."""
    if backend == "onnx":
        import onnxruntime as ort

        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        feeds = {meta.name: t.numpy() for meta, t in zip(session.get_inputs(), inputs, strict=True)}
        return _as_outputs(session.run(None, feeds))
    from executorch.extension.pybindings.portable_lib import _load_for_executorch

    module = _load_for_executorch(str(path))
    return _as_outputs(module.forward([t.contiguous() for t in inputs]))


def _check_program(stage: StageProgram, backend: str, path: Path) -> float:
    """Largest ``|program - torch module|`` over every output on the example inputs."""
    with torch.inference_mode():
        reference = _as_outputs(stage.module(*stage.example_inputs))
    got = _run_program(backend, path, stage.example_inputs)
    if len(got) != len(reference):
        raise ConfigError(
            f"stage {stage.name}: program {path.name} has {len(got)} outputs, the torch module "
            f"{len(reference)}"
        )
    return max(
        float(np.max(np.abs(g.astype(np.float64) - r))) if r.size else 0.0
        for g, r in zip(got, reference, strict=True)
    )


def export_stage(
    stage: StageProgram,
    backend: str,
    quant: str | StageQuant,
    out_dir: Path,
    calibration: list[tuple[torch.Tensor, ...]] | None = None,
    *,
    check: bool = True,
    in_place: bool = False,
) -> dict[str, Any]:
    """Write one stage's program and return its manifest entry.

    The program is run once on the example inputs and its largest absolute
    difference from the torch module over every output is ``check_max_abs``.

    Args:
        quant: ExecuTorch: the stage's quantisation settings, or the name of a package
            recipe (ONNX programs are fp32).
        check: ``False`` skips that run (``check_max_abs`` is ``None``): a caller
            that cannot hold the module and the loaded program in memory together
            (a full-size VLA stage) measures parity in another process.
        in_place: ExecuTorch: rewrite and quantise ``stage.module`` itself instead
            of a copy (half the memory; the module is unusable afterwards).
    """
    path = out_dir / f"{stage.name}{STAGE_SUFFIX[backend]}"
    settings = stage_quant(stage.name, quant)
    t0 = time.perf_counter()
    if backend == "torch":
        from vla_edge.export.torch_export import export_stage_torch

        if not settings.is_fp32:
            raise ConfigError(
                f"stage {stage.name}: scheme {settings.scheme!r} with backend 'torch': the "
                "stage's weights are written in float32"
            )
        details = export_stage_torch(stage, path)
        check = False  # the program is the module itself
    elif backend == "onnx":
        from vla_edge.export.onnx_export import export_stage_onnx

        if not settings.is_fp32:
            raise ConfigError(
                f"stage {stage.name}: scheme {settings.scheme!r} with backend 'onnx': only fp32 "
                "programs are exported to ONNX"
            )
        details = export_stage_onnx(stage, path)
    else:
        from vla_edge.export.executorch_export import export_stage_executorch

        details = export_stage_executorch(stage, path, settings, calibration, in_place=in_place)
    export_s = time.perf_counter() - t0
    max_abs = _check_program(stage, backend, path) if check else None
    return {
        "file": path.name,
        "backend": backend,
        "quant": settings.scheme,
        "bytes": path.stat().st_size
        + sum((out_dir / name).stat().st_size for name in details.get("external_data", [])),
        "sha256": file_sha256(path),
        "rate": stage.rate,
        "inputs": [t.to_dict() for t in stage.inputs],
        "outputs": [t.to_dict() for t in stage.outputs],
        **({} if stage.repeat is None else {"repeat": stage.repeat.to_dict()}),
        "export_s": round(export_s, 2),
        "check_max_abs": max_abs,
        **details,
    }


def reuse_stage(
    name: str,
    source_dir: Path,
    out_dir: Path,
    backend: str,
    settings: StageQuant,
    declared: tuple[str, tuple[TensorSpec, ...], tuple[TensorSpec, ...]],
    weights: dict[str, Any] | None = None,
    *,
    language_revision: int | None = None,
) -> dict[str, Any] | None:
    """Copy stage ``name``'s program from another export directory if it is the same program.

    It must have been made with ``settings`` (the other manifest's ``quant_recipe``
    says; an export without one is not reused), the same backend, declared tensors
    and package versions. A language stage (frozen weights: ``language_revision``
    given) needs the other manifest's ``exporter.language_revision`` to be it; any
    other stage the same exporter revision and, given ``weights``
    (``{"weights_sha256", "flow_steps", "calibration_inputs"}``), the same weights
    hash, flow steps and number of calibration frames.

    ``declared``: ``(rate, inputs, outputs)`` the stage must have.
    """
    try:
        other = load_manifest(source_dir)
    except Exception:  # noqa: BLE001 - any unusable directory just means "export afresh"
        return None
    if name not in other.data["stages"]:
        return None
    entry = dict(other.data["stages"][name])
    rate, inputs, outputs = declared
    made_with = other.data.get("quant_recipe", {}).get("stages", {}).get(name)
    exporter = other.data["exporter"]
    has_convs = entry.get("int8_convs", 0) + entry.get("fp32_convs", 0) > 0
    if language_revision is not None:
        same_maker = exporter.get("language_revision") == language_revision
    else:
        same_maker = weights is not None and (
            weights["weights_sha256"] is not None
            and exporter.get("revision") == EXPORTER_REVISION
            and other.data["source"].get("weights_sha256") == weights["weights_sha256"]
            and other.data["flow_steps"] == weights["flow_steps"]
            and entry.get("calibration_inputs", 0)
            == (weights["calibration_inputs"] if settings.convs == "int8" and has_convs else 0)
        )
    if (
        not same_maker
        or entry["backend"] != backend
        or made_with != settings.summary()
        or entry.get("rate") != rate
        or entry["inputs"] != [t.to_dict() for t in inputs]
        or entry["outputs"] != [t.to_dict() for t in outputs]
        or exporter.get("versions") != package_versions()
    ):
        return None
    if source_dir.resolve() != out_dir.resolve():
        shutil.copyfile(source_dir / entry["file"], out_dir / entry["file"])
    entry["reused_from"] = str(source_dir)
    return entry


def stage_line(name: str, entry: dict[str, Any]) -> str:
    """The progress line of a freshly exported stage: file, size, time, check, delegation."""
    checked = entry["check_max_abs"]
    line = (
        f"{name}: {entry['file']} {entry['bytes'] / 2**20:.2f} MiB in "
        f"{entry['export_s']:.1f} s, "
        + (
            "not run against torch here"
            if checked is None
            else f"max |program - torch| = {checked:.2e}"
        )
    )
    if "delegation" in entry:
        d = entry["delegation"]
        line += (
            f"; XNNPACK: {d['delegated_nodes']} nodes delegated in "
            f"{d['delegated_subgraphs']} subgraphs, {d['non_delegated_nodes']} not "
            f"{sorted(d['non_delegated_ops'])}"
        )
    return line


def explain_delegation(entry: dict[str, Any], not_delegated_why: dict[str, str] | None) -> None:
    """An ExecuTorch entry's ``delegation.why``: why each operator left outside XNNPACK is.

    ``not_delegated_why``: operator name -> reason (one not listed is ``"unexplained"``);
    ``None`` (or an entry without ``delegation``) leaves the entry as it is.
    """
    if not_delegated_why is not None and "delegation" in entry:
        left = entry["delegation"]["non_delegated_ops"]
        entry["delegation"]["why"] = {
            op: not_delegated_why.get(op, "unexplained") for op in sorted(left)
        }


def export_architecture(
    stages: list[StageProgram],
    out_dir: str | Path,
    contract: dict[str, Any],
    backend: str,
    quant: str | QuantRecipe = "fp32",
    *,
    stage_backends: dict[str, str] | None = None,
    stage_quants: dict[str, StageQuant] | None = None,
    calibration: dict[str, list[tuple[torch.Tensor, ...]]] | None = None,
    reused: dict[str, dict[str, Any]] | None = None,
    not_delegated_why: dict[str, str] | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Export any architecture's stages and write its v2 ``manifest.json``.

    Args:
        stages: the stages to export, each with its declared tensors and rate.
        out_dir: created if missing; files the contract names (a tokenizer)
            must already be there.
        contract: the manifest's other fields: ``architecture``, ``output``,
            ``host``, ``normalisation``, ``joint_names``, ``action_dim``,
            ``chunk_horizon``, ``dt_action_s``, ``flow_steps``, ``cameras``,
            ``image_height``, ``image_width``, ``source``, optionally
            ``stage_order`` (default: ``stages`` in order) and any
            architecture-specific fields. A declared tokenizer's ``sha256``
            is filled in here.
        backend: ``onnx`` or ``executorch`` (the default of every stage).
        quant: the quantisation recipe, or its name in ``config/quant_recipes.yaml``.
        stage_backends: per-stage backend overrides.
        stage_quants: per-stage settings that replace the recipe's (an ONNX stage's fp32).
        calibration: per-stage calibration inputs (int8 convolutions).
        reused: entries of stages already in ``out_dir`` (not exported again).
        not_delegated_why: ExecuTorch: operator name -> why it cannot run in
            XNNPACK; each stage's ``delegation.why`` records it for the
            operators left outside (one not explained is ``"unexplained"``).
        log: progress printer.

    Returns:
        The manifest's data.

    Raises:
        ConfigError: the recipe is unknown or names a stage the architecture lacks.
        ManifestMismatchError: the contract and the stages disagree (the
            message names the field); nothing is written then but the programs.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    recipe = resolve_recipe(quant)
    order = list(contract.get("stage_order", [s.name for s in stages]))
    recipe.check_stages(order)
    settings = recipe.stage_settings(order, stage_quants)
    entries: dict[str, Any] = dict(reused or {})
    for stage in stages:
        if stage.name in entries:
            continue
        stage_backend = (stage_backends or {}).get(stage.name, backend)
        calib = (calibration or {}).get(stage.name)
        entry = export_stage(stage, stage_backend, settings[stage.name], out_dir, calib)
        explain_delegation(entry, not_delegated_why)
        entries[stage.name] = entry
        log(stage_line(stage.name, entry))
    rest = {k: v for k, v in contract.items() if k not in ("architecture", "stage_order")}
    host = json.loads(json.dumps(rest.pop("host")))
    tok = host.get("token_ids", {}).get("tokenizer")
    if isinstance(tok, dict) and isinstance(tok.get("file"), str):
        if (out_dir / tok["file"]).is_file():
            tok["sha256"] = file_sha256(out_dir / tok["file"])
    data: dict[str, Any] = {
        "format": MANIFEST_FORMAT,
        "architecture": contract["architecture"],
        "backend": backend,
        "quant": recipe.name,
        "quant_recipe": recipe.manifest_section(order, stage_quants),
        "stage_order": order,
        "stages": {name: entries[name] for name in order if name in entries},
        "host": host,
        **rest,
    }
    data.setdefault("exporter", {"revision": EXPORTER_REVISION, "versions": package_versions()})
    data["total_bytes"] = sum(int(s["bytes"]) for s in entries.values())
    data["created_utc"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    write_manifest(out_dir, data)
    log(f"wrote {out_dir / 'manifest.json'} ({contract['architecture']}, {backend}, {recipe.name})")
    return data
