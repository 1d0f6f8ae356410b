"""``ExecuTorchRunner``: an ExecuTorch export directory (XNNPACK programs) run on CPU.

Its stage programs are :class:`~vla_edge.runners.executorch_program.ExecuTorchProgram`:
importing this module does not import torch, running it does (see there why).
"""

from __future__ import annotations

from pathlib import Path

from vla_edge.runners.base import RunnerSpec
from vla_edge.runners.exported import ExportedRunner


class ExecuTorchRunner(ExportedRunner):
    """Run an export directory whose manifest says ``backend: executorch``.

    Args:
        path: export directory.
        threads: size of ExecuTorch's CPU thread pool (process-wide; XNNPACK uses it).
        seed: seed of the noise drawn when ``infer`` gets none.
        expected: refuse a manifest that differs from this spec.
    """

    backend_name = "executorch"

    def __init__(
        self,
        path: str | Path,
        threads: int | None = None,
        seed: int = 0,
        expected: RunnerSpec | None = None,
    ) -> None:
        super().__init__(path, threads=threads, seed=seed, expected=expected, backend="executorch")
