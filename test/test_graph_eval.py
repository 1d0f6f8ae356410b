"""``vla-edge eval --graph`` and ``--compare``: the evaluator's episodes through the real graph.

The fast tests build the graph JSON from a soak record and compare two results; the ``ros``
test runs two tasks through the real graph (the scripted expert stands in for the policy:
fast to start), homing the arm between the episodes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from ros_test_domain import DomainLease

import vla_edge.bench.soak as st
from vla_edge.bench.graph_eval import (
    compare,
    compare_table,
    graph_episodes,
    graph_eval_json,
    pool,
)
from vla_edge.bench.soak_report import build_report
from vla_edge.cli import main
from vla_edge.core.errors import ConfigError
from vla_edge.sim.episodes import EvalJob
from vla_edge.sim.evaluator import EvalSettings, difference_interval

TASKS = ["pick_red_block_into_bowl", "lift_green_block"]


def test_the_graph_runs_the_evaluators_episodes_in_its_order() -> None:
    specs = graph_episodes(TASKS, 3)
    assert [(s.task, s.init_state_id) for s in specs] == [(t, i) for t in TASKS for i in range(3)]
    assert all(s.switch_at_s is None for s in specs)
    listed = st.ListedEpisodes(specs[:2])
    assert [listed.next(), listed.next(), listed.next()] == [specs[0], specs[1], None]


def record_of(results: list[tuple[str, int, bool, float]]) -> st.SoakRecord:
    """A finished graph run: one episode per ``(task, init, success, seconds)``."""
    record = st.SoakRecord()
    t = 0.0
    for i, (task, init, success, seconds) in enumerate(results, 1):
        end = t + seconds
        record.episodes.append(
            st.Episode(
                i,
                task,
                init,
                25.0,
                t,
                t_end_s=end,
                success=success,
                success_t_s=end if success else None,
                end="success" if success else "budget",
            )
        )
        t = end + 1.0
    record.duration_s = t
    record.chunk_ages = [(1.0, 20.0), (2.0, 40.0)]
    return record


SETTINGS = {
    "duration_s": 600.0,
    "window_s": 600.0,
    "warmup_s": 0.0,
    "recovery_s": 3.0,
    "faults": [],
}


def test_the_graph_json_has_the_evaluators_fields_and_the_graphs_own() -> None:
    record = record_of(
        [(TASKS[0], 0, True, 6.0), (TASKS[0], 1, False, 25.0), (TASKS[1], 0, True, 4.0)]
    )
    report = build_report(record, SETTINGS, {"host": "test"})
    job = EvalJob(policy="expert")
    result = graph_eval_json(job, TASKS, 2, report)
    pick, lift = result["tasks"][TASKS[0]], result["tasks"][TASKS[1]]
    assert (pick["successes"], pick["episodes"], pick["success_rate"]) == (1, 2, 0.5)
    assert pick["mean_completion_time_s"] == pytest.approx(6.0)
    assert pick["init_states"] == [0, 1]
    assert (lift["successes"], lift["episodes"]) == (1, 1)
    assert 0.0 < pick["wilson_95"][0] < 0.5 < pick["wilson_95"][1] < 1.0
    assert result["mean_success"] == pytest.approx(0.75)
    assert result["settings"]["virtual_time"] is False
    assert result["settings"]["controller"]["max_chunk_age_s"] > 0  # what the graph ran with
    assert result["graph"]["chunk_age_ms"]["count"] == 2
    assert result["graph"]["episodes"]["finished"] == 3


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        (EvalSettings(delay_s=0.2), "delay_ms"),
        (EvalSettings(scheme="sync"), "scheme"),
        (EvalSettings(instructions="paraphrase"), "instructions"),
    ],
)
def test_what_the_graph_does_not_run_is_refused_before_it_starts(settings, words, tmp_path):
    from vla_edge.bench.graph_eval import run_graph_eval

    job = EvalJob(policy="expert", settings=settings)
    with pytest.raises(ConfigError, match=words):
        run_graph_eval(job, TASKS, 1, tmp_path / "logs")


def eval_json(successes: dict[str, tuple[int, int]], virtual: bool) -> dict:
    return {
        "tasks": {t: {"successes": s, "episodes": n} for t, (s, n) in successes.items()},
        "settings": {"virtual_time": virtual},
    }


def test_compare_puts_two_runs_side_by_side_with_wilson_intervals() -> None:
    a = eval_json({TASKS[0]: (9, 10), TASKS[1]: (10, 10)}, virtual=True)
    b = eval_json({TASKS[0]: (2, 10), "push_blue_block_to_target": (3, 10)}, virtual=False)
    rows = compare(a, b)
    assert [r["task"] for r in rows] == [*TASKS, "push_blue_block_to_target", "overall"]
    assert rows[0]["overlap"] is False  # 9/10 against 2/10
    assert rows[1]["b"] is None and rows[1]["overlap"] is None
    assert rows[-1]["a"]["successes"] == 19 and rows[-1]["b"]["episodes"] == 20
    assert rows[1]["difference"] is None
    assert rows[0]["difference"]["points"] == pytest.approx(-70.0)
    low, high = rows[0]["difference"]["ci_95_points"]
    assert low < -70.0 < high < 0.0  # 9/10 against 2/10: clearly lower
    table = compare_table(rows, "A", "B")
    assert (
        "| pick_red_block_into_bowl | 9/10 (90 %, 60–98) | 2/10 (20 %, 6–51) | no | "
        f"-70 ({low:+.0f} to {high:+.0f}) |" in table
    )
    assert "| lift_green_block | 10/10 (100 %, 72–100) | – | – | – |" in table


def test_the_difference_interval_is_newcombes_hybrid_score_interval() -> None:
    # Newcombe (1998), Statistics in Medicine 17:873, table II, example (a):
    # 56/70 against 48/80, method 10: 0.0524 to 0.3339
    low, high = difference_interval(48, 80, 56, 70)
    assert (low, high) == pytest.approx((0.0524, 0.3339), abs=1e-4)
    # the second rate minus the first: swapping the sides mirrors the interval
    assert difference_interval(56, 70, 48, 80) == pytest.approx((-high, -low))
    assert difference_interval(10, 10, 10, 10)[0] < 0.0 < difference_interval(10, 10, 10, 10)[1]
    assert -1.0 <= difference_interval(10, 10, 0, 10)[0] <= difference_interval(10, 10, 0, 10)[1]
    with pytest.raises(ConfigError, match="needs episodes on both sides"):
        difference_interval(0, 0, 3, 10)


def test_pool_adds_up_runs_of_the_same_episodes() -> None:
    runs = [
        eval_json({TASKS[0]: (9, 10), TASKS[1]: (4, 10)}, virtual=True),
        eval_json({TASKS[0]: (10, 10), TASKS[1]: (6, 10)}, virtual=True),
    ]
    pooled = pool(runs)
    assert pooled["tasks"][TASKS[0]] == {"successes": 19, "episodes": 20}
    assert pooled["tasks"][TASKS[1]] == {"successes": 10, "episodes": 20}
    assert pooled["settings"] == {"virtual_time": True, "runs": 2}
    mixed = pool([runs[0], eval_json({TASKS[0]: (1, 10)}, virtual=False)])
    assert "virtual_time" not in mixed["settings"]
    with pytest.raises(ConfigError, match="no evaluation runs"):
        pool([])


def test_vla_edge_eval_compare_prints_the_table_and_names_a_bad_file(tmp_path, capsys) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(eval_json({TASKS[0]: (5, 10)}, virtual=True)))
    b.write_text(json.dumps(eval_json({TASKS[0]: (4, 10)}, virtual=False)))
    assert main(["eval", "--compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "a.json (virtual time)" in out and "b.json (graph)" in out and "| yes |" in out
    a2 = tmp_path / "a2.json"
    a2.write_text(json.dumps(eval_json({TASKS[0]: (7, 10)}, virtual=True)))
    assert main(["eval", "--compare", f"{a},{a2}", str(b)]) == 0
    out = capsys.readouterr().out
    assert "2 runs pooled (virtual time)" in out and "| 12/20 (60 %, 39–78) |" in out
    b.write_text("{}")
    with pytest.raises(ConfigError, match=r"--compare .*b.json: not an evaluation JSON"):
        main(["eval", "--compare", str(a), str(b)])
    with pytest.raises(ConfigError, match="no evaluation JSON named"):
        main(["eval", "--compare", ",", str(a)])


@pytest.mark.ros
def test_graph_eval_runs_two_tasks_in_the_real_graph_homing_between_them(tmp_path) -> None:
    lease = DomainLease()
    out = tmp_path / "graph.json"
    try:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "vla_edge.cli",
                "eval",
                "--graph",
                "--policy",
                "expert",
                "--tasks",
                *TASKS,
                "--episodes",
                "1",
                "--json",
                str(out),
                "--log-dir",
                str(tmp_path / "logs"),
                "--quiet",
            ],
            env=lease.env(),
            capture_output=True,
            text=True,
            timeout=300,
            cwd=Path(__file__).resolve().parents[1],
        )
    finally:
        lease.release()
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(out.read_text())
    assert report["complete"] and report["settings"]["virtual_time"] is False
    ran = report["graph"]["episodes_as_run"]
    assert [(e["task"], e["init_state_id"]) for e in ran] == [(t, 0) for t in TASKS]
    assert report["graph"]["reset_failures"] == []  # each reset homed the arm first
    for task in TASKS:  # the scripted expert solves both
        assert report["tasks"][task]["successes"] == 1, report["tasks"]
    graph = report["graph"]
    assert graph["chunks_accepted"] > 0 and graph["chunks_rejected_stale"] == 0
    assert graph["safety_limited_ticks"]["ticks"] > 0
    # the controller keeps its command inside the safety node's limits (before it did not:
    # 38-44 % of ticks limited); in real time on a loaded machine a late or bunched command
    # still makes the safety node limit a few ticks (measured here: 0-3.8 % with the suite
    # running beside it), so the 1 % goal is a benchmark's figure, not this test's bound
    assert graph["safety_limited_ticks"]["share"] <= 0.10
