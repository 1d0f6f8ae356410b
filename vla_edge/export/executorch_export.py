"""One stage -> one ExecuTorch program lowered to XNNPACK, quantised as its recipe says.

A stage's :class:`~vla_edge.export.quant_recipes.StageQuant` (from a named
recipe of ``config/quant_recipes.yaml``) is applied before export:

* ``8da4w`` / ``8da8w``: the selected ``nn.Linear`` layers get int8 dynamic
  activations and int4 weights in groups (a layer whose input width is not a
  multiple of the group size stays fp32) or int8 per-channel weights (torchao
  ``Int8DynamicActivationIntxWeightConfig``), which XNNPACK runs as one fused kernel.
* ``int8wo``: the selected layers keep int8 weights and one scale per output
  channel (:class:`Int8WeightLinear`); the widening to fp32 runs outside XNNPACK.
* ``fp16``: the whole stage in half precision behind fp32 inputs and outputs
  (:class:`HalfPrecisionStage`).
* ``embeddings: int8``: every ``nn.Embedding`` (MiniLM's 30522-row word table is
  half of the language program) becomes int8 with one fp32 scale per row
  (:class:`Int8RowEmbedding`): the rows are gathered as int8 and only the
  gathered rows are dequantised.
* ``convs: int8``: the selected ``nn.Conv2d`` layers (the vision encoder's trunk)
  become static int8 — symmetric per-output-channel weights, per-tensor
  activations observed on calibration frames (PT2E with the XNNPACK quantizer,
  convolutions only) — which XNNPACK runs as its quantised convolution; norms and
  everything between stay fp32. Dynamic int8 convolutions lower but fail in
  ExecuTorch 1.5's runtime ("Propagating input shapes failed"), hence the calibration.

Norms, and the attention layer an architecture names
(:attr:`StageProgram.xnnpack_attention <vla_edge.export.stages.StageProgram>`), are first
rewritten with ops XNNPACK takes (:mod:`vla_edge.export.xnnpack_rewrites`), so each stage
lowers to few delegate calls. The delegated and non-delegated node counts per stage come from
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
from vla_edge.export.quant_recipes import StageQuant, stage_quant
from vla_edge.export.stages import StageProgram


def linear_paths(module: nn.Module) -> list[str]:
    """Module paths of every ``nn.Linear`` in ``module``, in order."""
    return [name for name, m in module.named_modules() if isinstance(m, nn.Linear)]


def quantize_linears(
    module: nn.Module, settings: StageQuant, in_place: bool = False
) -> tuple[nn.Module, list[str], list[str]]:
    """``module`` with the ``Linear`` layers ``settings`` selects in its scheme.

    A copy unless ``in_place``.

    Returns:
        The module, the paths of the quantised and of the fp32 ``Linear`` layers.
    """
    quantized = (module if in_place else copy.deepcopy(module)).eval()
    paths = linear_paths(quantized)
    layers = dict(quantized.named_modules())
    chosen = [
        p
        for p in paths
        if settings.scheme in ("8da8w", "8da4w", "int8wo")
        and settings.selects(p)
        and (settings.scheme != "8da4w" or layers[p].in_features % settings.group_size == 0)
    ]
    selected = set(chosen)
    if settings.scheme == "int8wo":
        for path in chosen:
            parent, _, name = path.rpartition(".")
            setattr(layers[parent] if parent else quantized, name, Int8WeightLinear(layers[path]))
    elif chosen:
        from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
        from torchao.quantization.granularity import PerAxis, PerGroup

        if settings.scheme == "8da4w":
            config = Int8DynamicActivationIntxWeightConfig(
                weight_dtype=torch.int4, weight_granularity=PerGroup(settings.group_size)
            )
        else:
            config = Int8DynamicActivationIntxWeightConfig(
                weight_dtype=torch.int8, weight_granularity=PerAxis(0)
            )
        quantize_(quantized, config, filter_fn=lambda mod, fqn: fqn in selected)
    return quantized, chosen, [p for p in paths if p not in selected]


class Int8WeightLinear(nn.Module):
    """``nn.Linear`` with int8 weights and one fp32 scale per output channel (same maths).

    ``x @ (q * s).T == (x @ q.T) * s``: the int8 weights are widened to fp32 in the
    program and the scale is applied to the product.
    """

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        weight = linear.weight.detach().float()
        scale = weight.abs().amax(dim=1).clamp_min(1e-12) / 127.0
        qweight = torch.round(weight / scale[:, None]).clamp(-127, 127).to(torch.int8)
        self.register_buffer("qweight", qweight)
        self.register_buffer("scale", scale)
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x @ (qweight * scale).T + bias``."""
        out = F.linear(x, self.qweight.to(torch.float32)) * self.scale
        return out if self.bias is None else out + self.bias


class HalfPrecisionStage(nn.Module):
    """A stage run in half precision: float inputs cast to fp16, float outputs back to fp32."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.inner = module.half()

    def forward(self, *inputs: torch.Tensor) -> Any:
        """The inner stage on half-precision copies of the float inputs."""
        cast = [t.half() if t.is_floating_point() else t for t in inputs]
        out = self.inner(*cast)
        if isinstance(out, torch.Tensor):
            return out.float() if out.is_floating_point() else out
        return tuple(t.float() if t.is_floating_point() else t for t in out)


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
    paths: list[str] | None = None,
) -> nn.Module:
    """``module`` as a graph whose convolutions are static int8 (see the module docstring).

    Args:
        module: the (possibly already 8da4w) stage.
        example_inputs: the export's example inputs (shapes).
        calibration: inputs like ``example_inputs`` that the activation
            observers see (real frames; random pixels would misplace the ranges).
        paths: module paths of the convolutions to quantise (``None``: every one).

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
    config = get_symmetric_quantization_config(is_per_channel=True)
    quantizer = XNNPACKQuantizer()
    if paths is None:
        quantizer.set_operator_type(torch.ops.aten.conv2d.default, config)
    else:
        for path in paths:
            quantizer.set_module_name(path, config)
    graph = torch.export.export(module, example_inputs, strict=False).module()
    prepared = prepare_pt2e(graph, quantizer)
    with torch.no_grad():
        for inputs in calibration:
            prepared(*inputs)
    return convert_pt2e(prepared)


def conv_paths(module: nn.Module) -> list[str]:
    """Module paths of every ``nn.Conv2d`` in ``module``."""
    return [name for name, m in module.named_modules() if isinstance(m, nn.Conv2d)]


def quantize_stage(
    stage: StageProgram,
    module: nn.Module,
    settings: StageQuant,
    calibration: list[tuple[torch.Tensor, ...]] | None,
) -> tuple[nn.Module, dict[str, Any]]:
    """``module`` quantised by ``settings`` and the manifest entry's counts of what was.

    ``module``: a rewritten copy of ``stage.module``, edited in place.
    """
    module, chosen, kept = quantize_linears(module, settings, in_place=True)
    embeddings = 0
    if settings.embeddings == "int8":
        module, embeddings = quantize_embeddings_int8(module)
    convs = conv_paths(module)
    int8_convs = [p for p in convs if settings.selects(p)] if settings.convs == "int8" else []
    if int8_convs and calibration:
        everything = len(int8_convs) == len(convs)
        module = quantize_convs_int8(
            module, stage.example_inputs, calibration, None if everything else int8_convs
        )
    else:
        int8_convs = []
    if settings.scheme == "fp16":
        module = HalfPrecisionStage(module)
    details = {
        "quantized_linears": len(chosen),
        "fp32_linears": len(kept) if settings.scheme != "fp16" else 0,
        "int8_embeddings": embeddings,
        "int8_convs": len(int8_convs),
        "fp32_convs": len(convs) - len(int8_convs) if settings.scheme != "fp16" else 0,
        "calibration_inputs": len(calibration or []) if int8_convs else 0,
    }
    if settings.scheme in ("8da8w", "8da4w", "int8wo"):
        details["fp32_linear_names"] = kept
    return module, details


def export_stage_executorch(
    stage: StageProgram,
    path: Path,
    quant: str | StageQuant,
    calibration: list[tuple[torch.Tensor, ...]] | None = None,
    *,
    in_place: bool = False,
) -> dict[str, Any]:
    """Lower ``stage`` to XNNPACK and write the ``.pte`` program.

    Args:
        quant: the stage's settings, or the name of a package recipe.
        calibration: inputs for the int8 convolutions' activation ranges;
            without them a stage's convolutions stay fp32.
        in_place: rewrite and quantise ``stage.module`` itself, not a copy (it is
            unusable afterwards).

    Returns:
        ``{"delegation": {"delegated_subgraphs", "delegated_nodes",
        "non_delegated_nodes", "non_delegated_ops": {op: count}},
        "quantized_linears", "fp32_linears", "int8_embeddings", "int8_convs",
        "fp32_convs", "calibration_inputs", "rewritten_for_xnnpack"}``, plus
        ``fp32_linear_names`` under an integer scheme.
    """
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.devtools.backend_debug import get_delegation_info
    from executorch.exir import to_edge_transform_and_lower

    from vla_edge.export.xnnpack_rewrites import rewrite_for_xnnpack

    settings = stage_quant(stage.name, quant)
    module, rewrites = rewrite_for_xnnpack(
        stage.module.eval(), in_place=in_place, attention=stage.xnnpack_attention
    )
    # the rewrite above already copied the module unless in_place
    module, details = quantize_stage(stage, module, settings, calibration)
    with torch.no_grad():
        exported = torch.export.export(module, stage.example_inputs, strict=False)
        edge = to_edge_transform_and_lower(exported, partitioner=[XnnpackPartitioner()])
        info = get_delegation_info(edge.exported_program().graph_module)
        program = edge.to_executorch()
    path.write_bytes(program.buffer)
    return {
        "delegation": delegation_summary(info),
        **details,
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
