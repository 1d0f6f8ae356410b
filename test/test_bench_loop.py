"""``vla-edge bench loop``: a random-weight SmolVLA written in LeRobot's layout, imported,
exported to ONNX, timed, evaluated in virtual time with its measured delay and launched
with real processes; the JSON's checks hold. At the small size (the full size is the
benchmark in docs/RESULTS.md)."""

from __future__ import annotations

import json

import pytest
import torch
from ros_test_domain import DomainLease
from safetensors import safe_open

from vla_edge.archs.policy_dir import load_policy_dir
from vla_edge.bench.arch_loop import home_statistics, write_smolvla_checkpoint
from vla_edge.bench.arch_models import random_model
from vla_edge.cli import main


@pytest.fixture
def domain(monkeypatch):
    lease = DomainLease()
    for key, value in lease.env().items():
        monkeypatch.setenv(key, value)
    yield
    lease.release()


@pytest.mark.ros
@pytest.mark.slow
def test_the_small_loop_is_fed_or_held_and_never_unsafe(tmp_path, domain) -> None:
    out = tmp_path / "loop.json"
    work = tmp_path / "work"
    argv = ["bench", "loop", "--arch", "smolvla", "--size", "small", "--episodes", "1"]
    argv += ["--duration-s", "8", "--threads", "1", "--json", str(out), "--work-dir", str(work)]
    assert main(argv) == 0, (work / "launch.log").read_text()[-3000:]
    record = json.loads(out.read_text())
    assert record["ok"] and all(record["checks"].values()), record["checks"]
    assert record["model"]["size"] == "small" and record["inference"]["p50_ms"] > 0.0
    # the steps ran on what the first wrote: LeRobot's layout, imported onto the robot
    policy = load_policy_dir(work / "policy", verify_sha256=True)
    assert policy.architecture == "smolvla" and policy.source["layout"] == "lerobot"
    assert policy.cameras == {"observation.images.camera1": "agentview"}
    assert record["eval"]["episodes"] == 1
    assert record["eval"]["delay_ms"] == pytest.approx(record["inference"]["p50_ms"], abs=0.1)
    launch = record["launch"]
    assert launch["exit_code"] == 0 and launch["chunks_accepted"] >= 3, launch


def test_the_written_checkpoint_holds_the_models_weights_and_home_statistics(tmp_path) -> None:
    model = random_model("smolvla", "small", 1, seed=3)
    ckpt = write_smolvla_checkpoint(tmp_path / "ckpt", model, home_statistics())
    config = json.loads((ckpt / "config.json").read_text())
    assert config["type"] == "smolvla" and config["chunk_size"] == model.config.chunk_size
    name = "model.vlm_with_expert.vlm.model.text_model.embed_tokens.weight"
    with safe_open(str(ckpt / "model.safetensors"), "pt") as f:
        assert name in f.keys()
        table = f.get_tensor(name)
    ours = model.state_dict()["vlm_with_expert.vlm.model.text_model.embed_tokens.weight"]
    assert torch.equal(table, ours)
    stats = home_statistics()
    assert stats["action.mean"].shape == (7,) and stats["action.std"].max() <= 0.02
