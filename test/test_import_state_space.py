"""``vla-edge import --state-space eef_pose``: a tiny π0 checkpoint with openpi LIBERO's
widths (8-D state, 7-D action statistics) becomes a policy directory that records the state
space and keeps each part of the normalisation at its own width; statistics of another
width, or a robot without the kinematics, are named errors that write nothing.

The checkpoint is the tiny random π0 of ``test_import_pi0`` (its statistics have exactly
LIBERO's widths); only the import runs, no model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from test_import_pi0 import randomised, run_import, tiny, train_tokenizer, write_openpi

from vla_edge.archs.common import ImportOptions
from vla_edge.archs.importer import Robot, default_robot, import_checkpoint
from vla_edge.archs.policy_dir import POLICY_FILE, load_policy_dir
from vla_edge.core.errors import ActionSpaceError, StateSpaceError

STATS = "assets/trossen/norm_stats.json"
LIBERO_ACTIONS = {
    "kind": "eef_delta",
    "policy_dim": 32,
    "indices": [0, 1, 2, 3, 4, 5],
    "frame": "base",
    "rotation": "axis_angle",
    "gripper": {"index": 6, "policy_range": [-1.0, 1.0], "position_range_m": [0.04, 0.0]},
}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("import_state")
    torch.manual_seed(0)
    ckpt = write_openpi(root / "pi0_libero_tiny", randomised(tiny(False)))
    space = root / "libero_actions.yaml"
    space.write_text(yaml.safe_dump({"action_space": LIBERO_ACTIONS}))
    return {
        "ckpt": ckpt,
        "tokenizer": train_tokenizer(root / "tok", 64),
        "robot": default_robot(),
        "action_space": space,
    }


def import_eef_pose(world, ckpt: Path, out: Path, robot: Robot | None = None, **kwargs):
    kwargs.setdefault("action_space", LIBERO_ACTIONS)
    return import_checkpoint(
        ckpt,
        out,
        world["tokenizer"],
        0.1,
        robot or world["robot"],
        options=ImportOptions(vision_heads=4),
        state_space="eef_pose",
        **kwargs,
    )


def with_stats(src: Path, dst: Path, part: str, width: int) -> Path:
    """A copy of the checkpoint whose ``part`` statistics have ``width`` dimensions."""
    shutil.copytree(src, dst)
    data = json.loads((dst / STATS).read_text())
    data["norm_stats"][part] = {
        key: (values * 3)[:width] for key, values in data["norm_stats"][part].items()
    }
    (dst / STATS).write_text(json.dumps(data))
    return dst


def test_eef_pose_import_records_the_state_space_and_keeps_each_width(
    world, tmp_path, capsys
) -> None:
    out = tmp_path / "policy"
    flags = ["--state-space", "eef_pose", "--action-space", str(world["action_space"])]
    assert run_import(world, world["ckpt"], out, *flags) == 0
    assert "state space: eef_pose" in capsys.readouterr().out
    policy = load_policy_dir(out, verify_sha256=True)
    assert policy.state_space == {"kind": "eef_pose"}
    assert yaml.safe_load((out / POLICY_FILE).read_text())["state_space"] == {"kind": "eef_pose"}
    # the kinematics it was checked against: the package's arm, relative to the package root
    assert policy.robot == {"mjcf": "sim/tabletop/tabletop.xml", "ee_site": "ee"}
    assert policy.action_space["kind"] == "eef_delta"
    # the manifest's section: the 8 state statistics and the 7 action ones, as in the file
    stats = json.loads((world["ckpt"] / STATS).read_text())["norm_stats"]
    section = policy.manifest_normalisation()
    assert (policy.state_width, policy.action_width) == (8, 7)
    assert section["state"] == {k: stats["state"][k] for k in ("mean", "std")}
    assert section["actions"] == {k: stats["actions"][k] for k in ("mean", "std")}
    assert section["delta_actions"] == [False] * 7


@pytest.mark.parametrize("width", [7, 14])
def test_state_statistics_of_another_width_are_refused_by_name_writing_nothing(
    world, tmp_path, capsys, width
) -> None:
    ckpt = with_stats(world["ckpt"], tmp_path / "ckpt", "state", width)
    out = tmp_path / "policy"
    with pytest.raises(StateSpaceError, match=rf"reads 8 dimensions .* have {width}") as info:
        import_eef_pose(world, ckpt, out)
    message = str(info.value)
    assert "--state-space eef_pose" in message and STATS in message
    assert "eef_x_m" in message and "finger_right_m" in message
    assert not out.exists()
    flags = ["--state-space", "eef_pose", "--action-space", str(world["action_space"])]
    assert run_import(world, ckpt, out, *flags) == 2
    assert "vla-edge import: --state-space eef_pose: kind eef_pose reads 8" in (
        capsys.readouterr().err
    )
    assert not out.exists()


def test_action_statistics_narrower_than_the_action_space_are_refused(world, tmp_path) -> None:
    ckpt = with_stats(world["ckpt"], tmp_path / "ckpt", "actions", 6)
    out = tmp_path / "policy"
    with pytest.raises(ActionSpaceError, match=r"\[6\] are beyond the checkpoint's 6 action"):
        import_eef_pose(world, ckpt, out)
    assert not out.exists()


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"mjcf": None}, "needs the robot's kinematics: pass --robot-mjcf"),
        ({"ee_site": "tool0"}, r"site = 'tool0': not in the robot model"),
        ({"gripper_joint": "hand"}, r"gripper_joint = 'hand': not a robot joint"),
    ],
    ids=["no-mjcf", "no-such-site", "no-such-gripper"],
)
def test_eef_pose_on_a_robot_without_its_kinematics_is_refused(
    world, tmp_path, change, words
) -> None:
    robot = Robot(**{**world["robot"].__dict__, **change})
    out = tmp_path / "policy"
    with pytest.raises(StateSpaceError, match=words):  # joint actions: only the state needs it
        import_eef_pose(world, world["ckpt"], out, robot, action_space=None)
    assert not out.exists()


def own_robot_model(root: Path) -> Path:
    """The tabletop arm's MJCF outside the package, its end-effector site named ``tool0``."""
    from vla_edge.config.paths import scene_xml_path

    text = scene_xml_path("tabletop").read_text()
    assert text.count('site name="ee"') == 1
    root.mkdir(parents=True, exist_ok=True)
    (root / "my_arm.xml").write_text(text.replace('site name="ee"', 'site name="tool0"'))
    return root / "my_arm.xml"


def test_the_robot_model_the_import_checked_is_the_one_the_export_names(
    world, tmp_path, capsys, monkeypatch
) -> None:
    """``import --robot-mjcf M --ee-site S`` records M (absolute) and S; ``export --policy``
    writes them into the manifest's kinematics, where the runner builds them."""
    from vla_edge.cli import main
    from vla_edge.export.manifest import load_manifest
    from vla_edge.runners.exported import ExportedRunner

    model = own_robot_model(tmp_path / "robot")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "policy"
    flags = ["--state-space", "eef_pose", "--robot-mjcf", "robot/my_arm.xml", "--ee-site", "tool0"]
    assert run_import(world, world["ckpt"], out, *flags) == 0
    assert f"kinematics: {model} (site tool0)" in capsys.readouterr().out
    policy = load_policy_dir(out)
    assert policy.robot == {"mjcf": str(model), "ee_site": "tool0"}
    export = tmp_path / "export"
    args = ["export", "--policy", str(out), "--backend", "onnx", "--out", str(export)]
    assert main([*args, "--flow-steps", "2"]) == 0
    kinematics = load_manifest(export).data["state_space"]["kinematics"]
    assert (kinematics["mjcf"], kinematics["site"]) == (str(model), "tool0")
    runner = ExportedRunner(export, threads=1)
    assert runner.native_spec.state_dim == 8


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--ee-site", "tool0"], "site = 'tool0': not in the robot model"),
        (["--robot-mjcf", "no_such_arm.xml"], "no_such_arm.xml"),
    ],
    ids=["site-not-in-the-model", "no-such-model"],
)
def test_export_names_a_wrong_robot_model_before_exporting(
    world, tmp_path, capsys, flags, words
) -> None:
    from vla_edge.cli import main

    out = tmp_path / "policy"
    assert run_import(world, world["ckpt"], out, "--state-space", "eef_pose") == 0
    export = tmp_path / "export"
    args = ["export", "--policy", str(out), "--backend", "onnx", "--out", str(export), *flags]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("vla-edge export: ") and words in err
    assert not export.exists()


def test_the_kinematics_flags_are_refused_for_the_bundled_model(tmp_path, capsys) -> None:
    from vla_edge.cli import main

    args = ["export", "--backend", "onnx", "--out", str(tmp_path / "e"), "--ee-site", "ee"]
    assert main(args) == 2
    assert "--ee-site is for --policy" in capsys.readouterr().err
    assert not (tmp_path / "e").exists()


def test_a_policy_dir_without_a_state_space_reads_the_joints(world, tmp_path) -> None:
    """Policy directories written before ``state_space`` existed keep working."""
    out = tmp_path / "policy"
    assert run_import(world, world["ckpt"], out) == 0
    data = yaml.safe_load((out / POLICY_FILE).read_text())
    assert data.pop("state_space") == {"kind": "joint_position"}
    (out / POLICY_FILE).write_text(yaml.safe_dump(data, sort_keys=False))
    policy = load_policy_dir(out)
    assert policy.state_space == {"kind": "joint_position"}
    section = policy.manifest_normalisation()
    stats = json.loads((world["ckpt"] / STATS).read_text())["norm_stats"]
    n = len(policy.joint_names)
    assert section["state"]["mean"] == stats["state"]["mean"][:n]  # cut to the 7 joints
