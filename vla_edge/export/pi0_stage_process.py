"""One stage of a π0 / π0.5 policy directory exported in a process of its own.

``python -m vla_edge.export.pi0_stage_process POLICY OUT STAGE BACKEND RECIPE_JSON
[--flow-steps K]``

:func:`vla_edge.export.pi0.export_in_processes` (``vla-edge export --policy DIR
--low-memory``) runs this once per stage. The process builds the model without writing its
memory (:func:`~vla_edge.archs.common.without_default_init`), reads only the stage's tensors
from the policy directory, exports the stage in place (its module is rewritten and quantised
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

from vla_edge.core.errors import VlaEdgeError
from vla_edge.export.pi0 import STAGE_ENTRY_SUFFIX, load_policy_model, pi0_stage_programs
from vla_edge.export.quant_recipes import QuantRecipe


def export_one(
    policy: Path, out: Path, stage: str, backend: str, recipe: QuantRecipe, flow_steps: int | None
) -> dict[str, Any]:
    """Export ``stage`` of the policy directory into ``out``; its manifest entry."""
    from vla_edge.archs.pi0.stages import STAGE_NAMES
    from vla_edge.export.pi0_xnnpack import NOT_DELEGATED_WHY
    from vla_edge.export.pipeline import explain_delegation, export_stage

    # the parent checked the directory's hashes just before starting this process
    _, model = load_policy_model(policy, flow_steps, stage=stage, verify_sha256=False)
    programs = {p.name: p for p in pi0_stage_programs(model, backend)}
    program = programs.pop(stage)
    del model, programs  # only this stage's weights stay alive
    settings = recipe.stage_settings(list(STAGE_NAMES))[stage]
    out.mkdir(parents=True, exist_ok=True)
    entry = export_stage(program, backend, settings, out, check=False, in_place=True)
    explain_delegation(entry, NOT_DELEGATED_WHY if backend == "executorch" else None)
    return entry


def main(argv: list[str] | None = None) -> int:
    """Export one stage (the arguments above); 0, or 2 with the error on stderr."""
    parser = argparse.ArgumentParser(prog="python -m vla_edge.export.pi0_stage_process")
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
