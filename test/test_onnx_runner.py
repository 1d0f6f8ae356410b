import json

import numpy as np
import pytest
import torch
from export_fixtures import exported, observation, tiny_checkpoint

from vla_edge.core.errors import ConfigError, InvalidObservationError
from vla_edge.export.manifest import file_sha256
from vla_edge.runners.base import Runner
from vla_edge.runners.factory import make_runner
from vla_edge.runners.onnx_runner import OnnxRunner
from vla_edge.runners.torch_runner import TorchRunner

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.getbasetemp() / "export_fixtures"


@pytest.fixture(scope="module")
def onnx_dir(root):
    root.mkdir(exist_ok=True)
    return exported(root, "onnx")


@pytest.fixture(scope="module")
def runner(onnx_dir):
    return OnnxRunner(onnx_dir, threads=1)


@pytest.fixture(scope="module")
def reference(root):
    return TorchRunner(tiny_checkpoint(root), threads=1)


def test_export_writes_one_onnx_program_per_stage_and_the_tokenizer(onnx_dir, root) -> None:
    manifest = json.loads((onnx_dir / "manifest.json").read_text())
    assert manifest["backend"] == "onnx" and manifest["quant"] == "fp32"
    for stage in ("language_encoder", "vision_encoder", "fusion", "action_head"):
        entry = manifest["stages"][stage]
        assert (onnx_dir / entry["file"]).stat().st_size == entry["bytes"]
        assert entry["check_max_abs"] < 1e-4
    assert (onnx_dir / "tokenizer.json").is_file()
    assert manifest["source"]["checkpoint_sha256"] == file_sha256(tiny_checkpoint(root))
    assert manifest["chunk_horizon"] == 10 and manifest["flow_steps"] == 2
    assert manifest["exporter"]["versions"]["onnxruntime"]


def test_onnx_runner_implements_the_runner_protocol(runner) -> None:
    assert isinstance(runner, Runner)
    assert runner.spec.cameras == ("agentview", "wrist")
    assert runner.spec.chunk_horizon == 10 and runner.spec.action_dim == 7
    assert runner.spec.image_height == 32 and runner.spec.supports_prefix


def test_onnx_chunk_matches_torch_with_the_same_noise_and_prefix(runner, reference) -> None:
    noise = np.random.default_rng(3).standard_normal((10, 7)).astype(np.float32)
    prefix = np.random.default_rng(4).uniform(-0.3, 0.3, (4, 7))
    obs = observation()
    want = reference.infer(obs, noise=noise, prefix_actions=prefix, prefix_len=3)
    got = runner.infer(obs, noise=noise, prefix_actions=prefix, prefix_len=3)
    assert got.t_obs_s == 3.25 and got.joint_names == want.joint_names
    np.testing.assert_allclose(got.positions, want.positions, atol=1e-5)
    np.testing.assert_array_equal(got.positions[:3], prefix[:3])


def test_onnx_language_embedding_is_cached_per_instruction(runner) -> None:
    obs = observation(instruction="lift the green block")
    first = runner.infer(obs)
    second = runner.infer(obs)
    assert first.timings_ms["language_encoder"] > 0.0
    assert second.timings_ms["language_encoder"] == 0.0
    assert set(second.timings_ms) == {"language_encoder", "vision_encoder", "fusion", "action_head"}
    assert all(second.timings_ms[s] > 0.0 for s in ("vision_encoder", "fusion", "action_head"))


def test_factory_dispatches_an_onnx_export_dir_to_onnx_runner(onnx_dir) -> None:
    runner = make_runner(str(onnx_dir), threads=1)
    assert isinstance(runner, OnnxRunner)
    assert runner.infer(observation()).positions.shape == (10, 7)


def test_factory_accepts_only_the_exports_own_flow_steps(onnx_dir) -> None:
    # the tiny export was made with K = 2: asking for it is fine, anything else is named
    assert isinstance(make_runner(str(onnx_dir), threads=1, flow_steps=2), OnnxRunner)
    with pytest.raises(ConfigError, match="exported with K = 2"):
        make_runner(str(onnx_dir), threads=1, flow_steps=10)
    with pytest.raises(ConfigError, match="expected 1 <= K <= 100"):
        make_runner(str(onnx_dir), threads=1, flow_steps=0)
    with pytest.raises(ConfigError, match="remote policy server"):
        make_runner("ws://127.0.0.1:9", flow_steps=10)
    with pytest.raises(ConfigError, match="scripted expert"):
        make_runner("expert", flow_steps=10)


@pytest.mark.parametrize("k", ["0", "101"])
def test_export_refuses_flow_steps_out_of_range_before_exporting(root, tmp_path, k, capsys) -> None:
    from vla_edge.cli import main as cli_main

    argv = ["export", "--checkpoint", str(tiny_checkpoint(root)), "--backend", "onnx"]
    assert cli_main([*argv, "--flow-steps", k, "--out", str(tmp_path / "x")]) == 2
    assert f"--flow-steps = {k}, expected 1 <= K <= 100" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"images": {"agentview": np.zeros((32, 32, 3), np.uint8)}}, "cameras"),
        (
            {"images": {c: np.zeros((64, 64, 3), np.uint8) for c in ("agentview", "wrist")}},
            "shape",
        ),
        (
            {"images": {c: np.zeros((32, 32, 3), np.float32) for c in ("agentview", "wrist")}},
            "dtype",
        ),
        ({"state": np.array([0.0, 0, 0, np.nan, 0, 0, 0])}, "non-finite"),
        ({"state": np.zeros(6)}, "state shape"),
        ({"instruction": "   "}, "empty"),
    ],
)
def test_onnx_runner_refuses_a_bad_observation(runner, changes, words) -> None:
    with pytest.raises(InvalidObservationError, match=words):
        runner.infer(observation(**changes))


def test_onnx_runner_refuses_bad_noise_and_prefix(runner) -> None:
    with pytest.raises(InvalidObservationError, match="noise shape"):
        runner.infer(observation(), noise=np.zeros((9, 7), np.float32))
    with pytest.raises(InvalidObservationError, match="prefix_len"):
        runner.infer(observation(), prefix_len=10)
    with pytest.raises(InvalidObservationError, match="prefix_actions is None"):
        runner.infer(observation(), prefix_len=2)


@pytest.mark.parametrize("text", ["[]", "{}", "not json"])
def test_factory_names_a_manifest_without_a_backend(tmp_path, text) -> None:
    (tmp_path / "manifest.json").write_text(text)
    with pytest.raises(ConfigError, match="cannot read field 'backend'"):
        make_runner(str(tmp_path))


def test_onnx_runner_refuses_inputs_that_would_give_a_nan_chunk(runner) -> None:
    with pytest.raises(InvalidObservationError, match="state = .* overflows float32"):
        runner.infer(observation(state=np.full(7, 1e39)))
    with pytest.raises(InvalidObservationError, match=r"prefix_actions\[:2\] is not finite"):
        runner.infer(observation(), prefix_actions=np.full((10, 7), 1e39), prefix_len=2)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"prefix_actions": np.zeros((10, 7)), "prefix_len": 1.5}, "prefix_len = 1.5"),
        ({"noise": np.full((10, 7), "a")}, "noise dtype = <U1"),
        ({"noise": np.zeros((10, 7), np.int64)}, "noise dtype = int64"),
    ],
)
def test_onnx_runner_refuses_wrong_noise_and_prefix_types(runner, kwargs, words) -> None:
    with pytest.raises(InvalidObservationError, match=words):
        runner.infer(observation(), **kwargs)


def test_onnx_runner_refuses_a_non_string_camera_key(runner) -> None:
    images = {**observation().images, 1: np.zeros((32, 32, 3), np.uint8)}
    with pytest.raises(InvalidObservationError, match="images key = 1"):
        runner.infer(observation(images=images))


def test_closed_onnx_runner_raises_config_error(onnx_dir) -> None:
    runner = OnnxRunner(onnx_dir, threads=1)
    runner.close()
    with pytest.raises(ConfigError, match="is closed: infer\\(\\) after close\\(\\)"):
        runner.infer(observation())
