"""``tools/report.py``, the docs generator outside the package, loaded as a module for tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
REPORT_PY = ROOT / "tools" / "report.py"
_NAME = "vla_edge_docs_report"


def load_report() -> ModuleType:
    """The module of ``tools/report.py`` (imported once per test process)."""
    if _NAME in sys.modules:
        return sys.modules[_NAME]
    spec = importlib.util.spec_from_file_location(_NAME, REPORT_PY)
    assert spec is not None and spec.loader is not None, REPORT_PY
    module = importlib.util.module_from_spec(spec)
    sys.modules[_NAME] = module  # its dataclasses look their module up while it runs
    spec.loader.exec_module(module)
    return module
