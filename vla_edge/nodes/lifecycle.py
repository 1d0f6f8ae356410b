"""The ``main()`` of every node: init rclpy, build the node, spin until Ctrl-C or shutdown.

Imports only rclpy and :mod:`vla_edge.core`, so the safety node can use it and
stay independent of the control, runner and sim code.
"""

from __future__ import annotations

import faulthandler
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeVar

import rclpy
from rclpy.clock import Clock, ClockType
from rclpy.executors import ExternalShutdownException
from rclpy.node import Node
from rclpy.timer import Timer

from vla_edge.core.errors import VlaEdgeError

NodeT = TypeVar("NodeT", bound=Node)

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# how long an executor error waits for a stop signal's shutdown to show
SHUTDOWN_SETTLE_S = 1.0


def steady_timer(node: Node, period_s: float, callback: Callable[[], None]) -> Timer:
    """A timer of ``node`` on the steady clock: a step of the system clock does not stall it.

    A timer on the node's (system) clock waits out a backward step before it
    fires again; rate loops run on a steady clock instead, and read the system
    clock only to stamp what they publish.
    """
    return node.create_timer(period_s, callback, clock=Clock(clock_type=ClockType.STEADY_TIME))


class StopSignals:
    """Records that SIGINT or SIGTERM arrived, then hands the signal on.

    Installed before ``rclpy.init``: rclpy's own handler (which wakes the
    executor and shuts the context down) calls the Python handler it found, so
    this one runs as well and then behaves as the handler it replaced
    (``KeyboardInterrupt`` for SIGINT). Only the main thread may install it;
    elsewhere nothing is installed and only ``rclpy.ok()`` tells.
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    @property
    def installable(self) -> bool:
        """Whether this thread may install signal handlers (the main thread only)."""
        return threading.current_thread() is threading.main_thread()

    def install(self) -> None:
        """Put the recorder in front of the current SIGINT/SIGTERM handlers (main thread only)."""
        if not self.installable:
            return
        for signum in STOP_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._on_signal)

    def restore(self) -> None:
        """Put back the handlers ``install`` replaced."""
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.received = signum
        previous = self._previous.get(signum)
        if callable(previous):
            previous(signum, frame)

    def stopping(self, settle_s: float = SHUTDOWN_SETTLE_S) -> bool:
        """True when a stop signal arrived or the context is shut down, waiting up to ``settle_s``.

        The wait lets a signal that is still being delivered (rclpy's handler
        shuts the context down on its own thread) show before an executor
        error is called a real one.
        """
        deadline = time.monotonic() + settle_s
        while True:
            try:
                if self.received is not None or not rclpy.ok():
                    return True
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.01)
            except KeyboardInterrupt:
                return True


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
    stop_signals = StopSignals()
    stop_signals.install()
    rclpy.init(args=args)
    # SIGTERM comes after SIGINT did not stop the node in time (the launcher's and
    # the fault suite's stop): write every thread's stack to the node's log first,
    # then hand on to rclpy's handler, so that a hung stop says where it hangs
    dump_on_sigterm = stop_signals.installable
    if dump_on_sigterm:
        faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)
    if fast_gil_switch:
        sys.setswitchinterval(0.0005)
    node: NodeT | None = None
    try:
        node = make_node()
        rclpy.spin(node)
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except RuntimeError:
        # A message taken while a stop signal shuts the context down fails
        # inside rclpy's executor ("Unable to convert call argument"), at times
        # before rclpy.ok() turns false; after a stop signal that is the
        # normal end, without one a real error.
        if not stop_signals.stopping():
            raise
    except VlaEdgeError as exc:
        print(f"[FATAL] {name}: {type(exc).__name__}: {exc}", flush=True)
        return 1
    finally:
        try:
            if node is not None:
                if cleanup is not None:
                    cleanup(node)
                node.destroy_node()
            # not ``if rclpy.ok(): rclpy.shutdown()``: rclpy's SIGINT handler may shut the
            # context down between the two calls, and the second shutdown raises
            rclpy.try_shutdown()
        finally:
            if dump_on_sigterm:
                faulthandler.unregister(signal.SIGTERM)
            stop_signals.restore()
    return 0
