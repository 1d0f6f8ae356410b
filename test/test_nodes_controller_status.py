"""The controller node formats its diagnostics without holding the control loop's lock.

The loop takes ``lock`` every tick; the histograms' percentiles and bins take
milliseconds to format once an hour of values has filled them, so formatting them
under the lock delayed one tick a second by that much (the soak's p99 jitter grew
from 1.5 ms to 9.5 ms over the hour). ``status`` runs on a stand-in holding just the
attributes it uses, around the real controller core, watchdog and histograms.
"""

import threading
from types import SimpleNamespace

import numpy as np

from vla_edge.config.models import ControllerConfig
from vla_edge.control.controller import Controller
from vla_edge.control.homing import Homing, SafetyStopView, load_homing_limits
from vla_edge.control.watchdog import Watchdog
from vla_edge.nodes.controller_node import ControllerNode
from vla_edge.nodes.metrics import BadInputCounter, Histogram, PeriodJitter

NOW_S = 1_700_000_000.0


class LockCheckingHistogram(Histogram):
    """Records whether ``lock`` was held each time it was summarised."""

    lock: threading.Lock
    held_while_summarised: list[bool]

    def summary(self, prefix):
        self.held_while_summarised.append(self.lock.locked())
        return super().summary(prefix)


def _watched(histogram: Histogram, lock: threading.Lock, seen: list[bool]) -> Histogram:
    histogram.__class__ = LockCheckingHistogram
    histogram.lock, histogram.held_while_summarised = lock, seen
    return histogram


def _node():
    config = ControllerConfig()
    watchdog = Watchdog.from_controller_config(config, start_s=NOW_S)
    watchdog.beat("joint_state", NOW_S)
    watchdog.beat("control_loop", NOW_S)
    lock, seen = threading.Lock(), []
    jitter = PeriodJitter(1.0 / config.rate_hz)
    rng = np.random.default_rng(0)
    for t in np.cumsum(0.01 + np.abs(rng.standard_normal(2000)) * 1e-3):
        jitter.tick(float(t))
    _watched(jitter.jitter_ms, lock, seen)
    _watched(jitter.period_ms, lock, seen)
    ages = _watched(Histogram(1.0, 5000.0), lock, seen)
    for age in rng.uniform(80.0, 200.0, 500):
        ages.add(float(age))
    node = SimpleNamespace(
        config=config,
        controller=Controller(config, initial_positions=np.zeros(len(config.joint_names))),
        watchdog=watchdog,
        bad_input=BadInputCounter(lambda _: None),
        lock=lock,
        jitter=jitter,
        chunk_age_ms=ages,
        underruns=0,
        loop=SimpleNamespace(scheduler="SCHED_FIFO 80", missed_deadlines=0),
        process_scheduler="SCHED_FIFO 79",
        loop_errors=0,
        homing=Homing(load_homing_limits(config), 0.01, config.joint_names, 0.02, 2.0),
        safety_stop=SafetyStopView(max_status_age_s=3.0),
    )
    node._status_locked = lambda now_s: ControllerNode._status_locked(node, now_s)
    node._homing_refusal_locked = lambda now_s: ControllerNode._homing_refusal_locked(node, now_s)
    return node, seen


def test_histograms_are_formatted_after_the_loops_lock_is_released():
    node, seen = _node()
    status = ControllerNode.status(node, NOW_S)
    assert seen == [False, False, False]  # every summary, none under the lock
    assert not node.lock.locked()
    # the figures are the histograms' own
    assert status["period_jitter_ms_count"] == 1999
    assert status["period_jitter_ms_p99"] == node.jitter.jitter_ms.percentile(99)
    assert status["chunk_age_ms_bins"] == node.chunk_age_ms.bins()
    assert status["level"] in ("OK", "WARN")


def test_a_copy_of_a_histogram_is_a_snapshot():
    histogram = Histogram(0.5, 10.0)
    for value in (0.1, 2.0, 2.2, 40.0):
        histogram.add(value)
    snapshot = histogram.copy()
    histogram.add(3.0)
    assert snapshot.count == 4 and histogram.count == 5
    assert snapshot.bins() == "0:1,4:2,20:1"
    assert snapshot.summary("x")["x_max"] == 40.0 and snapshot.mean == (0.1 + 2.0 + 2.2 + 40.0) / 4


def _published_categories(messages):
    return [
        {kv.key: kv.value for kv in msg.status[0].values}["watchdog_category"] for msg in messages
    ]


def _publishing_node():
    """:func:`_node` with a clock, a publisher recording each status and the poll."""
    node, _ = _node()
    clock = {"now_s": NOW_S}
    published = []
    node.diagnostic_name = "vla_edge/controller"
    node.diag_pub = SimpleNamespace(publish=published.append)
    node._now_s = lambda: clock["now_s"]
    node._published_category = "none"
    node._published_homing = "idle"
    node._published_refusing = False
    node.status = lambda now_s: ControllerNode.status(node, now_s)
    node._publish_diagnostics = lambda: ControllerNode._publish_diagnostics(node)
    poll = lambda: ControllerNode._publish_on_stop_change(node)  # noqa: E731
    return node, clock, published, poll


def test_a_change_of_stop_category_is_published_at_once_and_only_once():
    """A stop that starts and clears between two 1 Hz statuses still reaches /diagnostics."""
    node, clock, published, poll = _publishing_node()

    def beat(*names):
        for name in names:
            node.watchdog.beat(name, clock["now_s"])

    beat("observation", "chunk")
    poll()
    assert published == []  # every heartbeat fresh: nothing to say between statuses
    clock["now_s"] = NOW_S + node.config.observation_timeout_s + 0.05
    beat("joint_state", "control_loop", "chunk")  # only the observation is old
    poll()
    poll()
    assert _published_categories(published) == ["cat1"]  # the onset, once
    clock["now_s"] += 0.03
    beat("joint_state", "control_loop", "chunk", "observation")
    poll()
    poll()
    assert _published_categories(published) == ["cat1", "none"]  # the clearing, once
    # a periodic status that already showed a change leaves nothing to force
    node.watchdog.beat("observation", NOW_S)
    ControllerNode._publish_diagnostics(node)
    poll()
    assert _published_categories(published) == ["cat1", "none", "cat1"]


def test_whether_homing_would_be_refused_is_published_at_once_with_the_reason():
    node, clock, published, poll = _publishing_node()
    for name in ("observation", "chunk"):
        node.watchdog.beat(name, NOW_S)
    node.safety_stop.on_status("none", "", False, NOW_S, NOW_S)
    poll()
    assert published == []
    node.safety_stop.on_estop(NOW_S + 0.01)  # a press: refused at once
    poll()
    poll()
    refusals = [
        {kv.key: kv.value for kv in m.status[0].values}["homing.refusal"] for m in published
    ]
    assert len(refusals) == 1 and "e-stop" in refusals[0]
    # a status stamped after the press with the latch cleared: allowed again, said once
    clock["now_s"] += 0.5
    for name in ("joint_state", "control_loop"):
        node.watchdog.beat(name, clock["now_s"])
    node.safety_stop.on_status("cat2", "awaiting_command", False, NOW_S + 0.4, clock["now_s"])
    poll()
    poll()
    refusals = [
        {kv.key: kv.value for kv in m.status[0].values}["homing.refusal"] for m in published
    ]
    assert refusals[1:] == [""]
