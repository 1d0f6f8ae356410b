"""The simulated-time closed loop shared by the evaluator and the fault harness.

One :meth:`ClosedLoop.tick` advances the simulator by ``env.control_dt_s``
(100 Hz) and runs, in the order of the ROS graph:

1. **sim**: measures the joints (``/joint_states``) and, with streaming
   cameras, captures one frame per camera every ``camera_period_s``; each
   passes through the disturbances on its own.
2. **operator and safety**: the e-stop button and the reset service
   (``/estop``, ``/safety/reset``); the safety supervisor reads the joint state.
3. **processes**: inference and controller die and respawn when the
   disturbances say so (a respawned controller starts at the last joint state,
   a respawned inference node with an empty observation slot).
4. **chunk delivery**: a chunk whose (virtual) inference has finished reaches
   the controller through the disturbances (``/action_chunk``); the ``sync``
   broker cuts it to its first ``replan_steps`` actions and starts it on arrival.
5. **inference**: the controller's request (``/controller/plan``) is answered
   on a new observation when no chunk is in flight; the chunk is delivered
   ``delay_s`` later (in this very tick when the delay is 0). With the
   ``prefix`` merge the controller's remaining plan is passed as the executed
   prefix (``inference/prefix.py``), as the inference node does.
6. **controller**: :func:`~vla_edge.control.supervision.supervised_step`, the
   rules of ``nodes/controller_node.py`` (watchdog, clock jumps); its command
   is shaped into ``command_limit_margin`` of the safety node's limits
   (:mod:`vla_edge.control.shaping`).
7. **safety** filters the command (or holds while the controller is dead) and
   the **env** steps with the safe command.

Time is the simulator's, so results do not depend on this machine's speed.
The system clock is the simulated time plus the disturbances' clock step, so a
clock jump moves every stamp and every ``now`` together.

Two observation paths: :class:`OnRequestCamera` renders the scene at the
instant inference starts (the evaluator: a policy's view without camera
latency) and :class:`StreamingCameras` publishes frames at a fixed rate into
the inference node's :class:`~vla_edge.inference.observation_slot.ObservationSlot`,
with camera health (the fault harness and the ROS graph).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from vla_edge.config.models import ControllerConfig, InferenceConfig, SafetyConfig
from vla_edge.control.controller import Controller
from vla_edge.control.shaping import CommandLimits, command_limits_for
from vla_edge.control.supervision import accept_chunk, joint_states_lost, supervised_step
from vla_edge.control.watchdog import Watchdog
from vla_edge.core.clock import TIME_EPS_S
from vla_edge.core.errors import ChunkRejectedError, ConfigError
from vla_edge.core.stop import StopCategory
from vla_edge.core.types import ActionChunk, JointCommand, Observation
from vla_edge.inference.camera_health import CameraHealthLimits
from vla_edge.inference.observation_slot import (
    InferenceInput,
    ObservationSlot,
    required_cameras,
)
from vla_edge.inference.prefix import prefix_from_plan
from vla_edge.runners.base import Runner, start_noise
from vla_edge.safety.supervisor import SafetySupervisor

PROCESSES = ("inference", "controller")


class Disturbances(Protocol):
    """The seams where faults enter the loop (``faults.injectors.Injector`` implements it)."""

    def clock_offset_s(self, t_s: float) -> float:
        """Step of the system clock at episode time ``t_s``."""

    def joint_state(self, positions: np.ndarray, t_s: float) -> np.ndarray | None:
        """The joint state delivered at ``t_s`` (``None``: lost)."""

    def camera(self, frame: Observation | None, t_s: float) -> list[Observation]:
        """Frames delivered at ``t_s``, given the one captured now (if any)."""

    def chunk(self, chunk: ActionChunk, t_s: float) -> ActionChunk | None:
        """The chunk delivered to the controller (``None``: lost)."""

    def inference_delay_s(self, base_delay_s: float, t_s: float) -> float:
        """How long an inference started at ``t_s`` takes (virtual)."""

    def alive(self, process: str, t_s: float) -> bool:
        """Whether ``process`` runs at ``t_s``."""

    def estop_pressed(self, t_s: float) -> bool:
        """Whether the e-stop button is held down at ``t_s``."""

    def run_inference(self, call: Callable[[], ActionChunk], t_s: float) -> ActionChunk:
        """Run ``call`` (the runner), e.g. under a CPU cap."""


class NoDisturbances:
    """Every seam passes its input through: the evaluator's loop."""

    def clock_offset_s(self, t_s: float) -> float:
        """No clock step."""
        return 0.0

    def joint_state(self, positions: np.ndarray, t_s: float) -> np.ndarray | None:
        """Delivered unchanged."""
        return positions

    def camera(self, frame: Observation | None, t_s: float) -> list[Observation]:
        """Delivered unchanged."""
        return [] if frame is None else [frame]

    def chunk(self, chunk: ActionChunk, t_s: float) -> ActionChunk | None:
        """Delivered unchanged."""
        return chunk

    def inference_delay_s(self, base_delay_s: float, t_s: float) -> float:
        """The configured delay."""
        return base_delay_s

    def alive(self, process: str, t_s: float) -> bool:
        """Every process runs."""
        return True

    def estop_pressed(self, t_s: float) -> bool:
        """Never pressed."""
        return False

    def run_inference(self, call: Callable[[], ActionChunk], t_s: float) -> ActionChunk:
        """Run it."""
        return call()


@dataclass(frozen=True)
class SyncBroker:
    """openpi's synchronous ``ActionChunkBroker``: execute ``replan_steps`` actions, then wait.

    A chunk is requested when the buffer is empty; it starts from its first
    step when it arrives (re-stamped at arrival), cut to ``replan_steps``
    actions after the current position.
    """

    replan_steps: int

    def __post_init__(self) -> None:
        if self.replan_steps < 1:
            raise ConfigError(f"replan_steps = {self.replan_steps}: must be >= 1")

    def on_arrival(self, chunk: ActionChunk, now_s: float) -> ActionChunk:
        """The chunk as the broker executes it."""
        return ActionChunk(
            t_obs_s=now_s,
            dt_action_s=chunk.dt_action_s,
            joint_names=chunk.joint_names,
            positions=chunk.positions[: self.replan_steps + 1],
            timings_ms=chunk.timings_ms,
        )


class ControllerProcess:
    """The controller node (``nodes/controller_node.py``) in virtual time.

    Like the node: the controller starts at the measured position; chunks are
    refused while joint states are lost; an accepted chunk beats ``chunk`` and
    ``observation`` (stamped with the chunk's observation time); every tick
    steps the controller under its watchdog and publishes the command (the
    buffer running out is a controlled hold); a new chunk is requested when the
    trigger asks and joint states are fresh. Given the safety node's limits
    (``limits``), the command is shaped into them as the node shapes it.
    """

    def __init__(
        self,
        config: ControllerConfig,
        positions: np.ndarray,
        now_s: float,
        limits: CommandLimits | None = None,
    ) -> None:
        self.core = Controller(config, initial_positions=positions, limits=limits)
        self.watchdog = Watchdog.from_controller_config(config, start_s=now_s)

    def joint_states_lost(self, now_s: float) -> bool:
        """Whether the ``joint_state`` heartbeat has expired."""
        return joint_states_lost(self.watchdog, now_s)

    def on_chunk(self, chunk: ActionChunk, now_s: float) -> bool:
        """Submit ``chunk``; True if accepted."""
        if self.joint_states_lost(now_s):
            return False
        try:
            accept_chunk(self.core, self.watchdog, chunk, now_s)
        except ChunkRejectedError:
            return False
        return True

    def wants_chunk(self, now_s: float, accepted: int, broker: SyncBroker | None) -> bool:
        """The inference request (``/controller/plan``), or the sync broker's."""
        if self.joint_states_lost(now_s):
            return False
        if broker is not None:
            return accepted == 0 or self.core.buffered_steps(now_s) == 0
        return self.core.needs_inference(now_s)

    def tick(self, now_s: float, measured: np.ndarray | None) -> JointCommand:
        """The command published this tick (the node beats ``control_loop`` first)."""
        self.watchdog.beat("control_loop", now_s)
        return supervised_step(self.core, self.watchdog, now_s, measured)

    def severity(self, now_s: float) -> int:
        """Watchdog category, at least CAT2 while the buffer is empty (holding)."""
        category = self.watchdog.check(now_s)
        if self.core.holding:
            category = StopCategory.most_severe(category, StopCategory.CAT2)
        return category.severity


class OnRequestCamera:
    """The scene rendered at the instant inference starts (no camera stream).

    Only a request made on the current tick is answered, so an inference starts
    exactly when the controller (or the broker) asks for one.
    """

    def __init__(self, env: Any, instruction: str) -> None:
        self.env = env
        self.instruction = instruction
        self._request: tuple[float, ActionChunk | None] | None = None

    def put_instruction(self, instruction: str) -> None:
        """The instruction of the next observation."""
        self.instruction = instruction

    def put_frames(self, frames: list[Observation]) -> None:
        """Nothing is streamed."""

    def put_state(self, stamp_s: float, positions: np.ndarray) -> None:
        """The state is read with the render."""

    def request(self, plan: ActionChunk | None, clock_s: float) -> None:
        """Ask for an observation now."""
        self._request = (clock_s, plan)

    def take(self, clock_s: float) -> InferenceInput | None:
        """The scene now, if asked for on this tick."""
        request, self._request = self._request, None
        if request is None or request[0] != clock_s:
            return None
        obs = self.env.observe(render=True)
        return InferenceInput(
            Observation(clock_s, obs.images, obs.state, self.instruction), request[1], clock_s, None
        )

    def mark_published(self, clock_s: float) -> None:
        """Nothing to track."""

    def counters(self) -> dict[str, int]:
        """No camera conditions."""
        return {}

    @property
    def clock_steps(self) -> int:
        """No clock of its own."""
        return 0


class StreamingCameras:
    """The inference node's observation slot, fed by cameras that publish at a fixed rate.

    The slot keeps the newest frame per camera with its health, and refuses an
    observation whose required cameras are not ok.
    """

    def __init__(
        self,
        env: Any,
        instruction: str,
        clock: Callable[[], float],
        required: tuple[str, ...],
        config: InferenceConfig,
    ) -> None:
        self.slot = ObservationSlot(
            tuple(env.cameras),
            required=required,
            clock=clock,
            limits=CameraHealthLimits.from_config(config),
            clock_step_threshold_s=config.clock_step_threshold_s,
        )
        self.slot.put_instruction(instruction)

    def put_instruction(self, instruction: str) -> None:
        """A new instruction, as the inference node takes it from its topic."""
        self.slot.put_instruction(instruction)

    def put_frames(self, frames: list[Observation]) -> None:
        """Hand delivered frames to the slot."""
        for frame in frames:
            for cam, image in frame.images.items():
                self.slot.put_image(cam, frame.stamp_s, image)

    def put_state(self, stamp_s: float, positions: np.ndarray) -> None:
        """The joint state paired with the images."""
        self.slot.put_state(stamp_s, positions)

    def request(self, plan: ActionChunk | None, clock_s: float) -> None:
        """The controller's request."""
        self.slot.request(plan, clock_s)

    def take(self, clock_s: float) -> InferenceInput | None:
        """A new, healthy observation and its request, if any."""
        return self.slot.take(0.0)

    def mark_published(self, clock_s: float) -> None:
        """A chunk went out."""
        self.slot.mark_published(clock_s)

    def counters(self) -> dict[str, int]:
        """Camera condition onsets."""
        return self.slot.health.counters()

    @property
    def clock_steps(self) -> int:
        """Clock steps the slot re-anchored on."""
        return self.slot.clock_steps


def _add_counts(total: dict[str, int], counts: dict[str, int]) -> dict[str, int]:
    """``total += counts`` key by key; returns ``total``."""
    for key, n in counts.items():
        total[key] = total.get(key, 0) + n
    return total


@dataclass
class LoopSettings:
    """How the loop runs.

    Attributes:
        delay_s: virtual duration of one inference (before the disturbances).
        noise_scale: standard deviation of the flow-matching start noise.
        cameras: ``"on_request"`` (render when inference starts) or
            ``"streaming"`` (frames every ``camera_period_s`` into the slot).
        camera_period_s: time between two frames of a streaming camera.
        broker: openpi's synchronous broker (``None``: the controller's own
            trigger and merge).
        required_cameras: the cameras the policy reads (streaming only;
            ``None``: the runner's, or every camera for a runner that reads none).
        inference: the inference node's parameters (camera health, clock steps).
    """

    delay_s: float = 0.0
    noise_scale: float = 1.0
    cameras: str = "on_request"
    camera_period_s: float = 0.1
    broker: SyncBroker | None = None
    required_cameras: tuple[str, ...] | None = None
    inference: InferenceConfig = field(default_factory=InferenceConfig)

    def __post_init__(self) -> None:
        if self.cameras not in ("on_request", "streaming"):
            raise ConfigError(f"cameras = {self.cameras!r}: expected 'on_request' or 'streaming'")
        if not self.delay_s >= 0.0:
            raise ConfigError(f"delay_s = {self.delay_s}: must be >= 0")


@dataclass
class Tick:
    """What one tick did."""

    t_s: float
    clock_s: float
    measured: np.ndarray
    command: JointCommand | None
    safe: np.ndarray
    arrived: bool
    """A chunk was accepted by the controller this tick."""
    arrived_instruction: str | None = None
    """The instruction the accepted chunk was computed from."""


class ClosedLoop:
    """The robot's controller and safety cores, a runner and a simulator, in virtual time.

    Args:
        env: the simulator (``reset``, ``observe``, ``state``, ``step``,
            ``time_s``, ``control_dt_s``, ``cameras``).
        runner: the policy.
        controller_config: the controller's parameters (as the node gets them).
        safety_config: the safety node's parameters.
        settings: the loop's settings.
        faults: where faults enter (default: none).
    """

    def __init__(
        self,
        env: Any,
        runner: Runner,
        controller_config: ControllerConfig,
        safety_config: SafetyConfig,
        settings: LoopSettings,
        faults: Disturbances | None = None,
    ) -> None:
        self.env = env
        self.runner = runner
        self.controller_config = controller_config
        self.safety_config = safety_config
        self.settings = settings
        self.faults: Disturbances = faults if faults is not None else NoDisturbances()
        # the controller keeps command_limit_margin of the safety node's limits
        self.command_limits = command_limits_for(controller_config, safety_config)

    def reset(
        self,
        task: str,
        init_state_id: int,
        rng: np.random.Generator,
        instruction: str | None = None,
    ) -> Observation:
        """Start an episode: the scene, the safety supervisor, both processes.

        Args:
            rng: the generator of the flow-matching noise (one draw per inference).
            instruction: override of the task's instruction.
        """
        obs = self.env.reset(task, init_state_id, instruction=instruction)
        self.instruction = obs.instruction
        self.rng = rng
        self.system_clock_s = 0.0
        self.safety = SafetySupervisor(self.safety_config, initial_positions=obs.state.copy())
        self.controller: ControllerProcess | None = ControllerProcess(
            self.controller_config, obs.state.copy(), 0.0, self.command_limits
        )
        self.observations = self._observation_path()
        self.last_joint_state: np.ndarray | None = obs.state.copy()
        self.pending: tuple[float, ActionChunk] | None = None
        self._pending_instruction = ""
        self.accepted = 0
        self.rejected = 0
        self.runner_refused = 0
        self.inference_wall_ms: list[float] = []
        self.restarts = dict.fromkeys(PROCESSES, 0)
        self.camera_faults: dict[str, int] = {}
        self._alive = dict.fromkeys(PROCESSES, True)
        self._estop_was_pressed = False
        self._next_frame_s = 0.0
        return obs

    def set_instruction(self, instruction: str) -> None:
        """A new instruction, as on the inference node's topic: the next inference uses it.

        A chunk already in flight still arrives (it was computed from the old one);
        the controller joins the new chunk to the motion in progress as it joins any.
        """
        self.instruction = instruction
        self.env.instruction = instruction
        if self.observations is not None:
            self.observations.put_instruction(instruction)

    # --- one tick ---------------------------------------------------------------------------

    def tick(self) -> Tick:
        """Advance one control period."""
        env, faults = self.env, self.faults
        t = env.time_s
        clock = self.system_clock_s = t + faults.clock_offset_s(t)

        # 1. sim: joint state and camera frames
        measured = env.state()
        js = faults.joint_state(measured.copy(), t)
        frames = self._capture(t, clock, measured) if self.settings.cameras == "streaming" else []

        # 2. e-stop button (operator) and reset service; safety reads the joint state
        pressed = faults.estop_pressed(t)
        if pressed and not self._estop_was_pressed:
            self.safety.estop(clock)
        if not pressed and self._estop_was_pressed:
            self.safety.reset(clock)
        self._estop_was_pressed = pressed
        if js is not None:
            self.safety.on_joint_state(js, clock)
            self.last_joint_state = js

        # 3. process deaths and respawns
        self._processes(t, clock)

        # inference node inputs; the controller's joint-state heartbeat
        if self.observations is not None:
            self.observations.put_frames(frames)
            if js is not None:
                self.observations.put_state(clock, js)
        if self.controller is not None and js is not None:
            self.controller.watchdog.beat("joint_state", clock)

        # 4. chunk delivery, 5. inference (a chunk due at once arrives this tick)
        arrived = self._deliver(t, clock)
        self._infer(t, clock)
        arrived = self._deliver(t, clock) or arrived

        # 6. controller, 7. safety and env
        command = (
            self.controller.tick(clock, self.last_joint_state)
            if self.controller is not None
            else None
        )
        safe = (
            self.safety.filter(command, clock) if command is not None else self.safety.hold(clock)
        )
        env.step(safe)
        return Tick(
            t,
            clock,
            measured,
            command,
            np.asarray(safe, dtype=np.float64),
            arrived,
            self._pending_instruction if arrived else None,
        )

    def _capture(self, t: float, clock: float, measured: np.ndarray) -> list[Observation]:
        """The frames the cameras deliver this tick, one per camera every ``camera_period_s``.

        Frames are stamped with the system clock and pass through the
        disturbances one camera at a time; the sim captures them whether or not
        the inference node runs.
        """
        delivered = self.faults.camera(None, t)
        if t + TIME_EPS_S >= self._next_frame_s:
            self._next_frame_s += self.settings.camera_period_s
            captured = self.env.observe(render=True)
            for cam, image in captured.images.items():
                frame = Observation(clock, {cam: image}, measured.copy(), self.instruction)
                delivered.extend(self.faults.camera(frame, t))
        return delivered

    def _processes(self, t: float, clock: float) -> None:
        alive = {p: self.faults.alive(p, t) for p in PROCESSES}
        for p in PROCESSES:
            if alive[p] and not self._alive[p]:
                self.restarts[p] += 1
        self._alive = alive
        if not alive["inference"]:
            if self.observations is not None:
                _add_counts(self.camera_faults, self.observations.counters())
            self.pending, self.observations = None, None
        elif self.observations is None:
            self.observations = self._observation_path()
        if not alive["controller"]:
            self.controller = None
        elif self.controller is None:
            start = (
                self.last_joint_state
                if self.last_joint_state is not None
                else self.safety.limiter.positions
            )
            self.controller = ControllerProcess(
                self.controller_config, start.copy(), clock, self.command_limits
            )

    def _deliver(self, t: float, clock: float) -> bool:
        """Deliver the chunk in flight if its inference has finished; True if accepted."""
        if self.pending is None or t + TIME_EPS_S < self.pending[0]:
            return False
        chunk = self.faults.chunk(self.pending[1], t)
        self.pending = None
        if self.observations is not None:
            self.observations.mark_published(clock)
        if chunk is None or self.controller is None:
            return False
        if self.settings.broker is not None:
            chunk = self.settings.broker.on_arrival(chunk, clock)
        if self.controller.on_chunk(chunk, clock):
            self.accepted += 1
            return True
        self.rejected += 1
        return False

    def _infer(self, t: float, clock: float) -> None:
        """Answer the controller's request on a new observation when nothing is in flight."""
        observations, controller, spec = self.observations, self.controller, self.runner.spec
        if observations is None:
            return
        if controller is not None and controller.wants_chunk(
            clock, self.accepted, self.settings.broker
        ):
            plan = controller.core.prefix_plan(clock) if spec.supports_prefix else None
            observations.request(plan, clock)
        if self.pending is not None:
            return
        item = observations.take(clock)
        if item is None:
            return
        obs = item.observation
        prefix, prefix_len = None, 0
        if spec.supports_prefix:
            prefix, prefix_len = prefix_from_plan(
                item.plan,
                obs.stamp_s,
                spec.chunk_horizon,
                spec.dt_action_s,
                clock,
                self.settings.delay_s,
            )
        noise = start_noise(self.rng, spec.chunk_horizon, spec.noise_dim, self.settings.noise_scale)
        start = time.perf_counter()
        try:
            chunk = self.faults.run_inference(
                lambda: self.runner.infer(
                    obs, noise=noise, prefix_actions=prefix, prefix_len=prefix_len
                ),
                t,
            )
        except ChunkRejectedError:  # the runner refused its own output (NaN)
            self.runner_refused += 1
            chunk = None
        self.inference_wall_ms.append((time.perf_counter() - start) * 1e3)
        if chunk is not None:
            self.pending = (t + self.faults.inference_delay_s(self.settings.delay_s, t), chunk)
            self._pending_instruction = obs.instruction

    def _observation_path(self) -> OnRequestCamera | StreamingCameras:
        """A fresh inference node's observations (at start and on a respawn)."""
        if self.settings.cameras == "on_request":
            return OnRequestCamera(self.env, self.instruction)
        cameras = tuple(self.env.cameras)
        required = self.settings.required_cameras or required_cameras(
            self.runner.spec.cameras, cameras
        )
        return StreamingCameras(
            self.env,
            self.instruction,
            lambda: self.system_clock_s,
            required,
            self.settings.inference,
        )

    # --- episode summaries ------------------------------------------------------------------

    def all_camera_faults(self) -> dict[str, int]:
        """Camera condition onsets over the episode (every inference process's slot)."""
        current = self.observations.counters() if self.observations is not None else {}
        return _add_counts(dict(self.camera_faults), current)

    @property
    def clock_steps(self) -> int:
        """Clock steps the running inference node re-anchored on."""
        return self.observations.clock_steps if self.observations is not None else 0
