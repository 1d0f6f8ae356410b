"""``vla-edge faults run`` and ``vla-edge bench faults`` write the JSON other tools read."""

from __future__ import annotations

import json

import pytest

from vla_edge.cli import main
from vla_edge.config.paths import config_path

pytest.importorskip("mujoco")

FIELDS = {
    "passed",
    "detected",
    "time_to_detect_ms",
    "time_to_halt_ms",
    "peak_velocity",
    "peak_acceleration",
    "peak_jerk",
    "limit_violations",
    "recovered",
}


@pytest.mark.slow
def test_faults_run_writes_the_documented_json_and_one_png_per_scenario(tmp_path):
    out = tmp_path / "faults.json"
    plots = tmp_path / "plots"
    code = main(
        [
            "faults",
            "run",
            "--scenarios",
            "joint_state_loss",
            "estop_reset",
            "--json",
            str(out),
            "--plots",
            str(plots),
            "--quiet",
        ]
    )
    result = json.loads(out.read_text())
    assert code == 0
    assert (result["passed"], result["failed"]) == (2, 0)
    assert set(result["scenarios"]) == {"joint_state_loss", "estop_reset"}
    for name, r in result["scenarios"].items():
        assert FIELDS <= set(r), FIELDS - set(r)
        assert r["limit_violations"] == 0
        assert (plots / f"{name}.png").stat().st_size > 10_000
    assert result["scenarios"]["estop_reset"]["time_to_detect_ms"] <= 20.0


def test_faults_run_exits_nonzero_when_a_scenario_fails(tmp_path):
    # joint-state loss ends in category 1; a scenario that expects category 0 must fail
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    text = (config_path("faults/joint_state_loss.yaml")).read_text()
    assert "stop_category: cat1" in text
    (scenarios / "joint_state_loss.yaml").write_text(
        text.replace("stop_category: cat1", "stop_category: cat0")
    )
    out = tmp_path / "faults.json"
    code = main(
        [
            "faults",
            "run",
            "--scenario-dir",
            str(scenarios),
            "--scenarios",
            "joint_state_loss",
            "--json",
            str(out),
            "--quiet",
        ]
    )
    result = json.loads(out.read_text())
    assert code == 1
    assert result["failed"] == 1
    assert result["scenarios"]["joint_state_loss"]["failures"]


def test_unknown_scenario_is_a_named_error(tmp_path):
    from vla_edge.core.errors import ConfigError

    with pytest.raises(ConfigError, match="no_such_fault"):
        main(["faults", "run", "--scenarios", "no_such_fault", "--json", str(tmp_path / "x")])


def test_fault_bench_reports_both_conditions_and_the_success_drop(tmp_path):
    out = tmp_path / "bench.json"
    code = main(["bench", "faults", "--episodes", "1", "--quiet", "--json", str(out)])
    result = json.loads(out.read_text())
    assert set(result["conditions"]) == {"fault_free", "camera_delay_50ms"}
    assert result["success_drop_points"] == pytest.approx(
        100
        * (
            result["conditions"]["fault_free"]["success_rate"]
            - result["conditions"]["camera_delay_50ms"]["success_rate"]
        )
    )
    assert code == (0 if result["within_bound"] else 1)
