"""Demonstrations for training: HDF5 episodes -> in-memory samples (numpy only).

Layout read (robomimic convention, see docs/INTERFACES.md)::

    data/demo_<i>/obs/<camera>_image   [T, h, w, 3] uint8
    data/demo_<i>/obs/state            [T, A]
    data/demo_<i>/actions              [T, A]   target for time t_k
    data/demo_<i> attrs: instruction, task, ...
    data/demo_<i> attrs layout_xy [n, 2], goal_xy [2, 2]   the probes' targets

A sample is the observation at step ``k`` of an episode with the chunk
``actions[k:k+H]`` padded with the episode's last row.

Episodes recorded from the tabletop suite also carry the training probes'
targets, computed when they were collected (``vla-edge collect``): the scene
layout where the recording starts (``Episode.layout_xy``) and the instructed
object's and its destination's positions (``Episode.goal_xy``). They are read
here as numbers; training never rebuilds the scene. A probe in use needs them
in every episode; files collected before they were stored get them in place
with ``vla-edge collect --add-targets DIR``.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vla_edge.core.errors import DatasetError

HDF5_SUFFIXES = (".hdf5", ".h5")

PROBE_TARGETS: dict[str, str] = {"layout": "layout_xy", "goal": "goal_xy"}
"""Training probe -> the episode attribute that holds its target."""

ADD_TARGETS_COMMAND = "vla-edge collect --add-targets"


@dataclass
class Episode:
    """One recorded demonstration."""

    images: dict[str, np.ndarray]
    state: np.ndarray
    actions: np.ndarray
    instruction: str
    task: str
    name: str
    layout_xy: np.ndarray | None = None
    """``[2 * (objects + 1)]``: initial xy of every object then the target (m), if stored."""
    goal_xy: np.ndarray | None = None
    """``[4]``: initial xy of the instructed object, then of its destination (the
    object itself when the task has none), if stored."""

    @property
    def length(self) -> int:
        """Number of steps ``T``."""
        return int(self.state.shape[0])


def _attr_str(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode()
    return str(value)


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


def load_episodes(
    path: str | Path,
    cameras: list[str],
    image_hw: tuple[int, int],
    action_dim: int,
    probes: Collection[str] = (),
) -> list[Episode]:
    """Read every episode of every HDF5 file under ``path`` (sorted, deterministic).

    Args:
        probes: the training probes in use (``PROBE_TARGETS`` keys, those with a
            loss weight > 0); every episode must store their targets. Targets
            that are stored are read whether or not a probe uses them.

    Raises:
        DatasetError: no file, no episode, a missing camera or field, an image
            size other than ``image_hw``, a state/action of the wrong width or
            length, a non-finite value, a malformed probe target, or a missing
            one a probe in ``probes`` needs (naming the file, the attribute and
            the command that adds it).
        ValueError: a name in ``probes`` that is not a probe.
    """
    import h5py

    unknown = sorted(set(probes) - set(PROBE_TARGETS))
    if unknown:
        raise ValueError(f"probes = {unknown}: not a probe; known: {', '.join(PROBE_TARGETS)}")
    episodes: list[Episode] = []
    for file in demo_files(path):
        with h5py.File(file, "r") as h5:
            if "data" not in h5:
                raise DatasetError(f"{file}: group 'data' is missing")
            names = sorted(h5["data"].keys(), key=_demo_order)
            for name in names:
                group = h5["data"][name]
                where = f"{file}:data/{name}"
                episode = _read_episode(
                    group, where, cameras, image_hw, action_dim, f"{file.name}/{name}"
                )
                _check_targets(episode, probes, where, path)
                episodes.append(episode)
    if not episodes:
        raise DatasetError(f"data = {str(path)!r}: no episode (data/demo_<i>) found")
    return episodes


def _demo_order(name: str) -> tuple[int, str]:
    tail = name.rsplit("_", 1)[-1]
    return (int(tail), name) if tail.isdigit() else (1 << 30, name)


def _read_episode(
    group: object,
    where: str,
    cameras: list[str],
    image_hw: tuple[int, int],
    action_dim: int,
    name: str,
) -> Episode:
    for key in ("obs", "actions"):
        if key not in group:
            raise DatasetError(f"{where}: field {key} is missing")
    obs = group["obs"]
    if "state" not in obs:
        raise DatasetError(f"{where}: field obs/state is missing")
    state = np.asarray(obs["state"][()], dtype=np.float32)
    actions = np.asarray(group["actions"][()], dtype=np.float32)
    for field, arr in (("obs/state", state), ("actions", actions)):
        if arr.ndim != 2 or arr.shape[1] != action_dim or arr.shape[0] < 1:
            raise DatasetError(
                f"{where}: {field} has shape {arr.shape}, expected [T >= 1, {action_dim}]"
            )
        if not np.all(np.isfinite(arr)):
            raise DatasetError(f"{where}: {field} holds non-finite values")
    if actions.shape[0] != state.shape[0]:
        raise DatasetError(
            f"{where}: actions has {actions.shape[0]} rows, obs/state has {state.shape[0]}"
        )
    images = {}
    for cam in cameras:
        key = f"{cam}_image"
        if key not in obs:
            raise DatasetError(f"{where}: camera field obs/{key} is missing (cameras {cameras})")
        img = obs[key][()]
        expected = (state.shape[0], image_hw[0], image_hw[1], 3)
        if img.dtype != np.uint8 or img.shape != expected:
            raise DatasetError(
                f"{where}: obs/{key} is {img.dtype} {img.shape}, expected uint8 {expected}"
            )
        images[cam] = img
    attrs = group.attrs
    if "instruction" not in attrs:
        raise DatasetError(f"{where}: attribute instruction is missing")
    instruction = _attr_str(attrs["instruction"])
    task = _attr_str(attrs.get("task", instruction))
    layout = _read_xy(attrs, "layout_xy", None, where)
    goal = _read_xy(attrs, "goal_xy", 2, where)
    return Episode(images, state, actions, instruction, task, name, layout, goal)


def _read_xy(attrs: object, field: str, rows: int | None, where: str) -> np.ndarray | None:
    """A stored ``[rows, 2]`` xy target, flattened row by row (``None`` when absent)."""
    if field not in attrs:
        return None
    xy = np.asarray(attrs[field], dtype=np.float32)
    if xy.ndim != 2 or xy.shape[1] != 2 or xy.shape[0] < 1 or rows not in (None, xy.shape[0]):
        expected = f"[{'n >= 1' if rows is None else rows}, 2]"
        raise DatasetError(f"{where}: attribute {field} has shape {xy.shape}, expected {expected}")
    if not np.all(np.isfinite(xy)):
        raise DatasetError(f"{where}: attribute {field} holds non-finite values")
    return xy.reshape(-1)


def _check_targets(episode: Episode, probes: Collection[str], where: str, path: str | Path) -> None:
    """Every probe in ``probes`` has its target in ``episode``."""
    stored = {"layout": episode.layout_xy, "goal": episode.goal_xy}
    missing = [probe for probe in PROBE_TARGETS if probe in probes and stored[probe] is None]
    if not missing:
        return
    fields = ", ".join(PROBE_TARGETS[probe] for probe in missing)
    weights = ", ".join(f"train.{probe}_loss_weight: 0" for probe in missing)
    raise DatasetError(
        f"{where}: probe target attributes missing: {fields} (probes "
        f"{', '.join(missing)} have a loss weight > 0). Files collected before the probe "
        f"targets were stored get them in place with '{ADD_TARGETS_COMMAND} {path}'; "
        f"or train without those probes ({weights})"
    )


def split_episodes(
    episodes: list[Episode], val_fraction: float, seed: int
) -> tuple[list[Episode], list[Episode]]:
    """Hold out about ``val_fraction`` of the episodes of each task (at least one when > 0)."""
    if val_fraction <= 0.0:
        return list(episodes), []
    rng = np.random.default_rng(seed)
    by_task: dict[str, list[int]] = {}
    for i, ep in enumerate(episodes):
        by_task.setdefault(ep.task, []).append(i)
    val_ids: set[int] = set()
    for task in sorted(by_task):
        ids = by_task[task]
        if len(ids) < 2:
            continue
        n_val = max(1, int(round(val_fraction * len(ids))))
        val_ids.update(int(i) for i in rng.choice(ids, size=n_val, replace=False))
    train = [ep for i, ep in enumerate(episodes) if i not in val_ids]
    val = [ep for i, ep in enumerate(episodes) if i in val_ids]
    return train, val


def _concatenate_frames(episodes: list[Episode], cam: str) -> np.ndarray:
    """All frames of camera ``cam``, concatenated; each episode then holds a view into them.

    The episodes' own arrays are released, so the frames are in memory once, not twice
    (at 128x128 a data set's frames are most of the machine's memory).
    """
    frames = np.concatenate([ep.images[cam] for ep in episodes])
    offset = 0
    for ep in episodes:
        ep.images[cam] = frames[offset : offset + ep.length]
        offset += ep.length
    return frames


class ChunkSamples:
    """All samples of a set of episodes, concatenated for fast batched indexing.

    Attributes:
        images: camera -> ``[N, h, w, 3]`` uint8.
        states: ``[N, A]`` float32.
        instruction_ids: ``[N]`` index into ``instructions``.
        instructions: the distinct instruction strings (sorted).
        steps: ``[N]`` step ``k`` of each sample within its episode.
        layout: ``[N, L]`` the episode's initial layout (zeros where unknown).
        goal: ``[N, 4]`` the episode's goal xy (zeros where unknown).
        has_layout: ``[N]`` whether ``layout`` and ``goal`` are known.
    """

    def __init__(self, episodes: list[Episode], cameras: list[str], horizon: int) -> None:
        if not episodes:
            raise DatasetError("episodes: the sample set is empty (0 episodes)")
        self.cameras = list(cameras)
        self.horizon = int(horizon)
        self.instructions = sorted({ep.instruction for ep in episodes})
        lookup = {s: i for i, s in enumerate(self.instructions)}
        self.images = {cam: _concatenate_frames(episodes, cam) for cam in cameras}
        self.states = np.concatenate([ep.state for ep in episodes]).astype(np.float32)
        self._actions = np.concatenate([ep.actions for ep in episodes]).astype(np.float32)
        index_rows, ids = [], []
        offset = 0
        for ep in episodes:
            steps = np.arange(ep.length)[:, None] + np.arange(self.horizon)[None, :]
            index_rows.append(offset + np.minimum(steps, ep.length - 1))
            ids.append(np.full(ep.length, lookup[ep.instruction], dtype=np.int64))
            offset += ep.length
        self._chunk_index = np.concatenate(index_rows)
        self.instruction_ids = np.concatenate(ids)
        self.steps = np.concatenate([np.arange(ep.length) for ep in episodes])
        width = max((ep.layout_xy.size for ep in episodes if ep.layout_xy is not None), default=0)
        self.layout = np.zeros((len(self.states), width), dtype=np.float32)
        self.goal = np.zeros((len(self.states), 4), dtype=np.float32)
        self.has_layout = np.zeros(len(self.states), dtype=bool)
        offset = 0
        for ep in episodes:
            rows = slice(offset, offset + ep.length)
            if ep.layout_xy is not None and ep.layout_xy.size == width and ep.goal_xy is not None:
                self.layout[rows] = ep.layout_xy
                self.goal[rows] = ep.goal_xy
                self.has_layout[rows] = True
            offset += ep.length
        self.num_episodes = len(episodes)

    def __len__(self) -> int:
        return int(self.states.shape[0])

    def chunks(self, idx: np.ndarray | slice | None = None) -> np.ndarray:
        """Absolute action chunks ``[B, H, A]`` of samples ``idx`` (all when ``None``)."""
        rows = self._chunk_index if idx is None else self._chunk_index[idx]
        return self._actions[rows]

    def image_batch(self, idx: np.ndarray) -> np.ndarray:
        """``[B, n_cams, h, w, 3]`` uint8 for samples ``idx``."""
        return np.stack([self.images[cam][idx] for cam in self.cameras], axis=1)
