"""``TabletopEnv``: the MuJoCo tabletop scene behind the ``Env`` protocol."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

# Headless rendering unless the caller chose a backend; read when mujoco is imported.
os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", "egl")

import mujoco  # noqa: E402
import numpy as np  # noqa: E402

from vla_edge.config.paths import scene_xml_path
from vla_edge.core.errors import ConfigError, InvalidActionError
from vla_edge.core.types import Observation
from vla_edge.sim.ik import ARM_JOINTS
from vla_edge.sim.tasks import OBJECTS, Split, Task, get_task, init_state, is_success
from vla_edge.sim.tasks import SceneState as SceneState

if TYPE_CHECKING:
    from vla_edge.runners.base import Runner

JOINT_NAMES = (*ARM_JOINTS, "gripper")
CAMERAS = ("agentview", "wrist")
CONTROL_DT_S = 0.01
PHYSICS_DT_S = 0.002
# A contact of the arm with the table or with itself deeper than this is counted.
PENETRATION_TOL_M = 0.001


class TabletopEnv:
    """The tabletop scene driven by joint-position targets at 100 Hz.

    Args:
        image_height: rendered image height (pixels).
        image_width: rendered image width (pixels).
        cameras: cameras rendered into observations.
        split: which initial states ``reset`` uses (``eval``: the 50 fixed
            evaluation states; ``train``: the disjoint training range).
        xml_path: scene MJCF; the installed ``tabletop.xml`` by default.
    """

    joint_names: tuple[str, ...] = JOINT_NAMES
    control_dt_s: float = CONTROL_DT_S

    def __init__(
        self,
        image_height: int = 64,
        image_width: int = 64,
        cameras: Sequence[str] = CAMERAS,
        split: Split = "eval",
        xml_path: str | Path | None = None,
    ) -> None:
        path = Path(xml_path) if xml_path is not None else scene_xml_path("tabletop")
        self.model = mujoco.MjModel.from_xml_path(str(path))
        self.data = mujoco.MjData(self.model)
        timestep_s = float(self.model.opt.timestep)
        if abs(timestep_s - PHYSICS_DT_S) > 1e-12:
            raise ConfigError(f"{path}: timestep = {timestep_s} must be {PHYSICS_DT_S}")
        self.substeps = int(round(CONTROL_DT_S / timestep_s))
        for cam in cameras:
            if mujoco.mj_name2id(self.model, mujoco.mjtObj.mjOBJ_CAMERA, cam) < 0:
                names = [self.model.camera(i).name for i in range(self.model.ncam)]
                raise ConfigError(f"camera = {cam!r} is not in {path} (cameras: {names})")
        self.cameras = tuple(cameras)
        self.image_height = int(image_height)
        self.image_width = int(image_width)
        self.split: Split = split
        self._renderer: mujoco.Renderer | None = None

        m = self.model
        self._arm_qadr = np.array([int(m.joint(j).qposadr[0]) for j in ARM_JOINTS])
        self._finger_qadr = np.array(
            [int(m.joint(j).qposadr[0]) for j in ("finger_left", "finger_right")]
        )
        self._obj_qadr = {name: int(m.joint(name).qposadr[0]) for name in OBJECTS}
        self._target_body = m.body("target").id
        self._ee_site = m.site("ee").id
        arm_root = m.body("link1").id
        arm_bodies = {b for b in range(m.nbody) if self._descends(b, arm_root)}
        self._arm_geom = np.isin(m.geom_bodyid, list(arm_bodies))
        self._table_geom = np.zeros(m.ngeom, dtype=bool)
        self._table_geom[m.geom("table_top").id] = True

        self.task: Task = get_task("pick_red_block_into_bowl")
        self.instruction = self.task.instruction
        self.init_state_id = 0
        self.episode_index = 0
        self._penetrations = 0

    def _descends(self, body: int, root: int) -> bool:
        while body > 0:
            if body == root:
                return True
            body = int(self.model.body_parentid[body])
        return False

    # ------------------------------------------------------------------ episode
    def reset(
        self,
        task: str,
        init_state_id: int,
        instruction: str | None = None,
        split: Split | None = None,
    ) -> Observation:
        """Put the scene in the task's initial state ``init_state_id`` and observe it.

        Args:
            task: task name (see :func:`vla_edge.sim.tasks.list_tasks`).
            init_state_id: index of the fixed initial state.
            instruction: override of the canonical instruction (e.g. a paraphrase).
            split: ``eval`` or ``train`` initial states; the env's split by default.

        Raises:
            UnknownTaskError: unknown task.
            InitStateOutOfRangeError: ``init_state_id`` out of range for the split.
        """
        spec = get_task(task)
        state = init_state(task, init_state_id, split or self.split)
        m, d = self.model, self.data
        mujoco.mj_resetData(m, d)
        d.qpos[self._arm_qadr] = state.arm_qpos_rad
        d.qpos[self._finger_qadr] = state.gripper_m / 2.0
        for name, adr in self._obj_qadr.items():
            d.qpos[adr : adr + 3] = state.scene.positions_m[name]
            d.qpos[adr + 3 : adr + 7] = state.scene.quats[name]
        m.body_pos[self._target_body, :2] = state.scene.target_xy_m
        d.ctrl[:6] = state.arm_qpos_rad
        d.ctrl[6] = state.gripper_m
        mujoco.mj_forward(m, d)
        self.task = spec
        self.instruction = instruction if instruction is not None else spec.instruction
        self.init_state_id = int(init_state_id)
        self.episode_index += 1
        self._penetrations = 0
        return self.observe(render=True)

    def step(self, joint_position_targets: np.ndarray) -> None:
        """Apply ``[7]`` targets (6 joints in rad, gripper opening in m) for 0.01 s.

        Raises:
            InvalidActionError: wrong dimension or a non-finite value (before any physics).
        """
        targets = np.asarray(joint_position_targets, dtype=np.float64)
        if targets.shape != (len(JOINT_NAMES),):
            raise InvalidActionError(
                f"joint_position_targets shape = {targets.shape}: expected "
                f"({len(JOINT_NAMES)},) for {list(JOINT_NAMES)}"
            )
        if not np.all(np.isfinite(targets)):
            bad = int(np.flatnonzero(~np.isfinite(targets))[0])
            raise InvalidActionError(
                f"joint_position_targets[{bad}] ({JOINT_NAMES[bad]}) = {targets[bad]}: "
                "must be finite"
            )
        self.data.ctrl[:] = targets
        for _ in range(self.substeps):
            mujoco.mj_step(self.model, self.data)
        self._penetrations += self._count_penetrations()

    def _count_penetrations(self) -> int:
        ncon = self.data.ncon
        if ncon == 0:
            return 0
        contact = self.data.contact
        geom = contact.geom[:ncon]
        deep = contact.dist[:ncon] < -PENETRATION_TOL_M
        arm1, arm2 = self._arm_geom[geom[:, 0]], self._arm_geom[geom[:, 1]]
        table1, table2 = self._table_geom[geom[:, 0]], self._table_geom[geom[:, 1]]
        bad = (arm1 & arm2) | (arm1 & table2) | (arm2 & table1)
        return int(np.count_nonzero(bad & deep))

    def penetrating_contacts(self) -> int:
        """Arm-table and arm-arm contacts deeper than 1 mm, summed over the episode's ticks."""
        return self._penetrations

    # ------------------------------------------------------------ observation
    @property
    def time_s(self) -> float:
        """Simulated time since reset."""
        return float(self.data.time)

    def state(self) -> np.ndarray:
        """Measured ``[7]``: arm joint positions (rad) then the finger opening (m)."""
        arm = self.data.qpos[self._arm_qadr]
        opening = float(np.sum(self.data.qpos[self._finger_qadr]))
        return np.concatenate([arm, [opening]])

    def render(self, camera: str) -> np.ndarray:
        """RGB ``uint8 [H, W, 3]`` image of ``camera``."""
        if self._renderer is None:
            self._renderer = mujoco.Renderer(self.model, self.image_height, self.image_width)
        self._renderer.update_scene(self.data, camera=camera)
        return self._renderer.render().copy()

    def observe(self, render: bool = True) -> Observation:
        """Current observation; images of every camera only when ``render``."""
        images = {cam: self.render(cam) for cam in self.cameras} if render else {}
        return Observation(
            stamp_s=self.time_s, images=images, state=self.state(), instruction=self.instruction
        )

    # --------------------------------------------------------- privileged state
    def scene_state(self) -> SceneState:
        """Poses of every movable object and the target region."""
        positions = {}
        quats = {}
        for name, adr in self._obj_qadr.items():
            positions[name] = self.data.qpos[adr : adr + 3].copy()
            quats[name] = self.data.qpos[adr + 3 : adr + 7].copy()
        target = self.model.body_pos[self._target_body, :2].copy()
        return SceneState(positions, quats, target)

    def ee_pose(self) -> tuple[np.ndarray, np.ndarray]:
        """End-effector (pinch point) position (m) and orientation quaternion."""
        quat = np.empty(4)
        mujoco.mju_mat2Quat(quat, self.data.site_xmat[self._ee_site])
        return self.data.site_xpos[self._ee_site].copy(), quat

    def ee_velocity(self) -> np.ndarray:
        """Linear velocity (m/s, world frame) of the end-effector pinch point."""
        res = np.empty(6)
        mujoco.mj_objectVelocity(
            self.model, self.data, mujoco.mjtObj.mjOBJ_SITE, self._ee_site, res, 0
        )
        return res[3:].copy()

    def success(self) -> bool:
        """Whether the current task's success predicate holds."""
        return is_success(self.task, self.scene_state())

    def expert_runner(self) -> Runner:
        """The scripted expert on this env's privileged state, as a ``Runner``.

        What ``make_runner("expert", env=self)`` returns.
        """
        from vla_edge.sim.expert_runner import ExpertRunner

        return ExpertRunner(self)

    def close(self) -> None:
        """Release the renderer."""
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None
