"""Write episode frames to an MP4 for a person to look at (imageio-ffmpeg)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from vla_edge.core.errors import InvalidObservationError


def tile_cameras(images: dict[str, np.ndarray]) -> np.ndarray:
    """Side-by-side ``[H, sum(W), 3]`` frame of every camera image (equal heights)."""
    frames = list(images.values())
    if not frames:
        raise InvalidObservationError("images = {}: need at least one camera image to tile")
    heights = {f.shape[0] for f in frames}
    if len(heights) != 1:
        raise InvalidObservationError(f"images heights = {sorted(heights)}: must all be equal")
    return np.concatenate(frames, axis=1)


def write_mp4(
    path: str | Path, frames: Sequence[np.ndarray], fps: float = 10.0, min_side_px: int = 256
) -> Path:
    """Encode ``frames`` (``uint8 [H, W, 3]``) as H.264 MP4 at ``fps``.

    Small frames are enlarged by an integer factor (nearest neighbour) until the
    shorter side is at least ``min_side_px``, and padded to even sizes, so that
    players show them sharply.

    Raises:
        InvalidObservationError: no frames, or a frame that is not ``uint8 [H, W, 3]``
            of the first frame's size.
    """
    import imageio.v2 as imageio

    if len(frames) == 0:
        raise InvalidObservationError(f"frames: {path} needs at least one frame, got 0")
    first = np.asarray(frames[0])
    if first.ndim != 3 or first.shape[2] != 3 or first.dtype != np.uint8:
        raise InvalidObservationError(
            f"frames[0] shape = {first.shape} dtype = {first.dtype}: expected uint8 [H, W, 3]"
        )
    if not fps > 0.0:
        raise InvalidObservationError(f"fps = {fps}: must be > 0")
    scale = max(1, int(np.ceil(min_side_px / min(first.shape[:2]))))
    out_h = first.shape[0] * scale + (first.shape[0] * scale) % 2
    out_w = first.shape[1] * scale + (first.shape[1] * scale) % 2
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = imageio.get_writer(
        str(path), fps=fps, codec="libx264", quality=7, macro_block_size=1, pixelformat="yuv420p"
    )
    try:
        for i, frame in enumerate(frames):
            frame = np.asarray(frame)
            if frame.shape != first.shape or frame.dtype != np.uint8:
                raise InvalidObservationError(
                    f"frames[{i}] shape = {frame.shape} dtype = {frame.dtype}: expected "
                    f"uint8 {first.shape}"
                )
            big = frame.repeat(scale, axis=0).repeat(scale, axis=1)
            padded = np.zeros((out_h, out_w, 3), dtype=np.uint8)
            padded[: big.shape[0], : big.shape[1]] = big
            writer.append_data(padded)
    finally:
        writer.close()
    return path
