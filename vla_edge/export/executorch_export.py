"""One stage -> one ExecuTorch program lowered to XNNPACK (fp32 or 8da4w).

* ``fp32``: ``torch.export`` -> ``to_edge_transform_and_lower`` with the
  XNNPACK partitioner -> ``.pte``.
* ``8da4w``: before export, every ``nn.Linear`` whose input width is a
  multiple of the group size gets int8 dynamic activations and int4 weights
  in groups of ``GROUP_SIZE`` (torchao ``Int8DynamicActivationIntxWeightConfig``),
  which XNNPACK runs as one fused kernel. Every ``nn.Embedding`` (MiniLM's
  30522-row word table is half of the language program) becomes int8 with one
  fp32 scale per row (:class:`Int8RowEmbedding`): the rows are gathered as
  int8 and only the gathered rows are dequantised. Every ``nn.Conv2d`` (the
  vision encoder's trunk) becomes static int8 — symmetric per-output-channel
  weights, per-tensor activations observed on calibration frames (PT2E with
  the XNNPACK quantizer, convolutions only) — which XNNPACK runs as its
  quantised convolution; norms and everything between stay fp32. Dynamic int8
  convolutions lower but fail in ExecuTorch 1.5's runtime ("Propagating input
  shapes failed"), hence the calibration.

Norms and attention are first rewritten with ops XNNPACK takes
(:mod:`vla_edge.export.xnnpack_rewrites`), so each stage lowers to few
delegate calls. The delegated and non-delegated node counts per stage come from
``executorch.devtools.backend_debug.get_delegation_info`` and go into the
manifest; the operators left outside XNNPACK are listed by name.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from vla_edge.core.errors import ConfigError
from vla_edge.export.stages import StageProgram

GROUP_SIZE = 32


def quantize_8da4w(
    module: nn.Module, group_size: int = GROUP_SIZE, in_place: bool = False
) -> tuple[nn.Module, int, int]:
    """``module`` with its eligible ``Linear`` layers in 8da4w (a copy unless ``in_place``).

    Returns:
        The quantised module, the number of quantised and of skipped ``Linear`` layers.
    """
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerGroup

    quantized = (module if in_place else copy.deepcopy(module)).eval()
    linears = [m for m in quantized.modules() if isinstance(m, nn.Linear)]
    eligible = sum(1 for m in linears if m.in_features % group_size == 0)

    def is_eligible(mod: nn.Module, fqn: str) -> bool:
        del fqn
        return isinstance(mod, nn.Linear) and mod.in_features % group_size == 0

    config = Int8DynamicActivationIntxWeightConfig(
        weight_dtype=torch.int4, weight_granularity=PerGroup(group_size)
    )
    quantize_(quantized, config, filter_fn=is_eligible)
    return quantized, eligible, len(linears) - eligible


class Int8RowEmbedding(nn.Module):
    """``nn.Embedding`` with symmetric int8 rows and one fp32 scale per row (same maths)."""

    def __init__(self, embedding: nn.Embedding) -> None:
        super().__init__()
        weight = embedding.weight.detach().float()
        scale = weight.abs().amax(dim=1, keepdim=True).clamp_min(1e-12) / 127.0
        qweight = torch.round(weight / scale).clamp(-127, 127).to(torch.int8)
        self.register_buffer("qweight", qweight)
        self.register_buffer("scale", scale)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Rows ``ids`` of the table, dequantised after the gather."""
        return F.embedding(ids, self.qweight).to(torch.float32) * F.embedding(ids, self.scale)


def quantize_embeddings_int8(module: nn.Module) -> tuple[nn.Module, int]:
    """``module`` (edited in place) with every ``nn.Embedding`` as :class:`Int8RowEmbedding`."""
    count = 0
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Embedding):
                setattr(parent, name, Int8RowEmbedding(child))
                count += 1
    return module, count


def count_convs(module: nn.Module) -> int:
    """Number of ``nn.Conv2d`` layers in ``module``."""
    return sum(1 for m in module.modules() if isinstance(m, nn.Conv2d))


def quantize_convs_int8(
    module: nn.Module,
    example_inputs: tuple[torch.Tensor, ...],
    calibration: list[tuple[torch.Tensor, ...]],
) -> nn.Module:
    """``module`` as a graph whose convolutions are static int8 (see the module docstring).

    Args:
        module: the (possibly already 8da4w) stage.
        example_inputs: the export's example inputs (shapes).
        calibration: inputs like ``example_inputs`` that the activation
            observers see (real frames; random pixels would misplace the ranges).

    Raises:
        ConfigError: no calibration inputs.
    """
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    if not calibration:
        raise ConfigError("int8 convolutions need calibration inputs, got none")
    quantizer = XNNPACKQuantizer().set_operator_type(
        torch.ops.aten.conv2d.default, get_symmetric_quantization_config(is_per_channel=True)
    )
    graph = torch.export.export(module, example_inputs, strict=False).module()
    prepared = prepare_pt2e(graph, quantizer)
    with torch.no_grad():
        for inputs in calibration:
            prepared(*inputs)
    return convert_pt2e(prepared)


def export_stage_executorch(
    stage: StageProgram,
    path: Path,
    quant: str,
    calibration: list[tuple[torch.Tensor, ...]] | None = None,
    *,
    in_place: bool = False,
) -> dict[str, Any]:
    """Lower ``stage`` to XNNPACK and write the ``.pte`` program.

    ``calibration`` (8da4w only): inputs for the int8 convolutions' activation
    ranges; without it a stage's convolutions stay fp32. ``in_place``: rewrite
    and quantise ``stage.module`` itself, not a copy (it is unusable afterwards).

    Returns:
        ``{"delegation": {"delegated_subgraphs", "delegated_nodes",
        "non_delegated_nodes", "non_delegated_ops": {op: count}},
        "quantized_linears", "fp32_linears", "int8_embeddings", "int8_convs",
        "fp32_convs", "calibration_inputs", "rewritten_for_xnnpack"}``.
    """
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.devtools.backend_debug import get_delegation_info
    from executorch.exir import to_edge_transform_and_lower

    from vla_edge.export.xnnpack_rewrites import rewrite_for_xnnpack

    module, rewrites = rewrite_for_xnnpack(stage.module.eval(), in_place=in_place)
    quantized, skipped = 0, sum(1 for m in module.modules() if isinstance(m, nn.Linear))
    embeddings = 0
    convs = count_convs(module)
    int8_convs = 0
    if quant == "8da4w":
        # the rewrite above already copied the module unless in_place
        module, quantized, skipped = quantize_8da4w(module, in_place=True)
        module, embeddings = quantize_embeddings_int8(module)
        if convs and calibration:
            module = quantize_convs_int8(module, stage.example_inputs, calibration)
            int8_convs = convs
    with torch.no_grad():
        exported = torch.export.export(module, stage.example_inputs, strict=False)
        edge = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
        info = get_delegation_info(edge.exported_program().graph_module)
        program = edge.to_executorch()
    path.write_bytes(program.buffer)
    return {
        "delegation": delegation_summary(info),
        "quantized_linears": quantized,
        "fp32_linears": skipped,
        "int8_embeddings": embeddings,
        "int8_convs": int8_convs,
        "fp32_convs": convs - int8_convs,
        "calibration_inputs": len(calibration or []) if int8_convs else 0,
        "rewritten_for_xnnpack": rewrites,
    }


def delegation_summary(info: Any) -> dict[str, Any]:
    """Counts from a ``DelegationInfo`` plus the operators left outside XNNPACK."""
    frame = info.get_operator_delegation_dataframe()
    non_delegated = {}
    for row in frame.itertuples(index=False):
        op, count = str(row[0]), int(row[2])
        if op not in ("Total", "getitem") and count > 0:
            non_delegated[op] = count
    return {
        "delegated_subgraphs": int(info.num_delegated_subgraphs),
        "delegated_nodes": int(info.num_delegated_nodes),
        "non_delegated_nodes": int(info.num_non_delegated_nodes),
        "non_delegated_ops": non_delegated,
    }
