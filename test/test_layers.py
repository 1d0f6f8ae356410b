"""The package root imports no layer; only nodes, bench and the commands import ROS.

What the layers contract does not say; the layers themselves (which layer may import
which, no circle) are ``.importlinter``'s contract, checked by ``make lint`` and
``test_layers_contract.py``. Every module under ``vla_edge/`` is parsed with ``ast``;
every import counts, at module level or inside a function (a lazy import is still a
dependency).
"""

from __future__ import annotations

import ast
from pathlib import Path

import vla_edge

PACKAGE_DIR = Path(vla_edge.__file__).parent


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> str | None:
    """The layer of a ``vla_edge`` module (``None`` for the package root)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def imported_modules(path: Path, module: str) -> list[tuple[int, str]]:
    """``(line, module)`` of every import in ``path``, at any depth."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target == "vla_edge":  # from vla_edge import sim: the subpackage
                found.extend((node.lineno, f"vla_edge.{alias.name}") for alias in node.names)
            else:
                found.append((node.lineno, target))
    return found


def all_imports() -> list[tuple[str, str, str]]:
    """``(importing module, imported module, "path:line")`` for every import in the package."""
    edges = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        module = module_name(path)
        for line, target in imported_modules(path, module):
            where = f"{path.relative_to(PACKAGE_DIR.parent)}:{line}"
            edges.append((module, target, where))
    return edges


def import_edges() -> list[tuple[str, str, str]]:
    """The imports of ``vla_edge`` modules among :func:`all_imports`."""
    return [edge for edge in all_imports() if edge[1].split(".")[0] == "vla_edge"]


def test_the_parser_sees_lazy_and_module_level_imports() -> None:
    edges = {(module, target) for module, target, _ in import_edges()}
    assert len({module for module, _ in edges}) > 80
    # module level
    assert ("vla_edge.runners.exported", "vla_edge.runners.programs") in edges
    # inside a function
    assert ("vla_edge.runners.programs", "vla_edge.runners.onnx_program") in edges
    assert ("vla_edge.cli.faults", "vla_edge.nodes.fault_suite") in edges


def test_the_package_root_imports_no_layer() -> None:
    assert [where for module, _, where in import_edges() if module == "vla_edge"] == []


ROS_LAYERS = {"nodes", "bench", "cli"}
ROS_PACKAGES = ("rclpy", "launch", "launch_ros", "builtin_interfaces", "rosidl_runtime_py")


def test_only_nodes_bench_and_the_commands_import_ros() -> None:
    def is_ros(name: str) -> bool:
        top = name.split(".")[0]
        return top in ROS_PACKAGES or top.endswith(("_msgs", "_srvs", "_interfaces"))

    found = [
        f"{where} imports {target}"
        for module, target, where in all_imports()
        if layer_of(module) not in ROS_LAYERS and is_ros(target)
    ]
    assert not found, "ROS imports outside nodes:\n" + "\n".join(found)
