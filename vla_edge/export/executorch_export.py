"""One stage -> one ExecuTorch program lowered to XNNPACK (fp32 or 8da4w).

* ``fp32``: ``torch.export`` -> ``to_edge_transform_and_lower`` with the
  XNNPACK partitioner -> ``.pte``.
* ``8da4w``: before export, every ``nn.Linear`` whose input width is a
  multiple of the group size gets int8 dynamic activations and int4 weights
  in groups of ``GROUP_SIZE`` (torchao ``Int8DynamicActivationIntxWeightConfig``),
  which XNNPACK runs as one fused kernel. Other layers stay fp32.

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
from torch import nn

from vla_edge.export.stages import StageProgram

GROUP_SIZE = 32


def quantize_8da4w(module: nn.Module, group_size: int = GROUP_SIZE) -> tuple[nn.Module, int, int]:
    """A copy of ``module`` with its eligible ``Linear`` layers in 8da4w.

    Returns:
        The quantised copy, the number of quantised and of skipped ``Linear`` layers.
    """
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerGroup

    quantized = copy.deepcopy(module).eval()
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


def export_stage_executorch(stage: StageProgram, path: Path, quant: str) -> dict[str, Any]:
    """Lower ``stage`` to XNNPACK and write the ``.pte`` program.

    Returns:
        ``{"delegation": {"delegated_subgraphs", "delegated_nodes",
        "non_delegated_nodes", "non_delegated_ops": {op: count}},
        "quantized_linears", "fp32_linears", "rewritten_for_xnnpack"}``.
    """
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.devtools.backend_debug import get_delegation_info
    from executorch.exir import to_edge_transform_and_lower

    from vla_edge.export.xnnpack_rewrites import rewrite_for_xnnpack

    module, rewrites = rewrite_for_xnnpack(stage.module.eval())
    quantized, skipped = 0, sum(1 for m in module.modules() if isinstance(m, nn.Linear))
    if quant == "8da4w":
        module, quantized, skipped = quantize_8da4w(module)
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
