"""Pydantic models for every component.

Units are SI and part of each field name. Per-joint lists follow the order of
``joint_names``: revolute joints in rad, the gripper (prismatic) in m.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

DEFAULT_JOINT_NAMES = ["joint1", "joint2", "joint3", "joint4", "joint5", "joint6", "gripper"]

MergeName = Literal["replace", "weighted", "ensemble", "prefix"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class ControllerConfig(_Strict):
    """The real-time controller: chunk buffer, merge, sampling, watchdog."""

    joint_names: list[str] = Field(default_factory=lambda: list(DEFAULT_JOINT_NAMES), min_length=1)
    rate_hz: float = Field(100.0, gt=0.0, le=2000.0)
    dt_action_s: float = Field(0.1, gt=0.0, le=1.0)
    chunk_horizon: int = Field(10, ge=1, le=512)
    max_chunk_age_s: float = Field(0.5, gt=0.0, le=10.0)
    max_future_s: float = Field(0.05, ge=0.0, le=1.0)
    merge: MergeName = "ensemble"
    weighted_old_weight: float = Field(0.3, ge=0.0, le=1.0)
    ensemble_decay: float = Field(0.01, ge=0.0, le=10.0)
    interpolation: Literal["linear", "cubic"] = "cubic"
    bridge_duration_s: float = Field(0.2, ge=0.0, le=5.0)
    hold_ramp_s: float = Field(0.2, gt=0.0, le=5.0)
    infer_trigger: Literal["continuous", "threshold"] = "threshold"
    threshold_fraction: float = Field(0.5, gt=0.0, le=1.0)
    expected_inference_delay_s: float = Field(0.1, ge=0.0, le=5.0)
    observation_timeout_s: float = Field(1.0, gt=0.0, le=30.0)
    joint_state_timeout_s: float = Field(0.1, gt=0.0, le=30.0)
    chunk_timeout_s: float = Field(1.0, gt=0.0, le=60.0)
    control_loop_timeout_s: float = Field(0.05, gt=0.0, le=10.0)
    clock_jump_threshold_s: float = Field(0.25, gt=0.0, le=10.0)
    position_min: list[float] = Field(default_factory=list)
    position_max: list[float] = Field(default_factory=list)
    # SCHED_FIFO priority of the controller node's loop thread (0 = default scheduler);
    # refused without the privilege, then the loop runs under the default scheduler.
    realtime_priority: int = Field(50, ge=0, le=99)

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
        return self


class SafetyConfig(_Strict):
    """The independent safety layer: per-joint limits, watchdogs, e-stop."""

    joint_names: list[str] = Field(default_factory=lambda: list(DEFAULT_JOINT_NAMES), min_length=1)
    rate_hz: float = Field(100.0, gt=0.0, le=2000.0)
    position_min: list[float]
    position_max: list[float]
    soft_margin: list[float]
    velocity_limit_per_s: list[float]
    acceleration_limit_per_s2: list[float]
    deceleration_limit_per_s2: list[float]
    jerk_limit_per_s3: list[float]
    command_timeout_s: float = Field(0.1, gt=0.0, le=10.0)
    joint_state_timeout_s: float = Field(0.1, gt=0.0, le=10.0)
    max_tracking_error: float = Field(0.5, gt=0.0, le=10.0)
    violation_persist_count: int = Field(5, ge=1, le=10000)
    estop_category: Literal["cat0", "cat1"] = "cat1"
    # SCHED_FIFO priority of the safety node's loop thread (0 = default scheduler);
    # refused without the privilege, then the loop runs under the default scheduler.
    realtime_priority: int = Field(50, ge=0, le=99)

    @model_validator(mode="after")
    def _check_per_joint(self) -> SafetyConfig:
        n = len(self.joint_names)
        if len(set(self.joint_names)) != n:
            raise ValueError(f"joint_names must be unique, got {self.joint_names}")
        for name in (
            "position_min",
            "position_max",
            "soft_margin",
            "velocity_limit_per_s",
            "acceleration_limit_per_s2",
            "deceleration_limit_per_s2",
            "jerk_limit_per_s3",
        ):
            values = getattr(self, name)
            if len(values) != n:
                raise ValueError(f"{name} has {len(values)} entries, expected {n} (one per joint)")
            if name != "position_min" and name != "position_max":
                bad = [v for v in values if not v >= (0.0 if name == "soft_margin" else 1e-12)]
                if bad:
                    raise ValueError(f"{name} must be positive, got {bad[0]}")
        for i, joint in enumerate(self.joint_names):
            lo, hi, margin = self.position_min[i], self.position_max[i], self.soft_margin[i]
            if not hi - lo > 2.0 * margin:
                raise ValueError(
                    f"joint {joint}: position_max - position_min = {hi - lo} must exceed "
                    f"2 * soft_margin = {2.0 * margin}"
                )
        return self


DEFAULT_NOISE_SCALE = 0.5
"""Standard deviation of the flow-matching start noise drawn for each chunk.

The action head is trained from unit-variance noise; starting the Euler
integration from narrower noise (a lower sampling temperature) returns chunks
nearer the mode. With the bundled policy, delay 0, 50 episodes per task:
1.0 → 131/300, 0.5 → 167/300, 0.0 → 166/300 (README, "The bundled VLA").
Callers pass noise explicitly (for reproducible runs) and draw it with
``vla_edge.runners.base.start_noise``.
"""


class InferenceConfig(_Strict):
    """The inference side: which runner, where its artifact is, how it is fed."""

    backend: Literal["torch", "onnx", "executorch", "remote", "expert"] = "torch"
    model_path: str = "bundled"
    threads: int = Field(2, ge=1, le=256)
    cameras: list[str] = Field(default_factory=lambda: ["agentview", "wrist"], min_length=1)
    image_height: int = Field(64, ge=8, le=2048)
    image_width: int = Field(64, ge=8, le=2048)
    instruction: str = ""
    # Euler steps K of the action head; 0: the model's own (checkpoint config or
    # export manifest). An export accepts only the K it was exported with.
    flow_steps: int = Field(0, ge=0, le=100)
    seed: int = 0
    # std of the flow-matching start noise (1.0: as trained; README, "The bundled VLA")
    noise_scale: float = Field(DEFAULT_NOISE_SCALE, ge=0.0, le=4.0)
    remote_url: str = "ws://127.0.0.1:8000"
    remote_timeout_s: float = Field(1.0, gt=0.0, le=60.0)
    min_period_s: float = Field(0.0, ge=0.0, le=60.0)
    # Per-camera health (vla_edge/inference/camera_health.py): a camera with no frame of a
    # newer stamp for camera_timeout_s is lost (or frozen when frames still arrive), one
    # whose pixels stay identical for camera_freeze_s while the scene moves is frozen, and
    # the policy's cameras may disagree in stamp by at most max_camera_skew_s.
    camera_timeout_s: float = Field(0.5, gt=0.0, le=30.0)
    camera_freeze_s: float = Field(0.5, gt=0.0, le=30.0)
    max_camera_skew_s: float = Field(0.3, gt=0.0, le=10.0)
    # A forward gap between two readings of the node's clock larger than this is a clock
    # step (readings come at least every worker poll, 0.2 s); a backward one always is.
    clock_step_threshold_s: float = Field(1.0, gt=0.2, le=60.0)

    @property
    def runner_flow_steps(self) -> int | None:
        """``flow_steps`` as ``make_runner`` takes it: ``None`` (the model's own K) for 0."""
        return self.flow_steps or None


class SimConfig(_Strict):
    """The MuJoCo tabletop.

    ``task`` must be a task of the suite and ``init_state_id`` one of its
    evaluation initial states (the split the sim node resets to).
    """

    suite: str = "tabletop"
    task: str = "pick_red_block_into_bowl"
    init_state_id: int = Field(0, ge=0)
    image_height: int = Field(64, ge=8, le=2048)
    image_width: int = Field(64, ge=8, le=2048)
    cameras: list[str] = Field(default_factory=lambda: ["agentview", "wrist"], min_length=1)
    physics_hz: float = Field(500.0, ge=500.0, le=10000.0)
    publish_rate_hz: float = Field(10.0, gt=0.0, le=1000.0)
    joint_state_rate_hz: float = Field(100.0, gt=0.0, le=2000.0)
    # SCHED_FIFO priority of the sim node's stepping loop (it stands in for the robot's
    # hardware loop; 0 = default scheduler); refused without the privilege.
    realtime_priority: int = Field(45, ge=0, le=99)

    @field_validator("task")
    @classmethod
    def _check_task(cls, task: str, info: ValidationInfo) -> str:
        from vla_edge.sim.tasks import list_tasks

        tasks = list_tasks()
        if info.data.get("suite") == "tabletop" and task not in tasks:
            raise ValueError(f"not a tabletop task; allowed: {tasks}")
        return task

    @field_validator("init_state_id")
    @classmethod
    def _check_init_state_id(cls, init_state_id: int) -> int:
        from vla_edge.sim.tasks import N_EVAL_INIT_STATES

        if not init_state_id < N_EVAL_INIT_STATES:
            raise ValueError(
                f"out of range: every task has evaluation initial states "
                f"0..{N_EVAL_INIT_STATES - 1}"
            )
        return init_state_id


class FaultInjectorParams(BaseModel):
    """The fault injector node's parameters (``config/faults/fault_injector_node.yaml``)."""

    model_config = ConfigDict(extra="forbid")

    # scenario YAML path, or the name of one under config/faults/
    scenario: str = ""
    # safety parameter file giving the joint limits (default: config/safety.yaml)
    safety_params_file: str = ""
    dt_action_s: float = Field(0.1, gt=0.0, le=1.0)
    poll_rate_hz: float = Field(100.0, gt=0.0, le=2000.0)
    diagnostics_rate_hz: float = Field(10.0, gt=0.0, le=1000.0)
    arm_on_first_chunk: bool = True


class FaultsConfig(_Strict):
    """The fault-injection suite."""

    suite: str = "default"
    scenario_dir: str = ""
    seed: int = 0
