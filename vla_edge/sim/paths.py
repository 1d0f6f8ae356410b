"""Find the MJCF assets in the source tree or in the installed ``share/vla_edge``."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

from vla_edge.core.errors import AssetNotFoundError

PACKAGE = "vla_edge"
ASSET_DIR_ENV = "VLA_EDGE_SIM_DIR"


def _candidate_roots() -> Iterator[Path]:
    """Directories that may hold ``<suite>/<suite>.xml``, most specific first."""
    override = os.environ.get(ASSET_DIR_ENV)
    if override:
        yield Path(override)
    yield Path(__file__).resolve().parents[2] / "sim"
    yield Path(sys.prefix) / "share" / PACKAGE / "sim"
    try:
        from ament_index_python.packages import get_package_share_directory

        yield Path(get_package_share_directory(PACKAGE)) / "sim"
    except (ImportError, LookupError, ValueError, OSError):
        return


def suite_dir(suite: str = "tabletop") -> Path:
    """Directory of a suite's assets.

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
