"""The layers hold and no import closes a circle, as a machine checks them.

``.importlinter`` (the repository root) is ARCHITECTURE.md's Layout table ("may import")
as an import-linter ``layers`` contract; ``make lint`` runs ``lint-imports`` on it and so
does this test. Every import counts: at module level, inside a function, under
``TYPE_CHECKING`` (grimp, import-linter's graph, reads them all). Beyond the layers, no
circle among the modules of the package, nor among its packages at any depth.
"""

from __future__ import annotations

import configparser
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path

import grimp
import pytest

import vla_edge

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = ROOT / ".importlinter"
PACKAGE_DIR = Path(vla_edge.__file__).parent

KNOWN_CYCLES: dict[frozenset[str], str] = {}
"""Module circles left on purpose: the modules on it -> why, and what removes it. None."""


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("vla_edge")


def contract_layers() -> list[str]:
    """The modules the layers contract names, top to bottom."""
    config = configparser.ConfigParser()
    config.read(CONTRACT)
    layers = config["importlinter:contract:layers"]["layers"]
    return [name.strip() for line in layers.splitlines() for name in line.split("|") if name]


def circles(adjacency: Mapping[str, Iterable[str]]) -> list[set[str]]:
    """The strongly connected components with more than one node (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for root in sorted(adjacency):
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, iter(sorted(adjacency.get(root, ()))))]
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(adjacency.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def module_imports(graph: grimp.ImportGraph) -> dict[str, set[str]]:
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}


def describe(graph: grimp.ImportGraph, circle: set[str]) -> str:
    """Each import on the circle with its lines."""
    lines = []
    for importer in sorted(circle):
        for imported in sorted(graph.find_modules_directly_imported_by(importer) & circle):
            where = graph.get_import_details(importer=importer, imported=imported)
            at = ", ".join(f"l.{d['line_number']}" for d in where)
            lines.append(f"  {importer} -> {imported} ({at})")
    return "\n".join(lines)


def test_lint_imports_keeps_the_layers_contract() -> None:
    lint_imports = Path(sys.executable).with_name("lint-imports")
    result = subprocess.run(
        [str(lint_imports), "--config", str(CONTRACT), "--no-cache"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_every_subpackage_and_top_level_module_is_in_a_layer() -> None:
    names = {f"vla_edge.{p.parent.name}" for p in PACKAGE_DIR.glob("*/__init__.py")}
    names |= {f"vla_edge.{p.stem}" for p in PACKAGE_DIR.glob("*.py") if p.stem != "__init__"}
    layers = contract_layers()
    assert len(layers) == len(set(layers)), f"named twice in {CONTRACT.name}: {layers}"
    missing = sorted(names - set(layers))
    assert not missing, f"add {missing} to a layer of {CONTRACT.name}"
    assert not sorted(set(layers) - names), "the contract names modules that do not exist"


def test_the_graph_sees_function_level_imports(graph) -> None:
    # module level
    assert graph.direct_import_exists(
        importer="vla_edge.runners.exported", imported="vla_edge.runners.programs"
    )
    # inside a function: the ROS-level fault suite only when `vla-edge faults run --ros` asks
    assert graph.direct_import_exists(
        importer="vla_edge.cli.faults", imported="vla_edge.nodes.fault_suite"
    )


def test_the_circle_finder_finds_a_circle() -> None:
    found = circles({"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}})
    assert found == [{"a", "b", "c"}]


def test_no_import_circle_among_the_modules(graph) -> None:
    found = [c for c in circles(module_imports(graph)) if frozenset(c) not in KNOWN_CYCLES]
    assert not found, "import circles:\n" + "\n\n".join(describe(graph, c) for c in found)


def test_the_known_circles_are_still_there(graph) -> None:
    present = {frozenset(c) for c in circles(module_imports(graph))}
    gone = [sorted(c) for c in KNOWN_CYCLES if c not in present]
    assert not gone, f"remove these from KNOWN_CYCLES, the circles are gone: {gone}"


def test_no_import_circle_among_the_packages_at_any_depth(graph) -> None:
    imports = module_imports(graph)
    deepest = max(m.count(".") for m in imports)
    for depth in range(2, deepest + 1):  # 2: vla_edge.<layer>

        def package(module: str, depth: int = depth) -> str:
            return ".".join(module.split(".")[:depth])

        collapsed: dict[str, set[str]] = defaultdict(set)
        for importer, imported in imports.items():
            for target in imported:
                if package(importer) != package(target):
                    collapsed[package(importer)].add(package(target))
        found = circles(collapsed)
        assert not found, f"packages importing each other (depth {depth}): {found}"
