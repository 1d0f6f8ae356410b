"""The parity figures ``vla-edge bench parity`` reports for a pair of chunk sets."""

from __future__ import annotations

from typing import Any

import numpy as np

from vla_edge.runners.parity import compare_chunks


def compare(
    reference: np.ndarray, candidate: np.ndarray, reference_rel: np.ndarray, cand_rel: np.ndarray
) -> dict[str, Any]:
    """Parity metrics of chunks ``[N, H, A]`` (absolute and in the model's representation)."""
    a = reference_rel.reshape(reference_rel.shape[0], -1)
    b = cand_rel.reshape(cand_rel.shape[0], -1)
    cos = np.sum(a * b, axis=1) / np.maximum(
        np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-12
    )
    return {
        **compare_chunks(reference, candidate),
        "cosine": float(np.mean(cos)),
        "cosine_min": float(np.min(cos)),
    }
