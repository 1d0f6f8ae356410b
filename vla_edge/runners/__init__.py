"""One ``Runner`` protocol, several backends (torch, onnxruntime, executorch, remote).

The scripted expert is a runner too, but it reads the simulator's state: it lives in
:mod:`vla_edge.sim.expert_runner`.
"""

from vla_edge.runners.base import Runner, RunnerSpec

__all__ = ["Runner", "RunnerSpec"]
