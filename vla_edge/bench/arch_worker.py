"""One step of ``vla-edge bench latency --arch`` in a fresh process.

``python -m vla_edge.bench.arch_worker export ...`` exports one stage of a random-weight
model (:mod:`vla_edge.bench.arch_models`) and writes ``<stage>.entry.json`` beside the
program; ``... measure ...`` times the three stages in eager torch or as exported
programs and returns their outputs on the parity cases. Each prints ``step: NAME`` lines
as it goes (the parent names the step that ran out of memory) and one JSON line last.

A stage exported here is not run against torch in the same process (the exporter's
check): at full size the model and the loaded program would not fit in memory together.
Parity is measured instead by ``measure`` in separate processes, on the same inputs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

PARITY_CASES = 2
"""Inputs whose actions are compared between eager torch and each program."""
STAGE_ORDER = ("vision_encoder", "fusion", "action_head")


def step(name: str) -> None:
    """Tell the parent which step runs now."""
    print(f"step: {name}", flush=True)


def peak_rss_mb() -> float:
    """This process's peak resident set size (MiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _model(args: argparse.Namespace) -> Any:
    import torch

    from vla_edge.bench.arch_models import random_model

    torch.set_num_threads(int(args.threads))
    step("build model")
    return random_model(args.arch, args.size, args.cameras, args.seed, args.stage, args.depth)


def export(args: argparse.Namespace) -> dict[str, Any]:
    """Export one stage; the manifest entry goes to ``<out>/<stage>.entry.json``."""
    from vla_edge.export.architecture import stage_programs_of
    from vla_edge.export.pipeline import export_stage

    model = _model(args)
    step("split stages")
    programs = {p.name: p for p in stage_programs_of(model, args.backend, seed=args.seed)}
    program = programs.pop(args.stage)
    del model, programs  # only this stage's weights stay alive
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    step(f"export {args.stage} ({args.backend} {args.quant})")
    t0 = time.perf_counter()
    entry = export_stage(program, args.backend, args.quant, out, check=False, in_place=True)
    entry["export_wall_s"] = round(time.perf_counter() - t0, 2)
    entry["peak_rss_mb"] = peak_rss_mb()
    (out / f"{args.stage}.entry.json").write_text(json.dumps(entry, indent=1))
    return entry


def host_values(stages: Any, case: int, seed: int) -> dict[str, Any]:
    """The host inputs of parity case ``case`` (and of the timed runs): source -> tensor."""
    from vla_edge.bench.arch_models import bench_inputs, host_sources

    values = bench_inputs(stages, seed + 1000 * case)
    sources = host_sources(stages)
    host: dict[str, Any] = {}
    for stage, names in sources.items():
        for source, value in zip(names.values(), values[stage], strict=True):
            if source.startswith("host:"):  # (x_t's first value is the noise: kept)
                host.setdefault(source, value)
    return host


def declared_stages(stages: Any) -> dict[str, tuple[Any, Any, Any]]:
    """Each stage's ``(inputs, outputs, repeat)``: its declared tensors and loop (or None)."""
    from vla_edge.export.manifest import stage_repeat

    inputs, outputs, repeats = stages.inputs(), stages.outputs(), stages.repeats()
    return {
        stage: (
            inputs[stage],
            outputs[stage],
            None
            if stage not in repeats
            else stage_repeat(repeats[stage], tuple(inputs[stage]), tuple(outputs[stage]), stage),
        )
        for stage in STAGE_ORDER
    }


def _chain(
    run_stage: Any,
    declared: dict[str, tuple[Any, Any, Any]],
    host: dict[str, Any],
    convert: Any = None,
) -> tuple[dict[str, Any], dict[str, float]]:
    """Run the three stages in order (a looped stage K calls); every value by source, and ms.

    ``declared``: :func:`declared_stages`; ``convert``: applied to a loop's per-call values.
    """
    from vla_edge.runners.stage_loop import run_stage as run_declared

    values = dict(host)
    ms: dict[str, float] = {}
    for stage in STAGE_ORDER:
        inputs, outputs, repeat = declared[stage]
        t0 = time.perf_counter()
        results = run_declared(
            lambda args, stage=stage: run_stage(stage, args),
            inputs,
            outputs,
            repeat,
            values,
            convert,
        )
        ms[stage] = (time.perf_counter() - t0) * 1e3
        for tensor, value in zip(outputs, results, strict=True):
            values[f"stage:{stage}.{tensor.name}"] = value
    return values, ms


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Time ``runs`` chained calls after ``warmup``; the actions of the parity cases."""
    import torch

    from vla_edge.bench.arch_models import build_stages, host_sources, random_model

    torch.set_num_threads(int(args.threads))
    step("build model")
    # load_s: what it takes to have runnable stages (eager torch: build the model;
    # a program: open it); the shape-only stages a program needs are not counted.
    t_load = time.perf_counter()
    if args.program_dir:
        from vla_edge.bench.arch_models import meta_stages

        stages = meta_stages(args.arch, args.size, args.cameras)
    else:
        model = random_model(args.arch, args.size, args.cameras, args.seed)
        stages = build_stages(args.arch, model)
    sources = host_sources(stages)
    outputs = {s: [t.name for t in v] for s, v in stages.outputs().items()}
    declared = declared_stages(stages)
    convert = None  # a program takes the loop's numpy values as they are
    cases = [host_values(stages, case, args.seed) for case in range(PARITY_CASES)]
    if args.program_dir:
        t_load = time.perf_counter()
        from vla_edge.runners.programs import open_program

        step("load programs")
        folder = Path(args.program_dir)
        programs = {}
        for stage in STAGE_ORDER:
            entry = json.loads((folder / f"{stage}.entry.json").read_text())
            programs[stage] = open_program(
                entry["backend"],
                folder / entry["file"],
                int(args.threads),
                list(sources[stage]),
                outputs[stage],
                stage=stage,
            )
        cases = [{k: v.numpy() for k, v in case.items()} for case in cases]

        def run_stage(stage: str, inputs: list[Any]) -> list[Any]:
            return programs[stage].run([np.ascontiguousarray(x) for x in inputs])

    else:
        modules = stages.modules()
        convert = torch.from_numpy

        def run_stage(stage: str, inputs: list[Any]) -> list[Any]:
            with torch.inference_mode():
                out = modules[stage](*inputs)
            return list(out) if isinstance(out, tuple | list) else [out]

    load_s = time.perf_counter() - t_load
    rss_loaded = peak_rss_mb()
    step("parity cases")
    actions = []
    for case in cases:
        values, _ = _chain(run_stage, declared, case, convert)
        out = values["stage:action_head.actions"]
        actions.append(np.asarray(out.numpy() if hasattr(out, "numpy") else out)[0])
    step("GEMM peak")
    from vla_edge.bench.arch_models import gemm_peak_gflops

    gemm_peak = gemm_peak_gflops(int(args.threads))
    load_before = os.getloadavg()[0]
    step("timed runs")
    for i in range(args.warmup):
        _chain(run_stage, declared, cases[i % len(cases)], convert)
    per_stage: dict[str, list[float]] = {s: [] for s in STAGE_ORDER}
    end_to_end: list[float] = []
    for i in range(args.runs):
        t0 = time.perf_counter()
        _, ms = _chain(run_stage, declared, cases[i % len(cases)], convert)
        end_to_end.append((time.perf_counter() - t0) * 1e3)
        for stage, value in ms.items():
            per_stage[stage].append(value)
    if args.actions_out:
        np.save(args.actions_out, np.stack(actions).astype(np.float32))
    from vla_edge.bench.latency_worker import percentiles_ms

    return {
        "stages": {s: percentiles_ms(v) for s, v in per_stage.items() if v},
        "end_to_end": percentiles_ms(end_to_end) if end_to_end else None,
        "load_s": round(load_s, 2),
        "rss_loaded_mb": rss_loaded,
        "peak_rss_mb": peak_rss_mb(),
        "runs": args.runs,
        "warmup": args.warmup,
        "gemm_peak_gflops": round(gemm_peak, 1),
        # the machine's 1-minute load around the timed runs (other work on the cores)
        "load_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }


def main(argv: list[str] | None = None) -> int:
    """Parse, run one step, print its JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("export", "measure"))
    parser.add_argument("--arch", required=True)
    parser.add_argument("--size", required=True)
    parser.add_argument("--cameras", type=int, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--backend", default="onnx")
    parser.add_argument("--quant", default="fp32")
    parser.add_argument("--stage", default=None)
    parser.add_argument("--out", default=None)
    parser.add_argument("--depth", type=int, default=None, help="export: the stage's layers")
    parser.add_argument("--program-dir", default=None)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--actions-out", default=None, help="save the parity actions (.npy)")
    args = parser.parse_args(argv)
    result = export(args) if args.mode == "export" else measure(args)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
