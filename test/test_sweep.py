"""``vla-edge sweep``: the spec, the matrix, one store, the tables and the plots."""

from __future__ import annotations

import csv
import json

import pytest
import yaml

from vla_edge.config.paths import share_dir
from vla_edge.core.errors import ConfigError
from vla_edge.sim import sweep
from vla_edge.sim.episodes import ResultsStoreError


def _spec(tmp_path, **fields):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({"name": "t", **fields}))
    return path


def test_a_bad_spec_field_is_named(tmp_path) -> None:
    with pytest.raises(ConfigError, match="delay_ms"):
        sweep.load_spec(_spec(tmp_path, delay_ms=[0]))
    with pytest.raises(ConfigError, match="schemes"):
        sweep.load_spec(_spec(tmp_path, schemes=["fast"]))
    with pytest.raises(ConfigError, match="recipes: 'int3'"):
        sweep.load_spec(_spec(tmp_path, recipes=["int3"]))
    with pytest.raises(ConfigError, match="no_such_task"):
        sweep.load_spec(_spec(tmp_path, tasks=["no_such_task"]))
    with pytest.raises(ConfigError, match="delays_ms"):
        sweep.load_spec(_spec(tmp_path, delays_ms=[-5]))


def test_the_shipped_side_by_side_spec_is_the_schemes_by_merges_by_delays(tmp_path) -> None:
    spec = sweep.load_spec(share_dir() / "config" / "sweeps" / "side_by_side.yaml")
    programs = {v: v[0] for v in sweep.variants(spec)}
    matrix = sweep.jobs(spec, programs)
    # sync and lerobot bring their own merge; ours runs each of the four
    assert len(matrix) == (1 + 1 + 4) * 4
    labels = {(m["labels"]["scheme"], m["labels"]["merge"]) for m in matrix}
    assert ("sync", "replace") in labels and ("lerobot", "weighted") in labels
    assert {m for s, m in labels if s == "async"} == {"replace", "weighted", "ensemble", "prefix"}
    assert {m["job"].settings.delay_s for m in matrix} == {0.0, 0.1, 0.2, 0.3}


def _episode_ids(spec: sweep.SweepSpec) -> set[str]:
    from vla_edge.sim.episodes import episode_key, key_id

    matrix = sweep.jobs(spec, {v: v[0] for v in sweep.variants(spec)})
    return {
        key_id(episode_key(episode))
        for entry in matrix
        for episode in sweep.job_episodes(spec, entry["job"])
    }


def test_the_20_episode_side_by_side_is_the_first_part_of_the_50_episode_one() -> None:
    # an episode's key names neither the sweep nor its size, so side_by_side.yaml with
    # --resume on side_by_side_20.yaml's store runs only init states 20-49
    folder = share_dir() / "config" / "sweeps"
    short = _episode_ids(sweep.load_spec(folder / "side_by_side_20.yaml"))
    full = _episode_ids(sweep.load_spec(folder / "side_by_side.yaml"))
    cells, tasks = (1 + 1 + 4) * 4, 6
    assert len(short) == cells * tasks * 20 and len(full) == cells * tasks * 50
    assert short < full


def test_torch_runs_one_recipe_and_an_export_runs_as_it_is(tmp_path) -> None:
    spec = sweep.load_spec(
        _spec(
            tmp_path,
            policies=["bundled", str(tmp_path / "my_export")],
            backends=["torch", "executorch"],
            recipes=["fp32", "8da8w"],
        )
    )
    assert sweep.variants(spec) == [
        ("bundled", "torch", "fp32"),
        ("bundled", "executorch", "fp32"),
        ("bundled", "executorch", "8da8w"),
        (str(tmp_path / "my_export"), "as_is", "as_is"),
    ]
    folder = sweep.export_dir(tmp_path, "bundled", "executorch", "8da8w")
    assert folder == tmp_path / "exports" / "bundled_executorch_8da8w"


@pytest.mark.slow
def test_a_small_sweep_writes_its_tables_and_plots_and_resumes(tmp_path) -> None:
    from vla_edge.cli import main as cli_main

    spec = _spec(
        tmp_path,
        policies=["expert"],
        tasks=["lift_green_block"],
        delays_ms=[0, 200],
        schemes=["sync", "async"],
        merges=["replace"],
        episodes=2,
        image_size=32,
    )
    out = tmp_path / "out"
    assert cli_main(["sweep", str(spec), "--out", str(out), "--workers", "2", "--quiet"]) == 0
    rows = list(csv.DictReader((out / "summary.csv").open()))
    assert len(rows) == 4
    assert {(r["scheme"], r["delay_ms"]) for r in rows} == {
        (s, d) for s in ("sync", "async") for d in ("0.0", "200.0")
    }
    for row in rows:
        assert int(row["episodes"]) == 2
        assert float(row["wilson_low"]) <= float(row["success_rate"]) <= float(row["wilson_high"])
    assert "| policy |" in (out / "summary.md").read_text()
    for name in ("success_vs_delay.png", "completion_vs_delay.png", "success_by_variant.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    report = json.loads((out / "sweep.json").read_text())
    assert report["episodes"] == 8 and len(report["rows"]) == 4
    store = out / "episodes.jsonl"
    assert len(store.read_text().splitlines()) == 8
    # the same sweep again must resume, and then has nothing left to run
    with pytest.raises(ResultsStoreError, match="--resume"):
        cli_main(["sweep", str(spec), "--out", str(out), "--quiet"])
    assert cli_main(["sweep", str(spec), "--out", str(out), "--resume", "--quiet"]) == 0
    assert len(store.read_text().splitlines()) == 8
    assert json.loads((out / "sweep.json").read_text())["rows"] == report["rows"]
