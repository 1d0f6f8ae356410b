"""A third-party checkpoint → a policy directory for this robot (``vla-edge import``).

:func:`import_checkpoint` does the import (the command, ``vla-edge import CKPT --tokenizer
TOKENIZER --dt-action-s 0.1 --out DIR``, is :mod:`vla_edge.cli.import_policy`; ``--list``
prints the architectures and the layouts each reads, :mod:`vla_edge.archs.registry`).

``CKPT`` is openpi's converted PyTorch layout (π0, π0.5: ``model.safetensors``,
``config.json``, ``assets/<asset_id>/norm_stats.json``) or LeRobot's pretrained layout
(``config.json`` with ``"type": "pi0" | "pi05" | "smolvla"``, ``model.safetensors``, the
processors' statistics or older in-weights ones). The registry finds the architecture and
its ``read_checkpoint`` checks every key and shape from the safetensors header before a
tensor is read; then the tokenizer (against the embedding table: PaliGemma's SentencePiece
model, or SmolVLM2's Hugging Face tokenizer directory), the camera map, the action space
(against the robot's joints, with its kinematics for ``eef_delta``, and its units and width
against the checkpoint's action statistics) and the state space (``--state-space``:
``joint_position``, the robot's joints, or ``eef_pose``, openpi LIBERO's 8-D end-effector
pose, against the robot's kinematics and the checkpoint's state statistics) are checked,
and only then is the directory written (:mod:`vla_edge.archs.policy_dir`). Any bad input is
a named error and writes nothing.

The robot (:func:`default_robot`) comes from the package's parameter files
(``config/controller.yaml``: joint names and limits; ``config/sim.yaml``: cameras;
``sim/tabletop/tabletop.xml``, found by :func:`vla_edge.config.paths.scene_xml_path`:
kinematics) unless the caller says otherwise; :mod:`vla_edge.actions` checks the action and
state spaces against it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from vla_edge.actions.space import NORM_RANGES
from vla_edge.core.errors import ActionSpaceError, ConfigError, StateSpaceError

GRIPPER_JOINT = "gripper"
EE_SITE = "ee"
UNIT_REACH = {"rad": 2.0 * math.pi, "deg": 360.0}
"""The farthest a revolute joint's position goes, per unit (a full turn)."""
NORMALIZED_MARGIN = 1.25
"""How far past its normalised range a joint's action statistics may reach."""


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
    from vla_edge.config.paths import config_path, scene_xml_path

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


def check_state_space(
    section: Any, normalisation: dict[str, Any], robot: Robot, source: str, stats_file: str
) -> dict[str, Any]:
    """Validate a ``state_space`` section against the robot and the checkpoint; its plain form.

    ``eef_pose`` needs the robot's kinematics (the end-effector site, the arm joints: every
    joint but its ``gripper_joint``) and state statistics of exactly its 8 dimensions;
    ``joint_position``'s statistics are cut or padded to the joints, as before.

    Raises:
        StateSpaceError: malformed, not observable on the robot, or of another width than
            the checkpoint's state statistics.
    """
    from vla_edge.actions import Kinematics, StateAdapter, StateSpace

    space = StateSpace.from_dict(section, source=source)
    if space.kind == "joint_position":
        return space.to_dict()
    if robot.mjcf is None:
        raise StateSpaceError(
            f"{source}: kind {space.kind} needs the robot's kinematics: pass --robot-mjcf (an "
            "MJCF or URDF with the end-effector site --ee-site)"
        )
    if space.gripper_joint not in robot.joint_names:
        raise StateSpaceError(
            f"{source}: gripper_joint = {space.gripper_joint!r}: not a robot joint "
            f"{list(robot.joint_names)}; name it with --gripper-joint"
        )
    arm = [j for j in robot.joint_names if j != space.gripper_joint]
    try:
        kinematics = Kinematics.from_mjcf(robot.mjcf, arm, robot.ee_site)
        adapter = StateAdapter(space, robot.joint_names, kinematics)
    except ConfigError as exc:
        raise StateSpaceError(f"{source}: {exc}") from exc
    state = normalisation["state"]
    width = len(state["mean" if state["kind"] == "mean_std" else "q01"])
    if width != adapter.width:
        raise StateSpaceError(
            f"{source}: kind {space.kind} reads {adapter.width} dimensions "
            f"({', '.join(adapter.names)}), but the checkpoint's state statistics ({stats_file}) "
            f"have {width}: a checkpoint trained on another state; import it with "
            "--state-space joint_position"
        )
    return space.to_dict()


def robot_entry(mjcf: Path, ee_site: str) -> dict[str, str]:
    """``policy.yaml``'s ``robot``: the model and site the kinematics were checked against.

    The package's tabletop is kept relative to the package root (found wherever the package
    is installed); any other model as its absolute path.
    """
    from vla_edge.archs.policy_dir import TABLETOP_ROBOT
    from vla_edge.config.paths import scene_xml_path

    mjcf = Path(mjcf).resolve()
    tabletop = mjcf == scene_xml_path("tabletop").resolve()
    return {"mjcf": TABLETOP_ROBOT["mjcf"] if tabletop else str(mjcf), "ee_site": ee_site}


def load_action_space_file(path: Path) -> Any:
    """The ``action_space`` section of a YAML file."""
    from vla_edge.config.loader import load_yaml_file

    data = load_yaml_file(path)
    if "action_space" not in data:
        raise ActionSpaceError(f"{path}: no 'action_space' section (found: {sorted(data)})")
    return data["action_space"]


def check_action_units(
    space: dict[str, Any], normalisation: dict[str, Any], feature_dim: int | None, source: str
) -> None:
    """The action space against what the checkpoint says of its actions.

    * A dimension at or beyond the checkpoint's real action width (LeRobot's
      ``output_features.action``, else the width of its action statistics) is padding the
      model was never trained on.
    * ``joint_position`` units against the action statistics: a dimension whose values reach
      beyond a full turn cannot be a revolute joint in ``rad`` (LeRobot arms command degrees or
      a normalised range), nor beyond 360 in ``deg``, nor far outside its ``normalized``
      range. The reach is ``|mean| + std`` (mean/std) or ``max(|q01|, |q99|)`` (quantiles).

    Raises:
        ActionSpaceError: naming the dimension, its reach and the units to declare.
    """
    used = list(space.get("indices", []))
    gripper = (space.get("gripper") or {}).get("index")
    actions = normalisation["actions"]
    n_stats = len(actions["mean" if actions["kind"] == "mean_std" else "q01"])
    if feature_dim is not None:
        width, what = feature_dim, "real action dimensions (config.json output_features.action)"
    else:
        width, what = n_stats, "action statistics"
    beyond = [i for i in [*used, gripper] if i is not None and i >= width]
    if beyond:
        raise ActionSpaceError(
            f"{source}: dimensions {beyond} are beyond the checkpoint's {width} {what}; the "
            "rest is padding"
        )
    if space.get("kind") != "joint_position":
        return
    units = space.get("units")
    if units == "normalized":
        lo, hi = NORM_RANGES[space["norm_mode"]]
        bound, unit_name = max(abs(lo), abs(hi)) * NORMALIZED_MARGIN, f"normalized {lo:g}..{hi:g}"
    else:
        bound, unit_name = UNIT_REACH[units], units
    if actions["kind"] == "mean_std":
        reach = np.abs(np.asarray(actions["mean"])) + np.asarray(actions["std"])
    else:
        reach = np.maximum(np.abs(actions["q01"]), np.abs(actions["q99"]))
    for i in used:
        if i < reach.size and reach[i] > bound:
            hint = {
                "rad": "degrees or a normalised range: pass --action-space with units: deg, "
                "or units: normalized with its calibration",
                "deg": "a normalised range or another quantity: check --action-space",
                "normalized": "not this range: check norm_mode and units in --action-space",
            }[str(units)]
            raise ActionSpaceError(
                f"{source}: joint_position units {unit_name}, but the checkpoint's action "
                f"statistics reach {reach[i]:.4g} in dimension {i} (beyond {bound:.4g}); the "
                f"actions look like {hint}"
            )


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
    state_space: str | dict[str, Any] | None = None,
    force: bool = False,
) -> Any:
    """Check everything, then write the policy directory; returns the loaded ``PolicyDir``.

    The architecture comes from :func:`vla_edge.archs.registry.find` (``options.architecture``
    wins); its ``read_checkpoint`` checks the header and reads the statistics, its
    ``copy_weights`` writes the weights.

    Args:
        tokenizer: a SentencePiece model (π0, π0.5) or a Hugging Face tokenizer directory
            (SmolVLA), as the architecture's entry says.
        options: :class:`~vla_edge.archs.common.ImportOptions`.
        cameras: slot → robot camera (``None``: masked) overriding the defaults.
        action_space: a YAML file with an ``action_space`` section, or the section itself;
            ``None``: :func:`default_action_space`.
        state_space: a kind (``joint_position``, ``eef_pose``: its gripper joint is the
            robot's) or a ``state_space`` section; ``None``: ``joint_position``.
    """
    from vla_edge.archs import registry
    from vla_edge.archs.common import ImportOptions
    from vla_edge.archs.policy_tokenizer import (
        hf_tokenizer_entry,
        sha256_file,
        tokenizer_entry,
        tokenizer_files,
    )
    from vla_edge.archs.policy_write import camera_map, check_output_dir, write_policy_dir

    out, checkpoint, tokenizer = Path(out), Path(checkpoint), Path(tokenizer)
    options = options or ImportOptions()
    check_output_dir(out, force)
    if not (math.isfinite(dt_action_s) and dt_action_s > 0):
        raise ConfigError(f"--dt-action-s = {dt_action_s}: expected a finite number > 0")
    arch = registry.find(checkpoint, options.architecture)
    given = [name for name, value in vars(options).items() if value is not None]
    foreign = [name for name in given if name not in arch.options]
    if foreign:
        flags = ", ".join("--" + name.replace("_", "-") for name in foreign)
        raise ConfigError(f"{flags}: not read for {arch.name} ({arch.title}); leave them out")
    ckpt = arch.resolve("read_checkpoint")(
        checkpoint, replace(options, architecture=arch.name, tokenizer=str(tokenizer))
    )
    facts = arch.facts(ckpt.config)
    if arch.tokenizer == "huggingface":
        tok = hf_tokenizer_entry(tokenizer, facts.vocab_size, facts.max_token_len)
    else:
        tok = tokenizer_entry(tokenizer, facts.vocab_size, facts.max_token_len)
    slots = camera_map(facts.image_slots, robot.cameras, cameras)
    if action_space is None:
        section, source = default_action_space(facts.action_dim, robot), "default action_space"
    elif isinstance(action_space, dict):
        section, source = action_space, "action_space"
    else:
        section = load_action_space_file(Path(action_space))
        source = f"{action_space}: action_space"
    space = check_action_space(section, facts.action_dim, robot, source)
    check_action_units(space, ckpt.normalisation, ckpt.action_feature_dim, source)
    if isinstance(state_space, str) or state_space is None:
        kind = state_space or "joint_position"
        state_section: dict[str, Any] = {"kind": kind}
        if kind == "eef_pose" and robot.gripper_joint is not None:
            state_section["gripper_joint"] = robot.gripper_joint
        state_source = f"--state-space {kind}"
    else:
        state_section, state_source = state_space, "state_space"
    states = check_state_space(
        state_section, ckpt.normalisation, robot, state_source, str(ckpt.stats_file)
    )
    data = {
        "format": "vla_edge.policy.v1",
        "architecture": ckpt.architecture,
        "config": ckpt.config.model_dump(mode="json"),
        "chunk_horizon": facts.chunk_horizon,
        "dt_action_s": float(dt_action_s),
        "joint_names": list(robot.joint_names),
        "images": {
            "slots": slots,
            "height": facts.image_size,
            "width": facts.image_size,
            **facts.images,
        },
        "action_space": space,
        "state_space": states,
        **(
            {"robot": robot_entry(robot.mjcf, robot.ee_site)}
            if robot.mjcf is not None
            and (space["kind"] == "eef_delta" or states["kind"] == "eef_pose")
            else {}
        ),
        "normalisation": ckpt.normalisation,
        "tokenizer": tok,
        "prompt": facts.prompt,
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
    copy = arch.resolve("copy_weights")
    return write_policy_dir(
        out,
        data,
        lambda path, metadata: copy(ckpt, path, metadata),
        ckpt.weights_dtypes,
        tokenizer_files(tok, tokenizer),
        force=force,
    )
