"""No measured figure in the prose of docs/RESULTS.md or the README's results section.

The tables are generated from their JSONs (``tools/report.py``, checked by
``test_report.py``); a figure written in the prose around them is checked by
nothing and goes stale when a JSON is measured again. So the prose states
settings, bounds and what the tables show, and quotes no measurement.

The rule, applied to every line outside the generated ``<!-- report:NAME -->``
blocks, fenced code, inline code (commands, options, config values), link
targets and image lines: a line may not hold

* a number with a unit of time, size, rate or share (``ms``, ``s``, ``%``,
  ``×``, ``GB``, ``GiB``, ``MiB``, ``Hz``, ``rad/s``, ``TFLOP``, ``points``, …),
* a decimal number (``0.26``),
* a fraction or success count (``48/50``) or a count ``N of M``,

unless it is a bound: a figure right after ``≤``, ``≥``, ``<`` or ``>`` is a
target or a limit, a definition, not a measurement. Sizes written as
``128×128`` or ``224²`` and plain integers (``50 init states``) are definitions
of the experiment. :data:`ALLOWED` names the few other definitions, each with why.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

UNITS = r"ms|µs|us|s|min|h|%|×|GB|GiB|MB|MiB|kB|KiB|Hz|kHz|rad/s|TFLOP|GFLOP/s|GFLOP|points|pp"
FIGURE = re.compile(
    rf"\d[\d,]*(?:\.\d+)?\s*(?:{UNITS})(?![\w])"  # with a unit ("×" before a digit: a size)
    r"|\b\d+\.\d+\b"  # a decimal
    r"|\b\d+/\d+\b"  # a fraction or a success count
    r"|\b\d[\d,]* of (?:the |its |all )?\d[\d,]*"  # a count "N of M"
)
BOUND = re.compile(r"[≤≥<>]\s*\d[\d,.]*\s*(?:\S+)?")
CODE = re.compile(r"`[^`]*`")
LINK_TARGET = re.compile(r"\]\([^)]*\)")
BLOCK = re.compile(r"<!-- report:([a-z0-9_]+) -->.*?<!-- /report:\1 -->", re.DOTALL)

ALLOWED: dict[str, str] = {
    "deeper than 1 mm": "the definition of a contact-tick",
    "2026-12-02": "the date of a re-run",
    "0.75-wide": "SmolVLA's expert width factor (its architecture)",
    "95 % interval": "the confidence level of an interval",
    "95 % Wilson": "the confidence level of an interval",
    "SmolVLM2-500M": "the name of a model",
}


def prose_figures(text: str) -> list[tuple[int, str, str]]:
    """``(line number, line, figure)`` of every measured figure in the prose of ``text``."""
    text = BLOCK.sub(lambda m: "\n" * m[0].count("\n"), text)
    found: list[tuple[int, str, str]] = []
    fenced = False
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced or line.lstrip().startswith("!["):
            continue
        prose = LINK_TARGET.sub("]", CODE.sub("", line))
        for phrase in ALLOWED:
            prose = prose.replace(phrase, "")
        prose = BOUND.sub("", prose)
        found += [(number, line, m[0]) for m in FIGURE.finditer(prose)]
    return found


def readme_results_section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("\n## Results\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


@pytest.mark.parametrize(
    ("line", "figure"),
    [
        ("8da8w keeps the task at 4.5 ms per chunk.", "4.5 ms"),
        ("It closes 171 of 250 long episodes.", "171 of 250"),
        ("into `lift_green_block` 16/50 against 34/50", "16/50"),
        ("at 0.26 of the fp32 bytes", "0.26"),
        ("LeRobot's blend and 3.04× the broker", "3.04×"),
        ("lose 26–28 points at delay 0", "28 points"),
        ("3.80 GB peak", "3.80 GB"),
    ],
)
def test_a_measured_figure_in_prose_is_found(line, figure):
    assert figure in [f for _, _, f in prose_figures(line)]


@pytest.mark.parametrize(
    "line",
    [
        "Targets: mean success ≥ 70 % with every task ≥ 40 % (acceptance).",
        "two 64×64 cameras, 50 episodes per task, rendered at 128×128",
        "an inference delay (`--delay-ms 200`) with each merge",
        "<!-- report:x -->\n| a | 48/50 | 4.5 ms |\n<!-- /report:x -->",
        "```bash\nvla-edge bench latency --threads 2 --timeout-s 3600\n```",
        "[eval.json](results/eval_1.5.json)",
        "Contact-ticks are contacts deeper than 1 mm.",
    ],
)
def test_settings_bounds_tables_and_commands_are_not_figures(line):
    assert prose_figures(line) == []


def test_results_md_prose_quotes_no_measured_figure():
    found = prose_figures((ROOT / "docs" / "RESULTS.md").read_text())
    assert not found, "figures outside the generated tables of docs/RESULTS.md:\n" + "\n".join(
        f"  line {n}: {figure!r} in {line.strip()!r}" for n, line, figure in found
    )


def test_readme_results_section_quotes_no_measured_figure():
    found = prose_figures(readme_results_section())
    assert not found, "figures outside the generated blocks of README.md's results:\n" + "\n".join(
        f"  {figure!r} in {line.strip()!r}" for _, line, figure in found
    )
