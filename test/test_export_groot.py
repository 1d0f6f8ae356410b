"""GR00T N1.7's stages exported through the generic path (``stage_programs_of``: the
architecture's :data:`~vla_edge.archs.groot.programs.EXPORT` hooks) at tiny size: each ONNX
and ExecuTorch program equals its torch stage, and the three programs chained as a runner
chains them (the action head called K = 4 times, ``x_t`` carried) give
``GrootModel.sample_actions``'s actions on the same inputs and noise; ``export_model``
writes a manifest with GR00T's registered prompt format that ``load_manifest`` validates,
and the ONNX runner's chunk equals ``sample_actions`` decoded with the same statistics."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from vla_edge.archs.groot import GrootConfig, GrootModel
from vla_edge.archs.groot.programs import EXPORT
from vla_edge.export.architecture import architecture_of, hooks, stage_programs_of
from vla_edge.export.stages import StageProgram

pytestmark = pytest.mark.slow

ATOL = {"onnx": 1e-4, "executorch": 2e-3}
"""Largest |program - torch stage| per output (fp32 programs, outputs of order 1). XNNPACK's
kernels (vectorised exp / sigmoid approximations, other summation orders) differ from
torch's by up to 7e-4 through the tiny model's 4 language-model layers of N(0, 0.2)
weights; ONNX Runtime by under 1e-4."""


@pytest.fixture(scope="module")
def model() -> GrootModel:
    torch.manual_seed(0)
    model = GrootModel(GrootConfig.tiny()).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2)
    return model


def run_program(backend: str, path: Path, inputs: tuple[torch.Tensor, ...]) -> list[np.ndarray]:
    """Every output of a written program, run by its backend's runtime on the CPU."""
    if backend == "onnx":
        import onnxruntime as ort

        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        feeds = {m.name: t.numpy() for m, t in zip(session.get_inputs(), inputs, strict=True)}
        return [np.asarray(o) for o in session.run(None, feeds)]
    from executorch.extension.pybindings.portable_lib import _load_for_executorch

    module = _load_for_executorch(str(path))
    return [np.asarray(o) for o in module.forward([t.contiguous() for t in inputs])]


def export_program(backend: str, stage: StageProgram, out: Path) -> Path:
    if backend == "onnx":
        from vla_edge.export.onnx_export import export_stage_onnx

        path = out / f"{stage.name}.onnx"
        export_stage_onnx(stage, path)
    else:
        from vla_edge.export.executorch_export import export_stage_executorch

        path = out / f"{stage.name}.pte"
        info = export_stage_executorch(stage, path, "fp32")
        assert info["delegation"]["delegated_nodes"] > 0, info["delegation"]
    return path


@pytest.fixture(scope="module", params=["onnx", "executorch"])
def programs(request, model, tmp_path_factory) -> tuple[str, dict[str, Path], list[StageProgram]]:
    backend = request.param
    if backend == "executorch":
        pytest.importorskip("executorch")
    out = tmp_path_factory.mktemp(f"groot_{backend}")
    stages = stage_programs_of(model, backend)
    return backend, {s.name: export_program(backend, s, out) for s in stages}, stages


def test_the_generic_exporter_finds_groot_by_its_model_class(model) -> None:
    assert architecture_of(model).name == "groot"
    assert hooks("groot") is EXPORT
    assert EXPORT.stage_names == ("vision_encoder", "fusion", "action_head")


def test_each_program_equals_its_torch_stage(programs) -> None:
    backend, paths, stages = programs
    for stage in stages:
        with torch.no_grad():
            want = stage.module(*stage.example_inputs)
        want = [want] if isinstance(want, torch.Tensor) else list(want)
        got = run_program(backend, paths[stage.name], stage.example_inputs)
        assert len(got) == len(want) == len(stage.outputs)
        for spec, g, w in zip(stage.outputs, got, want, strict=True):
            assert g.shape == tuple(spec.shape), (stage.name, spec.name)
            np.testing.assert_allclose(g, w.numpy(), atol=ATOL[backend], rtol=0, err_msg=spec.name)


def test_the_chained_programs_with_k_calls_equal_sample_actions(programs, model) -> None:
    backend, paths, stages = programs
    c = model.config
    gen = torch.Generator().manual_seed(7)
    images = torch.rand(c.n_slots, 3, c.vision.image_size, c.vision.image_size, generator=gen)
    images = images * 2 - 1
    image_mask = torch.ones(c.n_slots)
    image_mask[-1] = 0.0  # a masked camera
    token_ids = torch.randint(0, 400, (1, c.max_token_len), generator=gen)
    token_mask = (torch.arange(c.max_token_len) < 5)[None].float()
    state = torch.randn(1, c.max_state_dim, generator=gen)
    noise = torch.randn(1, c.action_horizon, c.max_action_dim, generator=gen)
    with torch.no_grad():
        want = model.sample_actions(images, image_mask, token_ids, token_mask, state, noise)

    image_tokens, deepstack = run_program(backend, paths["vision_encoder"], (images,))
    fusion_in = (image_tokens, deepstack, image_mask, token_ids, token_mask, state)
    fused = run_program(
        backend, paths["fusion"], tuple(torch.as_tensor(np.asarray(x)) for x in fusion_in)
    )
    prefix = torch.zeros_like(noise), torch.zeros(1, c.action_horizon)
    repeat = stages[-1].repeat
    count = repeat["count"] if isinstance(repeat, dict) else repeat.count
    assert count == c.flow_steps == 4
    x_t = noise
    for k in range(count):
        step = torch.eye(count)[k : k + 1]
        fixed = (*[torch.as_tensor(f) for f in fused], noise, *prefix)
        (actions,) = run_program(backend, paths["action_head"], (*fixed, x_t, step))
        x_t = torch.as_tensor(actions)
    np.testing.assert_allclose(x_t.numpy(), want.numpy(), atol=ATOL[backend], rtol=0)


JOINTS = [f"joint{i}" for i in range(7)]
CAMERA_MAP = {"image": "agentview", "wrist_image": "wrist"}


@pytest.fixture(scope="module")
def onnx_export(model, tmp_path_factory) -> tuple[Path, Path]:
    """``(export folder, tokenizer)``: ``export_model``'s ONNX export of the tiny model with
    upstream statistics and a Qwen-style tokenizer directory."""
    import json

    from test_arch_groot_layout import TAG, write_upstream_n17
    from test_import_groot import write_qwen_tokenizer

    from vla_edge.archs.groot.checkpoint import n17_normalisation
    from vla_edge.export.architecture import export_model

    root = tmp_path_factory.mktemp("groot_export")
    ckpt = write_upstream_n17(root / "ckpt", model, lm_head=False)
    kwargs = json.loads((ckpt / "processor_config.json").read_text())["processor_kwargs"]
    tokenizer = write_qwen_tokenizer(root / "tokenizer", model.config)
    export_model(
        model,
        root / "out",
        "onnx",
        tokenizer=tokenizer,
        joint_names=JOINTS,
        camera_map=CAMERA_MAP,
        dt_action_s=0.05,
        norm_stats=n17_normalisation(ckpt, TAG, kwargs),
        log=lambda line: None,
    )
    return root / "out", tokenizer


def test_export_model_writes_a_manifest_with_groots_registered_prompt(onnx_export) -> None:
    from vla_edge.export.manifest import load_manifest

    folder, _ = onnx_export
    manifest = load_manifest(folder)
    assert manifest.architecture == "groot"
    assert manifest.prompt == "groot" and not manifest.tokens_per_observation
    assert manifest.tokenizer["kind"] == "huggingface"
    assert manifest.tokenizer_path is not None and manifest.tokenizer_path.is_dir()
    assert list(manifest.stage_order) == ["vision_encoder", "fusion", "action_head"]


def test_the_onnx_runner_chunk_equals_sample_actions(onnx_export, model) -> None:
    """The runner's host side (images through upstream's centre-crop fit, in [-1, 1],
    GR00T's prompt, the normalised state padded to ``max_state_dim``) and its chained
    programs give ``sample_actions``'s actions on the same inputs and noise, decoded with
    the export's statistics."""
    from vla_edge.archs.groot.prompt import GrootPromptTokenizer
    from vla_edge.core.types import Observation
    from vla_edge.runners.image_resize import fit_center_crop
    from vla_edge.runners.onnx_runner import OnnxRunner
    from vla_edge.runners.preprocess import decode_chunk

    folder, tokenizer = onnx_export
    c = model.config
    size = c.vision.image_size
    runner = OnnxRunner(folder, threads=1)
    rng = np.random.default_rng(3)
    images = {
        cam: rng.integers(0, 256, (size, size, 3), dtype=np.uint8) for cam in ("agentview", "wrist")
    }
    obs = Observation(
        stamp_s=1.5,
        images=images,
        state=rng.uniform(-0.5, 0.5, len(JOINTS)),
        instruction="Pick up the black bowl.",
    )
    noise = rng.standard_normal((c.action_horizon, c.max_action_dim)).astype(np.float32)
    chunk = runner.infer(obs, noise=noise)

    fit = runner.manifest.data["host"]["images"]
    assert (fit["resize"], fit["resample"]) == ("center_crop", "cv2_area")
    assert (fit["crop_fraction"], fit["letterbox"]) == (c.image_crop_fraction, True)
    slots = [
        fit_center_crop(images[CAMERA_MAP[s]], size, size, c.image_crop_fraction, True)
        for s in c.image_slots
    ]
    pixels = np.stack([im.transpose(2, 0, 1) for im in slots]).astype(np.float32) / 255 * 2 - 1
    ids, mask = GrootPromptTokenizer(tokenizer, c.max_token_len).encode(obs.instruction)
    state = np.zeros((1, c.max_state_dim), dtype=np.float32)
    state[0, : len(JOINTS)] = runner.codec.normalize_state(np.asarray(obs.state))
    with torch.no_grad():
        want = model.sample_actions(
            torch.from_numpy(pixels),
            torch.ones(c.n_slots),
            torch.from_numpy(ids),
            torch.from_numpy(mask).float(),
            torch.from_numpy(state),
            torch.from_numpy(noise[None]),
        ).numpy()[0]
    decoded = decode_chunk(runner.codec, want[:, : len(JOINTS)], obs.state, None, 0)
    assert chunk.positions.shape == (c.action_horizon, len(JOINTS))
    assert np.ptp(decoded) > 0.1  # actions that differ across the chunk and the joints
    np.testing.assert_allclose(chunk.positions, decoded, atol=1e-3, rtol=1e-4)
    tokens = runner._tokens(obs.instruction)
    np.testing.assert_array_equal(tokens["host:token_ids"], ids)
    np.testing.assert_array_equal(tokens["host:token_mask"].astype(bool), mask)


# ---------------------------------------------------------------- vla-edge export --quant 8da8w
QUANT_WEIGHT_STD = 0.05
"""Every parameter ~ N(0, 0.05²), as π0's export tests draw theirs: the tiny model's layers
then perturb the residual stream as a trained model's do (at 0.2 its flow is chaotic and
any int8 rounding grows through the four Euler steps)."""
QUANT_BOUND = 5e-2
"""π0's bound for a quantised export: 5 % of each action dimension's range."""


def worst_fraction_of_range(got: np.ndarray, want: np.ndarray) -> float:
    """Largest ``|got - want|`` over each action dimension's range in ``want`` (rows × dims)."""
    got2, want2 = got.reshape(-1, got.shape[-1]), want.reshape(-1, want.shape[-1])
    span = np.ptp(want2, axis=0)
    assert np.all(span > 1e-3), span
    return float(np.max(np.abs(got2 - want2) / span))


def random_host(c: GrootConfig, gen: torch.Generator) -> dict[str, torch.Tensor]:
    """Host tensors of one observation: random images and state, six prompt tokens."""
    size = c.vision.image_size
    return {
        "images": torch.rand(c.n_slots, 3, size, size, generator=gen) * 2 - 1,
        "image_mask": torch.ones(c.n_slots),
        "token_ids": torch.randint(0, 300, (1, c.max_token_len), generator=gen),
        "token_mask": (torch.arange(c.max_token_len) < 6)[None].float(),
        "state": torch.randn(1, c.max_state_dim, generator=gen) * 0.5,
    }


@pytest.fixture(scope="module")
def imported_policy(tmp_path_factory) -> Path:
    """A tiny GR00T with Qwen3-VL's vocabulary and ids, written in upstream's N1.7 layout and
    imported onto the package's robot (joint positions, two cameras) with the statistics of
    its ``new_embodiment`` tag (joint-sized; the other tag's are LIBERO end-effector ones)."""
    from test_arch_groot_layout import write_upstream_n17
    from test_import_groot import CAMERAS, qwen_vocab_tiny, write_qwen_tokenizer

    from vla_edge.archs.common import ImportOptions
    from vla_edge.archs.importer import default_robot, import_checkpoint

    torch.manual_seed(1)
    source = GrootModel(qwen_vocab_tiny()).eval()
    with torch.no_grad():
        for p in source.parameters():
            p.normal_(0.0, QUANT_WEIGHT_STD)
    root = tmp_path_factory.mktemp("groot_policy")
    ckpt = write_upstream_n17(root / "ckpt", source, lm_head=False)
    tokenizer = write_qwen_tokenizer(root / "tokenizer")
    import_checkpoint(
        ckpt,
        root / "policy",
        tokenizer,
        0.05,
        default_robot(),
        options=ImportOptions(vision_heads=4, embodiment="new_embodiment"),
        cameras=CAMERAS,
    )
    return root / "policy"


@pytest.mark.timeout(1800)  # three int8 lowerings: minutes each on a busy 2-core machine
def test_vla_edge_export_policy_8da8w_programs_are_delegated_and_close_to_eager(
    imported_policy, tmp_path
) -> None:
    """``vla-edge export --backend executorch --quant 8da8w`` of an imported GR00T: every
    ``Linear`` int8, each stage one XNNPACK call; the parity gate passes at π0's 5 %, and
    the chained programs' actions are within 5 % of each dimension's range of the eager
    stages' (fed the same host tensors and noise)."""
    from stage_chain import chained_actions, open_stage_programs

    from vla_edge.archs.groot import build_stages, run_stages
    from vla_edge.cli import main
    from vla_edge.export.architecture import load_policy_model
    from vla_edge.export.manifest import load_manifest

    pytest.importorskip("executorch")
    out = tmp_path / "groot_8da8w"
    argv = ["export", "--policy", str(imported_policy), "--backend", "executorch"]
    argv += ["--quant", "8da8w", "--out", str(out)]
    assert main([*argv, "--max-parity-pct", "5", "--parity-samples", "2"]) == 0
    manifest = load_manifest(out)
    assert manifest.architecture == "groot" and manifest.data["quant"] == "8da8w"
    stages = manifest.data["stages"]
    for name, entry in stages.items():
        assert entry["quant"] == "8da8w" and entry["quantized_linears"] > 0, name
        assert entry["fp32_linears"] == 0, (name, entry["fp32_linear_names"])
        assert entry["delegation"]["delegated_subgraphs"] >= 1, (name, entry["delegation"])
    assert stages["fusion"]["int8_embeddings"] == 1  # the token table
    assert manifest.data["parity"]["rms_pct_of_range_max"] <= 5.0

    _, model = load_policy_model(imported_policy)
    reference = build_stages(model)
    manifest, programs = open_stage_programs(out)
    c = model.config
    gen = torch.Generator().manual_seed(11)
    got, want = [], []
    for _ in range(3):
        host = random_host(c, gen)
        noise = torch.randn(c.action_horizon, c.max_action_dim, generator=gen)
        got.append(chained_actions(manifest, programs, host, noise.numpy()))
        want.append(run_stages(reference, **host, noise=noise[None]).numpy()[0])
    assert worst_fraction_of_range(np.stack(got), np.stack(want)) <= QUANT_BOUND


def test_a_low_memory_export_reads_each_stage_alone_and_makes_the_same_programs(
    imported_policy, tmp_path
) -> None:
    """``--low-memory``: one process per stage, each reading only its stage's tensors (a
    full-size GR00T's whole-model export does not fit in 24 GiB); the stage a process loads
    equals the whole load's, and the programs chain to the whole export's actions."""
    from stage_chain import chained_actions, open_stage_programs

    from vla_edge.archs.groot import build_stages
    from vla_edge.archs.groot.stages import STAGE_NAMES
    from vla_edge.cli import main
    from vla_edge.export.architecture import load_policy_model
    from vla_edge.export.manifest import load_manifest

    _, whole = load_policy_model(imported_policy)
    alone = {}
    for stage in STAGE_NAMES:
        _, model = load_policy_model(imported_policy, stage=stage)
        alone[stage] = build_stages(model).modules()[stage].state_dict()
        want = build_stages(whole).modules()[stage].state_dict()
        assert alone[stage].keys() == want.keys(), stage
        assert all(torch.equal(alone[stage][k], want[k]) for k in want), stage
    # every tensor of the file belongs to exactly one stage
    keys = [k for tensors in alone.values() for k in tensors]
    assert len(keys) == len(set(keys)) == len(whole.state_dict())

    outs = {}
    for name, extra in (("whole", []), ("apart", ["--low-memory"])):
        outs[name] = tmp_path / name
        argv = ["export", "--policy", str(imported_policy), "--backend", "onnx"]
        assert main([*argv, "--out", str(outs[name]), *extra]) == 0, name
    whole_m, apart_m = load_manifest(outs["whole"]).data, load_manifest(outs["apart"]).data
    for stage in STAGE_NAMES:
        w, a = whole_m["stages"][stage], apart_m["stages"][stage]
        assert a["check_max_abs"] is None and w["check_max_abs"] is not None
        assert a["inputs"] == w["inputs"] and a["outputs"] == w["outputs"], stage
        assert a.get("repeat") == w.get("repeat"), stage
    assert not list(outs["apart"].glob("*.entry.json"))
    c = whole.config
    gen = torch.Generator().manual_seed(5)
    host = random_host(c, gen)
    noise = torch.randn(c.action_horizon, c.max_action_dim, generator=gen).numpy()
    chunks = {
        name: chained_actions(*open_stage_programs(out), host, noise) for name, out in outs.items()
    }
    np.testing.assert_allclose(chunks["apart"], chunks["whole"], atol=1e-6)
