"""SmolVLA checkpoint layout: full-size keys and shapes against a manifest written from
LeRobot's code and SmolVLM2's config (test/data/smolvla_keys.json), the LeRobot mapping,
and config errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from vla_edge.archs.smolvla import (
    SmolVLAConfig,
    SmolVLAModel,
    SmolVLMTextSize,
    SmolVLMVisionSize,
    count_parameters,
)
from vla_edge.archs.smolvla.layout import (
    LM_HEAD,
    UNUSED,
    compare_keys,
    from_lerobot,
    lerobot_file_shapes,
    model_shapes,
    to_lerobot,
)
from vla_edge.core.errors import ConfigError

MANIFEST = json.loads((Path(__file__).parent / "data" / "smolvla_keys.json").read_text())


def test_manifest_names_its_source_and_matches_the_published_checkpoint():
    source = MANIFEST["source"]
    assert source["repository"] == "huggingface/lerobot" and len(source["commit"]) == 40
    assert "src/lerobot/policies/smolvla/smolvlm_with_expert.py" in source["paths"]
    assert source["backbone"]["model"] == "HuggingFaceTB/SmolVLM2-500M-Video-Instruct"
    keys = MANIFEST["smolvla"]
    check = source["checkpoint_check"]
    assert len(keys) == check["tensors"] == 500
    assert sum(math.prod(s) for s in keys.values()) == check["parameters"] == 450_046_176


def test_full_size_model_on_meta_has_exactly_the_published_keys_and_shapes():
    with torch.device("meta"):
        model = SmolVLAModel(SmolVLAConfig.full())
    ours = {"model." + k: list(v.shape) for k, v in model.state_dict().items()}
    published = {k: v for k, v in MANIFEST["smolvla"].items() if k not in MANIFEST["unused"]}
    report = compare_keys(ours, published)
    assert report.ok, report
    assert MANIFEST["unused"] == list(UNUSED)
    file = {k: list(s) for k, s in lerobot_file_shapes(SmolVLAConfig.full()).items()}
    assert file == MANIFEST["smolvla"]


def test_full_size_parameter_count(capsys):
    with torch.device("meta"):
        count = count_parameters(SmolVLAModel(SmolVLAConfig.full()))
    lm_head = 49280 * 960
    with capsys.disabled():
        print(f"\nfull-size SmolVLA parameters built: {count:,} (+ unread lm_head {lm_head:,})")
    assert count == 402_737_376
    assert count + lm_head == 450_046_176  # lerobot/smolvla_base's model.safetensors


def test_backbone_layers_beyond_num_vlm_layers_are_not_built():
    config = SmolVLAConfig.tiny()
    assert (config.text.depth, config.num_vlm_layers) == (6, 4)
    layers = {k.split(".")[5] for k in model_shapes(config) if ".text_model.layers." in k}
    assert layers == {"0", "1", "2", "3"}
    expert = {k.split(".")[3] for k in model_shapes(config) if ".lm_expert.layers." in k}
    assert expert == {"0", "1", "2", "3"}


def test_lerobot_file_loads_strictly_after_mapping():
    config = SmolVLAConfig.tiny()
    torch.manual_seed(0)
    source = SmolVLAModel(config)
    file = to_lerobot({k: v.clone() for k, v in source.state_dict().items()})
    file[LM_HEAD] = torch.zeros(config.text.vocab_size, config.text.width)
    file["normalize_inputs.buffer_observation_state.mean"] = torch.zeros(6)  # older files
    shapes = {k: tuple(v.shape) for k, v in file.items() if k.startswith("model.")}
    assert compare_keys(shapes, lerobot_file_shapes(config)).ok
    target = SmolVLAModel(config)
    target.load_state_dict(from_lerobot(file), strict=True)
    for key, value in source.state_dict().items():
        assert torch.equal(target.state_dict()[key], value), key


def test_compare_keys_names_missing_unexpected_and_misshaped():
    report = compare_keys({"a": (1,), "b": (2,), "x": (3,)}, {"a": (1,), "b": (3,), "c": (4,)})
    assert report.missing == ("c",) and report.unexpected == ("x",)
    assert report.misshaped == (("b", (2,), (3,)),)


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (
            lambda: SmolVLMVisionSize(
                hidden=30,
                depth=1,
                num_heads=4,
                mlp_dim=8,
                patch_size=8,
                image_size=64,
                scale_factor=2,
            ),
            "num_heads=4 does not divide hidden=30",
        ),
        (
            lambda: SmolVLMVisionSize(
                hidden=32,
                depth=1,
                num_heads=4,
                mlp_dim=8,
                patch_size=8,
                image_size=60,
                scale_factor=2,
            ),
            "patch_size=8 does not divide image_size=60",
        ),
        (
            lambda: SmolVLMVisionSize(
                hidden=32,
                depth=1,
                num_heads=4,
                mlp_dim=8,
                patch_size=8,
                image_size=64,
                scale_factor=3,
            ),
            "scale_factor=3",
        ),
        (
            lambda: SmolVLMTextSize(
                width=64, depth=2, mlp_dim=8, num_heads=6, num_kv_heads=4, head_dim=16
            ),
            "num_kv_heads=4",
        ),
        (lambda: SmolVLAConfig.tiny(num_vlm_layers=7), "num_vlm_layers=7 exceeds"),
        (lambda: SmolVLAConfig.tiny(expert_width_multiplier=0.77), "= 49 must be even"),
        (lambda: SmolVLAConfig.tiny(min_period=5.0), "min_period=5.0"),
        (lambda: SmolVLAConfig.tiny(chunk_size=0), "chunk_size"),
        (lambda: SmolVLAConfig.tiny(image_slots=("a", "a")), "repeat"),
        (lambda: SmolVLAConfig.tiny(attention_mode="self_attn"), "attention_mode"),
    ],
)
def test_inconsistent_config_is_a_named_config_error(make, words):
    with pytest.raises(ConfigError, match=words):
        make()


def test_named_sizes():
    full = SmolVLAConfig.full()
    assert full.text == SmolVLMTextSize.smolvlm2_500m()
    assert full.vision == SmolVLMVisionSize.smolvlm2_500m()
    assert (full.num_vlm_layers, full.chunk_size, full.flow_steps, full.max_token_len) == (
        16,
        50,
        10,
        48,
    )
    assert (full.vision.num_patches, full.vision.num_tokens) == (1024, 64)
    assert full.prefix_len == 3 * 64 + 48 + 1
    assert full.cross_attention_layers == tuple(range(1, 16, 2))
    assert (full.min_period, full.max_period, full.rope_max_wavelength) == (4e-3, 4.0, 10_000.0)
    every = SmolVLAConfig.tiny(self_attn_every_n_layers=0)
    assert every.cross_attention_layers == (0, 1, 2, 3)
