"""Export a policy: one program per stage, the tokenizer, and ``manifest.json``.

:func:`export_architecture` exports any architecture's stages (each a
:class:`~vla_edge.export.stages.StageProgram` with its declared tensors) and
writes the v2 manifest from the architecture's contract;
:func:`export_policy` does it for the bundled model, writing into ``out_dir``::

    language_encoder.{onnx|pte}  vision_encoder.*  fusion.*  action_head.*
    tokenizer.json               manifest.json

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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vla_edge.archs.bundled.stages import BUNDLED_STAGES, bundled_contract, bundled_stage_io
from vla_edge.archs.host import TensorSpec
from vla_edge.core.errors import ConfigError
from vla_edge.export.manifest import (
    BACKENDS,
    MANIFEST_FORMAT,
    STAGE_SUFFIX,
    TOKENIZER_NAME,
    file_sha256,
    load_manifest,
    write_manifest,
)
from vla_edge.export.quant_recipes import QuantRecipe, StageQuant, resolve_recipe, stage_quant
from vla_edge.export.stages import StageProgram, policy_stages
from vla_edge.policy.model import VlaPolicy

EXPORTER_REVISION = 5
"""Bumped when the exporter's output changes for the same model and package versions.

4: manifest format v2 (the stages declare their tensors).
5: quantisation recipes (``quant`` names a recipe, ``quant_recipe`` records it).
"""

LANGUAGE_EXPORTER_REVISION = 4
"""The same for the language program alone (a matching one may be reused).

4: made by a quantisation recipe (earlier ones are not reused).
"""

CalibrationSource = Callable[[VlaPolicy, int, Path | None], list[tuple[torch.Tensor]]]
"""``(policy, frames, data) -> frames`` vision-encoder inputs: where an int8-convolution export's
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


def _reuse_stage(
    name: str,
    source_dir: Path,
    out_dir: Path,
    backend: str,
    settings: StageQuant,
    declared: tuple[str, tuple[TensorSpec, ...], tuple[TensorSpec, ...]],
    weights: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """Copy stage ``name``'s program from another export directory if it is the same program.

    It must have been made with ``settings`` (the other manifest's ``quant_recipe``
    says; an export without one is not reused), the same backend, declared tensors
    and package versions. The language stage (frozen MiniLM) needs the same language
    exporter revision; any other stage the same exporter revision and, given
    ``weights`` (``{"weights_sha256", "flow_steps", "calibration_inputs"}``), the same
    weights hash, flow steps and number of calibration frames.

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
    if name == "language_encoder":
        same_maker = exporter.get("language_revision") == LANGUAGE_EXPORTER_REVISION
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


def export_policy(
    policy: VlaPolicy,
    out_dir: str | Path,
    backend: str,
    quant: str | QuantRecipe = "fp32",
    *,
    checkpoint: Path | None = None,
    language_backend: str | None = None,
    reuse_language_from: Path | None = None,
    reuse_stages_from: Sequence[Path] = (),
    calibration_frames: int | None = None,
    calibration_data: Path | None = None,
    calibration_source: CalibrationSource | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Export every stage of the bundled ``policy`` to ``out_dir`` and write the manifest.

    Args:
        policy: the policy (its ``action_head.flow_steps`` is the exported ``K``).
        out_dir: created if missing; existing stage files are overwritten.
        backend: ``onnx`` or ``executorch`` (the policy stages).
        quant: the quantisation recipe or its name (ExecuTorch; ONNX takes ``fp32``).
        checkpoint: the checkpoint file the policy came from (hashed into the
            manifest); ``None`` marks the export as untrained weights.
        language_backend: backend of the language stage (default: ``backend``).
        reuse_language_from: an export directory whose language program may be
            copied instead of exported again when backend, quantisation, declared
            tensors and exporter versions match.
        reuse_stages_from: export directories of the same weights whose programs
            may be copied likewise, any stage (``vla-edge bench quant``'s variants).
        calibration_frames: frames that calibrate the int8 convolutions of a
            recipe that has them (0 keeps them fp32; ``None``: the recipe's).
        calibration_data: demonstrations to take those frames from (default:
            render them from the tabletop); passed to ``calibration_source``.
        calibration_source: builds those frames; needed for int8 convolutions
            unless ``calibration_frames`` is 0.
        log: progress printer.

    Returns:
        The manifest's data.

    Raises:
        ConfigError: unknown backend or recipe, a quantised recipe on ONNX, the torch
            backend (a checkpoint already is torch), or int8 convolutions' calibration
            without its source or data.
    """
    if backend == "torch" or language_backend == "torch":
        raise ConfigError(
            "backend = 'torch' for a vla-edge checkpoint: a .pt checkpoint already runs in "
            "torch on any device (--policy CKPT or bundled, with device: cuda); the torch "
            "backend exports an imported policy directory (--policy DIR)"
        )
    recipe = check_backend_quant(backend, quant)
    if calibration_frames is None:
        calibration_frames = recipe.calibration_frames
    language_backend = language_backend or backend
    if language_backend not in BACKENDS:
        raise ConfigError(f"language_backend = {language_backend!r}, expected one of {BACKENDS}")
    if calibration_frames < 0:
        raise ConfigError(f"calibration_frames = {calibration_frames}, expected >= 0")
    if calibration_data is not None and not Path(calibration_data).exists():
        raise ConfigError(f"calibration_data = {str(calibration_data)!r}: no such file or folder")
    int8_convs = recipe.stage("vision_encoder").convs == "int8"
    if int8_convs and calibration_frames and calibration_source is None:
        raise ConfigError(
            f"calibration_source = None with quant = {recipe.name!r} (int8 convolutions) and "
            f"calibration_frames = {calibration_frames}: pass vla_edge.sim.frames."
            "calibration_images (or another source of frames), or calibration_frames = 0 to "
            "keep the convolutions fp32"
        )
    language_quant = (
        recipe.stage("language_encoder") if language_backend == "executorch" else StageQuant()
    )
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    policy.eval()
    reused: dict[str, dict[str, Any]] = {}
    io = bundled_stage_io(policy)
    source = _source_info(policy, checkpoint)
    same = {
        "weights_sha256": source["weights_sha256"],
        "flow_steps": int(policy.action_head.flow_steps),
        "calibration_inputs": calibration_frames,
    }
    candidates = []
    if reuse_language_from is not None:
        candidates.append(("language_encoder", Path(reuse_language_from), None))
    candidates += [(n, Path(d), same) for d in reuse_stages_from for n in BUNDLED_STAGES]
    for name, folder, weights in candidates:
        if name in reused:
            continue
        stage_backend = language_backend if name == "language_encoder" else backend
        settings = language_quant if name == "language_encoder" else recipe.stage(name)
        entry = _reuse_stage(name, folder, out_dir, stage_backend, settings, io[name], weights)
        if entry is not None:
            reused[name] = entry
            log(f"{name}: reused {entry['file']} from {folder}")
    names = tuple(n for n in BUNDLED_STAGES if n not in reused)
    calibration = {}
    if int8_convs and calibration_frames and calibration_source is not None:
        calibration["vision_encoder"] = calibration_source(
            policy, calibration_frames, calibration_data
        )
    from vla_edge.policy.tokenizer import minilm_dir

    shutil.copyfile(minilm_dir() / TOKENIZER_NAME, out_dir / TOKENIZER_NAME)
    contract = {
        **bundled_contract(policy),
        "stage_order": list(BUNDLED_STAGES),
        "source": source,
        "exporter": exporter_section(language_revision=LANGUAGE_EXPORTER_REVISION),
    }
    return export_architecture(
        policy_stages(policy, names),
        out_dir,
        contract,
        backend,
        recipe,
        stage_backends={"language_encoder": language_backend},
        stage_quants={"language_encoder": language_quant},
        calibration=calibration,
        reused=reused,
        log=log,
    )
