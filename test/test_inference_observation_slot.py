"""The inference node keeps only the newest observation and never queues."""

import threading
import time

import numpy as np

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
    slot.put_state(0.0, np.ones(7))
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
    slot.put_state(0.0, np.zeros(7))
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
