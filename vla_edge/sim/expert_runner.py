"""``ExpertRunner``: the scripted expert behind the ``Runner`` protocol.

It reads the env's privileged state (object poses), so it is built with the
env it drives and lives with the simulator, not with the runner backends;
images are not needed (observe with ``render=False`` to save time).
``make_runner("expert", env=env)`` reaches it through
:meth:`~vla_edge.sim.env.TabletopEnv.expert_runner`.
"""

from __future__ import annotations

import time

import numpy as np

from vla_edge.config.models import DEFAULT_DT_ACTION_S
from vla_edge.core.errors import InvalidObservationError
from vla_edge.core.types import ActionChunk, Observation
from vla_edge.runners.base import RunnerSpec
from vla_edge.runners.preprocess import validate_stamp
from vla_edge.sim.base import PrivilegedEnv
from vla_edge.sim.expert import ScriptedExpert


class ExpertRunner:
    """Chunks of ``H`` joint targets from the scripted expert, stamped with the obs time.

    Args:
        env: the tabletop env whose state the expert reads.
        dt_action_s: time between two steps.
        chunk_horizon: ``H``.
    """

    def __init__(
        self,
        env: PrivilegedEnv,
        dt_action_s: float = DEFAULT_DT_ACTION_S,
        chunk_horizon: int = 10,
    ) -> None:
        self.env = env
        self.expert = ScriptedExpert(env, dt_action_s=dt_action_s, horizon=chunk_horizon)
        self.spec = RunnerSpec(
            joint_names=tuple(env.joint_names),
            chunk_horizon=int(chunk_horizon),
            dt_action_s=float(dt_action_s),
            cameras=tuple(env.cameras),
            image_height=env.image_height,
            image_width=env.image_width,
            supports_prefix=False,
        )

    def infer(
        self,
        obs: Observation,
        noise: np.ndarray | None = None,
        prefix_actions: np.ndarray | None = None,
        prefix_len: int = 0,
    ) -> ActionChunk:
        """Plan from the env's current state; ``noise`` and the prefix are ignored.

        Raises:
            InvalidObservationError: ``obs.state`` is not a finite ``[7]`` vector or
                ``obs.stamp_s`` is not a finite number.
        """
        state = np.asarray(obs.state, dtype=np.float64)
        joints = self.spec.joint_names
        if state.shape != (len(joints),) or not np.all(np.isfinite(state)):
            raise InvalidObservationError(
                f"obs.state = {state.tolist()} must be {len(joints)} finite values "
                f"for {list(joints)}"
            )
        validate_stamp(obs.stamp_s)
        start = time.perf_counter()
        positions = self.expert.targets(float(obs.stamp_s))
        elapsed_ms = (time.perf_counter() - start) * 1e3
        return ActionChunk(
            t_obs_s=float(obs.stamp_s),
            dt_action_s=self.spec.dt_action_s,
            joint_names=self.spec.joint_names,
            positions=positions,
            timings_ms={"expert": elapsed_ms, "total": elapsed_ms},
        )

    def close(self) -> None:
        """Nothing to release (the env belongs to the caller)."""
