"""π0 and π0.5 against openpi's own code: the hook ``vla-edge bench upstream`` reads.

The driver (``upstream_driver.py`` beside this module, run in the side environment) builds
openpi's ``PI0Pytorch`` at a small size (``--arch pi05`` sets openpi's ``pi05`` flag),
saves it in openpi's converted layout and dumps its intermediates; :func:`run_ours`
imports that checkpoint with ``vla-edge import`` and runs our model on the same inputs.
Nothing here imports torch until a function runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from vla_edge.archs.architecture import OurRun, UpstreamHooks

SPM_VOCAB = 300


def sentencepiece_tokenizer(path: Path, vocab_size: int = SPM_VOCAB) -> Path:
    """A small SentencePiece model with PaliGemma's special ids (pad 0, eos 1, bos 2, unk 3).

    The import checks its ids against the token table; the comparison feeds token ids
    directly, so its pieces do not matter.
    """
    from vla_edge.archs.policy_tokenizer import write_sentencepiece_model

    sentences = [
        "pick up the red block and place it in the bowl",
        "Task: lift the green block, State: 12 128 255 0 7 64 3;\nAction: ",
        "open the drawer, push the button, stack the cubes",
    ]
    return write_sentencepiece_model(path, sentences, vocab_size)


def run_ours(
    arch: str,
    work: Path,
    meta: Mapping[str, Any],
    dump: Mapping[str, np.ndarray],
    num_steps: int,
) -> OurRun:
    """Our π0 / π0.5 (``arch``) imported from the driver's checkpoint, on its inputs.

    The intermediates are dumped under the driver's names.
    """
    import torch

    from vla_edge.archs.common import ImportOptions
    from vla_edge.archs.pi0 import model as pi0_model
    from vla_edge.archs.upstream_side import (
        import_onto_robot,
        inputs_of,
        load_policy_model,
        prefix_model_run,
    )

    tokenizer = sentencepiece_tokenizer(work / "tokenizer" / "tokenizer.model")
    options = ImportOptions(architecture=arch, vision_heads=meta["config"]["vision"]["heads"])
    policy = import_onto_robot(
        Path(meta["checkpoint"]),
        work,
        tokenizer,
        options,
        meta["slots"],
        meta["inputs"]["image_mask"],
    )
    model = load_policy_model(policy)
    t = inputs_of(dump)
    out: dict[str, np.ndarray] = {}
    with torch.no_grad():
        vision = model.embed_images(t["images"])
        out["vision_features"] = vision.numpy()
        embs, pad = model.embed_prefix(vision, t["image_mask"], t["token_ids"], t["token_mask"])
        out["prefix_embeddings"], out["prefix_pad"] = embs.numpy(), pad.numpy()
        keys, values = model.prefix_cache(embs, pad)
        for i, (k, v) in enumerate(zip(keys, values, strict=True)):
            out[f"prefix_keys.{i}"], out[f"prefix_values.{i}"] = k.numpy(), v.numpy()
        width = model.config.expert.width
        time_emb = pi0_model.sinusoidal_time_embedding(torch.ones(1), width)
        velocity = model.velocity(keys, values, pad, t["state"], t["noise"], time_emb)
        out["first_velocity"] = velocity.numpy()
    return prefix_model_run(model, t, num_steps, out, policy, dump)


OPENPI = UpstreamHooks(
    name="openpi",
    repo="Physical-Intelligence/openpi",
    marker="src/openpi/models_pytorch/pi0_pytorch.py",
    packages=(
        "transformers==4.53.2",
        "tokenizers==0.21.4",
        "huggingface_hub==0.36.2",
        # the JAX-side modules openpi's PyTorch model imports (gemma variants, configs)
        "jax==0.5.3",
        "jaxlib==0.5.3",
        "flax==0.10.2",
        "optax==0.2.8",
        "orbax-checkpoint==0.12.8",
        "tensorstore==0.1.86",
        "augmax==0.4.1",
        "einops==0.8.2",
        "jaxtyping==0.2.36",
        "beartype==0.23.1",
        "wadler_lindig==0.1.8",
        "ml_dtypes==0.5.1",
        "opt_einsum==3.4.0",
        "treescope==0.1.10",
        "absl-py==2.5.1",
        "etils==1.15.0",
        "humanize==4.17.0",
        "simplejson==4.3.0",
        "numpydantic==2.0.0",
    ),
    driver="upstream_driver.py",
    run_ours=run_ours,
    overlay=("src/openpi/models_pytorch/transformers_replace", "transformers"),
    pinned_commit="15a9616a00943ada6c20a0f158e3adb39df2ccac",
)
"""openpi, for ``pi0`` and ``pi05`` alike (the driver takes the registered name)."""


__all__ = ["OPENPI", "run_ours", "sentencepiece_tokenizer"]
