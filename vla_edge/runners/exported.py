"""``ExportedRunner``: any architecture's exported stage programs behind the ``Runner`` protocol.

The backends (ONNX Runtime, ExecuTorch) subclass it and only name the
backend their manifest must have. Nothing here knows an architecture: it
loads and validates ``manifest.json`` (v2, whose stages declare their
tensors), opens each stage with the runtime the manifest names for it
(:func:`~vla_edge.runners.programs.open_program`; stages may run on different
backends), checks every program's real inputs and outputs against the
manifest, and then, per observation:

1. makes the policy's state from the observed joints as the manifest's
   ``state_space`` declares (:class:`~vla_edge.actions.StateAdapter`: the
   joints themselves, or ``eef_pose``'s end-effector pose by forward
   kinematics of the manifest's robot model), and the host tensors the stages
   read (``host:<name>``) with the numpy preprocessing of
   :mod:`vla_edge.runners.preprocess` and the declared normalisation (images
   fitted to the model's size as declared, in their slots and pixel range; the
   prompt tokenized as declared, :mod:`vla_edge.runners.tokenizers`; the
   normalised state padded with zeros to the model's width, the noise and the
   executed prefix);
2. runs the stages in ``stage_order``, feeding each input from its source; a
   ``per_instruction`` stage runs once per new instruction and its outputs are
   cached, and so are the token ids unless the prompt holds the state
   (π0.5's ``pi05_state``: tokenized again for every observation);
3. decodes the declared ``output``'s first ``len(joint_names)`` dimensions
   into absolute joint targets, or, when the manifest declares an
   ``action_space`` (a ``vla-edge import`` policy directory's), un-normalises
   its first ``A`` (as many as the action statistics) into the policy's own
   units and turns those into joint targets with
   :class:`~vla_edge.actions.ActionAdapter`.

:meth:`ExportedRunner.infer_native` is the policy without the robot: it takes
the policy's own state (``eef_pose``'s 8 dimensions, say) and returns the
un-normalised ``[H, A]`` actions in the policy's units, as openpi's policy
server does (``vla-edge serve`` answers openpi's LIBERO client with it).

With an action space, the chunk keeps the observation's stamp and step ``i`` is
the target at ``t_obs + i * dt_action_s``, as the controller reads every chunk;
the adapter's convention for step 0 is kept as it is:

* ``joint_position``: step ``i`` is the policy's position ``i`` (step 0 is the
  policy's target at the observation time);
* ``joint_delta``: ``state + delta_i`` (every step relative to the observed
  state, not to the step before);
* ``joint_velocity``: ``state + dt * (v_0 + ... + v_i)`` (a velocity is applied
  over its step, so step 0 is already one step of motion from the state);
* ``eef_delta``: step ``i``'s delta moves the pose commanded at step ``i - 1``,
  the observed pose for step 0 (IK on the manifest's kinematics).

Joints the space does not drive hold their observed position. An action space
declares policy units, not joint positions, so such a runner takes no executed
prefix (``supports_prefix`` is False).

No torch is imported here.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vla_edge.actions import ActionAdapter, ActionSpace, Kinematics, StateAdapter, StateSpace
from vla_edge.core.errors import (
    ActionSpaceError,
    AssetNotFoundError,
    ConfigError,
    InvalidObservationError,
    ManifestMismatchError,
    NonFiniteChunkError,
    StateSpaceError,
)
from vla_edge.core.types import ActionChunk, Observation
from vla_edge.export.manifest import (
    Manifest,
    check_expected_spec,
    check_program_io,
    check_tokenizer,
    load_manifest,
)
from vla_edge.runners.base import NativeSpec, PolicyChunk, RunnerSpec, cache_put
from vla_edge.runners.image_resize import FIT_MODES
from vla_edge.runners.preprocess import (
    check_prefix,
    decode_chunk,
    images_input,
    noise_input,
    pad_last,
    prefix_inputs,
    state_input,
    validate_observation,
)
from vla_edge.runners.programs import StageProgram, open_program
from vla_edge.runners.stage_loop import run_stage
from vla_edge.runners.tokenizers import PromptTokenizer, open_tokenizer

PACKAGE = "vla_edge"
GRIPPER_JOINT = "gripper"


def robot_model_path(mjcf: str, field: str = "action_space.kinematics.mjcf") -> Path:
    """The robot model named by a manifest: absolute as is; relative to the package root.

    A relative path is looked for in the source tree, then in the installed
    ``share/vla_edge`` (the virtual environment's, then the ament index's).

    Raises:
        AssetNotFoundError: no candidate holds the file.
    """
    path = Path(mjcf)
    if path.is_absolute():
        candidates = [path]
    else:
        roots = [Path(__file__).resolve().parents[2], Path(sys.prefix) / "share" / PACKAGE]
        try:
            from ament_index_python.packages import get_package_share_directory

            roots.append(Path(get_package_share_directory(PACKAGE)))
        except (ImportError, LookupError, ValueError, OSError):
            pass
        candidates = [root / path for root in roots]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise AssetNotFoundError(
        f"{field} = {mjcf!r}: no such file; looked in {[str(c) for c in candidates]}"
    )


def manifest_kinematics(kin: Mapping[str, Any], field: str) -> Kinematics:
    """A manifest's ``kinematics = {"mjcf", "site", "joints"}`` loaded with MuJoCo.

    Raises:
        AssetNotFoundError: no such robot model.
        ActionSpaceError: the site or a joint is not in it.
    """
    model_path = robot_model_path(str(kin["mjcf"]), f"{field}.mjcf")
    return Kinematics.from_mjcf(model_path, kin["joints"], str(kin["site"]))


def action_adapter_for(
    section: Mapping[str, Any],
    joint_names: Sequence[str],
    action_dim: int,
    where: str,
    n_stats: int | None = None,
) -> ActionAdapter:
    """The manifest's ``action_space`` on the manifest's robot, or :class:`ActionSpaceError`.

    Refused: an invalid space, a ``policy_dim`` other than the model's width, a
    used dimension past the ``n_stats`` action statistics of the manifest's
    normalisation (default ``N = len(joint_names)``), a missing robot model, and
    whatever :class:`ActionAdapter` refuses (more dimensions than joints,
    ``eef_delta`` without kinematics, ...).
    """
    fields = dict(section)
    kin = fields.pop("kinematics", None)
    space = ActionSpace.from_dict(fields, source=f"{where}: action_space")
    if space.policy_dim != action_dim:
        raise ActionSpaceError(
            f"{where}: action_space.policy_dim = {space.policy_dim}, expected the model's "
            f"action_dim = {action_dim}"
        )
    n = len(joint_names) if n_stats is None else n_stats
    used = [*space.indices, *([] if space.gripper is None else [space.gripper.index])]
    beyond = [i for i in used if i >= n]
    if beyond:
        raise ActionSpaceError(
            f"{where}: action_space uses dimensions {beyond}, but the manifest's "
            f"normalisation covers the first {n} (its action statistics) only"
        )
    kinematics = None
    if kin is not None and space.kind == "eef_delta":
        try:
            kinematics = manifest_kinematics(kin, "action_space.kinematics")
        except AssetNotFoundError as exc:
            raise ActionSpaceError(f"{where}: {exc}") from exc
    return ActionAdapter(space, joint_names, kinematics, gripper_joint=GRIPPER_JOINT)


def state_adapter_for(
    section: Mapping[str, Any] | None,
    joint_names: Sequence[str],
    n_stats: int,
    where: str,
) -> StateAdapter:
    """The manifest's ``state_space`` on the manifest's robot, or :class:`StateSpaceError`.

    ``None`` (a manifest without one) is ``joint_position``. Refused: an invalid
    space, ``eef_pose`` without kinematics or with a robot model, site or joint
    the robot lacks, and a state space whose width is not the ``n_stats`` state
    statistics of the manifest's normalisation.
    """
    fields = dict(section) if section is not None else None
    kin = fields.pop("kinematics", None) if fields is not None else None
    space = StateSpace.from_dict(fields, source=f"{where}: state_space")
    kinematics = None
    if kin is not None and space.kind == "eef_pose":
        try:
            kinematics = manifest_kinematics(kin, "state_space.kinematics")
        except (AssetNotFoundError, ActionSpaceError) as exc:
            raise StateSpaceError(f"{where}: state_space: {exc}") from exc
    try:
        adapter = StateAdapter(space, joint_names, kinematics)
    except StateSpaceError as exc:
        raise StateSpaceError(f"{where}: state_space: {exc}") from exc
    if adapter.width != n_stats:
        raise StateSpaceError(
            f"{where}: state_space kind {space.kind} reads {adapter.width} dimensions "
            f"({', '.join(adapter.names)}), but normalisation.state has {n_stats} statistics"
        )
    return adapter


class WallClock:
    """Per-stage wall times of one observation: ``start(name)`` / ``stop()``, then ``read_ms``."""

    def __init__(self) -> None:
        self._marks: dict[str, float] = {}
        self._open: tuple[str, float] | None = None

    def start(self, name: str) -> None:
        """Mark the start of stage ``name``."""
        self._open = (name, time.perf_counter())

    def stop(self) -> None:
        """Mark the end of the stage started last."""
        assert self._open is not None
        name, begin = self._open
        self._marks[name] = (time.perf_counter() - begin) * 1e3
        self._open = None

    def read_ms(self) -> dict[str, float]:
        """Each stage's milliseconds."""
        return dict(self._marks)


class ExportedRunner:
    """Run an export directory's stage programs as its manifest declares.

    Args:
        path: export directory holding ``manifest.json``.
        threads: intra-op threads of every program (``None``: the runtime's default).
        seed: seed of the numpy noise generator used when ``infer`` gets no noise.
        expected: what the deployment expects (joint names, ``H``, ``dt``,
            cameras, image size); a differing manifest is refused.
        backend: the backend the policy stages must have (``None``: any).
        programs: stage name -> an already opened program to run instead of the
            stage's file (the export's parity check runs the eager torch stages
            through this very host code).
        providers: ONNX Runtime execution providers of the ONNX stages, in
            priority order, each ``'Name[;key=value...]'``
            (``InferenceConfig.onnx_providers``; ``None``: the CPU); ExecuTorch
            stages ignore them.

    Attributes:
        state_adapter: the policy's state from the robot's joints (``state_space``).
        action_adapter: joint targets from the policy's actions (``action_space``), or None.
        native_spec: what :meth:`infer_native` takes and returns.

    Raises:
        ManifestMismatchError: the manifest is invalid or of an old format,
            disagrees with its programs, its tokenizer file, with ``expected``
            or with ``backend``.
        ActionSpaceError: the manifest's ``action_space`` is one the robot
            cannot execute (see :func:`action_adapter_for`).
        StateSpaceError: the manifest's ``state_space`` is one the robot cannot
            observe (see :func:`state_adapter_for`).
    """

    backend_name = "exported"

    def __init__(
        self,
        path: str | Path,
        threads: int | None = None,
        seed: int = 0,
        expected: RunnerSpec | None = None,
        backend: str | None = None,
        programs: Mapping[str, StageProgram] | None = None,
        providers: Sequence[str] | None = None,
    ) -> None:
        self.manifest: Manifest = load_manifest(path)
        if backend is not None and self.manifest.backend != backend:
            raise ManifestMismatchError(
                f"field backend = {self.manifest.backend!r} in {self.manifest.directory}/"
                f"manifest.json, expected {backend!r} for {type(self).__name__}"
            )
        m = self.manifest.data
        where = f"{self.manifest.directory}/manifest.json"
        self.codec = self.manifest.codec
        self.state_adapter = state_adapter_for(
            m.get("state_space"), m["joint_names"], self.codec.state_dim, where
        )
        self.action_adapter: ActionAdapter | None = None
        if "action_space" in m:
            self.action_adapter = action_adapter_for(
                m["action_space"],
                m["joint_names"],
                int(m["action_dim"]),
                where,
                self.codec.action_dim,
            )
        joint_state = self.state_adapter.space.kind == "joint_position"
        self.native_spec = NativeSpec(
            self.state_adapter.space.kind, self.state_adapter.names, self.codec.action_dim
        )
        self.spec = RunnerSpec(
            joint_names=tuple(m["joint_names"]),
            chunk_horizon=int(m["chunk_horizon"]),
            dt_action_s=float(m["dt_action_s"]),
            cameras=tuple(m["cameras"]),
            image_height=int(m["image_height"]),
            image_width=int(m["image_width"]),
            supports_prefix="prefix_actions" in self.manifest.host
            and self.action_adapter is None
            and joint_state,
            model_action_dim=int(m["action_dim"]),
            fits_images=m["host"]["images"]["resize"] in FIT_MODES,
        )
        if expected is not None:
            check_expected_spec(self.manifest, expected)
        check_tokenizer(self.manifest)
        self.threads = threads
        self.model_action_dim = int(m["action_dim"])
        self._programs: dict[str, StageProgram] = {}
        for name in self.manifest.stage_order:
            stage = self.manifest.stages[name]
            program = (programs or {}).get(name) or open_program(
                stage.backend,
                self.manifest.stage_path(name),
                threads,
                [t.name for t in stage.inputs],
                [t.name for t in stage.outputs],
                stage=name,
                providers=providers,
            )
            inputs, outputs = program.io()
            check_program_io(self.manifest, name, inputs, outputs)
            self._programs[name] = program
        self._tokenizer: PromptTokenizer | None = None
        tok, tok_path = self.manifest.tokenizer, self.manifest.tokenizer_path
        if tok is not None and tok_path is not None:
            self._tokenizer = open_tokenizer(
                str(tok["kind"]),
                tok_path,
                int(self.manifest.host["token_ids"].shape[1]),
                str(self.manifest.prompt),
            )
        self._instruction_stages = [
            n
            for n in self.manifest.stage_order
            if self.manifest.stages[n].rate == "per_instruction"
        ]
        self._observation_stages = [
            n
            for n in self.manifest.stage_order
            if self.manifest.stages[n].rate == "per_observation"
        ]
        self._instruction_cache: dict[str, dict[str, np.ndarray]] = {}
        self._rng = np.random.default_rng(int(seed))

    @property
    def image_resize(self) -> str:
        """How the model's images are fitted (``host.images.resize``).

        ``pad`` (openpi's resize_with_pad) / ``pad_top_left`` (LeRobot SmolVLA's) /
        ``center_crop`` (Isaac-GR00T N1.7's, with ``host.images.crop_fraction`` and
        ``letterbox``): images of any size are resized here (``center_crop``: square
        ones, or any with the letterbox).
        ``stretch``: observations must arrive at the model's size; a caller that
        receives other sizes (the openpi-protocol server) resizes them first.
        """
        return str(self.manifest.data["host"]["images"]["resize"])

    @property
    def stage_backends(self) -> dict[str, str]:
        """Backend of each stage."""
        return {name: s.backend for name, s in self.manifest.stages.items()}

    def _tokens(
        self, instruction: str, state_norm: np.ndarray | None = None
    ) -> dict[str, np.ndarray]:
        """``host:token_ids`` / ``host:token_mask`` in their declared dtypes."""
        if self._tokenizer is None:
            return {}
        input_ids, mask = self._tokenizer.encode(instruction, state_norm)
        values = {"host:token_ids": np.ascontiguousarray(input_ids, dtype=np.int64)}
        if "token_mask" in self.manifest.host:
            dtype = self.manifest.host["token_mask"].dtype
            values["host:token_mask"] = np.ascontiguousarray(mask, dtype=dtype)
        return values

    def _run_stage(self, name: str, values: dict[str, np.ndarray]) -> None:
        """Run stage ``name`` on its sources in ``values``; add its outputs there."""
        stage = self.manifest.stages[name]
        program = self._programs[name]
        outputs = run_stage(program.run, stage.inputs, stage.outputs, stage.repeat, values)
        for tensor, value in zip(stage.outputs, outputs, strict=True):
            values[f"stage:{name}.{tensor.name}"] = value

    def instruction_outputs(self, instruction: str) -> tuple[dict[str, np.ndarray], float]:
        """The tokens and the ``per_instruction`` stages' outputs (cached), and the ms spent now.

        Tokens of a prompt that holds the state are not among them (see :meth:`infer`).

        Raises:
            InvalidObservationError: the tokenizer refuses ``instruction``.
        """
        cached = self._instruction_cache.get(instruction)
        if cached is not None:
            return cached, 0.0
        per_observation = self._tokenizer is not None and self._tokenizer.per_observation
        values = {} if per_observation else self._tokens(instruction)
        t0 = time.perf_counter()
        for name in self._instruction_stages:
            self._run_stage(name, values)
        elapsed_ms = (time.perf_counter() - t0) * 1e3
        cache_put(self._instruction_cache, instruction, values)
        return values, elapsed_ms

    def language_embedding(self, instruction: str) -> tuple[np.ndarray | None, float]:
        """The first ``per_instruction`` stage's first output (cached) and the ms spent now.

        ``None`` when the architecture embeds the instruction inside a
        per-observation stage (its tokens are then the cached part).
        """
        values, elapsed_ms = self.instruction_outputs(instruction)
        if not self._instruction_stages:
            return None, elapsed_ms
        first = self._instruction_stages[0]
        name = self.manifest.stages[first].outputs[0].name
        return values[f"stage:{first}.{name}"], elapsed_ms

    def _host_inputs(
        self,
        state: np.ndarray,
        noise: np.ndarray | None,
        prefix_actions: np.ndarray | None,
        prefix_len: int,
    ) -> dict[str, np.ndarray]:
        """``host:<name>`` -> tensor for every declared host input (tokens excepted).

        ``state`` is the policy's state ``[S]``, normalised and padded with zeros to
        the declared ``host.state`` width.
        """
        host, h, a = self.manifest.host, self.spec.chunk_horizon, self.model_action_dim
        values: dict[str, np.ndarray] = {}
        if "state" in host:
            values["host:state"] = pad_last(state_input(self.codec, state), host["state"].shape[1])
        if "noise" in host:
            values["host:noise"] = noise_input(noise, h, a, self._rng)
        if "prefix_actions" in host:
            prefix_a, mask_a = prefix_inputs(self.codec, prefix_actions, prefix_len, state, h)
            values["host:prefix_actions"] = pad_last(prefix_a, a)
            values["host:prefix_mask"] = mask_a
        return values

    def _images(self, obs: Observation) -> dict[str, np.ndarray]:
        entry = self.manifest.data["host"]["images"]
        images, mask = images_input(
            obs.images,
            [slot.get("camera") for slot in entry["slots"]],
            self.spec.image_height,
            self.spec.image_width,
            tuple(entry["pixel_range"]),
            resize=self.image_resize,
            crop_fraction=float(entry.get("crop_fraction", 1.0)),
            letterbox=bool(entry.get("letterbox", False)),
        )
        values = {"host:images": images}
        if "image_mask" in self.manifest.host:
            values["host:image_mask"] = mask
        return values

    def infer(
        self,
        obs: Observation,
        noise: np.ndarray | None = None,
        prefix_actions: np.ndarray | None = None,
        prefix_len: int = 0,
    ) -> ActionChunk:
        """Compute the chunk for ``obs`` (see :class:`vla_edge.runners.base.Runner`).

        ``obs.state`` is the robot's joints; the policy's state is made from them
        (:attr:`state_adapter`). ``noise`` is ``[H, A]`` of the model's action width
        ``A`` (the manifest's ``action_dim``; ``len(joint_names)`` unless the model
        is padded).

        Raises:
            ConfigError: the runner was closed.
            ChunkRejectedError: (:class:`NonFiniteChunkError` and its relatives)
                the model's output, or the targets made from it, hold NaN or
                inf; no chunk is returned.
        """
        self._check_open()
        validate_observation(obs, self.spec, resize=self.image_resize)
        h, n = self.spec.chunk_horizon, self.spec.action_dim
        prefix_len, _ = check_prefix(prefix_actions, prefix_len, h, n)
        if prefix_len and not self.spec.supports_prefix:
            raise InvalidObservationError(
                f"prefix_len = {prefix_len}, expected 0: {self.manifest.directory} declares no "
                "host prefix_actions input"
            )
        state = np.asarray(obs.state, dtype=np.float64)
        policy_state = self.state_adapter.policy_state(state)
        output, timings = self._run(obs, policy_state, noise, prefix_actions, prefix_len)
        if self.action_adapter is None:
            positions = decode_chunk(
                self.codec, output[..., :n], policy_state, prefix_actions, prefix_len
            )
        else:
            positions = self._adapted(output, policy_state, state)
        return ActionChunk(
            t_obs_s=float(obs.stamp_s),
            dt_action_s=self.spec.dt_action_s,
            joint_names=self.spec.joint_names,
            positions=positions,
            timings_ms=timings,
        )

    def infer_native(self, obs: Observation, noise: np.ndarray | None = None) -> PolicyChunk:
        """The policy's own actions for ``obs`` whose state is the policy's own state.

        ``obs.state`` is the state in the policy's units (:attr:`native_spec`: openpi
        LIBERO's 8-D end-effector pose for ``eef_pose``), not the robot's joints; the
        reply is the model's first ``A`` output dimensions un-normalised
        (``[H, native_spec.action_dim]``: openpi's LIBERO policy returns the same
        7), not joint targets: no action space, kinematics or prefix is involved.

        Raises:
            ConfigError: the runner was closed.
            InvalidObservationError: a bad image or instruction, or a state that is not
                ``native_spec.state_dim`` finite numbers.
            NonFiniteChunkError: the model's output holds NaN or inf.
        """
        self._check_open()
        width = self.native_spec.state_dim
        validate_observation(obs, self.spec, resize=self.image_resize, state_dim=width)
        state = np.asarray(obs.state, dtype=np.float64)
        output, timings = self._run(obs, state, noise, None, 0)
        a = self.codec.action_dim
        actions = decode_chunk(self.codec, output[..., :a], state, None, 0)
        return PolicyChunk(float(obs.stamp_s), self.spec.dt_action_s, actions, timings)

    def _check_open(self) -> None:
        if not self._programs:
            raise ConfigError(
                f"{type(self).__name__} for {self.manifest.directory} is closed: infer() after "
                "close(); build a new runner"
            )

    def _run(
        self,
        obs: Observation,
        policy_state: np.ndarray,
        noise: np.ndarray | None,
        prefix_actions: np.ndarray | None,
        prefix_len: int,
    ) -> tuple[np.ndarray, dict[str, float]]:
        """The model's output ``[1, H, action_dim]`` (normalised) and each stage's ms."""
        values = self._host_inputs(policy_state, noise, prefix_actions, prefix_len)
        cached, instruction_ms = self.instruction_outputs(obs.instruction)
        values.update(cached)
        if self._tokenizer is not None and self._tokenizer.per_observation:
            values.update(self._tokens(obs.instruction, state_input(self.codec, policy_state)[0]))
        values.update(self._images(obs))
        timings = {name: instruction_ms for name in self._instruction_stages[:1]}
        timings.update({name: 0.0 for name in self._instruction_stages[1:]})
        clock = self._stage_clock()
        for name in self._observation_stages:
            clock.start(name)
            self._run_stage(name, values)
            clock.stop()
        stage, output = self.manifest.output
        result = self._to_host(values[f"stage:{stage}.{output}"])
        timings.update(clock.read_ms())
        return result, timings

    def _stage_clock(self) -> WallClock:
        """What times the stages of one observation (a device runner times them on the device)."""
        return WallClock()

    def _to_host(self, value: Any) -> np.ndarray:
        """The declared output as a numpy array (a device runner copies it from the device)."""
        return np.asarray(value)

    def _adapted(
        self, output: np.ndarray, policy_state: np.ndarray, joints: np.ndarray
    ) -> np.ndarray:
        """Joint targets ``[H, N]`` from the model's output ``[1, H, A]`` through the action space.

        The first ``A`` dimensions (the action statistics') are un-normalised as the
        manifest declares (the policy's own units, relative to ``policy_state`` on
        its delta dimensions; the others, unused, stay as the model gave them), then
        :meth:`ActionAdapter.to_joint_positions` makes the targets from ``joints``.
        """
        assert self.action_adapter is not None
        arr = np.asarray(output)
        arr = arr.reshape(arr.shape[-2:])
        a = self.codec.action_dim
        raw = arr.astype(np.float64)
        raw[:, :a] = decode_chunk(self.codec, arr[:, :a], policy_state, None, 0)
        positions = self.action_adapter.to_joint_positions(raw, joints, self.spec.dt_action_s)
        if not np.all(np.isfinite(positions)):  # the adapter checks too: never pass NaN on
            raise NonFiniteChunkError(f"adapted chunk holds a non-finite target: {positions}")
        return positions

    def close(self) -> None:
        """Drop the cached instruction outputs and the programs; a later ``infer`` raises."""
        self._instruction_cache.clear()
        self._programs.clear()
