"""The executed prefix taken from the controller's remaining plan."""

import numpy as np
import pytest

from vla_edge.core.errors import JointMismatchError
from vla_edge.core.types import ActionChunk
from vla_edge.inference.prefix import check_plan_joints, prefix_from_plan


def _plan(t0, n, dt=0.1):
    positions = np.stack([np.arange(n) * 1.0, -np.arange(n) * 1.0], axis=1)
    return ActionChunk(t0, dt, ("a", "b"), positions)


def test_no_plan_means_no_prefix():
    assert prefix_from_plan(None, 0.0, 10, 0.1, 0.0, 0.1) == (None, 0)
    empty = ActionChunk(0.0, 0.1, ("a",), np.zeros((0, 1)))
    assert prefix_from_plan(empty, 0.0, 10, 0.1, 0.0, 0.1) == (None, 0)


def test_plan_is_resampled_on_the_new_chunks_grid():
    # plan stamped at 10.05, chunk observed at 10.0: row i is the plan at 10.0 + 0.1 i
    prefix, _ = prefix_from_plan(_plan(10.05, 6), 10.0, 10, 0.1, 10.05, 0.1)
    assert prefix.shape == (10, 2)
    assert prefix[0, 0] == pytest.approx(0.0)  # before the plan: its first row
    assert prefix[1, 0] == pytest.approx(0.5)  # 10.1 lies halfway between rows 0 and 1
    assert prefix[-1, 0] == pytest.approx(5.0)  # past the end: its last row


def test_binding_rows_are_those_due_before_the_chunk_lands():
    plan = _plan(10.0, 6)
    _, n = prefix_from_plan(plan, 10.0, 10, 0.1, now_s=10.05, expected_delay_s=0.2)
    assert n == 3  # 10.0, 10.1, 10.2 <= 10.25
    _, n = prefix_from_plan(plan, 10.0, 10, 0.1, now_s=10.0, expected_delay_s=5.0)
    assert n == 6  # never beyond the plan's end


def test_binding_rows_stop_one_short_of_the_horizon_the_runners_refuse():
    # the plan covers the whole new chunk and all of it is due: H - 1 rows bind
    _, n = prefix_from_plan(_plan(10.0, 12), 10.0, 10, 0.1, now_s=10.0, expected_delay_s=5.0)
    assert n == 9
    _, n = prefix_from_plan(_plan(10.0, 3), 10.0, 1, 0.1, now_s=10.0, expected_delay_s=5.0)
    assert n == 0


def test_plan_with_the_policys_joints_in_order_is_accepted():
    check_plan_joints(_plan(10.0, 3), ("a", "b"))


@pytest.mark.parametrize(
    "policy_joints",
    [("b", "a"), ("a", "b", "c"), ("a",)],
    ids=["reordered", "policy_has_more", "policy_has_fewer"],
)
def test_plan_whose_joints_differ_from_the_policys_is_a_joint_mismatch(policy_joints):
    with pytest.raises(JointMismatchError, match=r"plan joint_names = \['a', 'b'\]"):
        check_plan_joints(_plan(10.0, 3), policy_joints)
