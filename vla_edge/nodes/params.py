"""ROS parameters -> the pydantic config models the cores use."""

from __future__ import annotations

import array
from typing import Any, TypeVar

from pydantic import BaseModel

from vla_edge.config.loader import validate_params

ModelT = TypeVar("ModelT", bound=BaseModel)

# Parameters rclpy declares on every node; they are not part of our configs.
ROS_BUILTIN_PARAMETERS = frozenset({"use_sim_time", "start_type_description_service"})


def parameter_dict(node: Any) -> dict[str, Any]:
    """Every declared parameter of ``node`` as plain Python values (arrays -> lists)."""
    out: dict[str, Any] = {}
    for name, param in node.get_parameters_by_prefix("").items():
        if name in ROS_BUILTIN_PARAMETERS:
            continue
        value = param.value
        if isinstance(value, array.array | tuple):
            value = list(value)
        out[name] = value
    return out


def config_from_parameters(node: Any, model: type[ModelT]) -> ModelT:
    """Validate the node's parameters into ``model``.

    The node must be created with ``automatically_declare_parameters_from_overrides``
    so that the parameter file (``--params-file``) and ``-p`` overrides define
    them; fields absent from both take the model's defaults.

    Raises:
        ConfigError: a field is invalid or unknown (names node, field, value and bound).
    """
    return validate_params(model, parameter_dict(node), f"node {node.get_name()}")
