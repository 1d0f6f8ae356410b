"""``vla-edge demo``'s printed report: figures rounded as a person reads them."""

from __future__ import annotations

from vla_edge.demo import summary_lines

METRICS = {
    "task": "pick_red_block_into_bowl",
    "policy": "bundled",
    "threads": 1,
    "success": True,
    "success_time_s": 3.2149,
    "controller_period_jitter_ms": {"p50": 0.123456, "p99": 0.9500000000000001, "max": None},
    "chunk_age_ms": {"p50": 120.0, "p95": 150.33333, "max": 298.39158058166504, "count": 12.0},
    "inference_stage_ms": {"vision_encoder": {"p50": 1.23456}, "fusion": {"p50": None}},
    "buffer_underruns": 0,
}


def test_the_report_rounds_every_figure_and_names_what_was_not_measured() -> None:
    lines = summary_lines(METRICS)
    assert "chunk age p50 / p95:        120.0 / 150.3 ms (max 298.4)" in lines
    assert "controller period jitter:   p50 0.12 ms, p99 0.95 ms" in lines
    assert "inference per-stage p50:    vision_encoder 1.2 ms" in lines
    assert "success:                    True (after 3.2 s)" in lines
    text = "\n".join(lines)
    assert "298.39" not in text and "0.9500000" not in text
    no_age = {**METRICS, "chunk_age_ms": {"p50": None, "p95": None, "max": None}}
    assert "chunk age p50 / p95:        n/a / n/a ms (max n/a)" in summary_lines(no_age)
