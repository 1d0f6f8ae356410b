"""A policy directory's tokenizer: the entry ``policy.yaml`` records and the files copied.

The user gives the tokenizer (never fetched): a SentencePiece model (PaliGemma's, π0 /
π0.5) copied as ``tokenizer.model``, or a Hugging Face tokenizer directory (SmolVLM2's,
SmolVLA) whose :data:`HF_TOKENIZER_FILES` are copied into ``tokenizer/``; the entry holds
their hashes, the vocabulary size (checked against the model's embedding rows) and the
token slots.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vla_edge.archs.host import HF_TOKENIZER_JSON
from vla_edge.core.errors import (
    TokenizerMismatchError,
)

TOKENIZER_FILE = "tokenizer.model"
TOKENIZER_DIR = "tokenizer"
"""Where a Hugging Face tokenizer directory's files go."""
HF_TOKENIZER_FILES = (
    HF_TOKENIZER_JSON,
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "chat_template.json",
    "chat_template.jinja",
)
"""The files of a Hugging Face tokenizer directory that are copied (``tokenizer.json``
required); weights or processor files next to them are not."""


def write_sentencepiece_model(path: Path, sentences: list[str], vocab_size: int) -> Path:
    r"""A small SentencePiece model trained on ``sentences``, shaped like PaliGemma's.

    Its special ids are PaliGemma's (pad 0, eos 1, bos 2, unk 3) and ``"\n"`` is one piece;
    the text is taken as written (no normalisation, no dummy prefix) and byte fallback
    encodes any other text. For tests and benchmarks that need a tokenizer of the right
    shape, not a trained one.
    """
    import io

    import sentencepiece as spm

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences * 20),
        model_writer=model,
        vocab_size=vocab_size,
        model_type="unigram",
        hard_vocab_limit=False,
        minloglevel=2,
        pad_id=0,
        eos_id=1,
        bos_id=2,
        unk_id=3,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=False,
        user_defined_symbols=["\n"],
        byte_fallback=True,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(model.getvalue())
    return path


def sha256_file(path: Path, chunk_bytes: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in chunks (a full-size checkpoint is gigabytes)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk_bytes):
            digest.update(block)
    return digest.hexdigest()


# -- the parts ------------------------------------------------------------------------------


def tokenizer_entry(path: Path, vocab_size: int, max_token_len: int) -> dict[str, Any]:
    """Check a SentencePiece model against the embedding table; its ``tokenizer`` entry.

    Raises:
        TokenizerMismatchError: unreadable, or more pieces than ``vocab_size`` rows.
    """
    import sentencepiece

    path = Path(path)
    if not path.is_file():
        raise TokenizerMismatchError(f"{path}: tokenizer file not found")
    try:
        processor = sentencepiece.SentencePieceProcessor(model_file=str(path))
        pieces = int(processor.get_piece_size())
    except Exception as exc:  # sentencepiece raises OSError or RuntimeError by version
        raise TokenizerMismatchError(f"{path}: not a SentencePiece model: {exc}") from exc
    if pieces > vocab_size:
        raise TokenizerMismatchError(
            f"{path}: the tokenizer has {pieces} pieces but the model's embedding table has "
            f"{vocab_size} rows (config.vocab_size): ids >= {vocab_size} have no embedding; "
            "pass the tokenizer the checkpoint was trained with (PaliGemma's)"
        )
    return {
        "file": TOKENIZER_FILE,
        "kind": "sentencepiece",
        "sha256": sha256_file(path),
        "vocab_size": pieces,
        "max_token_len": int(max_token_len),
    }


def hf_tokenizer_entry(path: Path, vocab_size: int, max_token_len: int) -> dict[str, Any]:
    """Check a Hugging Face tokenizer directory against the embedding table; its entry.

    ``tokenizer.json`` is read with the ``tokenizers`` library (nothing is fetched); every
    id, added tokens included, must have a row. The entry lists the files that are copied
    (:data:`HF_TOKENIZER_FILES` present in ``path``) with their hashes.

    Raises:
        TokenizerMismatchError: not a directory with a readable ``tokenizer.json``, or an id
            ``>= vocab_size``.
    """
    from tokenizers import Tokenizer

    path = Path(path)
    if not path.is_dir():
        what = "is a file" if path.is_file() else "not found"
        raise TokenizerMismatchError(
            f"{path}: {what}; expected a Hugging Face tokenizer directory with "
            f"{HF_TOKENIZER_JSON} (SmolVLM2's; nothing is fetched)"
        )
    json_path = path / HF_TOKENIZER_JSON
    if not json_path.is_file():
        found = sorted(p.name for p in path.iterdir())[:12]
        raise TokenizerMismatchError(
            f"{path}: no {HF_TOKENIZER_JSON} (found: {found}); expected a Hugging Face "
            "tokenizer directory"
        )
    try:
        tokenizer = Tokenizer.from_file(str(json_path))
        vocab = tokenizer.get_vocab(with_added_tokens=True)
    except Exception as exc:  # tokenizers raises its own Exception subclasses
        raise TokenizerMismatchError(f"{json_path}: not a readable tokenizer: {exc}") from exc
    ids = max(vocab.values()) + 1 if vocab else 0
    if ids > vocab_size:
        top = max(vocab, key=vocab.__getitem__)
        raise TokenizerMismatchError(
            f"{json_path}: the tokenizer's ids reach {ids - 1} ({top!r}) but the model's "
            f"embedding table has {vocab_size} rows (config.text.vocab_size): ids >= "
            f"{vocab_size} have no embedding; pass the tokenizer the checkpoint was trained "
            "with (its vlm_model_name's)"
        )
    files = {
        name: sha256_file(path / name) for name in HF_TOKENIZER_FILES if (path / name).is_file()
    }
    entry: dict[str, Any] = {
        "file": f"{TOKENIZER_DIR}/{HF_TOKENIZER_JSON}",
        "kind": "huggingface",
        "dir": TOKENIZER_DIR,
        "files": files,
        "sha256": files[HF_TOKENIZER_JSON],
        "vocab_size": ids,
        "max_token_len": int(max_token_len),
    }
    pad = hf_pad_token(path)
    if pad is not None and tokenizer.token_to_id(pad) is not None:
        entry["pad_token"] = pad
        entry["pad_token_id"] = int(tokenizer.token_to_id(pad))
    return entry


HF_PAD_TOKEN_FILES = ("tokenizer_config.json", "special_tokens_map.json")
"""Where ``transformers`` finds a tokenizer directory's ``pad_token``, in that order."""


def hf_pad_token(directory: str | Path) -> str | None:
    """``pad_token`` of a Hugging Face tokenizer directory (a string or an AddedToken mapping)."""
    for name in HF_PAD_TOKEN_FILES:
        try:
            pad = json.loads((Path(directory) / name).read_text()).get("pad_token")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(pad, Mapping):
            pad = pad.get("content")
        if isinstance(pad, str):
            return pad
    return None


def tokenizer_files(entry: Mapping[str, Any], src: Path) -> dict[str, Path]:
    """The files to copy for a tokenizer ``entry``: policy-directory path → source."""
    if entry["kind"] == "huggingface":
        return {f"{entry['dir']}/{name}": Path(src) / name for name in entry["files"]}
    return {str(entry["file"]): Path(src)}
