import h5py
import numpy as np
import pytest
from policy_synthetic import CAMERAS, INSTRUCTIONS, write_dataset

from vla_edge.core.errors import DatasetError
from vla_edge.policy.data import ChunkSamples, load_episodes, split_episodes


def test_episodes_are_read_in_order_with_instruction_and_task(tmp_path) -> None:
    path = write_dataset(tmp_path / "demos.hdf5", episodes_per_task=2, steps=12)
    episodes = load_episodes(tmp_path, list(CAMERAS), (32, 32), 7)
    assert [ep.name.split("/")[1] for ep in episodes] == ["demo_0", "demo_1", "demo_2", "demo_3"]
    assert episodes[0].instruction == INSTRUCTIONS[0]
    assert episodes[3].task == "task_1"
    assert episodes[0].images["wrist"].shape == (12, 32, 32, 3)
    assert path.is_file()


def test_chunks_are_padded_with_the_last_action_row(tmp_path) -> None:
    write_dataset(tmp_path / "demos.hdf5", episodes_per_task=1, steps=12)
    episodes = load_episodes(tmp_path, list(CAMERAS), (32, 32), 7)
    samples = ChunkSamples(episodes, list(CAMERAS), horizon=10)
    assert len(samples) == 24
    ep = episodes[0]
    np.testing.assert_array_equal(samples.chunks(np.array([0]))[0], ep.actions[:10])
    last = samples.chunks(np.array([11]))[0]
    np.testing.assert_array_equal(last, np.repeat(ep.actions[-1:], 10, axis=0))
    chunk5 = samples.chunks(np.array([5]))[0]
    np.testing.assert_array_equal(chunk5[:7], ep.actions[5:12])
    np.testing.assert_array_equal(chunk5[7:], np.repeat(ep.actions[-1:], 3, axis=0))
    assert samples.image_batch(np.array([0, 13])).shape == (2, 2, 32, 32, 3)
    assert samples.instructions == sorted(INSTRUCTIONS)


def test_sample_set_keeps_each_frame_in_memory_once(tmp_path) -> None:
    write_dataset(tmp_path / "demos.hdf5", episodes_per_task=2, steps=12)
    episodes = load_episodes(tmp_path, list(CAMERAS), (32, 32), 7)
    before = {cam: [ep.images[cam].copy() for ep in episodes] for cam in CAMERAS}
    samples = ChunkSamples(episodes, list(CAMERAS), horizon=10)
    for cam in CAMERAS:
        for i, ep in enumerate(episodes):
            assert np.shares_memory(ep.images[cam], samples.images[cam])  # a view, no copy
            np.testing.assert_array_equal(ep.images[cam], before[cam][i])
            rows = samples.images[cam][12 * i : 12 * (i + 1)]
            np.testing.assert_array_equal(rows, before[cam][i])


def test_split_holds_out_episodes_of_every_task(tmp_path) -> None:
    write_dataset(tmp_path / "demos.hdf5", episodes_per_task=4, steps=5)
    episodes = load_episodes(tmp_path, list(CAMERAS), (32, 32), 7)
    train, val = split_episodes(episodes, 0.25, seed=0)
    assert len(train) == 6 and len(val) == 2
    assert {ep.task for ep in val} == {"task_0", "task_1"}
    again_train, _ = split_episodes(episodes, 0.25, seed=0)
    assert [e.name for e in again_train] == [e.name for e in train]


def test_missing_camera_raises_dataset_error_naming_it(tmp_path) -> None:
    write_dataset(tmp_path / "demos.hdf5", episodes_per_task=1, steps=5)
    with pytest.raises(DatasetError, match="obs/top_image is missing"):
        load_episodes(tmp_path, ["agentview", "top"], (32, 32), 7)


def test_wrong_image_size_raises_dataset_error_with_both_shapes(tmp_path) -> None:
    write_dataset(tmp_path / "demos.hdf5", episodes_per_task=1, steps=5)
    with pytest.raises(
        DatasetError, match=r"uint8 \(5, 32, 32, 3\), expected uint8 \(5, 64, 64, 3\)"
    ):
        load_episodes(tmp_path, list(CAMERAS), (64, 64), 7)


def test_non_finite_actions_raise_dataset_error(tmp_path) -> None:
    path = write_dataset(tmp_path / "demos.hdf5", episodes_per_task=1, steps=5)
    with h5py.File(path, "a") as h5:
        h5["data/demo_0/actions"][2, 3] = np.nan
    with pytest.raises(DatasetError, match="actions holds non-finite"):
        load_episodes(path, list(CAMERAS), (32, 32), 7)


def test_empty_folder_raises_dataset_error(tmp_path) -> None:
    with pytest.raises(DatasetError, match="no .hdf5/.h5 file inside"):
        load_episodes(tmp_path, list(CAMERAS), (32, 32), 7)


def _mark_as_suite_episodes(path, tasks=("lift_green_block", "put_blue_block_on_plate")) -> None:
    """Give the synthetic episodes the attributes ``vla-edge collect`` writes."""
    with h5py.File(path, "r+") as h5:
        for name, group in h5["data"].items():
            task_id = 0 if group.attrs["task"] == "task_0" else 1
            group.attrs["task"] = tasks[task_id]
            group.attrs["split"] = "train"
            group.attrs["init_state_id"] = 1000 + int(name.split("_")[1])


def test_suite_episodes_carry_the_layout_of_their_init_state(tmp_path) -> None:
    from vla_edge.sim.tasks import OBJECTS, init_state

    path = write_dataset(tmp_path / "demos.hdf5", episodes_per_task=2, steps=12)
    plain = load_episodes(path, list(CAMERAS), (32, 32), 7)
    assert all(ep.layout_xy is None for ep in plain)
    _mark_as_suite_episodes(path)
    episodes = load_episodes(path, list(CAMERAS), (32, 32), 7)
    scene = init_state("put_blue_block_on_plate", 1003, "train").scene
    want = np.concatenate([scene.positions_m[n][:2] for n in OBJECTS] + [scene.target_xy_m])
    assert episodes[3].layout_xy.shape == (2 * (len(OBJECTS) + 1),)
    np.testing.assert_allclose(episodes[3].layout_xy, want, atol=1e-6)
    assert not np.allclose(episodes[0].layout_xy, episodes[1].layout_xy)
    # goal: the blue block, then the plate; lifting has no destination (the block twice)
    xy = {n: scene.positions_m[n][:2] for n in OBJECTS}
    np.testing.assert_allclose(episodes[3].goal_xy, np.concatenate([xy["blue_block"], xy["plate"]]))
    lift = init_state("lift_green_block", 1000, "train").scene.positions_m["green_block"][:2]
    np.testing.assert_allclose(episodes[0].goal_xy, np.concatenate([lift, lift]), atol=1e-6)
    samples = ChunkSamples(episodes[:1] + plain[1:2], list(CAMERAS), 10)
    assert samples.has_layout.tolist() == [True] * 12 + [False] * 12
    assert samples.steps.tolist() == list(range(12)) * 2
    assert np.all(samples.layout[12:] == 0.0)


def test_a_malformed_hand_over_layout_is_treated_as_unknown(tmp_path) -> None:
    from vla_edge.sim.tasks import OBJECTS

    path = write_dataset(tmp_path / "demos.hdf5", episodes_per_task=1, steps=12)
    _mark_as_suite_episodes(path)
    names = [*OBJECTS, "target"]
    with h5py.File(path, "r+") as h5:
        good, bad = h5["data/demo_0"], h5["data/demo_1"]
        good.attrs["scene_names"] = names
        good.attrs["scene_xy"] = np.arange(2 * len(names), dtype=np.float32).reshape(-1, 2)
        bad.attrs["scene_names"] = names
        bad.attrs["scene_xy"] = np.zeros((len(names) - 1, 2), np.float32)  # one row short
    first, second = load_episodes(path, list(CAMERAS), (32, 32), 7)
    np.testing.assert_allclose(first.layout_xy, np.arange(2 * len(names), dtype=np.float32))
    assert second.layout_xy is None and second.goal_xy is None
