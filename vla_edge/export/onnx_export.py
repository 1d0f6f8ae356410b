"""One stage -> one ONNX program, via ``torch.onnx.export(..., dynamo=True)``.

Shapes are static (the manifest fixes them); the program is checked with
``onnx.checker`` and its real inputs and outputs are read back for the manifest.
A program whose weights exceed protobuf's 2 GB keeps them in ``<file>.data``
beside it (``external_data`` in its entry); ONNX Runtime reads them from there.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import torch

from vla_edge.export.stages import StageProgram

ONNX_OPSET = 18
OPTIMIZE_MAX_PARAMS = 200_000_000
"""onnxscript's graph rewrites run on stages up to this many parameters. Their cost grows
faster than the graph: the full-size π0 action head (18 layers), when its 10 flow steps
were unrolled in one graph, spent over 25 minutes in them. ONNX Runtime applies its own
graph optimisations when it loads a program, so a larger stage is written as traced."""


def export_stage_onnx(stage: StageProgram, path: Path, quiet: bool = True) -> dict[str, Any]:
    """Write ``stage`` to ``path`` as ONNX (fp32).

    Returns:
        ``{"exporter": "torch.onnx.dynamo", "opset": int, "nodes": int, "optimized": bool}``.
    """
    optimize = sum(p.numel() for p in stage.module.parameters()) <= OPTIMIZE_MAX_PARAMS
    sink = io.StringIO()
    redirect = contextlib.redirect_stdout(sink) if quiet else contextlib.nullcontext()
    with redirect, torch.inference_mode(False), torch.no_grad():
        program = torch.onnx.export(
            stage.module,
            stage.example_inputs,
            dynamo=True,
            input_names=stage.input_names,
            output_names=stage.output_names,
            opset_version=ONNX_OPSET,
            external_data=False,
            optimize=optimize,
            verbose=False,
        )
        program.save(str(path))
    import onnx

    # by path: a program over 2 GB keeps its weights in <file>.data beside it
    onnx.checker.check_model(str(path))
    model = onnx.load(str(path), load_external_data=False)
    details: dict[str, Any] = {
        "exporter": "torch.onnx.dynamo",
        "opset": ONNX_OPSET,
        "nodes": len(model.graph.node),
        "optimized": optimize,
    }
    data = sorted(
        {
            entry.value
            for tensor in model.graph.initializer
            for entry in tensor.external_data
            if entry.key == "location"
        }
    )
    if data:
        details["external_data"] = data
    return details
