"""Pydantic models for every component.

Units are SI and part of each field name: revolute joints in rad, the gripper
(prismatic) in m. The controller's per-joint lists follow the order of its
``joint_names``; the safety limits are keyed per joint (``joints.<name>``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from vla_edge.core.errors import FlatSafetyLimitsError, MissingJointLimitsError

DEFAULT_JOINT_NAMES = ["joint1", "joint2", "joint3", "joint4", "joint5", "joint6", "gripper"]

DEFAULT_DT_ACTION_S = 0.1
"""Default time between two steps of an action chunk [s] (10 Hz policy steps):
the bundled policy, the demonstrations and the scripted expert use it."""

MergeName = Literal["replace", "weighted", "ensemble", "prefix"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ControllerConfig(_Strict):
    """The real-time controller: chunk buffer, merge, sampling, watchdog."""

    joint_names: list[str] = Field(
        default_factory=lambda: list(DEFAULT_JOINT_NAMES),
        min_length=1,
        description="joints of every chunk and command, in order (revolute in rad, gripper in m)",
    )
    rate_hz: float = Field(
        100.0, gt=0.0, le=2000.0, description="control loop rate: commands per second [Hz]"
    )
    dt_action_s: float = Field(
        DEFAULT_DT_ACTION_S,
        gt=0.0,
        le=1.0,
        description="time between two steps of an action chunk [s]",
    )
    chunk_horizon: int = Field(10, ge=1, le=512, description="steps H of an action chunk [steps]")
    max_chunk_age_s: float = Field(
        0.5,
        gt=0.0,
        le=10.0,
        description="oldest chunk accepted on arrival, age from its observation stamp [s]",
    )
    max_future_s: float = Field(
        0.05,
        ge=0.0,
        le=1.0,
        description="how far ahead of this node's clock a chunk stamp may lie (clock skew) [s]",
    )
    merge: MergeName = Field(
        "ensemble", description="how a new chunk merges with the buffered plan"
    )
    weighted_old_weight: float = Field(
        0.3,
        ge=0.0,
        le=1.0,
        description="weight of the buffered step where chunks overlap (merge weighted) [1]",
    )
    ensemble_decay: float = Field(
        0.01,
        ge=0.0,
        le=10.0,
        description="ACT temporal-ensembling weight exp(-decay * i), i = 0 oldest [1/chunk]",
    )
    interpolation: Literal["linear", "cubic"] = Field(
        "cubic", description="interpolation between chunk steps at the control rate"
    )
    bridge_duration_s: float = Field(
        0.2,
        ge=0.0,
        le=5.0,
        description="velocity-continuous bridge from the commanded position into a new chunk [s]",
    )
    hold_ramp_s: float = Field(
        0.2,
        gt=0.0,
        le=5.0,
        description="time the velocity ramps to zero when the buffer runs out (hold) [s]",
    )
    infer_trigger: Literal["continuous", "threshold"] = Field(
        "threshold",
        description="request a chunk every tick, or when the buffer falls below the threshold",
    )
    threshold_fraction: float = Field(
        0.5,
        gt=0.0,
        le=1.0,
        description="buffered fraction of a chunk below which a new one is requested [1]",
    )
    expected_inference_delay_s: float = Field(
        0.1,
        ge=0.0,
        le=5.0,
        description="expected inference latency, recorded by evaluations (unused by the nodes) [s]",
    )
    observation_timeout_s: float = Field(
        1.0,
        gt=0.0,
        le=30.0,
        description="watchdog: observation stamp of the newest accepted chunk older than this [s]",
    )
    joint_state_timeout_s: float = Field(
        0.1, gt=0.0, le=30.0, description="watchdog: no joint state for this long [s]"
    )
    chunk_timeout_s: float = Field(
        1.0, gt=0.0, le=60.0, description="watchdog: no accepted chunk for this long [s]"
    )
    control_loop_timeout_s: float = Field(
        0.05, gt=0.0, le=10.0, description="watchdog: no control tick for this long [s]"
    )
    clock_jump_threshold_s: float = Field(
        0.25,
        gt=0.0,
        le=10.0,
        description="a forward clock step between ticks larger than this drops the plan [s]",
    )
    position_min: list[float] = Field(
        default_factory=list,
        description="per-joint lower limit a chunk step must respect, none: unchecked [rad, m]",
    )
    position_max: list[float] = Field(
        default_factory=list,
        description="per-joint upper limit a chunk step must respect, none: unchecked [rad, m]",
    )
    command_limit_margin: float = Field(
        0.9,
        ge=0.0,
        le=1.0,
        description="share of the safety node's vel/acc/jerk limits the command keeps, "
        "0: unshaped [1]",
    )
    safety_params_file: str = Field(
        "",
        description="safety parameter file whose limits the command keeps to, "
        "'': config/safety.yaml",
    )
    home_positions: list[float] = Field(
        default_factory=list,
        description="per-joint pose ~/home moves to unless one came on home_pose, none: "
        "home_pose only [rad, m]",
    )
    home_limit_margin: float = Field(
        0.8,
        gt=0.0,
        le=1.0,
        description="share of the safety node's vel/acc/jerk limits a homing keeps to [1]",
    )
    home_tolerance: float = Field(
        0.02,
        gt=0.0,
        le=1.0,
        description="largest measured distance of any joint from the home pose that is homed "
        "[rad, m]",
    )
    home_settle_timeout_s: float = Field(
        2.0,
        gt=0.0,
        le=60.0,
        description="after the homing trajectory, longest wait for home_tolerance [s]",
    )
    realtime_priority: int = Field(
        50,
        ge=0,
        le=99,
        description="SCHED_FIFO priority of the control loop, 0 or refused: default scheduler",
    )

    @model_validator(mode="after")
    def _check_cross_fields(self) -> ControllerConfig:
        if len(set(self.joint_names)) != len(self.joint_names):
            raise ValueError(f"joint_names must be unique, got {self.joint_names}")
        period_s = 1.0 / self.rate_hz
        if self.dt_action_s < period_s:
            raise ValueError(
                f"dt_action_s={self.dt_action_s} must be >= the control period "
                f"1/rate_hz={period_s:.6f}"
            )
        if self.observation_timeout_s <= self.max_chunk_age_s:
            raise ValueError(
                f"observation_timeout_s={self.observation_timeout_s} must exceed "
                f"max_chunk_age_s={self.max_chunk_age_s}: the observation heartbeat is the "
                "stamp of the newest accepted chunk, which may be that old on arrival"
            )
        if self.clock_jump_threshold_s <= period_s:
            raise ValueError(
                f"clock_jump_threshold_s={self.clock_jump_threshold_s} must exceed the control "
                f"period 1/rate_hz={period_s:.6f}"
            )
        n = len(self.joint_names)
        if self.position_min or self.position_max:
            for name in ("position_min", "position_max"):
                values = getattr(self, name)
                if len(values) != n:
                    raise ValueError(
                        f"{name} has {len(values)} entries, expected {n} (one per joint) or none"
                    )
            limits = zip(self.joint_names, self.position_min, self.position_max, strict=True)
            for joint, lo, hi in limits:
                if not hi > lo:
                    raise ValueError(
                        f"joint {joint}: position_max = {hi} must exceed position_min = {lo}"
                    )
        if self.control_loop_timeout_s < period_s:
            raise ValueError(
                f"control_loop_timeout_s={self.control_loop_timeout_s} must be >= the control "
                f"period 1/rate_hz={period_s:.6f}"
            )
        if self.home_positions:
            if len(self.home_positions) != n:
                raise ValueError(
                    f"home_positions has {len(self.home_positions)} entries, expected {n} "
                    "(one per joint) or none"
                )
            lows = self.position_min or [-math.inf] * n
            highs = self.position_max or [math.inf] * n
            homes = zip(self.joint_names, self.home_positions, lows, highs, strict=True)
            for joint, value, lo, hi in homes:
                if not (math.isfinite(value) and lo <= value <= hi):
                    raise ValueError(
                        f"joint {joint}: home_positions = {value} must be finite and inside "
                        f"[position_min, position_max] = [{lo}, {hi}]"
                    )
        return self


SAFETY_LIMIT_FIELDS = (
    "position_min",
    "position_max",
    "soft_margin",
    "velocity_limit_per_s",
    "acceleration_limit_per_s2",
    "deceleration_limit_per_s2",
    "jerk_limit_per_s3",
)
"""The limits each joint of the safety configuration has (``joints.<name>.<limit>``)."""


class JointLimitsConfig(_Strict):
    """One joint's limits in the safety configuration: ``joints.<name>`` of ``safety_node``.

    Revolute joints in rad, rad/s, rad/s^2, rad/s^3; the gripper (prismatic) in m.
    """

    position_min: float = Field(allow_inf_nan=False, description="lower position limit [rad, m]")
    position_max: float = Field(allow_inf_nan=False, description="upper position limit [rad, m]")
    soft_margin: float = Field(
        ge=0.0,
        allow_inf_nan=False,
        description="margin inside the position limits the output keeps [rad, m]",
    )
    velocity_limit_per_s: float = Field(
        gt=0.0, allow_inf_nan=False, description="velocity limit [rad/s, m/s]"
    )
    acceleration_limit_per_s2: float = Field(
        gt=0.0, allow_inf_nan=False, description="acceleration limit [rad/s^2, m/s^2]"
    )
    deceleration_limit_per_s2: float = Field(
        gt=0.0, allow_inf_nan=False, description="deceleration (braking) limit [rad/s^2, m/s^2]"
    )
    jerk_limit_per_s3: float = Field(
        gt=0.0, allow_inf_nan=False, description="jerk limit [rad/s^3, m/s^3]"
    )

    @model_validator(mode="after")
    def _check_position_range(self) -> JointLimitsConfig:
        span = self.position_max - self.position_min
        if not span > 2.0 * self.soft_margin:
            raise ValueError(
                f"position_max - position_min = {self.position_max} - ({self.position_min}) "
                f"= {span} must exceed 2 * soft_margin = {2.0 * self.soft_margin}"
            )
        return self


@dataclass(frozen=True)
class SafetyLimitArrays:
    """The safety limits of some joints as arrays, one entry per joint in ``joint_names`` order."""

    joint_names: tuple[str, ...]
    position_min: np.ndarray
    position_max: np.ndarray
    soft_margin: np.ndarray
    velocity_limit_per_s: np.ndarray
    acceleration_limit_per_s2: np.ndarray
    deceleration_limit_per_s2: np.ndarray
    jerk_limit_per_s3: np.ndarray

    @property
    def soft_min(self) -> np.ndarray:
        """``position_min + soft_margin``: the lowest position the output goes to."""
        return self.position_min + self.soft_margin

    @property
    def soft_max(self) -> np.ndarray:
        """``position_max - soft_margin``: the highest position the output goes to."""
        return self.position_max - self.soft_margin


class SafetyConfig(_Strict):
    """The independent safety layer: per-joint limits, watchdogs, e-stop.

    The limits are keyed per joint, as ros2_control's joint limits are
    (``joints.<name>.<limit>`` as ROS parameters); ``joint_names`` gives the
    order of every command, and each of its joints has exactly one entry in
    ``joints``. Code that needs arrays takes them from :meth:`limit_arrays`.
    """

    joint_names: list[str] = Field(
        default_factory=lambda: list(DEFAULT_JOINT_NAMES),
        min_length=1,
        description="joints of every command, in order (revolute in rad, gripper in m)",
    )
    rate_hz: float = Field(
        100.0, gt=0.0, le=2000.0, description="output rate when commands stop (hold) [Hz]"
    )
    joints: dict[str, JointLimitsConfig] = Field(
        min_length=1,
        description="limits of each joint of joint_names, keyed by joint name",
    )
    command_timeout_s: float = Field(
        0.1, gt=0.0, le=10.0, description="command silence that is a category-1 stop [s]"
    )
    joint_state_timeout_s: float = Field(
        0.1, gt=0.0, le=10.0, description="joint-state silence that is a category-1 stop [s]"
    )
    max_tracking_error: float = Field(
        0.5,
        gt=0.0,
        le=10.0,
        description="largest measured-to-output position difference that still tracks [rad, m]",
    )
    violation_persist_count: int = Field(
        5,
        ge=1,
        le=10000,
        description="invalid commands or tracking errors in a row that are a category-1 stop",
    )
    estop_category: Literal["cat0", "cat1"] = Field(
        "cat1", description="stop category of a latched e-stop (IEC 60204-1)"
    )
    realtime_priority: int = Field(
        50,
        ge=0,
        le=99,
        description="SCHED_FIFO priority of the safety loop, 0 or refused: default scheduler",
    )

    @model_validator(mode="before")
    @classmethod
    def _refuse_parallel_lists(cls, data: Any) -> Any:
        if isinstance(data, dict) and any(name in data for name in SAFETY_LIMIT_FIELDS):
            raise FlatSafetyLimitsError(flat_limits_message(data))
        return data

    @model_validator(mode="after")
    def _check_joints(self) -> SafetyConfig:
        if len(set(self.joint_names)) != len(self.joint_names):
            raise ValueError(f"joint_names must be unique, got {self.joint_names}")
        dotted = [name for name in self.joints if "." in name or not name]
        if dotted:
            raise ValueError(
                f"joints: joint name {dotted[0]!r} must be non-empty and hold no '.' "
                "(its ROS parameters are joints.<name>.<limit>)"
            )
        missing = [name for name in self.joint_names if name not in self.joints]
        if missing:
            raise ValueError(
                f"joints has no entry for {missing} of joint_names {self.joint_names}: add "
                + ", ".join(f"joints.{name}" for name in missing)
                + ", each with "
                + ", ".join(SAFETY_LIMIT_FIELDS)
            )
        unknown = [name for name in self.joints if name not in self.joint_names]
        if unknown:
            raise ValueError(
                "joints."
                + ", joints.".join(unknown)
                + f": not in joint_names {self.joint_names}; add them there (in command "
                "order) or remove their entries"
            )
        return self

    def limit_arrays(self, joint_names: Sequence[str] | None = None) -> SafetyLimitArrays:
        """The limits of ``joint_names`` (default: this config's own) as arrays, in that order.

        Raises:
            MissingJointLimitsError: a joint of ``joint_names`` has no limits here.
        """
        names = tuple(self.joint_names if joint_names is None else joint_names)
        missing = [name for name in names if name not in self.joints]
        if missing:
            raise MissingJointLimitsError(
                f"joints {missing} have no limits in the safety configuration (it has "
                f"{list(self.joints)}): add "
                + ", ".join(f"joints.{name}" for name in missing)
                + " to the safety parameter file"
            )
        rows = [self.joints[name] for name in names]
        arrays = {
            field: np.array([getattr(row, field) for row in rows], dtype=np.float64)
            for field in SAFETY_LIMIT_FIELDS
        }
        return SafetyLimitArrays(joint_names=names, **arrays)


def _yaml_number(value: Any) -> str:
    """``value`` as YAML reads it back (``1e-05`` is a string to YAML 1.1: ``1.0e-05``)."""
    text = repr(value)
    mantissa, e, exponent = text.partition("e")
    if e and "." not in mantissa:
        text = f"{mantissa}.0e{exponent}"
    return text


def flat_limits_message(data: dict[str, Any]) -> str:
    """Why seven parallel lists of limits are refused, with the same limits keyed per joint.

    The per-joint block is built from ``data``'s own values, ready to paste in
    place of the lists (under ``ros__parameters``).
    """
    names = data.get("joint_names") or DEFAULT_JOINT_NAMES
    found = [field for field in SAFETY_LIMIT_FIELDS if field in data]
    # beside per-joint limits already there, only the lists' own values are to move
    shown = found if "joints" in data else SAFETY_LIMIT_FIELDS
    lines = ["    joints:"]
    for i, joint in enumerate(names):
        lines.append(f"      {joint}:")
        for field in shown:
            values = data.get(field)
            value = values[i] if isinstance(values, list | tuple) and i < len(values) else None
            text = "<set me>" if value is None else _yaml_number(value)
            lines.append(f"        {field}: {text}")
    action = (
        "Move the lists' values into the entries of joints:"
        if "joints" in data
        else "Replace the lists with:"
    )
    return (
        f"safety limits as parallel lists ({', '.join(found)}) are no longer read: "
        "the limits are keyed per joint under 'joints' (joint_names keeps the order of "
        f"the commands). {action}\n" + "\n".join(lines)
    )


DEFAULT_NOISE_SCALE = 0.5
"""Standard deviation of the flow-matching start noise drawn for each chunk.

The action head is trained from unit-variance noise; starting the Euler
integration from narrower noise (a lower sampling temperature) returns chunks
nearer the mode. With the bundled policy, delay 0, 50 episodes per task:
1.0 → 131/300, 0.5 → 167/300, 0.0 → 166/300 (README, "The bundled VLA").
Callers pass noise explicitly (for reproducible runs) and draw it with
``vla_edge.runners.base.start_noise``.
"""

MAX_FLOW_STEPS = 100
"""Largest number ``K`` of Euler steps of the action head, wherever ``K`` is set:
the policy config, the inference node, a torch runner, ``--flow-steps``."""


class InferenceConfig(_Strict):
    """The inference side: which runner, where its artifact is, how it is fed."""

    backend: Literal["torch", "onnx", "executorch", "remote", "expert"] = Field(
        "torch", description="runner backend (expert: the scripted expert on the sim's state)"
    )
    model_path: str = Field(
        "bundled", description="checkpoint, export directory or 'bundled' (local backends)"
    )
    threads: int = Field(2, ge=1, le=256, description="CPU threads of the runner")
    device: str = Field(
        "cpu",
        pattern=r"^(cpu|cuda(:[0-9]+)?)$",
        description="torch backend: cpu, cuda or cuda:N (a missing GPU is an error at start)",
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto",
        description="torch backend: weight dtype, auto: bfloat16 on cuda, float32 on cpu",
    )
    cuda_graphs: bool = Field(
        True, description="torch backend on cuda: replay each stage as a captured CUDA graph"
    )
    onnx_providers: list[str] = Field(
        default_factory=lambda: ["CPUExecutionProvider"],
        min_length=1,
        description="onnx backend: execution providers in order, each 'Name[;key=value...]'",
    )
    cameras: list[str] = Field(
        default_factory=lambda: ["agentview", "wrist"],
        min_length=1,
        description="cameras subscribed, camera/<name>/image_raw each",
    )
    image_height: int = Field(64, ge=8, le=2048, description="height of every camera image [px]")
    image_width: int = Field(64, ge=8, le=2048, description="width of every camera image [px]")
    instruction: str = Field(
        "", description="instruction used until one arrives on the instruction topic"
    )
    flow_steps: int = Field(
        0,
        ge=0,
        le=MAX_FLOW_STEPS,
        description="Euler steps K of the action head, 0: the model's own (an export: only its K)",
    )
    seed: int = Field(0, description="seed of the start-noise generator")
    noise_scale: float = Field(
        DEFAULT_NOISE_SCALE,
        ge=0.0,
        le=4.0,
        description="std of the flow-matching start noise, 1.0: as trained [1]",
    )
    remote_url: str = Field("ws://127.0.0.1:8000", description="policy server URL (backend remote)")
    remote_timeout_s: float = Field(
        1.0, gt=0.0, le=60.0, description="longest wait for the policy server's answer [s]"
    )
    min_period_s: float = Field(
        0.0, ge=0.0, le=60.0, description="shortest time between two inference starts [s]"
    )
    chunk_transit_s: float = Field(
        0.02,
        ge=0.0,
        le=0.5,
        description="requests stamped less than this after a chunk went out: dropped [s]",
    )
    camera_timeout_s: float = Field(
        0.5,
        gt=0.0,
        le=30.0,
        description="no frame of a newer stamp for this long: camera lost (or frozen) [s]",
    )
    camera_freeze_s: float = Field(
        0.5,
        gt=0.0,
        le=30.0,
        description="identical pixels for this long while the arm moves: camera frozen [s]",
    )
    max_camera_skew_s: float = Field(
        0.3,
        gt=0.0,
        le=10.0,
        description="largest stamp difference between the policy's cameras [s]",
    )
    clock_step_threshold_s: float = Field(
        1.0,
        gt=0.2,
        le=60.0,
        description="forward gap between two clock readings that is a step (backward: always) [s]",
    )

    @property
    def runner_flow_steps(self) -> int | None:
        """``flow_steps`` as ``make_runner`` takes it: ``None`` (the model's own K) for 0."""
        return self.flow_steps or None


class SimConfig(_Strict):
    """The MuJoCo tabletop.

    ``task`` must be a task of the suite and ``init_state_id`` one of its
    evaluation initial states (the split the sim node resets to); the suite is
    the sim's, so the sim checks them where it starts or resets the scene
    (``vla_edge.sim.tasks.check_task``), not this model.
    """

    suite: str = Field(
        "tabletop", description="task suite: tabletop, tabletop_long or tabletop_switch"
    )
    task: str = Field("pick_red_block_into_bowl", description="task of the suite the sim resets to")
    init_state_id: int = Field(
        0, ge=0, description="evaluation initial state of the task the sim resets to [index]"
    )
    sequencer: bool = Field(
        False,
        description="long-horizon tasks: one sub-task's instruction at a time, the next when "
        "it succeeds",
    )
    image_height: int = Field(64, ge=8, le=2048, description="height of every camera image [px]")
    image_width: int = Field(64, ge=8, le=2048, description="width of every camera image [px]")
    cameras: list[str] = Field(
        default_factory=lambda: ["agentview", "wrist"],
        min_length=1,
        description="cameras rendered, published on camera/<name>/image_raw",
    )
    physics_hz: float = Field(
        500.0, ge=500.0, le=10000.0, description="physics step rate of the scene [Hz]"
    )
    publish_rate_hz: float = Field(
        10.0, gt=0.0, le=1000.0, description="camera frame and sim state rate [Hz]"
    )
    joint_state_rate_hz: float = Field(
        100.0, gt=0.0, le=2000.0, description="joint state rate [Hz]"
    )
    home_on_reset: bool = Field(
        True,
        description="~/reset homes the arm to the task's initial pose first (controller's ~/home)",
    )
    home_timeout_s: float = Field(
        15.0,
        gt=0.0,
        le=300.0,
        description="longest wait of ~/reset for the controller's homed [s]",
    )
    realtime_priority: int = Field(
        45,
        ge=0,
        le=99,
        description="SCHED_FIFO priority of the stepping loop, 0 or refused: default scheduler",
    )


class FaultInjectorParams(BaseModel):
    """The fault injector node's parameters (``config/faults/fault_injector_node.yaml``)."""

    model_config = ConfigDict(extra="forbid")

    scenario: str = Field(
        "", description="scenario YAML path, or the name of one in config/faults/"
    )
    safety_params_file: str = Field(
        "", description="safety parameter file with the joint limits, '': config/safety.yaml"
    )
    dt_action_s: float = Field(
        DEFAULT_DT_ACTION_S,
        gt=0.0,
        le=1.0,
        description="time between two steps of an action chunk [s]",
    )
    poll_rate_hz: float = Field(
        100.0,
        gt=0.0,
        le=2000.0,
        description="rate of the poll that applies the fault window (frames, e-stop) [Hz]",
    )
    diagnostics_rate_hz: float = Field(10.0, gt=0.0, le=1000.0, description="diagnostics rate [Hz]")
    arm_on_first_chunk: bool = Field(
        True, description="start the episode clock at the first chunk, else on ~/arm"
    )


class FaultsConfig(_Strict):
    """The fault-injection suite."""

    suite: str = "default"
    scenario_dir: str = ""
    seed: int = 0
