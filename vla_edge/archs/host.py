"""What the host side of every architecture shares: its tensors, prompts and contract.

The runners make the host tensors in numpy (:data:`HOST_INPUTS`) from an observation; the
architecture's stages read them (``host:<name>``). This module holds the facts the
architectures, the manifest (:mod:`vla_edge.export.manifest`) and the policy directory
(:mod:`vla_edge.archs.policy_dir`) all read, once, and imports no torch:

* :class:`TensorSpec`: the one declaration of a stage's tensor;
* :data:`STAGE_NAMES`, :data:`HOST_INPUTS`, :data:`HF_TOKENIZER_JSON`;
* the registered prompt formats (each architecture's
  :class:`~vla_edge.archs.architecture.PromptFormat`): :func:`prompt_formats`,
  :func:`tokenizer_kinds`, :func:`implied_prompt`, :func:`holds_state`;
* :func:`image_slots`: a camera map as the manifest's slot list;
* :func:`prefix_flow_contract`: the manifest's fields of a VLM-prefix, flow-matching
  architecture (π0, π0.5, SmolVLA) besides its stages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from vla_edge.core.errors import CameraMapError

STAGE_NAMES = ("vision_encoder", "fusion", "action_head")
"""The stages of an imported (VLM-prefix, flow-matching) architecture, in run order."""
HOST_INPUTS = (
    "images",
    "image_mask",
    "token_ids",
    "token_mask",
    "state",
    "noise",
    "prefix_actions",
    "prefix_mask",
)
"""Tensors the runner's numpy preprocessing makes (a stage input's ``host:<name>``)."""


def prompt_formats(kind: str | None = None, *, policy: bool = False) -> tuple[str, ...]:
    """The registered prompt formats (:data:`vla_edge.archs.registry.PROMPT_FORMATS`).

    Args:
        kind: only those a tokenizer of this kind encodes.
        policy: only those a policy directory may state.
    """
    from vla_edge.archs import registry  # the registry imports this module's users

    return tuple(
        p.name
        for p in registry.PROMPT_FORMATS.values()
        if (kind is None or p.tokenizer == kind) and (p.policy or not policy)
    )


def tokenizer_kinds() -> tuple[str, ...]:
    """The tokenizer kinds some registered prompt format reads, in registration order."""
    from vla_edge.archs import registry

    return tuple(dict.fromkeys(p.tokenizer for p in registry.PROMPT_FORMATS.values()))


def implied_prompt(kind: str) -> str | None:
    """The prompt a manifest of tokenizer ``kind`` without ``host.token_ids.prompt`` means."""
    from vla_edge.archs import registry

    return next(
        (p.name for p in registry.PROMPT_FORMATS.values() if p.tokenizer == kind and p.implied),
        None,
    )


def holds_state(prompt: str | None) -> bool:
    """Whether the registered ``prompt`` holds the state (its ids change per observation)."""
    from vla_edge.archs import registry

    entry = None if prompt is None else registry.prompt_format(prompt)
    return entry is not None and entry.holds_state


HF_TOKENIZER_JSON = "tokenizer.json"
"""The file a ``huggingface`` tokenizer directory must hold."""
TOKENIZER_NAME = "tokenizer.json"
"""A ``wordpiece`` tokenizer's file beside the programs (the bundled model's MiniLM one)."""


@dataclass(frozen=True)
class TensorSpec:
    """One stage input or output: name, shape, dtype (numpy name) and where it comes from.

    The one declaration of a tensor: the architectures' stages declare theirs with it, the
    manifest (:mod:`vla_edge.export.manifest`) records and validates them. ``source`` is
    ``host:<name>``, ``stage:<stage>.<output>`` or ``repeat`` for a stage input, ``output``
    or ``None`` for a stage's own output.
    """

    name: str
    shape: tuple[int, ...]
    dtype: str
    source: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (``source`` left out when ``None``)."""
        out: dict[str, Any] = {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}
        if self.source is not None:
            out["source"] = self.source
        return out


def image_slots(
    slot_names: Sequence[str], camera_map: Mapping[str, str | None]
) -> list[dict[str, Any]]:
    """``[{"name": slot, "camera": robot camera or None}]`` in the checkpoint's slot order.

    Raises:
        CameraMapError: ``camera_map`` names a slot the model lacks, maps no camera, or
            maps one camera twice.
    """
    unknown = sorted(set(camera_map) - set(slot_names))
    if unknown:
        raise CameraMapError(
            f"camera_map slot {unknown[0]!r} is not an image slot of the model; expected "
            f"{list(slot_names)}"
        )
    slots = [{"name": s, "camera": camera_map.get(s)} for s in slot_names]
    cameras = [s["camera"] for s in slots if s["camera"] is not None]
    if not cameras:
        raise CameraMapError(f"camera_map = {dict(camera_map)} maps no robot camera to any slot")
    if len(set(cameras)) != len(cameras):
        raise CameraMapError(f"camera_map = {dict(camera_map)} maps one camera to two slots")
    return slots


def prefix_flow_contract(
    config: Any,
    *,
    architecture: str,
    stage_order: Sequence[str],
    output: str,
    slots: list[dict[str, Any]],
    images: Mapping[str, str],
    tokenizer: Mapping[str, str],
    prompt: str,
    state_dim: int,
    chunk_horizon: int,
    normalisation: Mapping[str, Any],
    joint_names: Sequence[str],
    dt_action_s: float,
    source: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """The manifest's fields besides the stages of a VLM-prefix, flow-matching architecture.

    π0, π0.5 and SmolVLA share the host side: ``[n_slots, 3, S, S]`` images in [-1, 1]
    with a slot mask, token ids and mask of ``max_token_len``, the state at ``state_dim``,
    the noise and the executed prefix at ``[chunk_horizon, action_dim]``. What differs is
    given: the image fitting (``images``: ``resize`` and its options), the tokenizer and
    the prompt format, the state's and the horizon's widths.

    Args:
        config: the architecture's config (``vision.image_size``, ``n_slots``,
            ``max_token_len``, ``action_dim``, ``flow_steps``, ``model_dump``).
        slots: the image slots, each ``{"name", "camera"}`` (``None``: masked).
    """
    size, h, a = config.vision.image_size, chunk_horizon, config.action_dim
    length = config.max_token_len
    f32 = "float32"
    return {
        "architecture": architecture,
        "stage_order": list(stage_order),
        "output": output,
        "host": {
            "images": {
                "shape": [config.n_slots, 3, size, size],
                "dtype": f32,
                "slots": slots,
                "pixel_range": [-1.0, 1.0],
                **images,
            },
            "image_mask": {"shape": [config.n_slots], "dtype": f32},
            "token_ids": {
                "shape": [1, length],
                "dtype": "int64",
                "tokenizer": dict(tokenizer),
                "prompt": prompt,
            },
            "token_mask": {"shape": [1, length], "dtype": f32},
            "state": {"shape": [1, state_dim], "dtype": f32},
            "noise": {"shape": [1, h, a], "dtype": f32},
            "prefix_actions": {"shape": [1, h, a], "dtype": f32},
            "prefix_mask": {"shape": [1, h], "dtype": f32},
        },
        "normalisation": dict(normalisation),
        "joint_names": list(joint_names),
        "action_dim": a,
        "chunk_horizon": h,
        "dt_action_s": float(dt_action_s),
        "flow_steps": config.flow_steps,
        "cameras": [s["camera"] for s in slots if s["camera"] is not None],
        "image_height": size,
        "image_width": size,
        "source": dict(source) if source is not None else {"trained": False},
        "model_config": config.model_dump(mode="json"),
    }
