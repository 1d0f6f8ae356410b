"""``tools/report.py`` (``make docs``): docs/RESULTS.md's tables against their JSONs."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from report_tool import REPORT_PY, load_report

report = load_report()
main = report.main

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    """docs/RESULTS.md and every JSON it cites, copied under ``tmp_path``."""
    paths = {report.RESULTS_MD} | {p for t in report.REGISTRY.values() for p in t.jsons}
    for path in paths:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(REPO_ROOT / path, tmp_path / path)
    return tmp_path


def _block(text: str, name: str) -> str:
    start = text.index(f"<!-- report:{name} -->")
    return text[start : text.index(f"<!-- /report:{name} -->", start)]


def test_check_passes_on_the_repository_as_committed():
    assert report.check(REPO_ROOT) == []


def test_every_table_is_in_results_md_and_every_cited_json_exists():
    text = (REPO_ROOT / report.RESULTS_MD).read_text()
    for table in report.TABLES:
        assert f"<!-- report:{table.name} -->" in text
        for path in table.jsons:
            assert (REPO_ROOT / path).is_file(), path


def test_changed_number_is_named_by_check_and_restored_by_rewrite(repo_copy, capsys):
    results = repo_copy / report.RESULTS_MD
    original = results.read_text()
    bundled = _block(original, "bundled")
    assert "| `pick_red_block_into_bowl` | 48/50 |" in bundled
    results.write_text(
        original.replace(
            bundled,
            bundled.replace(
                "| `pick_red_block_into_bowl` | 48/50 |", "| `pick_red_block_into_bowl` | 47/50 |"
            ),
        )
    )

    assert report.check(repo_copy) == ["docs/RESULTS.md: table 'bundled' differs from its JSON(s)"]
    assert main(["--check", "--root", str(repo_copy)]) == 1
    assert "table 'bundled' differs" in capsys.readouterr().err
    # as `make docs-check` runs it: a script outside the package
    script = subprocess.run(
        [sys.executable, str(REPORT_PY), "--check", "--root", str(repo_copy)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert script.returncode == 1, script.stderr
    assert "docs/RESULTS.md: table 'bundled' differs from its JSON(s)" in script.stderr
    assert "run `make docs`" in script.stderr
    assert results.read_text() != original  # --check rewrites nothing

    assert main(["--root", str(repo_copy)]) == 0
    assert results.read_text() == original
    assert main(["--check", "--root", str(repo_copy)]) == 0


def test_missing_json_is_named(repo_copy, capsys):
    missing = "docs/results/bench_control.json"
    (repo_copy / missing).unlink()

    assert main(["--check", "--root", str(repo_copy)]) == 1
    err = capsys.readouterr().err
    assert f"table 'control': {missing} is missing" in err
    assert "table 'expert'" not in err
    # the rewrite leaves that block as it is and fails
    assert main(["--root", str(repo_copy)]) == 1


def test_results_md_without_a_table_block_fails_the_check(repo_copy):
    results = repo_copy / report.RESULTS_MD
    text = results.read_text()
    results.write_text(text.replace(_block(text, "sim") + "<!-- /report:sim -->", ""))

    assert report.check(repo_copy) == ["docs/RESULTS.md: no <!-- report:sim --> block"]


def test_readme_blocks_are_rewritten_only_where_their_markers_are(repo_copy):
    readme = repo_copy / report.README_MD
    readme.write_text("# vla_edge\n\nNo markers here.\n")
    assert report.rewrite(repo_copy) == []
    assert readme.read_text() == "# vla_edge\n\nNo markers here.\n"

    names = [report.SUMMARY.name, *(t.name for t in report.REFERENCE)]
    readme.write_text(
        "# vla_edge\n\n"
        + "".join(f"<!-- report:{n} -->\nstale\n<!-- /report:{n} -->\n" for n in names)
    )
    problems = report.check(repo_copy)
    assert problems[0] == "README.md: table 'summary' differs from its JSON(s)"
    assert "README.md: table 'params_controller_node' differs from the code" in problems
    assert len(problems) == len(names)
    assert report.rewrite(repo_copy) == []
    text = readme.read_text()
    summary = _block(text, "summary")
    assert "464/600 (77.3 %)" in summary
    assert "26/26 pass" in summary
    assert "[docs/RESULTS.md](docs/RESULTS.md)" in summary
    assert "`max_chunk_age_s`" in _block(text, "params_controller_node")
    assert "`action_chunk`" in _block(text, "ports_inference_node")
    assert "flowchart LR" in _block(text, "graph_picture")
    assert report.check(repo_copy) == []


def test_a_readme_with_markers_must_hold_the_node_reference(repo_copy):
    readme = repo_copy / report.README_MD
    readme.write_text("# vla_edge\n\n<!-- report:summary -->\n<!-- /report:summary -->\n")
    report.rewrite(repo_copy)
    assert "README.md: no <!-- report:graph_picture --> block" in report.check(repo_copy)


def test_unknown_block_name_is_named(repo_copy):
    results = repo_copy / report.RESULTS_MD
    results.write_text(results.read_text() + "\n<!-- report:nope -->\n<!-- /report:nope -->\n")

    problems = report.check(repo_copy)
    assert len(problems) == 1
    assert "unknown table 'nope'" in problems[0]


@pytest.mark.parametrize(
    ("value", "text"), [(8.79e-6, "0.000009"), (0.02136, "0.021"), (2.6134, "2.61")]
)
def test_pct_of_range_is_formatted_as_the_readme_wrote_it(value, text):
    assert report._pct_of_range(value) == text


def test_the_report_is_a_docs_tool_not_a_vla_edge_command(capsys):
    from vla_edge.cli import COMMANDS
    from vla_edge.cli import main as vla_edge

    assert "report" not in COMMANDS
    with pytest.raises(SystemExit) as stop:
        vla_edge(["report", "--check"])
    assert stop.value.code == 2
    assert "invalid choice: 'report'" in capsys.readouterr().err


def test_without_a_results_md_under_the_root_the_tool_says_so(tmp_path, capsys):
    assert main(["--check", "--root", str(tmp_path)]) == 2
    assert f"no docs/RESULTS.md under --root {tmp_path}" in capsys.readouterr().err


def test_nodes_md_holds_each_nodes_full_parameter_table(repo_copy):
    """README.md lists each node's parameters on one line; docs/NODES.md holds the tables."""
    nodes = repo_copy / report.NODES_MD
    names = [t.name for t in report.NODES_REFERENCE]
    nodes.write_text(
        "# Nodes\n\n"
        + "".join(f"<!-- report:{n} -->\nstale\n<!-- /report:{n} -->\n" for n in names)
    )
    assert "docs/NODES.md: table 'params_full_safety_node' differs from the code" in (
        report.check(repo_copy)
    )
    assert report.rewrite(repo_copy) == []
    table = _block(nodes.read_text(), "params_full_controller_node")
    assert "| parameter | type | bounds |" in table and "`max_chunk_age_s`" in table
    assert report.check(repo_copy) == []
