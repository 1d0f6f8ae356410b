import json

import numpy as np
import pytest
import torch
from export_fixtures import exported, observation, tiny_checkpoint

from vla_edge.core.errors import InvalidObservationError, ManifestMismatchError
from vla_edge.runners.base import Runner
from vla_edge.runners.executorch_runner import ExecuTorchRunner
from vla_edge.runners.factory import make_runner
from vla_edge.runners.onnx_runner import OnnxRunner
from vla_edge.runners.torch_runner import TorchRunner

torch.set_num_threads(1)


# every test here runs the ExecuTorch export of the fixture model (about a minute)
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    path = tmp_path_factory.getbasetemp() / "export_fixtures"
    path.mkdir(exist_ok=True)
    return path


@pytest.fixture(scope="module")
def et_dir(root):
    return exported(root, "executorch")


@pytest.fixture(scope="module")
def runner(et_dir):
    return ExecuTorchRunner(et_dir, threads=1)


@pytest.fixture(scope="module")
def reference(root):
    return TorchRunner(tiny_checkpoint(root), threads=1)


def test_executorch_export_records_xnnpack_delegation_per_stage(et_dir) -> None:
    manifest = json.loads((et_dir / "manifest.json").read_text())
    assert manifest["backend"] == "executorch"
    for stage in ("vision_encoder", "fusion", "action_head"):
        entry = manifest["stages"][stage]
        assert entry["file"].endswith(".pte") and entry["backend"] == "executorch"
        delegation = entry["delegation"]
        assert delegation["delegated_nodes"] > delegation["non_delegated_nodes"]
        assert delegation["delegated_subgraphs"] >= 1
        assert entry["check_max_abs"] < 1e-3
    # the vision encoder (convs + rewritten group norms) lowers as one XNNPACK call
    assert manifest["stages"]["vision_encoder"]["delegation"]["delegated_subgraphs"] == 1
    assert manifest["stages"]["language_encoder"]["backend"] == "onnx"


def test_executorch_runner_implements_the_runner_protocol(runner) -> None:
    assert isinstance(runner, Runner)
    assert runner.stage_backends["action_head"] == "executorch"
    assert runner.spec.chunk_horizon == 10 and runner.spec.cameras == ("agentview", "wrist")


def test_executorch_chunk_matches_torch_with_the_same_noise_and_prefix(runner, reference) -> None:
    noise = np.random.default_rng(3).standard_normal((10, 7)).astype(np.float32)
    prefix = np.random.default_rng(4).uniform(-0.3, 0.3, (4, 7))
    obs = observation(seed=2)
    want = reference.infer(obs, noise=noise, prefix_actions=prefix, prefix_len=2)
    got = runner.infer(obs, noise=noise, prefix_actions=prefix, prefix_len=2)
    assert got.t_obs_s == want.t_obs_s
    span = np.ptp(want.positions, axis=0) + 1e-3
    assert np.max(np.abs(got.positions - want.positions) / span) < 1e-3
    np.testing.assert_array_equal(got.positions[:2], prefix[:2])


def test_executorch_same_explicit_noise_gives_identical_chunks(runner) -> None:
    noise = np.random.default_rng(5).standard_normal((10, 7)).astype(np.float32)
    a = runner.infer(observation(), noise=noise).positions
    b = runner.infer(observation(), noise=noise).positions
    c = runner.infer(observation(), noise=noise + 1.0).positions
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, c)


def test_factory_dispatches_an_executorch_export_dir(et_dir) -> None:
    assert isinstance(make_runner(str(et_dir), threads=1), ExecuTorchRunner)


def test_onnx_runner_refuses_an_executorch_export_naming_the_backend(et_dir) -> None:
    with pytest.raises(ManifestMismatchError, match="backend = 'executorch'"):
        OnnxRunner(et_dir)


def test_executorch_runner_refuses_a_bad_observation(runner) -> None:
    bad = {c: np.zeros((32, 32, 3), np.uint8) for c in ("agentview", "wrist", "extra")}
    with pytest.raises(InvalidObservationError, match="cameras"):
        runner.infer(observation(images=bad))
    with pytest.raises(InvalidObservationError, match="non-finite"):
        runner.infer(observation(state=np.full(7, np.inf)))
    with pytest.raises(InvalidObservationError, match="noise"):
        runner.infer(observation(), noise=np.full((10, 7), np.nan, np.float32))
