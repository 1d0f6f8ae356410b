"""One latency measurement in a fresh process: ``python -m vla_edge.bench.latency_worker``.

Started by :mod:`vla_edge.bench.latency` once per (policy, backend, threads),
so each runner's resident memory and import cost are its own and ExecuTorch's
process-wide thread pool is not shared. Prints one JSON line::

    {"stages": {STAGE: {"p50_ms", "p95_ms", "mean_ms", "max_ms", "n"}},
     "end_to_end": {...}, "rss_mb", "rss_before_load_mb", "import_s", "load_s",
     "torch_imported", "runs", "warmup"}

``end_to_end`` is the wall time of ``runner.infer`` with the instruction's
embedding cached (the steady state of a control loop: pre-processing, three
stages, post-processing). ``language_encoder`` is timed separately, once per
new instruction, because the runners compute it once per instruction.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

LANGUAGE_RUNS = 20


def percentiles_ms(samples_ms: list[float]) -> dict[str, float]:
    """p50, p95, mean and max of a list of millisecond samples."""
    values = np.asarray(samples_ms, dtype=np.float64)
    return {
        "p50_ms": float(np.percentile(values, 50)),
        "p95_ms": float(np.percentile(values, 95)),
        "mean_ms": float(values.mean()),
        "max_ms": float(values.max()),
        "n": int(values.size),
    }


def rss_mb() -> float:
    """Resident set size of this process (MiB)."""
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def measure(policy: str, threads: int, runs: int, warmup: int, seed: int) -> dict[str, object]:
    """Load ``policy`` (checkpoint or export dir), then time ``runs`` inferences."""
    from vla_edge.core.types import Observation

    rss_before = rss_mb()
    t0 = time.perf_counter()
    from vla_edge.runners.factory import make_runner

    runner = make_runner(policy, threads=threads)
    load_s = time.perf_counter() - t0
    spec = runner.spec
    rng = np.random.default_rng(seed)
    shape = (spec.image_height, spec.image_width, 3)
    observations = [
        Observation(
            stamp_s=float(i),
            images={c: rng.integers(0, 256, size=shape, dtype=np.uint8) for c in spec.cameras},
            state=rng.uniform(-0.5, 0.5, size=spec.action_dim),
            instruction="put the red block in the bowl",
        )
        for i in range(8)
    ]
    noises = rng.standard_normal((8, spec.chunk_horizon, spec.noise_dim)).astype(np.float32)
    for i in range(warmup):
        runner.infer(observations[i % 8], noise=noises[i % 8])
    stages: dict[str, list[float]] = {}
    end_to_end: list[float] = []
    for i in range(runs):
        t_start = time.perf_counter()
        chunk = runner.infer(observations[i % 8], noise=noises[i % 8])
        end_to_end.append((time.perf_counter() - t_start) * 1e3)
        for name, value in chunk.timings_ms.items():
            if name != "language_encoder":
                stages.setdefault(name, []).append(float(value))
    language = []
    for i in range(LANGUAGE_RUNS):
        _, ms = runner.language_embedding(f"put the red block in the bowl {i} times")
        language.append(ms)
    result_stages = {"language_encoder": percentiles_ms(language)}
    result_stages.update({name: percentiles_ms(v) for name, v in stages.items()})
    runner.close()
    return {
        "stages": result_stages,
        "end_to_end": percentiles_ms(end_to_end),
        "rss_mb": rss_mb(),
        "rss_before_load_mb": rss_before,
        "load_s": load_s,
        "torch_imported": "torch" in sys.modules,
        "runs": runs,
        "warmup": warmup,
    }


def main(argv: list[str] | None = None) -> int:
    """Parse, measure, print one JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", required=True, help="checkpoint .pt or export directory")
    parser.add_argument("--threads", type=int, required=True)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    result = measure(args.policy, args.threads, args.runs, args.warmup, args.seed)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
