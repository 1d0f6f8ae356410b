"""Fit the policy to recorded demonstrations (:func:`train`; ``vla-edge train``).

``vla-edge train --data DIR --out CKPT [--config YAML [--stage NAME]] [--steps N] [--resume]``
is the command (:mod:`vla_edge.cli.train`).

* Normalisation statistics come from the training episodes and are saved in
  the checkpoint; a few episodes per task are held out for the validation loss
  printed every ``val_every`` steps.
* The frozen language encoder runs once per distinct instruction before the
  loop; the loop sees only the cached embeddings.
* Optional auxiliary losses on the first ``layout_loss_steps`` steps of each
  episode, through small probes used only in training (not exported):
  ``layout_loss_weight`` regresses every object's and the target's initial
  position (``ChunkSamples.layout``) from the visual tokens;
  ``goal_loss_weight`` regresses the instructed object's and its
  destination's positions (``ChunkSamples.goal``) from the fused context, so
  the instruction must pick them out. Closed-loop success hinges on making
  for the instructed object from the start pose, which the action loss alone
  teaches slowly.
* ``ema_decay > 0`` keeps an exponential moving average of the weights; the
  checkpoint's policy is that average (the raw weights are stored beside it
  to resume), which smooths out the step-to-step jitter of the last updates.
* Everything random in step ``s`` is drawn from generators seeded by
  ``(seed, s)``, so a run resumed from a checkpoint (``--resume``) follows the
  same trajectory as one that was never interrupted.
"""

from __future__ import annotations

import copy
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812

from vla_edge.archs.bundled.config import PolicyConfig, TrainConfig, TrainFileConfig
from vla_edge.archs.bundled.data import ChunkSamples, load_episodes, split_episodes
from vla_edge.archs.bundled.model import (
    VlaPolicy,
    checkpoint_configs,
    checkpoint_stats,
    checkpoint_train_modules,
    read_checkpoint,
    save_checkpoint,
)
from vla_edge.archs.bundled.normalize import ActionCodec, compute_stats
from vla_edge.core.errors import CheckpointError

VAL_SEED_OFFSET = 7919


def embed_instructions(instructions: list[str], max_tokens: int) -> torch.Tensor:
    """``[n, 384]`` frozen-MiniLM embeddings, row ``i`` that of ``instructions[i]``."""
    from vla_edge.archs.bundled.language import InstructionEmbedder

    embedder = InstructionEmbedder(max_tokens)
    return torch.cat([embedder(text) for text in instructions], dim=0)


def shift_images(
    images: torch.Tensor, max_shift_px: int, generator: torch.Generator
) -> torch.Tensor:
    """Translate each image ``[N, 3, h, w]`` by up to ``max_shift_px`` (border padding)."""
    if max_shift_px <= 0:
        return images
    n, _, h, w = images.shape
    shift = (torch.rand(n, 2, generator=generator) * 2.0 - 1.0) * max_shift_px
    theta = torch.zeros(n, 2, 3)
    theta[:, 0, 0] = 1.0
    theta[:, 1, 1] = 1.0
    theta[:, 0, 2] = shift[:, 0] * 2.0 / w
    theta[:, 1, 2] = shift[:, 1] * 2.0 / h
    grid = F.affine_grid(theta, list(images.shape), align_corners=False)
    return F.grid_sample(images, grid, padding_mode="border", align_corners=False)


class LayoutProbe(torch.nn.Module):
    """Training-only head: ``tokens`` tokens per observation -> normalised targets ``[B, L]``."""

    def __init__(
        self, tokens: int, d_model: int, layout_width: int, mean: np.ndarray, std: np.ndarray
    ):
        super().__init__()
        self.per_token = torch.nn.Linear(d_model, 16)
        self.out = torch.nn.Sequential(
            torch.nn.GELU(approximate="tanh"), torch.nn.Linear(tokens * 16, layout_width)
        )
        self.tokens = tokens
        self.register_buffer("mean", torch.as_tensor(mean, dtype=torch.float32))
        self.register_buffer("std", torch.as_tensor(std, dtype=torch.float32))

    def loss(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """MSE of the normalised targets; ``tokens`` hold ``self.tokens`` per target row."""
        h = self.per_token(tokens).reshape(targets.shape[0], self.tokens * 16)
        return F.mse_loss(self.out(h), (targets - self.mean) / self.std)


CONTEXT_PROBES = frozenset({"goal"})
"""Probes that read the fused context; the others read the visual tokens."""


def probe_weights(train_cfg: TrainConfig) -> dict[str, float]:
    """Loss weight of each probe, by name."""
    return {
        "layout": train_cfg.layout_loss_weight,
        "goal": train_cfg.goal_loss_weight,
    }


def probe_targets(samples: ChunkSamples) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each probe's targets ``[N, L]`` and which samples have them ``[N]``, by name."""
    return {
        "layout": (samples.layout, samples.has_layout),
        "goal": (samples.goal, samples.has_layout),
    }


def make_probes(
    config: PolicyConfig, samples: ChunkSamples, train_cfg: TrainConfig
) -> dict[str, LayoutProbe]:
    """The probes whose weight is > 0 and whose targets some sample has."""
    probes = {}
    weights = probe_weights(train_cfg)
    for name, (values, has) in probe_targets(samples).items():
        if weights[name] > 0 and has.any():
            if name in CONTEXT_PROBES:
                tokens = config.context_tokens
            else:
                tokens = len(config.cameras) * config.tokens_per_camera
            known = values[has]
            std = np.maximum(known.std(axis=0), 1e-3)
            probes[name] = LayoutProbe(
                tokens, config.d_model, known.shape[1], known.mean(axis=0), std
            )
    return probes


RAW_WEIGHTS_KEY = "raw_policy"
"""``train_modules`` entry holding the un-averaged weights of an EMA run."""


def ema_decay_at(step: int, decay: float) -> float:
    """Effective EMA decay after update ``step`` (0-based): ramps up to ``decay``."""
    return min(decay, (1.0 + step) / (10.0 + step))


@torch.no_grad()
def update_ema(average: torch.nn.Module, model: torch.nn.Module, decay: float) -> None:
    """``average <- decay * average + (1 - decay) * model``; buffers are copied."""
    for a, m in zip(average.parameters(), model.parameters(), strict=True):
        a.lerp_(m, 1.0 - decay)
    for a, m in zip(average.buffers(), model.buffers(), strict=True):
        a.copy_(m)


def _load_probes(probes: dict[str, LayoutProbe], stored: dict[str, Any], path: Path) -> None:
    """Load each probe whose ``<name>_probe`` entry ``stored`` holds.

    ``stored`` is a checkpoint's :func:`checkpoint_train_modules`.

    Raises:
        CheckpointError: a stored probe does not fit.
    """
    for name, probe in probes.items():
        if f"{name}_probe" in stored:
            try:
                probe.load_state_dict(stored[f"{name}_probe"])
            except RuntimeError as exc:
                raise CheckpointError(
                    f"checkpoint {path}: the stored {name} probe does not fit: {exc}"
                ) from exc


def learning_rate_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up, then cosine decay to ``min_learning_rate``.

    The ``probe_warmup_steps`` come first, at ``probe_warmup_learning_rate``; the
    schedule spans the steps after them.
    """
    if step < cfg.probe_warmup_steps:
        return cfg.probe_warmup_learning_rate
    step -= cfg.probe_warmup_steps
    if step < cfg.warmup_steps:
        return cfg.learning_rate * (step + 1) / cfg.warmup_steps
    span = max(cfg.steps - cfg.probe_warmup_steps - cfg.warmup_steps, 1)
    progress = min((step - cfg.warmup_steps) / span, 1.0)
    cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
    return cfg.min_learning_rate + (cfg.learning_rate - cfg.min_learning_rate) * cosine


def batch_loss(
    policy: VlaPolicy,
    samples: ChunkSamples,
    idx: np.ndarray,
    embeddings: torch.Tensor,
    train_cfg: TrainConfig,
    generator: torch.Generator,
    augment: bool,
    probes: dict[str, LayoutProbe] | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Flow-matching loss of samples ``idx`` (``flow_samples_per_obs`` draws per observation).

    ``embeddings``: :func:`embed_instructions` of ``samples.instructions``;
    ``augment``: shift the images (training, not validation).

    Returns:
        The flow-matching loss and the loss of each probe over the samples
        that have a layout and ``k < layout_loss_steps`` (none when no sample does).
    """
    cfg = policy.config
    codec: ActionCodec = policy.codec
    states = samples.states[idx]
    chunk_norm = torch.from_numpy(codec.encode_actions(samples.chunks(idx), states))
    state_norm = torch.from_numpy(codec.normalize_state(states))
    images = torch.from_numpy(samples.image_batch(idx)).float().div_(255.0)
    images = images.permute(0, 1, 4, 2, 3).reshape(-1, 3, cfg.image_height, cfg.image_width)
    if augment:
        images = shift_images(images, train_cfg.shift_pixels, generator)
    lang = embeddings[torch.from_numpy(samples.instruction_ids[idx])]
    visual = policy.vision_encoder(images)
    context = policy.fusion(visual, lang, state_norm)
    aux: dict[str, torch.Tensor] = {}
    early = samples.steps[idx] < train_cfg.layout_loss_steps
    # one row per observation: [B, cameras, tokens, d] (a probe reads all its tokens)
    per_obs = visual.reshape(len(idx), -1, *visual.shape[1:])
    targets = probe_targets(samples)
    for name, probe in (probes or {}).items():
        values, has = targets[name]
        use = has[idx] & early
        if use.any():
            rows = torch.from_numpy(np.flatnonzero(use))
            inputs = context if name in CONTEXT_PROBES else per_obs
            aux[name] = probe.loss(inputs[rows], torch.from_numpy(values[idx][use]))
    m = train_cfg.flow_samples_per_obs
    target = chunk_norm.repeat_interleave(m, dim=0)
    n = target.shape[0]
    noise = torch.randn(target.shape, generator=generator)
    beta = torch.distributions.Beta(train_cfg.time_beta_alpha, train_cfg.time_beta_beta)
    u = _sample_beta(beta, n, generator)
    tau = 0.999 * (1.0 - u)
    prefix_len = torch.randint(0, cfg.max_prefix_len + 1, (n,), generator=generator)
    flow = policy.action_head.flow_matching_loss(
        context, target, noise, tau, prefix_len, draws_per_context=m
    )
    return flow, aux


def _sample_beta(
    beta: torch.distributions.Beta, n: int, generator: torch.Generator
) -> torch.Tensor:
    """Beta samples driven by ``generator`` (inverse CDF on a fine grid; reproducible)."""
    grid = torch.linspace(1e-4, 1.0 - 1e-4, 2048)
    cdf = torch.cumsum(beta.log_prob(grid).exp(), dim=0)
    cdf = cdf / cdf[-1]
    u = torch.rand(n, generator=generator)
    pos = torch.searchsorted(cdf, u).clamp(max=grid.numel() - 1)
    return grid[pos]


def validation_loss(
    policy: VlaPolicy,
    samples: ChunkSamples,
    embeddings: torch.Tensor,
    train_cfg: TrainConfig,
) -> float:
    """Mean loss over ``val_batches`` fixed batches (same draws every time)."""
    policy.eval()
    rng = np.random.default_rng([train_cfg.seed, VAL_SEED_OFFSET])
    gen = torch.Generator().manual_seed(train_cfg.seed + VAL_SEED_OFFSET)
    losses = []
    with torch.no_grad():
        for _ in range(train_cfg.val_batches):
            idx = rng.integers(0, len(samples), size=min(train_cfg.batch_size, len(samples)))
            losses.append(
                float(batch_loss(policy, samples, idx, embeddings, train_cfg, gen, False)[0])
            )
    policy.train()
    return float(np.mean(losses))


def _check_same_model(
    payload: dict[str, Any], current: PolicyConfig, path: Path, option: str
) -> None:
    """Refuse a checkpoint (of ``--resume`` or ``--init-from``) of another model than ``current``.

    The stored config gets the defaults of fields added since it was written.

    Raises:
        RemovedFeatureError: the checkpoint was made with a removed feature.
        CheckpointError: its model config does not validate, or differs from ``current``.
    """
    stored, _ = checkpoint_configs(payload, path)
    before, now = stored.model_dump(mode="json"), current.model_dump(mode="json")
    for key in sorted(set(now) | set(before)):
        if before.get(key) != now.get(key):
            raise CheckpointError(
                f"{option} {path}: model_config.{key} = {before.get(key)!r} in the checkpoint, "
                f"{now.get(key)!r} in the config; {option} needs the same model"
            )


def train(
    data: str | Path,
    out: str | Path,
    file_cfg: TrainFileConfig,
    resume: bool = False,
    progress: bool = True,
    init_from: str | Path | None = None,
) -> dict[str, Any]:
    """Train (or resume) and write the checkpoint to ``out``; return a summary.

    ``init_from``: start from that checkpoint's weights (same model config) and
    training probes with a fresh optimizer and schedule, e.g. to fine-tune on
    other data.
    """
    from tqdm import tqdm

    cfg, tcfg = file_cfg.model, file_cfg.train
    out = Path(out)
    torch.set_num_threads(tcfg.num_threads)
    torch.manual_seed(tcfg.seed)
    in_use = [name for name, weight in probe_weights(tcfg).items() if weight > 0]
    episodes = load_episodes(
        data, cfg.cameras, (cfg.image_height, cfg.image_width), cfg.action_dim, probes=in_use
    )
    train_eps, val_eps = split_episodes(episodes, tcfg.val_episode_fraction, tcfg.seed)
    train_set = ChunkSamples(train_eps, cfg.cameras, cfg.chunk_horizon)
    val_set = ChunkSamples(val_eps, cfg.cameras, cfg.chunk_horizon) if val_eps else None
    stats = compute_stats(train_set.states, train_set.chunks(), cfg.delta_actions)
    instructions = sorted(
        set(train_set.instructions) | set(val_set.instructions if val_set else [])
    )
    lang_train = embed_instructions(train_set.instructions, cfg.max_instruction_tokens)
    lang_val = (
        embed_instructions(val_set.instructions, cfg.max_instruction_tokens) if val_set else None
    )

    policy = VlaPolicy(cfg, stats)
    # TrainConfig refuses a probe warm-up without a probe in use, and the loader a
    # probe in use without its targets, so a warm-up always has probes here.
    probes = make_probes(cfg, train_set, tcfg)
    weights = probe_weights(tcfg)
    params = list(policy.parameters()) + [p for m in probes.values() for p in m.parameters()]
    optimizer = torch.optim.AdamW(params, lr=tcfg.learning_rate, weight_decay=tcfg.weight_decay)
    start_step = 0
    history: dict[str, list[list[float]]] = {"train_loss": [], "val_loss": []}
    wall_before_s = 0.0
    keep_source_stats = init_from is not None and tcfg.init_norm_stats == "source"
    if init_from is not None and not (resume and out.is_file()):
        source = read_checkpoint(init_from)
        _check_same_model(source, cfg, Path(init_from), "--init-from")
        for name, state in source["stages"].items():
            getattr(policy, name).load_state_dict(state)
        # the training-only probes too: fresh ones would send their large early
        # gradients into the trained features
        _load_probes(probes, checkpoint_train_modules(source, init_from), Path(init_from))
        if keep_source_stats:
            policy.set_stats(checkpoint_stats(source, cfg.action_dim, init_from))
    average = None
    if resume and out.is_file():
        payload = read_checkpoint(out)
        _check_same_model(payload, cfg, out, "--resume")
        for name, state in payload["stages"].items():
            getattr(policy, name).load_state_dict(state)
        # the statistics the run started with, whether from its data or its --init-from
        policy.set_stats(checkpoint_stats(payload, cfg.action_dim, out))
        if payload.get("optimizer") is not None:
            optimizer.load_state_dict(payload["optimizer"])
        start_step = int(payload.get("step", 0))
        meta = payload.get("meta") or {}
        stored = checkpoint_train_modules(payload, out)
        if tcfg.ema_decay > 0.0 and RAW_WEIGHTS_KEY in stored:
            average = copy.deepcopy(policy)  # the stored stages are the average
            policy.load_state_dict(stored[RAW_WEIGHTS_KEY])
        _load_probes(probes, stored, out)
        history = meta.get("history", history)
        wall_before_s = float(meta.get("train_wall_time_s", 0.0))
    if tcfg.ema_decay > 0.0 and average is None:
        average = copy.deepcopy(policy)
    if average is not None:
        average.requires_grad_(False)
        average.eval()
    deployed = policy if average is None else average
    policy.train()

    meta_base = {
        "data": str(data),
        "init_from": str(init_from) if init_from is not None else None,
        "norm_stats_from": "init_from" if keep_source_stats else "data",
        "episodes_train": len(train_eps),
        "episodes_val": len(val_eps),
        "samples_train": len(train_set),
        "instructions": instructions,
        "parameter_counts": policy.parameter_counts(),
    }
    t0 = time.perf_counter()

    def _save(step: int) -> None:
        meta = dict(meta_base)
        meta["history"] = history
        meta["train_wall_time_s"] = wall_before_s + time.perf_counter() - t0
        extra = {f"{k}_probe": m.state_dict() for k, m in probes.items()}
        if average is not None:
            extra[RAW_WEIGHTS_KEY] = policy.state_dict()
        save_checkpoint(
            out,
            deployed,
            train_config=tcfg.model_dump(mode="json"),
            step=step,
            optimizer_state=optimizer.state_dict(),
            meta=meta,
            train_modules=extra or None,
        )

    bar = tqdm(
        range(start_step, tcfg.steps),
        initial=start_step,
        total=tcfg.steps,
        desc="train",
        disable=not progress,
        dynamic_ncols=True,
    )
    running = None
    running_aux: dict[str, float] = {}
    policy_held = False
    for step in bar:
        # during the probe warm-up only the probes get gradients
        if (step < tcfg.probe_warmup_steps) != policy_held:
            policy_held = not policy_held
            policy.requires_grad_(not policy_held)
        for group in optimizer.param_groups:
            group["lr"] = learning_rate_at(step, tcfg)
        rng = np.random.default_rng([tcfg.seed, step])
        gen = torch.Generator().manual_seed(tcfg.seed * 1_000_003 + step)
        idx = rng.integers(0, len(train_set), size=tcfg.batch_size)
        loss, aux = batch_loss(
            policy, train_set, idx, lang_train, tcfg, gen, augment=True, probes=probes
        )
        total = loss + sum(weights[k] * v for k, v in aux.items())
        optimizer.zero_grad(set_to_none=True)
        if total.requires_grad:  # not so in a probe warm-up batch without a probe sample
            total.backward()
            torch.nn.utils.clip_grad_norm_(params, tcfg.grad_clip_norm)
            optimizer.step()
        if average is not None:
            update_ema(average, policy, ema_decay_at(step, tcfg.ema_decay))
        value = float(loss.detach())
        running = value if running is None else 0.98 * running + 0.02 * value
        history["train_loss"].append([step, value])
        for name, term in aux.items():
            aux_value = float(term.detach())
            before = running_aux.get(name, aux_value)
            running_aux[name] = 0.98 * before + 0.02 * aux_value
            history.setdefault(f"{name}_loss", []).append([step, aux_value])
        done = step + 1
        if val_set is not None and (done % tcfg.val_every == 0 or done == tcfg.steps):
            val = validation_loss(deployed, val_set, lang_val, tcfg)
            history["val_loss"].append([done, val])
            aux_text = "".join(f" {k}_loss {v:.4f}" for k, v in running_aux.items())
            bar.write(f"step {done}: train_loss {running:.4f} val_loss {val:.4f}{aux_text}")
        bar.set_postfix(loss=f"{running:.4f}")
        if done % tcfg.checkpoint_every == 0 or done == tcfg.steps:
            _save(done)
    bar.close()
    if start_step >= tcfg.steps:
        _save(start_step)
    losses = [v for _, v in history["train_loss"]]
    return {
        "steps": tcfg.steps,
        "start_step": start_step,
        "train_loss_first": losses[0] if losses else None,
        "train_loss_last": losses[-1] if losses else None,
        "history": history,
        "wall_time_s": wall_before_s + time.perf_counter() - t0,
        "parameter_counts": policy.parameter_counts(),
        "checkpoint": str(out),
    }
