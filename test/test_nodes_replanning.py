"""Re-planning over real DDS: the instruction changes while the robot runs.

One graph (sim, scripted expert, controller, safety; own ROS_DOMAIN_ID) on a
long-horizon task with the sim's sequencer: the sim publishes each sub-task's
instruction on ``instruction`` when the previous sub-task holds, the inference
node computes the next chunk from it, and the controller joins that chunk to
the motion in progress without a jump. A bad instruction on the same topic is
counted by the inference node and changes nothing.
"""

import threading
import time
from pathlib import Path

import numpy as np
import pytest
from test_nodes_ros_graph import Probe, _logs, _num, running_graph, wait_for

from vla_edge.config import load_node_params
from vla_edge.config.models import ControllerConfig, SafetyConfig
from vla_edge.nodes import graph as g
from vla_edge.nodes.graph_run import overrides_for
from vla_edge.sim.tasks import get_task, sub_tasks

pytestmark = pytest.mark.ros

TASK = "blue_on_plate_then_lift_green"
ROOT = Path(__file__).resolve().parents[1]
CONTROLLER = load_node_params(ROOT / "config/controller.yaml", "controller_node", ControllerConfig)
SAFETY = load_node_params(ROOT / "config/safety.yaml", "safety_node", SafetyConfig)


class InstructionProbe(Probe):
    """The graph probe, also recording every instruction published (with its time)."""

    def __init__(self) -> None:
        super().__init__()
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from std_msgs.msg import String

        latched = QoSProfile(
            depth=10,
            reliability=ReliabilityPolicy.RELIABLE,
            durability=DurabilityPolicy.TRANSIENT_LOCAL,
        )
        self.instructions: list[tuple[float, str]] = []
        self._instruction_lock = threading.Lock()
        self.node.create_subscription(String, g.TOPIC_INSTRUCTION, self._on_instruction, latched)

    def _on_instruction(self, msg) -> None:
        with self._instruction_lock:
            self.instructions.append((time.monotonic(), msg.data))

    def texts(self) -> list[str]:
        with self._instruction_lock:
            return list(dict.fromkeys(text for _, text in self.instructions))


@pytest.fixture(scope="module")
def long_graph(tmp_path_factory):
    overrides = overrides_for("sim", TASK, "expert", sequencer=True)
    log_dir = tmp_path_factory.mktemp("replanning_logs")
    with running_graph(overrides, log_dir, InstructionProbe) as graph:
        yield graph


def _largest_velocity_change(commands: np.ndarray, period_s: float) -> np.ndarray:
    """Per joint: the largest change of commanded velocity between two ticks."""
    velocity = np.diff(commands, axis=0) / period_s
    return np.abs(np.diff(velocity, axis=0)).max(axis=0)


def _why_not(processes, probe: InstructionProbe) -> str:
    """The nodes' logs, their latest statuses and the instructions seen: where it stuck."""
    names = ("sim", "controller", "safety", "inference")
    statuses = "\n".join(f"{n}: {probe.status(f'vla_edge/{n}')}" for n in names)
    return f"{_logs(processes)}\n{statuses}\ninstructions: {probe.texts()}"


def test_the_sequencer_sends_each_sub_task_and_the_motion_goes_on_without_a_jump(long_graph):
    processes, probe = long_graph
    subs = sub_tasks(get_task(TASK))
    done = wait_for(lambda: probe.success or processes.exited(), 90.0)
    assert done and probe.success, _why_not(processes, probe)
    assert probe.texts() == [s.instruction for s in subs]
    sim = probe.status("vla_edge/sim")
    assert wait_for(lambda: _num(probe.status("vla_edge/sim"), "subtasks_done") >= 1, 3.0), sim
    # the inference node computed chunks from the new instruction
    infer = probe.status("vla_edge/inference")
    assert infer.get("instruction") == subs[-1].instruction, infer
    assert _num(infer, "instructions_used") >= 2
    # the controller's commands around the switch: no larger velocity change than the
    # limits allow (the probe stamps on receipt, so the nominal period is used)
    t_switch = next(t for t, text in probe.instructions if text == subs[1].instruction)
    t, commands = probe.series(probe.unsafe, t_switch - 0.5)
    window = commands[(t >= t_switch - 0.5) & (t <= t_switch + 3.0)]
    assert len(window) > 100
    change = _largest_velocity_change(window, 1.0 / CONTROLLER.rate_hz)
    velocity_limit = SAFETY.limit_arrays(CONTROLLER.joint_names).velocity_limit_per_s
    assert np.all(change < velocity_limit), change  # each joint's own
    assert not processes.exited(), _logs(processes)


def test_a_bad_instruction_is_counted_and_the_current_one_stays(long_graph):
    processes, probe = long_graph
    from std_msgs.msg import String

    before = probe.status("vla_edge/inference").get("instruction")
    bad = {"empty_instruction": "   ", "non_text_instruction": "\x1b[2Jlift the block"}
    # (a NUL would not cross DDS: a ROS string ends there)
    bad["instruction_too_long"] = "lift " * 1000

    # the subscription keeps the newest instruction only (depth 1), so one burst of
    # several would count only its last: each cause is sent until it is counted
    for cause, text in bad.items():

        def counted(cause=cause, text=text):
            probe.instruction_pub.publish(String(data=text))
            return _num(probe.status("vla_edge/inference"), f"bad_input.{cause}") >= 1

        assert wait_for(counted, 8.0, period_s=0.2), (cause, probe.status("vla_edge/inference"))
    time.sleep(1.2)  # a diagnostics period after the last one
    status = probe.status("vla_edge/inference")
    assert status.get("instruction") == before
    assert _num(status, "bad_input.instruction_refused") == 0
    assert not processes.exited(), _logs(processes)
