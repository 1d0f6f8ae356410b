"""``vla-edge bench upstream --arch groot|groot_n15``: GR00T against Isaac-GR00T's own code.

Without upstream's source these tests check what the harness reads of GR00T's hook (the
marker, the side packages, ``PYTHONPATH=SIDE:SOURCE``, the per-file manifest of a rebuilt
tree). With ``VLA_EDGE_GROOT_SRC`` (an Isaac-GR00T tree holding
``gr00t/model/gr00t_n1d7/gr00t_n1d7.py``, a checkout or one rebuilt file by file with its
``SOURCES.json``) and ``VLA_EDGE_GROOT_SIDE`` (its side environment, made when missing),
a tiny run must land within the bound, every intermediate agreeing; the same for N1.5 with
``VLA_EDGE_GROOT_N15_SRC`` (an N1.5-era tree holding ``gr00t/model/gr00t_n1.py``) and
``VLA_EDGE_GROOT_N15_SIDE``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from vla_edge.bench.upstream import (
    ACTION_BOUND_PCT,
    UpstreamSourceError,
    check_source,
    driver_env,
    hooks,
    side_install_commands,
    source_commit,
    source_manifest,
    source_pythonpath,
)
from vla_edge.cli import main

MARKER = "gr00t/model/gr00t_n1d7/gr00t_n1d7.py"
N15_MARKER = "gr00t/model/gr00t_n1.py"


def test_the_groot_hook_names_isaac_groot_and_its_pins() -> None:
    hook = hooks("groot")
    assert hook.repo == "NVIDIA/Isaac-GR00T"
    assert hook.marker == MARKER
    assert "transformers==4.57.6" in hook.packages
    assert any(p.startswith("diffusers==") for p in hook.packages)
    assert not any(p.startswith(("vla", "flash")) for p in hook.packages)
    assert hook.overlay is None and hook.syntax_patches == ()


def test_the_n15_hook_names_the_n15_tree_and_its_pins() -> None:
    hook = hooks("groot_n15")
    assert hook.marker == N15_MARKER
    assert "transformers==4.51.3" in hook.packages
    assert {"diffusers==0.30.2", "peft==0.17.0"} <= set(hook.packages)
    assert not any(p.startswith(("vla", "flash", "timm")) for p in hook.packages)
    assert hook.source_paths == (".",) and hook.source_manifest == "SOURCES.json"
    assert hook.pinned_commit is not None and len(hook.pinned_commit) == 40


def test_a_source_without_the_n15_model_is_refused(tmp_path) -> None:
    (tmp_path / "gr00t" / "model" / "gr00t_n1d7").mkdir(parents=True)
    (tmp_path / MARKER).write_text("")
    with pytest.raises(UpstreamSourceError, match="not a checkout of NVIDIA/Isaac-GR00T"):
        check_source("groot_n15", tmp_path)


def test_a_source_without_the_n17_model_is_refused(tmp_path) -> None:
    (tmp_path / "gr00t" / "model").mkdir(parents=True)
    with pytest.raises(UpstreamSourceError, match="not a checkout of NVIDIA/Isaac-GR00T"):
        check_source("groot", tmp_path)
    with pytest.raises(UpstreamSourceError, match="--source is required for --arch groot"):
        check_source("groot", None)


def test_the_groot_driver_sees_the_source_root_after_the_side(tmp_path) -> None:
    side, source = tmp_path / "side", tmp_path / "isaac"
    env = driver_env(side, source, hooks("groot").source_paths)
    assert env["PYTHONPATH"] == f"{side}{os.pathsep}{source}"
    assert source_pythonpath(hooks("groot").source_paths) == f"SIDE{os.pathsep}SOURCE"
    assert source_pythonpath(hooks("pi0").source_paths) == f"SIDE{os.pathsep}SOURCE/src"
    pip = side_install_commands("groot", side, source, python="PY")
    assert pip == [
        ["PY", "-m", "pip", "install", "--quiet", "--target", str(side), "--no-deps"]
        + list(hooks("groot").packages)
    ]


def test_a_rebuilt_tree_records_each_file_and_its_pin(tmp_path) -> None:
    manifest = {"pin": "a" * 40, "files": {MARKER: {"commit": "a" * 40}}}
    (tmp_path / "SOURCES.json").write_text(json.dumps(manifest))
    assert source_manifest("groot", tmp_path) == manifest
    assert source_commit(tmp_path, None, manifest) == "a" * 40
    assert source_commit(tmp_path, "b" * 40, manifest) == "b" * 40
    assert source_manifest("groot", tmp_path / "elsewhere") is None
    # openpi's hook reads no manifest, whatever the folder holds
    assert source_manifest("pi0", tmp_path) is None


@pytest.mark.parametrize(
    ("arch", "marker", "env"),
    [("groot", MARKER, "VLA_EDGE_GROOT"), ("groot_n15", N15_MARKER, "VLA_EDGE_GROOT_N15")],
)
def test_a_tiny_groot_matches_isaac_groot_within_the_bound(tmp_path, arch, marker, env) -> None:
    src, side = os.environ.get(f"{env}_SRC"), os.environ.get(f"{env}_SIDE")
    if not (src and side):
        pytest.skip(f"set {env}_SRC and {env}_SIDE to run against upstream")
    out = tmp_path / f"upstream_{arch}.json"
    code = main(
        [
            "bench",
            "upstream",
            "--arch",
            arch,
            "--source",
            src,
            "--side",
            side,
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
    assert list(record["stages"]) == [
        "backbone_features",
        "vl_tokens",
        "state_tokens",
        "first_velocity",
        "actions",
    ]
    assert record["upstream"]["pythonpath"] == f"SIDE{os.pathsep}SOURCE"
    if (Path(src) / "SOURCES.json").is_file():
        assert marker in record["upstream"]["source_files"]
