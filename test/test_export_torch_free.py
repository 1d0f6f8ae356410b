"""The edge runners must not drag torch into a deployment process."""

import json
import subprocess
import sys

import pytest
from export_fixtures import exported

PROBE = """
import json, sys, numpy as np
from vla_edge.core.types import Observation
from vla_edge.runners.{module} import {cls}
imported = 'torch' in sys.modules
runner = {cls}(sys.argv[1], threads=1)
rng = np.random.default_rng(0)
images = {{c: rng.integers(0, 256, (32, 32, 3), dtype=np.uint8) for c in ("agentview", "wrist")}}
obs = Observation(0.0, images, np.zeros(7), "put the red block in the bowl")
chunk = runner.infer(obs)
print(json.dumps({{"after_import": imported, "after_run": 'torch' in sys.modules,
                  "shape": list(chunk.positions.shape)}}))
"""


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    path = tmp_path_factory.getbasetemp() / "export_fixtures"
    path.mkdir(exist_ok=True)
    return path


def _probe(module: str, cls: str, path) -> dict:
    code = PROBE.format(module=module, cls=cls)
    out = subprocess.run(
        [sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_onnx_runner_imports_and_runs_without_torch(root) -> None:
    result = _probe("onnx_runner", "OnnxRunner", exported(root, "onnx"))
    assert result == {"after_import": False, "after_run": False, "shape": [10, 7]}


@pytest.mark.slow  # exports the fixture model for ExecuTorch (about a minute)
def test_executorch_runner_module_imports_without_torch(root) -> None:
    # ExecuTorch's Python bindings link libtorch and take only torch.Tensor, so running
    # a program imports torch (documented in executorch_runner.py); importing does not.
    result = _probe("executorch_runner", "ExecuTorchRunner", exported(root, "executorch"))
    assert result["after_import"] is False
    assert result["after_run"] is True
    assert result["shape"] == [10, 7]
