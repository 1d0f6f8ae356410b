"""Exportable stages with declared tensors.

A :class:`StageProgram` is what the exporter needs of any architecture: a torch
module, example inputs, and the tensors it reads (each with its ``source``,
see :mod:`vla_edge.export.manifest`) and writes. :func:`stage_programs` makes them from
an imported architecture's stage set (:mod:`vla_edge.export.architecture`),
:func:`policy_stages` from the bundled model's declarations
(:mod:`vla_edge.archs.bundled.stages`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import nn

from vla_edge.archs.bundled.stages import bundled_stage_io, example_inputs
from vla_edge.archs.host import TensorSpec
from vla_edge.export.manifest import StageRepeat, stage_repeat
from vla_edge.policy.model import VlaPolicy

if TYPE_CHECKING:
    from vla_edge.archs.stage_io import StageSet


@dataclass
class StageProgram:
    """One stage to export: its module, example inputs and the manifest's I/O specs.

    ``rate``: ``per_instruction`` (run once per new instruction and cached) or
    ``per_observation``; ``repeat``: the program is one call of a loop the runner
    drives (see :mod:`vla_edge.export.manifest`).
    """

    name: str
    module: nn.Module
    example_inputs: tuple[torch.Tensor, ...]
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    rate: str = "per_observation"
    repeat: StageRepeat | None = None

    @property
    def input_names(self) -> list[str]:
        """Names of the program inputs, in order."""
        return [t.name for t in self.inputs]

    @property
    def output_names(self) -> list[str]:
        """Names of the program outputs, in order."""
        return [t.name for t in self.outputs]


def stage_programs(
    stages: StageSet, modules: dict[str, nn.Module], examples: dict[str, tuple[torch.Tensor, ...]]
) -> list[StageProgram]:
    """An imported architecture's stages as programs, in run order, run per observation.

    Args:
        stages: its stage set, with ``inputs()`` and ``outputs()`` (declared tensors).
        modules: stage name → the module to export (the stage or its backend's rewrite).
        examples: stage name → example inputs.
    """
    inputs, outputs, repeats = stages.inputs(), stages.outputs(), stages.repeats()
    programs = []
    for name in stages.modules():
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
                "per_observation",
                None if repeat is None else stage_repeat(repeat, declared_in, declared_out, name),
            )
        )
    return programs


def policy_stages(policy: VlaPolicy, stage_names: tuple[str, ...]) -> list[StageProgram]:
    """The named stages of ``policy`` (``language_encoder`` loads MiniLM if needed)."""
    if "language_encoder" in stage_names:
        policy.ensure_language_encoder()
    policy.eval()
    io = bundled_stage_io(policy)
    examples = example_inputs(policy)
    return [
        StageProgram(
            name, getattr(policy, name), examples[name], io[name][1], io[name][2], io[name][0]
        )
        for name in stage_names
    ]
