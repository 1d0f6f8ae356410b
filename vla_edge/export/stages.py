"""Exportable stages with declared tensors.

A :class:`StageProgram` is what the exporter needs of any architecture: a torch
module, example inputs, and the tensors it reads (each with its ``source``,
see :mod:`vla_edge.export.manifest`) and writes. :func:`stage_programs` makes them from
an architecture's stage set (:mod:`vla_edge.export.architecture`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

from vla_edge.archs.host import TensorSpec
from vla_edge.export.manifest import StageRepeat, stage_repeat
from vla_edge.export.xnnpack_rewrites import AttentionRewrite

if TYPE_CHECKING:
    from vla_edge.archs.stage_io import StageSet


@dataclass
class StageProgram:
    """One stage to export: its module, example inputs and the manifest's I/O specs.

    ``rate``: ``per_instruction`` (run once per new instruction and cached) or
    ``per_observation``; ``repeat``: the program is one call of a loop the runner
    drives (see :mod:`vla_edge.export.manifest`); ``xnnpack_attention``: the
    architecture's attention layer and its rewrite, swapped in by the ExecuTorch
    export (:func:`vla_edge.export.xnnpack_rewrites.rewrite_for_xnnpack`).
    """

    name: str
    module: nn.Module
    example_inputs: tuple[torch.Tensor, ...]
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    rate: str = "per_observation"
    repeat: StageRepeat | None = None
    xnnpack_attention: AttentionRewrite | None = None

    @property
    def input_names(self) -> list[str]:
        """Names of the program inputs, in order."""
        return [t.name for t in self.inputs]

    @property
    def output_names(self) -> list[str]:
        """Names of the program outputs, in order."""
        return [t.name for t in self.outputs]


def stage_programs(
    stages: StageSet,
    modules: dict[str, nn.Module],
    examples: dict[str, tuple[torch.Tensor, ...]],
    *,
    names: tuple[str, ...] | None = None,
    xnnpack_attention: AttentionRewrite | None = None,
) -> list[StageProgram]:
    """An architecture's stages as programs, in run order.

    Args:
        stages: its stage set, with ``inputs()`` and ``outputs()`` (declared tensors) and
            optionally ``rates()`` (stage → ``per_instruction`` or ``per_observation``;
            a stage not named there runs per observation).
        modules: stage name → the module to export (the stage or its backend's rewrite).
        examples: stage name → example inputs.
        names: only these stages (default: every stage), in run order.
        xnnpack_attention: the architecture's attention rewrite for ExecuTorch.
    """
    inputs, outputs, repeats = stages.inputs(), stages.outputs(), stages.repeats()
    rates = stages.rates() if hasattr(stages, "rates") else {}
    programs = []
    for name in modules:
        if names is not None and name not in names:
            continue
        declared_in = tuple(TensorSpec(t.name, t.shape, t.dtype, t.source) for t in inputs[name])
        declared_out = tuple(TensorSpec(t.name, t.shape, t.dtype) for t in outputs[name])
        repeat = repeats.get(name)
        programs.append(
            StageProgram(
                name,
                modules[name],
                examples[name],
                declared_in,
                declared_out,
                rates.get(name, "per_observation"),
                None if repeat is None else stage_repeat(repeat, declared_in, declared_out, name),
                xnnpack_attention,
            )
        )
    return programs
