"""A stage for the torch backend: its module's weights as one safetensors file.

The torch runner (:mod:`vla_edge.runners.torch_stages`) needs no traced program: it builds
the architecture's stage module from the manifest's ``model_config`` and loads this file
into it, strictly, on the device and in the dtype the deployment asks for. The file holds
the stage's state dict in float32 (a tensor shared by two names is written once per name,
as a copy), and its metadata names the stage.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vla_edge.export.stages import StageProgram


def export_stage_torch(stage: StageProgram, path: Path) -> dict[str, Any]:
    """Write ``stage.module``'s state dict to ``path``; the manifest entry's extra fields."""
    from safetensors.torch import save_file

    state = stage.module.state_dict()
    seen: set[int] = set()
    tensors = {}
    for name, value in state.items():
        tensor = value.detach().contiguous()
        if tensor.data_ptr() in seen:  # a tied weight: safetensors stores no aliases
            tensor = tensor.clone()
        seen.add(tensor.data_ptr())
        tensors[name] = tensor
    save_file(tensors, str(path), metadata={"stage": stage.name, "format": "vla_edge.torch.v1"})
    return {"tensors": len(tensors), "parameters": sum(t.numel() for t in tensors.values())}
