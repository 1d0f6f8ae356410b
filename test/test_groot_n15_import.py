"""GR00T N1.5 checkpoints: a tiny directory in upstream's own layout and file names
(``config.json`` with ``backbone_cfg`` / ``action_head_cfg``, sharded
``model-0000k-of-00002.safetensors`` with their index or one ``model.safetensors``,
``experiment_cfg/metadata.json``, the unread ``lm_head``) is found as ``groot_n15``, read
from its headers to the config it was written from, and its weights load strictly into a
model that then gives the writer's actions; ``vla-edge import --list`` names both layouts;
each bad input (an unknown embodiment tag, missing statistics, a mis-shaped key, a missing
key) is its named error listing what it found, and writes nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from vla_edge.archs import registry
from vla_edge.archs.common import ImportOptions, read_header
from vla_edge.archs.groot.checkpoint import (
    UnknownEmbodimentError,
    copy_weights,
    load_checkpoint_weights,
)
from vla_edge.archs.groot.n15_checkpoint import load_weights, read_checkpoint
from vla_edge.archs.groot.n15_config import QWEN3_VOCAB_SIZE, GrootN15Config
from vla_edge.archs.groot.n15_model import GrootN15Model
from vla_edge.archs.importer import default_robot, import_checkpoint
from vla_edge.cli import main
from vla_edge.core.errors import (
    CheckpointError,
    CheckpointKeysError,
    NormStatsError,
    TokenizerMismatchError,
)

TAGS = ("gr1", "new_embodiment")
STATE = {"left_arm": 4, "left_hand": 2}
ACTION = {"left_arm": 4, "left_hand": 1}
LM_HEAD = "backbone.eagle_model.language_model.lm_head.weight"


def tiny_config(**overrides) -> GrootN15Config:
    """Tiny, with N1.5's 32 embodiment slices so the published tags' slices exist."""
    return GrootN15Config.tiny(**{"max_num_embodiments": 32, "embodiment_id": 24, **overrides})


def group_stats(groups: dict[str, int], offset: float) -> dict:
    out = {}
    for i, (key, dim) in enumerate(groups.items()):
        base = [offset + i + j / 10 for j in range(dim)]
        out[key] = {
            "min": [v - 1.0 for v in base],
            "max": [v + 1.0 for v in base],
            "mean": base,
            "std": [0.5] * dim,
            "q01": [v - 0.9 for v in base],
            "q99": [v + 0.9 for v in base],
        }
    return out


def upstream_config_json(config: GrootN15Config) -> dict:
    """``GR00T_N1_5Config`` as upstream's ``save_pretrained`` writes it (fields read here)."""
    return {
        "model_type": "gr00t_n1_5",
        "architectures": ["GR00T_N1_5"],
        "action_horizon": config.action_horizon,
        "action_dim": config.max_action_dim,
        "backbone_cfg": {
            "eagle_path": "NVEagle/eagle_er-qwen3_1_7B-Siglip2_400M",
            "load_bf16": False,
            "project_to_dim": config.project_to_dim,
            "reproject_vision": False,
            "select_layer": config.text.depth,
            "tune_llm": False,
            "tune_visual": True,
            "use_flash_attention": True,
        },
        "action_head_cfg": {
            "action_dim": config.max_action_dim,
            "action_horizon": config.action_horizon,
            "add_pos_embed": True,
            "backbone_embedding_dim": config.backbone_width,
            "diffusion_model_cfg": {
                "attention_head_dim": config.dit.head_dim,
                "cross_attention_dim": config.backbone_width,
                "dropout": 0.2,
                "final_dropout": True,
                "interleave_self_attention": config.interleave_self_attention,
                "norm_type": "ada_norm",
                "num_attention_heads": config.dit.num_heads,
                "num_layers": config.dit.depth,
                "output_dim": config.hidden_size,
                "positional_embeddings": None,
            },
            "hidden_size": config.hidden_size,
            "input_embedding_dim": config.input_embedding_dim,
            "max_action_dim": config.max_action_dim,
            "max_state_dim": config.max_state_dim,
            "model_dtype": "float32",
            "noise_beta_alpha": 1.5,
            "noise_beta_beta": 1.0,
            "noise_s": 0.999,
            "num_inference_timesteps": config.flow_steps,
            "num_target_vision_tokens": config.num_future_tokens,
            "num_timestep_buckets": config.num_timestep_buckets,
            "tune_diffusion_model": True,
            "tune_projector": True,
            "use_vlln": True,
            "vl_self_attention_cfg": {
                "attention_head_dim": config.vl_self_attention.head_dim,
                "dropout": 0.2,
                "final_dropout": True,
                "num_attention_heads": config.vl_self_attention.num_heads,
                "num_layers": config.vl_self_attention.depth,
                "positional_embeddings": None,
            },
        },
    }


def write_upstream_n15(
    root: Path,
    model: GrootN15Model,
    *,
    sharded: bool = True,
    tags: tuple[str, ...] = TAGS,
    metadata: dict | None = None,
    edit=None,
) -> Path:
    """``model`` in upstream's N1.5 directory layout; ``edit(state_dict)`` alters the tensors."""
    config = model.config
    (root / "experiment_cfg").mkdir(parents=True)
    sd = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    sd[LM_HEAD] = torch.randn(config.text.vocab_size, config.text.width)
    if edit is not None:
        edit(sd)
    if sharded:
        names = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
        parts = (
            {k: v for k, v in sd.items() if k.startswith("backbone.")},
            {k: v for k, v in sd.items() if not k.startswith("backbone.")},
        )
        for name, part in zip(names, parts, strict=True):
            save_file(part, str(root / name), metadata={"format": "pt"})
        index = {
            "metadata": {"total_size": sum(v.numel() * 4 for v in sd.values())},
            "weight_map": {k: names[0] if k in parts[0] else names[1] for k in sorted(sd)},
        }
        (root / "model.safetensors.index.json").write_text(json.dumps(index))
    else:
        save_file(sd, str(root / "model.safetensors"), metadata={"format": "pt"})
    (root / "config.json").write_text(json.dumps(upstream_config_json(config)))
    if metadata is None:
        metadata = {
            tag: {
                "statistics": {
                    "state": group_stats(STATE, float(i)),
                    "action": group_stats(ACTION, 5.0 + i),
                },
                "modalities": {
                    "video": {"ego_view": {"resolution": [256, 256], "channels": 3}},
                    "state": {k: {"shape": [d], "absolute": True} for k, d in STATE.items()},
                    "action": {k: {"shape": [d], "absolute": True} for k, d in ACTION.items()},
                },
                "embodiment_tag": tag,
            }
            for i, tag in enumerate(tags)
        }
    (root / "experiment_cfg" / "metadata.json").write_text(json.dumps(metadata))
    return root


@pytest.fixture(scope="module")
def model() -> GrootN15Model:
    torch.manual_seed(0)
    model = GrootN15Model(tiny_config()).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2)
    return model


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, model) -> Path:
    return write_upstream_n15(tmp_path_factory.mktemp("n15") / "ckpt", model)


def read(path: Path, **options):
    """``read_checkpoint`` with what the files do not fix taken from the tiny size."""
    return read_checkpoint(path, ImportOptions(vision_heads=4, **options), defaults=tiny_config())


def example(config: GrootN15Config) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(5)
    v = config.vision
    mask = torch.zeros(1, config.max_token_len)
    mask[0, :4] = 1.0
    return {
        "images": torch.rand(config.n_slots, 3, v.image_size, v.image_size, generator=gen) * 2 - 1,
        "image_mask": torch.ones(config.n_slots),
        "token_ids": torch.randint(0, 500, (1, config.max_token_len), generator=gen),
        "token_mask": mask,
        "state": torch.randn(1, config.max_state_dim, generator=gen),
        "noise": torch.randn(1, config.action_horizon, config.max_action_dim, generator=gen),
    }


def test_import_list_names_the_n15_and_n17_layouts(capsys) -> None:
    assert main(["import", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    n17 = next(x for x in lines if x.startswith("groot "))
    n15 = next(x for x in lines if x.startswith("groot_n15 "))
    assert "GR00T N1.7" in n17 and "isaac_gr00t (N1.7" in n17 and "refused" not in n17
    assert "GR00T N1.5" in n15 and "isaac_gr00t_n1d5" in n15
    assert "experiment_cfg/metadata.json" in n15 and "no import needed" not in n15


def test_the_registry_finds_an_n15_directory_as_groot_n15(checkpoint, tmp_path) -> None:
    assert registry.find(checkpoint).name == "groot_n15"
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "config.json").write_text(json.dumps({"model_type": "gr00t_n1_5"}))
    assert registry.find(bare).name == "groot_n15"
    with pytest.raises(NormStatsError, match=r"experiment_cfg/metadata.json"):
        read(bare)


@pytest.mark.parametrize("sharded", [True, False])
def test_the_headers_give_back_the_config_the_directory_was_written_from(
    tmp_path, model, sharded
) -> None:
    root = write_upstream_n15(tmp_path / "ckpt", model, sharded=sharded)
    ckpt = read(root, embodiment="gr1")
    assert ckpt.config == model.config
    assert (ckpt.architecture, ckpt.layout, ckpt.asset_id) == (
        "groot_n15",
        "isaac_gr00t_n1d5",
        "gr1",
    )
    assert LM_HEAD not in ckpt.key_map and set(ckpt.key_map) == set(model.state_dict())
    assert set(ckpt.config_json["weight_files"].values()) == (
        {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}
        if sharded
        else {"model.safetensors"}
    )


def test_a_checkpoint_without_pixel_shuffle_and_with_a_projection_reads_back(tmp_path):
    """The full size's backbone variant (256 tokens, one-linear ``mlp1``) at tiny size, with
    ``eagle_linear`` (``project_to_dim``)."""
    config = tiny_config(
        vision=tiny_config().vision.model_copy(update={"shuffle": 1}),
        projector_layers=1,
        project_to_dim=48,
        vl_self_attention={"depth": 1, "num_heads": 4, "head_dim": 12},
    )
    root = write_upstream_n15(tmp_path / "ckpt", GrootN15Model(config), sharded=False)
    ckpt = read(root, embodiment="gr1")
    assert ckpt.config == config
    assert "backbone.eagle_linear.weight" in ckpt.key_map


def test_the_weights_load_strictly_and_give_the_writers_actions(checkpoint, model, tmp_path):
    ckpt = read(checkpoint, embodiment="gr1")
    fresh = GrootN15Model(ckpt.config).eval()
    assert load_checkpoint_weights(ckpt, fresh) == len(model.state_dict())
    ex = example(model.config)
    torch.testing.assert_close(
        fresh.sample_actions(**ex), model.sample_actions(**ex), rtol=0, atol=0
    )
    # the same through the policy directory's one file
    copy_weights(ckpt, tmp_path / "model.safetensors", {"format": "pt"})
    assert set(read_header(tmp_path / "model.safetensors")) == set(model.state_dict())
    again = GrootN15Model(ckpt.config).eval()
    load_weights(tmp_path, again)
    torch.testing.assert_close(
        again.sample_actions(**ex), model.sample_actions(**ex), rtol=0, atol=0
    )


def test_the_embodiment_tag_picks_its_weight_slice_and_its_statistics(checkpoint) -> None:
    gr1 = read(checkpoint, embodiment="gr1")
    new = read(checkpoint, embodiment="new_embodiment")
    assert (gr1.config.embodiment_id, new.config.embodiment_id) == (24, 31)
    assert gr1.normalisation["embodiment"] == "gr1"
    assert new.normalisation["actions"] != gr1.normalisation["actions"]
    assert len(gr1.normalisation["state"]["q01"]) == sum(STATE.values())


def test_several_tags_and_no_embodiment_asks_for_one_by_name(checkpoint) -> None:
    with pytest.raises(UnknownEmbodimentError, match=r"2 embodiments \['gr1', 'new_embodiment'\]"):
        read(checkpoint)


def test_an_unknown_embodiment_tag_is_named_with_the_tags_present(checkpoint) -> None:
    with pytest.raises(
        UnknownEmbodimentError,
        match=r"'oxe_droid' is not in the checkpoint; it has \['gr1', 'new_embodiment'\]",
    ):
        read(checkpoint, embodiment="oxe_droid")


def test_a_tag_upstream_gives_no_weight_slice_is_named(tmp_path, model) -> None:
    root = write_upstream_n15(tmp_path / "ckpt", model, tags=("my_robot",))
    with pytest.raises(UnknownEmbodimentError, match=r"'my_robot' has no weight slice.*gr1"):
        read(root)


def test_missing_statistics_in_metadata_are_named(tmp_path, model) -> None:
    metadata = {"gr1": {"modalities": {"state": {"left_arm": {}}, "action": {"left_arm": {}}}}}
    root = write_upstream_n15(tmp_path / "ckpt", model, metadata=metadata)
    with pytest.raises(NormStatsError, match=r"metadata.json: gr1.statistics is missing"):
        read(root)
    metadata = {
        "gr1": {
            "statistics": {"state": group_stats(STATE, 0.0)},
            "modalities": {"state": {"left_arm": {}}, "action": {"left_arm": {}}},
        }
    }
    (root / "experiment_cfg" / "metadata.json").write_text(json.dumps(metadata))
    with pytest.raises(NormStatsError, match=r"metadata.json: gr1.action is missing"):
        read(root)


def test_a_misshaped_key_is_listed_with_both_shapes(tmp_path, model) -> None:
    key = "action_head.model.transformer_blocks.1.attn1.to_q.weight"

    def edit(sd):
        sd[key] = torch.zeros(7, 32)

    root = write_upstream_n15(tmp_path / "ckpt", model, edit=edit)
    with pytest.raises(CheckpointKeysError, match=rf"{key}.*\[7, 32\].*\[32, 32\]") as err:
        read(root, embodiment="gr1")
    assert "model.safetensors.index.json" in str(err.value)


def test_a_missing_key_is_listed(tmp_path, model) -> None:
    key = "backbone.eagle_model.language_model.model.layers.1.mlp.down_proj.weight"
    root = write_upstream_n15(tmp_path / "ckpt", model, edit=lambda sd: sd.pop(key))
    with pytest.raises(CheckpointKeysError, match=rf"missing.*{key}"):
        read(root, embodiment="gr1")


def test_vla_edge_import_checks_the_whole_checkpoint_first_and_writes_nothing(tmp_path) -> None:
    """A bad tag fails before anything else; a good one is read whole, then a directory
    that is no Eagle 2.5 tokenizer (no ``tokenizer.json``) is refused by name before
    anything is written (the whole way: ``test_groot_n15_prompt.py``).

    The import reads what the files do not fix at full size (the tokenizer's ids), so the
    token table here has Qwen3's rows."""
    text = tiny_config().text.model_copy(update={"vocab_size": QWEN3_VOCAB_SIZE})
    full_ids = GrootN15Config.full_n15()
    config = tiny_config(
        text=text,
        lead_token_ids=full_ids.lead_token_ids,
        image_token_id=full_ids.image_token_id,
        image_start_id=full_ids.image_start_id,
        image_end_id=full_ids.image_end_id,
    )
    checkpoint = write_upstream_n15(
        tmp_path / "ckpt", GrootN15Model(config), edit=lambda sd: sd.pop(LM_HEAD)
    )
    tokenizer = tmp_path / "tok"
    tokenizer.mkdir()
    out = tmp_path / "out"
    before = sorted((p.name, p.stat().st_mtime_ns) for p in checkpoint.rglob("*"))

    def run(**options):
        return import_checkpoint(
            checkpoint,
            out,
            tokenizer,
            0.05,
            default_robot(),
            options=ImportOptions(vision_heads=4, **options),
        )

    with pytest.raises(UnknownEmbodimentError, match="'oxe_droid' is not in the checkpoint"):
        run(embodiment="oxe_droid")
    with pytest.raises(TokenizerMismatchError, match="no tokenizer.json; expected Eagle 2.5's"):
        run(embodiment="gr1")
    assert not out.exists()
    assert sorted((p.name, p.stat().st_mtime_ns) for p in checkpoint.rglob("*")) == before


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("positional_embeddings", "sinusoidal", "positional_embeddings = 'sinusoidal'"),
        ("norm_type", "layer_norm", "norm_type = 'layer_norm'"),
    ],
)
def test_a_dit_option_that_is_not_built_is_refused_by_name(
    checkpoint, tmp_path, field, value, words
) -> None:
    root = tmp_path / "ckpt"
    shutil.copytree(checkpoint, root)
    config = json.loads((root / "config.json").read_text())
    config["action_head_cfg"]["diffusion_model_cfg"][field] = value
    (root / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=rf"diffusion_model_cfg.{words}"):
        read(root, embodiment="gr1")
