"""The bundled model's export hooks: its checkpoint, its stages, its manifest, its language stage.

:data:`EXPORT` is what :mod:`vla_edge.export.architecture` reads (named by :mod:`.arch`).
The bundled model has no policy directory: ``vla-edge train``'s ``.pt`` checkpoint is
exported as it is (:func:`load_policy`), or a model config's untrained weights
(:func:`untrained_policy`). Its four stages are its own submodules (:mod:`.stages`), the
same for every backend; for ExecuTorch the export swaps its attention for the head-folded
rewrite of :mod:`.xnnpack`. Its language stage (frozen MiniLM, run once per instruction)
may run on a backend of its own, and its program is reused from any earlier export made
at :data:`LANGUAGE_EXPORTER_REVISION`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from vla_edge.archs.architecture import ExportHooks
from vla_edge.archs.bundled.model import VlaPolicy, load_checkpoint
from vla_edge.archs.bundled.stages import (
    BUNDLED_STAGES,
    BundledStages,
    bundled_contract,
    bundled_stage_modules,
    example_inputs,
)
from vla_edge.archs.bundled.xnnpack import ATTENTION_REWRITE
from vla_edge.archs.host import TOKENIZER_NAME
from vla_edge.archs.policy_tokenizer import sha256_file

LANGUAGE_EXPORTER_REVISION = 4
"""Bumped when the language program changes for the same package versions (a matching one
may be reused).

4: made by a quantisation recipe (earlier ones are not reused).
"""


def stage_modules(
    policy: VlaPolicy, backend: str = "onnx", seed: int = 0
) -> tuple[BundledStages, dict[str, nn.Module], dict[str, tuple[torch.Tensor, ...]]]:
    """The stages of ``policy``, their modules and example inputs (the same for every backend).

    ``language_encoder`` loads MiniLM if needed; ExecuTorch's attention rewrite is
    :data:`~vla_edge.archs.bundled.xnnpack.ATTENTION_REWRITE`, applied by the export.
    """
    stages = bundled_stage_modules(policy)
    modules = stages.modules()
    policy.eval()
    return stages, modules, example_inputs(policy, seed)


def load_policy(path: str | Path, flow_steps: int | None = None) -> VlaPolicy:
    """``vla-edge train``'s checkpoint, with ``flow_steps`` Euler steps built into its head.

    Raises:
        CheckpointError: (and its relatives) an unreadable or inconsistent checkpoint.
    """
    policy = load_checkpoint(path)
    if flow_steps is not None:
        policy.action_head.flow_steps = int(flow_steps)
    return policy


def untrained_policy(config_file: str | Path, flow_steps: int | None = None) -> VlaPolicy:
    """Freshly initialised weights (seed 0) of a training file's model config.

    Raises:
        ConfigError: an invalid training file.
    """
    from vla_edge.archs.bundled.config import load_train_file

    torch.manual_seed(0)
    policy = VlaPolicy(load_train_file(config_file).model)
    if flow_steps is not None:
        policy.action_head.flow_steps = int(flow_steps)
    return policy


def source_section(policy: VlaPolicy, checkpoint: Path | None) -> dict[str, Any]:
    """The manifest's ``source``: the checkpoint file and the training run it records."""
    info = policy.checkpoint_info or {}
    return {
        "checkpoint": str(checkpoint) if checkpoint is not None else None,
        "checkpoint_sha256": sha256_file(Path(checkpoint)) if checkpoint is not None else None,
        "weights_sha256": info.get("weights_sha256"),
        "source_hash": info.get("source_hash"),
        "step": info.get("step"),
        "trained": checkpoint is not None,
    }


def checkpoint_contract(policy: VlaPolicy, checkpoint: Path | None) -> dict[str, Any]:
    """The manifest's fields besides the stages and the exporter (``None``: untrained)."""
    return {
        **bundled_contract(policy),
        "stage_order": list(BUNDLED_STAGES),
        "source": source_section(policy, checkpoint),
    }


def tokenizer_files() -> dict[str, Path]:
    """MiniLM's WordPiece tokenizer, copied beside the programs."""
    from vla_edge.archs.bundled.tokenizer import minilm_dir

    return {TOKENIZER_NAME: minilm_dir() / TOKENIZER_NAME}


EXPORT = ExportHooks(
    stage_names=BUNDLED_STAGES,
    stage_modules=stage_modules,
    executorch_stages="vla_edge.archs.bundled.xnnpack",
    load_checkpoint=load_policy,
    untrained_model=untrained_policy,
    checkpoint_contract=checkpoint_contract,
    checkpoint_tokenizer=tokenizer_files,
    language_stage="language_encoder",
    language_revision=LANGUAGE_EXPORTER_REVISION,
    xnnpack_attention=ATTENTION_REWRITE,
)
"""The bundled model's export hooks (:attr:`vla_edge.archs.architecture.Architecture.export`)."""
