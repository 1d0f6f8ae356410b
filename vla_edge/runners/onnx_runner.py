"""``OnnxRunner``: an ONNX export directory run with ONNX Runtime (no torch).

Its stage programs are :class:`~vla_edge.runners.onnx_program.OnnxProgram`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from vla_edge.runners.base import RunnerSpec
from vla_edge.runners.exported import ExportedRunner


class OnnxRunner(ExportedRunner):
    """Run an export directory whose manifest says ``backend: onnx``.

    Args:
        path: export directory.
        threads: ONNX Runtime intra-op threads per session.
        providers: execution providers in priority order, each
            ``'Name[;key=value...]'`` (``InferenceConfig.onnx_providers``;
            ``None``: the CPU). A provider this onnxruntime build lacks, or one
            that fails to initialise, is an ``ExecutionProviderError``.
        seed: seed of the noise drawn when ``infer`` gets none.
        expected: refuse a manifest that differs from this spec.
    """

    backend_name = "onnx"

    def __init__(
        self,
        path: str | Path,
        threads: int | None = None,
        providers: Sequence[str] | None = None,
        seed: int = 0,
        expected: RunnerSpec | None = None,
    ) -> None:
        super().__init__(
            path,
            threads=threads,
            seed=seed,
            expected=expected,
            backend="onnx",
            providers=providers,
        )
