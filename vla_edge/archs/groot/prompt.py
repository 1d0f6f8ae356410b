r"""GR00T N1.7's host tokens: the instruction inside Qwen3-VL's one-turn chat layout.

The language model reads (:mod:`vla_edge.archs.groot.config`'s prompt layout) the chat
template's opening (``lead_token_ids``, constant), each image slot, then the
``max_token_len`` host tokens made here, through a Hugging Face tokenizer directory
(Qwen3-VL's) read with the ``tokenizers`` library (numpy only: no torch, no
``transformers``):

* the instruction as upstream's processor cleans it (:func:`groot_text`, its
  ``formalize_language``): lower-cased, then every character that is neither a word
  character nor whitespace (``re.sub(r"[^\w\s]", "", ...)``) removed, Unicode included;
  nothing stripped;
* then the user turn's end :data:`CLOSING` (``<|im_end|>\n``), encoded with the
  directory's special tokens: upstream applies the template with
  ``add_generation_prompt=False``, so no assistant turn is opened;
* right-padded to ``max_token_len`` with the directory's ``pad_token`` (mask false).

Upstream (NVIDIA/Isaac-GR00T ``processing_gr00t_n1d7.py``, ``_apply_vlm_processing``)
puts the images before the instruction at @c5437fa6 and @1852a8c1, the instruction before
the images at @2d1e82fe and @8cb8bd76 (older by their content: no licence header,
``print`` where the others log). The layout here is the images-first one.

Departure, named once: with fixed shapes an instruction longer than the slots is cut
(right) so that the closing always fits; upstream's variable-length prompt is not cut.

GR00T N1.5's prompt (``groot_n15``, Eagle 2.5's chat layout) is written in
:mod:`.n15_prompt`; its encoder is re-exported here, where the registry's convention puts
each folder's encoders.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from vla_edge.archs.groot.n15_prompt import GrootN15PromptTokenizer
from vla_edge.archs.host import HF_TOKENIZER_JSON
from vla_edge.archs.policy_tokenizer import HF_PAD_TOKEN_FILES, hf_pad_token
from vla_edge.core.errors import ManifestMismatchError

PROMPT = "groot"
"""The prompt format written here (``host.token_ids.prompt``)."""
CLOSING = "<|im_end|>\n"
"""The chat template's end of the user turn (no generation prompt follows)."""
CLOSING_SPECIAL_TOKENS = ("<|im_end|>",)
"""Special tokens :data:`CLOSING` needs in the tokenizer (each one id, not split)."""
_NOT_WORD_OR_SPACE = re.compile(r"[^\w\s]")


def groot_text(instruction: str) -> str:
    """The instruction as upstream's processor cleans it (module docstring)."""
    return _NOT_WORD_OR_SPACE.sub("", instruction.lower())


class GrootPromptTokenizer:
    """GR00T's host tokens through a Hugging Face tokenizer directory (module docstring).

    Args:
        directory: holds ``tokenizer.json`` and ``tokenizer_config.json`` (its ``pad_token``).
        max_len: token slots of the program (``host.token_ids.shape[1]``).
        prompt: ``groot``.

    Raises:
        ValueError: another prompt.
        ManifestMismatchError: no ``tokenizer.json``, no pad token, a closing special token
            the tokenizer lacks, or fewer slots than the closing's tokens.
    """

    per_observation = False

    def __init__(self, directory: str | Path, max_len: int, prompt: str = PROMPT) -> None:
        from tokenizers import Tokenizer

        if prompt != PROMPT:
            raise ValueError(f"prompt = {prompt!r}, expected {PROMPT!r}")
        directory = Path(directory)
        path = directory / HF_TOKENIZER_JSON
        field = f"field host.token_ids.tokenizer.file = {directory.name!r}"
        if not path.is_file():
            raise ManifestMismatchError(f"{field}: no {HF_TOKENIZER_JSON} in {directory}")
        self._tokenizer = Tokenizer.from_file(str(path))
        pad = hf_pad_token(directory)
        pad_id = None if pad is None else self._tokenizer.token_to_id(pad)
        if pad_id is None:
            raise ManifestMismatchError(
                f"{field}: pad_token = {pad!r} is not a token of {path} (expected in "
                f"{list(HF_PAD_TOKEN_FILES)})"
            )
        missing = [t for t in CLOSING_SPECIAL_TOKENS if self._tokenizer.token_to_id(t) is None]
        if missing:
            raise ManifestMismatchError(
                f"{field}: {path} lacks the chat template's special tokens {missing} "
                "(Qwen3-VL's tokenizer has them)"
            )
        self.max_len = int(max_len)
        self.pad_token, self.pad_id = pad, int(pad_id)
        self.closing_ids = list(self._tokenizer.encode(CLOSING, add_special_tokens=False).ids)
        if len(self.closing_ids) > self.max_len:
            raise ManifestMismatchError(
                f"field host.token_ids.shape[1] = {self.max_len}: fewer slots than the "
                f"{len(self.closing_ids)} tokens of the chat template's closing {CLOSING!r}"
            )

    def ids(self, instruction: str) -> list[int]:
        """The unpadded ids: the cleaned instruction (cut to fit), then the closing."""
        text = groot_text(instruction)
        words = self._tokenizer.encode(text, add_special_tokens=False).ids if text else []
        return list(words)[: self.max_len - len(self.closing_ids)] + self.closing_ids

    def encode(
        self, instruction: str, state_norm: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Ids ``[1, L]`` int64 and mask ``[1, L]`` bool, right-padded with the pad token."""
        del state_norm
        ids = self.ids(instruction)
        n = len(ids)
        padded = ids + [self.pad_id] * (self.max_len - n)
        mask = [True] * n + [False] * (self.max_len - n)
        return np.asarray(padded, dtype=np.int64)[None], np.asarray(mask, dtype=bool)[None]


__all__ = [
    "CLOSING",
    "CLOSING_SPECIAL_TOKENS",
    "PROMPT",
    "GrootN15PromptTokenizer",
    "GrootPromptTokenizer",
    "groot_text",
]
