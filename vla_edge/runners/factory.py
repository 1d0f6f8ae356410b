"""Map a ``--policy`` string to a runner.

* ``expert`` — the scripted expert (needs the simulator, ``env=``, which builds
  it: the expert reads the simulator's privileged state and lives in ``sim``);
* ``bundled`` — the trained model shipped in ``vla_edge/models/bundled``;
* a ``.pt`` checkpoint — the torch reference runner (on ``device``);
* a directory with ``manifest.json`` — an exported artifact of any architecture
  (ONNX with ``onnx_providers``, ExecuTorch, or torch on ``device``, see
  :mod:`vla_edge.runners.torch_stages`; its stages declare their tensors, see
  :mod:`vla_edge.export.manifest`; an export in an older format is refused by
  the runner with the command that re-exports it);
* ``ws://host:port`` — a remote openpi-protocol server.

Backends are imported only when chosen, so ONNX / ExecuTorch deployments never
import torch.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from vla_edge.config.models import MAX_FLOW_STEPS
from vla_edge.core.errors import ConfigError
from vla_edge.runners.base import Runner

BUNDLED_DIR = Path(__file__).resolve().parent.parent / "models" / "bundled"
BUNDLED_CHECKPOINT = BUNDLED_DIR / "policy.pt"


class ExpertSource(Protocol):
    """A simulator that builds the scripted expert on its own privileged state."""

    def expert_runner(self) -> Runner:
        """A fresh scripted-expert runner driving this simulator."""
        ...


def resolve_policy_path(policy: str) -> Path:
    """Return the checkpoint or artifact path named by ``policy``."""
    if policy == "bundled":
        return BUNDLED_CHECKPOINT
    return Path(policy)


def make_runner(
    policy: str,
    *,
    env: ExpertSource | None = None,
    threads: int = 2,
    flow_steps: int | None = None,
    remote_timeout_s: float = 1.0,
    instruction_override: str | None = None,
    device: str = "cpu",
    dtype: str = "auto",
    cuda_graphs: bool = True,
    onnx_providers: Sequence[str] | None = None,
) -> Runner:
    """Build the runner named by ``policy``.

    Args:
        flow_steps: Euler steps ``K`` of the action head; ``None`` keeps the
            artifact's own. A torch checkpoint runs with any ``1 <= K <= MAX_FLOW_STEPS``;
            an export has its ``K`` built in, so only that value is accepted.
        device, dtype, cuda_graphs: where a torch checkpoint or a torch export runs
            (:mod:`vla_edge.runners.torch_device`); other backends run on the CPU.
        onnx_providers: an ONNX export's execution providers, each
            ``'Name[;key=value...]'`` (``None``: the CPU).

    Raises:
        ConfigError: the policy string names nothing usable (missing file, no
            manifest, unknown backend, ``expert`` without an env), or
            ``flow_steps`` is out of range or not the export's ``K``, or a device
            other than ``cpu`` for a backend that is not torch.
        DeviceUnavailableError: ``device`` names a GPU this machine lacks.
        ExecutionProviderError: an ONNX Runtime provider this build lacks.
    """
    del instruction_override  # the instruction travels in each Observation
    if flow_steps is not None and not 1 <= flow_steps <= MAX_FLOW_STEPS:
        raise ConfigError(f"flow_steps = {flow_steps}: expected 1 <= K <= {MAX_FLOW_STEPS}")
    if policy == "expert":
        if flow_steps is not None:
            raise ConfigError(f"flow_steps = {flow_steps}: the scripted expert has no Euler steps")
        if env is None:
            raise ConfigError(
                "policy 'expert' needs the simulator (env=...): it reads privileged state"
            )
        return env.expert_runner()
    if policy.startswith(("ws://", "wss://")):
        from vla_edge.runners.remote import RemoteRunner

        if flow_steps is not None:
            raise ConfigError(
                f"flow_steps = {flow_steps}: the remote policy server {policy} fixes its own K"
            )
        return RemoteRunner(policy, timeout_s=remote_timeout_s)
    path = resolve_policy_path(policy)
    if not path.exists():
        raise ConfigError(f"policy '{policy}': {path} does not exist")
    if path.is_dir():
        manifest_path = path / "manifest.json"
        if not manifest_path.is_file():
            raise ConfigError(f"policy '{policy}': directory {path} has no manifest.json")
        try:
            manifest = json.loads(manifest_path.read_text())
            backend = manifest["backend"]
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"{manifest_path}: cannot read field 'backend': {exc}") from exc
        if flow_steps is not None and flow_steps != manifest.get("flow_steps"):
            raise ConfigError(
                f"flow_steps = {flow_steps}: {path} was exported with K = "
                f"{manifest.get('flow_steps')}; export again with `vla-edge export "
                f"--flow-steps {flow_steps}` or leave flow_steps unset (0 in node parameters)"
            )
        if backend == "torch":
            from vla_edge.runners.torch_stages import TorchStagesRunner

            return TorchStagesRunner(
                path, threads=threads, device=device, dtype=dtype, cuda_graphs=cuda_graphs
            )
        if device != "cpu":
            raise ConfigError(
                f"device = {device!r}: {path} is a {backend!r} export, which runs on the CPU "
                "here; an ONNX export takes GPU execution providers (onnx_providers), or "
                "export the policy with --backend torch"
            )
        if backend == "onnx":
            from vla_edge.runners.onnx_runner import OnnxRunner

            return OnnxRunner(path, threads=threads, providers=onnx_providers)
        if backend == "executorch":
            from vla_edge.runners.executorch_runner import ExecuTorchRunner

            return ExecuTorchRunner(path, threads=threads)
        raise ConfigError(
            f"{manifest_path}: backend = {backend!r}: expected 'onnx', 'executorch' or 'torch'"
        )
    from vla_edge.runners.torch_runner import TorchRunner

    return TorchRunner(
        path,
        threads=threads,
        flow_steps=flow_steps,
        device=device,
        dtype=dtype,
        cuda_graphs=cuda_graphs,
    )
