"""``vla-edge import`` for GR00T N1.7: a tiny checkpoint in Isaac-GR00T's layout (sharded
weights with their index, ``processor_config.json``, ``statistics.json``,
``embodiment_id.json``) found by the registry, its embodiment chosen with ``--embodiment``,
its statistics written in the policy directory's schema; every bad input a named error
that writes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from test_arch_groot_layout import ACTION_GROUPS, STATE_GROUPS, TAG, write_upstream_n17
from tokenizers import Tokenizer

from vla_edge.archs import registry
from vla_edge.archs.common import ImportOptions
from vla_edge.archs.groot import GrootConfig, GrootModel, TextSize
from vla_edge.archs.groot.checkpoint import (
    PROCESSOR_NAME,
    UnknownEmbodimentError,
    n17_normalisation,
    read_checkpoint,
)
from vla_edge.archs.groot.config import QWEN3_VL_VOCAB_SIZE
from vla_edge.archs.groot.processor import policy_normalisation
from vla_edge.archs.groot.prompt import CLOSING, GrootPromptTokenizer
from vla_edge.archs.importer import default_robot, import_checkpoint
from vla_edge.archs.normalisation import codec_from_section
from vla_edge.archs.policy_dir import load_policy_dir
from vla_edge.archs.policy_stats import check_normalisation
from vla_edge.cli import main
from vla_edge.core.errors import (
    ConfigError,
    NormStatsError,
    UnknownArchitectureError,
)

pytestmark = pytest.mark.slow

EEF_ACTIONS = {
    "kind": "eef_delta",
    "policy_dim": 10,
    "indices": [0, 1, 2, 3, 4, 5],
    "frame": "base",
    "rotation": "axis_angle",
    "gripper": {"index": 6, "policy_range": [-1.0, 1.0], "position_range_m": [0.04, 0.0]},
}
"""LIBERO's relative end-effector actions: 6 end-effector dimensions, then the gripper."""
CAMERAS = {"image": "agentview", "wrist_image": "wrist"}


def qwen_vocab_tiny() -> GrootConfig:
    """Tiny sizes with Qwen3-VL's vocabulary and token ids: what a real checkpoint's header
    fixes and what the import's full-size defaults assume (the chat template's ids)."""
    tiny = GrootConfig.tiny()
    full = GrootConfig.full_n17()
    text = TextSize(**{**tiny.text.model_dump(), "vocab_size": QWEN3_VL_VOCAB_SIZE})
    ids = ("lead_token_ids", "image_token_id", "vision_start_id", "vision_end_id")
    return GrootConfig.tiny(text=text, **{k: getattr(full, k) for k in ids})


@pytest.fixture(scope="module")
def model() -> GrootModel:
    torch.manual_seed(0)
    model = GrootModel(qwen_vocab_tiny()).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2)
    return model


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, model) -> Path:
    return write_upstream_n17(tmp_path_factory.mktemp("groot") / "libero_10", model, lm_head=False)


def write_qwen_tokenizer(root: Path, config: GrootConfig | None = None) -> Path:
    """A byte-level BPE tokenizer directory (Qwen3-VL's kind: ``tokenizer.json``) with the
    special tokens of Qwen3-VL's chat layout, numbered as ``config`` fixes them (Qwen3-VL's
    own ids by default: ``<|endoftext|>`` 151643, ``<|im_start|>`` 151644, ``<|im_end|>``
    151645), and its pad token, ``<|endoftext|>``."""
    from tokenizers import decoders, models, pre_tokenizers, trainers

    from vla_edge.archs.groot.processor import chat_token_ids

    config = config or qwen_vocab_tiny()
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = ["pick up the black bowl and place it on the plate\n", "assistant\n"]
    tok.train_from_iterator(corpus * 20, trainer)
    specials = {token: token_id for token, (_, token_id) in chat_token_ids(config).items()}
    start = specials["<|im_start|>"]
    specials.update({"<|endoftext|>": start - 1, "<|im_end|>": start + 1})
    data = json.loads(tok.to_str())
    assert max(data["model"]["vocab"].values()) < min(specials.values())
    data["model"]["vocab"].update(specials)
    data["added_tokens"] = [
        {"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False}
        | {"normalized": False, "special": True}
        for t, i in sorted(specials.items(), key=lambda item: item[1])
    ]
    root.mkdir(parents=True, exist_ok=True)
    (root / "tokenizer.json").write_text(json.dumps(data))
    config_json = {"tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "<|endoftext|>"}
    (root / "tokenizer_config.json").write_text(json.dumps(config_json))
    return root


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Path:
    return write_qwen_tokenizer(tmp_path_factory.mktemp("qwen_tokenizer"))


def run_import(checkpoint: Path, tokenizer: Path, out: Path, **options):
    return import_checkpoint(
        checkpoint,
        out,
        tokenizer,
        0.05,
        default_robot(),
        options=ImportOptions(vision_heads=4, **options),
        cameras=CAMERAS,
        action_space=EEF_ACTIONS,
    )


def test_import_list_names_groot_and_its_layout(capsys) -> None:
    assert main(["import", "--list"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("groot "))
    assert "GR00T N1.7 (NVIDIA Isaac-GR00T)" in line and "isaac_gr00t" in line
    assert "refused" not in line


def test_the_registry_finds_an_n17_directory_without_a_lerobot_type(checkpoint) -> None:
    assert registry.find(checkpoint).name == "groot"


def test_an_n15_directory_is_found_as_groot_n15_and_its_bad_tag_named(tmp_path, tokenizer):
    """N1.5 is its own architecture (``groot_n15``, read by ``n15_checkpoint``; the full
    import is in ``test_groot_n15_import.py``); an unknown tag fails before any weight."""
    root = tmp_path / "n15"
    (root / "experiment_cfg").mkdir(parents=True)
    (root / "config.json").write_text(json.dumps({"model_type": "gr00t_n1_5"}))
    stats = {
        "state": {"s": {"min": [0.0], "max": [1.0]}},
        "action": {"a": {"min": [0.0], "max": [1.0]}},
    }
    metadata = {
        "gr1": {"statistics": stats, "modalities": {"state": {"s": {}}, "action": {"a": {}}}}
    }
    (root / "experiment_cfg" / "metadata.json").write_text(json.dumps(metadata))
    assert registry.find(root).name == "groot_n15"
    with pytest.raises(UnknownEmbodimentError, match=r"'oxe_droid' is not in the checkpoint.*gr1"):
        run_import(root, tokenizer, tmp_path / "out", embodiment="oxe_droid")
    with pytest.raises(UnknownArchitectureError, match="N1.5 checkpoint.*'groot_n15'"):
        run_import(root, tokenizer, tmp_path / "out", architecture="groot")
    assert not (tmp_path / "out").exists()


def test_embodiment_option_reaches_the_checkpoint_reader(checkpoint) -> None:
    ckpt = read_checkpoint(checkpoint, ImportOptions(embodiment="new_embodiment", vision_heads=4))
    assert ckpt.architecture == "groot" and ckpt.layout == "isaac_gr00t"
    assert ckpt.config.embodiment_id == 3 and ckpt.asset_id == "new_embodiment"


def test_an_embodiment_the_checkpoint_lacks_is_refused_and_writes_nothing(
    checkpoint, tokenizer, tmp_path
) -> None:
    with pytest.raises(UnknownEmbodimentError, match=r"'gr1' is not in the checkpoint"):
        run_import(checkpoint, tokenizer, tmp_path / "out", embodiment="gr1")
    assert not (tmp_path / "out").exists()
    with pytest.raises(UnknownEmbodimentError, match="pass --embodiment TAG"):
        run_import(checkpoint, tokenizer, tmp_path / "out")


def test_cli_embodiment_flag_names_the_missing_tag(checkpoint, tokenizer, tmp_path, capsys) -> None:
    out = tmp_path / "out"
    argv = ["import", str(checkpoint), "--tokenizer", str(tokenizer), "--dt-action-s", "0.05"]
    argv += ["--out", str(out), "--vision-heads", "4", "--embodiment", "gr1"]
    assert main(argv) == 2
    assert "embodiment = 'gr1' is not in the checkpoint" in capsys.readouterr().err
    assert not out.exists()


def test_embodiment_is_not_read_for_an_architecture_without_embodiments(tmp_path) -> None:
    root = tmp_path / "smolvla"
    root.mkdir()
    (root / "config.json").write_text(json.dumps({"type": "smolvla"}))
    with pytest.raises(ConfigError, match="--embodiment: not read for smolvla"):
        import_checkpoint(
            root,
            tmp_path / "out",
            tmp_path,
            0.05,
            default_robot(),
            options=ImportOptions(embodiment="gr1"),
        )


def test_import_writes_a_policy_directory_with_groots_prompt_that_loads(
    checkpoint, tokenizer, tmp_path
) -> None:
    """GR00T registers its prompt format (``groot``, :mod:`vla_edge.archs.groot.prompt`):
    the import writes a policy directory that loads, with the tokenizer copied beside it
    and the instruction encoded in Qwen3-VL's chat layout."""
    out = tmp_path / "policy"
    policy = run_import(checkpoint, tokenizer, out, embodiment=TAG)
    loaded = load_policy_dir(out)
    assert loaded.architecture == policy.architecture == "groot"
    assert loaded.prompt == {"format": "groot"}
    assert loaded.tokenizer["kind"] == "huggingface"
    assert loaded.normalisation["embodiment"] == TAG
    assert (loaded.images["resize"], loaded.images["resample"]) == ("center_crop", "cv2_area")
    assert (loaded.images["crop_fraction"], loaded.images["letterbox"]) == (0.95, True)
    assert loaded.cameras == CAMERAS
    assert loaded.tokenizer_dir is not None and loaded.tokenizer_dir.is_dir()
    encoder = GrootPromptTokenizer(loaded.tokenizer_dir, loaded.config.max_token_len)
    ids, mask = encoder.encode("Pick up the black bowl!")
    reference = Tokenizer.from_file(str(tokenizer / "tokenizer.json"))
    want = reference.encode("pick up the black bowl" + CLOSING, add_special_tokens=False).ids
    n = int(mask.sum())
    assert ids.shape == mask.shape == (1, loaded.config.max_token_len)
    assert ids[0, n - len(encoder.closing_ids) : n].tolist() == encoder.closing_ids
    assert ids[0, :n].tolist() == want[: n - len(encoder.closing_ids)] + encoder.closing_ids
    assert (ids[0, n:] == reference.token_to_id("<|endoftext|>")).all()


def test_the_manifest_section_of_an_imported_policy_keeps_the_state_clip_and_bounds(
    checkpoint, tokenizer, tmp_path
) -> None:
    """The state clip (``clip_outliers``) and the output bounds the import writes reach the
    section an export's manifest gets, cut or padded to the program's widths: beyond the
    statistics no clip and no bound."""
    run_import(checkpoint, tokenizer, tmp_path / "policy", embodiment=TAG)
    policy = load_policy_dir(tmp_path / "policy")
    state, actions = policy.normalisation["state"], policy.normalisation["actions"]
    n_state, n_actions = len(state["q01"]), len(actions["q01"])
    assert "clip" in state and any(state["clip"])
    assert "low" in actions and "high" in actions
    section = policy.manifest_normalisation(n_state + 2, n_actions + 1)
    assert section["state"]["clip"] == [*state["clip"], False, False]
    assert section["actions"]["low"][:n_actions] == actions["low"]
    assert section["actions"]["high"][:n_actions] == actions["high"]
    assert section["actions"]["low"][-1] < -1e300 < 1e300 < section["actions"]["high"][-1]
    codec = codec_from_section(section, state_dim=None, action_dim=None)
    far = np.full(n_state + 2, 1e6)
    got = codec.normalize_state(far)
    clipped = np.array([*state["clip"], False, False])
    assert np.all(got[clipped] == 1.0) and np.all(got[~clipped] > 1.0)
    cut = policy.manifest_normalisation(n_state - 1, n_actions - 1)
    assert cut["state"]["clip"] == state["clip"][:-1]
    assert cut["actions"]["high"] == actions["high"][:-1]


def test_missing_statistics_refuse_the_import(checkpoint, tokenizer, tmp_path) -> None:
    import shutil

    copy = tmp_path / "ckpt"
    shutil.copytree(checkpoint, copy)
    (copy / "statistics.json").unlink()
    with pytest.raises(NormStatsError, match="statistics.json: not found"):
        run_import(copy, tokenizer, tmp_path / "out", embodiment=TAG)
    assert not (tmp_path / "out").exists()


def upstream_state(x: np.ndarray, group: dict, clip: bool) -> np.ndarray:
    """Isaac-GR00T's state rule for one group (``apply_state``, ``gr00t/data/utils.py``),
    restated: ``mean_std`` groups by z-score, unclipped; the others ``2 (x - lo) / (hi - lo)
    - 1``, 0 where ``np.isclose(hi, lo)``, then clipped to [-1, 1] when ``clip``."""
    if group["kind"] == "mean_std":
        return (x - np.asarray(group["mean"])) / np.asarray(group["std"])
    lo, hi = ("min", "max") if group["kind"] == "min_max" else ("q01", "q99")
    lo, hi = np.asarray(group[lo]), np.asarray(group[hi])
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(np.isclose(hi, lo), 0.0, 2.0 * (x - lo) / (hi - lo) - 1.0)
    return np.clip(out, -1.0, 1.0) if clip else out


def upstream_decode(a: np.ndarray, group: dict) -> np.ndarray:
    """Isaac-GR00T's action output rule for one group (``unapply_action``), restated: the
    model's value clipped to [-1, 1] then mapped onto ``[lo, hi]``; ``mean_std``: ``a std +
    mean``, unclipped."""
    if group["kind"] == "mean_std":
        return a * np.asarray(group["std"]) + np.asarray(group["mean"])
    lo, hi = ("min", "max") if group["kind"] == "min_max" else ("q01", "q99")
    lo, hi = np.asarray(group[lo]), np.asarray(group[hi])
    return (np.clip(a, -1.0, 1.0) + 1.0) / 2.0 * (hi - lo) + lo


def per_group(x: np.ndarray, groups: dict, upstream_groups: list, rule) -> np.ndarray:
    """``rule(columns, group)`` on each group's columns of ``x``, concatenated."""
    ends = np.cumsum([0, *groups.values()])
    return np.concatenate(
        [rule(x[:, ends[i] : ends[i + 1]], g) for i, g in enumerate(upstream_groups)], axis=1
    )


@pytest.mark.parametrize("use_percentiles", [True, False])
def test_every_upstream_kind_is_the_policy_schemas_affine_map(
    tmp_path, model, use_percentiles
) -> None:
    root = write_upstream_n17(tmp_path / "c", model, use_percentiles=use_percentiles)
    processor = json.loads((root / PROCESSOR_NAME).read_text())
    kwargs = processor["processor_kwargs"]
    kwargs["modality_configs"][TAG]["state"]["mean_std_embedding_keys"] = ["gripper"]
    kwargs["modality_configs"][TAG]["action"]["mean_std_embedding_keys"] = ["gripper"]
    (root / PROCESSOR_NAME).write_text(json.dumps(processor))
    stats = json.loads((root / "statistics.json").read_text())
    stats[TAG]["state"]["eef"]["max"][0] = stats[TAG]["state"]["eef"]["min"][0]  # zero range
    stats[TAG]["state"]["eef"]["q99"][0] = stats[TAG]["state"]["eef"]["q01"][0]
    (root / "statistics.json").write_text(json.dumps(stats))
    upstream = n17_normalisation(root, TAG, kwargs)
    section = policy_normalisation(upstream, "statistics.json")
    check_normalisation(section, "policy.yaml")
    codec = codec_from_section(section, state_dim=None, action_dim=None)
    rng = np.random.default_rng(0)
    x = rng.normal(0.0, 3.0, (5, sum(STATE_GROUPS.values())))
    x[:, 0] = stats[TAG]["state"]["eef"]["min"][0] + rng.normal(0.0, 1.0, 5)
    want = per_group(
        x, STATE_GROUPS, upstream["state"]["groups"], lambda v, g: upstream_state(v, g, True)
    )
    np.testing.assert_allclose(codec.normalize_state(x), want, rtol=1e-6, atol=1e-6)
    assert np.all(codec.normalize_state(x)[:, 0] == 0.0)  # the empty range reads as 0
    a = rng.normal(0.0, 1.5, (5, sum(ACTION_GROUPS.values())))  # beyond [-1, 1] too
    want = per_group(a, ACTION_GROUPS, upstream["actions"]["groups"], upstream_decode)
    got = codec.decode_actions(a[:, None, :], np.zeros((5, 8)))[:, 0]  # no delta dimension
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-9)
    assert [g["kind"] for g in section["state"]["groups"]] == [
        "quantile" if use_percentiles else "min_max",
        "mean_std",
    ]
    assert section["delta_actions"] == [False] * sum(ACTION_GROUPS.values())
    assert section["embodiment"] == TAG and section["clip"] is True


def test_groots_prompt_refuses_a_tokenizer_without_the_chat_layouts_tokens(tmp_path) -> None:
    from tokenizers import models

    from vla_edge.core.errors import ManifestMismatchError

    root = tmp_path / "wordlevel"
    root.mkdir()
    vocab = {"<unk>": 0, "<pad>": 1, "pick": 2}
    Tokenizer(models.WordLevel(vocab, unk_token="<unk>")).save(str(root / "tokenizer.json"))
    (root / "tokenizer_config.json").write_text(json.dumps({"pad_token": "<pad>"}))
    with pytest.raises(ManifestMismatchError, match=r"lacks the chat template's special tokens"):
        GrootPromptTokenizer(root, 8)
    qwen = write_qwen_tokenizer(tmp_path / "qwen")
    with pytest.raises(ManifestMismatchError, match=r"host.token_ids.shape\[1\] = 1: fewer slots"):
        GrootPromptTokenizer(qwen, 1)  # the closing is <|im_end|> and a newline


def test_groots_prompt_cuts_the_instruction_so_the_closing_always_fits(tokenizer) -> None:
    encoder = GrootPromptTokenizer(tokenizer, 8)
    ids, mask = encoder.encode("Pick up the black bowl and place it on the plate, please!")
    assert mask.all()
    assert ids[0, -len(encoder.closing_ids) :].tolist() == encoder.closing_ids
    assert encoder.ids("PICK, up.") == encoder.ids("pick up")


def test_a_tokenizer_numbering_the_chat_layout_otherwise_is_refused_by_name(tmp_path) -> None:
    """The fusion stage writes the config's ids, the host the tokenizer's: they must agree."""
    from vla_edge.archs.groot.processor import check_tokenizer
    from vla_edge.core.errors import TokenizerMismatchError

    config = qwen_vocab_tiny()
    check_tokenizer(write_qwen_tokenizer(tmp_path / "same", config), config)
    shifted = config.model_copy(update={"lead_token_ids": (151600, 872, 198)})
    other = write_qwen_tokenizer(tmp_path / "other", shifted)
    with pytest.raises(
        TokenizerMismatchError, match=r"<\|im_start\|> is id 151600.*lead_token_ids\[0\] = 151644"
    ):
        check_tokenizer(other, config)
    small = GrootConfig.tiny()
    with pytest.raises(TokenizerMismatchError, match=r"<\|im_start\|> is id 151644.*= 500"):
        check_tokenizer(write_qwen_tokenizer(tmp_path / "qwen", config), small)
    past = small.model_copy(update={"text": small.text.model_copy(update={"vocab_size": 505})})
    with pytest.raises(TokenizerMismatchError, match=r"token id 510 is past .* 505 rows"):
        check_tokenizer(write_qwen_tokenizer(tmp_path / "tiny", small), past)
