"""The LeRobot side of ``vla-edge bench upstream --arch smolvla``, run as a script.

Named by :mod:`vla_edge.archs.smolvla.upstream` and run by :mod:`vla_edge.bench.upstream`
in a side environment (``PYTHONPATH=SIDE:LEROBOT/src``: LeRobot's pinned transformers
and the packages LeRobot imports that the caller's environment lacks). It imports
LeRobot, transformers, torch, numpy and safetensors only, never ``vla_edge``, so the two
transformers versions never meet in one process.

What it does, all through LeRobot's own code:

1. writes a small SmolVLM2-shaped backbone folder (``config.json`` of a
   ``SmolVLMConfig``, a ``SmolVLMProcessor`` whose tokenizer has SmolVLM2's image special
   tokens), because ``SmolVLAPolicy`` reads its backbone's config and processor by name
   (``vlm_model_name``) and the published one is 500M parameters behind a hub;
2. builds ``SmolVLAPolicy`` from ``SmolVLAConfig`` with ``vlm_model_name`` naming that
   folder, ``load_vlm_weights=False``, and fills every parameter with seeded random values;
3. saves it as LeRobot does: ``policy.save_pretrained`` (``config.json``,
   ``model.safetensors``) and the pre/post-processors of
   ``make_smolvla_pre_post_processors`` with the statistics in ``--stats``;
4. loads it back (``SmolVLAPolicy.from_pretrained``) and runs ``VLAFlowMatching``'s
   ``sample_actions`` on a seeded observation with explicit noise, dumping the
   observation, the noise, the actions and the intermediates (per-slot image features from
   ``embed_image``, the prefix embeddings and pad mask, each layer's prefix keys and
   values, the first velocity at ``t = 1``) into ``upstream.npz``, and what was run into
   ``upstream.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

SLOTS = ("observation.images.agentview", "observation.images.wrist")
"""The policy's image features, in prefix order."""
IMAGE_SPECIAL_TOKENS = {
    "fake_image_token": "<fake_token_around_image>",
    "global_image_token": "<global-img>",
    "image_token": "<image>",
    "end_of_utterance_token": "<end_of_utterance>",
}
"""SmolVLM2's image special tokens, which SmolVLA's constructor looks up."""
WORDS = "pick up the red green block and place it in bowl open drawer push button stack cubes"
REAL_TOKENS = 11
"""Real prompt tokens; the rest of the prompt is padding."""


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The driver's arguments (sizes default to the small test size)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", choices=("smolvla",), required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--stats", type=Path, required=True, help="JSON: state, actions")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--action-horizon", type=int, default=10)
    parser.add_argument("--num-steps", type=int, default=10)
    parser.add_argument("--text-width", type=int, default=64)
    parser.add_argument("--text-depth", type=int, default=6)
    parser.add_argument("--text-heads", type=int, default=4)
    parser.add_argument("--text-kv-heads", type=int, default=2)
    parser.add_argument("--text-mlp", type=int, default=128)
    parser.add_argument("--vocab-size", type=int, default=1024)
    parser.add_argument("--vlm-layers", type=int, default=4)
    parser.add_argument("--vision-hidden", type=int, default=32)
    parser.add_argument("--vision-depth", type=int, default=2)
    parser.add_argument("--vision-heads", type=int, default=4)
    parser.add_argument("--vision-mlp", type=int, default=64)
    parser.add_argument("--patch-size", type=int, default=8)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--scale-factor", type=int, default=2)
    parser.add_argument("--max-token-len", type=int, default=16)
    return parser.parse_args(argv)


def write_backbone(folder: Path, args: argparse.Namespace) -> Path:
    """A SmolVLM2-shaped backbone folder: the model config and the processor."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import (
        PreTrainedTokenizerFast,
        SmolVLMConfig,
        SmolVLMImageProcessor,
        SmolVLMProcessor,
        SmolVLMVideoProcessor,
    )

    specials = ["<pad>", "<unk>", *IMAGE_SPECIAL_TOKENS.values()]
    vocab = {token: i for i, token in enumerate([*specials, *WORDS.split()])}
    word_level = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    word_level.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=word_level,
        pad_token="<pad>",
        unk_token="<unk>",
        extra_special_tokens=IMAGE_SPECIAL_TOKENS,
    )
    edge = {"longest_edge": args.image_size}
    image_processor = SmolVLMImageProcessor(
        do_image_splitting=False, size=edge, max_image_size=edge
    )
    tokens_per_image = (args.image_size // args.patch_size // args.scale_factor) ** 2
    processor = SmolVLMProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=SmolVLMVideoProcessor(size=edge, max_image_size=edge),
        image_seq_len=tokens_per_image,
    )
    head_dim = args.text_width // args.text_heads
    config = SmolVLMConfig(
        text_config={
            "model_type": "llama",
            "hidden_size": args.text_width,
            "intermediate_size": args.text_mlp,
            "num_hidden_layers": args.text_depth,
            "num_attention_heads": args.text_heads,
            "num_key_value_heads": args.text_kv_heads,
            "head_dim": head_dim,
            "vocab_size": args.vocab_size,
            "rms_norm_eps": 1e-5,
        },
        vision_config={
            "hidden_size": args.vision_hidden,
            "intermediate_size": args.vision_mlp,
            "num_hidden_layers": args.vision_depth,
            "num_attention_heads": args.vision_heads,
            "patch_size": args.patch_size,
            "image_size": args.image_size,
        },
        scale_factor=args.scale_factor,
    )
    folder.mkdir(parents=True, exist_ok=True)
    processor.save_pretrained(folder)
    config.save_pretrained(folder)
    return folder


def policy_config(args: argparse.Namespace, backbone: Path, stats: dict) -> object:
    """``SmolVLAConfig`` at the small size, its features as wide as the statistics."""
    from lerobot.configs.types import FeatureType, PolicyFeature
    from lerobot.policies.smolvla.configuration_smolvla import SmolVLAConfig

    state_dim = len(stats["state"]["mean"])
    action_dim = len(stats["actions"]["mean"])
    image = PolicyFeature(type=FeatureType.VISUAL, shape=(3, args.image_size, args.image_size))
    return SmolVLAConfig(
        vlm_model_name=str(backbone),
        load_vlm_weights=False,
        num_vlm_layers=args.vlm_layers,
        chunk_size=args.action_horizon,
        n_action_steps=args.action_horizon,
        num_steps=args.num_steps,
        resize_imgs_with_padding=(args.image_size, args.image_size),
        tokenizer_max_length=args.max_token_len,
        device="cpu",
        input_features={
            "observation.state": PolicyFeature(type=FeatureType.STATE, shape=(state_dim,)),
            **{slot: image for slot in SLOTS},
        },
        output_features={"action": PolicyFeature(type=FeatureType.ACTION, shape=(action_dim,))},
    )


def randomise(model: torch.nn.Module, seed: int) -> None:
    """Every parameter drawn from one seeded generator, in name order.

    Matrices ``N(0, 1/fan_in)``; norm scales (LayerNorm, Llama's RMSNorm multiply by
    their weight) ``1 + N(0, 0.1²)``; other vectors (biases) ``N(0, 0.1²)``.
    """
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters(), key=lambda item: item[0]):
            draw = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if p.ndim >= 2:
                value = draw / float(p[0].numel()) ** 0.5
            elif "norm" in name and name.endswith("weight"):
                value = 1.0 + 0.1 * draw
            else:
                value = 0.1 * draw
            p.copy_(value.to(p.dtype))


def save(policy: object, config: object, stats: dict, ckpt: Path) -> None:
    """LeRobot's pretrained layout: the policy and its processors with the statistics."""
    from lerobot.policies.smolvla.processor_smolvla import make_smolvla_pre_post_processors

    policy.save_pretrained(ckpt)
    dataset_stats = {
        "observation.state": {k: torch.tensor(v) for k, v in stats["state"].items()},
        "action": {k: torch.tensor(v) for k, v in stats["actions"].items()},
    }
    pre, post = make_smolvla_pre_post_processors(config, dataset_stats=dataset_stats)
    pre.save_pretrained(ckpt)
    post.save_pretrained(ckpt)


def observation(config: object, seed: int) -> dict[str, np.ndarray]:
    """The fixed inputs: images in [-1, 1] at the encoder's size, tokens, state and noise."""
    rng = np.random.default_rng(seed + 1)
    size = config.resize_imgs_with_padding[0]
    length = config.tokenizer_max_length
    tokens = np.zeros((1, length), np.int64)
    tokens[0, :REAL_TOKENS] = rng.integers(6, 6 + len(WORDS.split()), size=REAL_TOKENS)
    horizon, width = config.chunk_size, config.max_action_dim
    return {
        "images": rng.uniform(-1.0, 1.0, (len(SLOTS), 3, size, size)).astype(np.float32),
        "image_mask": np.ones(len(SLOTS), bool),
        "token_ids": tokens,
        "token_mask": np.arange(length)[None, :] < REAL_TOKENS,
        "state": rng.standard_normal((1, config.max_state_dim)).astype(np.float32),
        "noise": rng.standard_normal((1, horizon, width)).astype(np.float32),
    }


def run(flow: torch.nn.Module, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``sample_actions`` and the intermediates, each through LeRobot's own methods."""
    from lerobot.policies.smolvla.modeling_smolvla import make_att_2d_masks

    t = {k: torch.from_numpy(v) for k, v in inputs.items()}
    images = [t["images"][i : i + 1] for i in range(t["images"].shape[0])]
    masks = [t["image_mask"][i : i + 1] for i in range(t["image_mask"].shape[0])]
    tokens, token_mask, state = t["token_ids"], t["token_mask"], t["state"]
    out: dict[str, np.ndarray] = {}
    with torch.no_grad():
        vlm = flow.vlm_with_expert
        out["vision_features"] = torch.cat([vlm.embed_image(img) for img in images]).numpy()
        embs, pad, att = flow.embed_prefix(images, masks, tokens, token_mask, state=state)
        out["prefix_embeddings"], out["prefix_pad"] = embs.numpy(), pad.numpy()
        _, cache = vlm.forward(
            attention_mask=make_att_2d_masks(pad, att),
            position_ids=torch.cumsum(pad, dim=1) - 1,
            past_key_values=None,
            inputs_embeds=[embs, None],
            use_cache=True,
        )
        for i, layer in enumerate(cache.layers):
            out[f"prefix_keys.{i}"] = layer.keys.clone().numpy()
            out[f"prefix_values.{i}"] = layer.values.clone().numpy()
        one = torch.ones(state.shape[0], dtype=torch.float32)
        velocity = flow.denoise_step(pad, cache, t["noise"].clone(), one)
        out["first_velocity"] = velocity.numpy()
        actions = flow.sample_actions(images, masks, tokens, token_mask, state, noise=t["noise"])
    out["actions"] = actions.numpy()
    return out


def main(argv: list[str] | None = None) -> int:
    """Build, save, reload, run; write ``upstream.npz`` and ``upstream.json`` in ``--out``."""
    import transformers
    from lerobot.policies.smolvla.modeling_smolvla import SmolVLAPolicy

    args = parse_args(sys.argv[1:] if argv is None else argv)
    stats = json.loads(args.stats.read_text())
    backbone = write_backbone(args.out / "backbone", args)
    config = policy_config(args, backbone, stats)
    torch.manual_seed(args.seed)
    policy = SmolVLAPolicy(config)
    randomise(policy, args.seed)
    ckpt = args.out / "checkpoint"
    save(policy, config, stats, ckpt)
    del policy
    policy = SmolVLAPolicy.from_pretrained(ckpt).eval()
    inputs = observation(policy.config, args.seed)
    dumps = run(policy.model, inputs)
    np.savez(args.out / "upstream.npz", **{f"input.{k}": v for k, v in inputs.items()}, **dumps)
    c = policy.config
    vlm = policy.model.vlm_with_expert
    meta = {
        "upstream": "lerobot",
        "model_class": "lerobot.policies.smolvla.modeling_smolvla.SmolVLAPolicy",
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "checkpoint": str(ckpt),
        "tokenizer_dir": str(backbone),
        "config": {
            "text": {
                "width": args.text_width,
                "depth": args.text_depth,
                "heads": args.text_heads,
                "kv_heads": args.text_kv_heads,
                "mlp": args.text_mlp,
                "vocab_size": args.vocab_size,
            },
            "vision": {
                "hidden": args.vision_hidden,
                "depth": args.vision_depth,
                "heads": args.vision_heads,
                "mlp": args.vision_mlp,
                "patch_size": args.patch_size,
                "image_size": args.image_size,
                "scale_factor": args.scale_factor,
            },
            "num_vlm_layers": c.num_vlm_layers,
            "expert_width": vlm.expert_hidden_size,
            "self_attn_every_n_layers": c.self_attn_every_n_layers,
            "attention_mode": c.attention_mode,
            "chunk_size": c.chunk_size,
            "max_state_dim": c.max_state_dim,
            "max_action_dim": c.max_action_dim,
            "tokenizer_max_length": c.tokenizer_max_length,
            "num_steps": c.num_steps,
            "parameters": sum(p.numel() for p in policy.parameters()),
        },
        "notes": [
            "the backbone named by vlm_model_name is a SmolVLM2-shaped folder (a "
            "SmolVLMConfig at the sizes above, a SmolVLMProcessor with SmolVLM2's image "
            "special tokens) written with transformers' own classes",
            "saved with save_pretrained and make_smolvla_pre_post_processors, reloaded with "
            "SmolVLAPolicy.from_pretrained before running",
        ],
        "slots": list(SLOTS),
        "seed": args.seed,
        "inputs": {"image_mask": inputs["image_mask"].tolist(), "real_tokens": REAL_TOKENS},
    }
    (args.out / "upstream.json").write_text(json.dumps(meta, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
