"""Writing a policy directory: the camera map, the output folder, ``policy.yaml`` and files.

:func:`write_policy_dir` writes into a temporary folder beside the target, validates what
it wrote exactly as :func:`~vla_edge.archs.policy_dir.load_policy_dir` will read it, and
only then replaces the target (``vla-edge import``; :mod:`vla_edge.archs.importer`).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from vla_edge.archs.policy_dir import (
    FORMAT,
    POLICY_FILE,
    WEIGHTS_FILE,
    PolicyDir,
    load_policy_dir,
    policy_from_dict,
)
from vla_edge.archs.policy_tokenizer import TOKENIZER_FILE, sha256_file
from vla_edge.core.errors import (
    CameraMapError,
    OutputExistsError,
)

DEFAULT_CAMERAS: dict[str, str | None] = {
    "base_0_rgb": "agentview",
    "left_wrist_0_rgb": "wrist",
    "right_wrist_0_rgb": None,
    "image": "agentview",
    "wrist_image": "wrist",
}
"""Default robot camera per checkpoint slot (openpi's slots; LIBERO's LeRobot feature names)."""
IMAGES_PREFIX = "observation.images."
"""LeRobot's image feature prefix (SmolVLA keeps it in its slot names)."""
MASKED = ("none", "null", "")
"""``--camera SLOT=none`` masks a slot."""


def camera_map(
    slots: Sequence[str],
    robot_cameras: Sequence[str],
    overrides: Mapping[str, str | None] | None = None,
) -> list[dict[str, str | None]]:
    """Each slot's robot camera (``None``: masked): the overrides, else :data:`DEFAULT_CAMERAS`.

    A slot without a default takes the robot camera of the same name, or is masked. LeRobot's
    full feature names (``observation.images.wrist``) are looked up without the prefix.

    Raises:
        CameraMapError: an override names a slot the model lacks, a slot maps to a camera
            the robot lacks, or every slot is masked.
    """
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(slots))
    if unknown:
        raise CameraMapError(
            f"camera map: {unknown} not image slots of the checkpoint (slots: {list(slots)})"
        )
    out = []
    for slot in slots:
        given = slot in overrides
        short = slot.removeprefix(IMAGES_PREFIX)
        camera = overrides[slot] if given else DEFAULT_CAMERAS.get(short, short)
        if not given and short not in DEFAULT_CAMERAS and camera not in robot_cameras:
            camera = None
        if camera is not None and camera not in robot_cameras:
            how = "" if given else " (the default)"
            raise CameraMapError(
                f"camera map: slot {slot} <- {camera!r}{how}: the robot has no camera "
                f"{camera!r} (cameras: {list(robot_cameras)}); pass --camera {slot}=CAMERA "
                f"or --camera {slot}=none"
            )
        out.append({"name": slot, "camera": camera})
    if all(entry["camera"] is None for entry in out):
        raise CameraMapError(
            f"camera map: every slot {list(slots)} is masked; map one to a robot camera "
            f"({list(robot_cameras)}) with --camera SLOT=CAMERA"
        )
    return out


def check_output_dir(out: Path, force: bool) -> None:
    """Refuse an existing output directory unless ``force``."""
    if out.exists() and not force:
        raise OutputExistsError(f"{out}: exists; pass --force to replace it")
    if out.exists() and not out.is_dir():
        raise OutputExistsError(f"{out}: exists and is not a directory")


def write_policy_dir(
    out: Path,
    data: Mapping[str, Any],
    write_weights: Callable[[Path, Mapping[str, str]], None],
    weights_dtypes: Sequence[str],
    tokenizer_src: Path | Mapping[str, Path],
    force: bool = False,
) -> PolicyDir:
    """Write a policy directory atomically: into a sibling temporary, then renamed.

    ``data`` is ``policy.yaml``'s content without ``weights`` (filled here);
    ``write_weights(path, metadata)`` writes the safetensors file (no pickle);
    ``tokenizer_src`` is the SentencePiece model, or the mapping of
    :func:`~vla_edge.archs.policy_tokenizer.tokenizer_files`. The content is validated
    before it is renamed into place; nothing is left behind on failure.
    """
    out = Path(out)
    check_output_dir(out, force)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        weights = tmp / WEIGHTS_FILE
        write_weights(
            weights, {"format": "pt", "policy_format": FORMAT, "architecture": data["architecture"]}
        )
        if not isinstance(tokenizer_src, Mapping):
            tokenizer_src = {TOKENIZER_FILE: Path(tokenizer_src)}
        for name, src in tokenizer_src.items():
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, tmp / name)
        content = {
            **data,
            "weights": {
                "file": WEIGHTS_FILE,
                "sha256": sha256_file(weights),
                "dtypes": list(weights_dtypes),
            },
        }
        policy = policy_from_dict(content, tmp)  # refuse to write what would not load
        order = [k for k in policy.to_dict() if k in content]
        text = yaml.safe_dump(
            {k: content[k] for k in order}, sort_keys=False, default_flow_style=None, width=100
        )
        (tmp / POLICY_FILE).write_text(text)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return load_policy_dir(out)


__all__ = ["DEFAULT_CAMERAS", "camera_map", "check_output_dir", "write_policy_dir"]
