"""GR00T N1.7 (NVIDIA Isaac-GR00T) on stock ``transformers`` Qwen3-VL blocks, as three stages.

Upstream read: NVIDIA/Isaac-GR00T, the N1.7 model and processor (commits named in each
module's docstring). Apache-2.0 code; each checkpoint's weight licence is its own.

* :mod:`.config`: :class:`GrootConfig` (``full_n17``, ``tiny``).
* :mod:`.layers`: each place GR00T differs from stock transformers (deepstack, M-RoPE
  positions, the cut language model, the DiT's alternation and time conditioning, the
  per-embodiment slices, the flow's direction and time buckets).
* :mod:`.model`: :class:`GrootModel` (upstream's key layout; eager ``sample_actions``).
* :mod:`.stages`: ``vision_encoder``, ``fusion``, ``action_head`` (one Euler step, K = 4).
* :mod:`.layout`: upstream's checkpoint keys and the mapping to ours.
* :mod:`.checkpoint`: reading an N1.7 (or N1.5) checkpoint directory.
"""

from vla_edge.archs.groot.config import GrootConfig, TextSize, TransformerSize, VisionSize
from vla_edge.archs.groot.model import GrootModel, count_parameters
from vla_edge.archs.groot.stages import GrootStages, build_stages, head_actions, run_stages

__all__ = [
    "GrootConfig",
    "GrootModel",
    "GrootStages",
    "TextSize",
    "TransformerSize",
    "VisionSize",
    "build_stages",
    "count_parameters",
    "head_actions",
    "run_stages",
]
