"""GR00T N1.5's prompt (:mod:`vla_edge.archs.groot.n15_prompt`) and its whole way.

The language model's tokens (the config's constant layout, then the host's) are the ids
of Eagle 2.5's chat text, written out here on its own and encoded in one call by a small
byte-level BPE tokenizer with Eagle 2.5's special tokens at their ids; a tokenizer without
``<IMG_CONTEXT>``, or with it at another id than the checkpoint's ``image_token_index``, or
numbering the layout otherwise than the policy, is a named error; and ``vla-edge import``
of a tiny N1.5 checkpoint writes a policy directory that ``vla-edge export --policy``
turns into programs whose runner gives the model's ``sample_actions``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from test_groot_n15_import import LM_HEAD, group_stats, tiny_config, write_upstream_n15
from tokenizers import Tokenizer

from vla_edge.archs.common import ImportOptions
from vla_edge.archs.groot.n15_checkpoint import with_tokenizer_layout
from vla_edge.archs.groot.n15_config import QWEN3_VOCAB_SIZE, GrootN15Config, SiglipSize
from vla_edge.archs.groot.n15_model import GrootN15Model, prompt_tables
from vla_edge.archs.groot.n15_prompt import GrootN15PromptTokenizer, chat_layout, check_tokenizer
from vla_edge.archs.importer import default_robot, import_checkpoint
from vla_edge.core.errors import TokenizerMismatchError

IMAGE_CONTEXT_ID = 151669
"""``image_token_index`` of the Eagle 2.5 config shipped with N1.5."""
SPECIALS = {
    "<|endoftext|>": 151643,
    "<|im_start|>": 151644,
    "<|im_end|>": 151645,
    "<IMG_CONTEXT>": IMAGE_CONTEXT_ID,
    "<img>": 151670,
    "</img>": 151671,
}
INSTRUCTION = "Pick up the apple, then place it in the basket."
CAMERAS = ["--camera", "ego_view=agentview"]
JOINT_GROUPS = {"arm": 6, "gripper": 1}
"""Statistics the size of the package's robot (6 arm joints and the gripper)."""


def write_eagle_tokenizer(root: Path, specials: dict[str, int] | None = None) -> Path:
    """A byte-level BPE directory (``tokenizer.json``, pad token ``<|endoftext|>``) with
    Eagle 2.5's special tokens at ``specials``' ids (Qwen3's and the Eagle config's)."""
    from tokenizers import decoders, models, pre_tokenizers, trainers

    specials = SPECIALS if specials is None else specials
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    corpus = [
        "system\nYou are a helpful assistant.\n",
        "user\n<image 1><image 2>assistant\n",
        "pick up the apple, then place it in the basket.\n",
    ]
    tok.train_from_iterator(corpus * 20, trainer)
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


def qwen_vocab_tiny(**overrides) -> GrootN15Config:
    """Tiny sizes with Qwen3's token table and the Eagle 2.5 config's image ids: what a real
    checkpoint's header fixes and what the import's full-size defaults assume."""
    text = tiny_config().text.model_copy(update={"vocab_size": QWEN3_VOCAB_SIZE})
    full = GrootN15Config.full_n15()
    ids = ("lead_token_ids", "image_token_id", "image_start_id", "image_end_id")
    return tiny_config(text=text, **{k: getattr(full, k) for k in ids}, **overrides)


def eagle_chat_text(n_slots: int, image_tokens: int, instruction: str) -> str:
    """What Eagle 2.5's processing hands its tokenizer: the system turn, one user turn of
    every image then the instruction, the generation prompt (written out independently of
    the package's constants)."""
    images = "".join(
        f"<image {k}><img>" + "<IMG_CONTEXT>" * image_tokens + "</img>"
        for k in range(1, n_slots + 1)
    )
    return (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
        + images
        + instruction
        + "<|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Path:
    return write_eagle_tokenizer(tmp_path_factory.mktemp("eagle_tokenizer"))


def test_the_language_models_tokens_are_eagle_25s_chat_text_encoded_whole(tokenizer) -> None:
    config = with_tokenizer_layout(qwen_vocab_tiny(max_token_len=32), tokenizer)
    assert config.n_slots == 2 and config.vision.num_tokens == 4
    host = GrootN15PromptTokenizer(tokenizer, config.max_token_len)
    got = prompt_tables(config)["layout_ids"].tolist() + host.ids(INSTRUCTION)
    whole = Tokenizer.from_file(str(tokenizer / "tokenizer.json"))
    text = eagle_chat_text(config.n_slots, config.vision.num_tokens, INSTRUCTION)
    assert got == whole.encode(text).ids
    assert got.count(IMAGE_CONTEXT_ID) == config.n_slots * config.vision.num_tokens
    assert config.image_start_id == 151670 and config.image_end_id == 151671


def test_an_image_spans_256_context_tokens_at_full_size_and_64_with_pixel_shuffle() -> None:
    full = GrootN15Config.full_n15()
    assert full.vision.num_tokens == 256
    shuffled = SiglipSize(**{**SiglipSize.siglip_400m().model_dump(), "shuffle": 2})
    assert shuffled.num_tokens == 64
    ids = prompt_tables(full)["layout_ids"].tolist()
    assert ids.count(full.image_token_id) == 256
    assert ids[full.lead_len] == full.image_start_id and ids[-1] == full.image_end_id


def test_the_host_tokens_are_right_padded_with_the_pad_token_and_masked(tokenizer) -> None:
    host = GrootN15PromptTokenizer(tokenizer, 40)
    ids, mask = host.encode(INSTRUCTION)
    n = len(host.ids(INSTRUCTION))
    assert ids.shape == mask.shape == (1, 40) and ids.dtype == np.int64
    assert mask[0, :n].all() and not mask[0, n:].any()
    assert (ids[0, n:] == SPECIALS["<|endoftext|>"]).all()
    whole = Tokenizer.from_file(str(tokenizer / "tokenizer.json"))
    closing = whole.encode("<|im_end|>\n<|im_start|>assistant\n").ids
    assert ids[0, n - len(closing) : n].tolist() == closing


def test_a_long_instruction_is_cut_so_the_closing_always_fits(tokenizer) -> None:
    host = GrootN15PromptTokenizer(tokenizer, 12)
    ids = host.ids(INSTRUCTION * 5)
    assert len(ids) == 12 and ids[-len(host.closing_ids) :] == host.closing_ids


def test_a_tokenizer_without_the_image_token_is_refused_by_name(tmp_path) -> None:
    specials = {k: v for k, v in SPECIALS.items() if k != "<IMG_CONTEXT>"}
    bare = write_eagle_tokenizer(tmp_path / "tok", specials)
    with pytest.raises(
        TokenizerMismatchError, match=r"lacks the special tokens \['<IMG_CONTEXT>'\]"
    ):
        chat_layout(bare, 1, IMAGE_CONTEXT_ID)


def test_an_image_token_id_other_than_the_checkpoints_is_refused_by_name(tmp_path) -> None:
    moved = write_eagle_tokenizer(tmp_path / "tok", {**SPECIALS, "<IMG_CONTEXT>": 151672})
    with pytest.raises(
        TokenizerMismatchError, match=r"<IMG_CONTEXT> is id 151672.*image_token_index.* = 151669"
    ):
        chat_layout(moved, 1, IMAGE_CONTEXT_ID)


def test_a_tokenizer_numbering_the_layout_otherwise_than_the_policy_is_refused(
    tokenizer, tmp_path
) -> None:
    config = with_tokenizer_layout(qwen_vocab_tiny(), tokenizer)
    check_tokenizer(tokenizer, config)
    other = write_eagle_tokenizer(tmp_path / "tok", {**SPECIALS, "<img>": 151672})
    with pytest.raises(TokenizerMismatchError, match="image_start_id = 151670.*gives 151672"):
        check_tokenizer(other, config)


def test_the_import_refuses_a_tokenizer_without_the_image_token_and_writes_nothing(
    tmp_path,
) -> None:
    checkpoint = write_upstream_n15(
        tmp_path / "ckpt", GrootN15Model(qwen_vocab_tiny()), edit=lambda sd: sd.pop(LM_HEAD)
    )
    specials = {k: v for k, v in SPECIALS.items() if k != "<IMG_CONTEXT>"}
    bare = write_eagle_tokenizer(tmp_path / "tok", specials)
    with pytest.raises(TokenizerMismatchError, match="<IMG_CONTEXT>"):
        import_checkpoint(
            checkpoint,
            tmp_path / "out",
            bare,
            0.05,
            default_robot(),
            options=ImportOptions(vision_heads=4, embodiment="gr1"),
        )
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------- vla-edge import, export --policy, runner


@pytest.fixture(scope="module")
def imported(tmp_path_factory, tokenizer) -> tuple[Path, Path]:
    """``(checkpoint, policy directory)``: a tiny N1.5 in upstream's layout, imported by
    ``vla-edge import`` with ``--embodiment`` and ``--tokenizer``."""
    from vla_edge.cli import main

    torch.manual_seed(2)
    source = GrootN15Model(qwen_vocab_tiny()).eval()
    with torch.no_grad():
        for p in source.parameters():
            p.normal_(0.0, 0.2)
    root = tmp_path_factory.mktemp("n15_policy")
    shapes = {k: {"shape": [d], "absolute": True} for k, d in JOINT_GROUPS.items()}
    metadata = {
        "gr1": {
            "statistics": {
                "state": group_stats(JOINT_GROUPS, 0.0),
                "action": group_stats(JOINT_GROUPS, 0.5),
            },
            "modalities": {"state": shapes, "action": shapes},
            "embodiment_tag": "gr1",
        }
    }
    checkpoint = write_upstream_n15(
        root / "ckpt", source, metadata=metadata, edit=lambda sd: sd.pop(LM_HEAD)
    )
    argv = ["import", str(checkpoint), "--tokenizer", str(tokenizer), "--dt-action-s", "0.05"]
    argv += ["--out", str(root / "policy"), "--vision-heads", "4", "--embodiment", "gr1"]
    assert main([*argv, *CAMERAS]) == 0
    return checkpoint, root / "policy"


def test_vla_edge_import_writes_an_n15_policy_directory_that_loads(imported, tokenizer) -> None:
    from vla_edge.archs.policy_dir import load_policy_dir

    _, out = imported
    policy = load_policy_dir(out)
    assert policy.architecture == "groot_n15"
    assert policy.prompt == {"format": "groot_n15"}
    assert policy.tokenizer["kind"] == "huggingface" and policy.tokenizer_dir.is_dir()
    assert policy.normalisation["embodiment"] == "gr1"
    images = policy.images
    assert (images["resize"], images["resample"]) == ("center_crop", "cv2_area")
    assert (images["crop_fraction"], images["letterbox"]) == (0.95, False)
    assert images["pixel_range"] == [-1.0, 1.0]
    assert policy.cameras == {"ego_view": "agentview"}
    layout = chat_layout(tokenizer, policy.config.n_slots, IMAGE_CONTEXT_ID)
    assert {k: getattr(policy.config, k) for k in layout} == layout


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["onnx", "executorch"])
def test_vla_edge_export_policy_programs_give_the_runner_sample_actions(
    imported, backend, tmp_path
) -> None:
    """``vla-edge export --policy`` of the imported directory, then the runner's host side
    (the centre-crop fit, [-1, 1] pixels, N1.5's prompt, the normalised state padded to
    ``max_state_dim``) and its chained programs give ``sample_actions`` on the same
    inputs and noise, decoded with the policy's statistics."""
    from vla_edge.archs.groot.n15_checkpoint import load_weights
    from vla_edge.archs.policy_dir import load_policy_dir
    from vla_edge.cli import main
    from vla_edge.core.types import Observation
    from vla_edge.runners.image_resize import fit_center_crop
    from vla_edge.runners.preprocess import decode_chunk

    if backend == "executorch":
        pytest.importorskip("executorch")
    _, policy_dir = imported
    out = tmp_path / backend
    argv = ["export", "--policy", str(policy_dir), "--backend", backend, "--out", str(out)]
    assert main(argv) == 0
    if backend == "onnx":
        from vla_edge.runners.onnx_runner import OnnxRunner

        runner = OnnxRunner(out, threads=1)
    else:
        from vla_edge.runners.executorch_runner import ExecuTorchRunner

        runner = ExecuTorchRunner(out)
    assert runner.manifest.architecture == "groot_n15" and runner.manifest.prompt == "groot_n15"

    policy = load_policy_dir(policy_dir)
    c = policy.config
    model = GrootN15Model(c).eval()
    load_weights(policy, model)
    joints = len(policy.joint_names)
    size = c.vision.image_size
    rng = np.random.default_rng(4)
    camera = rng.integers(0, 256, (size + 8, size + 8, 3), dtype=np.uint8)
    obs = Observation(
        stamp_s=1.0,
        images={"agentview": camera},
        state=rng.uniform(-0.5, 0.5, joints),
        instruction=INSTRUCTION,
    )
    noise = rng.standard_normal((c.action_horizon, c.max_action_dim)).astype(np.float32)
    chunk = runner.infer(obs, noise=noise)

    fitted = fit_center_crop(camera, size, size, 0.95, False)
    pixels = fitted.transpose(2, 0, 1)[None].astype(np.float32) / 255 * 2 - 1
    ids, mask = GrootN15PromptTokenizer(policy.tokenizer_dir, c.max_token_len).encode(
        obs.instruction
    )
    state = np.zeros((1, c.max_state_dim), dtype=np.float32)
    state[0, :joints] = runner.codec.normalize_state(np.asarray(obs.state))
    with torch.no_grad():
        want = model.sample_actions(
            torch.from_numpy(pixels),
            torch.ones(c.n_slots),
            torch.from_numpy(ids),
            torch.from_numpy(mask).float(),
            torch.from_numpy(state),
            torch.from_numpy(noise[None]),
        ).numpy()[0]
    decoded = decode_chunk(runner.codec, want[:, :joints], obs.state, None, 0)
    # the default action space: the arm joints as decoded, the gripper's dimension mapped
    # identically onto its position range (so clipped to it)
    gripper = policy.action_space["gripper"]
    lo, hi = gripper["position_range_m"]
    assert gripper["policy_range"] == [lo, hi]
    g = gripper["index"]
    decoded[:, g] = np.clip(decoded[:, g], lo, hi)
    assert chunk.positions.shape == decoded.shape == (c.action_horizon, joints)
    assert np.ptp(decoded[:, :g]) > 0.1
    np.testing.assert_allclose(chunk.positions, decoded, atol=1e-3, rtol=1e-4)
