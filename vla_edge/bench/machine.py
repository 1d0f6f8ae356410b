"""The machine a benchmark ran on, as each bench's JSON records it (``machine``)."""

from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip().replace("\x00", "")
    except OSError:
        return None


def machine_info() -> dict[str, Any]:
    """CPU, cores, governor, thermal zones, OS, Python, packages, git commit, load."""
    import glob

    import psutil

    from vla_edge.export.pipeline import package_versions

    cpu_model = None
    for line in (_read("/proc/cpuinfo") or "").splitlines():
        if line.lower().startswith(("model name", "hardware", "cpu model")):
            cpu_model = line.split(":", 1)[1].strip()
            break
    governors = sorted(
        {
            g
            for g in (
                _read(p) for p in glob.glob("/sys/devices/system/cpu/cpu*/cpufreq/scaling_governor")
            )
            if g
        }
    )
    thermal = []
    for zone in sorted(glob.glob("/sys/class/thermal/thermal_zone*")):
        temp = _read(f"{zone}/temp")
        thermal.append(
            {
                "zone": Path(zone).name,
                "type": _read(f"{zone}/type"),
                "temp_c": int(temp) / 1000.0 if temp and temp.lstrip("-").isdigit() else None,
            }
        )
    os_release = {}
    for line in (_read("/etc/os-release") or "").splitlines():
        key, _, value = line.partition("=")
        os_release[key] = value.strip('"')
    commit = _git(["rev-parse", "HEAD"])
    dirty = _git(["status", "--porcelain", "--untracked-files=no"])
    return {
        "cpu_model": cpu_model or platform.processor(),
        "device_model": _read("/proc/device-tree/model"),
        "machine": platform.machine(),
        "logical_cores": os.cpu_count(),
        "physical_cores": psutil.cpu_count(logical=False),
        "affinity_cores": len(os.sched_getaffinity(0)),
        "memory_gb": psutil.virtual_memory().total / 2**30,
        "governors": governors or None,
        "thermal_zones": thermal or None,
        "os": os_release.get("PRETTY_NAME") or platform.platform(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "packages": package_versions(("numpy", "psutil", "mujoco")) | package_versions(),
        "git_commit": commit,
        "git_dirty": bool(dirty) if dirty is not None else None,
        "load_average": list(os.getloadavg()),
    }


def _git(args: list[str]) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None
