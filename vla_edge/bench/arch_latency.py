"""``vla-edge bench latency --arch`` / ``bench parity --arch``: an imported architecture.

At full size (or small), with random weights, through every backend.

``vla-edge bench latency --arch pi0 --size full --json OUT [--cameras 1,3]
[--threads 1,2] [--backend torch,onnx,executorch] [--runs 3]``

For each camera count (the model's image slots):

1. **FLOPs** of each stage, counted on fake tensors
   (:func:`~vla_edge.bench.arch_models.stage_flops`).
2. **Eager torch**, one fresh process per thread count: per-stage and end-to-end
   p50/p95 of the three stages chained, peak RSS; the first also writes the actions of
   the parity cases (the reference).
3. **Each export** (ONNX fp32, ExecuTorch fp32, ExecuTorch 8da4w by default; ExecuTorch
   under any recipe of ``config/quant_recipes.yaml`` with ``--variants``; a recipe's
   int8 convolutions stay fp32 here, as there are no calibration images), one process per stage
   so that only that stage's weights are in memory. A watchdog reads the process's
   resident memory and the machine's available memory every 0.2 s; when the machine is
   about to run out it stops the process, and the JSON names the stage, the step that
   was running (building the model, tracing, lowering, ...) and the peak memory. A stage
   that ran out is tried again with fewer layers (halving) until it fits, so the JSON also
   says the largest size that does.
4. **Each complete export**, one process per thread count: the same timings and peak
   RSS, and parity with the reference on the same inputs and explicit noise (% of each
   action dimension's range, as ``vla-edge bench parity``).

Each timing process measures the GEMM peak (fp32 ``torch.mm`` of 2048² matrices) at its
thread count just before its timed runs; each stage's achieved GFLOP/s is given against it.
``vla-edge bench parity --arch`` runs the same with one thread count and one timed run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from vla_edge.core.errors import VlaEdgeError

VARIANTS = (("onnx", "fp32"), ("executorch", "fp32"), ("executorch", "8da4w"))
STAGE_ORDER = ("vision_encoder", "fusion", "action_head")
MEMORY_FLOOR_MB = 768.0
"""The watchdog stops a worker when the machine's available memory falls below this."""
POLL_S = 0.2


def variant_names() -> dict[str, tuple[str, str]]:
    """Every variant ``--variants`` takes: ONNX fp32 and ExecuTorch under each package recipe."""
    from vla_edge.export.quant_recipes import load_recipes

    names = {f"{b}_{q}": (b, q) for b, q in VARIANTS}
    names.update({f"executorch_{recipe}": ("executorch", recipe) for recipe in load_recipes()})
    return names


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``--arch`` options shared by ``bench latency`` and ``bench parity``."""
    parser.add_argument(
        "--arch",
        default=None,
        help="a registered architecture with a benchmark hook (its folder under archs/): "
        "that architecture with random weights instead of the bundled checkpoint",
    )
    parser.add_argument("--size", default="full", help="with --arch: full or small")
    parser.add_argument(
        "--keep-exports",
        action="store_true",
        help="with --arch: keep the programs after timing them (full size: up to 13 GB each)",
    )
    parser.add_argument(
        "--variants",
        default=",".join(f"{b}_{q}" for b, q in VARIANTS),
        help="with --arch: the exports to time, in this order: onnx_fp32 or "
        "executorch_<recipe> for a recipe of config/quant_recipes.yaml",
    )
    parser.add_argument(
        "--stages",
        default=",".join(STAGE_ORDER),
        help="with --arch: the stages to export (a variant is timed when all three are)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="with --arch: keep the rows the JSON already holds and measure the rest",
    )
    parser.add_argument(
        "--no-fit-search",
        action="store_true",
        help="with --arch: do not look for the largest size of a stage that ran out of memory",
    )


# ---------------------------------------------------------------- child processes
class Child:
    """A worker process watched for memory: its steps, peak RSS and last JSON line."""

    def __init__(self, cmd: list[str], threads: int, log_path: Path) -> None:
        import psutil

        self.cmd = cmd
        self.step = "start"
        self.lines: list[str] = []
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = log_path.open("w")
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=self._log, text=True, env=env
        )
        self._ps = psutil.Process(self.proc.pid)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            if line.startswith("step: "):
                self.step = line[len("step: ") :]
            else:
                self.lines.append(line)

    def _rss_mb(self) -> float:
        import psutil

        try:
            procs = [self._ps, *self._ps.children(recursive=True)]
            return sum(p.memory_info().rss for p in procs) / 2**20
        except psutil.Error:
            return 0.0

    def wait(self, timeout_s: float) -> dict[str, Any]:
        """Watch until the process ends; what it printed and how it ended."""
        import psutil

        peak = 0.0
        started = time.monotonic()
        stopped = None
        while self.proc.poll() is None:
            peak = max(peak, self._rss_mb())
            available = psutil.virtual_memory().available / 2**20
            if available < MEMORY_FLOOR_MB:
                stopped = "out_of_memory"
            elif time.monotonic() - started > timeout_s:
                stopped = "timeout"
            if stopped:
                self.proc.kill()
                self.proc.wait()
                break
            time.sleep(POLL_S)
        self._reader.join(timeout=5.0)
        self._log.close()
        rc = self.proc.returncode
        if stopped is None and rc == -9:
            stopped = "out_of_memory"  # the kernel's OOM killer
        result = None
        if rc == 0 and self.lines:
            try:
                result = json.loads(self.lines[-1])
            except ValueError:
                result = None
        return {
            "rc": rc,
            "stopped": stopped,
            "step": self.step,
            "peak_rss_mb": round(peak, 1),
            "wall_s": round(time.monotonic() - started, 1),
            "result": result,
        }


def _worker(mode: str, args: argparse.Namespace, cameras: int, **options: Any) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "vla_edge.bench.arch_worker",
        mode,
        "--arch",
        args.arch,
        "--size",
        args.size,
        "--cameras",
        str(cameras),
        "--seed",
        str(args.seed_models),
    ]
    for key, value in options.items():
        if value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        cmd += [flag] if value is True else [flag, str(value)]
    return cmd


def _log_tail(path: Path, chars: int = 1500) -> str:
    try:
        return path.read_text(errors="replace")[-chars:]
    except OSError:
        return ""


# ---------------------------------------------------------------- steps
def _export_child(
    args: argparse.Namespace,
    cameras: int,
    backend: str,
    quant: str,
    stage: str,
    out: Path,
    log: Path,
    **options: Any,
) -> dict[str, Any]:
    """Export one stage into ``out`` in a watched process; :meth:`Child.wait`'s record."""
    threads = max(args.thread_counts)
    cmd = _worker(
        "export",
        args,
        cameras,
        backend=backend,
        quant=quant,
        stage=stage,
        out=out,
        threads=threads,
        **options,
    )
    return Child(cmd, threads, log).wait(args.timeout_s)


def export_variant(
    args: argparse.Namespace,
    cameras: int,
    backend: str,
    quant: str,
    folder: Path,
    on_stage: Any = None,
) -> dict[str, Any]:
    """Export the three stages of one variant, one process each; what each cost or why not.

    ``on_stage(stages)`` after each stage (a run stopped mid-variant keeps the stages done).
    """
    stages: dict[str, Any] = {}
    for stage in args.export_stages:
        entry_path = folder / f"{stage}.entry.json"
        if args.reuse_exports and entry_path.is_file():
            entry = json.loads(entry_path.read_text())
            if (folder / entry["file"]).is_file():
                stages[stage] = {"ok": True, "entry": entry, "reused": True}
                continue
        entry_path.unlink(missing_ok=True)
        print(f"  export {stage} ({backend} {quant}, {cameras} cam) ...", flush=True)
        log = folder / "logs" / f"export_{stage}.log"
        ran = _export_child(args, cameras, backend, quant, stage, folder, log)
        if ran["result"] is not None:
            stages[stage] = {
                "ok": True,
                "entry": ran["result"],
                "watched_peak_rss_mb": ran["peak_rss_mb"],
                "wall_s": ran["wall_s"],
            }
            print(f"    {ran['wall_s']} s, peak {ran['peak_rss_mb']:.0f} MiB", flush=True)
            if on_stage is not None:
                on_stage(stages)
            continue
        failure = {
            "ok": False,
            "why": ran["stopped"] or f"exit {ran['rc']}",
            "step": ran["step"],
            "peak_rss_mb": ran["peak_rss_mb"],
            "wall_s": ran["wall_s"],
            "log_tail": _log_tail(log),
        }
        print(
            f"    failed: {failure['why']} at step {ran['step']!r}, peak "
            f"{ran['peak_rss_mb']:.0f} MiB",
            flush=True,
        )
        if ran["stopped"] == "out_of_memory" and not args.no_fit_search:
            failure["largest_that_fits"] = fit_search(args, cameras, backend, quant, stage, folder)
        stages[stage] = failure
        if on_stage is not None:
            on_stage(stages)
    ok = len(stages) == len(STAGE_ORDER) and all(s["ok"] for s in stages.values())
    total = sum(int(s["entry"]["bytes"]) for s in stages.values() if s["ok"])
    return {"complete": ok, "stages": stages, "bytes": total if ok else None}


def fit_search(
    args: argparse.Namespace, cameras: int, backend: str, quant: str, stage: str, folder: Path
) -> dict[str, Any] | None:
    """The deepest version of ``stage`` (halving its layer count) whose export fits."""
    from vla_edge.bench.arch_models import depth_fields, model_config

    if stage not in depth_fields(args.arch):
        return None
    config = model_config(args.arch, args.size, cameras)
    fields = depth_fields(args.arch)[stage]
    depth = getattr(config, fields[0]).depth
    tried = []
    while depth > 1:
        depth //= 2
        print(f"    fit search: {stage} with {depth} layers ...", flush=True)
        ran = _export_child(
            args,
            cameras,
            backend,
            quant,
            stage,
            folder / f"fit_depth{depth}",
            folder / "logs" / f"fit_{stage}_depth{depth}.log",
            depth=depth,
        )
        tried.append(
            {
                "depth": depth,
                "fits": ran["result"] is not None,
                "peak_rss_mb": ran["peak_rss_mb"],
                "step": ran["step"],
            }
        )
        if ran["result"] is not None:
            return {
                "layers": depth,
                "of": fields,
                "peak_rss_mb": ran["peak_rss_mb"],
                "bytes": ran["result"]["bytes"],
                "tried": tried,
            }
    return {"layers": None, "of": fields, "tried": tried}


def measure(
    args: argparse.Namespace,
    cameras: int,
    threads: int,
    folder: Path,
    program_dir: Path | None,
    actions_out: Path | None,
) -> dict[str, Any]:
    """One timing process (eager torch when ``program_dir`` is ``None``)."""
    name = "torch" if program_dir is None else program_dir.name
    log = folder / "logs" / f"measure_{name}_{threads}thr.log"
    cmd = _worker(
        "measure",
        args,
        cameras,
        threads=threads,
        runs=args.runs,
        warmup=args.warmup,
        program_dir=program_dir,
        actions_out=actions_out,
    )
    print(f"  measure {name}, {cameras} cam, {threads} thr ...", flush=True)
    ran = Child(cmd, threads, log).wait(args.timeout_s)
    if ran["result"] is None:
        print(f"    failed: {ran['stopped'] or ran['rc']} at {ran['step']!r}", flush=True)
        return {
            "ok": False,
            "why": ran["stopped"] or f"exit {ran['rc']}",
            "step": ran["step"],
            "peak_rss_mb": ran["peak_rss_mb"],
            "log_tail": _log_tail(log),
        }
    result = ran["result"]
    e2e = result["end_to_end"]
    print(
        f"    end to end p50 {e2e['p50_ms'] / 1e3:.2f} s, peak {result['peak_rss_mb']:.0f} MiB"
        if e2e
        else "    done",
        flush=True,
    )
    return {"ok": True, "watched_peak_rss_mb": ran["peak_rss_mb"], **result}


def achieved(result: dict[str, Any], flops: dict[str, int]) -> dict[str, Any]:
    """Each stage's achieved GFLOP/s (at its p50) and its fraction of the GEMM peak.

    The peak is the one the timing process measured just before its timed runs.
    """
    peak_gflops = result["gemm_peak_gflops"]
    out = {}
    for stage, timing in result.get("stages", {}).items():
        gflops = flops[stage] / (timing["p50_ms"] / 1e3) / 1e9
        out[stage] = {"gflops": round(gflops, 2), "of_gemm_peak": round(gflops / peak_gflops, 3)}
    total = sum(flops.values())
    if result.get("end_to_end"):
        gflops = total / (result["end_to_end"]["p50_ms"] / 1e3) / 1e9
        out["end_to_end"] = {
            "gflops": round(gflops, 2),
            "of_gemm_peak": round(gflops / peak_gflops, 3),
        }
    return out


def parity(reference: np.ndarray, candidate: np.ndarray) -> dict[str, Any]:
    """``vla-edge bench parity``'s metrics of the padded actions ``[cases, H, D]``."""
    from vla_edge.bench.parity_metrics import compare

    return compare(reference, candidate, reference, candidate)


def stage_param_bytes(arch: str, size: str, cameras: int) -> dict[str, int]:
    """fp32 bytes of each stage's parameters (what an fp32 program must hold)."""
    from vla_edge.bench.arch_models import meta_stages

    stages = meta_stages(arch, size, cameras)
    return {
        name: sum(p.numel() * 4 for p in module.parameters())
        for name, module in stages.modules().items()
    }


def run_model(
    args: argparse.Namespace, cameras: int, save: Any, previous: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Every measurement of one camera count; ``save(entry)`` after each step.

    ``previous``: this model's entry of an earlier run (``--resume``); its successful
    rows are kept and not measured again, nor are the exports they timed.
    """
    from vla_edge.bench.arch_models import stage_flops

    folder = args.work_dir / f"{args.arch}_{args.size}_{cameras}cam"
    folder.mkdir(parents=True, exist_ok=True)
    flops = stage_flops(args.arch, args.size, cameras)
    entry: dict[str, Any] = {
        "cameras": cameras,
        "flops": flops,
        "fp32_param_bytes": stage_param_bytes(args.arch, args.size, cameras),
        "exports": {},
        "results": [],
    }
    previous = previous or {}
    done = {
        (r["backend"], r["quant"], r["threads"]): r for r in previous.get("results", []) if r["ok"]
    }
    reference_path = folder / "reference_actions.npy"
    reference = None
    if "torch" in args.backends:
        for i, threads in enumerate(args.thread_counts):
            if ("torch", "fp32", threads) in done and reference_path.is_file():
                entry["results"].append(done["torch", "fp32", threads])
                continue
            res = measure(args, cameras, threads, folder, None, reference_path if i == 0 else None)
            res.update(backend="torch", quant="fp32", threads=threads)
            if res["ok"]:
                res["achieved"] = achieved(res, flops)
            entry["results"].append(res)
            save(entry)
        if reference_path.is_file():
            reference = np.load(reference_path)
    for backend, quant in args.variant_order:
        if backend not in args.backends:
            continue
        name = f"{backend}_{quant}"
        kept = [done.get((backend, quant, t)) for t in args.thread_counts]
        if all(kept) and name in previous.get("exports", {}):
            entry["exports"][name] = previous["exports"][name]
            entry["results"] += kept
            save(entry)
            continue
        export_dir = folder / name
        export_dir.mkdir(parents=True, exist_ok=True)

        def partial(stages: dict[str, Any], name: str = name) -> None:
            entry["exports"][name] = {"complete": False, "stages": stages, "bytes": None}
            save(entry)

        exported = export_variant(args, cameras, backend, quant, export_dir, partial)
        entry["exports"][name] = exported
        save(entry)
        if not exported["complete"]:
            continue
        for threads in args.thread_counts:
            actions_path = export_dir / "actions.npy"
            res = measure(args, cameras, threads, folder, export_dir, actions_path)
            res.update(backend=backend, quant=quant, threads=threads)
            if res["ok"]:
                res["achieved"] = achieved(res, flops)
                if reference is not None and actions_path.is_file():
                    res["parity"] = parity(reference, np.load(actions_path))
            entry["results"].append(res)
            save(entry)
        if not args.keep_exports:  # a full-size variant is up to 13 GB on disk
            for path in export_dir.glob("*"):
                if path.suffix in (".onnx", ".pte", ".data"):
                    path.unlink()
    _keep_unrequested(args, previous, entry)
    save(entry)
    return entry


def _keep_unrequested(args: argparse.Namespace, previous: dict[str, Any], entry: dict[str, Any]):
    """``--resume``: the earlier run's variants this run did not ask for stay as they were."""
    asked = {f"{b}_{q}" for b, q in args.variant_order if b in args.backends}
    asked |= {"torch_fp32"} if "torch" in args.backends else set()
    for name, export in previous.get("exports", {}).items():
        if name not in asked and name not in entry["exports"]:
            entry["exports"][name] = export
    entry["results"] += [
        r for r in previous.get("results", []) if f"{r['backend']}_{r['quant']}" not in asked
    ]


def summarize(models: dict[str, Any]) -> dict[str, Any]:
    """Against the goals: fp32 programs' speed and memory, 8da4w's speed-up and bytes."""
    rows = []
    for key, model in models.items():
        torch_rows = {
            r["threads"]: r for r in model["results"] if r["backend"] == "torch" and r["ok"]
        }
        fp32_bytes = sum(model["fp32_param_bytes"].values())
        for r in model["results"]:
            if r["backend"] == "torch" or not r["ok"] or r["threads"] not in torch_rows:
                continue
            t = torch_rows[r["threads"]]
            name = f"{r['backend']}_{r['quant']}"
            row = {
                "model": key,
                "variant": name,
                "threads": r["threads"],
                "speed_vs_torch": round(t["end_to_end"]["p50_ms"] / r["end_to_end"]["p50_ms"], 3),
                "peak_rss_vs_torch": round(r["peak_rss_mb"] / t["peak_rss_mb"], 3),
                "peak_rss_mb": r["peak_rss_mb"],
                "bytes_vs_fp32_params": round(model["exports"][name]["bytes"] / fp32_bytes, 3),
                "parity_rms_pct_of_range_max": r.get("parity", {}).get("rms_pct_of_range_max"),
            }
            rows.append(row)
    return {"vs_torch": rows}


def run(args: argparse.Namespace, parity_only: bool = False) -> int:
    """Write the JSON of ``bench latency --arch`` (or ``bench parity --arch``)."""
    from vla_edge.bench.arch_models import SIZES, bench_archs
    from vla_edge.bench.machine import machine_info

    started = time.time()
    if args.arch not in bench_archs() or args.size not in SIZES:
        print(
            f"vla-edge bench: --arch {args.arch} --size {args.size}: expected one of "
            f"{bench_archs()} and {SIZES}",
            file=sys.stderr,
        )
        return 2
    args.backends = (
        ("torch", "onnx", "executorch")
        if args.backend == "all"
        else tuple(b.strip() for b in args.backend.split(",") if b.strip())
    )
    args.thread_counts = [int(t) for t in str(args.threads).split(",")]
    args.seed_models = 0
    if parity_only:
        args.runs, args.warmup = 1, 0
    else:
        args.runs = 3 if args.runs is None else args.runs
        args.warmup = 1 if args.warmup is None else args.warmup
    args.work_dir = Path(args.work_dir) / "arch"
    names = variant_names()
    wanted = [v.strip() for v in str(args.variants).split(",") if v.strip()]
    unknown = [v for v in wanted if v not in names]
    if unknown:
        print(
            f"vla-edge bench: --variants {unknown[0]}: expected some of {list(names)}",
            file=sys.stderr,
        )
        return 2
    args.variant_order = [names[v] for v in wanted]
    args.export_stages = [v.strip() for v in str(args.stages).split(",") if v.strip()]
    if not set(args.export_stages) <= set(STAGE_ORDER):
        print(
            f"vla-edge bench: --stages {args.stages}: expected some of {STAGE_ORDER}",
            file=sys.stderr,
        )
        return 2
    previous: dict[str, Any] = {}
    if args.resume and args.json.is_file():
        previous = json.loads(args.json.read_text()).get("models", {})
    load_before = os.getloadavg()
    cameras = [int(c) for c in str(args.cameras).split(",")]
    models: dict[str, Any] = dict(previous)  # --resume: other camera counts stay as they were
    complete = False

    def save(key: str | None = None, entry: dict[str, Any] | None = None) -> None:
        """Write the report as it stands (a long run that stops keeps what it measured)."""
        if key is not None:
            models[key] = entry
        report = {
            "arch": args.arch,
            "size": args.size,
            "weights": "random (timing does not depend on them)",
            "complete": complete,
            "models": models,
            "summary": summarize(models),
            "machine": machine_info(),
            "settings": {
                "command": " ".join(["vla-edge", *sys.argv[1:]]),
                "cameras": cameras,
                "threads": args.thread_counts,
                "backends": list(args.backends),
                "runs": args.runs,
                "warmup": args.warmup,
                "load_before": list(load_before),
                "load_after": list(os.getloadavg()),
                "wall_s": round(time.time() - started, 1),
            },
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")

    try:
        for count in cameras:
            key = f"{args.arch}_{args.size}_{count}cam"
            run_model(args, count, lambda entry, key=key: save(key, entry), previous.get(key))
    except VlaEdgeError as exc:
        print(f"vla-edge bench: {exc}", file=sys.stderr)
        return 2
    complete = True
    save()
    print(f"wrote {args.json}")
    return 0
