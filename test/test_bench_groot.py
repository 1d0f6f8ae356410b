"""``vla-edge bench latency|parity|loop --arch groot``: GR00T N1.7's bench hooks.

The benchmarks build GR00T from its config at random (the full size is N1.7's, the small
one the tiny test size), time it through eager torch and each export, compare the exports'
actions with eager torch's, and write it in Isaac-GR00T's N1.7 layout, which ``vla-edge
import`` reads back as the same model. At the small size (the full size is the benchmark in
docs/RESULTS.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from vla_edge.archs import registry
from vla_edge.archs.groot import GrootConfig, GrootModel
from vla_edge.archs.groot.bench import BENCH, EMBODIMENT, loop_config
from vla_edge.bench import arch_latency, arch_loop, arch_models
from vla_edge.core.errors import ConfigError


def test_groot_is_built_at_random_by_the_benchmarks() -> None:
    assert registry.get("groot").bench_hooks() is BENCH
    assert "groot" in arch_models.bench_archs() and "groot" in arch_loop.loop_archs()
    assert arch_models.model_config("groot", "full", 2) == GrootConfig.full_n17()
    small = arch_models.model_config("groot", "small", 1)
    assert small == GrootConfig.tiny(image_slots=("image",))
    with pytest.raises(ConfigError, match="2 image slots"):
        arch_models.model_config("groot", "small", 3)
    with pytest.raises(ConfigError, match="size"):
        BENCH.config("medium", 1)


def test_a_stage_shrinks_by_its_own_layers_only() -> None:
    full = arch_models.model_config("groot", "full", 1)
    fusion = arch_models.model_config("groot", "full", 1, "fusion", 8)
    assert fusion.text.depth == 8 and fusion.dit.depth == full.dit.depth
    assert fusion.vl_self_attention == full.vl_self_attention
    head = arch_models.model_config("groot", "full", 1, "action_head", 16)
    assert head.dit.depth == 16 and head.text.depth == full.text.depth
    with pytest.raises(ConfigError, match="shrink by depth"):  # deepstack taps: not searched
        arch_models.model_config("groot", "full", 1, "vision_encoder", 12)


def test_the_full_size_has_n17s_parameters() -> None:
    """Shapes only (meta tensors): no memory."""
    params = {k: v // 4 for k, v in arch_latency.stage_param_bytes("groot", "full", 2).items()}
    # Qwen3-VL-2B's vision tower (0.41 B); its language model cut to 16 layers with the
    # token table, the VL self-attention and the state encoder; the 32-layer DiT with the
    # action encoder and decoder (each per-embodiment encoder with its 32 slices)
    assert 0.40e9 < params["vision_encoder"] < 0.42e9
    assert 3.1e9 < sum(params.values()) < 3.2e9


def test_the_full_size_flops_grow_with_the_cameras() -> None:
    """Fake tensors: no memory."""
    flops = arch_models.stage_flops("groot", "full", 1)
    two = arch_models.stage_flops("groot", "full", 2)
    assert two["vision_encoder"] == 2 * flops["vision_encoder"]
    assert two["action_head"] > flops["action_head"]  # the DiT attends to more tokens


def test_random_groot_models_are_the_same_in_every_process(tmp_path) -> None:
    """A timing process and each export process build the same weights from the seed."""
    code = (
        "import sys, torch; from vla_edge.bench.arch_models import random_model; "
        "m = random_model('groot', 'small', 1, seed=3); "
        "torch.save(m.state_dict(), sys.argv[1])"
    )
    ours = arch_models.random_model("groot", "small", 1, seed=3).state_dict()
    for name, value in ours.items():
        assert torch.isfinite(value).all() and float(value.abs().max()) <= 1.0, name
    saved = tmp_path / "state.pt"
    subprocess.run([sys.executable, "-c", code, str(saved)], check=True, timeout=120)
    theirs = torch.load(saved)
    for name, value in ours.items():
        assert torch.equal(value, theirs[name]), name


def run_bench(tmp_path: Path, command: str, *flags: str) -> dict:
    """``vla-edge bench COMMAND --arch groot --size small`` in a fresh process; its JSON."""
    out = tmp_path / f"{command}.json"
    cmd = [sys.executable, "-m", "vla_edge.cli", "bench", command, "--arch", "groot"]
    cmd += ["--size", "small", "--threads", "1", *flags]
    cmd += ["--json", str(out), "--work-dir", str(tmp_path / "work")]
    subprocess.run(cmd, check=True, timeout=1800)
    return json.loads(out.read_text())


def test_bench_latency_times_a_small_groot_and_writes_its_json(tmp_path) -> None:
    """Eager torch only (each export costs minutes here: the parity test below has one)."""
    report = run_bench(tmp_path, "latency", "--cameras", "2", "--backend", "torch", "--runs", "2")
    assert report["arch"] == "groot" and report["complete"]
    model = report["models"]["groot_small_2cam"]
    assert set(model["flops"]) == {"vision_encoder", "fusion", "action_head"}
    assert all(v > 0 for v in model["fp32_param_bytes"].values())
    (row,) = model["results"]
    assert row["ok"] and row["backend"] == "torch" and row["runs"] == 2, row
    assert set(row["stages"]) == set(model["flops"])
    assert row["end_to_end"]["p50_ms"] > 0 and row["peak_rss_mb"] > 0
    assert row["achieved"]["fusion"]["gflops"] > 0 and row["gemm_peak_gflops"] > 0
    assert len(row["load_1min"]) == 2  # the machine's load around the timed runs
    assert report["machine"] and report["settings"]["load_before"]


@pytest.mark.slow
@pytest.mark.timeout(1800)  # three int8 lowerings: minutes each on a busy 2-core machine
def test_bench_parity_compares_8da8w_programs_with_eager_torch(tmp_path) -> None:
    report = run_bench(
        tmp_path, "parity", "--cameras", "1", "--backend", "torch,executorch", "--variants",
        "executorch_8da8w",
    )  # fmt: skip
    model = report["models"]["groot_small_1cam"]
    export = model["exports"]["executorch_8da8w"]
    assert export["complete"]
    for stage in export["stages"].values():
        entry = stage["entry"]
        assert entry["quant"] == "8da8w" and entry["quantized_linears"] > 0, entry
        assert entry["delegation"]["delegated_nodes"] > 0
    rows = {r["backend"]: r for r in model["results"]}
    assert rows["torch"]["runs"] == 1 and rows["executorch"]["ok"]
    # π0's bound for a quantised export: 5 % of each action dimension's range
    assert rows["executorch"]["parity"]["rms_pct_of_range_max"] <= 5.0


def test_the_n17_checkpoint_imports_as_the_loop_model(tmp_path) -> None:
    """``bench loop``'s first two steps: the random model in the N1.7 layout with the home
    statistics, imported onto the package's robot, is the same model with the same weights."""
    from test_import_groot import write_qwen_tokenizer

    from vla_edge.archs.common import ImportOptions
    from vla_edge.archs.groot.checkpoint import load_weights
    from vla_edge.archs.importer import default_robot, import_checkpoint

    model = arch_loop.loop_model("groot", "small", 2, seed=2)
    assert model.config == loop_config("small", 2)
    torch.manual_seed(2)  # every value drawn here: the round trip is what is checked
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0.0, 0.02)
    stats = arch_loop.home_statistics()
    ckpt = BENCH.write_checkpoint(tmp_path / "ckpt", model, stats, "small")
    tokenizer = write_qwen_tokenizer(tmp_path / "tokenizer", model.config)
    options = ImportOptions(**BENCH.import_options("groot", "small", model.config))
    policy = import_checkpoint(
        ckpt,
        tmp_path / "policy",
        tokenizer,
        arch_loop.DT_ACTION_S,
        default_robot(),
        options=options,
        cameras={"image": "agentview", "wrist_image": "wrist"},
    )
    assert policy.architecture == "groot" and policy.source["layout"] == "isaac_gr00t"
    assert policy.config.model_dump() == model.config.model_dump()
    assert policy.normalisation["embodiment"] == EMBODIMENT
    section = policy.manifest_normalisation()
    mean, std = stats["action.mean"], stats["action.std"]
    assert section["actions"]["q01"] == pytest.approx(mean - 2 * std, abs=1e-6)
    assert section["actions"]["q99"] == pytest.approx(mean + 2 * std, abs=1e-6)
    loaded = GrootModel(policy.config)
    load_weights(policy, loaded)
    for name, value in loaded.state_dict().items():
        assert torch.equal(value, model.state_dict()[name]), name
    # the published file's unread lm_head is not a parameter the model reads
    total = arch_loop.model_parameters(ckpt / "model.safetensors", BENCH.unread_keys)
    assert total == sum(p.numel() for p in model.parameters())


@pytest.fixture
def domain(monkeypatch):
    from ros_test_domain import DomainLease

    lease = DomainLease()
    for key, value in lease.env().items():
        monkeypatch.setenv(key, value)
    yield
    lease.release()


@pytest.mark.ros
@pytest.mark.slow
def test_a_small_groot_in_the_closed_loop_is_fed_or_held(tmp_path, monkeypatch, domain) -> None:
    """``vla-edge bench loop --arch groot``: written in the N1.7 layout, imported, exported to
    ONNX, timed, evaluated and launched; every check holds. The tokenizer is GR00T's
    chat-layout one (its bench hook ``write_tokenizer``)."""
    from vla_edge.cli import main

    out, work = tmp_path / "loop.json", tmp_path / "work"
    argv = ["bench", "loop", "--arch", "groot", "--size", "small", "--episodes", "1"]
    argv += ["--duration-s", "8", "--threads", "1", "--json", str(out), "--work-dir", str(work)]
    assert main(argv) == 0, (work / "launch.log").read_text()[-3000:]
    record = json.loads(out.read_text())
    assert record["ok"] and all(record["checks"].values()), record["checks"]
    assert record["model"]["arch"] == "groot" and record["inference"]["p50_ms"] > 0.0
    launch = record["launch"]
    assert launch["exit_code"] == 0 and launch["chunks_accepted"] >= 3, launch
