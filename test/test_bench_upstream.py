"""``vla-edge bench upstream``: our import against upstream's own code.

Without upstream sources these tests check the harness's own logic on the CPU (the
comparison, the named errors, the side environment's command lines, the syntax patches,
the architectures' upstream hooks and their drivers' imports; GR00T's hook has its own
file, ``test_bench_upstream_groot.py``). With ``VLA_EDGE_OPENPI_SRC`` and
``VLA_EDGE_OPENPI_SIDE`` (an openpi checkout and its side environment) or
``VLA_EDGE_LEROBOT_SRC`` and ``VLA_EDGE_LEROBOT_SIDE`` (LeRobot at the pinned commit and
its side environment), a tiny run of each architecture must land within the bound.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from vla_edge.archs import registry
from vla_edge.archs.upstream_side import prefix_stage_order as stage_order
from vla_edge.bench import upstream
from vla_edge.bench.upstream import (
    ACTION_BOUND_PCT,
    SideEnvironmentError,
    UpstreamSourceError,
    action_error,
    check_source,
    compare_dumps,
    driver_command,
    driver_env,
    driver_path,
    ensure_side,
    hooks,
    patched_source,
    side_install_commands,
    upstream_architectures,
)
from vla_edge.cli import main
from vla_edge.core.errors import UnknownArchitectureError

OPENPI = hooks("pi0")
LEROBOT = hooks("smolvla")


def dumps(seed: int = 0) -> dict[str, np.ndarray]:
    """A plausible dump: image features, prefix, a two-layer cache, velocity, actions."""
    rng = np.random.default_rng(seed)
    out = {
        "vision_features": rng.standard_normal((2, 16, 8)),
        "prefix_embeddings": rng.standard_normal((1, 40, 8)),
        "prefix_pad": np.ones((1, 40), bool),
        "first_velocity": rng.standard_normal((1, 10, 4)),
        "actions": rng.standard_normal((1, 10, 4)),
    }
    for i in range(2):
        out[f"prefix_keys.{i}"] = rng.standard_normal((1, 1, 40, 4))
        out[f"prefix_values.{i}"] = rng.standard_normal((1, 1, 40, 4))
    return {k: v.astype(np.float32) if v.dtype != bool else v for k, v in out.items()}


# -- the comparison ------------------------------------------------------------------------


def test_identical_dumps_pass_with_no_divergence() -> None:
    ref = dumps()
    result = compare_dumps(dict(ref), ref, stage_order(ref))
    assert result["pass"] is True
    assert result["first_divergence"] is None
    assert result["actions"]["max_pct_of_range"] == 0.0


def test_the_stage_order_follows_the_model() -> None:
    assert stage_order(dumps()) == [
        "vision_features",
        "prefix_embeddings",
        "prefix_pad",
        "prefix_keys.0",
        "prefix_values.0",
        "prefix_keys.1",
        "prefix_values.1",
        "first_velocity",
        "actions",
    ]


def test_the_comparison_names_the_first_diverging_intermediate() -> None:
    ref = dumps()
    ours = {k: v.copy() for k, v in ref.items()}
    # a wrong second layer: its values, and everything computed after them, move
    for name in ("prefix_values.1", "first_velocity", "actions"):
        ours[name] = ours[name] + 0.05
    result = compare_dumps(ours, ref, stage_order(ref))
    assert result["first_divergence"] == "prefix_values.1"
    assert result["stages"]["prefix_keys.1"]["diverges"] is False
    assert result["stages"]["prefix_values.1"]["diverges"] is True
    assert result["pass"] is False


def test_a_tiny_float_difference_is_not_a_divergence() -> None:
    ref = dumps()
    ours = {k: (v * (1 + 1e-7) if v.dtype != bool else v) for k, v in ref.items()}
    result = compare_dumps(ours, ref, stage_order(ref))
    assert result["first_divergence"] is None
    assert result["pass"] is True


def test_a_shape_mismatch_or_a_missing_stage_diverges() -> None:
    ref = dumps()
    ours = dict(ref)
    ours["vision_features"] = ref["vision_features"][:1]
    del ours["prefix_keys.0"]
    result = compare_dumps(ours, ref, stage_order(ref))
    assert result["first_divergence"] == "vision_features"
    assert result["stages"]["vision_features"]["upstream_shape"] == [2, 16, 8]
    assert result["stages"]["prefix_keys.0"]["missing_in"] == "ours"


def test_the_action_error_is_in_percent_of_each_dimension_range() -> None:
    ref = np.zeros((1, 5, 2), np.float32)
    ref[0, :, 0] = np.linspace(0.0, 2.0, 5)  # range 2
    ref[0, :, 1] = np.linspace(-10.0, 10.0, 5)  # range 20
    ours = ref.copy()
    ours[0, 3, 1] += 0.002  # 0.01 % of 20
    err = action_error(ours, ref)
    assert err["worst_dim"] == 1
    assert err["max_pct_of_range"] == pytest.approx(0.01, rel=1e-3)
    assert err["rms_pct_of_range"] == pytest.approx(0.01 / np.sqrt(10), rel=1e-3)


def test_the_bound_is_on_the_actions() -> None:
    ref = dumps()
    ours = dict(ref)
    span = ref["actions"].max(axis=(0, 1)) - ref["actions"].min(axis=(0, 1))
    ours["actions"] = ref["actions"].copy()
    ours["actions"][0, 0, 0] += 3 * ACTION_BOUND_PCT / 100 * span[0]
    result = compare_dumps(ours, ref, stage_order(ref))
    assert result["pass"] is False
    assert result["actions"]["max_pct_of_range"] == pytest.approx(3 * ACTION_BOUND_PCT, rel=1e-3)


# -- sources, side environments, subprocesses ----------------------------------------------


def test_a_missing_source_is_a_named_error(tmp_path) -> None:
    with pytest.raises(UpstreamSourceError, match="--source is required for --arch pi0"):
        check_source("pi0", None)
    args = ["bench", "upstream", "--arch", "smolvla", "--json", str(tmp_path / "u.json")]
    with pytest.raises(UpstreamSourceError, match="huggingface/lerobot"):
        main(args + ["--work-dir", str(tmp_path / "work")])
    assert not (tmp_path / "u.json").exists()


def test_a_source_of_another_repository_is_refused(tmp_path) -> None:
    (tmp_path / "src").mkdir()
    with pytest.raises(UpstreamSourceError, match="not a checkout of Physical-Intelligence/openpi"):
        check_source("pi05", tmp_path)


def test_the_side_environment_command_lines(tmp_path) -> None:
    side, source = tmp_path / "side", tmp_path / "openpi"
    commands = side_install_commands("pi0", side, source, python="PY")
    pip = ["PY", "-m", "pip", "install", "--quiet", "--target", str(side), "--no-deps"]
    assert commands[0] == pip + list(OPENPI.packages)
    assert "transformers==4.53.2" in commands[0]
    replace = source / "src/openpi/models_pytorch/transformers_replace"
    assert commands[1] == ["cp", "-r", f"{replace}/.", str(side / "transformers")]
    assert len(commands) == 2
    lerobot = side_install_commands("smolvla", side, source, python="PY")
    assert lerobot == [pip + list(LEROBOT.packages)]
    version = next(p for p in LEROBOT.packages if p.startswith("transformers=="))
    major_minor = tuple(int(x) for x in version.split("==")[1].split(".")[:2])
    assert (5, 4) <= major_minor < (5, 6)
    assert not any(p.startswith("vla") for p in OPENPI.packages + LEROBOT.packages)


def test_the_driver_runs_with_the_side_environment_first(tmp_path) -> None:
    side, source = tmp_path / "side", tmp_path / "src_root"
    env = driver_env(side, source)
    assert env["PYTHONPATH"] == f"{side}{os.pathsep}{source / 'src'}"
    assert env["HF_HUB_OFFLINE"] == "1"
    command = driver_command("pi05", tmp_path / "out", ["--seed", "3"], python="PY")
    assert command[:2] == ["PY", "-P"]
    assert Path(command[2]) == driver_path("pi05") and Path(command[2]).is_file()
    assert Path(command[2]).parent.name == "pi0"
    assert command[3:] == ["--arch", "pi05", "--out", str(tmp_path / "out"), "--seed", "3"]
    assert Path(driver_command("smolvla", tmp_path, [])[2]).parent.name == "smolvla"


def test_a_stamped_side_environment_is_not_reinstalled(tmp_path, monkeypatch) -> None:
    side = tmp_path / "side"
    with pytest.raises(SideEnvironmentError, match="no finished side environment for openpi"):
        ensure_side("pi0", side, tmp_path, install=False)
    side.mkdir()
    (side / ".vla_edge_side.json").write_text(json.dumps(upstream.side_stamp("pi0")))

    def refuse(*args, **kwargs):
        raise AssertionError("installed again")

    monkeypatch.setattr(upstream.subprocess, "run", refuse)
    assert ensure_side("pi0", side, tmp_path, install=True) == side
    # another upstream's stamp does not count
    with pytest.raises(SideEnvironmentError):
        ensure_side("smolvla", side, tmp_path, install=False)


def test_the_architectures_with_an_upstream_hook_are_the_arch_choices() -> None:
    assert set(upstream_architectures()) == {"pi0", "pi05", "smolvla", "groot", "groot_n15"}
    assert hooks("pi0") is hooks("pi05")  # one openpi hook; the driver takes the name
    parser = argparse.ArgumentParser()
    upstream.add_arguments(parser)
    arch = next(a for a in parser._actions if a.dest == "arch")
    assert tuple(arch.choices) == upstream_architectures()


def test_the_hooks_and_the_arch_choices_import_no_torch() -> None:
    code = (
        "import sys\n"
        "from vla_edge.bench import upstream\n"
        "for name in upstream.upstream_architectures():\n"
        "    upstream.hooks(name)\n"
        "    assert upstream.driver_path(name).is_file()\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_an_architecture_without_an_upstream_hook_is_refused_by_name() -> None:
    with pytest.raises(UnknownArchitectureError, match="'bundled': has no upstream"):
        hooks("bundled")


@pytest.mark.parametrize("arch", upstream_architectures())
def test_the_drivers_import_only_upstream_and_array_libraries(arch) -> None:
    path = driver_path(arch)
    assert path.is_file()
    assert path.parent.name == registry.get(arch).upstream.split(".")[2]  # its own folder
    allowed = {"argparse", "json", "math", "sys", "types", "typing", "pathlib", "__future__"}
    allowed |= {"numpy", "torch", "safetensors", "transformers", "tokenizers", "diffusers"}
    allowed |= {"openpi", "lerobot", "gr00t"}
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            roots.add((node.module or "").split(".")[0])
    assert "vla_edge" not in roots
    assert roots <= allowed, roots - allowed


def lerobot_tree(root: Path) -> Path:
    """The files LeRobot's syntax patches touch, with the constructs they rewrite."""
    for patch in LEROBOT.syntax_patches:
        path = root / patch.path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("\n".join(old for old, _ in patch.edits) + "\n")
    marker = root / LEROBOT.marker
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.write_text("")
    return root


def statement(text: str) -> str:
    """``text`` as complete statements (a body for a ``class`` or ``def`` header)."""
    return text.rstrip("\n") + ("\n    ...\n" if text.rstrip().endswith(":") else "\n")


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="no syntax patch below Python 3.12")
def test_syntax_patches_rewrite_a_copy_and_leave_the_source_alone(tmp_path) -> None:
    source = lerobot_tree(tmp_path / "lerobot")
    before = {p.path: (source / p.path).read_text() for p in LEROBOT.syntax_patches}
    run_source, applied = patched_source("smolvla", source, tmp_path / "work")
    assert run_source == tmp_path / "work" / "source"
    assert [a["file"] for a in applied] == [p.path for p in LEROBOT.syntax_patches]
    assert len(applied) == 3
    for patch in LEROBOT.syntax_patches:
        assert (source / patch.path).read_text() == before[patch.path]
        patched = (run_source / patch.path).read_text()
        for _, new in patch.edits:
            assert new in patched
        # the rewritten constructs parse on this interpreter, the originals do not
        ast.parse("".join(statement(new) for _, new in patch.edits))
        with pytest.raises(SyntaxError):
            ast.parse("".join(statement(old) for old, _ in patch.edits))


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="no syntax patch below Python 3.12")
def test_a_source_without_the_patched_construct_is_refused(tmp_path) -> None:
    source = lerobot_tree(tmp_path / "lerobot")
    (source / LEROBOT.syntax_patches[1].path).write_text("NameOrID = str | int\n")
    with pytest.raises(UpstreamSourceError, match="motors_bus.py does not hold"):
        patched_source("smolvla", source, tmp_path / "work")


# -- against upstream (given its source and side environment) ------------------------------

SOURCES = {
    "pi0": ("VLA_EDGE_OPENPI_SRC", "VLA_EDGE_OPENPI_SIDE"),
    "pi05": ("VLA_EDGE_OPENPI_SRC", "VLA_EDGE_OPENPI_SIDE"),
    "smolvla": ("VLA_EDGE_LEROBOT_SRC", "VLA_EDGE_LEROBOT_SIDE"),
}


@pytest.mark.parametrize("arch", ["pi0", "pi05", "smolvla"])
def test_a_tiny_import_matches_upstream_within_the_bound(arch, tmp_path) -> None:
    src_var, side_var = SOURCES[arch]
    if not (os.environ.get(src_var) and os.environ.get(side_var)):
        pytest.skip(f"set {src_var} and {side_var} to run against upstream's code")
    out = tmp_path / f"upstream_{arch}.json"
    code = main(
        [
            "bench",
            "upstream",
            "--arch",
            arch,
            "--source",
            os.environ[src_var],
            "--side",
            os.environ[side_var],
            "--json",
            str(out),
            "--work-dir",
            str(tmp_path / "work"),
            "--action-horizon",
            "4",
            "--num-steps",
            "3",
        ]
    )
    record = json.loads(out.read_text())
    assert code == 0, record["first_divergence"]
    assert record["pass"] is True
    assert record["actions"]["max_pct_of_range"] <= ACTION_BOUND_PCT
    assert record["first_divergence"] is None
