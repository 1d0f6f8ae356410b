"""The inference node refuses unusable stamps and plans as counted bad input (no ROS graph).

The callbacks run on a stand-in holding just the attributes they use.
"""

from types import SimpleNamespace

import numpy as np
from sensor_msgs.msg import JointState
from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

from vla_edge.config.models import DEFAULT_JOINT_NAMES
from vla_edge.core.errors import InstructionRefusedError
from vla_edge.inference.observation_slot import ObservationSlot
from vla_edge.nodes.conversions import array_to_image, positions_to_joint_state, s_to_stamp
from vla_edge.nodes.inference_node import MAX_FUTURE_STAMP_S, InferenceNode
from vla_edge.nodes.metrics import BadInputCounter

CAMS = ("agentview", "wrist")
NOW_S = 1_700_000_000.0
JOINTS = tuple(DEFAULT_JOINT_NAMES)


def _node():
    logged = []
    return SimpleNamespace(
        config=SimpleNamespace(image_height=4, image_width=4),
        joint_names=JOINTS,
        bad_input=BadInputCounter(logged.append),
        slot=ObservationSlot(CAMS),
        runner=SimpleNamespace(spec=SimpleNamespace(dt_action_s=0.1)),
        _now_s=lambda: NOW_S,
        logged=logged,
    )


def _image(stamp_s):
    return array_to_image(np.zeros((4, 4, 3), np.uint8), stamp_s)


def _joint_state(stamp_s):
    return positions_to_joint_state(JOINTS, np.zeros(len(JOINTS)), stamp_s)


def _feed(node, stamp_s):
    for cam in CAMS:
        InferenceNode._on_image(node, cam, _image(stamp_s))


def _plan(joint_names, stamp_s=NOW_S, n=3):
    msg = JointTrajectory()
    msg.header.stamp = s_to_stamp(stamp_s)
    msg.joint_names = list(joint_names)
    for i in range(n):
        point = JointTrajectoryPoint()
        point.positions = [0.1 * i] * len(joint_names)
        point.time_from_start.nanosec = 100_000_000 * i
        msg.points.append(point)
    return msg


def test_frames_stamped_in_the_future_are_refused_and_do_not_stall_the_worker():
    node = _node()
    node.slot.put_instruction("pick")
    InferenceNode._on_joint_state(node, _joint_state(NOW_S - 0.01))
    _feed(node, NOW_S + 3600.0)
    assert node.bad_input.counts == {"future_stamp": 2}
    assert "future_stamp" in node.logged[0] and len(node.logged) == 1  # logged once
    _feed(node, NOW_S - 0.05)  # correctly stamped frames are still taken
    node.slot.request(None, NOW_S)
    item = node.slot.take(0.01)
    assert item is not None and item.observation.stamp_s == NOW_S - 0.05


def test_frame_within_the_clock_tolerance_is_accepted():
    node = _node()
    _feed(node, NOW_S + 0.5 * MAX_FUTURE_STAMP_S)
    assert node.bad_input.counts == {}
    assert node.slot.observation_stamp_s() is None  # only the joint state is missing


def test_unstamped_frames_and_joint_states_are_refused():
    node = _node()
    node.slot.put_instruction("pick")
    InferenceNode._on_joint_state(node, JointState(name=list(JOINTS), position=[0.0] * 7))
    _feed(node, 0.0)
    assert node.bad_input.counts == {"zero_stamp": 3}
    assert node.slot.observation_stamp_s() is None


def test_joint_state_stamped_in_the_future_is_refused():
    node = _node()
    InferenceNode._on_joint_state(node, _joint_state(NOW_S + 3600.0))
    assert node.bad_input.counts == {"future_stamp": 1}


def _taken_plan(node, msg):
    """The plan the worker gets with the request ``msg`` (on a complete observation)."""
    node.slot.put_instruction("pick")
    InferenceNode._on_joint_state(node, _joint_state(NOW_S - 0.01))
    _feed(node, NOW_S - 0.01)
    InferenceNode._on_plan(node, msg)
    item = node.slot.take(0.01)
    assert item is not None  # the request stands either way
    return item.plan


def test_plan_with_the_policys_joints_is_the_requests_prefix():
    node = _node()
    plan = _taken_plan(node, _plan(JOINTS))
    assert node.bad_input.counts == {}
    assert plan is not None and plan.joint_names == JOINTS


def test_plan_with_reordered_or_other_joints_is_counted_and_sends_no_prefix():
    for joints in (tuple(reversed(JOINTS)), ("joint1", "joint2", "joint3")):
        node = _node()
        assert _taken_plan(node, _plan(joints)) is None
        assert node.bad_input.counts == {"plan_joint_mismatch": 1}


def test_an_instruction_the_policy_refuses_is_counted_and_the_last_used_one_comes_back():
    node = _node()
    node.instruction_in_use = "pick up the red block and put it in the bowl"
    node.slot.put_instruction("put the \U0001f916 in the bowl")
    refused = InstructionRefusedError("instruction has 1 unknown token(s)")
    InferenceNode._refuse_instruction(node, "put the \U0001f916 in the bowl", refused)
    assert node.bad_input.counts == {"instruction_refused": 1}
    assert "keeping 'pick up the red block" in node.logged[0]
    InferenceNode._on_joint_state(node, _joint_state(NOW_S - 0.01))
    _feed(node, NOW_S - 0.01)
    node.slot.request(None, NOW_S)
    item = node.slot.take(0.01)
    assert item is not None and item.observation.instruction == node.instruction_in_use
    # a newer instruction that arrived meanwhile is not overwritten
    node.slot.put_instruction("lift the green block")
    InferenceNode._refuse_instruction(node, "put the \U0001f916 in the bowl", refused)
    InferenceNode._on_joint_state(node, _joint_state(NOW_S - 0.005))
    _feed(node, NOW_S - 0.005)
    node.slot.request(None, NOW_S)
    assert node.slot.take(0.01).observation.instruction == "lift the green block"
