"""``vla-edge bench latency``: per-stage and end-to-end latency of every backend.

``vla-edge bench latency --json OUT [--backend torch,onnx,executorch,remote]
[--checkpoint bundled] [--runs 200] [--cameras 1,3] [--image-size 224] [--threads 1,2]``

With ``--arch pi0|pi05|smolvla [--size full]`` an imported architecture is timed
instead, with random weights (:mod:`vla_edge.bench.arch_latency`).

Two sets of models are timed:

* ``grid``: the bundled architecture exported at ``--image-size`` for each
  camera count in ``--cameras``, with **untrained** weights (timing does not
  depend on the weight values; each entry says ``"trained": false``);
* ``native``: the real checkpoint at its own size (exports in
  ``--export-root/{onnx_fp32,executorch_fp32,executorch_8da4w}``).

Each (model, backend, quantisation, threads) runs in a fresh process
(:mod:`vla_edge.bench.latency_worker`), so its resident memory is its own.
The JSON also holds each export's artifact sizes, the machine (CPU, cores,
governor, thermal zones, OS, Python and package versions, git commit, load
average before and after) and a summary: the speed-up of the fastest edge
backend over torch eager, the 8da4w / fp32 size ratios and each stage's
share of the end-to-end time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from vla_edge.bench import arch_latency, device_latency
from vla_edge.bench.machine import machine_info
from vla_edge.core.errors import VlaEdgeError

BACKENDS = ("torch", "onnx", "executorch", "remote")
EXPORTS = (("onnx", "fp32"), ("executorch", "fp32"), ("executorch", "8da4w"))
GRID_CAMERAS = ("agentview", "wrist", "side")
ARCH_TIMEOUT_S = 3600.0
"""Per worker with ``--arch`` (a full-size export takes minutes; a full-size chunk seconds)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``vla-edge bench latency``."""
    parser.add_argument("--json", type=Path, required=True, help="output JSON")
    parser.add_argument(
        "--backend",
        default="torch,onnx,executorch",
        help=f"comma-separated subset of {','.join(BACKENDS)} (or 'all')",
    )
    parser.add_argument("--checkpoint", default="bundled", help="checkpoint .pt or 'bundled'")
    parser.add_argument(
        "--runs", type=int, default=None, help="timed runs (default 200; --arch: 3)"
    )
    parser.add_argument("--warmup", type=int, default=None, help="default 20; --arch: 1")
    parser.add_argument("--cameras", default="1,3", help="camera counts of the grid")
    parser.add_argument("--image-size", type=int, default=224, help="grid image height = width")
    parser.add_argument("--threads", default="1,2", help="thread counts")
    parser.add_argument("--export-root", type=Path, default=Path("out/export"))
    parser.add_argument("--work-dir", type=Path, default=Path("out/bench/latency_models"))
    parser.add_argument("--no-grid", action="store_true", help="skip the untrained size grid")
    parser.add_argument("--no-native", action="store_true", help="skip the real checkpoint")
    parser.add_argument("--timeout-s", type=float, default=900.0, help="per worker process")
    parser.add_argument(
        "--reuse-exports", action="store_true", help="with --arch: keep stages already exported"
    )
    parser.add_argument(
        "--device",
        default=None,
        help="cpu, cuda or cuda:N: the imported architectures' torch stages on that device "
        "(random weights, CUDA graphs on a GPU, parity with the CPU float32 reference; "
        "vla_edge.bench.device_latency)",
    )
    arch_latency.add_arguments(parser)
    device_latency.add_arguments(parser)


# ---------------------------------------------------------------- import costs
_IMPORT_PROBE = """
import json, sys, time, psutil
rss0 = psutil.Process().memory_info().rss
t0 = time.perf_counter()
import {module}
dt = time.perf_counter() - t0
print(json.dumps({{"import_s": dt, "rss_mb": (psutil.Process().memory_info().rss - rss0) / 2**20,
                  "torch_imported": "torch" in sys.modules}}))
"""


def import_cost(module: str) -> dict[str, Any] | None:
    """Wall time and resident memory of importing ``module`` in a fresh process."""
    code = _IMPORT_PROBE.format(module=module)
    try:
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
        )
    except subprocess.TimeoutExpired:
        return None
    if out.returncode != 0:
        return None
    return json.loads(out.stdout.strip().splitlines()[-1])


def runtime_import_costs() -> dict[str, Any]:
    """What each runtime costs to import: ExecuTorch's Python bindings pull in torch."""
    return {
        "torch": import_cost("torch"),
        "onnxruntime": import_cost("onnxruntime"),
        "executorch_pybindings": import_cost("executorch.extension.pybindings.portable_lib"),
        "executorch_pybindings_C_only": import_cost("executorch.extension.pybindings._C"),
    }


# ---------------------------------------------------------------- models
def _same_export(folder: Path, policy: Any, trained: bool) -> bool:
    """An existing export of exactly this model config and exporter versions."""
    from vla_edge.archs.bundled.programs import LANGUAGE_EXPORTER_REVISION
    from vla_edge.export.manifest import load_manifest
    from vla_edge.export.pipeline import EXPORTER_REVISION, package_versions

    try:
        manifest = load_manifest(folder)
    except VlaEdgeError:
        return False
    data = manifest.data
    return (
        data["model_config"] == policy.config.model_dump(mode="json")
        and data["flow_steps"] == policy.action_head.flow_steps
        and data["exporter"].get("versions") == package_versions()
        and data["exporter"].get("revision") == EXPORTER_REVISION
        and data["exporter"].get("language_revision") == LANGUAGE_EXPORTER_REVISION
        and bool(data["source"].get("trained")) == trained
        and (
            not trained
            or data["source"].get("weights_sha256") == policy.checkpoint_info["weights_sha256"]
        )
    )


def prepare_exports(
    policy: Any,
    root: Path,
    checkpoint: Path | None,
    language_from: dict[str, Path],
    backends: tuple[str, ...] = ("onnx", "executorch"),
    log: Any = print,
) -> dict[str, Path]:
    """Export ``policy`` to ``root/<backend>_<quant>`` (kept when already up to date).

    ``language_from`` maps ``<backend>_<quant>`` to an export whose (identical)
    language program is copied instead of exported again; it is updated.
    """
    from vla_edge.export.architecture import export_checkpoint as export_policy
    from vla_edge.sim.frames import calibration_images

    dirs: dict[str, Path] = {}
    for backend, quant in EXPORTS:
        if backend not in backends:
            continue
        name = f"{backend}_{quant}"
        folder = root / name
        if not _same_export(folder, policy, checkpoint is not None):
            log(f"exporting {name} -> {folder}")
            export_policy(
                policy,
                folder,
                backend,
                quant,
                checkpoint=checkpoint,
                # a stale export of the same model may still hold a usable language program
                reuse_language_from=language_from.get(name, folder if folder.is_dir() else None),
                calibration_source=calibration_images,
                log=log,
            )
        language_from.setdefault(name, folder)
        dirs[name] = folder
    return dirs


def grid_models(
    checkpoint_policy: Any, cameras: list[int], size: int, work_dir: Path
) -> list[dict[str, Any]]:
    """Untrained copies of the checkpoint's architecture at ``size`` for each camera count."""
    import torch

    from vla_edge.archs.bundled.model import VlaPolicy, save_checkpoint

    models = []
    base = checkpoint_policy.config.model_dump(mode="json")
    for n in cameras:
        if not 1 <= n <= len(GRID_CAMERAS):
            raise VlaEdgeError(f"--cameras {n}: expected 1..{len(GRID_CAMERAS)}")
        sized = {"cameras": list(GRID_CAMERAS[:n]), "image_height": size, "image_width": size}
        config = type(checkpoint_policy.config)(**(base | sized))
        torch.manual_seed(0)
        policy = VlaPolicy(config)  # untrained: identity statistics
        folder = work_dir / f"{n}cam_{size}"
        folder.mkdir(parents=True, exist_ok=True)
        ckpt = folder / "untrained.pt"
        if not ckpt.is_file():
            save_checkpoint(ckpt, policy, meta={"purpose": "latency timing, untrained weights"})
        policy.checkpoint_info = {"weights_sha256": None}
        models.append(
            {"label": f"grid_{n}cam_{size}", "policy": policy, "checkpoint": ckpt, "dir": folder}
        )
    return models


# ---------------------------------------------------------------- measuring
def run_worker(policy: Path, threads: int, args: argparse.Namespace) -> dict[str, Any]:
    """Measure one runner in a fresh Python process."""
    cmd = [
        sys.executable,
        "-m",
        "vla_edge.bench.latency_worker",
        "--policy",
        str(policy),
        "--threads",
        str(threads),
        "--runs",
        str(args.runs),
        "--warmup",
        str(args.warmup),
    ]
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout_s, env=env)
    except subprocess.TimeoutExpired as exc:  # say where the worker was
        stderr = exc.stderr or b""  # bytes, whatever ``text`` says
        if isinstance(stderr, bytes):
            stderr = stderr.decode(errors="replace")
        raise VlaEdgeError(
            f"latency worker {policy} threads={threads} did not finish within "
            f"{args.timeout_s} s; its stderr ends: {stderr[-2000:]}"
        ) from exc
    if out.returncode != 0:
        raise VlaEdgeError(
            f"latency worker {policy} threads={threads} failed: {out.stderr[-2000:]}"
        )
    return json.loads(out.stdout.strip().splitlines()[-1])


def artifact_bytes(folder: Path) -> dict[str, Any]:
    """Bytes per stage program, the total and the per-observation (policy) stages alone.

    The per-instruction stages (the bundled language encoder) run once per
    instruction and are left out of ``policy_stages``.
    """
    manifest = json.loads((folder / "manifest.json").read_text())
    per_stage = {name: int(s["bytes"]) for name, s in manifest["stages"].items()}
    per_instruction = {
        name for name, s in manifest["stages"].items() if s.get("rate") == "per_instruction"
    }
    return {
        "stages": per_stage,
        "total": sum(per_stage.values()),
        "policy_stages": sum(v for k, v in per_stage.items() if k not in per_instruction),
        "stage_quant": {name: s["quant"] for name, s in manifest["stages"].items()},
    }


def summarize(results: list[dict[str, Any]], sizes: dict[str, Any]) -> dict[str, Any]:
    """Speed-ups over torch eager, 8da4w size ratios and per-stage time shares."""
    summary: dict[str, Any] = {"speedup_vs_torch": [], "size_ratio_8da4w_vs_fp32": {}}
    keys = {(r["model"], r["cameras"], r["threads"]) for r in results}
    for model, cams, threads in sorted(keys):
        rows = [
            r for r in results if (r["model"], r["cameras"], r["threads"]) == (model, cams, threads)
        ]
        torch_rows = [r for r in rows if r["backend"] == "torch"]
        edge = [r for r in rows if r["backend"] in ("onnx", "executorch")]
        if not torch_rows or not edge:
            continue
        best = min(edge, key=lambda r: r["end_to_end"]["p50_ms"])
        t = torch_rows[0]["end_to_end"]["p50_ms"]
        summary["speedup_vs_torch"].append(
            {
                "model": model,
                "cameras": cams,
                "threads": threads,
                "torch_p50_ms": t,
                "fastest": f"{best['backend']}_{best['quant']}",
                "fastest_p50_ms": best["end_to_end"]["p50_ms"],
                "speedup": t / best["end_to_end"]["p50_ms"],
            }
        )
    for model, dirs in sizes.items():
        fp32 = dirs.get("executorch_fp32")
        q = dirs.get("executorch_8da4w")
        if fp32 and q:
            summary["size_ratio_8da4w_vs_fp32"][model] = {
                "total": q["total"] / fp32["total"],
                "policy_stages": q["policy_stages"] / fp32["policy_stages"],
                "per_stage": {s: q["stages"][s] / fp32["stages"][s] for s in fp32["stages"]},
            }
    for r in results:
        e2e = r["end_to_end"]["p50_ms"]
        r["stage_share_of_end_to_end"] = {
            s: v["p50_ms"] / e2e for s, v in r["stages"].items() if s != "language_encoder"
        }
    return summary


def run_latency(args: argparse.Namespace) -> dict[str, Any]:
    """Build the report (see the module docstring)."""
    import torch

    from vla_edge.archs.bundled.model import load_checkpoint
    from vla_edge.runners.factory import resolve_policy_path

    torch.set_num_threads(2)
    wanted = BACKENDS if args.backend == "all" else tuple(args.backend.split(","))
    unknown = [b for b in wanted if b not in BACKENDS]
    if unknown:
        raise VlaEdgeError(f"--backend {args.backend}: unknown {unknown}, expected {BACKENDS}")
    if args.runs < 1 or args.warmup < 0:
        raise VlaEdgeError(f"--runs {args.runs} / --warmup {args.warmup}: need >= 1 and >= 0")
    thread_counts = [int(t) for t in args.threads.split(",")]
    machine = machine_info()
    ckpt = resolve_policy_path(args.checkpoint)
    policy = load_checkpoint(ckpt)
    models: list[dict[str, Any]] = []
    if not args.no_grid:
        cams = [int(c) for c in args.cameras.split(",")]
        models += grid_models(policy, cams, args.image_size, args.work_dir)
    if not args.no_native:
        models.append(
            {"label": "native", "policy": policy, "checkpoint": ckpt, "dir": args.export_root}
        )
    results: list[dict[str, Any]] = []
    sizes: dict[str, Any] = {}
    # the language program does not depend on the policy: any matching one is copied
    language_from = {
        f"{b}_{q}": args.export_root / f"{b}_{q}"
        for b, q in EXPORTS
        if (args.export_root / f"{b}_{q}").is_dir()
    }
    failures: list[dict[str, Any]] = []
    for model in models:
        trained = model["label"] == "native"
        exports: dict[str, Path] = {}
        if any(b in wanted for b in ("onnx", "executorch")):
            exports = prepare_exports(
                model["policy"],
                model["dir"],
                model["checkpoint"] if trained else None,
                language_from,
                wanted,
            )
            sizes[model["label"]] = {name: artifact_bytes(d) for name, d in exports.items()}
        cfg = model["policy"].config
        variants: list[tuple[str, str, Path]] = []
        if "torch" in wanted:
            variants.append(("torch", "fp32", model["checkpoint"]))
        for name, folder in exports.items():
            backend, quant = name.split("_")
            if backend in wanted:
                variants.append((backend, quant, folder))
        for backend, quant, path in variants:
            for threads in thread_counts:
                print(f"{model['label']}: {backend} {quant} threads={threads} ...", flush=True)
                try:
                    measured = run_worker(path, threads, args)
                except (VlaEdgeError, subprocess.TimeoutExpired) as exc:
                    # one failed or hung configuration must not lose the others
                    print(f"  failed: {exc}", flush=True)
                    failures.append(
                        {
                            "model": model["label"],
                            "backend": backend,
                            "quant": quant,
                            "threads": threads,
                            "error": str(exc)[-500:],
                        }
                    )
                    continue
                entry = {
                    "backend": backend,
                    "quant": quant,
                    "cameras": len(cfg.cameras),
                    "image_size": [cfg.image_height, cfg.image_width],
                    "threads": threads,
                    "model": model["label"],
                    "trained": trained,
                    "policy_path": str(path),
                    **measured,
                }
                results.append(entry)
                print(
                    f"  end-to-end p50 {entry['end_to_end']['p50_ms']:.2f} ms, p95 "
                    f"{entry['end_to_end']['p95_ms']:.2f} ms, rss {entry['rss_mb']:.0f} MiB",
                    flush=True,
                )
        if "remote" in wanted and trained:
            results.append(_remote_entry(model, exports, thread_counts[0], args))
    machine["load_average_after"] = list(os.getloadavg())
    machine["runtime_import_costs"] = runtime_import_costs()
    summary = summarize([r for r in results if r["backend"] != "remote"], sizes)
    return {
        "results": results,
        "failures": failures,
        "artifact_bytes": sizes,
        "machine": machine,
        "summary": summary,
        "settings": {
            "runs": args.runs,
            "warmup": args.warmup,
            "threads": thread_counts,
            "grid_cameras": args.cameras,
            "grid_image_size": args.image_size,
            "grid_weights": "untrained (timing only)",
            "end_to_end": "runner.infer wall time with the instruction embedding cached",
            "language_encoder": "timed separately: first call per new instruction",
        },
    }


def _remote_entry(
    model: dict[str, Any], exports: dict[str, Path], threads: int, args: argparse.Namespace
) -> dict[str, Any]:
    """The openpi-protocol round trip, serving the native model in-process (ONNX if exported)."""
    from vla_edge.bench.remote_latency import bench_remote
    from vla_edge.runners.factory import make_runner

    served = exports.get("onnx_fp32") or model["checkpoint"]
    runner = make_runner(str(served), threads=threads)
    entry = bench_remote(
        runner, n_requests=args.runs, warmup=args.warmup, quant="fp32", threads=threads
    )
    runner.close()
    entry.update({"model": model["label"], "trained": True, "served": str(served)})
    return entry


def run(args: argparse.Namespace) -> int:
    """Write the latency JSON."""
    if args.device is not None:
        try:
            device_latency.run_device_bench(args)
        except VlaEdgeError as exc:
            print(f"vla-edge bench latency: {exc}", file=sys.stderr)
            return 2
        print(f"wrote {args.json}")
        return 0
    if args.arch is not None:
        if args.timeout_s == 900.0:
            args.timeout_s = ARCH_TIMEOUT_S
        return arch_latency.run(args)
    if args.runs is None:
        args.runs = 200
    if args.warmup is None:
        args.warmup = 20
    started = time.time()
    try:
        report = run_latency(args)
    except VlaEdgeError as exc:
        print(f"vla-edge bench latency: {exc}", file=sys.stderr)
        return 2
    report["settings"]["wall_s"] = time.time() - started
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    for row in report["summary"]["speedup_vs_torch"]:
        print(
            f"{row['model']} {row['cameras']} cam, {row['threads']} thr: torch "
            f"{row['torch_p50_ms']:.2f} ms, fastest {row['fastest']} "
            f"{row['fastest_p50_ms']:.2f} ms, x{row['speedup']:.2f}"
        )
    print(f"wrote {args.json}")
    return 0
