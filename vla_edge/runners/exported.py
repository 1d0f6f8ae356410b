"""``ExportedRunner``: the four exported stage programs behind the ``Runner`` protocol.

The backends (ONNX Runtime, ExecuTorch) subclass it and only name the
backend their manifest must have. It loads and validates ``manifest.json``,
opens each stage with the runtime the manifest names for it
(:func:`~vla_edge.runners.programs.open_program`; the language stage may run
on another backend than the policy), checks every program's real inputs and
outputs against the manifest, tokenizes with the ``tokenizer.json`` copied beside the programs,
caches the language embedding per instruction, and does the same numpy pre-
and post-processing as the torch reference (:mod:`vla_edge.runners.preprocess`).
No torch is imported here.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from vla_edge.core.errors import ConfigError, ManifestMismatchError
from vla_edge.core.types import ActionChunk, Observation
from vla_edge.export.manifest import (
    STAGE_NAMES,
    Manifest,
    check_expected_spec,
    check_program_io,
    load_manifest,
)
from vla_edge.policy.normalize import ActionCodec
from vla_edge.runners.base import RunnerSpec, cache_put
from vla_edge.runners.preprocess import (
    check_prefix,
    decode_chunk,
    images_to_nchw,
    noise_input,
    prefix_inputs,
    state_input,
    validate_observation,
)
from vla_edge.runners.programs import StageProgram, open_program


class ExportedRunner:
    """Run an export directory's stage programs.

    Args:
        path: export directory holding ``manifest.json``.
        threads: intra-op threads of every program (``None``: the runtime's default).
        seed: seed of the numpy noise generator used when ``infer`` gets no noise.
        expected: what the deployment expects (joint names, ``H``, ``dt``,
            cameras, image size); a differing manifest is refused.
        backend: the backend the policy stages must have (``None``: any).

    Raises:
        ManifestMismatchError: the manifest is invalid, disagrees with its
            programs, with ``expected`` or with ``backend``.
    """

    backend_name = "exported"

    def __init__(
        self,
        path: str | Path,
        threads: int | None = None,
        seed: int = 0,
        expected: RunnerSpec | None = None,
        backend: str | None = None,
    ) -> None:
        self.manifest: Manifest = load_manifest(path)
        if backend is not None and self.manifest.backend != backend:
            raise ManifestMismatchError(
                f"field backend = {self.manifest.backend!r} in {self.manifest.directory}/"
                f"manifest.json, expected {backend!r} for {type(self).__name__}"
            )
        m = self.manifest.data
        self.spec = RunnerSpec(
            joint_names=tuple(m["joint_names"]),
            chunk_horizon=int(m["chunk_horizon"]),
            dt_action_s=float(m["dt_action_s"]),
            cameras=tuple(m["cameras"]),
            image_height=int(m["image_height"]),
            image_width=int(m["image_width"]),
            supports_prefix=True,
        )
        if expected is not None:
            check_expected_spec(self.manifest, expected)
        self.threads = threads
        self.codec = ActionCodec(self.manifest.norm_stats, list(m["delta_actions"]))
        self._programs: dict[str, StageProgram] = {}
        for name in STAGE_NAMES:
            stage = self.manifest.stages[name]
            program = open_program(
                stage.backend,
                self.manifest.stage_path(name),
                threads,
                [t.name for t in stage.inputs],
            )
            inputs, outputs = program.io()
            check_program_io(self.manifest, name, inputs, outputs)
            self._programs[name] = program
        from vla_edge.policy.tokenizer import InstructionTokenizer

        self._tokenizer = InstructionTokenizer(
            int(m["max_instruction_tokens"]), model_dir=self.manifest.directory
        )
        self._lang_cache: dict[str, np.ndarray] = {}
        self._rng = np.random.default_rng(int(seed))

    @property
    def stage_backends(self) -> dict[str, str]:
        """Backend of each stage."""
        return {name: s.backend for name, s in self.manifest.stages.items()}

    def language_embedding(self, instruction: str) -> tuple[np.ndarray, float]:
        """Cached ``[1, 384]`` embedding and the time spent computing it now (ms)."""
        cached = self._lang_cache.get(instruction)
        if cached is not None:
            return cached, 0.0
        input_ids, mask = self._tokenizer.encode(instruction)
        t0 = time.perf_counter()
        emb = self._programs["language_encoder"].run([input_ids, mask])
        elapsed_ms = (time.perf_counter() - t0) * 1e3
        cache_put(self._lang_cache, instruction, emb)
        return emb, elapsed_ms

    def infer(
        self,
        obs: Observation,
        noise: np.ndarray | None = None,
        prefix_actions: np.ndarray | None = None,
        prefix_len: int = 0,
    ) -> ActionChunk:
        """Compute the chunk for ``obs`` (see :class:`vla_edge.runners.base.Runner`).

        Raises:
            ConfigError: the runner was closed.
        """
        if not self._programs:
            raise ConfigError(
                f"{type(self).__name__} for {self.manifest.directory} is closed: infer() after "
                "close(); build a new runner"
            )
        validate_observation(obs, self.spec)
        h, a = self.spec.chunk_horizon, self.spec.action_dim
        prefix_len, _ = check_prefix(prefix_actions, prefix_len, h, a)
        state = np.asarray(obs.state, dtype=np.float64)
        state_a = state_input(self.codec, state)
        noise_a = noise_input(noise, h, a, self._rng)
        prefix_a, mask_a = prefix_inputs(self.codec, prefix_actions, prefix_len, state, h)
        lang, lang_ms = self.language_embedding(obs.instruction)
        images = images_to_nchw(obs.images, self.spec.cameras)
        timings = {"language_encoder": lang_ms}
        t0 = time.perf_counter()
        visual = self._programs["vision_encoder"].run([images])
        t1 = time.perf_counter()
        context = self._programs["fusion"].run([visual, lang, state_a])
        t2 = time.perf_counter()
        actions_norm = self._programs["action_head"].run([context, noise_a, prefix_a, mask_a])
        t3 = time.perf_counter()
        timings["vision_encoder"] = (t1 - t0) * 1e3
        timings["fusion"] = (t2 - t1) * 1e3
        timings["action_head"] = (t3 - t2) * 1e3
        positions = decode_chunk(self.codec, actions_norm, state, prefix_actions, prefix_len)
        return ActionChunk(
            t_obs_s=float(obs.stamp_s),
            dt_action_s=self.spec.dt_action_s,
            joint_names=self.spec.joint_names,
            positions=positions,
            timings_ms=timings,
        )

    def close(self) -> None:
        """Drop the cached embeddings and the programs; a later ``infer`` raises ``ConfigError``."""
        self._lang_cache.clear()
        self._programs.clear()
