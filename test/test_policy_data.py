import h5py
import numpy as np
import pytest
from policy_synthetic import (
    CAMERAS,
    INSTRUCTIONS,
    LAYOUT_ROWS,
    made_up_targets,
    write_dataset,
)

from vla_edge.archs.bundled.data import ChunkSamples, load_episodes, split_episodes
from vla_edge.core.errors import DatasetError


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


def test_stored_probe_targets_are_read_row_by_row(tmp_path) -> None:
    path = write_dataset(tmp_path / "demos.hdf5", episodes_per_task=2, steps=12, with_targets=True)
    episodes = load_episodes(path, list(CAMERAS), (32, 32), 7, probes=["layout", "goal"])
    for i, ep in enumerate(episodes):
        layout, goal = made_up_targets(i)
        assert ep.layout_xy.dtype == np.float32 and ep.layout_xy.shape == (2 * LAYOUT_ROWS,)
        np.testing.assert_array_equal(ep.layout_xy, layout.reshape(-1))  # x0 y0 x1 y1 ...
        np.testing.assert_array_equal(ep.goal_xy, goal.reshape(-1))
    plain_path = write_dataset(tmp_path / "plain" / "d.hdf5", episodes_per_task=1, steps=12)
    plain = load_episodes(plain_path, list(CAMERAS), (32, 32), 7)
    assert all(ep.layout_xy is None and ep.goal_xy is None for ep in plain)
    samples = ChunkSamples(episodes[:1] + plain[1:2], list(CAMERAS), 10)
    assert samples.has_layout.tolist() == [True] * 12 + [False] * 12
    assert samples.steps.tolist() == list(range(12)) * 2
    np.testing.assert_array_equal(samples.layout[:12], np.tile(episodes[0].layout_xy, (12, 1)))
    np.testing.assert_array_equal(samples.goal[:12], np.tile(episodes[0].goal_xy, (12, 1)))
    assert np.all(samples.layout[12:] == 0.0) and np.all(samples.goal[12:] == 0.0)


def test_a_probe_in_use_without_stored_targets_names_the_file_field_and_upgrade_command(
    tmp_path,
) -> None:
    path = write_dataset(tmp_path / "old.hdf5", episodes_per_task=1, steps=5)
    with pytest.raises(DatasetError) as caught:
        load_episodes(tmp_path, list(CAMERAS), (32, 32), 7, probes=["goal"])
    message = str(caught.value)
    assert f"{path}:data/demo_0" in message
    assert "goal_xy" in message and "layout_xy" not in message
    assert f"'vla-edge collect --add-targets {tmp_path}'" in message
    assert "train.goal_loss_weight: 0" in message
    # a probe that is off (weight 0) needs nothing
    assert len(load_episodes(tmp_path, list(CAMERAS), (32, 32), 7, probes=[])) == 2


def test_only_the_targets_of_the_probes_in_use_are_required(tmp_path) -> None:
    path = write_dataset(tmp_path / "d.hdf5", episodes_per_task=1, steps=5, with_targets=True)
    with h5py.File(path, "r+") as h5:
        del h5["data/demo_1"].attrs["goal_xy"]
    (_, second) = load_episodes(path, list(CAMERAS), (32, 32), 7, probes=["layout"])
    assert second.layout_xy is not None and second.goal_xy is None
    with pytest.raises(
        DatasetError, match=r"data/demo_1: probe target attributes missing: goal_xy"
    ):
        load_episodes(path, list(CAMERAS), (32, 32), 7, probes=["layout", "goal"])
    with pytest.raises(ValueError, match="heading"):
        load_episodes(path, list(CAMERAS), (32, 32), 7, probes=["heading"])


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("goal_xy", np.zeros((3, 2), np.float32), r"goal_xy has shape \(3, 2\), expected \[2, 2\]"),
        ("layout_xy", np.zeros(12, np.float32), r"layout_xy has shape \(12,\), expected \[n >= 1"),
        ("layout_xy", np.full((6, 2), np.nan, np.float32), "layout_xy holds non-finite"),
    ],
)
def test_a_malformed_stored_target_is_a_dataset_error_naming_it(
    tmp_path, field, value, message
) -> None:
    path = write_dataset(tmp_path / "d.hdf5", episodes_per_task=1, steps=5, with_targets=True)
    with h5py.File(path, "r+") as h5:
        h5["data/demo_1"].attrs[field] = value
    with pytest.raises(DatasetError, match=f"data/demo_1: attribute {message}"):
        load_episodes(path, list(CAMERAS), (32, 32), 7)


def test_training_data_code_does_not_import_the_scene() -> None:
    """Targets are data: nothing under vla_edge/archs/bundled imports vla_edge.sim."""
    import ast
    from pathlib import Path

    import vla_edge.archs.bundled

    offenders = []
    for file in sorted(Path(vla_edge.archs.bundled.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(file.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            if any(n == "vla_edge.sim" or n.startswith("vla_edge.sim.") for n in names):
                offenders.append(f"{file.name}:{node.lineno}")
    assert offenders == []
