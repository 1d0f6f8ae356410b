"""``vla-edge import`` for SmolVLA: tiny checkpoints in LeRobot's pretrained layout (processor
statistics files, or the older statistics inside ``model.safetensors``) become policy
directories that load back to the same weights and the same actions; every bad input is a
named error that writes nothing; ``vla-edge import --list`` prints the registry."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from vla_edge.actions.space import JointCalibration
from vla_edge.archs import common as common_module
from vla_edge.archs import registry
from vla_edge.archs.common import ImportOptions, compare_keys
from vla_edge.archs.importer import Robot, default_robot, import_checkpoint
from vla_edge.archs.policy_dir import FORMAT, load_policy_dir
from vla_edge.archs.smolvla import SmolVLAConfig, SmolVLAModel, SmolVLMTextSize
from vla_edge.archs.smolvla import checkpoint as ckpt_module
from vla_edge.archs.smolvla.bench import (
    POST_STATS,
    PRE_STATS,
    smolvla_config_json,
    write_smolvla_checkpoint,
)
from vla_edge.archs.smolvla.checkpoint import expected_shapes, infer_config, load_smolvla_weights
from vla_edge.archs.smolvla.layout import LM_HEAD, to_lerobot
from vla_edge.cli import main
from vla_edge.core.errors import (
    ActionSpaceError,
    CameraMapError,
    CheckpointError,
    CheckpointKeysError,
    ConfigError,
    NormStatsError,
    TokenizerMismatchError,
    UnknownArchitectureError,
)

# real architectures built and run at tiny sizes: in `make test`, not the fast tier
pytestmark = pytest.mark.slow

JOINTS = ("joint1", "joint2", "joint3", "joint4", "joint5", "joint6", "gripper")
STATE_DIM, ACTION_DIM = 7, 7  # the real widths; the model pads both to 32
SLOTS = ("observation.images.top", "observation.images.wrist")
WORDS = "pick up the red block and put it in bowl push green to plate open drawer".split()
TEST_BACKBONE = "test/tiny-smolvlm"
"""An unknown backbone: its published depth is the kept layers'."""
KEYS_MANIFEST = json.loads((Path(__file__).parent / "data" / "smolvla_keys.json").read_text())


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny(**overrides) -> SmolVLAConfig:
    """The tiny size with the backbone's published depth equal to the kept layers (a file
    cannot tell the two apart for an unknown backbone) and two LeRobot camera slots."""
    text = SmolVLMTextSize(
        width=64, depth=4, mlp_dim=128, num_heads=4, num_kv_heads=2, head_dim=16, vocab_size=1024
    )
    return SmolVLAConfig.tiny(**{"text": text, "image_slots": SLOTS, **overrides})


def randomised(config: SmolVLAConfig, seed: int = 0) -> SmolVLAModel:
    torch.manual_seed(seed)
    model = SmolVLAModel(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2)
    return model


def lerobot_file(model: SmolVLAModel) -> dict[str, torch.Tensor]:
    """What ``SmolVLAPolicy.save_pretrained`` writes: ours under ``model.``, plus the head."""
    c = model.config
    file = to_lerobot({k: v.clone() for k, v in model.state_dict().items()})
    file[LM_HEAD] = torch.zeros(c.text.vocab_size, c.text.width)
    return file


def config_json(config: SmolVLAConfig) -> dict:
    return smolvla_config_json(config, STATE_DIM, ACTION_DIM, vlm_model_name=TEST_BACKBONE)


def radian_stats(rng: np.random.Generator) -> dict[str, np.ndarray]:
    out = {}
    for feature, n in (("observation.state", STATE_DIM), ("action", ACTION_DIM)):
        out[f"{feature}.mean"] = rng.normal(0.0, 0.5, n).astype(np.float32)
        out[f"{feature}.std"] = rng.uniform(0.1, 1.0, n).astype(np.float32)
    return out


def degree_stats(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """An SO-100-like dataset in degrees (gripper 0..100)."""
    out = {}
    for feature, n in (("observation.state", STATE_DIM), ("action", ACTION_DIM)):
        out[f"{feature}.mean"] = rng.uniform(-40.0, 40.0, n).astype(np.float32)
        out[f"{feature}.std"] = rng.uniform(10.0, 30.0, n).astype(np.float32)
    return out


def write_lerobot(root: Path, model: SmolVLAModel, stats: dict[str, np.ndarray]) -> Path:
    """LeRobot's pretrained layout with the processors' statistics files."""
    root.mkdir(parents=True)
    return write_smolvla_checkpoint(root, model, stats, vlm_model_name=TEST_BACKBONE)


def write_lerobot_in_weights(root: Path, model: SmolVLAModel, stats: dict) -> Path:
    """An older checkpoint: the statistics are buffers inside model.safetensors."""
    root.mkdir(parents=True)
    tensors = lerobot_file(model)
    for key, value in stats.items():
        feature, stat = key.rsplit(".", 1)
        buffer = feature.replace(".", "_")
        if feature == "observation.state":
            tensors[f"normalize_inputs.buffer_{buffer}.{stat}"] = torch.from_numpy(value)
        else:
            tensors[f"normalize_targets.buffer_{buffer}.{stat}"] = torch.from_numpy(value) + 100
            tensors[f"unnormalize_outputs.buffer_{buffer}.{stat}"] = torch.from_numpy(value)
    save_file(tensors, str(root / "model.safetensors"))
    (root / "config.json").write_text(json.dumps(config_json(model.config)))
    return root


def make_tokenizer(root: Path, n_ids: int) -> Path:
    """A Hugging Face tokenizer directory (WordLevel, ids 0 .. n_ids - 1), plus a stray file."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<pad>": 0, "<unk>": 1, **{w: i + 2 for i, w in enumerate(WORDS)}}
    vocab.update({f"w{i}": i for i in range(len(vocab), n_ids)})
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    root.mkdir(parents=True)
    tokenizer.save(str(root / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "<pad>"}
    (root / "tokenizer_config.json").write_text(json.dumps(config))
    (root / "model.safetensors").write_bytes(b"not a tokenizer file")  # never copied
    return root


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("import_smolvla")
    model = randomised(tiny())
    stats = radian_stats(np.random.default_rng(1))
    return {
        "root": root,
        "model": model,
        "stats": stats,
        "ckpt": write_lerobot(root / "smolvla_tiny", model, stats),
        "tokenizer": make_tokenizer(root / "tok", 64),
        "robot": default_robot(),
    }


def run_import(world, ckpt: Path, out: Path, *extra: str, tokenizer: Path | None = None) -> int:
    return main(
        [
            "import",
            str(ckpt),
            "--out",
            str(out),
            "--tokenizer",
            str(tokenizer or world["tokenizer"]),
            "--dt-action-s",
            "0.05",
            "--text-heads",
            "4",
            "--vision-heads",
            "4",
            "--camera",
            "observation.images.top=agentview",
            *extra,
        ]
    )


def do_import(world, ckpt: Path, out: Path, robot: Robot | None = None, **kwargs):
    options = kwargs.pop("options", ImportOptions(text_heads=4, vision_heads=4))
    tokenizer = kwargs.pop("tokenizer", world["tokenizer"])
    cameras = kwargs.pop("cameras", {"observation.images.top": "agentview"})
    robot = robot or world["robot"]
    return import_checkpoint(
        ckpt, out, tokenizer, 0.05, robot, options=options, cameras=cameras, **kwargs
    )


def inputs(config: SmolVLAConfig, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    size = config.vision.image_size
    images = torch.rand(config.n_slots, 3, size, size, generator=gen) * 2 - 1
    image_mask = torch.tensor([1.0, 1.0])
    token_ids = torch.randint(0, 64, (1, config.max_token_len), generator=gen)
    token_mask = (torch.arange(config.max_token_len) < 6)[None].float()
    state = torch.randn(1, config.state_dim, generator=gen)
    noise = torch.randn(1, config.chunk_size, config.action_dim, generator=gen)
    return images, image_mask, token_ids, token_mask, state, noise


def assert_same_model(policy, source: SmolVLAModel) -> None:
    assert policy.config == source.config
    model = SmolVLAModel(policy.config).eval()
    load_smolvla_weights(policy, model)
    for key, value in source.state_dict().items():
        assert torch.equal(model.state_dict()[key], value), key
    args = inputs(policy.config)
    assert torch.equal(model.sample_actions(*args), source.sample_actions(*args))


# -- the registry ----------------------------------------------------------------------------


def test_import_list_prints_every_architecture_with_its_layouts(capsys):
    assert main(["import", "--list"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split()[0] for line in lines] == list(registry.ARCHITECTURES)
    by_name = {line.split()[0]: line for line in lines}
    assert {"bundled", "pi0", "pi05", "smolvla"} <= set(by_name)
    assert "openpi (" in by_name["pi0"] and "lerobot (" in by_name["pi0"]
    assert "type pi05" in by_name["pi05"]
    assert "lerobot (" in by_name["smolvla"] and "openpi" not in by_name["smolvla"]
    assert "no import needed" in by_name["bundled"]
    importable = registry.importable()
    assert {"pi0", "pi05", "smolvla"} <= set(importable) and "bundled" not in importable


def test_every_registry_entry_resolves_to_real_functions():
    for arch in registry.ARCHITECTURES.values():
        for name in ("config", "model", "read_checkpoint"):
            assert callable(arch.resolve(name)), (arch.name, name)
        if arch.importable:
            for name in ("stages", "copy_weights", "load_weights"):
                assert callable(arch.resolve(name)), (arch.name, name)
            assert arch.facts is not None
            # a LeRobot type, where the architecture has one, is its name
            assert arch.lerobot_type in (None, arch.name)
            assert arch.lerobot_type is not None or arch.detect is not None, arch.name


def test_import_without_its_required_arguments_says_which(capsys):
    assert main(["import", "--out", "x"]) == 2
    assert "CHECKPOINT, --tokenizer, --dt-action-s required" in capsys.readouterr().err


# -- the round trips -------------------------------------------------------------------------


def test_lerobot_smolvla_imports_to_a_policy_dir_with_the_same_weights_and_actions(
    world, tmp_path, capsys
):
    out = tmp_path / "policy"
    assert run_import(world, world["ckpt"], out) == 0
    assert "smolvla from lerobot layout" in capsys.readouterr().out
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == [
        "model.safetensors",
        "policy.yaml",
        "tokenizer",
        "tokenizer/tokenizer.json",
        "tokenizer/tokenizer_config.json",
    ]
    policy = load_policy_dir(out, verify_sha256=True)
    assert policy.architecture == "smolvla"
    assert policy.chunk_horizon == policy.config.chunk_size == 10
    assert policy.joint_names == JOINTS
    # LeRobot's feature names kept; wrist found by name, top mapped by the flag
    assert policy.cameras == {
        "observation.images.top": "agentview",
        "observation.images.wrist": "wrist",
    }
    assert policy.images["resize"] == "pad_top_left"
    assert (policy.images["height"], policy.images["width"]) == (64, 64)
    assert policy.images["pixel_range"] == [-1.0, 1.0]
    norm = policy.normalisation
    assert (norm["kind"], norm["epsilon"]) == ("mean_std", 1e-8)
    stats = world["stats"]
    assert norm["state"]["mean"] == stats["observation.state.mean"].astype(float).tolist()
    assert norm["actions"]["std"] == stats["action.std"].astype(float).tolist()
    assert policy.source["stats_file"] == f"{PRE_STATS} {POST_STATS}"
    assert policy.tokenizer["kind"] == "huggingface"
    assert policy.tokenizer["vocab_size"] == 64 <= policy.config.text.vocab_size
    assert policy.tokenizer["pad_token_id"] == 0
    assert policy.tokenizer["max_token_len"] == 16
    assert policy.prompt == {"format": "smolvla"}
    assert policy.action_space["units"] == "rad"
    assert policy.action_space["indices"] == [0, 1, 2, 3, 4, 5]
    # the weights: ours, without LeRobot's prefix and SmolVLM2's unread head
    file = load_file(str(out / "model.safetensors"))
    assert set(file) == set(world["model"].state_dict())
    assert_same_model(policy, world["model"])
    # the copied tokenizer loads with transformers from the policy directory alone
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(policy.tokenizer_dir, local_files_only=True)
    assert tok("pick up the red block")["input_ids"] == [2, 3, 4, 5, 6]
    raw = yaml.safe_load((out / "policy.yaml").read_text())
    assert next(iter(raw)) == "format" and raw["format"] == FORMAT
    assert raw == policy.to_dict()


def test_older_checkpoint_statistics_inside_the_weights_are_read_and_stripped(world, tmp_path):
    stats = radian_stats(np.random.default_rng(3))
    ckpt = write_lerobot_in_weights(tmp_path / "old", world["model"], stats)
    policy = do_import(world, ckpt, tmp_path / "out")
    norm = policy.normalisation
    assert norm["state"]["std"] == stats["observation.state.std"].astype(float).tolist()
    # the output un-normaliser's action statistics, not the training targets'
    assert norm["actions"]["mean"] == stats["action.mean"].astype(float).tolist()
    assert policy.source["stats_file"] == "model.safetensors"
    file = load_file(str(policy.weights_path))
    assert not [k for k in file if "normalize" in k]
    assert_same_model(policy, world["model"])


def test_bfloat16_checkpoint_keeps_its_bytes_and_loads_into_a_float32_model(world, tmp_path):
    ckpt = tmp_path / "bf16"
    shutil.copytree(world["ckpt"], ckpt)
    file = {k: v.to(torch.bfloat16) for k, v in load_file(str(ckpt / "model.safetensors")).items()}
    save_file(file, str(ckpt / "model.safetensors"))
    policy = do_import(world, ckpt, tmp_path / "out")
    assert policy.weights["dtypes"] == ["bfloat16"]
    model = SmolVLAModel(policy.config)
    load_smolvla_weights(policy, model)
    for key, value in world["model"].state_dict().items():
        assert torch.equal(model.state_dict()[key], value.to(torch.bfloat16).float()), key


def test_degree_and_normalised_action_spaces_are_recorded_with_their_units(world, tmp_path):
    ckpt = write_lerobot(
        tmp_path / "so100_deg", world["model"], degree_stats(np.random.default_rng(4))
    )
    deg = {"kind": "joint_position", "policy_dim": 32, "units": "deg", "indices": list(range(6))}
    policy = do_import(world, ckpt, tmp_path / "deg", action_space=deg)
    assert policy.action_space["units"] == "deg"
    calibration = [
        JointCalibration.from_lerobot(1000, 3000).model_dump() for _ in range(6)
    ]  # SO-100-like motor ticks → radians about the middle
    normalised = {
        "action_space": {
            "kind": "joint_position",
            "policy_dim": 32,
            "indices": list(range(6)),
            "units": "normalized",
            "norm_mode": "range_m100_100",
            "calibration": calibration,
            "gripper": {"index": 6, "policy_range": [0.0, 100.0], "position_range_m": [0.0, 0.04]},
        }
    }
    space_file = tmp_path / "space.yaml"
    space_file.write_text(yaml.safe_dump(normalised))
    out = tmp_path / "normalised"
    assert run_import(world, ckpt, out, "--action-space", str(space_file)) == 0
    space = load_policy_dir(out).action_space
    assert (space["units"], space["norm_mode"]) == ("normalized", "range_m100_100")
    assert space["calibration"][0]["min_rad"] == pytest.approx(-1000 * 2 * math.pi / 4095)


def test_full_size_header_gives_the_full_config():
    shapes = {k: tuple(s) for k, s in KEYS_MANIFEST["smolvla"].items()}
    cfg = {  # lerobot/smolvla_base's config.json, the fields that set sizes
        "type": "smolvla",
        "vlm_model_name": "HuggingFaceTB/SmolVLM2-500M-Video-Instruct",
        "num_vlm_layers": 16,
        "num_expert_layers": -1,
        "expert_width_multiplier": 0.75,
        "self_attn_every_n_layers": 2,
        "attention_mode": "cross_attn",
        "chunk_size": 50,
        "max_state_dim": 32,
        "max_action_dim": 32,
        "num_steps": 10,
        "resize_imgs_with_padding": [512, 512],
        "tokenizer_max_length": 48,
        "input_features": {
            f"observation.images.camera{i}": {"type": "VISUAL", "shape": [3, 256, 256]}
            for i in (1, 2, 3)
        },
    }
    config = infer_config(shapes, cfg, ImportOptions())  # heads from the published widths
    assert config == SmolVLAConfig.full()
    assert compare_keys(shapes, expected_shapes(config, shapes)).ok


# -- bad inputs: a named error, nothing written ----------------------------------------------


def edit_weights(src: Path, dst: Path, edit) -> Path:
    shutil.copytree(src, dst)
    tensors = load_file(str(dst / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(dst / "model.safetensors"))
    return dst


def edit_config(src: Path, dst: Path, **changes) -> Path:
    shutil.copytree(src, dst)
    data = json.loads((dst / "config.json").read_text())
    data.update(changes)
    (dst / "config.json").write_text(json.dumps(data))
    return dst


def remove(*names: str):
    def make(src: Path, dst: Path) -> Path:
        shutil.copytree(src, dst)
        for name in names:
            (dst / name).unlink()
        return dst

    return make


class HeaderOnly:
    """``safe_open`` that reads headers and refuses to read a tensor."""

    def __init__(self, *args, **kwargs):
        self._file = safe_open(*args, **kwargs)

    def __enter__(self):
        self._open = self._file.__enter__()
        return self

    def __exit__(self, *exc):
        return self._file.__exit__(*exc)

    def keys(self):
        return self._open.keys()

    def get_slice(self, key):
        return self._open.get_slice(key)

    def get_tensor(self, key):
        pytest.fail(f"tensor {key} read before every check passed")


BAD_CHECKPOINTS = {
    "missing-key": (
        lambda s, d: edit_weights(s, d, lambda t: t.pop("model.action_out_proj.bias")),
        CheckpointKeysError,
        r"(?s)1 missing.*model\.action_out_proj\.bias",
    ),
    "unexpected-key": (
        lambda s, d: edit_weights(s, d, lambda t: t.update({"model.extra.weight": torch.zeros(2)})),
        CheckpointKeysError,
        r"(?s)1 unexpected.*model\.extra\.weight",
    ),
    "misshaped-key": (
        lambda s, d: edit_weights(
            s, d, lambda t: t.update({"model.state_proj.weight": torch.zeros(64, 16)})
        ),
        CheckpointKeysError,
        r"(?s)1 mis-shaped.*model\.state_proj\.weight \[64, 16\] \(expected \[64, 32\]\)",
    ),
    "fewer-layers-than-config": (
        lambda s, d: edit_config(s, d, num_vlm_layers=6),
        CheckpointKeysError,
        r"(?s)36 missing.*layers\.4\.",
    ),
    "unknown-type": (
        lambda s, d: edit_config(s, d, type="act"),
        UnknownArchitectureError,
        r"type = 'act'.*smolvla",
    ),
    "self-attn-mode": (
        lambda s, d: edit_config(s, d, attention_mode="self_attn"),
        CheckpointError,
        r"attention_mode = 'self_attn'",
    ),
    "image-special-tokens": (
        lambda s, d: edit_config(s, d, add_image_special_tokens=True),
        CheckpointError,
        r"add_image_special_tokens",
    ),
    "resize-not-the-encoder-input": (
        lambda s, d: edit_config(s, d, resize_imgs_with_padding=[512, 512]),
        CheckpointError,
        r"resize_imgs_with_padding = \[512, 512\] but the vision encoder's input is 64x64",
    ),
    "no-statistics": (
        remove("policy_preprocessor.json", "policy_postprocessor.json"),
        NormStatsError,
        "no normalisation statistics",
    ),
    "statistics-file-missing": (remove(PRE_STATS), NormStatsError, "statistics file not found"),
    "no-config": (remove("config.json"), CheckpointError, r"config\.json not found"),
}


@pytest.mark.parametrize(("make", "error", "words"), BAD_CHECKPOINTS.values(), ids=BAD_CHECKPOINTS)
def test_bad_checkpoint_is_a_named_error_before_any_tensor_is_read(
    world, tmp_path, monkeypatch, make, error, words
):
    bad = make(world["ckpt"], tmp_path / "bad")
    monkeypatch.setattr(common_module, "safe_open", HeaderOnly)
    monkeypatch.setattr(ckpt_module, "copy_weights", pytest.fail)  # never reached
    out = tmp_path / "policy"
    with pytest.raises(error, match=words) as info:
        do_import(world, bad, out)
    assert type(info.value) is error
    assert not out.exists()


def test_unpublished_widths_name_the_head_flags(world, tmp_path):
    out = tmp_path / "policy"
    with pytest.raises(CheckpointError, match="text width 64 .* pass --text-heads"):
        do_import(world, world["ckpt"], out, options=ImportOptions(vision_heads=4))
    with pytest.raises(CheckpointError, match="vision width 32 .* pass --vision-heads"):
        do_import(world, world["ckpt"], out, options=ImportOptions(text_heads=4))
    assert not out.exists()


def test_an_option_smolvla_does_not_read_is_refused(world, tmp_path, capsys):
    out = tmp_path / "policy"
    assert run_import(world, world["ckpt"], out, "--paligemma-variant", "gemma_2b") == 2
    assert "--paligemma-variant: not read for smolvla" in capsys.readouterr().err
    with pytest.raises(ConfigError, match="--asset-id"):
        do_import(
            world,
            world["ckpt"],
            out,
            options=ImportOptions(text_heads=4, vision_heads=4, asset_id="x"),
        )
    assert not out.exists()


def test_tokenizer_that_does_not_fit_is_named(world, tmp_path):
    out = tmp_path / "policy"
    big = make_tokenizer(tmp_path / "big", 1100)  # the tiny table has 1024 rows
    with pytest.raises(TokenizerMismatchError, match=r"ids reach 1099 .* 1024 rows"):
        do_import(world, world["ckpt"], out, tokenizer=big)
    sentencepiece = tmp_path / "tokenizer.model"
    sentencepiece.write_bytes(b"a sentencepiece model")
    with pytest.raises(TokenizerMismatchError, match="is a file; expected a Hugging Face"):
        do_import(world, world["ckpt"], out, tokenizer=sentencepiece)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TokenizerMismatchError, match=r"no tokenizer\.json"):
        do_import(world, world["ckpt"], out, tokenizer=empty)
    assert not out.exists()


@pytest.mark.parametrize(
    ("cameras", "robot_cameras", "words"),
    [
        (
            {"observation.images.top": "front"},
            None,
            r"slot observation\.images\.top <- 'front': the robot has no camera",
        ),
        ({"observation.images.side": "wrist"}, None, r"'observation\.images\.side'\] not image"),
        (
            {},
            ("front", "hand"),
            "every slot",
        ),
    ],
    ids=["camera-the-robot-lacks", "unknown-slot", "no-camera-matches"],
)
def test_camera_map_naming_a_camera_the_robot_lacks_is_named(
    world, tmp_path, cameras, robot_cameras, words
):
    robot = world["robot"]
    if robot_cameras:
        robot = Robot(**{**robot.__dict__, "cameras": robot_cameras})
    out = tmp_path / "policy"
    with pytest.raises(CameraMapError, match=words):
        do_import(world, world["ckpt"], out, robot, cameras=cameras)
    assert not out.exists()


def test_degree_checkpoint_with_the_default_radian_space_is_named(world, tmp_path, capsys):
    ckpt = write_lerobot(
        tmp_path / "so100_deg", world["model"], degree_stats(np.random.default_rng(4))
    )
    out = tmp_path / "policy"
    assert run_import(world, ckpt, out) == 2
    err = capsys.readouterr().err
    assert "joint_position units rad, but the checkpoint's action statistics reach" in err
    assert "units: deg" in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("space", "words"),
    [
        (
            {
                "kind": "joint_position",
                "policy_dim": 32,
                "units": "normalized",
                "norm_mode": "range_m100_100",
                "indices": list(range(6)),
            },
            "units normalized needs norm_mode and calibration",
        ),
        (
            {
                "kind": "joint_position",
                "policy_dim": 32,
                "units": "deg",
                "indices": [0, 1, 2, 3, 4, 5],
                "gripper": {"index": 7, "position_range_m": [0.0, 0.04]},
            },
            r"dimensions \[7\] are beyond the checkpoint's 7 real action dimensions",
        ),
        (
            {
                "kind": "joint_position",
                "policy_dim": 32,
                "units": "normalized",
                "norm_mode": "range_m1_1",
                "indices": list(range(6)),
                "calibration": [{"min_rad": -1.0, "max_rad": 1.0}] * 6,
            },
            "units normalized -1..1, but the checkpoint's action statistics reach",
        ),
    ],
    ids=["normalised-without-calibration", "beyond-the-real-action-width", "wrong-norm-range"],
)
def test_action_space_that_does_not_fit_the_checkpoint_is_named(world, tmp_path, space, words):
    ckpt = write_lerobot(tmp_path / "deg", world["model"], degree_stats(np.random.default_rng(5)))
    out = tmp_path / "policy"
    with pytest.raises(ActionSpaceError, match=words):
        do_import(world, ckpt, out, action_space=space)
    assert not out.exists()


def test_load_smolvla_weights_refuses_a_model_of_another_size(world, tmp_path):
    out = tmp_path / "policy"
    assert run_import(world, world["ckpt"], out) == 0
    with pytest.raises(CheckpointKeysError, match="mis-shaped"):
        load_smolvla_weights(load_policy_dir(out), SmolVLAModel(tiny(state_dim=16)))
    # a LeRobot file loads directly too
    model = SmolVLAModel(tiny())
    load_smolvla_weights(world["ckpt"] / "model.safetensors", model)
    assert torch.equal(model.state_proj.weight, world["model"].state_proj.weight)
