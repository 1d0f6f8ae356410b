"""8da4w exports keep embedding tables as int8 rows: a quarter of the bytes, same lookups."""

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from vla_edge.export.executorch_export import (
    Int8RowEmbedding,
    export_stage_executorch,
    quantize_embeddings_int8,
    quantize_linears,
)
from vla_edge.export.quant_recipes import StageQuant
from vla_edge.export.stages import StageProgram

torch.set_num_threads(1)


class _Lookup(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.words = nn.Embedding(4096, 64)
        self.out = nn.Linear(64, 32)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(self.words(ids))


def test_int8_rows_reproduce_the_table_within_half_a_step_per_row() -> None:
    torch.manual_seed(0)
    table = nn.Embedding(300, 16)
    quantized = Int8RowEmbedding(table)
    assert quantized.qweight.dtype == torch.int8
    ids = torch.arange(300).reshape(3, 100)
    step = table.weight.abs().amax(dim=1) / 127.0
    error = (quantized(ids) - table(ids)).abs().amax(dim=-1)
    assert torch.all(error <= 0.5 * step[ids] + 1e-7)


def test_quantize_embeddings_replaces_every_table() -> None:
    module, count = quantize_embeddings_int8(_Lookup())
    assert count == 1 and isinstance(module.words, Int8RowEmbedding)


def _size(tmp_path: Path, quant: str) -> tuple[int, dict]:
    torch.manual_seed(0)
    module = _Lookup().eval()
    ids = torch.randint(0, 4096, (1, 12))
    stage = StageProgram("lookup", module, (ids,), inputs=(), outputs=())
    path = tmp_path / f"lookup_{quant}.pte"
    details = export_stage_executorch(stage, path, quant)
    return path.stat().st_size, details


@pytest.mark.slow
def test_8da4w_program_stores_the_table_as_int8_and_runs_it(tmp_path: Path) -> None:
    from executorch.extension.pybindings.portable_lib import _load_for_executorch

    fp32_bytes, _ = _size(tmp_path, "fp32")
    q_bytes, details = _size(tmp_path, "8da4w")
    assert details["int8_embeddings"] == 1
    assert q_bytes < 0.35 * fp32_bytes
    torch.manual_seed(0)
    reference, _, _ = quantize_linears(_Lookup().eval(), StageQuant(scheme="8da4w"))
    reference, _ = quantize_embeddings_int8(reference)
    ids = torch.randint(0, 4096, (1, 12))
    program = _load_for_executorch(str(tmp_path / "lookup_8da4w.pte"))
    got = program.forward((ids,))[0].numpy()
    with torch.no_grad():
        want = reference(ids).numpy()
    assert np.max(np.abs(got - want)) < 1e-2 * np.max(np.abs(want))
