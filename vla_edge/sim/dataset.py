"""Find the demonstration files ``vla-edge collect`` writes.

Training reads them with :func:`vla_edge.policy.data.load_episodes`; the
layout is in docs/INTERFACES.md.
"""

from __future__ import annotations

from pathlib import Path

from vla_edge.core.errors import DatasetError

HDF5_SUFFIXES = (".hdf5", ".h5")


def demo_files(path: str | Path) -> list[Path]:
    """The HDF5 files at ``path`` (a file, or every ``*.hdf5``/``*.h5`` below a folder).

    Raises:
        DatasetError: nothing there.
    """
    path = Path(path)
    if path.is_file():
        return [path]
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.suffix in HDF5_SUFFIXES)
        if files:
            return files
        raise DatasetError(f"path = {str(path)!r}: no {'/'.join(HDF5_SUFFIXES)} file inside")
    raise DatasetError(f"path = {str(path)!r}: no such file or folder")
