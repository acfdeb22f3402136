#!/usr/bin/env bash
# One node, N processes (one per GPU):
#   trainer/launch/torchrun.sh pretrain trainer/configs/pretrain_1b.yaml [trainer args...]
# The config's mesh sets the number of ranks: dp x tp x pp when distributed.dp is given,
# else every GPU nvidia-smi lists (tp x pp without GPUs, 1 without a mesh). NPROC and
# PYTHON (default .venv/bin/python) come from the environment. Extra arguments go to the
# trainer (and --set overrides also to the mesh), e.g. --set distributed.tp=2.
set -euo pipefail
STAGE=${1:?usage: torchrun.sh pretrain|sft|dpo CONFIG.yaml [trainer args]}
CONFIG=${2:?usage: torchrun.sh pretrain|sft|dpo CONFIG.yaml [trainer args]}
shift 2
PYTHON=${PYTHON:-.venv/bin/python}
MESH=$("$PYTHON" -m trainer.parallel.mesh_shape "$CONFIG" "$@") || exit 2
read -r DP TP PP <<<"$MESH"
if [[ -z "${NPROC:-}" ]]; then
  if [[ "$DP" != auto ]]; then
    NPROC=$((DP * TP * PP))
  else
    NPROC=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
    [[ "$NPROC" -ge 1 ]] || NPROC=$((TP * PP))
  fi
fi
if ((NPROC % (TP * PP))); then
  echo "error: $NPROC ranks do not split into distributed.tp x distributed.pp = $TP x $PP;" \
    "set NPROC to a multiple of $((TP * PP))" >&2
  exit 2
fi
echo "torchrun.sh: $NPROC ranks, mesh dp=$((NPROC / (TP * PP))) tp=$TP pp=$PP" >&2
# One thread per rank for CPU-side work unless the caller chose otherwise.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
exec "$PYTHON" -m torch.distributed.run --standalone --nproc_per_node "$NPROC" \
  -m trainer "$STAGE" "$CONFIG" "$@"
