"""ROS parameters declared from the pydantic config models, and read back into them.

Each field of a node's config model is one parameter, declared with a
descriptor derived from the field (as ``generate_parameter_library`` does for
ros2_controllers' JointTrajectoryController), so that ``ros2 param describe``
says what the model checks and the two never disagree:

* type: from the annotation (``float`` -> double, ``list[str]`` -> string array,
  a ``Literal`` of strings -> string, ...);
* description: the field's ``description`` (one line, with the unit);
* range: ``FloatingPointRange`` / ``IntegerRange`` from the ``ge``/``gt``/``le``/``lt``
  bounds (ROS ranges are inclusive: an exclusive bound becomes the next
  representable value; a missing side is the type's extreme);
* additional constraints (text): the bounds as written, the choices of a
  ``Literal``, a minimum length;
* read only, except the parameters a node reads again at run time.

A field that maps names to a model (the safety node's ``joints``) is no
parameter itself: each entry's fields are, ``joints.<name>.<field>``, with the
descriptor of the entry model's field, as ros2_control's joint limits are
declared per joint.

The values are validated by the model *before* they are declared, so a bad
value is a :class:`~vla_edge.core.errors.ConfigError` naming the node, field,
value and bound, never rclpy's own exception.
"""

from __future__ import annotations

import array
import math
import sys
import typing
from collections.abc import Iterable
from typing import Any, Literal, TypeVar

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from rcl_interfaces.msg import (
    FloatingPointRange,
    IntegerRange,
    ParameterDescriptor,
    ParameterType,
)
from rclpy.node import Node
from rclpy.parameter import Parameter

from vla_edge.config.loader import mapping_fields, validate_params

ModelT = TypeVar("ModelT", bound=BaseModel)

# Parameters rclpy declares on every node; they are not part of our configs.
ROS_BUILTIN_PARAMETERS = frozenset({"use_sim_time", "start_type_description_service"})

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
DOUBLE_MAX = sys.float_info.max  # a one-sided bound's open side: finite, as the limits are

_SCALAR_TYPES = {
    bool: ParameterType.PARAMETER_BOOL,
    int: ParameterType.PARAMETER_INTEGER,
    float: ParameterType.PARAMETER_DOUBLE,
    str: ParameterType.PARAMETER_STRING,
}
_ARRAY_TYPES = {
    bool: ParameterType.PARAMETER_BOOL_ARRAY,
    int: ParameterType.PARAMETER_INTEGER_ARRAY,
    float: ParameterType.PARAMETER_DOUBLE_ARRAY,
    str: ParameterType.PARAMETER_STRING_ARRAY,
}


def parameter_type(annotation: Any) -> int:
    """The ``ParameterType`` of a field annotation.

    Raises:
        TypeError: the annotation has no ROS parameter type (a model error).
    """
    origin = typing.get_origin(annotation)
    if origin is Literal:
        kinds = {type(choice) for choice in typing.get_args(annotation)}
        if len(kinds) == 1 and (kind := kinds.pop()) in _SCALAR_TYPES:
            return _SCALAR_TYPES[kind]
    elif origin is list:
        (item,) = typing.get_args(annotation)
        if item in _ARRAY_TYPES:
            return _ARRAY_TYPES[item]
    elif annotation in _SCALAR_TYPES:
        return _SCALAR_TYPES[annotation]
    raise TypeError(f"{annotation!r} has no ROS 2 parameter type")


_BOUND_TYPES = {
    "ge": annotated_types.Ge,
    "gt": annotated_types.Gt,
    "le": annotated_types.Le,
    "lt": annotated_types.Lt,
    "min_length": annotated_types.MinLen,
}


def field_bounds(field: FieldInfo) -> dict[str, Any]:
    """``{"ge"|"gt"|"le"|"lt"|"min_length": value}`` of a field."""
    return {
        key: getattr(item, key)
        for item in field.metadata
        for key, kind in _BOUND_TYPES.items()
        if isinstance(item, kind)
    }


def _constraints_text(annotation: Any, bounds: dict[str, Any]) -> str:
    parts = []
    if typing.get_origin(annotation) is Literal:
        parts.append("one of: " + ", ".join(str(c) for c in typing.get_args(annotation)))
    low = (f"{bounds['ge']} <= " if "ge" in bounds else "") + (
        f"{bounds['gt']} < " if "gt" in bounds else ""
    )
    high = (f" <= {bounds['le']}" if "le" in bounds else "") + (
        f" < {bounds['lt']}" if "lt" in bounds else ""
    )
    if low or high:
        parts.append(f"{low}value{high}")
    if "min_length" in bounds:
        parts.append(f"at least {bounds['min_length']} entries")
    return "; ".join(parts)


def parameter_descriptor(
    name: str, field: FieldInfo, read_only: bool = True
) -> ParameterDescriptor:
    """The descriptor of field ``name``: type, description, range, constraints, read-only."""
    ros_type = parameter_type(field.annotation)
    bounds = field_bounds(field)
    descriptor = ParameterDescriptor(
        name=name,
        type=ros_type,
        description=field.description or "",
        additional_constraints=_constraints_text(field.annotation, bounds),
        read_only=read_only,
    )
    has_bound = any(key in bounds for key in ("ge", "gt", "le", "lt"))
    if ros_type == ParameterType.PARAMETER_DOUBLE and has_bound:
        low = bounds.get("ge", math.nextafter(bounds["gt"], math.inf) if "gt" in bounds else None)
        high = bounds.get("le", math.nextafter(bounds["lt"], -math.inf) if "lt" in bounds else None)
        descriptor.floating_point_range = [
            FloatingPointRange(
                from_value=float(-DOUBLE_MAX if low is None else low),
                to_value=float(DOUBLE_MAX if high is None else high),
                step=0.0,
            )
        ]
    elif ros_type == ParameterType.PARAMETER_INTEGER and has_bound:
        low = bounds.get("ge", bounds["gt"] + 1 if "gt" in bounds else INT64_MIN)
        high = bounds.get("le", bounds["lt"] - 1 if "lt" in bounds else INT64_MAX)
        descriptor.integer_range = [IntegerRange(from_value=low, to_value=high, step=1)]
    return descriptor


def parameter_overrides(node: Node) -> dict[str, Any]:
    """The values ``node`` was started with for parameters it has not declared yet.

    They come from ``--params-file``, ``-p`` and ``parameter_overrides=``;
    rclpy keeps them in ``Node._parameter_overrides`` (Humble to Kilted) and
    has no public accessor for them before a parameter is declared; read
    directly, so that a change in rclpy fails loudly instead of silently
    ignoring the parameter file.
    """
    return {
        name: _plain(param.value)
        for name, param in node._parameter_overrides.items()
        if not node.has_parameter(name)
    }


def declare_config(node: Node, model: type[ModelT], run_time: Iterable[str] = ()) -> ModelT:
    """Validate ``node``'s parameter overrides into ``model``; declare every field.

    Each field becomes a parameter with :func:`parameter_descriptor`, holding
    the validated value (an integer given for a float field is declared as a
    float; an empty list is declared with its type and no value, as rclpy
    cannot infer an array's type from no elements).

    Args:
        run_time: fields the node reads again while it runs; they stay writable
            (``ros2 param set``), the others are read only.

    Raises:
        ConfigError: a value is invalid or a parameter unknown (names node, field,
            value and bound).
    """
    config = validate_params(model, parameter_overrides(node), f"node {node.get_name()}")
    writable = set(run_time)
    unknown = writable - set(model.model_fields)
    if unknown:
        raise ValueError(f"run-time parameters {sorted(unknown)} are not fields of {model}")
    for name, field, value in config_parameters(config):
        read_only = name.partition(".")[0] not in writable
        descriptor = parameter_descriptor(name, field, read_only=read_only)
        if isinstance(value, list) and not value:
            node.declare_parameter(
                name, Parameter.Type(descriptor.type), descriptor, ignore_override=True
            )
        else:
            node.declare_parameter(name, value, descriptor, ignore_override=True)
    return config


def config_parameters(config: BaseModel) -> list[tuple[str, FieldInfo, Any]]:
    """``(parameter name, field, value)`` of every ROS parameter of ``config``, in field order.

    A field that maps names to a model gives one parameter per entry and entry
    field (``joints.joint1.position_min``), in the mapping's order.
    """
    model = type(config)
    nested = mapping_fields(model)
    out: list[tuple[str, FieldInfo, Any]] = []
    for name, field in model.model_fields.items():
        value = getattr(config, name)
        if name not in nested:
            out.append((name, field, value))
            continue
        for key, entry in value.items():
            for entry_name, entry_field in nested[name].model_fields.items():
                out.append((f"{name}.{key}.{entry_name}", entry_field, getattr(entry, entry_name)))
    return out


def parameter_dict(node: Any) -> dict[str, Any]:
    """Every declared parameter of ``node`` with a value, as plain Python (arrays -> lists)."""
    out: dict[str, Any] = {}
    for name, param in node.get_parameters_by_prefix("").items():
        if name in ROS_BUILTIN_PARAMETERS or param.type_ == Parameter.Type.NOT_SET:
            continue
        out[name] = _plain(param.value)
    return out


def config_from_parameters(node: Any, model: type[ModelT]) -> ModelT:
    """Validate the node's declared parameters (their current values) into ``model``.

    Dotted names (``joints.joint1.position_min``) are nested back into their field.

    Raises:
        ConfigError: a field is invalid or unknown (names node, field, value and bound).
    """
    return validate_params(model, parameter_dict(node), f"node {node.get_name()}")


def _plain(value: Any) -> Any:
    if isinstance(value, array.array | tuple):
        return list(value)
    return value
