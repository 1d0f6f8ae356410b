r"""SmolVLA (LeRobot) through the v2 stage contract: three programs and what the runners need.

:func:`smolvla_stage_programs` turns a :class:`~vla_edge.archs.smolvla.model.SmolVLAModel`'s
stages (:mod:`vla_edge.archs.smolvla.stages`) into exportable
:class:`~vla_edge.export.stages.StageProgram` s: the stage modules themselves for ONNX;
for ExecuTorch their XNNPACK rewrite (:mod:`vla_edge.export.smolvla_xnnpack`, same
weights, same maths, each stage one XNNPACK call with only the token lookup outside;
:func:`executorch_stages`). :func:`smolvla_contract` writes the rest of the manifest as
LeRobot's inference pipeline does it
(``src/lerobot/policies/smolvla/modeling_smolvla.py`` and ``processor_smolvla.py``):

* ``host.images``: the checkpoint's slots (LeRobot's feature names,
  ``observation.images.*``) fed by robot cameras or ``null`` (a black image, masked: the
  ``-1`` image and zero mask LeRobot gives a missing camera), ``resize: pad_top_left``
  with ``resample: bilinear`` (LeRobot's ``resize_with_pad``: torch bilinear on [0, 1]
  floats, zeros on the left and top), then ``* 2 - 1`` (``pixel_range [-1, 1]``);
* ``host.token_ids``: a Hugging Face tokenizer directory (SmolVLM2's), copied beside the
  programs as ``tokenizer/``, prompt ``smolvla`` (the task with ``"\n"`` appended,
  truncated to and right-padded to ``tokenizer_max_length``); ``token_mask`` float 0/1;
* ``host.state`` / ``noise`` / ``prefix_*`` at the padded widths (``max_state_dim``,
  ``max_action_dim``: 32): the robot's ``N`` dimensions first, zeros after (LeRobot's
  ``pad_vector``);
* ``normalisation``: LeRobot's ``MEAN_STD`` (SmolVLA's default ``normalization_mapping``)
  with LeRobot's epsilon, :data:`NORM_EPSILON`, cut to the robot's ``N`` dimensions (a
  policy directory's: each part at its state or action space's width);
* ``output``: ``action_head.actions`` ``[1, chunk_size, 32]``, the first ``N`` decoded
  (a policy directory's: as many as it has action statistics).

Departures from LeRobot, each named once:

* The prompt is always padded to ``tokenizer_max_length`` (the program's fixed shape);
  LeRobot's default ``pad_language_to="longest"`` does not pad a batch of one. Padded
  slots are masked out of attention and do not advance the positions, so the actions are
  the same.
* LeRobot un-normalises ``MEAN_STD`` actions as ``x * std + mean``, the manifest's codec as
  ``x * (std + eps) + mean``: with ``eps = 1e-8`` the two differ by ``1e-8 * |x|``.
* The runners tokenize with the ``tokenizers`` library (no torch at run time), not
  ``transformers``' ``AutoTokenizer``; :func:`check_prompt_tokens` refuses, at export,
  a tokenizer directory for which the two disagree.

:func:`export_smolvla` exports the three programs and writes ``manifest.json`` with the
tokenizer beside them; :func:`export_policy_dir` does it for a ``vla-edge import`` policy
directory (``vla-edge export --policy DIR``).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from vla_edge.archs.smolvla.config import SmolVLAConfig
from vla_edge.archs.smolvla.model import SmolVLAModel
from vla_edge.archs.smolvla.stages import STAGE_NAMES, SmolVLAStages, build_stages
from vla_edge.core.errors import (
    CameraMapError,
    ConfigError,
    ManifestMismatchError,
    TokenizerMismatchError,
)
from vla_edge.export.manifest import BACKENDS, HF_TOKENIZER_JSON, file_sha256
from vla_edge.export.normalisation import codec_from_section
from vla_edge.export.pipeline import prefix_flow_contract
from vla_edge.export.quant_recipes import QuantRecipe
from vla_edge.export.smolvla_xnnpack import NOT_DELEGATED_WHY, xnnpack_stages
from vla_edge.export.stages import StageProgram, stage_programs

ARCHITECTURE = "smolvla"
OUTPUT = "action_head.actions"
TOKENIZER_DIR = "tokenizer"
"""Where the Hugging Face tokenizer directory's files go, beside the programs."""
PROMPT = "smolvla"
NORM_EPSILON = 1e-8
"""LeRobot's epsilon: ``_NormalizationMixin.eps = 1e-8`` (``processor/normalize_processor.py``,
``(x - mean) / (std + eps)``); the pretrained SmolVLA processors save ``"eps": 1e-8``.
openpi's π0 uses 1e-6."""
STATE_KEYS = ("observation.state", "state")
ACTION_KEYS = ("action", "actions")
"""LeRobot's feature names of the statistics (``observation.state.mean``, ``action.std``),
or this package's part names."""
PROBE_PROMPTS = (
    "pick up the red block and put it in the bowl",
    "  Put_the cube\nin the BOWL ",
    "already ends with a newline\n",
    "stack " * 200,
    "déplace le cube à gauche ✓",
)
"""Prompts on which the runner's tokenizer must equal ``transformers``' (one is past any
``tokenizer_max_length``, so the truncation is compared too)."""


def image_slots(
    config: SmolVLAConfig, camera_map: Mapping[str, str | None]
) -> list[dict[str, Any]]:
    """``[{"name": slot, "camera": robot camera or None}]`` in the checkpoint's slot order.

    Raises:
        CameraMapError: ``camera_map`` names a slot the model lacks, maps no camera, or
            maps one camera twice.
    """
    unknown = sorted(set(camera_map) - set(config.image_slots))
    if unknown:
        raise CameraMapError(
            f"camera_map slot {unknown[0]!r} is not an image slot of the model; expected "
            f"{list(config.image_slots)}"
        )
    slots = [{"name": s, "camera": camera_map.get(s)} for s in config.image_slots]
    cameras = [s["camera"] for s in slots if s["camera"] is not None]
    if not cameras:
        raise CameraMapError(f"camera_map = {dict(camera_map)} maps no robot camera to any slot")
    if len(set(cameras)) != len(cameras):
        raise CameraMapError(f"camera_map = {dict(camera_map)} maps one camera to two slots")
    return slots


def _stat(stats: Mapping[str, Any], names: Sequence[str], stat: str, n: int) -> list[float]:
    """``stats[<name>.<stat>]`` or ``stats[<name>][<stat>]``, cut to ``n`` values."""
    for name in names:
        value = stats.get(f"{name}.{stat}")
        if value is None and isinstance(stats.get(name), Mapping):
            value = stats[name].get(stat)
        if value is not None:
            values = np.asarray(value, dtype=np.float64).ravel()
            if values.size < n:
                raise ConfigError(
                    f"normalisation statistic {name}.{stat} has {values.size} values, expected "
                    f">= {n} (one per joint_names entry)"
                )
            return values[:n].tolist()
    raise ConfigError(f"normalisation statistic {names[0]}.{stat} is missing (MEAN_STD needs it)")


def lerobot_normalisation(
    stats: Mapping[str, Any], n: int, delta_actions: Sequence[bool] | None = None
) -> dict[str, Any]:
    """The manifest's ``normalisation`` (``mean_std``, LeRobot's epsilon) from LeRobot statistics.

    Args:
        stats: the normaliser's state, ``{"observation.state.mean": [...],
            "action.std": [...], ...}`` (the processors' safetensors keys), or nested
            ``{"state": {"mean", "std"}, "actions": {...}}``; cut to ``n`` dimensions.
        n: the robot's dimensions (``len(joint_names)``).
        delta_actions: per dimension, actions relative to the state (default none).

    Raises:
        ConfigError: a statistic is missing or shorter than ``n``.
    """
    delta = [False] * n if delta_actions is None else [bool(d) for d in delta_actions]
    if len(delta) != n:
        raise ConfigError(f"delta_actions has {len(delta)} entries, expected {n}")
    return {
        "kind": "mean_std",
        "epsilon": NORM_EPSILON,
        "state": {s: _stat(stats, STATE_KEYS, s, n) for s in ("mean", "std")},
        "actions": {s: _stat(stats, ACTION_KEYS, s, n) for s in ("mean", "std")},
        "delta_actions": delta,
    }


def smolvla_contract(
    config: SmolVLAConfig,
    *,
    joint_names: Sequence[str],
    camera_map: Mapping[str, str | None],
    dt_action_s: float,
    normalisation: Mapping[str, Any],
    source: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The manifest's fields besides the stages and the exporter (see the module docstring).

    Args:
        normalisation: the manifest's section, each part at its own width
            (:func:`lerobot_normalisation`: the robot's ``N`` dimensions, or a policy
            directory's ``manifest_normalisation()``); checked against the joints and
            the spaces when the manifest is written.

    Raises:
        CameraMapError: a bad camera map.
        ConfigError: more joints than the model's action width, or a bad normalisation.
    """
    n = len(joint_names)
    if not 0 < n <= min(config.action_dim, config.state_dim):
        raise ConfigError(
            f"joint_names has {n} entries, expected 1 to min(action_dim, state_dim) = "
            f"{min(config.action_dim, config.state_dim)}"
        )
    slots = image_slots(config, camera_map)
    try:
        codec_from_section(dict(normalisation), state_dim=None, action_dim=None)
    except ManifestMismatchError as exc:
        raise ConfigError(f"normalisation: {exc}") from exc
    return prefix_flow_contract(
        config,
        architecture=ARCHITECTURE,
        stage_order=STAGE_NAMES,
        output=OUTPUT,
        slots=slots,
        images={"resize": "pad_top_left", "resample": "bilinear"},
        tokenizer={"kind": "huggingface", "file": TOKENIZER_DIR},
        prompt=PROMPT,
        state_dim=config.state_dim,
        chunk_horizon=config.chunk_size,
        normalisation=normalisation,
        joint_names=joint_names,
        dt_action_s=dt_action_s,
        source=source,
    )


def example_inputs(stages: SmolVLAStages, seed: int = 0) -> dict[str, tuple[torch.Tensor, ...]]:
    """Each stage's example inputs, chained: fusion reads real image tokens, the head a real cache.

    The action head's executed-prefix mask covers its first two rows, so tracing sees it.
    Contiguous (row-major, like the runners' numpy arrays: ExecuTorch fixes each input's
    dim order from its example).
    """
    ex = stages.example_inputs(seed)
    with torch.no_grad():
        tokens = stages.vision_encoder(*ex["vision_encoder"])
        cache = stages.fusion(tokens, *ex["fusion"][1:])
    noise, prefix_actions, prefix_mask, x_t, step = ex["action_head"][3:]
    prefix_mask = torch.zeros_like(prefix_mask)
    prefix_mask[0, : min(2, prefix_mask.shape[1] - 1)] = 1.0
    chained = {
        "vision_encoder": ex["vision_encoder"],
        "fusion": (tokens, *ex["fusion"][1:]),
        "action_head": (*cache, noise, prefix_actions, prefix_mask, x_t, step),
    }
    return {
        name: tuple(t.detach().contiguous().clone() for t in tensors)
        for name, tensors in chained.items()
    }


def executorch_stages(model: SmolVLAModel) -> dict[str, nn.Module]:
    """The stages for ExecuTorch: :func:`~vla_edge.export.smolvla_xnnpack.xnnpack_stages`.

    The reference's maths with only operators XNNPACK takes, sharing ``model``'s parameters.
    """
    stages = build_stages(model)
    return xnnpack_stages(stages.vision_encoder, stages.fusion, stages.action_head)


def smolvla_stage_programs(
    model: SmolVLAModel, backend: str = "onnx", seed: int = 0
) -> list[StageProgram]:
    """The three stages of ``model`` as programs to export, with their declared tensors.

    ONNX gets the stage modules themselves, ExecuTorch :func:`executorch_stages`.

    Raises:
        ConfigError: an unknown backend.
    """
    if backend not in BACKENDS:
        raise ConfigError(f"backend = {backend!r}, expected one of {BACKENDS}")
    stages = build_stages(model)
    modules = {name: module.eval() for name, module in stages.modules().items()}
    if backend == "executorch":
        modules = executorch_stages(model)
    return stage_programs(stages, modules, example_inputs(stages, seed))


def tokenizer_files(directory: str | Path) -> dict[str, Path]:
    """The files of a Hugging Face tokenizer directory that are copied, by name.

    Raises:
        TokenizerMismatchError: not a directory holding ``tokenizer.json``.
    """
    from vla_edge.archs.policy_dir import HF_TOKENIZER_FILES

    directory = Path(directory)
    if not (directory / HF_TOKENIZER_JSON).is_file():
        what = (
            "is a file"
            if directory.is_file()
            else "has no tokenizer.json"
            if directory.is_dir()
            else "not found"
        )
        raise TokenizerMismatchError(
            f"tokenizer = {str(directory)!r}: {what}; expected a Hugging Face tokenizer "
            f"directory with {HF_TOKENIZER_JSON} (SmolVLM2's; nothing is fetched)"
        )
    return {name: directory / name for name in HF_TOKENIZER_FILES if (directory / name).is_file()}


def check_prompt_tokens(directory: str | Path, max_len: int) -> None:
    r"""Refuse a tokenizer directory for which the runner's tokens differ from LeRobot's.

    LeRobot tokenizes with ``transformers``: ``AutoTokenizer.from_pretrained(dir)(task +
    "\n", max_length=L, truncation=True, padding=..., padding_side="right")``; the
    runners use :class:`~vla_edge.archs.hf_prompt.SmolVLAPromptTokenizer` (``tokenizers``
    only). Both encode :data:`PROBE_PROMPTS` (padded to ``L`` on both sides here).

    Raises:
        TokenizerMismatchError: the directory has no pad token, or a probe's ids or mask
            differ (the message names the prompt and both id lists).
    """
    from transformers import AutoTokenizer

    from vla_edge.archs.hf_prompt import SmolVLAPromptTokenizer, smolvla_text

    directory = Path(directory)
    try:
        ours = SmolVLAPromptTokenizer(directory, max_len)
    except ManifestMismatchError as exc:
        raise TokenizerMismatchError(f"tokenizer = {str(directory)!r}: {exc}") from exc
    reference = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    for prompt in PROBE_PROMPTS:
        want = reference(
            smolvla_text(prompt),
            max_length=max_len,
            truncation=True,
            padding="max_length",
            padding_side="right",
        )
        ids, mask = ours.encode(prompt)
        if ids[0].tolist() != list(want["input_ids"]) or mask[0].astype(int).tolist() != list(
            want["attention_mask"]
        ):
            raise TokenizerMismatchError(
                f"tokenizer = {str(directory)!r}: prompt {prompt!r} tokenizes to "
                f"{ids[0].tolist()} (mask {int(mask.sum())} tokens) in the runner but to "
                f"{list(want['input_ids'])} (mask {sum(want['attention_mask'])} tokens) with "
                "transformers' AutoTokenizer; this tokenizer cannot be run without transformers"
            )


def export_smolvla(
    model: SmolVLAModel,
    out_dir: str | Path,
    backend: str,
    quant: str | QuantRecipe = "fp32",
    *,
    tokenizer: str | Path,
    joint_names: Sequence[str],
    camera_map: Mapping[str, str | None],
    dt_action_s: float,
    normalisation: Mapping[str, Any],
    source: dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
    calibration_images: list[torch.Tensor] | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Export SmolVLA's three programs, the tokenizer and ``manifest.json`` into ``out_dir``.

    Args:
        tokenizer: a Hugging Face tokenizer directory (SmolVLM2's), copied as ``tokenizer/``.
        normalisation: see :func:`smolvla_contract`.
        extra: more manifest fields (a policy directory's ``action_space``).
        calibration_images: int8 convolutions: vision-encoder inputs ``[n_slots, 3, S, S]`` in
            [-1, 1] that calibrate the int8 patch convolution (else it stays fp32).

    Raises:
        ConfigError: unknown backend or recipe, a quantised recipe on ONNX, or a bad contract
            (:class:`CameraMapError` for the camera map).
        TokenizerMismatchError: no tokenizer directory, or one the runners cannot read as
            ``transformers`` does (checked before anything is written).
    """
    from vla_edge.export.pipeline import (
        check_backend_quant,
        export_architecture,
        exporter_section,
        vision_calibration,
    )

    recipe = check_backend_quant(backend, quant)
    files = tokenizer_files(tokenizer)
    contract = smolvla_contract(
        model.config,
        joint_names=joint_names,
        camera_map=camera_map,
        dt_action_s=dt_action_s,
        normalisation=normalisation,
        source=source,
    )
    check_prompt_tokens(tokenizer, model.config.max_token_len)
    contract.update(extra or {})
    contract["exporter"] = exporter_section(executorch_stages="vla_edge.export.smolvla_xnnpack")
    out_dir = Path(out_dir)
    target = out_dir / TOKENIZER_DIR
    target.mkdir(parents=True, exist_ok=True)
    for name, src in files.items():
        if src.resolve() != (target / name).resolve():
            shutil.copyfile(src, target / name)
    contract["host"]["token_ids"]["tokenizer"]["files"] = {
        name: file_sha256(target / name) for name in files
    }
    calibration = vision_calibration(recipe, calibration_images)
    model.eval()
    return export_architecture(
        smolvla_stage_programs(model, backend),
        out_dir,
        contract,
        backend,
        recipe,
        calibration=calibration,
        not_delegated_why=NOT_DELEGATED_WHY if backend == "executorch" else None,
        log=log,
    )


def load_policy_model(path: str | Path, flow_steps: int | None = None) -> tuple[Any, SmolVLAModel]:
    """A SmolVLA policy directory and its model with the directory's weights.

    Raises:
        ConfigError: the directory holds another architecture, or its prompt or image
            resize is not SmolVLA's.
        PolicyDirError: (and its relatives) an invalid policy directory.
    """
    from vla_edge.archs.policy_dir import load_policy_dir
    from vla_edge.archs.smolvla.checkpoint import load_smolvla_weights

    policy = load_policy_dir(path, verify_sha256=True)
    if policy.architecture != ARCHITECTURE:
        raise ConfigError(
            f"{path}: architecture = {policy.architecture!r}: the SmolVLA exporter exports "
            f"{ARCHITECTURE!r} policy directories (vla-edge export --policy picks the exporter "
            "by architecture)"
        )
    config: SmolVLAConfig = policy.config
    if flow_steps is not None:
        config = SmolVLAConfig(**{**config.model_dump(), "flow_steps": int(flow_steps)})
    if policy.prompt.get("format") != PROMPT:
        raise ConfigError(
            f"{path}: prompt.format = {policy.prompt.get('format')!r}, expected {PROMPT!r}"
        )
    if policy.images.get("resize") != "pad_top_left":
        raise ConfigError(
            f"{path}: images.resize = {policy.images.get('resize')!r}, expected 'pad_top_left' "
            "(LeRobot SmolVLA's resize_with_pad)"
        )
    if policy.tokenizer_dir is None:
        raise ConfigError(f"{path}: tokenizer = {policy.tokenizer!r}: needs a tokenizer dir")
    model = SmolVLAModel(config).eval()
    load_smolvla_weights(policy, model)
    return policy, model


def reference_stages(path: str | Path, flow_steps: int | None = None) -> dict[str, nn.Module]:
    """The eager (reference) stage modules of a SmolVLA policy directory, by stage name."""
    _, model = load_policy_model(path, flow_steps)
    return {stage.name: stage.module for stage in smolvla_stage_programs(model, "onnx")}


def export_policy_dir(
    path: str | Path,
    out_dir: str | Path,
    backend: str,
    quant: str | QuantRecipe = "fp32",
    *,
    flow_steps: int | None = None,
    robot_mjcf: str | Path | None = None,
    ee_site: str | None = None,
    arm_joints: Sequence[str] | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Export a SmolVLA policy directory (``vla-edge import``'s) like :func:`export_smolvla`.

    The weights and the tokenizer are checked against ``policy.yaml``'s hashes; the
    manifest takes the directory's joint names, camera map, ``dt_action_s``, normalisation
    (each part at its space's width), action space and state space (an ``eef_delta`` /
    ``eef_pose`` one with the kinematics, :func:`vla_edge.export.pi0.manifest_kinematics`).

    Args:
        flow_steps: Euler steps ``K`` built into the action head (default: the config's).
        robot_mjcf, ee_site, arm_joints: ``eef_delta``'s and ``eef_pose``'s kinematics
            (the model and site default to the ones the import checked, else the tabletop
            arm's); ignored by the other kinds.

    Raises:
        ConfigError: the directory holds another architecture, or its prompt or image
            resize is not SmolVLA's.
        PolicyDirError: (and its relatives) an invalid policy directory.
    """
    from vla_edge.export.pi0 import manifest_spaces
    from vla_edge.export.pipeline import policy_dir_source

    policy, model = load_policy_model(path, flow_steps)
    source = policy_dir_source(path, policy)
    return export_smolvla(
        model,
        out_dir,
        backend,
        quant,
        tokenizer=policy.tokenizer_dir,
        joint_names=policy.joint_names,
        camera_map=policy.cameras,
        dt_action_s=policy.dt_action_s,
        normalisation=policy.manifest_normalisation(),
        source=source,
        extra=manifest_spaces(policy, robot_mjcf, ee_site, arm_joints),
        log=log,
    )
