"""Fault injectors: plain classes over the core types, one per fault type.

An injector sits on the seams of the graph. :class:`Injector` defines every
seam as the identity; a fault overrides the seam it corrupts:

=================================  =========================  ==============================
seam                               in-process (harness)       ROS (fault injector node)
=================================  =========================  ==============================
:meth:`Injector.camera`            sim -> inference frames    ``/camera/<name>/image_raw``
:meth:`Injector.joint_state`       joint states               ``/joint_states``
:meth:`Injector.chunk`             inference -> controller    ``/action_chunk``
:meth:`Injector.inference_delay_s` inference duration         (runner throttling)
:meth:`Injector.alive`             whether a process runs     the process is killed
:meth:`Injector.clock_offset_s`    system clock step          (not injectable)
:meth:`Injector.estop_pressed`     e-stop button              ``/estop``, ``/safety/reset``
=================================  =========================  ==============================

Times passed to the seams are *episode* times (seconds since the episode
start), the time base of :class:`~vla_edge.faults.scenario.FaultScenario`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

from vla_edge.core.clock import TIME_EPS_S
from vla_edge.core.errors import ConfigError
from vla_edge.core.types import ActionChunk, Observation
from vla_edge.faults.scenario import (
    CameraDelayParams,
    CameraFreezeParams,
    CameraParams,
    CameraSkewParams,
    ChunkJointParams,
    ClockJumpParams,
    CpuCapParams,
    CrashParams,
    EStopParams,
    FaultScenario,
    JumpParams,
    OutOfLimitsParams,
    SlowdownParams,
    StampShiftParams,
)

PROCESSES = ("sim", "inference", "controller", "safety")
MIN_WALL_S = 1e-9  # division guard: a reference inference timed at 0 s


class Injector:
    """No fault: every seam passes its input through unchanged."""

    def __init__(self, scenario: FaultScenario) -> None:
        self.scenario = scenario

    def active(self, t_s: float) -> bool:
        """Whether the fault is active at episode time ``t_s``."""
        return self.scenario.active(t_s)

    def camera(self, frame: Observation | None, t_s: float) -> list[Observation]:
        """Frames delivered to the consumers at ``t_s``, given the one captured now (if any)."""
        return [] if frame is None else [frame]

    def joint_state(self, positions: np.ndarray, t_s: float) -> np.ndarray | None:
        """The joint state delivered at ``t_s`` (``None``: lost)."""
        return positions

    def chunk(self, chunk: ActionChunk, t_s: float) -> ActionChunk | None:
        """The chunk delivered to the controller (``None``: lost)."""
        return chunk

    def inference_delay_s(self, base_delay_s: float, t_s: float) -> float:
        """How long an inference started at ``t_s`` takes."""
        return base_delay_s

    def alive(self, process: str, t_s: float) -> bool:
        """Whether ``process`` (one of :data:`PROCESSES`) is running at ``t_s``."""
        return True

    def clock_offset_s(self, t_s: float) -> float:
        """Step of the system clock at ``t_s`` (added to every stamp and ``now``)."""
        return 0.0

    def estop_pressed(self, t_s: float) -> bool:
        """Whether the e-stop button is held down at ``t_s``."""
        return False

    def run_inference(self, call: Callable[[], ActionChunk], t_s: float) -> ActionChunk:
        """Run the runner (``call``) for an inference started at ``t_s``."""
        return call()


def _affects(frame: Observation, cameras: Sequence[str]) -> bool:
    return any(name in cameras for name in frame.images) or not frame.images


class CameraDelay(Injector):
    """Frames reach the consumers ``delay_s`` after capture; stamps stay the capture time."""

    def __init__(self, scenario: FaultScenario) -> None:
        super().__init__(scenario)
        params = scenario.typed_params()
        assert isinstance(params, CameraDelayParams)
        self.delay_s = params.delay_s
        self.cameras = tuple(params.cameras)
        self._queue: deque[tuple[float, Observation]] = deque()

    def camera(self, frame: Observation | None, t_s: float) -> list[Observation]:
        """Frames due at ``t_s``, in capture order, none earlier than its delay.

        A frame captured during the fault is released ``delay_s`` after capture;
        after the fault, frames still wait for the queue ahead of them to drain
        (a transport queue keeps its order).
        """
        out: list[Observation] = []
        if frame is not None and _affects(frame, self.cameras):
            release_s = t_s + self.delay_s if self.active(t_s) else t_s
            if self._queue:
                release_s = max(release_s, self._queue[-1][0])
            self._queue.append((release_s, frame))
            frame = None
        while self._queue and self._queue[0][0] <= t_s + TIME_EPS_S:
            out.append(self._queue.popleft()[1])
        if frame is not None:
            out.append(frame)
        return out


class CameraFreeze(Injector):
    """The driver republishes its last good frame: same pixels, same stamp unless ``restamp``."""

    def __init__(self, scenario: FaultScenario) -> None:
        super().__init__(scenario)
        params = scenario.typed_params()
        assert isinstance(params, CameraFreezeParams)
        self.cameras = tuple(params.cameras)
        self.restamp = params.restamp
        self._last: dict[tuple[str, ...], Observation] = {}

    def camera(self, frame: Observation | None, t_s: float) -> list[Observation]:
        """Replace each frame captured during the fault by the last one before it."""
        if frame is None:
            return []
        key = tuple(sorted(frame.images))
        if not _affects(frame, self.cameras):
            return [frame]
        if self.active(t_s):
            frozen = self._last.get(key)
            if frozen is None:
                return []
            return [dataclasses.replace(frozen, stamp_s=frame.stamp_s) if self.restamp else frozen]
        self._last[key] = frame
        return [frame]


class CameraStampSkew(Injector):
    """Frames of the named cameras carry stamps moved by ``offset_s`` (a camera clock off)."""

    def __init__(self, scenario: FaultScenario) -> None:
        super().__init__(scenario)
        params = scenario.typed_params()
        assert isinstance(params, CameraSkewParams)
        self.cameras = tuple(params.cameras)
        self.offset_s = params.offset_s

    def camera(self, frame: Observation | None, t_s: float) -> list[Observation]:
        """The frame restamped while the fault is active."""
        if frame is None:
            return []
        if self.active(t_s) and _affects(frame, self.cameras):
            return [dataclasses.replace(frame, stamp_s=frame.stamp_s + self.offset_s)]
        return [frame]


class CameraDrop(Injector):
    """The cameras stop publishing."""

    def __init__(self, scenario: FaultScenario) -> None:
        super().__init__(scenario)
        params = scenario.typed_params()
        assert isinstance(params, CameraParams)
        self.cameras = tuple(params.cameras)

    def camera(self, frame: Observation | None, t_s: float) -> list[Observation]:
        """Nothing while the fault is active."""
        if frame is None or (self.active(t_s) and _affects(frame, self.cameras)):
            return []
        return [frame]


class JointStateLoss(Injector):
    """``/joint_states`` goes silent."""

    def joint_state(self, positions: np.ndarray, t_s: float) -> np.ndarray | None:
        """``None`` while the fault is active."""
        return None if self.active(t_s) else positions


class InferenceSlowdown(Injector):
    """Inference takes ``factor`` times as long (a CPU cap emulated by throttling)."""

    def __init__(self, scenario: FaultScenario) -> None:
        super().__init__(scenario)
        params = scenario.typed_params()
        assert isinstance(params, SlowdownParams)
        self.factor = params.factor

    def inference_delay_s(self, base_delay_s: float, t_s: float) -> float:
        """``factor * base_delay_s`` for inferences started during the fault."""
        return base_delay_s * self.factor if self.active(t_s) else base_delay_s


class CpuAffinityCap(Injector):
    """A real CPU cap: inference runs pinned to ``cpus`` cores via ``sched_setaffinity``.

    The harness measures the runner's wall time with and without the cap and
    scales the inference delay by the ratio (:meth:`record_wall_s`). Where the
    machine cannot restrict affinity, :meth:`unavailable_reason` says why and
    the scenario is skipped.
    """

    def __init__(self, scenario: FaultScenario) -> None:
        super().__init__(scenario)
        params = scenario.typed_params()
        assert isinstance(params, CpuCapParams)
        self.cpus = params.cpus
        self._reference_wall_s: list[float] = []
        self._capped_wall_s: list[float] = []

    def unavailable_reason(self) -> str | None:
        """Why the cap cannot be applied here (``None`` when it can)."""
        if not hasattr(os, "sched_setaffinity") or not hasattr(os, "sched_getaffinity"):
            return "os.sched_setaffinity is not available on this platform"
        allowed = os.sched_getaffinity(0)
        if len(allowed) <= self.cpus:
            return (
                f"cpus = {self.cpus} is not a cap: the process may only use {len(allowed)} "
                f"core(s) {sorted(allowed)}"
            )
        return None

    @staticmethod
    def cgroup_cap_reason() -> str:
        """Why a cgroup ``cpu.max`` cap is (not) used: the affinity cap is used instead."""
        cpu_max = Path("/sys/fs/cgroup/cpu.max")
        if not cpu_max.exists():
            return "no cgroup v2 cpu.max here (cgroup v1 or not mounted); affinity cap used"
        if not os.access(cpu_max, os.W_OK):
            return f"{cpu_max} is not writable by this user; affinity cap used"
        return "cgroup cpu.max writable, but the affinity cap is used for portability"

    @contextlib.contextmanager
    def pinned(self, t_s: float) -> Iterator[bool]:
        """Pin the calling thread to ``cpus`` cores while the fault is active.

        Yields whether the cap is in force. Linux applies ``sched_setaffinity(0)``
        to the calling thread, which is the one running the inference.
        """
        if not self.active(t_s) or self.unavailable_reason() is not None:
            yield False
            return
        before = os.sched_getaffinity(0)
        os.sched_setaffinity(0, set(sorted(before)[: self.cpus]))
        try:
            yield True
        finally:
            os.sched_setaffinity(0, before)

    def run_inference(self, call: Callable[[], ActionChunk], t_s: float) -> ActionChunk:
        """Run the runner pinned while the fault is active; record its wall time."""
        with self.pinned(t_s) as capped:
            start = time.perf_counter()
            chunk = call()
            wall_s = time.perf_counter() - start
        self.record_wall_s(wall_s, capped)
        return chunk

    def record_wall_s(self, wall_s: float, capped: bool) -> None:
        """Record one inference's wall time, capped or not."""
        (self._capped_wall_s if capped else self._reference_wall_s).append(float(wall_s))

    @property
    def slowdown(self) -> float:
        """Median capped / median reference wall time (>= 1; 1 until both are known)."""
        if not self._reference_wall_s or not self._capped_wall_s:
            return 1.0
        ratio = float(
            np.median(self._capped_wall_s) / max(np.median(self._reference_wall_s), MIN_WALL_S)
        )
        return max(1.0, ratio)

    def inference_delay_s(self, base_delay_s: float, t_s: float) -> float:
        """``base_delay_s`` scaled by the measured slowdown under the cap."""
        return base_delay_s * self.slowdown if self.active(t_s) else base_delay_s


class ProcessCrash(Injector):
    """A process dies at the fault start; respawned at the end when ``respawn``."""

    def __init__(self, scenario: FaultScenario, process: str) -> None:
        super().__init__(scenario)
        if process not in PROCESSES:
            raise ConfigError(f"process = {process!r}: expected one of {PROCESSES}")
        params = scenario.typed_params()
        assert isinstance(params, CrashParams)
        self.process = process
        self.respawn = params.respawn

    def alive(self, process: str, t_s: float) -> bool:
        """False for the crashed process while the fault lasts (forever without respawn)."""
        if process != self.process or t_s < self.scenario.start_s:
            return True
        return self.respawn and not self.active(t_s)


class _ChunkCorruption(Injector):
    """Base of faults that rewrite chunk positions from ``first_step`` on one joint."""

    def __init__(self, scenario: FaultScenario) -> None:
        super().__init__(scenario)
        params = scenario.typed_params()
        assert isinstance(params, ChunkJointParams)
        self.joint_index = params.joint_index
        self.first_step = params.first_step

    def _rewrite(self, column: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def chunk(self, chunk: ActionChunk, t_s: float) -> ActionChunk | None:
        """The chunk with ``positions[first_step:, joint_index]`` rewritten while active."""
        if not self.active(t_s):
            return chunk
        positions = np.array(chunk.positions, dtype=np.float64, copy=True)
        if self.joint_index >= positions.shape[1]:
            raise ConfigError(
                f"joint_index = {self.joint_index} out of range for {positions.shape[1]} joints"
            )
        first = min(self.first_step, positions.shape[0] - 1)
        positions[first:, self.joint_index] = self._rewrite(positions[first:, self.joint_index])
        return dataclasses.replace(chunk, positions=positions)


class ChunkNaN(_ChunkCorruption):
    """Chunks carry NaN targets."""

    def _rewrite(self, column: np.ndarray) -> np.ndarray:
        return np.full_like(column, np.nan)


class ChunkOutOfLimits(_ChunkCorruption):
    """Chunks ask a joint to go ``beyond_limit`` past its ``position_max``."""

    def __init__(self, scenario: FaultScenario, position_max: Sequence[float]) -> None:
        super().__init__(scenario)
        params = scenario.typed_params()
        assert isinstance(params, OutOfLimitsParams)
        if self.joint_index >= len(position_max):
            raise ConfigError(
                f"joint_index = {self.joint_index} out of range for {len(position_max)} joints"
            )
        self.target = float(position_max[self.joint_index]) + params.beyond_limit

    def _rewrite(self, column: np.ndarray) -> np.ndarray:
        return np.full_like(column, self.target)


class ChunkJump(_ChunkCorruption):
    """Chunks offset one joint by ``delta`` (a large jump from the current plan)."""

    def __init__(self, scenario: FaultScenario) -> None:
        super().__init__(scenario)
        params = scenario.typed_params()
        assert isinstance(params, JumpParams)
        self.delta = params.delta

    def _rewrite(self, column: np.ndarray) -> np.ndarray:
        return column + self.delta


class ChunkStampShift(Injector):
    """Chunk stamps moved by ``offset_s`` (positive: from the future; negative: the past)."""

    def __init__(self, scenario: FaultScenario) -> None:
        super().__init__(scenario)
        params = scenario.typed_params()
        assert isinstance(params, StampShiftParams)
        self.offset_s = params.offset_s

    def chunk(self, chunk: ActionChunk, t_s: float) -> ActionChunk | None:
        """The chunk restamped while active."""
        if not self.active(t_s):
            return chunk
        return dataclasses.replace(chunk, t_obs_s=chunk.t_obs_s + self.offset_s)


class ClockJump(Injector):
    """The system clock steps by ``offset_s`` at the fault start and stays stepped."""

    def __init__(self, scenario: FaultScenario) -> None:
        super().__init__(scenario)
        params = scenario.typed_params()
        assert isinstance(params, ClockJumpParams)
        self.offset_s = params.offset_s

    def clock_offset_s(self, t_s: float) -> float:
        """``offset_s`` from the fault start on."""
        return self.offset_s if t_s >= self.scenario.start_s else 0.0


class EStopPress(Injector):
    """E-stop pressed at the fault start; released and reset at the end when ``reset``."""

    def __init__(self, scenario: FaultScenario) -> None:
        super().__init__(scenario)
        params = scenario.typed_params()
        assert isinstance(params, EStopParams)
        self.reset = params.reset

    def estop_pressed(self, t_s: float) -> bool:
        """Held down during the fault window (forever without ``reset``)."""
        if t_s < self.scenario.start_s:
            return False
        return not self.reset or self.active(t_s)


def make_injector(scenario: FaultScenario, position_max: Sequence[float] | None = None) -> Injector:
    """The injector of ``scenario.fault``.

    Args:
        position_max: hard upper position limits (``config/safety.yaml``), needed
            by ``chunk_out_of_limits``.

    Raises:
        ConfigError: ``position_max`` missing for ``chunk_out_of_limits``.
    """
    fault = scenario.fault
    if fault == "none":
        return Injector(scenario)
    if fault == "chunk_out_of_limits":
        if position_max is None:
            raise ConfigError(
                f"scenario {scenario.name!r}: fault chunk_out_of_limits needs position_max"
            )
        return ChunkOutOfLimits(scenario, position_max)
    if fault == "inference_crash":
        return ProcessCrash(scenario, "inference")
    if fault == "controller_crash":
        return ProcessCrash(scenario, "controller")
    simple: dict[str, type[Injector]] = {
        "camera_delay": CameraDelay,
        "camera_freeze": CameraFreeze,
        "camera_drop": CameraDrop,
        "camera_stamp_skew": CameraStampSkew,
        "joint_state_loss": JointStateLoss,
        "inference_slowdown": InferenceSlowdown,
        "cpu_cap": CpuAffinityCap,
        "chunk_nan": ChunkNaN,
        "chunk_jump": ChunkJump,
        "chunk_stamp_shift": ChunkStampShift,
        "clock_jump": ClockJump,
        "estop": EStopPress,
    }
    return simple[fault](scenario)
