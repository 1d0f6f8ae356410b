"""The task suites: instructions, fixed initial states, success predicates.

All tasks share one scene (three blocks, a bowl, a plate, a target region);
only the instruction tells them apart, as in LIBERO-Goal. Each task has a
canonical instruction (used for training) and paraphrases (held out), 50
reproducibly generated evaluation initial states, a separate unbounded range
of training initial states, a time budget and a predicate on object poses.

Three suites:

* ``tabletop``: six single tasks (pick and place, stack, push, lift), the
  training suite.
* ``tabletop_long``: long-horizon tasks in the style of LIBERO-10, two or three
  ``tabletop`` tasks in sequence in one scene; success only when every
  sub-task holds at the end. The whole instruction can be given at once, or a
  sequencer sends each sub-task's instruction when the previous one succeeds.
* ``tabletop_switch``: the instruction changes at a set time (``switch_at_s``):
  the episode starts on the first task and is judged on the second.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from vla_edge.core.errors import ConfigError, InitStateOutOfRangeError, UnknownTaskError

SUITE = "tabletop"
LONG_SUITE = "tabletop_long"
SWITCH_SUITE = "tabletop_switch"
N_EVAL_INIT_STATES = 50
N_TRAIN_INIT_STATES = 100_000_000
Split = Literal["eval", "train"]
_SPLIT_CODE = {"eval": 0, "train": 1}

# Scene geometry (mirrors sim/tabletop/tabletop.xml). The table surface is z = 0.
BLOCK_HALF_M = 0.0125
BOWL_FLOOR_TOP_M = 0.008
BOWL_INNER_HALF_M = 0.037
BOWL_RIM_M = 0.04
PLATE_RADIUS_M = 0.05
PLATE_TOP_M = 0.008
TARGET_RADIUS_M = 0.045

BLOCKS = ("red_block", "green_block", "blue_block")
OBJECTS = (*BLOCKS, "bowl", "plate")

# Home arm pose (rad): gripper pointing down, pinch point at (0.42, 0, 0.22) m.
HOME_ARM_QPOS_RAD = np.array([0.0, 0.0762, 1.8874, 0.0, 1.1779, 0.0])
ARM_JITTER_RAD = 0.05
GRIPPER_OPEN_M = 0.04

# Region where objects are placed (reachable with the gripper pointing down).
WORKSPACE_X_M = (0.38, 0.64)
WORKSPACE_Y_M = (-0.22, 0.22)
# Keep-out radius of each item when sampling a layout (footprint + finger clearance).
_KEEP_OUT_M = {
    "red_block": 0.035,
    "green_block": 0.035,
    "blue_block": 0.035,
    "bowl": 0.07,
    "plate": 0.055,
    "target": 0.05,
}

TaskKind = Literal["place_in", "place_on", "stack", "push", "lift", "sequence", "switch"]


@dataclass(frozen=True)
class Task:
    """One task of the suite.

    Attributes:
        name: stable key (``pick_red_block_into_bowl``).
        instruction: canonical instruction, recorded in the demonstrations.
        paraphrases: held-out rewordings for evaluation.
        kind: what the success predicate checks.
        obj: the manipulated object.
        ref: the reference object or region (``bowl``, ``plate``, ``green_block``,
            ``target``), ``None`` for lifting.
        budget_s: time allowed for an episode.
        parts: a ``sequence``'s sub-tasks in order; a ``switch``'s first task and
            the task that replaces it (``tabletop`` task names).
        switch_at_s: when a ``switch`` task's instruction changes.
    """

    name: str
    instruction: str
    paraphrases: tuple[str, ...]
    kind: TaskKind
    obj: str
    ref: str | None
    budget_s: float
    parts: tuple[str, ...] = ()
    switch_at_s: float | None = None

    @property
    def max_duration_s(self) -> float:
        """Time allowed for an episode (same as ``budget_s``)."""
        return self.budget_s

    def step_budget(self, control_dt_s: float) -> int:
        """Budget in control ticks of ``control_dt_s``."""
        return int(round(self.budget_s / control_dt_s))


TASKS: dict[str, Task] = {
    t.name: t
    for t in (
        Task(
            "pick_red_block_into_bowl",
            "pick up the red block and put it in the bowl",
            (
                "place the red cube inside the bowl",
                "move the red block into the bowl",
                "put the red cube in the white bowl",
            ),
            "place_in",
            "red_block",
            "bowl",
            25.0,
        ),
        Task(
            "pick_green_block_into_bowl",
            "pick up the green block and put it in the bowl",
            (
                "place the green cube inside the bowl",
                "move the green block into the bowl",
                "drop the green cube in the white bowl",
            ),
            "place_in",
            "green_block",
            "bowl",
            25.0,
        ),
        Task(
            "put_blue_block_on_plate",
            "put the blue block on the plate",
            (
                "place the blue cube onto the purple plate",
                "set the blue block down on the plate",
                "move the blue cube to the plate",
            ),
            "place_on",
            "blue_block",
            "plate",
            25.0,
        ),
        Task(
            "stack_red_on_green",
            "stack the red block on the green block",
            (
                "put the red cube on top of the green cube",
                "place the red block onto the green block",
                "build a tower with the red block above the green one",
            ),
            "stack",
            "red_block",
            "green_block",
            25.0,
        ),
        Task(
            "push_blue_block_to_target",
            "push the blue block to the yellow target",
            (
                "slide the blue cube onto the yellow circle",
                "move the blue block to the yellow marker by pushing it",
                "shove the blue cube into the target region",
            ),
            "push",
            "blue_block",
            "target",
            25.0,
        ),
        Task(
            "lift_green_block",
            "lift the green block",
            (
                "pick up the green cube and hold it up",
                "raise the green block off the table",
                "grab the green cube and lift it",
            ),
            "lift",
            "green_block",
            None,
            15.0,
        ),
    )
}


def _then(texts: tuple[str, ...]) -> str:
    return ", then ".join(texts)


def _sequence(name: str, parts: tuple[str, ...]) -> Task:
    """Sub-tasks in order: the instruction joins theirs; success needs every one at the end."""
    subs = [TASKS[p] for p in parts]
    return Task(
        name,
        _then(tuple(t.instruction for t in subs)),
        tuple(_then(tuple(t.paraphrases[i] for t in subs)) for i in range(3)),
        "sequence",
        subs[-1].obj,
        subs[-1].ref,
        sum(t.budget_s for t in subs),
        parts=parts,
    )


def _switch(name: str, first: str, then: str, at_s: float) -> Task:
    """``first``'s instruction until ``at_s``, then ``then``'s; judged on ``then``."""
    new = TASKS[then]
    return Task(
        name,
        new.instruction,
        new.paraphrases,
        "switch",
        new.obj,
        new.ref,
        at_s + new.budget_s,
        parts=(first, then),
        switch_at_s=at_s,
    )


LONG_TASKS: dict[str, Task] = {
    t.name: t
    for t in (
        _sequence(
            "red_in_bowl_then_blue_on_plate",
            ("pick_red_block_into_bowl", "put_blue_block_on_plate"),
        ),
        _sequence(
            "blue_on_plate_then_green_in_bowl",
            ("put_blue_block_on_plate", "pick_green_block_into_bowl"),
        ),
        _sequence(
            "stack_red_on_green_then_blue_on_plate",
            ("stack_red_on_green", "put_blue_block_on_plate"),
        ),
        _sequence("blue_on_plate_then_lift_green", ("put_blue_block_on_plate", "lift_green_block")),
        _sequence(
            "red_in_bowl_blue_on_plate_lift_green",
            ("pick_red_block_into_bowl", "put_blue_block_on_plate", "lift_green_block"),
        ),
    )
}

SWITCH_TASKS: dict[str, Task] = {
    t.name: t
    for t in (
        _switch(
            "switch_red_bowl_to_lift_green", "pick_red_block_into_bowl", "lift_green_block", 3.0
        ),
        _switch(
            "switch_blue_plate_to_red_bowl",
            "put_blue_block_on_plate",
            "pick_red_block_into_bowl",
            3.0,
        ),
        _switch(
            "switch_lift_green_to_blue_plate", "lift_green_block", "put_blue_block_on_plate", 2.0
        ),
        _switch(
            "switch_green_bowl_to_red_on_green",
            "pick_green_block_into_bowl",
            "stack_red_on_green",
            3.0,
        ),
    )
}

SUITES: dict[str, dict[str, Task]] = {
    SUITE: TASKS,
    LONG_SUITE: LONG_TASKS,
    SWITCH_SUITE: SWITCH_TASKS,
}
_ALL_TASKS: dict[str, Task] = {**TASKS, **LONG_TASKS, **SWITCH_TASKS}


def list_tasks(suite: str = SUITE) -> list[str]:
    """Task names of ``suite``, in a fixed order.

    Raises:
        ConfigError: ``suite`` is not one of :data:`SUITES`.
    """
    return list(_suite(suite))


def _suite(suite: str) -> dict[str, Task]:
    try:
        return SUITES[suite]
    except KeyError:
        raise ConfigError(f"suite = {suite!r}: expected one of {list(SUITES)}") from None


def get_task(name: str) -> Task:
    """The task called ``name`` (of any suite).

    Raises:
        UnknownTaskError: ``name`` is in no suite.
    """
    try:
        return _ALL_TASKS[name]
    except KeyError:
        raise UnknownTaskError(
            f"task = {name!r} is in no suite; allowed: {', '.join(_ALL_TASKS)}"
        ) from None


def suite_of(name: str) -> str:
    """The suite the task called ``name`` belongs to.

    Raises:
        UnknownTaskError: ``name`` is in no suite.
    """
    get_task(name)
    return next(suite for suite, tasks in SUITES.items() if name in tasks)


def sub_tasks(task: Task) -> tuple[Task, ...]:
    """The single tasks ``task`` is made of (itself for a ``tabletop`` task)."""
    return tuple(TASKS[p] for p in task.parts) if task.parts else (task,)


def active_task(task: Task, t_s: float, done: int = 0, sequencer: bool = False) -> Task:
    """The task whose instruction is in force at ``t_s``.

    A ``switch``'s first task until ``switch_at_s``, then its second; with the
    ``sequencer``, a ``sequence``'s sub-task ``done`` (the count of sub-tasks it
    has seen succeed); otherwise ``task`` itself (its whole instruction at once).
    """
    if task.kind == "switch":
        return sub_tasks(task)[int(t_s >= float(task.switch_at_s or 0.0))]
    if task.kind == "sequence" and sequencer:
        subs = sub_tasks(task)
        return subs[min(done, len(subs) - 1)]
    return task


class InstructionSchedule:
    """The task whose instruction is in force during one episode of ``task``.

    The evaluator and the sim node both follow it: :meth:`advance` where they
    check success (the sequencer moves on when the current sub-task holds),
    :meth:`active` for the instruction at a time (:func:`active_task`).
    """

    def __init__(self, task: Task, sequencer: bool = False) -> None:
        self.task = task
        self.sequencer = sequencer
        self.done = 0
        """Sub-tasks of a ``sequence`` the sequencer has seen succeed."""
        self._subs = sub_tasks(task)

    def advance(self, scene: SceneState) -> None:
        """With the sequencer: count the current sub-task done if it holds (never the last)."""
        if self.sequencer and self.done + 1 < len(self._subs):
            self.done += int(is_success(self._subs[self.done], scene))

    def active(self, t_s: float) -> Task:
        """The task whose instruction is in force at ``t_s``."""
        return active_task(self.task, t_s, self.done, self.sequencer)


def check_task(suite: str, task: str, init_state_id: int) -> None:
    """Refuse a scene the sim cannot reset to (the sim node at start and on reset, the launcher).

    ``task`` must be a task of ``suite`` and ``init_state_id`` one of its
    evaluation initial states (the split the sim node resets to).

    Raises:
        ConfigError: ``suite`` is not one of :data:`SUITES`.
        UnknownTaskError: ``task`` is not in the suite (the message lists the allowed tasks).
        InitStateOutOfRangeError: ``init_state_id`` is outside ``[0, N_EVAL_INIT_STATES)``.
    """
    tasks = _suite(suite)
    if task not in tasks:
        raise UnknownTaskError(f"task = {task!r}: not a {suite} task; allowed: {list(tasks)}")
    if isinstance(init_state_id, bool) or not 0 <= init_state_id < N_EVAL_INIT_STATES:
        raise InitStateOutOfRangeError(
            f"init_state_id = {init_state_id!r}: out of range: every task has evaluation "
            f"initial states 0..{N_EVAL_INIT_STATES - 1}"
        )


@dataclass
class SceneState:
    """Poses of the movable objects and the target region.

    Attributes:
        positions_m: object name -> ``[3]`` position of its body frame.
        quats: object name -> ``[4]`` orientation (w, x, y, z).
        target_xy_m: ``[2]`` centre of the target region on the table.
    """

    positions_m: dict[str, np.ndarray]
    quats: dict[str, np.ndarray]
    target_xy_m: np.ndarray

    def yaw_rad(self, name: str) -> float:
        """Heading of ``name`` about the world z axis."""
        w, x, y, z = self.quats[name]
        return float(np.arctan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z)))

    def up_z(self, name: str) -> float:
        """Vertical component of ``name``'s local z axis (1 = upright)."""
        w, x, y, _z = self.quats[name]
        return float(1.0 - 2.0 * (x * x + y * y))


@dataclass
class InitState:
    """A fixed initial state: object poses, the target region and the arm pose."""

    scene: SceneState
    arm_qpos_rad: np.ndarray
    gripper_m: float = GRIPPER_OPEN_M - 0.001
    layout_seed: tuple[int, ...] = field(default_factory=tuple)


def _in_frame(scene: SceneState, name: str, ref: str) -> np.ndarray:
    """Position of ``name`` in the yaw frame of ``ref`` (relative, m)."""
    delta = scene.positions_m[name] - scene.positions_m[ref]
    yaw = scene.yaw_rad(ref)
    c, s = np.cos(yaw), np.sin(yaw)
    return np.array([c * delta[0] + s * delta[1], -s * delta[0] + c * delta[1], delta[2]])


def is_success(task: Task, scene: SceneState) -> bool:
    """The task's success predicate on object poses.

    A ``sequence`` holds when every sub-task does; a ``switch`` when its second task does.
    """
    if task.kind == "sequence":
        return all(is_success(sub, scene) for sub in sub_tasks(task))
    if task.kind == "switch":
        return is_success(sub_tasks(task)[-1], scene)
    p = scene.positions_m[task.obj]
    if task.kind == "place_in":
        rel = _in_frame(scene, task.obj, "bowl")
        inside = max(abs(rel[0]), abs(rel[1])) < BOWL_INNER_HALF_M
        return bool(inside and 0.0 < rel[2] < BOWL_RIM_M and scene.up_z("bowl") > 0.9)
    if task.kind == "place_on":
        rel = scene.positions_m[task.obj] - scene.positions_m["plate"]
        on = float(np.hypot(rel[0], rel[1])) < PLATE_RADIUS_M
        resting = PLATE_TOP_M < rel[2] < PLATE_TOP_M + 3.0 * BLOCK_HALF_M
        return bool(on and resting)
    if task.kind == "stack":
        rel = scene.positions_m[task.obj] - scene.positions_m[task.ref]
        aligned = float(np.hypot(rel[0], rel[1])) < 1.2 * BLOCK_HALF_M
        on_top = 1.6 * BLOCK_HALF_M < rel[2] < 2.6 * BLOCK_HALF_M
        base_down = scene.positions_m[task.ref][2] < 1.5 * BLOCK_HALF_M
        return bool(aligned and on_top and base_down)
    if task.kind == "push":
        dist = float(np.hypot(*(p[:2] - scene.target_xy_m)))
        return bool(dist < TARGET_RADIUS_M and p[2] < 1.5 * BLOCK_HALF_M)
    if task.kind == "lift":
        return bool(p[2] > 0.08)
    raise UnknownTaskError(f"task.kind = {task.kind!r} has no predicate")


def _yaw_quat(yaw_rad: float) -> np.ndarray:
    return np.array([np.cos(yaw_rad / 2.0), 0.0, 0.0, np.sin(yaw_rad / 2.0)])


def _seed(task: Task, split: Split, init_state_id: int) -> tuple[int, ...]:
    return (_SPLIT_CODE[split], zlib.crc32(task.name.encode()), int(init_state_id))


def _segment_clearance_m(a: np.ndarray, b: np.ndarray, p: np.ndarray) -> float:
    """Distance from ``p`` to the segment ``a``-``b`` (xy)."""
    ab = b - a
    t = float(np.clip(np.dot(p - a, ab) / max(float(np.dot(ab, ab)), 1e-12), 0.0, 1.0))
    return float(np.linalg.norm(a + t * ab - p))


def _sample_layout(task: Task, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Non-overlapping xy positions of every object and the target."""
    lo = np.array([WORKSPACE_X_M[0], WORKSPACE_Y_M[0]])
    hi = np.array([WORKSPACE_X_M[1], WORKSPACE_Y_M[1]])
    order = ["bowl", "plate", "blue_block", "target", "red_block", "green_block"]
    push = any(sub.kind == "push" for sub in sub_tasks(task))
    for _attempt in range(1000):
        placed: dict[str, np.ndarray] = {}
        ok = True
        for name in order:
            for _try in range(200):
                if name == "target" and push:
                    # within pushing distance of the block, along a clear corridor
                    angle = rng.uniform(-np.pi, np.pi)
                    dist = rng.uniform(0.10, 0.15)
                    xy = placed["blue_block"] + dist * np.array([np.cos(angle), np.sin(angle)])
                    if np.any(xy < lo) or np.any(xy > hi):
                        continue
                else:
                    xy = rng.uniform(lo, hi)
                clear = all(
                    np.linalg.norm(xy - other) > _KEEP_OUT_M[name] + _KEEP_OUT_M[key] + 0.01
                    for key, other in placed.items()
                )
                if clear and push and name not in ("blue_block", "target"):
                    if "target" in placed:
                        gap = _segment_clearance_m(placed["blue_block"], placed["target"], xy)
                        clear = gap > _KEEP_OUT_M[name] + 0.06
                if clear:
                    placed[name] = xy
                    break
            else:
                ok = False
                break
        if ok:
            return placed
    raise RuntimeError(f"could not place the {task.name} layout")  # pragma: no cover


def init_state(task_name: str, init_state_id: int, split: Split = "eval") -> InitState:
    """The fixed initial state ``init_state_id`` of a task (reproducible from its seed).

    Raises:
        UnknownTaskError: unknown ``task_name``.
        InitStateOutOfRangeError: ``init_state_id`` outside ``[0, N)`` for the split.
    """
    task = get_task(task_name)
    if split not in _SPLIT_CODE:
        raise InitStateOutOfRangeError(f"split = {split!r} must be one of {sorted(_SPLIT_CODE)}")
    bound = N_EVAL_INIT_STATES if split == "eval" else N_TRAIN_INIT_STATES
    if isinstance(init_state_id, bool) or not 0 <= int(init_state_id) < bound:
        raise InitStateOutOfRangeError(
            f"init_state_id = {init_state_id!r} is out of range for task {task.name!r} "
            f"split {split!r}: must be in [0, {bound})"
        )
    if int(init_state_id) != init_state_id:
        raise InitStateOutOfRangeError(f"init_state_id = {init_state_id!r} must be an integer")
    seed = _seed(task, split, int(init_state_id))
    rng = np.random.default_rng(seed)
    layout = _sample_layout(task, rng)
    positions = {}
    quats = {}
    for name in OBJECTS:
        xy = layout[name]
        z = BLOCK_HALF_M if name in BLOCKS else 0.0
        positions[name] = np.array([xy[0], xy[1], z])
        yaw = rng.uniform(-np.pi / 4.0, np.pi / 4.0) if name != "plate" else 0.0
        quats[name] = _yaw_quat(yaw)
    arm = HOME_ARM_QPOS_RAD + rng.uniform(-ARM_JITTER_RAD, ARM_JITTER_RAD, size=6)
    scene = SceneState(positions, quats, layout["target"].copy())
    return InitState(scene=scene, arm_qpos_rad=arm, layout_seed=seed)


def initial_joint_positions(
    task_name: str, init_state_id: int, split: Split = "eval"
) -> np.ndarray:
    """``[7]`` joint positions of initial state ``init_state_id``: the arm (rad), the gripper (m).

    Where :meth:`TabletopEnv.reset` puts the arm, in the order of its
    ``joint_names``: the sim node's home pose for the scene, so that graph
    episodes start where the evaluator's do.

    Raises:
        UnknownTaskError: unknown ``task_name``.
        InitStateOutOfRangeError: ``init_state_id`` outside ``[0, N)`` for the split.
    """
    state = init_state(task_name, init_state_id, split)
    return np.concatenate([state.arm_qpos_rad, [state.gripper_m]])
