"""``TorchStagesRunner``: a torch export's stages on the CPU or a GPU, behind the ``Runner`` seam.

``vla-edge export POLICY_DIR --backend torch --out DIR`` writes each stage's weights
(``<stage>.safetensors``) and a manifest whose ``model_config`` is the architecture's config.
This runner builds the architecture's three stage modules from that config (the registry
names the classes; no default initialisers run), loads each stage's file into its module
strictly, and places them where the deployment says:

* ``device``: ``cpu``, ``cuda`` or ``cuda:N`` (a GPU this machine lacks is
  :class:`~vla_edge.core.errors.DeviceUnavailableError` here, at start-up);
* ``dtype``: the weights' dtype (``auto``: bfloat16 on a GPU, float32 on the CPU); the
  models keep norm statistics, softmax, the time embedding and the Euler update in float32;
* ``cuda_graphs``: on a GPU each stage is captured once as a CUDA graph on its fixed shapes
  and replayed (:class:`~vla_edge.runners.torch_device.DeviceStage`).

Everything else is :class:`~vla_edge.runners.exported.ExportedRunner`'s: the same host
pre-processing (images, prompt, normalisation, noise, executed prefix), the same stage
loop from the manifest (the action head's K calls included), the same action space. Host
inputs are uploaded once per observation, the stages' outputs stay on the device, and
only the declared output comes back; ``timings_ms`` holds each stage's time from CUDA
events (wall time on the CPU).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from vla_edge.core.errors import ManifestMismatchError
from vla_edge.export.manifest import Manifest, load_manifest
from vla_edge.runners.base import RunnerSpec
from vla_edge.runners.exported import ExportedRunner, WallClock
from vla_edge.runners.torch_device import (
    CudaEventClock,
    DeviceStage,
    place_module,
    resolve_device,
    resolve_dtype,
    stage_clock,
    to_host,
)


def stage_modules(manifest: Manifest) -> dict[str, torch.nn.Module]:
    """The manifest's stage modules with their files' weights (float32, on the CPU).

    Raises:
        ManifestMismatchError: an unknown architecture or config, a stage the architecture
            lacks, or a weight file whose tensors are not the stage's.
    """
    from safetensors.torch import load_file

    from vla_edge.archs import registry
    from vla_edge.archs.common import without_default_init
    from vla_edge.core.errors import UnknownArchitectureError

    where = f"{manifest.directory}/manifest.json"
    name = str(manifest.data["architecture"])
    try:
        arch = registry.get(name)
        config = arch.config_class()(**manifest.data["model_config"])
        model_class, split = arch.resolve("model"), arch.resolve("stages")
    except (UnknownArchitectureError, TypeError, ValueError) as exc:
        raise ManifestMismatchError(
            f"{where}: field architecture = {name!r} / model_config: {exc}"
        ) from exc
    with without_default_init():
        model = model_class(config).eval()
    modules = split(model).modules()
    for stage_name in manifest.stage_order:
        if stage_name not in modules:
            raise ManifestMismatchError(
                f"{where}: stage {stage_name!r} is not one of {name}'s stages {sorted(modules)}"
            )
        module = modules[stage_name]
        tensors = load_file(str(manifest.stage_path(stage_name)))
        try:
            module.load_state_dict(tensors, strict=True)
        except RuntimeError as exc:
            raise ManifestMismatchError(
                f"{where}: field stages.{stage_name}.file = "
                f"{manifest.stages[stage_name].file!r} does not hold that stage's weights: "
                f"{str(exc).splitlines()[0]}"
            ) from exc
    return {n: modules[n] for n in manifest.stage_order}


class TorchStagesRunner(ExportedRunner):
    """Run a torch export on a device (see the module docstring).

    Args:
        path: export directory (``vla-edge export --backend torch``).
        threads: torch intra-op threads on the CPU (``None``: torch's default).
        seed: seed of the numpy noise generator used when ``infer`` gets no noise.
        expected: what the deployment expects; a differing manifest is refused.
        device: ``cpu``, ``cuda`` or ``cuda:N``.
        dtype: ``auto``, ``float32``, ``bfloat16`` or ``float16``: the weights' dtype there.
        cuda_graphs: capture and replay each stage as a CUDA graph on a GPU.

    Raises:
        DeviceUnavailableError: ``device`` names a GPU this machine lacks.
        ConfigError: a malformed device or dtype name.
        ManifestMismatchError: not a torch export, or weights that are not the stages'.
    """

    backend_name = "torch"

    def __init__(
        self,
        path: str | Path,
        threads: int | None = None,
        seed: int = 0,
        expected: RunnerSpec | None = None,
        device: str = "cpu",
        dtype: str = "auto",
        cuda_graphs: bool = True,
    ) -> None:
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        if threads is not None and self.device.type == "cpu":
            torch.set_num_threads(int(threads))
        manifest = load_manifest(path)
        if manifest.backend != "torch":
            raise ManifestMismatchError(
                f"field backend = {manifest.backend!r} in {manifest.directory}/manifest.json, "
                f"expected 'torch' for {type(self).__name__}"
            )
        programs = {
            name: DeviceStage(
                place_module(module, self.device, self.dtype),
                manifest.stages[name],
                self.device,
                cuda_graph=cuda_graphs,
            )
            for name, module in stage_modules(manifest).items()
        }
        super().__init__(
            path, threads=threads, seed=seed, expected=expected, backend="torch", programs=programs
        )

    def _stage_clock(self) -> CudaEventClock | WallClock:
        return stage_clock(self.device)

    def _to_host(self, value: Any) -> np.ndarray:
        return to_host(value)

    @property
    def device_name(self) -> str:
        """Where the stages run and in which dtype, e.g. ``cuda:0 bfloat16``."""
        return f"{self.device} {str(self.dtype).removeprefix('torch.')}"
