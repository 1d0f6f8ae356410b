"""π0 / π0.5 run on any device and weight dtype: no host tensor inside a forward, float32 out.

On ``meta`` every operation of a whole chunk (:func:`run_stages`, with and without an
executed prefix, and :meth:`Pi0Model.sample_actions`) is checked to read and make meta
tensors only (:func:`device_clean.no_host_tensors`): what a CUDA device and a CUDA-graph
capture need. With bfloat16 weights (:func:`place_module`) the chunk takes the same
float32 inputs and stays close to float32's. The flow-time embedding is openpi's float64
one, held per step in a float32 table. Where a CUDA GPU is present, the stages are also
captured as CUDA graphs and replayed (tiny sizes, seconds).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from device_clean import HOST, host_inputs, meta_inputs, no_host_tensors, relative_rms

from vla_edge.archs.pi0 import Pi0Config, Pi0Model, build_stages, run_stages
from vla_edge.archs.pi0.layers import euler_times, sinusoidal_time_embedding
from vla_edge.export.manifest import stage_repeat
from vla_edge.runners.torch_device import DeviceStage, place_module

# real architectures built and run at tiny sizes: in `make test`, not the fast tier
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_torch_thread")]

BF16_RMS_OVER_RANGE = 0.01
"""bfloat16 weights against float32 weights: each action dim's RMS error over the chunk over
that dim's range. Measured on the tiny models (weights ~ N(0, 0.02²)): 0.025 % (π0) and
0.021 % (π0.5); the bound leaves a wide margin for other seeds."""


@pytest.fixture(params=[False, True], ids=["pi0", "pi05"])
def pi05(request) -> bool:
    return request.param


def randomised(pi05: bool, seed: int = 0) -> Pi0Model:
    """A tiny model, every parameter ~ N(0, 0.02²) (unit norms would hide bugs)."""
    torch.manual_seed(seed)
    model = Pi0Model(Pi0Config.tiny(pi05=pi05)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.02)
    return model


# -- no host tensor: the whole chunk on meta ----------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_whole_chunk_on_meta_makes_no_host_tensor_in_any_weight_dtype(pi05, dtype) -> None:
    config = Pi0Config.tiny(pi05=pi05)
    with torch.device("meta"):
        model = Pi0Model(config)
    stages = build_stages(place_module(model, torch.device("meta"), dtype))
    x = meta_inputs(stages)
    chunk = x["noise"]
    with no_host_tensors() as checked:
        split = run_stages(stages, *(x[name] for name in HOST))
        prefixed = run_stages(
            stages,
            *(x[name] for name in HOST),
            prefix_actions=torch.empty_like(chunk),
            prefix_mask=torch.empty(chunk.shape[:2], device="meta"),
        )
        reference = model.sample_actions(*(x[name] for name in HOST))
    assert checked.ops > 100  # the check saw the forwards
    for actions in (split, prefixed, reference):
        assert actions.device.type == "meta" and actions.dtype == torch.float32
        assert tuple(actions.shape) == (1, config.action_horizon, config.action_dim)


def test_the_check_catches_a_host_scalar() -> None:
    from device_clean import HostTensorError

    with pytest.raises(HostTensorError, match="cpu tensor"), no_host_tensors():
        torch.ones(2, device="meta") * torch.tensor(0.5)


# -- the flow-time tables -------------------------------------------------------------------------


def test_each_step_picks_openpis_float64_time_embedding_from_its_table(pi05) -> None:
    stages = build_stages(randomised(pi05))
    head = stages.action_head
    k = stages.model.config.flow_steps
    assert head.step_times.flatten().tolist() == euler_times(k)
    # float64 arithmetic, float32 table: the values openpi's float64 embedding rounds to
    width = stages.model.config.expert.width
    times = torch.tensor(euler_times(k), dtype=torch.float64)
    fraction = torch.linspace(0.0, 1.0, width // 2, dtype=torch.float64)
    period = 4e-3 * (4.0 / 4e-3) ** fraction
    angle = times[:, None] * (2 * np.pi / period)[None]
    want = torch.cat([angle.sin(), angle.cos()], dim=1).to(torch.float32)
    assert torch.equal(head.time_embeddings, want)
    assert torch.equal(head.time_embeddings, sinusoidal_time_embedding(times.float(), width))
    # float32 arithmetic would differ where the angle is large (t = 1, the shortest period)
    angle32 = times.float()[:, None] * (2 * np.pi / period.float())[None]
    ours32 = torch.cat([angle32.sin(), angle32.cos()], dim=1)
    assert (ours32 - want).abs().max().item() > 1e-5


def test_flow_tables_are_float32_buffers_that_survive_bf16_placement(pi05) -> None:
    head = build_stages(randomised(pi05)).action_head
    before = {name: b.clone() for name, b in head.named_buffers()}
    assert set(before) == {"time_embeddings", "step_times"}
    place_module(head, torch.device("cpu"), torch.bfloat16)
    assert head.action_in_proj.weight.dtype == torch.bfloat16
    for name, buffer in head.named_buffers():
        assert buffer.dtype == torch.float32 and torch.equal(buffer, before[name]), name


# -- bfloat16 weights on the CPU ------------------------------------------------------------------


def test_bf16_weights_take_float32_inputs_and_stay_close_to_float32(pi05) -> None:
    model = randomised(pi05)
    stages = build_stages(model)
    half = place_module(copy.deepcopy(model), torch.device("cpu"), torch.bfloat16)
    x = host_inputs(stages)
    full = run_stages(stages, *(x[name] for name in HOST))
    low = run_stages(build_stages(half), *(x[name] for name in HOST))
    assert low.dtype == torch.float32 and torch.isfinite(low).all()
    assert not torch.equal(low, full)  # the weights really were bfloat16
    assert relative_rms(low, full) <= BF16_RMS_OVER_RANGE
    assert (half.sample_actions(*(x[name] for name in HOST)) - low).abs().max() <= 1e-5


# -- the stages as a runner runs them: DeviceStage ------------------------------------------------


def device_stages(stages, device: torch.device, graphs: bool) -> dict[str, DeviceStage]:
    """Each stage behind :class:`DeviceStage`, as the torch runner holds them."""
    inputs, outputs = stages.inputs(), stages.outputs()

    class Declared:
        def __init__(self, name: str) -> None:
            self.inputs, self.outputs = inputs[name], outputs[name]

    return {
        name: DeviceStage(module, Declared(name), device, cuda_graph=graphs)
        for name, module in stages.modules().items()
    }


def device_chunk(stages, run: dict[str, DeviceStage], x: dict[str, torch.Tensor]):
    """The three stages through ``run``, the head's K calls as the manifest declares them."""
    from vla_edge.runners.stage_loop import run_stage

    inputs, outputs = stages.inputs(), stages.outputs()
    repeat = stage_repeat(
        stages.repeats()["action_head"],
        tuple(inputs["action_head"]),
        tuple(outputs["action_head"]),
    )
    noise = x["noise"].numpy()
    values = {f"host:{name}": value.numpy() for name, value in x.items()}
    values["host:prefix_actions"] = np.zeros_like(noise)
    values["host:prefix_mask"] = np.zeros(noise.shape[:2], np.float32)
    for name in ("vision_encoder", "fusion", "action_head"):
        loop = repeat if name == "action_head" else None
        results = run_stage(run[name].run, inputs[name], outputs[name], loop, values)
        for tensor, value in zip(outputs[name], results, strict=True):
            values[f"stage:{name}.{tensor.name}"] = value
    return values["stage:action_head.actions"]


def test_device_stages_on_the_cpu_equal_run_stages(pi05) -> None:
    model = randomised(pi05)
    stages = build_stages(model)
    x = host_inputs(stages)
    run = device_stages(stages, torch.device("cpu"), graphs=True)  # (no graph on the CPU)
    got = device_chunk(stages, run, x)
    want = run_stages(stages, *(x[name] for name in HOST))
    assert (got - want).abs().max().item() <= 1e-6


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_stages_captured_as_cuda_graphs_equal_the_cpu_chunk(pi05, dtype) -> None:
    model = randomised(pi05)
    stages = build_stages(model)
    x = host_inputs(stages)
    want = run_stages(stages, *(x[name] for name in HOST))
    device = torch.device("cuda")
    placed = build_stages(place_module(copy.deepcopy(model), device, dtype))
    for module in placed.modules().values():
        module.to(device)
    run = device_stages(placed, device, graphs=True)
    first = device_chunk(placed, run, x).clone()  # each stage captured, then replayed
    again = device_chunk(placed, run, x)
    assert all(stage._graph is not None for stage in run.values())
    bound = BF16_RMS_OVER_RANGE / 10 if dtype == torch.float32 else BF16_RMS_OVER_RANGE
    assert relative_rms(first, want) <= bound
    assert relative_rms(again, want) <= bound
