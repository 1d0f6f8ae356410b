"""What an architecture registers: :class:`Architecture`, and the hooks export and bench read.

Each architecture's folder ``vla_edge/archs/<name>/`` has an ``arch`` module that defines
``ARCHITECTURES``, a tuple of :class:`Architecture` (the π0 folder registers ``pi0`` and
``pi05``); :mod:`vla_edge.archs.registry` finds the folders. The ``arch`` module imports no
torch: the functions an entry names are ``"module:attribute"`` strings resolved when used
(:meth:`Architecture.resolve`), so listing or validating never imports torch.

The generic code above this layer reads the hooks instead of branching on a name:

* :class:`ExportHooks` (``Architecture.export``): what :mod:`vla_edge.export.architecture`
  needs to export a policy directory, a checkpoint or a model: its stage modules per backend
  with chained example inputs, the manifest's contract, its normalisation from statistics,
  the tokenizer files it copies, the policy directory's (or the checkpoint's) model with its
  weights, a language stage reused across exports.
* :class:`BenchHooks` (``Architecture.bench``): the sizes the benchmarks build, the layer
  counts one stage's fit search shrinks, the published layout a random model is written in.
* :class:`UpstreamHooks` (``Architecture.upstream``): what ``vla-edge bench upstream``
  (:mod:`vla_edge.bench.upstream`) runs of upstream's own code and how our import of its
  checkpoint is run on the same inputs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vla_edge.core.errors import UnknownArchitectureError


@dataclass(frozen=True)
class Layout:
    """A published checkpoint layout an architecture reads."""

    name: str
    """``openpi``, ``lerobot`` or ``vla_edge``."""
    summary: str


@dataclass(frozen=True)
class PolicyFacts:
    """What a policy directory states about a config, whatever the architecture."""

    chunk_horizon: int
    action_dim: int
    """The model's (padded) action width."""
    vocab_size: int
    """Rows of the token embedding (the tokenizer's ids must stay below)."""
    max_token_len: int
    image_slots: tuple[str, ...]
    image_size: int
    """Square input side in pixels."""
    images: dict[str, Any]
    """``policy.yaml``'s ``images`` fields besides ``slots``, ``height`` and ``width``."""
    prompt: dict[str, Any]


@dataclass(frozen=True)
class PromptFormat:
    """A prompt an architecture's exports encode (``host.token_ids.prompt``).

    The manifest (:mod:`vla_edge.export.manifest`) and the policy directory
    (:mod:`vla_edge.archs.policy_dir`) accept exactly the registered names; the runners'
    tokenizer (:mod:`vla_edge.runners.tokenizers`) opens :attr:`encoder` by the name.
    """

    name: str
    """``host.token_ids.prompt`` and a policy directory's ``prompt.format``."""
    tokenizer: str
    """The tokenizer kind it reads (``host.token_ids.tokenizer.kind``): ``wordpiece``,
    ``sentencepiece`` or ``huggingface``."""
    encoder: str
    """``module:attribute`` of ``(tokenizer path, max_len, prompt name) -> encoder`` whose
    ``encode(instruction, state_norm=None)`` gives the ids ``[1, max_len]`` int64 and the
    mask ``[1, max_len]`` bool, and whose ``per_observation`` is :attr:`holds_state`
    (numpy only, no torch; imported when used). The path is the file the manifest names
    (a ``huggingface`` tokenizer: its directory)."""
    holds_state: bool = False
    """The prompt holds the normalised state: its ids change with every observation."""
    policy: bool = True
    """A policy directory may state it (the bundled model's ``instruction`` is not)."""
    implied: bool = False
    """What a manifest of this tokenizer kind without ``host.token_ids.prompt`` means
    (exports written before the field)."""


@dataclass(frozen=True)
class ExportHooks:
    """What the generic exporter (:mod:`vla_edge.export.architecture`) reads of an architecture.

    Every callable is the architecture's own (its folder's modules); the exporter adds the
    programs, the quantisation, the manifest's stages, exporter and spaces.
    """

    stage_names: tuple[str, ...]
    """The stages in run order."""
    stage_modules: Callable[[Any, str, int], tuple[Any, dict[str, Any], dict[str, tuple]]]
    """``(model, backend, seed) -> (stage set, stage name -> module, stage name -> chained
    example inputs)``; the modules are the backend's (ExecuTorch: the XNNPACK rewrite)."""
    executorch_stages: str
    """The module of the ExecuTorch rewrite, recorded in a policy directory export's
    manifest ``exporter``."""
    contract: Callable[..., dict[str, Any]] | None = None
    """``(config, *, joint_names, camera_map, dt_action_s, normalisation, source) -> the
    manifest's fields besides the stages and the exporter``; this and the next four:
    ``None`` for an architecture without policy directories (:attr:`load_checkpoint`)."""
    normalisation: Callable[[Any, Mapping[str, Any], int, Any], dict[str, Any]] | None = None
    """``(config, statistics, n, delta_actions) -> the manifest's normalisation`` with the
    architecture's kind and epsilon."""
    tokenizer_files: Callable[[Path], dict[str, Path]] | None = None
    """``(the user's tokenizer) -> {path in the export: file}``; raises when it is not one."""
    checked_policy: Callable[..., tuple[Any, Any]] | None = None
    """``(policy_dir, flow_steps=None, verify_sha256=True) -> (PolicyDir, config)``: the
    directory checked against the architecture (prompt, image fit, tokenizer), its config
    with ``flow_steps`` applied; no weight read."""
    load_model: Callable[..., tuple[Any, Any]] | None = None
    """``(policy_dir, flow_steps=None, *, stage=None, verify_sha256=True) -> (PolicyDir,
    model with the directory's weights)``; ``stage``: only that stage's weights (only when
    :attr:`low_memory`)."""
    not_delegated_why: Mapping[str, str] = field(default_factory=dict)
    """Why an operator stays outside XNNPACK, by operator (printed after an export)."""
    check_tokenizer: Callable[[Path, Any], None] | None = None
    """``(tokenizer, config)``: refuse one the runners read differently from the reference."""
    hash_tokenizer_files: bool = False
    """Record each copied tokenizer file's sha256 in ``host.token_ids.tokenizer.files``."""
    low_memory: bool = False
    """Whether ``load_model(stage=...)`` reads one stage's weights (``--low-memory``)."""
    load_checkpoint: Callable[..., Any] | None = None
    """``(checkpoint file, flow_steps=None) -> model with its weights``: an architecture
    whose own checkpoints are exported as they are (``vla-edge export --checkpoint``);
    ``None``: only policy directories."""
    untrained_model: Callable[..., Any] | None = None
    """``(model config file, flow_steps=None) -> freshly initialised model`` (seeded), for
    timing other sizes; ``None``: not offered."""
    checkpoint_contract: Callable[[Any, Path | None], dict[str, Any]] | None = None
    """``(model, checkpoint file or None: untrained) -> the manifest's fields besides the
    stages and the exporter`` (its ``source`` included), read from the model itself."""
    checkpoint_tokenizer: Callable[[], dict[str, Path]] | None = None
    """``() -> {path in the export: file}``: the tokenizer a checkpoint's model reads."""
    language_stage: str | None = None
    """A stage that encodes the instruction alone with frozen weights (rate
    ``per_instruction``): it may run on a backend of its own, and its program is reused
    from an earlier export of any weights made at :attr:`language_revision`."""
    language_revision: int = 0
    """Bumped when :attr:`language_stage`'s program changes for the same package versions;
    recorded in the manifest's ``exporter.language_revision``."""
    xnnpack_attention: tuple[type, Callable[[Any], Any]] | None = None
    """``(attention class, rewrite)``: the ExecuTorch export swaps each instance for
    ``rewrite(instance)`` (heads folded for XNNPACK) in its copy of a stage; ``None``:
    :attr:`stage_modules` already gives the rewrite."""


@dataclass(frozen=True)
class BenchHooks:
    """What the benchmarks (``vla-edge bench latency|parity|loop --arch``) read."""

    config: Callable[[str, int], Any]
    """``(size, cameras) -> config``: ``full`` or ``small`` with the first ``cameras`` slots.

    Raises:
        ConfigError: an unknown size or more cameras than slots.
    """
    default_cameras: tuple[int, ...]
    """The camera counts timed by default (``vla-edge bench latency --device``)."""
    depth_fields: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Stage -> the config's blocks whose ``depth`` shrinks that stage (fit search);
    empty: not searched."""
    loop_config: Callable[[str, int], Any] | None = None
    """``(size, cameras) -> config`` as the published layout describes it (``bench loop``)."""
    write_checkpoint: Callable[..., Path] | None = None
    """``(out, model, statistics, size) -> out``: the model in its published layout with
    LeRobot-keyed statistics (``observation.state.mean``, ``action.std``, ...)."""
    import_options: Callable[[str, str, Any], dict[str, Any]] | None = None
    """``(name, size, config) -> ImportOptions fields`` that import what
    :attr:`write_checkpoint` wrote."""
    unread_keys: tuple[str, ...] = ()
    """Keys in the published file that the model reads nothing from."""
    write_tokenizer: Callable[[Path, Any, list[str]], Path] | None = None
    """``(folder, loop config, sentences) -> the tokenizer vla-edge import takes``, for
    ``bench loop``; ``None``: the generic writer of the architecture's tokenizer kind."""


@dataclass(frozen=True)
class SyntaxPatch:
    """Python 3.12-only syntax in one upstream file, rewritten for an older interpreter.

    Each edit replaces text that occurs exactly once; the result means the same to Python
    (PEP 695 type parameters become ``TypeVar`` / ``Generic``, ``type`` statements plain
    aliases). Applied to a copy, never to the user's tree.
    """

    path: str
    """Relative to the source root."""
    edits: tuple[tuple[str, str], ...]
    why: str


@dataclass(frozen=True)
class OurRun:
    """Our side of ``bench upstream``: our import run on the driver's inputs."""

    dumps: dict[str, Any]
    """Intermediate name -> array, under the names the driver dumps."""
    order: list[str]
    """The intermediates in the order the model computes them (``actions`` last)."""
    config: dict[str, Any]
    """Our config of the imported checkpoint (JSON)."""
    reader: str
    """The function that read upstream's checkpoint (``module.function``)."""


@dataclass(frozen=True)
class UpstreamHooks:
    """What ``vla-edge bench upstream --arch`` (:mod:`vla_edge.bench.upstream`) reads.

    The driver is a script in the architecture's folder that runs in a subprocess with
    ``PYTHONPATH=SIDE:SOURCE/<each of source_paths>`` and imports upstream's code, torch,
    numpy and safetensors, never ``vla_edge``; it takes ``--arch --out --seed
    --action-horizon --num-steps --stats`` and writes ``upstream.npz`` and
    ``upstream.json`` (with ``checkpoint``, ``config`` and ``inputs``) in ``--out``.
    """

    name: str
    """Upstream's short name (``openpi``)."""
    repo: str
    """``owner/name`` on GitHub."""
    marker: str
    """A file every checkout of the repository has (relative to the source root)."""
    packages: tuple[str, ...]
    """Installed with ``pip install --target SIDE --no-deps`` (upstream's pinned versions of
    what it imports that this environment lacks or holds at another version)."""
    driver: str
    """The driver script's file name, in the hook module's folder."""
    run_ours: Callable[..., OurRun]
    """``(arch, work, meta, dump, num_steps) -> OurRun``: our import of the checkpoint
    the driver wrote (``meta["checkpoint"]``) run on the dump's inputs."""
    source_paths: tuple[str, ...] = ("src",)
    """Folders of the source root on the driver's ``PYTHONPATH``, after ``SIDE``."""
    overlay: tuple[str, str] | None = None
    """(folder in the source, folder in the side environment) copied over it."""
    syntax_patches: tuple[SyntaxPatch, ...] = ()
    pinned_commit: str | None = None
    """The commit the driver and the syntax patches were checked against."""
    source_manifest: str | None = None
    """A JSON file in the source root naming each file's commit (a tree rebuilt file by
    file), recorded in the bench's JSON; ``None``: none."""


@dataclass(frozen=True)
class Architecture:
    """One supported architecture: its layouts and the functions that read and build it."""

    name: str
    title: str
    layouts: tuple[Layout, ...]
    config: str
    """The config class (``module:Class``) that builds every size."""
    model: str
    """The torch model class."""
    stages: str
    """The function that splits a model into exportable stages."""
    read_checkpoint: str
    """``(path, options) -> Checkpoint``: header-checked, no tensor read (the bundled model:
    its loader)."""
    copy_weights: str | None = None
    """``(checkpoint, dst, metadata)``: the checked tensors under this package's names;
    ``None``: not imported (this package's own checkpoints are exported as they are)."""
    load_weights: str | None = None
    """``(policy_dir, model)``: a policy directory's weights into a model, strictly."""
    detect: str | None = None
    """``(config_json, path) -> name | None`` for layouts without LeRobot's ``type``."""
    lerobot_type: str | None = None
    """LeRobot's ``config.json`` ``type`` for this architecture."""
    options: tuple[str, ...] = ()
    """The :class:`~vla_edge.archs.common.ImportOptions` fields it reads."""
    tokenizer: str = "sentencepiece"
    """``sentencepiece`` (a model file) or ``huggingface`` (a tokenizer directory)."""
    prompts: tuple[PromptFormat, ...] = ()
    """The prompt formats its exports encode (:class:`PromptFormat`)."""
    export: str | None = None
    """Its :class:`ExportHooks` (``module:attribute``); ``None``: not exported."""
    bench: str | None = None
    """Its :class:`BenchHooks`; ``None``: not built at random by the benchmarks."""
    upstream: str | None = None
    """Its :class:`UpstreamHooks` (``module:attribute``, the module
    ``vla_edge.archs.<folder>.upstream``); ``None``: not checked against upstream's code."""
    facts: Callable[[Any], PolicyFacts] | None = field(default=None, repr=False)
    check: Callable[[Any], str | None] | None = field(default=None, repr=False)
    """A contradiction between the config and the name (``None``: consistent)."""

    @property
    def importable(self) -> bool:
        """Whether ``vla-edge import`` turns its checkpoints into a policy directory."""
        return self.copy_weights is not None

    def resolve(self, name: str) -> Any:
        """The object a ``module:attribute`` field names, imported now.

        Raises:
            UnknownArchitectureError: the field is ``None`` (the architecture has none).
        """
        target = getattr(self, name)
        if target is None:
            raise UnknownArchitectureError(f"architecture = {self.name!r}: has no {name}")
        module, _, attribute = target.partition(":")
        return getattr(importlib.import_module(module), attribute)

    def config_class(self) -> Any:
        """The config class."""
        return self.resolve("config")

    def export_hooks(self) -> ExportHooks:
        """Its :class:`ExportHooks` (imports torch).

        Raises:
            UnknownArchitectureError: it registers none.
        """
        return self.resolve("export")

    def bench_hooks(self) -> BenchHooks:
        """Its :class:`BenchHooks` (imports torch).

        Raises:
            UnknownArchitectureError: it registers none.
        """
        return self.resolve("bench")

    def upstream_hooks(self) -> UpstreamHooks:
        """Its :class:`UpstreamHooks` (imports no torch).

        Raises:
            UnknownArchitectureError: it registers none.
        """
        return self.resolve("upstream")

    def line(self) -> str:
        """One line of ``vla-edge import --list``."""
        layouts = "; ".join(f"{layout.name} ({layout.summary})" for layout in self.layouts)
        how = "" if self.importable else " [no import needed: vla-edge export reads it]"
        return f"{self.name:<8} {self.title}: {layouts}{how}"


__all__ = [
    "Architecture",
    "BenchHooks",
    "ExportHooks",
    "Layout",
    "OurRun",
    "PolicyFacts",
    "PromptFormat",
    "SyntaxPatch",
    "UpstreamHooks",
]
