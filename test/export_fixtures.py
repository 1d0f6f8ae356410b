"""A tiny trained-format checkpoint exported once per test process (ONNX and ExecuTorch fp32).

Exporting is the slow part of the export tests, so the exports are cached
for the whole pytest process and shared by every test module that asks. The
ExecuTorch export reuses the ONNX language program (the language stage may
run on another backend than the policy; exporting MiniLM to ExecuTorch takes
about a minute and is done by the real exports, not by the tests).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import torch
from policy_synthetic import tiny_config

from vla_edge.archs.bundled.model import VlaPolicy, save_checkpoint
from vla_edge.archs.bundled.normalize import NormStats
from vla_edge.cli import main as cli_main
from vla_edge.core.types import Observation

CAMERAS = ("agentview", "wrist")
_CACHE: dict[str, Path] = {}


def tiny_export_config():  # noqa: ANN201 - PolicyConfig
    """Two cameras at 32x32, one layer each, K = 2 flow steps, 4 keypoints per camera."""
    return tiny_config(flow_steps=2, vision_keypoints=4)


def tiny_checkpoint(root: Path) -> Path:
    """A checkpoint of the tiny model with non-trivial normalisation statistics."""
    if "checkpoint" not in _CACHE:
        torch.manual_seed(0)
        policy = VlaPolicy(tiny_export_config())
        policy.set_stats(
            NormStats(
                state_mean=np.linspace(-0.1, 0.1, 7),
                state_std=np.full(7, 0.5),
                action_mean=np.zeros(7),
                action_std=np.array([0.1] * 6 + [0.02]),
            )
        )
        path = root / "tiny.pt"
        save_checkpoint(path, policy)
        _CACHE["checkpoint"] = path
    return _CACHE["checkpoint"]


def exported(root: Path, backend: str, quant: str = "fp32") -> Path:
    """Export the tiny checkpoint with ``vla-edge export`` (once per process)."""
    key = f"{backend}_{quant}"
    if key not in _CACHE:
        ckpt = tiny_checkpoint(root)
        out = root / key
        argv = ["export", "--checkpoint", str(ckpt), "--backend", backend, "--quant", quant]
        argv += ["--out", str(out), "--threads", "1"]
        if backend == "executorch":
            onnx_dir = exported(root, "onnx")
            argv += ["--language-backend", "onnx", "--reuse-language-from", str(onnx_dir)]
        assert cli_main(argv) == 0
        _CACHE[key] = out
    return _CACHE[key]


def copy_export(src: Path, dst: Path) -> Path:
    """A private copy of an export directory (for tests that edit the manifest)."""
    shutil.copytree(src, dst)
    return dst


def edited_export(src: Path, dst: Path, edit) -> Path:  # noqa: ANN001 - edit(data)
    """A copy of the export ``src`` at ``dst`` with ``edit`` applied to its manifest's data."""
    import json

    copy_export(src, dst)
    path = dst / "manifest.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    return dst


def shared_onnx_export(tmp_path_factory) -> Path:  # noqa: ANN001 - pytest's factory
    """The tiny bundled ONNX export every test session shares (made once)."""
    root = tmp_path_factory.getbasetemp() / "export_fixtures"
    root.mkdir(exist_ok=True)
    return exported(root, "onnx")


def observation(seed: int = 1, **changes: object) -> Observation:
    """A valid observation for the tiny model."""
    rng = np.random.default_rng(seed)
    fields: dict[str, object] = dict(
        stamp_s=3.25,
        images={cam: rng.integers(0, 256, (32, 32, 3), dtype=np.uint8) for cam in CAMERAS},
        state=np.array([0.1, -0.2, 0.3, 0.0, 0.5, -0.1, 0.02]),
        instruction="put the red block in the bowl",
    )
    fields.update(changes)
    return Observation(**fields)
