"""A matrix of evaluations in one results store (:func:`run_sweep`; ``vla-edge sweep``).

``vla-edge sweep SPEC.yaml --out OUT`` (:mod:`vla_edge.cli.sweep`) runs the spec.

The spec (``config/sweeps/*.yaml``; every field but ``name`` has a default)::

    name: side_by_side
    policies: [bundled]          # expert | bundled | CKPT.pt | EXPORT_DIR
    backends: [torch]            # torch | onnx | executorch: a checkpoint is exported
    recipes: [fp32]              #   once per backend and recipe, into OUT/exports/
    delays_ms: [0, 100, 200, 300]
    schemes: [sync, lerobot, async]
    merges: [replace, weighted, ensemble, prefix]   # the async scheme's merges
    instructions: [canonical]
    seeds: [0]
    episodes: 50                 # init states per task
    tasks: null                  # all

Every combination is one :class:`~vla_edge.sim.episodes.EvalJob` (``sync`` and
``lerobot`` bring their own merge, so they are not crossed with ``merges``; ``torch``
with one recipe only, ``fp32``), and every episode of every job goes to one pool —
this process, ``--workers`` processes, or Ray (``--ray [ADDRESS]``) — and one store,
``OUT/episodes.jsonl``, so an interrupted sweep resumes with ``--resume``.

Written to ``OUT``: ``summary.md`` and ``summary.csv`` (one row per job: successes,
the 95 % Wilson interval, the mean completion time of the successes, the largest
velocity change at a chunk boundary, rejected chunks) and the plots
``success_vs_delay.png``, ``completion_vs_delay.png`` (one line per scheme / merge /
policy / backend / recipe) and ``success_by_variant.png`` (per policy, backend and
recipe).
"""

from __future__ import annotations

import csv
import itertools
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from vla_edge.core.errors import ConfigError, VlaEdgeError
from vla_edge.sim.episodes import (
    Episode,
    EvalJob,
    check_policies,
    episode_key,
    key_id,
    open_store,
    run_episodes,
)
from vla_edge.sim.evaluator import EvalSettings

Backend = Literal["torch", "onnx", "executorch"]
Scheme = Literal["async", "sync", "lerobot"]
Merge = Literal["replace", "weighted", "ensemble", "prefix"]


class SweepSpec(BaseModel):
    """A sweep's matrix (see the module docstring)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.-]+$")
    policies: list[str] = Field(default_factory=lambda: ["bundled"], min_length=1)
    backends: list[Backend] = Field(default_factory=lambda: ["torch"], min_length=1)
    recipes: list[str] = Field(default_factory=lambda: ["fp32"], min_length=1)
    delays_ms: list[float] = Field(default_factory=lambda: [0.0], min_length=1)
    schemes: list[Scheme] = Field(default_factory=lambda: ["async"], min_length=1)
    merges: list[Merge] = Field(default_factory=lambda: ["ensemble"], min_length=1)
    instructions: list[Literal["canonical", "paraphrase"]] = Field(
        default_factory=lambda: ["canonical"], min_length=1
    )
    seeds: list[int] = Field(default_factory=lambda: [0], min_length=1)
    episodes: int = Field(50, ge=1, le=1000)
    tasks: list[str] | None = None
    noise_scale: float | None = Field(None, ge=0.0, le=4.0)
    replan_steps: int = Field(5, ge=1)
    image_size: int | None = Field(None, ge=16, le=1024)
    threads: int = Field(1, ge=1, le=64)


def load_spec(path: str | Path) -> SweepSpec:
    """The spec at ``path``, validated; a bad field is a :class:`ConfigError` naming it."""
    from vla_edge.config.loader import load_yaml_file, validate_params
    from vla_edge.export.quant_recipes import load_recipes
    from vla_edge.sim.tasks import get_task

    spec = validate_params(SweepSpec, load_yaml_file(path), str(path))
    known = load_recipes()
    for recipe in spec.recipes:
        if recipe not in known:
            raise ConfigError(f"{path}: recipes: {recipe!r} is not one of {sorted(known)}")
    for task in spec.tasks or []:
        try:
            get_task(task)
        except VlaEdgeError as exc:
            raise ConfigError(f"{path}: tasks: {exc}") from exc
    for delay in spec.delays_ms:
        if not delay >= 0.0:
            raise ConfigError(f"{path}: delays_ms: {delay} must be >= 0")
    return spec


def _is_checkpoint(policy: str) -> bool:
    return policy == "bundled" or policy.endswith(".pt")


def variants(spec: SweepSpec) -> list[tuple[str, str, str]]:
    """``(policy, backend, recipe)`` of every program the sweep evaluates."""
    out = []
    for policy in spec.policies:
        if not _is_checkpoint(policy):  # an export or the expert runs as it is
            out.append((policy, "as_is", "as_is"))
            continue
        for backend in spec.backends:
            recipes = ["fp32"] if backend in ("torch", "onnx") else spec.recipes
            out += [(policy, backend, r) for r in dict.fromkeys(recipes)]
    return out


def export_dir(out: Path, policy: str, backend: str, recipe: str) -> Path:
    """Where a checkpoint's program for ``backend`` / ``recipe`` goes."""
    return out / "exports" / f"{Path(policy).stem}_{backend}_{recipe}"


def ensure_export(
    out: Path, policy: str, backend: str, recipe: str, command: str = "vla-edge sweep"
) -> str:
    """The policy string of a variant, exporting the checkpoint first where needed.

    ``command``: who says so on stderr.
    """
    if backend in ("torch", "as_is"):
        return policy
    folder = export_dir(out, policy, backend, recipe)
    if (folder / "manifest.json").is_file():
        return str(folder)
    import subprocess

    folder.parent.mkdir(parents=True, exist_ok=True)
    log = folder.parent / f"{folder.name}.log"
    argv = ["export", "--checkpoint", policy, "--backend", backend, "--out", str(folder)]
    if backend == "executorch":
        argv += ["--quant", recipe]
    print(f"{command}: exporting {policy} ({backend} {recipe}) ...", file=sys.stderr)
    with log.open("w") as f:
        done = subprocess.run(
            [sys.executable, "-m", "vla_edge.cli", *argv], stdout=f, stderr=f, check=False
        )
    if done.returncode != 0:
        raise ConfigError(f"export of {policy} ({backend} {recipe}) failed; see {log}")
    return str(folder)


def jobs(spec: SweepSpec, programs: dict[tuple[str, str, str], str]) -> list[dict[str, Any]]:
    """Every job of the matrix with the labels of its row."""
    schemes: list[tuple[str, str]] = []
    for scheme in spec.schemes:
        if scheme == "async":
            schemes += [("async", m) for m in spec.merges]
        else:
            schemes.append((scheme, "replace" if scheme == "sync" else "weighted"))
    rows = []
    for (variant, policy), (scheme, merge), delay, instructions, seed in itertools.product(
        programs.items(), schemes, spec.delays_ms, spec.instructions, spec.seeds
    ):
        extra = {} if spec.noise_scale is None else {"noise_scale": spec.noise_scale}
        job = EvalJob(
            policy=policy,
            settings=EvalSettings(
                delay_s=delay / 1e3,
                merge=merge,
                scheme=scheme,
                replan_steps=spec.replan_steps,
                instructions=instructions,
                **extra,
            ),
            seed=seed,
            image_size=spec.image_size,
            threads=spec.threads,
        )
        labels = {
            "policy": variant[0],
            "backend": variant[1],
            "recipe": variant[2],
            "scheme": scheme,
            "merge": merge,
            "delay_ms": float(delay),
            "instructions": instructions,
            "seed": seed,
        }
        rows.append({"job": job, "labels": labels})
    return rows


def job_episodes(spec: SweepSpec, job: EvalJob) -> list[Episode]:
    """One job's episodes: the spec's tasks (default every suite task) x init states."""
    from vla_edge.sim.tasks import list_tasks

    return [
        Episode(job, task, i) for task in spec.tasks or list_tasks() for i in range(spec.episodes)
    ]


def summarize_job(records: list[dict[str, Any]]) -> dict[str, Any]:
    """One row's figures from its episodes' records.

    ``median_boundary_velocity_jump``: the median over episodes of each one's
    largest velocity change at a chunk boundary; ``limited_ticks_pct``: the share
    of control ticks in which the safety limiter changed the command.
    """
    from vla_edge.sim.evaluator import wilson_interval

    results = [r["result"] for r in records]
    successes = sum(bool(r["success"]) for r in results)
    times = [r["time_s"] for r in results if r["success"]]
    low, high = wilson_interval(successes, len(results))
    limited = sum(r["safety_counters"].get("limited_ticks", 0) for r in results)
    ticks = sum(r["safety_counters"].get("ticks", 0) for r in results)
    return {
        "episodes": len(results),
        "successes": successes,
        "success_rate": successes / len(results) if results else 0.0,
        "wilson_low": low,
        "wilson_high": high,
        "mean_completion_s": float(np.mean(times)) if times else None,
        "max_boundary_velocity_jump": max(
            (r["max_boundary_velocity_jump"] for r in results), default=0.0
        ),
        "median_boundary_velocity_jump": (
            float(np.median([r["max_boundary_velocity_jump"] for r in results])) if results else 0.0
        ),
        "limited_ticks_pct": 100.0 * limited / ticks if ticks else 0.0,
        "rejected_chunks": sum(r["rejected"] for r in results),
    }


COLUMNS = (
    "policy",
    "backend",
    "recipe",
    "scheme",
    "merge",
    "delay_ms",
    "instructions",
    "seed",
    "episodes",
    "successes",
    "success_rate",
    "wilson_low",
    "wilson_high",
    "mean_completion_s",
    "max_boundary_velocity_jump",
    "median_boundary_velocity_jump",
    "limited_ticks_pct",
    "rejected_chunks",
)


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def write_tables(rows: list[dict[str, Any]], out: Path) -> None:
    """``summary.csv`` and ``summary.md`` (one row per job)."""
    with (out / "summary.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({c: row[c] for c in COLUMNS})
    lines = [
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "|".join("---" for _ in COLUMNS) + "|",
    ]
    lines += ["| " + " | ".join(_cell(row[c]) for c in COLUMNS) + " |" for row in rows]
    (out / "summary.md").write_text("\n".join(lines) + "\n")


def _line_label(row: dict[str, Any], varying: list[str]) -> str:
    return " ".join(str(row[k]) for k in varying) or "all"


def write_plots(rows: list[dict[str, Any]], out: Path) -> list[str]:
    """The three PNGs; their file names."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dims = ("policy", "backend", "recipe", "scheme", "merge", "instructions", "seed")
    varying = [d for d in dims if len({r[d] for r in rows}) > 1]
    lines: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        lines.setdefault(_line_label(row, varying), []).append(row)
    written = []
    for name, field, ylabel in (
        ("success_vs_delay.png", "success_rate", "success rate (95 % Wilson)"),
        ("completion_vs_delay.png", "mean_completion_s", "mean completion time of successes (s)"),
    ):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for label, group in lines.items():
            group = sorted(group, key=lambda r: r["delay_ms"])
            xs = [r["delay_ms"] for r in group]
            ys = [np.nan if r[field] is None else r[field] for r in group]
            if field == "success_rate":
                err = [
                    [r["success_rate"] - r["wilson_low"] for r in group],
                    [r["wilson_high"] - r["success_rate"] for r in group],
                ]
                ax.errorbar(xs, ys, yerr=err, marker="o", capsize=3, label=label)
            else:
                ax.plot(xs, ys, marker="o", label=label)
        ax.set_xlabel("inference delay (ms)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        written.append(name)
    per_variant: dict[str, list[int]] = {}
    for row in rows:
        key = f"{row['policy']}\n{row['backend']} {row['recipe']}"
        total = per_variant.setdefault(key, [0, 0])
        total[0] += row["successes"]
        total[1] += row["episodes"]
    fig, ax = plt.subplots(figsize=(max(4.0, 1.6 * len(per_variant)), 4.0))
    names = list(per_variant)
    ax.bar(range(len(names)), [s / n for s, n in per_variant.values()])
    ax.set_xticks(range(len(names)), names, fontsize=8)
    ax.set_ylabel("success rate over the sweep")
    ax.set_ylim(0, 1)
    fig.tight_layout()
    fig.savefig(out / "success_by_variant.png", dpi=110)
    plt.close(fig)
    written.append("success_by_variant.png")
    return written


def run_sweep(
    spec: SweepSpec,
    out: Path,
    make_pool: Callable[[], Any],
    *,
    resume: bool = False,
    quiet: bool = False,
    keep_policies: bool = False,
    command: str = "vla-edge sweep",
) -> dict[str, Any]:
    """Run ``spec`` into ``out``: the store, the tables and the plots; the sweep's report.

    Each checkpoint is exported first where a variant needs it (:func:`ensure_export`) and
    every policy is loaded once before any episode runs; then every episode the store
    ``out/episodes.jsonl`` lacks runs on the pool ``make_pool()`` returns (closed at the
    end).

    Args:
        resume: continue the store ``out`` holds (else one that holds episodes is refused).
        keep_policies: leave the policies loaded for episodes this process runs itself.
        command: who says so on stderr (exports, the episodes kept when a run fails).

    Returns:
        ``spec``, ``rows`` (one per job: its labels and :func:`summarize_job`),
        ``episodes``, ``store``, ``plots`` and ``pool`` (its name).

    Raises:
        ResultsStoreError: ``out`` holds episodes and ``resume`` is false.
        VlaEdgeError: a policy or an episode failed (the store keeps what finished).
    """
    out.mkdir(parents=True, exist_ok=True)
    store = open_store(out / "episodes.jsonl", resume)
    programs = {v: ensure_export(out, *v, command=command) for v in variants(spec)}
    matrix = jobs(spec, programs)
    check_policies((e["job"] for e in matrix), keep=keep_policies)
    pool = make_pool()
    episodes = [episode for entry in matrix for episode in job_episodes(spec, entry["job"])]
    try:
        records = run_episodes(episodes, store, pool, quiet=quiet)
    except VlaEdgeError:
        print(f"{command}: {len(store)} episodes kept: --resume", file=sys.stderr)
        raise
    finally:
        pool.close()
    rows = []
    for entry in matrix:
        ids = [key_id(episode_key(e)) for e in job_episodes(spec, entry["job"])]
        rows.append({**entry["labels"], **summarize_job([records[k] for k in ids])})
    write_tables(rows, out)
    plots = write_plots(rows, out)
    return {
        "spec": spec.model_dump(),
        "rows": rows,
        "episodes": len(episodes),
        "store": str(out / "episodes.jsonl"),
        "plots": plots,
        "pool": pool.name,
    }
