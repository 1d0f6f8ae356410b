"""Locate the package's parameter files: the source tree, or ``share/vla_edge`` when installed."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from vla_edge.core.errors import ConfigError

_SOURCE_ROOT = Path(__file__).resolve().parents[2]


def share_dir() -> Path:
    """The directory holding ``config/``, ``launch/`` and ``sim/``.

    The source checkout wins (editable installs); otherwise the ament index
    location under the interpreter prefix (``share/vla_edge``).
    """
    if (_SOURCE_ROOT / "config").is_dir() and (_SOURCE_ROOT / "package.xml").is_file():
        return _SOURCE_ROOT
    for prefix in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) + [sys.prefix]:
        if prefix and (Path(prefix) / "share" / "vla_edge" / "config").is_dir():
            return Path(prefix) / "share" / "vla_edge"
    raise ConfigError(
        f"cannot find the vla_edge share directory (looked in {_SOURCE_ROOT} and "
        f"share/vla_edge under AMENT_PREFIX_PATH and {sys.prefix})"
    )


def config_path(name: str) -> Path:
    """Path of ``config/<name>``; raises :class:`ConfigError` if it does not exist."""
    path = share_dir() / "config" / name
    if not path.is_file():
        raise ConfigError(f"config file {path} not found")
    return path
