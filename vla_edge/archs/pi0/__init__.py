"""π0 and π0.5 (Physical Intelligence, openpi) on stock ``transformers`` blocks, as three stages.

* :mod:`.config`: :class:`Pi0Config` (``full_pi0``, ``full_pi05``, ``tiny``).
* :mod:`.layers`: each place openpi's patched transformers differs from stock.
* :mod:`.model`: :class:`Pi0Model` (openpi's key layout; eager reference ``sample_actions``).
* :mod:`.stages`: ``vision_encoder``, ``fusion``, ``action_head`` and their tensor declarations.
* :mod:`.layout`: openpi / LeRobot checkpoint keys and the mappings between them.
* :mod:`.prompt`: the host-side prompt text (π0.5's discretised state).
"""

from vla_edge.archs.pi0.config import GemmaSize, Pi0Config, SiglipSize
from vla_edge.archs.pi0.model import Pi0Model, count_parameters
from vla_edge.archs.pi0.stages import (
    Pi0Stages,
    TensorSpec,
    build_stages,
    head_actions,
    run_stages,
)

__all__ = [
    "GemmaSize",
    "Pi0Config",
    "Pi0Model",
    "Pi0Stages",
    "SiglipSize",
    "TensorSpec",
    "build_stages",
    "count_parameters",
    "head_actions",
    "run_stages",
]
