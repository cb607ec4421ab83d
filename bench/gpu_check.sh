#!/usr/bin/env bash
# The checks that need a CUDA GPU, in one go: the `gpu`-marked tests (NCCL compress hooks,
# fp16 + GradScaler, `auto` precision, Trainer on CUDA) and the GPU step benchmark.
#   bench/gpu_check.sh [RESULTS_DIR]      (needs torch with CUDA, pydantic, pytest)
set -uo pipefail
results=${1:-gpu-results}
mkdir -p "$results"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
status=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$results/gpu.txt"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" \
  | tee -a "$results/gpu.txt"
python3 -m pytest --noconftest -p no:cacheprovider -m gpu tests/gpu -v 2>&1 \
  | tee "$results/gpu-tests.log" || status=1
python3 -m bench.step --gpu --runs 3 --steps 20 --warmup 5 2>&1 \
  | tee "$results/step-gpu.log" || status=1
exit $status
