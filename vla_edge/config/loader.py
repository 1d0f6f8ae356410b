"""Load configs from YAML in the ROS 2 parameter-file shape.

A parameter file looks like::

    controller_node:
      ros__parameters:
        rate_hz: 100.0

and the same file feeds the ROS node (``--ros-args --params-file``) and the
ROS-free cores (:func:`load_node_params`).
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from vla_edge.core.errors import ConfigError, DuplicateKeyError

ModelT = TypeVar("ModelT", bound=BaseModel)


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping."""


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode) -> dict:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        line = key_node.start_mark.line + 1
        if key in seen:
            raise DuplicateKeyError(
                f"line {line}: key {key!r} appears twice in one mapping (first on line "
                f"{seen[key]}); YAML would keep only the last: name it once"
            )
        seen[key] = line
    return loader.construct_mapping(node)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping
)


def load_yaml_file(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping, raising :class:`ConfigError` naming the file on any failure."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: config file not found")
    try:
        data = yaml.load(path.read_text(), Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    except DuplicateKeyError as exc:
        raise DuplicateKeyError(f"{path}: {exc}") from exc
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping, got {type(data).__name__}")
    return data


def mapping_fields(model: type[BaseModel]) -> dict[str, type[BaseModel]]:
    """The fields of ``model`` that map names to a model (``joints: dict[str, JointLimitsConfig]``).

    Their entries are parameters ``<field>.<name>.<entry field>`` in ROS.
    """
    out = {}
    for name, field in model.model_fields.items():
        if typing.get_origin(field.annotation) is dict:
            _, value = typing.get_args(field.annotation)
            if isinstance(value, type) and issubclass(value, BaseModel):
                out[name] = value
    return out


def nest_parameters(model: type[BaseModel], params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with the entries of ``model``'s mapping fields nested.

    rcl flattens ``joints: {joint1: {position_min: -2.9}}`` in a parameter file to
    ``joints.joint1.position_min``; this puts it back, so that a file in either
    form, or a node's parameters, validate the same. Other names are kept as
    they are (the model refuses the unknown ones); ``params`` is not changed.

    Raises:
        ConfigError: a name of a mapping field is not ``<field>.<name>.<entry field>``,
            or one is given twice (nested and dotted).
    """
    nested_fields = mapping_fields(model)
    out: dict[str, Any] = {}
    dotted: list[tuple[str, Any]] = []
    for name, value in params.items():
        head, _, rest = name.partition(".")
        if head not in nested_fields:
            out[name] = value
        elif rest:
            dotted.append((name, value))
        elif isinstance(value, dict):
            out.setdefault(head, {})  # an empty mapping stays one (the model says it is empty)
            for key, entry in value.items():
                if isinstance(entry, dict):
                    dotted += [(f"{head}.{key}.{field}", v) for field, v in entry.items()]
                else:
                    dotted.append((f"{head}.{key}", entry))
        else:
            out[name] = value  # not a mapping: the model refuses it, naming the field
    for name, value in dotted:
        head, _, rest = name.partition(".")
        key, _, entry = rest.rpartition(".")
        if not key:
            raise ConfigError(f"{name} = {value!r}: expected {head}.<name>.<field>")
        table = out.setdefault(head, {})
        if not isinstance(table, dict):
            raise ConfigError(f"{name}: {head} = {table!r} is not a mapping")
        if entry in table.setdefault(key, {}):
            raise ConfigError(f"{name}: given twice (nested and as a dotted name)")
        table[key][entry] = value
    return out


def validate_params(model: type[ModelT], params: dict[str, Any], source: str) -> ModelT:
    """Validate ``params`` into ``model``; errors name the source, field, value and bound.

    Dotted names of a mapping field (``joints.joint1.position_min``) are nested first.
    """
    try:
        return model.model_validate(nest_parameters(model, params))
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source)) from exc
    except ConfigError as exc:  # a named refusal from a validator, e.g. the old form of a file
        raise type(exc)(f"{source}: {exc}") from exc


def format_validation_error(exc: ValidationError, source: str) -> str:
    """One line per failing field: ``source: field = value: what is wrong``."""
    lines = []
    for err in exc.errors():
        field = ".".join(str(p) for p in err.get("loc", ())) or "<model>"
        value = err.get("input")
        ctx = err.get("ctx") or {}
        bound = ", ".join(f"{k}={v}" for k, v in ctx.items() if k != "error")
        msg = err.get("msg", "invalid")
        if not err.get("loc"):  # a check across fields: the message names them and their values
            lines.append(f"{source}: {msg}")
            continue
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


def flatten_parameters(params: dict[str, Any]) -> dict[str, Any]:
    """Nested mappings of ``params`` as dotted names, the way rcl reads a parameter file.

    ``{"joints": {"joint1": {"position_min": -2.9}}}`` -> ``{"joints.joint1.position_min": -2.9}``.
    """
    out: dict[str, Any] = {}
    for name, value in params.items():
        if isinstance(value, dict):
            out.update({f"{name}.{k}": v for k, v in flatten_parameters(value).items()})
        else:
            out[name] = value
    return out


def model_to_ros_params(config: BaseModel) -> dict[str, Any]:
    """Flatten a model to ROS parameter values (scalars and homogeneous lists).

    A mapping field's entries become dotted names (``joints.joint1.position_min``),
    the inverse of :func:`nest_parameters`.
    """
    return flatten_parameters(config.model_dump(mode="json"))
