"""The benchmarks use the package through its public names only.

A benchmark reaching into another layer's leading-underscore name breaks as soon
as that layer tidies its insides; it names a function to make public instead.
Checked here for every module of ``vla_edge/bench`` (and the docs tool beside the
package): no ``from vla_edge.x import _name`` and no ``module._name`` on a
``vla_edge`` module from outside ``vla_edge.bench``.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OWN = "vla_edge.bench"


def _outside(module: str) -> bool:
    own = module == OWN or module.startswith(OWN + ".")
    return module.split(".")[0] == "vla_edge" and not own


def private_uses(source: str) -> list[str]:
    """``"line: what"`` for each private name of another vla_edge package that ``source`` uses."""
    tree = ast.parse(source)
    aliases: dict[str, str] = {}  # local name -> vla_edge module outside bench
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and _outside(node.module):
            for name in node.names:
                if name.name.startswith("_"):
                    found.append(f"{node.lineno}: from {node.module} import {name.name}")
                else:
                    aliases[name.asname or name.name] = f"{node.module}.{name.name}"
        elif isinstance(node, ast.Import):
            for name in node.names:
                if _outside(name.name):
                    aliases[name.asname or name.name.split(".")[0]] = name.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
        ):
            found.append(f"{node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_the_check_finds_a_private_import_and_a_private_attribute():
    source = (
        "from vla_edge.nodes.graph_run import _float, run_graph\n"
        "from vla_edge.bench.soak import _subset\n"  # its own layer: allowed
        "import vla_edge.nodes.supervisor as sup\n"
        "sup._per_node_mb\n"
    )
    assert private_uses(source) == [
        "1: from vla_edge.nodes.graph_run import _float",
        "4: sup._per_node_mb",
    ]


def test_benchmarks_and_the_docs_tool_use_public_names_only():
    files = [*sorted((ROOT / "vla_edge" / "bench").glob("*.py")), ROOT / "tools" / "report.py"]
    found = {
        str(path.relative_to(ROOT)): uses
        for path in files
        if (uses := private_uses(path.read_text()))
    }
    assert found == {}
