"""``vla-edge bench latency --device cuda``: the bundled model and the imported architectures.

``vla-edge bench latency --device cuda --json OUT [--arch bundled,pi0,pi05,smolvla]
[--size full] [--cameras 'pi0=1,3;smolvla=1,2'] [--runs 50] [--dtypes float32,bfloat16]
[--eager] [--compile]``

For each imported architecture, one model with seeded random weights (N(0, 0.02²), as
:func:`~vla_edge.bench.arch_models.random_model`) is built on the CPU in float32 and shared
by every camera count (a model with fewer image slots takes the same tensors); the bundled
model is its checkpoint, fed a seeded random instruction embedding (the MiniLM runs once per
instruction and is cached). Then, per model:

1. **The reference**: the three stages chained on the CPU in float32 on the parity cases
   (the same host inputs and explicit noise every variant gets).
2. **Each variant** (weights in float32 and in bfloat16 on the device; each stage replayed
   as a captured CUDA graph, with ``--eager`` also run eagerly, with ``--compile`` also
   under ``torch.compile``): the stages run as the torch runners run them
   (:class:`~vla_edge.runners.torch_device.DeviceStage`: host inputs uploaded once per
   chunk, intermediates kept on the device, the action head's K calls driven by the
   declared repeat). Per-stage times come from CUDA events and the end-to-end time is the
   wall time to the actions on the host, p50 / p95 over ``runs`` chunks; the peak of
   allocated GPU memory against the weights' bytes; parity with the reference in % of each
   action dimension's range (as ``vla-edge bench parity``).
3. **Achieved rates**: each stage's FLOPs (counted on fake tensors) and the weight bytes it
   reads (the action head reads the expert K times) over its p50, against this GPU's bf16
   GEMM and device-copy peaks measured in the same run.

Runs on the CPU as well (``--device cpu --size small``: the same code, wall times), which is
how the suite checks it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

STAGE_ORDER = ("vision_encoder", "fusion", "action_head")
PARITY_CASES = 2
GEMM_SIDE = 8192
COPY_BYTES = 1 << 30


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the device bench (``--device`` other than ``cpu`` selects it)."""
    parser.add_argument(
        "--dtypes",
        default="float32,bfloat16",
        help="with --device: weight dtypes to time (each against the CPU float32 reference)",
    )
    parser.add_argument(
        "--eager",
        action="store_true",
        help="with --device: also time each stage run eagerly (no CUDA graph)",
    )
    parser.add_argument(
        "--compile",
        action="store_true",
        help="with --device: also time the stages under torch.compile (then CUDA graphs)",
    )


def from_checkpoint(arch: str) -> bool:
    """Whether ``arch`` is timed from its shipped checkpoint, not built at random.

    This package's own model needs no import; the others are built from their bench hooks.
    """
    from vla_edge.archs import registry

    return not registry.get(arch).importable


def default_archs() -> list[str]:
    """Every architecture this bench times: its own model and those with bench hooks."""
    from vla_edge.archs import registry

    return [
        name
        for name, arch in registry.ARCHITECTURES.items()
        if from_checkpoint(name) or arch.bench is not None
    ]


def default_cameras(arch: str) -> tuple[int, ...]:
    """The camera counts timed by default (the bench hooks'; none for a checkpoint)."""
    from vla_edge.archs import registry

    if from_checkpoint(arch):
        return ()
    return registry.get(arch).bench_hooks().default_cameras


def parse_cameras(text: str | None, archs: list[str]) -> dict[str, tuple[int, ...]]:
    """``pi0=1,3;smolvla=1,2`` (or one list for all) → arch → camera counts."""
    if not text:
        return {a: default_cameras(a) for a in archs}
    if "=" not in text:
        counts = tuple(int(c) for c in text.split(","))
        return {a: counts for a in archs}
    out = {a: default_cameras(a) for a in archs}
    for part in text.split(";"):
        name, _, counts = part.partition("=")
        out[name.strip()] = tuple(int(c) for c in counts.split(","))
    return out


# ---------------------------------------------------------------------------- the machine
def device_info(device: Any) -> dict[str, Any]:
    """The GPU, driver, torch and CUDA versions (on the CPU: the processor)."""
    import torch

    info: dict[str, Any] = {
        "device": str(device),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "host": platform.node(),
        "cpu_count": os.cpu_count(),
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(
            name=props.name,
            capability=f"{props.major}.{props.minor}",
            memory_gib=round(props.total_memory / 2**30, 1),
            multiprocessors=props.multi_processor_count,
            cudnn=torch.backends.cudnn.version(),
        )
        try:
            smi = subprocess.run(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=20,
            )
            info["driver"] = smi.stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            info["driver"] = None
    else:
        info["name"] = platform.processor() or platform.machine()
    return info


def measured_peaks(device: Any) -> dict[str, float]:
    """This device's bf16 GEMM rate (TFLOP/s) and copy bandwidth (GB/s, read + write)."""
    import torch

    if device.type != "cuda":
        from vla_edge.bench.arch_models import gemm_peak_gflops

        return {"gemm_tflops": gemm_peak_gflops(torch.get_num_threads()) / 1e3, "copy_gb_s": 0.0}
    a = torch.randn(GEMM_SIDE, GEMM_SIDE, device=device, dtype=torch.bfloat16)
    b = torch.randn(GEMM_SIDE, GEMM_SIDE, device=device, dtype=torch.bfloat16)
    src = torch.empty(COPY_BYTES // 2, device=device, dtype=torch.bfloat16)
    dst = torch.empty_like(src)

    def best_ms(fn: Any, repeats: int = 20) -> float:
        fn()
        torch.cuda.synchronize(device)
        times = []
        for _ in range(repeats):
            begin = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            begin.record()
            fn()
            end.record()
            end.synchronize()
            times.append(begin.elapsed_time(end))
        return min(times)

    gemm_ms = best_ms(partial(torch.mm, a, b))
    copy_ms = best_ms(partial(dst.copy_, src))
    del a, b, src, dst
    torch.cuda.empty_cache()
    return {
        "gemm_tflops": 2.0 * GEMM_SIDE**3 / (gemm_ms * 1e-3) / 1e12,
        "copy_gb_s": 2.0 * COPY_BYTES / (copy_ms * 1e-3) / 1e9,
        "gemm_side": GEMM_SIDE,
        "copy_bytes": COPY_BYTES,
    }


# ---------------------------------------------------------------------------- the models
def view_model(arch: str, size: str, cameras: int, base: Any) -> Any:
    """``arch`` with ``cameras`` image slots whose parameters are ``base``'s tensors (no copy)."""
    from vla_edge.archs.common import without_default_init
    from vla_edge.bench.arch_models import model_class, model_config

    with without_default_init():
        model = model_class(arch)(model_config(arch, size, cameras))
    model.load_state_dict(base.state_dict(), assign=True)
    return model.eval()


@dataclass
class StagePlan:
    """The three stage modules of one model, their declared tensors and the chunk's source."""

    modules: dict[str, Any]
    declared: dict[str, tuple[Any, Any, Any]]
    """stage -> (inputs, outputs, repeat or None), as a manifest declares them."""
    output: str = "stage:action_head.actions"
    split: Any = None
    """The architecture's stage set, where there is one (its example inputs)."""


def arch_plan(arch: str, model: Any) -> StagePlan:
    """An imported architecture's stages (sharing ``model``'s weights)."""
    from vla_edge.bench.arch_models import build_stages
    from vla_edge.bench.arch_worker import declared_stages

    split = build_stages(arch, model)
    return StagePlan(split.modules(), declared_stages(split), split=split)


def bundled_plan(policy: Any) -> StagePlan:
    """The bundled model's three per-observation stages (its K Euler steps inside the head)."""
    from vla_edge.archs.bundled.stages import BUNDLED_OUTPUT, bundled_stage_io

    io = bundled_stage_io(policy)
    modules = {
        "vision_encoder": policy.vision_encoder,
        "fusion": policy.fusion,
        "action_head": policy.action_head,
    }
    declared = {name: (io[name][1], io[name][2], None) for name in STAGE_ORDER}
    return StagePlan(modules, declared, f"stage:{BUNDLED_OUTPUT}")


def chain(stages: dict[str, Any], plan: StagePlan, host: dict[str, Any], clock: Any) -> Any:
    """The three stages in order (the head's K calls as declared); the actions as they come."""
    from vla_edge.runners.stage_loop import run_stage

    values = dict(host)
    for name in STAGE_ORDER:
        inputs, outputs, repeat = plan.declared[name]
        clock.start(name)
        results = run_stage(stages[name].run, inputs, outputs, repeat, values)
        clock.stop()
        for tensor, value in zip(outputs, results, strict=True):
            values[f"stage:{name}.{tensor.name}"] = value
    return values[plan.output]


def device_stages(plan: StagePlan, device: Any, graphs: bool, compiled: bool) -> dict[str, Any]:
    """Each stage of ``plan`` on ``device`` behind :class:`DeviceStage`."""
    import torch

    from vla_edge.runners.torch_device import DeviceStage

    stages = {}
    for name in STAGE_ORDER:
        module = plan.modules[name].to(device)  # a stage's own buffers join its weights
        if compiled:
            module = torch.compile(module, dynamic=False)
        declared = _Declared(*plan.declared[name][:2])
        stages[name] = DeviceStage(module, declared, device, cuda_graph=graphs)
    return stages


def run_variant(
    plan: StagePlan,
    device: Any,
    cases: list[dict[str, Any]],
    *,
    graphs: bool,
    compiled: bool,
    runs: int,
    warmup: int,
) -> tuple[np.ndarray, dict[str, Any]]:
    """The parity cases' actions and the timings of one placed model."""
    from vla_edge.bench.latency_worker import percentiles_ms
    from vla_edge.runners.torch_device import stage_clock, to_host

    stages = device_stages(plan, device, graphs, compiled)
    actions = [to_host(chain(stages, plan, case, stage_clock(device)))[0] for case in cases]
    for i in range(warmup):
        to_host(chain(stages, plan, cases[i % len(cases)], stage_clock(device)))
    per_stage: dict[str, list[float]] = {s: [] for s in STAGE_ORDER}
    end_to_end = []
    for i in range(runs):
        clock = stage_clock(device)
        t0 = time.perf_counter()
        to_host(chain(stages, plan, cases[i % len(cases)], clock))
        end_to_end.append((time.perf_counter() - t0) * 1e3)
        for name, ms in clock.read_ms().items():
            per_stage[name].append(ms)
    timings = {
        "stages": {s: percentiles_ms(v) for s, v in per_stage.items()},
        "end_to_end": percentiles_ms(end_to_end),
        "runs": runs,
        "warmup": warmup,
    }
    return np.stack(actions), timings


class _Declared:
    """A stage's declared inputs and outputs (what ``DeviceStage.io`` reports)."""

    def __init__(self, inputs: Any, outputs: Any) -> None:
        self.inputs = inputs
        self.outputs = outputs


def reference_actions(plan: StagePlan, cases: list[dict[str, Any]]) -> tuple[np.ndarray, float]:
    """The parity cases' actions in float32 on the CPU, eagerly, and the ms per chunk."""
    import torch

    from vla_edge.runners.torch_device import stage_clock, to_host

    cpu = torch.device("cpu")
    stages = device_stages(plan, cpu, graphs=False, compiled=False)
    t0 = time.perf_counter()
    actions = np.stack([to_host(chain(stages, plan, c, stage_clock(cpu)))[0] for c in cases])
    return actions, (time.perf_counter() - t0) * 1e3 / len(cases)


def achieved(
    flops: dict[str, int],
    read_bytes: dict[str, int],
    stages_ms: dict[str, dict[str, float]],
    peaks: dict[str, float],
) -> dict[str, dict[str, float]]:
    """Each stage's TFLOP/s and weight GB/s at its p50, and their shares of the peaks."""
    out = {}
    for name in STAGE_ORDER:
        seconds = stages_ms[name]["p50_ms"] * 1e-3
        tflops = flops[name] / seconds / 1e12
        gb_s = read_bytes[name] / seconds / 1e9
        out[name] = {
            "tflops": round(tflops, 2),
            "weight_gb_s": round(gb_s, 1),
            "pct_of_gemm_peak": round(100.0 * tflops / peaks["gemm_tflops"], 1),
            "pct_of_copy_peak": round(100.0 * gb_s / peaks["copy_gb_s"], 1)
            if peaks.get("copy_gb_s")
            else None,
        }
    return out


def modes(args: argparse.Namespace) -> list[tuple[str, bool, bool]]:
    """``(name, CUDA graphs, torch.compile)`` of each timed variant."""
    out = [("graphs", True, False)]
    if args.eager:
        out.append(("eager", False, False))
    if args.compile:
        out.append(("compile_graphs", True, True))
    return out


def measure_modes(
    row: dict[str, Any],
    plan_of: Any,
    dtype_name: str,
    weights: dict[str, int],
    read: dict[str, int],
    args: argparse.Namespace,
    device: Any,
    peaks: dict[str, float],
) -> None:
    """Every mode of one placed model into ``row["variants"]`` (``plan_of()`` makes its plan)."""
    import torch

    from vla_edge.runners.parity import compare_chunks

    label = f"[{row['arch']} x{row['cameras']}] {dtype_name}"
    for mode, graphs, compiled in modes(args):
        if device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(device)
        t0 = time.perf_counter()
        try:
            actions, timings = run_variant(
                plan_of(),
                device,
                row["_cases"],
                graphs=graphs and device.type == "cuda",
                compiled=compiled,
                runs=args.runs,
                warmup=args.warmup,
            )
        except Exception as exc:  # a variant that fails is reported, not fatal
            row["variants"].append(
                {"dtype": dtype_name, "mode": mode, "ok": False, "error": repr(exc)[:400]}
            )
            print(f"{label} {mode}: FAILED {exc!r}", flush=True)
            continue
        peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None
        parity = compare_chunks(row["_reference"], actions)
        total = sum(weights.values())
        row["variants"].append(
            {
                "dtype": dtype_name,
                "mode": mode,
                "ok": True,
                "setup_s": round(time.perf_counter() - t0, 1),
                **timings,
                "weight_bytes": total,
                "stage_weight_bytes": weights,
                "peak_allocated_bytes": peak,
                "peak_over_weights": None if peak is None else peak / total,
                "parity_pct_of_range_max": parity["rms_pct_of_range_max"],
                "parity": parity,
                "achieved": achieved(row["flops"], read, timings["stages"], peaks),
            }
        )
        print(
            f"{label} {mode}: p50 {timings['end_to_end']['p50_ms']:.2f} ms, stages "
            + ", ".join(f"{n} {timings['stages'][n]['p50_ms']:.2f}" for n in STAGE_ORDER)
            + f"; parity {parity['rms_pct_of_range_max']:.4f} %"
            + ("" if peak is None else f"; peak {peak / 2**30:.2f} GiB"),
            flush=True,
        )


def new_row(arch: str, size: str, cameras: int, flops: dict, plan: StagePlan, cases: list) -> dict:
    """A model's row: its FLOPs, the CPU float32 reference on ``cases``, no variant yet."""
    import torch

    reference, ms = reference_actions(plan, cases)
    print(f"[{arch} x{cameras}] CPU float32 reference: {ms:.0f} ms per chunk", flush=True)
    return {
        "arch": arch,
        "size": size,
        "cameras": cameras,
        "flops": flops,
        "cpu_reference_ms_per_chunk": round(ms, 1),
        "cpu_threads": torch.get_num_threads(),
        "variants": [],
        "_reference": reference,
        "_cases": cases,
    }


def finished(row: dict[str, Any]) -> dict[str, Any]:
    """``row`` without its working fields."""
    return {k: v for k, v in row.items() if not k.startswith("_")}


def measure_arch(
    arch: str, cameras: tuple[int, ...], args: argparse.Namespace, device: Any, peaks: dict
) -> list[dict[str, Any]]:
    """Every camera count and variant of one architecture (see the module docstring)."""
    from vla_edge.bench.arch_models import random_model, stage_flops
    from vla_edge.bench.arch_worker import host_values
    from vla_edge.runners.torch_device import DTYPES, place_module, weight_bytes

    t0 = time.perf_counter()
    base = random_model(arch, args.size, max(cameras), args.seed)
    print(f"[{arch}] built in {time.perf_counter() - t0:.1f} s", flush=True)
    rows = []
    for count in cameras:
        plan = arch_plan(arch, view_model(arch, args.size, count, base))
        cases = [
            {k: v.numpy() for k, v in host_values(plan.split, case, args.seed).items()}
            for case in range(PARITY_CASES)
        ]
        flops = stage_flops(arch, args.size, count)
        rows.append(new_row(arch, args.size, count, flops, plan, cases))
    k = int(getattr(base.config, "flow_steps", 10))
    for dtype_name in args.dtype_list:
        place_module(base, device, DTYPES[dtype_name])
        weights = {n: weight_bytes(m) for n, m in arch_plan(arch, base).modules.items()}
        read = {**weights, "action_head": k * weights["action_head"]}
        for row in rows:

            def plan_of(count: int = row["cameras"]) -> StagePlan:
                return arch_plan(arch, view_model(arch, args.size, count, base))

            measure_modes(row, plan_of, dtype_name, weights, read, args, device, peaks)
    return [finished(row) for row in rows]


def bundled_cases(policy: Any, seed: int) -> list[dict[str, Any]]:
    """Host inputs of the bundled model's parity cases, by source.

    The instruction's embedding (the MiniLM's output, computed once per instruction and
    cached by the runners) is a seeded random ``[1, 384]`` here: the chunk's cost and
    parity do not depend on it.
    """
    from vla_edge.archs.bundled.stages import bundled_stage_io

    io = bundled_stage_io(policy)
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(PARITY_CASES):
        values = {}
        for name in STAGE_ORDER:
            for spec in io[name][1]:
                made_here = spec.source.startswith(("stage:vision", "stage:fusion"))
                if spec.source in values or made_here:
                    continue
                if spec.name == "images":
                    value = rng.uniform(0.0, 1.0, spec.shape)
                elif spec.name == "prefix_mask":
                    value = np.zeros(spec.shape)
                else:
                    value = rng.standard_normal(spec.shape)
                values[spec.source] = value.astype(np.float32)
        cases.append(values)
    return cases


def measure_bundled(args: argparse.Namespace, device: Any, peaks: dict) -> list[dict[str, Any]]:
    """The bundled checkpoint's three stages (its K Euler steps inside the action head)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from vla_edge.archs.bundled.model import load_checkpoint
    from vla_edge.runners.factory import BUNDLED_CHECKPOINT
    from vla_edge.runners.torch_device import DTYPES, place_module, weight_bytes

    policy = load_checkpoint(BUNDLED_CHECKPOINT)
    plan = bundled_plan(policy)
    cases = bundled_cases(policy, args.seed)
    flops = {}
    values = dict(cases[0])
    with torch.no_grad():
        for name in STAGE_ORDER:
            inputs, outputs, _ = plan.declared[name]
            counter = FlopCounterMode(display=False)
            with counter:
                out = plan.modules[name](*[torch.from_numpy(values[t.source]) for t in inputs])
            out = out if isinstance(out, tuple) else (out,)
            for tensor, value in zip(outputs, out, strict=True):
                values[f"stage:{name}.{tensor.name}"] = value.numpy()
            flops[name] = int(counter.get_total_flops())
    row = new_row("bundled", "bundled", len(policy.config.cameras), flops, plan, cases)
    for dtype_name in args.dtype_list:
        for module in plan.modules.values():
            place_module(module, device, DTYPES[dtype_name])
        weights = {n: weight_bytes(m) for n, m in plan.modules.items()}
        measure_modes(row, lambda: plan, dtype_name, weights, weights, args, device, peaks)
    return [finished(row)]


def run_device_bench(args: argparse.Namespace) -> dict[str, Any]:
    """Every architecture asked for, into one JSON (written after each architecture)."""
    import torch

    from vla_edge.runners.torch_device import resolve_device

    device = resolve_device(args.device)
    args.seed = int(getattr(args, "seed", 0) or 0)
    torch.manual_seed(args.seed)
    archs = [a.strip() for a in args.arch.split(",") if a.strip()] if args.arch else default_archs()
    cameras = parse_cameras(args.cameras if args.cameras != "1,3" else None, archs)
    args.dtype_list = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    args.runs = 50 if args.runs is None else int(args.runs)
    args.warmup = 3 if args.warmup is None else int(args.warmup)
    report: dict[str, Any] = {
        "command": "vla-edge bench latency --device " + args.device,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "device": device_info(device),
        "peaks": measured_peaks(device),
        "seed": args.seed,
        "models": [],
    }
    print(f"peaks: {report['peaks']}", flush=True)
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    for arch in archs:
        if from_checkpoint(arch):
            rows = measure_bundled(args, device, report["peaks"])
        else:
            rows = measure_arch(arch, cameras[arch], args, device, report["peaks"])
        report["models"].extend(rows)
        out.write_text(json.dumps(report, indent=1))
    return report
