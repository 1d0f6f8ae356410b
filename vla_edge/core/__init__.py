"""Plain data types shared by every layer (numpy only)."""

from vla_edge.core.errors import (
    ChunkRejectedError,
    ConfigError,
    EmptyChunkError,
    FutureChunkError,
    InvalidActionError,
    InvalidCommandError,
    InvalidObservationError,
    JointMismatchError,
    ManifestMismatchError,
    NonFiniteChunkError,
    NonMonotonicChunkError,
    StaleChunkError,
    VlaEdgeError,
)
from vla_edge.core.stop import StopCategory
from vla_edge.core.types import ActionChunk, JointCommand, Observation

__all__ = [
    "ActionChunk",
    "ChunkRejectedError",
    "ConfigError",
    "EmptyChunkError",
    "FutureChunkError",
    "InvalidActionError",
    "InvalidCommandError",
    "InvalidObservationError",
    "JointCommand",
    "JointMismatchError",
    "ManifestMismatchError",
    "NonFiniteChunkError",
    "NonMonotonicChunkError",
    "Observation",
    "StaleChunkError",
    "StopCategory",
    "VlaEdgeError",
]
