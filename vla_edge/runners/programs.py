"""One exported stage program behind a backend-neutral seam.

:class:`~vla_edge.runners.exported.ExportedRunner` opens each stage with the
runtime its manifest entry names (the language stage may run on another
backend than the policy), through :func:`open_program`. Each runtime lives in
its own module and is imported only when a stage needs it, so opening ONNX
programs never imports ExecuTorch (or torch).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from vla_edge.core.errors import ManifestMismatchError


class StageProgram(Protocol):
    """One loaded program: fixed-shape numpy inputs in, every output out (in order)."""

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """Run once."""
        ...

    def io(self) -> tuple[list[tuple[tuple[int, ...], str]], list[tuple[tuple[int, ...], str]]]:
        """``(shape, numpy dtype name)`` of every input and output."""
        ...


def open_program(
    backend: str,
    path: Path,
    threads: int | None,
    names: list[str],
    output_names: list[str] | None = None,
    stage: str | None = None,
    providers: Sequence[str] | None = None,
) -> StageProgram:
    """Open ``path`` with the runtime of ``backend`` (imported only when needed).

    ``names`` / ``output_names``: the manifest's input and output names (an ONNX
    program's own are checked against them); ``stage`` names the stage in errors.
    ``providers``: ONNX Runtime execution providers, each ``'Name[;key=value...]'``
    (:func:`~vla_edge.runners.onnx_program.parse_providers`; ``None``: the CPU);
    an ExecuTorch stage has no use for them and ignores them.

    Raises:
        ManifestMismatchError: ``backend`` names no runtime, or the program's
            tensor names differ from the manifest's.
        ExecutionProviderError: an ONNX stage's ``providers`` are malformed,
            missing from the onnxruntime build, or failed to initialise.
    """
    if backend == "onnx":
        from vla_edge.runners.onnx_program import OnnxProgram

        return OnnxProgram(
            path,
            threads=threads,
            input_names=names,
            output_names=output_names,
            stage=stage,
            providers=providers,
        )
    if backend == "executorch":
        from vla_edge.runners.executorch_program import ExecuTorchProgram

        return ExecuTorchProgram(path, threads=threads)
    raise ManifestMismatchError(
        f"field stages.{stage or path.stem}.backend = {backend!r}: expected 'onnx' or 'executorch'"
    )
