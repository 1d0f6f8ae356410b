"""GR00T N1.5's export hooks: the stage modules per backend and their chained example inputs.

:data:`EXPORT` is what :mod:`vla_edge.export.architecture` reads (named by :mod:`.arch`):
the stage modules themselves (:mod:`.n15_stages`) for ONNX and torch, for ExecuTorch
their copies made as N1.7's are (:mod:`.xnnpack`: constant tables as persistent buffers,
each per-embodiment linear the config's one slice, the position table's first
``action_horizon`` rows). SigLIP's patch embedding is a ``Conv2d``, which XNNPACK lowers,
so it stays.

Policy directories of N1.5 are not written yet (no prompt format is registered for the
Eagle 2.5 chat template), so the hooks that read one are absent: these hooks export a
model, as ``stage_programs_of`` and ``export_model`` take it.
"""

from __future__ import annotations

import torch
from torch import nn

from vla_edge.archs.architecture import ExportHooks
from vla_edge.archs.groot.n15_model import GrootN15Model
from vla_edge.archs.groot.n15_stages import GrootN15Stages, build_stages
from vla_edge.archs.groot.xnnpack import (
    PositionRows,
    with_embodiment_linears,
    with_persistent_buffers,
)
from vla_edge.archs.stage_io import STAGE_NAMES


def example_inputs(stages: GrootN15Stages, seed: int = 0) -> dict[str, tuple[torch.Tensor, ...]]:
    """Each stage's example inputs, chained: each reads its predecessor's real outputs.

    The executed-prefix mask covers the head's first two rows, so tracing sees it.
    """
    ex = stages.example_inputs(seed)
    with torch.no_grad():
        tokens = stages.vision_encoder(*ex["vision_encoder"])
        fused = stages.fusion(tokens, *ex["fusion"][1:])
    noise, prefix_actions, prefix_mask, x_t, step = ex["action_head"][3:]
    prefix_mask = torch.zeros_like(prefix_mask)
    prefix_mask[0, : min(2, prefix_mask.shape[1] - 1)] = 1.0
    chained = {
        "vision_encoder": ex["vision_encoder"],
        "fusion": (tokens, *ex["fusion"][1:]),
        "action_head": (*fused, noise, prefix_actions, prefix_mask, x_t, step),
    }
    return {
        name: tuple(t.detach().contiguous().clone() for t in tensors)
        for name, tensors in chained.items()
    }


def xnnpack_stages(model: GrootN15Model) -> dict[str, nn.Module]:
    """Each stage as ExecuTorch takes it (module docstring), in run order."""
    c = model.config
    stages = {n: with_persistent_buffers(m) for n, m in build_stages(model).modules().items()}
    for stage in stages.values():
        with_embodiment_linears(stage, c.embodiment_id)
    head = stages["action_head"]
    head.position_embedding = PositionRows(head.position_embedding, c.action_horizon)
    return stages


def stage_modules(
    model: GrootN15Model, backend: str = "onnx", seed: int = 0
) -> tuple[GrootN15Stages, dict[str, nn.Module], dict[str, tuple[torch.Tensor, ...]]]:
    """The stages of ``model``, the modules ``backend`` exports, their chained inputs."""
    stages = build_stages(model)
    modules = {name: module.eval() for name, module in stages.modules().items()}
    if backend == "executorch":
        modules = xnnpack_stages(model)
    return stages, modules, example_inputs(stages, seed)


EXPORT = ExportHooks(
    stage_names=STAGE_NAMES,
    stage_modules=stage_modules,
    executorch_stages="vla_edge.archs.groot.n15_programs",
)
"""GR00T N1.5's export hooks (:attr:`vla_edge.archs.architecture.Architecture.export`)."""
