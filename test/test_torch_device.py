"""Device and dtype names, weight placement and the device stage seam, checked on the CPU.

A GPU asked for on a machine without one is a named error where the deployment starts
(the runner factory, ``vla-edge serve``, the inference node's config), never a silent CPU
run; on the CPU the torch device path gives what the CPU path gives.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pydantic import ValidationError
from torch import nn

from vla_edge.config.models import InferenceConfig
from vla_edge.core.errors import ConfigError, DeviceUnavailableError
from vla_edge.runners.torch_device import (
    DeviceStage,
    place_module,
    resolve_device,
    resolve_dtype,
    stage_clock,
    to_host,
    weight_bytes,
)

no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")


def test_cpu_resolves_and_a_malformed_name_is_a_config_error() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    for bad in ("gpu", "cuda:", "cuda:x", "CUDA", ""):
        with pytest.raises(ConfigError, match="expected 'cpu', 'cuda' or 'cuda:N'"):
            resolve_device(bad)


@no_gpu
@pytest.mark.parametrize("name", ["cuda", "cuda:0", "cuda:3"])
def test_a_gpu_this_machine_lacks_is_refused_naming_what_to_do(name: str) -> None:
    with pytest.raises(DeviceUnavailableError, match=rf"device = '{name}'.*docs/HIL.md"):
        resolve_device(name)
    assert issubclass(DeviceUnavailableError, ConfigError)


def test_auto_dtype_is_float32_on_the_cpu_and_names_are_checked() -> None:
    cpu = torch.device("cpu")
    assert resolve_dtype("auto", cpu) == torch.float32
    assert resolve_dtype("auto", torch.device("meta")) == torch.float32
    assert resolve_dtype("bfloat16", cpu) == torch.bfloat16
    with pytest.raises(ConfigError, match="dtype = 'half'"):
        resolve_dtype("half", cpu)


def test_inference_config_takes_a_device_and_refuses_another_form() -> None:
    config = InferenceConfig(device="cuda:1", dtype="bfloat16", cuda_graphs=False)
    assert (config.device, config.dtype, config.cuda_graphs) == ("cuda:1", "bfloat16", False)
    assert InferenceConfig().device == "cpu"
    with pytest.raises(ValidationError, match="device"):
        InferenceConfig(device="gpu0")


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(5, 4)
        self.head = nn.Linear(4, 5, bias=False)
        self.head.weight = self.embed.weight
        self.register_buffer("table", torch.linspace(0.0, 1.0, 7), persistent=False)
        self.register_buffer("ids", torch.arange(3))


def test_placement_casts_parameters_once_and_keeps_buffers() -> None:
    module = Tied()
    table = module.table.clone()
    place_module(module, torch.device("cpu"), torch.bfloat16)
    assert module.embed.weight.dtype == torch.bfloat16
    assert module.head.weight is module.embed.weight  # still one tensor
    assert module.table.dtype == torch.float32 and torch.equal(module.table, table)
    assert module.ids.dtype == torch.int64
    assert weight_bytes(module) == 5 * 4 * 2  # the tied weight counts once
    assert not module.training


class Affine(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor, scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = self.linear(x.to(self.linear.weight.dtype)).float()
        return y * scale, y.sum(dim=-1)


class Declared:
    inputs = ()
    outputs = ()


def test_device_stage_takes_numpy_or_device_tensors_and_returns_device_tensors() -> None:
    torch.manual_seed(0)
    module = Affine().eval()
    stage = DeviceStage(module, Declared(), torch.device("cpu"), cuda_graph=True)
    assert not stage.cuda_graph  # graphs are for CUDA devices only
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    scale = np.float32([[2.0]])
    from_numpy = stage.run([x, scale])
    from_tensors = stage.run([torch.from_numpy(x), torch.from_numpy(scale)])
    with torch.no_grad():
        want = module(torch.from_numpy(x), torch.from_numpy(scale))
    for got in (from_numpy, from_tensors):
        assert all(isinstance(t, torch.Tensor) for t in got)
        for g, w in zip(got, want, strict=True):
            assert torch.equal(g, w)


def test_to_host_gives_float32_numpy_whatever_the_dtype() -> None:
    out = to_host(torch.tensor([1.5, -2.0], dtype=torch.bfloat16))
    assert isinstance(out, np.ndarray) and out.dtype == np.float32
    np.testing.assert_array_equal(out, [1.5, -2.0])
    assert to_host(torch.tensor([3])).dtype == np.int64
    assert to_host(np.ones(2)).dtype == np.float64


def test_the_cpu_clock_times_each_stage_in_order() -> None:
    clock = stage_clock(torch.device("cpu"))
    for name in ("vision_encoder", "fusion"):
        clock.start(name)
        clock.stop()
    times = clock.read_ms()
    assert list(times) == ["vision_encoder", "fusion"]
    assert all(t >= 0.0 for t in times.values())


@no_gpu
def test_the_factory_refuses_a_gpu_for_a_torch_checkpoint_at_start() -> None:
    from vla_edge.runners.factory import make_runner

    with pytest.raises(DeviceUnavailableError, match="device = 'cuda'"):
        make_runner("bundled", device="cuda")


def test_the_factory_refuses_a_device_for_an_onnx_export(tmp_path_factory) -> None:
    from export_fixtures import shared_onnx_export

    from vla_edge.runners.factory import make_runner

    folder = shared_onnx_export(tmp_path_factory)
    with pytest.raises(ConfigError, match=r"device = 'cuda'.*'onnx' export.*onnx_providers"):
        make_runner(str(folder), device="cuda")


@no_gpu
def test_serve_refuses_a_missing_gpu_before_it_listens(capsys) -> None:
    from vla_edge.cli import main

    assert main(["serve", "--policy", "bundled", "--device", "cuda", "--port", "0"]) == 2
    assert "--device: device = 'cuda'" in capsys.readouterr().err
