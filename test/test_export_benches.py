"""``vla-edge bench parity`` and ``bench latency`` on the tiny exports."""

import json

import pytest
from export_fixtures import exported, tiny_checkpoint
from policy_synthetic import write_dataset

from vla_edge.cli import main as cli_main


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    path = tmp_path_factory.getbasetemp() / "export_fixtures"
    path.mkdir(exist_ok=True)
    return path


@pytest.mark.slow  # exports the fixture model for ExecuTorch (about a minute)
def test_parity_bench_reports_per_dimension_error_for_each_export(root, tmp_path) -> None:
    data = write_dataset(tmp_path / "demos.hdf5", episodes_per_task=1, steps=12)
    out = tmp_path / "parity.json"
    argv = ["bench", "parity", "--checkpoint", str(tiny_checkpoint(root)), "--json", str(out)]
    argv += ["--data", str(data), "--samples", "9", "--threads", "1"]
    argv += ["--export-root", str(tmp_path / "none")]
    argv += ["--export", f"onnx_fp32={exported(root, 'onnx')}"]
    argv += ["--export", f"executorch_fp32={exported(root, 'executorch')}"]
    assert cli_main(argv) == 0
    report = json.loads(out.read_text())
    assert report["observations"] == {
        "source": f"data:{data}",
        "count": 9,
        "with_prefix": 3,
        "noise_seed": 0,
    }
    assert set(report["pairs"]) == {"onnx_fp32", "executorch_fp32"}
    assert "executorch_8da4w" in report["skipped"]
    for pair in report["pairs"].values():
        assert len(pair["rms_pct_of_range"]) == 7
        assert pair["rms_pct_of_range_max"] == max(pair["rms_pct_of_range"])
        assert pair["rms_pct_of_range_max"] < 0.1 and pair["meets_target"]
        assert 0.0 < pair["max_abs"] < 1e-3
        assert pair["cosine"] > 0.9999


def test_parity_bench_without_any_export_names_the_commands_and_writes_nothing(
    root, tmp_path, capsys
) -> None:
    out = tmp_path / "parity.json"
    argv = ["bench", "parity", "--checkpoint", str(tiny_checkpoint(root)), "--json", str(out)]
    argv += ["--export-root", str(tmp_path / "none")]
    assert cli_main(argv) == 2
    assert not out.exists()
    err = capsys.readouterr().err
    assert "no export to compare" in err and "--export-missing" in err
    assert "vla-edge export --checkpoint" in err and "--quant 8da4w" in err


@pytest.mark.slow
def test_latency_bench_times_each_backend_in_its_own_process(root, tmp_path) -> None:
    exported(root, "onnx")
    out = tmp_path / "latency.json"
    argv = ["bench", "latency", "--json", str(out), "--backend", "torch,onnx"]
    argv += ["--checkpoint", str(tiny_checkpoint(root)), "--export-root", str(root)]
    argv += ["--no-grid", "--runs", "12", "--warmup", "2", "--threads", "1"]
    argv += ["--timeout-s", "240"]  # a hung worker is a named failure, not the suite's timeout
    assert cli_main(argv) == 0
    report = json.loads(out.read_text())
    rows = {r["backend"]: r for r in report["results"]}
    assert set(rows) == {"torch", "onnx"}
    for row in rows.values():
        assert row["cameras"] == 2 and row["threads"] == 1 and row["trained"] is True
        assert set(row["stages"]) == {"language_encoder", "vision_encoder", "fusion", "action_head"}
        assert row["end_to_end"]["n"] == 12
        assert 0.0 < row["end_to_end"]["p50_ms"] <= row["end_to_end"]["p95_ms"]
        assert row["rss_mb"] > row["rss_before_load_mb"] > 0.0
    assert rows["torch"]["torch_imported"] is True
    assert rows["onnx"]["torch_imported"] is False
    assert report["artifact_bytes"]["native"]["onnx_fp32"]["total"] > 0
    assert report["machine"]["logical_cores"] >= 1 and report["machine"]["python"]
    speedup = report["summary"]["speedup_vs_torch"][0]
    assert speedup["fastest"] == "onnx_fp32" and speedup["speedup"] > 0.0
