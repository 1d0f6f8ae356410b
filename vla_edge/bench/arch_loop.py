"""``vla-edge bench loop``: a random-weight imported architecture in the closed loop.

``vla-edge bench loop --arch smolvla|pi0|pi05 --size full --json OUT [--backend onnx]
[--quant fp32] [--work-dir DIR] [--episodes 2] [--task T] [--duration-s 60] [--threads 2]
[--reuse]``

The situation of a user whose computer is slower than the policy wants, made from public
code only (time and safety do not depend on the weight values):

1. ``checkpoint``: seeded random weights (:func:`vla_edge.bench.arch_models.randomise`)
   written in the architecture's published layout (SmolVLA: LeRobot's pretrained layout,
   ``config.json``, ``model.safetensors`` and the processors' statistics files; π0 / π0.5:
   openpi's converted layout, ``config.json``, ``model.safetensors`` and
   ``assets/<id>/norm_stats.json``), with the state and action statistics about the
   tabletop arm's home pose, and a tokenizer of the suite's instructions (SmolVLA: a
   word-level Hugging Face tokenizer directory; π0: a SentencePiece model shaped like
   PaliGemma's);
2. ``import``: ``vla-edge import`` of that checkpoint onto the package's robot (its first
   slot on ``agentview``, a second on ``wrist``; joint positions in rad);
3. ``export``: ``vla-edge export --policy`` to ``--backend`` with recipe ``--quant``
   (default ONNX Runtime fp32); π0 / π0.5 with ``--low-memory``, each stage in its own
   process (a full-size π0 and one stage's export do not fit in 24 GiB together);
4. ``inference``: the exported runner's wall time per chunk on rendered observations;
5. ``eval``: ``vla-edge eval`` of ``--episodes`` init states of ``--task`` in virtual time,
   the measured p50 as the simulated inference delay;
6. ``launch``: ``vla-edge launch sim`` for ``--duration-s`` with real processes; its JSON
   holds each node's resident memory at the start, the end and its peak.

``--reuse`` keeps the checkpoint, policy directory and export already in ``--work-dir``
(a full-size export takes minutes). The JSON holds each step's wall time and figures, and
``checks`` (each true or false): every node exited 0; no command out of the safety limits,
none rejected and no e-stop, in either run; every chunk the controller refused was refused
as stale (older than ``max_chunk_age_s``), so the arm was fed or held, never driven by an
old chunk.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from vla_edge.core.errors import ConfigError

DT_ACTION_S = 0.1
ACTION_STD_RAD = 0.02
"""Spread of the action statistics about the home pose (the gripper's: 5 mm)."""
CAMERAS = ("agentview", "wrist")
"""The robot camera of the checkpoint's first and second image slots."""
TIMED_CHUNKS = 5
SPM_VOCAB = 400
"""Pieces of the SentencePiece model (PaliGemma's has 257,152; any smaller fits its table)."""


def loop_archs() -> tuple[str, ...]:
    """Architectures whose published layout this bench writes (their bench hooks say)."""
    from vla_edge.archs import registry

    return tuple(
        name
        for name, arch in registry.ARCHITECTURES.items()
        if arch.bench is not None and arch.importable
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``vla-edge bench loop``."""
    parser.add_argument("--arch", choices=loop_archs(), default="smolvla")
    parser.add_argument("--size", choices=("full", "small"), default="full")
    parser.add_argument(
        "--cameras",
        type=int,
        default=1,
        help="image slots fed by a robot camera (1 or 2; π0's other openpi slots are masked)",
    )
    parser.add_argument("--json", type=Path, required=True, help="output JSON")
    parser.add_argument("--work-dir", type=Path, default=Path("out/bench/loop"))
    parser.add_argument("--episodes", type=int, default=2, help="eval init states 0..N-1")
    parser.add_argument("--task", default="lift_green_block")
    parser.add_argument("--duration-s", type=float, default=60.0, help="launch sim length")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--backend", choices=("onnx", "executorch"), default="onnx")
    parser.add_argument("--quant", default="fp32", help="the export's quantisation recipe")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--reuse", action="store_true", help="keep the checkpoint, policy and export found"
    )


# -- the checkpoint ------------------------------------------------------------------------


def home_statistics(std_rad: float = ACTION_STD_RAD) -> dict[str, np.ndarray]:
    """LeRobot's statistics keys: state and actions about the tabletop arm's home pose."""
    from vla_edge.sim.tasks import HOME_ARM_QPOS_RAD

    home = np.array([*HOME_ARM_QPOS_RAD.tolist(), 0.04], np.float32)  # gripper open (m)
    action_std = np.array([std_rad] * (home.size - 1) + [0.005], np.float32)
    return {
        "observation.state.mean": home,
        "observation.state.std": np.full(home.size, 0.5, np.float32),
        "action.mean": home,
        "action.std": action_std,
    }


def write_sentencepiece_tokenizer(
    path: Path, sentences: list[str] | None = None, vocab_size: int = SPM_VOCAB
) -> Path:
    r"""A SentencePiece model shaped like PaliGemma's (pad 0, eos 1, bos 2, unk 3, ``"\n"``).

    Trained on ``sentences`` (default: the suite's instructions and a π0.5 prompt); byte
    fallback encodes any other text.
    """
    from vla_edge.archs.policy_tokenizer import write_sentencepiece_model
    from vla_edge.sim.tasks import TASKS

    if sentences is None:
        sentences = [task.instruction for task in TASKS.values()]
        sentences.append("Task: lift the block, State: 12 128 255 0 7 64 3;\nAction: ")
    return write_sentencepiece_model(path, sentences, vocab_size)


def write_word_tokenizer(out: Path) -> Path:
    """A Hugging Face tokenizer directory: one id per word of the suite's instructions."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    from vla_edge.sim.tasks import TASKS

    words = sorted({w for task in TASKS.values() for w in task.instruction.split()})
    vocab = {"<pad>": 0, "<unk>": 1, **{w: i + 2 for i, w in enumerate(words)}}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(out / "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "pad_token": "<pad>"}
    (out / "tokenizer_config.json").write_text(json.dumps(config))
    return out


TOKENIZER_WRITERS: dict[str, tuple[Callable[[Path], Path], str | None]] = {
    "sentencepiece": (write_sentencepiece_tokenizer, "tokenizer.model"),
    "huggingface": (write_word_tokenizer, None),
}
"""An architecture's tokenizer kind -> (the writer of one for the suite's instructions, the
file in the ``tokenizer`` folder; ``None``: the folder itself)."""


# -- the steps -----------------------------------------------------------------------------


@contextlib.contextmanager
def _timed(record: dict[str, Any], name: str, log: Callable[[str], None]) -> Iterator[dict]:
    """``record[name]``, a step's figures, with its ``wall_s``; a log line before and after."""
    log(f"{name} ...")
    t0 = time.perf_counter()
    record[name] = {}
    yield record[name]
    record[name]["wall_s"] = round(time.perf_counter() - t0, 2)
    log(f"{name}: {record[name]['wall_s']} s")


def _hooks(arch: str) -> Any:
    from vla_edge.archs import registry

    return registry.get(arch).bench_hooks()


def loop_model(arch: str, size: str, cameras: int, seed: int) -> Any:
    """The random-weight model the checkpoint holds (:func:`loop_model_config`'s)."""
    from vla_edge.archs import registry
    from vla_edge.archs.common import without_default_init
    from vla_edge.bench.arch_models import randomise

    with without_default_init():
        model = registry.get(arch).resolve("model")(loop_model_config(arch, size, cameras))
    return randomise(model, seed).eval()


def loop_model_config(arch: str, size: str, cameras: int) -> Any:
    """The model at ``size`` as its published layout describes it (its bench hooks').

    SmolVLA: ``cameras`` slots. π0 / π0.5: openpi's layout always has the three image
    slots (``cameras`` of them get a robot camera, the others are masked), and its
    ``config.json`` names the Gemma sizes by variant, so the small size takes openpi's
    ``dummy`` variant for both Gemmas.
    """
    return _hooks(arch).loop_config(size, cameras)


def write_checkpoint(args: argparse.Namespace, ckpt: Path, tokenizer: Path) -> Path:
    """Step 1: the random-weight checkpoint in its published layout and a tokenizer.

    Returns the tokenizer path ``vla-edge import`` takes (a directory for a Hugging Face
    tokenizer, the SentencePiece model file for π0 / π0.5).
    """
    from vla_edge.archs import registry

    model = loop_model(args.arch, args.size, args.cameras, args.seed)
    hooks = _hooks(args.arch)
    hooks.write_checkpoint(ckpt, model, home_statistics(), args.size)
    del model
    if hooks.write_tokenizer is not None:
        from vla_edge.sim.tasks import TASKS

        sentences = [task.instruction for task in TASKS.values()]
        config = hooks.loop_config(args.size, args.cameras)
        return hooks.write_tokenizer(tokenizer, config, sentences)
    writer, _ = TOKENIZER_WRITERS[registry.get(args.arch).tokenizer]
    return writer(tokenizer_path(args.arch, tokenizer))


def tokenizer_path(arch: str, tokenizer: Path) -> Path:
    """The tokenizer ``vla-edge import`` takes from the work dir's ``tokenizer`` folder.

    The folder itself (a Hugging Face tokenizer) or the SentencePiece model in it.
    """
    from vla_edge.archs import registry

    if _hooks(arch).write_tokenizer is not None:
        return tokenizer
    _, file = TOKENIZER_WRITERS[registry.get(arch).tokenizer]
    return tokenizer if file is None else tokenizer / file


def import_options(args: argparse.Namespace, config: Any) -> Any:
    """What the import is told: the architecture, and a small size's head counts."""
    from vla_edge.archs.common import ImportOptions

    return ImportOptions(**_hooks(args.arch).import_options(args.arch, args.size, config))


def prepare(args: argparse.Namespace, record: dict[str, Any], log: Callable[[str], None]) -> Path:
    """Steps 1-3: checkpoint, policy directory, export (kept with ``--reuse``); the export."""
    from vla_edge.archs import registry
    from vla_edge.archs.importer import default_robot, import_checkpoint
    from vla_edge.export.quant_recipes import resolve_recipe

    work = args.work_dir
    ckpt, tokenizer = work / "checkpoint", work / "tokenizer"
    policy, export = work / "policy", work / f"export_{args.backend}_{args.quant}"
    recipe = resolve_recipe(args.quant)
    if args.backend == "onnx" and not recipe.is_fp32:
        raise ConfigError(f"--quant {args.quant} with --backend onnx: ONNX programs are fp32")
    config = loop_model_config(args.arch, args.size, args.cameras)
    record["model"] = {
        "arch": args.arch,
        "size": args.size,
        "cameras": args.cameras,
        "seed": args.seed,
        "chunk_horizon": registry.get(args.arch).facts(config).chunk_horizon,
        "flow_steps": config.flow_steps,
        "image_size": config.vision.image_size,
        "backend": args.backend,
        "quant": args.quant,
    }
    if not (args.reuse and (ckpt / "model.safetensors").is_file()):
        with _timed(record, "checkpoint", log):
            write_checkpoint(args, ckpt, tokenizer)
    if not (args.reuse and (policy / "policy.yaml").is_file()):
        with _timed(record, "import", log):
            slots = {
                slot: CAMERAS[i] if i < args.cameras else None
                for i, slot in enumerate(config.image_slots)
            }
            import_checkpoint(
                ckpt,
                policy,
                tokenizer_path(args.arch, tokenizer),
                DT_ACTION_S,
                default_robot(),
                options=import_options(args, config),
                cameras=slots,
                force=True,
            )
    if not (args.reuse and (export / "manifest.json").is_file()):
        with _timed(record, "export", log) as step:
            if export.exists():
                shutil.rmtree(export)
            step["peak_rss_mb"] = export_policy(args.arch, policy, export, args.backend, recipe)
    record["artifacts"] = {
        "parameters": model_parameters(ckpt / "model.safetensors", _hooks(args.arch).unread_keys),
        "checkpoint_bytes": (ckpt / "model.safetensors").stat().st_size,
        "export_bytes": sum(f.stat().st_size for f in export.iterdir() if f.is_file()),
    }
    return export


def export_policy(arch: str, policy: Path, export: Path, backend: str, recipe: Any) -> float:
    """Step 3 in a fresh process (``vla-edge export --policy``); its peak RSS (MiB).

    An architecture whose export hooks read one stage's weights (π0 / π0.5) exports with
    ``--low-memory`` (one process per stage). The peak is the
    largest of the processes this one has waited for (the kernel's ``RUSAGE_CHILDREN``,
    grandchildren included), read after the export; nothing before it here is as large.
    """
    import resource

    from vla_edge.archs import registry

    low_memory = registry.get(arch).export_hooks().low_memory
    argv = ["export", "--policy", str(policy), "--backend", backend, "--quant", recipe.name]
    argv += ["--out", str(export)] + ["--low-memory"] * low_memory
    code = run_vla_edge(argv, export.parent / f"{export.name}.log", timeout_s=7200.0)
    if code != 0:
        raise ConfigError(f"vla-edge export exited {code}; see {export.parent / export.name}.log")
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0


def model_parameters(weights: Path, unread: tuple[str, ...] = ()) -> int:
    """Parameters the model reads in a published file (``unread`` keys left out).

    SmolVLM2's ``lm_head`` (SmolVLA) and the action expert's (openpi's π0 layout) are in
    the files but read by nothing (each architecture's bench hooks' ``unread_keys``).
    """
    from safetensors import safe_open

    with safe_open(str(weights), "np") as f:
        return sum(int(np.prod(f.get_slice(k).get_shape())) for k in f.keys() if k not in unread)


def time_inference(
    export: Path, task: str, threads: int, log: Callable[[str], None]
) -> dict[str, Any]:
    """Step 4: wall ms per chunk of the exported runner on rendered tabletop observations."""
    from vla_edge.runners.factory import make_runner
    from vla_edge.sim.env import TabletopEnv

    runner = make_runner(str(export), threads=threads)
    env = TabletopEnv(cameras=runner.spec.cameras)
    obs = env.reset(task, 0)
    runner.infer(obs)  # warm-up: the first call allocates
    ms = []
    for _ in range(TIMED_CHUNKS):
        t0 = time.perf_counter()
        runner.infer(obs)
        ms.append((time.perf_counter() - t0) * 1e3)
    runner.close()
    env.close()
    out = {"chunks": TIMED_CHUNKS, "p50_ms": float(np.median(ms)), "max_ms": float(max(ms))}
    log(f"inference: p50 {out['p50_ms']:.0f} ms per chunk")
    return out


def run_vla_edge(argv: list[str], log_file: Path, timeout_s: float | None = None) -> int:
    """Run ``vla-edge ARGV`` in a fresh process; its output goes to ``log_file``."""
    with log_file.open("w") as log:
        done = subprocess.run(
            [sys.executable, "-m", "vla_edge.cli", *argv],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(os.environ),
            timeout=timeout_s,
            check=False,
        )
    return done.returncode


def run_eval(args: argparse.Namespace, export: Path, delay_ms: float) -> dict[str, Any]:
    """Step 5: ``vla-edge eval`` in virtual time with ``delay_ms`` per inference."""
    out = args.work_dir / "eval.json"
    for stale in (out, out.with_suffix(".episodes.jsonl")):  # an earlier run's (--reuse)
        stale.unlink(missing_ok=True)
    argv = ["eval", "--policy", str(export), "--episodes", str(args.episodes)]
    argv += ["--tasks", args.task, "--delay-ms", f"{delay_ms:.0f}", "--quiet"]
    argv += ["--threads", str(args.threads), "--json", str(out)]
    code = run_vla_edge(argv, args.work_dir / "eval.log", timeout_s=7200.0)
    if code != 0 or not out.is_file():
        raise ConfigError(f"vla-edge eval exited {code}; see {args.work_dir / 'eval.log'}")
    return json.loads(out.read_text())


def run_launch(args: argparse.Namespace, export: Path) -> dict[str, Any]:
    """Step 6: ``vla-edge launch sim`` with real processes for ``--duration-s``."""
    out = args.work_dir / "launch.json"
    argv = ["launch", "sim", "--policy", str(export), "--task", args.task]
    argv += ["--duration", f"{args.duration_s:g}", "--threads", str(args.threads)]
    argv += ["--json", str(out), "--log-dir", str(args.work_dir / "logs")]
    code = run_vla_edge(argv, args.work_dir / "launch.log", timeout_s=args.duration_s + 600.0)
    if not out.is_file():
        raise ConfigError(f"vla-edge launch exited {code}; see {args.work_dir / 'launch.log'}")
    return {"exit_code": code, **json.loads(out.read_text())}


def checks(evaluation: dict[str, Any], launch: dict[str, Any]) -> dict[str, bool]:
    """The run's conditions: fed or held, never driven by an old chunk, nothing unsafe."""
    supervisor = evaluation["safety"]["supervisor"]
    controller = evaluation["safety"]["controller"]
    safety = launch["safety"]
    return {
        "launch_nodes_exit_0": launch["exit_code"] == 0
        and all(code == 0 for code in launch["exit_codes"].values()),
        "eval_no_safety_violation": all(
            supervisor.get(key, 0) == 0 for key in ("rejected", "rejected_out_of_limits", "estops")
        ),
        "launch_no_safety_violation": (safety["rejected"] or 0) == 0
        and (safety["rejected_out_of_limits"] or 0) == 0,
        "eval_refusals_only_stale": controller.get("rejected", 0)
        == controller.get("rejected_stale", 0),
        "launch_refusals_only_stale": (launch["chunks_rejected"] or 0)
        == (launch["chunks_rejected_stale"] or 0),
    }


def run(args: argparse.Namespace) -> int:
    """Prepare, time, evaluate and launch; write the JSON; exit 1 when a check fails."""
    if args.cameras not in (1, 2):
        raise ConfigError(f"--cameras = {args.cameras}: expected 1 or 2 (agentview, wrist)")
    if args.episodes < 1 or args.duration_s <= 0:
        raise ConfigError("--episodes must be >= 1 and --duration-s > 0")
    args.work_dir.mkdir(parents=True, exist_ok=True)

    def log(message: str) -> None:
        print(f"bench loop: {message}", flush=True)

    command = f"vla-edge bench loop --arch {args.arch} --size {args.size} --cameras "
    command += f"{args.cameras} --episodes {args.episodes} --task {args.task} --duration-s "
    command += f"{args.duration_s:g} --threads {args.threads} --seed {args.seed}"
    command += f" --backend {args.backend} --quant {args.quant}"
    command += " --reuse" * bool(args.reuse) + f" --json {args.json}"
    record: dict[str, Any] = {"command": command, "load_avg_start": os.getloadavg()}
    export = prepare(args, record, log)
    record["inference"] = time_inference(export, args.task, args.threads, log)
    delay_ms = record["inference"]["p50_ms"]
    with _timed(record, "eval", log) as step:
        evaluation = run_eval(args, export, delay_ms)
        step.update(
            delay_ms=round(delay_ms, 1),
            episodes=args.episodes,
            success=evaluation["tasks"][args.task]["successes"],
            safety=evaluation["safety"],
            inference_wall_ms=evaluation.get("inference_wall_ms"),
        )
    with _timed(record, "launch", log) as step:
        step.update(run_launch(args, export))
    record["load_avg_end"] = os.getloadavg()
    record["checks"] = checks(evaluation, record["launch"])
    record["ok"] = all(record["checks"].values())
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(record, indent=1))
    log(f"checks: {record['checks']}")
    return 0 if record["ok"] else 1
