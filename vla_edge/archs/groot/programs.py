"""GR00T's export hooks: the stage modules per backend, their chained example inputs, the model.

:data:`EXPORT` is what :mod:`vla_edge.export.architecture` reads (named by :mod:`.arch`):
the stage modules themselves (:mod:`.stages`) for ONNX and torch, for ExecuTorch their copies
with the constant tables as buffers (:mod:`.xnnpack`), the contract of
:mod:`.processor`, and a policy directory's model, whole or (``stage``) with one stage's
weights only: a full-size GR00T N1.7 holds 12 GB of fp32 weights, and lowering its fusion
to 8da8w peaks at about 17 GiB beside them, so ``--low-memory`` exports each stage in a
process of its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from vla_edge.archs.architecture import ExportHooks
from vla_edge.archs.groot import processor
from vla_edge.archs.groot.config import GrootConfig
from vla_edge.archs.groot.model import GrootModel
from vla_edge.archs.groot.stages import STAGE_NAMES, GrootStages, build_stages
from vla_edge.archs.groot.xnnpack import xnnpack_stages
from vla_edge.archs.policy_loading import (
    PolicyExpectations,
    checked_policy_dir,
    load_policy_model_with,
)


def stage_modules(
    model: GrootModel, backend: str = "onnx", seed: int = 0
) -> tuple[GrootStages, dict[str, nn.Module], dict[str, tuple[torch.Tensor, ...]]]:
    """The stages of ``model``, the modules ``backend`` exports, their chained inputs.

    ONNX and torch get the stage modules themselves, ExecuTorch
    :func:`~vla_edge.archs.groot.xnnpack.xnnpack_stages` (the tables as buffers).
    """
    stages = build_stages(model)
    modules = {name: module.eval() for name, module in stages.modules().items()}
    if backend == "executorch":
        modules = xnnpack_stages(model)
    return stages, modules, stages.chained_inputs(seed)


POLICY = PolicyExpectations(
    title="GR00T",
    architectures=(processor.ARCHITECTURE,),
    config_class=GrootConfig,
    prompt_format=processor.PROMPT,
    resize=("center_crop", "Isaac-GR00T N1.7's evaluation transform; re-import an older one"),
    needs_tokenizer_dir=True,
)
"""What GR00T's exporter expects of a policy directory."""


def checked_policy(
    path: str | Path, flow_steps: int | None = None, verify_sha256: bool = True
) -> tuple[Any, GrootConfig]:
    """A GR00T policy directory and its model config (``flow_steps`` applied).

    Raises:
        ConfigError: the directory holds another architecture, or its prompt or tokenizer
            is not GR00T's.
        PolicyDirError: (and its relatives) an invalid policy directory.
    """
    return checked_policy_dir(path, POLICY, flow_steps, verify_sha256)


def load_policy_model(
    path: str | Path,
    flow_steps: int | None = None,
    *,
    stage: str | None = None,
    verify_sha256: bool = True,
) -> tuple[Any, GrootModel]:
    """A GR00T policy directory and its model with the directory's weights.

    ``stage``: only that stage's weights are read; the rest of the model is allocated but
    never written (:func:`~vla_edge.archs.common.without_default_init`), so not resident.

    Raises:
        ConfigError: as :func:`checked_policy`; an unknown stage.
    """
    from vla_edge.archs.groot.checkpoint import load_weights

    return load_policy_model_with(
        path, POLICY, GrootModel, load_weights, flow_steps, stage, verify_sha256, build_stages
    )


EXPORT = ExportHooks(
    stage_names=STAGE_NAMES,
    stage_modules=stage_modules,
    contract=processor.groot_contract,
    normalisation=processor.statistics_normalisation,
    tokenizer_files=processor.tokenizer_files,
    checked_policy=checked_policy,
    load_model=load_policy_model,
    executorch_stages="vla_edge.archs.groot.xnnpack",
    hash_tokenizer_files=True,
    check_tokenizer=processor.check_tokenizer,
    low_memory=True,
)
"""GR00T's export hooks (:attr:`vla_edge.archs.architecture.Architecture.export`)."""
