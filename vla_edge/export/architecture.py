"""Export any registered architecture: its stages as programs, its tokenizer, ``manifest.json``.

The one exporter of every architecture (π0, π0.5, SmolVLA, the bundled model, and each
folder that registers :class:`~vla_edge.archs.architecture.ExportHooks`): nothing here
names an architecture. It reads the architecture's hooks (:mod:`vla_edge.archs.registry`):

* :func:`stage_programs_of`: a model's stages as
  :class:`~vla_edge.export.stages.StageProgram` s for a backend (the hooks' modules: for
  ExecuTorch the architecture's XNNPACK rewrite), with their declared tensors;
* :func:`export_model`: the programs, the tokenizer beside them and ``manifest.json`` from
  the architecture's contract (its host side, normalisation, tokenizer and prompt);
* :func:`export_policy_dir`: a ``vla-edge import`` policy directory, whole in this process
  or (``low_memory``, where the hooks allow it) each stage in a process of its own that
  reads only that stage's weights (:mod:`vla_edge.export.stage_process`);
* :func:`export_checkpoint`: a model of an architecture that exports its own checkpoints
  (the bundled model's ``vla-edge train`` ``.pt``: :func:`load_checkpoint_model`), with its
  language stage on a backend of its own and programs reused from earlier exports;
* :func:`reference_stages`: the eager stage modules the parity gate compares with;
* :func:`manifest_spaces`: a policy directory's action and state spaces as manifest
  sections, with the kinematics of an ``eef_delta`` / ``eef_pose`` space.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vla_edge.archs import registry
from vla_edge.archs.architecture import Architecture, ExportHooks
from vla_edge.archs.host import TensorSpec
from vla_edge.archs.policy_dir import TABLETOP_ROBOT
from vla_edge.core.errors import ConfigError, UnknownArchitectureError
from vla_edge.export.manifest import BACKENDS, file_sha256
from vla_edge.export.quant_recipes import QuantRecipe, StageQuant
from vla_edge.export.stages import StageProgram, stage_programs

TABLETOP_MJCF = TABLETOP_ROBOT["mjcf"]
"""The tabletop arm's model, relative to the package root (source tree or ``share/vla_edge``)."""
TABLETOP_EE_SITE = TABLETOP_ROBOT["ee_site"]
GRIPPER_JOINT = "gripper"
STAGE_PROCESS = "vla_edge.export.stage_process"
"""The module that exports one stage in a process of its own (``low_memory``)."""
STAGE_ENTRY_SUFFIX = ".entry.json"
"""A stage process writes its manifest entry to ``<out>/<stage><suffix>``."""
STAGE_ERROR_LINES = 20
"""Last lines of a failed stage process's error output quoted in the parent's error."""

CalibrationSource = Callable[[nn.Module, int, Path | None], list[tuple[torch.Tensor]]]
"""``(model, frames, data) -> frames`` vision-encoder inputs: where an int8-convolution export's
calibration frames come from (the tabletop or recorded demonstrations:
:func:`vla_edge.sim.frames.calibration_images`; the export does not render them)."""


# -- the architecture's hooks ----------------------------------------------------------------


def exported() -> tuple[str, ...]:
    """The architectures whose policy directories this module exports."""
    return tuple(name for name, arch in registry.ARCHITECTURES.items() if arch.export)


def hooks(architecture: str) -> ExportHooks:
    """The export hooks of ``architecture``.

    Raises:
        UnknownArchitectureError: not registered, or registers no export hooks (the
            message names the field, the value and the architectures exported).
    """
    arch = registry.ARCHITECTURES.get(architecture)
    if arch is None or arch.export is None:
        why = "is not registered" if arch is None else "has no policy directory exporter"
        raise UnknownArchitectureError(
            f"architecture = {architecture!r} {why}; exported: {', '.join(exported())}"
        )
    return arch.export_hooks()


def architecture_of(model: nn.Module) -> Architecture:
    """The registered architecture whose model class ``model`` is (π0 and π0.5 share one).

    Raises:
        UnknownArchitectureError: no architecture registers its class.
    """
    cls = type(model)
    name = f"{cls.__module__}:{cls.__qualname__}"
    for arch in registry.ARCHITECTURES.values():
        if arch.model == name and arch.export is not None:
            return arch
    raise UnknownArchitectureError(
        f"model class = {name!r} is not the model of an exported architecture "
        f"({', '.join(exported())})"
    )


def stage_programs_of(
    model: nn.Module,
    backend: str = "onnx",
    seed: int = 0,
    names: tuple[str, ...] | None = None,
) -> list[StageProgram]:
    """The stages of ``model`` (``names``: only those) as programs to export to ``backend``.

    Each with its declared tensors and rate, and for ExecuTorch the architecture's
    attention rewrite (:attr:`~vla_edge.archs.architecture.ExportHooks.xnnpack_attention`).

    Raises:
        ConfigError: an unknown backend.
        UnknownArchitectureError: an unregistered model.
    """
    if backend not in BACKENDS:
        raise ConfigError(f"backend = {backend!r}, expected one of {BACKENDS}")
    arch = hooks(architecture_of(model).name)
    stages, modules, examples = arch.stage_modules(model, backend, seed)
    return stage_programs(
        stages, modules, examples, names=names, xnnpack_attention=arch.xnnpack_attention
    )


def policy_dir_hooks(architecture: str) -> ExportHooks:
    """The hooks of an architecture exported from policy directories.

    Raises:
        UnknownArchitectureError: it exports only its own checkpoints (the message says so).
    """
    arch = hooks(architecture)
    if arch.contract is None or arch.load_model is None:
        raise UnknownArchitectureError(
            f"architecture = {architecture!r} has no policy directory exporter: its own "
            f"checkpoints are exported (vla-edge export --checkpoint); policy directories: "
            f"{', '.join(policy_dir_architectures())}"
        )
    return arch


def policy_dir_architectures() -> tuple[str, ...]:
    """The architectures exported from ``vla-edge import`` policy directories."""
    return tuple(name for name in exported() if hooks(name).contract is not None)


# -- one model ---------------------------------------------------------------------------------


def export_model(
    model: nn.Module,
    out_dir: str | Path,
    backend: str,
    quant: str | QuantRecipe = "fp32",
    *,
    tokenizer: str | Path,
    joint_names: Sequence[str],
    camera_map: Mapping[str, str | None],
    dt_action_s: float,
    norm_stats: Mapping[str, Any] | None = None,
    delta_actions: Sequence[bool] | None = None,
    normalisation: Mapping[str, Any] | None = None,
    source: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
    calibration_images: list[torch.Tensor] | None = None,
    entries: Mapping[str, dict[str, Any]] | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Export ``model``'s programs, its tokenizer and ``manifest.json`` into ``out_dir``.

    Args:
        model: a registered architecture's model; with ``entries``, only its config is
            read (it may be on the meta device).
        tokenizer: the user's tokenizer (a SentencePiece model, a Hugging Face tokenizer
            directory: the architecture's kind), copied beside the programs.
        norm_stats, delta_actions: the statistics (the architecture's layout of them),
            normalised with its own kind and epsilon ...
        normalisation: ... or the manifest's section itself (a policy directory's).
        extra: more manifest fields (a policy directory's ``action_space``).
        calibration_images: int8 convolutions: vision-encoder inputs ``[n_slots, 3, S, S]``
            in [-1, 1] that calibrate the int8 patch convolution (else it stays fp32).
        entries: the manifest entries of all stages, exported elsewhere into ``out_dir``
            (:func:`export_policy_dir`'s ``low_memory``): only the manifest and the
            tokenizer are written here.

    Raises:
        ConfigError: unknown backend or recipe, a quantised recipe on ONNX, a missing
            tokenizer, or a bad camera map or statistics.
        TokenizerMismatchError: a tokenizer the runners cannot read as the reference does.
        UnknownArchitectureError: an unregistered model.
    """
    from vla_edge.export.pipeline import (
        check_backend_quant,
        export_architecture,
        exporter_section,
        vision_calibration,
    )

    arch = policy_dir_hooks(architecture_of(model).name)
    recipe = check_backend_quant(backend, quant)
    files = arch.tokenizer_files(Path(tokenizer))
    config = model.config
    if normalisation is None:
        normalisation = arch.normalisation(
            config, norm_stats or {}, len(joint_names), delta_actions
        )
    contract = arch.contract(
        config,
        joint_names=joint_names,
        camera_map=camera_map,
        dt_action_s=dt_action_s,
        normalisation=normalisation,
        source=source,
    )
    if arch.check_tokenizer is not None:
        arch.check_tokenizer(Path(tokenizer), config)
    contract.update(extra or {})
    contract["exporter"] = exporter_section(executorch_stages=arch.executorch_stages)
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, src in files.items():
        target = out_dir / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.resolve() != target.resolve():
            shutil.copyfile(src, target)
    if arch.hash_tokenizer_files:
        tok = contract["host"]["token_ids"]["tokenizer"]
        folder = out_dir / tok["file"]
        tok["files"] = {
            str((out_dir / name).relative_to(folder)): file_sha256(out_dir / name) for name in files
        }
    calibration = vision_calibration(recipe, calibration_images)
    model.eval()
    return export_architecture(
        stage_programs_of(model, backend) if entries is None else [],
        out_dir,
        contract,
        backend,
        recipe,
        calibration=calibration,
        reused=None if entries is None else dict(entries),
        not_delegated_why=dict(arch.not_delegated_why) if backend == "executorch" else None,
        log=log,
    )


# -- the robot's spaces ------------------------------------------------------------------------


def manifest_kinematics(
    joint_names: Sequence[str],
    robot_mjcf: str | Path = TABLETOP_MJCF,
    ee_site: str = TABLETOP_EE_SITE,
    arm_joints: Sequence[str] | None = None,
    gripper_joint: str = GRIPPER_JOINT,
) -> dict[str, Any]:
    """``kinematics = {"mjcf", "site", "joints"}`` of an ``eef_delta`` / ``eef_pose`` space.

    The robot model is kept as given (a path relative to the package root, the default
    the tabletop arm's ``sim/tabletop/tabletop.xml``, or an absolute path), then the
    end-effector site and the arm joints (default: ``joint_names`` without the gripper).
    The runner checks them against the robot when it is built.
    """
    joints = (
        list(arm_joints)
        if arm_joints is not None
        else [j for j in joint_names if j != gripper_joint]
    )
    mjcf = Path(robot_mjcf)
    return {
        "mjcf": str(mjcf.resolve()) if mjcf.is_absolute() else mjcf.as_posix(),
        "site": str(ee_site),
        "joints": joints,
    }


def _with_kinematics(
    space: Mapping[str, Any],
    kind: str,
    joint_names: Sequence[str],
    robot_mjcf: str | Path,
    ee_site: str,
    arm_joints: Sequence[str] | None,
    gripper_joint: str,
) -> dict[str, Any]:
    """``space`` as a manifest section: of ``kind``, with :func:`manifest_kinematics`."""
    section = dict(space)
    if section.get("kind") == kind:
        section["kinematics"] = manifest_kinematics(
            joint_names, robot_mjcf, ee_site, arm_joints, gripper_joint
        )
    return section


def manifest_action_space(
    action_space: Mapping[str, Any],
    joint_names: Sequence[str],
    robot_mjcf: str | Path = TABLETOP_MJCF,
    ee_site: str = TABLETOP_EE_SITE,
    arm_joints: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The manifest's ``action_space``: the policy directory's, plus ``eef_delta``'s kinematics."""
    return _with_kinematics(
        action_space, "eef_delta", joint_names, robot_mjcf, ee_site, arm_joints, GRIPPER_JOINT
    )


def manifest_state_space(
    state_space: Mapping[str, Any],
    joint_names: Sequence[str],
    robot_mjcf: str | Path = TABLETOP_MJCF,
    ee_site: str = TABLETOP_EE_SITE,
    arm_joints: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The manifest's ``state_space``: the policy directory's, plus ``eef_pose``'s kinematics.

    The arm joints default to ``joint_names`` without the space's ``gripper_joint``.
    """
    gripper = str(state_space.get("gripper_joint", GRIPPER_JOINT))
    return _with_kinematics(
        state_space, "eef_pose", joint_names, robot_mjcf, ee_site, arm_joints, gripper
    )


def manifest_spaces(
    policy: Any,
    robot_mjcf: str | Path | None = None,
    ee_site: str | None = None,
    arm_joints: Sequence[str] | None = None,
) -> dict[str, dict[str, Any]]:
    """A policy directory's ``action_space`` and ``state_space`` as manifest sections.

    The kinematics' model and site are the ones given, else the import's
    (:meth:`~vla_edge.archs.policy_dir.PolicyDir.robot_model`).
    """
    robot = (policy.joint_names, *policy.robot_model(robot_mjcf, ee_site), arm_joints)
    return {
        "action_space": manifest_action_space(policy.action_space, *robot),
        "state_space": manifest_state_space(policy.state_space, *robot),
    }


# -- a policy directory ------------------------------------------------------------------------


def policy_hooks(path: str | Path) -> tuple[str, ExportHooks]:
    """A policy directory's architecture and its export hooks (``policy.yaml`` read only).

    Raises:
        PolicyDirError: (and its relatives) an invalid policy directory.
        UnknownArchitectureError: an architecture without an exporter.
    """
    from vla_edge.archs.policy_dir import load_policy_dir

    architecture = load_policy_dir(path).architecture
    return architecture, policy_dir_hooks(architecture)


def load_policy_model(
    path: str | Path,
    flow_steps: int | None = None,
    *,
    stage: str | None = None,
    verify_sha256: bool = True,
) -> tuple[Any, nn.Module]:
    """A policy directory and its model with the directory's weights (its architecture's).

    ``stage``: only that stage's weights are read (architectures with ``low_memory``).

    Raises:
        ConfigError: the directory's prompt or image resize is not its architecture's; an
            unknown stage.
        PolicyDirError: (and its relatives) an invalid policy directory.
        UnknownArchitectureError: an architecture without an exporter.
    """
    _, arch = policy_hooks(path)
    return arch.load_model(path, flow_steps, stage=stage, verify_sha256=verify_sha256)


def reference_stages(path: str | Path, flow_steps: int | None = None) -> dict[str, nn.Module]:
    """The eager (reference) stage modules of a policy directory, by stage name."""
    _, model = load_policy_model(path, flow_steps)
    return {stage.name: stage.module for stage in stage_programs_of(model, "onnx")}


def export_in_processes(
    policy: str | Path,
    out: str | Path,
    backend: str,
    recipe: QuantRecipe,
    flow_steps: int | None,
    stage_names: Sequence[str],
    log: Callable[[str], None] = print,
) -> dict[str, dict[str, Any]]:
    """Export ``stage_names`` one after another, each in a fresh process; their entries.

    Each process runs :data:`STAGE_PROCESS` (``python -m``), which writes the stage's
    manifest entry to ``out/<stage>.entry.json``.

    Raises:
        ConfigError: a stage's process failed: its exit status and the end of its error
            output (a process killed by the kernel, -9, ran out of memory).
    """
    from vla_edge.export.pipeline import stage_line

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    entries = {}
    for stage in stage_names:
        entry_file = out / f"{stage}{STAGE_ENTRY_SUFFIX}"
        entry_file.unlink(missing_ok=True)
        argv = [sys.executable, "-m", STAGE_PROCESS, str(policy), str(out), stage, backend]
        argv.append(recipe.model_dump_json())
        if flow_steps is not None:
            argv += ["--flow-steps", str(int(flow_steps))]
        log(f"{stage}: exporting in its own process ...")
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if done.returncode != 0 or not entry_file.is_file():
            tail = "\n".join(done.stdout.strip().splitlines()[-STAGE_ERROR_LINES:])
            killed = " (killed: out of memory?)" if done.returncode == -9 else ""
            raise ConfigError(
                f"exporting stage {stage} in its own process failed, exit "
                f"{done.returncode}{killed}:\n{tail}"
            )
        entries[stage] = json.loads(entry_file.read_text())
        entry_file.unlink()
        log(stage_line(stage, entries[stage]))
    return entries


def export_policy_dir(
    path: str | Path,
    out_dir: str | Path,
    backend: str,
    quant: str | QuantRecipe = "fp32",
    *,
    flow_steps: int | None = None,
    robot_mjcf: str | Path | None = None,
    ee_site: str | None = None,
    arm_joints: Sequence[str] | None = None,
    low_memory: bool = False,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Export a policy directory (``vla-edge import``'s) like :func:`export_model`.

    The weights and the tokenizer are checked against ``policy.yaml``'s hashes; the
    manifest takes the directory's joint names, camera map, ``dt_action_s``,
    normalisation (each part at its space's width), action space (an ``eef_delta`` one
    with the kinematics) and state space (an ``eef_pose`` one with the kinematics), both
    from :func:`manifest_spaces`.

    Args:
        flow_steps: Euler steps ``K`` built into the action head (default: the config's).
        robot_mjcf, ee_site, arm_joints: ``eef_delta``'s and ``eef_pose``'s kinematics
            (see :func:`manifest_kinematics`; the model and site default to
            :meth:`~vla_edge.archs.policy_dir.PolicyDir.robot_model`'s, the ones the import
            checked); ignored by the other kinds.
        low_memory: export each stage in a process of its own that reads only that
            stage's weights (:func:`export_in_processes`); the peak is the largest
            stage's instead of the whole model's plus a stage's. The programs are not run
            against torch at export time (``check_max_abs`` is null): the parity gate of
            ``vla-edge export --max-parity-pct`` compares them.

    Raises:
        ConfigError: the directory's prompt or image resize is not its architecture's;
            ``low_memory`` for an architecture that loads its whole model; a stage's
            process failed (its error is quoted).
        PolicyDirError: (and its relatives) an invalid policy directory.
        UnknownArchitectureError: an architecture without an exporter.
    """
    from vla_edge.export.pipeline import check_backend_quant, policy_dir_source

    architecture, arch = policy_hooks(path)
    entries = None
    if low_memory:
        if not arch.low_memory:
            with_it = [name for name in policy_dir_architectures() if hooks(name).low_memory]
            raise ConfigError(
                f"low_memory = True for architecture = {architecture!r}: it loads its whole "
                f"model (its whole model fits beside one stage's export); low_memory exports "
                f"{', '.join(with_it)} policy directories"
            )
        recipe = check_backend_quant(backend, quant)
        policy, config = arch.checked_policy(path, flow_steps)
        model_class = registry.get(architecture).resolve("model")
        with torch.device("meta"):
            model = model_class(config).eval()
        entries = export_in_processes(
            path, out_dir, backend, recipe, flow_steps, arch.stage_names, log
        )
    else:
        policy, model = arch.load_model(path, flow_steps)
    return export_model(
        model,
        out_dir,
        backend,
        quant,
        tokenizer=policy.tokenizer_dir or policy.tokenizer_path,
        joint_names=policy.joint_names,
        camera_map=policy.cameras,
        dt_action_s=policy.dt_action_s,
        normalisation=policy.manifest_normalisation(),
        source=policy_dir_source(path, policy),
        extra=manifest_spaces(policy, robot_mjcf, ee_site, arm_joints),
        entries=entries,
        log=log,
    )


# -- a checkpoint ------------------------------------------------------------------------------


def checkpoint_architecture() -> str:
    """The architecture whose own checkpoints ``vla-edge export --checkpoint`` reads.

    Raises:
        UnknownArchitectureError: none registers :attr:`ExportHooks.load_checkpoint`, or
            several do (a checkpoint file does not say whose it is).
    """
    names = [name for name in exported() if hooks(name).load_checkpoint is not None]
    if len(names) != 1:
        raise UnknownArchitectureError(
            f"architectures exporting their own checkpoints = {names}, expected exactly one "
            "(a checkpoint file does not name its architecture)"
        )
    return names[0]


def load_checkpoint_model(path: str | Path, flow_steps: int | None = None) -> nn.Module:
    """A checkpoint's model with ``flow_steps`` built in (the checkpoint architecture's).

    Raises:
        CheckpointError: (and its relatives) an unreadable or inconsistent checkpoint.
        UnknownArchitectureError: as :func:`checkpoint_architecture`.
    """
    return hooks(checkpoint_architecture()).load_checkpoint(path, flow_steps)


def untrained_model(config_file: str | Path, flow_steps: int | None = None) -> nn.Module:
    """Freshly initialised weights of a model config file (the checkpoint architecture's).

    Raises:
        ConfigError: an invalid config file.
        UnknownArchitectureError: as :func:`checkpoint_architecture`, or it offers none.
    """
    name = checkpoint_architecture()
    make = hooks(name).untrained_model
    if make is None:
        raise UnknownArchitectureError(f"architecture = {name!r} builds no untrained model")
    return make(config_file, flow_steps)


def _declared(
    stages: Any,
) -> dict[str, tuple[str, tuple[TensorSpec, ...], tuple[TensorSpec, ...]]]:
    """Stage name -> ``(rate, inputs with sources, outputs)`` a stage set declares."""
    inputs, outputs = stages.inputs(), stages.outputs()
    rates = stages.rates() if hasattr(stages, "rates") else {}
    return {
        name: (
            rates.get(name, "per_observation"),
            tuple(TensorSpec(t.name, t.shape, t.dtype, t.source) for t in inputs[name]),
            tuple(TensorSpec(t.name, t.shape, t.dtype) for t in outputs[name]),
        )
        for name in inputs
    }


def export_checkpoint(
    model: nn.Module,
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
    """Export every stage of a checkpoint's ``model`` to ``out_dir`` and write the manifest.

    The model's architecture exports its own checkpoints
    (:attr:`~vla_edge.archs.architecture.ExportHooks.checkpoint_contract`); its tokenizer
    is copied beside the programs.

    Args:
        model: the model (its flow steps are the exported ``K``).
        out_dir: created if missing; existing stage files are overwritten.
        backend: ``onnx`` or ``executorch`` (the stages but the language stage).
        quant: the quantisation recipe or its name (ExecuTorch; ONNX takes ``fp32``).
        checkpoint: the checkpoint file the model came from (hashed into the
            manifest); ``None`` marks the export as untrained weights.
        language_backend: backend of the architecture's language stage (default: ``backend``).
        reuse_language_from: an export directory whose language program may be
            copied instead of exported again when backend, quantisation, declared
            tensors, language revision and exporter versions match.
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
            backend (a checkpoint already is torch), a language backend or language
            reuse for an architecture without a language stage, or int8 convolutions'
            calibration without its source or data.
        UnknownArchitectureError: an unregistered model, or one whose architecture
            exports policy directories only.
    """
    from vla_edge.export.pipeline import (
        check_backend_quant,
        export_architecture,
        exporter_section,
        reuse_stage,
    )

    architecture = architecture_of(model)
    arch = hooks(architecture.name)
    if arch.checkpoint_contract is None or arch.checkpoint_tokenizer is None:
        raise UnknownArchitectureError(
            f"architecture = {architecture.name!r} exports policy directories "
            "(export_policy_dir), not its own checkpoints"
        )
    if backend == "torch" or language_backend == "torch":
        raise ConfigError(
            "backend = 'torch' for a vla-edge checkpoint: a .pt checkpoint already runs in "
            "torch on any device (--policy CKPT or bundled, with device: cuda); the torch "
            "backend exports an imported policy directory (--policy DIR)"
        )
    language = arch.language_stage
    if language is None and (language_backend, reuse_language_from) != (None, None):
        raise ConfigError(
            f"language_backend = {language_backend!r}, reuse_language_from = "
            f"{reuse_language_from!r}: architecture = {architecture.name!r} has no language stage"
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
    stage_backends, stage_quants = {}, {}
    if language is not None:
        stage_backends[language] = language_backend
        stage_quants[language] = (
            recipe.stage(language) if language_backend == "executorch" else StageQuant()
        )
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.eval()
    contract = arch.checkpoint_contract(model, checkpoint)
    declared = _declared(architecture.resolve("stages")(model))
    same = {
        "weights_sha256": contract["source"]["weights_sha256"],
        "flow_steps": int(contract["flow_steps"]),
        "calibration_inputs": calibration_frames,
    }
    candidates = []
    if reuse_language_from is not None:
        candidates.append((language, Path(reuse_language_from), None))
    candidates += [(n, Path(d), same) for d in reuse_stages_from for n in arch.stage_names]
    reused: dict[str, dict[str, Any]] = {}
    for name, folder, weights in candidates:
        if name in reused:
            continue
        entry = reuse_stage(
            name,
            folder,
            out_dir,
            stage_backends.get(name, backend),
            stage_quants[name] if name in stage_quants else recipe.stage(name),
            declared[name],
            weights,
            language_revision=arch.language_revision if name == language else None,
        )
        if entry is not None:
            reused[name] = entry
            log(f"{name}: reused {entry['file']} from {folder}")
    names = tuple(n for n in arch.stage_names if n not in reused)
    calibration = {}
    if int8_convs and calibration_frames and calibration_source is not None:
        calibration["vision_encoder"] = calibration_source(
            model, calibration_frames, calibration_data
        )
    for name, src in arch.checkpoint_tokenizer().items():
        shutil.copyfile(src, out_dir / name)
    contract["exporter"] = exporter_section(
        **({} if language is None else {"language_revision": arch.language_revision})
    )
    return export_architecture(
        stage_programs_of(model, backend, names=names) if names else [],
        out_dir,
        contract,
        backend,
        recipe,
        stage_backends=stage_backends or None,
        stage_quants=stage_quants or None,
        calibration=calibration,
        reused=reused,
        log=log,
    )
