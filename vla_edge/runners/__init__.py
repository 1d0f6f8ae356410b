"""One ``Runner`` protocol, several backends (torch, onnxruntime, executorch, remote, expert)."""

from vla_edge.runners.base import Runner, RunnerSpec

__all__ = ["Runner", "RunnerSpec"]
