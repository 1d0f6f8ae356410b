"""``run_node``'s end: a stop signal is a normal end, whatever rclpy's executor raises on the way.

Real node processes with real rclpy: an executor error that arrives with a
SIGINT/SIGTERM (rclpy's shutdown race, "Unable to convert call argument" from
``take_message`` under load) ends with status 0; the same error without a
signal is a real error and ends the process non-zero with its traceback. And
a node that is receiving a flood of messages stops with status 0 on SIGINT.
"""

import select
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from ros_test_domain import DomainLease

pytestmark = pytest.mark.ros

START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 20.0

# a node whose first timer tick optionally signals its own process, then fails
# the way rclpy's executor fails when a message is taken during shutdown
FAILING_NODE = textwrap.dedent(
    """
    import os, signal, sys
    from rclpy.node import Node
    from vla_edge.nodes.lifecycle import run_node

    SIGNAL = sys.argv[1]

    class FailsOnTick(Node):
        def __init__(self):
            super().__init__("fails_on_tick")
            self.create_timer(0.05, self.tick)

        def tick(self):
            if SIGNAL != "none":
                os.kill(os.getpid(), getattr(signal, SIGNAL))
            raise RuntimeError("Unable to convert call argument '0'")

    raise SystemExit(run_node("fails_on_tick", FailsOnTick))
    """
)

SUBSCRIBER_NODE = textwrap.dedent(
    """
    from rclpy.node import Node
    from sensor_msgs.msg import Image
    from trajectory_msgs.msg import JointTrajectory
    from vla_edge.nodes.lifecycle import run_node

    class Listens(Node):
        def __init__(self):
            super().__init__("listens")
            self.count = 0
            self.create_subscription(JointTrajectory, "flood_chunk", self.on_msg, 10)
            self.create_subscription(Image, "flood_image", self.on_msg, 1)

        def on_msg(self, msg):
            self.count += 1
            if self.count == 50:
                print("receiving", flush=True)

    raise SystemExit(run_node("listens", Listens))
    """
)

PUBLISHER = textwrap.dedent(
    """
    import time
    import rclpy
    from sensor_msgs.msg import Image
    from trajectory_msgs.msg import JointTrajectory, JointTrajectoryPoint

    rclpy.init()
    node = rclpy.create_node("floods")
    chunks = node.create_publisher(JointTrajectory, "flood_chunk", 10)
    images = node.create_publisher(Image, "flood_image", 1)
    chunk = JointTrajectory(
        joint_names=[f"joint{i}" for i in range(7)],
        points=[JointTrajectoryPoint(positions=[0.0] * 7) for _ in range(16)],
    )
    image = Image(height=64, width=64, encoding="rgb8", step=192, data=bytes(64 * 64 * 3))
    while rclpy.ok():
        chunks.publish(chunk)
        images.publish(image)
        time.sleep(0.0005)
    """
)


@pytest.fixture
def ros_env():
    lease = DomainLease()
    yield lease.env()
    lease.release()


def _run(script: str, arg: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", script, arg],
        env=env,
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT_S + STOP_TIMEOUT_S,
    )


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
def test_an_executor_error_with_a_stop_signal_is_a_normal_end(ros_env, signal_name):
    result = _run(FAILING_NODE, signal_name, ros_env)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    # SIGTERM (sent when SIGINT did not stop a node in time) also writes every
    # thread's stack to the log, so that a hung stop says where it hangs
    stacks = "most recent call first" in result.stderr
    assert stacks == (signal_name == "SIGTERM"), result.stderr
    if stacks:
        assert "in tick" in result.stderr


def test_the_same_executor_error_without_a_signal_is_a_real_error(ros_env):
    result = _run(FAILING_NODE, "none", ros_env)
    assert result.returncode != 0
    assert "RuntimeError: Unable to convert call argument '0'" in result.stderr


def test_a_node_receiving_a_flood_of_messages_stops_with_status_zero_on_sigint(ros_env):
    publishers = [
        subprocess.Popen([sys.executable, "-c", PUBLISHER], env=ros_env) for _ in range(2)
    ]
    try:
        for attempt in range(3):
            node = subprocess.Popen(
                [sys.executable, "-c", SUBSCRIBER_NODE],
                env=ros_env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            try:
                ready, _, _ = select.select([node.stdout], [], [], START_TIMEOUT_S)
                assert ready, f"attempt {attempt}: no messages within {START_TIMEOUT_S} s"
                line = node.stdout.readline()
                assert line.strip() == "receiving", (attempt, line)
                time.sleep(0.1 * attempt)
                node.send_signal(signal.SIGINT)
                out, _ = node.communicate(timeout=STOP_TIMEOUT_S)
                assert node.returncode == 0, (attempt, out[-2000:])
            finally:
                if node.poll() is None:
                    node.kill()
                    node.wait()
    finally:
        for publisher in publishers:
            publisher.kill()
            publisher.wait()
