"""A π0 policy directory in the robot's loop, with each action space.

A tiny random-weight π0 checkpoint is imported (``vla-edge import``) with each
action space — ``joint_position`` (rad), ``joint_delta``, ``joint_velocity``,
``eef_delta`` on the tabletop arm's kinematics — exported to ONNX fp32
(``vla-edge export --policy``) and run by the generic ONNX runner in the
simulated loop (virtual time, the real controller and safety cores). The
normalisation statistics keep the raw actions small: positions near the arm's
home pose, small deltas, velocities and end-effector deltas. Every chunk must
reach the controller, none may be refused, and the safety supervisor must see
no command out of its limits.

The same checkpoint imported as openpi's LIBERO π0 is (``--state-space eef_pose``:
8-D end-effector state statistics, ``eef_delta`` actions with 7 statistics) runs
in the loop too, its state made from the arm's joints by forward kinematics, and
is served to openpi's own client sending exactly the LIBERO example's request,
which gets the policy's own 7-D actions back.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from openpi_client.websocket_client_policy import WebsocketClientPolicy
from test_export_pi0 import train_tokenizer, write_openpi_checkpoint
from test_openpi_torch_runner import _libero_camera

from vla_edge.actions import Kinematics, StateAdapter, StateSpace
from vla_edge.archs.common import ImportOptions
from vla_edge.archs.importer import default_robot, import_checkpoint
from vla_edge.archs.pi0 import Pi0Config, Pi0Model
from vla_edge.archs.pi0.config import GemmaSize
from vla_edge.config.models import ControllerConfig, SafetyConfig
from vla_edge.config.paths import scene_xml_path
from vla_edge.core.errors import ActionSpaceError, NonFiniteChunkError, RemoteRunnerError
from vla_edge.core.types import Observation
from vla_edge.export.architecture import TABLETOP_MJCF, export_policy_dir, manifest_action_space
from vla_edge.export.manifest import MANIFEST_NAME, load_manifest
from vla_edge.runners.exported import ExportedRunner
from vla_edge.runners.factory import make_runner
from vla_edge.runners.onnx_runner import OnnxRunner
from vla_edge.runners.openpi_server import PolicyServer
from vla_edge.runners.remote import RemoteRunner
from vla_edge.sim.env import JOINT_NAMES, TabletopEnv
from vla_edge.sim.evaluator import EvalSettings, run_episode
from vla_edge.sim.ik import ARM_JOINTS
from vla_edge.sim.tasks import HOME_ARM_QPOS_RAD, get_task

pytestmark = [
    pytest.mark.slow,
    # openpi_client connects without websockets' context manager; that is its business
    pytest.mark.filterwarnings("ignore:connect\\(\\) must be used:DeprecationWarning"),
]

H, K, DT = 10, 2, 0.1
GRIPPER_OPEN_M = 0.04
HOME = [*HOME_ARM_QPOS_RAD.tolist(), GRIPPER_OPEN_M]
N = len(HOME)
BUDGET_S = 2.0

# per action space: its section and the action statistics (mean, std) of its N dimensions
SPACES: dict[str, tuple[dict[str, Any], list[float], list[float]]] = {
    "joint_position": (
        {
            "kind": "joint_position",
            "policy_dim": 32,
            "indices": [0, 1, 2, 3, 4, 5],
            "units": "rad",
            "gripper": {"index": 6, "policy_range": [0.0, 0.04], "position_range_m": [0.0, 0.04]},
        },
        HOME,
        [0.02] * 6 + [0.005],
    ),
    "joint_delta": (
        {
            "kind": "joint_delta",
            "policy_dim": 32,
            "indices": [0, 1, 2, 3, 4, 5],
            "units": "rad",
        },
        [0.0] * N,
        [0.02] * N,
    ),
    "joint_velocity": (
        {
            "kind": "joint_velocity",
            "policy_dim": 32,
            "indices": [0, 1, 2, 3, 4, 5],
            "units": "rad",
        },
        [0.0] * N,
        [0.05] * N,
    ),
    "eef_delta": (
        {
            "kind": "eef_delta",
            "policy_dim": 32,
            "indices": [0, 1, 2, 3, 4, 5],
            "frame": "base",
            "rotation": "axis_angle",
            "input_limit": 1.0,
            "position_scale_m": 0.01,
            "rotation_scale_rad": 0.02,
            "gripper": {"index": 6, "policy_range": [-1.0, 1.0], "position_range_m": [0.04, 0.0]},
        },
        [0.0] * N,
        [0.2] * N,
    ),
}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny π0 in openpi's layout (weights ~ N(0, 0.05²)) and a PaliGemma-like tokenizer."""
    root = tmp_path_factory.mktemp("pi0_loop")
    tokenizer = train_tokenizer(root / "tok" / "paligemma_tiny.model")
    torch.manual_seed(0)
    config = Pi0Config.tiny(expert=GemmaSize.dummy(), action_horizon=H, max_token_len=48)
    model = Pi0Model(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.05)
    return write_openpi_checkpoint(root / "ckpt", model), tokenizer


def set_norm_stats(ckpt: Path, mean: list[float], std: list[float]) -> None:
    """The checkpoint's statistics: the state about the home pose, the actions as given."""
    stats = {
        "state": {"mean": HOME, "std": [0.5] * N},
        "actions": {"mean": mean, "std": std},
    }
    (ckpt / "assets" / "trossen" / "norm_stats.json").write_text(json.dumps({"norm_stats": stats}))


@pytest.fixture(scope="module")
def exports(checkpoint, tmp_path_factory) -> dict[str, Path]:
    """``joint_position`` imported and exported to ONNX fp32; the other spaces are copies of
    that export whose manifest declares their action space and statistics (the programs do
    not depend on them: exporting them again would only take time)."""
    ckpt, tokenizer = checkpoint
    root = tmp_path_factory.mktemp("exports")
    section, mean, std = SPACES["joint_position"]
    set_norm_stats(ckpt, mean, std)
    policy = root / "policy"
    import_checkpoint(
        ckpt,
        policy,
        tokenizer,
        DT,
        default_robot(),
        options=ImportOptions(vision_heads=4),
        action_space=section,
    )
    first = root / "export_joint_position"
    export_policy_dir(policy, first, "onnx", "fp32", flow_steps=K, log=lambda _m: None)
    out = {"joint_position": first}
    joints = load_manifest(first).data["joint_names"]
    for kind, (section, mean, std) in SPACES.items():
        if kind != "joint_position":
            out[kind] = copy_with_manifest(
                first,
                root / f"export_{kind}",
                action_space=manifest_action_space(section, joints),
                actions={"mean": mean, "std": std},
            )
    return out


def copy_with_manifest(
    src: Path,
    dst: Path,
    action_space: dict[str, Any],
    actions: dict[str, list[float]] | None = None,
) -> Path:
    """A copy of an export whose manifest declares ``action_space`` (and action statistics)."""
    shutil.copytree(src, dst)
    data = json.loads((dst / MANIFEST_NAME).read_text())
    data["action_space"] = action_space
    if actions is not None:
        data["normalisation"]["actions"] = actions
    (dst / MANIFEST_NAME).write_text(json.dumps(data))
    return dst


@pytest.mark.parametrize("kind", list(SPACES))
def test_each_action_space_runs_in_the_loop_without_refusals_or_limit_violations(
    kind, exports, configs
) -> None:
    manifest = load_manifest(exports[kind])
    assert manifest.data["action_space"]["kind"] == kind
    if kind == "eef_delta":
        assert manifest.data["action_space"]["kinematics"] == TABLETOP_KINEMATICS
    assert_runs_in_the_loop(exports[kind], configs)


TABLETOP_KINEMATICS = {"mjcf": TABLETOP_MJCF, "site": "ee", "joints": list(ARM_JOINTS)}


def assert_runs_in_the_loop(export: Path, configs: tuple[ControllerConfig, SafetyConfig]) -> None:
    """An episode in virtual time: at least 3 chunks, none refused, nothing out of limits."""
    runner = OnnxRunner(export, threads=1)
    assert runner.action_adapter is not None and not runner.spec.supports_prefix
    # 64x64 cameras fitted to the model's 224x224 (the inference node accepts them);
    # the loop draws the flow noise at the model's padded width
    assert runner.spec.fits_images and runner.spec.noise_dim == runner.model_action_dim == 32
    env = TabletopEnv(image_height=64, image_width=64)
    task = dataclasses.replace(get_task("lift_green_block"), budget_s=BUDGET_S)
    result = run_episode(
        env,
        runner,
        task,
        0,
        EvalSettings(),
        *configs,
        np.random.default_rng(0),
    )
    runner.close()
    assert result.chunks >= 3, result
    assert result.rejected == 0, result  # controller rejections + runner refusals
    assert result.controller_counters["rejected"] == 0, result.controller_counters
    safety = result.safety_counters
    assert safety.get("rejected", 0) == 0, safety
    assert safety.get("rejected_out_of_limits", 0) == 0, safety
    assert safety.get("estops", 0) == 0, safety


# -- openpi's LIBERO π0: 8-D end-effector state in, 7-D policy actions out --------------------

LIBERO_STATE_STD = [0.05] * 3 + [0.2] * 3 + [0.005] * 2
"""Spread of the state statistics: 5 cm, 0.2 rad, 5 mm about the home pose's state."""


def eef_pose_of(joints: list[float]) -> np.ndarray:
    """openpi LIBERO's 8-D state of the tabletop arm at ``joints``."""
    kinematics = Kinematics.from_mjcf(scene_xml_path("tabletop"), ARM_JOINTS, "ee")
    return StateAdapter(StateSpace(kind="eef_pose"), JOINT_NAMES, kinematics).policy_state(joints)


@pytest.fixture(scope="module")
def libero_export(checkpoint, tmp_path_factory) -> Path:
    """The tiny π0 with LIBERO's widths (8 state, 7 action statistics), imported with
    ``--state-space eef_pose`` and ``eef_delta`` actions, exported to ONNX fp32."""
    ckpt, tokenizer = checkpoint
    root = tmp_path_factory.mktemp("libero")
    libero = shutil.copytree(ckpt, root / "ckpt")
    stats = {
        "state": {"mean": eef_pose_of(HOME).tolist(), "std": LIBERO_STATE_STD},
        "actions": {"mean": [0.0] * 7, "std": [0.2] * 7},
    }
    (libero / "assets" / "trossen" / "norm_stats.json").write_text(
        json.dumps({"norm_stats": stats})
    )
    policy = root / "policy"
    import_checkpoint(
        libero,
        policy,
        tokenizer,
        DT,
        default_robot(),
        options=ImportOptions(vision_heads=4),
        action_space=SPACES["eef_delta"][0],
        state_space="eef_pose",
    )
    out = root / "export"
    export_policy_dir(policy, out, "onnx", "fp32", flow_steps=K, log=lambda _m: None)
    return out


def test_eef_pose_export_declares_its_state_and_each_widths_statistics(libero_export) -> None:
    data = load_manifest(libero_export).data
    assert data["state_space"] == {"kind": "eef_pose", "kinematics": TABLETOP_KINEMATICS}
    assert data["action_space"]["kind"] == "eef_delta"
    norm = data["normalisation"]
    assert norm["state"]["std"] == LIBERO_STATE_STD and len(norm["actions"]["std"]) == 7
    runner = ExportedRunner(libero_export, threads=1)
    assert runner.native_spec.state_dim == 8 and runner.native_spec.action_dim == 7
    assert runner.codec.state_dim == 8 and runner.codec.action_dim == 7


def test_eef_pose_policy_runs_in_the_loop_without_refusals(libero_export, configs) -> None:
    assert_runs_in_the_loop(libero_export, configs)


def test_joint_chunk_is_the_native_actions_of_the_arms_eef_pose_through_the_adapter(
    libero_export,
) -> None:
    """``infer`` on the joints is ``infer_native`` on their forward kinematics, then the
    action space: the two paths share the state, the model and the un-normalisation."""
    runner = ExportedRunner(libero_export, threads=1)
    joints = [0.1, 0.2, 1.7, -0.1, 1.0, 0.3, 0.02]
    obs = observation(joints)
    noise = np.random.default_rng(7).standard_normal((H, 32)).astype(np.float32)
    chunk = runner.infer(obs, noise=noise)
    native_obs = dataclasses.replace(obs, state=eef_pose_of(joints))
    native = runner.infer_native(native_obs, noise=noise)
    assert native.actions.shape == (H, 7) and native.t_obs_s == obs.stamp_s
    raw = np.zeros((H, 32))
    raw[:, :7] = native.actions
    assert runner.action_adapter is not None
    want = runner.action_adapter.to_joint_positions(raw, np.array(joints), DT)
    np.testing.assert_allclose(chunk.positions, want, atol=1e-9)


def test_openpi_libero_client_gets_the_policys_own_actions_from_vla_edge_serve(
    libero_export,
) -> None:
    """openpi's client, sending exactly its LIBERO example's request (224x224 uint8 images
    under its keys, the 8-D state, the prompt), to the server ``vla-edge serve --policy``
    runs (the runner ``make_runner`` builds, as the command does)."""
    runner = make_runner(str(libero_export), threads=1)
    rng = np.random.default_rng(3)
    element = {
        "observation/image": _libero_camera(1),
        "observation/wrist_image": _libero_camera(2),
        "observation/state": eef_pose_of(HOME) + rng.normal(0.0, 0.01, 8),
        "prompt": "put the red block in the bowl",
    }
    noise = rng.standard_normal((H, 32)).astype(np.float32)
    with PolicyServer(runner, port=0) as server:
        client = WebsocketClientPolicy(host="127.0.0.1", port=server.port)
        meta = client.get_server_metadata()
        plain = client.infer(element)
        reply = client.infer(dict(element, **{"vla_edge/noise": noise}))
        with pytest.raises(RuntimeError, match=r"state shape = \[7\]: must be \[8\], the policy's"):
            client.infer(dict(element, **{"observation/state": np.zeros(7)}))
        again = client.infer(element)  # the connection keeps serving
        client._ws.close()
        with pytest.raises(RemoteRunnerError, match="mode = 'policy_native'"):
            RemoteRunner(server.url, timeout_s=5.0)
        assert server.stats.errors_observation == 1 and server.stats.requests_ok == 3
    assert meta["mode"] == "policy_native" and meta["state_space"] == "eef_pose"
    assert (meta["state_dim"], meta["action_dim"], meta["action_horizon"]) == (8, 7, H)
    for actions in (plain["actions"], again["actions"], reply["actions"]):
        assert actions.shape == (H, 7) and np.all(np.isfinite(actions))
    local = runner.infer_native(
        Observation(
            stamp_s=0.0,
            images={
                "agentview": element["observation/image"],
                "wrist": element["observation/wrist_image"],
            },
            state=element["observation/state"],
            instruction=element["prompt"],
        ),
        noise=noise,
    )
    np.testing.assert_array_equal(reply["actions"], local.actions)


def observation(state: list[float]) -> Observation:
    rng = np.random.default_rng(0)
    images = {c: rng.integers(0, 256, (64, 64, 3), dtype=np.uint8) for c in ("agentview", "wrist")}
    return Observation(stamp_s=3.0, images=images, state=np.array(state), instruction="lift it")


def test_chunk_keeps_the_observation_stamp_and_holds_undriven_joints(exports) -> None:
    runner = ExportedRunner(exports["joint_delta"], threads=1)
    state = [0.1, 0.2, 1.5, -0.1, 1.0, 0.3, 0.02]
    chunk = runner.infer(observation(state))
    assert chunk.t_obs_s == 3.0 and chunk.positions.shape == (H, N)
    np.testing.assert_array_equal(chunk.positions[:, 6], 0.02)  # no gripper mapping: held
    assert np.max(np.abs(chunk.positions[:, :6] - np.array(state[:6]))) < 0.2


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"indices": [0, 1, 2, 3, 4, 5, 6]}, "7 dimensions"),
        ({"policy_dim": 16}, "policy_dim"),
        ({"indices": [0, 1, 2, 3, 4, 20]}, "normalisation covers"),
    ],
)
def test_action_space_the_robot_cannot_execute_is_refused_when_built(
    exports, tmp_path, change, words
) -> None:
    section = {**SPACES["joint_delta"][0], **change}
    bad = copy_with_manifest(exports["joint_delta"], tmp_path / "bad", section)
    with pytest.raises(ActionSpaceError, match=words):
        ExportedRunner(bad)


def test_eef_delta_without_kinematics_is_refused_when_built(exports, tmp_path) -> None:
    section = dict(load_manifest(exports["eef_delta"]).data["action_space"])
    section.pop("kinematics")
    bad = copy_with_manifest(exports["eef_delta"], tmp_path / "bad", section)
    with pytest.raises(ActionSpaceError, match="kinematics"):
        ExportedRunner(bad)
    section["kinematics"] = {"mjcf": "sim/nowhere.xml", "site": "ee", "joints": ["joint1"]}
    bad = copy_with_manifest(exports["eef_delta"], tmp_path / "bad2", section)
    with pytest.raises(ActionSpaceError, match="nowhere"):
        ExportedRunner(bad)


def test_non_finite_model_output_is_a_named_error_never_a_chunk(exports) -> None:
    runner = ExportedRunner(exports["joint_velocity"], threads=1)
    stage, _ = runner.manifest.output
    program = runner._programs[stage]
    real_run = program.run

    def nan_run(inputs):
        outputs = list(real_run(inputs))
        outputs[0] = np.full_like(outputs[0], np.nan)
        return outputs

    program.run = nan_run  # type: ignore[method-assign]
    with pytest.raises(NonFiniteChunkError):
        runner.infer(observation(HOME))


@pytest.mark.ros
def test_vla_edge_launch_sim_runs_an_imported_pi0_export_with_real_processes(
    exports, tmp_path
) -> None:
    """The whole graph over DDS: the generic ONNX runner in the inference node, in-range
    statistics, so every chunk is accepted and the safety node sees nothing out of limits."""
    import subprocess
    import sys

    from ros_test_domain import DomainLease

    lease = DomainLease()
    out = tmp_path / "run.json"
    try:
        cmd = [
            sys.executable, "-m", "vla_edge.cli", "launch", "sim", "--policy",
            str(exports["joint_position"]), "--threads", "1", "--duration", "20",
            "--json", str(out), "--log-dir", str(tmp_path / "logs"),
        ]  # fmt: skip
        result = subprocess.run(cmd, env=lease.env(), capture_output=True, text=True, timeout=150)
    finally:
        lease.release()
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    metrics = json.loads(out.read_text())
    failed = {name: code for name, code in metrics["exit_codes"].items() if code != 0}
    assert not failed, {
        name: (tmp_path / "logs" / f"{name}.log").read_text(errors="replace")[-2000:]
        for name in failed
    }
    assert metrics["chunks_accepted"] >= 5, metrics
    assert metrics["chunks_rejected"] == 0, metrics
    safety = metrics["safety"]
    assert safety["rejected_out_of_limits"] == 0 and safety["rejected"] == 0, safety
    assert metrics["inference_stage_ms"]["action_head"]["p50"] > 0.0


def test_the_parity_gate_compares_an_imported_export_with_its_eager_stages(exports) -> None:
    from vla_edge.core.errors import ParityGateError
    from vla_edge.export.architecture import reference_stages
    from vla_edge.runners.parity import check_parity, export_parity
    from vla_edge.sim.frames import expert_observations

    export = exports["joint_position"]
    data = load_manifest(export).data
    eager = reference_stages(data["source"]["policy_dir"], K)
    shape = (int(data["image_height"]), int(data["image_width"]))
    observations = expert_observations(list(data["cameras"]), shape, H, 3)
    report = export_parity(export, eager, observations, threads=1)
    assert report["dims"] == list(JOINT_NAMES) and report["observations"] == 3
    assert report["rms_pct_of_range_max"] < 0.1  # ONNX fp32 against the same stages
    check_parity(report, 0.1)
    eager["action_head"] = _scaled(eager["action_head"])
    worse = export_parity(export, eager, observations, threads=1)
    with pytest.raises(ParityGateError, match="joint"):
        check_parity(worse, 0.1)


def _scaled(module: torch.nn.Module) -> torch.nn.Module:
    """``module`` whose outputs are 1.5 times its own (a reference the export cannot match)."""

    class Scaled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = module

        def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
            return self.inner(*inputs) * 1.5

    return Scaled()
