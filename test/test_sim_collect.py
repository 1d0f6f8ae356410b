"""``vla-edge collect`` writes HDF5 demos in the documented layout that training reads."""

import h5py
import numpy as np
import pytest

from vla_edge.cli import main
from vla_edge.core.errors import DatasetError
from vla_edge.policy.data import load_episodes
from vla_edge.sim.dataset import demo_files


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


def test_training_reads_the_collected_episode_with_its_layout(demos):
    (episode,) = load_episodes(demos, ["agentview", "wrist"], (16, 16), 7)
    assert episode.task == "lift_green_block"
    assert episode.instruction == "lift the green block"
    assert episode.images["wrist"].shape == (episode.length, 16, 16, 3)
    # the recorded init state gives the training probes their targets
    assert episode.layout_xy is not None and episode.goal_xy is not None


def test_a_missing_or_empty_data_path_is_a_named_dataset_error(tmp_path):
    with pytest.raises(DatasetError, match="no such file or folder"):
        demo_files(tmp_path / "absent")
    with pytest.raises(DatasetError, match="no .hdf5"):
        demo_files(tmp_path)


def test_collect_rejects_an_unknown_task(tmp_path):
    with pytest.raises(SystemExit, match="task = 'juggle'"):
        main(["collect", "--episodes-per-task", "1", "--out", str(tmp_path), "--tasks", "juggle"])
