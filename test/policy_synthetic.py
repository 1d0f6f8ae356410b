"""Tiny synthetic demonstrations in the HDF5 layout of docs/INTERFACES.md (for policy tests).

Two instructions drive the arm in opposite directions; a red square in each
camera image moves with the step index and looks the same for both, so only
the instruction tells the tasks apart (as in LIBERO-Goal). The chunk is a deterministic
function of (instruction, state), so a model can fit it almost exactly.

With ``with_targets`` the episodes also store made-up probe targets
(``layout_xy``, ``goal_xy``) in the shapes ``vla-edge collect`` writes.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

from vla_edge.archs.bundled.config import PolicyConfig

INSTRUCTIONS = ("put the red block in the bowl", "put the blue block on the plate")
CAMERAS = ("agentview", "wrist")


def tiny_config(**overrides: object) -> PolicyConfig:
    """A model small enough to train a few hundred steps in seconds."""
    values: dict[str, object] = dict(
        image_height=32,
        image_width=32,
        vision_downsample=8,
        vision_channels=[8, 16],
        d_model=32,
        num_heads=2,
        mlp_ratio=2,
        fusion_layers=1,
        head_layers=1,
        flow_steps=4,
        max_instruction_tokens=16,
    )
    values.update(overrides)
    return PolicyConfig(**values)


def make_episode(task_id: int, seed: int, steps: int = 20, size: int = 32) -> dict[str, np.ndarray]:
    """One episode: images per camera, measured state, action targets."""
    rng = np.random.default_rng(seed)
    direction = np.array([1.0, -0.5, 0.5, 0.0, 0.3, -0.2]) * (1.0 if task_id == 0 else -1.0)
    state = np.zeros((steps, 7), dtype=np.float32)
    state[0, :6] = rng.uniform(-0.2, 0.2, 6)
    gripper = 0.04 if task_id == 0 else 0.0
    state[0, 6] = 0.02
    actions = np.zeros_like(state)
    for k in range(steps):
        actions[k, :6] = state[k, :6] + 0.05 * direction
        actions[k, 6] = gripper
        if k + 1 < steps:
            state[k + 1, :6] = actions[k, :6]
            state[k + 1, 6] = 0.5 * (state[k, 6] + gripper)
    images = {}
    for c, cam in enumerate(CAMERAS):
        img = np.full((steps, size, size, 3), 90 + 40 * c, dtype=np.uint8)
        for k in range(steps):
            x = (2 + k) % (size - 6)
            img[k, 8 : 14 + c, x : x + 6] = (220, 40, 40)
        images[cam] = img
    return {"images": images, "state": state, "actions": actions}


LAYOUT_ROWS = 6
"""Rows of the made-up layout (five objects and the target, as in the tabletop suite)."""


def made_up_targets(index: int) -> tuple[np.ndarray, np.ndarray]:
    """Probe targets of episode ``demo_<index>``: layout ``[6, 2]``, goal ``[2, 2]`` (float32)."""
    rng = np.random.default_rng(1000 + index)
    layout = rng.uniform(-0.3, 0.6, (LAYOUT_ROWS, 2)).astype(np.float32)
    return layout, layout[[index % (LAYOUT_ROWS - 1), LAYOUT_ROWS - 1]]


def write_dataset(
    path: Path,
    episodes_per_task: int = 3,
    steps: int = 20,
    size: int = 32,
    with_targets: bool = False,
) -> Path:
    """Write ``2 * episodes_per_task`` episodes to ``path`` (an .hdf5 file).

    ``with_targets``: store :func:`made_up_targets` as each episode's probe targets.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as h5:
        data = h5.create_group("data")
        i = 0
        for task_id, instruction in enumerate(INSTRUCTIONS):
            for e in range(episodes_per_task):
                ep = make_episode(task_id, seed=100 * task_id + e, steps=steps, size=size)
                g = data.create_group(f"demo_{i}")
                obs = g.create_group("obs")
                for cam in CAMERAS:
                    obs.create_dataset(f"{cam}_image", data=ep["images"][cam])
                obs.create_dataset("state", data=ep["state"])
                g.create_dataset("actions", data=ep["actions"])
                g.attrs["instruction"] = instruction
                g.attrs["task"] = f"task_{task_id}"
                g.attrs["init_state_id"] = e
                g.attrs["seed"] = 100 * task_id + e
                g.attrs["dt_action_s"] = 0.1
                if with_targets:
                    g.attrs["layout_xy"], g.attrs["goal_xy"] = made_up_targets(i)
                i += 1
    return path
