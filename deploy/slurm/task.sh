#!/usr/bin/env bash
# One Slurm task of an asyncflow job (started by srun; see asyncflow.sbatch).
# Rank 0 is the chief (the training program); every other rank serves its task.
# Reads ASYNCFLOW_JOBS, ASYNCFLOW_PORT_BASE, ASYNCFLOW_CHECKPOINT_DIR and ASYNCFLOW_TOKEN.
set -euo pipefail
: "${ASYNCFLOW_JOBS:?set ASYNCFLOW_JOBS, such as {\"chief\": 1, \"ps\": 1, \"worker\": 2}}"
PORT_BASE="${ASYNCFLOW_PORT_BASE:-8888}"
PYTHON="${PYTHON:-python}"
if [ "${SLURM_PROCID:?not inside a Slurm step (start with srun)}" = 0 ]; then
    exec "$PYTHON" "$(dirname "$0")/../train.py" --resolver slurm --jobs "$ASYNCFLOW_JOBS" \
        --port-base "$PORT_BASE" --steps "${ASYNCFLOW_STEPS:-200}" \
        --checkpoint-dir "${ASYNCFLOW_CHECKPOINT_DIR:-checkpoints}"
fi
# Every task writes its own checkpoint shard: confine its file ops to the (shared) checkpoint dir.
exec "$PYTHON" -m asyncflow worker --resolver slurm --jobs "$ASYNCFLOW_JOBS" \
    --port-base "$PORT_BASE" --log-level WARNING \
    --data-dir "${ASYNCFLOW_CHECKPOINT_DIR:-checkpoints}"
