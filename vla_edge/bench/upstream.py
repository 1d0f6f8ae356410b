"""``vla-edge bench upstream``: our import checked against upstream's own code.

``vla-edge bench upstream --arch {pi0,pi05,smolvla} --source PATH [--side DIR]
[--commit HASH] --json OUT [--work-dir DIR] [--seed 0] [--action-horizon 10]
[--num-steps 10] [--no-install]``

Everything a run writes (upstream's checkpoint and dumps, the driver's log, the policy
directory, a patched copy of the source) goes to ``WORK_DIR/ARCH``, made anew each run.

A test that builds our model from our own state dict and calls it the reference proves
nothing; this bench runs the code users trust:

1. ``--source``: upstream's repository at a pinned commit (openpi for π0 / π0.5, LeRobot
   for SmolVLA; a work tree or an unpacked ``git archive``; ``--commit`` records the hash
   where the folder has no ``.git``).
2. ``--side``: a side environment, outside this package's environment, with upstream's
   pinned transformers (and what upstream imports that ours lacks) installed with
   ``pip install --target`` (:func:`side_install_commands`; installed when missing). For
   openpi, its ``transformers_replace`` files are copied over that transformers, as its
   README says. torch comes from this environment.
3. The upstream driver (:mod:`vla_edge.bench.upstream_openpi`,
   :mod:`vla_edge.bench.upstream_lerobot`) runs in a subprocess with
   ``PYTHONPATH=SIDE:SOURCE/src`` (:func:`driver_command`), so the two transformers
   versions never meet in one process: it builds the model at a small size with seeded
   random weights, saves them through upstream's own save path and layout, and dumps a
   fixed observation, the noise, the actions of upstream's ``sample_actions`` and the
   intermediates (image features, prefix embeddings, each layer's prefix keys and values,
   the first velocity).
4. Our side: ``vla-edge import`` of that checkpoint
   (:func:`vla_edge.archs.importer.import_checkpoint`), the policy directory loaded into
   our model, run on the same observation and noise, dumping the same intermediates.
5. :func:`compare_dumps`: each intermediate's error relative to upstream's largest value,
   in the order the model computes them, names the first that diverges; the actions'
   error in % of each action dimension's range over the chunk (max and RMS) passes at
   :data:`ACTION_BOUND_PCT`.

LeRobot at the pinned commit uses Python 3.12 syntax in a few files; on an older Python
the harness copies the source into the work directory and applies :data:`SYNTAX_PATCHES`
there (syntax only, the user's tree is never touched).

The JSON holds the command line, the commits, the versions on both sides, the sizes, every
intermediate's error, the actions' error and the verdict.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vla_edge.core.errors import ConfigError, VlaEdgeError

ACTION_BOUND_PCT = 0.01
"""Pass bound: the actions' largest error in % of each action dimension's range."""
STAGE_RTOL = 1e-4
"""An intermediate diverges when its largest error exceeds this fraction of upstream's
largest magnitude (float32 through two transformers versions stays orders below)."""
DRIVER_TIMEOUT_S = 1800.0
DT_ACTION_S = 0.1
STAT_STD = 0.1
"""Spread of the statistics written with upstream's checkpoint (rad)."""
SPM_VOCAB = 300
CAMERAS = ("agentview", "wrist")
"""The robot cameras the imported policy's first slots are mapped to."""


class UpstreamSourceError(ConfigError):
    """``--source`` is missing or is not the upstream repository the architecture needs."""


class SideEnvironmentError(ConfigError):
    """The side environment could not be made (``pip install --target`` failed)."""


class UpstreamRunError(VlaEdgeError):
    """The upstream driver's subprocess failed."""


@dataclass(frozen=True)
class SyntaxPatch:
    """Python 3.12-only syntax in one file, rewritten for an older interpreter.

    Each edit replaces text that occurs exactly once; the result means the same to Python
    (PEP 695 type parameters become ``TypeVar`` / ``Generic``, ``type`` statements plain
    aliases).
    """

    path: str
    """Relative to the source root."""
    edits: tuple[tuple[str, str], ...]
    why: str


@dataclass(frozen=True)
class Upstream:
    """One upstream repository: its driver, side packages and what proves a source is it."""

    name: str
    repo: str
    driver: str
    """The driver script, a sibling of this module."""
    marker: str
    """A file every checkout of the repository has (relative to the source root)."""
    packages: tuple[str, ...]
    """Installed with ``pip install --target SIDE --no-deps``."""
    overlay: tuple[str, str] | None = None
    """(folder in the source, folder in the side environment) copied over it."""
    syntax_patches: tuple[SyntaxPatch, ...] = ()
    pinned_commit: str | None = None
    """The commit this harness (its drivers and syntax patches) was checked against."""


OPENPI = Upstream(
    name="openpi",
    repo="Physical-Intelligence/openpi",
    driver="upstream_openpi.py",
    marker="src/openpi/models_pytorch/pi0_pytorch.py",
    packages=(
        "transformers==4.53.2",
        "tokenizers==0.21.4",
        "huggingface_hub==0.36.2",
        # the JAX-side modules openpi's PyTorch model imports (gemma variants, configs)
        "jax==0.5.3",
        "jaxlib==0.5.3",
        "flax==0.10.2",
        "optax==0.2.8",
        "orbax-checkpoint==0.12.8",
        "tensorstore==0.1.86",
        "augmax==0.4.1",
        "einops==0.8.2",
        "jaxtyping==0.2.36",
        "beartype==0.23.1",
        "wadler_lindig==0.1.8",
        "ml_dtypes==0.5.1",
        "opt_einsum==3.4.0",
        "treescope==0.1.10",
        "absl-py==2.5.1",
        "etils==1.15.0",
        "humanize==4.17.0",
        "simplejson==4.3.0",
        "numpydantic==2.0.0",
    ),
    overlay=("src/openpi/models_pytorch/transformers_replace", "transformers"),
    pinned_commit="15a9616a00943ada6c20a0f158e3adb39df2ccac",
)

LEROBOT = Upstream(
    name="lerobot",
    repo="huggingface/lerobot",
    driver="upstream_lerobot.py",
    marker="src/lerobot/policies/smolvla/modeling_smolvla.py",
    packages=(
        "transformers==5.5.4",
        "tokenizers==0.22.2",
        "huggingface_hub==1.33.0",
        "httpx==0.29.0",
        "httpcore==1.0.9",
        "draccus==0.11.6",
        "mergedeep==1.3.4",
        "typing_inspect==0.9.0",
        "mypy_extensions==1.2.0",
        "einops==0.8.2",
        "termcolor==3.3.0",
        "gymnasium==1.4.0",
        "typer==0.29.2",
        "num2words==0.5.14",
        "docopt==0.6.2",
        # LeRobot and transformers' SmolVLM processor import torchvision, whose compiled
        # ops need a CUDA build of torch: the side environment carries the pair (run on
        # the CPU) with the CUDA libraries torch loads at import
        "torch==2.14.1",
        "torchvision==0.29.1",
        "nvidia-cuda-runtime==13.0.96",
        "nvidia-cublas==13.1.1.3",
        "nvidia-cuda-cupti==13.0.85",
        "nvidia-cuda-nvrtc==13.0.88",
        "nvidia-cudnn-cu13==9.24.0.43",
        "nvidia-cufft==12.0.0.61",
        "nvidia-cufile==1.15.1.6",
        "nvidia-curand==10.4.0.35",
        "nvidia-cusolver==12.0.4.66",
        "nvidia-cusparse==12.6.3.3",
        "nvidia-cusparselt-cu13==0.8.1",
        "nvidia-nccl-cu13==2.30.7",
        "nvidia-nvjitlink==13.4.92",
        "nvidia-nvshmem-cu13==3.4.5",
        "nvidia-nvtx==13.0.85",
    ),
    syntax_patches=(
        SyntaxPatch(
            "src/lerobot/processor/pipeline.py",
            (
                (
                    "class DataProcessorPipeline[TInput, TOutput](HubMixin):",
                    "class DataProcessorPipeline(HubMixin, Generic[TInput, TOutput]):",
                ),
                (
                    "from typing import Any, TypedDict, TypeVar, cast",
                    "from typing import Any, Generic, TypedDict, TypeVar, cast",
                ),
            ),
            "PEP 695 class type parameters -> Generic over the module's TypeVars",
        ),
        SyntaxPatch(
            "src/lerobot/motors/motors_bus.py",
            (
                (
                    "type NameOrID = str | int\ntype Value = int | float\n",
                    "NameOrID = str | int\nValue = int | float\n",
                ),
            ),
            "PEP 695 type statements -> plain aliases",
        ),
        SyntaxPatch(
            "src/lerobot/utils/io_utils.py",
            (
                (
                    "def deserialize_json_into_object[T: JsonLike](fpath: Path, obj: T) -> T:",
                    'T = TypeVar("T", bound=JsonLike)\n\n\n'
                    "def deserialize_json_into_object(fpath: Path, obj: T) -> T:",
                ),
                ("from typing import Any\n", "from typing import Any, TypeVar\n"),
            ),
            "PEP 695 function type parameter -> a bound TypeVar",
        ),
    ),
    pinned_commit="7427f31801f944f5ec9ce53cda02862ce7d1638b",
)

UPSTREAMS: dict[str, Upstream] = {"pi0": OPENPI, "pi05": OPENPI, "smolvla": LEROBOT}
"""The upstream each architecture is checked against."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of ``vla-edge bench upstream``."""
    parser.add_argument("--arch", choices=tuple(UPSTREAMS), required=True)
    parser.add_argument(
        "--source",
        type=Path,
        default=None,
        help="upstream's repository at a pinned commit (openpi for pi0/pi05, LeRobot for smolvla)",
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
    upstream = UPSTREAMS[arch]
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
    the rest come from this environment), then for openpi the copy of its
    ``transformers_replace`` files over the installed transformers.
    """
    upstream = UPSTREAMS[arch]
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
    upstream = UPSTREAMS[arch]
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
            f"--side {side}: no finished side environment for {UPSTREAMS[arch].name} "
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
    itself; otherwise ``source/src`` is copied to ``work/source/src`` and each
    :class:`SyntaxPatch` is applied to the copy.

    Raises:
        UpstreamSourceError: a patch's text is not in its file (another commit).
    """
    patches = UPSTREAMS[arch].syntax_patches
    if not patches or sys.version_info >= (3, 12):
        return source, []
    copy = work / "source"
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(source / "src", copy / "src", symlinks=True)
    applied = []
    for patch in patches:
        path = copy / patch.path
        text = path.read_text()
        for old, new in patch.edits:
            if text.count(old) != 1:
                raise UpstreamSourceError(
                    f"--source {source}: {patch.path} does not hold {old!r} once, the text the "
                    f"syntax patch rewrites ({patch.why}); is it commit "
                    f"{UPSTREAMS[arch].pinned_commit}?"
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
    driver = Path(__file__).with_name(UPSTREAMS[arch].driver)
    return [python, "-P", str(driver), "--arch", arch, "--out", str(out), *extra]


def driver_env(side: Path, source: Path) -> dict[str, str]:
    """This environment with ``PYTHONPATH=SIDE:SOURCE/src`` and no network for the hub."""
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{side}{os.pathsep}{source / 'src'}"
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


def source_commit(source: Path, given: str | None) -> str | None:
    """``--commit``, else the source's ``git rev-parse HEAD``, else ``None``."""
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
    return None


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


# -- our side ------------------------------------------------------------------------------


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


def sentencepiece_tokenizer(path: Path, vocab_size: int = SPM_VOCAB) -> Path:
    """A small SentencePiece model with PaliGemma's special ids (pad 0, eos 1, bos 2, unk 3).

    The import checks its ids against the token table; the comparison feeds token ids
    directly, so its pieces do not matter.
    """
    import io

    import sentencepiece as spm

    sentences = [
        "pick up the red block and place it in the bowl",
        "Task: lift the green block, State: 12 128 255 0 7 64 3;\nAction: ",
        "open the drawer, push the button, stack the cubes",
    ]
    buffer = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences * 20),
        model_writer=buffer,
        vocab_size=vocab_size,
        model_type="unigram",
        hard_vocab_limit=False,
        minloglevel=2,
        pad_id=0,
        eos_id=1,
        bos_id=2,
        unk_id=3,
        user_defined_symbols=["\n"],
        byte_fallback=True,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(buffer.getvalue())
    return path


def import_upstream_checkpoint(arch: str, ckpt: Path, work: Path, meta: dict[str, Any]) -> Any:
    """``vla-edge import`` of upstream's checkpoint onto the package's robot; the PolicyDir."""
    from vla_edge.archs.common import ImportOptions
    from vla_edge.archs.importer import default_robot, import_checkpoint

    tokenizer_dir = work / "tokenizer"
    if arch == "smolvla":
        tokenizer = Path(meta["tokenizer_dir"])
        sizes = meta["config"]
        options = ImportOptions(
            vision_heads=sizes["vision"]["heads"], text_heads=sizes["text"]["heads"]
        )
    else:
        tokenizer = sentencepiece_tokenizer(tokenizer_dir / "tokenizer.model")
        options = ImportOptions(architecture=arch, vision_heads=meta["config"]["vision"]["heads"])
    slots = meta["slots"]
    cameras = {
        slot: CAMERAS[i] if i < len(CAMERAS) and present else None
        for i, (slot, present) in enumerate(zip(slots, meta["inputs"]["image_mask"], strict=True))
    }
    return import_checkpoint(
        ckpt,
        work / "policy",
        tokenizer,
        DT_ACTION_S,
        default_robot(),
        options=options,
        cameras=cameras,
        force=True,
    )


def load_model(policy: Any) -> Any:
    """The policy directory's weights in our model (the registry's classes), eval mode."""
    from vla_edge.archs import registry

    arch = registry.get(policy.architecture)
    model = arch.resolve("model")(policy.config)
    arch.resolve("load_weights")(policy, model)
    return model.eval()


def run_pi0(model: Any, dump: Mapping[str, np.ndarray], num_steps: int) -> dict[str, np.ndarray]:
    """Our π0 / π0.5 on upstream's inputs, dumping the intermediates under upstream's names."""
    import torch

    from vla_edge.archs.pi0 import model as pi0_model

    t = {k.removeprefix("input."): torch.from_numpy(v) for k, v in dump.items() if "input." in k}
    out: dict[str, np.ndarray] = {}
    with torch.no_grad():
        vision = model.embed_images(t["images"])
        out["vision_features"] = vision.numpy()
        embs, pad = model.embed_prefix(vision, t["image_mask"], t["token_ids"], t["token_mask"])
        out["prefix_embeddings"], out["prefix_pad"] = embs.numpy(), pad.numpy()
        keys, values = model.prefix_cache(embs, pad)
        for i, (k, v) in enumerate(zip(keys, values, strict=True)):
            out[f"prefix_keys.{i}"], out[f"prefix_values.{i}"] = k.numpy(), v.numpy()
        width = model.config.expert.width
        time_emb = pi0_model.sinusoidal_time_embedding(torch.ones(1), width)
        velocity = model.velocity(keys, values, pad, t["state"], t["noise"], time_emb)
        out["first_velocity"] = velocity.numpy()
        out["actions"] = model.sample_actions(
            t["images"],
            t["image_mask"],
            t["token_ids"],
            t["token_mask"],
            t["state"],
            t["noise"],
            num_steps=num_steps,
        ).numpy()
    return out


def stage_order(dump: Mapping[str, np.ndarray]) -> list[str]:
    """The intermediates in the order the model computes them (``actions`` last)."""
    layers = sorted({int(k.rsplit(".", 1)[1]) for k in dump if k.startswith("prefix_keys.")})
    cache = [f"prefix_{kind}.{i}" for i in layers for kind in ("keys", "values")]
    head = ["vision_features", "prefix_embeddings", "prefix_pad"]
    return [*head, *cache, "first_velocity", "actions"]


def run_smolvla(
    model: Any, dump: Mapping[str, np.ndarray], num_steps: int
) -> dict[str, np.ndarray]:
    """Our SmolVLA on upstream's inputs, dumping the intermediates under upstream's names.

    ``vision_features`` is compared before the ``sqrt(width)`` scale (upstream's
    ``embed_image`` returns the connector's output; both scale it in the prefix).
    """
    import torch

    t = {k.removeprefix("input."): torch.from_numpy(v) for k, v in dump.items() if "input." in k}
    out: dict[str, np.ndarray] = {}
    with torch.no_grad():
        vision = model.embed_images(t["images"])
        out["vision_features"] = (vision / math.sqrt(vision.shape[-1])).numpy()
        embs, pad = model.embed_prefix(
            vision, t["image_mask"], t["token_ids"], t["token_mask"], t["state"]
        )
        out["prefix_embeddings"], out["prefix_pad"] = embs.numpy(), pad.numpy()
        keys, values = model.prefix_cache(embs, pad)
        for i, (k, v) in enumerate(zip(keys, values, strict=True)):
            out[f"prefix_keys.{i}"], out[f"prefix_values.{i}"] = k.numpy(), v.numpy()
        time_emb = model.time_embedding(torch.ones(1))
        velocity = model.velocity(model.expert_kv(keys, values), pad, t["noise"], time_emb)
        out["first_velocity"] = velocity.numpy()
        out["actions"] = model.sample_actions(
            t["images"],
            t["image_mask"],
            t["token_ids"],
            t["token_mask"],
            t["state"],
            t["noise"],
            num_steps=num_steps,
        ).numpy()
    return out


OUR_RUNS = {"pi0": run_pi0, "pi05": run_pi0, "smolvla": run_smolvla}


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
    upstream = UPSTREAMS[arch]
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
    run_driver(command, driver_env(side, run_source), work / "upstream.log")
    driver_s = time.perf_counter() - t_driver
    meta = json.loads((upstream_dir / "upstream.json").read_text())
    with np.load(upstream_dir / "upstream.npz") as npz:
        dump = {k: npz[k] for k in npz.files}
    t_ours = time.perf_counter()
    policy = import_upstream_checkpoint(arch, Path(meta["checkpoint"]), work, meta)
    model = load_model(policy)
    ours = OUR_RUNS[arch](model, dump, args.num_steps)
    ours_s = time.perf_counter() - t_ours
    result = compare_dumps(ours, dump, stage_order(dump))
    command_line = bench_command(args)
    return {
        "bench": "upstream",
        "arch": arch,
        "command": command_line,
        "pass": result["pass"],
        "actions": result.get("actions"),
        "first_divergence": result["first_divergence"],
        "upstream": {
            "name": upstream.name,
            "repo": upstream.repo,
            "commit": source_commit(source, args.commit),
            "pinned_commit": upstream.pinned_commit,
            "model_class": meta.get("model_class"),
            "transformers": meta.get("transformers"),
            "torch": meta.get("torch"),
            "side_packages": list(upstream.packages),
            "syntax_patches": patches,
            "notes": meta.get("notes", []),
            "driver": shlex.join(command).replace(str(upstream_dir), "UPSTREAM_DIR"),
            "pythonpath": "SIDE:SOURCE/src",
        },
        "ours": {**versions(), "import": "vla_edge.archs.importer.import_checkpoint"},
        "sizes": {**meta["config"], "our_config": policy.config.model_dump(mode="json")},
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
