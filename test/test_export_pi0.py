"""π0 and π0.5 exported through the v2 contract run in the generic runners like eager torch.

Tiny random-weight models (``Pi0Config.tiny``, horizon 4, K = 2 flow steps) are
exported to ONNX (default tier) and to ExecuTorch fp32 and 8da4w (slow tier).
The reference is built here by hand as openpi's inference pipeline does it —
``resize_with_pad`` to 224, uint8 → [-1, 1], a black masked slot for the
camera the robot lacks, openpi's normalisation formula and epsilon, the
SentencePiece prompt (π0: BOS + text + ``"\\n"``; π0.5: the discretised state
in the prompt), the state padded to 32 — and run through the eager
``Pi0Model.sample_actions`` with the same explicit noise. Parity is measured
per action dimension against that dimension's range over the reference
chunks: ONNX and ExecuTorch fp32 within 0.1 %, 8da4w within 5 %.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from export_fixtures import copy_export
from stage_chain import chained_actions, open_stage_programs

from vla_edge.archs.pi0 import Pi0Config, Pi0Model, build_stages, run_stages
from vla_edge.archs.pi0.bench import write_openpi_checkpoint as write_checkpoint
from vla_edge.archs.pi0.processor import TOKENIZER_FILE, pi0_contract
from vla_edge.archs.pi0.prompt import clean_task, pad_tokens, pi05_prompt
from vla_edge.archs.pi0.xnnpack import NOT_DELEGATED_WHY, xnnpack_stages
from vla_edge.bench.arch_loop import write_sentencepiece_tokenizer
from vla_edge.core.errors import ConfigError, ManifestMismatchError
from vla_edge.core.types import Observation
from vla_edge.export.architecture import export_model, stage_programs_of
from vla_edge.export.manifest import MANIFEST_NAME, load_manifest
from vla_edge.runners.factory import make_runner
from vla_edge.runners.image_resize import resize_with_pad
from vla_edge.runners.onnx_runner import OnnxRunner
from vla_edge.runners.tokenizers import PaligemmaPromptTokenizer

H, K, SIZE, TOKENS = 4, 2, 224, 64
SIZES = {"action_horizon": H, "flow_steps": K, "max_token_len": TOKENS}
JOINTS = ["j1", "j2", "j3", "j4", "j5", "j6", "gripper"]
N = len(JOINTS)
CAMERA_MAP = {"base_0_rgb": "agentview", "left_wrist_0_rgb": "wrist", "right_wrist_0_rgb": None}
CAMERAS = ["agentview", "wrist"]
EPS = 1e-6
DT = 0.1
INSTRUCTION = "  put_the red cube\nin the bowl "
SENTENCES = [
    "pick up the red cube and put it in the bowl",
    "open the top drawer of the cabinet",
    "put both the alphabet soup and the cream cheese box in the basket",
    "Task: put the bowl on the plate, State: 12 128 255 0 -1 7 64;\nAction: ",
    "turn on the stove and push the plate to the front",
]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def train_tokenizer(path: Path) -> Path:
    """A small SentencePiece model shaped like PaliGemma's (pad 0, eos 1, bos 2, unk 3, "\\n")."""
    return write_sentencepiece_tokenizer(path, SENTENCES)


WEIGHT_STD = 0.05
"""Every parameter ~ N(0, 0.05²): the tiny model's layers then perturb the residual stream
as a trained model's do; at 0.2 its flow is chaotic and 8da4w's int4 noise (about 10 % of a
Gaussian weight) grows past the 5 % bound in any runtime, eager torchao included."""


def randomised(pi05: bool, seed: int = 0) -> Pi0Model:
    """A tiny model with every parameter random (zero-initialised norms would hide bugs)."""
    torch.manual_seed(seed)
    model = Pi0Model(Pi0Config.tiny(pi05=pi05, **SIZES)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, WEIGHT_STD)
    return model


def norm_stats(pi05: bool) -> dict[str, dict[str, list[float]]]:
    """openpi-style statistics, one dimension longer than the robot's (cut on export)."""
    rng = np.random.default_rng(3)
    if pi05:
        lo = {part: rng.uniform(-1.0, -0.2, N + 1) for part in ("state", "actions")}
        return {
            part: {
                "q01": lo[part].tolist(),
                "q99": (lo[part] + rng.uniform(0.5, 2.0, N + 1)).tolist(),
            }
            for part in ("state", "actions")
        }
    return {
        part: {
            "mean": rng.normal(0, 0.3, N + 1).tolist(),
            "std": rng.uniform(0.2, 1.0, N + 1).tolist(),
        }
        for part in ("state", "actions")
    }


# ---------------------------------------------------------------- the reference, by hand
@dataclass(frozen=True)
class Deployment:
    """What the host side needs besides the model: cameras, statistics, the robot's ``N``."""

    camera_map: dict[str, str | None]
    stats: dict[str, dict[str, list[float]]]
    """``state`` / ``actions`` statistics, at least ``n`` long."""
    quantile: bool
    n: int
    delta: tuple[bool, ...] = ()


def deployment(pi05: bool) -> Deployment:
    return Deployment(CAMERA_MAP, norm_stats(pi05), pi05, N)


def _normalise(x: np.ndarray, stats: dict[str, list[float]], quantile: bool) -> np.ndarray:
    n = x.shape[-1]
    if quantile:
        q01, q99 = np.asarray(stats["q01"][:n]), np.asarray(stats["q99"][:n])
        return (x - q01) / (q99 - q01 + EPS) * 2.0 - 1.0
    return (x - np.asarray(stats["mean"][:n])) / (np.asarray(stats["std"][:n]) + EPS)


def _unnormalise(x: np.ndarray, stats: dict[str, list[float]], quantile: bool) -> np.ndarray:
    n = x.shape[-1]
    if quantile:
        q01, q99 = np.asarray(stats["q01"][:n]), np.asarray(stats["q99"][:n])
        return (x + 1.0) / 2.0 * (q99 - q01 + EPS) + q01
    return x * (np.asarray(stats["std"][:n]) + EPS) + np.asarray(stats["mean"][:n])


def openpi_tokens(tokenizer: Path, task: str, state_norm: np.ndarray | None, max_len: int):
    """openpi's ``PaligemmaTokenizer.tokenize``, from its source, with our SentencePiece model."""
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(tokenizer))
    cleaned = task.strip().replace("_", " ").replace("\n", " ")
    if state_norm is not None:
        bins = np.digitize(state_norm, bins=np.linspace(-1, 1, 256 + 1)[:-1]) - 1
        tokens = sp.encode(
            f"Task: {cleaned}, State: {' '.join(map(str, bins))};\nAction: ", add_bos=True
        )
    else:
        tokens = sp.encode(cleaned, add_bos=True) + sp.encode("\n")
    if len(tokens) < max_len:
        mask = [True] * len(tokens) + [False] * (max_len - len(tokens))
        tokens = tokens + [False] * (max_len - len(tokens))
    else:
        tokens, mask = tokens[:max_len], [True] * max_len
    return np.asarray(tokens, dtype=np.int64)[None], np.asarray(mask)[None]


def host_tensors(
    model: Pi0Model, tokenizer: Path, obs: Observation, deploy: Deployment
) -> dict[str, Any]:
    """The model's inputs for ``obs`` as openpi's pipeline makes them."""
    c = model.config
    frames = []
    for slot in c.image_slots:
        camera = deploy.camera_map[slot]
        image = obs.images[camera] if camera else np.zeros((SIZE, SIZE, 3), np.uint8)
        frames.append(resize_with_pad(image, SIZE, SIZE))
    pixels = np.stack(frames).transpose(0, 3, 1, 2).astype(np.float32) / 255.0 * 2.0 - 1.0
    state_norm = _normalise(
        np.asarray(obs.state, np.float64), deploy.stats["state"], deploy.quantile
    )
    state = np.zeros((1, c.action_dim), np.float32)
    state[0, : deploy.n] = state_norm
    prompt_state = state_norm.astype(np.float32) if c.state_in_prompt else None
    ids, mask = openpi_tokens(tokenizer, obs.instruction, prompt_state, c.max_token_len)
    return {
        "images": torch.from_numpy(np.ascontiguousarray(pixels)),
        "image_mask": torch.tensor([1.0 if deploy.camera_map[s] else 0.0 for s in c.image_slots]),
        "token_ids": torch.from_numpy(ids),
        "token_mask": torch.from_numpy(mask.astype(np.float32)),
        "state": torch.from_numpy(state),
    }


def reference_chunk(
    model: Pi0Model,
    tokenizer: Path,
    obs: Observation,
    noise: np.ndarray,
    deploy: Deployment | bool,
) -> tuple[np.ndarray, np.ndarray]:
    """``(normalised [H, 32], decoded [H, N])`` from eager ``sample_actions``."""
    if isinstance(deploy, bool):
        deploy = deployment(deploy)
    host = host_tensors(model, tokenizer, obs, deploy)
    out = model.sample_actions(**host, noise=torch.from_numpy(noise[None])).numpy()[0]
    n = deploy.n
    decoded = _unnormalise(out[:, :n].astype(np.float64), deploy.stats["actions"], deploy.quantile)
    if any(deploy.delta):
        decoded += np.where(deploy.delta, np.asarray(obs.state, np.float64), 0.0)
    return out, decoded


def observation(seed: int, size: tuple[int, int] = (SIZE, SIZE), **changes: Any) -> Observation:
    rng = np.random.default_rng(seed)
    fields: dict[str, Any] = dict(
        stamp_s=2.5,
        images={
            "agentview": rng.integers(0, 256, (*size, 3), dtype=np.uint8),
            "wrist": rng.integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8),
        },
        state=rng.uniform(-0.8, 0.8, N),
        instruction=INSTRUCTION,
    )
    fields.update(changes)
    return Observation(**fields)


def worst_fraction_of_range(got: np.ndarray, want: np.ndarray) -> float:
    """Largest ``|got - want|`` over each action dimension's range in ``want`` (rows × dims)."""
    got2, want2 = got.reshape(-1, got.shape[-1]), want.reshape(-1, want.shape[-1])
    span = np.ptp(want2, axis=0)
    assert np.all(span > 1e-3), span
    return float(np.max(np.abs(got2 - want2) / span))


# ---------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Path:
    return train_tokenizer(tmp_path_factory.mktemp("tok") / "paligemma_tiny.model")


@pytest.fixture(scope="module", params=[False, True], ids=["pi0", "pi05"])
def pi05(request) -> bool:
    return request.param


_EXPORTS: dict[tuple[bool, str, str], Path] = {}


def exported(tmp_root: Path, tokenizer: Path, pi05: bool, backend: str, quant: str) -> Path:
    """Export once per (architecture, backend, quant) for the whole module."""
    key = (pi05, backend, quant)
    if key not in _EXPORTS:
        out = tmp_root / f"{'pi05' if pi05 else 'pi0'}_{backend}_{quant}"
        export_model(
            randomised(pi05),
            out,
            backend,
            quant,
            tokenizer=tokenizer,
            joint_names=JOINTS,
            camera_map=CAMERA_MAP,
            dt_action_s=DT,
            norm_stats=norm_stats(pi05),
            source={"trained": False, "seed": 0},
            log=lambda _: None,
        )
        _EXPORTS[key] = out
    return _EXPORTS[key]


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("pi0_exports")


def noises(count: int) -> list[np.ndarray]:
    rng = np.random.default_rng(11)
    return [rng.standard_normal((H, 32)).astype(np.float32) for _ in range(count)]


def check_runner_against_reference(
    folder: Path, tokenizer: Path, pi05: bool, bound: float, **runner_options: Any
) -> float:
    """The runner's chunks for three observations against the reference; the worst error."""
    runner = make_runner(str(folder), threads=1, **runner_options)
    model = randomised(pi05)
    observations = [
        observation(0),
        observation(1, size=(180, 320)),  # resized with padding by the runner
        observation(2, images=observation(0).images),  # same instruction, new state
    ]
    got, want = [], []
    for obs, noise in zip(observations, noises(3), strict=True):
        chunk = runner.infer(obs, noise=noise)
        assert chunk.positions.shape == (H, N) and chunk.t_obs_s == 2.5
        assert chunk.joint_names == tuple(JOINTS)
        got.append(chunk.positions)
        want.append(reference_chunk(model, tokenizer, obs, noise, pi05)[1])
    error = worst_fraction_of_range(np.stack(got), np.stack(want))
    assert error <= bound, error
    return error


def check_programs_against_eager(folder: Path, tokenizer: Path, pi05: bool, bound: float) -> float:
    """Each program's normalised chunk (fed the reference's host tensors) against eager stages."""
    manifest, programs = open_stage_programs(folder)
    model = randomised(pi05)
    stages = build_stages(model)
    got, want = [], []
    for seed, noise in zip(range(3), noises(3), strict=True):
        host = host_tensors(model, tokenizer, observation(seed), deployment(pi05))
        got.append(chained_actions(manifest, programs, host, noise))
        want.append(run_stages(stages, **host, noise=torch.from_numpy(noise[None])).numpy()[0])
    error = worst_fraction_of_range(np.stack(got), np.stack(want))
    assert error <= bound, error
    return error


# ---------------------------------------------------------------- tokenizer and contract
def test_the_runner_tokenizes_the_prompt_as_openpi(tokenizer) -> None:
    state = np.array([-1.5, -1.0, -0.3, 0.0, 0.5, 0.999, 1.0])
    for prompt, state_norm in (("pi0", None), ("pi05_state", state)):
        runner_tok = PaligemmaPromptTokenizer(tokenizer, TOKENS, prompt)
        ids, mask = runner_tok.encode(INSTRUCTION, state_norm)
        want_ids, want_mask = openpi_tokens(tokenizer, INSTRUCTION, state_norm, TOKENS)
        np.testing.assert_array_equal(ids, want_ids)
        np.testing.assert_array_equal(mask, want_mask)
        assert ids[0, 0] == 2 and mask.sum() < TOKENS  # BOS first, padded with mask false
    # π0: the "\n" is encoded on its own after the cleaned text
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(tokenizer))
    ids, mask = PaligemmaPromptTokenizer(tokenizer, 48, "pi0").encode(INSTRUCTION)
    text = sp.encode(clean_task(INSTRUCTION), add_bos=True)
    assert ids[0, : int(mask.sum())].tolist() == text + sp.encode("\n")
    # π0.5: the same text as the torch side's prompt module; bins -1 and 255 at the edges
    pi05_tok = PaligemmaPromptTokenizer(tokenizer, 48, "pi05_state")
    assert pi05_tok.text(INSTRUCTION, state) == pi05_prompt(INSTRUCTION, state)
    assert "State: -1 0 89 128 192 255 255;" in pi05_tok.text(INSTRUCTION, state)
    want_ids, want_mask = pad_tokens(sp.encode(pi05_prompt(INSTRUCTION, state), add_bos=True), 48)
    np.testing.assert_array_equal(pi05_tok.encode(INSTRUCTION, state)[0], want_ids)
    # too long: cut to max_len, every slot real
    ids, mask = PaligemmaPromptTokenizer(tokenizer, 6, "pi0").encode(INSTRUCTION * 4)
    assert ids.shape == (1, 6) and mask.all()
    np.testing.assert_array_equal(ids, openpi_tokens(tokenizer, INSTRUCTION * 4, None, 6)[0])


def test_the_contract_declares_openpis_host_side(pi05) -> None:
    config = Pi0Config.tiny(pi05=pi05, **SIZES)
    contract = pi0_contract(
        config,
        joint_names=JOINTS,
        camera_map=CAMERA_MAP,
        dt_action_s=DT,
        norm_stats=norm_stats(pi05),
    )
    host = contract["host"]
    assert contract["architecture"] == ("pi05" if pi05 else "pi0")
    assert host["images"]["slots"] == [
        {"name": "base_0_rgb", "camera": "agentview"},
        {"name": "left_wrist_0_rgb", "camera": "wrist"},
        {"name": "right_wrist_0_rgb", "camera": None},
    ]
    assert host["images"]["pixel_range"] == [-1.0, 1.0] and host["images"]["resize"] == "pad"
    assert host["token_ids"]["tokenizer"] == {"kind": "sentencepiece", "file": TOKENIZER_FILE}
    assert host["token_ids"]["prompt"] == ("pi05_state" if pi05 else "pi0")
    assert host["state"]["shape"] == [1, 32] and host["noise"]["shape"] == [1, H, 32]
    norm = contract["normalisation"]
    assert norm["kind"] == ("quantile" if pi05 else "mean_std") and norm["epsilon"] == EPS
    key = "q99" if pi05 else "std"
    assert norm["actions"][key] == norm_stats(pi05)["actions"][key][:N]
    assert contract["action_dim"] == 32 and contract["cameras"] == CAMERAS
    assert contract["chunk_horizon"] == H and contract["flow_steps"] == K


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        (
            {"camera_map": {"top_rgb": "agentview"}},
            r"camera_map slot 'top_rgb' is not an image slot",
        ),
        ({"camera_map": {"base_0_rgb": None}}, r"maps no robot camera"),
        ({"camera_map": {"base_0_rgb": "a", "left_wrist_0_rgb": "a"}}, r"one camera to two slots"),
        ({"norm_stats": {"state": {"mean": [0.0] * N}, "actions": {}}}, r"norm_stats\.state\.std"),
        (
            {"norm_stats": {"state": {"mean": [0.0], "std": [1.0]}, "actions": {}}},
            r"norm_stats\.state\.mean has 1 values, expected >= 7",
        ),
        ({"joint_names": [f"j{i}" for i in range(33)]}, r"joint_names has 33 entries"),
    ],
)
def test_a_bad_contract_is_refused_naming_the_field(changes, words) -> None:
    kwargs: dict[str, Any] = dict(
        joint_names=JOINTS, camera_map=CAMERA_MAP, dt_action_s=DT, norm_stats=norm_stats(False)
    )
    kwargs.update(changes)
    with pytest.raises(ConfigError, match=words):
        pi0_contract(Pi0Config.tiny(**SIZES), **kwargs)


def test_8da4w_is_not_exported_to_onnx(tokenizer, tmp_path) -> None:
    with pytest.raises(ConfigError, match=r"quant = '8da4w' with backend 'onnx'"):
        export_model(
            randomised(False),
            tmp_path,
            "onnx",
            "8da4w",
            tokenizer=tokenizer,
            joint_names=JOINTS,
            camera_map=CAMERA_MAP,
            dt_action_s=DT,
            norm_stats=norm_stats(False),
        )


def test_the_xnnpack_rewrite_equals_the_reference_stages(pi05) -> None:
    model = randomised(pi05)
    programs = {p.name: p for p in stage_programs_of(model, "executorch")}
    stages = build_stages(model)
    rewritten = xnnpack_stages(stages.vision_encoder, stages.fusion, stages.action_head)
    with torch.no_grad():
        for name, reference in stages.modules().items():
            example = programs[name].example_inputs
            want = reference(*example)
            got = rewritten[name](*example)
            for g, w in zip(
                got if isinstance(got, tuple) else (got,),
                want if isinstance(want, tuple) else (want,),
                strict=True,
            ):
                assert (g - w).abs().max().item() <= 1e-5 * max(1.0, w.abs().max().item()), name


# ---------------------------------------------------------------- ONNX
@pytest.mark.slow  # exports ONNX programs (about 17 s each at this size)
def test_onnx_programs_equal_eager_torch(root, tokenizer, pi05) -> None:
    folder = exported(root, tokenizer, pi05, "onnx", "fp32")
    manifest = load_manifest(folder)
    assert manifest.architecture == ("pi05" if pi05 else "pi0")
    assert manifest.stage_order == ("vision_encoder", "fusion", "action_head")
    assert (folder / TOKENIZER_FILE).read_bytes() == tokenizer.read_bytes()
    check_programs_against_eager(folder, tokenizer, pi05, 1e-3)


@pytest.mark.slow  # exports ONNX programs (about 17 s each at this size)
def test_the_onnx_runner_chunk_equals_the_openpi_style_reference(root, tokenizer, pi05) -> None:
    folder = exported(root, tokenizer, pi05, "onnx", "fp32")
    check_runner_against_reference(folder, tokenizer, pi05, 1e-3)


@pytest.mark.slow  # exports ONNX programs (about 17 s each at this size)
def test_the_torch_export_runs_on_the_cpu_as_the_openpi_style_reference(
    root, tokenizer, pi05
) -> None:
    from vla_edge.runners.torch_stages import TorchStagesRunner

    folder = exported(root, tokenizer, pi05, "torch", "fp32")
    manifest = load_manifest(folder)
    assert manifest.backend == "torch"
    assert {s.file for s in manifest.stages.values()} == {
        f"{name}.safetensors" for name in manifest.stage_order
    }
    assert isinstance(make_runner(str(folder), threads=1), TorchStagesRunner)
    check_runner_against_reference(folder, tokenizer, pi05, 1e-3)
    # bfloat16 weights on the CPU: the flow, the time embedding and the norms stay float32
    # (measured here: 0.18 % / 0.10 % of the range for pi0 / pi05; the bound is 2 %)
    check_runner_against_reference(folder, tokenizer, pi05, 0.02, dtype="bfloat16")


def test_a_torch_export_whose_weights_are_not_the_stages_is_refused(
    root, tokenizer, tmp_path
) -> None:
    from safetensors.torch import load_file, save_file

    folder = copy_export(exported(root, tokenizer, False, "torch", "fp32"), tmp_path / "bad")
    path = folder / "fusion.safetensors"
    tensors = load_file(str(path))
    tensors.pop(next(iter(tensors)))
    save_file(tensors, str(path))
    with pytest.raises(ManifestMismatchError, match=r"stages.fusion.file .* that stage's weights"):
        make_runner(str(folder), threads=1)


def test_pi05_tokens_follow_the_state_of_every_observation(root, tokenizer) -> None:
    runner = OnnxRunner(exported(root, tokenizer, True, "onnx", "fp32"), threads=1)
    assert runner.manifest.tokens_per_observation
    first = runner.infer(observation(0), noise=noises(1)[0])
    moved = observation(0, state=observation(0).state + 0.3)
    second = runner.infer(moved, noise=noises(1)[0])
    want = reference_chunk(randomised(True), tokenizer, moved, noises(1)[0], True)[1]
    assert worst_fraction_of_range(second.positions, want) <= 1e-3
    assert not np.allclose(first.positions, second.positions)
    assert (
        INSTRUCTION not in runner._instruction_cache or not runner._instruction_cache[INSTRUCTION]
    )


@pytest.mark.slow  # exports ONNX programs (about 17 s each at this size)
def test_pi0_tokens_are_cached_per_instruction(root, tokenizer) -> None:
    runner = OnnxRunner(exported(root, tokenizer, False, "onnx", "fp32"), threads=1)
    assert not runner.manifest.tokens_per_observation
    runner.infer(observation(0), noise=noises(1)[0])
    assert set(runner._instruction_cache[INSTRUCTION]) == {"host:token_ids", "host:token_mask"}


@pytest.mark.slow  # exports ONNX programs (about 17 s each at this size)
def test_a_masked_slot_is_a_black_image(root, tokenizer) -> None:
    model = randomised(False)
    host = host_tensors(model, tokenizer, observation(0), deployment(False))
    assert host["image_mask"].tolist() == [1.0, 1.0, 0.0]
    assert torch.all(host["images"][2] == -1.0)


@pytest.mark.slow  # exports ONNX programs (about 17 s each at this size)
def test_a_state_prompt_cannot_feed_a_per_instruction_stage(root, tokenizer, tmp_path) -> None:
    import shutil

    folder = tmp_path / "copy"
    shutil.copytree(exported(root, tokenizer, True, "onnx", "fp32"), folder)
    data = json.loads((folder / MANIFEST_NAME).read_text())
    fusion = data["stages"]["fusion"]  # a per-instruction stage of the tokens alone
    fusion["rate"] = "per_instruction"
    fusion["inputs"] = [t for t in fusion["inputs"] if t["source"].startswith("host:token")]
    (folder / MANIFEST_NAME).write_text(json.dumps(data))
    with pytest.raises(ManifestMismatchError, match=r"pi05_state' holds the state"):
        load_manifest(folder)


# ---------------------------------------------------------------- ExecuTorch
# Each lowering to XNNPACK costs 20-40 s however small the model: two of the four
# (architecture, quant) pairs keep the suite short - π0.5's adaRMS expert in fp32,
# π0 in 8da4w (the tighter of the two 8da4w margins; π0.5's is 0.2 %)
@pytest.mark.slow
@pytest.mark.parametrize(
    ("pi05", "quant", "bound"),
    [(True, "fp32", 1e-3), (False, "8da4w", 5e-2)],
    ids=["pi05-fp32", "pi0-8da4w"],
)
def test_executorch_programs_are_delegated_and_equal_eager_torch(
    root, tokenizer, pi05, quant, bound
) -> None:
    folder = exported(root, tokenizer, pi05, "executorch", quant)
    stages = load_manifest(folder).data["stages"]
    for name, entry in stages.items():
        delegation = entry["delegation"]
        assert delegation["delegated_subgraphs"] == 1, (name, delegation)
        assert set(delegation["non_delegated_ops"]) <= set(NOT_DELEGATED_WHY), (name, delegation)
        assert set(delegation["why"]) == set(delegation["non_delegated_ops"])
    assert stages["vision_encoder"]["delegation"]["non_delegated_ops"] == {}
    assert stages["action_head"]["delegation"]["non_delegated_ops"] == {}
    if quant == "8da4w":
        assert all(entry["fp32_linears"] == 0 for entry in stages.values())
    check_programs_against_eager(folder, tokenizer, pi05, bound)
    check_runner_against_reference(folder, tokenizer, pi05, bound)


@pytest.mark.slow
def test_fp16_programs_mask_with_finite_values(root, tokenizer) -> None:
    """Half precision: the reference's mask value is -inf in fp16, and ``0 * inf`` had made
    every allowed score NaN; the programs now mask with fp16's lowest finite value."""
    folder = exported(root, tokenizer, False, "executorch", "fp16")
    assert load_manifest(folder).data["stages"]["fusion"]["quant"] == "fp16"
    assert check_programs_against_eager(folder, tokenizer, False, 1e-2) > 0.0


# ---------------------------------------------------------------- vla-edge export --policy
def write_openpi_checkpoint(root: Path, model: Pi0Model) -> Path:
    """openpi's converted layout: model.safetensors, config.json, assets/<id>/norm_stats.json."""
    rng = np.random.default_rng(5)
    part = {
        "mean": rng.normal(0, 0.3, 14).tolist(),
        "std": rng.uniform(0.2, 1.0, 14).tolist(),
        "q01": rng.uniform(-1.0, -0.5, 14).tolist(),
        "q99": rng.uniform(0.5, 1.0, 14).tolist(),
    }
    stats = {"state": part, "actions": part}
    return write_checkpoint(root, model, stats, ("dummy", "dummy"), asset_id="trossen")


@pytest.fixture(scope="module")
def policy_dir(tokenizer, tmp_path_factory) -> Path:
    """A tiny π0 written in openpi's layout and imported onto the tabletop arm."""
    from vla_edge.archs.common import ImportOptions
    from vla_edge.archs.importer import default_robot, import_checkpoint
    from vla_edge.archs.pi0.config import GemmaSize

    torch.manual_seed(1)
    source = Pi0Model(
        Pi0Config.tiny(expert=GemmaSize.dummy(), action_horizon=H, max_token_len=48)
    ).eval()
    with torch.no_grad():
        for p in source.parameters():
            p.normal_(0.0, 0.1)
    root = tmp_path_factory.mktemp("imported")
    ckpt = write_openpi_checkpoint(root / "ckpt", source)
    import_checkpoint(
        ckpt, root / "policy", tokenizer, DT, default_robot(), options=ImportOptions(vision_heads=4)
    )
    return root / "policy"


@pytest.mark.slow  # exports ONNX programs (about 17 s each at this size)
def test_vla_edge_export_policy_runs_an_imported_policy_directory(
    policy_dir, tokenizer, tmp_path
) -> None:
    from vla_edge.archs.pi0.checkpoint import load_pi0_weights
    from vla_edge.archs.policy_dir import load_policy_dir
    from vla_edge.cli import main

    out = tmp_path / "export"
    argv = ["export", "--policy", str(policy_dir), "--backend", "onnx", "--out", str(out)]
    assert main([*argv, "--flow-steps", str(K)]) == 0
    policy = load_policy_dir(policy_dir)
    manifest = load_manifest(out)
    n = len(policy.joint_names)
    assert manifest.architecture == "pi0" and manifest.data["flow_steps"] == K
    assert manifest.data["joint_names"] == list(policy.joint_names)
    assert manifest.data["normalisation"] == policy.manifest_normalisation(n)
    assert manifest.data["action_space"] == policy.action_space
    assert manifest.data["source"]["weights_sha256"] == policy.weights["sha256"]

    model = Pi0Model(manifest_config := Pi0Config(**manifest.data["model_config"])).eval()
    load_pi0_weights(policy, model)
    assert manifest_config.flow_steps == K
    section = policy.manifest_normalisation(n)
    deploy = Deployment(
        policy.cameras,
        {"state": section["state"], "actions": section["actions"]},
        section["kind"] == "quantile",
        n,
        tuple(section["delta_actions"]),
    )
    rng = np.random.default_rng(4)
    cameras = [c for c in policy.cameras.values() if c is not None]
    obs = Observation(
        stamp_s=1.0,
        images={c: rng.integers(0, 256, (240, 320, 3), dtype=np.uint8) for c in cameras},
        state=rng.uniform(-0.5, 0.5, n),
        instruction="pick up the red cube",
    )
    noise = noises(1)[0]
    got = make_runner(str(out), threads=1).infer(obs, noise=noise).positions
    want = reference_chunk(model, tokenizer, obs, noise, deploy)[1]
    # the policy's default action space: the arm joints in radians as decoded, the
    # gripper mapped linearly onto its range and clamped there (vla_edge.actions)
    gripper = policy.action_space["gripper"]
    (p_lo, p_hi), (g_lo, g_hi) = gripper["policy_range"], gripper["position_range_m"]
    want = want.copy()
    want[:, -1] = np.clip(
        g_lo + (want[:, -1] - p_lo) * (g_hi - g_lo) / (p_hi - p_lo),
        min(g_lo, g_hi),
        max(g_lo, g_hi),
    )
    assert worst_fraction_of_range(got[:, :-1], want[:, :-1]) <= 1e-3
    np.testing.assert_allclose(got[:, -1], want[:, -1], atol=1e-5)

    # refused: a flag of the bundled export alongside --policy
    assert main([*argv, "--checkpoint", "bundled"]) == 2


def test_low_memory_is_for_a_policy_dir_and_a_failed_stage_process_is_named(tmp_path) -> None:
    from vla_edge.archs.pi0.stages import STAGE_NAMES
    from vla_edge.cli import main
    from vla_edge.export.architecture import export_in_processes
    from vla_edge.export.quant_recipes import resolve_recipe

    argv = ["export", "--backend", "onnx", "--out", str(tmp_path / "x"), "--low-memory"]
    assert main(argv) == 2
    assert not (tmp_path / "x" / MANIFEST_NAME).exists()
    with pytest.raises(ConfigError, match="stage vision_encoder in its own process failed, exit 2"):
        export_in_processes(
            tmp_path / "none", tmp_path / "y", "onnx", resolve_recipe("fp32"), None, STAGE_NAMES
        )


def test_tensors_are_loaded_one_part_at_a_time(tmp_path) -> None:
    from safetensors.torch import save_file

    from vla_edge.archs.common import load_tensors_into
    from vla_edge.core.errors import CheckpointKeysError

    source = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    path = tmp_path / "w.safetensors"
    save_file({f"file.{k}": v.contiguous() for k, v in source.state_dict().items()}, str(path))
    keys = {k: f"file.{k}" for k in source.state_dict()}
    target = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2)).double()
    for p in target.parameters():
        p.data.zero_()
    assert load_tensors_into(target, path, keys, only=target[0]) == 2
    assert torch.equal(target[0].weight.float(), source[0].weight)
    assert target[0].weight.dtype == torch.float64  # cast to the parameter's dtype
    assert not target[1].weight.any()  # the other part is not read
    assert load_tensors_into(target, path, keys) == 4
    assert torch.equal(target[1].bias.float(), source[1].bias)
    with pytest.raises(CheckpointKeysError, match="0.bias"):
        load_tensors_into(target, path, {k: v for k, v in keys.items() if k != "0.bias"})


@pytest.mark.slow  # exports 8da4w ExecuTorch programs twice, then three processes start
def test_a_low_memory_export_reads_each_stage_alone_and_makes_the_same_programs(
    policy_dir, tmp_path
) -> None:
    """``--low-memory``: one process per stage, holding only that stage's weights."""
    from vla_edge.archs.pi0.stages import STAGE_NAMES
    from vla_edge.cli import main
    from vla_edge.export.architecture import load_policy_model

    # a stage's load reads just its tensors, and they are the whole load's
    policy, whole = load_policy_model(policy_dir)
    alone = {}
    for stage in STAGE_NAMES:
        _, model = load_policy_model(policy_dir, stage=stage)
        alone[stage] = build_stages(model).modules()[stage].state_dict()
        want = build_stages(whole).modules()[stage].state_dict()
        assert alone[stage].keys() == want.keys()
        assert all(torch.equal(alone[stage][k], want[k]) for k in want), stage
    # (the stages share no tensor; together they hold every one but the unused text head)
    assert sum(len(t) for t in alone.values()) == len(whole.state_dict()) - 1

    outs = {}
    for name, extra in (("whole", []), ("apart", ["--low-memory"])):
        outs[name] = tmp_path / name
        argv = ["export", "--policy", str(policy_dir), "--backend", "executorch"]
        argv += ["--quant", "8da4w", "--flow-steps", str(K), "--out", str(outs[name]), *extra]
        assert main(argv) == 0, name
    whole_m, apart_m = load_manifest(outs["whole"]).data, load_manifest(outs["apart"]).data
    for stage in STAGE_NAMES:
        w, a = whole_m["stages"][stage], apart_m["stages"][stage]
        assert a["check_max_abs"] is None and w["check_max_abs"] is not None
        assert a["inputs"] == w["inputs"] and a["outputs"] == w["outputs"]
        assert a.get("repeat") == w.get("repeat")
        assert a["delegation"]["why"] == w["delegation"]["why"]
    assert not list(outs["apart"].glob("*.entry.json"))
    rng = np.random.default_rng(7)
    n = len(policy.joint_names)
    obs = Observation(
        stamp_s=1.0,
        images={
            c: rng.integers(0, 256, (240, 320, 3), dtype=np.uint8)
            for c in policy.cameras.values()
            if c is not None
        },
        state=rng.uniform(-0.5, 0.5, n),
        instruction="pick up the red cube",
    )
    noise = noises(1)[0]
    chunks = {k: make_runner(str(v), threads=1).infer(obs, noise=noise) for k, v in outs.items()}
    np.testing.assert_allclose(chunks["apart"].positions, chunks["whole"].positions, atol=1e-6)
