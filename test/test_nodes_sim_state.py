"""The simulator's privileged state on the wire and the expert's shadow scene."""

import numpy as np
import pytest
from std_msgs.msg import Float64MultiArray, MultiArrayDimension

from vla_edge.nodes.sim_state import (
    ShadowScene,
    SimStateLayoutError,
    SimStateSnapshot,
    decode_sim_state,
    encode_sim_state,
)


def test_snapshot_round_trips_through_the_message():
    snap = SimStateSnapshot("lift_red_block", 3, 7, 1234.5, np.arange(5.0), np.arange(4.0) / 2)
    back = decode_sim_state(encode_sim_state(snap))
    assert (back.task, back.episode, back.init_state_id, back.time_s) == (
        "lift_red_block",
        3,
        7,
        1234.5,
    )
    np.testing.assert_array_equal(back.qpos, snap.qpos)
    np.testing.assert_array_equal(back.qvel, snap.qvel)


def test_message_without_the_layout_is_a_named_error():
    with pytest.raises(SimStateLayoutError, match="layout labels"):
        decode_sim_state(Float64MultiArray(data=[1.0, 2.0]))
    msg = encode_sim_state(SimStateSnapshot("t", 1, 0, 0.0, np.zeros(3), np.zeros(2)))
    msg.data = list(msg.data)[:-1]
    with pytest.raises(SimStateLayoutError, match="summing to the data length"):
        decode_sim_state(msg)
    msg = encode_sim_state(SimStateSnapshot("t", 1, 0, 0.0, np.zeros(3), np.zeros(2)))
    msg.layout.dim[1] = MultiArrayDimension(label="nope", size=1, stride=1)
    with pytest.raises(SimStateLayoutError):
        decode_sim_state(msg)


@pytest.mark.slow
def test_shadow_scene_reproduces_the_simulators_state_for_the_expert():
    from vla_edge.sim.env import TabletopEnv

    sim = TabletopEnv(image_height=16, image_width=16, cameras=())
    shadow_env = TabletopEnv(image_height=16, image_width=16, cameras=())
    sim.reset("pick_red_block_into_bowl", 2)
    targets = sim.state() + 0.05
    for _ in range(20):
        sim.step(targets)
    snap = SimStateSnapshot(
        "pick_red_block_into_bowl", 1, 2, 500.0, sim.data.qpos.copy(), sim.data.qvel.copy()
    )
    shadow = ShadowScene(shadow_env)
    shadow.apply(decode_sim_state(encode_sim_state(snap)))
    np.testing.assert_allclose(shadow_env.state(), sim.state())
    # the sim's kinematics lag its qpos by one 2 ms physics step; the shadow recomputes them
    np.testing.assert_allclose(shadow_env.ee_pose()[0], sim.ee_pose()[0], atol=1e-5)
    assert shadow_env.time_s == 500.0
    assert shadow_env.task.name == "pick_red_block_into_bowl"
    np.testing.assert_allclose(shadow_env.scene_state().target_xy_m, sim.scene_state().target_xy_m)
    episode = shadow_env.episode_index
    shadow.apply(snap)  # same episode: no reset
    assert shadow_env.episode_index == episode
    with pytest.raises(SimStateLayoutError, match="nq/nv"):
        shadow.apply(
            SimStateSnapshot("pick_red_block_into_bowl", 1, 2, 0.0, np.zeros(3), np.zeros(2))
        )
