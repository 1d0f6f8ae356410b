"""The training probes' targets of a tabletop episode, computed where the scene is known.

``vla-edge collect`` stores them in each episode (:func:`vla_edge.sim.dataset.write_targets`),
so training reads numbers and never imports the scene:

* the **layout**: the xy of every object (:data:`~vla_edge.sim.tasks.OBJECTS`)
  and of the target region where the recording starts;
* the **goal**: the xy of the instructed object, then of its destination (the
  task's ``ref``; the object itself when the task has none, as in lifting).

"Where the recording starts" is the episode's initial state, or for a recovery
episode the scene at the hand-over.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from vla_edge.sim.tasks import OBJECTS, Split, get_task, init_state

LAYOUT_NAMES: tuple[str, ...] = (*OBJECTS, "target")
"""Rows of the layout, in order."""


@dataclass(frozen=True)
class ProbeTargets:
    """One episode's probe targets (float32, metres).

    Attributes:
        layout_xy: ``[len(LAYOUT_NAMES), 2]``, rows in :data:`LAYOUT_NAMES` order.
        goal_names: the instructed object and its destination.
        goal_xy: ``[2, 2]``, rows in ``goal_names`` order.
    """

    layout_xy: np.ndarray
    goal_names: tuple[str, str]
    goal_xy: np.ndarray


def scene_targets(task: str, xy: Mapping[str, np.ndarray]) -> ProbeTargets:
    """The targets of ``task`` from the xy of every object and of ``"target"``.

    Raises:
        UnknownTaskError: ``task`` is not in the suite.
        KeyError: ``xy`` lacks one of :data:`LAYOUT_NAMES`.
    """
    spec = get_task(task)
    goal_names = (spec.obj, spec.ref or spec.obj)
    return ProbeTargets(
        layout_xy=np.stack([np.asarray(xy[name])[:2] for name in LAYOUT_NAMES]).astype(np.float32),
        goal_names=goal_names,
        goal_xy=np.stack([np.asarray(xy[name])[:2] for name in goal_names]).astype(np.float32),
    )


def init_state_xy(task: str, init_state_id: int, split: Split) -> dict[str, np.ndarray]:
    """The xy of every object and of ``"target"`` in a fixed initial state.

    Raises:
        UnknownTaskError, InitStateOutOfRangeError: as :func:`~vla_edge.sim.tasks.init_state`.
    """
    scene = init_state(task, init_state_id, split).scene
    xy = {name: scene.positions_m[name][:2] for name in OBJECTS}
    xy["target"] = scene.target_xy_m
    return xy


def episode_targets(
    task: str,
    init_state_id: int,
    split: Split,
    scene_xy: Mapping[str, np.ndarray] | None = None,
) -> ProbeTargets:
    """The targets of an episode, from where its recording starts.

    That is ``scene_xy`` (a recovery episode's hand-over layout) when given,
    else the initial state ``init_state_id`` of ``split``.
    """
    if scene_xy is None:
        scene_xy = init_state_xy(task, init_state_id, split)
    return scene_targets(task, scene_xy)


__all__ = ["LAYOUT_NAMES", "ProbeTargets", "episode_targets", "init_state_xy", "scene_targets"]
