r"""``manifest.json``: what an export directory holds and the stage contract its programs obey.

Written by the exporter, read and validated by the ONNX Runtime and ExecuTorch
runners. This module imports numpy and the standard library only, so a
torch-free runner can load it.

Layout (``MANIFEST_FORMAT``, ``vla_edge.export.v2``): the stages declare their
own tensors, so one runner per backend runs any architecture::

    {"format": "vla_edge.export.v2", "architecture": "bundled",
     "backend": "onnx" | "executorch", "quant": RECIPE (a quantisation recipe's name),
     "quant_recipe": {"name", "description", "calibration_frames",
                      "stages": {STAGE: {"scheme", "group_size", "embeddings", "convs",
                                         "layers", "keep_fp32"}}},
     "stage_order": ["language_encoder", "vision_encoder", "fusion", "action_head"],
     "stages": {STAGE: {"file", "backend", "quant": SCHEME, "bytes", "sha256",
                        "rate": "per_instruction" | "per_observation",
                        "inputs": [{"name", "shape", "dtype", "source"}],
                        "outputs": [{"name", "shape", "dtype"}], ...}},
     "output": "action_head.actions_norm",
     "host": {"images": {"shape", "dtype", "slots": [{"name", "camera"}],
                         "pixel_range": [0.0, 1.0] | [-1.0, 1.0],
                         "resize": "stretch" | "pad" | "pad_top_left" | "center_crop",
                         "resample": ...,    # optional, see RESAMPLE_MODES
                         "crop_fraction", "letterbox"},  # center_crop only: policy_dir.CROP_FIELDS
              "image_mask", "state", "noise", "prefix_actions", "prefix_mask": {"shape", "dtype"},
              "token_ids": {"shape", "dtype", "tokenizer": {"kind", "file", "sha256"},
                            "prompt": "instruction" | "pi0" | "pi05_state" | "smolvla"},
              "token_mask": {"shape", "dtype": "int64" | "float32"}},
     "normalisation": {"kind": "mean_std" | "quantile", "epsilon",
                       "state": {...}, "actions": {...}, "delta_actions": [...]},
     "joint_names", "action_dim", "chunk_horizon", "dt_action_s", "flow_steps",
     "cameras", "image_height", "image_width",
     "source": {...}, "exporter": {...},
     "action_space": {...},   # optional: the policy directory's, see below
     "state_space": {...},    # optional: the policy directory's, see below
     ...architecture-specific fields}

An input's ``source`` is ``host:<name>`` (a tensor the runner's numpy
preprocessing makes, :data:`HOST_INPUTS`, declared in ``host``),
``stage:<stage>.<output>`` (an output of an earlier stage in
``stage_order``) or ``repeat`` (see below).

A stage may be one step of a loop the runner drives (optional)::

    "repeat": {"count": K,
               "inputs": {NAME: [value of call 1, ..., value of call K]},
               "carry": {INPUT: OUTPUT}}

The runner calls the program ``K`` times: an input whose source is ``repeat``
takes its listed value for that call, an input in ``carry`` takes (from the
second call on) the named output of the call before, and every other input
keeps its value; the stage's outputs are those of the last call
(:func:`vla_edge.runners.stage_loop.run_stage`, the runners' loop). π0's action
head is one Euler step of the flow exported this way (``time`` per call,
``x_t`` carried from ``actions``, first from ``host:noise``), and SmolVLA's
(``step`` per call, a one-hot row): lowering K unrolled steps takes memory
that grows with K, one step does not.

``output`` names the stage output decoded into the chunk:
``[1, H, action_dim]`` normalised actions of which the first ``A`` are used, as
many as ``normalisation.actions`` has statistics (a model padded to
``action_dim`` ignores the rest): ``N = len(joint_names)`` without an
``action_space``, the action space's width with one.

``action_space`` (optional; a ``vla-edge import`` policy directory's section,
copied as is) says what the output's dimensions mean (``joint_position``,
``joint_delta``, ``joint_velocity``, ``eef_delta``: see
:class:`vla_edge.actions.ActionSpace`); ``eef_delta`` adds
``action_space.kinematics = {"mjcf", "site", "joints"}``: the robot model (a
path relative to the package root, ``sim/tabletop/tabletop.xml``, or absolute),
its end-effector site and arm joints. Only its shape is checked here (this
layer may not import :mod:`vla_edge.actions`); the runner validates it against
the robot when it is built. Without it the first ``N`` decoded dimensions are
the joint positions.

``state_space`` (optional, the policy directory's; absent: ``joint_position``)
says what the state input is (:class:`vla_edge.actions.StateSpace`):
``joint_position``, the robot's ``N`` joints, or ``eef_pose``, openpi LIBERO's
8-D end-effector pose, which adds ``state_space.kinematics`` as above. The
state statistics have the state's width (``N`` for ``joint_position``); the
runner checks it against the kind.

``host.token_ids.prompt`` says what text the tokenizer encodes: one of the prompt
formats the architectures register for the tokenizer's kind
(:class:`~vla_edge.archs.architecture.PromptFormat`,
:data:`vla_edge.archs.registry.PROMPT_FORMATS`), such as ``instruction`` (the instruction as is; a
``wordpiece`` tokenizer, the default), or openpi's PaliGemma prompts for a
``sentencepiece`` tokenizer: ``pi0`` (BOS, the cleaned instruction, then
``"\n"``) and ``pi05_state`` (``"Task: ..., State: <bins>;\nAction: "``, the
normalised state discretised into 256 bins), or LeRobot SmolVLA's for a
``huggingface`` tokenizer: ``smolvla`` (the instruction and ``"\n"``, right-padded
with the tokenizer's pad token), or GR00T's ``groot`` (Qwen3-VL's chat layout,
:mod:`vla_edge.archs.groot.prompt`). A ``huggingface`` tokenizer's ``file`` is a
directory beside the programs holding ``tokenizer.json``; its ``files`` map each
file in it to its sha256. A prompt that holds the state
(:attr:`~vla_edge.archs.architecture.PromptFormat.holds_state`) makes the token ids a
per-observation host input: no ``per_instruction`` stage may read them, and a runner
does not cache them.

:func:`load_manifest` refuses a manifest whose fields, sources, shapes or
files disagree; :func:`check_program_io` refuses a program whose real inputs
and outputs disagree with it; each time a :class:`ManifestMismatchError`
names the field. An export in an older format is refused with the command
that re-exports it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vla_edge.archs.host import (
    HF_TOKENIZER_JSON,
    HOST_INPUTS,
    TOKENIZER_NAME,
    TensorSpec,
    holds_state,
    implied_prompt,
    prompt_formats,
    tokenizer_kinds,
)
from vla_edge.archs.normalisation import HostCodec, codec_from_section
from vla_edge.archs.policy_dir import image_fit_problem
from vla_edge.core.errors import ManifestMismatchError

MANIFEST_FORMAT = "vla_edge.export.v2"
OLD_FORMATS = ("vla_edge.export.v1",)
MANIFEST_NAME = "manifest.json"
BACKENDS = ("onnx", "executorch", "torch")
"""``torch``: a stage's weights (safetensors) that the torch runner builds into the
architecture's stage module, from the manifest's ``model_config``, on any device."""
QUANTS = ("fp32", "fp16", "8da8w", "8da4w", "int8wo")
"""A stage's ``quant``: its ``Linear`` layers' scheme (:mod:`vla_edge.export.quant_recipes`)."""
STAGE_SUFFIX = {"onnx": ".onnx", "executorch": ".pte", "torch": ".safetensors"}
RATES = ("per_instruction", "per_observation")
REPEAT_SOURCE = "repeat"
"""The source of an input whose value ``repeat.inputs`` lists per call."""
INSTRUCTION_INPUTS = ("token_ids", "token_mask")
"""Host inputs that depend on the instruction only (a ``per_instruction`` stage may read them)."""
PIXEL_RANGES = ((0.0, 1.0), (-1.0, 1.0))
RESIZE_MODES = ("stretch", "pad", "pad_top_left", "center_crop")
"""``stretch``: images arrive at the model's size; ``pad``: openpi's ``resize_with_pad``
(aspect kept, centred on black); ``pad_top_left``: LeRobot SmolVLA's (aspect kept, torch
bilinear on [0, 1] floats, zeros on the left and top); ``center_crop``: Isaac-GR00T N1.7's
evaluation transform (optional letterbox, shortest side to the model's, centre crop of
``crop_fraction``, resize again; square images); see :mod:`vla_edge.runners.image_resize`."""
RESAMPLE_MODES = {
    "stretch": (),
    "pad": ("pil_bilinear",),
    "pad_top_left": ("bilinear",),
    "center_crop": ("cv2_area",),
}
"""The filter each resize mode uses, which ``host.images.resample`` may state (optional):
``pil_bilinear`` (PIL's antialiased bilinear, openpi), ``bilinear`` (torch's
``interpolate(mode="bilinear", align_corners=False)``, no antialiasing), ``cv2_area``
(OpenCV's ``INTER_AREA``)."""
TOKEN_MASK_DTYPES = ("int64", "float32")


@dataclass(frozen=True)
class StageRepeat:
    """A stage run as ``count`` calls of its program (the manifest's ``stages.<name>.repeat``).

    ``inputs``: input name -> its value in each call; ``carry``: input name -> the
    output of the previous call it takes from the second call on.
    """

    count: int
    inputs: dict[str, tuple[np.ndarray, ...]]
    carry: dict[str, str]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form."""
        return {
            "count": self.count,
            "inputs": {name: [v.tolist() for v in values] for name, values in self.inputs.items()},
            "carry": dict(self.carry),
        }


@dataclass(frozen=True)
class StageSpec:
    """One exported program."""

    name: str
    file: str
    backend: str
    quant: str
    rate: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    repeat: StageRepeat | None = None


@dataclass(frozen=True)
class Manifest:
    """A validated ``manifest.json`` and the directory it lives in."""

    directory: Path
    data: dict[str, Any]
    stages: dict[str, StageSpec]
    host: dict[str, TensorSpec]
    codec: HostCodec

    @property
    def backend(self) -> str:
        """Backend of the policy stages (``onnx`` or ``executorch``)."""
        return str(self.data["backend"])

    @property
    def quant(self) -> str:
        """Quantisation of the policy stages."""
        return str(self.data["quant"])

    @property
    def architecture(self) -> str:
        """The architecture the programs were exported from (``bundled``, ``pi0``, ...)."""
        return str(self.data["architecture"])

    @property
    def stage_order(self) -> tuple[str, ...]:
        """Stage names in run order."""
        return tuple(self.data["stage_order"])

    @property
    def output(self) -> tuple[str, str]:
        """``(stage, output name)`` of the normalised action chunk."""
        stage, _, name = str(self.data["output"]).partition(".")
        return stage, name

    def field(self, name: str) -> Any:
        """A top-level field."""
        return self.data[name]

    def stage_path(self, stage: str) -> Path:
        """Path of a stage's program file."""
        return self.directory / self.stages[stage].file

    @property
    def tokenizer(self) -> dict[str, Any] | None:
        """``host.token_ids.tokenizer`` (``None`` when no stage reads tokens)."""
        entry = self.data["host"].get("token_ids")
        return None if entry is None else entry["tokenizer"]

    @property
    def prompt(self) -> str | None:
        """``host.token_ids.prompt`` (``instruction`` when not given; ``None`` without tokens)."""
        entry = self.data["host"].get("token_ids")
        return None if entry is None else str(entry.get("prompt", "instruction"))

    @property
    def tokens_per_observation(self) -> bool:
        """Whether the token ids depend on the observation (a prompt holding the state)."""
        return holds_state(self.prompt)

    @property
    def tokenizer_path(self) -> Path | None:
        """Path of the tokenizer file copied beside the programs (``huggingface``: directory)."""
        tok = self.tokenizer
        return None if tok is None else self.directory / tok["file"]


# top-level field -> type every v2 manifest must carry
_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "architecture": str,
    "backend": str,
    "quant": str,
    "stage_order": list,
    "stages": dict,
    "output": str,
    "host": dict,
    "normalisation": dict,
    "joint_names": list,
    "action_dim": int,
    "chunk_horizon": int,
    "dt_action_s": (int, float),
    "flow_steps": int,
    "cameras": list,
    "image_height": int,
    "image_width": int,
    "source": dict,
    "exporter": dict,
}


def reexport_hint(directory: Path) -> str:
    """The command that writes a current export into ``directory``."""
    return (
        f"re-export it with `vla-edge export --checkpoint CKPT --backend onnx|executorch "
        f"--quant RECIPE --out {directory}`"
    )


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_manifest(directory: str | Path, data: dict[str, Any]) -> Path:
    """Validate ``data`` against the files in ``directory`` and write ``manifest.json``.

    Raises:
        ManifestMismatchError: ``data`` is inconsistent (see :func:`validate_manifest`).
    """
    directory = Path(directory)
    validate_manifest(directory, data)
    path = directory / MANIFEST_NAME
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    tmp.replace(path)
    return path


def load_manifest(directory: str | Path) -> Manifest:
    """Read and validate ``directory/manifest.json``.

    Raises:
        ManifestMismatchError: missing file, unreadable JSON, an old format, a
            missing or ill-typed field, a stage input whose source is missing or
            differs, or a file that is not there; the message names the field.
    """
    directory = Path(directory)
    path = directory / MANIFEST_NAME
    if not path.is_file():
        raise ManifestMismatchError(f"{path}: manifest.json not found in export directory")
    try:
        data = json.loads(path.read_text())
    except ValueError as exc:
        raise ManifestMismatchError(f"{path}: not valid JSON: {exc}") from exc
    return validate_manifest(directory, data)


def validate_manifest(directory: Path, data: Any) -> Manifest:
    """Check fields, files, host tensors and the stage dataflow; build a :class:`Manifest`."""
    where = f"{directory / MANIFEST_NAME}"
    if not isinstance(data, dict):
        raise ManifestMismatchError(f"{where}: top level is {type(data).__name__}, expected object")
    fmt = data.get("format")
    if fmt in OLD_FORMATS:
        raise ManifestMismatchError(
            f"{where}: field format = {fmt!r} is an export of an older vla_edge whose stages do "
            f"not declare their tensors (expected {MANIFEST_FORMAT!r}); {reexport_hint(directory)}"
        )
    if fmt != MANIFEST_FORMAT:
        raise ManifestMismatchError(
            f"{where}: field format = {fmt!r}, expected {MANIFEST_FORMAT!r}"
            + ("" if fmt is not None else f"; {reexport_hint(directory)}")
        )
    for name, kind in _REQUIRED.items():
        if name not in data:
            raise ManifestMismatchError(f"{where}: field {name} is missing")
        value = data[name]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise ManifestMismatchError(
                f"{where}: field {name} = {value!r} has type {type(value).__name__}, "
                f"expected {getattr(kind, '__name__', kind)}"
            )
    if not data["architecture"]:
        raise ManifestMismatchError(f"{where}: field architecture is empty")
    _check_choice(where, "backend", data["backend"], BACKENDS)
    if not data["quant"]:
        raise ManifestMismatchError(f"{where}: field quant is empty (a recipe's name)")
    if not isinstance(data.get("quant_recipe", {}), dict):
        raise ManifestMismatchError(f"{where}: field quant_recipe must be an object")
    for name in ("image_height", "image_width", "chunk_horizon", "flow_steps", "dt_action_s"):
        if not data[name] > 0:
            raise ManifestMismatchError(f"{where}: field {name} = {data[name]!r}, expected > 0")
    n, a = len(data["joint_names"]), data["action_dim"]
    if n == 0 or len(set(data["joint_names"])) != n:
        raise ManifestMismatchError(
            f"{where}: field joint_names = {data['joint_names']} must be non-empty and unique"
        )
    if a < n:
        raise ManifestMismatchError(
            f"{where}: field action_dim = {a}, expected >= {n} (one per joint_names entry; "
            "a padded model uses the first len(joint_names) dimensions)"
        )
    if len(set(data["cameras"])) != len(data["cameras"]) or not data["cameras"]:
        raise ManifestMismatchError(
            f"{where}: field cameras = {data['cameras']} must be non-empty and unique"
        )
    _validate_action_space(where, data)
    _validate_state_space(where, data)
    joint_state = data.get("state_space", {}).get("kind", "joint_position") == "joint_position"
    try:
        codec = codec_from_section(
            data["normalisation"],
            state_dim=n if joint_state else None,
            action_dim=None if "action_space" in data else n,
        )
    except ManifestMismatchError as exc:
        raise ManifestMismatchError(f"{where}: {exc}") from exc
    if codec.action_dim > a:
        raise ManifestMismatchError(
            f"{where}: field normalisation.actions has {codec.action_dim} statistics, expected "
            f"<= action_dim = {a} (the model's output width)"
        )
    host = _validate_host(where, directory, data, codec.state_dim)
    stages = _validate_stages(where, directory, data, host)
    torch_stages = [s.name for s in stages.values() if s.backend == "torch"]
    if torch_stages and not isinstance(data.get("model_config"), dict):
        raise ManifestMismatchError(
            f"{where}: field model_config is missing: stages {torch_stages} have backend "
            "'torch', whose runner builds them from the architecture's config; "
            f"{reexport_hint(directory)}"
        )
    _validate_output(where, data, stages)
    return Manifest(directory=directory, data=data, stages=stages, host=host, codec=codec)


KINEMATICS_FIELDS = ("mjcf", "site", "joints")
"""``action_space.kinematics`` / ``state_space.kinematics``: the robot model, its
end-effector site, its arm joints."""


def _validate_action_space(where: str, data: dict[str, Any]) -> None:
    """The optional ``action_space`` is an object; its ``kinematics`` names a model, a site, joints.

    Its meaning is checked by the runner (:class:`vla_edge.actions.ActionSpace`).
    """
    _validate_space(where, data, "action_space")


def _validate_state_space(where: str, data: dict[str, Any]) -> None:
    """The optional ``state_space`` is an object with a ``kind``, and kinematics as above.

    Its meaning is checked by the runner (:class:`vla_edge.actions.StateSpace`).
    """
    _validate_space(where, data, "state_space")
    if "state_space" in data and not isinstance(data["state_space"].get("kind"), str):
        raise ManifestMismatchError(
            f"{where}: field state_space.kind = {data['state_space'].get('kind')!r}, expected "
            "a string (joint_position, eef_pose)"
        )


def _validate_space(where: str, data: dict[str, Any], name: str) -> None:
    if name not in data:
        return
    section = data[name]
    if not isinstance(section, dict):
        raise ManifestMismatchError(
            f"{where}: field {name} = {section!r} has type {type(section).__name__}, "
            "expected object"
        )
    if "kinematics" not in section:
        return
    kin = section["kinematics"]
    if not isinstance(kin, dict) or sorted(kin) != sorted(KINEMATICS_FIELDS):
        raise ManifestMismatchError(
            f"{where}: field {name}.kinematics = {kin!r}, expected an object with "
            f"exactly {list(KINEMATICS_FIELDS)}"
        )
    joints = kin["joints"]
    if (
        not isinstance(kin["mjcf"], str)
        or not kin["mjcf"]
        or not isinstance(kin["site"], str)
        or not kin["site"]
        or not isinstance(joints, list)
        or not joints
        or not all(isinstance(j, str) for j in joints)
    ):
        raise ManifestMismatchError(
            f"{where}: field {name}.kinematics = {kin!r}: mjcf and site must be "
            "non-empty strings, joints a non-empty list of joint names"
        )


def _check_choice(where: str, name: str, value: Any, allowed: tuple[Any, ...]) -> None:
    if value not in allowed:
        raise ManifestMismatchError(f"{where}: field {name} = {value!r}, expected one of {allowed}")


def _tensor_spec(where: str, field: str, item: Any, name: str | None = None) -> TensorSpec:
    try:
        shape = tuple(int(s) for s in item["shape"])
        dtype = item["dtype"]
        if not isinstance(dtype, str) or any(s <= 0 for s in shape):
            raise ValueError(dtype)
        return TensorSpec(
            str(item["name"]) if name is None else name, shape, dtype, item.get("source")
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ManifestMismatchError(
            f"{where}: field {field} = {item!r} needs "
            + ("name, " if name is None else "")
            + "shape (positive ints) and dtype"
        ) from exc


def _expect_shape(where: str, field: str, spec: TensorSpec, shape: tuple, dtype: str, why: str):
    if spec.dtype != dtype:
        raise ManifestMismatchError(
            f"{where}: field {field}.dtype = {spec.dtype!r}, expected {dtype!r}"
        )
    if spec.shape != tuple(shape):
        raise ManifestMismatchError(
            f"{where}: field {field}.shape = {list(spec.shape)}, but {why} imply {list(shape)}"
        )


def _validate_host(
    where: str, directory: Path, data: dict[str, Any], state_dim: int
) -> dict[str, TensorSpec]:
    raw = data["host"]
    unknown = sorted(set(raw) - set(HOST_INPUTS))
    if unknown:
        raise ManifestMismatchError(
            f"{where}: field host.{unknown[0]} is not a host input; expected one of {HOST_INPUTS}"
        )
    if "images" not in raw:
        raise ManifestMismatchError(f"{where}: field host.images is missing")
    host = {name: _tensor_spec(where, f"host.{name}", raw[name], name) for name in raw}
    h, a = data["chunk_horizon"], data["action_dim"]
    images = raw["images"]
    slots = images.get("slots")
    if not isinstance(slots, list) or not slots:
        raise ManifestMismatchError(
            f"{where}: field host.images.slots = {slots!r}, expected a list of "
            '{"name", "camera"} (camera: a robot camera name or null for a masked slot)'
        )
    for i, slot in enumerate(slots):
        if not isinstance(slot, dict) or not isinstance(slot.get("name"), str):
            raise ManifestMismatchError(
                f"{where}: field host.images.slots[{i}] = {slot!r} needs a name"
            )
    mapped = [s.get("camera") for s in slots if s.get("camera") is not None]
    if mapped != list(data["cameras"]):
        raise ManifestMismatchError(
            f"{where}: field cameras = {data['cameras']}, but host.images.slots map the cameras "
            f"{mapped} (in slot order)"
        )
    if any(s.get("camera") is None for s in slots) and "image_mask" not in raw:
        raise ManifestMismatchError(
            f"{where}: field host.image_mask is missing, but host.images.slots leave a slot "
            "without a camera (a missing slot must be masked)"
        )
    size = (len(slots), 3, data["image_height"], data["image_width"])
    _expect_shape(
        where, "host.images", host["images"], size, "float32",
        "host.images.slots, image_height and image_width",
    )  # fmt: skip
    pixel_range = tuple(float(v) for v in images.get("pixel_range", ()))
    _check_choice(where, "host.images.pixel_range", pixel_range, PIXEL_RANGES)
    _check_choice(where, "host.images.resize", images.get("resize"), RESIZE_MODES)
    if "resample" in images:
        _check_choice(
            where,
            "host.images.resample",
            images["resample"],
            RESAMPLE_MODES[images["resize"]],
        )
    why = image_fit_problem(images, data["image_height"], data["image_width"], "host.images")
    if why is not None:
        raise ManifestMismatchError(f"{where}: field {why}")
    if "image_mask" in host:
        _expect_shape(
            where, "host.image_mask", host["image_mask"], (len(slots),), "float32",
            "host.images.slots",
        )  # fmt: skip
    if "token_mask" in host and "token_ids" not in host:
        raise ManifestMismatchError(f"{where}: field host.token_mask needs host.token_ids")
    if "token_ids" in host:
        ids = host["token_ids"]
        if len(ids.shape) != 2 or ids.shape[0] != 1 or ids.dtype != "int64":
            raise ManifestMismatchError(
                f"{where}: field host.token_ids = {list(ids.shape)} {ids.dtype}, "
                "expected [1, max_tokens] int64"
            )
        if "token_mask" in host:
            mask = host["token_mask"]
            _check_choice(where, "host.token_mask.dtype", mask.dtype, TOKEN_MASK_DTYPES)
            _expect_shape(
                where, "host.token_mask", mask, ids.shape, mask.dtype, "host.token_ids",
            )  # fmt: skip
        tok = raw["token_ids"].get("tokenizer")
        if not isinstance(tok, dict):
            raise ManifestMismatchError(
                f"{where}: field host.token_ids.tokenizer is missing (kind, file, sha256)"
            )
        _check_choice(where, "host.token_ids.tokenizer.kind", tok.get("kind"), tokenizer_kinds())
        file = tok.get("file")
        if tok["kind"] == "huggingface":
            if not isinstance(file, str) or not (directory / file / HF_TOKENIZER_JSON).is_file():
                raise ManifestMismatchError(
                    f"{where}: field host.token_ids.tokenizer.file = {file!r}: no tokenizer "
                    f"directory with {HF_TOKENIZER_JSON} in {directory}"
                )
            files = tok.get("files", {})
            if not isinstance(files, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in files.items()
            ):
                raise ManifestMismatchError(
                    f"{where}: field host.token_ids.tokenizer.files = {files!r}, expected "
                    "{file name: sha256}"
                )
        elif not isinstance(file, str) or not (directory / file).is_file():
            raise ManifestMismatchError(
                f"{where}: field host.token_ids.tokenizer.file = {file!r}: no such file in "
                f"{directory}"
            )
        if tok["kind"] == "wordpiece" and file != TOKENIZER_NAME:
            raise ManifestMismatchError(
                f"{where}: field host.token_ids.tokenizer.file = {file!r}, expected "
                f"{TOKENIZER_NAME!r} for a wordpiece tokenizer"
            )
        prompts = prompt_formats(tok["kind"])
        prompt = raw["token_ids"].get("prompt", implied_prompt(tok["kind"]))
        if prompt not in prompts:
            raise ManifestMismatchError(
                f"{where}: field host.token_ids.prompt = {prompt!r}, expected one of {prompts} "
                f"(the prompt formats registered for a {tok['kind']} tokenizer)"
            )
    if "state" in host:
        state = host["state"]
        if len(state.shape) != 2 or state.shape[0] != 1 or state.shape[1] < state_dim:
            raise ManifestMismatchError(
                f"{where}: field host.state.shape = {list(state.shape)}, expected [1, W] with "
                f"W >= {state_dim} (the state statistics; padded with zeros)"
            )
        _expect_shape(where, "host.state", state, state.shape, "float32", "host.state")
    why = "chunk_horizon and action_dim"
    for name in ("noise", "prefix_actions"):
        if name in host:
            _expect_shape(where, f"host.{name}", host[name], (1, h, a), "float32", why)
    if "prefix_mask" in host:
        _expect_shape(where, "host.prefix_mask", host["prefix_mask"], (1, h), "float32", why)
    if ("prefix_actions" in host) != ("prefix_mask" in host):
        raise ManifestMismatchError(
            f"{where}: field host declares only one of prefix_actions and prefix_mask"
        )
    return host


def _tensor_specs(where: str, field: str, items: Any) -> tuple[TensorSpec, ...]:
    if not isinstance(items, list):
        raise ManifestMismatchError(f"{where}: field {field} must be a list of tensors")
    specs = tuple(_tensor_spec(where, f"{field}[{i}]", item) for i, item in enumerate(items))
    names = [t.name for t in specs]
    if len(set(names)) != len(names):
        raise ManifestMismatchError(f"{where}: field {field} names = {names} are not unique")
    return specs


def _validate_stages(
    where: str, directory: Path, data: dict[str, Any], host: dict[str, TensorSpec]
) -> dict[str, StageSpec]:
    raw, order = data["stages"], data["stage_order"]
    prompt = data["host"].get("token_ids", {}).get("prompt")
    state_prompt = prompt if holds_state(prompt) else None
    if len(set(order)) != len(order) or sorted(order) != sorted(raw):
        raise ManifestMismatchError(
            f"{where}: field stage_order = {order}, expected each of stages {sorted(raw)} once"
        )
    stages: dict[str, StageSpec] = {}
    for name in order:
        entry = raw[name]
        prefix = f"stages.{name}"
        if not isinstance(entry, dict):
            raise ManifestMismatchError(f"{where}: field {prefix} must be an object")
        for key in ("file", "backend", "quant", "rate", "inputs", "outputs"):
            if key not in entry:
                raise ManifestMismatchError(f"{where}: field {prefix}.{key} is missing")
        _check_choice(where, f"{prefix}.backend", entry["backend"], BACKENDS)
        _check_choice(where, f"{prefix}.quant", entry["quant"], QUANTS)
        _check_choice(where, f"{prefix}.rate", entry["rate"], RATES)
        suffix = STAGE_SUFFIX[entry["backend"]]
        if not str(entry["file"]).endswith(suffix):
            raise ManifestMismatchError(
                f"{where}: field {prefix}.file = {entry['file']!r} does not end in {suffix!r} "
                f"(backend {entry['backend']})"
            )
        if not (directory / entry["file"]).is_file():
            raise ManifestMismatchError(
                f"{where}: field {prefix}.file = {entry['file']!r}: no such file in {directory}"
            )
        inputs = _tensor_specs(where, f"{prefix}.inputs", entry["inputs"])
        outputs = _tensor_specs(where, f"{prefix}.outputs", entry["outputs"])
        if not outputs:
            raise ManifestMismatchError(f"{where}: field {prefix}.outputs is empty")
        repeat = _validate_repeat(where, prefix, entry.get("repeat"), inputs, outputs)
        for tensor in inputs:
            if tensor.source == REPEAT_SOURCE and repeat is not None:
                continue  # its values were checked with the loop
            _check_source(
                where,
                f"{prefix}.inputs.{tensor.name}",
                tensor,
                entry["rate"],
                host,
                stages,
                state_prompt,
            )
        stages[name] = StageSpec(
            name,
            str(entry["file"]),
            entry["backend"],
            entry["quant"],
            entry["rate"],
            inputs,
            outputs,
            repeat,
        )
    return stages


def stage_repeat(
    raw: Any, inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...], name: str = "stage"
) -> StageRepeat:
    """Stage ``name``'s loop from its manifest form, checked against the stage's tensors.

    Raises:
        ManifestMismatchError: see :func:`_validate_repeat`.
    """
    repeat = _validate_repeat(f"stage {name}", f"stages.{name}", raw, inputs, outputs)
    if repeat is None:
        raise ManifestMismatchError(f"stage {name}: field stages.{name}.repeat is missing")
    return repeat


def _validate_repeat(
    where: str,
    prefix: str,
    raw: Any,
    inputs: tuple[TensorSpec, ...],
    outputs: tuple[TensorSpec, ...],
) -> StageRepeat | None:
    """``stages.<name>.repeat``: a positive count, a value per call, carries that match."""
    if raw is None:
        return None
    field = f"{prefix}.repeat"
    if not isinstance(raw, dict) or set(raw) != {"count", "inputs", "carry"}:
        raise ManifestMismatchError(
            f"{where}: field {field} must be an object with count, inputs and carry"
        )
    count = raw["count"]
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ManifestMismatchError(f"{where}: field {field}.count = {count!r}, expected >= 1")
    by_name = {t.name: t for t in inputs}
    looped = {t.name for t in inputs if t.source == REPEAT_SOURCE}
    if not isinstance(raw["inputs"], dict) or set(raw["inputs"]) != looped:
        given = sorted(raw["inputs"]) if isinstance(raw["inputs"], dict) else raw["inputs"]
        raise ManifestMismatchError(
            f"{where}: field {field}.inputs names {given}, expected the inputs whose source "
            f"is {REPEAT_SOURCE!r}: {sorted(looped)}"
        )
    values: dict[str, tuple[np.ndarray, ...]] = {}
    for name, per_call in raw["inputs"].items():
        spec = by_name[name]
        if not isinstance(per_call, list) or len(per_call) != count:
            raise ManifestMismatchError(
                f"{where}: field {field}.inputs.{name} must list {count} values (one per call)"
            )
        try:
            arrays = tuple(np.asarray(v, dtype=spec.dtype) for v in per_call)
        except (TypeError, ValueError) as exc:
            raise ManifestMismatchError(
                f"{where}: field {field}.inputs.{name}: not {spec.dtype} values ({exc})"
            ) from None
        bad = [
            i for i, a in enumerate(arrays) if a.shape != spec.shape or not np.all(np.isfinite(a))
        ]
        if bad:
            raise ManifestMismatchError(
                f"{where}: field {field}.inputs.{name}[{bad[0]}] must be finite of shape "
                f"{list(spec.shape)} (the input's)"
            )
        values[name] = arrays
    carry = raw["carry"]
    made = {t.name: t for t in outputs}
    if not isinstance(carry, dict):
        raise ManifestMismatchError(f"{where}: field {field}.carry must map inputs to outputs")
    for name, output in carry.items():
        if name not in by_name or name in looped or output not in made:
            raise ManifestMismatchError(
                f"{where}: field {field}.carry.{name} = {output!r}: expected an input of the "
                f"stage not sourced {REPEAT_SOURCE!r} {sorted(set(by_name) - looped)} taking "
                f"an output {sorted(made)}"
            )
        if (by_name[name].shape, by_name[name].dtype) != (made[output].shape, made[output].dtype):
            raise ManifestMismatchError(
                f"{where}: field {field}.carry.{name} = {output!r}: the input is "
                f"{list(by_name[name].shape)} {by_name[name].dtype}, the output "
                f"{list(made[output].shape)} {made[output].dtype}"
            )
    return StageRepeat(count, values, {str(k): str(v) for k, v in carry.items()})


def _check_source(
    where: str,
    field: str,
    tensor: TensorSpec,
    rate: str,
    host: dict[str, TensorSpec],
    earlier: dict[str, StageSpec],
    state_prompt: str | None = None,
) -> None:
    """An input's source exists, precedes it and has its shape and dtype."""
    source = tensor.source
    kind, _, rest = (source or "").partition(":")
    if kind == "host":
        if rest not in HOST_INPUTS:
            raise ManifestMismatchError(
                f"{where}: field {field}.source = {source!r}: {rest!r} is not a host input, "
                f"expected one of {HOST_INPUTS}"
            )
        if rest not in host:
            raise ManifestMismatchError(
                f"{where}: field {field}.source = {source!r}, but host.{rest} is not declared"
            )
        if rate == "per_instruction" and rest not in INSTRUCTION_INPUTS:
            raise ManifestMismatchError(
                f"{where}: field {field}.source = {source!r}: a per_instruction stage may only "
                f"read {INSTRUCTION_INPUTS} or per_instruction stages' outputs"
            )
        if rate == "per_instruction" and state_prompt is not None:
            raise ManifestMismatchError(
                f"{where}: field {field}.source = {source!r}: host.token_ids.prompt = "
                f"{state_prompt!r} holds the state, so the tokens change with every observation "
                "and a per_instruction stage cannot read them"
            )
        produced, origin = host[rest], f"host.{rest}"
    elif kind == "stage":
        stage, _, output = rest.partition(".")
        if stage not in earlier:
            raise ManifestMismatchError(
                f"{where}: field {field}.source = {source!r}: no stage {stage!r} runs before it "
                f"(stage_order so far: {list(earlier)})"
            )
        match = [t for t in earlier[stage].outputs if t.name == output]
        if not match:
            raise ManifestMismatchError(
                f"{where}: field {field}.source = {source!r}: stage {stage} has outputs "
                f"{[t.name for t in earlier[stage].outputs]}"
            )
        if rate == "per_instruction" and earlier[stage].rate != "per_instruction":
            raise ManifestMismatchError(
                f"{where}: field {field}.source = {source!r}: a per_instruction stage cannot "
                f"read the per_observation stage {stage}"
            )
        produced, origin = match[0], f"stages.{stage}.outputs.{output}"
    elif source == REPEAT_SOURCE:
        raise ManifestMismatchError(
            f"{where}: field {field}.source = {source!r}, but the stage has no repeat"
        )
    else:
        raise ManifestMismatchError(
            f"{where}: field {field}.source = {source!r}, expected 'host:<name>', "
            f"'stage:<stage>.<output>' or {REPEAT_SOURCE!r}"
        )
    if produced.dtype != tensor.dtype:
        raise ManifestMismatchError(
            f"{where}: field {field}.dtype = {tensor.dtype!r}, but its source {origin} has "
            f"{produced.dtype!r}"
        )
    if produced.shape != tensor.shape:
        raise ManifestMismatchError(
            f"{where}: field {field}.shape = {list(tensor.shape)}, but its source {origin} has "
            f"{list(produced.shape)}"
        )


def _validate_output(where: str, data: dict[str, Any], stages: dict[str, StageSpec]) -> None:
    stage, _, name = data["output"].partition(".")
    match = [t for t in stages[stage].outputs if t.name == name] if stage in stages else []
    if not match:
        raise ManifestMismatchError(
            f"{where}: field output = {data['output']!r} names no stage output "
            f"(expected '<stage>.<output>')"
        )
    if stages[stage].rate != "per_observation":
        raise ManifestMismatchError(
            f"{where}: field output = {data['output']!r} is made by a per_instruction stage"
        )
    want = (1, data["chunk_horizon"], data["action_dim"])
    _expect_shape(
        where, f"stages.{stage}.outputs.{name}", match[0], want, "float32",
        "chunk_horizon and action_dim",
    )  # fmt: skip


def check_program_io(
    manifest: Manifest,
    stage: str,
    inputs: list[tuple[tuple[int, ...], str]],
    outputs: list[tuple[tuple[int, ...], str]],
) -> None:
    """Refuse a program whose real input/output shapes and dtypes differ from the manifest.

    Args:
        manifest: the loaded manifest.
        stage: stage name.
        inputs: ``(shape, numpy dtype name)`` of each program input, in order.
        outputs: the same for each output.

    Raises:
        ManifestMismatchError: naming ``stages.<stage>.inputs.<name>.shape`` or
            ``.dtype``, the manifest's value and the program's.
    """
    spec = manifest.stages[stage]
    file = manifest.stage_path(stage).name
    for kind, declared, actual in (
        ("inputs", spec.inputs, inputs),
        ("outputs", spec.outputs, outputs),
    ):
        if len(declared) != len(actual):
            raise ManifestMismatchError(
                f"field stages.{stage}.{kind} lists {len(declared)} tensors, but program {file} "
                f"has {len(actual)}"
            )
        for tensor, (shape, dtype) in zip(declared, actual, strict=True):
            field = f"stages.{stage}.{kind}.{tensor.name}"
            if dtype != tensor.dtype:
                raise ManifestMismatchError(
                    f"field {field}.dtype = {tensor.dtype!r} in manifest.json, but program "
                    f"{file} has {dtype!r}"
                )
            if tuple(shape) != tensor.shape:
                raise ManifestMismatchError(
                    f"field {field}.shape = {list(tensor.shape)} in manifest.json, but program "
                    f"{file} has {list(shape)}"
                )


def check_tokenizer(manifest: Manifest) -> None:
    """Refuse a tokenizer file whose sha256 differs from the manifest's.

    A ``huggingface`` tokenizer directory: each file its ``files`` lists.

    Raises:
        ManifestMismatchError: naming ``host.token_ids.tokenizer.sha256`` (or ``.files.<name>``).
    """
    tok, path = manifest.tokenizer, manifest.tokenizer_path
    if tok is not None and path is not None and path.is_dir():
        for name, expected in sorted(tok.get("files", {}).items()):
            found = file_sha256(path / name) if (path / name).is_file() else "no such file"
            if found != expected:
                raise ManifestMismatchError(
                    f"field host.token_ids.tokenizer.files.{name} = {expected!r} in "
                    f"{manifest.directory / MANIFEST_NAME}, but {path.name}/{name} hashes to "
                    f"{found!r}"
                )
        return
    if tok is None or path is None or "sha256" not in tok:
        return
    actual = file_sha256(path)
    if actual != tok["sha256"]:
        raise ManifestMismatchError(
            f"field host.token_ids.tokenizer.sha256 = {tok['sha256']!r} in "
            f"{manifest.directory / MANIFEST_NAME}, but {path.name} hashes to {actual!r}"
        )


def check_expected_spec(manifest: Manifest, expected: Any) -> None:
    """Refuse an artifact that does not match what the caller asks for.

    Args:
        manifest: the loaded manifest.
        expected: a :class:`~vla_edge.runners.base.RunnerSpec` (or any object
            with the same attributes) describing the deployment.

    Raises:
        ManifestMismatchError: naming the first differing field, both values.
    """
    pairs = (
        ("joint_names", list(manifest.data["joint_names"]), list(expected.joint_names)),
        ("chunk_horizon", manifest.data["chunk_horizon"], int(expected.chunk_horizon)),
        ("cameras", list(manifest.data["cameras"]), list(expected.cameras)),
        ("image_height", manifest.data["image_height"], int(expected.image_height)),
        ("image_width", manifest.data["image_width"], int(expected.image_width)),
    )
    for name, have, want in pairs:
        if have != want:
            raise ManifestMismatchError(
                f"field {name} = {have} in {manifest.directory / MANIFEST_NAME}, expected {want}"
            )
    if not np.isclose(float(manifest.data["dt_action_s"]), float(expected.dt_action_s)):
        raise ManifestMismatchError(
            f"field dt_action_s = {manifest.data['dt_action_s']} in "
            f"{manifest.directory / MANIFEST_NAME}, expected {expected.dt_action_s}"
        )
