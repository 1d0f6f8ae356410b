"""The policy directory: an imported third-party policy, ready for the exporter and the runners.

``vla-edge import`` (:mod:`vla_edge.cli.import_policy`) writes it
(:mod:`vla_edge.archs.policy_write`, with the tokenizer entry of
:mod:`vla_edge.archs.policy_tokenizer` and the normalisation of
:mod:`vla_edge.archs.policy_stats`); :func:`load_policy_dir` reads and validates it::

    DIR/policy.yaml         format vla_edge.policy.v1 (below)
    DIR/model.safetensors   the weights in this package's key layout (no pickle)
    DIR/tokenizer.model     the tokenizer the user gave: PaliGemma's SentencePiece model
    DIR/tokenizer/          ... or a Hugging Face tokenizer directory (SmolVLA: SmolVLM2's)

``policy.yaml``::

    format: vla_edge.policy.v1
    architecture: pi0                      # or pi05, smolvla (vla_edge.archs.registry)
    config: {...}                          # the architecture's config: every size
    chunk_horizon: 50                      # = config.action_horizon (SmolVLA: chunk_size)
    dt_action_s: 0.1
    joint_names: [joint1, ..., gripper]    # the robot's, in the controller's order
    images:
      slots:                               # the checkpoint's slots, in prefix order
      - {name: base_0_rgb, camera: agentview}
      - {name: left_wrist_0_rgb, camera: wrist}
      - {name: right_wrist_0_rgb, camera: null}   # masked, as the reference does
      height: 224
      width: 224
      pixel_range: [-1.0, 1.0]
      resize: pad                          # aspect kept, centred on zeros (openpi);
                                           # pad_top_left: zeros left and top (LeRobot SmolVLA);
                                           # center_crop: GR00T N1.7's, with crop_fraction
                                           # (0, 1] and letterbox (true / false)
    action_space: {kind: joint_position, policy_dim: 32, indices: [...], ...}
    state_space: {kind: joint_position}    # or eef_pose (openpi LIBERO's 8-D state);
                                           # absent: joint_position (vla_edge.actions.state)
    robot: {mjcf: sim/tabletop/tabletop.xml, ee_site: ee}
                                           # the kinematics the import checked eef_delta /
                                           # eef_pose against (a package-relative or absolute
                                           # path); absent when no space needs them
    normalisation:                         # the export manifest's field names
      kind: mean_std                       # or quantile; per_part when state and actions differ
      epsilon: 1.0e-06
      state: {kind: mean_std, mean: [...], std: [...]}     # quantile: q01, q99
      actions: {kind: mean_std, mean: [...], std: [...]}
      delta_actions: [false, ...]          # one per action statistic
    tokenizer: {file: tokenizer.model, kind: sentencepiece, sha256: ..., vocab_size: N,
                max_token_len: 48}
               # or {file: tokenizer/tokenizer.json, kind: huggingface, dir: tokenizer,
               #     files: {tokenizer.json: sha256, ...}, sha256: ..., vocab_size: N, ...}
    prompt: {format: pi0}                  # pi05_state (π0.5's discretised state), smolvla
    weights: {file: model.safetensors, sha256: ..., dtypes: [float32]}
    source: {layout: openpi, path: ..., weights_sha256: ..., asset_id: ..., stats_file: ...}

The statistics keep the checkpoint's own lengths; :meth:`PolicyDir.manifest_normalisation`
cuts or pads each part to its width the way the export manifest wants them: the state to
the state space's (the robot's ``N`` joints for ``joint_position``; ``eef_pose``'s 8, which
the import checked), the actions to the action space's (:attr:`PolicyDir.action_width`).
``state_space`` is checked here for its shape only; its meaning by ``vla-edge import`` and
the runner (:class:`vla_edge.actions.StateSpace`), which this layer does not import.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from vla_edge.archs import registry
from vla_edge.archs.normalisation import NO_BOUND
from vla_edge.archs.policy_stats import SECTION_STATS, check_normalisation
from vla_edge.archs.policy_tokenizer import sha256_file
from vla_edge.core.errors import (
    CameraMapError,
    ConfigError,
    NormStatsError,
    PolicyDirError,
    TokenizerMismatchError,
    UnknownArchitectureError,
)

FORMAT = "vla_edge.policy.v1"
POLICY_FILE = "policy.yaml"
WEIGHTS_FILE = "model.safetensors"
RESIZE_MODES = ("pad", "pad_top_left", "center_crop")
"""``images.resize`` values: the export manifest's fitting modes (``stretch`` aside)."""
CROP_FIELDS = ("crop_fraction", "letterbox")
"""``images`` fields of ``center_crop`` only (and the export manifest's ``host.images``):
``crop_fraction`` (required, in (0, 1]), ``letterbox`` (optional bool, default false: pad a
non-square image to a square first)."""


def image_fit_problem(
    images: Mapping[str, Any], height: Any, width: Any, prefix: str
) -> str | None:
    """What is wrong with the :data:`CROP_FIELDS` of ``images`` (``None``: nothing).

    They belong to ``center_crop`` only: ``crop_fraction`` in ``(0, 1]``, ``letterbox`` a
    bool, ``height == width``. ``prefix`` names the mapping in the message (``images``
    in a policy directory, ``host.images`` in an export manifest).
    """
    if images.get("resize") != "center_crop":
        extra = [name for name in CROP_FIELDS if name in images]
        if extra:
            return (
                f"{prefix}.{extra[0]} = {images[extra[0]]!r} is for resize center_crop only, "
                f"but {prefix}.resize = {images.get('resize')!r}"
            )
        return None
    fraction = images.get("crop_fraction")
    if (
        isinstance(fraction, bool)
        or not isinstance(fraction, (int, float))
        or not 0.0 < fraction <= 1.0
    ):
        return (
            f"{prefix}.crop_fraction = {fraction!r}, expected a number in (0, 1] "
            "(resize center_crop keeps that fraction of each side)"
        )
    if not isinstance(images.get("letterbox", False), bool):
        return f"{prefix}.letterbox = {images['letterbox']!r}, expected true or false"
    if height != width:
        return (
            f"the image height {height!r} and width {width!r} differ, but resize "
            "center_crop fits square images"
        )
    return None


def check_image_fit(images: Mapping[str, Any], where: str) -> None:
    """:func:`image_fit_problem` of a policy directory's ``images``.

    Raises:
        PolicyDirError: a crop field with another resize, ``crop_fraction`` outside
            ``(0, 1]``, ``letterbox`` not a bool, or ``height != width`` with ``center_crop``.
    """
    why = image_fit_problem(images, images.get("height"), images.get("width"), "images")
    if why is not None:
        raise PolicyDirError(f"{where}: {why}")


# -- the directory -----------------------------------------------------------------------

TABLETOP_ROBOT = {"mjcf": "sim/tabletop/tabletop.xml", "ee_site": "ee"}
"""The package's tabletop arm: its model relative to the package root (the source tree or
``share/vla_edge``) and its end-effector site."""


@dataclass(frozen=True)
class PolicyDir:
    """A loaded, validated policy directory."""

    path: Path
    architecture: str
    config: Any
    """The architecture's config (:attr:`vla_edge.archs.registry.Architecture.config`)."""
    chunk_horizon: int
    dt_action_s: float
    joint_names: tuple[str, ...]
    images: dict[str, Any]
    action_space: dict[str, Any]
    normalisation: dict[str, Any]
    tokenizer: dict[str, Any]
    prompt: dict[str, Any]
    weights: dict[str, Any]
    source: dict[str, Any]
    state_space: dict[str, Any]
    """``{"kind": "joint_position"}`` when ``policy.yaml`` has none."""
    robot: dict[str, str] | None = None
    """``{"mjcf", "ee_site"}``: the robot model whose kinematics the import checked the
    ``eef_delta`` / ``eef_pose`` spaces against; ``None`` when neither space needs them."""

    def robot_model(
        self, mjcf: str | Path | None = None, ee_site: str | None = None
    ) -> tuple[str | Path, str]:
        """The robot model and end-effector site of the kinematics an export records.

        Each is the one given, else the import's :attr:`robot`, else the tabletop arm's.
        """
        recorded = self.robot or TABLETOP_ROBOT
        return (
            recorded["mjcf"] if mjcf is None else mjcf,
            recorded["ee_site"] if ee_site is None else ee_site,
        )

    @property
    def cameras(self) -> dict[str, str | None]:
        """Checkpoint slot → robot camera (``None``: masked), in prefix order."""
        return {s["name"]: s["camera"] for s in self.images["slots"]}

    @property
    def weights_path(self) -> Path:
        """The weights file."""
        return self.path / self.weights["file"]

    @property
    def tokenizer_path(self) -> Path:
        """The tokenizer file (a Hugging Face directory's ``tokenizer.json``)."""
        return self.path / self.tokenizer["file"]

    @property
    def tokenizer_dir(self) -> Path | None:
        """A Hugging Face tokenizer's directory (``AutoTokenizer.from_pretrained``), or None."""
        return self.path / self.tokenizer["dir"] if "dir" in self.tokenizer else None

    @property
    def action_width(self) -> int:
        """The action space's width: one past the highest output dimension it reads.

        (``len(joint_names)`` for a space that names none, which the import refuses.)
        """
        space = self.action_space
        gripper = space.get("gripper") or {}
        used = [*space.get("indices", []), *([gripper["index"]] if "index" in gripper else [])]
        return 1 + max(int(i) for i in used) if used else len(self.joint_names)

    @property
    def state_width(self) -> int:
        """The state's width: the robot's joints for ``joint_position``, else the statistics'."""
        if self.state_space.get("kind") == "joint_position":
            return len(self.joint_names)
        state = self.normalisation["state"]
        return len(state[SECTION_STATS[state["kind"]][0]])

    def manifest_normalisation(
        self, state_dim: int | None = None, action_dim: int | None = None
    ) -> dict[str, Any]:
        """The section with each part cut (or padded with identity statistics) to its width.

        Args:
            state_dim: the state's width (default :attr:`state_width`).
            action_dim: the actions' width (default :attr:`action_width`).

        Raises:
            NormStatsError: the state and the actions are normalised with different kinds.
        """
        section = self.normalisation
        if section["kind"] not in ("mean_std", "quantile"):
            raise NormStatsError(
                f"{self.path / POLICY_FILE}: normalisation.kind = {section['kind']!r}: the "
                "state and the actions use different kinds, one manifest section cannot hold them"
            )
        state_dim = self.state_width if state_dim is None else state_dim
        action_dim = self.action_width if action_dim is None else action_dim
        identity = {"mean": 0.0, "std": 1.0, "q01": -1.0, "q99": 1.0}
        # beyond the statistics: no clip of the state, no bound on the actions
        identity.update({"clip": False, "low": -NO_BOUND, "high": NO_BOUND})

        def cut(part: Mapping[str, Any], n: int) -> dict[str, list[Any]]:
            return {
                k: [*v[:n], *[identity[k]] * max(0, n - len(v))]
                for k, v in part.items()
                if k in identity
            }

        delta = list(section["delta_actions"][:action_dim])
        return {
            "kind": section["kind"],
            "epsilon": section["epsilon"],
            "state": cut(section["state"], state_dim),
            "actions": cut(section["actions"], action_dim),
            "delta_actions": delta + [False] * (action_dim - len(delta)),
        }

    def to_dict(self) -> dict[str, Any]:
        """``policy.yaml``'s content."""
        return {
            "format": FORMAT,
            "architecture": self.architecture,
            "config": self.config.model_dump(mode="json"),
            "chunk_horizon": self.chunk_horizon,
            "dt_action_s": self.dt_action_s,
            "joint_names": list(self.joint_names),
            "images": self.images,
            "action_space": self.action_space,
            "state_space": self.state_space,
            **({"robot": self.robot} if self.robot is not None else {}),
            "normalisation": self.normalisation,
            "tokenizer": self.tokenizer,
            "prompt": self.prompt,
            "weights": self.weights,
            "source": self.source,
        }


def _require(data: Mapping[str, Any], name: str, kind: type | tuple[type, ...], where: Path) -> Any:
    if name not in data:
        raise PolicyDirError(f"{where}: field {name} is missing")
    value = data[name]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise PolicyDirError(f"{where}: field {name} = {value!r} has the wrong type")
    return value


def policy_from_dict(data: Mapping[str, Any], path: Path) -> PolicyDir:
    """Validate ``policy.yaml``'s content (``path`` is the directory)."""
    where = path / POLICY_FILE
    fmt = data.get("format")
    if fmt != FORMAT:
        raise PolicyDirError(f"{where}: format = {fmt!r}, expected {FORMAT!r}")
    architecture = data.get("architecture")
    arch = registry.ARCHITECTURES.get(architecture) if isinstance(architecture, str) else None
    if arch is None or arch.facts is None:
        raise UnknownArchitectureError(
            f"{where}: architecture = {architecture!r} is not one of {registry.importable()}"
        )
    try:
        config = arch.config_class()(**_require(data, "config", dict, where))
    except ConfigError as exc:
        raise PolicyDirError(f"{where}: config: {exc}") from exc
    problem = arch.check(config) if arch.check is not None else None
    if problem:
        raise PolicyDirError(f"{where}: {problem}")
    facts = arch.facts(config)
    horizon = _require(data, "chunk_horizon", int, where)
    if horizon != facts.chunk_horizon:
        raise PolicyDirError(
            f"{where}: chunk_horizon = {horizon}, expected the config's {facts.chunk_horizon}"
        )
    dt = _require(data, "dt_action_s", (int, float), where)
    if not (math.isfinite(dt) and dt > 0):
        raise PolicyDirError(f"{where}: dt_action_s = {dt!r}, expected a finite number > 0")
    joints = _require(data, "joint_names", list, where)
    if not joints or len(set(joints)) != len(joints) or not all(isinstance(j, str) for j in joints):
        raise PolicyDirError(f"{where}: joint_names = {joints!r}: need unique names")
    images = _require(data, "images", dict, where)
    slots = images.get("slots")
    names = [s.get("name") for s in slots] if isinstance(slots, list) else None
    if names != list(facts.image_slots) or not all(
        s.get("camera") is None or isinstance(s.get("camera"), str) for s in slots
    ):
        raise CameraMapError(
            f"{where}: images.slots names {names}, expected the config's image slots "
            f"{list(facts.image_slots)}, each with a camera name or null"
        )
    if images.get("resize") not in RESIZE_MODES:
        raise PolicyDirError(
            f"{where}: images.resize = {images.get('resize')!r}, expected one of {RESIZE_MODES}"
        )
    check_image_fit(images, str(where))
    normalisation = _require(data, "normalisation", dict, where)
    check_normalisation(normalisation, str(where))
    tokenizer = _require(data, "tokenizer", dict, where)
    if tokenizer.get("kind") != arch.tokenizer or not tokenizer.get("file"):
        raise PolicyDirError(
            f"{where}: tokenizer = {tokenizer!r}: expected a {arch.tokenizer} tokenizer"
        )
    if arch.tokenizer == "huggingface" and not (
        isinstance(tokenizer.get("files"), dict) and isinstance(tokenizer.get("dir"), str)
    ):
        raise PolicyDirError(f"{where}: tokenizer = {tokenizer!r}: needs dir and files")
    if int(tokenizer.get("vocab_size", 0)) > facts.vocab_size:
        raise TokenizerMismatchError(
            f"{where}: tokenizer.vocab_size = {tokenizer.get('vocab_size')} exceeds the "
            f"config's vocabulary of {facts.vocab_size}"
        )
    prompt = _require(data, "prompt", dict, where)
    formats = tuple(p.name for p in arch.prompts if p.policy)
    if prompt.get("format") not in formats:
        raise PolicyDirError(
            f"{where}: prompt.format = {prompt.get('format')!r}, expected one of {formats} "
            f"(the prompt formats {arch.name} registers)"
        )
    weights = _require(data, "weights", dict, where)
    state_space = data.get("state_space", {"kind": "joint_position"})
    if not isinstance(state_space, dict) or not isinstance(state_space.get("kind"), str):
        raise PolicyDirError(
            f"{where}: state_space = {state_space!r}: expected a mapping with a kind "
            "(joint_position, eef_pose)"
        )
    robot = data.get("robot")
    if robot is not None and not (
        isinstance(robot, dict)
        and set(robot) == {"mjcf", "ee_site"}
        and all(isinstance(v, str) and v for v in robot.values())
    ):
        raise PolicyDirError(
            f"{where}: robot = {robot!r}: expected {{mjcf: PATH, ee_site: NAME}} (the robot "
            "model the import checked the kinematics against)"
        )
    for entry, what in ((weights, "weights"), (tokenizer, "tokenizer")):
        file = path / str(entry.get("file"))
        if not file.is_file():
            raise PolicyDirError(f"{where}: {what} file {file} not found")
    return PolicyDir(
        path=path,
        architecture=architecture,
        config=config,
        chunk_horizon=horizon,
        dt_action_s=float(dt),
        joint_names=tuple(joints),
        images=images,
        action_space=_require(data, "action_space", dict, where),
        normalisation=normalisation,
        tokenizer=tokenizer,
        prompt=prompt,
        weights=weights,
        source=_require(data, "source", dict, where),
        state_space=state_space,
        robot=robot,
    )


def load_policy_dir(path: str | Path, verify_sha256: bool = False) -> PolicyDir:
    """Read and validate a policy directory.

    ``verify_sha256`` also hashes the weights and the tokenizer against ``policy.yaml``
    (seconds for a full-size π0).

    Raises:
        PolicyDirError: a missing file or field, a malformed value, a hash mismatch.
        UnknownArchitectureError, CameraMapError, NormStatsError, TokenizerMismatchError.
    """
    path = Path(path)
    where = path / POLICY_FILE
    if not where.is_file():
        raise PolicyDirError(f"{where}: not found (is {path} a policy directory?)")
    try:
        data = yaml.safe_load(where.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise PolicyDirError(f"{where}: not readable YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise PolicyDirError(f"{where}: top level must be a mapping")
    policy = policy_from_dict(data, path)
    if verify_sha256:
        expected = {policy.weights["file"]: policy.weights.get("sha256")}
        tok = policy.tokenizer
        if "files" in tok:
            expected.update({f"{tok['dir']}/{n}": sha for n, sha in tok["files"].items()})
        else:
            expected[tok["file"]] = tok.get("sha256")
        for file, sha in expected.items():
            if not (path / file).is_file():
                raise PolicyDirError(f"{where}: {file} not found")
            found = sha256_file(path / file)
            if found != sha:
                raise PolicyDirError(f"{where}: {file} has sha256 {found}, policy.yaml says {sha}")
    return policy


__all__ = ["FORMAT", "TABLETOP_ROBOT", "PolicyDir", "load_policy_dir", "policy_from_dict"]
