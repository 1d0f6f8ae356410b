"""Shared test set-up: headless MuJoCo rendering.

MuJoCo picks its OpenGL backend when it is first imported, so the default
must be in place before any test module imports it (``make test`` exports the
same values).
"""

import os

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", "egl")
