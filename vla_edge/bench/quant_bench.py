"""``vla-edge bench quant``: where quantisation loses the task, stage by stage and layer by layer.

``vla-edge bench quant --json OUT [--recipe 8da4w] [--variants V,...] [--seeds 0,1]``

Each variant is one ExecuTorch export of the bundled checkpoint whose
quantisation differs from fp32 in one place: the whole ``--recipe`` (``all``),
the recipe on one stage only (``stage:vision_encoder``, ...), or on one layer
group only (``group:first_conv``, ``group:flow_time_embedding``,
``group:action_out``, ``group:attention``); ``recipe:NAME`` exports a named
recipe of ``config/quant_recipes.yaml`` whole, and ``torch`` is the eager
checkpoint (success only). Per variant, side by side in one run:

* ``parity``: the export against its eager torch stages on the same
  observations and noise (:func:`vla_edge.runners.parity.export_parity`), per joint;
* ``bytes``: the programs' total and their ratio to the fp32 export's;
* ``latency_ms``: end-to-end chunk latency, p50 / p95, measured at the end in
  interleaved rounds over every variant (one variant does not get a quieter minute);
* ``success``: ``vla-edge eval`` with the default settings (the suite's six tasks
  x ``--episodes`` init states) per ``--seeds`` seed, successes and Wilson interval.

Programs whose settings another variant already exported are copied, not
exported again. The JSON is rewritten after every step; ``--resume`` keeps what it
holds (the earlier runs' commands and machines under ``settings.earlier_runs``) and
measures the rest; an evaluation JSON already in a variant's folder (same policy,
seed and episodes) is read instead of run again.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from vla_edge.bench.arch_loop import run_vla_edge
from vla_edge.core.errors import ConfigError, VlaEdgeError
from vla_edge.export.quant_recipes import QuantRecipe, StageOverride, load_recipes
from vla_edge.sim.evaluator import wilson_interval

STAGES = ("language_encoder", "vision_encoder", "fusion", "action_head")

LAYER_GROUPS: dict[str, dict[str, Any]] = {
    "first_conv": {
        "why": "the vision encoder's first convolution (raw pixels in)",
        "stages": {"vision_encoder": {"layers": ("trunk.0",), "convs": "int8", "linears": False}},
    },
    "flow_time_embedding": {
        "why": "the action head's flow-time embedding MLP (time_mix)",
        "stages": {"action_head": {"layers": ("time_mix.*",)}},
    },
    "action_out": {
        "why": "the action head's output projection (the velocity of every Euler step)",
        "stages": {"action_head": {"layers": ("action_out",)}},
    },
    "attention": {
        "why": "every attention projection (q, k, v, out) of every stage",
        "stages": {
            name: {
                "layers": (
                    "*attn.q",
                    "*attn.k",
                    "*attn.v",
                    "*attn.out",
                    "*attention.self.*",
                    "*attention.output.dense",
                )
            }
            for name in STAGES
        },
    },
}
"""The bundled model's layer groups of interest: module-path patterns per stage."""

DEFAULT_VARIANTS = (
    "torch",
    "fp32",
    "all",
    *(f"stage:{s}" for s in STAGES),
    *(f"group:{g}" for g in LAYER_GROUPS),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``vla-edge bench quant``."""
    parser.add_argument("--json", type=Path, required=True, help="output JSON")
    parser.add_argument("--checkpoint", default="bundled", help="checkpoint .pt or 'bundled'")
    parser.add_argument(
        "--recipe", default="8da4w", help="the recipe whose parts are tested (default 8da4w)"
    )
    parser.add_argument("--quant-recipes", type=Path, default=None, help="a recipes file")
    parser.add_argument(
        "--variants",
        default=",".join(DEFAULT_VARIANTS),
        help="comma-separated: torch, fp32, all, stage:NAME, group:NAME, recipe:NAME",
    )
    parser.add_argument("--episodes", type=int, default=50, help="init states per task")
    parser.add_argument("--seeds", default="0", help="comma-separated noise seeds of the eval")
    parser.add_argument("--workers", type=int, default=2, help="eval worker processes")
    parser.add_argument("--parity-samples", type=int, default=64)
    parser.add_argument("--latency-runs", type=int, default=30, help="chunks per round")
    parser.add_argument("--latency-rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2, help="threads of the latency runs")
    parser.add_argument("--no-eval", action="store_true", help="skip the closed-loop success")
    parser.add_argument(
        "--no-latency", action="store_true", help="keep the JSON's latencies (with --resume)"
    )
    parser.add_argument(
        "--no-eval-variants", default="", help="comma-separated variants measured without it"
    )
    parser.add_argument("--work-dir", type=Path, default=Path("out/bench/quant"))
    parser.add_argument("--resume", action="store_true", help="keep the JSON's variants")


# ---------------------------------------------------------------- variants
def variant_recipe(name: str, base: QuantRecipe, recipes: dict[str, QuantRecipe]) -> QuantRecipe:
    """The recipe of variant ``name`` (see the module docstring).

    Raises:
        ConfigError: an unknown variant, stage, group or recipe.
    """
    fp32 = {"scheme": "fp32", "embeddings": "fp32", "convs": "fp32"}
    kind, _, arg = name.partition(":")
    if name == "fp32":
        return QuantRecipe(name="fp32", description="every stage fp32")
    if name == "all":
        return base.model_copy(update={"name": f"all:{base.name}"})
    if kind == "recipe":
        if arg not in recipes:
            raise ConfigError(
                f"variant {name!r}: no recipe {arg!r} (recipes: {', '.join(recipes)})"
            )
        return recipes[arg]
    stages: dict[str, StageOverride] = {}
    if kind == "stage":
        if arg not in STAGES:
            raise ConfigError(f"variant {name!r}: no stage {arg!r} (stages: {', '.join(STAGES)})")
        stages = {s: StageOverride(**fp32) for s in STAGES if s != arg}
        why = f"{base.name} on the {arg} only"
    elif kind == "group":
        if arg not in LAYER_GROUPS:
            raise ConfigError(
                f"variant {name!r}: no layer group {arg!r} (groups: {', '.join(LAYER_GROUPS)})"
            )
        group = LAYER_GROUPS[arg]
        for stage in STAGES:
            part = group["stages"].get(stage)
            if part is None:
                stages[stage] = StageOverride(**fp32)
                continue
            scheme = base.stage(stage).scheme if part.get("linears", True) else "fp32"
            stages[stage] = StageOverride(
                scheme=scheme,
                embeddings="fp32",
                convs=part.get("convs", "fp32"),
                layers=part["layers"],
            )
        why = f"{base.name} on {group['why']} only"
    else:
        raise ConfigError(
            f"variant {name!r}: expected torch, fp32, all, stage:NAME, group:NAME or recipe:NAME"
        )
    return base.model_copy(update={"name": name, "description": why, "stages": stages})


# ---------------------------------------------------------------- measurements
def _eval(args: argparse.Namespace, policy: str, folder: Path, seed: int) -> dict[str, Any]:
    out = folder / f"eval_seed{seed}.json"
    if out.is_file():  # written by an earlier run of the same variant: kept if it is this one
        data = json.loads(out.read_text())
        settings = data.get("settings", {})
        if (
            data.get("policy") == policy
            and settings.get("seed") == seed
            and settings.get("episodes_per_task") == args.episodes
        ):
            return _counts(data, out)
    argv = ["eval", "--policy", policy, "--episodes", str(args.episodes), "--quiet"]
    argv += ["--workers", str(args.workers), "--threads", "1", "--seed", str(seed)]
    argv += ["--json", str(out)]
    code = run_vla_edge(argv, folder / f"eval_seed{seed}.log")
    if code != 0 or not out.is_file():
        raise ConfigError(f"vla-edge eval exited {code}; see {folder / f'eval_seed{seed}.log'}")
    return _counts(json.loads(out.read_text()), out)


def _counts(data: dict[str, Any], path: Path) -> dict[str, Any]:
    """Successes and episodes over every task of an evaluation's JSON."""
    tasks = data["tasks"]
    successes = sum(int(t["successes"]) for t in tasks.values())
    episodes = sum(int(t["episodes"]) for t in tasks.values())
    return {"successes": successes, "episodes": episodes, "json": str(path)}


def _success(per_seed: dict[str, dict[str, Any]]) -> dict[str, Any]:
    successes = sum(s["successes"] for s in per_seed.values())
    episodes = sum(s["episodes"] for s in per_seed.values())
    low, high = wilson_interval(successes, episodes)
    return {
        "seeds": per_seed,
        "successes": successes,
        "episodes": episodes,
        "rate": successes / episodes if episodes else None,
        "wilson95": [low, high],
    }


def _latency(
    args: argparse.Namespace, folders: dict[str, Path], obs: Any
) -> dict[str, dict[str, float]]:
    """p50 / p95 chunk latency of each export, in interleaved rounds."""
    from vla_edge.runners.factory import make_runner

    times: dict[str, list[float]] = {name: [] for name in folders}
    for _ in range(args.latency_rounds):
        for name, folder in folders.items():
            runner = make_runner(str(folder), threads=args.threads)
            runner.infer(obs)  # warm-up, and the instruction's cache
            for _ in range(args.latency_runs):
                t0 = time.perf_counter()
                runner.infer(obs)
                times[name].append((time.perf_counter() - t0) * 1e3)
            runner.close()
    return {
        name: {"p50": float(np.percentile(v, 50)), "p95": float(np.percentile(v, 95)), "n": len(v)}
        for name, v in times.items()
    }


# ---------------------------------------------------------------- the run
def _export_variant(
    policy: Any, ckpt: Path, recipe: QuantRecipe, folder: Path, reuse: list[Path]
) -> dict[str, Any]:
    """Export the checkpoint with ``recipe`` into ``folder``; the variant's export figures."""
    from vla_edge.export.architecture import export_checkpoint as export_policy
    from vla_edge.sim.frames import calibration_images

    export_policy(
        policy,
        folder,
        "executorch",
        recipe,
        checkpoint=ckpt,
        calibration_source=calibration_images,
        reuse_stages_from=reuse,
        log=lambda line: print(f"  [{recipe.name}] {line}", flush=True),
    )
    manifest = json.loads((folder / "manifest.json").read_text())
    stages = manifest["stages"]
    return {
        "description": recipe.description,
        "recipe": manifest["quant_recipe"],
        "export_dir": str(folder),
        "bytes": manifest["total_bytes"],
        "stage_bytes": {k: v["bytes"] for k, v in stages.items()},
        "quantized_linears": {k: v.get("quantized_linears", 0) for k, v in stages.items()},
        "int8_convs": {k: v.get("int8_convs", 0) for k, v in stages.items()},
    }


def run_quant(args: argparse.Namespace) -> dict[str, Any]:
    """Measure every variant (see the module docstring) and return the report."""
    import torch

    from vla_edge.archs.bundled.model import load_checkpoint
    from vla_edge.bench.machine import machine_info
    from vla_edge.export.architecture import stage_programs_of
    from vla_edge.runners.factory import resolve_policy_path
    from vla_edge.runners.parity import export_parity
    from vla_edge.sim.frames import expert_observations

    torch.set_num_threads(max(1, args.threads))
    recipes = load_recipes(args.quant_recipes)
    if args.recipe not in recipes:
        raise ConfigError(f"--recipe {args.recipe!r}: recipes are {', '.join(recipes)}")
    base = recipes[args.recipe]
    names = [v.strip() for v in args.variants.split(",") if v.strip()]
    plans = {n: None if n == "torch" else variant_recipe(n, base, recipes) for n in names}
    seeds = [int(s) for s in str(args.seeds).split(",")]
    ckpt = resolve_policy_path(args.checkpoint)
    policy = load_checkpoint(ckpt, load_language=True)
    cfg = policy.config
    args.work_dir.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"variants": {}}
    earlier: list[dict[str, Any]] = []
    if args.resume and args.json.is_file():
        report = json.loads(args.json.read_text())
        earlier = report["settings"].get("earlier_runs", []) + [
            {k: report[k] for k in ("settings", "machine") if k in report}
        ]
        earlier[-1]["settings"] = {
            k: v for k, v in earlier[-1]["settings"].items() if k != "earlier_runs"
        }
    report.update(
        {
            "checkpoint": str(ckpt),
            "recipe": base.model_dump(mode="json"),
            "layer_groups": {k: v["why"] for k, v in LAYER_GROUPS.items()},
            "machine": machine_info(),
            "settings": {
                "command": " ".join(["vla-edge", *sys.argv[1:]]),
                "episodes_per_task": args.episodes,
                "seeds": seeds,
                "parity_samples": args.parity_samples,
                "threads": args.threads,
                "load_before": list(os.getloadavg()),
                "earlier_runs": earlier,
            },
            "complete": False,
        }
    )

    def save() -> None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")

    observations = expert_observations(
        list(cfg.cameras),
        (cfg.image_height, cfg.image_width),
        cfg.chunk_horizon,
        args.parity_samples,
    )
    eager = {s.name: s.module for s in stage_programs_of(policy, names=STAGES)}
    folders: dict[str, Path] = {}
    for name, recipe in plans.items():
        entry = report["variants"].get(name, {})
        folder = args.work_dir / name.replace(":", "_")
        folder.mkdir(parents=True, exist_ok=True)
        if recipe is not None:
            if "parity" not in entry:
                print(f"[{name}] export", flush=True)
                try:
                    entry = _export_variant(
                        policy, ckpt, recipe, folder, [folder, *folders.values()]
                    )
                except (VlaEdgeError, RuntimeError) as exc:  # a recipe this model cannot take
                    why = f"{type(exc).__name__}: {str(exc).strip().splitlines()[-1][:300]}"
                    print(f"[{name}] failed: {why}", flush=True)
                    report["variants"][name] = {"description": recipe.description, "failed": why}
                    save()
                    continue
                print(f"[{name}] parity", flush=True)
                entry["parity"] = export_parity(folder, eager, observations, threads=args.threads)
                report["variants"][name] = entry
                save()
            folders[name] = folder
        else:
            entry.setdefault("description", "the eager torch checkpoint")
            report["variants"][name] = entry
        if not args.no_eval and name not in args.no_eval_variants.split(","):
            per_seed = dict(entry.get("success", {}).get("seeds", {}))
            for seed in seeds:
                if str(seed) in per_seed:
                    continue
                print(f"[{name}] eval seed {seed}", flush=True)
                policy_arg = str(ckpt) if recipe is None else str(folder)
                per_seed[str(seed)] = _eval(args, policy_arg, folder, seed)
                entry["success"] = _success(per_seed)
                save()
            print(
                f"[{name}] success {entry['success']['successes']}/{entry['success']['episodes']}"
            )
    fp32_bytes = report["variants"].get("fp32", {}).get("bytes")
    for entry in report["variants"].values():
        if fp32_bytes and "bytes" in entry:
            entry["bytes_vs_fp32"] = entry["bytes"] / fp32_bytes
    folders = {  # every export the report holds, this run's and a resumed one's
        name: Path(v["export_dir"])
        for name, v in report["variants"].items()
        if "export_dir" in v and (Path(v["export_dir"]) / "manifest.json").is_file()
    }
    if folders and not args.no_latency:
        print("latency (interleaved rounds)", flush=True)
        latency = _latency(args, folders, observations[0][0])
        for name, value in latency.items():
            report["variants"][name]["latency_ms"] = value
    torch_seeds = report["variants"].get("torch", {}).get("success", {}).get("seeds", {})
    for entry in report["variants"].values():  # on the seeds both have
        seeds = set(entry.get("success", {}).get("seeds", {})) & set(torch_seeds)
        if seeds:
            mine = _success({s: entry["success"]["seeds"][s] for s in seeds})["rate"]
            theirs = _success({s: torch_seeds[s] for s in seeds})["rate"]
            entry["points_vs_torch"] = {"seeds": sorted(seeds), "points": 100.0 * (mine - theirs)}
    report["settings"]["load_after"] = list(os.getloadavg())
    report["complete"] = True
    save()
    return report


def run(args: argparse.Namespace) -> int:
    """Entry point of ``vla-edge bench quant``."""
    try:
        report = run_quant(args)
    except VlaEdgeError as exc:
        print(f"vla-edge bench quant: {exc}", file=sys.stderr)
        return 2
    for name, v in report["variants"].items():
        parity = v.get("parity", {}).get("rms_pct_of_range_max")
        success = v.get("success", {})
        print(
            f"{name:28s} parity {parity if parity is None else round(parity, 3)} % "
            f"bytes {v.get('bytes_vs_fp32', float('nan')):.2f} "
            f"success {success.get('successes')}/{success.get('episodes')} "
            f"p50 {v.get('latency_ms', {}).get('p50', float('nan')):.1f} ms"
        )
    return 0
