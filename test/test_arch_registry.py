"""Each architecture is one folder under ``vla_edge/archs/`` that registers itself.

The registry (:mod:`vla_edge.archs.registry`) is what the folders' ``arch`` modules
register, found by walking the package; a new folder is found without touching any other
file; no module outside an architecture's folder branches on an architecture's name; the
generic exporter refuses an architecture it has no hooks for, by name; ``vla-edge import
--list`` prints the registry and imports no torch.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import vla_edge
import vla_edge.archs
from vla_edge.archs import registry
from vla_edge.archs.architecture import Architecture
from vla_edge.core.errors import UnknownArchitectureError

PACKAGE_DIR = Path(vla_edge.__file__).parent
BRANCH_EXCEPTIONS: dict[str, str] = {}
"""Modules outside the architecture folders allowed to branch on a name, and why: none
(``bench upstream`` reads each architecture's upstream hook, its drivers live in the
folders)."""

TOY_ARCH = '''
"""A toy architecture: registered by this file alone."""

from vla_edge.archs.architecture import Architecture, Layout

ARCHITECTURES = (
    Architecture(
        name="toy",
        title="a toy architecture",
        layouts=(Layout("toy", "a toy layout"),),
        config="vla_edge.archs.toyarch.config:ToyConfig",
        model="vla_edge.archs.toyarch.model:ToyModel",
        stages="vla_edge.archs.toyarch.stages:build_stages",
        read_checkpoint="vla_edge.archs.toyarch.checkpoint:read_checkpoint",
        copy_weights="vla_edge.archs.toyarch.checkpoint:copy_weights",
        lerobot_type="toy",
    ),
)
'''


def registered_by_folder() -> dict[str, str]:
    """Architecture name -> the folder whose ``arch`` module registers it."""
    found = {}
    for folder, where in registry.folders().items():
        if (where / "arch.py").is_file():
            module = importlib.import_module(f"vla_edge.archs.{folder}.arch")
            for entry in module.ARCHITECTURES:
                found[entry.name] = folder
    return found


def test_the_registry_is_exactly_what_the_folders_register() -> None:
    by_folder = registered_by_folder()
    assert list(registry.ARCHITECTURES) == list(by_folder)  # in folder order
    assert {"bundled", "pi0", "pi05", "smolvla"} <= set(by_folder)
    assert by_folder["pi0"] == by_folder["pi05"] == "pi0"  # one folder, two entries
    assert by_folder["smolvla"] == "smolvla" and by_folder["bundled"] == "bundled"
    for name, arch in registry.ARCHITECTURES.items():
        assert isinstance(arch, Architecture) and arch.name == name
        if arch.importable:  # its functions live in its own folder
            folder = f"vla_edge.archs.{by_folder[name]}."
            for field in ("config", "model", "stages", "read_checkpoint", "copy_weights"):
                assert getattr(arch, field).startswith(folder), (name, field)


def test_every_architecture_folder_registers_itself() -> None:
    missing = [f for f, where in registry.folders().items() if not (where / "arch.py").is_file()]
    assert not missing, (
        f"vla_edge/archs/{missing[0]}/ has no arch.py: an architecture folder registers "
        "itself with ARCHITECTURES = (Architecture(...),) (vla_edge.archs.architecture)"
    )


def test_a_new_folder_registers_itself_without_touching_another_file(tmp_path, monkeypatch) -> None:
    folder = tmp_path / "toyarch"
    folder.mkdir()
    (folder / "__init__.py").write_text('"""A toy architecture folder."""\n')
    (folder / "arch.py").write_text(textwrap.dedent(TOY_ARCH))
    (tmp_path / "notes").mkdir()  # a folder without __init__ is no package: ignored
    monkeypatch.setattr(vla_edge.archs, "__path__", [*vla_edge.archs.__path__, str(tmp_path)])
    try:
        found = registry.discover()
        assert set(found) == set(registry.ARCHITECTURES) | {"toy"}
        monkeypatch.setattr(registry, "ARCHITECTURES", found)
        assert registry.get("toy").title == "a toy architecture"
        assert "toy" in registry.importable()
        assert any(line.startswith("toy ") for line in registry.listing().splitlines())

        from vla_edge.export.architecture import hooks

        # registered, but with no export hooks: the generic exporter says so by name
        with pytest.raises(UnknownArchitectureError, match="'toy' has no policy directory"):
            hooks("toy")
    finally:
        for name in [m for m in sys.modules if m.startswith("vla_edge.archs.toyarch")]:
            del sys.modules[name]


def test_a_folder_that_registers_badly_or_twice_is_refused(tmp_path) -> None:
    root = tmp_path / "extra_archs"
    for name, text in (("one", TOY_ARCH), ("two", TOY_ARCH)):
        (root / name).mkdir(parents=True)
        (root / name / "__init__.py").write_text("")
        (root / name / "arch.py").write_text(textwrap.dedent(text))
    (root / "__init__.py").write_text("")
    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(UnknownArchitectureError, match="'toy' is registered twice"):
            registry.discover("extra_archs", [str(root)])
        (root / "two" / "arch.py").unlink()  # "two" registers nothing now
        (root / "three").mkdir()
        (root / "three" / "__init__.py").write_text("")
        (root / "three" / "arch.py").write_text("ARCHITECTURES = ['toy']\n")
        importlib.invalidate_caches()
        with pytest.raises(UnknownArchitectureError, match="expected a tuple of Architecture"):
            registry.discover("extra_archs", [str(root)])
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m.startswith("extra_archs")]:
            del sys.modules[name]


def branches_on(path: Path, names: set[str]) -> list[tuple[int, str]]:
    """``(line, name)`` of each comparison with, or dict key of, one of ``names``."""
    hits = []
    for node in ast.walk(ast.parse(path.read_text())):
        constants: list[object] = []
        if isinstance(node, ast.Compare):
            for side in (node.left, *node.comparators):
                if isinstance(side, ast.Constant):
                    constants.append(side.value)
                elif isinstance(side, ast.Tuple | ast.List | ast.Set):
                    constants += [e.value for e in side.elts if isinstance(e, ast.Constant)]
        elif isinstance(node, ast.Dict):
            constants += [k.value for k in node.keys if isinstance(k, ast.Constant)]
        hits += [(node.lineno, str(c)) for c in constants if c in names]
    return hits


def test_no_module_outside_an_architecture_folder_branches_on_its_name() -> None:
    """``arch == "smolvla"``, ``in ("pi0", "pi05")``, ``{"pi0": ...}``: only in its folder.

    The names checked are the imported architectures' (``bundled`` is also the shipped
    checkpoint's name, which the runners resolve as a path).
    """
    names = {n for n, a in registry.ARCHITECTURES.items() if a.importable}
    folders = list(registry.folders().values())
    found = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        where = path.relative_to(PACKAGE_DIR.parent).as_posix()
        if any(folder in path.parents for folder in folders) or where in BRANCH_EXCEPTIONS:
            continue
        if hits := branches_on(path, names):
            found[where] = hits
    assert not found, f"branches on an architecture's name outside its folder: {found}"


def test_the_branch_scan_sees_each_kind_of_branch(tmp_path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "def f(arch):\n"
        "    if arch == 'smolvla':\n"
        "        return 1\n"
        "    if arch in ('pi0', 'pi05'):\n"
        "        return 2\n"
        "    return {'pi0': 3}[arch] if arch != 'other' else 'smolvla'\n"
    )
    assert branches_on(source, {"pi0", "pi05", "smolvla"}) == [
        (2, "smolvla"),
        (4, "pi0"),
        (4, "pi05"),
        (6, "pi0"),
    ]


def test_the_generic_exporter_refuses_an_unknown_architecture_by_name() -> None:
    import torch

    from vla_edge.export.architecture import (
        checkpoint_architecture,
        hooks,
        policy_dir_hooks,
        stage_programs_of,
    )

    with pytest.raises(UnknownArchitectureError, match=r"architecture = 'nope' is not registered"):
        hooks("nope")
    # the bundled model exports its own checkpoints through its hooks, not policy directories
    assert checkpoint_architecture() == "bundled"
    assert hooks("bundled").language_stage == "language_encoder"
    with pytest.raises(UnknownArchitectureError, match="'bundled' has no policy directory"):
        policy_dir_hooks("bundled")
    with pytest.raises(UnknownArchitectureError, match=r"model class = 'torch.nn.modules.linear"):
        stage_programs_of(torch.nn.Linear(2, 2))


def test_import_list_prints_each_architecture_without_importing_torch() -> None:
    code = (
        "import sys\n"
        "from vla_edge.cli import main\n"
        "code = main(['import', '--list'])\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
        "sys.exit(code)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert [line.split()[0] for line in lines] == list(registry.ARCHITECTURES)
    text = dict(zip(registry.ARCHITECTURES, lines, strict=True))
    assert "π0.5 (Physical Intelligence, openpi)" in text["pi05"]
    assert "lerobot (pretrained: config.json type smolvla" in text["smolvla"]
    assert "[no import needed: vla-edge export reads it]" in text["bundled"]


TOY_PROMPT_ARCH = '''
"""A toy architecture with its own prompt format: registered by this file alone."""

from vla_edge.archs.architecture import Architecture, Layout, PromptFormat

ARCHITECTURES = (
    Architecture(
        name="toy",
        title="a toy architecture",
        layouts=(Layout("toy", "a toy layout"),),
        config="vla_edge.archs.toyprompt.config:ToyConfig",
        model="vla_edge.archs.toyprompt.model:ToyModel",
        stages="vla_edge.archs.toyprompt.stages:build_stages",
        read_checkpoint="vla_edge.archs.toyprompt.checkpoint:read_checkpoint",
        prompts=(
            PromptFormat(
                "toy_state",
                tokenizer="huggingface",
                encoder="vla_edge.archs.toyprompt.prompt:ToyEncoder",
                holds_state=True,
            ),
        ),
    ),
)
'''

TOY_PROMPT = '''
"""The toy prompt: the instruction's length and the first state entry's sign."""

import numpy as np


class ToyEncoder:
    per_observation = True

    def __init__(self, path, max_len, prompt):
        self.path, self.max_len, self.prompt = path, max_len, prompt

    def encode(self, instruction, state_norm=None):
        ids = np.zeros((1, self.max_len), dtype=np.int64)
        ids[0, 0], ids[0, 1] = len(instruction), int(state_norm[0] > 0)
        return ids, np.ones((1, self.max_len), dtype=bool)
'''


def test_prompt_formats_are_exactly_what_the_architectures_register() -> None:
    from vla_edge.archs import host

    registered = {p.name: p for a in registry.ARCHITECTURES.values() for p in a.prompts}
    assert registry.PROMPT_FORMATS == registered
    assert {"instruction", "pi0", "pi05_state", "smolvla", "groot"} <= set(registered)
    assert host.prompt_formats("sentencepiece") == ("pi0", "pi05_state")
    assert set(host.prompt_formats("huggingface")) == {"smolvla", "groot", "groot_n15"}
    assert host.prompt_formats("wordpiece") == ("instruction",)
    assert "instruction" not in host.prompt_formats(policy=True)  # the bundled model's own
    assert set(host.tokenizer_kinds()) == {"wordpiece", "sentencepiece", "huggingface"}
    assert [p.name for p in registered.values() if p.holds_state] == ["pi05_state"]
    assert host.implied_prompt("wordpiece") == "instruction"
    assert host.implied_prompt("huggingface") == "smolvla"
    assert host.implied_prompt("sentencepiece") is None
    by_folder = registered_by_folder()
    for name, arch in registry.ARCHITECTURES.items():  # encoders live in the folder
        for prompt in arch.prompts:
            assert prompt.encoder.startswith(f"vla_edge.archs.{by_folder[name]}.prompt:")
            module, _, attribute = prompt.encoder.partition(":")
            assert callable(getattr(importlib.import_module(module), attribute)), prompt


def test_a_new_folder_registers_its_prompt_format_for_the_manifest_and_the_runner(
    tmp_path, monkeypatch
) -> None:
    import numpy as np

    from vla_edge.archs import host
    from vla_edge.runners.tokenizers import open_tokenizer

    folder = tmp_path / "toyprompt"
    folder.mkdir()
    (folder / "__init__.py").write_text('"""A toy architecture folder."""\n')
    (folder / "arch.py").write_text(textwrap.dedent(TOY_PROMPT_ARCH))
    (folder / "prompt.py").write_text(textwrap.dedent(TOY_PROMPT))
    monkeypatch.setattr(vla_edge.archs, "__path__", [*vla_edge.archs.__path__, str(tmp_path)])
    try:
        found = registry.discover()
        monkeypatch.setattr(registry, "ARCHITECTURES", found)
        monkeypatch.setattr(registry, "PROMPT_FORMATS", registry.collect_prompts(found))
        assert "toy_state" in host.prompt_formats("huggingface")
        assert host.holds_state("toy_state") and not host.holds_state("smolvla")
        encoder = open_tokenizer("huggingface", tmp_path, 4, "toy_state")
        assert encoder.per_observation
        ids, mask = encoder.encode("pick", np.array([0.5]))
        assert ids.tolist() == [[4, 1, 0, 0]] and mask.all()
    finally:
        for name in [m for m in sys.modules if m.startswith("vla_edge.archs.toyprompt")]:
            del sys.modules[name]


def test_one_prompt_name_registered_with_two_definitions_is_refused() -> None:
    from dataclasses import replace

    pi0 = registry.get("pi0")
    other = replace(
        pi0, name="other", prompts=(replace(pi0.prompts[0], encoder="elsewhere:Encoder"),)
    )
    assert registry.collect_prompts({"pi0": pi0, "pi05": registry.get("pi05")}) == {
        p.name: p for p in pi0.prompts
    }  # the same definitions twice: one format each
    with pytest.raises(UnknownArchitectureError, match="'pi0' is registered twice"):
        registry.collect_prompts({"pi0": pi0, "other": other})


def test_the_runners_tokenizer_refuses_an_unregistered_or_mismatched_prompt(tmp_path) -> None:
    from vla_edge.core.errors import ManifestMismatchError
    from vla_edge.runners.tokenizers import open_tokenizer

    with pytest.raises(ManifestMismatchError, match=r"host.token_ids.prompt = 'nope'"):
        open_tokenizer("huggingface", tmp_path, 8, "nope")
    with pytest.raises(
        ManifestMismatchError, match=r"kind = 'wordpiece', but prompt 'smolvla' reads a huggingface"
    ):
        open_tokenizer("wordpiece", tmp_path, 8, "smolvla")
