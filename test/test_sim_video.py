"""MP4 writer for episode videos."""

import imageio.v2 as imageio
import numpy as np
import pytest

from vla_edge.core.errors import InvalidObservationError
from vla_edge.sim.video import tile_cameras, write_mp4


def test_mp4_holds_every_frame_enlarged(tmp_path):
    frames = [np.full((16, 24, 3), 10 * i, dtype=np.uint8) for i in range(12)]
    path = write_mp4(tmp_path / "sub" / "ep.mp4", frames, fps=10.0, min_side_px=64)
    reader = imageio.get_reader(str(path))
    got = [f for f in reader]
    reader.close()
    assert len(got) == 12
    assert got[0].shape == (64, 96, 3)
    assert abs(int(got[5].mean()) - 50) <= 3


def test_mp4_refuses_empty_or_malformed_frames(tmp_path):
    with pytest.raises(InvalidObservationError, match="at least one frame"):
        write_mp4(tmp_path / "a.mp4", [])
    with pytest.raises(InvalidObservationError, match="expected uint8"):
        write_mp4(tmp_path / "b.mp4", [np.zeros((8, 8), dtype=np.uint8)])
    frames = [np.zeros((8, 8, 3), np.uint8), np.zeros((8, 9, 3), np.uint8)]
    with pytest.raises(InvalidObservationError, match=r"frames\[1\] shape = \(8, 9, 3\)"):
        write_mp4(tmp_path / "c.mp4", frames)


def test_tile_cameras_puts_images_side_by_side():
    images = {"agentview": np.zeros((8, 8, 3), np.uint8), "wrist": np.ones((8, 8, 3), np.uint8)}
    tiled = tile_cameras(images)
    assert tiled.shape == (8, 16, 3)
    assert tiled[:, 8:].min() == 1
    with pytest.raises(InvalidObservationError, match="heights"):
        tile_cameras({"a": np.zeros((8, 8, 3), np.uint8), "b": np.zeros((9, 8, 3), np.uint8)})
