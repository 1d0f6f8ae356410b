"""``python tools/report.py [--check]``: the tables of ``docs/RESULTS.md``, generated from JSONs.

A docs tool, not part of the product (``make docs`` runs it, ``make docs-check``
and ``test/test_report.py`` run its check). Every table sits between
``<!-- report:NAME -->`` and ``<!-- /report:NAME -->`` and is rendered from the
JSON(s) that :data:`TABLES` lists for ``NAME``, followed by one line naming the
command that wrote them and linking each file. The tool rewrites those blocks in
place, in ``docs/RESULTS.md`` and, if it holds the markers, in ``README.md``
(block ``summary`` and the node reference, generated from the code it documents);
``--check`` rewrites nothing and exits 1 naming each table that differs from its
JSON(s) and each cited JSON that is missing.

Numbers are formatted as the README wrote them: successes as ``48/50``, totals
as ``227/300 (75.7 %)``, milliseconds with one decimal, counts with thousands
separators.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS_MD = "docs/RESULTS.md"
README_MD = "README.md"
NODES_MD = "docs/NODES.md"
BUNDLED_EVAL = "vla_edge/models/bundled/eval.json"
SOAK_RESULT = "soak_bundled_executorch_1h.json"
"""The one-hour soak (`vla-edge soak`), cited by its table and the summary."""
PI0_FULL_RESULT = "bench_latency_pi0_full.json"
PI0_LOOP_RESULT = "bench_loop_pi0_full.json"
GROOT_LOOP_RESULT = "bench_loop_groot_full.json"
"""π0 at full size (`vla-edge bench latency --arch pi0`), cited by its table and the summary."""
MINUS = "\N{MINUS SIGN}"

# Targets of the issues, stated in the README; the JSONs do not record them.
TARGET_MEAN_SUCCESS = 0.70
TARGET_TASK_SUCCESS = 0.40
TARGET_SPEEDUP = 2.0
TARGET_JITTER_P99_MS = 2.0
TARGET_EDGE_RSS_GB = 4.0  # an 8da4w π0 inference node
TARGET_8DA4W_BYTES = 0.35  # of the fp32 weights
TARGET_GRAPH_POINTS = 5.0  # the real graph's success against virtual time's, pooled runs

Json = dict[str, Any]
Render = Callable[[Sequence[Json]], str]

_BLOCK = re.compile(
    r"(?P<open><!-- report:(?P<name>[a-z0-9_]+) -->\n)"
    r"(?P<body>.*?)"
    r"(?P<close><!-- /report:(?P=name) -->)",
    re.DOTALL,
)


def _r(path: str) -> str:
    return f"docs/results/{path}"


@dataclass(frozen=True)
class Table:
    """One generated table: its JSONs (repository-relative), their command and a renderer.

    Attributes:
        name: the block name between the markers.
        jsons: the files ``render`` receives, parsed, in this order.
        command: the command that wrote them (markdown), named under the table.
        render: parsed JSONs -> the markdown table (and a generated note, if any).
        footer: replaces the generated "Written by" line when set.
    """

    name: str
    jsons: tuple[str, ...]
    command: str
    render: Render
    footer: str | None = None


# ---------------------------------------------------------------- formatting


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _count(successes: int, episodes: int) -> str:
    return f"{successes}/{episodes}"


def _total(successes: int, episodes: int) -> str:
    return f"{successes}/{episodes} ({100.0 * successes / episodes:.1f} %)"


def _ms(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _points(delta: float) -> str:
    rounded = round(delta, 1)
    sign = "+" if rounded > 0 else MINUS if rounded < 0 else ""
    return f"{sign}{abs(rounded):.1f} points"


def _pct_of_range(value: float) -> str:
    """Two decimals from 1 %, two significant digits down to 0.001 %, one below."""
    if value >= 1.0:
        return f"{value:.2f}"
    significant = 2 if value >= 1e-3 else 1
    decimals = significant - 1 - int(f"{value:e}".split("e")[1])
    return f"{value:.{decimals}f}"


def _title(task: str) -> str:
    return f"`{task}`"


# ---------------------------------------------------------------- evaluations


def _successes(run: Json) -> tuple[int, int]:
    tasks = run["tasks"].values()
    return sum(t["successes"] for t in tasks), sum(t["episodes"] for t in tasks)


def _limited_pct(run: Json) -> float:
    supervisor = run["safety"]["supervisor"]
    return 100.0 * supervisor["limited_ticks"] / supervisor["ticks"]


def render_expert(runs: Sequence[Json]) -> str:
    """The scripted expert at delay 0 and with a delay, per task."""
    delay0, delayed = runs
    rows = []
    for task in delay0["tasks"]:
        row = [_title(task)]
        for run in runs:
            result = run["tasks"][task]
            row += [
                _count(result["successes"], result["episodes"]),
                _ms(result["mean_completion_time_s"]),
            ]
        rows.append(row)
    totals = [_total(*_successes(run)) for run in runs]
    rows.append(["all", totals[0], "", totals[1], ""])
    contacts = [f"{r['safety']['penetrating_contacts']:,}" for r in runs]
    rows.append(["arm–table contact-ticks > 1 mm", contacts[0], "", contacts[1], ""])
    merge = delayed["settings"]["merge"]
    header = [
        "task",
        "delay 0: success",
        "mean time (s)",
        f"delay {delayed['settings']['delay_ms']:.0f} ms, `{merge}`: success",
        "mean time (s)",
    ]
    return _table(header, rows)


BUNDLED_COLUMNS = (
    "default",
    "`--seed 1`",
    "paraphrases",
    "200 ms `ensemble`",
    "200 ms `prefix`",
    "200 ms `replace`",
    "acceptance command",
)


def render_bundled(runs: Sequence[Json]) -> str:
    """The bundled model per task under each setting, then its totals and safety counters."""
    rows = []
    for task in runs[0]["tasks"]:
        cells = [run["tasks"][task] for run in runs]
        rows.append([_title(task)] + [_count(c["successes"], c["episodes"]) for c in cells])
    rows.append(["all"] + [_total(*_successes(run)) for run in runs])
    rows.append(
        ["arm–table contact-ticks > 1 mm"]
        + [f"{run['safety']['penetrating_contacts']:,}" for run in runs]
    )
    rows.append(
        ["largest velocity change at a chunk boundary (rad/s)"]
        + [f"{run['safety']['max_boundary_velocity_jump']:.2f}" for run in runs]
    )
    rows.append(
        ["ticks the safety limiter limited"] + [f"{_limited_pct(run):.0f} %" for run in runs]
    )
    rows.append(["chunks refused"] + [f"{run['safety']['chunk_rejections']:,}" for run in runs])
    return _table(["task", *BUNDLED_COLUMNS], rows)


# (label, index of the seed-0 run, index of the seed-1 run or None)
BACKEND_ROWS = (
    ("torch (reference)", 0, 1),
    ("ONNX Runtime fp32", 2, 3),
    ("ExecuTorch fp32", 4, 5),
    ("ExecuTorch 8da4w", 6, None),
)


def render_backends(runs: Sequence[Json]) -> str:
    """Closed loop per backend on two seeds; the difference to torch in percentage points."""
    torch_seed0 = _successes(runs[0])
    torch_both = [a + b for a, b in zip(torch_seed0, _successes(runs[1]), strict=True)]
    rows = []
    for label, seed0, seed1 in BACKEND_ROWS:
        s0 = _successes(runs[seed0])
        p50 = [_ms(runs[seed0]["inference_wall_ms"]["p50"])]
        if seed1 is None:
            both = s0
            reference, suffix, seed1_cell = torch_seed0, " (seed 0)", ""
        else:
            s1 = _successes(runs[seed1])
            both = (s0[0] + s1[0], s0[1] + s1[1])
            reference, suffix, seed1_cell = torch_both, "", _count(*s1)
            p50.append(_ms(runs[seed1]["inference_wall_ms"]["p50"]))
        delta = 100.0 * (both[0] / both[1] - reference[0] / reference[1])
        rows.append(
            [
                label,
                _count(*s0),
                seed1_cell,
                _total(*both),
                "–" if seed0 == 0 else _points(delta) + suffix,
                f"{runs[seed0]['safety']['penetrating_contacts']:,}",
                " / ".join(p50) + " ms",
            ]
        )
    header = [
        "backend",
        "seed 0",
        "seed 1",
        "both",
        "against torch",
        "contact-ticks (seed 0)",
        "inference p50 (seed 0 / seed 1)",
    ]
    return _table(header, rows)


# ---------------------------------------------------------------- export and latency


def render_parity(reports: Sequence[Json]) -> str:
    """Each exported program against the torch reference on the same observations and noise."""
    (parity,) = reports
    rows = []
    for name, pair in parity["pairs"].items():
        per_dim = pair["rms_pct_of_range"]
        worst = max(range(len(per_dim)), key=per_dim.__getitem__)
        rows.append(
            [
                name,
                f"{_pct_of_range(pair['rms_pct_of_range_max'])} %",
                parity["dims"][worst],
                f"{pair['max_abs']:.1e}",
                f"{pair['cosine']:.6f}",
            ]
        )
    table = _table(["pair", "max RMS % of range", "worst dimension", "max abs", "cosine"], rows)
    obs = parity["observations"]
    targets = ", ".join(
        f"{quant} ≤ {bound} %" for quant, bound in parity["targets_rms_pct_of_range_max"].items()
    )
    note = (
        f"{obs['count']} observations ({obs['with_prefix']} with an executed prefix) from "
        f"`{obs['source']}`, noise seed {obs['noise_seed']}; targets: {targets} of range."
    )
    return f"{table}\n\n{note}"


def render_upstream(reports: Sequence[Json]) -> str:
    """Our import against upstream's own code: same weights, observation and noise.

    A source rebuilt file by file (its JSON lists ``upstream.source_files``) is marked and
    named in a note under the table.
    """
    rows = []
    rebuilt = []
    for report in reports:
        upstream, actions = report["upstream"], report["actions"]
        stages = report["stages"]
        worst = max(stages, key=lambda name: stages[name]["rel"])
        files = upstream.get("source_files") or {}
        mark = " †" if files else ""
        if files:
            forks = sum(1 for f in files.values() if f.get("repo") not in (None, upstream["repo"]))
            markers = sum(1 for f in files.values() if f.get("repo") is None)
            rebuilt.append(
                f"{report['arch']}: {len(files)} files, {forks} of them from a fork's copy "
                f"(the index holds no {upstream['repo']} version), {markers} empty package "
                f"markers; intermediates {', '.join(f'`{name}`' for name in stages)}"
            )
        rows.append(
            [
                report["arch"],
                f"{upstream['repo']}@{upstream['commit'][:10]}{mark}",
                f"transformers {upstream['transformers']}, torch {upstream['torch']}",
                f"{report['sizes']['parameters'] / 1e6:.1f} M",
                f"{len(stages)} (worst `{worst}`: {stages[worst]['rel']:.1e})",
                f"{actions['max_pct_of_range']:.1e} %",
                f"{actions['rms_pct_of_range']:.1e} %",
                f"≤ {actions['bound_pct']} %",
                report["first_divergence"] or "none",
                "pass" if report["pass"] else "FAIL",
            ]
        )
    header = [
        "arch",
        "upstream",
        "its side environment",
        "parameters",
        "intermediates (worst, of upstream's largest value)",
        "actions max",
        "actions RMS",
        "bound",
        "first divergence",
        "",
    ]
    table = _table(header, rows)
    if not rebuilt:
        return table
    note = (
        "† the source is a tree of the files the model imports, not a checkout (the "
        "repository is too large to fetch whole): each file at the pinned commit where a "
        "public copy holds it there, else the version one holds; the JSON names each file's "
        f"repository and commit (`upstream.source_files`). {'; '.join(rebuilt)}."
    )
    return f"{table}\n\n{note}"


def _model_label(entry: Json) -> str:
    cameras = entry["cameras"]
    height, width = entry["image_size"]
    size = f"{cameras} cam{'s' if cameras > 1 else ''} {height}×{width}"
    return f"bundled, {size}" if entry["trained"] else f"{size}*"


def render_latency(reports: Sequence[Json]) -> str:
    """End to end p50 / p95, per-stage p50, language once and RSS, per model and backend."""
    rows = []
    for report in reports:
        for entry in report["results"]:
            if entry["backend"] == "remote":
                continue
            e2e, stages = entry["end_to_end"], entry["stages"]
            rows.append(
                [
                    _model_label(entry),
                    f"{entry['backend']} {entry['quant']}",
                    f"{e2e['p50_ms']:.1f} / {e2e['p95_ms']:.1f}",
                    _ms(stages["vision_encoder"]["p50_ms"]),
                    _ms(stages["fusion"]["p50_ms"]),
                    _ms(stages["action_head"]["p50_ms"]),
                    _ms(stages["language_encoder"]["p50_ms"]),
                    f"{entry['rss_mb']:.0f}",
                ]
            )
    header = [
        "model",
        "backend",
        "end to end p50 / p95 (ms)",
        "vision",
        "fusion",
        "action head",
        "language (once)",
        "RSS MB",
    ]
    return _table(header, rows)


def _speedups(report: Json) -> list[tuple[float, str, Json]]:
    """(speed-up, fastest backend, the model's torch entry) per model of one latency report."""
    entries = {e["model"]: e for e in report["results"]}
    return [
        (s["speedup"], s["fastest"], entries[s["model"]])
        for s in report["summary"]["speedup_vs_torch"]
    ]


def render_speedup(reports: Sequence[Json]) -> str:
    """The fastest edge backend against torch eager, and ExecuTorch 8da4w / fp32 program bytes."""
    rows = []
    for report in reports:
        labels = {e["model"]: _model_label(e) for e in report["results"]}
        for speedup in report["summary"]["speedup_vs_torch"]:
            model = speedup["model"]
            sizes = report["artifact_bytes"][model]
            fp32, quantised = sizes["executorch_fp32"]["total"], sizes["executorch_8da4w"]["total"]
            ratio = report["summary"]["size_ratio_8da4w_vs_fp32"][model]
            stages = ratio["per_stage"]
            rows.append(
                [
                    labels[model],
                    _ms(speedup["torch_p50_ms"]),
                    f"{speedup['fastest']} {speedup['fastest_p50_ms']:.1f}",
                    f"{speedup['speedup']:.2f}×",
                    f"{quantised / 1e6:.1f} MB / {fp32 / 1e6:.1f} MB = {quantised / fp32:.2f}",
                    f"language {stages['language_encoder']:.2f}, "
                    f"vision {stages['vision_encoder']:.2f}, fusion {stages['fusion']:.2f}, "
                    f"action head {stages['action_head']:.2f}; "
                    f"policy stages {ratio['policy_stages']:.2f}",
                ]
            )
    header = [
        "model",
        "torch p50 ms",
        "fastest p50 ms",
        "speed-up",
        "8da4w / fp32 bytes (ExecuTorch)",
        "per stage",
    ]
    return _table(header, rows)


def _seconds(ms: float) -> str:
    return f"{ms / 1e3:.2f}"


def _export_failures(key: str, model: Json) -> list[str]:
    """One line per stage that did not export: where it ran out, and what does fit."""
    lines = []
    for variant, export in model["exports"].items():
        for stage, result in export["stages"].items():
            if result["ok"]:
                if not export["complete"]:  # a variant not timed: what its stages cost
                    e = result["entry"]
                    lines.append(
                        f"{key} {variant.replace('_', ' ')} `{stage}`: exported, "
                        f"{e['bytes'] / 2**30:.2f} GiB, in {e['export_wall_s']:.0f} s at "
                        f"{e['peak_rss_mb'] / 1024:.1f} GiB peak"
                    )
                continue
            line = (
                f"{key} {variant.replace('_', ' ')} `{stage}`: {result['why'].replace('_', ' ')}"
                f' during "{result["step"]}" at {result["peak_rss_mb"] / 1024:.1f} GiB'
            )
            fit = result.get("largest_that_fits")
            if fit and fit.get("layers"):
                line += (
                    f"; the largest that fits: {fit['layers']} layers of "
                    f"{', '.join(fit['of'])} ({fit['peak_rss_mb'] / 1024:.1f} GiB peak)"
                )
            elif fit:
                line += "; no smaller depth tried fits either"
            lines.append(line)
    return lines


def render_full_size(reports: Sequence[Json]) -> str:
    """Imported architectures at full size, per backend and thread count.

    Each stage's p50, the achieved GFLOP/s against the GEMM peak, peak RSS,
    program bytes and parity; then the stages that did not export.
    """
    rows, notes = [], []
    for report in reports:
        for model in report["models"].values():
            label = f"{report['arch']} {model['cameras']} cam"
            for r in model["results"]:
                if not r["ok"]:
                    notes.append(
                        f"{label} {r['backend']} {r['quant']} {r['threads']} thr: "
                        f'{r["why"].replace("_", " ")} during "{r["step"]}"'
                    )
                    continue
                stages, achieved = r["stages"], r["achieved"]
                variant = f"{r['backend']}_{r['quant']}"
                export = model["exports"].get(variant)
                size = export["bytes"] if export else sum(model["fp32_param_bytes"].values())
                parity = r.get("parity", {}).get("rms_pct_of_range_max")
                rows.append(
                    [
                        label,
                        f"{r['backend']} {r['quant']}",
                        str(r["threads"]),
                        f"{_seconds(r['end_to_end']['p50_ms'])} / "
                        f"{_seconds(r['end_to_end']['p95_ms'])}",
                        " / ".join(
                            _seconds(stages[s]["p50_ms"])
                            for s in ("vision_encoder", "fusion", "action_head")
                        ),
                        f"{achieved['end_to_end']['gflops']:.0f} "
                        f"({100 * achieved['end_to_end']['of_gemm_peak']:.0f} % of "
                        f"{r['gemm_peak_gflops']:.0f})",
                        f"{r['peak_rss_mb'] / 1024:.1f}",
                        f"{size / 2**30:.2f}" + ("" if export else " (weights)"),
                        "–" if parity is None else f"{parity:.3g}",
                    ]
                )
            notes += _export_failures(label, model)
        if not report.get("complete", True):
            notes.append(f"{report['arch']}: the run was stopped before its end")
    header = [
        "model",
        "backend",
        "threads",
        "end to end p50 / p95 (s)",
        "vision / fusion / action head p50 (s)",
        "GFLOP/s (% of the fp32 GEMM peak)",
        "peak RSS (GiB)",
        "bytes (GiB)",
        "parity (% of range, max)",
    ]
    table = _table(header, rows)
    if notes:
        table += "\n\n" + "\n".join(f"* {n}" for n in notes)
    return table


def render_fleet(reports: Sequence[Json]) -> str:
    """The same episodes on local worker processes and as Ray tasks, side by side."""
    rows = []
    for report in reports:
        summary = report["summary"]
        for r in report["rows"]:
            rows.append(
                [
                    r["pool"],
                    str(r["round"]),
                    _count(r["successes"], r["episodes"]),
                    f"{r['wall_s']:.1f}",
                    f"{r['wall_with_start_s']:.1f}" if "wall_with_start_s" in r else "–",
                    f"{r['episode_wall_s_mean']:.2f}",
                ]
            )
        rows.append(
            [
                "**Ray / local**",
                "",
                "same outcomes" if summary["same_outcomes"] else "**outcomes differ**",
                f"{summary['ray_vs_local_wall']:.3f} (goal ≤ {summary['goal_ray_vs_local_max']})",
                f"{summary['ray_with_start_vs_local_wall']:.3f}",
                f"Ray overhead {summary['ray_overhead_per_episode_ms']:.0f} ms per episode; "
                f"an empty task's round trip {summary['empty_task_round_trip_ms']:.1f} ms",
            ]
        )
    header = [
        "pool",
        "round",
        "successes",
        "wall (s)",
        "wall with starting Ray (s)",
        "one episode's wall, mean (s)",
    ]
    return _table(header, rows)


def _scheme_label(row: Json) -> str:
    return {"sync": "openpi sync", "lerobot": "LeRobot async"}.get(
        row["scheme"], f"ours `{row['merge']}`"
    )


def render_side_by_side(reports: Sequence[Json]) -> str:
    """One sweep: success per scheme and delay, completion time and the boundary jump."""
    (sweep,) = reports
    rows = sweep["rows"]
    delays = sorted({r["delay_ms"] for r in rows})
    by_label: dict[str, dict[float, Json]] = {}
    for r in rows:
        by_label.setdefault(_scheme_label(r), {})[r["delay_ms"]] = r
    out = []
    for label, per_delay in by_label.items():
        cells = [
            f"{_count(r['successes'], r['episodes'])} "
            f"[{100 * r['wilson_low']:.0f}, {100 * r['wilson_high']:.0f}] %"
            for r in (per_delay[d] for d in delays)
        ]
        times = " / ".join(_ms(per_delay[d]["mean_completion_s"]) for d in (delays[0], delays[-1]))
        jump = max(r["max_boundary_velocity_jump"] for r in per_delay.values())
        median = max(r["median_boundary_velocity_jump"] for r in per_delay.values())
        limited = max(r["limited_ticks_pct"] for r in per_delay.values())
        out.append([label, *cells, times, f"{median:.2f} / {jump:.2f}", f"{limited:.2f} %"])
    header = [
        "scheme",
        *(f"{d:.0f} ms: successes [95 % Wilson]" for d in delays),
        f"completion at {delays[0]:.0f} / {delays[-1]:.0f} ms (s)",
        "velocity change at a chunk boundary, median / largest, worst delay (rad/s)",
        "ticks the safety node limited, worst delay",
    ]
    return _table(header, out)


def render_long_horizon(runs: Sequence[Json]) -> str:
    """Long-horizon tasks per way of instructing them (the sequencer, the whole instruction)."""
    labels = ["sequencer" if run["settings"]["sequencer"] else "whole instruction" for run in runs]
    rows = []
    for name in runs[0]["tasks"]:
        row = [_title(name)]
        for run in runs:
            t = run["tasks"][name]
            row += [
                _count(t["successes"], t["episodes"]),
                f"{t['mean_subtasks_done']:.2f}",
                _ms(t["mean_completion_time_s"]),
            ]
        rows.append(row)
    totals = ["**all**"]
    for run in runs:
        tasks = run["tasks"].values()
        done = sum(t["mean_subtasks_done"] * t["episodes"] for t in tasks)
        episodes = sum(t["episodes"] for t in tasks)
        totals += [_total(*_successes(run)), f"{done / episodes:.2f}", ""]
    rows.append(totals)
    header = ["task"]
    for label in labels:
        header += [f"{label}: successes", "sub-tasks held at the end (mean)", "completion (s)"]
    return _table(header, rows)


def render_switch(reports: Sequence[Json]) -> str:
    """Episodes whose instruction changes at a set time, judged on the new task."""
    from vla_edge.sim.tasks import get_task, sub_tasks

    (run,) = reports
    rows = []
    for name, t in run["tasks"].items():
        task = get_task(name)
        first, then = sub_tasks(task)
        rows.append(
            [
                f"{_title(first.name)} → {_title(then.name)} at {task.switch_at_s:.0f} s",
                _count(t["successes"], t["episodes"]),
                _ms(t["mean_completion_time_s"]),
                f"{t['max_switch_boundary_velocity_jump']:.2f}",
            ]
        )
    rows.append(["**all**", _total(*_successes(run)), "", ""])
    header = [
        "switch",
        "successes on the new task",
        "completion (s)",
        "largest velocity change at the switch (rad/s)",
    ]
    return _table(header, rows)


def render_loop(reports: Sequence[Json]) -> str:
    """A random-weight imported model in the closed loop: each run's figures and checks."""
    rows = []
    for r in reports:
        m, ev, la = r["model"], r["eval"], r["launch"]
        sup, ctrl = ev["safety"]["supervisor"], ev["safety"]["controller"]
        checks = r["checks"]
        rows.append(
            [
                f"{m['arch']} {m['size']}, {m['cameras']} cam "
                f"({r['artifacts']['parameters'] / 1e6:.3g} M parameters)",
                f"{_LOOP_BACKENDS[m.get('backend', 'onnx')]} {m.get('quant', 'fp32')}: "
                f"{r['artifacts']['export_bytes'] / 2**30:.2f} GiB"
                + (f" in {r['export']['wall_s']:.0f} s" if "export" in r else "")
                + (
                    f", peak {r['export']['peak_rss_mb'] / 1024:.1f} GiB"
                    if "peak_rss_mb" in r.get("export", {})
                    else ""
                ),
                f"{r['inference']['p50_ms']:,.0f}",
                f"{ev['episodes']} ep., delay {ev['delay_ms']:,.0f} ms: "
                f"{ctrl['accepted']} accepted, {ctrl['rejected']} refused "
                f"({ctrl.get('rejected_stale', 0)} stale), {ctrl.get('stops', 0)} watchdog "
                f"stops, {ev['success']} successes",
                f"{sup['rejected']} / {sup['rejected_out_of_limits']} / {sup['estops']}",
                f"{la['duration_s']:.0f} s: {la['chunks_accepted']:.0f} accepted, "
                f"{la['chunks_rejected']:.0f} refused ({la['chunks_rejected_stale']:.0f} stale)"
                + (
                    f", chunk age p50 {la['chunk_age_ms']['p50']:,.0f} ms"
                    if la["chunk_age_ms"]["count"]
                    else ""
                ),
                f"{la['safety']['rejected']:.0f} / {la['safety']['rejected_out_of_limits']:.0f}",
                _node_peak(la["rss_mb"]["inference_node"]),
                "all hold"
                if all(checks.values())
                else "failed: " + ", ".join(name for name, ok in checks.items() if not ok),
            ]
        )
    header = [
        "model",
        "export",
        "inference p50 (ms)",
        "eval (virtual time)",
        "eval safety rejected / out of limits / e-stops",
        "launch sim (real processes)",
        "launch safety rejected / out of limits",
        "inference node resident memory",
        "checks",
    ]
    return _table(header, rows)


_LOOP_BACKENDS = {"onnx": "ONNX", "executorch": "ExecuTorch"}


def _node_peak(rss: Json) -> str:
    """A node's resident memory in the graph: its peak (GiB), or its end where none was kept."""
    if "peak" in rss:
        return f"peak {rss['peak'] / 1024:.2f} GiB"
    return f"{rss['end'] / 1024:.2f} GiB at the end"


def _rate(per_seed: Json, seeds: Sequence[str]) -> float:
    """Success rate of ``per_seed``'s runs over ``seeds`` only."""
    runs = [per_seed[s] for s in seeds]
    return sum(r["successes"] for r in runs) / sum(r["episodes"] for r in runs)


def render_quant(reports: Sequence[Json]) -> str:
    """Quantisation sensitivity: per variant parity, bytes, latency and closed-loop success."""
    rows = []
    for report in reports:
        variants = report["variants"]
        torch_seeds = variants.get("torch", {}).get("success", {}).get("seeds", {})
        for name, v in variants.items():
            if "failed" in v:
                rows.append([f"`{name}`", v.get("description", ""), f"failed: {v['failed']}"])
                rows[-1] += ["–"] * 4
                continue
            parity = v.get("parity")
            worst = ""
            if parity:
                pct = parity["rms_pct_of_range"]
                worst = f" ({parity['dims'][pct.index(max(pct))]})"
            success = v.get("success")
            seeds = (
                ", ".join(
                    f"seed {k}: {s['successes']}/{s['episodes']}"
                    for k, s in success["seeds"].items()
                )
                if success
                else "–"
            )
            rows.append(
                [
                    f"`{name}`",
                    v.get("description", ""),
                    _pct_of_range(parity["rms_pct_of_range_max"]) + worst if parity else "–",
                    f"{v['bytes'] / 1e6:.1f} MB ({v['bytes_vs_fp32']:.2f})"
                    if "bytes" in v
                    else "–",
                    _ms(v.get("latency_ms", {}).get("p50")),
                    (_total(success["successes"], success["episodes"]) + f" — {seeds}")
                    if success
                    else "–",
                    _points(100.0 * (success["rate"] - _rate(torch_seeds, success["seeds"])))
                    if success and set(success["seeds"]) <= set(torch_seeds) and name != "torch"
                    else "–",
                ]
            )
    header = [
        "variant",
        "quantised",
        "parity max (% of range, worst joint)",
        "bytes (vs fp32)",
        "p50 ms per chunk",
        "success",
        "vs torch",
    ]
    return _table(header, rows)


# ---------------------------------------------------------------- control, graph, faults


def render_control(reports: Sequence[Json]) -> str:
    """One controller step and one safety step, wall and CPU time."""
    (bench,) = reports
    rows = []
    for label, key in (
        ("controller step", "controller_step"),
        ("safety step", "safety_step"),
        ("controller + safety", "total_step"),
    ):
        wall, cpu = bench[f"{key}_us"], bench[f"{key}_cpu_us"]
        rows.append([label, f"{wall['p50']:.0f}", f"{wall['p99']:.0f}", f"{cpu['p99']:.0f}"])
    table = _table(["step", "p50 µs", "p99 µs", "p99 µs CPU time"], rows)
    met = "met" if bench["meets_target"] else "not met"
    note = (
        f"{bench['iterations']:,} ticks at {bench['rate_hz']:.0f} Hz, {bench['action_dim']}-D "
        f"action, a chunk every {bench['chunk_period_s']} s merged with `{bench['merge']}`; "
        f"target p99 < {bench['target_total_p99_us']:.0f} µs: {met}."
    )
    return f"{table}\n\n{note}"


def render_graph(reports: Sequence[Json]) -> str:
    """Timing, chunk age and memory of one ``vla-edge launch sim`` run."""
    (run,) = reports
    jitter, age = run["controller_period_jitter_ms"], run["chunk_age_ms"]
    rows = [
        ["policy, duration", f"{run['policy']}, {run['duration_s']:.0f} s"],
        [
            "controller period jitter p50 / p99 / max (ms)",
            f"{jitter['p50']:.2f} / {jitter['p99']:.2f} / {jitter['max']:.1f}",
        ],
        [
            "chunk age p50 / p95 / max (ms)",
            f"{age['p50']:.0f} / {age['p95']:.0f} / {age['max']:.0f} "
            f"(bound {run['max_chunk_age_s'] * 1e3:.0f})",
        ],
        [
            "chunks accepted / rejected",
            f"{run['chunks_accepted']:,.0f} / {run['chunks_rejected']:,.0f}",
        ],
        ["buffer underruns", f"{run['buffer_underruns']}"],
    ]
    rows += [
        [f"RSS `{node}` start → end", f"{rss['start']:.0f} → {rss['end']:.0f} MB"]
        for node, rss in run["rss_mb"].items()
    ]
    return _table(["measure", "value"], rows)


GRAPH_REPEAT = (
    _r("eval_bundled_virtual_10.json"),
    _r("eval_bundled_virtual_10_seed1.json"),
    _r("eval_bundled_virtual_10_seed2.json"),
    *(_r(f"eval_bundled_virtual_10_seed{seed}.json") for seed in range(3, 6)),
    _r("eval_bundled_graph_10.json"),
    _r("eval_bundled_graph_10_run2.json"),
    _r("eval_bundled_graph_10_run3.json"),
)
"""The bundled model (torch) on the same 60 episodes: virtual time per noise seed, then the
graph run after run."""


def _split_runs(reports: Sequence[Json]) -> tuple[list[Json], list[Json]]:
    """Virtual-time runs, then graph runs (``settings.virtual_time``)."""
    virtual = [r for r in reports if r["settings"].get("virtual_time", True)]
    return virtual, [r for r in reports if not r["settings"].get("virtual_time", True)]


def graph_repeat_rows(reports: Sequence[Json]) -> list[Json]:
    """The seeds pooled against the graph runs pooled, per task, the overall row last."""
    from vla_edge.bench.graph_eval import compare, pool

    virtual, graph = _split_runs(reports)
    return compare(pool(virtual), pool(graph))


def render_graph_repeat(reports: Sequence[Json]) -> str:
    """Run-to-run spread: virtual time with several noise seeds against the graph run again.

    ``reports``: the virtual-time runs (one per seed), then the graph runs, all of the same
    episodes. Per task and overall: the seeds pooled and the graph runs pooled, successes /
    episodes (Wilson 95 %), and the graph's rate minus virtual time's in points with its
    95 % interval; then each run's overall successes and, for a graph run, its chunk age.
    """
    from vla_edge.bench.graph_eval import compare, difference_cell, overlap_cell, side_cell

    virtual, graph = _split_runs(reports)
    seeds = ", ".join(str(r["settings"]["seed"]) for r in virtual)
    header = [
        "task",
        f"virtual time, {len(virtual)} noise seeds pooled ({seeds})",
        f"graph, {len(graph)} runs pooled",
        "intervals overlap",
        "graph − virtual time, points (95 %)",
    ]
    rows = [
        [
            row["task"],
            side_cell(row["a"]),
            side_cell(row["b"]),
            overlap_cell(row["overlap"]),
            difference_cell(row["difference"]),
        ]
        for row in graph_repeat_rows(reports)
    ]

    def overall(report: Json) -> str:  # compare's last row: every task added up
        return side_cell(compare(report, report)[-1]["a"])

    def age(report: Json) -> str:  # the graph's chunk age at arrival, p50 / p99
        ages = report["graph"]["chunk_age_ms"]
        return f"{ages['p50']:.0f} / {ages['p99']:.0f}"

    runs = [[f"virtual time, seed {r['settings']['seed']}", overall(r), "–"] for r in virtual]
    runs += [[f"graph, run {i + 1}", overall(r), age(r)] for i, r in enumerate(graph)]
    header_runs = ["run", "overall", "chunk age at arrival p50 / p99 (ms)"]
    return _table(header, rows) + "\n\n" + _table(header_runs, runs)


def render_graph_vs_virtual(reports: Sequence[Json]) -> str:
    """The same episodes in virtual time and through the real graph, per task (Wilson 95 %).

    ``reports``: per backend, its virtual-time run at no delay, its graph run and its
    virtual-time run at a delay near the graph's measured chunk age; torch, then ExecuTorch.
    """
    from vla_edge.bench.graph_eval import compare, side_cell

    backends = (("torch", reports[0:3]), ("ExecuTorch fp32", reports[3:6]))

    header, columns = ["task"], []
    for label, (virtual, graph, delayed) in backends:
        delay = delayed["settings"]["delay_ms"]
        header += [
            f"{label}: virtual time",
            f"{label}: virtual time, {delay:.0f} ms delay",
            f"{label}: graph",
        ]
        columns.append((compare(virtual, graph), compare(delayed, graph)))
    rows = []
    for i, row in enumerate(columns[0][0]):
        line = [row["task"]]
        for at_zero, at_delay in columns:
            line += [
                side_cell(at_zero[i]["a"]),
                side_cell(at_delay[i]["a"]),
                side_cell(at_zero[i]["b"]),
            ]
        rows.append(line)
    figures: list[list[str]] = [
        ["chunk age at arrival p50 / p99 (ms)"],
        ["chunks accepted / refused as stale"],
        ["buffer underruns"],
        ["controller jitter p99, worst window (ms)"],
        ["ticks the safety node limited: graph / virtual time"],
        ["resets that failed (homing)"],
    ]
    for _, (virtual, graph, _delayed) in backends:
        g = graph["graph"]
        age, limited = g["chunk_age_ms"], g["safety_limited_ticks"]
        cells = [
            f"{age['p50']:.0f} / {age['p99']:.0f}",
            f"{g['chunks_accepted']:,.0f} / {g['chunks_rejected_stale']:,.0f}",
            f"{g['buffer_underruns']}",
            _ms(g["controller_jitter_ms_p99_worst_window"], 2),
            f"{100 * limited['share']:.2f} % of {limited['ticks']:,} / "
            f"{100 * virtual['safety']['limited_ticks_share']:.2f} %",
            f"{len(g['reset_failures'])}",
        ]
        for figure, value in zip(figures, cells, strict=True):
            figure.append(value)
    return (
        _table(header, rows)
        + "\n\n"
        + _table(["graph", *(label for label, _ in backends)], figures)
    )


def soak_memory_steps(run: Json) -> dict[str, Json]:
    """Each node's RSS change in and outside the soak's faults, from its samples."""
    from vla_edge.bench import soak_report

    recovery_s = run["settings"]["recovery_s"]
    spans = [(f["start_s"], f["end_s"] + recovery_s) for f in run["faults"]]
    rows = soak_report.sample_rows(run["samples"])
    return soak_report.memory_steps(rows, spans, run["settings"]["warmup_s"])


def _per_hour(pct_per_h: float | None) -> str:
    return "" if pct_per_h is None else f" ({pct_per_h:+.2f} %/h outside)"


def render_soak(reports: Sequence[Json]) -> str:
    """One ``vla-edge soak``: its goals, then what it ran and what it measured."""
    (run,) = reports
    summary, goals = run["summary"], run["goals"]
    verdict = {True: "pass", False: "**fail**", None: "not measured"}
    rows = [
        [f"goal `{name}`", f"{goal['value']} (limit {goal['limit']}): {verdict[goal['passed']]}"]
        for name, goal in goals.items()
    ]
    episodes = summary["episodes"]
    ages = summary["chunk_age_ms"]
    rows += [
        [
            "policy, duration",
            f"`{Path(run['settings']['policy']).name}`, {run['duration_s']:.0f} s",
        ],
        [
            "episodes (successes / finished; with a switch)",
            f"{episodes['count']} ({episodes['successes']} / {episodes['finished']}; "
            f"{episodes['with_switch']})",
        ],
        [
            "episodes without a switch: successes / finished",
            _total(episodes["successes_without_switch"], episodes["finished_without_switch"]),
        ],
        ["faults", ", ".join(f"{k} {n}" for k, n in summary["faults"].items()) or "none"],
        [
            "restarts (unexpected exits)",
            f"{summary['restarts_total']} ({summary['unexpected_exits']})",
        ],
        [
            "buffer underruns in / outside faults",
            f"{summary['buffer_underruns']['in_faults']} / "
            f"{summary['buffer_underruns']['outside_faults']}",
        ],
        [
            "chunk age p50 / p99 / max (ms)",
            f"{ages['p50']:.0f} / {ages['p99']:.0f} / {ages['max']:.0f}",
        ],
    ]
    steps = soak_memory_steps(run)
    rows += [
        [
            f"RSS growth `{node}` after warm-up; the change in / outside faults",
            f"{g['pct_per_h']:+.2f} %/h of {g['mean_rss_mb']:.0f} MiB; "
            f"{steps[node]['in_faults_mb']:+.2f} / {steps[node]['outside_faults_mb']:+.2f} MiB"
            + _per_hour(steps[node]["outside_faults_pct_per_h"]),
        ]
        for node, g in summary["memory_growth"].items()
        if g["pct_per_h"] is not None
    ]
    jitter_steal = [
        (w["controller_jitter_ms"]["p99"], w["host"]["steal_pct_mean"])
        for w in run["windows"]
        if w.get("host", {}).get("steal_pct_mean") is not None
        and w.get("controller_jitter_ms", {}).get("p99") is not None
    ]
    if jitter_steal:
        rows.append(
            [
                "jitter p99 per window (hypervisor steal)",
                ", ".join(f"{j:.2f} ms ({st:.1f} %)" for j, st in jitter_steal),
            ]
        )
    if summary["temperature_c_max"] is not None:
        rows.append(["hottest temperature", f"{summary['temperature_c_max']:.1f} °C"])
    if summary["cpu_freq_mhz"] is not None:
        freq = summary["cpu_freq_mhz"]
        rows.append(
            [
                f"CPU clock min / max ({freq['source']})",
                f"{freq['min']:.0f} / {freq['max']:.0f} MHz",
            ]
        )
    return _table(["measure", "value"], rows)


def _recovered(scenario: Json) -> str:
    if scenario["recovered"] is None:
        return "–"
    if not scenario["recovered"]:
        return "no"
    return _ms(scenario["time_to_recover_ms"], 0)


def render_faults(suites: Sequence[Json]) -> str:
    """Every scenario of the default merge's run; the halt of the ``prefix`` run beside it."""
    default, prefix = suites
    rows = []
    for name, scenario in default["scenarios"].items():
        cameras = [k for k, v in scenario["info"].get("camera_faults", {}).items() if v]
        rows.append(
            [
                f"`{name}`",
                "pass" if scenario["passed"] else "**fail**",
                _ms(scenario["time_to_detect_ms"], 0),
                _ms(scenario["time_to_halt_ms"], 0),
                _ms(prefix["scenarios"][name]["time_to_halt_ms"], 0),
                _recovered(scenario),
                f"{scenario['limit_violations']}",
                ", ".join(cameras) or "–",
            ]
        )
    header = [
        "scenario",
        "result",
        "detect (ms)",
        "halt (ms)",
        "halt, `prefix` (ms)",
        "recovered (ms after the fault ends)",
        "limit violations",
        "cameras named",
    ]
    table = _table(header, rows)
    counts = "; ".join(
        f"{label}: {suite['passed']} passed, {suite['failed']} failed, {suite['skipped']} skipped"
        for label, suite in (("default merge", default), ("`prefix`", prefix))
    )
    return f"{table}\n\n{counts}."


def render_faults_mild(benches: Sequence[Json]) -> str:
    """Task success with and without a mild camera delay."""
    rows = []
    for bench in benches:
        free, delayed = (bench["conditions"][k] for k in bench["conditions"])
        rows.append(
            [
                _title(bench["task"]),
                bench["policy"],
                _count(free["successes"], free["episodes"]),
                _count(delayed["successes"], delayed["episodes"]),
                f"{free['mean_success_time_s']:.1f} / {delayed['mean_success_time_s']:.1f}",
                f"{bench['success_drop_points']:.1f} (bound {bench['max_drop_points']:.0f})",
            ]
        )
    delay = benches[0]["camera_delay_ms"]
    header = [
        "task",
        "policy",
        "fault-free",
        f"camera +{delay:.0f} ms",
        "mean success time (s)",
        "drop (points)",
    ]
    return _table(header, rows)


# ---------------------------------------------------------------- serving, sim


def render_serving(reports: Sequence[Json]) -> str:
    """Round trip of the openpi websocket protocol on localhost."""
    (bench,) = reports
    stages = bench["stages"]
    rows = [
        [
            "round trip p50 / p95 (ms)",
            f"{bench['end_to_end']['p50_ms']:.1f} / {bench['end_to_end']['p95_ms']:.1f}",
        ],
        [
            "server-side inference p50 / p95 (ms)",
            f"{stages['server_infer']['p50_ms']:.1f} / {stages['server_infer']['p95_ms']:.1f}",
        ],
        ["network p50 (ms)", _ms(stages["network"]["p50_ms"])],
        ["throughput (requests/s)", f"{bench['throughput_hz']:.0f}"],
        [
            "requests, bytes each",
            f"{bench['n_requests']}, {bench['request_bytes']:,}",
        ],
        ["images, threads", f"{bench['cameras']}, {bench['threads']}"],
    ]
    return _table(["measure", "value"], rows)


def render_sim(reports: Sequence[Json]) -> str:
    """Env step + render of every camera per 0.1 s policy step, per image size."""
    (bench,) = reports
    rows = []
    for size, total in bench["step_render_ms"].items():
        rows.append(
            [
                f"{size}×{size}",
                f"{total['p50']:.1f} / {total['p90']:.1f}",
                _ms(bench["step_ms"][size]["p50"]),
                _ms(bench["render_ms"][size]["p50"]),
            ]
        )
    cameras = ", ".join(f"`{c}`" for c in bench["settings"]["cameras"])
    header = ["image size", "step + render p50 / p90 (ms)", "physics p50", f"render {cameras} p50"]
    return _table(header, rows)


# ---------------------------------------------------------------- summary


def render_summary(reports: Sequence[Json]) -> str:
    """The headline numbers for README.md."""
    reports, repeat = reports[: -len(GRAPH_REPEAT)], reports[-len(GRAPH_REPEAT) :]
    (
        seed0,
        seed1,
        parity,
        *latencies,
        control,
        graph,
        faults,
        sweep,
        sequenced,
        switch,
        soak,
        pi0,
        pi0_loop,
    ) = reports
    both = [a + b for a, b in zip(_successes(seed0), _successes(seed1), strict=True)]
    worst = min(
        t["successes"] / t["episodes"] for run in (seed0, seed1) for t in run["tasks"].values()
    )
    pairs = parity["pairs"]
    targets = parity["targets_rms_pct_of_range_max"]
    speedups = [s for report in latencies for s in _speedups(report)]
    best = max(speedups, key=lambda s: s[0])
    one_224 = next(s for s in speedups if s[2]["cameras"] == 1 and s[2]["image_size"] == [224, 224])
    violations = sum(s["limit_violations"] for s in faults["scenarios"].values())
    total = faults["passed"] + faults["failed"] + faults["skipped"]
    rows = [
        [
            "bundled model's success, delay 0, seeds 0 and 1",
            f"{_total(*both)}; lowest task on either seed {100 * worst:.0f} %",
            f"≥ {100 * TARGET_MEAN_SUCCESS:.0f} %, every task ≥ {100 * TARGET_TASK_SUCCESS:.0f} %",
        ],
        [
            "export parity fp32, max RMS % of range",
            f"ONNX {_pct_of_range(pairs['onnx_fp32']['rms_pct_of_range_max'])} %, "
            f"ExecuTorch {_pct_of_range(pairs['executorch_fp32']['rms_pct_of_range_max'])} %",
            f"≤ {targets['fp32']} %",
        ],
        [
            "export parity 8da4w, max RMS % of range",
            f"{_pct_of_range(pairs['executorch_8da4w']['rms_pct_of_range_max'])} %",
            f"≤ {targets['8da4w']} %",
        ],
        [
            "best edge speed-up over torch, 1 thread",
            f"{best[0]:.2f}× ({best[1]}, {_model_label(best[2])}); "
            f"one 224×224 camera: {one_224[0]:.2f}×",
            f"≥ {TARGET_SPEEDUP:.0f}× at one 224×224 camera",
        ],
        [
            "controller + safety step p99",
            f"{control['total_step_us']['p99']:.0f} µs",
            f"< {control['target_total_p99_us']:.0f} µs",
        ],
        [
            "ROS 2 graph, controller period jitter p99",
            f"{graph['controller_period_jitter_ms']['p99']:.2f} ms",
            f"≤ {TARGET_JITTER_P99_MS:.0f} ms",
        ],
        [
            "fault injection",
            f"{faults['passed']}/{total} pass, {violations} limit violations",
            "all pass",
        ],
        [
            "execution schemes, delays 0–300 ms: success (median boundary jump)",
            _schemes_summary(sweep),
            "ours ahead, no jump",
        ],
        [
            "long-horizon tasks with the sequencer; instruction switches",
            f"{_total(*_successes(sequenced))}; {_total(*_successes(switch))}",
            "–",
        ],
        [
            f"{soak['duration_s'] / 3600:.0f} h soak: RSS growth, underruns outside faults, "
            "worst window's jitter p99",
            _soak_summary(soak["goals"]),
            f"≤ {soak['goals']['memory_growth_pct_per_h_max']['limit']:g} %/h, 0, "
            f"≤ {soak['goals']['controller_jitter_p99_ms_max']['limit']:g} ms",
        ],
        [
            "π0 full size, 8da4w vs torch, 2 threads: speed-up, peak RSS (as a ROS node), "
            "bytes / fp32",
            _edge_summary(pi0, "pi0_full_1cam", "executorch_8da4w", 2, pi0_loop),
            f"≥ {TARGET_SPEEDUP:.0f}×, < {TARGET_EDGE_RSS_GB:.0f} GB, "
            f"≤ {100 * TARGET_8DA4W_BYTES:.0f} %",
        ],
        [
            "the real graph against virtual time, the same 60 episodes (bundled model): "
            "success, the graph runs and the noise seeds pooled",
            _graph_summary(graph_repeat_rows(repeat)[-1]),
            f"within {TARGET_GRAPH_POINTS:.0f} points",
        ],
    ]
    return _table(["measure", "result", "target"], rows)


def _graph_summary(overall: Json) -> str:
    from vla_edge.bench.graph_eval import difference_cell

    graph, virtual = overall["b"], overall["a"]
    return (
        f"graph {_total(graph['successes'], graph['episodes'])}, virtual time "
        f"{_total(virtual['successes'], virtual['episodes'])}: "
        f"{difference_cell(overall['difference'])} points"
    )


def _edge_summary(report: Json, model: str, variant: str, threads: int, loop: Json) -> str:
    """One variant's row of a full-size run's comparison with eager torch.

    ``loop``: ``vla-edge bench loop`` of that variant, whose inference node's peak
    resident memory in the running graph is given beside the benchmark process's.
    """
    row = next(
        r
        for r in report["summary"]["vs_torch"]
        if (r["model"], r["variant"], r["threads"]) == (model, variant, threads)
    )
    node = loop["launch"]["rss_mb"]["inference_node"]["peak"]
    return (
        f"{row['speed_vs_torch']:.2f}×, {row['peak_rss_mb'] * 2**20 / 1e9:.2f} GB "
        f"({node * 2**20 / 1e9:.2f} GB), {100 * row['bytes_vs_fp32_params']:.0f} %"
    )


def _soak_summary(goals: Json) -> str:
    memory = goals["memory_growth_pct_per_h_max"]
    jitter = goals["controller_jitter_p99_ms_max"]
    return (
        f"{memory['value']:+.2f} %/h (`{memory['node']}`), "
        f"{goals['underruns_outside_faults_max']['value']}, {jitter['value']:.2f} ms"
    )


def _schemes_summary(sweep: Json) -> str:
    """Successes over every delay per scheme (ours: its best merge), and the median jump."""
    totals: dict[str, list[float]] = {}
    for r in sweep["rows"]:
        total = totals.setdefault(_scheme_label(r), [0, 0, 0.0])
        total[0] += r["successes"]
        total[1] += r["episodes"]
        total[2] = max(total[2], r["median_boundary_velocity_jump"])
    ours = max((k for k in totals if k.startswith("ours")), key=lambda k: totals[k][0])
    parts = [
        f"{label} {100 * s / n:.1f} % ({jump:.2f} rad/s)"
        for label, (s, n, jump) in totals.items()
        if label == ours or not label.startswith("ours")
    ]
    return "; ".join(parts)


# ---------------------------------------------------------------- the registry

_EVAL_FLAGS = "--episodes 50 --workers 2 --threads 1 --json OUT"
_EVAL = f"`vla-edge eval --policy bundled {_EVAL_FLAGS}`"
_EXPORT_EVAL = f"`vla-edge eval --policy out/export_s38/B_Q {_EVAL_FLAGS}`"

TABLES: tuple[Table, ...] = (
    Table(
        "expert",
        (_r("eval_expert_delay0.json"), _r("eval_expert_d200_prefix.json")),
        "`vla-edge eval --policy expert --suite tabletop --episodes 50 --image-size 128 "
        "--merge prefix --workers 2 --json OUT`, and with `--delay-ms 200`",
        render_expert,
    ),
    Table(
        "bundled",
        (
            BUNDLED_EVAL,
            _r("eval_bundled_seed1.json"),
            _r("eval_bundled_paraphrase.json"),
            _r("eval_bundled_d200_ensemble.json"),
            _r("eval_bundled_d200_prefix.json"),
            _r("eval_bundled_d200_replace.json"),
            _r("eval_bundled_acceptance_command.json"),
        ),
        f"{_EVAL}, with nothing, `--seed 1`, `--instructions paraphrase` or "
        "`--delay-ms 200 --merge M` added; the acceptance command as the issue writes it is "
        "`vla-edge eval --policy bundled --suite tabletop --episodes 50 --json OUT`",
        render_bundled,
    ),
    Table(
        "backends",
        (
            BUNDLED_EVAL,
            _r("eval_bundled_seed1.json"),
            _r("eval_bundled_onnx_fp32.json"),
            _r("eval_bundled_onnx_fp32_seed1.json"),
            _r("eval_bundled_executorch_fp32.json"),
            _r("eval_bundled_executorch_fp32_seed1.json"),
            _r("eval_bundled_executorch_8da4w.json"),
        ),
        "`vla-edge export --checkpoint bundled --backend B --quant Q --out "
        f"out/export_s38/B_Q`, then {_EXPORT_EVAL} and the same with `--seed 1`; torch: {_EVAL}",
        render_backends,
    ),
    Table(
        "parity",
        (_r("bench_parity.json"),),
        "`vla-edge bench parity --checkpoint bundled --data data/heldout64_s9 --export-root "
        "out/export_s38 --json OUT`, the data from `vla-edge collect --suite tabletop "
        "--episodes-per-task 2 --image-size 64 --out data/heldout64_s9 --seed 9`",
        render_parity,
    ),
    Table(
        "upstream",
        (
            _r("upstream_pi0.json"),
            _r("upstream_pi05.json"),
            _r("upstream_smolvla.json"),
            _r("upstream_groot.json"),
            _r("upstream_groot_n15.json"),
        ),
        "`vla-edge bench upstream --arch A --source SRC --side SIDE --commit C --seed 0 "
        "--action-horizon 10 --num-steps 10 --json OUT` (each JSON holds its exact line)",
        render_upstream,
    ),
    Table(
        "latency",
        (
            _r("bench_latency_1cam224.json"),
            _r("bench_latency_3cam224.json"),
            _r("bench_latency_bundled.json"),
        ),
        "`vla-edge bench latency --cameras 1 --image-size 224 --threads 1 --no-native --json OUT`, "
        "the same with `--cameras 3`, and `vla-edge bench latency --checkpoint bundled --no-grid "
        "--threads 1 --export-root out/export_final --json OUT`",
        render_latency,
    ),
    Table(
        "speedup",
        (
            _r("bench_latency_1cam224.json"),
            _r("bench_latency_3cam224.json"),
            _r("bench_latency_bundled.json"),
        ),
        "the latency runs above",
        render_speedup,
    ),
    Table(
        "full_size",
        (_r(PI0_FULL_RESULT),),
        "`vla-edge bench latency --arch pi0 --size full --cameras 1 --threads 1,2 --backend "
        "torch,executorch --variants executorch_8da4w,executorch_8da8w --no-fit-search --resume "
        "--json OUT` over an earlier run's JSON, whose torch 2-thread and ONNX rows were then "
        "removed and measured again with `--backend torch,onnx --variants onnx_fp32 --resume` "
        "(every timing row is of one afternoon), then `--cameras 3 --backend torch,executorch "
        "--variants executorch_8da4w --resume` and `--backend executorch --variants "
        "executorch_fp32 --resume`",
        render_full_size,
    ),
    Table(
        "full_size_pi05",
        (_r("bench_latency_pi05_full.json"),),
        "`vla-edge bench latency --arch pi05 --size full --cameras 1 --threads 1,2 --backend "
        "torch,onnx,executorch --variants executorch_8da4w,executorch_8da8w,onnx_fp32 "
        "--no-fit-search --json OUT`, then `--cameras 3 --backend torch,executorch --variants "
        "executorch_8da4w --resume`",
        render_full_size,
    ),
    Table(
        "full_size_smolvla",
        (_r("bench_latency_smolvla_full.json"),),
        "`vla-edge bench latency --arch smolvla --size full --cameras 1,2 --threads 1,2 "
        "--json OUT`",
        render_full_size,
    ),
    Table(
        "full_size_groot",
        (_r("bench_latency_groot_full.json"),),
        "`vla-edge bench latency --arch groot --size full --cameras 1 --threads 2 --backend "
        "torch,onnx,executorch --variants onnx_fp32,executorch_8da8w --no-fit-search "
        "--timeout-s 3600 --json OUT`",
        render_full_size,
    ),
    Table(
        "recipes_smolvla",
        (_r("bench_recipes_smolvla_full.json"),),
        "`vla-edge bench latency --arch smolvla --size full --cameras 1 --threads 1,2 --backend "
        "torch,executorch --variants executorch_fp32,executorch_8da4w,executorch_8da8w,"
        "executorch_int8wo,executorch_fp16,executorch_8da4w_head8 --no-fit-search "
        "--timeout-s 3600 --json OUT`",
        render_full_size,
    ),
    Table(
        "recipes_pi0",
        (_r("bench_recipes_pi0_full.json"),),
        "`vla-edge bench latency --arch pi0 --size full --cameras 1 --threads 2 --backend "
        "torch,executorch --variants executorch_8da4w_head8,executorch_int8wo,executorch_fp16 "
        "--no-fit-search --timeout-s 3600 --json OUT`",
        render_full_size,
    ),
    Table(
        "recipes_pi05",
        (_r("bench_recipes_pi05_full.json"),),
        "`vla-edge bench latency --arch pi05 --size full --cameras 1 --threads 2 --backend "
        "torch,executorch --variants executorch_8da4w_head8,executorch_int8wo,executorch_fp16 "
        "--no-fit-search --timeout-s 3600 --json OUT`, then the same with `--resume` after "
        "removing the `8da4w_head8` rows, whose timed runs had shared the CPU with another job "
        "(the torch rows and reference actions kept)",
        render_full_size,
    ),
    Table(
        "loop",
        (_r("bench_loop_smolvla_full.json"), _r(PI0_LOOP_RESULT), _r(GROOT_LOOP_RESULT)),
        "`vla-edge bench loop --arch smolvla --size full --episodes 2 --duration-s 60 "
        "--json OUT`, `vla-edge bench loop --arch pi0 --size full "
        "--backend executorch --quant 8da4w --episodes 2 --duration-s 60 --reuse --json OUT` "
        "and the same with `--arch groot --quant 8da8w` "
        "(`--reuse`: the checkpoint and policy directory of an earlier run with the same seed; "
        "the export made afresh)",
        render_loop,
    ),
    Table(
        "quant",
        (_r("bench_quant_bundled.json"),),
        "`vla-edge bench quant --json OUT --variants torch,fp32,all,recipe:8da8w,stage:action_head,"
        "stage:fusion,stage:vision_encoder,stage:language_encoder,group:action_out,"
        "group:flow_time_embedding,group:first_conv,group:attention,recipe:8da4w_head8,"
        "recipe:int8wo,recipe:fp16 --no-eval-variants recipe:int8wo,recipe:fp16` (its fp16 "
        "export failed, fixed since), then `--resume --variants torch,recipe:8da8w,recipe:fp16 "
        "--no-eval-variants recipe:fp16 --seeds 0,1`, which read the seed-1 evaluations that "
        "`--variants torch,recipe:8da8w --seeds 1` had written into the same work directory "
        "beside the first run; vs torch: on the same seeds",
        render_quant,
    ),
    Table(
        "fleet",
        (_r("bench_fleet.json"),),
        "`vla-edge bench fleet --policy bundled --episodes 10 --workers 2 --rounds 2 --json OUT`",
        render_fleet,
    ),
    Table(
        "side_by_side",
        (_r("sweep_side_by_side.json"),),
        "`vla-edge sweep config/sweeps/side_by_side_20.yaml --out OUT --workers 2`, then "
        "`vla-edge sweep config/sweeps/side_by_side.yaml --out OUT --workers 2 --resume` "
        "(`sweep.json`)",
        render_side_by_side,
    ),
    Table(
        "long_horizon",
        (_r("eval_long_sequencer_bundled.json"), _r("eval_long_bundled.json")),
        "`vla-edge eval --policy bundled --suite tabletop_long --episodes 50 --threads 1 "
        "--workers 2 --json OUT`, with `--sequencer` and without",
        render_long_horizon,
    ),
    Table(
        "switch",
        (_r("eval_switch_bundled.json"),),
        "`vla-edge eval --policy bundled --suite tabletop_switch --episodes 50 --threads 1 "
        "--workers 2 --json OUT`",
        render_switch,
    ),
    Table(
        "control",
        (_r("bench_control.json"),),
        "`vla-edge bench control --json OUT`",
        render_control,
    ),
    Table(
        "graph",
        (_r("launch_sim_expert_600s.json"),),
        "`vla-edge launch sim --duration 600 --json OUT`",
        render_graph,
    ),
    Table(
        "graph_vs_virtual",
        (
            _r("eval_bundled_virtual_10.json"),
            _r("eval_bundled_graph_10.json"),
            _r("eval_bundled_virtual_10_delay60.json"),
            _r("eval_bundled_executorch_virtual_10.json"),
            _r("eval_bundled_executorch_graph_10.json"),
            _r("eval_bundled_executorch_virtual_10_delay120.json"),
        ),
        "`vla-edge eval --policy P --episodes 10 --workers N --json OUT`, the same with "
        "`--graph --threads 1` and with `--delay-ms D` (`P`: `bundled`, or its ExecuTorch fp32 "
        "export by `vla-edge export --checkpoint bundled --backend executorch --quant fp32 "
        "--out EXPORT`; `D`: near the graph's median chunk age)",
        render_graph_vs_virtual,
    ),
    Table(
        "graph_vs_virtual_repeat",
        GRAPH_REPEAT,
        "`vla-edge eval --policy bundled --episodes 10 --workers N --seed S --json OUT` "
        "(`S`: 0 to 5) and `vla-edge eval --policy bundled --episodes 10 --graph --threads 1 "
        "--json OUT` run three times; the pooled comparison is also `vla-edge eval --compare "
        "SEED0.json,SEED1.json,... RUN1.json,RUN2.json,...`",
        render_graph_repeat,
    ),
    Table(
        "graph_vs_virtual_repeat_executorch",
        (
            _r("eval_bundled_executorch_virtual_10.json"),
            _r("eval_bundled_executorch_virtual_10_seed1.json"),
            _r("eval_bundled_executorch_virtual_10_seed2.json"),
            *(_r(f"eval_bundled_executorch_virtual_10_seed{seed}.json") for seed in range(3, 6)),
            _r("eval_bundled_executorch_graph_10.json"),
            _r("eval_bundled_executorch_graph_10_run2.json"),
            _r("eval_bundled_executorch_graph_10_run3.json"),
        ),
        "`vla-edge eval --policy EXPORT --episodes 10 --workers N --seed S --json OUT` (`S`: 0 "
        "to 5; `EXPORT`: the bundled model's ExecuTorch fp32 export, as above) and `vla-edge "
        "eval --policy EXPORT --episodes 10 --graph --threads 1 --json OUT` run three times",
        render_graph_repeat,
    ),
    Table(
        "faults",
        (_r("faults_virtual_ensemble.json"), _r("faults_virtual.json")),
        "`vla-edge faults run --json OUT` (the default merge, `ensemble`) and `vla-edge faults "
        "run --controller-config CONTROLLER_WITH_MERGE_PREFIX --json OUT`",
        render_faults,
    ),
    Table(
        "faults_mild",
        (_r("bench_faults_mild_lift.json"), _r("bench_faults_mild_pick.json")),
        "`vla-edge bench faults --policy expert --task T --episodes 50 --json OUT`",
        render_faults_mild,
    ),
    Table(
        "soak",
        (_r(SOAK_RESULT),),
        "`vla-edge soak --duration 3600 --policy EXPORT --out OUT` (`EXPORT`: the bundled "
        "model's ExecuTorch fp32 export that `vla-edge soak` makes when no policy is given; "
        "nothing else ran)",
        render_soak,
    ),
    Table(
        "soak_20m",
        (_r("soak_bundled_executorch_20m.json"),),
        "`vla-edge soak --duration 1200 --policy EXPORT --out OUT` (`EXPORT`: the bundled "
        "model's ExecuTorch fp32 export, as above; nothing else ran)",
        render_soak,
    ),
    Table(
        "serving",
        (_r("bench_remote_bundled.json"),),
        "`bench_remote` in `vla_edge/bench/remote_latency.py` (200 requests, serving the "
        "bundled model of the time)",
        render_serving,
    ),
    Table(
        "sim",
        (_r("bench_sim.json"),),
        "`vla-edge bench sim --json OUT`",
        render_sim,
    ),
)

SUMMARY = Table(
    "summary",
    (
        BUNDLED_EVAL,
        _r("eval_bundled_seed1.json"),
        _r("bench_parity.json"),
        _r("bench_latency_1cam224.json"),
        _r("bench_latency_3cam224.json"),
        _r("bench_latency_bundled.json"),
        _r("bench_control.json"),
        _r("launch_sim_expert_600s.json"),
        _r("faults_virtual_ensemble.json"),
        _r("sweep_side_by_side.json"),
        _r("eval_long_sequencer_bundled.json"),
        _r("eval_switch_bundled.json"),
        _r(SOAK_RESULT),
        _r(PI0_FULL_RESULT),
        _r(PI0_LOOP_RESULT),
        *GRAPH_REPEAT,
    ),
    "`python tools/report.py`",
    render_summary,
    footer=(
        "Generated by `python tools/report.py` from the JSONs cited in "
        "[docs/RESULTS.md](docs/RESULTS.md), where each table names its command."
    ),
)


def _reference(kind: str, node: str = "") -> Render:
    """A renderer of the README's node reference (:mod:`vla_edge.nodes.reference`)."""

    def render(_: Sequence[Json]) -> str:
        from vla_edge.nodes import reference

        if kind == "graph":
            return reference.graph_mermaid()
        if kind == "ports":
            return reference.ports_table(node)
        if kind == "params":
            return reference.parameters_brief(node)
        return reference.parameters_table(node)

    return render


REFERENCE_NODES = ("sim_node", "inference_node", "controller_node", "safety_node")
# The README's node reference, generated from the code it documents (no JSON; no footer).
REFERENCE: tuple[Table, ...] = (
    Table("graph_picture", (), "", _reference("graph"), footer=""),
    *(Table(f"ports_{n}", (), "", _reference("ports", n), footer="") for n in REFERENCE_NODES),
    *(
        Table(f"params_{n}", (), "", _reference("params", n), footer="")
        for n in (*REFERENCE_NODES, "fault_injector_node")
    ),
)

# docs/NODES.md's full parameter tables (README.md holds one line per node).
NODES_REFERENCE: tuple[Table, ...] = tuple(
    Table(f"params_full_{n}", (), "", _reference("params_full", n), footer="")
    for n in (*REFERENCE_NODES, "fault_injector_node")
)

REGISTRY: dict[str, Table] = {t.name: t for t in (*TABLES, SUMMARY, *REFERENCE, *NODES_REFERENCE)}


# ---------------------------------------------------------------- rewriting


def render_block(table: Table, root: Path, document: str) -> str:
    """The text between ``table``'s markers in ``document`` (a repository-relative path).

    Raises:
        FileNotFoundError: a JSON of ``table`` is missing under ``root``.
    """
    reports = [json.loads((root / path).read_text()) for path in table.jsons]
    footer = table.footer
    if footer is None:
        base = Path(document).parent
        links = ", ".join(
            f"[{Path(path).name}]({Path(os.path.relpath(path, base)).as_posix()})"
            for path in table.jsons
        )
        footer = f"Written by {table.command}: {links}."
    if not footer:
        return f"{table.render(reports)}\n"
    return f"{table.render(reports)}\n\n{footer}\n"


def _missing(table: Table, root: Path) -> list[str]:
    return [path for path in table.jsons if not (root / path).is_file()]


def update(root: Path, document: str, required: Sequence[str] = ()) -> tuple[str, str, list[str]]:
    """Render every block of ``document``.

    Args:
        root: the repository root the JSON paths are relative to.
        document: the markdown file, relative to ``root``.
        required: table names the document must hold.

    Returns:
        The document's text, its text with every block rendered, and the problems
        (a stale table, a missing JSON or block, an unknown block name), one a line.
    """
    text = (root / document).read_text()
    problems: list[str] = []
    found: list[str] = []

    def replace(match: re.Match[str]) -> str:
        name = match["name"]
        found.append(name)
        table = REGISTRY.get(name)
        if table is None:
            problems.append(f"{document}: unknown table '{name}' (known: {', '.join(REGISTRY)})")
            return match[0]
        missing = _missing(table, root)
        if missing:
            problems.extend(f"{document}: table '{name}': {path} is missing" for path in missing)
            return match[0]
        try:
            body = render_block(table, root, document)
        except (ValueError, KeyError, TypeError) as exc:
            problems.append(f"{document}: table '{name}' cannot be rendered: {exc!r}")
            return match[0]
        if body != match["body"]:
            source = "its JSON(s)" if table.jsons else "the code"
            problems.append(f"{document}: table '{name}' differs from {source}")
        return match["open"] + body + match["close"]

    new_text = _BLOCK.sub(replace, text)
    problems += [
        f"{document}: no <!-- report:{name} --> block" for name in required if name not in found
    ]
    return text, new_text, problems


def documents(root: Path) -> list[tuple[str, list[str]]]:
    """The documents to render and the tables each must hold (README.md only with markers)."""
    docs = [(RESULTS_MD, [t.name for t in TABLES])]
    readme = root / README_MD
    if readme.is_file() and "<!-- report:" in readme.read_text():
        docs.append((README_MD, [SUMMARY.name, *(t.name for t in REFERENCE)]))
    nodes = root / NODES_MD
    if nodes.is_file() and "<!-- report:" in nodes.read_text():
        docs.append((NODES_MD, [t.name for t in NODES_REFERENCE]))
    return docs


def check(root: Path = REPO_ROOT) -> list[str]:
    """Every table that differs from its JSON(s), every missing JSON or block; rewrites nothing."""
    problems: list[str] = []
    for document, required in documents(root):
        problems += update(root, document, required)[2]
    return problems


def rewrite(root: Path = REPO_ROOT) -> list[str]:
    """Rewrite every block whose JSONs are all there; returns what could not be rendered."""
    problems: list[str] = []
    for document, required in documents(root):
        old, new, found = update(root, document, required)
        if new != old:
            (root / document).write_text(new)
            print(f"rewrote {document}")
        problems += [p for p in found if "differs from" not in p]
    return problems


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``tools/report.py``."""
    parser.add_argument(
        "--check",
        action="store_true",
        help="rewrite nothing; exit 1 naming each table that differs from its JSON(s)",
    )
    parser.add_argument(
        "--root", type=Path, default=REPO_ROOT, help="repository root (default: this checkout)"
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python tools/report.py [--check] [--root DIR]``; exit 1 on a problem, 2 without a root."""
    parser = argparse.ArgumentParser(
        prog="tools/report.py",
        description="Rewrite (or --check) the generated tables of docs/RESULTS.md and README.md "
        "from their JSONs and the code.",
    )
    add_arguments(parser)
    args = parser.parse_args(argv)
    if not (args.root / RESULTS_MD).is_file():
        print(f"tools/report.py: no {RESULTS_MD} under --root {args.root}", file=sys.stderr)
        return 2
    problems = check(args.root) if args.check else rewrite(args.root)
    for problem in problems:
        print(problem, file=sys.stderr)
    if args.check and problems:
        print("run `make docs` to rewrite the tables from their JSONs", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
