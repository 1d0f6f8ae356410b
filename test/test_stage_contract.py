"""The v2 stage contract is general: a tiny synthetic π0-shaped architecture runs unchanged.

Three stages, none of them the bundled model's:

* ``language`` (per instruction): WordPiece ids -> token embeddings and their pad;
* ``fusion``: three image slots (one without a camera, masked), the language
  tokens and the padded state -> a per-layer key/value cache
  ``prefix_keys``/``prefix_values`` ``[L, 1, T, D]`` and ``prefix_pad`` ``[1, T]``;
* ``action_head``: attends to that cache with plain matmul/softmax in each of
  ``K`` unrolled Euler steps from explicit noise, with an executed prefix.

Actions are padded to ``A = 8`` of which the robot uses ``N = 3``; the
normalisation is openpi's quantile formula with its epsilon; images are in
[-1, 1]. The reference here computes the host tensors by hand (not with the
runner's code) and runs the torch modules eagerly.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from vla_edge.archs.bundled.normalize import ActionCodec, NormStats
from vla_edge.archs.normalisation import codec_from_section, mean_std_section
from vla_edge.core.errors import InvalidObservationError, ManifestMismatchError
from vla_edge.core.types import Observation
from vla_edge.export.manifest import (
    MANIFEST_FORMAT,
    MANIFEST_NAME,
    TOKENIZER_NAME,
    TensorSpec,
    file_sha256,
    load_manifest,
)
from vla_edge.export.pipeline import export_architecture
from vla_edge.export.stages import StageProgram
from vla_edge.runners.factory import make_runner
from vla_edge.runners.onnx_runner import OnnxRunner
from vla_edge.runners.preprocess import images_input, images_to_nchw

torch.set_num_threads(1)

SLOTS = [("base_0_rgb", "agentview"), ("left_wrist_0_rgb", "wrist"), ("right_wrist_0_rgb", None)]
CAMERAS = ["agentview", "wrist"]
JOINTS = ["j1", "j2", "gripper"]
DELTA = [True, True, False]
SIZE, PATCH = 16, 8
N_SLOTS, PATCHES = len(SLOTS), (16 // 8) ** 2
TOKENS, LAYERS, D = 6, 2, 16
H, A, S, K = 4, 8, 8, 3
T = N_SLOTS * PATCHES + TOKENS + 1
EPS = 1e-6
VOCAB = 30522
F32, I64 = "float32", "int64"

STATS = {
    "state": {"q01": [-0.5, -0.4, 0.0], "q99": [0.5, 0.6, 0.04]},
    "actions": {"q01": [-0.05, -0.08, 0.0], "q99": [0.05, 0.06, 0.04]},
}


class Language(nn.Module):
    """Token ids -> scaled embeddings and the float pad mask."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)

    def forward(self, token_ids: torch.Tensor, token_mask: torch.Tensor):  # noqa: ANN201
        return self.embed(token_ids) * math.sqrt(D), token_mask.to(torch.float32)


class Fusion(nn.Module):
    """Images, language and state -> a per-layer key/value cache over the prefix."""

    def __init__(self) -> None:
        super().__init__()
        self.patch = nn.Linear(3 * PATCH * PATCH, D)
        self.state = nn.Linear(S, D)
        self.mix = nn.ModuleList(nn.Linear(D, D) for _ in range(LAYERS))
        self.key = nn.ModuleList(nn.Linear(D, D) for _ in range(LAYERS))
        self.value = nn.ModuleList(nn.Linear(D, D) for _ in range(LAYERS))

    def forward(self, images, image_mask, lang_tokens, lang_pad, state):  # noqa: ANN001, ANN201
        g = SIZE // PATCH
        patches = images.reshape(N_SLOTS, 3, g, PATCH, g, PATCH).permute(0, 2, 4, 1, 3, 5)
        img = self.patch(patches.reshape(1, N_SLOTS * PATCHES, 3 * PATCH * PATCH))
        img_pad = image_mask[:, None].expand(N_SLOTS, PATCHES).reshape(1, N_SLOTS * PATCHES)
        x = torch.cat([img, lang_tokens, self.state(state)[:, None]], dim=1)
        pad = torch.cat([img_pad, lang_pad, torch.ones(1, 1)], dim=1)
        keys, values = [], []
        for mix, key, value in zip(self.mix, self.key, self.value, strict=True):
            x = x + torch.tanh(mix(x))
            keys.append(key(x))
            values.append(value(x))
        return torch.stack(keys), torch.stack(values), pad


class ActionHead(nn.Module):
    """K Euler steps of a velocity that attends to the read-only prefix cache."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(A, D)
        self.time = nn.Linear(1, D)
        self.query = nn.ModuleList(nn.Linear(D, D) for _ in range(LAYERS))
        self.out = nn.Linear(D, A)

    def forward(self, keys, values, pad, noise, prefix_actions, prefix_mask):  # noqa: ANN001, ANN201
        bias = (pad[:, None, :] - 1.0) * 1e9
        m = prefix_mask[..., None]
        x = noise
        for step in range(K):
            t = torch.full((1, 1, 1), 1.0 - step / K)
            h = self.inp(m * prefix_actions + (1.0 - m) * x) + self.time(t)
            for layer, query in enumerate(self.query):
                scores = query(h) @ keys[layer].transpose(-1, -2) / math.sqrt(D) + bias
                h = h + torch.softmax(scores, dim=-1) @ values[layer]
            x = x - self.out(h) / K
        return m * prefix_actions + (1.0 - m) * x


def _spec(name: str, shape: tuple[int, ...], dtype: str = F32, source: str | None = None):
    return TensorSpec(name, shape, dtype, source)


def toy_stages(tokenizer_dir: Path) -> list[StageProgram]:
    """The three stages with example inputs (seeded weights)."""
    from vla_edge.archs.bundled.tokenizer import InstructionTokenizer

    torch.manual_seed(0)
    language, fusion, head = Language().eval(), Fusion().eval(), ActionHead().eval()
    ids, mask = InstructionTokenizer(TOKENS, model_dir=tokenizer_dir).encode("pick up the cube")
    ids_t, mask_t = torch.from_numpy(ids), torch.from_numpy(mask)
    gen = torch.Generator().manual_seed(1)
    images = torch.rand(N_SLOTS, 3, SIZE, SIZE, generator=gen) * 2 - 1
    image_mask = torch.tensor([1.0, 1.0, 0.0])
    state = torch.randn(1, S, generator=gen)
    noise = torch.randn(1, H, A, generator=gen)
    prefix = torch.randn(1, H, A, generator=gen)
    prefix_mask = torch.tensor([[1.0, 0.0, 0.0, 0.0]])
    with torch.no_grad():
        lang, lang_pad = language(ids_t, mask_t)
        keys, values, pad = fusion(images, image_mask, lang, lang_pad, state)
    kv = (LAYERS, 1, T, D)
    return [
        StageProgram(
            "language",
            language,
            (ids_t, mask_t),
            (
                _spec("token_ids", (1, TOKENS), I64, "host:token_ids"),
                _spec("token_mask", (1, TOKENS), I64, "host:token_mask"),
            ),
            (_spec("lang_tokens", (1, TOKENS, D)), _spec("lang_pad", (1, TOKENS))),
            rate="per_instruction",
        ),
        StageProgram(
            "fusion",
            fusion,
            (images, image_mask, lang, lang_pad, state),
            (
                _spec("images", (N_SLOTS, 3, SIZE, SIZE), source="host:images"),
                _spec("image_mask", (N_SLOTS,), source="host:image_mask"),
                _spec("lang_tokens", (1, TOKENS, D), source="stage:language.lang_tokens"),
                _spec("lang_pad", (1, TOKENS), source="stage:language.lang_pad"),
                _spec("state", (1, S), source="host:state"),
            ),
            (_spec("prefix_keys", kv), _spec("prefix_values", kv), _spec("prefix_pad", (1, T))),
        ),
        StageProgram(
            "action_head",
            head,
            (keys, values, pad, noise, prefix, prefix_mask),
            (
                _spec("prefix_keys", kv, source="stage:fusion.prefix_keys"),
                _spec("prefix_values", kv, source="stage:fusion.prefix_values"),
                _spec("prefix_pad", (1, T), source="stage:fusion.prefix_pad"),
                _spec("noise", (1, H, A), source="host:noise"),
                _spec("prefix_actions", (1, H, A), source="host:prefix_actions"),
                _spec("prefix_mask", (1, H), source="host:prefix_mask"),
            ),
            (_spec("actions_norm", (1, H, A)),),
        ),
    ]


def toy_contract() -> dict[str, Any]:
    """The toy architecture's manifest fields besides its stages and exporter (a fresh copy)."""
    return json.loads(json.dumps(_toy_contract()))


def _toy_contract() -> dict[str, Any]:
    return {
        "architecture": "toy_kv",
        "output": "action_head.actions_norm",
        "host": {
            "images": {
                "shape": [N_SLOTS, 3, SIZE, SIZE],
                "dtype": F32,
                "slots": [{"name": name, "camera": cam} for name, cam in SLOTS],
                "pixel_range": [-1.0, 1.0],
                "resize": "pad",
            },
            "image_mask": {"shape": [N_SLOTS], "dtype": F32},
            "token_ids": {
                "shape": [1, TOKENS],
                "dtype": I64,
                "tokenizer": {"kind": "wordpiece", "file": TOKENIZER_NAME},
            },
            "token_mask": {"shape": [1, TOKENS], "dtype": I64},
            "state": {"shape": [1, S], "dtype": F32},
            "noise": {"shape": [1, H, A], "dtype": F32},
            "prefix_actions": {"shape": [1, H, A], "dtype": F32},
            "prefix_mask": {"shape": [1, H], "dtype": F32},
        },
        "normalisation": {
            "kind": "quantile",
            "epsilon": EPS,
            "state": STATS["state"],
            "actions": STATS["actions"],
            "delta_actions": DELTA,
        },
        "joint_names": JOINTS,
        "action_dim": A,
        "chunk_horizon": H,
        "dt_action_s": 0.1,
        "flow_steps": K,
        "cameras": CAMERAS,
        "image_height": SIZE,
        "image_width": SIZE,
        "source": {"trained": False},
    }


def copy_tokenizer(out_dir: Path) -> None:
    """The installed MiniLM WordPiece ``tokenizer.json`` into ``out_dir``."""
    from vla_edge.archs.bundled.tokenizer import minilm_dir

    out_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(minilm_dir() / TOKENIZER_NAME, out_dir / TOKENIZER_NAME)


def _quantile(x: np.ndarray, stats: dict[str, list[float]]) -> np.ndarray:
    q01, q99 = np.asarray(stats["q01"]), np.asarray(stats["q99"])
    return (x - q01) / (q99 - q01 + EPS) * 2.0 - 1.0


def _unquantile(x: np.ndarray, stats: dict[str, list[float]]) -> np.ndarray:
    q01, q99 = np.asarray(stats["q01"]), np.asarray(stats["q99"])
    return (x + 1.0) / 2.0 * (q99 - q01 + EPS) + q01


def reference_chunk(
    stages: list[StageProgram],
    tokenizer_dir: Path,
    images: dict[str, np.ndarray],
    state: np.ndarray,
    instruction: str,
    noise: np.ndarray,
    prefix: np.ndarray | None,
    prefix_len: int,
) -> np.ndarray:
    """The chunk computed by hand: openpi-style host tensors, eager torch stages, decoding."""
    from vla_edge.archs.bundled.tokenizer import InstructionTokenizer

    language, fusion, head = (s.module for s in stages)
    frames = [
        images[cam] if cam is not None else np.zeros((SIZE, SIZE, 3), np.uint8) for _, cam in SLOTS
    ]
    pixels = np.stack(frames).transpose(0, 3, 1, 2).astype(np.float64) / 255.0 * 2.0 - 1.0
    image_mask = np.array([cam is not None for _, cam in SLOTS], dtype=np.float32)
    ids, mask = InstructionTokenizer(TOKENS, model_dir=tokenizer_dir).encode(instruction)
    state_n = np.zeros((1, S))
    state_n[0, : len(JOINTS)] = _quantile(state, STATS["state"])
    delta = np.where(DELTA, state, 0.0)
    prefix_n = np.zeros((1, H, A))
    prefix_mask = np.zeros((1, H))
    if prefix_len:
        prefix_n[0, :prefix_len, : len(JOINTS)] = _quantile(
            prefix[:prefix_len] - delta, STATS["actions"]
        )
        prefix_mask[0, :prefix_len] = 1.0

    def t(x: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.asarray(x, dtype=np.float32))

    with torch.no_grad():
        lang, lang_pad = language(torch.from_numpy(ids), torch.from_numpy(mask))
        keys, values, pad = fusion(t(pixels), t(image_mask), lang, lang_pad, t(state_n))
        out = head(keys, values, pad, t(noise[None]), t(prefix_n), t(prefix_mask)).numpy()
    chunk = _unquantile(out[0, :, : len(JOINTS)].astype(np.float64), STATS["actions"]) + delta
    if prefix_len:
        chunk[:prefix_len] = prefix[:prefix_len]
    return chunk


# ---------------------------------------------------------------- the toy exported and run
def _observation(seed: int = 0, **changes: Any) -> Observation:
    rng = np.random.default_rng(seed)
    fields: dict[str, Any] = dict(
        stamp_s=1.5,
        images={cam: rng.integers(0, 256, (SIZE, SIZE, 3), dtype=np.uint8) for cam in CAMERAS},
        state=np.array([0.1, -0.2, 0.02]),
        instruction="pick up the cube",
    )
    fields.update(changes)
    return Observation(**fields)


@pytest.fixture(scope="module")
def toy_onnx(tmp_path_factory) -> tuple[Path, list[StageProgram]]:
    out = tmp_path_factory.mktemp("toy_onnx")
    copy_tokenizer(out)
    stages = toy_stages(out)
    export_architecture(stages, out, toy_contract(), "onnx", log=lambda _: None)
    return out, stages


def _check_runner_matches_torch(runner: Any, stages: list[StageProgram], folder: Path) -> None:
    rng = np.random.default_rng(7)
    for seed, prefix_len in ((0, 0), (1, 2)):
        obs = _observation(seed)
        noise = rng.standard_normal((H, A)).astype(np.float32)
        prefix = rng.uniform(-0.05, 0.05, (H, len(JOINTS))) + obs.state
        got = runner.infer(obs, noise=noise, prefix_actions=prefix, prefix_len=prefix_len)
        want = reference_chunk(
            stages, folder, obs.images, obs.state, obs.instruction, noise, prefix, prefix_len
        )
        assert got.positions.shape == (H, len(JOINTS)) and got.t_obs_s == 1.5
        span = np.ptp(want, axis=0) + 1e-6
        assert np.max(np.abs(got.positions - want) / span) < 1e-3, (got.positions, want)
        np.testing.assert_array_equal(got.positions[:prefix_len], prefix[:prefix_len])


def test_a_kv_cache_architecture_exports_to_onnx_with_a_v2_manifest(toy_onnx) -> None:
    folder, _ = toy_onnx
    manifest = load_manifest(folder)
    assert manifest.architecture == "toy_kv"
    assert manifest.stage_order == ("language", "fusion", "action_head")
    assert [t.name for t in manifest.stages["fusion"].outputs] == [
        "prefix_keys",
        "prefix_values",
        "prefix_pad",
    ]
    assert manifest.stages["fusion"].outputs[0].shape == (LAYERS, 1, T, D)
    assert manifest.stages["language"].rate == "per_instruction"
    data = manifest.data
    assert all(data["stages"][s]["check_max_abs"] < 1e-4 for s in manifest.stage_order)
    assert data["host"]["token_ids"]["tokenizer"]["sha256"] == file_sha256(folder / TOKENIZER_NAME)


def test_the_onnx_runner_runs_a_kv_cache_architecture_like_eager_torch(toy_onnx) -> None:
    folder, stages = toy_onnx
    runner = OnnxRunner(folder, threads=1)
    assert runner.spec.cameras == ("agentview", "wrist") and runner.spec.action_dim == 3
    _check_runner_matches_torch(runner, stages, folder)


def test_a_per_instruction_stage_runs_once_per_instruction(toy_onnx) -> None:
    folder, _ = toy_onnx
    runner = OnnxRunner(folder, threads=1)
    first = runner.infer(_observation(instruction="lift the red cube"))
    second = runner.infer(_observation(1, instruction="lift the red cube"))
    assert first.timings_ms["language"] > 0.0 and second.timings_ms["language"] == 0.0
    assert set(second.timings_ms) == {"language", "fusion", "action_head"}
    assert runner.language_embedding("lift the red cube")[0].shape == (1, TOKENS, D)


def test_explicit_noise_has_the_models_padded_width(toy_onnx) -> None:
    runner = OnnxRunner(toy_onnx[0], threads=1)
    with pytest.raises(InvalidObservationError, match=r"noise shape = \(4, 3\), expected \(4, 8\)"):
        runner.infer(_observation(), noise=np.zeros((H, len(JOINTS)), np.float32))


def test_the_factory_runs_any_architectures_export(toy_onnx) -> None:
    runner = make_runner(str(toy_onnx[0]), threads=1, flow_steps=K)
    assert isinstance(runner, OnnxRunner)
    assert runner.infer(_observation()).positions.shape == (H, len(JOINTS))


@pytest.mark.slow  # lowers two small programs to XNNPACK (about a minute)
def test_the_executorch_runner_runs_a_kv_cache_architecture_like_eager_torch(tmp_path) -> None:
    from vla_edge.runners.executorch_runner import ExecuTorchRunner

    copy_tokenizer(tmp_path)
    stages = toy_stages(tmp_path)
    # the per-instruction stage on ONNX Runtime, as the bundled fixture does: stages of
    # one export may run on different backends
    data = export_architecture(
        stages,
        tmp_path,
        toy_contract(),
        "executorch",
        stage_backends={"language": "onnx"},
        log=lambda _: None,
    )
    assert data["stages"]["fusion"]["backend"] == "executorch"
    assert data["stages"]["fusion"]["delegation"]["delegated_nodes"] > 0
    runner = ExecuTorchRunner(tmp_path, threads=1)
    _check_runner_matches_torch(runner, stages, tmp_path)


# ---------------------------------------------------------------- the contract's checks
def _toy_dir(tmp_path: Path, edit: Any = None) -> Path:
    """A toy manifest over placeholder program files (validation only, no export)."""
    copy_tokenizer(tmp_path)
    stages = toy_stages(tmp_path)
    data: dict[str, Any] = {
        "format": MANIFEST_FORMAT,
        "backend": "onnx",
        "quant": "fp32",
        "stage_order": [s.name for s in stages],
        "stages": {},
        "exporter": {},
        **toy_contract(),
    }
    for stage in stages:
        (tmp_path / f"{stage.name}.onnx").write_bytes(b"")
        data["stages"][stage.name] = {
            "file": f"{stage.name}.onnx",
            "backend": "onnx",
            "quant": "fp32",
            "rate": stage.rate,
            "inputs": [t.to_dict() for t in stage.inputs],
            "outputs": [t.to_dict() for t in stage.outputs],
        }
    if edit is not None:
        edit(data)
    (tmp_path / MANIFEST_NAME).write_text(json.dumps(data))
    return tmp_path


def _input(data: dict[str, Any], stage: str, name: str) -> dict[str, Any]:
    return next(t for t in data["stages"][stage]["inputs"] if t["name"] == name)


def test_a_consistent_toy_manifest_loads(tmp_path) -> None:
    manifest = load_manifest(_toy_dir(tmp_path))
    assert manifest.output == ("action_head", "actions_norm")
    assert manifest.codec.kind == "quantile"


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (
            lambda d: _input(d, "action_head", "prefix_keys").update(
                source="stage:fusion.prefix_key"
            ),
            r"stages\.action_head\.inputs\.prefix_keys\.source = 'stage:fusion\.prefix_key': "
            r"stage fusion has outputs \['prefix_keys', 'prefix_values', 'prefix_pad'\]",
        ),
        (
            lambda d: _input(d, "fusion", "lang_pad").update(source="stage:action_head.x"),
            r"no stage 'action_head' runs before it",
        ),
        (
            lambda d: _input(d, "action_head", "prefix_pad").update(shape=[1, T + 1]),
            rf"prefix_pad\.shape = \[1, {T + 1}\], but its source stages\.fusion\.outputs\."
            rf"prefix_pad has \[1, {T}\]",
        ),
        (
            lambda d: _input(d, "fusion", "state").update(source="host:joint_state"),
            r"'joint_state' is not a host input",
        ),
        (
            lambda d: d["host"].pop("image_mask"),
            r"field host\.image_mask is missing, but host\.images\.slots leave a slot",
        ),
        (
            lambda d: _input(d, "language", "token_ids").update(
                source="host:state", dtype="float32"
            ),
            r"a per_instruction stage may only read",
        ),
        (
            lambda d: d.update(output="action_head.actions"),
            r"field output = 'action_head\.actions'",
        ),
        (lambda d: d.update(action_dim=2), r"field action_dim = 2, expected >= 3"),
        (lambda d: d["stage_order"].pop(), r"field stage_order = \['language', 'fusion'\]"),
        (lambda d: d["normalisation"].update(kind="minmax"), r"normalisation\.kind = 'minmax'"),
        (
            lambda d: d["normalisation"]["state"].update(q99=[0.5, 0.6]),
            r"normalisation\.state\.q99 has shape \(2,\), expected \(3,\)",
        ),
        (
            lambda d: d["host"]["images"].update(pixel_range=[0, 255]),
            r"host\.images\.pixel_range = \(0\.0, 255\.0\)",
        ),
        (lambda d: d["host"]["images"].update(resize="crop"), r"host\.images\.resize = 'crop'"),
        (
            lambda d: d["host"]["token_ids"]["tokenizer"].update(kind="bpe"),
            r"host\.token_ids\.tokenizer\.kind = 'bpe'",
        ),
        (
            lambda d: d["host"]["token_ids"]["tokenizer"].update(kind="sentencepiece"),
            r"host\.token_ids\.prompt = None, expected one of \('pi0', 'pi05_state'\)",
        ),
        (
            lambda d: d["host"]["token_ids"].update(prompt="pi0"),
            r"host\.token_ids\.prompt = 'pi0', expected one of \('instruction',\)",
        ),
        (
            lambda d: (
                d["host"]["token_ids"]["tokenizer"].update(kind="sentencepiece"),
                d["host"]["token_ids"].update(prompt="pi05_state"),
            ),
            r"language\.inputs\.token_ids\.source = 'host:token_ids': host\.token_ids\.prompt = "
            r"'pi05_state' holds the state",
        ),
        (
            lambda d: d["host"]["token_mask"].update(dtype="bool"),
            r"host\.token_mask\.dtype = 'bool'",
        ),
        (lambda d: d["stages"]["fusion"].update(rate="per_second"), r"stages\.fusion\.rate"),
    ],
)
def test_an_inconsistent_stage_contract_is_refused_naming_the_field(tmp_path, edit, words) -> None:
    with pytest.raises(ManifestMismatchError, match=words):
        load_manifest(_toy_dir(tmp_path, edit))


def _quantiles(n: int) -> dict[str, list[float]]:
    return {"q01": [-0.5] * n, "q99": [0.5] * n}


def test_each_normalisation_part_has_its_spaces_width(tmp_path) -> None:
    """Without spaces both parts have the joints' width; a ``state_space`` other than
    ``joint_position`` lets the state have its own (up to ``host.state``'s), an
    ``action_space`` the actions (up to ``action_dim``)."""

    def widths(state: int, actions: int, spaces: dict[str, Any]) -> Any:
        def edit(d: dict[str, Any]) -> None:
            d["normalisation"].update(state=_quantiles(state), actions=_quantiles(actions))
            d["normalisation"]["delta_actions"] = [False] * actions
            d.update(spaces)

        def load(folder: Path) -> Any:
            folder.mkdir()
            return load_manifest(_toy_dir(folder, edit))

        return load

    eef = {"state_space": {"kind": "eef_pose"}}
    action_space = {"action_space": {"kind": "joint_delta", "policy_dim": A, "indices": [0, 1]}}
    manifest = widths(S, 5, {**eef, **action_space})(tmp_path / "ok")
    assert (manifest.codec.state_dim, manifest.codec.action_dim) == (S, 5)
    refused = [
        (widths(S, 3, {}), r"normalisation\.state\.q01 has shape \(8,\), expected \(3,\)"),
        (widths(3, 5, {}), r"normalisation\.actions\.q01 has shape \(5,\), expected \(3,\)"),
        (widths(S + 1, 3, eef), rf"host\.state\.shape = \[1, {S}\], expected \[1, W\] with W >= 9"),
        (widths(3, A + 1, action_space), rf"9 statistics, expected <= action_dim = {A}"),
        (
            widths(3, 3, {"state_space": {"kind": 1}}),
            r"field state_space\.kind = 1, expected a string",
        ),
    ]
    for i, (load, words) in enumerate(refused):
        with pytest.raises(ManifestMismatchError, match=words):
            load(tmp_path / f"bad{i}")


def test_an_old_export_is_refused_with_the_command_that_re_exports_it(tmp_path) -> None:
    def v1(d: dict[str, Any]) -> None:
        d["format"] = "vla_edge.export.v1"
        for key in ("architecture", "stage_order", "host", "output", "normalisation"):
            d.pop(key)

    folder = _toy_dir(tmp_path, v1)
    for load in (load_manifest, OnnxRunner):
        with pytest.raises(ManifestMismatchError, match="vla_edge.export.v1") as err:
            load(folder)
        assert "re-export it with `vla-edge export" in str(err.value)
        assert f"--out {folder}" in str(err.value)


def test_a_tokenizer_that_is_not_the_exported_one_is_refused(toy_onnx, tmp_path) -> None:
    folder = tmp_path / "copy"
    shutil.copytree(toy_onnx[0], folder)
    tok = json.loads((folder / TOKENIZER_NAME).read_text())
    tok["added_tokens"] = tok["added_tokens"][:-1]
    (folder / TOKENIZER_NAME).write_text(json.dumps(tok))
    with pytest.raises(ManifestMismatchError, match=r"host\.token_ids\.tokenizer\.sha256"):
        OnnxRunner(folder)


# ---------------------------------------------------------------- host preprocessing
def test_quantile_codec_is_openpis_formula_and_round_trips() -> None:
    codec = codec_from_section(
        toy_contract()["normalisation"], state_dim=len(JOINTS), action_dim=len(JOINTS)
    )
    state = np.array([0.1, -0.2, 0.02])
    want = (state - np.array(STATS["state"]["q01"])) / (
        np.array(STATS["state"]["q99"]) - np.array(STATS["state"]["q01"]) + EPS
    ) * 2 - 1
    np.testing.assert_allclose(codec.normalize_state(state), want, rtol=1e-6)
    chunk = state + np.random.default_rng(0).uniform(-0.05, 0.05, (H, len(JOINTS)))
    back = codec.decode_actions(codec.encode_actions(chunk, state), state)
    np.testing.assert_allclose(back, chunk, atol=1e-7)


def test_bundled_mean_std_codec_is_bit_identical_to_the_policy_codec() -> None:
    rng = np.random.default_rng(0)
    stats = NormStats(
        state_mean=rng.normal(size=7),
        state_std=rng.uniform(0.1, 1, 7),
        action_mean=rng.normal(size=7) * 0.01,
        action_std=rng.uniform(0.01, 0.1, 7),
        action_low=np.full(7, -1.0),
        action_high=np.full(7, 1.0),
    )
    delta = [True] * 6 + [False]
    policy_codec = ActionCodec(stats, delta)
    host_codec = codec_from_section(
        mean_std_section(stats.to_dict(), delta), state_dim=7, action_dim=7
    )
    state = rng.normal(size=7)
    chunk = rng.normal(size=(10, 7))
    np.testing.assert_array_equal(
        host_codec.normalize_state(state), policy_codec.normalize_state(state)
    )
    np.testing.assert_array_equal(
        host_codec.encode_actions(chunk, state), policy_codec.encode_actions(chunk, state)
    )
    norm = rng.normal(size=(10, 7)).astype(np.float32)
    np.testing.assert_array_equal(
        host_codec.decode_actions(norm, state), policy_codec.decode_actions(norm, state)
    )


def _section(state_dim: int, action_dim: int, delta: list[bool] | None = None) -> dict:
    rng = np.random.default_rng(1)
    return {
        "kind": "mean_std",
        "epsilon": 1e-6,
        "state": {"mean": rng.normal(size=state_dim).tolist(), "std": [0.5] * state_dim},
        "actions": {"mean": rng.normal(size=action_dim).tolist(), "std": [0.2] * action_dim},
        "delta_actions": delta if delta is not None else [False] * action_dim,
    }


def test_codec_normalises_an_8d_state_and_decodes_7d_actions_relative_to_it() -> None:
    delta = [True, True, True, False, False, False, False]
    codec = codec_from_section(_section(8, 7, delta), state_dim=8, action_dim=None)
    assert (codec.state_dim, codec.action_dim) == (8, 7)
    state = np.linspace(-0.4, 0.4, 8)
    want_state = (state - np.array(codec.state["mean"])) / (0.5 + 1e-6)
    np.testing.assert_allclose(codec.normalize_state(state), want_state, rtol=1e-6)
    norm = np.random.default_rng(2).normal(size=(10, 7))
    decoded = codec.decode_actions(norm, state)
    absolute = norm * (0.2 + 1e-6) + np.array(codec.actions["mean"])
    np.testing.assert_allclose(decoded[:, 3:], absolute[:, 3:])
    np.testing.assert_allclose(decoded[:, :3], absolute[:, :3] + state[:3])  # openpi's deltas
    np.testing.assert_allclose(codec.encode_actions(decoded, state), norm, atol=1e-5)


@pytest.mark.parametrize(
    ("sec", "widths", "words"),
    [
        (_section(8, 7), (7, 7), r"normalisation\.state\.mean has shape \(8,\), expected \(7,\)"),
        (_section(8, 7), (8, 8), r"normalisation\.actions\.mean has shape \(7,\), expected \(8,\)"),
        (
            _section(3, 7, [False] * 6 + [True]),
            (None, None),
            r"delta_actions: dimensions \[6\] are relative to the state, which has 3",
        ),
        (_section(8, 7, [False] * 8), (None, None), "expected 7 booleans"),
    ],
    ids=["state-width", "action-width", "delta-beyond-state", "delta-length"],
)
def test_codec_widths_that_disagree_are_named(sec, widths, words) -> None:
    with pytest.raises(ManifestMismatchError, match=words):
        codec_from_section(sec, state_dim=widths[0], action_dim=widths[1])


def test_image_slots_without_a_camera_are_black_and_masked_in_the_declared_range() -> None:
    image = np.full((16, 16, 3), 200, dtype=np.uint8)
    images, mask = images_input({"cam": image}, ["cam", None], 16, 16, (-1.0, 1.0))
    assert images.shape == (2, 3, 16, 16) and images.dtype == np.float32
    assert mask.tolist() == [1.0, 0.0]
    np.testing.assert_allclose(images[0], 200 / 255 * 2 - 1, rtol=1e-6)
    assert np.all(images[1] == -1.0)
    unit, _ = images_input({"cam": image}, ["cam"], 16, 16, (0.0, 1.0))
    np.testing.assert_array_equal(unit, images_to_nchw({"cam": image}, ("cam",)))


def test_the_runner_declares_how_images_are_resized(toy_onnx) -> None:
    assert OnnxRunner(toy_onnx[0], threads=1).image_resize == "pad"
