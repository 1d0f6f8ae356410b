"""The architectures this package runs: one folder each under ``vla_edge/archs/``, found here.

Every subpackage ``vla_edge/archs/<name>/`` with an ``arch`` module is an architecture
folder; its ``arch.ARCHITECTURES`` (a tuple of
:class:`~vla_edge.archs.architecture.Architecture`) registers it — the π0 folder registers
``pi0`` and ``pi05``. :data:`ARCHITECTURES` is what :func:`discover` finds, in folder order;
nothing else lists them.

``vla-edge import --list`` prints it; ``vla-edge import`` finds a checkpoint's architecture
here (LeRobot's ``config.json`` ``type``, or an architecture's own ``detect``) and calls the
functions the entry names; :mod:`vla_edge.archs.policy_dir` validates a policy directory's
``config`` with the entry's config class and :attr:`Architecture.facts`; the exporter
(:mod:`vla_edge.export.architecture`) and the benchmarks read its
:class:`~vla_edge.archs.architecture.ExportHooks` and
:class:`~vla_edge.archs.architecture.BenchHooks`.

The ``arch`` modules import no torch (their functions are ``"module:attribute"`` strings,
imported when used), so listing or validating never imports torch.

Adding an architecture is one folder ``vla_edge/archs/<name>/`` with a
config, a model, its stages, a ``checkpoint`` module (``read_checkpoint(path, options)
-> Checkpoint``, ``copy_weights(checkpoint, dst, metadata)``, ``load_weights``), its
processor (the host side), its prompt (a ``prompt`` module registered as
:class:`~vla_edge.archs.architecture.PromptFormat` entries: :data:`PROMPT_FORMATS`) and
export hooks, and an ``arch`` module; and its tests. No other
file changes: runners, nodes, the controller and the safety layer read the policy directory
and the export manifest, never this list.
"""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import vla_edge.archs
from vla_edge.archs.architecture import Architecture, Layout, PolicyFacts, PromptFormat
from vla_edge.archs.common import CONFIG_NAME, read_config_json
from vla_edge.core.errors import CheckpointError, UnknownArchitectureError

ARCH_MODULE = "arch"
"""The module of an architecture folder that registers it (``ARCHITECTURES = (...)``)."""


def folders(path: list[str] | None = None) -> dict[str, Path]:
    """The subpackages of :mod:`vla_edge.archs` (or at ``path``): name -> folder, by name."""
    found = pkgutil.iter_modules(list(vla_edge.archs.__path__) if path is None else path)
    return {
        m.name: Path(m.module_finder.path) / m.name  # type: ignore[union-attr]
        for m in sorted(found, key=lambda m: m.name)
        if m.ispkg
    }


def discover(
    package: str = "vla_edge.archs", path: list[str] | None = None
) -> dict[str, Architecture]:
    """Every architecture the folders of ``package`` register, by name, in folder order.

    A folder without an ``arch.py`` registers nothing, and is not imported (its
    ``__init__`` may import torch).

    Raises:
        UnknownArchitectureError: an ``arch`` module without a tuple of
            :class:`Architecture` in ``ARCHITECTURES``, or a name registered twice.
    """
    found: dict[str, Architecture] = {}
    for folder, where in folders(path).items():
        if not (where / f"{ARCH_MODULE}.py").is_file():
            continue
        name = f"{package}.{folder}.{ARCH_MODULE}"
        entries = getattr(importlib.import_module(name), "ARCHITECTURES", None)
        if not isinstance(entries, tuple) or not all(isinstance(e, Architecture) for e in entries):
            raise UnknownArchitectureError(
                f"{name}.ARCHITECTURES = {entries!r}: expected a tuple of Architecture"
            )
        for entry in entries:
            if entry.name in found:
                raise UnknownArchitectureError(
                    f"architecture = {entry.name!r} is registered twice ({name} and another folder)"
                )
            found[entry.name] = entry
    return found


def collect_prompts(architectures: dict[str, Architecture]) -> dict[str, PromptFormat]:
    """Every prompt format the architectures register, by name, in registration order.

    One format may be registered by several entries (π0 and π0.5 share theirs) when each
    registers the same :class:`PromptFormat`.

    Raises:
        UnknownArchitectureError: one name registered with two different definitions.
    """
    found: dict[str, PromptFormat] = {}
    for arch in architectures.values():
        for prompt in arch.prompts:
            if prompt.name in found and found[prompt.name] != prompt:
                raise UnknownArchitectureError(
                    f"prompt format = {prompt.name!r} is registered twice with different "
                    f"definitions ({arch.name!r} and another architecture)"
                )
            found[prompt.name] = prompt
    return found


ARCHITECTURES: dict[str, Architecture] = discover()
"""Every supported architecture, by name (:func:`discover`)."""
PROMPT_FORMATS: dict[str, PromptFormat] = collect_prompts(ARCHITECTURES)
"""Every registered prompt format, by name (:func:`collect_prompts`)."""


def prompt_format(name: str) -> PromptFormat | None:
    """The registered prompt format ``name`` (``None``: no architecture registers it)."""
    return PROMPT_FORMATS.get(name)


def get(name: str) -> Architecture:
    """The entry for ``name``.

    Raises:
        UnknownArchitectureError: not in :data:`ARCHITECTURES`.
    """
    if name not in ARCHITECTURES:
        raise UnknownArchitectureError(
            f"architecture = {name!r} is not one of {tuple(ARCHITECTURES)}"
        )
    return ARCHITECTURES[name]


def importable() -> tuple[str, ...]:
    """The architectures ``vla-edge import`` reads."""
    return tuple(name for name, arch in ARCHITECTURES.items() if arch.importable)


def listing() -> str:
    """``vla-edge import --list``: one line per architecture with its layouts."""
    return "\n".join(arch.line() for arch in ARCHITECTURES.values())


def find(path: str | Path, override: str | None = None) -> Architecture:
    """The architecture of a checkpoint directory (``override`` wins).

    LeRobot's ``config.json`` names it in ``type``; other layouts are recognised by each
    architecture's ``detect``.

    Raises:
        CheckpointError: not a directory, or ``config.json`` absent or unreadable.
        UnknownArchitectureError: an unknown ``type`` or ``override``, an architecture that
            is not imported, or a layout no architecture recognises.
    """
    path = Path(path)
    if override is not None:
        arch = get(override)
        if not arch.importable:
            raise UnknownArchitectureError(
                f"architecture = {override!r}: {arch.title} checkpoints need no import; "
                "pass them to vla-edge export"
            )
        if path.is_dir():
            read_config_json(path)
        return arch
    if path.is_file():
        raise CheckpointError(
            f"{path}: expected a checkpoint directory (a bundled .pt checkpoint needs no "
            "import: pass it to vla-edge export)"
        )
    config_json = read_config_json(path)
    lerobot = {a.lerobot_type: a for a in ARCHITECTURES.values() if a.lerobot_type}
    if "type" in config_json:
        kind = config_json["type"]
        if kind not in lerobot:
            raise UnknownArchitectureError(
                f"{path / CONFIG_NAME}: type = {kind!r} is not an architecture this package "
                f"builds (LeRobot types it reads: {', '.join(lerobot)}; see vla-edge import "
                "--list)"
            )
        return lerobot[kind]
    for arch in ARCHITECTURES.values():
        if arch.detect is not None and (name := arch.resolve("detect")(config_json, path)):
            return get(name)
    raise UnknownArchitectureError(
        f"{path / CONFIG_NAME}: neither a LeRobot config ('type': {' | '.join(lerobot)}) nor "
        "an openpi one (paligemma_variant, action_expert_variant, and an assets/ directory)"
    )


__all__ = [
    "ARCHITECTURES",
    "Architecture",
    "Layout",
    "PROMPT_FORMATS",
    "PolicyFacts",
    "PromptFormat",
    "collect_prompts",
    "discover",
    "find",
    "folders",
    "get",
    "importable",
    "listing",
    "prompt_format",
]
