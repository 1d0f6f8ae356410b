"""``vla-edge bench upstream``: our import checked against upstream's own code.

``vla-edge bench upstream --arch ARCH --source PATH [--side DIR] [--commit HASH] --json OUT
[--work-dir DIR] [--seed 0] [--action-horizon 10] [--num-steps 10] [--no-install]``

``ARCH`` is any registered architecture with an upstream hook
(:class:`~vla_edge.archs.architecture.UpstreamHooks`, ``Architecture.upstream``: today
``pi0`` and ``pi05`` against openpi, ``smolvla`` against LeRobot, ``groot`` and
``groot_n15`` against Isaac-GR00T). Everything a run writes (upstream's checkpoint and
dumps, the driver's log, the policy directory, a patched copy of the source) goes to
``WORK_DIR/ARCH``, made anew each run.

A test that builds our model from our own state dict and calls it the reference proves
nothing; this bench runs the code users trust:

1. ``--source``: upstream's repository at a pinned commit (the hook's ``repo``; a work
   tree, an unpacked ``git archive``, or a tree rebuilt file by file whose
   ``SOURCES.json`` names each file's commit; ``--commit`` records the hash where the
   folder has no ``.git``).
2. ``--side``: a side environment, outside this package's environment, with upstream's
   pinned transformers (and what upstream imports that ours lacks) installed with
   ``pip install --target`` (:func:`side_install_commands`, the hook's ``packages``;
   installed when missing). Where the hook names an overlay (openpi's
   ``transformers_replace`` files) it is copied over that transformers, as upstream's
   README says. torch comes from this environment.
3. The hook's driver (a script in the architecture's folder, e.g.
   ``vla_edge/archs/pi0/upstream_driver.py``) runs in a subprocess with
   ``PYTHONPATH=SIDE:SOURCE/src`` (the hook's ``source_paths``; :func:`driver_command`,
   :func:`driver_env`), so the two transformers versions never meet in one process: it
   builds the model at a small size with seeded random weights, saves them through
   upstream's own save path and layout, and dumps a fixed observation, the noise, the
   actions of upstream's sampler and the intermediates (for the VLM-prefix models: image
   features, prefix embeddings, each layer's prefix keys and values, the first velocity;
   for GR00T: the backbone's features, the VL tokens, the state token, the first
   velocity).
4. Our side (the hook's ``run_ours``): our import of that checkpoint (``vla-edge import``,
   :func:`vla_edge.archs.importer.import_checkpoint`, for π0, π0.5 and SmolVLA; GR00T's
   ``read_checkpoint`` and ``load_checkpoint_weights``) run on the same observation and
   noise, dumping the same intermediates.
5. :func:`compare_dumps`: each intermediate's error relative to upstream's largest value,
   in the order the model computes them, names the first that diverges; the actions'
   error in % of each action dimension's range over the chunk (max and RMS) passes at
   :data:`ACTION_BOUND_PCT`.

Upstream code that uses Python 3.12 syntax (LeRobot at its pinned commit) is run from a
copy in the work directory with the hook's syntax patches applied on an older Python
(syntax only; the user's tree is never touched).

The JSON holds the command line, the commits (per file for a rebuilt tree), the versions
on both sides, the sizes, every intermediate's error, the actions' error and the verdict.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vla_edge.archs import registry
from vla_edge.archs.architecture import UpstreamHooks
from vla_edge.core.errors import ConfigError, VlaEdgeError

ACTION_BOUND_PCT = 0.01
"""Pass bound: the actions' largest error in % of each action dimension's range."""
STAGE_RTOL = 1e-4
"""An intermediate diverges when its largest error exceeds this fraction of upstream's
largest magnitude (float32 through two transformers versions stays orders below)."""
DRIVER_TIMEOUT_S = 1800.0
STAT_STD = 0.1
"""Spread of the statistics handed to the driver (rad)."""


class UpstreamSourceError(ConfigError):
    """``--source`` is missing or is not the upstream repository the architecture needs."""


class SideEnvironmentError(ConfigError):
    """The side environment could not be made (``pip install --target`` failed)."""


class UpstreamRunError(VlaEdgeError):
    """The upstream driver's subprocess failed."""


def upstream_architectures() -> tuple[str, ...]:
    """The registered architectures with an upstream hook (``--arch`` choices)."""
    return tuple(name for name, arch in registry.ARCHITECTURES.items() if arch.upstream)


def hooks(arch: str) -> UpstreamHooks:
    """``arch``'s :class:`~vla_edge.archs.architecture.UpstreamHooks`.

    Raises:
        UnknownArchitectureError: not registered, or registers no upstream hook.
    """
    return registry.get(arch).upstream_hooks()


def driver_path(arch: str) -> Path:
    """The hook's driver script: its file name in the hook module's folder."""
    module = registry.get(arch).upstream.partition(":")[0]
    origin = importlib.util.find_spec(module).origin
    return Path(origin).with_name(hooks(arch).driver)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``vla-edge bench upstream``."""
    choices = upstream_architectures()
    by_repo: dict[str, list[str]] = {}
    for name in choices:
        by_repo.setdefault(hooks(name).repo, []).append(name)
    repos = "; ".join(f"{repo} for {'/'.join(names)}" for repo, names in by_repo.items())
    parser.add_argument("--arch", choices=choices, required=True)
    parser.add_argument(
        "--source",
        type=Path,
        default=None,
        help=f"upstream's repository at a pinned commit ({repos})",
    )
    parser.add_argument(
        "--side",
        type=Path,
        default=None,
        help="the side environment (pip --target folder; made when missing); default "
        "WORK_DIR/side_<upstream>",
    )
    parser.add_argument("--commit", default=None, help="the source's commit, if it has no .git")
    parser.add_argument("--json", type=Path, required=True, help="output JSON")
    parser.add_argument("--work-dir", type=Path, default=Path("out/bench/upstream"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--action-horizon", type=int, default=10)
    parser.add_argument("--num-steps", type=int, default=10)
    parser.add_argument("--no-install", action="store_true", help="never install the side env")


# -- the side environment and the subprocess -----------------------------------------------


def check_source(arch: str, source: Path | None) -> Path:
    """The source root, checked to be the upstream ``arch`` needs.

    Raises:
        UpstreamSourceError: no ``--source``, or not that repository.
    """
    upstream = hooks(arch)
    if source is None:
        raise UpstreamSourceError(
            f"--source is required for --arch {arch}: a checkout of {upstream.repo} "
            f"(the folder holding {upstream.marker})"
        )
    source = Path(source)
    if not (source / upstream.marker).is_file():
        raise UpstreamSourceError(
            f"--source {source}: not a checkout of {upstream.repo} (no {upstream.marker})"
        )
    return source.resolve()


def side_install_commands(
    arch: str, side: Path, source: Path, python: str = sys.executable
) -> list[list[str]]:
    """The commands that make the side environment, in order.

    ``pip install --target SIDE --no-deps`` of the upstream's pinned packages (torch and
    the rest come from this environment), then the hook's overlay (openpi's
    ``transformers_replace`` files) copied over the installed package.
    """
    upstream = hooks(arch)
    commands = [
        [python, "-m", "pip", "install", "--quiet", "--target", str(side), "--no-deps"]
        + list(upstream.packages)
    ]
    if upstream.overlay is not None:
        src, dst = upstream.overlay
        commands.append(["cp", "-r", f"{source / src}/.", str(side / dst)])
    return commands


def side_stamp(arch: str) -> dict[str, Any]:
    """What a finished side environment records (``.vla_edge_side.json``)."""
    upstream = hooks(arch)
    return {"upstream": upstream.name, "packages": list(upstream.packages)}


def ensure_side(arch: str, side: Path, source: Path, install: bool = True) -> Path:
    """The side environment, installed unless its stamp says it already is.

    Raises:
        SideEnvironmentError: missing with ``install=False``, or a command failed.
    """
    stamp = side / ".vla_edge_side.json"
    if stamp.is_file() and json.loads(stamp.read_text()) == side_stamp(arch):
        return side
    if not install:
        raise SideEnvironmentError(
            f"--side {side}: no finished side environment for {hooks(arch).name} "
            "(leave out --no-install to make it)"
        )
    side.mkdir(parents=True, exist_ok=True)
    for command in side_install_commands(arch, side, source):
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SideEnvironmentError(
                f"{shlex.join(command)} exited {done.returncode}: {done.stderr[-2000:]}"
            )
    stamp.write_text(json.dumps(side_stamp(arch)))
    return side


def patched_source(arch: str, source: Path, work: Path) -> tuple[Path, list[dict[str, str]]]:
    """The source the driver imports, and the syntax patches applied to get it.

    Where this interpreter needs none (Python 3.12+, or none declared) that is ``source``
    itself; otherwise each of the hook's ``source_paths`` is copied under
    ``work/source`` and each :class:`~vla_edge.archs.architecture.SyntaxPatch` is applied
    to the copy.

    Raises:
        UpstreamSourceError: a patch's text is not in its file (another commit).
    """
    upstream = hooks(arch)
    if not upstream.syntax_patches or sys.version_info >= (3, 12):
        return source, []
    copy = work / "source"
    if copy.exists():
        shutil.rmtree(copy)
    for folder in upstream.source_paths:
        shutil.copytree(source / folder, copy / folder, symlinks=True, dirs_exist_ok=True)
    applied = []
    for patch in upstream.syntax_patches:
        path = copy / patch.path
        text = path.read_text()
        for old, new in patch.edits:
            if text.count(old) != 1:
                raise UpstreamSourceError(
                    f"--source {source}: {patch.path} does not hold {old!r} once, the text the "
                    f"syntax patch rewrites ({patch.why}); is it commit "
                    f"{upstream.pinned_commit}?"
                )
            text = text.replace(old, new)
        path.write_text(text)
        applied.append(
            {"file": patch.path, "why": patch.why, "edits": [list(e) for e in patch.edits]}
        )
    return copy, applied


def driver_command(
    arch: str, out: Path, extra: Sequence[str], python: str = sys.executable
) -> list[str]:
    """The driver's command line (``-P``: the driver's folder is not put on ``sys.path``)."""
    return [python, "-P", str(driver_path(arch)), "--arch", arch, "--out", str(out), *extra]


def source_pythonpath(source_paths: Sequence[str]) -> str:
    """The driver's ``PYTHONPATH`` with ``SIDE`` and ``SOURCE`` for the folders (the JSON's)."""
    return os.pathsep.join(
        ["SIDE", *("SOURCE" if p == "." else f"SOURCE/{p}" for p in source_paths)]
    )


def driver_env(side: Path, source: Path, source_paths: Sequence[str] = ("src",)) -> dict[str, str]:
    """This environment with ``PYTHONPATH=SIDE:SOURCE/src`` and no network for the hub."""
    env = dict(os.environ)
    folders = [str(source if p == "." else source / p) for p in source_paths]
    env["PYTHONPATH"] = os.pathsep.join([str(side), *folders])
    env["HF_HUB_OFFLINE"] = "1"
    env["TRANSFORMERS_OFFLINE"] = "1"
    env.pop("PYTHONSTARTUP", None)
    return env


def run_driver(command: list[str], env: dict[str, str], log: Path) -> None:
    """Run the upstream driver; its output goes to ``log``.

    Raises:
        UpstreamRunError: a non-zero exit, with the log's tail.
    """
    with log.open("w") as f:
        done = subprocess.run(
            command, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=DRIVER_TIMEOUT_S
        )
    if done.returncode != 0:
        tail = log.read_text()[-3000:]
        raise UpstreamRunError(f"{shlex.join(command)} exited {done.returncode}:\n{tail}")


def source_manifest(arch: str, source: Path) -> dict[str, Any] | None:
    """The source's manifest (the hook's ``source_manifest``: each file's commit), if any."""
    name = hooks(arch).source_manifest
    if name is None or not (source / name).is_file():
        return None
    return json.loads((source / name).read_text())


def source_commit(
    source: Path, given: str | None, manifest: Mapping[str, Any] | None = None
) -> str | None:
    """``--commit``, else the source's ``git rev-parse HEAD``, else the manifest's pin."""
    if given:
        return given
    if (source / ".git").exists():
        done = subprocess.run(
            ["git", "-C", str(source), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode == 0:
            return done.stdout.strip()
    return (manifest or {}).get("pin")


# -- the comparison ------------------------------------------------------------------------


def stage_error(ours: np.ndarray, ref: np.ndarray) -> dict[str, Any]:
    """One intermediate: largest absolute error, upstream's largest magnitude, their ratio."""
    if ours.shape != ref.shape:
        return {"shape": list(ours.shape), "upstream_shape": list(ref.shape), "diverges": True}
    a, b = ours.astype(np.float64), ref.astype(np.float64)
    max_abs = float(np.max(np.abs(a - b))) if a.size else 0.0
    scale = float(np.max(np.abs(b))) if b.size else 0.0
    rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else float("inf"))
    return {"max_abs": max_abs, "upstream_max": scale, "rel": rel}


def action_error(ours: np.ndarray, ref: np.ndarray) -> dict[str, Any]:
    """The actions' error in % of each action dimension's range over upstream's chunk.

    ``ours`` and ``ref`` are ``[..., H, D]``; a dimension whose upstream range is zero is
    measured against 1.
    """
    a = ours.reshape(-1, ours.shape[-1]).astype(np.float64)
    b = ref.reshape(-1, ref.shape[-1]).astype(np.float64)
    span = b.max(axis=0) - b.min(axis=0)
    span = np.where(span > 0, span, 1.0)
    pct = 100.0 * np.abs(a - b) / span[None, :]
    return {
        "max_pct_of_range": float(pct.max()),
        "rms_pct_of_range": float(np.sqrt(np.mean(pct**2))),
        "max_abs": float(np.abs(a - b).max()),
        "worst_dim": int(np.unravel_index(pct.argmax(), pct.shape)[1]),
    }


def compare_dumps(
    ours: Mapping[str, np.ndarray],
    upstream: Mapping[str, np.ndarray],
    order: Sequence[str],
    rtol: float = STAGE_RTOL,
    bound_pct: float = ACTION_BOUND_PCT,
) -> dict[str, Any]:
    """Every intermediate in ``order`` (``actions`` last), the first that diverges, the verdict.

    A stage diverges when its shapes differ, a side lacks it, or its largest error exceeds
    ``rtol`` of upstream's largest magnitude. ``first_divergence`` is the first such stage
    in ``order`` (``None`` when none does); ``pass`` is the actions' bound alone.
    """
    stages: dict[str, Any] = {}
    first = None
    for name in order:
        if name not in ours or name not in upstream:
            side = "ours" if name not in ours else "upstream"
            stages[name] = {"missing_in": side, "diverges": True}
        else:
            stages[name] = stage_error(np.asarray(ours[name]), np.asarray(upstream[name]))
            if "diverges" not in stages[name]:
                stages[name]["diverges"] = stages[name]["rel"] > rtol
        if first is None and stages[name]["diverges"]:
            first = name
    result: dict[str, Any] = {"stages": stages, "first_divergence": first, "stage_rtol": rtol}
    if "actions" in ours and "actions" in upstream and not stages["actions"].get("shape"):
        actions = action_error(np.asarray(ours["actions"]), np.asarray(upstream["actions"]))
        result["actions"] = {**actions, "bound_pct": bound_pct}
        result["pass"] = actions["max_pct_of_range"] <= bound_pct
    else:
        result["pass"] = False
    return result


# -- the statistics handed to every driver -------------------------------------------------


def robot_statistics(std: float = STAT_STD) -> dict[str, dict[str, list[float]]]:
    """State and action statistics (openpi's parts) as wide as the package's robot's joints.

    Zero mean, ``std`` spread, quantiles two spreads either side: joint positions in rad the
    import's unit checks accept. The comparison is on the model's raw actions, so their
    values do not enter it.
    """
    from vla_edge.archs.importer import default_robot

    n = len(default_robot().joint_names)
    part = {"mean": [0.0] * n, "std": [std] * n, "q01": [-2 * std] * n, "q99": [2 * std] * n}
    return {"state": dict(part), "actions": dict(part)}


# -- the bench -----------------------------------------------------------------------------


def versions() -> dict[str, str]:
    """This side's versions."""
    import torch
    import transformers

    import vla_edge

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "numpy": np.__version__,
        "vla_edge": getattr(vla_edge, "__version__", "unknown"),
    }


def bench_command(args: argparse.Namespace) -> str:
    """The command line that reproduces this run (every option spelled out)."""
    parts = ["vla-edge", "bench", "upstream", "--arch", args.arch, "--source", str(args.source)]
    if args.side is not None:
        parts += ["--side", str(args.side)]
    if args.commit:
        parts += ["--commit", args.commit]
    parts += ["--json", str(args.json), "--work-dir", str(args.work_dir), "--seed", str(args.seed)]
    parts += ["--action-horizon", str(args.action_horizon), "--num-steps", str(args.num_steps)]
    return shlex.join(parts)


def run_upstream_bench(args: argparse.Namespace) -> dict[str, Any]:
    """The whole bench; the JSON record."""
    t0 = time.perf_counter()
    arch = args.arch
    upstream = hooks(arch)
    source = check_source(arch, args.source)
    work = Path(args.work_dir) / arch
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    side = Path(args.side or Path(args.work_dir) / f"side_{upstream.name}").resolve()
    ensure_side(arch, side, source, install=not args.no_install)
    run_source, patches = patched_source(arch, source, work)
    extra = [
        "--seed",
        str(args.seed),
        "--action-horizon",
        str(args.action_horizon),
        "--num-steps",
        str(args.num_steps),
    ]
    (work / "stats.json").write_text(json.dumps(robot_statistics()))
    extra += ["--stats", str(work / "stats.json")]
    upstream_dir = work / "upstream"
    command = driver_command(arch, upstream_dir, extra)
    t_driver = time.perf_counter()
    env = driver_env(side, run_source, upstream.source_paths)
    run_driver(command, env, work / "upstream.log")
    driver_s = time.perf_counter() - t_driver
    meta = json.loads((upstream_dir / "upstream.json").read_text())
    with np.load(upstream_dir / "upstream.npz") as npz:
        dump = {k: npz[k] for k in npz.files}
    t_ours = time.perf_counter()
    ours = upstream.run_ours(arch, work, meta, dump, args.num_steps)
    ours_s = time.perf_counter() - t_ours
    result = compare_dumps(ours.dumps, dump, ours.order)
    manifest = source_manifest(arch, source)
    record_upstream: dict[str, Any] = {
        "name": upstream.name,
        "repo": upstream.repo,
        "commit": source_commit(source, args.commit, manifest),
        "pinned_commit": upstream.pinned_commit,
        "model_class": meta.get("model_class"),
        "transformers": meta.get("transformers"),
        "torch": meta.get("torch"),
        "side_packages": list(upstream.packages),
        "syntax_patches": patches,
        "notes": meta.get("notes", []),
        "driver": shlex.join(command).replace(str(upstream_dir), "UPSTREAM_DIR"),
        "pythonpath": source_pythonpath(upstream.source_paths),
    }
    if manifest is not None:
        record_upstream["source_files"] = manifest.get("files", {})
    return {
        "bench": "upstream",
        "arch": arch,
        "command": bench_command(args),
        "pass": result["pass"],
        "actions": result.get("actions"),
        "first_divergence": result["first_divergence"],
        "upstream": record_upstream,
        "ours": {**versions(), "import": ours.reader},
        "sizes": {**meta["config"], "our_config": ours.config},
        "inputs": {**meta["inputs"], "seed": args.seed},
        "stages": result["stages"],
        "stage_rtol": result["stage_rtol"],
        "wall_s": {
            "upstream": round(driver_s, 1),
            "ours": round(ours_s, 1),
            "total": round(time.perf_counter() - t0, 1),
        },
    }


def run(args: argparse.Namespace) -> int:
    """``vla-edge bench upstream``: write the JSON; exit 1 when the actions miss the bound."""
    record = run_upstream_bench(args)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(record, indent=1) + "\n")
    actions = record["actions"] or {}
    print(
        f"{record['arch']} against {record['upstream']['name']} "
        f"{(record['upstream']['commit'] or 'unknown')[:12]}: actions max "
        f"{actions.get('max_pct_of_range', float('nan')):.3g} % / RMS "
        f"{actions.get('rms_pct_of_range', float('nan')):.3g} % of range "
        f"(bound {ACTION_BOUND_PCT} %): {'pass' if record['pass'] else 'FAIL'}"
        + (
            f"; first divergence: {record['first_divergence']}"
            if record["first_divergence"]
            else ""
        )
    )
    return 0 if record["pass"] else 1
