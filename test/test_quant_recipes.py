"""Quantisation recipes (config/quant_recipes.yaml) and the export's parity gate."""

from __future__ import annotations

import json
import typing
from pathlib import Path

import numpy as np
import pytest
import torch
from export_fixtures import exported, tiny_checkpoint
from torch import nn

from vla_edge.archs.host import TensorSpec
from vla_edge.cli import main as cli_main
from vla_edge.core.errors import ConfigError, ParityGateError
from vla_edge.export.executorch_export import export_stage_executorch
from vla_edge.export.manifest import QUANTS, load_manifest
from vla_edge.export.quant_recipes import (
    QuantRecipe,
    Scheme,
    StageQuant,
    load_recipes,
    resolve_recipe,
)
from vla_edge.export.stages import StageProgram
from vla_edge.runners.parity import check_parity, compare_chunks

torch.set_num_threads(1)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "recipes.yaml"
    path.write_text(text)
    return path


# ---------------------------------------------------------------- the recipes file
def test_the_package_recipes_load_and_cover_every_scheme() -> None:
    recipes = load_recipes()
    assert {"fp32", "8da4w", "8da8w", "int8wo", "fp16"} <= set(recipes)
    assert set(typing.get_args(Scheme)) == set(QUANTS)
    assert recipes["fp32"].is_fp32 and not recipes["8da8w"].is_fp32
    assert recipes["8da4w"].stage("vision_encoder") == StageQuant(
        scheme="8da4w", group_size=32, embeddings="int8", convs="int8"
    )
    assert all(r.description for r in recipes.values())


def test_a_stage_override_changes_only_its_fields(tmp_path: Path) -> None:
    recipe = resolve_recipe(
        "mixed",
        _write(
            tmp_path,
            "recipes:\n  mixed:\n    scheme: 8da4w\n    group_size: 64\n    embeddings: int8\n"
            "    stages:\n      action_head: {scheme: 8da8w, keep_fp32: [action_out]}\n",
        ),
    )
    head, fusion = recipe.stage("action_head"), recipe.stage("fusion")
    assert (head.scheme, head.group_size, head.embeddings) == ("8da8w", 64, "int8")
    assert head.keep_fp32 == ("action_out",) and fusion.keep_fp32 == ()
    assert not head.selects("action_out") and head.selects("blocks.0.mlp.fc1")
    section = recipe.manifest_section(["fusion", "action_head"])
    assert section["name"] == "mixed" and section["stages"]["action_head"]["scheme"] == "8da8w"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("recipes:\n  r: {scheme: int3}\n", "recipes.r.scheme"),
        ("recipes:\n  r: {scheme: 8da4w, group_size: 48}\n", "group_size = 48"),
        ("recipes:\n  r: {scheme: fp16, convs: int8}\n", "fp16"),
        ("recipes:\n  r: {scheme: fp32, calibration_frames: -1}\n", "calibration_frames"),
        ("recipes:\n  r: {scheme: fp32, colour: red}\n", "recipes.r.colour"),
        ("recipes:\n  r: {stages: {fusion: {scheme: 8da5w}}}\n", "recipes.r"),
        ("recipes: []\n", "field recipes"),
    ],
)
def test_a_bad_recipe_field_is_a_named_config_error(tmp_path: Path, text: str, words: str) -> None:
    with pytest.raises(ConfigError, match=words.replace(".", r"\.")):
        load_recipes(_write(tmp_path, text))


def test_an_unknown_recipe_is_refused_with_the_names_there_are() -> None:
    with pytest.raises(ConfigError, match=r"quant = '4bit'.*recipes: fp32, 8da4w"):
        resolve_recipe("4bit")


def test_a_recipe_naming_a_stage_the_model_lacks_is_refused(tmp_path: Path) -> None:
    recipe = QuantRecipe(name="r", stages={"decoder": {"scheme": "8da8w"}})
    with pytest.raises(ConfigError, match=r"stages\.decoder names no stage.*action_head"):
        recipe.check_stages(("vision_encoder", "fusion", "action_head"))


def test_onnx_takes_only_unquantised_recipes(tmp_path: Path) -> None:
    code = cli_main(
        ["export", "--checkpoint", str(tiny_checkpoint(tmp_path)), "--backend", "onnx"]
        + ["--quant", "8da8w", "--out", str(tmp_path / "out")]
    )
    assert code == 2 and not (tmp_path / "out").exists()


# ---------------------------------------------------------------- each scheme lowered
class _Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(64, 128)
        self.down = nn.Linear(128, 64)
        self.out = nn.Linear(64, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.down(torch.relu(self.up(x))))


def _stage() -> StageProgram:
    torch.manual_seed(0)
    x = torch.randn(4, 64)
    return StageProgram(
        "fusion",
        _Mlp().eval(),
        (x,),
        (TensorSpec("x", (4, 64), "float32", "host:x"),),
        (TensorSpec("y", (4, 8), "float32"),),
    )


@pytest.mark.parametrize(
    ("settings", "quantized", "max_rel"),
    [
        (StageQuant(), 0, 1e-5),
        (StageQuant(scheme="8da8w"), 3, 0.05),
        (StageQuant(scheme="8da4w", group_size=32), 3, 0.2),
        (StageQuant(scheme="int8wo"), 3, 0.05),
        (StageQuant(scheme="fp16"), 0, 0.01),
        (StageQuant(scheme="8da8w", keep_fp32=("out",)), 2, 0.05),
        (StageQuant(scheme="8da8w", layers=("up",)), 1, 0.05),
    ],
)
def test_each_scheme_lowers_to_a_program_close_to_torch(
    tmp_path: Path, settings: StageQuant, quantized: int, max_rel: float
) -> None:
    from executorch.extension.pybindings.portable_lib import _load_for_executorch

    stage = _stage()
    details = export_stage_executorch(stage, tmp_path / "s.pte", settings)
    assert details["quantized_linears"] == quantized
    if settings.scheme in ("8da8w", "8da4w", "int8wo"):
        assert len(details["fp32_linear_names"]) == 3 - quantized
    if settings.scheme != "int8wo":  # its widening cast runs outside XNNPACK, by design
        assert details["delegation"]["delegated_subgraphs"] >= 1
    x = torch.randn(16, 64, generator=torch.Generator().manual_seed(1))[:4]
    with torch.no_grad():
        reference = stage.module(x)
    got = _load_for_executorch(str(tmp_path / "s.pte")).forward([x])[0]
    rel = float((got - reference).abs().max() / reference.abs().max())
    assert rel < max_rel


# ---------------------------------------------------------------- the parity gate
def test_compare_chunks_reports_each_dimension_in_percent_of_its_range() -> None:
    reference = np.zeros((2, 3, 2))
    reference[0, :, 0], reference[1, :, 0] = 0.0, 2.0  # dim 0 spans 2, dim 1 nothing
    candidate = reference.copy()
    candidate[..., 0] += 0.2
    got = compare_chunks(reference, candidate)
    assert got["rms_pct_of_range"][0] == pytest.approx(10.0)
    assert got["rms_pct_of_range"][1] == 0.0 and got["max_abs"] == pytest.approx(0.2)


def test_the_gate_names_every_joint_over_the_bound() -> None:
    report = {"dims": ["j0", "j1", "j2"], "rms_pct_of_range": [0.5, 6.0, 9.0], "observations": 4}
    check_parity(report, 10.0)
    with pytest.raises(ParityGateError, match=r"2 of 3 joints \(j1 6 %, j2 9 %\).*j0 0\.5"):
        check_parity(report, 5.0)


def test_non_finite_actions_are_over_any_bound() -> None:
    reference = np.linspace(0.0, 1.0, 12).reshape(2, 3, 2)
    candidate = reference.copy()
    candidate[0, 1, 1] = np.nan
    got = compare_chunks(reference, candidate)
    assert got["non_finite"] == 1 and got["rms_pct_of_range"][0] == 0.0
    report = {"dims": ["j0", "j1"], "rms_pct_of_range": got["rms_pct_of_range"], "observations": 2}
    with pytest.raises(ParityGateError, match=r"1 of 2 joints \(j1 nan %\)"):
        check_parity(report, 100.0)


def _export(tmp_path: Path, out: Path, quant: str, *extra: str) -> int:
    onnx_dir = exported(tmp_path, "onnx")
    argv = ["export", "--checkpoint", str(tiny_checkpoint(tmp_path)), "--backend", "executorch"]
    argv += ["--quant", quant, "--out", str(out), "--threads", "1"]
    argv += ["--language-backend", "onnx", "--reuse-language-from", str(onnx_dir)]
    argv += ["--calibration-frames", "4", "--parity-samples", "6", *extra]
    return cli_main(argv)


@pytest.mark.slow
def test_a_mixed_recipe_is_recorded_and_its_parity_kept_in_the_manifest(tmp_path: Path) -> None:
    recipes = _write(
        tmp_path,
        "recipes:\n  edge:\n    description: int8 everywhere but the action head\n"
        "    scheme: 8da8w\n    convs: int8\n    stages:\n      action_head: {scheme: fp32}\n",
    )
    out = tmp_path / "edge"
    code = _export(tmp_path, out, "edge", "--quant-recipes", str(recipes), "--max-parity-pct", "50")
    assert code == 0
    data = load_manifest(out).data
    assert data["quant"] == "edge"
    stages = data["quant_recipe"]["stages"]
    assert stages["action_head"]["scheme"] == "fp32" and stages["fusion"]["scheme"] == "8da8w"
    assert stages["language_encoder"]["scheme"] == "fp32"  # the reused ONNX program
    assert data["stages"]["fusion"]["quant"] == "8da8w"
    assert data["stages"]["fusion"]["quantized_linears"] > 0
    assert data["stages"]["action_head"]["quantized_linears"] == 0
    assert data["stages"]["vision_encoder"]["int8_convs"] > 0
    parity = data["parity"]
    assert parity["observations"] == 6 and parity["with_prefix"] == 2
    assert len(parity["rms_pct_of_range"]) == len(data["joint_names"])
    assert 0.0 < parity["rms_pct_of_range_max"] <= 50.0


@pytest.mark.slow
def test_an_export_over_the_parity_bound_is_refused_and_never_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from vla_edge.runners.factory import make_runner

    out = tmp_path / "q"
    assert _export(tmp_path, out, "8da4w", "--max-parity-pct", "1e-6") == 2
    err = capsys.readouterr().err
    assert "--max-parity-pct 1e-06 %" in err and "joint1" in err
    assert not (out / "manifest.json").exists()
    refused = json.loads((out / "manifest.refused.json").read_text())
    assert refused["parity"]["rms_pct_of_range_max"] > 1e-6
    with pytest.raises(ConfigError, match="no manifest.json"):
        make_runner(str(out))


def test_a_bad_gate_bound_is_refused_before_anything_exports(tmp_path: Path) -> None:
    out = tmp_path / "none"
    assert _export(tmp_path, out, "fp32", "--max-parity-pct", "0") == 2
    assert not out.exists()
