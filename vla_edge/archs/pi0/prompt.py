r"""Host-side prompt text for π0 / π0.5, as openpi's ``PaligemmaTokenizer.tokenize`` builds it.

The tokenizer itself (PaliGemma's SentencePiece model) is given by the user; these
functions produce the strings to encode and pad the ids, and :class:`PaligemmaPromptTokenizer`
encodes them (numpy and ``sentencepiece`` only: the runners of an ONNX deployment use it
without torch, :mod:`vla_edge.runners.tokenizers`):

* π0: ``clean_task(task)`` encoded with BOS, then ``"\n"`` encoded separately (the
  "start of answer" token).
* π0.5 with discrete state: ``"Task: {task}, State: {bins};\nAction: "`` encoded with BOS,
  where ``bins`` are the normalised state (unpadded) digitised into 256 bins over [-1, 1].
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

STATE_BINS = 256
PROMPTS = ("pi0", "pi05_state")
"""The prompt formats written here (``host.token_ids.prompt``)."""


def clean_task(task: str) -> str:
    """Openpi's cleaning: strip, ``_`` → space, newline → space."""
    return task.strip().replace("_", " ").replace("\n", " ")


def discretize_state(state: np.ndarray) -> np.ndarray:
    """Normalised state → int bins ``0..255``: ``digitize(state, linspace(-1, 1, 257)[:-1]) - 1``.

    Values below -1 land in bin -1 and above 1 in bin 255, exactly as openpi's code does.
    """
    edges = np.linspace(-1.0, 1.0, STATE_BINS + 1)[:-1]
    return np.digitize(np.asarray(state, dtype=np.float64), bins=edges) - 1


def pi05_prompt(task: str, state: np.ndarray) -> str:
    """π0.5's prompt with the state as text (to be encoded with BOS)."""
    bins = " ".join(str(int(b)) for b in discretize_state(state))
    return f"Task: {clean_task(task)}, State: {bins};\nAction: "


def pad_tokens(tokens: Sequence[int], max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad (with 0) or truncate ids to ``max_len``; returns ``(ids int64, mask bool)``."""
    ids = list(tokens)[:max_len]
    mask = [True] * len(ids) + [False] * (max_len - len(ids))
    ids = ids + [0] * (max_len - len(ids))
    return np.asarray(ids, dtype=np.int64)[None], np.asarray(mask, dtype=bool)[None]


class PaligemmaPromptTokenizer:
    r"""openpi's π0 / π0.5 prompt through a SentencePiece model, as its ``PaligemmaTokenizer``.

    ``pi0``: ``encode(clean_task(task), add_bos=True) + encode("\n")``; ``pi05_state``:
    ``encode(pi05_prompt(task, state), add_bos=True)``; ids past ``max_len`` are cut,
    shorter ones padded with id 0 and mask false (:func:`pad_tokens`).

    Args:
        path: the SentencePiece model file.
        max_len: token slots of the program (``host.token_ids.shape[1]``).
        prompt: ``pi0`` or ``pi05_state``.

    Raises:
        ValueError: another prompt.
    """

    def __init__(self, path: str | Path, max_len: int, prompt: str) -> None:
        import sentencepiece

        if prompt not in PROMPTS:
            raise ValueError(f"prompt = {prompt!r}, expected one of {PROMPTS}")
        self._sp = sentencepiece.SentencePieceProcessor(model_file=str(path))
        self.max_len = int(max_len)
        self.prompt = prompt
        self.per_observation = prompt == "pi05_state"

    def text(self, instruction: str, state_norm: np.ndarray | None = None) -> str:
        """π0.5's full prompt text (``pi05_state``), or π0's cleaned instruction."""
        if not self.per_observation:
            return clean_task(instruction)
        if state_norm is None:
            raise ValueError("prompt 'pi05_state' needs the normalised state")
        return pi05_prompt(instruction, np.ravel(state_norm))

    def encode(
        self, instruction: str, state_norm: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Ids and mask as openpi's ``PaligemmaTokenizer.tokenize``."""
        ids = list(self._sp.encode(self.text(instruction, state_norm), add_bos=True))
        if not self.per_observation:
            ids += list(self._sp.encode("\n"))
        return pad_tokens(ids, self.max_len)
