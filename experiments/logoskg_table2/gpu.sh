#!/usr/bin/env bash
# GPU figures for LogosKG Table 2 in one command: the CUDA parity tests, then numba (single
# queries, CPU), torch_cuda (single queries) and torch_cuda@50 (batches of 50) side by side on
# the UMLS-scale synthetic KG (407k entities, 3.4M triples), k = 1..5, per-hop triples returned.
#
# The JSON's speedup_vs.batched["torch_cuda@50"] holds both ratios, per query and per k:
#   vs_best_cpu_single  the fastest single-query CPU engine / torch_cuda@50
#   vs_single           torch_cuda (one query at a time) / torch_cuda@50
#
# Meant for a CUDA machine whose python already has a CUDA torch, numpy, scipy, numba, networkx
# and pytest and cannot reach a package index. What it lacks (hydra-core, omegaconf, antlr4)
# is installed from wheels in $WHEELS, made beforehand on a machine with network access:
#   python -m pip wheel --no-deps -w .whl hydra-core==1.3.8 omegaconf==2.3.1 antlr4-python3-runtime==4.9.3
#
# Usage (repo root):  bash experiments/logoskg_table2/gpu.sh [hydra overrides...]
# Env: OUT (output folder, default experiments/logoskg_table2/gpu_out), PY (default python3),
#      WHEELS (default .whl), BACKENDS (default numba,torch_cuda,torch_cuda@50).
set -euo pipefail
PY=${PY:-python3}
OUT=${OUT:-experiments/logoskg_table2/gpu_out}
WHEELS=${WHEELS:-.whl}
BACKENDS=${BACKENDS:-numba,torch_cuda,torch_cuda@50}
mkdir -p "$OUT"

if ! "$PY" -c "import hydra, omegaconf" 2>/dev/null; then
  if [ ! -d "$WHEELS" ]; then
    echo "gpu.sh: hydra-core/omegaconf missing and no wheel folder $WHEELS (see the header of this script)" >&2
    exit 2
  fi
  "$PY" -m pip install -q --no-index --find-links "$WHEELS" hydra-core omegaconf antlr4-python3-runtime
fi

"$PY" - <<'EOF' | tee "$OUT/machine.txt"
import os, platform, torch
print("python", platform.python_version(), "| torch", torch.__version__, "| cpus", os.cpu_count())
print("cuda", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")
EOF

# `|| true`: a failing parity test is recorded in gpu_tests.txt and the figures are still taken.
"$PY" -m pytest -q -p no:cacheprovider -m gpu tests/retrieval 2>&1 | tee "$OUT/gpu_tests.txt" || true

"$PY" -m kgreason.bench --config-name bench/logoskg_table2 "backends=[$BACKENDS]" reference=numba \
  queries=50 out="$OUT/bench_gpu.json" "$@" 2>&1 | tee "$OUT/bench_gpu.log"
