"""Validated configuration models and their YAML / ROS-parameter loading."""

from vla_edge.config.loader import load_node_params, load_yaml_file, model_to_ros_params
from vla_edge.config.models import (
    ControllerConfig,
    FaultsConfig,
    InferenceConfig,
    SafetyConfig,
    SimConfig,
)

__all__ = [
    "ControllerConfig",
    "FaultsConfig",
    "InferenceConfig",
    "SafetyConfig",
    "SimConfig",
    "load_node_params",
    "load_yaml_file",
    "model_to_ros_params",
]
