"""Scripted expert: privileged object poses -> Cartesian waypoints -> joint targets by IK.

The plan is a sequence of minimum-jerk segments of the pinch point (position,
heading of a downward-pointing hand, finger opening) on a timeline anchored at
the start of the episode. Every call rebuilds the plan from the current object
poses (closed loop: a nudged block moves the grasp) while the timeline keeps
consecutive chunks consistent, so late or merged chunks agree. A failed grasp
or an unfinished task after the last segment restarts the plan from the
commanded pose. :meth:`ScriptedExpert.take_over` anchors a plan mid-episode
(after another policy drove the arm): no start dwell, and an object already
in the fingers is carried on instead of being grasped again.

A long-horizon task is planned one sub-task at a time: when a sub-task holds
and its plan has ended (the hand has retreated), the expert takes over for
the next one. On a ``switch`` task it takes over for the second task at the
switch time, wherever the first one had got to.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mujoco
import numpy as np

from vla_edge.config.models import DEFAULT_DT_ACTION_S
from vla_edge.sim.base import PrivilegedEnv
from vla_edge.sim.ik import ArmIK, quat_error, yaw_down_quat
from vla_edge.sim.tasks import (
    BLOCK_HALF_M,
    BOWL_FLOOR_TOP_M,
    GRIPPER_OPEN_M,
    PLATE_TOP_M,
    SceneState,
    Task,
    is_success,
    sub_tasks,
)

SPEED_M_PER_S = 0.12
YAW_RATE_RAD_PER_S = 0.4
MIN_SPAN_S = 1e-9  # division guard: a segment of zero duration is complete at once
BRISK_MIN_S = 0.1  # shortest first move of a take-over (one action step)
TAKE_OVER_XY_TOL_M = 0.01  # a taken-over hand this close above its approach point goes on down
PRE_GRASP_Z_M = 0.10
CARRY_Z_M = 0.12
RETREAT_Z_M = 0.16
GRASP_ABOVE_CENTRE_M = 0.0035
RELEASE_GAP_M = 0.006
PUSH_Z_M = 0.017
PUSH_SPEED_M_PER_S = 0.05
PUSH_YAW_PERIOD_RAD = np.pi / 2.0
# Extra clearance behind the block where the push descends: a hand that comes
# down a little short still lands on the table, not on the block's edge.
PUSH_STANDOFF_CLEARANCE_M = 0.026
# Wait this long at the start of an episode: a first chunk that arrives late
# (simulated inference delay) then still starts where the arm stands.
START_DWELL_S = 0.3
# Commanded finger openings stay this far inside [0, 0.04] m so that an
# interpolating controller never overshoots the safety limits.
GRIP_OPEN_CMD_M = GRIPPER_OPEN_M - 0.001
GRIP_CLOSED_CMD_M = 0.001
# The task's object counts as held when its centre is this close to the pinch point
HELD_RADIUS_M = 0.03
# ... and (at a take-over) the fingers are no wider open than the block plus this.
HELD_GRIP_SLACK_M = 0.004


@dataclass
class Segment:
    """Minimum-jerk motion of the pinch point between two waypoints."""

    t0_s: float
    t1_s: float
    pos0_m: np.ndarray
    pos1_m: np.ndarray
    yaw0_rad: float
    yaw1_rad: float
    grip0_m: float
    grip1_m: float
    label: str
    tilt0_rad: np.ndarray = field(default_factory=lambda: np.zeros(3))
    tilt1_rad: np.ndarray = field(default_factory=lambda: np.zeros(3))
    vel0_m_s: np.ndarray = field(default_factory=lambda: np.zeros(3))

    def sample(self, t_s: float) -> tuple[np.ndarray, np.ndarray, float]:
        """Position, orientation and opening at ``t_s`` (clamped to the segment).

        The orientation is the downward hand at the interpolated heading, tilted
        by the interpolated ``tilt0_rad`` -> ``tilt1_rad`` (world-frame rotation
        vectors), so a plan can start from a hand that does not point straight down.
        """
        span = max(self.t1_s - self.t0_s, MIN_SPAN_S)
        s = float(np.clip((t_s - self.t0_s) / span, 0.0, 1.0))
        a = s * s * s * (10.0 - 15.0 * s + 6.0 * s * s)
        pos = self.pos0_m + a * (self.pos1_m - self.pos0_m)
        if np.any(self.vel0_m_s):
            # quintic that leaves pos0 at vel0 and still ends at rest on pos1
            pos = pos + span * s * (1.0 - s) ** 3 * (1.0 + 3.0 * s) * self.vel0_m_s
        quat = yaw_down_quat(self.yaw0_rad + a * (self.yaw1_rad - self.yaw0_rad))
        tilt = self.tilt0_rad + a * (self.tilt1_rad - self.tilt0_rad)
        if np.any(tilt):
            quat = _rotate(quat, tilt)
        return pos, quat, self.grip0_m + a * (self.grip1_m - self.grip0_m)


def _rotate(quat: np.ndarray, rotvec_rad: np.ndarray) -> np.ndarray:
    """``quat`` turned by the world-frame rotation vector ``rotvec_rad``."""
    angle = float(np.linalg.norm(rotvec_rad))
    if angle < 1e-12:
        return quat
    rot = np.empty(4)
    mujoco.mju_axisAngle2Quat(rot, rotvec_rad / angle, angle)
    out = np.empty(4)
    mujoco.mju_mulQuat(out, rot, quat)
    return out


def split_heading(quat: np.ndarray) -> tuple[float, np.ndarray]:
    """Heading of a roughly downward hand and the tilt (rotation vector) from straight down."""
    yaw = hand_yaw_rad(quat)
    return yaw, quat_error(quat, yaw_down_quat(yaw))


def hand_yaw_rad(quat: np.ndarray) -> float:
    """Heading of a (roughly) downward-pointing hand, as in :func:`yaw_down_quat`."""
    w, x, y, z = quat
    # first column of the rotation matrix: the hand's x axis = Rz(yaw) * (-1, 0, 0)
    col_x = np.array([1.0 - 2.0 * (y * y + z * z), 2.0 * (x * y + w * z)])
    return float(np.arctan2(-col_x[1], -col_x[0]))


def nearest_equivalent(angle_rad: float, reference_rad: float, period_rad: float) -> float:
    """The angle ``angle_rad + k * period_rad`` closest to ``reference_rad``."""
    k = np.round((reference_rad - angle_rad) / period_rad)
    return float(angle_rad + k * period_rad)


class ScriptedExpert:
    """Plans joint-position targets for the env's current task from privileged state.

    Args:
        env: the tabletop env whose object poses and task it reads.
        dt_action_s: spacing of the targets it returns.
        horizon: number of targets per call.
    """

    def __init__(
        self, env: PrivilegedEnv, dt_action_s: float = DEFAULT_DT_ACTION_S, horizon: int = 10
    ) -> None:
        self.env = env
        self.dt_action_s = float(dt_action_s)
        self.horizon = int(horizon)
        self.ik = ArmIK(env.model)
        self._episode = -1
        self._stage = 0
        self.replans = 0

    @property
    def task(self) -> Task:
        """The task planned now: the env's, or the current sub-task of a sequence or switch."""
        subs = sub_tasks(self.env.task)
        if self._episode != self.env.episode_index:
            return subs[0]
        return subs[min(self._stage, len(subs) - 1)]

    # ----------------------------------------------------------------- state
    def reset(self) -> None:
        """Anchor a new plan at the env's current time and pose."""
        pos, quat = self.env.ee_pose()
        self._episode = self.env.episode_index
        self._origin_s = self.env.time_s
        self._origin_pos = pos
        self._origin_yaw, self._origin_tilt = split_heading(quat)
        # the measured opening leaves [0, 0.04] when the fingers squeeze or spring
        # open; commanded openings stay inside the command range
        measured_grip = float(self.env.state()[6])
        self._origin_grip = float(np.clip(measured_grip, GRIP_CLOSED_CMD_M, GRIP_OPEN_CMD_M))
        self._grasp_lock: tuple[np.ndarray, float] | None = None
        self._push_lock: tuple[np.ndarray, np.ndarray] | None = None
        self._origin_vel = np.zeros(3)
        self._dwell = True
        self._holding = False
        self._stage = 0
        self.replans = 0

    def take_over(self) -> None:
        """Anchor a plan at the current time and pose in the middle of an episode.

        Unlike :meth:`reset` the plan starts moving at once: its first move leaves
        the hand at its measured velocity (a moving hand is not first stopped).
        When the task's object is already between the fingers it is lifted and
        carried on instead (after a 0.3 s settle).
        """
        stage = self._stage
        self.reset()
        self._stage = stage
        self._dwell = False
        self._origin_vel = self.env.ee_velocity()
        scene = self.env.scene_state()
        self._holding = self.task.kind != "push" and self._held(scene)

    def _near(self, scene: SceneState) -> bool:
        """Whether the task's object is within ``HELD_RADIUS_M`` of the pinch point."""
        ee_pos, _ = self.env.ee_pose()
        return float(np.linalg.norm(scene.positions_m[self.task.obj] - ee_pos)) < HELD_RADIUS_M

    def _held(self, scene: SceneState) -> bool:
        closed = float(self.env.state()[6]) < 2.0 * BLOCK_HALF_M + HELD_GRIP_SLACK_M
        return closed and self._near(scene)

    def _restart(self, t_s: float, segments: list[Segment]) -> None:
        pos, quat, grip = _sample(segments, t_s)
        self._origin_s, self._origin_pos, self._origin_grip = t_s, pos, grip
        self._origin_yaw, self._origin_tilt = split_heading(quat)
        self._origin_vel = np.zeros(3)
        self._grasp_lock = None
        self._push_lock = None
        self._holding = False
        self.replans += 1

    # ------------------------------------------------------------------ plan
    def plan(self, scene: SceneState | None = None) -> list[Segment]:
        """The segments of the current plan, from the current object poses."""
        scene = scene if scene is not None else self.env.scene_state()
        task = self.task
        builder = _Builder(
            self._origin_s,
            self._origin_pos,
            self._origin_yaw,
            self._origin_grip,
            self._origin_tilt,
            # a take-over's first move is timed by its distance alone: a hand already
            # at the approach point would otherwise wait out a minimum duration there,
            # and a policy trained on that pause cannot tell when it ends
            brisk=self.replans == 0 and not self._dwell,
            vel0_m_s=self._origin_vel,
        )
        if self.replans == 0 and self._dwell:
            builder.hold("start", START_DWELL_S, self._origin_grip)
        if task.kind == "push":
            self._plan_push(builder, task, scene)
        else:
            self._plan_pick(builder, task, scene)
        return builder.segments

    def segment_at(self, t_s: float) -> tuple[str, float]:
        """Label of the plan segment active at ``t_s`` and the progress through it in [0, 1]."""
        segments = self.plan()
        seg = next((seg for seg in segments if t_s < seg.t1_s), segments[-1])
        span = max(seg.t1_s - seg.t0_s, MIN_SPAN_S)
        return seg.label, float(np.clip((t_s - seg.t0_s) / span, 0.0, 1.0))

    def _grasp(self, task: Task, scene: SceneState, start_yaw: float) -> tuple[np.ndarray, float]:
        if self._grasp_lock is not None:
            return self._grasp_lock
        pos = scene.positions_m[task.obj].copy()
        yaw = nearest_equivalent(scene.yaw_rad(task.obj), start_yaw, np.pi / 2.0)
        return pos, yaw

    def _plan_pick(self, b: _Builder, task: Task, scene: SceneState) -> None:
        obj_pos, yaw = self._grasp(task, scene, b.yaw)
        if self._holding:
            # taken over with the object in hand: keep the hand's heading, close, lift
            yaw = b.yaw
            self._close_s = b.t_s
            b.hold("settle", 0.3, GRIP_CLOSED_CMD_M)
        else:
            grasp_z = obj_pos[2] + GRASP_ABOVE_CENTRE_M
            approach_z = b.approach_z(obj_pos, grasp_z, fingers_open=True)
            b.move("approach", [obj_pos[0], obj_pos[1], approach_z], yaw, GRIP_OPEN_CMD_M)
            b.move("descend", [obj_pos[0], obj_pos[1], grasp_z], yaw, GRIP_OPEN_CMD_M, min_s=1.0)
            b.hold("close", 0.6, GRIP_CLOSED_CMD_M)
            b.hold("settle", 0.3, GRIP_CLOSED_CMD_M)
            self._close_s = b.segments[-2].t0_s
        b.move("lift", [obj_pos[0], obj_pos[1], CARRY_Z_M], yaw, GRIP_CLOSED_CMD_M, min_s=1.0)
        self._lift_end_s = b.t_s
        if task.kind == "lift":
            b.move(
                "raise", [obj_pos[0], obj_pos[1], RETREAT_Z_M], yaw, GRIP_CLOSED_CMD_M, min_s=0.5
            )
            b.hold("hold", 1e6, GRIP_CLOSED_CMD_M)
            self._open_s = self._end_s = np.inf
            return
        ref = task.ref or "bowl"
        dest = scene.positions_m[ref].copy()
        if task.kind == "place_in":
            support_z = BOWL_FLOOR_TOP_M + 0.02
            dest_yaw = yaw
        elif task.kind == "place_on":
            support_z = PLATE_TOP_M
            dest_yaw = yaw
        else:  # stack
            support_z = dest[2] + BLOCK_HALF_M
            dest_yaw = nearest_equivalent(scene.yaw_rad(ref), yaw, np.pi / 2.0)
        release_z = support_z + BLOCK_HALF_M + RELEASE_GAP_M + GRASP_ABOVE_CENTRE_M
        b.move("carry", [dest[0], dest[1], CARRY_Z_M], dest_yaw, GRIP_CLOSED_CMD_M)
        b.move("lower", [dest[0], dest[1], release_z], dest_yaw, GRIP_CLOSED_CMD_M, min_s=0.8)
        self._open_s = b.t_s
        b.hold("open", 0.5, GRIP_OPEN_CMD_M)
        b.move("retreat", [dest[0], dest[1], RETREAT_Z_M], dest_yaw, GRIP_OPEN_CMD_M, min_s=0.8)
        self._end_s = b.t_s
        b.hold("hold", 1e6, GRIP_OPEN_CMD_M)

    def _plan_push(self, b: _Builder, task: Task, scene: SceneState) -> None:
        start, u = self._push_lock or _push_line(task, scene)
        # Closed, the two fingers make a near-square block (22 x 21 mm): the pads'
        # side (normal = hand y) and the fingers' edges (normal = hand x) push
        # alike, so the hand turns at most a quarter turn either way.
        yaw = nearest_equivalent(float(np.arctan2(-u[0], u[1])), b.yaw, PUSH_YAW_PERIOD_RAD)
        standoff_m = 1.5 * BLOCK_HALF_M + 0.01 + PUSH_STANDOFF_CLEARANCE_M
        pre = start - standoff_m * u
        end = scene.target_xy_m - (BLOCK_HALF_M + 0.01 + 0.002) * u
        approach_z = b.approach_z(pre, PUSH_Z_M, fingers_open=False)
        b.move("approach", [pre[0], pre[1], approach_z], yaw, GRIP_CLOSED_CMD_M)
        b.move("descend", [pre[0], pre[1], PUSH_Z_M], yaw, GRIP_CLOSED_CMD_M, min_s=1.0)
        self._close_s = b.t_s
        dist = float(np.linalg.norm(end - pre))
        b.move(
            "push",
            [end[0], end[1], PUSH_Z_M],
            yaw,
            GRIP_CLOSED_CMD_M,
            min_s=dist / PUSH_SPEED_M_PER_S,
        )
        b.move("retreat", [end[0], end[1], PRE_GRASP_Z_M], yaw, GRIP_CLOSED_CMD_M, min_s=0.8)
        self._lift_end_s = self._open_s = np.inf
        self._end_s = b.t_s
        b.hold("hold", 1e6, GRIP_CLOSED_CMD_M)

    def _lock(self, task: Task, scene: SceneState, t_s: float) -> None:
        """Fix the grasp (or the push line) once the fingers reach the object."""
        if t_s < self._close_s:
            return
        if task.kind == "push":
            self._push_lock = self._push_lock or _push_line(task, scene)
        elif self._grasp_lock is None:
            self._grasp_lock = self._grasp(task, scene, self._origin_yaw)

    def _next_stage(self, t_s: float, scene: SceneState) -> bool:
        """Move on to the next sub-task of a sequence or switch; True if it did."""
        task = self.env.task
        if task.kind == "switch":
            stage = int(t_s >= float(task.switch_at_s or 0.0))
        elif task.kind == "sequence":
            subs, stage = sub_tasks(task), self._stage
            if stage + 1 < len(subs) and t_s >= self._end_s and is_success(subs[stage], scene):
                stage += 1
        else:
            return False
        moved = stage != self._stage
        self._stage = stage
        return moved

    # ---------------------------------------------------------------- chunks
    def targets(self, t_s: float) -> np.ndarray:
        """``[H, 7]`` targets for ``t_s + i * dt_action_s`` from the current state."""
        if self._episode != self.env.episode_index:
            self.reset()
        scene = self.env.scene_state()
        self.plan(scene)
        if self._next_stage(t_s, scene):
            self.take_over()
            self.plan(scene)
        task = self.task
        self._lock(task, scene, t_s)
        segments = self.plan(scene)
        held = self._near(scene)
        if self._lift_end_s + 0.2 <= t_s < self._open_s and not held:
            self._restart(t_s, segments)
            segments = self.plan(scene)
        elif t_s >= self._end_s + 0.3 and not is_success(task, scene):
            self._restart(t_s, segments)
            segments = self.plan(scene)
        out = np.empty((self.horizon, 7))
        q = self.env.state()[:6]
        for i in range(self.horizon):
            pos, quat, grip = _sample(segments, t_s + i * self.dt_action_s)
            q, _ = self.ik.solve(pos, quat, q)
            out[i, :6] = q
            out[i, 6] = grip
        return out


class _Builder:
    """Appends segments one after the other, each starting where the last ended."""

    def __init__(
        self,
        t_s: float,
        pos: np.ndarray,
        yaw: float,
        grip: float,
        tilt_rad: np.ndarray,
        brisk: bool = False,
        vel0_m_s: np.ndarray | None = None,
    ) -> None:
        self.t_s, self.pos, self.yaw, self.grip = t_s, np.asarray(pos, dtype=float), yaw, grip
        self.tilt_rad = tilt_rad
        self.segments: list[Segment] = []
        self.brisk = brisk
        self._vel0 = np.zeros(3) if vel0_m_s is None else np.asarray(vel0_m_s, dtype=float)

    @property
    def _brisk_now(self) -> bool:
        """Whether the next move is a take-over's first one."""
        return self.brisk and not self.segments

    def approach_z(self, xy: np.ndarray, low_z: float, fingers_open: bool) -> float:
        """Height of the approach point above ``xy``.

        ``PRE_GRASP_Z_M``, unless a take-over finds the hand already over that point,
        lower, with the fingers as the approach wants them: then the hand goes on down
        from where it is instead of climbing back first (recorded, that climb teaches a
        policy to back away from every approach).
        """
        z = float(self.pos[2])
        if not self._brisk_now or not low_z < z < PRE_GRASP_Z_M:
            return PRE_GRASP_Z_M
        if (self.grip >= 0.5 * GRIP_OPEN_CMD_M) != fingers_open:
            return PRE_GRASP_Z_M
        if float(np.linalg.norm(self.pos[:2] - np.asarray(xy[:2]))) > TAKE_OVER_XY_TOL_M:
            return PRE_GRASP_Z_M
        return z

    def move(
        self, label: str, pos: list[float], yaw: float, grip: float, min_s: float = 0.8
    ) -> None:
        target = np.asarray(pos, dtype=float)
        dist = float(np.linalg.norm(target - self.pos))
        turn_rad = abs(yaw - self.yaw) + float(np.linalg.norm(self.tilt_rad))
        brisk = self._brisk_now
        if brisk:
            min_s = BRISK_MIN_S
        dur = max(min_s, dist / SPEED_M_PER_S, turn_rad / YAW_RATE_RAD_PER_S)
        if grip != self.grip:
            dur = max(dur, 0.5)
        dur = float(np.ceil(dur * 10.0) / 10.0)
        seg = Segment(
            self.t_s,
            self.t_s + dur,
            self.pos,
            target,
            self.yaw,
            yaw,
            self.grip,
            grip,
            label,
            self.tilt_rad,
            vel0_m_s=self._vel0 if brisk else np.zeros(3),
        )
        self.segments.append(seg)
        self.t_s, self.pos, self.yaw, self.grip = seg.t1_s, target, yaw, grip
        self.tilt_rad = np.zeros(3)

    def hold(self, label: str, dur_s: float, grip: float) -> None:
        seg = Segment(
            self.t_s,
            self.t_s + dur_s,
            self.pos,
            self.pos,
            self.yaw,
            self.yaw,
            self.grip,
            grip,
            label,
            self.tilt_rad,
            self.tilt_rad,
        )
        self.segments.append(seg)
        self.t_s, self.grip = seg.t1_s, grip


def _push_line(task: Task, scene: SceneState) -> tuple[np.ndarray, np.ndarray]:
    """Start (the object's xy) and unit direction of the push to the target."""
    start = scene.positions_m[task.obj][:2].copy()
    delta = scene.target_xy_m - start
    return start, delta / max(float(np.linalg.norm(delta)), 1e-6)


def _sample(segments: list[Segment], t_s: float) -> tuple[np.ndarray, np.ndarray, float]:
    for seg in segments:
        if t_s < seg.t1_s:
            return seg.sample(t_s)
    return segments[-1].sample(t_s)
