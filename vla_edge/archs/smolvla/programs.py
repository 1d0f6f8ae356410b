"""SmolVLA's export hooks: the stage modules per backend, their example inputs, the model.

:data:`EXPORT` is what :mod:`vla_edge.export.architecture` reads (named by :mod:`.arch`):
the stage modules themselves (:mod:`.stages`) for ONNX and torch; for ExecuTorch their
XNNPACK rewrite (:mod:`.xnnpack`, same weights, same maths, each stage one XNNPACK call
with only the token lookup outside; :func:`executorch_stages`), the contract of
:mod:`.processor`, and a policy directory's model with its weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from vla_edge.archs.architecture import ExportHooks
from vla_edge.archs.policy_loading import (
    PolicyExpectations,
    checked_policy_dir,
    load_policy_model_with,
)
from vla_edge.archs.smolvla import processor
from vla_edge.archs.smolvla.config import SmolVLAConfig
from vla_edge.archs.smolvla.model import SmolVLAModel
from vla_edge.archs.smolvla.stages import STAGE_NAMES, SmolVLAStages, build_stages
from vla_edge.archs.smolvla.xnnpack import NOT_DELEGATED_WHY, xnnpack_stages

ARCHITECTURE = processor.ARCHITECTURE
PROMPT = processor.PROMPT


def example_inputs(stages: SmolVLAStages, seed: int = 0) -> dict[str, tuple[torch.Tensor, ...]]:
    """Each stage's example inputs, chained: fusion reads real image tokens, the head a real cache.

    The action head's executed-prefix mask covers its first two rows, so tracing sees it.
    Contiguous (row-major, like the runners' numpy arrays: ExecuTorch fixes each input's
    dim order from its example).
    """
    ex = stages.example_inputs(seed)
    with torch.no_grad():
        tokens = stages.vision_encoder(*ex["vision_encoder"])
        cache = stages.fusion(tokens, *ex["fusion"][1:])
    noise, prefix_actions, prefix_mask, x_t, step = ex["action_head"][3:]
    prefix_mask = torch.zeros_like(prefix_mask)
    prefix_mask[0, : min(2, prefix_mask.shape[1] - 1)] = 1.0
    chained = {
        "vision_encoder": ex["vision_encoder"],
        "fusion": (tokens, *ex["fusion"][1:]),
        "action_head": (*cache, noise, prefix_actions, prefix_mask, x_t, step),
    }
    return {
        name: tuple(t.detach().contiguous().clone() for t in tensors)
        for name, tensors in chained.items()
    }


def executorch_stages(model: SmolVLAModel) -> dict[str, nn.Module]:
    """The stages for ExecuTorch: :func:`~vla_edge.archs.smolvla.xnnpack.xnnpack_stages`.

    The reference's maths with only operators XNNPACK takes, sharing ``model``'s parameters.
    """
    stages = build_stages(model)
    return xnnpack_stages(stages.vision_encoder, stages.fusion, stages.action_head)


def stage_modules(
    model: SmolVLAModel, backend: str = "onnx", seed: int = 0
) -> tuple[SmolVLAStages, dict[str, nn.Module], dict[str, tuple[torch.Tensor, ...]]]:
    """The stages of ``model``, the modules ``backend`` exports, and their example inputs.

    ONNX and torch get the stage modules themselves, ExecuTorch :func:`executorch_stages`.
    """
    stages = build_stages(model)
    modules = {name: module.eval() for name, module in stages.modules().items()}
    if backend == "executorch":
        modules = executorch_stages(model)
    return stages, modules, example_inputs(stages, seed)


POLICY = PolicyExpectations(
    title="SmolVLA",
    architectures=(ARCHITECTURE,),
    config_class=SmolVLAConfig,
    prompt_format=PROMPT,
    resize=("pad_top_left", "LeRobot SmolVLA's resize_with_pad"),
    needs_tokenizer_dir=True,
)
"""What SmolVLA's exporter expects of a policy directory."""


def checked_policy(
    path: str | Path, flow_steps: int | None = None, verify_sha256: bool = True
) -> tuple[Any, SmolVLAConfig]:
    """A SmolVLA policy directory and its model config (``flow_steps`` applied).

    Raises:
        ConfigError: the directory holds another architecture, or its prompt, image resize
            or tokenizer is not SmolVLA's.
        PolicyDirError: (and its relatives) an invalid policy directory.
    """
    return checked_policy_dir(path, POLICY, flow_steps, verify_sha256)


def load_policy_model(
    path: str | Path,
    flow_steps: int | None = None,
    *,
    stage: str | None = None,
    verify_sha256: bool = True,
) -> tuple[Any, SmolVLAModel]:
    """A SmolVLA policy directory and its model with the directory's weights.

    ``stage``: refused (SmolVLA's whole model fits beside one stage's export).

    Raises:
        ConfigError: as :func:`checked_policy`; a stage.
        PolicyDirError: (and its relatives) an invalid policy directory.
    """
    from vla_edge.archs.smolvla.checkpoint import load_smolvla_weights

    return load_policy_model_with(
        path, POLICY, SmolVLAModel, load_smolvla_weights, flow_steps, stage, verify_sha256
    )


EXPORT = ExportHooks(
    stage_names=STAGE_NAMES,
    stage_modules=stage_modules,
    contract=processor.smolvla_contract,
    normalisation=processor.statistics_normalisation,
    tokenizer_files=processor.tokenizer_files,
    checked_policy=checked_policy,
    load_model=load_policy_model,
    executorch_stages="vla_edge.archs.smolvla.xnnpack",
    not_delegated_why=NOT_DELEGATED_WHY,
    check_tokenizer=processor.check_tokenizer,
    hash_tokenizer_files=True,
)
"""SmolVLA's export hooks (:attr:`vla_edge.archs.architecture.Architecture.export`)."""
