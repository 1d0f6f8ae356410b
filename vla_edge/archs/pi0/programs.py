"""π0 / π0.5's export hooks: the stage modules per backend, their example inputs, the model.

:data:`EXPORT` is what :mod:`vla_edge.export.architecture` reads (named by
:mod:`.arch`): the reference stage modules (:mod:`.stages`) for ONNX and torch, their
XNNPACK rewrite (:mod:`.xnnpack`, same weights, same maths) for ExecuTorch, the contract
of :mod:`.processor`, and a policy directory's model, whole or (``stage``) with one stage's
weights only: a full-size π0 is 13 GB in fp32, and its 8da4w fusion alone peaks at about
10 GiB while it lowers, so ``--low-memory`` exports each stage in a process of its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from vla_edge.archs.architecture import ExportHooks
from vla_edge.archs.pi0 import processor
from vla_edge.archs.pi0.config import Pi0Config
from vla_edge.archs.pi0.model import Pi0Model
from vla_edge.archs.pi0.stages import STAGE_NAMES, Pi0Stages, build_stages
from vla_edge.archs.pi0.xnnpack import NOT_DELEGATED_WHY, xnnpack_stages
from vla_edge.archs.policy_loading import (
    PolicyExpectations,
    checked_policy_dir,
    load_policy_model_with,
)


def example_inputs(stages: Pi0Stages, seed: int = 0) -> dict[str, tuple[torch.Tensor, ...]]:
    """Each stage's example inputs, chained: fusion reads real image tokens, the head a real cache.

    Contiguous (row-major, like the runners' numpy arrays: ExecuTorch fixes each
    input's dim order from its example).
    """
    ex = stages.example_inputs(seed)
    with torch.no_grad():
        tokens = stages.vision_encoder(*ex["vision_encoder"])
        cache = stages.fusion(tokens, *ex["fusion"][1:])
    head = list(ex["action_head"])
    prefix_mask = torch.zeros_like(head[6])
    prefix_mask[0, : min(2, prefix_mask.shape[1] - 1)] = 1.0
    chained = {
        "vision_encoder": ex["vision_encoder"],
        "fusion": (tokens, *ex["fusion"][1:]),
        "action_head": (*cache, *head[3:6], prefix_mask, *head[7:]),
    }
    return {
        name: tuple(t.detach().contiguous().clone() for t in tensors)
        for name, tensors in chained.items()
    }


def stage_modules(
    model: Pi0Model, backend: str = "onnx", seed: int = 0
) -> tuple[Pi0Stages, dict[str, nn.Module], dict[str, tuple[torch.Tensor, ...]]]:
    """The stages of ``model``, the modules ``backend`` exports, and their example inputs.

    ``executorch`` gets the XNNPACK rewrite of each stage; ``onnx`` and ``torch`` the
    reference modules.
    """
    stages = build_stages(model)
    modules = {name: module.eval() for name, module in stages.modules().items()}
    if backend == "executorch":
        modules = xnnpack_stages(stages.vision_encoder, stages.fusion, stages.action_head)
    return stages, modules, example_inputs(stages, seed)


POLICY = PolicyExpectations(
    title="π0 / π0.5",
    architectures=("pi0", "pi05"),
    config_class=Pi0Config,
    prompt_format=processor.prompt_format,
    resize=("pad", "openpi"),
)
"""What π0's exporter expects of a policy directory."""


def checked_policy(
    path: str | Path, flow_steps: int | None = None, verify_sha256: bool = True
) -> tuple[Any, Pi0Config]:
    """A π0 / π0.5 policy directory and its model config (``flow_steps`` applied).

    Raises:
        ConfigError: the directory holds another architecture, or its prompt or
            image resize is not π0's.
        PolicyDirError: (and its relatives) an invalid policy directory.
    """
    return checked_policy_dir(path, POLICY, flow_steps, verify_sha256)


def load_policy_model(
    path: str | Path,
    flow_steps: int | None = None,
    *,
    stage: str | None = None,
    verify_sha256: bool = True,
) -> tuple[Any, Pi0Model]:
    """A π0 / π0.5 policy directory and its model with the directory's weights.

    ``stage``: only that stage's weights are read; the rest of the model is allocated
    but never written (:func:`~vla_edge.archs.common.without_default_init`), so not
    resident.

    Raises:
        ConfigError: as :func:`checked_policy`; an unknown stage.
        PolicyDirError: (and its relatives) an invalid policy directory.
    """
    from vla_edge.archs.pi0.checkpoint import load_pi0_weights

    return load_policy_model_with(
        path, POLICY, Pi0Model, load_pi0_weights, flow_steps, stage, verify_sha256, build_stages
    )


EXPORT = ExportHooks(
    stage_names=STAGE_NAMES,
    stage_modules=stage_modules,
    contract=processor.pi0_contract,
    normalisation=processor.statistics_normalisation,
    tokenizer_files=processor.tokenizer_files,
    checked_policy=checked_policy,
    load_model=load_policy_model,
    executorch_stages="vla_edge.archs.pi0.xnnpack",
    not_delegated_why=NOT_DELEGATED_WHY,
    low_memory=True,
)
"""π0's and π0.5's export hooks (:attr:`vla_edge.archs.architecture.Architecture.export`)."""
