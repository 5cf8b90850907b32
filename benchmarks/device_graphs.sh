#!/usr/bin/env bash
# The one prepared GPU call for CUDA graphs: trm against its peers at every shape, with
# runtime.cuda_graphs off and then on, and the graph pool's memory against its estimate.
#
# Usage, on a machine with an NVIDIA GPU and a CUDA build of torch:
#   bash benchmarks/device_graphs.sh OUT REFERENCE
# OUT: a folder for the documents; REFERENCE: a TinyRecursiveModels checkout (the official
# code). trm's requirements that the machine lacks are installed from wheels in .whl/ when
# that folder exists (no network there; benchmarks/device_wheels.sh downloads them here).
#
# It writes, in about 8 minutes on one H100-class GPU (estimated from the earlier peers run,
# benchmarks/results/peers-*-h100.json: 2-3 minutes a pass of the three shapes):
#   OUT/peers-graphs-off.json, OUT/peers-graphs-on.json  benchmarks/peers.py at the three
#       shapes (Sudoku MLP, 900-token attention, quickstart), trm compiled with CUDA graphs
#       off / on, beside the official code (bf16, compiled) and lucidrains', windows
#       alternated, MFU against the measured GEMM peak;
#   OUT/bench-quickstart-graphs-{off,on}.json  trm bench --json of the quickstart (samples/s,
#       MFU against the datasheet, compile seconds and cache);
#   OUT/estimate-quickstart-graphs-on.json  trm estimate --json with graphs on (the pool item),
#       to hold against the bench's measured peak;
#   OUT/log  everything printed.
# Not yet run: no GPU was lent to the session that wrote it (docs/performance.md says so).
set -uo pipefail
out=${1:?give OUT, a folder for the documents}
reference=${2:?give REFERENCE, a TinyRecursiveModels checkout}
mkdir -p "$out"
exec > >(tee "$out/log") 2>&1
export PYTHONUNBUFFERED=1 TRM_COMPILE_LEDGER=off
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl \
        && export PYTHONPATH="/tmp/site:${PYTHONPATH:-}"
fi
python3 -m pip install -q --no-index --no-deps --no-build-isolation -e . || exit 1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv || true
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0))" || exit 1
for graphs in off on; do
    python3 benchmarks/peers.py --reference "$reference" --rounds 3 --steps 5 --warmup 3 \
        --set runtime.compile=on --set "runtime.cuda_graphs=$graphs" \
        --out "$out/peers-graphs-$graphs.json" || echo "peers with graphs $graphs failed"
    python3 -m trm bench quickstart --json --steps 20 --warmup 5 \
        --set runtime.compile=on --set "runtime.cuda_graphs=$graphs" \
        > "$out/bench-quickstart-graphs-$graphs.json" || echo "bench with graphs $graphs failed"
done
python3 -m trm estimate quickstart --json --set runtime.compile=on --set runtime.cuda_graphs=on \
    > "$out/estimate-quickstart-graphs-on.json" || echo "estimate failed"
