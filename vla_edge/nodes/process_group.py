"""Stopping a graph's node processes: SIGINT, then SIGTERM, then SIGKILL.

Shared by ``vla-edge launch`` and the ROS fault suite, so that both stop a graph
the same way and both report a node that needed more than SIGINT.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping


def stop_all(
    processes: Mapping[str, subprocess.Popen], timeout_s: float
) -> tuple[dict[str, int], dict[str, str]]:
    """Stop every process, the last started first; wait ``timeout_s`` per signal.

    Each process gets SIGINT (and SIGCONT first, since a paused process cannot
    act on a signal); one still running ``timeout_s`` later gets SIGTERM, then
    SIGKILL.

    Returns:
        The return code per name, and the names that needed SIGTERM or SIGKILL
        with the last signal each was sent.
    """
    for process in reversed(list(processes.values())):
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGCONT)
            except (ProcessLookupError, PermissionError):
                pass  # exited meanwhile, or not a group leader we own
            process.send_signal(signal.SIGINT)
    codes: dict[str, int] = {}
    escalations: dict[str, str] = {}
    for name, process in processes.items():
        for sig in (None, signal.SIGTERM, signal.SIGKILL):
            if sig is not None and process.poll() is None:
                process.send_signal(sig)
                escalations[name] = sig.name
            try:
                process.wait(timeout=timeout_s)
                break
            except subprocess.TimeoutExpired:
                continue
        codes[name] = process.returncode
    return codes, escalations
