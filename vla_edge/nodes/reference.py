"""The README's node reference, generated from the code it documents.

* the graph picture (Mermaid) and each node's topics and services come from the
  graph description's port table (:data:`vla_edge.nodes.graph.PORTS`, which a
  test checks against the nodes themselves);
* each node's parameters come from its pydantic config model (type, bounds,
  description) and the value its shipped parameter file sets.

``python tools/report.py`` (``make docs``) writes these blocks into README.md (each node's
parameters as one line) and docs/NODES.md (their full tables), and ``--check`` (``make
docs-check``) fails when one no longer matches the code.
"""

from __future__ import annotations

import typing
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from vla_edge.config.loader import load_yaml_file, mapping_fields, nest_parameters
from vla_edge.config.models import (
    ControllerConfig,
    FaultInjectorParams,
    InferenceConfig,
    SafetyConfig,
    SimConfig,
)
from vla_edge.config.paths import share_dir
from vla_edge.nodes import graph as g
from vla_edge.nodes.params import field_bounds

# node name -> (config model, shipped parameter file)
NODE_CONFIGS: dict[str, tuple[type[BaseModel], str]] = {
    "sim_node": (SimConfig, "config/sim.yaml"),
    "inference_node": (InferenceConfig, "config/inference.yaml"),
    "controller_node": (ControllerConfig, "config/controller.yaml"),
    "safety_node": (SafetyConfig, "config/safety.yaml"),
    "fault_injector_node": (FaultInjectorParams, "config/faults/fault_injector_node.yaml"),
}
# Sources and sinks outside the graph in the picture.
OPERATOR = "operator"
MONITOR = "monitor"

_SCALARS = {bool: "bool", int: "int", float: "double", str: "string"}


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _type_text(annotation: Any) -> str:
    if typing.get_origin(annotation) is Literal:
        return "string"
    if typing.get_origin(annotation) is list:
        (item,) = typing.get_args(annotation)
        return _SCALARS.get(item, str(item)) + "[]"
    return _SCALARS.get(annotation, str(annotation))


def _value_text(value: Any) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(_value_text(v) for v in value) + "]"
    if isinstance(value, str):
        return f'"{value}"'
    return str(value).lower() if isinstance(value, bool) else _number(value)


def _text(value: str) -> str:
    """Plain text for a table cell (``<name>`` would vanish as an HTML tag)."""
    return value.replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _bounds_text(field: FieldInfo) -> str:
    """The field's bounds as an interval (``(0, 2000]``), its choices, or its minimum length."""
    if typing.get_origin(field.annotation) is Literal:
        return " \\| ".join(str(c) for c in typing.get_args(field.annotation))
    bounds = field_bounds(field)
    if "min_length" in bounds:
        return f"≥ {bounds['min_length']} entries"
    low = next((k for k in ("ge", "gt") if k in bounds), None)
    high = next((k for k in ("le", "lt") if k in bounds), None)
    if low is None and high is None:
        return "–"
    left = "(−∞" if low is None else ("[" if low == "ge" else "(") + _number(bounds[low])
    right = "∞)" if high is None else _number(bounds[high]) + ("]" if high == "le" else ")")
    return f"{left}, {right}"


def parameters_table(node: str) -> str:
    """Every parameter of ``node``: type, bounds, the shipped file's value, meaning."""
    rows = _parameter_rows(node)
    return _table(["parameter", "type", "bounds", f"`{NODE_CONFIGS[node][1]}`", "meaning"], rows)


def parameters_brief(node: str) -> str:
    """Every parameter of ``node`` with the shipped file's value, one line (README)."""
    path = NODE_CONFIGS[node][1]
    rows = _parameter_rows(node)
    names = ", ".join(f"{n} = {v}" if v != "–" else n for n, *_, v, _ in rows)
    return (
        f"Parameters (`{path}`; type, bounds and meaning of each in "
        f"[docs/NODES.md](docs/NODES.md)): {names}."
    )


def _parameter_rows(node: str) -> list[list[str]]:
    """:func:`parameters_table`'s rows: name, type, bounds, shipped value, meaning."""
    model, path = NODE_CONFIGS[node]
    shipped = load_yaml_file(share_dir() / path).get(node, {}).get("ros__parameters", {})
    shipped = nest_parameters(model, shipped)
    nested = mapping_fields(model)
    rows = []
    for name, field in model.model_fields.items():
        if name in nested:
            rows += _mapping_rows(name, nested[name], shipped.get(name) or {})
            continue
        value = shipped.get(name, field.get_default(call_default_factory=True))
        rows.append(
            [
                f"`{name}`",
                _type_text(field.annotation),
                _bounds_text(field),
                f"`{_value_text(value)}`",
                _text(field.description or ""),
            ]
        )
    return rows


def _mapping_rows(
    name: str, entry_model: type[BaseModel], shipped: dict[str, Any]
) -> list[list[str]]:
    """One row per field of a mapping's entries (``joints.<joint>.position_min``).

    The value cell holds each entry's value in the shipped file (``joint1: -2.9, ...``).
    """
    rows = []
    for entry_name, field in entry_model.model_fields.items():
        values = ", ".join(
            f"{key}: {_value_text(entry.get(entry_name))}" for key, entry in shipped.items()
        )
        rows.append(
            [
                f"`{name}.<{name.removesuffix('s')}>.{entry_name}`",  # a code span keeps <>
                _type_text(field.annotation),
                _bounds_text(field),
                f"`{values}`" if values else "–",
                _text(field.description or ""),
            ]
        )
    return rows


def ports_table(node: str) -> str:
    """What ``node`` publishes, subscribes and serves: name, type, QoS, meaning."""
    rows = []
    for port in (p for p in g.PORTS if p.node == node):
        meaning = port.meaning + (f" (only with {port.when})" if port.when else "")
        qos = "–" if port.qos is None else str(port.qos)
        kind = port.type.replace("/msg/", "/").replace("/srv/", "/")
        rows.append([port.role, f"`{port.name}`", f"`{kind}`", qos, _text(meaning)])
    return _table(["", "name", "type", "QoS", "meaning"], rows)


def graph_mermaid() -> str:
    """The sim graph as a Mermaid flowchart: one edge per (publisher, subscriber) pair.

    ``/diagnostics`` (every node publishes it) is left out; a topic nobody in the
    graph publishes comes from the operator, one nobody subscribes goes to a
    monitor, and services are called by the operator.
    """
    names = {p.name.replace(g.CAMERA_PLACEHOLDER, "*") for p in g.PORTS}
    edges: dict[tuple[str, str], list[str]] = {}
    for name in sorted(names - {g.TOPIC_DIAGNOSTICS}):
        ports = [p for p in g.PORTS if p.name.replace(g.CAMERA_PLACEHOLDER, "*") == name]
        sources = sorted({p.node for p in ports if p.role == "publishes"}) or [OPERATOR]
        sinks = sorted({p.node for p in ports if p.role in ("subscribes", "serves")}) or [MONITOR]
        if any(p.role == "serves" for p in ports):
            sources = [OPERATOR]
        for source in sources:
            for sink in sinks:
                edges.setdefault((source, sink), []).append(name)
    lines = ["```mermaid", "flowchart LR"]
    lines += [f"  {n}([{n}])" for n in (OPERATOR, MONITOR)]
    for (source, sink), topics in edges.items():
        lines.append(f'  {source} -- "{"<br/>".join(topics)}" --> {sink}')
    lines.append("```")
    return "\n".join(lines)
