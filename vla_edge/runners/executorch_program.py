"""``ExecuTorchProgram``: one ExecuTorch ``.pte`` stage (XNNPACK) run on CPU.

Importing this module does not import torch. Running it does: ExecuTorch's
Python runtime (``executorch.extension.pybindings``) links libtorch and only
accepts and returns ``torch.Tensor`` (numpy arrays are refused), so the
program wrapper imports torch when the first program is opened and wraps the
numpy inputs with ``torch.from_numpy`` (no copy). It loads the bindings'
extension module ``_C`` directly rather than ``portable_lib``, whose import
also pulls in the ``executorch.exir`` compiler (measured here: about 3x the
import time and +130 MiB; ``vla-edge bench latency`` records both). The C++
runtime itself does not need torch; a deployment that must avoid it would
call the runtime through a small native shim instead of these bindings.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np

T = TypeVar("T")

# What the runtime's C++ thread-pool reset logs on every call
# (``[cpuinfo_utils.cpp:71] Reading file ...``, ``[threadpool.cpp:66] Resetting
# threadpool to 1 threads.``): progress lines, not problems.
_RUNTIME_CHATTER = re.compile(r"^\[(cpuinfo_utils|threadpool)\.cpp:\d+\] ")

# ExecuTorch ScalarType codes -> numpy dtype names
_ET_DTYPES = {6: "float32", 4: "int64", 3: "int32", 5: "float16", 1: "int8", 0: "uint8"}


def _bindings():  # noqa: ANN202 - the pybind11 extension module
    """ExecuTorch's pybind11 extension (libtorch is loaded first, as ``portable_lib`` does)."""
    import torch  # noqa: F401 - loads libtorch for the extension's symbols
    from executorch.extension.pybindings import _C

    return _C


def without_runtime_chatter(call: Callable[[], T]) -> T:
    """Run ``call`` with the C++ runtime's progress lines dropped.

    The bindings hand the runtime's log to Python's ``sys.stderr``, and C++
    code may also write to file descriptor 2 directly; both are captured for
    the call, and every other line written meanwhile (from any thread) is
    passed on to stderr afterwards.
    """
    target = sys.stderr
    target.flush()
    python_side = io.StringIO()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as native_side:
        os.dup2(native_side.fileno(), 2)
        try:
            with contextlib.redirect_stderr(python_side):
                return call()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            native_side.seek(0)
            text = python_side.getvalue() + native_side.read().decode(errors="replace")
            for line in text.splitlines(keepends=True):
                if not _RUNTIME_CHATTER.match(line):
                    target.write(line)
            target.flush()


def set_executorch_threads(threads: int) -> None:
    """Resize ExecuTorch's process-wide CPU thread pool (never while a program runs)."""
    bindings = _bindings()
    without_runtime_chatter(lambda: bindings._unsafe_reset_threadpool(int(threads)))


class ExecuTorchProgram:
    """One ``.pte`` program's ``forward`` method."""

    def __init__(self, path: Path, threads: int | None = None) -> None:
        import torch

        bindings = _bindings()
        if threads is not None:
            set_executorch_threads(threads)
        self._torch = torch
        self.module = bindings._load_for_executorch(str(path))
        self._meta = self.module.method_meta("forward")

    def run(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """Every output for ``inputs`` (contiguous numpy arrays), copied to numpy."""
        tensors = [self._torch.from_numpy(np.ascontiguousarray(x)) for x in inputs]
        return [t.numpy().copy() for t in self.module.forward(tensors)]

    def io(self) -> tuple[list[tuple[tuple[int, ...], str]], list[tuple[tuple[int, ...], str]]]:
        """``(shape, dtype)`` of the method's inputs and outputs."""

        def spec(info: object) -> tuple[tuple[int, ...], str]:
            code = int(info.dtype())
            return tuple(int(s) for s in info.sizes()), _ET_DTYPES.get(code, f"scalar_type_{code}")

        meta = self._meta
        inputs = [spec(meta.input_tensor_meta(i)) for i in range(meta.num_inputs())]
        outputs = [spec(meta.output_tensor_meta(i)) for i in range(meta.num_outputs())]
        return inputs, outputs
