r"""Host-side prompt text for π0 / π0.5, as openpi's ``PaligemmaTokenizer.tokenize`` builds it.

The tokenizer itself (PaliGemma's SentencePiece model) is given by the user; these
functions produce the strings to encode and pad the ids:

* π0: ``clean_task(task)`` encoded with BOS, then ``"\n"`` encoded separately (the
  "start of answer" token).
* π0.5 with discrete state: ``"Task: {task}, State: {bins};\nAction: "`` encoded with BOS,
  where ``bins`` are the normalised state (unpadded) digitised into 256 bins over [-1, 1].
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

STATE_BINS = 256


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
