"""Torch stages on a device: device and dtype names, weight placement, CUDA graphs, CUDA events.

The torch backend runs a model's stages where the user says (``device: cpu | cuda | cuda:N``)
with its weights in the dtype the user says (``dtype: auto | float32 | bfloat16 | float16``;
``auto`` is bfloat16 on a GPU and float32 on the CPU):

* :func:`resolve_device` refuses a device this machine lacks at start-up
  (:class:`~vla_edge.core.errors.DeviceUnavailableError`), never at the first chunk.
* :func:`place_module` moves a module there and casts its *parameters* to the weight dtype;
  its buffers (the flow-time and time-embedding tables) keep float32, since the models keep
  the precision-sensitive arithmetic (norm statistics, softmax, the Euler update, the time
  embedding) in float32 whatever the weights' dtype.
* :class:`DeviceStage` runs one stage behind the runners' program seam: host (numpy) inputs
  are uploaded, device tensors stay where they are, and on a CUDA device the stage is
  captured once as a CUDA graph on its fixed shapes and replayed from then on (the models
  create no host tensor inside a forward, so nothing stops the capture).
* :func:`stage_clock` times stages with CUDA events (on the CPU: wall time), read after the
  one synchronisation at the end of a chunk.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from vla_edge.core.errors import ConfigError, DeviceUnavailableError
from vla_edge.runners.exported import WallClock

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
"""Weight dtypes by the name the configs use."""

WARMUP_CALLS = 2
"""Eager calls on a side stream before a CUDA graph is captured (cuBLAS and allocator set-up)."""


def resolve_device(name: str) -> torch.device:
    """The torch device named ``cpu``, ``cuda`` or ``cuda:N``, checked to exist here.

    Raises:
        ConfigError: ``name`` is not one of those forms.
        DeviceUnavailableError: a CUDA device that this machine (or this torch build) lacks.
    """
    text = str(name).strip()
    if text == "cpu":
        return torch.device("cpu")
    index_text = text[len("cuda:") :] if text.startswith("cuda:") else None
    if text != "cuda" and not (index_text is not None and index_text.isdigit()):
        raise ConfigError(f"device = {name!r}: expected 'cpu', 'cuda' or 'cuda:N'")
    if not torch.cuda.is_available():
        build = torch.version.cuda
        why = (
            "this torch build has no CUDA (a CPU wheel)"
            if build is None
            else f"torch {torch.__version__} (CUDA {build}) finds no GPU"
        )
        raise DeviceUnavailableError(
            f"device = {name!r}: {why}; use device 'cpu', or on a Jetson install the torch "
            "wheel built for its JetPack (docs/HIL.md)"
        )
    index = int(index_text) if index_text is not None else torch.cuda.current_device()
    count = torch.cuda.device_count()
    if index >= count:
        raise DeviceUnavailableError(
            f"device = {name!r}: this machine has {count} CUDA device(s), cuda:0 to "
            f"cuda:{count - 1}"
        )
    return torch.device("cuda", index)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """The weight dtype named ``name``; ``auto`` is bfloat16 on CUDA and float32 elsewhere.

    Raises:
        ConfigError: an unknown name, or a half-precision dtype on the CPU where its
            matrix products are emulated (``float16``; ``bfloat16`` runs).
    """
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if name not in DTYPES:
        raise ConfigError(f"dtype = {name!r}: expected 'auto' or one of {sorted(DTYPES)}")
    return DTYPES[name]


def place_module(module: nn.Module, device: torch.device, dtype: torch.dtype) -> nn.Module:
    """``module`` on ``device`` with floating parameters in ``dtype`` and buffers as they are.

    Parameters shared by several modules (a tied embedding) are cast once.
    """
    module.to(device)
    seen: set[int] = set()
    for param in module.parameters():
        if id(param) in seen or not param.is_floating_point():
            continue
        seen.add(id(param))
        param.data = param.data.to(dtype)
    return module.eval()


def weight_bytes(module: nn.Module) -> int:
    """Bytes of the distinct parameters :func:`~vla_edge.archs.common.count_parameters` counts."""
    return sum(param.numel() * param.element_size() for param in module.parameters())


def _as_list(out: Any) -> list[torch.Tensor]:
    return [out] if isinstance(out, torch.Tensor) else list(out)


class DeviceStage:
    """One torch stage module on a device, behind the runners' program seam.

    ``run`` takes numpy arrays (uploaded) or tensors already on the device (an earlier
    stage's outputs, kept there) and returns tensors on the device; the caller brings
    the final output to the host. On CUDA with ``cuda_graph``, the first call captures
    the stage as a graph over static input buffers and every later call copies its
    inputs into those buffers and replays it; the returned tensors are the graph's
    output buffers, valid until the next call.

    Args:
        module: the stage, already placed (:func:`place_module`).
        declared: the manifest's stage spec (its ``inputs`` / ``outputs``), for ``io``.
        device: where the module lives.
        cuda_graph: capture and replay on a CUDA device (ignored elsewhere).
    """

    def __init__(
        self, module: nn.Module, declared: Any, device: torch.device, cuda_graph: bool = True
    ) -> None:
        self.module = module.eval()
        self.declared = declared
        self.device = device
        self.cuda_graph = bool(cuda_graph) and device.type == "cuda"
        self._graph: torch.cuda.CUDAGraph | None = None
        self._static_in: list[torch.Tensor] = []
        self._static_out: list[torch.Tensor] = []

    def _upload(self, value: Any) -> torch.Tensor:
        if isinstance(value, torch.Tensor):
            return value if value.device == self.device else value.to(self.device)
        array = np.ascontiguousarray(value)
        return torch.from_numpy(array).to(self.device, non_blocking=True)

    def run(self, inputs: Sequence[Any]) -> list[torch.Tensor]:
        """The stage's outputs (on the device) for ``inputs`` in the declared order."""
        with torch.inference_mode():
            if not self.cuda_graph:
                return _as_list(self.module(*[self._upload(x) for x in inputs]))
            if self._graph is None:
                self._capture([self._upload(x) for x in inputs])
            else:
                for buffer, value in zip(self._static_in, inputs, strict=True):
                    if value is not buffer:
                        buffer.copy_(self._upload(value), non_blocking=True)
            assert self._graph is not None
            self._graph.replay()
            return self._static_out

    def _capture(self, args: list[torch.Tensor]) -> None:
        """Warm up on a side stream, then capture one call over owned copies of ``args``."""
        self._static_in = [a.clone() for a in args]
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(WARMUP_CALLS):
                self.module(*self._static_in)
        torch.cuda.current_stream(self.device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._static_out = _as_list(self.module(*self._static_in))
        self._graph = graph

    def io(self) -> tuple[list[tuple[tuple[int, ...], str]], list[tuple[tuple[int, ...], str]]]:
        """The declared tensors (a torch module takes what the manifest says)."""
        return (
            [(tuple(t.shape), t.dtype) for t in self.declared.inputs],
            [(tuple(t.shape), t.dtype) for t in self.declared.outputs],
        )


class CudaEventClock:
    """Per-stage times of one chunk from CUDA events, read after one synchronisation.

    The interface of :class:`~vla_edge.runners.exported.WallClock`; :func:`stage_clock`
    picks one or the other.
    """

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._marks: list[tuple[str, torch.cuda.Event, torch.cuda.Event]] = []
        self._open: tuple[str, torch.cuda.Event] | None = None

    def _event(self) -> torch.cuda.Event:
        event = torch.cuda.Event(enable_timing=True)
        event.record(torch.cuda.current_stream(self.device))
        return event

    def start(self, name: str) -> None:
        """Mark the start of stage ``name`` on the device's stream."""
        self._open = (name, self._event())

    def stop(self) -> None:
        """Mark the end of the stage started last."""
        assert self._open is not None
        name, begin = self._open
        self._marks.append((name, begin, self._event()))
        self._open = None

    def read_ms(self) -> dict[str, float]:
        """Each stage's milliseconds on the device (synchronises it first)."""
        torch.cuda.synchronize(self.device)
        return {name: float(b.elapsed_time(e)) for name, b, e in self._marks}


def stage_clock(device: torch.device) -> CudaEventClock | WallClock:
    """CUDA events on a GPU; wall time elsewhere."""
    return CudaEventClock(device) if device.type == "cuda" else WallClock()


def to_host(value: Any) -> np.ndarray:
    """A stage output as a float32 (or int) numpy array on the host."""
    if isinstance(value, torch.Tensor):
        tensor = value.detach()
        if tensor.is_floating_point() and tensor.dtype != torch.float32:
            tensor = tensor.float()
        return tensor.cpu().numpy()
    return np.asarray(value)
