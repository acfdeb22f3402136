#!/usr/bin/env bash
# The trainer's GPU check, one line per figure, in under 8 minutes on one H100/H200 node:
#   benchmarks/gpu_check.sh            # bf16 1b step with flash SDPA asserted, MFU, peak
#                                      # memory with/without activation checkpointing,
#                                      # fp16 + GradScaler, FSDP on every GPU, tp=2 on
#                                      # 2 GPUs when there are 2 or more
#   benchmarks/gpu_check.sh --dry-run  # the same on CPU with tiny shapes (tests run it)
# PYTHON (default .venv/bin/python) comes from the environment; run from the repository root.
set -euo pipefail
PYTHON=${PYTHON:-.venv/bin/python}
DRY=()
[[ "${1:-}" == "--dry-run" ]] && DRY=(--dry-run)
export PYTHONPATH=${PYTHONPATH:-$PWD}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
if [[ ${#DRY[@]} -gt 0 ]]; then
  GPUS=0
  NPROC=2  # two gloo ranks on CPU
else
  GPUS=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  [[ "$GPUS" -ge 1 ]] || { echo "error: no GPU found (nvidia-smi -L); use --dry-run" >&2; exit 2; }
  NPROC=$GPUS
fi
"$PYTHON" benchmarks/gpu_check.py single "${DRY[@]}"
GPU_CHECK_DIR=$(mktemp -d)
trap 'rm -rf "$GPU_CHECK_DIR"' EXIT
GPU_CHECK_DIR=$GPU_CHECK_DIR "$PYTHON" -m torch.distributed.run --standalone \
  --nproc_per_node "$NPROC" benchmarks/gpu_check.py fsdp "${DRY[@]}"
if [[ ${#DRY[@]} -gt 0 || "$GPUS" -ge 2 ]]; then
  GPU_CHECK_DIR=$GPU_CHECK_DIR/tp "$PYTHON" -m torch.distributed.run --standalone \
    --nproc_per_node 2 benchmarks/gpu_check.py tp "${DRY[@]}"
else
  echo "tp: skipped (tp=2 needs 2 GPUs; $GPUS present)"
fi
echo "gpu check: done in ${SECONDS}s"
