"""The fault injector node survives malformed frames and refuses bad parameters (no ROS graph).

``_on_image`` runs on a stand-in holding just the attributes it uses; the
parameters go through the declaration the node runs at start-up
(:func:`~vla_edge.nodes.params.declare_config`) on a plain rclpy node.
"""

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import rclpy
from rclpy.parameter import Parameter
from sensor_msgs.msg import Image

from vla_edge.config.loader import load_node_params
from vla_edge.core.errors import ConfigError
from vla_edge.nodes.conversions import array_to_image, image_to_array
from vla_edge.nodes.fault_injector_node import FaultInjectorNode, FaultInjectorParams
from vla_edge.nodes.metrics import BadInputCounter
from vla_edge.nodes.params import declare_config

ROOT = Path(__file__).resolve().parents[1]
STAMP_S = 1_700_000_000.0


class _Publisher:
    def __init__(self):
        self.sent = []

    def publish(self, msg):
        self.sent.append(msg)


@pytest.fixture
def declare():
    """``declare(values)``: the injector's parameters declared on a node started with ``values``."""
    context = rclpy.Context()
    rclpy.init(context=context)
    nodes = []

    def declare_values(values):
        node = rclpy.create_node(
            "fault_injector_node",
            context=context,
            parameter_overrides=[Parameter(k, value=v) for k, v in values.items()],
        )
        nodes.append(node)
        return declare_config(node, FaultInjectorParams)

    yield declare_values
    for node in nodes:
        node.destroy_node()
    context.shutdown()


def _node():
    node = SimpleNamespace(
        counters={"in": 0, "out": 0},
        bad_input=BadInputCounter(lambda _: None),
        image_pubs={"wrist": _Publisher()},
        injector=SimpleNamespace(camera=lambda frame, t_s: [frame]),  # passes frames on
        episode_t_s=lambda: 1.0,
    )
    node._publish_frames = lambda frames, frame_id="": FaultInjectorNode._publish_frames(
        node, frames, frame_id
    )
    return node


def _raw(encoding, height=4, width=5, channels=3, data_bytes=None):
    msg = Image(height=height, width=width, encoding=encoding, step=width * channels)
    msg.header.stamp.sec = int(STAMP_S)
    msg.data = bytes(data_bytes if data_bytes is not None else height * width * channels)
    return msg


@pytest.mark.parametrize(
    ("msg", "cause"),
    [
        (_raw("mono8", channels=1), "image_encoding"),
        (_raw("bgr8"), "image_encoding"),
        (_raw("rgb8", data_bytes=7), "image_layout"),
    ],
    ids=["mono8", "bgr8", "short_data"],
)
def test_malformed_frame_is_counted_and_passed_on_unchanged(msg, cause):
    node = _node()
    FaultInjectorNode._on_image(node, "wrist", msg)
    assert node.bad_input.counts == {cause: 1}
    assert node.image_pubs["wrist"].sent == [msg]  # not relabelled: the consumer refuses it


def test_rgb8_frame_goes_through_the_injector_with_its_pixels_and_stamp():
    node = _node()
    image = np.arange(4 * 5 * 3, dtype=np.uint8).reshape(4, 5, 3)
    FaultInjectorNode._on_image(node, "wrist", array_to_image(image, STAMP_S, "wrist"))
    (out,) = node.image_pubs["wrist"].sent
    assert node.bad_input.counts == {}
    assert out.encoding == "rgb8" and out.header.frame_id == "wrist"
    assert np.array_equal(image_to_array(out, 4, 5), image)


@pytest.mark.parametrize("name", ["poll_rate_hz", "diagnostics_rate_hz", "dt_action_s"])
@pytest.mark.parametrize("value", [0.0, -1.0])
def test_non_positive_rate_or_step_is_a_config_error_naming_it(declare, name, value):
    with pytest.raises(ConfigError, match=rf"fault_injector_node: {name} = {value}"):
        declare({name: value})


def test_wrongly_typed_parameter_is_a_config_error(declare):
    with pytest.raises(ConfigError, match="poll_rate_hz = 'fast'"):
        declare({"poll_rate_hz": "fast"})


def test_shipped_parameters_are_valid(declare):
    path = ROOT / "config" / "faults" / "fault_injector_node.yaml"
    params = load_node_params(path, "fault_injector_node", FaultInjectorParams)
    assert params == declare({})
