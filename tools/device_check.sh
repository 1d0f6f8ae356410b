#!/usr/bin/env bash
# The GPU checks of the torch backend, as one prepared run on a machine with an NVIDIA GPU
# (the device machine lent to some sessions: torch with CUDA, no pydantic, nothing to
# download). Wheels this repository needs and the machine lacks travel in .whl/ (pydantic,
# pydantic-core, annotated-types, typing-inspection, transformers 5.24); results go to $OUT.
#
#   bash tools/device_check.sh            # on the GPU machine, from the repository root
#
# Its steps' timeouts add up to 570 s, inside the device tool's 600 s per command.
#
# The wheels, fetched here for the GPU machine's Python 3.12 (into an ignored folder):
#   echo /.whl/ >> .git/info/exclude
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 \
#     --implementation cp --platform manylinux_2_17_x86_64 -d .whl transformers==5.24.0 \
#     pydantic==2.14.4 pydantic-core==2.50.5 annotated-types typing-inspection
#
# 1. the CUDA tests of the suite (each stage captured as a CUDA graph, fp32 and bf16,
#    against the CPU chunk; a whole SmolVLA chunk as one graph);
# 2. vla-edge bench latency --device cuda: the bundled model and, at full size, pi0 / pi05 (1 and 3 cameras) and
#    SmolVLA (1 and 2), float32 and bfloat16, CUDA graphs and eager, parity against the CPU
#    float32 reference, peak GPU memory, achieved rates against the measured GEMM / copy
#    peaks -> $OUT/bench_latency_cuda.json;
# 3. the same for GR00T N1.7 at full size (1 camera, CUDA graphs) ->
#    $OUT/bench_latency_cuda_groot.json (last: the time left after the others).
set -uo pipefail
OUT=${OUT:-out/device}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD
fi
nvidia-smi > "$OUT/nvidia_smi.txt" 2>&1
python3 -c "import torch, transformers, pydantic; print(torch.__version__, torch.version.cuda, transformers.__version__, pydantic.__version__, torch.cuda.get_device_name(0))"
timeout 150 python3 -m pytest -q -p no:cacheprovider -o addopts="" \
    test/test_pi0_device.py test/test_smolvla_device.py test/test_torch_device.py \
    test/test_bundled_device.py 2>&1 | tee "$OUT/cuda_tests.log" | tail -15
timeout 300 python3 -c "
import sys
from vla_edge.cli import main
sys.exit(main(['bench', 'latency', '--device', 'cuda', '--arch', 'bundled,pi0,pi05,smolvla',
               '--size', 'full', '--eager', '--json', '$OUT/bench_latency_cuda.json']))
" 2>&1 | tee "$OUT/bench_latency_cuda.log" | grep -v AttentionInterface
timeout 120 python3 -c "
import sys
from vla_edge.cli import main
sys.exit(main(['bench', 'latency', '--device', 'cuda', '--arch', 'groot', '--size', 'full',
               '--json', '$OUT/bench_latency_cuda_groot.json']))
" 2>&1 | tee "$OUT/bench_latency_cuda_groot.log" | grep -v AttentionInterface
