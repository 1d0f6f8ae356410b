"""Inference node: newest observation in, action chunk out, in a worker thread.

* keeps only the newest observation (camera frames + joint state +
  instruction) in an :class:`ObservationSlot`; callbacks never block;
* runs the runner from :func:`vla_edge.runners.factory.make_runner` in a
  worker thread whenever the controller asks (each ``controller/plan``
  message is a request; with ``infer_trigger: continuous`` it asks every tick)
  and an observation newer than the last one used is complete;
* takes the controller's remaining plan as the executed prefix
  (``supports_prefix`` runners);
* takes a new ``instruction`` (``std_msgs/String``) at any time: the next chunk
  is computed from it (runners embed each new instruction once and cache it).
  An empty, over-long or non-text one is a counted bad input and changes
  nothing; one the policy refuses at its tokenizer (unknown words, too many
  tokens) is counted and the last instruction that produced a chunk comes back;
* publishes ``action_chunk`` (``JointTrajectory``) stamped with the
  OBSERVATION time, and per-stage timings on ``/diagnostics``.

With ``backend: expert`` the scripted expert plans in a shadow scene kept in
the simulator's state from ``sim/state`` (see :mod:`vla_edge.nodes.sim_state`).
Topic names are relative (:mod:`vla_edge.nodes.graph`).
"""

from __future__ import annotations

import threading
import time
import traceback
from typing import Any

import numpy as np
from diagnostic_msgs.msg import DiagnosticArray
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image, JointState
from std_msgs.msg import Float64MultiArray, String
from trajectory_msgs.msg import JointTrajectory

from vla_edge.config.models import InferenceConfig
from vla_edge.core.errors import (
    ChunkRejectedError,
    ConfigError,
    InstructionRefusedError,
    InvalidObservationError,
)
from vla_edge.core.types import Observation
from vla_edge.inference.camera_health import CameraHealthLimits
from vla_edge.inference.observation_slot import (
    InferenceInput,
    ObservationSlot,
    required_cameras,
)
from vla_edge.inference.prefix import check_plan_joints, prefix_from_plan
from vla_edge.nodes import graph
from vla_edge.nodes.conversions import (
    S_PER_NS,
    checked_stamp_s,
    chunk_to_trajectory,
    diagnostic_array,
    image_to_array,
    instruction_from_text,
    joint_state_to_positions,
    stamp_to_s,
    status_to_diagnostic,
    trajectory_to_chunk,
)
from vla_edge.nodes.lifecycle import run_node, steady_timer
from vla_edge.nodes.metrics import BadInputCounter, Histogram
from vla_edge.nodes.params import declare_config
from vla_edge.nodes.sim_state import ShadowScene, decode_sim_state
from vla_edge.runners.base import Runner, start_noise

DIAGNOSTIC_NAME = "vla_edge/inference"
WORKER_POLL_S = 0.2
# Weight of the newest latency in the expected-delay estimate (exponential average).
DELAY_EMA_WEIGHT = 0.2
# How far ahead of this node's clock an image or joint-state stamp may lie (clock
# skew between machines). The upper bound of the controller's ``max_future_s``, so
# no frame the controller could accept is refused here; a frame stamped further
# ahead is refused (``future_stamp``), otherwise the observation slot would wait
# for a newer frame until the clock caught up with it.
MAX_FUTURE_STAMP_S = 1.0


class InferenceNode(Node):
    """Thin adapter: messages into the slot, the runner in a worker, chunks out."""

    def __init__(self) -> None:
        super().__init__("inference_node")
        self.config = declare_config(self, InferenceConfig)
        self.diagnostic_name = graph.diagnostic_name(self.get_namespace(), DIAGNOSTIC_NAME)
        self.policy = graph.policy_string(
            self.config.backend, self.config.model_path, self.config.remote_url
        )
        self.shadow: ShadowScene | None = None
        self.runner = self._make_runner()
        spec = self.runner.spec
        self.joint_names = tuple(spec.joint_names)
        self.bad_input = BadInputCounter(self.get_logger().warning)
        self.slot = ObservationSlot(
            self.config.cameras,
            required=required_cameras(spec.cameras, self.config.cameras),
            clock=self._now_s,
            limits=CameraHealthLimits.from_config(self.config),
            max_future_s=MAX_FUTURE_STAMP_S,
            clock_step_threshold_s=self.config.clock_step_threshold_s,
            chunk_transit_s=self.config.chunk_transit_s,
        )
        self.rng = np.random.default_rng(self.config.seed)
        self.stage_ms: dict[str, Histogram] = {}
        self.obs_age_ms = Histogram(1.0, 10_000.0)
        self.expected_delay_s = 0.1
        self.inferences = 0
        self.instruction_in_use: str | None = None
        """The instruction of the last chunk published (a refused new one falls back to it)."""
        self.instructions_used = 0
        self.errors: dict[str, int] = {}
        self._stats_lock = threading.Lock()
        self._last_start_s = float("-inf")
        self.warm_up_ms: float | None = None

        qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        image_qos = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)
        latched = QoSProfile(
            depth=1,
            reliability=ReliabilityPolicy.RELIABLE,
            durability=DurabilityPolicy.TRANSIENT_LOCAL,
        )
        self.chunk_pub = self.create_publisher(JointTrajectory, graph.TOPIC_ACTION_CHUNK, qos)
        self.diag_pub = self.create_publisher(DiagnosticArray, graph.TOPIC_DIAGNOSTICS, 10)
        for cam in self.config.cameras:
            self.create_subscription(
                Image,
                graph.camera_topic(cam),
                lambda msg, cam=cam: self._on_image(cam, msg),
                image_qos,
            )
        self.create_subscription(JointState, graph.TOPIC_JOINT_STATES, self._on_joint_state, qos)
        self.create_subscription(String, graph.TOPIC_INSTRUCTION, self._on_instruction, latched)
        self.create_subscription(JointTrajectory, graph.TOPIC_CONTROLLER_PLAN, self._on_plan, qos)
        if self.shadow is not None:
            self.create_subscription(
                Float64MultiArray, graph.TOPIC_SIM_STATE, self._on_sim_state, qos
            )
        if self.config.instruction.strip():
            self.slot.put_instruction(self.config.instruction.strip())
        steady_timer(self, graph.DIAGNOSTICS_PERIOD_S, self._publish_diagnostics)
        self._stop = threading.Event()
        self._worker = threading.Thread(target=self._work, name="inference_worker", daemon=True)
        self._worker.start()
        self.get_logger().info(
            f"policy {self.policy!r} ({type(self.runner).__name__}), cameras "
            f"{list(self.config.cameras)} at {self.config.image_height}x{self.config.image_width}"
        )

    def _now_s(self) -> float:
        return self.get_clock().now().nanoseconds * S_PER_NS

    def _make_runner(self) -> Runner:
        """The configured runner; the expert gets a shadow scene of the simulator."""
        from vla_edge.runners.factory import make_runner

        cfg = self.config
        if self.policy == "expert":
            from vla_edge.sim.env import TabletopEnv

            env = TabletopEnv(
                image_height=cfg.image_height, image_width=cfg.image_width, cameras=()
            )
            self.shadow = ShadowScene(env)
            return make_runner("expert", env=env)
        runner = make_runner(
            self.policy,
            threads=cfg.threads,
            flow_steps=cfg.runner_flow_steps,
            remote_timeout_s=cfg.remote_timeout_s,
            device=cfg.device,
            dtype=cfg.dtype,
            cuda_graphs=cfg.cuda_graphs,
            onnx_providers=cfg.onnx_providers,
        )
        spec = runner.spec
        missing = [cam for cam in spec.cameras if cam not in cfg.cameras]
        if missing:
            raise ConfigError(f"cameras = {cfg.cameras}: the policy also needs {missing}")
        if (
            spec.cameras
            and not spec.fits_images
            and (spec.image_height, spec.image_width) != (cfg.image_height, cfg.image_width)
        ):
            raise ConfigError(
                f"image_height x image_width = {cfg.image_height}x{cfg.image_width}, the policy "
                f"expects {spec.image_height}x{spec.image_width}"
            )
        return runner

    # --- inputs (never block) -------------------------------------------------------------

    def _on_image(self, camera: str, msg: Image) -> None:
        try:  # the content first: its error names what is wrong more precisely
            image = image_to_array(msg, self.config.image_height, self.config.image_width)
            stamp_s = checked_stamp_s(msg.header.stamp, self._now_s(), MAX_FUTURE_STAMP_S)
        except InvalidObservationError as exc:
            self.bad_input.record(getattr(exc, "reason", "image"), f"{camera}: {exc}")
            return
        self.slot.put_image(camera, stamp_s, image)

    def _on_joint_state(self, msg: JointState) -> None:
        try:
            positions = joint_state_to_positions(msg, self.joint_names)
            stamp_s = checked_stamp_s(msg.header.stamp, self._now_s(), MAX_FUTURE_STAMP_S)
        except InvalidObservationError as exc:
            self.bad_input.record(getattr(exc, "reason", "joint_state"), f"joint state: {exc}")
            return
        self.slot.put_state(stamp_s, positions)

    def _on_instruction(self, msg: String) -> None:
        try:
            instruction = instruction_from_text(msg.data)
        except InvalidObservationError as exc:  # keep the previous instruction
            self.bad_input.record(getattr(exc, "reason", "instruction"), str(exc))
            return
        self.slot.put_instruction(instruction)
        self.get_logger().info(f"instruction: {instruction!r}")

    def _on_plan(self, msg: JointTrajectory) -> None:
        """A request; its points are the executed prefix, used only if their joints match."""
        stamp_s = stamp_to_s(msg.header.stamp)
        plan = None
        if msg.points:
            try:
                plan = trajectory_to_chunk(msg, self.runner.spec.dt_action_s)
                check_plan_joints(plan, self.joint_names)
            except ChunkRejectedError as exc:  # still a request: infer without a prefix
                self.bad_input.record(f"plan_{exc.reason}", str(exc))
                plan = None
        self.slot.request(plan, stamp_s)

    def _on_sim_state(self, msg: Float64MultiArray) -> None:
        try:
            self.slot.put_extra(decode_sim_state(msg))
        except InvalidObservationError as exc:
            self.bad_input.record(getattr(exc, "reason", "sim_state"), str(exc))

    # --- the worker -----------------------------------------------------------------------

    def _warm_up(self) -> None:
        """One inference on a blank observation, so the first real chunk is not late.

        The first call of a learned runner allocates and compiles; its latency
        would make the first chunk stale. The expert needs the simulator's state
        and has nothing to warm up.
        """
        spec = self.runner.spec
        if self.shadow is not None or not spec.cameras:
            self.warm_up_ms = 0.0
            return
        blank = Observation(
            stamp_s=self._now_s(),
            images={
                cam: np.zeros((spec.image_height, spec.image_width, 3), np.uint8)
                for cam in spec.cameras
            },
            state=np.zeros(spec.action_dim),
            instruction=self.config.instruction.strip() or "warm up",
        )
        start = time.perf_counter()
        try:
            self.runner.infer(blank)
        except Exception as exc:  # noqa: BLE001 - reported; the node keeps serving
            self._record_error(exc)
        self.warm_up_ms = (time.perf_counter() - start) * 1e3
        self.get_logger().info(f"warm-up inference took {self.warm_up_ms:.0f} ms")

    def _work(self) -> None:
        self._warm_up()
        while not self._stop.is_set():
            item = self.slot.take(WORKER_POLL_S)
            if item is None:
                continue
            wait_s = self._last_start_s + self.config.min_period_s - time.monotonic()
            if wait_s > 0.0:
                self._stop.wait(wait_s)
            self._last_start_s = time.monotonic()
            try:
                self._infer_and_publish(item)
            except InstructionRefusedError as exc:
                self._refuse_instruction(item.observation.instruction, exc)
            except InvalidObservationError as exc:
                self.bad_input.record(getattr(exc, "reason", "observation"), str(exc))
            except Exception as exc:  # noqa: BLE001 - the node must survive any runner failure
                if self._stop.is_set() or not self.context.ok():
                    return  # publishing raced with shutdown: the publishers are gone
                self._record_error(exc)

    def _refuse_instruction(self, instruction: str, exc: InstructionRefusedError) -> None:
        """Count a new instruction the policy cannot take and go back to the one it could."""
        previous = self.instruction_in_use
        kept = previous is not None and self.slot.restore_instruction(instruction, previous)
        note = f"; keeping {previous!r}" if kept else ""
        self.bad_input.record(exc.reason, f"{exc}{note}")

    def _record_error(self, exc: Exception) -> None:
        name = type(exc).__name__
        with self._stats_lock:
            first = name not in self.errors
            self.errors[name] = self.errors.get(name, 0) + 1
        if first:
            self.get_logger().error(
                f"inference failed ({name}): {exc} (logged once; counted on /diagnostics)\n"
                + "".join(traceback.format_exception(exc))
            )

    def _infer_and_publish(self, item: InferenceInput) -> None:
        spec = self.runner.spec
        obs = item.observation
        start_s = self._now_s()
        wall0 = time.perf_counter()
        if self.shadow is not None:
            if item.extra is None:
                return  # no simulator snapshot yet
            self.shadow.apply(item.extra)
        prefix, prefix_len = (None, 0)
        if spec.supports_prefix:
            prefix, prefix_len = prefix_from_plan(
                item.plan,
                obs.stamp_s,
                spec.chunk_horizon,
                spec.dt_action_s,
                start_s,
                self.expected_delay_s,
            )
        noise = start_noise(self.rng, spec.chunk_horizon, spec.noise_dim, self.config.noise_scale)
        chunk = self.runner.infer(obs, noise=noise, prefix_actions=prefix, prefix_len=prefix_len)
        wall_ms = (time.perf_counter() - wall0) * 1e3
        publish_s = self._now_s()
        if not self.context.ok():
            return  # shutting down
        self.chunk_pub.publish(chunk_to_trajectory(chunk))
        self.slot.mark_published(publish_s)
        with self._stats_lock:
            self.inferences += 1
            if obs.instruction != self.instruction_in_use:
                self.instruction_in_use = obs.instruction
                self.instructions_used += 1
            for stage, ms in {**chunk.timings_ms, "wall": wall_ms}.items():
                self.stage_ms.setdefault(stage, Histogram(0.1, 60_000.0)).add(float(ms))
            self.obs_age_ms.add((publish_s - obs.stamp_s) * 1e3)
            self.expected_delay_s += DELAY_EMA_WEIGHT * (wall_ms * 1e-3 - self.expected_delay_s)

    # --- diagnostics ----------------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """Status dict for ``/diagnostics``."""
        with self._stats_lock:
            values: dict[str, Any] = {
                "policy": self.policy,
                "runner": type(self.runner).__name__,
                "device": self.config.device,
                "inferences": self.inferences,
                "instruction": self.instruction_in_use or "",
                "instructions_used": self.instructions_used,
                "expected_delay_s": self.expected_delay_s,
                "dropped_frames": self.slot.dropped_frames,
                "stale_requests": self.slot.stale_requests,
                **self.obs_age_ms.summary("chunk_age_at_publish_ms"),
            }
            for stage, hist in sorted(self.stage_ms.items()):
                values[f"stage_ms.{stage}.p50"] = hist.percentile(50)
                values[f"stage_ms.{stage}.p95"] = hist.percentile(95)
                values[f"stage_ms.{stage}.max"] = hist.max
            wall = self.stage_ms.get("wall")
            if wall is not None:  # a reader with two readings has the histogram between them
                values["stage_ms.wall.bins"] = wall.bins()
                values["stage_ms.wall.bin_width"] = wall.bin_width
            values.update({f"errors.{k}": v for k, v in sorted(self.errors.items())})
            values["errors.total"] = sum(self.errors.values())
        values.update(self.bad_input.as_values())
        values.update(self.slot.camera_diagnostics())
        values["clock_steps"] = self.slot.clock_steps
        values["warm_up_ms"] = self.warm_up_ms if self.warm_up_ms is not None else "running"
        unhealthy = self.slot.camera_faults()
        if unhealthy:
            level = "ERROR"
            message = "no observation: camera " + ", ".join(
                f"{cam} {condition}" for cam, condition in unhealthy.items()
            )
        elif self.warm_up_ms is None:
            level, message = "WARN", "warming up the runner"
        elif self.slot.observation_stamp_s() is None:
            level, message = (
                "WARN",
                "waiting for a complete observation (images, joints, instruction)",
            )
        elif values["errors.total"]:
            level, message = "WARN", f"{values['errors.total']} inference errors"
        else:
            level, message = "OK", f"{self.inferences} chunks"
        return {"level": level, "message": message, **values}

    def _publish_diagnostics(self) -> None:
        now_s = self._now_s()
        self.diag_pub.publish(
            diagnostic_array([status_to_diagnostic(self.diagnostic_name, self.status())], now_s)
        )

    def close(self) -> None:
        """Stop the worker and release the runner."""
        self._stop.set()
        self.slot.close()
        self._worker.join(timeout=5.0)
        if self._worker.is_alive():  # still inside infer: closing the runner under it could crash
            self.get_logger().warning("inference worker still busy after 5 s; runner left open")
            return
        self.runner.close()


def main(args: list[str] | None = None) -> int:
    """Run the inference node until Ctrl-C or external shutdown."""
    return run_node(
        "inference_node",
        InferenceNode,
        cleanup=lambda node: node.close(),
        args=args,
    )


if __name__ == "__main__":
    raise SystemExit(main())
