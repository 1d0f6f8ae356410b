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
  give the same ids and masks (:mod:`vla_edge.export.smolvla`).

π0's text is built for the torch side by :mod:`vla_edge.archs.pi0.prompt`;
it is written again here because that package imports torch, which an ONNX
deployment must not (the tests check the two agree).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np

STATE_BINS = 256


class PromptTokenizer(Protocol):
    """Token ids ``[1, L]`` int64 and mask ``[1, L]`` bool for one observation."""

    per_observation: bool
    """Whether the ids depend on the state (then they are never cached)."""

    def encode(
        self, instruction: str, state_norm: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Ids and mask; ``state_norm`` is the normalised, unpadded state."""
        ...


def clean_instruction(text: str) -> str:
    """Openpi's cleaning: ``strip()``, ``_`` → space, newline → space."""
    return text.strip().replace("_", " ").replace("\n", " ")


def state_bins(state_norm: np.ndarray) -> np.ndarray:
    """The normalised state in openpi's 256 bins (ints, -1 … 255)."""
    edges = np.linspace(-1.0, 1.0, STATE_BINS + 1)[:-1]
    return np.digitize(np.asarray(state_norm, dtype=np.float64), bins=edges) - 1


def pad_ids(ids: list[int], max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Cut to, or pad with 0 up to, ``max_len``: ``(ids [1, L] int64, mask [1, L] bool)``."""
    ids = list(ids)[:max_len]
    mask = [True] * len(ids) + [False] * (max_len - len(ids))
    ids += [0] * (max_len - len(ids))
    return np.asarray(ids, dtype=np.int64)[None], np.asarray(mask, dtype=bool)[None]


class PaligemmaPromptTokenizer:
    """openpi's π0 / π0.5 prompt through a SentencePiece model (see the module docstring).

    Args:
        path: the SentencePiece model file.
        max_len: token slots of the program (``host.token_ids.shape[1]``).
        prompt: ``pi0`` or ``pi05_state``.
    """

    def __init__(self, path: str | Path, max_len: int, prompt: str) -> None:
        import sentencepiece

        if prompt not in ("pi0", "pi05_state"):
            raise ValueError(f"prompt = {prompt!r}, expected 'pi0' or 'pi05_state'")
        self._sp = sentencepiece.SentencePieceProcessor(model_file=str(path))
        self.max_len = int(max_len)
        self.prompt = prompt
        self.per_observation = prompt == "pi05_state"

    def text(self, instruction: str, state_norm: np.ndarray | None = None) -> str:
        """π0.5's full prompt text (``pi05_state``), or π0's cleaned instruction."""
        cleaned = clean_instruction(instruction)
        if not self.per_observation:
            return cleaned
        if state_norm is None:
            raise ValueError("prompt 'pi05_state' needs the normalised state")
        bins = " ".join(str(int(b)) for b in state_bins(np.ravel(state_norm)))
        return f"Task: {cleaned}, State: {bins};\nAction: "

    def encode(
        self, instruction: str, state_norm: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Ids and mask as openpi's ``PaligemmaTokenizer.tokenize``."""
        ids = list(self._sp.encode(self.text(instruction, state_norm), add_bos=True))
        if not self.per_observation:
            ids += list(self._sp.encode("\n"))
        return pad_ids(ids, self.max_len)


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


from vla_edge.archs.hf_prompt import (  # noqa: E402 - re-exported for the runners
    HF_PAD_TOKEN_FILES,
    HF_TOKENIZER_JSON,
    SmolVLAPromptTokenizer,
    hf_pad_token,
    smolvla_text,
)

__all__ = [
    "HF_PAD_TOKEN_FILES",
    "HF_TOKENIZER_JSON",
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
