"""Episodes as units: the results store, resuming, and the same results in this process,
in worker processes and as Ray tasks (one of whose workers is killed mid-run)."""

from __future__ import annotations

import json
import os
import signal

import psutil
import pytest

from vla_edge.core.errors import ConfigError
from vla_edge.sim.episodes import (
    Episode,
    EvalJob,
    InlinePool,
    ProcessPool,
    RayPool,
    ResultsStore,
    ResultsStoreError,
    episode_key,
    key_id,
    open_store,
    run_episodes,
)
from vla_edge.sim.evaluator import EvalSettings

JOB = EvalJob(policy="expert", image_size=32, threads=1)
TASKS = ("lift_green_block", "push_blue_block_to_target")


def _episodes(job: EvalJob = JOB, per_task: int = 2) -> list[Episode]:
    return [Episode(job, task, i) for task in TASKS for i in range(per_task)]


def _outcomes(records: dict) -> dict:
    """Each episode's result without its wall-clock inference times."""
    out = {}
    for record in records.values():
        result = {k: v for k, v in record["result"].items() if k != "inference_ms"}
        out[record["key"]["task"], record["key"]["init_state_id"]] = result
    return out


def _record(key: str, success: bool = True) -> dict:
    return {"key_id": key, "key": {"task": "t", "init_state_id": 0}, "result": {"success": success}}


def test_the_store_appends_reads_back_and_never_counts_a_key_twice(tmp_path) -> None:
    path = tmp_path / "episodes.jsonl"
    store = ResultsStore(path)
    store.append(_record("a"))
    store.append(_record("b", False))
    with pytest.raises(ResultsStoreError, match="already stored"):
        store.append(_record("a"))
    again = ResultsStore(path)
    assert set(again.records) == {"a", "b"} and len(path.read_text().splitlines()) == 2


def test_a_torn_last_line_is_dropped_and_the_next_record_starts_a_fresh_line(tmp_path) -> None:
    path = tmp_path / "episodes.jsonl"
    path.write_text(json.dumps(_record("a")) + "\n" + '{"key_id": "b", "res')
    store = ResultsStore(path)
    assert set(store.records) == {"a"}
    store.append(_record("c"))
    assert set(ResultsStore(path).records) == {"a", "c"}
    assert len(path.read_text().splitlines()) == 2
    # a whole record whose newline was not written is kept
    path.write_text(json.dumps(_record("a")))
    store = ResultsStore(path)
    store.append(_record("b"))
    assert set(ResultsStore(path).records) == {"a", "b"}


def test_a_broken_line_inside_the_store_is_a_named_error(tmp_path) -> None:
    path = tmp_path / "episodes.jsonl"
    path.write_text("not json\n" + json.dumps(_record("a")) + "\n")
    with pytest.raises(ResultsStoreError, match="episodes.jsonl:1"):
        ResultsStore(path)


def test_an_existing_store_is_only_continued_with_resume(tmp_path) -> None:
    path = tmp_path / "episodes.jsonl"
    ResultsStore(path).append(_record("a"))
    with pytest.raises(ResultsStoreError, match="--resume"):
        open_store(path, resume=False)
    assert len(open_store(path, resume=True)) == 1


def test_an_episode_key_names_what_its_result_depends_on() -> None:
    base = key_id(episode_key(Episode(JOB, "lift_green_block", 3)))
    assert base == key_id(episode_key(Episode(JOB, "lift_green_block", 3)))
    threads = EvalJob(policy="expert", image_size=32, threads=2)
    assert base == key_id(episode_key(Episode(threads, "lift_green_block", 3)))
    delayed = EvalJob(policy="expert", settings=EvalSettings(delay_s=0.1), image_size=32, threads=1)
    others = [
        Episode(JOB, "lift_green_block", 4),
        Episode(JOB, "push_blue_block_to_target", 3),
        Episode(delayed, "lift_green_block", 3),
    ]
    assert base not in {key_id(episode_key(e)) for e in others}
    with pytest.raises(ConfigError, match="scheme"):
        EvalJob(policy="expert", settings=EvalSettings(scheme="fast"))


@pytest.fixture(scope="module")
def inline_records() -> dict:
    pool = InlinePool()
    try:
        return run_episodes(_episodes(), ResultsStore(None), pool, quiet=True)
    finally:
        pool.close()


@pytest.mark.slow
def test_worker_processes_give_each_episode_the_result_it_gets_alone(inline_records) -> None:
    records = run_episodes(_episodes(), ResultsStore(None), ProcessPool(2), quiet=True)
    assert len({r["pid"] for r in records.values()}) == 2
    assert _outcomes(records) == _outcomes(inline_records)
    assert any(r["result"]["success"] for r in records.values())


@pytest.mark.slow
def test_a_resumed_run_runs_only_what_the_store_lacks(tmp_path, inline_records) -> None:
    path = tmp_path / "episodes.jsonl"
    pool = InlinePool()
    try:
        first = run_episodes(_episodes(per_task=1), open_store(path, False), pool, quiet=True)
        assert len(first) == 2
        store = open_store(path, resume=True)
        records = run_episodes(_episodes(), store, pool, quiet=True)
    finally:
        pool.close()
    assert len(path.read_text().splitlines()) == 4
    assert {k: r["pid"] for k, r in first.items()} == {k: records[k]["pid"] for k in first}
    assert _outcomes(records) == _outcomes(inline_records)


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield ray
    ray.shutdown()


class KillingStore(ResultsStore):
    """After the first record, kills a Ray worker that is running an episode."""

    def __init__(self) -> None:
        super().__init__(None)
        self.killed: list[int] = []

    def append(self, record: dict) -> None:
        super().append(record)
        if self.killed:
            return
        for proc in psutil.process_iter(["pid", "cmdline"]):
            if "ray::run_one" in " ".join(proc.info["cmdline"] or []):
                os.kill(proc.info["pid"], signal.SIGKILL)
                self.killed.append(proc.info["pid"])
                return


@pytest.mark.slow
def test_ray_tasks_survive_a_killed_worker_and_count_each_episode_once(
    local_ray, inline_records
) -> None:
    episodes = _episodes(per_task=3)
    store = KillingStore()
    pool = RayPool(None, 2)
    try:
        records = run_episodes(episodes, store, pool, quiet=True)
    finally:
        pool.close()
    assert store.killed, "no worker was running an episode to kill"
    assert len(records) == len(store) == len(episodes)
    # the killed worker's episode ran again in another process and was stored once
    assert len({r["key_id"] for r in records.values()}) == len(episodes)
    expected = _outcomes(inline_records)
    got = _outcomes(records)
    assert {k: got[k] for k in expected} == expected


@pytest.mark.slow
def test_eval_ray_writes_the_local_runs_json_and_resumes(tmp_path, local_ray) -> None:
    from vla_edge.cli import main as cli_main

    common = ["eval", "--policy", "expert", "--episodes", "1", "--quiet", "--image-size", "32"]
    common += ["--threads", "1", "--tasks", *TASKS]
    local, remote = tmp_path / "local.json", tmp_path / "ray.json"
    assert cli_main([*common, "--json", str(local)]) == 0
    assert cli_main([*common, "--ray", "--workers", "2", "--json", str(remote)]) == 0
    one, two = json.loads(local.read_text()), json.loads(remote.read_text())
    assert two["settings"]["pool"] == "ray" and one["settings"]["pool"] == "inline"
    assert one["tasks"] == two["tasks"] and one["safety"] == two["safety"]
    store = remote.with_suffix(".episodes.jsonl")
    assert len(store.read_text().splitlines()) == 2
    # the same command again must resume, not count the episodes twice
    with pytest.raises(ResultsStoreError, match="--resume"):
        cli_main([*common, "--ray", "--json", str(remote)])
    assert cli_main([*common, "--ray", "--resume", "--json", str(remote)]) == 0
    assert json.loads(remote.read_text())["tasks"] == two["tasks"]
    assert len(store.read_text().splitlines()) == 2


def test_resume_without_a_store_is_refused() -> None:
    from vla_edge.cli import main as cli_main

    with pytest.raises(ConfigError, match="--resume needs the store"):
        cli_main(["eval", "--policy", "expert", "--episodes", "1", "--resume"])


@pytest.mark.slow
def test_bench_fleet_times_both_pools_on_the_same_episodes(tmp_path, local_ray) -> None:
    from vla_edge.cli import main as cli_main

    out = tmp_path / "fleet.json"
    argv = ["bench", "fleet", "--policy", "expert", "--episodes", "2", "--workers", "2"]
    assert cli_main([*argv, "--tasks", *TASKS, "--json", str(out)]) == 0
    report = json.loads(out.read_text())
    assert [r["pool"] for r in report["rows"]] == ["local", "ray"]
    assert all(r["episodes"] == 4 and r["wall_s"] > 0 for r in report["rows"])
    summary = report["summary"]
    assert summary["same_outcomes"] is True
    assert summary["ray_vs_local_wall"] > 0 and summary["empty_task_round_trip_ms"] > 0


def test_video_with_ray_is_refused_before_anything_runs(tmp_path) -> None:
    from vla_edge.cli import main as cli_main

    with pytest.raises(ConfigError, match="--video"):
        cli_main(["eval", "--policy", "expert", "--ray", "--video", str(tmp_path)])
