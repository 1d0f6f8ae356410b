"""Read the demonstrations ``vla-edge collect`` writes, lazily from HDF5.

Episodes are listed from a file or a folder of ``*.hdf5`` files; a sample is
the observation at policy step ``k`` with the chunk ``actions[k:k+H]``, padded
with the episode's last row (and a mask saying which rows are padding).
Images are read from disk on demand, so 128x128 or 224x224 datasets need not
fit in memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import h5py
import numpy as np

from vla_edge.core.errors import DatasetError

HDF5_SUFFIXES = (".hdf5", ".h5")
REQUIRED_ATTRS = ("instruction", "task", "init_state_id", "seed", "dt_action_s")


def action_chunk(actions: np.ndarray, k: int, horizon: int) -> tuple[np.ndarray, np.ndarray]:
    """``actions[k:k+horizon]`` padded with the last row, and the ``[H]`` padding mask.

    Raises:
        DatasetError: ``k`` outside ``[0, T)`` or ``horizon < 1``.
    """
    n = int(actions.shape[0])
    if not 0 <= k < n:
        raise DatasetError(f"step k = {k} outside the episode's [0, {n})")
    if horizon < 1:
        raise DatasetError(f"horizon = {horizon}: must be >= 1")
    rows = actions[k : k + horizon]
    is_pad = np.zeros(horizon, dtype=bool)
    if rows.shape[0] < horizon:
        is_pad[rows.shape[0] :] = True
        pad = np.repeat(actions[-1:], horizon - rows.shape[0], axis=0)
        rows = np.concatenate([rows, pad], axis=0)
    return np.asarray(rows), is_pad


def demo_files(path: str | Path) -> list[Path]:
    """The HDF5 files at ``path`` (a file, or every ``*.hdf5``/``*.h5`` below a folder).

    Raises:
        DatasetError: nothing there.
    """
    path = Path(path)
    if path.is_file():
        return [path]
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix in HDF5_SUFFIXES)
        if files:
            return files
        raise DatasetError(f"path = {str(path)!r}: no {'/'.join(HDF5_SUFFIXES)} file inside")
    raise DatasetError(f"path = {str(path)!r}: no such file or folder")


@dataclass(frozen=True)
class EpisodeRef:
    """Where one episode lives and what it is."""

    file: Path
    group: str
    task: str
    instruction: str
    init_state_id: int
    seed: int
    dt_action_s: float
    length: int


class DemoReader:
    """Index of the episodes under ``path`` with on-demand access to their samples.

    Args:
        path: a file or a folder of HDF5 files.
        cameras: camera names to read (``obs/<camera>_image``).
        tasks: keep only these tasks (all by default).

    Raises:
        DatasetError: no file, no episode, or an episode lacking a field or attribute.
    """

    def __init__(
        self,
        path: str | Path,
        cameras: Sequence[str] = ("agentview", "wrist"),
        tasks: Sequence[str] | None = None,
    ) -> None:
        self.cameras = tuple(cameras)
        self.episodes: list[EpisodeRef] = []
        self._files: dict[Path, h5py.File] = {}
        for file in demo_files(path):
            with h5py.File(file, "r") as f:
                if "data" not in f:
                    raise DatasetError(f"{file}: group 'data' is missing")
                names = sorted(f["data"], key=lambda n: (len(n), n))
                for name in names:
                    ref = self._index(file, f["data"][name], f"data/{name}")
                    if tasks is None or ref.task in tasks:
                        self.episodes.append(ref)
        if not self.episodes:
            raise DatasetError(
                f"path = {str(path)!r}: no episode (data/demo_<i>) for tasks {tasks}"
            )
        ends = np.cumsum([ref.length for ref in self.episodes])
        self._ends = ends
        self.num_samples = int(ends[-1])

    def _index(self, file: Path, group: h5py.Group, where: str) -> EpisodeRef:
        for attr in REQUIRED_ATTRS:
            if attr not in group.attrs:
                raise DatasetError(f"{file}:{where}: attribute {attr} is missing")
        for key in ("actions", "obs/state", *(f"obs/{cam}_image" for cam in self.cameras)):
            if key not in group:
                raise DatasetError(f"{file}:{where}: field {key} is missing")
        length = int(group["actions"].shape[0])
        for key in ("obs/state", *(f"obs/{cam}_image" for cam in self.cameras)):
            if int(group[key].shape[0]) != length:
                raise DatasetError(
                    f"{file}:{where}: {key} has {group[key].shape[0]} rows, actions has {length}"
                )
        if length == 0:
            raise DatasetError(f"{file}:{where}: episode length = 0: must be >= 1")
        a = group.attrs
        return EpisodeRef(
            file=file,
            group=where,
            task=str(a["task"]),
            instruction=str(a["instruction"]),
            init_state_id=int(a["init_state_id"]),
            seed=int(a["seed"]),
            dt_action_s=float(a["dt_action_s"]),
            length=length,
        )

    def _group(self, ref: EpisodeRef) -> h5py.Group:
        handle = self._files.get(ref.file)
        if handle is None:
            handle = self._files[ref.file] = h5py.File(ref.file, "r")
        return handle[ref.group]

    def episode(self, index: int) -> dict[str, object]:
        """Whole episode ``index``: ``images`` per camera, ``state`` and ``actions``."""
        ref = self.episodes[index]
        group = self._group(ref)
        return {
            "images": {cam: group[f"obs/{cam}_image"][()] for cam in self.cameras},
            "state": group["obs/state"][()],
            "actions": group["actions"][()],
            "instruction": ref.instruction,
            "task": ref.task,
        }

    def locate(self, sample_index: int) -> tuple[int, int]:
        """(episode index, step ``k``) of a flat sample index."""
        if not 0 <= sample_index < self.num_samples:
            raise DatasetError(f"sample index = {sample_index} outside [0, {self.num_samples})")
        episode = int(np.searchsorted(self._ends, sample_index, side="right"))
        start = 0 if episode == 0 else int(self._ends[episode - 1])
        return episode, sample_index - start

    def sample(self, sample_index: int, horizon: int = 10) -> dict[str, object]:
        """Observation at step ``k`` and the padded chunk ``actions[k:k+horizon]``.

        Returns:
            ``images`` (camera -> ``[h, w, 3]`` uint8), ``state`` ``[A]``,
            ``actions`` ``[H, A]``, ``is_pad`` ``[H]``, ``instruction``, ``task``.
        """
        episode, k = self.locate(sample_index)
        ref = self.episodes[episode]
        group = self._group(ref)
        actions, is_pad = action_chunk(group["actions"][()], k, horizon)
        return {
            "images": {cam: group[f"obs/{cam}_image"][k] for cam in self.cameras},
            "state": group["obs/state"][k],
            "actions": actions,
            "is_pad": is_pad,
            "instruction": ref.instruction,
            "task": ref.task,
        }

    def close(self) -> None:
        """Close the open HDF5 files."""
        for handle in self._files.values():
            handle.close()
        self._files.clear()

    def __len__(self) -> int:
        return self.num_samples
