"""``TorchRunner``: the reference backend, eager PyTorch on the policy's four stages.

Every edge backend is compared with it (parity, closed-loop success). It
validates the observation before touching torch, caches the language
embedding per instruction, normalises the state and the executed prefix with
the checkpoint's statistics, and returns absolute joint targets.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path

import numpy as np
import torch

from vla_edge.config.models import DEFAULT_NOISE_SCALE, MAX_FLOW_STEPS
from vla_edge.core.errors import ConfigError
from vla_edge.core.types import ActionChunk, Observation
from vla_edge.policy.action_head import ActionHead
from vla_edge.policy.model import VlaPolicy, load_checkpoint
from vla_edge.runners.base import RunnerSpec, cache_put
from vla_edge.runners.preprocess import (
    check_noise,
    check_prefix,
    decode_chunk,
    prefix_inputs,
    state_input,
    validate_observation,
)


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
    """Run a :class:`VlaPolicy` in eager PyTorch.

    Args:
        policy: a policy or a checkpoint path.
        threads: torch intra-op threads (``None`` leaves torch's setting).
        seed: seed of the noise generator used when ``infer`` gets no noise.
        flow_steps: override the number of Euler steps ``K`` (``None``: the
            policy's). The override is this runner's own: a policy object shared
            with other runners keeps its ``K``.

    Raises:
        ConfigError: ``flow_steps`` is not an int in ``1..MAX_FLOW_STEPS``.
        CheckpointError: ``policy`` is a path to a bad checkpoint.
    """

    def __init__(
        self,
        policy: VlaPolicy | str | Path,
        threads: int | None = None,
        seed: int = 0,
        flow_steps: int | None = None,
    ) -> None:
        if flow_steps is not None:
            flow_steps = _check_flow_steps(flow_steps)
        if threads is not None:
            torch.set_num_threads(int(threads))
        owned = not isinstance(policy, VlaPolicy)
        if owned:
            policy = load_checkpoint(policy, load_language=True)
        policy.ensure_language_encoder()
        policy.eval()
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
        from vla_edge.policy.tokenizer import InstructionTokenizer

        self._tokenizer = InstructionTokenizer(cfg.max_instruction_tokens)
        self._lang_cache: dict[str, torch.Tensor] = {}
        self._generator = torch.Generator().manual_seed(int(seed))

    def language_embedding(self, instruction: str) -> tuple[torch.Tensor, float]:
        """Cached ``[1, 384]`` embedding and the time spent computing it now (ms)."""
        cached = self._lang_cache.get(instruction)
        if cached is not None:
            return cached, 0.0
        input_ids, mask = self._tokenizer.encode(instruction)
        t0 = time.perf_counter()
        with torch.inference_mode():
            emb = self.policy.language_encoder(torch.from_numpy(input_ids), torch.from_numpy(mask))
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
        state_t = torch.from_numpy(state_input(self.policy.codec, state))
        noise_t = self._noise(noise)
        prefix_t, mask_t = self._prefix(prefix_actions, prefix_len, state)
        lang, lang_ms = self.language_embedding(obs.instruction)
        images = np.stack([obs.images[cam] for cam in self.spec.cameras])
        images_t = torch.from_numpy(images).permute(0, 3, 1, 2).float().div_(255.0)
        timings = {"language_encoder": lang_ms}
        with torch.inference_mode():
            t0 = time.perf_counter()
            visual = self.policy.vision_encoder(images_t)
            t1 = time.perf_counter()
            context = self.policy.fusion(visual, lang, state_t)
            t2 = time.perf_counter()
            actions_norm = self._action_head(context, noise_t, prefix_t, mask_t)
            t3 = time.perf_counter()
        timings["vision_encoder"] = (t1 - t0) * 1e3
        timings["fusion"] = (t2 - t1) * 1e3
        timings["action_head"] = (t3 - t2) * 1e3
        positions = decode_chunk(
            self.policy.codec, actions_norm[0].numpy(), state, prefix_actions, prefix_len
        )
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


def _head_with_flow_steps(head: ActionHead, flow_steps: int) -> ActionHead:
    """A shallow copy of ``head`` that shares its weights but integrates ``flow_steps`` steps.

    ``copy.copy`` gives the module its own attribute dict (so ``flow_steps`` is
    set on the copy only) while the parameter and sub-module containers stay
    shared with ``head``.
    """
    own = copy.copy(head)
    own.flow_steps = flow_steps
    return own
