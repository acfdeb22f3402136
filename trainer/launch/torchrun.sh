#!/usr/bin/env bash
# One node, N processes (one per GPU):
#   trainer/launch/torchrun.sh pretrain trainer/configs/pretrain_1b.yaml [trainer args...]
# NPROC (default: number of GPUs nvidia-smi lists, else 1) and PYTHON (default
# .venv/bin/python) come from the environment. Extra arguments go to the trainer,
# e.g. --from-scratch or --set train.max_steps=100.
set -euo pipefail
STAGE=${1:?usage: torchrun.sh pretrain|sft|dpo CONFIG.yaml [trainer args]}
CONFIG=${2:?usage: torchrun.sh pretrain|sft|dpo CONFIG.yaml [trainer args]}
shift 2
PYTHON=${PYTHON:-.venv/bin/python}
if [[ -z "${NPROC:-}" ]]; then
  NPROC=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  [[ "$NPROC" -ge 1 ]] || NPROC=1
fi
# One thread per rank for CPU-side work unless the caller chose otherwise.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
exec "$PYTHON" -m torch.distributed.run --standalone --nproc_per_node "$NPROC" \
  -m trainer "$STAGE" "$CONFIG" "$@"
