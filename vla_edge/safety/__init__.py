"""The independent safety core: validation, limiter, e-stop latch, stop state machine."""

from vla_edge.safety.estop import EStopLatch
from vla_edge.safety.limiter import JointLimits, Limiter
from vla_edge.safety.state_machine import SafetyStateMachine
from vla_edge.safety.status import StatusLevel, level_for
from vla_edge.safety.supervisor import SafetySupervisor
from vla_edge.safety.validation import validate_command

__all__ = [
    "EStopLatch",
    "JointLimits",
    "Limiter",
    "SafetyStateMachine",
    "SafetySupervisor",
    "StatusLevel",
    "level_for",
    "validate_command",
]
