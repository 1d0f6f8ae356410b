"""``vla-edge export``: a checkpoint -> one program per stage plus ``manifest.json``.

``vla-edge export --checkpoint CKPT --backend onnx|executorch --quant RECIPE --out DIR``
``vla-edge export --policy POLICY_DIR --backend onnx|executorch --quant RECIPE --out DIR``

``RECIPE`` names a quantisation recipe of ``config/quant_recipes.yaml`` (``fp32``,
``8da4w``, ``8da8w``, ``int8wo``, ``fp16``, ...; :mod:`vla_edge.export.quant_recipes`)
or of the user's own file (``--quant-recipes``); the manifest records it.
``--max-parity-pct P`` then runs the export against its eager torch stages on
tabletop observations (or ``--parity-data`` recordings) with the same noise
(:mod:`vla_edge.runners.parity`) and refuses it when some joint's RMS error
exceeds ``P`` % of its range: the manifest is renamed ``manifest.refused.json``
(no runner loads the directory) and the error lists every joint's figure. A
passing export records the figures in its manifest's ``parity``.

The manifest is format ``vla_edge.export.v2`` (:mod:`vla_edge.export.manifest`):
the stages declare their tensors, so the runners need no code of the
architecture; an older export is refused by them and is re-exported with this
command. ``--checkpoint bundled`` names the shipped model. ``--untrained-config YAML``
exports freshly initialised weights of a model config instead (for timing at
other input sizes; the manifest records ``source.trained = false``).
``--policy`` exports a third-party policy directory written by ``vla-edge
import`` with :func:`vla_edge.export.architecture.export_policy_dir`, a checkpoint with
:func:`vla_edge.export.architecture.export_checkpoint`; both read the export hooks its
architecture registers (:mod:`vla_edge.archs.registry`; the bundled model's are
:mod:`vla_edge.archs.bundled.programs`).

The command's front end: it hands the export the policy path of
:mod:`vla_edge.runners.factory` and the calibration frames of :mod:`vla_edge.sim.frames`
(which the export layer does not import), and the parity gate
(:func:`vla_edge.runners.parity.gate_export`) the observations of
:mod:`vla_edge.sim.frames`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vla_edge.config.models import MAX_FLOW_STEPS
from vla_edge.core.errors import ConfigError, VlaEdgeError
from vla_edge.export.manifest import BACKENDS

if TYPE_CHECKING:
    from vla_edge.archs.policy_dir import PolicyDir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``vla-edge export``."""
    parser.add_argument("--checkpoint", default=None, help="checkpoint .pt or 'bundled' (default)")
    parser.add_argument(
        "--policy",
        type=Path,
        default=None,
        help="a policy directory from `vla-edge import` (pi0, pi05, smolvla) instead of a "
        "checkpoint",
    )
    parser.add_argument(
        "--backend",
        choices=BACKENDS,
        required=True,
        help="onnx or executorch: programs for the CPU runtimes; torch (--policy only): each "
        "stage's weights, for the torch runner on a GPU or the CPU (device, dtype)",
    )
    parser.add_argument(
        "--quant",
        default="fp32",
        help="quantisation recipe (config/quant_recipes.yaml: fp32, 8da4w, 8da8w, int8wo, fp16, "
        "...; or one of --quant-recipes)",
    )
    parser.add_argument(
        "--quant-recipes", type=Path, default=None, help="a recipes file of your own (YAML)"
    )
    parser.add_argument("--out", type=Path, required=True, help="export directory")
    parser.add_argument(
        "--language-backend",
        choices=BACKENDS,
        default=None,
        help="backend of the language stage (default: --backend)",
    )
    parser.add_argument(
        "--reuse-language-from",
        type=Path,
        default=None,
        help="copy a matching language program from this export directory",
    )
    parser.add_argument("--flow-steps", type=int, default=None, help="override K")
    parser.add_argument(
        "--calibration-frames",
        type=int,
        default=None,
        help="frames that calibrate a recipe's int8 convolutions "
        "(default: the recipe's calibration_frames; 0 keeps them fp32)",
    )
    parser.add_argument(
        "--calibration-data",
        type=Path,
        default=None,
        help="take those frames from these demonstrations (HDF5 file or folder) "
        "instead of rendering them from the tabletop",
    )
    parser.add_argument(
        "--untrained-config",
        type=Path,
        default=None,
        help="export untrained weights of this model config (training YAML) instead",
    )
    parser.add_argument("--threads", type=int, default=2, help="torch threads while exporting")
    parser.add_argument(
        "--low-memory",
        action="store_true",
        help="--policy of an architecture that reads one stage's weights (π0, π0.5, GR00T): "
        "export each stage in its own process that reads only its weights (a full-size π0 "
        "in 24 GiB; the programs are checked by the parity gate only)",
    )
    gate = parser.add_argument_group("parity gate")
    gate.add_argument(
        "--max-parity-pct",
        type=float,
        default=None,
        help="refuse the export when a joint's RMS error against eager torch exceeds this "
        "%% of its range",
    )
    gate.add_argument(
        "--parity-samples", type=int, default=24, help="observations the gate compares"
    )
    gate.add_argument(
        "--parity-data",
        type=Path,
        default=None,
        help="take them from these demonstrations (HDF5 file or folder; default: rendered "
        "from the tabletop while the scripted expert works)",
    )
    robot = parser.add_argument_group(
        "--policy with an eef_delta / eef_pose space: the robot's kinematics "
        "(default: the ones vla-edge import checked)"
    )
    robot.add_argument(
        "--robot-mjcf", help="the robot's MJCF / URDF ('tabletop': the package's arm)"
    )
    robot.add_argument("--ee-site", help="the end-effector site in --robot-mjcf")


def run(args: argparse.Namespace) -> int:
    """Export and print one line per stage: a checkpoint or a policy directory, by its hooks.

    Both go through the generic exporter (:mod:`vla_edge.export.architecture`): a policy
    directory through :func:`~vla_edge.export.architecture.export_policy_dir`, a checkpoint
    (``--checkpoint``, ``--untrained-config``) through
    :func:`~vla_edge.export.architecture.export_checkpoint`, each reading the hooks its
    architecture registers.
    """
    import sys

    import torch

    torch.set_num_threads(max(1, int(args.threads)))
    try:
        _check_gate_args(args)
        if args.flow_steps is not None and not 1 <= args.flow_steps <= MAX_FLOW_STEPS:
            raise ConfigError(
                f"--flow-steps = {args.flow_steps}, expected 1 <= K <= {MAX_FLOW_STEPS}"
            )
        eager = _export_policy_dir(args) if args.policy is not None else _export_checkpoint(args)
        if args.max_parity_pct is not None:
            _parity_gate(args, eager())
    except VlaEdgeError as exc:
        print(f"vla-edge export: {exc}", file=sys.stderr)
        return 2
    return 0


def _export_checkpoint(args: argparse.Namespace) -> Callable[[], Mapping[str, Any]]:
    """``--checkpoint CKPT`` / ``--untrained-config``: the model's programs and manifest.

    Returns:
        The eager stage modules the parity gate compares with (made when called).
    """
    from vla_edge.export.architecture import (
        export_checkpoint,
        load_checkpoint_model,
        stage_programs_of,
        untrained_model,
    )
    from vla_edge.export.quant_recipes import resolve_recipe
    from vla_edge.runners.factory import resolve_policy_path
    from vla_edge.sim.frames import calibration_images

    recipe = resolve_recipe(args.quant, args.quant_recipes)
    for flag, value in (("--robot-mjcf", args.robot_mjcf), ("--ee-site", args.ee_site)):
        if value is not None:
            raise ConfigError(f"{flag} is for --policy (a policy directory's kinematics)")
    if args.low_memory:
        raise ConfigError(
            "--low-memory is for --policy (a policy directory whose architecture reads one "
            "stage's weights)"
        )
    checkpoint: Path | None
    if args.untrained_config is not None:
        model = untrained_model(args.untrained_config, args.flow_steps)
        checkpoint = None
    else:
        checkpoint = resolve_policy_path(args.checkpoint or "bundled")
        model = load_checkpoint_model(checkpoint, args.flow_steps)
    export_checkpoint(
        model,
        args.out,
        args.backend,
        recipe,
        checkpoint=checkpoint,
        language_backend=args.language_backend,
        reuse_language_from=args.reuse_language_from,
        calibration_data=args.calibration_data,
        calibration_source=calibration_images,
        calibration_frames=args.calibration_frames,
    )
    return lambda: {s.name: s.module for s in stage_programs_of(model, "onnx")}


def _export_policy_dir(args: argparse.Namespace) -> Callable[[], Mapping[str, Any]]:
    """``--policy DIR``: a policy directory's programs and manifest, by its architecture.

    Returns:
        The eager stage modules the parity gate compares with (made when called).
    """
    from vla_edge.archs.policy_dir import load_policy_dir
    from vla_edge.export.architecture import export_policy_dir, policy_hooks, reference_stages
    from vla_edge.export.quant_recipes import resolve_recipe

    checkpoint_only = {
        "--checkpoint": args.checkpoint,
        "--untrained-config": args.untrained_config,
        "--language-backend": args.language_backend,
        "--reuse-language-from": args.reuse_language_from,
        "--calibration-data": args.calibration_data,
    }
    given = [flag for flag, value in checkpoint_only.items() if value is not None]
    if given:
        raise ConfigError(f"--policy: {given[0]} is for the bundled model, not a policy dir")
    policy = load_policy_dir(args.policy)
    policy_hooks(args.policy)  # an architecture without an exporter, before anything
    recipe = resolve_recipe(args.quant, args.quant_recipes)
    mjcf, ee_site = _checked_kinematics(policy, args.robot_mjcf, args.ee_site)
    export_policy_dir(
        args.policy,
        args.out,
        args.backend,
        recipe,
        flow_steps=args.flow_steps,
        robot_mjcf=mjcf,
        ee_site=ee_site,
        low_memory=args.low_memory,
    )
    return lambda: reference_stages(args.policy, args.flow_steps)


def _checked_kinematics(
    policy: PolicyDir, mjcf: str | None, ee_site: str | None
) -> tuple[str | Path, str]:
    """The robot model and site the export records, loaded as the runner will load them.

    ``--robot-mjcf PATH`` is kept absolute (``tabletop``: the package's arm, relative to the
    package root); left out, each is the import's (:meth:`PolicyDir.robot_model`). The
    kinematics of the manifest's ``eef_delta`` / ``eef_pose`` sections
    (:func:`vla_edge.export.architecture.manifest_spaces`) are built with the runner's own
    :func:`vla_edge.runners.exported.manifest_kinematics`, so a wrong model or site is
    named before anything exports.

    Raises:
        AssetNotFoundError: no such model file.
        ConfigError: MuJoCo cannot load it.
        ActionSpaceError: it lacks the site or an arm joint.
    """
    from vla_edge.archs.policy_dir import TABLETOP_ROBOT
    from vla_edge.export.architecture import manifest_spaces
    from vla_edge.runners.exported import manifest_kinematics

    if mjcf is not None:
        mjcf = TABLETOP_ROBOT["mjcf"] if mjcf == "tabletop" else str(Path(mjcf).resolve())
    for field, section in manifest_spaces(policy, mjcf, ee_site).items():
        if "kinematics" in section:
            manifest_kinematics(section["kinematics"], f"{field}.kinematics")
    return policy.robot_model(mjcf, ee_site)


def _check_gate_args(args: argparse.Namespace) -> None:
    """Refuse a parity gate that cannot run, before anything is exported.

    Raises:
        ConfigError: naming the flag and its bound.
    """
    if args.max_parity_pct is not None and not args.max_parity_pct > 0:
        raise ConfigError(f"--max-parity-pct = {args.max_parity_pct}, expected > 0")
    if not args.parity_samples >= 1:
        raise ConfigError(f"--parity-samples = {args.parity_samples}, expected >= 1")
    if args.parity_data is not None and not args.parity_data.exists():
        raise ConfigError(f"--parity-data {args.parity_data}: no such file or folder")


def _parity_gate(args: argparse.Namespace, eager: Mapping[str, Any]) -> None:
    """Compare the export in ``args.out`` with ``eager``; record the figures or refuse it.

    Raises:
        ConfigError: the observations cannot be made for this export (tabletop renders
            for another robot without ``--parity-data``).
        ParityGateError: some joint is over ``--max-parity-pct``; the manifest is renamed
            ``manifest.refused.json`` first.
    """
    from vla_edge.export.manifest import load_manifest
    from vla_edge.runners.parity import gate_export
    from vla_edge.sim.env import JOINT_NAMES

    data = load_manifest(args.out).data
    cameras, hw = list(data["cameras"]), (int(data["image_height"]), int(data["image_width"]))
    if args.parity_data is not None:
        from vla_edge.sim.frames import recorded_observations

        observations = recorded_observations(
            args.parity_data, cameras, hw, len(data["joint_names"]), args.parity_samples
        )
        source = f"data:{args.parity_data}"
    else:
        if tuple(data["joint_names"]) != JOINT_NAMES:
            raise ConfigError(
                f"--max-parity-pct: {args.out} drives joints {data['joint_names']}, not the "
                f"tabletop arm's {list(JOINT_NAMES)}; pass --parity-data with recordings of "
                "your robot"
            )
        from vla_edge.sim.frames import expert_observations

        observations = expert_observations(
            cameras, hw, int(data["chunk_horizon"]), args.parity_samples
        )
        source = "env:scripted_expert"
    report = gate_export(
        args.out, eager, observations, args.max_parity_pct, source, threads=args.threads
    )
    print(
        f"parity: max {report['rms_pct_of_range_max']:.3g} % of range "
        f"(bound {args.max_parity_pct:g} %) over {report['observations']} observations"
    )
