"""``vla-edge collect`` writes readable HDF5 demos; the lazy reader pads chunks."""

import h5py
import numpy as np
import pytest

from vla_edge.cli import main
from vla_edge.core.errors import DatasetError
from vla_edge.sim.dataset import DemoReader, action_chunk, demo_files


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    out = tmp_path_factory.mktemp("demos")
    rc = main(
        [
            "collect", "--suite", "tabletop", "--episodes-per-task", "1", "--out", str(out),
            "--tasks", "lift_green_block", "--image-size", "16", "--seed", "3", "--no-progress",
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


def test_reader_gives_padded_chunks(demos):
    reader = DemoReader(demos)
    assert [e.task for e in reader.episodes] == ["lift_green_block"]
    n = len(reader)
    last = reader.sample(n - 1, horizon=10)
    assert last["actions"].shape == (10, 7)
    assert last["is_pad"].tolist() == [False] + [True] * 9
    np.testing.assert_array_equal(last["actions"][1:], np.repeat(last["actions"][:1], 9, axis=0))
    first = reader.sample(0)
    assert first["images"]["wrist"].shape == (16, 16, 3)
    assert first["instruction"] == "lift the green block"
    assert not first["is_pad"].any()
    episode = reader.episode(0)
    np.testing.assert_array_equal(first["actions"], episode["actions"][:10])
    reader.close()


def test_reader_filters_by_task_and_reports_missing_data(demos, tmp_path):
    with pytest.raises(DatasetError, match="no episode"):
        DemoReader(demos, tasks=["stack_red_on_green"])
    with pytest.raises(DatasetError, match="no such file or folder"):
        demo_files(tmp_path / "absent")
    with pytest.raises(DatasetError, match="no .hdf5"):
        demo_files(tmp_path)
    broken = tmp_path / "broken.hdf5"
    with h5py.File(broken, "w") as f:
        g = f.create_group("data/demo_0")
        g.create_dataset("actions", data=np.zeros((3, 7)))
        for key in ("instruction", "task", "init_state_id", "seed", "dt_action_s"):
            g.attrs[key] = 0
    with pytest.raises(DatasetError, match="field obs/state is missing"):
        DemoReader(broken)


def test_action_chunk_pads_with_the_last_row_and_checks_k():
    actions = np.arange(12.0).reshape(4, 3)
    chunk, is_pad = action_chunk(actions, 2, 5)
    np.testing.assert_array_equal(
        chunk, [[6, 7, 8], [9, 10, 11], [9, 10, 11], [9, 10, 11], [9, 10, 11]]
    )
    assert is_pad.tolist() == [False, False, True, True, True]
    with pytest.raises(DatasetError, match="step k = 4"):
        action_chunk(actions, 4, 5)


def test_collect_rejects_an_unknown_task(tmp_path):
    with pytest.raises(SystemExit, match="task = 'juggle'"):
        main(["collect", "--episodes-per-task", "1", "--out", str(tmp_path), "--tasks", "juggle"])
