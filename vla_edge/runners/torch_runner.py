"""``TorchRunner``: the reference backend, PyTorch on the policy's four stages.

Every edge backend is compared with it (parity, closed-loop success). It
validates the observation before touching torch, caches the language
embedding per instruction, normalises the state and the executed prefix with
the checkpoint's statistics, and returns absolute joint targets.

Where it runs (:mod:`vla_edge.runners.torch_device`): ``device`` ``cpu`` (the
default: eager float32, the reference), ``cuda`` or ``cuda:N``; ``dtype`` the
weights' dtype of the three per-observation stages (``auto``: bfloat16 on a
GPU, float32 on the CPU). The language encoder, run once per instruction, keeps
float32 weights. The inputs of an observation are uploaded once, the stages pass
device tensors on, and only the chunk comes back to the host; on CUDA the three
per-observation stages are captured as CUDA graphs (``cuda_graphs``) and timed
with CUDA events.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path

import numpy as np
import torch

from vla_edge.archs.bundled.action_head import ActionHead
from vla_edge.archs.bundled.model import TRAINED_STAGES, VlaPolicy, load_checkpoint
from vla_edge.archs.bundled.stages import bundled_stage_io
from vla_edge.config.models import DEFAULT_NOISE_SCALE, MAX_FLOW_STEPS
from vla_edge.core.errors import ConfigError
from vla_edge.core.types import ActionChunk, Observation
from vla_edge.export.manifest import StageSpec
from vla_edge.runners.base import RunnerSpec, cache_put
from vla_edge.runners.preprocess import (
    check_noise,
    check_prefix,
    decode_chunk,
    prefix_inputs,
    state_input,
    validate_observation,
)
from vla_edge.runners.torch_device import (
    DeviceStage,
    place_module,
    resolve_device,
    resolve_dtype,
    stage_clock,
    to_host,
)

LANGUAGE_DTYPE = torch.float32
"""Weights' dtype of the language encoder on any device (run once per instruction, cached)."""


def _check_flow_steps(flow_steps: object) -> int:
    """``flow_steps`` as an int in ``1..MAX_FLOW_STEPS``.

    Raises:
        ConfigError: not an integer, or out of range.
    """
    if isinstance(flow_steps, bool | np.bool_) or not isinstance(flow_steps, int | np.integer):
        raise ConfigError(
            f"flow_steps = {flow_steps!r} ({type(flow_steps).__name__}): expected an int "
            f"1 <= K <= {MAX_FLOW_STEPS}"
        )
    if not 1 <= flow_steps <= MAX_FLOW_STEPS:
        raise ConfigError(f"flow_steps = {flow_steps}: expected 1 <= K <= {MAX_FLOW_STEPS}")
    return int(flow_steps)


class TorchRunner:
    """Run a :class:`VlaPolicy` in PyTorch, on the CPU or a CUDA device.

    Args:
        policy: a policy or a checkpoint path.
        threads: torch intra-op threads (``None`` leaves torch's setting).
        seed: seed of the noise generator used when ``infer`` gets no noise
            (drawn on the CPU, so a seed gives the same noise on every device).
        flow_steps: override the number of Euler steps ``K`` (``None``: the
            policy's). The override is this runner's own: a policy object shared
            with other runners keeps its ``K``.
        device: ``cpu``, ``cuda`` or ``cuda:N``.
        dtype: weights' dtype of the vision encoder, fusion and action head:
            ``auto`` (bfloat16 on CUDA, float32 on the CPU), ``float32``,
            ``bfloat16`` or ``float16``. A policy object that would have to move
            or change dtype is copied first: the caller's stays as it is.
        cuda_graphs: on CUDA, capture each per-observation stage as a CUDA graph
            on its first call and replay it after (ignored on the CPU).

    Raises:
        ConfigError: ``flow_steps`` is not an int in ``1..MAX_FLOW_STEPS``, or an
            unknown ``device`` or ``dtype`` name.
        DeviceUnavailableError: ``device`` is a CUDA device this machine lacks.
        CheckpointError: ``policy`` is a path to a bad checkpoint.
    """

    def __init__(
        self,
        policy: VlaPolicy | str | Path,
        threads: int | None = None,
        seed: int = 0,
        flow_steps: int | None = None,
        device: str = "cpu",
        dtype: str = "auto",
        cuda_graphs: bool = True,
    ) -> None:
        if flow_steps is not None:
            flow_steps = _check_flow_steps(flow_steps)
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype, self.device)
        if threads is not None:
            torch.set_num_threads(int(threads))
        owned = not isinstance(policy, VlaPolicy)
        if owned:
            policy = load_checkpoint(policy, load_language=True)
        policy.ensure_language_encoder()
        if not owned and not _is_placed(policy, self.device, self.dtype):
            policy, owned = copy.deepcopy(policy), True
        _place_policy(policy, self.device, self.dtype)
        head = policy.action_head
        if flow_steps is not None and flow_steps != head.flow_steps:
            if owned:  # nobody else holds this policy: its K is the runner's
                head.flow_steps = flow_steps
            else:
                head = _head_with_flow_steps(head, flow_steps)
        self.policy = policy
        self._action_head = head
        cfg = policy.config
        self.spec = RunnerSpec(
            joint_names=tuple(cfg.joint_names),
            chunk_horizon=cfg.chunk_horizon,
            dt_action_s=cfg.dt_action_s,
            cameras=tuple(cfg.cameras),
            image_height=cfg.image_height,
            image_width=cfg.image_width,
            supports_prefix=True,
        )
        from vla_edge.archs.bundled.tokenizer import InstructionTokenizer

        self._tokenizer = InstructionTokenizer(cfg.max_instruction_tokens)
        self._lang_cache: dict[str, torch.Tensor] = {}
        self._generator = torch.Generator().manual_seed(int(seed))
        declared = _declared_stages(policy, self.dtype)
        self._stages = {
            name: DeviceStage(module, declared[name], self.device, cuda_graphs)
            for name, module in (
                ("vision_encoder", policy.vision_encoder),
                ("fusion", policy.fusion),
                ("action_head", head),
            )
        }

    def _upload(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` on this runner's device (itself on the CPU)."""
        return tensor.to(self.device, non_blocking=True)

    def language_embedding(self, instruction: str) -> tuple[torch.Tensor, float]:
        """Cached ``[1, 384]`` embedding (on the device) and the time spent computing it now, ms."""
        cached = self._lang_cache.get(instruction)
        if cached is not None:
            return cached, 0.0
        input_ids, mask = self._tokenizer.encode(instruction)
        t0 = time.perf_counter()
        with torch.inference_mode():
            emb = self.policy.language_encoder(
                self._upload(torch.from_numpy(input_ids)), self._upload(torch.from_numpy(mask))
            )
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        elapsed_ms = (time.perf_counter() - t0) * 1e3
        cache_put(self._lang_cache, instruction, emb)
        return emb, elapsed_ms

    @property
    def flow_steps(self) -> int:
        """Euler steps ``K`` this runner integrates."""
        return int(self._action_head.flow_steps)

    def _noise(self, noise: np.ndarray | None) -> torch.Tensor:
        h, a = self.spec.chunk_horizon, self.spec.action_dim
        if noise is None:
            return torch.randn(1, h, a, generator=self._generator) * DEFAULT_NOISE_SCALE
        return torch.from_numpy(check_noise(noise, h, a).copy())

    def _prefix(
        self, prefix_actions: np.ndarray | None, prefix_len: int, state: np.ndarray
    ) -> tuple[torch.Tensor, torch.Tensor]:
        actions, mask = prefix_inputs(
            self.policy.codec, prefix_actions, prefix_len, state, self.spec.chunk_horizon
        )
        return torch.from_numpy(actions), torch.from_numpy(mask)

    def infer(
        self,
        obs: Observation,
        noise: np.ndarray | None = None,
        prefix_actions: np.ndarray | None = None,
        prefix_len: int = 0,
    ) -> ActionChunk:
        """Compute the chunk for ``obs`` (see :class:`vla_edge.runners.base.Runner`)."""
        validate_observation(obs, self.spec)
        h, a = self.spec.chunk_horizon, self.spec.action_dim
        prefix_len, _ = check_prefix(prefix_actions, prefix_len, h, a)
        state = np.asarray(obs.state, dtype=np.float64)
        state_t = self._upload(torch.from_numpy(state_input(self.policy.codec, state)))
        noise_t = self._upload(self._noise(noise))
        prefix_t, mask_t = map(self._upload, self._prefix(prefix_actions, prefix_len, state))
        lang, lang_ms = self.language_embedding(obs.instruction)
        images = np.stack([obs.images[cam] for cam in self.spec.cameras])
        images_t = self._upload(torch.from_numpy(images)).permute(0, 3, 1, 2).float().div_(255.0)
        clock = stage_clock(self.device)
        with torch.inference_mode():
            clock.start("vision_encoder")
            (visual,) = self._stages["vision_encoder"].run([images_t])
            clock.stop()
            clock.start("fusion")
            (context,) = self._stages["fusion"].run([visual, lang, state_t])
            clock.stop()
            clock.start("action_head")
            (actions_norm,) = self._stages["action_head"].run([context, noise_t, prefix_t, mask_t])
            clock.stop()
            actions_host = to_host(actions_norm[0])
        timings = {"language_encoder": lang_ms, **clock.read_ms()}
        positions = decode_chunk(self.policy.codec, actions_host, state, prefix_actions, prefix_len)
        return ActionChunk(
            t_obs_s=float(obs.stamp_s),
            dt_action_s=self.spec.dt_action_s,
            joint_names=self.spec.joint_names,
            positions=positions,
            timings_ms=timings,
        )

    def close(self) -> None:
        """Drop the cached embeddings."""
        self._lang_cache.clear()


def _stage_dtypes(dtype: torch.dtype) -> dict[str, torch.dtype]:
    """Weights' dtype of each stage: ``dtype``, the language encoder's :data:`LANGUAGE_DTYPE`."""
    return {"language_encoder": LANGUAGE_DTYPE, **dict.fromkeys(TRAINED_STAGES, dtype)}


def _is_placed(policy: VlaPolicy, device: torch.device, dtype: torch.dtype) -> bool:
    """Whether every stage of ``policy`` already sits on ``device`` in its weights' dtype."""
    for name, want in _stage_dtypes(dtype).items():
        for param in getattr(policy, name).parameters():
            if param.device != device or (param.is_floating_point() and param.dtype != want):
                return False
    return True


def _place_policy(policy: VlaPolicy, device: torch.device, dtype: torch.dtype) -> None:
    """Every stage of ``policy`` on ``device`` in its weights' dtype, in eval mode."""
    policy.eval()
    for name, want in _stage_dtypes(dtype).items():
        place_module(getattr(policy, name), device, want)


def _declared_stages(policy: VlaPolicy, dtype: torch.dtype) -> dict[str, StageSpec]:
    """Each stage's declared tensors (as an export's manifest has them), for ``DeviceStage``."""
    quant = str(dtype).removeprefix("torch.")
    return {
        name: StageSpec(name, "", "torch", quant, rate, inputs, outputs)
        for name, (rate, inputs, outputs) in bundled_stage_io(policy).items()
    }


def _head_with_flow_steps(head: ActionHead, flow_steps: int) -> ActionHead:
    """A shallow copy of ``head`` that shares its weights but integrates ``flow_steps`` steps.

    ``copy.copy`` gives the module its own attribute dict (so ``flow_steps`` is
    set on the copy only) while the parameter and sub-module containers stay
    shared with ``head``.
    """
    own = copy.copy(head)
    own.flow_steps = flow_steps
    return own
