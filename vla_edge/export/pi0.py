r"""π0 / π0.5 through the v2 stage contract: three programs and what the runners need.

:func:`pi0_stage_programs` turns a :class:`~vla_edge.archs.pi0.model.Pi0Model`'s
stages (:mod:`vla_edge.archs.pi0.stages`) into exportable
:class:`~vla_edge.export.stages.StageProgram` s — the reference modules for
ONNX, their XNNPACK rewrite (:mod:`vla_edge.export.pi0_xnnpack`, same weights,
same maths) for ExecuTorch. :func:`pi0_contract` writes the rest of the
manifest as openpi's inference pipeline does it
(``src/openpi/transforms.py``, ``models/tokenizer.py``,
``models_pytorch/preprocessing_pytorch.py``):

* ``host.images``: the checkpoint's slots (``base_0_rgb``, ``left_wrist_0_rgb``,
  ``right_wrist_0_rgb``) fed by robot cameras or ``null`` (a black image,
  masked), ``resize: pad`` (openpi's ``resize_with_pad``), pixels in [-1, 1];
* ``host.token_ids``: a SentencePiece tokenizer (PaliGemma's, copied beside the
  programs as ``tokenizer.model``) with prompt ``pi0`` (BOS + cleaned text +
  ``"\n"``) or ``pi05_state`` (π0.5: the discretised normalised state in the
  prompt, so the ids are made per observation), ``token_mask`` float 0/1;
* ``host.state`` / ``noise`` / ``prefix_*`` at the padded width (32): the
  robot's ``N`` dimensions first, zeros after (openpi's ``PadStatesAndActions``);
* ``normalisation``: π0 ``mean_std``, π0.5 ``quantile`` (openpi:
  ``use_quantile_norm = model_type != PI0``), epsilon 1e-6, the checkpoint's
  statistics cut to the robot's ``N`` dimensions (openpi slices them to the
  data's width); a policy directory's state at its state space's width and its
  actions at its action space's;
* ``output``: ``action_head.actions`` ``[1, H, 32]``, the first ``N`` decoded
  (a policy directory's: as many as it has action statistics).

:func:`export_pi0` exports the three programs and writes ``manifest.json``
with the tokenizer beside them. :func:`export_policy_dir` exports a policy directory,
whole in this process or (``low_memory``) each stage in a process of its own that reads
only that stage's weights (:mod:`vla_edge.export.pi0_stage_process`): a full-size π0 is
13 GB in fp32, and its 8da4w fusion alone peaks at about 10 GiB while it lowers.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from vla_edge.archs.pi0.config import Pi0Config
from vla_edge.archs.pi0.model import Pi0Model
from vla_edge.archs.pi0.stages import STAGE_NAMES, Pi0Stages, build_stages
from vla_edge.archs.policy_dir import TABLETOP_ROBOT
from vla_edge.core.errors import ConfigError
from vla_edge.export.manifest import BACKENDS
from vla_edge.export.pipeline import prefix_flow_contract
from vla_edge.export.quant_recipes import QuantRecipe
from vla_edge.export.stages import StageProgram, stage_programs

OUTPUT = "action_head.actions"
TOKENIZER_FILE = "tokenizer.model"
NORM_EPSILON = 1e-6
"""openpi's epsilon in both formulas (``transforms.Normalize``)."""
NORM_STATS = {"mean_std": ("mean", "std"), "quantile": ("q01", "q99")}
TABLETOP_MJCF = TABLETOP_ROBOT["mjcf"]
"""The tabletop arm's model, relative to the package root (source tree or ``share/vla_edge``)."""
TABLETOP_EE_SITE = TABLETOP_ROBOT["ee_site"]
GRIPPER_JOINT = "gripper"


def architecture_name(config: Pi0Config) -> str:
    """``pi0`` or ``pi05``."""
    return "pi05" if config.pi05 else "pi0"


def prompt_format(config: Pi0Config) -> str:
    """``pi05_state`` when the state is written into the prompt (π0.5), else ``pi0``."""
    return "pi05_state" if config.state_in_prompt else "pi0"


def normalisation_kind(config: Pi0Config) -> str:
    """The reference's choice (openpi): z-score for π0, quantiles for π0.5."""
    return "quantile" if config.pi05 else "mean_std"


def normalisation_section(
    kind: str,
    norm_stats: Mapping[str, Mapping[str, Sequence[float]]],
    n: int,
    delta_actions: Sequence[bool] | None = None,
) -> dict[str, Any]:
    """The manifest's ``normalisation`` from openpi-style statistics.

    Args:
        kind: ``mean_std`` or ``quantile``.
        norm_stats: ``{"state": {...}, "actions": {...}}`` holding ``mean``/``std``
            or ``q01``/``q99`` (the inner dict of openpi's ``norm_stats.json``);
            longer vectors are cut to ``n``.
        n: the robot's dimensions (``len(joint_names)``).
        delta_actions: per dimension, actions relative to the state (default none).

    Raises:
        ConfigError: a statistic is missing or shorter than ``n``.
    """
    if kind not in NORM_STATS:
        raise ConfigError(f"normalisation kind = {kind!r}, expected one of {tuple(NORM_STATS)}")
    section: dict[str, Any] = {"kind": kind, "epsilon": NORM_EPSILON}
    for part in ("state", "actions"):
        stats = norm_stats.get(part)
        if not isinstance(stats, Mapping):
            raise ConfigError(f"norm_stats.{part} is missing")
        section[part] = {}
        for key in NORM_STATS[kind]:
            if key not in stats:
                raise ConfigError(f"norm_stats.{part}.{key} is missing ({kind} needs it)")
            values = np.asarray(stats[key], dtype=np.float64).ravel()
            if values.size < n:
                raise ConfigError(
                    f"norm_stats.{part}.{key} has {values.size} values, expected >= {n} "
                    "(one per joint_names entry)"
                )
            section[part][key] = values[:n].tolist()
    delta = [False] * n if delta_actions is None else [bool(d) for d in delta_actions]
    if len(delta) != n:
        raise ConfigError(f"delta_actions has {len(delta)} entries, expected {n}")
    section["delta_actions"] = delta
    return section


def image_slots(config: Pi0Config, camera_map: Mapping[str, str | None]) -> list[dict[str, Any]]:
    """``[{"name": slot, "camera": robot camera or None}]`` in the checkpoint's slot order.

    Raises:
        ConfigError: ``camera_map`` names a slot the model lacks, maps no camera,
            or maps one camera twice.
    """
    unknown = sorted(set(camera_map) - set(config.image_slots))
    if unknown:
        raise ConfigError(
            f"camera_map slot {unknown[0]!r} is not an image slot of the model; expected "
            f"{list(config.image_slots)}"
        )
    slots = [{"name": s, "camera": camera_map.get(s)} for s in config.image_slots]
    cameras = [s["camera"] for s in slots if s["camera"] is not None]
    if not cameras:
        raise ConfigError(f"camera_map = {dict(camera_map)} maps no robot camera to any slot")
    if len(set(cameras)) != len(cameras):
        raise ConfigError(f"camera_map = {dict(camera_map)} maps one camera to two slots")
    return slots


def pi0_contract(
    config: Pi0Config,
    *,
    joint_names: Sequence[str],
    camera_map: Mapping[str, str | None],
    dt_action_s: float,
    norm_stats: Mapping[str, Mapping[str, Sequence[float]]] | None = None,
    delta_actions: Sequence[bool] | None = None,
    source: dict[str, Any] | None = None,
    normalisation: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The manifest's fields besides the stages and the exporter (see the module docstring).

    Args:
        norm_stats: openpi-style statistics (see :func:`normalisation_section`),
            normalised with the architecture's own kind and epsilon ...
        normalisation: ... or the manifest's section itself (a policy directory's).

    Raises:
        ConfigError: a bad camera map or statistics.
    """
    n = len(joint_names)
    if not 0 < n <= config.action_dim:
        raise ConfigError(
            f"joint_names has {n} entries, expected 1 to action_dim = {config.action_dim}"
        )
    if normalisation is None:
        normalisation = normalisation_section(
            normalisation_kind(config), norm_stats or {}, n, delta_actions
        )
    return prefix_flow_contract(
        config,
        architecture=architecture_name(config),
        stage_order=STAGE_NAMES,
        output=OUTPUT,
        slots=image_slots(config, camera_map),
        images={"resize": "pad"},
        tokenizer={"kind": "sentencepiece", "file": TOKENIZER_FILE},
        prompt=prompt_format(config),
        state_dim=config.action_dim,
        chunk_horizon=config.action_horizon,
        normalisation=normalisation,
        joint_names=joint_names,
        dt_action_s=dt_action_s,
        source=source,
    )


def example_inputs(stages: Pi0Stages, seed: int = 0) -> dict[str, tuple[torch.Tensor, ...]]:
    """Each stage's example inputs, chained: fusion reads real image tokens, the head a real cache.

    Contiguous (row-major, like the runners' numpy arrays: ExecuTorch fixes each
    input's dim order from its example).
    """
    ex = stages.example_inputs(seed)
    with torch.no_grad():
        tokens = stages.vision_encoder(*ex["vision_encoder"])
        cache = stages.fusion(tokens, *ex["fusion"][1:])
    head = list(ex["action_head"])
    prefix_mask = torch.zeros_like(head[6])
    prefix_mask[0, : min(2, prefix_mask.shape[1] - 1)] = 1.0
    chained = {
        "vision_encoder": ex["vision_encoder"],
        "fusion": (tokens, *ex["fusion"][1:]),
        "action_head": (*cache, *head[3:6], prefix_mask, *head[7:]),
    }
    return {
        name: tuple(t.detach().contiguous().clone() for t in tensors)
        for name, tensors in chained.items()
    }


def pi0_stage_programs(model: Pi0Model, backend: str = "onnx", seed: int = 0) -> list[StageProgram]:
    """The three stages of ``model`` as programs to export, with their declared tensors.

    ``backend`` ``executorch`` gets the XNNPACK rewrite of each stage; ``onnx``
    the reference modules.
    """
    if backend not in BACKENDS:
        raise ConfigError(f"backend = {backend!r}, expected one of {BACKENDS}")
    stages = build_stages(model)
    modules = {name: module.eval() for name, module in stages.modules().items()}
    if backend == "executorch":
        from vla_edge.export.pi0_xnnpack import xnnpack_stages

        modules = xnnpack_stages(stages.vision_encoder, stages.fusion, stages.action_head)
    return stage_programs(stages, modules, example_inputs(stages, seed))


def export_pi0(
    model: Pi0Model,
    out_dir: str | Path,
    backend: str,
    quant: str | QuantRecipe = "fp32",
    *,
    tokenizer: str | Path,
    joint_names: Sequence[str],
    camera_map: Mapping[str, str | None],
    dt_action_s: float,
    norm_stats: Mapping[str, Mapping[str, Sequence[float]]] | None = None,
    delta_actions: Sequence[bool] | None = None,
    source: dict[str, Any] | None = None,
    normalisation: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
    calibration_images: list[torch.Tensor] | None = None,
    entries: Mapping[str, dict[str, Any]] | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Export π0 / π0.5's three programs, the tokenizer and ``manifest.json`` into ``out_dir``.

    Args:
        model: the model; with ``entries``, only its config is read (it may be on the
            meta device).
        tokenizer: the SentencePiece model (PaliGemma's), copied as ``tokenizer.model``.
        norm_stats, normalisation: see :func:`pi0_contract`.
        extra: more manifest fields (a policy directory's ``action_space``).
        calibration_images: int8 convolutions: vision-encoder inputs ``[n_slots, 3, S, S]`` in
            [-1, 1] that calibrate the int8 patch convolution (else it stays fp32).
        entries: the manifest entries of all three stages, exported elsewhere into
            ``out_dir`` (:func:`export_policy_dir`'s ``low_memory``): only the manifest
            and the tokenizer are written here.

    Raises:
        ConfigError: unknown backend or recipe, a quantised recipe on ONNX, a missing
            tokenizer, or a bad camera map or statistics.
    """
    from vla_edge.export.pi0_xnnpack import NOT_DELEGATED_WHY
    from vla_edge.export.pipeline import (
        check_backend_quant,
        export_architecture,
        exporter_section,
        vision_calibration,
    )

    recipe = check_backend_quant(backend, quant)
    tokenizer = Path(tokenizer)
    if not tokenizer.is_file():
        raise ConfigError(f"tokenizer = {str(tokenizer)!r}: no such file")
    contract = pi0_contract(
        model.config,
        joint_names=joint_names,
        camera_map=camera_map,
        dt_action_s=dt_action_s,
        norm_stats=norm_stats,
        delta_actions=delta_actions,
        source=source,
        normalisation=normalisation,
    )
    contract.update(extra or {})
    contract["exporter"] = exporter_section(executorch_stages="vla_edge.export.pi0_xnnpack")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if tokenizer.resolve() != (out_dir / TOKENIZER_FILE).resolve():
        shutil.copyfile(tokenizer, out_dir / TOKENIZER_FILE)
    calibration = vision_calibration(recipe, calibration_images)
    model.eval()
    return export_architecture(
        pi0_stage_programs(model, backend) if entries is None else [],
        out_dir,
        contract,
        backend,
        recipe,
        calibration=calibration,
        reused=None if entries is None else dict(entries),
        not_delegated_why=NOT_DELEGATED_WHY if backend == "executorch" else None,
        log=log,
    )


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


def checked_policy(
    path: str | Path, flow_steps: int | None = None, verify_sha256: bool = True
) -> tuple[Any, Pi0Config]:
    """A π0 / π0.5 policy directory and its model config (``flow_steps`` applied).

    Raises:
        ConfigError: the directory holds another architecture, or its prompt or
            image resize is not π0's.
        PolicyDirError: (and its relatives) an invalid policy directory.
    """
    from vla_edge.archs.policy_dir import load_policy_dir

    policy = load_policy_dir(path, verify_sha256=verify_sha256)
    if policy.architecture not in ("pi0", "pi05"):
        raise ConfigError(
            f"{path}: architecture = {policy.architecture!r}: vla-edge export --policy "
            "exports pi0 and pi05"
        )
    config: Pi0Config = policy.config
    if flow_steps is not None:
        config = Pi0Config(**{**config.model_dump(), "flow_steps": int(flow_steps)})
    if policy.prompt.get("format") != prompt_format(config):
        raise ConfigError(
            f"{path}: prompt.format = {policy.prompt.get('format')!r}, but the config "
            f"writes the prompt as {prompt_format(config)!r}"
        )
    if policy.images.get("resize") != "pad":
        raise ConfigError(
            f"{path}: images.resize = {policy.images.get('resize')!r}, expected 'pad' (openpi)"
        )
    return policy, config


def load_policy_model(
    path: str | Path,
    flow_steps: int | None = None,
    stage: str | None = None,
    verify_sha256: bool = True,
) -> tuple[Any, Pi0Model]:
    """A π0 / π0.5 policy directory and its model with the directory's weights.

    ``stage``: only that stage's weights are read; the rest of the model is allocated
    but never written (:func:`~vla_edge.archs.common.without_default_init`), so not
    resident.

    Raises:
        ConfigError: as :func:`checked_policy`; an unknown stage.
        PolicyDirError: (and its relatives) an invalid policy directory.
    """
    from vla_edge.archs.common import without_default_init
    from vla_edge.archs.pi0.checkpoint import load_pi0_weights

    if stage is not None and stage not in STAGE_NAMES:
        raise ConfigError(f"stage = {stage!r}, expected one of {STAGE_NAMES}")
    policy, config = checked_policy(path, flow_steps, verify_sha256)
    if stage is None:
        model = Pi0Model(config).eval()
        load_pi0_weights(policy, model)
    else:
        with without_default_init():
            model = Pi0Model(config).eval()
        load_pi0_weights(policy, model, only=build_stages(model).modules()[stage])
    return policy, model


def reference_stages(path: str | Path, flow_steps: int | None = None) -> dict[str, nn.Module]:
    """The eager (reference) stage modules of a π0 / π0.5 policy directory, by stage name."""
    _, model = load_policy_model(path, flow_steps)
    return {stage.name: stage.module for stage in pi0_stage_programs(model, "onnx")}


STAGE_PROCESS = "vla_edge.export.pi0_stage_process"
"""The module that exports one stage in a process of its own (``low_memory``)."""
STAGE_ENTRY_SUFFIX = ".entry.json"
"""A stage process writes its manifest entry to ``<out>/<stage><suffix>``."""
STAGE_ERROR_LINES = 20
"""Last lines of a failed stage process's error output quoted in the parent's error."""


def export_in_processes(
    policy: str | Path,
    out: str | Path,
    backend: str,
    recipe: QuantRecipe,
    flow_steps: int | None,
    log: Callable[[str], None] = print,
) -> dict[str, dict[str, Any]]:
    """Export the three stages one after another, each in a fresh process; their entries.

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
    for stage in STAGE_NAMES:
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
    """Export a π0 / π0.5 policy directory (``vla-edge import``'s) like :func:`export_pi0`.

    The weights and the tokenizer are checked against ``policy.yaml``'s hashes;
    the manifest takes the directory's joint names, camera map, ``dt_action_s``,
    normalisation (each part at its space's width), action space
    (an ``eef_delta`` one with the kinematics) and state space (an ``eef_pose`` one with
    the kinematics), both from :func:`manifest_spaces`.

    Args:
        flow_steps: Euler steps ``K`` built into the action head (default: the config's).
        robot_mjcf, ee_site, arm_joints: ``eef_delta``'s and ``eef_pose``'s kinematics
            (see :func:`manifest_kinematics`; the model and site default to
            :meth:`~vla_edge.archs.policy_dir.PolicyDir.robot_model`'s, the ones the import
            checked); ignored by the other kinds.
        low_memory: export each stage in a process of its own that reads only that
            stage's weights (:func:`export_in_processes`); the peak is the
            largest stage's instead of the whole model's plus a stage's. The programs
            are not run against torch at export time (``check_max_abs`` is null): the
            parity gate of ``vla-edge export --max-parity-pct`` compares them.

    Raises:
        ConfigError: the directory holds another architecture, or its prompt or
            image resize is not π0's; a stage's process failed (its error is quoted).
        PolicyDirError: (and its relatives) an invalid policy directory.
    """
    from vla_edge.export.pipeline import check_backend_quant, policy_dir_source

    entries = None
    if low_memory:
        recipe = check_backend_quant(backend, quant)
        policy, config = checked_policy(path, flow_steps)
        with torch.device("meta"):
            model = Pi0Model(config).eval()
        entries = export_in_processes(path, out_dir, backend, recipe, flow_steps, log)
    else:
        policy, model = load_policy_model(path, flow_steps)
    source = policy_dir_source(path, policy)
    return export_pi0(
        model,
        out_dir,
        backend,
        quant,
        tokenizer=policy.tokenizer_path,
        joint_names=policy.joint_names,
        camera_map=policy.cameras,
        dt_action_s=policy.dt_action_s,
        normalisation=policy.manifest_normalisation(),
        source=source,
        extra=manifest_spaces(policy, robot_mjcf, ee_site, arm_joints),
        entries=entries,
        log=log,
    )
