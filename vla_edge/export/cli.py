"""``vla-edge export``: a checkpoint -> one program per stage plus ``manifest.json``.

``vla-edge export --checkpoint CKPT --backend onnx|executorch --quant fp32|8da4w --out DIR``
``vla-edge export --policy POLICY_DIR --backend onnx|executorch --quant fp32|8da4w --out DIR``

The manifest is format ``vla_edge.export.v2`` (:mod:`vla_edge.export.manifest`):
the stages declare their tensors, so the runners need no code of the
architecture; an older export is refused by them and is re-exported with this
command. ``--checkpoint bundled`` names the shipped model. ``--untrained-config YAML``
exports freshly initialised weights of a model config instead (for timing at
other input sizes; the manifest records ``source.trained = false``).
``--policy`` exports a third-party policy directory written by ``vla-edge
import``, with the exporter of its architecture (π0, π0.5:
:func:`vla_edge.export.pi0.export_policy_dir`; SmolVLA:
:func:`vla_edge.export.smolvla.export_policy_dir`).

A command front end, so it may reach every layer: it hands the export the
policy path of :mod:`vla_edge.runners.factory` and the calibration frames of
:mod:`vla_edge.sim.frames`, which the export layer itself does not import.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from vla_edge.config.models import MAX_FLOW_STEPS
from vla_edge.core.errors import ConfigError, VlaEdgeError
from vla_edge.export.manifest import BACKENDS, QUANTS

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
    parser.add_argument("--backend", choices=BACKENDS, required=True)
    parser.add_argument("--quant", choices=QUANTS, default="fp32")
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
        help="8da4w: frames that calibrate the int8 convolutions "
        "(default: pipeline.CALIBRATION_FRAMES; 0 keeps them fp32)",
    )
    parser.add_argument(
        "--calibration-data",
        type=Path,
        default=None,
        help="8da4w: take those frames from these demonstrations (HDF5 file or folder) "
        "instead of rendering them from the tabletop",
    )
    parser.add_argument(
        "--untrained-config",
        type=Path,
        default=None,
        help="export untrained weights of this model config (training YAML) instead",
    )
    parser.add_argument("--threads", type=int, default=2, help="torch threads while exporting")
    robot = parser.add_argument_group(
        "--policy with an eef_delta / eef_pose space: the robot's kinematics "
        "(default: the ones vla-edge import checked)"
    )
    robot.add_argument(
        "--robot-mjcf", help="the robot's MJCF / URDF ('tabletop': the package's arm)"
    )
    robot.add_argument("--ee-site", help="the end-effector site in --robot-mjcf")


def run(args: argparse.Namespace) -> int:
    """Export and print one line per stage."""
    import sys

    import torch

    from vla_edge.export.pipeline import CALIBRATION_FRAMES, export_policy
    from vla_edge.policy.model import VlaPolicy, load_checkpoint
    from vla_edge.runners.factory import resolve_policy_path
    from vla_edge.sim.frames import calibration_images

    torch.set_num_threads(max(1, int(args.threads)))
    if args.policy is not None:
        return _run_policy_dir(args)
    try:
        for flag, value in (("--robot-mjcf", args.robot_mjcf), ("--ee-site", args.ee_site)):
            if value is not None:
                raise ConfigError(f"{flag} is for --policy (a policy directory's kinematics)")
        checkpoint: Path | None
        if args.untrained_config is not None:
            from vla_edge.policy.config import load_train_file

            torch.manual_seed(0)
            policy = VlaPolicy(load_train_file(args.untrained_config).model)
            checkpoint = None
        else:
            checkpoint = resolve_policy_path(args.checkpoint or "bundled")
            policy = load_checkpoint(checkpoint)
        if args.flow_steps is not None:
            if not 1 <= args.flow_steps <= MAX_FLOW_STEPS:
                bound = f"expected 1 <= K <= {MAX_FLOW_STEPS}"
                raise ConfigError(f"--flow-steps = {args.flow_steps}, {bound}")
            policy.action_head.flow_steps = int(args.flow_steps)
        export_policy(
            policy,
            args.out,
            args.backend,
            args.quant,
            checkpoint=checkpoint,
            language_backend=args.language_backend,
            reuse_language_from=args.reuse_language_from,
            calibration_data=args.calibration_data,
            calibration_source=calibration_images,
            calibration_frames=(
                CALIBRATION_FRAMES if args.calibration_frames is None else args.calibration_frames
            ),
        )
    except VlaEdgeError as exc:
        print(f"vla-edge export: {exc}", file=sys.stderr)
        return 2
    return 0


POLICY_EXPORTERS = {
    "pi0": "vla_edge.export.pi0",
    "pi05": "vla_edge.export.pi0",
    "smolvla": "vla_edge.export.smolvla",
}
"""The module whose ``export_policy_dir`` exports each architecture's policy directory."""


def _run_policy_dir(args: argparse.Namespace) -> int:
    """``--policy DIR``: a π0 / π0.5 / SmolVLA policy directory's three programs and manifest."""
    import importlib
    import sys

    from vla_edge.archs.policy_dir import load_policy_dir

    bundled_only = {
        "--checkpoint": args.checkpoint,
        "--untrained-config": args.untrained_config,
        "--language-backend": args.language_backend,
        "--reuse-language-from": args.reuse_language_from,
        "--calibration-data": args.calibration_data,
    }
    given = [flag for flag, value in bundled_only.items() if value is not None]
    try:
        if given:
            raise ConfigError(f"--policy: {given[0]} is for the bundled model, not a policy dir")
        if args.flow_steps is not None and not 1 <= args.flow_steps <= MAX_FLOW_STEPS:
            raise ConfigError(
                f"--flow-steps = {args.flow_steps}, expected 1 <= K <= {MAX_FLOW_STEPS}"
            )
        policy = load_policy_dir(args.policy)
        architecture = policy.architecture
        if architecture not in POLICY_EXPORTERS:
            raise ConfigError(
                f"--policy {args.policy}: architecture = {architecture!r} has no exporter "
                f"(exported: {', '.join(POLICY_EXPORTERS)})"
            )
        export_policy_dir = importlib.import_module(
            POLICY_EXPORTERS[architecture]
        ).export_policy_dir
        mjcf, ee_site = _checked_kinematics(policy, args.robot_mjcf, args.ee_site)
        export_policy_dir(
            args.policy,
            args.out,
            args.backend,
            args.quant,
            flow_steps=args.flow_steps,
            robot_mjcf=mjcf,
            ee_site=ee_site,
        )
    except VlaEdgeError as exc:
        print(f"vla-edge export: {exc}", file=sys.stderr)
        return 2
    return 0


def _checked_kinematics(
    policy: PolicyDir, mjcf: str | None, ee_site: str | None
) -> tuple[str | Path, str]:
    """The robot model and site the export records, loaded as the runner will load them.

    ``--robot-mjcf PATH`` is kept absolute (``tabletop``: the package's arm, relative to the
    package root); left out, each is the import's (:meth:`PolicyDir.robot_model`). The
    kinematics of the manifest's ``eef_delta`` / ``eef_pose`` sections
    (:func:`vla_edge.export.pi0.manifest_spaces`) are built with the runner's own
    :func:`vla_edge.runners.exported.manifest_kinematics`, so a wrong model or site is
    named before anything exports.

    Raises:
        AssetNotFoundError: no such model file.
        ConfigError: MuJoCo cannot load it.
        ActionSpaceError: it lacks the site or an arm joint.
    """
    from vla_edge.archs.policy_dir import TABLETOP_ROBOT
    from vla_edge.export.pi0 import manifest_spaces
    from vla_edge.runners.exported import manifest_kinematics

    if mjcf is not None:
        mjcf = TABLETOP_ROBOT["mjcf"] if mjcf == "tabletop" else str(Path(mjcf).resolve())
    for field, section in manifest_spaces(policy, mjcf, ee_site).items():
        if "kinematics" in section:
            manifest_kinematics(section["kinematics"], f"{field}.kinematics")
    return policy.robot_model(mjcf, ee_site)
