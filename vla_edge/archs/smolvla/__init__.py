"""SmolVLA (Hugging Face, LeRobot) on stock ``transformers`` SmolVLM blocks, as three stages.

* :mod:`.config`: :class:`SmolVLAConfig` (``full``, ``tiny``).
* :mod:`.layers`: each place LeRobot's SmolVLA differs from stock transformers.
* :mod:`.model`: :class:`SmolVLAModel` (LeRobot's key layout; eager reference ``sample_actions``).
* :mod:`.stages`: ``vision_encoder``, ``fusion``, ``action_head`` and their tensor declarations.
* :mod:`.layout`: LeRobot checkpoint keys and the mapping onto the model.
"""

from vla_edge.archs.smolvla.config import SmolVLAConfig, SmolVLMTextSize, SmolVLMVisionSize
from vla_edge.archs.smolvla.model import SmolVLAModel, count_parameters
from vla_edge.archs.smolvla.stages import SmolVLAStages, build_stages, run_stages

__all__ = [
    "SmolVLAConfig",
    "SmolVLAModel",
    "SmolVLAStages",
    "SmolVLMTextSize",
    "SmolVLMVisionSize",
    "build_stages",
    "count_parameters",
    "run_stages",
]
