"""GR00T N1.5's export hooks: stage modules, example inputs, policy contract and model.

:data:`EXPORT` is what :mod:`vla_edge.export.architecture` reads (named by :mod:`.arch`):
the stage modules themselves (:mod:`.n15_stages`) for ONNX and torch, for ExecuTorch
their copies made as N1.7's are (:mod:`.xnnpack`: constant tables as persistent buffers,
each per-embodiment linear the config's one slice, the position table's first
``action_horizon`` rows). SigLIP's patch embedding is a ``Conv2d``, which XNNPACK lowers,
so it stays.

A policy directory's manifest is N1.7's (:func:`.processor.groot_contract`: the same host
side, statistics and tokenizer files) with architecture ``groot_n15``, the prompt of
:mod:`.n15_prompt` and N1.5's image fit (:func:`.processor.image_fit`: centre crop of
``image_crop_fraction``, no letterbox); the tokenizer is checked against the config's
prompt layout (:func:`.n15_prompt.check_tokenizer`).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch import nn

from vla_edge.archs.architecture import ExportHooks
from vla_edge.archs.groot import n15_prompt, processor
from vla_edge.archs.groot.n15_config import GrootN15Config
from vla_edge.archs.groot.n15_model import GrootN15Model
from vla_edge.archs.groot.n15_stages import GrootN15Stages, build_stages
from vla_edge.archs.groot.xnnpack import (
    PositionRows,
    with_embodiment_linears,
    with_persistent_buffers,
)
from vla_edge.archs.policy_loading import (
    PolicyExpectations,
    checked_policy_dir,
    load_policy_model_with,
)
from vla_edge.archs.stage_io import STAGE_NAMES

ARCHITECTURE = "groot_n15"


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
    return stages, modules, stages.chained_inputs(seed)


POLICY = PolicyExpectations(
    title="GR00T N1.5",
    architectures=(ARCHITECTURE,),
    config_class=GrootN15Config,
    prompt_format=n15_prompt.PROMPT,
    resize=("center_crop", "Isaac-GR00T N1.5's evaluation transform"),
    needs_tokenizer_dir=True,
)
"""What N1.5's exporter expects of a policy directory."""


def checked_policy(
    path: str | Path, flow_steps: int | None = None, verify_sha256: bool = True
) -> tuple[Any, GrootN15Config]:
    """An N1.5 policy directory and its model config (``flow_steps`` applied).

    Raises:
        ConfigError: the directory holds another architecture, or its prompt or tokenizer
            is not N1.5's.
        PolicyDirError: (and its relatives) an invalid policy directory.
    """
    return checked_policy_dir(path, POLICY, flow_steps, verify_sha256)


def load_policy_model(
    path: str | Path,
    flow_steps: int | None = None,
    *,
    stage: str | None = None,
    verify_sha256: bool = True,
) -> tuple[Any, GrootN15Model]:
    """An N1.5 policy directory and its model with the directory's weights.

    Raises:
        ConfigError: as :func:`checked_policy`; an unknown stage.
    """
    from vla_edge.archs.groot.n15_checkpoint import load_weights

    return load_policy_model_with(
        path, POLICY, GrootN15Model, load_weights, flow_steps, stage, verify_sha256, build_stages
    )


EXPORT = ExportHooks(
    stage_names=STAGE_NAMES,
    stage_modules=stage_modules,
    executorch_stages="vla_edge.archs.groot.n15_programs",
    contract=partial(processor.groot_contract, architecture=ARCHITECTURE, prompt=n15_prompt.PROMPT),
    normalisation=processor.statistics_normalisation,
    tokenizer_files=processor.tokenizer_files,
    checked_policy=checked_policy,
    load_model=load_policy_model,
    hash_tokenizer_files=True,
    check_tokenizer=n15_prompt.check_tokenizer,
)
"""GR00T N1.5's export hooks (:attr:`vla_edge.archs.architecture.Architecture.export`)."""
