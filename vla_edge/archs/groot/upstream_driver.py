"""The Isaac-GR00T side of ``vla-edge bench upstream --arch groot``, run as a script.

Named by :mod:`vla_edge.archs.groot.upstream` and run by :mod:`vla_edge.bench.upstream` in
a side environment (``PYTHONPATH=SIDE:SOURCE``: upstream's pinned transformers 4.57.6,
diffusers and what else ``gr00t`` imports that the caller's environment lacks, torch from
the caller's). It imports Isaac-GR00T's ``gr00t`` package, transformers, torch, numpy and
safetensors only, never ``vla_edge``, so the two transformers versions never meet in one
process.

What it does, all through upstream's own code, at a small size with seeded random weights:

1. writes a small Cosmos-Reason2 / Qwen3-VL backbone with transformers' own
   ``Qwen3VLForConditionalGeneration.save_pretrained`` (a folder whose path holds
   ``Qwen/Qwen3-VL``, the name upstream's ``get_backbone_cls`` accepts);
2. builds upstream's ``Gr00tN1d7`` from its ``Gr00tN1d7Config`` (no flash-attn; the
   backbone loaded with eager attention through ``transformers_loading_kwargs``), which
   loads that backbone through ``Qwen3Backbone`` (the language model
   cut to ``select_layer`` layers) and builds ``Gr00tN1d7ActionHead``; fills the action
   head with seeded random values;
3. saves it with ``Gr00tN1d7.save_pretrained`` (sharded safetensors, their index,
   ``config.json``) and writes the processor's files of the N1.7 layout beside them
   (``processor_config.json``, ``statistics.json``, ``embodiment_id.json``);
4. runs ``Gr00tN1d7.get_action`` on pixels made by transformers 4.57.6's
   ``Qwen2VLImageProcessor`` from seeded uint8 images, the chat template's token layout
   (lead tokens, each image wrapped in vision start/end, the instruction) and a seeded
   state, dumping the inputs, the initial noise and the intermediates (the backbone's
   features, the VL tokens after ``vlln`` and the VL self-attention, the state token, the
   first velocity, the actions) into ``upstream.npz``, and what was run into
   ``upstream.json``.

``Gr00tN1d7``'s constructor also builds the processor's data collator, which only turns
raw observations into tensors; that module (and the data pipeline it imports) is not in
the tree this driver runs, so a stand-in without weights takes its place and the tensors
are made here (step 4). ``--stats`` is accepted like every driver's and not read: the
N1.7 layout's statistics are written per group as the processor stores them.
"""

from __future__ import annotations

import argparse
import json
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import torch

TAG = "libero_sim"
EMBODIMENT = 2
SLOTS = ("image", "wrist_image")
TEXT_IDS = 5
SIZES: dict[str, Any] = {
    "vision": {
        "hidden": 32,
        "depth": 4,
        "heads": 4,
        "mlp": 64,
        "patch": 8,
        "image": 32,
        "npos": 36,
        "deepstack": [0, 1, 2],
    },
    "text": {"width": 64, "layers": 6, "select_layer": 4, "heads": 4, "kv_heads": 2},
    "text_more": {"head_dim": 16, "mlp": 96, "vocab": 512, "rope_theta": 10000.0},
    "ids": {"lead": [500, 501, 502], "image": 510, "start": 508, "end": 509, "video": 511},
    "head": {"hidden": 48, "state": 12, "action": 10, "seq": 16, "slices": 4},
    "dit": {"layers": 4, "heads": 4, "head_dim": 8},
    "vlsa": {"layers": 2, "heads": 4, "head_dim": 16},
}
"""The small size (ours: ``GrootConfig.tiny`` with upstream's 256 time channels)."""
WEIGHT_SCALE = 0.2


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The driver's arguments."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", choices=("groot",), required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--stats", type=Path, default=None, help="accepted, not read")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--action-horizon", type=int, default=10)
    parser.add_argument("--num-steps", type=int, default=10)
    return parser.parse_args(argv)


def fill(module: torch.nn.Module, seed: int) -> None:
    """Every parameter ``N(0, WEIGHT_SCALE²)`` from one seeded generator, in module order."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * WEIGHT_SCALE)


def write_backbone(out: Path, seed: int) -> Path:
    """A small Qwen3-VL saved by transformers' own ``save_pretrained`` (upstream's version)."""
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    v, t, m, ids = SIZES["vision"], SIZES["text"], SIZES["text_more"], SIZES["ids"]
    config = Qwen3VLConfig(
        vision_config={
            "depth": v["depth"],
            "hidden_size": v["hidden"],
            "hidden_act": "gelu_pytorch_tanh",
            "intermediate_size": v["mlp"],
            "num_heads": v["heads"],
            "in_channels": 3,
            "patch_size": v["patch"],
            "spatial_merge_size": 2,
            "temporal_patch_size": 2,
            "out_hidden_size": t["width"],
            "num_position_embeddings": v["npos"],
            "deepstack_visual_indexes": v["deepstack"],
        },
        text_config={
            "vocab_size": m["vocab"],
            "hidden_size": t["width"],
            "intermediate_size": m["mlp"],
            "num_hidden_layers": t["layers"],
            "num_attention_heads": t["heads"],
            "num_key_value_heads": t["kv_heads"],
            "head_dim": m["head_dim"],
            "rope_theta": m["rope_theta"],
            "max_position_embeddings": 4096,
            "rope_scaling": {
                "rope_type": "default",
                "mrope_section": [4, 2, 2],
                "mrope_interleaved": True,
            },
        },
        image_token_id=ids["image"],
        video_token_id=ids["video"],
        vision_start_token_id=ids["start"],
        vision_end_token_id=ids["end"],
        tie_word_embeddings=False,
    )
    model = Qwen3VLForConditionalGeneration(config)
    fill(model, seed)
    path = out / "backbone_src" / "Qwen" / "Qwen3-VL-tiny"
    model.save_pretrained(path)
    return path


def observation(seed: int) -> dict[str, Any]:
    """Seeded uint8 images through 4.57.6's image processor, the token layout, the state."""
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor

    v, ids = SIZES["vision"], SIZES["ids"]
    gen = np.random.default_rng(seed)
    images = gen.integers(0, 256, (len(SLOTS), v["image"], v["image"], 3), dtype=np.uint8)
    processor = Qwen2VLImageProcessor(
        do_resize=False,
        patch_size=v["patch"],
        merge_size=2,
        temporal_patch_size=2,
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
    )
    pixels = processor(images=list(images), return_tensors="pt")
    tokens = (v["image"] // v["patch"] // 2) ** 2
    text = gen.integers(4, 400, TEXT_IDS).tolist()
    seq = list(ids["lead"])
    for _ in SLOTS:
        seq += [ids["start"]] + [ids["image"]] * tokens + [ids["end"]]
    seq += text
    state = gen.standard_normal((1, 1, SIZES["head"]["state"])).astype(np.float32)
    return {
        "images_uint8": images,
        "pixel_values": pixels["pixel_values"],
        "image_grid_thw": pixels["image_grid_thw"],
        "input_ids": torch.tensor([seq]),
        "text_ids": np.array(text, dtype=np.int64),
        "state": state,
    }


def model_config(backbone: Path, args: argparse.Namespace) -> Any:
    """Upstream's ``Gr00tN1d7Config`` at :data:`SIZES` (eager attention, float32)."""
    from gr00t.configs.model.gr00t_n1d7 import Gr00tN1d7Config

    t, h, d, s = SIZES["text"], SIZES["head"], SIZES["dit"], SIZES["vlsa"]
    image = SIZES["vision"]["image"]
    return Gr00tN1d7Config(
        model_name=str(backbone),
        model_dtype="float32",
        select_layer=t["select_layer"],
        backbone_embedding_dim=t["width"],
        hidden_size=h["hidden"],
        input_embedding_dim=d["heads"] * d["head_dim"],
        max_state_dim=h["state"],
        max_action_dim=h["action"],
        action_horizon=args.action_horizon,
        max_seq_len=h["seq"],
        max_num_embodiments=h["slices"],
        num_inference_timesteps=args.num_steps,
        use_flash_attention=False,
        load_bf16=False,
        image_target_size=[image, image],
        diffusion_model_cfg={
            "positional_embeddings": None,
            "num_layers": d["layers"],
            "num_attention_heads": d["heads"],
            "attention_head_dim": d["head_dim"],
            "norm_type": "ada_norm",
            "dropout": 0.2,
            "final_dropout": True,
            "output_dim": h["hidden"],
            "interleave_self_attention": True,
        },
        vl_self_attention_cfg={
            "positional_embeddings": None,
            "num_layers": s["layers"],
            "num_attention_heads": s["heads"],
            "attention_head_dim": s["head_dim"],
            "dropout": 0.2,
            "final_dropout": True,
        },
    )


def collator_stand_in() -> None:
    """A weightless stand-in for the data collator ``Gr00tN1d7.__init__`` builds."""

    class Gr00tN1d7DataCollator:
        def __init__(self, **kwargs: Any) -> None:
            self.kwargs = kwargs

    module = types.ModuleType("gr00t.model.gr00t_n1d7.processing_gr00t_n1d7")
    module.Gr00tN1d7DataCollator = Gr00tN1d7DataCollator  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module


def write_processor_files(ckpt: Path, horizon: int) -> None:
    """The N1.7 layout's processor files: the modality config, statistics, embodiment ids."""
    groups = {"state": {"joints": SIZES["head"]["state"]}, "action": {"joints": 7}}
    stats = {
        part: {
            key: {
                name: [0.0 if name in ("min", "q01", "mean") else 1.0] * width
                for name in ("min", "max", "mean", "std", "q01", "q99")
            }
            for key, width in group.items()
        }
        for part, group in groups.items()
    }
    modality = {
        "video": {"delta_indices": [0], "modality_keys": list(SLOTS)},
        "state": {"delta_indices": [0], "modality_keys": ["joints"]},
        "action": {"delta_indices": list(range(horizon)), "modality_keys": ["joints"]},
    }
    image = SIZES["vision"]["image"]
    processor = {
        "processor_class": "Gr00tN1d7Processor",
        "processor_kwargs": {
            "modality_configs": {TAG: modality},
            "image_target_size": [image, image],
            "use_percentiles": True,
            "use_mean_std": False,
            "clip_outliers": True,
        },
    }
    (ckpt / "processor_config.json").write_text(json.dumps(processor))
    (ckpt / "statistics.json").write_text(json.dumps({TAG: stats}))
    (ckpt / "embodiment_id.json").write_text(json.dumps({TAG: EMBODIMENT}))


def run(model: torch.nn.Module, x: dict[str, Any], seed: int) -> dict[str, np.ndarray]:
    """``Gr00tN1d7.get_action`` with the intermediates caught by forward hooks."""
    seen: dict[str, np.ndarray] = {}

    def keep(name: str, get=lambda output: output):  # noqa: ANN001, ANN202
        def hook(module, inputs, output):  # noqa: ANN001, ANN202
            if name not in seen:
                seen[name] = get(output).detach().numpy().copy()

        return hook

    def keep_noise(module, inputs):  # noqa: ANN001, ANN202
        seen.setdefault("noise", inputs[0].detach().numpy().copy())

    head = model.action_head
    # the backbone's output is a BatchFeature the action head rewrites in place: copy first
    model.backbone.register_forward_hook(
        keep("backbone_features", lambda o: o["backbone_features"])
    )
    head.vl_self_attention.register_forward_hook(keep("vl_tokens"))
    head.state_encoder.register_forward_hook(keep("state_tokens"))
    head.action_encoder.register_forward_pre_hook(keep_noise)
    head.action_decoder.register_forward_hook(keep("first_decoder_output"))
    inputs = {
        "input_ids": x["input_ids"],
        "attention_mask": torch.ones_like(x["input_ids"]),
        "pixel_values": x["pixel_values"],
        "image_grid_thw": x["image_grid_thw"],
        "state": torch.from_numpy(x["state"]),
        "embodiment_id": torch.tensor([EMBODIMENT]),
    }
    torch.manual_seed(seed + 2)  # the noise get_action draws
    with torch.no_grad():
        actions = model.get_action(inputs)["action_pred"]
    horizon = actions.shape[1]
    out = {k: v for k, v in seen.items() if k != "first_decoder_output"}
    out["first_velocity"] = seen["first_decoder_output"][:, -horizon:]
    out["actions"] = actions.numpy()
    return out


def main(argv: list[str] | None = None) -> int:
    """Build, save, run; write ``upstream.npz`` and ``upstream.json`` in ``--out``."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    # upstream's environment has no torchao; diffusers 0.35 fails to import beside a newer one
    sys.modules["torchao"] = None  # type: ignore[assignment]
    import diffusers
    import transformers
    from gr00t.model.gr00t_n1d7.gr00t_n1d7 import Gr00tN1d7

    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(args.seed)
    backbone = write_backbone(args.out, args.seed)
    config = model_config(backbone, args)
    collator_stand_in()
    # upstream's own loading arguments, with transformers' eager attention for the backbone
    loading = {"trust_remote_code": True, "attn_implementation": "eager"}
    model = Gr00tN1d7(config, transformers_loading_kwargs=loading).eval()
    fill(model.action_head, args.seed + 1)
    ckpt = args.out / "checkpoint"
    total = sum(p.numel() * p.element_size() for p in model.state_dict().values())
    model.save_pretrained(ckpt, max_shard_size=total // 2 + 1, safe_serialization=True)
    write_processor_files(ckpt, args.action_horizon)
    x = observation(args.seed)
    dumps = run(model, x, args.seed)
    inputs = {f"input.{k}": np.asarray(v) for k, v in x.items()}
    np.savez(args.out / "upstream.npz", **inputs, **dumps)
    meta = {
        "upstream": "Isaac-GR00T",
        "model_class": "gr00t.model.gr00t_n1d7.gr00t_n1d7.Gr00tN1d7",
        "transformers": transformers.__version__,
        "diffusers": diffusers.__version__,
        "torch": torch.__version__,
        "checkpoint": str(ckpt),
        "embodiment": {"tag": TAG, "id": EMBODIMENT},
        "config": {
            **SIZES,
            "action_horizon": args.action_horizon,
            "num_steps": args.num_steps,
            "weight_scale": WEIGHT_SCALE,
            "parameters": sum(p.numel() for p in model.parameters()),
            "weight_files": sorted(p.name for p in ckpt.glob("*.safetensors")),
        },
        "seed": args.seed,
        "notes": [
            "the backbone is written with transformers' Qwen3VLForConditionalGeneration."
            "save_pretrained and loaded by upstream's Qwen3Backbone; the action head is "
            f"filled with N(0, {WEIGHT_SCALE}^2) values; the whole model is saved with "
            "Gr00tN1d7.save_pretrained",
            "Gr00tN1d7.__init__ builds the processor's data collator, which is not in the "
            "tree run; a weightless stand-in takes its place and the driver makes the "
            "tensors the collator would (Qwen2VLImageProcessor pixels, the token layout)",
            "float32; use_flash_attention=False and the backbone loaded with "
            "attn_implementation='eager' (through Gr00tN1d7's transformers_loading_kwargs)",
        ],
        "slots": list(SLOTS),
        "inputs": {"image_mask": [True] * len(SLOTS), "text_ids": TEXT_IDS},
    }
    (args.out / "upstream.json").write_text(json.dumps(meta, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
