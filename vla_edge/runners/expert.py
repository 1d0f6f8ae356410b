"""Moved to :mod:`vla_edge.sim.expert_runner` (the scripted expert belongs to the simulator).

This alias keeps ``vla_edge/sim/collect.py`` importing while that module is
rewritten elsewhere; delete it, and its known exception in
``test/test_layers.py``, once nothing imports ``vla_edge.runners.expert``.
"""

from vla_edge.sim.expert_runner import ExpertRunner

__all__ = ["ExpertRunner"]
