"""One stage of a policy directory exported in a process of its own (``--low-memory``).

``python -m vla_edge.export.stage_process POLICY OUT STAGE BACKEND RECIPE_JSON
[--flow-steps K]``

:func:`vla_edge.export.architecture.export_in_processes` (``vla-edge export --policy DIR
--low-memory``) runs this once per stage of an architecture whose export hooks read one
stage's weights (π0, π0.5). The process builds the model without writing its memory
(:func:`~vla_edge.archs.common.without_default_init`), reads only the stage's tensors from
the policy directory, exports the stage in place (its module is rewritten and quantised
without a copy) and writes the stage's manifest entry to ``OUT/<stage>.entry.json``; the
parent reads it and writes the manifest. The peak is the largest stage's instead of the
whole model's: a full-size π0 holds 13 GB of fp32 weights, and lowering its fusion
(Gemma 2B) to 8da4w alone peaks at about 10 GiB.

The program is not run against the torch stage in the same process (the module is
quantised in place, and at full size the two would not fit together): the entry's
``check_max_abs`` is null, and ``vla-edge export --max-parity-pct`` compares the whole
export with eager torch afterwards.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from vla_edge.core.errors import ConfigError, VlaEdgeError
from vla_edge.export.architecture import (
    STAGE_ENTRY_SUFFIX,
    load_policy_model,
    policy_hooks,
    stage_programs_of,
)
from vla_edge.export.quant_recipes import QuantRecipe


def export_one(
    policy: Path, out: Path, stage: str, backend: str, recipe: QuantRecipe, flow_steps: int | None
) -> dict[str, Any]:
    """Export ``stage`` of the policy directory into ``out``; its manifest entry.

    Raises:
        ConfigError: an unknown stage, or the directory's architecture reads its whole model.
    """
    from vla_edge.export.pipeline import explain_delegation, export_stage

    _, arch = policy_hooks(policy)
    if stage not in arch.stage_names:
        raise ConfigError(f"stage = {stage!r}, expected one of {arch.stage_names}")
    # the parent checked the directory's hashes just before starting this process
    _, model = load_policy_model(policy, flow_steps, stage=stage, verify_sha256=False)
    programs = {p.name: p for p in stage_programs_of(model, backend)}
    program = programs.pop(stage)
    del model, programs  # only this stage's weights stay alive
    settings = recipe.stage_settings(list(arch.stage_names))[stage]
    out.mkdir(parents=True, exist_ok=True)
    entry = export_stage(program, backend, settings, out, check=False, in_place=True)
    why = dict(arch.not_delegated_why) if backend == "executorch" else None
    explain_delegation(entry, why)
    return entry


def main(argv: list[str] | None = None) -> int:
    """Export one stage (the arguments above); 0, or 2 with the error on stderr."""
    parser = argparse.ArgumentParser(prog="python -m vla_edge.export.stage_process")
    parser.add_argument("policy", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("stage")
    parser.add_argument("backend")
    parser.add_argument("recipe", help="the quantisation recipe as JSON")
    parser.add_argument("--flow-steps", type=int, default=None)
    args = parser.parse_args(argv)
    try:
        recipe = QuantRecipe.model_validate_json(args.recipe)
        entry = export_one(args.policy, args.out, args.stage, args.backend, recipe, args.flow_steps)
    except VlaEdgeError as exc:
        print(f"{args.stage}: {exc}", file=sys.stderr)
        return 2
    (args.out / f"{args.stage}{STAGE_ENTRY_SUFFIX}").write_text(json.dumps(entry, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
