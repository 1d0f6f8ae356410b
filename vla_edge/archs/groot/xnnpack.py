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

The copy holds its own parameters (the rotary module is shared with the model, whose
state dict must not gain the tables), so a stage's weights are held twice while it is
lowered.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

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


def xnnpack_stages(model: GrootModel) -> dict[str, nn.Module]:
    """Each stage of ``model`` as :func:`with_persistent_buffers` gives it, in run order.

    The vision encoder's patch embedding is :class:`PatchLinear`.
    """
    stages = {n: with_persistent_buffers(m) for n, m in build_stages(model).modules().items()}
    visual = stages["vision_encoder"].visual
    visual.patch_embed = PatchLinear(visual.patch_embed.proj)
    return stages


__all__ = ["PatchLinear", "with_persistent_buffers", "xnnpack_stages"]
