r"""The tokenizers an export's manifest declares (``host.token_ids``), in numpy (no torch).

* ``wordpiece`` / prompt ``instruction``: the bundled model's MiniLM tokenizer
  (:class:`vla_edge.archs.bundled.tokenizer.InstructionTokenizer`) over the instruction.
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

* ``huggingface`` / prompt ``groot``: GR00T N1.7's instruction in Qwen3-VL's chat layout
  (:mod:`vla_edge.archs.groot.prompt`).

Each architecture's prompt is written once, in its folder (numpy only, no torch), and
registered there as a :class:`~vla_edge.archs.architecture.PromptFormat` (its tokenizer
kind, whether it holds the state, its encoder as ``"module:attribute"``);
:func:`open_tokenizer` looks the manifest's prompt up in
:data:`vla_edge.archs.registry.PROMPT_FORMATS` and imports its encoder, with no list of
names here.
"""

from __future__ import annotations

import importlib
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


from vla_edge.archs import registry  # noqa: E402
from vla_edge.archs.bundled.prompt import WordPiecePromptTokenizer  # noqa: E402
from vla_edge.archs.pi0.prompt import PaligemmaPromptTokenizer  # noqa: E402
from vla_edge.archs.smolvla.prompt import (  # noqa: E402 - re-exported for the runners
    HF_PAD_TOKEN_FILES,
    HF_TOKENIZER_JSON,
    SmolVLAPromptTokenizer,
    hf_pad_token,
    smolvla_text,
)
from vla_edge.core.errors import ManifestMismatchError  # noqa: E402

__all__ = [
    "HF_PAD_TOKEN_FILES",
    "HF_TOKENIZER_JSON",
    "PaligemmaPromptTokenizer",
    "PromptTokenizer",
    "SmolVLAPromptTokenizer",
    "WordPiecePromptTokenizer",
    "hf_pad_token",
    "open_tokenizer",
    "smolvla_text",
]


def open_tokenizer(kind: str, path: Path, max_len: int, prompt: str) -> PromptTokenizer:
    """The encoder the registry names for a manifest's ``host.token_ids`` prompt.

    ``path``: the file the manifest names (a ``huggingface`` tokenizer: its directory).

    Raises:
        ManifestMismatchError: no architecture registers ``prompt``, or it reads another
            tokenizer kind than ``kind``.
    """
    entry = registry.prompt_format(prompt)
    if entry is None:
        raise ManifestMismatchError(
            f"field host.token_ids.prompt = {prompt!r}, expected one of "
            f"{tuple(registry.PROMPT_FORMATS)} (the registered prompt formats)"
        )
    if entry.tokenizer != kind:
        raise ManifestMismatchError(
            f"field host.token_ids.tokenizer.kind = {kind!r}, but prompt {prompt!r} reads a "
            f"{entry.tokenizer} tokenizer"
        )
    module, _, attribute = entry.encoder.partition(":")
    encoder = getattr(importlib.import_module(module), attribute)
    return encoder(path, max_len, prompt)
