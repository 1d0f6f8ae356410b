"""The openpi side of ``vla-edge bench upstream --arch pi0|pi05``, run as a script.

Named by :mod:`vla_edge.archs.pi0.upstream` and run by :mod:`vla_edge.bench.upstream` in
a side environment (``PYTHONPATH=SIDE:OPENPI/src``: transformers 4.53.2 with openpi's
``transformers_replace`` files copied over it, openpi's JAX-side imports, torch from the
caller's environment). It imports openpi, torch, numpy and safetensors only, never
``vla_edge``, so the two transformers versions never meet in one process.

What it does, all through openpi's own code:

1. builds ``PI0Pytorch`` from openpi's ``Pi0Config`` (``dummy`` Gemma variants for the
   language model and the expert, float32, no ``torch.compile``). openpi's PyTorch
   code takes every size from the config except SigLIP's, which ``gemma_pytorch`` fixes
   at So400m with a 2048-wide projector; at the small size the ``paligemma`` submodule
   is rebuilt from its own config with a small SigLIP and the projector at the
   language model's width (``--vision-*``), so the rest of the model stays openpi's;
2. fills every parameter with seeded random values (``--seed``);
3. saves the checkpoint as openpi's JAX-to-PyTorch conversion writes it:
   ``safetensors.torch.save_model`` → ``model.safetensors``, ``config.json`` with the
   converter's fields, and the statistics given in ``--stats`` through
   ``openpi.shared.normalize.save`` under ``assets/<asset_id>/``;
4. loads that file back into a fresh model (``safetensors.torch.load_model``, strict, as
   openpi's ``load_pytorch``) and runs ``sample_actions`` on a seeded observation with
   explicit noise, dumping the observation, the noise, the actions and the intermediates
   (per-slot image features, prefix embeddings and pad mask, each layer's prefix keys and
   values, the first velocity at ``t = 1``) into ``upstream.npz``, and what was run into
   ``upstream.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import types
from pathlib import Path

import numpy as np
import safetensors.torch
import torch

SLOT_MASK = (True, True, False)
"""Which of openpi's three image slots are present (the third is masked out)."""
REAL_TOKENS = 11
"""Real prompt tokens; the rest of ``max_token_len`` is padding."""
TOKEN_ID_RANGE = (4, 400)


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The driver's arguments."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", choices=("pi0", "pi05"), required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--stats", type=Path, required=True, help="JSON: state, actions")
    parser.add_argument("--asset-id", default="upstream")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--action-horizon", type=int, default=10)
    parser.add_argument("--num-steps", type=int, default=10)
    parser.add_argument("--vision-hidden", type=int, default=32)
    parser.add_argument("--vision-depth", type=int, default=2)
    parser.add_argument("--vision-heads", type=int, default=4)
    parser.add_argument("--vision-mlp", type=int, default=64)
    return parser.parse_args(argv)


def build_model(args: argparse.Namespace) -> torch.nn.Module:
    """``PI0Pytorch`` at the small size (initialised, not yet randomised)."""
    from openpi.models import pi0_config
    from openpi.models_pytorch.pi0_pytorch import PI0Pytorch
    from transformers import PaliGemmaForConditionalGeneration

    config = pi0_config.Pi0Config(
        pi05=args.arch == "pi05",
        paligemma_variant="dummy",
        action_expert_variant="dummy",
        action_horizon=args.action_horizon,
        dtype="float32",
        pytorch_compile_mode=None,
    )
    model = PI0Pytorch(config)
    pwe = model.paligemma_with_expert
    hf = pwe.paligemma.config
    vision = hf.vision_config
    vision.hidden_size = args.vision_hidden
    vision.num_hidden_layers = args.vision_depth
    vision.num_attention_heads = args.vision_heads
    vision.intermediate_size = args.vision_mlp
    vision.projection_dim = hf.text_config.hidden_size
    hf.projection_dim = hf.text_config.hidden_size
    pwe.paligemma = PaliGemmaForConditionalGeneration(config=hf)
    pwe.to_bfloat16_for_selected_params("float32")
    return model.eval()


def randomise(model: torch.nn.Module, seed: int) -> None:
    """Every parameter drawn from one seeded generator, in name order.

    Matrices (and the patch convolution, the embeddings) ``N(0, 1/fan_in)``; LayerNorm
    scales ``1 + N(0, 0.1²)``; every other vector (biases, Gemma's RMSNorm offsets)
    ``N(0, 0.1²)``. Activations stay of order one through every layer.
    """
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda item: item[0]):
            draw = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if p.ndim >= 2:
                value = draw / math.sqrt(p[0].numel())
            elif "vision_tower" in name and ("layer_norm" in name or "layernorm" in name):
                value = 1.0 + 0.1 * draw
            else:
                value = 0.1 * draw
            p.copy_(value.to(p.dtype))


def save_checkpoint(model: torch.nn.Module, args: argparse.Namespace, ckpt: Path) -> None:
    """Openpi's converted layout, written as its converter writes it."""
    from openpi.shared import normalize

    ckpt.mkdir(parents=True, exist_ok=True)
    safetensors.torch.save_model(model, str(ckpt / "model.safetensors"))
    c = model.config
    config = {
        "action_dim": c.action_dim,
        "action_horizon": c.action_horizon,
        "paligemma_variant": c.paligemma_variant,
        "action_expert_variant": c.action_expert_variant,
        "precision": "float32",
    }
    (ckpt / "config.json").write_text(json.dumps(config, indent=2))
    parts = json.loads(args.stats.read_text())
    stats = {
        name: normalize.NormStats(**{k: np.asarray(v, np.float32) for k, v in part.items()})
        for name, part in parts.items()
    }
    normalize.save(ckpt / "assets" / args.asset_id, stats)


def observation(model: torch.nn.Module, seed: int) -> dict[str, np.ndarray]:
    """The fixed inputs: three 224² images in [-1, 1], masks, tokens, state and noise."""
    from openpi.models_pytorch import preprocessing_pytorch as pre

    c = model.config
    rng = np.random.default_rng(seed + 1)
    n_slots, (height, width) = len(pre.IMAGE_KEYS), pre.IMAGE_RESOLUTION
    tokens = np.zeros((1, c.max_token_len), np.int64)
    tokens[0, :REAL_TOKENS] = rng.integers(*TOKEN_ID_RANGE, size=REAL_TOKENS)
    return {
        "images": rng.uniform(-1.0, 1.0, (n_slots, 3, height, width)).astype(np.float32),
        "image_mask": np.array(SLOT_MASK[:n_slots], bool),
        "token_ids": tokens,
        "token_mask": np.arange(c.max_token_len)[None, :] < REAL_TOKENS,
        "state": rng.standard_normal((1, c.action_dim)).astype(np.float32),
        "noise": rng.standard_normal((1, c.action_horizon, c.action_dim)).astype(np.float32),
    }


def run(model: torch.nn.Module, inputs: dict[str, np.ndarray], num_steps: int) -> dict:
    """``sample_actions`` and the intermediates, each through openpi's own methods."""
    from openpi.models_pytorch import preprocessing_pytorch as pre
    from openpi.models_pytorch.pi0_pytorch import make_att_2d_masks

    t = {k: torch.from_numpy(v) for k, v in inputs.items()}
    obs = types.SimpleNamespace(
        images={key: t["images"][i : i + 1] for i, key in enumerate(pre.IMAGE_KEYS)},
        image_masks={key: t["image_mask"][i : i + 1] for i, key in enumerate(pre.IMAGE_KEYS)},
        state=t["state"],
        tokenized_prompt=t["token_ids"],
        tokenized_prompt_mask=t["token_mask"],
        token_ar_mask=None,
        token_loss_mask=None,
    )
    out: dict[str, np.ndarray] = {}
    with torch.no_grad():
        images, img_masks, tokens, token_masks, state = model._preprocess_observation(
            obs, train=False
        )
        pwe = model.paligemma_with_expert
        out["vision_features"] = torch.cat([pwe.embed_image(img) for img in images]).numpy()
        embs, pad, att = model.embed_prefix(images, img_masks, tokens, token_masks)
        out["prefix_embeddings"] = embs.numpy()
        out["prefix_pad"] = pad.numpy()
        mask = model._prepare_attention_masks_4d(make_att_2d_masks(pad, att))
        pwe.paligemma.language_model.config._attn_implementation = "eager"
        _, cache = pwe.forward(
            attention_mask=mask,
            position_ids=torch.cumsum(pad, dim=1) - 1,
            past_key_values=None,
            inputs_embeds=[embs, None],
            use_cache=True,
        )
        for i in range(len(cache.key_cache)):
            out[f"prefix_keys.{i}"] = cache.key_cache[i].numpy()
            out[f"prefix_values.{i}"] = cache.value_cache[i].numpy()
        one = torch.tensor(1.0, dtype=torch.float32).expand(state.shape[0])
        out["first_velocity"] = model.denoise_step(state, pad, cache, t["noise"], one).numpy()
        actions = model.sample_actions(
            torch.device("cpu"), obs, noise=t["noise"].clone(), num_steps=num_steps
        )
    out["actions"] = actions.numpy()
    return out


def main(argv: list[str] | None = None) -> int:
    """Build, save, reload, run; write ``upstream.npz`` and ``upstream.json`` in ``--out``."""
    import transformers
    from openpi.models_pytorch import preprocessing_pytorch as pre

    args = parse_args(sys.argv[1:] if argv is None else argv)
    torch.manual_seed(args.seed)
    ckpt = args.out / "checkpoint"
    model = build_model(args)
    randomise(model, args.seed)
    save_checkpoint(model, args, ckpt)
    del model
    model = build_model(args)
    safetensors.torch.load_model(model, str(ckpt / "model.safetensors"), strict=True)
    inputs = observation(model, args.seed)
    dumps = run(model, inputs, args.num_steps)
    np.savez(args.out / "upstream.npz", **{f"input.{k}": v for k, v in inputs.items()}, **dumps)
    c = model.config
    vision = model.paligemma_with_expert.paligemma.config.vision_config
    meta = {
        "upstream": "openpi",
        "model_class": "openpi.models_pytorch.pi0_pytorch.PI0Pytorch",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "checkpoint": str(ckpt),
        "config": {
            "pi05": c.pi05,
            "paligemma_variant": c.paligemma_variant,
            "action_expert_variant": c.action_expert_variant,
            "action_dim": c.action_dim,
            "action_horizon": c.action_horizon,
            "max_token_len": c.max_token_len,
            "dtype": c.dtype,
            "num_steps": args.num_steps,
            "vision": {
                "hidden": vision.hidden_size,
                "depth": vision.num_hidden_layers,
                "heads": vision.num_attention_heads,
                "mlp": vision.intermediate_size,
                "image_size": vision.image_size,
                "patch_size": vision.patch_size,
                "projection_dim": vision.projection_dim,
            },
            "parameters": sum(p.numel() for p in model.parameters()),
        },
        "seed": args.seed,
        "notes": [
            "gemma_pytorch fixes SigLIP at So400m with a 2048-wide projector whatever the "
            "variant; at this size the paligemma submodule is rebuilt from its own config "
            "with the SigLIP sizes above and the projector at the language model's width",
            "saved with safetensors.torch.save_model and reloaded with "
            "safetensors.torch.load_model (strict) before running",
        ],
        "slots": list(pre.IMAGE_KEYS),
        "inputs": {"image_mask": inputs["image_mask"].tolist(), "real_tokens": REAL_TOKENS},
    }
    (args.out / "upstream.json").write_text(json.dumps(meta, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
