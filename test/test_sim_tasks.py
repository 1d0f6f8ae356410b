"""Task suite: names, instructions, fixed initial states and success predicates."""

import numpy as np
import pytest

from vla_edge.core.errors import InitStateOutOfRangeError, UnknownTaskError
from vla_edge.sim.tasks import (
    BLOCK_HALF_M,
    BOWL_FLOOR_TOP_M,
    N_EVAL_INIT_STATES,
    OBJECTS,
    PLATE_TOP_M,
    WORKSPACE_X_M,
    WORKSPACE_Y_M,
    SceneState,
    get_task,
    init_state,
    is_success,
    list_tasks,
)


def _yaw_quat(yaw: float) -> np.ndarray:
    return np.array([np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)])


def _scene(**positions) -> SceneState:
    """Objects far apart on the table unless placed by the caller."""
    defaults = {
        "red_block": [0.40, 0.15, BLOCK_HALF_M],
        "green_block": [0.45, -0.15, BLOCK_HALF_M],
        "blue_block": [0.60, 0.15, BLOCK_HALF_M],
        "bowl": [0.55, 0.0, 0.0],
        "plate": [0.40, -0.05, 0.0],
    }
    defaults.update(positions)
    pos = {k: np.array(v, dtype=float) for k, v in defaults.items()}
    quats = {k: _yaw_quat(0.3) for k in pos}
    return SceneState(pos, quats, target_xy_m=np.array([0.60, -0.15]))


def test_suite_has_six_tasks_with_the_default_first():
    names = list_tasks()
    assert len(names) >= 6
    assert names[0] == "pick_red_block_into_bowl"
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("name", list_tasks())
def test_each_task_has_three_distinct_paraphrases_and_a_budget(name):
    task = get_task(name)
    assert len(task.paraphrases) >= 3
    assert task.instruction not in task.paraphrases
    assert len(set(task.paraphrases)) == len(task.paraphrases)
    assert task.step_budget(0.01) == round(task.budget_s / 0.01) > 0
    assert task.max_duration_s == task.budget_s


def test_unknown_task_is_a_named_error():
    with pytest.raises(UnknownTaskError, match="'fly_to_the_moon' is in no suite; allowed:"):
        get_task("fly_to_the_moon")
    with pytest.raises(UnknownTaskError):
        init_state("fly_to_the_moon", 0)


@pytest.mark.parametrize("bad_id", [-1, N_EVAL_INIT_STATES, 1000])
def test_eval_init_state_out_of_range_is_a_named_error(bad_id):
    with pytest.raises(InitStateOutOfRangeError, match=rf"init_state_id = {bad_id}.*\[0, 50\)"):
        init_state("pick_red_block_into_bowl", bad_id)


def test_init_states_are_reproducible_and_splits_differ():
    a = init_state("stack_red_on_green", 7)
    b = init_state("stack_red_on_green", 7)
    train = init_state("stack_red_on_green", 7, split="train")
    for name in OBJECTS:
        np.testing.assert_array_equal(a.scene.positions_m[name], b.scene.positions_m[name])
        np.testing.assert_array_equal(a.scene.quats[name], b.scene.quats[name])
    np.testing.assert_array_equal(a.arm_qpos_rad, b.arm_qpos_rad)
    assert not np.allclose(a.scene.positions_m["red_block"], train.scene.positions_m["red_block"])
    # training ids go beyond the 50 evaluation states
    init_state("stack_red_on_green", 5000, split="train")


@pytest.mark.parametrize("name", list_tasks())
def test_layouts_stay_in_the_workspace_without_overlap_and_vary(name):
    reds = []
    for i in range(N_EVAL_INIT_STATES):
        scene = init_state(name, i).scene
        items = {k: scene.positions_m[k][:2] for k in OBJECTS} | {"target": scene.target_xy_m}
        for key, xy in items.items():
            assert WORKSPACE_X_M[0] <= xy[0] <= WORKSPACE_X_M[1], key
            assert WORKSPACE_Y_M[0] <= xy[1] <= WORKSPACE_Y_M[1], key
        keys = list(items)
        for j, k1 in enumerate(keys):
            for k2 in keys[j + 1 :]:
                assert np.linalg.norm(items[k1] - items[k2]) > 0.07, (i, k1, k2)
        reds.append(scene.positions_m["red_block"][:2])
    spread = np.ptp(np.array(reds), axis=0)
    assert spread[0] > 0.15 and spread[1] > 0.3


def test_block_in_bowl_succeeds_and_beside_it_fails():
    task = get_task("pick_red_block_into_bowl")
    inside = _scene(red_block=[0.56, 0.01, BOWL_FLOOR_TOP_M + BLOCK_HALF_M])
    assert is_success(task, inside)
    beside = _scene(red_block=[0.62, 0.0, BLOCK_HALF_M])
    assert not is_success(task, beside)
    held_above = _scene(red_block=[0.55, 0.0, 0.15])
    assert not is_success(task, held_above)
    # another block in the bowl does not count
    assert not is_success(task, _scene(green_block=[0.55, 0.0, 0.02]))
    assert is_success(get_task("pick_green_block_into_bowl"), _scene(green_block=[0.55, 0.0, 0.02]))


def test_block_on_plate_succeeds_and_on_table_fails():
    task = get_task("put_blue_block_on_plate")
    assert is_success(task, _scene(blue_block=[0.42, -0.06, PLATE_TOP_M + BLOCK_HALF_M]))
    assert not is_success(task, _scene(blue_block=[0.47, -0.05, BLOCK_HALF_M]))
    assert not is_success(task, _scene(blue_block=[0.40, -0.05, 0.10]))


def test_stack_needs_red_resting_on_green():
    task = get_task("stack_red_on_green")
    assert is_success(task, _scene(red_block=[0.452, -0.149, 3 * BLOCK_HALF_M]))
    assert not is_success(task, _scene(red_block=[0.48, -0.15, 3 * BLOCK_HALF_M]))
    assert not is_success(task, _scene(red_block=[0.45, -0.15, 0.10]))
    # green lifted off the table with red on it is not a stack on the table
    lifted = _scene(green_block=[0.45, -0.15, 0.08], red_block=[0.45, -0.15, 0.105])
    assert not is_success(task, lifted)


def test_push_needs_the_block_inside_the_target_on_the_table():
    task = get_task("push_blue_block_to_target")
    assert is_success(task, _scene(blue_block=[0.61, -0.16, BLOCK_HALF_M]))
    assert not is_success(task, _scene(blue_block=[0.66, -0.15, BLOCK_HALF_M]))
    assert not is_success(task, _scene(blue_block=[0.60, -0.15, 0.08]))


def test_lift_needs_the_block_high_enough():
    task = get_task("lift_green_block")
    assert is_success(task, _scene(green_block=[0.45, -0.15, 0.12]))
    assert not is_success(task, _scene(green_block=[0.45, -0.15, 0.05]))
    assert not is_success(task, _scene())
