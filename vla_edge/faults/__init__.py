"""Fault injection: scenarios, injectors, a virtual-time harness, metrics and the suite.

* :mod:`~vla_edge.faults.scenario` — the YAML schema (``config/faults/*.yaml``)
  with the expected response of each fault, and suites (``suites.yaml``).
* :mod:`~vla_edge.faults.injectors` — one class per fault over the core types,
  at the seams of the graph (camera, joint state, chunk, inference, process,
  clock, e-stop); ``vla_edge/nodes/fault_injector_node.py`` wraps them on ROS.
* :mod:`~vla_edge.faults.harness` — the closed loop in virtual time mirroring
  the ROS graph (sim, inference, controller + watchdog, safety, env).
* :mod:`~vla_edge.faults.metrics` — detection, halt, peaks, limit violations,
  recovery, pass/fail; :mod:`~vla_edge.faults.plots` — a PNG per scenario.
* :mod:`~vla_edge.faults.suite` — run a suite in virtual time (the same
  scenarios on the real ROS graph: :mod:`vla_edge.nodes.fault_suite`, since
  this package imports no ROS); the command (:mod:`vla_edge.cli.faults`) is
  ``vla-edge faults run [--suite default] [--ros] [--scenarios …] --json OUT [--plots DIR]``.
"""
