"""SmolVLA runs on any device and weight dtype: no host tensor inside a forward, float32 out.

On ``meta`` every operation of a whole chunk (:func:`run_stages` and
:meth:`SmolVLAModel.sample_actions`) is checked to read and make meta tensors only
(:func:`device_clean.no_host_tensors`), which is what a CUDA device and a CUDA-graph capture
need; with bfloat16 weights (:func:`place_module`) the chunk takes the same float32 inputs
and stays close to float32's. Where a CUDA GPU is present, the stages are also captured as
CUDA graphs and replayed (tiny sizes, seconds).
"""

from __future__ import annotations

import copy
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from device_clean import HOST, host_inputs, meta_inputs, no_host_tensors, relative_rms

from vla_edge.archs.smolvla import SmolVLAConfig, SmolVLAModel, build_stages, run_stages
from vla_edge.runners.torch_device import DeviceStage, place_module

# real architectures built and run at tiny sizes: in `make test`, not the fast tier
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

BF16_RMS_OVER_RANGE = 0.01
"""bfloat16 weights against float32 weights: each action dim's RMS error over the chunk, as a
fraction of that dim's range over the chunk. Measured on the tiny model (weights ~ N(0, 0.2²),
seeds 0-4): at most 0.0014, mean 0.0003 (max abs error 0.004 on ranges of 1.6 to 2.1)."""


def randomised(config: SmolVLAConfig, seed: int = 0) -> SmolVLAModel:
    """A tiny model with every parameter random (unit norms would hide bugs)."""
    torch.manual_seed(seed)
    model = SmolVLAModel(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2)
    return model


def chunk_shape(config: SmolVLAConfig) -> tuple[int, int, int]:
    return (1, config.chunk_size, config.action_dim)


# -- no host tensor: the whole chunk on meta ----------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_whole_chunk_on_meta_makes_no_host_tensor_in_any_weight_dtype(dtype):
    config = SmolVLAConfig.tiny()
    with torch.device("meta"):
        model = SmolVLAModel(config)
    place_module(model, torch.device("meta"), dtype)
    stages = build_stages(model)
    x = meta_inputs(stages)
    with no_host_tensors() as checked:
        split = run_stages(stages, *(x[name] for name in HOST))
        reference = model.sample_actions(*(x[name] for name in HOST))
    assert checked.ops > 100  # the check saw the forwards
    for actions in (split, reference):
        assert actions.device.type == "meta"
        assert tuple(actions.shape) == chunk_shape(config)
        assert actions.dtype == torch.float32


def test_each_stage_on_meta_returns_its_declared_float32_outputs_with_bf16_weights():
    with torch.device("meta"):
        model = SmolVLAModel(SmolVLAConfig.tiny())
    stages = build_stages(place_module(model, torch.device("meta"), torch.bfloat16))
    specs = stages.inputs()
    with no_host_tensors():
        for name, module in stages.modules().items():
            args = [
                torch.empty(s.shape, dtype=getattr(torch, s.dtype), device="meta")
                for s in specs[name]
            ]
            out = module(*args)
            out = out if isinstance(out, tuple) else (out,)
            got = [(tuple(t.shape), t.dtype) for t in out]
            want = [(s.shape, getattr(torch, s.dtype)) for s in stages.outputs()[name]]
            assert got == want, name


# -- bfloat16 weights on the CPU --------------------------------------------------------------


@pytest.fixture(scope="module")
def fp32_and_bf16():
    model = randomised(SmolVLAConfig.tiny())
    half = place_module(copy.deepcopy(model), torch.device("cpu"), torch.bfloat16)
    return model, build_stages(model), half, build_stages(half)


def test_bf16_weights_take_float32_inputs_and_stay_close_to_float32(fp32_and_bf16):
    model, stages, half, half_stages = fp32_and_bf16
    assert {p.dtype for p in half.parameters()} == {torch.bfloat16}
    x = host_inputs(stages)
    assert {x[name].dtype for name in HOST} == {torch.float32, torch.int64}
    full = run_stages(stages, *(x[name] for name in HOST))
    low = run_stages(half_stages, *(x[name] for name in HOST))
    assert low.dtype == torch.float32 and tuple(low.shape) == chunk_shape(model.config)
    assert torch.isfinite(low).all()
    assert not torch.equal(low, full)  # the weights really were bfloat16
    rms = (low - full).square().mean(dim=1).sqrt()
    span = full.amax(dim=1) - full.amin(dim=1)
    assert (rms / span).max().item() <= BF16_RMS_OVER_RANGE


def test_bf16_stage_path_equals_bf16_reference_sampling(fp32_and_bf16):
    _, stages, half, half_stages = fp32_and_bf16
    x = host_inputs(stages)
    split = run_stages(half_stages, *(x[name] for name in HOST))
    reference = half.sample_actions(*(x[name] for name in HOST))
    assert reference.dtype == torch.float32
    assert (split - reference).abs().max().item() <= 1e-5


def test_fp32_stage_path_still_equals_reference_sampling(fp32_and_bf16):
    model, stages, _, _ = fp32_and_bf16
    x = host_inputs(stages)
    split = run_stages(stages, *(x[name] for name in HOST))
    reference = model.sample_actions(*(x[name] for name in HOST))
    assert (split - reference).abs().max().item() <= 1e-5


# -- the float32 tables -------------------------------------------------------------------------


def test_flow_tables_are_float32_buffers_that_survive_bf16_placement():
    stages = build_stages(randomised(SmolVLAConfig.tiny()))
    head = stages.action_head
    before = {name: b.clone() for name, b in head.named_buffers()}
    assert set(before) == {"time_embeddings", "step_times"}
    place_module(head, torch.device("cpu"), torch.bfloat16)
    assert head.action_in_proj.weight.dtype == torch.bfloat16
    for name, buffer in head.named_buffers():
        assert buffer.dtype == torch.float32, name
        assert torch.equal(buffer, before[name]), name


def test_flow_tables_follow_the_model_built_on_meta():
    with torch.device("meta"):
        model = SmolVLAModel(SmolVLAConfig.tiny())
    head = build_stages(model).action_head  # built outside the meta context
    assert {b.device.type for b in head.buffers()} == {"meta"}


# -- CUDA: the stages captured as CUDA graphs ---------------------------------------------------

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_stages_captured_as_cuda_graphs_equal_the_cpu_chunk(dtype):
    model = randomised(SmolVLAConfig.tiny())
    stages = build_stages(model)
    x = host_inputs(stages)
    want = run_stages(stages, *(x[name] for name in HOST))
    device = torch.device("cuda")
    placed = build_stages(place_module(copy.deepcopy(model), device, dtype))
    run = {
        name: DeviceStage(
            module, SimpleNamespace(inputs=stages.inputs()[name], outputs=[]), device, True
        )
        for name, module in placed.modules().items()
    }
    host = {name: value.numpy() for name, value in x.items()}
    for _ in range(2):  # the first chunk captures each stage, the second replays
        (tokens,) = run["vision_encoder"].run([host["images"]])
        fused = run["fusion"].run(
            [tokens, host["image_mask"], host["token_ids"], host["token_mask"], host["state"]]
        )
        zeros = np.zeros_like(host["noise"])
        no_prefix = np.zeros(host["noise"].shape[:2], np.float32)
        x_t = host["noise"]
        for row in placed.repeats()["action_head"]["inputs"]["step"]:
            (x_t,) = run["action_head"].run(
                [*fused, host["noise"], zeros, no_prefix, x_t, np.asarray(row, np.float32)]
            )
            x_t = x_t.clone()  # the graph's output buffer is the next call's input
        assert x_t.device.type == "cuda" and x_t.dtype == torch.float32
        # float32 on CUDA: cuDNN may run the patch convolution in TF32
        bound = BF16_RMS_OVER_RANGE / 10 if dtype == torch.float32 else BF16_RMS_OVER_RANGE
        assert relative_rms(x_t, want) <= bound
    assert all(stage._graph is not None for stage in run.values())


@cuda
def test_whole_chunk_captured_as_one_cuda_graph():
    model = randomised(SmolVLAConfig.tiny())
    x = host_inputs(build_stages(model))
    want = model.sample_actions(*(x[name] for name in HOST))
    device = torch.device("cuda")
    half = place_module(copy.deepcopy(model), device, torch.bfloat16)
    stages = build_stages(half)
    static = [x[name].to(device) for name in HOST]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side), torch.no_grad():
        run_stages(stages, *static)
        half.sample_actions(*static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.no_grad():
        split = run_stages(stages, *static)
        reference = half.sample_actions(*static)
    graph.replay()
    torch.cuda.synchronize()
    # the same arithmetic, but sample_actions's time embedding is made on the GPU
    assert relative_rms(split, reference) <= BF16_RMS_OVER_RANGE / 10
    assert relative_rms(split, want) <= BF16_RMS_OVER_RANGE
