"""``vla-edge import``: a π0 / π0.5 checkpoint → a policy directory for this robot.

``vla-edge import CKPT --tokenizer paligemma_tokenizer.model --dt-action-s 0.1 --out DIR``

``CKPT`` is openpi's converted PyTorch layout (``model.safetensors``, ``config.json``,
``assets/<asset_id>/norm_stats.json``) or LeRobot's pretrained layout (``config.json`` with
``"type": "pi0" | "pi05"``, ``model.safetensors``, the processors' statistics). Every key and
shape is checked from the safetensors header before a tensor is read
(:mod:`vla_edge.archs.pi0.checkpoint`); then the camera map, the action space (against the
robot's joints, with its kinematics for ``eef_delta``) and the tokenizer (against the
embedding table) are checked, and only then is the directory written
(:mod:`vla_edge.archs.policy_dir`). Any bad input is a named error and writes nothing.

The robot comes from the package's parameter files (``config/controller.yaml``: joint names
and limits; ``config/sim.yaml``: cameras; ``sim/tabletop/tabletop.xml``: kinematics) unless
flags say otherwise. A command front end, so it may use :mod:`vla_edge.actions` and the sim's
asset paths, which the architecture modules do not import.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vla_edge.core.errors import ActionSpaceError, ConfigError, VlaEdgeError

GRIPPER_JOINT = "gripper"
EE_SITE = "ee"


@dataclass(frozen=True)
class Robot:
    """What the import checks a policy against."""

    joint_names: tuple[str, ...]
    cameras: tuple[str, ...]
    gripper_joint: str | None = GRIPPER_JOINT
    gripper_range_m: tuple[float, float] | None = None
    """The gripper's position limits (the default action space maps onto them)."""
    mjcf: Path | None = None
    """The robot's MJCF / URDF (kinematics for ``eef_delta``); ``None``: no kinematics."""
    ee_site: str = EE_SITE


def default_robot(
    controller_yaml: Path | None = None,
    sim_yaml: Path | None = None,
    joint_names: tuple[str, ...] | None = None,
    cameras: tuple[str, ...] | None = None,
    gripper_joint: str | None = GRIPPER_JOINT,
    mjcf: Path | None | str = "tabletop",
    ee_site: str = EE_SITE,
) -> Robot:
    """The robot from the parameter files, each part overridable."""
    from vla_edge.config.loader import load_node_params
    from vla_edge.config.models import ControllerConfig, SimConfig
    from vla_edge.config.paths import config_path

    controller = load_node_params(
        controller_yaml or config_path("controller.yaml"), "controller_node", ControllerConfig
    )
    joints = tuple(joint_names or controller.joint_names)
    gripper_range = None
    if gripper_joint in joints and gripper_joint in controller.joint_names:
        i = list(controller.joint_names).index(gripper_joint)
        if controller.position_min and controller.position_max:
            gripper_range = (float(controller.position_min[i]), float(controller.position_max[i]))
    if cameras is None:
        sim = load_node_params(sim_yaml or config_path("sim.yaml"), "sim_node", SimConfig)
        cameras = tuple(sim.cameras)
    if mjcf == "tabletop":
        from vla_edge.sim.paths import scene_xml_path

        mjcf = scene_xml_path("tabletop")
    return Robot(
        joint_names=joints,
        cameras=tuple(cameras),
        gripper_joint=gripper_joint,
        gripper_range_m=gripper_range,
        mjcf=None if mjcf is None else Path(mjcf),
        ee_site=ee_site,
    )


def default_action_space(action_dim: int, robot: Robot) -> dict[str, Any]:
    """``joint_position`` in rad on the first dimensions: the arm joints, then the gripper.

    The gripper dimension is the gripper's position in metres (an identity mapping onto
    its limits).
    """
    arm = [j for j in robot.joint_names if j != robot.gripper_joint]
    space: dict[str, Any] = {
        "kind": "joint_position",
        "policy_dim": action_dim,
        "indices": list(range(len(arm))),
        "units": "rad",
    }
    if robot.gripper_joint in robot.joint_names:
        if robot.gripper_range_m is None:
            raise ActionSpaceError(
                f"the default action space maps dimension {len(arm)} onto the gripper's "
                f"position range, unknown for {robot.gripper_joint!r}: pass --action-space FILE"
            )
        lo, hi = robot.gripper_range_m
        space["gripper"] = {
            "index": len(arm),
            "policy_range": [lo, hi],
            "position_range_m": [lo, hi],
        }
    return space


def check_action_space(section: Any, action_dim: int, robot: Robot, source: str) -> dict[str, Any]:
    """Validate an ``action_space`` section against the model and the robot; its plain form.

    Raises:
        ActionSpaceError: malformed, wider than the model's output, or not executable by the
            robot (more dimensions than joints, ``eef_delta`` without kinematics, ...).
    """
    from vla_edge.actions import ActionAdapter, ActionSpace, Kinematics

    space = ActionSpace.from_dict(section, source=source)
    if space.policy_dim > action_dim:
        raise ActionSpaceError(
            f"{source}: policy_dim = {space.policy_dim} exceeds the model's action_dim = "
            f"{action_dim}"
        )
    kinematics = None
    if space.kind == "eef_delta" and robot.mjcf is not None:
        arm = [j for j in robot.joint_names if j != robot.gripper_joint]
        kinematics = Kinematics.from_mjcf(robot.mjcf, arm, robot.ee_site)
    ActionAdapter(space, robot.joint_names, kinematics, gripper_joint=robot.gripper_joint)
    return space.to_dict()


def load_action_space_file(path: Path) -> Any:
    """The ``action_space`` section of a YAML file."""
    from vla_edge.config.loader import load_yaml_file

    data = load_yaml_file(path)
    if "action_space" not in data:
        raise ActionSpaceError(f"{path}: no 'action_space' section (found: {sorted(data)})")
    return data["action_space"]


def import_checkpoint(
    checkpoint: str | Path,
    out: str | Path,
    tokenizer: str | Path,
    dt_action_s: float,
    robot: Robot,
    *,
    options: Any = None,
    cameras: dict[str, str | None] | None = None,
    action_space: Path | dict[str, Any] | None = None,
    force: bool = False,
) -> Any:
    """Check everything, then write the policy directory; returns the loaded ``PolicyDir``.

    Args:
        options: :class:`~vla_edge.archs.pi0.checkpoint.ImportOptions`.
        cameras: slot → robot camera (``None``: masked) overriding the defaults.
        action_space: a YAML file with an ``action_space`` section, or the section itself;
            ``None``: :func:`default_action_space`.
    """
    from vla_edge.archs.pi0.checkpoint import ImportOptions, copy_weights, read_checkpoint
    from vla_edge.archs.policy_dir import (
        camera_map,
        check_output_dir,
        sha256_file,
        tokenizer_entry,
        write_policy_dir,
    )

    out, checkpoint, tokenizer = Path(out), Path(checkpoint), Path(tokenizer)
    check_output_dir(out, force)
    if not (math.isfinite(dt_action_s) and dt_action_s > 0):
        raise ConfigError(f"--dt-action-s = {dt_action_s}: expected a finite number > 0")
    ckpt = read_checkpoint(checkpoint, options or ImportOptions())
    config = ckpt.config
    tok = tokenizer_entry(tokenizer, config.vocab_size, config.max_token_len)
    slots = camera_map(config.image_slots, robot.cameras, cameras)
    if action_space is None:
        section, source = default_action_space(config.action_dim, robot), "default action_space"
    elif isinstance(action_space, dict):
        section, source = action_space, "action_space"
    else:
        section = load_action_space_file(Path(action_space))
        source = f"{action_space}: action_space"
    space = check_action_space(section, config.action_dim, robot, source)
    data = {
        "format": "vla_edge.policy.v1",
        "architecture": ckpt.architecture,
        "config": config.model_dump(mode="json"),
        "chunk_horizon": config.action_horizon,
        "dt_action_s": float(dt_action_s),
        "joint_names": list(robot.joint_names),
        "images": {
            "slots": slots,
            "height": config.vision.image_size,
            "width": config.vision.image_size,
            "pixel_range": [-1.0, 1.0],
            "resize": "pad",
        },
        "action_space": space,
        "normalisation": ckpt.normalisation,
        "tokenizer": tok,
        "prompt": {"format": "pi05_state", "state_bins": 256}
        if config.state_in_prompt
        else {"format": "pi0"},
        "source": {
            "layout": ckpt.layout,
            "path": str(checkpoint.resolve()),
            "weights_sha256": sha256_file(ckpt.weights_path),
            "weights_dtypes": list(ckpt.weights_dtypes),
            "asset_id": ckpt.asset_id,
            "stats_file": ckpt.stats_file,
            "config_json": ckpt.config_json,
        },
    }
    return write_policy_dir(
        out,
        data,
        lambda path, metadata: copy_weights(ckpt, path, metadata),
        ckpt.weights_dtypes,
        tokenizer,
        force=force,
    )


# -- the command -------------------------------------------------------------------------


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
    parser.add_argument("checkpoint", type=Path, help="openpi or LeRobot checkpoint directory")
    parser.add_argument("--out", type=Path, required=True, help="policy directory to write")
    parser.add_argument(
        "--tokenizer",
        type=Path,
        required=True,
        help="PaliGemma's SentencePiece model (paligemma_tokenizer.model); never fetched",
    )
    parser.add_argument(
        "--dt-action-s",
        type=float,
        required=True,
        help="seconds between the chunk's steps (the control period the checkpoint was trained at)",
    )
    parser.add_argument(
        "--architecture",
        choices=("pi0", "pi05"),
        help="wins over LeRobot's type and openpi's directory name ('pi05' in it)",
    )
    parser.add_argument("--asset-id", help="openpi: assets/<asset_id>/norm_stats.json")
    parser.add_argument(
        "--camera",
        type=_camera,
        action="append",
        default=[],
        metavar="SLOT=CAMERA",
        help="map a checkpoint image slot to a robot camera, or SLOT=none to mask it; repeatable",
    )
    parser.add_argument("--action-space", type=Path, help="YAML file with an action_space section")
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
        help="MJCF/URDF with the end-effector site (eef_delta); 'none': no kinematics",
    )
    robot.add_argument("--ee-site", default=EE_SITE, help="end-effector site in --robot-mjcf")
    sizes = parser.add_argument_group("what the checkpoint may not say")
    sizes.add_argument("--paligemma-variant", help="gemma_2b, dummy, ...")
    sizes.add_argument("--expert-variant", help="gemma_300m, dummy, ...")
    sizes.add_argument("--vision-heads", type=int, help="SigLIP attention heads")
    sizes.add_argument("--action-horizon", type=int, help="steps per chunk")
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
    """Import and print the policy directory's summary."""
    from vla_edge.archs.pi0.checkpoint import ImportOptions

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
            action_horizon=args.action_horizon,
            discrete_state_input=args.discrete_state_input,
            delta_actions=args.delta_actions,
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
            force=args.force,
        )
    except VlaEdgeError as exc:
        print(f"vla-edge import: {exc}", file=sys.stderr)
        return 2
    norm = policy.normalisation
    print(f"{policy.path}: {policy.architecture} from {policy.source['layout']} layout")
    print(f"  cameras: {policy.cameras}")
    print(f"  action space: {policy.action_space['kind']} on dims {policy.action_space['indices']}")
    print(f"  normalisation: {norm['kind']} (epsilon {norm['epsilon']:g})")
    print(f"  chunk: {policy.chunk_horizon} steps every {policy.dt_action_s} s")
    return 0
