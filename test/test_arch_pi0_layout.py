"""π0 / π0.5 checkpoint layout: full-size keys and shapes against a manifest written from
openpi's converter (test/data/pi0_keys.json), the openpi/LeRobot mappings, and config errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from vla_edge.archs.pi0 import GemmaSize, Pi0Config, Pi0Model, SiglipSize, count_parameters
from vla_edge.archs.pi0.layout import (
    EMBED_TOKENS,
    FILE_DROPS,
    UNUSED,
    compare_keys,
    from_openpi,
    lerobot_file_shapes,
    lerobot_to_openpi,
    openpi_file_shapes,
    openpi_module_shapes,
    openpi_to_lerobot,
)
from vla_edge.core.errors import ConfigError

MANIFEST = json.loads((Path(__file__).parent / "data" / "pi0_keys.json").read_text())
FULL = {"pi0": Pi0Config.full_pi0, "pi05": Pi0Config.full_pi05}


def test_manifest_names_its_source():
    source = MANIFEST["source"]
    assert source["repository"] == "Physical-Intelligence/openpi"
    assert len(source["commit"]) == 40
    assert "examples/convert_jax_model_to_pytorch.py" in source["paths"]


@pytest.mark.parametrize("variant", ["pi0", "pi05"])
def test_full_size_model_on_meta_has_exactly_the_published_keys_and_shapes(variant):
    with torch.device("meta"):
        model = Pi0Model(FULL[variant]())
    ours = {k: list(v.shape) for k, v in model.state_dict().items()}
    published = {k: v for k, v in MANIFEST[variant].items() if k not in MANIFEST["unused"]}
    report = compare_keys(ours, published)
    assert report.ok, report
    assert MANIFEST["unused"] == list(UNUSED)
    assert {k: list(s) for k, s in openpi_module_shapes(FULL[variant]()).items()} == MANIFEST[
        variant
    ]
    assert sorted(FILE_DROPS) == sorted(MANIFEST["file_drops"])


def test_full_size_parameter_counts(capsys):
    counts = {}
    for variant, make in FULL.items():
        with torch.device("meta"):
            counts[variant] = count_parameters(Pi0Model(make()))
    with capsys.disabled():
        print(
            f"\nfull-size parameters (tied counted once, unread expert lm_head not built): {counts}"
        )
    assert 3.2e9 < counts["pi0"] < 3.4e9
    # π0.5: adaRMS Linear(W, 3W) in 37 norms and time_mlp_in (W x W) instead of 37 norm
    # weights, state_proj (32 -> W) and action_time_mlp_in (2W -> W)
    w = 1024
    gained = 37 * (3 * w * w + 3 * w) + (w * w + w)
    lost = 37 * w + (32 * w + w) + (2 * w * w + w)
    assert counts["pi05"] - counts["pi0"] == gained - lost


def test_pi0_and_pi05_key_sets_differ_as_documented():
    pi0, pi05 = set(MANIFEST["pi0"]), set(MANIFEST["pi05"])
    expert = "paligemma_with_expert.gemma_expert.model"
    norms = [
        f"{expert}.layers.{i}.{n}"
        for i in range(18)
        for n in ("input_layernorm", "post_attention_layernorm")
    ]
    only_pi0 = {f"{n}.weight" for n in norms} | {f"{expert}.norm.weight"}
    only_pi0 |= {
        f"{p}.{t}"
        for p in ("state_proj", "action_time_mlp_in", "action_time_mlp_out")
        for t in ("weight", "bias")
    }
    only_pi05 = {f"{n}.dense.{t}" for n in [*norms, f"{expert}.norm"] for t in ("weight", "bias")}
    only_pi05 |= {f"{p}.{t}" for p in ("time_mlp_in", "time_mlp_out") for t in ("weight", "bias")}
    assert pi0 - pi05 == only_pi0
    assert pi05 - pi0 == only_pi05


@pytest.mark.parametrize("pi05", [False, True], ids=["pi0", "pi05"])
def test_openpi_file_loads_strictly_after_mapping(pi05):
    config = Pi0Config.tiny(pi05=pi05)
    torch.manual_seed(0)
    source = Pi0Model(config)
    # what openpi's converter writes: the module minus embed_tokens, plus the unread head
    file = {k: v.clone() for k, v in source.state_dict().items() if k not in FILE_DROPS}
    file[UNUSED[0]] = torch.zeros(config.vocab_size, config.expert.width)
    assert compare_keys({k: tuple(v.shape) for k, v in file.items()}, openpi_file_shapes(config)).ok
    target = Pi0Model(config)
    target.load_state_dict(from_openpi(file), strict=True)
    for key, value in source.state_dict().items():
        assert torch.equal(target.state_dict()[key], value), key
    assert torch.equal(
        target.language_model.embed_tokens.weight, source.language_model.embed_tokens.weight
    )


@pytest.mark.parametrize("pi05", [False, True], ids=["pi0", "pi05"])
def test_lerobot_keys_map_to_openpi_and_back(pi05):
    config = Pi0Config.tiny(pi05=pi05)
    shapes = openpi_file_shapes(config)
    file = {k: torch.zeros(s) for k, s in shapes.items()}
    lerobot = openpi_to_lerobot(file)
    assert set(lerobot) == set(lerobot_file_shapes(config))
    assert all(k.startswith("model.") for k in lerobot)
    assert set(lerobot_to_openpi(lerobot, pi05=pi05)) == set(file)
    # LeRobot's loader renames the time MLP to the variant's and skips plain adaRMS norms
    if pi05:
        odd = {"model.action_time_mlp_in.weight": torch.zeros(1)}
        odd["model.paligemma_with_expert.gemma_expert.model.norm.weight"] = torch.zeros(1)
        assert set(lerobot_to_openpi(odd, pi05=True)) == {"time_mlp_in.weight"}
    else:
        odd = {"model.time_mlp_out.bias": torch.zeros(1)}
        assert set(lerobot_to_openpi(odd, pi05=False)) == {"action_time_mlp_out.bias"}


def test_compare_keys_names_missing_unexpected_and_misshaped():
    report = compare_keys({"a": (1,), "b": (2,), "x": (3,)}, {"a": (1,), "b": (3,), "c": (4,)})
    assert report.missing == ("c",) and report.unexpected == ("x",)
    assert report.misshaped == (("b", (2,), (3,)),)
    assert not report.ok
    assert EMBED_TOKENS in openpi_module_shapes(Pi0Config.tiny())


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (
            lambda: SiglipSize(
                hidden=30, depth=1, num_heads=4, mlp_dim=8, patch_size=14, image_size=224
            ),
            "num_heads=4 does not divide hidden=30",
        ),
        (
            lambda: SiglipSize(
                hidden=32, depth=1, num_heads=4, mlp_dim=8, patch_size=15, image_size=224
            ),
            "patch_size=15",
        ),
        (
            lambda: GemmaSize(
                width=64, depth=1, mlp_dim=8, num_heads=6, num_kv_heads=4, head_dim=16
            ),
            "num_kv_heads=4",
        ),
        (lambda: Pi0Config.tiny(projection_dim=32), "projection_dim=32 must equal"),
        (lambda: Pi0Config.tiny(expert=GemmaSize.dummy(depth=3)), "expert.depth=3"),
        (lambda: Pi0Config.tiny(action_horizon=0), "action_horizon"),
        (lambda: Pi0Config.tiny(discrete_state_input=True), "discrete_state_input"),
        (lambda: Pi0Config.tiny(image_slots=("a", "a")), "repeat"),
    ],
)
def test_inconsistent_config_is_a_named_config_error(make, words):
    with pytest.raises(ConfigError, match=words.replace("(", r"\(").replace(")", r"\)")):
        make()


def test_named_sizes():
    pi0, pi05 = Pi0Config.full_pi0(), Pi0Config.full_pi05(action_horizon=10)
    assert (pi0.max_token_len, pi05.max_token_len, pi05.action_horizon) == (48, 200, 10)
    assert pi0.paligemma == GemmaSize.gemma_2b() and pi0.expert == GemmaSize.gemma_300m()
    assert pi0.vision.num_tokens == 256 and pi0.prefix_len == 816 and pi05.prefix_len == 968
    assert pi0.image_slots == ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")
    assert pi05.state_in_prompt and not pi0.state_in_prompt
    assert not Pi0Config.full_pi05(discrete_state_input=False).state_in_prompt
