"""Fault scenarios: what is injected, when, and which safety response is expected.

A scenario is one YAML file under ``config/faults/``::

    name: camera_drop
    description: the agentview camera stops publishing for 2 s
    fault: camera_drop
    start_s: 1.5
    duration_s: 2.0
    params: {}
    expected:
      stop_category: cat1
      max_detect_s: 0.7
      max_halt_s: 1.5
      task_may_succeed: true
      must_recover: true

``params`` is validated by the model of the fault type (:data:`PARAMS_MODELS`),
so a typo or an out-of-range value fails at load time with the field named.
Suites are listed in ``config/faults/suites.yaml`` (suite name -> scenario names).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from vla_edge.config.loader import format_validation_error, load_yaml_file
from vla_edge.config.paths import share_dir
from vla_edge.core.errors import ConfigError
from vla_edge.core.stop import StopCategory

FaultType = Literal[
    "none",
    "camera_delay",
    "camera_freeze",
    "camera_drop",
    "camera_stamp_skew",
    "joint_state_loss",
    "inference_slowdown",
    "cpu_cap",
    "inference_crash",
    "controller_crash",
    "chunk_nan",
    "chunk_out_of_limits",
    "chunk_jump",
    "chunk_stamp_shift",
    "clock_jump",
    "estop",
]

SUITES_FILE = "suites.yaml"
# Files in config/faults that are not scenarios.
NON_SCENARIO_FILES = frozenset({SUITES_FILE, "fault_injector_node.yaml"})
CAMERA_FAULTS = frozenset({"camera_delay", "camera_freeze", "camera_drop", "camera_stamp_skew"})
CHUNK_FAULTS = frozenset({"chunk_nan", "chunk_out_of_limits", "chunk_jump", "chunk_stamp_shift"})


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _NonZeroOffset(_Strict):
    """Parameters with an ``offset_s`` that must not be 0 (a shift of nothing is no fault)."""

    @field_validator("offset_s", check_fields=False)
    @classmethod
    def _nonzero(cls, offset_s: float) -> float:
        if offset_s == 0.0:
            raise ValueError("offset_s = 0.0: the offset must be non-zero")
        return offset_s


class NoParams(_Strict):
    """A fault without parameters (drop, freeze, joint-state loss, crash, e-stop)."""


class CameraDelayParams(_Strict):
    """Frames reach their consumers ``delay_s`` after capture (stamps unchanged)."""

    delay_s: float = Field(gt=0.0, le=10.0)
    cameras: list[str] = Field(default_factory=lambda: ["agentview", "wrist"], min_length=1)


class CameraParams(_Strict):
    """Which cameras a drop affects."""

    cameras: list[str] = Field(default_factory=lambda: ["agentview", "wrist"], min_length=1)


class CameraFreezeParams(CameraParams):
    """Which cameras freeze, and how the driver repeats the last frame.

    ``restamp = false``: the same frame again (same stamp, same pixels);
    ``true``: the same pixels under a fresh stamp (a stuck sensor behind a live driver).
    """

    restamp: bool = False


class CameraSkewParams(CameraParams, _NonZeroOffset):
    """The cameras' stamps are moved by ``offset_s`` (a camera clock off by that much)."""

    offset_s: float = Field(ge=-10.0, le=10.0)


class SlowdownParams(_Strict):
    """Inference takes ``factor`` times as long (a CPU cap emulated by throttling)."""

    factor: float = Field(gt=1.0, le=100.0)


class CpuCapParams(_Strict):
    """A real CPU cap: the inference process is pinned to ``cpus`` cores."""

    cpus: int = Field(1, ge=1, le=1024)


class CrashParams(_Strict):
    """A process dies; it is respawned after the fault window when ``respawn``."""

    respawn: bool = True


class ChunkJointParams(_Strict):
    """Chunk corruption on one joint (by index into ``joint_names``)."""

    joint_index: int = Field(0, ge=0, le=63)
    first_step: int = Field(0, ge=0, le=511)


class OutOfLimitsParams(ChunkJointParams):
    """Targets ``beyond_limit`` past ``position_max`` of the joint."""

    beyond_limit: float = Field(gt=0.0, le=100.0)


class JumpParams(ChunkJointParams):
    """Targets offset by ``delta`` (rad or m) from the policy's output."""

    delta: float = Field(ge=-10.0, le=10.0)


class StampShiftParams(_NonZeroOffset):
    """Chunk stamps moved by ``offset_s`` (positive = from the future)."""

    offset_s: float = Field(ge=-1.0e6, le=1.0e6)


class ClockJumpParams(_NonZeroOffset):
    """The system clock steps by ``offset_s`` at the fault start (and stays stepped)."""

    offset_s: float = Field(ge=-1.0e6, le=1.0e6)


class EStopParams(_Strict):
    """E-stop pressed at the fault start; reset at the end when ``reset``."""

    reset: bool = True


PARAMS_MODELS: dict[str, type[BaseModel]] = {
    "none": NoParams,
    "camera_delay": CameraDelayParams,
    "camera_freeze": CameraFreezeParams,
    "camera_drop": CameraParams,
    "camera_stamp_skew": CameraSkewParams,
    "joint_state_loss": NoParams,
    "inference_slowdown": SlowdownParams,
    "cpu_cap": CpuCapParams,
    "inference_crash": CrashParams,
    "controller_crash": CrashParams,
    "chunk_nan": ChunkJointParams,
    "chunk_out_of_limits": OutOfLimitsParams,
    "chunk_jump": JumpParams,
    "chunk_stamp_shift": StampShiftParams,
    "clock_jump": ClockJumpParams,
    "estop": EStopParams,
}


class ExpectedResponse(_Strict):
    """The response the safety design (ARCHITECTURE.md, stop-category table) requires.

    Attributes:
        stop_category: the most severe stop the fault must cause (``none``: the
            system must ride through without stopping).
        also_accept: other categories that count as a pass (e.g. ``none`` for a
            real CPU cap whose effect depends on the machine).
        max_detect_s: bound on the time from the fault start to the first
            controller/safety state that reflects it (required when a stop is).
        max_halt_s: bound on the time from the fault start to the arm standing
            still (joint speed below the halt threshold).
        stays_halted: once halted, the arm stays still until the fault clears.
        task_may_succeed: whether the task can still succeed with this fault.
        must_succeed: the task must still succeed (mild faults).
        must_recover: after the fault clears, the system returns to normal
            operation (no stop, executing fresh chunks) within ``recover_within_s``.
        recover_within_s: bound for ``must_recover``.
    """

    stop_category: StopCategory
    also_accept: list[StopCategory] = Field(default_factory=list)
    max_detect_s: float | None = Field(None, gt=0.0, le=60.0)
    max_halt_s: float | None = Field(None, gt=0.0, le=60.0)
    stays_halted: bool = False
    task_may_succeed: bool = True
    must_succeed: bool = False
    must_recover: bool = False
    recover_within_s: float = Field(2.0, gt=0.0, le=60.0)

    @model_validator(mode="after")
    def _check(self) -> ExpectedResponse:
        if self.stop_category != StopCategory.NONE and self.max_detect_s is None:
            raise ValueError(
                f"stop_category = {self.stop_category.value} needs max_detect_s "
                "(a stop must be detected within a bound)"
            )
        if self.must_succeed and not self.task_may_succeed:
            raise ValueError("must_succeed = true contradicts task_may_succeed = false")
        return self

    def accepts(self, category: StopCategory) -> bool:
        """Whether ``category`` (the worst observed) matches this expectation."""
        return category == self.stop_category or category in self.also_accept


class FaultScenario(_Strict):
    """One fault scenario (see the module docstring for the YAML shape).

    Attributes:
        name: unique key, the file's stem.
        description: one line for reports.
        fault: the fault type (:data:`FaultType`).
        start_s: fault start, seconds after the episode start.
        duration_s: fault length; ``None`` = until the end of the episode.
        params: fault parameters, validated by ``PARAMS_MODELS[fault]``.
        expected: the required response.
        episode_s: episode length for this scenario (virtual time).
        task: task run under the fault (``None`` = the suite's default).
        ros: whether the scenario is part of the ROS-level subset.
    """

    name: str = Field(min_length=1, pattern=r"^[a-z0-9_]+$")
    description: str = ""
    fault: FaultType
    start_s: float = Field(ge=0.0, le=3600.0)
    duration_s: float | None = Field(None, gt=0.0, le=3600.0)
    params: dict[str, Any] = Field(default_factory=dict)
    expected: ExpectedResponse
    episode_s: float = Field(6.0, gt=0.0, le=3600.0)
    task: str | None = None
    ros: bool = False

    @model_validator(mode="after")
    def _check(self) -> FaultScenario:
        model = PARAMS_MODELS[self.fault]
        try:
            model.model_validate(self.params)
        except ValidationError as exc:
            raise ValueError(
                format_validation_error(exc, f"params of fault {self.fault!r}").replace("\n", "; ")
            ) from None
        if self.end_s is not None and self.end_s > self.episode_s:
            raise ValueError(
                f"start_s + duration_s = {self.end_s} exceeds episode_s = {self.episode_s}"
            )
        if self.start_s >= self.episode_s:
            raise ValueError(f"start_s = {self.start_s} must be < episode_s = {self.episode_s}")
        if self.expected.must_recover and self.end_s is None:
            raise ValueError("expected.must_recover = true needs a finite duration_s")
        return self

    @property
    def end_s(self) -> float | None:
        """When the fault clears (``None``: never)."""
        return None if self.duration_s is None else self.start_s + self.duration_s

    def typed_params(self) -> BaseModel:
        """``params`` as the model of the fault type."""
        return PARAMS_MODELS[self.fault].model_validate(self.params)

    def active(self, t_s: float) -> bool:
        """Whether the fault is active at episode time ``t_s``."""
        end = self.end_s
        return t_s >= self.start_s and (end is None or t_s < end)


def camera_names(scenario: FaultScenario) -> list[str]:
    """Cameras a camera fault affects (empty for other faults)."""
    if scenario.fault not in CAMERA_FAULTS:
        return []
    params = scenario.typed_params()
    assert isinstance(params, CameraParams | CameraDelayParams)
    return list(params.cameras)


def faults_dir() -> Path:
    """``config/faults`` of the source tree or ``share/vla_edge``."""
    return share_dir() / "config" / "faults"


def load_scenario(path: str | Path) -> FaultScenario:
    """Load and validate one scenario file.

    Raises:
        ConfigError: unreadable file or invalid field (message names file, field, value).
    """
    path = Path(path)
    data = load_yaml_file(path)
    try:
        scenario = FaultScenario.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, str(path))) from exc
    if scenario.name != path.stem:
        raise ConfigError(
            f"{path}: name = {scenario.name!r} must equal the file stem {path.stem!r}"
        )
    return scenario


def load_all(directory: str | Path | None = None) -> dict[str, FaultScenario]:
    """Every scenario in ``directory`` (default :func:`faults_dir`), by name."""
    root = Path(directory) if directory is not None else faults_dir()
    if not root.is_dir():
        raise ConfigError(f"scenario directory {root} not found")
    paths = sorted(p for p in root.glob("*.yaml") if p.name not in NON_SCENARIO_FILES)
    return {p.stem: load_scenario(p) for p in paths}


def suite_names(directory: str | Path | None = None) -> dict[str, list[str]]:
    """``suites.yaml``: suite name -> scenario names."""
    root = Path(directory) if directory is not None else faults_dir()
    data = load_yaml_file(root / SUITES_FILE)
    suites: dict[str, list[str]] = {}
    for name, members in data.items():
        if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
            raise ConfigError(f"{root / SUITES_FILE}: {name} must be a list of scenario names")
        suites[str(name)] = list(members)
    return suites


def load_suite(
    suite: str = "default",
    names: list[str] | None = None,
    directory: str | Path | None = None,
) -> list[FaultScenario]:
    """The scenarios of ``suite`` (or exactly ``names`` when given), in suite order.

    Raises:
        ConfigError: unknown suite or scenario name (the message lists the known ones).
    """
    scenarios = load_all(directory)
    if names:
        wanted = list(names)
    else:
        suites = suite_names(directory)
        if suite not in suites:
            raise ConfigError(f"suite = {suite!r} unknown; known suites: {sorted(suites)}")
        wanted = suites[suite]
    missing = [n for n in wanted if n not in scenarios]
    if missing:
        raise ConfigError(f"scenario(s) {missing} not found; known scenarios: {sorted(scenarios)}")
    return [scenarios[n] for n in wanted]
