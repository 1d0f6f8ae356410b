"""ament_python set-up for the vla_edge ROS 2 package."""

import os
from glob import glob

from setuptools import find_packages, setup

PACKAGE = "vla_edge"


def _tree(src: str) -> list[tuple[str, list[str]]]:
    """(install dir, files) pairs that copy ``src`` into ``share/vla_edge/src``."""
    pairs = []
    for root, _dirs, files in os.walk(src):
        paths = [os.path.join(root, f) for f in files]
        if paths:
            pairs.append((os.path.join("share", PACKAGE, root), paths))
    return pairs


setup(
    name=PACKAGE,
    version="0.1.0",
    packages=find_packages(exclude=["test", "test.*"]),
    include_package_data=True,
    package_data={PACKAGE: ["models/**/*", "sim_assets/**/*"]},
    data_files=[
        ("share/ament_index/resource_index/packages", ["resource/" + PACKAGE]),
        ("share/" + PACKAGE, ["package.xml"]),
        (os.path.join("share", PACKAGE, "launch"), glob("launch/*.launch.py")),
        (os.path.join("share", PACKAGE, "config"), glob("config/*.yaml")),
        *_tree("config/faults"),
        *_tree("config/sweeps"),
        *_tree("sim"),
    ],
    install_requires=["setuptools"],
    zip_safe=False,
    maintainer="vla_edge maintainers",
    maintainer_email="maintainers@vla-edge.dev",
    description="VLA policies on edge computers under ROS 2, with a safety-first control split.",
    license="Apache-2.0",
    tests_require=["pytest"],
    entry_points={
        "console_scripts": [
            "vla-edge = vla_edge.cli:main",
            "controller_node = vla_edge.nodes.controller_node:main",
            "fault_injector_node = vla_edge.nodes.fault_injector_node:main",
            "inference_node = vla_edge.nodes.inference_node:main",
            "safety_node = vla_edge.nodes.safety_node:main",
            "sim_node = vla_edge.nodes.sim_node:main",
        ],
    },
)
