"""The simulator seams: ``Env`` (the evaluator, the sim node), ``PrivilegedEnv`` (the expert)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

from vla_edge.core.types import Observation

if TYPE_CHECKING:
    import mujoco

    from vla_edge.sim.tasks import SceneState, Task


class Env(Protocol):
    """A gymnasium-style robot environment driven by joint-position targets."""

    joint_names: tuple[str, ...]
    control_dt_s: float

    def reset(self, task: str, init_state_id: int) -> Observation:
        """Put the scene in the task's fixed initial state ``init_state_id``."""
        ...

    def step(self, joint_position_targets: np.ndarray) -> None:
        """Apply targets ``[A]`` for one control period and advance the physics."""
        ...

    def observe(self, render: bool = True) -> Observation:
        """Current observation; images only when ``render``."""
        ...

    def success(self) -> bool:
        """Whether the current task's success predicate holds."""
        ...

    @property
    def time_s(self) -> float:
        """Simulated time since reset."""
        ...


class PrivilegedEnv(Env, Protocol):
    """An ``Env`` whose scene a scripted planner reads (the tabletop's privileged state).

    :class:`~vla_edge.sim.env.TabletopEnv` is one. What
    :class:`~vla_edge.sim.expert.ScriptedExpert` and
    :class:`~vla_edge.sim.expert_runner.ExpertRunner` use, so that they depend on this seam
    and the env can hand out its expert (``TabletopEnv.expert_runner``) without a circle.
    """

    model: mujoco.MjModel
    task: Task
    episode_index: int
    """Counts resets: a new episode starts a new plan."""
    cameras: tuple[str, ...]
    image_height: int
    image_width: int

    def state(self) -> np.ndarray:
        """Measured ``[7]``: arm joint positions (rad) then the finger opening (m)."""
        ...

    def scene_state(self) -> SceneState:
        """Poses of every movable object and the target region."""
        ...

    def ee_pose(self) -> tuple[np.ndarray, np.ndarray]:
        """End-effector position (m) and orientation quaternion."""
        ...

    def ee_velocity(self) -> np.ndarray:
        """Linear velocity (m/s, world frame) of the end-effector."""
        ...
