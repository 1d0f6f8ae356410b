r"""The tokenizers an export's manifest declares (``host.token_ids``), in numpy (no torch).

* ``wordpiece`` / prompt ``instruction``: the bundled model's MiniLM tokenizer
  (:class:`vla_edge.policy.tokenizer.InstructionTokenizer`) over the instruction.
* ``sentencepiece`` / prompt ``pi0`` or ``pi05_state``: openpi's
  ``PaligemmaTokenizer.tokenize`` (``src/openpi/models/tokenizer.py``) with the
  SentencePiece model copied beside the programs:

  - the instruction is cleaned: ``strip()``, ``_`` → space, newline → space;
  - ``pi0``: ``encode(cleaned, add_bos=True) + encode("\n")`` (the ``"\n"`` is
    encoded on its own: openpi's "start of answer" token);
  - ``pi05_state``: ``encode(f"Task: {cleaned}, State: {bins};\nAction: ", add_bos=True)``
    where ``bins`` are the normalised (unpadded) state digitised as
    ``np.digitize(state, linspace(-1, 1, 257)[:-1]) - 1``, joined by spaces
    (below -1 gives -1, at or above 1 gives 255, as openpi's code does);
  - ids past ``max_len`` are cut (every mask entry true); shorter ones are
    padded with id 0 and mask false.
* ``huggingface`` / prompt ``smolvla``: LeRobot SmolVLA's prompt
  (``processor_smolvla.py``'s ``SmolVLANewLineProcessor`` and the
  ``TokenizerProcessorStep`` it is followed by) through a Hugging Face
  tokenizer directory copied beside the programs (SmolVLM2's):

  - ``"\n"`` is appended to the instruction unless it already ends with one;
    nothing else is cleaned;
  - the tokenizer's own pipeline (special tokens included) with truncation to
    ``max_len`` (right) and padding on the right with the directory's
    ``pad_token``, as ``transformers`` sets up its fast tokenizer for
    ``tokenizer(text, max_length=L, truncation=True, padding=..., padding_side="right")``;
  - always padded to ``max_len`` (the program's fixed shape) where LeRobot's
    default ``pad_language_to="longest"`` pads a batch of one not at all: the
    padded slots are masked out of attention and do not advance the positions
    (``cumsum(mask) - 1``), so the model's output is the same.

  It reads ``tokenizer.json`` with the ``tokenizers`` library, not
  ``transformers`` (whose import pulls in torch); the exporter checks the two
  give the same ids and masks (:mod:`vla_edge.archs.smolvla.processor`).

Each architecture's prompt is written once, in its folder (numpy only, no torch):
π0's :class:`~vla_edge.archs.pi0.prompt.PaligemmaPromptTokenizer`, SmolVLA's
:class:`~vla_edge.archs.smolvla.prompt.SmolVLAPromptTokenizer`; this module picks one by the
manifest's tokenizer kind.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np


class PromptTokenizer(Protocol):
    """Token ids ``[1, L]`` int64 and mask ``[1, L]`` bool for one observation."""

    per_observation: bool
    """Whether the ids depend on the state (then they are never cached)."""

    def encode(
        self, instruction: str, state_norm: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Ids and mask; ``state_norm`` is the normalised, unpadded state."""
        ...


class WordPiecePromptTokenizer:
    """The bundled model's MiniLM tokenizer over the instruction (``tokenizer.json``)."""

    per_observation = False

    def __init__(self, directory: str | Path, max_len: int) -> None:
        from vla_edge.policy.tokenizer import InstructionTokenizer

        self._tokenizer = InstructionTokenizer(int(max_len), model_dir=directory)

    def encode(
        self, instruction: str, state_norm: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Ids and mask (int64) of the instruction."""
        del state_norm
        return self._tokenizer.encode(instruction)


from vla_edge.archs.pi0.prompt import PaligemmaPromptTokenizer  # noqa: E402
from vla_edge.archs.smolvla.prompt import (  # noqa: E402 - re-exported for the runners
    HF_PAD_TOKEN_FILES,
    HF_TOKENIZER_JSON,
    SmolVLAPromptTokenizer,
    hf_pad_token,
    smolvla_text,
)

__all__ = [
    "HF_PAD_TOKEN_FILES",
    "HF_TOKENIZER_JSON",
    "PaligemmaPromptTokenizer",
    "SmolVLAPromptTokenizer",
    "hf_pad_token",
    "smolvla_text",
]


def open_tokenizer(kind: str, path: Path, max_len: int, prompt: str) -> PromptTokenizer:
    """The tokenizer of a manifest's ``host.token_ids`` (already validated).

    ``path``: the file the manifest names (a ``huggingface`` tokenizer: its directory).
    """
    if kind == "sentencepiece":
        return PaligemmaPromptTokenizer(path, max_len, prompt)
    if kind == "huggingface":
        return SmolVLAPromptTokenizer(path, max_len, prompt)
    return WordPiecePromptTokenizer(path.parent, max_len)
