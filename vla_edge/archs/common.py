"""What every architecture shares: key checks, safetensors I/O.

(A stage's tensor declaration, :class:`~vla_edge.archs.host.TensorSpec`, is in
:mod:`vla_edge.archs.host`.)

* :class:`KeyReport`, :func:`compare_keys`, :func:`format_key_report`: a checkpoint's keys
  and shapes against the layout a config expects, and the
  :class:`~vla_edge.core.errors.CheckpointKeysError` message naming what does not fit.
* :func:`read_header`, :func:`read_tensors`, :func:`copy_tensors`: safetensors files read
  from the header alone, read in part, or rewritten under new names by streaming the
  bytes (a full-size checkpoint is gigabytes and is never held in memory).
* :class:`ImportOptions` and :class:`Checkpoint`: what ``vla-edge import`` passes to an
  architecture's ``read_checkpoint`` and what it gets back (:mod:`vla_edge.archs.registry`).
* :func:`without_default_init`, :func:`load_tensors_into`: a model built without its
  initialisers' draws (its memory allocated but not written, so not resident) and filled
  one tensor at a time from a file, all of it or one part (a stage): a full-size model is
  never held twice, and a process exporting one stage holds only that stage's weights.
* :func:`count_parameters`: a model's size, as the published parameter counts are stated.
"""

from __future__ import annotations

import contextlib
import json
import re
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from safetensors import SafetensorError, safe_open

from vla_edge.core.errors import CheckpointError, CheckpointKeysError

if TYPE_CHECKING:
    from torch import nn

WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "config.json"

KEYS_SHOWN = 12
"""Keys listed per kind in a :class:`CheckpointKeysError` message (the counts are all given)."""
COPY_BLOCK_BYTES = 64 << 20
"""Bytes copied at a time when rewriting the weights (:func:`copy_tensors`)."""
DTYPE_NAMES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16", "F64": "float64"}
"""safetensors dtype names → torch's."""


# -- keys ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KeyReport:
    """How a checkpoint's keys compare with the expected layout."""

    missing: tuple[str, ...]
    unexpected: tuple[str, ...]
    misshaped: tuple[tuple[str, tuple[int, ...], tuple[int, ...]], ...]
    """(key, found shape, expected shape)."""

    @property
    def ok(self) -> bool:
        """Whether the keys and shapes match exactly."""
        return not (self.missing or self.unexpected or self.misshaped)


def compare_keys(
    found: Mapping[str, tuple[int, ...]], expected: Mapping[str, tuple[int, ...]]
) -> KeyReport:
    """Missing, unexpected and mis-shaped keys of ``found`` against ``expected``."""
    return KeyReport(
        missing=tuple(sorted(set(expected) - set(found))),
        unexpected=tuple(sorted(set(found) - set(expected))),
        misshaped=tuple(
            (k, tuple(found[k]), tuple(expected[k]))
            for k in sorted(set(found) & set(expected))
            if tuple(found[k]) != tuple(expected[k])
        ),
    )


def format_key_report(report: KeyReport, source: str, limit: int = KEYS_SHOWN) -> str:
    """A :class:`CheckpointKeysError` message: counts of each kind, the first ``limit`` keys."""

    def listed(items: Sequence[str]) -> str:
        shown = ", ".join(items[:limit])
        more = len(items) - limit
        return shown + (f", ... and {more} more" if more > 0 else "")

    counts = (
        f"{len(report.missing)} missing, {len(report.unexpected)} unexpected, "
        f"{len(report.misshaped)} mis-shaped"
    )
    lines = [f"{source}: the keys do not fit ({counts})"]
    if report.missing:
        lines.append(f"  missing ({len(report.missing)}): {listed(report.missing)}")
    if report.unexpected:
        lines.append(f"  unexpected ({len(report.unexpected)}): {listed(report.unexpected)}")
    if report.misshaped:
        items = [f"{k} {list(found)} (expected {list(exp)})" for k, found, exp in report.misshaped]
        lines.append(f"  mis-shaped ({len(items)}): {listed(items)}")
    return "\n".join(lines)


def layer_count(shapes: Mapping[str, Any], prefix: str) -> int | None:
    """``1 + max(i)`` over the keys ``<prefix><i>.*`` (``None`` when there are none)."""
    pattern = re.compile(re.escape(prefix) + r"(\d+)\.")
    found = {int(m.group(1)) for k in shapes if (m := pattern.match(k))}
    return max(found) + 1 if found else None


# -- files -----------------------------------------------------------------------------------


def read_json(path: Path, what: str, error: type[CheckpointError] = CheckpointError) -> Any:
    """A JSON file's content; absent or unreadable is ``error`` naming ``what``."""
    if not path.is_file():
        raise error(f"{path}: {what} not found")
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise error(f"{path}: {what} is not readable JSON: {exc}") from exc


def read_config_json(path: Path) -> dict[str, Any]:
    """A checkpoint directory's ``config.json`` (an object)."""
    if not path.is_dir():
        raise CheckpointError(f"{path}: checkpoint directory not found")
    config_json = read_json(path / CONFIG_NAME, CONFIG_NAME)
    if not isinstance(config_json, dict):
        raise CheckpointError(f"{path / CONFIG_NAME}: top level must be an object")
    return config_json


def read_header(path: Path) -> dict[str, tuple[tuple[int, ...], str]]:
    """``key -> (shape, dtype)`` of a safetensors file, from its header only."""
    if not path.is_file():
        raise CheckpointError(f"{path}: weights file not found")
    try:
        with safe_open(str(path), framework="pt") as f:
            out = {}
            for key in f.keys():
                sl = f.get_slice(key)
                out[key] = (tuple(int(d) for d in sl.get_shape()), str(sl.get_dtype()))
            return out
    except (SafetensorError, OSError, ValueError) as exc:
        raise CheckpointError(f"{path}: not a readable safetensors file: {exc}") from exc


def read_tensors(
    path: Path,
    keys: Sequence[str] | None = None,
    error: type[CheckpointError] = CheckpointError,
) -> dict[str, np.ndarray]:
    """Some (``keys``) or all tensors of a safetensors file as numpy arrays."""
    if not path.is_file():
        raise error(f"{path}: file not found")
    try:
        with safe_open(str(path), framework="numpy") as f:
            return {k: f.get_tensor(k) for k in (f.keys() if keys is None else keys)}
    except (SafetensorError, OSError, ValueError) as exc:
        raise error(f"{path}: not a readable safetensors file: {exc}") from exc


def weights_dtypes(
    header: Mapping[str, tuple[tuple[int, ...], str]], keys: Sequence[str]
) -> tuple[str, ...]:
    """The sorted torch dtype names of ``keys`` in ``header``."""
    return tuple(sorted({DTYPE_NAMES.get(header[k][1], header[k][1]) for k in keys}))


def _raw_header(path: Path) -> tuple[dict[str, Any], int]:
    """A safetensors file's JSON header and where its data starts (plain JSON, no pickle)."""
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(length)), 8 + length


def copy_tensors(
    src_path: Path,
    key_map: Mapping[str, str],
    dst: Path,
    metadata: Mapping[str, str] | None = None,
) -> None:
    """Write ``src_path``'s tensors ``key_map[new]`` as ``new`` to ``dst``, streaming.

    Each tensor's bytes are copied unchanged (same dtype, same byte order) in blocks of
    ``COPY_BLOCK_BYTES``; the result is checked by reading its header back.
    """
    header, src_start = _raw_header(src_path)
    entries: dict[str, Any] = {}
    spans = []
    offset = 0
    for ours in sorted(key_map):
        info = header[key_map[ours]]
        begin, end = (int(x) for x in info["data_offsets"])
        entries[ours] = {
            "dtype": info["dtype"],
            "shape": info["shape"],
            "data_offsets": [offset, offset + end - begin],
        }
        spans.append((src_start + begin, end - begin))
        offset += end - begin
    if metadata:
        entries["__metadata__"] = dict(metadata)
    text = json.dumps(entries, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(src_path, "rb") as src, open(dst, "wb") as out:
        out.write(struct.pack("<Q", len(text)))
        out.write(text)
        for start, size in spans:
            src.seek(start)
            while size:
                block = src.read(min(size, COPY_BLOCK_BYTES))
                if not block:
                    raise CheckpointError(f"{src_path}: truncated tensor data")
                out.write(block)
                size -= len(block)
    written = read_header(dst)
    if set(written) != set(key_map):
        raise CheckpointError(
            f"{dst}: written header lists {len(written)} tensors, not the checked ones"
        )


# -- what an import passes around ------------------------------------------------------------


@dataclass(frozen=True)
class ImportOptions:
    """What the user may say about a checkpoint where its files are silent or wrong.

    Every field left ``None`` is read from the checkpoint; a field the checkpoint cannot
    give is a :class:`CheckpointError` naming the option to pass. Each architecture reads
    some of them (:attr:`vla_edge.archs.registry.Architecture.options`).
    """

    architecture: str | None = None
    asset_id: str | None = None
    paligemma_variant: str | None = None
    expert_variant: str | None = None
    vision_heads: int | None = None
    text_heads: int | None = None
    action_horizon: int | None = None
    discrete_state_input: bool | None = None
    delta_actions: tuple[int, ...] | None = None
    """Action dimensions the model predicts relative to the state (openpi ``DeltaActions``)."""
    embodiment: str | None = None
    """The embodiment tag, for architectures with per-embodiment weights and statistics
    (GR00T: a weight slice and a statistics entry per tag)."""
    tokenizer: str | None = None
    """Not a flag: ``vla-edge import`` sets it to its tokenizer, for an architecture whose
    config numbers its prompt layout with the tokenizer's ids (GR00T N1.5)."""


@dataclass(frozen=True)
class Checkpoint:
    """A checked checkpoint: its config, statistics and where each tensor lives."""

    path: Path
    layout: str
    architecture: str
    config: Any
    """The architecture's config (a pydantic model: ``Pi0Config``, ``SmolVLAConfig``)."""
    normalisation: dict[str, Any]
    weights_path: Path
    key_map: dict[str, str]
    """This package's key → the file's key."""
    weights_dtypes: tuple[str, ...]
    asset_id: str | None = None
    stats_file: str | None = None
    """The file(s) the statistics came from, relative to :attr:`path`."""
    config_json: dict[str, Any] = field(default_factory=dict)
    action_feature_dim: int | None = None
    """The real action width the checkpoint declares (LeRobot ``output_features``), if any;
    the dimensions beyond it are padding."""


# -- loading a policy directory's weights ----------------------------------------------------


def policy_weights_path(policy_dir: Any) -> Path:
    """The ``model.safetensors`` of a ``PolicyDir``, a policy directory's path or the file."""
    weights_path = Path(getattr(policy_dir, "weights_path", policy_dir))
    if weights_path.is_dir():
        weights_path = weights_path / WEIGHTS_NAME
    return weights_path


def load_state_strictly(model: Any, tensors: Mapping[str, Any], source: str) -> None:
    """``model.load_state_dict(tensors)``; a missing or unexpected key is a CheckpointKeysError."""
    result = model.load_state_dict(tensors, strict=False)
    if result.missing_keys or result.unexpected_keys:
        raise CheckpointKeysError(
            format_key_report(
                KeyReport(tuple(result.missing_keys), tuple(result.unexpected_keys), ()),
                source,
            )
        )


_INITIALISED = ("Linear", "Embedding", "Conv2d", "LayerNorm")
"""``torch.nn`` modules whose ``reset_parameters`` draws the default initialisation."""


@contextlib.contextmanager
def without_default_init() -> Iterator[None]:
    """Modules built inside get their memory but not their default initialisers' draws.

    The memory of a large parameter is then allocated but never written, so it is not
    resident until something is loaded into it (a 3.3 B-parameter model's kaiming draws
    also take minutes).
    """
    from torch import nn
    from transformers.initialization import no_init_weights

    classes = [getattr(nn, name) for name in _INITIALISED]
    saved = {cls: cls.reset_parameters for cls in classes}
    for cls in classes:
        cls.reset_parameters = lambda self: None  # type: ignore[method-assign]
    try:
        with no_init_weights():
            yield
    finally:
        for cls, method in saved.items():
            cls.reset_parameters = method  # type: ignore[method-assign]


def load_tensors_into(
    model: Any, path: Path, file_keys: Mapping[str, str], only: Any = None
) -> int:
    """Copy a safetensors file's tensors into ``model``'s state, one tensor at a time.

    Args:
        file_keys: each of the model's state-dict keys -> the file's key holding its value
            (every key of ``model.state_dict()`` must be there, and only those).
        only: a part of ``model`` (a module sharing its parameters, a stage): just the
            tensors it holds are read; the rest of the model is left as it is.

    Each tensor is read with plain file reads (not a memory map, whose pages would count
    as this process's memory until the file closes) and cast to its parameter's dtype as
    it is copied, so the peak is the model plus one tensor, not the model plus the file.

    Returns:
        How many tensors were read.

    Raises:
        CheckpointKeysError: a key of the model without a value, or a value for no key.
        CheckpointError: a truncated file, or a dtype this reader does not know.
    """
    import torch

    target = model.state_dict(keep_vars=True)
    missing = tuple(sorted(set(target) - set(file_keys)))
    unexpected = tuple(sorted(set(file_keys) - set(target)))
    if missing or unexpected:
        raise CheckpointKeysError(format_key_report(KeyReport(missing, unexpected, ()), str(path)))
    if only is not None:
        held = {id(t) for t in (*only.parameters(), *only.buffers())}
        target = {k: t for k, t in target.items() if id(t) in held}
    header, start = _raw_header(path)
    with open(path, "rb") as f, torch.no_grad():
        for key, tensor in target.items():
            info = header[file_keys[key]]
            dtype = DTYPE_NAMES.get(info["dtype"])
            if dtype is None:
                raise CheckpointError(f"{path}: {file_keys[key]} has dtype {info['dtype']!r}")
            begin, end = (int(x) for x in info["data_offsets"])
            f.seek(start + begin)
            data = bytearray(end - begin)
            if f.readinto(data) != len(data):
                raise CheckpointError(f"{path}: truncated tensor data of {file_keys[key]}")
            value = torch.frombuffer(data, dtype=getattr(torch, dtype)) if data else None
            if value is not None:
                tensor.copy_(value.reshape(info["shape"]))
            del data, value
    return len(target)


def count_parameters(model: nn.Module) -> int:
    """Distinct parameters of ``model`` (``parameters()`` yields a shared or tied one once)."""
    return sum(p.numel() for p in model.parameters())


def copy_weights(
    checkpoint: Checkpoint, dst: Path, metadata: Mapping[str, str] | None = None
) -> None:
    """Write a checked checkpoint's tensors under this package's names to ``dst``, streaming.

    :func:`copy_tensors` of :attr:`Checkpoint.key_map`: each tensor's bytes unchanged, so a
    full-size checkpoint is rewritten without holding it in memory.
    """
    copy_tensors(checkpoint.weights_path, checkpoint.key_map, dst, metadata)


__all__ = [
    "CONFIG_NAME",
    "Checkpoint",
    "ImportOptions",
    "KeyReport",
    "WEIGHTS_NAME",
    "compare_keys",
    "copy_tensors",
    "copy_weights",
    "count_parameters",
    "load_state_strictly",
    "load_tensors_into",
    "policy_weights_path",
    "format_key_report",
    "layer_count",
    "read_config_json",
    "read_header",
    "read_json",
    "read_tensors",
    "without_default_init",
]
