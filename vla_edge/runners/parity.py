"""An export's chunks against its eager torch stages', on the same observations and noise.

``vla-edge export --max-parity-pct P`` checks every export it writes with
:func:`gate_export` (:func:`export_parity`, then :func:`check_parity`): the export's
own runner (:class:`ExportedRunner`) and the same runner with each stage program
replaced by the eager torch module it was made from (:class:`EagerStage`) get the
same observations and the same explicit noise, so the only difference is the
programs (lowering and quantisation). The figure per joint is the RMS over every
chunk and step of (export - eager), in percent of that joint's range over the eager
chunks, as ``vla-edge bench parity`` reports it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vla_edge.core.errors import ParityGateError
from vla_edge.core.types import Observation
from vla_edge.export.manifest import MANIFEST_NAME, load_manifest, write_manifest

REFUSED_MANIFEST_NAME = "manifest.refused.json"
"""What a refused export's manifest is renamed to: no runner loads the directory."""
MIN_RANGE = 1e-6
"""A joint whose eager chunks span less than this (rad) is compared against this span."""


def compare_chunks(reference: np.ndarray, candidate: np.ndarray) -> dict[str, Any]:
    """Per-dimension error of chunks ``[N, H, D]`` against ``reference``'s.

    Returns:
        ``{"rms_pct_of_range": [D], "rms_pct_of_range_max", "rms": [D], "range": [D],
        "max_abs", "max_abs_per_dim": [D], "non_finite"}``: ``non_finite`` counts the
        candidate's NaN and infinite values, whose dimensions read NaN or inf.
    """
    err = (candidate - reference).reshape(-1, reference.shape[-1])
    flat = reference.reshape(-1, reference.shape[-1])
    span = np.maximum(flat.max(axis=0) - flat.min(axis=0), MIN_RANGE)
    rms = np.sqrt(np.mean(err**2, axis=0))
    pct = 100.0 * rms / span
    return {
        "rms_pct_of_range": [float(v) for v in pct],
        "rms_pct_of_range_max": float(pct.max()),
        "rms": [float(v) for v in rms],
        "range": [float(v) for v in span],
        "max_abs": float(np.max(np.abs(err))),
        "max_abs_per_dim": [float(v) for v in np.max(np.abs(err), axis=0)],
        "non_finite": int(np.size(candidate) - np.count_nonzero(np.isfinite(candidate))),
    }


class EagerStage:
    """A torch stage module behind the runner's program seam (numpy in, numpy out)."""

    def __init__(self, module: Any, declared: Any) -> None:
        """``declared``: the manifest's :class:`StageSpec` of the stage (its tensors)."""
        self.module = module.eval()
        self.declared = declared

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """The module's outputs for ``inputs``, in the declared order."""
        import torch

        with torch.no_grad():
            out = self.module(*[torch.from_numpy(np.ascontiguousarray(x)) for x in inputs])
        outs = [out] if isinstance(out, torch.Tensor) else list(out)
        return [o.detach().numpy() for o in outs]

    def io(self) -> tuple[list[tuple[tuple[int, ...], str]], list[tuple[tuple[int, ...], str]]]:
        """The declared tensors (an eager module takes what the manifest says)."""
        return (
            [(tuple(t.shape), t.dtype) for t in self.declared.inputs],
            [(tuple(t.shape), t.dtype) for t in self.declared.outputs],
        )


def export_parity(
    path: str | Path,
    eager: Mapping[str, Any],
    observations: Sequence[tuple[Observation, np.ndarray]],
    *,
    seed: int = 0,
    threads: int = 2,
) -> dict[str, Any]:
    """The export at ``path`` against its eager stages ``eager`` (stage name -> module).

    ``observations``: ``(observation, action rows from it)``; when the export takes
    an executed prefix, every third case carries the first two rows as one, so the
    prefix path is compared too. The eager runner goes first and is closed before
    the programs are opened (a full-size model does not fit twice).

    Returns:
        :func:`compare_chunks`'s figures plus ``dims`` (joint names),
        ``observations``, ``with_prefix`` and ``noise_seed``.
    """
    from vla_edge.runners.exported import ExportedRunner

    manifest = load_manifest(path)
    missing = sorted(set(manifest.stage_order) - set(eager))
    if missing:
        raise ParityGateError(f"no eager module for stage(s) {missing} of {path}")
    programs = {n: EagerStage(eager[n], manifest.stages[n]) for n in manifest.stage_order}
    reference = ExportedRunner(path, threads=threads, programs=programs)
    spec = reference.spec
    rng = np.random.default_rng(int(seed))
    cases = []
    for i, (obs, rows) in enumerate(observations):
        noise = rng.standard_normal((spec.chunk_horizon, spec.noise_dim)).astype(np.float32)
        prefix_len = 2 if spec.supports_prefix and i % 3 == 2 and len(rows) else 0
        prefix = None
        if prefix_len:
            head = np.asarray(rows[:prefix_len], np.float64)
            prefix = np.concatenate([head, np.repeat(head[-1:], prefix_len - len(head), 0)])
        cases.append((obs, noise, prefix, prefix_len))

    def chunks(runner: ExportedRunner) -> np.ndarray:
        out = [runner.infer(o, noise=n, prefix_actions=p, prefix_len=k) for o, n, p, k in cases]
        runner.close()
        return np.stack([c.positions for c in out])

    expected = chunks(reference)
    del programs, reference
    got = chunks(ExportedRunner(path, threads=threads))
    return {
        "dims": list(spec.joint_names),
        "observations": len(cases),
        "with_prefix": sum(1 for c in cases if c[3]),
        "noise_seed": int(seed),
        **compare_chunks(expected, got),
    }


def check_parity(report: Mapping[str, Any], max_pct: float) -> None:
    """Refuse an export whose error on some joint exceeds ``max_pct`` % of its range.

    A NaN or infinite figure (the export emitted non-finite actions) is over any bound.

    Raises:
        ParityGateError: naming each joint over the bound with its figure, then every
            joint's figure.
    """
    pct = report["rms_pct_of_range"]
    over = [(d, p) for d, p in zip(report["dims"], pct, strict=True) if not p <= max_pct]
    if over:
        worst = ", ".join(f"{d} {p:.3g} %" for d, p in over)
        every = ", ".join(f"{d} {p:.3g}" for d, p in zip(report["dims"], pct, strict=True))
        raise ParityGateError(
            f"parity: the export differs from eager torch by more than --max-parity-pct "
            f"{max_pct:g} % of the range on {len(over)} of {len(pct)} joints ({worst}); "
            f"RMS error in % of range per joint over {report['observations']} observations: "
            f"{every}"
        )


def gate_export(
    path: str | Path,
    eager: Mapping[str, Any],
    observations: Sequence[tuple[Observation, np.ndarray]],
    max_pct: float,
    source: str,
    *,
    threads: int = 2,
) -> dict[str, Any]:
    """Compare the export at ``path`` with ``eager``; record the figures or refuse it.

    A passing export's manifest gets the report as its ``parity`` (and a stale
    ``manifest.refused.json`` goes); a failing one's is renamed ``manifest.refused.json``
    with the report in it, so no runner loads the directory.

    Args:
        observations: as :func:`export_parity` takes them.
        max_pct: the bound of :func:`check_parity`.
        source: where the observations come from (recorded in the report).

    Returns:
        The report: ``source``, ``max_parity_pct`` and :func:`export_parity`'s figures.

    Raises:
        ParityGateError: some joint is over ``max_pct``; the manifest is renamed first.
    """
    path = Path(path)
    data = load_manifest(path).data
    report = export_parity(path, eager, observations, threads=threads)
    report = {"source": source, "max_parity_pct": max_pct, **report}
    try:
        check_parity(report, max_pct)
    except ParityGateError:
        refused = path / REFUSED_MANIFEST_NAME
        (path / MANIFEST_NAME).rename(refused)
        refused.write_text(json.dumps({**data, "parity": report}, indent=2))
        raise
    write_manifest(path, {**data, "parity": report})
    (path / REFUSED_MANIFEST_NAME).unlink(missing_ok=True)
    return report
