"""GR00T N1.7's bench hooks: each size at random, and Isaac-GR00T's N1.7 layout to write it in.

:data:`BENCH` is what ``vla-edge bench latency|parity|loop --arch groot`` read (named by
:mod:`.arch`); :func:`write_n17_checkpoint` writes a model as Isaac-GR00T's
``save_pretrained`` lays out an N1.7 checkpoint directory (``model.safetensors``,
``config.json``, ``processor_config.json``, ``statistics.json``, ``embodiment_id.json``),
which ``vla-edge import`` reads back.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from vla_edge.archs.architecture import BenchHooks
from vla_edge.archs.groot.config import IMAGE_SLOTS, GrootConfig, TextSize
from vla_edge.archs.groot.layout import LM_HEAD, UNUSED
from vla_edge.core.errors import ConfigError

EMBODIMENT = "new_embodiment"
"""The embodiment tag the written checkpoint's statistics and weight slice are filed under
(Isaac-GR00T's tag for a robot it was not trained on)."""
STATE_GROUP = "joint_position"
ACTION_GROUP = "joint_position"
"""The one joint group of the state and of the actions (every robot joint, in order)."""
DEPTH_FIELDS = {"fusion": ("text",), "action_head": ("dit",)}
"""GR00T's layer counts that shrink one stage. The vision tower is not searched: its
deepstack taps (after blocks 5, 11 and 17) do not fit in fewer blocks, and at 0.4 B
parameters it is not the stage that runs out of memory."""


def bench_config(size: str, cameras: int) -> GrootConfig:
    """GR00T at ``size`` (``full``: N1.7's, ``small``: tiny) with the first ``cameras`` slots.

    Raises:
        ConfigError: an unknown size or more cameras than slots.
    """
    builds = {"full": GrootConfig.full_n17, "small": GrootConfig.tiny}
    if size not in builds:
        raise ConfigError(f"size = {size!r}, expected one of {tuple(builds)}")
    if not 1 <= cameras <= len(IMAGE_SLOTS):
        raise ConfigError(f"cameras = {cameras}: groot has {len(IMAGE_SLOTS)} image slots")
    return builds[size](image_slots=tuple(IMAGE_SLOTS[:cameras]))


def loop_config(size: str, cameras: int) -> GrootConfig:
    """The model at ``size`` as the N1.7 layout describes it to ``vla-edge import``.

    The checkpoint's processor lists ``cameras`` video keys, so the model has that many
    slots. What an N1.7 directory does not state, the import takes from the full size:
    the small size therefore keeps Qwen3-VL's vocabulary and chat-layout token ids, the
    language model's RoPE base and the full size's ``max_token_len``.
    """
    config = bench_config(size, cameras)
    if size == "full":
        return config
    full = GrootConfig.full_n17()
    text = TextSize(
        **{
            **config.text.model_dump(),
            "vocab_size": full.text.vocab_size,
            "rope_theta": full.text.rope_theta,
        }
    )
    kept = ("lead_token_ids", "image_token_id", "vision_start_id", "vision_end_id")
    return GrootConfig(
        **{
            **config.model_dump(),
            "text": text,
            "max_token_len": full.max_token_len,
            **{name: getattr(full, name) for name in kept},
        }
    )


def n17_config_json(config: GrootConfig) -> dict[str, Any]:
    """``config.json`` as Isaac-GR00T's ``Gr00tN1d7Config.save_pretrained`` writes it."""
    return {
        "model_type": "Gr00tN1d7",
        "model_name": "nvidia/Cosmos-Reason2-2B",
        "select_layer": config.text.depth,
        "backbone_embedding_dim": config.text.width,
        "hidden_size": config.hidden_size,
        "input_embedding_dim": config.input_embedding_dim,
        "max_state_dim": config.max_state_dim,
        "max_action_dim": config.max_action_dim,
        "action_horizon": config.action_horizon,
        "max_seq_len": config.max_seq_len,
        "max_num_embodiments": config.max_num_embodiments,
        "use_alternate_vl_dit": True,
        "attend_text_every_n_blocks": config.attend_text_every_n_blocks,
        "add_pos_embed": True,
        "use_vlln": True,
        "state_history_length": 1,
        "diffusion_model_cfg": {
            "positional_embeddings": None,
            "num_layers": config.dit.depth,
            "num_attention_heads": config.dit.num_heads,
            "attention_head_dim": config.dit.head_dim,
            "norm_type": "ada_norm",
            "output_dim": config.hidden_size,
            "interleave_self_attention": True,
        },
        "vl_self_attention_cfg": {
            "positional_embeddings": None,
            "num_layers": config.vl_self_attention.depth,
            "num_attention_heads": config.vl_self_attention.num_heads,
            "attention_head_dim": config.vl_self_attention.head_dim,
        },
        "num_inference_timesteps": config.flow_steps,
        "num_timestep_buckets": config.num_timestep_buckets,
        "use_percentiles": True,
    }


def n17_statistics(stats: dict[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    """LeRobot-keyed ``stats`` as one joint group each of ``statistics.json``'s parts.

    ``min`` / ``max`` and ``q01`` / ``q99`` are two standard deviations either side of the
    mean (the quantiles are what the processor reads: ``use_percentiles``).
    """
    parts = {}
    for part, key, group in (
        ("state", "observation.state", STATE_GROUP),
        ("action", "action", ACTION_GROUP),
    ):
        mean, std = np.asarray(stats[f"{key}.mean"]), np.asarray(stats[f"{key}.std"])
        low, high = (mean - 2.0 * std).tolist(), (mean + 2.0 * std).tolist()
        parts[part] = {
            group: {
                "mean": mean.tolist(),
                "std": std.tolist(),
                "min": low,
                "max": high,
                "q01": low,
                "q99": high,
            }
        }
    return parts


def n17_processor_config(config: GrootConfig, tag: str) -> dict[str, Any]:
    """``processor_config.json``: embodiment ``tag``'s modalities (one joint group each)."""
    modality = {
        "video": {"delta_indices": [0], "modality_keys": list(config.image_slots)},
        "state": {"delta_indices": [0], "modality_keys": [STATE_GROUP]},
        "action": {
            "delta_indices": list(range(config.action_horizon)),
            "modality_keys": [ACTION_GROUP],
            "mean_std_embedding_keys": None,
        },
        "language": {"delta_indices": [0], "modality_keys": ["annotation.human.task"]},
    }
    size = config.vision.image_size
    return {
        "processor_class": "Gr00tN1d7Processor",
        "processor_kwargs": {
            "modality_configs": {tag: modality},
            "image_target_size": [size, size],
            "max_state_dim": config.max_state_dim,
            "max_action_dim": config.max_action_dim,
            "use_percentiles": True,
            "use_mean_std": False,
            "clip_outliers": True,
        },
    }


def write_n17_checkpoint(
    out: Path, model: Any, stats: dict[str, np.ndarray], tag: str = EMBODIMENT
) -> Path:
    """``model`` (a GrootModel) as an N1.7 checkpoint directory with ``stats`` under ``tag``.

    The weights in one ``model.safetensors`` (the layout's unsharded form; ``bench loop``
    reads that file's size and parameters), the unread ``lm_head`` written as zeros
    (published N1.7 files carry it); ``stats``: LeRobot's keys (``observation.state.mean``,
    ``action.std``, ...), filed as one joint group per part (:func:`n17_statistics`). The
    tensors are written from the model's own memory (a full-size GR00T is not copied).
    """
    import torch
    from safetensors.torch import save_file

    from vla_edge.archs.common import WEIGHTS_NAME
    from vla_edge.archs.groot.checkpoint import (
        EMBODIMENT_ID_NAME,
        PROCESSOR_NAME,
        STATISTICS_NAME,
    )

    c = model.config
    out.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.contiguous() for k, v in model.state_dict().items()}
    tensors[LM_HEAD] = torch.zeros(c.text.vocab_size, c.text.width)
    save_file(tensors, str(out / WEIGHTS_NAME), metadata={"format": "pt"})
    del tensors
    (out / "config.json").write_text(json.dumps(n17_config_json(c), indent=1))
    (out / PROCESSOR_NAME).write_text(json.dumps(n17_processor_config(c, tag), indent=1))
    (out / STATISTICS_NAME).write_text(json.dumps({tag: n17_statistics(stats)}, indent=1))
    (out / EMBODIMENT_ID_NAME).write_text(json.dumps({tag: c.embodiment_id}, indent=1))
    return out


def write_checkpoint(out: Path, model: Any, stats: dict[str, Any], size: str) -> Path:
    """``model`` in the N1.7 layout with LeRobot-keyed ``stats`` (``size`` changes nothing)."""
    return write_n17_checkpoint(out, model, stats)


def write_chat_tokenizer(out: Path, config: GrootConfig, sentences: list[str]) -> Path:
    """A Hugging Face tokenizer directory shaped like Qwen3-VL's, for ``sentences``.

    Byte-level BPE trained on ``sentences`` (the suite's instructions, say), with the
    chat layout's special tokens at the ids ``config`` fixes (``<|im_start|>``,
    ``<|vision_start|>``, ``<|vision_end|>``, ``<|image_pad|>``), ``<|endoftext|>`` and
    ``<|im_end|>`` either side of ``<|im_start|>`` as in Qwen3-VL's, and ``<|endoftext|>``
    as the pad token: what GR00T's prompt (:mod:`.prompt`) and the export's tokenizer check
    (:func:`.processor.check_tokenizer`) need. ``bench loop``'s generic Hugging Face
    tokenizer (one id per word) has none of these tokens.

    Raises:
        ConfigError: the config's chat ids collide with the trained tokens' ids.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from vla_edge.archs.groot.processor import chat_token_ids

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    corpus = [sentence.lower() for sentence in sentences] + ["assistant\n"]
    tokenizer.train_from_iterator(corpus * 20, trainer)
    specials = {token: token_id for token, (_, token_id) in chat_token_ids(config).items()}
    start = specials["<|im_start|>"]
    specials.update({"<|endoftext|>": start - 1, "<|im_end|>": start + 1})
    data = json.loads(tokenizer.to_str())
    if max(data["model"]["vocab"].values()) >= min(specials.values()):
        raise ConfigError(
            f"config's chat token ids {sorted(specials.values())} collide with the "
            f"{len(data['model']['vocab'])} trained tokens"
        )
    data["model"]["vocab"].update(specials)
    data["added_tokens"] = [
        {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False}
        | {"normalized": False, "special": True}
        for t, i in sorted(specials.items(), key=lambda item: item[1])
    ]
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_text(json.dumps(data))
    tokenizer_config = {"tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "<|endoftext|>"}
    (out / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    return out


def import_options(name: str, size: str, config: Any) -> dict[str, Any]:
    """What the import is told: the embodiment tag, and a small size's vision heads.

    The full size's vision heads follow from its width; the small size's do not.
    """
    heads = {} if size == "full" else {"vision_heads": config.vision.num_heads}
    return {"architecture": name, "embodiment": EMBODIMENT, **heads}


BENCH = BenchHooks(
    config=bench_config,
    default_cameras=(1, 2),
    depth_fields=DEPTH_FIELDS,
    loop_config=loop_config,
    write_checkpoint=write_checkpoint,
    import_options=import_options,
    unread_keys=tuple(UNUSED),
    write_tokenizer=write_chat_tokenizer,
)
"""GR00T's bench hooks (:attr:`vla_edge.archs.architecture.Architecture.bench`)."""
