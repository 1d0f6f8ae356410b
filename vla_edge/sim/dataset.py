"""The demonstration files ``vla-edge collect`` writes: finding them, and the probe targets in them.

Training reads them with :func:`vla_edge.archs.bundled.data.load_episodes`; the
layout is in docs/INTERFACES.md. Each episode group ``data/demo_<i>`` stores
its training probes' targets (:mod:`vla_edge.sim.probe_targets`) as attributes::

    layout_names  [n + 1] str            every object, then "target"
    layout_xy     [n + 1, 2] float32     their xy (m) where the recording starts
    goal_names    [2] str                the instructed object, its destination
    goal_xy       [2, 2] float32         their xy (m)

Files recorded before those were stored get them in place with
``vla-edge collect --add-targets DIR`` (:func:`add_targets`), computed by the
same function from what the files already hold: the recorded initial state
(``task``, ``split``, ``init_state_id``) or, for recovery episodes, the
hand-over layout (``scene_names``, ``scene_xy``).
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

from vla_edge.archs.bundled.data import HDF5_SUFFIXES, demo_files
from vla_edge.core.errors import DatasetError, InitStateOutOfRangeError, UnknownTaskError
from vla_edge.sim.probe_targets import (
    LAYOUT_NAMES,
    ProbeTargets,
    episode_targets,
    scene_targets,
)

TARGET_ATTRS = ("layout_names", "layout_xy", "goal_names", "goal_xy")
"""The episode attributes :func:`write_targets` writes."""


def write_targets(group: h5py.Group, targets: ProbeTargets) -> None:
    """Store ``targets`` as the attributes of the episode ``group`` (overwriting)."""
    group.attrs["layout_names"] = list(LAYOUT_NAMES)
    group.attrs["layout_xy"] = targets.layout_xy.astype(np.float32)
    group.attrs["goal_names"] = list(targets.goal_names)
    group.attrs["goal_xy"] = targets.goal_xy.astype(np.float32)


def _attr_str(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def recorded_targets(group: h5py.Group, where: str) -> ProbeTargets:
    """The targets of an episode already on disk, from its recorded start.

    Raises:
        DatasetError: naming ``where`` and why: no ``task``, a task outside the
            suite, a malformed hand-over layout, or no recorded start at all.
    """
    attrs = group.attrs
    if "task" not in attrs:
        raise DatasetError(f"{where}: attribute task is missing; cannot compute probe targets")
    task = _attr_str(attrs["task"])
    scene_xy = None
    if "scene_xy" in attrs or "scene_names" in attrs:
        # a recovery episode: the layout at the hand-over, where the recording starts
        if "scene_xy" not in attrs or "scene_names" not in attrs:
            raise DatasetError(f"{where}: scene_xy and scene_names come together; one is missing")
        names = [_attr_str(n) for n in attrs["scene_names"]]
        rows = np.asarray(attrs["scene_xy"], dtype=np.float32)
        if rows.shape != (len(names), 2):
            raise DatasetError(
                f"{where}: attribute scene_xy has shape {rows.shape}, expected "
                f"({len(names)}, 2) for scene_names {names}"
            )
        scene_xy = dict(zip(names, rows, strict=True))
        absent = [name for name in LAYOUT_NAMES if name not in scene_xy]
        if absent:
            raise DatasetError(f"{where}: scene_names {names} lacks {absent}")
    elif "init_state_id" not in attrs or "split" not in attrs:
        raise DatasetError(
            f"{where}: attributes init_state_id and split (or scene_names and scene_xy) are "
            "missing; the episode does not say where it starts, so its probe targets "
            "cannot be computed"
        )
    try:
        if scene_xy is not None:
            return scene_targets(task, scene_xy)
        return episode_targets(task, int(attrs["init_state_id"]), _attr_str(attrs["split"]))
    except (UnknownTaskError, InitStateOutOfRangeError, ValueError) as exc:
        raise DatasetError(f"{where}: cannot compute probe targets: {exc}") from None


def add_targets(path: str | Path) -> dict[Path, int]:
    """Store the probe targets in every episode of the HDF5 files at ``path``, in place.

    Each file is written only once every one of its episodes has its targets
    (a file is upgraded whole or not at all); running it again rewrites the
    same numbers.

    Returns:
        The number of episodes given targets, per file.

    Raises:
        DatasetError: no file, a file without a ``data`` group, or an episode
            whose targets cannot be computed (naming it and why).
    """
    done: dict[Path, int] = {}
    for file in demo_files(path):
        with h5py.File(file, "r+") as h5:
            if "data" not in h5:
                raise DatasetError(f"{file}: group 'data' is missing")
            groups = [g for g in h5["data"].values() if isinstance(g, h5py.Group)]
            targets = [recorded_targets(g, f"{file}:{g.name.lstrip('/')}") for g in groups]
            for group, values in zip(groups, targets, strict=True):
                write_targets(group, values)
        done[file] = len(groups)
    return done


__all__ = [
    "HDF5_SUFFIXES",
    "TARGET_ATTRS",
    "add_targets",
    "demo_files",
    "recorded_targets",
    "write_targets",
]
