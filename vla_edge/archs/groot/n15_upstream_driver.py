"""The Isaac-GR00T N1.5 side of ``vla-edge bench upstream --arch groot_n15``, run as a script.

Named by :mod:`vla_edge.archs.groot.n15_upstream` and run by :mod:`vla_edge.bench.upstream`
in a side environment (``PYTHONPATH=SIDE:SOURCE``: upstream's pinned transformers 4.51.3,
diffusers, peft and what else ``gr00t``'s model imports, torch from the caller's). It
imports Isaac-GR00T's ``gr00t`` model package, transformers, torch and numpy only, never
``vla_edge``, so the two transformers versions never meet in one process.

What it does, all through upstream's own code, at a small size with seeded random weights:

1. writes a small Eagle 2.5 ``config.json`` (SigLIP, the 2x2 pixel shuffle, the
   two-linear ``mlp1``, Qwen3) in a folder of its own and points ``EagleBackbone`` at it:
   upstream builds the backbone from the Eagle config shipped beside its code
   (``DEFAULT_EAGLE_PATH``, full size), so that path is the one value changed;
2. builds upstream's ``GR00T_N1_5`` from a ``GR00T_N1_5_Config`` (``EagleBackbone`` cuts
   the language model to ``select_layer`` layers; ``FlowmatchingActionHead`` with the
   interleaved cross-attention DiT and the future tokens) and fills every parameter with
   seeded random values;
3. saves it with ``GR00T_N1_5.save_pretrained`` (sharded safetensors, their index,
   ``config.json``) and writes ``experiment_cfg/metadata.json`` beside them;
4. runs ``GR00T_N1_5.get_action`` on the Eagle inputs (``eagle_input_ids`` in the prompt
   layout: lead tokens, per image a label, ``<img>``, the image's context tokens,
   ``</img>``, then the instruction; ``eagle_pixel_values`` from seeded uint8 images
   scaled to [-1, 1]), a seeded state and the embodiment id, dumping the inputs, the
   initial noise and the intermediates (the backbone's features, the VL tokens after
   ``vlln`` and the VL self-attention, the state token, the first velocity, the actions)
   into ``upstream.npz``, and what was run into ``upstream.json``.

Three things in upstream's import path would pull in what an N1.5 model with a SigLIP
tower never runs, and are kept out at import time, each named in ``upstream.json``:

* ``gr00t/model/__init__.py`` re-exports the inference policy, whose data pipeline is not
  in the tree this driver runs: ``gr00t.model`` is made a package from its folder without
  running that file;
* the Eagle 2.5 modules import ``radio_model`` (the RADIO vision tower, used only when the
  config's vision ``model_type`` is ``radio``), which imports flash-attn and timm at module
  level: a module without those imports takes its place, whose classes refuse to be built;
* Eagle 2.5 sets the SigLIP tower's attention to flash-attn 2 when it builds it: the
  tower's config is set back to transformers' eager attention before anything runs (the
  issue's "eager attention instead of flash-attn").

``--stats`` is accepted like every driver's and not read: the statistics are written per
group as the N1.5 layout stores them.
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

TAG = "new_embodiment"
EMBODIMENT = 31
"""Upstream's fixed weight slice for the tag (``EMBODIMENT_TAG_MAPPING``)."""
SLOTS = ("ego_view", "wrist_view")
TEXT_IDS = 5
SIZES: dict[str, Any] = {
    "vision": {"hidden": 32, "depth": 2, "heads": 4, "mlp": 64, "patch": 8, "image": 32},
    "shuffle": {"use_pixel_shuffle": True, "downsample_ratio": 0.5, "mlp_connector_layers": 2},
    "text": {"width": 64, "layers": 4, "select_layer": 3, "heads": 4, "kv_heads": 2},
    "text_more": {"head_dim": 16, "mlp": 96, "vocab": 512, "rope_theta": 10000.0},
    "ids": {"lead": [500, 501, 502], "image": 510, "start": 508, "end": 509},
    "labels": [[503, 504], [503, 505]],
    "head": {"hidden": 48, "state": 12, "action": 10, "seq": 16, "slices": 32, "future": 3},
    "dit": {"layers": 4, "heads": 4, "head_dim": 8},
    "vlsa": {"layers": 2, "heads": 4, "head_dim": 16},
}
"""The small size (ours: ``GrootN15Config.tiny`` with upstream's 256 time channels and 32
embodiment slices, the N1.5 tag's slice being 31)."""
WEIGHT_SCALE = 0.2
IMPORT_NOTES: list[str] = []


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The driver's arguments."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", choices=("groot_n15",), required=True)
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


def model_package_without_policy() -> None:
    """``gr00t.model`` as a package from its folder, its ``__init__`` (the policy) not run."""
    import gr00t

    folder = Path(next(iter(gr00t.__path__))) / "model"
    package = types.ModuleType("gr00t.model")
    package.__path__ = [str(folder)]  # type: ignore[attr-defined]
    package.__package__ = "gr00t.model"
    sys.modules["gr00t.model"] = package
    IMPORT_NOTES.append(
        "gr00t.model made a package from its folder without running its __init__.py, which "
        "re-exports the inference policy (Gr00tPolicy) and its data pipeline, not in the tree"
    )


def radio_refused() -> None:
    """A ``radio_model`` module whose classes refuse to be built (no flash-attn, no timm)."""

    class _Refused:
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            raise RuntimeError("the RADIO vision tower is not part of this run (SigLIP is)")

    name = "gr00t.model.backbone.eagle2_hg_model.radio_model"
    module = types.ModuleType(name)
    module.RADIOConfig = type("RADIOConfig", (_Refused,), {})  # type: ignore[attr-defined]
    module.RADIOModel = type("RADIOModel", (_Refused,), {})  # type: ignore[attr-defined]
    sys.modules[name] = module
    IMPORT_NOTES.append(
        "eagle2_hg_model/radio_model.py (the RADIO tower, built only for a vision model_type "
        "'radio'; imports flash_attn and timm at module level) replaced by a module whose "
        "RADIOConfig and RADIOModel refuse to be built; the config's tower is SigLIP"
    )


def eagle_config(folder: Path) -> Path:
    """A small Eagle 2.5 ``config.json`` (upstream's keys, :data:`SIZES`), no remote code."""
    v, s, t, m, ids = (SIZES[k] for k in ("vision", "shuffle", "text", "text_more", "ids"))
    config = {
        "architectures": ["Eagle2_5_VLForConditionalGeneration"],
        "model_type": "eagle_2_5_vl",
        "_attn_implementation": "eager",
        "force_image_size": v["image"],
        "image_token_index": ids["image"],
        "select_layer": -1,
        "template": "qwen3-chat",
        "use_backbone_lora": 0,
        "use_llm_lora": 0,
        **s,
        "text_config": {
            "architectures": ["Qwen3ForCausalLM"],
            "model_type": "qwen3",
            "attention_bias": False,
            "head_dim": m["head_dim"],
            "hidden_act": "silu",
            "hidden_size": t["width"],
            "intermediate_size": m["mlp"],
            "max_position_embeddings": 4096,
            "num_attention_heads": t["heads"],
            "num_hidden_layers": t["layers"],
            "num_key_value_heads": t["kv_heads"],
            "rms_norm_eps": 1e-6,
            "rope_scaling": None,
            "rope_theta": m["rope_theta"],
            "tie_word_embeddings": False,
            "vocab_size": m["vocab"],
            "_attn_implementation_autoset": True,
        },
        "vision_config": {
            "model_type": "siglip_vision_model",
            "hidden_act": "gelu_pytorch_tanh",
            "hidden_size": v["hidden"],
            "image_size": v["image"],
            "intermediate_size": v["mlp"],
            "layer_norm_eps": 1e-6,
            "num_attention_heads": v["heads"],
            "num_channels": 3,
            "num_hidden_layers": v["depth"],
            "patch_size": v["patch"],
            "_attn_implementation_autoset": True,
        },
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    return folder


def model_config(args: argparse.Namespace) -> Any:
    """Upstream's ``GR00T_N1_5_Config`` at :data:`SIZES` (float32, no flash-attn)."""
    from gr00t.model.gr00t_n1 import GR00T_N1_5_Config

    t, h, d, s = SIZES["text"], SIZES["head"], SIZES["dit"], SIZES["vlsa"]
    return GR00T_N1_5_Config(
        backbone_cfg={
            "select_layer": t["select_layer"],
            "project_to_dim": None,
            "tune_llm": False,
            "tune_visual": False,
            "reproject_vision": False,
            "use_flash_attention": False,
            "load_bf16": False,
        },
        action_head_cfg={
            "action_dim": h["action"],
            "action_horizon": args.action_horizon,
            "add_pos_embed": True,
            "backbone_embedding_dim": t["width"],
            "hidden_size": h["hidden"],
            "input_embedding_dim": d["heads"] * d["head_dim"],
            "max_action_dim": h["action"],
            "max_state_dim": h["state"],
            "max_seq_len": h["seq"],
            "max_num_embodiments": h["slices"],
            "model_dtype": "float32",
            "num_inference_timesteps": args.num_steps,
            "num_target_vision_tokens": h["future"],
            "num_timestep_buckets": 1000,
            "use_vlln": True,
            "tune_projector": False,
            "tune_diffusion_model": False,
            "diffusion_model_cfg": {
                "attention_head_dim": d["head_dim"],
                "cross_attention_dim": t["width"],
                "dropout": 0.2,
                "final_dropout": True,
                "interleave_self_attention": True,
                "norm_type": "ada_norm",
                "num_attention_heads": d["heads"],
                "num_layers": d["layers"],
                "output_dim": h["hidden"],
                "positional_embeddings": None,
            },
            "vl_self_attention_cfg": {
                "attention_head_dim": s["head_dim"],
                "dropout": 0.2,
                "final_dropout": True,
                "num_attention_heads": s["heads"],
                "num_layers": s["layers"],
                "positional_embeddings": None,
            },
        },
        action_horizon=args.action_horizon,
        action_dim=h["action"],
        compute_dtype="float32",
    )


def observation(seed: int) -> dict[str, Any]:
    """Seeded uint8 images scaled to [-1, 1], the prompt's token layout, the state."""
    v, ids = SIZES["vision"], SIZES["ids"]
    gen = np.random.default_rng(seed)
    images = gen.integers(0, 256, (len(SLOTS), v["image"], v["image"], 3), dtype=np.uint8)
    pixels = torch.from_numpy(images).permute(0, 3, 1, 2).float()
    pixels = (pixels / 255.0 - 0.5) / 0.5
    shuffle = round(1 / SIZES["shuffle"]["downsample_ratio"])
    tokens = (v["image"] // v["patch"] // shuffle) ** 2
    text = gen.integers(4, 400, TEXT_IDS).tolist()
    seq = list(ids["lead"])
    for label in SIZES["labels"]:
        seq += list(label) + [ids["start"]] + [ids["image"]] * tokens + [ids["end"]]
    seq += text
    state = gen.standard_normal((1, 1, SIZES["head"]["state"])).astype(np.float32)
    return {
        "images_uint8": images,
        "pixel_values": pixels,
        "input_ids": torch.tensor([seq]),
        "text_ids": np.array(text, dtype=np.int64),
        "state": state,
    }


def write_metadata(ckpt: Path) -> None:
    """``experiment_cfg/metadata.json``: the tag's statistics per group, its modalities."""
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
    modalities = {
        "video": {slot: {"resolution": [SIZES["vision"]["image"]] * 2} for slot in SLOTS},
        "state": {"joints": {"absolute": True, "rotation_type": None}},
        "action": {"joints": {"absolute": True, "rotation_type": None}},
    }
    folder = ckpt / "experiment_cfg"
    folder.mkdir(parents=True, exist_ok=True)
    meta = {TAG: {"statistics": stats, "modalities": modalities, "embodiment_tag": TAG}}
    (folder / "metadata.json").write_text(json.dumps(meta))


def run(model: torch.nn.Module, x: dict[str, Any], seed: int) -> dict[str, np.ndarray]:
    """``GR00T_N1_5.get_action`` with the intermediates caught by forward hooks."""
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
    n_images = x["pixel_values"].shape[0]
    inputs = {
        "eagle_input_ids": x["input_ids"],
        "eagle_attention_mask": torch.ones_like(x["input_ids"]),
        "eagle_pixel_values": x["pixel_values"],
        "eagle_image_sizes": torch.tensor([[SIZES["vision"]["image"]] * 2] * n_images),
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
    # upstream's environment has no torchao; diffusers fails to import beside a newer one
    sys.modules["torchao"] = None  # type: ignore[assignment]
    model_package_without_policy()
    radio_refused()
    import diffusers
    import transformers
    from gr00t.model.backbone import eagle_backbone
    from gr00t.model.backbone.eagle2_hg_model import (
        configuration_eagle2_5_vl as eagle_config_module,
    )
    from gr00t.model.backbone.eagle2_hg_model import modeling_eagle2_5_vl as eagle_module
    from gr00t.model.gr00t_n1 import GR00T_N1_5
    from transformers import AutoConfig, AutoModel

    config_class = eagle_config_module.Eagle2_5_VLConfig
    AutoConfig.register("eagle_2_5_vl", config_class)
    AutoModel.register(config_class, eagle_module.Eagle2_5_VLForConditionalGeneration)
    args.out.mkdir(parents=True, exist_ok=True)
    eagle_backbone.DEFAULT_EAGLE_PATH = str(eagle_config(args.out / "eagle_small"))
    torch.manual_seed(args.seed)
    model = GR00T_N1_5(model_config(args), local_model_path=str(args.out)).eval()
    vision = model.backbone.eagle_model.vision_model
    vision.config._attn_implementation = "eager"
    text_attention = model.backbone.eagle_model.language_model.config._attn_implementation
    fill(model, args.seed + 1)
    ckpt = args.out / "checkpoint"
    total = sum(p.numel() * p.element_size() for p in model.state_dict().values())
    model.save_pretrained(ckpt, max_shard_size=total // 2 + 1, safe_serialization=True)
    write_metadata(ckpt)
    x = observation(args.seed)
    dumps = run(model, x, args.seed)
    inputs = {f"input.{k}": np.asarray(v) for k, v in x.items()}
    np.savez(args.out / "upstream.npz", **inputs, **dumps)
    meta = {
        "upstream": "Isaac-GR00T (N1.5)",
        "model_class": "gr00t.model.gr00t_n1.GR00T_N1_5",
        "transformers": transformers.__version__,
        "diffusers": diffusers.__version__,
        "torch": torch.__version__,
        "checkpoint": str(ckpt),
        "embodiment": {"tag": TAG, "id": EMBODIMENT},
        "attention": {"vision": vision.config._attn_implementation, "text": text_attention},
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
            "the whole model (backbone and action head) is filled with "
            f"N(0, {WEIGHT_SCALE}^2) values and saved with GR00T_N1_5.save_pretrained",
            "EagleBackbone builds its backbone from the Eagle config beside upstream's code "
            "(DEFAULT_EAGLE_PATH, full size); it is pointed at a small config of the same "
            "keys (eagle_small/config.json, no remote code: the Eagle classes are registered "
            "with transformers' Auto classes from the source tree)",
            "the Eagle inputs are made here: the prompt's token layout with each image's "
            "context tokens, and the uint8 images scaled to [-1, 1] (the Eagle image "
            "processor is not run)",
            *IMPORT_NOTES,
            "float32; the SigLIP tower's attention set to eager after Eagle 2.5 set it to "
            "flash_attention_2; the language model eager from the config",
        ],
        "slots": list(SLOTS),
        "inputs": {"image_mask": [True] * len(SLOTS), "text_ids": TEXT_IDS},
    }
    (args.out / "upstream.json").write_text(json.dumps(meta, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
