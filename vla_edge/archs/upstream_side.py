"""Our side of ``vla-edge bench upstream``: what the architectures' upstream hooks share.

Each architecture's ``upstream`` module (:class:`~vla_edge.archs.architecture.UpstreamHooks`)
imports the checkpoint upstream's driver wrote and runs our model on the driver's inputs;
the comparison itself is :mod:`vla_edge.bench.upstream`'s. What the π0 and SmolVLA hooks
share lives here: ``vla-edge import`` of the checkpoint onto the package's robot, the
policy directory loaded into our model, the order of a VLM-prefix model's intermediates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

DT_ACTION_S = 0.1
CAMERAS = ("agentview", "wrist")
"""The robot cameras the imported policy's first slots are mapped to."""


def import_onto_robot(
    ckpt: Path,
    work: Path,
    tokenizer: Path,
    options: Any,
    slots: Sequence[str],
    present: Sequence[bool],
) -> Any:
    """``vla-edge import`` of upstream's checkpoint onto the package's robot; the PolicyDir.

    Args:
        options: the :class:`~vla_edge.archs.common.ImportOptions`.
        slots: upstream's image slots, in order.
        present: which slots the driver's observation fills (the rest map to no camera).
    """
    from vla_edge.archs.importer import default_robot, import_checkpoint

    cameras = {
        slot: CAMERAS[i] if i < len(CAMERAS) and here else None
        for i, (slot, here) in enumerate(zip(slots, present, strict=True))
    }
    return import_checkpoint(
        ckpt,
        work / "policy",
        tokenizer,
        DT_ACTION_S,
        default_robot(),
        options=options,
        cameras=cameras,
        force=True,
    )


def load_policy_model(policy: Any) -> Any:
    """The policy directory's weights in our model (the registry's classes), eval mode."""
    from vla_edge.archs import registry

    arch = registry.get(policy.architecture)
    model = arch.resolve("model")(policy.config)
    arch.resolve("load_weights")(policy, model)
    return model.eval()


def inputs_of(dump: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """The driver's ``input.*`` arrays as torch tensors, keyed without the prefix."""
    import torch

    return {k.removeprefix("input."): torch.from_numpy(v) for k, v in dump.items() if "input." in k}


def prefix_model_run(
    model: Any,
    inputs: Mapping[str, Any],
    num_steps: int,
    dumps: dict[str, np.ndarray],
    policy: Any,
    dump: Mapping[str, np.ndarray],
) -> Any:
    """A VLM-prefix model's :class:`~vla_edge.archs.architecture.OurRun`.

    ``dumps`` (its intermediates so far) with the actions of its ``sample_actions`` on the
    driver's inputs and noise, in :func:`prefix_stage_order`.
    """
    import torch

    from vla_edge.archs.architecture import OurRun

    with torch.no_grad():
        dumps["actions"] = model.sample_actions(
            inputs["images"],
            inputs["image_mask"],
            inputs["token_ids"],
            inputs["token_mask"],
            inputs["state"],
            inputs["noise"],
            num_steps=num_steps,
        ).numpy()
    return OurRun(
        dumps=dumps,
        order=prefix_stage_order(dump),
        config=policy.config.model_dump(mode="json"),
        reader="vla_edge.archs.importer.import_checkpoint",
    )


def prefix_stage_order(dump: Mapping[str, np.ndarray]) -> list[str]:
    """A VLM-prefix model's intermediates in compute order (``actions`` last)."""
    layers = sorted({int(k.rsplit(".", 1)[1]) for k in dump if k.startswith("prefix_keys.")})
    cache = [f"prefix_{kind}.{i}" for i in layers for kind in ("keys", "values")]
    head = ["vision_features", "prefix_embeddings", "prefix_pad"]
    return [*head, *cache, "first_velocity", "actions"]


__all__ = [
    "CAMERAS",
    "DT_ACTION_S",
    "import_onto_robot",
    "inputs_of",
    "load_policy_model",
    "prefix_model_run",
    "prefix_stage_order",
]
