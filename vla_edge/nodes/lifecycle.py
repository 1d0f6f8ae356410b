"""The ``main()`` of every node: init rclpy, build the node, spin until Ctrl-C or shutdown.

Imports only rclpy and :mod:`vla_edge.core`, so the safety node can use it and
stay independent of the control, runner and sim code.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

import rclpy
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node

from vla_edge.core.errors import VlaEdgeError

NodeT = TypeVar("NodeT", bound=Node)


def run_node(
    name: str,
    make_node: Callable[[], NodeT],
    cleanup: Callable[[NodeT], None] | None = None,
    args: list[str] | None = None,
    fast_gil_switch: bool = False,
) -> int:
    """Spin ``make_node()``; 0 on a normal shutdown, 1 on a named start-up error.

    Args:
        name: node name for the fatal-error line.
        cleanup: called with the node before it is destroyed (stop loops, close files).
        fast_gil_switch: hand the GIL back every 0.5 ms, for nodes whose fixed-rate
            loop thread must not wait on the executor thread.
    """
    rclpy.init(args=args)
    if fast_gil_switch:
        sys.setswitchinterval(0.0005)
    node: NodeT | None = None
    try:
        node = make_node()
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except RuntimeError:
        # A message taken while the context shuts down (SIGINT from the
        # launcher) fails inside rclpy's executor; after shutdown that is the
        # normal end, before it a real error.
        if rclpy.ok():
            raise
    except VlaEdgeError as exc:
        print(f"[FATAL] {name}: {type(exc).__name__}: {exc}", flush=True)
        return 1
    finally:
        if node is not None:
            if cleanup is not None:
                cleanup(node)
            node.destroy_node()
        # not ``if rclpy.ok(): rclpy.shutdown()``: rclpy's SIGINT handler may shut the
        # context down between the two calls, and the second shutdown raises
        rclpy.try_shutdown()
    return 0
