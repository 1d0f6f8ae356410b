"""``vla-edge import``: tiny π0 / π0.5 checkpoints in openpi's and LeRobot's layouts become
policy directories that load back to the same weights and the same actions; every bad input
is a named error that writes nothing."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from safetensors import safe_open
from safetensors.numpy import save_file as save_numpy
from safetensors.torch import load_file, save_file

from vla_edge.archs import common as common_module
from vla_edge.archs.importer import Robot, default_robot, import_checkpoint
from vla_edge.archs.pi0 import GemmaSize, Pi0Config, Pi0Model
from vla_edge.archs.pi0 import checkpoint as ckpt_module
from vla_edge.archs.pi0.checkpoint import (
    ImportOptions,
    format_key_report,
    infer_config,
    load_pi0_weights,
    policy_file_shapes,
    to_openpi_names,
)
from vla_edge.archs.pi0.layout import (
    FILE_DROPS,
    UNUSED,
    KeyReport,
    compare_keys,
    lerobot_file_shapes,
    openpi_file_shapes,
    openpi_to_lerobot,
)
from vla_edge.archs.policy_dir import FORMAT, load_policy_dir
from vla_edge.cli import main
from vla_edge.core.errors import (
    ActionSpaceError,
    CameraMapError,
    CheckpointError,
    CheckpointKeysError,
    NormStatsError,
    OutputExistsError,
    PolicyDirError,
    TokenizerMismatchError,
    UnknownArchitectureError,
)

# real architectures built and run at tiny sizes: in `make test`, not the fast tier
pytestmark = pytest.mark.slow

JOINTS = ("joint1", "joint2", "joint3", "joint4", "joint5", "joint6", "gripper")
STATE_DIM, ACTION_DIM = 8, 7
SENTENCES = [
    "pick up the red block and put it in the bowl",
    "push the green block to the plate",
    "open the drawer and close it again",
    "stack the blue block on the red block",
    "move the arm to the left of the table",
]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny(pi05: bool, **overrides) -> Pi0Config:
    """openpi's ``dummy`` variant for both decoders (2 layers), a tiny SigLIP, openpi's prompt
    lengths (its config.json does not record them)."""
    base = {"expert": GemmaSize.dummy(), "max_token_len": 200 if pi05 else 48}
    return Pi0Config.tiny(pi05=pi05, **{**base, **overrides})


def randomised(config: Pi0Config, seed: int = 0) -> Pi0Model:
    torch.manual_seed(seed)
    model = Pi0Model(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2)
    return model


def openpi_file(model: Pi0Model) -> dict[str, torch.Tensor]:
    """What openpi's converter writes: the module minus embed_tokens, plus the unread head."""
    config = model.config
    file = {k: v.clone() for k, v in model.state_dict().items() if k not in FILE_DROPS}
    file[UNUSED[0]] = torch.zeros(config.vocab_size, config.expert.width)
    return file


def norm_stats(rng: np.random.Generator) -> dict:
    def part(n: int) -> dict:
        q01 = rng.uniform(-2.0, -0.5, n)
        return {
            "mean": rng.normal(0.0, 0.5, n).tolist(),
            "std": rng.uniform(0.1, 2.0, n).tolist(),
            "q01": q01.tolist(),
            "q99": (q01 + rng.uniform(0.5, 3.0, n)).tolist(),
        }

    return {"norm_stats": {"state": part(STATE_DIM), "actions": part(ACTION_DIM)}}


def write_openpi(root: Path, model: Pi0Model, asset_id: str = "trossen") -> Path:
    root.mkdir(parents=True)
    save_file(openpi_file(model), str(root / "model.safetensors"))
    config = {
        "action_dim": model.config.action_dim,
        "action_horizon": model.config.action_horizon,
        "paligemma_variant": "dummy",
        "action_expert_variant": "dummy",
        "precision": "float32",
    }
    (root / "config.json").write_text(json.dumps(config))
    assets = root / "assets" / asset_id
    assets.mkdir(parents=True)
    stats = norm_stats(np.random.default_rng(1))
    (assets / "norm_stats.json").write_text(json.dumps(stats))
    return root


def lerobot_config(config: Pi0Config, arch: str) -> dict:
    visual = {"type": "VISUAL", "shape": [3, 224, 224]}
    return {
        "type": arch,
        "paligemma_variant": "dummy",
        "action_expert_variant": "dummy",
        "chunk_size": config.action_horizon,
        "n_action_steps": config.action_horizon,
        "max_state_dim": config.action_dim,
        "max_action_dim": config.action_dim,
        "tokenizer_max_length": config.max_token_len,
        "num_inference_steps": config.flow_steps,
        "input_features": {
            "observation.state": {"type": "STATE", "shape": [STATE_DIM]},
            "observation.images.base_0_rgb": visual,
            "observation.images.left_wrist_0_rgb": visual,
            "observation.images.right_wrist_0_rgb": visual,
        },
        "output_features": {"action": {"type": "ACTION", "shape": [ACTION_DIM]}},
    }


def lerobot_stats(rng: np.random.Generator) -> dict[str, np.ndarray]:
    raw = norm_stats(rng)["norm_stats"]
    out = {}
    for feature, part in (("observation.state", raw["state"]), ("action", raw["actions"])):
        for stat, values in part.items():
            out[f"{feature}.{stat}"] = np.asarray(values, dtype=np.float32)
    return out


def write_lerobot(root: Path, model: Pi0Model, modes: dict[str, str]) -> Path:
    """LeRobot's pretrained layout with the processors' statistics files."""
    arch = "pi05" if model.config.pi05 else "pi0"
    root.mkdir(parents=True)
    save_file(openpi_to_lerobot(openpi_file(model)), str(root / "model.safetensors"))
    (root / "config.json").write_text(json.dumps(lerobot_config(model.config, arch)))
    stats = lerobot_stats(np.random.default_rng(2))
    pre_file = "policy_preprocessor_step_6_normalizer_processor.safetensors"
    post_file = "policy_postprocessor_step_0_unnormalizer_processor.safetensors"
    save_numpy(stats, str(root / pre_file))
    save_numpy({k: v for k, v in stats.items() if k.startswith("action.")}, str(root / post_file))
    norm_cfg = {"eps": 1e-8, "features": {}, "norm_map": {"VISUAL": "IDENTITY", **modes}}
    pre = {
        "name": "policy_preprocessor",
        "steps": [
            {"registry_name": "rename_observations_processor", "config": {"rename_map": {}}},
            {"registry_name": "normalizer_processor", "config": norm_cfg, "state_file": pre_file},
        ],
    }
    post = {
        "name": "policy_postprocessor",
        "steps": [
            {"registry_name": "unnormalizer_processor", "config": norm_cfg, "state_file": post_file}
        ],
    }
    (root / "policy_preprocessor.json").write_text(json.dumps(pre))
    (root / "policy_postprocessor.json").write_text(json.dumps(post))
    return root, stats


def write_lerobot_in_weights(root: Path, model: Pi0Model) -> tuple[Path, dict]:
    """An older LeRobot checkpoint: the statistics are buffers inside model.safetensors."""
    arch = "pi05" if model.config.pi05 else "pi0"
    root.mkdir(parents=True)
    stats = lerobot_stats(np.random.default_rng(3))
    tensors = openpi_to_lerobot(openpi_file(model))
    for key, value in stats.items():
        feature, stat = key.rsplit(".", 1)
        buffer = feature.replace(".", "_")
        if feature == "observation.state":
            tensors[f"normalize_inputs.buffer_{buffer}.{stat}"] = torch.from_numpy(value)
        else:
            tensors[f"normalize_targets.buffer_{buffer}.{stat}"] = torch.from_numpy(value) + 100
            tensors[f"unnormalize_outputs.buffer_{buffer}.{stat}"] = torch.from_numpy(value)
    save_file(tensors, str(root / "model.safetensors"))
    config = lerobot_config(model.config, arch)
    config["normalization_mapping"] = {
        "VISUAL": "IDENTITY",
        "STATE": "MEAN_STD",
        "ACTION": "MEAN_STD",
    }
    (root / "config.json").write_text(json.dumps(config))
    return root, stats


def train_tokenizer(root: Path, vocab_size: int) -> Path:
    import sentencepiece as spm

    root.mkdir(parents=True, exist_ok=True)
    prefix = root / f"spm{vocab_size}"
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(SENTENCES * 4),
        model_prefix=str(prefix),
        vocab_size=vocab_size,
        model_type="unigram",
        hard_vocab_limit=False,
        minloglevel=2,
    )
    return prefix.with_suffix(".model")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """Source models, their checkpoints in both layouts, a tokenizer and the robot."""
    root = tmp_path_factory.mktemp("import")
    models = {
        arch: randomised(tiny(arch == "pi05"), seed=i) for i, arch in enumerate(["pi0", "pi05"])
    }
    ckpts = {
        "pi0": write_openpi(root / "pi0_tiny", models["pi0"]),
        "pi05": write_openpi(root / "pi05_tiny", models["pi05"]),
    }
    tokenizer = train_tokenizer(root / "tok", 64)
    robot = default_robot()
    return {"root": root, "models": models, "ckpts": ckpts, "tokenizer": tokenizer, "robot": robot}


def inputs(config: Pi0Config, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    images = torch.rand(config.n_slots, 3, 224, 224, generator=gen) * 2 - 1
    image_mask = torch.tensor([1.0, 1.0, 0.0])
    token_ids = torch.randint(0, 64, (1, config.max_token_len), generator=gen)
    token_mask = (torch.arange(config.max_token_len) < 6)[None].float()
    state = torch.randn(1, config.action_dim, generator=gen)
    noise = torch.randn(1, config.action_horizon, config.action_dim, generator=gen)
    return images, image_mask, token_ids, token_mask, state, noise


def run_import(world, ckpt: Path, out: Path, *extra: str) -> int:
    return main(
        [
            "import",
            str(ckpt),
            "--out",
            str(out),
            "--tokenizer",
            str(world["tokenizer"]),
            "--dt-action-s",
            "0.1",
            "--vision-heads",
            "4",
            *extra,
        ]
    )


def do_import(world, ckpt: Path, out: Path, robot: Robot | None = None, **kwargs):
    """``import_checkpoint`` with the tiny SigLIP's head count and dt 0.1 s."""
    options = kwargs.pop("options", ImportOptions(vision_heads=4))
    tokenizer = kwargs.pop("tokenizer", world["tokenizer"])
    robot = robot or world["robot"]
    return import_checkpoint(ckpt, out, tokenizer, 0.1, robot, options=options, **kwargs)


def assert_same_model(policy, source: Pi0Model) -> None:
    assert policy.config == source.config
    model = Pi0Model(policy.config).eval()
    load_pi0_weights(policy, model)
    for key, value in source.state_dict().items():
        assert torch.equal(model.state_dict()[key], value), key
    args = inputs(policy.config)
    assert torch.equal(model.sample_actions(*args), source.sample_actions(*args))


# -- the round trips -----------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["pi0", "pi05"])
def test_openpi_checkpoint_imports_to_a_policy_dir_with_the_same_weights_and_actions(
    world, tmp_path, arch, capsys
):
    out = tmp_path / "policy"
    assert run_import(world, world["ckpts"][arch], out) == 0
    assert "normalisation" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == [
        "model.safetensors",
        "policy.yaml",
        "tokenizer.model",
    ]
    policy = load_policy_dir(out, verify_sha256=True)
    assert policy.architecture == arch
    assert policy.chunk_horizon == policy.config.action_horizon == 10
    assert policy.dt_action_s == 0.1
    assert policy.joint_names == JOINTS
    assert policy.cameras == {
        "base_0_rgb": "agentview",
        "left_wrist_0_rgb": "wrist",
        "right_wrist_0_rgb": None,
    }
    # openpi: π0 mean/std, π0.5 quantiles, epsilon 1e-6, the file's values exactly
    stats = json.loads((world["ckpts"][arch] / "assets/trossen/norm_stats.json").read_text())
    norm = policy.normalisation
    kind, lo, hi = ("quantile", "q01", "q99") if arch == "pi05" else ("mean_std", "mean", "std")
    assert (norm["kind"], norm["epsilon"]) == (kind, 1e-6)
    assert norm["state"] == {
        "kind": kind,
        lo: stats["norm_stats"]["state"][lo],
        hi: stats["norm_stats"]["state"][hi],
    }
    assert norm["actions"][hi] == stats["norm_stats"]["actions"][hi]
    assert norm["delta_actions"] == [False] * ACTION_DIM
    assert policy.tokenizer["kind"] == "sentencepiece"
    assert policy.tokenizer["max_token_len"] == policy.config.max_token_len
    assert policy.tokenizer["vocab_size"] <= policy.config.vocab_size
    assert policy.prompt["format"] == ("pi05_state" if arch == "pi05" else "pi0")
    assert policy.source["layout"] == "openpi"
    assert policy.source["asset_id"] == "trossen"
    assert policy.action_space["kind"] == "joint_position"
    assert policy.action_space["indices"] == [0, 1, 2, 3, 4, 5]
    assert policy.action_space["gripper"]["index"] == 6
    # the weights: this package's layout, no unread expert head, the tied embedding once
    file = load_file(str(out / "model.safetensors"))
    assert {k: tuple(v.shape) for k, v in file.items()} == policy_file_shapes(policy.config)
    assert_same_model(policy, world["models"][arch])
    # the yaml states its format first and round-trips
    raw = yaml.safe_load((out / "policy.yaml").read_text())
    assert next(iter(raw)) == "format" and raw["format"] == FORMAT
    assert raw == policy.to_dict()


def test_lerobot_checkpoint_with_processor_statistics(world, tmp_path):
    model = world["models"]["pi05"]
    ckpt, stats = write_lerobot(
        tmp_path / "lerobot_pi05", model, {"STATE": "MEAN_STD", "ACTION": "QUANTILES"}
    )
    policy = do_import(world, ckpt, tmp_path / "out")
    assert policy.architecture == "pi05" and policy.source["layout"] == "lerobot"
    norm = policy.normalisation
    assert norm["epsilon"] == 1e-8
    assert norm["kind"] == "per_part"  # LeRobot's mode per feature
    assert norm["state"]["kind"] == "mean_std" and norm["actions"]["kind"] == "quantile"
    assert norm["state"]["mean"] == stats["observation.state.mean"].astype(float).tolist()
    assert norm["actions"]["q99"] == stats["action.q99"].astype(float).tolist()
    assert "step_0_unnormalizer" in policy.source["stats_file"]
    assert policy.config.image_slots == ("base_0_rgb", "left_wrist_0_rgb", "right_wrist_0_rgb")
    assert_same_model(policy, model)
    with pytest.raises(NormStatsError, match="different kinds"):
        policy.manifest_normalisation(len(JOINTS))


def test_older_lerobot_checkpoint_with_statistics_inside_the_weights(world, tmp_path):
    model = world["models"]["pi0"]
    ckpt, stats = write_lerobot_in_weights(tmp_path / "old_pi0", model)
    policy = do_import(world, ckpt, tmp_path / "out")
    norm = policy.normalisation
    assert (norm["kind"], norm["epsilon"]) == ("mean_std", 1e-8)
    assert norm["state"]["std"] == stats["observation.state.std"].astype(float).tolist()
    # the output un-normaliser's action statistics, not the training targets'
    assert norm["actions"]["mean"] == stats["action.mean"].astype(float).tolist()
    assert policy.source["stats_file"] == "model.safetensors"
    assert_same_model(policy, model)  # the statistics buffers are not weights


def test_bfloat16_checkpoint_keeps_its_bytes_and_loads_into_a_float32_model(world, tmp_path):
    source = world["models"]["pi0"]
    ckpt = tmp_path / "pi0_bf16"
    shutil.copytree(world["ckpts"]["pi0"], ckpt)
    file = {k: v.to(torch.bfloat16) for k, v in load_file(str(ckpt / "model.safetensors")).items()}
    save_file(file, str(ckpt / "model.safetensors"))
    policy = do_import(world, ckpt, tmp_path / "out")
    assert policy.weights["dtypes"] == ["bfloat16"] == policy.source["weights_dtypes"]
    model = Pi0Model(policy.config)
    load_pi0_weights(policy, model)
    for key, value in source.state_dict().items():
        assert model.state_dict()[key].dtype == torch.float32
        assert torch.equal(model.state_dict()[key], value.to(torch.bfloat16).float()), key


def test_manifest_normalisation_cuts_or_pads_to_the_robot_dimensions(world, tmp_path):
    out = tmp_path / "policy"
    assert run_import(world, world["ckpts"]["pi0"], out, "--delta-actions", "0,1,2") == 0
    policy = load_policy_dir(out)
    section = policy.manifest_normalisation(9, 9)
    assert section["kind"] == "mean_std" and section["epsilon"] == 1e-6
    assert section["state"]["mean"][:8] == policy.normalisation["state"]["mean"]
    assert section["actions"]["std"][7:] == [1.0, 1.0]
    assert section["delta_actions"] == [True] * 3 + [False] * 6
    assert len(policy.manifest_normalisation(4)["state"]["std"]) == 4
    # by default each part at its space's width: the robot's 7 joints, the action space's 7
    default = policy.manifest_normalisation()
    assert len(default["state"]["mean"]) == len(JOINTS) and len(default["actions"]["std"]) == 7


def test_camera_map_and_action_space_from_flags(world, tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(
        yaml.safe_dump(
            {
                "action_space": {
                    "kind": "eef_delta",
                    "policy_dim": 32,
                    "indices": [0, 1, 2, 3, 4, 5],
                    "frame": "base",
                    "rotation": "axis_angle",
                    "gripper": {
                        "index": 6,
                        "policy_range": [-1.0, 1.0],
                        "position_range_m": [0.04, 0.0],
                    },
                }
            }
        )
    )
    out = tmp_path / "policy"
    flags = ["--camera", "base_0_rgb=wrist", "--camera", "left_wrist_0_rgb=none"]
    assert run_import(world, world["ckpts"]["pi0"], out, *flags, "--action-space", str(space)) == 0
    policy = load_policy_dir(out)
    assert list(policy.cameras.values()) == ["wrist", None, None]
    assert policy.action_space["kind"] == "eef_delta"


def test_force_replaces_an_existing_policy_dir(world, tmp_path):
    out = tmp_path / "policy"
    assert run_import(world, world["ckpts"]["pi0"], out) == 0
    assert run_import(world, world["ckpts"]["pi05"], out, "--force") == 0
    assert load_policy_dir(out).architecture == "pi05"
    assert [p.name for p in tmp_path.iterdir()] == ["policy"]  # no temporary left


def test_architecture_flag_wins_over_the_directory_name(world, tmp_path):
    renamed = tmp_path / "pi05_but_really_pi0"
    shutil.copytree(world["ckpts"]["pi0"], renamed)
    with pytest.raises(CheckpointKeysError, match="pass --architecture pi0"):
        do_import(world, renamed, tmp_path / "a")
    options = ImportOptions(vision_heads=4, architecture="pi0")
    policy = do_import(world, renamed, tmp_path / "b", options=options)
    assert policy.architecture == "pi0"


# -- full size, from the header alone ------------------------------------------------------


@pytest.mark.parametrize("arch", ["pi0", "pi05"])
@pytest.mark.parametrize("layout", ["openpi", "lerobot"])
def test_full_size_header_gives_the_full_config_and_fits_the_layout(arch, layout):
    full = Pi0Config.full_pi05() if arch == "pi05" else Pi0Config.full_pi0()
    header_shapes = openpi_file_shapes(full) if layout == "openpi" else lerobot_file_shapes(full)
    header = {k: (s, "BF16") for k, s in header_shapes.items()}
    names, stats = to_openpi_names(header, layout, arch == "pi05")
    shapes = {k: header[v][0] for k, v in names.items()}
    if layout == "openpi":
        config_json = {
            "action_dim": 32,
            "action_horizon": 50,
            "paligemma_variant": "gemma_2b",
            "action_expert_variant": "gemma_300m",
            "precision": "bfloat16",
        }
    else:
        config_json = {
            "type": arch,
            "paligemma_variant": "gemma_2b",
            "action_expert_variant": "gemma_300m",
            "chunk_size": 50,
            "max_action_dim": 32,
            "tokenizer_max_length": full.max_token_len,
            "num_inference_steps": 10,
        }
    config = infer_config(shapes, config_json, layout, arch, ImportOptions())
    assert config == full  # SigLIP So400m's 16 heads from its width; depths from the keys
    assert compare_keys(shapes, openpi_file_shapes(config)).ok and not stats
    ckpt_module.check_keys(shapes, config, "header")


# -- the key report ------------------------------------------------------------------------


def test_key_report_message_counts_everything_and_lists_a_few():
    report = KeyReport(
        missing=tuple(f"layers.{i}.weight" for i in range(3000)),
        unexpected=("extra.weight",),
        misshaped=(("a.weight", (2, 3), (3, 2)),),
    )
    message = format_key_report(report, "model.safetensors")
    assert "3000 missing, 1 unexpected, 1 mis-shaped" in message
    assert "... and 2988 more" in message
    assert "a.weight [2, 3] (expected [3, 2])" in message
    assert len(message) < 1500


# -- bad inputs: a named error, nothing written --------------------------------------------


def edit_weights(src: Path, dst: Path, edit) -> Path:
    shutil.copytree(src, dst)
    tensors = load_file(str(dst / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(dst / "model.safetensors"))
    return dst


def edit_json(src: Path, dst: Path, name: str, edit) -> Path:
    shutil.copytree(src, dst)
    path = dst / name
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    return dst


def without_key(src, dst):
    return edit_weights(src, dst, lambda t: t.pop("action_out_proj.bias"))


def with_extra_key(src, dst):
    return edit_weights(src, dst, lambda t: t.update({"extra_head.weight": torch.zeros(2)}))


def with_misshaped_key(src, dst):
    return edit_weights(
        src, dst, lambda t: t.update({"action_in_proj.weight": torch.zeros(64, 16)})
    )


def unknown_variant(src, dst):
    return edit_json(src, dst, "config.json", lambda c: c.update(paligemma_variant="gemma_7b"))


def no_horizon(src, dst):
    return edit_json(src, dst, "config.json", lambda c: c.pop("action_horizon"))


def no_config(src, dst):
    shutil.copytree(src, dst)
    (dst / "config.json").unlink()
    return dst


def unreadable_config(src, dst):
    shutil.copytree(src, dst)
    (dst / "config.json").write_text("{oops")
    return dst


def no_norm_stats(src, dst):
    shutil.copytree(src, dst)
    (dst / NORM_STATS).unlink()
    return dst


def nan_stat(src, dst):
    return edit_json(
        src,
        dst,
        NORM_STATS,
        lambda d: d["norm_stats"]["actions"]["std"].__setitem__(2, float("nan")),
    )


def negative_std(src, dst):
    return edit_json(
        src, dst, NORM_STATS, lambda d: d["norm_stats"]["state"]["std"].__setitem__(0, -1.0)
    )


def inverted_quantiles(src, dst):
    def edit(d):
        state = d["norm_stats"]["state"]
        state["q99"][1] = state["q01"][1] - 1.0

    return edit_json(src, dst, NORM_STATS, edit)


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


NORM_STATS = "assets/trossen/norm_stats.json"
BAD_CHECKPOINTS = {
    "missing-key": (
        "pi0",
        without_key,
        CheckpointKeysError,
        r"(?s)1 missing.*action_out_proj\.bias",
    ),
    "unexpected-key": (
        "pi0",
        with_extra_key,
        CheckpointKeysError,
        r"(?s)1 unexpected.*extra_head\.weight",
    ),
    "misshaped-key": (
        "pi0",
        with_misshaped_key,
        CheckpointKeysError,
        r"(?s)1 mis-shaped.*action_in_proj\.weight \[64, 16\] \(expected \[64, 32\]\)",
    ),
    "unknown-variant": ("pi0", unknown_variant, CheckpointError, "gemma_7b.*--paligemma-variant"),
    "no-horizon": ("pi0", no_horizon, CheckpointError, "--action-horizon"),
    "no-config": ("pi0", no_config, CheckpointError, r"config\.json not found"),
    "bad-config": ("pi0", unreadable_config, CheckpointError, r"config\.json is not readable JSON"),
    "no-norm-stats": ("pi0", no_norm_stats, NormStatsError, r"norm_stats\.json: not found"),
    "nan-stat": ("pi0", nan_stat, NormStatsError, r"actions\.std\[2\] = nan is not finite"),
    "negative-std": (
        "pi0",
        negative_std,
        NormStatsError,
        r"state\[0\]: std \+ epsilon = -0\.99.* must be > 0",
    ),
    "inverted-quantiles": (
        "pi05",
        inverted_quantiles,
        NormStatsError,
        r"state\[1\]: q99 - q01 \+ epsilon = .* must be > 0",
    ),
}


@pytest.mark.parametrize(
    ("arch", "make", "error", "words"), BAD_CHECKPOINTS.values(), ids=BAD_CHECKPOINTS.keys()
)
def test_bad_checkpoint_is_a_named_error_before_any_tensor_is_read(
    world, tmp_path, monkeypatch, arch, make, error, words
):
    src = world["ckpts"][arch]
    bad = make(src, tmp_path / src.name)
    monkeypatch.setattr(common_module, "safe_open", HeaderOnly)  # every safetensors read
    monkeypatch.setattr(ckpt_module, "copy_weights", pytest.fail)  # never reached
    out = tmp_path / "policy"
    with pytest.raises(error, match=words) as info:
        do_import(world, bad, out)
    assert type(info.value) is error
    assert not out.exists()


def test_lerobot_unknown_architecture_is_named(world, tmp_path):
    ckpt, _ = write_lerobot(tmp_path / "ckpt", world["models"]["pi0"], {})
    config = json.loads((ckpt / "config.json").read_text())
    (ckpt / "config.json").write_text(json.dumps({**config, "type": "act"}))
    out = tmp_path / "policy"
    with pytest.raises(UnknownArchitectureError, match="type = 'act'.*pi0, pi05, smolvla"):
        do_import(world, ckpt, out)
    assert not out.exists()


def test_lerobot_without_any_statistics_is_named(world, tmp_path):
    ckpt, _ = write_lerobot(tmp_path / "ckpt", world["models"]["pi0"], {})
    for name in ("policy_preprocessor.json", "policy_postprocessor.json"):
        (ckpt / name).unlink()
    with pytest.raises(NormStatsError, match="no normalisation statistics"):
        do_import(world, ckpt, tmp_path / "p")


def test_undetermined_siglip_heads_name_the_flag(world, tmp_path):
    with pytest.raises(CheckpointError, match="--vision-heads"):
        do_import(world, world["ckpts"]["pi0"], tmp_path / "p", options=ImportOptions())
    assert not (tmp_path / "p").exists()


def test_tokenizer_larger_than_the_embedding_table_is_named(world, tmp_path):
    big = train_tokenizer(tmp_path / "tok", 48)
    model = randomised(tiny(False, vocab_size=32))
    ckpt = write_openpi(tmp_path / "pi0_small_vocab", model)
    out = tmp_path / "policy"
    with pytest.raises(TokenizerMismatchError, match=r"pieces but .* 32 rows"):
        do_import(world, ckpt, out, tokenizer=big)
    assert not out.exists()
    junk = tmp_path / "junk.model"
    junk.write_bytes(b"not a model")
    with pytest.raises(TokenizerMismatchError, match="not a SentencePiece model"):
        do_import(world, world["ckpts"]["pi0"], out, tokenizer=junk)
    assert not out.exists()


@pytest.mark.parametrize(
    ("robot_change", "space", "words"),
    [
        (
            {},
            {"kind": "joint_position", "policy_dim": 32, "units": "rad", "indices": list(range(8))},
            "8 dimensions for the robot's 6 joints",
        ),
        (
            {"mjcf": None},
            {
                "kind": "eef_delta",
                "policy_dim": 32,
                "indices": [0, 1, 2, 3, 4, 5],
                "frame": "base",
                "rotation": "axis_angle",
            },
            "needs the robot's kinematics",
        ),
        (
            {},
            {"kind": "joint_position", "policy_dim": 40, "units": "rad", "indices": list(range(6))},
            "exceeds the model's action_dim = 32",
        ),
        (
            {"joint_names": ("a", "b", "gripper"), "gripper_range_m": None},
            None,
            "pass --action-space",
        ),
    ],
    ids=["more-dims-than-joints", "eef-without-kinematics", "wider-than-model", "no-gripper-range"],
)
def test_action_space_the_robot_cannot_execute_is_named(
    world, tmp_path, robot_change, space, words
):
    robot = Robot(**{**world["robot"].__dict__, **robot_change})
    out = tmp_path / "policy"
    with pytest.raises(ActionSpaceError, match=words):
        do_import(world, world["ckpts"]["pi0"], out, robot, action_space=space)
    assert not out.exists()


@pytest.mark.parametrize(
    ("cameras", "robot_cameras", "words"),
    [
        ({"base_0_rgb": "front"}, None, r"slot base_0_rgb <- 'front': the robot has no camera"),
        ({"top_0_rgb": "wrist"}, None, r"\['top_0_rgb'\] not image slots"),
        ({}, ("front", "hand"), r"'agentview' \(the default\).*--camera base_0_rgb=CAMERA"),
        ({"base_0_rgb": None, "left_wrist_0_rgb": None}, None, "every slot"),
    ],
    ids=["camera-the-robot-lacks", "unknown-slot", "default-camera-missing", "all-masked"],
)
def test_camera_map_naming_a_camera_the_robot_lacks_is_named(
    world, tmp_path, cameras, robot_cameras, words
):
    robot = world["robot"]
    if robot_cameras:
        robot = Robot(**{**robot.__dict__, "cameras": robot_cameras})
    out = tmp_path / "policy"
    with pytest.raises(CameraMapError, match=words):
        do_import(world, world["ckpts"]["pi0"], out, robot, cameras=cameras)
    assert not out.exists()


def test_existing_output_is_refused_without_force(world, tmp_path, capsys):
    out = tmp_path / "policy"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(OutputExistsError, match="--force"):
        do_import(world, world["ckpts"]["pi0"], out)
    assert run_import(world, world["ckpts"]["pi0"], out) == 2
    assert "exists; pass --force" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["keep.txt"]


def test_load_pi0_weights_refuses_a_model_of_another_size(world, tmp_path):
    out = tmp_path / "policy"
    assert run_import(world, world["ckpts"]["pi0"], out) == 0
    other = Pi0Model(tiny(False, action_dim=16))
    with pytest.raises(CheckpointKeysError, match="mis-shaped"):
        load_pi0_weights(load_policy_dir(out), other)
    with pytest.raises(CheckpointKeysError, match="missing"):
        load_pi0_weights(out, Pi0Model(tiny(True)))


def test_policy_dir_that_does_not_validate_is_refused_by_name(world, tmp_path):
    out = tmp_path / "policy"
    assert run_import(world, world["ckpts"]["pi0"], out) == 0
    text = (out / "policy.yaml").read_text()
    (out / "policy.yaml").write_text(text.replace("architecture: pi0", "architecture: gr00t"))
    with pytest.raises(UnknownArchitectureError, match="gr00t"):
        load_policy_dir(out)
    (out / "policy.yaml").write_text(text.replace("format: vla_edge.policy.v1", "format: v0"))
    with pytest.raises(PolicyDirError, match="format = 'v0'"):
        load_policy_dir(out)
    (out / "policy.yaml").write_text(text)
    (out / "tokenizer.model").write_bytes(b"changed")
    load_policy_dir(out)  # hashes are checked on request only
    with pytest.raises(PolicyDirError, match="tokenizer.model has sha256"):
        load_policy_dir(out, verify_sha256=True)
    (out / "model.safetensors").unlink()
    with pytest.raises(PolicyDirError, match="weights file .* not found"):
        load_policy_dir(out)


# -- PaliGemma's token table -----------------------------------------------------------------


def full_header_shapes(drop_expert_head: bool, rows: int) -> dict[str, tuple[int, ...]]:
    """A full-size π0's openpi-named shapes, its PaliGemma table cut to ``rows``."""
    shapes = dict(openpi_file_shapes(Pi0Config.full_pi0()))
    shapes[ckpt_module._LM_HEAD] = (rows, shapes[ckpt_module._LM_HEAD][1])
    if drop_expert_head:
        del shapes[UNUSED[0]]
    return shapes


FULL_JSON = {
    "action_dim": 32,
    "action_horizon": 50,
    "paligemma_variant": "gemma_2b",
    "action_expert_variant": "gemma_300m",
}


def test_a_full_size_paligemma_table_of_another_size_is_refused_as_openpi_does():
    shapes = full_header_shapes(drop_expert_head=True, rows=1000)
    with pytest.raises(CheckpointError, match=r"lm_head.weight has 1000 rows, expected 257152"):
        infer_config(shapes, FULL_JSON, "openpi", "pi0", ImportOptions())


def test_a_cut_paligemma_table_is_reported_on_its_own_key_not_the_experts():
    shapes = full_header_shapes(drop_expert_head=False, rows=1000)
    config = infer_config(shapes, FULL_JSON, "openpi", "pi0", ImportOptions())
    assert config.vocab_size == 257152  # from the expert's untouched twin
    with pytest.raises(CheckpointKeysError) as refused:
        ckpt_module.check_keys(shapes, config, "header")
    message = str(refused.value)
    assert "paligemma.lm_head.weight" in message and "gemma_expert.lm_head" not in message
