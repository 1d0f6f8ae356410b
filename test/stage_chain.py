"""An export's stage programs chained in the manifest's order on host tensors.

The export tests feed each architecture's programs the eager reference's own host
tensors (a looped stage called as its ``repeat`` says) and compare the action head's
output with the eager stages, so a lowering error shows apart from the runner's host side.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from vla_edge.export.manifest import load_manifest
from vla_edge.runners.programs import open_program
from vla_edge.runners.stage_loop import run_stage


def open_stage_programs(folder) -> tuple[Any, dict[str, Any]]:  # noqa: ANN001 - Path
    """The export's manifest and one opened program per stage (one thread)."""
    manifest = load_manifest(folder)
    programs = {
        name: open_program(
            spec.backend,
            manifest.stage_path(name),
            1,
            [t.name for t in spec.inputs],
            [t.name for t in spec.outputs],
        )
        for name, spec in manifest.stages.items()
    }
    return manifest, programs


def chained_actions(
    manifest: Any,
    programs: dict[str, Any],
    host: dict[str, torch.Tensor],
    noise: np.ndarray,
) -> np.ndarray:
    """The action head's normalised chunk ``[H, D]`` for ``host`` and ``noise`` ``[H, D]``,
    with no executed prefix."""
    horizon, width = noise.shape
    values = {f"host:{k}": v.numpy() for k, v in host.items()}
    values["host:noise"] = noise[None]
    values["host:prefix_actions"] = np.zeros((1, horizon, width), np.float32)
    values["host:prefix_mask"] = np.zeros((1, horizon), np.float32)
    for name in manifest.stage_order:
        spec = manifest.stages[name]
        program = programs[name]
        outs = run_stage(
            lambda args, program=program: program.run([np.ascontiguousarray(a) for a in args]),
            spec.inputs,
            spec.outputs,
            spec.repeat,
            values,
        )
        values.update(
            {f"stage:{name}.{t.name}": v for t, v in zip(spec.outputs, outs, strict=True)}
        )
    return values["stage:action_head.actions"][0]
