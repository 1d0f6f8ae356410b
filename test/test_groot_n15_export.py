"""GR00T N1.5's stages exported through the generic path (``stage_programs_of``: the
architecture's :data:`~vla_edge.archs.groot.n15_programs.EXPORT` hooks, found by the model's
class) at tiny size, to ONNX and to ExecuTorch fp32: each program equals its torch stage on
the chained example inputs, and the three programs chained as a runner chains them (the
action head called K = 4 times through the declared ``repeat``, ``x_t`` carried) give
``GrootN15Model.sample_actions``'s actions on the same inputs and noise."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from vla_edge.archs.groot.n15_config import GrootN15Config
from vla_edge.archs.groot.n15_model import GrootN15Model
from vla_edge.archs.groot.n15_stages import build_stages
from vla_edge.archs.stage_io import declared_calls
from vla_edge.export.architecture import architecture_of, stage_programs_of
from vla_edge.export.stages import StageProgram

pytestmark = pytest.mark.slow

ATOL = {"onnx": 1e-4, "executorch": 2e-3}
"""Largest |program - torch stage| per output (fp32 programs, outputs of order 1): XNNPACK's
kernels sum in other orders and approximate exp / tanh, ONNX Runtime stays under 1e-4."""


@pytest.fixture(scope="module")
def model() -> GrootN15Model:
    torch.manual_seed(0)
    config = GrootN15Config.tiny(
        vision={
            "hidden": 32,
            "depth": 1,
            "num_heads": 4,
            "mlp_dim": 64,
            "patch_size": 8,
            "image_size": 32,
        },
        text={
            "width": 64,
            "depth": 1,
            "mlp_dim": 96,
            "num_heads": 4,
            "num_kv_heads": 2,
            "head_dim": 16,
            "vocab_size": 512,
            "rope_theta": 10000.0,
        },
        vl_self_attention={"depth": 1, "num_heads": 4, "head_dim": 16},
        dit={"depth": 2, "num_heads": 4, "head_dim": 8},
    )
    model = GrootN15Model(config).eval()
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
    out = tmp_path_factory.mktemp(f"groot_n15_{backend}")
    stages = stage_programs_of(model, backend)
    return backend, {s.name: export_program(backend, s, out) for s in stages}, stages


def test_the_generic_exporter_finds_groot_n15_by_its_model_class(model) -> None:
    assert architecture_of(model).name == "groot_n15"


def test_each_program_equals_its_torch_stage(programs, model) -> None:
    backend, paths, stages = programs
    torch_stages = build_stages(model).modules()
    for stage in stages:
        with torch.no_grad():
            want = torch_stages[stage.name](*stage.example_inputs)
        want = [want] if isinstance(want, torch.Tensor) else list(want)
        got = run_program(backend, paths[stage.name], stage.example_inputs)
        assert len(got) == len(want), stage.name
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w.numpy(), rtol=0, atol=ATOL[backend], err_msg=stage.name)


def test_the_programs_chained_as_a_runner_chains_them_give_sample_actions(programs, model):
    backend, paths, _ = programs
    c = model.config
    gen = torch.Generator().manual_seed(7)
    images = torch.rand(c.n_slots, 3, c.vision.image_size, c.vision.image_size, generator=gen)
    images = images * 2 - 1
    image_mask = torch.tensor([1.0, 0.0])
    token_ids = torch.randint(0, 500, (1, c.max_token_len), generator=gen)
    token_mask = torch.zeros(1, c.max_token_len)
    token_mask[0, :5] = 1.0
    state = torch.randn(1, c.max_state_dim, generator=gen)
    noise = torch.randn(1, c.action_horizon, c.max_action_dim, generator=gen)
    (tokens,) = run_program(backend, paths["vision_encoder"], (images,))
    fused = run_program(
        backend,
        paths["fusion"],
        (torch.from_numpy(tokens), image_mask, token_ids, token_mask, state),
    )
    fixed = [torch.from_numpy(f) for f in fused]
    prefix = torch.zeros_like(noise)
    prefix_mask = torch.zeros(1, c.action_horizon)
    x_t = noise
    for step in declared_calls(build_stages(model)):
        (actions,) = run_program(
            backend, paths["action_head"], (*fixed, noise, prefix, prefix_mask, x_t, step)
        )
        x_t = torch.from_numpy(actions)
    want = model.sample_actions(images, image_mask, token_ids, token_mask, state, noise)
    np.testing.assert_allclose(x_t.numpy(), want.numpy(), rtol=0, atol=4 * ATOL[backend])
