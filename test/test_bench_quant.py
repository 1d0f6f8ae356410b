"""``vla-edge bench quant``: each variant differs from fp32 in one place, measured side by side."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from export_fixtures import tiny_checkpoint

from vla_edge.bench.quant_bench import STAGES, variant_recipe
from vla_edge.cli import main as cli_main
from vla_edge.core.errors import ConfigError
from vla_edge.export.quant_recipes import load_recipes


@pytest.fixture(scope="module")
def recipes():  # noqa: ANN201
    return load_recipes()


def test_a_stage_variant_quantises_that_stage_only(recipes) -> None:
    recipe = variant_recipe("stage:fusion", recipes["8da4w"], recipes)
    assert recipe.stage("fusion") == recipes["8da4w"].stage("fusion")
    assert all(recipe.stage(s).is_fp32 for s in STAGES if s != "fusion")


def test_a_group_variant_quantises_its_layers_only(recipes) -> None:
    out = variant_recipe("group:action_out", recipes["8da8w"], recipes)
    head = out.stage("action_head")
    assert head.scheme == "8da8w" and head.selects("action_out")
    assert not head.selects("blocks.0.self_attn.q") and head.embeddings == "fp32"
    assert all(out.stage(s).is_fp32 for s in STAGES if s != "action_head")
    conv = variant_recipe("group:first_conv", recipes["8da4w"], recipes).stage("vision_encoder")
    assert (conv.scheme, conv.convs) == ("fp32", "int8")
    assert conv.selects("trunk.0") and not conv.selects("trunk.3")


def test_the_whole_recipe_and_named_recipes_are_variants_too(recipes) -> None:
    assert variant_recipe("all", recipes["8da4w"], recipes).stage("fusion").scheme == "8da4w"
    assert variant_recipe("recipe:8da8w", recipes["8da4w"], recipes) == recipes["8da8w"]
    assert variant_recipe("fp32", recipes["8da4w"], recipes).is_fp32


@pytest.mark.parametrize("name", ["stage:decoder", "group:lm_head", "recipe:int3", "half"])
def test_an_unknown_variant_is_a_named_error(recipes, name: str) -> None:
    with pytest.raises(ConfigError, match=name.split(":")[-1]):
        variant_recipe(name, recipes["8da4w"], recipes)


@pytest.mark.slow
def test_the_bench_reports_parity_bytes_and_latency_per_variant(tmp_path: Path) -> None:
    out = tmp_path / "quant.json"
    argv = ["bench", "quant", "--checkpoint", str(tiny_checkpoint(tmp_path)), "--json", str(out)]
    argv += ["--work-dir", str(tmp_path / "work"), "--variants", "fp32,stage:action_head"]
    argv += ["--no-eval", "--parity-samples", "3", "--latency-runs", "2", "--latency-rounds", "1"]
    argv += ["--threads", "1"]
    assert cli_main(argv) == 0
    report = json.loads(out.read_text())
    assert report["complete"] and report["recipe"]["name"] == "8da4w"
    fp32, head = report["variants"]["fp32"], report["variants"]["stage:action_head"]
    assert fp32["parity"]["rms_pct_of_range_max"] < 0.1
    assert 0.1 < head["parity"]["rms_pct_of_range_max"] < 10.0
    assert head["quantized_linears"]["action_head"] > 0
    assert head["quantized_linears"]["fusion"] == 0
    assert head["bytes_vs_fp32"] < 1.0 and fp32["bytes_vs_fp32"] == 1.0
    assert fp32["latency_ms"]["n"] == 2 and head["latency_ms"]["p50"] > 0
    manifest = json.loads((Path(head["export_dir"]) / "manifest.json").read_text())
    assert manifest["stages"]["fusion"]["reused_from"] == fp32["export_dir"]
