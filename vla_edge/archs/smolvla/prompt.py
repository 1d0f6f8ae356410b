"""LeRobot SmolVLA's prompt through a Hugging Face tokenizer directory, read with ``tokenizers``.

Shared by the runners (:mod:`vla_edge.runners.tokenizers`) and SmolVLA's export
(:func:`vla_edge.archs.smolvla.processor.check_prompt_tokens`), which checks it against
``transformers``' ``AutoTokenizer`` before anything is written.
Needs neither torch nor transformers.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vla_edge.archs.host import HF_TOKENIZER_JSON
from vla_edge.archs.policy_tokenizer import HF_PAD_TOKEN_FILES as HF_PAD_TOKEN_FILES
from vla_edge.archs.policy_tokenizer import hf_pad_token
from vla_edge.core.errors import ManifestMismatchError


def smolvla_text(instruction: str) -> str:
    r"""LeRobot's ``SmolVLANewLineProcessor``: the task with ``"\n"`` appended unless it ends so."""
    return instruction if instruction.endswith("\n") else f"{instruction}\n"


class SmolVLAPromptTokenizer:
    """LeRobot SmolVLA's prompt through a Hugging Face tokenizer directory (module docstring).

    Args:
        directory: holds ``tokenizer.json`` and ``tokenizer_config.json`` (its ``pad_token``).
        max_len: token slots of the program (``host.token_ids.shape[1]``).
        prompt: ``smolvla``.

    Raises:
        ManifestMismatchError: no ``tokenizer.json``, or no pad token in the directory.
    """

    per_observation = False

    def __init__(self, directory: str | Path, max_len: int, prompt: str = "smolvla") -> None:
        from tokenizers import Tokenizer

        if prompt != "smolvla":
            raise ValueError(f"prompt = {prompt!r}, expected 'smolvla'")
        directory = Path(directory)
        path = directory / HF_TOKENIZER_JSON
        if not path.is_file():
            raise ManifestMismatchError(
                f"field host.token_ids.tokenizer.file = {directory.name!r}: no "
                f"{HF_TOKENIZER_JSON} in {directory}"
            )
        self._tokenizer = Tokenizer.from_file(str(path))
        pad = hf_pad_token(directory)
        pad_id = None if pad is None else self._tokenizer.token_to_id(pad)
        if pad_id is None:
            raise ManifestMismatchError(
                f"field host.token_ids.tokenizer.file = {directory.name!r}: pad_token = {pad!r} "
                f"is not a token of {path} (expected in {list(HF_PAD_TOKEN_FILES)})"
            )
        self.max_len = int(max_len)
        self.pad_token, self.pad_id = pad, int(pad_id)
        self._tokenizer.enable_truncation(max_length=self.max_len, direction="right")
        self._tokenizer.enable_padding(
            direction="right", pad_id=self.pad_id, pad_token=pad, length=self.max_len
        )

    def encode(
        self, instruction: str, state_norm: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        r"""Ids ``[1, L]`` int64 and mask ``[1, L]`` bool of ``instruction + "\n"``."""
        del state_norm
        encoding = self._tokenizer.encode(smolvla_text(instruction))
        ids = np.asarray(encoding.ids, dtype=np.int64)[None]
        mask = np.asarray(encoding.attention_mask, dtype=bool)[None]
        return ids, mask
