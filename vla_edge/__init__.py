"""vla_edge: Vision-Language-Action policies on edge computers under ROS 2, safely."""

__version__ = "0.1.0"
