"""The simulator's privileged state on the wire, for the scripted expert.

The expert plans from object poses, which a real robot does not publish; the
sim node therefore publishes its full MuJoCo state on ``/sim/state`` as a
self-describing ``std_msgs/Float64MultiArray`` (standard messages only), and
an inference node running the expert keeps a *shadow* scene — its own
``TabletopEnv`` reset to the same task and initial state — whose state is
copied from each message before planning.

Layout (``layout.dim`` in order; ``data`` is the concatenation)::

    task=<name>    size 0   (the task name travels in the label)
    episode        size 1
    init_state_id  size 1
    time_s         size 1   (the stamp of the observation taken with this state)
    qpos           size nq
    qvel           size nv
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from std_msgs.msg import Float64MultiArray, MultiArrayDimension

from vla_edge.core.errors import InvalidObservationError

_TASK_PREFIX = "task="
_FIELDS = ("episode", "init_state_id", "time_s", "qpos", "qvel")


class SimStateLayoutError(InvalidObservationError):
    """A ``/sim/state`` message does not follow the documented layout."""

    reason = "sim_state_layout"


@dataclass(frozen=True)
class SimStateSnapshot:
    """One decoded ``/sim/state`` message."""

    task: str
    episode: int
    init_state_id: int
    time_s: float
    qpos: np.ndarray
    qvel: np.ndarray


def encode_sim_state(snapshot: SimStateSnapshot) -> Float64MultiArray:
    """Snapshot -> ``Float64MultiArray`` with the documented layout."""
    qpos = np.asarray(snapshot.qpos, dtype=np.float64).ravel()
    qvel = np.asarray(snapshot.qvel, dtype=np.float64).ravel()
    msg = Float64MultiArray()
    sizes = (1, 1, 1, qpos.size, qvel.size)
    msg.layout.dim = [MultiArrayDimension(label=_TASK_PREFIX + snapshot.task, size=0, stride=0)]
    msg.layout.dim += [
        MultiArrayDimension(label=name, size=size, stride=size)
        for name, size in zip(_FIELDS, sizes, strict=True)
    ]
    msg.data = np.concatenate(
        [[snapshot.episode, snapshot.init_state_id, snapshot.time_s], qpos, qvel]
    ).tolist()
    return msg


def decode_sim_state(msg: Float64MultiArray) -> SimStateSnapshot:
    """``Float64MultiArray`` -> snapshot.

    Raises:
        SimStateLayoutError: labels, sizes or data length differ from the layout.
    """
    dims = list(msg.layout.dim)
    labels = [d.label for d in dims]
    if len(dims) != 1 + len(_FIELDS) or not labels[0].startswith(_TASK_PREFIX):
        raise SimStateLayoutError(
            f"layout labels = {labels}, expected ['task=<name>', {', '.join(_FIELDS)}]"
        )
    if tuple(labels[1:]) != _FIELDS:
        raise SimStateLayoutError(f"layout labels = {labels[1:]}, expected {list(_FIELDS)}")
    sizes = [int(d.size) for d in dims[1:]]
    data = np.asarray(msg.data, dtype=np.float64)
    if sizes[:3] != [1, 1, 1] or data.size != sum(sizes):
        raise SimStateLayoutError(
            f"sizes = {sizes} and {data.size} data values: expected [1, 1, 1, nq, nv] "
            "summing to the data length"
        )
    if not np.all(np.isfinite(data)):
        raise SimStateLayoutError("data holds a non-finite value")
    nq = sizes[3]
    return SimStateSnapshot(
        task=labels[0][len(_TASK_PREFIX) :],
        episode=int(data[0]),
        init_state_id=int(data[1]),
        time_s=float(data[2]),
        qpos=data[3 : 3 + nq].copy(),
        qvel=data[3 + nq :].copy(),
    )


class ShadowScene:
    """Keeps a local ``TabletopEnv`` in the state the sim node reports.

    Args:
        env: a ``TabletopEnv`` (``model``/``data``, ``reset``); it is reset to the
            snapshot's task and initial state whenever the episode changes, then
            its ``qpos``/``qvel``/``time`` are overwritten and kinematics recomputed.
    """

    def __init__(self, env: Any) -> None:
        self.env = env
        self._episode_key: tuple[int, str, int] | None = None
        self.applied = 0

    def apply(self, snapshot: SimStateSnapshot) -> None:
        """Copy ``snapshot`` into the shadow env.

        Raises:
            SimStateLayoutError: the snapshot's ``qpos``/``qvel`` sizes differ
                from the shadow model's (a different scene).
        """
        import mujoco

        model, data = self.env.model, self.env.data
        if snapshot.qpos.size != model.nq or snapshot.qvel.size != model.nv:
            raise SimStateLayoutError(
                f"qpos/qvel sizes = {snapshot.qpos.size}/{snapshot.qvel.size}, the shadow "
                f"scene has nq/nv = {model.nq}/{model.nv}"
            )
        key = (snapshot.episode, snapshot.task, snapshot.init_state_id)
        if key != self._episode_key:
            self.env.reset(snapshot.task, snapshot.init_state_id)
            self._episode_key = key
        data.qpos[:] = snapshot.qpos
        data.qvel[:] = snapshot.qvel
        data.time = snapshot.time_s
        mujoco.mj_forward(model, data)
        self.applied += 1
