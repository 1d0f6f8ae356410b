"""Chunk buffer, merge strategies, staleness, interpolation, watchdog, controller step."""

from vla_edge.control.chunk_buffer import Bridge, ChunkBuffer, drop_past_steps
from vla_edge.control.controller import Controller
from vla_edge.control.merge import (
    EnsembleMerge,
    MergeStrategy,
    PrefixMerge,
    ReplaceMerge,
    WeightedMerge,
    make_merge_strategy,
)
from vla_edge.control.staleness import validate_chunk
from vla_edge.control.watchdog import Watchdog

__all__ = [
    "Bridge",
    "ChunkBuffer",
    "Controller",
    "EnsembleMerge",
    "MergeStrategy",
    "PrefixMerge",
    "ReplaceMerge",
    "Watchdog",
    "WeightedMerge",
    "drop_past_steps",
    "make_merge_strategy",
    "validate_chunk",
]
