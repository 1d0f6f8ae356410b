"""The inference node keeps only the newest observation and never queues."""

import threading
import time

import numpy as np
import pytest

from vla_edge.core.errors import ConfigError
from vla_edge.core.types import ActionChunk
from vla_edge.inference.observation_slot import ObservationSlot

CAMS = ("agentview", "wrist")


def _img(value):
    return np.full((2, 2, 3), value, dtype=np.uint8)


def _fill(slot, stamp, value=0):
    for cam in CAMS:
        slot.put_image(cam, stamp, _img(value))


def test_nothing_is_taken_without_a_request_or_a_complete_observation():
    slot = ObservationSlot(CAMS)
    slot.put_image("agentview", 1.0, _img(1))
    slot.put_state(0.0, np.zeros(7))
    slot.put_instruction("pick")
    slot.request(None, 1.0)
    assert slot.take(0.01) is None  # wrist missing
    slot.put_image("wrist", 1.0, _img(1))
    assert slot.take(0.01) is not None
    _fill(slot, 2.0)
    assert slot.take(0.01) is None  # request consumed


def test_only_the_newest_frames_are_used_and_older_ones_are_dropped():
    slot = ObservationSlot(CAMS)
    slot.put_state(4.0, np.ones(7))
    slot.put_instruction("pick")
    for k in range(5):
        _fill(slot, float(k), value=k)
    slot.request(None, 10.0)
    item = slot.take(0.01)
    assert item.observation.stamp_s == 4.0
    assert item.observation.images["wrist"][0, 0, 0] == 4
    assert slot.dropped_frames == 8
    slot.request(None, 11.0)
    assert slot.take(0.01) is None  # no frame newer than the one used


def test_observation_stamp_is_the_oldest_camera_frame():
    slot = ObservationSlot(CAMS)
    slot.put_state(5.0, np.zeros(7))
    slot.put_instruction("pick")
    slot.put_image("agentview", 5.0, _img(0))
    slot.put_image("wrist", 4.9, _img(0))
    slot.request(None, 5.0)
    assert slot.take(0.01).observation.stamp_s == 4.9


def test_requests_made_before_the_last_chunk_was_published_are_dropped():
    slot = ObservationSlot(CAMS)
    slot.put_state(0.0, np.zeros(7))
    slot.put_instruction("pick")
    _fill(slot, 1.0)
    slot.request(None, 0.5)
    slot.mark_published(1.0)
    assert slot.take(0.01) is None
    slot.request(None, 0.9)  # in flight when the chunk went out
    assert slot.stale_requests == 1
    plan = ActionChunk(1.2, 0.1, ("a",), np.zeros((3, 1)))
    slot.request(plan, 1.2)
    item = slot.take(0.01)
    assert item.plan is plan and item.plan_stamp_s == 1.2


def test_a_request_stamped_within_the_chunk_transit_after_a_publish_is_dropped():
    # over DDS the controller's tick can fall between the publish and the chunk's
    # arrival: a request stamped then was made without that chunk, and answering it
    # would be a second inference right after the first
    slot = ObservationSlot(CAMS, chunk_transit_s=0.02)
    slot.put_state(0.0, np.zeros(7))
    slot.put_instruction("pick")
    _fill(slot, 1.0)
    slot.request(None, 1.005)  # arrives while the chunk is computed
    slot.mark_published(1.01)  # pending, and stamped before 1.01 + 0.02: dropped
    _fill(slot, 1.1)  # a newer frame would otherwise start the second inference
    assert slot.take(0.01) is None
    slot.request(None, 1.025)  # the same tick's request, in flight at the publish
    assert slot.stale_requests == 1 and slot.take(0.01) is None
    slot.request(None, 1.03)  # the controller asks again once it has the chunk
    item = slot.take(0.01)
    assert item is not None and item.plan_stamp_s == 1.03


@pytest.mark.parametrize("transit_s", [-0.01, float("nan"), float("inf")])
def test_a_chunk_transit_that_is_negative_or_not_finite_is_a_named_error(transit_s):
    with pytest.raises(ConfigError, match="chunk_transit_s"):
        ObservationSlot(CAMS, chunk_transit_s=transit_s)


def test_a_waiting_worker_wakes_on_the_request_and_on_close():
    slot = ObservationSlot(CAMS)
    slot.put_state(0.0, np.zeros(7))
    slot.put_instruction("pick")
    _fill(slot, 1.0)
    got = []
    worker = threading.Thread(target=lambda: got.append(slot.take(5.0)))
    worker.start()
    time.sleep(0.05)
    slot.request(None, 1.0)
    worker.join(2.0)
    assert got and got[0] is not None
    worker = threading.Thread(target=lambda: got.append(slot.take(5.0)))
    worker.start()
    slot.close()
    worker.join(2.0)
    assert not worker.is_alive() and got[-1] is None


def test_frames_are_paired_with_the_joint_state_measured_closest_to_their_capture():
    slot = ObservationSlot(CAMS)
    slot.put_instruction("pick")
    for k in range(10):
        slot.put_state(1.0 + 0.01 * k, np.full(7, float(k)))
    _fill(slot, 1.031)
    slot.request(None, 2.0)
    assert slot.take(0.01).observation.state[0] == 3.0


def test_joint_states_with_equal_stamps_pair_the_frame_with_the_newest():
    slot = ObservationSlot(CAMS)
    slot.put_instruction("pick")
    for k in range(5):  # a driver that stamps a burst of states alike
        slot.put_state(0.5, np.full(7, float(k)))
    _fill(slot, 1.0)
    slot.request(None, 1.0)
    assert slot.take(0.01).observation.state[0] == 4.0


class _Clock:
    def __init__(self, now_s: float) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


def _stream(slot, clock, t0, t1, cameras=CAMS, period_s=0.1):
    """Frames and joint states stamped on ``clock`` from ``t0`` to ``t1``."""
    t = t0
    while t < t1 - 1e-9:
        clock.now_s = t
        slot.put_state(t, np.zeros(7))
        for cam in cameras:
            slot.put_image(cam, t, _img(int(t * 10) % 256))
        t += period_s
    clock.now_s = t
    return t


def test_observation_is_as_old_as_its_joint_state_when_joint_states_stop():
    clock = _Clock(10.0)
    slot = ObservationSlot(CAMS, clock=clock)
    slot.put_instruction("pick")
    slot.put_state(9.5, np.zeros(7))
    _fill(slot, 10.0)
    slot.request(None, 10.0)
    obs = slot.take(0.01).observation
    assert obs.stamp_s == 9.5
    assert obs.image_stamps_s == {"agentview": 10.0, "wrist": 10.0}


def test_observation_holds_only_the_policy_cameras_and_an_unused_one_may_drop():
    clock = _Clock(0.0)
    slot = ObservationSlot(CAMS, required=("agentview",), clock=clock)
    slot.put_instruction("pick")
    t = _stream(slot, clock, 0.0, 1.0)
    t = _stream(slot, clock, t, t + 1.0, cameras=("agentview",))  # wrist gone
    slot.request(None, t)
    item = slot.take(0.0)
    assert item is not None and set(item.observation.images) == {"agentview"}
    assert slot.camera_conditions()["wrist"] == "lost"


def test_no_observation_while_a_required_camera_is_lost_and_diagnostics_name_it():
    clock = _Clock(0.0)
    slot = ObservationSlot(CAMS, clock=clock)
    slot.put_instruction("pick")
    t = _stream(slot, clock, 0.0, 1.0)
    t = _stream(slot, clock, t, t + 1.0, cameras=("agentview",))
    slot.request(None, t)
    assert slot.take(0.0) is None
    assert slot.camera_faults() == {"wrist": "lost"}
    values = slot.camera_diagnostics()
    assert values["camera.wrist.condition"] == "lost" and values["camera.wrist.lost"] == 1
    assert values["camera.agentview.condition"] == "ok"


@pytest.mark.parametrize("step_s", [-0.5, -5.0, -3600.0, 2.0, 3600.0])
def test_after_a_clock_step_the_next_observation_on_the_new_clock_is_taken(step_s):
    clock = _Clock(1000.0)
    slot = ObservationSlot(CAMS, clock=clock)
    slot.put_instruction("pick")
    t = _stream(slot, clock, 1000.0, 1001.0)
    slot.request(None, t)
    assert slot.take(0.0) is not None
    slot.mark_published(t)
    t = _stream(slot, clock, t + step_s, t + step_s + 0.1)  # one frame after the step
    slot.request(None, t)
    item = slot.take(0.0)
    assert item is not None and item.observation.stamp_s == pytest.approx(t - 0.1)
    assert slot.clock_steps == 1
    assert slot.camera_conditions() == {"agentview": "ok", "wrist": "ok"}


def test_a_frame_stamped_beyond_max_future_is_refused():
    clock = _Clock(50.0)
    slot = ObservationSlot(CAMS, clock=clock, max_future_s=1.0)
    slot.put_image("wrist", 52.0, _img(0))
    slot.put_state(52.0, np.zeros(7))
    assert slot.future_stamps == 2
    assert slot.camera_conditions()["wrist"] == "waiting"
