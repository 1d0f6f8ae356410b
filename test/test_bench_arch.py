"""``vla-edge bench latency --arch`` / ``bench parity --arch``: random-weight models, FLOPs,
the memory watchdog, and one small run through eager torch and ONNX."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from vla_edge.bench import arch_latency, arch_models
from vla_edge.core.errors import ConfigError


@pytest.mark.parametrize("arch", ["pi0", "smolvla"])
def test_stage_flops_scale_with_the_cameras_and_need_no_weights(arch) -> None:
    one = arch_models.stage_flops(arch, "small", 1)
    three = arch_models.stage_flops(arch, "small", 3)
    assert three["vision_encoder"] == 3 * one["vision_encoder"] > 0  # one image per slot
    assert three["fusion"] > one["fusion"] > 0  # a longer prefix
    assert three["action_head"] > one["action_head"] > 0  # attends to it


def test_full_size_flops_match_the_published_sizes() -> None:
    """π0 with three 224² images: Gemma 2B over 816 prefix tokens is about 3.2 TFLOP."""
    flops = arch_models.stage_flops("pi0", "full", 3)
    assert 3.0e12 < flops["fusion"] < 3.4e12
    # SigLIP So400m/14: about 0.4 B parameters over 256 patches, per image
    assert 0.6e12 < flops["vision_encoder"] < 0.7e12


def test_random_models_are_the_same_in_every_process_and_thread_count() -> None:
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        a = arch_models.random_model("pi05", "small", 2, seed=3)
        torch.set_num_threads(2)
        b = arch_models.random_model("pi05", "small", 2, seed=3)
    finally:
        torch.set_num_threads(before)
    c = arch_models.random_model("pi05", "small", 2, seed=4)
    for (name, x), y, _z in zip(
        a.state_dict().items(), b.state_dict().values(), c.state_dict().values(), strict=True
    ):
        assert torch.equal(x, y), name
        assert torch.isfinite(x).all(), name
    weights = [k for k, v in a.state_dict().items() if v.dim() == 2]
    assert any(not torch.equal(a.state_dict()[k], c.state_dict()[k]) for k in weights)


def test_a_stage_drawn_alone_has_the_values_of_the_whole_model() -> None:
    """An export process draws only its stage: the same weights the timing process has."""
    whole = arch_models.random_model("pi0", "small", 1, seed=3)
    alone = arch_models.random_model("pi0", "small", 1, seed=3, stage="action_head")
    head = arch_models.build_stages("pi0", alone).modules()["action_head"]
    drawn = {id(p) for p in head.parameters()}
    whole_params = dict(whole.named_parameters())
    checked = 0
    for name, param in alone.named_parameters():
        if id(param) in drawn:
            assert torch.equal(param, whole_params[name]), name
            checked += 1
    assert checked == len(drawn) > 0
    # the vision tower is not the action head's: never written, so not the same values
    vision = arch_models.build_stages("pi0", alone).modules()["vision_encoder"]
    assert not {id(p) for p in vision.parameters()} & drawn


def test_every_package_recipe_is_a_variant() -> None:
    from vla_edge.export.quant_recipes import load_recipes

    names = arch_latency.variant_names()
    assert names["onnx_fp32"] == ("onnx", "fp32")
    for recipe in load_recipes():
        assert names[f"executorch_{recipe}"] == ("executorch", recipe)


def test_a_stage_shrinks_by_its_layers_only() -> None:
    full = arch_models.model_config("pi0", "full", 1)
    fusion = arch_models.model_config("pi0", "full", 1, "fusion", 9)
    assert fusion.paligemma.depth == fusion.expert.depth == 9
    assert fusion.vision.depth == full.vision.depth
    vision = arch_models.model_config("pi0", "full", 1, "vision_encoder", 13)
    assert vision.vision.depth == 13 and vision.paligemma.depth == full.paligemma.depth
    with pytest.raises(ConfigError, match=r"only (\w+, )*pi0, pi05 stages"):
        arch_models.model_config("smolvla", "small", 1, "fusion", 1)
    with pytest.raises(ConfigError, match="image slots"):
        arch_models.model_config("pi0", "small", 4)
    with pytest.raises(ConfigError, match="arch"):
        arch_models.model_config("gr00t", "small", 1)


def test_the_watchdog_stops_a_worker_before_the_machine_runs_out(tmp_path, monkeypatch) -> None:
    # a floor above what the machine has: the first poll finds it "running out"
    monkeypatch.setattr(arch_latency, "MEMORY_FLOOR_MB", 1e12)
    code = "import time; print('step: lowering', flush=True); time.sleep(60)"
    child = arch_latency.Child([sys.executable, "-c", code], 1, tmp_path / "log.txt")
    ran = child.wait(timeout_s=30.0)
    assert ran["stopped"] == "out_of_memory"
    assert ran["result"] is None
    assert ran["wall_s"] < 30.0


def test_a_worker_that_finishes_reports_its_last_json_line(tmp_path) -> None:
    code = "import json; print('step: a', flush=True); print(json.dumps({'x': 1}))"
    ran = arch_latency.Child([sys.executable, "-c", code], 1, tmp_path / "log.txt").wait(30.0)
    assert ran == {**ran, "rc": 0, "stopped": None, "step": "a", "result": {"x": 1}}


@pytest.mark.slow
def test_a_small_pi0_through_eager_torch_and_onnx(tmp_path) -> None:
    out = tmp_path / "bench.json"
    cmd = [
        sys.executable, "-m", "vla_edge.cli", "bench", "latency", "--arch", "pi0", "--size",
        "small", "--cameras", "1", "--threads", "1", "--backend", "torch,onnx", "--runs", "2",
        "--json", str(out), "--work-dir", str(tmp_path / "work"),
    ]  # fmt: skip
    subprocess.run(cmd, check=True, timeout=900)
    report = json.loads(out.read_text())
    model = report["models"]["pi0_small_1cam"]
    assert set(model["flops"]) == {"vision_encoder", "fusion", "action_head"}
    rows = {r["backend"]: r for r in model["results"]}
    assert set(rows) == {"torch", "onnx"}
    for row in rows.values():
        assert row["ok"] and row["runs"] == 2
        assert set(row["stages"]) == set(model["flops"])
        assert row["end_to_end"]["p50_ms"] > 0 and row["peak_rss_mb"] > 0
        assert row["achieved"]["fusion"]["gflops"] > 0
    assert rows["onnx"]["parity"]["rms_pct_of_range_max"] <= 0.1
    export = model["exports"]["onnx_fp32"]
    assert export["complete"] and export["bytes"] > 0
    assert rows["torch"]["gemm_peak_gflops"] > 0
    (row,) = report["summary"]["vs_torch"]
    assert row["variant"] == "onnx_fp32" and row["speed_vs_torch"] > 0


def test_a_stage_exports_under_a_mixed_recipe(tmp_path) -> None:
    """A recipe variant's worker: each stage gets the recipe's scheme for that stage."""
    from vla_edge.bench import arch_worker

    def export(recipe: str, stage: str) -> dict:
        out = tmp_path / recipe
        argv = ["export", "--arch", "pi0", "--size", "small", "--cameras", "1"]
        argv += ["--backend", "executorch", "--quant", recipe, "--stage", stage]
        assert arch_worker.main([*argv, "--out", str(out), "--threads", "1"]) == 0
        return json.loads((out / f"{stage}.entry.json").read_text())

    fp32 = export("fp32", "vision_encoder")
    mixed = export("8da4w_head8", "vision_encoder")
    assert (fp32["quant"], mixed["quant"]) == ("fp32", "8da4w")
    assert mixed["bytes"] < fp32["bytes"]


def test_resume_keeps_the_variants_this_run_did_not_ask_for() -> None:
    import argparse

    def row(backend, quant, threads):
        return {"backend": backend, "quant": quant, "threads": threads, "ok": True}

    previous = {
        "exports": {"onnx_fp32": {"complete": True}, "executorch_fp32": {"complete": False}},
        "results": [row("torch", "fp32", 1), row("onnx", "fp32", 1), row("onnx", "fp32", 2)],
    }
    args = argparse.Namespace(  # onnx_fp32 asked for, but not its backend: kept
        variant_order=[("executorch", "8da4w"), ("onnx", "fp32")],
        backends=("torch", "executorch"),
    )
    entry = {
        "exports": {"executorch_8da4w": {"complete": True}},
        "results": [row("torch", "fp32", 1)],
    }
    arch_latency._keep_unrequested(args, previous, entry)
    assert set(entry["exports"]) == {"executorch_8da4w", "onnx_fp32", "executorch_fp32"}
    assert [(r["backend"], r["threads"]) for r in entry["results"]] == [
        ("torch", 1),  # measured again, not doubled
        ("onnx", 1),
        ("onnx", 2),
    ]


def test_resume_keeps_the_camera_counts_this_run_did_not_ask_for(tmp_path, monkeypatch) -> None:
    import argparse

    out = tmp_path / "bench.json"

    def entry(cameras: int) -> dict:
        flops, weights = {"fusion": 3 * cameras}, {"fusion": 4}
        return {"cameras": cameras, "flops": flops, "fp32_param_bytes": weights, "exports": {}}

    kept = {**entry(3), "results": []}
    out.write_text(json.dumps({"models": {"pi0_small_3cam": kept, "pi0_small_1cam": {}}}))
    measured = {**entry(1), "results": []}

    def run_model(args, cameras, save, previous):
        assert (cameras, previous) == (1, {})
        save(measured)
        return measured

    monkeypatch.setattr(arch_latency, "run_model", run_model)
    args = argparse.Namespace(
        arch="pi0", size="small", backend="torch", threads="1", runs=None, warmup=None,
        work_dir=tmp_path / "work", variants="", stages="vision_encoder", resume=True,
        json=out, cameras="1",
    )  # fmt: skip
    assert arch_latency.run(args) == 0
    report = json.loads(out.read_text())
    assert report["models"] == {"pi0_small_3cam": kept, "pi0_small_1cam": measured}
    assert report["complete"]
