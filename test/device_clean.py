"""A check that a torch forward creates no host tensor: run it on ``meta`` in the mode below.

A model that builds a flow time, a mask or a position table on the host inside its
forward fails on a GPU ("Expected all tensors to be on the same device") or, worse, copies
it there silently and cannot be captured as a CUDA graph. On the ``meta`` device every
operation is checked here: an operation that reads or makes a tensor on any other device
(a 0-dim CPU tensor included, which torch would otherwise accept as a scalar) raises
:class:`HostTensorError` naming the operation.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class HostTensorError(AssertionError):
    """An operation inside a checked forward touched a tensor off the checked device."""


class no_host_tensors(TorchDispatchMode):  # noqa: N801 (used as a context manager)
    """Every operation's tensor inputs and outputs must be on ``device`` (default ``meta``)."""

    def __init__(self, device: str = "meta") -> None:
        super().__init__()
        self.device = torch.device(device)
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, D105
        kwargs = kwargs or {}
        self._check(func, tree_flatten((args, kwargs))[0], "reads")
        out = func(*args, **kwargs)
        self._check(func, tree_flatten(out)[0], "makes")
        self.ops += 1
        return out

    def _check(self, func, values, verb: str) -> None:  # noqa: ANN001
        for value in values:
            if isinstance(value, torch.Tensor) and value.device.type != self.device.type:
                raise HostTensorError(
                    f"{func} {verb} a {value.device} tensor {tuple(value.shape)} "
                    f"{value.dtype} inside a forward on {self.device}"
                )


HOST = ("images", "image_mask", "token_ids", "token_mask", "state", "noise")
"""A chunk's host inputs, in the order ``run_stages`` and ``sample_actions`` take them."""


def host_inputs(stages, seed: int = 0) -> dict[str, torch.Tensor]:  # noqa: ANN001 (a StageSet)
    """The chunk's host inputs by name (float32, int64 token ids), from the example inputs."""
    example = stages.example_inputs(seed)
    values = {
        spec.name: value
        for name, specs in stages.inputs().items()
        for spec, value in zip(specs, example[name], strict=True)
    }
    return {name: values[name] for name in HOST}


def meta_inputs(stages) -> dict[str, torch.Tensor]:  # noqa: ANN001 (a StageSet)
    """The chunk's host inputs on ``meta``, of the declared shapes and dtypes."""
    specs = {spec.name: spec for specs in stages.inputs().values() for spec in specs}
    return {
        name: torch.empty(specs[name].shape, dtype=getattr(torch, specs[name].dtype), device="meta")
        for name in HOST
    }


def relative_rms(got: torch.Tensor, want: torch.Tensor) -> float:
    """Each action dim's RMS error over the chunk over its range in ``want``; the worst."""
    got, want = got.cpu(), want.cpu()
    rms = (got - want).square().mean(dim=1).sqrt()
    return (rms / (want.amax(dim=1) - want.amin(dim=1))).max().item()


def chunk_on_meta(model_class, config, build_stages, run_stages, dtype):  # noqa: ANN001, ANN201
    """A model of ``config`` built on ``meta`` in ``dtype``: its whole chunk, split into the
    stages and as ``sample_actions``, under :class:`no_host_tensors`.

    Returns:
        ``(split, reference, checked)``: both chunks and the checking mode (its ``ops``).
    """
    with torch.device("meta"):
        model = model_class(config)
    model.to(dtype)
    stages = build_stages(model)
    x = meta_inputs(stages)
    with no_host_tensors() as checked:
        split = run_stages(stages, *(x[name] for name in HOST))
        reference = model.sample_actions(*(x[name] for name in HOST))
    return split, reference, checked
