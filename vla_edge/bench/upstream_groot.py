"""GR00T N1.7 against upstream's own code: the side driver and our side of the comparison.

``python -m vla_edge.bench.upstream_groot --side DIR [--source PATH] --json OUT [--seed 0]``

Two processes, so the two transformers versions never meet:

1. **The driver** (this file run as a script, ``driver`` sub-command, with
   ``PYTHONPATH=SIDE``): imports torch, numpy, safetensors, upstream's pinned transformers
   4.57.6 (installed into ``SIDE`` with ``pip install --target``, :data:`SIDE_PACKAGES`) and,
   with ``--source`` (an NVIDIA/Isaac-GR00T checkout), upstream's ``gr00t`` package; never
   ``vla_edge``. At a small size with seeded random weights it

   * builds the Cosmos-Reason2 / Qwen3-VL backbone with transformers 4.57.6
     (``Qwen3VLForConditionalGeneration``, ``save_pretrained`` to ``backbone_src/``) and
     runs it as upstream's ``Qwen3Backbone`` does (with ``--source``: that class itself,
     loading the saved directory; without: the same three steps, ``from_pretrained``, the
     layers above ``select_layer`` popped, ``hidden_states[-1]`` of a forward with
     ``output_hidden_states=True, logits_to_keep=1``), on pixels made by 4.57.6's
     ``Qwen2VLImageProcessor`` from a seeded uint8 image and the chat template's token
     layout (lead tokens, each image wrapped in vision start/end, the instruction);
   * with ``--source``: builds upstream's ``Gr00tN1d7ActionHead`` from its
     ``Gr00tN1d7Config``, runs ``get_action`` (seeded noise, embodiment slice 2) and
     writes the whole checkpoint in the N1.7 layout (two shards and their index,
     ``config.json`` from ``Gr00tN1d7Config``, ``processor_config.json``,
     ``statistics.json``, ``embodiment_id.json``);
   * dumps the inputs, the noise and the intermediates (backbone features, the VL tokens
     after ``vlln`` and the VL self-attention, the state token, the first velocity, the
     actions) into ``upstream.npz``.

2. **Our side** (:func:`compare_run`): with ``--source``, ``read_checkpoint`` of that
   directory (every key and shape checked) and :func:`load_checkpoint_weights`; without,
   the backbone's weights only. Our fixed-shape passes on the same inputs, each
   intermediate compared in compute order (the first diverging one named) and the actions
   within :data:`ACTION_BOUND_PCT` % of each dimension's range.

Without ``--source`` only the backbone is compared (it needs no GR00T code). The JSON holds
the command, the versions, every intermediate's error and the verdict.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

SIDE_PACKAGES = (
    "transformers==4.57.6",
    "tokenizers==0.22.1",
    "huggingface_hub==0.36.2",
    # what upstream's action head imports beyond torch (gr00t/model/modules/dit.py, tree);
    # upstream pins diffusers 0.35.0.dev0, not on PyPI: its nearest release
    "diffusers==0.35.2",
    "dm-tree==0.1.8",
)
"""Installed with ``pip install --target SIDE --no-deps`` (upstream's pinned versions)."""
ACTION_BOUND_PCT = 0.01
STAGE_RTOL = 1e-4
TAG = "libero_sim"
EMBODIMENT = 2
N_SLOTS = 2
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
    "head": {"hidden": 48, "state": 12, "action": 10, "horizon": 6, "seq": 16, "slices": 4},
    "dit": {"layers": 4, "heads": 4, "head_dim": 8},
    "vlsa": {"layers": 2, "heads": 4, "head_dim": 16},
}
"""The small size both sides build (ours: ``GrootConfig.tiny`` with 256 time channels)."""


# -- the driver (side environment; no vla_edge) --------------------------------------------


def _fill(module: torch.nn.Module, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.2)


def _qwen3_vl(out: Path, seed: int) -> Path:
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
    _fill(model, seed)
    # a path upstream's get_backbone_cls accepts ("Qwen/Qwen3-VL" in the model name)
    path = out / "backbone_src" / "Qwen" / "Qwen3-VL-tiny"
    model.save_pretrained(path)
    return path


def _inputs(seed: int) -> dict[str, Any]:
    """The observation: uint8 images through 4.57.6's image processor, the token layout."""
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor

    v, ids = SIZES["vision"], SIZES["ids"]
    gen = np.random.default_rng(seed)
    images = gen.integers(0, 256, (N_SLOTS, v["image"], v["image"], 3), dtype=np.uint8)
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
    for _ in range(N_SLOTS):
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


def _groot_config() -> Any:
    from gr00t.configs.model.gr00t_n1d7 import Gr00tN1d7Config

    t, h, d, s = SIZES["text"], SIZES["head"], SIZES["dit"], SIZES["vlsa"]
    return Gr00tN1d7Config(
        select_layer=t["select_layer"],
        backbone_embedding_dim=t["width"],
        hidden_size=h["hidden"],
        input_embedding_dim=d["heads"] * d["head_dim"],
        max_state_dim=h["state"],
        max_action_dim=h["action"],
        action_horizon=h["horizon"],
        max_seq_len=h["seq"],
        max_num_embodiments=h["slices"],
        use_flash_attention=False,
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


def _write_n17(out: Path, backbone: Any, head: Any, config: Any) -> None:
    """The checkpoint in upstream's N1.7 layout (two shards, index, the processor's files)."""
    from safetensors.torch import save_file

    state = {f"backbone.{k}": v for k, v in backbone.state_dict().items()}
    state.update({f"action_head.{k}": v for k, v in head.state_dict().items()})
    state = {k: v.detach().contiguous().clone() for k, v in state.items()}
    ckpt = out / "checkpoint"
    ckpt.mkdir(parents=True, exist_ok=True)
    shards = {
        "model-00001-of-00002.safetensors": [k for k in state if k.startswith("backbone.")],
        "model-00002-of-00002.safetensors": [k for k in state if k.startswith("action_head.")],
    }
    weight_map = {}
    for name, keys in shards.items():
        save_file({k: state[k] for k in keys}, str(ckpt / name), metadata={"format": "pt"})
        weight_map.update({k: name for k in keys})
    total = sum(v.numel() * v.element_size() for v in state.values())
    (ckpt / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map})
    )
    (ckpt / "config.json").write_text(config.to_filtered_json(exclude_augment=False))
    groups = {"state": {"joints": SIZES["head"]["state"]}, "action": {"joints": 7}}
    stats = {
        part: {
            k: {
                n: [0.0 if n in ("min", "q01", "mean") else 1.0] * d
                for n in ("min", "max", "mean", "std", "q01", "q99")
            }
            for k, d in g.items()
        }
        for part, g in groups.items()
    }
    modality = {
        "video": {"delta_indices": [0], "modality_keys": ["image", "wrist_image"]},
        "state": {"delta_indices": [0], "modality_keys": ["joints"]},
        "action": {
            "delta_indices": list(range(SIZES["head"]["horizon"])),
            "modality_keys": ["joints"],
        },
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


def driver(argv: list[str]) -> int:
    """The side-environment run (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="upstream_groot driver")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--source", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    # upstream's environment has no torchao; diffusers 0.35 fails to import beside a newer one
    sys.modules["torchao"] = None  # type: ignore[assignment]
    import transformers
    from transformers.feature_extraction_utils import BatchFeature

    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(args.seed)
    src = _qwen3_vl(args.out, args.seed)
    x = _inputs(args.seed)
    vl_input = {
        "input_ids": x["input_ids"],
        "attention_mask": torch.ones_like(x["input_ids"]),
        "pixel_values": x["pixel_values"],
        "image_grid_thw": x["image_grid_thw"],
    }
    dump: dict[str, np.ndarray] = {k: np.asarray(v) for k, v in x.items()}
    meta: dict[str, Any] = {"transformers": transformers.__version__, "torch": torch.__version__}
    select = SIZES["text"]["select_layer"]
    with torch.no_grad():
        if args.source is None:
            from transformers import Qwen3VLForConditionalGeneration

            model = Qwen3VLForConditionalGeneration.from_pretrained(src).eval()
            while len(model.model.language_model.layers) > select:
                model.model.language_model.layers.pop(-1)
            out = model(**vl_input, output_hidden_states=True, logits_to_keep=1)
            dump["backbone_features"] = out.hidden_states[-1].numpy()
            meta["mode"] = "backbone"
        else:
            sys.path.insert(0, str(args.source))
            from gr00t.model.gr00t_n1d7.gr00t_n1d7 import Gr00tN1d7ActionHead
            from gr00t.model.modules.qwen3_backbone import Qwen3Backbone

            backbone = Qwen3Backbone(
                model_name=str(src), select_layer=select, use_flash_attention=False
            ).eval()
            config = _groot_config()
            head = Gr00tN1d7ActionHead(config).eval()
            _fill(head, args.seed + 1)
            features = backbone(BatchFeature(data=vl_input))
            dump["backbone_features"] = features["backbone_features"].numpy()
            seen: dict[str, np.ndarray] = {}

            def keep(name):  # noqa: ANN001, ANN202
                def hook(module, inputs, output):  # noqa: ANN001, ANN202
                    seen.setdefault(name, output.detach().numpy().copy())

                return hook

            head.vl_self_attention.register_forward_hook(keep("vl_tokens"))
            head.state_encoder.register_forward_hook(keep("state_tokens"))
            head.action_decoder.register_forward_hook(keep("first_decoder_output"))
            action_input = BatchFeature(
                data={
                    "state": torch.from_numpy(x["state"]),
                    "embodiment_id": torch.tensor([EMBODIMENT]),
                }
            )
            horizon, width = SIZES["head"]["horizon"], SIZES["head"]["action"]
            torch.manual_seed(args.seed + 2)
            dump["noise"] = torch.randn(1, horizon, width).numpy()
            torch.manual_seed(args.seed + 2)  # get_action draws the same noise first
            actions = head.get_action(BatchFeature(data=dict(features)), action_input)
            dump["actions"] = actions["action_pred"].numpy()
            dump.update(seen)
            dump["first_velocity"] = seen["first_decoder_output"][:, -horizon:]
            _write_n17(args.out, backbone, head, config)
            meta["mode"] = "full"
    np.savez(args.out / "upstream.npz", **dump)
    (args.out / "upstream.json").write_text(json.dumps(meta, indent=2))
    return 0


# -- our side ------------------------------------------------------------------------------


def our_config() -> Any:
    """Our config of :data:`SIZES` (``GrootConfig.tiny`` with upstream's 256 time channels)."""
    from vla_edge.archs.groot import GrootConfig

    return GrootConfig.tiny(timestep_channels=256, max_token_len=TEXT_IDS + 3)


def our_dump(work: Path, dump: dict[str, np.ndarray], full: bool) -> dict[str, np.ndarray]:
    """Our intermediates on upstream's inputs (the imported checkpoint, or the backbone only)."""
    from safetensors.torch import load_file

    from vla_edge.archs.groot import GrootModel
    from vla_edge.archs.groot.checkpoint import load_checkpoint_weights, read_checkpoint
    from vla_edge.archs.groot.layers import sinusoid, timestep_features

    config = our_config()
    if full:
        ckpt = read_checkpoint(work / "checkpoint", embodiment=TAG, defaults=config)
        config = ckpt.config
        model = GrootModel(config).eval()
        load_checkpoint_weights(ckpt, model)
    else:
        model = GrootModel(config).eval()
        src = work / "backbone_src" / "Qwen" / "Qwen3-VL-tiny" / "model.safetensors"
        weights = load_file(str(src))
        ours = {"backbone.model." + k: v for k, v in weights.items() if not k.startswith("lm_head")}
        result = model.load_state_dict(ours, strict=False)
        missing = [k for k in result.missing_keys if not k.startswith("action_head.")]
        if missing:
            raise RuntimeError(f"{src}: backbone keys not loaded: {missing[:5]}")
    images = torch.from_numpy(dump["images_uint8"]).permute(0, 3, 1, 2).float()
    images = (images / 255.0 - 0.5) / 0.5
    image_mask = torch.ones(N_SLOTS)
    token_ids = torch.zeros(1, config.max_token_len, dtype=torch.long)
    token_ids[0, :TEXT_IDS] = torch.from_numpy(dump["text_ids"])
    token_mask = (torch.arange(config.max_token_len) < TEXT_IDS)[None].float()
    out: dict[str, np.ndarray] = {}
    with torch.no_grad():
        tokens, deep = model.embed_images(images)
        feats, pad = model.language_features(tokens, deep, image_mask, token_ids, token_mask)
        keep = pad[0] != 0
        out["backbone_features"] = feats[:, keep].numpy()
        if full:
            state = torch.from_numpy(dump["state"])[:, 0]
            vl, text, image, state_tokens = model.fuse(
                tokens, deep, image_mask, token_ids, token_mask, state
            )
            out["vl_tokens"] = vl[:, keep].numpy()
            out["state_tokens"] = state_tokens.numpy()
            noise = torch.from_numpy(dump["noise"])
            b = torch.zeros(1)
            out["first_velocity"] = model.velocity(
                vl,
                text,
                image,
                state_tokens,
                noise,
                timestep_features(b, config.timestep_channels),
                sinusoid(b, config.input_embedding_dim),
                config.embodiment_id,
            ).numpy()
            out["actions"] = model.sample_actions(
                images, image_mask, token_ids, token_mask, state, noise
            ).numpy()
    return out


def compare_run(work: Path) -> dict[str, Any]:
    """Our side against the driver's dump: every intermediate, the first diverging one."""
    dump = dict(np.load(work / "upstream.npz"))
    meta = json.loads((work / "upstream.json").read_text())
    full = meta["mode"] == "full"
    ours = our_dump(work, dump, full)
    order = ["backbone_features", "vl_tokens", "state_tokens", "first_velocity", "actions"]
    order = [name for name in order if name in ours]
    stages, first = {}, None
    for name in order:
        a, b = ours[name].astype(np.float64), dump[name].astype(np.float64)
        if a.shape != b.shape:
            stages[name] = {"shape": list(a.shape), "upstream_shape": list(b.shape)}
            rel = float("inf")
        else:
            max_abs, scale = float(np.abs(a - b).max()), float(np.abs(b).max())
            rel = max_abs / scale if scale else float(max_abs > 0)
            stages[name] = {"max_abs": max_abs, "upstream_max": scale, "rel": rel}
        stages[name]["diverges"] = rel > STAGE_RTOL
        if first is None and stages[name]["diverges"]:
            first = name
    result: dict[str, Any] = {
        "mode": meta["mode"],
        "upstream": meta,
        "stages": stages,
        "first_divergence": first,
        "stage_rtol": STAGE_RTOL,
    }
    if full:
        a, b = ours["actions"][0], dump["actions"][0]
        span = np.where(np.ptp(b, axis=0) > 0, np.ptp(b, axis=0), 1.0)
        pct = 100.0 * np.abs(a - b) / span[None]
        result["actions"] = {"max_pct_of_range": float(pct.max()), "bound_pct": ACTION_BOUND_PCT}
        result["pass"] = bool(pct.max() <= ACTION_BOUND_PCT)
    else:
        result["pass"] = first is None
    return result


def ensure_side(side: Path) -> None:
    """Install :data:`SIDE_PACKAGES` into ``side`` unless its transformers is there."""
    if (side / "transformers" / "__init__.py").is_file():
        return
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--target",
            str(side),
            "--no-deps",
            *SIDE_PACKAGES,
        ],
        check=True,
    )


def main(argv: list[str] | None = None) -> int:
    """Install the side environment, run the driver there, compare, write the JSON."""
    import os

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["driver"]:
        return driver(argv[1:])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", type=Path, default=Path("/tmp/groot_side"))
    parser.add_argument("--source", type=Path, help="an NVIDIA/Isaac-GR00T checkout")
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/groot_upstream"))
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    ensure_side(args.side)
    command = [
        sys.executable,
        "-P",
        str(Path(__file__)),
        "driver",
        "--out",
        str(args.work_dir),
        "--seed",
        str(args.seed),
    ]
    if args.source is not None:
        if not (args.source / "gr00t" / "model" / "gr00t_n1d7" / "gr00t_n1d7.py").is_file():
            raise SystemExit(f"--source {args.source}: not an Isaac-GR00T checkout with N1.7")
        command += ["--source", str(args.source)]
    env = {
        **os.environ,
        "PYTHONPATH": str(args.side),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    subprocess.run(command, env=env, check=True)
    result = {"command": " ".join(sys.argv), "seed": args.seed, **compare_run(args.work_dir)}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: result[k] for k in ("mode", "first_divergence", "pass")}))
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
