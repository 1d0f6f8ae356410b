"""vla_edge: Vision-Language-Action policies on edge computers under ROS 2, safely."""

import logging as _logging
import os as _os
import warnings as _warnings

__version__ = "0.1.0"

# Library noise every command would print otherwise, silenced at its source:
# torchao logs a warning for each CUDA-only kernel library it cannot load on a
# CPU machine; torch's pytree logs a deprecation for every Enum that torchao
# registers; transformers draws a progress bar while it loads the language
# encoder's weights. While exporting, torch.onnx logs every torchvision op it
# skips (torchvision is not a dependency), onnxscript's constant folding logs
# each node it leaves unfolded, and torch's pickling of tree specs warns about
# its own deprecated LeafSpec. Errors from these libraries still show.
for _name in (
    "torchao",
    "torch.utils._pytree",
    "torch.onnx._internal.exporter._registration",
    "onnxscript.optimizer._constant_folding",
):
    _logging.getLogger(_name).setLevel(_logging.ERROR)
_warnings.filterwarnings(
    "ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning
)
_os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
