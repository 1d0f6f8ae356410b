"""SmolVLA against LeRobot's own code: the hook ``vla-edge bench upstream`` reads.

The driver (``upstream_driver.py`` beside this module, run in the side environment) builds
LeRobot's ``SmolVLAPolicy`` at a small size, saves it as LeRobot does and dumps its
intermediates; :func:`run_ours` imports that checkpoint with ``vla-edge import`` and runs
our model on the same inputs. Nothing here imports torch until a function runs.

LeRobot at the pinned commit uses Python 3.12 syntax in a few files; on an older Python
the harness applies :data:`LEROBOT`'s syntax patches to a copy of the source.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from vla_edge.archs.architecture import OurRun, SyntaxPatch, UpstreamHooks


def run_ours(
    arch: str,
    work: Path,
    meta: Mapping[str, Any],
    dump: Mapping[str, np.ndarray],
    num_steps: int,
) -> OurRun:
    """Our SmolVLA imported from the driver's checkpoint, on its inputs.

    The intermediates are dumped under the driver's names; ``vision_features`` is
    compared before the ``sqrt(width)`` scale (upstream's ``embed_image`` returns the
    connector's output; both scale it in the prefix).
    """
    import torch

    from vla_edge.archs.common import ImportOptions
    from vla_edge.archs.upstream_side import (
        import_onto_robot,
        inputs_of,
        load_policy_model,
        prefix_model_run,
    )

    sizes = meta["config"]
    options = ImportOptions(
        vision_heads=sizes["vision"]["heads"], text_heads=sizes["text"]["heads"]
    )
    policy = import_onto_robot(
        Path(meta["checkpoint"]),
        work,
        Path(meta["tokenizer_dir"]),
        options,
        meta["slots"],
        meta["inputs"]["image_mask"],
    )
    model = load_policy_model(policy)
    t = inputs_of(dump)
    out: dict[str, np.ndarray] = {}
    with torch.no_grad():
        vision = model.embed_images(t["images"])
        out["vision_features"] = (vision / math.sqrt(vision.shape[-1])).numpy()
        embs, pad = model.embed_prefix(
            vision, t["image_mask"], t["token_ids"], t["token_mask"], t["state"]
        )
        out["prefix_embeddings"], out["prefix_pad"] = embs.numpy(), pad.numpy()
        keys, values = model.prefix_cache(embs, pad)
        for i, (k, v) in enumerate(zip(keys, values, strict=True)):
            out[f"prefix_keys.{i}"], out[f"prefix_values.{i}"] = k.numpy(), v.numpy()
        time_emb = model.time_embedding(torch.ones(1))
        velocity = model.velocity(model.expert_kv(keys, values), pad, t["noise"], time_emb)
        out["first_velocity"] = velocity.numpy()
    return prefix_model_run(model, t, num_steps, out, policy, dump)


LEROBOT = UpstreamHooks(
    name="lerobot",
    repo="huggingface/lerobot",
    marker="src/lerobot/policies/smolvla/modeling_smolvla.py",
    packages=(
        "transformers==5.5.4",
        "tokenizers==0.22.2",
        "huggingface_hub==1.33.0",
        "httpx==0.29.0",
        "httpcore==1.0.9",
        "draccus==0.11.6",
        "mergedeep==1.3.4",
        "typing_inspect==0.9.0",
        "mypy_extensions==1.2.0",
        "einops==0.8.2",
        "termcolor==3.3.0",
        "gymnasium==1.4.0",
        "typer==0.29.2",
        "num2words==0.5.14",
        "docopt==0.6.2",
        # LeRobot and transformers' SmolVLM processor import torchvision, whose compiled
        # ops need a CUDA build of torch: the side environment carries the pair (run on
        # the CPU) with the CUDA libraries torch loads at import
        "torch==2.14.1",
        "torchvision==0.29.1",
        "nvidia-cuda-runtime==13.0.96",
        "nvidia-cublas==13.1.1.3",
        "nvidia-cuda-cupti==13.0.85",
        "nvidia-cuda-nvrtc==13.0.88",
        "nvidia-cudnn-cu13==9.24.0.43",
        "nvidia-cufft==12.0.0.61",
        "nvidia-cufile==1.15.1.6",
        "nvidia-curand==10.4.0.35",
        "nvidia-cusolver==12.0.4.66",
        "nvidia-cusparse==12.6.3.3",
        "nvidia-cusparselt-cu13==0.8.1",
        "nvidia-nccl-cu13==2.30.7",
        "nvidia-nvjitlink==13.4.92",
        "nvidia-nvshmem-cu13==3.4.5",
        "nvidia-nvtx==13.0.85",
    ),
    driver="upstream_driver.py",
    run_ours=run_ours,
    syntax_patches=(
        SyntaxPatch(
            "src/lerobot/processor/pipeline.py",
            (
                (
                    "class DataProcessorPipeline[TInput, TOutput](HubMixin):",
                    "class DataProcessorPipeline(HubMixin, Generic[TInput, TOutput]):",
                ),
                (
                    "from typing import Any, TypedDict, TypeVar, cast",
                    "from typing import Any, Generic, TypedDict, TypeVar, cast",
                ),
            ),
            "PEP 695 class type parameters -> Generic over the module's TypeVars",
        ),
        SyntaxPatch(
            "src/lerobot/motors/motors_bus.py",
            (
                (
                    "type NameOrID = str | int\ntype Value = int | float\n",
                    "NameOrID = str | int\nValue = int | float\n",
                ),
            ),
            "PEP 695 type statements -> plain aliases",
        ),
        SyntaxPatch(
            "src/lerobot/utils/io_utils.py",
            (
                (
                    "def deserialize_json_into_object[T: JsonLike](fpath: Path, obj: T) -> T:",
                    'T = TypeVar("T", bound=JsonLike)\n\n\n'
                    "def deserialize_json_into_object(fpath: Path, obj: T) -> T:",
                ),
                ("from typing import Any\n", "from typing import Any, TypeVar\n"),
            ),
            "PEP 695 function type parameter -> a bound TypeVar",
        ),
    ),
    pinned_commit="7427f31801f944f5ec9ce53cda02862ce7d1638b",
)
"""LeRobot, for ``smolvla``."""


__all__ = ["LEROBOT", "run_ours"]
