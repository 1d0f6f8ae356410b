"""A ROS_DOMAIN_ID per graph under test, held with a lock file so runs never share one.

Domains 110-232 (the upper end Fast DDS allows on Linux); other suites on this
machine draw from 10-99.
"""

import fcntl
import os
import random
from pathlib import Path

LOW, HIGH = 110, 232
LOCK_DIR = Path("/tmp")


class DomainLease:
    """An exclusive ROS domain id for as long as the lease is held."""

    def __init__(self) -> None:
        ids = list(range(LOW, HIGH + 1))
        random.Random(os.getpid()).shuffle(ids)
        for domain in ids:
            handle = (LOCK_DIR / f"vla_edge_ros_domain_{domain}.lock").open("w")
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                handle.close()
                continue
            self.domain = domain
            self._handle = handle
            return
        raise RuntimeError(f"no free ROS domain id in {LOW}-{HIGH}")

    def env(self) -> dict[str, str]:
        """This process's environment with the domain set and discovery kept on localhost."""
        env = dict(os.environ)
        env["ROS_DOMAIN_ID"] = str(self.domain)
        env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
        env.setdefault("MUJOCO_GL", "egl")
        return env

    def release(self) -> None:
        """Give the domain back."""
        fcntl.flock(self._handle, fcntl.LOCK_UN)
        self._handle.close()
