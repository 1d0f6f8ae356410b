"""``vla-edge import``: a third-party checkpoint → a policy directory for this robot.

``vla-edge import CKPT --tokenizer TOKENIZER --dt-action-s 0.1 --out DIR``;
``vla-edge import --list`` prints the architectures and the layouts each reads
(:mod:`vla_edge.archs.registry`). The checks and the writing are
:func:`vla_edge.archs.importer.import_checkpoint`'s; the robot is the package's parameter
files' (:func:`~vla_edge.archs.importer.default_robot`) unless flags say otherwise.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vla_edge.archs.importer import EE_SITE, GRIPPER_JOINT, default_robot, import_checkpoint
from vla_edge.core.errors import VlaEdgeError


def _names(text: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in text.split(",") if n.strip())


def _camera(text: str) -> tuple[str, str | None]:
    slot, sep, camera = text.partition("=")
    if not sep or not slot:
        raise argparse.ArgumentTypeError(f"{text!r}: expected SLOT=CAMERA (or SLOT=none)")
    return slot, None if camera.strip().lower() in ("none", "null", "") else camera.strip()


def _indices(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(i) for i in _names(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: expected dimensions like 0,1,2") from exc


def _bool(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"{text!r}: expected true or false")
    return text.lower() == "true"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``vla-edge import``."""
    parser.add_argument(
        "checkpoint", type=Path, nargs="?", help="openpi or LeRobot checkpoint directory"
    )
    parser.add_argument(
        "--list",
        action="store_true",
        help="print the supported architectures and the layouts each reads, and exit",
    )
    parser.add_argument("--out", type=Path, help="policy directory to write (required)")
    parser.add_argument(
        "--tokenizer",
        type=Path,
        help="(required) π0/π0.5: PaliGemma's SentencePiece model (paligemma_tokenizer.model); "
        "SmolVLA: SmolVLM2's Hugging Face tokenizer directory (tokenizer.json); never fetched",
    )
    parser.add_argument(
        "--dt-action-s",
        type=float,
        help="(required) seconds between the chunk's steps (the control period the checkpoint "
        "was trained at)",
    )
    parser.add_argument(
        "--architecture",
        help="wins over LeRobot's type and openpi's directory name ('pi05' in it); see --list",
    )
    parser.add_argument("--asset-id", help="openpi: assets/<asset_id>/norm_stats.json")
    parser.add_argument(
        "--camera",
        type=_camera,
        action="append",
        default=[],
        metavar="SLOT=CAMERA",
        help="map a checkpoint image slot (openpi base_0_rgb, LeRobot observation.images.top) "
        "to a robot camera, or SLOT=none to mask it; repeatable",
    )
    parser.add_argument(
        "--action-space",
        type=Path,
        help="YAML file with an action_space section (units rad, deg, or normalized with a "
        "calibration); default: joint_position in rad",
    )
    parser.add_argument(
        "--state-space",
        choices=("joint_position", "eef_pose"),
        default="joint_position",
        help="what the checkpoint's state is: the robot's joint positions (default), or openpi "
        "LIBERO's 8-D end-effector pose (position 3, axis-angle 3, gripper finger qpos 2; "
        "computed from the joints with --robot-mjcf, --ee-site and --gripper-joint)",
    )
    parser.add_argument("--force", action="store_true", help="replace an existing --out")
    robot = parser.add_argument_group("the robot (default: the package's parameter files)")
    robot.add_argument("--controller-config", type=Path, help="controller.yaml (joints, limits)")
    robot.add_argument("--sim-config", type=Path, help="sim.yaml (cameras)")
    robot.add_argument("--joint-names", type=_names, help="comma-separated, controller order")
    robot.add_argument("--robot-cameras", type=_names, help="comma-separated camera names")
    robot.add_argument("--gripper-joint", default=GRIPPER_JOINT, help="the gripper joint's name")
    robot.add_argument(
        "--robot-mjcf",
        default="tabletop",
        help="MJCF/URDF with the end-effector site (eef_delta, eef_pose; recorded in the "
        "policy directory for the export); 'none': no kinematics",
    )
    robot.add_argument("--ee-site", default=EE_SITE, help="end-effector site in --robot-mjcf")
    sizes = parser.add_argument_group("what the checkpoint may not say")
    sizes.add_argument("--paligemma-variant", help="π0: gemma_2b, dummy, ...")
    sizes.add_argument("--expert-variant", help="π0: gemma_300m, dummy, ...")
    sizes.add_argument("--vision-heads", type=int, help="SigLIP / SmolVLM vision attention heads")
    sizes.add_argument("--text-heads", type=int, help="SmolVLA: SmolVLM text attention heads")
    sizes.add_argument("--action-horizon", type=int, help="steps per chunk")
    sizes.add_argument(
        "--embodiment",
        metavar="TAG",
        help="architectures with per-embodiment weights (GR00T): the embodiment tag to import",
    )
    sizes.add_argument(
        "--discrete-state-input",
        type=_bool,
        help="π0.5: the state goes into the prompt (openpi pi05_libero: false)",
    )
    sizes.add_argument(
        "--delta-actions",
        type=_indices,
        help="action dimensions predicted relative to the state, e.g. 0,1,2,3,4,5",
    )


def run(args: argparse.Namespace) -> int:
    """Import and print the policy directory's summary (``--list``: the architectures)."""
    from vla_edge.archs import registry
    from vla_edge.archs.common import ImportOptions

    if args.list:
        print(registry.listing())
        return 0
    missing = [
        flag
        for flag, value in (
            ("CHECKPOINT", args.checkpoint),
            ("--out", args.out),
            ("--tokenizer", args.tokenizer),
            ("--dt-action-s", args.dt_action_s),
        )
        if value is None
    ]
    if missing:
        print(f"vla-edge import: {', '.join(missing)} required (or --list)", file=sys.stderr)
        return 2
    try:
        mjcf = None if str(args.robot_mjcf).lower() == "none" else args.robot_mjcf
        robot = default_robot(
            controller_yaml=args.controller_config,
            sim_yaml=args.sim_config,
            joint_names=args.joint_names,
            cameras=args.robot_cameras,
            gripper_joint=args.gripper_joint,
            mjcf=mjcf if mjcf in (None, "tabletop") else Path(mjcf),
            ee_site=args.ee_site,
        )
        options = ImportOptions(
            architecture=args.architecture,
            asset_id=args.asset_id,
            paligemma_variant=args.paligemma_variant,
            expert_variant=args.expert_variant,
            vision_heads=args.vision_heads,
            text_heads=args.text_heads,
            action_horizon=args.action_horizon,
            discrete_state_input=args.discrete_state_input,
            delta_actions=args.delta_actions,
            embodiment=args.embodiment,
        )
        policy = import_checkpoint(
            args.checkpoint,
            args.out,
            args.tokenizer,
            args.dt_action_s,
            robot,
            options=options,
            cameras=dict(args.camera),
            action_space=args.action_space,
            state_space=args.state_space,
            force=args.force,
        )
    except VlaEdgeError as exc:
        print(f"vla-edge import: {exc}", file=sys.stderr)
        return 2
    norm = policy.normalisation
    space = policy.action_space
    print(f"{policy.path}: {policy.architecture} from {policy.source['layout']} layout")
    print(f"  cameras: {policy.cameras}")
    print(f"  action space: {space['kind']} ({space.get('units', '-')}) on dims {space['indices']}")
    print(f"  state space: {policy.state_space['kind']}")
    if policy.robot is not None:
        print(f"  kinematics: {policy.robot['mjcf']} (site {policy.robot['ee_site']})")
    print(f"  normalisation: {norm['kind']} (epsilon {norm['epsilon']:g})")
    print(f"  chunk: {policy.chunk_horizon} steps every {policy.dt_action_s} s")
    return 0
