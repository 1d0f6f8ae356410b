"""GR00T's stages for ExecuTorch: the same modules, their constant tables held as buffers.

The stages (:mod:`.stages`) use only operators XNNPACK lowers (``Linear``, ``matmul``,
``softmax``, the stock Qwen3-VL blocks in eager attention), so no operator is rewritten.
One thing differs: their constant tables (the prompt layout's ids, the image rows, the slot
rows, the rotary frequencies) are non-persistent buffers, which ``torch.export`` lifts as
constants; ExecuTorch 1.x's XNNPACK lowering then fails on them (``RuntimeError: Missing
input spec for lifted tensor slot_rows``, ``convert_constant_dim_order_pass``).
:func:`xnnpack_stages` gives each stage a copy whose tables are ordinary (persistent)
buffers, with the same values: the maths is unchanged. And the vision encoder's patch
embedding, a ``Conv3d`` that ExecuTorch's portable kernels do not run (error 0x12) and
XNNPACK does not take, is the ``Linear`` it equals (:class:`PatchLinear`).

Two more swaps keep only what the stages read, and make every matrix product an
``nn.Linear`` (what XNNPACK takes and what ``--quant 8da8w`` quantises):

* each per-embodiment linear (``CategorySpecificLinear``: the state encoder, the action
  encoder and decoder) is the ``nn.Linear`` of the config's one weight slice
  (:class:`EmbodimentLinear`): ``x @ W[e] + b[e]``. The other slices, never read, stay
  out of the program (at full size 31 of N1.7's 32 slices are 1.26 GB of fp32);
* the action tokens' position table, whose first ``action_horizon`` rows are added and
  never looked up, is those rows as a plain parameter (:class:`PositionRows`): not an
  ``nn.Embedding``, so ``embeddings: int8`` leaves it fp32 (it is added, not gathered).

The copy holds its own parameters (the rotary module is shared with the model, whose
state dict must not gain the tables), so a stage's weights are held twice while it is
lowered.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from vla_edge.archs.groot.layers import CategorySpecificLinear
from vla_edge.archs.groot.model import GrootModel
from vla_edge.archs.groot.stages import build_stages


def with_persistent_buffers(module: nn.Module) -> nn.Module:
    """A copy of ``module`` in which every buffer is persistent (same values)."""
    module = copy.deepcopy(module)
    for sub in module.modules():
        sub._non_persistent_buffers_set.clear()
    return module.eval()


class PatchLinear(nn.Module):
    """Qwen3-VL's patch embedding as the ``Linear`` it equals.

    The ``Conv3d``'s kernel is its stride and its whole input, so it is
    ``W.reshape(hidden, C * T * P * P) @ patch + b``; kept under the name ``proj``.
    """

    def __init__(self, proj: nn.Conv3d) -> None:
        super().__init__()
        hidden = proj.weight.shape[0]
        self.proj = nn.Linear(proj.weight[0].numel(), hidden, bias=proj.bias is not None)
        with torch.no_grad():
            self.proj.weight.copy_(proj.weight.reshape(hidden, -1))
            if proj.bias is not None:
                self.proj.bias.copy_(proj.bias)

    def forward(self, patches: torch.Tensor) -> torch.Tensor:
        """``[N, C * T * P * P]`` → ``[N, hidden]``."""
        return self.proj(patches.reshape(patches.shape[0], -1))


class EmbodimentLinear(nn.Module):
    """One embodiment's slice of a ``CategorySpecificLinear`` as the ``nn.Linear`` it equals.

    ``x @ W[e] + b[e]`` is ``F.linear(x, W[e].T, b[e])``; called like the layer it replaces
    (the embodiment argument is the slice it already holds).
    """

    def __init__(self, layer: CategorySpecificLinear, embodiment: int) -> None:
        super().__init__()
        weight = layer.W[embodiment]  # [in, out]
        self.proj = nn.Linear(weight.shape[0], weight.shape[1])
        with torch.no_grad():
            self.proj.weight.copy_(weight.T)
            self.proj.bias.copy_(layer.b[embodiment])

    @property
    def W(self) -> torch.Tensor:  # noqa: N802 (the replaced layer's name)
        """The weight, read by the stages for its dtype only."""
        return self.proj.weight

    def forward(self, x: torch.Tensor, embodiment: int | None = None) -> torch.Tensor:
        """``x`` ``[B, T, in]`` through the held slice."""
        del embodiment
        return self.proj(x)


class PositionRows(nn.Module):
    """The first ``rows`` rows of a position table, as the ``weight`` the action head slices."""

    def __init__(self, table: nn.Embedding, rows: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(table.weight[:rows].detach().clone(), requires_grad=False)


def with_embodiment_linears(module: nn.Module, embodiment: int) -> int:
    """Each ``CategorySpecificLinear`` in ``module`` as :class:`EmbodimentLinear` (in place).

    Returns:
        How many were replaced.
    """
    count = 0
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, CategorySpecificLinear):
                setattr(parent, name, EmbodimentLinear(child, embodiment))
                count += 1
    return count


def xnnpack_stages(model: GrootModel) -> dict[str, nn.Module]:
    """Each stage of ``model`` as :func:`with_persistent_buffers` gives it, in run order.

    The vision encoder's patch embedding is :class:`PatchLinear`, each per-embodiment
    linear the config's slice (:class:`EmbodimentLinear`), the action head's position
    table its first ``action_horizon`` rows (:class:`PositionRows`).
    """
    c = model.config
    stages = {n: with_persistent_buffers(m) for n, m in build_stages(model).modules().items()}
    visual = stages["vision_encoder"].visual
    visual.patch_embed = PatchLinear(visual.patch_embed.proj)
    for stage in stages.values():
        with_embodiment_linears(stage, c.embodiment_id)
    head = stages["action_head"]
    head.position_embedding = PositionRows(head.position_embedding, c.action_horizon)
    return stages


__all__ = [
    "EmbodimentLinear",
    "PatchLinear",
    "PositionRows",
    "with_embodiment_linears",
    "with_persistent_buffers",
    "xnnpack_stages",
]
