"""GR00T N1.5 against Isaac-GR00T's own code: the hook ``vla-edge bench upstream`` reads.

The driver (``n15_upstream_driver.py`` beside this module, run in the side environment
with ``PYTHONPATH=SIDE:SOURCE``) builds upstream's ``GR00T_N1_5`` at a small size, saves
it with upstream's ``save_pretrained`` in the N1.5 layout and dumps its intermediates;
:func:`run_ours` reads that directory with
:func:`~vla_edge.archs.groot.n15_checkpoint.read_checkpoint` (every key and shape checked),
loads it with :func:`~vla_edge.archs.groot.checkpoint.load_checkpoint_weights` and runs
our fixed-shape passes on the same inputs. Nothing here imports torch until a function runs.

Both sides start after the image fit and the tokenizer: the driver's pixels are its uint8
images scaled to [-1, 1], and its token ids follow our prompt layout (lead, per image a
label, ``<img>``, the context tokens, ``</img>``, the instruction). What this compares is
the model; the layout's text is checked against the tokenizer's chat template in
``test/test_groot_n15_prompt.py``.

The source is upstream's N1.5-era model files as a public fork of NVIDIA/Isaac-GR00T keeps
them (``peri044/Isaac-GR00T``, whose history holds upstream's up to its PR #415; the pinned
commit is the fork's), in a tree whose ``SOURCES.json`` names each file's repository and
commit: the code index holds no NVIDIA/Isaac-GR00T version of the N1.5 ``gr00t_n1.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from vla_edge.archs.architecture import OurRun, UpstreamHooks
from vla_edge.archs.groot.upstream import EXTRA_TOKEN_SLOTS, STAGES, driver_inputs, our_dumps


def run_ours(
    arch: str,
    work: Path,
    meta: Mapping[str, Any],
    dump: Mapping[str, np.ndarray],
    num_steps: int,
) -> OurRun:
    """Our GR00T N1.5 from the driver's checkpoint directory, on its inputs.

    ``num_steps`` is the checkpoint's own (``num_inference_timesteps``); the images are the
    driver's uint8 pixels scaled to [-1, 1], the instruction its token ids padded to the
    fixed ``max_token_len``; the prompt's fixed ids and slot labels are the driver's.
    """
    import torch

    from vla_edge.archs.groot.checkpoint import load_checkpoint_weights
    from vla_edge.archs.groot.n15_checkpoint import read_checkpoint
    from vla_edge.archs.groot.n15_config import GrootN15Config
    from vla_edge.archs.groot.n15_model import GrootN15Model

    sizes = meta["config"]
    ids = sizes["ids"]
    text_ids = int(meta["inputs"]["text_ids"])
    defaults = GrootN15Config.tiny(
        timestep_channels=256,
        max_token_len=text_ids + EXTRA_TOKEN_SLOTS,
        image_slots=tuple(meta["slots"]),
        lead_token_ids=tuple(ids["lead"]),
        slot_label_ids=tuple(tuple(label) for label in sizes["labels"]),
        image_token_id=ids["image"],
        image_start_id=ids["start"],
        image_end_id=ids["end"],
    )
    ckpt = read_checkpoint(
        meta["checkpoint"], embodiment=meta["embodiment"]["tag"], defaults=defaults
    )
    config = ckpt.config
    model = GrootN15Model(config).eval()
    load_checkpoint_weights(ckpt, model)
    host = driver_inputs(meta, dump, config.max_token_len)
    images, image_mask, token_ids, token_mask, state, _ = host
    with torch.no_grad():
        tokens = model.embed_images(images)
        feats, pad = model.backbone_features(tokens, image_mask, token_ids, token_mask)
        fused = model.fuse(tokens, image_mask, token_ids, token_mask, state)
        dumps = our_dumps(model, feats, pad, fused, host)
    return OurRun(
        dumps=dumps,
        order=list(STAGES),
        config=config.model_dump(mode="json"),
        reader="vla_edge.archs.groot.n15_checkpoint.read_checkpoint, load_checkpoint_weights",
    )


ISAAC_GROOT_N15 = UpstreamHooks(
    name="isaac_gr00t_n15",
    repo="NVIDIA/Isaac-GR00T",
    marker="gr00t/model/gr00t_n1.py",
    packages=(
        "transformers==4.51.3",
        "tokenizers==0.21.1",
        "huggingface_hub==0.30.2",
        # what gr00t's model modules import beyond torch and numpy, at upstream's pins
        "diffusers==0.30.2",
        "peft==0.17.0",
        "accelerate==1.2.1",
        "dm-tree==0.1.8",
        "einops==0.8.1",
    ),
    driver="n15_upstream_driver.py",
    run_ours=run_ours,
    source_paths=(".",),
    pinned_commit="4af2b622892f7dcb5aae5a3fb70bcb02dc217b96",
    source_manifest="SOURCES.json",
)
"""Isaac-GR00T at the N1.5 release (a fork's copy, module docstring), for ``groot_n15``."""


__all__ = ["ISAAC_GROOT_N15", "run_ours"]
