"""Locate the package's files: the source tree, or ``share/vla_edge`` when installed.

The parameter files (``config/``: :func:`config_path`) and the MJCF assets (``sim/``:
:func:`scene_xml_path`, which the simulator loads and the import's default robot names).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

from vla_edge.core.errors import AssetNotFoundError, ConfigError

PACKAGE = "vla_edge"
ASSET_DIR_ENV = "VLA_EDGE_SIM_DIR"
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


def _candidate_roots() -> Iterator[Path]:
    """Directories that may hold ``<suite>/<suite>.xml``, most specific first."""
    override = os.environ.get(ASSET_DIR_ENV)
    if override:
        yield Path(override)
    yield _SOURCE_ROOT / "sim"
    yield Path(sys.prefix) / "share" / PACKAGE / "sim"
    try:
        from ament_index_python.packages import get_package_share_directory

        yield Path(get_package_share_directory(PACKAGE)) / "sim"
    except (ImportError, LookupError, ValueError, OSError):
        return


def suite_dir(suite: str = "tabletop") -> Path:
    """Directory of a suite's MJCF assets.

    Raises:
        AssetNotFoundError: no candidate directory holds ``<suite>.xml``.
    """
    tried = []
    for root in _candidate_roots():
        candidate = root / suite
        if (candidate / f"{suite}.xml").is_file():
            return candidate
        tried.append(str(candidate))
    raise AssetNotFoundError(
        f"suite = {suite!r}: no {suite}.xml found; looked in {tried} "
        f"(set {ASSET_DIR_ENV} to the folder holding '{suite}/')"
    )


def scene_xml_path(suite: str = "tabletop") -> Path:
    """Path of the suite's MJCF scene."""
    return suite_dir(suite) / f"{suite}.xml"
