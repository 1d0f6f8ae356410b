"""``vla-edge train``: fit the policy to recorded demonstrations.

``vla-edge train --data DIR --out CKPT [--config YAML] [--steps N] [--resume]``

* Normalisation statistics come from the training episodes and are saved in
  the checkpoint; a few episodes per task are held out for the validation loss
  printed every ``val_every`` steps.
* The frozen language encoder runs once per distinct instruction before the
  loop; the loop sees only the cached embeddings.
* Optional auxiliary loss (``layout_loss_weight > 0``): a small probe,
  used only in training, regresses the scene's initial object and target
  positions (``ChunkSamples.layout``) from the visual tokens of the first
  ``layout_loss_steps`` steps of each episode. Closed-loop success hinges on
  heading for the instructed object from the start pose, which the action
  loss alone teaches slowly; the probe gives the vision encoder a direct
  localisation signal. It is not part of the exported policy.
* Everything random in step ``s`` is drawn from generators seeded by
  ``(seed, s)``, so a run resumed from a checkpoint (``--resume``) follows the
  same trajectory as one that was never interrupted.
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812

from vla_edge.core.errors import CheckpointError
from vla_edge.policy.config import PolicyConfig, TrainConfig, TrainFileConfig, load_train_file
from vla_edge.policy.data import ChunkSamples, load_episodes, split_episodes
from vla_edge.policy.model import VlaPolicy, read_checkpoint, save_checkpoint
from vla_edge.policy.normalize import ActionCodec, compute_stats

VAL_SEED_OFFSET = 7919


def embed_instructions(instructions: list[str], max_tokens: int) -> torch.Tensor:
    """``[n, 384]`` frozen-MiniLM embeddings, one per distinct instruction."""
    from vla_edge.policy.language import InstructionEmbedder

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
    """Training-only head: visual tokens of all cameras -> normalised layout ``[B, L]``."""

    def __init__(self, config: PolicyConfig, layout_width: int, mean: np.ndarray, std: np.ndarray):
        super().__init__()
        tokens = len(config.cameras) * config.tokens_per_camera
        self.per_token = torch.nn.Linear(config.d_model, 16)
        self.out = torch.nn.Sequential(
            torch.nn.GELU(approximate="tanh"), torch.nn.Linear(tokens * 16, layout_width)
        )
        self.tokens = tokens
        self.register_buffer("mean", torch.as_tensor(mean, dtype=torch.float32))
        self.register_buffer("std", torch.as_tensor(std, dtype=torch.float32))

    def loss(self, visual: torch.Tensor, layout: torch.Tensor) -> torch.Tensor:
        """MSE of the normalised layout; ``visual`` is ``[B * n_cams, T_v, D]``."""
        h = self.per_token(visual).reshape(layout.shape[0], self.tokens * 16)
        return F.mse_loss(self.out(h), (layout - self.mean) / self.std)


def make_layout_probe(config: PolicyConfig, samples: ChunkSamples) -> LayoutProbe | None:
    """The probe for ``samples``' layouts, or ``None`` when no episode has one."""
    if not samples.has_layout.any():
        return None
    known = samples.layout[samples.has_layout]
    std = np.maximum(known.std(axis=0), 1e-3)
    return LayoutProbe(config, known.shape[1], known.mean(axis=0), std)


def learning_rate_at(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up, then cosine decay to ``min_learning_rate``."""
    if step < cfg.warmup_steps:
        return cfg.learning_rate * (step + 1) / cfg.warmup_steps
    span = max(cfg.steps - cfg.warmup_steps, 1)
    progress = min((step - cfg.warmup_steps) / span, 1.0)
    cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
    return cfg.min_learning_rate + (cfg.learning_rate - cfg.min_learning_rate) * cosine


def batch_loss(
    policy: VlaPolicy,
    samples: ChunkSamples,
    idx: np.ndarray,
    lang_table: torch.Tensor,
    train_cfg: TrainConfig,
    generator: torch.Generator,
    augment: bool,
    probe: LayoutProbe | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Flow-matching loss of samples ``idx`` (``flow_samples_per_obs`` draws per observation).

    Returns:
        The flow-matching loss and, with a ``probe``, the layout loss of the
        samples that have a layout and ``k < layout_loss_steps`` (else ``None``).
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
    lang = lang_table[torch.from_numpy(samples.instruction_ids[idx])]
    visual = policy.vision_encoder(images)
    context = policy.fusion(visual, lang, state_norm)
    layout_loss = None
    if probe is not None:
        use = samples.has_layout[idx] & (samples.steps[idx] < train_cfg.layout_loss_steps)
        if use.any():
            rows = torch.from_numpy(np.flatnonzero(use))
            per_obs = visual.reshape(len(idx), -1, *visual.shape[1:])[rows]
            layout = torch.from_numpy(samples.layout[idx][use])
            layout_loss = probe.loss(per_obs.reshape(-1, *visual.shape[1:]), layout)
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
    return flow, layout_loss


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
    lang_table: torch.Tensor,
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
                float(batch_loss(policy, samples, idx, lang_table, train_cfg, gen, False)[0])
            )
    policy.train()
    return float(np.mean(losses))


def _check_resume_config(stored: dict[str, Any], current: PolicyConfig, path: Path) -> None:
    now = current.model_dump(mode="json")
    for key in sorted(set(now) | set(stored)):
        if stored.get(key) != now.get(key):
            raise CheckpointError(
                f"--resume {path}: model_config.{key} = {stored.get(key)!r} in the checkpoint, "
                f"{now.get(key)!r} in the config; resume needs the same model"
            )


def train(
    data: str | Path,
    out: str | Path,
    file_cfg: TrainFileConfig,
    resume: bool = False,
    progress: bool = True,
) -> dict[str, Any]:
    """Train (or resume) and write the checkpoint to ``out``; return a summary."""
    from tqdm import tqdm

    cfg, tcfg = file_cfg.model, file_cfg.train
    out = Path(out)
    torch.set_num_threads(tcfg.num_threads)
    torch.manual_seed(tcfg.seed)
    episodes = load_episodes(data, cfg.cameras, (cfg.image_height, cfg.image_width), cfg.action_dim)
    train_eps, val_eps = split_episodes(episodes, tcfg.val_episode_fraction, tcfg.seed)
    train_set = ChunkSamples(train_eps, cfg.cameras, cfg.chunk_horizon)
    val_set = ChunkSamples(val_eps, cfg.cameras, cfg.chunk_horizon) if val_eps else None
    stats = compute_stats(train_set.states, train_set.chunks(), cfg.delta_actions)
    instructions = sorted(
        set(train_set.instructions) | set(val_set.instructions if val_set else [])
    )
    lang_all = embed_instructions(instructions, cfg.max_instruction_tokens)
    lang_train = lang_all[[instructions.index(s) for s in train_set.instructions]]
    lang_val = lang_all[[instructions.index(s) for s in val_set.instructions]] if val_set else None

    policy = VlaPolicy(cfg, stats)
    probe = make_layout_probe(cfg, train_set) if tcfg.layout_loss_weight > 0 else None
    params = list(policy.parameters()) + (list(probe.parameters()) if probe else [])
    optimizer = torch.optim.AdamW(params, lr=tcfg.learning_rate, weight_decay=tcfg.weight_decay)
    start_step = 0
    history: dict[str, list[list[float]]] = {"train_loss": [], "val_loss": [], "layout_loss": []}
    wall_before_s = 0.0
    if resume and out.is_file():
        payload = read_checkpoint(out)
        _check_resume_config(payload["model_config"], cfg, out)
        for name, state in payload["stages"].items():
            getattr(policy, name).load_state_dict(state)
        if payload.get("optimizer") is not None:
            optimizer.load_state_dict(payload["optimizer"])
        start_step = int(payload.get("step", 0))
        meta = payload.get("meta") or {}
        probe_state = (payload.get("train_modules") or {}).get("layout_probe")
        if probe is not None and probe_state is not None:
            probe.load_state_dict(probe_state)
        history = meta.get("history", history)
        wall_before_s = float(meta.get("train_wall_time_s", 0.0))
    policy.train()

    meta_base = {
        "data": str(data),
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
        save_checkpoint(
            out,
            policy,
            train_config=tcfg.model_dump(mode="json"),
            step=step,
            optimizer_state=optimizer.state_dict(),
            meta=meta,
            train_modules={"layout_probe": probe.state_dict()} if probe is not None else None,
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
    running_layout = None
    for step in bar:
        for group in optimizer.param_groups:
            group["lr"] = learning_rate_at(step, tcfg)
        rng = np.random.default_rng([tcfg.seed, step])
        gen = torch.Generator().manual_seed(tcfg.seed * 1_000_003 + step)
        idx = rng.integers(0, len(train_set), size=tcfg.batch_size)
        loss, layout_loss = batch_loss(
            policy, train_set, idx, lang_train, tcfg, gen, augment=True, probe=probe
        )
        total = loss if layout_loss is None else loss + tcfg.layout_loss_weight * layout_loss
        optimizer.zero_grad(set_to_none=True)
        total.backward()
        torch.nn.utils.clip_grad_norm_(params, tcfg.grad_clip_norm)
        optimizer.step()
        value = float(loss.detach())
        running = value if running is None else 0.98 * running + 0.02 * value
        history["train_loss"].append([step, value])
        if layout_loss is not None:
            layout_value = float(layout_loss.detach())
            running_layout = (
                layout_value
                if running_layout is None
                else 0.98 * running_layout + 0.02 * layout_value
            )
            history.setdefault("layout_loss", []).append([step, layout_value])
        done = step + 1
        if val_set is not None and (done % tcfg.val_every == 0 or done == tcfg.steps):
            val = validation_loss(policy, val_set, lang_val, tcfg)
            history["val_loss"].append([done, val])
            layout_text = "" if running_layout is None else f" layout_loss {running_layout:.4f}"
            bar.write(f"step {done}: train_loss {running:.4f} val_loss {val:.4f}{layout_text}")
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


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``vla-edge train``."""
    parser.add_argument("--data", required=True, help="HDF5 file or folder of demonstrations")
    parser.add_argument("--out", required=True, help="checkpoint file to write (.pt)")
    parser.add_argument("--config", help="training YAML with 'model:' and 'train:' sections")
    parser.add_argument("--steps", type=int, help="override train.steps")
    parser.add_argument("--resume", action="store_true", help="continue from --out if it exists")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    """Entry point of ``vla-edge train``."""
    file_cfg = load_train_file(args.config) if args.config else TrainFileConfig()
    if args.steps is not None:
        file_cfg.train.steps = args.steps
    summary = train(
        args.data, args.out, file_cfg, resume=args.resume, progress=not args.no_progress
    )
    counts = summary["parameter_counts"]
    print(
        f"wrote {summary['checkpoint']} after {summary['steps']} steps in "
        f"{summary['wall_time_s']:.0f} s; parameters "
        + ", ".join(f"{k} {v}" for k, v in counts.items())
    )
    return 0
