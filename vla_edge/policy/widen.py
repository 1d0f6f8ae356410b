"""``vla-edge widen``: a policy's copy for twice the image size, computing the same.

The copy has a stride-4 first conv (``vision_first_stride: 4``) made from the
source's stride-2 one by :func:`vla_edge.policy.vision.widen_first_conv`;
every other weight and the normalisation statistics are the source's. On a
128x128 image it gives what the 64x64 source gives on that image averaged over
2x2 pixels. It is the starting point of a fine-tune at the higher resolution,
and can drive recovery episodes recorded at that resolution before it. The
source's training probes (which read the visual tokens and the context, whose
shapes widening keeps) go with the copy, so such a fine-tune starts with them
fitted; its optimizer state and raw (non-averaged) weights do not.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from vla_edge.core.errors import ConfigError, VlaEdgeError
from vla_edge.policy.model import (
    TRAINED_STAGES,
    VlaPolicy,
    checkpoint_train_modules,
    policy_from_payload,
    read_checkpoint,
    save_checkpoint,
)
from vla_edge.policy.vision import WIDENING_KEYS, widen_first_conv

FACTOR = 2


def widen_policy(policy: VlaPolicy, factor: int = FACTOR) -> VlaPolicy:
    """The ``factor``x-input copy of ``policy`` (which must have a stride-2 first conv).

    Raises:
        ConfigError: the first conv is already stride 4, or ``factor`` is not 1 or 2.
    """
    config = policy.config
    if config.vision_first_stride * factor not in (2, 4):
        raise ConfigError(
            f"vision_first_stride={config.vision_first_stride}: only a stride-2 first conv "
            f"can be widened (x2, to stride 4)"
        )
    wide_config = config.model_copy(
        update={key: getattr(config, key) * factor for key in WIDENING_KEYS}
    )
    wide = VlaPolicy(type(config).model_validate(wide_config.model_dump()), policy.stats)
    states = policy.stage_state_dicts()
    for name in TRAINED_STAGES:
        state = states[name]
        if name == "vision_encoder":
            state = widen_first_conv(state, factor)
        getattr(wide, name).load_state_dict(state)
    return wide.eval()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``vla-edge widen``."""
    parser.add_argument("--policy", required=True, help="bundled | CKPT.pt (stride-2 first conv)")
    parser.add_argument("--out", required=True, help="checkpoint to write (.pt)")


def run(args: argparse.Namespace) -> int:
    """Write the widened copy; 1 with a named error on a bad source."""
    from vla_edge.runners.factory import resolve_policy_path

    try:
        source_path = resolve_policy_path(args.policy)
        payload = read_checkpoint(source_path)
        source = policy_from_payload(payload, source_path)
        wide = widen_policy(source)
        stored = checkpoint_train_modules(payload, source_path)
    except VlaEdgeError as exc:
        print(f"vla-edge widen: {type(exc).__name__}: {exc}")
        return 1
    info: dict[str, Any] = source.checkpoint_info
    probes = {name: state for name, state in stored.items() if name.endswith("_probe")}
    digest = save_checkpoint(
        Path(args.out),
        wide,
        train_config=info.get("train_config"),
        step=int(info.get("step") or 0),
        meta={
            **(info.get("meta") or {}),
            "widened_from": {"path": str(source_path), "weights_sha256": info["weights_sha256"]},
        },
        train_modules=probes or None,
    )
    c = wide.config
    print(f"wrote {args.out}: {c.image_height}x{c.image_width} input, weights sha256 {digest[:12]}")
    return 0
