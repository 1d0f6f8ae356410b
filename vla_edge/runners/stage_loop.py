"""The runners' stage loop: one stage's program called once, or as its manifest's loop.

A manifest (:mod:`vla_edge.export.manifest`) declares each stage's inputs with their
sources and, for a stage run as K calls of one program (a flow head's Euler step), its
``repeat``: the per-call inputs and the outputs carried into the next call. Every runner
backend, and the benchmarks that time the programs, run a stage through :func:`run_stage`.
"""

from __future__ import annotations

from typing import Any

from vla_edge.export.manifest import REPEAT_SOURCE, StageRepeat


def run_stage(
    run: Any,
    inputs: Any,
    outputs: Any,
    repeat: StageRepeat | None,
    values: Any,
    convert: Any = None,
) -> list[Any]:
    """A stage's outputs: its program called once, or ``repeat.count`` times.

    Args:
        run: the program (inputs in declared order -> outputs in declared order).
        inputs, outputs: the stage's declared tensors (:class:`TensorSpec`).
        repeat: the stage's loop, if any.
        values: source -> value of every input not sourced ``repeat``.
        convert: applied to each per-call value of ``repeat.inputs`` (numpy arrays)
            before it is passed (e.g. to a torch tensor); default: as is.
    """
    args = [None if t.source == REPEAT_SOURCE else values[t.source] for t in inputs]
    if repeat is None:
        return list(run(args))
    position = {t.name: i for i, t in enumerate(inputs)}
    produced = {t.name: i for i, t in enumerate(outputs)}
    result: list[Any] = []
    for call in range(repeat.count):
        for name, per_call in repeat.inputs.items():
            value = per_call[call]
            args[position[name]] = value if convert is None else convert(value)
        result = list(run(list(args)))  # (each call its own list: a caller may keep it)
        for name, output in repeat.carry.items():
            args[position[name]] = result[produced[output]]
    return result
