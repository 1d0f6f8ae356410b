"""``vla-edge bench control`` writes the fields other tools read."""

import json
from pathlib import Path

from vla_edge.cli import main


def test_bench_control_writes_p50_p99_for_controller_safety_and_total(tmp_path: Path) -> None:
    out = tmp_path / "bench" / "control.json"
    rc = main(["bench", "control", "--json", str(out), "--iterations", "300", "--warmup", "20"])
    assert rc == 0
    result = json.loads(out.read_text())
    for key in ("controller_step_us", "safety_step_us", "total_step_us"):
        assert 0.0 < result[key]["p50"] <= result[key]["p99"]
    assert result["iterations"] == 300
    assert result["action_dim"] == 7
    assert result["chunks_rejected"] == 0
    assert result["safety_state"] == "none"
    assert result["machine"]["cpu_count"] >= 1
