"""GR00T checkpoints: a tiny N1.7 directory in upstream's layout (sharded weights with their
index, ``config.json``, ``processor_config.json``, ``statistics.json``, ``embodiment_id.json``)
reads back and loads strictly, and each bad input is its named error; N1.5's
``experiment_cfg/metadata.json`` gives its embodiment and statistics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from vla_edge.archs.groot import GrootConfig, GrootModel, build_stages, run_stages
from vla_edge.archs.groot.checkpoint import (
    INDEX_NAME,
    UnknownEmbodimentError,
    copy_weights,
    load_checkpoint_weights,
    load_weights,
    n15_normalisation,
    n17_normalisation,
    read_checkpoint,
)
from vla_edge.archs.groot.layout import LM_HEAD, from_upstream, model_shapes
from vla_edge.core.errors import (
    CheckpointError,
    CheckpointKeysError,
    NormStatsError,
    UnknownArchitectureError,
)

pytestmark = pytest.mark.slow

TAG = "libero_sim"
STATE_GROUPS = {"eef": 6, "gripper": 2}
ACTION_GROUPS = {"eef": 6, "gripper": 1}


def stats(groups: dict[str, int], offset: float) -> dict[str, dict[str, list[float]]]:
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


def upstream_config_json(config: GrootConfig) -> dict:
    """``Gr00tN1d7Config`` as upstream's ``save_pretrained`` writes it (fields read here)."""
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
        "attend_text_every_n_blocks": 2,
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
        "num_inference_timesteps": 4,
        "num_timestep_buckets": 1000,
        "use_percentiles": True,
    }


def write_upstream_n17(
    root: Path,
    model: GrootModel,
    use_percentiles: bool = True,
    lm_head: bool = True,
    processor_kwargs: dict | None = None,
) -> Path:
    """A tiny checkpoint in upstream's N1.7 layout: two shards and their index.

    ``processor_kwargs``: more ``processor_config.json`` kwargs (e.g. the image transform's).
    """
    root.mkdir(parents=True, exist_ok=True)
    c = model.config
    sd = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    if lm_head:
        sd[LM_HEAD] = sd["backbone.model.model.language_model.embed_tokens.weight"].clone()
    shards = {
        "model-00001-of-00002.safetensors": {
            k: v for k, v in sd.items() if k.startswith("backbone")
        },
        "model-00002-of-00002.safetensors": {
            k: v for k, v in sd.items() if not k.startswith("backbone")
        },
    }
    weight_map = {}
    for name, tensors in shards.items():
        save_file(tensors, str(root / name), metadata={"format": "pt"})
        weight_map.update({k: name for k in tensors})
    total = sum(v.numel() * v.element_size() for v in sd.values())
    (root / INDEX_NAME).write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map})
    )
    (root / "config.json").write_text(json.dumps(upstream_config_json(c)))
    modality = {
        "video": {"delta_indices": [0], "modality_keys": list(c.image_slots)},
        "state": {"delta_indices": [0], "modality_keys": list(STATE_GROUPS)},
        "action": {
            "delta_indices": list(range(c.action_horizon)),
            "modality_keys": list(ACTION_GROUPS),
            "mean_std_embedding_keys": None,
        },
        "language": {"delta_indices": [0], "modality_keys": ["annotation.human.task"]},
    }
    processor = {
        "processor_class": "Gr00tN1d7Processor",
        "processor_kwargs": {
            "modality_configs": {TAG: modality, "new_embodiment": modality},
            "image_target_size": [c.vision.image_size, c.vision.image_size],
            "max_state_dim": c.max_state_dim,
            "max_action_dim": c.max_action_dim,
            "use_percentiles": use_percentiles,
            "use_mean_std": False,
            "clip_outliers": True,
            **(processor_kwargs or {}),
        },
    }
    (root / "processor_config.json").write_text(json.dumps(processor))
    statistics = {
        TAG: {"state": stats(STATE_GROUPS, 0.0), "action": stats(ACTION_GROUPS, 10.0)},
        "new_embodiment": {"state": stats(STATE_GROUPS, 1.0), "action": stats(ACTION_GROUPS, 2.0)},
    }
    (root / "statistics.json").write_text(json.dumps(statistics))
    (root / "embodiment_id.json").write_text(
        json.dumps({TAG: c.embodiment_id, "new_embodiment": 3, "unitree_g1_sonic": 1})
    )
    return root


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    model = GrootModel(GrootConfig.tiny()).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2)
    return model


@pytest.fixture
def checkpoint_dir(tmp_path, tiny):
    return write_upstream_n17(tmp_path / "libero_10", tiny)


def read(path: Path, **kwargs):
    return read_checkpoint(path, defaults=GrootConfig.tiny(), **kwargs)


def test_sharded_n17_checkpoint_reads_back_its_config_and_loads_strictly(
    checkpoint_dir, tiny, tmp_path
):
    ckpt = read(checkpoint_dir, embodiment=TAG)
    assert ckpt.layout == "isaac_gr00t" and ckpt.architecture == "groot"
    assert ckpt.config == tiny.config  # every size from the header and config.json
    assert set(ckpt.key_map) == set(model_shapes(tiny.config))  # lm_head dropped
    assert ckpt.weights_dtypes == ("float32",)
    policy = tmp_path / "policy"
    policy.mkdir()
    copy_weights(ckpt, policy / "model.safetensors")
    fresh = GrootModel(ckpt.config).eval()
    load_weights(policy, fresh)
    direct = GrootModel(ckpt.config).eval()
    assert load_checkpoint_weights(ckpt, direct) == len(ckpt.key_map)
    x = build_stages(tiny).example_inputs()
    stages = build_stages(tiny)
    want = run_stages(stages, *host(x))
    for model in (fresh, direct):
        torch.testing.assert_close(run_stages(build_stages(model), *host(x)), want, rtol=0, atol=0)


def host(example):
    (images,) = example["vision_encoder"]
    _, _, image_mask, token_ids, token_mask, state = example["fusion"]
    return images, image_mask, token_ids, token_mask, state, example["action_head"][4]


def test_embodiment_selects_its_slice_and_statistics(checkpoint_dir):
    other = read(checkpoint_dir, embodiment="new_embodiment")
    assert other.config.embodiment_id == 3
    assert other.normalisation["embodiment"] == "new_embodiment"
    assert other.normalisation["state"]["q01"][0] == pytest.approx(1.0 - 0.9)


def test_embodiment_the_checkpoint_lacks_is_a_named_error_listing_its_tags(checkpoint_dir):
    with pytest.raises(UnknownEmbodimentError, match="'gr1' is not in the checkpoint") as err:
        read(checkpoint_dir, embodiment="gr1")
    assert "['libero_sim', 'new_embodiment']" in str(err.value)
    # a slice without statistics is not offered either
    with pytest.raises(UnknownEmbodimentError, match="unitree_g1_sonic"):
        read(checkpoint_dir, embodiment="unitree_g1_sonic")


def test_several_embodiments_and_none_asked_names_the_option(checkpoint_dir):
    with pytest.raises(UnknownEmbodimentError, match="pass --embodiment TAG"):
        read(checkpoint_dir)


def test_missing_statistics_is_a_norm_stats_error(checkpoint_dir):
    (checkpoint_dir / "statistics.json").unlink()
    with pytest.raises(NormStatsError, match=r"statistics\.json: not found"):
        read(checkpoint_dir, embodiment=TAG)


def test_misshaped_key_is_a_keys_error_naming_key_and_shapes(checkpoint_dir):
    shard = checkpoint_dir / "model-00002-of-00002.safetensors"
    from safetensors.torch import load_file

    tensors = load_file(str(shard))
    key = "action_head.action_decoder.layer2.W"
    tensors[key] = torch.zeros(4, 48, 11)
    save_file(tensors, str(shard))
    with pytest.raises(CheckpointKeysError, match="1 mis-shaped") as err:
        read(checkpoint_dir, embodiment=TAG)
    assert f"{key} [4, 48, 11] (expected [4, 48, 10])" in str(err.value)


def test_index_naming_a_key_its_shard_lacks_is_a_checkpoint_error(checkpoint_dir):
    index = json.loads((checkpoint_dir / INDEX_NAME).read_text())
    index["weight_map"]["action_head.extra.weight"] = "model-00002-of-00002.safetensors"
    (checkpoint_dir / INDEX_NAME).write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="action_head.extra.weight"):
        read(checkpoint_dir, embodiment=TAG)


def test_file_without_lm_head_reads_too(tmp_path, tiny):
    path = write_upstream_n17(tmp_path / "no_head", tiny, lm_head=False)
    assert read(path, embodiment=TAG).config == tiny.config


def upstream_section(path: Path) -> dict:
    """The statistics as upstream's processor applies them (before the policy schema)."""
    processor = json.loads((path / "processor_config.json").read_text())["processor_kwargs"]
    return n17_normalisation(path, TAG, processor)


def test_normalisation_follows_the_processor_config(checkpoint_dir, tmp_path, tiny):
    section = upstream_section(checkpoint_dir)
    assert section["kind"] == "quantile" and section["clip"] is True
    assert [g["key"] for g in section["state"]["groups"]] == list(STATE_GROUPS)
    assert len(section["state"]["q01"]) == sum(STATE_GROUPS.values())
    assert section["actions"]["q99"][0] == pytest.approx(10.9)
    minmax = upstream_section(write_upstream_n17(tmp_path / "minmax", tiny, use_percentiles=False))
    assert minmax["kind"] == "min_max"
    assert minmax["actions"]["min"][0] == pytest.approx(9.0)
    # a group under mean_std_embedding_keys is normalised by mean / std
    processor = json.loads((checkpoint_dir / "processor_config.json").read_text())
    configs = processor["processor_kwargs"]["modality_configs"][TAG]
    configs["state"]["mean_std_embedding_keys"] = ["gripper"]
    (checkpoint_dir / "processor_config.json").write_text(json.dumps(processor))
    mixed = upstream_section(checkpoint_dir)["state"]
    assert mixed["kind"] == "per_group"
    assert [g["kind"] for g in mixed["groups"]] == ["quantile", "mean_std"]
    assert mixed["groups"][1]["std"] == [0.5, 0.5]


def test_relative_action_groups_take_the_relative_statistics(checkpoint_dir):
    processor = json.loads((checkpoint_dir / "processor_config.json").read_text())
    kwargs = processor["processor_kwargs"]
    kwargs["use_relative_action"] = True
    kwargs["modality_configs"][TAG]["action"]["action_configs"] = [
        {"rep": "relative", "type": "eef", "format": "xyz+rot6d"},
        {"rep": "absolute", "type": "non_eef", "format": "default"},
    ]
    (checkpoint_dir / "processor_config.json").write_text(json.dumps(processor))
    with pytest.raises(NormStatsError, match="libero_sim.relative_action.eef is missing"):
        read(checkpoint_dir, embodiment=TAG)
    statistics = json.loads((checkpoint_dir / "statistics.json").read_text())
    statistics[TAG]["relative_action"] = {"eef": stats({"eef": 6}, 100.0)["eef"]}
    (checkpoint_dir / "statistics.json").write_text(json.dumps(statistics))
    section = read(checkpoint_dir, embodiment=TAG).normalisation
    assert section["relative_action_keys"] == ["eef"]
    # the relative eef group by its min / max even with use_percentiles, as upstream reads it
    actions = section["actions"]
    assert [(g["key"], g["kind"]) for g in actions["groups"]] == [
        ("eef", "min_max"),
        ("gripper", "quantile"),
    ]
    assert actions["q01"][0] == pytest.approx(99.0)  # the relative eef's min, not its q01
    assert actions["q01"][6] == pytest.approx(11.0 - 0.9)  # the absolute gripper's q01


def test_from_upstream_drops_only_the_lm_head(tiny):
    sd = dict(tiny.state_dict())
    sd[LM_HEAD] = torch.zeros(1)
    assert set(from_upstream(sd)) == set(tiny.state_dict())


def test_n15_metadata_gives_the_embodiment_and_min_max_statistics(tmp_path):
    root = tmp_path / "n15"
    (root / "experiment_cfg").mkdir(parents=True)
    (root / "config.json").write_text(json.dumps({"model_type": "gr00t_n1_5"}))
    metadata = {
        "gr1": {
            "statistics": {"state": stats(STATE_GROUPS, 0.0), "action": stats(ACTION_GROUPS, 5.0)},
            "modalities": {
                "state": {k: {"shape": [d]} for k, d in STATE_GROUPS.items()},
                "action": {k: {"shape": [d]} for k, d in ACTION_GROUPS.items()},
            },
            "embodiment_tag": "gr1",
        }
    }
    (root / "experiment_cfg" / "metadata.json").write_text(json.dumps(metadata))
    tag, slice_id, section = n15_normalisation(root, None)
    assert (tag, slice_id) == ("gr1", 24)
    assert section["kind"] == "min_max"
    assert section["actions"]["max"][0] == pytest.approx(6.0)
    with pytest.raises(UnknownEmbodimentError, match=r"'oxe_droid' is not in the checkpoint.*gr1"):
        n15_normalisation(root, "oxe_droid")
    with pytest.raises(UnknownArchitectureError, match="N1.5 checkpoint.*'gr1'"):
        read_checkpoint(root)


def test_a_processor_keeping_fewer_action_steps_than_the_model_makes_is_refused(
    checkpoint_dir, tiny
):
    """Upstream executes the first ``len(action.delta_indices)`` steps of the chunk; the
    programs return all ``action_horizon`` steps, so the import refuses a shorter list
    rather than send the untrained tail to the controller."""
    assert read(checkpoint_dir, embodiment=TAG).config.action_horizon == tiny.config.action_horizon
    processor = json.loads((checkpoint_dir / "processor_config.json").read_text())
    keep = tiny.config.action_horizon - 2
    modality = processor["processor_kwargs"]["modality_configs"][TAG]
    modality["action"]["delta_indices"] = list(range(keep))
    (checkpoint_dir / "processor_config.json").write_text(json.dumps(processor))
    with pytest.raises(
        CheckpointError,
        match=rf"{TAG}.action.delta_indices has {keep} steps and the model's action_horizon "
        rf"is {tiny.config.action_horizon}",
    ):
        read(checkpoint_dir, embodiment=TAG)
