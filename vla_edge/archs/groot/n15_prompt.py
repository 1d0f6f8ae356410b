r"""GR00T N1.5's prompt: the instruction and the camera images in Eagle 2.5's chat layout.

What upstream's Eagle 2.5 processing hands the language model for one instruction and the
cameras (NVIDIA/Isaac-GR00T at the N1.5 release), as this package lays it out:

* ``GR00TTransform._apply_vlm_processing`` (``gr00t/model/transforms.py`` @15743376, the
  one version the code index holds) builds one conversation of one ``user`` turn whose
  content is every image (views in order, one step) *then* the instruction, and renders it
  with ``apply_chat_template(..., add_generation_prompt=True)``; the instruction is the
  raw annotation (that transform's ``formalize_language`` field is never applied);
* the chat template opens with a system turn when the first message is not one and writes
  an ``<image-k>`` placeholder per image item; ``Eagle2_5_VLProcessor.
  replace_media_placeholder`` (``gr00t/model/backbone/eagle2_hg_model/
  processing_eagle2_5_vl.py`` @338d3ec2, one of the two versions the index holds) replaces
  each by the text ``<image k>``, ``<img>``, ``<IMG_CONTEXT>`` once per image token of
  the tile (``tokens_per_tile``: 256 for a 224² SigLIP tile without pixel shuffle, a
  quarter with it) and ``</img>``; the tokenizer then encodes the whole text (Qwen3's adds
  no BOS).

So the language model reads, in order:

1. :data:`LEAD`: ``<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n`` and
   ``<|im_start|>user\n`` (constant: the config's ``lead_token_ids``);
2. per camera slot ``k`` (from 1): the text ``<image k>`` (``slot_label_ids``),
   ``<img>``, ``<IMG_CONTEXT>`` × the slot's image tokens, ``</img>`` (constant but for
   the image features, which the fusion stage writes over the ``<IMG_CONTEXT>`` rows);
3. the host tokens made here: the instruction as given, then :data:`CLOSING`
   (``<|im_end|>\n<|im_start|>assistant\n``: the user turn's end and the generation
   prompt), right-padded to ``max_token_len`` with the directory's pad token (mask false).

Each piece is encoded on its own, which gives the ids of the whole text encoded at once:
every boundary between pieces is a special token or follows the newline that ends the
lead, where the byte-level pre-tokenizer splits anyway. The tests check this against the
whole text encoded in one call.

The system turn's text is the one in the N1.5 tree's ``chat_template.json`` (the template
``apply_chat_template`` renders; read in the public fork peri044/Isaac-GR00T @4af2b622,
which keeps upstream's N1.5 branch): ``<|im_start|>system\nYou are a helpful
assistant.<|im_end|>\n``; the processor's own ``py_apply_chat_template``, which
``apply_chat_template`` does not call, puts a newline before that ``<|im_end|>``. Not run
here: upstream's processor code itself (``processing_eagle2_5_vl.py`` imports torchvision).

Departure, named once: with fixed shapes an instruction longer than the slots is cut
(right) so that the closing always fits; upstream's variable-length prompt is not cut.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from vla_edge.archs.host import HF_TOKENIZER_JSON
from vla_edge.archs.policy_tokenizer import HF_PAD_TOKEN_FILES, hf_pad_token
from vla_edge.core.errors import ManifestMismatchError, TokenizerMismatchError

PROMPT = "groot_n15"
"""The prompt format written here (``host.token_ids.prompt``)."""
SYSTEM_TURN = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
USER_OPEN = "<|im_start|>user\n"
LEAD = SYSTEM_TURN + USER_OPEN
"""The text before the first image (the config's ``lead_token_ids``)."""
IMAGE_START = "<img>"
IMAGE_END = "</img>"
IMAGE_CONTEXT = "<IMG_CONTEXT>"
"""The token whose rows the image features replace (``image_token_index``)."""
CLOSING = "<|im_end|>\n<|im_start|>assistant\n"
"""After the instruction: the user turn's end and the generation prompt."""
CHAT_SPECIAL_TOKENS = ("<|im_start|>", "<|im_end|>", IMAGE_START, IMAGE_END, IMAGE_CONTEXT)
"""Special tokens the layout needs in the tokenizer (each one id, not split)."""


def slot_label(slot: int) -> str:
    """The text Eagle 2.5's processor writes before slot ``slot``'s (from 0) ``<img>``."""
    return f"<image {slot + 1}>"


def _open(directory: str | Path) -> Any:
    """``directory``'s ``tokenizer.json`` (``tokenizers``), or ``None`` when absent."""
    from tokenizers import Tokenizer

    path = Path(directory) / HF_TOKENIZER_JSON
    return Tokenizer.from_file(str(path)) if path.is_file() else None


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False).ids) if text else []


def chat_layout(directory: str | Path, n_slots: int, image_token_id: int) -> dict[str, Any]:
    """The config's layout fields as the tokenizer at ``directory`` numbers them.

    Returns ``lead_token_ids``, ``slot_label_ids``, ``image_start_id`` and
    ``image_end_id`` (:mod:`vla_edge.archs.groot.n15_config`'s prompt layout).

    Raises:
        TokenizerMismatchError: no ``tokenizer.json``; a special token of
            :data:`CHAT_SPECIAL_TOKENS` the tokenizer lacks; its ``<IMG_CONTEXT>`` not
            ``image_token_id`` (the checkpoint's ``image_token_index``); slot labels that
            encode to different lengths.
    """
    where = f"tokenizer = {str(directory)!r}"
    tokenizer = _open(directory)
    if tokenizer is None:
        raise TokenizerMismatchError(
            f"{where}: no {HF_TOKENIZER_JSON}; expected Eagle 2.5's Hugging Face tokenizer "
            "directory (Qwen3's with <img>, </img> and <IMG_CONTEXT> added; GR00T N1.5 "
            "checkpoints ship none)"
        )
    ids = {t: tokenizer.token_to_id(t) for t in CHAT_SPECIAL_TOKENS}
    missing = [t for t, i in ids.items() if i is None]
    if missing:
        raise TokenizerMismatchError(
            f"{where}: lacks the special tokens {missing} of Eagle 2.5's chat layout "
            f"(needs {list(CHAT_SPECIAL_TOKENS)})"
        )
    if ids[IMAGE_CONTEXT] != image_token_id:
        raise TokenizerMismatchError(
            f"{where}: {IMAGE_CONTEXT} is id {ids[IMAGE_CONTEXT]}, but the checkpoint's "
            f"image_token_index (image_token_id) = {image_token_id}; pass the tokenizer the "
            "checkpoint was trained with (Eagle 2.5's)"
        )
    labels = tuple(tuple(_encode(tokenizer, slot_label(k))) for k in range(n_slots))
    if len({len(label) for label in labels}) > 1:
        raise TokenizerMismatchError(
            f"{where}: the slot labels {[slot_label(k) for k in range(n_slots)]} encode to "
            f"{[len(label) for label in labels]} tokens; the fixed layout needs one length"
        )
    return {
        "lead_token_ids": tuple(_encode(tokenizer, LEAD)),
        "slot_label_ids": labels,
        "image_start_id": int(ids[IMAGE_START]),
        "image_end_id": int(ids[IMAGE_END]),
    }


def layout_mismatch(config: Any, layout: Mapping[str, Any]) -> str | None:
    """The first field of ``config`` that ``layout`` (:func:`chat_layout`) numbers otherwise."""
    for field, value in layout.items():
        found = getattr(config, field)
        if found != value:
            return f"the model's {field} = {found}, but the tokenizer gives {value}"
    return None


class GrootN15PromptTokenizer:
    """GR00T N1.5's host tokens through a Hugging Face tokenizer directory (module docstring).

    Args:
        directory: holds ``tokenizer.json`` and ``tokenizer_config.json`` (its ``pad_token``).
        max_len: token slots of the program (``host.token_ids.shape[1]``).
        prompt: ``groot_n15``.

    Raises:
        ValueError: another prompt.
        ManifestMismatchError: no ``tokenizer.json``, no pad token, a closing special token
            the tokenizer lacks, or fewer slots than the closing's tokens.
    """

    per_observation = False

    def __init__(self, directory: str | Path, max_len: int, prompt: str = PROMPT) -> None:
        if prompt != PROMPT:
            raise ValueError(f"prompt = {prompt!r}, expected {PROMPT!r}")
        directory = Path(directory)
        field = f"field host.token_ids.tokenizer.file = {directory.name!r}"
        tokenizer = _open(directory)
        if tokenizer is None:
            raise ManifestMismatchError(f"{field}: no {HF_TOKENIZER_JSON} in {directory}")
        self._tokenizer = tokenizer
        pad = hf_pad_token(directory)
        pad_id = None if pad is None else tokenizer.token_to_id(pad)
        if pad_id is None:
            raise ManifestMismatchError(
                f"{field}: pad_token = {pad!r} is not a token of {directory / HF_TOKENIZER_JSON} "
                f"(expected in {list(HF_PAD_TOKEN_FILES)})"
            )
        missing = [t for t in ("<|im_start|>", "<|im_end|>") if tokenizer.token_to_id(t) is None]
        if missing:
            raise ManifestMismatchError(
                f"{field}: lacks the chat template's special tokens {missing} (Eagle 2.5's "
                "tokenizer has them)"
            )
        self.max_len = int(max_len)
        self.pad_token, self.pad_id = pad, int(pad_id)
        self.closing_ids = _encode(tokenizer, CLOSING)
        if len(self.closing_ids) > self.max_len:
            raise ManifestMismatchError(
                f"field host.token_ids.shape[1] = {self.max_len}: fewer slots than the "
                f"{len(self.closing_ids)} tokens of the chat template's closing {CLOSING!r}"
            )

    def ids(self, instruction: str) -> list[int]:
        """The unpadded ids: the instruction as given (cut to fit), then the closing."""
        words = _encode(self._tokenizer, instruction)
        return words[: self.max_len - len(self.closing_ids)] + self.closing_ids

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


def check_tokenizer(directory: Path, config: Any) -> None:
    """Refuse a tokenizer directory that numbers the layout otherwise than ``config``.

    The fusion stage writes the lead, the slot labels and the image tokens from the
    config, the host the instruction and the closing from the tokenizer: both must agree,
    and every id the tokenizer can write must be a row of the embedding table.

    Raises:
        TokenizerMismatchError: as :func:`chat_layout`; the prompt tokenizer refuses the
            directory (pad token, closing); a layout field differs from the config's; an
            id past the embedding table.
    """
    where = f"tokenizer = {str(directory)!r}"
    layout = chat_layout(directory, config.n_slots, config.image_token_id)
    problem = layout_mismatch(config, layout)
    if problem:
        raise TokenizerMismatchError(
            f"{where}: {problem}; pass the tokenizer the policy was imported with"
        )
    try:
        GrootN15PromptTokenizer(directory, config.max_token_len)
    except ManifestMismatchError as exc:
        raise TokenizerMismatchError(f"{where}: {exc}") from exc
    vocab = _open(directory).get_vocab(with_added_tokens=True)
    largest = max(vocab.values())
    if largest >= config.text.vocab_size:
        raise TokenizerMismatchError(
            f"{where}: token id {largest} is past the embedding table's "
            f"{config.text.vocab_size} rows (text.vocab_size)"
        )
