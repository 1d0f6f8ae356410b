"""The controller's fixed-rate loop thread."""

import time

from vla_edge.nodes.fixed_rate import FixedRateLoop, try_realtime_priority, try_realtime_process


def test_loop_ticks_at_its_rate_without_drift():
    stamps = []
    loop = FixedRateLoop(200.0, lambda: stamps.append(time.monotonic()), lambda exc: None)
    loop.start()
    time.sleep(0.5)
    loop.stop()
    assert 80 <= len(stamps) <= 102
    mean_period_s = (stamps[-1] - stamps[0]) / (len(stamps) - 1)
    assert abs(mean_period_s - 0.005) < 0.0015


def test_an_exception_in_a_tick_is_reported_and_the_loop_goes_on():
    errors = []
    count = [0]

    def tick():
        count[0] += 1
        if count[0] == 2:
            raise RuntimeError("boom")

    loop = FixedRateLoop(200.0, tick, errors.append)
    loop.start()
    time.sleep(0.1)
    loop.stop()
    assert count[0] > 5
    assert len(errors) == 1 and "boom" in str(errors[0])


def test_priority_zero_keeps_the_default_scheduler():
    assert try_realtime_priority(0).startswith("default scheduler")


def test_process_priority_zero_keeps_the_default_scheduler():
    assert try_realtime_process(0).startswith("default scheduler")


def test_stop_reports_whether_the_thread_ended():
    import threading

    release = threading.Event()
    loop = FixedRateLoop(200.0, lambda: release.wait(5.0), lambda exc: None)
    loop.start()
    time.sleep(0.05)  # the first tick is now blocked inside ``tick``
    assert loop.stop(timeout_s=0.1) is False
    release.set()
    assert loop.stop(timeout_s=5.0) is True
