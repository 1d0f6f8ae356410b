"""GR00T N1.7 against Isaac-GR00T's own code: the hook ``vla-edge bench upstream`` reads.

The driver (``upstream_driver.py`` beside this module, run in the side environment with
``PYTHONPATH=SIDE:SOURCE``) builds upstream's ``Gr00tN1d7`` at a small size, saves it with
upstream's ``save_pretrained`` in the N1.7 layout and dumps its intermediates;
:func:`run_ours` reads that directory with :func:`~vla_edge.archs.groot.checkpoint.read_checkpoint`
(every key and shape checked), loads it with
:func:`~vla_edge.archs.groot.checkpoint.load_checkpoint_weights` and runs our fixed-shape
passes on the same inputs. Nothing here imports torch until a function runs.

Both sides start after the image fit: the driver makes the model's pixels from uint8
images already at the vision size (``Qwen2VLImageProcessor`` without resizing, upstream's
evaluation transform not run), and :func:`run_ours` scales the same uint8 images to
[-1, 1] without the runner's ``center_crop`` fit. The fit itself is checked against
OpenCV, step by step, in ``test/test_groot_image_fit.py``.

The source may be a tree rebuilt file by file (Isaac-GR00T's repository is large): its
``SOURCES.json`` names each file's repository and commit, and the bench's JSON records it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from vla_edge.archs.architecture import OurRun, UpstreamHooks

STAGES = ("backbone_features", "vl_tokens", "state_tokens", "first_velocity", "actions")
"""The driver's intermediates in the order the model computes them."""
EXTRA_TOKEN_SLOTS = 3
"""``max_token_len`` beyond the instruction's ids (padding the fixed shape carries)."""


def driver_inputs(
    meta: Mapping[str, Any], dump: Mapping[str, np.ndarray], max_token_len: int
) -> tuple[Any, ...]:
    """The driver's inputs as our passes take them, for N1.7 and N1.5 alike.

    ``(images, image_mask, token_ids, token_mask, state, noise)``: the uint8 images scaled
    to [-1, 1] (mean 0.5, std 0.5), the slot mask, the instruction's ids right-padded to
    ``max_token_len`` with their mask, the state ``[1, S]`` and the initial noise.
    """
    import torch

    text_ids = int(meta["inputs"]["text_ids"])
    images = torch.from_numpy(dump["input.images_uint8"]).permute(0, 3, 1, 2).float()
    images = (images / 255.0 - 0.5) / 0.5
    image_mask = torch.tensor(meta["inputs"]["image_mask"], dtype=torch.float32)
    token_ids = torch.zeros(1, max_token_len, dtype=torch.long)
    token_ids[0, :text_ids] = torch.from_numpy(dump["input.text_ids"])
    token_mask = (torch.arange(max_token_len) < text_ids)[None].float()
    state = torch.from_numpy(dump["input.state"])[:, 0]
    noise = torch.from_numpy(dump["noise"])
    return images, image_mask, token_ids, token_mask, state, noise


def our_dumps(
    model: Any, features: Any, pad: Any, fused: tuple[Any, ...], host: tuple[Any, ...]
) -> dict[str, np.ndarray]:
    """Our intermediates under :data:`STAGES`' names, for N1.7 and N1.5 alike (no grad).

    ``features`` and ``pad``: the backbone's features and the sequence's pad; ``fused``:
    the fusion's outputs as ``velocity`` takes them (the VL tokens first, the state token
    last); ``host``: :func:`driver_inputs`. The pad tokens are left out of the sequences;
    the first velocity is at ``t = 0`` on the driver's noise.
    """
    import torch

    from vla_edge.archs.groot.layers import sinusoid, timestep_features

    c = model.config
    keep = pad[0] != 0
    first = torch.zeros(1)
    times = (timestep_features(first, c.timestep_channels), sinusoid(first, c.input_embedding_dim))
    return {
        "backbone_features": features[:, keep].numpy(),
        "vl_tokens": fused[0][:, keep].numpy(),
        "state_tokens": fused[-1].numpy(),
        "first_velocity": model.velocity(*fused, host[-1], *times, c.embodiment_id).numpy(),
        "actions": model.sample_actions(*host).numpy(),
    }


def run_ours(
    arch: str,
    work: Path,
    meta: Mapping[str, Any],
    dump: Mapping[str, np.ndarray],
    num_steps: int,
) -> OurRun:
    """Our GR00T from the driver's checkpoint directory, on its inputs.

    ``num_steps`` is the checkpoint's own (``num_inference_timesteps``); the images are the
    driver's uint8 pixels scaled to [-1, 1] as Qwen3-VL's processor does (mean 0.5, std
    0.5), the instruction its token ids padded to the fixed ``max_token_len``.
    """
    import torch

    from vla_edge.archs.groot import GrootConfig, GrootModel
    from vla_edge.archs.groot.checkpoint import load_checkpoint_weights, read_checkpoint

    text_ids = int(meta["inputs"]["text_ids"])
    defaults = GrootConfig.tiny(timestep_channels=256, max_token_len=text_ids + EXTRA_TOKEN_SLOTS)
    ckpt = read_checkpoint(
        meta["checkpoint"], embodiment=meta["embodiment"]["tag"], defaults=defaults
    )
    config = ckpt.config
    model = GrootModel(config).eval()
    load_checkpoint_weights(ckpt, model)
    host = driver_inputs(meta, dump, config.max_token_len)
    images, image_mask, token_ids, token_mask, state, _ = host
    with torch.no_grad():
        tokens, deep = model.embed_images(images)
        feats, pad = model.language_features(tokens, deep, image_mask, token_ids, token_mask)
        fused = model.fuse(tokens, deep, image_mask, token_ids, token_mask, state)
        dumps = our_dumps(model, feats, pad, fused, host)
    return OurRun(
        dumps=dumps,
        order=list(STAGES),
        config=config.model_dump(mode="json"),
        reader="vla_edge.archs.groot.checkpoint.read_checkpoint, load_checkpoint_weights",
    )


ISAAC_GROOT = UpstreamHooks(
    name="isaac_gr00t",
    repo="NVIDIA/Isaac-GR00T",
    marker="gr00t/model/gr00t_n1d7/gr00t_n1d7.py",
    packages=(
        "transformers==4.57.6",
        "tokenizers==0.22.1",
        "huggingface_hub==0.36.2",
        # what gr00t's model modules import beyond torch and numpy, at upstream's pins
        "diffusers==0.35.1",
        "dm-tree==0.1.8",
        "tyro==0.9.17",
        "docstring-parser==0.17.0",
        "shtab==1.7.2",
        "typeguard==4.4.4",
    ),
    driver="upstream_driver.py",
    run_ours=run_ours,
    source_paths=(".",),
    pinned_commit="2d1e82fe527104d2510a87ba74c37126ab90e58b",
    source_manifest="SOURCES.json",
)
"""Isaac-GR00T, for ``groot`` (N1.7)."""


__all__ = ["ISAAC_GROOT", "STAGES", "driver_inputs", "our_dumps", "run_ours"]
