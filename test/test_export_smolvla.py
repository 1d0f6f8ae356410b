"""SmolVLA exported through the v2 contract runs in the generic runners like eager torch.

A tiny random-weight SmolVLA (``SmolVLAConfig.tiny``, three LeRobot camera slots of which
one is masked, chunk 4, K = 2 flow steps) is exported to ONNX and to ExecuTorch fp32 and
8da4w. The reference is built here by hand as LeRobot's inference pipeline does it
(``modeling_smolvla.py``, ``processor_smolvla.py``): ``uint8 / 255``, ``resize_with_pad``
(torch bilinear, zeros on the left and top), ``* 2 - 1``, a ``-1`` image with mask 0 for the
slot without a camera, the task with ``"\\n"`` through ``transformers``' ``AutoTokenizer``
(right-padded), ``MEAN_STD`` with LeRobot's epsilon 1e-8, the state padded to 32 — and run
through the eager ``SmolVLAModel.sample_actions`` with the same explicit noise. Parity is
measured per action dimension against that dimension's range over the reference chunks:
ONNX and ExecuTorch fp32 within 0.1 %, 8da4w within 5 %.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from stage_chain import chained_actions, open_stage_programs

from vla_edge.archs.smolvla import SmolVLAConfig, SmolVLAModel, SmolVLMTextSize, build_stages
from vla_edge.archs.smolvla.processor import (
    NORM_EPSILON,
    TOKENIZER_DIR,
    lerobot_normalisation,
    smolvla_contract,
)
from vla_edge.archs.smolvla.stages import head_actions, run_stages
from vla_edge.archs.smolvla.xnnpack import NOT_DELEGATED_WHY
from vla_edge.archs.stage_io import declared_calls, flow_calls
from vla_edge.core.errors import (
    CameraMapError,
    ConfigError,
    ManifestMismatchError,
    TokenizerMismatchError,
)
from vla_edge.core.types import Observation
from vla_edge.export.architecture import export_model
from vla_edge.export.manifest import MANIFEST_NAME, load_manifest
from vla_edge.runners.image_resize import resample_bilinear_float, resize_with_pad_top_left
from vla_edge.runners.onnx_runner import OnnxRunner
from vla_edge.runners.tokenizers import SmolVLAPromptTokenizer

H, K, TOKENS = 4, 2, 16
JOINTS = ["j1", "j2", "j3", "j4", "j5", "j6", "gripper"]
N = len(JOINTS)
SLOTS = ("observation.images.top", "observation.images.wrist", "observation.images.side")
CAMERA_MAP = {SLOTS[0]: "agentview", SLOTS[1]: "wrist", SLOTS[2]: None}
DT = 0.05
INSTRUCTION = "pick up the red block and put it in the bowl"
SENTENCES = [
    "pick up the red block and put it in the bowl",
    "open the top drawer of the cabinet",
    "push the green cube to the plate",
    "put both the soup and the cheese box in the basket",
]
PAD = "<|im_end|>"
WEIGHT_STD = 0.05
"""Every parameter ~ N(0, 0.05²), as the π0 export test: a flow that int4 noise does not
throw past the 8da4w bound in any runtime."""
SHARP_STD = 0.3
"""Weights for the eager comparisons of the XNNPACK rewrite: at 0.05 attention is nearly
uniform, so a RoPE position off by the prefix length moves the actions by 3e-7 (within float
tolerance); at 0.3 by 2e-2."""


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def make_tokenizer(root: Path) -> Path:
    """A byte-level BPE tokenizer directory shaped like SmolVLM2's (GPT-2 style, ``"\\n"`` kept).

    Its pad token is ``<|im_end|>`` (id 2), as SmolVLM2's; ids stay below the tiny table's
    1024 rows.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>", "<|im_start|>", PAD],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator([f"{s}\n" for s in SENTENCES] * 20, trainer)
    root.mkdir(parents=True)
    tokenizer.save(str(root / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "pad_token": PAD}
    (root / "tokenizer_config.json").write_text(json.dumps(config))
    return root


def tiny_config(**overrides: Any) -> SmolVLAConfig:
    text = SmolVLMTextSize(
        width=64, depth=4, mlp_dim=128, num_heads=4, num_kv_heads=2, head_dim=16, vocab_size=1024
    )
    sizes = {"text": text, "image_slots": SLOTS, "chunk_size": H, "flow_steps": K}
    return SmolVLAConfig.tiny(**{**sizes, "max_token_len": TOKENS, **overrides})


def randomised(seed: int = 0, std: float = WEIGHT_STD, **overrides: Any) -> SmolVLAModel:
    """A tiny model with every parameter random (zero-initialised norms would hide bugs)."""
    torch.manual_seed(seed)
    model = SmolVLAModel(tiny_config(**overrides)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, std)
    return model


def lerobot_stats() -> dict[str, np.ndarray]:
    """The normaliser's state as LeRobot saves it, one dimension longer than the robot."""
    rng = np.random.default_rng(3)
    return {
        "observation.state.mean": rng.normal(0.0, 0.3, N + 1),
        "observation.state.std": rng.uniform(0.2, 1.0, N + 1),
        "action.mean": rng.normal(0.0, 0.3, N + 1),
        "action.std": rng.uniform(0.2, 1.0, N + 1),
    }


# ---------------------------------------------------------------- the reference, by hand
def lerobot_resize_with_pad(img: torch.Tensor, width: int, height: int) -> torch.Tensor:
    """LeRobot SmolVLA's ``resize_with_pad`` (``modeling_smolvla.py``), ``pad_value=0``."""
    cur_height, cur_width = img.shape[2:]
    ratio = max(cur_width / width, cur_height / height)
    resized_height = int(cur_height / ratio)
    resized_width = int(cur_width / ratio)
    resized = F.interpolate(
        img, size=(resized_height, resized_width), mode="bilinear", align_corners=False
    )
    pad_height = max(0, int(height - resized_height))
    pad_width = max(0, int(width - resized_width))
    return F.pad(resized, (pad_width, 0, pad_height, 0), value=0)


def lerobot_tokens(tokenizer: Path, task: str, max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``SmolVLANewLineProcessor`` then ``TokenizerProcessorStep`` with ``transformers``."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tokenizer), local_files_only=True)
    task = task if task.endswith("\n") else f"{task}\n"
    out = tok(
        [task],
        max_length=max_len,
        truncation=True,
        padding="max_length",
        padding_side="right",
        return_tensors="pt",
    )
    return out["input_ids"], out["attention_mask"].to(torch.bool)


def host_tensors(
    model: SmolVLAModel, tokenizer: Path, obs: Observation, camera_map: dict[str, str | None]
) -> dict[str, torch.Tensor]:
    """The model's inputs for ``obs`` as LeRobot's pipeline makes them."""
    c = model.config
    size = c.vision.image_size
    images, masks = [], []
    for slot in c.image_slots:
        camera = camera_map.get(slot)
        if camera is None:  # prepare_images: a missing camera is -1 with mask 0
            images.append(-torch.ones(3, size, size))
            masks.append(0.0)
            continue
        img = torch.from_numpy(obs.images[camera]).permute(2, 0, 1)[None].float() / 255
        images.append(lerobot_resize_with_pad(img, size, size)[0] * 2.0 - 1.0)
        masks.append(1.0)
    stats = lerobot_stats()
    state = np.asarray(obs.state, np.float64)
    mean, std = stats["observation.state.mean"][:N], stats["observation.state.std"][:N]
    padded = np.zeros((1, c.state_dim), np.float32)
    padded[0, :N] = (state - mean) / (std + 1e-8)
    ids, mask = lerobot_tokens(tokenizer, obs.instruction, c.max_token_len)
    return {
        "images": torch.stack(images).contiguous(),
        "image_mask": torch.tensor(masks),
        "token_ids": ids,
        "token_mask": mask.float(),
        "state": torch.from_numpy(padded),
    }


def reference_chunk(
    model: SmolVLAModel, tokenizer: Path, obs: Observation, noise: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(normalised [H, 32], decoded [H, N])`` from eager ``sample_actions``."""
    host = host_tensors(model, tokenizer, obs, CAMERA_MAP)
    out = model.sample_actions(**host, noise=torch.from_numpy(noise[None])).numpy()[0]
    stats = lerobot_stats()
    decoded = out[:, :N].astype(np.float64) * stats["action.std"][:N] + stats["action.mean"][:N]
    return out, decoded


def observation(seed: int, size: tuple[int, int] = (64, 64), **changes: Any) -> Observation:
    rng = np.random.default_rng(seed)
    fields: dict[str, Any] = dict(
        stamp_s=2.5,
        images={
            "agentview": rng.integers(0, 256, (*size, 3), dtype=np.uint8),
            "wrist": rng.integers(0, 256, (64, 64, 3), dtype=np.uint8),
        },
        state=rng.uniform(-0.8, 0.8, N),
        instruction=INSTRUCTION,
    )
    fields.update(changes)
    return Observation(**fields)


def noises(count: int) -> list[np.ndarray]:
    rng = np.random.default_rng(11)
    return [rng.standard_normal((H, 32)).astype(np.float32) for _ in range(count)]


def worst_fraction_of_range(got: np.ndarray, want: np.ndarray) -> float:
    """Largest ``|got - want|`` over each action dimension's range in ``want`` (rows × dims)."""
    got2, want2 = got.reshape(-1, got.shape[-1]), want.reshape(-1, want.shape[-1])
    span = np.ptp(want2, axis=0)
    assert np.all(span > 1e-3), span
    return float(np.max(np.abs(got2 - want2) / span))


# ---------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Path:
    return make_tokenizer(tmp_path_factory.mktemp("tok") / "smolvlm_tiny")


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("smolvla_exports")


_EXPORTS: dict[tuple[str, str], Path] = {}


def export_kwargs(tokenizer: Path) -> dict[str, Any]:
    return dict(
        tokenizer=tokenizer,
        joint_names=JOINTS,
        camera_map=CAMERA_MAP,
        dt_action_s=DT,
        normalisation=lerobot_normalisation(lerobot_stats(), N),
        source={"trained": False, "seed": 0},
        log=lambda _: None,
    )


EXECUTORCH_SIZE = {"num_vlm_layers": 2}
"""The ExecuTorch exports keep two backbone layers (one self- and one cross-attention expert
layer: every kind of layer, half the XNNPACK partitions to lower)."""


def size_of(backend: str) -> dict[str, Any]:
    """The ``randomised`` overrides of ``backend``'s export."""
    return EXECUTORCH_SIZE if backend == "executorch" else {}


def exported(root: Path, tokenizer: Path, backend: str, quant: str) -> Path:
    """Export once per (backend, quant) for the whole module, at ``size_of(backend)``."""
    key = (backend, quant)
    if key not in _EXPORTS:
        out = root / f"smolvla_{backend}_{quant}"
        model = randomised(**size_of(backend))
        export_model(model, out, backend, quant, **export_kwargs(tokenizer))
        _EXPORTS[key] = out
    return _EXPORTS[key]


def check_runner_against_reference(
    folder: Path, tokenizer: Path, bound: float, size: dict[str, Any]
) -> float:
    """The runner's chunks for three observations against the reference; the worst error.

    ``size``: the ``randomised`` overrides the export was made with.
    """
    from vla_edge.runners.factory import make_runner

    runner = make_runner(str(folder), threads=1)
    model = randomised(**size)
    observations = [
        observation(0),
        observation(1, size=(48, 80)),  # fitted by the runner: padded on top
        observation(2, size=(150, 90), instruction="open the top drawer"),  # padded on the left
    ]
    got, want = [], []
    for obs, noise in zip(observations, noises(3), strict=True):
        chunk = runner.infer(obs, noise=noise)
        assert chunk.positions.shape == (H, N) and chunk.t_obs_s == 2.5
        assert chunk.joint_names == tuple(JOINTS)
        got.append(chunk.positions)
        want.append(reference_chunk(model, tokenizer, obs, noise)[1])
    error = worst_fraction_of_range(np.stack(got), np.stack(want))
    print(f"{folder.name}: runner vs LeRobot-style reference, worst {error:.2e} of range")
    assert error <= bound, error
    return error


def check_programs_against_eager(
    folder: Path, tokenizer: Path, bound: float, size: dict[str, Any]
) -> float:
    """Each program's normalised chunk (fed the reference's host tensors) against eager stages.

    ``size``: the ``randomised`` overrides the export was made with.
    """
    manifest, programs = open_stage_programs(folder)
    model = randomised(**size)
    stages = build_stages(model)
    got, want = [], []
    for seed, noise in zip(range(3), noises(3), strict=True):
        host = host_tensors(model, tokenizer, observation(seed), CAMERA_MAP)
        got.append(chained_actions(manifest, programs, host, noise))
        want.append(run_stages(stages, **host, noise=torch.from_numpy(noise[None])).numpy()[0])
    error = worst_fraction_of_range(np.stack(got), np.stack(want))
    print(f"{folder.name}: programs vs eager stages, worst {error:.2e} of range")
    assert error <= bound, error
    return error


# ---------------------------------------------------------------- images
RESIZE_CASES = [
    (64, 64, 64, 64),  # the model's size: copied
    (480, 640, 512, 512),  # 4:3 camera -> SmolVLA's 512
    (180, 320, 64, 64),  # 16:9, shrinking
    (300, 100, 64, 64),  # tall
    (20, 30, 224, 224),  # enlarging
    (7, 5, 3, 11),
    (1000, 37, 17, 200),
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize(("h", "w", "height", "width"), RESIZE_CASES)
def test_bilinear_resize_matches_torch_interpolate(h, w, height, width, threads) -> None:
    # torch picks its kernel by thread count; both agree with ours to the last bit or two
    image = np.random.default_rng(h * 1000 + w).random((h, w, 3), dtype=np.float32)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        want = F.interpolate(
            torch.from_numpy(image).permute(2, 0, 1)[None],
            size=(height, width),
            mode="bilinear",
            align_corners=False,
        )
    finally:
        torch.set_num_threads(before)
    got = resample_bilinear_float(image, height, width)
    assert got.dtype == np.float32 and got.shape == (height, width, 3)
    np.testing.assert_allclose(got, want[0].permute(1, 2, 0).numpy(), rtol=0, atol=3e-7)


@pytest.mark.parametrize(("h", "w", "height", "width"), [*RESIZE_CASES[:-1], (1000, 37, 200, 17)])
def test_pad_top_left_matches_lerobots_resize_with_pad(h, w, height, width) -> None:
    image = np.random.default_rng(h + w).integers(0, 256, (h, w, 3), dtype=np.uint8)
    want = lerobot_resize_with_pad(
        torch.from_numpy(image).permute(2, 0, 1)[None].float() / 255, width, height
    )
    got = resize_with_pad_top_left(image, height, width)
    np.testing.assert_allclose(got, want[0].permute(1, 2, 0).numpy(), rtol=0, atol=3e-7)


def test_a_side_that_would_round_to_zero_keeps_one_pixel() -> None:
    # LeRobot's interpolate refuses a 0-px side; the runner keeps 1 px (as for openpi's pad)
    out = resize_with_pad_top_left(np.full((1000, 37, 3), 255, np.uint8), 17, 200)
    assert out.shape == (17, 200, 3)
    assert np.flatnonzero(out[:, :, 0].any(axis=0)).tolist() == [199]


def test_pad_top_left_puts_the_padding_on_the_left_and_top() -> None:
    wide = resize_with_pad_top_left(np.full((2, 4, 3), 255, np.uint8), 4, 4)
    assert np.flatnonzero(wide[:, :, 0].any(axis=1)).tolist() == [2, 3]  # two zero rows on top
    tall = resize_with_pad_top_left(np.full((5, 2, 3), 255, np.uint8), 5, 5)
    assert np.flatnonzero(tall[:, :, 0].any(axis=0)).tolist() == [3, 4]  # three columns left
    assert wide.max() == 1.0 and wide.dtype == np.float32  # [0, 1] floats, not uint8


# ---------------------------------------------------------------- tokenizer and contract
def test_the_runner_tokenizes_the_prompt_as_lerobot(tokenizer) -> None:
    ours = SmolVLAPromptTokenizer(tokenizer, TOKENS)
    tasks = [INSTRUCTION, "open the top drawer\n", "  Put_the cube\nin the BOWL ", "push " * 40]
    for task in tasks:
        ids, mask = ours.encode(task)
        want_ids, want_mask = lerobot_tokens(tokenizer, task, TOKENS)
        np.testing.assert_array_equal(ids, want_ids.numpy())
        np.testing.assert_array_equal(mask, want_mask.numpy())
        assert ids.dtype == np.int64 and ids.shape == (1, TOKENS)
    ids, mask = ours.encode("open the top drawer")
    n_real = int(mask.sum())
    assert 0 < n_real < TOKENS and ids[0, n_real:].tolist() == [2] * (TOKENS - n_real)  # <|im_end|>
    newline = ours._tokenizer.token_to_id("Ċ")  # byte-level "\n" ends the prompt
    assert ids[0, n_real - 1] == newline
    assert ours.encode("open the top drawer\n")[0].tolist() == ids.tolist()  # not appended twice
    assert ours.encode("push " * 40)[1].all()  # cut to max_len: every slot real


def test_the_contract_declares_lerobots_host_side() -> None:
    contract = smolvla_contract(
        tiny_config(),
        joint_names=JOINTS,
        camera_map=CAMERA_MAP,
        dt_action_s=DT,
        normalisation=lerobot_normalisation(lerobot_stats(), N),
    )
    host = contract["host"]
    assert contract["architecture"] == "smolvla" and contract["output"] == "action_head.actions"
    assert host["images"]["slots"] == [
        {"name": SLOTS[0], "camera": "agentview"},
        {"name": SLOTS[1], "camera": "wrist"},
        {"name": SLOTS[2], "camera": None},
    ]
    assert host["images"]["shape"] == [3, 3, 64, 64]
    assert (host["images"]["resize"], host["images"]["resample"]) == ("pad_top_left", "bilinear")
    assert host["images"]["pixel_range"] == [-1.0, 1.0]
    assert host["token_ids"]["tokenizer"] == {"kind": "huggingface", "file": TOKENIZER_DIR}
    assert host["token_ids"]["prompt"] == "smolvla" and host["token_ids"]["shape"] == [1, TOKENS]
    assert host["token_mask"]["dtype"] == "float32"
    assert host["state"]["shape"] == [1, 32] and host["noise"]["shape"] == [1, H, 32]
    norm = contract["normalisation"]
    assert (norm["kind"], norm["epsilon"]) == ("mean_std", NORM_EPSILON) and NORM_EPSILON == 1e-8
    assert norm["actions"]["std"] == lerobot_stats()["action.std"][:N].tolist()
    assert contract["cameras"] == ["agentview", "wrist"] and contract["action_dim"] == 32
    assert contract["chunk_horizon"] == H and contract["flow_steps"] == K


@pytest.mark.parametrize(
    ("changes", "error", "words"),
    [
        (
            {"camera_map": {"observation.images.front": "agentview"}},
            CameraMapError,
            r"camera_map slot 'observation\.images\.front' is not an image slot",
        ),
        ({"camera_map": {SLOTS[0]: None}}, CameraMapError, "maps no robot camera"),
        (
            {"camera_map": {SLOTS[0]: "a", SLOTS[1]: "a"}},
            CameraMapError,
            "one camera to two slots",
        ),
        (
            {"normalisation": {"kind": "mean_std", "epsilon": 1e-8}},
            ConfigError,
            r"normalisation: .*state",
        ),
        ({"joint_names": [f"j{i}" for i in range(33)]}, ConfigError, "joint_names has 33"),
    ],
    ids=["unknown-slot", "no-camera", "camera-twice", "no-statistics", "too-many-joints"],
)
def test_a_bad_contract_is_refused_naming_the_field(changes, error, words) -> None:
    kwargs: dict[str, Any] = dict(
        joint_names=JOINTS,
        camera_map=CAMERA_MAP,
        dt_action_s=DT,
        normalisation=lerobot_normalisation(lerobot_stats(), N),
    )
    kwargs.update(changes)
    with pytest.raises(error, match=words) as info:
        smolvla_contract(tiny_config(), **kwargs)
    assert type(info.value) is error


def test_lerobot_statistics_shorter_than_the_robot_are_named() -> None:
    stats = {k: v[:3] for k, v in lerobot_stats().items()}
    with pytest.raises(ConfigError, match=r"observation\.state\.mean has 3 values, expected >= 7"):
        lerobot_normalisation(stats, N)
    with pytest.raises(ConfigError, match=r"action\.std is missing"):
        lerobot_normalisation({k: v for k, v in lerobot_stats().items() if k != "action.std"}, N)


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda tmp, tok: tmp / "nowhere", "not found; expected a Hugging Face tokenizer"),
        (lambda tmp, tok: tok / "tokenizer.json", "is a file"),
        (lambda tmp, tok: (tmp / "empty").mkdir() or tmp / "empty", "has no tokenizer.json"),
        (
            lambda tmp, tok: (
                shutil.copytree(tok, tmp / "nopad"),
                (tmp / "nopad" / "tokenizer_config.json").write_text("{}"),
            )[0],
            "pad_token = None",
        ),
    ],
    ids=["missing-dir", "a-file", "no-tokenizer-json", "no-pad-token"],
)
def test_a_tokenizer_directory_the_runner_cannot_read_is_refused_before_writing(
    tokenizer, tmp_path, make, words
) -> None:
    bad = Path(make(tmp_path, tokenizer))
    out = tmp_path / "export"
    kwargs = {**export_kwargs(tokenizer), "tokenizer": bad}
    with pytest.raises(TokenizerMismatchError, match=words) as info:
        export_model(randomised(), out, "onnx", **kwargs)
    assert type(info.value) is TokenizerMismatchError
    assert not out.exists()


def stage_inputs(
    model: SmolVLAModel, present: list[float], n_real_tokens: int, seed: int = 0
) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
    """``((images, image_mask, token_ids, token_mask, state), (noise, prefix_actions, mask))``.

    Slots ``present`` (0: masked, a ``-1`` image), a prompt of ``n_real_tokens`` real tokens
    right-padded with ``<|im_end|>``, random state and noise, and an executed prefix over the
    first two rows.
    """
    c = model.config
    gen = torch.Generator().manual_seed(seed)
    size = c.vision.image_size
    images = torch.rand(c.n_slots, 3, size, size, generator=gen) * 2.0 - 1.0
    image_mask = torch.tensor(present)
    images[image_mask == 0] = -1.0
    token_ids = torch.randint(3, c.text.vocab_size, (1, c.max_token_len), generator=gen)
    token_ids[0, n_real_tokens:] = 2
    token_mask = (torch.arange(c.max_token_len) < n_real_tokens).float()[None]
    state = torch.randn(1, c.state_dim, generator=gen)
    noise = torch.randn(1, c.chunk_size, c.action_dim, generator=gen)
    prefix_actions = torch.randn(1, c.chunk_size, c.action_dim, generator=gen)
    prefix_mask = torch.zeros(1, c.chunk_size)
    prefix_mask[0, :2] = 1.0
    return (images, image_mask, token_ids, token_mask, state), (noise, prefix_actions, prefix_mask)


def assert_close(got: Any, want: Any, name: str) -> None:
    """Each tensor of ``got`` equals ``want``'s to float tolerance (1e-5 of its largest value)."""
    got = got if isinstance(got, tuple) else (got,)
    want = want if isinstance(want, tuple) else (want,)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape, name
        assert (g - w).abs().max().item() <= 1e-5 * max(1.0, w.abs().max().item()), name


@pytest.mark.parametrize(
    ("present", "n_real_tokens"),
    [([1.0, 1.0, 1.0], TOKENS), ([1.0, 0.0, 1.0], 5), ([0.0, 1.0, 0.0], 1)],
    ids=["every-slot-full-prompt", "masked-slot-padded-prompt", "one-slot-one-token"],
)
def test_the_xnnpack_rewrite_equals_the_reference_stages(present, n_real_tokens) -> None:
    from vla_edge.archs.smolvla.programs import executorch_stages

    model = randomised(std=SHARP_STD)  # four layers: two self-, two cross-attention experts
    assert model.config.cross_attention_layers == (1, 3)
    reference = build_stages(model)
    rewritten = executorch_stages(model)
    prefix, head = stage_inputs(model, present, n_real_tokens)
    images, image_mask, token_ids, token_mask, state = prefix
    with torch.no_grad():
        tokens = reference.vision_encoder(images)
        assert_close(rewritten["vision_encoder"](images), tokens, "vision_encoder")
        fusion_in = (tokens, image_mask, token_ids, token_mask, state)
        cache = reference.fusion(*fusion_in)
        assert_close(rewritten["fusion"](*fusion_in), cache, "fusion")
        actions = head_actions(reference, *cache, *head)
        steps = declared_calls(reference)  # the declared loop
        looped = rewritten["action_head"]
        assert_close(flow_calls(looped, (*cache, *head), head[0], steps), actions, "action_head")
        # the whole chain: every masked slot and padded token is masked as the reference masks it
        chained = rewritten["fusion"](rewritten["vision_encoder"](images), *fusion_in[1:])
        assert_close(flow_calls(looped, (*chained, *head), head[0], steps), actions, "chain")
    assert torch.equal(actions[0, :2], head[1][0, :2])  # the executed prefix, kept
    n_real = int(cache[2].sum())
    slot_tokens = model.config.vision.num_tokens
    assert n_real == slot_tokens * int(sum(present)) + n_real_tokens + 1  # images, prompt, state


def test_the_xnnpack_rewrite_shares_the_models_parameters() -> None:
    from torch import nn

    from vla_edge.archs.smolvla.programs import executorch_stages

    model = randomised()
    ours = {id(p) for p in model.parameters()}
    stages = executorch_stages(model)
    for name, stage in stages.items():
        assert {id(p) for p in stage.parameters()} <= ours, name  # shared, never copied
    # the position table is added whole (an fp32 parameter, not an nn.Embedding that 8da4w
    # would turn into int8 rows); the token table is the one lookup, for 8da4w to replace
    vision, fusion = stages["vision_encoder"], stages["fusion"]
    assert vision.position_embedding is model.vision_model.embeddings.position_embedding.weight
    assert not any(isinstance(m, nn.Embedding) for m in vision.modules())
    assert [m for m in fusion.modules() if isinstance(m, nn.Embedding)] == [
        model.text_model.embed_tokens
    ]


def test_8da4w_is_not_exported_to_onnx(tokenizer, tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"quant = '8da4w' with backend 'onnx'"):
        export_model(randomised(), tmp_path, "onnx", "8da4w", **export_kwargs(tokenizer))


# ---------------------------------------------------------------- ONNX
@pytest.mark.slow  # exports ONNX programs (about 30 s at this size)
def test_onnx_programs_equal_eager_torch(root, tokenizer) -> None:
    folder = exported(root, tokenizer, "onnx", "fp32")
    manifest = load_manifest(folder)
    assert manifest.architecture == "smolvla"
    assert manifest.stage_order == ("vision_encoder", "fusion", "action_head")
    copied = folder / TOKENIZER_DIR
    assert sorted(p.name for p in copied.iterdir()) == ["tokenizer.json", "tokenizer_config.json"]
    assert manifest.tokenizer_path == copied
    assert set(manifest.tokenizer["files"]) == {"tokenizer.json", "tokenizer_config.json"}
    check_programs_against_eager(folder, tokenizer, 1e-3, size_of("onnx"))


@pytest.mark.slow  # exports ONNX programs (about 30 s at this size)
def test_the_onnx_runner_chunk_equals_the_lerobot_style_reference(root, tokenizer) -> None:
    folder = exported(root, tokenizer, "onnx", "fp32")
    check_runner_against_reference(folder, tokenizer, 1e-3, size_of("onnx"))


@pytest.mark.slow  # exports ONNX programs (about 30 s at this size)
def test_the_runner_feeds_the_tokens_and_images_lerobot_would(root, tokenizer) -> None:
    runner = OnnxRunner(exported(root, tokenizer, "onnx", "fp32"), threads=1)
    assert runner.spec.fits_images and runner.image_resize == "pad_top_left"
    model = randomised()
    for obs in (observation(0), observation(1, size=(48, 80)), observation(2, size=(150, 90))):
        want = host_tensors(model, tokenizer, obs, CAMERA_MAP)
        tokens = runner._tokens(obs.instruction)
        np.testing.assert_array_equal(tokens["host:token_ids"], want["token_ids"].numpy())
        np.testing.assert_array_equal(tokens["host:token_mask"], want["token_mask"].numpy())
        images = runner._images(obs)
        np.testing.assert_allclose(images["host:images"], want["images"].numpy(), atol=1e-6)
        np.testing.assert_array_equal(images["host:image_mask"], want["image_mask"].numpy())
        assert np.all(images["host:images"][2] == -1.0)  # the masked slot: black, mask 0


@pytest.mark.slow  # exports ONNX programs (about 30 s at this size)
def test_the_onnx_runner_runs_a_smolvla_export_without_torch(root, tokenizer) -> None:
    folder = exported(root, tokenizer, "onnx", "fp32")
    probe = (
        "import json, sys, numpy as np\n"
        "from vla_edge.core.types import Observation\n"
        "from vla_edge.runners.onnx_runner import OnnxRunner\n"
        "runner = OnnxRunner(sys.argv[1], threads=1)\n"
        "rng = np.random.default_rng(0)\n"
        "images = {c: rng.integers(0, 256, (48, 80, 3), dtype=np.uint8) "
        "for c in ('agentview', 'wrist')}\n"
        "chunk = runner.infer(Observation(0.0, images, np.zeros(7), 'open the drawer'))\n"
        "print(json.dumps({'torch': 'torch' in sys.modules, "
        "'shape': list(chunk.positions.shape)}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe, str(folder)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"torch": False, "shape": [H, N]}


@pytest.mark.slow  # exports ONNX programs (about 30 s at this size)
def test_a_changed_export_directory_is_refused_naming_the_field(root, tokenizer, tmp_path) -> None:
    folder = tmp_path / "copy"
    shutil.copytree(exported(root, tokenizer, "onnx", "fp32"), folder)
    data = json.loads((folder / MANIFEST_NAME).read_text())
    # a tokenizer file edited after export
    (folder / TOKENIZER_DIR / "tokenizer_config.json").write_text(json.dumps({"pad_token": PAD}))
    with pytest.raises(ManifestMismatchError, match=r"tokenizer\.files\.tokenizer_config\.json"):
        OnnxRunner(folder, threads=1)
    # openpi's antialiased filter is not how pad_top_left resizes
    data["host"]["images"]["resample"] = "pil_bilinear"
    (folder / MANIFEST_NAME).write_text(json.dumps(data))
    with pytest.raises(ManifestMismatchError, match=r"host\.images\.resample = 'pil_bilinear'"):
        load_manifest(folder)
    # the tokenizer directory gone
    data["host"]["images"]["resample"] = "bilinear"
    (folder / MANIFEST_NAME).write_text(json.dumps(data))
    shutil.rmtree(folder / TOKENIZER_DIR)
    with pytest.raises(ManifestMismatchError, match=r"tokenizer\.file = 'tokenizer': no tokenizer"):
        load_manifest(folder)


# ---------------------------------------------------------------- ExecuTorch
# Each stage is SmolVLA's own XNNPACK rewrite (archs/smolvla/xnnpack.py), so each lowers to one
# XNNPACK call; only the token lookup (a gather) stays outside (NOT_DELEGATED_WHY). make
# test lowers the 8da4w programs only (about 40 s; fp32, ("fp32", 1e-3), lowers the same
# graph without the quantisation in about 35 s more, at 5e-8 of range; the rewritten graph
# is checked against the reference stages in eager torch by
# test_the_xnnpack_rewrite_equals_the_reference_stages)
@pytest.mark.slow
@pytest.mark.parametrize(("quant", "bound"), [("8da4w", 5e-2)])
def test_executorch_programs_are_delegated_and_equal_eager_torch(
    root, tokenizer, quant, bound
) -> None:
    folder = exported(root, tokenizer, "executorch", quant)
    manifest = load_manifest(folder)
    assert manifest.data["exporter"]["executorch_stages"] == "vla_edge.archs.smolvla.xnnpack"
    stages = manifest.data["stages"]
    for name, entry in stages.items():
        delegation = entry["delegation"]
        assert delegation["delegated_subgraphs"] == 1, (name, delegation)
        assert set(delegation["non_delegated_ops"]) <= set(NOT_DELEGATED_WHY), (name, delegation)
        assert set(delegation["why"]) == set(delegation["non_delegated_ops"])
    assert stages["vision_encoder"]["delegation"]["non_delegated_ops"] == {}
    assert stages["action_head"]["delegation"]["non_delegated_ops"] == {}
    assert "aten_embedding_default" in stages["fusion"]["delegation"]["non_delegated_ops"]
    if quant == "8da4w":
        assert all(entry["quantized_linears"] > 0 for entry in stages.values())
    check_programs_against_eager(folder, tokenizer, bound, size_of("executorch"))
    check_runner_against_reference(folder, tokenizer, bound, size_of("executorch"))


# ---------------------------------------------------------------- vla-edge export --policy
@pytest.mark.slow  # imports a tiny checkpoint and exports ONNX programs
def test_vla_edge_export_policy_runs_an_imported_smolvla_directory(tokenizer, tmp_path) -> None:
    from test_import_smolvla import radian_stats, write_lerobot

    from vla_edge.archs.common import ImportOptions
    from vla_edge.archs.importer import default_robot, import_checkpoint
    from vla_edge.archs.policy_dir import load_policy_dir
    from vla_edge.archs.smolvla.checkpoint import load_smolvla_weights
    from vla_edge.cli import main
    from vla_edge.runners.factory import make_runner

    source = randomised(1, image_slots=SLOTS[:2])
    stats = radian_stats(np.random.default_rng(1))
    ckpt = write_lerobot(tmp_path / "ckpt", source, stats)
    policy_dir = tmp_path / "policy"
    import_checkpoint(
        ckpt,
        policy_dir,
        tokenizer,
        DT,
        default_robot(),
        options=ImportOptions(text_heads=4, vision_heads=4),
        cameras={SLOTS[0]: "agentview"},
    )
    out = tmp_path / "export"
    argv = ["export", "--policy", str(policy_dir), "--backend", "onnx", "--out", str(out)]
    assert main([*argv, "--flow-steps", "1"]) == 0
    policy = load_policy_dir(policy_dir)
    manifest = load_manifest(out)
    n = len(policy.joint_names)
    assert manifest.architecture == "smolvla" and manifest.data["flow_steps"] == 1
    assert manifest.data["joint_names"] == list(policy.joint_names)
    assert manifest.data["normalisation"] == policy.manifest_normalisation(n)
    assert manifest.data["normalisation"]["epsilon"] == NORM_EPSILON
    assert manifest.data["action_space"] == policy.action_space
    assert manifest.data["source"]["weights_sha256"] == policy.weights["sha256"]

    config = SmolVLAConfig(**manifest.data["model_config"])
    model = SmolVLAModel(config).eval()
    load_smolvla_weights(policy, model)
    rng = np.random.default_rng(4)
    obs = Observation(
        stamp_s=1.0,
        images={
            c: rng.integers(0, 256, (48, 64, 3), dtype=np.uint8) for c in manifest.data["cameras"]
        },
        state=rng.uniform(-0.5, 0.5, n),
        instruction="pick up the red block",
    )
    noise = noises(1)[0]
    host = host_tensors(model, tokenizer, obs, policy.cameras)
    section = policy.manifest_normalisation(n)
    state = (obs.state - section["state"]["mean"]) / (np.asarray(section["state"]["std"]) + 1e-8)
    host["state"][0, :n] = torch.from_numpy(state.astype(np.float32))
    out_norm = model.sample_actions(**host, noise=torch.from_numpy(noise[None])).numpy()[0]
    actions = section["actions"]
    want = out_norm[:, :n] * np.asarray(actions["std"]) + np.asarray(actions["mean"])
    got = make_runner(str(out), threads=1).infer(obs, noise=noise).positions
    # the default action space: the arm joints in radians as decoded, the gripper mapped
    # linearly onto its range and clamped there (vla_edge.actions)
    gripper = policy.action_space["gripper"]
    (p_lo, p_hi), (g_lo, g_hi) = gripper["policy_range"], gripper["position_range_m"]
    want[:, -1] = np.clip(
        g_lo + (want[:, -1] - p_lo) * (g_hi - g_lo) / (p_hi - p_lo),
        min(g_lo, g_hi),
        max(g_lo, g_hi),
    )
    assert worst_fraction_of_range(got[:, :-1], want[:, :-1]) <= 1e-3
    np.testing.assert_allclose(got[:, -1], want[:, -1], atol=1e-5)
    # refused, before anything is exported: a per-stage export of π0's only
    assert main([*argv, "--low-memory"]) == 2


@pytest.mark.slow  # imports a tiny π0 checkpoint
def test_the_smolvla_model_loader_refuses_another_architectures_policy_dir(tmp_path) -> None:
    from test_export_pi0 import train_tokenizer, write_openpi_checkpoint

    from vla_edge.archs.common import ImportOptions
    from vla_edge.archs.importer import default_robot, import_checkpoint
    from vla_edge.archs.pi0 import Pi0Config, Pi0Model
    from vla_edge.archs.pi0.config import GemmaSize
    from vla_edge.archs.smolvla.programs import load_policy_model

    torch.manual_seed(1)
    source = Pi0Model(Pi0Config.tiny(expert=GemmaSize.dummy(), action_horizon=H, max_token_len=48))
    ckpt = write_openpi_checkpoint(tmp_path / "ckpt", source.eval())
    policy_dir = tmp_path / "pi0_policy"
    import_checkpoint(
        ckpt,
        policy_dir,
        train_tokenizer(tmp_path / "tok" / "paligemma.model"),
        DT,
        default_robot(),
        options=ImportOptions(vision_heads=4),
    )
    out = tmp_path / "export"
    with pytest.raises(ConfigError, match=r"architecture = 'pi0': the SmolVLA exporter") as info:
        load_policy_model(policy_dir)
    assert type(info.value) is ConfigError
    assert not out.exists()
