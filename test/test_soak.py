"""``vla-edge soak``: its figures from synthetic records, its options, and a short real soak."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from ros_test_domain import DomainLease

from vla_edge.bench import soak
from vla_edge.bench import soak_report as st
from vla_edge.nodes.metrics import Histogram
from vla_edge.sim.tasks import get_task, list_tasks

NODES = ("sim_node", "safety_node", "controller_node", "inference_node")


@pytest.fixture
def ros_env():
    lease = DomainLease()
    try:
        yield lease.env()
    finally:
        lease.release()


# ------------------------------------------------------------------ memory growth


def test_memory_growth_is_the_slope_after_warm_up_in_percent_per_hour():
    t = np.arange(0.0, 3600.0, 5.0)
    rss = 100.0 + 1.0 * t / 3600.0  # 1 MiB per hour on ~100 MiB
    rss[t < 300.0] += 50.0 * (1.0 - t[t < 300.0] / 300.0)  # start-up allocations, then flat
    growth = st.memory_growth([(ti, ri, 7) for ti, ri in zip(t, rss, strict=True)], 300.0)
    assert growth.samples == int(np.sum(t >= 300.0))
    assert growth.slope_mb_per_h == pytest.approx(1.0, rel=1e-6)
    assert growth.pct_per_h == pytest.approx(100.0 / np.mean(rss[t >= 300.0]), rel=1e-6)
    assert growth.processes == 1


def test_a_respawned_process_starting_smaller_is_no_growth():
    first = [(t, 200.0, 1) for t in np.arange(0.0, 600.0, 5.0)]
    # the respawn starts over at its base size, which the warm-up of its own leaves out
    second = [(t, 120.0 + (10.0 if t < 700.0 else 0.0), 2) for t in np.arange(600.0, 1200.0, 5.0)]
    growth = st.memory_growth(first + second, warmup_s=120.0)
    assert growth.processes == 2
    assert growth.pct_per_h == pytest.approx(0.0, abs=1e-9)


def test_memory_growth_is_unmeasured_without_two_samples_after_warm_up():
    growth = st.memory_growth([(0.0, 100.0, 1), (5.0, 101.0, 1)], warmup_s=5.0)
    assert growth.pct_per_h is None and growth.samples == 1


def test_memory_steps_split_the_rss_change_into_fault_spans_and_the_time_between():
    # a controller-like node: flat, +0.4 MiB in a fault's span, +0.1 MiB spread outside
    t = np.arange(0.0, 1000.0, 10.0)
    rss = 100.0 + 0.1 * t / 1000.0 + np.where(t >= 500.0, 0.4, 0.0)
    # an inference-like node respawned in the fault: its new process starts smaller
    pids = np.where(t < 500.0, 1, 2)
    infer = np.where(t < 500.0, 450.0, 440.0)
    samples = [
        {
            "t_s": float(ti),
            "rss_mb": {"controller_node": float(ri), "inference_node": float(ii)},
            "pid": {"controller_node": 9, "inference_node": int(pi)},
        }
        for ti, ri, ii, pi in zip(t, rss, infer, pids, strict=True)
    ]
    steps = st.memory_steps(samples, [(495.0, 505.0)], warmup_s=100.0)
    controller = steps["controller_node"]
    # fitted from t = 100 s: 89 periods of 10 s, two of them overlap the span (490-500 and
    # 500-510 s): the step and those two periods' drift are in the fault, 87 outside
    assert controller["in_faults_mb"] == pytest.approx(0.4 + 0.002, abs=1e-9)
    assert controller["outside_faults_mb"] == pytest.approx(0.087, abs=1e-9)
    assert controller["outside_faults_s"] == pytest.approx(870.0)
    expected = 0.087 / 870.0 * 3600.0 / np.mean(rss[t >= 100.0]) * 100.0
    assert controller["outside_faults_pct_per_h"] == pytest.approx(expected, abs=1e-3)
    # a respawn is a new process (no step from the old one); its own warm-up is left out
    inference = steps["inference_node"]
    assert inference["in_faults_mb"] == 0.0 and inference["outside_faults_mb"] == 0.0


def test_memory_steps_without_a_period_outside_faults_give_no_rate():
    samples = [
        {"t_s": t, "rss_mb": {"sim_node": 100.0 + t}, "pid": {"sim_node": 1}} for t in (0.0, 5.0)
    ]
    steps = st.memory_steps(samples, [(0.0, 10.0)], warmup_s=0.0)
    assert steps["sim_node"]["in_faults_mb"] == 5.0
    assert steps["sim_node"]["outside_faults_pct_per_h"] is None


# ------------------------------------------------------------------ underruns


def test_counter_increments_count_a_restarted_node_from_zero():
    readings = [(1.0, 0.0), (2.0, 1.0), (3.0, 1.0), (4.0, 3.0), (5.0, 1.0), (6.0, 1.0)]
    assert st.counter_increments(readings) == [(1.0, 2.0, 1), (3.0, 4.0, 2), (4.0, 5.0, 1)]


def test_underruns_in_a_fault_or_its_recovery_margin_are_not_counted_outside():
    events = [(9.0, 10.0, 1), (14.5, 15.5, 2), (19.0, 20.0, 1), (40.0, 41.0, 1)]
    faults = [(10.5, 12.0)]
    count = st.classify_underruns(events, faults, recovery_s=3.0)
    # (9, 10] ends before the fault; (14.5, 15.5] overlaps its margin (until 15.0)
    assert (count.in_faults, count.outside_faults) == (2, 3)
    assert count.outside == ((9.0, 10.0, 1), (19.0, 20.0, 1), (40.0, 41.0, 1))
    assert st.classify_underruns(events, faults, recovery_s=0.0).in_faults == 0


# ------------------------------------------------------------------ windows


def _sample(t_s, pid=1, count=0.0, mean=0.0, p99=0.5, rss=100.0):
    return {
        "t_s": t_s,
        "pid": {"controller_node": pid},
        "rss_mb": {"controller_node": rss},
        "cpu_pct": {"controller_node": 10.0},
        "controller": {
            "period_jitter_ms_count": count,
            "period_jitter_ms_mean": mean,
            "period_jitter_ms_p99": p99,
            "period_jitter_ms_max": 3.0,
        },
        "inference": {"wall_ms_p50": 5.0, "wall_ms_p95": 9.0, "wall_ms_max": 12.0},
        "host": {"temperature_c": None, "cpu_freq_mhz": None, "cpu_pct": 50.0, "steal_pct": t_s},
    }


def test_windows_cover_the_duration_and_the_last_one_takes_the_final_sample():
    assert st.window_bounds(60.0, 20.0) == [(0.0, 20.0), (20.0, 40.0), (40.0, 60.0)]
    assert st.window_bounds(50.0, 20.0)[-1] == (40.0, 50.0)
    rows = st.window_stats(
        st.window_bounds(40.0, 20.0),
        [_sample(0.0), _sample(20.0), _sample(40.2)],
        [],
        [],
        [],
        0.0,
        [],
        [],
    )
    assert [r["samples"] for r in rows] == [1, 2]
    # the hypervisor's steal, the mean of the window's samples (here: their times)
    assert [r["host"]["steal_pct_mean"] for r in rows] == [0.0, 30.1]


def test_window_chunk_age_and_underruns_are_the_windows_own():
    ages = [(t, 10.0 * (1 + t % 10)) for t in np.arange(0.0, 40.0, 0.5)]
    rows = st.window_stats(
        [(0.0, 20.0), (20.0, 40.0)],
        [_sample(10.0), _sample(30.0)],
        ages,
        [(4.0, 5.0, 1), (24.0, 25.0, 2)],
        [{"start_s": 23.0, "end_s": 24.5}],
        1.0,
        [{"t_s": 23.5}],
        [{"t_start_s": 1.0, "success": True}, {"t_start_s": 21.0, "success": False}],
    )
    first = [a for t, a in ages if t < 20.0]
    assert rows[0]["chunks"] == len(first)
    assert rows[0]["chunk_age_ms"]["p50"] == pytest.approx(st.percentile(first, 50))
    assert rows[0]["chunk_age_ms"]["max"] == max(first)
    assert rows[0]["buffer_underruns"] == {"in_faults": 0, "outside_faults": 1}
    assert rows[1]["buffer_underruns"] == {"in_faults": 2, "outside_faults": 0}
    assert (rows[0]["restarts"], rows[1]["restarts"]) == (0, 1)
    assert (rows[0]["successes"], rows[1]["episodes"], rows[1]["faults"]) == (1, 1, 1)
    assert rows[1]["inference_wall_ms"] == {"p50": None, "p99": None, "max_since_node_start": 12.0}


def _hist(t_s: float, pid: int, counts: dict[int, int]) -> dict:
    text = Histogram(0.01, 100.0)
    for index, count in counts.items():
        for _ in range(count):
            text.add(index * 0.01 + 0.005)
    return {"t_s": t_s, "controller_jitter": (pid, text.bins(), text.bin_width)}


def test_window_percentiles_are_the_windows_own_from_two_readings_of_a_histogram():
    # 0..20 s: 980 ticks at 0.1 ms, 20 at 5 ms; 20..40 s adds 1000 ticks at 0.3 ms
    readings = [
        _hist(19.0, 1, {10: 980, 500: 20}),
        _hist(39.0, 1, {10: 980, 500: 20, 30: 1000}),
        _hist(59.0, 2, {30: 500}),  # the controller restarted: its histogram began again
    ]
    p99 = [
        st.window_percentiles(readings, "controller_jitter", a, b, b == 60.0, (99,))["p99"]
        for a, b in st.window_bounds(60.0, 20.0)
    ]
    assert p99 == [pytest.approx(5.01), pytest.approx(0.31), pytest.approx(0.31)]
    none = st.window_percentiles([], "controller_jitter", 0.0, 20.0, False, (50, 99))
    assert none == {"p50": None, "p99": None}


def test_jitter_mean_in_a_window_is_exact_and_unknown_across_a_controller_restart():
    before = _sample(0.0, count=1000.0, mean=0.1)
    after = _sample(20.0, count=3000.0, mean=0.3)  # 2000 ticks of mean 0.4 ms in between
    assert st.jitter_mean_between(before, after) == pytest.approx(0.4)
    assert st.jitter_mean_between(None, after) == pytest.approx(0.3)
    restarted = _sample(20.0, pid=2, count=1500.0, mean=0.3)
    assert st.jitter_mean_between(before, restarted) is None


# ------------------------------------------------------------------ goals


def _goals(growth_pct=1.0, outside=0, jitter_p99=1.5, exits=0, unrecovered=0):
    growth = {"sim_node": st.Growth(growth_pct, 1.0, 100.0, 10, 100.0, 1)}
    windows = [
        {"t_start_s": 0.0, "controller_jitter_ms": {"p99": 0.5}},
        {"t_start_s": 300.0, "controller_jitter_ms": {"p99": jitter_p99}},
    ]
    return st.evaluate_goals(growth, windows, outside, exits, unrecovered)


def test_goals_pass_within_their_limits():
    goals = _goals()
    assert all(goal["passed"] for goal in goals.values())
    assert goals["controller_jitter_p99_ms_max"]["window_start_s"] == 300.0
    assert goals["memory_growth_pct_per_h_max"]["node"] == "sim_node"


@pytest.mark.parametrize(
    ("change", "goal"),
    [
        ({"growth_pct": 2.5}, "memory_growth_pct_per_h_max"),
        ({"outside": 1}, "underruns_outside_faults_max"),
        ({"jitter_p99": 2.01}, "controller_jitter_p99_ms_max"),
        ({"exits": 1}, "unexpected_exits_max"),
        ({"unrecovered": 1}, "unrecovered_faults_max"),
    ],
)
def test_each_goal_fails_past_its_limit(change, goal):
    goals = _goals(**change)
    assert goals[goal]["passed"] is False
    assert [name for name, g in goals.items() if g["passed"] is False] == [goal]


def test_a_goal_without_a_measurement_is_neither_passed_nor_failed():
    assert _goals(growth_pct=None)["memory_growth_pct_per_h_max"]["passed"] is None


# ------------------------------------------------------------------ options and plans


@pytest.mark.parametrize(
    ("values", "words"),
    [
        ({"duration_s": -1.0}, ["--duration = -1.0", "greater than 0"]),
        ({"duration_s": 60.0, "window_s": 120.0}, ["--window-s = 120.0", "--duration = 60.0"]),
        ({"duration_s": 60.0, "window_s": 20.0, "warmup_s": 60.0}, ["--warmup-s = 60.0"]),
        ({"duration_s": 60.0, "window_s": 20.0, "sample_s": 30.0}, ["--sample-s = 30.0"]),
        ({"duration_s": 60.0, "window_s": 20.0, "switch_probability": 1.5}, ["1.5"]),
        ({"duration_s": 60.0, "window_s": 20.0, "seed": -1}, ["--seed = -1"]),
    ],
)
def test_bad_options_are_named_errors(values, words):
    with pytest.raises(soak.SoakSettingsError) as info:
        soak.make_settings(**{"warmup_s": 10.0, **values})
    for word in words:
        assert word in str(info.value)


def test_an_unknown_fault_kind_is_refused_and_none_means_no_faults():
    with pytest.raises(soak.SoakSettingsError, match="inference_slowdown"):
        soak.parse_faults("inference_crash,inference_slowdown")
    assert soak.parse_faults("none") == ()
    assert soak.parse_faults("estop, inference_crash") == ("estop", "inference_crash")


def test_bad_options_exit_with_code_2_before_anything_starts(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "vla_edge.cli", "soak", "--duration", "60", "--window-s", "300"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert result.returncode == 2
    assert "SoakSettingsError: --window-s = 300.0: must be at most --duration = 60.0" in (
        result.stderr
    )
    assert not (tmp_path / "out").exists()


def test_episodes_are_seeded_and_a_switch_names_another_tasks_instruction():
    plans = [soak.EpisodePlan(3, 0.5, None) for _ in range(2)]
    episodes = [[p.next() for _ in range(40)] for p in plans]
    assert episodes[0] == episodes[1]
    assert {e.task for e in episodes[0]} == set(list_tasks())
    assert all(0 <= e.init_state_id < 50 for e in episodes[0])
    switched = [e for e in episodes[0] if e.switch_task is not None]
    assert 0 < len(switched) < 40
    for e in switched:
        assert e.switch_task != e.task
        assert e.switch_instruction == get_task(e.switch_task).instruction
        assert 0.2 * e.budget_s <= e.switch_at_s <= 0.6 * e.budget_s
    capped = soak.EpisodePlan(3, 0.0, 12.0).next()
    assert capped.budget_s == 12.0 and capped.switch_task is None


def test_faults_come_in_rounds_of_every_kind():
    plan = soak.FaultPlan(soak.FAULT_KINDS, 100.0, seed=0)
    kinds = [plan.kind() for _ in range(9)]
    for i in range(0, 9, 3):
        assert sorted(kinds[i : i + 3]) == sorted(soak.FAULT_KINDS)
    gaps = [plan.gap_s() for _ in range(50)]
    assert 50.0 <= min(gaps) and max(gaps) <= 150.0


# ------------------------------------------------------------------ report


def _record(duration_s=60.0):
    record = st.SoakRecord(duration_s=duration_s, startup_s=3.0)
    pids = {"sim_node": 10, "safety_node": 11, "controller_node": 12, "inference_node": 13}
    jitter = Histogram(0.01, 100.0)
    for i, t in enumerate(np.arange(0.0, duration_s + 0.1, 5.0)):
        for _ in range(500):
            jitter.add(0.195)
        for _ in range(30 if t == duration_s else 0):  # the last window's p99: 1.6 ms
            jitter.add(1.595)
        record.histograms.append(
            {"t_s": float(t), "controller_jitter": (12, jitter.bins(), jitter.bin_width)}
        )
        new_pid = {**pids, "inference_node": 14 if t >= 30.0 else 13}
        record.samples.append(
            {
                **_sample(float(t), pid=12, count=500.0 * (i + 1), mean=0.2, p99=1.0 + t / 100),
                "pid": new_pid,
                "rss_mb": {n: 100.0 + t / 100 for n in pids},
                "cpu_pct": {n: 20.0 for n in pids},
            }
        )
    record.chunk_ages = [(float(t), 30.0 + t % 7) for t in np.arange(0.0, duration_s, 0.5)]
    record.underrun_readings = [(float(t), 0.0 if t < 26 else 1.0) for t in range(1, 60)]
    record.faults = [st.Fault("inference_crash", 25.0, 27.0, 27.0, 29.5, True)]
    record.restarts = [{"t_s": 27.0, "node": "inference_node", "cause": "injected", "pid": 14}]
    record.episodes = [
        st.Episode(1, "lift_green_block", 3, 15.0, 0.0, t_end_s=8.0, success=True, end="success"),
        st.Episode(2, "stack_red_on_green", 4, 25.0, 8.0, "lift_green_block", 5.0, 13.0),
    ]
    record.exit_codes = dict.fromkeys(pids, 0)
    return record


def test_the_report_of_a_record_has_its_windows_goals_summary_and_a_plot(tmp_path):
    settings = soak.make_settings(duration_s=60.0, window_s=20.0, warmup_s=10.0, sample_s=5.0)
    record = _record()
    report = st.build_report(record, settings.model_dump(mode="json"), soak.machine())
    text = st.report_json(report)
    assert json.loads(text) == json.loads(json.dumps(report))
    # one line per sample column and per record (one line per sampled value: over 500)
    assert len(text.splitlines()) < 300
    assert set(report["summary"]["memory_steps"]) == set(record.exit_codes)
    rows = st.sample_rows(report["samples"])
    assert [r["rss_mb"] for r in rows] == [r["rss_mb"] for r in record.samples]
    assert len(report["samples"]["rss_mb.inference_node"]) == len(record.samples)
    assert [w["t_start_s"] for w in report["windows"]] == [0.0, 20.0, 40.0]
    assert report["summary"]["buffer_underruns"] == {
        "in_faults": 1,
        "outside_faults": 0,
        "outside_events": [],
    }
    assert report["summary"]["restarts"] == {"inference_node": {"injected": 1, "unexpected": 0}}
    assert report["summary"]["memory_growth"]["inference_node"]["processes"] == 2
    assert report["summary"]["episodes"]["with_switch"] == 1
    assert report["goals"]["controller_jitter_p99_ms_max"]["value"] == pytest.approx(1.6)
    assert report["passed"] is False  # 0.01 MiB/s on 100 MiB is 36 %/h
    assert report["goals"]["memory_growth_pct_per_h_max"]["passed"] is False
    assert set(report["definitions"]) >= {"chunk_age_ms", "controller_jitter_ms", "rss_mb"}
    png = st.plot_soak(report, tmp_path / "soak.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000
    lines = st.summary_lines(report)
    assert any(line.startswith("goal memory_growth") for line in lines)
    assert any(line.startswith("RSS change after warm-up, in / outside faults") for line in lines)


def test_samples_are_written_as_columns_and_read_back_without_the_gaps():
    rows = [
        {"t_s": 0.0, "rss_mb": {"a": 1.0, "b": 2.0}, "host": {"temperature_c": None}},
        {"t_s": 5.0, "rss_mb": {"a": 1.5}, "host": {"temperature_c": {"cpu": 40.0}}},
    ]
    columns = st.sample_columns(rows)
    assert columns == {
        "t_s": [0.0, 5.0],
        "rss_mb.a": [1.0, 1.5],
        "rss_mb.b": [2.0, None],
        "host.temperature_c": [None, None],
        "host.temperature_c.cpu": [None, 40.0],
    }
    back = st.sample_rows(columns)
    assert back[0]["rss_mb"] == {"a": 1.0, "b": 2.0} and back[1]["rss_mb"] == {"a": 1.5}
    assert back[0]["host"] == {} and back[1]["host"] == {"temperature_c": {"cpu": 40.0}}


def test_the_report_renders_a_soak_as_a_table_with_its_goals_first(tmp_path):
    from report_tool import load_report

    render_soak = load_report().render_soak
    settings = soak.make_settings(duration_s=60.0, window_s=20.0, warmup_s=10.0, sample_s=5.0)
    recorded = {**settings.model_dump(mode="json"), "policy": "out/exports/bundled_et_fp32"}
    table = render_soak([st.build_report(_record(), recorded, soak.machine())])
    lines = table.splitlines()
    assert lines[0] == "| measure | value |"
    assert lines[2].startswith("| goal `memory_growth_pct_per_h_max` |") and "**fail**" in lines[2]
    assert "| buffer underruns in / outside faults | 1 / 0 |" in lines
    assert "| restarts (unexpected exits) | 1 (0) |" in lines
    assert "| policy, duration | `bundled_et_fp32`, 60 s |" in lines


def test_steal_time_is_the_hypervisors_share_or_none_where_not_reported():
    from types import SimpleNamespace

    assert soak.steal_pct(SimpleNamespace(user=40.0, steal=12.345)) == 12.3
    assert soak.steal_pct(SimpleNamespace(user=40.0)) is None  # macOS: no such field
    import psutil

    assert soak.steal_pct(psutil.cpu_times_percent(interval=0.05)) is not None  # Linux


def test_the_machine_probes_give_numbers_or_none():
    for value in (soak.temperatures_c(), soak.devfreq_mhz()):
        assert value is None or all(isinstance(v, float) for v in value.values())
    freq = soak.cpu_freq_mhz()
    assert freq is None or (freq["min"] <= freq["mean"] <= freq["max"] and freq["source"])


# ------------------------------------------------------------------ the real graph


def _soak_command(out: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "vla_edge.cli", "soak", "--out", str(out), *args]


@pytest.mark.parametrize(
    ("state", "clear"),
    [("none", True), ("cat2", True), ("cat1", False), ("cat0", False), ("", False), ("ok", False)],
)
def test_the_soak_starts_its_first_episode_only_under_a_safety_state_below_cat1(state, clear):
    # the safety node starts in a cat1 stop (no command, no joint state); the first
    # reset homes the arm, which the controller refuses under a cat1 or cat0 stop
    assert soak._holds_no_stop(state) is clear


@pytest.mark.ros
def test_a_short_soak_resets_switches_faults_respawns_and_reports(tmp_path, ros_env):
    """60 s of the real graph (the scripted expert stands in for the policy: fast to start)."""
    out = tmp_path / "soak"
    result = subprocess.run(
        _soak_command(
            out,
            "--policy",
            "expert",
            "--duration",
            "60",
            "--window-s",
            "20",
            "--warmup-s",
            "10",
            "--sample-s",
            "2",
            "--fault-every-s",
            "8",
            "--episode-s",
            "12",
            "--switch-probability",
            "0.5",
            "--seed",
            "0",
        ),  # fmt: skip
        env=ros_env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    log = result.stdout[-4000:] + result.stderr[-4000:]
    assert result.returncode in (0, 1), log  # 1: a goal failed (this is no hour on a quiet CPU)
    report = json.loads((out / "soak.json").read_text())
    assert (result.returncode == 0) == report["passed"]
    assert not report["interrupted"] and report["duration_s"] >= 60.0
    assert report["exit_codes"] == dict.fromkeys(NODES, 0), log
    # every node sampled all along, with a real resident size (but the inference node
    # between its kill and its respawn)
    samples = st.sample_rows(report["samples"])
    crashes = [f for f in report["faults"] if f["kind"] == "inference_crash"]
    assert len(samples) >= 25
    for sample in samples:
        dead = any(f["start_s"] <= sample["t_s"] <= (f["undone_s"] or 1e9) for f in crashes)
        expected = set(NODES) - ({"inference_node"} if dead else set())
        assert set(sample["rss_mb"]) == expected, (sample, report["faults"], log)
        just_started = any(0.0 <= sample["t_s"] - r["t_s"] < 2.0 for r in report["restarts"])
        assert just_started or all(mb > 10.0 for mb in sample["rss_mb"].values()), sample
    assert set(report["summary"]["memory_growth"]) == set(NODES)
    # episodes reset through the sim's service, one with a switched instruction
    episodes = report["episodes"]
    assert len(episodes) >= 3, log
    assert report["reset_failures"] == [], log
    tasks_seen = (out / "logs" / "sim_node.log").read_text()
    for episode in episodes:
        assert f"task {episode['task']!r}, init state {episode['init_state_id']}" in tasks_seen
    switched = [e for e in episodes if e["switched_t_s"] is not None]
    assert switched, log
    inference_log = (out / "logs" / "inference_node.log").read_text()
    switch = f"instruction: {get_task(switched[0]['switch_task']).instruction!r}"
    assert switch in inference_log, (switch, inference_log[-3000:])
    # a crash of the inference node, respawned: a new process, chunks again
    # (the soak may end inside the last fault: that one is neither recovered nor not)
    respawned = [f for f in crashes if f["undone_s"] is not None]
    assert any(f["recovered"] for f in crashes)
    assert all(f["end_s"] > f["undone_s"] for f in respawned if f["recovered"])
    assert not [f for f in report["faults"] if f["recovered"] is False], report["faults"]
    for estop in [f for f in report["faults"] if f["kind"] == "estop"]:
        assert "e-stop cleared" in estop["detail"], estop  # it was latched, then cleared
    assert report["summary"]["restarts"]["inference_node"]["injected"] == len(respawned)
    pids = {s["pid"]["inference_node"] for s in samples if "inference_node" in s["pid"]}
    assert len(pids) == len(respawned) + 1
    assert report["summary"]["unexpected_exits"] == 0
    assert {f["kind"] for f in report["faults"]} == set(soak.FAULT_KINDS), log
    # the figures: every window has chunks and jitter; underruns add up to the controller's
    assert len(report["windows"]) == 3
    for window in report["windows"]:
        assert window["chunks"] > 0 and window["chunk_age_ms"]["p99"] > 0.0
        assert window["controller_jitter_ms"]["p99"] > 0.0
        assert window["inference_wall_ms"]["p99"] > 0.0
    underruns = report["summary"]["buffer_underruns"]
    final = samples[-1]["controller"]["buffer_underruns"]
    assert underruns["in_faults"] + underruns["outside_faults"] == final, (underruns, log)
    assert set(report["goals"]) == set(st.GOALS)
    png = (out / "soak.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 20_000


@pytest.mark.ros
def test_ctrl_c_stops_the_graph_and_still_writes_the_json(tmp_path, ros_env):
    out = tmp_path / "soak"
    process = subprocess.Popen(
        _soak_command(out, "--policy", "expert", "--duration", "600", "--window-s", "60"),
        env=ros_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        lines = []
        deadline = time.monotonic() + 90.0
        while time.monotonic() < deadline:
            line = process.stdout.readline()
            lines.append(line)
            if "soaking" in line or not line:
                break
        assert "soaking" in lines[-1], "".join(lines)
        time.sleep(6.0)
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 130, "".join(lines) + rest
    report = json.loads((out / "soak.json").read_text())
    assert report["interrupted"] and report["passed"] is False
    assert 5.0 <= report["duration_s"] < 60.0
    assert report["exit_codes"] == dict.fromkeys(NODES, 0)
    assert len(report["samples"]["t_s"]) >= 2 and len(report["windows"]) == 1
    assert (out / "soak.png").is_file()
