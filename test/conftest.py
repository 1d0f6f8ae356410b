"""Shared test set-up: headless MuJoCo rendering, one ROS domain per test process.

MuJoCo picks its OpenGL backend when it is first imported, so the default
must be in place before any test module imports it (``make test`` exports the
same values).

Under pytest-xdist (``make test`` runs the tests not marked ``ros`` on two
workers) each worker leases a ROS domain of its own for its whole life, so
nodes that two workers create in-process never discover each other.
"""

import os

import pytest

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", "egl")

if os.environ.get("PYTEST_XDIST_WORKER"):
    from ros_test_domain import DomainLease

    _WORKER_DOMAIN = DomainLease()
    os.environ["ROS_DOMAIN_ID"] = str(_WORKER_DOMAIN.domain)
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")


@pytest.fixture(scope="module")
def configs():
    """The package's controller and safety configurations (``config/*.yaml``)."""
    from vla_edge.config.loader import load_node_params
    from vla_edge.config.models import ControllerConfig, SafetyConfig
    from vla_edge.config.paths import config_path

    controller = load_node_params(
        config_path("controller.yaml"), "controller_node", ControllerConfig
    )
    safety = load_node_params(config_path("safety.yaml"), "safety_node", SafetyConfig)
    return controller, safety


@pytest.fixture(scope="module")
def one_torch_thread():
    """torch on one intra-op thread for the module (tiny models: threads only add noise)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
