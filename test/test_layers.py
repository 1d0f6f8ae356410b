"""The package's layers point one way: the import graph matches the architecture.

Every module under ``vla_edge/`` is parsed with ``ast``; every import counts,
at module level or inside a function (a lazy import is still a dependency).
Modules group into layers: the top-level subpackages, plus ``cli`` for the
command front ends (``vla_edge/cli.py``, ``vla_edge/demo.py`` and each
subpackage's ``cli.py`` / ``*_cli.py``), which wire the layers together and so
may import any of them. Only nodes, bench and the commands import ROS.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import vla_edge

PACKAGE_DIR = Path(vla_edge.__file__).parent

# Every ROS-free layer (the cores the nodes adapt).
CORES = {
    *("core", "config", "control", "safety", "inference"),
    *("policy", "archs", "actions", "export", "runners", "sim", "faults"),
}

# layer -> the layers it may import (besides itself). Read top to bottom: each
# layer builds only on the ones above it.
ALLOWED: dict[str, set[str]] = {
    "core": set(),  # plain data types and errors: numpy only
    "config": {"core"},
    "control": {"core", "config"},
    "safety": {"core", "config"},  # nothing else: it holds the robot if all else dies
    "inference": {"core", "config"},
    "policy": {"core", "config"},
    # third-party architectures (π0, π0.5, SmolVLA) as torch stages, and their checkpoint layouts
    "archs": {"core", "config", "policy"},
    # a policy's action space turned into joint-position targets (kinematics with MuJoCo)
    "actions": {"core", "config"},
    "export": {"core", "config", "policy", "archs"},
    "runners": {"core", "config", "policy", "archs", "actions", "export"},
    # a sweep exports a checkpoint once per backend and quantisation recipe
    "sim": {
        *("core", "config", "control", "safety", "policy", "actions", "runners", "inference"),
        "export",
    },
    # ROS-free: never nodes or bench (the ROS-level fault suite is nodes/fault_suite.py)
    "faults": {"core", "config", "control", "safety", "inference", "actions", "runners", "sim"},
    "nodes": CORES,  # thin adapters from ROS messages to the cores
    # benchmarks and the command front ends wire everything together
    "bench": CORES | {"nodes", "cli"},
    "cli": CORES | {"nodes", "bench"},
}

# (importing module, imported module): edges that break the table today, each
# named with its reason. Remove an entry when its import goes.
KNOWN_EXCEPTIONS: set[tuple[str, str]] = set()


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> str | None:
    """The layer of a ``vla_edge`` module (``None`` for the package root)."""
    parts = module.split(".")
    if len(parts) == 1:
        return None
    if parts[1] in ("cli", "demo"):
        return "cli"
    if len(parts) >= 3 and (parts[-1] == "cli" or parts[-1].endswith("_cli")):
        return "cli"
    return parts[1]


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


def layer_graph() -> dict[tuple[str, str], list[str]]:
    """``(layer, imported layer) -> where`` for every import across layers."""
    graph: dict[tuple[str, str], list[str]] = defaultdict(list)
    for module, target, where in import_edges():
        if (module, target) in KNOWN_EXCEPTIONS:
            continue
        src, dst = layer_of(module), layer_of(target)
        if src is None or dst is None or src == dst:
            continue
        graph[(src, dst)].append(f"{where} imports {target}")
    return graph


def test_every_subpackage_and_module_has_a_row_in_the_table() -> None:
    layers = {p.parent.name for p in PACKAGE_DIR.glob("*/__init__.py")}
    layers |= {layer_of(module_name(p)) for p in PACKAGE_DIR.glob("*.py")} - {None}
    assert layers <= set(ALLOWED), f"add a row for {sorted(layers - set(ALLOWED))}"
    for layer, allowed in ALLOWED.items():
        assert allowed <= set(ALLOWED), f"{layer}: unknown layers {sorted(allowed - set(ALLOWED))}"


def test_the_parser_sees_lazy_and_module_level_imports() -> None:
    edges = {(module, target) for module, target, _ in import_edges()}
    assert len({module for module, _ in edges}) > 80
    # module level
    assert ("vla_edge.runners.exported", "vla_edge.runners.programs") in edges
    # inside a function
    assert ("vla_edge.runners.programs", "vla_edge.runners.onnx_program") in edges
    assert ("vla_edge.faults.cli", "vla_edge.nodes.fault_suite") in edges


def test_known_exceptions_name_real_imports() -> None:
    edges = {(module, target) for module, target, _ in import_edges()}
    missing = sorted(KNOWN_EXCEPTIONS - edges)
    assert not missing, f"remove these known exceptions, the imports are gone: {missing}"


def test_the_package_root_imports_no_layer() -> None:
    assert [where for module, _, where in import_edges() if module == "vla_edge"] == []


def test_every_import_across_layers_is_allowed_by_the_table() -> None:
    violations = [
        f"{src} -> {dst}: {site}"
        for (src, dst), sites in sorted(layer_graph().items())
        if dst not in ALLOWED[src]
        for site in sites
    ]
    assert not violations, "imports against the layer table:\n" + "\n".join(violations)


def reachable(start: str, edges: set[tuple[str, str]]) -> set[str]:
    """Layers ``start`` imports, directly or through others."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        layer = todo.pop()
        for src, dst in edges:
            if src == layer and dst not in seen:
                seen.add(dst)
                todo.append(dst)
    return seen


def test_the_layers_have_no_import_cycle() -> None:
    graph = layer_graph()
    edges = set(graph)
    # src -> dst closes a cycle when dst leads back to src
    on_cycle = [
        f"{src} -> {dst}: {graph[(src, dst)][0]}"
        for src, dst in sorted(edges)
        if src in reachable(dst, edges)
    ]
    assert not on_cycle, "layers importing each other:\n" + "\n".join(on_cycle)


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
