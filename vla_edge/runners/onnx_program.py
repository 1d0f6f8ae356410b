"""``OnnxProgram``: one ``.onnx`` stage run with ONNX Runtime (CPU, no torch)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vla_edge.core.errors import ManifestMismatchError

_ORT_DTYPES = {"tensor(float)": "float32", "tensor(int64)": "int64", "tensor(float16)": "float16"}


class OnnxProgram:
    """One ``.onnx`` stage in an ``InferenceSession`` (sequential, ``threads`` intra-op).

    Raises:
        ManifestMismatchError: the program's input (or output) names differ from
            ``input_names`` (``output_names``).
    """

    def __init__(
        self,
        path: Path,
        threads: int | None,
        input_names: list[str],
        output_names: list[str] | None = None,
        stage: str | None = None,
    ) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.inter_op_num_threads = 1
        if threads is not None:
            options.intra_op_num_threads = int(threads)
        self.session = ort.InferenceSession(
            str(path), sess_options=options, providers=["CPUExecutionProvider"]
        )
        stage = stage or path.stem
        names = [i.name for i in self.session.get_inputs()]
        if names != list(input_names):
            raise ManifestMismatchError(
                f"field stages.{stage}.inputs names = {list(input_names)} in manifest.json, "
                f"but program {path.name} takes {names}"
            )
        outputs = [o.name for o in self.session.get_outputs()]
        if output_names is not None and outputs != list(output_names):
            raise ManifestMismatchError(
                f"field stages.{stage}.outputs names = {list(output_names)} in manifest.json, "
                f"but program {path.name} returns {outputs}"
            )
        self._input_names = names
        self._output_names = outputs

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """Every output for ``inputs`` (in the manifest's order)."""
        feeds = dict(zip(self._input_names, inputs, strict=True))
        return list(self.session.run(self._output_names, feeds))

    def io(self) -> tuple[list[tuple[tuple[int, ...], str]], list[tuple[tuple[int, ...], str]]]:
        """``(shape, dtype)`` of the session's inputs and outputs."""

        def spec(args: list) -> list[tuple[tuple[int, ...], str]]:
            return [(tuple(int(s) for s in a.shape), _ORT_DTYPES.get(a.type, a.type)) for a in args]

        return spec(self.session.get_inputs()), spec(self.session.get_outputs())
