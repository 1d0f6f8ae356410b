"""The safety core stays independent: it imports only core, config and itself."""

import ast
from pathlib import Path

import vla_edge.safety

SAFETY_DIR = Path(vla_edge.safety.__file__).parent
ALLOWED_PACKAGES = ("vla_edge.core", "vla_edge.config", "vla_edge.safety")
ALLOWED_THIRD_PARTY = {"numpy"}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path.name}: relative import"
            names.add(node.module or "")
    return names


def test_every_safety_module_imports_only_core_config_and_the_standard_library() -> None:
    import sys

    modules = sorted(SAFETY_DIR.glob("*.py"))
    assert len(modules) >= 6
    for path in modules:
        for name in imported_modules(path):
            top = name.split(".")[0]
            if top == "vla_edge":
                assert name.startswith(ALLOWED_PACKAGES), f"{path.name} imports {name}"
            else:
                assert top in sys.stdlib_module_names or top in ALLOWED_THIRD_PARTY, (
                    f"{path.name} imports {name}"
                )
