"""``vla-edge bench parity``: exported backends against the torch reference, same inputs.

``vla-edge bench parity --checkpoint CKPT --json OUT [--data DIR] [--export-root DIR]``

Observations come from the recorded demonstrations (``--data``: HDF5 files,
spread evenly over the episodes) or, without data, are rendered from the
tabletop env while the scripted expert drives each task. Every observation
goes through the torch runner and through each export with the same explicit
noise, and every third one with an executed prefix taken from the recorded
(or expert) actions, so the prefix path is compared too.

Per export (``onnx_fp32``, ``executorch_fp32``, ``executorch_8da4w``, found
as ``EXPORT_ROOT/<name>`` or given with ``--export name=DIR``; exported from
the checkpoint first when missing and ``--export-missing`` is set)::

    {"pairs": {NAME: {"rms_pct_of_range": [per dim], "rms_pct_of_range_max",
                      "max_abs", "cosine", "cosine_min", ...}}, ...}

``rms_pct_of_range``: RMS over all chunks and steps of (backend - torch) per
action dimension, as a percentage of that dimension's range (max - min of
the torch chunks). ``cosine``: mean over chunks of the cosine similarity of
the flattened chunks in the model's action representation (deltas for the
delta dimensions), which is not dominated by the absolute joint offsets.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from vla_edge.bench import arch_latency
from vla_edge.bench.parity_metrics import compare
from vla_edge.core.errors import VlaEdgeError

PAIRS = ("onnx_fp32", "executorch_fp32", "executorch_8da4w")
TARGET_RMS_PCT = {"fp32": 0.1, "8da4w": 5.0}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``vla-edge bench parity``."""
    parser.add_argument("--checkpoint", default="bundled", help="checkpoint .pt or 'bundled'")
    parser.add_argument("--json", type=Path, required=True, help="output JSON")
    parser.add_argument("--data", type=Path, default=None, help="demonstrations (HDF5 file/dir)")
    parser.add_argument("--export-root", type=Path, default=Path("out/export"))
    parser.add_argument(
        "--export",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="export directory of a pair (overrides EXPORT_ROOT/NAME); repeatable",
    )
    parser.add_argument(
        "--export-missing", action="store_true", help="export missing pairs from the checkpoint"
    )
    parser.add_argument("--samples", type=int, default=64, help="observations compared")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cameras", default="1", help="with --arch: camera counts")
    parser.add_argument("--work-dir", type=Path, default=Path("out/bench/latency_models"))
    parser.add_argument("--timeout-s", type=float, default=3600.0, help="with --arch: per worker")
    parser.add_argument(
        "--reuse-exports", action="store_true", help="with --arch: keep stages already exported"
    )
    parser.add_argument(
        "--backend", default="torch,onnx,executorch", help="with --arch: backends compared"
    )
    arch_latency.add_arguments(parser)


def _run_all(runner: Any, cases: list[dict[str, Any]]) -> tuple[np.ndarray, float]:
    t0 = time.perf_counter()
    chunks = [
        runner.infer(
            c["obs"], noise=c["noise"], prefix_actions=c["prefix"], prefix_len=c["prefix_len"]
        ).positions
        for c in cases
    ]
    return np.stack(chunks), (time.perf_counter() - t0) / max(1, len(cases)) * 1e3


def _export_dirs(args: argparse.Namespace) -> dict[str, Path]:
    dirs = {name: args.export_root / name for name in PAIRS}
    for item in args.export:
        name, sep, folder = item.partition("=")
        if not sep or name not in PAIRS:
            raise VlaEdgeError(f"--export {item!r}: expected NAME=DIR with NAME in {PAIRS}")
        dirs[name] = Path(folder)
    return dirs


def _missing_exports(dirs: dict[str, Path]) -> dict[str, Path]:
    """The pairs whose export directory holds no ``manifest.json``."""
    return {
        name: folder for name, folder in dirs.items() if not (folder / "manifest.json").is_file()
    }


def run_parity(args: argparse.Namespace) -> dict[str, Any]:
    """Compute the parity report (see the module docstring).

    Raises:
        VlaEdgeError: no pair has an export and ``--export-missing`` is not given
            (the message names the commands that make them).
    """
    dirs = _export_dirs(args)
    missing = _missing_exports(dirs)
    if len(missing) == len(dirs) and not args.export_missing:
        commands = "; ".join(
            f"vla-edge export --checkpoint {args.checkpoint} --backend {name.split('_')[0]} "
            f"--quant {name.split('_')[1]} --out {folder}"
            for name, folder in missing.items()
        )
        raise VlaEdgeError(
            f"no export to compare: none of {sorted(missing)} has a manifest.json under "
            f"{args.export_root}. Export them ({commands}) or rerun with --export-missing"
        )
    import torch

    from vla_edge.archs.bundled.model import load_checkpoint, sample_noise
    from vla_edge.runners.factory import make_runner, resolve_policy_path
    from vla_edge.runners.torch_runner import TorchRunner

    torch.set_num_threads(max(1, int(args.threads)))
    ckpt = resolve_policy_path(args.checkpoint)
    policy = load_checkpoint(ckpt, load_language=True)
    cfg = policy.config
    hw = (cfg.image_height, cfg.image_width)
    if args.data is not None:
        from vla_edge.sim.frames import recorded_observations

        samples = recorded_observations(
            args.data, list(cfg.cameras), hw, cfg.action_dim, args.samples
        )
        source = f"data:{args.data}"
    else:
        from vla_edge.sim.frames import expert_observations

        samples = expert_observations(list(cfg.cameras), hw, cfg.chunk_horizon, args.samples)
        source = "env:scripted_expert"
    gen = torch.Generator().manual_seed(int(args.seed))
    cases = []
    for i, (obs, actions) in enumerate(samples):
        prefix_len = min(cfg.max_prefix_len, 2) if i % 3 == 2 else 0
        prefix = None
        if prefix_len:
            rows = actions[:prefix_len]
            prefix = np.concatenate([rows, np.repeat(rows[-1:], prefix_len - len(rows), 0)])
        cases.append(
            {
                "obs": obs,
                "noise": sample_noise(gen, cfg.chunk_horizon, cfg.action_dim),
                "prefix": prefix,
                "prefix_len": prefix_len,
            }
        )
    reference = TorchRunner(policy, threads=args.threads)
    ref_chunks, ref_ms = _run_all(reference, cases)
    states = np.stack([np.asarray(c["obs"].state, np.float64) for c in cases])
    ref_rel = policy.codec.to_relative(ref_chunks, states)
    report: dict[str, Any] = {
        "pairs": {},
        "reference": {
            "backend": "torch",
            "checkpoint": str(ckpt),
            "weights_sha256": policy.checkpoint_info.get("weights_sha256"),
            "mean_infer_ms": ref_ms,
        },
        "observations": {
            "source": source,
            "count": len(cases),
            "with_prefix": sum(1 for c in cases if c["prefix_len"]),
            "noise_seed": int(args.seed),
        },
        "dims": list(cfg.joint_names),
        "targets_rms_pct_of_range_max": TARGET_RMS_PCT,
        "skipped": {},
    }
    for name, folder in dirs.items():
        backend, quant = name.split("_")
        if name in missing:
            if not args.export_missing:
                report["skipped"][name] = f"no export at {folder}"
                continue
            from vla_edge.export.architecture import export_checkpoint as export_policy
            from vla_edge.sim.frames import calibration_images

            export_policy(
                policy,
                folder,
                backend,
                quant,
                checkpoint=ckpt,
                calibration_source=calibration_images,
            )
        runner = make_runner(str(folder), threads=args.threads)
        chunks, ms = _run_all(runner, cases)
        runner.close()
        entry = compare(ref_chunks, chunks, ref_rel, policy.codec.to_relative(chunks, states))
        entry.update(
            {
                "export_dir": str(folder),
                "backend": backend,
                "quant": quant,
                "mean_infer_ms": ms,
                "meets_target": entry["rms_pct_of_range_max"] <= TARGET_RMS_PCT[quant],
            }
        )
        report["pairs"][name] = entry
        print(
            f"{name}: rms % of range max {entry['rms_pct_of_range_max']:.4f} "
            f"(target <= {TARGET_RMS_PCT[quant]}), max_abs {entry['max_abs']:.2e}, "
            f"cosine {entry['cosine']:.6f}"
        )
    return report


def run(args: argparse.Namespace) -> int:
    """Write the parity JSON."""
    if args.arch is not None:
        return arch_latency.run(args, parity_only=True)
    try:
        report = run_parity(args)
    except VlaEdgeError as exc:
        print(f"vla-edge bench parity: {exc}", file=sys.stderr)
        return 2
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.json}")
    return 0
