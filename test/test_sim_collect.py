"""``vla-edge collect`` writes HDF5 demos in the documented layout that training reads."""

import shutil

import h5py
import numpy as np
import pytest
from policy_synthetic import write_dataset

from vla_edge.archs.bundled.data import load_episodes
from vla_edge.cli import main
from vla_edge.core.errors import DatasetError
from vla_edge.sim.dataset import TARGET_ATTRS, add_targets, demo_files
from vla_edge.sim.tasks import OBJECTS, get_task, init_state

TASKS = ("lift_green_block", "put_blue_block_on_plate")  # no destination, and one


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    out = tmp_path_factory.mktemp("demos")
    rc = main(
        [
            "collect", "--suite", "tabletop", "--episodes-per-task", "1", "--out", str(out),
            "--tasks", *TASKS, "--image-size", "16", "--seed", "3", "--no-progress",
        ]
    )  # fmt: skip
    assert rc == 0
    return out


def test_collect_writes_the_documented_layout(demos):
    path = demos / "lift_green_block.hdf5"
    with h5py.File(path, "r") as f:
        demo = f["data/demo_0"]
        t = demo["actions"].shape[0]
        assert t > 10
        assert demo["obs/agentview_image"].shape == (t, 16, 16, 3)
        assert demo["obs/wrist_image"].shape == (t, 16, 16, 3)
        assert demo["obs/agentview_image"].dtype == np.uint8
        assert demo["obs/state"].shape == (t, 7)
        assert demo["actions"].shape == (t, 7)
        attrs = dict(demo.attrs)
        assert attrs["instruction"] == "lift the green block"
        assert attrs["task"] == "lift_green_block"
        assert attrs["init_state_id"] == 30_000
        assert attrs["seed"] == 3
        assert attrs["dt_action_s"] == pytest.approx(0.1)
        assert bool(attrs["success"])
        # the first action is the target at the first observation: where the arm is
        np.testing.assert_allclose(demo["actions"][0, :6], demo["obs/state"][0, :6], atol=2e-3)
        # the arm ends with the block lifted: the gripper is closed on it
        assert demo["obs/state"][-1, 6] < 0.03


def test_training_reads_the_collected_episode_with_its_layout(demos):
    lift, _ = load_episodes(demos, ["agentview", "wrist"], (16, 16), 7, probes=["layout", "goal"])
    assert lift.task == "lift_green_block"
    assert lift.instruction == "lift the green block"
    assert lift.images["wrist"].shape == (lift.length, 16, 16, 3)
    # the training probes' targets were stored with the episode
    assert lift.layout_xy.shape == (2 * (len(OBJECTS) + 1),) and lift.goal_xy.shape == (4,)


def _scene_xy(task: str, init_state_id: int) -> dict[str, np.ndarray]:
    """Every object's and the target's xy in a recorded init state, from the scene itself."""
    scene = init_state(task, init_state_id, "train").scene
    return {**{n: scene.positions_m[n][:2] for n in OBJECTS}, "target": scene.target_xy_m}


def test_targets_stored_at_collection_equal_those_of_the_scene(demos):
    """The numbers training reads are the ones the scene of the recorded init state gives."""
    episodes = load_episodes(demos, ["agentview", "wrist"], (16, 16), 7, probes=["layout", "goal"])
    for task, episode in zip(TASKS, episodes, strict=True):
        with h5py.File(demos / f"{task}.hdf5", "r") as f:
            attrs = dict(f["data/demo_0"].attrs)
        xy = _scene_xy(task, 30_000)
        spec = get_task(task)
        goal_names = [spec.obj, spec.ref or spec.obj]
        assert list(attrs["layout_names"]) == [*OBJECTS, "target"]
        assert list(attrs["goal_names"]) == goal_names
        want_layout = np.stack([xy[n] for n in (*OBJECTS, "target")]).astype(np.float32)
        want_goal = np.stack([xy[n] for n in goal_names]).astype(np.float32)
        assert attrs["layout_xy"].dtype == np.float32 and attrs["goal_xy"].dtype == np.float32
        np.testing.assert_array_equal(attrs["layout_xy"], want_layout)  # exactly
        np.testing.assert_array_equal(attrs["goal_xy"], want_goal)
        np.testing.assert_array_equal(episode.layout_xy, want_layout.reshape(-1))
        np.testing.assert_array_equal(episode.goal_xy, want_goal.reshape(-1))


def test_add_targets_restores_the_targets_of_files_collected_without_them(demos, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(demos, old)
    stored = {}
    for task in TASKS:
        with h5py.File(old / f"{task}.hdf5", "r+") as f:
            group = f["data/demo_0"]
            stored[task] = {key: group.attrs[key] for key in TARGET_ATTRS}
            for key in TARGET_ATTRS:
                del group.attrs[key]
    # as recorded before the targets were stored: fine without probes, named error with one
    assert len(load_episodes(old, ["agentview", "wrist"], (16, 16), 7)) == 2
    with pytest.raises(DatasetError, match=r"lift_green_block\.hdf5:data/demo_0: probe target"):
        load_episodes(old, ["agentview", "wrist"], (16, 16), 7, probes=["layout"])
    assert main(["collect", "--add-targets", str(old)]) == 0
    for task in TASKS:
        with h5py.File(old / f"{task}.hdf5", "r") as f:
            for key in TARGET_ATTRS:
                np.testing.assert_array_equal(f["data/demo_0"].attrs[key], stored[task][key])
    assert main(["collect", "--add-targets", str(old / "lift_green_block.hdf5")]) == 0  # again
    assert len(load_episodes(old, ["agentview", "wrist"], (16, 16), 7, probes=["goal"])) == 2


def test_add_targets_reads_a_recovery_episode_s_hand_over_layout(tmp_path):
    path = write_dataset(tmp_path / "rec.hdf5", episodes_per_task=1, steps=5)
    rows = np.random.default_rng(0).uniform(0.0, 0.5, (len(OBJECTS) + 1, 2)).astype(np.float32)
    with h5py.File(path, "r+") as f:
        for group in f["data"].values():
            group.attrs["task"] = "put_blue_block_on_plate"
            group.attrs["split"] = "train"
            group.attrs["init_state_id"] = 4
            group.attrs["scene_names"] = ["target", *OBJECTS]  # any order
            group.attrs["scene_xy"] = rows
    assert add_targets(tmp_path) == {path: 2}
    xy = dict(zip(["target", *OBJECTS], rows, strict=True))
    with h5py.File(path, "r") as f:
        attrs = f["data/demo_1"].attrs
        np.testing.assert_array_equal(attrs["layout_xy"], [xy[n] for n in (*OBJECTS, "target")])
        np.testing.assert_array_equal(attrs["goal_xy"], [xy["blue_block"], xy["plate"]])


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ({"split": None}, "init_state_id and split .* are missing"),  # no recorded start
        ({"task": "task_1"}, "task = 'task_1' is in no suite"),  # data from elsewhere
        ({"init_state_id": -1}, "init_state_id = -1"),
        ({"scene_names": list(OBJECTS), "scene_xy": np.zeros((5, 2))}, r"lacks \['target'\]"),
        ({"scene_names": ["target"], "scene_xy": np.zeros((2, 2))}, r"scene_xy has shape \(2, 2\)"),
    ],
)
def test_add_targets_refuses_an_episode_it_cannot_place_and_writes_nothing(tmp_path, edit, message):
    path = write_dataset(tmp_path / "d.hdf5", episodes_per_task=1, steps=5)
    with h5py.File(path, "r+") as f:
        for group in f["data"].values():
            group.attrs.update({"task": "lift_green_block", "split": "train", "init_state_id": 1})
        for key, value in edit.items():
            if key in f["data/demo_1"].attrs:
                del f["data/demo_1"].attrs[key]
            if value is not None:
                f["data/demo_1"].attrs[key] = value
    with pytest.raises(SystemExit, match=f"d\\.hdf5:data/demo_1: .*{message}"):
        main(["collect", "--add-targets", str(tmp_path)])
    with h5py.File(path, "r") as f:
        assert "layout_xy" not in f["data/demo_0"].attrs  # the file is upgraded whole or not at all


def test_add_targets_records_nothing_and_collect_still_needs_its_options(tmp_path):
    with pytest.raises(SystemExit, match="--add-targets records nothing: drop --out"):
        main(["collect", "--add-targets", str(tmp_path), "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="--episodes-per-task is required"):
        main(["collect", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="no such file or folder"):
        main(["collect", "--add-targets", str(tmp_path / "absent")])


def test_a_missing_or_empty_data_path_is_a_named_dataset_error(tmp_path):
    with pytest.raises(DatasetError, match="no such file or folder"):
        demo_files(tmp_path / "absent")
    with pytest.raises(DatasetError, match="no .hdf5"):
        demo_files(tmp_path)


def test_collect_rejects_an_unknown_task(tmp_path):
    with pytest.raises(SystemExit, match="task = 'juggle'"):
        main(["collect", "--episodes-per-task", "1", "--out", str(tmp_path), "--tasks", "juggle"])
