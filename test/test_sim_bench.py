"""``vla-edge bench sim`` writes the documented JSON."""

import json

import pytest

from vla_edge.cli import main


def test_bench_sim_writes_step_render_percentiles_per_size(tmp_path):
    out = tmp_path / "sim.json"
    assert main(["bench", "sim", "--json", str(out), "--sizes", "16", "24", "--steps", "3"]) == 0
    data = json.loads(out.read_text())
    for side in ("16", "24"):
        entry = data["step_render_ms"][side]
        assert entry["n"] == 3
        assert 0.0 < entry["p50"] <= entry["p90"] + 1e-9
        # the whole policy step costs at least its physics and its render
        assert entry["mean"] >= data["step_ms"][side]["mean"]
        assert entry["mean"] >= data["render_ms"][side]["mean"]
    assert data["settings"]["cameras"] == ["agentview", "wrist"]


def test_bench_sim_refuses_a_bad_size(tmp_path):
    with pytest.raises(SystemExit, match="--sizes value 4"):
        main(["bench", "sim", "--json", str(tmp_path / "x.json"), "--sizes", "4"])
