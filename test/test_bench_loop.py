"""``vla-edge bench loop``: a random-weight SmolVLA written in LeRobot's layout (π0: in
openpi's), imported, exported (π0: to ExecuTorch 8da4w, one process per stage), timed,
evaluated in virtual time with its measured delay and launched with real processes; the
JSON's checks hold. At the small size (the full size is the benchmark in docs/RESULTS.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from ros_test_domain import DomainLease
from safetensors import safe_open

from vla_edge.archs.pi0.bench import openpi_statistics, write_openpi_checkpoint
from vla_edge.archs.policy_dir import load_policy_dir
from vla_edge.archs.smolvla.bench import write_smolvla_checkpoint
from vla_edge.bench.arch_loop import (
    home_statistics,
    loop_model,
    write_sentencepiece_tokenizer,
)
from vla_edge.bench.arch_models import random_model
from vla_edge.cli import main


@pytest.fixture
def domain(monkeypatch):
    lease = DomainLease()
    for key, value in lease.env().items():
        monkeypatch.setenv(key, value)
    yield
    lease.release()


def small_loop(tmp_path: Path, arch: str, *flags: str) -> tuple[dict, Path]:
    """``vla-edge bench loop`` of a small ``arch``: its record (every check held), work dir."""
    out = tmp_path / "loop.json"
    work = tmp_path / "work"
    argv = ["bench", "loop", "--arch", arch, "--size", "small", "--episodes", "1", *flags]
    argv += ["--duration-s", "8", "--threads", "1", "--json", str(out), "--work-dir", str(work)]
    assert main(argv) == 0, (work / "launch.log").read_text()[-3000:]
    record = json.loads(out.read_text())
    assert record["ok"] and all(record["checks"].values()), record["checks"]
    return record, work


@pytest.mark.ros
@pytest.mark.slow
def test_the_small_loop_is_fed_or_held_and_never_unsafe(tmp_path, domain) -> None:
    record, work = small_loop(tmp_path, "smolvla")
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


@pytest.mark.ros
@pytest.mark.slow
def test_a_small_pi0_exported_one_stage_per_process_is_fed_or_held(tmp_path, domain) -> None:
    record, work = small_loop(tmp_path, "pi0", "--backend", "executorch", "--quant", "8da4w")
    policy = load_policy_dir(work / "policy", verify_sha256=True)
    assert policy.architecture == "pi0" and policy.source["layout"] == "openpi"
    assert policy.cameras["base_0_rgb"] == "agentview"
    manifest = json.loads((work / "export_executorch_8da4w" / "manifest.json").read_text())
    assert manifest["quant"] == "8da4w"
    assert all(s["check_max_abs"] is None for s in manifest["stages"].values())  # apart
    assert record["export"]["peak_rss_mb"] > 0.0
    launch = record["launch"]
    assert launch["exit_code"] == 0 and launch["chunks_accepted"] >= 3, launch
    node = launch["rss_mb"]["inference_node"]
    assert node["peak"] >= max(node["start"], node["end"]) - 1.0


@pytest.mark.parametrize("arch", ["pi0", "pi05"])
def test_the_openpi_checkpoint_imports_with_home_statistics(tmp_path, arch) -> None:
    from vla_edge.archs.common import ImportOptions
    from vla_edge.archs.importer import default_robot, import_checkpoint
    from vla_edge.archs.pi0.checkpoint import load_pi0_weights
    from vla_edge.archs.pi0.model import Pi0Model

    model = loop_model(arch, "small", 1, seed=2)
    stats = openpi_statistics(home_statistics())
    ckpt = write_openpi_checkpoint(tmp_path / "ckpt", model, stats, ("dummy", "dummy"))
    tokenizer = write_sentencepiece_tokenizer(tmp_path / "tok" / "tokenizer.model")
    options = ImportOptions(architecture=arch, vision_heads=model.config.vision.num_heads)
    policy = import_checkpoint(
        ckpt, tmp_path / "policy", tokenizer, 0.1, default_robot(), options=options
    )
    assert policy.architecture == arch
    assert policy.config.model_dump() == model.config.model_dump()
    section = policy.manifest_normalisation()
    if arch == "pi0":
        assert section["kind"] == "mean_std"
        assert section["actions"]["mean"] == pytest.approx(stats["actions"]["mean"])
    else:  # quantiles two standard deviations about the home pose
        assert section["kind"] == "quantile"
        assert section["actions"]["q99"] == pytest.approx(stats["actions"]["q99"])
    loaded = Pi0Model(policy.config)
    load_pi0_weights(policy, loaded)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in loaded.state_dict().items())
