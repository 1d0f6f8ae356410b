"""Demonstrations for training: HDF5 episodes -> in-memory samples (numpy only).

Layout read (robomimic convention, see docs/INTERFACES.md)::

    data/demo_<i>/obs/<camera>_image   [T, h, w, 3] uint8
    data/demo_<i>/obs/state            [T, A]
    data/demo_<i>/actions              [T, A]   target for time t_k
    data/demo_<i> attrs: instruction, task, ...

A sample is the observation at step ``k`` of an episode with the chunk
``actions[k:k+H]`` padded with the episode's last row.

Episodes recorded from the tabletop suite also carry their scene layout: the
``task``, ``split`` and ``init_state_id`` attributes name the fixed initial
state, whose object positions are re-derived here (``Episode.layout_xy``).
Training can use it as an auxiliary target for the vision encoder; episodes
from elsewhere simply have none.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vla_edge.core.errors import DatasetError
from vla_edge.sim.dataset import demo_files


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
    """``[2 * (objects + 1)]``: initial xy of every object then the target (m), if known."""
    goal_xy: np.ndarray | None = None
    """``[4]``: initial xy of the instructed object, then of its destination (the
    object itself when the task has none), if known."""

    @property
    def length(self) -> int:
        """Number of steps ``T``."""
        return int(self.state.shape[0])


def _attr_str(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode()
    return str(value)


def load_episodes(
    path: str | Path,
    cameras: list[str],
    image_hw: tuple[int, int],
    action_dim: int,
) -> list[Episode]:
    """Read every episode of every HDF5 file under ``path`` (sorted, deterministic).

    Raises:
        DatasetError: no file, no episode, a missing camera or field, an image
            size other than ``image_hw``, a state/action of the wrong width or
            length, or a non-finite value.
    """
    import h5py

    episodes: list[Episode] = []
    for file in demo_files(path):
        with h5py.File(file, "r") as h5:
            if "data" not in h5:
                raise DatasetError(f"{file}: group 'data' is missing")
            names = sorted(h5["data"].keys(), key=_demo_order)
            for name in names:
                group = h5["data"][name]
                where = f"{file}:data/{name}"
                episodes.append(
                    _read_episode(
                        group, where, cameras, image_hw, action_dim, f"{file.name}/{name}"
                    )
                )
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
    layout, goal = _scene_targets(attrs, task)
    return Episode(images, state, actions, instruction, task, name, layout, goal)


def _scene_targets(attrs: object, task: str) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Layout xy and goal xy of a tabletop-suite episode (``None`` for other data)."""
    from vla_edge.core.errors import InitStateOutOfRangeError, UnknownTaskError
    from vla_edge.sim.tasks import OBJECTS, get_task, init_state

    try:
        spec = get_task(task)
    except UnknownTaskError:
        return None, None
    if "scene_xy" in attrs and "scene_names" in attrs:
        # recovery episodes: the layout where the recording starts (the hand-over)
        names = [_attr_str(n) for n in attrs["scene_names"]]
        rows = np.asarray(attrs["scene_xy"], dtype=np.float32)
        if rows.shape != (len(names), 2):
            return None, None
        xy = dict(zip(names, rows, strict=True))
        if any(name not in xy for name in (*OBJECTS, "target")):
            return None, None
    elif "init_state_id" in attrs and "split" in attrs:
        try:
            scene = init_state(task, int(attrs["init_state_id"]), _attr_str(attrs["split"])).scene
        except (InitStateOutOfRangeError, ValueError):
            return None, None
        xy = {name: scene.positions_m[name][:2] for name in OBJECTS}
        xy["target"] = scene.target_xy_m
    else:
        return None, None
    layout = np.concatenate([xy[name] for name in (*OBJECTS, "target")]).astype(np.float32)
    destination = xy[spec.ref] if spec.ref else xy[spec.obj]
    goal = np.concatenate([xy[spec.obj], destination]).astype(np.float32)
    return layout, goal


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
