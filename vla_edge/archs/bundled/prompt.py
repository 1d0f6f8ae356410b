"""The bundled model's prompt: the instruction through its MiniLM WordPiece tokenizer.

Registered as the ``instruction`` prompt format on a ``wordpiece`` tokenizer
(:mod:`.arch`); numpy and ``tokenizers`` only, no torch.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

PROMPT = "instruction"
"""The prompt format written here (``host.token_ids.prompt``)."""


class WordPiecePromptTokenizer:
    """The bundled model's MiniLM tokenizer over the instruction as is.

    Args:
        path: the ``tokenizer.json`` beside the programs (its folder is read).
        max_len: token slots of the program (``host.token_ids.shape[1]``).
        prompt: ``instruction``.

    Raises:
        ValueError: another prompt.
    """

    per_observation = False

    def __init__(self, path: str | Path, max_len: int, prompt: str = PROMPT) -> None:
        from vla_edge.archs.bundled.tokenizer import InstructionTokenizer

        if prompt != PROMPT:
            raise ValueError(f"prompt = {prompt!r}, expected {PROMPT!r}")
        self._tokenizer = InstructionTokenizer(int(max_len), model_dir=Path(path).parent)

    def encode(
        self, instruction: str, state_norm: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Ids and mask (int64) of the instruction."""
        del state_norm
        return self._tokenizer.encode(instruction)
