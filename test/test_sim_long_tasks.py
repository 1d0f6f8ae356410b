"""Long-horizon tasks, instruction switches and the sequencer, in the closed-loop evaluator."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vla_edge.archs.bundled.tokenizer import InstructionTokenizer
from vla_edge.cli import main as cli_main
from vla_edge.core.errors import ConfigError, UnknownTaskError
from vla_edge.core.types import Observation
from vla_edge.sim.env import TabletopEnv
from vla_edge.sim.evaluator import EvalSettings, episode_rng, run_episode
from vla_edge.sim.expert_runner import ExpertRunner
from vla_edge.sim.tasks import (
    BLOCK_HALF_M,
    LONG_SUITE,
    PLATE_TOP_M,
    SWITCH_SUITE,
    TASKS,
    InstructionSchedule,
    active_task,
    check_task,
    get_task,
    init_state,
    is_success,
    list_tasks,
    sub_tasks,
    suite_of,
)


class RecordingRunner:
    """The scripted expert, noting the instruction of every observation it is given."""

    def __init__(self, env: TabletopEnv) -> None:
        self.runner = ExpertRunner(env)
        self.spec = self.runner.spec
        self.seen: list[tuple[float, str]] = []

    def infer(self, obs: Observation, **kwargs):
        self.seen.append((obs.stamp_s, obs.instruction))
        return self.runner.infer(obs, **kwargs)

    def instructions(self) -> list[str]:
        """The distinct instructions in the order they were first seen."""
        return list(dict.fromkeys(text for _, text in self.seen))

    def close(self) -> None:
        self.runner.close()


@pytest.fixture(scope="module")
def env() -> TabletopEnv:
    return TabletopEnv(image_height=32, image_width=32)


def _run(env, configs, name: str, sequencer: bool = False):
    runner = RecordingRunner(env)
    task = get_task(name)
    result = run_episode(
        env,
        runner,
        task,
        0,
        EvalSettings(sequencer=sequencer),
        *configs,
        episode_rng(0, name, 0),
    )
    return result, runner


def test_the_suites_hold_long_horizon_and_switch_tasks():
    assert list_tasks() == list(TASKS)
    assert len(list_tasks(LONG_SUITE)) >= 4
    assert len(list_tasks(SWITCH_SUITE)) >= 4
    tokenizer = InstructionTokenizer()  # the bundled policy's: every instruction fits
    for name in list_tasks(LONG_SUITE):
        task = get_task(name)
        subs = sub_tasks(task)
        assert 2 <= len(subs) <= 3 and task.kind == "sequence"
        assert task.instruction == ", then ".join(s.instruction for s in subs)
        assert task.budget_s == sum(s.budget_s for s in subs)
        assert suite_of(name) == LONG_SUITE
        check_task(LONG_SUITE, name, 49)
        tokenizer.encode(task.instruction)
    for name in list_tasks(SWITCH_SUITE):
        first, then = sub_tasks(get_task(name))
        assert get_task(name).budget_s == get_task(name).switch_at_s + then.budget_s
        assert first.name != then.name
    with pytest.raises(ConfigError, match="suite = 'libero_10'"):
        list_tasks("libero_10")


def _scene(name: str):
    return init_state(name, 0).scene


def test_a_sequence_succeeds_only_when_every_sub_task_holds_at_the_end():
    task = get_task("red_in_bowl_then_blue_on_plate")
    scene = _scene(task.name)
    red_in, blue_on = sub_tasks(task)
    assert not is_success(task, scene)
    scene.positions_m["red_block"] = scene.positions_m["bowl"] + [0.0, 0.0, 0.02]
    assert is_success(red_in, scene) and not is_success(task, scene)
    scene.positions_m["blue_block"] = scene.positions_m["plate"] + [0.0, 0.0, PLATE_TOP_M + 0.015]
    assert is_success(blue_on, scene) and is_success(task, scene)
    scene.positions_m["red_block"] = np.array([0.6, 0.2, BLOCK_HALF_M])  # knocked out again
    assert not is_success(task, scene)


def test_a_switch_is_judged_on_the_task_that_replaced_the_first():
    task = get_task("switch_red_bowl_to_lift_green")
    scene = _scene(task.name)
    scene.positions_m["red_block"] = scene.positions_m["bowl"] + [0.0, 0.0, 0.02]
    assert not is_success(task, scene)  # the first task done is not the task
    scene.positions_m["green_block"][2] = 0.12
    assert is_success(task, scene)


def test_the_instruction_in_force_follows_the_switch_time_and_the_sequencer():
    switch = get_task("switch_red_bowl_to_lift_green")
    assert active_task(switch, 2.99).name == "pick_red_block_into_bowl"
    assert active_task(switch, 3.0).name == "lift_green_block"
    long = get_task("red_in_bowl_blue_on_plate_lift_green")
    assert active_task(long, 10.0, done=1) is long  # the whole instruction at once
    names = [active_task(long, 0.0, done, sequencer=True).name for done in range(4)]
    assert names == [
        "pick_red_block_into_bowl",
        "put_blue_block_on_plate",
        "lift_green_block",
        "lift_green_block",
    ]


def test_the_schedule_moves_on_only_when_the_current_sub_task_holds():
    task = get_task("red_in_bowl_then_blue_on_plate")
    scene = _scene(task.name)
    schedule = InstructionSchedule(task, sequencer=True)
    schedule.advance(scene)
    assert schedule.active(5.0).name == "pick_red_block_into_bowl"
    scene.positions_m["red_block"] = scene.positions_m["bowl"] + [0.0, 0.0, 0.02]
    schedule.advance(scene)
    schedule.advance(scene)  # never past the last sub-task
    assert schedule.done == 1 and schedule.active(5.0).name == "put_blue_block_on_plate"
    whole = InstructionSchedule(task)
    whole.advance(scene)
    assert whole.done == 0 and whole.active(5.0) is task


@pytest.mark.parametrize("name", list_tasks(LONG_SUITE))
def test_the_scripted_expert_solves_every_long_horizon_task(env, configs, name):
    result, runner = _run(env, configs, name)
    assert result.success, result
    assert result.subtasks_done == len(sub_tasks(get_task(name)))
    assert result.instruction_changes == 0
    assert runner.instructions() == [get_task(name).instruction]


def test_the_sequencer_sends_each_sub_task_when_the_previous_one_succeeds(env, configs):
    name = "red_in_bowl_blue_on_plate_lift_green"
    result, runner = _run(env, configs, name, sequencer=True)
    subs = sub_tasks(get_task(name))
    assert result.success and result.subtasks_done == 3
    assert result.instruction_changes == 2
    assert runner.instructions() == [s.instruction for s in subs]
    _, limits = configs
    assert (
        0.0
        < result.switch_boundary_velocity_jump
        < limits.limit_arrays().velocity_limit_per_s.min()
    )


@pytest.mark.parametrize("name", list_tasks(SWITCH_SUITE))
def test_a_switch_episode_changes_the_instruction_at_its_time(env, configs, name):
    task = get_task(name)
    first, then = sub_tasks(task)
    result, runner = _run(env, configs, name)
    assert result.success, result  # judged on the second task
    assert result.instruction_changes == 1
    assert runner.instructions() == [first.instruction, then.instruction]
    t_new = min(t for t, text in runner.seen if text == then.instruction)
    assert task.switch_at_s <= t_new < task.switch_at_s + 0.5
    assert all(t < task.switch_at_s for t, text in runner.seen if text == first.instruction)
    _, limits = configs
    assert result.switch_boundary_velocity_jump < limits.limit_arrays().velocity_limit_per_s.min()


def test_eval_runs_a_long_horizon_suite_with_the_sequencer(tmp_path):
    out = tmp_path / "long.json"
    argv = ["eval", "--policy", "expert", "--suite", LONG_SUITE, "--episodes", "1"]
    argv += ["--tasks", "blue_on_plate_then_lift_green", "--image-size", "32", "--threads", "1"]
    assert cli_main([*argv, "--sequencer", "--quiet", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["settings"]["sequencer"] is True
    row = result["tasks"]["blue_on_plate_then_lift_green"]
    assert row["successes"] == 1 and row["mean_subtasks_done"] == 2.0
    with pytest.raises(UnknownTaskError, match="'lift_green_block': not a tabletop_long task"):
        cli_main([*argv[:-4], "--tasks", "lift_green_block", "--quiet"])
