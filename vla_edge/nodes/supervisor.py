"""The graph's node processes: start each as its own process, watch, measure, stop.

Every node of :func:`vla_edge.nodes.graph.graph` runs as its own process
(``python -m <module> --ros-args --params-file …``), exactly as
``launch/<profile>.launch.py`` starts them on a ROS 2 distribution, in its own
session and with its stdout+stderr in ``<log_dir>/<node>.log``. Stopping is
SIGINT, then SIGTERM, then SIGKILL (:func:`vla_edge.nodes.process_group.stop_all`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vla_edge.nodes.graph import NodeSpec, graph, normalize_namespace
from vla_edge.nodes.process_group import stop_all

STOP_TIMEOUT_S = 5.0
DEFAULT_ENV = {
    "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST",
    "MUJOCO_GL": "egl",
    "PYOPENGL_PLATFORM": "egl",
    "PYTHONUNBUFFERED": "1",
}
"""The children's environment where this process's does not set the variable."""


@dataclass
class NodeProcess:
    """One running node."""

    spec: NodeSpec
    process: subprocess.Popen
    log_path: Path


@dataclass
class GraphProcesses:
    """The graph's node processes: start, watch, stop.

    Args:
        profile: ``sim`` or ``hil``.
        overrides: per node name, parameter overrides applied after the file.
        log_dir: each node's stdout+stderr goes to ``<log_dir>/<node>.log``.
        env: extra environment for the children (on top of this process's).
        namespace: the graph's namespace (``""``: the root).
    """

    profile: str
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    log_dir: Path = Path("out/launch")
    env: dict[str, str] = field(default_factory=dict)
    namespace: str = ""
    nodes: dict[str, NodeProcess] = field(default_factory=dict)
    stop_escalations: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.namespace = normalize_namespace(self.namespace)

    def command(self, spec: NodeSpec) -> list[str]:
        """The command line of ``spec``'s process."""
        return [
            sys.executable,
            "-m",
            spec.module,
            *spec.ros_args(overrides=self.overrides.get(spec.name)),
        ]

    def child_env(self) -> dict[str, str]:
        """The children's environment: :data:`DEFAULT_ENV`, this process's, then :attr:`env`."""
        return {**DEFAULT_ENV, **os.environ, **self.env}

    def specs(self) -> tuple[NodeSpec, ...]:
        """The graph's nodes, in the graph's namespace."""
        return graph(self.profile, self.namespace)

    def start(self) -> None:
        """Start every node of the profile, in the graph's order."""
        self.log_dir.mkdir(parents=True, exist_ok=True)
        env = self.child_env()
        for spec in self.specs():
            log_path = self.log_dir / f"{spec.name}.log"
            log = log_path.open("w")
            process = subprocess.Popen(
                self.command(spec),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
            log.close()
            self.nodes[spec.name] = NodeProcess(spec, process, log_path)

    def exited(self) -> dict[str, int]:
        """Nodes that have exited, with their return codes."""
        return {
            name: node.process.returncode
            for name, node in self.nodes.items()
            if node.process.poll() is not None
        }

    def pid(self, name: str) -> int:
        """Process id of node ``name``."""
        return self.nodes[name].process.pid

    def signal(self, name: str, sig: int) -> None:
        """Send ``sig`` to node ``name`` (if still running)."""
        process = self.nodes[name].process
        if process.poll() is None:
            process.send_signal(sig)

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> dict[str, int]:
        """Stop every node, upstream first: SIGINT, then SIGTERM, then SIGKILL.

        Returns:
            Return code per node. A node that did not stop within ``timeout_s``
            of a signal is named in ``stop_escalations`` with the last signal
            it was sent.
        """
        codes, escalations = stop_all(
            {name: node.process for name, node in self.nodes.items()}, timeout_s
        )
        self.stop_escalations.update(escalations)
        return codes

    def rss_mb(self) -> dict[str, float]:
        """Resident memory (MiB) of each running node, its child processes included."""
        return self._per_node_mb(lambda proc: proc.memory_info().rss)

    def peak_rss_mb(self) -> dict[str, float]:
        """Largest resident memory (MiB) each running node has reached, children included."""
        return self._per_node_mb(lambda proc: vm_hwm_bytes(proc.pid))

    def _per_node_mb(self, read: Callable[[Any], float | None]) -> dict[str, float]:
        """``read(process)`` (bytes) summed over each running node's process and children.

        A node with a process that cannot be read is left out.
        """
        import psutil

        out: dict[str, float] = {}
        for name, node in self.nodes.items():
            try:
                proc = psutil.Process(node.process.pid)
                values = [read(p) for p in (proc, *proc.children(recursive=True))]
            except psutil.Error:
                continue
            if all(v is not None for v in values):
                out[name] = sum(values) / 2**20
        return out

    def log_tail(self, name: str, lines: int = 20) -> str:
        """Last lines of node ``name``'s log."""
        path = self.nodes[name].log_path
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def vm_hwm_bytes(pid: int) -> float | None:
    """The ``VmHWM`` (peak resident set) of process ``pid`` in bytes; None when unreadable."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return float(line.split()[1]) * 1024.0  # the kernel writes kB
    except (OSError, ValueError, IndexError):
        return None
    return None
