"""Load configs from YAML in the ROS 2 parameter-file shape.

A parameter file looks like::

    controller_node:
      ros__parameters:
        rate_hz: 100.0

and the same file feeds the ROS node (``--ros-args --params-file``) and the
ROS-free cores (:func:`load_node_params`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from vla_edge.core.errors import ConfigError

ModelT = TypeVar("ModelT", bound=BaseModel)


def load_yaml_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping, raising :class:`ConfigError` naming the file on any failure."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return data


def validate_params(model: type[ModelT], params: dict[str, Any], source: str) -> ModelT:
    """Validate ``params`` into ``model``; errors name the source, field, value and bound."""
    try:
        return model.model_validate(params)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source)) from exc


def format_validation_error(exc: ValidationError, source: str) -> str:
    """One line per failing field: ``source: field = value: what is wrong``."""
    lines = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err.get("loc", ())) or "<model>"
        value = err.get("input")
        ctx = err.get("ctx") or {}
        bound = ", ".join(f"{k}={v}" for k, v in ctx.items() if k != "error")
        msg = err.get("msg", "invalid")
        text = f"{source}: {field} = {value!r}: {msg}"
        if bound:
            text += f" (bound: {bound})"
        lines.append(text)
    return "\n".join(lines)


def load_node_params(path: str | Path, node_name: str, model: type[ModelT]) -> ModelT:
    """Load ``node_name``'s ``ros__parameters`` from ``path`` into ``model``.

    Raises:
        ConfigError: the file is missing or malformed, the node section is
            absent, or a field is invalid (the message names file and field).
    """
    data = load_yaml_file(path)
    section = data.get(node_name)
    if section is None:
        section = data.get("/**")
    if not isinstance(section, dict) or "ros__parameters" not in section:
        raise ConfigError(
            f"{path}: no '{node_name}: ros__parameters:' section (found: {sorted(data)})"
        )
    params = section["ros__parameters"] or {}
    if not isinstance(params, dict):
        raise ConfigError(f"{path}: {node_name}.ros__parameters must be a mapping")
    return validate_params(model, params, f"{path} [{node_name}]")


def model_to_ros_params(config: BaseModel) -> dict[str, Any]:
    """Flatten a model to ROS parameter values (scalars and homogeneous lists)."""
    return config.model_dump(mode="json")
