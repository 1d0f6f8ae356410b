"""``OnnxProgram``: one ``.onnx`` stage run with ONNX Runtime (no torch).

The execution providers are configurable (``InferenceConfig.onnx_providers``):
each entry is ``'Name[;key=value...]'``, in priority order, for instance
``'TensorrtExecutionProvider;trt_fp16_enable=True'``, ``'CUDAExecutionProvider;device_id=0'``
or ``'CPUExecutionProvider'``. A provider asked for is either used or refused
with :class:`~vla_edge.core.errors.ExecutionProviderError`: never a silent
fallback to the CPU.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from vla_edge.core.errors import ExecutionProviderError, ManifestMismatchError

_ORT_DTYPES = {"tensor(float)": "float32", "tensor(int64)": "int64", "tensor(float16)": "float16"}

DEFAULT_PROVIDERS: tuple[str, ...] = ("CPUExecutionProvider",)
"""The providers of ``providers=None``: ONNX Runtime's CPU provider alone."""

PROVIDERS_FIELD = "onnx_providers"
"""The config field the provider entries come from, named in every error."""

_ENTRY_FORM = "'Name[;key=value...]'"
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")

JETSON_HINT = (
    "on a Jetson, install the onnxruntime-gpu wheel built for your JetPack (NVIDIA's Jetson "
    "wheels) in place of PyPI's onnxruntime, which is CPU only: see docs/HIL.md, "
    "'On the Jetson's GPU'"
)
"""How a Jetson user gets the CUDA and TensorRT providers, said by every refusal."""


def parse_providers(entries: Sequence[str]) -> list[tuple[str, dict[str, str]]]:
    """The provider names and options of ``entries``, in their priority order.

    Args:
        entries: one ``'Name[;key=value...]'`` string per provider, e.g.
            ``'CUDAExecutionProvider;device_id=0'``. Whitespace around the name,
            a key or a value is dropped; a value keeps any ``=`` after the first.

    Returns:
        ``(name, options)`` per entry, the options as ONNX Runtime takes them
        (strings).

    Raises:
        ExecutionProviderError: ``entries`` is a bare string or empty; an entry
            is not a string, has an empty or malformed name or option, an option
            without ``=`` or without a value, repeats an option key, or names a
            provider an earlier entry already names.
    """
    if isinstance(entries, str) or not isinstance(entries, Sequence):
        raise ExecutionProviderError(
            f"field {PROVIDERS_FIELD} = {entries!r}: expected a list of {_ENTRY_FORM} entries"
        )
    if not entries:
        raise ExecutionProviderError(
            f"field {PROVIDERS_FIELD} = []: expected at least one {_ENTRY_FORM} entry"
        )
    parsed: list[tuple[str, dict[str, str]]] = []
    first_index: dict[str, int] = {}
    for index, entry in enumerate(entries):
        where = f"field {PROVIDERS_FIELD}[{index}] = {entry!r}"
        if not isinstance(entry, str):
            raise ExecutionProviderError(f"{where}: expected a string {_ENTRY_FORM}")
        name, *parts = (part.strip() for part in entry.split(";"))
        if not name:
            raise ExecutionProviderError(f"{where}: empty provider name, expected {_ENTRY_FORM}")
        if not _NAME.fullmatch(name):
            raise ExecutionProviderError(
                f"{where}: bad provider name {name!r}, expected {_ENTRY_FORM} with a name "
                "of letters, digits and '_' such as 'CUDAExecutionProvider'"
            )
        if name in first_index:
            raise ExecutionProviderError(
                f"{where}: duplicate provider {name!r}, already named by "
                f"{PROVIDERS_FIELD}[{first_index[name]}]; each provider appears once"
            )
        first_index[name] = index
        options: dict[str, str] = {}
        for part in parts:
            key, value = _parse_option(part, where)
            if key in options:
                raise ExecutionProviderError(
                    f"{where}: duplicate option key {key!r} of {name!r}; each key appears once"
                )
            options[key] = value
        parsed.append((name, options))
    return parsed


def _parse_option(part: str, where: str) -> tuple[str, str]:
    """``(key, value)`` of one ``key=value`` part of a provider entry."""
    if not part:
        raise ExecutionProviderError(f"{where}: empty option (a stray ';'), expected {_ENTRY_FORM}")
    if "=" not in part:
        raise ExecutionProviderError(
            f"{where}: option key {part!r} without '=', expected key=value in {_ENTRY_FORM}"
        )
    key, value = (s.strip() for s in part.split("=", 1))
    if not _KEY.fullmatch(key):
        raise ExecutionProviderError(
            f"{where}: bad option key {key!r} in {part!r}, expected key=value in {_ENTRY_FORM} "
            "with a key of letters, digits, '_' and '.'"
        )
    if not value:
        raise ExecutionProviderError(
            f"{where}: option key {key!r} without a value, expected key=value in {_ENTRY_FORM}"
        )
    return key, value


def check_providers(
    providers: Sequence[tuple[str, dict[str, str]]],
    available: Sequence[str] | None = None,
) -> None:
    """Refuse a provider this onnxruntime build lacks.

    Args:
        providers: :func:`parse_providers`'s result.
        available: the build's providers; ``None``: ``onnxruntime.get_available_providers()``.

    Raises:
        ExecutionProviderError: a provider is not in ``available``; the message
            names it, lists the available ones and says how a Jetson gets CUDA
            and TensorRT.
    """
    if available is None:
        import onnxruntime as ort

        available = ort.get_available_providers()
    for name, _ in providers:
        if name not in available:
            raise ExecutionProviderError(
                f"field {PROVIDERS_FIELD}: execution provider {name!r} is not in this "
                f"onnxruntime build ({_build()}; available: {list(available)}); {JETSON_HINT}"
            )


def _build() -> str:
    """The installed onnxruntime's distribution and version, for error messages."""
    import onnxruntime as ort

    return f"onnxruntime {ort.__version__}, a {ort.get_device()} build"


class OnnxProgram:
    """One ``.onnx`` stage in an ``InferenceSession`` (sequential, ``threads`` intra-op).

    Args:
        path: the ``.onnx`` file.
        threads: intra-op threads (``None``: ONNX Runtime's default).
        input_names: the manifest's input names, checked against the program's.
        output_names: the manifest's output names (``None``: not checked).
        stage: the stage named in errors (``None``: the file's stem).
        providers: execution providers in priority order, each
            ``'Name[;key=value...]'`` (see :func:`parse_providers`); ``None``:
            the CPU provider alone.

    Attributes:
        providers: the providers the session runs on, in priority order (ONNX
            Runtime appends the CPU provider when it is not asked for).

    Raises:
        ManifestMismatchError: the program's input (or output) names differ from
            ``input_names`` (``output_names``).
        ExecutionProviderError: ``providers`` is malformed, names a provider this
            onnxruntime build lacks, or one that failed to initialise (missing
            CUDA, cuDNN or TensorRT libraries, a bad option).
    """

    def __init__(
        self,
        path: Path,
        threads: int | None,
        input_names: list[str],
        output_names: list[str] | None = None,
        stage: str | None = None,
        providers: Sequence[str] | None = None,
    ) -> None:
        import onnxruntime as ort

        asked = parse_providers(DEFAULT_PROVIDERS if providers is None else providers)
        check_providers(asked)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.inter_op_num_threads = 1
        if threads is not None:
            options.intra_op_num_threads = int(threads)
        stage = stage or path.stem
        names_asked = [name for name, _ in asked]
        try:
            # enable_fallback=0: a provider that fails raises instead of ORT
            # retrying the session on the CPU.
            self.session = ort.InferenceSession(
                str(path),
                sess_options=options,
                providers=names_asked,
                provider_options=[opts for _, opts in asked],
                enable_fallback=0,
            )
        except (RuntimeError, ValueError) as err:
            if names_asked == list(DEFAULT_PROVIDERS):
                raise
            raise ExecutionProviderError(
                f"field {PROVIDERS_FIELD} = {list(providers or ())}: onnxruntime could not "
                f"open program {path.name} (stage {stage}) with them: {err}"
            ) from err
        self.session.disable_fallback()  # nor at run time, when an older ORT ignores the kwarg
        self.providers: list[str] = list(self.session.get_providers())
        for name in names_asked:
            if name not in self.providers:
                raise ExecutionProviderError(
                    f"field {PROVIDERS_FIELD}: execution provider {name!r} is in this onnxruntime "
                    f"build but failed to initialise for program {path.name} (stage {stage}); "
                    f"the session got {self.providers}. Check that the CUDA, cuDNN and TensorRT "
                    "libraries match the ones the wheel was built for (onnxruntime logs the "
                    f"cause as a warning) and the provider's options; {JETSON_HINT}"
                )
        names = [i.name for i in self.session.get_inputs()]
        if names != list(input_names):
            raise ManifestMismatchError(
                f"field stages.{stage}.inputs names = {list(input_names)} in manifest.json, "
                f"but program {path.name} takes {names}"
            )
        outputs = [o.name for o in self.session.get_outputs()]
        if output_names is not None and outputs != list(output_names):
            raise ManifestMismatchError(
                f"field stages.{stage}.outputs names = {list(output_names)} in manifest.json, "
                f"but program {path.name} returns {outputs}"
            )
        self._input_names = names
        self._output_names = outputs

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """Every output for ``inputs`` (in the manifest's order)."""
        feeds = dict(zip(self._input_names, inputs, strict=True))
        return list(self.session.run(self._output_names, feeds))

    def io(self) -> tuple[list[tuple[tuple[int, ...], str]], list[tuple[tuple[int, ...], str]]]:
        """``(shape, dtype)`` of the session's inputs and outputs."""

        def spec(args: list) -> list[tuple[tuple[int, ...], str]]:
            return [(tuple(int(s) for s in a.shape), _ORT_DTYPES.get(a.type, a.type)) for a in args]

        return spec(self.session.get_inputs()), spec(self.session.get_outputs())
